//! The engine's contract, natively: real SQLite for the journal and for
//! D1's tables (same migrations), a clock driven by the test.

mod common;

use std::future::pending;

use async_trait::async_trait;
use common::{block_on, Effects, World, T0};
use futures::FutureExt;
use serde_json::{json, Value};
use sluice::engine::driver;
use sluice::engine::{
    Backoff, Clock, Command, CommandError, CreateRequest, Created, Ctx, Interrupt, InterruptFlag,
    RunError, RunOutcome, RunRegistry, Status, StepConfig, StepFailure, TOMBSTONE_KEPT_MS,
};
use sluice::limits::{EXECUTOR_CRASHES_MAX, PASS_DURATION_MS_MAX, STEP_RESULT_BYTES_MAX};
use sluice::store::executions;
use sluice::store::journal::JournalStore;
use sluice::store::sql::SyncSql;

/// The runs these tests drive; every side effect is counted in `effects`.
#[derive(Default)]
struct Runs {
    effects: Effects,
    /// For runs whose step bodies take virtual time.
    clock: Option<common::ManualClock>,
    /// What each async step body of `inline-mix` saw of the inline steps
    /// before it, as it started: what could have left the instance.
    observed: std::cell::RefCell<Vec<Vec<(String, u32)>>>,
    /// An operator's command arriving while the named async step of
    /// `inline-mix` runs: raised on the pass's flag from inside its body,
    /// once, so the pass honours it at its next durable call.
    interrupt_on: std::cell::RefCell<Option<(String, InterruptFlag, Interrupt)>>,
    /// The index `sees-its-row` looks its instance up in.
    index: Option<std::rc::Rc<common::CountingDb>>,
}

fn cfg_fast(limit: u32) -> StepConfig {
    StepConfig::default().retries(limit, 100, Backoff::Constant)
}

#[async_trait(?Send)]
impl RunRegistry for Runs {
    async fn execute(
        &self,
        run: &str,
        ctx: &Ctx<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError> {
        self.step_runs(run, ctx, input).await
    }
}

impl Runs {
    /// Each body records whether D1 had its instance's row as it started
    /// (a gate's claim reads it).
    async fn sees_its_row(&self, ctx: &Ctx<'_>) -> Result<RunOutcome, RunError> {
        for name in ["first", "second"] {
            ctx.step(name, StepConfig::default(), |_| async {
                let index = &self.index.as_ref().expect("the test's index").db;
                let row = executions::get(index, ctx.instance_id()).await;
                let seen = row.map_err(|e| StepFailure::fatal("Query", e.to_string()))?;
                Ok(self
                    .effects
                    .hit(if seen.is_some() { "row seen" } else { "no row" }))
            })
            .await?;
        }
        Ok(RunOutcome::Complete(json!(null)))
    }

