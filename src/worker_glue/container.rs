//! `SandboxContainer`: the production sandbox. One Durable Object (and so
//! one Cloudflare Container) per run instance, running the sandbox agent
//! image (`crates/sandbox-agent/Dockerfile`). It forwards the agent's HTTP
//! API to the container and carries out the container's lifecycle, whose
//! decisions are `sandbox::lifecycle`'s: start with the agent's token,
//! bounded readiness and forwards, the idle alarm (`CONTAINER_SLEEP_AFTER`),
//! destroy on discard. `ContainerTransport` is how the Worker reaches it.
//! Where the runtime has no Containers, `state.container()` is None and
//! every call answers 503 `containers_unavailable` (the run reports an
//! infrastructure fault).

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::{select, Either};
use serde_json::json;
use worker::js_sys::{Function, Object, Promise, Reflect};
use worker::wasm_bindgen::{JsCast, JsValue};
use worker::wasm_bindgen_futures::JsFuture;
use worker::{
    durable_object, Container, Delay, DurableObject, Env, Fetcher, Headers, Method, Request,
    RequestInit, Response, Result, ScheduledTime, State,
};

use crate::clock::Clock;
use crate::limits::CONTAINER_INSTANCES_MAX;
use crate::net::{HttpRequest, HttpResponse, Transport};
use crate::runs::config::parse_duration_ms;
use crate::sandbox::agent::SANDBOX_ID_HEADER;
use crate::sandbox::image;
use crate::sandbox::lifecycle::{
    Call, Effect, Lifecycle, ReadyWait, Record, Route, Settings, StartOptions,
};

use super::bindings;
use super::platform::{worker_request, WorkerClock};

/// The port the agent listens on inside the image (see its Dockerfile).
const AGENT_PORT: u16 = 8080;
/// Where the lifecycle's record lives in the object's storage.
const RECORD_KEY: &str = "lifecycle";
/// Destroying a container: a stop and a removal by the runtime, seconds;
/// the bound keeps a wedged runtime from holding the request (the alarm
/// tries again).
const DESTROY_TIMEOUT_MS: i64 = 60_000;
/// Until the agent's answer to an archive call starts: packing 1 GiB (the
/// agent's own bound on an archive, which also times `tar` out at 10
/// minutes) happens before it answers.
const ARCHIVE_ANSWER_TIMEOUT_MS: i64 = 11 * 60 * 1000;

// The pool never admits more runs than the account runs containers.
const _: () = assert!(bindings::POOL_CAPACITY_DEFAULT <= CONTAINER_INSTANCES_MAX);

/// One sandbox container's object, whichever class (image and instance
/// type) it is: each Containers class in `wrangler.toml` is a thin
/// `#[durable_object]` around it (`sandbox_classes!`).
pub struct ContainerObject {
    state: State,
    env: Env,
    /// Loaded from storage on first use; never borrowed across an await.
    lifecycle: RefCell<Option<Lifecycle>>,
    /// The running container's `monitor()` promise: settles when it exits.
    /// One per container start, shared by every bounded wait.
    exit: RefCell<Option<Promise>>,
}

fn unavailable(message: &str) -> Result<Response> {
    Ok(Response::from_json(
        &json!({ "error": { "code": "containers_unavailable", "message": message } }),
    )?
    .with_status(503))
}

fn now_ms() -> i64 {
    WorkerClock.now_ms()
}

fn js_error(e: JsValue) -> String {
    e.as_string()
        .or_else(|| {
            Reflect::get(&e, &JsValue::from_str("message"))
                .ok()
                .and_then(|m| m.as_string())
        })
        .unwrap_or_else(|| format!("{e:?}"))
}

fn settings(env: &Env) -> (Settings, Option<String>) {
    let sleep_after =
        bindings::text(env, bindings::CONTAINER_SLEEP_AFTER).map(|v| parse_duration_ms(&v));
    let (mut settings, warning) = Settings::new(
        sleep_after,
        bindings::secret(env, bindings::SANDBOX_AGENT_TOKEN),
    );
    settings.git_url = Some(
        bindings::text(env, bindings::GITHUB_GIT_URL)
            .unwrap_or_else(|| crate::github::GIT_URL_DEFAULT.to_owned()),
    );
    (settings, warning)
}

