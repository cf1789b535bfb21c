//! The fetch handler: routes a request (`http::routes`), checks auth, and
//! carries out each route with the Worker's bindings; every failure becomes
//! one JSON error shape (`http::ApiError`), and a 5xx is logged with the
//! request id it names.

use serde::Deserialize;
use serde_json::{json, Value};
use worker::{Env, Request, Response, Result};

use crate::engine::{Clock, Command, CreateRequest, Created, InstanceId};
use crate::gates::policy::QueuePolicy;
use crate::gates::serial;
use crate::http::routes::{route, Route, RouteError};
use crate::http::webhook::{
    accept, check_declared_length, intake, read_capped, InstanceCreator, IntakeConfig,
    WebhookHeaders,
};
use crate::http::{check_admin, dispatch, ApiError};
use crate::limits::{
    EXECUTIONS_LISTED_MAX, STEPS_LISTED_MAX, STEP_RESULT_BYTES_MAX, WEBHOOK_BODY_BYTES_MAX,
};
use crate::runs::environment::Environments;
use crate::runs::gate::TURN_EVENT;
use crate::runs::loglink::{self, LinkError};
use crate::runs::triggers::EventSend;
use crate::runs::Waker;
use crate::store::executions::{self, ListFilter};

use super::bindings::{self, text};
use super::instances::{self, InstanceOp, InstanceWaker};
use super::platform::{WorkerClock, D1, R2};

/// Instances one `POST /v1/executions` batch may create: bounds one request.
const BATCH_CREATE_MAX: usize = 100;
/// Deliveries listed by `GET /v1/deliveries`.
const DELIVERIES_LISTED_MAX: u32 = 200;

type Answer = std::result::Result<Response, ApiError>;

pub async fn fetch(req: Request, env: Env) -> Result<Response> {
    let request_id = header(&req, "cf-ray")
        .unwrap_or_else(|| format!("{:012x}", (js_sys::Math::random() * 2f64.powi(48)) as u64));
    match dispatch(req, &env).await {
        Ok(resp) => Ok(resp),
        Err(e) => {
            if e.is_server_error() {
                worker::console_error!("[{request_id}] {} {}", e.code, e.message);
            }
            Ok(Response::from_json(&e.body(&request_id))?.with_status(e.status))
        }
    }
}

fn json_ok(status: u16, body: &Value) -> Answer {
    Response::from_json(body)
        .map(|r| r.with_status(status))
        .map_err(internal)
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(e.to_string())
}

fn header(req: &Request, name: &str) -> Option<String> {
    req.headers().get(name).ok().flatten()
}

async fn dispatch(mut req: Request, env: &Env) -> Answer {
    let method = req.method().to_string();
    let r = route(&method, &req.path()).map_err(|e| match e {
        RouteError::NotFound => ApiError::not_found(format!("no route for {}", req.path())),
        RouteError::MethodNotAllowed => ApiError::new(
            405,
            "method_not_allowed",
            format!("{method} is not allowed here"),
        ),
        RouteError::BadId(m) => ApiError::bad_request("bad_id", m),
    })?;
    // A log link carries its own signature.
    // A log link and a dispatch carry their own signatures.
    if !matches!(
        r,
        Route::Health | Route::Webhook | Route::Log(..) | Route::Dispatch
    ) {
        check_admin(
            header(&req, "Authorization").as_deref(),
            text(env, bindings::ADMIN_TOKEN).as_deref(),
        )?;
    }
    let db = D1(env.d1(bindings::DB).map_err(internal)?);
    let now = WorkerClock.now_ms();
    match r {
        Route::Health => json_ok(200, &json!({ "ok": true })),
        Route::Webhook => webhook(&mut req, env, &db).await,
        Route::ListExecutions => list_executions(&req, &db).await,
        Route::CreateExecution => create_executions(&mut req, env).await,
        Route::GetExecution(id) => get_execution(&db, &id).await,
        Route::SendEvent(id, event_type) => send_event(&mut req, env, &id, &event_type).await,
        Route::Command(id, cmd) => command(&mut req, env, &db, &id, cmd).await,
        Route::ListDeliveries => {
            let rows = executions::recent_deliveries(&db, DELIVERIES_LISTED_MAX).await?;
            json_ok(200, &json!({ "deliveries": rows }))
        }
        Route::Config => json_ok(200, &configuration(env)),
        Route::Log(instance, step) => log_page(&req, env, &instance, &step, now).await,
        Route::ListGroups => json_ok(200, &json!({ "groups": serial::groups(&db, now).await? })),
        // A group's policy lives in each commit's config; explain with the
        // ADR defaults for "times out in".
        Route::ExplainGroup(group) => json_ok(
            200,
            &json!(serial::explain(&db, &group, &QueuePolicy::default(), now).await?),
        ),
        Route::SkipAll(group) => skip_all(env, &db, &group, now).await,
        Route::Skip(id) => skip(env, &db, &id, now).await,
        Route::Dispatch => dispatch_run(&mut req, env, &db, now).await,
        Route::Setup => json_ok(200, &super::setup::report(env, &db).await),
    }
}

