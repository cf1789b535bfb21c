//! The dashboard's requests: reads the index, fills the pages' views
//! (`http::pages`) and renders them; carries out the action forms through
//! [`Operations`], the same operations the `/v1/` API performs. Over
//! `Database` and `Operations` only, so every page and action is tested
//! natively against SQLite with the real migrations (`tests/dashboard.rs`).
//!
//! Architecture invariant: no `worker` types; the glue reads the request,
//! authenticates it, checks a POST is same-origin, and serves the
//! [`Reply`] with `pages::SECURITY_HEADERS`.

use async_trait::async_trait;
use serde_json::{json, Value};

use crate::engine::{Command, InstanceId};
use crate::gates::policy::QueuePolicy;
use crate::gates::serial::{self, GroupFilter};
use crate::journal::EntryState;
use crate::limits::STEPS_LISTED_MAX;
use crate::runs::approval::{github_only, human_wait_of, Decider, HUMAN_WAITS};
use crate::runs::command;
use crate::runs::registry;
use crate::store::executions::{self, ExecutionRow, HumanWait, StepRow};
use crate::store::Database;

use super::auth;
use super::error::ApiError;
use super::pages::paths;
use super::pages::phases::base_name;
use super::pages::query::form_pairs;
use super::pages::{
    self, Action, ActionForm, ActionResult, Actions, ApprovalView, ApprovalsPage, ExecutionPage,
    ExecutionView, ExecutionsPage, ExecutionsQuery, GroupPage, GroupsPage, StepView,
};
use super::routes::{valid_event_type, ActionTarget, Page};

/// Executions on one page of the list: a screenful on a laptop, and each
/// costs a row of the `newer_revisions` look-up.
pub const EXECUTIONS_PAGE_ROWS: u32 = 50;
/// Groups on one page of the overview.
pub const GROUPS_PAGE_ROWS: u32 = 100;
/// Waiting approvals listed at once: each is a person's pending decision,
/// so more than this means something else is wrong.
pub const APPROVALS_LISTED_MAX: u32 = 100;

// One page's executions are asked about in one statement.
const _: () = assert!(EXECUTIONS_PAGE_ROWS as usize <= serial::NEWER_REVISIONS_IDS_MAX);

/// An event an operator sends an execution. Only [`OperatorEvent::new`]
/// makes one, and it refuses the events GitHub alone may send (a press, a
/// merge: `runs::approval::github_only`), so no caller of [`Operations`]
/// (the API, a dashboard form, a test's fake) delivers one in a decider's
/// name: the refusal is here once, not per route.
#[derive(Debug, Clone, PartialEq)]
pub struct OperatorEvent {
    id: InstanceId,
    event_type: String,
    payload: Value,
}

impl OperatorEvent {
    /// The event, or 400 for a type outside the path alphabet and 403
    /// `github_only` for a type only GitHub's webhook sends.
    pub fn new(id: &InstanceId, event_type: &str, payload: Value) -> Result<Self, ApiError> {
        if !valid_event_type(event_type) {
            return Err(ApiError::bad_request(
                "bad_event_type",
                "the event type must be 1 to 100 of A-Z a-z 0-9 _ . -",
            ));
        }
        if github_only(event_type) {
            return Err(ApiError::new(
                403,
                "github_only",
                format!(
                    "`{event_type}` events come from GitHub's webhook only: the person decides \
                     on GitHub"
                ),
            ));
        }
        Ok(OperatorEvent {
            id: id.clone(),
            event_type: event_type.to_owned(),
            payload,
        })
    }

    pub fn id(&self) -> &InstanceId {
        &self.id
    }

    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    pub fn payload(&self) -> &Value {
        &self.payload
    }
}

/// An operator's operations on executions and groups: the Worker performs
/// them through the instances' Durable Objects and the serial queue, as
/// the `/v1/` routes do. Each answers the API's JSON or its error.
#[async_trait(?Send)]
pub trait Operations {
    async fn command(&self, id: &InstanceId, cmd: Command) -> Result<Value, ApiError>;
    /// Sends an event: what the API's `events/{type}` and the dashboard's
    /// form both call. An implementation delivers only an
    /// [`OperatorEvent`], whose constructor refuses GitHub-only types.
    async fn event(
        &self,
        id: &InstanceId,
        event_type: &str,
        payload: &Value,
    ) -> Result<Value, ApiError> {
        let event = OperatorEvent::new(id, event_type, payload.clone())?;
        self.deliver_event(&event).await
    }
    /// Delivers an event that passed [`OperatorEvent::new`].
    async fn deliver_event(&self, event: &OperatorEvent) -> Result<Value, ApiError>;
    /// Skips a waiting execution of a serial group (silently).
    async fn skip(&self, id: &InstanceId) -> Result<Value, ApiError>;
    /// Skips every waiter of a group (silently); the holder is untouched.
    async fn skip_all(&self, group: &str) -> Result<Value, ApiError>;
    /// Tears a live preview down (`runs::preview::teardown`): what
    /// `POST /v1/executions` of its `preview-teardown` does, one per head.
    async fn teardown_preview(&self, repo: &str, pr: u64) -> Result<Value, ApiError>;
}

