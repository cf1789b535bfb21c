//! Fencing: the processes gated runs spawn (`sandbox_processes`,
//! migrations/0004_fencing.sql). A holder spawns a process only after
//! [`fence`] recorded it, in the one statement that also verified that its
//! execution still holds its group and that no other live process of the
//! group or of the sandbox exists. So a holder that lost its group (stalled
//! past the heartbeat bound and taken over) never starts a command, and a
//! holder that took a group over waits for its predecessor's process to end
//! before it starts its own: two deploys of a group never run at once, and
//! a running one is never cancelled by a newer one (ADR-0004).
//!
//! A process is marked ended only when its exit was seen, its kill was
//! confirmed, or its sandbox does not know it once its start window has
//! passed (migrations/0010_fence_window_and_head_reads.sql): nothing is marked ended
//! because a clock passed, so a sandbox that never answers keeps its
//! group blocked (safe) rather than letting a second deploy start beside a
//! process that may still run.
//!
//! Architecture invariant: no I/O but `Database`, no clock, no `worker`.
//! (ADR-0004: docs/adr/0004-serialized-run-groups.md)

use serde::{Deserialize, Serialize};

use crate::stmt;
use crate::store::sql::{decode, Database, StoreError};

/// The process a holder is about to spawn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawn<'a> {
    pub process_id: &'a str,
    pub instance_id: &'a str,
    /// Its gate execution id (instance and generation).
    pub execution_id: &'a str,
    /// The serial group it must hold, if its run serializes.
    pub group: Option<&'a str>,
    pub sandbox_id: &'a str,
    /// When the agent's own timeout ends it at the latest (shown to
    /// operators; it decides nothing).
    pub deadline_ms: i64,
    /// The sandbox refuses to start it after this (ms since the epoch).
    pub start_by_ms: i64,
}

/// A live process that keeps a fence shut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Blocker {
    pub process_id: String,
    pub sandbox_id: String,
    pub execution_id: String,
    pub deadline_ms: i64,
    /// After this (plus the allowed clock skew) a process its sandbox does
    /// not know was never started and never will be; None for rows fenced
    /// before start windows existed.
    pub start_by_ms: Option<i64>,
}

impl Blocker {
    /// Whether "its sandbox does not know it" means it ended, at `now_ms`:
    /// only once the sandbox would refuse to start it (`start_by_ms`, with
    /// `skew_ms` between the two clocks).
    pub fn unknown_means_ended(&self, now_ms: i64, skew_ms: i64) -> bool {
        unknown_means_ended(self.start_by_ms, now_ms, skew_ms)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum FenceOutcome {
    /// Recorded: spawn now.
    Clear,
    /// The execution no longer holds its group: it must not spawn.
    Lost,
    /// Another execution's process may still run in the group or the
    /// sandbox: wait for it to end (observe it), then fence again.
    Blocked(Blocker),
}

/// ?1 process, ?2 instance, ?3 execution, ?4 group (NULL: none), ?5
/// sandbox, ?6 now, ?7 deadline, ?8 start by. The SELECT yields a row only
/// when the execution holds its group (or has none) and no other process
/// of the group or sandbox is live (whatever its deadline: only its
/// sandbox ends it); a replay (the row exists) re-verifies the same and
/// refreshes it, with a fresh start window.
const FENCE_SQL: &str = "\
INSERT INTO sandbox_processes (process_id, instance_id, execution_id, group_key, sandbox_id, state, fenced_ms, \
  deadline_ms, start_by_ms) \
SELECT ?1, ?2, ?3, ?4, ?5, 'live', ?6, ?7, ?8 \
WHERE (?4 IS NULL OR EXISTS (SELECT 1 FROM serial_queue q WHERE q.group_key = ?4 AND q.execution_id = ?3 \
         AND q.state = 'holding')) \
  AND NOT EXISTS (SELECT 1 FROM sandbox_processes p WHERE p.process_id <> ?1 AND p.state = 'live' \
         AND ((?4 IS NOT NULL AND p.group_key = ?4) OR p.sandbox_id = ?5)) \
ON CONFLICT (process_id) DO UPDATE SET state = 'live', ended_ms = NULL, fenced_ms = excluded.fenced_ms, \
  deadline_ms = excluded.deadline_ms, start_by_ms = excluded.start_by_ms \
RETURNING process_id";

/// Why a fence stayed shut: the oldest blocking process, if any.
const BLOCKER_SQL: &str = "\
SELECT process_id, sandbox_id, execution_id, deadline_ms, start_by_ms FROM sandbox_processes p \
WHERE p.process_id <> ?1 AND p.state = 'live' \
  AND ((?2 IS NOT NULL AND p.group_key = ?2) OR p.sandbox_id = ?3) \
ORDER BY p.fenced_ms LIMIT 1";

/// Verifies and records in one statement (see the module doc); a second
/// round trip only when it stayed shut, to say why.
pub async fn fence(
    db: &dyn Database,
    spawn: &Spawn<'_>,
    now_ms: i64,
) -> Result<FenceOutcome, StoreError> {
    let rows = db
        .all(stmt!(
            FENCE_SQL,
            spawn.process_id,
            spawn.instance_id,
            spawn.execution_id,
            spawn.group,
            spawn.sandbox_id,
            now_ms,
            spawn.deadline_ms.max(now_ms),
            spawn.start_by_ms.max(now_ms),
        ))
        .await?;
    if !rows.is_empty() {
        return Ok(FenceOutcome::Clear);
    }
    let blockers: Vec<Blocker> = decode(
        db.all(stmt!(
            BLOCKER_SQL,
            spawn.process_id,
            spawn.group,
            spawn.sandbox_id,
        ))
        .await?,
    )?;
    Ok(match blockers.into_iter().next() {
        Some(b) => FenceOutcome::Blocked(b),
        // Nothing blocks, so the execution does not hold its group.
        None => FenceOutcome::Lost,
    })
}

/// Whether another process of `group` was fenced after `process_id` was:
/// a deploy that ran (or is about to) after this one, whose deployment
/// then speaks for the environment. False when this process is unknown.
pub async fn replaced_in_group(
    db: &dyn Database,
    group: &str,
    process_id: &str,
) -> Result<bool, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT p.process_id FROM sandbox_processes p, sandbox_processes me \
             WHERE me.process_id = ?2 AND p.group_key = ?1 AND p.process_id <> ?2 \
               AND p.fenced_ms > me.fenced_ms LIMIT 1",
            group,
            process_id,
        ))
        .await?;
    Ok(!rows.is_empty())
}

