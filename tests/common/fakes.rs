//! Strict fakes of what runs talk to, shared by the run tests and the
//! run-level model: GitHub's REST API (a `Transport`), the sandbox agent,
//! the waker and the Worker's secrets, and the `Rig` that puts them around
//! the real engine and the real runs. Every instance of a rig has its own
//! journal and shares one index (the gates live there) and one virtual
//! clock, as instances share D1 and time in the Worker.
//!
//! The fakes are as strict as production: an endpoint the fake does not
//! serve, a token it never issued, a commit it never saw, a command it has
//! no script for are errors the run sees, and `Rig`'s drop check fails the
//! test on any request the fake did not expect.
#![allow(dead_code)]

use percent_encoding::percent_decode_str;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Poll;

use async_trait::async_trait;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use futures::FutureExt;
use serde_json::{json, Value};
use sluice::engine::{
    Clock, Command, CommandError, CreateRequest, InstanceId, PassResult, RunRegistry, Status,
};
use sluice::github::app::Rs256Signer;
use sluice::github::GitHub;
use sluice::journal::{Entry, InstanceRecord};
use sluice::net::{HttpRequest, HttpResponse, Transport};
use sluice::runs::command::CommandResult;
use sluice::runs::environment::Environments;
use sluice::runs::inputs::{CheckInput, DeployInput, PullNumber};
use sluice::runs::sweep::{Finalizer, Instances, Sweep, SweepReport};
use sluice::runs::{
    NotifyTarget, Registry, RunEnv, SecretSource, Spawner, Termination, Terminator, Waker,
};
use sluice::sandbox::{
    Checkout, ProcessSpec, ProcessState, ProcessStatus, Sandbox, SandboxError, WorkspaceState,
};
use sluice::secret::Secret;
use sluice::store::executions::{self, ExecutionRow};
use sluice::store::journal::JournalStore;
use sluice::store::Database;
use sluice::store::Stmt;

use super::fake_deployments::Deployment;
use super::fake_releases::ReleaseState;
use super::{block_on, CountingDb, ManualClock, MemoryBlobs, World, T0};

pub const REPO: &str = "octo/hello";
/// Where the rig's GitHub serves git (`RunEnv::git_url`).
pub const GIT_URL: &str = "https://github.com";
/// What runs derive from `GIT_URL` and `REPO`.
pub const CLONE_URL: &str = "https://github.com/octo/hello.git";
/// The rig's `ENVIRONMENTS`: `production` for REPO's BRANCH, exporting
/// DEPLOY_TOKEN.
pub const ENVIRONMENTS: &str =
    "[production]\nrepos = [\"octo/hello\"]\nbranches = [\"main\"]\nsecrets = [\"DEPLOY_TOKEN\"]\n";
pub const BRANCH: &str = "main";
pub const GROUP: &str = "deploy:octo/hello:main";
pub const INSTALLATION: u64 = 42;
pub const PR_NUMBER: u64 = 7;
pub const APP_ID: &str = "1234";
/// Signs the rig's log links.
pub const LOG_LINK_SECRET: &str = "rig-log-link-secret";
pub const PUBLIC_URL: &str = "https://sluice.example.test";
pub const NOTIFY_URL: &str = "https://hooks.example.test/sluice";
pub const NOTIFY_SECRET: &str = "notify-signing-secret";
pub const MINUTE_MS: i64 = 60_000;

pub const CHECK_TOML: &str = "[check]\ncommand = \"cargo test\"\n";
pub const DEPLOY_TOML: &str = "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\n";

/// A full commit id made of one hex digit, so tests name commits `a`, `b`...
pub fn sha(digit: char) -> String {
    assert!(digit.is_ascii_hexdigit());
    digit.to_string().repeat(40)
}

pub fn is_sha(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

// ---------------------------------------------------------------------------
// FakeGitHub: the REST calls `GitHub` makes, and the notification endpoint.
// ---------------------------------------------------------------------------

/// One request the fake answered.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub route: &'static str,
    pub path: String,
    pub status: u16,
    pub body: Option<String>,
}

/// A check run as GitHub keeps it, with every status it was given.
#[derive(Debug, Clone)]
pub struct CheckRun {
    pub id: u64,
    pub repo: String,
    pub name: String,
    pub head_sha: String,
    pub external_id: Option<String>,
    pub details_url: Option<String>,
    pub statuses: Vec<String>,
    pub conclusion: Option<String>,
    pub title: Option<String>,
    pub summary: Option<String>,
    /// The App that created it (APP_ID for Sluice's own).
    pub app_id: u64,
    /// Its buttons' identifiers, as last set.
    pub actions: Vec<String>,
}

impl CheckRun {
    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "head_sha": self.head_sha,
            "external_id": self.external_id,
            "details_url": self.details_url,
            "status": self.statuses.last(),
            "conclusion": self.conclusion,
            "html_url": format!("https://github.com/{}/runs/{}", self.repo, self.id),
            "app": { "id": self.app_id },
        })
    }

    pub fn summary(&self) -> &str {
        self.summary.as_deref().unwrap_or("")
    }
}

#[derive(Debug, Clone)]
pub struct Notification {
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Notification {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).expect("notification body is JSON")
    }

    /// The signature, recomputed here independently of `webhook::sign`.
    pub fn signature_is_valid(&self) -> bool {
        use hmac::{Hmac, Mac};
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(NOTIFY_SECRET.as_bytes()).unwrap();
        mac.update(self.body.as_bytes());
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        self.header("X-Sluice-Signature-256") == Some(expected.as_str())
    }
}

/// The next `remaining` calls to `route` answer `status`; `after_applying`
/// means GitHub did the work and the answer was lost on the way back.
pub struct Fault {
    pub route: &'static str,
    pub remaining: u32,
    pub status: u16,
    pub after_applying: bool,
}

/// What one installation token was issued for.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub expires_ms: i64,
    /// Repository names the token is limited to.
    pub repositories: Vec<String>,
    pub permissions: BTreeMap<String, String>,
    pub revoked: bool,
}

impl Grant {
    fn allows(&self, permission: &str, level: &str) -> bool {
        let rank = |l: &str| match l {
            "read" => 1,
            "write" => 2,
            _ => 0,
        };
        self.permissions
            .get(permission)
            .is_some_and(|have| rank(have) >= rank(level))
    }
}

