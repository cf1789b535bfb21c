//! Webhook intake: headers, size, signature, decoding and the plan, as a
//! pure function over the request's parts. The Worker glue only reads the
//! request and carries the plan out.

use serde::Serialize;
use serde_json::{json, Value};

use crate::engine::{CreateRequest, Created, InstanceId};
use crate::github::webhook::{self, BodyMac, Event, ParseError, Signature, SignatureError};
use crate::obs::{self, Kind, Subject};
use crate::runs::kit::pipeline::JobsRerun;
use crate::runs::triggers::{
    self, EventSend, Plan, PlanContext, Rerun, RerunOf, RerunSource, RouteKey, RoutedEvent,
};
use crate::store::executions::{self, DeliveryRow, ExecutionRow};
use crate::store::releases;
use crate::store::Database;

use super::body::{Body, BodyLimit};
use super::error::ApiError;

/// The headers intake reads, as sent.
#[derive(Debug, Default, Clone)]
pub struct WebhookHeaders<'a> {
    pub event: Option<&'a str>,
    pub delivery: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub content_length: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Intake {
    /// Valid, signed, and not something Sluice acts on: 200, nothing written.
    Ignored { event: String, reason: String },
    /// A delivery Sluice acts on, as planning decided.
    Act(Delivery),
}

/// A delivery Sluice acts on: what GitHub sent, and what it asks for. It
/// travels as this one value from planning (`plan_verified`) to the
/// delivery's record, its answer and its log line (`accept`).
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub delivery: String,
    pub event: String,
    pub action: Option<String>,
    pub repo: Option<String>,
    pub planned: Planned,
}

/// What a delivery asks for: one kind of action (`triggers::Plan` less
/// the deliveries it ignores).
#[derive(Debug, Clone, PartialEq)]
pub enum Planned {
    /// New instances.
    Create(Vec<CreateRequest>),
    /// Events for existing instances (a pressed check-run button).
    Send(Vec<EventSend>),
    /// Events for the instance an index names (a release's decision).
    Route(Vec<RoutedEvent>),
    /// Fresh attempts of existing runs, resolved in `accept`.
    Rerun(Vec<Rerun>),
}

impl Planned {
    /// The new instances it asks for, if it asks for instances.
    pub fn creates(&self) -> &[CreateRequest] {
        match self {
            Planned::Create(c) => c,
            _ => &[],
        }
    }
}

/// One instance a delivery named, as its answer, its record and its log
/// line name it: serialized once into each.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
enum Named {
    /// An instance it asked for: `created` when its row is new.
    Instance {
        id: InstanceId,
        run: String,
        created: bool,
    },
    /// An instance it sent an event.
    Sent {
        id: String,
        event: String,
        delivered: bool,
    },
}

impl Named {
    /// As the delivery's record keeps it, for a redelivery's answer: a
    /// redelivery created nothing, and an event's instance has no run.
    fn recorded(&self) -> Value {
        match self {
            Named::Instance { id, run, .. } => json!({ "id": id, "run": run, "created": false }),
            Named::Sent { id, .. } => json!({ "id": id, "run": Value::Null, "created": false }),
        }
    }
}

/// Delivery ids are GUIDs; anything this long is not one.
const DELIVERY_ID_CHARS_MAX: usize = 100;

/// A declared Content-Length over the webhook limit is refused before the
/// body is read.
pub fn check_declared_length(content_length: Option<&str>) -> Result<(), ApiError> {
    BodyLimit::WEBHOOK.declared(content_length).map(|_| ())
}

/// What a delivery's headers say, checked before a byte of its body is
/// read: anything without the App's configuration, an event name, a
/// delivery id, a JSON content type, a well-formed `X-Hub-Signature-256`
/// and a declared length within GitHub's cap is not GitHub's, and is
/// refused without buffering anything.
#[derive(Debug, Clone)]
pub struct Preflight<'h> {
    pub event: &'h str,
    pub delivery: &'h str,
    signature: Signature,
    declared_bytes: Option<usize>,
}

/// Checks a delivery's headers (see [`Preflight`]).
pub fn preflight<'h>(
    h: &WebhookHeaders<'h>,
    cfg: &IntakeConfig<'_>,
) -> Result<Preflight<'h>, ApiError> {
    if cfg.secret.is_none_or(str::is_empty) {
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
    let signature = webhook::parse_signature(h.signature).map_err(signature_error)?;
    let declared_bytes = BodyLimit::WEBHOOK.declared(h.content_length)?;
    Ok(Preflight {
        event,
        delivery,
        signature,
        declared_bytes,
    })
}