/// A request as it arrived, kept to forward it once.
struct Forward {
    method: String,
    path: String,
    headers: Headers,
    body: Option<String>,
}

impl Forward {
    async fn of(req: &mut Request) -> Result<Forward> {
        let url = req.url()?;
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let method = req.method();
        let body = match method {
            Method::Get | Method::Head => None,
            _ => Some(req.text().await?),
        };
        Ok(Forward {
            method: method.to_string(),
            path,
            headers: req.headers().clone(),
            body,
        })
    }

    fn request(&self) -> Result<Request> {
        let mut init = RequestInit::new();
        init.with_method(Method::from(self.method.clone()))
            .with_headers(self.headers.clone());
        if let Some(body) = &self.body {
            init.with_body(Some(JsValue::from_str(body)));
        }
        Request::new_with_init(&format!("http://sandbox{}", self.path), &init)
    }
}

/// How a bounded wait ended.
enum Bounded<T> {
    Done(T),
    TimedOut,
    /// The container exited first.
    Exited,
}

impl ContainerObject {
    fn new(state: State, env: Env) -> Self {
        bindings::apply_log_level(&env);
        ContainerObject {
            state,
            env,
            lifecycle: RefCell::new(None),
            exit: RefCell::new(None),
        }
    }

    async fn fetch(&self, mut req: Request) -> Result<Response> {
        let Some(container) = self.state.container() else {
            return unavailable("this runtime has no Cloudflare Containers (local development uses SANDBOX_BACKEND=agent)");
        };
        if req.path().ends_with("/archive") {
            return self.pass_archive(&container, req).await;
        }
        let forward = Forward::of(&mut req).await?;
        let call = Call::of(&forward.method, &forward.path, forward.body.as_deref());
        self.load().await;
        let (route, effects) = self.with(|lc| lc.on_request(&call, container.running(), now_ms()));
        self.carry_out(&container, effects).await;
        match route {
            Route::AnswerDiscarded => {
                let id = match &call {
                    Call::Discard { id } => id.as_str(),
                    _ => "",
                };
                Ok(Response::from_json(
                    &json!({ "discarded": id, "killed": 0, "deleted": false, "container": "none" }),
                )?)
            }
            Route::Agent {
                start,
                await_ready,
                timeout_ms,
            } => {
                let reach = Reach {
                    start,
                    await_ready,
                    timeout_ms,
                };
                self.reach(&container, &call, reach, &forward).await
            }
        }
    }

    async fn alarm(&self) -> Result<Response> {
        let Some(container) = self.state.container() else {
            return Response::ok("no containers in this runtime");
        };
        self.load().await;
        let effects = self.with(|lc| lc.on_alarm(container.running(), now_ms()));
        self.carry_out(&container, effects).await;
        Response::ok("ok")
    }
}

/// Declares each Containers class of `wrangler.toml` (one per image class
/// and instance type, `sandbox::image::IMAGE_CLASSES`) as a Durable Object
/// that is a `ContainerObject`.
macro_rules! sandbox_classes {
    ($($class:ident),+ $(,)?) => {$(
        #[durable_object(alarm)]
        pub struct $class {
            inner: ContainerObject,
        }

        impl DurableObject for $class {
            fn new(state: State, env: Env) -> Self {
                $class {
                    inner: ContainerObject::new(state, env),
                }
            }

            async fn fetch(&self, req: Request) -> Result<Response> {
                self.inner.fetch(req).await
            }

            async fn alarm(&self) -> Result<Response> {
                self.inner.alarm().await
            }
        }
    )+};
}

sandbox_classes!(
    SandboxContainer,
    SandboxNode,
    SandboxNodeStandard1,
    SandboxRust,
    SandboxRustStandard2,
);

/// `Route::Agent`'s fields.
struct Reach {
    start: Option<StartOptions>,
    await_ready: bool,
    timeout_ms: i64,
}

