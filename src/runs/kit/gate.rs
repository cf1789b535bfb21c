//! The gates as one primitive: a run calls [`with_gates`] with what it
//! needs (an optional serial group with its policy, the sandbox pool) and a
//! body, and the primitive
//!
//! 1. acquires in order: the serial group (ADR-0004: enqueue, claim, wait
//!    for the handoff), a pool slot (admission), the sandbox lease;
//! 2. runs the body while a concurrent heartbeat keeps everything held
//!    alive (every `HEARTBEAT_INTERVAL_MS`, also while a long sandbox call
//!    such as a checkout is in flight);
//! 3. releases on every exit path exactly once (a journaled cleanup step),
//!    after killing and confirming the end of any process the instance
//!    still has (kill before release), and hands what it freed to the next
//!    waiter in a durable step with retries. A run whose verdict is the
//!    gates' names its check run in [`Gates::report`]: the primitive
//!    concludes it just before the release (a journaled step, bounded), so
//!    the release is off the path to the verdict and still follows on
//!    every path (a failed conclusion is `reported`'s again after it).
//!
//! The body spawns processes only through [`Held::fence`] (via
//! `command::run_command`), which verifies in the same D1 statement that
//! records the process that this execution still holds its group and that
//! no other process of the group or the sandbox is live. No run writes its
//! own gate protocol.
//!
//! Operator commands: [`prepare_restart`] re-enters the gates (kill, release,
//! queue afresh) or refuses a restart that would skip them; [`finalize`]
//! releases what an instance that ended from outside still holds, and the
//! sweep calls it again until it succeeds.
//! (ADR-0004: docs/adr/0004-serialized-run-groups.md)

use std::convert::Infallible;
use std::future::Future;

use futures_util::future::{select, Either};
use serde::{Deserialize, Serialize};

use crate::engine::{Backoff, Ctx, RestartRequest, RunError, StepConfig, StepFailure};
use crate::gates::fence::{self, FenceOutcome, Spawn};
use crate::gates::policy::{Current, QueuePolicy, SkipReason};
use crate::gates::serial::{self, Arrival, ClaimOutcome, EnqueueOutcome};
use crate::gates::{admission, lease};
use crate::limits::{HEARTBEAT_INTERVAL_MS, HOLDER_STALE_MS, SANDBOX_CLOCK_SKEW_MS, SLOT_TTL_MS};
use crate::obs::{self, Kind, Subject};
use crate::store::{Database, StoreError};

use super::report::{github_failure, github_step, Report, Verdict};
use super::tags::{FailureTag, SkipTag};
use super::RunEnv;

/// The sandbox pool every gated run is admitted to.
pub const POOL: &str = "sandbox";
/// Every check also takes a slot here (`RunEnv::checks_capacity`), so the
/// untrusted code of pull requests never holds the sandboxes deploys need.
pub const CHECKS_POOL: &str = "checks";

/// Sandboxes kept for deploys when `CHECKS_CAPACITY` is unset: a deploy
/// waits at most for the deploys ahead of it, never for pull requests.
const DEPLOY_SLOTS_RESERVED: u32 = 2;
/// Checks of one repository at once when `CHECKS_PER_REPO` is unset: a
/// pull request and its rebase, say.
const CHECKS_PER_REPO_DEFAULT: u32 = 2;

/// The checks' capacities from the operator's settings: all checks
/// together (at most `pool_capacity - 1`, so one sandbox always stays for
/// deploys), and per repository (at most that).
pub fn check_capacities(
    pool_capacity: u32,
    checks_capacity: Option<u32>,
    checks_per_repo: Option<u32>,
) -> (u32, u32) {
    let ceiling = pool_capacity.saturating_sub(1).max(1);
    let all = checks_capacity
        .unwrap_or(pool_capacity.saturating_sub(DEPLOY_SLOTS_RESERVED))
        .clamp(1, ceiling);
    let per_repo = checks_per_repo
        .unwrap_or(CHECKS_PER_REPO_DEFAULT)
        .clamp(1, all);
    (all, per_repo)
}

/// The pool of one repository's checks (`RunEnv::checks_per_repo`): one
/// busy repository cannot take every check slot.
pub fn checks_pool_of(repo: &str) -> String {
    format!("checks:{repo}")
}
/// The event a releasing holder (or the sweep) sends the next waiter.
pub const TURN_EVENT: &str = "serial-turn";
/// The event a released pool slot sends the oldest queued run.
pub const SLOT_EVENT: &str = "pool-turn";

/// Claims one waiter makes: each follows its arrival, a wake-up (a handoff,
/// the sweep, which wakes only a waiter whose claim takes the group) or its
/// queued-timeout deadline, so a real wait needs three; the bound only stops
/// a storm of stray events.
const SERIAL_CLAIMS_MAX: u32 = 32;
/// An imperative waiter never times out; it claims again this often when no
/// handoff came (the run ceiling bounds it).
const IMPERATIVE_WAIT_MS: i64 = 60 * 60 * 1000;
/// A queued pool slot polls this often when no release woke it: its
/// heartbeat (each acquire refreshes it) stays well inside `SLOT_TTL_MS`,
/// and a lost wake-up costs at most this.
const ADMISSION_POLL_MS: i64 = 60_000;
/// A run waits this long for pool capacity before it reports an
/// infrastructure fault: commands end within their 1 h cap, so a full pool
/// frees a slot well within it.
const ADMISSION_WAIT_MS_MAX: i64 = 60 * 60 * 1000;
/// Admission rounds per pool: one per poll up to the wait bound, plus the
/// first.
const ADMISSION_ROUNDS_MAX: u32 = (ADMISSION_WAIT_MS_MAX / ADMISSION_POLL_MS) as u32 + 1;
/// A busy lease is one a previous generation of this instance kept because
/// its process could not be confirmed dead; it frees within `LEASE_TTL_MS`,
/// so retry past that.
const LEASE_RETRIES: u32 = 11;
const LEASE_RETRY_DELAY_MS: i64 = 60_000;
/// A kill waits this long for the process to exit: SIGKILL is immediate
/// unless the process is stuck in uninterruptible I/O (the agent reaps for
/// 5 s).
pub const KILL_WAIT_MS: i64 = 10_000;
/// Handoff wakes: a few quick retries; a wake-up still lost is the sweep's.
const HANDOVER_RETRIES: u32 = 3;
const HANDOVER_RETRY_DELAY_MS: i64 = 1_000;

