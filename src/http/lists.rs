//! The `/v1/` lists: their query strings parsed strictly (an unknown or
//! malformed parameter is a 400 that names it, never silently ignored),
//! one page read, and the JSON answer with the cursor of the next page.
//! Over `Database` only (tested natively, `tests/dashboard.rs`; `docs/openapi.json` documents them).
//!
//! Every list takes `cursor` (the `next_cursor` of the previous page) and
//! `limit`; time ranges are `since` (at or after) and `until` (before), in
//! ms since the epoch or as ISO-8601 UTC (`2025-10-09T08:53:20Z`).

use serde_json::{json, Value};

use crate::cost::{prices, CostUnits};
use crate::engine::{InstanceId, Status};
use crate::gates::serial::{self, GroupFilter};
use crate::limits::{EXECUTIONS_LISTED_MAX, GROUPS_LISTED_MAX, STEPS_LISTED_MAX};
use crate::runs::approval::{human_wait_of, Decider};
use crate::store::executions::{
    self, Cursor, DeliveryFilter, ExecutionRow, ListFilter, WaitingFor,
};
use crate::store::releases;
use crate::store::Database;

use super::error::ApiError;
use super::pages::query::{form_pairs, FILTER_CHARS_MAX};
use super::pages::time::parse_utc;

/// Deliveries listed per page at most (and by default).
pub const DELIVERIES_LISTED_MAX: u32 = 200;

/// The query parameters of each list (`docs/openapi.json` documents
/// exactly these: `tests/openapi.rs`).
pub const EXECUTIONS_PARAMS: &[&str] = &[
    "run", "repo", "status", "entity", "since", "until", "cursor", "limit",
];
pub const EXECUTION_PARAMS: &[&str] = &["steps_cursor", "steps_limit"];
pub const DELIVERIES_PARAMS: &[&str] = &["repo", "event", "since", "until", "cursor", "limit"];
pub const GROUPS_PARAMS: &[&str] = &["repo", "cursor", "limit"];
pub const COSTS_PARAMS: &[&str] = &["since", "run", "limit"];

/// Repositories `GET /v1/costs` answers at most (and by default): one
/// page of an installation's repositories; a larger account narrows by
/// `since` or `run`.
pub const COSTS_REPOS_LISTED_MAX: u32 = 1_000;

/// The parameters of one query string, checked against the names a list
/// takes.
struct Params(Vec<(String, String)>);

impl Params {
    fn parse(query: &str, allowed: &[&str]) -> Result<Params, ApiError> {
        let pairs = form_pairs(query);
        for (k, v) in &pairs {
            if !allowed.contains(&k.as_str()) {
                return Err(ApiError::bad_request(
                    "bad_query",
                    format!("unknown query parameter {k:?}; this list takes {allowed:?}"),
                ));
            }
            if v.len() > FILTER_CHARS_MAX {
                return Err(ApiError::bad_request(
                    "bad_query",
                    format!("{k} is longer than {FILTER_CHARS_MAX} characters"),
                ));
            }
        }
        Ok(Params(pairs))
    }

    /// A text value; empty counts as absent.
    fn text(&self, key: &str) -> Option<String> {
        self.0
            .iter()
            .rev()
            .find(|(k, v)| k == key && !v.is_empty())
            .map(|(_, v)| v.clone())
    }

    /// A time: ms since the epoch, or ISO-8601 UTC.
    fn time_ms(&self, key: &str) -> Result<Option<i64>, ApiError> {
        let Some(v) = self.text(key) else {
            return Ok(None);
        };
        v.parse::<i64>()
            .ok()
            .or_else(|| parse_utc(&v))
            .map(Some)
            .ok_or_else(|| {
                ApiError::bad_request(
                    "bad_query",
                    format!("{key} must be ms since the epoch or ISO-8601 UTC, not {v:?}"),
                )
            })
    }

    /// `limit`: 1 to `max`, `max` when absent.
    fn limit(&self, key: &str, max: u32) -> Result<u32, ApiError> {
        match self.text(key) {
            None => Ok(max),
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| {
                    ApiError::bad_request("bad_query", format!("{key} must be 1 to {max}"))
                }),
        }
    }

    /// `cursor`: what a previous page's `next_cursor` said.
    fn cursor(&self, key: &str) -> Result<Option<Cursor>, ApiError> {
        match self.text(key) {
            None => Ok(None),
            Some(v) => Cursor::decode(&v).map(Some).ok_or_else(bad_cursor),
        }
    }
}

