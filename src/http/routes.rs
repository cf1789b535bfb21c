//! Request routing as a pure function, so tests check it without a socket.

use crate::engine::{Command, InstanceId};

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
    /// What the operator configured, as the Worker reads it (no values).
    Config,
    /// A command's log behind a signed link (`runs::loglink`): the
    /// instance and the step's id form.
    Log(InstanceId, InstanceId),
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
}

#[derive(Debug, Clone, PartialEq)]
pub enum RouteError {
    NotFound,
    MethodNotAllowed,
    BadId(String),
}

/// Event types are path segments: same alphabet as ids.
fn valid_event_type(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 100
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.')
}

/// Group keys ("deploy:octo/hello:main") travel percent-encoded in one
/// path segment.
fn group_name(raw: &str) -> Result<String, RouteError> {
    let bad = || RouteError::BadId(format!("group {raw:?} is not a valid percent-encoded name"));
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
        ["v1", "deliveries"] => only("GET", Route::ListDeliveries),
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
        _ => Err(RouteError::NotFound),
    }
}

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
}
