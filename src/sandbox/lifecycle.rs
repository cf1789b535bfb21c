//! The lifecycle of one sandbox's container, as a sans-IO state machine.
//! The `SandboxContainer` Durable Object (`src/worker_glue/container.rs`)
//! feeds it events (a request arrives, the agent answered, the alarm
//! fires, a readiness wait or a forward failed) with `now_ms` and whether
//! the container runs, and carries out what it returns: start the container
//! with its options, wait for the agent to answer, forward the request
//! within a bound, arm the idle alarm, destroy the container.
//!
//! What it guarantees:
//! - the agent token reaches the container in its start options;
//! - no request waits unboundedly: readiness is bounded per probe and in
//!   all (`ReadyWait`), every forward has a bound (`forward_timeout_ms`);
//! - a container nobody used for `sleep_after` is destroyed by the alarm,
//!   but never while a request is in flight or a command it started may
//!   still run (until that command's own timeout);
//! - a discard (`DELETE /v1/sandboxes/{id}`, the run ended) reaches the
//!   agent, which kills and deletes the workspace, and then destroys the
//!   container; a discard of a sandbox with no container starts none.
//!
//! Architecture invariant: no I/O, no clock, no `worker`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sluice_sandbox_protocol::{self as protocol, ProcessState, WAIT_MS_MAX};

use crate::limits::{PROCESS_POLL_MS, RUN_DURATION_MS_DEFAULT};
use crate::secret::Secret;

/// ADR-0001: the peer's containers slept after 10 idle minutes
/// (`sleepAfter = "10m"`); the same window here, `CONTAINER_SLEEP_AFTER`.
/// (ADR-0001: docs/adr/0001-durable-execution-scope.md)
pub const SLEEP_AFTER_MS_DEFAULT: i64 = 10 * 60_000;
/// Shorter would reap a container between the long-polls of one command
/// step; a minute is three polls.
pub const SLEEP_AFTER_MS_MIN: i64 = 60_000;
/// A container idle longer than a run's default ceiling has no run left to
/// serve; a larger value is more likely a typo ("10h" for "10m").
pub const SLEEP_AFTER_MS_MAX: i64 = RUN_DURATION_MS_DEFAULT;
const _: () = assert!(SLEEP_AFTER_MS_MIN >= 3 * PROCESS_POLL_MS);
const _: () = assert!(SLEEP_AFTER_MS_MIN <= SLEEP_AFTER_MS_DEFAULT);
const _: () = assert!(SLEEP_AFTER_MS_DEFAULT <= SLEEP_AFTER_MS_MAX);

/// One readiness probe (`GET /healthz`): the agent answers it in
/// milliseconds once it listens; a probe on a connection that will never
/// answer is abandoned after this.
pub const READY_PROBE_TIMEOUT_MS: i64 = 2_000;
/// Pause between probes: the agent listens ~0.3-0.6 s after start here,
/// and a probe of a port nobody listens on fails at once, so a short pause
/// finds the agent soon after it listens for little work.
pub const READY_RETRY_MS: i64 = 100;
/// Readiness in all: a cold start is under a second locally and a few
/// seconds in production (image pull on a fresh host); past this the
/// container is presumed wedged, destroyed, and the request answered 503
/// (the step's retry starts a fresh one).
pub const READY_TOTAL_MS: i64 = 45_000;
/// Probes in one wait: the deadline bounds it already; the count keeps the
/// loop finite even under a clock that stands still.
pub const READY_PROBES_MAX: u32 = (READY_TOTAL_MS / READY_RETRY_MS) as u32;

/// Added to what the agent itself may take for an answer (a long-poll's
/// wait, a kill's reap): the hop through the container's network.
pub const FORWARD_MARGIN_MS: i64 = 10_000;
/// Quick calls (workspace state, starting a detached process): the agent
/// answers in milliseconds; a minute covers a loaded host.
pub const FORWARD_QUICK_MS: i64 = 60_000;
/// A checkout: the agent bounds each git command by 10 minutes; past that
/// plus the margin the step fails and its retry checks out again.
pub const FORWARD_CHECKOUT_MS: i64 = 10 * 60_000 + FORWARD_MARGIN_MS;
/// A discard kills each running process with a 5 s reap (at most 16 run at
/// once in the agent), then deletes the workspace.
pub const FORWARD_DISCARD_MS: i64 = 16 * 5_000 + FORWARD_MARGIN_MS;
/// The agent reaps a killed process group for at most 5 s.
const KILL_REAP_MS: i64 = 5_000;

