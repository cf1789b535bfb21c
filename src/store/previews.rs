//! The `previews` table (`migrations/0012_previews.sql`, `0013_preview_fork.sql`): which
//! pull-request previews are live, for the sweep's reconcile with GitHub,
//! the per-repository cap and the dashboard. The decisions are
//! `runs::preview`'s.

use serde::{Deserialize, Serialize};

use crate::stmt;

use super::sql::decode;
use super::{Database, StoreError};

/// One row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewRow {
    pub repo: String,
    pub pr: i64,
    pub installation_id: i64,
    pub default_branch: String,
    pub head_branch: String,
    pub state: String,
    pub sha: String,
    pub url: Option<String>,
    pub result: Option<String>,
    pub execution_id: String,
    pub updated_ms: i64,
    pub checked_ms: i64,
    /// 1 when the preview's head is in a fork (`migrations/0013_preview_fork.sql`):
    /// its teardown, whoever starts it, gets no secret.
    pub fork: i64,
}

impl PreviewRow {
    /// The preview's head is in a fork (or was not known not to be, for a
    /// row written before the flag existed): its code never gets a secret.
    pub fn is_fork(&self) -> bool {
        self.fork != 0
    }
}

const COLUMNS: &str = "repo, pr, installation_id, default_branch, head_branch, state, sha, url, \
    result, execution_id, updated_ms, checked_ms, fork";

/// Where a preview deploy started: its pull request and head.
#[derive(Debug, Clone, Copy)]
pub struct Started<'a> {
    pub repo: &'a str,
    pub pr: u64,
    pub installation_id: u64,
    pub default_branch: &'a str,
    pub head_branch: &'a str,
    pub sha: &'a str,
    pub execution_id: &'a str,
    /// The head is in a fork.
    pub fork: bool,
}

/// A preview deploy of `sha` started (when it arrives, and again holding
/// its pull request's group just before its command): the row is live
/// (again, after a reopen or a teardown), naming this execution.
pub async fn started(db: &dyn Database, s: &Started<'_>, now_ms: i64) -> Result<(), StoreError> {
    db.run(stmt!(
        "INSERT INTO previews (repo, pr, installation_id, default_branch, head_branch, state, \
           sha, execution_id, updated_ms, checked_ms, fork) \
         VALUES (?1, ?2, ?3, ?7, ?8, 'live', ?4, ?5, ?6, ?6, ?9) \
         ON CONFLICT (repo, pr) DO UPDATE SET state = 'live', sha = ?4, execution_id = ?5, \
           installation_id = ?3, default_branch = ?7, head_branch = ?8, updated_ms = ?6, \
           fork = ?9",
        s.repo,
        s.pr as i64,
        s.installation_id as i64,
        s.sha,
        s.execution_id,
        now_ms,
        s.default_branch,
        s.head_branch,
        i64::from(s.fork),
    ))
    .await
    .map(|_| ())
}

/// How the preview deploy of `execution_id` ended (a later execution's row
/// is left alone): its result, and the URL when it reported one.
pub async fn ended(
    db: &dyn Database,
    repo: &str,
    pr: u64,
    execution_id: &str,
    result: &str,
    url: Option<&str>,
    now_ms: i64,
) -> Result<(), StoreError> {
    db.run(stmt!(
        "UPDATE previews SET result = ?4, url = COALESCE(?5, url), updated_ms = ?6 \
         WHERE repo = ?1 AND pr = ?2 AND execution_id = ?3",
        repo,
        pr as i64,
        execution_id,
        result,
        url,
        now_ms,
    ))
    .await
    .map(|_| ())
}

/// The preview of `execution_id` was torn down: no longer live. A
/// compare-and-set: a row that names another execution by now (a preview
/// of a reopened pull request or a late push that arrived meanwhile) is
/// left live, for its own deploy and a later teardown. Whether the row
/// was marked.
pub async fn torn_down(
    db: &dyn Database,
    repo: &str,
    pr: u64,
    execution_id: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = db
        .run(stmt!(
            "UPDATE previews SET state = 'torn_down', updated_ms = ?3 \
             WHERE repo = ?1 AND pr = ?2 AND execution_id = ?4 AND state = 'live'",
            repo,
            pr as i64,
            now_ms,
            execution_id,
        ))
        .await?;
    Ok(changed > 0)
}

