//! The dashboard and the lists over real SQLite with the real migrations,
//! and who may call them (`http::auth`): the credential decision, dashboard
//! sessions, sign-in, the confirmation step of actions, the lists' strict
//! queries and cursors that reach every row, and pages filled from the
//! index that escape what GitHub sent.

mod common;

use std::cell::RefCell;

use async_trait::async_trait;
use common::{block_on, World, T0};
use serde_json::{json, Value};
use sluice::engine::{Command, CreateRequest, InstanceId};
use sluice::http::access::{Jwk, JwksCache, JwksFetch, Rs256Verify};
use sluice::http::auth::{
    self, AccessKeys, AuthConfig, Presented, Principal, SESSION_COOKIE, SESSION_TTL_S,
};
use sluice::http::dashboard::{self, Operations, OperatorEvent};
use sluice::http::lists;
use sluice::http::pages::Action;
use sluice::http::routes::{ActionTarget, Page};
use sluice::http::ApiError;

const TOKEN: &str = "admin-token-0123456789";
const NOW_S: i64 = T0 / 1_000;

/// Access is not configured in these tests: fetching or verifying a key
/// would be a bug.
struct NoAccess;

#[async_trait(?Send)]
impl JwksFetch for NoAccess {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        panic!("fetched {url} without Access configured")
    }
}

#[async_trait(?Send)]
impl Rs256Verify for NoAccess {
    async fn verify(&self, _: &Jwk, _: &[u8], _: &[u8]) -> Result<bool, String> {
        panic!("verified a key without Access configured")
    }
}

fn authenticate(p: Presented<'_>, cfg: &AuthConfig) -> Result<Principal, ApiError> {
    let cache = JwksCache::new();
    let keys = AccessKeys {
        cache: &cache,
        fetch: &NoAccess,
        verifier: &NoAccess,
    };
    block_on(auth::authenticate(&p, cfg, &keys, NOW_S))
}

fn token_only() -> AuthConfig {
    AuthConfig {
        admin_token: Some(TOKEN.into()),
        access: None,
    }
}

#[test]
fn the_bearer_token_or_a_session_passes_and_nothing_else_does() {
    let cfg = token_only();
    let bearer = format!("Bearer {TOKEN}");
    let ok = authenticate(
        Presented {
            authorization: Some(&bearer),
            ..Presented::default()
        },
        &cfg,
    );
    assert_eq!(ok.unwrap(), Principal::Token);
    assert!(!Principal::Token.must_be_same_origin());

    let wrong = "Bearer admin-token-0123456788";
    let session = auth::make_session(TOKEN, NOW_S).unwrap();
    let cookie = format!("theme=dark; {SESSION_COOKIE}={session}");
    // A wrong bearer is refused even with a valid session beside it.
    let r = authenticate(
        Presented {
            authorization: Some(wrong),
            cookie: Some(&cookie),
            ..Presented::default()
        },
        &cfg,
    );
    assert_eq!(r.unwrap_err().status, 401);
    let r = authenticate(
        Presented {
            cookie: Some(&cookie),
            ..Presented::default()
        },
        &cfg,
    );
    assert_eq!(r.unwrap(), Principal::Session);
    assert!(Principal::Session.must_be_same_origin());
    // Over https only the `__Host-` cookie counts: a plain one (what a
    // sibling subdomain could plant) is not a session.
    let r = authenticate(
        Presented {
            cookie: Some(&cookie),
            https: true,
            ..Presented::default()
        },
        &cfg,
    );
    assert_eq!(r.unwrap_err().status, 401);
    let host = format!("{}={session}", auth::SESSION_COOKIE_HTTPS);
    let r = authenticate(
        Presented {
            cookie: Some(&host),
            https: true,
            ..Presented::default()
        },
        &cfg,
    );
    assert_eq!(r.unwrap(), Principal::Session);
    let r = authenticate(Presented::default(), &cfg);
    assert_eq!(r.unwrap_err().status, 401);
    // An Access header without Access configured is not a credential.
    let r = authenticate(
        Presented {
            access_jwt: Some("eyJhbGciOiJSUzI1NiJ9.e30.sig"),
            ..Presented::default()
        },
        &cfg,
    );
    assert_eq!(r.unwrap_err().status, 401);
}

