//! Cloudflare Access: verifies the `Cf-Access-Jwt-Assertion` header, an
//! RS256 JWT signed by the team's key (its JWKS at
//! `https://<team>.cloudflareaccess.com/cdn-cgi/access/certs`), for the
//! application's audience tag, issued by the team.
//!
//! The token, its keys and its standard claims are checked by the shared
//! verifier (`http::jwt`, also behind GitHub's OIDC tokens in
//! `http::oidc`); this module names the team, the audience and the leeway,
//! and reads who passed.

use super::jwt::{self, Expected, Keys};
use super::ApiError;

pub use super::jwt::{
    parse_jwks, Jwk, JwksCache, JwksFetch, Rs256Verify, JWKS_BYTES_MAX, JWKS_KEYS_MAX,
    JWKS_REFETCH_MIN_INTERVAL_S, JWKS_STALE_MAX_S, JWKS_TTL_S, TOKEN_CHARS_MAX,
};

/// Why an Access token was refused: the shared verifier's errors.
pub type AccessError = jwt::JwtError;

/// The request header Access sets on every request it lets through.
pub const ACCESS_JWT_HEADER: &str = "Cf-Access-Jwt-Assertion";

/// Clock skew tolerated on `exp`, `nbf` and `iat`: Access and the Worker
/// both keep NTP time, so a minute covers any real skew while adding
/// little to a token's life (Access sessions last 15 min to a month).
pub const CLOCK_LEEWAY_S: i64 = 60;

/// An Access refusal as the API answers it: 401 for a token that does not
/// pass, 503 when Sluice could not check it.
pub fn refusal(e: AccessError) -> ApiError {
    let code = match e.status() {
        503 => "auth_unavailable",
        _ => "unauthorized",
    };
    let message = match e {
        AccessError::Missing => "no Cf-Access-Jwt-Assertion header".to_owned(),
        ref other => format!("Cloudflare Access: {other}"),
    };
    ApiError::new(e.status(), code, message)
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
        if !jwt::is_loopback_http(url) {
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

/// Verifies the token of a `Cf-Access-Jwt-Assertion` header (None: the
/// header is missing) and returns who passed: the team's signature, its
/// issuer, the application's audience and the times.
pub async fn verify(
    token: Option<&str>,
    cfg: &AccessConfig,
    cache: &JwksCache,
    fetch: &dyn JwksFetch,
    verifier: &dyn Rs256Verify,
    now_s: i64,
) -> Result<AccessIdentity, AccessError> {
    let token = token.ok_or(AccessError::Missing)?;
    let url = cfg.certs_url();
    let keys = Keys {
        url: &url,
        cache,
        fetch,
        verifier,
    };
    let claims = jwt::signed_claims(token, &keys, now_s).await?;
    let issuer = cfg.issuer();
    let expected = Expected {
        issuer: &issuer,
        audience: cfg.aud(),
        leeway_s: CLOCK_LEEWAY_S,
    };
    let exp_s = jwt::check_standard(&claims, &expected, now_s)?;
    Ok(AccessIdentity {
        email: jwt::text_claim(&claims, "email"),
        sub: jwt::text_claim(&claims, "sub"),
        common_name: jwt::text_claim(&claims, "common_name"),
        exp_s,
    })
}
