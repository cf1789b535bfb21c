//! Cloudflare Access tokens: `sluice::http::access::verify` on any
//! `Cf-Access-Jwt-Assertion` header, with the team's JWKS fetched through
//! `parse_jwks` and the `JwksCache`, over a fake RS256 verifier
//! (`sluice_fuzz::FakeVerifier`; the real one is WebCrypto, wasm only).
//!
//! Input: line 1 the header (`<none>`: absent); the rest the JWKS body the
//! fake fetch returns. An empty rest means the cache starts with the fixed
//! key (`sluice_fuzz::access_key`) and every fetch fails. A token whose
//! signature part is `SIGN` gets the signature the fake verifier accepts
//! for the key its `kid` names, so mutated tokens reach the claims.
//!
//! Asserts, besides "no panic":
//! - nothing passes unless the verifier was asked and said yes, the token
//!   is three parts with an RS256 header naming a known `kid` and no
//!   `crit`, and its payload has this team's issuer, this application's
//!   audience, an `exp` not past and no `nbf`/`iat` in the future (60 s
//!   leeway each); the identity's fields are the payload's, never empty;
//! - a refusal is 401, or 503 only when the keys or the verifier failed;
//! - a correctly signed token is never refused for its signature;
//! - the answer is deterministic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sluice::http::access::{AccessConfig, AccessError, CLOCK_LEEWAY_S, TOKEN_CHARS_MAX};
use sluice_fuzz::{
    access_fill_signature, access_keys, access_verify, jwt_json, line, ACCESS_AUD, ACCESS_NOW_S,
    ACCESS_TEAM,
};

/// The first line that stands for "no header".
const ABSENT: &str = "<none>";

/// A NumericDate as RFC 7519 allows it (any JSON number), in whole
/// seconds: fractions truncated, out-of-range values saturated.
fn numeric_date(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.is_finite()).map(|f| f as i64))
}

fuzz_target!(|data: &[u8]| {
    let (token_raw, rest) = line(data);
    let token_text = String::from_utf8_lossy(token_raw);
    let jwks = (!rest.is_empty()).then_some(rest);
    let keys = access_keys(jwks);
    let mut signed = false;
    let token: Option<String> =
        (token_text != ABSENT).then(|| match access_fill_signature(&token_text, &keys) {
            Some(t) => {
                signed = true;
                t
            }
            None => token_text.clone().into_owned(),
        });

    let out = access_verify(token.as_deref(), jwks);
    let again = access_verify(token.as_deref(), jwks);
    assert_eq!(out.result, again.result, "verify is deterministic");

    match &out.result {
        Err(e) => {
            match e.status() {
                401 => {}
                503 => assert!(matches!(
                    e,
                    AccessError::KeysUnavailable | AccessError::VerifierFailed
                )),
                s => panic!("{e:?} answered {s}"),
            }
            if signed {
                assert_ne!(e, &AccessError::BadSignature, "a signed token was refused");
            }
            if token.is_none() {
                assert_eq!(e, &AccessError::Missing);
            }
        }
        Ok(identity) => {
            assert!(
                out.asked && out.said_yes,
                "passed without a verified signature"
            );
            let t = token.as_deref().expect("passed without a header").trim();
            assert!(!t.is_empty() && t.len() <= TOKEN_CHARS_MAX);
            let parts: Vec<&str> = t.split('.').collect();
            let [h, p, _] = parts.as_slice() else {
                panic!("passed a token of {} parts", parts.len())
            };
            let header = jwt_json(h).expect("passed an undecodable header");
            assert_eq!(header.get("alg").and_then(Value::as_str), Some("RS256"));
            assert!(header.get("crit").is_none());
            let kid = header.get("kid").and_then(Value::as_str).unwrap_or("");
            assert!(!kid.is_empty());
            assert!(keys.iter().any(|k| k.kid == kid), "passed an unknown kid");

            let cfg = AccessConfig::new(ACCESS_TEAM, ACCESS_AUD).expect("valid");
            let claims = jwt_json(p).expect("passed an undecodable payload");
            assert_eq!(
                claims.get("iss").and_then(Value::as_str),
                Some(cfg.issuer().as_str())
            );
            let aud_ok = match claims.get("aud") {
                Some(Value::String(a)) => a == ACCESS_AUD,
                Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(ACCESS_AUD)),
                _ => false,
            };
            assert!(aud_ok, "passed another application's token");
            assert_eq!(
                claims.get("exp").and_then(numeric_date),
                Some(identity.exp_s)
            );
            assert!(
                ACCESS_NOW_S - CLOCK_LEEWAY_S < identity.exp_s,
                "passed an expired token"
            );
            for claim in ["nbf", "iat"] {
                if let Some(t) = claims.get(claim).and_then(numeric_date) {
                    assert!(t <= ACCESS_NOW_S + CLOCK_LEEWAY_S, "{claim} {t}");
                }
            }
            for (field, value) in [
                ("email", &identity.email),
                ("sub", &identity.sub),
                ("common_name", &identity.common_name),
            ] {
                let claimed = claims
                    .get(field)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty());
                assert_eq!(value.as_deref(), claimed, "{field}");
            }
        }
    }
});