#[test]
fn with_nothing_configured_or_access_half_configured_the_api_is_disabled() {
    let r = authenticate(Presented::default(), &AuthConfig::default());
    let e = r.unwrap_err();
    assert_eq!((e.status, e.code), (503, "not_configured"));
    let half = AuthConfig {
        admin_token: Some(TOKEN.into()),
        access: AuthConfig::access_from(Some("team.cloudflareaccess.com"), None),
    };
    let r = authenticate(Presented::default(), &half);
    let e = r.unwrap_err();
    assert_eq!(e.status, 503);
    assert!(e.message.contains("together"), "{}", e.message);
}

#[test]
fn sessions_expire_are_bound_to_the_token_and_cannot_be_forged() {
    let s = auth::make_session(TOKEN, NOW_S).unwrap();
    assert!(auth::session_valid(&s, TOKEN, NOW_S));
    assert!(auth::session_valid(&s, TOKEN, NOW_S + SESSION_TTL_S - 1));
    assert!(
        !auth::session_valid(&s, TOKEN, NOW_S + SESSION_TTL_S),
        "expired"
    );
    assert!(
        !auth::session_valid(&s, "another-token", NOW_S),
        "a rotated token ends sessions"
    );
    // A later expiry with the old tag, a tag of zeros, and odd shapes.
    let (_, tag) = s.rsplit_once('.').unwrap();
    let later = format!("v1.{}.{tag}", NOW_S + SESSION_TTL_S + 60);
    assert!(!auth::session_valid(&later, TOKEN, NOW_S));
    let far = auth::make_session(TOKEN, NOW_S + 10 * SESSION_TTL_S).unwrap();
    assert!(
        !auth::session_valid(&far, TOKEN, NOW_S),
        "never longer than one TTL"
    );
    for bad in [
        "",
        "v1",
        "v1..",
        "v2.1.00",
        "v1.x.00",
        "v1.1.zz",
        &s[..s.len() - 2],
    ] {
        assert!(!auth::session_valid(bad, TOKEN, NOW_S), "{bad:?}");
    }
    let cookie = auth::session_cookie(&s, true);
    for attr in ["HttpOnly", "SameSite=Strict", "Secure", "Path=/"] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    assert!(
        cookie.starts_with("__Host-sluice_session="),
        "over https a sibling subdomain cannot toss one: {cookie}"
    );
    assert!(!cookie.contains("Domain"), "{cookie}");
    let plain = auth::session_cookie(&s, false);
    assert!(!plain.contains("Secure") && plain.starts_with("sluice_session="));
    assert!(auth::session_cookie_cleared(true).starts_with("__Host-sluice_session=;"));
    assert_eq!(
        auth::cookie_value(&format!("a=1; {SESSION_COOKIE}=v; b=2"), SESSION_COOKIE),
        Some("v")
    );
    assert_eq!(
        auth::cookie_value("xsluice_session=v", SESSION_COOKIE),
        None
    );
}

#[test]
fn sign_in_sets_a_session_only_for_the_token_and_never_redirects_off_the_dashboard() {
    let ok = dashboard::login(
        &format!("token={TOKEN}&next=%2Fui%2Fgroups"),
        Some(TOKEN),
        true,
        T0,
    );
    assert_eq!(ok.status, 303);
    assert!(ok.headers.contains(&("Location", "/ui/groups".to_owned())));
    let cookie = &ok
        .headers
        .iter()
        .find(|(k, _)| *k == "Set-Cookie")
        .unwrap()
        .1;
    let value = auth::cookie_value(
        cookie.split(';').next().unwrap(),
        auth::session_cookie_name(true),
    )
    .unwrap();
    assert!(auth::session_valid(value, TOKEN, NOW_S));
    assert!(!cookie.contains(TOKEN), "the cookie is not the token");

    let wrong = dashboard::login("token=nope", Some(TOKEN), true, T0);
    assert_eq!(wrong.status, 401);
    assert!(wrong.headers.iter().all(|(k, _)| *k != "Set-Cookie"));
    let unset = dashboard::login(&format!("token={TOKEN}"), None, true, T0);
    assert_eq!(unset.status, 503);

    for next in [
        "//evil.example/ui",
        "https://evil.example",
        "/ui\\@evil",
        "/elsewhere",
        "/ui x",
    ] {
        assert_eq!(
            auth::next_after_login(Some(next)),
            "/ui/executions",
            "{next}"
        );
    }
    assert_eq!(
        auth::next_after_login(Some("/ui/groups?repo=a")),
        "/ui/groups?repo=a"
    );
}

/// Records what the dashboard asked for.
#[derive(Default)]
struct FakeOps {
    calls: RefCell<Vec<String>>,
    refuse: Option<u16>,
}

