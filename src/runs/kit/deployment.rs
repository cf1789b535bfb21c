//! The GitHub deployment a deploy execution records (issue 14), so that
//! GitHub's Environments panel and a commit's deployment history show what
//! Sluice deployed: one deployment per execution, in the deploy's
//! environment (`[deploy] environment`, or the branch's name when there is
//! none), of the pushed commit (a rollback, an older commit pushed again,
//! is a new deployment of it), with statuses that follow the run:
//!
//! | the run | status |
//! | --- | --- |
//! | recorded, waiting for a confirmation or its turn | `queued` |
//! | the deploy command starts | `in_progress` |
//! | it exits 0 | `success` (older successes of the environment go `inactive`: GitHub's `auto_inactive`) |
//! | it fails or times out | `failure` |
//! | Sluice could not run it (an infrastructure fault) | `error` |
//! | superseded, not current, timed out in the queue or unconfirmed, skipped by an operator | `inactive`, naming the newer revision when there is one |
//! | terminated before its command started / while it ran | `inactive` / `error` |
//!
//! Every call is a journaled step with `github_step()` retries and observes
//! before it acts (`github::deployments`). Recording a deployment never
//! decides a deploy: GitHub refusing one (an installation that has not
//! granted `deployments: write`) deploys all the same, and the check run
//! says why there is no deployment.

use crate::engine::{Ctx, RunError, Status, StepFailure};
use crate::gates::{fence, serial, SkipReason};
use crate::github::{DeploymentState, NewDeployment, NewStatus};

use super::command::{self, publishable_url, DEPLOY_COMMAND_STEP};
use super::config::DeployConfig;
use super::gate::Held;
use super::inputs::DeployInput;
use super::report::{details_url, github_failure, github_step, Verdict};
use super::tags::FailureTag;
use super::RunEnv;

pub const CREATE_STEP: &str = "create deployment";
const QUEUED_STEP: &str = "deployment: queued";
const IN_PROGRESS_STEP: &str = "deployment: in progress";
const CONCLUDE_STEP: &str = "deployment: conclude";
const RETIRE_STEP: &str = "deployment: retire earlier";

/// The deployment an execution recorded, or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub id: Option<u64>,
    /// The GitHub environment it is in (`environment_name`).
    pub environment: String,
    /// Marked `transient_environment`: GitHub retires nothing of it, and
    /// neither does Sluice (`retire_replaced`).
    pub transient: bool,
    /// For the check run's summary when GitHub would not record one.
    pub note: Option<String>,
}

impl Recorded {
    /// The verdict, with the note saying why there is no deployment.
    pub fn noted(&self, verdict: Verdict) -> Verdict {
        match &self.note {
            Some(note) => verdict.with_note(note.clone()),
            None => verdict,
        }
    }
}

/// The GitHub environment a deploy records its deployment in: the
/// operator's environment it selects, else its branch (with its lane's
/// label, so two lanes of one branch do not mark each other inactive).
pub fn environment_name(input: &DeployInput, deploy: &DeployConfig) -> String {
    match (&deploy.environment, &deploy.label) {
        (Some(environment), _) => environment.clone(),
        (None, Some(label)) => format!("{} ({label})", input.branch),
        (None, None) => input.branch.clone(),
    }
}

/// A step that gave up on GitHub (its retries, its timeout, a refusal):
/// what recording a deployment may swallow. Everything else (a suspension,
/// a terminate, the run's own limits) is the run's to handle.
fn gave_up(e: &RunError) -> bool {
    matches!(
        e,
        RunError::RetriesExhausted { .. }
            | RunError::NonRetryable { .. }
            | RunError::StepTimedOut { .. }
    )
}

/// Creates the execution's deployment (or finds the one it created), then
/// marks it `queued`.
pub async fn open(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    deploy: &DeployConfig,
) -> Result<Recorded, RunError> {
    open_in(ctx, env, input, deploy, None).await
}

/// Where a deployment is recorded when the run names it (a preview: its
/// pull request's own environment, always transient), instead of
/// `environment_name` and the operator environment's flags.
#[derive(Debug, Clone, Copy)]
pub struct Place<'a> {
    pub environment: &'a str,
    pub transient: bool,
}

