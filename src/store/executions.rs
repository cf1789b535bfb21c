//! The `executions`, `execution_steps` and `webhook_deliveries` tables
//! (migrations 0001 and 0002): the shared index the API, dashboards and the
//! sweep read instead of waking instances.

use serde::{Deserialize, Serialize};

use crate::cost::CostUnits;
use crate::journal::{Entry, InstanceRecord};
use crate::stmt;

use super::sql::{decode, decode_row, Database, Param, Stmt, StoreError};

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
    /// For an execution waiting on a person: who and until when (filled by
    /// the `/v1/` lists, `http::lists`; never a column).
    #[serde(default)]
    pub waiting_for: Option<WaitingFor>,
}

/// Who a waiting execution waits for, and until when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WaitingFor {
    /// The wait's step name ("release approval", "confirmation#2").
    pub wait: String,
    /// Who may end it, in words.
    pub decider: String,
    /// When the current window started and ends, ms since the epoch.
    pub since_ms: i64,
    pub until_ms: Option<i64>,
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

/// A new instance's row as its record stands, written by its first pass,
/// before its first step body or beside its mirror (ADR-0018,
/// `docs/adr/0018-a-single-creates-row-rides-its-first-pass.md`); a second
/// insert of the same id or key is a no-op.
pub fn insert_stmt(rec: &InstanceRecord) -> Stmt {
    stmt!(
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
    )
}

/// The statements that mirror an instance's state and changed timeline
/// entries: sent as ONE batch at each suspension and at completion.
pub fn mirror_stmts(
    rec: &InstanceRecord,
    changed: &[Entry],
    step_count: u32,
    now_ms: i64,
) -> Vec<Stmt> {
    let mut stmts = vec![record_stmt(rec, step_count, now_ms)];
    stmts.extend(step_rows_stmts(rec.id.as_str(), changed));
    stmts
}

/// The instance's own row: its state, outcome and counters.
pub fn record_stmt(rec: &InstanceRecord, step_count: u32, now_ms: i64) -> Stmt {
    let mut stmt = record_values(rec, step_count, now_ms);
    stmt.sql = RECORD_UPDATE_SQL.into();
    stmt
}

/// `insert_stmt` and `record_stmt` as one statement: the row with its
/// state, or, when D1 has it already (a retried first pass), its state.
/// Another row holding the key under another id is left alone, as the
/// insert's `OR IGNORE` left it (ids derive from keys: only rows written
/// some other way can do that).
pub fn upsert_stmt(rec: &InstanceRecord, step_count: u32, now_ms: i64) -> Stmt {
    let mut stmt = record_values(rec, step_count, now_ms);
    stmt.sql = RECORD_UPSERT_SQL.into();
    stmt.params.extend([
        Param::from(rec.key.as_str()),
        Param::from(rec.run.as_str()),
        Param::from(rec.repo.clone()),
        Param::from(rec.entity.clone()),
        Param::from(rec.sha.clone()),
        Param::from(rec.input.as_str()),
        Param::from(rec.created_ms),
    ]);
    stmt
}

/// ?1 the id, ?2.. the `RECORD_COLUMNS` in order.
const RECORD_UPDATE_SQL: &str = "UPDATE executions SET status = ?2, reason = ?3, error_tag = ?4, \
     error_message = ?5, wake_at_ms = ?6, output_json = ?7, step_count = ?8, updated_ms = ?9, \
     finished_ms = ?10, journal_writes = ?11, index_round_trips = ?12, passes = ?13, \
     do_requests = ?14, do_active_ms = ?15, do_rows_read = ?16, do_rows_written = ?17, \
     d1_statements = ?18, d1_rows_read = ?19, d1_rows_written = ?20, r2_class_a = ?21, \
     r2_class_b = ?22, github_calls = ?23, sandbox_ms = ?24 WHERE id = ?1";

