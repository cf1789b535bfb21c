//! Integration tests: start the real agent binary on port 0 with a temp root and drive it over
//! HTTP, checking out real git repositories served as file:// URLs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Bound on every HTTP exchange in these tests, so a hung agent fails a test instead of
/// hanging the suite. Longer than any single operation here (the longest is a 25 s long-poll).
const HTTP_TIMEOUT_MS: u64 = 60_000;

/// Must match `PROCESSES_MAX` in src/limits.rs.
const PROCESSES_MAX: usize = 16;

static NEXT_DIR: AtomicUsize = AtomicUsize::new(0);

/// A unique directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        let path = std::env::temp_dir().join(format!(
            "sluice-agent-test-{}-{n}-{label}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path.canonicalize().expect("canonical temp dir"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Agent {
    child: Child,
    addr: String,
    token: Option<String>,
    root: PathBuf,
    // Kept last so the directory outlives the child.
    _dir: TempDir,
}

#[derive(Default)]
struct AgentOptions<'a> {
    token_flag: Option<&'a str>,
    token_env: Option<&'a str>,
    gitconfig: &'a str,
}

impl Agent {
    fn start() -> Agent {
        Agent::start_with(AgentOptions::default())
    }

    fn start_with(options: AgentOptions) -> Agent {
        let dir = TempDir::new("agent");
        let root = dir.0.join("root");
        // The agent's HOME holds the git config its checkouts see, isolated from the host's.
        let home = dir.0.join("home");
        std::fs::create_dir_all(&home).expect("home");
        std::fs::write(home.join(".gitconfig"), options.gitconfig).expect("gitconfig");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice-sandbox-agent"));
        cmd.args(["--listen", "127.0.0.1:0", "--root"])
            .arg(&root)
            .env("HOME", &home)
            .env_remove("SANDBOX_AGENT_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(token) = options.token_flag {
            cmd.args(["--token", token]);
        }
        if let Some(token) = options.token_env {
            cmd.env("SANDBOX_AGENT_TOKEN", token);
        }
        let mut child = cmd.spawn().expect("start agent");
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read ready line");
        let addr = line
            .trim_end()
            .strip_prefix("sluice-sandbox-agent listening on http://")
            .unwrap_or_else(|| panic!("unexpected ready line {line:?}"))
            .to_owned();
        assert!(!addr.ends_with(":0"), "must print the real port: {addr}");
        Agent {
            child,
            addr,
            token: options.token_flag.or(options.token_env).map(str::to_owned),
            root: root.canonicalize().expect("root"),
            _dir: dir,
        }
    }

