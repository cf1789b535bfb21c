//! The seed corpus reaches what it is meant to: a signed pull request seed
//! is acted on, a draft is ignored, a bad signature is a 401, README's
//! `.sluice.toml` is valid, and so on. Without this a change of framing (or
//! of `FUZZ_SECRET`) could leave every seed stopped at the first check and
//! the fuzzer exploring only refusals. Plain native test, no fuzzing:
//! `cargo test --release --manifest-path fuzz/Cargo.toml` (scripts/fuzz.sh
//! runs it).

use std::path::PathBuf;

use sluice::engine::{Command, CreateRequest};
use sluice::github::webhook::{parse, sign, verify_signature, SignatureError};
use sluice::http::routes::route;
use sluice::http::webhook::{check_declared_length, intake, Intake, WebhookHeaders};
use sluice::runs::config::{self, ConfigState};
use sluice_fuzz::{line, HttpInput, SIGN_PLACEHOLDER};

fn seed(target: &str, name: &str) -> Vec<u8> {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "corpus", target, name]
        .iter()
        .collect();
    std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run fuzz/corpus/generate.mjs)", path.display()))
}

/// What intake answers for a `webhook_intake` seed: "act", "ignore" or the
/// error status.
fn intake_outcome(name: &str) -> String {
    let input = HttpInput::parse(&seed("webhook_intake", name));
    let signature = match input.signature.as_deref() {
        Some(SIGN_PLACEHOLDER) => Some(sign(
            input.secret.as_deref().unwrap_or("").as_bytes(),
            &input.body,
        )),
        other => other.map(str::to_owned),
    };
    let h = WebhookHeaders {
        event: input.event.as_deref(),
        delivery: input.delivery.as_deref(),
        signature: signature.as_deref(),
        content_type: input.content_type.as_deref(),
        content_length: input.content_length.as_deref(),
    };
    // 0: the seeds' timestamps are all accepted; staleness is the target's.
    match intake(&h, &input.body, &sluice_fuzz::intake_config(input.secret.as_deref(), 0)) {
        Ok(Intake::Act(_)) => "act".into(),
        Ok(Intake::Ignored { .. }) => "ignore".into(),
        Err(e) => e.status.to_string(),
    }
}

#[test]
fn webhook_seeds_reach_the_plan_or_the_refusal_they_stand_for() {
    for (name, want) in [
        ("pull_request-opened-full", "act"),
        ("pull_request-synchronize", "act"),
        ("pull_request-reopened", "act"),
        ("pull_request-ready_for_review", "act"),
        ("pull_request-opened-from-fork", "act"),
        // A closed pull request ends its live checks (`cancel-checks`).
        ("pull_request-closed", "act"),
        ("pull_request-opened-draft", "ignore"),
        ("pull_request-opened-by-bot", "act"),
        ("pull_request-opened-by-own-app", "ignore"),
        ("push-main-full", "act"),
        ("push-new-branch", "act"),
        ("push-branch-deleted", "ignore"),
        // A tag push plans its release-notes run (`runs::triggers::plan_tag`).
        ("push-tag", "act"),
        ("ping", "ignore"),
        ("check_run-rerequested", "act"),
        ("check_run-requested_action", "act"),
        ("check_suite-requested", "ignore"),
        ("check_suite-rerequested", "act"),
        // A merge queue's group gets its check; a destroyed one ends it.
        ("merge_group-checks_requested", "act"),
        ("merge_group-destroyed", "act"),
        ("signed-literally", "act"),
        ("signed-uppercase-hex", "act"),
        ("content-type-charset", "act"),
        ("own-secret", "ignore"),
        // Refused on its headers, before a byte of the body is read.
        ("declared-too-large", "413"),
        ("content-type-form", "415"),
        ("no-signature", "401"),
        ("wrong-signature", "401"),
        ("sha1-signature", "401"),
        ("no-secret-configured", "503"),
        ("no-event", "400"),
        ("not-json", "400"),
        ("array-body", "400"),
        ("wrong-shape", "422"),
    ] {
        assert_eq!(intake_outcome(name), want, "{name}");
    }
    let big = HttpInput::parse(&seed("webhook_intake", "declared-too-large"));
    assert!(check_declared_length(big.content_length.as_deref()).is_err());
}

#[test]
fn parse_seeds_decode() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus/webhook_parse");
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("corpus/webhook_parse") {
        let data = std::fs::read(entry.expect("entry").path()).expect("seed");
        let (event, body) = line(&data);
        let event = std::str::from_utf8(event).expect("event name");
        assert!(parse(event, body).is_ok(), "{event}");
        n += 1;
    }
    assert!(n >= 19, "{n} seeds");
}

#[test]
fn signature_seeds() {
    for (name, want) in [
        ("github-test-vector", Ok(())),
        ("uppercase-hex", Ok(())),
        ("whitespace", Ok(())),
        ("empty-secret", Ok(())),
        ("long-secret", Ok(())),
        ("absent", Err(SignatureError::Missing)),
        ("sha1", Err(SignatureError::Malformed)),
        ("odd-hex", Err(SignatureError::Malformed)),
    ] {
        let data = seed("webhook_signature", name);
        let (secret, rest) = line(&data);
        let (header, body) = line(rest);
        let header = std::str::from_utf8(header).expect("header");
        let header = (header != "<none>").then_some(header);
        assert_eq!(verify_signature(secret, body, header), want, "{name}");
    }
}

