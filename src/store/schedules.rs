//! The schedules of each repository and the slots they fired
//! (`migrations/0007_schedules.sql`); the decisions are `runs::schedule`'s.

use serde::Deserialize;

use crate::stmt;

use super::sql::decode;
use super::{Database, StoreError};

/// A repository's recorded schedules.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RepoSchedules {
    pub repo: String,
    pub installation_id: i64,
    pub default_branch: String,
    pub schedules_json: String,
    pub error: Option<String>,
    pub read_ms: i64,
}

/// Records what a read of the default branch's config found, unless a
/// later read was recorded already. `schedules_json` None keeps the
/// schedules (an invalid config) and records `error`.
pub async fn record(
    db: &dyn Database,
    row: &RepoSchedules,
    keep_schedules: bool,
) -> Result<(), StoreError> {
    db.run(stmt!(
        "INSERT INTO repo_schedules (repo, installation_id, default_branch, schedules_json, error, read_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (repo) DO UPDATE SET installation_id = excluded.installation_id, \
           default_branch = excluded.default_branch, \
           schedules_json = CASE WHEN ?7 = 1 THEN repo_schedules.schedules_json ELSE excluded.schedules_json END, \
           error = excluded.error, read_ms = excluded.read_ms \
         WHERE excluded.read_ms >= repo_schedules.read_ms",
        row.repo.as_str(),
        row.installation_id,
        row.default_branch.as_str(),
        row.schedules_json.as_str(),
        row.error.clone(),
        row.read_ms,
        i64::from(keep_schedules),
    ))
    .await
    .map(|_| ())
}

/// Repositories with at least one schedule, in name order after `after`,
/// at most `limit` (a page).
pub async fn with_schedules(
    db: &dyn Database,
    after: &str,
    limit: u32,
) -> Result<Vec<RepoSchedules>, StoreError> {
    decode(
        db.all(stmt!(
            "SELECT repo, installation_id, default_branch, schedules_json, error, read_ms \
             FROM repo_schedules WHERE schedules_json <> '[]' AND repo > ?1 ORDER BY repo LIMIT ?2",
            after,
            limit,
        ))
        .await?,
    )
}

pub async fn get(db: &dyn Database, repo: &str) -> Result<Option<RepoSchedules>, StoreError> {
    let rows: Vec<RepoSchedules> = decode(
        db.all(stmt!(
            "SELECT repo, installation_id, default_branch, schedules_json, error, read_ms \
             FROM repo_schedules WHERE repo = ?1",
            repo,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next())
}

/// A slot's record.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Slot {
    pub slot_key: String,
    pub state: String,
    pub instance_id: String,
    pub create_json: String,
}

pub async fn slot(db: &dyn Database, slot_key: &str) -> Result<Option<Slot>, StoreError> {
    let rows: Vec<Slot> = decode(
        db.all(stmt!(
            "SELECT slot_key, state, instance_id, create_json FROM schedule_slots WHERE slot_key = ?1",
            slot_key,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next())
}

/// Claims a slot in `state`; false when another sweep claimed it first.
pub async fn claim(
    db: &dyn Database,
    slot: &Slot,
    repo: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changed = db
        .run(stmt!(
            "INSERT INTO schedule_slots (slot_key, repo, state, instance_id, create_json, fired_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (slot_key) DO NOTHING",
            slot.slot_key.as_str(),
            repo,
            slot.state.as_str(),
            slot.instance_id.as_str(),
            slot.create_json.as_str(),
            now_ms,
        ))
        .await?;
    Ok(changed == 1)
}

pub async fn mark_created(db: &dyn Database, slot_key: &str) -> Result<(), StoreError> {
    db.run(stmt!(
        "UPDATE schedule_slots SET state = 'created' WHERE slot_key = ?1 AND state = 'claimed'",
        slot_key,
    ))
    .await
    .map(|_| ())
}

/// Forgets slots fired before `before_ms`: only the last few minutes' can
/// still be reached (`runs::schedule::SCHEDULE_LATE_MS_MAX`), so a claim
/// that old will never be created either.
pub async fn purge_slots(db: &dyn Database, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
    db.run(stmt!(
        "DELETE FROM schedule_slots WHERE slot_key IN (SELECT slot_key FROM schedule_slots \
         WHERE fired_ms < ?1 ORDER BY fired_ms LIMIT ?2)",
        before_ms,
        limit,
    ))
    .await
}

/// A live instance of `run` for `repo` at `sha`, if any: a scheduled run of
/// a commit already being run is not started again.
pub async fn live_instance_of(
    db: &dyn Database,
    run: &str,
    repo: &str,
    sha: &str,
) -> Result<Option<String>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        id: String,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "SELECT id FROM executions WHERE repo = ?1 AND run = ?2 AND sha = ?3 \
               AND status IN ('queued','running','waiting','paused') ORDER BY created_ms LIMIT 1",
            repo,
            run,
            sha,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next().map(|r| r.id))
}
