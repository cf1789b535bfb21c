//! The `check` and `deploy` runs end to end, natively: the real runs and
//! the real engine over strict fakes of GitHub's REST API (a `Transport`),
//! the sandbox agent, the waker and the Worker's secrets. Every instance of
//! a test has its own journal and shares one index (the gates live there)
//! and one virtual clock, as instances share D1 and time in the Worker.
//!
//! The fakes are as strict as production: an endpoint the fake does not
//! serve, a token it never issued, a commit it never saw, a command it has
//! no script for are errors the run sees, and `Rig`'s drop check fails the
//! test on any request the fake did not expect. Tests read as "apply →
//! expect".

mod common;

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Poll;

use async_trait::async_trait;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use common::{block_on, CountingDb, ManualClock, MemoryBlobs, World, T0};
use futures::FutureExt;
use serde_json::{json, Value};
use sluice::engine::journal::{Entry, InstanceRecord, JournalStore};
use sluice::engine::{
    Clock, Command, CommandError, CreateRequest, InstanceId, PassResult, RunRegistry, Status,
};
use sluice::gates::serial;
use sluice::gates::QueuePolicy;
use sluice::github::app::Rs256Signer;
use sluice::github::client::parse_rfc3339_ms;
use sluice::github::GitHub;
use sluice::limits::{HOLDER_STALE_MS, SERIAL_POLL_MS};
use sluice::net::{HttpRequest, HttpResponse, Transport};
use sluice::runs::command::CommandResult;
use sluice::runs::deploy::TURN_EVENT;
use sluice::runs::triggers::{CheckInput, DeployInput};
use sluice::runs::{NotifyTarget, Registry, RunEnv, SecretSource, Waker};
use sluice::sandbox::{Checkout, ProcessSpec, ProcessState, Sandbox, SandboxError, WorkspaceState};
use sluice::secret::Secret;
use sluice::store::executions::{self, ExecutionRow};
use sluice::store::{Database, Stmt};

const REPO: &str = "octo/hello";
const CLONE_URL: &str = "https://github.com/octo/hello.git";
const BRANCH: &str = "main";
const GROUP: &str = "deploy:octo/hello:main";
const INSTALLATION: u64 = 42;
const PR_NUMBER: u64 = 7;
const APP_ID: &str = "1234";
const PUBLIC_URL: &str = "https://sluice.example.test";
const NOTIFY_URL: &str = "https://hooks.example.test/sluice";
const NOTIFY_SECRET: &str = "notify-signing-secret";
const MINUTE_MS: i64 = 60_000;

const CHECK_TOML: &str = "[check]\ncommand = \"cargo test\"\n";
const DEPLOY_TOML: &str = "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\n";

/// A full commit id made of one hex digit, so tests name commits `a`, `b`...
fn sha(digit: char) -> String {
    assert!(digit.is_ascii_hexdigit());
    digit.to_string().repeat(40)
}

fn is_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

// ---------------------------------------------------------------------------
// FakeGitHub: the REST calls `GitHub` makes, and the notification endpoint.
// ---------------------------------------------------------------------------

/// One request the fake answered.
#[derive(Debug, Clone)]
struct Call {
    method: String,
    route: &'static str,
    path: String,
    status: u16,
    body: Option<String>,
}

/// A check run as GitHub keeps it, with every status it was given.
#[derive(Debug, Clone)]
struct CheckRun {
    id: u64,
    repo: String,
    name: String,
    head_sha: String,
    external_id: Option<String>,
    details_url: Option<String>,
    statuses: Vec<String>,
    conclusion: Option<String>,
    title: Option<String>,
    summary: Option<String>,
}

impl CheckRun {
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "head_sha": self.head_sha,
            "external_id": self.external_id,
            "details_url": self.details_url,
            "status": self.statuses.last(),
            "conclusion": self.conclusion,
            "html_url": format!("https://github.com/{}/runs/{}", self.repo, self.id),
        })
    }

    fn summary(&self) -> &str {
        self.summary.as_deref().unwrap_or("")
    }
}

#[derive(Debug, Clone)]
struct Notification {
    headers: Vec<(String, String)>,
    body: String,
}

impl Notification {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("notification body is JSON")
    }

    /// The signature, recomputed here independently of `webhook::sign`.
    fn signature_is_valid(&self) -> bool {
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(NOTIFY_SECRET.as_bytes()).unwrap();
        mac.update(self.body.as_bytes());
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        self.header("X-Sluice-Signature-256") == Some(expected.as_str())
    }
}

/// The next `remaining` calls to `route` answer `status`; `after_applying`
/// means GitHub did the work and the answer was lost on the way back.
struct Fault {
    route: &'static str,
    remaining: u32,
    status: u16,
    after_applying: bool,
}

#[derive(Default)]
struct GitHubState {
    /// Files per (repo, commit).
    commits: HashMap<(String, String), HashMap<String, String>>,
    heads: HashMap<(String, String), String>,
    /// Issued installation tokens and when they expire (ms).
    tokens: HashMap<String, i64>,
    check_runs: Vec<CheckRun>,
    calls: Vec<Call>,
    faults: Vec<Fault>,
    notifications: Vec<Notification>,
    unexpected: Vec<String>,
}

struct FakeGitHub {
    api_url: String,
    clock: ManualClock,
    st: RefCell<GitHubState>,
}

fn reply(status: u16, body: Value) -> HttpResponse {
    HttpResponse {
        status,
        body: body.to_string(),
    }
}

fn not_found() -> HttpResponse {
    reply(
        404,
        json!({ "message": "Not Found", "documentation_url": "https://docs.github.com/rest" }),
    )
}

