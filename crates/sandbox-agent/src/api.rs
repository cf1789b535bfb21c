//! HTTP routing, authentication, request parsing and JSON errors.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::host_tools::HostTools;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use tiny_http::{Header, Method, Request, Response};

use sluice_redact::Redactor;
use sluice_sandbox_protocol::{self as protocol, CheckoutRequest, ProcessRequest};

use crate::error::ApiError;
use crate::exec;
use crate::limits::{EXEC_TIMEOUT_MS_MAX, ID_CHARS_MAX, REQUEST_BYTES_MAX, WAIT_MS_MAX};

/// A protocol answer as the JSON a reply carries.
fn to_value<T: serde::Serialize>(answer: &T) -> Result<Value, ApiError> {
    serde_json::to_value(answer)
        .map_err(|e| ApiError::new(500, "internal", format!("answer does not encode: {e}")))
}
use crate::archive::Scratch;
use crate::lock;
use crate::process::agent_id;
use crate::process::Registry;
use crate::snapshot::Snapshot;
use crate::workspace::Workspaces;

pub struct State {
    token: Option<String>,
    workspaces: Workspaces,
    /// Where archives of workspaces pass through.
    scratch: Scratch,
    /// The host's toolchains as commands reach them.
    tools: HostTools,
    processes: Arc<Registry>,
}

impl State {
    /// `token: None` (`--insecure-no-token`) accepts `/v1/` requests without a token, but only
    /// those addressed to a loopback host.
    pub fn new(
        token: Option<String>,
        workspaces: Workspaces,
        scratch: Scratch,
        tools: HostTools,
    ) -> Self {
        State {
            token,
            workspaces,
            scratch,
            tools,
            processes: Arc::default(),
        }
    }
}

type Reply = (u16, Value);

impl From<ApiError> for Reply {
    fn from(e: ApiError) -> Reply {
        (
            e.status,
            json!({"error": {"code": e.code, "message": e.message}}),
        )
    }
}

/// Answers one request. Runs on its own thread; a panic in a handler becomes a 500 here
/// instead of a dropped connection.
pub fn serve(state: &State, mut request: Request) {
    let started = Instant::now();
    if let Some(id) = archive_path(request.url()) {
        let id = id.to_owned();
        return serve_archive(state, request, &id, started);
    }
    let reply = panic::catch_unwind(AssertUnwindSafe(|| route(state, &mut request)))
        .unwrap_or_else(|_| {
            ApiError::new(
                500,
                "internal",
                "the request handler panicked; see agent logs",
            )
            .into()
        });
    let path = request
        .url()
        .split('?')
        .next()
        .unwrap_or_default()
        .to_owned();
    eprintln!(
        "{} {path} -> {} ({} ms)",
        request.method(),
        reply.0,
        started.elapsed().as_millis()
    );
    respond(request, reply);
}

/// The workspace id of `/v1/workspaces/{id}/archive[?...]`.
fn archive_path(url: &str) -> Option<&str> {
    let path = url.split('?').next()?;
    path.strip_prefix("/v1/workspaces/")?
        .strip_suffix("/archive")
        .filter(|id| !id.contains('/'))
}

/// `POST /v1/workspaces/{id}/archive` `{"patterns": [...]}`: the matching files as a gzipped
/// tar (`X-Sluice-Archive-Files`, `X-Sluice-Archive-Sha256`). `PUT ...?sha256=<hex>` with a
/// gzipped tar (`Content-Type: application/gzip`; a PUT is never sent cross-origin without a
/// preflight the agent does not grant): unpacks it, `{"files": n}`.
fn serve_archive(state: &State, mut request: Request, id: &str, started: Instant) {
    let method = request.method().clone();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        authorize(state, &request)?;
        validate_id(id, "workspace")?;
        match method {
            Method::Post => pack_archive(state, &mut request, id).map(Ok),
            Method::Put => unpack_archive(state, &mut request, id).map(Err),
            _ => Err(method_not_allowed()),
        }
    }))
    .unwrap_or_else(|_| {
        Err(ApiError::new(
            500,
            "internal",
            "the archive handler panicked; see agent logs",
        ))
    });
    let status = match &outcome {
        Ok(Ok(_)) => 200,
        Ok(Err((status, _))) => *status,
        Err(e) => e.status,
    };
    eprintln!(
        "{method} /v1/workspaces/{id}/archive -> {status} ({} ms)",
        started.elapsed().as_millis()
    );
    match outcome {
        Ok(Ok(packed)) => respond_archive(request, packed),
        Ok(Err(reply)) => respond(request, reply),
        Err(e) => respond(request, e.into()),
    }
}