/// `open`, in `place` when given.
pub async fn open_in(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    deploy: &DeployConfig,
    place: Option<Place<'_>>,
) -> Result<Recorded, RunError> {
    let environment = place.map_or_else(
        || environment_name(input, deploy),
        |p| p.environment.to_owned(),
    );
    let flags = deploy.environment.as_deref().and_then(|name| {
        env.environments
            .grant(name, &input.repo, &input.branch)
            .ok()
    });
    let description = format!("Sluice deploy of {} from {}", input.sha, input.branch);
    let transient = match place {
        Some(p) => Some(p.transient),
        None => flags.and_then(|e| e.transient),
    };
    let new = NewDeployment {
        sha: &input.sha,
        environment: &environment,
        execution_id: ctx.instance_id(),
        generation: ctx.generation(),
        description: &description,
        production: flags
            .and_then(|e| e.production)
            .filter(|_| transient != Some(true)),
        transient,
    };
    let created = ctx
        .step(CREATE_STEP, github_step(), |_| async {
            retire_earlier(env, input, ctx.instance_id(), ctx.generation())
                .await
                .map_err(github_failure)?;
            env.github
                .ensure_deployment(input.installation_id, &input.repo, &new)
                .await
                .map_err(github_failure)
        })
        .await;
    let recorded = match created {
        Ok(id) => Recorded {
            id: Some(id),
            environment: environment.clone(),
            transient: new.transient == Some(true),
            note: None,
        },
        Err(e) if gave_up(&e) => Recorded {
            id: None,
            environment: environment.clone(),
            transient: new.transient == Some(true),
            note: Some(format!(
                "Note: GitHub recorded no deployment for this deploy ({e}); the deploy itself \
                 went ahead. An App that lacks `deployments: write` must be granted it (the \
                 App's settings, then each installation accepts the new permission)."
            )),
        },
        Err(e) => return Err(e),
    };
    post_queued(ctx, env, input, deploy, &recorded).await?;
    Ok(recorded)
}

/// Marks a recorded deployment `queued`: waiting for a confirmation or its
/// turn.
async fn post_queued(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    deploy: &DeployConfig,
    recorded: &Recorded,
) -> Result<(), RunError> {
    let description = if deploy.confirm.unwrap_or(false) {
        "Waiting for an operator's confirmation, then for its turn."
    } else {
        "Waiting for its turn: one deploy of the branch at a time."
    };
    let step = Post {
        step: QUEUED_STEP,
        kind: Kind::Ordinary,
        log_url: None,
        fence: None,
    };
    post(ctx, env, input, recorded, &step, |_| {
        Some(status(DeploymentState::Queued, description.into()))
    })
    .await
}

/// What the deploy command left for its deployment's last status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Ran {
    /// The signed link to its log (`LOG_LINK_SECRET` set).
    pub log_url: Option<String>,
    /// The URL it reported for the environment (`SLUICE_ENVIRONMENT_URL=`).
    pub environment_url: Option<String>,
    /// `conclude_held` gave the deployment its last status already.
    pub concluded: bool,
}

/// Marks the deployment `in_progress`: its command is about to start, its
/// log at `log_url` (else the execution's page).
pub async fn started(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    recorded: &Recorded,
    log_url: Option<&str>,
) -> Result<(), RunError> {
    let step = Post {
        step: IN_PROGRESS_STEP,
        kind: Kind::Ordinary,
        log_url,
        fence: None,
    };
    post(ctx, env, input, recorded, &step, |_| {
        Some(status(
            DeploymentState::InProgress,
            "Running the deploy command.".into(),
        ))
    })
    .await
}

/// Gives the deployment its last status from the command's verdict while
/// the execution still holds its group, before the gates release it: no
/// newer deploy can post its `success` first (which this one's would then
/// retire). The success is fenced: posted only while the execution holds
/// the group, else `inactive` (a newer deploy took the group over and ran
/// after this one's process ended).
pub async fn conclude_held(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    recorded: &Recorded,
    (verdict, ran): (&Verdict, &Ran),
    held: &Held<'_>,
) -> Result<(), RunError> {
    let posting = verdict_status(verdict, ran.environment_url.as_deref());
    let process = command::process_id(ctx.instance_id(), DEPLOY_COMMAND_STEP, ctx.generation());
    let step = Post {
        step: CONCLUDE_STEP,
        kind: Kind::Cleanup,
        log_url: ran.log_url.as_deref(),
        fence: held.group.map(|group| SuccessFence {
            group,
            gate_id: held.gate_id.as_str(),
            process_id: process.as_str(),
        }),
    };
    post(ctx, env, input, recorded, &step, |_| Some(posting.clone())).await
}

