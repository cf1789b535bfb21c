//! The cron sweep (every minute in production; `npm start` drives it under
//! `wrangler dev`): the fallback for everything that is pushed. It resumes
//! instances whose wake-up is overdue (a lost alarm, a crashed executor),
//! wakes the waiter that takes a group nobody live holds (a lost handoff,
//! a dead holder past `HOLDER_STALE_MS`), tells waiters a gate operation
//! ended that slept through it, finalizes finished instances that still
//! hold gate rows or a live process (a finalize that failed, a kill not yet
//! confirmed), and purges what is past retention.
//!
//! Architecture invariant: the decisions are here, over small interfaces;
//! `worker_glue::scheduled` only builds them.

use async_trait::async_trait;
use serde_json::Value;

use crate::engine::{CreateRequest, InstanceId, Status};
use crate::gates::{serial, sweep as gate_sweep};
use crate::limits::{PURGE_BATCH_MAX, SWEEP_BATCH_MAX, SWEEP_OVERDUE_MS};
use crate::store::executions;
use crate::store::Database;

use crate::runs::kit::gate::TURN_EVENT;
use crate::runs::kit::inputs::PullNumber;
use crate::runs::kit::preview::{reconcile_request, ReconcileInput};
use crate::runs::kit::Waker;
use crate::store::previews;

/// How long a live preview goes unasked before the sweep asks GitHub
/// whether its pull request closed (a `preview-reconcile` instance): a
/// close event GitHub never delivered is torn down within this plus one
/// sweep (`SWEEP_INTERVAL_MS`) plus the teardown's own run
/// (`PREVIEW_TEARDOWN_LATE_MS_MAX`), at one GitHub call per live preview
/// per interval. `PREVIEW_RECONCILE_INTERVAL` sets another.
pub const PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT: i64 = 10 * 60 * 1000;
/// The shortest and longest interval an operator may set: at least one
/// sweep apart, and at most a day (a preview left a day costs little more
/// than one left ten minutes; a week would be the leak this prevents).
pub const PREVIEW_RECONCILE_INTERVAL_MS_MIN: i64 = crate::limits::SWEEP_INTERVAL_MS / 2;
pub const PREVIEW_RECONCILE_INTERVAL_MS_MAX: i64 = 24 * 3600 * 1000;
/// How late, after GitHub closed its pull request, a preview whose close
/// event never arrived starts its teardown at the default interval.
pub const PREVIEW_TEARDOWN_LATE_MS_MAX: i64 =
    PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT + crate::limits::SWEEP_INTERVAL_MS;
/// Live previews one sweep reconciles: one instance and one GitHub call
/// each; the rest are the next sweep's, so 20 per minute reconciles 200
/// live previews within the default interval.
pub const PREVIEW_RECONCILE_BATCH_MAX: u32 = 20;
const _: () = assert!(PREVIEW_RECONCILE_INTERVAL_MS_MIN <= PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT);
const _: () = assert!(PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT <= PREVIEW_RECONCILE_INTERVAL_MS_MAX);

/// The reconcile interval an operator's `PREVIEW_RECONCILE_INTERVAL` asks
/// for, within its bounds; the default when unset or unreadable.
pub fn preview_reconcile_ms_of(configured: Option<&str>) -> i64 {
    configured
        .and_then(|v| crate::runs::kit::config::parse_duration_ms(v).ok())
        .map_or(PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT, |ms| {
            ms.clamp(
                PREVIEW_RECONCILE_INTERVAL_MS_MIN,
                PREVIEW_RECONCILE_INTERVAL_MS_MAX,
            )
        })
}

/// The run instances themselves (their Durable Objects in the Worker).
#[async_trait(?Send)]
pub trait Instances {
    /// Resumes an instance, recreating it from `create` if its object lost
    /// the create.
    async fn poke(&self, create: &CreateRequest) -> Result<(), String>;
    /// Wipes a finished instance's own storage.
    async fn purge(&self, id: &InstanceId) -> Result<(), String>;
}