/// A process the agent started is certainly ended this long after its own
/// timeout: the agent kills its group at the timeout and reaps for 5 s; the
/// rest is slack for a slow host.
pub const PROCESS_DEADLINE_MARGIN_MS: i64 = 60_000;
/// Processes tracked per sandbox: the agent runs at most 16 at once, so a
/// table four times that never forgets a live one; the earliest deadline
/// is dropped first.
pub const PROCESSES_TRACKED_MAX: usize = 64;

/// The environment variable the agent reads its token from
/// (`crates/sandbox-agent`, `TOKEN_ENV`).
pub const AGENT_TOKEN_ENV: &str = "SANDBOX_AGENT_TOKEN";
pub use sluice_sandbox_protocol::GIT_URL_PREFIXES_ENV;

/// How a sandbox's containers are run.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub sleep_after_ms: i64,
    /// The bearer token the agent must require.
    pub agent_token: Option<Secret>,
    /// Where checkouts may clone from (`GITHUB_GIT_URL`), handed to the
    /// agent as its only allowed prefix.
    pub git_url: Option<String>,
}

impl Settings {
    /// From `CONTAINER_SLEEP_AFTER` as parsed (None: unset). A bad or
    /// out-of-range value falls back to the default or the nearest bound,
    /// and the second value says so for the log.
    pub fn new(
        sleep_after: Option<Result<i64, String>>,
        agent_token: Option<Secret>,
    ) -> (Settings, Option<String>) {
        let (sleep_after_ms, warning) = match sleep_after {
            None => (SLEEP_AFTER_MS_DEFAULT, None),
            Some(Err(e)) => (
                SLEEP_AFTER_MS_DEFAULT,
                Some(format!("CONTAINER_SLEEP_AFTER: {e}; using 10m")),
            ),
            Some(Ok(ms)) => {
                let clamped = ms.clamp(SLEEP_AFTER_MS_MIN, SLEEP_AFTER_MS_MAX);
                let warning = (clamped != ms).then(|| {
                    format!(
                        "CONTAINER_SLEEP_AFTER: {ms} ms is outside {SLEEP_AFTER_MS_MIN}..={SLEEP_AFTER_MS_MAX} ms; using {clamped} ms"
                    )
                });
                (clamped, warning)
            }
        };
        let settings = Settings {
            sleep_after_ms,
            agent_token,
            git_url: None,
        };
        (settings, warning)
    }
}

/// What a container is started with.
#[derive(Debug, Clone, PartialEq)]
pub struct StartOptions {
    /// Environment variables of the agent (the token among them).
    pub env: Vec<(String, Secret)>,
    /// Checkouts clone from GitHub.
    pub enable_internet: bool,
}

/// A request to the agent, as far as the lifecycle cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `DELETE /v1/sandboxes/{id}`: the run that owned the sandbox ended.
    Discard { id: String },
    /// `POST /v1/workspaces`: a checkout.
    Checkout,
    /// `POST /v1/processes`: starts (or finds) a detached process.
    StartProcess { id: String, timeout_ms: i64 },
    /// `GET /v1/processes/{id}?wait_ms=`: a process's state, long-polled.
    Process { id: String, wait_ms: i64 },
    /// `POST /v1/processes/{id}/kill?wait_ms=`.
    Kill { id: String, wait_ms: i64 },
    /// `POST /v1/exec`: a blocking command (the bench's, not the runs').
    Exec { timeout_ms: i64 },
    /// Anything else (workspace state, health): answered at once.
    Quick,
}

/// The fields of `POST /v1/processes` and `POST /v1/exec` bodies the
/// lifecycle reads; the agent validates the rest.
#[derive(Deserialize)]
struct CommandBody {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    timeout_ms: u64,
}

