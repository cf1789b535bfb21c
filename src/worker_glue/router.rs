//! The fetch handler: routes a request (`http::routes`), decides who sent
//! it (`http::auth`), and carries out each route with the Worker's
//! bindings: the `/v1/` API as JSON (`http::lists`, the operations below),
//! the dashboard as HTML (`http::dashboard`). Every API failure becomes
//! one JSON error shape (`http::ApiError`), every dashboard failure an HTML
//! page, and a 5xx is logged with the request id it names.

use std::rc::Rc;

use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;
use worker::{Context, Delay, Env, Request, Response, Result};

use crate::engine::{index_creates, Clock, Command, CreateRequest, Created, InstanceId, Status};
use crate::gates::policy::QueuePolicy;
use crate::gates::serial;
use crate::http::ack_first::{self, create_yield_ms, Arrivals};
use crate::http::auth::{self, AccessKeys, AuthConfig, Presented, Principal};
use crate::http::body::{read_capped, BodyLimit};
use crate::http::dashboard::{self, Operations, OperatorEvent, Reply};
use crate::http::jwt::JwksCache;
use crate::http::oidc::{self, OidcKeys, VerifiedToken};
use crate::http::pages::{self, same_origin_post};
use crate::http::routes::{route, Access, Asset, Route, RouteError};
use crate::http::webhook::{
    accept, log_created, plan_verified, preflight, read_signed, InstanceCreator, IntakeConfig,
    WebhookHeaders,
};
use crate::http::{dispatch, lists, ApiError};
use crate::obs::{self, Kind};
use crate::runs::command;
use crate::runs::environment::Environments;
use crate::runs::gate::TURN_EVENT;
use crate::runs::loglink::{self, LinkError};
use crate::runs::triggers::EventSend;
use crate::runs::Waker;
use crate::store::executions;
use futures_util::StreamExt;

use super::bindings::{self, text};
use super::instances::{self, InstanceOp, InstanceWaker};
use super::platform::{FetchJwks, WebCryptoVerifier, WorkerClock, D1, R2};

/// Instances one `POST /v1/executions` batch may create: bounds one request.
const BATCH_CREATE_MAX: usize = 100;

/// Objects a batch creates at once: six, Cloudflare's simultaneous open
/// connections per request, so none waits on another for a connection.
const BATCH_CREATE_CONCURRENCY_MAX: usize = 6;

type Answer = std::result::Result<Response, ApiError>;

thread_local! {
    // The Access keys of this isolate: fetched once, shared by its
    // requests (`JwksCache` holds no borrow across an await).
    static ACCESS_KEYS: Rc<JwksCache> = Rc::new(JwksCache::new());
    // GitHub Actions' OIDC keys (dispatch tokens): another issuer, its own
    // cache.
    static OIDC_KEYS: Rc<JwksCache> = Rc::new(JwksCache::new());
    // This isolate's recently answered deliveries that create: under a
    // burst their instances' creations wait (`http::ack_first`).
    static ARRIVALS: Arrivals = Arrivals::default();
}

pub async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    bindings::apply_log_level(&env);
    let request_id = header(&req, "cf-ray")
        .unwrap_or_else(|| format!("{:012x}", (js_sys::Math::random() * 2f64.powi(48)) as u64));
    let method = req.method().to_string();
    let path = req.path();
    let routed = route(&method, &path).map_err(|e| route_error(e, &method, &path));
    let is_page = routed.as_ref().is_ok_and(Route::is_page) || path.starts_with("/ui");
    let answer = match routed {
        Ok(r) => dispatch(req, &env, &ctx, r, &request_id).await,
        Err(e) => Err(e),
    };
    match answer {
        Ok(resp) => Ok(resp),
        Err(e) => {
            if e.is_server_error() {
                obs::event(Kind::ServerError)
                    .request(&request_id)
                    .field("path", path.as_str())
                    .field("code", e.code)
                    .message("error", &e.message)
                    .emit();
            }
            if is_page {
                let message = e.body(&request_id)["error"]["message"]
                    .as_str()
                    .unwrap_or("error")
                    .to_owned();
                let html = pages::render_error(e.status, "Refused", &message, WorkerClock.now_ms());
                return html_response(Reply {
                    status: e.status,
                    html,
                    headers: Vec::new(),
                });
            }
            Ok(Response::from_json(&e.body(&request_id))?.with_status(e.status))
        }
    }
}