/// As `RECORD_UPDATE_SQL`, then ?25.. key, run, repo, entity, sha, input
/// and created time, for the insert.
const RECORD_UPSERT_SQL: &str = "INSERT INTO executions (id, status, reason, error_tag, \
     error_message, wake_at_ms, output_json, step_count, updated_ms, finished_ms, journal_writes, \
     index_round_trips, passes, do_requests, do_active_ms, do_rows_read, do_rows_written, \
     d1_statements, d1_rows_read, d1_rows_written, r2_class_a, r2_class_b, github_calls, \
     sandbox_ms, key, run, repo, entity, sha, input_json, created_ms) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
     ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?29, ?30, ?31) \
     ON CONFLICT (id) DO UPDATE SET status = excluded.status, reason = excluded.reason, \
     error_tag = excluded.error_tag, error_message = excluded.error_message, \
     wake_at_ms = excluded.wake_at_ms, output_json = excluded.output_json, \
     step_count = excluded.step_count, updated_ms = excluded.updated_ms, \
     finished_ms = excluded.finished_ms, journal_writes = excluded.journal_writes, \
     index_round_trips = excluded.index_round_trips, passes = excluded.passes, \
     do_requests = excluded.do_requests, do_active_ms = excluded.do_active_ms, \
     do_rows_read = excluded.do_rows_read, do_rows_written = excluded.do_rows_written, \
     d1_statements = excluded.d1_statements, d1_rows_read = excluded.d1_rows_read, \
     d1_rows_written = excluded.d1_rows_written, r2_class_a = excluded.r2_class_a, \
     r2_class_b = excluded.r2_class_b, github_calls = excluded.github_calls, \
     sandbox_ms = excluded.sandbox_ms \
     ON CONFLICT DO NOTHING";

/// The id and the `RECORD_COLUMNS` values, in order.
fn record_values(rec: &InstanceRecord, step_count: u32, now_ms: i64) -> Stmt {
    stmt!(
        "",
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
        rec.costs.do_requests as i64,
        rec.costs.do_active_ms as i64,
        rec.costs.do_rows_read as i64,
        rec.costs.do_rows_written as i64,
        rec.costs.d1_statements as i64,
        rec.costs.d1_rows_read as i64,
        rec.costs.d1_rows_written as i64,
        rec.costs.r2_class_a as i64,
        rec.costs.r2_class_b as i64,
        rec.costs.github_calls as i64,
        rec.costs.sandbox_ms as i64,
    )
}

/// Bytes of step rows one mirror statement carries as its JSON parameter:
/// a quarter of D1's 2,000,000-byte limit on a bound string, so a pass of
/// 10,000 steps still fits a handful of statements.
const STEP_ROWS_JSON_BYTES_MAX: usize = 500_000;

/// The changed entries as `execution_steps` rows: one statement over a
/// JSON array of rows (`json_each`) per `STEP_ROWS_JSON_BYTES_MAX`, not
/// one statement per entry, so a pass that journaled 100 steps sends 2
/// statements rather than 101, and D1 parses one.
pub fn step_rows_stmts(id: &str, changed: &[Entry]) -> Vec<Stmt> {
    let mut stmts = Vec::new();
    let mut rows = String::new();
    for e in changed {
        // As a tuple: a JSON array straight from the entry's fields.
        let row = (
            e.seq,
            &e.name,
            e.kind.as_str(),
            e.state.as_str(),
            e.attempts,
            e.started_ms,
            e.finished_ms,
            e.wake_at_ms,
            &e.error_tag,
            &e.error_message,
            e.value.as_ref().map(String::len),
        );
        // Numbers, strings and nulls only: serializing cannot fail.
        let row = serde_json::to_string(&row).unwrap_or_default();
        if !rows.is_empty() && rows.len() + row.len() + 2 > STEP_ROWS_JSON_BYTES_MAX {
            stmts.push(step_rows_stmt(id, &rows));
            rows.clear();
        }
        rows.push(if rows.is_empty() { '[' } else { ',' });
        rows.push_str(&row);
    }
    if !rows.is_empty() {
        stmts.push(step_rows_stmt(id, &rows));
    }
    stmts
}

