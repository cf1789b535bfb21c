//! The "waiting approvals" section: executions waiting for a human's event
//! (a deploy's `deploy-confirm`), who may decide and by when.

use crate::store::executions::{ExecutionRow, StepRow};

use super::actions::{self, Action, Actions, Fields};
use super::escape::Html;
use super::layout::{self, cell, Nav, REFRESH_MS};

/// One execution waiting for a decision. The caller fills it, typically
/// with [`ApprovalView::from_wait`] from the execution's waiting step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalView {
    /// The instance id (`executions.id`).
    pub execution_id: String,
    /// `executions.repo`.
    pub repo: Option<String>,
    /// `executions.entity` (`branch:main`).
    pub entity: Option<String>,
    /// `executions.sha`: the revision awaiting approval.
    pub revision: Option<String>,
    /// The event that decides (`deploy-confirm`); the approve form sends it.
    pub event_type: String,
    /// Who may decide, in words (a team, a person); None: anyone who can
    /// reach the dashboard.
    pub decider: Option<String>,
    /// When the wait began (the wait step's `started_ms`).
    pub waiting_since_ms: i64,
    /// When the wait gives up (the wait step's `wake_at_ms`); None: unknown.
    pub deadline_ms: Option<i64>,
    /// The dashboard may decide (an operator's confirmation): an approve
    /// form is shown. False where the decision is made elsewhere (a fork's
    /// "Approve and run" button on GitHub, pressed by someone with write
    /// access): the row only says who decides.
    pub approve_here: bool,
}

impl ApprovalView {
    /// From an execution and one of its steps: Some when the step is an
    /// event wait in progress (`kind` "wait", `state` "waiting").
    pub fn from_wait(
        row: &ExecutionRow,
        step: &StepRow,
        event_type: &str,
        decider: Option<String>,
    ) -> Option<ApprovalView> {
        (step.kind == "wait" && step.state == "waiting").then(|| ApprovalView {
            execution_id: row.id.clone(),
            repo: row.repo.clone(),
            entity: row.entity.clone(),
            revision: row.sha.clone(),
            event_type: event_type.to_owned(),
            decider,
            waiting_since_ms: step.started_ms,
            deadline_ms: step.wake_at_ms,
            approve_here: true,
        })
    }
}

/// The section, with its live-region id; "none waiting" when empty.
pub(crate) fn section(h: &mut Html, approvals: &[ApprovalView], actions: &Actions, now_ms: i64) {
    h.raw("<section id=\"approvals\" data-live class=\"approvals\"><h2>Waiting approvals</h2>");
    if approvals.is_empty() {
        h.raw("<p class=\"empty\">No execution waits for an approval.</p></section>");
        return;
    }
    h.raw("<table><thead><tr><th>Execution</th><th>Repository</th><th>Entity</th>")
        .raw("<th>Revision</th><th>Event</th><th>Decider</th><th>Waiting since</th>")
        .raw("<th>Deadline</th><th></th></tr></thead><tbody>");
    for a in approvals {
        row(h, a, actions, now_ms);
    }
    h.raw("</tbody></table></section>");
}

fn row(h: &mut Html, a: &ApprovalView, actions: &Actions, now_ms: i64) {
    h.raw("<tr>");
    cell(h, "Execution", |h| layout::exec_link(h, &a.execution_id));
    cell(h, "Repository", |h| layout::opt_text(h, a.repo.as_deref()));
    cell(h, "Entity", |h| {
        h.text(&layout::entity_label(a.entity.as_deref()));
    });
    cell(h, "Revision", |h| {
        layout::revision(h, a.revision.as_deref())
    });
    cell(h, "Event", |h| {
        h.raw("<code>").text(&a.event_type).raw("</code>");
    });
    cell(h, "Decider", |h| {
        match a.decider.as_deref() {
            Some(d) => h.text(d),
            None => h.raw("any operator"),
        };
    });
    cell(h, "Waiting since", |h| {
        layout::time_el(h, a.waiting_since_ms, now_ms)
    });
    cell(h, "Deadline", |h| {
        layout::opt_time(h, a.deadline_ms, now_ms)
    });
    cell(h, "Decide", |h| {
        if !a.approve_here {
            h.raw("<span class=\"none\">decided on GitHub</span>");
            return;
        }
        let fields = Fields::FixedEvent {
            event_type: &a.event_type,
        };
        actions::form(h, actions, Action::SendEvent, &a.execution_id, fields);
    });
    h.raw("</tr>");
}

/// What the approvals page shows. The caller fills it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalsPage {
    /// Every execution waiting for a decision, earliest deadline first.
    pub approvals: Vec<ApprovalView>,
    /// More wait than are listed (the store lists a bounded number).
    pub truncated: bool,
    /// Where the approve forms post.
    pub actions: Actions,
}

/// `/ui/approvals`: every execution waiting for a person, who decides and
/// by when.
pub fn render(page: &ApprovalsPage, now_ms: i64) -> String {
    let mut h = Html::new();
    h.raw("<h1>Approvals</h1>");
    section(&mut h, &page.approvals, &page.actions, now_ms);
    if page.truncated {
        h.raw("<p class=\"note\">Only the earliest deadlines are listed.</p>");
    }
    layout::page("Approvals", Nav::Approvals, REFRESH_MS, now_ms, &h)
}
