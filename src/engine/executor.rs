//! The executor: creates an instance, runs passes of its body, and applies
//! operator commands. One executor per instance at a time is guaranteed by
//! the caller (a Durable Object per instance in the Worker).
//!
//! A pass loads the journal, runs the body from the top (replaying
//! journaled calls), and ends in exactly one of: suspended (a wake-up time),
//! complete, skipped, or errored. At the end of every pass the instance's
//! state and changed timeline reach D1 in one batch.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::blobs::Blobs;
use crate::cost::{CostUnits, Meter};
use crate::limits::{
    EXECUTOR_CRASHES_MAX, RUN_DURATION_MS_DEFAULT, STEPS_PER_RUN_MAX_CEILING,
    STEPS_PER_RUN_MAX_DEFAULT, STEP_RESULT_BYTES_MAX,
};
use crate::store::executions;
use crate::store::{Database, Stmt};

use super::context::{Ctx, Interrupt, InterruptFlag, PassStats};
use super::error::RunError;
use super::id::InstanceId;
use super::row::PendingRow;
use crate::clock::Clock;
use crate::journal::Status;
use crate::journal::{Entry, InstanceRecord};
use crate::obs::{self, Kind, Subject};
use crate::store::journal::JournalStore;

/// How a run body ends when it does not fail.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    Complete(Value),
    /// Ended without doing its work, with the reason (`not-configured`,
    /// `superseded`, ...; none for an operator's explicit skip) and an
    /// optional typed tag (`RunSkipped`, `SerialQueueTimedOut`).
    Skipped {
        reason: Option<String>,
        tag: Option<String>,
    },
}

/// The registered runs, by name. Implemented by `runs::Registry` in the
/// Worker and by test registries natively.
#[async_trait(?Send)]
pub trait RunRegistry {
    async fn execute(
        &self,
        run: &str,
        ctx: &Ctx<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError>;

    /// Called (perhaps more than once) after the instance became terminal
    /// by any path, including ones where the body could not clean up (an
    /// operator's terminate, a crash loop). Must be idempotent. An error
    /// means something is still held; the caller (the sweep) calls again.
    async fn finalize(
        &self,
        _run: &str,
        _instance_id: &str,
        _input: &Value,
        _status: Status,
    ) -> Result<(), String> {
        Ok(())
    }

    /// Asked before an operator's restart truncates the journal: the run
    /// undoes what the previous generation holds outside the journal (kills
    /// its process, leaves its gates) and may move the restart point earlier
    /// (a restart inside a gate re-enters it from its start). `Err` refuses
    /// the restart (409) with the reason.
    async fn prepare_restart(&self, _run: &str, req: &RestartRequest<'_>) -> Result<u32, String> {
        Ok(req.from_seq)
    }
}

/// What a run is told about a restart it may prepare for or refuse.
pub struct RestartRequest<'a> {
    pub instance_id: &'a str,
    pub input: &'a Value,
    pub status: Status,
    /// The generation being restarted (the new one is this plus one).
    pub generation: u32,
    /// The journal as the previous generation left it.
    pub entries: &'a [crate::journal::Entry],
    /// The position the operator asked to restart from (0: the top).
    pub from_seq: u32,
}

/// A request to create an instance.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CreateRequest {
    /// The semantic idempotency key, e.g. `check:octo/hello:0123456789ab:pr7`.
    pub key: String,
    pub run: String,
    pub input: Value,
    #[serde(default)]
    pub repo: Option<String>,
    #[serde(default)]
    pub entity: Option<String>,
    #[serde(default)]
    pub sha: Option<String>,
    /// Step count limit; default 10,000, at most 25,000.
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// Run ceiling; default 6 h.
    #[serde(default)]
    pub max_duration_ms: Option<i64>,
    /// The caller wrote this instance's `executions` row already, in one
    /// batch with its siblings' (a delivery's, a parent's wave, an API
    /// batch): the object's first pass writes no row of its own, so N
    /// creations cost one D1 statement rather than N (a single create's
    /// row is its first pass's to write, ADR-0018). Should the object
    /// never hear of it, the
    /// row is queued and due, and the sweep's poke creates it. Never taken
    /// from a request body the Worker did not build (`router` clears it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub indexed: bool,
}