    /// Runs made of steps: replay, retries, failures, timeouts, many and big results.
    /// Any other run goes on to `wait_runs`.
    async fn step_runs(
        &self,
        run: &str,
        ctx: &Ctx<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError> {
        let fx = &self.effects;
        match run {
            "replay" => {
                let a: u32 = ctx
                    .step("a", StepConfig::default(), |_| async { Ok(fx.hit("a")) })
                    .await?;
                ctx.sleep("nap", 1_000).await?;
                let b: u32 = ctx
                    .step("b", StepConfig::default(), |_| async {
                        Ok(fx.hit("b") * 10)
                    })
                    .await?;
                Ok(RunOutcome::Complete(json!(a + b)))
            }
            "flaky" => {
                let n: u32 = ctx
                    .step("flaky", cfg_fast(3), |attempt| async move {
                        fx.hit("flaky");
                        if attempt < 3 {
                            Err(StepFailure::retryable("Blip", format!("attempt {attempt}")))
                        } else {
                            Ok(attempt)
                        }
                    })
                    .await?;
                Ok(RunOutcome::Complete(json!(n)))
            }
            "always-fails" => {
                ctx.step("doomed", cfg_fast(2), |_| async {
                    fx.hit("doomed");
                    Err::<(), _>(StepFailure::retryable("Blip", "no"))
                })
                .await?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "fatal" => {
                ctx.step("fatal", cfg_fast(5), |_| async {
                    fx.hit("fatal");
                    Err::<(), _>(StepFailure::fatal("BadConfig", "refused"))
                })
                .await?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "hangs" => {
                ctx.step("hang", cfg_fast(1).timeout_ms(50), |_| async {
                    fx.hit("hang");
                    pending::<Result<(), StepFailure>>().await
                })
                .await?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "long-backoff" => {
                let cfg = StepConfig::default().retries(1, 60_000, Backoff::Constant);
                let n: u32 = ctx
                    .step("slow-retry", cfg, |attempt| async move {
                        fx.hit("slow-retry");
                        if attempt == 1 {
                            Err(StepFailure::retryable("Blip", "first"))
                        } else {
                            Ok(attempt)
                        }
                    })
                    .await?;
                Ok(RunOutcome::Complete(json!(n)))
            }
            "many-steps" => {
                let n = input.as_u64().unwrap_or(0);
                for i in 0..n {
                    ctx.step("s", StepConfig::default(), |_| async move { Ok(i) })
                        .await?;
                }
                Ok(RunOutcome::Complete(json!(n)))
            }
            "big-to-blob" => {
                let key = ctx
                    .step_to_blob("big", StepConfig::default(), |_| async {
                        Ok("x".repeat(2 * 1024 * 1024))
                    })
                    .await?;
                let text = ctx.read_blob(&key).await?.unwrap_or_default();
                Ok(RunOutcome::Complete(
                    json!({ "key": key, "len": text.len() }),
                ))
            }
            "big-result" => {
                ctx.step("big", StepConfig::default(), |_| async {
                    Ok("x".repeat(2 * 1024 * 1024))
                })
                .await?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            other => self.wait_runs(other, ctx, input).await,
        }
    }

    /// Runs that wait: for events, sleeps, an alarm, past the ceiling, or skip.
    /// Any other run goes on to `changed_runs`.
    async fn wait_runs(
        &self,
        run: &str,
        ctx: &Ctx<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError> {
        let fx = &self.effects;
        match run {
            "event" => {
                let v = ctx.wait_for_event("approval", "approve", 10_000).await?;
                fx.hit("after-event");
                Ok(RunOutcome::Complete(v))
            }
            "two-events" => {
                let a = ctx.wait_for_event("first", "tick", 10_000).await?;
                let b = ctx.wait_for_event("second", "tick", 10_000).await?;
                Ok(RunOutcome::Complete(json!([a, b])))
            }
            "event-timeout-caught" => {
                match ctx.wait_for_event("approval", "approve", 1_000).await {
                    Err(RunError::EventTimedOut { .. }) => {
                        Ok(RunOutcome::Complete(json!("timed out")))
                    }
                    other => Ok(RunOutcome::Complete(other?)),
                }
            }
            "ceiling" => {
                ctx.step("quick", StepConfig::default(), |_| async { Ok(1) })
                    .await?;
                ctx.sleep("too-long", 60_000).await?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "until" => {
                let at = input.as_i64().unwrap_or(0);
                ctx.sleep_until("alarm clock", at).await?;
                Ok(RunOutcome::Complete(json!(ctx.now_ms())))
            }
            "cleanup-past-ceiling" => {
                let slept = ctx.sleep("too-long", 60_000).await;
                ctx.cleanup_step("release", StepConfig::default(), |_| async {
                    fx.hit("release");
                    Ok(())
                })
                .await?;
                slept?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "sees-its-row" => self.sees_its_row(ctx).await,
            "skips" => Ok(RunOutcome::Skipped {
                reason: Some("not-configured".into()),
                tag: None,
            }),
            "inline-mix" => {
                let shape = input.as_str().unwrap_or_default().chars().collect();
                self.inline_mix(ctx, shape).await
            }
            "inline-big" => {
                // Three 300 KB results, then a computation that fails.
                for name in ["big", "big", "big"] {
                    ctx.step_inline(name, || Ok("x".repeat(300_000)))?;
                }
                ctx.step_inline("refuse", || -> Result<u32, StepFailure> {
                    fx.hit("refuse");
                    Err(StepFailure::retryable("Nope", "no"))
                })?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "inline-then-cleanup" => {
                // As a run reports: whatever ended its steps, a cleanup step
                // sends what it computed.
                let v = ctx.step_inline("calc", || Ok(7u32))?;
                let sent = ctx
                    .step("send", StepConfig::default(), |_| async {
                        fx.hit("send");
                        Ok(())
                    })
                    .await;
                ctx.cleanup_step("conclude", StepConfig::default(), |_| async {
                    fx.hit(&format!("conclude {v}"));
                    Ok(())
                })
                .await?;
                sent?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "inline-swallow" => {
                // A best-effort step whose error the run ignores, then more
                // durable calls, each refused once a journal write failed.
                ctx.step_inline("calc", || Ok(7u32))?;
                let _ = ctx
                    .step("send", StepConfig::default(), |_| async {
                        fx.hit("send");
                        Ok(())
                    })
                    .await;
                if let Err(RunError::Store { .. }) = ctx.step_inline("after", || Ok(1u32)) {
                    fx.hit("after refused");
                }
                if let Err(RunError::Store { .. }) = ctx.sleep("nap", 10).await {
                    fx.hit("nap refused");
                }
                Ok(RunOutcome::Complete(Value::Null))
            }
            "loud-failure" => {
                // A failure whose message is megabytes (a whole log in it).
                ctx.step("loud", StepConfig::default(), |_| async {
                    Err::<(), _>(StepFailure {
                        tag: "Loud".into(),
                        message: "é".repeat(1_500_000),
                        retryable: false,
                    })
                })
                .await?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "inline-many" => {
                // Many small inline results under long names: what one
                // write holds is bounded by rows, not only by values.
                let name = "n".repeat(INLINE_MANY_NAME_CHARS);
                for i in 0..input.as_u64().unwrap_or(0) {
                    ctx.step_inline(&name, || Ok(format!("\"{i}\"")))?;
                }
                Ok(RunOutcome::Complete(Value::Null))
            }
            "loop-sleep" => {
                for i in 0..3 {
                    ctx.step("tick", StepConfig::default(), |_| async move { Ok(i) })
                        .await?;
                    ctx.sleep("pause", 100).await?;
                }
                Ok(RunOutcome::Complete(Value::Null))
            }
            other => self.changed_runs(other, ctx).await,
        }
    }

    /// Inline steps (each returns how often its body ran: a re-run shows)
    /// among async steps that record what they saw (`observed`), steps
    /// that hang on their first attempt (the test drops the pass: a crash),
    /// and sleeps, in the order of `shape`.
    async fn inline_mix(&self, ctx: &Ctx<'_>, shape: Vec<char>) -> Result<RunOutcome, RunError> {
        let fx = &self.effects;
        let mut seen: Vec<(String, u32)> = Vec::new();
        for (k, op) in shape.into_iter().enumerate() {
            let name = format!("{op}{k}");
            match op {
                'i' => {
                    let v = ctx.step_inline(&name, || Ok(fx.hit(&name)))?;
                    seen.push((name, v));
                }
                'a' | 'h' => {
                    let seen = &seen;
                    ctx.step(&name, StepConfig::default(), |_| async {
                        self.observed.borrow_mut().push(seen.clone());
                        let raise = self
                            .interrupt_on
                            .borrow()
                            .as_ref()
                            .map(|(at, ..)| at == &name);
                        if raise == Some(true) {
                            if let Some((_, flag, what)) = self.interrupt_on.take() {
                                flag.set(Some(what));
                            }
                        }
                        if op == 'h' && fx.hit(&name) == 1 {
                            pending::<()>().await;
                        }
                        Ok(())
                    })
                    .await?;
                }
                _ => ctx.sleep(&name, 10).await?,
            }
        }
        Ok(RunOutcome::Complete(Value::Null))
    }

    /// Runs whose code or process changes under them: a renamed step, a crash, an
    /// over-long name, steps that take virtual time.
    async fn changed_runs(&self, run: &str, ctx: &Ctx<'_>) -> Result<RunOutcome, RunError> {
        let fx = &self.effects;
        match run {
            "renamed" => {
                // The step's name depends on the input's "v", as if the run's
                // code changed under a live instance.
                let v = fx.hit("renamed-pass");
                let name = if v == 1 { "old-name" } else { "new-name" };
                ctx.step(name, StepConfig::default(), |_| async { Ok(1) })
                    .await?;
                ctx.sleep("nap", 10).await?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "crashy" => {
                ctx.step("before", StepConfig::default(), |_| async {
                    Ok(fx.hit("before"))
                })
                .await?;
                ctx.step("work", StepConfig::default(), |_| async {
                    // The first two attempts hang until the pass is dropped.
                    if fx.hit("work") <= 2 {
                        pending::<()>().await;
                    }
                    Ok(())
                })
                .await?;
                Ok(RunOutcome::Complete(json!(fx.count("work"))))
            }
            "long-name" => {
                let name = "n".repeat(257);
                ctx.step(&name, StepConfig::default(), |_| async { Ok(1) })
                    .await?;
                Ok(RunOutcome::Complete(Value::Null))
            }
            "long-steps" => {
                // Two steps that each take 6 minutes, each bounded by 10.
                let cfg = StepConfig::default().timeout_ms(10 * 60_000);
                for name in ["first", "second"] {
                    ctx.step(name, cfg, |_| async {
                        fx.hit(name);
                        if let Some(c) = &self.clock {
                            c.sleep(6 * 60_000).await;
                        }
                        Ok(())
                    })
                    .await?;
                }
                Ok(RunOutcome::Complete(Value::Null))
            }
            other => Err(RunError::UnknownRun { run: other.into() }),
        }
    }
}

fn req(run: &str, input: Value) -> CreateRequest {
    CreateRequest {
        indexed: false,
        key: format!("test:{run}"),
        run: run.into(),
        input,
        repo: Some("octo/hello".into()),
        entity: None,
        sha: None,
        max_steps: None,
        max_duration_ms: None,
    }
}

/// Creates and runs passes until the instance stops waiting on time,
/// advancing the clock to each wake-up. Bounded by `passes_max`.
fn run_to_end(w: &World, runs: &Runs, passes_max: u32) -> Status {
    for _ in 0..passes_max {
        let r = block_on(w.engine().pass(runs, &w.interrupt)).expect("pass");
        match (r.status, r.wake_at_ms) {
            (Status::Waiting, Some(wake)) => w.clock.set(wake.max(w.clock.0.get())),
            (s, _) => return s,
        }
    }
    panic!("instance did not finish in {passes_max} passes");
}

fn row(w: &World, id: &str) -> executions::ExecutionRow {
    block_on(executions::get(w.index.as_ref(), id))
        .expect("query")
        .expect("row exists")
}

#[test]
fn create_is_idempotent_by_key() {
    let w = World::new();
    let r = req("replay", json!(null));
    let first = block_on(w.engine().create(&r)).unwrap();
    let second = block_on(w.engine().create(&r)).unwrap();
    assert!(first.created);
    assert!(!second.created);
    assert_eq!(first.id, second.id);
    assert!(
        first.row_pending && second.row_pending,
        "its first pass writes the row"
    );
    let rows = || block_on(executions::list(w.index.as_ref(), &Default::default(), 10)).unwrap();
    assert!(rows().is_empty(), "a create writes nothing to D1 itself");
    block_on(w.engine().pass(&Runs::default(), &w.interrupt)).unwrap();
    let third = block_on(w.engine().create(&r)).unwrap();
    assert!(!third.created && !third.row_pending);
    assert_eq!(rows().len(), 1);
}

/// A single create of `sees-its-row`, and runs that look into `w`'s index.
fn create_sees_its_row(w: &World) -> (Runs, Created) {
    let runs = Runs {
        index: Some(w.index.clone()),
        ..Runs::default()
    };
    let c = block_on(w.engine().create(&req("sees-its-row", json!(null)))).unwrap();
    (runs, c)
}

/// ADR-0018: a single create leaves its index row to its first pass,
/// which writes it before its first step body, or, when no body runs, in
/// the same batch as its mirror.
#[test]
fn a_single_create_writes_its_row_before_its_first_step_body_or_with_its_mirror() {
    let w = World::new();
    let (runs, c) = create_sees_its_row(&w);
    assert!(c.row_pending);
    assert!(block_on(executions::get(w.index.as_ref(), &c.id))
        .unwrap()
        .is_none());
    let before = w.index.calls.get();
    assert_eq!(run_to_end(&w, &runs, 1), Status::Complete);
    assert_eq!(
        ["row seen", "no row"].map(|e| runs.effects.count(e)),
        [2, 0],
        "every body found the row"
    );
    assert_eq!(w.index.calls.get() - before, 2, "the row, then the mirror");
    let r = row(&w, &c.id);
    assert_eq!((r.status.as_str(), r.index_round_trips), ("complete", 2));
    assert!(!w.engine().record().unwrap().unwrap().row_pending);

    let stepless = World::with_index(w.index.clone());
    let c = block_on(stepless.engine().create(&req("skips", json!(null)))).unwrap();
    let before = w.index.calls.get();
    let p = block_on(stepless.engine().pass(&runs, &stepless.interrupt)).unwrap();
    assert_eq!(p.status, Status::Skipped);
    assert_eq!(
        w.index.calls.get() - before,
        1,
        "the row rides the mirror's batch"
    );
    assert_eq!(row(&w, &c.id).status, "skipped");
}

/// D1 refusing the row stops the pass before any step body, and is an
/// index fault, not an executor crash: however often it happens, the
/// instance runs once D1 takes the row; and a crash before the refusals
/// still counts, so the pass after them knows its steps may have run.
#[test]
fn a_row_d1_refuses_runs_no_step_body_and_never_ends_the_instance_as_crashed() {
    let w = World::new();
    let (runs, c) = create_sees_its_row(&w);
    // A first pass that died (it started, never ended), its record as it
    // left it.
    let mut rec = w.engine().record().unwrap().unwrap();
    rec.passes += 1;
    w.journal.save_instance(&rec).unwrap();
    let refusals = EXECUTOR_CRASHES_MAX + 1;
    w.index.fail_next_runs.set(refusals);
    let mut waits = Vec::new();
    for n in 1..=refusals {
        let p = block_on(w.engine().pass(&runs, &w.interrupt));
        assert!(
            matches!(p, Err(RunError::RowRefused { refusals, .. }) if refusals == n),
            "{p:?}"
        );
        let now = w.clock.now_ms();
        let driver::Alarm::At(at) = driver::alarm_after(&p, now) else {
            panic!("a refused row keeps an alarm");
        };
        waits.push((at - now) / 1_000);
        let rec = w.engine().record().unwrap().unwrap();
        assert!(rec.row_pending && rec.status.is_runnable(), "{rec:?}");
        assert_eq!(
            rec.passes - rec.clean_passes,
            1,
            "the crash, not the refusals"
        );
    }
    assert_eq!(
        waits,
        [5, 10, 20, 40, 60, 60],
        "backing off to the sweep's cadence"
    );
    assert_eq!(
        ["row seen", "no row"].map(|e| runs.effects.count(e)),
        [0, 0]
    );
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!((p.status, (p.row_refusals > 0)), (Status::Complete, false));
    assert_eq!(w.engine().record().unwrap().unwrap().row_refusals, 0);
    assert_eq!(runs.effects.count("row seen"), 2);
    assert_eq!(row(&w, &c.id).status, "complete");
}

#[test]
fn replay_returns_journaled_values_and_never_reruns_a_completed_step() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("replay", json!(null)))).unwrap();
    let p1 = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p1.status, Status::Waiting);
    assert_eq!(p1.wake_at_ms, Some(T0 + 1_000));
    // Woken early (a stray alarm): still waiting, nothing re-run.
    let early = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(early.status, Status::Waiting);
    w.clock.advance(1_000);
    let p2 = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p2.status, Status::Complete);
    assert_eq!(
        runs.effects.count("a"),
        1,
        "step a ran once across three passes"
    );
    assert_eq!(runs.effects.count("b"), 1);
    assert_eq!(p2.stats.replayed, 1, "a was answered from the journal");
    let r = row(&w, &c.id);
    assert_eq!(r.status, "complete");
    assert_eq!(r.output_json.as_deref(), Some("11"));
    let steps = block_on(executions::steps(w.index.as_ref(), &c.id, 100)).unwrap();
    let names: Vec<_> = steps
        .iter()
        .map(|s| (s.name.as_str(), s.state.as_str()))
        .collect();
    assert_eq!(names, [("a", "done"), ("nap", "done"), ("b", "done")]);
}

#[test]
fn retries_pass_the_attempt_number_and_succeed() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("flaky", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 5), Status::Complete);
    assert_eq!(runs.effects.count("flaky"), 3);
    assert_eq!(row(&w, &c.id).output_json.as_deref(), Some("3"));
    // Two constant 100 ms backoffs were waited in-process.
    assert_eq!(w.clock.0.get(), T0 + 200);
}

#[test]
fn exhausted_retries_fail_with_the_last_error() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("always-fails", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 5), Status::Errored);
    assert_eq!(runs.effects.count("doomed"), 3, "1 attempt + 2 retries");
    let r = row(&w, &c.id);
    assert_eq!(r.error_tag.as_deref(), Some("RetriesExhausted"));
    assert!(r.error_message.unwrap().contains("Blip"));
    let steps = block_on(executions::steps(w.index.as_ref(), &c.id, 10)).unwrap();
    assert_eq!(steps[0].state, "failed");
    assert_eq!(steps[0].attempts, 3);
    assert_eq!(steps[0].error_tag.as_deref(), Some("RetriesExhausted"));
}

#[test]
fn non_retryable_fails_at_once() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("fatal", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 3), Status::Errored);
    assert_eq!(runs.effects.count("fatal"), 1);
    assert_eq!(row(&w, &c.id).error_tag.as_deref(), Some("NonRetryable"));
}

#[test]
fn a_step_that_hangs_times_out_per_attempt() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("hangs", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 3), Status::Errored);
    assert_eq!(
        runs.effects.count("hang"),
        2,
        "timed out, retried once, timed out"
    );
    assert_eq!(row(&w, &c.id).error_tag.as_deref(), Some("StepTimedOut"));
}

