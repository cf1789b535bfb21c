//! Webhook intake: headers, size, signature, decoding and the plan, as a
//! pure function over the request's parts. The Worker glue only reads the
//! request and carries the plan out.

use serde_json::{json, Value};

use crate::engine::{CreateRequest, Created};
use crate::github::webhook::{self, Event, ParseError, SignatureError};
use crate::limits::WEBHOOK_BODY_BYTES_MAX;
use crate::obs::{self, Kind, Subject};
use crate::runs::triggers::{
    self, EventSend, Plan, PlanContext, Rerun, RerunOf, RerunSource, RouteKey, RoutedEvent,
};
use crate::store::executions::{self, DeliveryRow};
use crate::store::releases;
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
        /// Events for existing instances (a pressed check-run button).
        sends: Vec<EventSend>,
        /// Events for the instance an index names (a release's decision).
        routes: Vec<RoutedEvent>,
        /// Fresh attempts of existing runs, resolved in `accept`.
        reruns: Vec<Rerun>,
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

/// Reads a request body in chunks, refusing it (413) as soon as it passes
/// the limit: a chunked body without Content-Length is never buffered
/// whole first.
pub async fn read_capped<S, E>(mut chunks: S, limit: usize) -> Result<Vec<u8>, ApiError>
where
    S: futures_util::Stream<Item = Result<Vec<u8>, E>> + Unpin,
    E: std::fmt::Display,
{
    use futures_util::StreamExt;
    let mut body = Vec::new();
    // Bounded by `limit`: every pass adds a non-empty chunk or ends.
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Decides what a delivery asks for. `not_before_ms` is the oldest event
/// still acted on: deliveries are remembered for the retention only, so an
/// event older than that (a captured delivery replayed once its record was
/// purged) is refused by its own signed timestamp.
pub fn intake(
    h: &WebhookHeaders<'_>,
    body: &[u8],
    cfg: &IntakeConfig<'_>,
) -> Result<Intake, ApiError> {
    let (event, delivery) = required_headers(h, cfg.secret, body.len())?;
    verify_either(cfg, body, h.signature)?;
    let not_before_ms = cfg.not_before_ms;
    let parsed = webhook::parse(event, body).map_err(|e| match e {
        ParseError::BadJson(_) => ApiError::bad_request("bad_json", e.to_string()),
        ParseError::WrongShape { .. } => ApiError::new(422, "wrong_shape", e.to_string()),
    })?;
    if let Some(at) = parsed.occurred_ms().filter(|at| *at < not_before_ms) {
        return Err(ApiError::new(
            422,
            "stale_delivery",
            format!(
                "the event happened at {at} ms, before the oldest Sluice still acts on \
                 ({not_before_ms} ms, the delivery retention): a replay is refused"
            ),
        ));
    }
    let (action, repo) = match &parsed {
        Event::PullRequest(pr) => (
            Some(pr.action.clone()),
            Some(pr.repository.full_name.clone()),
        ),
        Event::Push(p) => (None, Some(p.repository.full_name.clone())),
        Event::CheckRun(c) => (Some(c.action.clone()), Some(c.repository.full_name.clone())),
        Event::CheckSuite(c) => (Some(c.action.clone()), Some(c.repository.full_name.clone())),
        _ => (None, None),
    };
    let context = PlanContext {
        app_id: cfg.app_id,
        app_slug: cfg.app_slug,
    };
    match triggers::plan(&parsed, &context) {
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
            sends: Vec::new(),
            routes: Vec::new(),
            reruns: Vec::new(),
        }),
        Plan::Send(sends) => Ok(Intake::Act {
            delivery: delivery.to_owned(),
            event: event.to_owned(),
            action,
            repo,
            creates: Vec::new(),
            sends,
            routes: Vec::new(),
            reruns: Vec::new(),
        }),
        Plan::Route(routes) => Ok(Intake::Act {
            delivery: delivery.to_owned(),
            event: event.to_owned(),
            action,
            repo,
            creates: Vec::new(),
            sends: Vec::new(),
            routes,
            reruns: Vec::new(),
        }),
        Plan::Rerun(reruns) => Ok(Intake::Act {
            delivery: delivery.to_owned(),
            event: event.to_owned(),
            action,
            repo,
            creates: Vec::new(),
            sends: Vec::new(),
            routes: Vec::new(),
            reruns,
        }),
    }
}

