//! The probes behind `GET /v1/setup` (`http::setup` judges them), and the
//! configured secret values a dispatch's inputs may not carry.

use serde_json::Value;
use worker::Env;

use crate::blobs::Blobs;
use crate::github::app::private_key_pkcs8_der;
use crate::http::jwt::{parse_jwks, JwksFetch};
use crate::http::setup::{report as judged, Findings};
use crate::net::{HttpRequest, Transport};
use crate::runs::environment::Environments;
use crate::secret::Secret;

use super::bindings::{self, text};
use super::compose::run_env_parts;
use super::platform::{FetchJwks, FetchTransport, WorkerClock, D1, R2};

/// Probes every part Sluice needs and answers what is missing.
pub async fn report(env: &Env, db: &D1) -> Value {
    let parts = run_env_parts(env);
    let key = match text(env, bindings::GITHUB_APP_PRIVATE_KEY) {
        None => Err("GITHUB_APP_PRIVATE_KEY is not set".to_owned()),
        Some(pem) => private_key_pkcs8_der(&pem)
            .map(|_| ())
            .map_err(|e| format!("GITHUB_APP_PRIVATE_KEY does not parse: {e}")),
    };
    let api = match &key {
        Ok(()) => parts
            .github(&WorkerClock)
            .app_slug()
            .await
            .map_err(|e| format!("GET /app failed: {}", e.message)),
        Err(_) => Err("not tried without a private key".into()),
    };
    let findings = Findings {
        webhook_secret: text(env, bindings::GITHUB_WEBHOOK_SECRET).is_some(),
        webhook_secret_previous: text(env, bindings::GITHUB_WEBHOOK_SECRET_PREVIOUS).is_some(),
        app_id: text(env, bindings::GITHUB_APP_ID),
        key,
        api,
        app_slug: text(env, bindings::GITHUB_APP_SLUG),
        tables: tables(db).await,
        r2: r2(env).await,
        sandbox_backend: text(env, bindings::SANDBOX_BACKEND).unwrap_or_else(|| "agent".into()),
        sandbox: sandbox(env).await,
        dispatch_secret: text(env, bindings::DISPATCH_SECRET)
            .is_some_and(|s| s.len() >= crate::http::dispatch::DISPATCH_SECRET_CHARS_MIN),
        dispatch_oidc: dispatch_oidc(env).await,
        log_link_secret: text(env, bindings::LOG_LINK_SECRET).is_some(),
        public_url: text(env, bindings::PUBLIC_URL),
        environments_error: Environments::parse(text(env, bindings::ENVIRONMENTS).as_deref())
            .error()
            .map(str::to_owned),
    };
    judged(&findings)
}

/// Whose tokens a dispatch may carry, and whether its keys can be fetched
/// (GitHub's, or the stand-in's in tests).
async fn dispatch_oidc(env: &Env) -> Result<String, String> {
    let cfg = super::bindings::oidc_config(env)?;
    let url = cfg.keys_url();
    let body = FetchJwks
        .fetch(&url)
        .await
        .map_err(|e| format!("the OIDC keys at {url} could not be fetched: {e}"))?;
    let keys = parse_jwks(&body).map_err(|e| format!("{url} is not a key set: {e}"))?;
    if keys.is_empty() {
        return Err(format!("{url} holds no RS256 signing key"));
    }
    Ok(format!(
        "tokens of {} for audience {:?}; {} keys at {url}",
        cfg.issuer(),
        cfg.audience(),
        keys.len()
    ))
}

async fn tables(db: &D1) -> Result<Vec<String>, String> {
    crate::store::schema::tables(db)
        .await
        .map_err(|e| format!("D1 did not answer: {e}"))
}

async fn r2(env: &Env) -> Result<(), String> {
    let bucket = env
        .bucket(bindings::LOGS)
        .map_err(|_| format!("the R2 binding {} is not configured", bindings::LOGS))?;
    R2(bucket)
        .list("setup-probe/", 1)
        .await
        .map(|_| ())
        .map_err(|e| format!("R2 did not answer: {e}"))
}

/// The agent answers its health check; a container backend is probed by
/// its binding only (a probe would start a container).
async fn sandbox(env: &Env) -> Result<String, String> {
    if text(env, bindings::SANDBOX_BACKEND).as_deref() == Some("container") {
        let missing: Vec<&str> = crate::sandbox::image::IMAGE_CLASSES
            .iter()
            .flat_map(|c| c.instance_types.iter().map(|t| t.binding))
            .filter(|b| env.durable_object(b).is_err())
            .collect();
        return match missing.as_slice() {
            [] => Ok("every image class's container binding is present".to_owned()),
            names => Err(format!(
                "SANDBOX_BACKEND is container but bindings are missing: {}",
                names.join(", ")
            )),
        };
    }
    let base = text(env, bindings::SANDBOX_URL)
        .unwrap_or_else(|| bindings::SANDBOX_URL_DEFAULT.to_owned());
    let req = HttpRequest {
        method: "GET",
        url: format!("{}/healthz", base.trim_end_matches('/')),
        headers: Vec::new(),
        body: None,
    };
    match FetchTransport.send(req).await {
        Ok(r) if r.status == 200 => Ok(format!("the agent at {base} answered")),
        Ok(r) => Err(format!("the agent at {base} answered {}", r.status)),
        Err(e) => Err(format!("the agent at {base} did not answer: {e}")),
    }
}

/// Sluice's own secrets (its other reserved names are plain settings).
const OWN_SECRETS: &[&str] = &[
    bindings::GITHUB_APP_PRIVATE_KEY,
    bindings::GITHUB_WEBHOOK_SECRET,
    bindings::GITHUB_WEBHOOK_SECRET_PREVIOUS,
    bindings::ADMIN_TOKEN,
    bindings::SANDBOX_AGENT_TOKEN,
    bindings::NOTIFY_SECRET,
    bindings::DISPATCH_SECRET,
    bindings::LOG_LINK_SECRET,
];

/// Every configured secret's value: the environments' and Sluice's own.
pub fn secret_values(env: &Env) -> Vec<Secret> {
    let environments = Environments::parse(text(env, bindings::ENVIRONMENTS).as_deref());
    let names = environments
        .iter()
        .flat_map(|(_, e)| e.secrets.iter().map(String::as_str))
        .chain(OWN_SECRETS.iter().copied());
    names.filter_map(|n| bindings::secret(env, n)).collect()
}