/// An HTML answer: status, body and extra headers (`Set-Cookie`,
/// `Location`). The caller adds the content type and security headers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub html: String,
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    fn ok(html: String) -> Reply {
        Reply {
            status: 200,
            html,
            headers: Vec::new(),
        }
    }

    fn see_other(location: String) -> Reply {
        Reply {
            status: 303,
            html: String::new(),
            headers: vec![("Location", location)],
        }
    }
}

/// Renders a page; `query` is the URL's query without `?`.
pub async fn page(
    db: &dyn Database,
    page: &Page,
    query: &str,
    now_ms: i64,
) -> Result<String, ApiError> {
    page_with(db, page, query, now_ms, None).await
}

/// A page, its artifacts linked for download when `artifact_links` (the
/// `LOG_LINK_SECRET`) is given.
pub async fn page_with(
    db: &dyn Database,
    page: &Page,
    query: &str,
    now_ms: i64,
    artifact_links: Option<&[u8]>,
) -> Result<String, ApiError> {
    match page {
        Page::Home | Page::Executions => executions_page(db, query, now_ms).await,
        Page::Execution(id) => execution_page(db, id, now_ms, artifact_links).await,
        Page::Groups => groups_page(db, query, now_ms).await,
        Page::Group(name) => group_page(db, name, now_ms).await,
        Page::Approvals => approvals_page(db, now_ms).await,
        Page::Previews => previews_page(db, now_ms).await,
    }
}

async fn executions_page(db: &dyn Database, query: &str, now_ms: i64) -> Result<String, ApiError> {
    let q = ExecutionsQuery::parse(query);
    let after = q.after();
    let apart: Vec<&str> = registry::bookkeeping().map(|r| r.as_str()).collect();
    let found = executions::list_page(
        db,
        &q.list_filter_apart(&apart),
        after.as_ref(),
        EXECUTIONS_PAGE_ROWS,
    )
    .await?;
    let items = with_newer_revisions(db, found.items).await?;
    let approvals = approvals(db)
        .await?
        .0
        .into_iter()
        .filter(|a| q.repo.is_none() || a.repo == q.repo)
        .collect();
    let page = ExecutionsPage {
        items,
        query: q,
        next_cursor: found.next_cursor,
        approvals,
        actions: Actions::ui(None),
    };
    Ok(pages::render_executions(&page, now_ms))
}

/// Joins each row with the newer revision its serial rows name.
async fn with_newer_revisions(
    db: &dyn Database,
    rows: Vec<ExecutionRow>,
) -> Result<Vec<ExecutionView>, ApiError> {
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let newer = serial::newer_revisions(db, &ids).await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let newer_revision = newer
                .iter()
                .find(|(id, _)| *id == row.id)
                .map(|(_, rev)| rev.clone());
            ExecutionView {
                row,
                newer_revision,
            }
        })
        .collect())
}

