//! Every bound Sluice enforces, in one place, units last, each with why.
//!
//! Relations between constants are checked at compile time at the bottom.

/// GitHub caps webhook payloads at 25 MB; anything larger is not from GitHub.
pub const WEBHOOK_BODY_BYTES_MAX: usize = 25 * 1024 * 1024;

/// ADR-0001 platform fact: 10,000 steps per instance by default.
pub const STEPS_PER_RUN_MAX_DEFAULT: u32 = 10_000;
/// ADR-0001: configurable up to 25,000.
pub const STEPS_PER_RUN_MAX_CEILING: u32 = 25_000;

/// ADR-0001: a step result is capped at 1 MiB; larger outputs go to R2.
pub const STEP_RESULT_BYTES_MAX: usize = 1024 * 1024;

/// Step names are keys in the journal and the D1 timeline; 256 keeps rows small.
pub const STEP_NAME_CHARS_MAX: usize = 256;

/// A step failure's message as the journal and the index keep it: room
/// for a command's log tail (`LOG_TAIL_BYTES_MAX`) several times over,
/// small enough that a failed entry (message and error, each escaped)
/// always fits one storage string.
pub const STEP_ERROR_MESSAGE_BYTES_MAX: usize = 64 * 1024;

/// Instance ids name Durable Objects and D1 rows; 100 matches Workflows.
pub const INSTANCE_ID_CHARS_MAX: usize = 100;

/// ADR-0001: the maximum sleep is 365 days.
pub const SLEEP_MS_MAX: i64 = 365 * 24 * 3600 * 1000;

/// Default run ceiling when a run declares none: long enough for any CI
/// command (which has its own 1 h timeout) plus queueing, short enough that
/// a wedged instance is noticed the same day.
pub const RUN_DURATION_MS_DEFAULT: i64 = 6 * 3600 * 1000;

/// How long a person has to decide (a first-time contributor's "Approve
/// and run", a deploy's confirmation, a release's approval) unless the
/// repository says otherwise: three days, a long weekend, the bound of a
/// human decision (ADR-0001 rule 3, docs/adr/0001-durable-execution-scope.md).
pub const HUMAN_DECISION_WINDOW_MS_DEFAULT: i64 = 72 * 3600 * 1000;

/// The longest run ceiling a run may set for itself (`Ctx::set_ceiling`): a
/// week covers the longest bounded human decision Sluice waits for (a 72 h
/// confirmation or approval, ADR-0001 rule 3) plus the work after it, and
/// keeps a forgotten instance from living for months.
pub const RUN_DURATION_MS_MAX: i64 = 7 * 24 * 3600 * 1000;

/// Default per-step wall-clock timeout: bounds a wedged step well inside the
/// run ceiling (ADR-0001 corollary: waits name themselves).
pub const STEP_TIMEOUT_MS_DEFAULT: i64 = 10 * 60 * 1000;

/// One pass (one Durable Object alarm invocation) may run 15 minutes of wall
/// clock. A step that would start after this much of the pass plus its own
/// timeout ends the pass first and starts in a fresh one; the remaining
/// minute is for the D1 mirror and the finalize after the body.
pub const PASS_DURATION_MS_MAX: i64 = 14 * 60 * 1000;

/// Default retries for a step: Workflows' default of 5 retries.
pub const STEP_RETRY_LIMIT_DEFAULT: u32 = 5;
/// Default delay before the first retry (Workflows uses 10 s; a CI step's
/// transient faults are mostly network blips, so 1 s retries sooner).
pub const STEP_RETRY_DELAY_MS_DEFAULT: i64 = 1_000;
/// Retry delays are capped so exponential backoff cannot outgrow a run.
pub const STEP_RETRY_DELAY_MS_MAX: i64 = 3600 * 1000;
/// Retry delays up to this are waited in-process; longer ones suspend the
/// instance (durably) so a long backoff costs no CPU.
pub const STEP_RETRY_INLINE_MS_MAX: i64 = 2_000;

/// An executor that crashed this many times in a row on the same instance
/// (process killed, isolate aborted) fails it rather than crash-looping.
pub const EXECUTOR_CRASHES_MAX: u32 = 5;

/// A repository's dependency caches at most, unless the operator sets
/// `CACHE_BYTES_PER_REPO`: GitHub Actions' own default cap (10 GB).
pub const CACHE_BYTES_PER_REPO_DEFAULT: u64 = 10 * 1000 * 1000 * 1000;

/// Completed instances are kept 30 days (ADR-0001: Workflows' retention).
pub const RETENTION_MS_DEFAULT: i64 = 30 * 24 * 3600 * 1000;

