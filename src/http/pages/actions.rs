//! Operator actions as forms: terminate, pause, resume, restart, skip,
//! skip all waiters of a group, send an event.
//!
//! Every form posts `application/x-www-form-urlencoded` to a route the
//! caller gives ([`Actions`]), with `confirmed=` (empty) and, when given,
//! `csrf`. Confirmation has two paths that end in the same POST:
//! - with `app.js`, submitting opens the page's `<dialog>` with the form's
//!   `data-confirm` text; Confirm re-submits with `confirmed=1`;
//! - without it, the POST arrives with `confirmed` empty: the caller does
//!   nothing and answers [`render_confirm`], a page whose form carries the
//!   same fields with `confirmed=1`.
//!
//! After acting, the caller answers [`render_result`] (or redirects).

use super::escape::{Html, Url};
use super::layout::{self, Nav};
use super::paths;
use super::query::ActionForm;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Terminate,
    Pause,
    Resume,
    Restart,
    Skip,
    SkipAll,
    SendEvent,
    /// A live preview torn down (`runs::preview::teardown`).
    Teardown,
}

impl Action {
    pub const ALL: [Action; 8] = [
        Action::Terminate,
        Action::Pause,
        Action::Resume,
        Action::Restart,
        Action::Skip,
        Action::SkipAll,
        Action::SendEvent,
        Action::Teardown,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Action::Terminate => "Terminate",
            Action::Pause => "Pause",
            Action::Resume => "Resume",
            Action::Restart => "Restart",
            Action::Skip => "Skip",
            Action::SkipAll => "Skip all waiters",
            Action::SendEvent => "Send event",
            Action::Teardown => "Tear down",
        }
    }

    /// What confirming does, after "<label> <target>?".
    fn consequence(self) -> &'static str {
        match self {
            Action::Terminate => {
                "Its process is killed (its end confirmed) before its gates are released; it ends terminated."
            }
            Action::Pause => {
                "It stops at its next step. A paused deploy holder stops heartbeating: after 10 minutes a newer deploy may take its group."
            }
            Action::Resume => "It continues from where it paused.",
            Action::Restart => {
                "The previous generation's process is killed and what it held released; it runs again and queues afresh."
            }
            Action::Skip => "It ends skipped, with no reason and no notification.",
            Action::SkipAll => {
                "Every waiter ends skipped, silently. The holder is not touched."
            }
            Action::SendEvent => "The event is delivered to the execution.",
            Action::Teardown => {
                "Its `teardown` command runs once any running preview deploy of the pull request has ended; its deployments end inactive and its pull request is told why."
            }
        }
    }

    /// The confirmation question shown in the dialog and on the page.
    pub fn question(self, target: &str) -> String {
        format!("{} {target}? {}", self.label(), self.consequence())
    }

    /// Destructive actions are drawn as such.
    fn danger(self) -> bool {
        matches!(
            self,
            Action::Terminate | Action::Skip | Action::SkipAll | Action::Restart | Action::Teardown
        )
    }

    /// Where "Cancel" and "back" lead: the group's page for a skip-all,
    /// else the execution's.
    fn back(self, target: &str) -> Url {
        match self {
            Action::SkipAll => paths::group(target),
            Action::Teardown => paths::previews(),
            _ => paths::execution(target),
        }
    }
}

/// The routes action forms post to, as templates: `{id}` is replaced by
/// the percent-encoded instance id, `{group}` by the percent-encoded group
/// key. None hides that action. A template that does not make a same-origin
/// path or http(s) URL hides it too.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Actions {
    pub terminate: Option<&'static str>,
    pub pause: Option<&'static str>,
    pub resume: Option<&'static str>,
    pub restart: Option<&'static str>,
    pub skip: Option<&'static str>,
    /// Its form sends `type` and `payload` fields (the event type cannot
    /// be a path segment of a plain form's action).
    pub send_event: Option<&'static str>,
    pub skip_all: Option<&'static str>,
    /// `{preview}` is the percent-encoded `owner/repo:<pull request>`.
    pub teardown: Option<&'static str>,
    /// Sent back in every form as the hidden field `csrf`; None: no field
    /// (then rely on [`super::same_origin_post`]).
    pub csrf: Option<String>,
}

