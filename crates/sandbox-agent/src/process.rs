//! Detached processes keyed by a caller-chosen id (ADR-0001 rule 2, "runDetached then
//! waitForExit"): a durable step that died mid-attempt re-posts the same id and observes the
//! process it already started instead of starting a second one.
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md)

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sluice_sandbox_protocol::{ProcessState, ProcessStatus};

use crate::error::ApiError;
use crate::exec::{Finished, Output, Running};
use crate::limits::{FINISHED_OUTPUT_BYTES_MAX, FINISHED_PROCESSES_MAX, PROCESSES_MAX};
use crate::lock;
use crate::users::RunAs;

pub struct Process {
    id: String,
    /// The workspace it runs in: a discarded sandbox kills what runs there.
    workspace: String,
    started_ms: u64,
    started: Instant,
    /// The process group the command leads and the user it runs as: what `kill` reaches.
    pgid: u32,
    run_as: RunAs,
    /// Set by `kill`, so the exit reads as killed rather than signalled.
    killed: AtomicBool,
    output: Arc<Mutex<Output>>,
    finished: Mutex<Option<Finished>>,
    done: Condvar,
}

impl Process {
    /// Blocks until the process has finished or `timeout` has passed, whichever is first.
    pub fn wait(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut finished = lock(&self.finished);
        // Bounded by `deadline`; the loop only absorbs spurious wakeups.
        while finished.is_none() {
            let now = Instant::now();
            if now >= deadline {
                return;
            }
            finished = match self.done.wait_timeout(finished, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// SIGKILLs the process group and, for a workspace user, every process of that user (so
    /// what left the group dies too), unless the command already finished (its group id, its
    /// user, may belong to someone else by then); then waits up to `timeout` for the watcher
    /// to see the exit.
    pub fn kill(&self, timeout: Duration) {
        {
            let finished = lock(&self.finished);
            if finished.is_some() {
                return;
            }
            self.killed.store(true, Ordering::SeqCst);
            if let Err(e) = self.run_as.kill(self.pgid) {
                eprintln!("warning: killing process {}: {e}", self.id);
            }
        }
        self.wait(timeout);
    }

    /// The state with only the output from byte `since` on.
    pub fn state_since(&self, since: u64) -> ProcessState {
        // The state first: once it says finished, the output is complete
        // (the exit is published after the output is drained), so the
        // chunk read after it holds every byte.
        let mut state = self.state();
        let chunk = lock(&self.output).since(since);
        state.output = chunk.text;
        state.output_from = Some(chunk.from);
        state.output_next = Some(chunk.next);
        state
    }

    /// The process state as returned by the API.
    pub fn state(&self) -> ProcessState {
        let finished = lock(&self.finished);
        let output = lock(&self.output).capture();
        let (status, exit_code, signal, duration_ms) = match finished.as_ref() {
            None => (
                ProcessStatus::Running,
                None,
                None,
                self.started.elapsed().as_millis() as u64,
            ),
            Some(f) => (
                if f.timed_out {
                    ProcessStatus::TimedOut
                } else if self.killed.load(Ordering::SeqCst) {
                    ProcessStatus::Killed
                } else {
                    ProcessStatus::Exited
                },
                f.exit_code,
                f.signal,
                f.duration_ms,
            ),
        };
        ProcessState {
            id: self.id.clone(),
            status,
            exit_code,
            signal,
            output: output.text,
            output_bytes: output.bytes,
            output_truncated: output.truncated,
            started_ms: Some(self.started_ms),
            duration_ms: i64::try_from(duration_ms).ok(),
            agent: Some(agent_id().to_owned()),
            output_from: None,
            output_next: None,
        }
    }
}

#[derive(Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    processes: HashMap<String, Arc<Process>>,
    /// Finished ids, oldest first, with the output bytes each record retains.
    finished: VecDeque<(String, usize)>,
    finished_output_bytes: usize,
}

impl Registry {
    pub fn get(&self, id: &str) -> Option<Arc<Process>> {
        lock(&self.inner).processes.get(id).cloned()
    }

    /// Returns the process registered under `id` (`false`: nothing was started), or starts one
    /// with `spawn` (`true`). Holding the registry lock across `spawn` makes two concurrent
    /// posts of the same id start at most one process.
    pub fn start(
        self: &Arc<Self>,
        id: &str,
        workspace: &str,
        timeout: Duration,
        spawn: impl FnOnce() -> Result<Running, ApiError>,
    ) -> Result<(Arc<Process>, bool), ApiError> {
        let mut inner = lock(&self.inner);
        if let Some(existing) = inner.processes.get(id) {
            return Ok((existing.clone(), false));
        }
        if inner.processes.len().saturating_sub(inner.finished.len()) >= PROCESSES_MAX {
            return Err(ApiError::new(
                429,
                "too_many_processes",
                format!("{PROCESSES_MAX} detached processes are already running"),
            ));
        }
        // Read before the spawn: nothing the process changes predates it (a snapshot's
        // `since`).
        let started_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let running = spawn()?;
        let process = Arc::new(Process {
            id: id.to_owned(),
            workspace: workspace.to_owned(),
            started_ms,
            started: Instant::now(),
            pgid: running.pgid(),
            run_as: running.run_as(),
            killed: AtomicBool::new(false),
            output: running.output(),
            finished: Mutex::new(None),
            done: Condvar::new(),
        });
        let (registry, watched) = (self.clone(), process.clone());
        // If the thread cannot start, the closure is dropped and `Running`'s Drop kills the
        // process group: nothing runs that nobody observes.
        thread::Builder::new()
            .name("process".into())
            .spawn(move || {
                let finished = running.wait(timeout);
                *lock(&watched.finished) = Some(finished);
                watched.done.notify_all();
                let retained_bytes = lock(&watched.output).retained_bytes();
                registry.retire(&watched.id, retained_bytes);
            })
            .map_err(|e| {
                ApiError::new(500, "spawn_failed", format!("cannot start a watcher: {e}"))
            })?;
        inner.processes.insert(id.to_owned(), process.clone());
        Ok((process, true))
    }

    /// The processes of a workspace that have not finished.
    pub fn running_in(&self, workspace: &str) -> Vec<Arc<Process>> {
        lock(&self.inner)
            .processes
            .values()
            .filter(|p| p.workspace == workspace && lock(&p.finished).is_none())
            .cloned()
            .collect()
    }

    /// Moves a finished process to the bounded history, evicting the oldest records past
    /// `FINISHED_PROCESSES_MAX` or `FINISHED_OUTPUT_BYTES_MAX`.
    fn retire(&self, id: &str, retained_bytes: usize) {
        let mut inner = lock(&self.inner);
        inner.finished.push_back((id.to_owned(), retained_bytes));
        inner.finished_output_bytes += retained_bytes;
        // Bounded by the history length.
        while inner.finished.len() > FINISHED_PROCESSES_MAX
            || inner.finished_output_bytes > FINISHED_OUTPUT_BYTES_MAX
        {
            let Some((old_id, old_bytes)) = inner.finished.pop_front() else {
                break;
            };
            inner.finished_output_bytes -= old_bytes;
            inner.processes.remove(&old_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::{path_env, shell_command, spawn};
    use crate::host_tools::HostTools;
    use std::collections::BTreeMap;

    fn start(registry: &Arc<Registry>, id: &str, command: &str) -> (Arc<Process>, bool) {
        let dir = std::env::temp_dir();
        let cmd = shell_command(
            &dir,
            command,
            &BTreeMap::new(),
            &HostTools::as_is(path_env()),
        );
        let spawn = || {
            spawn(cmd, RunAs::Agent, Default::default())
                .map_err(|e| ApiError::new(500, "spawn_failed", e.to_string()))
        };
        match registry.start(id, "w", Duration::from_secs(10), spawn) {
            Ok(started) => started,
            Err(e) => panic!("start {id}: {}", e.message),
        }
    }

    #[test]
    fn history_is_bounded_and_oldest_evicted() {
        let registry = Arc::new(Registry::default());
        for i in 0..FINISHED_PROCESSES_MAX + 3 {
            let (process, created) = start(&registry, &format!("p{i}"), "true");
            assert!(created);
            process.wait(Duration::from_secs(10));
        }
        // Retirement happens just after the exit is published; give the watchers a moment.
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock(&registry.inner).processes.len() > FINISHED_PROCESSES_MAX
            && Instant::now() < deadline
        {
            thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            lock(&registry.inner).processes.len(),
            FINISHED_PROCESSES_MAX
        );
        assert!(registry.get("p0").is_none(), "oldest record evicted");
        let newest = format!("p{}", FINISHED_PROCESSES_MAX + 2);
        assert!(registry.get(&newest).is_some());
    }

    #[test]
    fn live_processes_are_capped() {
        let registry = Arc::new(Registry::default());
        for i in 0..PROCESSES_MAX {
            start(&registry, &format!("s{i}"), "sleep 5");
        }
        let dir = std::env::temp_dir();
        let cmd = shell_command(
            &dir,
            "true",
            &BTreeMap::new(),
            &HostTools::as_is(path_env()),
        );
        let over = registry.start("one-too-many", "w", Duration::from_secs(1), || {
            spawn(cmd, RunAs::Agent, Default::default())
                .map_err(|e| ApiError::new(500, "spawn_failed", e.to_string()))
        });
        match over {
            Err(e) => assert_eq!((e.status, e.code), (429, "too_many_processes")),
            Ok(_) => panic!("started a process past PROCESSES_MAX"),
        }
        // An existing id is still answered while at the cap.
        assert!(!start(&registry, "s0", "true").1);
    }
}

/// The id this agent took when it started: times it reports (a process's start, a snapshot's)
/// are by its clock, and a snapshot's `since` is honoured only in the agent that gave it (a
/// new container, or a restarted agent, has other files and maybe another clock).
pub fn agent_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        // The kernel's random UUID; failing that (no procfs), the pid and the start time.
        std::fs::read_to_string("/proc/sys/kernel/random/uuid")
            .map(|s| s.trim().to_owned())
            .unwrap_or_else(|_| {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos());
                format!("{}-{now}", std::process::id())
            })
    })
}