/// Gives the deployment its last status from how the run's work ended,
/// unless `conclude_held` did (a cleanup step: it runs for a terminating
/// instance too). A suspension posts nothing: the run resumes.
pub async fn conclude(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    recorded: &Recorded,
    result: &Result<Verdict, RunError>,
    ran: &Ran,
) -> Result<(), RunError> {
    if ran.concluded {
        return Ok(());
    }
    let ending = match result {
        Err(e) if e.is_suspension() => return Ok(()),
        Ok(verdict) => Ending::Known(verdict_status(verdict, ran.environment_url.as_deref())),
        Err(RunError::Terminated) => Ending::Abandoned(Left::Terminated),
        Err(e) => Ending::Known(status(
            DeploymentState::Error,
            format!("Sluice could not run this deploy: {e} ({})", e.tag()),
        )),
    };
    let step = Post {
        step: CONCLUDE_STEP,
        kind: Kind::Cleanup,
        log_url: ran.log_url.as_deref(),
        fence: None,
    };
    post(ctx, env, input, recorded, &step, |latest| match &ending {
        Ending::Known(s) => Some(after_an_earlier_start(s, latest)),
        Ending::Abandoned(how) => abandoned_status(*how, latest),
    })
    .await
}

/// A deployment whose command an earlier generation started (it is still
/// `in_progress`: a restart past the gates reuses it) is never retired as
/// `inactive` by a later generation that deployed nothing: that command
/// may have deployed, so the honest last status is `error`.
fn after_an_earlier_start(posting: &Posting, latest: Option<DeploymentState>) -> Posting {
    if posting.state != DeploymentState::Inactive || latest != Some(DeploymentState::InProgress) {
        return posting.clone();
    }
    status(
        DeploymentState::Error,
        format!(
            "An earlier attempt's command started and was never concluded; the environment may \
             hold what it deployed. This attempt: {}",
            posting.description
        ),
    )
}

/// How the run's work ended, for `conclude`.
enum Ending {
    Known(Posting),
    /// Ended from outside: what to post depends on how far it got.
    Abandoned(Left),
}

/// A status as the run decides it (the log link is added when it is posted).
#[derive(Debug, Clone, PartialEq)]
pub struct Posting {
    pub state: DeploymentState,
    pub description: String,
    pub environment_url: Option<String>,
}

fn status(state: DeploymentState, description: String) -> Posting {
    Posting {
        state,
        description,
        environment_url: None,
    }
}

/// The one mapping from a verdict to a deployment's last status.
pub fn verdict_status(verdict: &Verdict, environment_url: Option<&str>) -> Posting {
    match verdict {
        Verdict::Passed { .. } => Posting {
            state: DeploymentState::Success,
            description: "Deployed by Sluice.".into(),
            environment_url: environment_url.map(str::to_owned),
        },
        Verdict::Failed { summary } | Verdict::TimedOut { summary } => {
            status(DeploymentState::Failure, first_line(summary))
        }
        Verdict::InfraFault { summary } => status(DeploymentState::Error, first_line(summary)),
        Verdict::Skipped {
            reason,
            summary,
            newer,
            ..
        } => status(
            DeploymentState::Inactive,
            skip_description(*reason, newer.as_deref(), summary),
        ),
        Verdict::Superseded { newer, .. } => status(
            DeploymentState::Inactive,
            format!("Not deployed: superseded by a newer revision, {newer}."),
        ),
    }
}

/// A skip's description names the newer revision early, so GitHub's
/// 140-character limit never cuts it off.
fn skip_description(reason: Option<SkipReason>, newer: Option<&str>, summary: &str) -> String {
    match (reason, newer) {
        (Some(SkipReason::Superseded), Some(n)) => {
            format!("Not deployed: superseded by a newer revision, {n}.")
        }
        (Some(SkipReason::NotCurrent), Some(n)) => {
            format!("Not deployed: not the branch head; the head is {n}.")
        }
        (_, Some(n)) => format!("Not deployed: {n} replaced it."),
        (_, None) => first_line(summary),
    }
}

