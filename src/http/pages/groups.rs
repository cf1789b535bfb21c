//! Serial groups (ADR-0004): the overview (who holds each group, how many
//! wait) and one group (its holder, each waiter and why it waits, recent
//! skips and takeovers).
//! (ADR-0004: docs/adr/0004-serialized-run-groups.md)

use crate::gates::serial::{
    ExplainedEnd, ExplainedWaiter, GroupSummary, GroupView, RowState, WaitReason,
};

use super::actions::{self, Action, Actions, Fields};
use super::approvals::{self, ApprovalView};
use super::escape::Html;
use super::layout::{self, cell, Nav, REFRESH_MS};
use super::paths;
use super::time;

/// What the groups overview shows. The caller fills it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupsPage {
    /// One page of `gates::serial::groups_page`: groups with a holder or a
    /// waiter, by name.
    pub groups: Vec<GroupSummary>,
    /// The repository filter in effect (fills the form and the next link).
    pub repo: Option<String>,
    /// The cursor of the next page; None: the last page.
    pub next_cursor: Option<String>,
    /// Deploys waiting for a confirmation before they join a group.
    pub approvals: Vec<ApprovalView>,
    /// Where the approval forms post.
    pub actions: Actions,
}

/// What one group's page shows. The caller fills it.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPage {
    /// `gates::serial::explain` of the group.
    pub view: GroupView,
    /// Where skip (per waiter) and skip-all post.
    pub actions: Actions,
}

pub fn render_groups(page: &GroupsPage, now_ms: i64) -> String {
    let mut h = Html::new();
    h.raw("<h1>Groups</h1><form method=\"get\" class=\"filters\"")
        .action(&paths::groups())
        .raw("><label>Repository <input name=\"repo\" placeholder=\"octo/hello\"")
        .attr("value", page.repo.as_deref().unwrap_or(""))
        .raw(
            "></label><div class=\"buttons\"><button type=\"submit\">Filter</button></div></form>",
        );
    approvals::section(&mut h, &page.approvals, &page.actions, now_ms);
    h.raw("<section id=\"groups\" data-live><h2>Serial groups</h2>");
    if page.groups.is_empty() {
        h.raw("<p class=\"empty\">No group is held or waited for.</p>");
    } else {
        h.raw("<table><thead><tr><th>Group</th><th>Holder</th><th>Heartbeat</th>")
            .raw("<th>Waiting</th><th>Oldest wait</th></tr></thead><tbody>");
        for g in &page.groups {
            summary_row(&mut h, g);
        }
        h.raw("</tbody></table>");
    }
    if let Some(cursor) = &page.next_cursor {
        let mut next = paths::groups();
        if let Some(r) = &page.repo {
            next = next.query("repo", r);
        }
        h.raw("<nav class=\"pager\"><a rel=\"next\"")
            .href(&next.query("cursor", cursor))
            .raw(">Next page →</a></nav>");
    }
    h.raw("</section>");
    layout::page("Groups", Nav::Groups, REFRESH_MS, now_ms, &h)
}

fn summary_row(h: &mut Html, g: &GroupSummary) {
    h.raw("<tr>");
    cell(h, "Group", |h| group_link(h, &g.group));
    cell(h, "Holder", |h| match &g.holder {
        Some(id) => layout::exec_link(h, id),
        None => {
            h.raw("<span class=\"none\">free</span>");
        }
    });
    cell(h, "Heartbeat", |h| {
        heartbeat(h, g.holder_heartbeat_age_ms, g.holder_stale)
    });
    cell(h, "Waiting", |h| {
        h.num(i64::from(g.waiting));
    });
    cell(h, "Oldest wait", |h| match g.oldest_waited_ms {
        Some(ms) => {
            h.text(&time::duration(ms));
        }
        None => layout::dash(h),
    });
    h.raw("</tr>");
}

fn group_link(h: &mut Html, name: &str) {
    h.raw("<a")
        .href(&paths::group(name))
        .raw("><code>")
        .text(name)
        .raw("</code></a>");
}

/// "12 s ago", flagged when the holder is stale (no longer blocks).
fn heartbeat(h: &mut Html, age_ms: Option<i64>, stale: bool) {
    let Some(age) = age_ms else {
        return layout::dash(h);
    };
    h.text(&time::duration(age)).raw(" ago");
    if stale {
        h.raw(" <span class=\"st st-stale\">stale: no longer blocks</span>");
    }
}

pub fn render_group(page: &GroupPage, now_ms: i64) -> String {
    let v = &page.view;
    let mut h = Html::new();
    h.raw("<p class=\"crumbs\"><a")
        .href(&paths::groups())
        .raw(">Groups</a></p><h1>Group <code>")
        .text(&v.group)
        .raw("</code></h1>");
    holder(&mut h, v);
    waiters(&mut h, page);
    recent(&mut h, &v.recent, now_ms);
    layout::page(&v.group, Nav::Groups, REFRESH_MS, now_ms, &h)
}