#[test]
fn a_long_backoff_suspends_the_instance() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("long-backoff", json!(null)))).unwrap();
    let p1 = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(
        (p1.status, p1.wake_at_ms),
        (Status::Waiting, Some(T0 + 60_000))
    );
    w.clock.advance(30_000);
    let early = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(early.status, Status::Waiting);
    assert_eq!(
        runs.effects.count("slow-retry"),
        1,
        "no attempt before the backoff ends"
    );
    w.clock.advance(30_000);
    let p2 = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p2.status, Status::Complete);
    assert_eq!(runs.effects.count("slow-retry"), 2);
}

#[test]
fn an_event_sent_before_the_wait_is_kept() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("event", json!(null)))).unwrap();
    w.engine()
        .send_event("approve", &json!({"by": "ana"}))
        .unwrap();
    assert_eq!(run_to_end(&w, &runs, 2), Status::Complete);
    assert_eq!(
        w.engine().record().unwrap().unwrap().output.as_deref(),
        Some(r#"{"by":"ana"}"#)
    );
}

#[test]
fn an_event_sent_during_the_wait_resumes_it() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("event", json!(null)))).unwrap();
    let p1 = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(
        (p1.status, p1.wake_at_ms),
        (Status::Waiting, Some(T0 + 10_000))
    );
    // Another event type does not satisfy the wait.
    assert!(w.engine().send_event("other", &json!(1)).unwrap());
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.status, Status::Waiting);
    w.clock.advance(100);
    assert!(w.engine().send_event("approve", &json!("yes")).unwrap());
    let p2 = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p2.status, Status::Complete);
    assert_eq!(runs.effects.count("after-event"), 1);
}