fn step_rows_stmt(id: &str, rows: &str) -> Stmt {
    stmt!(
        "INSERT OR REPLACE INTO execution_steps (execution_id, seq, name, kind, state, attempts, \
         started_ms, finished_ms, wake_at_ms, error_tag, error_message, result_bytes) \
         SELECT ?1, json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
         json_extract(value, '$[2]'), json_extract(value, '$[3]'), json_extract(value, '$[4]'), \
         json_extract(value, '$[5]'), json_extract(value, '$[6]'), json_extract(value, '$[7]'), \
         json_extract(value, '$[8]'), json_extract(value, '$[9]'), json_extract(value, '$[10]') \
         FROM json_each(?2)",
        id,
        format!("{rows}]"),
    )
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

/// Most unit rows one pipeline page reads: a commit's units over a few
/// attempts (a pipeline starts at most 64, `kit::pipeline::UNITS_MAX`).
pub const UNITS_LISTED_MAX: u32 = 256;

/// The pipeline units the commit's check `parent_id` started: checks of
/// its commit whose key names a job (`:job-`) and whose input names the
/// parent (`wakes`), oldest first.
pub async fn units_of_parent(
    db: &dyn Database,
    repo: &str,
    sha: &str,
    parent_id: &str,
) -> Result<Vec<ExecutionRow>, StoreError> {
    let rows: Vec<ExecutionRow> = decode(
        db.all(stmt!(
            format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions WHERE repo = ?1 AND sha = ?2 \
                 AND run = 'check' AND instr(key, ':job-') > 0 ORDER BY created_ms LIMIT ?3"
            ),
            repo,
            sha,
            UNITS_LISTED_MAX,
        ))
        .await?,
    )?;
    let wakes = |r: &ExecutionRow| {
        serde_json::from_str::<serde_json::Value>(&r.input_json)
            .ok()
            .and_then(|v| v.get("wakes")?.as_str().map(|w| w == parent_id))
            .unwrap_or(false)
    };
    Ok(rows.into_iter().filter(wakes).collect())
}

/// `cost::CostUnits`'s fields, which are also the `executions` columns
/// (migration 0009).
const COST_COLUMNS: &str = "do_requests, do_active_ms, do_rows_read, do_rows_written, \
     d1_statements, d1_rows_read, d1_rows_written, r2_class_a, r2_class_b, github_calls, sandbox_ms";

/// An execution with what it cost so far, in one statement.
pub async fn get_with_costs(
    db: &dyn Database,
    id: &str,
) -> Result<Option<(ExecutionRow, CostUnits)>, StoreError> {
    let rows = db
        .all(stmt!(
            format!("SELECT {EXECUTION_COLUMNS}, {COST_COLUMNS} FROM executions WHERE id = ?1"),
            id
        ))
        .await?;
    let Some(row) = rows.into_iter().next() else {
        return Ok(None);
    };
    Ok(Some((decode_row(row.clone())?, decode_row(row)?)))
}

/// One repository's executions created in a period, and what they cost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepoCosts {
    /// None: executions of no repository (operators' probes).
    pub repo: Option<String>,
    pub executions: u64,
    /// Durable calls journaled (steps, sleeps, waits): what Workflows bills.
    pub steps: u64,
    #[serde(flatten)]
    pub units: CostUnits,
}

/// Costs summed per repository over executions created at or after
/// `since_ms` (of one run when given), at most `limit` repositories in
/// repository order. A scan of the period's rows: an operator's query,
/// not a hot path.
pub async fn costs_by_repo(
    db: &dyn Database,
    since_ms: i64,
    run: Option<&str>,
    limit: u32,
) -> Result<Vec<RepoCosts>, StoreError> {
    let sums: String = COST_COLUMNS
        .split(", ")
        .map(|c| format!("COALESCE(SUM({c}), 0) AS {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    let rows = db
        .all(stmt!(
            format!(
                "SELECT repo, COUNT(*) AS executions, COALESCE(SUM(step_count), 0) AS steps, {sums} \
                 FROM executions WHERE created_ms >= ?1 AND (?2 IS NULL OR run = ?2) \
                 GROUP BY repo ORDER BY repo LIMIT ?3"
            ),
            since_ms,
            run,
            limit,
        ))
        .await?;
    decode(rows)
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

/// Filters of the executions list (`GET /v1/executions`, the dashboard);
/// every field optional, all given ones must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ListFilter {
    pub run: Option<String>,
    pub repo: Option<String>,
    pub status: Option<String>,
    pub entity: Option<String>,
    /// Created at or after (ms since epoch).
    #[serde(default)]
    pub since_ms: Option<i64>,
    /// Created before (ms since epoch).
    #[serde(default)]
    pub until_ms: Option<i64>,
    /// Runs whose instances are left out (the dashboard lists Sluice's
    /// bookkeeping apart); empty: none.
    #[serde(default)]
    pub runs_excluded: Vec<String>,
    /// Only these runs' instances; None: any run (`Some(vec![])` matches
    /// nothing).
    #[serde(default)]
    pub runs_only: Option<Vec<String>>,
}

/// Where a page of a time-ordered list ends: the time and the unique key of
/// its last row (`created_ms` and `id` of an execution, `received_ms` and
/// `delivery_id` of a delivery). Lists go newest first, ties by key
/// descending, so the next page is everything strictly before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at_ms: i64,
    pub key: String,
}

impl Cursor {
    /// `<ms>.<key>`: URL-safe for instance ids; callers percent-encode it
    /// in links anyway, since a delivery id may hold anything.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.at_ms, self.key)
    }

    /// The inverse of `encode`; None for anything it did not make.
    pub fn decode(s: &str) -> Option<Cursor> {
        let (ms, key) = s.split_once('.')?;
        if key.is_empty() || key.len() > CURSOR_KEY_CHARS_MAX || ms.starts_with('+') {
            return None;
        }
        Some(Cursor {
            at_ms: ms.parse().ok()?,
            key: key.to_owned(),
        })
    }
}

