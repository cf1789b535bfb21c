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
    Command, CommandError, CreateRequest, Ctx, Interrupt, InterruptFlag, PassResult, RunError,
    RunOutcome, RunRegistry, Status, StepConfig,
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
    /// "model": each step's body takes one token to finish.
    tokens: Cell<u32>,
    /// The model's operator was answered a pause or a terminate that no
    /// later command undid: a body that starts now is a violation.
    forbidden: Cell<bool>,
    /// Of those, a terminate: it is what the instance ends as.
    terminate_answered: Cell<bool>,
    /// A command was in flight when the isolate died: it may or may not
    /// have taken effect, so nothing is known until the next answer.
    unanswered: Cell<bool>,
    violations: RefCell<Vec<String>>,
    /// The index the model's bodies look their instance's row up in.
    index: RefCell<Option<std::rc::Rc<CountingDb>>>,
}

/// Steps of the "model" run.
const MODEL_STEPS: u32 = 6;

impl Runs {
    async fn model(&self, ctx: &Ctx<'_>) -> Result<RunOutcome, RunError> {
        for i in 0..MODEL_STEPS {
            ctx.step(&format!("s{i}"), StepConfig::default(), |_| async move {
                self.bodies.set(self.bodies.get() + 1);
                if self.forbidden.get() && !self.unanswered.get() {
                    self.violations.borrow_mut().push(format!("s{i} started"));
                }
                // A body may claim a gate, which reads its instance's row.
                if !self.row_in_index(ctx.instance_id()) {
                    let v = format!("s{i} started with no index row");
                    self.violations.borrow_mut().push(v);
                }
                std::future::poll_fn(|_| match self.tokens.get() {
                    0 => Poll::Pending,
                    n => {
                        self.tokens.set(n - 1);
                        Poll::Ready(())
                    }
                })
                .await;
                Ok(i)
            })
            .await?;
        }
        Ok(RunOutcome::Complete(json!("done")))
    }

    fn row_in_index(&self, id: &str) -> bool {
        let index = self.index.borrow().clone().expect("the rig's index");
        let row = sluice::store::executions::get(&index.db, id);
        futures::FutureExt::now_or_never(row)
            .expect("SQLite answers at once")
            .expect("query")
            .is_some()
    }
}