async fn list_executions(req: &Request, db: &D1) -> Answer {
    let filter: ListFilter = req
        .query()
        .map_err(|e| ApiError::bad_request("bad_query", e.to_string()))?;
    let rows = executions::list(db, &filter, EXECUTIONS_LISTED_MAX).await?;
    json_ok(200, &json!({ "executions": rows }))
}

/// A log behind its signed link, as plain text: 403 for a bad or expired
/// signature, 404 when nothing was stored (yet).
async fn log_page(
    req: &Request,
    env: &Env,
    instance: &InstanceId,
    step: &InstanceId,
    now: i64,
) -> Answer {
    let secret = bindings::secret(env, bindings::LOG_LINK_SECRET)
        .ok_or_else(|| ApiError::not_found("log links are not configured (LOG_LINK_SECRET)"))?;
    let url = req.url().map_err(internal)?;
    let path = loglink::path_of(instance.as_str(), step.as_str());
    loglink::verify(
        secret.expose().as_bytes(),
        &path,
        url.query().unwrap_or(""),
        now,
    )
    .map_err(|e| match e {
        LinkError::Expired => ApiError::new(403, "link_expired", "this log link has expired"),
        LinkError::BadSignature => {
            ApiError::new(403, "bad_signature", "this log link is not valid")
        }
    })?;
    let bucket = env.bucket(bindings::LOGS).map_err(internal)?;
    let key = loglink::log_key(instance.as_str(), step.as_str());
    let log = crate::runs::log::read(&R2(bucket), &key)
        .await
        .map_err(internal)?
        .ok_or_else(|| ApiError::not_found("no log is stored for this step (yet)"))?;
    let mut resp = Response::ok(log).map_err(internal)?;
    let headers = resp.headers_mut();
    for (name, value) in [
        ("Content-Type", "text/plain; charset=utf-8"),
        ("X-Content-Type-Options", "nosniff"),
        ("Content-Security-Policy", "default-src 'none'; sandbox"),
        ("Cache-Control", "private, no-store"),
        ("Referrer-Policy", "no-referrer"),
    ] {
        headers.set(name, value).map_err(internal)?;
    }
    Ok(resp)
}

/// The operator's configuration as the Worker reads it: environments with
/// the names of their secrets and whether each is set, never a value.
fn configuration(env: &Env) -> Value {
    let environments = Environments::parse(text(env, bindings::ENVIRONMENTS).as_deref());
    let declared: Vec<Value> = environments
        .iter()
        .map(|(name, e)| {
            let secrets: Vec<Value> = e
                .secrets
                .iter()
                .map(|s| json!({ "name": s, "set": bindings::secret(env, s).is_some() }))
                .collect();
            json!({ "name": name, "repos": e.repos, "branches": e.branches, "secrets": secrets })
        })
        .collect();
    json!({
        "environments": declared,
        "environments_error": environments.error(),
        "git_url": text(env, bindings::GITHUB_GIT_URL)
            .unwrap_or_else(|| crate::github::GIT_URL_DEFAULT.to_owned()),
    })
}

/// One create request, or an array of them (each created or found, in
/// order).
async fn create_executions(req: &mut Request, env: &Env) -> Answer {
    let body: Value = read_json(req).await?;
    let decode = |v: Value| {
        let c = serde_json::from_value::<CreateRequest>(v)
            .map_err(|e| ApiError::new(422, "wrong_shape", e.to_string()))?;
        crate::runs::registry::check_create(&c.run, &c.input)
            .map_err(|m| ApiError::new(422, "wrong_input", m))?;
        Ok::<_, ApiError>(c)
    };
    match body {
        Value::Array(items) => {
            if items.len() > BATCH_CREATE_MAX {
                return Err(ApiError::new(
                    413,
                    "batch_too_large",
                    format!("at most {BATCH_CREATE_MAX} instances per batch"),
                ));
            }
            let creates = items
                .into_iter()
                .map(decode)
                .collect::<std::result::Result<Vec<_>, _>>()?;
            let mut out = Vec::with_capacity(creates.len());
            for c in &creates {
                out.push(json!(instances::create(env, c).await?));
            }
            json_ok(200, &json!({ "instances": out }))
        }
        single => {
            let created = instances::create(env, &decode(single)?).await?;
            json_ok(if created.created { 201 } else { 200 }, &json!(created))
        }
    }
}