/// The most runs one commit's "Re-run all" repeats: a check per pull
/// request of the commit and its deploy lanes, far fewer in practice.
pub const RERUNS_PER_COMMIT_MAX: u32 = 20;

/// The instances re-runs ask for, made from the runs they repeat as the
/// index records them; a run past retention (or never Sluice's) is gone,
/// so a replayed old delivery re-runs nothing.
async fn resolve_reruns(
    db: &dyn Database,
    reruns: &[Rerun],
) -> Result<Vec<CreateRequest>, ApiError> {
    let mut out = Vec::new();
    for r in reruns {
        let rows = match &r.of {
            RerunOf::Instance(id) => executions::get(db, id).await?.into_iter().collect(),
            RerunOf::Commit { repo, sha } => {
                executions::runs_of_commit(db, repo, sha, RERUNS_PER_COMMIT_MAX).await?
            }
        };
        let mut seen = std::collections::BTreeSet::new();
        for row in rows.iter().rev() {
            // The newest attempt of each run, once.
            if !seen.insert(triggers::base_key(&row.key).to_owned()) {
                continue;
            }
            let source = RerunSource {
                key: &row.key,
                run: &row.run,
                input_json: &row.input_json,
                repo: row.repo.as_deref(),
                entity: row.entity.as_deref(),
                sha: row.sha.as_deref(),
            };
            out.extend(triggers::rerun_create(&source, &r.attempt));
        }
    }
    Ok(out)
}

/// What intake checks a delivery against: the operator's configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct IntakeConfig<'a> {
    /// `GITHUB_WEBHOOK_SECRET`.
    pub secret: Option<&'a str>,
    /// `GITHUB_WEBHOOK_SECRET_PREVIOUS`: accepted too while an operator
    /// rotates the App's secret, so no delivery is dropped meanwhile.
    pub previous_secret: Option<&'a str>,
    /// The oldest event acted on (now minus the delivery retention).
    pub not_before_ms: i64,
    /// The App's id: check runs of other Apps start nothing.
    pub app_id: Option<&'a str>,
    /// The App's slug: events its own bot user causes start nothing.
    pub app_slug: Option<&'a str>,
}