impl Call {
    /// Classifies a request by its method, path (with query) and body.
    pub fn of(method: &str, path_and_query: &str, body: Option<&str>) -> Call {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let command = || body.and_then(|b| serde_json::from_str::<CommandBody>(b).ok());
        let timeout_of = |c: &CommandBody| i64::try_from(c.timeout_ms).unwrap_or(i64::MAX);
        match (method, segments.as_slice()) {
            ("DELETE", ["v1", "sandboxes", id]) => Call::Discard {
                id: (*id).to_owned(),
            },
            ("POST", ["v1", "workspaces"]) => Call::Checkout,
            ("POST", ["v1", "processes"]) => match command() {
                Some(c) => Call::StartProcess {
                    timeout_ms: timeout_of(&c),
                    id: c.id.unwrap_or_default(),
                },
                None => Call::Quick,
            },
            ("GET", ["v1", "processes", id]) => Call::Process {
                id: (*id).to_owned(),
                wait_ms: wait_of(query),
            },
            ("POST", ["v1", "processes", id, "kill"]) => Call::Kill {
                id: (*id).to_owned(),
                wait_ms: wait_of(query),
            },
            ("POST", ["v1", "exec"]) => Call::Exec {
                timeout_ms: command().map(|c| timeout_of(&c)).unwrap_or(0),
            },
            _ => Call::Quick,
        }
    }

    /// How long the agent may take to answer this, plus the hop.
    pub fn forward_timeout_ms(&self) -> i64 {
        let capped = |ms: i64| ms.clamp(0, protocol::TIMEOUT_MS_MAX as i64);
        match self {
            Call::Discard { .. } => FORWARD_DISCARD_MS,
            Call::Checkout => FORWARD_CHECKOUT_MS,
            Call::Process { wait_ms, .. } => wait_ms + FORWARD_MARGIN_MS,
            Call::Kill { wait_ms, .. } => wait_ms + KILL_REAP_MS + FORWARD_MARGIN_MS,
            Call::Exec { timeout_ms } => capped(*timeout_ms) + KILL_REAP_MS + FORWARD_MARGIN_MS,
            Call::StartProcess { .. } | Call::Quick => FORWARD_QUICK_MS,
        }
    }
}

/// `wait_ms=N` of a query, as the agent caps it.
fn wait_of(query: &str) -> i64 {
    let n = query
        .split('&')
        .find_map(|kv| kv.strip_prefix("wait_ms="))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        .min(WAIT_MS_MAX);
    n as i64
}

/// Why a container is destroyed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Nobody used it for `sleep_after` (the alarm).
    Idle,
    /// Its run ended (a discard).
    Discarded,
    /// Its agent did not answer within the readiness bounds.
    NotReady,
}

/// Something to carry out, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    ArmAlarm {
        at_ms: i64,
    },
    DeleteAlarm,
    Destroy(Why),
    /// Write the persisted part of the state (`Lifecycle::record`).
    Persist,
}

/// How to answer a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    /// Answer a discard at once: no container runs, so nothing is left.
    AnswerDiscarded,
    /// Reach the agent: start the container first when `start` says so,
    /// wait until it answers when `await_ready`, then forward the request
    /// within `timeout_ms`.
    Agent {
        start: Option<StartOptions>,
        await_ready: bool,
        timeout_ms: i64,
    },
}

/// What survives the object's eviction (its storage).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The end of the last request (ms since epoch), if any.
    pub last_activity_ms: Option<i64>,
    /// Processes started here and not seen to end: id -> when they are
    /// certainly ended.
    pub processes: BTreeMap<String, i64>,
    /// The idle alarm, when armed.
    pub alarm_ms: Option<i64>,
}

/// One sandbox's lifecycle: the record, plus what only lives as long as
/// the object (requests in flight, whether the agent answered since the
/// container started).
#[derive(Debug, Clone, PartialEq)]
pub struct Lifecycle {
    pub settings: Settings,
    record: Record,
    in_flight: u32,
    ready: bool,
}

impl Lifecycle {
    pub fn new(settings: Settings, record: Record) -> Lifecycle {
        Lifecycle {
            settings,
            record,
            in_flight: 0,
            ready: false,
        }
    }

