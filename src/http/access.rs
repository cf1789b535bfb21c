//! Cloudflare Access: verifies the `Cf-Access-Jwt-Assertion` header, an
//! RS256 JWT signed by the team's key (its JWKS at
//! `https://<team>.cloudflareaccess.com/cdn-cgi/access/certs`), for the
//! application's audience tag, issued by the team.
//!
//! Pure logic over two small interfaces: [`Rs256Verify`] (WebCrypto in the
//! Worker, a native crate in tests) and [`JwksFetch`] (the Worker's fetch).
//! Keys are cached in a [`JwksCache`]. No clock: `now_s` is an argument.
//! No input panics: every part of a token is bounded and checked.
//!
//! Order of checks: shape and header (`alg` must be RS256: `none` and
//! HMAC are refused before any key is looked up), the key by `kid`, the
//! signature, then issuer, audience and times. Claims are read only from a
//! token whose signature holds.

use std::cell::RefCell;
use std::fmt;

use async_trait::async_trait;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ApiError;

/// The request header Access sets on every request it lets through.
pub const ACCESS_JWT_HEADER: &str = "Cf-Access-Jwt-Assertion";

/// Clock skew tolerated on `exp`, `nbf` and `iat`: Access and the Worker
/// both keep NTP time, so a minute covers any real skew while adding
/// little to a token's life (Access sessions last 15 min to a month).
pub const CLOCK_LEEWAY_S: i64 = 60;
/// A fresh JWKS is trusted this long: Access rotates its signing key every
/// 6 weeks and keeps the previous one valid 7 days, so an hour-old set is
/// always current for valid tokens, and a manually revoked key is dropped
/// within the hour.
pub const JWKS_TTL_S: i64 = 3_600;
/// An unknown `kid` refetches the JWKS at most this often (per cache): a
/// newly rotated key is picked up at once, while a flood of tokens with
/// made-up key ids costs at most one fetch a minute.
pub const JWKS_REFETCH_MIN_INTERVAL_S: i64 = 60;
/// After a failed fetch, an expired set is still used (for the keys it
/// has) up to this long past its fetch: a certs outage does not lock every
/// operator out, and a day is far inside the 7 days a rotated-out key
/// stays valid.
pub const JWKS_STALE_MAX_S: i64 = 24 * 3_600;
/// Access tokens are about 1 KiB; a header value past this is not one.
pub const TOKEN_CHARS_MAX: usize = 16 * 1024;
/// The certs document holds two keys (current and previous) and their
/// PEMs, a few KiB; past this it is not the certs document.
pub const JWKS_BYTES_MAX: usize = 64 * 1024;
/// Keys kept from one JWKS: Access publishes two; more is not Access.
pub const JWKS_KEYS_MAX: usize = 16;
/// RSA moduli accepted: 2048 to 8192 bits (WebCrypto's and ring's range).
const MODULUS_BYTES_MIN: usize = 256;
const MODULUS_BYTES_MAX: usize = 1024;
/// Public exponents longer than 8 bytes are not used by anyone (65537 is).
const EXPONENT_BYTES_MAX: usize = 8;

/// Why a request was refused. Messages are stable and never echo input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessError {
    /// No `Cf-Access-Jwt-Assertion` header.
    Missing,
    /// Not a JWT, or a part of it is not what Access issues.
    Malformed(&'static str),
    /// `alg` is not RS256 (`none`, `HS256`, ...).
    BadAlgorithm,
    /// No key of the team's JWKS has the token's `kid`.
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

impl AccessError {
    /// A stable tag for logs and the JSON error.
    pub fn tag(&self) -> &'static str {
        match self {
            AccessError::Missing => "missing",
            AccessError::Malformed(_) => "malformed",
            AccessError::BadAlgorithm => "bad_alg",
            AccessError::UnknownKey => "unknown_kid",
            AccessError::BadSignature => "bad_signature",
            AccessError::Expired => "expired",
            AccessError::NotYetValid => "not_yet_valid",
            AccessError::WrongAudience => "wrong_audience",
            AccessError::WrongIssuer => "wrong_issuer",
            AccessError::KeysUnavailable => "keys_unavailable",
            AccessError::VerifierFailed => "verifier_failed",
        }
    }

    /// 401 for a token that does not pass; 503 when Sluice could not
    /// check it (a retry may pass).
    pub fn status(&self) -> u16 {
        match self {
            AccessError::KeysUnavailable | AccessError::VerifierFailed => 503,
            _ => 401,
        }
    }
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = match self {
            AccessError::Missing => "no Cf-Access-Jwt-Assertion header",
            AccessError::Malformed(what) => return write!(f, "malformed Access token: {what}"),
            AccessError::BadAlgorithm => "Access token algorithm is not RS256",
            AccessError::UnknownKey => "Access token key id is not in the team's keys",
            AccessError::BadSignature => "Access token signature does not verify",
            AccessError::Expired => "Access token has expired",
            AccessError::NotYetValid => "Access token is not yet valid",
            AccessError::WrongAudience => "Access token is for another application",
            AccessError::WrongIssuer => "Access token is from another team",
            AccessError::KeysUnavailable => "the team's Access keys could not be fetched",
            AccessError::VerifierFailed => "the Access token could not be checked",
        };
        f.write_str(m)
    }
}