impl CreateRequest {
    pub fn id(&self) -> InstanceId {
        InstanceId::from_key(&self.key)
    }

    /// Its index row before its object exists, with the id and input JSON
    /// the caller keeps (the row borrows them).
    pub fn requested<'a>(
        &'a self,
        id: &'a InstanceId,
        input_json: &'a str,
    ) -> executions::Requested<'a> {
        executions::Requested {
            id: id.as_str(),
            key: &self.key,
            run: &self.run,
            repo: self.repo.as_deref(),
            entity: self.entity.as_deref(),
            sha: self.sha.as_deref(),
            input_json,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Created {
    pub id: String,
    pub created: bool,
    pub status: Status,
    /// D1 has no row of it yet: its first pass writes one, and the object
    /// answers the create once it did (ADR-0018,
    /// `docs/adr/0018-a-single-creates-row-rides-its-first-pass.md`).
    #[serde(skip)]
    pub row_pending: bool,
}

/// Writes the `executions` rows of instances created together (a parent's
/// wave, an API batch) in ONE D1 batch, and marks each request `indexed`
/// so its object writes no row of its own. Rows first: an object asked to
/// create finds its row there, and a row whose object is never asked is
/// queued and due, so the sweep's poke creates it (`runs::edge::sweep`).
/// A request with its own limits (`max_steps`, `max_duration_ms`) is left
/// to its object, whose first pass writes the row once the record with its
/// limits is kept: the row cannot carry them, and the sweep would create it
/// with the defaults.
pub async fn index_creates(
    db: &dyn Database,
    creates: &mut [CreateRequest],
    now_ms: i64,
) -> Result<(), crate::store::StoreError> {
    let row_says_all = |c: &CreateRequest| c.max_steps.is_none() && c.max_duration_ms.is_none();
    let mut creates: Vec<&mut CreateRequest> =
        creates.iter_mut().filter(|c| row_says_all(c)).collect();
    if creates.is_empty() {
        return Ok(());
    }
    let ids: Vec<InstanceId> = creates.iter().map(|c| c.id()).collect();
    let inputs: Vec<String> = creates.iter().map(|c| c.input.to_string()).collect();
    let stmts = creates
        .iter()
        .zip(ids.iter().zip(&inputs))
        .map(|(c, (id, input))| {
            executions::insert_requested_now_stmt(&c.requested(id, input), now_ms)
        })
        .collect();
    db.batch(stmts).await?;
    for c in creates.iter_mut() {
        c.indexed = true;
    }
    Ok(())
}

/// How a pass ended.
#[derive(Debug, Clone, PartialEq)]
pub struct PassResult {
    pub status: Status,
    /// When the instance must run again (its alarm), if it waits on time.
    pub wake_at_ms: Option<i64>,
    pub stats: PassStats,
    /// The D1 mirror failed; D1 catches up at the next pass.
    pub mirror_error: Option<String>,
    /// Passes in a row that failed to write the instance's index row:
    /// above 0, D1 has no row of it, nothing in the index names it, and
    /// only its own alarm can retry, backing off (ADR-0018).
    pub row_refusals: u32,
    /// The instance ended: what its run's finalize reads, from the record
    /// the pass held (so the object need not read it back).
    pub ended: Option<Ended>,
}

/// An ended instance as `RunRegistry::finalize` takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub run: String,
    pub id: String,
    /// The create's input, as JSON.
    pub input: String,
}

impl Ended {
    pub fn of(rec: &InstanceRecord) -> Option<Ended> {
        rec.status.is_terminal().then(|| Ended {
            run: rec.run.clone(),
            id: rec.id.clone(),
            input: rec.input.clone(),
        })
    }
}

/// How a pass's body ended: its result, what the pass did, and the journal
/// as the pass left it (None when a journal write failed: the journal is
/// then read back).
type BodyEnd = (Result<RunOutcome, RunError>, PassStats, Option<Vec<Entry>>);

