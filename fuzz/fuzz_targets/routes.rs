//! Every request's method and URL: `sluice::http::routes::route` on the
//! path, and the `GET /v1/executions?...` filters on the query (decoded the
//! way workers-rs `Request::query` does, with serde_urlencoded).
//!
//! Input: line 1 the method, the rest the URL's path, optionally `?query`.
//!
//! Asserts, besides "no panic":
//! - a route is only ever answered for GET or POST; ids in a route parse as
//!   `InstanceId`s; event types and group names obey their alphabet and
//!   length;
//! - round trips built from the input: for the id `InstanceId::from_key`
//!   makes of it, every execution route names that id (with or without a
//!   trailing slash); for the input as a group name, its percent-encoding
//!   routes back to the same name, or is refused exactly when the name is
//!   empty, too long or holds a control character.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::engine::{Command, InstanceId};
use sluice::http::routes::{route, Route, RouteError};
use sluice::store::executions::ListFilter;
use sluice_fuzz::line;

/// Group names longer than this are refused (`http::routes`).
const GROUP_CHARS_MAX: usize = 512;
/// Event types are at most this long (`http::routes`).
const EVENT_TYPE_CHARS_MAX: usize = 100;

fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn check_route(method: &str, r: &Result<Route, RouteError>) {
    let Ok(route) = r else { return };
    assert!(
        matches!(method, "GET" | "POST"),
        "{method} routed to {route:?}"
    );
    let id = match route {
        Route::GetExecution(id) | Route::Command(id, _) | Route::Skip(id) => Some(id),
        Route::SendEvent(id, ty) => {
            assert!(!ty.is_empty() && ty.len() <= EVENT_TYPE_CHARS_MAX);
            assert!(ty
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)));
            Some(id)
        }
        Route::ExplainGroup(g) | Route::SkipAll(g) => {
            assert!(!g.is_empty() && g.len() <= GROUP_CHARS_MAX);
            assert!(!g.chars().any(char::is_control), "{g:?}");
            None
        }
        _ => None,
    };
    if let Some(id) = id {
        assert!(InstanceId::parse(id.as_str()).is_ok(), "{id}");
    }
}

fuzz_target!(|data: &[u8]| {
    let (method_raw, url_raw) = line(data);
    let method = String::from_utf8_lossy(method_raw);
    let url = String::from_utf8_lossy(url_raw);
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));

    let r = route(&method, path);
    check_route(&method, &r);
    for m in ["GET", "POST", "DELETE"] {
        check_route(m, &route(m, path));
    }
    let _ = serde_urlencoded::from_str::<ListFilter>(query);

    // Round trip: an id made from the input routes back to itself.
    let id = InstanceId::from_key(&url);
    for tail in ["", "/"] {
        assert_eq!(
            route("GET", &format!("/v1/executions/{id}{tail}")),
            Ok(Route::GetExecution(id.clone()))
        );
    }
    for (verb, cmd) in [
        ("terminate", Command::Terminate),
        ("pause", Command::Pause),
        ("resume", Command::Resume),
        ("restart", Command::Restart { from_step: None }),
    ] {
        assert_eq!(
            route("POST", &format!("/v1/executions/{id}/{verb}")),
            Ok(Route::Command(id.clone(), cmd))
        );
    }
    assert_eq!(
        route("POST", &format!("/v1/executions/{id}/skip")),
        Ok(Route::Skip(id.clone()))
    );
    assert_eq!(
        route(
            "POST",
            &format!("/v1/executions/{id}/events/deploy-confirm")
        ),
        Ok(Route::SendEvent(id.clone(), "deploy-confirm".into()))
    );

    // Round trip: the input as a group name, percent-encoded into its segment.
    let group: &str = &url;
    let encoded = percent_encode(group);
    let valid =
        !group.is_empty() && group.len() <= GROUP_CHARS_MAX && !group.chars().any(char::is_control);
    let explained = route("GET", &format!("/v1/groups/{encoded}"));
    let skipped = route("POST", &format!("/v1/groups/{encoded}/skip-all"));
    if valid {
        assert_eq!(explained, Ok(Route::ExplainGroup(group.to_owned())));
        assert_eq!(skipped, Ok(Route::SkipAll(group.to_owned())));
    } else if group.is_empty() {
        // `/v1/groups/` is the list of groups; `/v1/groups//skip-all` has an
        // empty segment, which is no name.
        assert_eq!(explained, Ok(Route::ListGroups));
        assert!(matches!(skipped, Err(RouteError::BadId(_))), "{skipped:?}");
    } else {
        assert!(
            matches!(explained, Err(RouteError::BadId(_))),
            "{explained:?}"
        );
        assert!(matches!(skipped, Err(RouteError::BadId(_))), "{skipped:?}");
    }
});