/// Releases what a finished instance still holds (`RunRegistry::finalize`
/// with the services of that instance).
#[async_trait(?Send)]
pub trait Finalizer {
    async fn finalize(
        &self,
        run: &str,
        instance_id: &str,
        input: &Value,
        status: Status,
    ) -> Result<(), String>;
}

/// Counts of one sweep, logged.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SweepReport {
    pub resumed: u32,
    pub woken: u32,
    pub finalized: u32,
    pub purged: u32,
    /// Live previews whose pull request is asked about (`preview-reconcile`).
    pub reconciled: u32,
    pub failed: u32,
}

pub struct Sweep<'a> {
    pub db: &'a dyn Database,
    pub instances: &'a dyn Instances,
    pub waker: &'a dyn Waker,
    pub finalizer: &'a dyn Finalizer,
    /// Where artifacts are stored: past the retention they are deleted.
    pub blobs: &'a dyn crate::blobs::Blobs,
    pub retention_ms: i64,
    /// `PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT` unless the operator set one.
    pub preview_reconcile_ms: i64,
}

impl Sweep<'_> {
    /// One sweep at `now_ms`. Every part is bounded by a batch size; what
    /// is left over is the next sweep's.
    pub async fn run(&self, now_ms: i64) -> SweepReport {
        let mut report = SweepReport::default();
        self.resume_overdue(now_ms, &mut report).await;
        self.wake_heads(now_ms, &mut report).await;
        self.finalize_unreleased(&mut report).await;
        self.reconcile_previews(now_ms, &mut report).await;
        self.purge(now_ms, &mut report).await;
        report
    }

    /// Live previews nobody asked GitHub about for the reconcile interval:
    /// each gets a `preview-reconcile` instance of this interval's slot,
    /// which asks whether its pull request closed (ADR-0001 rule 4:
    /// docs/adr/0001-durable-execution-scope.md). Marked asked first, so a
    /// failed poke is retried an interval later, never every minute.
    async fn reconcile_previews(&self, now_ms: i64, report: &mut SweepReport) {
        let interval_ms = self.preview_reconcile_ms.max(1);
        let before_ms = now_ms - interval_ms;
        let rows = match previews::due_for_reconcile(
            self.db,
            before_ms,
            PREVIEW_RECONCILE_BATCH_MAX,
        )
        .await
        {
            Ok(rows) => rows,
            Err(_) => {
                report.failed += 1;
                return;
            }
        };
        for row in rows {
            let Some(pr) = u64::try_from(row.pr).ok().and_then(PullNumber::new) else {
                continue;
            };
            if previews::checked(self.db, &row.repo, row.pr, now_ms)
                .await
                .is_err()
            {
                report.failed += 1;
                continue;
            }
            let input = ReconcileInput {
                slot: 0,
                repo: row.repo,
                pr,
                installation_id: u64::try_from(row.installation_id).unwrap_or(0),
                sha: row.sha,
                head_branch: row.head_branch,
                default_branch: row.default_branch,
                fork: row.fork != 0,
            };
            match self
                .instances
                .poke(&reconcile_request(&input, now_ms / interval_ms))
                .await
            {
                Ok(()) => report.reconciled += 1,
                Err(_) => report.failed += 1,
            }
        }
    }

    async fn resume_overdue(&self, now_ms: i64, report: &mut SweepReport) {
        let rows =
            match executions::overdue(self.db, now_ms - SWEEP_OVERDUE_MS, SWEEP_BATCH_MAX).await {
                Ok(rows) => rows,
                Err(_) => {
                    report.failed += 1;
                    return;
                }
            };
        for row in rows {
            let create = CreateRequest {
                // Its row is what named it.
                indexed: true,
                key: row.key,
                run: row.run,
                input: serde_json::from_str(&row.input_json).unwrap_or(Value::Null),
                repo: row.repo,
                entity: row.entity,
                sha: row.sha,
                max_steps: None,
                max_duration_ms: None,
            };
            match self.instances.poke(&create).await {
                Ok(()) => report.resumed += 1,
                Err(_) => report.failed += 1,
            }
        }
    }

    /// Heads of groups nobody live holds, and waiters that slept through
    /// the end of their row: one wake each (a wake is an event, so a second
    /// one is harmless).
    async fn wake_heads(&self, now_ms: i64, report: &mut SweepReport) {
        let mut ids: Vec<String> = Vec::new();
        match gate_sweep::heads_to_wake(self.db, now_ms, SWEEP_BATCH_MAX).await {
            Ok(heads) => ids.extend(heads.into_iter().map(|h| h.execution_id)),
            Err(_) => report.failed += 1,
        }
        match gate_sweep::ended_unnoticed(self.db, now_ms, SWEEP_BATCH_MAX).await {
            Ok(rows) => ids.extend(rows),
            Err(_) => report.failed += 1,
        }
        for id in ids {
            let instance = serial::instance_of(&id);
            match self.waker.wake(instance, TURN_EVENT).await {
                Ok(()) => report.woken += 1,
                Err(_) => report.failed += 1,
            }
        }
    }

    async fn finalize_unreleased(&self, report: &mut SweepReport) {
        let rows = match gate_sweep::unreleased(self.db, SWEEP_BATCH_MAX).await {
            Ok(rows) => rows,
            Err(_) => {
                report.failed += 1;
                return;
            }
        };
        for row in rows {
            let input: Value = serde_json::from_str(&row.input_json).unwrap_or(Value::Null);
            let Some(status) = Status::parse(&row.status) else {
                report.failed += 1;
                continue;
            };
            match self
                .finalizer
                .finalize(&row.run, &row.id, &input, status)
                .await
            {
                Ok(()) => report.finalized += 1,
                Err(_) => report.failed += 1,
            }
        }
    }

    async fn purge(&self, now_ms: i64, report: &mut SweepReport) {
        let before = now_ms - self.retention_ms;
        match executions::finished_before(self.db, before, PURGE_BATCH_MAX).await {
            Ok(ids) => {
                for id in ids {
                    // A job's snapshots its end did not delete.
                    crate::runs::kit::snapshots::discard(self.blobs, &id).await;
                    let purged = match InstanceId::parse(&id) {
                        Ok(iid) => match self.instances.purge(&iid).await {
                            Ok(()) => executions::delete(self.db, &id)
                                .await
                                .map_err(|e| e.to_string()),
                            Err(e) => Err(e),
                        },
                        Err(e) => Err(e.to_string()),
                    };
                    match purged {
                        Ok(()) => report.purged += 1,
                        Err(_) => report.failed += 1,
                    }
                }
            }
            Err(_) => report.failed += 1,
        }
        match gate_sweep::purge_ended(self.db, before, PURGE_BATCH_MAX).await {
            Ok(n) => report.purged += u32::try_from(n).unwrap_or(u32::MAX),
            Err(_) => report.failed += 1,
        }
        match executions::purge_deliveries(self.db, before, PURGE_BATCH_MAX).await {
            Ok(n) => report.purged += u32::try_from(n).unwrap_or(u32::MAX),
            Err(_) => report.failed += 1,
        }
        match crate::store::dispatch::purge_signatures(self.db, now_ms).await {
            Ok(n) => report.purged += u32::try_from(n).unwrap_or(u32::MAX),
            Err(_) => report.failed += 1,
        }
        match crate::store::releases::purge_decided(self.db, before, PURGE_BATCH_MAX).await {
            Ok(n) => report.purged += u32::try_from(n).unwrap_or(u32::MAX),
            Err(_) => report.failed += 1,
        }
        self.purge_artifacts(before, report).await;
    }

    /// Artifacts past the retention: the bytes first, then the row (a row
    /// left by a failed delete is tried again by the next sweep).
    async fn purge_artifacts(&self, before: i64, report: &mut SweepReport) {
        let rows = match crate::store::artifacts::older_than(self.db, before, PURGE_BATCH_MAX).await
        {
            Ok(rows) => rows,
            Err(_) => {
                report.failed += 1;
                return;
            }
        };
        for row in rows {
            let gone = match self.blobs.delete(&row.r2_key).await {
                Ok(()) => crate::store::artifacts::forget(self.db, &row.instance_id)
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            match gone {
                Ok(()) => report.purged += 1,
                Err(_) => report.failed += 1,
            }
        }
    }
}