#[derive(Default)]
pub struct GitHubState {
    /// Files per (repo, commit).
    pub commits: HashMap<(String, String), HashMap<String, String>>,
    pub heads: HashMap<(String, String), String>,
    /// Commits that are ancestors of a branch's head, by (repo, branch).
    pub ancestors: HashSet<(String, String, String)>,
    /// Pull request heads by (repo, number).
    pub pulls: HashMap<(String, u64), String>,
    /// Pull requests closed now (the others are open).
    pub closed_pulls: HashSet<(String, u64)>,
    /// The files a comparison lists, by (repo, base, head).
    pub changes: HashMap<(String, String, String), Vec<String>>,
    /// Repository permissions by (repo, login).
    pub permissions: HashMap<(String, String), String>,
    /// Issued installation tokens and what each may do.
    pub tokens: HashMap<String, Grant>,
    pub check_runs: Vec<CheckRun>,
    /// Completed check runs whose status or conclusion was changed again
    /// (GitHub does not allow it).
    pub reopened_check_runs: Vec<u64>,
    /// Deployments with their statuses (`fake_deployments`).
    pub deployments: Vec<Deployment>,
    /// Permissions the installation has not granted: a token asking for
    /// one is refused.
    pub withheld: HashSet<String>,
    pub calls: Vec<Call>,
    pub faults: Vec<Fault>,
    /// Routes whose next call is applied and answered, then never returns
    /// to the caller: the executor dies while the call is in flight.
    pub hang_after: Vec<&'static str>,
    /// Routes whose next call is answered as GitHub is now, and the answer
    /// reaches the caller this much later (virtual ms): a read that is old
    /// by the time it is used.
    pub delay_after: Vec<(&'static str, i64)>,
    pub notifications: Vec<Notification>,
    pub unexpected: Vec<String>,
}

pub struct FakeGitHub {
    pub api_url: String,
    pub clock: ManualClock,
    pub st: RefCell<GitHubState>,
    /// Tags, comparisons, full pull requests, releases (`fake_releases`).
    pub rel: RefCell<ReleaseState>,
}

pub fn reply(status: u16, body: Value) -> HttpResponse {
    HttpResponse {
        status,
        body: body.to_string(),
    }
}

pub fn not_found() -> HttpResponse {
    reply(
        404,
        json!({ "message": "Not Found", "documentation_url": "https://docs.github.com/rest" }),
    )
}

/// A request that does not match a route, with the route name as context.
pub type Routed = Result<(&'static str, Vec<String>, HashMap<String, String>), String>;

impl FakeGitHub {
    pub fn new(clock: ManualClock) -> FakeGitHub {
        // The client caches installation tokens per (API URL, installation)
        // in a thread local: a fresh URL per rig keeps tests independent
        // however the harness schedules them on threads.
        pub static RIGS: AtomicU32 = AtomicU32::new(0);
        let n = RIGS.fetch_add(1, Ordering::Relaxed);
        FakeGitHub {
            api_url: format!("https://api.github.test/rig{n}"),
            clock,
            st: RefCell::default(),
            rel: RefCell::default(),
        }
    }

    // --- what the test sets up ---

    pub fn commit(&self, repo: &str, sha: &str, files: &[(&str, &str)]) {
        let files = files
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        self.st
            .borrow_mut()
            .commits
            .insert((repo.into(), sha.into()), files);
    }

    pub fn set_pull_head(&self, repo: &str, number: u64, sha: &str) {
        self.st
            .borrow_mut()
            .pulls
            .insert((repo.into(), number), sha.into());
    }

    /// Whether the pull request is closed now (`state` in its GET).
    pub fn set_pull_closed(&self, repo: &str, number: u64, closed: bool) {
        let mut st = self.st.borrow_mut();
        match closed {
            true => st.closed_pulls.insert((repo.into(), number)),
            false => st.closed_pulls.remove(&(repo.into(), number)),
        };
    }

    pub fn set_permission(&self, repo: &str, login: &str, permission: &str) {
        self.st
            .borrow_mut()
            .permissions
            .insert((repo.into(), login.into()), permission.into());
    }

    /// `sha` is an ancestor of `branch`'s head (compare answers `behind`).
    pub fn set_on_branch(&self, repo: &str, branch: &str, sha: &str) {
        self.st
            .borrow_mut()
            .ancestors
            .insert((repo.into(), branch.into(), sha.into()));
    }

    /// What `compare/{base}...{head}` lists as changed (its `files`).
    pub fn set_changed_files(&self, repo: &str, base: &str, head: &str, files: &[&str]) {
        self.st.borrow_mut().changes.insert(
            (repo.into(), base.into(), head.into()),
            files.iter().map(|f| f.to_string()).collect(),
        );
    }

    pub fn set_head(&self, repo: &str, branch: &str, sha: &str) {
        self.st
            .borrow_mut()
            .heads
            .insert((repo.into(), branch.into()), sha.into());
    }

    pub fn fail_next(&self, route: &'static str, n: u32, status: u16) {
        self.st.borrow_mut().faults.push(Fault {
            route,
            remaining: n,
            status,
            after_applying: false,
        });
    }

    /// The next call to `route` is applied, then the caller never sees the
    /// answer (its pass is pending for ever: drop it to crash the pass).
    pub fn hang_after_applying_next(&self, route: &'static str) {
        self.st.borrow_mut().hang_after.push(route);
    }

    /// The next call to `route` is answered as GitHub is now, and the
    /// answer arrives `ms` of virtual time later.
    pub fn delay_answer_next(&self, route: &'static str, ms: i64) {
        self.st.borrow_mut().delay_after.push((route, ms));
    }

    /// The next call to `route` is applied, but its answer is a 502.
    pub fn lose_answer_next(&self, route: &'static str) {
        self.st.borrow_mut().faults.push(Fault {
            route,
            remaining: 1,
            status: 502,
            after_applying: true,
        });
    }

    // --- what the test reads back ---

    pub fn check_runs_on(&self, sha: &str) -> Vec<CheckRun> {
        self.st
            .borrow()
            .check_runs
            .iter()
            .filter(|c| c.head_sha == sha)
            .cloned()
            .collect()
    }

    pub fn only_check_run(&self, sha: &str, name: &str) -> CheckRun {
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

    pub fn calls_to(&self, route: &str) -> Vec<Call> {
        self.st
            .borrow()
            .calls
            .iter()
            .filter(|c| c.route == route)
            .cloned()
            .collect()
    }

    pub fn all_calls(&self) -> Vec<Call> {
        self.st.borrow().calls.clone()
    }

    pub fn notifications(&self) -> Vec<Notification> {
        self.st.borrow().notifications.clone()
    }

    pub fn issued_tokens(&self) -> Vec<String> {
        self.st.borrow().tokens.keys().cloned().collect()
    }

    pub fn grant_of(&self, token: &str) -> Option<Grant> {
        self.st.borrow().tokens.get(token).cloned()
    }

    /// A check run another App made on `sha`, with Sluice's name and
    /// `external_id`: Sluice must neither find nor update it.
    pub fn foreign_check_run(&self, repo: &str, sha: &str, name: &str, external_id: &str) -> u64 {
        let mut st = self.st.borrow_mut();
        let id = 9000 + st.check_runs.len() as u64 + 1;
        st.check_runs.push(CheckRun {
            id,
            repo: repo.into(),
            name: name.into(),
            head_sha: sha.into(),
            external_id: Some(external_id.into()),
            details_url: None,
            statuses: vec!["queued".into()],
            conclusion: None,
            title: None,
            summary: None,
            app_id: 999,
            actions: Vec::new(),
        });
        id
    }

    // --- serving ---

    pub fn route(&self, req: &HttpRequest) -> Routed {
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
                let decode = |x: &str| percent_decode_str(x).decode_utf8_lossy().into_owned();
                (decode(k), decode(v))
            })
            .collect();
        let segs: Vec<String> = path
            .trim_start_matches('/')
            .split('/')
            .map(|seg| percent_decode_str(seg).decode_utf8_lossy().into_owned())
            .collect();
        let s: Vec<&str> = segs.iter().map(String::as_str).collect();
        let route = match (req.method, s.as_slice()) {
            ("POST", ["app", "installations", _, "access_tokens"]) => "token",
            ("GET", ["repos", _, _, "installation"]) => "repo-installation",
            ("GET", ["repos", _, _]) => "repo",
            ("DELETE", ["installation", "token"]) => "revoke-token",
            ("GET", ["repos", _, _, "contents", rest @ ..]) if !rest.is_empty() => "contents",
            ("GET", ["repos", _, _, "git", "ref", "heads", rest @ ..]) if !rest.is_empty() => "ref",
            ("GET", ["repos", _, _, "commits", _, "check-runs"]) => "list-check-runs",
            ("GET", ["repos", _, _, "pulls", _]) => "pull",
            ("GET", ["repos", _, _, "compare", _]) => "compare",
            ("GET", ["repos", _, _, "collaborators", _, "permission"]) => "permission",
            ("POST", ["repos", _, _, "check-runs"]) => "create-check-run",
            ("PATCH", ["repos", _, _, "check-runs", _]) => "update-check-run",
            ("GET", ["repos", _, _, "deployments"]) => "list-deployments",
            ("POST", ["repos", _, _, "deployments"]) => "create-deployment",
            ("GET", ["repos", _, _, "deployments", _, "statuses"]) => "list-deployment-statuses",
            ("POST", ["repos", _, _, "deployments", _, "statuses"]) => "create-deployment-status",
            (m, path) => match Self::release_route(m, path) {
                Some(r) => r,
                None => return Err("no such endpoint".into()),
            },
        };
        Ok((route, segs, query))
    }

    pub fn handle(&self, req: HttpRequest) -> HttpResponse {
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

    pub fn header<'r>(req: &'r HttpRequest, name: &str) -> Option<&'r str> {
        req.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// A request production code should never send: recorded, refused.
    pub fn refuse(&self, req: &HttpRequest, status: u16, message: &str) -> HttpResponse {
        self.st
            .borrow_mut()
            .unexpected
            .push(format!("{} {}: {message}", req.method, req.url));
        reply(status, json!({ "message": message }))
    }

    pub fn serve(
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
        if route == "repo-installation" {
            return self.repo_installation(req, auth, &format!("{}/{}", segs[1], segs[2]));
        }
        let now = self.clock.now_ms();
        let token = auth.strip_prefix("token ").unwrap_or_default();
        let grant = self
            .grant_of(token)
            .filter(|g| g.expires_ms > now && !g.revoked);
        let Some(grant) = grant else {
            return reply(401, json!({ "message": "Bad credentials" }));
        };
        if route == "revoke-token" {
            if let Some(g) = self.st.borrow_mut().tokens.get_mut(token) {
                g.revoked = true;
            }
            return reply(204, Value::Null);
        }
        let repo = format!("{}/{}", segs[1], segs[2]);
        if !grant.repositories.iter().any(|r| *r == segs[2]) {
            return not_found();
        }
        let (permission, level) = match route {
            r if Self::release_permission(r).is_some() => {
                Self::release_permission(r).unwrap_or(("contents", "write"))
            }
            "contents" | "ref" | "compare" => ("contents", "read"),
            "repo" => ("metadata", "read"),
            "pull" => ("pull_requests", "read"),
            "permission" => ("metadata", "read"),
            "list-check-runs" => ("checks", "read"),
            "list-deployments" | "list-deployment-statuses" => ("deployments", "read"),
            "create-deployment" | "create-deployment-status" => ("deployments", "write"),
            _ => ("checks", "write"),
        };
        if !grant.allows(permission, level) {
            return reply(
                403,
                json!({ "message": "Resource not accessible by integration" }),
            );
        }
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
            "compare" => self.compare(&repo, &segs[4]),
            "pull" => {
                let number = segs[4].parse::<u64>().unwrap_or(0);
                if let Some(full) = self.full_pull(&repo, number) {
                    return full;
                }
                let st = self.st.borrow();
                let state = match st.closed_pulls.contains(&(repo.clone(), number)) {
                    true => "closed",
                    false => "open",
                };
                // GitHub dates a close; the fake's closes all happened at one
                // fixed moment.
                let closed_at = (state == "closed").then_some("2026-12-05T00:00:00Z");
                match st.pulls.get(&(repo, number)) {
                    Some(sha) => reply(
                        200,
                        json!({ "number": number, "state": state, "head": { "sha": sha },
                                "closed_at": closed_at }),
                    ),
                    None => not_found(),
                }
            }
            "permission" => {
                let login = segs[4].clone();
                let permission = self
                    .st
                    .borrow()
                    .permissions
                    .get(&(repo, login.clone()))
                    .cloned();
                reply(
                    200,
                    json!({ "permission": permission.unwrap_or_else(|| "none".into()), "user": { "login": login } }),
                )
            }
            "repo" => {
                // GitHub answers in the repository's own letter case.
                let st = self.st.borrow();
                let known = st
                    .commits
                    .keys()
                    .map(|(r, _)| r)
                    .chain(st.heads.keys().map(|(r, _)| r));
                let full_name = known
                    .into_iter()
                    .find(|r| r.eq_ignore_ascii_case(&repo))
                    .cloned()
                    .unwrap_or(repo);
                reply(
                    200,
                    json!({ "full_name": full_name, "default_branch": BRANCH, "private": false }),
                )
            }
            "create-check-run" => self.create_check_run(req, &repo),
            "update-check-run" => self.update_check_run(req, &repo, &segs[4]),
            "list-deployments" => self.list_deployments(&repo, query),
            "create-deployment" => self.create_deployment(req, &repo),
            "list-deployment-statuses" => self.list_deployment_statuses(&repo, &segs[4], query),
            "create-deployment-status" => self.create_deployment_status(req, &repo, &segs[4]),
            other => match self.serve_release(other, req, &repo, segs, query) {
                Some(resp) => resp,
                None => self.refuse(req, 599, &format!("route {other} has no handler")),
            },
        }
    }

    /// `GET /repos/{o}/{r}/compare/{branch}...{sha}`, as far as the rig
    /// knows ancestry (`set_on_branch`).
    fn compare(&self, repo: &str, basehead: &str) -> HttpResponse {
        // A comparison the test set up for release notes (`set_compare`).
        if let Some(resp) = self.release_compare(repo, basehead) {
            return resp;
        }
        let Some((branch, sha)) = basehead.split_once("...") else {
            return not_found();
        };
        let st = self.st.borrow();
        let range = (repo.to_owned(), branch.to_owned(), sha.to_owned());
        if let Some(files) = st.changes.get(&range) {
            let files: Vec<Value> = files.iter().map(|f| json!({ "filename": f })).collect();
            return reply(200, json!({ "status": "ahead", "files": files }));
        }
        let Some(head) = st.heads.get(&(repo.to_owned(), branch.to_owned())) else {
            return not_found();
        };
        if !st.commits.contains_key(&(repo.to_owned(), sha.to_owned())) && head != sha {
            return not_found();
        }
        let status = if head == sha {
            "identical"
        } else if st
            .ancestors
            .contains(&(repo.to_owned(), branch.to_owned(), sha.to_owned()))
        {
            "behind"
        } else {
            "diverged"
        };
        reply(
            200,
            json!({ "status": status, "base_commit": { "sha": head } }),
        )
    }

