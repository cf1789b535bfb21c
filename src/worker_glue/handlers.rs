//! The fetch handler: routes a request, carries out what `http` decided,
//! and turns every failure into one JSON error shape.

use serde::Deserialize;
use serde_json::{json, Value};
use worker::{Env, Method, Request, RequestInit, Response, Result};

use crate::engine::{Clock, Command, CreateRequest, Created, InstanceId};
use crate::gates::policy::QueuePolicy;
use crate::gates::serial;
use crate::github::app::private_key_pkcs8_der;
use crate::github::GitHub;
use crate::http::routes::{route, Route, RouteError};
use crate::http::webhook::{check_declared_length, intake, Intake, WebhookHeaders};
use crate::http::{check_admin, ApiError};
use crate::limits::POOL_CAPACITY_MAX;
use crate::limits::{EXECUTIONS_LISTED_MAX, STEPS_LISTED_MAX};
use crate::runs::gate::TURN_EVENT;
use crate::runs::{NotifyTarget, Registry, RunEnv, SecretSource, Waker};
use crate::sandbox::agent::AgentSandbox;
use crate::secret::Secret;
use crate::store::executions::{self, DeliveryRow, ListFilter};
use crate::store::Database;

use super::bindings::{self, text};
use super::container::ContainerTransport;
use super::platform::{FetchTransport, WebCryptoSigner, WorkerClock, D1, R2};

/// Instances one `POST /v1/executions` batch may create: bounds one request.
const BATCH_CREATE_MAX: usize = 100;

/// Deliveries listed by `GET /v1/deliveries`.
const DELIVERIES_LISTED_MAX: u32 = 200;