#[test]
fn events_are_consumed_in_order_one_per_wait() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("two-events", json!(null)))).unwrap();
    w.engine().send_event("tick", &json!(1)).unwrap();
    w.engine().send_event("tick", &json!(2)).unwrap();
    assert_eq!(run_to_end(&w, &runs, 2), Status::Complete);
    assert_eq!(
        w.engine().record().unwrap().unwrap().output.as_deref(),
        Some("[1,2]")
    );
}

#[test]
fn an_event_timeout_is_a_typed_error_the_run_can_catch() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("event-timeout-caught", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 3), Status::Complete);
    assert_eq!(
        w.engine().record().unwrap().unwrap().output.as_deref(),
        Some(r#""timed out""#)
    );
    let steps = w.journal_entries();
    assert_eq!(steps[0].error_tag.as_deref(), Some("EventTimedOut"));
}

#[test]
fn the_ceiling_fails_naming_the_wait_in_progress() {
    let w = World::new();
    let runs = Runs::default();
    let mut r = req("ceiling", json!(null));
    r.max_duration_ms = Some(5_000);
    let c = block_on(w.engine().create(&r)).unwrap();
    let p1 = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(
        p1.wake_at_ms,
        Some(T0 + 5_000),
        "woken at the ceiling, not after the sleep"
    );
    assert_eq!(run_to_end(&w, &runs, 3), Status::Errored);
    let row = row(&w, &c.id);
    assert_eq!(row.error_tag.as_deref(), Some("RunDurationExceeded"));
    assert!(row.error_message.unwrap().contains("sleep \"too-long\""));
}

#[test]
fn sleep_until_wakes_at_the_given_time_and_refuses_more_than_a_year() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("until", json!(T0 + 5_000)))).unwrap();
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.wake_at_ms, Some(T0 + 5_000));
    assert_eq!(run_to_end(&w, &runs, 3), Status::Complete);

    let w = World::new();
    let mut r = req("until", json!(T0 + 366 * 24 * 3600 * 1000));
    r.max_duration_ms = Some(400 * 24 * 3600 * 1000);
    let c = block_on(w.engine().create(&r)).unwrap();
    assert_eq!(run_to_end(&w, &runs, 2), Status::Errored);
    assert_eq!(row(&w, &c.id).error_tag.as_deref(), Some("InvalidStep"));
}

#[test]
fn step_names_longer_than_256_characters_are_refused() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("long-name", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 2), Status::Errored);
    assert_eq!(row(&w, &c.id).error_tag.as_deref(), Some("InvalidStep"));
}

#[test]
fn the_step_limit_is_enforced() {
    let w = World::new();
    let runs = Runs::default();
    let mut r = req("many-steps", json!(5));
    r.max_steps = Some(3);
    let c = block_on(w.engine().create(&r)).unwrap();
    assert_eq!(run_to_end(&w, &runs, 2), Status::Errored);
    assert_eq!(
        row(&w, &c.id).error_tag.as_deref(),
        Some("StepLimitExceeded")
    );
}

#[test]
fn repeated_step_names_are_keyed_by_occurrence() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("loop-sleep", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 10), Status::Complete);
    let names = w.journal_names();
    assert_eq!(
        names,
        ["tick", "pause", "tick#2", "pause#2", "tick#3", "pause#3"]
    );
}

#[test]
fn an_oversized_result_is_refused() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("big-result", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 2), Status::Errored);
    assert_eq!(
        row(&w, &c.id).error_tag.as_deref(),
        Some("StepResultTooLarge")
    );
}

#[test]
fn a_large_result_goes_to_object_storage_and_the_step_returns_its_key() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("big-to-blob", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 2), Status::Complete);
    let out: Value =
        serde_json::from_str(&w.engine().record().unwrap().unwrap().output.unwrap()).unwrap();
    assert_eq!(out["len"], 2 * 1024 * 1024);
    let key = out["key"].as_str().unwrap();
    assert!(w.blobs.0.borrow().contains_key(key));
    let journaled = &w.journal_entries()[0];
    assert!(
        journaled.value.as_ref().unwrap().len() < 200,
        "the journal holds the key, not the data"
    );
}

#[test]
fn a_changed_step_name_is_a_journal_mismatch() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("renamed", json!(null)))).unwrap();
    assert_eq!(
        block_on(w.engine().pass(&runs, &w.interrupt))
            .unwrap()
            .status,
        Status::Waiting
    );
    w.clock.advance(10);
    assert_eq!(
        block_on(w.engine().pass(&runs, &w.interrupt))
            .unwrap()
            .status,
        Status::Errored
    );
    let r = row(&w, &c.id);
    assert_eq!(r.error_tag.as_deref(), Some("JournalMismatch"));
    assert!(r.error_message.unwrap().contains("old-name"));
}

#[test]
fn a_crashed_pass_resumes_without_rerunning_completed_steps() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("crashy", json!(null)))).unwrap();
    w.clock.freeze_timers(true);
    for _ in 0..2 {
        // The pass hangs inside "work"; dropping it is the executor dying.
        assert!(w
            .engine()
            .pass(&runs, &w.interrupt)
            .now_or_never()
            .is_none());
    }
    w.clock.freeze_timers(false);
    assert_eq!(run_to_end(&w, &runs, 2), Status::Complete);
    assert_eq!(
        runs.effects.count("before"),
        1,
        "completed before the crashes, never again"
    );
    assert_eq!(
        runs.effects.count("work"),
        3,
        "the interrupted step is retried"
    );
}

#[test]
fn a_crash_loop_is_bounded() {
    let w = World::new();
    let runs = Runs::default();
    let mut r = req("crashy", json!(null));
    r.key = "test:crash-loop".into();
    let c = block_on(w.engine().create(&r)).unwrap();
    w.clock.freeze_timers(true);
    for _ in 0..sluice::limits::EXECUTOR_CRASHES_MAX {
        // Each pass hangs (frozen timers, "work" pending) and is dropped.
        runs.effects.0.borrow_mut().insert("work".into(), 0);
        assert!(w
            .engine()
            .pass(&runs, &w.interrupt)
            .now_or_never()
            .is_none());
    }
    w.clock.freeze_timers(false);
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.status, Status::Errored);
    assert_eq!(
        row(&w, &c.id).error_tag.as_deref(),
        Some("ExecutorCrashLoop")
    );
}

#[test]
fn skipped_runs_record_their_reason() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("skips", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 1), Status::Skipped);
    let r = row(&w, &c.id);
    assert_eq!(r.reason.as_deref(), Some("not-configured"));
    assert!(r.finished_ms.is_some());
}

#[test]
fn d1_sees_one_batch_per_pass_and_no_round_trip_per_step() {
    let w = World::new();
    let runs = Runs::default();
    let mut batch = [req("many-steps", json!(100))];
    block_on(sluice::engine::index_creates(
        w.index.as_ref(),
        &mut batch,
        T0,
    ))
    .unwrap();
    let c = block_on(w.engine().create(&batch[0])).unwrap();
    let before = w.index.calls.get();
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.status, Status::Complete);
    assert_eq!(
        w.index.calls.get() - before,
        1,
        "one D1 batch for 100 steps"
    );
    assert_eq!(p.stats.journal_writes, 100, "one journal write per step");
    let r = row(&w, &c.id);
    assert_eq!(
        (r.journal_writes, r.index_round_trips, r.passes),
        (100, 1, 1),
        "one mirror"
    );
    assert_eq!(r.step_count, 100, "counted without loading the journal");
}

#[test]
fn a_failed_mirror_is_caught_up_by_the_next_pass() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("replay", json!(null)))).unwrap();
    w.index.fail_next_batch.set(true);
    let p1 = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert!(p1.mirror_error.is_some());
    assert_eq!(
        row(&w, &c.id).status,
        "running",
        "D1 is stale after the failed batch: the row as its first step body found it"
    );
    w.clock.advance(1_000);
    block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    let steps = block_on(executions::steps(w.index.as_ref(), &c.id, 10)).unwrap();
    assert_eq!(
        steps.len(),
        3,
        "the first pass's steps reached D1 with the second"
    );
    assert_eq!(row(&w, &c.id).status, "complete");
}