fn first_line(summary: &str) -> String {
    summary.lines().next().unwrap_or_default().trim().to_owned()
}

/// How an execution left a deployment it never concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// An operator terminated it.
    Terminated,
    /// It errored from outside its body (a crash loop).
    Errored,
    /// An operator restarted it, and the restart ran the deploy from before
    /// its deployment was recorded: the new attempt is a deployment of its
    /// own (or none, when the restart deploys nothing).
    Restarted,
}

impl Left {
    /// How an instance that ended from outside left its deployment.
    pub fn of(status: Status) -> Left {
        match status {
            Status::Terminated => Left::Terminated,
            _ => Left::Errored,
        }
    }
}

/// What an execution that left a deployment (`Left`) posts on it, given its
/// latest state: nothing when it already ended; `error` when its command had
/// started (the environment may be partly deployed); `inactive` when it
/// never did (an errored run's deployment is `error` either way).
pub fn abandoned_status(how: Left, latest: Option<DeploymentState>) -> Option<Posting> {
    if latest.is_some_and(DeploymentState::is_terminal) {
        return None;
    }
    let running = latest == Some(DeploymentState::InProgress);
    let (state, description) = match (how, running) {
        (Left::Terminated, true) => (
            DeploymentState::Error,
            "Terminated by an operator while deploying; the environment may be partly deployed.",
        ),
        (Left::Terminated, false) => (
            DeploymentState::Inactive,
            "Not deployed: terminated by an operator before its command started.",
        ),
        (Left::Restarted, true) => (
            DeploymentState::Error,
            "Restarted by an operator while deploying; the environment may be partly deployed.",
        ),
        (Left::Restarted, false) => (
            DeploymentState::Inactive,
            "Not deployed: restarted by an operator, a new attempt replaces it.",
        ),
        (Left::Errored, true) => (
            DeploymentState::Error,
            "Sluice could not finish this deploy; the environment may be partly deployed.",
        ),
        (Left::Errored, false) => (DeploymentState::Error, "Sluice could not run this deploy."),
    };
    Some(status(state, description.into()))
}

/// Retires what earlier generations of the execution left live (a restart
/// that records a deployment of its own, or deploys nothing).
async fn retire_earlier(
    env: &RunEnv<'_>,
    input: &DeployInput,
    instance_id: &str,
    generation: u32,
) -> Result<(), crate::github::GitHubError> {
    if generation == 0 {
        return Ok(());
    }
    let (installation, repo) = (input.installation_id, input.repo.as_str());
    let found = env
        .github
        .find_deployments(installation, repo, &input.sha, None, instance_id)
        .await?;
    for f in found.iter().filter(|f| f.generation < generation) {
        let latest = env
            .github
            .deployment_state(installation, repo, f.id)
            .await?;
        let Some(s) = abandoned_status(Left::Restarted, latest) else {
            continue;
        };
        let log_url = link(env, instance_id, None);
        let new = NewStatus {
            state: s.state,
            description: &s.description,
            log_url: log_url.as_deref(),
            environment_url: None,
        };
        env.github
            .create_deployment_status(installation, repo, f.id, &new)
            .await?;
    }
    Ok(())
}

/// A restarted execution whose restart deploys nothing (its configuration
/// now refuses or lacks the deploy): what earlier generations recorded is
/// retired. Generation 0 has nothing earlier, and takes no step.
pub async fn retire_on_restart(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
) -> Result<(), RunError> {
    if ctx.generation() == 0 {
        return Ok(());
    }
    let retired = ctx
        .cleanup_step(RETIRE_STEP, github_step(), |_| async {
            retire_earlier(env, input, ctx.instance_id(), ctx.generation())
                .await
                .map_err(github_failure)
        })
        .await;
    match retired {
        Err(e) if !gave_up(&e) => Err(e),
        _ => Ok(()),
    }
}

