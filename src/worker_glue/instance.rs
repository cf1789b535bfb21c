//! `RunInstance`: the Durable Object that IS one run instance. Its own
//! SQLite storage holds the journal; its alarm is the instance's timer; it
//! is the instance's single executor. The protocol that makes it one (never
//! two passes, no interrupt or wake-up dropped, the watchdog) is
//! `engine::driver`; this object only carries its decisions out.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::{Poll, Waker};

use serde::Deserialize;
use serde_json::{json, Value};
use worker::{durable_object, DurableObject, Env, Request, Response, Result, ScheduledTime, State};

use crate::cost::Meter;
use crate::engine::driver::{self, Driver, Host, OnAlarm};
use crate::engine::{
    Clock, Command, CommandError, CreateRequest, Ended, Engine, Interrupt, InterruptFlag,
    PassResult, RunError, RunRegistry, Status,
};
use crate::store::journal::{JournalStore, SqlJournal};
use crate::store::metered::{MeteredBlobs, MeteredSql};
use crate::store::StoreError;

use super::instances::NO_INSTANCE;

use super::bindings;
use super::compose::run_env_parts;
use super::instances::InstanceOp;
use super::platform::{DoSql, WorkerClock, D1};

#[durable_object]
pub struct RunInstance {
    inner: Rc<Inner>,
}

pub struct Inner {
    state: State,
    env: Env,
    journal: std::result::Result<SqlJournal<MeteredSql<DoSql>>, StoreError>,
    driver: Driver,
    /// What this instance cost since the last pass folded it into the
    /// record (`crate::cost`): its requests, storage rows and services.
    meter: Rc<Meter>,
    /// Creates waiting to answer until the instance's index row lands.
    row: RowWait,
}

/// How long a create waits for its instance's index row (ADR-0018,
/// `docs/adr/0018-a-single-creates-row-rides-its-first-pass.md`). A
/// pass writes it within milliseconds, before its first step body, and a
/// pass or drive that ends without it answers at once; this bounds only
/// a wait that no later pass or drive ends (a poke behind a running
/// drive asks for none). The create is then answered 503, and the
/// instance's alarm retries the pass.
const ROW_WAIT_MS_MAX: i64 = 30_000;

/// Creates waiting for the instance's index row, which its first pass
/// writes (ADR-0018): told when it lands, or when a pass or drive that
/// started after the waiter ended without it.
#[derive(Default)]
struct RowWait {
    /// D1 has the row (known in this life of the object).
    landed: Cell<bool>,
    /// Bumped by a purge and by a new create: a row write still in flight
    /// for an earlier life says nothing of this one.
    life: Cell<u64>,
    /// Passes and drives started so far, each numbered by this count.
    started: Cell<u64>,
    /// The highest-numbered pass or drive (one that held the executor)
    /// that ended.
    ended_upto: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl RowWait {
    /// What an engine tells when the row lands (`Engine::on_indexed`):
    /// it counts for this life of the object only.
    fn teller(&self) -> impl Fn() + '_ {
        let life = self.life.get();
        move || {
            if self.life.get() == life {
                self.landed.set(true);
                self.wake();
            }
        }
    }

    fn new_life(&self) {
        self.life.set(self.life.get() + 1);
        self.landed.set(false);
    }

    /// A pass or drive starts: its number.
    fn starting(&self) -> u64 {
        let n = self.started.get() + 1;
        self.started.set(n);
        n
    }

    /// Pass or drive `n` ended.
    fn ended(&self, n: u64) {
        self.ended_upto.set(self.ended_upto.get().max(n));
        self.wake();
    }

    fn wake(&self) {
        for w in self.wakers.take() {
            w.wake();
        }
    }

