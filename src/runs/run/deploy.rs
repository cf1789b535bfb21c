//! The `deploy` run: on a push to the branch that `.sluice.toml` on the
//! default branch names, with the environment it selects granting this
//! repository and branch (`runs::environment`), run the deploy command,
//! serialized per repository + branch (+ label) so two deploys never
//! overlap and the newest commit wins (ADR-0004), with the group's queue
//! policy, and report `sluice/deploy`.
//!
//! The run reads as its steps: read config, [grant environment], [set its
//! ceiling], record the GitHub deployment (`runs::deployment`), [wait for
//! confirmation], then with the group, a slot and the sandbox held
//! (`gate::with_gates`): re-read the head, mark the deployment in progress,
//! run the command; then conclude the deployment and report.
//! (ADR-0004: docs/adr/0004-serialized-run-groups.md)

use std::cell::Cell;
use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::engine::{Ctx, RestartRequest, RunError, RunOutcome, Status, StepConfig};
use crate::gates::policy::{QueuePolicy, SkipReason};
use crate::limits::RUN_DURATION_MS_DEFAULT;

use crate::runs::kit::approval::{CONFIRM_EVENT, CONFIRM_WAIT};
use crate::runs::kit::command::verdict_of;
use crate::runs::kit::command::{run_command, step_log_url, CommandSpec};
use crate::runs::kit::config::{command_timeout_ms, parse_duration_ms, DeployConfig, RepoConfig};
use crate::runs::kit::deployment;
use crate::runs::kit::gate::{self, with_gates, BranchRef, Gates, Held, Pool, Serial};
use crate::runs::kit::inputs::DeployInput;
use crate::runs::kit::needs::{self, Needs};
use crate::runs::kit::notify::{self, AutoSkipped};
use crate::runs::kit::report::CheckRunOf;
use crate::runs::kit::report::{github_failure, github_step, reported, CheckTarget, Verdict};
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::tags::{FailureTag, SkipTag};
use crate::runs::kit::{configured_at, unless_ignored, Configured, RunEnv};
use crate::secret::Secret;
use crate::store::previews;

pub const DEPLOY_CHECK_NAME: &str = "sluice/deploy";
/// A confirmation nobody gives is bounded (ADR-0001 rule 3: hibernation
/// only for bounded human decisions): 72 h, as release approval.
/// (ADR-0001: docs/adr/0001-durable-execution-scope.md)
const CONFIRMATION_TIMEOUT_MS_DEFAULT: i64 = crate::limits::HUMAN_DECISION_WINDOW_MS_DEFAULT;
/// What a deploy may take once confirmed: the default run ceiling. A
/// deploy that asks for confirmation gets the confirmation window plus this.
const DEPLOY_BUDGET_MS: i64 = RUN_DURATION_MS_DEFAULT;

const _: () = assert!(
    CONFIRMATION_TIMEOUT_MS_DEFAULT + needs::NEEDS_WAIT_MS_MAX + DEPLOY_BUDGET_MS
        <= crate::limits::RUN_DURATION_MS_MAX
);

/// The serialization group: repository, branch and lane label.
pub fn group_key(input: &DeployInput, deploy: &DeployConfig) -> String {
    match &deploy.label {
        Some(label) => format!("deploy:{}:{}:{label}", input.repo, input.branch),
        None => format!("deploy:{}:{}", input.repo, input.branch),
    }
}

pub fn policy_of(deploy: &DeployConfig) -> Result<QueuePolicy, String> {
    let q = deploy.queue.clone().unwrap_or_default();
    let ms = |v: &Option<String>| v.as_deref().map(parse_duration_ms).transpose();
    QueuePolicy::from_config(
        q.supersede,
        ms(&q.queued_timeout)?,
        ms(&q.supersede_after)?,
        ms(&q.confirmation_timeout)?,
    )
    .map_err(|e| e.to_string())
}

/// The `deploy` run.
pub struct DeployRun;

