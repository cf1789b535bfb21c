//! Who may call the API and the dashboard, decided once per request:
//! - the bearer `ADMIN_TOKEN` (scripts, `curl`);
//! - Cloudflare Access (production): the `Cf-Access-Jwt-Assertion` JWT,
//!   checked by `http::access` against the team's keys, audience and issuer
//!   (`ACCESS_TEAM_DOMAIN`, `ACCESS_AUD`);
//! - a dashboard session cookie (a browser without Access, e.g. `npm
//!   start`): made by `POST /ui/login` from the admin token, it names its
//!   expiry and carries an HMAC of it keyed by the token, so it needs no
//!   server state, expires by itself and dies with a new token.
//!
//! The last two are *ambient*: a browser sends them with any request to
//! this origin, including one a hostile page causes. So a POST carrying
//! only those must come from the dashboard itself
//! ([`Principal::must_be_same_origin`], `pages::same_origin_post`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::access::{self, AccessConfig, AccessIdentity, JwksCache, JwksFetch, Rs256Verify};
use super::check_admin;
use super::error::ApiError;

/// The dashboard session's cookie over plain http (local development).
pub const SESSION_COOKIE: &str = "sluice_session";
/// The session cookie's name over https: `__Host-` makes the browser keep
/// it only if it was set `Secure`, `Path=/` and without `Domain`, so a
/// sibling subdomain cannot plant (toss) one that shadows the operator's.
pub const SESSION_COOKIE_HTTPS: &str = "__Host-sluice_session";

/// The session cookie's name for a dashboard served over https or not
/// (`__Host-` needs `Secure`, which plain-http local development lacks).
pub fn session_cookie_name(https: bool) -> &'static str {
    if https {
        SESSION_COOKIE_HTTPS
    } else {
        SESSION_COOKIE
    }
}
/// A session lasts a working day; then the operator signs in again (with
/// the token `npm start` printed, or their password manager's).
pub const SESSION_TTL_S: i64 = 12 * 3_600;
/// A cookie header longer than this is not from the dashboard's origin
/// (browsers cap one cookie at 4 KiB): it is not searched.
const COOKIE_HEADER_CHARS_MAX: usize = 16 * 1024;
/// What a session's HMAC is of, besides its expiry: a session is not any
/// other HMAC the token keys.
const SESSION_CONTEXT: &str = "sluice-dashboard-session-v1";

/// The credentials a request presents, as sent.
#[derive(Debug, Clone, Copy, Default)]
pub struct Presented<'a> {
    /// `Authorization`.
    pub authorization: Option<&'a str>,
    /// `Cf-Access-Jwt-Assertion`.
    pub access_jwt: Option<&'a str>,
    /// `Cookie`.
    pub cookie: Option<&'a str>,
    /// Whether the request came over https: which session cookie counts.
    pub https: bool,
}

/// What the operator configured.
#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// `ADMIN_TOKEN`.
    pub admin_token: Option<String>,
    /// `ACCESS_TEAM_DOMAIN` and `ACCESS_AUD`: None when neither is set;
    /// `Err` when they are set but unusable (one missing, a bad domain).
    pub access: Option<Result<AccessConfig, String>>,
}

impl AuthConfig {
    /// From the two Access vars as set (None: unset). Set together or not
    /// at all: one without the other is a mistake to report, not to ignore.
    pub fn access_from(
        team: Option<&str>,
        aud: Option<&str>,
    ) -> Option<Result<AccessConfig, String>> {
        match (team, aud) {
            (None, None) => None,
            (Some(t), Some(a)) => Some(AccessConfig::new(t, a)),
            _ => Some(Err(
                "ACCESS_TEAM_DOMAIN and ACCESS_AUD must be set together".to_owned(),
            )),
        }
    }
}

/// Who passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// The bearer admin token.
    Token,
    /// A dashboard session made from the admin token.
    Session,
    /// Cloudflare Access: a person (email) or a service token.
    Access(AccessIdentity),
}

impl Principal {
    /// Whether a browser would send this credential by itself: a session
    /// cookie, or Access for a person (Access keeps its own cookie and adds
    /// the JWT to every request). A service token and the bearer token are
    /// sent only by the scripts that hold them.
    pub fn must_be_same_origin(&self) -> bool {
        match self {
            Principal::Token => false,
            Principal::Session => true,
            Principal::Access(who) => who.email.is_some() || who.common_name.is_none(),
        }
    }

    /// For logs: which kind of credential (no secret, no address).
    pub fn kind(&self) -> &'static str {
        match self {
            Principal::Token => "admin_token",
            Principal::Session => "session",
            Principal::Access(who) if who.common_name.is_some() => "access_service_token",
            Principal::Access(_) => "access",
        }
    }
}

/// The Access key cache and the two interfaces its check uses.
pub struct AccessKeys<'a> {
    pub cache: &'a JwksCache,
    pub fetch: &'a dyn JwksFetch,
    pub verifier: &'a dyn Rs256Verify,
}

