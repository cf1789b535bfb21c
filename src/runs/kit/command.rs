//! Running a command in the sandbox as replay-safe steps: ensure the
//! workspace, start a detached process keyed by the instance, wait for it,
//! store the log. A replayed attempt (the Worker died mid-step) finds the
//! process it started instead of starting another (ADR-0001 rule 2); a
//! workspace lost with its container is checked out again inside the
//! retried step (rule 5). Every spawn passes the gates' fence first
//! (`gate::Held::fence`): it is recorded, and refused when the execution
//! lost its group or another process of the group or sandbox still runs.
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md)

use std::collections::BTreeMap;

use futures_util::future::join;
use serde::{Deserialize, Serialize};

use crate::engine::{Backoff, Ctx, InstanceId, RunError, StepConfig, StepFailure};
use crate::gates::fence::{self, Blocker, FenceOutcome};
use crate::limits::{
    COMMAND_TIMEOUT_MS_MAX, FENCE_START_WINDOW_MS, LOG_TAIL_BYTES_MAX, LOG_TAIL_LINES_MAX,
    PASS_DURATION_MS_MAX, PROCESS_POLL_MS, SANDBOX_CLOCK_SKEW_MS,
};
use crate::sandbox::{
    Checkout, ProcessSpec, ProcessState, ProcessStatus, SandboxError, WorkspaceState,
};
use crate::secret::Secret;
use sluice_redact::Redactor;

use super::gate::{FenceWindow, Held};
use super::report::Verdict;
use super::tags::FailureTag;
use super::RunEnv;
use super::{log, loglink};

/// Retries of the command step: infrastructure faults (agent unreachable,
/// checkout failed, container replaced), not the command's own failure.
const COMMAND_STEP_RETRIES: u32 = 2;
const COMMAND_STEP_RETRY_DELAY_MS: i64 = 2_000;
/// Time a command step may take beyond its wait: checkout and log upload.
const COMMAND_STEP_MARGIN_MS: i64 = 3 * 60 * 1000;
/// How long one step waits for a running command (or for the process that
/// blocks its fence): with the margin, inside one pass's budget.
const COMMAND_STEP_WAIT_MS: i64 = 10 * 60 * 1000;
/// Long-polls in one step.
const POLLS_PER_STEP: i64 = COMMAND_STEP_WAIT_MS / PROCESS_POLL_MS;
/// Rounds beyond `timeout / wait` before the run gives up on a process the
/// agent should already have killed at its timeout.
const COMMAND_ROUNDS_EXTRA: i64 = 2;
/// The pause between rounds: it only ends the pass (a new invocation).
const COMMAND_RESUME_MS: i64 = 1_000;
/// A process is ended this long after its timeout at the latest: the agent
/// kills its group at the timeout and reaps for 5 s; the rest is clock skew
/// between the Worker and the sandbox. Shown as its deadline; nothing is
/// decided by it (only the sandbox says a process ended).
const PROCESS_DEADLINE_MARGIN_MS: i64 = 60_000;

const _: () = assert!(COMMAND_STEP_WAIT_MS + COMMAND_STEP_MARGIN_MS <= PASS_DURATION_MS_MAX);
const _: () = assert!(POLLS_PER_STEP >= 1);

pub struct CommandSpec<'a> {
    /// The step's name; also names the log.
    pub step: &'a str,
    /// `owner/name`: the clone URL is derived from it (`github::clone_url`).
    pub repo: &'a str,
    pub sha: &'a str,
    pub installation_id: u64,
    pub command: &'a str,
    pub timeout_ms: i64,
    pub env: BTreeMap<String, String>,
    /// Exported to the command, scrubbed from its log, never journaled.
    pub secret_env: Vec<(String, Secret)>,
    /// The gates the run holds: every spawn is fenced by them.
    pub held: &'a Held<'a>,
    /// Archives unpacked into the workspace after its checkout, before the
    /// command starts: the artifacts of the jobs it needs.
    pub restore: &'a [crate::store::artifacts::ArtifactRow],
    /// An earlier step of the run checked the commit out already (its
    /// caches were restored into it): the command step mints a checkout
    /// token only if the workspace is gone.
    pub prepared: bool,
    /// A later step of a multi-step job: it runs in the tree the step
    /// before it left, never in a fresh checkout (`kit::steps`; ADR-0015:
    /// docs/adr/0015-multi-step-jobs-resume-from-snapshots.md).
    pub continues: Option<Continuation<'a>>,
    /// The first step of a multi-step job: it starts only on a checkout
    /// no process ran in yet (a restart or a lost step checks out again).
    pub pristine: bool,
}

/// Where a later step of a job finds the tree the step before it left:
/// the workspace as it is, when the last process started in it is the
/// step before's (not this step's, lost mid-run; not later steps', before
/// an operator's restart); else the snapshots of the steps before it,
/// unpacked in order over a fresh checkout. Without them the workspace is
/// lost, and the job runs again from its first step (`Progress::Lost`).
#[derive(Clone, Copy)]
pub struct Continuation<'a> {
    /// The process of the step before: the workspace is used as it is
    /// when the last process started in it is that one.
    pub after: &'a str,
    /// The snapshots of every step before this one, in order; empty when
    /// the job takes none, or one of them could not be taken.
    pub chain: &'a [super::snapshots::StepSnapshot],
}

