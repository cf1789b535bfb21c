//! The `check` run: on a pull request's head commit, run `[check] command`
//! from `.sluice.toml` and report `sluice/check`.
//!
//! Its steps: read config, then with the check run open: read the pull
//! request's head (a newer head supersedes this one; this one supersedes
//! older ones still live), [wait for "Approve and run" on a first-time
//! contributor's fork], then with its pools and the sandbox held
//! (`gate::with_gates`): run the command, and conclude the check run from
//! its verdict before the gates are released (`Gates::report`: the
//! release is off the path from the webhook to the conclusion).

use std::cell::RefCell;
use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::engine::{Ctx, RestartRequest, RunError, RunOutcome, Status, StepFailure};
use serde::{Deserialize, Serialize};

use crate::gates::SkipReason;
use crate::github::{CheckAction as Button, CheckConclusion, CheckOutput, CheckRunUpdate};
use crate::limits::{
    HUMAN_DECISION_WINDOW_MS_DEFAULT, RUN_DURATION_MS_DEFAULT, RUN_DURATION_MS_MAX,
};
use crate::store::executions::{self, LiveCheck, ShaFilter};

use crate::runs::kit::approval::{self, Ask, Decided};
use crate::runs::kit::artifacts::{self, SaveSpec};
use crate::runs::kit::caches::{self, Caches};
use crate::runs::kit::command::{run_command, verdict_in, CommandSpec};
use crate::runs::kit::config::RepoConfig;
use crate::runs::kit::config::{command_timeout_ms, paths_match, CheckConfig, CONFIG_PATH};
use crate::runs::kit::gate::{self, with_gates, Gates, Held, Pool};
use crate::runs::kit::inputs::{CheckInput, PullNumber};
use crate::runs::kit::jobspec::CacheConfig;
use crate::runs::kit::needs::NEEDS_EVENT;
use crate::runs::kit::pipeline::{
    is_job_name, of as pipeline_of, JobRecord, JobResult, JobUnit, Pipeline, JOB_CHECK_PREFIX,
};
use crate::runs::kit::report::CheckRunOf;
use crate::runs::kit::report::{github_failure, github_step, reported, CheckTarget, Verdict};
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::steps;
use crate::runs::kit::tags::{FailureTag, SkipTag};
use crate::runs::kit::{configured, unless_ignored, Configured, RunEnv, Termination};
use crate::store::artifacts::ArtifactRow;

pub mod cancel;
pub mod pipeline;

pub const CHECK_RUN_NAME: &str = "sluice/check";

/// The `check` run.
pub struct CheckRun;