const _: () = assert!(ADMISSION_POLL_MS * 3 <= SLOT_TTL_MS);
const _: () = assert!(LEASE_RETRY_DELAY_MS * LEASE_RETRIES as i64 > crate::limits::LEASE_TTL_MS);
// A holder suspended in the lease's backoff still beats before it goes stale.
const _: () = assert!(LEASE_RETRY_DELAY_MS * 3 <= HOLDER_STALE_MS);

/// What a run asks the gates for.
pub struct Gates<'a> {
    pub serial: Option<Serial<'a>>,
    /// The pools it takes a slot in, in this order (narrowest first: every
    /// run acquires in the same global order, so no two wait on each other).
    pub pools: &'a [Pool<'a>],
    /// The check run to conclude with the gates' verdict before they are
    /// released (`Report::conclude_held`), when that verdict is the run's
    /// (nothing after `with_gates` changes it). None: the run's `reported`
    /// concludes it after the release.
    pub report: Option<&'a Report<'a>>,
    /// The sandbox's address (`sandbox::image`) when the run chose an
    /// image class; None: the instance's own id (`base`).
    pub sandbox: Option<&'a str>,
}

/// An admission pool and its capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool<'a> {
    pub name: &'a str,
    pub capacity: u32,
}

/// A serial group (ADR-0004): one holder at a time, the newest waiter wins.
pub struct Serial<'a> {
    pub group: &'a str,
    /// The revision this execution would ship (a full sha).
    pub revision: &'a str,
    /// Where the current revision is read, once, before the enqueue: a
    /// branch head. None: arrival order decides.
    pub head: Option<BranchRef<'a>>,
    pub policy: &'a QueuePolicy,
    /// An operator's explicit revision: exempt from queue policy.
    pub imperative: bool,
}

/// A branch whose head is the current revision.
#[derive(Debug, Clone, Copy)]
pub struct BranchRef<'a> {
    pub installation_id: u64,
    pub repo: &'a str,
    pub branch: &'a str,
}

/// How this generation entered the gates; journaled first, so a replay and
/// an operator's restart know the gate id it holds by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateEntry {
    pub gate_id: String,
    pub group: Option<String>,
    /// The pools held, in acquisition order (`pool` in journals written
    /// before there were several).
    #[serde(default, alias = "pool", deserialize_with = "one_or_many")]
    pub pools: Vec<String>,
}

/// A string (an older journal's single pool) or a list of them.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(String),
        Many(Vec<String>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(p) => vec![p],
        OneOrMany::Many(ps) => ps,
    })
}

/// The times a fence records for a process about to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceWindow {
    /// When the agent's timeout ends it at the latest (shown, decides nothing).
    pub deadline_ms: i64,
    /// The sandbox refuses to start it after this.
    pub start_by_ms: i64,
}

/// What the body holds: handed to `run_command`, which fences every spawn.
#[derive(Debug, Clone)]
pub struct Held<'a> {
    pub instance_id: &'a str,
    pub gate_id: String,
    pub group: Option<&'a str>,
    pub pools: &'a [Pool<'a>],
    /// The sandbox (container) id: the instance's own.
    pub sandbox_id: &'a str,
}

impl Held<'_> {
    /// Records the process about to be spawned, if this execution may spawn
    /// it now (see `gates::fence`): it must then be started by
    /// `window.start_by_ms`.
    pub async fn fence(
        &self,
        db: &dyn Database,
        process_id: &str,
        window: &FenceWindow,
        now_ms: i64,
    ) -> Result<FenceOutcome, StoreError> {
        let spawn = Spawn {
            process_id,
            instance_id: self.instance_id,
            execution_id: &self.gate_id,
            group: self.group,
            sandbox_id: self.sandbox_id,
            deadline_ms: window.deadline_ms,
            start_by_ms: window.start_by_ms,
        };
        fence::fence(db, &spawn, now_ms).await
    }

    /// One heartbeat of everything held, in one batch. Errors are left to
    /// the next beat: the bounds allow several missed ones.
    async fn beat(&self, db: &dyn Database, now_ms: i64) {
        let mut stmts: Vec<_> = self
            .pools
            .iter()
            .map(|p| admission::heartbeat_stmt(p.name, self.instance_id, now_ms))
            .collect();
        stmts.push(lease::heartbeat_stmt(
            self.sandbox_id,
            &self.gate_id,
            now_ms,
        ));
        if let Some(group) = self.group {
            stmts.push(serial::heartbeat_stmt(group, &self.gate_id, now_ms));
        }
        let _ = db.batch(stmts).await;
    }
}

fn gate_failure(e: StoreError) -> StepFailure {
    FailureTag::Gate.retryable(e.to_string())
}