impl ContainerObject {
    /// Fills the lifecycle from storage once (a concurrent first request
    /// may have filled it meanwhile: the first one wins).
    async fn load(&self) {
        if self.lifecycle.borrow().is_some() {
            return;
        }
        let record = match self.state.storage().get::<String>(RECORD_KEY).await {
            Ok(Some(text)) => serde_json::from_str::<Record>(&text).unwrap_or_default(),
            _ => Record::default(),
        };
        let (settings, warning) = settings(&self.env);
        if let Some(w) = warning {
            worker::console_warn!("{w}");
        }
        let mut slot = self.lifecycle.borrow_mut();
        if slot.is_none() {
            *slot = Some(Lifecycle::new(settings, record));
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Lifecycle) -> R) -> R {
        let mut slot = self.lifecycle.borrow_mut();
        let lc =
            slot.get_or_insert_with(|| Lifecycle::new(settings(&self.env).0, Record::default()));
        f(lc)
    }

    async fn carry_out(&self, container: &Container, effects: Vec<Effect>) {
        for effect in effects {
            let done = match &effect {
                Effect::ArmAlarm { at_ms } => {
                    let at = ScheduledTime::new(worker::js_sys::Date::new(&JsValue::from_f64(
                        *at_ms as f64,
                    )));
                    self.state
                        .storage()
                        .set_alarm(at)
                        .await
                        .map_err(|e| e.to_string())
                }
                Effect::DeleteAlarm => self
                    .state
                    .storage()
                    .delete_alarm()
                    .await
                    .map_err(|e| e.to_string()),
                Effect::Destroy(why) => {
                    worker::console_log!("destroying the sandbox container ({why:?})");
                    self.destroy(container).await
                }
                Effect::Persist => self.persist().await,
            };
            if let Err(e) = done {
                worker::console_warn!("sandbox container: {effect:?} failed: {e}");
            }
        }
    }

    async fn persist(&self) -> std::result::Result<(), String> {
        let text = self
            .with(|lc| serde_json::to_string(lc.record()))
            .map_err(|e| e.to_string())?;
        self.state
            .storage()
            .put(RECORD_KEY, text)
            .await
            .map_err(|e| e.to_string())
    }

    async fn destroy(&self, container: &Container) -> std::result::Result<(), String> {
        self.exit.replace(None);
        let destroyed = async { container.destroy(None).await.map_err(|e| e.to_string()) };
        match race(Box::pin(destroyed), DESTROY_TIMEOUT_MS, None).await {
            Bounded::Done(result) => result,
            Bounded::TimedOut | Bounded::Exited => {
                Err(format!("no answer within {DESTROY_TIMEOUT_MS} ms"))
            }
        }
    }

    /// The running container's exit as a promise, asked of the runtime
    /// once per container start.
    fn exit_promise(&self, container: &Container) -> Option<Promise> {
        if let Some(p) = self.exit.borrow().as_ref() {
            return Some(p.clone());
        }
        if !container.running() {
            return None;
        }
        let promise = monitor(container)?;
        self.exit.replace(Some(promise.clone()));
        Some(promise)
    }
}

/// `container.monitor()`, called so that a throw is an error, not a trap.
/// None when there is no such method or it threw (the container is not
/// running: no exit to wait for).
fn monitor(container: &Container) -> Option<Promise> {
    let this: &JsValue = container.as_ref();
    let f: Function = Reflect::get(this, &JsValue::from_str("monitor"))
        .ok()?
        .dyn_into()
        .ok()?;
    f.call0(this).ok()?.dyn_into::<Promise>().ok()
}