#[async_trait(?Send)]
impl Run for CheckRun {
    const NAME: RunName = RunName::new("check");
    const CHECK_RUN: Option<&'static str> = Some(CHECK_RUN_NAME);
    const RERUNNABLE: bool = true;
    const DISPATCHABLE: bool = true;
    const SCHEDULABLE: bool = true;
    const GATED: bool = true;
    type Input = CheckInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &CheckInput,
    ) -> Result<RunOutcome, RunError> {
        match &input.job {
            Some(unit) => run_unit(ctx, env, input, unit).await,
            None => run(ctx, env, input).await,
        }
    }

    /// Wakes the run that needs it (a pipeline's parent, a deploy's
    /// `needs`) once its end is in the index the waiter reads: a wake sent
    /// from a step arrives before the pass's index write, and the waiter
    /// would read the check as still running and wait out `JOB_WAIT_MS`.
    async fn ended(&self, env: &RunEnv<'_>, id: &str, input: &CheckInput, _status: Status) {
        if let Some(parent) = &input.wakes {
            let _ = env.waker.wake(parent, NEEDS_EVENT).await;
        }
        // A job's snapshots serve only its own later steps (the sweep
        // deletes any this missed).
        if input.spec.as_ref().is_some_and(|job| !job.steps.is_empty()) {
            crate::runs::kit::snapshots::discard(env.blobs, id).await;
        }
    }

    fn reports_as(name: &str) -> bool {
        name == CHECK_RUN_NAME || is_job_check_run(name)
    }

    fn check_run(&self, input: &CheckInput) -> Option<CheckRunOf> {
        Some(CheckRunOf {
            name: check_run_name(input),
            installation_id: input.installation_id,
            repo: input.repo.clone(),
            sha: input.sha.clone(),
        })
    }

    /// A pipeline's parent ended from outside: its live units end with it.
    async fn abandoned(
        &self,
        env: &RunEnv<'_>,
        instance_id: &str,
        input: &CheckInput,
        status: crate::engine::Status,
    ) {
        if input.job.is_none() {
            let why = format!("was {}", status.as_str());
            let _ = pipeline::end_children(env, instance_id, input, &why).await;
        }
    }

    /// A pipeline's parent ends its live units first (record 0013,
    /// `docs/adr/0013-pipelines-as-child-instances.md`): the new
    /// generation runs every job again as new units, from no later than
    /// the pipeline's first step. The parent's own gates as any check's.
    async fn prepare_restart(
        &self,
        env: &RunEnv<'_>,
        req: &RestartRequest<'_>,
    ) -> Result<u32, String> {
        let input: CheckInput = serde_json::from_value(req.input.clone())
            .map_err(|e| format!("the check's input does not parse: {e}"))?;
        if input.job.is_some() {
            return gate::prepare_restart(env, req).await;
        }
        // What may refuse the restart comes before the units are ended: a
        // refused restart leaves the pipeline as it was.
        let from_seq = pipeline::restart_point(req.entries, req.from_seq);
        let from_seq = gate::prepare_restart(env, &RestartRequest { from_seq, ..*req }).await?;
        pipeline::end_children(env, req.instance_id, &input, "was restarted").await?;
        Ok(from_seq)
    }
}

/// The check run a check reports through: `sluice/check`, or a pipeline
/// job's unit's own (`sluice/<job>`, `kit::pipeline::JobUnit`).
pub fn check_run_name(input: &CheckInput) -> String {
    input
        .job
        .as_ref()
        .map_or_else(|| CHECK_RUN_NAME.to_owned(), JobUnit::check_run_name)
}

/// Whether `name` is a pipeline job's check run: `sluice/<job>` or
/// `sluice/<job> (<cell>)`, the job a valid name.
fn is_job_check_run(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(JOB_CHECK_PREFIX) else {
        return false;
    };
    let job = rest.split_once(" (").map_or(rest, |(j, _)| j);
    is_job_name(job) && !matches!(job, "deploy" | "release-notes")
}

/// The checks of one commit share the pools: their repository's, all
/// checks', every sandbox's.
fn check_pools<'p>(env: &RunEnv<'_>, repo_pool: &'p str) -> [Pool<'p>; 3] {
    [
        Pool {
            name: repo_pool,
            capacity: env.checks_per_repo,
        },
        Pool {
            name: gate::CHECKS_POOL,
            capacity: env.checks_capacity,
        },
        Pool {
            name: gate::POOL,
            capacity: env.pool_capacity,
        },
    ]
}

async fn run(ctx: &Ctx<'_>, env: &RunEnv<'_>, input: &CheckInput) -> Result<RunOutcome, RunError> {
    let target = CheckTarget {
        name: CHECK_RUN_NAME,
        installation_id: input.installation_id,
        repo: &input.repo,
        sha: &input.sha,
    };
    let pick = |c| unless_ignored(c, &input.sender, |c: RepoConfig| pipeline_of(&c));
    let pipeline = match configured(ctx, env, &target, pick).await? {
        Configured::Run(p) => p,
        Configured::Done(outcome) => return Ok(outcome),
    };
    if input.needs_approval {
        ctx.set_ceiling("run ceiling", APPROVAL_WINDOW_MS + RUN_DURATION_MS_DEFAULT)
            .await?;
    }
    let jobs = match pipeline {
        Pipeline::Single(check) => return run_single(ctx, env, input, &target, &check).await,
        Pipeline::Jobs(jobs) => jobs,
    };
    let results = RefCell::new(Vec::new());
    let outcome = {
        let (target, jobs, results) = (&target, &jobs, &results);
        reported(ctx, env, target, |report| async move {
            if let Some(v) = preflight(ctx, env, input, target, report.id).await? {
                return Ok(v);
            }
            pipeline::drive(ctx, env, input, jobs, results).await
        })
        .await?
    };
    let results = results.into_inner();
    Ok(with_jobs(outcome, &results))
}