async fn get_execution(db: &D1, id: &InstanceId) -> Answer {
    let row = executions::get(db, id.as_str())
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no execution {id}")))?;
    let steps = executions::steps(db, id.as_str(), STEPS_LISTED_MAX).await?;
    json_ok(200, &json!({ "execution": row, "steps": steps }))
}

/// Straight to the instance (it answers 404 when it has no record): an
/// event is on the latency-critical path, so no D1 look-up first.
async fn send_event(req: &mut Request, env: &Env, id: &InstanceId, event_type: &str) -> Answer {
    let received_ms = WorkerClock.now_ms();
    check_event_length(header(req, "Content-Length").as_deref())?;
    let payload: Value = read_json(req).await?;
    let (status, value) = instances::event(env, id, event_type, &payload).await?;
    match status {
        202 => json_ok(
            202,
            &json!({ "accepted": true, "received_ms": received_ms }),
        ),
        _ => instance_answer(id, status, value),
    }
}

async fn command(req: &mut Request, env: &Env, db: &D1, id: &InstanceId, cmd: Command) -> Answer {
    ensure_exists(db, id).await?;
    let cmd = match cmd {
        Command::Restart { .. } => Command::Restart {
            from_step: restart_body(req).await?.from_step,
        },
        other => other,
    };
    let (status, value) = instances::request(env, id, InstanceOp::Command, &json!(cmd)).await?;
    instance_answer(id, status, value)
}

#[derive(Deserialize, Default)]
struct RestartBody {
    from_step: Option<String>,
}

/// `restart` takes an optional `{"from_step": "name"}`.
async fn restart_body(req: &mut Request) -> std::result::Result<RestartBody, ApiError> {
    let body = req.text().await.map_err(internal)?;
    if body.trim().is_empty() {
        return Ok(RestartBody::default());
    }
    serde_json::from_str(&body).map_err(|e| ApiError::bad_request("bad_json", e.to_string()))
}

async fn skip_all(env: &Env, db: &D1, group: &str, now: i64) -> Answer {
    let skipped = serial::skip_all(db, group, now).await?;
    let waker = InstanceWaker { env: env.clone() };
    // Best effort: a skipped waiter that misses its wake-up is told by the
    // sweep (it slept through the end of its row).
    for s in &skipped {
        let _ = waker
            .wake(serial::instance_of(&s.execution_id), TURN_EVENT)
            .await;
    }
    json_ok(200, &json!({ "skipped": skipped }))
}

async fn skip(env: &Env, db: &D1, id: &InstanceId, now: i64) -> Answer {
    if serial::skip_instance(db, id.as_str(), now)
        .await?
        .is_empty()
    {
        return Err(ApiError::new(
            409,
            "conflict",
            format!("{id} is not waiting in any serial group"),
        ));
    }
    let _ = InstanceWaker { env: env.clone() }
        .wake(id.as_str(), TURN_EVENT)
        .await;
    json_ok(200, &json!({ "skipped": id.as_str() }))
}

/// Maps an instance's answer to the API's.
fn instance_answer(id: &InstanceId, status: u16, value: Value) -> Answer {
    let message = |fallback: &str| value["error"].as_str().unwrap_or(fallback).to_owned();
    match status {
        s if s < 400 => json_ok(s, &value),
        404 => Err(ApiError::not_found(format!("no execution {id}"))),
        409 => Err(ApiError::new(409, "conflict", message("conflict"))),
        400 => Err(ApiError::bad_request("bad_request", message("bad request"))),
        413 => Err(ApiError::new(
            413,
            "payload_too_large",
            message("too large"),
        )),
        _ => Err(ApiError::internal(value.to_string())),
    }
}

/// An event's payload is journaled as its wait's result: over the step
/// result cap it is refused before it is read.
fn check_event_length(declared: Option<&str>) -> std::result::Result<(), ApiError> {
    let too_large = declared
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|n| n > STEP_RESULT_BYTES_MAX);
    if too_large {
        return Err(ApiError::new(
            413,
            "payload_too_large",
            format!("event payloads are at most {STEP_RESULT_BYTES_MAX} bytes"),
        ));
    }
    Ok(())
}