/// `POST`: the matching files, or a snapshot, of workspace `id`.
fn pack_archive(state: &State, request: &mut Request, id: &str) -> Result<Snapshot, ApiError> {
    require_json(request)?;
    let req: protocol::ArchiveRequest = read_json(request)?;
    let scratch = &state.scratch;
    if let Some(snapshot) = &req.snapshot {
        let ws = &state.workspaces;
        let since_ms = match (&snapshot.since, snapshot.since_checkout) {
            (Some(t), _) => (t.agent == agent_id()).then_some(t.ms),
            (None, true) => ws.checked_out_ms(id),
            (None, false) => None,
        };
        let baseline = since_ms.and_then(|ms| ws.baseline(id, ms));
        return ws.with_claimed(id, |path, run_as| {
            let mut snapshot = scratch.snapshot(path, run_as, baseline.as_deref())?;
            // Inside the claim: no checkout can come between the tree and its baseline.
            if let Some(tree) = snapshot.baseline.take() {
                ws.keep_baseline(id, tree);
            }
            Ok(snapshot)
        });
    }
    validate_patterns(&req.patterns)?;
    state
        .workspaces
        .with_claimed(id, |path, run_as| scratch.pack(path, run_as, &req.patterns))
        .map(Snapshot::plain)
}

/// `PUT ?sha256=<hex>[&prune=true&after=<process>]`: unpacks the body into workspace `id`.
fn unpack_archive(state: &State, request: &mut Request, id: &str) -> Result<Reply, ApiError> {
    let sha256 = query_value(request.url(), "sha256")
        .ok_or_else(|| ApiError::invalid("sha256 is required"))?;
    let prune = query_value(request.url(), "prune").is_some_and(|v| v == "true");
    let after = query_value(request.url(), "after");
    if let Some(after) = &after {
        validate_id(after, "process")?;
    }
    let scratch = &state.scratch;
    let body = request.as_reader();
    let ws = &state.workspaces;
    let (files, pruned) = ws.with_claimed(id, |path, run_as| {
        let files = scratch.unpack(path, run_as, body, &sha256)?;
        let pruned = if prune {
            scratch.prune(path, run_as)?
        } else {
            0
        };
        // Inside the claim: no checkout can come between the tree and what names it.
        if let (true, Some(after)) = (prune, &after) {
            ws.set_last_process(id, after);
        }
        Ok((files, pruned))
    })?;
    Ok((
        200,
        json!({"workspace": id, "files": files, "pruned": pruned}),
    ))
}

fn respond_archive(request: Request, snapshot: Snapshot) {
    let Snapshot {
        packed,
        taken_ms,
        full,
        ..
    } = snapshot;
    let length = usize::try_from(packed.bytes).ok();
    // Content-Length, never chunked (tiny_http's default above 32 KiB): R2
    // takes a streamed body only when its length is known.
    let mut response = Response::new(200.into(), Vec::new(), packed.file, length, None)
        .with_chunked_threshold(usize::MAX);
    for (name, value) in [
        ("Content-Type", "application/gzip".to_owned()),
        (protocol::ARCHIVE_FILES_HEADER, packed.files.to_string()),
        (protocol::ARCHIVE_SHA256_HEADER, packed.sha256),
        (protocol::SNAPSHOT_AGENT_HEADER, agent_id().to_owned()),
        (protocol::SNAPSHOT_TAKEN_HEADER, taken_ms.to_string()),
        (protocol::SNAPSHOT_FULL_HEADER, full.to_string()),
    ] {
        if let Ok(header) = Header::from_bytes(name, value) {
            response.add_header(header);
        }
    }
    let _ = request.respond(response);
}

