//! Action-mode dispatch (`POST /v1/dispatch`), natively: the signature and
//! its window, the request's checks, the replay record on real SQLite, the
//! plan through the fake GitHub, and an imperative deploy through the real
//! gate and runs.

mod common;

use common::fakes::*;
use common::{block_on, T0};
use serde_json::json;
use sluice::engine::Status;
use sluice::http::dispatch::{self, sign, DispatchRequest, DISPATCH_WINDOW_MS};
use sluice::runs::inputs::{CheckInput, DeployInput};
use sluice::secret::Secret;
use sluice::store::dispatch as used;
use sluice::store::sqlite::SqliteDb;

const SECRET: &str = "dispatch-test-secret-of-32-chars-or-more";
const SECRET_REPO: &str = "octo/hello";

fn secret() -> Secret {
    Secret::new(SECRET.to_owned())
}

/// The repository's key: what its workflows sign with.
fn key() -> String {
    dispatch::repository_key(&secret(), SECRET_REPO)
}

fn verify_as(
    secret: Option<&Secret>,
    repo: &str,
    ts: Option<&str>,
    signature: &str,
    body: &[u8],
) -> Result<String, (u16, &'static str)> {
    dispatch::verify(secret, repo, ts, Some(signature), body, T0).map_err(|e| (e.status, e.code))
}

fn verify_at(ts_s: i64, signature: &str, body: &[u8]) -> Result<String, (u16, &'static str)> {
    verify_as(
        Some(&secret()),
        SECRET_REPO,
        Some(&ts_s.to_string()),
        signature,
        body,
    )
}

#[test]
fn a_signature_is_good_only_for_its_body_and_five_minutes() {
    let body = br#"{"run":"check","repo":"octo/hello","branch":"main"}"#;
    let now_s = T0 / 1000;
    let k = key();
    let good = sign(k.as_bytes(), now_s, body);
    assert!(verify_at(now_s, &good, body).is_ok());
    let upper = good.to_uppercase().replace("SHA256=", "sha256=");
    assert!(verify_at(now_s, &upper, body).is_ok());
    // Within the window either way (clock skew), then not.
    let window_s = DISPATCH_WINDOW_MS / 1000;
    let old = sign(k.as_bytes(), now_s - window_s + 1, body);
    assert!(verify_at(now_s - window_s + 1, &old, body).is_ok());
    for off in [-window_s - 1, window_s + 1] {
        let at = sign(k.as_bytes(), now_s + off, body);
        assert_eq!(
            verify_at(now_s + off, &at, body),
            Err((401, "stale_signature"))
        );
    }
    // The timestamp and the body are signed.
    assert_eq!(
        verify_at(now_s + 1, &good, body),
        Err((401, "bad_signature"))
    );
    let other = br#"{"run":"deploy","repo":"octo/hello"}"#;
    assert_eq!(verify_at(now_s, &good, other), Err((401, "bad_signature")));
    assert_eq!(
        verify_at(now_s, "sha1=abc", body),
        Err((401, "bad_signature"))
    );
    let wrong_key = sign(b"another secret", now_s, body);
    assert_eq!(
        verify_at(now_s, &wrong_key, body),
        Err((401, "bad_signature"))
    );
    // The operator's secret itself is no repository's key, and another
    // repository's key signs for that repository only.
    let raw = sign(SECRET.as_bytes(), now_s, body);
    assert_eq!(verify_at(now_s, &raw, body), Err((401, "bad_signature")));
    let other_key = dispatch::repository_key(&secret(), "octo/other");
    let other_repo = sign(other_key.as_bytes(), now_s, body);
    assert_eq!(
        verify_at(now_s, &other_repo, body),
        Err((401, "bad_signature"))
    );
    let ts = now_s.to_string();
    let any_case = verify_as(Some(&secret()), "OCTO/Hello", Some(&ts), &good, body);
    assert!(
        any_case.is_ok(),
        "the key is the repository's whatever its spelling"
    );
    let unsigned = verify_as(Some(&secret()), SECRET_REPO, None, &good, body);
    assert_eq!(unsigned, Err((401, "unsigned")));
    let bad_ts = verify_as(Some(&secret()), SECRET_REPO, Some("noon"), &good, body);
    assert_eq!(bad_ts, Err((401, "bad_timestamp")));
    assert_eq!(
        verify_as(None, SECRET_REPO, Some(&ts), &good, body),
        Err((503, "not_configured"))
    );
    let short = Secret::new("short".to_owned());
    let weak = verify_as(Some(&short), SECRET_REPO, Some(&ts), &good, body);
    assert_eq!(
        weak,
        Err((503, "not_configured")),
        "a guessable secret is refused"
    );
}

fn refusal(body: serde_json::Value) -> (u16, &'static str, String) {
    let e = dispatch::parse(body.to_string().as_bytes()).unwrap_err();
    (e.status, e.code, e.message)
}