    /// What the object stores (`Effect::Persist`).
    pub fn record(&self) -> &Record {
        &self.record
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// A request arrives. `running`: whether the container runs now.
    pub fn on_request(&mut self, call: &Call, running: bool, now_ms: i64) -> (Route, Vec<Effect>) {
        let mut effects = Vec::new();
        if !running {
            // Whatever ran died with the container (or never started).
            self.record.processes.clear();
            self.ready = false;
            if matches!(call, Call::Discard { .. }) {
                self.record.last_activity_ms = Some(now_ms);
                effects.push(Effect::Persist);
                return (Route::AnswerDiscarded, effects);
            }
        }
        self.in_flight = self.in_flight.saturating_add(1);
        self.record.last_activity_ms = Some(now_ms);
        if self.record.alarm_ms.is_none() {
            let at_ms = now_ms + self.settings.sleep_after_ms;
            self.record.alarm_ms = Some(at_ms);
            effects.push(Effect::ArmAlarm { at_ms });
        }
        effects.push(Effect::Persist);
        let start = (!running).then(|| self.start_options());
        let route = Route::Agent {
            start,
            await_ready: !self.ready,
            timeout_ms: call.forward_timeout_ms(),
        };
        (route, effects)
    }

    fn start_options(&self) -> StartOptions {
        let mut env: Vec<(String, Secret)> = self
            .settings
            .agent_token
            .iter()
            .map(|t| (AGENT_TOKEN_ENV.to_owned(), t.clone()))
            .collect();
        if let Some(url) = &self.settings.git_url {
            let prefix = format!("{}/", url.trim_end_matches('/'));
            env.push((GIT_URL_PREFIXES_ENV.to_owned(), Secret::new(prefix)));
        }
        StartOptions {
            env,
            enable_internet: true,
        }
    }

    /// The agent answered the readiness probe.
    pub fn on_ready(&mut self) {
        self.ready = true;
    }

    /// The container could not be started, or its agent did not answer
    /// within the readiness bounds: destroy what runs, so the next attempt
    /// starts afresh.
    pub fn on_not_ready(&mut self, running: bool, now_ms: i64) -> Vec<Effect> {
        self.end_request(now_ms);
        self.ready = false;
        self.record.processes.clear();
        let mut effects = Vec::new();
        if running {
            effects.push(Effect::Destroy(Why::NotReady));
        }
        effects.push(Effect::Persist);
        effects
    }

    /// A forward failed: the connection was lost, the bound passed, or the
    /// container exited. The next request probes readiness again. A discard
    /// destroys the container all the same: its run ended either way.
    pub fn on_forward_failed(&mut self, call: &Call, running: bool, now_ms: i64) -> Vec<Effect> {
        self.end_request(now_ms);
        self.ready = false;
        if matches!(call, Call::Discard { .. }) {
            return self.discarded(running);
        }
        if !running {
            self.record.processes.clear();
        }
        vec![Effect::Persist]
    }

    /// The run ended: nothing of it stays, and no alarm is left for it.
    fn discarded(&mut self, running: bool) -> Vec<Effect> {
        self.record.processes.clear();
        self.ready = false;
        self.record.alarm_ms = None;
        let mut effects = Vec::new();
        if running {
            effects.push(Effect::Destroy(Why::Discarded));
        }
        effects.extend([Effect::DeleteAlarm, Effect::Persist]);
        effects
    }

    /// The agent answered `status` with `body`. A discard destroys the
    /// container whatever the agent said (a failed delete leaves nothing
    /// once the container is gone).
    pub fn on_answer(&mut self, call: &Call, status: u16, body: &str, now_ms: i64) -> Vec<Effect> {
        self.end_request(now_ms);
        self.ready = true;
        match call {
            Call::Discard { .. } => return self.discarded(true),
            Call::StartProcess { id, timeout_ms }
                if (status == 200 || status == 201) && process_running(body) =>
            {
                let deadline = now_ms
                    .saturating_add(*timeout_ms)
                    .saturating_add(PROCESS_DEADLINE_MARGIN_MS);
                self.track(id, deadline);
            }
            Call::Process { id, .. } | Call::Kill { id, .. } => {
                let ended = match status {
                    200 => !process_running(body),
                    404 => process_unknown(body),
                    _ => false,
                };
                if ended {
                    self.record.processes.remove(id);
                }
            }
            _ => {}
        }
        vec![Effect::Persist]
    }

    fn end_request(&mut self, now_ms: i64) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.record.last_activity_ms = Some(now_ms);
    }