/// Marks a process ended (its exit seen, its kill confirmed, or unknown to
/// its sandbox). Idempotent.
pub async fn ended(db: &dyn Database, process_id: &str, now_ms: i64) -> Result<(), StoreError> {
    db.run(stmt!(
        "UPDATE sandbox_processes SET state = 'ended', ended_ms = ?2 \
         WHERE process_id = ?1 AND state = 'live'",
        process_id,
        now_ms,
    ))
    .await?;
    Ok(())
}

/// A process an instance spawned that is not known to have ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LiveProcess {
    pub process_id: String,
    pub sandbox_id: String,
    /// As `Blocker::start_by_ms`.
    pub start_by_ms: Option<i64>,
}

impl LiveProcess {
    /// As `Blocker::unknown_means_ended`.
    pub fn unknown_means_ended(&self, now_ms: i64, skew_ms: i64) -> bool {
        unknown_means_ended(self.start_by_ms, now_ms, skew_ms)
    }
}

fn unknown_means_ended(start_by_ms: Option<i64>, now_ms: i64, skew_ms: i64) -> bool {
    start_by_ms.is_none_or(|by| now_ms > by.saturating_add(skew_ms))
}

/// Processes marked bounds one instance's commands: a run has a handful of
/// command steps, each one process per generation.
const LIVE_LISTED_MAX: u32 = 100;

/// An instance's processes not known to have ended, every generation.
pub async fn live_of_instance(
    db: &dyn Database,
    instance_id: &str,
) -> Result<Vec<LiveProcess>, StoreError> {
    decode(
        db.all(stmt!(
            "SELECT process_id, sandbox_id, start_by_ms FROM sandbox_processes \
             WHERE instance_id = ?1 AND state = 'live' ORDER BY fenced_ms LIMIT ?2",
            instance_id,
            LIVE_LISTED_MAX,
        ))
        .await?,
    )
}

/// Deletes ended process rows older than `before_ms`, at most `limit`; for
/// the retention sweep. Returns how many.
pub async fn purge_ended(db: &dyn Database, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
    db.run(stmt!(
        "DELETE FROM sandbox_processes WHERE process_id IN (SELECT process_id FROM sandbox_processes \
           WHERE state = 'ended' AND ended_ms < ?1 ORDER BY ended_ms LIMIT ?2)",
        before_ms,
        limit,
    ))
    .await
}