    /// One HTTP/1.1 exchange over a fresh connection; returns status and JSON body.
    fn raw(&self, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> (u16, Value) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        let timeout = Some(Duration::from_millis(HTTP_TIMEOUT_MS));
        stream.set_read_timeout(timeout).expect("read timeout");
        stream.set_write_timeout(timeout).expect("write timeout");
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.addr
        );
        if let Some(token) = token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        stream.write_all(head.as_bytes()).expect("write head");
        // The server may answer (413) without reading the whole body.
        let _ = stream.write_all(body);
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).expect("read response");
        let split = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or_else(|| panic!("no header end in {:?}", String::from_utf8_lossy(&raw)));
        let head = String::from_utf8_lossy(&raw[..split]);
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line in {head:?}"));
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{head}"
        );
        let body = serde_json::from_slice(&raw[split + 4..]).unwrap_or_else(|e| {
            panic!(
                "non-JSON body ({e}): {:?}",
                String::from_utf8_lossy(&raw[split + 4..])
            )
        });
        (status, body)
    }

    fn call(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        self.raw(method, path, self.token.as_deref(), body.as_bytes())
    }

    fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, None)
    }

    fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(body))
    }

    fn post_raw(&self, path: &str, body: &str) -> (u16, Value) {
        self.raw("POST", path, self.token.as_deref(), body.as_bytes())
    }

    /// An empty workspace made directly on disk, for tests about commands rather than git.
    fn empty_workspace(&self, id: &str) -> PathBuf {
        let path = self.root.join("workspaces").join(id);
        std::fs::create_dir_all(&path).expect("workspace dir");
        path
    }

    fn exec(&self, workspace: &str, command: &str, timeout_ms: u64) -> Value {
        let body = json!({"workspace": workspace, "command": command, "timeout_ms": timeout_ms});
        let (status, reply) = self.post("/v1/exec", body);
        assert_eq!(status, 200, "{reply}");
        reply
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn error_code(reply: &Value) -> &str {
    reply["error"]["code"].as_str().unwrap_or("<none>")
}

/// Runs git with an isolated config; panics with git's output on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A repository on branch main with two commits changing a.txt ("one", then "two").
struct Repo {
    _dir: TempDir,
    url: String,
    first_sha: String,
    second_sha: String,
}

fn make_repo() -> Repo {
    let dir = TempDir::new("repo");
    let path = &dir.0;
    git(path, &["init", "-q", "-b", "main"]);
    std::fs::write(path.join("a.txt"), "one").expect("write");
    git(path, &["add", "a.txt"]);
    git(path, &["commit", "-q", "-m", "one"]);
    let first_sha = git(path, &["rev-parse", "HEAD"]);
    std::fs::write(path.join("a.txt"), "two").expect("write");
    git(path, &["commit", "-q", "-am", "two"]);
    let second_sha = git(path, &["rev-parse", "HEAD"]);
    Repo {
        url: format!("file://{}", path.display()),
        _dir: dir,
        first_sha,
        second_sha,
    }
}

fn checkout_body(workspace: &str, url: &str, sha: &str) -> Value {
    json!({"workspace": workspace, "repo_url": url, "sha": sha})
}

/// Every file under `dir`, recursively (bounded by the tree).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
        } else {
            files.push(path);
        }
    }
    files
}

#[test]
fn healthz_needs_no_auth_and_reports_version() {
    let agent = Agent::start_with(AgentOptions {
        token_flag: Some("flag-token"),
        ..Default::default()
    });
    let (status, reply) = agent.raw("GET", "/healthz", None, b"");
    assert_eq!(status, 200);
    assert_eq!(
        reply,
        json!({"ok": true, "version": env!("CARGO_PKG_VERSION")})
    );
    let (status, reply) = agent.get("/nope");
    assert_eq!((status, error_code(&reply)), (404, "not_found"));
    let (status, reply) = agent.call("POST", "/healthz", None);
    assert_eq!((status, error_code(&reply)), (405, "method_not_allowed"));
}

#[test]
fn v1_requires_the_bearer_token_when_configured() {
    for options in [
        AgentOptions {
            token_flag: Some("flag-token"),
            ..Default::default()
        },
        AgentOptions {
            token_env: Some("env-token"),
            ..Default::default()
        },
    ] {
        let agent = Agent::start_with(options);
        let token = agent.token.clone().expect("token");
        let path = "/v1/workspaces/w1";
        let (status, reply) = agent.raw("GET", path, None, b"");
        assert_eq!((status, error_code(&reply)), (401, "unauthorized"));
        let (status, _) = agent.raw("GET", path, Some("wrong"), b"");
        assert_eq!(status, 401);
        let (status, _) = agent.raw("GET", path, Some(&format!("{token}x")), b"");
        assert_eq!(status, 401);
        // Unknown /v1/ paths are not revealed without the token either.
        let (status, _) = agent.raw("GET", "/v1/nope", None, b"");
        assert_eq!(status, 401);
        let (status, reply) = agent.raw("GET", path, Some(&token), b"");
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["exists"], json!(false));
    }
}