/// An operator's command on an instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Command {
    Terminate,
    Pause,
    Resume,
    /// Restart from the top, or from the first step named `from_step`.
    Restart {
        from_step: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum CommandError {
    NotFound,
    /// The command does not apply in the instance's current status.
    Conflict(String),
    /// An event payload over `STEP_RESULT_BYTES_MAX` (what it would journal).
    TooLarge(String),
    Store(String),
}

impl From<crate::store::StoreError> for CommandError {
    fn from(e: crate::store::StoreError) -> Self {
        CommandError::Store(e.to_string())
    }
}

pub struct Engine<'a> {
    pub journal: &'a dyn JournalStore,
    /// Object storage for step results over 1 MiB (`Ctx::step_to_blob`).
    pub blobs: Option<&'a dyn Blobs>,
    pub index: &'a dyn Database,
    pub clock: &'a dyn Clock,
    /// The instance's cost meter, which the glue's counted services fill
    /// (`crate::cost`); folded into the record at the end of every pass.
    /// The engine's own D1 statements it counts itself, by what it sends.
    pub meter: Option<&'a Meter>,
    /// Told when a pending index row lands (`InstanceRecord::row_pending`):
    /// the object's create answers then.
    pub on_indexed: Option<&'a dyn Fn()>,
}

impl<'a> Engine<'a> {
    /// What the meter counted since the last fold.
    fn take_costs(&self) -> CostUnits {
        self.meter.map(Meter::take).unwrap_or_default()
    }

    /// Creates the instance, or answers with the existing one (the id is the
    /// idempotency key). Nothing awaits between finding no instance and
    /// saving it. A create its caller did not index leaves the row to the
    /// first pass (`row_pending`, ADR-0018): the object answers once it
    /// landed.
    pub async fn create(&self, req: &CreateRequest) -> Result<Created, RunError> {
        if let Some(existing) = self.existing(req)? {
            return Ok(existing);
        }
        let mut rec = new_record(req, self.clock.now_ms());
        rec.costs = self.take_costs();
        // The record's own row.
        rec.costs.do_rows_written += 1;
        rec.row_pending = !req.indexed;
        self.journal.save_instance(&rec)?;
        Ok(Created {
            id: rec.id,
            created: true,
            status: Status::Queued,
            row_pending: rec.row_pending,
        })
    }

    /// The instance already here, as a create answers it. A tombstone
    /// takes the identity the create names, and is marked for its next
    /// pass to mirror: its row then reads terminated, whoever left it.
    fn existing(&self, req: &CreateRequest) -> Result<Option<Created>, RunError> {
        let Some(mut rec) = self.journal.load_instance()? else {
            return Ok(None);
        };
        if rec.id.is_empty() {
            let ended_ms = rec.finished_ms.unwrap_or(rec.created_ms);
            if self.clock.now_ms() - ended_ms > TOMBSTONE_KEPT_MS {
                // A new use of the key: the create overwrites the record.
                return Ok(None);
            }
            // Everything the create names (its input too: finalize reads it),
            // ended as the terminate left it.
            rec = new_record(req, rec.created_ms);
            finish(
                &mut rec,
                Status::Terminated,
                Some(&RunError::Terminated),
                ended_ms,
            );
            rec.mirror_pending = true;
            rec.row_pending = !req.indexed;
            self.journal.save_instance(&rec)?;
        }
        Ok(Some(Created {
            id: rec.id,
            created: false,
            status: rec.status,
            row_pending: rec.row_pending,
        }))
    }

