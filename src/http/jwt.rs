//! RS256 JWTs checked against an issuer's published keys (a JWKS): the one
//! verifier behind Cloudflare Access (`http::access`) and GitHub Actions'
//! OIDC tokens (`http::oidc`). Each caller names its issuer, audience and
//! clock leeway and reads its own claims; what is shared lives here: the
//! token's shape and header, the key cache, the signature, and the
//! standard claims (`iss`, `aud`, `exp`, `nbf`, `iat`).
//!
//! Pure logic over two small interfaces: [`Rs256Verify`] (WebCrypto in the
//! Worker, a native crate in tests) and [`JwksFetch`] (the Worker's fetch).
//! Keys are cached in a [`JwksCache`], one per issuer. No clock: `now_s` is
//! an argument. No input panics: every part of a token is bounded and
//! checked.
//!
//! Order of checks: shape and header (`alg` must be RS256: `none` and HMAC
//! are refused before any key is looked up), the key by `kid`, the
//! signature, then the claims. Claims are read only from a token whose
//! signature holds.

use std::cell::RefCell;
use std::fmt;

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A fresh JWKS is trusted this long. Both issuers rotate over weeks and
/// keep a rotated-out key valid for days (Access: every 6 weeks, the old
/// key 7 days more), and an unknown `kid` refetches at once (below), so an
/// hour-old set is current for valid tokens while a revoked key is dropped
/// within the hour.
pub const JWKS_TTL_S: i64 = 3_600;
/// An unknown `kid` refetches the JWKS at most this often (per cache): a
/// newly rotated key is picked up at once, while a flood of tokens with
/// made-up key ids costs at most one fetch a minute.
pub const JWKS_REFETCH_MIN_INTERVAL_S: i64 = 60;
/// After a failed fetch, an expired set is still used (for the keys it
/// has) up to this long past its fetch: a keys outage does not lock every
/// caller out, and a day is far inside the days a rotated-out key stays
/// valid.
pub const JWKS_STALE_MAX_S: i64 = 24 * 3_600;
/// Access tokens are about 1 KiB, GitHub's OIDC tokens about 1-2 KiB; a
/// header value past this is not a token.
pub const TOKEN_CHARS_MAX: usize = 16 * 1024;
/// A JWKS holds a few keys, with certificate chains a few KiB; past this
/// it is not a key set.
pub const JWKS_BYTES_MAX: usize = 64 * 1024;
/// Keys kept from one JWKS: Access publishes two, GitHub a handful.
pub const JWKS_KEYS_MAX: usize = 16;
/// RSA moduli accepted: 2048 to 8192 bits (WebCrypto's and ring's range).
const MODULUS_BYTES_MIN: usize = 256;
const MODULUS_BYTES_MAX: usize = 1024;
/// Public exponents longer than 8 bytes are not used by anyone (65537 is).
const EXPONENT_BYTES_MAX: usize = 8;

/// Why a token was refused. Messages are stable and never echo input; the
/// caller says whose token it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtError {
    /// No token was presented.
    Missing,
    /// Not a JWT, or a part of it is not what the issuer issues.
    Malformed(&'static str),
    /// `alg` is not RS256 (`none`, `HS256`, ...).
    BadAlgorithm,
    /// No key of the issuer's JWKS has the token's `kid`.
    UnknownKey,
    BadSignature,
    Expired,
    NotYetValid,
    WrongAudience,
    WrongIssuer,
    /// The JWKS could not be fetched (and no cached key fits).
    KeysUnavailable,
    /// The verifier failed (not a verdict on the token).
    VerifierFailed,
}

