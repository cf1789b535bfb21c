//! The executor protocol (`engine::driver`) natively: the real engine and
//! journal under a fake host that records its alarm, with passes held open
//! at chosen points so triggers, alarms and commands land in the middle of
//! one. Each race is a sequence of events and the decisions they produce.

mod common;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use async_trait::async_trait;
use common::{block_on, CountingDb, World, T0};
use serde_json::{json, Value};
use sluice::engine::driver::{self, CommandAnswer, Driver, Host, Kick, OnAlarm, PASS_WATCHDOG_MS};
use sluice::engine::{
    Command, CommandError, CreateRequest, Ctx, InterruptFlag, PassResult, RunError, RunOutcome,
    RunRegistry, Status, StepConfig,
};
use sluice::limits::EXECUTOR_CRASHES_MAX;
use sluice::store::{Database, Row, Stmt, StoreError};

/// A point a pass waits at until the test opens it.
#[derive(Default)]
struct Gate {
    open: Cell<bool>,
    waiting: Cell<u32>,
    waker: RefCell<Option<Waker>>,
}

impl Gate {
    fn open(&self) {
        self.open.set(true);
        if let Some(w) = self.waker.borrow_mut().take() {
            w.wake();
        }
    }
    async fn pass(&self) {
        std::future::poll_fn(|cx| {
            if self.open.get() {
                return Poll::Ready(());
            }
            self.waiting.set(self.waiting.get() + 1);
            *self.waker.borrow_mut() = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// Runs: "two-steps" (step one waits at `step_gate`, then step two),
/// "wait-event" (a step, then an event wait of an hour).
#[derive(Default)]
struct Runs {
    step_gate: Gate,
    bodies: Cell<u32>,
    second_step: Cell<u32>,
}

#[async_trait(?Send)]
impl RunRegistry for Runs {
    async fn execute(&self, run: &str, ctx: &Ctx<'_>, _: &Value) -> Result<RunOutcome, RunError> {
        ctx.step("one", StepConfig::default(), |_| async {
            self.bodies.set(self.bodies.get() + 1);
            self.step_gate.pass().await;
            Ok(1)
        })
        .await?;
        match run {
            "two-steps" => {
                ctx.step("two", StepConfig::default(), |_| async {
                    self.second_step.set(self.second_step.get() + 1);
                    Ok(2)
                })
                .await?;
            }
            _ => {
                ctx.wait_for_event("go", "go", 3_600_000).await?;
            }
        }
        Ok(RunOutcome::Complete(json!("done")))
    }
}

/// D1 whose next mirror batch waits at a gate (a slow D1 round trip at the
/// end of a pass).
struct SlowIndex {
    db: CountingDb,
    hold_next_batch: Cell<bool>,
    gate: Gate,
}

#[async_trait(?Send)]
impl Database for SlowIndex {
    async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        self.db.all(stmt).await
    }
    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        self.db.run(stmt).await
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
        if self.hold_next_batch.replace(false) {
            self.gate.pass().await;
        }
        self.db.batch(stmts).await
    }
}

#[derive(Debug, Clone, PartialEq)]
enum AlarmOp {
    Set(i64),
    Delete,
}

/// The Durable Object, natively: its alarm, its engine, its commands.
struct FakeHost<'a> {
    world: &'a World,
    index: &'a SlowIndex,
    runs: &'a Runs,
    alarms: RefCell<Vec<AlarmOp>>,
    passes: Cell<u32>,
    commands: RefCell<Vec<Command>>,
}

impl FakeHost<'_> {
    fn engine(&self) -> sluice::engine::Engine<'_> {
        sluice::engine::Engine {
            journal: &self.world.journal,
            blobs: None,
            index: self.index,
            clock: &self.world.clock,
            meter: None,
        }
    }
    fn last_alarm(&self) -> Option<AlarmOp> {
        self.alarms.borrow().last().cloned()
    }
    fn status(&self) -> Status {
        self.engine().record().unwrap().unwrap().status
    }
}