#[async_trait(?Send)]
impl RunRegistry for Runs {
    async fn execute(&self, run: &str, ctx: &Ctx<'_>, _: &Value) -> Result<RunOutcome, RunError> {
        if run == "model" {
            return self.model(ctx).await;
        }
        if run == "flaky" {
            // Attempt 1 fails (retried after 1 s, in the same pass).
            ctx.step("flaky", StepConfig::default(), |attempt| async move {
                self.bodies.set(self.bodies.get() + 1);
                match attempt {
                    1 => Err(sluice::engine::StepFailure::retryable("Flaky", "first")),
                    _ => Ok(attempt),
                }
            })
            .await?;
            return Ok(RunOutcome::Complete(json!("done")));
        }
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
    db: std::rc::Rc<CountingDb>,
    hold_next_batch: Cell<bool>,
    gate: Gate,
    /// What the batches after it do, in order, before the above applies.
    script: RefCell<std::collections::VecDeque<Batch>>,
    /// Some: each `run` (a pending row's write) waits for a token, taking
    /// one (the model's slow D1); None: `run` answers at once.
    run_tokens: Cell<Option<u32>>,
    /// The same for each `batch` (a mirror, a command's index write).
    batch_tokens: Cell<Option<u32>>,
}

/// Waits for one of `tokens` when they are counted (Some), taking it.
async fn take_token(tokens: &Cell<Option<u32>>) {
    std::future::poll_fn(|_| match tokens.get() {
        None => Poll::Ready(()),
        Some(0) => Poll::Pending,
        Some(n) => {
            tokens.set(Some(n - 1));
            Poll::Ready(())
        }
    })
    .await
}

/// One scripted D1 batch: held at its own gate until opened, or refused.
enum Batch {
    Held(std::rc::Rc<Gate>),
    Fails,
}

#[async_trait(?Send)]
impl Database for SlowIndex {
    async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        self.db.all(stmt).await
    }
    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        take_token(&self.run_tokens).await;
        self.db.run(stmt).await
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
        take_token(&self.batch_tokens).await;
        let scripted = self.script.borrow_mut().pop_front();
        match scripted {
            Some(Batch::Held(gate)) => gate.pass().await,
            Some(Batch::Fails) => return Err(StoreError::Query("scripted failure".into())),
            None => {}
        }
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
            on_indexed: None,
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
    async fn alarm_at(&self) -> Result<Option<i64>, String> {
        Ok(match self.last_alarm() {
            Some(AlarmOp::Set(at)) => Some(at),
            _ => None,
        })
    }
    async fn pass(&self, interrupt: &InterruptFlag) -> Result<PassResult, RunError> {
        self.passes.set(self.passes.get() + 1);
        self.engine().pass(self.runs, interrupt).await
    }
    async fn command(&self, cmd: &Command) -> Result<Status, CommandError> {
        self.commands.borrow_mut().push(cmd.clone());
        self.engine().command(self.runs, cmd).await
    }
    fn keep_interrupt(&self, interrupt: Option<Interrupt>) -> Result<(), String> {
        use sluice::store::journal::JournalStore;
        self.world
            .journal
            .keep_interrupt(interrupt)
            .map_err(|e| e.to_string())
    }
    fn kept_interrupt(&self) -> Result<Option<Interrupt>, String> {
        use sluice::store::journal::JournalStore;
        self.world
            .journal
            .kept_interrupt()
            .map_err(|e| e.to_string())
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
                db: std::rc::Rc::new(CountingDb::new()),
                hold_next_batch: Cell::new(false),
                gate: Gate::default(),
                script: RefCell::new(std::collections::VecDeque::new()),
                run_tokens: Cell::new(None),
                batch_tokens: Cell::new(None),
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
        *rig.runs.index.borrow_mut() = Some(rig.index.db.clone());
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

/// A drive started and polled once, still in its pass (`what` says where).
fn in_flight<'a>(
    d: &'a Driver,
    host: &'a FakeHost<'_>,
    what: &str,
) -> Pin<Box<dyn Future<Output = ()> + 'a>> {
    let mut drive: Pin<Box<dyn Future<Output = ()> + 'a>> = Box::pin(async move {
        driver::drive(d, host, true).await;
    });
    assert!(poll_once(&mut drive).is_none(), "{what}");
    drive
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
    let drive = in_flight(&driver, &host, "the pass is in its mirror");
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
    let drive = in_flight(&driver, &host, "step one is in flight");
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
    let drive = in_flight(&driver, &host, "a pass is in flight");
    let now = host.now_ms();
    assert_eq!(
        driver.on_alarm(now),
        OnAlarm::RearmWatchdog(now + PASS_WATCHDOG_MS)
    );
    // A second drive (a fetch's kick) while one runs starts nothing.
    let mut second: Pin<Box<dyn Future<Output = ()>>> = Box::pin(async {
        driver::drive(&driver, &host, false).await;
    });
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
        let _drive = in_flight(&dying, &host, "a pass is in flight");
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
        let _drive = in_flight(&d, &host, &format!("crash {crash}: the pass runs"));
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

/// A pass is in step one's body when `cmd` (a pause or terminate) is
/// answered "pending"; then the isolate dies, before the pass reaches its
/// next durable call.
fn answered_pending_then_the_pass_dies(rig: &Rig, cmd: Command) {
    let host = rig.host();
    let dying = Driver::default();
    let _drive = in_flight(&dying, &host, "step one is in flight");
    let answer = block_on(driver::command(&dying, &host, &cmd)).unwrap();
    assert!(answer.pending);
}

#[test]
fn a_terminate_answered_pending_is_carried_out_after_the_pass_dies() {
    let rig = Rig::new("two-steps");
    answered_pending_then_the_pass_dies(&rig, Command::Terminate);
    let host = rig.host();
    rig.runs.step_gate.open();
    let fresh = Driver::default();
    block_on(driver::drive(&fresh, &host, true));
    assert_eq!(host.status(), Status::Terminated);
    assert_eq!(rig.runs.second_step.get(), 0, "step two never started");
    assert_eq!(rig.runs.bodies.get(), 1, "step one did not run again");
    use sluice::store::journal::JournalStore;
    assert_eq!(
        rig.world.journal.kept_interrupt().unwrap(),
        None,
        "carried out, forgotten"
    );
}