impl JwtError {
    /// A stable tag for logs and the JSON error.
    pub fn tag(&self) -> &'static str {
        match self {
            JwtError::Missing => "missing",
            JwtError::Malformed(_) => "malformed",
            JwtError::BadAlgorithm => "bad_alg",
            JwtError::UnknownKey => "unknown_kid",
            JwtError::BadSignature => "bad_signature",
            JwtError::Expired => "expired",
            JwtError::NotYetValid => "not_yet_valid",
            JwtError::WrongAudience => "wrong_audience",
            JwtError::WrongIssuer => "wrong_issuer",
            JwtError::KeysUnavailable => "keys_unavailable",
            JwtError::VerifierFailed => "verifier_failed",
        }
    }

    /// 401 for a token that does not pass; 503 when Sluice could not
    /// check it (a retry may pass).
    pub fn status(&self) -> u16 {
        match self {
            JwtError::KeysUnavailable | JwtError::VerifierFailed => 503,
            _ => 401,
        }
    }
}

impl fmt::Display for JwtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = match self {
            JwtError::Missing => "no token",
            JwtError::Malformed(what) => return write!(f, "malformed token: {what}"),
            JwtError::BadAlgorithm => "the token's algorithm is not RS256",
            JwtError::UnknownKey => "the token's key id is not among the issuer's keys",
            JwtError::BadSignature => "the token's signature does not verify",
            JwtError::Expired => "the token has expired",
            JwtError::NotYetValid => "the token is not yet valid",
            JwtError::WrongAudience => "the token is for another audience",
            JwtError::WrongIssuer => "the token is from another issuer",
            JwtError::KeysUnavailable => "the issuer's keys could not be fetched",
            JwtError::VerifierFailed => "the token could not be checked",
        };
        f.write_str(m)
    }
}

/// One RSA key of the JWKS, as published (base64url `n` and `e`), so the
/// Worker can hand it to WebCrypto's `importKey("jwk", ...)` unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Jwk {
    pub kid: String,
    pub kty: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alg: Option<String>,
    pub n: String,
    pub e: String,
    /// `sig` for a signing key; a key published for encryption is skipped.
    #[serde(default, rename = "use", skip_serializing_if = "Option::is_none")]
    pub key_use: Option<String>,
}

impl Jwk {
    /// The modulus, big-endian.
    pub fn modulus(&self) -> Result<Vec<u8>, JwtError> {
        URL_SAFE_NO_PAD
            .decode(&self.n)
            .map_err(|_| JwtError::Malformed("key modulus"))
    }

    /// The public exponent, big-endian.
    pub fn exponent(&self) -> Result<Vec<u8>, JwtError> {
        URL_SAFE_NO_PAD
            .decode(&self.e)
            .map_err(|_| JwtError::Malformed("key exponent"))
    }

    /// An RSA signing key usable for RS256 with a sane size.
    fn usable(&self) -> bool {
        let n_len = self.modulus().map(|n| n.len()).unwrap_or(0);
        let e_len = self.exponent().map(|e| e.len()).unwrap_or(0);
        self.kty == "RSA"
            && self.alg.as_deref().is_none_or(|a| a == "RS256")
            && self.key_use.as_deref().is_none_or(|u| u == "sig")
            && !self.kid.is_empty()
            && (MODULUS_BYTES_MIN..=MODULUS_BYTES_MAX).contains(&n_len)
            && (1..=EXPONENT_BYTES_MAX).contains(&e_len)
    }
}

/// The usable RSA keys of a JWKS document (`{"keys": [...]}`); other keys
/// (EC, encryption, malformed) are skipped, at most `JWKS_KEYS_MAX` kept.
pub fn parse_jwks(body: &[u8]) -> Result<Vec<Jwk>, JwtError> {
    if body.len() > JWKS_BYTES_MAX {
        return Err(JwtError::Malformed("JWKS too large"));
    }
    #[derive(Deserialize)]
    struct Doc {
        keys: Vec<Value>,
    }
    let doc: Doc = serde_json::from_slice(body).map_err(|_| JwtError::Malformed("JWKS"))?;
    Ok(doc
        .keys
        .into_iter()
        .filter_map(|k| serde_json::from_value::<Jwk>(k).ok())
        .filter(Jwk::usable)
        .take(JWKS_KEYS_MAX)
        .collect())
}

