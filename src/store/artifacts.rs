//! The `artifacts` table (`migrations/0014_artifacts.sql`): which unit
//! uploaded which archive, how a dependent finds what it needs, how a page
//! lists an execution's artifacts, and what the retention sweep deletes.
//! The steps that write and read it are `runs::kit::artifacts`'.

use serde::{Deserialize, Serialize};

use crate::stmt;

use super::sql::decode;
use super::{Database, StoreError};

const COLUMNS: &str = "instance_id, job, label, r2_key, bytes, files, sha256, created_ms";

/// One unit's archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRow {
    pub instance_id: String,
    pub job: String,
    pub label: String,
    pub r2_key: String,
    pub bytes: i64,
    pub files: i64,
    pub sha256: String,
    pub created_ms: i64,
}

/// Records (or, replayed, records again) a unit's archive.
pub async fn saved(db: &dyn Database, row: &ArtifactRow) -> Result<(), StoreError> {
    db.run(stmt!(
        "INSERT INTO artifacts (instance_id, job, label, r2_key, bytes, files, sha256, created_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
         ON CONFLICT (instance_id) DO UPDATE SET job = ?2, label = ?3, r2_key = ?4, bytes = ?5, \
           files = ?6, sha256 = ?7, created_ms = ?8",
        row.instance_id.as_str(),
        row.job.as_str(),
        row.label.as_str(),
        row.r2_key.as_str(),
        row.bytes,
        row.files,
        row.sha256.as_str(),
        row.created_ms,
    ))
    .await
    .map(|_| ())
}

/// The archives of these units (those that uploaded one), in id order.
pub async fn of_units(db: &dyn Database, ids: &[String]) -> Result<Vec<ArtifactRow>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids = serde_json::to_string(ids).unwrap_or_else(|_| "[]".to_owned());
    let sql = format!(
        "SELECT {COLUMNS} FROM artifacts \
         WHERE instance_id IN (SELECT value FROM json_each(?1)) ORDER BY instance_id"
    );
    decode(db.all(stmt!(sql, ids.as_str())).await?)
}

/// Archives older than `before_ms`, oldest first, at most `limit`: what
/// the retention sweep deletes.
pub async fn older_than(
    db: &dyn Database,
    before_ms: i64,
    limit: u32,
) -> Result<Vec<ArtifactRow>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM artifacts WHERE created_ms < ?1 ORDER BY created_ms LIMIT ?2"
    );
    decode(db.all(stmt!(sql, before_ms, limit)).await?)
}

/// Forgets a unit's archive (its bytes already deleted).
pub async fn forget(db: &dyn Database, instance_id: &str) -> Result<(), StoreError> {
    db.run(stmt!(
        "DELETE FROM artifacts WHERE instance_id = ?1",
        instance_id
    ))
    .await
    .map(|_| ())
}
