//! What the fuzz targets share: how an input is framed, and the checks that
//! more than one target makes on what Sluice decided.
//!
//! Inputs are framed as text where they can be, so a seed file in
//! `fuzz/corpus/<target>/` reads like the request it stands for.

use serde_json::Value;
use sluice::engine::{CreateRequest, InstanceId};
use sluice::runs::inputs::{CheckInput, DeployInput};

/// The webhook secret a `webhook_intake` input uses unless it names its own
/// (`X-Fuzz-Secret:`). Only ever a fuzzing value: no deployment has it.
pub const FUZZ_SECRET: &str = "fuzz-only-webhook-secret";

/// The App the seeds' deliveries go to (their check runs name id 77).
pub const APP_ID: &str = "77";
/// Its slug: events from `sluice[bot]` are Sluice's own and start nothing.
pub const APP_SLUG: &str = "sluice";

/// Intake's configuration for a target: the secret under test, the App above.
pub fn intake_config(secret: Option<&str>, not_before_ms: i64) -> sluice::http::webhook::IntakeConfig<'_> {
    sluice::http::webhook::IntakeConfig {
        secret,
        previous_secret: None,
        not_before_ms,
        app_id: Some(APP_ID),
        app_slug: Some(APP_SLUG),
    }
}

/// Planning's context for a delivery to the App above.
pub fn plan_context() -> sluice::runs::triggers::PlanContext<'static> {
    sluice::runs::triggers::PlanContext {
        app_id: Some(APP_ID),
        app_slug: Some(APP_SLUG),
    }
}

/// Characters of the sha in an instance key (`runs::triggers`).
pub const KEY_SHA_CHARS: usize = 12;

/// Splits at the first `\n`: the line and what follows it (without the
/// newline). No newline: everything is the line.
pub fn line(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

/// A webhook request as a seed file writes it: header lines `Name: value`,
/// a blank line, then the body's raw bytes.
#[derive(Debug, Default)]
pub struct HttpInput {
    pub event: Option<String>,
    pub delivery: Option<String>,
    pub signature: Option<String>,
    pub content_type: Option<String>,
    pub content_length: Option<String>,
    /// `X-Fuzz-Secret`: the Worker's `GITHUB_WEBHOOK_SECRET` for this input.
    pub secret: Option<String>,
    pub body: Vec<u8>,
}

/// `X-Hub-Signature-256: sign` in a seed means "the right signature of this
/// body under this input's secret", so mutations of a signed body stay
/// signed and reach decoding and the plan.
pub const SIGN_PLACEHOLDER: &str = "sign";

impl HttpInput {
    pub fn parse(data: &[u8]) -> HttpInput {
        let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
            Some(i) => (&data[..i], &data[i + 2..]),
            None => (data, &[][..]),
        };
        let mut input = HttpInput {
            secret: Some(FUZZ_SECRET.to_owned()),
            body: body.to_vec(),
            ..HttpInput::default()
        };
        // Header values are strings in the Worker (the runtime decodes them);
        // HTTP strips optional whitespace around a value.
        for raw in String::from_utf8_lossy(head).split('\n') {
            let Some((name, value)) = raw.trim_end_matches('\r').split_once(':') else {
                continue;
            };
            let value = Some(value.trim().to_owned());
            match name.trim().to_ascii_lowercase().as_str() {
                "x-github-event" => input.event = value,
                "x-github-delivery" => input.delivery = value,
                "x-hub-signature-256" => input.signature = value,
                "content-type" => input.content_type = value,
                "content-length" => input.content_length = value,
                "x-fuzz-secret" => input.secret = value,
                _ => {}
            }
        }
        input
    }
}

/// JSON equality that allows what serde_json's default (not
/// `float_roundtrip`) float parsing may lose: a float read back from its own
/// printout may differ in the last bits. Everything else must be equal.
pub fn same_json(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if x == y {
                return true;
            }
            match (x.as_f64(), y.as_f64()) {
                (Some(p), Some(q)) => close_floats(p, q),
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_json(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kp, p), (kq, q))| kp == kq && same_json(p, q))
        }
        _ => a == b,
    }
}