#[test]
fn checkout_is_fresh_each_time_and_can_be_probed_and_deleted() {
    let agent = Agent::start();
    let repo = make_repo();
    // The first commit is not a branch tip: this is a fetch by sha.
    let (status, reply) = agent.post(
        "/v1/workspaces",
        checkout_body("w1", &repo.url, &repo.first_sha),
    );
    assert_eq!(status, 201, "{reply}");
    assert_eq!(reply["workspace"], "w1");
    assert_eq!(reply["sha"], repo.first_sha.as_str());
    assert!(reply["duration_ms"].is_u64());
    let path = PathBuf::from(reply["path"].as_str().expect("path"));
    assert_eq!(path, agent.root.join("workspaces/w1"));
    assert_eq!(git(&path, &["rev-parse", "HEAD"]), repo.first_sha);
    assert_eq!(
        std::fs::read_to_string(path.join("a.txt")).expect("a"),
        "one"
    );

    std::fs::write(path.join("stray.txt"), "left over").expect("stray");
    let (status, reply) = agent.post(
        "/v1/workspaces",
        checkout_body("w1", &repo.url, &repo.second_sha.to_uppercase()),
    );
    assert_eq!(status, 201, "{reply}");
    assert_eq!(reply["sha"], repo.second_sha.as_str(), "sha is normalized");
    assert!(!path.join("stray.txt").exists(), "workspace must be fresh");
    assert_eq!(
        std::fs::read_to_string(path.join("a.txt")).expect("a"),
        "two"
    );

    let (status, reply) = agent.get("/v1/workspaces/w1");
    assert_eq!(status, 200);
    assert_eq!(
        reply,
        json!({"workspace": "w1", "exists": true, "sha": repo.second_sha})
    );
    let (status, reply) = agent.call("DELETE", "/v1/workspaces/w1", None);
    assert_eq!((status, reply), (200, json!({"deleted": true})));
    assert!(!path.exists());
    let (_, reply) = agent.get("/v1/workspaces/w1");
    assert_eq!(
        reply,
        json!({"workspace": "w1", "exists": false, "sha": null})
    );
    let (status, reply) = agent.call("DELETE", "/v1/workspaces/w1", None);
    assert_eq!((status, reply), (200, json!({"deleted": false})));
}

#[test]
fn checkout_token_is_never_written_into_the_checkout() {
    let agent = Agent::start();
    let repo = make_repo();
    let token = "ghs_SuperSecretInstallationToken";
    // base64("x-access-token:ghs_SuperSecretInstallationToken"), the header form.
    let header_b64 = "eC1hY2Nlc3MtdG9rZW46Z2hzX1N1cGVyU2VjcmV0SW5zdGFsbGF0aW9uVG9rZW4=";
    let mut body = checkout_body("tok", &repo.url, &repo.second_sha);
    body["token"] = json!(token);
    let (status, reply) = agent.post("/v1/workspaces", body);
    assert_eq!(status, 201, "{reply}");
    let path = PathBuf::from(reply["path"].as_str().expect("path"));
    let git_files = files_under(&path.join(".git"));
    assert!(!git_files.is_empty());
    for file in git_files {
        let bytes = std::fs::read(&file).expect("read");
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(token), "token in {}", file.display());
        assert!(!text.contains(header_b64), "header in {}", file.display());
    }
    let config = git(&path, &["config", "--list", "--local"]).to_lowercase();
    assert!(!config.contains("extraheader"), "{config}");
    assert!(!config.contains("ghs_"), "{config}");
}