/// A request that does not match a route, with the route name as context.
type Routed = Result<(&'static str, Vec<String>, HashMap<String, String>), String>;

impl FakeGitHub {
    fn new(clock: ManualClock) -> FakeGitHub {
        // The client caches installation tokens per (API URL, installation)
        // in a thread local: a fresh URL per rig keeps tests independent
        // however the harness schedules them on threads.
        static RIGS: AtomicU32 = AtomicU32::new(0);
        let n = RIGS.fetch_add(1, Ordering::Relaxed);
        FakeGitHub {
            api_url: format!("https://api.github.test/rig{n}"),
            clock,
            st: RefCell::default(),
        }
    }

    // --- what the test sets up ---

    fn commit(&self, repo: &str, sha: &str, files: &[(&str, &str)]) {
        let files = files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        self.st
            .borrow_mut()
            .commits
            .insert((repo.into(), sha.into()), files);
    }

    fn set_head(&self, repo: &str, branch: &str, sha: &str) {
        self.st
            .borrow_mut()
            .heads
            .insert((repo.into(), branch.into()), sha.into());
    }

    fn fail_next(&self, route: &'static str, n: u32, status: u16) {
        self.st.borrow_mut().faults.push(Fault {
            route,
            remaining: n,
            status,
            after_applying: false,
        });
    }

    /// The next call to `route` is applied, but its answer is a 502.
    fn lose_answer_next(&self, route: &'static str) {
        self.st.borrow_mut().faults.push(Fault {
            route,
            remaining: 1,
            status: 502,
            after_applying: true,
        });
    }

    // --- what the test reads back ---

    fn check_runs_on(&self, sha: &str) -> Vec<CheckRun> {
        self.st
            .borrow()
            .check_runs
            .iter()
            .filter(|c| c.head_sha == sha)
            .cloned()
            .collect()
    }

    fn only_check_run(&self, sha: &str, name: &str) -> CheckRun {
        let runs: Vec<CheckRun> = self
            .check_runs_on(sha)
            .into_iter()
            .filter(|c| c.name == name)
            .collect();
        assert_eq!(
            runs.len(),
            1,
            "exactly one {name} check run on {sha}: {runs:#?}"
        );
        runs.into_iter().next().unwrap()
    }

    fn calls_to(&self, route: &str) -> Vec<Call> {
        self.st
            .borrow()
            .calls
            .iter()
            .filter(|c| c.route == route)
            .cloned()
            .collect()
    }

    fn all_calls(&self) -> Vec<Call> {
        self.st.borrow().calls.clone()
    }

    fn notifications(&self) -> Vec<Notification> {
        self.st.borrow().notifications.clone()
    }

    fn issued_tokens(&self) -> Vec<String> {
        self.st.borrow().tokens.keys().cloned().collect()
    }

    // --- serving ---

    fn route(&self, req: &HttpRequest) -> Routed {
        if req.url == NOTIFY_URL {
            return if req.method == "POST" {
                Ok(("notify", Vec::new(), HashMap::new()))
            } else {
                Err("notify".into())
            };
        }
        let rest = req
            .url
            .strip_prefix(&self.api_url)
            .ok_or("not the API URL")?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        let query: HashMap<String, String> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_owned(), v.to_owned())
            })
            .collect();
        let segs: Vec<String> = path
            .trim_start_matches('/')
            .split('/')
            .map(str::to_owned)
            .collect();
        let s: Vec<&str> = segs.iter().map(String::as_str).collect();
        let route = match (req.method, s.as_slice()) {
            ("POST", ["app", "installations", _, "access_tokens"]) => "token",
            ("GET", ["repos", _, _, "contents", rest @ ..]) if !rest.is_empty() => "contents",
            ("GET", ["repos", _, _, "git", "ref", "heads", rest @ ..]) if !rest.is_empty() => "ref",
            ("GET", ["repos", _, _, "commits", _, "check-runs"]) => "list-check-runs",
            ("POST", ["repos", _, _, "check-runs"]) => "create-check-run",
            ("PATCH", ["repos", _, _, "check-runs", _]) => "update-check-run",
            _ => return Err("no such endpoint".into()),
        };
        Ok((route, segs, query))
    }

    fn handle(&self, req: HttpRequest) -> HttpResponse {
        let (route, segs, query) = match self.route(&req) {
            Ok(r) => r,
            Err(why) => {
                let what = format!("{} {} ({why})", req.method, req.url);
                self.st.borrow_mut().unexpected.push(what.clone());
                return reply(
                    599,
                    json!({ "message": format!("FakeGitHub does not serve {what}") }),
                );
            }
        };
        let fault = {
            let mut st = self.st.borrow_mut();
            let f = st
                .faults
                .iter_mut()
                .find(|f| f.route == route && f.remaining > 0);
            f.map(|f| {
                f.remaining -= 1;
                (f.status, f.after_applying)
            })
        };
        let resp = match fault {
            Some((status, false)) => {
                reply(status, json!({ "message": format!("injected {status}") }))
            }
            Some((status, true)) => {
                let _ = self.serve(route, &req, &segs, &query);
                reply(
                    status,
                    json!({ "message": "injected: applied, answer lost" }),
                )
            }
            None => self.serve(route, &req, &segs, &query),
        };
        self.st.borrow_mut().calls.push(Call {
            method: req.method.to_owned(),
            route,
            path: req.url.clone(),
            status: resp.status,
            body: req.body.clone(),
        });
        resp
    }

    fn header<'r>(req: &'r HttpRequest, name: &str) -> Option<&'r str> {
        req.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A request production code should never send: recorded, refused.
    fn refuse(&self, req: &HttpRequest, status: u16, message: &str) -> HttpResponse {
        self.st
            .borrow_mut()
            .unexpected
            .push(format!("{} {}: {message}", req.method, req.url));
        reply(status, json!({ "message": message }))
    }

    fn serve(
        &self,
        route: &'static str,
        req: &HttpRequest,
        segs: &[String],
        query: &HashMap<String, String>,
    ) -> HttpResponse {
        if route == "notify" {
            self.st.borrow_mut().notifications.push(Notification {
                headers: req.headers.clone(),
                body: req.body.clone().unwrap_or_default(),
            });
            return reply(200, json!({}));
        }
        if Self::header(req, "Accept") != Some("application/vnd.github+json") {
            return self.refuse(req, 415, "Accept must be application/vnd.github+json");
        }
        if Self::header(req, "User-Agent").is_none_or(str::is_empty) {
            return self.refuse(
                req,
                403,
                "Request forbidden by administrative rules: missing User-Agent",
            );
        }
        if Self::header(req, "X-GitHub-Api-Version").is_none() {
            return self.refuse(req, 400, "missing X-GitHub-Api-Version");
        }
        let auth = Self::header(req, "Authorization").unwrap_or("");
        if route == "token" {
            return self.issue_token(req, auth, &segs[2]);
        }
        let now = self.clock.now_ms();
        let token_ok = auth
            .strip_prefix("token ")
            .and_then(|t| self.st.borrow().tokens.get(t).copied())
            .is_some_and(|expires_ms| expires_ms > now);
        if !token_ok {
            return self.refuse(req, 401, "Bad credentials");
        }
        let repo = format!("{}/{}", segs[1], segs[2]);
        match route {
            "contents" => self.contents(req, &repo, &segs[4..].join("/"), query),
            "ref" => {
                let branch = segs[6..].join("/");
                match self.st.borrow().heads.get(&(repo, branch.clone())) {
                    Some(sha) => reply(
                        200,
                        json!({ "ref": format!("refs/heads/{branch}"), "object": { "sha": sha, "type": "commit" } }),
                    ),
                    None => not_found(),
                }
            }
            "list-check-runs" => self.list_check_runs(&repo, &segs[4], query),
            "create-check-run" => self.create_check_run(req, &repo),
            "update-check-run" => self.update_check_run(req, &repo, &segs[4]),
            other => self.refuse(req, 599, &format!("route {other} has no handler")),
        }
    }

    fn issue_token(&self, req: &HttpRequest, auth: &str, installation: &str) -> HttpResponse {
        // The JWT's signature is not verified; its shape and claims are.
        let claims = auth.strip_prefix("Bearer ").and_then(|jwt| {
            let parts: Vec<&str> = jwt.split('.').collect();
            let [header, claims, sig] = parts.as_slice() else {
                return None;
            };
            let header: Value =
                serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
            let claims: Value =
                serde_json::from_slice(&URL_SAFE_NO_PAD.decode(claims).ok()?).ok()?;
            (header["alg"] == "RS256" && !sig.is_empty()).then_some(claims)
        });
        let Some(claims) = claims else {
            return self.refuse(req, 401, "A JSON web token could not be decoded");
        };
        let now_s = self.clock.now_ms() / 1000;
        let (iat, exp) = (
            claims["iat"].as_i64().unwrap_or(i64::MAX),
            claims["exp"].as_i64().unwrap_or(0),
        );
        if claims["iss"] != APP_ID || iat > now_s || exp <= now_s || exp - iat > 600 {
            return self.refuse(req, 401, &format!("JWT claims refused: {claims}"));
        }
        if installation != INSTALLATION.to_string() {
            return not_found();
        }
        let expires_ms = self.clock.now_ms() + 3600 * 1000;
        let mut st = self.st.borrow_mut();
        let token = format!("ghs_{:036}", st.tokens.len() + 1);
        st.tokens.insert(token.clone(), expires_ms);
        reply(
            201,
            json!({
                "token": token,
                "expires_at": rfc3339(expires_ms),
                "permissions": { "contents": "read", "checks": "write" },
                "repository_selection": "all",
            }),
        )
    }

    fn contents(
        &self,
        req: &HttpRequest,
        repo: &str,
        path: &str,
        query: &HashMap<String, String>,
    ) -> HttpResponse {
        let Some(git_ref) = query.get("ref") else {
            return self.refuse(req, 400, "Sluice must always read at an explicit ref");
        };
        let st = self.st.borrow();
        let Some(files) = st.commits.get(&(repo.to_owned(), git_ref.clone())) else {
            return reply(
                404,
                json!({ "message": format!("No commit found for the ref {git_ref}") }),
            );
        };
        let Some(text) = files.get(path) else {
            return not_found();
        };
        // GitHub wraps base64 at 60 columns.
        let b64 = STANDARD.encode(text);
        let wrapped: String = b64
            .as_bytes()
            .chunks(60)
            .map(|c| format!("{}\n", String::from_utf8_lossy(c)))
            .collect();
        reply(
            200,
            json!({ "type": "file", "encoding": "base64", "name": path, "path": path, "size": text.len(), "content": wrapped }),
        )
    }

    fn list_check_runs(
        &self,
        repo: &str,
        sha: &str,
        query: &HashMap<String, String>,
    ) -> HttpResponse {
        let st = self.st.borrow();
        if !st.commits.contains_key(&(repo.to_owned(), sha.to_owned())) {
            return reply(
                422,
                json!({ "message": format!("No commit found for SHA: {sha}") }),
            );
        }
        let mut runs: Vec<&CheckRun> = st
            .check_runs
            .iter()
            .filter(|c| c.repo == repo && c.head_sha == sha)
            .filter(|c| query.get("check_name").is_none_or(|n| *n == c.name))
            .collect();
        // GitHub's default filter is "latest": the newest run per name.
        if query.get("filter").map(String::as_str) != Some("all") {
            let mut seen = HashSet::new();
            runs.reverse();
            runs.retain(|c| seen.insert(c.name.clone()));
        }
        reply(
            200,
            json!({ "total_count": runs.len(), "check_runs": runs.iter().map(|c| c.to_json()).collect::<Vec<_>>() }),
        )
    }

    fn create_check_run(&self, req: &HttpRequest, repo: &str) -> HttpResponse {
        let Some(body) = req
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str::<Value>(b).ok())
        else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        let (Some(name), Some(head_sha)) = (body["name"].as_str(), body["head_sha"].as_str())
        else {
            return reply(422, json!({ "message": "name and head_sha are required" }));
        };
        let status = body["status"].as_str().unwrap_or("queued");
        if !["queued", "in_progress", "completed"].contains(&status) || name.is_empty() {
            return reply(
                422,
                json!({ "message": format!("Invalid request: status {status:?}, name {name:?}") }),
            );
        }
        if status == "completed" && body["conclusion"].is_null() {
            return reply(
                422,
                json!({ "message": "conclusion is required when status is completed" }),
            );
        }
        let mut st = self.st.borrow_mut();
        if !st
            .commits
            .contains_key(&(repo.to_owned(), head_sha.to_owned()))
        {
            return reply(
                422,
                json!({ "message": format!("No commit found for SHA: {head_sha}") }),
            );
        }
        let run = CheckRun {
            id: 9000 + st.check_runs.len() as u64 + 1,
            repo: repo.to_owned(),
            name: name.to_owned(),
            head_sha: head_sha.to_owned(),
            external_id: body["external_id"].as_str().map(str::to_owned),
            details_url: body["details_url"].as_str().map(str::to_owned),
            statuses: vec![status.to_owned()],
            conclusion: body["conclusion"].as_str().map(str::to_owned),
            title: None,
            summary: None,
        };
        let answer = run.to_json();
        st.check_runs.push(run);
        reply(201, answer)
    }

    fn update_check_run(&self, req: &HttpRequest, repo: &str, id: &str) -> HttpResponse {
        const CONCLUSIONS: [&str; 8] = [
            "action_required",
            "cancelled",
            "failure",
            "neutral",
            "success",
            "skipped",
            "stale",
            "timed_out",
        ];
        let Some(body) = req
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str::<Value>(b).ok())
        else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        let mut st = self.st.borrow_mut();
        let Some(run) = st
            .check_runs
            .iter_mut()
            .find(|c| c.id.to_string() == id && c.repo == repo)
        else {
            return not_found();
        };
        let status = body["status"].as_str();
        let conclusion = body["conclusion"].as_str();
        if status.is_some_and(|s| !["queued", "in_progress", "completed"].contains(&s)) {
            return reply(
                422,
                json!({ "message": format!("Invalid status {status:?}") }),
            );
        }
        if conclusion.is_some_and(|c| !CONCLUSIONS.contains(&c)) {
            return reply(
                422,
                json!({ "message": format!("Invalid conclusion {conclusion:?}") }),
            );
        }
        if status == Some("completed") && conclusion.is_none() && run.conclusion.is_none() {
            return reply(
                422,
                json!({ "message": "conclusion is required when status is completed" }),
            );
        }
        if !body["output"].is_null() {
            let (Some(title), Some(summary)) = (
                body["output"]["title"].as_str(),
                body["output"]["summary"].as_str(),
            ) else {
                return reply(
                    422,
                    json!({ "message": "output needs a title and a summary" }),
                );
            };
            if summary.chars().count() > 65_535 {
                return reply(
                    422,
                    json!({ "message": "output.summary is too long (maximum is 65535 characters)" }),
                );
            }
            run.title = Some(title.to_owned());
            run.summary = Some(summary.to_owned());
        }
        // A conclusion alone completes the run, as on GitHub.
        match (status, conclusion) {
            (Some(s), _) => run.statuses.push(s.to_owned()),
            (None, Some(_)) => run.statuses.push("completed".into()),
            (None, None) => {}
        }
        if let Some(c) = conclusion {
            run.conclusion = Some(c.to_owned());
        }
        reply(200, run.to_json())
    }
}