/// Decides who a request is from. A bearer header is checked alone (a
/// wrong token is refused, not tried as something else); otherwise an
/// Access JWT when Access is configured, then a session cookie when the
/// admin token is set. Nothing configured at all: 503.
pub async fn authenticate(
    presented: &Presented<'_>,
    cfg: &AuthConfig,
    keys: &AccessKeys<'_>,
    now_s: i64,
) -> Result<Principal, ApiError> {
    let admin = cfg.admin_token.as_deref().filter(|t| !t.is_empty());
    if presented.authorization.is_some() {
        check_admin(presented.authorization, admin)?;
        return Ok(Principal::Token);
    }
    match (&cfg.access, presented.access_jwt) {
        (Some(Err(e)), _) => {
            return Err(ApiError::new(503, "not_configured", e.clone()));
        }
        (Some(Ok(access_cfg)), Some(token)) => {
            let who = access::verify(
                Some(token),
                access_cfg,
                keys.cache,
                keys.fetch,
                keys.verifier,
                now_s,
            )
            .await
            .map_err(access::refusal)?;
            return Ok(Principal::Access(who));
        }
        _ => {}
    }
    let session = presented
        .cookie
        .and_then(|c| cookie_value(c, session_cookie_name(presented.https)));
    if let (Some(token), Some(value)) = (admin, session) {
        if session_valid(value, token, now_s) {
            return Ok(Principal::Session);
        }
        return Err(ApiError::new(
            401,
            "unauthorized",
            "the dashboard session has expired or was made with another token; sign in again",
        ));
    }
    if admin.is_none() && cfg.access.is_none() {
        return Err(ApiError::new(
            503,
            "not_configured",
            "neither ADMIN_TOKEN nor Cloudflare Access (ACCESS_TEAM_DOMAIN, ACCESS_AUD) is set; \
             the API and the dashboard are disabled",
        ));
    }
    Err(ApiError::new(
        401,
        "unauthorized",
        "Authorization: Bearer <ADMIN_TOKEN>, a Cloudflare Access token or a dashboard session \
         is required",
    ))
}

/// The value of cookie `name` in a `Cookie` header, if present.
pub fn cookie_value<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    if header.len() > COOKIE_HEADER_CHARS_MAX {
        return None;
    }
    header.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k.trim() == name).then(|| v.trim())
    })
}

fn session_mac(admin_token: &str, exp_s: i64) -> Option<Hmac<Sha256>> {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(admin_token.as_bytes()).ok()?;
    mac.update(SESSION_CONTEXT.as_bytes());
    mac.update(b".");
    mac.update(exp_s.to_string().as_bytes());
    Some(mac)
}

/// A session value valid until `now_s + SESSION_TTL_S`: `v1.<exp>.<hmac>`.
pub fn make_session(admin_token: &str, now_s: i64) -> Option<String> {
    let exp_s = now_s.saturating_add(SESSION_TTL_S);
    let tag = session_mac(admin_token, exp_s)?.finalize().into_bytes();
    Some(format!("v1.{exp_s}.{}", hex::encode(tag)))
}

/// Whether `value` is a session made with `admin_token` that has not
/// expired. The HMAC is compared in constant time.
pub fn session_valid(value: &str, admin_token: &str, now_s: i64) -> bool {
    let mut parts = value.splitn(3, '.');
    let (Some("v1"), Some(exp), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let (Ok(exp_s), Ok(tag)) = (exp.parse::<i64>(), hex::decode(tag)) else {
        return false;
    };
    // A session never lasts longer than one TTL, whatever its value says.
    if exp_s <= now_s || exp_s > now_s.saturating_add(SESSION_TTL_S) {
        return false;
    }
    session_mac(admin_token, exp_s).is_some_and(|mac| mac.verify_slice(&tag).is_ok())
}

/// The `Set-Cookie` value that starts a session (`Secure` when the
/// dashboard is served over https; `SameSite=Strict`, so no cross-site
/// request carries it).
pub fn session_cookie(value: &str, https: bool) -> String {
    format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={SESSION_TTL_S}{}",
        session_cookie_name(https),
        if https { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` value that ends the session.
pub fn session_cookie_cleared(https: bool) -> String {
    format!(
        "{}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0{}",
        session_cookie_name(https),
        if https { "; Secure" } else { "" }
    )
}

/// Where a sign-in may send the browser: a dashboard path, never another
/// origin (`//evil`, `/\evil`) nor anything else; the list otherwise.
pub fn next_after_login(requested: Option<&str>) -> String {
    let fallback = super::pages::paths::EXECUTIONS_PATH;
    match requested {
        Some(n)
            if n.starts_with("/ui")
                && !n.starts_with("//")
                && n.len() <= NEXT_CHARS_MAX
                && !n
                    .chars()
                    .any(|c| c.is_control() || c == '\\' || c.is_whitespace()) =>
        {
            n.to_owned()
        }
        _ => fallback.to_owned(),
    }
}

/// A dashboard URL with its filters is well under this.
const NEXT_CHARS_MAX: usize = 2_048;
