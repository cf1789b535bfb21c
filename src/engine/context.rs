//! `Ctx`: what a run body calls. Each durable call (`step`, `sleep`,
//! `sleep_until`, `wait_for_event`) takes the next position in the journal;
//! on replay the journaled outcome is returned without running anything.
//!
//! Architecture invariant: a `Done` entry's body never runs again, and a
//! durable call that does not match its journal entry (name or kind) is a
//! `JournalMismatch`, never a silent re-run.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;

use futures_util::future::{select, Either, LocalBoxFuture};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::limits::{
    PASS_DURATION_MS_MAX, RUN_DURATION_MS_MAX, SLEEP_MS_MAX, STEP_NAME_CHARS_MAX,
    STEP_RESULT_BYTES_MAX, STEP_RETRY_INLINE_MS_MAX,
};

use crate::blobs::Blobs;

use super::config::StepConfig;
use super::error::{RunError, StepFailure};
use super::row::PendingRow;
use crate::clock::Clock;
use crate::journal::{Entry, EntryKind, EntryState};
use crate::obs::{self, Kind, Subject};
use crate::store::journal::JournalStore;
use crate::store::StoreError;

/// A boxed step body's future (`Ctx::step_boxed`): its result as JSON.
pub type BoxedBody<'a> = LocalBoxFuture<'a, Result<Value, StepFailure>>;

pub use crate::journal::Interrupt;

/// Shared between the executor that owns the instance and the pass.
pub type InterruptFlag = Rc<Cell<Option<Interrupt>>>;

/// Per-pass counters, for tests and the benchmark.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PassStats {
    /// Journal entries written in this pass.
    pub journal_writes: u32,
    /// Writes of several inline steps' entries at once (`Ctx::flush`).
    pub journal_flushes: u32,
    /// Step bodies actually executed (attempts) in this pass.
    pub bodies_run: u32,
    /// Durable calls answered from the journal.
    pub replayed: u32,
}

pub struct Ctx<'a> {
    journal: &'a dyn JournalStore,
    blobs: Option<&'a dyn Blobs>,
    clock: &'a dyn Clock,
    /// The instance, its run and repository (what its log lines name).
    subject: Subject,
    generation: u32,
    /// A pass of this generation ended without finishing (the executor
    /// died, or storage failed): any step not journaled may have run.
    unclean_history: Cell<bool>,
    started_ms: i64,
    /// When this pass began: the pass budget counts from here.
    pass_started_ms: i64,
    /// The run ceiling; a run may move it once it knows its budget
    /// (`set_ceiling`), so both are cells.
    ceiling_at_ms: Cell<i64>,
    max_duration_ms: Cell<i64>,
    max_steps: u32,
    entries: RefCell<Vec<Entry>>,
    /// Entries of inline steps not yet in the journal (`step_inline`):
    /// written, in one statement, before the next durable call that may
    /// start I/O and before the pass ends (`flush`).
    unwritten: RefCell<Vec<Entry>>,
    /// Bytes of their rows (`held_bytes`), bounded by `UNWRITTEN_BYTES_MAX`.
    unwritten_bytes: Cell<usize>,
    /// Why a journal write of this pass failed: every later durable call
    /// fails too, so nothing is journaled past a call that left no entry
    /// (a gap the next pass would read as a changed run) and no cleanup
    /// step acts on a result the journal lost. The pass counts as crashed.
    write_failed: RefCell<Option<String>>,
    cursor: Cell<u32>,
    occurrences: RefCell<HashMap<String, u32>>,
    next_rev: Cell<i64>,
    interrupt: InterruptFlag,
    stats: Cell<PassStats>,
    /// The instance's index row, while only its object has it: written
    /// before this pass's first step body (ADR-0018,
    /// `docs/adr/0018-a-single-creates-row-rides-its-first-pass.md`).
    pending_row: Option<&'a PendingRow<'a>>,
}

/// Bytes of inline steps' entries held before they are written together:
/// a pass's memory stays small, and the journal splits what one write
/// binds again by its own bound (`UPSERT_ENTRIES_JSON_BYTES_MAX`).
const UNWRITTEN_BYTES_MAX: usize = 512 * 1024;

/// What a held entry's row adds besides its name, value and message: its
/// other columns as JSON (seq, kind, state, attempts, times, rev).
const HELD_ENTRY_OVERHEAD_BYTES: usize = 128;

/// What a held entry counts against `UNWRITTEN_BYTES_MAX`.
fn held_bytes(entry: &Entry) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    entry.name.len() + text(&entry.value) + text(&entry.error_message) + HELD_ENTRY_OVERHEAD_BYTES
}

/// The failure tag of an attempt that ran past its step's timeout.
pub const TAG_STEP_TIMED_OUT: &str = "StepTimedOut";

/// Whether a step stops for an operator's interrupt and the run ceiling
/// (normal), or runs regardless, bounded by its own timeout (cleanup).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StepKind {
    Normal,
    Cleanup,
}

/// One attempt of a step's body, as it ended.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    number: u32,
    /// It ran out of its step's timeout (not a failure it reported).
    timed_out: bool,
}

