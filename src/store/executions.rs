//! The `executions`, `execution_steps` and `webhook_deliveries` tables
//! (migrations 0001 and 0002): the shared index the API, dashboards and the
//! sweep read instead of waking instances.

use serde::{Deserialize, Serialize};

use crate::journal::{Entry, InstanceRecord};
use crate::stmt;

use super::sql::{decode, Database, Stmt, StoreError};

/// One `executions` row as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionRow {
    pub id: String,
    pub key: String,
    pub run: String,
    pub repo: Option<String>,
    pub entity: Option<String>,
    pub sha: Option<String>,
    pub status: String,
    pub reason: Option<String>,
    pub error_tag: Option<String>,
    pub error_message: Option<String>,
    pub wake_at_ms: Option<i64>,
    pub input_json: String,
    pub output_json: Option<String>,
    pub step_count: i64,
    pub journal_writes: i64,
    pub index_round_trips: i64,
    pub passes: i64,
    pub created_ms: i64,
    pub updated_ms: i64,
    pub finished_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRow {
    pub seq: i64,
    pub name: String,
    pub kind: String,
    pub state: String,
    pub attempts: i64,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub wake_at_ms: Option<i64>,
    pub error_tag: Option<String>,
    pub error_message: Option<String>,
    pub result_bytes: Option<i64>,
}

const EXECUTION_COLUMNS: &str = "id, key, run, repo, entity, sha, status, reason, error_tag, \
     error_message, wake_at_ms, input_json, output_json, step_count, journal_writes, index_round_trips, \
     passes, created_ms, updated_ms, finished_ms";

/// Records a new instance; a second insert of the same id or key is a no-op.
/// Returns whether the row is new.
pub async fn insert(db: &dyn Database, rec: &InstanceRecord) -> Result<bool, StoreError> {
    let changes = db
        .run(stmt!(
            "INSERT OR IGNORE INTO executions (id, key, run, repo, entity, sha, status, wake_at_ms, \
             input_json, step_count, index_round_trips, created_ms, updated_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, 1, ?10, ?10)",
            rec.id.as_str(),
            rec.key.as_str(),
            rec.run.as_str(),
            rec.repo.clone(),
            rec.entity.clone(),
            rec.sha.clone(),
            rec.status.as_str(),
            rec.wake_at_ms,
            rec.input.as_str(),
            rec.created_ms,
        ))
        .await?;
    Ok(changes == 1)
}

/// The statements that mirror an instance's state and changed timeline
/// entries: sent as ONE batch at each suspension and at completion.
pub fn mirror_stmts(
    rec: &InstanceRecord,
    changed: &[Entry],
    step_count: u32,
    now_ms: i64,
) -> Vec<Stmt> {
    let mut stmts = Vec::with_capacity(changed.len() + 1);
    stmts.push(stmt!(
        "UPDATE executions SET status = ?2, reason = ?3, error_tag = ?4, error_message = ?5, \
         wake_at_ms = ?6, output_json = ?7, step_count = ?8, updated_ms = ?9, finished_ms = ?10, \
         journal_writes = ?11, index_round_trips = ?12, passes = ?13 WHERE id = ?1",
        rec.id.as_str(),
        rec.status.as_str(),
        rec.reason.clone(),
        rec.error_tag.clone(),
        rec.error_message.clone(),
        rec.wake_at_ms,
        rec.output.clone(),
        step_count,
        now_ms,
        rec.finished_ms,
        rec.journal_writes as i64,
        rec.index_round_trips as i64,
        rec.passes,
    ));
    for e in changed {
        stmts.push(stmt!(
            "INSERT OR REPLACE INTO execution_steps (execution_id, seq, name, kind, state, attempts, \
             started_ms, finished_ms, wake_at_ms, error_tag, error_message, result_bytes) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            rec.id.as_str(),
            e.seq,
            e.name.as_str(),
            e.kind.as_str(),
            e.state.as_str(),
            e.attempts,
            e.started_ms,
            e.finished_ms,
            e.wake_at_ms,
            e.error_tag.clone(),
            e.error_message.clone(),
            e.value.as_ref().map(|v| v.len() as i64),
        ));
    }
    stmts
}

/// Drops mirrored steps from `seq` on (an operator restarted the instance).
pub fn delete_steps_from(id: &str, seq: u32) -> Stmt {
    stmt!(
        "DELETE FROM execution_steps WHERE execution_id = ?1 AND seq >= ?2",
        id,
        seq
    )
}

pub async fn get(db: &dyn Database, id: &str) -> Result<Option<ExecutionRow>, StoreError> {
    let rows = db
        .all(stmt!(
            format!("SELECT {EXECUTION_COLUMNS} FROM executions WHERE id = ?1"),
            id
        ))
        .await?;
    Ok(decode(rows)?.into_iter().next())
}