/// Patterns are workspace-relative globs: never absolute, never through `..`.
fn validate_patterns(patterns: &[String]) -> Result<(), ApiError> {
    if patterns.is_empty() || patterns.len() > protocol::ARCHIVE_PATTERNS_MAX {
        return Err(ApiError::invalid(format!(
            "patterns must name 1 to {} globs",
            protocol::ARCHIVE_PATTERNS_MAX
        )));
    }
    for p in patterns {
        if !protocol::valid_archive_pattern(p) {
            return Err(ApiError::invalid(format!(
                "{p:?} is not a workspace-relative pattern"
            )));
        }
    }
    Ok(())
}

/// The value of `name=` in `url`'s query (hex and ids only: no decoding).
fn query_value(url: &str, name: &str) -> Option<String> {
    let (_, query) = url.split_once('?')?;
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
        .map(str::to_owned)
}

/// Answers a request the server has no thread for.
pub fn respond_busy(request: Request) {
    let error = ApiError::new(
        503,
        "server_busy",
        "too many requests in flight; retry shortly",
    );
    respond(request, error.into());
}

fn respond(request: Request, (status, body): Reply) {
    let mut response = Response::from_data(body.to_string())
        .with_status_code(status)
        // Always send Content-Length (tiny_http switches to chunked above 32 KiB by default).
        .with_chunked_threshold(usize::MAX);
    if let Ok(header) = Header::from_bytes("Content-Type", "application/json") {
        response.add_header(header);
    }
    // The client may have gone away; nothing useful to do about it.
    let _ = request.respond(response);
}

fn route(state: &State, request: &mut Request) -> Reply {
    match route_inner(state, request) {
        Ok(reply) => reply,
        Err(e) => e.into(),
    }
}

fn route_inner(state: &State, request: &mut Request) -> Result<Reply, ApiError> {
    let url = request.url().to_owned();
    let (path, query) = url.split_once('?').unwrap_or((&url, ""));
    let method = request.method().clone();
    if path == "/healthz" {
        return match method {
            Method::Get => Ok((
                200,
                json!({"ok": true, "version": env!("CARGO_PKG_VERSION")}),
            )),
            _ => Err(method_not_allowed()),
        };
    }
    let Some(rest) = path.strip_prefix("/v1/") else {
        return Err(not_found());
    };
    authorize(state, request)?;
    if method != Method::Get {
        require_json(request)?;
    }
    let segments: Vec<&str> = rest.split('/').collect();
    match (&method, segments.as_slice()) {
        (Method::Post, ["workspaces"]) => create_workspace(state, read_json(request)?),
        (Method::Get, ["workspaces", id]) => get_workspace(state, id),
        (Method::Delete, ["workspaces", id]) => delete_workspace(state, id),
        (Method::Post, ["workspaces", id, "digest"]) => {
            digest_files(state, id, read_json(request)?)
        }
        (Method::Post, ["exec"]) => run_exec(state, read_json(request)?),
        (Method::Post, ["processes"]) => start_process(state, read_json(request)?),
        (Method::Get, ["processes", id]) => get_process(state, id, query),
        (Method::Post, ["processes", id, "kill"]) => kill_process(state, id, query),
        (Method::Delete, ["sandboxes", id]) => discard_sandbox(state, id),
        (
            _,
            ["workspaces" | "exec" | "processes"]
            | ["workspaces" | "processes", _]
            | ["processes", _, "kill"]
            | ["sandboxes", _],
        ) => Err(method_not_allowed()),
        _ => Err(not_found()),
    }
}

fn not_found() -> ApiError {
    ApiError::new(404, "not_found", "no such endpoint")
}

fn method_not_allowed() -> ApiError {
    ApiError::new(405, "method_not_allowed", "method not allowed here")
}

fn header<'r>(request: &'r Request, name: &'static str) -> Option<&'r str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