/// A webhook body as it streams in: every chunk goes into the HMAC under
/// each accepted secret and into the body's parts, and the body is refused
/// (413) the moment it passes GitHub's cap. Its bytes are handed on only
/// once the signature matched.
pub struct SignedBody {
    macs: Vec<BodyMac>,
    body: Body,
    signature: Signature,
}

impl SignedBody {
    pub fn new(pre: &Preflight<'_>, cfg: &IntakeConfig<'_>) -> SignedBody {
        let macs = [cfg.secret, cfg.previous_secret]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .map(|s| BodyMac::new(s.as_bytes()))
            .collect();
        SignedBody {
            macs,
            body: Body::new(BodyLimit::WEBHOOK, pre.declared_bytes),
            signature: pre.signature,
        }
    }

    pub fn push(&mut self, chunk: &[u8]) -> Result<(), ApiError> {
        self.body.extend(chunk)?;
        for mac in &mut self.macs {
            mac.update(chunk);
        }
        Ok(())
    }

    /// The body, once its signature matched the secret or the previous one.
    pub fn verified(self) -> Result<Body, ApiError> {
        let signature = self.signature;
        if self.macs.into_iter().any(|m| m.matches(&signature)) {
            Ok(self.body)
        } else {
            Err(signature_error(SignatureError::Mismatch))
        }
    }
}

/// Streams a delivery's body into its signature check (see [`SignedBody`]).
pub async fn read_signed<S, E>(
    mut chunks: S,
    pre: &Preflight<'_>,
    cfg: &IntakeConfig<'_>,
) -> Result<Body, ApiError>
where
    S: futures_util::Stream<Item = Result<Vec<u8>, E>> + Unpin,
    E: std::fmt::Display,
{
    use futures_util::StreamExt;
    let mut signed = SignedBody::new(pre, cfg);
    // Bounded by the webhook cap: every chunk adds bytes until the stream
    // ends or the body passes the cap.
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
        signed.push(&chunk)?;
    }
    signed.verified()
}

/// Decides what a delivery asks for, in one call, from a body already in
/// memory: [`preflight`], the signature, then [`plan_verified`]. (The
/// Worker streams the body between the first two: [`read_signed`].)
pub fn intake(
    h: &WebhookHeaders<'_>,
    body: &[u8],
    cfg: &IntakeConfig<'_>,
) -> Result<Intake, ApiError> {
    let pre = preflight(h, cfg)?;
    let mut signed = SignedBody::new(&pre, cfg);
    signed.push(body)?;
    let body = signed.verified()?;
    plan_verified(&pre, &body, cfg)
}

/// Decodes a verified delivery and plans it. `not_before_ms` is the oldest
/// event still acted on: deliveries are remembered for the retention only,
/// so an event older than that (a captured delivery replayed once its
/// record was purged) is refused by its own signed timestamp.
pub fn plan_verified(
    pre: &Preflight<'_>,
    body: &Body,
    cfg: &IntakeConfig<'_>,
) -> Result<Intake, ApiError> {
    let (event, delivery) = (pre.event, pre.delivery);
    let decoded = match body.as_slice() {
        Some(bytes) => webhook::parse(event, bytes),
        None => webhook::parse_reader(event, body.reader()),
    };
    let parsed = decoded.map_err(|e| match e {
        ParseError::BadJson(_) => ApiError::bad_request("bad_json", e.to_string()),
        ParseError::WrongShape { .. } => ApiError::new(422, "wrong_shape", e.to_string()),
    })?;
    let not_before_ms = cfg.not_before_ms;
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
        Event::MergeGroup(g) => (Some(g.action.clone()), Some(g.repository.full_name.clone())),
        _ => (None, None),
    };
    let context = PlanContext {
        app_id: cfg.app_id,
        app_slug: cfg.app_slug,
    };
    let planned = match triggers::plan(&parsed, &context) {
        Plan::Ignore(reason) => {
            return Ok(Intake::Ignored {
                event: event.to_owned(),
                reason,
            })
        }
        Plan::Create(creates) => Planned::Create(creates),
        Plan::Send(sends) => Planned::Send(sends),
        Plan::Route(routes) => Planned::Route(routes),
        Plan::Rerun(reruns) => Planned::Rerun(reruns),
    };
    Ok(Intake::Act(Delivery {
        delivery: delivery.to_owned(),
        event: event.to_owned(),
        action,
        repo,
        planned,
    }))
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
        let (rows, job) = match &r.of {
            RerunOf::Instance(id) => {
                let row = executions::get(db, id).await?;
                match row
                    .as_ref()
                    .and_then(|u| triggers::unit_of(&u.run, &u.input_json))
                {
                    Some((parent, job)) => (newest_of(db, &parent).await?, Some(job)),
                    None => (row.into_iter().collect(), None),
                }
            }
            RerunOf::Commit { repo, sha } => (
                executions::runs_of_commit(db, repo, sha, RERUNS_PER_COMMIT_MAX).await?,
                None,
            ),
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
            // A pipeline's check (its output lists jobs, or a unit was
            // pressed) keeps the results of the jobs it does not re-run.
            let pipeline = job.is_some() || lists_jobs(row.output_json.as_deref());
            let jobs = pipeline.then(|| JobsRerun {
                of: row.id.clone(),
                job: job.clone(),
            });
            out.extend(triggers::pipeline_rerun_create(
                &source,
                &r.attempt,
                jobs.as_ref(),
            ));
        }
    }
    Ok(out)
}