/// A pipeline's outcome lists each job's result (`jobs`, what a deploy's
/// `needs` reads, `kit::needs`) and the pipeline as drawn (`pipeline`).
fn with_jobs(outcome: RunOutcome, records: &[JobRecord]) -> RunOutcome {
    match outcome {
        RunOutcome::Complete(mut v) if !records.is_empty() => {
            let results: BTreeMap<&str, JobResult> = records
                .iter()
                .map(|r| (r.name.as_str(), r.result))
                .collect();
            v["jobs"] = serde_json::json!(results);
            v["pipeline"] = serde_json::json!(records);
            RunOutcome::Complete(v)
        }
        other => other,
    }
}

/// What must hold before a commit's code runs: its pull request's head is
/// still this commit (older heads end), its merge group still exists, and a
/// first-time contributor's fork was approved. The verdict when not.
async fn preflight(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    target: &CheckTarget<'_>,
    check_run_id: u64,
) -> Result<Option<Verdict>, RunError> {
    // A dispatched or scheduled check of a branch has no pull request
    // whose newer head could supersede it.
    if let Some(pr) = input.pr_number {
        if let Some(v) = superseded(ctx, env, input, pr).await? {
            return Ok(Some(v));
        }
    }
    if let Some(branch) = &input.merge_group {
        if let Some(v) = group_gone(ctx, env, input, branch).await? {
            return Ok(Some(v));
        }
    }
    // A first-time contributor's fork waits for approval before its own
    // `paths` may skip anything: the paths are read at its commit.
    if input.needs_approval {
        return approval(ctx, env, target, check_run_id).await;
    }
    Ok(None)
}

/// `[check]` alone: the command runs in the commit's own instance.
async fn run_single(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    target: &CheckTarget<'_>,
    check: &CheckConfig,
) -> Result<RunOutcome, RunError> {
    let repo_pool = gate::checks_pool_of(&input.repo);
    let pools = check_pools(env, &repo_pool);
    let pools = &pools;
    reported(ctx, env, target, |report| async move {
        if let Some(v) = preflight(ctx, env, input, target, report.id).await? {
            return Ok(v);
        }
        if let Some(v) = unchanged(ctx, env, input, check).await? {
            return Ok(v);
        }
        let sandbox = sandbox_of(ctx, check.image.as_deref(), check.instance_type.as_deref())?;
        // The gates' verdict is the check's: concluded before the release.
        let gates = Gates {
            serial: None,
            pools,
            report: Some(&report),
            sandbox: Some(&sandbox),
        };
        let command = Command {
            text: &check.command,
            timeout: check.timeout.as_deref(),
            vars: BTreeMap::new(),
            restore: &[],
            artifacts: &[],
            caches: &[],
            class: "",
            steps: Vec::new(),
            snapshot: false,
        };
        with_gates(ctx, env, &gates, |held| {
            check_held(ctx, env, input, &command, held)
        })
        .await
    })
    .await
}

