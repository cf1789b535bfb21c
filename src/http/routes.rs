//! Request routing as a pure function, so tests check it without a socket:
//! the `/v1/` API, the dashboard under `/ui/` and the two open routes.
//! [`Route::access`] says which credential each route needs.

use crate::engine::{Command, InstanceId};

use super::pages::paths;
use super::pages::Action;

#[derive(Debug, Clone, PartialEq)]
pub enum Route {
    Health,
    Webhook,
    ListExecutions,
    CreateExecution,
    GetExecution(InstanceId),
    SendEvent(InstanceId, String),
    Command(InstanceId, Command),
    ListDeliveries,
    /// What executions cost, per repository (`GET /v1/costs`).
    Costs,
    /// What the operator configured, as the Worker reads it (no values).
    Config,
    /// A command's log behind a signed link (`runs::loglink`): the
    /// instance and the step's id form.
    Log(InstanceId, InstanceId),
    /// A unit's artifacts behind a signed link (`runs::kit::artifacts`).
    Artifact(InstanceId),
    ListGroups,
    ExplainGroup(String),
    SkipAll(String),
    /// An operator skips a waiting execution (a queued deploy).
    Skip(InstanceId),
    /// A workflow step starts a run (`http::dispatch`): signed with
    /// DISPATCH_SECRET, not the admin token.
    Dispatch,
    /// What is configured and what is missing (behind the admin token).
    Setup,
    /// A dashboard page (GET).
    Page(Page),
    /// A dashboard action form (POST): confirmation page, then result page.
    PageAction(ActionTarget, Action),
    /// `/ui/executions/{id}/log/{step}`: a command step's log as text, for
    /// an operator (the signed `/logs/` link is for anyone who holds it).
    StepLog(InstanceId, String),
    /// `/ui/app.js`, `/ui/app.css`.
    Asset(Asset),
    /// `GET /ui/login`: the sign-in form; `POST /ui/login`: a session
    /// cookie for the admin token; `POST /ui/logout` drops it.
    Login,
    LoginSubmit,
    Logout,
}

/// The dashboard's pages.
#[derive(Debug, Clone, PartialEq)]
pub enum Page {
    /// `/ui`: the executions list.
    Home,
    Executions,
    Execution(InstanceId),
    Groups,
    Group(String),
    Approvals,
    /// `/ui/previews`: live pull-request previews.
    Previews,
}

/// What a dashboard action acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum ActionTarget {
    Execution(InstanceId),
    Group(String),
    /// A live preview: its repository and pull request.
    Preview {
        repo: String,
        pr: u64,
    },
}

