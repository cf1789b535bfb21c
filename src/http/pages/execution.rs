//! One execution: what it is, why it ended or waits (a failed command's
//! last log lines inline), its actions, its phases with their durations
//! drawn to scale (`phases`), and the engine's own step list one click
//! away (attempts, errors with their tags, durations, waits with their
//! deadlines, log links).

use crate::engine::Status;
use crate::runs::command::summary_parts;

use super::actions::{self, Action, Actions, Fields};
use super::approvals::{self, ApprovalView};
use super::escape::{Html, Url};
use super::executions::{reason, run_time};
use super::layout::{self, cell, Nav, REFRESH_MS};
use super::paths;
use super::phases::{self, Phase};
use super::{ExecutionView, StepView};

/// What the execution page shows. The caller fills it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionPage {
    pub execution: ExecutionView,
    /// Its steps in `seq` order (`store::executions::steps`), each with
    /// its log link if any.
    pub steps: Vec<StepView>,
    /// More steps exist than `steps` holds (the store lists at most
    /// `limits::STEPS_LISTED_MAX`).
    pub steps_truncated: bool,
    /// Its waits for a human's decision (usually none or one).
    pub approvals: Vec<ApprovalView>,
    /// The serial group it queues in (`deploy:octo/hello:main`), if known:
    /// linked to the group's page.
    pub group: Option<String>,
    /// The pipeline, when this is a commit's check that runs jobs.
    pub pipeline: Option<super::pipeline::PipelineView>,
    /// The archives of its job (a unit) or of its pipeline's jobs.
    pub artifacts: Vec<ArtifactView>,
    /// Where action forms post; actions that do not fit the status are not
    /// shown (terminate a finished execution, resume a running one).
    pub actions: Actions,
}

/// One unit's archive as listed: whose, what it holds, and its signed
/// download link (none without `LOG_LINK_SECRET`).
#[derive(Debug, Clone, PartialEq)]
pub struct ArtifactView {
    pub label: String,
    pub what: String,
    pub download: Option<Url>,
}

/// What a job's dependency caches did (`runs::kit::caches::summary`: a
/// "**Caches**" paragraph of "- " lines in its verdict's summary), one
/// line per cache.
pub fn caches_of(output_json: Option<&str>) -> Vec<String> {
    let Some(output) = output_json.and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
    else {
        return Vec::new();
    };
    let summary = output["verdict"]["summary"].as_str().unwrap_or_default();
    let Some((_, rest)) = summary.split_once("**Caches**\n") else {
        return Vec::new();
    };
    rest.lines()
        .map_while(|l| l.strip_prefix("- "))
        .map(str::to_owned)
        .collect()
}

/// "Caches": what each of the job's dependency caches did.
fn caches_section(h: &mut Html, output_json: Option<&str>) {
    let lines = caches_of(output_json);
    if lines.is_empty() {
        return;
    }
    h.raw("<section id=\"caches\"><h2>Caches</h2><ul>");
    for line in &lines {
        h.raw("<li>").text(line).raw("</li>");
    }
    h.raw("</ul></section>");
}

/// "Artifacts": each unit's archive with its download link.
fn artifacts_section(h: &mut Html, artifacts: &[ArtifactView]) {
    if artifacts.is_empty() {
        return;
    }
    h.raw("<section id=\"artifacts\"><h2>Artifacts</h2><ul>");
    for a in artifacts {
        h.raw("<li><strong>")
            .text(&a.label)
            .raw("</strong>: ")
            .text(&a.what);
        match &a.download {
            Some(path) => {
                h.raw(" <a").href(path).raw(" download>download</a>");
            }
            None => {
                h.raw(" (set LOG_LINK_SECRET to download it here)");
            }
        }
        h.raw("</li>");
    }
    h.raw("</ul></section>");
}