pub async fn fetch(req: Request, env: Env) -> Result<Response> {
    let request_id = req
        .headers()
        .get("cf-ray")
        .ok()
        .flatten()
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

fn json_ok(status: u16, body: &Value) -> std::result::Result<Response, ApiError> {
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

async fn dispatch(mut req: Request, env: &Env) -> std::result::Result<Response, ApiError> {
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
    if !matches!(r, Route::Health | Route::Webhook) {
        check_admin(
            header(&req, "Authorization").as_deref(),
            text(env, bindings::ADMIN_TOKEN).as_deref(),
        )?;
    }
    let db = D1(env.d1(bindings::DB).map_err(internal)?);
    match r {
        Route::Health => json_ok(200, &json!({ "ok": true })),
        Route::Webhook => webhook(&mut req, env, &db).await,
        Route::ListExecutions => {
            let filter: ListFilter = req
                .query()
                .map_err(|e| ApiError::bad_request("bad_query", e.to_string()))?;
            let rows = executions::list(&db, &filter, EXECUTIONS_LISTED_MAX).await?;
            json_ok(200, &json!({ "executions": rows }))
        }
        Route::CreateExecution => {
            let body: Value = read_json(&mut req).await?;
            let decode = |v: Value| {
                serde_json::from_value::<CreateRequest>(v)
                    .map_err(|e| ApiError::new(422, "wrong_shape", e.to_string()))
            };
            match body {
                // A batch: each created (or found) in order.
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
                        out.push(json!(create_instance(env, c).await?));
                    }
                    json_ok(200, &json!({ "instances": out }))
                }
                single => {
                    let created = create_instance(env, &decode(single)?).await?;
                    json_ok(if created.created { 201 } else { 200 }, &json!(created))
                }
            }
        }
        Route::GetExecution(id) => {
            let row = executions::get(&db, id.as_str())
                .await?
                .ok_or_else(|| ApiError::not_found(format!("no execution {id}")))?;
            let steps = executions::steps(&db, id.as_str(), STEPS_LISTED_MAX).await?;
            json_ok(200, &json!({ "execution": row, "steps": steps }))
        }
        Route::SendEvent(id, event_type) => {
            // Straight to the instance (it answers 404 when it has no
            // record): an event is on the latency-critical path, so no D1
            // look-up first.
            let received_ms = WorkerClock.now_ms();
            check_event_length(header(&req, "Content-Length").as_deref())?;
            let payload: Value = read_json(&mut req).await?;
            let (status, value) = instance_request(
                env,
                &id,
                "/event",
                &json!({ "type": event_type, "payload": payload }),
            )
            .await?;
            match status {
                202 => json_ok(
                    202,
                    &json!({ "accepted": true, "received_ms": received_ms }),
                ),
                _ => instance_answer(&id, status, value),
            }
        }
        Route::Command(id, cmd) => {
            ensure_exists(&db, &id).await?;
            let cmd = match cmd {
                Command::Restart { .. } => {
                    #[derive(Deserialize, Default)]
                    struct RestartBody {
                        from_step: Option<String>,
                    }
                    let body = req.text().await.map_err(internal)?;
                    let parsed: RestartBody = if body.trim().is_empty() {
                        RestartBody::default()
                    } else {
                        serde_json::from_str(&body)
                            .map_err(|e| ApiError::bad_request("bad_json", e.to_string()))?
                    };
                    Command::Restart {
                        from_step: parsed.from_step,
                    }
                }
                other => other,
            };
            instance_call(env, &id, "/command", &json!(cmd)).await
        }
        Route::ListDeliveries => {
            let rows = executions::recent_deliveries(&db, DELIVERIES_LISTED_MAX).await?;
            json_ok(200, &json!({ "deliveries": rows }))
        }
        Route::ListGroups => json_ok(
            200,
            &json!({ "groups": serial::groups(&db, WorkerClock.now_ms()).await? }),
        ),
        Route::ExplainGroup(group) => {
            // A group's policy lives in each commit's config; explain with
            // the ADR defaults for "times out in".
            let view =
                serial::explain(&db, &group, &QueuePolicy::default(), WorkerClock.now_ms()).await?;
            json_ok(200, &json!(view))
        }
        Route::SkipAll(group) => {
            let skipped = serial::skip_all(&db, &group, WorkerClock.now_ms()).await?;
            let waker = InstanceWaker { env: env.clone() };
            for s in &skipped {
                let _ = waker
                    .wake(serial::instance_of(&s.execution_id), TURN_EVENT)
                    .await;
            }
            json_ok(200, &json!({ "skipped": skipped }))
        }
        Route::Skip(id) => {
            let now = WorkerClock.now_ms();
            let mut skipped = false;
            for (group, execution_id) in serial::live_rows_of(&db, id.as_str()).await? {
                skipped |= serial::skip(&db, &group, &execution_id, now).await?;
            }
            if !skipped {
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
    }
}

/// An event's payload is journaled as its wait's result: over the step
/// result cap it is refused before it is read.
fn check_event_length(declared: Option<&str>) -> std::result::Result<(), ApiError> {
    let too_large = declared
        .and_then(|v| v.trim().parse::<usize>().ok())
        .is_some_and(|n| n > crate::limits::STEP_RESULT_BYTES_MAX);
    if too_large {
        return Err(ApiError::new(
            413,
            "payload_too_large",
            format!(
                "event payloads are at most {} bytes",
                crate::limits::STEP_RESULT_BYTES_MAX
            ),
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

async fn webhook(req: &mut Request, env: &Env, db: &D1) -> std::result::Result<Response, ApiError> {
    check_declared_length(header(req, "Content-Length").as_deref())?;
    let body = req
        .bytes()
        .await
        .map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
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
    match intake(&headers, &body, secret.as_deref())? {
        Intake::Ignored { event, reason } => json_ok(
            200,
            &json!({ "ignored": true, "event": event, "reason": reason }),
        ),
        Intake::Act {
            delivery,
            event,
            action,
            repo,
            creates,
        } => {
            if let Some(prev) = executions::delivery(db, &delivery).await? {
                let instances: Value =
                    serde_json::from_str(&prev.instance_ids_json).unwrap_or(Value::Null);
                return json_ok(
                    202,
                    &json!({ "delivery": delivery, "duplicate": true, "instances": instances }),
                );
            }
            let mut instances = Vec::with_capacity(creates.len());
            for c in &creates {
                let created = create_instance(env, c).await?;
                instances
                    .push(json!({ "id": created.id, "run": c.run, "created": created.created }));
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
                received_ms: WorkerClock.now_ms(),
            };
            executions::record_delivery(db, &row).await?;
            json_ok(
                202,
                &json!({ "delivery": delivery, "duplicate": false, "instances": instances }),
            )
        }
    }
}

/// Sends an operation to an instance's Durable Object.
async fn instance_request(
    env: &Env,
    id: &InstanceId,
    path: &str,
    body: &Value,
) -> std::result::Result<(u16, Value), ApiError> {
    let ns = env
        .durable_object(bindings::RUN_INSTANCE)
        .map_err(internal)?;
    let stub = ns
        .id_from_name(id.as_str())
        .and_then(|i| i.get_stub())
        .map_err(internal)?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(body.to_string().into()));
    let request =
        Request::new_with_init(&format!("https://instance{path}"), &init).map_err(internal)?;
    let mut resp = stub.fetch_with_request(request).await.map_err(internal)?;
    let status = resp.status_code();
    let value: Value = resp.json().await.map_err(internal)?;
    Ok((status, value))
}

async fn instance_call(
    env: &Env,
    id: &InstanceId,
    path: &str,
    body: &Value,
) -> std::result::Result<Response, ApiError> {
    let (status, value) = instance_request(env, id, path, body).await?;
    instance_answer(id, status, value)
}

/// Maps an instance's answer to the API's.
fn instance_answer(
    id: &InstanceId,
    status: u16,
    value: Value,
) -> std::result::Result<Response, ApiError> {
    match status {
        s if s < 400 => json_ok(s, &value),
        404 => Err(ApiError::not_found(format!("no execution {id}"))),
        409 => Err(ApiError::new(
            409,
            "conflict",
            value["error"].as_str().unwrap_or("conflict").to_owned(),
        )),
        400 => Err(ApiError::bad_request(
            "bad_request",
            value["error"].as_str().unwrap_or("bad request").to_owned(),
        )),
        413 => Err(ApiError::new(
            413,
            "payload_too_large",
            value["error"].as_str().unwrap_or("too large").to_owned(),
        )),
        _ => Err(ApiError::internal(value.to_string())),
    }
}

/// Creates an instance (or finds it: the id is the idempotency key).
pub async fn create_instance(
    env: &Env,
    create: &CreateRequest,
) -> std::result::Result<Created, ApiError> {
    let id = create.id();
    let (status, value) = instance_request(env, &id, "/create", &json!(create)).await?;
    if status != 200 {
        return Err(ApiError::internal(format!(
            "instance {id} create answered {status}: {value}"
        )));
    }
    serde_json::from_value(value).map_err(internal)
}

/// Pokes an instance (the sweep): creates it if its object lost the create,
/// and runs a pass if it is runnable.
pub async fn poke_instance(env: &Env, create: &CreateRequest) -> std::result::Result<(), ApiError> {
    let (status, value) = instance_request(env, &create.id(), "/poke", &json!(create)).await?;
    if status != 200 {
        return Err(ApiError::internal(format!(
            "poke answered {status}: {value}"
        )));
    }
    Ok(())
}

pub async fn purge_instance(env: &Env, id: &InstanceId) -> std::result::Result<(), ApiError> {
    let (status, value) = instance_request(env, id, "/purge", &json!({})).await?;
    if status != 200 {
        return Err(ApiError::internal(format!(
            "purge answered {status}: {value}"
        )));
    }
    Ok(())
}

/// Wakes an instance by sending it an event through its Durable Object.
pub struct InstanceWaker {
    pub env: Env,
}

#[async_trait::async_trait(?Send)]
impl Waker for InstanceWaker {
    async fn wake(&self, instance_id: &str, event_type: &str) -> std::result::Result<(), String> {
        let id = InstanceId::parse(instance_id).map_err(|e| e.to_string())?;
        let (status, value) = instance_request(
            &self.env,
            &id,
            "/event",
            &json!({ "type": event_type, "payload": {} }),
        )
        .await
        .map_err(|e| e.message)?;
        if status < 300 {
            Ok(())
        } else {
            Err(format!("wake {instance_id}: {status} {value}"))
        }
    }
}

/// Worker secrets by name.
pub struct EnvSecrets {
    pub env: Env,
}

impl SecretSource for EnvSecrets {
    fn secret(&self, name: &str) -> Option<Secret> {
        // Config validation refuses these already; never hand them out.
        if !crate::runs::config::deploy_may_read(name) {
            return None;
        }
        bindings::secret(&self.env, name)
    }
}

/// The owned pieces a run's services borrow from, built per pass from the
/// Worker's bindings.
pub struct RunEnvParts {
    transport: FetchTransport,
    signer: WebCryptoSigner,
    blobs: Option<R2>,
    api_url: String,
    app_id: Option<String>,
    key_der: std::result::Result<Secret<Vec<u8>>, String>,
    sandbox_url: String,
    sandbox_token: Option<Secret>,
    /// Cloudflare Containers (one per sandbox id), when SANDBOX_BACKEND is
    /// "container"; else the agent at `sandbox_url`.
    container: Option<ContainerTransport>,
    public_url: String,
    waker: InstanceWaker,
    secrets: EnvSecrets,
    notify: Option<NotifyTarget>,
    pool_capacity: u32,
}

/// The services runs use, from the Worker's bindings.
pub fn run_env_parts(env: &Env) -> RunEnvParts {
    let key_der = match text(env, bindings::GITHUB_APP_PRIVATE_KEY) {
        None => Err("GITHUB_APP_PRIVATE_KEY is not set".to_owned()),
        Some(pem) => private_key_pkcs8_der(&pem)
            .map(Secret::new)
            .map_err(|e| e.to_string()),
    };
    RunEnvParts {
        transport: FetchTransport,
        signer: WebCryptoSigner,
        blobs: env.bucket(bindings::LOGS).ok().map(R2),
        api_url: text(env, bindings::GITHUB_API_URL)
            .unwrap_or_else(|| bindings::GITHUB_API_URL_DEFAULT.to_owned()),
        app_id: text(env, bindings::GITHUB_APP_ID),
        key_der,
        sandbox_url: text(env, bindings::SANDBOX_URL)
            .unwrap_or_else(|| bindings::SANDBOX_URL_DEFAULT.to_owned()),
        sandbox_token: bindings::secret(env, bindings::SANDBOX_AGENT_TOKEN),
        container: text(env, bindings::SANDBOX_BACKEND)
            .filter(|b| b == "container")
            .map(|_| ContainerTransport { env: env.clone() }),
        public_url: text(env, bindings::PUBLIC_URL).unwrap_or_default(),
        waker: InstanceWaker { env: env.clone() },
        secrets: EnvSecrets { env: env.clone() },
        notify: text(env, bindings::NOTIFY_URL).map(|url| NotifyTarget {
            url,
            secret: bindings::secret(env, bindings::NOTIFY_SECRET),
        }),
        pool_capacity: text(env, bindings::POOL_CAPACITY)
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(bindings::POOL_CAPACITY_DEFAULT)
            .clamp(1, POOL_CAPACITY_MAX),
    }
}

/// Stands in for a missing R2 binding: every upload fails with a clear
/// message (a step error), rather than the Worker refusing to start.
struct NoBlobs;

#[async_trait::async_trait(?Send)]
impl crate::blobs::Blobs for NoBlobs {
    async fn put_text(&self, _: &str, _: &str) -> std::result::Result<(), String> {
        Err(format!(
            "the R2 binding {} is not configured",
            bindings::LOGS
        ))
    }
    async fn get_text(&self, _: &str) -> std::result::Result<Option<String>, String> {
        Err(format!(
            "the R2 binding {} is not configured",
            bindings::LOGS
        ))
    }
}

static NO_BLOBS: NoBlobs = NoBlobs;

impl RunEnvParts {
    pub fn blobs(&self) -> Option<&dyn crate::blobs::Blobs> {
        self.blobs.as_ref().map(|b| b as &dyn crate::blobs::Blobs)
    }

    pub fn sandbox(&self) -> AgentSandbox<'_> {
        match &self.container {
            Some(c) => AgentSandbox {
                transport: c,
                base_url: "http://sandbox".into(),
                token: self.sandbox_token.clone(),
            },
            None => AgentSandbox {
                transport: &self.transport,
                base_url: self.sandbox_url.clone(),
                token: self.sandbox_token.clone(),
            },
        }
    }

    pub fn registry<'a>(&'a self, clock: &'a dyn Clock, db: &'a dyn Database) -> RegistryOwner<'a> {
        RegistryOwner {
            parts: self,
            sandbox: self.sandbox(),
            clock,
            db,
        }
    }
}

/// Owns the sandbox client the registry borrows.
pub struct RegistryOwner<'a> {
    parts: &'a RunEnvParts,
    sandbox: AgentSandbox<'a>,
    clock: &'a dyn Clock,
    db: &'a dyn Database,
}

impl RegistryOwner<'_> {
    fn registry(&self) -> Registry<'_> {
        let p = self.parts;
        Registry {
            env: RunEnv {
                clock: self.clock,
                github: GitHub {
                    transport: &p.transport,
                    signer: &p.signer,
                    clock: self.clock,
                    api_url: p.api_url.clone(),
                    app_id: p.app_id.clone(),
                    key_der: p.key_der.clone(),
                },
                sandbox: &self.sandbox,
                blobs: match &p.blobs {
                    Some(b) => b,
                    None => &NO_BLOBS,
                },
                db: self.db,
                waker: &p.waker,
                secrets: &p.secrets,
                notify: p.notify.clone(),
                pool_capacity: p.pool_capacity,
                public_url: p.public_url.clone(),
            },
        }
    }
}

#[async_trait::async_trait(?Send)]
impl crate::engine::RunRegistry for RegistryOwner<'_> {
    async fn execute(
        &self,
        run: &str,
        ctx: &crate::engine::Ctx<'_>,
        input: &Value,
    ) -> std::result::Result<crate::engine::RunOutcome, crate::engine::RunError> {
        self.registry().execute(run, ctx, input).await
    }

    async fn finalize(
        &self,
        run: &str,
        instance_id: &str,
        input: &Value,
        status: crate::engine::Status,
    ) -> std::result::Result<(), String> {
        self.registry()
            .finalize(run, instance_id, input, status)
            .await
    }

    async fn prepare_restart(
        &self,
        run: &str,
        req: &crate::engine::RestartRequest<'_>,
    ) -> std::result::Result<u32, String> {
        self.registry().prepare_restart(run, req).await
    }
}