/// A step as the journal left it.
enum Resumed {
    /// Journaled result, as JSON.
    Value(String),
    /// Run attempt `attempt`; the step began at `started_ms`.
    Attempt { attempt: u32, started_ms: i64 },
}

/// What a position in the journal holds for the call being made.
struct Slot {
    seq: u32,
    name: String,
    existing: Option<Entry>,
}

impl<'a> Ctx<'a> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        journal: &'a dyn JournalStore,
        blobs: Option<&'a dyn Blobs>,
        clock: &'a dyn Clock,
        subject: Subject,
        generation: u32,
        started_ms: i64,
        max_duration_ms: i64,
        max_steps: u32,
        entries: Vec<Entry>,
        interrupt: InterruptFlag,
    ) -> Ctx<'a> {
        let next_rev = entries.iter().map(|e| e.rev).max().unwrap_or(0) + 1;
        Ctx {
            journal,
            blobs,
            clock,
            subject,
            generation,
            unclean_history: Cell::new(false),
            started_ms,
            pass_started_ms: clock.now_ms(),
            ceiling_at_ms: Cell::new(started_ms.saturating_add(max_duration_ms)),
            max_duration_ms: Cell::new(max_duration_ms),
            max_steps,
            entries: RefCell::new(entries),
            unwritten: RefCell::new(Vec::new()),
            unwritten_bytes: Cell::new(0),
            write_failed: RefCell::new(None),
            cursor: Cell::new(0),
            occurrences: RefCell::new(HashMap::new()),
            next_rev: Cell::new(next_rev),
            interrupt,
            stats: Cell::new(PassStats::default()),
            pending_row: None,
        }
    }

    /// A pass of an instance whose index row is not in D1 yet: its first
    /// step body waits for the row.
    pub(crate) fn with_pending_row(mut self, row: Option<&'a PendingRow<'a>>) -> Ctx<'a> {
        self.pending_row = row;
        self
    }

    pub fn instance_id(&self) -> &str {
        &self.subject.instance_id
    }

    /// The instance, its run and repository, for log lines.
    pub fn subject(&self) -> &Subject {
        &self.subject
    }

    /// How many times an operator restarted the instance.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The name of the entry the journal holds at the next durable call's
    /// position, if it holds one (a later occurrence of a name carries its
    /// `#n`). A body whose step order changed between versions reads it to
    /// replay an instance the older version journaled in that version's
    /// order: a durable call that does not match its entry is a
    /// `JournalMismatch`, never a silent re-run.
    pub fn journaled_next(&self) -> Option<String> {
        self.entries
            .borrow()
            .get(self.cursor.get() as usize)
            .map(|e| e.name.clone())
    }

    /// Marks that an earlier pass of this generation died before ending
    /// (the executor's record shows more passes started than ended).
    pub(crate) fn set_unclean_history(&self) {
        self.unclean_history.set(true);
    }

    /// Whether a step's body, now at `attempt`, may have run before and
    /// left its effect: an earlier attempt failed (perhaps after its effect
    /// applied, an answer lost), a pass of this generation died (perhaps
    /// inside this very step, before its result was journaled), or an
    /// earlier generation ran it. A step that acts on the world must look
    /// for its earlier effect first exactly then; otherwise it may act at
    /// once (ADR-0001 rule 2 without the extra round trip).
    /// (ADR-0001: docs/adr/0001-durable-execution-scope.md)
    pub fn may_have_run(&self, attempt: u32) -> bool {
        attempt > 1 || self.generation > 0 || self.unclean_history.get()
    }

    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    pub fn stats(&self) -> PassStats {
        self.stats.get()
    }

    /// The journal as this pass leaves it: every entry it started with or
    /// wrote (the context is the only writer during a pass). Read after
    /// `flush`, and only when no write failed. None unless each entry sits
    /// at its own position (`remember` keeps them so, as long as every
    /// durable call that takes a position writes it): the caller then
    /// reads the journal back.
    pub(crate) fn into_entries(self) -> Option<Vec<Entry>> {
        let entries = self.entries.into_inner();
        let in_place = entries
            .iter()
            .enumerate()
            .all(|(i, e)| usize::try_from(e.seq).is_ok_and(|seq| seq == i));
        in_place.then_some(entries)
    }

    /// The run ceiling in force (the executor keeps it in the record).
    pub fn max_duration_ms(&self) -> i64 {
        self.max_duration_ms.get()
    }

    /// When the run ceiling passes, ms since the epoch.
    pub fn ceiling_at_ms(&self) -> i64 {
        self.ceiling_at_ms.get()
    }

    /// Sets the run ceiling (measured from the run's start) once the run
    /// knows its budget, e.g. a confirmation window plus the deploy itself.
    /// Journaled, so every replay applies the same value. At most
    /// `RUN_DURATION_MS_MAX`.
    pub async fn set_ceiling(&self, name: &str, max_duration_ms: i64) -> Result<(), RunError> {
        if !(1..=RUN_DURATION_MS_MAX).contains(&max_duration_ms) {
            return Err(RunError::InvalidStep {
                step: name.to_owned(),
                reason: format!(
                    "a run ceiling of {max_duration_ms} ms is outside 1..={RUN_DURATION_MS_MAX}"
                ),
            });
        }
        let ms: i64 = self
            .run_step(
                name,
                StepConfig::once(),
                |_| async move { Ok(max_duration_ms) },
                StepKind::Normal,
            )
            .await?;
        self.max_duration_ms.set(ms);
        self.ceiling_at_ms.set(self.started_ms.saturating_add(ms));
        Ok(())
    }

    fn bump(&self, f: impl FnOnce(&mut PassStats)) {
        let mut s = self.stats.get();
        f(&mut s);
        self.stats.set(s);
    }

    /// Runs `body` as a durable step: returns its journaled result if it
    /// already completed, else runs it (attempt 1, 2, ... passed to the
    /// body) with the configured retries and timeout, and journals the
    /// result. Bodies may run more than once (a crash mid-attempt), so they
    /// must be idempotent or observe-then-act (ADR-0001 rule 2).
    pub async fn step<T, F, Fut>(&self, name: &str, cfg: StepConfig, body: F) -> Result<T, RunError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, StepFailure>>,
    {
        self.run_step(name, cfg, body, StepKind::Normal).await
    }

    /// `step` for bodies boxed behind one type: every caller shares one
    /// copy of the step machinery in the Worker's wasm (a generic `step`
    /// is compiled once per call site), for a JSON round trip of the
    /// result. For steps off the hot path.
    pub async fn step_boxed<'b, T>(
        &self,
        name: &str,
        cfg: StepConfig,
        body: &mut (dyn FnMut(u32) -> BoxedBody<'b> + 'b),
    ) -> Result<T, RunError>
    where
        T: DeserializeOwned,
    {
        let value: Value = self
            .run_step(name, cfg, &mut *body, StepKind::Normal)
            .await?;
        serde_json::from_value(value).map_err(|e| RunError::InvalidStep {
            step: name.to_owned(),
            reason: format!("its result does not decode: {e}"),
        })
    }

    /// A step that runs even after an operator's terminate or pause was
    /// requested, and after the run ceiling passed (bounded by its own
    /// timeout): for releasing what the run holds (a serial group, a lease)
    /// and reporting, on every exit path.
    pub async fn cleanup_step<T, F, Fut>(
        &self,
        name: &str,
        cfg: StepConfig,
        body: F,
    ) -> Result<T, RunError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, StepFailure>>,
    {
        self.run_step(name, cfg, body, StepKind::Cleanup).await
    }

    /// A step whose body is a plain computation, run at once: no I/O, no
    /// await, no retry (a failure is journaled as the step's). Its entry is
    /// held and written with those of the inline steps after it, before the
    /// next durable call that may start I/O (a step, a sleep, a wait, a
    /// blob read) and before the pass ends: no effect outside the instance
    /// can depend on an inline result that is not yet durable, and a crash
    /// before the write loses only results nobody saw, run again on replay.
    /// A run of consecutive inline steps costs one journal write.
    pub fn step_inline<T, F>(&self, name: &str, body: F) -> Result<T, RunError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Result<T, StepFailure>,
    {
        let slot = self.slot(name, EntryKind::Step)?;
        let started_ms = match self.resume_step(&slot, StepKind::Normal)? {
            Resumed::Value(json) => return self.decode_replayed(&slot, &json),
            Resumed::Attempt { started_ms, .. } => started_ms,
        };
        self.check_interrupt()?;
        self.bump(|s| s.bodies_run += 1);
        match body() {
            Ok(value) => self.complete_inline(&slot, started_ms, value),
            Err(failure) => {
                // A computation fails the same way again: never retried.
                let err = RunError::NonRetryable {
                    step: slot.name.clone(),
                    failure: failure.bounded(),
                };
                Err(self.fail(&slot, EntryKind::Step, 1, started_ms, err))
            }
        }
    }

    /// Holds an inline step's entry (`step_inline`), writing what is held
    /// first when it would pass `UNWRITTEN_BYTES_MAX`.
    fn complete_inline<T: Serialize>(
        &self,
        slot: &Slot,
        started_ms: i64,
        value: T,
    ) -> Result<T, RunError> {
        let json = self.encode_result(slot, 1, started_ms, &value)?;
        let mut entry = Entry {
            state: EntryState::Done,
            value: Some(json),
            attempts: 1,
            finished_ms: Some(self.clock.now_ms()),
            ..self.blank(slot, EntryKind::Step, started_ms)
        };
        let bytes = held_bytes(&entry);
        if self.unwritten_bytes.get() + bytes > UNWRITTEN_BYTES_MAX {
            self.flush()?;
        }
        // Taken after the flush: revisions rise in the order entries are written.
        entry.rev = self.take_rev();
        self.unwritten_bytes.set(self.unwritten_bytes.get() + bytes);
        self.unwritten.borrow_mut().push(entry.clone());
        self.remember(entry);
        Ok(value)
    }

    async fn run_step<T, F, Fut>(
        &self,
        name: &str,
        cfg: StepConfig,
        mut body: F,
        kind: StepKind,
    ) -> Result<T, RunError>
    where
        T: Serialize + DeserializeOwned,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, StepFailure>>,
    {
        let slot = self.slot(name, EntryKind::Step)?;
        let (mut attempt, started_ms) = match self.resume_step(&slot, kind)? {
            Resumed::Value(json) => return self.decode_replayed(&slot, &json),
            Resumed::Attempt {
                attempt,
                started_ms,
            } => (attempt, started_ms),
        };
        // The interrupt is met after the awaits before the body: one
        // answered "pending" during them stops it.
        self.before_body().await?;
        if kind == StepKind::Normal {
            self.check_interrupt()?;
        }
        loop {
            let limit_ms = match self.attempt_limit_ms(&slot, cfg, kind, attempt, started_ms)? {
                Some(ms) => ms,
                None => return Err(self.fail_ceiling(&slot, attempt - 1, started_ms, "step")),
            };
            self.bump(|s| s.bodies_run += 1);
            let outcome = self.race_attempt(body(attempt), limit_ms).await;
            let (failure, timed_out) = match outcome {
                Some(Ok(value)) => return self.complete_step(&slot, attempt, started_ms, value),
                Some(Err(f)) => (f.bounded(), false),
                None if limit_ms < cfg.timeout_ms => {
                    return Err(self.fail_ceiling(&slot, attempt, started_ms, "step"));
                }
                None => (
                    StepFailure::retryable(
                        TAG_STEP_TIMED_OUT,
                        format!("attempt {attempt} exceeded {} ms", cfg.timeout_ms),
                    ),
                    true,
                ),
            };
            let last = Attempt {
                number: attempt,
                timed_out,
            };
            if let Some(err) = self.final_failure(&slot, cfg, last, failure.clone()) {
                return Err(self.fail(&slot, EntryKind::Step, attempt, started_ms, err));
            }
            let delay_ms = cfg.delay_before_retry_ms(attempt);
            self.log_retry(&slot, attempt, &failure, delay_ms);
            if delay_ms <= STEP_RETRY_INLINE_MS_MAX {
                self.clock.sleep(delay_ms).await;
                if kind == StepKind::Normal {
                    self.meet_interrupt(&slot, attempt, started_ms, &failure)?;
                }
                attempt += 1;
                continue;
            }
            // A long backoff suspends the instance instead of holding it.
            let wake = self.clock.now_ms() + delay_ms;
            self.write_retrying(&slot, attempt, started_ms, &failure, wake)?;
            return Err(self.suspend_step(wake, &slot, kind));
        }
    }

    /// One attempt of a step's body against its time limit: the body's
    /// result, or `None` when the limit passed first.
    async fn race_attempt<T, Fut>(&self, work: Fut, limit_ms: i64) -> Option<Result<T, StepFailure>>
    where
        Fut: Future<Output = Result<T, StepFailure>>,
    {
        let timer = self.clock.sleep(limit_ms);
        match select(Box::pin(work), timer).await {
            Either::Left((r, _)) => Some(r),
            Either::Right(_) => None,
        }
    }

    /// Where a step stands before this pass runs it: journaled (replay the
    /// value or the error), waiting for a retry's backoff, or new.
    fn resume_step(&self, slot: &Slot, kind: StepKind) -> Result<Resumed, RunError> {
        let now = self.clock.now_ms();
        let Some(e) = &slot.existing else {
            return Ok(Resumed::Attempt {
                attempt: 1,
                started_ms: now,
            });
        };
        match e.state {
            EntryState::Done => {
                self.bump(|s| s.replayed += 1);
                Ok(Resumed::Value(
                    e.value.clone().unwrap_or_else(|| "null".into()),
                ))
            }
            EntryState::Failed => Err(self.replayed_error(e)),
            EntryState::Retrying => {
                let wake = e.wake_at_ms.unwrap_or(now);
                if kind == StepKind::Normal && now >= self.ceiling_at_ms.get() {
                    let err = self.ceiling(&slot.name, "retry of step");
                    return Err(self.fail(slot, EntryKind::Step, e.attempts, e.started_ms, err));
                }
                if now < wake {
                    return Err(self.suspend_step(wake, slot, kind));
                }
                Ok(Resumed::Attempt {
                    attempt: e.attempts + 1,
                    started_ms: e.started_ms,
                })
            }
            EntryState::Waiting => Err(self.mismatch(slot, e, EntryKind::Step)),
        }
    }

    /// The wall-clock bound of the next attempt: its own timeout, cut at the
    /// run ceiling for a normal step (None: the ceiling has passed). A long
    /// attempt that would outlive the pass budget ends the pass first and
    /// starts in the next one (`PASS_DURATION_MS_MAX`).
    fn attempt_limit_ms(
        &self,
        slot: &Slot,
        cfg: StepConfig,
        kind: StepKind,
        attempt: u32,
        started_ms: i64,
    ) -> Result<Option<i64>, RunError> {
        let now = self.clock.now_ms();
        let elapsed_ms = now - self.pass_started_ms;
        let ran_something = self.stats.get().bodies_run > 0;
        if ran_something && elapsed_ms.saturating_add(cfg.timeout_ms) > PASS_DURATION_MS_MAX {
            if attempt > 1 {
                let failure =
                    StepFailure::retryable("PassBudget", "the next attempt starts in a new pass");
                self.write_retrying(slot, attempt - 1, started_ms, &failure, now)?;
            }
            return Err(RunError::Suspended {
                wake_at_ms: now,
                waiting_on: format!("a new pass for step {:?} (pass budget)", slot.name),
            });
        }
        if kind == StepKind::Cleanup {
            return Ok(Some(cfg.timeout_ms));
        }
        let remaining_ms = self.ceiling_at_ms.get() - now;
        Ok((remaining_ms > 0).then(|| cfg.timeout_ms.min(remaining_ms)))
    }

    /// The error that ends the step after this failed attempt, if retrying
    /// cannot or may not help: a last attempt that ran out of time is the
    /// step's timeout, any other its last failure.
    fn final_failure(
        &self,
        slot: &Slot,
        cfg: StepConfig,
        last: Attempt,
        failure: StepFailure,
    ) -> Option<RunError> {
        if !failure.retryable {
            return Some(RunError::NonRetryable {
                step: slot.name.clone(),
                failure,
            });
        }
        let attempt = last.number;
        if attempt <= cfg.retries.limit {
            return None;
        }
        Some(if last.timed_out {
            RunError::StepTimedOut {
                step: slot.name.clone(),
                timeout_ms: cfg.timeout_ms,
            }
        } else {
            RunError::RetriesExhausted {
                step: slot.name.clone(),
                attempts: attempt,
                last: failure,
            }
        })
    }

    /// A failed attempt that will be retried: one log line.
    fn log_retry(&self, slot: &Slot, attempt: u32, failure: &StepFailure, delay_ms: i64) {
        obs::event(Kind::StepFailed)
            .about(&self.subject)
            .field("step", slot.name.as_str())
            .field("attempt", attempt)
            .field("final", false)
            .field("error_tag", failure.tag.as_str())
            .message("error", &failure.message)
            .field("retry_in_ms", delay_ms)
            .emit();
    }

    fn write_retrying(
        &self,
        slot: &Slot,
        attempts: u32,
        started_ms: i64,
        failure: &StepFailure,
        wake_ms: i64,
    ) -> Result<(), RunError> {
        self.write(Entry {
            state: EntryState::Retrying,
            value: None,
            error_tag: Some(failure.tag.clone()),
            error_message: Some(failure.message.clone()),
            attempts,
            wake_at_ms: Some(wake_ms),
            finished_ms: None,
            ..self.blank(slot, EntryKind::Step, started_ms)
        })
    }

    /// A pause or terminate raised during an in-process backoff is met
    /// before the next attempt starts: the step is left retrying, so the
    /// pass after a resume starts that attempt.
    fn meet_interrupt(
        &self,
        slot: &Slot,
        attempts: u32,
        started_ms: i64,
        failure: &StepFailure,
    ) -> Result<(), RunError> {
        if !self.interrupted() {
            return Ok(());
        }
        let now = self.clock.now_ms();
        self.write_retrying(slot, attempts, started_ms, failure, now)?;
        self.check_interrupt()
    }

    fn fail_ceiling(&self, slot: &Slot, attempts: u32, started_ms: i64, what: &str) -> RunError {
        let err = self.ceiling(&slot.name, what);
        self.fail(slot, EntryKind::Step, attempts, started_ms, err)
    }

    /// A step's retry waits for its backoff: a cleanup step's retries are
    /// not cut at the ceiling (they run past it).
    fn suspend_step(&self, wake_ms: i64, slot: &Slot, kind: StepKind) -> RunError {
        let waiting_on = format!("retry of step {:?}", slot.name);
        match kind {
            StepKind::Normal => self.suspend(wake_ms, waiting_on),
            StepKind::Cleanup => RunError::Suspended {
                wake_at_ms: wake_ms,
                waiting_on,
            },
        }
    }

    fn decode_replayed<T: DeserializeOwned>(&self, slot: &Slot, json: &str) -> Result<T, RunError> {
        serde_json::from_str(json).map_err(|err| RunError::JournalMismatch {
            index: slot.seq,
            expected: format!("result of {:?} as journaled", slot.name),
            actual: format!("a type that does not decode it: {err}"),
        })
    }

    /// A step whose output may exceed the 1 MiB result limit: the body's
    /// text goes to object storage (R2) and the step journals and returns
    /// its key (ADR-0001 rule 2). Read it back with `read_blob`.
    pub async fn step_to_blob<F, Fut>(
        &self,
        name: &str,
        cfg: StepConfig,
        mut body: F,
    ) -> Result<String, RunError>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<String, StepFailure>>,
    {
        let blobs = self.blobs.ok_or_else(|| RunError::InvalidStep {
            step: name.to_owned(),
            reason: "no object storage is configured for large step results".into(),
        })?;
        let key = format!(
            "steps/{}/g{}/{}",
            self.subject.instance_id,
            self.generation,
            self.cursor.get()
        );
        let key_ref = key.as_str();
        self.step(name, cfg, |attempt| {
            let text = body(attempt);
            async move {
                let text = text.await?;
                blobs
                    .put_text(key_ref, &text)
                    .await
                    .map_err(|m| StepFailure::retryable("BlobStoreFailed", m))?;
                Ok(key_ref.to_owned())
            }
        })
        .await
    }

    /// Reads a large step result stored by `step_to_blob`.
    pub async fn read_blob(&self, key: &str) -> Result<Option<String>, RunError> {
        let blobs = self.blobs.ok_or_else(|| RunError::Store {
            message: "no object storage is configured".into(),
        })?;
        self.flush()?;
        blobs
            .get_text(key)
            .await
            .map_err(|m| RunError::Store { message: m })
    }

    /// Suspends the instance for `ms` (at most 365 days).
    pub async fn sleep(&self, name: &str, ms: i64) -> Result<(), RunError> {
        if !(0..=SLEEP_MS_MAX).contains(&ms) {
            return Err(RunError::InvalidStep {
                step: name.to_owned(),
                reason: format!("sleep of {ms} ms is outside 0..={SLEEP_MS_MAX}"),
            });
        }
        self.sleep_to(name, |now| now + ms).await
    }

    /// Suspends the instance until `at_ms` (at most 365 days ahead).
    pub async fn sleep_until(&self, name: &str, at_ms: i64) -> Result<(), RunError> {
        let now = self.clock.now_ms();
        if at_ms - now > SLEEP_MS_MAX {
            return Err(RunError::InvalidStep {
                step: name.to_owned(),
                reason: format!("sleep_until {at_ms} is more than 365 days ahead"),
            });
        }
        self.sleep_to(name, |_| at_ms).await
    }

    async fn sleep_to(&self, name: &str, wake_of: impl FnOnce(i64) -> i64) -> Result<(), RunError> {
        let slot = self.slot(name, EntryKind::Sleep)?;
        let now = self.clock.now_ms();
        let (wake, started_ms) = match &slot.existing {
            Some(e) => match e.state {
                EntryState::Done => {
                    self.bump(|s| s.replayed += 1);
                    return Ok(());
                }
                EntryState::Failed => return Err(self.replayed_error(e)),
                EntryState::Waiting => (e.wake_at_ms.unwrap_or(now), e.started_ms),
                EntryState::Retrying => return Err(self.mismatch(&slot, e, EntryKind::Sleep)),
            },
            None => {
                self.check_interrupt()?;
                (wake_of(now), now)
            }
        };
        if now >= wake {
            self.write(Entry {
                state: EntryState::Done,
                finished_ms: Some(now),
                wake_at_ms: Some(wake),
                ..self.blank(&slot, EntryKind::Sleep, started_ms)
            })?;
            return Ok(());
        }
        if now >= self.ceiling_at_ms.get() {
            let err = self.ceiling(&slot.name, "sleep");
            return Err(self.fail(&slot, EntryKind::Sleep, 0, started_ms, err));
        }
        if slot.existing.is_none() {
            self.write(Entry {
                state: EntryState::Waiting,
                wake_at_ms: Some(wake),
                ..self.blank(&slot, EntryKind::Sleep, started_ms)
            })?;
        }
        Err(self.suspend(wake, format!("sleep {:?}", slot.name)))
    }

    /// Waits for an event of `event_type`, at most `timeout_ms`. An event
    /// sent before the wait is kept and consumed here, oldest first. A
    /// timeout is `RunError::EventTimedOut`, which the run may catch.
    pub async fn wait_for_event(
        &self,
        name: &str,
        event_type: &str,
        timeout_ms: i64,
    ) -> Result<Value, RunError> {
        if !(0..=SLEEP_MS_MAX).contains(&timeout_ms) {
            return Err(RunError::InvalidStep {
                step: name.to_owned(),
                reason: format!("event timeout of {timeout_ms} ms is outside 0..={SLEEP_MS_MAX}"),
            });
        }
        let slot = self.slot(name, EntryKind::Wait)?;
        let now = self.clock.now_ms();
        let (wake, started_ms) = match &slot.existing {
            Some(e) => match e.state {
                EntryState::Done => return self.replayed(e),
                EntryState::Failed => return Err(self.replayed_error(e)),
                EntryState::Waiting => (e.wake_at_ms.unwrap_or(now), e.started_ms),
                EntryState::Retrying => return Err(self.mismatch(&slot, e, EntryKind::Wait)),
            },
            None => {
                self.check_interrupt()?;
                (now + timeout_ms, now)
            }
        };
        if let Some(event) = self.journal.next_event(event_type)? {
            let entry = Entry {
                state: EntryState::Done,
                value: Some(event.payload.clone()),
                finished_ms: Some(now),
                wake_at_ms: Some(wake),
                rev: self.take_rev(),
                ..self.blank(&slot, EntryKind::Wait, started_ms)
            };
            self.flush()?;
            self.journal_write(|| self.journal.consume_event(event.seq, &entry))?;
            self.remember(entry);
            return serde_json::from_str(&event.payload).map_err(|e| RunError::InvalidInput {
                message: format!("event payload: {e}"),
            });
        }
        if now >= wake {
            let err = RunError::EventTimedOut {
                step: slot.name.clone(),
                event_type: event_type.to_owned(),
                timeout_ms,
            };
            return Err(self.fail(&slot, EntryKind::Wait, 0, started_ms, err));
        }
        if now >= self.ceiling_at_ms.get() {
            let err = self.ceiling(&slot.name, "wait for event");
            return Err(self.fail(&slot, EntryKind::Wait, 0, started_ms, err));
        }
        if slot.existing.is_none() {
            self.write(Entry {
                state: EntryState::Waiting,
                wake_at_ms: Some(wake),
                ..self.blank(&slot, EntryKind::Wait, started_ms)
            })?;
        }
        Err(self.suspend(wake, format!("event {event_type:?} for {:?}", slot.name)))
    }

    // --- positions and journal writes ---

    fn slot(&self, name: &str, kind: EntryKind) -> Result<Slot, RunError> {
        if name.is_empty() || name.chars().count() > STEP_NAME_CHARS_MAX {
            return Err(RunError::InvalidStep {
                step: name.chars().take(64).collect(),
                reason: format!("step names are 1 to {STEP_NAME_CHARS_MAX} characters"),
            });
        }
        let keyed = {
            let mut occ = self.occurrences.borrow_mut();
            // Looked up before inserting: a name seen before (a loop's
            // steps) is not copied again for the lookup.
            match occ.get_mut(name) {
                Some(n) => {
                    *n += 1;
                    format!("{name}#{n}")
                }
                None => {
                    occ.insert(name.to_owned(), 1);
                    name.to_owned()
                }
            }
        };
        if let Some(why) = self.write_failed.borrow().as_ref() {
            return Err(RunError::Store {
                message: format!("a journal write of this pass failed: {why}"),
            });
        }
        let seq = self.cursor.get();
        self.cursor.set(seq + 1);
        let existing = self.entries.borrow().get(seq as usize).cloned();
        if let Some(e) = &existing {
            if e.name != keyed || e.kind != kind {
                return Err(RunError::JournalMismatch {
                    index: seq,
                    expected: format!("{} {:?}", e.kind.as_str(), e.name),
                    actual: format!("{} {:?}", kind.as_str(), keyed),
                });
            }
        } else if seq >= self.max_steps {
            return Err(RunError::StepLimitExceeded {
                limit: self.max_steps,
            });
        }
        Ok(Slot {
            seq,
            name: keyed,
            existing,
        })
    }

    fn mismatch(&self, slot: &Slot, e: &Entry, kind: EntryKind) -> RunError {
        RunError::JournalMismatch {
            index: slot.seq,
            expected: format!(
                "{} {:?} in state {}",
                e.kind.as_str(),
                e.name,
                e.state.as_str()
            ),
            actual: format!("{} {:?}", kind.as_str(), slot.name),
        }
    }

    fn blank(&self, slot: &Slot, kind: EntryKind, started_ms: i64) -> Entry {
        Entry {
            seq: slot.seq,
            name: slot.name.clone(),
            kind,
            state: EntryState::Done,
            value: None,
            error_tag: None,
            error_message: None,
            attempts: 0,
            started_ms,
            finished_ms: None,
            wake_at_ms: None,
            rev: 0,
        }
    }

    fn take_rev(&self) -> i64 {
        let rev = self.next_rev.get();
        self.next_rev.set(rev + 1);
        rev
    }

    fn remember(&self, entry: Entry) {
        self.bump(|s| s.journal_writes += 1);
        let mut entries = self.entries.borrow_mut();
        let i = entry.seq as usize;
        if i < entries.len() {
            entries[i] = entry;
        } else {
            entries.push(entry);
        }
    }

    /// One journal write: the only way the context changes the journal
    /// (with `flush`, whose entries it writes first, in order).
    fn write(&self, mut entry: Entry) -> Result<(), RunError> {
        self.flush()?;
        entry.rev = self.take_rev();
        self.journal_write(|| self.journal.put_entry(&entry))?;
        self.remember(entry);
        Ok(())
    }

    /// Why a journal write of this pass failed, if one did: the pass then
    /// counts as crashed whatever the body made of the error.
    pub(crate) fn write_failure(&self) -> Option<String> {
        self.write_failed.borrow().clone()
    }

    /// A write to the journal; its failure is remembered (`write_failed`).
    fn journal_write(
        &self,
        write: impl FnOnce() -> Result<(), StoreError>,
    ) -> Result<(), RunError> {
        write().map_err(|e| {
            *self.write_failed.borrow_mut() = Some(e.to_string());
            RunError::from(e)
        })
    }

    /// Before a step body, which may start I/O: what it can have read is
    /// written first, and the instance's index row (a gate's claim reads it).
    async fn before_body(&self) -> Result<(), RunError> {
        self.flush()?;
        self.write_pending_row().await
    }

    /// Writes the instance's index row if only the object has it; a failure
    /// ends what the pass may do, as a failed journal write does.
    async fn write_pending_row(&self) -> Result<(), RunError> {
        let Some(row) = self.pending_row else {
            return Ok(());
        };
        row.write().await.map_err(|e| {
            *self.write_failed.borrow_mut() = Some(format!("the instance's index row: {e}"));
            RunError::from(e)
        })
    }

    /// Writes the inline steps' entries held so far, in one statement.
    /// The executor calls it when the body returns, so a pass never ends
    /// with an inline step unwritten.
    pub(crate) fn flush(&self) -> Result<(), RunError> {
        if self.unwritten.borrow().is_empty() {
            return Ok(());
        }
        let entries = self.unwritten.take();
        self.journal_write(|| self.journal.put_entries(&entries))?;
        self.unwritten_bytes.set(0);
        self.bump(|s| s.journal_flushes += 1);
        Ok(())
    }

    /// A step's result as the journal keeps it; too large fails the step.
    fn encode_result<T: Serialize>(
        &self,
        slot: &Slot,
        attempt: u32,
        started_ms: i64,
        value: &T,
    ) -> Result<String, RunError> {
        let json = serde_json::to_string(value).map_err(|e| RunError::InvalidStep {
            step: slot.name.clone(),
            reason: format!("result does not serialize: {e}"),
        })?;
        if json.len() > STEP_RESULT_BYTES_MAX {
            let err = RunError::StepResultTooLarge {
                step: slot.name.clone(),
                bytes: json.len(),
                max_bytes: STEP_RESULT_BYTES_MAX,
            };
            return Err(self.fail(slot, EntryKind::Step, attempt, started_ms, err));
        }
        Ok(json)
    }

    fn complete_step<T: Serialize>(
        &self,
        slot: &Slot,
        attempt: u32,
        started_ms: i64,
        value: T,
    ) -> Result<T, RunError> {
        let json = self.encode_result(slot, attempt, started_ms, &value)?;
        self.write(Entry {
            state: EntryState::Done,
            value: Some(json),
            attempts: attempt,
            finished_ms: Some(self.clock.now_ms()),
            ..self.blank(slot, EntryKind::Step, started_ms)
        })?;
        Ok(value)
    }

    /// Journals a typed failure; replay returns the same error.
    fn fail(
        &self,
        slot: &Slot,
        kind: EntryKind,
        attempts: u32,
        started_ms: i64,
        err: RunError,
    ) -> RunError {
        obs::event(Kind::StepFailed)
            .about(&self.subject)
            .field("step", slot.name.as_str())
            .field("kind", kind.as_str())
            .field("attempt", attempts)
            .field("final", true)
            .field("error_tag", err.tag())
            .message("error", &err.to_string())
            .emit();
        let entry = Entry {
            state: EntryState::Failed,
            value: serde_json::to_string(&err).ok(),
            error_tag: Some(err.tag().to_owned()),
            error_message: Some(err.to_string()),
            attempts,
            finished_ms: Some(self.clock.now_ms()),
            ..self.blank(slot, kind, started_ms)
        };
        match self.write(entry) {
            Ok(()) => err,
            Err(store) => store,
        }
    }

    fn replayed<T: DeserializeOwned>(&self, e: &Entry) -> Result<T, RunError> {
        self.bump(|s| s.replayed += 1);
        let json = e.value.as_deref().unwrap_or("null");
        serde_json::from_str(json).map_err(|err| RunError::JournalMismatch {
            index: e.seq,
            expected: format!("result of {:?} as journaled", e.name),
            actual: format!("a type that does not decode it: {err}"),
        })
    }

    fn replayed_error(&self, e: &Entry) -> RunError {
        self.bump(|s| s.replayed += 1);
        e.value
            .as_deref()
            .and_then(|v| serde_json::from_str::<RunError>(v).ok())
            .unwrap_or_else(|| RunError::Store {
                message: format!("journaled error of {:?} does not decode", e.name),
            })
    }

    fn ceiling(&self, name: &str, what: &str) -> RunError {
        RunError::RunDurationExceeded {
            max_duration_ms: self.max_duration_ms.get(),
            in_progress: format!("{what} {name:?}"),
        }
    }

    /// Suspends until `wake_ms`, or the run ceiling if that comes first (the
    /// pass then fails `RunDurationExceeded` naming this call).
    fn suspend(&self, wake_ms: i64, waiting_on: String) -> RunError {
        RunError::Suspended {
            wake_at_ms: wake_ms.min(self.ceiling_at_ms.get()),
            waiting_on,
        }
    }

    /// Whether an operator's terminate or pause (or a newer run's
    /// terminate) waits for this pass's next durable call: a step that
    /// waits long (a command's long-polls) ends early so it is honoured.
    pub fn interrupted(&self) -> bool {
        self.interrupt.get().is_some()
    }

    fn check_interrupt(&self) -> Result<(), RunError> {
        match self.interrupt.get() {
            None => Ok(()),
            Some(Interrupt::Terminate) => Err(RunError::Terminated),
            Some(Interrupt::Pause) => Err(RunError::Suspended {
                wake_at_ms: i64::MAX,
                waiting_on: "pause".into(),
            }),
        }
    }
}