pub fn render(page: &ExecutionPage, now_ms: i64) -> String {
    let r = &page.execution.row;
    let mut h = Html::new();
    h.raw("<p class=\"crumbs\"><a")
        .href(&paths::entity(r.repo.as_deref(), None))
        .raw(">");
    layout::opt_text(&mut h, r.repo.as_deref());
    h.raw("</a> › <a")
        .href(&paths::entity(r.repo.as_deref(), r.entity.as_deref()))
        .raw(">")
        .text(&layout::entity_label(r.entity.as_deref()))
        .raw("</a></p><h1>Execution <code>")
        .text(&r.id)
        .raw("</code></h1>");
    facts(&mut h, page, now_ms);
    actions_section(&mut h, page);
    if let Some(p) = &page.pipeline {
        super::pipeline::section(&mut h, p);
    }
    caches_section(&mut h, r.output_json.as_deref());
    artifacts_section(&mut h, &page.artifacts);
    if !page.approvals.is_empty() {
        approvals::section(&mut h, &page.approvals, &page.actions, now_ms);
    }
    let run_end_ms = r.finished_ms.unwrap_or(now_ms);
    phases::section(&mut h, &page.steps, r.created_ms, run_end_ms, now_ms);
    h.raw("<details class=\"engine-steps\"><summary>The engine's steps (")
        .num(page.steps.len() as i64)
        .raw(")</summary>");
    timeline(&mut h, page, now_ms);
    h.raw("</details>");
    let live = Status::parse(&r.status).is_none_or(|s| !s.is_terminal());
    let refresh_ms = if live { REFRESH_MS } else { 0 };
    layout::page(&r.id, Nav::Executions, refresh_ms, now_ms, &h)
}

fn facts(h: &mut Html, page: &ExecutionPage, now_ms: i64) {
    let r = &page.execution.row;
    h.raw("<section id=\"facts\" data-live><dl class=\"facts\">");
    fact(h, "Outcome", |h| {
        layout::outcome_badge(h, &r.status, r.output_json.as_deref())
    });
    fact(h, "Run", |h| {
        h.text(&r.run);
    });
    fact(h, "Revision", |h| layout::revision(h, r.sha.as_deref()));
    fact(h, "Created", |h| layout::time_el(h, r.created_ms, now_ms));
    fact(h, "Finished", |h| {
        layout::opt_time(h, r.finished_ms, now_ms)
    });
    fact(h, "Duration", |h| {
        h.text(&run_time(r.created_ms, r.finished_ms, now_ms));
    });
    fact(h, "Reason", |h| reason(h, &page.execution, None, now_ms));
    if let Some(g) = &page.group {
        fact(h, "Group", |h| {
            h.raw("<a")
                .href(&paths::group(g))
                .raw("><code>")
                .text(g)
                .raw("</code></a>");
        });
    }
    fact(h, "Steps", |h| {
        h.num(r.step_count).raw(" in ").num(r.passes).raw(" passes");
    });
    fact(h, "Key", |h| {
        h.raw("<code>").text(&r.key).raw("</code>");
    });
    h.raw("</dl>");
    failure(h, page);
    h.raw("</section>");
}

/// How a run whose command failed or timed out ended, and the last lines
/// of the command's log: from the verdict its check run was given
/// (`runs::report`: `{"conclusion": .., "verdict": {"summary": ..}}` in
/// the output), whose summary `runs::command::verdict_of` wrote.
pub fn failure_of(output_json: Option<&str>) -> Option<(String, String)> {
    let output: serde_json::Value = serde_json::from_str(output_json?).ok()?;
    let failed = matches!(output.get("conclusion")?.as_str()?, "failure" | "timed_out");
    let summary = output.get("verdict")?.get("summary")?.as_str()?;
    let (how, tail) = summary_parts(summary).filter(|_| failed)?;
    Some((how.to_owned(), tail.to_owned()))
}

fn failure(h: &mut Html, page: &ExecutionPage) {
    let r = &page.execution.row;
    let ended = Status::parse(&r.status) == Some(Status::Complete);
    let Some((how, tail)) = failure_of(r.output_json.as_deref()).filter(|_| ended) else {
        return;
    };
    h.raw("<div class=\"failure\"><h2>Why it failed</h2><p class=\"how\">")
        .text(&how)
        .raw("</p><pre class=\"tail\"><code>")
        .text(&tail)
        .raw("</code></pre>");
    let log = page
        .steps
        .iter()
        .rev()
        .filter(|s| Phase::of(&s.row.name) == Phase::Command)
        .find_map(|s| s.log_url.as_deref().and_then(Url::checked));
    if let Some(u) = log {
        h.raw("<p><a class=\"full-log\" rel=\"noopener noreferrer\"")
            .href(&u)
            .raw(">The whole log</a></p>");
    }
    h.raw("</div>");
}

fn fact(h: &mut Html, term: &'static str, value: impl FnOnce(&mut Html)) {
    h.raw("<dt>").raw(term).raw("</dt><dd>");
    value(h);
    h.raw("</dd>");
}