/// Units in the last place two floats of the same sign may differ by after a
/// print-and-parse: serde_json documents its default parser as "best effort"
/// and is off by at most one; two leaves room for the printout's rounding.
const FLOAT_ULPS_MAX: u64 = 2;

fn close_floats(p: f64, q: f64) -> bool {
    if p == q {
        return true;
    }
    if !p.is_finite() || !q.is_finite() || p.is_sign_negative() != q.is_sign_negative() {
        return false;
    }
    p.to_bits().abs_diff(q.to_bits()) <= FLOAT_ULPS_MAX
}

/// A sha as the plan writes it: 40 lowercase hex digits.
pub fn is_lower_sha(s: &str) -> bool {
    s.len() == 40
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks one instance the trigger plan asked for: its name is a valid id,
/// its input is what its run will decode, its key is the documented
/// identity, and it survives the JSON trip to its Durable Object unchanged.
pub fn check_planned_create(c: &CreateRequest) {
    let id = c.id();
    assert!(
        InstanceId::parse(id.as_str()).is_ok(),
        "planned id {id} must parse"
    );
    if c.run == "cancel-checks" {
        // Ends checks; about no commit.
        let input: sluice::runs::inputs::CancelChecksInput =
            serde_json::from_value(c.input.clone()).expect("cancel input decodes");
        assert_eq!(c.sha, None);
        assert_eq!(c.repo.as_deref(), Some(input.repo.as_str()));
        assert_eq!(c.entity, Some(input.of.entity()));
        assert!(c.key.starts_with(&format!("cancel-checks:{}:", input.repo)), "{}", c.key);
        return;
    }
    let sha = c.sha.as_deref().expect("a planned create names its sha");
    assert!(is_lower_sha(sha), "planned sha {sha:?}");
    let sha_key = &sha[..KEY_SHA_CHARS];
    match c.run.as_str() {
        "check" if c.input.get("merge_group").is_some() => {
            // A merge queue group's check: keyed by its commit, entity its branch.
            let input: CheckInput =
                serde_json::from_value(c.input.clone()).expect("check input decodes");
            let branch = input.merge_group.as_deref().expect("a queue branch");
            assert_eq!(input.sha, sha);
            assert_eq!(input.pr_number, None);
            assert_eq!(c.key, format!("check:{}:{sha_key}", input.repo));
            assert_eq!(c.entity, Some(format!("branch:{branch}")));
        }
        "check" => {
            let input: CheckInput =
                serde_json::from_value(c.input.clone()).expect("check input decodes");
            assert_eq!(input.sha, sha);
            // A pull request's check names it (two pull requests at one
            // commit are two checks); a re-run is a new attempt: the key
            // gains `:rerun-<attempt>`.
            let pr = input.pr_number.expect("a webhook's check names its pull request");
            let key = format!("check:{}:{sha_key}:pr{pr}", input.repo);
            assert!(
                c.key == key || c.key.starts_with(&format!("{key}:rerun-")),
                "{} / {key}",
                c.key
            );
            assert_eq!(c.repo.as_deref(), Some(input.repo.as_str()));
            assert_eq!(c.entity, Some(format!("pr:{pr}")));
        }
        "deploy" => {
            let input: DeployInput =
                serde_json::from_value(c.input.clone()).expect("deploy input decodes");
            assert_eq!(input.sha, sha);
            assert!(sha.bytes().any(|b| b != b'0'), "the zero sha never deploys");
            let prefix = format!("deploy:{}:{}:{sha_key}:", input.repo, input.branch);
            assert!(c.key.starts_with(&prefix), "{} / {prefix}", c.key);
            assert_eq!(c.repo.as_deref(), Some(input.repo.as_str()));
            assert_eq!(c.entity, Some(format!("branch:{}", input.branch)));
        }
        "schedules" => {
            let input: sluice::runs::inputs::SchedulesInput =
                serde_json::from_value(c.input.clone()).expect("schedules input decodes");
            assert_eq!(input.sha, sha);
            assert_eq!(c.repo.as_deref(), Some(input.repo.as_str()));
            assert_eq!(c.entity, Some(format!("branch:{}", input.default_branch)));
            assert!(c.key.starts_with(&format!("schedules:{}:{sha_key}:", input.repo)), "{}", c.key);
        }
        "release-notes" => {
            let input: sluice::runs::inputs::ReleaseInput =
                serde_json::from_value(c.input.clone()).expect("release input decodes");
            assert_eq!(input.sha, sha);
            assert_eq!(c.repo.as_deref(), Some(input.repo.as_str()));
            assert_eq!(c.entity, Some(format!("tag:{}", input.tag)));
            let key = format!("release-notes:{}:{}:{sha_key}", input.repo, input.tag);
            assert_eq!(c.key, key);
        }
        other => panic!("the plan created an unknown run {other:?}"),
    }
    assert_eq!(c.max_steps, None, "webhooks never set limits");
    assert_eq!(c.max_duration_ms, None, "webhooks never set limits");
    // The Worker sends it to the instance's object as JSON; planned inputs
    // hold only strings and integers, so the trip is exact.
    let text = serde_json::to_string(c).expect("a create serializes");
    let back: CreateRequest = serde_json::from_str(&text).expect("a create reads back");
    assert_eq!(&back, c);
}

/// The Access team and application an `access_jwt` input is checked
/// against, and the time it is checked at (s since epoch, 2025-11-30).
pub const ACCESS_TEAM: &str = "fuzz-team";
pub const ACCESS_AUD: &str = "fuzz-aud";
pub const ACCESS_NOW_S: i64 = 1_764_504_000;
/// The key id of the fixed key an `access_jwt` input's cache starts with
/// when the input brings no JWKS of its own.
pub const ACCESS_KID: &str = "fuzz-key-1";
/// Bytes of the fixed key's modulus (2048 bits) and the byte it repeats.
pub const ACCESS_MODULUS_BYTES: usize = 256;
pub const ACCESS_MODULUS_BYTE: u8 = 0xC3;
/// A token's signature part `SIGN` stands for the signature the fake
/// verifier accepts, so mutated tokens stay signed and reach the claims.
pub const ACCESS_SIGN_PLACEHOLDER: &str = "SIGN";

/// The fixed key: an RS256 signing key of the right size. Its modulus is no
/// real RSA modulus; the fake verifier never does RSA.
pub fn access_key() -> sluice::http::access::Jwk {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    sluice::http::access::Jwk {
        kid: ACCESS_KID.to_owned(),
        kty: "RSA".to_owned(),
        alg: Some("RS256".to_owned()),
        n: URL_SAFE_NO_PAD.encode([ACCESS_MODULUS_BYTE; ACCESS_MODULUS_BYTES]),
        e: "AQAB".to_owned(),
        key_use: Some("sig".to_owned()),
    }
}

/// The signature the fake verifier accepts for a signing input: its
/// SHA-256, repeated to the key's modulus length.
pub fn access_signature(signing_input: &[u8], len: usize) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(signing_input);
    digest.iter().copied().cycle().take(len).collect()
}