#[async_trait(?Send)]
impl Transport for FakeGitHub {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, String> {
        Ok(self.handle(req))
    }
}

/// GitHub's `YYYY-MM-DDTHH:MM:SSZ` for a time in ms (civil from days,
/// H. Hinnant's algorithm).
fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    )
}

/// Signs nothing: the fake GitHub does not verify the JWT's signature.
struct FixedSigner;

#[async_trait(?Send)]
impl Rs256Signer for FixedSigner {
    async fn sign(&self, _pkcs8_der: &[u8], _data: &[u8]) -> Result<Vec<u8>, String> {
        Ok(vec![0x5a; 256])
    }
}

// ---------------------------------------------------------------------------
// FakeSandbox: the agent's workspaces and detached processes.
// ---------------------------------------------------------------------------

/// How a scripted command ends.
#[derive(Debug, Clone)]
struct Script {
    exit_code: i32,
    /// Printed output; `$NAME` / `${NAME}` expand from the process env.
    output: String,
    /// Long-polls answered "still running" before the one that ends it.
    running_polls: u32,
}

#[derive(Debug, Clone)]
struct CheckoutRecord {
    workspace: String,
    repo_url: String,
    sha: String,
    token: Option<String>,
}

#[derive(Debug, Clone)]
struct StartRecord {
    id: String,
    workspace: String,
    env: BTreeMap<String, String>,
    /// False when the id was known and the agent answered the existing one.
    spawned: bool,
}

/// One spawned process, in virtual time.
#[derive(Debug, Clone)]
struct ProcessRun {
    workspace: String,
    sha: String,
    started_ms: i64,
    ended_ms: Option<i64>,
}

struct Process {
    sha: String,
    env: BTreeMap<String, String>,
    script: Script,
    polls_left: u32,
    started_ms: i64,
    run: usize,
    finished: Option<ProcessState>,
}

#[derive(Default)]
struct SandboxState {
    scripts: Vec<(String, Script)>,
    workspaces: HashMap<String, String>,
    processes: HashMap<String, Process>,
    checkouts: Vec<CheckoutRecord>,
    starts: Vec<StartRecord>,
    runs: Vec<ProcessRun>,
    /// Commits whose processes run until the test releases them.
    held: HashSet<String>,
    /// Long-polls a held process may answer "still running" (so its holder
    /// heartbeats between them).
    grants: HashMap<String, u32>,
    replace_container_at_poll: Option<u32>,
    containers_replaced: u32,
    hold_spins: u32,
    unexpected: Vec<String>,
}

struct FakeSandbox {
    clock: ManualClock,
    st: RefCell<SandboxState>,
}

fn sandbox_error(status: u16, code: &str, message: impl Into<String>) -> SandboxError {
    SandboxError {
        code: code.into(),
        message: message.into(),
        status: Some(status),
    }
}

/// The agent's id rule: 1 to 100 characters of `[A-Za-z0-9_-]`.
fn check_id(id: &str, what: &str) -> Result<(), SandboxError> {
    let ok = (1..=100).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(sandbox_error(
            400,
            "invalid_id",
            format!("{what} id {id:?} is not valid"),
        ))
    }
}

fn running(id: &str) -> ProcessState {
    ProcessState {
        id: id.into(),
        status: "running".into(),
        exit_code: None,
        signal: None,
        output: String::new(),
        output_bytes: 0,
        output_truncated: false,
        duration_ms: None,
    }
}

/// `$NAME` and `${NAME}` from the env, as `sh` would expand them in `echo`.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut names: Vec<&String> = env.keys().collect();
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut out = text.to_owned();
    for n in names {
        out = out
            .replace(&format!("${{{n}}}"), &env[n])
            .replace(&format!("${n}"), &env[n]);
    }
    out
}

enum PollPlan {
    Hold(String),
    Sleep,
    Finish,
}

impl FakeSandbox {
    fn new(clock: ManualClock) -> FakeSandbox {
        FakeSandbox {
            clock,
            st: RefCell::default(),
        }
    }

    // --- what the test sets up ---

    fn script(&self, command: &str, exit_code: i32, output: &str) {
        self.script_running(command, exit_code, output, 0);
    }

    fn script_running(&self, command: &str, exit_code: i32, output: &str, running_polls: u32) {
        let s = Script {
            exit_code,
            output: output.into(),
            running_polls,
        };
        self.st.borrow_mut().scripts.push((command.into(), s));
    }

    /// Processes of this commit keep running until `release`.
    fn hold(&self, sha: &str) {
        self.st.borrow_mut().held.insert(sha.into());
    }

    fn release(&self, sha: &str) {
        self.st.borrow_mut().held.remove(sha);
    }

    /// Lets a held process answer `n` more long-polls "still running".
    fn grant(&self, sha: &str, n: u32) {
        *self.st.borrow_mut().grants.entry(sha.into()).or_insert(0) += n;
    }

    fn grants_left(&self, sha: &str) -> u32 {
        self.st.borrow().grants.get(sha).copied().unwrap_or(0)
    }

    /// At the n-th long-poll from now the container is replaced: every
    /// process and workspace is gone.
    fn replace_container_at_poll(&self, n: u32) {
        self.st.borrow_mut().replace_container_at_poll = Some(n);
    }

    // --- what the test reads back ---

    fn checkouts_in(&self, workspace: &str) -> Vec<CheckoutRecord> {
        self.st
            .borrow()
            .checkouts
            .iter()
            .filter(|c| c.workspace == workspace)
            .cloned()
            .collect()
    }

    fn starts_in(&self, workspace: &str) -> Vec<StartRecord> {
        self.st
            .borrow()
            .starts
            .iter()
            .filter(|s| s.workspace == workspace)
            .cloned()
            .collect()
    }

    fn runs_in(&self, workspace: &str) -> Vec<ProcessRun> {
        self.st
            .borrow()
            .runs
            .iter()
            .filter(|r| r.workspace == workspace)
            .cloned()
            .collect()
    }

    fn only_run_in(&self, workspace: &str) -> ProcessRun {
        let runs = self.runs_in(workspace);
        assert_eq!(runs.len(), 1, "one process in {workspace}: {runs:#?}");
        runs.into_iter().next().unwrap()
    }

    fn all_runs(&self) -> Vec<ProcessRun> {
        self.st.borrow().runs.clone()
    }

    // --- long-polls ---