    /// Runs one pass of the body if the instance is runnable.
    pub async fn pass(
        &self,
        runs: &dyn RunRegistry,
        interrupt: &InterruptFlag,
    ) -> Result<PassResult, RunError> {
        let pass_start = self.clock.now_ms();
        let Some(mut rec) = self.journal.load_instance()? else {
            return Err(RunError::NoInstance);
        };
        if !rec.status.is_runnable() {
            return self.idle_pass(rec).await;
        }
        let crashes = rec.passes - rec.clean_passes;
        let refusals_before = rec.row_refusals;
        let (result, stats, journal) = if crashes >= EXECUTOR_CRASHES_MAX {
            (
                Err(RunError::ExecutorCrashLoop { crashes }),
                PassStats::default(),
                None,
            )
        } else {
            self.run_body(&mut rec, runs, interrupt).await?
        };
        // A storage fault is not the run's failure: leave the instance as
        // it is (the pass counts as crashed, unless it was the row D1
        // refused) and let the alarm or the sweep retry.
        if let Err(RunError::Store { message }) = &result {
            let message = message.clone();
            return Err(match rec.row_refusals {
                n if n > refusals_before => RunError::RowRefused {
                    refusals: n,
                    message,
                },
                _ => RunError::Store { message },
            });
        }
        let now = self.clock.now_ms();
        self.settle(&mut rec, result, interrupt.get(), now);
        rec.clean_passes = rec.passes;
        rec.journal_writes += u64::from(stats.journal_writes);
        rec.index_round_trips += 1;
        rec.costs.add(&self.take_costs());
        rec.costs.do_active_ms += (now - pass_start).max(0) as u64;
        let mirror_error = self.mirror(&mut rec, now, journal).await.err();
        rec.mirror_pending = mirror_error.is_some();
        self.journal.save_instance(&rec)?;
        log_pass(&rec, &stats, mirror_error.as_deref());
        Ok(PassResult {
            status: rec.status,
            wake_at_ms: rec.wake_at_ms,
            stats,
            mirror_error,
            row_refusals: rec.row_refusals,
            ended: Ended::of(&rec),
        })
    }

    /// A finished or paused instance runs nothing; it only retries a D1
    /// mirror that failed, so the index does not keep it live, and writes
    /// a row D1 does not have yet.
    async fn idle_pass(&self, mut rec: InstanceRecord) -> Result<PassResult, RunError> {
        let mut mirror_error = None;
        if rec.mirror_pending || rec.row_pending {
            let now = self.clock.now_ms();
            rec.costs.add(&self.take_costs());
            mirror_error = self.mirror(&mut rec, now, None).await.err();
            rec.mirror_pending = mirror_error.is_some();
            self.journal.save_instance(&rec)?;
        }
        Ok(PassResult {
            status: rec.status,
            wake_at_ms: rec.wake_at_ms,
            stats: PassStats::default(),
            mirror_error,
            row_refusals: rec.row_refusals,
            ended: Ended::of(&rec),
        })
    }

    /// Runs the body from the top (replaying the journal). The record says
    /// a pass started before the body runs, so a pass that dies counts as a
    /// crash; the run's ceiling may move during the pass. With the body's
    /// result: the journal as the pass left it, unless a write failed.
    async fn run_body(
        &self,
        rec: &mut InstanceRecord,
        runs: &dyn RunRegistry,
        interrupt: &InterruptFlag,
    ) -> Result<BodyEnd, RunError> {
        let now = self.clock.now_ms();
        let unclean_history = rec.passes > rec.clean_passes;
        rec.passes += 1;
        rec.started_ms.get_or_insert(now);
        rec.status = Status::Running;
        self.journal.save_instance(rec)?;
        let row = rec
            .row_pending
            .then(|| PendingRow::new(self.index, rec, self.on_indexed));
        let ctx = Ctx::new(
            self.journal,
            self.blobs,
            self.clock,
            subject_of(rec),
            rec.generation,
            rec.started_ms.unwrap_or(now),
            rec.max_duration_ms,
            rec.max_steps,
            self.journal.entries()?,
            interrupt.clone(),
        )
        .with_pending_row(row.as_ref());
        if unclean_history {
            ctx.set_unclean_history();
        }
        let result = match serde_json::from_str::<Value>(&rec.input) {
            Ok(input) => runs.execute(&rec.run, &ctx, &input).await,
            Err(e) => Err(RunError::InvalidInput {
                message: e.to_string(),
            }),
        };
        // Inline steps' entries still held reach the journal before the
        // pass can answer or mirror anything.
        ctx.flush()?;
        // A body that swallowed a failed journal write (a best-effort step)
        // did not end cleanly: its journal lacks what it acted on.
        let result = match ctx.write_failure() {
            Some(message) => Err(RunError::Store { message }),
            None => result,
        };
        rec.max_duration_ms = ctx.max_duration_ms();
        if let Some(row) = &row {
            self.after_row(rec, row)?;
        }
        let stats = ctx.stats();
        let journal = match ctx.write_failure() {
            None => ctx.into_entries(),
            Some(_) => None,
        };
        Ok((result, stats, journal))
    }