fn bad_cursor() -> ApiError {
    ApiError::bad_request(
        "bad_cursor",
        "cursor is not a next_cursor this list returned",
    )
}

/// The filter, page start and size of `GET /v1/executions`.
pub fn executions_query(query: &str) -> Result<(ListFilter, Option<Cursor>, u32), ApiError> {
    let p = Params::parse(query, EXECUTIONS_PARAMS)?;
    let status = p.text("status");
    if let Some(s) = &status {
        if Status::parse(s).is_none() {
            return Err(ApiError::bad_request(
                "bad_query",
                format!("status {s:?} is not one of queued, running, waiting, paused, errored, terminated, complete, skipped"),
            ));
        }
    }
    let filter = ListFilter {
        run: p.text("run"),
        repo: p.text("repo"),
        status,
        entity: p.text("entity"),
        since_ms: p.time_ms("since")?,
        until_ms: p.time_ms("until")?,
        ..ListFilter::default()
    };
    Ok((
        filter,
        p.cursor("cursor")?,
        p.limit("limit", EXECUTIONS_LISTED_MAX)?,
    ))
}

/// `GET /v1/executions`: one page, newest first.
pub async fn executions(db: &dyn Database, query: &str) -> Result<Value, ApiError> {
    let (filter, after, limit) = executions_query(query)?;
    let mut page = executions::list_page(db, &filter, after.as_ref(), limit).await?;
    with_waits(db, &mut page.items).await?;
    Ok(json!({ "executions": page.items, "next_cursor": page.next_cursor }))
}

/// Fills `waiting_for` of every row waiting on a person: the wait, who
/// decides (a release's approvers from its approval row) and its window.
/// Two statements for a page, whatever its size.
async fn with_waits(db: &dyn Database, rows: &mut [ExecutionRow]) -> Result<(), ApiError> {
    let waiting: Vec<&str> = rows
        .iter()
        .filter(|r| r.status == Status::Waiting.as_str())
        .map(|r| r.id.as_str())
        .collect();
    if waiting.is_empty() {
        return Ok(());
    }
    let waits = executions::human_waits_of(db, &waiting).await?;
    let approvers = releases::deciders_of(db, &waiting).await?;
    for row in rows.iter_mut() {
        let Some(w) = waits.iter().find(|w| w.execution.id == row.id) else {
            continue;
        };
        let Some(kind) = human_wait_of(&w.wait_name) else {
            continue;
        };
        let repo = row.repo.as_deref().unwrap_or("the repository");
        // A release's window ends at its deadline; its wait listens a
        // little longer for decisions GitHub dated inside it.
        let mut until_ms = w.wait_deadline_ms;
        let decider = match kind.decider {
            Decider::Operator => {
                "an operator (POST /v1/executions/{id}/events/deploy-confirm)".to_owned()
            }
            Decider::GitHubWriteAccess => format!("someone with write access to {repo}"),
            Decider::ReleaseApprovers => match approvers.iter().find(|a| a.instance_id == row.id) {
                Some(a) => {
                    until_ms = Some(a.deadline_ms);
                    a.deciders.clone()
                }
                None => format!("a release approver of {repo}"),
            },
        };
        row.waiting_for = Some(WaitingFor {
            wait: w.wait_name.clone(),
            decider,
            since_ms: w.wait_started_ms,
            until_ms,
        });
    }
    Ok(())
}

