//! The `caches` table (`migrations/0015_caches.sql`): a repository's
//! dependency caches by scope and key. The steps that read and write it,
//! and the scope rules, are `runs::kit::caches`' and
//! `runs::kit::inputs::CacheScope`'s.

use serde::{Deserialize, Serialize};

use crate::stmt;

use super::sql::decode;
use super::{Database, StoreError};

const COLUMNS: &str = "repo, scope, key, prefix, r2_key, bytes, files, sha256, created_ms, used_ms";

/// Candidates one lookup reads: the entries of the readable scopes with the
/// key's prefix, newest first; a repository keeps a few per prefix.
const CANDIDATES_MAX: u32 = 50;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheRow {
    pub repo: String,
    pub scope: String,
    pub key: String,
    pub prefix: String,
    pub r2_key: String,
    pub bytes: i64,
    pub files: i64,
    pub sha256: String,
    pub created_ms: i64,
    pub used_ms: i64,
}

/// The entries of `scopes` whose key starts with `prefix`, newest first.
pub async fn candidates(
    db: &dyn Database,
    repo: &str,
    scopes: &[String],
    prefix: &str,
) -> Result<Vec<CacheRow>, StoreError> {
    let scopes = serde_json::to_string(scopes).unwrap_or_else(|_| "[]".to_owned());
    let sql = format!(
        "SELECT {COLUMNS} FROM caches WHERE repo = ?1 AND prefix = ?2 \
           AND scope IN (SELECT value FROM json_each(?3)) \
         ORDER BY created_ms DESC LIMIT ?4"
    );
    decode(
        db.all(stmt!(sql, repo, prefix, scopes.as_str(), CANDIDATES_MAX))
            .await?,
    )
}

/// Records a saved entry, unless one of that scope and key is there (the
/// first save wins); whether this one was recorded.
pub async fn saved(db: &dyn Database, row: &CacheRow) -> Result<bool, StoreError> {
    db.run(stmt!(
        "INSERT INTO caches (repo, scope, key, prefix, r2_key, bytes, files, sha256, created_ms, \
           used_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9) \
         ON CONFLICT (repo, scope, key) DO NOTHING",
        row.repo.as_str(),
        row.scope.as_str(),
        row.key.as_str(),
        row.prefix.as_str(),
        row.r2_key.as_str(),
        row.bytes,
        row.files,
        row.sha256.as_str(),
        row.created_ms,
    ))
    .await
    .map(|changes| changes > 0)
}

/// Marks an entry used now.
pub async fn used(db: &dyn Database, row: &CacheRow, now_ms: i64) -> Result<(), StoreError> {
    db.run(stmt!(
        "UPDATE caches SET used_ms = ?4 WHERE repo = ?1 AND scope = ?2 AND key = ?3",
        row.repo.as_str(),
        row.scope.as_str(),
        row.key.as_str(),
        now_ms,
    ))
    .await
    .map(|_| ())
}

/// The repository's entries, least recently used first, at most `limit`.
pub async fn least_used(
    db: &dyn Database,
    repo: &str,
    limit: u32,
) -> Result<Vec<CacheRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM caches WHERE repo = ?1 ORDER BY used_ms LIMIT ?2");
    decode(db.all(stmt!(sql, repo, limit)).await?)
}

/// The bytes of the repository's entries.
pub async fn repo_bytes(db: &dyn Database, repo: &str) -> Result<i64, StoreError> {
    #[derive(Deserialize)]
    struct Total {
        total: Option<i64>,
    }
    let rows: Vec<Total> = decode(
        db.all(stmt!(
            "SELECT SUM(bytes) AS total FROM caches WHERE repo = ?1",
            repo
        ))
        .await?,
    )?;
    Ok(rows.first().and_then(|t| t.total).unwrap_or(0))
}

/// Forgets an entry (its bytes already deleted).
pub async fn forget(db: &dyn Database, row: &CacheRow) -> Result<(), StoreError> {
    db.run(stmt!(
        "DELETE FROM caches WHERE repo = ?1 AND scope = ?2 AND key = ?3",
        row.repo.as_str(),
        row.scope.as_str(),
        row.key.as_str(),
    ))
    .await
    .map(|_| ())
}
