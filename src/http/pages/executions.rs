//! The executions list: filters as a GET form, waiting approvals, then
//! executions grouped by repository and entity, and a "next page" link.
//! Sluice's own bookkeeping (the `schedules` run) is listed apart from the
//! runs users asked for: left out by default, with a link to list it.

use crate::engine::Status;

use super::actions::Actions;
use super::approvals::{self, ApprovalView};
use super::escape::Html;
use super::layout::{self, cell, Nav, REFRESH_MS};
use super::paths;
use super::query::ExecutionsQuery;
use super::time;
use super::ExecutionView;

/// What the list page shows. The caller fills it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionsPage {
    /// One page of executions, newest first (as `store::executions::list`
    /// returns them); grouped on the page by repository, then entity, in
    /// the order each first appears.
    pub items: Vec<ExecutionView>,
    /// The filters in effect: they fill the form and the next-page link.
    pub query: ExecutionsQuery,
    /// The opaque cursor of the next page; None: this is the last page
    /// and no "next page" link is shown.
    pub next_cursor: Option<String>,
    /// Executions waiting for a human's decision.
    pub approvals: Vec<ApprovalView>,
    /// Where the approval forms post.
    pub actions: Actions,
}

/// Characters of an error message shown in the list (the execution page
/// shows it whole): two lines on a phone.
const ERROR_CHARS_LISTED: usize = 160;

pub fn render(page: &ExecutionsPage, now_ms: i64) -> String {
    let mut h = Html::new();
    if page.query.bookkeeping {
        h.raw("<h1>Bookkeeping</h1>");
    } else {
        h.raw("<h1>Executions</h1>");
    }
    filter_form(&mut h, &page.query);
    apart_link(&mut h, &page.query);
    if !page.query.bookkeeping {
        approvals::section(&mut h, &page.approvals, &page.actions, now_ms);
    }
    h.raw("<section id=\"executions\" data-live>");
    if page.items.is_empty() {
        h.raw("<p class=\"empty\">No executions match.</p>");
    }
    for (repo, entities) in group(&page.items) {
        h.raw("<section class=\"repo\"><h2>");
        layout::opt_text(&mut h, repo);
        h.raw("</h2>");
        for (entity, items) in entities {
            entity_table(&mut h, repo, entity, &items, now_ms);
        }
        h.raw("</section>");
    }
    if let Some(cursor) = &page.next_cursor {
        h.raw("<nav class=\"pager\"><a rel=\"next\"")
            .href(&page.query.url(Some(cursor)))
            .raw(">Next page →</a></nav>");
    }
    h.raw("</section>");
    layout::page("Executions", Nav::Executions, REFRESH_MS, now_ms, &h)
}

/// The way between the runs users asked for and Sluice's bookkeeping.
fn apart_link(h: &mut Html, q: &ExecutionsQuery) {
    h.raw("<p class=\"apart\">");
    if q.bookkeeping {
        h.raw("Sluice's own bookkeeping (recording schedules), apart from the runs users ")
            .raw("asked for. <a class=\"apart-link\"")
            .href(&q.with_bookkeeping(false).url(None))
            .raw(">Show the runs users asked for</a>");
    } else {
        h.raw("Sluice's own bookkeeping (recording schedules) is listed apart. ")
            .raw("<a class=\"apart-link\"")
            .href(&q.with_bookkeeping(true).url(None))
            .raw(">Show bookkeeping</a>");
    }
    h.raw("</p>");
}

type Entities<'a> = Vec<(Option<&'a str>, Vec<&'a ExecutionView>)>;