fn holder(h: &mut Html, v: &GroupView) {
    h.raw("<section id=\"holder\" data-live><h2>Holder</h2>");
    let Some(x) = &v.holder else {
        h.raw("<p class=\"empty\">Nobody holds the group.</p></section>");
        return;
    };
    h.raw("<dl class=\"facts\"><dt>Execution</dt><dd>");
    layout::exec_link(h, &x.execution_id);
    h.raw("</dd><dt>Revision</dt><dd>");
    layout::revision(h, Some(&x.revision));
    h.raw("</dd><dt>Held for</dt><dd>")
        .text(&time::duration(x.held_ms))
        .raw("</dd><dt>Heartbeat</dt><dd>");
    heartbeat(h, Some(x.heartbeat_age_ms), x.stale);
    h.raw("</dd>");
    if x.imperative {
        h.raw("<dt>Kind</dt><dd>operator command (exempt from queue policy)</dd>");
    }
    h.raw("</dl></section>");
}

fn waiters(h: &mut Html, page: &GroupPage) {
    let v = &page.view;
    h.raw("<section id=\"waiters\" data-live><h2>Waiters</h2>");
    if v.waiters.is_empty() {
        h.raw("<p class=\"empty\">Nobody waits.</p></section>");
        return;
    }
    h.raw("<table><thead><tr><th>Execution</th><th>Revision</th><th>Waited</th>")
        .raw("<th>Why it waits</th><th>Times out</th><th></th></tr></thead><tbody>");
    for w in &v.waiters {
        waiter_row(h, w, &page.actions);
    }
    h.raw("</tbody></table>");
    if v.waiters_truncated {
        h.raw("<p class=\"note\">More waiters than shown.</p>");
    }
    actions::form(h, &page.actions, Action::SkipAll, &v.group, Fields::None);
    h.raw("</section>");
}

fn waiter_row(h: &mut Html, w: &ExplainedWaiter, actions: &Actions) {
    h.raw("<tr>");
    cell(h, "Execution", |h| {
        layout::exec_link(h, &w.execution_id);
        if w.imperative {
            h.raw(" <span class=\"st\">operator</span>");
        }
    });
    cell(h, "Revision", |h| layout::revision(h, Some(&w.revision)));
    cell(h, "Waited", |h| {
        h.text(&time::duration(w.waited_ms));
    });
    cell(h, "Why", |h| wait_reason(h, &w.why));
    cell(h, "Times out", |h| match w.times_out_in_ms {
        Some(0) => {
            h.raw("at its next poll");
        }
        Some(ms) => {
            h.raw("in ").text(&time::duration(ms));
        }
        None => layout::dash(h),
    });
    cell(h, "Skip", |h| {
        actions::form(h, actions, Action::Skip, &w.execution_id, Fields::None)
    });
    h.raw("</tr>");
}

/// Why a waiter waits, in words, with the execution it waits for linked.
pub(crate) fn wait_reason(h: &mut Html, why: &WaitReason) {
    match why {
        WaitReason::BehindHolder { execution_id } => {
            h.raw("behind the holder ");
            layout::exec_link(h, execution_id);
        }
        WaitReason::BehindWaiter { execution_id } => {
            h.raw("behind an older waiter, ");
            layout::exec_link(h, execution_id);
        }
        WaitReason::NextToClaim { takes_over: None } => {
            h.raw("next: takes the group at its next poll");
        }
        WaitReason::NextToClaim {
            takes_over: Some(id),
        } => {
            h.raw("next: takes the group over from the stale holder ");
            layout::exec_link(h, id);
        }
        WaitReason::InstanceNotLive => {
            h.raw(
                "its instance is paused or finished: it blocks nobody and is not handed the group",
            );
        }
    }
}

fn recent(h: &mut Html, ends: &[ExplainedEnd], now_ms: i64) {
    h.raw("<section id=\"recent\" data-live><h2>Recent skips and takeovers</h2>");
    if ends.is_empty() {
        h.raw("<p class=\"empty\">None recently.</p></section>");
        return;
    }
    h.raw("<table><thead><tr><th>Execution</th><th>Revision</th><th>Ended as</th>")
        .raw("<th>Reason</th><th>Newer revision</th><th>Ended by</th><th>When</th>")
        .raw("</tr></thead><tbody>");
    for e in ends {
        h.raw("<tr>");
        cell(h, "Execution", |h| layout::exec_link(h, &e.execution_id));
        cell(h, "Revision", |h| layout::revision(h, Some(&e.revision)));
        cell(h, "Ended as", |h| {
            h.raw("<span class=\"st\">")
                .raw(e.state.as_str())
                .raw("</span>");
        });
        cell(h, "Reason", |h| match (e.reason, e.state) {
            (Some(r), _) => {
                h.raw("<span class=\"reason\">")
                    .raw(r.as_str())
                    .raw("</span>");
            }
            (None, RowState::Skipped) => {
                h.raw("an operator's skip (silent)");
            }
            (None, _) => layout::dash(h),
        });
        cell(h, "Newer", |h| {
            layout::revision(h, e.superseded_by.as_deref())
        });
        cell(h, "Ended by", |h| match &e.ended_by {
            Some(id) => layout::exec_link(h, id),
            None => layout::dash(h),
        });
        cell(h, "When", |h| {
            layout::time_el(h, now_ms.saturating_sub(e.ended_ago_ms), now_ms)
        });
        h.raw("</tr>");
    }
    h.raw("</tbody></table></section>");
}
