//! The release approvals `release-notes` instances wait on
//! (`migrations/0008_release_notes.sql`): the index a decision's webhook
//! finds its instance by, and the fence between deciding and superseding.
//! The decisions are `runs::release`'s.

use serde::Deserialize;

use crate::stmt;

use super::sql::decode;
use super::{Database, StoreError};

/// Waiting approvals of one repository read at once: a repository has a
/// handful of unreleased tags waiting at most; older ones past this are
/// left to their own timeout.
pub const WAITING_LISTED_MAX: u32 = 50;

/// One approval row.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Approval {
    pub instance_id: String,
    pub repo: String,
    pub tag: String,
    pub pr_number: i64,
    pub check_run_id: i64,
    pub state: String,
    pub superseded_by: Option<String>,
    pub deciders: String,
    pub waiting_since_ms: i64,
    pub deadline_ms: i64,
}

/// Records (or, on a replan, renews) the instance's waiting approval. A
/// row that already left 'waiting' is not brought back.
pub async fn record(db: &dyn Database, a: &Approval, now_ms: i64) -> Result<(), StoreError> {
    db.run(stmt!(
        "INSERT INTO release_approvals (instance_id, repo, tag, pr_number, check_run_id, state, \
           deciders, waiting_since_ms, deadline_ms, updated_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, 'waiting', ?6, ?7, ?8, ?9) \
         ON CONFLICT (instance_id) DO UPDATE SET pr_number = excluded.pr_number, \
           check_run_id = excluded.check_run_id, deciders = excluded.deciders, \
           waiting_since_ms = excluded.waiting_since_ms, deadline_ms = excluded.deadline_ms, \
           updated_ms = excluded.updated_ms \
         WHERE release_approvals.state = 'waiting'",
        a.instance_id.as_str(),
        a.repo.as_str(),
        a.tag.as_str(),
        a.pr_number,
        a.check_run_id,
        a.deciders.as_str(),
        a.waiting_since_ms,
        a.deadline_ms,
        now_ms,
    ))
    .await
    .map(|_| ())
}

/// The instance waiting on pull request `number` of `repo` whose window is
/// still open at `now_ms`, if one does.
pub async fn waiting_on_pull(
    db: &dyn Database,
    repo: &str,
    number: u64,
    now_ms: i64,
) -> Result<Option<String>, StoreError> {
    let n = i64::try_from(number).unwrap_or(i64::MAX);
    one_id(
        db,
        stmt!(
            "SELECT instance_id FROM release_approvals WHERE repo = ?1 AND pr_number = ?2 \
             AND state = 'waiting' AND deadline_ms > ?3 ORDER BY waiting_since_ms DESC LIMIT 1",
            repo,
            n,
            now_ms,
        ),
    )
    .await
}

/// The instance waiting on check run `id` of `repo` whose window is still
/// open at `now_ms`, if one does.
pub async fn waiting_on_check_run(
    db: &dyn Database,
    repo: &str,
    id: u64,
    now_ms: i64,
) -> Result<Option<String>, StoreError> {
    let id = i64::try_from(id).unwrap_or(i64::MAX);
    one_id(
        db,
        stmt!(
            "SELECT instance_id FROM release_approvals WHERE repo = ?1 AND check_run_id = ?2 \
             AND state = 'waiting' AND deadline_ms > ?3 ORDER BY waiting_since_ms DESC LIMIT 1",
            repo,
            id,
            now_ms,
        ),
    )
    .await
}

async fn one_id(db: &dyn Database, s: super::Stmt) -> Result<Option<String>, StoreError> {
    #[derive(Deserialize)]
    struct Id {
        instance_id: String,
    }
    let rows: Vec<Id> = decode(db.all(s).await?)?;
    Ok(rows.into_iter().next().map(|r| r.instance_id))
}

/// The waiting approvals of `repo`, oldest first.
pub async fn waiting_in(db: &dyn Database, repo: &str) -> Result<Vec<Approval>, StoreError> {
    decode(
        db.all(stmt!(
            "SELECT instance_id, repo, tag, pr_number, check_run_id, state, superseded_by, \
               deciders, waiting_since_ms, deadline_ms FROM release_approvals \
             WHERE repo = ?1 AND state = 'waiting' ORDER BY waiting_since_ms LIMIT ?2",
            repo,
            WAITING_LISTED_MAX,
        ))
        .await?,
    )
}

/// One instance's approval.
pub async fn get(db: &dyn Database, instance_id: &str) -> Result<Option<Approval>, StoreError> {
    let rows: Vec<Approval> = decode(
        db.all(stmt!(
            "SELECT instance_id, repo, tag, pr_number, check_run_id, state, superseded_by, \
               deciders, waiting_since_ms, deadline_ms FROM release_approvals \
             WHERE instance_id = ?1",
            instance_id,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next())
}

/// Moves a waiting approval to `state` ('publishing', 'rejected',
/// 'timed_out'); false when it is no longer waiting (superseded first).
pub async fn claim(
    db: &dyn Database,
    instance_id: &str,
    state: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = db
        .run(stmt!(
            "UPDATE release_approvals SET state = ?2, updated_ms = ?3 \
             WHERE instance_id = ?1 AND state = 'waiting'",
            instance_id,
            state,
            now_ms,
        ))
        .await?;
    Ok(changed == 1)
}

/// Supersedes a waiting approval by the newer tag `by`; false when it is
/// no longer waiting (it was decided first: a publishing one is never
/// touched).
pub async fn supersede(
    db: &dyn Database,
    instance_id: &str,
    by: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = db
        .run(stmt!(
            "UPDATE release_approvals SET state = 'superseded', superseded_by = ?2, \
               updated_ms = ?3 WHERE instance_id = ?1 AND state = 'waiting'",
            instance_id,
            by,
            now_ms,
        ))
        .await?;
    Ok(changed == 1)
}

/// Who each of `ids` waits for, for those with a waiting approval (one
/// statement for a page of executions).
pub async fn deciders_of(
    db: &dyn Database,
    ids: &[&str],
) -> Result<Vec<(String, String)>, StoreError> {
    #[derive(Deserialize)]
    struct D {
        instance_id: String,
        deciders: String,
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks: Vec<String> = (1..=ids.len()).map(|n| format!("?{n}")).collect();
    let sql = format!(
        "SELECT instance_id, deciders FROM release_approvals \
         WHERE state = 'waiting' AND instance_id IN ({})",
        marks.join(", ")
    );
    let params = ids.iter().map(|id| super::Param::from(*id)).collect();
    let rows: Vec<D> = decode(db.all(super::Stmt::new(sql, params)).await?)?;
    Ok(rows
        .into_iter()
        .map(|d| (d.instance_id, d.deciders))
        .collect())
}

/// Deletes at most `limit` approvals decided (left 'waiting') before
/// `before_ms`: the retention purge. A waiting one is its instance's index
/// and stays while the instance waits.
pub async fn purge_decided(
    db: &dyn Database,
    before_ms: i64,
    limit: u32,
) -> Result<u64, StoreError> {
    db.run(stmt!(
        "DELETE FROM release_approvals WHERE instance_id IN (SELECT instance_id \
         FROM release_approvals WHERE state <> 'waiting' AND updated_ms < ?1 \
         ORDER BY updated_ms LIMIT ?2)",
        before_ms,
        limit,
    ))
    .await
}