/// What the step journals: never the full log, never a secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandResult {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// The last lines of the redacted log.
    pub tail: String,
    pub log_key: String,
    pub output_bytes: u64,
    pub duration_ms: Option<i64>,
    /// A signed, expiring link to the log (`LOG_LINK_SECRET` set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_url: Option<String>,
    /// The URL the command reported for what it deployed (a line
    /// `SLUICE_ENVIRONMENT_URL=<url>`, the last one, when it is a valid
    /// http(s) URL): a deploy's GitHub `environment_url`. Absent in journals
    /// written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_url: Option<String>,
    /// When the process started, by the clock of the agent that ran it:
    /// what changed in its workspace since is what it did (a snapshot's
    /// `since`). Absent from older agents and journals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<crate::sandbox::AgentTime>,
    /// The sandbox process id it ran as (a job's next step runs in place
    /// only after it). Absent from older journals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<String>,
}

/// The line prefix a command prints to report its environment's URL.
pub const ENVIRONMENT_URL_MARKER: &str = "SLUICE_ENVIRONMENT_URL=";
/// Longest environment URL taken: GitHub documents no bound; 2 KiB is what
/// browsers and proxies all accept, and no link a person clicks is longer.
const ENVIRONMENT_URL_CHARS_MAX: usize = 2048;

/// The environment URL a command's (redacted) log reports: its last
/// `SLUICE_ENVIRONMENT_URL=` line, if that is a URL Sluice may publish.
pub fn environment_url_of(log: &str) -> Option<String> {
    let reported = log
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix(ENVIRONMENT_URL_MARKER))?;
    let url = reported.trim();
    // What the command prints is partly what the deployed code prints:
    // only https is shown to everyone who can read the repository.
    let https = url
        .get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("https://"));
    (https && publishable_url(url)).then(|| url.to_owned())
}

/// An absolute http(s) URL of printable ASCII with a host and no
/// credentials (no `user:password@`), none of the characters RFC 3986 never
/// allows, and nothing the redaction masked (a URL that carried a secret is
/// not published, even masked).
pub fn publishable_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let Some(rest) = lower
        .strip_prefix("https://")
        .or_else(|| lower.strip_prefix("http://"))
    else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let allowed = |c: char| c.is_ascii_graphic() && !"\"<>\\^`{|}".contains(c);
    url.len() <= ENVIRONMENT_URL_CHARS_MAX
        && url.chars().all(allowed)
        && !authority.is_empty()
        && !authority.contains('@')
        && !url
            .as_bytes()
            .windows(sluice_redact::MASK.len())
            .any(|w| w == sluice_redact::MASK)
}

fn sandbox_failure(tag: FailureTag, e: SandboxError) -> StepFailure {
    tag.failure(e.to_string(), e.retryable())
}

fn store_failure(e: crate::store::StoreError) -> StepFailure {
    FailureTag::Gate.retryable(e.to_string())
}

/// The command steps of the runs: each stores its redacted log under
/// `loglink::log_key`, which the dashboard links from the step's row.
pub const LOGGED_STEPS: &[&str] = &[
    CHECK_COMMAND_STEP,
    DEPLOY_COMMAND_STEP,
    TEARDOWN_COMMAND_STEP,
];
pub const CHECK_COMMAND_STEP: &str = "run check command";
pub const DEPLOY_COMMAND_STEP: &str = "run deploy command";
/// A preview's teardown (`runs::preview::teardown`).
pub const TEARDOWN_COMMAND_STEP: &str = "run teardown command";

/// The journal name of a job's step (`kit::steps`): `run step 2`, and in
/// a run-through begun again after a lost workspace, `run step 2 (again
/// 1)`. Each keeps its log, as `LOGGED_STEPS` do.
pub fn step_name(index: usize, again: u32) -> String {
    match again {
        0 => format!("{JOB_STEP_PREFIX}{}", index + 1),
        n => format!("{JOB_STEP_PREFIX}{} (again {n})", index + 1),
    }
}

const JOB_STEP_PREFIX: &str = "run step ";

/// Whether `name` is a job's step's work (`kit::steps`): a step, the
/// snapshot after one, or the checkout before a run-through begun again.
pub fn is_job_step_work(name: &str) -> bool {
    let step = name.strip_prefix("snapshot after ").unwrap_or(name);
    (keeps_log(step) && !LOGGED_STEPS.contains(&step)) || name.starts_with("check out again (")
}

/// Whether `name` is a step that stores its log: a run's command step, or
/// a job's step (`step_name`).
pub fn keeps_log(name: &str) -> bool {
    if LOGGED_STEPS.contains(&name) {
        return true;
    }
    let Some(rest) = name.strip_prefix(JOB_STEP_PREFIX) else {
        return false;
    };
    let (number, again) = match rest.split_once(" (again ") {
        Some((n, a)) => (n, a.strip_suffix(')')),
        None => (rest, Some("1")),
    };
    let digits = |s: &str| !s.is_empty() && s.len() <= 3 && s.bytes().all(|b| b.is_ascii_digit());
    digits(number) && again.is_some_and(digits)
}

/// The sandbox process id of a command step in this generation: fresh
/// after a restart, the same on every replay.
pub fn process_id(instance_id: &str, step: &str, generation: u32) -> InstanceId {
    InstanceId::from_key(&format!("{instance_id}:{step}:g{generation}"))
}