    /// Resolves when the commit is released (false) or a poll is granted
    /// (true). Driven by `poll_once`; a `block_on` on a held process would
    /// spin, so it is stopped with a clear message instead.
    async fn held(&self, sha: &str) -> bool {
        std::future::poll_fn(|cx| {
            let st = &mut *self.st.borrow_mut();
            if !st.held.contains(sha) {
                return Poll::Ready(false);
            }
            if let Some(g) = st.grants.get_mut(sha).filter(|g| **g > 0) {
                *g -= 1;
                return Poll::Ready(true);
            }
            st.hold_spins += 1;
            assert!(
                st.hold_spins < 10_000,
                "a held process was polled 10,000 times: drive its pass with poll_once"
            );
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await
    }

    fn finish(&self, id: &str) -> Option<ProcessState> {
        self.clock.advance(1_000);
        let now = self.clock.now_ms();
        let st = &mut *self.st.borrow_mut();
        let p = st.processes.get_mut(id)?;
        let output = expand(&p.script.output, &p.env);
        let state = ProcessState {
            id: id.into(),
            status: "exited".into(),
            exit_code: Some(p.script.exit_code),
            signal: None,
            output_bytes: output.len() as u64,
            output,
            output_truncated: false,
            duration_ms: Some(now - p.started_ms),
        };
        p.finished = Some(state.clone());
        st.runs[p.run].ended_ms = Some(now);
        Some(state)
    }
}

#[async_trait(?Send)]
impl Sandbox for FakeSandbox {
    async fn checkout(&self, req: &Checkout<'_>) -> Result<(), SandboxError> {
        check_id(req.workspace, "workspace")?;
        if !req.repo_url.starts_with("https://") || !is_sha(req.sha) {
            return Err(sandbox_error(
                400,
                "invalid_request",
                format!("bad checkout {} @ {}", req.repo_url, req.sha),
            ));
        }
        let st = &mut *self.st.borrow_mut();
        st.checkouts.push(CheckoutRecord {
            workspace: req.workspace.into(),
            repo_url: req.repo_url.into(),
            sha: req.sha.into(),
            token: req.token.map(|t| t.expose().clone()),
        });
        st.workspaces.insert(req.workspace.into(), req.sha.into());
        Ok(())
    }

    async fn workspace(&self, workspace: &str) -> Result<WorkspaceState, SandboxError> {
        check_id(workspace, "workspace")?;
        let sha = self.st.borrow().workspaces.get(workspace).cloned();
        Ok(WorkspaceState {
            exists: sha.is_some(),
            sha,
        })
    }

    async fn start(&self, spec: &ProcessSpec<'_>) -> Result<ProcessState, SandboxError> {
        check_id(spec.id, "process")?;
        check_id(spec.workspace, "workspace")?;
        let env_ok = spec
            .env
            .iter()
            .all(|(k, v)| !k.is_empty() && !k.contains(['=', '\0']) && !v.contains('\0'));
        if !(1..=3_600_000).contains(&spec.timeout_ms) || spec.command.is_empty() || !env_ok {
            return Err(sandbox_error(400, "invalid_request", "bad process spec"));
        }
        let now = self.clock.now_ms();
        let st = &mut *self.st.borrow_mut();
        let record = |spawned| StartRecord {
            id: spec.id.into(),
            workspace: spec.workspace.into(),
            env: spec.env.clone(),
            spawned,
        };
        if let Some(p) = st.processes.get(spec.id) {
            let state = p.finished.clone().unwrap_or_else(|| running(spec.id));
            st.starts.push(record(false));
            return Ok(state);
        }
        if !st.workspaces.contains_key(spec.workspace) {
            return Err(sandbox_error(
                404,
                "workspace_not_found",
                format!("workspace {} does not exist", spec.workspace),
            ));
        }
        let Some(script) = st
            .scripts
            .iter()
            .find(|(c, _)| spec.command.contains(c.as_str()))
            .map(|(_, s)| s.clone())
        else {
            st.unexpected
                .push(format!("unscripted command {:?}", spec.command));
            return Err(sandbox_error(
                400,
                "unscripted",
                format!("FakeSandbox has no script for {:?}", spec.command),
            ));
        };
        let sha = spec.env.get("SLUICE_SHA").cloned().unwrap_or_default();
        st.runs.push(ProcessRun {
            workspace: spec.workspace.into(),
            sha: sha.clone(),
            started_ms: now,
            ended_ms: None,
        });
        let run = st.runs.len() - 1;
        let polls_left = script.running_polls;
        st.processes.insert(
            spec.id.into(),
            Process {
                sha,
                env: spec.env.clone(),
                script,
                polls_left,
                started_ms: now,
                run,
                finished: None,
            },
        );
        st.starts.push(record(true));
        Ok(running(spec.id))
    }

    async fn process(&self, id: &str, wait_ms: i64) -> Result<Option<ProcessState>, SandboxError> {
        check_id(id, "process")?;
        let plan = {
            let st = &mut *self.st.borrow_mut();
            let Some(p) = st.processes.get(id) else {
                return Ok(None);
            };
            if let Some(done) = &p.finished {
                return Ok(Some(done.clone()));
            }
            if wait_ms <= 0 {
                return Ok(Some(running(id)));
            }
            if let Some(n) = st.replace_container_at_poll {
                if n <= 1 {
                    st.replace_container_at_poll = None;
                    st.processes.clear();
                    st.workspaces.clear();
                    st.containers_replaced += 1;
                    return Ok(None);
                }
                st.replace_container_at_poll = Some(n - 1);
            }
            let p = st.processes.get_mut(id).expect("still there");
            if st.held.contains(&p.sha) {
                PollPlan::Hold(p.sha.clone())
            } else if p.polls_left > 0 {
                p.polls_left -= 1;
                PollPlan::Sleep
            } else {
                PollPlan::Finish
            }
        };
        match plan {
            PollPlan::Hold(sha) => {
                if self.held(&sha).await {
                    return Ok(Some(running(id)));
                }
            }
            // A long-poll of a process that keeps running lasts its wait.
            PollPlan::Sleep => {
                self.clock.sleep(wait_ms).await;
                return Ok(Some(running(id)));
            }
            PollPlan::Finish => {}
        }
        Ok(self.finish(id))
    }
}

// ---------------------------------------------------------------------------
// FakeWaker and FakeSecrets
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Wake {
    instance_id: String,
    event_type: String,
    delivered: bool,
}

#[derive(Default)]
struct FakeWaker {
    wakes: RefCell<Vec<Wake>>,
}

impl FakeWaker {
    fn recorded(&self) -> Vec<(String, String)> {
        self.wakes
            .borrow()
            .iter()
            .map(|w| (w.instance_id.clone(), w.event_type.clone()))
            .collect()
    }
}

#[async_trait(?Send)]
impl Waker for FakeWaker {
    async fn wake(&self, instance_id: &str, event_type: &str) -> Result<(), String> {
        // As the Worker's waker: an id that names no object is refused.
        InstanceId::parse(instance_id).map_err(|e| e.to_string())?;
        self.wakes.borrow_mut().push(Wake {
            instance_id: instance_id.into(),
            event_type: event_type.into(),
            delivered: false,
        });
        Ok(())
    }
}

#[derive(Default)]
struct FakeSecrets(RefCell<HashMap<String, String>>);

impl FakeSecrets {
    fn set(&self, name: &str, value: &str) {
        self.0.borrow_mut().insert(name.into(), value.into());
    }
}

impl SecretSource for FakeSecrets {
    fn secret(&self, name: &str) -> Option<Secret> {
        self.0.borrow().get(name).cloned().map(Secret::new)
    }
}

// ---------------------------------------------------------------------------
// The rig: one world of several instances sharing the index and the clock.
// ---------------------------------------------------------------------------

struct Rig {
    clock: ManualClock,
    index: std::rc::Rc<CountingDb>,
    github: FakeGitHub,
    sandbox: FakeSandbox,
    waker: FakeWaker,
    secrets: FakeSecrets,
    /// The runs' object storage (logs).
    blobs: MemoryBlobs,
    signer: FixedSigner,
}

/// One instance: its own journal, the rig's index and clock.
struct Inst {
    world: World,
    id: String,
    run: String,
    input: Value,
}

type PendingPass<'r> = Pin<Box<dyn Future<Output = PassResult> + 'r>>;

impl Rig {
    fn new() -> Rig {
        let clock = ManualClock::new(T0);
        Rig {
            index: std::rc::Rc::new(CountingDb::new()),
            github: FakeGitHub::new(clock.clone()),
            sandbox: FakeSandbox::new(clock.clone()),
            waker: FakeWaker::default(),
            secrets: FakeSecrets::default(),
            blobs: MemoryBlobs::default(),
            signer: FixedSigner,
            clock,
        }
    }

    /// The Worker's registry over the fakes (`RunEnvParts::registry`).
    fn registry(&self) -> Registry<'_> {
        Registry {
            env: RunEnv {
                github: GitHub {
                    transport: &self.github,
                    signer: &self.signer,
                    clock: &self.clock,
                    api_url: self.github.api_url.clone(),
                    app_id: Some(APP_ID.into()),
                    key_der: Ok(Secret::new(b"fake pkcs8 der".to_vec())),
                },
                sandbox: &self.sandbox,
                blobs: &self.blobs,
                db: self.index.as_ref(),
                waker: &self.waker,
                secrets: &self.secrets,
                notify: Some(NotifyTarget {
                    url: NOTIFY_URL.into(),
                    secret: Some(Secret::new(NOTIFY_SECRET.into())),
                }),
                pool_capacity: 4,
                public_url: PUBLIC_URL.into(),
            },
        }
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    // --- instances ---

    fn create(&self, req: CreateRequest) -> Inst {
        let mut world = World::with_index(self.index.clone());
        world.clock = self.clock.clone();
        let c = block_on(world.engine().create(&req)).expect("create");
        assert!(c.created);
        Inst {
            world,
            id: c.id,
            run: req.run,
            input: req.input,
        }
    }

    fn check(&self, sha: &str) -> Inst {
        let input = CheckInput {
            repo: REPO.into(),
            clone_url: CLONE_URL.into(),
            sha: sha.into(),
            installation_id: INSTALLATION,
            pr_number: PR_NUMBER,
        };
        self.create(CreateRequest {
            key: format!("check:{REPO}:{}", &sha[..12]),
            run: "check".into(),
            input: json!(input),
            repo: Some(REPO.into()),
            entity: Some(format!("pr:{PR_NUMBER}")),
            sha: Some(sha.into()),
            max_steps: None,
            max_duration_ms: None,
        })
    }

    fn deploy(&self, sha: &str) -> Inst {
        let input = DeployInput {
            repo: REPO.into(),
            clone_url: CLONE_URL.into(),
            branch: BRANCH.into(),
            sha: sha.into(),
            installation_id: INSTALLATION,
        };
        self.create(CreateRequest {
            key: format!("deploy:{REPO}:{BRANCH}:{}", &sha[..12]),
            run: "deploy".into(),
            input: json!(input),
            repo: Some(REPO.into()),
            entity: Some(format!("branch:{BRANCH}")),
            sha: Some(sha.into()),
            max_steps: None,
            max_duration_ms: None,
        })
    }

    /// A pass as the Worker runs it: the engine's pass, then `finalize`
    /// when the instance ended (`worker_glue::instance::pass_once`).
    fn start_pass<'r>(&'r self, i: &'r Inst) -> PendingPass<'r> {
        Box::pin(async move {
            let reg = self.registry();
            let r = i
                .world
                .engine()
                .pass(&reg, &i.world.interrupt)
                .await
                .expect("pass");
            if r.status.is_terminal() {
                reg.finalize(&i.run, &i.id, &i.input, r.status).await;
            }
            r
        })
    }

    fn pass(&self, i: &Inst) -> PassResult {
        block_on(self.start_pass(i))
    }

    /// Passes until the instance ends, moving the clock to each wake-up.
    fn run_to_end(&self, i: &Inst) -> Status {
        for _ in 0..20 {
            let r = self.pass(i);
            match (r.status, r.wake_at_ms) {
                (s, _) if s.is_terminal() => return s,
                (Status::Waiting, Some(wake)) => self.clock.set(wake.max(self.now())),
                other => panic!("unexpected pass result {other:?}"),
            }
        }
        panic!("{} did not end in 20 passes", i.id);
    }

    /// An operator command, then `finalize` only if the test asks.
    fn command(&self, i: &Inst, cmd: Command) -> Status {
        block_on(i.world.engine().command(&cmd)).expect("command")
    }

    fn finalize(&self, i: &Inst) {
        let status = i
            .world
            .engine()
            .record()
            .expect("record")
            .expect("instance")
            .status;
        block_on(self.registry().finalize(&i.run, &i.id, &i.input, status));
    }

    /// Delivers the wakes recorded for `i` (the Worker's `/event`), as
    /// `InstanceWaker` does; returns how many.
    fn deliver(&self, i: &Inst) -> usize {
        let events: Vec<String> = self
            .waker
            .wakes
            .borrow_mut()
            .iter_mut()
            .filter(|w| w.instance_id == i.id && !w.delivered)
            .map(|w| {
                w.delivered = true;
                w.event_type.clone()
            })
            .collect();
        for e in &events {
            match i.world.engine().send_event(e, &json!({})) {
                Ok(_) | Err(CommandError::Conflict(_)) => {}
                Err(other) => panic!("send_event: {other:?}"),
            }
        }
        events.len()
    }

    // --- reading back ---

    fn record(&self, i: &Inst) -> InstanceRecord {
        i.world
            .journal
            .load_instance()
            .unwrap()
            .expect("instance exists")
    }

    fn row(&self, i: &Inst) -> ExecutionRow {
        block_on(executions::get(self.index.as_ref(), &i.id))
            .unwrap()
            .expect("row exists")
    }

    fn journal(&self, i: &Inst) -> Vec<Entry> {
        i.world.journal.entries().unwrap()
    }

    fn step_names(&self, i: &Inst) -> Vec<String> {
        self.journal(i).into_iter().map(|e| e.name).collect()
    }

    fn entry(&self, i: &Inst, name: &str) -> Entry {
        self.journal(i)
            .into_iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no step {name:?}"))
    }

    fn command_result(&self, i: &Inst, step: &str) -> CommandResult {
        serde_json::from_str(self.entry(i, step).value.as_deref().unwrap()).unwrap()
    }

    fn output(&self, i: &Inst) -> Value {
        serde_json::from_str(self.record(i).output.as_deref().expect("output")).unwrap()
    }

    fn log(&self, key: &str) -> Option<String> {
        self.blobs.0.borrow().get(key).cloned()
    }

    /// The instance's row in the serial queue: state, reason, superseded_by.
    fn queue_row(&self, i: &Inst) -> Value {
        let rows = block_on(self.index.db.all(sluice::stmt!(
            "SELECT state, skipped_reason, superseded_by FROM serial_queue WHERE execution_id = ?1",
            i.id.as_str(),
        )))
        .unwrap();
        assert_eq!(rows.len(), 1, "one serial_queue row for {}", i.id);
        Value::Object(rows[0].clone())
    }

    fn queue_state(&self, i: &Inst) -> String {
        self.queue_row(i)["state"].as_str().unwrap().to_owned()
    }

    /// Every row of every table of the index, as text.
    fn index_dump(&self) -> String {
        let tables = block_on(self.index.db.all(sluice::stmt!(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
        )))
        .unwrap();
        let mut out = String::new();
        for t in tables {
            let name = t["name"].as_str().unwrap().to_owned();
            let rows = block_on(
                self.index
                    .db
                    .all(Stmt::new(format!("SELECT * FROM \"{name}\""), vec![])),
            )
            .unwrap();
            out.push_str(&serde_json::to_string(&rows).unwrap());
        }
        out
    }

    /// The instance's own storage, as text: its record and every entry.
    fn journal_dump(&self, i: &Inst) -> String {
        format!(
            "{}{}",
            serde_json::to_string(&self.record(i)).unwrap(),
            serde_json::to_string(&self.journal(i)).unwrap()
        )
    }

    /// Where a deploy's held command now is: pending inside its long-poll.
    fn holds_in_flight(&self, pass: &mut PendingPass<'_>) {
        assert!(
            pass.as_mut().now_or_never().is_none(),
            "the holder's pass is still inside its command"
        );
    }
}

impl Drop for Rig {
    /// Strictness: a request no fake expected fails the test that made it.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        let gh = &self.github.st.borrow().unexpected;
        assert!(gh.is_empty(), "FakeGitHub saw unexpected requests: {gh:#?}");
        let sb = &self.sandbox.st.borrow().unexpected;
        assert!(
            sb.is_empty(),
            "FakeSandbox saw unexpected requests: {sb:#?}"
        );
    }
}

/// A deploy rig: commits `shas` carry `config`, `./deploy.sh` is scripted.
fn deploy_rig(shas: &[&str], config: &str) -> Rig {
    let rig = Rig::new();
    for s in shas {
        rig.github.commit(REPO, s, &[(".sluice.toml", config)]);
    }
    rig.sandbox.script(
        "./deploy.sh",
        0,
        "deployed $SLUICE_SHA (head $SLUICE_HEAD_SHA)\n",
    );
    rig
}

// ---------------------------------------------------------------------------
// The fakes themselves
// ---------------------------------------------------------------------------

#[test]
fn the_fake_formats_token_expiry_as_the_client_parses_it() {
    for ms in [0, T0, T0 + 3_600_000, 951_782_400_000 /* 2000-02-29 */] {
        assert_eq!(
            parse_rfc3339_ms(&rfc3339(ms)),
            Some(ms - ms.rem_euclid(1000)),
            "{}",
            rfc3339(ms)
        );
    }
    let gh = FakeGitHub::new(ManualClock::new(T0));
    let r = gh.handle(HttpRequest {
        method: "DELETE",
        url: format!("{}/repos/{REPO}", gh.api_url),
        headers: vec![],
        body: None,
    });
    assert_eq!(r.status, 599);
    assert_eq!(
        gh.st.borrow_mut().unexpected.drain(..).count(),
        1,
        "an unknown request is recorded"
    );
}

// ---------------------------------------------------------------------------
// 1. check: verdicts and configuration
// ---------------------------------------------------------------------------

#[test]
fn a_passing_check_reports_success_with_the_log_tail_and_stores_the_log() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    let log = "Compiling hello v0.1.0\nrunning 3 tests\ntest result: ok. 3 passed; 0 failed\n";
    rig.sandbox.script("cargo test", 0, log);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.statuses, ["queued", "in_progress", "completed"]);
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    assert_eq!(
        run.external_id.as_deref(),
        Some(c.id.as_str()),
        "the instance finds its own check run again"
    );
    assert_eq!(
        run.details_url,
        Some(format!("{PUBLIC_URL}/v1/executions/{}", c.id))
    );
    assert_eq!(run.title.as_deref(), Some("Passed"));
    assert!(
        run.summary().contains("`cargo test` exited with code 0"),
        "{}",
        run.summary()
    );
    assert!(
        run.summary()
            .contains("test result: ok. 3 passed; 0 failed"),
        "the tail is in the summary"
    );
    // The whole log is stored under the key the command step returned.
    let result = rig.command_result(&c, "run check command");
    assert_eq!(rig.log(&result.log_key).as_deref(), Some(log));
    assert!(run.summary().contains(&result.log_key));
    assert_eq!((result.exit_code, result.timed_out), (Some(0), false));
    let out = rig.output(&c);
    assert_eq!(
        (out["check_run_id"].as_u64(), out["conclusion"].as_str()),
        (Some(run.id), Some("success"))
    );
    // The sandbox checked out the PR head with an installation token and
    // ran the command with the PR's variables.
    let co = rig.sandbox.checkouts_in(&c.id);
    assert_eq!(co.len(), 1);
    assert_eq!(
        (co[0].repo_url.as_str(), co[0].sha.as_str()),
        (CLONE_URL, s.as_str())
    );
    assert!(
        rig.github
            .issued_tokens()
            .contains(co[0].token.as_ref().expect("a token")),
        "a token GitHub issued"
    );
    let start = &rig.sandbox.starts_in(&c.id)[0];
    assert_eq!(start.env["SLUICE_SHA"], s);
    assert_eq!(start.env["SLUICE_REPO"], REPO);
    assert_eq!(start.env["SLUICE_PR"], PR_NUMBER.to_string());
    assert_eq!(rig.row(&c).status, "complete");
}