impl ActionTarget {
    /// A preview as one path segment names it: `owner/repo:<pull request>`.
    pub fn preview(segment: &str) -> Option<ActionTarget> {
        let (repo, pr) = segment.rsplit_once(':')?;
        let pr = pr.parse::<u64>().ok().filter(|n| *n > 0)?;
        let valid = repo
            .split_once('/')
            .is_some_and(|(o, n)| !o.is_empty() && !n.is_empty());
        valid.then(|| ActionTarget::Preview {
            repo: repo.to_owned(),
            pr,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asset {
    AppJs,
    AppCss,
}

/// Who may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Anyone: `/healthz`, the webhook (which checks its signature) and a
    /// log behind its signed link (which checks its own).
    Open,
    /// Anyone, and it shows nothing of Sluice's state: the sign-in page
    /// and the static assets it needs.
    SignIn,
    /// An operator: the admin token, a dashboard session made from it, or
    /// Cloudflare Access.
    Operator,
}

impl Route {
    pub fn access(&self) -> Access {
        match self {
            // The dispatch checks its own signature (DISPATCH_SECRET).
            Route::Health
            | Route::Webhook
            | Route::Log(..)
            | Route::Artifact(_)
            | Route::Dispatch => Access::Open,
            Route::Asset(_) | Route::Login | Route::LoginSubmit | Route::Logout => Access::SignIn,
            _ => Access::Operator,
        }
    }

    /// A dashboard route: its errors are HTML pages, not JSON.
    pub fn is_page(&self) -> bool {
        matches!(
            self,
            Route::Page(_)
                | Route::PageAction(..)
                | Route::Login
                | Route::LoginSubmit
                | Route::Logout
        )
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum RouteError {
    NotFound,
    MethodNotAllowed,
    BadId(String),
}

/// Event types are path segments: same alphabet as ids.
pub fn valid_event_type(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// Group keys ("deploy:octo/hello:main") travel percent-encoded in one
/// path segment.
fn group_name(raw: &str) -> Result<String, RouteError> {
    decoded(raw, "group")
}

/// A step name, percent-encoded in one segment.
fn segment(raw: &str) -> Result<String, RouteError> {
    decoded(raw, "step")
}

fn decoded(raw: &str, what: &str) -> Result<String, RouteError> {
    let bad = || {
        RouteError::BadId(format!(
            "{what} {raw:?} is not a valid percent-encoded name"
        ))
    };
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = raw.get(i + 1..i + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    let name = String::from_utf8(out).map_err(|_| bad())?;
    if name.is_empty() || name.len() > GROUP_CHARS_MAX || name.chars().any(char::is_control) {
        return Err(bad());
    }
    Ok(name)
}

/// Group keys are repository, branch and label: GitHub caps each part far
/// below this.
const GROUP_CHARS_MAX: usize = 512;

pub fn route(method: &str, path: &str) -> Result<Route, RouteError> {
    let segs: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let id = |s: &str| InstanceId::parse(s).map_err(|e| RouteError::BadId(e.to_string()));
    let only = |m: &str, r: Route| {
        if method == m {
            Ok(r)
        } else {
            Err(RouteError::MethodNotAllowed)
        }
    };
    match segs.as_slice() {
        ["healthz"] => only("GET", Route::Health),
        ["webhooks", "github"] => only("POST", Route::Webhook),
        ["logs", instance, step] => only("GET", Route::Log(id(instance)?, id(step)?)),
        ["artifacts", instance] => only("GET", Route::Artifact(id(instance)?)),
        ["v1", "deliveries"] => only("GET", Route::ListDeliveries),
        ["v1", "costs"] => only("GET", Route::Costs),
        ["v1", "config"] => only("GET", Route::Config),
        ["v1", "dispatch"] => only("POST", Route::Dispatch),
        ["v1", "setup"] => only("GET", Route::Setup),
        ["v1", "executions"] => match method {
            "GET" => Ok(Route::ListExecutions),
            "POST" => Ok(Route::CreateExecution),
            _ => Err(RouteError::MethodNotAllowed),
        },
        ["v1", "executions", raw] => only("GET", Route::GetExecution(id(raw)?)),
        ["v1", "executions", raw, "events", ty] => {
            if !valid_event_type(ty) {
                return Err(RouteError::BadId(format!(
                    "event type {ty:?} must be [A-Za-z0-9_.-]{{1,100}}"
                )));
            }
            // A GitHub-only type is refused where every operator's event is
            // (`dashboard::OperatorEvent::new`), the dashboard's form too.
            only("POST", Route::SendEvent(id(raw)?, (*ty).to_owned()))
        }
        ["v1", "groups"] => only("GET", Route::ListGroups),
        ["v1", "groups", g] => only("GET", Route::ExplainGroup(group_name(g)?)),
        ["v1", "groups", g, "skip-all"] => only("POST", Route::SkipAll(group_name(g)?)),
        ["v1", "executions", raw, "skip"] => only("POST", Route::Skip(id(raw)?)),
        ["v1", "executions", raw, verb] => {
            let cmd = match *verb {
                "terminate" => Command::Terminate,
                "pause" => Command::Pause,
                "resume" => Command::Resume,
                // The step to restart from comes in the body.
                "restart" => Command::Restart { from_step: None },
                _ => return Err(RouteError::NotFound),
            };
            only("POST", Route::Command(id(raw)?, cmd))
        }
        ["ui", ..] => ui_route(method, &segs[1..]),
        _ => Err(RouteError::NotFound),
    }
}

/// The dashboard's routes (`http::pages::paths` builds their links).
fn ui_route(method: &str, segs: &[&str]) -> Result<Route, RouteError> {
    let id = |s: &str| InstanceId::parse(s).map_err(|e| RouteError::BadId(e.to_string()));
    let only = |m: &str, r: Route| {
        if method == m {
            Ok(r)
        } else {
            Err(RouteError::MethodNotAllowed)
        }
    };
    let page = |p: Page| only("GET", Route::Page(p));
    let act = |t: ActionTarget, a: Action| only("POST", Route::PageAction(t, a));
    match segs {
        [] => page(Page::Home),
        ["executions"] => page(Page::Executions),
        ["executions", raw] => page(Page::Execution(id(raw)?)),
        ["executions", raw, "log", step] => only("GET", Route::StepLog(id(raw)?, segment(step)?)),
        ["executions", raw, verb] => {
            let action = match *verb {
                "terminate" => Action::Terminate,
                "pause" => Action::Pause,
                "resume" => Action::Resume,
                "restart" => Action::Restart,
                "skip" => Action::Skip,
                // The event type is a field of the form.
                "events" => Action::SendEvent,
                _ => return Err(RouteError::NotFound),
            };
            act(ActionTarget::Execution(id(raw)?), action)
        }
        ["groups"] => page(Page::Groups),
        ["groups", g] => page(Page::Group(group_name(g)?)),
        ["groups", g, "skip-all"] => act(ActionTarget::Group(group_name(g)?), Action::SkipAll),
        ["approvals"] => page(Page::Approvals),
        ["previews"] => page(Page::Previews),
        ["previews", p, "teardown"] => {
            let target = ActionTarget::preview(&segment(p)?).ok_or(RouteError::NotFound)?;
            act(target, Action::Teardown)
        }
        ["login"] => match method {
            "GET" => Ok(Route::Login),
            "POST" => Ok(Route::LoginSubmit),
            _ => Err(RouteError::MethodNotAllowed),
        },
        ["logout"] => only("POST", Route::Logout),
        [file] if format!("/ui/{file}") == paths::APP_JS_PATH => {
            only("GET", Route::Asset(Asset::AppJs))
        }
        [file] if format!("/ui/{file}") == paths::APP_CSS_PATH => {
            only("GET", Route::Asset(Asset::AppCss))
        }
        _ => Err(RouteError::NotFound),
    }
}

/// Every route of the API and the dashboard as `(method, path template)`,
/// `{id}`, `{type}`, `{group}`, `{step}` (a step's name) and `{step_key}`
/// (its id form) standing for a segment: what
/// `docs/openapi.json` must document (`tests/openapi.rs`) and what
/// [`route`] must serve.
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/healthz"),
    ("POST", "/webhooks/github"),
    ("GET", "/logs/{id}/{step_key}"),
    ("GET", "/artifacts/{id}"),
    ("GET", "/v1/config"),
    ("POST", "/v1/dispatch"),
    ("GET", "/v1/setup"),
    ("GET", "/v1/deliveries"),
    ("GET", "/v1/costs"),
    ("GET", "/v1/executions"),
    ("POST", "/v1/executions"),
    ("GET", "/v1/executions/{id}"),
    ("POST", "/v1/executions/{id}/events/{type}"),
    ("POST", "/v1/executions/{id}/terminate"),
    ("POST", "/v1/executions/{id}/pause"),
    ("POST", "/v1/executions/{id}/resume"),
    ("POST", "/v1/executions/{id}/restart"),
    ("POST", "/v1/executions/{id}/skip"),
    ("GET", "/v1/groups"),
    ("GET", "/v1/groups/{group}"),
    ("POST", "/v1/groups/{group}/skip-all"),
    ("GET", "/ui"),
    ("GET", "/ui/executions"),
    ("GET", "/ui/executions/{id}"),
    ("GET", "/ui/executions/{id}/log/{step}"),
    ("POST", "/ui/executions/{id}/terminate"),
    ("POST", "/ui/executions/{id}/pause"),
    ("POST", "/ui/executions/{id}/resume"),
    ("POST", "/ui/executions/{id}/restart"),
    ("POST", "/ui/executions/{id}/skip"),
    ("POST", "/ui/executions/{id}/events"),
    ("GET", "/ui/groups"),
    ("GET", "/ui/groups/{group}"),
    ("POST", "/ui/groups/{group}/skip-all"),
    ("GET", "/ui/approvals"),
    ("GET", "/ui/previews"),
    ("POST", "/ui/previews/{preview}/teardown"),
    ("GET", "/ui/login"),
    ("POST", "/ui/login"),
    ("POST", "/ui/logout"),
    ("GET", "/ui/app.js"),
    ("GET", "/ui/app.css"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("GET", "/healthz"), Ok(Route::Health));
        assert_eq!(route("POST", "/webhooks/github"), Ok(Route::Webhook));
        assert_eq!(
            route("GET", "/webhooks/github"),
            Err(RouteError::MethodNotAllowed)
        );
        assert!(matches!(
            route("GET", "/v1/executions/check-a-1"),
            Ok(Route::GetExecution(_))
        ));
        assert!(matches!(
            route("GET", "/v1/executions/a:b"),
            Err(RouteError::BadId(_))
        ));
        assert!(
            matches!(route("POST", "/v1/executions/x/events/approve"), Ok(Route::SendEvent(_, t)) if t == "approve")
        );
        assert!(matches!(
            route("POST", "/v1/executions/x/events/deploy-confirm"),
            Ok(Route::SendEvent(..))
        ));
        assert!(matches!(
            route("POST", "/v1/executions/x/pause"),
            Ok(Route::Command(_, Command::Pause))
        ));
        assert_eq!(
            route("POST", "/v1/executions/x/explode"),
            Err(RouteError::NotFound)
        );
        assert_eq!(route("GET", "/nope"), Err(RouteError::NotFound));
        assert_eq!(
            route("GET", "/v1/groups/deploy%3Aocto%2Fhello%3Amain"),
            Ok(Route::ExplainGroup("deploy:octo/hello:main".into()))
        );
        assert!(matches!(
            route("GET", "/v1/groups/%zz"),
            Err(RouteError::BadId(_))
        ));
        assert!(
            matches!(route("POST", "/v1/groups/g/skip-all"), Ok(Route::SkipAll(g)) if g == "g")
        );
        assert!(matches!(
            route("POST", "/v1/executions/x/skip"),
            Ok(Route::Skip(_))
        ));
    }

    #[test]
    fn dashboard_routes() {
        assert_eq!(route("GET", "/ui"), Ok(Route::Page(Page::Home)));
        assert_eq!(route("GET", "/ui/"), Ok(Route::Page(Page::Home)));
        assert!(matches!(
            route("GET", "/ui/executions/check-a-1"),
            Ok(Route::Page(Page::Execution(_)))
        ));
        assert!(matches!(
            route("POST", "/ui/executions/x/events"),
            Ok(Route::PageAction(
                ActionTarget::Execution(_),
                Action::SendEvent
            ))
        ));
        assert_eq!(
            route("POST", "/ui/groups/deploy%3Ao%2Fr%3Amain/skip-all"),
            Ok(Route::PageAction(
                ActionTarget::Group("deploy:o/r:main".into()),
                Action::SkipAll
            ))
        );
        assert_eq!(
            route("GET", "/ui/executions/x/skip"),
            Err(RouteError::MethodNotAllowed),
            "an action is never a GET (a link or a prefetch must not act)"
        );
        assert!(
            matches!(route("GET", "/ui/executions/x/log/run%20check%20command"), Ok(Route::StepLog(_, s)) if s == "run check command")
        );
        assert_eq!(
            route("GET", "/ui/executions/x/log/run%20check%20command").map(|r| r.access()),
            Ok(Access::Operator),
            "a log needs a credential"
        );
        assert_eq!(route("GET", "/ui/app.js"), Ok(Route::Asset(Asset::AppJs)));
        assert_eq!(route("GET", "/ui/nope.js"), Err(RouteError::NotFound));
        assert_eq!(route("GET", "/ui/login"), Ok(Route::Login));
        assert_eq!(Route::Login.access(), Access::SignIn);
        assert_eq!(Route::Health.access(), Access::Open);
        assert_eq!(
            route("GET", "/logs/check-a-1/run-check-command").map(|r| r.access()),
            Ok(Access::Open),
            "a signed log link checks its own signature"
        );
        assert_eq!(Route::Page(Page::Groups).access(), Access::Operator);
        assert_eq!(Route::ListExecutions.access(), Access::Operator);
    }

    /// Every template of `ROUTES` is served by `route` with its method and
    /// refused with another.
    #[test]
    fn every_listed_route_is_served() {
        for (method, template) in ROUTES {
            let path = template
                .replace("{id}", "check-a-1")
                .replace("{type}", "deploy-confirm")
                .replace("{group}", "deploy%3Ao%2Fr%3Amain")
                .replace("{preview}", "o%2Fr%3A7")
                .replace("{step}", "run%20check%20command")
                .replace("{step_key}", "run-check-command");
            assert!(route(method, &path).is_ok(), "{method} {path}");
            assert_eq!(
                route("DELETE", &path),
                Err(RouteError::MethodNotAllowed),
                "{path}"
            );
        }
    }
}