/// A restart whose own index write fails still takes: the cut journal is
/// kept with the new generation (never under the old one, whose children
/// and processes the run already ended), and the next pass runs it and
/// brings the index up to date, the old generation's later steps gone.
#[test]
fn a_restart_whose_index_write_fails_still_takes_its_new_generation() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("replay", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 2), Status::Complete);
    let before = block_on(executions::steps(w.index.as_ref(), &c.id, 10)).unwrap();
    assert_eq!(before.len(), 3);
    w.index.fail_next_batch.set(true);
    let st = block_on(w.engine().command(
        &runs,
        &Command::Restart {
            from_step: Some("b".into()),
        },
    ))
    .unwrap();
    assert_eq!(st, Status::Queued);
    let rec = w.engine().record().unwrap().unwrap();
    assert_eq!((rec.generation, rec.status), (1, Status::Queued));
    assert_eq!(row(&w, &c.id).status, "complete", "D1 is stale for now");
    assert_eq!(run_to_end(&w, &runs, 3), Status::Complete);
    assert_eq!((runs.effects.count("a"), runs.effects.count("b")), (1, 2));
    let r = row(&w, &c.id);
    assert_eq!(r.status, "complete");
    let after = block_on(executions::steps(w.index.as_ref(), &c.id, 10)).unwrap();
    assert_eq!(after.len(), 3, "{after:?}");
}

#[test]
fn terminate_pause_resume_and_restart() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("replay", json!(null)))).unwrap();
    block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();

    assert_eq!(
        block_on(w.engine().command(&runs, &Command::Pause)).unwrap(),
        Status::Paused
    );
    w.clock.advance(5_000);
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.status, Status::Paused, "a paused instance does not run");
    assert_eq!(row(&w, &c.id).status, "paused");
    assert!(block_on(w.engine().command(&runs, &Command::Pause)).is_err());

    assert_eq!(
        block_on(w.engine().command(&runs, &Command::Resume)).unwrap(),
        Status::Waiting
    );
    assert_eq!(run_to_end(&w, &runs, 2), Status::Complete);
    assert_eq!(runs.effects.count("a"), 1);

    assert!(
        block_on(w.engine().command(&runs, &Command::Terminate)).is_err(),
        "finished stays finished"
    );

    // Restart from "b": "a" is kept, "b" runs again.
    let st = block_on(w.engine().command(
        &runs,
        &Command::Restart {
            from_step: Some("b".into()),
        },
    ))
    .unwrap();
    assert_eq!(st, Status::Queued);
    assert_eq!(run_to_end(&w, &runs, 3), Status::Complete);
    assert_eq!((runs.effects.count("a"), runs.effects.count("b")), (1, 2));

    // Restart from the top: everything runs again.
    block_on(
        w.engine()
            .command(&runs, &Command::Restart { from_step: None }),
    )
    .unwrap();
    assert_eq!(run_to_end(&w, &runs, 3), Status::Complete);
    assert_eq!((runs.effects.count("a"), runs.effects.count("b")), (2, 3));

    // Terminate a waiting instance.
    block_on(
        w.engine()
            .command(&runs, &Command::Restart { from_step: None }),
    )
    .unwrap();
    block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(
        block_on(w.engine().command(&runs, &Command::Terminate)).unwrap(),
        Status::Terminated
    );
    let r = row(&w, &c.id);
    assert_eq!(
        (r.status.as_str(), r.error_tag.as_deref()),
        ("terminated", Some("Terminated"))
    );
    assert!(w.engine().send_event("approve", &json!(1)).is_err());
}

#[test]
fn an_interrupt_stops_a_running_pass_at_its_next_durable_call() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("replay", json!(null)))).unwrap();
    w.interrupt.set(Some(Interrupt::Terminate));
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.status, Status::Terminated);
    assert_eq!(runs.effects.count("a"), 0);
}

#[test]
fn a_terminate_during_a_suspension_ends_the_instance() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("replay", json!(null)))).unwrap();
    block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    // Woken early: the pass replays "a" and finds the sleep still running;
    // no new durable call sees the interrupt, the settle must.
    w.interrupt.set(Some(Interrupt::Terminate));
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.status, Status::Terminated);
    assert_eq!(row(&w, &c.id).error_tag.as_deref(), Some("Terminated"));
}

#[test]
fn a_failed_final_mirror_is_retried_for_a_finished_instance() {
    let w = World::new();
    let runs = Runs::default();
    // Indexed by its caller: the row reads queued, so the sweep pokes it.
    let mut batch = [req("skips", json!(null))];
    block_on(sluice::engine::index_creates(
        w.index.as_ref(),
        &mut batch,
        T0,
    ))
    .unwrap();
    let c = block_on(w.engine().create(&batch[0])).unwrap();
    w.index.fail_next_batch.set(true);
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(
        (p.status, p.mirror_error.is_some(), (p.row_refusals > 0)),
        (Status::Skipped, true, false)
    );
    assert_eq!(row(&w, &c.id).status, "queued");
    let now = w.clock.now_ms();
    assert_eq!(driver::alarm_after(&Ok(p), now), driver::Alarm::Delete);
    // The sweep's poke runs a pass: nothing runs, the mirror goes out.
    let again = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert!(again.mirror_error.is_none());
    assert_eq!(row(&w, &c.id).status, "skipped");

    // A single create: no row at all, so the sweep cannot; its own alarm
    // retries, though it ended (ADR-0018).
    let single = World::with_index(w.index.clone());
    let mut alone = req("skips", json!(null));
    alone.key = "skips:alone".into();
    let c = block_on(single.engine().create(&alone)).unwrap();
    w.index.fail_next_batch.set(true);
    let p = block_on(single.engine().pass(&runs, &single.interrupt)).unwrap();
    assert!((p.row_refusals > 0) && p.mirror_error.is_some(), "{p:?}");
    assert_eq!(
        p.row_refusals, 1,
        "a failed batch that carried the row counts"
    );
    assert!(block_on(executions::get(w.index.as_ref(), &c.id))
        .unwrap()
        .is_none());
    assert_eq!(
        driver::alarm_after(&Ok(p), now),
        driver::Alarm::At(now + sluice::limits::SWEEP_INTERVAL_MS),
        "ended: at the sweep's cadence"
    );
    let again = block_on(single.engine().pass(&runs, &single.interrupt)).unwrap();
    assert!(!(again.row_refusals > 0) && again.mirror_error.is_none());
    assert_eq!(again.row_refusals, 0);
    assert_eq!(driver::alarm_after(&Ok(again), now), driver::Alarm::Delete);
    assert_eq!(row(&w, &c.id).status, "skipped");
}

#[test]
fn a_retry_pending_past_the_ceiling_fails_the_run() {
    let w = World::new();
    let runs = Runs::default();
    let mut r = req("long-backoff", json!(null));
    r.max_duration_ms = Some(30_000);
    let c = block_on(w.engine().create(&r)).unwrap();
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(
        p.wake_at_ms,
        Some(T0 + 30_000),
        "woken at the ceiling, before the 60 s backoff ends"
    );
    w.clock.advance(30_000);
    assert_eq!(
        block_on(w.engine().pass(&runs, &w.interrupt))
            .unwrap()
            .status,
        Status::Errored
    );
    assert_eq!(
        row(&w, &c.id).error_tag.as_deref(),
        Some("RunDurationExceeded")
    );
    assert_eq!(runs.effects.count("slow-retry"), 1);
}

trait JournalPeek {
    fn journal_entries(&self) -> Vec<sluice::journal::Entry>;
}

impl JournalPeek for World {
    fn journal_entries(&self) -> Vec<sluice::journal::Entry> {
        use sluice::store::journal::JournalStore;
        self.journal.entries().unwrap()
    }
}