/// Requires `Authorization: Bearer <token>`. Without a token (`--insecure-no-token`, loopback
/// only) the request must at least name a loopback host: a web page whose own name resolves to
/// 127.0.0.1 (DNS rebinding) sends its own name as Host.
fn authorize(state: &State, request: &Request) -> Result<(), ApiError> {
    let Some(expected) = &state.token else {
        return match header(request, "Host") {
            Some(host) if loopback_host(host) => Ok(()),
            _ => Err(ApiError::new(
                403,
                "host_not_allowed",
                "without a token the agent answers only requests to a loopback host",
            )),
        };
    };
    let presented = header(request, "Authorization").and_then(|value| {
        let (scheme, token) = value.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    });
    match presented {
        Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => Ok(()),
        _ => Err(ApiError::new(
            401,
            "unauthorized",
            "missing or wrong bearer token",
        )),
    }
}

/// `localhost`, `127.x.y.z` or `[::1]`, with or without a port.
fn loopback_host(host: &str) -> bool {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split_once(']').is_some_and(|(ip, port)| {
            (port.is_empty() || port.starts_with(':'))
                && ip.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback())
        });
    }
    let name = host.split(':').next().unwrap_or_default();
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
}

/// Every request that changes something must say `Content-Type: application/json`: a web page
/// may send a form or text/plain to any address without asking, but not JSON, which browsers
/// only send cross-origin after a CORS preflight the agent never grants.
fn require_json(request: &Request) -> Result<(), ApiError> {
    let json = header(request, "Content-Type").is_some_and(|value| {
        let essence = value.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/json")
    });
    if json {
        Ok(())
    } else {
        Err(ApiError::new(
            415,
            "unsupported_media_type",
            "requests other than GET must be sent with Content-Type: application/json",
        ))
    }
}

/// Compares without an early exit so timing does not reveal how much of a guess matched
/// (the length is not secret).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads a JSON body of at most `REQUEST_BYTES_MAX` bytes into `T`.
fn read_json<T: DeserializeOwned>(request: &mut Request) -> Result<T, ApiError> {
    let too_large = || {
        ApiError::new(
            413,
            "body_too_large",
            format!("request body exceeds {REQUEST_BYTES_MAX} bytes"),
        )
    };
    if request.body_length().is_some_and(|n| n > REQUEST_BYTES_MAX) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    request
        .as_reader()
        .take(REQUEST_BYTES_MAX as u64 + 1)
        .read_to_end(&mut body)
        .map_err(|e| ApiError::new(400, "invalid_body", format!("cannot read body: {e}")))?;
    if body.len() > REQUEST_BYTES_MAX {
        return Err(too_large());
    }
    serde_json::from_slice(&body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => ApiError::invalid(e.to_string()),
        _ => ApiError::new(400, "invalid_json", e.to_string()),
    })
}

/// Ids become directory names and registry keys (`protocol::valid_id`).
fn validate_id(id: &str, what: &str) -> Result<(), ApiError> {
    if protocol::valid_id(id) {
        Ok(())
    } else {
        Err(ApiError::new(
            400,
            "invalid_id",
            format!("{what} id must be 1 to {ID_CHARS_MAX} characters of A-Z a-z 0-9 _ -"),
        ))
    }
}

fn create_workspace(state: &State, req: CheckoutRequest) -> Result<Reply, ApiError> {
    validate_id(&req.workspace, "workspace")?;
    let checkout = state.workspaces.checkout(
        &req.workspace,
        &req.repo_url,
        &req.sha,
        req.token.as_deref(),
        req.baseline,
    )?;
    Ok((
        201,
        json!({
            "workspace": req.workspace,
            "sha": req.sha.to_ascii_lowercase(),
            "path": checkout.path.to_string_lossy(),
            "duration_ms": checkout.duration_ms,
        }),
    ))
}

/// The SHA-256 of the files' names and contents, read as the workspace's user.
fn digest_files(state: &State, id: &str, req: protocol::DigestRequest) -> Result<Reply, ApiError> {
    validate_id(id, "workspace")?;
    if req.files.is_empty()
        || req.files.len() > protocol::DIGEST_FILES_MAX
        || !req.files.iter().all(|f| protocol::valid_workspace_path(f))
    {
        return Err(ApiError::invalid(format!(
            "files must name 1 to {} paths inside the workspace",
            protocol::DIGEST_FILES_MAX
        )));
    }
    let scratch = &state.scratch;
    let sha256 = state
        .workspaces
        .with_claimed(id, |path, run_as| scratch.digest(path, run_as, &req.files))?;
    Ok((200, to_value(&protocol::DigestAnswer { sha256 })?))
}

