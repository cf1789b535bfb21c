//! Announcing automatic skips: a signed JSON POST to `NOTIFY_URL`, as the
//! queue-policy seed's `deployment_auto_skipped` notification (and a
//! release's `release_auto_skipped`). An
//! operator's explicit skip is silent and never comes here.

use serde::Serialize;

use crate::engine::{Backoff, Ctx, RunError, StepConfig};
use crate::github::webhook::sign;
use crate::net::HttpRequest;

use super::tags::FailureTag;
use super::RunEnv;

/// A notification endpoint that is down must not hold a run for long:
/// a few retries, then the run ends without it (the skip itself stands).
const NOTIFY_RETRIES: u32 = 3;
const NOTIFY_RETRY_DELAY_MS: i64 = 1_000;
const NOTIFY_TIMEOUT_MS: i64 = 15_000;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoSkipped<'a> {
    pub event: &'static str,
    pub execution_id: &'a str,
    pub repo: &'a str,
    pub branch: &'a str,
    pub revision: &'a str,
    pub reason: &'a str,
    pub newer_revision: Option<&'a str>,
    /// The tag a release's skip is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<&'a str>,
    pub at_ms: i64,
}

/// Sends the notification as a step (once), signed with
/// `X-Sluice-Signature-256: sha256=<hmac of the body under NOTIFY_SECRET>`.
/// Returns whether it was delivered; a failure is logged in the journal,
/// not raised.
pub async fn auto_skipped(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    n: &AutoSkipped<'_>,
) -> Result<bool, RunError> {
    let Some(target) = env.notify.clone() else {
        return Ok(false);
    };
    let body = serde_json::to_string(n).map_err(|e| RunError::InvalidInput {
        message: e.to_string(),
    })?;
    let cfg = StepConfig::default()
        .retries(NOTIFY_RETRIES, NOTIFY_RETRY_DELAY_MS, Backoff::Exponential)
        .timeout_ms(NOTIFY_TIMEOUT_MS);
    let event = n.event;
    let sent = ctx
        .step("notify", cfg, |_| {
            let (target, body) = (target.clone(), body.clone());
            async move {
                let mut headers = vec![
                    ("Content-Type".to_owned(), "application/json".to_owned()),
                    ("User-Agent".to_owned(), "sluice".to_owned()),
                    ("X-Sluice-Event".to_owned(), event.to_owned()),
                ];
                if let Some(secret) = &target.secret {
                    headers.push((
                        "X-Sluice-Signature-256".to_owned(),
                        sign(secret.expose().as_bytes(), body.as_bytes()),
                    ));
                }
                let req = HttpRequest {
                    method: "POST",
                    url: target.url.clone(),
                    headers,
                    body: Some(body),
                };
                match env.http.send(req).await {
                    Ok(r) if r.status < 300 => Ok(true),
                    Ok(r) => Err(FailureTag::NotifyFailed
                        .retryable(format!("notification endpoint answered {}", r.status))),
                    Err(m) => Err(FailureTag::NotifyFailed.retryable(m)),
                }
            }
        })
        .await;
    match sent {
        Ok(v) => Ok(v),
        Err(e) if e.is_suspension() || e == RunError::Terminated => Err(e),
        // The skip stands without its notification.
        Err(_) => Ok(false),
    }
}
