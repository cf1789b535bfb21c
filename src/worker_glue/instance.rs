//! `RunInstance`: the Durable Object that IS one run instance. Its own
//! SQLite storage holds the journal; its alarm is the instance's timer; it
//! is the instance's single executor (a pass never runs twice at once:
//! a trigger during a pass asks for one more pass instead).

use std::cell::Cell;
use std::rc::Rc;

use serde::Deserialize;
use serde_json::{json, Value};
use worker::{durable_object, DurableObject, Env, Request, Response, Result, ScheduledTime, State};

use crate::engine::{
    Command, CommandError, CreateRequest, Engine, Interrupt, InterruptFlag, PassResult, RunError,
    RunRegistry, Status,
};
use crate::store::journal::SqlJournal;
use crate::store::StoreError;

use super::bindings;
use super::handlers::run_env_parts;
use super::platform::{DoSql, WorkerClock, D1};

/// Passes one wake-up may chain when triggers keep arriving during a pass;
/// beyond it the next trigger's alarm takes over, so one invocation cannot
/// run forever.
const PASSES_PER_WAKE_MAX: u32 = 50;
/// When storage or the index fails mid-pass, try again this much later.
const STORE_RETRY_DELAY_MS: i64 = 5_000;

#[durable_object]
pub struct RunInstance {
    inner: Rc<Inner>,
}

pub struct Inner {
    state: State,
    env: Env,
    journal: std::result::Result<SqlJournal<DoSql>, StoreError>,
    running: Cell<bool>,
    rerun: Cell<bool>,
    interrupt: InterruptFlag,
}

fn json_response(status: u16, body: &Value) -> Result<Response> {
    Ok(Response::from_json(body)?.with_status(status))
}

#[derive(Deserialize)]
struct EventBody {
    #[serde(rename = "type")]
    event_type: String,
    payload: Value,
}