/// A cursor's key is an instance id (100 characters) or a delivery GUID
/// (intake refuses ids over 100); anything longer was not made here.
const CURSOR_KEY_CHARS_MAX: usize = 200;

/// One page of a list and the cursor of the next (None: this is the last).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

/// Fetches `limit + 1` rows and keeps `limit`: the extra row only says
/// whether a next page exists.
fn page_of<T>(mut rows: Vec<T>, limit: u32, cursor_of: impl Fn(&T) -> String) -> Page<T> {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    let next_cursor = if more {
        rows.last().map(cursor_of)
    } else {
        None
    };
    Page {
        items: rows,
        next_cursor,
    }
}

/// The first `limit` executions matching `f`, newest first.
pub async fn list(
    db: &dyn Database,
    f: &ListFilter,
    limit: u32,
) -> Result<Vec<ExecutionRow>, StoreError> {
    Ok(list_page(db, f, None, limit).await?.items)
}

/// One page of executions matching `f`, newest first (ties by id,
/// descending), starting after `after`.
pub async fn list_page(
    db: &dyn Database,
    f: &ListFilter,
    after: Option<&Cursor>,
    limit: u32,
) -> Result<Page<ExecutionRow>, StoreError> {
    // Each filter is `(?n IS NULL OR col = ?n)` so one statement serves all;
    // the order is `executions_by_created`'s (migration 0005), so an
    // unfiltered page is an index range scan. The run sets go as JSON
    // arrays (`json_each`, in D1 and SQLite alike): a statement's parameters
    // are fixed.
    let runs_excluded = (!f.runs_excluded.is_empty()).then(|| json_array(&f.runs_excluded));
    let runs_only = f.runs_only.as_deref().map(json_array);
    let rows = db
        .all(stmt!(
            format!(
                "SELECT {EXECUTION_COLUMNS} FROM executions WHERE (?1 IS NULL OR run = ?1) \
                 AND (?2 IS NULL OR repo = ?2) AND (?3 IS NULL OR status = ?3) \
                 AND (?4 IS NULL OR entity = ?4) AND (?5 IS NULL OR created_ms >= ?5) \
                 AND (?6 IS NULL OR created_ms < ?6) \
                 AND (?7 IS NULL OR created_ms < ?7 OR (created_ms = ?7 AND id < ?8)) \
                 AND (?10 IS NULL OR run NOT IN (SELECT value FROM json_each(?10))) \
                 AND (?11 IS NULL OR run IN (SELECT value FROM json_each(?11))) \
                 ORDER BY created_ms DESC, id DESC LIMIT ?9"
            ),
            f.run.clone(),
            f.repo.clone(),
            f.status.clone(),
            f.entity.clone(),
            f.since_ms,
            f.until_ms,
            after.map(|c| c.at_ms),
            after.map(|c| c.key.clone()),
            limit.saturating_add(1),
            runs_excluded,
            runs_only,
        ))
        .await?;
    let rows: Vec<ExecutionRow> = decode(rows)?;
    Ok(page_of(rows, limit, |r| {
        Cursor {
            at_ms: r.created_ms,
            key: r.id.clone(),
        }
        .encode()
    }))
}