/// One unit of a pipeline job (started by the commit's check, which did
/// the preflight and the `paths` work): its command, under the gates, on
/// its own check run.
async fn run_unit(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    unit: &JobUnit,
) -> Result<RunOutcome, RunError> {
    let name = unit.check_run_name();
    let target = CheckTarget {
        name: &name,
        installation_id: input.installation_id,
        repo: &input.repo,
        sha: &input.sha,
    };
    let job = match &input.spec {
        Some(spec) => spec.clone(),
        None => {
            let pick = |c: RepoConfig| Ok(c.jobs.get(&unit.job).cloned());
            match configured(ctx, env, &target, pick).await? {
                Configured::Run(job) => job,
                Configured::Done(outcome) => return Ok(outcome),
            }
        }
    };
    let repo_pool = gate::checks_pool_of(&input.repo);
    let pools = check_pools(env, &repo_pool);
    let (target, pools, job) = (&target, &pools, &job);
    reported(ctx, env, target, |report| async move {
        let sandbox = sandbox_of(ctx, job.image.as_deref(), job.instance_type.as_deref())?;
        let restore = artifacts::needed(ctx, env, &input.artifacts_from).await?;
        let gates = Gates {
            serial: None,
            pools,
            report: Some(&report),
            sandbox: Some(&sandbox),
        };
        let command = Command {
            text: &job.command,
            timeout: job.timeout.as_deref(),
            vars: unit.vars(),
            restore: &restore,
            artifacts: &job.artifacts,
            caches: &job.cache,
            class: job.image.as_deref().unwrap_or(crate::sandbox::image::BASE),
            steps: job.steps.iter().map(String::as_str).collect(),
            snapshot: job.snapshots(),
        };
        with_gates(ctx, env, &gates, |held| {
            check_held(ctx, env, input, &command, held)
        })
        .await
    })
    .await
}

/// The address of the sandbox the command runs in: the instance's, of the
/// image class and instance type the config chose (validated when it was
/// read, so an error here is a config read by an older version).
fn sandbox_of(
    ctx: &Ctx<'_>,
    image: Option<&str>,
    instance_type: Option<&str>,
) -> Result<String, RunError> {
    crate::sandbox::image::select(image, instance_type)
        .map(|s| s.address(ctx.instance_id()))
        .map_err(|message| RunError::InvalidInput { message })
}

/// A first-time contributor's fork waits this long for "Approve and run":
/// the bound of a human decision (ADR-0001 rule 3), as release approval.
/// (ADR-0001: docs/adr/0001-durable-execution-scope.md)
const APPROVAL_WINDOW_MS: i64 = HUMAN_DECISION_WINDOW_MS_DEFAULT;

const _: () = assert!(APPROVAL_WINDOW_MS + RUN_DURATION_MS_DEFAULT <= RUN_DURATION_MS_MAX);

/// Waits for someone with write access to approve running the pull
/// request's code; the verdict when nobody did.
async fn approval(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
    check_run_id: u64,
) -> Result<Option<Verdict>, RunError> {
    let ask = Ask {
        check_run_id,
        title: "Waiting for approval",
        summary: "This pull request comes from a fork by a first-time contributor. Its code \
                  runs once someone with write access to the repository presses \
                  **Approve and run**."
            .into(),
        button: Button {
            label: "Approve and run",
            description: "Run this pull request's check",
            identifier: APPROVE_ACTION,
        },
        window_ms: APPROVAL_WINDOW_MS,
    };
    Ok(match approval::ask(ctx, env, target, &ask).await? {
        Decided::Approved { .. } => None,
        Decided::TimedOut => Some(Verdict::Skipped {
            reason: None,
            tag: SkipTag::RunSkipped,
            summary: format!(
                "Not run: nobody with write access approved this first-time contributor's \
                 pull request within {} hours.",
                APPROVAL_WINDOW_MS / 3_600_000
            ),
            newer: None,
        }),
    })
}

/// The identifier of the "Approve and run" button.
pub const APPROVE_ACTION: &str = "approve";

/// A newer head of the pull request supersedes this one (the verdict);
/// this head supersedes every older one still live: their check runs are
/// concluded `cancelled` naming this head, then they are terminated (their
/// processes are killed by `finalize`, before anything is released).
async fn superseded(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    pr: PullNumber,
) -> Result<Option<Verdict>, RunError> {
    let head: Option<String> = ctx
        .step("read pull request head", github_step(), |_| async {
            env.github
                .pull_head(input.installation_id, &input.repo, pr.get())
                .await
                .map_err(github_failure)
        })
        .await?;
    match head {
        // GitHub does not know the pull request (or did not answer): this
        // head neither yields nor ends anyone.
        None => return Ok(None),
        Some(h) if !h.eq_ignore_ascii_case(&input.sha) => {
            return Ok(Some(Verdict::Superseded {
                summary: format!(
                    "Not run: pull request #{pr} moved on to {h}, which is checked instead."
                ),
                newer: h,
            }))
        }
        Some(_) => {}
    }
    let entity = input.entity();
    let _ended: Vec<String> = ctx
        .step("supersede older heads", github_step(), |_| async {
            let older = executions::live_checks_of(
                env.db,
                &input.repo,
                &entity,
                ShaFilter::Except(&input.sha),
            )
            .await
            .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
            for row in &older {
                cancel_older(env, input, pr, row).await?;
            }
            Ok(older.into_iter().map(|r| r.id).collect())
        })
        .await?;
    Ok(None)
}