#[test]
fn checkout_failure_is_422_with_the_token_scrubbed() {
    let agent = Agent::start();
    let repo = make_repo();
    let token = "ghs_LeakyToken123";

    let unknown_sha = "1234567890abcdef1234567890abcdef12345678";
    let mut body = checkout_body("w2", &repo.url, unknown_sha);
    body["token"] = json!(token);
    let (status, reply) = agent.post("/v1/workspaces", body);
    assert_eq!(
        (status, error_code(&reply)),
        (422, "checkout_failed"),
        "{reply}"
    );
    let message = reply["error"]["message"].as_str().expect("message");
    assert!(message.contains(unknown_sha), "says what failed: {message}");
    assert!(!message.contains(token), "{message}");
    let (_, probe) = agent.get("/v1/workspaces/w2");
    assert_eq!(probe["exists"], json!(false), "failed checkout is removed");

    // git quotes the URL in its error; a token there must not come back.
    let url = format!("file:///nonexistent/{token}/repo");
    let mut body = checkout_body("w2", &url, &repo.first_sha);
    body["token"] = json!(token);
    let (status, reply) = agent.post("/v1/workspaces", body);
    assert_eq!(
        (status, error_code(&reply)),
        (422, "checkout_failed"),
        "{reply}"
    );
    let message = reply["error"]["message"].as_str().expect("message");
    assert!(!message.contains(token), "{message}");
    assert!(message.contains("***"), "{message}");
}

#[test]
fn checkout_falls_back_to_a_full_fetch_when_fetch_by_sha_is_refused() {
    // Protocol v0 against a default server refuses a non-tip sha ("not our ref").
    let agent = Agent::start_with(AgentOptions {
        gitconfig: "[protocol]\n\tversion = 0\n",
        ..Default::default()
    });
    let repo = make_repo();
    let (status, reply) = agent.post(
        "/v1/workspaces",
        checkout_body("fb", &repo.url, &repo.first_sha),
    );
    assert_eq!(status, 201, "{reply}");
    let path = agent.root.join("workspaces/fb");
    assert_eq!(git(&path, &["rev-parse", "HEAD"]), repo.first_sha);
    // Only the fallback fetches branches.
    assert_eq!(
        git(&path, &["rev-parse", "refs/remotes/origin/main"]),
        repo.second_sha
    );
}

#[test]
fn exec_captures_interleaved_output_and_exit_codes() {
    let agent = Agent::start();
    let path = agent.empty_workspace("w");
    let reply = agent.exec("w", "echo out1; echo err1 >&2; echo out2; pwd", 10_000);
    let expected = format!("out1\nerr1\nout2\n{}\n", path.display());
    assert_eq!(reply["output"], expected.as_str());
    assert_eq!(reply["output_bytes"], expected.len());
    assert_eq!(reply["output_truncated"], false);
    assert_eq!(reply["exit_code"], 0);
    assert_eq!(reply["signal"], Value::Null);
    assert_eq!(reply["timed_out"], false);
    assert!(reply["duration_ms"].is_u64());

    let reply = agent.exec("w", "echo bye >&2; exit 3", 10_000);
    assert_eq!(reply["exit_code"], 3);
    assert_eq!(reply["output"], "bye\n");
}

#[test]
fn exec_timeout_kills_the_whole_process_group() {
    let agent = Agent::start();
    let path = agent.empty_workspace("w");
    // The answer itself is the signal: a 30 s command came back timed out.
    let reply = agent.exec("w", "sleep 30 & echo $! > child.pid; sleep 30", 500);
    assert_eq!(reply["timed_out"], true, "{reply}");
    assert_eq!(reply["exit_code"], Value::Null);
    assert_eq!(reply["signal"], 9);

    let pid = std::fs::read_to_string(path.join("child.pid")).expect("pid file");
    let stat = PathBuf::from(format!("/proc/{}/stat", pid.trim()));
    // The killed orphan is reaped by init asynchronously (or lingers as a zombie, state Z).
    let deadline = Instant::now() + Duration::from_secs(5);
    let alive = || match std::fs::read_to_string(&stat) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    };
    while alive() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !alive(),
        "background sleep {} survived the timeout",
        pid.trim()
    );
}

#[test]
fn exec_output_truncation_keeps_head_and_tail() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    let command = "head -c 5000000 /dev/zero | tr '\\0' a; echo; echo TAIL_MARKER";
    let reply = agent.exec("w", command, 30_000);
    assert_eq!(reply["exit_code"], 0);
    assert_eq!(reply["output_truncated"], true);
    assert_eq!(reply["output_bytes"], 5_000_000 + 1 + "TAIL_MARKER\n".len());
    let output = reply["output"].as_str().expect("output");
    assert!(output.starts_with("aaaa"), "{}", &output[..20]);
    assert!(output.ends_with("a\nTAIL_MARKER\n"));
    assert!(output.len() <= 4 * 1024 * 1024 + 200, "{}", output.len());
}