/// The cron sweep runs this often (`crons = ["* * * * *"]` in wrangler.toml;
/// `npm start` drives it at least as often). It is the fallback of every
/// push: a lost handoff costs at most this, a dead holder frees its group
/// within `HOLDER_STALE_MS` plus this.
pub const SWEEP_INTERVAL_MS: i64 = 60_000;
/// The sweep resumes an instance whose wake-up is this overdue: longer than
/// an alarm's usual lateness (a few ms) so it does not race live alarms.
pub const SWEEP_OVERDUE_MS: i64 = 30_000;
/// Instances the sweep resumes per pass: bounds one scheduled invocation.
pub const SWEEP_BATCH_MAX: u32 = 100;
/// Completed instances purged per sweep pass, likewise.
pub const PURGE_BATCH_MAX: u32 = 500;

/// Installation tokens last 1 h; refresh 5 min early so a token never
/// expires mid-request.
pub const TOKEN_REFRESH_MARGIN_MS: i64 = 5 * 60 * 1000;
/// App JWTs: GitHub refuses `exp` more than 10 min after `iat`; 9 min leaves
/// room for clock drift, and `iat` is back-dated 60 s for the same reason.
pub const APP_JWT_TTL_S: i64 = 9 * 60;
pub const APP_JWT_BACKDATE_S: i64 = 60;

/// Default timeout of a configured command (`[check] timeout`).
pub const COMMAND_TIMEOUT_MS_DEFAULT: i64 = 30 * 60 * 1000;
/// Hard cap on any command: the sandbox agent's own (the protocol's).
pub const COMMAND_TIMEOUT_MS_MAX: i64 = sluice_sandbox_protocol::TIMEOUT_MS_MAX as i64;
/// One long-poll of a detached process: below the agent's own cap (25 s)
/// and short enough that a lost container is noticed quickly.
pub const PROCESS_POLL_MS: i64 = 20_000;
// The agent answers a long-poll by its cap; past it the poll would stall.
const _: () = assert!(PROCESS_POLL_MS < sluice_sandbox_protocol::WAIT_MS_MAX as i64);

/// Lines of the log tail put in a check run summary: enough to see the
/// failure, far under GitHub's 65,535-character summary limit.
pub const LOG_TAIL_LINES_MAX: usize = 60;
/// Bytes of that tail, likewise.
pub const LOG_TAIL_BYTES_MAX: usize = 16 * 1024;
/// GitHub rejects check run summaries longer than this.
pub const CHECK_SUMMARY_CHARS_MAX: usize = 65_535;

/// `.sluice.toml` larger than this is refused: config, not data.
pub const CONFIG_BYTES_MAX: usize = 64 * 1024;

/// Steps listed by `GET /v1/executions/{id}`; a run may have 10,000.
pub const STEPS_LISTED_MAX: u32 = 1_000;
/// Executions listed per page by `GET /v1/executions`.
pub const EXECUTIONS_LISTED_MAX: u32 = 200;

const _: () = assert!(STEPS_PER_RUN_MAX_DEFAULT <= STEPS_PER_RUN_MAX_CEILING);
const _: () = assert!(RUN_DURATION_MS_DEFAULT <= RUN_DURATION_MS_MAX);
const _: () = assert!(STEP_TIMEOUT_MS_DEFAULT <= PASS_DURATION_MS_MAX);
const _: () = assert!(STEP_RETRY_INLINE_MS_MAX < STEP_TIMEOUT_MS_DEFAULT);
const _: () = assert!(COMMAND_TIMEOUT_MS_DEFAULT <= COMMAND_TIMEOUT_MS_MAX);
const _: () = assert!(COMMAND_TIMEOUT_MS_MAX < RUN_DURATION_MS_DEFAULT);
const _: () = assert!((APP_JWT_TTL_S + APP_JWT_BACKDATE_S) <= 10 * 60);
const _: () = assert!(LOG_TAIL_BYTES_MAX * 2 < CHECK_SUMMARY_CHARS_MAX);
const _: () = assert!(LOG_TAIL_BYTES_MAX * 2 < STEP_ERROR_MESSAGE_BYTES_MAX);
const _: () = assert!(STEPS_LISTED_MAX <= STEPS_PER_RUN_MAX_DEFAULT);

// --- gates ---