#[test]
fn a_pause_answered_pending_survives_the_crash_and_a_resume_is_not_undone_by_it() {
    let rig = Rig::new("two-steps");
    answered_pending_then_the_pass_dies(&rig, Command::Pause);
    let host = rig.host();
    rig.runs.step_gate.open();
    // Before the watchdog fires, the operator resumes: the pause answered
    // first is carried out first, so the resume then applies to it.
    let fresh = Driver::default();
    let resumed = block_on(driver::command(&fresh, &host, &Command::Resume)).unwrap();
    assert_eq!(
        host.commands.borrow().as_slice(),
        [Command::Pause, Command::Resume]
    );
    assert!(resumed.drive);
    block_on(driver::drive(&fresh, &host, true));
    assert_eq!(
        host.status(),
        Status::Complete,
        "the kept pause did not come back"
    );
    assert_eq!(rig.runs.second_step.get(), 1);
}

#[test]
fn a_pause_after_a_pending_terminate_leaves_the_terminate_standing() {
    let rig = Rig::new("two-steps");
    let host = rig.host();
    let driver = Driver::default();
    let drive = in_flight(&driver, &host, "a pass is in flight");
    block_on(driver::command(&driver, &host, &Command::Terminate)).unwrap();
    let paused = block_on(driver::command(&driver, &host, &Command::Pause)).unwrap();
    assert_eq!(
        paused.status,
        Status::Terminated,
        "the answer names what stands"
    );
    rig.runs.step_gate.open();
    block_on(drive);
    assert_eq!(host.status(), Status::Terminated);
    assert_eq!(rig.runs.second_step.get(), 0);
}

/// Schedules of the seeded driver model, and events in each.
const MODEL_SCHEDULES: u64 = 300;
const MODEL_EVENTS: u32 = 40;
/// Drives run at the end of a schedule until the instance settles: each
/// takes at least one step, and a pause is resumed once.
const MODEL_SETTLE_DRIVES_MAX: u32 = 3 * MODEL_STEPS;

/// What the model's schedules did, over all of them.
#[derive(Default, Debug)]
struct ModelTally {
    pending: u32,
    crashes_with_pending: u32,
    /// Isolate deaths with a command still in flight.
    crashes_with_commands: u32,
    /// Commands sent while another was in flight.
    overlapped: u32,
    /// Commands applied while a pause or terminate arrived, answered with
    /// it (`driver::answer_applied`).
    applied_under_interrupt: u32,
    /// Schedules that ended with a dropped restart unanswered (their end
    /// is not checked against the answers).
    ended_unanswered: u32,
    applied: u32,
    ends: std::collections::BTreeMap<String, u32>,
}

/// ADR-0018: a single create's first pass writes its index row before its
/// first body, an await; a terminate answered "pending" during it stops
/// the body before it starts.
#[test]
fn a_terminate_answered_while_the_row_is_written_stops_the_first_body() {
    let rig = Rig::new("two-steps");
    rig.index.run_tokens.set(Some(0));
    let host = rig.host();
    let d = Driver::default();
    let drive = in_flight(&d, &host, "held in the row's write");
    let answer = block_on(driver::command(&d, &host, &Command::Terminate)).unwrap();
    assert!(answer.pending, "{answer:?}");
    rig.index.run_tokens.set(None);
    block_on(drive);
    assert_eq!(rig.runs.bodies.get(), 0, "no body started after the answer");
    assert_eq!(host.status(), Status::Terminated);
}

/// The executor protocol under everything that can happen to it: passes
/// that progress a step at a time, triggers and alarms at any moment
/// (duplicated wake-ups), the operator's pause, terminate, resume and
/// restart landing mid-pass or between passes, and the isolate dying at
/// any await (the driver and its pass dropped). The effect modelled is a
/// step body starting: none starts once the operator was answered a pause
/// or a terminate (pending or applied), until a resume or restart the
/// operator was answered undoes it; at the end every instance settles.
#[test]
fn seeded_commands_are_carried_out_across_crashes_and_wake_ups() {
    let mut seed: u64 = 0x6472_6976_6572;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut tally = ModelTally::default();
    for schedule in 0..MODEL_SCHEDULES {
        run_model_schedule(schedule, &mut next, &mut tally);
    }
    let t = &tally;
    assert!(
        t.pending >= 100 && t.crashes_with_pending >= 30 && t.applied >= 100,
        "{t:?}"
    );
    assert!(
        t.overlapped >= 100 && t.crashes_with_commands >= 30 && t.applied_under_interrupt >= 10,
        "{t:?}"
    );
    // The end is checked against the answers in nearly every schedule.
    assert!(t.ended_unanswered * 20 <= MODEL_SCHEDULES as u32, "{t:?}");
    for end in ["complete", "terminated", "paused"] {
        assert!(t.ends.get(end).copied().unwrap_or(0) >= 10, "{t:?}");
    }
}