#[test]
fn exec_env_is_minimal_plus_the_given_env() {
    // The agent's own token must not leak into commands.
    let agent = Agent::start_with(AgentOptions {
        token_env: Some("agent-secret"),
        ..Default::default()
    });
    let path = agent.empty_workspace("w");
    let body = json!({
        "workspace": "w",
        "command": "echo \"$FOO|$HOME|$LANG\"; env | grep -c agent-secret",
        "timeout_ms": 10_000,
        "env": {"FOO": "bar baz"},
    });
    let (status, reply) = agent.post("/v1/exec", body);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply["output"],
        format!("bar baz|{}|C.UTF-8\n0\n", path.display()).as_str()
    );
}

/// Bodies the agent must refuse: (path, body, status, error code).
const BAD_POSTS: &[(&str, &str, u16, &str)] = &[
    ("/v1/exec", "{", 400, "invalid_json"),
    ("/v1/exec", "", 400, "invalid_json"),
    ("/v1/exec", "[1, 2]", 400, "invalid_request"),
    ("/v1/exec", r#"{"workspace": 1}"#, 400, "invalid_request"),
    (
        "/v1/exec",
        r#"{"workspace": "w", "command": "true"}"#,
        400,
        "invalid_request",
    ),
    (
        "/v1/exec",
        r#"{"workspace": "w", "command": "true", "timeout_ms": 0}"#,
        400,
        "invalid_request",
    ),
    (
        "/v1/exec",
        r#"{"workspace": "w", "command": "true", "timeout_ms": 3600001}"#,
        400,
        "invalid_request",
    ),
    (
        "/v1/exec",
        r#"{"workspace": "w", "command": "", "timeout_ms": 10}"#,
        400,
        "invalid_request",
    ),
    (
        "/v1/exec",
        r#"{"workspace": "w", "command": "true", "timeout_ms": 10, "extra": 1}"#,
        400,
        "invalid_request",
    ),
    (
        "/v1/exec",
        r#"{"workspace": "w", "command": "true", "timeout_ms": 10, "env": {"A=B": "c"}}"#,
        400,
        "invalid_request",
    ),
    (
        "/v1/exec",
        r#"{"workspace": "../w", "command": "true", "timeout_ms": 10}"#,
        400,
        "invalid_id",
    ),
    (
        "/v1/exec",
        r#"{"workspace": "", "command": "true", "timeout_ms": 10}"#,
        400,
        "invalid_id",
    ),
    (
        "/v1/exec",
        r#"{"workspace": "missing", "command": "true", "timeout_ms": 10}"#,
        404,
        "workspace_not_found",
    ),
    (
        "/v1/workspaces",
        r#"{"workspace": "w", "repo_url": "file:///x", "sha": "abc"}"#,
        400,
        "invalid_request",
    ),
    (
        "/v1/workspaces",
        r#"{"workspace": "w", "repo_url": "ext::sh -c touch% /tmp/pwned", "sha": "1234567890123456789012345678901234567890"}"#,
        400,
        "invalid_request",
    ),
    (
        "/v1/workspaces",
        r#"{"workspace": "a/b", "repo_url": "file:///x", "sha": "1234567890123456789012345678901234567890"}"#,
        400,
        "invalid_id",
    ),
    (
        "/v1/processes",
        r#"{"id": "p.1", "workspace": "w", "command": "true", "timeout_ms": 10}"#,
        400,
        "invalid_id",
    ),
    (
        "/v1/processes",
        r#"{"id": "p1", "workspace": "nope", "command": "true", "timeout_ms": 10}"#,
        404,
        "workspace_not_found",
    ),
];

#[test]
fn bad_request_bodies_are_4xx_json_errors() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    for &(path, body, status, code) in BAD_POSTS {
        let (got, reply) = agent.post_raw(path, body);
        assert_eq!((got, error_code(&reply)), (status, code), "{path} {body}");
        assert!(reply["error"]["message"].is_string(), "{reply}");
    }
}