/// `GET /v1/executions/{id}`: the execution and a page of its steps
/// (`steps_cursor`, `steps_limit`).
pub async fn execution(db: &dyn Database, id: &InstanceId, query: &str) -> Result<Value, ApiError> {
    let p = Params::parse(query, EXECUTION_PARAMS)?;
    let after = match p.text("steps_cursor") {
        None => None,
        Some(v) => Some(v.parse::<i64>().map_err(|_| bad_cursor())?),
    };
    let limit = p.limit("steps_limit", STEPS_LISTED_MAX)?;
    let (row, units) = executions::get_with_costs(db, id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no execution {id}")))?;
    let mut rows = [row];
    with_waits(db, &mut rows).await?;
    let [row] = rows;
    let steps = executions::steps_page(db, id.as_str(), after, limit).await?;
    let priced = priced(&units, 1, row.step_count.max(0) as u64);
    let pipeline = super::dashboard::pipeline_of(db, &row).await?;
    Ok(json!({
        "execution": row,
        "pipeline": pipeline,
        "costs": priced,
        "steps": steps.items,
        "next_steps_cursor": steps.next_cursor,
    }))
}

/// The artifacts of an execution as `GET /v1/executions/{id}` answers
/// them: its own archive (a pipeline job's unit) and, for a commit's
/// pipeline, its units' (`detail` is that answer's JSON), each with a
/// signed download path when `LOG_LINK_SECRET` is set.
pub async fn artifacts(
    db: &dyn Database,
    detail: &Value,
    secret: Option<&[u8]>,
    now_ms: i64,
) -> Result<Value, ApiError> {
    let mut ids: Vec<String> = detail["execution"]["id"]
        .as_str()
        .map(str::to_owned)
        .into_iter()
        .collect();
    if let Some(jobs) = detail["pipeline"]["jobs"].as_array() {
        for unit in jobs.iter().filter_map(|j| j["units"].as_array()).flatten() {
            ids.extend(unit["id"].as_str().map(str::to_owned));
        }
    }
    let rows = crate::store::artifacts::of_units(db, &ids).await?;
    Ok(Value::Array(
        rows.iter()
            .map(|r| {
                let mut v = json!(r);
                if let Some(secret) = secret {
                    v["download"] = json!(crate::runs::kit::artifacts::signed_path(
                        secret,
                        &r.instance_id,
                        now_ms
                    ));
                }
                v
            })
            .collect(),
    ))
}

/// Units with what they cost on Cloudflare's bill and what the same
/// executions would cost on Workers Workflows (`cost::prices`).
fn priced(units: &CostUnits, executions: u64, steps: u64) -> Value {
    json!({
        "units": units,
        "dollars": prices::dollars(units),
        "workflows_dollars": prices::workflows_dollars(units, executions, steps),
        "prices_taken": prices::PRICES_TAKEN,
    })
}

/// `GET /v1/costs`: what the executions created since `since` (the epoch
/// by default) cost, summed per repository, with the total.
pub async fn costs(db: &dyn Database, query: &str) -> Result<Value, ApiError> {
    let p = Params::parse(query, COSTS_PARAMS)?;
    let since_ms = p.time_ms("since")?.unwrap_or(0);
    let limit = p.limit("limit", COSTS_REPOS_LISTED_MAX)?;
    let rows = executions::costs_by_repo(db, since_ms, p.text("run").as_deref(), limit).await?;
    let (mut total, mut executions, mut steps) = (CostUnits::default(), 0, 0);
    let repositories: Vec<Value> = rows
        .iter()
        .map(|r| {
            total.add(&r.units);
            executions += r.executions;
            steps += r.steps;
            json!({
                "repo": r.repo,
                "executions": r.executions,
                "steps": r.steps,
                "costs": priced(&r.units, r.executions, r.steps),
            })
        })
        .collect();
    Ok(json!({
        "since_ms": since_ms,
        "repositories": repositories,
        "total": {
            "executions": executions,
            "steps": steps,
            "costs": priced(&total, executions, steps),
        },
    }))
}

/// `GET /v1/deliveries`: one page, newest first.
pub async fn deliveries(db: &dyn Database, query: &str) -> Result<Value, ApiError> {
    let p = Params::parse(query, DELIVERIES_PARAMS)?;
    let filter = DeliveryFilter {
        repo: p.text("repo"),
        event: p.text("event"),
        since_ms: p.time_ms("since")?,
        until_ms: p.time_ms("until")?,
    };
    let after = p.cursor("cursor")?;
    let limit = p.limit("limit", DELIVERIES_LISTED_MAX)?;
    let page = executions::deliveries_page(db, &filter, after.as_ref(), limit).await?;
    Ok(json!({ "deliveries": page.items, "next_cursor": page.next_cursor }))
}

/// `GET /v1/groups`: one page of groups with a holder or a waiter, by name.
pub async fn groups(db: &dyn Database, query: &str, now_ms: i64) -> Result<Value, ApiError> {
    let p = Params::parse(query, GROUPS_PARAMS)?;
    let filter = GroupFilter {
        repo: p.text("repo"),
        after: p.text("cursor"),
    };
    let limit = p.limit("limit", GROUPS_LISTED_MAX)?;
    let page = serial::groups_page(db, &filter, limit, now_ms).await?;
    Ok(json!({ "groups": page.items, "next_cursor": page.next_cursor }))
}