/// An operator command on its way: answered when it finishes.
type InFlight<'a> = Pin<Box<dyn Future<Output = Result<CommandAnswer, CommandError>> + 'a>>;

/// A command of the model's and its request in flight.
type Sent<'a> = (Command, InFlight<'a>);

fn run_model_schedule(schedule: u64, next: &mut impl FnMut(u64) -> u64, tally: &mut ModelTally) {
    let rig = Rig::new("model");
    let host = rig.host();
    let runs = &rig.runs;
    // One driver per life of the isolate: a crash moves to the next.
    let lives: Vec<Driver> = (0..=MODEL_EVENTS).map(|_| Driver::default()).collect();
    let mut life = 0;
    let mut drive: Option<Pin<Box<dyn Future<Output = ()> + '_>>> = None;
    // Commands awaiting D1 (their index write): requests interleave at an
    // object's awaits, so several may be in flight, beside a drive.
    let mut commands: Vec<Sent<'_>> = Vec::new();
    let start = |d| model_drive(d, &host);
    // The row's write before the first body is a D1 round trip, and so is
    // every batch (a pass's mirror, a command's index write).
    rig.index.run_tokens.set(Some(0));
    rig.index.batch_tokens.set(Some(0));
    for _ in 0..MODEL_EVENTS {
        match next(10) {
            0..=3 => model_token(&rig),
            4 if drive.is_none() => drive = Some(start(&lives[life])),
            5 => {
                if drive.is_some() {
                    tally.crashes_with_pending += u32::from(lives[life].interrupt.get().is_some());
                }
                if !commands.is_empty() {
                    tally.crashes_with_commands += 1;
                }
                // A restart saves its cut journal before its index write, so
                // one dropped there may have left the instance runnable; the
                // other commands save nothing before theirs, and the fake
                // host's alarm calls (the awaits after a save) never yield,
                // so no crash lands between a save and its answer here.
                if commands
                    .iter()
                    .any(|(cmd, _)| matches!(cmd, Command::Restart { .. }))
                {
                    runs.unanswered.set(true);
                }
                commands.clear();
                drive = None;
                life += 1;
            }
            _ => {
                tally.overlapped += u32::from(!commands.is_empty());
                commands.push(model_command(&lives[life], &host, next(8)));
            }
        }
        for answer in poll_commands(&mut commands) {
            model_answered(runs, answer, tally);
            if answer.drive && drive.is_none() {
                drive = Some(start(&lives[life]));
            }
        }
        if drive.as_mut().is_some_and(|d| poll_once(d).is_some()) {
            drive = None;
        }
    }
    // Settle: every step and D1 call may finish; the commands are answered,
    // the alarm's drives run the rest.
    runs.tokens.set(u32::MAX);
    rig.index.run_tokens.set(None);
    rig.index.batch_tokens.set(None);
    for (_, command) in commands {
        if let Ok(answer) = block_on(command) {
            model_answered(runs, answer, tally);
            if answer.drive && drive.is_none() {
                drive = Some(start(&lives[life]));
            }
        }
    }
    if let Some(d) = drive.take() {
        block_on(d);
    }
    settle_by_alarms(schedule, &rig, &host);
    assert_model_end(schedule, &rig, &host, tally);
}

/// One of the four commands (`which` of 8), sent to the object's `life`.
/// A terminate is final, so it is the rarest: schedules end every way.
fn model_command<'a>(life: &'a Driver, host: &'a FakeHost<'_>, which: u64) -> Sent<'a> {
    let cmd = match which {
        0 => Command::Terminate,
        1..=3 => Command::Pause,
        4..=5 => Command::Resume,
        _ => Command::Restart { from_step: None },
    };
    let sent = cmd.clone();
    (
        cmd,
        Box::pin(async move { driver::command(life, host, &sent).await }),
    )
}