/// What `[check] paths` made of a change, as journaled: never the list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct PathsRead {
    /// Whether a changed file matched (or the list was cut short).
    needed: bool,
    files: usize,
}

/// `[check] paths`: a change that touches none of them is skipped
/// (`skipped`, which branch protection counts as passed). A change Sluice
/// cannot list (no base, commits GitHub does not know, a list GitHub cut
/// short or left out) runs the check: when in doubt, check. So does a change
/// to `.sluice.toml` itself, where the paths are written.
async fn unchanged(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    check: &CheckConfig,
) -> Result<Option<Verdict>, RunError> {
    let Some(base) = input
        .base_sha
        .as_deref()
        .filter(|_| !check.paths.is_empty())
    else {
        return Ok(None);
    };
    let read: Option<PathsRead> = ctx
        .step("read changed files", github_step(), |_| async {
            let changed = env
                .github
                .changed_files(input.installation_id, &input.repo, base, &input.sha)
                .await
                .map_err(github_failure)?;
            Ok(changed.map(|c| PathsRead {
                needed: !c.complete
                    || paths_match(&check.paths, &c.files)
                    || c.files.iter().any(|f| f == CONFIG_PATH),
                files: c.files.len(),
            }))
        })
        .await?;
    match read {
        Some(PathsRead {
            needed: false,
            files,
        }) => Ok(Some(Verdict::Skipped {
            reason: Some(SkipReason::NoMatchingChange),
            tag: SkipTag::RunSkipped,
            summary: format!(
                "Not run: no matching change. None of the {files} files changed since {} \
                 matches `[check] paths` ({}).",
                base.chars().take(12).collect::<String>(),
                check.paths.join(", ")
            ),
            newer: None,
        })),
        _ => Ok(None),
    }
}

/// A merge queue's group is checked only while GitHub keeps it: once the
/// group is destroyed (merged, dequeued, invalidated by an earlier entry)
/// its branch is deleted and the check skips (not current) instead of
/// running for a commit nobody will merge. A branch GitHub did not answer
/// for (an error) fails the step, which retries.
async fn group_gone(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    branch: &str,
) -> Result<Option<Verdict>, RunError> {
    let head: Option<String> = ctx
        .step("read merge group branch", github_step(), |_| async {
            env.github
                .branch_head(input.installation_id, &input.repo, branch)
                .await
                .map_err(github_failure)
        })
        .await?;
    if head.is_some_and(|h| h.eq_ignore_ascii_case(&input.sha)) {
        return Ok(None);
    }
    Ok(Some(Verdict::Skipped {
        reason: Some(SkipReason::NotCurrent),
        tag: SkipTag::RunSkipped,
        summary: format!(
            "Not run: the merge queue's group `{branch}` is gone (merged, dequeued or \
             invalidated), so nothing will merge {}.",
            input.sha
        ),
        newer: None,
    }))
}

/// Ends an older head's check: see `cancel_check`.
async fn cancel_older(
    env: &RunEnv<'_>,
    input: &CheckInput,
    pr: PullNumber,
    row: &LiveCheck,
) -> Result<(), StepFailure> {
    let ending = Ending {
        title: "Superseded",
        summary: format!(
            "Cancelled: pull request #{pr} moved on to {}, which is checked instead.",
            input.sha
        ),
    };
    let name = check_run_name_of(&row.input_json);
    cancel_check(env, input.installation_id, &input.repo, row, &name, &ending).await
}