    /// Whether the row landed: as soon as it did, or a pass or drive
    /// started after `since` (`started` read before the waiter's kick)
    /// ended without it, at most `ROW_WAIT_MS_MAX`. One already running
    /// does not answer it: it may never have tried the row for it.
    async fn until_landed(&self, since: u64) -> bool {
        let told = futures_util::future::poll_fn(|cx| {
            if self.landed.get() {
                Poll::Ready(true)
            } else if self.ended_upto.get() > since {
                Poll::Ready(false)
            } else {
                self.wakers.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        });
        let timer = WorkerClock.sleep(ROW_WAIT_MS_MAX);
        match futures_util::future::select(std::pin::pin!(told), timer).await {
            futures_util::future::Either::Left((landed, _)) => landed,
            futures_util::future::Either::Right(_) => self.landed.get(),
        }
    }
}

#[derive(Deserialize)]
struct EventBody {
    #[serde(rename = "type")]
    event_type: String,
    payload: Value,
}

impl DurableObject for RunInstance {
    fn new(state: State, env: Env) -> Self {
        bindings::apply_log_level(&env);
        let meter = Rc::new(Meter::new());
        let journal = SqlJournal::open(MeteredSql {
            inner: DoSql(state.storage().sql()),
            meter: meter.clone(),
        });
        RunInstance {
            inner: Rc::new(Inner {
                state,
                env,
                journal,
                driver: Driver::default(),
                meter,
                row: RowWait::default(),
            }),
        }
    }

    /// The same operations at `/<name>`, for a Worker of the release
    /// before RPC (`serve`) while a deploy replaces it: its isolates may
    /// still be finishing requests (a create, a sweep) when this object
    /// already runs the new code. Nothing in this release calls it.
    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let op = InstanceOp::parse(req.path().trim_start_matches('/'));
        let body = req.text().await?;
        let (status, value) = self.serve(op, &body).await;
        Ok(Response::from_json(&value)?.with_status(status))
    }

    async fn alarm(&self) -> Result<Response> {
        self.inner.meter.record(|u| u.do_requests += 1);
        match self.inner.driver.on_alarm(WorkerClock.now_ms()) {
            OnAlarm::RearmWatchdog(at) => {
                set_alarm(&self.inner.state, at).await?;
                Ok(Response::ok("running")?)
            }
            OnAlarm::Drive => {
                drive(&self.inner, true).await;
                Response::ok("done")
            }
        }
    }
}

/// An operation's answer: an HTTP status and a JSON body, as the client
/// (`instances::request`) reads it.
type Answer = (u16, Value);

/// The operations as RPC methods: the Worker calls `serve` on the stub
/// (`instances::request`), which skips the `Request` and `Response` a
/// `fetch` builds and streams on both sides of the call. The build makes
/// the class a `DurableObject` for the runtime to allow it
/// (`scripts/build.sh`, `rpc_classes`).
#[wasm_bindgen::prelude::wasm_bindgen]
impl RunInstance {
    /// `op` is an `InstanceOp` name, `body` its JSON; resolves to
    /// `[status, body]` with the body as JSON text.
    #[wasm_bindgen::prelude::wasm_bindgen(js_name = serve)]
    pub async fn serve_rpc(
        &self,
        op: String,
        body: String,
    ) -> std::result::Result<wasm_bindgen::JsValue, wasm_bindgen::JsValue> {
        let (status, value) = self.serve(InstanceOp::parse(&op), &body).await;
        let pair = js_sys::Array::of2(&f64::from(status).into(), &value.to_string().into());
        Ok(pair.into())
    }
}

impl RunInstance {
    async fn serve(&self, op: Option<InstanceOp>, body: &str) -> Answer {
        self.inner.meter.record(|u| u.do_requests += 1);
        let Some(op) = op else {
            return (404, json!({ "error": "unknown instance operation" }));
        };
        let journal = match &self.inner.journal {
            Ok(j) => j,
            Err(e) => return (500, json!({ "error": e.to_string() })),
        };
        match op {
            InstanceOp::Create | InstanceOp::Poke => self.create(body, op).await,
            InstanceOp::Event => self.event(body),
            InstanceOp::Command => self.command(body).await,
            InstanceOp::Purge => {
                if let Err(e) = journal.clear() {
                    return (500, json!({ "error": e.to_string() }));
                }
                self.inner.driver.forget_purged();
                self.inner.row.new_life();
                match self.inner.state.storage().delete_alarm().await {
                    Ok(()) => (200, json!({ "purged": true })),
                    Err(e) => (500, json!({ "error": e.to_string() })),
                }
            }
        }
    }