#[test]
fn bad_requests_get_4xx_errors_that_say_what_is_wrong() {
    assert_eq!(dispatch::parse(b"{not json").unwrap_err().status, 400);
    let (status, code, _) = refusal(json!({"run": "release", "repo": "octo/hello"}));
    assert_eq!((status, code), (422, "unknown_run"));
    let (status, code, _) = refusal(json!({"run": "probe", "repo": "octo/hello"}));
    assert_eq!(
        (status, code),
        (422, "unknown_run"),
        "test runs are not dispatchable"
    );
    for (body, says) in [
        (json!({"run": "deploy", "repo": "octo"}), "owner/name"),
        (json!({"run": "deploy", "repo": "octo/../x"}), "owner/name"),
        (
            json!({"run": "deploy", "repo": "octo/hello", "sha": "abc"}),
            "40 hex",
        ),
        (
            json!({"run": "deploy", "repo": "octo/hello", "sha": "0".repeat(40)}),
            "40 hex",
        ),
        (
            json!({"run": "deploy", "repo": "octo/hello", "branch": "a..b"}),
            "branch name",
        ),
        (
            json!({"run": "check", "repo": "octo/hello", "branch": "main", "pull_request": 3}),
            "pull_request",
        ),
        (
            json!({"run": "deploy", "repo": "octo/hello", "inputs": {"lower": "x"}}),
            "input name",
        ),
        (
            json!({"run": "deploy", "repo": "octo/hello", "inputs": {"X": "y".repeat(1025)}}),
            "1024 bytes",
        ),
        (
            json!({"run": "deploy", "repo": "octo/hello", "clone_url": "https://evil/x.git"}),
            "clone_url",
        ),
        (
            json!({"run": "deploy", "repo": "octo/hello", "inputs": {"X": 1}}),
            "string",
        ),
    ] {
        let (status, code, message) = refusal(body.clone());
        assert_eq!((status, code), (422, "wrong_input"), "{body}");
        assert!(message.contains(says), "{body}: {message}");
    }
    let many: serde_json::Map<String, serde_json::Value> =
        (0..21).map(|i| (format!("K{i}"), json!("v"))).collect();
    let (_, _, message) = refusal(json!({"run": "deploy", "repo": "octo/hello", "inputs": many}));
    assert!(message.contains("at most 20"), "{message}");
}

#[test]
fn an_input_carrying_a_configured_secret_is_refused() {
    let req: DispatchRequest = dispatch::parse(
        json!({"run": "deploy", "repo": "octo/hello", "inputs": {"TARGET": "eu", "NOTE": "key=cf-token-123456"}})
            .to_string()
            .as_bytes(),
    )
    .expect("valid");
    let e = dispatch::refuse_secret_values(&req, &[Secret::new("cf-token-123456".to_owned())])
        .unwrap_err();
    assert_eq!(e.status, 422);
    assert!(
        e.message.contains("NOTE") && !e.message.contains("cf-token"),
        "{}",
        e.message
    );
    // Encoded, it is still the secret.
    let encoded: DispatchRequest = dispatch::parse(
        json!({"run": "deploy", "repo": "octo/hello", "inputs": {"B64": "Y2YtdG9rZW4tMTIzNDU2"}})
            .to_string()
            .as_bytes(),
    )
    .expect("valid");
    let cf = [Secret::new("cf-token-123456".to_owned())];
    assert!(dispatch::refuse_secret_values(&encoded, &cf).is_err());
    // Short values are settings, not secrets: "eu" does not refuse TARGET.
    assert!(dispatch::refuse_secret_values(&req, &[Secret::new("eu".to_owned())]).is_ok());
}

#[test]
fn a_used_signature_is_remembered_past_the_window_then_forgotten() {
    let db = SqliteDb::with_migrations().expect("migrations apply");
    block_on(async {
        assert!(!used::was_used(&db, "abc").await.unwrap());
        used::remember(&db, "abc", "deploy-x", T0).await.unwrap();
        used::remember(&db, "abc", "deploy-x", T0).await.unwrap();
        assert!(used::was_used(&db, "abc").await.unwrap());
        // A timestamp up to the window ahead stays good a window later.
        assert_eq!(
            used::purge_signatures(&db, T0 + DISPATCH_WINDOW_MS + 1)
                .await
                .unwrap(),
            0
        );
        assert!(used::was_used(&db, "abc").await.unwrap());
        assert_eq!(
            used::purge_signatures(&db, T0 + 2 * DISPATCH_WINDOW_MS + 1)
                .await
                .unwrap(),
            1
        );
        assert!(!used::was_used(&db, "abc").await.unwrap());
    });
}

fn planned(
    rig: &Rig,
    body: serde_json::Value,
    signature: &str,
) -> Result<sluice::engine::CreateRequest, (u16, &'static str)> {
    let req = dispatch::parse(body.to_string().as_bytes()).expect("valid");
    let registry = rig.registry();
    let proof = dispatch::Proof {
        signature_hex: signature,
        token: None,
    };
    let env = &registry.env;
    block_on(dispatch::plan(&env.github, env.environments, &req, &proof)).map_err(|e| {
        eprintln!("refused: {} {}: {}", e.status, e.code, e.message);
        (e.status, e.code)
    })
}