/// The check run of the check whose input is `input_json` (`sluice/check`
/// for one that does not decode: older instances are commits' checks).
pub fn check_run_name_of(input_json: &str) -> String {
    serde_json::from_str::<CheckInput>(input_json)
        .map(|i| check_run_name(&i))
        .unwrap_or_else(|_| CHECK_RUN_NAME.to_owned())
}

/// Why a live check is ended, as its check run shows it.
pub struct Ending {
    pub title: &'static str,
    pub summary: String,
}

/// Concludes a live check's check run (`name`) `cancelled` with `ending` (unless it
/// already completed), terminates the instance, then kills its processes:
/// a terminate alone is honoured only at the instance's next durable call,
/// which a running command step reaches when its process ends. Repeating
/// it is harmless (a completed check run is left as it is).
pub async fn cancel_check(
    env: &RunEnv<'_>,
    installation: u64,
    repo: &str,
    row: &LiveCheck,
    name: &str,
    ending: &Ending,
) -> Result<(), StepFailure> {
    let (id, sha) = (row.id.as_str(), row.sha.as_str());
    let state = env
        .github
        .find_check_run_state(installation, repo, sha, name, id)
        .await
        .map_err(github_failure)?;
    if let Some((run_id, _)) = state.filter(|(_, status)| status != "completed") {
        let update = CheckRunUpdate {
            status: Some("completed"),
            conclusion: Some(CheckConclusion::Cancelled),
            output: Some(CheckOutput {
                title: ending.title.into(),
                summary: ending.summary.clone(),
            }),
            actions: Some(Vec::new()),
            ..CheckRunUpdate::default()
        };
        env.github
            .update_check_run(installation, repo, run_id, &update)
            .await
            .map_err(github_failure)?;
    }
    let termination = env
        .terminator
        .terminate(id)
        .await
        .map_err(|m| FailureTag::Gate.retryable(m))?;
    if termination == Termination::NoInstance {
        // Never created (its object now refuses a late create): end its
        // row, or the sweep would create it after whoever wanted it ended.
        // A row past `queued` had an instance once: its processes are
        // killed below all the same.
        let ended = executions::end_uncreated(env.db, id, env.clock.now_ms())
            .await
            .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
        if ended {
            return Ok(());
        }
    }
    // Unconfirmed kills are finalize's to repeat: it releases nothing of
    // the check until its process is known to have ended.
    gate::kill_live(env, id, env.clock.now_ms()).await?;
    Ok(())
}

/// The command a check runs: `[check]`'s, or a job unit's with its
/// matrix and shard variables.
struct Command<'a> {
    text: &'a str,
    timeout: Option<&'a str>,
    vars: BTreeMap<String, String>,
    /// The artifacts of the jobs it needs, unpacked before it runs.
    restore: &'a [ArtifactRow],
    /// Its job's `artifacts` globs: uploaded when it passes.
    artifacts: &'a [String],
    /// Its job's dependency caches, and the image class that keys them.
    caches: &'a [CacheConfig],
    class: &'a str,
    /// A job's `steps` (`kit::steps`); empty: `text` alone.
    steps: Vec<&'a str>,
    /// Whether its workspace is captured between steps.
    snapshot: bool,
}