/// Polls each command in flight once: the answers of those that finished,
/// in the order they finished (refusals answer nothing the model tracks).
fn poll_commands(commands: &mut Vec<Sent<'_>>) -> Vec<CommandAnswer> {
    let mut answers = Vec::new();
    let mut i = 0;
    while i < commands.len() {
        match poll_once(&mut commands[i].1) {
            Some(done) => {
                // Finished: its future is spent.
                drop(commands.remove(i));
                answers.extend(done.ok());
            }
            None => i += 1,
        }
    }
    answers
}

/// A step's body may finish one more step, a row's write may land, and
/// so may one D1 batch (a mirror, a command's index write).
fn model_token(rig: &Rig) {
    rig.runs.tokens.set(rig.runs.tokens.get() + 1);
    for tokens in [&rig.index.run_tokens, &rig.index.batch_tokens] {
        tokens.set(Some(tokens.get().unwrap_or(0) + 1));
    }
}

/// Drives the instance by its alarm alone, as after the isolate's death,
/// until it settles; a runnable instance or a kept interrupt with no alarm
/// fails the schedule.
fn settle_by_alarms(schedule: u64, rig: &Rig, host: &FakeHost<'_>) {
    let settled = Driver::default();
    for _ in 0..MODEL_SETTLE_DRIVES_MAX {
        use sluice::store::journal::JournalStore;
        let kept = rig.world.journal.kept_interrupt().unwrap();
        if !host.status().is_runnable() && kept.is_none() {
            break;
        }
        // Only the alarm drives it now, as after the isolate's death.
        let Some(AlarmOp::Set(at)) = host.last_alarm() else {
            panic!(
                "schedule {schedule}: {:?} with {kept:?} kept and no alarm",
                host.status()
            )
        };
        rig.world.clock.set(at.max(host.now_ms()));
        block_on(model_drive(&settled, host));
    }
}

/// The instance ended as the operator was last answered (or complete), no
/// body broke a rule, and its index row reads as it ended.
fn assert_model_end(schedule: u64, rig: &Rig, host: &FakeHost<'_>, tally: &mut ModelTally) {
    let runs = &rig.runs;
    let status = host.status();
    assert!(
        !status.is_runnable(),
        "schedule {schedule}: still {status:?}"
    );
    let violations = runs.violations.borrow();
    assert!(violations.is_empty(), "schedule {schedule}: {violations:?}");
    *tally.ends.entry(status.as_str().to_owned()).or_default() += 1;
    let id = host.engine().record().unwrap().unwrap().id;
    let row = block_on(sluice::store::executions::get(&rig.index.db.db, &id)).unwrap();
    assert_eq!(
        row.map(|r| r.status),
        Some(status.as_str().to_owned()),
        "schedule {schedule}: the index row reads as the instance ended"
    );
    // What the operator was last answered is what the instance ends as,
    // unless the run finished first.
    let answered = match (runs.forbidden.get(), runs.terminate_answered.get()) {
        (false, _) => Status::Complete,
        (true, false) => Status::Paused,
        (true, true) => Status::Terminated,
    };
    tally.ended_unanswered += u32::from(runs.unanswered.get());
    assert!(
        status == answered || status == Status::Complete || runs.unanswered.get(),
        "schedule {schedule}: answered {answered:?}, ended {status:?}"
    );
}

fn model_drive<'a>(
    d: &'a Driver,
    host: &'a FakeHost<'_>,
) -> Pin<Box<dyn Future<Output = ()> + 'a>> {
    Box::pin(async move {
        driver::drive(d, host, true).await;
    })
}

/// The operator was answered: what the answer says the instance is or will
/// be is what stands. A pause or terminate (applied or pending) forbids new
/// bodies; a resume or restart allows them again, unless it says a pause or
/// terminate that arrived meanwhile stands.
fn model_answered(runs: &Runs, answer: CommandAnswer, tally: &mut ModelTally) {
    if answer.pending {
        tally.pending += 1;
        // Applied, yet pending: an interrupt arrived while it was applied.
        tally.applied_under_interrupt += u32::from(answer.drive);
    } else {
        tally.applied += 1;
    }
    runs.unanswered.set(false);
    let stops = matches!(answer.status, Status::Paused | Status::Terminated);
    runs.forbidden.set(stops);
    runs.terminate_answered
        .set(answer.status == Status::Terminated);
}