    /// What the pass's pending row came to. Refused by D1, it stopped the
    /// pass before any step body, as an index fault and not an executor
    /// crash: the pass counts as clean, so D1 being down for a while never
    /// ends an instance as a crash loop.
    fn after_row(&self, rec: &mut InstanceRecord, row: &PendingRow) -> Result<(), RunError> {
        if row.written() {
            rec.row_pending = false;
            rec.row_refusals = 0;
            rec.index_round_trips += 1;
            rec.costs.d1_statements += 1;
            rec.costs.d1_rows_written += 1;
        } else if row.refused() {
            // This pass only: a crash before it still counts.
            rec.clean_passes += 1;
            rec.row_refusals += 1;
            self.journal.save_instance(rec)?;
        }
        Ok(())
    }

    /// Decides the instance's status from how the body ended: the one place
    /// a pass changes it.
    fn settle(
        &self,
        rec: &mut InstanceRecord,
        result: Result<RunOutcome, RunError>,
        interrupt: Option<Interrupt>,
        now: i64,
    ) {
        rec.reason = None;
        match (result, interrupt) {
            // An operator's terminate wins over any suspension, including
            // replayed waits and retry backoffs that never reached a new
            // durable call.
            (Err(RunError::Suspended { .. }), Some(Interrupt::Terminate)) => {
                finish(rec, Status::Terminated, Some(&RunError::Terminated), now)
            }
            (Err(RunError::Suspended { .. }), Some(Interrupt::Pause)) => {
                rec.status = Status::Paused;
                rec.wake_at_ms = None;
            }
            (
                Err(RunError::Suspended {
                    wake_at_ms,
                    waiting_on,
                }),
                _,
            ) => {
                rec.status = Status::Waiting;
                rec.wake_at_ms = Some(wake_at_ms);
                rec.reason = Some(waiting_on);
            }
            (Ok(RunOutcome::Complete(v)), _) => {
                let json = serde_json::to_string(&v).unwrap_or_else(|_| "null".into());
                if json.len() > STEP_RESULT_BYTES_MAX {
                    let e = RunError::StepResultTooLarge {
                        step: "(run result)".into(),
                        bytes: json.len(),
                        max_bytes: STEP_RESULT_BYTES_MAX,
                    };
                    finish(rec, Status::Errored, Some(&e), now);
                } else {
                    rec.output = Some(json);
                    finish(rec, Status::Complete, None, now);
                }
            }
            (Ok(RunOutcome::Skipped { reason, tag }), _) => {
                finish(rec, Status::Skipped, None, now);
                rec.reason = reason;
                rec.error_tag = tag;
            }
            (Err(RunError::Terminated), _) => {
                finish(rec, Status::Terminated, Some(&RunError::Terminated), now)
            }
            (Err(e), _) => finish(rec, Status::Errored, Some(&e), now),
        }
    }

    /// Sends the record and every entry written since the last mirror to D1
    /// in one batch. A pass passes the journal as it left it (`journal`),
    /// which then is not read back.
    async fn mirror(
        &self,
        rec: &mut InstanceRecord,
        now: i64,
        journal: Option<Vec<Entry>>,
    ) -> Result<(), String> {
        let (changed, step_count) = match journal {
            Some(entries) => {
                let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
                let changed = entries
                    .into_iter()
                    .filter(|e| e.rev > rec.mirrored_rev)
                    .collect();
                (changed, count)
            }
            None => (
                self.journal
                    .entries_since(rec.mirrored_rev)
                    .map_err(|e| e.to_string())?,
                self.journal.entry_count().map_err(|e| e.to_string())?,
            ),
        };
        let rows = executions::step_rows_stmts(&rec.id, &changed);
        // A restart whose own index write failed left the old generation's
        // later steps there: the journal has no step past `step_count`.
        // Only a restarted instance (generation > 0) can have such steps.

        let stale = (rec.mirror_pending && rec.generation > 0)
            .then(|| executions::delete_steps_from(&rec.id, step_count));
        // This batch counts itself: its statements, and one row per entry
        // and one for the record (index rows D1 also bills are not seen).
        rec.costs.d1_statements += 1 + rows.len() as u64 + u64::from(stale.is_some());
        rec.costs.d1_rows_written += changed.len() as u64 + 1;
        let mut stmts = self.record_stmts(rec, step_count, now);
        stmts.extend(rows);
        stmts.extend(stale);
        self.send_record(rec, stmts)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(max) = changed.iter().map(|e| e.rev).max() {
            rec.mirrored_rev = rec.mirrored_rev.max(max);
        }
        Ok(())
    }