async fn read_json<T: for<'de> Deserialize<'de>>(
    req: &mut Request,
) -> std::result::Result<T, ApiError> {
    let body = req
        .text()
        .await
        .map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
    serde_json::from_str(&body).map_err(|e| ApiError::bad_request("bad_json", e.to_string()))
}

async fn ensure_exists(db: &D1, id: &InstanceId) -> std::result::Result<(), ApiError> {
    match executions::get(db, id.as_str()).await? {
        Some(_) => Ok(()),
        None => Err(ApiError::not_found(format!("no execution {id}"))),
    }
}

/// Creates through the instances' Durable Objects.
struct ObjectCreator<'a> {
    env: &'a Env,
}

#[async_trait::async_trait(?Send)]
impl InstanceCreator for ObjectCreator<'_> {
    async fn create(&self, req: &CreateRequest) -> std::result::Result<Created, ApiError> {
        instances::create(self.env, req).await
    }

    async fn send(&self, e: &EventSend) -> std::result::Result<bool, ApiError> {
        let id = InstanceId::parse(&e.instance_id)
            .map_err(|err| ApiError::bad_request("bad_id", err.to_string()))?;
        let (status, _) = instances::event(self.env, &id, &e.event_type, &e.payload).await?;
        Ok(status < 300)
    }
}

/// `POST /v1/dispatch`: checks the signature and its freshness, refuses a
/// replay, plans the run through GitHub, creates it, then remembers the
/// signature (after: a request that died half way can be sent again, and
/// its instance, named by the signature, is found rather than doubled).
async fn dispatch_run(req: &mut Request, env: &Env, db: &D1, now: i64) -> Answer {
    check_declared_length(header(req, "Content-Length").as_deref())?;
    let chunks = req
        .stream()
        .map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
    let body = read_capped(chunks, dispatch::DISPATCH_BODY_BYTES_MAX).await?;
    let signature = dispatch::verify(
        bindings::secret(env, bindings::DISPATCH_SECRET).as_ref(),
        header(req, dispatch::TIMESTAMP_HEADER).as_deref(),
        header(req, dispatch::SIGNATURE_HEADER).as_deref(),
        &body,
        now,
    )?;
    if crate::store::dispatch::was_used(db, &signature).await? {
        return Err(ApiError::new(
            401,
            "replayed",
            "this signed request was already used: sign a new one",
        ));
    }
    let asked = dispatch::parse(&body)?;
    dispatch::refuse_secret_values(&asked, &super::setup::secret_values(env))?;
    let parts = super::compose::run_env_parts(env);
    let create = dispatch::plan(&parts.github(&WorkerClock), &asked, &signature).await?;
    let created = instances::create(env, &create).await?;
    crate::store::dispatch::remember(db, &signature, &created.id, now).await?;
    json_ok(
        202,
        &json!({ "instance_id": created.id, "run": create.run, "created": created.created,
                 "sha": create.sha, "input": create.input }),
    )
}

async fn webhook(req: &mut Request, env: &Env, db: &D1) -> Answer {
    check_declared_length(header(req, "Content-Length").as_deref())?;
    let chunks = req
        .stream()
        .map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
    let body = read_capped(chunks, WEBHOOK_BODY_BYTES_MAX).await?;
    let (event, delivery, signature, content_type) = (
        header(req, "X-GitHub-Event"),
        header(req, "X-GitHub-Delivery"),
        header(req, "X-Hub-Signature-256"),
        header(req, "Content-Type"),
    );
    let headers = WebhookHeaders {
        event: event.as_deref(),
        delivery: delivery.as_deref(),
        signature: signature.as_deref(),
        content_type: content_type.as_deref(),
    };
    let secret = text(env, bindings::GITHUB_WEBHOOK_SECRET);
    let now = WorkerClock.now_ms();
    let not_before_ms = now - bindings::retention_ms(env);
    let previous = text(env, bindings::GITHUB_WEBHOOK_SECRET_PREVIOUS);
    let app_id = text(env, bindings::GITHUB_APP_ID);
    let app_slug = text(env, bindings::GITHUB_APP_SLUG);
    let cfg = IntakeConfig {
        secret: secret.as_deref(),
        previous_secret: previous.as_deref(),
        not_before_ms,
        app_id: app_id.as_deref(),
        app_slug: app_slug.as_deref(),
    };
    let planned = intake(&headers, &body, &cfg)?;
    let (status, answer) = accept(db, &ObjectCreator { env }, planned, now).await?;
    json_ok(status, &answer)
}