#[async_trait(?Send)]
impl Host for FakeHost<'_> {
    fn now_ms(&self) -> i64 {
        use sluice::engine::Clock;
        self.world.clock.now_ms()
    }
    async fn set_alarm(&self, at_ms: i64) -> Result<(), String> {
        self.alarms.borrow_mut().push(AlarmOp::Set(at_ms));
        Ok(())
    }
    async fn delete_alarm(&self) -> Result<(), String> {
        self.alarms.borrow_mut().push(AlarmOp::Delete);
        Ok(())
    }
    async fn pass(&self, interrupt: &InterruptFlag) -> Result<PassResult, RunError> {
        self.passes.set(self.passes.get() + 1);
        self.engine().pass(self.runs, interrupt).await
    }
    async fn command(&self, cmd: &Command) -> Result<Status, CommandError> {
        self.commands.borrow_mut().push(cmd.clone());
        self.engine().command(self.runs, cmd).await
    }
}

struct Rig {
    world: World,
    index: SlowIndex,
    runs: Runs,
}

impl Rig {
    fn new(run: &str) -> Rig {
        let rig = Rig {
            world: World::new(),
            index: SlowIndex {
                db: CountingDb::new(),
                hold_next_batch: Cell::new(false),
                gate: Gate::default(),
            },
            runs: Runs::default(),
        };
        let req = CreateRequest {
            indexed: false,
            key: format!("driver:{run}"),
            run: run.into(),
            input: Value::Null,
            repo: None,
            entity: None,
            sha: None,
            max_steps: None,
            max_duration_ms: None,
        };
        let host = rig.host();
        block_on(host.engine().create(&req)).expect("create");
        rig
    }
    fn host(&self) -> FakeHost<'_> {
        FakeHost {
            world: &self.world,
            index: &self.index,
            runs: &self.runs,
            alarms: RefCell::new(Vec::new()),
            passes: Cell::new(0),
            commands: RefCell::new(Vec::new()),
        }
    }
}