/// GitHub knows the pull request no more (the sweep's reconcile): the row
/// is no longer live, whichever execution it names.
pub async fn forget(db: &dyn Database, repo: &str, pr: u64, now_ms: i64) -> Result<(), StoreError> {
    db.run(stmt!(
        "UPDATE previews SET state = 'torn_down', updated_ms = ?3 WHERE repo = ?1 AND pr = ?2",
        repo,
        pr as i64,
        now_ms,
    ))
    .await
    .map(|_| ())
}

/// One preview's row, if any.
pub async fn get(db: &dyn Database, repo: &str, pr: u64) -> Result<Option<PreviewRow>, StoreError> {
    let sql = format!("SELECT {COLUMNS} FROM previews WHERE repo = ?1 AND pr = ?2");
    let rows: Vec<PreviewRow> = decode(db.all(stmt!(sql, repo, pr as i64)).await?)?;
    Ok(rows.into_iter().next())
}

/// Live previews the sweep has not asked GitHub about since `before_ms`,
/// the least recently asked first, at most `limit`; each is marked asked
/// at `now_ms` by `checked`.
pub async fn due_for_reconcile(
    db: &dyn Database,
    before_ms: i64,
    limit: u32,
) -> Result<Vec<PreviewRow>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM previews WHERE state = 'live' AND checked_ms < ?1 \
         ORDER BY checked_ms LIMIT ?2"
    );
    decode(db.all(stmt!(sql, before_ms, limit)).await?)
}

/// Live previews of `repo` past the `keep` most recently updated (`own`,
/// the pull request arriving, always kept), the least recently updated
/// first, at most `limit`: what the cap evicts.
pub async fn beyond_cap(
    db: &dyn Database,
    repo: &str,
    own: u64,
    keep: u32,
    limit: u32,
) -> Result<Vec<PreviewRow>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM (SELECT * FROM previews WHERE repo = ?1 AND state = 'live' \
           ORDER BY pr = ?4 DESC, updated_ms DESC, pr DESC LIMIT -1 OFFSET ?2) \
         ORDER BY updated_ms, pr LIMIT ?3"
    );
    decode(db.all(stmt!(sql, repo, keep, limit, own as i64)).await?)
}

/// The sweep asked GitHub about this preview at `now_ms`.
pub async fn checked(
    db: &dyn Database,
    repo: &str,
    pr: i64,
    now_ms: i64,
) -> Result<(), StoreError> {
    db.run(stmt!(
        "UPDATE previews SET checked_ms = ?3 WHERE repo = ?1 AND pr = ?2",
        repo,
        pr,
        now_ms,
    ))
    .await
    .map(|_| ())
}

/// Live previews, of one repository or all, the most recently updated
/// first, at most `limit`.
pub async fn live(
    db: &dyn Database,
    repo: Option<&str>,
    limit: u32,
) -> Result<Vec<PreviewRow>, StoreError> {
    let sql = format!(
        "SELECT {COLUMNS} FROM previews WHERE state = 'live' AND (?1 IS NULL OR repo = ?1) \
         ORDER BY updated_ms DESC LIMIT ?2"
    );
    decode(db.all(stmt!(sql, repo, limit)).await?)
}

/// Older previews one new head supersedes at most: a pull request has a
/// handful of unconfirmed heads at once; any past this is left to its own
/// confirmation timeout.
pub const SUPERSEDED_PER_HEAD_MAX: u32 = 50;

/// `run` executions of `entity` in `repo` that have not ended and were
/// created no later than `instance_id` (itself excluded): the older
/// previews of a pull request a new head supersedes.
pub async fn older_live(
    db: &dyn Database,
    run: &str,
    repo: &str,
    entity: &str,
    instance_id: &str,
) -> Result<Vec<String>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        id: String,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "SELECT id FROM executions WHERE run = ?1 AND repo = ?2 AND entity = ?3 AND id <> ?4 \
               AND status IN ('queued','running','waiting','paused') \
               AND (created_ms, id) < (SELECT created_ms, id FROM executions WHERE id = ?4) \
             ORDER BY created_ms LIMIT ?5",
            run,
            repo,
            entity,
            instance_id,
            SUPERSEDED_PER_HEAD_MAX,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}