/// Scenario 8 of the gates under adversity: a pass never starts a step
/// whose timeout would take it past the pass budget (one Durable Object
/// alarm invocation may run 15 minutes); the step starts in a fresh pass.
#[test]
fn a_long_step_that_would_outlive_the_pass_budget_starts_in_a_new_pass() {
    let w = World::new();
    let runs = Runs {
        clock: Some(w.clock.clone()),
        ..Runs::default()
    };
    block_on(w.engine().create(&req("long-steps", json!(null)))).unwrap();
    let first = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(
        (
            first.status,
            runs.effects.count("first"),
            runs.effects.count("second")
        ),
        (Status::Waiting, 1, 0),
        "6 minutes in, a 10-minute step would end past the {} ms budget",
        PASS_DURATION_MS_MAX
    );
    assert_eq!(
        first.wake_at_ms,
        Some(w.clock.now_ms()),
        "the next pass is due at once"
    );
    let second = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(second.status, Status::Complete);
    assert_eq!(
        (runs.effects.count("first"), runs.effects.count("second")),
        (1, 1),
        "nothing ran twice"
    );
}

/// Scenario 9: cleanup steps run after the run ceiling has passed, and the
/// recorded error names the wait that was in progress, not the cleanup.
#[test]
fn cleanup_runs_past_the_ceiling_and_the_error_names_the_wait() {
    let w = World::new();
    let runs = Runs::default();
    let mut r = req("cleanup-past-ceiling", json!(null));
    r.max_duration_ms = Some(30_000);
    let c = block_on(w.engine().create(&r)).unwrap();
    assert_eq!(run_to_end(&w, &runs, 4), Status::Errored);
    assert_eq!(runs.effects.count("release"), 1, "the cleanup ran");
    let row = row(&w, &c.id);
    assert_eq!(row.error_tag.as_deref(), Some("RunDurationExceeded"));
    let message = row.error_message.unwrap_or_default();
    assert!(
        message.contains("sleep \"too-long\""),
        "the error names the wait in progress: {message}"
    );
}

/// Scenario 9: an event is journaled as its wait's result, so a payload
/// over the step-result cap is refused (413 at the API) and nothing is kept.
#[test]
fn an_event_payload_over_the_cap_is_refused() {
    let w = World::new();
    let runs = Runs::default();
    block_on(w.engine().create(&req("event", json!(null)))).unwrap();
    block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    let big = json!("x".repeat(STEP_RESULT_BYTES_MAX + 1));
    assert!(matches!(
        w.engine().send_event("approve", &big),
        Err(CommandError::TooLarge(_))
    ));
    assert!(w.engine().send_event("approve", &json!("ok")).unwrap());
    assert_eq!(run_to_end(&w, &runs, 2), Status::Complete);
    assert_eq!(runs.effects.count("after-event"), 1);
}

/// Structured logs: a pass, a failed step (each attempt) and a skip are
/// one JSON line each, naming the instance, its run and repository; a
/// replayed failure is not logged again.
#[test]
fn passes_failed_steps_and_skips_are_logged_as_json_lines() {
    use sluice::obs::{Kind, Recorder};
    let rec = Recorder::install();
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("always-fails", json!(null)))).unwrap();
    assert_eq!(run_to_end(&w, &runs, 5), Status::Errored);
    let failed = rec.of(Kind::StepFailed);
    assert_eq!(
        failed.len(),
        3,
        "two retried attempts and the final failure"
    );
    for f in &failed {
        assert_eq!(f["instance_id"], c.id.as_str());
        assert_eq!(f["run"], "always-fails");
        assert_eq!(f["repo"], "octo/hello");
        assert_eq!(f["step"], "doomed");
    }
    assert_eq!(failed[2]["final"], true);
    assert_eq!(failed[2]["error_tag"], "RetriesExhausted");
    let passes = rec.of(Kind::Pass);
    let last = passes.last().expect("a pass line");
    assert_eq!(last["status"], "errored");
    assert_eq!(last["error_tag"], "RetriesExhausted");
    // A pass of the finished instance replays nothing new and logs no
    // second failure.
    block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(rec.of(Kind::StepFailed).len(), 3);

    let skipped = World::with_index(w.index.clone());
    let s = block_on(skipped.engine().create(&req("skips", json!(null)))).unwrap();
    assert_eq!(run_to_end(&skipped, &runs, 3), Status::Skipped);
    let skip = rec.of(Kind::Skip);
    assert_eq!(skip.len(), 1);
    assert_eq!(skip[0]["instance_id"], s.id.as_str());
    for line in rec.lines() {
        assert!(!line.contains('\n'));
        assert!(serde_json::from_str::<Value>(&line).is_ok_and(|v| v.is_object()));
    }
}

/// Schedules of the seeded inline-step model, and calls in each.
const INLINE_SCHEDULES: u64 = 200;
const INLINE_CALLS: u64 = 14;
/// Passes a schedule may take: a crash, a sleep, a pause and a restart's
/// replay each end or add one; 64 leaves room for every bound below.
const INLINE_PASSES_MAX: u32 = 64;
/// Operator commands per schedule (restarts; pauses and terminations
/// raised mid-pass): enough to meet each other and the crashes, few
/// enough that most schedules still run to their end.
const INLINE_RESTARTS_MAX: u32 = 3;
const INLINE_INTERRUPTS_MAX: u32 = 3;

/// What the model's operator did, over every schedule.
#[derive(Default, Debug)]
struct InlineModelTally {
    flushes: u32,
    crashes: u64,
    restarts: u32,
    pauses: u32,
    terminations: u32,
    completions: u32,
}

/// Inline steps are journaled together, yet no effect outside the
/// instance ever depends on an inline result that is not durable: over
/// seeded shapes of inline steps, async steps, sleeps and crashes (an
/// async step that hangs on its first attempt, its pass dropped after its
/// body started, i.e. after anything it sent left), every value an async
/// body saw is the value the journal holds at the end, unless an
/// operator's restart from an earlier step threw that generation away.
/// The operator restarts from any step (or the top) between passes, and
/// pauses (then resumes) or terminates from inside an async step's body,
/// so the pass meets the command at its next durable call, often an
/// inline step with others held. A crash lands only at an await, as a
/// Durable Object's uncommitted writes are lost back to its last one;
/// every await of a run is a durable call, which writes the held entries
/// first.
#[test]
fn seeded_inline_steps_never_change_under_an_effect_that_saw_them() {
    let mut seed: u64 = 0x696e_6c69_6e65;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut tally = InlineModelTally::default();
    for schedule in 0..INLINE_SCHEDULES {
        let mut hangs = 0;
        let shape: Vec<char> = (0..INLINE_CALLS)
            .map(|_| match ['i', 'i', 'i', 'a', 'h', 's'][next(6) as usize] {
                // Fewer crashes than the executor's crash-loop bound.
                'h' if hangs + 1 >= sluice::limits::EXECUTOR_CRASHES_MAX => 'a',
                'h' => {
                    hangs += 1;
                    'h'
                }
                op => op,
            })
            .collect();
        run_inline_schedule(schedule, &shape, &mut next, &mut tally);
    }
    let t = &tally;
    assert!(t.crashes >= INLINE_SCHEDULES / 2, "{t:?}");
    assert!(u64::from(t.flushes) >= INLINE_SCHEDULES, "{t:?}");
    assert!(
        t.restarts >= 20 && t.pauses >= 20 && t.terminations >= 10,
        "{t:?}"
    );
    assert!(u64::from(t.completions) >= INLINE_SCHEDULES / 2, "{t:?}");
}