    /// The record's row: inserted with its state while only the object has
    /// it (`row_pending`), else updated. One statement either way: a
    /// creation's index write is a fifth of its CPU locally, and D1 pays
    /// per statement (docs/capacity.md).
    fn record_stmts(&self, rec: &InstanceRecord, step_count: u32, now: i64) -> Vec<Stmt> {
        vec![match rec.row_pending {
            true => executions::upsert_stmt(rec, step_count, now),
            false => executions::record_stmt(rec, step_count, now),
        }]
    }

    /// Sends a batch that begins with `record_stmts`: D1 has the row once
    /// it succeeds; while the row is pending, its failure is a refusal.
    async fn send_record(
        &self,
        rec: &mut InstanceRecord,
        stmts: Vec<Stmt>,
    ) -> Result<(), crate::store::StoreError> {
        if let Err(e) = self.index.batch(stmts).await {
            rec.row_refusals += u32::from(rec.row_pending);
            return Err(e);
        }
        rec.row_refusals = 0;
        if std::mem::take(&mut rec.row_pending) {
            if let Some(told) = self.on_indexed {
                told();
            }
        }
        Ok(())
    }

    /// Keeps an event for the instance. Returns whether a pass should run
    /// now (the instance is waiting and may be waiting for this event).
    pub fn send_event(&self, event_type: &str, payload: &Value) -> Result<bool, CommandError> {
        let rec = self
            .journal
            .load_instance()?
            .ok_or(CommandError::NotFound)?;
        if rec.status.is_terminal() {
            return Err(CommandError::Conflict(format!(
                "instance is {}",
                rec.status.as_str()
            )));
        }
        let payload =
            serde_json::to_string(payload).map_err(|e| CommandError::Conflict(e.to_string()))?;
        // A consumed event is journaled as the wait's result: the same cap.
        if payload.len() > STEP_RESULT_BYTES_MAX {
            return Err(CommandError::TooLarge(format!(
                "an event payload of {} bytes is over the {STEP_RESULT_BYTES_MAX}-byte limit",
                payload.len()
            )));
        }
        self.journal
            .push_event(event_type, &payload, self.clock.now_ms())?;
        // Running too: an event that lands while a pass is past its wait
        // must get a pass of its own.
        Ok(rec.status.is_runnable())
    }

    /// Applies an operator command to an instance that no pass is running
    /// (a running pass is interrupted by the caller instead). Returns the
    /// new status. A restart asks the run to prepare first
    /// (`RunRegistry::prepare_restart`).
    pub async fn command(
        &self,
        runs: &dyn RunRegistry,
        cmd: &Command,
    ) -> Result<Status, CommandError> {
        let now = self.clock.now_ms();
        let Some(mut rec) = self.journal.load_instance()? else {
            if *cmd == Command::Terminate {
                self.journal.save_instance(&tombstone(now))?;
            }
            return Err(CommandError::NotFound);
        };
        let mut extra = Vec::new();
        match cmd {
            Command::Terminate => {
                if rec.status.is_terminal() {
                    return Err(CommandError::Conflict(format!(
                        "instance is already {}",
                        rec.status.as_str()
                    )));
                }
                finish(
                    &mut rec,
                    Status::Terminated,
                    Some(&RunError::Terminated),
                    now,
                );
            }
            Command::Pause => {
                if !rec.status.is_runnable() {
                    return Err(CommandError::Conflict(format!(
                        "cannot pause a {} instance",
                        rec.status.as_str()
                    )));
                }
                rec.status = Status::Paused;
                rec.wake_at_ms = None;
            }
            Command::Resume => {
                if rec.status != Status::Paused {
                    return Err(CommandError::Conflict(format!(
                        "cannot resume a {} instance",
                        rec.status.as_str()
                    )));
                }
                rec.status = Status::Waiting;
                rec.wake_at_ms = Some(now);
            }
            Command::Restart { from_step } => {
                let seq = self.restart_point(runs, &rec, from_step.as_deref()).await?;
                self.restart_from(&mut rec, seq, now)?;
                // The cut journal and the new generation are kept together,
                // before anything awaits: the run already ended what the old
                // generation started (`prepare_restart`), so a failed index
                // write below must never leave the cut journal under the old
                // generation (whose child keys and process ids name what was
                // ended). The index catches up with the next pass's mirror.
                rec.mirror_pending = true;
                self.journal.save_instance(&rec)?;
                extra.push(executions::delete_steps_from(&rec.id, seq));
            }
        }
        let restarted = matches!(cmd, Command::Restart { .. });
        self.index_command(&mut rec, extra, restarted, now).await?;
        self.journal.save_instance(&rec)?;
        Ok(rec.status)
    }