/// `["a","b"]`: a list of names as a JSON array.
fn json_array(names: &[String]) -> String {
    serde_json::Value::from(names.to_vec()).to_string()
}

/// One page of an execution's steps in `seq` order, after `after_seq`.
pub async fn steps_page(
    db: &dyn Database,
    id: &str,
    after_seq: Option<i64>,
    limit: u32,
) -> Result<Page<StepRow>, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT seq, name, kind, state, attempts, started_ms, finished_ms, wake_at_ms, \
             error_tag, error_message, result_bytes FROM execution_steps \
             WHERE execution_id = ?1 AND (?2 IS NULL OR seq > ?2) ORDER BY seq LIMIT ?3",
            id,
            after_seq,
            limit.saturating_add(1),
        ))
        .await?;
    let rows: Vec<StepRow> = decode(rows)?;
    Ok(page_of(rows, limit, |s| s.seq.to_string()))
}

/// An execution waiting in an event wait a person decides (a deploy's
/// confirmation, a fork's approval), with that wait's step.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HumanWait {
    #[serde(flatten)]
    pub execution: ExecutionRow,
    /// The wait's step name as journaled ("approval", "approval#2").
    pub wait_name: String,
    pub wait_started_ms: i64,
    /// When the wait gives up.
    pub wait_deadline_ms: Option<i64>,
}

/// Wait names a person decides: a run names a handful at most.
pub const HUMAN_WAIT_NAMES_MAX: usize = 8;

/// Waiting executions whose waiting step is an event wait named one of
/// `names` (or a repeat of one, `name#2`), oldest deadline first.
pub async fn human_waits(
    db: &dyn Database,
    names: &[&str],
    limit: u32,
) -> Result<Vec<HumanWait>, StoreError> {
    let names = &names[..names.len().min(HUMAN_WAIT_NAMES_MAX)];
    if names.is_empty() {
        return Ok(Vec::new());
    }
    // ?1 is the limit; names are ?2.. (one placeholder each, used twice).
    let matches: Vec<String> = (0..names.len())
        .map(|i| format!("s.name = ?{n} OR s.name LIKE ?{n} || '#%'", n = i + 2))
        .collect();
    let sql = format!(
        "{} AND ({}) ORDER BY s.wake_at_ms, e.id LIMIT ?1",
        waiting_select(),
        matches.join(" OR ")
    );
    let mut params = vec![Param::from(limit)];
    params.extend(names.iter().map(|n| Param::from(*n)));
    decode(db.all(Stmt::new(sql, params)).await?)
}

/// Waiting executions joined to the wait step they are in (a human wait's
/// name, start and deadline): the head both human-wait queries filter.
fn waiting_select() -> String {
    let columns: String = EXECUTION_COLUMNS
        .split(", ")
        .map(|c| format!("e.{c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "SELECT {columns}, s.name AS wait_name, s.started_ms AS wait_started_ms, \
         s.wake_at_ms AS wait_deadline_ms FROM executions e JOIN execution_steps s \
         ON s.execution_id = e.id WHERE e.status = 'waiting' AND s.kind = 'wait' \
         AND s.state = 'waiting'"
    )
}

/// The human waits `ids` are in (at most one each: an instance waits in
/// one step at a time).
pub async fn human_waits_of(db: &dyn Database, ids: &[&str]) -> Result<Vec<HumanWait>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks: Vec<String> = (1..=ids.len()).map(|n| format!("?{n}")).collect();
    let sql = format!("{} AND e.id IN ({})", waiting_select(), marks.join(", "));
    let params = ids.iter().map(|id| Param::from(*id)).collect();
    decode(db.all(Stmt::new(sql, params)).await?)
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

/// Ends a row whose instance was never created (its object answered a
/// terminate with no instance): terminated, no longer due, so the sweep
/// never creates it. Only a row still `queued`, as a batch wrote it; a row
/// its object has mirrored is the object's to end. Returns whether it did.
pub async fn end_uncreated(db: &dyn Database, id: &str, now_ms: i64) -> Result<bool, StoreError> {
    let changes = db
        .run(stmt!(
            "UPDATE executions SET status = 'terminated', error_tag = 'Terminated', \
             error_message = 'terminated before its instance was created', wake_at_ms = NULL, \
             finished_ms = ?2, updated_ms = ?2 WHERE id = ?1 AND status = 'queued'",
            id,
            now_ms,
        ))
        .await?;
    Ok(changes == 1)
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
    db.run(record_delivery_stmt(row)).await?;
    Ok(())
}

pub fn record_delivery_stmt(row: &DeliveryRow) -> Stmt {
    stmt!(
        "INSERT OR IGNORE INTO webhook_deliveries (delivery_id, event, action, repo, \
         instance_ids_json, received_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        row.delivery_id.as_str(),
        row.event.as_str(),
        row.action.clone(),
        row.repo.clone(),
        row.instance_ids_json.as_str(),
        row.received_ms,
    )
}

/// An instance a delivery asks for, before its object exists.
pub struct Requested<'a> {
    pub id: &'a str,
    pub key: &'a str,
    pub run: &'a str,
    pub repo: Option<&'a str>,
    pub entity: Option<&'a str>,
    pub sha: Option<&'a str>,
    pub input_json: &'a str,
}

