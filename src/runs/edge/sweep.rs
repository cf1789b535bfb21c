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
use crate::runs::kit::Waker;

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
    pub failed: u32,
}

pub struct Sweep<'a> {
    pub db: &'a dyn Database,
    pub instances: &'a dyn Instances,
    pub waker: &'a dyn Waker,
    pub finalizer: &'a dyn Finalizer,
    pub retention_ms: i64,
}

impl Sweep<'_> {
    /// One sweep at `now_ms`. Every part is bounded by a batch size; what
    /// is left over is the next sweep's.
    pub async fn run(&self, now_ms: i64) -> SweepReport {
        let mut report = SweepReport::default();
        self.resume_overdue(now_ms, &mut report).await;
        self.wake_heads(now_ms, &mut report).await;
        self.finalize_unreleased(&mut report).await;
        self.purge(now_ms, &mut report).await;
        report
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
    }
}