    /// `GET /repos/{o}/{r}/installation` (App JWT): the installation, for a
    /// repository the rig knows (a commit or a branch head of it).
    pub fn repo_installation(&self, req: &HttpRequest, auth: &str, repo: &str) -> HttpResponse {
        if let Some(refused) = self.refuse_jwt(req, auth) {
            return refused;
        }
        let st = self.st.borrow();
        // GitHub finds a repository whatever the letter case of its name.
        let known = st.commits.keys().any(|(r, _)| r.eq_ignore_ascii_case(repo))
            || st.heads.keys().any(|(r, _)| r.eq_ignore_ascii_case(repo));
        if !known {
            return not_found();
        }
        reply(
            200,
            json!({ "id": INSTALLATION, "app_id": APP_ID.parse::<u64>().unwrap_or(0) }),
        )
    }

    /// The refusal of a request whose App JWT is malformed or whose claims
    /// GitHub would refuse; None for a good one.
    fn refuse_jwt(&self, req: &HttpRequest, auth: &str) -> Option<HttpResponse> {
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
            return Some(self.refuse(req, 401, "A JSON web token could not be decoded"));
        };
        let now_s = self.clock.now_ms() / 1000;
        let (iat, exp) = (
            claims["iat"].as_i64().unwrap_or(i64::MAX),
            claims["exp"].as_i64().unwrap_or(0),
        );
        if claims["iss"] != APP_ID || iat > now_s || exp <= now_s || exp - iat > 600 {
            return Some(self.refuse(req, 401, &format!("JWT claims refused: {claims}")));
        }
        None
    }

    pub fn issue_token(&self, req: &HttpRequest, auth: &str, installation: &str) -> HttpResponse {
        if let Some(refused) = self.refuse_jwt(req, auth) {
            return refused;
        }
        if installation != INSTALLATION.to_string() {
            return not_found();
        }
        let body: Value = req
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str(b).ok())
            .unwrap_or(Value::Null);
        let strings = |v: &Value| -> Option<Vec<String>> {
            v.as_array()?
                .iter()
                .map(|r| r.as_str().map(str::to_owned))
                .collect()
        };
        // Strict: Sluice scopes every token to one repository and names the
        // permissions it needs (the issue's "tokens scoped").
        let (Some(repositories), Some(permissions)) = (
            strings(&body["repositories"]),
            body["permissions"].as_object(),
        ) else {
            return self.refuse(
                req,
                422,
                "Sluice must scope every token: repositories and permissions",
            );
        };
        if repositories.len() != 1 || repositories[0].contains('/') {
            return self.refuse(req, 422, "one repository, by name");
        }
        if permissions
            .keys()
            .any(|p| self.st.borrow().withheld.contains(p))
        {
            return reply(
                422,
                json!({ "message": "The permissions requested are not granted to this installation." }),
            );
        }
        let mut granted: BTreeMap<String, String> = permissions
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
        granted.insert("metadata".into(), "read".into());
        let expires_ms = self.clock.now_ms() + 3600 * 1000;
        let mut st = self.st.borrow_mut();
        let token = format!("ghs_{:036}", st.tokens.len() + 1);
        let grant = Grant {
            expires_ms,
            repositories: repositories.clone(),
            permissions: granted.clone(),
            revoked: false,
        };
        st.tokens.insert(token.clone(), grant);
        reply(
            201,
            json!({
                "token": token,
                "expires_at": rfc3339(expires_ms),
                "permissions": granted,
                "repository_selection": "selected",
                "repositories": repositories.iter().map(|r| json!({ "name": r })).collect::<Vec<_>>(),
            }),
        )
    }

    pub fn contents(
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
        // A branch name reads at that branch's head, as GitHub does.
        let sha = st
            .heads
            .get(&(repo.to_owned(), git_ref.clone()))
            .unwrap_or(git_ref);
        let Some(files) = st.commits.get(&(repo.to_owned(), sha.clone())) else {
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
            json!({ "type": "file", "encoding": "base64", "name": path, "path": path, "size": text.len(),
                    "sha": super::fake_releases::blob_sha(text), "content": wrapped }),
        )
    }

    pub fn list_check_runs(
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
            .filter(|c| {
                query
                    .get("app_id")
                    .is_none_or(|a| *a == c.app_id.to_string())
            })
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

    pub fn create_check_run(&self, req: &HttpRequest, repo: &str) -> HttpResponse {
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
            app_id: APP_ID.parse().expect("APP_ID is a number"),
            actions: Vec::new(),
        };
        let answer = run.to_json();
        st.check_runs.push(run);
        reply(201, answer)
    }

    pub fn update_check_run(&self, req: &HttpRequest, repo: &str, id: &str) -> HttpResponse {
        pub const CONCLUSIONS: [&str; 8] = [
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
        // GitHub: once a check run completed, its status and conclusion
        // do not change again (a re-run is a new check run). Recorded, not
        // refused: an operator's restart of a finished check or deploy
        // reopens its check run today.
        let completed = run.statuses.last().map(String::as_str) == Some("completed");
        let reopened = completed && (status.is_some() || conclusion.is_some());
        let run_id = run.id;
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

        if let Some(actions) = body["actions"].as_array() {
            // GitHub's limits: 3 buttons, 20-character labels and ids.
            let fits = |a: &Value, k: &str, max: usize| {
                a[k].as_str()
                    .is_some_and(|v| !v.is_empty() && v.chars().count() <= max)
            };
            let ok = actions.len() <= 3
                && actions.iter().all(|a| {
                    fits(a, "label", 20) && fits(a, "identifier", 20) && fits(a, "description", 40)
                });
            if !ok {
                return reply(422, json!({ "message": "Invalid actions" }));
            }
            run.actions = actions
                .iter()
                .filter_map(|a| a["identifier"].as_str().map(str::to_owned))
                .collect();
        }
        let answer = run.to_json();
        if reopened {
            st.reopened_check_runs.push(run_id);
        }
        reply(200, answer)
    }
}

#[async_trait(?Send)]
impl Transport for FakeGitHub {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, String> {
        let route = self.route(&req).ok().map(|r| r.0);
        let hang = {
            let mut st = self.st.borrow_mut();
            let at = st.hang_after.iter().position(|h| Some(*h) == route);
            at.map(|i| st.hang_after.remove(i)).is_some()
        };
        let delay_ms = {
            let mut st = self.st.borrow_mut();
            let at = st.delay_after.iter().position(|(r, _)| Some(*r) == route);
            at.map(|i| st.delay_after.remove(i).1)
        };
        let resp = self.handle(req);
        if hang {
            futures::future::pending::<()>().await;
        }
        if let Some(ms) = delay_ms {
            self.clock.sleep(ms).await;
        }
        Ok(resp)
    }
}