fn route_error(e: RouteError, method: &str, path: &str) -> ApiError {
    match e {
        RouteError::NotFound => ApiError::not_found(format!("no route for {path}")),
        RouteError::MethodNotAllowed => ApiError::new(
            405,
            "method_not_allowed",
            format!("{method} is not allowed here"),
        ),
        RouteError::BadId(m) => ApiError::bad_request("bad_id", m),
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

/// A dashboard answer: HTML (or a redirect) with the strict CSP and the
/// other security headers; never cached (it shows live state).
fn html_response(reply: Reply) -> Result<Response> {
    let mut resp = Response::from_html(&reply.html)?.with_status(reply.status);
    let headers = resp.headers_mut();
    headers.set("Content-Type", pages::assets::HTML_CONTENT_TYPE)?;
    headers.set("Cache-Control", "no-store")?;
    for (k, v) in pages::SECURITY_HEADERS {
        headers.set(k, v)?;
    }
    for (k, v) in &reply.headers {
        headers.append(k, v)?;
    }
    Ok(resp)
}

fn asset(a: Asset) -> Answer {
    let (body, content_type) = match a {
        Asset::AppJs => (pages::APP_JS, pages::assets::JS_CONTENT_TYPE),
        Asset::AppCss => (pages::APP_CSS, pages::assets::CSS_CONTENT_TYPE),
    };
    let mut resp = Response::ok(body).map_err(internal)?;
    let headers = resp.headers_mut();
    let set = |h: &worker::Headers, k: &str, v: &str| h.set(k, v).map_err(internal);
    set(headers, "Content-Type", content_type)?;
    // Short: a deploy changes the assets without changing their names.
    set(headers, "Cache-Control", "max-age=300")?;
    for (k, v) in pages::SECURITY_HEADERS {
        set(headers, k, v)?;
    }
    Ok(resp)
}

fn auth_config(env: &Env) -> AuthConfig {
    let team = text(env, bindings::ACCESS_TEAM_DOMAIN);
    let aud = text(env, bindings::ACCESS_AUD);
    let access = AuthConfig::access_from(team.as_deref(), aud.as_deref()).map(|cfg| {
        match text(env, bindings::ACCESS_CERTS_URL) {
            Some(url) => cfg.and_then(|c| c.with_certs_url(&url)),
            None => cfg,
        }
    });
    AuthConfig {
        admin_token: text(env, bindings::ADMIN_TOKEN),
        access,
    }
}

async fn authenticate(req: &Request, env: &Env) -> std::result::Result<Principal, ApiError> {
    let (authorization, access_jwt, cookie) = (
        header(req, "Authorization"),
        header(req, crate::http::access::ACCESS_JWT_HEADER),
        header(req, "Cookie"),
    );
    let presented = Presented {
        authorization: authorization.as_deref(),
        access_jwt: access_jwt.as_deref(),
        cookie: cookie.as_deref(),
        https: is_https(req),
    };
    let cache = ACCESS_KEYS.with(Rc::clone);
    let keys = AccessKeys {
        cache: &cache,
        fetch: &FetchJwks,
        verifier: &WebCryptoVerifier,
    };
    let now_s = WorkerClock.now_ms().div_euclid(1_000);
    auth::authenticate(&presented, &auth_config(env), &keys, now_s).await
}

/// The request's own origin (`https://host`), which a same-origin POST's
/// `Origin` must equal.
fn own_origin(req: &Request) -> String {
    req.url()
        .map(|u| u.origin().ascii_serialization())
        .unwrap_or_default()
}

fn is_https(req: &Request) -> bool {
    req.url().is_ok_and(|u| u.scheme() == "https")
}

/// A POST that a browser credential (a session cookie, Access for a
/// person) authenticates must come from the dashboard's own pages.
fn check_same_origin(req: &Request) -> std::result::Result<(), ApiError> {
    let site = header(req, "Sec-Fetch-Site");
    let origin = header(req, "Origin");
    if same_origin_post(site.as_deref(), origin.as_deref(), &own_origin(req)) {
        return Ok(());
    }
    Err(ApiError::new(
        403,
        "cross_site",
        "a POST with a browser's credentials must come from the dashboard itself",
    ))
}

/// The sign-in page instead of a JSON 401 for a person opening a page.
fn refused_page(req: &Request, e: &ApiError) -> Result<Response> {
    let next = req
        .url()
        .map(|u| match u.query() {
            Some(q) => format!("{}?{q}", u.path()),
            None => u.path().to_owned(),
        })
        .unwrap_or_default();
    let reply = dashboard::refusal(e.status, Some(&e.message), &next, WorkerClock.now_ms());
    html_response(reply)
}

/// Who sent the request, when the route needs an operator (None for the
/// open and sign-in routes); a refused person opening a page gets the
/// sign-in page.
async fn authorize(
    req: &Request,
    env: &Env,
    r: &Route,
    request_id: &str,
) -> std::result::Result<Option<Principal>, Refused> {
    let principal = match r.access() {
        Access::Open => None,
        Access::SignIn => {
            // A cross-site form must neither sign an operator in nor out.
            if matches!(r, Route::LoginSubmit | Route::Logout) {
                check_same_origin(req)?;
            }
            None
        }
        Access::Operator => match authenticate(req, env).await {
            Ok(p) => Some(p),
            Err(e) => {
                obs::event(Kind::AuthRefused)
                    .request(request_id)
                    .field("path", req.path())
                    .field("status", e.status)
                    .field("code", e.code)
                    .emit();
                if matches!(r, Route::Page(_)) {
                    return Err(Refused::Page(e));
                }
                return Err(Refused::Api(e));
            }
        },
    };
    let is_post = req.method() == worker::Method::Post;
    if is_post
        && principal
            .as_ref()
            .is_some_and(Principal::must_be_same_origin)
    {
        check_same_origin(req)?;
    }
    Ok(principal)
}

enum Refused {
    Api(ApiError),
    /// Answered with the sign-in page.
    Page(ApiError),
}

impl From<ApiError> for Refused {
    fn from(e: ApiError) -> Refused {
        Refused::Api(e)
    }
}

async fn dispatch(
    mut req: Request,
    env: &Env,
    ctx: &Context,
    r: Route,
    request_id: &str,
) -> Answer {
    let principal = match authorize(&req, env, &r, request_id).await {
        Ok(p) => p,
        Err(Refused::Api(e)) => return Err(e),
        Err(Refused::Page(e)) => return refused_page(&req, &e).map_err(internal),
    };
    let db = D1(env.d1(bindings::DB).map_err(internal)?);
    let ops = Operator {
        env,
        db: &db,
        request_id,
        principal: principal.as_ref(),
    };
    let query = req
        .url()
        .ok()
        .and_then(|u| u.query().map(str::to_owned))
        .unwrap_or_default();
    match r {
        Route::Health => json_ok(200, &json!({ "ok": true })),
        Route::Webhook => webhook(&mut req, env, ctx, &db, request_id).await,
        Route::Page(_)
        | Route::PageAction(..)
        | Route::Asset(_)
        | Route::StepLog(..)
        | Route::Login
        | Route::LoginSubmit
        | Route::Logout => ui(&mut req, env, &ops, r, &query).await,
        api_route => api(&mut req, env, &ops, api_route, &query).await,
    }
}

/// The `/v1/` routes.
async fn api(req: &mut Request, env: &Env, ops: &Operator<'_>, r: Route, query: &str) -> Answer {
    let (db, now) = (ops.db, WorkerClock.now_ms());
    match r {
        Route::ListExecutions => json_ok(200, &lists::executions(db, query).await?),
        Route::CreateExecution => create_executions(req, env, ops.request_id).await,
        Route::GetExecution(id) => {
            let mut detail = lists::execution(db, &id, query).await?;
            let secret = bindings::secret(env, bindings::LOG_LINK_SECRET);
            let secret = secret.as_ref().map(|s| s.expose().as_bytes());
            detail["artifacts"] = lists::artifacts(db, &detail, secret, now).await?;
            json_ok(200, &detail)
        }
        Route::SendEvent(id, event_type) => {
            let body = read_body(req, BodyLimit::EVENT).await?;
            let payload: Value = serde_json::from_slice(&body)
                .map_err(|e| ApiError::bad_request("bad_json", e.to_string()))?;
            json_ok(202, &ops.event(&id, &event_type, &payload).await?)
        }
        Route::Command(id, cmd) => {
            let cmd = match cmd {
                Command::Restart { .. } => Command::Restart {
                    from_step: restart_body(req).await?.from_step,
                },
                other => other,
            };
            let answer = ops.command(&id, cmd).await?;
            let status = if answer.get("pending").is_some() {
                202
            } else {
                200
            };
            json_ok(status, &answer)
        }
        Route::ListDeliveries => json_ok(200, &lists::deliveries(db, query).await?),
        Route::Costs => json_ok(200, &lists::costs(db, query).await?),
        Route::Config => json_ok(200, &configuration(env)),
        Route::Log(instance, step) => log_page(req, env, &instance, &step, now).await,
        Route::Artifact(instance) => artifact_download(req, env, &instance, now).await,
        Route::ListGroups => json_ok(200, &lists::groups(db, query, now).await?),
        // A group's policy lives in each commit's config; explain with the
        // ADR defaults for "times out in".
        Route::ExplainGroup(group) => json_ok(
            200,
            &json!(serial::explain(db, &group, &QueuePolicy::default(), now).await?),
        ),
        Route::SkipAll(group) => json_ok(200, &ops.skip_all(&group).await?),
        Route::Skip(id) => json_ok(200, &ops.skip(&id).await?),
        Route::Dispatch => dispatch_run(req, env, db, now).await,
        Route::Setup => json_ok(200, &super::setup::report(env, db).await),
        other => Err(ApiError::internal(format!("{other:?} is not an API route"))),
    }
}

/// The dashboard's routes.
async fn ui(req: &mut Request, env: &Env, ops: &Operator<'_>, r: Route, query: &str) -> Answer {
    let now = WorkerClock.now_ms();
    let reply = match r {
        Route::Asset(a) => return asset(a),
        Route::StepLog(id, step) => return step_log(env, &id, &step).await,
        Route::Page(p) => Reply {
            status: 200,
            html: {
                let secret = bindings::secret(env, bindings::LOG_LINK_SECRET);
                let links = secret.as_ref().map(|s| s.expose().as_bytes());
                dashboard::page_with(ops.db, &p, query, now, links).await?
            },
            headers: Vec::new(),
        },
        Route::PageAction(target, action) => {
            let body = read_form(req).await?;
            dashboard::act(ops, &target, action, &body, now).await?
        }
        Route::Login => {
            let next = crate::http::pages::query::form_pairs(query)
                .into_iter()
                .find(|(k, _)| k == "next")
                .map(|(_, v)| v)
                .unwrap_or_default();
            dashboard::refusal(200, None, &next, now)
        }
        Route::LoginSubmit => {
            let body = read_form(req).await?;
            let admin = text(env, bindings::ADMIN_TOKEN);
            let reply = dashboard::login(&body, admin.as_deref(), is_https(req), now);
            // Every sign-in is an event: failures are how guessing shows.
            let kind = if reply.status < 400 {
                Kind::OperatorAction
            } else {
                Kind::AuthRefused
            };
            obs::event(kind)
                .field("path", req.path())
                .field("action", "sign_in")
                .field("status", reply.status)
                .emit();
            reply
        }
        Route::Logout => dashboard::logout(is_https(req)),
        other => return Err(ApiError::internal(format!("{other:?} is not a page"))),
    };
    html_response(reply).map_err(internal)
}

/// A command step's log from R2, as plain text that no browser runs or
/// sniffs (`sandbox` CSP: not even same-origin scripts).
async fn step_log(env: &Env, id: &InstanceId, step: &str) -> Answer {
    if !command::keeps_log(step) {
        return Err(ApiError::not_found(format!(
            "{step:?} is not a step that keeps a log"
        )));
    }
    log_text(env, id, &InstanceId::from_key(step)).await
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
    let path = loglink::path_of(instance.as_str(), step.as_str());
    check_signed_link(req, env, &path, "log", now)?;
    log_text(env, instance, step).await
}

/// Checks a signed link's query (`runs::loglink`) for `path`: 404 without
/// `LOG_LINK_SECRET`, 403 for a bad or expired signature. `what` names
/// what the link opens (a log, artifacts) in the answer.
fn check_signed_link(
    req: &Request,
    env: &Env,
    path: &str,
    what: &str,
    now: i64,
) -> std::result::Result<(), ApiError> {
    let secret = bindings::secret(env, bindings::LOG_LINK_SECRET).ok_or_else(|| {
        ApiError::not_found(format!("{what} links are not configured (LOG_LINK_SECRET)"))
    })?;
    let url = req.url().map_err(internal)?;
    loglink::verify(
        secret.expose().as_bytes(),
        path,
        url.query().unwrap_or(""),
        now,
    )
    .map_err(|e| match e {
        LinkError::Expired => {
            ApiError::new(403, "link_expired", format!("this {what} link has expired"))
        }
        LinkError::BadSignature => ApiError::new(
            403,
            "bad_signature",
            format!("this {what} link is not valid"),
        ),
    })
}

/// A unit's artifacts behind their signed link: the archive streamed from
/// R2 as an attachment (never rendered), named after the unit's job.
async fn artifact_download(req: &Request, env: &Env, instance: &InstanceId, now: i64) -> Answer {
    let path = crate::runs::kit::artifacts::path_of(instance.as_str());
    check_signed_link(req, env, &path, "artifact", now)?;
    let bucket = env.bucket(bindings::LOGS).map_err(internal)?;
    let key = crate::runs::kit::artifacts::key_of(instance.as_str());
    let object = bucket
        .get(&key)
        .execute()
        .await
        .map_err(internal)?
        .ok_or_else(|| ApiError::not_found("no artifacts are stored for this instance"))?;
    let size = object.size();
    let body = object
        .body()
        .ok_or_else(|| ApiError::not_found("no artifacts are stored for this instance"))?
        .response_body()
        .map_err(internal)?;
    let mut resp = Response::from_body(body).map_err(internal)?;
    let headers = resp.headers_mut();
    let disposition = format!("attachment; filename=\"{}.tar.gz\"", instance.as_str());
    for (name, value) in [
        ("Content-Type", "application/gzip"),
        ("Content-Length", size.to_string().as_str()),
        ("Content-Disposition", disposition.as_str()),
        ("X-Content-Type-Options", "nosniff"),
        ("Cache-Control", "private, no-store"),
        ("Referrer-Policy", "no-referrer"),
    ] {
        headers.set(name, value).map_err(internal)?;
    }
    Ok(resp)
}

/// A command's log (sealed, or the parts stored so far) as plain text that
/// no browser runs or sniffs (`sandbox` CSP: not even same-origin scripts).
async fn log_text(env: &Env, instance: &InstanceId, step_key: &InstanceId) -> Answer {
    let bucket = env.bucket(bindings::LOGS).map_err(internal)?;
    let key = loglink::log_key(instance.as_str(), step_key.as_str());
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

/// A request body within `limit`: a declared length over it is refused
/// before a byte is read, a body that passes it while it streams at once.
async fn read_body(req: &mut Request, limit: BodyLimit) -> std::result::Result<Vec<u8>, ApiError> {
    let declared = limit.declared(header(req, "Content-Length").as_deref())?;
    let chunks = req
        .stream()
        .map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
    Ok(read_capped(chunks, limit, declared).await?.into_vec())
}

/// A form body (`application/x-www-form-urlencoded`), bounded.
async fn read_form(req: &mut Request) -> std::result::Result<String, ApiError> {
    let body = read_body(req, BodyLimit::FORM).await?;
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The operator's operations, for the API and the dashboard alike: each is
/// logged with the request id and the kind of credential that asked.
struct Operator<'a> {
    env: &'a Env,
    db: &'a D1,
    request_id: &'a str,
    principal: Option<&'a Principal>,
}

impl Operator<'_> {
    fn log(&self, action: &str, target: &str) {
        obs::event(Kind::OperatorAction)
            .request(self.request_id)
            .field("action", action)
            .field("target", target)
            .field("credential", self.principal.map(Principal::kind))
            .emit();
    }
}

#[async_trait::async_trait(?Send)]
impl Operations for Operator<'_> {
    async fn command(&self, id: &InstanceId, cmd: Command) -> std::result::Result<Value, ApiError> {
        ensure_exists(self.db, id).await?;
        let name = match &cmd {
            Command::Terminate => "terminate",
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Restart { .. } => "restart",
        };
        self.log(name, id.as_str());
        let (status, value) =
            instances::request(self.env, id, InstanceOp::Command, &json!(cmd)).await?;
        let no_instance = status == 404 && value["error"].as_str() == Some(instances::NO_INSTANCE);
        if cmd == Command::Terminate && no_instance {
            // A row whose create has not arrived: the object now refuses
            // it (its tombstone), and the row ends as the terminate did.
            executions::end_uncreated(self.db, id.as_str(), WorkerClock.now_ms()).await?;
            return Ok(json!({ "status": Status::Terminated }));
        }
        instance_answer(id, status, value)
    }

    async fn deliver_event(&self, e: &OperatorEvent) -> std::result::Result<Value, ApiError> {
        // Straight to the instance (it answers 404 when it has no record):
        // an event is on the latency-critical path, so no D1 look-up first.
        let (id, received_ms) = (e.id(), WorkerClock.now_ms());
        self.log("event", id.as_str());
        let (status, value) = instances::event(self.env, id, e.event_type(), e.payload()).await?;
        match status {
            202 => Ok(json!({ "accepted": true, "received_ms": received_ms })),
            _ => instance_answer(id, status, value),
        }
    }

    async fn skip(&self, id: &InstanceId) -> std::result::Result<Value, ApiError> {
        self.log("skip", id.as_str());
        let now = WorkerClock.now_ms();
        if serial::skip_instance(self.db, id.as_str(), now)
            .await?
            .is_empty()
        {
            return Err(ApiError::new(
                409,
                "conflict",
                format!("{id} is not waiting in any serial group"),
            ));
        }
        let _ = InstanceWaker {
            env: self.env.clone(),
        }
        .wake(id.as_str(), TURN_EVENT)
        .await;
        Ok(json!({ "skipped": id.as_str() }))
    }

    async fn skip_all(&self, group: &str) -> std::result::Result<Value, ApiError> {
        self.log("skip_all", group);
        let skipped = serial::skip_all(self.db, group, WorkerClock.now_ms()).await?;
        let waker = InstanceWaker {
            env: self.env.clone(),
        };
        // Best effort: a skipped waiter that misses its wake-up is told by
        // the sweep (it slept through the end of its row).
        for s in &skipped {
            let _ = waker
                .wake(serial::instance_of(&s.execution_id), TURN_EVENT)
                .await;
        }
        Ok(json!({ "skipped": skipped }))
    }

    async fn teardown_preview(&self, repo: &str, pr: u64) -> std::result::Result<Value, ApiError> {
        self.log("teardown_preview", repo);
        let row = crate::store::previews::get(self.db, repo, pr)
            .await?
            .filter(|r| r.state == "live")
            .ok_or_else(|| ApiError::not_found(format!("no live preview of {repo}#{pr}")))?;
        let c = crate::runs::kit::preview::operator_teardown_request(&row).ok_or_else(|| {
            ApiError::internal(format!("a preview row of {repo}#{pr} is malformed"))
        })?;
        let created = instances::create(self.env, &c).await?;
        log_created(&c, &created, self.request_id);
        Ok(json!(created))
    }
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
            json!({ "name": name, "repos": e.repos, "branches": e.branches, "secrets": secrets,
                    "restricts_branches": e.restricts_branches(),
                    "dispatch_needs_token": e.dispatch_needs_token(),
                    "oidc_environment": e.oidc_environment })
        })
        .collect();
    let oidc = match bindings::oidc_config(env) {
        Ok(c) => json!({ "issuer": c.issuer(), "audience": c.audience(), "error": null }),
        Err(e) => json!({ "issuer": null, "audience": null, "error": e }),
    };
    json!({
        "environments": declared,
        "environments_error": environments.error(),
        "dispatch_oidc": oidc,
        "git_url": text(env, bindings::GITHUB_GIT_URL)
            .unwrap_or_else(|| crate::github::GIT_URL_DEFAULT.to_owned()),
    })
}