/// Starts the container with the options as a plain object: workerd reads
/// `env` as a dictionary (own properties), and workers-rs 0.8.7's
/// `ContainerStartupOptions` hands it a `Map`, so the token never arrived.
fn start_container(container: &Container, opts: &StartOptions) -> std::result::Result<(), String> {
    let env = Object::new();
    for (name, value) in &opts.env {
        Reflect::set(
            &env,
            &JsValue::from_str(name),
            &JsValue::from_str(value.expose()),
        )
        .map_err(js_error)?;
    }
    let options = Object::new();
    Reflect::set(&options, &JsValue::from_str("env"), &env).map_err(js_error)?;
    Reflect::set(
        &options,
        &JsValue::from_str("enableInternet"),
        &JsValue::from_bool(opts.enable_internet),
    )
    .map_err(js_error)?;
    let sys: &worker::worker_sys::Container = container.as_ref().unchecked_ref();
    sys.start(&options).map_err(js_error)
}

/// Runs `work` until it ends, `timeout_ms` passes, or `exit` settles.
async fn race<T>(
    work: std::pin::Pin<Box<dyn Future<Output = T> + '_>>,
    timeout_ms: i64,
    exit: Option<Promise>,
) -> Bounded<T> {
    let timer = Box::pin(Delay::from(Duration::from_millis(
        u64::try_from(timeout_ms).unwrap_or(0),
    )));
    let exited: std::pin::Pin<Box<dyn Future<Output = ()>>> = match exit {
        // Resolved or rejected, the container has exited.
        Some(p) => Box::pin(async move {
            let _ = JsFuture::from(p).await;
        }),
        None => Box::pin(std::future::pending()),
    };
    match select(work, select(timer, exited)).await {
        Either::Left((value, _)) => Bounded::Done(value),
        Either::Right((Either::Left(_), _)) => Bounded::TimedOut,
        Either::Right((Either::Right(_), _)) => Bounded::Exited,
    }
}

impl ContainerObject {
    /// Starts the container if asked, waits for its agent if asked, then
    /// forwards the request once, within the call's bound.
    async fn reach(
        &self,
        container: &Container,
        call: &Call,
        reach: Reach,
        forward: &Forward,
    ) -> Result<Response> {
        let started_ms = now_ms();
        if let Some(opts) = &reach.start {
            self.exit.replace(None);
            if let Err(e) = start_container(container, opts) {
                self.not_ready(container).await;
                return unavailable(&format!("the sandbox container did not start: {e}"));
            }
        }
        let port = match container.get_tcp_port(AGENT_PORT) {
            Ok(port) => port,
            Err(e) => {
                self.not_ready(container).await;
                return unavailable(&format!("no port {AGENT_PORT} on the container: {e}"));
            }
        };
        if reach.await_ready {
            if let Err(e) = self.await_ready(container, &port).await {
                self.not_ready(container).await;
                return unavailable(&format!("the sandbox agent did not answer: {e}"));
            }
            self.with(|lc| lc.on_ready());
            if reach.start.is_some() {
                // The cold start, start() to the agent's first answer (`npm run bench`).
                let ms = now_ms() - started_ms;
                worker::console_log!("sandbox container ready {ms} ms after start");
            }
        }
        let exchange = async {
            let mut resp = port.fetch_request(forward.request()?).await?;
            let status = resp.status_code();
            Ok::<_, worker::Error>((status, resp.text().await?))
        };
        let outcome = race(
            Box::pin(exchange),
            reach.timeout_ms,
            self.exit_promise(container),
        )
        .await;
        let failure = match outcome {
            Bounded::Done(Ok((status, body))) => {
                let effects = self.with(|lc| lc.on_answer(call, status, &body, now_ms()));
                self.carry_out(container, effects).await;
                return answer(status, body);
            }
            Bounded::Done(Err(e)) => format!("the connection to the sandbox agent failed: {e}"),
            Bounded::TimedOut => format!(
                "the sandbox agent did not answer within {} ms",
                reach.timeout_ms
            ),
            Bounded::Exited => "the sandbox container exited".to_owned(),
        };
        worker::console_warn!("sandbox container: {failure}");
        let effects = self.with(|lc| lc.on_forward_failed(call, container.running(), now_ms()));
        self.carry_out(container, effects).await;
        unavailable(&failure)
    }