/// The success as posted: as is while the group is held; `inactive` when
/// a newer deploy took the group over and ran after this one; else (the
/// group lost, nobody ran since) a success that says so. A taker that
/// fences after this check posts its own success later, retiring this one.
async fn fenced_success(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    f: SuccessFence<'_>,
    success: Posting,
) -> Result<Posting, StepFailure> {
    let gate = |e: crate::store::StoreError| FailureTag::Gate.retryable(e.to_string());
    if serial::heartbeat(env.db, f.group, f.gate_id, ctx.now_ms())
        .await
        .map_err(gate)?
    {
        return Ok(success);
    }
    if fence::replaced_in_group(env.db, f.group, f.process_id)
        .await
        .map_err(gate)?
    {
        return Ok(taken_over());
    }
    Ok(Posting {
        description: "Deployed; it lost its group while it ran (it stalled), and no newer \
                      deploy has run since."
            .into(),
        ..success
    })
}

/// A success posted after a newer deploy took the group over would retire
/// the newer one's (GitHub's `auto_inactive`): this deploy ran, but what the
/// environment now runs is the newer one's.
fn taken_over() -> Posting {
    status(
        DeploymentState::Inactive,
        "Deployed, but a newer deploy took the group over and ran after it.".into(),
    )
}

/// A status's log link: the command's signed log link when there is one,
/// else the execution's page (`GET /v1/executions/{id}`, the operator's
/// API), when `PUBLIC_URL` makes either a URL GitHub can show.
fn link(env: &RunEnv<'_>, instance_id: &str, log_url: Option<&str>) -> Option<String> {
    let url = log_url.map_or_else(|| details_url(env, instance_id), str::to_owned);
    Some(url).filter(|u| publishable_url(u))
}

/// Whether `next` still needs posting on a deployment whose latest state
/// is `latest`: not when it is there already (a replayed step whose answer
/// was lost), and no `success` over an `inactive` (GitHub's `auto_inactive`
/// retired it meanwhile: a newer deploy succeeded after this one's first
/// attempt applied).
pub fn needs_posting(latest: Option<DeploymentState>, next: DeploymentState) -> bool {
    latest != Some(next)
        && !(next == DeploymentState::Success && latest == Some(DeploymentState::Inactive))
}

/// Which steps a status is posted in: the queued and in-progress statuses in
/// ordinary steps (a terminate stops the run before them), the conclusion
/// in a cleanup step (it runs for a terminating instance too).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Ordinary,
    Cleanup,
}

/// How one status is posted.
struct Post<'a> {
    step: &'a str,
    kind: Kind,
    /// The status's log link (else the execution's page).
    log_url: Option<&'a str>,
    /// What a `success` is fenced by.
    fence: Option<SuccessFence<'a>>,
}

/// A `success` is posted while the execution holds its group; one that lost
/// it posts `success` only when no newer process of the group was fenced
/// since its own (nobody ran after it: it is what the environment holds).
#[derive(Clone, Copy)]
struct SuccessFence<'a> {
    group: &'a str,
    gate_id: &'a str,
    /// The deploy command's process.
    process_id: &'a str,
}

/// One status step: `decide` sees the deployment's latest state and says
/// what to post (None: nothing). A deployment GitHub would not take a
/// status for keeps its last one; the deploy goes on.
async fn post(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    recorded: &Recorded,
    how: &Post<'_>,
    decide: impl Fn(Option<DeploymentState>) -> Option<Posting>,
) -> Result<(), RunError> {
    let Some(id) = recorded.id else {
        return Ok(());
    };
    let target = Target {
        env,
        input,
        recorded,
        id,
        log_url: link(env, ctx.instance_id(), how.log_url),
    };
    let body = |_| post_once(ctx, &target, how, &decide);
    let posted = match how.kind {
        Kind::Ordinary => ctx.step(how.step, github_step(), body).await,
        Kind::Cleanup => ctx.cleanup_step(how.step, github_step(), body).await,
    };
    match posted {
        Err(e) if !gave_up(&e) => Err(e),
        _ => Ok(()),
    }
}

/// The deployment a status step posts on.
struct Target<'a> {
    env: &'a RunEnv<'a>,
    input: &'a DeployInput,
    recorded: &'a Recorded,
    id: u64,
    log_url: Option<String>,
}