/// One create request, or an array of them (each created or found, in
/// order).
async fn create_executions(req: &mut Request, env: &Env, request_id: &str) -> Answer {
    let body: Value = read_json(req).await?;
    let decode = |v: Value| {
        let mut c = serde_json::from_value::<CreateRequest>(v)
            .map_err(|e| ApiError::new(422, "wrong_shape", e.to_string()))?;
        // Only the Worker says a row is written: a caller's claim would
        // leave an object the index never lists.
        c.indexed = false;
        crate::runs::registry::validate_create(&c.run, &c.input)
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
            let mut creates = items
                .into_iter()
                .map(decode)
                .collect::<std::result::Result<Vec<_>, _>>()?;
            refuse_repeated_keys(&creates)?;
            let db = D1(env.d1(bindings::DB).map_err(internal)?);
            index_creates(&db, &mut creates, WorkerClock.now_ms()).await?;
            // A few objects at a time, answered in the batch's order.
            let created: Vec<std::result::Result<Created, ApiError>> =
                futures_util::stream::iter(&creates)
                    .map(|c| instances::create(env, c))
                    .buffered(BATCH_CREATE_CONCURRENCY_MAX)
                    .collect()
                    .await;
            let mut out = Vec::with_capacity(creates.len());
            for (c, created) in creates.iter().zip(created) {
                let created = created?;
                log_created(c, &created, request_id);
                out.push(json!(created));
            }
            json_ok(200, &json!({ "instances": out }))
        }
        single => {
            let c = decode(single)?;
            let created = instances::create(env, &c).await?;
            log_created(&c, &created, request_id);
            json_ok(if created.created { 201 } else { 200 }, &json!(created))
        }
    }
}