/// Checks an RS256 signature (RSASSA-PKCS1-v1_5 with SHA-256). `Ok(false)`
/// is a signature that does not verify; `Err` is a failure to check.
#[async_trait(?Send)]
pub trait Rs256Verify {
    async fn verify(
        &self,
        jwk: &Jwk,
        signing_input: &[u8],
        signature: &[u8],
    ) -> Result<bool, String>;
}

/// Fetches the JWKS document's body from `url`.
#[async_trait(?Send)]
pub trait JwksFetch {
    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String>;
}

/// One issuer's keys with their fetch times. Interior mutability and no
/// borrow held across an await: one cache may serve concurrent requests of
/// an isolate (keep it in a `thread_local!` `Rc`). Concurrent requests
/// that find it empty or expired each fetch until the first fetch lands.
#[derive(Debug, Default)]
pub struct JwksCache {
    state: RefCell<CacheState>,
}

#[derive(Debug, Default, Clone)]
struct CacheState {
    keys: Vec<Jwk>,
    /// When `keys` were fetched (s); None: never.
    fetched_s: Option<i64>,
    /// When the last fetch started (s), whatever its outcome: no refetch
    /// for an unknown `kid` within `JWKS_REFETCH_MIN_INTERVAL_S` of it.
    attempted_s: Option<i64>,
    /// The last fetch failed: an expired cache waits out the interval too.
    failed: bool,
}

impl CacheState {
    fn key(&self, kid: &str) -> Option<Jwk> {
        self.keys.iter().find(|k| k.kid == kid).cloned()
    }

    fn age_below(&self, at: Option<i64>, now_s: i64, bound_s: i64) -> bool {
        at.is_some_and(|t| now_s.saturating_sub(t) < bound_s)
    }

    fn fresh(&self, now_s: i64) -> bool {
        self.age_below(self.fetched_s, now_s, JWKS_TTL_S)
    }

    /// A key of an expired set, while the set is young enough to use.
    fn stale_key(&self, kid: &str, now_s: i64) -> Option<Jwk> {
        self.age_below(self.fetched_s, now_s, JWKS_STALE_MAX_S)
            .then(|| self.key(kid))
            .flatten()
    }

    fn attempted_recently(&self, now_s: i64) -> bool {
        self.age_below(self.attempted_s, now_s, JWKS_REFETCH_MIN_INTERVAL_S)
    }
}

/// What a lookup decided before any fetch.
enum Plan {
    Found(Jwk),
    Fetch,
    Refuse(JwtError),
}

impl JwksCache {
    pub fn new() -> JwksCache {
        JwksCache::default()
    }

    /// A cache already holding `keys` fetched at `now_s` (tests, warm start).
    pub fn with_keys(keys: Vec<Jwk>, now_s: i64) -> JwksCache {
        let state = CacheState {
            keys,
            fetched_s: Some(now_s),
            attempted_s: None,
            failed: false,
        };
        JwksCache {
            state: RefCell::new(state),
        }
    }

    /// A fresh set answers from memory; an unknown `kid` refetches unless a
    /// fetch started within the interval; an expired set refetches unless
    /// the last fetch failed within the interval (then its keys serve while
    /// younger than `JWKS_STALE_MAX_S`).
    fn plan(&self, kid: &str, now_s: i64) -> Plan {
        let s = self.state.borrow();
        let recent = s.attempted_recently(now_s);
        if s.fresh(now_s) {
            return match s.key(kid) {
                Some(k) => Plan::Found(k),
                None if recent => Plan::Refuse(JwtError::UnknownKey),
                None => Plan::Fetch,
            };
        }
        if s.failed && recent {
            return match s.stale_key(kid, now_s) {
                Some(k) => Plan::Found(k),
                None => Plan::Refuse(JwtError::KeysUnavailable),
            };
        }
        Plan::Fetch
    }

