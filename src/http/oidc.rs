//! GitHub Actions' OIDC tokens on `POST /v1/dispatch`: proof of which
//! repository, branch and GitHub environment a dispatching workflow ran in.
//!
//! A job granted `permissions: id-token: write` asks GitHub for a token
//! (`ACTIONS_ID_TOKEN_REQUEST_URL` with `&audience=<Sluice's URL>`, bearer
//! `ACTIONS_ID_TOKEN_REQUEST_TOKEN`); the action sends it as
//! `X-Sluice-OIDC-Token`. It is an RS256 JWT that GitHub signs with the
//! keys published at `<issuer>/.well-known/jwks` and checked by the shared
//! verifier (`http::jwt`): the issuer (`https://token.actions.githubusercontent.com`),
//! the audience Sluice expects (`DISPATCH_OIDC_AUDIENCE`, else `PUBLIC_URL`),
//! `exp`, `nbf` and `iat` within [`OIDC_CLOCK_LEEWAY_S`]. Then the claims
//! the dispatch rule reads (`runs::environment::Environments::dispatch_check`):
//! `repository`, `ref` and `environment`. The `sub` claim is not read: its
//! format is the repository's to customize (and changed to include ids for
//! repositories created after July 2026), while those three claims are
//! always there.
//!
//! The audience matters: GitHub's default audience is the repository
//! owner's URL, which every service a workflow talks to receives, so a
//! token minted for another service (or for the default) is refused here.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::runs::environment::ActionsOrigin;

use super::jwt::{self, Expected, JwksCache, JwksFetch, JwtError, Keys, Rs256Verify};
use super::ApiError;

/// The request header the action sends the token in.
pub const OIDC_TOKEN_HEADER: &str = "X-Sluice-OIDC-Token";
/// Where GitHub.com's Actions tokens come from (`iss`).
pub const GITHUB_ACTIONS_ISSUER: &str = "https://token.actions.githubusercontent.com";
/// Clock skew tolerated on `exp`, `nbf` and `iat`. GitHub's tokens expire 5
/// minutes after they are issued and the action sends one at once, so a
/// minute covers any real skew between GitHub, the runner and Cloudflare
/// while keeping a token's life short.
pub const OIDC_CLOCK_LEEWAY_S: i64 = 60;
/// An audience is a URL or a short name: longer is a mistake.
const AUDIENCE_CHARS_MAX: usize = 1024;
/// Longest claim kept from a token: refs and workflow paths are bounded by
/// git's 255-byte ref names and GitHub's path limits, well below this.
const CLAIM_CHARS_MAX: usize = 1024;

/// Whose tokens are taken and for which audience.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    issuer: String,
    audience: String,
}

impl OidcConfig {
    /// `issuer` is `GITHUB_OIDC_ISSUER` (unset: GitHub.com's), which may
    /// only name a loopback http URL: the end-to-end tests point it at the
    /// stand-in. Whoever serves the keys decides which dispatches may
    /// deploy, so a deployed Worker trusts nothing but GitHub (a loopback
    /// fetch reaches nothing there), and a mistyped or planted variable
    /// fails loudly. `audience` is `DISPATCH_OIDC_AUDIENCE`, else the
    /// Worker's `PUBLIC_URL` without a trailing slash.
    pub fn new(
        issuer: Option<&str>,
        audience: Option<&str>,
        public_url: Option<&str>,
    ) -> Result<OidcConfig, String> {
        let issuer = match given(issuer) {
            None => GITHUB_ACTIONS_ISSUER.to_owned(),
            Some(url) if jwt::is_loopback_http(url) => url.trim_end_matches('/').to_owned(),
            Some(url) => {
                return Err(format!(
                    "GITHUB_OIDC_ISSUER {url:?} is not a loopback http URL (it exists for local \
                     tests; unset it to take GitHub's tokens)"
                ))
            }
        };
        let audience = match (given(audience), given(public_url)) {
            (Some(a), _) => a.to_owned(),
            (None, Some(url)) => url.trim_end_matches('/').to_owned(),
            (None, None) => {
                return Err(
                    "neither DISPATCH_OIDC_AUDIENCE nor PUBLIC_URL is set: Sluice cannot \
                            tell which audience a dispatch's token must be for"
                        .to_owned(),
                )
            }
        };
        if audience.chars().count() > AUDIENCE_CHARS_MAX || audience.chars().any(char::is_control) {
            return Err(format!(
                "the dispatch audience must be text of at most {AUDIENCE_CHARS_MAX} characters"
            ));
        }
        Ok(OidcConfig { issuer, audience })
    }