/// One instance per key in a batch: two items of one key are one instance,
/// whose row and object could each take a different item's input.
fn refuse_repeated_keys(creates: &[CreateRequest]) -> std::result::Result<(), ApiError> {
    let mut ids = std::collections::HashSet::new();
    match creates.iter().find(|c| !ids.insert(c.id())) {
        Some(c) => Err(ApiError::new(
            422,
            "repeated_key",
            format!("the key {:?} is in the batch more than once", c.key),
        )),
        None => Ok(()),
    }
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

/// Maps an instance's answer to the API's.
fn instance_answer(
    id: &InstanceId,
    status: u16,
    value: Value,
) -> std::result::Result<Value, ApiError> {
    let message = |fallback: &str| value["error"].as_str().unwrap_or(fallback).to_owned();
    match status {
        s if s < 400 => Ok(value),
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
/// replay, verifies the OIDC token it carries (if any), plans the run
/// through GitHub (a deploy only where its environment lets in what the
/// request proved), creates it, then remembers the signature (after: a
/// request that died half way can be sent again, and its instance, named
/// by the token or the signature, is found rather than doubled).
async fn dispatch_run(req: &mut Request, env: &Env, db: &D1, now: i64) -> Answer {
    let body = read_body(req, BodyLimit::DISPATCH).await?;
    let repo = dispatch::claimed_repo(&body)?;
    let signature = dispatch::verify(
        bindings::secret(env, bindings::DISPATCH_SECRET).as_ref(),
        &repo,
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
    let token = match header(req, oidc::OIDC_TOKEN_HEADER) {
        Some(token) => Some(dispatch_token(env, &token, now).await?),
        None => None,
    };
    let asked = dispatch::parse(&body)?;
    dispatch::refuse_secret_values(&asked, &super::setup::secret_values(env))?;
    let parts = super::compose::run_env_parts(env);
    let proof = dispatch::Proof {
        signature_hex: &signature,
        token: token.as_ref(),
    };
    let github = parts.github(&WorkerClock);
    let create = dispatch::plan(&github, parts.environments(), &asked, &proof).await?;
    let created = instances::create(env, &create).await?;
    crate::store::dispatch::remember(db, &signature, &created.id, now).await?;
    json_ok(
        202,
        &json!({ "instance_id": created.id, "run": create.run, "created": created.created,
                 "sha": create.sha, "input": create.input }),
    )
}

/// A dispatch's `X-Sluice-OIDC-Token`, verified against the issuer's keys
/// (cached per isolate, like Access's).
async fn dispatch_token(
    env: &Env,
    token: &str,
    now_ms: i64,
) -> std::result::Result<VerifiedToken, ApiError> {
    let cfg = bindings::oidc_config(env).map_err(|m| ApiError::new(503, "not_configured", m))?;
    let cache = OIDC_KEYS.with(Rc::clone);
    let keys = OidcKeys {
        cache: &cache,
        fetch: &FetchJwks,
        verifier: &WebCryptoVerifier,
    };
    oidc::verify(token, &cfg, &keys, now_ms.div_euclid(1_000))
        .await
        .map_err(|e| oidc::refusal(&e, &cfg))
}

/// `POST /webhooks/github`: the headers are checked before a byte of the
/// body is read (`http::webhook::preflight`), the body streams into its
/// signature check within GitHub's cap (`read_signed`), and only a verified
/// body is decoded and planned.
async fn webhook(req: &mut Request, env: &Env, ctx: &Context, db: &D1, request_id: &str) -> Answer {
    let [event, delivery, signature, content_type, content_length] = [
        "X-GitHub-Event",
        "X-GitHub-Delivery",
        "X-Hub-Signature-256",
        "Content-Type",
        "Content-Length",
    ]
    .map(|name| header(req, name));
    let headers = WebhookHeaders {
        event: event.as_deref(),
        delivery: delivery.as_deref(),
        signature: signature.as_deref(),
        content_type: content_type.as_deref(),
        content_length: content_length.as_deref(),
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
    let pre = preflight(&headers, &cfg)?;
    let chunks = req
        .stream()
        .map_err(|e| ApiError::bad_request("unreadable_body", e.to_string()))?;
    let body = read_signed(chunks, &pre, &cfg).await?;
    let planned = plan_verified(&pre, &body, &cfg)?;
    // The bytes are decoded: nothing holds them across the D1 round trip.
    drop(body);
    let accepted = accept(db, &ObjectCreator { env }, planned, now, request_id).await?;
    create_after_answer(ctx, env, accepted.create_after);
    json_ok(accepted.status, &accepted.body)
}

/// Waits while deliveries arrive as a burst (`http::ack_first`).
async fn yield_to_acks() {
    let start = WorkerClock.now_ms();
    let mut waited_ms = 0;
    while let Some(ms) =
        create_yield_ms(ARRIVALS.with(|a| a.in_burst(start + waited_ms)), waited_ms)
    {
        Delay::from(Duration::from_millis(ms as u64)).await;
        // At least the steps asked for: the bound holds even were the
        // clock to stand still.
        waited_ms = (WorkerClock.now_ms() - start).max(waited_ms + ms);
    }
}

/// Asks the instances' objects to create them once the answer is sent,
/// and, under a burst in local development (`ACK_FIRST`), once it ends
/// (`http::ack_first`). A create that fails here is left to the sweep,
/// which recreates an instance whose row is overdue (`runs::sweep`).
fn create_after_answer(ctx: &Context, env: &Env, creates: Vec<CreateRequest>) {
    if creates.is_empty() {
        return;
    }
    let defer = ack_first::enabled(text(env, bindings::ACK_FIRST).as_deref());
    if defer {
        // Counted as answered: only verified deliveries that create make a
        // burst (`http::ack_first::BURST_ARRIVALS`).
        ARRIVALS.with(|a| a.arrived(WorkerClock.now_ms()));
    }
    let env = env.clone();
    ctx.wait_until(async move {
        if defer {
            yield_to_acks().await;
        }
        for c in &creates {
            if let Err(e) = instances::create(&env, c).await {
                worker::console_warn!("create of {} left for the sweep: {}", c.key, e.message);
            }
        }
    });
}
