//! `GET /v1/setup`'s judgement (`http::setup`): every gap named, nothing
//! missing once configured, and the tables it expects are the ones the
//! migrations create.

use sluice::http::setup::{missing_tables, report, Findings, REQUIRED_TABLES};
use sluice::store::sqlite::SqliteDb;
use sluice::store::Database;

fn configured() -> Findings {
    Findings {
        webhook_secret: true,
        webhook_secret_previous: false,
        app_id: Some("1234".into()),
        key: Ok(()),
        api: Ok("sluice".into()),
        app_slug: Some("sluice".into()),
        tables: Ok(REQUIRED_TABLES.iter().map(|t| (*t).to_owned()).collect()),
        r2: Ok(()),
        sandbox_backend: "agent".into(),
        sandbox: Ok("answered".into()),
        dispatch_secret: false,
        dispatch_oidc: Ok("tokens of https://token.actions.githubusercontent.com".into()),
        log_link_secret: true,
        public_url: Some("https://sluice.example.com".into()),
        environments_error: None,
    }
}

#[test]
fn the_migrations_create_every_table_setup_expects() {
    let db = SqliteDb::with_migrations().expect("migrations apply");
    let rows = futures::executor::block_on(db.all(sluice::stmt!(
        "SELECT name FROM sqlite_master WHERE type = 'table'"
    )))
    .expect("tables");
    let present: Vec<String> = rows
        .iter()
        .filter_map(|r| r.get("name").and_then(|v| v.as_str()).map(str::to_owned))
        .collect();
    assert_eq!(missing_tables(&present), Vec::<&str>::new());
}

#[test]
fn a_configured_worker_is_ok_and_optional_settings_do_not_fail_it() {
    let r = report(&configured());
    assert_eq!(r["ok"], true, "{r:#}");
    assert_eq!(r["missing"], serde_json::json!([]));
    let dispatch = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "dispatch_secret")
        .unwrap();
    assert_eq!(
        (dispatch["ok"].as_bool(), dispatch["required"].as_bool()),
        (Some(false), Some(false))
    );
}

#[test]
fn every_gap_is_named_with_what_to_do() {
    let mut f = configured();
    f.webhook_secret = false;
    f.key = Err("GITHUB_APP_PRIVATE_KEY does not parse: bad PEM".into());
    f.api = Err("not tried without a private key".into());
    f.tables = Ok(vec!["executions".into()]);
    f.r2 = Err("the R2 binding LOGS is not configured".into());
    f.sandbox = Err("the agent at http://127.0.0.1:8791 did not answer".into());
    let r = report(&f);
    assert_eq!(r["ok"], false);
    assert_eq!(
        r["missing"],
        serde_json::json!([
            "webhook_secret",
            "private_key",
            "github_api",
            "d1",
            "r2",
            "sandbox"
        ])
    );
    let d1 = r["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "d1")
        .unwrap();
    let detail = d1["detail"].as_str().unwrap();
    assert!(
        detail.contains("dispatch_signatures") && detail.contains("migrations apply"),
        "{detail}"
    );
}

/// GitHub's OIDC keys matter once dispatch is on: without them no
/// dispatch reaches an environment that restricts branches.
#[test]
fn the_oidc_keys_are_required_once_dispatch_is_on() {
    let mut f = configured();
    f.dispatch_oidc =
        Err("the OIDC keys at https://x/.well-known/jwks could not be fetched".into());
    let r = report(&f);
    assert_eq!(r["ok"], true, "dispatch is off: {r:#}");
    f.dispatch_secret = true;
    let r = report(&f);
    assert_eq!(r["missing"], serde_json::json!(["dispatch_oidc"]));
    f.dispatch_oidc = Ok("3 keys".into());
    assert_eq!(report(&f)["ok"], true);
}

#[test]
fn a_slug_that_is_not_the_apps_is_a_gap() {
    let mut f = configured();
    f.app_slug = Some("other".into());
    let r = report(&f);
    assert_eq!(r["missing"], serde_json::json!(["github_api"]));
}

/// The manifest the README creates the App from asks for exactly what
/// Sluice uses: the permissions its tokens request and the events it acts on.
#[test]
fn the_app_manifest_asks_for_exactly_what_sluice_uses() {
    use sluice::github::client::{API_PERMISSIONS, CHECKOUT_PERMISSIONS};
    use sluice::github::deployments::DEPLOYMENTS_PERMISSIONS;
    use sluice::github::releases::RELEASE_PERMISSIONS;
    use sluice::github::webhook::{parse, EVENTS_ACTED_ON};
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/github-app-manifest.json"
    ))
    .expect("github-app-manifest.json");
    let manifest: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    // Each permission at the highest level any token asks for it (a
    // checkout's contents:read is within the release token's write).
    let mut used: std::collections::BTreeMap<String, String> = Default::default();
    for (k, v) in API_PERMISSIONS
        .iter()
        .chain(CHECKOUT_PERMISSIONS)
        .chain(DEPLOYMENTS_PERMISSIONS)
        .chain(RELEASE_PERMISSIONS)
    {
        let level = used
            .entry((*k).to_owned())
            .or_insert_with(|| (*v).to_owned());
        if *v == "write" {
            *level = "write".to_owned();
        }
    }
    // Every App has metadata:read; the manifest names it as GitHub shows it.
    used.insert("metadata".into(), "read".into());
    let asked: std::collections::BTreeMap<String, String> =
        serde_json::from_value(manifest["default_permissions"].clone()).expect("permissions");
    assert_eq!(asked, used);
    let events: Vec<String> =
        serde_json::from_value(manifest["default_events"].clone()).expect("events");
    assert_eq!(events, EVENTS_ACTED_ON);
    for e in EVENTS_ACTED_ON {
        // Each is decoded as itself, not as an event Sluice ignores.
        let parsed = parse(e, b"{}");
        assert!(
            !matches!(parsed, Ok(sluice::github::webhook::Event::Other(_))),
            "{e}"
        );
    }
    assert!(manifest["hook_attributes"]["url"]
        .as_str()
        .unwrap()
        .ends_with("/webhooks/github"));
}