    /// The key named `kid`: from the cache, or after one bounded fetch of
    /// the issuer's JWKS at `keys_url`.
    pub async fn key(
        &self,
        kid: &str,
        keys_url: &str,
        fetch: &dyn JwksFetch,
        now_s: i64,
    ) -> Result<Jwk, JwtError> {
        match self.plan(kid, now_s) {
            Plan::Found(k) => return Ok(k),
            Plan::Refuse(e) => return Err(e),
            Plan::Fetch => {}
        }
        self.state.borrow_mut().attempted_s = Some(now_s);
        let fetched = fetch.fetch(keys_url).await;
        let parsed = fetched.ok().and_then(|body| parse_jwks(&body).ok());
        let mut s = self.state.borrow_mut();
        match parsed {
            Some(keys) => {
                s.keys = keys;
                s.fetched_s = Some(now_s);
                s.failed = false;
                s.key(kid).ok_or(JwtError::UnknownKey)
            }
            None => {
                s.failed = true;
                s.stale_key(kid, now_s).ok_or(JwtError::KeysUnavailable)
            }
        }
    }

    /// How many keys are cached (for logs and tests).
    pub fn len(&self) -> usize {
        self.state.borrow().keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where an issuer's keys are and how to reach them: what a signature check
/// needs besides the token.
pub struct Keys<'a> {
    /// The issuer's JWKS URL.
    pub url: &'a str,
    pub cache: &'a JwksCache,
    pub fetch: &'a dyn JwksFetch,
    pub verifier: &'a dyn Rs256Verify,
}

/// The three parts of a compact JWS, decoded.
struct Parts<'a> {
    signing_input: &'a str,
    header: Vec<u8>,
    payload: Vec<u8>,
    signature: Vec<u8>,
}

fn split(token: &str) -> Result<Parts<'_>, JwtError> {
    if token.is_empty() || token.len() > TOKEN_CHARS_MAX {
        return Err(JwtError::Malformed("length"));
    }
    let mut it = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return Err(JwtError::Malformed("not three parts"));
    };
    let decode = |part: &str, what: &'static str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| JwtError::Malformed(what))
    };
    let signing_input = token
        .get(..h.len() + 1 + p.len())
        .ok_or(JwtError::Malformed("not three parts"))?;
    Ok(Parts {
        signing_input,
        header: decode(h, "header encoding")?,
        payload: decode(p, "payload encoding")?,
        signature: decode(s, "signature encoding")?,
    })
}

/// The header's `kid`, once `alg` is RS256 and nothing critical is asked.
fn header_kid(header: &[u8]) -> Result<String, JwtError> {
    let v: Value =
        serde_json::from_slice(header).map_err(|_| JwtError::Malformed("header JSON"))?;
    let obj = v.as_object().ok_or(JwtError::Malformed("header"))?;
    if obj.get("alg").and_then(Value::as_str) != Some("RS256") {
        return Err(JwtError::BadAlgorithm);
    }
    if obj.contains_key("crit") {
        return Err(JwtError::Malformed("crit header"));
    }
    match obj.get("kid").and_then(Value::as_str) {
        Some(kid) if !kid.is_empty() => Ok(kid.to_owned()),
        _ => Err(JwtError::Malformed("kid")),
    }
}