/// A fake JWKS fetch: the input's body, or a failure when it has none.
pub struct FakeFetch(pub Option<Vec<u8>>);

#[async_trait::async_trait(?Send)]
impl sluice::http::access::JwksFetch for FakeFetch {
    async fn fetch(&self, _url: &str) -> Result<Vec<u8>, String> {
        self.0.clone().ok_or_else(|| "fetch refused".to_owned())
    }
}

/// A fake RS256 verifier that accepts exactly `access_signature`, and
/// records whether it was asked and what it answered.
#[derive(Default)]
pub struct FakeVerifier {
    pub asked: std::cell::Cell<bool>,
    pub said_yes: std::cell::Cell<bool>,
}

#[async_trait::async_trait(?Send)]
impl sluice::http::access::Rs256Verify for FakeVerifier {
    async fn verify(
        &self,
        _jwk: &sluice::http::access::Jwk,
        input: &[u8],
        sig: &[u8],
    ) -> Result<bool, String> {
        let yes = sig == access_signature(input, sig.len()).as_slice();
        self.asked.set(true);
        self.said_yes.set(yes);
        Ok(yes)
    }
}

/// What one `verify` answered, and what the fake verifier saw.
#[derive(Debug)]
pub struct AccessOutcome {
    pub result: Result<sluice::http::access::AccessIdentity, sluice::http::access::AccessError>,
    pub asked: bool,
    pub said_yes: bool,
}

