//! The signatures of Action-mode dispatches already used
//! (`migrations/0006_dispatch.sql`): a replay is refused (`http::dispatch`).

use crate::limits::DISPATCH_WINDOW_MS;
use crate::stmt;

use super::{Database, StoreError};

/// A signature is remembered this long: a timestamp up to the window in
/// the future stays good until twice the window after it was used.
const SIGNATURE_KEPT_MS: i64 = 2 * DISPATCH_WINDOW_MS;
/// How many signature records one sweep deletes: the sweep's other purges
/// delete batches of this order, and one minute's dispatches fit.
pub const SIGNATURES_PURGED_MAX: u32 = 500;

/// Whether the signature was used already (a replay).
pub async fn was_used(db: &dyn Database, signature_hex: &str) -> Result<bool, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT 1 AS used FROM dispatch_signatures WHERE signature = ?1",
            signature_hex
        ))
        .await?;
    Ok(!rows.is_empty())
}

/// Records a used signature (once its run exists).
pub async fn remember(
    db: &dyn Database,
    signature_hex: &str,
    instance_id: &str,
    now_ms: i64,
) -> Result<(), StoreError> {
    db.run(stmt!(
        "INSERT INTO dispatch_signatures (signature, instance_id, used_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT (signature) DO NOTHING",
        signature_hex,
        instance_id,
        now_ms,
    ))
    .await
    .map(|_| ())
}

/// Forgets signatures past the window: their timestamps refuse them now.
pub async fn purge_signatures(db: &dyn Database, now_ms: i64) -> Result<u64, StoreError> {
    db.run(stmt!(
        "DELETE FROM dispatch_signatures WHERE signature IN (SELECT signature \
         FROM dispatch_signatures WHERE used_ms < ?1 ORDER BY used_ms LIMIT ?2)",
        now_ms - SIGNATURE_KEPT_MS,
        SIGNATURES_PURGED_MAX,
    ))
    .await
}