#[test]
fn a_long_command_spans_several_passes_and_starts_once() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    // Still running after more long-polls than one step waits for.
    rig.sandbox.script_running("cargo test", 0, "done\n", 45);
    let c = rig.check(&s);
    let first = rig.pass(&c);
    assert_eq!(
        first.status,
        Status::Waiting,
        "the pass ends while the command runs"
    );
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    let names = rig.step_names(&c);
    assert!(
        names.contains(&"run check command#2".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"command still running".to_owned()),
        "{names:?}"
    );
    assert_eq!(
        rig.sandbox.starts_in(&c.id).len(),
        1,
        "observed, never started again"
    );
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
}

#[test]
fn a_check_that_exits_3_reports_failure() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox
        .script("cargo test", 3, "test tests::it_works ... FAILED\n");
    let c = rig.check(&s);

    assert_eq!(
        rig.run_to_end(&c),
        Status::Complete,
        "a red test is a verdict, not an instance error"
    );

    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.statuses, ["queued", "in_progress", "completed"]);
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert!(run.summary().contains("exited with code 3"));
    assert!(run.summary().contains("it_works ... FAILED"));
    assert_eq!(
        rig.command_result(&c, "run check command").exit_code,
        Some(3)
    );
}

#[test]
fn a_commit_without_sluice_toml_is_not_configured_and_makes_no_check_run() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[("README.md", "hello")]);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Skipped);

    assert_eq!(rig.row(&c).reason.as_deref(), Some("not-configured"));
    for route in ["list-check-runs", "create-check-run", "update-check-run"] {
        assert!(rig.github.calls_to(route).is_empty(), "no {route} call");
    }
    assert_eq!(rig.github.calls_to("contents").len(), 1);
    assert!(rig.sandbox.checkouts_in(&c.id).is_empty());
}