pub async fn run_command(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
) -> Result<CommandResult, RunError> {
    run_step_command(ctx, env, spec)
        .await?
        .ok_or_else(|| RunError::NonRetryable {
            step: spec.step.to_owned(),
            failure: FailureTag::SandboxUnavailable
                .fatal("the workspace was lost and nothing restores it"),
        })
}

/// As `run_command`; None when it is a later step of a job whose
/// workspace was lost with nothing to restore it from (`Continuation`).
pub async fn run_step_command(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
) -> Result<Option<CommandResult>, RunError> {
    let process_id = process_id(ctx.instance_id(), spec.step, ctx.generation());
    let workspace = ctx.instance_id().to_owned();
    let step_key = InstanceId::from_key(spec.step);
    let log_key = loglink::log_key(ctx.instance_id(), step_key.as_str());
    let cfg = StepConfig::default()
        .retries(
            COMMAND_STEP_RETRIES,
            COMMAND_STEP_RETRY_DELAY_MS,
            Backoff::Exponential,
        )
        .timeout_ms(COMMAND_STEP_WAIT_MS + COMMAND_STEP_MARGIN_MS);
    let ids = Ids {
        pid: process_id.as_str(),
        ws: workspace.as_str(),
        log_key: log_key.as_str(),
    };
    // A long command spans several steps: each observes (or starts) the
    // process and waits at most COMMAND_STEP_WAIT_MS, then the run sleeps a
    // moment, ending the pass. A fence blocked by another process waits the
    // same way, for at most that process's own timeout.
    let rounds_max =
        (spec.timeout_ms + COMMAND_TIMEOUT_MS_MAX) / COMMAND_STEP_WAIT_MS + COMMAND_ROUNDS_EXTRA;
    for _ in 0..rounds_max {
        let progress = command_round(ctx, env, spec, cfg, &ids).await?;
        match progress {
            Progress::Finished(result) => return Ok(Some(result)),
            Progress::Lost => return Ok(None),
            Progress::Running | Progress::Blocked => {
                ctx.sleep("command still running", COMMAND_RESUME_MS)
                    .await?
            }
        }
    }
    Err(RunError::NonRetryable {
        step: spec.step.to_owned(),
        failure: FailureTag::ProcessWedged.fatal(format!(
            "still running {rounds_max} rounds after its {} ms timeout",
            spec.timeout_ms
        )),
    })
}

struct Ids<'a> {
    pid: &'a str,
    ws: &'a str,
    log_key: &'a str,
}

/// Where a round is in streaming the log.
struct LogCursor<'a> {
    log_key: &'a str,
    at: u64,
}

impl LogCursor<'_> {
    /// Stores the output a poll brought.
    async fn take(&mut self, env: &RunEnv<'_>, state: &ProcessState) -> Result<(), StepFailure> {
        self.at = log::append(env.blobs, self.log_key, self.at, state)
            .await
            .map_err(|m| FailureTag::LogUploadFailed.retryable(m))?;
        Ok(())
    }
}

/// One round of a command, as one replay-safe step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "progress", rename_all = "snake_case")]
enum Progress {
    Running,
    /// Another execution's process still runs in the group or sandbox: the
    /// fence stays shut until it ends.
    Blocked,
    Finished(CommandResult),
    /// A later step of a job found neither the tree the step before it
    /// left nor snapshots of it (`Continuation`).
    Lost,
}

async fn command_round(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    cfg: StepConfig,
    ids: &Ids<'_>,
) -> Result<Progress, RunError> {
    let sandbox = spec.held.sandbox_id;
    ctx.step(spec.step, cfg, |_attempt| async move {
        // The wait ends this long after the round began, whatever the
        // checkout took, so a slow checkout never runs the step past its
        // timeout.
        let wait_until_ms = env.clock.now_ms() + COMMAND_STEP_WAIT_MS;
        // The log streams on from what earlier rounds (or an attempt that
        // died) stored.
        let mut log = LogCursor {
            log_key: ids.log_key,
            at: log::resume_offset(env.blobs, ids.log_key)
                .await
                .map_err(|m| FailureTag::LogUploadFailed.retryable(m))?,
        };
        let state = match env
            .sandbox
            .process(sandbox, ids.pid, 0, Some(log.at))
            .await
            .map_err(|e| sandbox_failure(FailureTag::SandboxUnavailable, e))?
        {
            Some(state) => state,
            None => {
                // No process of this generation yet: what the log holds is
                // an earlier process's (a restart, a lost container).
                if log.at > 0 {
                    log::reset(env.blobs, ids.log_key)
                        .await
                        .map_err(|m| FailureTag::LogUploadFailed.retryable(m))?;
                    log.at = 0;
                }
                if let Some(cont) = spec.continues {
                    if !resume(env, spec, cont, ids.ws).await? {
                        return Ok(Progress::Lost);
                    }
                }
                match start_fenced(env, spec, ids, wait_until_ms).await? {
                    Some(state) => state,
                    None => return Ok(Progress::Blocked),
                }
            }
        };
        let interrupted = || ctx.interrupted();
        let waiting = Waiting {
            sandbox,
            pid: ids.pid,
            until_ms: wait_until_ms,
            interrupted: &interrupted,
        };
        let waited = wait_for_exit(env, &waiting, state, &mut log).await?;
        let Some(state) = waited else {
            return Ok(Progress::Running);
        };
        fence::ended(env.db, ids.pid, env.clock.now_ms())
            .await
            .map_err(store_failure)?;
        finished(env, spec, ids, state)
            .await
            .map(Progress::Finished)
    })
    .await
}