/// The claims of `token` once its RS256 signature holds under the issuer's
/// key named by its `kid`. Nothing of the payload is trusted before.
pub async fn signed_claims(
    token: &str,
    keys: &Keys<'_>,
    now_s: i64,
) -> Result<Map<String, Value>, JwtError> {
    let parts = split(token.trim())?;
    let kid = header_kid(&parts.header)?;
    let jwk = keys.cache.key(&kid, keys.url, keys.fetch, now_s).await?;
    let modulus_len = jwk.modulus().map(|n| n.len())?;
    if parts.signature.len() != modulus_len {
        return Err(JwtError::BadSignature);
    }
    let valid = keys
        .verifier
        .verify(&jwk, parts.signing_input.as_bytes(), &parts.signature)
        .await
        .map_err(|_| JwtError::VerifierFailed)?;
    if !valid {
        return Err(JwtError::BadSignature);
    }
    let v: Value =
        serde_json::from_slice(&parts.payload).map_err(|_| JwtError::Malformed("payload JSON"))?;
    match v {
        Value::Object(claims) => Ok(claims),
        _ => Err(JwtError::Malformed("payload")),
    }
}

/// What the standard claims must say.
pub struct Expected<'a> {
    pub issuer: &'a str,
    pub audience: &'a str,
    /// Clock skew tolerated on `exp`, `nbf` and `iat` (s).
    pub leeway_s: i64,
}

/// Issuer, audience (a string or a list holding it) and times of claims
/// whose signature held: `exp` is required, `nbf` and `iat` bound the start
/// when present. The token's `exp` when all pass.
pub fn check_standard(
    claims: &Map<String, Value>,
    expected: &Expected<'_>,
    now_s: i64,
) -> Result<i64, JwtError> {
    if claims.get("iss").and_then(Value::as_str) != Some(expected.issuer) {
        return Err(JwtError::WrongIssuer);
    }
    let aud_ok = match claims.get("aud") {
        Some(Value::String(a)) => a == expected.audience,
        Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(expected.audience)),
        _ => false,
    };
    if !aud_ok {
        return Err(JwtError::WrongAudience);
    }
    let exp = seconds(claims.get("exp"), "exp")?.ok_or(JwtError::Malformed("exp"))?;
    if now_s.saturating_sub(expected.leeway_s) >= exp {
        return Err(JwtError::Expired);
    }
    let not_before = [
        seconds(claims.get("nbf"), "nbf")?,
        seconds(claims.get("iat"), "iat")?,
    ];
    if not_before
        .into_iter()
        .flatten()
        .any(|t| t > now_s.saturating_add(expected.leeway_s))
    {
        return Err(JwtError::NotYetValid);
    }
    Ok(exp)
}

/// A claim's text when it is a non-empty string.
pub fn text_claim(claims: &Map<String, Value>, name: &str) -> Option<String> {
    claims
        .get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// A NumericDate claim: absent is None; a number (integer or not, any
/// size, saturated to `i64`) is Some; anything else is malformed.
fn seconds(v: Option<&Value>, what: &'static str) -> Result<Option<i64>, JwtError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            // `as` saturates: 1e300 is i64::MAX, -1e300 i64::MIN.
            (None, Some(f)) if f.is_finite() => Ok(Some(f as i64)),
            _ => Err(JwtError::Malformed(what)),
        },
        Some(_) => Err(JwtError::Malformed(what)),
    }
}

/// Whether `url` is a plain `http` URL on this machine's loopback: the
/// only place a test may point the Worker's trust (an issuer, its keys) at
/// instead of the real one. Parsed, not matched by prefix:
/// `http://127.0.0.1:@evil.example/` names evil.example (the rest is a
/// user name).
pub fn is_loopback_http(url: &str) -> bool {
    let parsed = url::Url::parse(url).is_ok_and(|u| {
        let host = matches!(
            u.host(),
            Some(url::Host::Domain("localhost"))
                | Some(url::Host::Ipv4(std::net::Ipv4Addr::LOCALHOST))
                | Some(url::Host::Ipv6(std::net::Ipv6Addr::LOCALHOST))
        );
        u.scheme() == "http" && host && u.username().is_empty() && u.password().is_none()
    });
    parsed && url.len() <= LOOPBACK_URL_CHARS_MAX && !url.chars().any(char::is_whitespace)
}

/// A loopback test URL is a host, a port and a short path.
const LOOPBACK_URL_CHARS_MAX: usize = 1024;