/// The forms that fit the status: a finished execution can only restart,
/// a paused one resume, a live one pause; skip, terminate and events
/// apply until it ends.
fn actions_section(h: &mut Html, page: &ExecutionPage) {
    let r = &page.execution.row;
    let status = Status::parse(&r.status);
    let ended = status.is_some_and(Status::is_terminal);
    let fits = |a: Action| match a {
        Action::Restart => true,
        Action::Resume => status == Some(Status::Paused),
        Action::Pause => status.is_some_and(Status::is_runnable),
        Action::Terminate | Action::Skip | Action::SendEvent => !ended,
        Action::SkipAll | Action::Teardown => false,
    };
    let steps = restart_points(&page.steps);
    h.raw("<section id=\"actions\" data-live class=\"actions\"><h2>Actions</h2>");
    for action in Action::ALL.into_iter().filter(|a| fits(*a)) {
        let fields = match action {
            Action::Restart => Fields::Restart { steps: &steps },
            Action::SendEvent => Fields::Event,
            _ => Fields::None,
        };
        actions::form(h, &page.actions, action, &r.id, fields);
    }
    h.raw("</section>");
}

/// Step names a restart may start from, each once, in order.
fn restart_points(steps: &[StepView]) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in steps.iter().filter(|s| s.row.kind == "step") {
        if !names.contains(&s.row.name) {
            names.push(s.row.name.clone());
        }
    }
    names
}

fn timeline(h: &mut Html, page: &ExecutionPage, now_ms: i64) {
    h.raw("<section id=\"timeline\" data-live><h2>Steps</h2>");
    if page.steps.is_empty() {
        h.raw("<p class=\"empty\">No steps yet.</p>");
    } else {
        h.raw("<table class=\"steps\"><thead><tr><th>#</th><th>Step</th><th>Kind</th>")
            .raw("<th>State</th><th>Attempts</th><th>Started</th><th>Duration</th>")
            .raw("<th>Wakes</th><th>Error</th><th>Log</th></tr></thead><tbody>");
        for s in &page.steps {
            step_row(h, s, now_ms);
        }
        h.raw("</tbody></table>");
    }
    if page.steps_truncated {
        h.raw("<p class=\"note\">Only the first ")
            .num(page.steps.len() as i64)
            .raw(" steps are shown.</p>");
    }
    h.raw("</section>");
}

fn step_row(h: &mut Html, s: &StepView, now_ms: i64) {
    let r = &s.row;
    h.raw("<tr class=\"step-")
        .raw(state_class(&r.state))
        .raw("\">");
    cell(h, "#", |h| {
        h.num(r.seq);
    });
    cell(h, "Step", |h| {
        h.raw("<code>").text(&r.name).raw("</code>");
    });
    cell(h, "Kind", |h| {
        h.text(&r.kind);
    });
    cell(h, "State", |h| {
        h.text(&r.state);
    });
    cell(h, "Attempts", |h| {
        h.num(r.attempts);
    });
    cell(h, "Started", |h| layout::time_el(h, r.started_ms, now_ms));
    cell(h, "Duration", |h| {
        h.text(&run_time(r.started_ms, r.finished_ms, now_ms));
    });
    cell(h, "Wakes", |h| wake(h, s, now_ms));
    cell(h, "Error", |h| step_error(h, s));
    cell(h, "Log", |h| log_link(h, s.log_url.as_deref()));
    h.raw("</tr>");
}

/// Row classes from the closed set of step states.
fn state_class(state: &str) -> &'static str {
    match state {
        "done" => "done",
        "failed" => "failed",
        "retrying" => "retrying",
        "waiting" => "waiting",
        _ => "other",
    }
}

/// A wait's deadline, a sleep's wake-up, a retry's next attempt.
fn wake(h: &mut Html, s: &StepView, now_ms: i64) {
    let r = &s.row;
    let Some(at) = r.wake_at_ms.filter(|_| r.finished_ms.is_none()) else {
        return layout::dash(h);
    };
    let what = match (r.kind.as_str(), r.state.as_str()) {
        ("wait", _) => "deadline ",
        ("sleep", _) => "wakes ",
        (_, "retrying") => "next attempt ",
        _ => "wakes ",
    };
    h.raw(what);
    layout::time_el(h, at, now_ms);
}

fn step_error(h: &mut Html, s: &StepView) {
    let r = &s.row;
    if r.error_tag.is_none() && r.error_message.is_none() {
        return layout::dash(h);
    }
    if let Some(tag) = r.error_tag.as_deref() {
        h.raw("<code class=\"tag\">").text(tag).raw("</code> ");
    }
    if let Some(msg) = r.error_message.as_deref() {
        h.raw("<span class=\"msg\">").text(msg).raw("</span>");
    }
}

fn log_link(h: &mut Html, url: Option<&str>) {
    match url.and_then(Url::checked) {
        Some(u) => {
            h.raw("<a class=\"log\" rel=\"noopener noreferrer\"")
                .href(&u)
                .raw(">log</a>");
        }
        None => layout::dash(h),
    }
}
