//! Container leases: one holder per sandbox id (`container_leases`,
//! migrations/0003_gates.sql), heartbeated, and reclaimed once stale by the
//! next claimant in the one conditional upsert that claims it.
//!
//! Architecture invariant: no I/O but `Database`, no clock, no `worker`.

use serde::{Deserialize, Serialize};

use crate::limits::LEASE_TTL_MS;
use crate::stmt;
use crate::store::sql::{decode, Database, Stmt, StoreError};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseOutcome {
    /// The caller holds the sandbox until `expires_ms` unless it heartbeats.
    Acquired { expires_ms: i64 },
    /// Another execution holds it; retry after `expires_ms` at the latest.
    /// `holder` is None when it was released between our two reads: retry
    /// at once.
    Busy {
        holder: Option<String>,
        expires_ms: i64,
    },
}

/// Takes the sandbox if it is free, stale (`expires_ms` passed), or already
/// the caller's (a replay, which refreshes it and keeps `acquired_ms`).
/// One round trip when acquired; a second to name the current holder.
pub async fn acquire(
    db: &dyn Database,
    sandbox_id: &str,
    holder: &str,
    now_ms: i64,
) -> Result<LeaseOutcome, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        holder: String,
        expires_ms: i64,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "INSERT INTO container_leases (sandbox_id, holder, acquired_ms, heartbeat_ms, expires_ms) \
             VALUES (?1, ?2, ?3, ?3, ?4) \
             ON CONFLICT (sandbox_id) DO UPDATE SET \
               acquired_ms = CASE WHEN container_leases.holder = excluded.holder \
                             THEN container_leases.acquired_ms ELSE excluded.acquired_ms END, \
               heartbeat_ms = CASE WHEN container_leases.holder = excluded.holder \
                              THEN MAX(container_leases.heartbeat_ms, excluded.heartbeat_ms) \
                              ELSE excluded.heartbeat_ms END, \
               expires_ms = CASE WHEN container_leases.holder = excluded.holder \
                            THEN MAX(container_leases.expires_ms, excluded.expires_ms) \
                            ELSE excluded.expires_ms END, \
               holder = excluded.holder \
             WHERE container_leases.expires_ms <= excluded.acquired_ms OR container_leases.holder = excluded.holder \
             RETURNING holder, expires_ms",
            sandbox_id,
            holder,
            now_ms,
            now_ms.saturating_add(LEASE_TTL_MS),
        ))
        .await?,
    )?;
    if let Some(r) = rows.into_iter().next() {
        return Ok(LeaseOutcome::Acquired {
            expires_ms: r.expires_ms,
        });
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "SELECT holder, expires_ms FROM container_leases WHERE sandbox_id = ?1",
            sandbox_id
        ))
        .await?,
    )?;
    match rows.into_iter().next() {
        Some(r) => Ok(LeaseOutcome::Busy {
            holder: Some(r.holder),
            expires_ms: r.expires_ms,
        }),
        None => Ok(LeaseOutcome::Busy {
            holder: None,
            expires_ms: now_ms,
        }),
    }
}

/// Extends the caller's lease. False when it no longer holds it (reclaimed
/// after it went stale, or released): the caller must stop using the
/// sandbox. A stale lease nobody reclaimed is still the caller's.
pub async fn heartbeat(
    db: &dyn Database,
    sandbox_id: &str,
    holder: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    Ok(db.run(heartbeat_stmt(sandbox_id, holder, now_ms)).await? == 1)
}

/// The heartbeat as a statement, for a holder that beats all it holds in
/// one batch; one change when the lease is still the holder's.
pub fn heartbeat_stmt(sandbox_id: &str, holder: &str, now_ms: i64) -> Stmt {
    stmt!(
        "UPDATE container_leases SET heartbeat_ms = MAX(heartbeat_ms, ?3), \
           expires_ms = MAX(expires_ms, ?4) WHERE sandbox_id = ?1 AND holder = ?2",
        sandbox_id,
        holder,
        now_ms,
        now_ms.saturating_add(LEASE_TTL_MS),
    )
}

/// Frees the sandboxes of an instance whatever their holder, once it ended
/// (every generation's lease goes): its own id's and those of an image
/// class (`<id>~<class>.<type>`, `sandbox::image`: `~` sorts after every
/// character a class name has, so they fall between `<id>~` and `<id>~~`).
/// Returns the addresses it freed.
pub async fn release_sandbox(
    db: &dyn Database,
    instance_id: &str,
) -> Result<Vec<String>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        sandbox_id: String,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "DELETE FROM container_leases WHERE sandbox_id = ?1 \
               OR (sandbox_id > ?2 AND sandbox_id < ?3) RETURNING sandbox_id",
            instance_id,
            format!("{instance_id}~"),
            format!("{instance_id}~~"),
        ))
        .await?,
    )?;
    Ok(rows.into_iter().map(|r| r.sandbox_id).collect())
}

/// Gives the sandbox back; never touches another holder's lease, and a
/// replay is a no-op.
pub async fn release(db: &dyn Database, sandbox_id: &str, holder: &str) -> Result<(), StoreError> {
    db.run(stmt!(
        "DELETE FROM container_leases WHERE sandbox_id = ?1 AND holder = ?2",
        sandbox_id,
        holder
    ))
    .await?;
    Ok(())
}