impl Actions {
    /// The `/v1/` routes. `send_event` is `/v1/executions/{id}/events`,
    /// with the type in the form body: the caller routes that form POST.
    pub fn v1(csrf: Option<String>) -> Actions {
        Actions {
            terminate: Some("/v1/executions/{id}/terminate"),
            pause: Some("/v1/executions/{id}/pause"),
            resume: Some("/v1/executions/{id}/resume"),
            restart: Some("/v1/executions/{id}/restart"),
            skip: Some("/v1/executions/{id}/skip"),
            send_event: Some("/v1/executions/{id}/events"),
            skip_all: Some("/v1/groups/{group}/skip-all"),
            // The API tears a preview down with `POST /v1/executions`.
            teardown: None,
            csrf,
        }
    }

    /// The dashboard's own action routes (`http::routes`, `/ui/...`): they
    /// answer with the confirmation and result pages. `send_event` takes
    /// the type in the form body.
    pub fn ui(csrf: Option<String>) -> Actions {
        Actions {
            terminate: Some("/ui/executions/{id}/terminate"),
            pause: Some("/ui/executions/{id}/pause"),
            resume: Some("/ui/executions/{id}/resume"),
            restart: Some("/ui/executions/{id}/restart"),
            skip: Some("/ui/executions/{id}/skip"),
            send_event: Some("/ui/executions/{id}/events"),
            skip_all: Some("/ui/groups/{group}/skip-all"),
            teardown: Some("/ui/previews/{preview}/teardown"),
            csrf,
        }
    }

    fn template(&self, action: Action) -> Option<&'static str> {
        match action {
            Action::Terminate => self.terminate,
            Action::Pause => self.pause,
            Action::Resume => self.resume,
            Action::Restart => self.restart,
            Action::Skip => self.skip,
            Action::SendEvent => self.send_event,
            Action::SkipAll => self.skip_all,
            Action::Teardown => self.teardown,
        }
    }

    /// The route of `action` for `target` (an instance id, or a group key
    /// for `SkipAll`), or None when the action is hidden.
    pub fn url(&self, action: Action, target: &str) -> Option<Url> {
        let template = self.template(action)?;
        let target = match action {
            Action::SkipAll | Action::Teardown => target,
            _ => crate::gates::serial::instance_of(target),
        };
        let placeholder = match action {
            Action::SkipAll => "{group}",
            Action::Teardown => "{preview}",
            _ => "{id}",
        };
        Url::from_template(template, placeholder, target)
    }
}

/// Extra fields of a form, after the hidden ones.
pub(crate) enum Fields<'a> {
    None,
    /// Restart: a choice of step to restart from.
    Restart {
        steps: &'a [String],
    },
    /// Send event: free type and payload.
    Event,
    /// Send one known event (an approval).
    FixedEvent {
        event_type: &'a str,
    },
}

/// One action form; nothing when the action is hidden.
pub(crate) fn form(h: &mut Html, actions: &Actions, action: Action, target: &str, fields: Fields) {
    let Some(url) = actions.url(action, target) else {
        return;
    };
    let (label, question) = match fields {
        Fields::FixedEvent { event_type } => (
            "Approve",
            format!(
                "Approve {target}: send it {event_type}? {}",
                action.consequence()
            ),
        ),
        _ => (action.label(), action.question(target)),
    };
    h.raw("<form method=\"post\" class=\"action\"")
        .action(&url)
        .attr("data-confirm", &question)
        .raw("><input type=\"hidden\" name=\"confirmed\" value=\"\">");
    csrf_field(h, actions.csrf.as_deref());
    match fields {
        Fields::None => {}
        Fields::Restart { steps } => restart_fields(h, steps, None),
        Fields::Event => event_fields(h, None, None),
        Fields::FixedEvent { event_type } => {
            h.raw("<input type=\"hidden\" name=\"type\"")
                .attr("value", event_type)
                .raw(">");
        }
    }
    submit(h, action, label);
    h.raw("</form>");
}

fn csrf_field(h: &mut Html, csrf: Option<&str>) {
    if let Some(token) = csrf {
        h.raw("<input type=\"hidden\" name=\"csrf\"")
            .attr("value", token)
            .raw(">");
    }
}