/// Stores the redacted log and says how the command ended.
async fn finished(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ids: &Ids<'_>,
    state: ProcessState,
) -> Result<CommandResult, StepFailure> {
    // The agent scrubbed the output already; sealing scrubs the joined log
    // once more (a secret split across parts, an agent that did not).
    let redactor = Redactor::new(spec.secret_env.iter().map(|(_, v)| v.expose()));
    let log = log::seal(env.blobs, ids.log_key, &redactor)
        .await
        .map_err(|m| FailureTag::LogUploadFailed.retryable(m))?;
    Ok(CommandResult {
        exit_code: state.exit_code,
        timed_out: state.status == ProcessStatus::TimedOut,
        tail: tail(&log),
        log_key: ids.log_key.to_owned(),
        output_bytes: state.output_bytes,
        duration_ms: state.duration_ms,
        log_url: log_url(env, ids.log_key),
        environment_url: environment_url_of(&log),
        started: state
            .agent
            .clone()
            .zip(state.started_ms)
            .map(|(agent, ms)| crate::sandbox::AgentTime { agent, ms }),
        process: Some(ids.pid.to_owned()),
    })
}

/// The signed link to the log of `instance_id`'s command step `step`, when
/// links are set up: it shows the output so far while the command runs.
pub fn step_log_url(env: &RunEnv<'_>, instance_id: &str, step: &str) -> Option<String> {
    let step_key = InstanceId::from_key(step);
    log_url(env, &loglink::log_key(instance_id, step_key.as_str()))
}

/// The signed link to the log stored at `log_key`, when links are set up.
fn log_url(env: &RunEnv<'_>, log_key: &str) -> Option<String> {
    let secret = env.log_link_secret.as_ref()?;
    let (instance, step) = log_key
        .strip_prefix("logs/")?
        .strip_suffix(".log")?
        .split_once('/')?;
    let now = env.clock.now_ms();
    Some(loglink::link(
        &env.public_url,
        secret.expose().as_bytes(),
        instance,
        step,
        now,
    ))
}

/// Checks out, then passes the fence and starts the process at once: the
/// fence's deadline and start window count from when the process really
/// starts, whatever the checkout took. None while another process blocks
/// the fence (after waiting for it within this step, until `until_ms`); a
/// lost group fails the step for good. The checkout's token is revoked
/// beside the fence and the start, not before them: git is done with it,
/// and against GitHub the call costs 100-300 ms the command need not wait
/// for.
async fn start_fenced(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ids: &Ids<'_>,
    until_ms: i64,
) -> Result<Option<ProcessState>, StepFailure> {
    // A later step's tree is `steps::resume`'s: never checked out here.
    let token = match spec.continues {
        Some(_) => None,
        None => ensure_workspace(env, spec, ids.ws).await?,
    };
    if let Err(f) = super::artifacts::restore(env, spec.held.sandbox_id, ids.ws, spec.restore).await
    {
        if let Some(token) = &token {
            revoke(env, token).await;
        }
        return Err(f);
    }
    let fenced = fence_and_start(env, spec, ids, token.as_ref(), until_ms);
    match &token {
        Some(token) => join(fenced, revoke(env, token)).await.0,
        None => fenced.await,
    }
}

/// Each pass of the loop either spawns, fails, or sees a blocker end.
async fn fence_and_start(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ids: &Ids<'_>,
    token: Option<&Secret>,
    until_ms: i64,
) -> Result<Option<ProcessState>, StepFailure> {
    for _ in 0..FENCE_ATTEMPTS_MAX {
        let now = env.clock.now_ms();
        let window = FenceWindow {
            deadline_ms: now + spec.timeout_ms + PROCESS_DEADLINE_MARGIN_MS,
            start_by_ms: now + FENCE_START_WINDOW_MS,
        };
        match fence(env, spec, ids, &window).await? {
            FenceOutcome::Clear => {
                return start_in_window(env, spec, ids, &window, token)
                    .await
                    .map(Some)
            }
            FenceOutcome::Lost => return Err(group_lost()),
            FenceOutcome::Blocked(b) => {
                if !wait_for_blocker(env, &b, until_ms).await? {
                    return Ok(None);
                }
            }
        }
    }
    Ok(None)
}

async fn fence(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ids: &Ids<'_>,
    window: &FenceWindow,
) -> Result<FenceOutcome, StepFailure> {
    let now = env.clock.now_ms();
    spec.held
        .fence(env.db, ids.pid, window, now)
        .await
        .map_err(store_failure)
}

fn group_lost() -> StepFailure {
    FailureTag::GroupLost
        .fatal("this execution no longer holds its group: it must not start a command")
}

/// Fences one step retries: a blocker that ends lets the next fence pass,
/// unless a further process (another generation) blocks too.
const FENCE_ATTEMPTS_MAX: u32 = 4;