impl From<AccessError> for ApiError {
    fn from(e: AccessError) -> ApiError {
        let code = match e.status() {
            503 => "auth_unavailable",
            _ => "unauthorized",
        };
        ApiError::new(e.status(), code, e.to_string())
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
    pub fn modulus(&self) -> Result<Vec<u8>, AccessError> {
        URL_SAFE_NO_PAD
            .decode(&self.n)
            .map_err(|_| AccessError::Malformed("key modulus"))
    }

    /// The public exponent, big-endian.
    pub fn exponent(&self) -> Result<Vec<u8>, AccessError> {
        URL_SAFE_NO_PAD
            .decode(&self.e)
            .map_err(|_| AccessError::Malformed("key exponent"))
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
pub fn parse_jwks(body: &[u8]) -> Result<Vec<Jwk>, AccessError> {
    if body.len() > JWKS_BYTES_MAX {
        return Err(AccessError::Malformed("JWKS too large"));
    }
    #[derive(Deserialize)]
    struct Doc {
        keys: Vec<Value>,
    }
    let doc: Doc = serde_json::from_slice(body).map_err(|_| AccessError::Malformed("JWKS"))?;
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

/// Which team and application tokens must be for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessConfig {
    /// `<team>.cloudflareaccess.com`.
    team_domain: String,
    /// The application's AUD tag.
    aud: String,
    /// Where the keys are fetched instead of the team's certs URL (a local
    /// stand-in in tests); None in production.
    certs_url: Option<String>,
}

/// A team name is a DNS label; the domain is at most a DNS name.
const TEAM_DOMAIN_CHARS_MAX: usize = 253;

impl AccessConfig {
    /// `team` is the team name (`acme`), its domain
    /// (`acme.cloudflareaccess.com`) or its issuer URL; `aud` the
    /// application's AUD tag. Refuses an empty or ill-formed value.
    pub fn new(team: &str, aud: &str) -> Result<AccessConfig, String> {
        let t = team.trim().trim_end_matches('/');
        let t = t.strip_prefix("https://").unwrap_or(t).to_ascii_lowercase();
        let domain = if t.contains('.') {
            t
        } else {
            format!("{t}.cloudflareaccess.com")
        };
        let label_ok = |l: &str| {
            !l.is_empty()
                && !l.starts_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if domain.len() > TEAM_DOMAIN_CHARS_MAX || !domain.split('.').all(label_ok) {
            return Err(format!("Access team {team:?} is not a team name or domain"));
        }
        let aud = aud.trim();
        if aud.is_empty() {
            return Err("the Access AUD tag is empty".to_owned());
        }
        Ok(AccessConfig {
            team_domain: domain,
            aud: aud.to_owned(),
            certs_url: None,
        })
    }

    /// Fetches the keys from `url` instead of the team's certs URL
    /// (`ACCESS_CERTS_URL`: the end-to-end tests serve keys they made). The
    /// issuer is still the team's. Only a loopback URL is taken: whoever
    /// serves the keys decides who signs in, so a deployed Worker can take
    /// them from nowhere but its team (a loopback fetch reaches nothing
    /// there), and a mistyped or planted variable fails loudly.
    pub fn with_certs_url(mut self, url: &str) -> Result<AccessConfig, String> {
        let url = url.trim();
        // Parsed, not matched by prefix: `http://127.0.0.1:@evil.example/`
        // names evil.example (the rest is a user name).
        let loopback = url::Url::parse(url).is_ok_and(|u| {
            let host = matches!(
                u.host(),
                Some(url::Host::Domain("localhost"))
                    | Some(url::Host::Ipv4(std::net::Ipv4Addr::LOCALHOST))
                    | Some(url::Host::Ipv6(std::net::Ipv6Addr::LOCALHOST))
            );
            u.scheme() == "http" && host && u.username().is_empty() && u.password().is_none()
        });
        if !loopback
            || url.len() > TEAM_DOMAIN_CHARS_MAX * 4
            || url.chars().any(char::is_whitespace)
        {
            return Err(format!(
                "ACCESS_CERTS_URL {url:?} is not a loopback http URL (it exists for local tests; \
                 unset it to use the team's keys)"
            ));
        }
        self.certs_url = Some(url.to_owned());
        Ok(self)
    }

    /// `https://<team>.cloudflareaccess.com`: the `iss` Access writes.
    pub fn issuer(&self) -> String {
        format!("https://{}", self.team_domain)
    }

    /// Where the team's JWKS is published.
    pub fn certs_url(&self) -> String {
        match &self.certs_url {
            Some(url) => url.clone(),
            None => format!("https://{}/cdn-cgi/access/certs", self.team_domain),
        }
    }

    pub fn aud(&self) -> &str {
        &self.aud
    }
}

/// Who passed Access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessIdentity {
    /// A person's email; None for a service token.
    pub email: Option<String>,
    /// Access's user id; empty or None for a service token.
    pub sub: Option<String>,
    /// A service token's client id (`common_name`).
    pub common_name: Option<String>,
    /// When the token expires (s since epoch).
    pub exp_s: i64,
}

/// The team's keys with their fetch times. Interior mutability and no
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
    Refuse(AccessError),
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
                None if recent => Plan::Refuse(AccessError::UnknownKey),
                None => Plan::Fetch,
            };
        }
        if s.failed && recent {
            return match s.stale_key(kid, now_s) {
                Some(k) => Plan::Found(k),
                None => Plan::Refuse(AccessError::KeysUnavailable),
            };
        }
        Plan::Fetch
    }

    /// The key named `kid`: from the cache, or after one bounded fetch.
    pub async fn key(
        &self,
        kid: &str,
        cfg: &AccessConfig,
        fetch: &dyn JwksFetch,
        now_s: i64,
    ) -> Result<Jwk, AccessError> {
        match self.plan(kid, now_s) {
            Plan::Found(k) => return Ok(k),
            Plan::Refuse(e) => return Err(e),
            Plan::Fetch => {}
        }
        self.state.borrow_mut().attempted_s = Some(now_s);
        let fetched = fetch.fetch(&cfg.certs_url()).await;
        let parsed = fetched.ok().and_then(|body| parse_jwks(&body).ok());
        let mut s = self.state.borrow_mut();
        match parsed {
            Some(keys) => {
                s.keys = keys;
                s.fetched_s = Some(now_s);
                s.failed = false;
                s.key(kid).ok_or(AccessError::UnknownKey)
            }
            None => {
                s.failed = true;
                s.stale_key(kid, now_s).ok_or(AccessError::KeysUnavailable)
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

/// The three parts of a compact JWS, decoded.
struct Parts<'a> {
    signing_input: &'a str,
    header: Vec<u8>,
    payload: Vec<u8>,
    signature: Vec<u8>,
}

fn split(token: &str) -> Result<Parts<'_>, AccessError> {
    if token.is_empty() || token.len() > TOKEN_CHARS_MAX {
        return Err(AccessError::Malformed("length"));
    }
    let mut it = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return Err(AccessError::Malformed("not three parts"));
    };
    let decode = |part: &str, what: &'static str| {
        URL_SAFE_NO_PAD
            .decode(part)
            .map_err(|_| AccessError::Malformed(what))
    };
    let signing_input = token
        .get(..h.len() + 1 + p.len())
        .ok_or(AccessError::Malformed("not three parts"))?;
    Ok(Parts {
        signing_input,
        header: decode(h, "header encoding")?,
        payload: decode(p, "payload encoding")?,
        signature: decode(s, "signature encoding")?,
    })
}