fn submit(h: &mut Html, action: Action, label: &str) {
    h.raw("<button type=\"submit\"");
    if action.danger() {
        h.raw(" class=\"danger\"");
    }
    h.raw(">").text(label).raw("</button>");
}

fn restart_fields(h: &mut Html, steps: &[String], chosen: Option<&str>) {
    h.raw("<label>from <select name=\"from_step\"><option value=\"\">the start</option>");
    for s in steps {
        h.raw("<option").attr("value", s);
        if chosen == Some(s.as_str()) {
            h.raw(" selected");
        }
        h.raw(">").text(s).raw("</option>");
    }
    h.raw("</select></label>");
}

fn event_fields(h: &mut Html, event_type: Option<&str>, payload: Option<&str>) {
    h.raw("<label>type <input name=\"type\" required maxlength=\"100\"")
        .raw(" pattern=\"[A-Za-z0-9_.\\-]{1,100}\" placeholder=\"deploy-confirm\"")
        .attr("value", event_type.unwrap_or(""))
        .raw("></label><label>payload <textarea name=\"payload\" rows=\"2\"")
        .raw(" placeholder=\"{}\">")
        .text(payload.unwrap_or(""))
        .raw("</textarea></label>");
}

/// The confirmation page a form POST without `confirmed=1` is answered
/// with: the question, a form with the posted fields and `confirmed=1`,
/// and a way back. Shows only a link back when the action is hidden.
pub fn render_confirm(
    action: Action,
    target: &str,
    posted: &ActionForm,
    actions: &Actions,
    now_ms: i64,
) -> String {
    let mut h = Html::new();
    h.raw("<h1>Confirm: ")
        .text(action.label())
        .raw("</h1><p class=\"question\">")
        .text(&action.question(target))
        .raw("</p>");
    if let Some(url) = actions.url(action, target) {
        h.raw("<form method=\"post\" class=\"action confirm\"")
            .action(&url)
            .raw("><input type=\"hidden\" name=\"confirmed\" value=\"1\">");
        csrf_field(&mut h, actions.csrf.as_deref());
        confirm_fields(&mut h, action, posted);
        submit(&mut h, action, action.label());
        h.raw("</form>");
    }
    h.raw("<p><a")
        .href(&action.back(target))
        .raw(">Cancel</a></p>");
    layout::page(action.label(), Nav::None, 0, now_ms, &h)
}

/// The posted fields, kept for the confirming POST.
fn confirm_fields(h: &mut Html, action: Action, posted: &ActionForm) {
    let keep = |h: &mut Html, name: &'static str, value: Option<&str>| {
        if let Some(v) = value {
            h.raw("<input type=\"hidden\"")
                .attr("name", name)
                .attr("value", v)
                .raw(">");
        }
    };
    match action {
        Action::Restart => match posted.from_step.as_deref() {
            Some(step) => {
                h.raw("<p>From step <code>").text(step).raw("</code>.</p>");
                keep(h, "from_step", Some(step));
            }
            None => {
                h.raw("<p>From the start.</p>");
            }
        },
        Action::SendEvent => {
            event_fields(h, posted.event_type.as_deref(), posted.payload.as_deref())
        }
        _ => {}
    }
}

/// What an action did, for the page after the POST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionResult {
    pub action: Action,
    /// The instance id, or the group key of a skip-all.
    pub target: String,
    pub ok: bool,
    /// What happened, in words (the API's answer or error message).
    pub message: String,
}

/// The page after an action: its outcome and a link back.
pub fn render_result(result: &ActionResult, now_ms: i64) -> String {
    let mut h = Html::new();
    h.raw("<h1>").text(result.action.label()).raw(": ");
    h.raw(if result.ok { "done" } else { "refused" });
    h.raw("</h1><p")
        .raw(if result.ok {
            " class=\"result ok\""
        } else {
            " class=\"result failed\""
        })
        .raw(">")
        .text(&result.message)
        .raw("</p><p><a")
        .href(&result.action.back(&result.target))
        .raw(">Back to ")
        .text(&result.target)
        .raw("</a></p>");
    layout::page(result.action.label(), Nav::None, 0, now_ms, &h)
}