fn lists_jobs(output_json: Option<&str>) -> bool {
    output_json
        .and_then(|o| serde_json::from_str::<Value>(o).ok())
        .is_some_and(|o| o.get("jobs").is_some())
}

/// The newest attempt of the commit's check `parent` (a unit's Re-run
/// repeats the pipeline as it stands now, after earlier re-runs).
async fn newest_of(db: &dyn Database, parent: &str) -> Result<Vec<ExecutionRow>, ApiError> {
    let Some(row) = executions::get(db, parent).await? else {
        return Ok(Vec::new());
    };
    let base = triggers::base_key(&row.key).to_owned();
    match executions::newest_attempt(db, &base).await? {
        Some((id, _)) if id != row.id => Ok(executions::get(db, &id).await?.into_iter().collect()),
        _ => Ok(vec![row]),
    }
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
        Intake::Act(act) => act,
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
        Ok(Outcome::Recorded(recorded)) => Ok(answer(received, recorded)),
        Err(e) => {
            // The line is written for a delivery that failed too (GitHub
            // shows it failed; the operator finds why by its id).
            received.field("failed", e.code).emit();
            Err(e)
        }
    }
}

/// A delivery recorded now: its log line (one a delivery, naming the
/// instances it created: a burst's logging is a cost of its own, each line
/// crossing to the log sink) and its answer, from the same named list.
fn answer(received: obs::Event, r: Recorded) -> Accepted {
    let created: Vec<&str> = r
        .named
        .iter()
        .filter_map(|n| match n {
            Named::Instance {
                id, created: true, ..
            } => Some(id.as_str()),
            _ => None,
        })
        .collect();
    received
        .field("duplicate", false)
        .field("creates", r.creates.len())
        .field("created_ids", json!(created))
        .field("sends", r.sends)
        .emit();
    let body = json!({ "delivery": r.delivery, "duplicate": false, "instances": r.named });
    Accepted {
        status: 202,
        body,
        create_after: r.creates,
    }
}

enum Outcome {
    /// Acted on already: what its first arrival recorded.
    Duplicate(Option<DeliveryRow>),
    Recorded(Recorded),
}

/// A delivery recorded now.
struct Recorded {
    delivery: String,
    /// Every instance it named: those it asked for, then those it sent.
    named: Vec<Named>,
    /// Instances whose objects are created after the answer.
    creates: Vec<CreateRequest>,
    /// Events sent.
    sends: usize,
}

/// What a delivery does, once routes and re-runs are resolved against the
/// index: instances to create and events to send.
struct Resolved {
    creates: Vec<CreateRequest>,
    sends: Vec<EventSend>,
}

async fn resolve(db: &dyn Database, planned: Planned, now_ms: i64) -> Result<Resolved, ApiError> {
    // A decision's instance is looked up in the index, never scanned for;
    // one nobody waits on (decided already, not Sluice's) is dropped.
    let (creates, sends) = match planned {
        Planned::Create(c) => (c, Vec::new()),
        Planned::Send(s) => (Vec::new(), s),
        Planned::Route(routes) => (Vec::new(), routed(db, &routes, now_ms).await?),
        Planned::Rerun(reruns) => (resolve_reruns(db, &reruns).await?, Vec::new()),
    };
    Ok(Resolved { creates, sends })
}