/// Starts the process (its checkout done, its fence just passed) within its
/// window. An agent older than start windows (a container still running the
/// previous image while a deploy of Sluice rolls out) refuses the field:
/// then the process is fenced again with its deadline as its window, so
/// "unknown to the sandbox" means ended only once even a stalled start
/// would have run out its timeout, and started without one.
async fn start_in_window(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ids: &Ids<'_>,
    window: &FenceWindow,
    token: Option<&Secret>,
) -> Result<ProcessState, StepFailure> {
    match spawn(env, spec, ids, Some(window.start_by_ms), token).await {
        Err(e) if predates_start_windows(&e) => {
            let unenforced = FenceWindow {
                start_by_ms: window.deadline_ms,
                ..*window
            };
            match fence(env, spec, ids, &unenforced).await? {
                FenceOutcome::Clear => spawn(env, spec, ids, None, token)
                    .await
                    .map_err(|e| sandbox_failure(FailureTag::SandboxUnavailable, e)),
                FenceOutcome::Lost => Err(group_lost()),
                FenceOutcome::Blocked(_) => Err(FailureTag::SandboxUnavailable
                    .retryable("another process took the fence while this one started")),
            }
        }
        Err(e) => Err(sandbox_failure(FailureTag::SandboxUnavailable, e)),
        Ok(state) => Ok(state),
    }
}

/// An agent from before start windows refuses the unknown field.
fn predates_start_windows(e: &SandboxError) -> bool {
    e.status == Some(400) && e.message.contains("start_by_ms")
}

/// Long-polls the process that blocks a fence (in its own sandbox) for at
/// most one step's wait, until `until_ms`. True once its sandbox says it
/// ended (then it is marked so): seen finished, or unknown once its start
/// window passed (before that it may still be started). False while it
/// may still run, or its sandbox does not answer: no clock ends it.
async fn wait_for_blocker(
    env: &RunEnv<'_>,
    b: &Blocker,
    until_ms: i64,
) -> Result<bool, StepFailure> {
    for _ in 0..POLLS_PER_STEP {
        // Taken before the call: an answer "unknown" given after the window
        // passed (by this clock, less the skew) is final.
        let asked_ms = env.clock.now_ms();
        if asked_ms >= until_ms {
            return Ok(false);
        }
        let poll_ms = PROCESS_POLL_MS.min(until_ms - asked_ms);
        let ended = match env
            .sandbox
            .process(&b.sandbox_id, &b.process_id, poll_ms, None)
            .await
        {
            Ok(None) if b.unknown_means_ended(asked_ms, SANDBOX_CLOCK_SKEW_MS) => true,
            Ok(None) => {
                // Fenced and not started yet: it may still start until its
                // window passes. An unknown process answers at once.
                let until_final = b.start_by_ms.unwrap_or(asked_ms) + SANDBOX_CLOCK_SKEW_MS + 1;
                env.clock
                    .sleep((until_final - asked_ms).clamp(1, poll_ms))
                    .await;
                false
            }
            Ok(Some(state)) => state.finished(),
            // An unreachable sandbox answers at once: wait as a poll would.
            Err(_) => {
                env.clock.sleep(poll_ms).await;
                false
            }
        };
        if ended {
            fence::ended(env.db, &b.process_id, env.clock.now_ms())
                .await
                .map_err(store_failure)?;
            return Ok(true);
        }
    }
    Ok(false)
}

/// Starts the process: `start_by_ms` is its window (None: an agent that
/// predates them).
async fn spawn(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ids: &Ids<'_>,
    start_by_ms: Option<i64>,
    checkout_token: Option<&Secret>,
) -> Result<ProcessState, SandboxError> {
    let mut all_env = spec.env.clone();
    for (k, v) in &spec.secret_env {
        all_env.insert(k.clone(), v.expose().clone());
    }
    // The agent scrubs these as output arrives, before it truncates any.
    let redact: Vec<&str> = spec
        .secret_env
        .iter()
        .map(|(_, v)| v.expose().as_str())
        .chain(checkout_token.map(|t| t.expose().as_str()))
        .collect();
    let p = ProcessSpec {
        id: ids.pid,
        workspace: ids.ws,
        command: spec.command,
        timeout_ms: spec.timeout_ms,
        env: all_env,
        redact,
        start_by_ms,
    };
    env.sandbox.start(spec.held.sandbox_id, &p).await
}

/// Best effort: a token whose revocation fails still expires within the
/// hour GitHub gives it, and only the agent's git ever held it.
async fn revoke(env: &RunEnv<'_>, token: &Secret) {
    let _ = env.github.revoke_token(token).await;
}

/// Checks out the commit into the command's workspace unless it already
/// holds it, ahead of the command step (a cache restored into it first):
/// the command step then finds the checkout and keeps it.
pub async fn prepare_workspace(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ws: &str,
) -> Result<(), StepFailure> {
    if let Some(token) = ensure_workspace(env, spec, ws).await? {
        revoke(env, &token).await;
    }
    Ok(())
}

/// Makes the workspace the tree the step before left (`Continuation`):
/// as it is, when that step's process is the last that started in it;
/// else restored from the chain. False when nothing can restore it.
async fn resume(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    cont: Continuation<'_>,
    ws: &str,
) -> Result<bool, StepFailure> {
    let sandbox = spec.held.sandbox_id;
    let state = env
        .sandbox
        .workspace(sandbox, ws)
        .await
        .map_err(|e| sandbox_failure(FailureTag::SandboxUnavailable, e))?;
    if state.exists && state.last_process.as_deref() == Some(cont.after) {
        return Ok(true);
    }
    if cont.chain.is_empty() {
        return Ok(false);
    }
    checkout_fresh(env, spec, ws).await?;
    super::snapshots::restore_chain(env, sandbox, ws, cont.chain, cont.after).await
}