impl FakeOps {
    fn answer(&self, call: String, value: Value) -> Result<Value, ApiError> {
        self.calls.borrow_mut().push(call);
        match self.refuse {
            Some(status) => Err(ApiError::new(
                status,
                "conflict",
                "the instance is finished",
            )),
            None => Ok(value),
        }
    }
}

#[async_trait(?Send)]
impl Operations for FakeOps {
    async fn command(&self, id: &InstanceId, cmd: Command) -> Result<Value, ApiError> {
        self.answer(format!("{cmd:?} {id}"), json!({ "status": "terminated" }))
    }
    async fn deliver_event(&self, e: &OperatorEvent) -> Result<Value, ApiError> {
        let (id, ty, payload) = (e.id(), e.event_type(), e.payload());
        self.answer(
            format!("event {ty} {payload} {id}"),
            json!({ "accepted": true }),
        )
    }
    async fn skip(&self, id: &InstanceId) -> Result<Value, ApiError> {
        self.answer(format!("skip {id}"), json!({ "skipped": id.as_str() }))
    }
    async fn skip_all(&self, group: &str) -> Result<Value, ApiError> {
        self.answer(format!("skip_all {group}"), json!({ "skipped": [] }))
    }
    async fn teardown_preview(&self, repo: &str, pr: u64) -> Result<Value, ApiError> {
        self.answer(
            format!("teardown {repo} {pr}"),
            json!({ "id": "preview-teardown-x", "created": true }),
        )
    }
}

#[test]
fn an_action_asks_first_then_acts_once_and_shows_its_result() {
    let ops = FakeOps::default();
    let id = InstanceId::parse("deploy-a-1").unwrap();
    let target = ActionTarget::Execution(id.clone());
    let ask = block_on(dashboard::act(
        &ops,
        &target,
        Action::Terminate,
        "confirmed=",
        T0,
    ))
    .unwrap();
    assert_eq!(ask.status, 200);
    assert!(
        ask.html.contains("name=\"confirmed\" value=\"1\""),
        "{}",
        ask.html
    );
    assert!(
        ops.calls.borrow().is_empty(),
        "nothing is done before confirmation"
    );

    let done = block_on(dashboard::act(
        &ops,
        &target,
        Action::Terminate,
        "confirmed=1",
        T0,
    ))
    .unwrap();
    assert_eq!(done.status, 200);
    assert!(done.html.contains("Now terminated."), "{}", done.html);
    assert_eq!(*ops.calls.borrow(), vec!["Terminate deploy-a-1".to_owned()]);

    let group = ActionTarget::Group("deploy:o/r:main".into());
    block_on(dashboard::act(
        &ops,
        &group,
        Action::SkipAll,
        "confirmed=1",
        T0,
    ))
    .unwrap();
    assert_eq!(
        ops.calls.borrow().last().unwrap(),
        "skip_all deploy:o/r:main"
    );
}

/// A GitHub-only event (a release's decision, a check-run button's press)
/// sent from the dashboard's form is refused as the API refuses it, before
/// any operation is asked: nobody decides in a decider's name.
#[test]
fn the_dashboard_refuses_github_only_events_as_the_api_does() {
    let ops = FakeOps::default();
    let id = InstanceId::parse("release-notes-a-1").unwrap();
    let target = ActionTarget::Execution(id.clone());
    for ty in ["release-decision", "check-run-action"] {
        let form = format!(
            "confirmed=1&type={ty}&payload=%7B%22kind%22%3A%22button%22%2C%22sender%22%3A%22ana%22%7D"
        );
        let reply = block_on(dashboard::act(&ops, &target, Action::SendEvent, &form, T0)).unwrap();
        assert_eq!(reply.status, 403, "{ty}: {}", reply.html);
        assert!(reply.html.contains("GitHub"), "{}", reply.html);
        let api = block_on(ops.event(&id, ty, &json!({"kind": "button"}))).unwrap_err();
        assert_eq!((api.status, api.code), (403, "github_only"), "{ty}");
    }
    assert!(
        ops.calls.borrow().is_empty(),
        "nothing was delivered: {:?}",
        ops.calls.borrow()
    );
    let confirm = block_on(dashboard::act(
        &ops,
        &target,
        Action::SendEvent,
        "confirmed=1&type=deploy-confirm",
        T0,
    ))
    .unwrap();
    assert_eq!(confirm.status, 200, "{}", confirm.html);
    assert_eq!(
        *ops.calls.borrow(),
        vec!["event deploy-confirm {} release-notes-a-1".to_owned()]
    );
}

