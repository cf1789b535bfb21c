//! Binding and variable names in one place, and typed access to them.

use std::cell::RefCell;
use std::collections::HashMap;

use worker::Env;

use crate::secret::Secret;

pub const DB: &str = "DB";
pub const RUN_INSTANCE: &str = "RUN_INSTANCE";
pub const LOGS: &str = "LOGS";

pub const GITHUB_API_URL: &str = "GITHUB_API_URL";
pub const GITHUB_APP_ID: &str = "GITHUB_APP_ID";
/// Signs `POST /v1/dispatch` requests (HMAC-SHA256 over timestamp and body).
pub const DISPATCH_SECRET: &str = "DISPATCH_SECRET";
/// The audience a dispatch's GitHub OIDC token must be for (`http::oidc`);
/// `PUBLIC_URL` when unset.
pub const DISPATCH_OIDC_AUDIENCE: &str = "DISPATCH_OIDC_AUDIENCE";
/// Whose OIDC tokens a dispatch may carry instead of GitHub Actions': only
/// the end-to-end tests set it (the stand-in on loopback).
pub const GITHUB_OIDC_ISSUER: &str = "GITHUB_OIDC_ISSUER";
/// The App's slug: `<slug>[bot]` is the user its own actions come from.
pub const GITHUB_APP_SLUG: &str = "GITHUB_APP_SLUG";
pub const GITHUB_APP_PRIVATE_KEY: &str = "GITHUB_APP_PRIVATE_KEY";
pub const GITHUB_WEBHOOK_SECRET: &str = "GITHUB_WEBHOOK_SECRET";
/// The webhook secret being rotated out: accepted too until it is unset.
pub const GITHUB_WEBHOOK_SECRET_PREVIOUS: &str = "GITHUB_WEBHOOK_SECRET_PREVIOUS";
pub const ADMIN_TOKEN: &str = "ADMIN_TOKEN";
pub const SANDBOX_URL: &str = "SANDBOX_URL";
pub const SANDBOX_AGENT_TOKEN: &str = "SANDBOX_AGENT_TOKEN";
pub const PUBLIC_URL: &str = "PUBLIC_URL";
pub const NOTIFY_URL: &str = "NOTIFY_URL";
pub const NOTIFY_SECRET: &str = "NOTIFY_SECRET";
pub const POOL_CAPACITY: &str = "POOL_CAPACITY";
/// Checks admitted at once, and per repository (`gate::check_capacities`).
pub const CHECKS_CAPACITY: &str = "CHECKS_CAPACITY";
pub const CHECKS_PER_REPO: &str = "CHECKS_PER_REPO";
pub const RETENTION_DAYS: &str = "RETENTION_DAYS";
/// Deploy environments, TOML (`runs::environment`): the operator's grant
/// of secrets to repositories and branches.
pub const ENVIRONMENTS: &str = "ENVIRONMENTS";
/// Where GitHub serves git; `github::GIT_URL_DEFAULT` when unset.
pub const GITHUB_GIT_URL: &str = "GITHUB_GIT_URL";
/// Signs the log links in check summaries (`runs::loglink`).
pub const LOG_LINK_SECRET: &str = "LOG_LINK_SECRET";
/// A repository's dependency caches at most, in bytes (`kit::caches`).
pub const CACHE_BYTES_PER_REPO: &str = "CACHE_BYTES_PER_REPO";
/// How long a sandbox container may sit unused before its object's alarm
/// destroys it ("10m" when unset; `sandbox::lifecycle`).
pub const CONTAINER_SLEEP_AFTER: &str = "CONTAINER_SLEEP_AFTER";
/// "container" (what wrangler.toml sets for production): one Cloudflare
/// Container per run instance (the SANDBOX binding); unset or "agent": the
/// sandbox agent at SANDBOX_URL (npm start and the tests).
pub const SANDBOX_BACKEND: &str = "SANDBOX_BACKEND";
/// Cloudflare Access in front of the dashboard and the API: the team
/// (`acme` or `acme.cloudflareaccess.com`) and the application's AUD tag
/// (`http::auth`). Set both or neither.
pub const ACCESS_TEAM_DOMAIN: &str = "ACCESS_TEAM_DOMAIN";
pub const ACCESS_AUD: &str = "ACCESS_AUD";
/// Where Access keys are fetched instead of the team's certs URL: only the
/// end-to-end tests set it (a local server of keys they made).
pub const ACCESS_CERTS_URL: &str = "ACCESS_CERTS_URL";
/// "on" only under `wrangler dev`: a burst's instance creations wait for
/// its answers (`http::ack_first`). Off in `wrangler.toml`.
pub const ACK_FIRST: &str = "ACK_FIRST";
/// The least severe structured log line written: `info` (default), `warn`
/// or `error` (`crate::obs`).
pub const LOG_LEVEL: &str = "LOG_LEVEL";