    /// The sweep's poke also creates: an instance whose create died before
    /// reaching its object is rebuilt from D1's copy. A poke also reaches
    /// finished instances, whose pass retries a D1 mirror that failed; it
    /// must not queue another pass behind a running one. A create whose row
    /// is not in D1 yet is answered once its pass wrote it (ADR-0018).
    async fn create(&self, body: &str, op: InstanceOp) -> Answer {
        let create: CreateRequest = match serde_json::from_str(body) {
            Ok(c) => c,
            Err(e) => return (400, json!({ "error": e.to_string() })),
        };
        let host = ObjectHost { inner: &self.inner };
        let created = match (host.journal(), host.index()) {
            (Ok(journal), Ok(index)) => engine_of(journal, &index, &self.inner.meter, None)
                .create(&create)
                .await
                .map_err(|e| e.to_string()),
            (Err(e), _) | (_, Err(e)) => Err(e),
        };
        let created = match created {
            Ok(created) => created,
            Err(e) => return (500, json!({ "error": e })),
        };
        if created.created {
            // A new life of the instance in this object (after a purge): a
            // row write still in flight for the old one says nothing of it.
            self.inner.row.new_life();
        }
        let await_row = created.row_pending && !self.inner.row.landed.get();
        // Nothing in D1 names it until its pass writes the row: a new one's
        // watchdog is asked for in the same turn as its record was saved
        // (no await between), so the two are kept together and a death
        // before the drive is retried. Its write is issued when first
        // polled, below, before the kicked drive can start (that waits for
        // this handler to yield).
        // Set at once where no wake-up can be pending (a new instance, an
        // ended one: a tombstone the create took), so nothing awaits
        // between the record's save and it.
        let at_once = created.created || !created.status.is_runnable();
        let watchdog = await_row.then(|| self.row_watchdog(at_once));
        let since = self.inner.row.started.get();
        if created.status.is_runnable() || op == InstanceOp::Poke || await_row {
            self.kick(op == InstanceOp::Create);
        }
        if let Some(Err(e)) = futures_util::future::OptionFuture::from(watchdog).await {
            return (500, json!({ "error": e.to_string() }));
        }
        if await_row && !self.inner.row.until_landed(since).await {
            return (
                503,
                json!({ "error": "the instance is kept, but its index row is not written yet: \
                                  its alarm retries; create it again to wait for it" }),
            );
        }
        (200, json!(created))
    }

    fn event(&self, body: &str) -> Answer {
        let body: EventBody = match serde_json::from_str(body) {
            Ok(b) => b,
            Err(e) => return (400, json!({ "error": e.to_string() })),
        };
        let host = ObjectHost { inner: &self.inner };
        let sent = match (host.journal(), host.index()) {
            (Ok(journal), Ok(index)) => engine_of(journal, &index, &self.inner.meter, None)
                .send_event(&body.event_type, &body.payload),
            (Err(e), _) | (_, Err(e)) => Err(CommandError::Store(e)),
        };
        match sent {
            Ok(wake) => {
                // Running too: an event that lands while a pass is past its
                // wait must get a pass of its own.
                if wake {
                    self.kick(true);
                }
                (202, json!({ "accepted": true }))
            }
            Err(e) => command_error(e),
        }
    }