    /// The `iss` tokens must carry.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The `aud` tokens must carry (the action asks GitHub for it).
    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// Where the issuer publishes its keys (its discovery document's
    /// `jwks_uri`, fixed: one fetch fewer, and nothing the document says
    /// can move the keys elsewhere).
    pub fn keys_url(&self) -> String {
        format!("{}/.well-known/jwks", self.issuer)
    }
}

/// A variable's value, unless unset or blank.
fn given(v: Option<&str>) -> Option<&str> {
    v.map(str::trim).filter(|s| !s.is_empty())
}

/// A token that passed: what it proved, and its identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    pub origin: ActionsOrigin,
    /// A digest of the token's `jti` (GitHub: unique per token), 16 hex
    /// digits: a dispatch carrying a token is named by it, so one token
    /// starts at most one run of each kind, whatever bodies it is sent with.
    pub id: String,
    /// When the token expires (s since epoch).
    pub exp_s: i64,
}

/// The interfaces and cache a check uses (the Worker's WebCrypto and
/// fetch; ring and fakes in tests).
pub struct OidcKeys<'a> {
    pub cache: &'a JwksCache,
    pub fetch: &'a dyn JwksFetch,
    pub verifier: &'a dyn Rs256Verify,
}

/// Verifies a dispatch's token and reads what it proves.
pub async fn verify(
    token: &str,
    cfg: &OidcConfig,
    keys: &OidcKeys<'_>,
    now_s: i64,
) -> Result<VerifiedToken, JwtError> {
    let url = cfg.keys_url();
    let at = Keys {
        url: &url,
        cache: keys.cache,
        fetch: keys.fetch,
        verifier: keys.verifier,
    };
    let claims = jwt::signed_claims(token, &at, now_s).await?;
    let expected = Expected {
        issuer: cfg.issuer(),
        audience: cfg.audience(),
        leeway_s: OIDC_CLOCK_LEEWAY_S,
    };
    let exp_s = jwt::check_standard(&claims, &expected, now_s)?;
    let jti = required(&claims, "jti")?;
    let origin = ActionsOrigin {
        repository: required(&claims, "repository")?,
        git_ref: required(&claims, "ref")?,
        environment: optional(&claims, "environment")?,
        workflow_ref: optional(&claims, "workflow_ref")?,
        actor: optional(&claims, "actor")?,
    };
    let digest = Sha256::digest(format!("github-oidc:{jti}").as_bytes());
    Ok(VerifiedToken {
        origin,
        id: hex::encode(&digest[..8]),
        exp_s,
    })
}

fn optional(claims: &Map<String, Value>, name: &'static str) -> Result<Option<String>, JwtError> {
    match claims.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s.chars().count() <= CLAIM_CHARS_MAX => Ok(Some(s.clone())),
        Some(_) => Err(JwtError::Malformed(name)),
    }
}

fn required(claims: &Map<String, Value>, name: &'static str) -> Result<String, JwtError> {
    optional(claims, name)?.ok_or(JwtError::Malformed(name))
}

/// A token that did not pass, as the API answers it: 401 with a code per
/// reason (503 when Sluice could not check it), naming the header, and the
/// audience when that was the problem.
pub fn refusal(e: &JwtError, cfg: &OidcConfig) -> ApiError {
    let code = match e {
        JwtError::Missing | JwtError::Malformed(_) => "oidc_malformed",
        JwtError::BadAlgorithm => "oidc_bad_alg",
        JwtError::UnknownKey => "oidc_unknown_kid",
        JwtError::BadSignature => "oidc_bad_signature",
        JwtError::Expired => "oidc_expired",
        JwtError::NotYetValid => "oidc_not_yet_valid",
        JwtError::WrongAudience => "oidc_wrong_audience",
        JwtError::WrongIssuer => "oidc_wrong_issuer",
        JwtError::KeysUnavailable | JwtError::VerifierFailed => "oidc_unavailable",
    };
    let hint = match e {
        JwtError::WrongAudience => format!(
            " (Sluice expects audience {:?}: the action's `url`, or DISPATCH_OIDC_AUDIENCE)",
            cfg.audience()
        ),
        JwtError::WrongIssuer => format!(" (Sluice takes tokens of {})", cfg.issuer()),
        _ => String::new(),
    };
    ApiError::new(e.status(), code, format!("{OIDC_TOKEN_HEADER}: {e}{hint}"))
}