/// One attempt of a status step: observe, decide (a success fenced by the
/// group), post what is not there yet; after a success (posted now or by an
/// attempt whose answer was lost), retire the success it replaces.
async fn post_once(
    ctx: &Ctx<'_>,
    t: &Target<'_>,
    how: &Post<'_>,
    decide: &impl Fn(Option<DeploymentState>) -> Option<Posting>,
) -> Result<(), StepFailure> {
    let (installation, repo) = (t.input.installation_id, t.input.repo.as_str());
    let github = &t.env.github;
    let latest = github
        .deployment_state(installation, repo, t.id)
        .await
        .map_err(github_failure)?;
    let decided = match (decide(latest), how.fence) {
        (Some(s), Some(f)) if s.state == DeploymentState::Success => {
            Some(fenced_success(ctx, t.env, f, s).await?)
        }
        (decided, _) => decided,
    };
    let Some(s) = decided else {
        return Ok(());
    };
    if needs_posting(latest, s.state) {
        let new = NewStatus {
            state: s.state,
            description: &s.description,
            log_url: t.log_url.as_deref(),
            environment_url: s.environment_url.as_deref(),
        };
        github
            .create_deployment_status(installation, repo, t.id, &new)
            .await
            .map_err(github_failure)?;
    } else if latest != Some(s.state) {
        return Ok(());
    }
    if s.state == DeploymentState::Success && !t.recorded.transient {
        retire_replaced(t).await.map_err(github_failure)?;
    }
    Ok(())
}

/// Earlier deployments of the environment a success reads, newest first,
/// looking for the success it replaces. Every success retires the one
/// before it, so the scan stops at the first deployment that ever succeeded
/// (usually the first it reads); 30 lets that many deploys in a row fail or
/// be skipped in between, and bounds the reads of one step.
const RETIRE_SCAN_MAX: usize = 30;

/// GitHub's `auto_inactive` retires earlier successes only in non-transient,
/// non-production environments (as documented): a success in a production
/// one retires the success of this App that it replaces itself, naming its
/// own revision. In a non-production environment GitHub did already, and
/// this reads one deployment's statuses and posts nothing; a transient
/// environment's deployments are left as GitHub leaves them.
async fn retire_replaced(t: &Target<'_>) -> Result<(), crate::github::GitHubError> {
    let (installation, repo) = (t.input.installation_id, t.input.repo.as_str());
    let github = &t.env.github;
    let earlier = github
        .environment_deployments(installation, repo, &t.recorded.environment)
        .await?;
    let description = format!("Replaced: {} was deployed after it.", t.input.sha);
    for older in earlier
        .into_iter()
        .filter(|d| *d < t.id)
        .take(RETIRE_SCAN_MAX)
    {
        let history = github.deployment_history(installation, repo, older).await?;
        match history.first().copied().flatten() {
            Some(DeploymentState::Success) => {
                let new = NewStatus {
                    state: DeploymentState::Inactive,
                    description: &description,
                    log_url: t.log_url.as_deref(),
                    environment_url: None,
                };
                return github
                    .create_deployment_status(installation, repo, older, &new)
                    .await;
            }
            // Once a success, since retired: what came before it was
            // retired with it.
            _ if history.contains(&Some(DeploymentState::Success)) => return Ok(()),
            _ => {}
        }
    }
    Ok(())
}