#[async_trait(?Send)]
impl Run for DeployRun {
    const NAME: RunName = RunName::new("deploy");
    const CHECK_RUN: Option<&'static str> = Some(DEPLOY_CHECK_NAME);
    const RERUNNABLE: bool = true;
    const DISPATCHABLE: bool = true;
    const SCHEDULABLE: bool = true;
    const GATED: bool = true;
    type Input = DeployInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &DeployInput,
    ) -> Result<RunOutcome, RunError> {
        run(ctx, env, input).await
    }

    fn check_run(&self, input: &DeployInput) -> Option<CheckRunOf> {
        Some(CheckRunOf {
            name: DEPLOY_CHECK_NAME.into(),
            installation_id: input.installation_id,
            repo: input.repo.clone(),
            sha: input.sha.clone(),
        })
    }

    /// A deploy terminated while it waited (no pass ran to conclude it) or
    /// ended by a crash loop leaves its GitHub deployment `inactive` or
    /// `error` (`deployment::abandoned_status`).
    async fn abandoned(
        &self,
        env: &RunEnv<'_>,
        instance_id: &str,
        input: &DeployInput,
        status: Status,
    ) {
        deployment::conclude_abandoned(env, input, instance_id, status).await;
    }

    async fn prepare_restart(
        &self,
        env: &RunEnv<'_>,
        req: &RestartRequest<'_>,
    ) -> Result<u32, String> {
        prepare_restart(env, req).await
    }
}

async fn run(ctx: &Ctx<'_>, env: &RunEnv<'_>, input: &DeployInput) -> Result<RunOutcome, RunError> {
    let target = CheckTarget {
        name: DEPLOY_CHECK_NAME,
        installation_id: input.installation_id,
        repo: &input.repo,
        sha: &input.sha,
    };
    let branch = input.branch.as_str();
    let pick = |c: RepoConfig| {
        unless_ignored(c, &input.sender, |c| {
            c.deploy.filter(|d| d.branch == branch)
        })
    };
    // The deploy policy is the default branch's: a pusher of any other
    // branch cannot write it.
    let place = format!("on the default branch `{}`", input.default_branch);
    let reference = input.default_branch.as_str();
    let deploy = match configured_at(ctx, env, &target, reference, &place, pick).await? {
        Configured::Run(deploy) => deploy,
        Configured::Done(outcome) => return nothing_deployed(ctx, env, input, outcome).await,
    };
    let policy = match admitted_policy(ctx, env, input, &target, &deploy).await? {
        Ok(policy) => policy,
        Err(refused) => return nothing_deployed(ctx, env, input, refused).await,
    };
    let group = group_key(input, &deploy);
    let gates = Gates {
        serial: Some(Serial {
            group: &group,
            revision: &input.sha,
            // An explicit revision deploys whatever the branch's head is.
            head: (!input.imperative).then_some(BranchRef {
                installation_id: input.installation_id,
                repo: &input.repo,
                branch: &input.branch,
            }),
            policy: &policy,
            imperative: input.imperative,
        }),
        pools: &[Pool {
            name: gate::POOL,
            capacity: env.pool_capacity,
        }],
        // The check run is concluded after the release: the gates' verdict
        // is not yet the deploy's (`recorded_work` concludes the GitHub
        // deployment after the gates on a failure and notes its verdict),
        // and the group is held no longer than the deployment needs.
        report: None,
        sandbox: None,
    };
    let window_ms = confirmation_window(&deploy, &policy);
    extend_ceiling(ctx, &deploy, window_ms).await?;
    let mut newer = None;
    let ran = Cell::new(deployment::Ran::default());
    let lane = Lane::default();
    let outcome = reported(ctx, env, &target, |_| async {
        let verdict =
            recorded_work(ctx, env, (input, &deploy, &lane), &gates, window_ms, &ran).await?;
        if let Verdict::Skipped { newer: n, .. } = &verdict {
            newer = n.clone();
        }
        Ok(verdict)
    })
    .await?;
    notify_auto_skip(ctx, env, input, &outcome, newer.as_deref()).await?;
    Ok(outcome)
}

/// Waiting for a confirmation or for what it needs extends the run's
/// ceiling by that wait's bound (a deploy without either keeps the default).
pub(crate) async fn extend_ceiling(
    ctx: &Ctx<'_>,
    deploy: &DeployConfig,
    window_ms: Option<i64>,
) -> Result<(), RunError> {
    let needs_ms = if deploy.needs.is_empty() {
        0
    } else {
        needs::NEEDS_WAIT_MS_MAX
    };
    if window_ms.is_some() || needs_ms > 0 {
        let ceiling_ms = window_ms.unwrap_or(0) + needs_ms + DEPLOY_BUDGET_MS;
        ctx.set_ceiling("run ceiling", ceiling_ms).await?;
    }
    Ok(())
}

