//! Admission: a counting semaphore per container pool in D1 (`pool_slots`,
//! migrations/0003_gates.sql). FIFO by arrival, heartbeated, and a slot
//! silent past `SLOT_TTL_MS` is purged by the next acquire of its pool in
//! the same batch that admits, so capacity lost to a crashed run comes back
//! without a sweep. A serialized run enters admission only once it holds
//! its group (ADR-0004), so a serial waiter holds no slot.
//!
//! Architecture invariant: no I/O but `Database`, no clock, no `worker`.
//! (ADR-0004: docs/adr/0004-serialized-run-groups.md)

use serde::{Deserialize, Serialize};

use crate::limits::{POOL_CAPACITY_MAX, SLOT_TTL_MS};
use crate::stmt;
use crate::store::sql::{decode, Database, Stmt, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum AdmissionOutcome {
    /// The slot counts against the pool until released or expired.
    Admitted,
    /// Not yet; 1 is next in line. Call `acquire` again to poll (each call
    /// keeps the place in line alive).
    Queued { position: u32 },
}

/// Purges the pool's expired slots, queues the holder (or refreshes its
/// place), and admits it if the admitted slots plus the live slots queued
/// ahead of it leave room: so FIFO, and a slot freed is taken by the
/// oldest. One batch (a transaction); a second round trip only to report a
/// queue position (or a replay that was already admitted).
pub async fn acquire(
    db: &dyn Database,
    pool: &str,
    holder: &str,
    capacity: u32,
    now_ms: i64,
) -> Result<AdmissionOutcome, StoreError> {
    let capacity = capacity.clamp(1, POOL_CAPACITY_MAX);
    let changes = db
        .batch(vec![
            stmt!(
                "DELETE FROM pool_slots WHERE pool = ?1 AND heartbeat_ms < ?2",
                pool,
                now_ms.saturating_sub(SLOT_TTL_MS),
            ),
            stmt!(
                "INSERT INTO pool_slots (pool, holder, state, arrived_ms, heartbeat_ms) \
                 VALUES (?1, ?2, 'queued', ?3, ?3) \
                 ON CONFLICT (pool, holder) DO UPDATE SET heartbeat_ms = MAX(heartbeat_ms, excluded.heartbeat_ms)",
                pool,
                holder,
                now_ms,
            ),
            // The claim: one conditional UPDATE, decided by its `changes`.
            stmt!(
                "UPDATE pool_slots SET state = 'admitted', admitted_ms = ?3 \
                 WHERE pool = ?1 AND holder = ?2 AND state = 'queued' \
                   AND (SELECT COUNT(*) FROM pool_slots a WHERE a.pool = ?1 \
                        AND (a.state = 'admitted' OR (a.state = 'queued' AND a.seq < pool_slots.seq))) < ?4",
                pool,
                holder,
                now_ms,
                capacity,
            ),
        ])
        .await?;
    if changes.get(2) == Some(&1) {
        return Ok(AdmissionOutcome::Admitted);
    }
    #[derive(Deserialize)]
    struct Row {
        state: String,
        ahead: i64,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "SELECT state, (SELECT COUNT(*) FROM pool_slots q WHERE q.pool = ?1 AND q.state = 'queued' \
               AND q.seq < s.seq) AS ahead FROM pool_slots s WHERE s.pool = ?1 AND s.holder = ?2",
            pool,
            holder,
        ))
        .await?,
    )?;
    match rows.into_iter().next() {
        Some(r) if r.state == "admitted" => Ok(AdmissionOutcome::Admitted),
        Some(r) if r.state == "queued" => Ok(AdmissionOutcome::Queued {
            position: u32::try_from(r.ahead.saturating_add(1)).unwrap_or(u32::MAX),
        }),
        Some(r) => Err(StoreError::Decode(format!(
            "pool_slots.state: unknown {:?}",
            r.state
        ))),
        // Only a concurrent release of our own slot between the two trips.
        None => Err(StoreError::Decode(format!(
            "pool slot of {holder} vanished after enqueue"
        ))),
    }
}

/// An admitted slot's sign of life. False when it no longer holds a slot
/// (purged after `SLOT_TTL_MS` of silence, or released): the caller must
/// acquire again before using a container.
pub async fn heartbeat(
    db: &dyn Database,
    pool: &str,
    holder: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    Ok(db.run(heartbeat_stmt(pool, holder, now_ms)).await? == 1)
}

/// The heartbeat as a statement, for a holder that beats all it holds in
/// one batch; one change when the slot is still admitted.
pub fn heartbeat_stmt(pool: &str, holder: &str, now_ms: i64) -> Stmt {
    stmt!(
        "UPDATE pool_slots SET heartbeat_ms = MAX(heartbeat_ms, ?3) \
         WHERE pool = ?1 AND holder = ?2 AND state = 'admitted'",
        pool,
        holder,
        now_ms,
    )
}

/// Releases `holder`'s slot (or place in line) in every pool, in one
/// statement (a finalize after a crash knows only the instance), with the
/// first other waiter of each pool to wake: `(pool, next)` by pool name.
pub async fn release_everywhere(
    db: &dyn Database,
    holder: &str,
) -> Result<Vec<(String, Option<String>)>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        pool: String,
        next: Option<String>,
    }
    let mut rows: Vec<Row> = decode(
        db.all(stmt!(
            "DELETE FROM pool_slots WHERE holder = ?1 \
             RETURNING pool, (SELECT q.holder FROM pool_slots q WHERE q.pool = pool_slots.pool \
               AND q.state = 'queued' AND q.holder <> ?1 ORDER BY q.seq LIMIT 1) AS next",
            holder
        ))
        .await?,
    )?;
    rows.sort_by(|a, b| a.pool.cmp(&b.pool));
    rows.dedup_by(|a, b| a.pool == b.pool);
    Ok(rows.into_iter().map(|r| (r.pool, r.next)).collect())
}

/// Gives the slot (or the place in line) back. Returns the oldest holder
/// still queued for the pool, to wake now (a push handoff; its own poll is
/// the fallback). A replay deletes nothing and names nobody.
pub async fn release(
    db: &dyn Database,
    pool: &str,
    holder: &str,
) -> Result<Option<String>, StoreError> {
    #[derive(Deserialize)]
    struct Next {
        next: Option<String>,
    }
    let rows: Vec<Next> = decode(
        db.all(stmt!(
            "DELETE FROM pool_slots WHERE pool = ?1 AND holder = ?2 \
             RETURNING (SELECT q.holder FROM pool_slots q WHERE q.pool = ?1 AND q.state = 'queued' \
               AND q.holder <> ?2 ORDER BY q.seq LIMIT 1) AS next",
            pool,
            holder
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next().and_then(|r| r.next))
}
