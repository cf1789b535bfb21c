//! A commit's pipeline as a graph (ADR-0013,
//! docs/adr/0013-pipelines-as-child-instances.md): one column per stage
//! (a job stands one column right of the deepest job it needs), each job a
//! box with its outcome, duration, the jobs it needs (its arrows) and its
//! units (matrix cells and shards grouped under it, each linked to its
//! execution). The API returns the same structure (`PipelineView`).
//!
//! Built from the parent's output (`pipeline`: jobs, needs, results, why,
//! written when the parent ends) and its units' index rows, so a running
//! pipeline shows the units started so far, grouped by job, without arrows.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::engine::Status;
use crate::runs::pipeline::{JobRecord, JobUnit};
use crate::store::executions::ExecutionRow;

use super::escape::Html;
use super::layout;
use super::paths;
use super::time;

/// One unit of a job as drawn: its check run's name and its execution.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UnitView {
    pub id: String,
    pub name: String,
    pub status: String,
    /// Its check run's conclusion once it ended.
    pub conclusion: Option<String>,
    pub duration_ms: Option<i64>,
    #[serde(skip)]
    output_json: Option<String>,
}

/// One job as drawn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobView {
    pub name: String,
    pub needs: Vec<String>,
    /// `passed`, `failed`, `cancelled`, `skipped`, `blocked` once the
    /// pipeline ended; `running` before.
    pub result: String,
    pub why: Option<String>,
    /// Its column: 0 for a job that needs none.
    pub stage: usize,
    pub units: Vec<UnitView>,
}

/// A commit's pipeline as the dashboard and the API show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelineView {
    pub jobs: Vec<JobView>,
}

/// The pipeline of the commit's check whose output is `parent_output`,
/// with the units it started; None for a check that is no pipeline.
pub fn view(parent_output: Option<&str>, units: &[ExecutionRow]) -> Option<PipelineView> {
    let records: Vec<JobRecord> = parent_output
        .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
        .and_then(|o| serde_json::from_value(o.get("pipeline")?.clone()).ok())
        .unwrap_or_default();
    let mut by_job: BTreeMap<String, Vec<UnitView>> = BTreeMap::new();
    // A restarted parent ran every job again as new units (`.g<n>` keys):
    // the pipeline is its newest generation's.
    let newest = units
        .iter()
        .map(|r| generation_of(&r.key))
        .max()
        .unwrap_or(0);
    for row in units.iter().filter(|r| generation_of(&r.key) == newest) {
        if let Some(unit) = unit_of(row) {
            by_job
                .entry(unit.job.clone())
                .or_default()
                .push(unit_view(row, &unit));
        }
    }
    let mut jobs: Vec<JobView> = records
        .iter()
        .map(|r| JobView {
            name: r.name.clone(),
            needs: r.needs.clone(),
            result: serde_json::to_value(r.result)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            why: r.why.clone(),
            stage: 0,
            units: by_job.remove(&r.name).unwrap_or_default(),
        })
        .collect();
    // Units of jobs the output does not list yet (a running pipeline).
    jobs.extend(by_job.into_iter().map(|(name, units)| JobView {
        name,
        needs: Vec::new(),
        result: "running".into(),
        why: None,
        stage: 0,
        units,
    }));
    if jobs.is_empty() {
        return None;
    }
    place(&mut jobs);
    Some(PipelineView { jobs })
}