/// The deploy's queue policy once its environment admits it; a refusal
/// (the environment's, or an invalid `[deploy.queue]`) reported as the
/// check run's failure.
async fn admitted_policy(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    target: &CheckTarget<'_>,
    deploy: &DeployConfig,
) -> Result<Result<QueuePolicy, RunOutcome>, RunError> {
    let summary = match refused_environment(ctx, env, input, deploy).await? {
        Some(summary) => summary,
        None => match policy_of(deploy) {
            Ok(policy) => return Ok(Ok(policy)),
            Err(m) => format!("`[deploy.queue]` is invalid: {m}"),
        },
    };
    let failed = reported(ctx, env, target, |_| async {
        Ok(Verdict::Failed { summary })
    })
    .await?;
    Ok(Err(failed))
}

/// How a deploy lane other than a branch's differs (a pull request's
/// preview, `runs::preview`): where its deployment is recorded, what its
/// command is told besides, and whether a newer arrival may end its
/// confirmation wait (`preview::SUPERSEDED_BY`).
#[derive(Default)]
pub(crate) struct Lane<'a> {
    pub place: Option<deployment::Place<'a>>,
    pub vars: Vec<(String, String)>,
    pub supersedable: bool,
    /// The code is a fork's: its command gets no secret, checked again when
    /// it starts (the environment may have gained one while it waited).
    pub fork: bool,
    /// A preview's index row, marked live holding the group just before
    /// the command, so a teardown that held the group before it cannot
    /// leave the index saying torn down while this deploy is live.
    pub live: Option<previews::Started<'a>>,
}

/// What the deploy's work needs beside the gates.
struct Work<'a> {
    input: &'a DeployInput,
    deploy: &'a DeployConfig,
    lane: &'a Lane<'a>,
    /// The GitHub deployment the execution recorded.
    recorded: &'a deployment::Recorded,
    /// What the command left for the deployment's last status: its log
    /// link, the URL it reported for the environment.
    ran: &'a Cell<deployment::Ran>,
}