    async fn command(&self, body: &str) -> Answer {
        let cmd: Command = match serde_json::from_str(body) {
            Ok(c) => c,
            Err(e) => return (400, json!({ "error": e.to_string() })),
        };
        let host = ObjectHost { inner: &self.inner };
        match driver::command(&self.inner.driver, &host, &cmd).await {
            Ok(answer) => {
                // An applied command may be answered pending too: a pause
                // or terminate that arrived meanwhile stands over it, and
                // the drive asked for carries it out.
                if answer.drive {
                    self.kick(true);
                }
                if answer.pending {
                    let when = match answer.drive {
                        true => "at the first durable call of the pass it starts",
                        false => "at the running pass's next durable call, or after the command under way",
                    };
                    return (202, json!({ "status": answer.status, "pending": when }));
                }
                (200, json!({ "status": answer.status }))
            }
            Err(e) => command_error(e),
        }
    }

    /// The watchdog of an instance D1 has no row of: set `at_once`, or
    /// else never later than one already set (a retried create of a live
    /// instance, whose wake-up may be sooner).
    async fn row_watchdog(&self, at_once: bool) -> Result<()> {
        let at = WorkerClock.now_ms() + driver::PASS_WATCHDOG_MS;
        if !at_once {
            let prior = self.inner.state.storage().get_alarm().await?;
            if prior.is_some_and(|p| p <= at) {
                return Ok(());
            }
        }
        set_alarm(&self.inner.state, at).await
    }

    /// Drives without holding the caller's request open.
    fn kick(&self, rerun_if_busy: bool) {
        let inner = self.inner.clone();
        self.inner
            .state
            .wait_until(async move { drive(&inner, rerun_if_busy).await });
    }
}

/// A drive, then word to the creates waiting for the row (it landed, or
/// this drive ended without it).
async fn drive(inner: &Inner, rerun_if_busy: bool) {
    let host = ObjectHost { inner };
    let n = inner.row.starting();
    if driver::drive(&inner.driver, &host, rerun_if_busy).await {
        inner.row.ended(n);
    }
}

fn command_error(e: CommandError) -> Answer {
    match e {
        CommandError::NotFound => (404, json!({ "error": NO_INSTANCE })),
        CommandError::Conflict(m) => (409, json!({ "error": m })),
        CommandError::TooLarge(m) => (413, json!({ "error": m })),
        CommandError::Store(m) => (500, json!({ "error": m })),
    }
}

/// The engine over the object's journal and D1 (large results go to R2
/// only where a pass sets `blobs`), counting into the object's meter and
/// telling `on_indexed` when a pending index row lands (passes, commands).
fn engine_of<'a>(
    journal: &'a SqlJournal<MeteredSql<DoSql>>,
    index: &'a D1,
    meter: &'a Meter,
    on_indexed: Option<&'a dyn Fn()>,
) -> Engine<'a> {
    Engine {
        journal,
        blobs: None,
        index,
        clock: &WorkerClock,
        meter: Some(meter),
        on_indexed,
    }
}

async fn set_alarm(state: &State, at_ms: i64) -> Result<()> {
    let at = ScheduledTime::new(js_sys::Date::new(&js_sys::Number::from(at_ms as f64)));
    state.storage().set_alarm(at).await
}

/// The object as the driver's host: its alarm, its engine, its registry.
struct ObjectHost<'a> {
    inner: &'a Inner,
}

impl ObjectHost<'_> {
    fn journal(&self) -> std::result::Result<&SqlJournal<MeteredSql<DoSql>>, String> {
        self.inner.journal.as_ref().map_err(|e| e.to_string())
    }

    fn index(&self) -> std::result::Result<D1, String> {
        self.inner
            .env
            .d1(bindings::DB)
            .map(D1)
            .map_err(|e| e.to_string())
    }

    /// Lets the run release what it holds after the instance ended. A
    /// failure is left to the sweep, which finalizes finished instances
    /// that still hold gate rows until they release them.
    async fn finalize(&self, registry: &dyn RunRegistry) {
        let Ok(journal) = self.inner.journal.as_ref() else {
            return;
        };
        let Ok(Some(rec)) = journal.load_instance() else {
            return;
        };
        if let Some(ended) = Ended::of(&rec) {
            self.finalize_ended(registry, &ended, rec.status).await;
        }
    }

    async fn finalize_ended(&self, registry: &dyn RunRegistry, ended: &Ended, status: Status) {
        let input: Value = serde_json::from_str(&ended.input).unwrap_or(Value::Null);
        if let Err(e) = registry
            .finalize(&ended.run, &ended.id, &input, status)
            .await
        {
            worker::console_warn!("finalize of {} left for the sweep: {e}", ended.id);
        }
    }
}