/// After an execution ended from outside (terminated while it waited, a
/// crash loop): its deployment gets the status `abandoned_status` says.
/// Outside any run, so best effort: GitHub down leaves it as it was, as
/// `report::conclude_abandoned` leaves a check run.
pub async fn conclude_abandoned(
    env: &RunEnv<'_>,
    input: &DeployInput,
    instance_id: &str,
    how: Status,
) {
    let (installation, repo) = (input.installation_id, input.repo.as_str());
    // The newest is the last generation's; a restart retired the earlier.
    let Some(id) = env
        .github
        .find_deployments(installation, repo, &input.sha, None, instance_id)
        .await
        .ok()
        .and_then(|found| found.first().map(|f| f.id))
    else {
        return;
    };
    let Ok(latest) = env.github.deployment_state(installation, repo, id).await else {
        return;
    };
    let Some(s) =
        abandoned_status(Left::of(how), latest).filter(|s| needs_posting(latest, s.state))
    else {
        return;
    };
    let log_url = link(env, instance_id, None);
    let new = NewStatus {
        state: s.state,
        description: &s.description,
        log_url: log_url.as_deref(),
        environment_url: None,
    };
    let _ = env
        .github
        .create_deployment_status(installation, repo, id, &new)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::kit::tags::SkipTag;

    fn skipped(reason: Option<SkipReason>, newer: Option<&str>, summary: &str) -> Verdict {
        Verdict::Skipped {
            reason,
            tag: SkipTag::RunSkipped,
            summary: summary.into(),
            newer: newer.map(str::to_owned),
        }
    }

    #[test]
    fn every_verdict_maps_to_one_status() {
        let s = |summary: &str| summary.to_owned();
        let cases = [
            (
                Verdict::Passed { summary: s("ok") },
                DeploymentState::Success,
            ),
            (
                Verdict::Failed {
                    summary: s("`x` exited 3\n\nlog"),
                },
                DeploymentState::Failure,
            ),
            (
                Verdict::TimedOut {
                    summary: s("timed out"),
                },
                DeploymentState::Failure,
            ),
            (
                Verdict::InfraFault {
                    summary: s("no sandbox"),
                },
                DeploymentState::Error,
            ),
            (
                skipped(None, None, "Not run: an operator skipped it."),
                DeploymentState::Inactive,
            ),
            (
                Verdict::Superseded {
                    summary: s("x"),
                    newer: "b".repeat(40),
                },
                DeploymentState::Inactive,
            ),
        ];
        for (verdict, state) in cases {
            let st = verdict_status(&verdict, Some("https://x.example"));
            assert_eq!(st.state, state, "{verdict:?}");
            assert_eq!(
                st.environment_url.is_some(),
                state == DeploymentState::Success,
                "only a success publishes the environment URL"
            );
            assert!(!st.description.contains('\n'), "{st:?}");
        }
        let failed = verdict_status(
            &Verdict::Failed {
                summary: s("`x` exited 3\n\nlog"),
            },
            None,
        );
        assert_eq!(failed.description, "`x` exited 3");
    }

    #[test]
    fn a_skip_names_the_newer_revision_within_githubs_limit() {
        let newer = "c".repeat(40);
        for reason in SkipReason::ALL {
            let long = format!("Not run: {} {}", "x".repeat(300), "y");
            let st = verdict_status(&skipped(Some(reason), Some(&newer), &long), None);
            assert!(st.description.contains(&newer), "{st:?}");
            assert!(
                st.description.chars().count() <= crate::github::deployments::DESCRIPTION_CHARS_MAX,
                "{st:?}"
            );
        }
        let timed_out = verdict_status(
            &skipped(
                Some(SkipReason::QueuedTimeout),
                None,
                "Not run: a waited over 60 minutes behind a running one.",
            ),
            None,
        );
        assert_eq!(
            timed_out.description,
            "Not run: a waited over 60 minutes behind a running one."
        );
    }

    #[test]
    fn an_abandoned_deployment_is_inactive_before_its_command_and_error_after() {
        use DeploymentState::*;
        let of = |how, latest| abandoned_status(how, latest).map(|s| s.state);
        for how in [Left::Terminated, Left::Restarted] {
            assert_eq!(of(how, Some(Queued)), Some(Inactive));
            assert_eq!(of(how, None), Some(Inactive));
            assert_eq!(of(how, Some(InProgress)), Some(Error));
        }
        assert_eq!(of(Left::Errored, Some(Queued)), Some(Error));
        assert_eq!(of(Left::Errored, Some(InProgress)), Some(Error));
        for ended in [Success, Failure, Error, Inactive] {
            for how in [Left::Terminated, Left::Errored, Left::Restarted] {
                assert_eq!(of(how, Some(ended)), None, "{ended:?}");
            }
        }
        assert_eq!(Left::of(Status::Terminated), Left::Terminated);
        assert_eq!(Left::of(Status::Errored), Left::Errored);
    }

    #[test]
    fn nothing_is_posted_twice_and_no_success_revives_a_retired_deployment() {
        use DeploymentState::*;
        assert!(needs_posting(None, Queued));
        assert!(!needs_posting(Some(Queued), Queued));
        assert!(
            needs_posting(Some(Success), Queued),
            "a restart queues again"
        );
        assert!(!needs_posting(Some(Inactive), Success));
        assert!(needs_posting(Some(InProgress), Success));
    }
}
