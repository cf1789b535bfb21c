//! Every bound the agent enforces, in one place, each with the reason for its value. The
//! bounds its callers must agree on (ids, timeouts, long-polls, body size) are the protocol's
//! (`sluice_sandbox_protocol`), re-exported here.

pub use sluice_sandbox_protocol::{
    ID_CHARS_MAX, REQUEST_BYTES_MAX, TIMEOUT_MS_MAX as EXEC_TIMEOUT_MS_MAX, WAIT_MS_MAX,
};

/// Requests handled at once (each gets its own thread). A run drives one step at a time, plus a
/// few long-polls and health checks; 32 leaves headroom without letting a flood of blocking
/// `exec` calls pin unbounded threads and output buffers.
pub const REQUESTS_CONCURRENT_MAX: usize = 32;

/// Bound on each git command of a checkout. A full-history fallback fetch of a large repository
/// can take minutes; past 10 minutes the step should fail and be retried rather than hang.
pub const GIT_TIMEOUT_MS: u64 = 10 * 60 * 1000;

/// Output kept in memory per command. 4 MiB covers the logs of nearly every build step while
/// keeping the worst case (all concurrent commands at the cap) within a small container.
pub const OUTPUT_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Leading part of the output always kept when truncating: the first lines usually say what
/// ran (versions, config); the remaining budget keeps the tail, where failures show up.
pub const OUTPUT_HEAD_BYTES: usize = 64 * 1024;

/// Size of one read from a command's output pipe; matches the Linux default pipe capacity.
pub const OUTPUT_READ_CHUNK_BYTES: usize = 64 * 1024;

/// First and last sleep between `try_wait` polls. Starting at 1 ms keeps quick commands (git
/// plumbing) quick; backing off to 50 ms keeps an hour-long command to ~20 wakeups a second,
/// and 50 ms is far below any timeout precision a caller cares about.
pub const WAIT_POLL_MS_MIN: u64 = 1;
pub const WAIT_POLL_MS_MAX: u64 = 50;

/// How long polls stay at `WAIT_POLL_MS_MIN` before backing off. A checkout is four git
/// commands of 5-50 ms each: doubling from the start saw a 33 ms fetch only at 63 ms, on the
/// path from a job's end to its dependent's start. 250 polls in the first quarter second cost
/// microseconds; a command still running past it is a long one.
pub const WAIT_POLL_FAST_MS: u64 = 250;

/// How long to wait for the output pipe to close after the command exited. Background children
/// that still hold the pipe get this long, then the process group is killed so the call returns.
pub const OUTPUT_DRAIN_MS: u64 = 2_000;

/// How long to wait for a SIGKILLed command to be reaped. SIGKILL is immediate unless the
/// process is stuck in uninterruptible I/O; after 5 s we report the kill and stop waiting.
pub const KILL_REAP_MS: u64 = 5_000;

/// Detached processes running at once. A job rarely needs more than a few background services;
/// 16 bounds threads, process groups and output buffers (16 x OUTPUT_BYTES_MAX).
pub const PROCESSES_MAX: usize = 16;

/// Finished process records kept so a retried step can still observe the exit. 256 covers
/// every step of a large job; older records are evicted first.
pub const FINISHED_PROCESSES_MAX: usize = 256;

/// Output bytes retained across all finished process records (oldest evicted first), so 256
/// records at the full output cap cannot hold 1 GiB of memory.
pub const FINISHED_OUTPUT_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Git output quoted in a `checkout_failed` message: the tail holds git's actual error line,
/// and 4 KiB keeps the error response small.
pub const ERROR_OUTPUT_BYTES_MAX: usize = 4 * 1024;

/// How long a kill of a workspace's user may take to confirm that nothing of it runs any more.
/// SIGKILL ends a process at once unless it is in uninterruptible I/O; past 5 s the kill is
/// reported unconfirmed (the run keeps its gates held, the uid stays out of use).
pub const KILL_CONFIRM_MS: u64 = 5_000;

/// Entries looked at when sweeping the shared temp directories for a released uid's files:
/// far above what a host's /tmp holds, so a workspace that floods it keeps its uid out of use
/// instead of stalling its release.
pub const SWEEP_ENTRIES_MAX: usize = 200_000;

/// Kept packs (`packs.rs`) unused for this long are removed: a pipeline's dependents check out
/// their commit within minutes of the jobs they need; an hour covers a long job between them.
pub const PACK_STORE_AGE_MS: u64 = 60 * 60 * 1000;

/// Kept packs at most: a handful of commits in flight per repository, for a few dozen
/// repositories, on one agent.
pub const PACK_STORE_ENTRIES_MAX: usize = 64;

/// Bytes of kept packs at most (least recently used go first): a shallow pack is the size of
/// one checkout's history-less objects, so 2 GiB holds dozens of large repositories' commits
/// without filling a container's disk.
pub const PACK_STORE_BYTES_MAX: u64 = 2 * 1024 * 1024 * 1024;

/// Bytes of one archive (a job's artifacts, gzipped) at most: build outputs of a few hundred
/// MB are common; 1 GiB keeps one upload within what a small container's disk and one R2 put
/// handle in a step's time.
pub const ARCHIVE_BYTES_MAX: u64 = 1024 * 1024 * 1024;

/// Entries looked through when matching an archive's patterns: a checkout with
/// `node_modules` has some 100,000; ten times that means something is wrong.
pub const ARCHIVE_ENTRIES_MAX: usize = 1_000_000;

/// Bound on one `tar` run: 1 GiB compresses in well under a minute; 10 minutes allows for a
/// loaded machine, and a command step's retry takes over past it.
pub const ARCHIVE_TIMEOUT_MS: u64 = 10 * 60 * 1000;