/// Containers the sandbox pool admits at once when `POOL_CAPACITY` is
/// unset: a small account's concurrent container quota.
pub const POOL_CAPACITY_DEFAULT: u32 = 8;

pub const GITHUB_API_URL_DEFAULT: &str = "https://api.github.com";
pub const SANDBOX_URL_DEFAULT: &str = "http://127.0.0.1:8791";

/// A string binding (a var or a secret), or None when unset or empty.
/// Read from the environment once per isolate: a deploy, or a changed var
/// or secret, starts new isolates, so a value cannot change under one. A
/// read through `Env` costs a lookup, a type check and, for an unset name,
/// two errors formatted; a creation reads some thirty. The cache holds at
/// most one value per name this file declares.
pub fn text(env: &Env, name: &str) -> Option<String> {
    thread_local! {
        static TEXTS: RefCell<HashMap<String, Option<String>>> = RefCell::default();
    }
    if let Some(known) = TEXTS.with(|t| t.borrow().get(name).cloned()) {
        return known;
    }
    let value = read_text(env, name);
    TEXTS.with(|t| t.borrow_mut().insert(name.to_owned(), value.clone()));
    value
}

fn read_text(env: &Env, name: &str) -> Option<String> {
    let v = env
        .secret(name)
        .map(|s| s.to_string())
        .or_else(|_| env.var(name).map(|v| v.to_string()))
        .ok()?;
    if v.is_empty() {
        None
    } else {
        Some(v)
    }
}

pub fn secret(env: &Env, name: &str) -> Option<Secret> {
    text(env, name).map(Secret::new)
}

/// How long finished instances and webhook deliveries are kept
/// (`RETENTION_DAYS`, whole days), in ms.
pub fn retention_ms(env: &Env) -> i64 {
    text(env, RETENTION_DAYS)
        .and_then(|d| d.parse::<i64>().ok())
        .filter(|d| (1..=RETENTION_DAYS_MAX).contains(d))
        .map_or(crate::limits::RETENTION_MS_DEFAULT, |d| {
            d * 24 * 3600 * 1000
        })
}

/// How often the sweep asks GitHub whether a live preview's pull request
/// closed (`PREVIEW_RECONCILE_INTERVAL`, a duration: `10m`), in ms;
/// default and bounds in `runs::sweep`.
pub fn preview_reconcile_ms(env: &Env) -> i64 {
    crate::runs::sweep::preview_reconcile_ms_of(text(env, PREVIEW_RECONCILE_INTERVAL).as_deref())
}

pub const PREVIEW_RECONCILE_INTERVAL: &str = "PREVIEW_RECONCILE_INTERVAL";

/// A longer retention is a typo: a year of instances is more than D1 holds.
const RETENTION_DAYS_MAX: i64 = 366;

/// Applies `LOG_LEVEL` to this isolate's structured logs (an unknown value
/// keeps every line: losing logs to a typo is worse than keeping them).
pub fn apply_log_level(env: &Env) {
    let level = text(env, LOG_LEVEL).and_then(|v| crate::obs::Level::parse(&v));
    crate::obs::set_min_level(level.unwrap_or(crate::obs::Level::Info));
}

/// Whose OIDC tokens a dispatch may carry, and for which audience: read by
/// the router (a dispatch) and by setup (the report).
pub fn oidc_config(env: &Env) -> Result<crate::http::oidc::OidcConfig, String> {
    crate::http::oidc::OidcConfig::new(
        text(env, GITHUB_OIDC_ISSUER).as_deref(),
        text(env, DISPATCH_OIDC_AUDIENCE).as_deref(),
        text(env, PUBLIC_URL).as_deref(),
    )
}