/// The deploy's work inside its check run: record the GitHub deployment,
/// do the work, conclude the deployment from how the work ended; `ran`
/// keeps what the command left (its log link, its environment URL).
pub(crate) async fn recorded_work(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    (input, deploy, lane): (&DeployInput, &DeployConfig, &Lane<'_>),
    gates: &Gates<'_>,
    window_ms: Option<i64>,
    ran: &Cell<deployment::Ran>,
) -> Result<Verdict, RunError> {
    let recorded = deployment::open_in(ctx, env, input, deploy, lane.place).await?;
    let work = Work {
        input,
        deploy,
        lane,
        recorded: &recorded,
        ran,
    };
    let result = deploy_work(ctx, env, &work, gates, window_ms).await;
    let last = ran.take();
    deployment::conclude(ctx, env, input, &recorded, &result, &last).await?;
    ran.set(last);
    Ok(recorded.noted(result?))
}

/// [Wait for the confirmation], then with the gates held, deploy.
async fn deploy_work(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    work: &Work<'_>,
    gates: &Gates<'_>,
    window_ms: Option<i64>,
) -> Result<Verdict, RunError> {
    if let Some(v) = needed(ctx, env, work).await? {
        return Ok(v);
    }
    if let Some(window_ms) = window_ms {
        if let Some(v) = confirm(ctx, work, window_ms).await? {
            return Ok(v);
        }
    }
    with_gates(ctx, env, gates, |held| deploy_held(ctx, env, work, held)).await
}

/// `[deploy] needs = ["check"]`: the commit's check passes before the
/// deploy joins the queue, or it deploys nothing (`needs_failed`). The wait
/// holds no group and no sandbox. A dispatched revision (a rollback) waits
/// for its own check too: the repository's dispatch key is readable by any
/// branch's workflow, so naming a revision proves no operator decided it;
/// a rollback target's check has normally passed already.
async fn needed(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    work: &Work<'_>,
) -> Result<Option<Verdict>, RunError> {
    let input = work.input;
    if work.deploy.needs.is_empty() {
        return Ok(None);
    }
    let why = match &input.needs_check {
        Some(needed) => match needs::await_needed(ctx, env, needed, &work.deploy.needs).await? {
            Needs::Met => return Ok(None),
            Needs::Failed(why) => why,
        },
        None => "this deploy was made before `needs` existed, so its check is unknown".into(),
    };
    Ok(Some(Verdict::Skipped {
        reason: Some(SkipReason::NeedsFailed),
        tag: SkipTag::RunSkipped,
        summary: format!(
            "Not deployed: {why}. `[deploy] needs` ({}) must pass first.",
            work.deploy.needs.join(", ")
        ),
        newer: None,
    }))
}

/// A deploy that ends before recording a deployment: on a restart, what
/// earlier generations recorded is retired (`deployment::retire_on_restart`).
async fn nothing_deployed(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    outcome: RunOutcome,
) -> Result<RunOutcome, RunError> {
    deployment::retire_on_restart(ctx, env, input).await?;
    Ok(outcome)
}

/// The confirmation window of a deploy that asks for one (`confirm`).
pub(crate) fn confirmation_window(deploy: &DeployConfig, policy: &QueuePolicy) -> Option<i64> {
    deploy.confirm.unwrap_or(false).then(|| {
        policy
            .confirmation_timeout_ms
            .unwrap_or(CONFIRMATION_TIMEOUT_MS_DEFAULT)
    })
}

/// Every automatic skip is announced (the queue-policy seed); an operator's
/// skip (no reason) stays silent.
async fn notify_auto_skip(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    outcome: &RunOutcome,
    newer: Option<&str>,
) -> Result<(), RunError> {
    let RunOutcome::Skipped {
        reason: Some(reason),
        ..
    } = outcome
    else {
        return Ok(());
    };
    let Some(r) = SkipReason::parse(reason) else {
        return Ok(());
    };
    let n = AutoSkipped {
        event: "deployment_auto_skipped",
        execution_id: ctx.instance_id(),
        repo: &input.repo,
        branch: &input.branch,
        revision: &input.sha,
        reason: r.as_str(),
        newer_revision: newer,
        tag: None,
        at_ms: ctx.now_ms(),
    };
    notify::auto_skipped(ctx, env, &n).await?;
    Ok(())
}

/// Waits (bounded) for an operator's confirmation before joining the
/// queue, so a deploy awaiting a human holds nothing. The window starts
/// when the wait does, and again on a restart (the replan).
async fn confirm(
    ctx: &Ctx<'_>,
    work: &Work<'_>,
    window_ms: i64,
) -> Result<Option<Verdict>, RunError> {
    let input = work.input;
    match ctx
        .wait_for_event(CONFIRM_WAIT, CONFIRM_EVENT, window_ms)
        .await
    {
        Ok(payload) if work.lane.supersedable => Ok(superseded_unconfirmed(&payload)),
        Ok(_) => Ok(None),
        Err(RunError::EventTimedOut { .. }) => Ok(Some(Verdict::Skipped {
            reason: Some(SkipReason::ConfirmationTimeout),
            tag: SkipTag::RunSkipped,
            summary: format!(
                "Not deployed: nobody confirmed {} within {} minutes (`confirmation_timeout`).",
                input.sha,
                window_ms / 60_000
            ),
            newer: None,
        })),
        Err(e) => Err(e),
    }
}

/// A confirmation wait ended by a newer arrival of the lane (a preview's
/// new head: `{"superseded_by": <sha>}`) rather than an operator: skipped
/// `superseded`, naming it, whatever the policy's supersede settings say
/// (the queue-policy seed: the lane has moved past this commit).
fn superseded_unconfirmed(payload: &serde_json::Value) -> Option<Verdict> {
    let by = payload
        .get(crate::runs::kit::preview::SUPERSEDED_BY)?
        .as_str()?
        .to_owned();
    Some(Verdict::Skipped {
        reason: Some(SkipReason::Superseded),
        tag: SkipTag::RunSkipped,
        summary: format!(
            "Not deployed: superseded by a newer head, {by}, before it was confirmed."
        ),
        newer: Some(by),
    })
}

/// Holding the group, a slot and the sandbox: re-read the head (a holder
/// whose commit is no longer the head skips), then run the command with
/// the secrets.
async fn deploy_held(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    work: &Work<'_>,
    held: Held<'_>,
) -> Result<Verdict, RunError> {
    let (input, deploy) = (work.input, work.deploy);
    let head = if input.imperative {
        None
    } else {
        match reread_head(ctx, env, input).await? {
            Dequeued::Head(head) => Some(head),
            // Nothing to compare with: the group's order stands.
            Dequeued::Unchecked => None,
            Dequeued::Unreadable => return Ok(head_unknown(input)),
        }
    };
    if let Some(h) = head.as_ref().filter(|h| **h != input.sha) {
        return Ok(Verdict::Skipped {
            reason: Some(SkipReason::NotCurrent),
            tag: SkipTag::RunSkipped,
            summary: format!(
                "Not deployed: `{}` moved on to {h} while this deploy waited.",
                input.branch
            ),
            newer: Some(h.clone()),
        });
    }
    if let Some(v) = pull_closed(ctx, env, work.lane).await? {
        return Ok(v);
    }
    let secret_env = match granted_secrets(env, input, deploy) {
        Ok(secrets) if work.lane.fork && !secrets.is_empty() => return Ok(fork_refused(deploy)),
        Ok(secrets) => secrets,
        Err(summary) => return Ok(Verdict::Failed { summary }),
    };
    mark_live(ctx, env, work.lane).await?;
    let timeout_ms = command_timeout_ms(deploy.timeout.as_deref())
        .map_err(|m| RunError::InvalidInput { message: m })?;
    let spec = CommandSpec {
        step: crate::runs::kit::command::DEPLOY_COMMAND_STEP,
        repo: &input.repo,
        sha: &input.sha,
        installation_id: input.installation_id,
        command: &deploy.command,
        timeout_ms,
        env: command_vars(input, deploy, head, &work.lane.vars),
        secret_env,
        held: &held,
        restore: &[],
        prepared: false,
        continues: None,
        pristine: false,
    };
    run_reported(ctx, env, work, &spec).await
}

/// A fork's command whose environment exports a secret by now (one added
/// after a maintainer asked for the preview): nothing runs.
fn fork_refused(deploy: &DeployConfig) -> Verdict {
    Verdict::Skipped {
        reason: None,
        tag: SkipTag::RunSkipped,
        summary: format!(
            "Not deployed: this code is a fork's, and environment `{}` exports secrets by now, \
             which a fork's code must never receive.",
            deploy.environment.as_deref().unwrap_or_default()
        ),
        newer: None,
    }
}

/// Holding the group: a preview whose pull request closed while it waited
/// (for a confirmation, a maintainer's press, the group) deploys nothing,
/// since its close's teardown may have run already and nothing would tear
/// it down (a lane without an index row has no pull request to ask about).
async fn pull_closed(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    lane: &Lane<'_>,
) -> Result<Option<Verdict>, RunError> {
    let Some(s) = lane.live.as_ref() else {
        return Ok(None);
    };
    let open = ctx
        .step("preview: pull request open?", github_step(), |_| async {
            env.github
                .pull_is_open(s.installation_id, s.repo, s.pr)
                .await
                .map_err(github_failure)
        })
        .await?;
    Ok((open != Some(true)).then(|| Verdict::Skipped {
        reason: Some(SkipReason::NotCurrent),
        tag: SkipTag::RunSkipped,
        summary: format!(
            "Not deployed: pull request #{} was closed while this preview waited.",
            s.pr
        ),
        newer: None,
    }))
}

/// Holding the group, a preview marks its index row live, naming this
/// execution (a lane without an index row marks nothing).
async fn mark_live(ctx: &Ctx<'_>, env: &RunEnv<'_>, lane: &Lane<'_>) -> Result<(), RunError> {
    let Some(started) = lane.live.as_ref() else {
        return Ok(());
    };
    ctx.step("preview: live", StepConfig::default(), |_| async {
        previews::started(env.db, started, ctx.now_ms())
            .await
            .map_err(|e| FailureTag::Gate.retryable(e.to_string()))
    })
    .await
}

/// What a deploy command is told (its secrets aside).
fn command_vars(
    input: &DeployInput,
    deploy: &DeployConfig,
    head: Option<String>,
    lane_vars: &[(String, String)],
) -> BTreeMap<String, String> {
    let mut vars = crate::runs::kit::command::input_vars(&input.inputs);
    vars.extend(lane_vars.iter().cloned());
    vars.insert("SLUICE_SHA".to_owned(), input.sha.clone());
    vars.insert(
        "SLUICE_HEAD_SHA".to_owned(),
        head.unwrap_or_else(|| input.sha.clone()),
    );
    vars.insert("SLUICE_BRANCH".to_owned(), input.branch.clone());
    vars.insert("SLUICE_REPO".to_owned(), input.repo.clone());
    if let Some(label) = &deploy.label {
        vars.insert("SLUICE_DEPLOY_LABEL".to_owned(), label.clone());
    }
    vars
}

/// Runs the command with its deployment `in_progress`, then gives the
/// deployment its last status while the gates are still held.
async fn run_reported(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    work: &Work<'_>,
    spec: &CommandSpec<'_>,
) -> Result<Verdict, RunError> {
    let input = work.input;
    // The command's log link shows its output while it runs.
    let live_log = step_log_url(env, ctx.instance_id(), spec.step);
    work.ran.set(deployment::Ran {
        log_url: live_log.clone(),
        ..deployment::Ran::default()
    });
    deployment::started(ctx, env, input, work.recorded, live_log.as_deref()).await?;
    let result = run_command(ctx, env, spec).await?;
    let verdict = verdict_of(&work.deploy.command, &result);
    let ran = deployment::Ran {
        log_url: result.log_url.clone().or(live_log),
        environment_url: result.environment_url.clone(),
        concluded: true,
    };
    let (recorded, held) = (work.recorded, spec.held);
    deployment::conclude_held(ctx, env, input, recorded, (&verdict, &ran), held).await?;
    work.ran.set(ran);
    Ok(verdict)
}

/// Re-reads of the head at dequeue: a GitHub blip is retried, suspending
/// between attempts past the inline bound. The holder's heartbeat stops
/// while it is suspended, so every delay stays well inside
/// `HOLDER_STALE_MS`: 5 s doubling over 5 retries is at most 80 s apart
/// and 155 s of waits in all (with six attempts that each hang to their
/// 60 s timeout, at most about 8.6 minutes), after which the deploy gives
/// up (`head_unknown`) rather than deploy a commit it cannot show is
/// current.
const HEAD_REREAD_RETRIES: u32 = 5;
const HEAD_REREAD_DELAY_MS: i64 = 5_000;
const _: () = assert!(
    HEAD_REREAD_DELAY_MS << (HEAD_REREAD_RETRIES - 1) <= crate::limits::HOLDER_STALE_MS / 3
);

/// What the dequeue's read of the branch head found.
#[derive(Debug, PartialEq)]
enum Dequeued {
    Head(String),
    /// Nothing to compare with: GitHub answered that the branch does not
    /// exist (ADR-0004's fallback), or the read failed in a journal an older
    /// version wrote, which then deployed (its replay must too).
    Unchecked,
    /// GitHub did not answer within the bound.
    Unreadable,
}

/// What a journaled dequeue read means.
fn dequeued_of(read: Result<Option<String>, RunError>) -> Result<Dequeued, RunError> {
    match read {
        Ok(Some(head)) => Ok(Dequeued::Head(head)),
        Ok(None) => Ok(Dequeued::Unchecked),
        Err(e) if e.is_suspension() || e == RunError::Terminated => Err(e),
        Err(e)
            if e.step_failure()
                .is_some_and(|f| FailureTag::HeadUnreadable.is(f)) =>
        {
            Ok(Dequeued::Unreadable)
        }
        Err(_) => Ok(Dequeued::Unchecked),
    }
}

/// The branch's head now (a holder whose commit is no longer it skips).
async fn reread_head(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
) -> Result<Dequeued, RunError> {
    let cfg = github_step().retries(
        HEAD_REREAD_RETRIES,
        HEAD_REREAD_DELAY_MS,
        crate::engine::Backoff::Exponential,
    );
    let read = ctx
        .step("re-read head", cfg, |_| async {
            env.github
                .branch_head(input.installation_id, &input.repo, &input.branch)
                .await
                .map_err(|e| FailureTag::HeadUnreadable.failure(e.to_string(), e.retryable()))
        })
        .await;
    dequeued_of(read)
}

/// The head could not be read at dequeue: nothing deployed, a neutral
/// check that says so (an automatic skip, announced).
fn head_unknown(input: &DeployInput) -> Verdict {
    Verdict::Skipped {
        reason: Some(SkipReason::HeadUnknown),
        tag: SkipTag::RunSkipped,
        summary: format!(
            "Not deployed: GitHub did not say what the head of `{}` is, so {} could not be \
             shown to be current; nothing was deployed. Push again or re-run the check.",
            input.branch, input.sha
        ),
        newer: None,
    }
}

/// Whether the environment the deploy selects lets this repository and
/// branch deploy, and a dispatched deploy showed where it came from as the
/// environment asks (`Environments::dispatch_check`, on the policy read
/// now: the dispatch's own check read it earlier), decided once and
/// journaled (a change of `ENVIRONMENTS` later is seen by
/// `granted_secrets`): the refusal's summary, or None.
pub(crate) async fn refused_environment(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    deploy: &DeployConfig,
) -> Result<Option<String>, RunError> {
    let Some(name) = deploy.environment.as_deref() else {
        return Ok(None);
    };
    let (repo, branch) = (input.repo.as_str(), input.branch.as_str());
    ctx.step("grant environment", StepConfig::default(), |_| async {
        if let Err(refusal) = env.environments.grant(name, repo, branch) {
            return Ok(Some(refusal.summary(name, repo, branch)));
        }
        let Some(dispatched) = &input.dispatch else {
            return Ok(None);
        };
        let origin = dispatched.origin.as_ref();
        Ok(env
            .environments
            .dispatch_check(Some(name), repo, branch, origin)
            .err()
            .map(|refusal| format!("Not deployed: {}.", refusal.sentence(name, repo, branch))))
    })
    .await
}

/// The secrets of the deploy's environment, read as the command starts: a
/// grant withdrawn since, or a secret the operator has not set, deploys
/// nothing, in words that name no secret.
pub(crate) fn granted_secrets(
    env: &RunEnv<'_>,
    input: &DeployInput,
    deploy: &DeployConfig,
) -> Result<Vec<(String, Secret)>, String> {
    let Some(name) = deploy.environment.as_deref() else {
        return Ok(Vec::new());
    };
    let environment = env
        .environments
        .grant(name, &input.repo, &input.branch)
        .map_err(|r| r.summary(name, &input.repo, &input.branch))?;
    let mut secrets = Vec::with_capacity(environment.secrets.len());
    for secret in &environment.secrets {
        match env.secrets.secret(secret) {
            Some(value) => secrets.push((secret.clone(), value)),
            None => {
                return Err(format!(
                    "Not deployed: environment `{name}` is missing one of its secrets; an \
                     operator must set every secret the environment lists (`wrangler secret \
                     list`)."
                ))
            }
        }
    }
    Ok(secrets)
}

/// A restart of a deploy re-enters its gate (`gate::prepare_restart`) and
/// never reuses a confirmation: when one was given, the restart starts at
/// or before the confirmation wait, which asks again.
pub(crate) async fn prepare_restart(
    env: &RunEnv<'_>,
    req: &RestartRequest<'_>,
) -> Result<u32, String> {
    let confirmed_at = req
        .entries
        .iter()
        .find(|e| e.name == CONFIRM_WAIT)
        .map(|e| e.seq);
    let from_seq = match confirmed_at {
        Some(c) if c < req.from_seq => c,
        _ => req.from_seq,
    };
    let adjusted = RestartRequest { from_seq, ..*req };
    let from_seq = gate::prepare_restart(env, &adjusted).await?;
    // A generation that queues again records a deployment of its own: the
    // previous one may already be terminal (a success still live on
    // GitHub), and posting this generation's statuses over it would lie.
    let created_at = req
        .entries
        .iter()
        .find(|e| e.name == deployment::CREATE_STEP)
        .map(|e| e.seq);
    match created_at {
        Some(c) if c < from_seq && !gate::is_past_gates(req.entries, from_seq) => Ok(c),
        _ => Ok(from_seq),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::StepFailure;

    /// A journal an older version wrote recorded a failed dequeue read as
    /// `GitHubApi` and deployed: its replay deploys too, while this
    /// version's failure (`HeadUnreadable`) ends `head_unknown`.
    #[test]
    fn a_failed_dequeue_read_keeps_the_meaning_its_journal_gave_it() {
        let failed = |tag: &str| {
            Err(RunError::RetriesExhausted {
                step: "re-read head".into(),
                attempts: 6,
                last: StepFailure::retryable(tag, "502"),
            })
        };
        assert_eq!(
            dequeued_of(failed("HeadUnreadable")),
            Ok(Dequeued::Unreadable)
        );
        assert_eq!(dequeued_of(failed("GitHubApi")), Ok(Dequeued::Unchecked));
        assert_eq!(dequeued_of(Ok(None)), Ok(Dequeued::Unchecked));
        assert_eq!(
            dequeued_of(Ok(Some("a".repeat(40)))),
            Ok(Dequeued::Head("a".repeat(40)))
        );
        assert_eq!(
            dequeued_of(Err(RunError::Terminated)),
            Err(RunError::Terminated)
        );
    }
}