#[test]
fn a_refused_action_shows_why_and_a_server_error_is_left_to_the_caller() {
    let id = InstanceId::parse("deploy-a-1").unwrap();
    let target = ActionTarget::Execution(id);
    let refusing = FakeOps {
        refuse: Some(409),
        ..FakeOps::default()
    };
    let refused = block_on(dashboard::act(
        &refusing,
        &target,
        Action::Skip,
        "confirmed=1",
        T0,
    ))
    .unwrap();
    assert_eq!(refused.status, 409);
    assert!(refused.html.contains("the instance is finished"));
    let failing = FakeOps {
        refuse: Some(500),
        ..FakeOps::default()
    };
    let e = block_on(dashboard::act(
        &failing,
        &target,
        Action::Skip,
        "confirmed=1",
        T0,
    ))
    .unwrap_err();
    assert_eq!(
        e.status, 500,
        "a server error is the caller's to log and answer"
    );
}

fn create(w: &World, key: &str, repo: &str, entity: &str) -> String {
    let req = CreateRequest {
        indexed: false,
        key: key.into(),
        run: "probe".into(),
        input: json!({}),
        repo: Some(repo.into()),
        entity: Some(entity.into()),
        sha: Some("0123456789abcdef0123456789abcdef01234567".into()),
        max_steps: None,
        max_duration_ms: None,
    };
    w.create_indexed(req)
}