impl DurableObject for RunInstance {
    fn new(state: State, env: Env) -> Self {
        let journal = SqlJournal::open(DoSql(state.storage().sql()));
        RunInstance {
            inner: Rc::new(Inner {
                state,
                env,
                journal,
                running: Cell::new(false),
                rerun: Cell::new(false),
                interrupt: Rc::new(Cell::new(None)),
            }),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let path = req.path();
        let inner = &self.inner;
        let journal = match &inner.journal {
            Ok(j) => j,
            Err(e) => return json_response(500, &json!({ "error": e.to_string() })),
        };
        let index = D1(inner.env.d1(bindings::DB)?);
        let clock = WorkerClock;
        let engine = Engine {
            journal,
            blobs: None,
            index: &index,
            clock: &clock,
        };
        match path.as_str() {
            // The sweep's poke also creates: an instance whose create died
            // before reaching its object is rebuilt from D1's copy.
            "/create" | "/poke" => {
                let create: CreateRequest = match req.json().await {
                    Ok(c) => c,
                    Err(e) => return json_response(400, &json!({ "error": e.to_string() })),
                };
                match engine.create(&create).await {
                    Ok(created) => {
                        // A poke (the sweep) also reaches finished instances,
                        // whose pass retries a D1 mirror that failed; it must
                        // not queue another pass behind a running one.
                        if created.status.is_runnable() || path == "/poke" {
                            self.kick(path == "/create");
                        }
                        json_response(200, &json!(created))
                    }
                    Err(e) => json_response(500, &json!({ "error": e.to_string() })),
                }
            }
            "/event" => {
                let body: EventBody = match req.json().await {
                    Ok(b) => b,
                    Err(e) => return json_response(400, &json!({ "error": e.to_string() })),
                };
                match engine.send_event(&body.event_type, &body.payload) {
                    Ok(wake) => {
                        if wake {
                            self.kick(true);
                        }
                        json_response(202, &json!({ "accepted": true }))
                    }
                    Err(e) => command_error(e),
                }
            }
            "/command" => {
                let cmd: Command = match req.json().await {
                    Ok(c) => c,
                    Err(e) => return json_response(400, &json!({ "error": e.to_string() })),
                };
                if inner.running.replace(true) {
                    return self.interrupt_running(&cmd);
                }
                // The command holds the executor: no pass may start while it
                // awaits D1 between reading and writing the record (or while
                // a restart's run kills and releases what it holds).
                let parts = run_env_parts(&inner.env);
                let registry = parts.registry(&clock, &index);
                let result = engine.command(&registry, &cmd).await;
                inner.running.set(false);
                match result {
                    Ok(status) => {
                        if status.is_runnable()
                            || inner.rerun.replace(false)
                            || inner.interrupt.get().is_some()
                        {
                            self.kick(true);
                        } else {
                            inner.state.storage().delete_alarm().await?;
                        }
                        if status.is_terminal() {
                            finalize(journal, &registry).await;
                        }
                        json_response(200, &json!({ "status": status }))
                    }
                    Err(e) => command_error(e),
                }
            }
            "/purge" => {
                if let Err(e) = journal_clear(journal) {
                    return json_response(500, &json!({ "error": e.to_string() }));
                }
                inner.state.storage().delete_alarm().await?;
                json_response(200, &json!({ "purged": true }))
            }
            _ => json_response(404, &json!({ "error": "unknown instance operation" })),
        }
    }

    async fn alarm(&self) -> Result<Response> {
        if self.inner.running.get() {
            // The watchdog of a pass still running (a long step): re-arm it.
            arm_watchdog(&self.inner).await?;
            return Response::ok("running");
        }
        drive(self.inner.clone(), true).await;
        Response::ok("done")
    }
}

/// Lets the run release what it holds after the instance ended. A failure
/// leaves it to the sweep, which finalizes finished instances that still
/// hold gate rows until they release them.
async fn finalize(journal: &SqlJournal<DoSql>, registry: &dyn RunRegistry) {
    use crate::engine::journal::JournalStore;
    if let Ok(Some(rec)) = journal.load_instance() {
        let input: Value = serde_json::from_str(&rec.input).unwrap_or(Value::Null);
        if let Err(e) = registry
            .finalize(&rec.run, &rec.id, &input, rec.status)
            .await
        {
            worker::console_warn!("finalize of {} left for the sweep: {e}", rec.id);
        }
    }
}

fn journal_clear(journal: &SqlJournal<DoSql>) -> std::result::Result<(), StoreError> {
    use crate::engine::journal::JournalStore;
    journal.clear()
}

fn command_error(e: CommandError) -> Result<Response> {
    match e {
        CommandError::NotFound => json_response(404, &json!({ "error": "no such instance" })),
        CommandError::Conflict(m) => json_response(409, &json!({ "error": m })),
        CommandError::TooLarge(m) => json_response(413, &json!({ "error": m })),
        CommandError::Store(m) => json_response(500, &json!({ "error": m })),
    }
}

impl RunInstance {
    /// Starts a pass now without holding the caller's request open. When a
    /// pass is already running, `rerun_if_busy` asks it for one more pass
    /// (an event may have arrived after its wait was evaluated).
    fn kick(&self, rerun_if_busy: bool) {
        let inner = self.inner.clone();
        self.inner.state.wait_until(drive(inner, rerun_if_busy));
    }