/// The parent's generation a unit's key names: `…:job-<part>-<tail>.g<n>`
/// (`runs::check::pipeline::unit_create`), 0 without the suffix.
fn generation_of(key: &str) -> u32 {
    let job = key.rsplit(':').next().unwrap_or_default();
    job.rsplit_once(".g")
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

fn unit_of(row: &ExecutionRow) -> Option<JobUnit> {
    let input: serde_json::Value = serde_json::from_str(&row.input_json).ok()?;
    serde_json::from_value(input.get("job")?.clone()).ok()
}

fn unit_view(row: &ExecutionRow, unit: &JobUnit) -> UnitView {
    let conclusion = row
        .output_json
        .as_deref()
        .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
        .and_then(|o| o.get("conclusion")?.as_str().map(str::to_owned));
    UnitView {
        id: row.id.clone(),
        name: unit.check_run_name(),
        status: row.status.clone(),
        conclusion,
        duration_ms: row.finished_ms.map(|f| f - row.created_ms),
        output_json: row.output_json.clone(),
    }
}

/// Each job's stage: one more than the deepest job it needs. Each round
/// settles at least one more level: bounded by the number of jobs.
fn place(jobs: &mut [JobView]) {
    for _ in 0..jobs.len() {
        let stages: BTreeMap<String, usize> =
            jobs.iter().map(|j| (j.name.clone(), j.stage)).collect();
        let mut moved = false;
        for job in jobs.iter_mut() {
            let want = job
                .needs
                .iter()
                .filter_map(|n| stages.get(n))
                .map(|s| s + 1)
                .max()
                .unwrap_or(0);
            moved |= want != job.stage;
            job.stage = want;
        }
        if !moved {
            break;
        }
    }
}

/// The pipeline section of a commit check's page.
pub fn section(h: &mut Html, view: &PipelineView) {
    let stages = view.jobs.iter().map(|j| j.stage).max().unwrap_or(0);
    h.raw("<section id=\"pipeline\" data-live><h2>Pipeline</h2><div class=\"pipeline\">");
    for stage in 0..=stages {
        h.raw("<div class=\"stage\">");
        for job in view.jobs.iter().filter(|j| j.stage == stage) {
            job_box(h, job);
        }
        h.raw("</div>");
    }
    h.raw("</div></section>");
}

fn job_box(h: &mut Html, job: &JobView) {
    h.raw("<div class=\"job job-")
        .raw(result_class(&job.result))
        .raw("\"><p class=\"job-head\"><strong>")
        .text(&job.name)
        .raw("</strong> <span class=\"st st-")
        .raw(result_class(&job.result))
        .raw("\">")
        .text(result_label(&job.result))
        .raw("</span>");
    let ended: Vec<i64> = job.units.iter().filter_map(|u| u.duration_ms).collect();
    if let Some(longest) = ended
        .iter()
        .max()
        .filter(|_| ended.len() == job.units.len())
    {
        h.raw(" <span class=\"dur\">")
            .text(&time::duration(*longest))
            .raw("</span>");
    }
    h.raw("</p>");
    if !job.needs.is_empty() {
        h.raw("<p class=\"needs\">needs ");
        for (i, n) in job.needs.iter().enumerate() {
            if i > 0 {
                h.raw(", ");
            }
            h.raw("← ").text(n);
        }
        h.raw("</p>");
    }
    if let Some(why) = &job.why {
        h.raw("<p class=\"why\">").text(why).raw("</p>");
    }
    if !job.units.is_empty() {
        h.raw("<ul class=\"units\">");
        for u in &job.units {
            h.raw("<li><a")
                .href(&paths::execution(&u.id))
                .raw(">")
                .text(&u.name)
                .raw("</a> ");
            layout::outcome_badge(h, &u.status, u.output_json.as_deref());
            h.raw("</li>");
        }
        h.raw("</ul>");
    }
    h.raw("</div>");
}

/// The class of a job's result, from a closed set.
fn result_class(result: &str) -> &'static str {
    match result {
        "passed" => "passed",
        "failed" => "failed",
        "cancelled" => "cancelled",
        "skipped" | "blocked" => "skipped",
        _ => Status::Running.as_str(),
    }
}

fn result_label(result: &str) -> &'static str {
    match result {
        "passed" => "passed",
        "failed" => "failed",
        "cancelled" => "cancelled",
        "skipped" => "skipped",
        "blocked" => "skipped: a need failed",
        _ => "running",
    }
}