/// GitHub's `YYYY-MM-DDTHH:MM:SSZ` for a time in ms (civil from days,
/// H. Hinnant's algorithm).
pub fn rfc3339(ms: i64) -> String {
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
pub struct FixedSigner;

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
pub struct Script {
    /// When set, the process runs this long in virtual time whoever polls
    /// it (a real process); otherwise polls decide (`running_polls`).
    pub duration_ms: Option<i64>,
    pub exit_code: i32,
    /// Printed output; `$NAME` / `${NAME}` expand from the process env.
    pub output: String,
    /// Long-polls answered "still running" before the one that ends it.
    pub running_polls: u32,
    /// What the process has printed while it still runs (a prefix of
    /// `output`, which it prints in all).
    pub printed_while_running: String,
}

#[derive(Debug, Clone)]
pub struct CheckoutRecord {
    pub sandbox: String,
    pub workspace: String,
    pub repo_url: String,
    pub sha: String,
    pub token: Option<String>,
}

#[derive(Debug, Clone)]
pub struct StartRecord {
    pub sandbox: String,
    pub id: String,
    pub workspace: String,
    pub env: BTreeMap<String, String>,
    /// The values the agent was asked to scrub from the output.
    pub redact: Vec<String>,
    /// False when the id was known and the agent answered the existing one.
    pub spawned: bool,
    /// The archive keys unpacked into the workspace when it started.
    pub unpacked: Vec<String>,
    pub command: String,
    /// What the workspace held when it started: the commands that ran in
    /// it since its checkout, in order (`SandboxState::trees`).
    pub tree: Vec<String>,
}

/// One spawned process, in virtual time.
#[derive(Debug, Clone)]
pub struct ProcessRun {
    /// The process id it was started under.
    pub id: String,
    pub workspace: String,
    pub sha: String,
    pub started_ms: i64,
    /// When it was seen to end or was killed.
    pub ended_ms: Option<i64>,
    /// When a timed script ends by itself, observed or not.
    pub natural_end_ms: Option<i64>,
    pub killed: bool,
}

impl ProcessRun {
    /// When it stops running: killed or seen ended, else its natural end;
    /// None while it runs on.
    pub fn end_ms(&self) -> Option<i64> {
        match (self.ended_ms, self.natural_end_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

pub struct Process {
    pub sha: String,
    pub command: String,
    pub env: BTreeMap<String, String>,
    /// Scrubbed from the output as the agent does (sluice-redact).
    pub redact: Vec<String>,
    pub script: Script,
    pub polls_left: u32,
    pub started_ms: i64,
    pub run: usize,
    pub finished: Option<ProcessState>,
}

#[derive(Default)]
pub struct SandboxState {
    pub scripts: Vec<(String, Script)>,
    /// Scripts that answer only when the process's env has `(name, value)`
    /// (a matrix cell, a shard): looked up before `scripts`.
    pub env_scripts: Vec<(String, (String, String), Script)>,
    pub workspaces: HashMap<String, String>,
    pub processes: HashMap<String, Process>,
    pub checkouts: Vec<CheckoutRecord>,
    pub starts: Vec<StartRecord>,
    pub runs: Vec<ProcessRun>,
    /// Commits whose processes run until the test releases them.
    pub held: HashSet<String>,
    /// Long-polls a held process may answer "still running" (so its holder
    /// heartbeats between them).
    pub grants: HashMap<String, u32>,
    pub replace_container_at_poll: Option<u32>,
    pub containers_replaced: u32,
    pub hold_spins: u32,
    pub unexpected: Vec<String>,
    /// Process ids killed, in order.
    pub kills: Vec<String>,
    /// Kills answer "unreachable" (a sandbox that cannot confirm a death).
    pub kill_fails: bool,
    /// How long a checkout takes, in virtual time (a big clone).
    pub checkout_ms: i64,
    /// Checkouts never finish (a wedged git), until this is cleared.
    pub checkout_hangs: bool,
    /// Checkouts fail as an unreachable sandbox would (503), until cleared.
    pub checkout_fails: bool,
    pub discarded: Vec<String>,
    /// New starts refused because they came past their fence's window.
    pub late_starts_refused: u32,
    /// An agent from before start windows: a start naming `start_by_ms` is
    /// refused as an unknown field (its `deny_unknown_fields`).
    pub predates_start_windows: bool,
    /// Start requests for this sandbox are held on their way until
    /// `release_starts` (a stalled caller, a slow network).
    pub starts_held: Option<String>,
    pub held_starts: Vec<std::task::Waker>,
    /// Archives stored (`Archives::save`): key to the workspace and globs
    /// it was packed from.
    pub archives: HashMap<String, (String, Vec<String>)>,
    /// Per workspace, the archive keys unpacked into it, in order.
    pub unpacked: HashMap<String, Vec<String>>,
    /// Saves fail as an unreachable sandbox would (503), until cleared.
    pub archive_fails: bool,
    /// A key file's content as a digest reads it (absent: "v1").
    pub key_files: HashMap<String, String>,
    /// Per workspace, its tree as the model sees it: the command of every
    /// process started in it since its checkout, in order (what each step
    /// changed), and what a snapshot restored.
    pub trees: HashMap<String, Vec<String>>,
    /// Per workspace, the last process started in it since its checkout
    /// (or the one a restore named), as the agent records it.
    pub last_process: HashMap<String, String>,
    /// Workspaces this agent checked out (forgotten when it restarts).
    pub checked_out: HashSet<String>,
    /// Snapshots stored (`Archives::snapshot`): key to the tree it holds.
    pub snapshots: HashMap<String, Vec<String>>,
    /// Snapshots fail as an unreachable sandbox would (503), until cleared.
    pub snapshot_fails: bool,
    /// The container is replaced (every workspace and process gone) at
    /// this moment, once.
    pub replace_container_when: Option<ReplaceWhen>,
}

/// When `SandboxState::replace_container_when` replaces the container.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplaceWhen {
    /// Right after the next snapshot is stored: between two steps.
    AfterSnapshot,
    /// When a process whose command contains this is seen to have ended.
    AfterExit(String),
    /// As `AfterExit`, every time.
    AfterEveryExit(String),
    /// At a long-poll of a still running process whose command contains
    /// this: the process and its workspace go mid-run.
    WhileRunning(String),
    /// As `WhileRunning`, but only the agent restarts: its processes die,
    /// the workspaces stay on disk as they were, and what it knew of them
    /// (which checkout is pristine, which process ran last) is gone.
    AgentRestartWhileRunning(String),
}

impl SandboxState {
    /// A new container: every process and workspace is gone.
    pub fn replace_container(&mut self) {
        self.workspaces.clear();
        self.trees.clear();
        self.restart_agent();
    }

    /// A new agent over the same disk: every process gone, and what the
    /// agent knew of the workspaces.
    pub fn restart_agent(&mut self) {
        self.processes.clear();
        self.last_process.clear();
        self.checked_out.clear();
        self.containers_replaced += 1;
    }
}

/// The id the fake's agent takes: one per container.
fn agent_of(containers_replaced: u32) -> String {
    format!("agent-{containers_replaced}")
}

pub struct FakeSandbox {
    pub clock: ManualClock,
    pub st: RefCell<SandboxState>,
}

pub fn sandbox_error(status: u16, code: &str, message: impl Into<String>) -> SandboxError {
    SandboxError {
        code: code.into(),
        message: message.into(),
        status: Some(status),
    }
}

/// A sandbox address as the transports take it: an instance id by the
/// agent's id rule, and an image class the Worker has a binding for
/// (`sandbox::image`).
pub fn check_sandbox(address: &str) -> Result<(), SandboxError> {
    check_id(sluice::sandbox::image::instance_of(address), "sandbox")?;
    sluice::sandbox::image::binding_of(address)
        .map(|_| ())
        .map_err(|m| sandbox_error(400, "invalid_request", m))
}

/// The agent's id rule: 1 to 100 characters of `[A-Za-z0-9_-]`.
pub fn check_id(id: &str, what: &str) -> Result<(), SandboxError> {
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

pub fn running(id: &str) -> ProcessState {
    ProcessState {
        id: id.into(),
        status: ProcessStatus::Running,
        exit_code: None,
        signal: None,
        output: String::new(),
        output_bytes: 0,
        output_truncated: false,
        started_ms: None,
        duration_ms: None,
        output_from: None,
        output_next: None,
        agent: None,
    }
}

/// `$NAME` and `${NAME}` from the env, as `sh` would expand them in `echo`.
pub fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
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

pub enum PollPlan {
    Hold(String),
    Sleep,
    Finish,
}

impl FakeSandbox {
    pub fn new(clock: ManualClock) -> FakeSandbox {
        FakeSandbox {
            clock,
            st: RefCell::default(),
        }
    }

    // --- what the test sets up ---

    pub fn script(&self, command: &str, exit_code: i32, output: &str) {
        self.script_running(command, exit_code, output, 0);
    }

    /// A command that runs `duration_ms` of virtual time, as a real one.
    pub fn script_timed(&self, command: &str, exit_code: i32, output: &str, duration_ms: i64) {
        let s = Script {
            duration_ms: Some(duration_ms),
            exit_code,
            output: output.into(),
            running_polls: 0,
            printed_while_running: String::new(),
        };
        self.st.borrow_mut().scripts.push((command.into(), s));
    }

    /// Processes started and not yet ended at `at_ms` (virtual time).
    pub fn live_runs_at(&self, at_ms: i64) -> Vec<ProcessRun> {
        self.st
            .borrow()
            .runs
            .iter()
            .filter(|r| r.started_ms <= at_ms && r.end_ms().is_none_or(|e| e > at_ms))
            .cloned()
            .collect()
    }

    /// A command that prints `early` at once, then the rest of `output`
    /// after `running_polls` long-polls.
    pub fn script_streaming(&self, command: &str, early: &str, output: &str, running_polls: u32) {
        assert!(output.starts_with(early));
        let s = Script {
            duration_ms: None,
            exit_code: 0,
            output: output.into(),
            running_polls,
            printed_while_running: early.into(),
        };
        self.st.borrow_mut().scripts.push((command.into(), s));
    }

    /// A still-running process's state, with what it printed so far.
    fn running_state(&self, id: &str) -> ProcessState {
        let st = self.st.borrow();
        let mut state = running(id);
        if let Some(p) = st.processes.get(id) {
            let printed = expand(&p.script.printed_while_running, &p.env);
            state.output = sluice_redact::Redactor::new(&p.redact).redact(&printed);
            state.output_bytes = state.output.len() as u64;
        }
        state
    }

    pub fn script_running(&self, command: &str, exit_code: i32, output: &str, running_polls: u32) {
        let s = Script {
            duration_ms: None,
            exit_code,
            output: output.into(),
            running_polls,
            printed_while_running: String::new(),
        };
        self.st.borrow_mut().scripts.push((command.into(), s));
    }

    /// `command` answers this way when its env has `name=value`; other
    /// processes of it as `script` says.
    pub fn script_when(
        &self,
        command: &str,
        (name, value): (&str, &str),
        exit_code: i32,
        output: &str,
    ) {
        let s = Script {
            duration_ms: None,
            exit_code,
            output: output.into(),
            running_polls: 0,
            printed_while_running: String::new(),
        };
        let when = (name.to_owned(), value.to_owned());
        self.st
            .borrow_mut()
            .env_scripts
            .push((command.into(), when, s));
    }

    /// `command` answers this way from now on (its earlier scripts gone).
    pub fn rescript(&self, command: &str, exit_code: i32, output: &str) {
        self.st.borrow_mut().scripts.retain(|(c, _)| c != command);
        self.script(command, exit_code, output);
    }

    /// Processes of this commit keep running until `release`.
    pub fn hold(&self, sha: &str) {
        self.st.borrow_mut().held.insert(sha.into());
    }

    pub fn release(&self, sha: &str) {
        self.st.borrow_mut().held.remove(sha);
    }

    /// Lets a held process answer `n` more long-polls "still running".
    pub fn grant(&self, sha: &str, n: u32) {
        *self.st.borrow_mut().grants.entry(sha.into()).or_insert(0) += n;
    }

    pub fn grants_left(&self, sha: &str) -> u32 {
        self.st.borrow().grants.get(sha).copied().unwrap_or(0)
    }

    /// At the n-th long-poll from now the container is replaced: every
    /// process and workspace is gone.
    pub fn replace_container_at_poll(&self, n: u32) {
        self.st.borrow_mut().replace_container_at_poll = Some(n);
    }

    // --- what the test reads back ---

    pub fn checkouts_in(&self, workspace: &str) -> Vec<CheckoutRecord> {
        self.st
            .borrow()
            .checkouts
            .iter()
            .filter(|c| c.workspace == workspace)
            .cloned()
            .collect()
    }

    pub fn starts_in(&self, workspace: &str) -> Vec<StartRecord> {
        self.st
            .borrow()
            .starts
            .iter()
            .filter(|s| s.workspace == workspace)
            .cloned()
            .collect()
    }

    pub fn runs_in(&self, workspace: &str) -> Vec<ProcessRun> {
        self.st
            .borrow()
            .runs
            .iter()
            .filter(|r| r.workspace == workspace)
            .cloned()
            .collect()
    }

    pub fn only_run_in(&self, workspace: &str) -> ProcessRun {
        let runs = self.runs_in(workspace);
        assert_eq!(runs.len(), 1, "one process in {workspace}: {runs:#?}");
        runs.into_iter().next().unwrap()
    }

    pub fn all_runs(&self) -> Vec<ProcessRun> {
        self.st.borrow().runs.clone()
    }

    // --- long-polls ---

    /// Resolves when the commit is released (false) or a poll is granted
    /// (true). Driven by `poll_once`; a `block_on` on a held process would
    /// spin, so it is stopped with a clear message instead.
    pub async fn held(&self, sha: &str) -> bool {
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

    pub fn finish(&self, id: &str) -> Option<ProcessState> {
        let timed = self
            .st
            .borrow()
            .processes
            .get(id)
            .is_some_and(|p| p.script.duration_ms.is_some());
        if !timed {
            self.clock.advance(1_000);
        }
        let now = self.clock.now_ms();
        let st = &mut *self.st.borrow_mut();
        let agent = agent_of(st.containers_replaced);
        let p = st.processes.get_mut(id)?;
        let now = match p.script.duration_ms {
            Some(d) => (p.started_ms + d).min(now),
            None => now,
        };
        let output =
            sluice_redact::Redactor::new(&p.redact).redact(&expand(&p.script.output, &p.env));
        let state = ProcessState {
            id: id.into(),
            status: ProcessStatus::Exited,
            exit_code: Some(p.script.exit_code),
            signal: None,
            output_bytes: output.len() as u64,
            output,
            output_truncated: false,
            started_ms: Some(p.started_ms as u64),
            duration_ms: Some(now - p.started_ms),
            output_from: None,
            output_next: None,
            agent: Some(agent),
        };
        p.finished = Some(state.clone());
        st.runs[p.run].ended_ms = Some(now);
        let exited = p.command.clone();
        match &st.replace_container_when {
            Some(ReplaceWhen::AfterExit(c)) if exited.contains(c.as_str()) => {
                st.replace_container_when = None;
                st.replace_container();
            }
            Some(ReplaceWhen::AfterEveryExit(c)) if exited.contains(c.as_str()) => {
                st.replace_container();
            }
            _ => {}
        }
        Some(state)
    }
}

#[async_trait(?Send)]
impl Sandbox for FakeSandbox {
    async fn checkout(&self, sandbox: &str, req: &Checkout<'_>) -> Result<(), SandboxError> {
        check_sandbox(sandbox)?;
        check_id(req.workspace, "workspace")?;
        if self.st.borrow().checkout_hangs {
            std::future::pending::<()>().await;
        }
        if self.st.borrow().checkout_fails {
            return Err(sandbox_error(503, "unavailable", "the sandbox is down"));
        }
        let took_ms = self.st.borrow().checkout_ms;
        if took_ms > 0 {
            self.clock.sleep(took_ms).await;
        }
        if !req.repo_url.starts_with("https://") || !is_sha(req.sha) {
            return Err(sandbox_error(
                400,
                "invalid_request",
                format!("bad checkout {} @ {}", req.repo_url, req.sha),
            ));
        }
        let st = &mut *self.st.borrow_mut();
        st.checkouts.push(CheckoutRecord {
            sandbox: sandbox.into(),
            workspace: req.workspace.into(),
            repo_url: req.repo_url.into(),
            sha: req.sha.into(),
            token: req.token.map(|t| t.expose().clone()),
        });
        st.workspaces.insert(req.workspace.into(), req.sha.into());
        st.unpacked.remove(req.workspace);
        st.trees.remove(req.workspace);
        st.last_process.remove(req.workspace);
        st.checked_out.insert(req.workspace.into());
        Ok(())
    }

    async fn workspace(
        &self,
        sandbox: &str,
        workspace: &str,
    ) -> Result<WorkspaceState, SandboxError> {
        check_sandbox(sandbox)?;
        check_id(workspace, "workspace")?;
        let sha = self.st.borrow().workspaces.get(workspace).cloned();
        let last_process = self.st.borrow().last_process.get(workspace).cloned();
        Ok(WorkspaceState {
            workspace: workspace.into(),
            exists: sha.is_some(),
            pristine: Some(
                sha.is_some()
                    && last_process.is_none()
                    && self.st.borrow().checked_out.contains(workspace),
            ),
            sha,
            last_process,
        })
    }

    async fn start(
        &self,
        sandbox: &str,
        spec: &ProcessSpec<'_>,
    ) -> Result<ProcessState, SandboxError> {
        std::future::poll_fn(|cx| {
            let mut st = self.st.borrow_mut();
            if st.starts_held.as_deref() == Some(sandbox) {
                st.held_starts.push(cx.waker().clone());
                return std::task::Poll::Pending;
            }
            std::task::Poll::Ready(())
        })
        .await;
        check_sandbox(sandbox)?;
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
        let st_unpacked = st.unpacked.get(spec.workspace).cloned().unwrap_or_default();
        let st_tree = st.trees.get(spec.workspace).cloned().unwrap_or_default();
        let record = |spawned| StartRecord {
            sandbox: sandbox.into(),
            id: spec.id.into(),
            workspace: spec.workspace.into(),
            env: spec.env.clone(),
            redact: spec.redact.iter().map(|v| (*v).to_owned()).collect(),
            spawned,
            unpacked: st_unpacked.clone(),
            command: spec.command.to_owned(),
            tree: st_tree.clone(),
        };
        if let Some(p) = st.processes.get(spec.id) {
            let state = p.finished.clone().unwrap_or_else(|| running(spec.id));
            st.starts.push(record(false));
            return Ok(state);
        }
        if st.predates_start_windows && spec.start_by_ms.is_some() {
            return Err(sandbox_error(
                400,
                "invalid_request",
                "unknown field `start_by_ms`, expected one of `id`, `workspace`, `command`",
            ));
        }
        if spec.start_by_ms.is_some_and(|by| now > by) {
            // As the agent: a new process past its fence's window is refused.
            st.late_starts_refused += 1;
            return Err(sandbox_error(
                409,
                sluice_sandbox_protocol::START_WINDOW_PASSED,
                "start_by_ms has passed",
            ));
        }
        if !st.workspaces.contains_key(spec.workspace) {
            return Err(sandbox_error(
                404,
                "workspace_not_found",
                format!("workspace {} does not exist", spec.workspace),
            ));
        }
        let by_env = st
            .env_scripts
            .iter()
            .find(|(c, (k, v), _)| spec.command.contains(c.as_str()) && spec.env.get(k) == Some(v))
            .map(|(_, _, s)| s.clone());
        let Some(script) = by_env.or_else(|| {
            st.scripts
                .iter()
                .find(|(c, _)| spec.command.contains(c.as_str()))
                .map(|(_, s)| s.clone())
        }) else {
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
            id: spec.id.into(),
            workspace: spec.workspace.into(),
            sha: sha.clone(),
            started_ms: now,
            ended_ms: None,
            natural_end_ms: script.duration_ms.map(|d| now + d),
            killed: false,
        });
        let run = st.runs.len() - 1;
        let polls_left = script.running_polls;
        st.processes.insert(
            spec.id.into(),
            Process {
                sha,
                command: spec.command.to_owned(),
                env: spec.env.clone(),
                redact: spec.redact.iter().map(|v| (*v).to_owned()).collect(),
                script,
                polls_left,
                started_ms: now,
                run,
                finished: None,
            },
        );
        st.starts.push(record(true));
        st.trees
            .entry(spec.workspace.into())
            .or_default()
            .push(spec.command.into());
        st.last_process
            .insert(spec.workspace.into(), spec.id.into());
        Ok(running(spec.id))
    }

    async fn process(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
        since: Option<u64>,
    ) -> Result<Option<ProcessState>, SandboxError> {
        let state = self.process_whole(sandbox, id, wait_ms).await?;
        Ok(state.map(|s| from_byte(s, since)))
    }

    async fn kill(
        &self,
        sandbox: &str,
        id: &str,
        _wait_ms: i64,
    ) -> Result<Option<ProcessState>, SandboxError> {
        check_sandbox(sandbox)?;
        check_id(id, "process")?;
        if self.st.borrow().kill_fails {
            return Err(SandboxError {
                code: "unreachable".into(),
                message: "the sandbox does not answer".into(),
                status: None,
            });
        }
        let now = self.clock.now_ms();
        let ended_by_itself = {
            let st = &mut *self.st.borrow_mut();
            st.kills.push(id.into());
            let Some(p) = st.processes.get(id) else {
                return Ok(None);
            };
            if let Some(done) = &p.finished {
                return Ok(Some(done.clone()));
            }
            p.script
                .duration_ms
                .is_some_and(|d| p.started_ms + d <= now)
        };
        if ended_by_itself {
            return Ok(self.finish(id));
        }
        let st = &mut *self.st.borrow_mut();
        let agent = agent_of(st.containers_replaced);
        let Some(p) = st.processes.get_mut(id) else {
            return Ok(None);
        };
        let state = ProcessState {
            id: id.into(),
            status: ProcessStatus::Killed,
            exit_code: None,
            signal: Some(9),
            output: String::new(),
            output_bytes: 0,
            output_truncated: false,
            started_ms: Some(p.started_ms as u64),
            duration_ms: Some(now - p.started_ms),
            output_from: None,
            output_next: None,
            agent: Some(agent),
        };
        p.finished = Some(state.clone());
        st.runs[p.run].ended_ms = Some(now);
        st.runs[p.run].killed = true;
        Ok(Some(state))
    }

    async fn digest(
        &self,
        sandbox: &str,
        workspace: &str,
        files: &[String],
    ) -> Result<String, SandboxError> {
        check_sandbox(sandbox)?;
        let st = self.st.borrow();
        if !st.workspaces.contains_key(workspace) {
            return Err(sandbox_error(404, "workspace_not_found", workspace));
        }
        let text: Vec<String> = files
            .iter()
            .map(|f| format!("{f}={}", st.key_files.get(f).map_or("v1", String::as_str)))
            .collect();
        Ok(format!(
            "{:x}",
            <sha2::Sha256 as sha2::Digest>::digest(text.join("\n").as_bytes())
        ))
    }

    async fn discard(&self, sandbox: &str) -> Result<(), SandboxError> {
        check_sandbox(sandbox)?;
        let st = &mut *self.st.borrow_mut();
        st.workspaces.remove(sandbox);
        st.trees.remove(sandbox);
        st.last_process.remove(sandbox);
        st.discarded.push(sandbox.into());
        Ok(())
    }
}

impl FakeSandbox {
    /// Lets held start requests reach the sandbox now.
    pub fn release_starts(&self) {
        let held = {
            let mut st = self.st.borrow_mut();
            st.starts_held = None;
            std::mem::take(&mut st.held_starts)
        };
        for w in held {
            w.wake();
        }
    }

    /// Sandboxes discarded, in order.
    /// The sandbox address of every command started, in order.
    pub fn started_in(&self) -> Vec<String> {
        self.st
            .borrow()
            .starts
            .iter()
            .map(|r| r.sandbox.clone())
            .collect()
    }

    pub fn discarded(&self) -> Vec<String> {
        self.st.borrow().discarded.clone()
    }

    /// For a timed process still running: how long until it ends by itself.
    fn timed_left_ms(&self, id: &str) -> Option<i64> {
        let st = self.st.borrow();
        let p = st.processes.get(id)?;
        if p.finished.is_some() {
            return None;
        }
        let d = p.script.duration_ms?;
        Some((p.started_ms + d - self.clock.now_ms()).max(0))
    }

    /// A long-poll of a timed process: it waits until the process ends or
    /// the wait runs out, in virtual time.
    async fn poll_timed(
        &self,
        id: &str,
        left_ms: i64,
        wait_ms: i64,
    ) -> Result<Option<ProcessState>, SandboxError> {
        if left_ms > 0 && wait_ms > 0 {
            self.clock.sleep(left_ms.min(wait_ms)).await;
        }
        if !self.st.borrow().processes.contains_key(id) {
            return Ok(None);
        }
        match self.timed_left_ms(id) {
            Some(0) => Ok(self.finish(id)),
            Some(_) => Ok(Some(running(id))),
            // Killed or finished meanwhile.
            None => Ok(self
                .st
                .borrow()
                .processes
                .get(id)
                .and_then(|p| p.finished.clone())),
        }
    }
}

// ---------------------------------------------------------------------------
// FakeWaker and FakeSecrets
// ---------------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct Wake {
    pub instance_id: String,
    pub event_type: String,
    pub delivered: bool,
    /// What the event carries (`{}` for a bare wake).
    pub payload: serde_json::Value,
}

/// Terminations runs asked for (a newer pull request head's check):
/// recorded; `Rig::apply_terminations` carries them out as the Worker does.
/// An id whose object was never created (`Rig::create` never made it)
/// answers as the Worker's 404 does: `Termination::NoInstance`.
#[derive(Default)]
pub struct FakeTerminator {
    pub asked: RefCell<Vec<String>>,
    /// Instances whose objects exist (`Rig::create`).
    pub objects: RefCell<std::collections::HashSet<String>>,
}

#[async_trait(?Send)]
impl Terminator for FakeTerminator {
    async fn terminate(&self, instance_id: &str) -> Result<Termination, String> {
        self.asked.borrow_mut().push(instance_id.to_owned());
        Ok(match self.objects.borrow().contains(instance_id) {
            true => Termination::Ended,
            false => Termination::NoInstance,
        })
    }
}

/// Children runs asked to start (`kit::needs`): their index row written at
/// once, as the Worker's create does before it answers, and the request
/// recorded; `Rig::create_spawned` creates their objects.
pub struct FakeSpawner {
    pub spawned: RefCell<Vec<CreateRequest>>,
    index: std::rc::Rc<CountingDb>,
    clock: ManualClock,
}

#[async_trait(?Send)]
impl Spawner for FakeSpawner {
    async fn spawn(&self, create: &CreateRequest) -> Result<(), String> {
        if create.indexed {
            // The caller's batch wrote the row; the object writes none.
            self.spawned.borrow_mut().push(create.clone());
            return Ok(());
        }
        let id = create.id();
        let input = create.input.to_string();
        let row = executions::Requested {
            id: id.as_str(),
            key: &create.key,
            run: &create.run,
            repo: create.repo.as_deref(),
            entity: create.entity.as_deref(),
            sha: create.sha.as_deref(),
            input_json: &input,
        };
        // A single create is answered once its row is in D1 (ADR-0018).
        let stmt = executions::insert_requested_stmt(&row, self.clock.now_ms(), "spawned");
        self.index.run(stmt).await.map_err(|e| e.to_string())?;
        self.spawned.borrow_mut().push(create.clone());
        Ok(())
    }
}

#[derive(Default)]
pub struct FakeWaker {
    pub wakes: RefCell<Vec<Wake>>,
    /// Tasks of `Rig::drive` loops waiting for a wake of their instance.
    listeners: RefCell<HashMap<String, std::task::Waker>>,
    /// The next this many wakes are recorded but never delivered (lost).
    pub lose_next: std::cell::Cell<u32>,
    /// Wakes lost so far.
    pub lost: std::cell::Cell<u32>,
    /// Wake attempts refused with an error (the object unreachable).
    pub fail_next: std::cell::Cell<u32>,
}

impl FakeWaker {
    pub fn recorded(&self) -> Vec<(String, String)> {
        self.wakes
            .borrow()
            .iter()
            .map(|w| (w.instance_id.clone(), w.event_type.clone()))
            .collect()
    }

    /// Resolves once a wake for `instance_id` waits to be delivered.
    pub async fn woken(&self, instance_id: &str) {
        std::future::poll_fn(|cx| {
            let pending = self
                .wakes
                .borrow()
                .iter()
                .any(|w| w.instance_id == instance_id && !w.delivered);
            if pending {
                return Poll::Ready(());
            }
            self.listeners
                .borrow_mut()
                .insert(instance_id.to_owned(), cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

#[async_trait(?Send)]
impl Waker for FakeWaker {
    async fn wake(&self, instance_id: &str, event_type: &str) -> Result<(), String> {
        self.send(instance_id, event_type, &json!({})).await
    }

    async fn send(
        &self,
        instance_id: &str,
        event_type: &str,
        payload: &serde_json::Value,
    ) -> Result<(), String> {
        // As the Worker's waker: an id that names no object is refused.
        InstanceId::parse(instance_id).map_err(|e| e.to_string())?;
        if self.fail_next.get() > 0 {
            self.fail_next.set(self.fail_next.get() - 1);
            return Err(format!("wake {instance_id}: the object did not answer"));
        }
        // A lost wake is recorded as delivered: nobody will see it.
        let lost = self.lose_next.get() > 0;
        if lost {
            self.lose_next.set(self.lose_next.get() - 1);
            self.lost.set(self.lost.get() + 1);
        }
        self.wakes.borrow_mut().push(Wake {
            instance_id: instance_id.into(),
            event_type: event_type.into(),
            delivered: lost,
            payload: payload.clone(),
        });
        if !lost {
            if let Some(w) = self.listeners.borrow_mut().remove(instance_id) {
                w.wake();
            }
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct FakeSecrets(RefCell<HashMap<String, String>>);

impl FakeSecrets {
    pub fn set(&self, name: &str, value: &str) {
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

pub struct Rig {
    /// Instances the sweep poked, by id.
    pub pokes: RecordedPokes,
    pub clock: ManualClock,
    pub index: std::rc::Rc<CountingDb>,
    pub github: FakeGitHub,
    pub sandbox: FakeSandbox,
    pub waker: FakeWaker,
    pub terminator: FakeTerminator,
    pub spawner: FakeSpawner,
    pub secrets: FakeSecrets,
    /// The operator's deploy environments (ENVIRONMENTS by default).
    pub environments: Environments,
    /// The runs' object storage (logs).
    pub blobs: MemoryBlobs,
    pub signer: FixedSigner,
}

/// One instance: its own journal, the rig's index and clock.
pub struct Inst {
    pub world: World,
    pub id: String,
    pub run: String,
    pub input: Value,
}

pub type PendingPass<'r> = Pin<Box<dyn Future<Output = PassResult> + 'r>>;

/// Passes one `Rig::drive` runs: a long deploy is a pass per 10-minute
/// round plus its waits.
const DRIVE_PASSES_MAX: u32 = 500;

impl Rig {
    pub fn new() -> Rig {
        let clock = ManualClock::new(T0);
        let index = std::rc::Rc::new(CountingDb::new());
        Rig {
            pokes: RecordedPokes::default(),
            spawner: FakeSpawner {
                spawned: RefCell::default(),
                index: index.clone(),
                clock: clock.clone(),
            },
            index,
            github: FakeGitHub::new(clock.clone()),
            sandbox: FakeSandbox::new(clock.clone()),
            waker: FakeWaker::default(),
            terminator: FakeTerminator::default(),
            secrets: FakeSecrets::default(),
            environments: Environments::parse(Some(ENVIRONMENTS)),
            blobs: MemoryBlobs::default(),
            signer: FixedSigner,
            clock,
        }
    }

    /// The Worker's registry over the fakes (`RunEnvParts::registry`).
    pub fn registry(&self) -> Registry<'_> {
        self.registry_for(None)
    }

    /// The registry counting one instance's billed calls into its meter,
    /// as its Durable Object's pass does.
    pub fn registry_for<'r>(&'r self, meter: Option<&'r sluice::cost::Meter>) -> Registry<'r> {
        Registry {
            runs: &sluice::runs::registry::RUNS,
            meter,
            env: RunEnv {
                clock: &self.clock,
                http: &self.github,
                github: GitHub {
                    transport: &self.github,
                    signer: &self.signer,
                    clock: &self.clock,
                    api_url: self.github.api_url.clone(),
                    app_id: Some(APP_ID.into()),
                    key_der: Ok(Secret::new(b"fake pkcs8 der".to_vec())),
                },
                sandbox: &self.sandbox,
                archives: &self.sandbox,
                blobs: &self.blobs,
                db: self.index.as_ref(),
                waker: &self.waker,
                terminator: &self.terminator,
                spawner: &self.spawner,
                secrets: &self.secrets,
                environments: &self.environments,
                git_url: GIT_URL.into(),
                notify: Some(NotifyTarget {
                    url: NOTIFY_URL.into(),
                    secret: Some(Secret::new(NOTIFY_SECRET.into())),
                }),
                pool_capacity: 4,
                checks_capacity: 3,
                checks_per_repo: 2,
                public_url: PUBLIC_URL.into(),
                log_link_secret: Some(Secret::new(LOG_LINK_SECRET.into())),
                cache_bytes_per_repo: sluice::limits::CACHE_BYTES_PER_REPO_DEFAULT,
            },
        }
    }

    pub fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    // --- instances ---

    pub fn create(&self, req: CreateRequest) -> Inst {
        let mut world = World::with_index(self.index.clone());
        world.clock = self.clock.clone();
        let c = block_on(world.engine().create(&req)).expect("create");
        assert!(c.created);
        self.terminator.objects.borrow_mut().insert(c.id.clone());
        Inst {
            world,
            id: c.id,
            run: req.run,
            input: req.input,
        }
    }

    pub fn check(&self, sha: &str) -> Inst {
        self.check_in(REPO, sha)
    }

    /// A check of a pull request of `repo`.
    pub fn check_in(&self, repo: &str, sha: &str) -> Inst {
        let input = CheckInput {
            repo: repo.into(),
            sha: sha.into(),
            installation_id: INSTALLATION,
            pr_number: PullNumber::new(PR_NUMBER),
            needs_approval: false,
            sender: "ana".into(),
            inputs: Default::default(),
            merge_group: None,
            base_sha: None,
            wakes: None,
            job: None,
            spec: None,
            rerun: None,
            artifacts_from: Vec::new(),
            cache_scope: None,
        };
        self.create(CreateRequest {
            indexed: false,
            key: format!("check:{repo}:{}", &sha[..12]),
            run: "check".into(),
            input: json!(input),
            repo: Some(repo.into()),
            entity: Some(format!("pr:{PR_NUMBER}")),
            sha: Some(sha.into()),
            max_steps: None,
            max_duration_ms: None,
        })
    }

    pub fn deploy(&self, sha: &str) -> Inst {
        self.deploy_with_ceiling(sha, None)
    }

    /// A deploy with its own run ceiling (`max_duration_ms`).
    pub fn deploy_with_ceiling(&self, sha: &str, max_duration_ms: Option<i64>) -> Inst {
        self.deploy_pushed(REPO, BRANCH, sha, max_duration_ms)
    }

    /// A deploy of a push of `sha` to `repo`'s `branch` (default branch
    /// BRANCH).
    pub fn deploy_pushed(
        &self,
        repo: &str,
        branch: &str,
        sha: &str,
        max_duration_ms: Option<i64>,
    ) -> Inst {
        let input = DeployInput {
            repo: repo.into(),
            branch: branch.into(),
            sha: sha.into(),
            installation_id: INSTALLATION,
            default_branch: BRANCH.into(),
            sender: "ana".into(),
            imperative: false,
            inputs: Default::default(),
            dispatch: None,
            needs_check: None,
        };
        self.create(CreateRequest {
            indexed: false,
            key: format!("deploy:{repo}:{branch}:{}", &sha[..12]),
            run: "deploy".into(),
            input: json!(input),
            repo: Some(repo.into()),
            entity: Some(format!("branch:{branch}")),
            sha: Some(sha.into()),
            max_steps: None,
            max_duration_ms,
        })
    }

    /// A pass as the Worker runs it: the engine's pass, then `finalize`
    /// when the instance ended (`worker_glue::instance::pass_once`).
    pub fn start_pass<'r>(&'r self, i: &'r Inst) -> PendingPass<'r> {
        Box::pin(async move {
            let reg = self.registry_for(Some(&i.world.meter));
            let r = i
                .world
                .engine()
                .pass(&reg, &i.world.interrupt)
                .await
                .expect("pass");
            if r.status.is_terminal() {
                // As the Durable Object: a failure is left to the sweep.
                let _ = reg.finalize(&i.run, &i.id, &i.input, r.status).await;
            }
            r
        })
    }

    pub fn pass(&self, i: &Inst) -> PassResult {
        block_on(self.start_pass(i))
    }

    /// A pass as `start_pass`, where a storage fault is the pass's crash
    /// (the Durable Object's alarm retries it) instead of a test failure.
    pub fn try_pass<'r>(
        &'r self,
        i: &'r Inst,
    ) -> Pin<Box<dyn Future<Output = Option<PassResult>> + 'r>> {
        Box::pin(async move {
            let reg = self.registry_for(Some(&i.world.meter));
            let r = i.world.engine().pass(&reg, &i.world.interrupt).await.ok()?;
            if r.status.is_terminal() {
                let _ = reg.finalize(&i.run, &i.id, &i.input, r.status).await;
            }
            Some(r)
        })
    }

    /// One cron sweep over the rig's index, as `worker_glue::scheduled`
    /// builds it: pokes are recorded (the test runs passes itself), wakes go
    /// to the rig's waker, finalize to the real registry.
    pub fn sweep(&self) -> SweepReport {
        let finalizer = RigFinalizer { rig: self };
        let sweep = Sweep {
            db: self.index.as_ref(),
            instances: &self.pokes,
            waker: &self.waker,
            finalizer: &finalizer,
            blobs: &self.blobs,
            retention_ms: sluice::limits::RETENTION_MS_DEFAULT,
            preview_reconcile_ms: sluice::runs::sweep::PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT,
        };
        block_on(sweep.run(self.now()))
    }

    /// Runs the instance as its Durable Object would, in virtual time: a
    /// pass, then (while it waits) until its alarm, `alarm_late_ms` late, or
    /// a wake-up event, whichever comes first; until it ends or pauses.
    /// Drive several at once with `futures::join!` under `block_on`.
    pub async fn drive(&self, i: &Inst, alarm_late_ms: i64) -> Status {
        for _ in 0..DRIVE_PASSES_MAX {
            self.deliver(i);
            let r = self.start_pass(i).await;
            if r.status.is_terminal() || r.status == Status::Paused {
                return r.status;
            }
            let due = r.wake_at_ms.map_or(self.now(), |w| w + alarm_late_ms);
            let alarm = self.clock.sleep(due - self.now());
            let woken = Box::pin(self.waker.woken(&i.id));
            futures::future::select(alarm, woken).await;
        }
        panic!("{} did not end in {DRIVE_PASSES_MAX} passes", i.id);
    }

    /// Passes until the instance ends, moving the clock to each wake-up.
    pub fn run_to_end(&self, i: &Inst) -> Status {
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
    pub fn command(&self, i: &Inst, cmd: Command) -> Status {
        self.try_command(i, cmd).expect("command")
    }

    /// An operator command as the Durable Object applies it (the run
    /// prepares a restart), without `finalize`.
    pub fn try_command(&self, i: &Inst, cmd: Command) -> Result<Status, CommandError> {
        let reg = self.registry();
        block_on(i.world.engine().command(&reg, &cmd))
    }

    pub fn finalize(&self, i: &Inst) {
        let status = i
            .world
            .engine()
            .record()
            .expect("record")
            .expect("instance")
            .status;
        self.try_finalize_status(i, status)
            .expect("finalize released everything");
    }

    /// `finalize` as the Worker calls it; Err when something stays held.
    pub fn try_finalize(&self, i: &Inst) -> Result<(), String> {
        let status = i
            .world
            .engine()
            .record()
            .expect("record")
            .expect("instance")
            .status;
        self.try_finalize_status(i, status)
    }

    fn try_finalize_status(&self, i: &Inst, status: Status) -> Result<(), String> {
        block_on(self.registry().finalize(&i.run, &i.id, &i.input, status))
    }

    /// Creates what the sweep poked, as a poke reaching an object that
    /// never heard of its instance does (an existing one is returned).
    pub fn create_poked(&self) -> Vec<Inst> {
        let asked: Vec<CreateRequest> = self.pokes.requests.borrow_mut().drain(..).collect();
        asked.into_iter().map(|c| self.create(c)).collect()
    }

    /// Creates the children runs asked to start, as the Worker's spawner
    /// does (an existing key is the instance it names).
    pub fn create_spawned(&self) -> Vec<Inst> {
        let asked: Vec<CreateRequest> = self.spawner.spawned.borrow_mut().drain(..).collect();
        asked.into_iter().map(|c| self.create(c)).collect()
    }

    /// Carries out the terminations recorded for `insts`, as the Worker's
    /// `InstanceWaker` does (terminate, then the object's finalize); how
    /// many.
    pub fn apply_terminations(&self, insts: &[&Inst]) -> usize {
        let asked: Vec<String> = self.terminator.asked.borrow_mut().drain(..).collect();
        let mut applied = 0;
        for i in insts.iter().filter(|i| asked.contains(&i.id)) {
            match i.world.engine().record().expect("record").map(|r| r.status) {
                Some(s) if s.is_terminal() => {}
                _ => {
                    self.command(i, Command::Terminate);
                    self.finalize(i);
                    applied += 1;
                }
            }
        }
        applied
    }

    /// Delivers the wakes recorded for `i` (the object's `event`), as
    /// `InstanceWaker` does; returns how many.
    pub fn deliver(&self, i: &Inst) -> usize {
        let events: Vec<(String, serde_json::Value)> = self
            .waker
            .wakes
            .borrow_mut()
            .iter_mut()
            .filter(|w| w.instance_id == i.id && !w.delivered)
            .map(|w| {
                w.delivered = true;
                (w.event_type.clone(), w.payload.clone())
            })
            .collect();
        for (e, payload) in &events {
            match i.world.engine().send_event(e, payload) {
                Ok(_) | Err(CommandError::Conflict(_)) => {}
                Err(other) => panic!("send_event: {other:?}"),
            }
        }
        events.len()
    }

    // --- reading back ---

    pub fn record(&self, i: &Inst) -> InstanceRecord {
        i.world
            .journal
            .load_instance()
            .unwrap()
            .expect("instance exists")
    }

    pub fn row(&self, i: &Inst) -> ExecutionRow {
        block_on(executions::get(self.index.as_ref(), &i.id))
            .unwrap()
            .expect("row exists")
    }

    pub fn journal(&self, i: &Inst) -> Vec<Entry> {
        i.world.journal.entries().unwrap()
    }

    pub fn step_names(&self, i: &Inst) -> Vec<String> {
        self.journal(i).into_iter().map(|e| e.name).collect()
    }

    pub fn entry(&self, i: &Inst, name: &str) -> Entry {
        self.journal(i)
            .into_iter()
            .find(|e| e.name == name)
            .unwrap_or_else(|| panic!("no step {name:?}"))
    }

    pub fn command_result(&self, i: &Inst, step: &str) -> CommandResult {
        serde_json::from_str(self.entry(i, step).value.as_deref().unwrap()).unwrap()
    }

    pub fn output(&self, i: &Inst) -> Value {
        serde_json::from_str(self.record(i).output.as_deref().expect("output")).unwrap()
    }

    pub fn log(&self, key: &str) -> Option<String> {
        self.blobs.0.borrow().get(key).cloned()
    }

    /// The instance's row in the serial queue: state, reason, superseded_by.
    pub fn queue_row(&self, i: &Inst) -> Value {
        let rows = block_on(self.index.db.all(sluice::stmt!(
            "SELECT state, skipped_reason, superseded_by FROM serial_queue WHERE execution_id = ?1",
            i.id.as_str(),
        )))
        .unwrap();
        assert_eq!(rows.len(), 1, "one serial_queue row for {}", i.id);
        Value::Object(rows[0].clone())
    }

    pub fn queue_state(&self, i: &Inst) -> String {
        self.queue_row(i)["state"].as_str().unwrap().to_owned()
    }

    /// The states of every serial row of the instance, every generation,
    /// oldest first.
    pub fn queue_states(&self, i: &Inst) -> Vec<String> {
        let rows = block_on(self.index.db.all(sluice::stmt!(
            "SELECT state FROM serial_queue WHERE instance_id = ?1 ORDER BY seq",
            i.id.as_str(),
        )))
        .unwrap();
        rows.iter()
            .map(|r| r["state"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Every gate row an instance still holds (serial rows waiting or
    /// holding, pool slots, leases, live processes), as text; empty when it
    /// released everything.
    pub fn held_by(&self, i: &Inst) -> Vec<String> {
        let q = |sql: &'static str| {
            block_on(self.index.db.all(sluice::stmt!(sql, i.id.as_str())))
                .unwrap()
                .into_iter()
                .map(|r| serde_json::to_string(&r).unwrap())
                .collect::<Vec<_>>()
        };
        let mut out = q(
            "SELECT 'serial' AS t, state FROM serial_queue WHERE instance_id = ?1 \
                         AND state IN ('waiting','holding')",
        );
        out.extend(q(
            "SELECT 'slot' AS t, state FROM pool_slots WHERE holder = ?1",
        ));
        out.extend(q(
            "SELECT 'lease' AS t, holder FROM container_leases WHERE sandbox_id = ?1 \
             OR substr(sandbox_id, 1, length(?1) + 1) = ?1 || '~'",
        ));
        out.extend(q(
            "SELECT 'process' AS t, process_id FROM sandbox_processes \
                      WHERE instance_id = ?1 AND state = 'live'",
        ));
        out
    }

    /// Fails when two processes of the rig ever ran at the same time.
    pub fn assert_no_overlap(&self) {
        let runs = self.sandbox.all_runs();
        for (i, x) in runs.iter().enumerate() {
            for y in &runs[i + 1..] {
                let x_end = x.end_ms().unwrap_or(i64::MAX);
                let y_end = y.end_ms().unwrap_or(i64::MAX);
                assert!(
                    x_end <= y.started_ms || y_end <= x.started_ms,
                    "two deploys at once: {x:?} and {y:?}"
                );
            }
        }
    }

    /// Every row of every table of the index, as text.
    pub fn index_dump(&self) -> String {
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
    pub fn journal_dump(&self, i: &Inst) -> String {
        format!(
            "{}{}",
            serde_json::to_string(&self.record(i)).unwrap(),
            serde_json::to_string(&self.journal(i)).unwrap()
        )
    }

    /// Where a deploy's held command now is: pending inside its long-poll.
    pub fn holds_in_flight(&self, pass: &mut PendingPass<'_>) {
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

/// The sweep's view of the instances, recording what it asked.
#[derive(Default)]
pub struct RecordedPokes {
    pub poked: RefCell<Vec<String>>,
    /// What each poke carried: `Rig::create_poked` creates from it, as the
    /// object does when it never heard of the instance.
    pub requests: RefCell<Vec<CreateRequest>>,
    pub purged: RefCell<Vec<String>>,
}

#[async_trait(?Send)]
impl Instances for RecordedPokes {
    async fn poke(&self, create: &CreateRequest) -> Result<(), String> {
        self.poked.borrow_mut().push(create.id().to_string());
        self.requests.borrow_mut().push(create.clone());
        Ok(())
    }
    async fn purge(&self, id: &InstanceId) -> Result<(), String> {
        self.purged.borrow_mut().push(id.to_string());
        Ok(())
    }
}

/// The sweep's finalize: the real registry of the rig.
pub struct RigFinalizer<'a> {
    pub rig: &'a Rig,
}

#[async_trait(?Send)]
impl Finalizer for RigFinalizer<'_> {
    async fn finalize(
        &self,
        run: &str,
        instance_id: &str,
        input: &Value,
        status: Status,
    ) -> Result<(), String> {
        self.rig
            .registry()
            .finalize(run, instance_id, input, status)
            .await
    }
}

/// A deploy rig whose `./deploy.sh` is a real process of `duration_ms`
/// (virtual time), for runs driven concurrently with `Rig::drive`.
pub fn deploy_rig_timed(shas: &[&str], config: &str, duration_ms: i64) -> Rig {
    let rig = Rig::new();
    for s in shas {
        rig.github.commit(REPO, s, &[(".sluice.toml", config)]);
    }
    rig.sandbox.script_timed(
        "./deploy.sh",
        0,
        "deployed $SLUICE_SHA (head $SLUICE_HEAD_SHA)\n",
        duration_ms,
    );
    rig
}

/// A deploy rig: commits `shas` carry `config`, `./deploy.sh` is scripted.
pub fn deploy_rig(shas: &[&str], config: &str) -> Rig {
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

impl FakeSandbox {
    /// A poll as the agent answers one, with the whole output.
    async fn process_whole(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
    ) -> Result<Option<ProcessState>, SandboxError> {
        check_sandbox(sandbox)?;
        check_id(id, "process")?;
        if let Some(left_ms) = self.timed_left_ms(id) {
            return self.poll_timed(id, left_ms, wait_ms).await;
        }
        let plan = {
            let st = &mut *self.st.borrow_mut();
            let Some(p) = st.processes.get(id) else {
                return Ok(None);
            };
            if let Some(done) = &p.finished {
                return Ok(Some(done.clone()));
            }
            if wait_ms <= 0 {
                None
            } else {
                Some(())
            }
        };
        if plan.is_none() {
            return Ok(Some(self.running_state(id)));
        }
        let plan = {
            let st = &mut *self.st.borrow_mut();
            if let Some(n) = st.replace_container_at_poll {
                if n <= 1 {
                    st.replace_container_at_poll = None;
                    st.replace_container();
                    return Ok(None);
                }
                st.replace_container_at_poll = Some(n - 1);
            }
            let polled = st
                .processes
                .get(id)
                .map(|p| p.command.clone())
                .unwrap_or_default();
            match &st.replace_container_when {
                Some(ReplaceWhen::WhileRunning(c)) if polled.contains(c.as_str()) => {
                    st.replace_container_when = None;
                    st.replace_container();
                    return Ok(None);
                }
                Some(ReplaceWhen::AgentRestartWhileRunning(c)) if polled.contains(c.as_str()) => {
                    st.replace_container_when = None;
                    st.restart_agent();
                    return Ok(None);
                }
                _ => {}
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
                    return Ok(Some(self.running_state(id)));
                }
            }
            // A long-poll of a process that keeps running lasts its wait.
            PollPlan::Sleep => {
                self.clock.sleep(wait_ms).await;
                return Ok(Some(self.running_state(id)));
            }
            PollPlan::Finish => {}
        }
        Ok(self.finish(id))
    }
}

/// The answer to a poll with `since`, as the agent gives it: the output
/// from that byte on, with its range.
fn from_byte(mut state: ProcessState, since: Option<u64>) -> ProcessState {
    if let Some(since) = since {
        let len = state.output.len() as u64;
        let from = since.min(len);
        state.output = state
            .output
            .get(from as usize..)
            .unwrap_or_default()
            .to_owned();
        state.output_from = Some(from);
        state.output_next = Some(len.max(from));
    }
    state
}

/// The fake archive's SHA-256: its key's, so a wrong hash is caught.
pub fn fake_archive_sha(key: &str) -> String {
    format!("{:0>64}", key.len())
}

#[async_trait(?Send)]
impl sluice::sandbox::Archives for FakeSandbox {
    async fn save(
        &self,
        sandbox: &str,
        workspace: &str,
        patterns: &[String],
        key: &str,
    ) -> Result<sluice::sandbox::Archived, SandboxError> {
        check_sandbox(sandbox)?;
        let st = &mut *self.st.borrow_mut();
        if st.archive_fails {
            return Err(sandbox_error(503, "unavailable", "the sandbox is down"));
        }
        if !st.workspaces.contains_key(workspace) {
            return Err(sandbox_error(404, "workspace_not_found", workspace));
        }
        st.archives
            .insert(key.into(), (workspace.into(), patterns.to_vec()));
        Ok(sluice::sandbox::Archived {
            bytes: 1000 * patterns.len() as u64,
            files: patterns.len() as u64,
            sha256: fake_archive_sha(key),
        })
    }

    async fn restore(
        &self,
        sandbox: &str,
        workspace: &str,
        key: &str,
        sha256: &str,
        last_of: Option<&str>,
    ) -> Result<u64, SandboxError> {
        check_sandbox(sandbox)?;
        let st = &mut *self.st.borrow_mut();
        if !st.workspaces.contains_key(workspace) {
            return Err(sandbox_error(404, "workspace_not_found", workspace));
        }
        if let Some(tree) = st.snapshots.get(key).cloned() {
            if sha256 != fake_archive_sha(key) {
                return Err(sandbox_error(422, "archive_corrupt", key));
            }
            // A snapshot here holds its whole tree: unpacked in order, the
            // last one (the pruned one) is what the workspace holds.
            st.trees.insert(workspace.into(), tree.clone());
            if let Some(process) = last_of {
                st.last_process.insert(workspace.into(), process.into());
            }
            st.unpacked
                .entry(workspace.into())
                .or_default()
                .push(format!(
                    "{key}{}",
                    if last_of.is_some() { " (pruned)" } else { "" }
                ));
            return Ok(tree.len() as u64);
        }
        let Some((_, patterns)) = st.archives.get(key) else {
            return Err(sandbox_error(503, "artifact_gone", key));
        };
        if sha256 != fake_archive_sha(key) {
            return Err(sandbox_error(422, "archive_corrupt", key));
        }
        let files = patterns.len() as u64;
        st.unpacked
            .entry(workspace.into())
            .or_default()
            .push(key.into());
        Ok(files)
    }

    async fn snapshot(
        &self,
        sandbox: &str,
        workspace: &str,
        since: Option<&sluice::sandbox::AgentTime>,
        key: &str,
    ) -> Result<sluice::sandbox::Snapshotted, SandboxError> {
        check_sandbox(sandbox)?;
        let st = &mut *self.st.borrow_mut();
        if st.snapshot_fails {
            return Err(sandbox_error(503, "unavailable", "the sandbox is down"));
        }
        if !st.workspaces.contains_key(workspace) {
            return Err(sandbox_error(404, "workspace_not_found", workspace));
        }
        let tree = st.trees.get(workspace).cloned().unwrap_or_default();
        st.snapshots.insert(key.into(), tree.clone());
        let agent = agent_of(st.containers_replaced);
        let full = since.is_some_and(|t| t.agent != agent);
        let snapshotted = sluice::sandbox::Snapshotted {
            archived: sluice::sandbox::Archived {
                bytes: 1000 * (tree.len() as u64 + 1),
                files: tree.len() as u64,
                sha256: fake_archive_sha(key),
            },
            taken: sluice::sandbox::AgentTime {
                agent,
                ms: self.clock.now_ms() as u64,
            },
            full,
        };
        if st.replace_container_when == Some(ReplaceWhen::AfterSnapshot) {
            st.replace_container_when = None;
            st.replace_container();
        }
        Ok(snapshotted)
    }
}