/// Sends the delivery's events and records it with its instances' rows.
async fn carry_out(
    db: &dyn Database,
    creator: &dyn InstanceCreator,
    act: Delivery,
    now_ms: i64,
) -> Result<Outcome, ApiError> {
    // A delivery that only creates needs no lookup first: its record batch
    // inserts nothing when the delivery is known (one D1 round trip on the
    // ack path). One that sends events looks first, so a redelivery never
    // sends them again.
    if !matches!(act.planned, Planned::Create(_)) {
        if let Some(prev) = executions::delivery(db, &act.delivery).await? {
            return Ok(Outcome::Duplicate(Some(prev)));
        }
    }
    let Resolved { creates, sends } = resolve(db, act.planned, now_ms).await?;
    // Events first: the delivery is recorded only once they were sent, so
    // a redelivery after a failure sends them again.
    let mut sent = Vec::with_capacity(sends.len());
    for e in &sends {
        let delivered = creator.send(e).await?;
        sent.push(Named::Sent {
            id: e.instance_id.clone(),
            event: e.event_type.clone(),
            delivered,
        });
    }
    let mut named: Vec<Named> = creates
        .iter()
        .map(|c| Named::Instance {
            id: c.id(),
            run: c.run.clone(),
            created: false,
        })
        .chain(sent)
        .collect();
    let row = delivery_row(
        &act.delivery,
        &act.event,
        &act.action,
        &act.repo,
        &named,
        now_ms,
    );
    let Some(created) = record(db, &creates, &row, now_ms).await? else {
        // Recorded meanwhile (a redelivery racing this one): it created.
        return Ok(Outcome::Duplicate(
            executions::delivery(db, &act.delivery).await?,
        ));
    };
    // The batch that recorded the delivery wrote every row (or found it):
    // the objects' first passes write none of their own.
    let mut creates = creates;
    for c in &mut creates {
        c.indexed = true;
    }
    for (n, new) in named.iter_mut().zip(created) {
        if let Named::Instance { created, .. } = n {
            *created = new;
        }
    }
    Ok(Outcome::Recorded(Recorded {
        delivery: act.delivery,
        named,
        creates,
        sends: sends.len(),
    }))
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
    named: &[Named],
    now_ms: i64,
) -> DeliveryRow {
    let recorded: Vec<Value> = named.iter().map(Named::recorded).collect();
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
/// returns whether each instance's row is new, or None when the delivery
/// was recorded already (nothing written).
async fn record(
    db: &dyn Database,
    creates: &[CreateRequest],
    row: &DeliveryRow,
    now_ms: i64,
) -> Result<Option<Vec<bool>>, ApiError> {
    let ids: Vec<_> = creates.iter().map(CreateRequest::id).collect();
    let inputs: Vec<String> = creates.iter().map(|c| c.input.to_string()).collect();
    let mut stmts: Vec<_> = creates
        .iter()
        .zip(ids.iter().zip(&inputs))
        .map(|(c, (id, input))| {
            executions::insert_requested_stmt(&c.requested(id, input), now_ms, &row.delivery_id)
        })
        .collect();
    stmts.push(executions::record_delivery_stmt(row));
    let changes = db.batch(stmts).await?;
    if changes.last() != Some(&1) {
        return Ok(None);
    }
    Ok(Some(
        (0..creates.len())
            .map(|i| changes.get(i) == Some(&1))
            .collect(),
    ))
}

/// The sends that routed events resolve to: the instance each waits on.
async fn routed(
    db: &dyn Database,
    routes: &[RoutedEvent],
    now_ms: i64,
) -> Result<Vec<EventSend>, ApiError> {
    let mut sends = Vec::with_capacity(routes.len());
    for r in routes {
        // Only a wait still open takes a press; a merge or close GitHub
        // dated reaches it through its grace too, and the instance judges
        // it by that date. Anything else after the deadline decides
        // nothing, even before the timeout pass ran.
        let found = match r.by {
            RouteKey::Pull(n) => {
                releases::waiting_on_pull(db, &r.repo, n, now_ms, r.dated_ms.is_some()).await?
            }
            RouteKey::CheckRun(id) => {
                releases::waiting_on_check_run(db, &r.repo, id, now_ms).await?
            }
        };
        let Some(waiter) = found else { continue };
        // A named approver's answers count against the wait's own rounds;
        // anyone else's are bounded here, so nobody can spend its steps.
        if !waiter.names(&r.sender) && !releases::admit(db, &waiter, &r.sender).await? {
            continue;
        }
        sends.push(EventSend {
            instance_id: waiter.instance_id,
            event_type: r.event_type.clone(),
            payload: r.payload.clone(),
        });
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