#[test]
fn an_invalid_sluice_toml_fails_the_check_naming_the_problem() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(
        REPO,
        &s,
        &[(".sluice.toml", "[chek]\ncommand = \"cargo test\"\n")],
    );
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert!(
        run.summary()
            .contains("`.sluice.toml` at this commit is invalid"),
        "{}",
        run.summary()
    );
    assert!(
        run.summary().contains("chek"),
        "names the bad key: {}",
        run.summary()
    );
    assert!(rig.sandbox.checkouts_in(&c.id).is_empty(), "nothing ran");
}

#[test]
fn a_config_with_only_deploy_is_not_configured_for_checks() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github
        .commit(REPO, &s, &[(".sluice.toml", DEPLOY_TOML)]);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Skipped);

    assert_eq!(rig.row(&c).reason.as_deref(), Some("not-configured"));
    assert!(rig.github.check_runs_on(&s).is_empty());
    assert!(rig.github.calls_to("create-check-run").is_empty());
}

// ---------------------------------------------------------------------------
// 2. check: replay safety of the command step
// ---------------------------------------------------------------------------

#[test]
fn a_pass_that_dies_mid_command_is_replayed_by_observing_the_process() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script_running("cargo test", 0, "ok\n", 3);
    let c = rig.check(&s);

    // The pass reaches the command's long-poll and the executor dies there.
    rig.clock.freeze_timers(true);
    let mut dying = rig.start_pass(&c);
    assert!(dying.as_mut().now_or_never().is_none());
    drop(dying);
    assert_eq!(rig.sandbox.starts_in(&c.id).len(), 1);
    rig.clock.freeze_timers(false);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let starts = rig.sandbox.starts_in(&c.id);
    assert_eq!(
        starts.len(),
        1,
        "the replay observed the process instead of starting it again: {starts:#?}"
    );
    assert!(starts[0].spawned);
    assert_eq!(rig.sandbox.checkouts_in(&c.id).len(), 1);
    assert_eq!(rig.github.calls_to("create-check-run").len(), 1);
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    let rec = rig.record(&c);
    assert_eq!(
        (rec.passes, rec.clean_passes),
        (2, 2),
        "the dead pass counted, and was caught up"
    );
}

#[test]
fn a_container_replaced_mid_wait_is_checked_out_and_started_again() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script_running("cargo test", 0, "ok\n", 2);
    rig.sandbox.replace_container_at_poll(2);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    assert_eq!(rig.sandbox.st.borrow().containers_replaced, 1);
    let starts = rig.sandbox.starts_in(&c.id);
    assert_eq!(starts.len(), 2, "started again in the new container");
    assert!(starts.iter().all(|s| s.spawned));
    assert_eq!(starts[0].id, starts[1].id, "under the same idempotency key");
    assert_eq!(
        rig.sandbox.checkouts_in(&c.id).len(),
        2,
        "the lost workspace was checked out again"
    );
    let step = rig.entry(&c, "run check command");
    assert_eq!(step.attempts, 2, "the step retried once (ProcessLost)");
    assert_eq!(rig.github.check_runs_on(&s).len(), 1, "still one check run");
    assert_eq!(
        rig.github
            .only_check_run(&s, "sluice/check")
            .conclusion
            .as_deref(),
        Some("success")
    );
}

// ---------------------------------------------------------------------------
// 3. GitHub faults
// ---------------------------------------------------------------------------

#[test]
fn github_blips_are_retried_and_the_check_still_completes() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    rig.github.fail_next("token", 1, 502);
    // The second contents failure backs off 4 s: past the inline limit, so
    // the instance suspends and the next pass retries.
    rig.github.fail_next("contents", 2, 502);
    // GitHub creates the check run but the answer is lost: the retry must
    // find it, not create a second.
    rig.github.lose_answer_next("create-check-run");
    rig.github.fail_next("update-check-run", 1, 502);
    let c = rig.check(&s);

    let first = rig.pass(&c);
    assert_eq!(
        first.status,
        Status::Waiting,
        "suspended for the long backoff"
    );
    assert_eq!(rig.entry(&c, "read config").state.as_str(), "retrying");
    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let statuses = |route| {
        rig.github
            .calls_to(route)
            .iter()
            .map(|c| c.status)
            .collect::<Vec<_>>()
    };
    assert_eq!(statuses("token"), [502, 201]);
    assert_eq!(statuses("contents"), [502, 502, 200]);
    assert_eq!(
        statuses("create-check-run"),
        [502],
        "not re-posted: the retry found the run"
    );
    assert_eq!(statuses("list-check-runs"), [200, 200]);
    assert_eq!(statuses("update-check-run"), [502, 200, 200]);
    assert_eq!(
        rig.entry(&c, "read config").attempts,
        4,
        "token 502, contents 502 twice, then read"
    );
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.statuses, ["queued", "in_progress", "completed"]);
    assert_eq!(run.conclusion.as_deref(), Some("success"));
}

/// A 422 will not change on retry: the create step fails at once and the
/// instance errors. No check run exists, so there is nothing to conclude:
/// the PR shows no `sluice/check`, and the error is on the instance.
#[test]
fn a_422_on_check_run_create_is_not_retried() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    rig.github.fail_next("create-check-run", 1, 422);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Errored);

    assert_eq!(
        rig.github.calls_to("create-check-run").len(),
        1,
        "not retried"
    );
    let row = rig.row(&c);
    assert_eq!(row.error_tag.as_deref(), Some("NonRetryable"));
    assert!(
        row.error_message.as_deref().unwrap().contains("422"),
        "{row:?}"
    );
    let step = rig.entry(&c, "create check run");
    assert_eq!((step.state.as_str(), step.attempts), ("failed", 1));
    assert!(
        rig.github.check_runs_on(&s).is_empty(),
        "nothing was created, nothing concluded"
    );
    assert!(
        rig.sandbox.checkouts_in(&c.id).is_empty(),
        "the command never ran"
    );
}

// ---------------------------------------------------------------------------
// 4. deploy: serialization, not-current, supersede, operator skip
// ---------------------------------------------------------------------------

