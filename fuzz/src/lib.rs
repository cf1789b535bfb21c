//! What the fuzz targets share: how an input is framed, and the checks that
//! more than one target makes on what Sluice decided.
//!
//! Inputs are framed as text where they can be, so a seed file in
//! `fuzz/corpus/<target>/` reads like the request it stands for.

use serde_json::Value;
use sluice::engine::{CreateRequest, InstanceId};
use sluice::runs::triggers::{CheckInput, DeployInput};

/// The webhook secret a `webhook_intake` input uses unless it names its own
/// (`X-Fuzz-Secret:`). Only ever a fuzzing value: no deployment has it.
pub const FUZZ_SECRET: &str = "fuzz-only-webhook-secret";

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
    let sha = c.sha.as_deref().expect("a planned create names its sha");
    assert!(is_lower_sha(sha), "planned sha {sha:?}");
    let sha_key = &sha[..KEY_SHA_CHARS];
    match c.run.as_str() {
        "check" => {
            let input: CheckInput =
                serde_json::from_value(c.input.clone()).expect("check input decodes");
            assert_eq!(input.sha, sha);
            assert_eq!(c.key, format!("check:{}:{sha_key}", input.repo));
            assert_eq!(c.repo.as_deref(), Some(input.repo.as_str()));
            assert_eq!(c.entity, Some(format!("pr:{}", input.pr_number)));
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