    /// A job's artifacts (`/v1/workspaces/{id}/archive`) pass through as
    /// streams both ways, never read whole: only to a running container,
    /// whose workspace they belong to (a stopped one has none left), and
    /// bounded until the agent's answer starts.
    async fn pass_archive(&self, container: &Container, req: Request) -> Result<Response> {
        if !container.running() {
            return unavailable("the sandbox container is not running: its workspace is gone");
        }
        let port = match container.get_tcp_port(AGENT_PORT) {
            Ok(port) => port,
            Err(e) => return unavailable(&format!("no port {AGENT_PORT} on the container: {e}")),
        };
        let url = req.url()?;
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        let mut init = RequestInit::new();
        init.with_method(req.method())
            .with_headers(req.headers().clone());
        if let Some(body) = req.inner().body() {
            init.with_body(Some(body.into()));
        }
        let forward = Request::new_with_init(&format!("http://sandbox{path}"), &init)?;
        let exchange = port.fetch_request(forward);
        match race(
            Box::pin(exchange),
            ARCHIVE_ANSWER_TIMEOUT_MS,
            self.exit_promise(container),
        )
        .await
        {
            Bounded::Done(result) => result,
            Bounded::TimedOut => unavailable(&format!(
                "the sandbox agent did not answer the archive within {ARCHIVE_ANSWER_TIMEOUT_MS} ms"
            )),
            Bounded::Exited => unavailable("the sandbox container exited"),
        }
    }

    async fn not_ready(&self, container: &Container) {
        let effects = self.with(|lc| lc.on_not_ready(container.running(), now_ms()));
        self.carry_out(container, effects).await;
    }

    /// Probes `GET /healthz` until the agent answers 200, within
    /// `ReadyWait`'s bounds; the container exiting ends the wait at once.
    async fn await_ready(
        &self,
        container: &Container,
        port: &Fetcher,
    ) -> std::result::Result<(), String> {
        let mut wait = ReadyWait::new(now_ms());
        let mut last = String::from("no probe ran");
        while let Some(probe) = wait.next(now_ms()) {
            if probe.delay_ms > 0 {
                Delay::from(Duration::from_millis(probe.delay_ms as u64)).await;
            }
            let exchange = async {
                let req = Request::new("http://sandbox/healthz", Method::Get)?;
                port.fetch_request(req).await.map(|r| r.status_code())
            };
            match race(
                Box::pin(exchange),
                probe.timeout_ms,
                self.exit_promise(container),
            )
            .await
            {
                Bounded::Done(Ok(200)) => return Ok(()),
                Bounded::Done(Ok(status)) => last = format!("healthz answered {status}"),
                Bounded::Done(Err(e)) => last = e.to_string(),
                Bounded::TimedOut => {
                    last = format!("a probe had no answer within {} ms", probe.timeout_ms)
                }
                Bounded::Exited => return Err("the container exited while starting".to_owned()),
            }
        }
        Err(last)
    }
}

/// The agent's answer, passed on (its body is JSON).
fn answer(status: u16, body: String) -> Result<Response> {
    let headers = Headers::new();
    headers.set("Content-Type", "application/json")?;
    Ok(Response::ok(body)?
        .with_status(status)
        .with_headers(headers))
}

/// Reaches the sandbox agent inside the container a request names
/// (`SANDBOX_ID_HEADER`: a run instance's id names its container).
pub struct ContainerTransport {
    pub env: Env,
}

#[async_trait(?Send)]
impl Transport for ContainerTransport {
    async fn send(&self, req: HttpRequest) -> std::result::Result<HttpResponse, String> {
        let sandbox_id = req
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(SANDBOX_ID_HEADER))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| {
                format!("a sandbox request must name its sandbox ({SANDBOX_ID_HEADER})")
            })?;
        let ns = self
            .env
            .durable_object(image::binding_of(&sandbox_id)?)
            .map_err(|e| e.to_string())?;
        let stub = ns
            .id_from_name(&sandbox_id)
            .and_then(|id| id.get_stub())
            .map_err(|e| e.to_string())?;
        let mut resp = stub
            .fetch_with_request(worker_request(req)?)
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status_code();
        let body = resp.text().await.map_err(|e| e.to_string())?;
        Ok(HttpResponse { status, body })
    }
}