/// Verifies `token` for the fuzzing team at `ACCESS_NOW_S`: with a cache
/// that starts empty and fetches `jwks` when there is one, else a cache
/// holding the fixed key whose fetches fail.
pub fn access_verify(token: Option<&str>, jwks: Option<&[u8]>) -> AccessOutcome {
    use sluice::http::access::{verify, AccessConfig, JwksCache};
    let cfg = AccessConfig::new(ACCESS_TEAM, ACCESS_AUD).expect("the fuzzing team is valid");
    let cache = match jwks {
        Some(_) => JwksCache::new(),
        None => JwksCache::with_keys(vec![access_key()], ACCESS_NOW_S),
    };
    let fetch = FakeFetch(jwks.map(<[u8]>::to_vec));
    let verifier = FakeVerifier::default();
    let result =
        futures::executor::block_on(verify(token, &cfg, &cache, &fetch, &verifier, ACCESS_NOW_S));
    AccessOutcome {
        result,
        asked: verifier.asked.get(),
        said_yes: verifier.said_yes.get(),
    }
}

/// The keys an `access_jwt` input's cache will hold: its JWKS's usable
/// keys, or the fixed key.
pub fn access_keys(jwks: Option<&[u8]>) -> Vec<sluice::http::access::Jwk> {
    match jwks {
        Some(body) => sluice::http::access::parse_jwks(body).unwrap_or_default(),
        None => vec![access_key()],
    }
}

/// A base64url JSON part of a token, decoded.
pub fn jwt_json(part: &str) -> Option<Value> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
}

/// The token with its `SIGN` signature part replaced by the signature the
/// fake verifier accepts for the key its `kid` names (the fixed modulus
/// length when it names none); None when it has no placeholder.
pub fn access_fill_signature(token: &str, keys: &[sluice::http::access::Jwk]) -> Option<String> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    let t = token.trim();
    let parts: Vec<&str> = t.split('.').collect();
    let [h, p, s] = parts.as_slice() else {
        return None;
    };
    if *s != ACCESS_SIGN_PLACEHOLDER {
        return None;
    }
    let kid = jwt_json(h).and_then(|v| v.get("kid")?.as_str().map(str::to_owned));
    let len = kid
        .and_then(|kid| keys.iter().find(|k| k.kid == kid))
        .and_then(|k| k.modulus().ok())
        .map_or(ACCESS_MODULUS_BYTES, |n| n.len());
    let input = format!("{h}.{p}");
    let sig = URL_SAFE_NO_PAD.encode(access_signature(input.as_bytes(), len));
    Some(format!("{input}.{sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing() {
        assert_eq!(line(b"a\nb\nc"), (&b"a"[..], &b"b\nc"[..]));
        assert_eq!(line(b"abc"), (&b"abc"[..], &b""[..]));
        let h = HttpInput::parse(b"X-GitHub-Event: push\r\nX-Fuzz-Secret:\n\n{}");
        assert_eq!(h.event.as_deref(), Some("push"));
        assert_eq!(h.secret.as_deref(), Some(""));
        assert_eq!(h.body, b"{}");
    }

    #[test]
    fn floats_compare_loosely_and_nothing_else_does() {
        let a: Value = serde_json::from_str(r#"{"x":[1,2.5,"s"]}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"x":[1,2.5000000000000004,"s"]}"#).unwrap();
        let c: Value = serde_json::from_str(r#"{"x":[1,2.6,"s"]}"#).unwrap();
        assert!(same_json(&a, &b));
        assert!(!same_json(&a, &c));
    }
}