    fn track(&mut self, id: &str, deadline_ms: i64) {
        self.record.processes.insert(id.to_owned(), deadline_ms);
        while self.record.processes.len() > PROCESSES_TRACKED_MAX {
            let earliest = self
                .record
                .processes
                .iter()
                .min_by_key(|(_, d)| **d)
                .map(|(k, _)| k.clone());
            match earliest {
                Some(k) => self.record.processes.remove(&k),
                None => break,
            };
        }
    }

    /// The alarm fired. The container is destroyed when nobody used it for
    /// `sleep_after`, no request is in flight, and no command it started
    /// may still run; otherwise the alarm is armed for when that can be.
    pub fn on_alarm(&mut self, running: bool, now_ms: i64) -> Vec<Effect> {
        self.record.alarm_ms = None;
        if !running {
            self.record.processes.clear();
            self.ready = false;
            return vec![Effect::Persist];
        }
        self.record
            .processes
            .retain(|_, deadline| *deadline > now_ms);
        let at_ms = if self.in_flight > 0 {
            now_ms + self.settings.sleep_after_ms
        } else {
            self.idle_at_ms(now_ms)
        };
        if at_ms <= now_ms {
            self.ready = false;
            self.record.processes.clear();
            return vec![Effect::Destroy(Why::Idle), Effect::Persist];
        }
        self.record.alarm_ms = Some(at_ms);
        vec![Effect::ArmAlarm { at_ms }, Effect::Persist]
    }

    /// When the container becomes idle: `sleep_after` past the last
    /// request, and not before every tracked process's deadline.
    fn idle_at_ms(&self, now_ms: i64) -> i64 {
        let after_activity = self
            .record
            .last_activity_ms
            .map_or(now_ms, |t| t + self.settings.sleep_after_ms);
        let processes = self.record.processes.values().copied().max();
        processes.map_or(after_activity, |d| d.max(after_activity))
    }
}

/// Whether a process answer says it still runs. An answer that is not a
/// process state counts as running: forgetting a live process could reap
/// its container, remembering a dead one only delays that to its deadline.
fn process_running(body: &str) -> bool {
    serde_json::from_str::<ProcessState>(body).map_or(true, |s| !s.finished())
}

/// Whether a 404 is the agent's own "no such process" (any other 404, say
/// an agent without the endpoint, says nothing about the process).
fn process_unknown(body: &str) -> bool {
    serde_json::from_str::<protocol::ErrorBody>(body)
        .is_ok_and(|e| e.error.code == protocol::PROCESS_NOT_FOUND)
}

/// Waiting for a fresh container's agent to answer: a probe at a time,
/// each bounded, all within `READY_TOTAL_MS` and `READY_PROBES_MAX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadyWait {
    deadline_ms: i64,
    probes: u32,
}

/// The next probe: after `delay_ms`, abandoned after `timeout_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub delay_ms: i64,
    pub timeout_ms: i64,
}

impl ReadyWait {
    pub fn new(now_ms: i64) -> ReadyWait {
        ReadyWait {
            deadline_ms: now_ms + READY_TOTAL_MS,
            probes: 0,
        }
    }

    /// The next probe (the first at once), or None when the bounds are
    /// spent.
    pub fn next(&mut self, now_ms: i64) -> Option<Probe> {
        let delay_ms = if self.probes == 0 { 0 } else { READY_RETRY_MS };
        let starts_ms = now_ms + delay_ms;
        if self.probes >= READY_PROBES_MAX || starts_ms >= self.deadline_ms {
            return None;
        }
        self.probes += 1;
        Some(Probe {
            delay_ms,
            timeout_ms: READY_PROBE_TIMEOUT_MS.min(self.deadline_ms - starts_ms),
        })
    }
}