#[test]
fn bad_paths_and_oversized_bodies_are_4xx_json_errors() {
    let agent = Agent::start();
    let long_id = "a".repeat(101);
    let (status, reply) = agent.get(&format!("/v1/workspaces/{long_id}"));
    assert_eq!((status, error_code(&reply)), (400, "invalid_id"));
    let (status, _) = agent.get(&format!("/v1/workspaces/{}", "a".repeat(100)));
    assert_eq!(status, 200, "100 characters is allowed");
    let (status, reply) = agent.get("/v1/workspaces/bad.id");
    assert_eq!((status, error_code(&reply)), (400, "invalid_id"));
    let (status, reply) = agent.get("/v1/processes/nope");
    assert_eq!((status, error_code(&reply)), (404, "process_not_found"));
    let (status, reply) = agent.get("/v1/processes/nope?wait_ms=abc");
    assert_eq!((status, error_code(&reply)), (400, "invalid_request"));
    let (status, reply) = agent.call("PUT", "/v1/exec", None);
    assert_eq!((status, error_code(&reply)), (405, "method_not_allowed"));

    let huge = format!("{{\"command\": \"{}\"}}", "x".repeat(1024 * 1024 + 1));
    let (status, reply) = agent.post_raw("/v1/exec", &huge);
    assert_eq!((status, error_code(&reply)), (413, "body_too_large"));

    // Still serving after all that.
    let (status, _) = agent.get("/healthz");
    assert_eq!(status, 200);
}

#[test]
fn detached_process_is_started_once_per_id_and_can_be_awaited() {
    let agent = Agent::start();
    let path = agent.empty_workspace("w");
    let body = json!({
        "id": "step-1-attempt",
        "workspace": "w",
        "command": "echo run >> runs.txt; sleep 1; echo done",
        "timeout_ms": 20_000,
    });
    let (status, first) = agent.post("/v1/processes", body.clone());
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["id"], "step-1-attempt");
    assert_eq!(first["status"], "running");
    assert!(first["started_ms"].as_u64().expect("started_ms") > 1_600_000_000_000);

    // A retried step posts the same id: it observes, nothing new starts.
    let (status, second) = agent.post("/v1/processes", body.clone());
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["started_ms"], first["started_ms"]);

    let (status, running) = agent.get("/v1/processes/step-1-attempt");
    assert_eq!(status, 200);
    assert_eq!(running["status"], "running");

    // A long-poll answers with the exit (how fast is `npm run bench`'s).
    let (status, done) = agent.get("/v1/processes/step-1-attempt?wait_ms=20000");
    assert_eq!(status, 200);
    assert_eq!(done["status"], "exited", "{done}");
    assert_eq!(done["exit_code"], 0);
    assert_eq!(done["signal"], Value::Null);
    assert_eq!(done["output"], "done\n");
    assert_eq!(done["output_bytes"], 5);
    assert_eq!(done["output_truncated"], false);
    assert!(done["duration_ms"].as_u64().expect("duration") >= 1000);

    let (status, replay) = agent.post("/v1/processes", body);
    assert_eq!(status, 200);
    assert_eq!(replay["status"], "exited");
    let runs = std::fs::read_to_string(path.join("runs.txt")).expect("runs");
    assert_eq!(runs, "run\n", "the command ran exactly once");
}