/// The header's `kid`, once `alg` is RS256 and nothing critical is asked.
fn header_kid(header: &[u8]) -> Result<String, AccessError> {
    let v: Value =
        serde_json::from_slice(header).map_err(|_| AccessError::Malformed("header JSON"))?;
    let obj = v.as_object().ok_or(AccessError::Malformed("header"))?;
    if obj.get("alg").and_then(Value::as_str) != Some("RS256") {
        return Err(AccessError::BadAlgorithm);
    }
    if obj.contains_key("crit") {
        return Err(AccessError::Malformed("crit header"));
    }
    match obj.get("kid").and_then(Value::as_str) {
        Some(kid) if !kid.is_empty() => Ok(kid.to_owned()),
        _ => Err(AccessError::Malformed("kid")),
    }
}

/// Verifies the token of a `Cf-Access-Jwt-Assertion` header (None: the
/// header is missing) and returns who passed.
pub async fn verify(
    token: Option<&str>,
    cfg: &AccessConfig,
    cache: &JwksCache,
    fetch: &dyn JwksFetch,
    verifier: &dyn Rs256Verify,
    now_s: i64,
) -> Result<AccessIdentity, AccessError> {
    let token = token.map(str::trim).ok_or(AccessError::Missing)?;
    let parts = split(token)?;
    let kid = header_kid(&parts.header)?;
    let jwk = cache.key(&kid, cfg, fetch, now_s).await?;
    let modulus_len = jwk.modulus().map(|n| n.len())?;
    if parts.signature.len() != modulus_len {
        return Err(AccessError::BadSignature);
    }
    let valid = verifier
        .verify(&jwk, parts.signing_input.as_bytes(), &parts.signature)
        .await
        .map_err(|_| AccessError::VerifierFailed)?;
    if !valid {
        return Err(AccessError::BadSignature);
    }
    check_claims(&parts.payload, cfg, now_s)
}