fn get_workspace(state: &State, id: &str) -> Result<Reply, ApiError> {
    validate_id(id, "workspace")?;
    let answer = protocol::WorkspaceState {
        workspace: id.to_owned(),
        exists: state.workspaces.existing(id).is_some(),
        sha: state.workspaces.head(id),
        last_process: state.workspaces.last_process(id),
        pristine: Some(state.workspaces.pristine(id)),
    };
    Ok((200, to_value(&answer)?))
}

/// How long discarding a sandbox waits for each killed process to end.
const DISCARD_KILL_WAIT: Duration = Duration::from_secs(5);

/// The run that owned sandbox `id` ended: what still runs in its workspace is killed (its
/// processes, then everything running as the workspace's user), the workspace is deleted and
/// its uid released.
fn discard_sandbox(state: &State, id: &str) -> Result<Reply, ApiError> {
    validate_id(id, "sandbox")?;
    let running = state.processes.running_in(id);
    for p in &running {
        p.kill(DISCARD_KILL_WAIT);
    }
    let deleted = state.workspaces.delete(id)?;
    Ok((
        200,
        json!({"discarded": id, "killed": running.len(), "deleted": deleted}),
    ))
}

fn delete_workspace(state: &State, id: &str) -> Result<Reply, ApiError> {
    validate_id(id, "workspace")?;
    let deleted = state.workspaces.delete(id)?;
    Ok((200, json!({"deleted": deleted})))
}

/// The command fields shared by `/v1/exec` and `/v1/processes`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandSpec {
    workspace: String,
    command: String,
    timeout_ms: u64,
    env: Option<BTreeMap<String, String>>,
    /// Values scrubbed from the output before it is kept.
    #[serde(default)]
    redact: Vec<String>,
}