#[test]
fn detached_process_times_out_and_long_poll_is_bounded() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    let body = json!({"id": "slow", "workspace": "w", "command": "sleep 30", "timeout_ms": 5000});
    let (status, reply) = agent.post("/v1/processes", body);
    assert_eq!(status, 201, "{reply}");

    // A short wait returns while the process still runs.
    let (_, reply) = agent.get("/v1/processes/slow?wait_ms=100");
    assert_eq!(reply["status"], "running");

    let (_, reply) = agent.get("/v1/processes/slow?wait_ms=20000");
    assert_eq!(reply["status"], "timed_out", "{reply}");
    assert_eq!(reply["exit_code"], Value::Null);
    assert_eq!(reply["signal"], 9);
}

#[test]
fn detached_processes_are_capped() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    let body = |id: String| json!({"id": id, "workspace": "w", "command": "sleep 3", "timeout_ms": 10_000});
    for i in 0..PROCESSES_MAX {
        let (status, reply) = agent.post("/v1/processes", body(format!("p{i}")));
        assert_eq!(status, 201, "{reply}");
    }
    let (status, reply) = agent.post("/v1/processes", body("over".into()));
    assert_eq!((status, error_code(&reply)), (429, "too_many_processes"));
    let (status, _) = agent.post("/v1/processes", body("p0".into()));
    assert_eq!(status, 200, "an existing id is still answered at the cap");
}

/// Whether a pid names a live (non-zombie) process.
fn pid_alive(pid: &str) -> bool {
    let stat = PathBuf::from(format!("/proc/{}/stat", pid.trim()));
    match std::fs::read_to_string(&stat) {
        Ok(s) => !s
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[test]
fn kill_ends_the_whole_process_group_and_reports_it() {
    let agent = Agent::start();
    let path = agent.empty_workspace("w");
    let body = json!({
        "id": "deploy-1",
        "workspace": "w",
        "command": "sleep 30 & echo $! > child.pid; sleep 30",
        "timeout_ms": 60_000,
    });
    let (status, reply) = agent.post("/v1/processes", body);
    assert_eq!(status, 201, "{reply}");
    // Wait for the positive signal that the background child exists.
    let pid_file = path.join("child.pid");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pid_file.exists() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    let pid = std::fs::read_to_string(&pid_file).expect("the command wrote its child's pid");

    let (status, killed) = agent.post("/v1/processes/deploy-1/kill?wait_ms=10000", json!({}));
    assert_eq!(status, 200, "{killed}");
    assert_eq!(killed["status"], "killed", "{killed}");
    assert_eq!(killed["signal"], 9);
    // The orphaned background sleep went with the group.
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid_alive(&pid) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !pid_alive(&pid),
        "background sleep {} survived the kill",
        pid.trim()
    );

    // A second kill of a finished process changes nothing.
    let (status, again) = agent.post("/v1/processes/deploy-1/kill", json!({}));
    assert_eq!((status, &again["status"]), (200, &json!("killed")));
    let (_, seen) = agent.get("/v1/processes/deploy-1");
    assert_eq!(seen["status"], "killed");

    // A process the agent does not know is its own 404, not "no endpoint".
    let (status, unknown) = agent.post("/v1/processes/nobody/kill", json!({}));
    assert_eq!((status, error_code(&unknown)), (404, "process_not_found"));
    let (status, _) = agent.get("/v1/processes/deploy-1/kill");
    assert_eq!(status, 405);
}

#[test]
fn kill_of_a_process_that_already_exited_reports_its_exit() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    let body = json!({"id": "quick", "workspace": "w", "command": "exit 3", "timeout_ms": 10_000});
    let (status, _) = agent.post("/v1/processes", body);
    assert_eq!(status, 201);
    let (_, done) = agent.get("/v1/processes/quick?wait_ms=10000");
    assert_eq!(done["status"], "exited");
    let (status, after) = agent.post("/v1/processes/quick/kill", json!({}));
    assert_eq!(status, 200);
    assert_eq!(
        (&after["status"], &after["exit_code"]),
        (&json!("exited"), &json!(3)),
        "an ended process is not re-signalled (its group id may be reused)"
    );
}

