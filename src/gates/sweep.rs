//! What the cron sweep asks of the gates: the fallback for every push the
//! gates rely on. A release hands a freed group to its next waiter at once;
//! when that wake-up is lost, or the holder died without releasing, the
//! sweep finds the group here within one interval and wakes the waiter
//! whose claim takes it. An instance that ended without releasing what it
//! held (a finalize that failed) is found here until it has released all.
//!
//! Architecture invariant: no I/O but `Database`, no clock, no `worker`.

use serde::Deserialize;

use crate::limits::{HOLDER_STALE_MS, RUN_DURATION_MS_MAX, SWEEP_OVERDUE_MS};
use crate::stmt;
use crate::store::sql::{decode, Database, StoreError};

use super::{fence, serial};

/// The waiter to wake in a group that nobody live holds.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Head {
    pub group_key: String,
    pub execution_id: String,
}

/// Groups with no live holder (none, or one silent past `HOLDER_STALE_MS`)
/// and a live waiter: the oldest live waiter of each, the one whose claim
/// takes the group (FIFO among live waiters, as `serial::claim` decides).
pub async fn heads_to_wake(
    db: &dyn Database,
    now_ms: i64,
    limit: u32,
) -> Result<Vec<Head>, StoreError> {
    decode(
        db.all(stmt!(
            "SELECT w.group_key, w.execution_id FROM serial_queue w \
             WHERE w.state = 'waiting' \
               AND EXISTS (SELECT 1 FROM executions e WHERE e.id = w.instance_id \
                 AND e.status IN ('queued','running','waiting')) \
               AND NOT EXISTS (SELECT 1 FROM serial_queue h WHERE h.group_key = w.group_key \
                 AND h.state = 'holding' AND h.heartbeat_ms >= ?1) \
               AND NOT EXISTS (SELECT 1 FROM serial_queue o WHERE o.group_key = w.group_key \
                 AND o.state = 'waiting' AND o.seq < w.seq \
                 AND EXISTS (SELECT 1 FROM executions e2 WHERE e2.id = o.instance_id \
                   AND e2.status IN ('queued','running','waiting'))) \
             ORDER BY w.seq LIMIT ?2",
            now_ms.saturating_sub(HOLDER_STALE_MS),
            limit,
        ))
        .await?,
    )
}

/// Waiters whose row a gate operation ended (superseded by a newer
/// arrival, skipped by an operator, timed out) while their instance slept
/// on, not yet told: their instance has not run since the row ended. Rows
/// that ended in the last `SWEEP_OVERDUE_MS` are left to the direct wake.
pub async fn ended_unnoticed(
    db: &dyn Database,
    now_ms: i64,
    limit: u32,
) -> Result<Vec<String>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        execution_id: String,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "SELECT q.execution_id FROM serial_queue q JOIN executions e ON e.id = q.instance_id \
             WHERE q.state IN ('superseded','skipped','timed_out') \
               AND q.updated_ms < ?1 AND q.updated_ms >= ?2 \
               AND e.status = 'waiting' AND e.updated_ms < q.updated_ms \
             ORDER BY q.updated_ms LIMIT ?3",
            now_ms.saturating_sub(SWEEP_OVERDUE_MS),
            now_ms.saturating_sub(RUN_DURATION_MS_MAX),
            limit,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().map(|r| r.execution_id).collect())
}

/// A finished instance that still holds a gate row or a live process.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Unreleased {
    pub id: String,
    pub run: String,
    pub input_json: String,
    pub status: String,
}

/// Finished instances with a live serial row, a pool slot, a lease (of its
/// own sandbox or of an image class's, `<id>~<class>.<type>`) or a process
/// not known to have ended: their finalize must run (again). Read from the
/// gate tables, which hold only what is live, not from the whole
/// executions index.
pub async fn unreleased(db: &dyn Database, limit: u32) -> Result<Vec<Unreleased>, StoreError> {
    decode(
        db.all(stmt!(
            "SELECT e.id, e.run, e.input_json, e.status FROM executions e \
             WHERE e.status IN ('errored','terminated','complete','skipped') AND e.id IN ( \
               SELECT instance_id FROM serial_queue WHERE state IN ('waiting','holding') \
               UNION SELECT holder FROM pool_slots \
               UNION SELECT substr(sandbox_id, 1, instr(sandbox_id || '~', '~') - 1) FROM container_leases \
               UNION SELECT instance_id FROM sandbox_processes WHERE state = 'live') \
             ORDER BY e.finished_ms LIMIT ?1",
            limit,
        ))
        .await?,
    )
}

/// Deletes gate rows that ended before `before_ms` (serial rows in a final
/// state, processes marked ended), at most `limit` of each. Returns how many.
pub async fn purge_ended(db: &dyn Database, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
    let rows = serial::purge_ended(db, before_ms, limit).await?;
    Ok(rows + fence::purge_ended(db, before_ms, limit).await?)
}