/// Polls a future once: Some when it finished.
fn poll_once<T>(f: &mut Pin<Box<dyn Future<Output = T> + '_>>) -> Option<T> {
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

#[test]
fn an_event_that_lands_after_the_wait_gets_a_pass_of_its_own() {
    let rig = Rig::new("wait-event");
    rig.runs.step_gate.open();
    let host = rig.host();
    let driver = Driver::default();
    // The pass evaluates its wait (no event yet), then its mirror is slow.
    rig.index.hold_next_batch.set(true);
    let mut drive: Pin<Box<dyn Future<Output = ()>>> =
        Box::pin(driver::drive(&driver, &host, true));
    assert!(poll_once(&mut drive).is_none(), "the pass is in its mirror");
    assert_eq!(rig.index.gate.waiting.get(), 1);
    // The event arrives now: kept, and the running pass is asked for more.
    assert!(host.engine().send_event("go", &json!(1)).unwrap());
    assert_eq!(driver.trigger(true), Kick::Queued);
    rig.index.gate.open();
    block_on(drive);
    assert_eq!(host.passes.get(), 2, "one more pass consumed the event");
    assert_eq!(host.status(), Status::Complete);
    assert_eq!(host.last_alarm(), Some(AlarmOp::Delete));
    assert_eq!(
        rig.world.clock.0.get(),
        T0,
        "no waiting for the hour's timeout"
    );
}

#[test]
fn an_operator_terminate_interrupts_the_running_pass_at_its_next_durable_call() {
    let rig = Rig::new("two-steps");
    let host = rig.host();
    let driver = Driver::default();
    let mut drive: Pin<Box<dyn Future<Output = ()>>> =
        Box::pin(driver::drive(&driver, &host, true));
    assert!(poll_once(&mut drive).is_none(), "step one is in flight");
    // A resume cannot interrupt; a terminate can, and is pending.
    let refused = block_on(driver::command(&driver, &host, &Command::Resume));
    assert!(
        matches!(refused, Err(CommandError::Conflict(_))),
        "{refused:?}"
    );
    let pending = block_on(driver::command(&driver, &host, &Command::Terminate)).unwrap();
    assert_eq!(
        pending,
        CommandAnswer {
            status: Status::Terminated,
            pending: true,
            drive: false
        }
    );
    assert!(
        host.commands.borrow().is_empty(),
        "not applied beside the pass"
    );
    rig.runs.step_gate.open();
    block_on(drive);
    assert_eq!(host.status(), Status::Terminated);
    assert_eq!(rig.runs.second_step.get(), 0, "step two never started");
    assert_eq!(rig.runs.bodies.get(), 1);
}

#[test]
fn an_alarm_during_a_pass_rearms_the_watchdog_and_starts_no_second_pass() {
    let rig = Rig::new("two-steps");
    let host = rig.host();
    let driver = Driver::default();
    let mut drive: Pin<Box<dyn Future<Output = ()>>> =
        Box::pin(driver::drive(&driver, &host, true));
    assert!(poll_once(&mut drive).is_none());
    let now = host.now_ms();
    assert_eq!(
        driver.on_alarm(now),
        OnAlarm::RearmWatchdog(now + PASS_WATCHDOG_MS)
    );
    // A second drive (a fetch's kick) while one runs starts nothing.
    let mut second: Pin<Box<dyn Future<Output = ()>>> =
        Box::pin(driver::drive(&driver, &host, false));
    assert_eq!(poll_once(&mut second), Some(()));
    rig.runs.step_gate.open();
    block_on(drive);
    assert_eq!((host.passes.get(), rig.runs.bodies.get()), (1, 1));
    assert_eq!(host.status(), Status::Complete);
    assert_eq!(driver.on_alarm(now), OnAlarm::Drive);
}

#[test]
fn a_pass_that_dies_is_resumed_by_its_watchdog_alarm() {
    let rig = Rig::new("two-steps");
    let host = rig.host();
    {
        let dying = Driver::default();
        let mut drive: Pin<Box<dyn Future<Output = ()>>> =
            Box::pin(driver::drive(&dying, &host, true));
        assert!(poll_once(&mut drive).is_none());
        // The isolate dies here: the pass and its driver are gone.
    }
    assert_eq!(
        host.last_alarm(),
        Some(AlarmOp::Set(T0 + PASS_WATCHDOG_MS)),
        "the watchdog was armed before the pass"
    );
    rig.runs.step_gate.open();
    let fresh = Driver::default();
    rig.world.clock.set(T0 + PASS_WATCHDOG_MS);
    assert_eq!(fresh.on_alarm(host.now_ms()), OnAlarm::Drive);
    block_on(driver::drive(&fresh, &host, true));
    assert_eq!(host.status(), Status::Complete);
    assert_eq!(rig.runs.second_step.get(), 1);
}

#[test]
fn a_crash_loop_ends_the_instance_instead_of_looping() {
    let rig = Rig::new("two-steps");
    let host = rig.host();
    for crash in 0..EXECUTOR_CRASHES_MAX {
        let d = Driver::default();
        let mut drive: Pin<Box<dyn Future<Output = ()>>> = Box::pin(driver::drive(&d, &host, true));
        assert!(
            poll_once(&mut drive).is_none(),
            "crash {crash}: the pass runs"
        );
    }
    block_on(driver::drive(&Driver::default(), &host, true));
    assert_eq!(host.status(), Status::Errored);
    let rec = host.engine().record().unwrap().unwrap();
    assert_eq!(rec.error_tag.as_deref(), Some("ExecutorCrashLoop"));
    assert_eq!(host.last_alarm(), Some(AlarmOp::Delete));
}

#[test]
fn terminate_while_idle_is_applied_and_the_alarm_deleted_and_a_refused_command_keeps_it() {
    let rig = Rig::new("wait-event");
    rig.runs.step_gate.open();
    let host = rig.host();
    let driver = Driver::default();
    block_on(driver::drive(&driver, &host, true));
    assert_eq!(host.status(), Status::Waiting);
    let wake = T0 + 3_600_000;
    assert_eq!(host.last_alarm(), Some(AlarmOp::Set(wake)));
    // A command that does not apply changes nothing, the alarm included.
    let refused = block_on(driver::command(&driver, &host, &Command::Resume));
    assert!(matches!(refused, Err(CommandError::Conflict(_))));
    assert_eq!(
        host.last_alarm(),
        Some(AlarmOp::Set(wake)),
        "the wake-up is kept"
    );
    let applied = block_on(driver::command(&driver, &host, &Command::Terminate)).unwrap();
    assert_eq!(
        applied,
        CommandAnswer {
            status: Status::Terminated,
            pending: false,
            drive: false
        }
    );
    assert_eq!(
        host.commands.borrow().as_slice(),
        [Command::Resume, Command::Terminate]
    );
    assert_eq!(host.last_alarm(), Some(AlarmOp::Delete));
    assert_eq!(host.passes.get(), 1);
}