#[test]
fn deploys_of_a_branch_never_overlap_and_the_release_hands_the_group_over() {
    let (a, b, c) = (sha('a'), sha('b'), sha('c'));
    let rig = deploy_rig(&[&a, &b, &c], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);

    // A arrives at the head and takes the group; its command is in flight.
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    assert_eq!(rig.queue_state(&da), "holding");

    // B, the new head, arrives: it waits for the turn event, holding nothing.
    rig.clock.advance(MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    let p = rig.pass(&db);
    assert_eq!(
        (p.status, p.wake_at_ms),
        (Status::Waiting, Some(rig.now() + SERIAL_POLL_MS))
    );
    assert!(rig.record(&db).reason.unwrap().contains("serial-turn"));
    assert_eq!(rig.queue_state(&db), "waiting");
    assert!(rig.sandbox.starts_in(&db.id).is_empty());
    assert_eq!(
        rig.github.only_check_run(&b, "sluice/deploy").statuses,
        ["queued", "in_progress"]
    );

    // C, not the head, is skipped at once: neutral, naming the head, announced.
    rig.clock.advance(MINUTE_MS);
    let dc = rig.deploy(&c);
    assert_eq!(rig.pass(&dc).status, Status::Skipped);
    let row = rig.row(&dc);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (Some("not_current"), Some("RunSkipped"))
    );
    let run = rig.github.only_check_run(&c, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary().contains(&format!("the head is {b}")),
        "{}",
        run.summary()
    );
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].signature_is_valid(), "{:?}", notes[0]);
    assert_eq!(
        notes[0].header("X-Sluice-Event"),
        Some("deployment_auto_skipped")
    );
    let n = notes[0].json();
    assert_eq!(
        (n["reason"].as_str(), n["revision"].as_str()),
        (Some("not_current"), Some(c.as_str()))
    );
    assert_eq!(
        (n["newer_revision"].as_str(), n["execution_id"].as_str()),
        (Some(b.as_str()), Some(dc.id.as_str()))
    );
    assert_eq!(
        rig.queue_state(&db),
        "waiting",
        "a not-current arrival supersedes nobody"
    );
    assert!(rig.sandbox.starts_in(&dc.id).is_empty());

    // A's command ends: its release wakes B.
    rig.clock.advance(MINUTE_MS);
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(
        rig.github
            .only_check_run(&a, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
    assert_eq!(rig.queue_state(&da), "released");
    assert_eq!(
        rig.waker.recorded(),
        [(db.id.clone(), TURN_EVENT.to_owned())]
    );

    // Delivered, the wake lets B take the group, re-read the head and deploy.
    rig.clock.advance(1_000);
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Complete);
    assert_eq!(
        rig.step_names(&db),
        [
            "read config",
            "create check run",
            "start check run",
            "read head",
            "enqueue",
            "claim",
            "turn",
            "claim#2",
            "still holding",
            "re-read head",
            "admission",
            "lease sandbox",
            "run deploy command",
            "release",
            "complete check run",
        ]
    );
    assert_eq!(rig.sandbox.starts_in(&db.id)[0].env["SLUICE_HEAD_SHA"], b);
    assert_eq!(
        rig.github
            .only_check_run(&b, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
    let (ra, rb) = (
        rig.sandbox.only_run_in(&da.id),
        rig.sandbox.only_run_in(&db.id),
    );
    assert_eq!((ra.sha.as_str(), rb.sha.as_str()), (a.as_str(), b.as_str()));
    assert!(
        ra.ended_ms.unwrap() <= rb.started_ms,
        "A ran {ra:?}, B ran {rb:?}: they overlap"
    );
    assert_eq!(rig.sandbox.all_runs().len(), 2, "C never ran");
    assert_eq!(
        rig.github.notifications().len(),
        1,
        "only C's skip was announced"
    );
}

#[test]
fn a_newer_arrival_supersedes_the_waiting_deploy() {
    let (a, b, d) = (sha('a'), sha('b'), sha('d'));
    let rig = deploy_rig(&[&a, &b, &d], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // D, newer still, arrives: B is superseded in D's enqueue and woken.
    rig.clock.advance(MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &d);
    let dd = rig.deploy(&d);
    assert_eq!(rig.pass(&dd).status, Status::Waiting);
    assert_eq!(rig.queue_row(&db)["state"], "superseded");
    assert_eq!(rig.queue_row(&db)["superseded_by"], d.as_str());
    assert_eq!(
        rig.waker.recorded(),
        [(db.id.clone(), TURN_EVENT.to_owned())]
    );

    // B learns it at once: neutral, naming D, announced.
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Skipped);
    let row = rig.row(&db);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (Some("superseded"), Some("RunSkipped"))
    );
    let run = rig.github.only_check_run(&b, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(run.summary().contains(&d), "{}", run.summary());
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].signature_is_valid());
    let n = notes[0].json();
    assert_eq!(
        (n["reason"].as_str(), n["newer_revision"].as_str()),
        (Some("superseded"), Some(d.as_str()))
    );
    assert_eq!(n["revision"], b.as_str());

    // A was never touched; its release hands the group to D.
    assert!(rig.sandbox.runs_in(&da.id)[0].ended_ms.is_none());
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(rig.deliver(&dd), 1);
    assert_eq!(rig.pass(&dd).status, Status::Complete);
    assert!(rig.sandbox.runs_in(&db.id).is_empty(), "B never ran");
    assert_eq!(
        rig.github
            .only_check_run(&d, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
}

/// ADR-0004: the holder re-reads the head after it takes the group; a head
/// that moved on while it waited (the newer push's deploy not queued yet)
/// skips it, and the group is released for the newer one.
#[test]
fn a_holder_whose_commit_is_no_longer_the_head_skips_at_dequeue() {
    let (a, b, f) = (sha('a'), sha('b'), sha('f'));
    let rig = deploy_rig(&[&a, &b, &f], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // F is pushed; its webhook has not arrived when A hands over to B.
    rig.github.set_head(REPO, BRANCH, &f);
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Skipped);

    let row = rig.row(&db);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (Some("not_current"), Some("RunSkipped"))
    );
    assert!(rig.step_names(&db).contains(&"re-read head".to_owned()));
    assert!(rig.sandbox.runs_in(&db.id).is_empty(), "B never ran");
    assert_eq!(
        rig.queue_state(&db),
        "released",
        "the group is free for F's deploy"
    );
    let run = rig.github.only_check_run(&b, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary().contains(&format!("moved on to {f}")),
        "{}",
        run.summary()
    );
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].signature_is_valid());
    let n = notes[0].json();
    assert_eq!(n["reason"], "not_current");
    // The notification names the head the deploy yielded to.
    assert_eq!(n["newer_revision"].as_str(), Some(f.as_str()));
}

#[test]
fn an_operator_skip_ends_a_waiter_silently() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // `POST /v1/executions/{id}/skip`: skip in the queue, then wake.
    rig.clock.advance(MINUTE_MS);
    assert!(block_on(serial::skip(rig.index.as_ref(), GROUP, &db.id, rig.now())).unwrap());
    block_on(rig.waker.wake(&db.id, TURN_EVENT)).unwrap();
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Skipped);

    let row = rig.row(&db);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (None, Some("RunSkipped")),
        "an operator's skip records no reason"
    );
    assert_eq!(
        rig.queue_row(&db)["skipped_reason"],
        Value::Null,
        "an operator's skip records no reason"
    );
    assert_eq!(
        rig.github
            .only_check_run(&b, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("neutral")
    );
    assert!(
        rig.github.notifications().is_empty(),
        "an operator's skip is silent"
    );
    assert!(rig.github.calls_to("notify").is_empty());
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
}

// ---------------------------------------------------------------------------
// 5. deploy: what a 60-minute wait costs
// ---------------------------------------------------------------------------

/// What B's wait cost: its claim steps, passes and minutes until skipped.
struct WaitCost {
    claims: usize,
    passes: u32,
    waited_min: i64,
}

/// A holds (its command in flight, heartbeating between its long-polls);
/// B, the head, waits behind it and runs a pass at each wake-up,
/// `alarm_late_ms` after it (a Durable Object alarm fires a few ms late).
fn wait_behind_a_live_holder(alarm_late_ms: i64) -> WaitCost {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    let arrived = rig.now();

    let mut passes = 0;
    while !rig.record(&db).status.is_terminal() {
        assert!(passes < 20, "B never ended");
        if let Some(wake) = rig.record(&db).wake_at_ms {
            let due = wake + alarm_late_ms;
            while rig.now() < due {
                // Every 5 minutes A's long-poll returns and A heartbeats.
                rig.clock.advance((due - rig.now()).min(5 * MINUTE_MS));
                rig.sandbox.grant(&a, 1);
                rig.holds_in_flight(&mut a_pass);
                assert_eq!(
                    rig.sandbox.grants_left(&a),
                    0,
                    "A polled (and heartbeated) again"
                );
            }
        }
        rig.pass(&db);
        passes += 1;
    }
    let cost = WaitCost {
        claims: rig
            .step_names(&db)
            .into_iter()
            .filter(|n| n == "claim" || n.starts_with("claim#"))
            .count(),
        passes,
        waited_min: (rig.now() - arrived) / MINUTE_MS,
    };

    let row = rig.row(&db);
    assert_eq!(row.status, "skipped");
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (Some("queued_timeout"), Some("SerialQueueTimedOut"))
    );
    let run = rig.github.only_check_run(&b, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary().contains("waited over 60 minutes"),
        "{}",
        run.summary()
    );
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].signature_is_valid());
    assert_eq!(notes[0].json()["reason"], "queued_timeout");
    // A heartbeated throughout: still the live holder, never taken over.
    let view = block_on(serial::explain(
        rig.index.as_ref(),
        GROUP,
        &QueuePolicy::default(),
        rig.now(),
    ))
    .unwrap();
    let holder = view.holder.expect("A still holds");
    assert_eq!(
        (holder.execution_id.as_str(), holder.stale),
        (da.id.as_str(), false)
    );
    assert!(holder.heartbeat_age_ms <= 5 * MINUTE_MS);
    assert!(view.waiters.is_empty(), "B left the queue");
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    assert!(rig.waker.recorded().is_empty(), "nobody left to wake");
    cost
}