/// One schedule of the inline model: passes, crashes and the operator's
/// commands until the instance ends, then the checks.
fn run_inline_schedule(
    schedule: u64,
    shape: &[char],
    next: &mut impl FnMut(u64) -> u64,
    tally: &mut InlineModelTally,
) {
    let w = World::new();
    let runs = Runs::default();
    let mut r = req("inline-mix", json!(shape.iter().collect::<String>()));
    r.key = format!("test:inline-mix:{schedule}");
    block_on(w.engine().create(&r)).unwrap();
    w.clock.freeze_timers(true);
    // Each restart: how many observations were made before it, and the
    // first call its new generation runs again.
    let mut restarts: Vec<(usize, usize)> = Vec::new();
    let (mut interrupts, mut end) = (0, None);
    for _ in 0..INLINE_PASSES_MAX {
        if restarts.len() < INLINE_RESTARTS_MAX as usize && next(5) == 0 {
            restart_somewhere(&w, &runs, shape, next, &mut restarts);
        }
        let k = next(INLINE_CALLS) as usize;
        if interrupts < INLINE_INTERRUPTS_MAX && matches!(shape[k], 'a' | 'h') && next(2) == 0 {
            // Raised by that async step's body, if this pass runs it.
            interrupts += 1;
            let what = if next(4) == 0 {
                Interrupt::Terminate
            } else {
                Interrupt::Pause
            };
            let at = format!("{}{k}", shape[k]);
            *runs.interrupt_on.borrow_mut() = Some((at, w.interrupt.clone(), what));
        }
        let pass = w.engine().pass(&runs, &w.interrupt).now_or_never();
        // A command the pass did not reach dies with it, as in a process.
        w.interrupt.set(None);
        let Some(p) = pass else {
            tally.crashes += 1;
            continue;
        };
        let p = p.expect("pass");
        tally.flushes += p.stats.journal_flushes;
        match (p.status, p.wake_at_ms) {
            (Status::Waiting, Some(wake)) => w.clock.set(wake.max(w.clock.0.get())),
            (Status::Paused, _) => {
                tally.pauses += 1;
                let resumed = block_on(w.engine().command(&runs, &Command::Resume));
                assert!(resumed.is_ok(), "schedule {schedule}: resume {resumed:?}");
            }
            (Status::Complete | Status::Terminated, _) => {
                end = Some(p.status);
                break;
            }
            other => panic!("schedule {schedule} {shape:?}: {other:?}"),
        }
    }
    let Some(end) = end else {
        panic!("schedule {schedule} {shape:?} did not end")
    };
    tally.restarts += restarts.len() as u32;
    match end {
        Status::Complete => tally.completions += 1,
        _ => tally.terminations += 1,
    }
    assert_inline_results_held(&w, &runs, schedule, shape, &restarts, end);
}

/// An operator's restart between passes, from the top or from a step of
/// the shape; one naming a step not journaled yet is refused and ignored.
fn restart_somewhere(
    w: &World,
    runs: &Runs,
    shape: &[char],
    next: &mut impl FnMut(u64) -> u64,
    restarts: &mut Vec<(usize, usize)>,
) {
    let k = next(INLINE_CALLS) as usize;
    let (from_step, from) = match shape[k] {
        's' => (None, 0),
        op => (Some(format!("{op}{k}")), k),
    };
    let cmd = Command::Restart { from_step };
    if block_on(w.engine().command(runs, &cmd)).is_ok() {
        restarts.push((runs.observed.borrow().len(), from));
    }
}

/// What a body saw of an inline step is what the journal holds, unless a
/// later restart ran that step again; a completed run journaled every
/// inline step.
fn assert_inline_results_held(
    w: &World,
    runs: &Runs,
    schedule: u64,
    shape: &[char],
    restarts: &[(usize, usize)],
    end: Status,
) {
    let journaled: std::collections::HashMap<String, u32> = w
        .journal
        .entries()
        .unwrap()
        .into_iter()
        .filter_map(|e| Some((e.name, serde_json::from_str(e.value.as_deref()?).ok()?)))
        .collect();
    for (j, seen) in runs.observed.borrow().iter().enumerate() {
        // The first call a restart after this observation ran again.
        let kept_below = restarts
            .iter()
            .filter(|(made, _)| *made > j)
            .map(|(_, from)| *from)
            .min()
            .unwrap_or(usize::MAX);
        for (name, v) in seen {
            let k: usize = name[1..].parse().unwrap();
            if k < kept_below {
                assert_eq!(
                    journaled.get(name),
                    Some(v),
                    "schedule {schedule} {shape:?} {restarts:?}: {name} changed after an effect saw it"
                );
            }
        }
    }
    for (k, op) in shape.iter().enumerate() {
        let name = format!("{op}{k}");
        assert!(
            end != Status::Complete || *op != 'i' || journaled.contains_key(&name),
            "schedule {schedule}: {name} journaled"
        );
    }
}

/// A journal write that fails ends what the pass may journal: the cleanup
/// step after it is refused too, so no effect acts on an inline result the
/// journal lost, and nothing is written past the call that left no entry
/// (a gap the next pass would read as a changed run). The pass counts as
/// crashed; the next one runs everything from the failed write on.
#[test]
fn a_failed_journal_write_refuses_every_later_durable_call_of_the_pass() {
    let w = World::new();
    let runs = Runs::default();
    refuse_first_write_of(&w, "calc");
    block_on(w.engine().create(&req("inline-then-cleanup", json!(null)))).unwrap();
    let first = block_on(w.engine().pass(&runs, &w.interrupt));
    assert!(matches!(first, Err(RunError::Store { .. })), "{first:?}");
    assert_eq!(
        runs.effects.count("send"),
        0,
        "no body ran past the failed write"
    );
    assert_eq!(runs.effects.count("conclude 7"), 0, "nor a cleanup step");
    assert!(w.journal.entries().unwrap().is_empty());
    let second = block_on(w.engine().pass(&runs, &w.interrupt)).expect("replay");
    assert_eq!(second.status, Status::Complete, "{second:?}");
    assert_eq!(
        (runs.effects.count("send"), runs.effects.count("conclude 7")),
        (1, 1)
    );
    let names = w.journal_names();
    assert_eq!(names, ["calc", "send", "conclude"]);
}

/// A batch indexes only requests its rows describe whole: one with its own
/// step limit or ceiling is left to its object (its first pass writes the
/// row once the record with its limits is kept), since the sweep
/// would recreate a lost one from its row with the defaults.
#[test]
fn a_batch_indexes_only_creates_its_rows_describe_whole() {
    let w = World::new();
    let mut plain = req("replay", json!(null));
    plain.key = "test:plain".into();
    let mut limited = req("replay", json!(null));
    limited.key = "test:limited".into();
    limited.max_steps = Some(3);
    let mut creates = [plain, limited];
    block_on(sluice::engine::index_creates(
        w.index.as_ref(),
        &mut creates,
        T0,
    ))
    .unwrap();
    assert_eq!(creates.each_ref().map(|c| c.indexed), [true, false]);
    let listed =
        |c: &CreateRequest| block_on(executions::get(w.index.as_ref(), c.id().as_str())).unwrap();
    assert!(listed(&creates[0]).is_some_and(|r| r.status == "queued"));
    assert!(listed(&creates[1]).is_none(), "its object writes its row");
}

/// A body that ignores a failed journal write still ends a crashed pass:
/// every durable call after the failure was refused (an inline step, a
/// sleep), and the next pass runs them from the failed write on.
#[test]
fn a_pass_whose_body_swallowed_a_failed_journal_write_counts_as_crashed() {
    let w = World::new();
    let runs = Runs::default();
    refuse_first_write_of(&w, "calc");
    let c = block_on(w.engine().create(&req("inline-swallow", json!(null)))).unwrap();
    let first = block_on(w.engine().pass(&runs, &w.interrupt));
    assert!(matches!(first, Err(RunError::Store { .. })), "{first:?}");
    assert_eq!(
        ["send", "after refused", "nap refused"].map(|e| runs.effects.count(e)),
        [0, 1, 1]
    );
    assert!(w.journal.entries().unwrap().is_empty());
    let no_row = block_on(executions::get(w.index.as_ref(), &c.id)).unwrap();
    assert!(no_row.is_none(), "nothing mirrored, no step body ran");
    assert_eq!(run_to_end(&w, &runs, 3), Status::Complete);
    let names = w.journal_names();
    assert_eq!(names, ["calc", "send", "after", "nap"]);
}