pub async fn steps(db: &dyn Database, id: &str, limit: u32) -> Result<Vec<StepRow>, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT seq, name, kind, state, attempts, started_ms, finished_ms, wake_at_ms, \
             error_tag, error_message, result_bytes FROM execution_steps \
             WHERE execution_id = ?1 ORDER BY seq LIMIT ?2",
            id,
            limit,
        ))
        .await?;
    decode(rows)
}

/// Filters of `GET /v1/executions`; every field optional.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListFilter {
    pub run: Option<String>,
    pub repo: Option<String>,
    pub status: Option<String>,
    pub entity: Option<String>,
}

pub async fn list(
    db: &dyn Database,
    f: &ListFilter,
    limit: u32,
) -> Result<Vec<ExecutionRow>, StoreError> {
    // Each filter is `(?n IS NULL OR col = ?n)` so one statement serves all.
    let rows = db
        .all(stmt!(
            format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions WHERE (?1 IS NULL OR run = ?1) \
                 AND (?2 IS NULL OR repo = ?2) AND (?3 IS NULL OR status = ?3) \
                 AND (?4 IS NULL OR entity = ?4) ORDER BY created_ms DESC, id LIMIT ?5"
            ),
            f.run.clone(),
            f.repo.clone(),
            f.status.clone(),
            f.entity.clone(),
            limit,
        ))
        .await?;
    decode(rows)
}

/// What the sweep needs to resume an instance.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Overdue {
    pub id: String,
    pub key: String,
    pub run: String,
    pub repo: Option<String>,
    pub entity: Option<String>,
    pub sha: Option<String>,
    pub input_json: String,
}

/// Non-terminal instances whose wake-up is at or before `before_ms`.
pub async fn overdue(
    db: &dyn Database,
    before_ms: i64,
    limit: u32,
) -> Result<Vec<Overdue>, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT id, key, run, repo, entity, sha, input_json FROM executions \
             WHERE status IN ('queued','running','waiting') AND wake_at_ms <= ?1 \
             ORDER BY wake_at_ms LIMIT ?2",
            before_ms,
            limit,
        ))
        .await?;
    decode(rows)
}

/// Terminal instances finished before `before_ms` (retention purge).
pub async fn finished_before(
    db: &dyn Database,
    before_ms: i64,
    limit: u32,
) -> Result<Vec<String>, StoreError> {
    #[derive(Deserialize)]
    struct Id {
        id: String,
    }
    let rows = db
        .all(stmt!(
            "SELECT id FROM executions WHERE finished_ms IS NOT NULL AND finished_ms < ?1 \
             ORDER BY finished_ms LIMIT ?2",
            before_ms,
            limit,
        ))
        .await?;
    Ok(decode::<Id>(rows)?.into_iter().map(|r| r.id).collect())
}

/// Removes an instance's rows, its steps first.
pub async fn delete(db: &dyn Database, id: &str) -> Result<(), StoreError> {
    db.batch(vec![
        stmt!("DELETE FROM execution_steps WHERE execution_id = ?1", id),
        stmt!("DELETE FROM executions WHERE id = ?1", id),
    ])
    .await?;
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryRow {
    pub delivery_id: String,
    pub event: String,
    pub action: Option<String>,
    pub repo: Option<String>,
    pub instance_ids_json: String,
    pub received_ms: i64,
}

pub async fn delivery(
    db: &dyn Database,
    delivery_id: &str,
) -> Result<Option<DeliveryRow>, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT delivery_id, event, action, repo, instance_ids_json, received_ms \
             FROM webhook_deliveries WHERE delivery_id = ?1",
            delivery_id,
        ))
        .await?;
    Ok(decode(rows)?.into_iter().next())
}

pub async fn record_delivery(db: &dyn Database, row: &DeliveryRow) -> Result<(), StoreError> {
    db.run(stmt!(
        "INSERT OR IGNORE INTO webhook_deliveries (delivery_id, event, action, repo, \
         instance_ids_json, received_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        row.delivery_id.as_str(),
        row.event.as_str(),
        row.action.clone(),
        row.repo.clone(),
        row.instance_ids_json.as_str(),
        row.received_ms,
    ))
    .await?;
    Ok(())
}

/// Forgets deliveries received before `before_ms` (the retention): the
/// webhook intake refuses events that old by their own timestamp, so a
/// replay of one is refused without its record.
pub async fn purge_deliveries(
    db: &dyn Database,
    before_ms: i64,
    limit: u32,
) -> Result<u64, StoreError> {
    db.run(stmt!(
        "DELETE FROM webhook_deliveries WHERE delivery_id IN (SELECT delivery_id            FROM webhook_deliveries WHERE received_ms < ?1 ORDER BY received_ms LIMIT ?2)",
        before_ms,
        limit,
    ))
    .await
}

pub async fn recent_deliveries(
    db: &dyn Database,
    limit: u32,
) -> Result<Vec<DeliveryRow>, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT delivery_id, event, action, repo, instance_ids_json, received_ms \
             FROM webhook_deliveries ORDER BY received_ms DESC LIMIT ?1",
            limit,
        ))
        .await?;
    decode(rows)
}