/// Two operators: a resume is applied (its index write is slow) and a
/// pause arrives meanwhile, answered "pending". The resume's answer names
/// the pause that stands, not "running": the drive its end asks for
/// carries the pause out, and the instance ends as the last answer said.
#[test]
fn a_resume_answered_after_a_pause_arrived_meanwhile_names_the_pause() {
    let rig = Rig::new("two-steps");
    let host = rig.host();
    let d = Driver::default();
    let paused = block_on(driver::command(&d, &host, &Command::Pause)).unwrap();
    assert_eq!((paused.status, paused.pending), (Status::Paused, false));
    let held = std::rc::Rc::new(Gate::default());
    rig.index
        .script
        .borrow_mut()
        .push_back(Batch::Held(held.clone()));
    let mut resume: InFlight<'_> = Box::pin(driver::command(&d, &host, &Command::Resume));
    assert!(poll_once(&mut resume).is_none(), "in its index write");
    let pause = block_on(driver::command(&d, &host, &Command::Pause)).unwrap();
    assert_eq!((pause.status, pause.pending), (Status::Paused, true));
    held.open();
    let resumed = block_on(resume).unwrap();
    assert_eq!(
        resumed,
        CommandAnswer {
            status: Status::Paused,
            pending: true,
            drive: true
        }
    );
    block_on(driver::drive(&d, &host, true));
    assert_eq!(host.status(), Status::Paused);
    assert_eq!(rig.runs.bodies.get(), 0, "no body started");
}

#[test]
fn a_terminate_answered_while_a_kept_pause_is_carried_out_is_not_forgotten() {
    let rig = Rig::new("two-steps");
    answered_pending_then_the_pass_dies(&rig, Command::Pause);
    rig.runs.step_gate.open();
    let host = rig.host();
    let fresh = Driver::default();
    let held = std::rc::Rc::new(Gate::default());
    rig.index
        .script
        .borrow_mut()
        .push_back(Batch::Held(held.clone()));
    let mut resume: Pin<Box<dyn Future<Output = _>>> =
        Box::pin(driver::command(&fresh, &host, &Command::Resume));
    assert!(
        poll_once(&mut resume).is_none(),
        "the kept pause is being carried out"
    );
    let terminate = block_on(driver::command(&fresh, &host, &Command::Terminate)).unwrap();
    assert_eq!(
        (terminate.status, terminate.pending),
        (Status::Terminated, true)
    );
    held.open();
    // Answered before the resume, the terminate is carried out before it.
    let resumed = block_on(resume);
    assert!(
        matches!(resumed, Err(CommandError::Conflict(_))),
        "{resumed:?}"
    );
    block_on(driver::drive(&fresh, &host, true));
    assert_eq!(host.status(), Status::Terminated);
    assert_eq!((rig.runs.bodies.get(), rig.runs.second_step.get()), (1, 0));
}

#[test]
fn a_refused_command_leaves_an_alarm_for_what_arrived_while_it_was_applied() {
    let rig = Rig::new("two-steps");
    answered_pending_then_the_pass_dies(&rig, Command::Pause);
    let host = rig.host();
    let fresh = Driver::default();
    // The kept pause is carried out; the resume's own index write fails.
    let held = std::rc::Rc::new(Gate::default());
    rig.index
        .script
        .borrow_mut()
        .extend([Batch::Held(held.clone()), Batch::Fails]);
    let mut resume: Pin<Box<dyn Future<Output = _>>> =
        Box::pin(driver::command(&fresh, &host, &Command::Resume));
    assert!(poll_once(&mut resume).is_none());
    // An event's trigger lands meanwhile: the executor is taken.
    assert_eq!(fresh.trigger(true), Kick::Queued);
    held.open();
    let now = host.now_ms();
    assert!(block_on(resume).is_err(), "the resume was refused");
    assert_eq!(
        host.last_alarm(),
        Some(AlarmOp::Set(now)),
        "the trigger's drive comes by alarm"
    );
}