/// Replaces the workspace with a fresh checkout of the commit, whatever it
/// holds: the base a job's snapshots are unpacked over.
pub async fn checkout_fresh(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ws: &str,
) -> Result<(), StepFailure> {
    let repo_url = crate::github::clone_url(&env.git_url, spec.repo)
        .map_err(|m| FailureTag::CheckoutFailed.fatal(m))?;
    let token = env
        .github
        .checkout_token(spec.installation_id, spec.repo)
        .await
        .map_err(|e| FailureTag::GitHubApi.failure(e.to_string(), e.retryable()))?;
    let checkout = Checkout {
        workspace: ws,
        repo_url: &repo_url,
        sha: spec.sha,
        token: Some(&token),
        baseline: true,
    };
    let made = env.sandbox.checkout(spec.held.sandbox_id, &checkout).await;
    revoke(env, &token).await;
    made.map_err(|e| sandbox_failure(FailureTag::CheckoutFailed, e))
}

/// Checks out the commit unless the workspace already holds it (a retried
/// attempt on the same container); the token of a checkout it made.
async fn ensure_workspace(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ws: &str,
) -> Result<Option<Secret>, StepFailure> {
    let sandbox = spec.held.sandbox_id;
    let repo_url = crate::github::clone_url(&env.git_url, spec.repo)
        .map_err(|m| FailureTag::CheckoutFailed.fatal(m))?;
    // A token of its own that can only read this repository, revoked as
    // soon as git is done with it: nothing of it outlives the checkout.
    // Asked for beside the workspace's state: a command's first round (the
    // only one that gets here without a process) finds no checkout, and
    // the two calls in a row were on every check's path.
    let holds = |state: &Result<WorkspaceState, SandboxError>| {
        matches!(state, Ok(s) if s.exists && s.sha.as_deref() == Some(spec.sha)
            && !(spec.pristine && s.pristine != Some(true)))
    };
    let mint = env.github.checkout_token(spec.installation_id, spec.repo);
    let (state, token) = if spec.prepared {
        // An earlier step checked it out (a cache restore): only a lost
        // container needs a token now.
        let state = env.sandbox.workspace(sandbox, ws).await;
        if holds(&state) {
            return Ok(None);
        }
        (state, mint.await)
    } else {
        join(env.sandbox.workspace(sandbox, ws), mint).await
    };
    let checked_out = holds(&state);
    if checked_out || state.is_err() {
        if let Ok(token) = &token {
            revoke(env, token).await;
        }
    }
    if checked_out {
        return Ok(None);
    }
    state.map_err(|e| sandbox_failure(FailureTag::SandboxUnavailable, e))?;
    let token = token.map_err(|e| FailureTag::GitHubApi.failure(e.to_string(), e.retryable()))?;
    let checkout = Checkout {
        workspace: ws,
        repo_url: &repo_url,
        sha: spec.sha,
        token: Some(&token),
        baseline: spec.pristine,
    };
    if let Err(e) = env.sandbox.checkout(sandbox, &checkout).await {
        revoke(env, &token).await;
        return Err(sandbox_failure(FailureTag::CheckoutFailed, e));
    }
    // Revoked beside the fence and the start (`start_fenced`).
    Ok(Some(token))
}

/// What a round waits on.
struct Waiting<'a> {
    sandbox: &'a str,
    pid: &'a str,
    /// The round's wait ends then (ms).
    until_ms: i64,
    interrupted: &'a dyn Fn() -> bool,
}

/// Waits (long-polling) for the process to finish, until `w.until_ms` and
/// at most `POLLS_PER_STEP` polls, storing the output of every poll; None
/// when it is still running then.
async fn wait_for_exit(
    env: &RunEnv<'_>,
    w: &Waiting<'_>,
    mut state: ProcessState,
    log: &mut LogCursor<'_>,
) -> Result<Option<ProcessState>, StepFailure> {
    for _ in 0..POLLS_PER_STEP {
        log.take(env, &state).await?;
        // A terminate or pause waits for the next durable call: end the
        // step as still running (the process is finalize's to kill), even
        // when the process ended meanwhile, so the interrupt decides.
        if (w.interrupted)() {
            return Ok(None);
        }
        if state.finished() {
            return Ok(Some(state));
        }
        let left_ms = w.until_ms - env.clock.now_ms();
        if left_ms <= 0 {
            return Ok(None);
        }
        state = env
            .sandbox
            .process(w.sandbox, w.pid, PROCESS_POLL_MS.min(left_ms), Some(log.at))
            .await
            .map_err(|e| sandbox_failure(FailureTag::SandboxUnavailable, e))?
            .ok_or_else(|| {
                FailureTag::ProcessLost
                    .retryable("the sandbox no longer knows the process (container replaced)")
            })?;
    }
    log.take(env, &state).await?;
    Ok((state.finished() && !(w.interrupted)()).then_some(state))
}

/// The last lines of a log, within the summary budget, cut on a char
/// boundary.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.trim_end().lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES_MAX);
    let joined = lines[start..].join("\n");
    if joined.len() <= LOG_TAIL_BYTES_MAX {
        return joined;
    }
    let mut cut = joined.len() - LOG_TAIL_BYTES_MAX;
    while !joined.is_char_boundary(cut) {
        cut += 1;
    }
    joined[cut..].to_owned()
}

