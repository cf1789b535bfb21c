//! Webhook intake: headers, size, signature, decoding and the plan, as a
//! pure function over the request's parts. The Worker glue only reads the
//! request and carries the plan out.

use serde_json::{json, Value};

use crate::engine::{CreateRequest, Created};
use crate::github::webhook::{self, Event, ParseError, SignatureError};
use crate::limits::WEBHOOK_BODY_BYTES_MAX;
use crate::runs::triggers::{self, Plan};
use crate::store::executions::{self, DeliveryRow};
use crate::store::Database;

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
    let (event, delivery) = required_headers(h, secret, body.len())?;
    let secret = secret.unwrap_or_default();
    webhook::verify_signature(secret.as_bytes(), body, h.signature).map_err(signature_error)?;
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

/// The configuration, the headers and the size a delivery must have before
/// its signature is checked: the event name and the delivery id.
fn required_headers<'h>(
    h: &WebhookHeaders<'h>,
    secret: Option<&str>,
    body_bytes: usize,
) -> Result<(&'h str, &'h str), ApiError> {
    if secret.is_none_or(str::is_empty) {
        return Err(ApiError::new(
            503,
            "not_configured",
            "GITHUB_WEBHOOK_SECRET is not set; Sluice cannot verify webhooks",
        ));
    }
    let event = h.event.filter(|e| !e.is_empty()).ok_or_else(|| {
        ApiError::bad_request("missing_event", "X-GitHub-Event header is required")
    })?;
    let delivery = h
        .delivery
        .filter(|d| !d.is_empty() && d.len() <= DELIVERY_ID_CHARS_MAX)
        .ok_or_else(|| {
            ApiError::bad_request("missing_delivery", "X-GitHub-Delivery header is required")
        })?;
    let media = h.content_type.unwrap_or("").split(';').next().unwrap_or("");
    if !media.trim().eq_ignore_ascii_case("application/json") {
        return Err(ApiError::new(
            415,
            "unsupported_media_type",
            "webhooks must be sent as application/json (set the App's webhook content type to JSON)",
        ));
    }
    if body_bytes > WEBHOOK_BODY_BYTES_MAX {
        return Err(too_large());
    }
    Ok((event, delivery))
}

fn signature_error(e: SignatureError) -> ApiError {
    match e {
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
    }
}

/// Creates the instances a delivery asks for (the Worker: through their
/// Durable Objects; creating an existing id finds it).
#[async_trait::async_trait(?Send)]
pub trait InstanceCreator {
    async fn create(&self, req: &CreateRequest) -> Result<Created, ApiError>;
}

/// Carries out an intake: a delivery already acted on answers with the
/// instances it created and creates nothing (GitHub redelivers with the
/// same GUID); otherwise every instance is created, then the delivery is
/// recorded (only after all, so one that died half way is not mistaken for
/// a done one). Returns the status and body of the answer.
pub async fn accept(
    db: &dyn Database,
    creator: &dyn InstanceCreator,
    intake: Intake,
    now_ms: i64,
) -> Result<(u16, Value), ApiError> {
    let (delivery, event, action, repo, creates) = match intake {
        Intake::Ignored { event, reason } => {
            return Ok((
                200,
                json!({ "ignored": true, "event": event, "reason": reason }),
            ))
        }
        Intake::Act {
            delivery,
            event,
            action,
            repo,
            creates,
        } => (delivery, event, action, repo, creates),
    };
    if let Some(prev) = executions::delivery(db, &delivery).await? {
        let instances: Value = serde_json::from_str(&prev.instance_ids_json).unwrap_or(Value::Null);
        return Ok((
            202,
            json!({ "delivery": delivery, "duplicate": true, "instances": instances }),
        ));
    }
    let mut instances = Vec::with_capacity(creates.len());
    for c in &creates {
        let created = creator.create(c).await?;
        instances.push(json!({ "id": created.id, "run": c.run, "created": created.created }));
    }
    let recorded: Vec<Value> = instances
        .iter()
        .map(|i| json!({ "id": i["id"], "run": i["run"], "created": false }))
        .collect();
    let row = DeliveryRow {
        delivery_id: delivery.clone(),
        event,
        action,
        repo,
        instance_ids_json: Value::Array(recorded).to_string(),
        received_ms: now_ms,
    };
    executions::record_delivery(db, &row).await?;
    Ok((
        202,
        json!({ "delivery": delivery, "duplicate": false, "instances": instances }),
    ))
}