#[test]
fn a_pause_raised_while_the_tail_carries_out_a_terminate_does_not_replace_it() {
    let rig = Rig::new("wait-event");
    rig.runs.step_gate.open();
    let host = rig.host();
    {
        let d = Driver::default();
        // The pass waits for its event; the terminate lands during its
        // mirror (after its last durable call), so the tail carries it out,
        // and its index write is held, then fails.
        rig.index.hold_next_batch.set(true);
        let held = std::rc::Rc::new(Gate::default());
        rig.index
            .script
            .borrow_mut()
            .push_back(Batch::Held(held.clone()));
        let mut drive = in_flight(&d, &host, "in the mirror");
        assert!(
            block_on(driver::command(&d, &host, &Command::Terminate))
                .unwrap()
                .pending
        );
        rig.index.gate.open();
        rig.index.script.borrow_mut().push_back(Batch::Fails);
        assert!(
            poll_once(&mut drive).is_none(),
            "the tail's terminate is held"
        );
        let paused = block_on(driver::command(&d, &host, &Command::Pause)).unwrap();
        assert_eq!(paused.status, Status::Terminated, "the terminate stands");
        // Hold the terminate's write until after the pause was answered.
        held.open();
        block_on(drive);
        assert_eq!(
            host.status(),
            Status::Waiting,
            "the terminate was not carried out"
        );
        // The isolate dies now.
    }
    block_on(driver::drive(&Driver::default(), &host, true));
    assert_eq!(host.status(), Status::Terminated);
}

#[test]
fn a_pause_raised_during_a_retry_backoff_is_met_before_the_next_attempt() {
    let rig = Rig::new("flaky");
    let host = rig.host();
    let d = Driver::default();
    let drive = in_flight(&d, &host, "attempt 1 failed; its backoff runs");
    assert_eq!(rig.runs.bodies.get(), 1);
    assert!(
        block_on(driver::command(&d, &host, &Command::Pause))
            .unwrap()
            .pending
    );
    rig.world.clock.set(T0 + 1_000);
    block_on(drive);
    assert_eq!(host.status(), Status::Paused);
    assert_eq!(rig.runs.bodies.get(), 1, "attempt 2 did not start");
    let resumed = block_on(driver::command(&d, &host, &Command::Resume)).unwrap();
    assert!(resumed.drive);
    block_on(driver::drive(&d, &host, true));
    assert_eq!(host.status(), Status::Complete);
    assert_eq!(rig.runs.bodies.get(), 2, "the next pass ran attempt 2");
}

#[test]
fn a_drive_that_finds_its_instance_purged_leaves_no_alarm() {
    use sluice::store::journal::JournalStore;
    let rig = Rig::new("two-steps");
    rig.world.journal.clear().unwrap();
    let host = rig.host();
    block_on(driver::drive(&Driver::default(), &host, true));
    assert_eq!(host.passes.get(), 1);
    assert_eq!(
        host.last_alarm(),
        Some(AlarmOp::Delete),
        "no 5 s alarm loop"
    );
}

#[test]
fn a_kept_interrupt_always_has_an_alarm_when_the_drive_carrying_it_out_dies() {
    let rig = Rig::new("two-steps");
    let host = rig.host();
    {
        let d = Driver::default();
        let mut drive = in_flight(&d, &host, "step one is in flight");
        assert!(
            block_on(driver::command(&d, &host, &Command::Pause))
                .unwrap()
                .pending
        );
        // The pass meets the pause at step two and settles paused; its
        // mirror is slow, and a terminate is answered meanwhile.
        rig.index.hold_next_batch.set(true);
        rig.runs.step_gate.open();
        assert!(poll_once(&mut drive).is_none(), "in the mirror");
        let terminate = block_on(driver::command(&d, &host, &Command::Terminate)).unwrap();
        assert_eq!(terminate.status, Status::Terminated);
        // The tail carries the terminate out; its index write is slow, and
        // the isolate dies there.
        let held = std::rc::Rc::new(Gate::default());
        rig.index.script.borrow_mut().push_back(Batch::Held(held));
        rig.index.gate.open();
        assert!(
            poll_once(&mut drive).is_none(),
            "the tail's terminate is in flight"
        );
        assert_eq!(host.status(), Status::Paused);
    }
    let Some(AlarmOp::Set(at)) = host.last_alarm() else {
        panic!("no alarm for the kept terminate: {:?}", host.last_alarm())
    };
    rig.world.clock.set(at);
    let fresh = Driver::default();
    assert_eq!(fresh.on_alarm(host.now_ms()), OnAlarm::Drive);
    block_on(driver::drive(&fresh, &host, true));
    assert_eq!(host.status(), Status::Terminated);
    assert_eq!(rig.runs.second_step.get(), 0);
    assert_eq!(
        host.last_alarm(),
        Some(AlarmOp::Delete),
        "nothing left to wake"
    );
}