async fn execution_page(
    db: &dyn Database,
    id: &InstanceId,
    now_ms: i64,
    artifact_links: Option<&[u8]>,
) -> Result<String, ApiError> {
    let row = executions::get(db, id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no execution {id}")))?;
    let steps = executions::steps_page(db, id.as_str(), None, STEPS_LISTED_MAX).await?;
    let approvals = steps
        .items
        .iter()
        .filter_map(|s| {
            let kind = human_wait_of(&s.name)?;
            let view = ApprovalView::from_wait(&row, s, kind.event_type, None)?;
            Some(decided_by(view, kind.decider))
        })
        .collect();
    let group = serial::group_of(db, id.as_str()).await?;
    let pipeline = pipeline_of(db, &row).await?;
    let artifacts = artifact_views(db, id, pipeline.as_ref(), artifact_links, now_ms).await?;
    let mut views = with_newer_revisions(db, vec![row]).await?;
    let execution = views
        .pop()
        .ok_or_else(|| ApiError::internal("the execution's view went missing"))?;
    let page = ExecutionPage {
        execution,
        steps_truncated: steps.next_cursor.is_some(),
        steps: with_log_links(id, steps.items),
        approvals,
        group,
        pipeline,
        artifacts,
        actions: Actions::ui(None),
    };
    Ok(pages::render_execution(&page, now_ms))
}

/// The archives of the execution (a unit) or of its pipeline's units.
async fn artifact_views(
    db: &dyn Database,
    id: &InstanceId,
    pipeline: Option<&pages::pipeline::PipelineView>,
    links: Option<&[u8]>,
    now_ms: i64,
) -> Result<Vec<pages::execution::ArtifactView>, ApiError> {
    let mut ids = vec![id.as_str().to_owned()];
    if let Some(p) = pipeline {
        ids.extend(
            p.jobs
                .iter()
                .flat_map(|j| j.units.iter().map(|u| u.id.clone())),
        );
    }
    let rows = crate::store::artifacts::of_units(db, &ids).await?;
    Ok(rows
        .iter()
        .map(|r| pages::execution::ArtifactView {
            label: r.label.clone(),
            what: crate::runs::kit::artifacts::described(r),
            download: links.map(|secret| {
                let (exp, sig) =
                    crate::runs::kit::artifacts::signature(secret, &r.instance_id, now_ms);
                pages::paths::artifact(&r.instance_id, exp, &sig)
            }),
        })
        .collect())
}

/// The pipeline of a commit's check (none for any other execution, and for
/// a unit, whose page is its own job's).
pub async fn pipeline_of(
    db: &dyn Database,
    row: &ExecutionRow,
) -> Result<Option<pages::pipeline::PipelineView>, ApiError> {
    let (Some(repo), Some(sha)) = (row.repo.as_deref(), row.sha.as_deref()) else {
        return Ok(None);
    };
    if row.run != "check" || row.key.contains(":job-") {
        return Ok(None);
    }
    let units = executions::units_of_parent(db, repo, sha, &row.id).await?;
    Ok(pages::pipeline::view(row.output_json.as_deref(), &units))
}

/// Steps as the timeline shows them: the last completed round of each
/// command step links its log (every round of a command has its name; only
/// the one that finished wrote the log).
fn with_log_links(id: &InstanceId, steps: Vec<StepRow>) -> Vec<StepView> {
    let mut views: Vec<StepView> = steps.into_iter().map(StepView::new).collect();
    let mut linked: Vec<String> = Vec::new();
    for v in views.iter_mut().rev() {
        let name = base_name(&v.row.name);
        let done = v.row.state == EntryState::Done.as_str();
        if done && command::keeps_log(name) && !linked.iter().any(|l| l == name) {
            v.log_url = Some(paths::log(id.as_str(), name).as_str().to_owned());
            linked.push(name.to_owned());
        }
    }
    views
}

/// Who decides, in words, and whether the dashboard may.
fn decided_by(mut view: ApprovalView, decider: Decider) -> ApprovalView {
    match decider {
        Decider::Operator => {
            view.decider = None;
            view.approve_here = true;
        }
        Decider::GitHubWriteAccess => {
            let repo = view.repo.as_deref().unwrap_or("the repository");
            view.decider = Some(format!(
                "someone with write access to {repo}, with Approve and run on GitHub"
            ));
            view.approve_here = false;
        }
        Decider::ReleaseApprovers => {
            let repo = view.repo.as_deref().unwrap_or("the repository");
            view.decider = Some(format!(
                "a release approver of {repo}, by merging or closing the release-notes pull \
                 request or with Approve or Reject on GitHub"
            ));
            view.approve_here = false;
        }
    }
    view
}

fn approval_of(w: HumanWait) -> Option<ApprovalView> {
    let kind = human_wait_of(&w.wait_name)?;
    let view = ApprovalView {
        execution_id: w.execution.id,
        repo: w.execution.repo,
        entity: w.execution.entity,
        revision: w.execution.sha,
        event_type: kind.event_type.to_owned(),
        decider: None,
        waiting_since_ms: w.wait_started_ms,
        deadline_ms: w.wait_deadline_ms,
        approve_here: false,
    };
    Some(decided_by(view, kind.decider))
}

/// Every execution waiting for a person, earliest deadline first, and
/// whether more wait than listed.
async fn approvals(db: &dyn Database) -> Result<(Vec<ApprovalView>, bool), ApiError> {
    let names: Vec<&str> = HUMAN_WAITS.iter().map(|w| w.wait).collect();
    let waits = executions::human_waits(db, &names, APPROVALS_LISTED_MAX + 1).await?;
    let truncated = waits.len() > APPROVALS_LISTED_MAX as usize;
    let views = waits
        .into_iter()
        .take(APPROVALS_LISTED_MAX as usize)
        .filter_map(approval_of)
        .collect();
    Ok((views, truncated))
}

async fn approvals_page(db: &dyn Database, now_ms: i64) -> Result<String, ApiError> {
    let (approvals, truncated) = approvals(db).await?;
    let page = ApprovalsPage {
        approvals,
        truncated,
        actions: Actions::ui(None),
    };
    Ok(pages::render_approvals(&page, now_ms))
}

/// Live previews a page lists: far more than a repository's cap
/// (`PREVIEW_LIVE_PER_REPO_MAX`) times the repositories a page is read for.
const PREVIEWS_PAGE_ROWS: u32 = 200;

async fn previews_page(db: &dyn Database, now_ms: i64) -> Result<String, ApiError> {
    let mut previews = crate::store::previews::live(db, None, PREVIEWS_PAGE_ROWS + 1).await?;
    let truncated = previews.len() > PREVIEWS_PAGE_ROWS as usize;
    previews.truncate(PREVIEWS_PAGE_ROWS as usize);
    let page = pages::PreviewsPage {
        previews,
        truncated,
        actions: Actions::ui(None),
    };
    Ok(pages::render_previews(&page, now_ms))
}

async fn groups_page(db: &dyn Database, query: &str, now_ms: i64) -> Result<String, ApiError> {
    let mut filter = GroupFilter::default();
    for (k, v) in form_pairs(query) {
        let v = v.trim().to_owned();
        if v.is_empty() || v.len() > pages::query::FILTER_CHARS_MAX {
            continue;
        }
        match k.as_str() {
            "repo" => filter.repo = Some(v),
            "cursor" => filter.after = Some(v),
            _ => {}
        }
    }
    let found = serial::groups_page(db, &filter, GROUPS_PAGE_ROWS, now_ms).await?;
    // Deploys waiting for a confirmation have not joined their group yet.
    let approvals = approvals(db)
        .await?
        .0
        .into_iter()
        .filter(|a| a.approve_here)
        .filter(|a| filter.repo.is_none() || a.repo == filter.repo)
        .collect();
    let page = GroupsPage {
        groups: found.items,
        repo: filter.repo,
        next_cursor: found.next_cursor,
        approvals,
        actions: Actions::ui(None),
    };
    Ok(pages::render_groups(&page, now_ms))
}

async fn group_page(db: &dyn Database, group: &str, now_ms: i64) -> Result<String, ApiError> {
    // A group's policy lives in each commit's config: "times out in" uses
    // the ADR defaults, as `GET /v1/groups/{group}` does.
    let view = serial::explain(db, group, &QueuePolicy::default(), now_ms).await?;
    let page = GroupPage {
        view,
        actions: Actions::ui(None),
    };
    Ok(pages::render_group(&page, now_ms))
}

/// An action form's POST: without `confirmed=1` the confirmation page
/// (nothing is done); with it, the action and its result page. A refusal
/// (4xx) is a result page with its status; a server error is the caller's
/// to answer (it logs it with the request id).
pub async fn act(
    ops: &dyn Operations,
    target: &ActionTarget,
    action: Action,
    body: &str,
    now_ms: i64,
) -> Result<Reply, ApiError> {
    let form = ActionForm::parse(body);
    let name = match target {
        ActionTarget::Execution(id) => id.as_str().to_owned(),
        ActionTarget::Group(g) => g.clone(),
        ActionTarget::Preview { repo, pr } => format!("{repo}:{pr}"),
    };
    let actions = Actions::ui(None);
    if !form.confirmed {
        return Ok(Reply::ok(pages::render_confirm(
            action, &name, &form, &actions, now_ms,
        )));
    }
    let (status, ok, message) = match perform(ops, target, action, &form).await {
        Ok(answer) => (200, true, describe(action, &answer)),
        Err(e) if e.is_server_error() => return Err(e),
        Err(e) => (e.status, false, e.message),
    };
    let result = ActionResult {
        action,
        target: name,
        ok,
        message,
    };
    Ok(Reply {
        status,
        html: pages::render_result(&result, now_ms),
        headers: Vec::new(),
    })
}

async fn perform(
    ops: &dyn Operations,
    target: &ActionTarget,
    action: Action,
    form: &ActionForm,
) -> Result<Value, ApiError> {
    let id = match (target, action) {
        (ActionTarget::Group(g), Action::SkipAll) => return ops.skip_all(g).await,
        (ActionTarget::Preview { repo, pr }, Action::Teardown) => {
            return ops.teardown_preview(repo, *pr).await
        }
        (ActionTarget::Execution(id), a) if !matches!(a, Action::SkipAll | Action::Teardown) => id,
        _ => {
            return Err(ApiError::bad_request(
                "bad_action",
                "that action does not apply here",
            ))
        }
    };
    match action {
        Action::Terminate => ops.command(id, Command::Terminate).await,
        Action::Pause => ops.command(id, Command::Pause).await,
        Action::Resume => ops.command(id, Command::Resume).await,
        Action::Restart => {
            let from_step = form.from_step.clone();
            ops.command(id, Command::Restart { from_step }).await
        }
        Action::Skip => ops.skip(id).await,
        Action::SendEvent => {
            let (event_type, payload) = event_of(form)?;
            ops.event(id, &event_type, &payload).await
        }
        Action::SkipAll | Action::Teardown => Err(ApiError::bad_request(
            "bad_action",
            "that action applies to a group or a preview",
        )),
    }
}

/// The event type and payload of a send-event form: the payload JSON
/// (empty: `{}`); the type is checked where every operator's event is
/// (`OperatorEvent::new`: the path alphabet, never a GitHub-only type).
fn event_of(form: &ActionForm) -> Result<(String, Value), ApiError> {
    let event_type = form.event_type.clone().unwrap_or_default();
    let payload = match form.payload.as_deref().map(str::trim) {
        None | Some("") => json!({}),
        Some(text) => serde_json::from_str(text).map_err(|e| {
            ApiError::bad_request("bad_json", format!("the payload is not JSON: {e}"))
        })?,
    };
    Ok((event_type, payload))
}

/// What an action did, in words, from the API's answer.
fn describe(action: Action, answer: &Value) -> String {
    match action {
        Action::Skip => "Skipped, silently: no reason recorded, no notification.".to_owned(),
        Action::SkipAll => {
            let n = answer["skipped"].as_array().map_or(0, Vec::len);
            format!("{n} waiter(s) skipped, silently. The holder was not touched.")
        }
        Action::SendEvent => "The event was delivered.".to_owned(),
        Action::Teardown => format!(
            "Its teardown is {} (`{}`).",
            if answer["created"] == true {
                "started"
            } else {
                "already under way"
            },
            answer["id"].as_str().unwrap_or("?")
        ),
        _ => match (answer["status"].as_str(), answer["pending"].as_str()) {
            (Some(s), Some(when)) => format!("Now {s}; it takes effect {when}."),
            (Some(s), None) => format!("Now {s}."),
            _ => "Done.".to_owned(),
        },
    }
}

/// `POST /ui/login`: a session cookie for the admin token and a redirect
/// to where the operator was going; the sign-in page again (401) for a
/// wrong token.
pub fn login(body: &str, admin_token: Option<&str>, https: bool, now_ms: i64) -> Reply {
    let (mut token, mut next) = (None, None);
    for (k, v) in form_pairs(body) {
        match k.as_str() {
            "token" => token = Some(v),
            "next" => next = Some(v),
            _ => {}
        }
    }
    let next = auth::next_after_login(next.as_deref());
    let admin = admin_token.filter(|t| !t.is_empty());
    let Some(admin) = admin else {
        let message = "ADMIN_TOKEN is not set: sign in through Cloudflare Access instead";
        return refusal(503, Some(message), &next, now_ms);
    };
    let presented = token.map(|t| format!("Bearer {t}"));
    let session = super::check_admin(presented.as_deref(), Some(admin))
        .ok()
        .and_then(|()| auth::make_session(admin, now_ms.div_euclid(1_000)));
    match session {
        Some(value) => {
            let mut reply = Reply::see_other(next);
            reply
                .headers
                .push(("Set-Cookie", auth::session_cookie(&value, https)));
            reply
        }
        None => refusal(401, Some("That is not the admin token."), &next, now_ms),
    }
}

/// `POST /ui/logout`: the session cookie cleared, back to sign-in.
pub fn logout(https: bool) -> Reply {
    let mut reply = Reply::see_other(pages::paths::LOGIN_PATH.to_owned());
    reply
        .headers
        .push(("Set-Cookie", auth::session_cookie_cleared(https)));
    reply
}

/// The sign-in page with `status` (401 for a refused request, 200 for
/// `GET /ui/login`), saying why and returning to `next` once signed in.
pub fn refusal(status: u16, reason: Option<&str>, next: &str, now_ms: i64) -> Reply {
    Reply {
        status,
        html: pages::render_login(reason, &auth::next_after_login(Some(next)), now_ms),
        headers: Vec::new(),
    }
}