/// ADR-0004: a waiter queued this long behind a live holder fails
/// (`queued_timeout`); a repository may set its own in `[deploy.queue]`.
/// (ADR-0004: docs/adr/0004-serialized-run-groups.md)
pub const SERIAL_QUEUED_TIMEOUT_MS_DEFAULT: i64 = 60 * 60 * 1000;
/// ADR-0004: a holder whose last heartbeat is this old is presumed dead and
/// stops blocking its group; the next claim takes the group over.
pub const HOLDER_STALE_MS: i64 = 10 * 60 * 1000;
/// Holders of a group, a pool slot or a sandbox lease heartbeat this often:
/// three missed beats still leave them inside every staleness bound below.
pub const HEARTBEAT_INTERVAL_MS: i64 = 60_000;
/// A pool slot whose heartbeat is this old is purged by the next acquire of
/// the pool: a crashed run must not hold container capacity for long, and a
/// live one beats ten times in this window.
pub const SLOT_TTL_MS: i64 = 10 * 60 * 1000;
/// A sandbox lease lasts this long past its last heartbeat; then the next
/// claimant reclaims it. Same reasoning as `SLOT_TTL_MS`.
pub const LEASE_TTL_MS: i64 = 10 * 60 * 1000;
/// Queue-policy durations (`[deploy.queue]`) above this are refused: no run
/// lives a day (`RUN_DURATION_MS_DEFAULT` is 6 h), so a larger value could
/// never fire and is more likely a typo ("60h" for "60m").
pub const QUEUE_POLICY_MS_MAX: i64 = 24 * 3600 * 1000;
/// Containers a pool may admit at once: a config value above this is
/// clamped. Far above any account's container quota, small enough that an
/// admission count stays a cheap indexed scan.
pub const POOL_CAPACITY_MAX: u32 = 256;
/// Recently ended rows (superseded, timed out, skipped, taken over) listed by
/// "explain": enough to see a burst, small enough for one response.
pub const RECENT_SKIPS_LISTED_MAX: u32 = 20;
/// Waiters listed by "explain": with supersede on a group has at most one
/// non-imperative waiter, so this only bounds FIFO groups and raw commands.
pub const WAITERS_LISTED_MAX: u32 = 100;
/// Groups listed by the serial-queue overview.
pub const GROUPS_LISTED_MAX: u32 = 200;
/// Waiters one operator "skip all" skips in one statement; a larger backlog
/// takes a second call (the result says how many were skipped).
pub const SKIP_ALL_MAX: u32 = 1_000;

/// A fenced process must be started within this of its fence (the start
/// request's transit, a few ms, with room for a slow network); the sandbox
/// refuses it later, and the caller fences again. Short, because a taker
/// that finds the process unknown waits this long before it may judge it
/// never started (`gates::fence::Blocker::unknown_means_ended`).
pub const FENCE_START_WINDOW_MS: i64 = 60_000;
/// The clock difference allowed between the Worker and a sandbox when the
/// start window is judged: both keep NTP time; a minute covers a container
/// host's drift many times over.
pub const SANDBOX_CLOCK_SKEW_MS: i64 = 60_000;

const _: () = assert!(HEARTBEAT_INTERVAL_MS * 3 <= HOLDER_STALE_MS);
// A holder taken over waits for its predecessor's start window well within
// the time the group was silent before the takeover.
const _: () = assert!(FENCE_START_WINDOW_MS + SANDBOX_CLOCK_SKEW_MS < HOLDER_STALE_MS);
// ADR-0004 freed a dead holder's group after 10 minutes; with the sweep the
// group is free at most one interval later (the 11-minute target).
const _: () = assert!(HOLDER_STALE_MS + SWEEP_INTERVAL_MS <= 11 * 60 * 1000);
const _: () = assert!(SWEEP_OVERDUE_MS < SWEEP_INTERVAL_MS);
const _: () = assert!(HEARTBEAT_INTERVAL_MS * 3 <= SLOT_TTL_MS);
const _: () = assert!(HEARTBEAT_INTERVAL_MS * 3 <= LEASE_TTL_MS);
// A dead holder frees its group well before the waiters behind it time out.
const _: () = assert!(HOLDER_STALE_MS < SERIAL_QUEUED_TIMEOUT_MS_DEFAULT);
const _: () = assert!(SERIAL_QUEUED_TIMEOUT_MS_DEFAULT <= QUEUE_POLICY_MS_MAX);
const _: () = assert!(WAITERS_LISTED_MAX <= SKIP_ALL_MAX);

// --- containers ---

/// `max_instances` of the `[[containers]]` entry in wrangler.toml: the most
/// sandbox containers Cloudflare runs for this Worker at once (one per run
/// instance that holds a pool slot). The pool must never admit more runs
/// than this (`POOL_CAPACITY`), or the run past it cannot start its
/// container: `tests/container_lifecycle.rs` reads wrangler.toml and keeps
/// `max_instances` equal to this and any `POOL_CAPACITY` set there within
/// it, and `tools/stack/containers.mjs` checks the same of the local
/// layer's vars.
pub const CONTAINER_INSTANCES_MAX: u32 = 20;
const _: () = assert!(CONTAINER_INSTANCES_MAX <= POOL_CAPACITY_MAX);

/// A signed dispatch (`POST /v1/dispatch`) is good this long, and this far
/// in the future for clock skew: long enough for a workflow step's
/// retries, short enough that a captured request is soon useless.
pub const DISPATCH_WINDOW_MS: i64 = 5 * 60 * 1000;