#[test]
fn a_command_that_was_itself_pending_is_answered_done_not_conflict() {
    let rig = Rig::new("two-steps");
    answered_pending_then_the_pass_dies(&rig, Command::Pause);
    let host = rig.host();
    let again = block_on(driver::command(&Driver::default(), &host, &Command::Pause));
    assert_eq!(again.map(|a| a.status), Ok(Status::Paused));
    assert_eq!(host.status(), Status::Paused);
}

#[test]
fn a_kept_terminate_is_never_rewritten_as_a_pause() {
    use sluice::store::journal::JournalStore;
    let rig = Rig::new("two-steps");
    let journal = &rig.world.journal;
    journal.keep_interrupt(Some(Interrupt::Terminate)).unwrap();
    journal.keep_interrupt(Some(Interrupt::Pause)).unwrap();
    assert_eq!(
        journal.kept_interrupt().unwrap(),
        Some(Interrupt::Terminate)
    );
    journal.keep_interrupt(None).unwrap();
    journal.keep_interrupt(Some(Interrupt::Pause)).unwrap();
    assert_eq!(journal.kept_interrupt().unwrap(), Some(Interrupt::Pause));
}

#[test]
fn a_restart_whose_index_write_dies_is_driven_by_its_alarm() {
    let rig = Rig::new("two-steps");
    rig.runs.step_gate.open();
    let host = rig.host();
    block_on(driver::drive(&Driver::default(), &host, true));
    assert_eq!(host.status(), Status::Complete);
    assert_eq!(host.last_alarm(), Some(AlarmOp::Delete));
    {
        let d = Driver::default();
        let held = std::rc::Rc::new(Gate::default());
        rig.index.script.borrow_mut().push_back(Batch::Held(held));
        let restart = Command::Restart { from_step: None };
        let mut applying: Pin<Box<dyn Future<Output = _>>> =
            Box::pin(driver::command(&d, &host, &restart));
        assert!(poll_once(&mut applying).is_none(), "in its index write");
        // The isolate dies here: the cut journal is kept, runnable.
    }
    let Some(AlarmOp::Set(at)) = host.last_alarm() else {
        panic!(
            "a restarted instance with no alarm: {:?}",
            host.last_alarm()
        )
    };
    rig.world.clock.set(at);
    let fresh = Driver::default();
    assert_eq!(fresh.on_alarm(host.now_ms()), OnAlarm::Drive);
    block_on(driver::drive(&fresh, &host, true));
    assert_eq!(host.status(), Status::Complete);
    assert_eq!(rig.runs.bodies.get(), 2, "the restart ran step one again");
}

#[test]
fn a_refused_restart_never_puts_a_sooner_wake_up_off() {
    let rig = Rig::new("wait-event");
    rig.runs.step_gate.open();
    let host = rig.host();
    let d = Driver::default();
    block_on(driver::drive(&d, &host, true));
    assert_eq!(host.status(), Status::Waiting);
    // The wait's deadline is an hour off: a restart's watchdog comes first.
    let restart = Command::Restart {
        from_step: Some("no such step".into()),
    };
    assert!(block_on(driver::command(&d, &host, &restart)).is_err());
    let watchdog = T0 + PASS_WATCHDOG_MS;
    assert_eq!(host.last_alarm(), Some(AlarmOp::Set(watchdog)));
    // A second refusal, later: the alarm does not move out.
    rig.world.clock.set(T0 + 10_000);
    assert!(block_on(driver::command(&d, &host, &restart)).is_err());
    assert_eq!(
        host.last_alarm(),
        Some(AlarmOp::Set(watchdog)),
        "not put off"
    );
}