#[test]
fn a_dispatch_plans_its_run_through_github_named_by_its_signature() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &b);
    let sig = "0123456789abcdef0123456789abcdef";

    // A deploy without a sha deploys the default branch's head, as a push;
    // the repository is named as GitHub spells it, whatever the request's.
    let asked = json!({"run": "deploy", "repo": REPO.to_uppercase()});
    let head = planned(&rig, asked, sig).expect("planned");
    let input: DeployInput = serde_json::from_value(head.input.clone()).unwrap();
    assert_eq!(
        (input.sha.as_str(), input.branch.as_str(), input.imperative),
        (b.as_str(), BRANCH, false)
    );
    assert_eq!(
        (input.repo.as_str(), head.repo.as_deref()),
        (REPO, Some(REPO))
    );
    assert_eq!(head.key, format!("deploy:{REPO}:dispatch-0123456789abcdef"));

    // A sha that is not on the branch (another branch, a fork's pull
    // request) is refused: it would deploy, or check without approval,
    // code nobody merged.
    let elsewhere = planned(&rig, json!({"run": "deploy", "repo": REPO, "sha": a}), sig);
    assert_eq!(elsewhere, Err((422, "wrong_input")));
    let unmerged = planned(&rig, json!({"run": "check", "repo": REPO, "sha": a}), sig);
    assert_eq!(unmerged, Err((422, "wrong_input")));
    rig.github.set_on_branch(REPO, BRANCH, &a);

    // An explicit revision is imperative and carries its inputs.
    let rollback = planned(
        &rig,
        json!({"run": "deploy", "repo": REPO, "sha": a, "inputs": {"REASON": "rollback"}}),
        sig,
    )
    .expect("planned");
    let input: DeployInput = serde_json::from_value(rollback.input.clone()).unwrap();
    assert!(input.imperative);
    assert_eq!(input.sha, a);
    assert_eq!(
        input.inputs.get("REASON").map(String::as_str),
        Some("rollback")
    );
    let other_sig = planned(
        &rig,
        json!({"run": "deploy", "repo": REPO}),
        "fedcba9876543210",
    );
    assert_ne!(
        other_sig.unwrap().id(),
        head.id(),
        "another request is another instance"
    );

    // A check of a branch reports on no pull request.
    let check = planned(
        &rig,
        json!({"run": "check", "repo": REPO, "branch": BRANCH}),
        sig,
    )
    .expect("planned");
    let input: CheckInput = serde_json::from_value(check.input.clone()).unwrap();
    assert_eq!((input.sha.as_str(), input.pr_number), (b.as_str(), None));
    assert_eq!(check.entity.as_deref(), Some("branch:main"));

    // What GitHub does not know is a 4xx, not a run.
    assert_eq!(
        planned(&rig, json!({"run": "deploy", "repo": "octo/unknown"}), sig),
        Err((404, "not_found"))
    );
    let gone = planned(
        &rig,
        json!({"run": "check", "repo": REPO, "branch": "gone"}),
        sig,
    );
    assert_eq!(gone, Err((422, "wrong_input")));
}

/// The queue-policy seed: an imperative deployment is neither skipped by
/// the policy nor skips others, but waits for the group like any deploy.
#[test]
fn a_dispatched_rollback_waits_for_the_group_and_deploys_its_old_revision() {
    let (a, b, c) = (sha('a'), sha('b'), sha('c'));
    let rig = deploy_rig(&[&a, &b, &c], DEPLOY_TOML);
    rig.sandbox.hold(&b);
    rig.github.set_head(REPO, BRANCH, &b);
    let db_ = rig.deploy(&b);
    let mut b_pass = rig.start_pass(&db_);
    rig.holds_in_flight(&mut b_pass);

    // Roll back to A while B deploys: A waits.
    rig.github.set_on_branch(REPO, BRANCH, &a);
    let rollback = planned(
        &rig,
        json!({"run": "deploy", "repo": REPO, "sha": a}),
        "feedfacefeedface",
    )
    .expect("planned");
    let ra = rig.create(rollback);
    assert_eq!(
        rig.pass(&ra).status,
        Status::Waiting,
        "it waits for the group"
    );
    assert!(rig.sandbox.starts_in(&ra.id).is_empty(), "never beside B");

    // C is pushed behind it: the policy does not let C supersede the rollback.
    rig.github.set_head(REPO, BRANCH, &c);
    let dc = rig.deploy(&c);
    assert_eq!(rig.pass(&dc).status, Status::Waiting);
    assert_eq!(
        rig.queue_state(&ra),
        "waiting",
        "not superseded by a newer push"
    );

    rig.sandbox.release(&b);
    assert_eq!(block_on(b_pass).status, Status::Complete);
    block_on(rig.drive(&ra, 0));
    assert_eq!(rig.row(&ra).status, "complete", "{:?}", rig.row(&ra));
    assert_eq!(
        rig.sandbox.runs_in(&ra.id).len(),
        1,
        "A deployed although the head is C"
    );
    assert!(!rig.step_names(&ra).contains(&"re-read head".to_owned()));
    block_on(rig.drive(&dc, 0));
    assert_eq!(
        rig.row(&dc).status,
        "complete",
        "C deploys after the rollback"
    );
}
