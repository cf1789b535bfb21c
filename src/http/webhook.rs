//! Webhook intake: headers, size, signature, decoding and the plan, as a
//! pure function over the request's parts. The Worker glue only reads the
//! request and carries the plan out.

use crate::engine::CreateRequest;
use crate::github::webhook::{self, Event, ParseError, SignatureError};
use crate::limits::WEBHOOK_BODY_BYTES_MAX;
use crate::runs::triggers::{self, Plan};

use super::error::ApiError;

/// The headers intake reads, as sent.
#[derive(Debug, Default, Clone)]
pub struct WebhookHeaders<'a> {
    pub event: Option<&'a str>,
    pub delivery: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub content_type: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Intake {
    /// Valid, signed, and not something Sluice acts on: 200, nothing written.
    Ignored { event: String, reason: String },
    Act {
        delivery: String,
        event: String,
        action: Option<String>,
        repo: Option<String>,
        creates: Vec<CreateRequest>,
    },
}

/// Delivery ids are GUIDs; anything this long is not one.
const DELIVERY_ID_CHARS_MAX: usize = 100;

/// A declared Content-Length over the limit is refused before the body is
/// read.
pub fn check_declared_length(content_length: Option<&str>) -> Result<(), ApiError> {
    match content_length.and_then(|v| v.trim().parse::<u64>().ok()) {
        Some(n) if n > WEBHOOK_BODY_BYTES_MAX as u64 => Err(too_large()),
        _ => Ok(()),
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        413,
        "payload_too_large",
        format!("webhook bodies are at most {WEBHOOK_BODY_BYTES_MAX} bytes"),
    )
}

pub fn intake(
    h: &WebhookHeaders<'_>,
    body: &[u8],
    secret: Option<&str>,
) -> Result<Intake, ApiError> {
    let secret = secret.filter(|s| !s.is_empty()).ok_or_else(|| {
        ApiError::new(
            503,
            "not_configured",
            "GITHUB_WEBHOOK_SECRET is not set; Sluice cannot verify webhooks",
        )
    })?;
    let event = h.event.filter(|e| !e.is_empty()).ok_or_else(|| {
        ApiError::bad_request("missing_event", "X-GitHub-Event header is required")
    })?;
    let delivery = h
        .delivery
        .filter(|d| !d.is_empty() && d.len() <= DELIVERY_ID_CHARS_MAX)
        .ok_or_else(|| {
            ApiError::bad_request("missing_delivery", "X-GitHub-Delivery header is required")
        })?;
    let media = h
        .content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media != "application/json" {
        return Err(ApiError::new(
            415,
            "unsupported_media_type",
            "webhooks must be sent as application/json (set the App's webhook content type to JSON)",
        ));
    }
    if body.len() > WEBHOOK_BODY_BYTES_MAX {
        return Err(too_large());
    }
    webhook::verify_signature(secret.as_bytes(), body, h.signature).map_err(|e| match e {
        SignatureError::Missing => ApiError::new(
            401,
            "missing_signature",
            "X-Hub-Signature-256 header is required",
        ),
        SignatureError::Malformed => ApiError::new(
            401,
            "bad_signature",
            "X-Hub-Signature-256 is not sha256=<hex>",
        ),
        SignatureError::Mismatch => ApiError::new(
            401,
            "bad_signature",
            "X-Hub-Signature-256 does not match the body",
        ),
    })?;
    let parsed = webhook::parse(event, body).map_err(|e| match e {
        ParseError::BadJson(_) => ApiError::bad_request("bad_json", e.to_string()),
        ParseError::WrongShape { .. } => ApiError::new(422, "wrong_shape", e.to_string()),
    })?;
    let (action, repo) = match &parsed {
        Event::PullRequest(pr) => (
            Some(pr.action.clone()),
            Some(pr.repository.full_name.clone()),
        ),
        Event::Push(p) => (None, Some(p.repository.full_name.clone())),
        _ => (None, None),
    };
    match triggers::plan(&parsed) {
        Plan::Ignore(reason) => Ok(Intake::Ignored {
            event: event.to_owned(),
            reason,
        }),
        Plan::Create(creates) => Ok(Intake::Act {
            delivery: delivery.to_owned(),
            event: event.to_owned(),
            action,
            repo,
            creates,
        }),
    }
}