#[test]
fn discarding_a_sandbox_kills_what_runs_there_and_deletes_its_workspace() {
    let agent = Agent::start();
    let path = agent.empty_workspace("inst-1");
    agent.empty_workspace("other");
    let body = |id: &str, ws: &str| json!({"id": id, "workspace": ws, "command": "sleep 30", "timeout_ms": 60_000});
    assert_eq!(agent.post("/v1/processes", body("mine", "inst-1")).0, 201);
    assert_eq!(agent.post("/v1/processes", body("theirs", "other")).0, 201);
    let (status, reply) = agent.call("DELETE", "/v1/sandboxes/inst-1", None);
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["killed"], 1);
    assert!(!path.exists(), "the workspace is gone");
    let (_, mine) = agent.get("/v1/processes/mine");
    assert_eq!(mine["status"], "killed");
    let (_, theirs) = agent.get("/v1/processes/theirs");
    assert_eq!(
        theirs["status"], "running",
        "another sandbox's process is untouched"
    );
    let (status, again) = agent.call("DELETE", "/v1/sandboxes/inst-1", None);
    assert_eq!((status, &again["killed"]), (200, &json!(0)), "idempotent");
    agent.post("/v1/processes/theirs/kill?wait_ms=5000", json!({}));
}

/// The secret of the redaction tests: the shape of a GitHub installation token.
const SECRET: &str = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";

/// Starts a detached process with `SECRET` in its env and on its redact list, and waits
/// for it.
fn run_with_secret(agent: &Agent, id: &str, command: &str) -> Value {
    let body = json!({
        "id": id,
        "workspace": "w",
        "command": command,
        "timeout_ms": 60_000,
        "env": { "S": SECRET },
        "redact": [SECRET],
    });
    let (status, started) = agent.post("/v1/processes", body);
    assert_eq!(status, 201, "{started}");
    let (status, done) = agent.get(&format!("/v1/processes/{id}?wait_ms=25000"));
    assert_eq!(
        (status, done["status"].as_str()),
        (200, Some("exited")),
        "{done}"
    );
    done
}

/// No 6-character run of the secret (or of its standard base64) is in `output`.
fn assert_no_part_of_secret(output: &str) {
    use base64::Engine;
    let encoded = base64::engine::general_purpose::STANDARD.encode(SECRET);
    for form in [SECRET, encoded.as_str()] {
        for part in form.as_bytes().windows(6) {
            let part = std::str::from_utf8(part).expect("ascii");
            assert!(!output.contains(part), "{part:?} of {form} is visible");
        }
    }
}

#[test]
fn secrets_are_scrubbed_in_encoded_forms() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    let command = "echo \"plain $S\"; printf %s \"$S\" | base64 -w0; echo; \
         printf 'x:%s' \"$S\" | base64; printf '%s%s' \"$S\" \"$S\" | base64 -w 16; \
         printf '{\"t\":\"%s\"}\\n' \"$S\"; echo done";
    let done = run_with_secret(&agent, "encoded", command);
    let output = done["output"].as_str().expect("output");
    assert!(
        output.starts_with("plain ***\n") && output.ends_with("done\n"),
        "{output}"
    );
    assert!(output.contains(r#"{"t":"***"}"#), "{output}");
    assert_no_part_of_secret(output);
}

#[test]
fn a_secret_across_the_truncation_point_is_masked() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    // 64 KiB is the kept head (limits::OUTPUT_HEAD_BYTES): the secret starts 10 bytes before
    // it ends, then enough output follows to truncate the middle.
    let command = "head -c 65526 /dev/zero | tr '\\0' h; printf %s \"$S\"; \
         head -c 5000000 /dev/zero | tr '\\0' t; echo; echo END";
    let done = run_with_secret(&agent, "straddle", command);
    assert_eq!(done["output_truncated"], true);
    let output = done["output"].as_str().expect("output");
    assert!(output.ends_with("t\nEND\n"), "the tail is kept");
    assert!(output.contains("hhh***"), "the mask sits at the cut");
    assert_no_part_of_secret(output);
}
