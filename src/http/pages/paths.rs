//! The dashboard's own routes, in one place: every link a page makes is
//! built here, with ids and group names percent-encoded as one segment.
//!
//! | method | path | page |
//! | --- | --- | --- |
//! | GET | `/ui/executions` (query: [`super::ExecutionsQuery`]) | [`super::render_executions`] |
//! | GET | `/ui/executions/{id}` | [`super::render_execution`] |
//! | GET | `/ui/executions/{id}/log/{step, percent-encoded}` | the step's log, `text/plain` |
//! | GET | `/ui/groups` | [`super::render_groups`] |
//! | GET | `/ui/groups/{group, percent-encoded}` | [`super::render_group`] |
//! | GET | `/ui/approvals` | [`super::render_approvals`] |
//! | GET | `/ui/previews` | [`super::render_previews`] |
//! | GET, POST | `/ui/login` | [`super::render_login`] |
//! | POST | `/ui/executions/{id}/{action}`, `/ui/groups/{group}/skip-all` | [`super::Actions::ui`] |
//! | GET | `/ui/app.js`, `/ui/app.css` | [`super::APP_JS`], [`super::APP_CSS`] |
//!
//! `http::routes::route` parses the same paths.

use super::escape::Url;

pub const EXECUTIONS_PATH: &str = "/ui/executions";
pub const GROUPS_PATH: &str = "/ui/groups";
pub const APPROVALS_PATH: &str = "/ui/approvals";
pub const PREVIEWS_PATH: &str = "/ui/previews";
pub const LOGIN_PATH: &str = "/ui/login";
pub const LOGOUT_PATH: &str = "/ui/logout";
pub const APP_JS_PATH: &str = "/ui/app.js";
pub const APP_CSS_PATH: &str = "/ui/app.css";

/// The executions list, unfiltered.
pub fn executions() -> Url {
    Url::path(EXECUTIONS_PATH)
}

/// One execution's page. `id` is an instance id; a gate's execution id
/// (which may carry a generation, `id.g2`) is mapped to its instance.
pub fn execution(id: &str) -> Url {
    Url::path(EXECUTIONS_PATH).seg(crate::gates::serial::instance_of(id))
}

/// A command step's log (`runs::command::LOGGED_STEPS`), as text.
pub fn log(id: &str, step: &str) -> Url {
    execution(id).seg("log").seg(step)
}

/// A unit's archive behind its signed link (`runs::kit::artifacts`).
pub fn artifact(id: &str, exp_ms: i64, sig: &str) -> Url {
    Url::path("/artifacts")
        .seg(id)
        .query("exp", &exp_ms.to_string())
        .query("sig", sig)
}

pub fn groups() -> Url {
    Url::path(GROUPS_PATH)
}

pub fn approvals() -> Url {
    Url::path(APPROVALS_PATH)
}

pub fn previews() -> Url {
    Url::path(PREVIEWS_PATH)
}

/// One group's page: the group key is one percent-encoded segment
/// (`deploy:octo/hello:main` → `deploy%3Aocto%2Fhello%3Amain`).
pub fn group(name: &str) -> Url {
    Url::path(GROUPS_PATH).seg(name)
}

/// The executions list filtered to one repository and entity.
pub fn entity(repo: Option<&str>, entity: Option<&str>) -> Url {
    let mut url = executions();
    if let Some(r) = repo {
        url = url.query("repo", r);
    }
    if let Some(e) = entity {
        url = url.query("entity", e);
    }
    url
}