/// The exit status POSIX shells give when they find no command of that name
/// (`sh -c` runs every command Sluice starts).
const EXIT_COMMAND_NOT_FOUND: i32 = 127;
/// Longest command name quoted back from a shell's "not found" line: longer
/// is not a name a person typed, and the summary stays readable.
const MISSING_COMMAND_CHARS_MAX: usize = 100;

/// The command a shell said it could not find, from the log's last lines:
/// dash's `sh: 1: cargo: not found`, bash's `bash: line 1: cargo: command
/// not found`, busybox's `sh: cargo: not found`. The last such line wins.
pub fn missing_command(tail: &str) -> Option<&str> {
    tail.lines().rev().find_map(|line| {
        let line = line.trim_end();
        let front = line
            .strip_suffix(": command not found")
            .or_else(|| line.strip_suffix(": not found"))?;
        let name = front.rsplit(": ").next()?.trim();
        let plain = !name.is_empty()
            && name.len() <= MISSING_COMMAND_CHARS_MAX
            && !name.contains(|c: char| c.is_whitespace() || c == '`' || c.is_control());
        plain.then_some(name)
    })
}

/// Why a command ended 127, for the summary: which command the shell did not
/// find, and where Sluice's sandboxes take their tools from.
fn not_found_explained(tail: &str) -> String {
    let what = match missing_command(tail) {
        Some(name) => format!("`{name}` was not found"),
        None => "a command it runs was not found".to_owned(),
    };
    format!(
        " {what}: exit 127 is the shell's \"command not found\", so no directory on the \
         sandbox's `PATH` holds it. Commands have the tools of the sandbox image \
         (`crates/sandbox-agent/Dockerfile` on Cloudflare), or locally those on the `PATH` \
         the sandbox agent was started with (toolchains in its user's home are mounted \
         read-only; the agent names at startup any it could not reach)."
    )
}

// The parts of a command's summary that `summary_parts` finds again.
const TAIL_INTRO: &str = "\n\nLast lines of the log (";
const TAIL_OPEN: &str = "):\n\n```\n";
const TAIL_CLOSE: &str = "\n```";

/// What a summary `verdict_of` wrote says, in two parts: how the command
/// ended (its first paragraph) and the last lines of its log. None for a
/// summary `verdict_of` did not write. The dashboard shows them on a failed
/// run's page (`http::pages::execution`). Notes after the log (a job's
/// steps, its caches) are not part of it.
pub fn summary_parts(summary: &str) -> Option<(&str, &str)> {
    let (how, rest) = summary.split_once(TAIL_INTRO)?;
    let (_, fenced) = rest.split_once(TAIL_OPEN)?;
    let (tail, notes) = fenced.rsplit_once(TAIL_CLOSE)?;
    (notes.is_empty() || notes.starts_with("\n\n")).then_some((how, tail))
}

/// Maps a command's end to a verdict, with the log tail in the summary.
pub fn verdict_of(command: &str, r: &CommandResult) -> Verdict {
    verdict_in(command, r, None)
}