#[test]
fn the_lists_refuse_what_they_do_not_take() {
    let w = World::new();
    let db = w.index.as_ref();
    for (query, needle) in [
        ("colour=red", "unknown query parameter"),
        ("status=exploded", "status"),
        ("since=yesterday", "since"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("cursor=not-a-cursor", "cursor"),
    ] {
        let e = block_on(lists::executions(db, query)).unwrap_err();
        assert_eq!(e.status, 400, "{query}");
        assert!(e.message.contains(needle), "{query}: {}", e.message);
    }
    assert_eq!(
        block_on(lists::deliveries(db, "run=x")).unwrap_err().status,
        400
    );
    assert_eq!(
        block_on(lists::groups(db, "status=x", T0))
            .unwrap_err()
            .status,
        400
    );
    let id = InstanceId::parse("nope").unwrap();
    assert_eq!(
        block_on(lists::execution(db, &id, "")).unwrap_err().status,
        404
    );
}

/// More executions than one page holds: following `next_cursor` reaches
/// every one exactly once; a filter narrows every page.
#[test]
fn cursors_reach_every_execution_and_filters_hold_across_pages() {
    let first = World::new();
    let rows = 7;
    let mut ids = Vec::new();
    for i in 0..rows {
        let w = World::with_index(first.index.clone());
        w.clock.set(T0 + i);
        let repo = if i % 2 == 0 { "octo/even" } else { "octo/odd" };
        ids.push(create(&w, &format!("k{i}"), repo, "pr:1"));
    }
    let db = first.index.as_ref();
    let mut seen = Vec::new();
    let mut query = "limit=3".to_owned();
    for _ in 0..rows {
        let page = block_on(lists::executions(db, &query)).unwrap();
        for e in page["executions"].as_array().unwrap() {
            seen.push(e["id"].as_str().unwrap().to_owned());
        }
        match page["next_cursor"].as_str() {
            Some(c) => query = format!("limit=3&cursor={c}"),
            None => break,
        }
    }
    let mut expected = ids.clone();
    expected.reverse();
    assert_eq!(seen, expected, "newest first, each once");
    let even = block_on(lists::executions(db, "repo=octo/even&limit=2")).unwrap();
    let cursor = even["next_cursor"].as_str().unwrap().to_owned();
    let rest = block_on(lists::executions(
        db,
        &format!("repo=octo/even&limit=2&cursor={cursor}"),
    ))
    .unwrap();
    let all: Vec<&Value> = even["executions"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["executions"].as_array().unwrap())
        .collect();
    assert_eq!(all.len(), 4);
    assert!(all.iter().all(|e| e["repo"] == "octo/even"));
}

/// A page filled from the index: what a branch name holds is text.
#[test]
fn pages_from_the_index_escape_what_github_sent() {
    let w = World::new();
    let hostile = "branch:<script>alert(1)</script>\"><img src=x onerror=alert(2)>";
    let id = create(&w, "xss", "octo/<b>hello</b>", hostile);
    let db = w.index.as_ref();
    let list = block_on(dashboard::page(db, &Page::Executions, "", T0)).unwrap();
    let exec_id = InstanceId::parse(&id).unwrap();
    let one = block_on(dashboard::page(db, &Page::Execution(exec_id), "", T0)).unwrap();
    for html in [&list, &one] {
        assert!(html.contains(&id), "the page shows the execution");
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<b>hello"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
    }
    let filtered = block_on(dashboard::page(
        db,
        &Page::Executions,
        "repo=octo%2F%3Cb%3Ehello%3C%2Fb%3E",
        T0,
    ))
    .unwrap();
    assert!(filtered.contains(&id), "the filter finds it");
    let other = block_on(dashboard::page(
        db,
        &Page::Executions,
        "repo=octo%2Fother",
        T0,
    ))
    .unwrap();
    assert!(
        !other.contains(&id),
        "and another repository's filter does not"
    );
    let done = block_on(dashboard::page(
        db,
        &Page::Executions,
        "status=complete",
        T0,
    ))
    .unwrap();
    assert!(!done.contains(&id), "a queued execution is not complete");
}

/// The last finished round of a command step links its log; other steps
/// and unfinished rounds do not.
#[test]
fn the_finished_command_round_links_its_log() {
    use sluice::store::{Database, Param, Stmt};
    let w = World::new();
    let id = create(&w, "logs", "octo/hello", "pr:3");
    let db = w.index.as_ref();
    let rows = [
        (0_i64, "read config", "done"),
        (1, "run check command", "done"),
        (2, "command still running", "done"),
        (3, "run check command#2", "done"),
        (4, "run deploy command", "waiting"),
    ];
    for (seq, name, state) in rows {
        let kind = if name.starts_with("command still") {
            "sleep"
        } else {
            "step"
        };
        block_on(db.run(Stmt::new(
            "INSERT INTO execution_steps (execution_id, seq, name, kind, state, attempts, started_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, 1, ?6)",
            vec![
                Param::from(id.as_str()),
                Param::from(seq),
                Param::from(name),
                Param::from(kind),
                Param::from(state),
                Param::from(T0),
            ],
        )))
        .unwrap();
    }
    let exec_id = InstanceId::parse(&id).unwrap();
    let html = block_on(dashboard::page(db, &Page::Execution(exec_id), "", T0)).unwrap();
    let link = format!("href=\"/ui/executions/{id}/log/run%20check%20command\"");
    assert_eq!(html.matches(&link).count(), 1, "{html}");
    let row = html
        .split("<tr")
        .find(|r| r.contains(&link))
        .expect("a row with the link");
    assert!(
        row.contains("run check command#2"),
        "on the last finished round's row: {row}"
    );
    assert!(
        !html.contains("/log/run%20deploy%20command"),
        "an unfinished command has no log yet"
    );
}

/// Issue 24: a live preview's Tear down asks first, then asks the
/// operations once; its route names the preview as `owner/repo:<n>` in one
/// segment, and anything else is no preview.
#[test]
fn a_preview_is_torn_down_from_the_dashboard_after_it_asks() {
    use sluice::http::routes::{route, Route};
    let ops = FakeOps::default();
    let target = ActionTarget::preview("acme/web:7").unwrap();
    let ask = block_on(dashboard::act(
        &ops,
        &target,
        Action::Teardown,
        "confirmed=",
        T0,
    ))
    .unwrap();
    assert!(ask.html.contains("Tear down acme/web:7?"), "{}", ask.html);
    assert!(ops.calls.borrow().is_empty(), "nothing before confirmation");
    let done = block_on(dashboard::act(
        &ops,
        &target,
        Action::Teardown,
        "confirmed=1",
        T0,
    ))
    .unwrap();
    assert_eq!(done.status, 200);
    assert!(
        done.html.contains("Its teardown is started"),
        "{}",
        done.html
    );
    assert_eq!(*ops.calls.borrow(), vec!["teardown acme/web 7".to_owned()]);

    let routed = route("POST", "/ui/previews/acme%2Fweb%3A7/teardown").unwrap();
    assert_eq!(routed, Route::PageAction(target, Action::Teardown));
    for bad in ["acme%2Fweb", "acme%2Fweb%3A0", "web%3A7", "acme%2Fweb%3Ax"] {
        assert!(
            route("POST", &format!("/ui/previews/{bad}/teardown")).is_err(),
            "{bad}"
        );
    }
    assert!(route("GET", "/ui/previews/acme%2Fweb%3A7/teardown").is_err());
}