#[test]
fn a_waiter_behind_a_live_holder_times_out_in_at_most_4_claim_steps() {
    for late_ms in [3, 0] {
        let cost = wait_behind_a_live_holder(late_ms);
        println!(
            "scenario 5 (alarms {late_ms} ms late): B made {} claim steps in {} passes, skipped after {} min",
            cost.claims, cost.passes, cost.waited_min
        );
        assert!(cost.claims <= 4, "{} claim steps", cost.claims);
        assert!(
            cost.waited_min >= 60,
            "timed out after only {} min",
            cost.waited_min
        );
    }
    // On time to the millisecond too: the last poll lands just past the
    // 60-minute boundary, so that claim itself decides the timeout.
    assert_eq!(wait_behind_a_live_holder(3).waited_min, 60);
    assert_eq!(wait_behind_a_live_holder(0).waited_min, 60);
}

/// A handoff in the waiter's last poll window is taken, not mistaken for a
/// timeout: with `queued_timeout = 30m` the polls are at 0 and 20 min; a
/// release at 25 min hands B the free group and B deploys.
#[test]
fn a_handoff_in_the_last_poll_window_is_taken_not_timed_out() {
    let (a, b) = (sha('a'), sha('b'));
    let config = format!("{DEPLOY_TOML}[deploy.queue]\nqueued_timeout = \"30m\"\n");
    let rig = deploy_rig(&[&a, &b], &config);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    for _ in 0..4 {
        rig.clock.advance(5 * MINUTE_MS);
        rig.sandbox.grant(&a, 1);
        rig.holds_in_flight(&mut a_pass);
    }
    assert_eq!(
        rig.pass(&db).status,
        Status::Waiting,
        "second claim at 20 min: still behind A"
    );

    rig.clock.advance(5 * MINUTE_MS);
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(
        rig.deliver(&db),
        1,
        "A's release handed the group to B at 25 min"
    );
    let p = rig.pass(&db);

    assert_eq!(
        rig.row(&db).reason,
        None,
        "B was skipped {:?} with the group free",
        rig.row(&db).reason
    );
    assert_eq!(p.status, Status::Complete);
}

// ---------------------------------------------------------------------------
// 6. deploy: secrets
// ---------------------------------------------------------------------------

#[test]
fn a_deploy_secret_reaches_the_process_and_nothing_else() {
    const VALUE: &str = "cf-api-token-5f2b7c9e1d44";
    let a = sha('a');
    let config =
        "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nsecrets = [\"DEPLOY_TOKEN\"]\n";
    let rig = Rig::new();
    rig.github.commit(REPO, &a, &[(".sluice.toml", config)]);
    rig.sandbox.script(
        "./deploy.sh",
        0,
        "auth with ${DEPLOY_TOKEN}\npublished hello@$SLUICE_SHA\n",
    );
    rig.secrets.set("DEPLOY_TOKEN", VALUE);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);

    assert_eq!(rig.run_to_end(&da), Status::Complete);

    assert_eq!(
        rig.sandbox.starts_in(&da.id)[0].env["DEPLOY_TOKEN"],
        VALUE,
        "exported to the command"
    );
    let result = rig.command_result(&da, "run deploy command");
    let log = rig.log(&result.log_key).expect("log stored");
    assert!(
        log.contains("auth with ***\n") && !log.contains(VALUE),
        "{log}"
    );
    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    assert!(run.summary().contains("auth with ***") && !run.summary().contains(VALUE));
    // Nowhere else: not the journal, not D1, not a request to GitHub. The
    // installation token Sluice used for the checkout neither.
    let journal = rig.journal_dump(&da);
    let index = rig.index_dump();
    let to_github: String = rig
        .github
        .all_calls()
        .iter()
        .map(|c| format!("{} {} {:?}", c.method, c.path, c.body))
        .collect();
    let tokens = rig.github.issued_tokens();
    assert!(!tokens.is_empty());
    for secret in tokens.iter().map(String::as_str).chain([VALUE]) {
        assert!(!journal.contains(secret), "{secret} is in the journal");
        assert!(!index.contains(secret), "{secret} is in D1");
        assert!(!to_github.contains(secret), "{secret} was sent to GitHub");
    }
    assert!(
        index.contains("run deploy command"),
        "the dump does read the step timeline"
    );
}

#[test]
fn a_deploy_naming_an_unset_secret_fails_without_running() {
    let a = sha('a');
    let config =
        "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nsecrets = [\"DEPLOY_TOKEN\"]\n";
    let rig = deploy_rig(&[&a], config);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);

    assert_eq!(rig.run_to_end(&da), Status::Complete);

    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert!(
        run.summary().contains("`DEPLOY_TOKEN`"),
        "{}",
        run.summary()
    );
    assert!(rig.sandbox.starts_in(&da.id).is_empty());
    assert_eq!(
        rig.queue_state(&da),
        "released",
        "the group is released on this exit too"
    );
}

// ---------------------------------------------------------------------------
// 7. finalize after an operator's terminate
// ---------------------------------------------------------------------------

/// A holds, then stalls before it starts deploying (here: D1 refuses its
/// heartbeat until the retry backoff suspends it). Past the 10-minute
/// bound B takes the group over and deploys; when A comes back it finds it
/// no longer holds the group and does not deploy.
#[test]
fn a_holder_that_stalled_and_was_taken_over_does_not_deploy() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    rig.index.fail_next_runs.set(3);
    let stalled = rig.pass(&da);
    assert_eq!(
        stalled.status,
        Status::Waiting,
        "A's 'still holding' step backs off"
    );
    assert!(rig.step_names(&da).contains(&"still holding".to_owned()));

    rig.clock.advance(11 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.run_to_end(&db), Status::Complete);
    assert_eq!(
        rig.sandbox.runs_in(&db.id).len(),
        1,
        "B took the stale group over and deployed"
    );

    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert!(
        rig.sandbox.runs_in(&da.id).is_empty(),
        "A never deploys after losing its group"
    );
    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("cancelled"));
    assert!(
        run.summary().contains("took its group over"),
        "{}",
        run.summary()
    );
}

#[test]
fn a_restarted_deploy_queues_afresh_and_deploys_again() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert_eq!(rig.sandbox.runs_in(&da.id).len(), 1);
    assert_eq!(
        rig.command(&da, Command::Restart { from_step: None }),
        Status::Queued
    );
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert_eq!(
        rig.sandbox.runs_in(&da.id).len(),
        2,
        "the restart deployed again"
    );
}

#[test]
fn terminating_a_waiting_deploy_then_finalizing_withdraws_it_from_the_queue() {
    let (a, b, e) = (sha('a'), sha('b'), sha('e'));
    let rig = deploy_rig(&[&a, &b, &e], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    rig.clock.advance(MINUTE_MS);
    assert_eq!(rig.command(&db, Command::Terminate), Status::Terminated);
    assert_eq!(
        rig.queue_state(&db),
        "waiting",
        "the engine alone knows nothing of the gate"
    );
    rig.finalize(&db);
    assert_eq!(rig.queue_state(&db), "released");
    let run = rig.github.only_check_run(&b, "sluice/deploy");
    assert_eq!(
        (
            run.statuses.last().map(String::as_str),
            run.conclusion.as_deref()
        ),
        (Some("completed"), Some("cancelled")),
        "the check run the terminated deploy opened does not stay in progress"
    );
    rig.finalize(&db);
    assert_eq!(rig.queue_state(&db), "released", "finalize is idempotent");

    // The group proceeds: a new head queues, and A's release hands the
    // group to it, not to the terminated B.
    rig.github.set_head(REPO, BRANCH, &e);
    let de = rig.deploy(&e);
    assert_eq!(rig.pass(&de).status, Status::Waiting);
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(
        rig.waker.recorded(),
        [(de.id.clone(), TURN_EVENT.to_owned())]
    );
    assert_eq!(rig.deliver(&de), 1);
    assert_eq!(rig.pass(&de).status, Status::Complete);
    assert!(rig.sandbox.runs_in(&db.id).is_empty());
}

#[test]
fn terminating_the_holder_then_finalizing_hands_the_group_to_the_waiter_at_once() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // A's executor dies mid-command; an operator terminates A.
    drop(a_pass);
    rig.clock.freeze_timers(false);
    rig.clock.advance(MINUTE_MS);
    assert_eq!(rig.command(&da, Command::Terminate), Status::Terminated);
    rig.finalize(&da);

    assert_eq!(rig.queue_state(&da), "released");
    assert_eq!(
        rig.waker.recorded(),
        [(db.id.clone(), TURN_EVENT.to_owned())]
    );
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(
        rig.pass(&db).status,
        Status::Complete,
        "B took the group without waiting for A to go stale"
    );
    assert!(rig.now() - T0 < HOLDER_STALE_MS);
    assert_eq!(
        rig.github
            .only_check_run(&b, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
}