/// As `verdict_of`, naming the sandbox the command ran in (a check's job
/// chooses its image class): "... after 1.2 s in the `rust` sandbox
/// (standard-1)."
pub fn verdict_in(command: &str, r: &CommandResult, sandbox: Option<&str>) -> Verdict {
    let place = sandbox
        .and_then(crate::sandbox::image::described)
        .map(|d| format!(" in {d}"))
        .unwrap_or_default();
    let seconds = r.duration_ms.unwrap_or(0) as f64 / 1000.0;
    let how = match (r.timed_out, r.exit_code) {
        (true, _) => "timed out".to_owned(),
        (false, Some(code)) => format!("exited with code {code}"),
        (false, None) => "was killed by a signal".to_owned(),
    };
    let full = match &r.log_url {
        Some(url) => format!("[the full log]({url}), link valid 7 days"),
        None => format!("stored at `{}`", r.log_key),
    };
    let why = match (r.timed_out, r.exit_code) {
        (false, Some(EXIT_COMMAND_NOT_FOUND)) => not_found_explained(&r.tail),
        _ => String::new(),
    };
    let summary = format!(
        "`{command}` {how} after {seconds:.1} s{place}.{why}{TAIL_INTRO}{} bytes in all, {full}{TAIL_OPEN}{}{TAIL_CLOSE}",
        r.output_bytes, r.tail
    );
    match (r.timed_out, r.exit_code) {
        (true, _) => Verdict::TimedOut { summary },
        (false, Some(0)) => Verdict::Passed { summary },
        _ => Verdict::Failed { summary },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(exit_code: Option<i32>, tail: &str) -> CommandResult {
        CommandResult {
            exit_code,
            timed_out: false,
            tail: tail.to_owned(),
            log_key: "logs/x".to_owned(),
            output_bytes: tail.len() as u64,
            duration_ms: Some(12),
            log_url: None,
            environment_url: None,
            started: None,
            process: None,
        }
    }

    #[test]
    fn a_command_the_shell_did_not_find_is_named_with_why() {
        for (tail, name) in [
            ("sh: 1: cargo: not found", "cargo"),
            ("building\nbash: line 1: npm: command not found", "npm"),
            ("sh: pnpm: not found\n", "pnpm"),
            ("/bin/sh: 1: ./scripts/ci.sh: not found", "./scripts/ci.sh"),
        ] {
            assert_eq!(missing_command(tail), Some(name), "{tail:?}");
            let Verdict::Failed { summary } = verdict_of("x", &ended(Some(127), tail)) else {
                panic!("127 is a failure");
            };
            assert!(
                summary.contains(&format!("`{name}` was not found: exit 127")),
                "{summary}"
            );
            assert!(summary.contains("sandbox's `PATH`"), "{summary}");
        }
        for tail in [
            "",
            "error: file not found",
            "sh: 1: a b: not found",
            "sh: 1: : not found",
        ] {
            assert_eq!(missing_command(tail), None, "{tail:?}");
        }
        let Verdict::Failed { summary } = verdict_of("x", &ended(Some(127), "quiet")) else {
            panic!("127 is a failure");
        };
        assert!(
            summary.contains("a command it runs was not found: exit 127"),
            "{summary}"
        );
    }

    #[test]
    fn other_exits_carry_no_not_found_explanation() {
        let tail = "sh: 1: cargo: not found";
        for code in [Some(1), Some(126), None] {
            let verdict = verdict_of("x", &ended(code, tail));
            let (Verdict::Failed { summary } | Verdict::Passed { summary }) = verdict else {
                panic!("{verdict:?}");
            };
            assert!(!summary.contains("was not found"), "{summary}");
        }
    }

    #[test]
    fn the_last_environment_url_line_is_taken_when_it_is_publishable() {
        let log = "SLUICE_ENVIRONMENT_URL=https://old.example.com\n\
                   deployed\n\
                   SLUICE_ENVIRONMENT_URL=https://web-42.example.com/app?x=1 \r\n\
                   done\n";
        assert_eq!(
            environment_url_of(log).as_deref(),
            Some("https://web-42.example.com/app?x=1")
        );
        assert_eq!(environment_url_of("no marker\n"), None);
        assert_eq!(
            environment_url_of("  SLUICE_ENVIRONMENT_URL=https://a.example\n"),
            None,
            "the marker starts its line"
        );
        for bad in [
            "javascript:alert(1)",
            "ftp://files.example.com",
            "https://",
            "https:///path",
            "https://user:pass@example.com/",
            "https://example.com/a b",
            "https://example.com/\"><script>",
            "https://example.com/\u{7f}",
            "https://example.com/é",
            "https://***.example.com/",
        ] {
            assert!(!publishable_url(bad), "{bad:?}");
        }
        assert!(publishable_url("HTTP://localhost:8080/x#y"));
        assert_eq!(
            environment_url_of("SLUICE_ENVIRONMENT_URL=http://shop.example.com/\n"),
            None,
            "an environment URL is https"
        );
        assert!(!publishable_url(&format!(
            "https://example.com/{}",
            "a".repeat(ENVIRONMENT_URL_CHARS_MAX)
        )));
    }

    #[test]
    fn a_jobs_steps_keep_their_logs_and_nothing_else_passes_for_one() {
        assert_eq!(step_name(0, 0), "run step 1");
        assert_eq!(step_name(2, 1), "run step 3 (again 1)");
        for name in ["run step 1", "run step 20 (again 2)", CHECK_COMMAND_STEP] {
            assert!(keeps_log(name), "{name}");
        }
        for name in [
            "run step",
            "run step x",
            "run step 1 (again)",
            "run step 1 (again 1) ",
            "run step 1234",
            "read config",
        ] {
            assert!(!keeps_log(name), "{name}");
        }
        assert!(is_job_step_work("snapshot after run step 2"));
        assert!(is_job_step_work("check out again (1)"));
        assert!(!is_job_step_work(CHECK_COMMAND_STEP));
    }

    #[test]
    fn a_summary_with_notes_after_its_log_still_splits_into_how_and_tail() {
        let Verdict::Failed { summary } = verdict_of("x", &ended(Some(1), "boom\n```inner```"))
        else {
            panic!("exit 1 fails");
        };
        let noted = format!("{summary}\n\n**Steps**\n\n1. `x` failed (exit 1) in 0.0 s");
        let (how, tail) = summary_parts(&noted).expect("parts");
        assert!(how.starts_with("`x` exited with code 1"), "{how}");
        assert_eq!(tail, "boom\n```inner```");
        assert_eq!(summary_parts(&summary), Some((how, tail)));
    }

    #[test]
    fn tail_keeps_the_end() {
        let log: String = (0..200).map(|i| format!("line {i}\n")).collect();
        let t = tail(&log);
        assert!(t.ends_with("line 199"));
        assert_eq!(t.lines().count(), LOG_TAIL_LINES_MAX);
        let wide = "é".repeat(LOG_TAIL_BYTES_MAX);
        assert!(tail(&wide).len() <= LOG_TAIL_BYTES_MAX);
    }
}

/// The prefix of a dispatch input's name in the command's environment.
pub const INPUT_VAR_PREFIX: &str = "SLUICE_INPUT_";

/// A dispatch's inputs as the command's environment: `SLUICE_INPUT_<NAME>`
/// (names are checked at the edge: `runs::dispatch`).
pub fn input_vars(inputs: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    inputs
        .iter()
        .map(|(k, v)| (format!("{INPUT_VAR_PREFIX}{k}"), v.clone()))
        .collect()
}
