//! The dashboard: server-rendered HTML pages as pure functions from plain
//! data (D1 rows, the serial queue's explanations) and a `now_ms` to a
//! `String`. No I/O, no clock, no `worker` types; the caller reads the
//! rows, calls a renderer and serves the result with [`SECURITY_HEADERS`].
//!
//! Pages (routes in [`paths`]):
//! - [`render_executions`]: executions grouped by repository and entity
//!   (pull request, branch, tag), filters, a "next page" link, waiting
//!   approvals; Sluice's own bookkeeping (the `schedules` run) apart;
//! - [`render_execution`]: one execution, a failed command's log tail,
//!   its phases drawn to scale ([`phases`]), its step list, log links and
//!   actions;
//! - [`render_groups`] and [`render_group`]: serial groups, their holder,
//!   each waiter and why it waits, recent skips;
//! - [`render_approvals`]: every execution waiting for a person;
//! - [`render_confirm`] and [`render_result`]: the confirmation step and
//!   the outcome of an action (see [`actions`]);
//! - [`render_login`] and [`render_error`]: signing in, and a refusal.
//!
//! Architecture invariant: every value from GitHub or a user reaches the
//! page through [`escape::Html`], which only writes values escaped; URLs
//! are built by [`paths`] (segments percent-encoded) or checked by
//! [`escape::Url::checked`]. Pages carry no inline script or style, so
//! [`CONTENT_SECURITY_POLICY`] holds: `app.js` does live updates and
//! confirmations, and every page works without it.

pub mod actions;
pub mod approvals;
pub mod assets;
pub mod escape;
pub mod execution;
pub mod executions;
pub mod groups;
mod layout;
pub mod paths;
pub mod phases;
pub mod pipeline;
pub mod previews;
pub mod query;
pub mod time;

use crate::store::executions::{ExecutionRow, StepRow};

pub use actions::{render_confirm, render_result, Action, ActionResult, Actions};
pub use approvals::{render as render_approvals, ApprovalView, ApprovalsPage};
pub use assets::{APP_CSS, APP_JS, CONTENT_SECURITY_POLICY, SECURITY_HEADERS};
pub use execution::{render as render_execution, ExecutionPage};
pub use executions::{render as render_executions, ExecutionsPage};
pub use groups::{render_group, render_groups, GroupPage, GroupsPage};
pub use layout::{entity_label, render_error, render_login, REFRESH_MS};
pub use previews::{render as render_previews, PreviewsPage};
pub use query::{same_origin_post, ActionForm, ExecutionsQuery};

/// An execution as the pages show it: its index row and what a join adds.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionView {
    /// The `executions` row (`store::executions::get` or `list`).
    pub row: ExecutionRow,
    /// The newer revision a skip names: the `serial_queue.superseded_by`
    /// of the execution's row (a newer commit for `superseded`, the branch
    /// head for `not_current`). None when not a skip or unknown.
    pub newer_revision: Option<String>,
}

impl ExecutionView {
    /// A row with nothing joined.
    pub fn new(row: ExecutionRow) -> ExecutionView {
        ExecutionView {
            row,
            newer_revision: None,
        }
    }
}

/// One step of the timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct StepView {
    /// The `execution_steps` row (`store::executions::steps`).
    pub row: StepRow,
    /// Where this step's log is (a signed log link, a route of the
    /// Worker); None: no link. A path on this origin or an http(s) URL;
    /// anything else is refused and shown without a link.
    pub log_url: Option<String>,
}

impl StepView {
    pub fn new(row: StepRow) -> StepView {
        StepView { row, log_url: None }
    }
}