    /// Writes a command's effect to the index. A restart's failure leaves
    /// it taken: a pass runs it and mirrors it (`mirror_pending`).
    async fn index_command(
        &self,
        rec: &mut InstanceRecord,
        extra: Vec<crate::store::Stmt>,
        restarted: bool,
        now: i64,
    ) -> Result<(), CommandError> {
        let step_count = self.journal.entry_count()?;
        rec.costs.add(&self.take_costs());
        let sent = 1 + extra.len() as u64;
        rec.costs.d1_statements += sent;
        rec.costs.d1_rows_written += sent;
        let mut stmts = self.record_stmts(rec, step_count, now);
        stmts.extend(extra);
        match self.send_record(rec, stmts).await {
            Ok(()) if restarted => rec.mirror_pending = false,
            Ok(()) => {}
            Err(_) if restarted => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// Where a restart begins: the first step named `from_step` (the top
    /// when None), as the run adjusts it.
    async fn restart_point(
        &self,
        runs: &dyn RunRegistry,
        rec: &InstanceRecord,
        from_step: Option<&str>,
    ) -> Result<u32, CommandError> {
        let entries = self.journal.entries()?;
        let from_seq = match from_step {
            None => 0,
            Some(name) => entries
                .iter()
                .find(|e| e.name == name)
                .map(|e| e.seq)
                .ok_or_else(|| {
                    CommandError::Conflict(format!("no step named {name:?} in the journal"))
                })?,
        };
        let input: Value = serde_json::from_str(&rec.input).unwrap_or(Value::Null);
        let req = RestartRequest {
            instance_id: &rec.id,
            input: &input,
            status: rec.status,
            generation: rec.generation,
            entries: &entries,
            from_seq,
        };
        let seq = runs
            .prepare_restart(&rec.run, &req)
            .await
            .map_err(CommandError::Conflict)?;
        Ok(seq.min(from_seq))
    }

    /// A new generation from journal position `seq`: later entries and every
    /// event the old generation received are gone (a restart never reuses
    /// an answer given to the previous generation, such as a confirmation).
    fn restart_from(
        &self,
        rec: &mut InstanceRecord,
        seq: u32,
        now: i64,
    ) -> Result<(), CommandError> {
        self.journal.truncate_from(seq)?;
        self.journal.clear_events()?;
        // New entries take revisions above what remains; what is mirrored is
        // exactly what remains.
        rec.mirrored_rev = self
            .journal
            .entries()?
            .iter()
            .map(|e| e.rev)
            .max()
            .unwrap_or(0);
        rec.status = Status::Queued;
        rec.started_ms = None;
        rec.wake_at_ms = Some(now);
        rec.finished_ms = None;
        rec.reason = None;
        rec.error_tag = None;
        rec.error_message = None;
        rec.output = None;
        rec.passes = 0;
        rec.clean_passes = 0;
        rec.generation += 1;
        Ok(())
    }

    /// The instance's record, if it exists here.
    pub fn record(&self) -> Result<Option<InstanceRecord>, CommandError> {
        Ok(self.journal.load_instance()?)
    }
}

/// What an instance's log lines name it by.
pub fn subject_of(rec: &InstanceRecord) -> Subject {
    Subject {
        instance_id: rec.id.clone(),
        run: Some(rec.run.clone()),
        repo: rec.repo.clone(),
    }
}

/// The pass's line, and the skip's when the pass ended the instance
/// skipped (with its reason; none for an operator's silent skip).
fn log_pass(rec: &InstanceRecord, stats: &PassStats, mirror_error: Option<&str>) {
    let subject = subject_of(rec);
    let mut line = obs::event(Kind::Pass)
        .about(&subject)
        .field("pass", rec.passes)
        .field("generation", rec.generation)
        .field("status", rec.status.as_str())
        .field("wake_at_ms", rec.wake_at_ms)
        .field(
            "waiting_on",
            rec.reason.clone().filter(|_| rec.status == Status::Waiting),
        )
        .field("bodies_run", stats.bodies_run)
        .field("replayed", stats.replayed)
        .field("journal_writes", stats.journal_writes)
        .field("error_tag", rec.error_tag.clone());
    if let Some(e) = mirror_error {
        line = line.message("mirror_error", e).at_least(obs::Level::Warn);
    }
    if rec.status == Status::Errored {
        line = line.at_least(obs::Level::Warn);
    }
    line.emit();
    if rec.status == Status::Skipped {
        obs::event(Kind::Skip)
            .about(&subject)
            .field("reason", rec.reason.clone())
            .field("tag", rec.error_tag.clone())
            .field("sha", rec.sha.clone())
            .emit();
    }
}

/// A new instance's record, queued and due now.
fn new_record(req: &CreateRequest, now: i64) -> InstanceRecord {
    let max_steps = req
        .max_steps
        .unwrap_or(STEPS_PER_RUN_MAX_DEFAULT)
        .clamp(1, STEPS_PER_RUN_MAX_CEILING);
    InstanceRecord {
        id: req.id().to_string(),
        key: req.key.clone(),
        run: req.run.clone(),
        // A JSON value's text (`Display` cannot fail, as the batch's rows
        // are written: `index_creates`).
        input: req.input.to_string(),
        status: Status::Queued,
        repo: req.repo.clone(),
        entity: req.entity.clone(),
        sha: req.sha.clone(),
        created_ms: now,
        started_ms: None,
        wake_at_ms: Some(now),
        finished_ms: None,
        reason: None,
        error_tag: None,
        error_message: None,
        output: None,
        max_steps,
        max_duration_ms: req
            .max_duration_ms
            .filter(|d| *d > 0)
            .unwrap_or(RUN_DURATION_MS_DEFAULT),
        passes: 0,
        clean_passes: 0,
        mirrored_rev: 0,
        generation: 0,
        journal_writes: 0,
        index_round_trips: 0,
        costs: CostUnits::default(),
        mirror_pending: false,
        row_pending: false,
        row_refusals: 0,
    }
}

/// How long a tombstone holds its key ended: the default retention of a
/// finished instance (`RETENTION_MS_DEFAULT`, 30 days; the engine does not
/// see a `RETENTION_DAYS` that changes it), far beyond any create still on
/// its way (a delivery's create deferred at most seconds, the sweep's poke
/// of a row still queued, within minutes of D1 answering). Past it a create
/// is a new use of the key and runs: a terminate that met an object just
/// purged (an operator's, between the sweep's purge of the object and its
/// delete of the row) no longer blocks the key for good.
pub const TOMBSTONE_KEPT_MS: i64 = crate::limits::RETENTION_MS_DEFAULT;

/// What a terminate leaves in an object with no instance (a row whose
/// create has not arrived): a create that arrives later finds an ended
/// instance and runs nothing. It names no run; nothing mirrors it (the
/// caller ends the row: `executions::end_uncreated`).
fn tombstone(now: i64) -> InstanceRecord {
    let mut rec = new_record(&CreateRequest::default(), now);
    rec.id = String::new();
    finish(
        &mut rec,
        Status::Terminated,
        Some(&RunError::Terminated),
        now,
    );
    rec
}

fn finish(rec: &mut InstanceRecord, status: Status, err: Option<&RunError>, now: i64) {
    rec.status = status;
    rec.wake_at_ms = None;
    rec.finished_ms = Some(now);
    rec.error_tag = err.map(|e| e.tag().to_owned());
    rec.error_message = err.map(|e| e.to_string());
}