/// The journal refuses the first write of an entry named `name` (once:
/// RAISE(FAIL) keeps the trigger's own mark).
fn refuse_first_write_of(w: &World, name: &str) {
    let sql = w.journal.storage();
    common::create_every_journal_table(&w.journal);
    sql.exec("CREATE TABLE refused (n INTEGER)", &[]).unwrap();
    sql.exec(
        &format!(
            "CREATE TRIGGER refuse_once BEFORE INSERT ON journal \
             WHEN NEW.name = '{name}' AND NOT EXISTS (SELECT 1 FROM refused) BEGIN \
             INSERT INTO refused VALUES (1); SELECT RAISE(FAIL, 'storage full'); END"
        ),
        &[],
    )
    .unwrap();
}

/// A terminate that finds no instance (a row whose create has not arrived)
/// leaves a tombstone: the create that arrives later runs nothing and
/// answers the instance ended.
#[test]
fn a_create_after_a_terminate_that_found_no_instance_runs_nothing() {
    let w = World::new();
    let runs = Runs::default();
    let refused = block_on(w.engine().command(&runs, &Command::Terminate));
    assert_eq!(refused, Err(CommandError::NotFound));
    // Its row came from its parent's batch.
    let mut batch = [req("replay", json!({ "n": 1 }))];
    block_on(sluice::engine::index_creates(
        w.index.as_ref(),
        &mut batch,
        T0,
    ))
    .unwrap();
    let asked = &batch[0];
    let late = block_on(w.engine().create(asked)).unwrap();
    assert_eq!((late.created, late.status), (false, Status::Terminated));
    assert_eq!(late.id, asked.id().as_str());
    // It takes all the create names: finalize decodes its input.
    let rec = w.engine().record().unwrap().unwrap();
    assert_eq!(
        (rec.run.as_str(), rec.input.as_str()),
        ("replay", r#"{"n":1}"#)
    );
    // The sweep's poke of its row, still queued: the pass runs nothing and
    // the row reads terminated.
    assert_eq!(row(&w, &late.id).status, "queued");
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.status, Status::Terminated);
    assert_eq!(runs.effects.count("a"), 0, "nothing of the run ran");
    assert_eq!(row(&w, &late.id).status, "terminated");
    let again = block_on(w.engine().command(&runs, &Command::Terminate));
    assert!(matches!(again, Err(CommandError::Conflict(_))), "{again:?}");

    // A single create meeting a tombstone: no row yet, so its idle pass
    // writes one, terminated (ADR-0018).
    let alone = World::with_index(w.index.clone());
    let refused = block_on(alone.engine().command(&runs, &Command::Terminate));
    assert_eq!(refused, Err(CommandError::NotFound));
    let mut single = req("replay", json!({ "n": 2 }));
    single.key = "replay:alone".into();
    let late = block_on(alone.engine().create(&single)).unwrap();
    assert_eq!(
        (late.created, late.status, late.row_pending),
        (false, Status::Terminated, true)
    );
    assert!(block_on(executions::get(w.index.as_ref(), &late.id))
        .unwrap()
        .is_none());
    let p = block_on(alone.engine().pass(&runs, &alone.interrupt)).unwrap();
    assert_eq!(
        (p.status, (p.row_refusals > 0)),
        (Status::Terminated, false)
    );
    assert_eq!(row(&w, &late.id).status, "terminated");
    assert_eq!(runs.effects.count("a"), 0, "nothing of the run ran");
}

/// A tombstone holds its key only as long as a finished instance would be
/// kept: a terminate that met an object the sweep had just purged (between
/// its purge of the object and its delete of the row) leaves one, and a
/// later use of the key must run, not read terminated for good.
#[test]
fn a_tombstone_holds_its_key_only_for_the_retention() {
    let w = World::new();
    let runs = Runs::default();
    let refused = block_on(w.engine().command(&runs, &Command::Terminate));
    assert_eq!(refused, Err(CommandError::NotFound));
    // At the bound's edge it still holds: a create on its way finds it.
    w.clock.advance(TOMBSTONE_KEPT_MS);
    let held = block_on(w.engine().create(&req("replay", json!({ "n": 1 })))).unwrap();
    assert_eq!((held.created, held.status), (false, Status::Terminated));

    let later = World::new();
    block_on(later.engine().command(&runs, &Command::Terminate)).unwrap_err();
    later.clock.advance(TOMBSTONE_KEPT_MS + 1);
    let fresh = block_on(later.engine().create(&req("replay", json!({ "n": 1 })))).unwrap();
    assert_eq!((fresh.created, fresh.status), (true, Status::Queued));
    assert_eq!(run_to_end(&later, &runs, 3), Status::Complete);
    assert_eq!(
        ["a", "b"].map(|e| runs.effects.count(e)),
        [1, 1],
        "the new use of the key ran"
    );
    assert_eq!(row(&later, &fresh.id).status, "complete");
}

/// A step failure of megabytes is journaled, indexed and reported cut to
/// a bound: the run fails as its step did, never as a journal write the
/// storage refuses (a crash loop).
#[test]
fn a_step_failure_of_megabytes_is_kept_cut_to_its_bound() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("loud-failure", json!(null)))).unwrap();
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).expect("a pass, not a storage error");
    assert_eq!(p.status, Status::Errored);
    let max = sluice::limits::STEP_ERROR_MESSAGE_BYTES_MAX;
    let entry = &w.journal.entries().unwrap()[0];
    let message = entry.error_message.as_deref().unwrap();
    // The bound, and the error's wording around it (a step name, the tag).
    assert!(message.len() <= max + 1024, "{} bytes", message.len());
    assert!(
        message.ends_with("more bytes cut]"),
        "{}",
        &message[message.len() - 40..]
    );
    let r = row(&w, &c.id);
    assert_eq!(r.error_tag.as_deref(), Some("NonRetryable"));
    assert!(r.error_message.unwrap().len() <= max + 1024);
}

/// Characters of `inline-many`'s step names (the limit is 256).
const INLINE_MANY_NAME_CHARS: usize = 200;

/// A run of the most inline steps a run may take, under long names with
/// results that escape, completes: each write of held entries stays under
/// what Durable Object storage keeps in one string (the native SQLite
/// refuses more, as the platform does), however small each result is.
#[test]
fn the_most_inline_steps_a_run_may_take_are_written_within_the_storage_limit() {
    let w = World::new();
    let runs = Runs::default();
    let steps = sluice::limits::STEPS_PER_RUN_MAX_CEILING;
    let mut r = req("inline-many", json!(steps - 1));
    r.max_steps = Some(steps);
    block_on(w.engine().create(&r)).unwrap();
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).expect("pass");
    assert_eq!(p.status, Status::Complete, "{p:?}");
    assert_eq!(w.journal.entry_count().unwrap(), steps - 1);
    assert!(p.stats.journal_flushes > 1, "{:?}", p.stats);
}

/// Held inline results are written before they pass 512 KB together, so
/// every write fits Durable Object storage's 2 MB per value; a failing
/// inline step is journaled at once, never retried, and replayed as failed.
#[test]
fn inline_steps_are_written_in_bounded_batches_and_a_failure_is_final() {
    let w = World::new();
    let runs = Runs::default();
    let c = block_on(w.engine().create(&req("inline-big", json!(null)))).unwrap();
    let p = block_on(w.engine().pass(&runs, &w.interrupt)).unwrap();
    assert_eq!(p.status, Status::Errored);
    assert_eq!(p.stats.journal_writes, 4, "three results and the failure");
    assert_eq!(
        p.stats.journal_flushes, 3,
        "each big result alone, then before the failure"
    );
    let entries = w.journal.entries().unwrap();
    let names: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e.name.as_str(), e.state.as_str()))
        .collect();
    assert_eq!(
        names,
        [
            ("big", "done"),
            ("big#2", "done"),
            ("big#3", "done"),
            ("refuse", "failed")
        ]
    );
    assert!(entries[..3]
        .iter()
        .all(|e| e.value.as_ref().is_some_and(|v| v.len() == 300_002)));
    assert_eq!(row(&w, &c.id).error_tag.as_deref(), Some("NonRetryable"));
    assert_eq!(runs.effects.count("refuse"), 1, "not retried");
}