    /// A pass is running: operator commands that stop it are honoured at
    /// its next durable call; others must wait for it.
    fn interrupt_running(&self, cmd: &Command) -> Result<Response> {
        let flag = match cmd {
            Command::Terminate => Interrupt::Terminate,
            Command::Pause => Interrupt::Pause,
            _ => {
                return json_response(
                    409,
                    &json!({ "error": "a pass is running; pause or terminate it first" }),
                )
            }
        };
        self.inner.interrupt.set(Some(flag));
        let status = if flag == Interrupt::Terminate {
            Status::Terminated
        } else {
            Status::Paused
        };
        json_response(
            202,
            &json!({ "status": status, "pending": "at the next durable call of the running pass" }),
        )
    }
}

/// Runs passes until the instance waits, ends, or stops being triggered.
async fn drive(inner: Rc<Inner>, rerun_if_busy: bool) {
    if inner.running.replace(true) {
        if rerun_if_busy {
            inner.rerun.set(true);
        }
        return;
    }
    for _ in 0..PASSES_PER_WAKE_MAX {
        inner.rerun.set(false);
        // If this process dies mid-pass, the alarm resumes the instance
        // (alarms survive restarts); the pass's end replaces it.
        if let Err(e) = arm_watchdog(&inner).await {
            worker::console_error!("watchdog alarm could not be set: {e}");
        }
        let outcome = pass_once(&inner).await;
        if let Err(e) = schedule(&inner, &outcome).await {
            worker::console_error!("instance alarm could not be set: {e}");
        }
        if !inner.rerun.get() {
            break;
        }
    }
    // An operator's terminate or pause that no durable call saw (it came
    // after the body's last one) is applied now, never dropped.
    if let Some(interrupt) = inner.interrupt.take() {
        apply_interrupt(&inner, interrupt).await;
    }
    inner.running.set(false);
}

async fn apply_interrupt(inner: &Inner, interrupt: Interrupt) {
    let Ok(journal) = inner.journal.as_ref() else {
        return;
    };
    let Ok(db) = inner.env.d1(bindings::DB) else {
        return;
    };
    let index = D1(db);
    let clock = WorkerClock;
    let engine = Engine {
        journal,
        blobs: None,
        index: &index,
        clock: &clock,
    };
    let cmd = match interrupt {
        Interrupt::Terminate => Command::Terminate,
        Interrupt::Pause => Command::Pause,
    };
    let parts = run_env_parts(&inner.env);
    let registry = parts.registry(&clock, &index);
    // A conflict means the instance already ended on its own: nothing to do.
    if let Ok(status) = engine.command(&registry, &cmd).await {
        if let Err(e) = inner.state.storage().delete_alarm().await {
            worker::console_error!("alarm could not be deleted: {e}");
        }
        if status.is_terminal() {
            finalize(journal, &registry).await;
        }
    }
}

/// How soon a pass that died is resumed by its own alarm: long enough that
/// a live pass's watchdog rarely fires (it is re-armed when it does), short
/// enough that a crash costs seconds, not the sweep's minute.
const PASS_WATCHDOG_MS: i64 = 15_000;

async fn arm_watchdog(inner: &Inner) -> Result<()> {
    let at = worker::Date::now().as_millis() as i64 + PASS_WATCHDOG_MS;
    inner
        .state
        .storage()
        .set_alarm(ScheduledTime::new(js_sys::Date::new(
            &js_sys::Number::from(at as f64),
        )))
        .await
}

async fn pass_once(inner: &Inner) -> std::result::Result<PassResult, RunError> {
    let journal = inner.journal.as_ref().map_err(|e| RunError::Store {
        message: e.to_string(),
    })?;
    let index = D1(inner.env.d1(bindings::DB).map_err(|e| RunError::Store {
        message: e.to_string(),
    })?);
    let clock = WorkerClock;
    let parts = run_env_parts(&inner.env);
    let engine = Engine {
        journal,
        blobs: parts.blobs(),
        index: &index,
        clock: &clock,
    };
    let registry = parts.registry(&clock, &index);
    let result = engine.pass(&registry, &inner.interrupt).await;
    if let Ok(p) = &result {
        if p.status.is_terminal() {
            finalize(journal, &registry).await;
        }
    }
    match &result {
        Ok(p) => {
            if let Some(e) = &p.mirror_error {
                worker::console_warn!("D1 mirror failed, retried next pass: {e}");
            }
        }
        Err(e) => worker::console_error!("pass failed: {e}"),
    }
    result
}

async fn schedule(
    inner: &Inner,
    outcome: &std::result::Result<PassResult, RunError>,
) -> Result<()> {
    let storage = inner.state.storage();
    let at = |ms: i64| ScheduledTime::new(js_sys::Date::new(&js_sys::Number::from(ms as f64)));
    match outcome {
        Ok(PassResult {
            status: Status::Waiting,
            wake_at_ms: Some(wake),
            ..
        }) => storage.set_alarm(at(*wake)).await,
        Ok(p) if p.status.is_runnable() => {
            storage
                .set_alarm(at(worker::Date::now().as_millis() as i64))
                .await
        }
        Ok(_) => storage.delete_alarm().await,
        Err(_) => {
            storage
                .set_alarm(at(
                    worker::Date::now().as_millis() as i64 + STORE_RETRY_DELAY_MS
                ))
                .await
        }
    }
}