/// The row `insert` writes, queued and due now, written on the webhook's
/// answer path so the instance is in the index (and the sweep recreates
/// its object if its create never arrives) before the object is asked to
/// create it. A second insert of the id or key changes nothing (0 rows:
/// the instance exists), and nothing is inserted for a `delivery_id`
/// recorded already: a redelivery writes no row back even where the run's
/// row was purged before the delivery's (the sweep would recreate it).
pub fn insert_requested_stmt(r: &Requested<'_>, now_ms: i64, delivery_id: &str) -> Stmt {
    stmt!(
        "INSERT OR IGNORE INTO executions (id, key, run, repo, entity, sha, status, wake_at_ms, \
         input_json, step_count, index_round_trips, created_ms, updated_ms) \
         SELECT ?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?8, 0, 1, ?7, ?7 \
         WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries WHERE delivery_id = ?9)",
        r.id,
        r.key,
        r.run,
        r.repo,
        r.entity,
        r.sha,
        now_ms,
        r.input_json,
        delivery_id,
    )
}

/// The row `insert` writes, queued and due now, for an instance its
/// caller creates together with others (`engine::index_creates`): one
/// statement of one batch. A second insert of the id or key changes nothing.
pub fn insert_requested_now_stmt(r: &Requested<'_>, now_ms: i64) -> Stmt {
    stmt!(
        "INSERT OR IGNORE INTO executions (id, key, run, repo, entity, sha, status, wake_at_ms, \
         input_json, step_count, index_round_trips, created_ms, updated_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, ?8, 0, 1, ?7, ?7)",
        r.id,
        r.key,
        r.run,
        r.repo,
        r.entity,
        r.sha,
        now_ms,
        r.input_json,
    )
}

/// The check and deploy runs of a commit, oldest first, at most `limit`:
/// what a check suite's "Re-run all" repeats. Not a pipeline's job units
/// (`…:job-…` keys, `runs::kit::key`): the commit's check, re-run, starts
/// them again.
pub async fn runs_of_commit(
    db: &dyn Database,
    repo: &str,
    sha: &str,
    limit: u32,
) -> Result<Vec<ExecutionRow>, StoreError> {
    let sql = format!(
        "SELECT {EXECUTION_COLUMNS} FROM executions WHERE repo = ?1 AND sha = ?2 \
         AND run IN ('check','deploy') AND instr(key, ':job-') = 0 \
         ORDER BY created_ms LIMIT ?3"
    );
    decode(db.all(stmt!(sql, repo, sha, limit)).await?)
}

/// Checks of `entity` (a pull request, a branch) in `repo` that have not
/// ended, of the commits `shas` selects: what a newer head supersedes, what
/// a closed pull request or a destroyed merge group ends. Pipeline units
/// come first, so each is ended saying why before its parent's end would
/// end it as "the pipeline was terminated".
pub async fn live_checks_of(
    db: &dyn Database,
    repo: &str,
    entity: &str,
    shas: ShaFilter<'_>,
) -> Result<Vec<LiveCheck>, StoreError> {
    let (except, only) = match shas {
        ShaFilter::All => (None, None),
        ShaFilter::Except(sha) => (Some(sha), None),
        ShaFilter::Only(sha) => (None, Some(sha)),
    };
    decode(
        db.all(stmt!(
            "SELECT id, sha, input_json FROM executions WHERE entity = ?1 AND repo = ?2 AND run = 'check' \
               AND (?3 IS NULL OR sha <> ?3) AND (?5 IS NULL OR sha = ?5) \
               AND status IN ('queued','running','waiting','paused') \
             ORDER BY instr(key, ':job-') = 0, created_ms LIMIT ?4",
            entity,
            repo,
            except,
            SUPERSEDED_PER_HEAD_MAX,
            only,
        ))
        .await?,
    )
}