/// Checks a command request's fields and returns its timeout.
fn validate_spec(spec: &CommandSpec) -> Result<Duration, ApiError> {
    validate_id(&spec.workspace, "workspace")?;
    if !(1..=EXEC_TIMEOUT_MS_MAX).contains(&spec.timeout_ms) {
        return Err(ApiError::invalid(format!(
            "timeout_ms must be between 1 and {EXEC_TIMEOUT_MS_MAX}"
        )));
    }
    if spec.command.is_empty() || spec.command.contains('\0') {
        return Err(ApiError::invalid(
            "command must be non-empty and contain no NUL",
        ));
    }
    let env_ok = spec
        .env
        .iter()
        .flatten()
        .all(|(k, v)| !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0'));
    if !env_ok {
        return Err(ApiError::invalid(
            "env names must be non-empty without '=' or NUL, and values without NUL",
        ));
    }
    if spec.redact.len() > protocol::REDACT_VALUES_MAX {
        return Err(ApiError::invalid(format!(
            "redact holds at most {} values",
            protocol::REDACT_VALUES_MAX
        )));
    }
    Ok(Duration::from_millis(spec.timeout_ms))
}

fn spawn(state: &State, spec: &CommandSpec) -> Result<exec::Running, ApiError> {
    let env = spec.env.clone().unwrap_or_default();
    let redactor = Redactor::new(&spec.redact);
    state.workspaces.start_in(&spec.workspace, |dir, run_as| {
        exec::spawn(
            exec::shell_command(dir, &spec.command, &env, &state.tools),
            run_as,
            redactor,
        )
        .map_err(|e| ApiError::new(500, "spawn_failed", format!("cannot start sh: {e}")))
    })
}

fn run_exec(state: &State, spec: CommandSpec) -> Result<Reply, ApiError> {
    let timeout = validate_spec(&spec)?;
    let running = spawn(state, &spec)?;
    let output = running.output();
    let finished = running.wait(timeout);
    let captured = lock(&output).capture();
    Ok((
        200,
        json!({
            "exit_code": finished.exit_code,
            "signal": finished.signal,
            "timed_out": finished.timed_out,
            "output": captured.text,
            "output_bytes": captured.bytes,
            "output_truncated": captured.truncated,
            "duration_ms": finished.duration_ms,
        }),
    ))
}

fn start_process(state: &State, req: ProcessRequest) -> Result<Reply, ApiError> {
    validate_id(&req.id, "process")?;
    let spec = CommandSpec {
        workspace: req.workspace,
        command: req.command,
        timeout_ms: req.timeout_ms,
        env: req.env,
        redact: req.redact,
    };
    // Validated even for a replay, so a malformed request never looks accepted. The workspace
    // is only required to start a process: a replay may outlive its workspace.
    let timeout = validate_spec(&spec)?;
    let start_by_ms = req.start_by_ms;
    let (process, created) = state
        .processes
        .start(&req.id, &spec.workspace, timeout, || {
            refuse_past_window(start_by_ms, now_ms())?;
            let running = spawn(state, &spec)?;
            state.workspaces.set_last_process(&spec.workspace, &req.id);
            Ok(running)
        })?;
    Ok((if created { 201 } else { 200 }, to_value(&process.state())?))
}

/// A new process is started only within its fence's window: past it, the
/// caller may have been taken over, and a taker that found the process
/// unknown may already run its own (a known id is answered as it is).
fn refuse_past_window(start_by_ms: Option<u64>, now_ms: u64) -> Result<(), ApiError> {
    match start_by_ms {
        Some(by) if now_ms > by => Err(ApiError::new(
            409,
            protocol::START_WINDOW_PASSED,
            format!("start_by_ms {by} has passed ({now_ms} now): nothing was started; fence again"),
        )),
        _ => Ok(()),
    }
}

/// The agent's clock, ms since the Unix epoch (0 if the clock is before it).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The query of the process endpoints: `wait_ms` (capped) and, for a
/// state, `since` (stream the output from that byte on).
struct ProcessQuery {
    wait: Duration,
    since: Option<u64>,
}

fn process_query(query: &str) -> Result<ProcessQuery, ApiError> {
    let mut wait_ms = 0;
    let mut since = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let number = |name: &str, value: &str| {
            value
                .parse::<u64>()
                .map_err(|_| ApiError::invalid(format!("{name} must be a non-negative integer")))
        };
        match pair.split_once('=') {
            Some(("wait_ms", value)) => wait_ms = number("wait_ms", value)?,
            Some(("since", value)) => since = Some(number("since", value)?),
            _ => {
                return Err(ApiError::invalid(format!(
                    "unknown query parameter {pair:?}"
                )))
            }
        }
    }
    Ok(ProcessQuery {
        wait: Duration::from_millis(wait_ms.min(WAIT_MS_MAX)),
        since,
    })
}

fn wait_ms_of(query: &str) -> Result<Duration, ApiError> {
    Ok(process_query(query)?.wait)
}

fn known_process(state: &State, id: &str) -> Result<Arc<crate::process::Process>, ApiError> {
    validate_id(id, "process")?;
    state
        .processes
        .get(id)
        .ok_or_else(|| ApiError::new(404, protocol::PROCESS_NOT_FOUND, format!("no process {id}")))
}

fn get_process(state: &State, id: &str, query: &str) -> Result<Reply, ApiError> {
    let q = process_query(query)?;
    let process = known_process(state, id)?;
    process.wait(q.wait);
    let answer = match q.since {
        Some(since) => process.state_since(since),
        None => process.state(),
    };
    Ok((200, to_value(&answer)?))
}

/// Kills the process group and waits (bounded) for the exit; the answer
/// says whether it ended (`status` other than `running`).
fn kill_process(state: &State, id: &str, query: &str) -> Result<Reply, ApiError> {
    let wait = wait_ms_of(query)?;
    let process = known_process(state, id)?;
    process.kill(wait);
    Ok((200, to_value(&process.state())?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_are_recognised() {
        for host in [
            "localhost",
            "LOCALHOST:8791",
            "127.0.0.1",
            "127.0.0.1:8791",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:8791",
        ] {
            assert!(loopback_host(host), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:8791",
            "localhost.evil.example",
            "10.0.0.1:8791",
            "[::2]:1",
            "",
            "[::1",
        ] {
            assert!(!loopback_host(host), "{host}");
        }
    }
}