/// Repository → entity → executions, each level in first-appearance order.
fn group(items: &[ExecutionView]) -> Vec<(Option<&str>, Entities<'_>)> {
    let mut repos: Vec<(Option<&str>, Entities<'_>)> = Vec::new();
    for item in items {
        let repo = item.row.repo.as_deref();
        let entity = item.row.entity.as_deref();
        if !repos.iter().any(|(k, _)| *k == repo) {
            repos.push((repo, Vec::new()));
        }
        let Some((_, entities)) = repos.iter_mut().find(|(k, _)| *k == repo) else {
            continue;
        };
        match entities.iter_mut().find(|(k, _)| *k == entity) {
            Some((_, list)) => list.push(item),
            None => entities.push((entity, vec![item])),
        }
    }
    repos
}

fn entity_table(
    h: &mut Html,
    repo: Option<&str>,
    entity: Option<&str>,
    items: &[&ExecutionView],
    now_ms: i64,
) {
    h.raw("<section class=\"entity\"><h3><a")
        .href(&paths::entity(repo, entity))
        .raw(">")
        .text(&layout::entity_label(entity))
        .raw("</a></h3><table><thead><tr><th>Execution</th><th>Run</th><th>Outcome</th>")
        .raw("<th>Created</th><th>Duration</th><th>Revision</th><th>Reason</th>")
        .raw("</tr></thead><tbody>");
    for item in items {
        row(h, item, now_ms);
    }
    h.raw("</tbody></table></section>");
}

fn row(h: &mut Html, item: &ExecutionView, now_ms: i64) {
    let r = &item.row;
    h.raw("<tr>");
    cell(h, "Execution", |h| layout::exec_link(h, &r.id));
    cell(h, "Run", |h| {
        h.text(&r.run);
    });
    cell(h, "Outcome", |h| {
        layout::outcome_badge(h, &r.status, r.output_json.as_deref())
    });
    cell(h, "Created", |h| layout::time_el(h, r.created_ms, now_ms));
    cell(h, "Duration", |h| {
        h.text(&run_time(r.created_ms, r.finished_ms, now_ms));
    });
    cell(h, "Revision", |h| layout::revision(h, r.sha.as_deref()));
    cell(h, "Reason", |h| {
        reason(h, item, Some(ERROR_CHARS_LISTED), now_ms)
    });
    h.raw("</tr>");
}

/// "3 min 4 s" for a finished execution, "12 s so far" for a live one.
pub(crate) fn run_time(created_ms: i64, finished_ms: Option<i64>, now_ms: i64) -> String {
    match finished_ms {
        Some(f) => time::duration(f.saturating_sub(created_ms)),
        None => format!(
            "{} so far",
            time::duration(now_ms.saturating_sub(created_ms))
        ),
    }
}

/// Why it ended or waits: `skipped_reason` and the newer revision it
/// names, the error tag and message, or when a waiting one wakes.
pub(crate) fn reason(h: &mut Html, item: &ExecutionView, chars_max: Option<usize>, now_ms: i64) {
    let r = &item.row;
    let mut shown = false;
    if let Some(reason) = r.reason.as_deref().filter(|s| !s.is_empty()) {
        h.raw("<span class=\"reason\">")
            .text(reason)
            .raw("</span> ");
        shown = true;
    }
    if let Some(newer) = item.newer_revision.as_deref() {
        h.raw("<span class=\"newer\">newer: ");
        layout::revision(h, Some(newer));
        h.raw("</span> ");
        shown = true;
    }
    if let Some(tag) = r.error_tag.as_deref() {
        h.raw("<code class=\"tag\">").text(tag).raw("</code> ");
        shown = true;
    }
    if let Some(msg) = r.error_message.as_deref() {
        h.raw("<span class=\"msg\">")
            .text(&clip(msg, chars_max))
            .raw("</span> ");
        shown = true;
    }
    let waiting = Status::parse(&r.status).is_some_and(|s| !s.is_terminal());
    if let (true, Some(wake)) = (waiting, r.wake_at_ms) {
        h.raw("<span class=\"wake\">wakes ");
        layout::time_el(h, wake, now_ms);
        h.raw("</span>");
        shown = true;
    }
    if !shown {
        layout::dash(h);
    }
}

fn clip(s: &str, chars_max: Option<usize>) -> String {
    match chars_max {
        Some(n) if s.chars().count() > n => {
            let mut out: String = s.chars().take(n).collect();
            out.push('…');
            out
        }
        _ => s.to_owned(),
    }
}

fn filter_form(h: &mut Html, q: &ExecutionsQuery) {
    h.raw("<form method=\"get\" class=\"filters\"")
        .action(&paths::executions())
        .raw(">");
    text_input(h, "Repository", "repo", q.repo.as_deref(), "octo/hello");
    text_input(h, "Run", "run", q.run.as_deref(), "deploy");
    h.raw("<label>Status <select name=\"status\"><option value=\"\">any</option>");
    for s in STATUSES {
        h.raw("<option").attr("value", s.as_str());
        if q.status.as_deref() == Some(s.as_str()) {
            h.raw(" selected");
        }
        h.raw(">").raw(s.as_str()).raw("</option>");
    }
    h.raw("</select></label>");
    text_input(
        h,
        "Entity",
        "entity",
        q.entity.as_deref(),
        "pr:12, branch:main",
    );
    time_input(h, "Since (UTC)", "since", q.since_ms);
    time_input(h, "Until (UTC)", "until", q.until_ms);
    if q.bookkeeping {
        h.raw("<input type=\"hidden\" name=\"bookkeeping\" value=\"1\">");
    }
    h.raw("<div class=\"buttons\"><button type=\"submit\">Filter</button>");
    if q.is_filtered() {
        let cleared = ExecutionsQuery::default().with_bookkeeping(q.bookkeeping);
        h.raw(" <a").href(&cleared.url(None)).raw(">Clear</a>");
    }
    h.raw("</div></form>");
}

const STATUSES: [Status; 8] = [
    Status::Queued,
    Status::Running,
    Status::Waiting,
    Status::Paused,
    Status::Errored,
    Status::Terminated,
    Status::Complete,
    Status::Skipped,
];

fn text_input(
    h: &mut Html,
    label: &'static str,
    name: &'static str,
    value: Option<&str>,
    placeholder: &'static str,
) {
    h.raw("<label>")
        .raw(label)
        .raw(" <input")
        .attr("name", name)
        .attr("value", value.unwrap_or(""))
        .attr("placeholder", placeholder)
        .raw("></label>");
}

fn time_input(h: &mut Html, label: &'static str, name: &'static str, ms: Option<i64>) {
    let value = ms.and_then(time::datetime_local).unwrap_or_default();
    h.raw("<label>")
        .raw(label)
        .raw(" <input type=\"datetime-local\"")
        .attr("name", name)
        .attr("value", &value)
        .raw("></label>");
}