#[test]
fn config_seeds() {
    for (name, valid) in [
        ("readme-example", true),
        ("check", true),
        ("check-default-timeout", true),
        ("deploy-queue", true),
        ("deploy-lane", true),
        ("inline-tables", true),
        ("multiline-command", true),
        ("unknown-table", false),
        ("empty-command", false),
        ("timeout-too-long", false),
        ("not-toml", false),
        ("bad-environment-name", false),
        ("secrets-refused", false),
        ("bad-queue-duration", false),
    ] {
        let text = String::from_utf8(seed("sluice_toml", name)).expect("UTF-8");
        let state = config::parse(&text);
        assert_eq!(
            matches!(state, ConfigState::Valid { .. }),
            valid,
            "{name}: {state:?}"
        );
    }
}

#[test]
fn route_and_body_seeds() {
    for (name, routed) in [
        ("healthz", true),
        ("webhook", true),
        ("list-executions", true),
        ("get-execution", true),
        ("send-event", true),
        ("restart", true),
        ("skip", true),
        ("explain-group", true),
        ("skip-all", true),
        ("webhook-get", false),
        ("bad-percent", false),
        ("bad-id", false),
        ("unknown-verb", false),
        ("delete", false),
    ] {
        let data = seed("routes", name);
        let (method, url) = line(&data);
        let url = std::str::from_utf8(url).expect("url");
        let path = url.split('?').next().unwrap_or(url);
        let method = std::str::from_utf8(method).expect("method");
        assert_eq!(route(method, path).is_ok(), routed, "{name}");
    }
    let body = |name| String::from_utf8(seed("api_bodies", name)).expect("UTF-8");
    assert!(serde_json::from_str::<CreateRequest>(&body("create-check")).is_ok());
    assert!(serde_json::from_str::<CreateRequest>(&body("create-probe-limits")).is_ok());
    assert!(serde_json::from_str::<Vec<CreateRequest>>(&body("create-batch")).is_ok());
    assert_eq!(
        serde_json::from_str::<Command>(&body("command-restart-from")).ok(),
        Some(Command::Restart {
            from_step: Some("run deploy command".into())
        })
    );
}

#[test]
fn access_seeds() {
    use sluice::http::access::AccessError as E;
    use sluice_fuzz::{access_fill_signature, access_keys, access_verify};
    let outcome = |name: &str| {
        let data = seed("access_jwt", name);
        let (token, rest) = line(&data);
        let token = String::from_utf8(token.to_vec()).expect("UTF-8");
        let jwks = (!rest.is_empty()).then_some(rest);
        let token = access_fill_signature(&token, &access_keys(jwks)).unwrap_or(token);
        let token = (token != "<none>").then_some(token);
        access_verify(token.as_deref(), jwks).result
    };
    for name in [
        "person",
        "service-token",
        "aud-string",
        "fractional-times",
        "padded",
        "fetched-keys",
    ] {
        assert!(outcome(name).is_ok(), "{name}: {:?}", outcome(name));
    }
    assert_eq!(
        outcome("service-token").map(|i| (i.email, i.sub, i.common_name.is_some())),
        Ok((None, None, true))
    );
    for (name, want) in [
        ("expired", E::Expired),
        ("not-yet-valid", E::NotYetValid),
        ("wrong-audience", E::WrongAudience),
        ("wrong-issuer", E::WrongIssuer),
        ("alg-none", E::BadAlgorithm),
        ("alg-hs256", E::BadAlgorithm),
        ("crit", E::Malformed("crit header")),
        ("no-kid", E::Malformed("kid")),
        ("unknown-kid", E::KeysUnavailable),
        ("bad-signature", E::BadSignature),
        ("two-parts", E::Malformed("not three parts")),
        ("absent", E::Missing),
        ("fetched-keys-without-kid", E::UnknownKey),
        ("fetched-garbage", E::KeysUnavailable),
    ] {
        assert_eq!(outcome(name).err(), Some(want), "{name}");
    }
}

#[test]
fn dashboard_and_agent_seeds() {
    use sluice::http::pages::query::{same_origin_post, ActionForm, ExecutionsQuery};
    use sluice_sandbox_protocol::{CheckoutRequest, ProcessRequest, ProcessState};
    let text = |target, name| String::from_utf8(seed(target, name)).expect("UTF-8");
    let q = ExecutionsQuery::parse(&text("dashboard_forms", "list-filters"));
    assert_eq!(q.repo.as_deref(), Some("octo/hello"));
    assert!(q.since_ms.is_some() && q.until_ms.is_some() && q.cursor.is_some());
    let f = ActionForm::parse(&text("dashboard_forms", "restart-form"));
    assert!(f.confirmed);
    assert_eq!(f.from_step.as_deref(), Some("run deploy command"));
    let same = text("dashboard_forms", "same-origin");
    let (site, origin) = same.split_once('\n').expect("two lines");
    assert!(same_origin_post(
        Some(site),
        Some(origin),
        "https://sluice.example.com"
    ));
    assert!(same_origin_post(
        None,
        Some(origin),
        "https://sluice.example.com"
    ));

    let body = |name| seed("agent_protocol", name);
    assert!(serde_json::from_slice::<CheckoutRequest>(&body("checkout")).is_ok());
    assert!(serde_json::from_slice::<ProcessRequest>(&body("process")).is_ok());
    assert!(serde_json::from_slice::<ProcessState>(&body("process-state")).is_ok());
    assert!(serde_json::from_slice::<CheckoutRequest>(&body("unknown-field")).is_err());
}