/// The signature under the secret, or under the previous one.
fn verify_either(
    cfg: &IntakeConfig<'_>,
    body: &[u8],
    signature: Option<&str>,
) -> Result<(), ApiError> {
    let current = cfg.secret.unwrap_or_default();
    match webhook::verify_signature(current.as_bytes(), body, signature) {
        Err(SignatureError::Mismatch) => match cfg.previous_secret.filter(|p| !p.is_empty()) {
            Some(previous) => webhook::verify_signature(previous.as_bytes(), body, signature)
                .map_err(signature_error),
            None => Err(signature_error(SignatureError::Mismatch)),
        },
        other => other.map_err(signature_error),
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
    /// Sends an event; false when the instance is unknown or has ended
    /// (a button pressed on a finished check run does nothing).
    async fn send(&self, event: &EventSend) -> Result<bool, ApiError>;
}

/// What `accept` answers, and the instances whose objects must still be
/// asked to create them: after the answer (the Worker's `waitUntil`), so
/// a burst of deliveries is acknowledged at the speed of one D1 batch.
pub struct Accepted {
    pub status: u16,
    pub body: Value,
    pub create_after: Vec<CreateRequest>,
}

/// Carries out an intake: a delivery already acted on answers with the
/// instances it created and creates nothing (GitHub redelivers with the
/// same GUID). Otherwise its instances' index rows and the delivery's
/// record are written in ONE batch (all or none: a delivery is never
/// recorded without its instances), events are sent, and the answer names
/// the instances; their objects are created after it (`create_after`).
/// An object whose create never arrives is recreated by the cron sweep
/// from its row (due now, so overdue within `SWEEP_OVERDUE_MS`): nothing
/// acknowledged is lost.
pub async fn accept(
    db: &dyn Database,
    creator: &dyn InstanceCreator,
    intake: Intake,
    now_ms: i64,
    request_id: &str,
) -> Result<Accepted, ApiError> {
    let act = match intake {
        Intake::Ignored { event, reason } => {
            let body = json!({ "ignored": true, "event": event, "reason": reason });
            return Ok(Accepted {
                status: 200,
                body,
                create_after: Vec::new(),
            });
        }
        Intake::Act {
            delivery,
            event,
            action,
            repo,
            creates,
            sends,
            routes,
            reruns,
        } => Act {
            delivery,
            event,
            action,
            repo,
            creates,
            sends,
            routes,
            reruns,
        },
    };
    let received = obs::event(Kind::DeliveryReceived)
        .request(request_id)
        .field("delivery", act.delivery.as_str())
        .field("github_event", act.event.as_str())
        .field("action", act.action.clone())
        .field("repo", act.repo.clone());
    let delivery = act.delivery.clone();
    match carry_out(db, creator, act, now_ms).await {
        Ok(Outcome::Duplicate(prev)) => Ok(duplicate(received, &delivery, prev)),
        Ok(Outcome::Recorded(accepted, sends)) => {
            // One line a delivery, naming the instances it created (a
            // burst's logging is a cost of its own: each line crosses to
            // the log sink).
            let created: Vec<&str> = accepted.body["instances"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|i| i["created"] == true)
                .filter_map(|i| i["id"].as_str())
                .collect();
            received
                .field("duplicate", false)
                .field("creates", accepted.create_after.len())
                .field("created_ids", json!(created))
                .field("sends", sends)
                .emit();
            Ok(accepted)
        }
        Err(e) => {
            // The line is written for a delivery that failed too (GitHub
            // shows it failed; the operator finds why by its id).
            received.field("failed", e.code).emit();
            Err(e)
        }
    }
}

/// A delivery Sluice acts on, as intake planned it.
struct Act {
    delivery: String,
    event: String,
    action: Option<String>,
    repo: Option<String>,
    creates: Vec<CreateRequest>,
    sends: Vec<EventSend>,
    routes: Vec<RoutedEvent>,
    reruns: Vec<Rerun>,
}

enum Outcome {
    /// Acted on already: what its first arrival recorded.
    Duplicate(Option<DeliveryRow>),
    /// Recorded now: the answer, and how many events were sent.
    Recorded(Accepted, usize),
}

/// Sends the delivery's events and records it with its instances' rows.
async fn carry_out(
    db: &dyn Database,
    creator: &dyn InstanceCreator,
    act: Act,
    now_ms: i64,
) -> Result<Outcome, ApiError> {
    let Act {
        delivery,
        event,
        action,
        repo,
        mut creates,
        mut sends,
        routes,
        reruns,
    } = act;
    // A delivery that only creates needs no lookup first: its record batch
    // inserts nothing when the delivery is known (one D1 round trip on the
    // ack path). One that sends events looks first, so a redelivery never
    // sends them again.
    let creates_only = sends.is_empty() && routes.is_empty() && reruns.is_empty();
    if !creates_only {
        if let Some(prev) = executions::delivery(db, &delivery).await? {
            return Ok(Outcome::Duplicate(Some(prev)));
        }
    }
    // A decision's instance is looked up in the index, never scanned for;
    // one nobody waits on (decided already, not Sluice's) is dropped.
    sends.extend(routed(db, &routes, now_ms).await?);
    creates.extend(resolve_reruns(db, &reruns).await?);
    // Events first: the delivery is recorded only once they were sent, so
    // a redelivery after a failure sends them again.
    let mut sent = Vec::with_capacity(sends.len());
    for e in &sends {
        let delivered = creator.send(e).await?;
        sent.push(json!({ "id": e.instance_id, "event": e.event_type, "delivered": delivered }));
    }
    let row = delivery_row(&delivery, &event, &action, &repo, &creates, &sent, now_ms);
    let Some(mut instances) = record(db, &creates, &row, now_ms).await? else {
        // Recorded meanwhile (a redelivery racing this one): it created.
        return Ok(Outcome::Duplicate(
            executions::delivery(db, &delivery).await?,
        ));
    };
    instances.extend(sent);
    let body = json!({ "delivery": delivery, "duplicate": false, "instances": instances });
    let accepted = Accepted {
        status: 202,
        body,
        create_after: creates,
    };
    Ok(Outcome::Recorded(accepted, sends.len()))
}

/// The answer to a delivery acted on already: the instances its first
/// arrival named (GitHub redelivers with the same GUID); nothing created.
fn duplicate(received: obs::Event, delivery: &str, prev: Option<DeliveryRow>) -> Accepted {
    received.field("duplicate", true).emit();
    let instances: Value = prev
        .and_then(|p| serde_json::from_str(&p.instance_ids_json).ok())
        .unwrap_or(Value::Null);
    let body = json!({ "delivery": delivery, "duplicate": true, "instances": instances });
    Accepted {
        status: 202,
        body,
        create_after: Vec::new(),
    }
}

/// The delivery's record: the instances it names, as a redelivery answers.
fn delivery_row(
    delivery: &str,
    event: &str,
    action: &Option<String>,
    repo: &Option<String>,
    creates: &[CreateRequest],
    sent: &[Value],
    now_ms: i64,
) -> DeliveryRow {
    let recorded: Vec<Value> = creates
        .iter()
        .map(|c| json!({ "id": c.id().as_str(), "run": c.run, "created": false }))
        .chain(
            sent.iter()
                .map(|i| json!({ "id": i["id"], "run": Value::Null, "created": false })),
        )
        .collect();
    DeliveryRow {
        delivery_id: delivery.to_owned(),
        event: event.to_owned(),
        action: action.clone(),
        repo: repo.clone(),
        instance_ids_json: Value::Array(recorded).to_string(),
        received_ms: now_ms,
    }
}

/// Writes the instances' rows and the delivery's record in one batch;
/// returns the instances as the answer names them (created: the row is
/// new), or None when the delivery was recorded already (nothing written).
async fn record(
    db: &dyn Database,
    creates: &[CreateRequest],
    row: &DeliveryRow,
    now_ms: i64,
) -> Result<Option<Vec<Value>>, ApiError> {
    let ids: Vec<_> = creates.iter().map(CreateRequest::id).collect();
    let inputs: Vec<String> = creates.iter().map(|c| c.input.to_string()).collect();
    let mut stmts: Vec<_> = creates
        .iter()
        .zip(ids.iter().zip(&inputs))
        .map(|(c, (id, input_json))| {
            let r = executions::Requested {
                id: id.as_str(),
                key: &c.key,
                run: &c.run,
                repo: c.repo.as_deref(),
                entity: c.entity.as_deref(),
                sha: c.sha.as_deref(),
                input_json,
            };
            executions::insert_requested_stmt(&r, now_ms, &row.delivery_id)
        })
        .collect();
    stmts.push(executions::record_delivery_stmt(row));
    let changes = db.batch(stmts).await?;
    if changes.last() != Some(&1) {
        return Ok(None);
    }
    let mut instances = Vec::with_capacity(creates.len());
    for (i, c) in creates.iter().enumerate() {
        let created = changes.get(i) == Some(&1);
        instances.push(json!({ "id": ids[i].as_str(), "run": c.run, "created": created }));
    }
    Ok(Some(instances))
}

/// The sends that routed events resolve to: the instance each waits on.
async fn routed(
    db: &dyn Database,
    routes: &[RoutedEvent],
    now_ms: i64,
) -> Result<Vec<EventSend>, ApiError> {
    let mut sends = Vec::with_capacity(routes.len());
    for r in routes {
        // Only a wait still open takes a decision: one that arrives after
        // the deadline decides nothing, even before the timeout pass ran.
        let found = match r.by {
            RouteKey::Pull(n) => releases::waiting_on_pull(db, &r.repo, n, now_ms).await?,
            RouteKey::CheckRun(id) => {
                releases::waiting_on_check_run(db, &r.repo, id, now_ms).await?
            }
        };
        sends.extend(found.map(|instance_id| EventSend {
            instance_id,
            event_type: r.event_type.clone(),
            payload: r.payload.clone(),
        }));
    }
    Ok(sends)
}

/// The line of an instance an API request created (an existing id creates
/// nothing and writes nothing); a delivery's are named in its
/// `delivery_received` line.
pub fn log_created(c: &CreateRequest, created: &Created, request_id: &str) {
    if !created.created {
        return;
    }
    let subject = Subject {
        instance_id: created.id.clone(),
        run: Some(c.run.clone()),
        repo: c.repo.clone(),
    };
    obs::event(Kind::InstanceCreated)
        .about(&subject)
        .request(request_id)
        .field("key", c.key.as_str())
        .field("entity", c.entity.clone())
        .field("sha", c.sha.clone())
        .emit();
}
