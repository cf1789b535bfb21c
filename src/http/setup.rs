//! `GET /v1/setup`: what is configured and what is missing, in one answer,
//! so an operator who just created the App (README, "Set up the GitHub
//! App") sees every gap at once instead of meeting them one failed
//! webhook at a time. The glue probes (`worker_glue::setup`); this module
//! judges the findings.

use serde_json::{json, Value};

/// Every table the migrations create: one missing means a migration was
/// not applied (`wrangler d1 migrations apply`).
pub const REQUIRED_TABLES: &[&str] = &[
    "executions",
    "execution_steps",
    "webhook_deliveries",
    "serial_queue",
    "pool_slots",
    "container_leases",
    "sandbox_processes",
    "dispatch_signatures",
    "repo_schedules",
    "schedule_slots",
    "previews",
];

/// What the glue found, each probe's result in plain values.
#[derive(Debug, Clone)]
pub struct Findings {
    pub webhook_secret: bool,
    pub webhook_secret_previous: bool,
    pub app_id: Option<String>,
    /// The private key decoded (or why not).
    pub key: Result<(), String>,
    /// `GET /app` with a JWT the key signed: the App's slug (or why not).
    pub api: Result<String, String>,
    pub app_slug: Option<String>,
    /// The tables present in D1 (or why they could not be listed).
    pub tables: Result<Vec<String>, String>,
    /// The R2 bucket answered a list (or why not).
    pub r2: Result<(), String>,
    pub sandbox_backend: String,
    /// The sandbox answered (what it said, or why not).
    pub sandbox: Result<String, String>,
    pub dispatch_secret: bool,
    /// Whose OIDC tokens dispatches may carry and the keys fetched from
    /// its JWKS (or why the configuration or the fetch failed).
    pub dispatch_oidc: Result<String, String>,
    pub log_link_secret: bool,
    pub public_url: Option<String>,
    pub environments_error: Option<String>,
}

impl Default for SetupCheck {
    fn default() -> Self {
        SetupCheck {
            name: "",
            ok: false,
            required: true,
            detail: String::new(),
        }
    }
}

/// One line of the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct SetupCheck {
    pub name: &'static str,
    pub ok: bool,
    /// False for what only some installations need (dispatch, log links).
    pub required: bool,
    pub detail: String,
}

fn check(name: &'static str, result: Result<String, String>) -> SetupCheck {
    let ok = result.is_ok();
    SetupCheck {
        name,
        ok,
        detail: result.unwrap_or_else(|e| e),
        ..SetupCheck::default()
    }
}

fn optional(name: &'static str, set: bool, what: &str) -> SetupCheck {
    SetupCheck {
        name,
        ok: set,
        required: false,
        detail: if set {
            "set".into()
        } else {
            format!("not set: {what}")
        },
    }
}

fn set_or(set: bool, missing: &str) -> Result<String, String> {
    if set {
        Ok("set".into())
    } else {
        Err(missing.into())
    }
}

/// The tables the migrations create that D1 lacks.
pub fn missing_tables(present: &[String]) -> Vec<&'static str> {
    REQUIRED_TABLES
        .iter()
        .filter(|t| !present.iter().any(|p| p == *t))
        .copied()
        .collect()
}

/// Every check, in the order an operator fixes them: the required ones,
/// then the optional ones.
pub fn checks(f: &Findings) -> Vec<SetupCheck> {
    let mut all = required_checks(f);
    all.extend(optional_checks(f));
    all
}

/// GitHub's answer for the App, which must be the App Sluice is configured as.
fn github_api_check(f: &Findings) -> Result<String, String> {
    f.api.clone().and_then(|slug| match &f.app_slug {
        Some(s) if !s.eq_ignore_ascii_case(&slug) => Err(format!(
            "GitHub calls this App {slug:?} but GITHUB_APP_SLUG is {s:?}: Sluice would not recognise its own events"
        )),
        _ => Ok(format!("GitHub answered as App {slug:?}")),
    })
}

/// D1 holds every table the migrations create.
fn d1_check(f: &Findings) -> Result<String, String> {
    f.tables.clone().and_then(|present| {
        let missing = missing_tables(&present);
        if missing.is_empty() {
            Ok("every migration applied".into())
        } else {
            Err(format!(
                "tables {} are missing: run `npx wrangler d1 migrations apply DB --remote`",
                missing.join(", ")
            ))
        }
    })
}

/// The checks without which Sluice does not work.
fn required_checks(f: &Findings) -> Vec<SetupCheck> {
    let api = github_api_check(f);
    let d1 = d1_check(f);
    vec![
        check(
            "webhook_secret",
            set_or(
                f.webhook_secret,
                "GITHUB_WEBHOOK_SECRET is not set: every webhook is refused (503)",
            ),
        ),
        check(
            "app_id",
            f.app_id
                .clone()
                .ok_or_else(|| "GITHUB_APP_ID is not set".to_owned()),
        ),
        check("private_key", f.key.clone().map(|()| "parses".to_owned())),
        check("github_api", api),
        check("d1", d1),
        check(
            "r2",
            f.r2.clone().map(|()| "bound and answering".to_owned()),
        ),
        check(
            "sandbox",
            f.sandbox
                .clone()
                .map(|s| format!("{}: {s}", f.sandbox_backend)),
        ),
        check(
            "public_url",
            f.public_url.clone().ok_or_else(|| {
                "PUBLIC_URL is not set: check runs cannot link their executions".to_owned()
            }),
        ),
        check(
            "environments",
            f.environments_error.clone().map_or(Ok("valid".into()), Err),
        ),
    ]
}

/// The checks of features an operator may leave off.
fn optional_checks(f: &Findings) -> Vec<SetupCheck> {
    vec![
        optional(
            "webhook_secret_previous",
            f.webhook_secret_previous,
            "only while rotating the webhook secret",
        ),
        optional(
            "dispatch_secret",
            f.dispatch_secret,
            "(or shorter than 32 characters): POST /v1/dispatch is refused (503)",
        ),
        // Needed once dispatch is on: without GitHub's keys no dispatch
        // reaches an environment that restricts branches.
        SetupCheck {
            required: f.dispatch_secret,
            ..check("dispatch_oidc", f.dispatch_oidc.clone())
        },
        optional(
            "log_link_secret",
            f.log_link_secret,
            "summaries name the log's R2 key instead of a link",
        ),
    ]
}

/// The answer: `ok` when every required check passed, the names of those
/// that did not, and each check with what it found.
pub fn report(f: &Findings) -> Value {
    let all = checks(f);
    let missing: Vec<&str> = all
        .iter()
        .filter(|c| c.required && !c.ok)
        .map(|c| c.name)
        .collect();
    let lines: Vec<Value> = all
        .iter()
        .map(|c| json!({ "name": c.name, "ok": c.ok, "required": c.required, "detail": c.detail }))
        .collect();
    json!({ "ok": missing.is_empty(), "missing": missing, "checks": lines })
}