/// Issuer, audience and times of a payload whose signature held.
fn check_claims(
    payload: &[u8],
    cfg: &AccessConfig,
    now_s: i64,
) -> Result<AccessIdentity, AccessError> {
    let v: Value =
        serde_json::from_slice(payload).map_err(|_| AccessError::Malformed("payload JSON"))?;
    let claims = v.as_object().ok_or(AccessError::Malformed("payload"))?;
    if claims.get("iss").and_then(Value::as_str) != Some(cfg.issuer().as_str()) {
        return Err(AccessError::WrongIssuer);
    }
    let aud_ok = match claims.get("aud") {
        Some(Value::String(a)) => a == cfg.aud(),
        Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(cfg.aud())),
        _ => false,
    };
    if !aud_ok {
        return Err(AccessError::WrongAudience);
    }
    let exp = seconds(claims.get("exp"), "exp")?.ok_or(AccessError::Malformed("exp"))?;
    if now_s.saturating_sub(CLOCK_LEEWAY_S) >= exp {
        return Err(AccessError::Expired);
    }
    let not_before = [
        seconds(claims.get("nbf"), "nbf")?,
        seconds(claims.get("iat"), "iat")?,
    ];
    if not_before
        .into_iter()
        .flatten()
        .any(|t| t > now_s.saturating_add(CLOCK_LEEWAY_S))
    {
        return Err(AccessError::NotYetValid);
    }
    let text = |k: &str| {
        claims
            .get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Ok(AccessIdentity {
        email: text("email"),
        sub: text("sub"),
        common_name: text("common_name"),
        exp_s: exp,
    })
}

/// A NumericDate claim: absent is None; a number (integer or not, any
/// size, saturated to `i64`) is Some; anything else is malformed.
fn seconds(v: Option<&Value>, what: &'static str) -> Result<Option<i64>, AccessError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Ok(Some(i)),
            // `as` saturates: 1e300 is i64::MAX, -1e300 i64::MIN.
            (None, Some(f)) if f.is_finite() => Ok(Some(f as i64)),
            _ => Err(AccessError::Malformed(what)),
        },
        Some(_) => Err(AccessError::Malformed(what)),
    }
}