/// A check that has not ended: its id, commit and input (which names its
/// check run: a pipeline job's unit reports as itself).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LiveCheck {
    pub id: String,
    pub sha: String,
    pub input_json: String,
}

/// How an instance stands: what a pipeline's parent reads of its children.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Standing {
    pub id: String,
    pub status: String,
    pub output_json: Option<String>,
}

/// The standing of each instance `ids` names that exists, in one query
/// (the caller bounds `ids`: D1 binds at most 100 parameters).
pub async fn standings(db: &dyn Database, ids: &[&str]) -> Result<Vec<Standing>, StoreError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks: Vec<String> = (1..=ids.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "SELECT id, status, output_json FROM executions WHERE id IN ({})",
        marks.join(",")
    );
    let params: Vec<Param> = ids.iter().map(|i| Param::from(*i)).collect();
    decode(db.all(Stmt::new(sql, params)).await?)
}

/// Which commits' checks `live_checks_of` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShaFilter<'a> {
    All,
    Except(&'a str),
    Only(&'a str),
}

/// The newest attempt of the instance keyed `base` (itself, or a
/// `<base>:rerun-…`), with its status: what a run that needs it reads. A
/// key range, not LIKE, whose `_` would match any character.
pub async fn newest_attempt(
    db: &dyn Database,
    base: &str,
) -> Result<Option<(String, String)>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        id: String,
        status: String,
    }
    // `<base>:rerun-` ≤ key < `<base>:rerun.` ('.' follows '-'): exactly
    // the keys with that prefix, as a range the key index answers.
    let (from, to) = (format!("{base}:rerun-"), format!("{base}:rerun."));
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "SELECT id, status FROM executions \
             WHERE key = ?1 OR (key >= ?2 AND key < ?3) \
             ORDER BY created_ms DESC, id DESC LIMIT 1",
            base,
            from.as_str(),
            to.as_str(),
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next().map(|r| (r.id, r.status)))
}

/// Live checks one read lists: each push ends its predecessor, whose check
/// has started at most `kit::pipeline::UNITS_MAX` (64) job units; more
/// than this live at once means the pushes outran the checks.
const SUPERSEDED_PER_HEAD_MAX: u32 = 100;

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

/// Filters of the deliveries list (`GET /v1/deliveries`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeliveryFilter {
    pub repo: Option<String>,
    /// `X-GitHub-Event` (`pull_request`, `push`).
    pub event: Option<String>,
    /// Received at or after / before (ms since epoch).
    pub since_ms: Option<i64>,
    pub until_ms: Option<i64>,
}

/// One page of deliveries matching `f`, newest first, after `after`.
pub async fn deliveries_page(
    db: &dyn Database,
    f: &DeliveryFilter,
    after: Option<&Cursor>,
    limit: u32,
) -> Result<Page<DeliveryRow>, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT delivery_id, event, action, repo, instance_ids_json, received_ms \
             FROM webhook_deliveries WHERE (?1 IS NULL OR repo = ?1) \
             AND (?2 IS NULL OR event = ?2) AND (?3 IS NULL OR received_ms >= ?3) \
             AND (?4 IS NULL OR received_ms < ?4) \
             AND (?5 IS NULL OR received_ms < ?5 OR (received_ms = ?5 AND delivery_id < ?6)) \
             ORDER BY received_ms DESC, delivery_id DESC LIMIT ?7",
            f.repo.clone(),
            f.event.clone(),
            f.since_ms,
            f.until_ms,
            after.map(|c| c.at_ms),
            after.map(|c| c.key.clone()),
            limit.saturating_add(1),
        ))
        .await?;
    let rows: Vec<DeliveryRow> = decode(rows)?;
    Ok(page_of(rows, limit, |d| {
        Cursor {
            at_ms: d.received_ms,
            key: d.delivery_id.clone(),
        }
        .encode()
    }))
}