/// Acquires the gates, runs `body` holding them with a concurrent
/// heartbeat, and releases them on every exit but a suspension (which
/// keeps them: the instance resumes holding). A skip at the serial gate
/// (superseded, not current, timed out, an operator's) is the verdict.
pub async fn with_gates<'a, F, Fut>(
    ctx: &'a Ctx<'_>,
    env: &'a RunEnv<'_>,
    gates: &'a Gates<'_>,
    body: F,
) -> Result<Verdict, RunError>
where
    F: FnOnce(Held<'a>) -> Fut,
    Fut: Future<Output = Result<Verdict, RunError>>,
{
    let entry = enter(ctx, gates).await?;
    let held = Held {
        instance_id: ctx.instance_id(),
        gate_id: entry.gate_id,
        group: gates.serial.as_ref().map(|s| s.group),
        pools: gates.pools,
        sandbox_id: gates.sandbox.unwrap_or(ctx.instance_id()),
    };
    if let Some(s) = &gates.serial {
        match serial_turn(ctx, env, s, &held).await {
            Ok(Turn::Holding) => {}
            // Leaving the line passes the turn on.
            Ok(Turn::Skipped(v)) => return leave_with(ctx, env, gates, &held, Ok(v)).await,
            Err(e) => return leave_with(ctx, env, gates, &held, Err(e)).await,
        }
    }
    let work = async {
        if let Some(v) = admit(ctx, env, &held).await? {
            return Ok(v);
        }
        take_lease(ctx, env, &held).await?;
        body(held.clone()).await
    };
    let result = with_heartbeat(env, &held, work).await;
    let verdict = match result {
        Ok(v) => v,
        Err(e)
            if e.step_failure()
                .is_some_and(|f| FailureTag::GroupLost.is(f)) =>
        {
            lost_verdict()
        }
        Err(e) => return leave_with(ctx, env, gates, &held, Err(e)).await,
    };
    let verdict = note_if_lost(ctx, env, &held, verdict).await?;
    leave_with(ctx, env, gates, &held, Ok(verdict)).await
}

/// Leaves the gates with how the work (or the wait for the group) ended:
/// a suspension keeps them (the instance resumes holding); otherwise the
/// check run the run named (`Gates::report`) is concluded first, then
/// everything is released. The conclusion is a journaled step before the
/// release step: a pass that dies between them replays the conclusion and
/// releases; one that failed is `reported`'s again, after the release.
async fn leave_with(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    gates: &Gates<'_>,
    held: &Held<'_>,
    outcome: Result<Verdict, RunError>,
) -> Result<Verdict, RunError> {
    if matches!(&outcome, Err(e) if e.is_suspension()) {
        return outcome;
    }
    if let Some(report) = gates.report.filter(|_| !released_first(ctx)) {
        report.conclude_held(ctx, env, &outcome).await?;
    }
    leave(ctx, env, held).await?;
    outcome
}

/// Whether this instance's journal has its release where the conclusion
/// would go: a version before `Gates::report` released first and concluded
/// after (in `reported`), and an instance it left in flight replays in that
/// order (the engine compares each durable call with its journal entry).
fn released_first(ctx: &Ctx<'_>) -> bool {
    ctx.journaled_next()
        .is_some_and(|name| name.split('#').next() == Some(RELEASE_STEP))
}

fn lost_verdict() -> Verdict {
    Verdict::InfraFault {
        summary: format!(
            "Not run: this execution lost its group (it stalled past the {}-minute heartbeat \
             bound and a newer one took the group over), so it started no command.",
            HOLDER_STALE_MS / 60_000
        ),
    }
}

/// Runs `work` while beating everything `held` holds, from the first poll
/// and every `HEARTBEAT_INTERVAL_MS` after, until `work` ends.
async fn with_heartbeat<T>(env: &RunEnv<'_>, held: &Held<'_>, work: impl Future<Output = T>) -> T {
    let beats = beat_forever(env, held);
    match select(Box::pin(work), Box::pin(beats)).await {
        Either::Left((out, _)) => out,
        Either::Right((never, _)) => match never {},
    }
}

async fn beat_forever(env: &RunEnv<'_>, held: &Held<'_>) -> Infallible {
    loop {
        held.beat(env.db, env.clock.now_ms()).await;
        env.clock.sleep(HEARTBEAT_INTERVAL_MS).await;
    }
}

/// The first gate step: fixes the gate id this generation holds by.
async fn enter(ctx: &Ctx<'_>, gates: &Gates<'_>) -> Result<GateEntry, RunError> {
    ctx.step(ENTER_STEP, StepConfig::once(), |_| async {
        Ok(GateEntry {
            gate_id: serial::execution_id_of(ctx.instance_id(), ctx.generation()),
            group: gates.serial.as_ref().map(|s| s.group.to_owned()),
            pools: gates.pools.iter().map(|p| p.name.to_owned()).collect(),
        })
    })
    .await
}

// --- step names: the acquisition steps are a contiguous region of the
// journal, which `prepare_restart` finds by these names ---

const ENTER_STEP: &str = "gate: enter";
const HEAD_STEP: &str = "gate: read head";
const ENQUEUE_STEP: &str = "gate: enqueue";
const SUPERSEDED_STEP: &str = "gate: tell superseded";
const CLAIM_STEP: &str = "gate: claim";
const TURN_WAIT: &str = "gate: turn";
const ADMISSION_STEP: &str = "gate: admission";
const SLOT_WAIT: &str = "gate: slot";
const LEASE_STEP: &str = "gate: lease";
const ACQUIRE_STEPS: [&str; 9] = [
    ENTER_STEP,
    HEAD_STEP,
    ENQUEUE_STEP,
    SUPERSEDED_STEP,
    CLAIM_STEP,
    TURN_WAIT,
    ADMISSION_STEP,
    SLOT_WAIT,
    LEASE_STEP,
];
const STILL_HELD_STEP: &str = "check group still held";
const RELEASE_STEP: &str = "release gates";
const HANDOVER_STEP: &str = "hand over";

/// Whether `name` (without its `#n` occurrence count) is one of the gates'
/// own steps: entering, waiting for and holding the group, a slot and the
/// sandbox, and releasing them. The dashboard groups these as one phase
/// (`http::pages::phases`).
pub fn is_gate_step(name: &str) -> bool {
    ACQUIRE_STEPS.contains(&name) || [STILL_HELD_STEP, RELEASE_STEP, HANDOVER_STEP].contains(&name)
}

// --- the serial gate ---

enum Turn {
    Holding,
    Skipped(Verdict),
}

/// An enqueue and when it happened (the queued timeout counts from it).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Enqueued {
    outcome: EnqueueOutcome,
    at_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claimed {
    outcome: ClaimOutcome,
    at_ms: i64,
}

/// Past its queued-timeout deadline a waiter with no live holder ahead
/// (only older waiters) claims again this often: a holder that appears
/// later times it out within this.
const SERIAL_RECHECK_MS: i64 = 10 * 60 * 1000;

/// ADR-0004's path through the gate: read the current revision once,
/// enqueue (superseding older waiters in the same statement), then claim
/// until holding or skipped. A wait costs no CPU and O(1) steps: it waits
/// for the handoff event (a release, or the sweep for a lost one), bounded
/// by its queued-timeout deadline.
async fn serial_turn(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    s: &Serial<'_>,
    held: &Held<'_>,
) -> Result<Turn, RunError> {
    let read = read_current(ctx, env, s).await?;
    let arrived = enqueue(ctx, env, s, held, read).await?;
    match &arrived.outcome {
        EnqueueOutcome::NotCurrent { current } => {
            return Ok(Turn::Skipped(not_current(s, current)))
        }
        EnqueueOutcome::Queued { superseded } if !superseded.is_empty() => {
            let wake: Vec<Wake> = superseded
                .iter()
                .map(|x| Wake::turn(&x.execution_id))
                .collect();
            wake_step(ctx, env, SUPERSEDED_STEP, &wake).await?;
        }
        _ => {}
    }
    let deadline_ms = arrived.at_ms + s.policy.queued_timeout_ms;
    for _ in 0..SERIAL_CLAIMS_MAX {
        let claimed: Claimed = ctx
            .step(CLAIM_STEP, StepConfig::default(), |_| async {
                let at_ms = ctx.now_ms();
                let outcome = serial::claim(env.db, s.group, &held.gate_id, s.policy, at_ms)
                    .await
                    .map_err(gate_failure)?;
                log_claim(ctx, s.group, &outcome);
                Ok(Claimed { outcome, at_ms })
            })
            .await?;
        let remaining_ms = deadline_ms - claimed.at_ms;
        let wait_ms = match claimed.outcome {
            ClaimOutcome::Holding { .. } => return Ok(Turn::Holding),
            ClaimOutcome::Waiting { .. } if s.imperative => IMPERATIVE_WAIT_MS,
            // The claim just past the deadline decides the timeout.
            ClaimOutcome::Waiting { .. } if remaining_ms >= 0 => remaining_ms + 1,
            ClaimOutcome::Waiting { .. } => SERIAL_RECHECK_MS,
            other => return skip_of(s, other).map(Turn::Skipped),
        };
        match ctx.wait_for_event(TURN_WAIT, TURN_EVENT, wait_ms).await {
            Ok(_) | Err(RunError::EventTimedOut { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Turn::Skipped(timed_out(s)))
}

/// A read of the current revision, as journaled: the head (None when
/// GitHub named none) and when it was asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct HeadRead {
    head: Option<String>,
    asked_ms: i64,
}

/// A journaled head read: this version's, or an older version's bare
/// `Option<String>` (asked at an unknown time: refreshed at the enqueue).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum Journaled {
    Read(HeadRead),
    Bare(Option<String>),
}

/// The current revision and when it was asked for.
#[derive(Debug, Clone, PartialEq)]
struct CurrentRead {
    current: Current,
    asked_ms: Option<i64>,
}

impl CurrentRead {
    /// What a read says: the head it named, else Unknown (a branch GitHub
    /// names no head for cannot judge anyone).
    fn of(read: HeadRead) -> CurrentRead {
        match read.head {
            Some(sha) => CurrentRead {
                current: Current::Known(sha),
                asked_ms: Some(read.asked_ms),
            },
            None => CurrentRead::unknown(),
        }
    }

    fn unknown() -> CurrentRead {
        CurrentRead {
            current: Current::Unknown,
            asked_ms: None,
        }
    }

    /// Whether it may still judge the queue at `now_ms`: known, and asked
    /// for within `HEAD_READ_FRESH_MS`.
    fn fresh_at(&self, now_ms: i64) -> bool {
        matches!(self.current, Current::Known(_))
            && self
                .asked_ms
                .is_some_and(|at| now_ms - at <= HEAD_READ_FRESH_MS)
    }
}

/// A head read older than this when its enqueue runs (a D1 backoff, a
/// suspended or crashed pass, the watchdog between them) is read again
/// inside the enqueue: the queue is judged by a head no older than a few
/// seconds. Supersession by a read stays safe whatever its age (only
/// waiters that arrived before it are judged by it); this keeps a stale
/// arrival from waiting in line only to be skipped at its dequeue.
const HEAD_READ_FRESH_MS: i64 = 5_000;

/// The current revision, read before the queue is touched (ADR-0004); the
/// enqueue reads it again when this read is stale by then. A failed read
/// supersedes nobody. Imperative work is exempt.
async fn read_current(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    s: &Serial<'_>,
) -> Result<CurrentRead, RunError> {
    let Some(b) = s.head.filter(|_| !s.imperative) else {
        return Ok(CurrentRead {
            current: Current::NotDeclared,
            asked_ms: None,
        });
    };
    let head: Result<Journaled, RunError> = ctx
        .step(HEAD_STEP, github_step(), |_| async {
            read_head(env, b).await.map(Journaled::Read)
        })
        .await;
    match head {
        Ok(Journaled::Read(read)) => Ok(CurrentRead::of(read)),
        // An older version's read: its time is unknown, so it is stale.
        Ok(Journaled::Bare(Some(sha))) => Ok(CurrentRead {
            current: Current::Known(sha),
            asked_ms: None,
        }),
        Ok(Journaled::Bare(None)) => Ok(CurrentRead::unknown()),
        Err(e) if e.is_suspension() || e == RunError::Terminated => Err(e),
        Err(_) => Ok(CurrentRead::unknown()),
    }
}

/// One read of the branch head, stamped with when it was asked for.
async fn read_head(env: &RunEnv<'_>, b: BranchRef<'_>) -> Result<HeadRead, StepFailure> {
    let asked_ms = env.clock.now_ms();
    let head = env
        .github
        .branch_head(b.installation_id, b.repo, b.branch)
        .await
        .map_err(github_failure)?;
    Ok(HeadRead { head, asked_ms })
}

/// Enqueues with a head read no older than `HEAD_READ_FRESH_MS` (read again
/// here when the journaled one is older; a failed read again is Unknown),
/// judging only waiters that arrived before it was asked for.
async fn enqueue(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    s: &Serial<'_>,
    held: &Held<'_>,
    read: CurrentRead,
) -> Result<Enqueued, RunError> {
    ctx.step(ENQUEUE_STEP, StepConfig::default(), |_| {
        let read = read.clone();
        async move {
            let read = match (&read.current, s.head) {
                (Current::NotDeclared, _) | (_, None) => read,
                _ if read.fresh_at(env.clock.now_ms()) => read,
                (_, Some(b)) => match read_head(env, b).await {
                    Ok(fresh) => CurrentRead::of(fresh),
                    Err(_) => CurrentRead::unknown(),
                },
            };
            let arrival = Arrival {
                group: s.group,
                execution_id: &held.gate_id,
                revision: s.revision,
                current: read.current,
                current_read_ms: read.asked_ms,
                imperative: s.imperative,
            };
            let at_ms = ctx.now_ms();
            let outcome = serial::enqueue(env.db, &arrival, s.policy, at_ms)
                .await
                .map_err(gate_failure)?;
            log_enqueue(ctx, s.group, &outcome);
            Ok(Enqueued { outcome, at_ms })
        }
    })
    .await
}

fn skipped(
    reason: Option<SkipReason>,
    tag: SkipTag,
    summary: String,
    newer: Option<String>,
) -> Verdict {
    Verdict::Skipped {
        reason,
        tag,
        summary,
        newer,
    }
}

fn not_current(s: &Serial<'_>, current: &str) -> Verdict {
    let summary = match s.head {
        Some(b) => format!(
            "Not run: {} is not the head of `{}`; the head is {current}.",
            s.revision, b.branch
        ),
        None => format!(
            "Not run: {} is not the current revision {current}.",
            s.revision
        ),
    };
    skipped(
        Some(SkipReason::NotCurrent),
        SkipTag::RunSkipped,
        summary,
        Some(current.to_owned()),
    )
}

fn timed_out(s: &Serial<'_>) -> Verdict {
    skipped(
        Some(SkipReason::QueuedTimeout),
        SkipTag::SerialQueueTimedOut,
        format!(
            "Not run: {} waited over {} minutes behind a running one.",
            s.revision,
            s.policy.queued_timeout_ms / 60_000
        ),
        None,
    )
}

/// A claim that ends the wait without the group.
fn skip_of(s: &Serial<'_>, outcome: ClaimOutcome) -> Result<Verdict, RunError> {
    Ok(match outcome {
        ClaimOutcome::Superseded { by } => skipped(
            Some(SkipReason::Superseded),
            SkipTag::RunSkipped,
            format!("Not run: superseded by a newer revision, {by}."),
            Some(by),
        ),
        ClaimOutcome::TimedOut => timed_out(s),
        ClaimOutcome::Skipped { reason: None } => skipped(
            None,
            SkipTag::RunSkipped,
            "Not run: an operator skipped it.".into(),
            None,
        ),
        ClaimOutcome::Skipped { reason: Some(r) } => skipped(
            Some(r),
            SkipTag::RunSkipped,
            format!("Not run: skipped ({r})."),
            None,
        ),
        other => {
            return Err(RunError::NonRetryable {
                step: CLAIM_STEP.into(),
                failure: FailureTag::Gate.fatal(format!("unexpected claim outcome {other:?}")),
            })
        }
    })
}

// --- log lines of gate transitions (written inside the steps that make
// them, so a replay does not repeat them) ---

fn gate_line(subject: &Subject, gate: &str, name: &str, transition: &str) -> obs::Event {
    obs::event(Kind::GateTransition)
        .about(subject)
        .field("gate", gate)
        .field("name", Some(name).filter(|n| !n.is_empty()))
        .field("transition", transition)
}

fn log_enqueue(ctx: &Ctx<'_>, group: &str, outcome: &EnqueueOutcome) {
    let line = gate_line(ctx.subject(), "serial", group, "");
    match outcome {
        EnqueueOutcome::Queued { superseded } => line
            .field("transition", "queued")
            .field(
                "superseded",
                superseded
                    .iter()
                    .map(|x| serde_json::Value::from(x.execution_id.as_str()))
                    .collect::<Vec<_>>(),
            )
            .emit(),
        EnqueueOutcome::NotCurrent { current } => line
            .field("transition", "not_current")
            .field("current", current.as_str())
            .emit(),
        EnqueueOutcome::Existing(_) => {}
    }
}

/// A claim that changed something: holding, or ended without the group.
/// A claim that keeps waiting writes nothing (it repeats every wake-up).
fn log_claim(ctx: &Ctx<'_>, group: &str, outcome: &ClaimOutcome) {
    let line = gate_line(ctx.subject(), "serial", group, "");
    match outcome {
        ClaimOutcome::Waiting { .. } => {}
        ClaimOutcome::Holding { took_over } => line
            .field("transition", "holding")
            .field("took_over", took_over.clone())
            .emit(),
        ClaimOutcome::Superseded { by } => line
            .field("transition", "superseded")
            .field("by", by.as_str())
            .emit(),
        ClaimOutcome::TimedOut => line.field("transition", "timed_out").emit(),
        ClaimOutcome::Skipped { reason } => line
            .field("transition", "skipped")
            .field("reason", reason.map(|r| r.as_str()))
            .emit(),
        other => line.field("transition", format!("{other:?}")).emit(),
    }
}

// --- admission and the lease ---

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Admission {
    /// The round's last acquire admitted (so every pool it tried did).
    admitted: bool,
    at_ms: i64,
    /// Pools this round took, in order. A journal of an older version
    /// has none: its rounds tried one pool each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pools: Option<usize>,
}

impl Admission {
    fn pools_taken(&self) -> usize {
        self.pools.unwrap_or(usize::from(self.admitted))
    }
}

/// A slot in each pool, in order, FIFO: each round is one step that beats
/// the slots taken in earlier rounds and acquires the remaining pools in
/// order while they admit (each acquire keeps the place in line alive),
/// then, when one did not, a wait for a release's wake-up or the poll
/// interval. None when admitted to every pool; a verdict when capacity
/// never came.
async fn admit(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    held: &Held<'_>,
) -> Result<Option<Verdict>, RunError> {
    let mut first_ms = None;
    let mut taken = 0;
    let rounds = ADMISSION_ROUNDS_MAX as usize * held.pools.len().max(1);
    for _ in 0..rounds {
        if taken >= held.pools.len() {
            return Ok(None);
        }
        let a = acquire_round(ctx, env, held, taken).await?;
        taken += a.pools_taken();
        if a.admitted {
            continue;
        }
        if a.at_ms - *first_ms.get_or_insert(a.at_ms) >= ADMISSION_WAIT_MS_MAX {
            break;
        }
        match ctx
            .wait_for_event(SLOT_WAIT, SLOT_EVENT, ADMISSION_POLL_MS)
            .await
        {
            Ok(_) | Err(RunError::EventTimedOut { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if taken >= held.pools.len() {
        return Ok(None);
    }
    Ok(Some(Verdict::InfraFault {
        summary: format!(
            "No sandbox capacity within {} minutes.",
            ADMISSION_WAIT_MS_MAX / 60_000
        ),
    }))
}

/// One admission step: beat the first `taken` pools' slots (taken in
/// earlier rounds), then acquire the others in order until one queues. A
/// step that dies midway acquires again: an admitted holder stays admitted.
async fn acquire_round(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    held: &Held<'_>,
    taken: usize,
) -> Result<Admission, RunError> {
    ctx.step(ADMISSION_STEP, StepConfig::default(), |_| async {
        let at_ms = ctx.now_ms();
        let beats: Vec<_> = held.pools[..taken]
            .iter()
            .map(|p| admission::heartbeat_stmt(p.name, held.instance_id, at_ms))
            .collect();
        if !beats.is_empty() {
            env.db.batch(beats).await.map_err(gate_failure)?;
        }
        let mut pools = 0;
        for pool in &held.pools[taken..] {
            let out = admission::acquire(env.db, pool.name, held.instance_id, pool.capacity, at_ms)
                .await
                .map_err(gate_failure)?;
            if out != admission::AdmissionOutcome::Admitted {
                return Ok(Admission {
                    admitted: false,
                    at_ms,
                    pools: Some(pools),
                });
            }
            gate_line(ctx.subject(), "pool", pool.name, "admitted").emit();
            pools += 1;
        }
        Ok(Admission {
            admitted: true,
            at_ms,
            pools: Some(pools),
        })
    })
    .await
}

/// The sandbox lease, keyed by the sandbox id with this generation's gate
/// id as holder: two executions that would share a sandbox exclude each
/// other.
async fn take_lease(ctx: &Ctx<'_>, env: &RunEnv<'_>, held: &Held<'_>) -> Result<(), RunError> {
    let cfg = StepConfig::default().retries(LEASE_RETRIES, LEASE_RETRY_DELAY_MS, Backoff::Constant);
    ctx.step(LEASE_STEP, cfg, |_| async {
        match lease::acquire(env.db, held.sandbox_id, &held.gate_id, ctx.now_ms())
            .await
            .map_err(gate_failure)?
        {
            lease::LeaseOutcome::Acquired { .. } => {
                gate_line(ctx.subject(), "lease", held.sandbox_id, "acquired").emit();
                Ok(())
            }
            lease::LeaseOutcome::Busy { holder, .. } => Err(FailureTag::LeaseBusy
                .retryable(format!("sandbox {} is held by {holder:?}", held.sandbox_id))),
        }
    })
    .await
}

// --- after the body ---

/// A serial holder checks, once and journaled, that it still holds its
/// group: one that lost it while its command ran (it stalled and was taken
/// over; the command was not cancelled, ADR-0004) says so in its verdict.
async fn note_if_lost(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    held: &Held<'_>,
    verdict: Verdict,
) -> Result<Verdict, RunError> {
    let Some(group) = held.group else {
        return Ok(verdict);
    };
    let still: bool = ctx
        .cleanup_step(STILL_HELD_STEP, StepConfig::default(), |_| async {
            serial::heartbeat(env.db, group, &held.gate_id, ctx.now_ms())
                .await
                .map_err(gate_failure)
        })
        .await?;
    if still {
        return Ok(verdict);
    }
    Ok(verdict.with_note(format!(
        "Note: this execution lost `{group}` while its command ran (it stalled past the \
         {}-minute heartbeat bound and a newer one took the group over); the command was \
         not cancelled, and the newer one waited for it to end.",
        HOLDER_STALE_MS / 60_000
    )))
}

/// Someone to wake, and with which event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Wake {
    pub instance_id: String,
    pub event: String,
}

impl Wake {
    fn turn(execution_id: &str) -> Wake {
        Wake {
            instance_id: serial::instance_of(execution_id).to_owned(),
            event: TURN_EVENT.into(),
        }
    }
}

/// What a release did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Released {
    /// False when a process could not be confirmed ended: then nothing was
    /// released (the rows go stale; a taker waits for the process).
    pub released: bool,
    /// Who takes what was freed.
    pub wake: Vec<Wake>,
}

/// Releases everything, once (journaled), then hands it over.
async fn leave(ctx: &Ctx<'_>, env: &RunEnv<'_>, held: &Held<'_>) -> Result<(), RunError> {
    let released: Released = ctx
        .cleanup_step(RELEASE_STEP, StepConfig::default(), |_| async {
            release_all(env, held.instance_id, ctx.now_ms()).await
        })
        .await?;
    wake_step(ctx, env, HANDOVER_STEP, &released.wake).await
}

/// Wakes each, as a durable step with retries; a wake still failing after
/// them is left to the sweep (which finds free groups with live waiters).
async fn wake_step(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    name: &str,
    wake: &[Wake],
) -> Result<(), RunError> {
    if wake.is_empty() {
        return Ok(());
    }
    let cfg = StepConfig::default().retries(
        HANDOVER_RETRIES,
        HANDOVER_RETRY_DELAY_MS,
        Backoff::Exponential,
    );
    let sent = ctx
        .cleanup_step(name, cfg, |_| async {
            for w in wake {
                env.waker
                    .wake(&w.instance_id, &w.event)
                    .await
                    .map_err(|m| FailureTag::WakeFailed.retryable(m))?;
            }
            Ok(())
        })
        .await;
    match sent {
        Err(e) if e.is_suspension() => Err(e),
        _ => Ok(()),
    }
}

/// Kill before release: every process of the instance not known to have
/// ended is killed and its exit confirmed (bounded); only then are its
/// serial rows (every generation), pool slot and sandbox lease released.
pub async fn release_all(
    env: &RunEnv<'_>,
    instance_id: &str,
    now_ms: i64,
) -> Result<Released, StepFailure> {
    if !kill_live(env, instance_id, now_ms).await? {
        return Ok(Released {
            released: false,
            wake: Vec::new(),
        });
    }
    let mut wake = Vec::new();
    for (_, next) in serial::abandon(env.db, instance_id, now_ms)
        .await
        .map_err(gate_failure)?
    {
        wake.extend(next.as_deref().map(Wake::turn));
    }
    // Every pool it has a slot (or a place in line) in, whatever the
    // journal says: a finalize after a crash knows only the instance.
    for (_, next) in admission::release_everywhere(env.db, instance_id)
        .await
        .map_err(gate_failure)?
    {
        wake.extend(next.map(|instance_id| Wake {
            instance_id,
            event: SLOT_EVENT.into(),
        }));
    }
    let sandboxes = lease::release_sandbox(env.db, instance_id)
        .await
        .map_err(gate_failure)?;
    // A sandbox of an image class other than `base` is discarded with its
    // lease (finalize discards the instance's own id). Best effort: one that
    // does not answer is idled out by its own lifecycle.
    for sandbox in sandboxes.iter().filter(|s| s.as_str() != instance_id) {
        let _ = env.sandbox.discard(sandbox).await;
    }
    let subject = Subject {
        instance_id: instance_id.to_owned(),
        ..Subject::default()
    };
    gate_line(&subject, "all", "", "released")
        .field("woke", wake.len())
        .emit();
    Ok(Released {
        released: true,
        wake,
    })
}

/// Kills the instance's live processes; true when every one is confirmed
/// ended by its sandbox (seen exited, killed, or unknown to it once its
/// start window passed: `fence::LiveProcess::unknown_means_ended`).
/// Nothing is taken for ended because a clock passed alone: a sandbox that
/// does not answer keeps the gates held, and the sweep tries again.
pub async fn kill_live(
    env: &RunEnv<'_>,
    instance_id: &str,
    now_ms: i64,
) -> Result<bool, StepFailure> {
    let live = fence::live_of_instance(env.db, instance_id)
        .await
        .map_err(gate_failure)?;
    let mut all_ended = true;
    for p in live {
        let ended = match env
            .sandbox
            .kill(&p.sandbox_id, &p.process_id, KILL_WAIT_MS)
            .await
        {
            Ok(None) => p.unknown_means_ended(now_ms, SANDBOX_CLOCK_SKEW_MS),
            Ok(Some(state)) => state.finished(),
            Err(_) => false,
        };
        if ended {
            fence::ended(env.db, &p.process_id, now_ms)
                .await
                .map_err(gate_failure)?;
        } else {
            all_ended = false;
        }
    }
    Ok(all_ended)
}

/// Wakes each once, now; a failure is left to the sweep.
async fn wake_now(env: &RunEnv<'_>, wake: &[Wake]) {
    for w in wake {
        let _ = env.waker.wake(&w.instance_id, &w.event).await;
    }
}

// --- operator commands ---

/// After an instance ended by a path its body could not clean up on (an
/// operator's terminate, a crash loop, a release whose kill was not
/// confirmed): kill its processes, release its gates and wake whoever is
/// next. An error means something is still held; the sweep calls again.
pub async fn finalize(env: &RunEnv<'_>, instance_id: &str) -> Result<(), String> {
    let now = env.clock.now_ms();
    let released = release_all(env, instance_id, now)
        .await
        .map_err(|f| f.to_string())?;
    if !released.released {
        return Err(format!(
            "a process of {instance_id} could not be confirmed ended; its gates stay held"
        ));
    }
    wake_now(env, &released.wake).await;
    // Nothing of the run stays in its sandbox. Best effort: a sandbox that
    // does not answer is idled out by its own lifecycle.
    let _ = env.sandbox.discard(instance_id).await;
    Ok(())
}

/// Where the gates sit in a journal.
struct GateRegion {
    first: u32,
    last: u32,
    entry: Option<GateEntry>,
}

impl GateRegion {
    fn of(entries: &[crate::journal::Entry]) -> Option<GateRegion> {
        let is_acquire = |name: &str| {
            let base = name.split('#').next().unwrap_or(name);
            ACQUIRE_STEPS.contains(&base)
        };
        let mut acquire = entries.iter().filter(|e| is_acquire(&e.name));
        let first = acquire.next()?;
        let last = acquire.next_back().unwrap_or(first);
        let entry = entries
            .iter()
            .find(|e| e.name == ENTER_STEP)
            .and_then(|e| e.value.as_deref())
            .and_then(|v| serde_json::from_str(v).ok());
        Some(GateRegion {
            first: first.seq,
            last: last.seq,
            entry,
        })
    }
}

/// Whether a restart from `from_seq` skips the gates (a point past them):
/// only then does the new generation keep what the old one acquired.
pub fn is_past_gates(entries: &[crate::journal::Entry], from_seq: u32) -> bool {
    GateRegion::of(entries).is_some_and(|r| from_seq > r.last)
}

/// A restart re-enters the gates: from the top, before them or inside them,
/// the previous generation's process is killed (its end confirmed) and every
/// row it held released, and the new generation queues as a new arrival
/// (from the gates' first step when the restart point was inside them).
/// From a step past the gates, the restart is allowed only while this
/// execution still holds what it acquired (its process is killed first);
/// otherwise it is refused, naming why.
pub async fn prepare_restart(env: &RunEnv<'_>, req: &RestartRequest<'_>) -> Result<u32, String> {
    let Some(region) = GateRegion::of(req.entries) else {
        return Ok(req.from_seq);
    };
    let now = env.clock.now_ms();
    let unconfirmed = "the previous generation's process could not be confirmed ended; \
                       try the restart again";
    if req.from_seq <= region.last {
        let released = release_all(env, req.instance_id, now)
            .await
            .map_err(|f| f.to_string())?;
        if !released.released {
            return Err(unconfirmed.into());
        }
        wake_now(env, &released.wake).await;
        return Ok(req.from_seq.min(region.first));
    }
    let step = req
        .entries
        .iter()
        .find(|e| e.seq == req.from_seq)
        .map_or("?", |e| e.name.as_str());
    let holds = match &region.entry {
        Some(entry) => still_holds(env, req.instance_id, entry, now).await?,
        None => false,
    };
    if !holds {
        let what = region
            .entry
            .and_then(|e| e.group)
            .map_or("its sandbox slot".to_owned(), |g| format!("`{g}`"));
        return Err(format!(
            "restart from {step:?} would skip the gates, and this execution no longer holds \
             {what}; restart from the top (or from {ENTER_STEP:?}) to queue again"
        ));
    }
    if !kill_live(env, req.instance_id, now)
        .await
        .map_err(|f| f.to_string())?
    {
        return Err(unconfirmed.into());
    }
    Ok(req.from_seq)
}

/// Whether the execution still holds its group, its pool slot and its
/// lease (each heartbeat changes its row only while held).
async fn still_holds(
    env: &RunEnv<'_>,
    instance_id: &str,
    entry: &GateEntry,
    now_ms: i64,
) -> Result<bool, String> {
    let mut stmts: Vec<_> = entry
        .pools
        .iter()
        .map(|p| admission::heartbeat_stmt(p, instance_id, now_ms))
        .collect();
    stmts.push(lease::heartbeat_stmt(instance_id, &entry.gate_id, now_ms));
    if let Some(group) = &entry.group {
        stmts.push(serial::heartbeat_stmt(group, &entry.gate_id, now_ms));
    }
    let changes = env.db.batch(stmts).await.map_err(|e| e.to_string())?;
    Ok(changes.iter().all(|c| *c == 1))
}

#[cfg(test)]
mod tests {
    use super::{Admission, Journaled};

    /// A head read an older version journaled (a bare sha, or null) still
    /// decodes, as a read of unknown age (refreshed at the enqueue).
    #[test]
    fn an_older_journals_head_read_decodes_as_a_bare_read() {
        let bare: Journaled = serde_json::from_str(&format!("\"{}\"", "a".repeat(40))).unwrap();
        assert!(matches!(bare, Journaled::Bare(Some(ref s)) if s.len() == 40));
        let none: Journaled = serde_json::from_str("null").unwrap();
        assert!(matches!(none, Journaled::Bare(None)));
        let now: Journaled = serde_json::from_str(r#"{"head":"abc","asked_ms":5}"#).unwrap();
        assert!(matches!(now, Journaled::Read(ref r) if r.asked_ms == 5));
    }

    /// A round an older version journaled tried one pool: admitted, it took
    /// that one; queued, none. Replayed so, an instance running across the
    /// upgrade takes each pool once.
    #[test]
    fn an_older_journals_rounds_took_one_pool_each() {
        let old = |admitted| {
            serde_json::from_str::<Admission>(&format!(r#"{{"admitted":{admitted},"at_ms":5}}"#))
                .unwrap()
                .pools_taken()
        };
        assert_eq!((old(true), old(false)), (1, 0));
        let new: Admission =
            serde_json::from_str(r#"{"admitted":false,"at_ms":5,"pools":2}"#).unwrap();
        assert_eq!(new.pools_taken(), 2);
    }
}