async fn check_held(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    command: &Command<'_>,
    held: Held<'_>,
) -> Result<Verdict, RunError> {
    let timeout_ms =
        command_timeout_ms(command.timeout).map_err(|m| RunError::InvalidInput { message: m })?;
    let vars = command_vars(input, command);
    let spec = CommandSpec {
        step: crate::runs::kit::command::CHECK_COMMAND_STEP,
        repo: &input.repo,
        sha: &input.sha,
        installation_id: input.installation_id,
        command: command.text,
        timeout_ms,
        env: vars,
        secret_env: Vec::new(),
        held: &held,
        restore: command.restore,
        prepared: false,
        continues: None,
        // A job of steps checks out for its first step (a cache's restore
        // first): keep that tree as the first snapshot's baseline.
        pristine: !command.steps.is_empty(),
    };
    let caches = input.cache_scope.as_ref().map(|scope| Caches {
        repo: &input.repo,
        scope,
        class: command.class,
        caches: command.caches,
    });
    let caches = caches.filter(|c| !c.caches.is_empty());
    let mut spec = spec;
    let restored = match &caches {
        Some(c) => {
            let restored = caches::restore(ctx, env, &spec, c).await?;
            spec.prepared = true;
            restored
        }
        None => Vec::new(),
    };
    let (verdict, mut notes) = run_commands(ctx, env, &spec, command).await?;
    if let (Verdict::Passed { .. }, Some(c)) = (&verdict, &caches) {
        // Best effort, as GitHub's: a cache that cannot be saved is a note,
        // never a failed check.
        match caches::save(ctx, env, held.sandbox_id, c, &restored).await {
            Ok(saved) => notes.push(caches::summary(&restored, &saved)),
            Err(e) if caches::step_failed(&e) => notes.push(format!(
                "{}\n\nThe caches were not saved: {e}",
                caches::summary(&restored, &[])
            )),
            Err(e) => return Err(e),
        }
    } else if !restored.is_empty() {
        notes.push(caches::summary(&restored, &[]));
    }
    if let (Verdict::Passed { .. }, Some(unit)) = (&verdict, input.job.as_ref()) {
        if !command.artifacts.is_empty() {
            notes.push(save_artifacts(ctx, env, unit, command.artifacts, held.sandbox_id).await?);
        }
    }
    Ok(with_notes(verdict, &notes))
}

/// The command's environment: the dispatch's inputs, the unit's matrix
/// and shard, and what the commit is.
fn command_vars(input: &CheckInput, command: &Command<'_>) -> BTreeMap<String, String> {
    let mut vars = crate::runs::kit::command::input_vars(&input.inputs);
    vars.extend(command.vars.clone());
    vars.insert("SLUICE_SHA".to_owned(), input.sha.clone());
    vars.insert("SLUICE_REPO".to_owned(), input.repo.clone());
    if let Some(pr) = input.pr_number {
        vars.insert("SLUICE_PR".to_owned(), pr.to_string());
    }
    vars
}

/// Runs the check's command, or its job's steps: the verdict, and the
/// summary's list of steps.
async fn run_commands(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    command: &Command<'_>,
) -> Result<(Verdict, Vec<String>), RunError> {
    let sandbox = Some(spec.held.sandbox_id);
    if command.steps.is_empty() {
        let result = run_command(ctx, env, spec).await?;
        return Ok((verdict_in(command.text, &result, sandbox), Vec::new()));
    }
    let run = steps::run_steps(ctx, env, spec, &command.steps, command.snapshot).await?;
    let Some(deciding) = run.deciding() else {
        return Err(RunError::InvalidInput {
            message: "a job's `steps` list is empty".into(),
        });
    };
    let verdict = verdict_in(&deciding.command, &deciding.result, sandbox);
    Ok((verdict, vec![steps::summary(&run, &command.steps)]))
}

/// Uploads a passed unit's artifacts; the summary's line for them.
async fn save_artifacts(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    unit: &JobUnit,
    patterns: &[String],
    sandbox_id: &str,
) -> Result<String, RunError> {
    let label = unit.check_run_name();
    let save = SaveSpec {
        sandbox_id,
        instance_id: ctx.instance_id(),
        job: &unit.job,
        label: &label,
        patterns,
    };
    let row = artifacts::save(ctx, env, &save).await?;
    Ok(artifacts::listed(env, &row, ctx.now_ms()))
}

/// The verdict with paragraphs added to its summary (a pass's or a
/// failure's: what its caches and artifacts did).
fn with_notes(verdict: Verdict, notes: &[String]) -> Verdict {
    let extra: String = notes
        .iter()
        .filter(|n| !n.is_empty())
        .map(|n| format!("\n\n{n}"))
        .collect();
    match verdict {
        Verdict::Passed { summary } => Verdict::Passed {
            summary: summary + &extra,
        },
        Verdict::Failed { summary } => Verdict::Failed {
            summary: summary + &extra,
        },
        Verdict::TimedOut { summary } => Verdict::TimedOut {
            summary: summary + &extra,
        },
        other => other,
    }
}