#[async_trait::async_trait(?Send)]
impl Host for ObjectHost<'_> {
    fn now_ms(&self) -> i64 {
        WorkerClock.now_ms()
    }

    async fn set_alarm(&self, at_ms: i64) -> std::result::Result<(), String> {
        set_alarm(&self.inner.state, at_ms)
            .await
            .map_err(|e| e.to_string())
    }

    async fn delete_alarm(&self) -> std::result::Result<(), String> {
        self.inner
            .state
            .storage()
            .delete_alarm()
            .await
            .map_err(|e| e.to_string())
    }

    async fn alarm_at(&self) -> std::result::Result<Option<i64>, String> {
        self.inner
            .state
            .storage()
            .get_alarm()
            .await
            .map_err(|e| e.to_string())
    }

    async fn pass(&self, interrupt: &InterruptFlag) -> std::result::Result<PassResult, RunError> {
        let store = |message: String| RunError::Store { message };
        let (journal, index) = (self.journal().map_err(store)?, self.index().map_err(store)?);
        let parts = run_env_parts(&self.inner.env);
        let meter = &*self.inner.meter;
        let (n, landed) = (self.inner.row.starting(), self.inner.row.teller());
        let mut engine = engine_of(journal, &index, meter, Some(&landed));
        let blobs = parts.blobs().map(|inner| MeteredBlobs { inner, meter });
        engine.blobs = blobs.as_ref().map(|b| b as &dyn crate::blobs::Blobs);
        let registry = parts.registry(&WorkerClock, &index, Some(meter));
        let result = engine.pass(&registry, interrupt).await;
        self.inner.row.ended(n);
        match &result {
            Ok(PassResult {
                status,
                ended: Some(ended),
                ..
            }) => self.finalize_ended(&registry, ended, *status).await,
            Ok(_) => {}
            // D1 refusing the row: expected while D1 is away, backed off.
            Err(e @ RunError::RowRefused { .. }) => worker::console_warn!("pass stopped: {e}"),
            Err(e) => worker::console_error!("pass failed: {e}"),
        }
        if let Some(e) = result.as_ref().ok().and_then(|p| p.mirror_error.as_ref()) {
            worker::console_warn!("D1 mirror failed, retried next pass: {e}");
        }
        result
    }

    async fn command(&self, cmd: &Command) -> std::result::Result<Status, CommandError> {
        let journal = self.journal().map_err(CommandError::Store)?;
        let index = self.index().map_err(CommandError::Store)?;
        let landed = self.inner.row.teller();
        let engine = engine_of(journal, &index, &self.inner.meter, Some(&landed));
        let parts = run_env_parts(&self.inner.env);
        let registry = parts.registry(&WorkerClock, &index, Some(&self.inner.meter));
        let status = engine.command(&registry, cmd).await?;
        if status.is_terminal() {
            self.finalize(&registry).await;
        }
        Ok(status)
    }

    fn keep_interrupt(&self, interrupt: Option<Interrupt>) -> std::result::Result<(), String> {
        let journal = self.journal()?;
        journal.keep_interrupt(interrupt).map_err(|e| e.to_string())
    }

    fn kept_interrupt(&self) -> std::result::Result<Option<Interrupt>, String> {
        self.journal()?.kept_interrupt().map_err(|e| e.to_string())
    }
}
