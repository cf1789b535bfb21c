//! Integration tests: start the real agent binary on port 0 with a temp root and drive it over
//! HTTP, checking out real git repositories served as file:// URLs.
//!
//! The agent isolates workspaces when it runs as root (the default on the machines these
//! tests run on): the tests that are about isolation say so and skip, with a notice, when the
//! test process is not root; every other test then runs the agent `--unisolated`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Bound on every HTTP exchange in these tests, so a hung agent fails a test instead of
/// hanging the suite. Longer than any single operation here (the longest is a 25 s long-poll).
const HTTP_TIMEOUT_MS: u64 = 60_000;

/// How long a test waits for a sign that a command got somewhere (a file it writes, a process
/// it starts): milliseconds normally, 10 s on a loaded machine.
const SIGNAL_WAIT_MS: u64 = 10_000;

/// How long an agent that must refuse to start may take to exit: it checks its arguments and
/// environment before anything else, so at once; 10 s on a loaded machine.
const REFUSAL_WAIT_MS: u64 = 10_000;

/// Must match `PROCESSES_MAX` in src/limits.rs.
const PROCESSES_MAX: usize = 16;

/// The uids agents hand out: must match `UID_BASE`, `UIDS_PER_AGENT` and
/// `AGENTS_PER_HOST_MAX` in src/uid_block.rs.
const UID_BASE: u32 = 200_000;
const UID_END: u32 = UID_BASE + 1_024 * 64;

/// The unprivileged user the non-root cases run the agent as (`nobody` on Debian).
const NOBODY: u32 = 65_534;

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
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        TempDir(path.canonicalize().expect("canonical temp dir"))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// For tests of isolation itself: false (and a notice) when the tests do not run as root.
fn isolation_available(test: &str) -> bool {
    if !is_root() {
        eprintln!("{test}: skipped, isolation needs the agent to run as root");
    }
    is_root()
}

/// The git URL prefix the tests' agents allow: the temp dir their repositories live in.
fn temp_prefix() -> String {
    format!("file://{}/", std::env::temp_dir().display())
}

struct Agent {
    child: Child,
    addr: String,
    token: Option<String>,
    root: PathBuf,
    stderr: Arc<Mutex<String>>,
    // Kept last so the directory outlives the child.
    _dir: TempDir,
}

struct AgentOptions<'a> {
    /// The token in the agent's environment; None starts it without one.
    token: Option<String>,
    gitconfig: &'a str,
    /// `--git-url-prefix` values; empty passes none (the agent's default).
    prefixes: Vec<String>,
    unisolated: bool,
    extra_args: Vec<&'a str>,
    listen: &'a str,
    /// Run the agent as `NOBODY` (through setpriv).
    as_nobody: bool,
    /// Serve this root instead of a fresh one (a restarted agent).
    root: Option<&'a Path>,
    /// The agent's PATH, instead of the test's.
    path: Option<String>,
    /// More of the agent's environment.
    env: Vec<(&'a str, String)>,
}

impl Default for AgentOptions<'_> {
    fn default() -> Self {
        let n = NEXT_DIR.fetch_add(1, Ordering::SeqCst);
        AgentOptions {
            token: Some(format!("test-token-{}-{n}", std::process::id())),
            gitconfig: "",
            prefixes: vec![temp_prefix()],
            unisolated: !is_root(),
            extra_args: Vec::new(),
            listen: "127.0.0.1:0",
            as_nobody: false,
            root: None,
            path: None,
            env: Vec::new(),
        }
    }
}

/// An agent that did not start: how it exited and what it said.
#[derive(Debug)]
struct Refusal {
    status: ExitStatus,
    stderr: String,
}

impl Agent {
    fn start() -> Agent {
        Agent::start_with(AgentOptions::default())
    }

    fn start_with(options: AgentOptions) -> Agent {
        match Agent::try_start(options) {
            Ok(agent) => agent,
            Err(refusal) => panic!("the agent did not start: {refusal:?}"),
        }
    }

    fn command(options: &AgentOptions, dir: &TempDir) -> (Command, PathBuf) {
        let root = options
            .root
            .map_or_else(|| dir.0.join("root"), Path::to_path_buf);
        // The agent's HOME holds the git config its checkouts see, isolated from the host's.
        // The repositories are root's and git runs as other users, hence safe.directory.
        let home = dir.0.join("home");
        std::fs::create_dir_all(&home).expect("home");
        let gitconfig = format!("[safe]\n\tdirectory = *\n{}", options.gitconfig);
        std::fs::write(home.join(".gitconfig"), gitconfig).expect("gitconfig");
        let bin = env!("CARGO_BIN_EXE_sluice-sandbox-agent");
        let mut cmd = if options.as_nobody {
            let mut cmd = Command::new("setpriv");
            let id = NOBODY.to_string();
            cmd.args(["--reuid", &id, "--regid", &id, "--clear-groups", bin]);
            cmd
        } else {
            Command::new(bin)
        };
        cmd.args(["--listen", options.listen, "--root"])
            .arg(&root)
            .args(&options.extra_args)
            .env("HOME", &home)
            .env_remove("SANDBOX_AGENT_TOKEN")
            .env_remove("SANDBOX_GIT_URL_PREFIXES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for prefix in &options.prefixes {
            cmd.args(["--git-url-prefix", prefix]);
        }
        if options.unisolated {
            cmd.arg("--unisolated");
        }
        if let Some(token) = &options.token {
            cmd.env("SANDBOX_AGENT_TOKEN", token);
        }
        if let Some(path) = &options.path {
            cmd.env("PATH", path);
        }
        cmd.envs(options.env.iter().map(|(k, v)| (k, v)));
        (cmd, root)
    }

    /// Starts the agent and waits for its ready line; Err when it exits first.
    fn try_start(options: AgentOptions) -> Result<Agent, Refusal> {
        let dir = TempDir::new("agent");
        let (mut cmd, root) = Agent::command(&options, &dir);
        let mut child = cmd.spawn().expect("start agent");
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("stderr");
        let sink = stderr.clone();
        // Drained for the agent's whole life so its request log never blocks it.
        let drain = thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .expect("stderr")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read ready line");
        let Some(addr) = line
            .trim_end()
            .strip_prefix("sluice-sandbox-agent listening on http://")
            .map(str::to_owned)
        else {
            let status = child.wait().expect("agent exit");
            drain.join().expect("stderr drained");
            let stderr = stderr.lock().expect("stderr").clone();
            return Err(Refusal { status, stderr });
        };
        assert!(!addr.ends_with(":0"), "must print the real port: {addr}");
        Ok(Agent {
            child,
            addr,
            token: options.token.clone(),
            root: root.canonicalize().expect("root"),
            stderr,
            _dir: dir,
        })
    }

    /// Runs an agent that must refuse to start, bounded by `REFUSAL_WAIT_MS`.
    fn refusal(options: AgentOptions) -> Refusal {
        let dir = TempDir::new("refused");
        let (mut cmd, _) = Agent::command(&options, &dir);
        let mut child = cmd.spawn().expect("start agent");
        let deadline = Instant::now() + Duration::from_millis(REFUSAL_WAIT_MS);
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("the agent did not refuse to start within {REFUSAL_WAIT_MS} ms");
            }
            thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        child
            .stderr
            .take()
            .expect("stderr")
            .read_to_string(&mut stderr)
            .expect("read stderr");
        Refusal { status, stderr }
    }

    /// One HTTP/1.1 exchange over a fresh connection with exactly `headers` (plus Host,
    /// Connection and Content-Length); returns status and JSON body.
    fn exchange(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, Value) {
        let (status, head, body) = self.exchange_bytes(method, path, headers, body);
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json"),
            "{head}"
        );
        let body = serde_json::from_slice(&body).unwrap_or_else(|e| {
            panic!("non-JSON body ({e}): {:?}", String::from_utf8_lossy(&body))
        });
        (status, body)
    }

    /// One exchange as `exchange` makes it; status, response head and body bytes.
    fn exchange_bytes(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> (u16, String, Vec<u8>) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        let timeout = Some(Duration::from_millis(HTTP_TIMEOUT_MS));
        stream.set_read_timeout(timeout).expect("read timeout");
        stream.set_write_timeout(timeout).expect("write timeout");
        let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
            head.push_str(&format!("Host: {}\r\n", self.addr));
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
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
        (status, head.into_owned(), raw[split + 4..].to_vec())
    }

    /// An exchange as the Worker makes it: the bearer token, and a JSON content type on
    /// anything but GET.
    fn raw(&self, method: &str, path: &str, token: Option<&str>, body: &[u8]) -> (u16, Value) {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let mut headers = Vec::new();
        if let Some(bearer) = &bearer {
            headers.push(("Authorization", bearer.as_str()));
        }
        if method != "GET" {
            headers.push(("Content-Type", "application/json"));
        }
        self.exchange(method, path, &headers, body)
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

    /// A workspace holding a fresh checkout of a one-file repository, for tests about
    /// commands rather than git (isolated, only a checkout gives a workspace its user).
    fn empty_workspace(&self, id: &str) -> PathBuf {
        let repo = make_repo();
        let (status, reply) = self.post(
            "/v1/workspaces",
            checkout_body(id, &repo.url, &repo.second_sha),
        );
        assert_eq!(status, 201, "{reply}");
        PathBuf::from(reply["path"].as_str().expect("path"))
    }

    fn exec(&self, workspace: &str, command: &str, timeout_ms: u64) -> Value {
        let body = json!({"workspace": workspace, "command": command, "timeout_ms": timeout_ms});
        let (status, reply) = self.post("/v1/exec", body);
        assert_eq!(status, 200, "{reply}");
        reply
    }

    /// Waits (bounded by `SIGNAL_WAIT_MS`) for the agent's log (its stderr, read by another
    /// thread) to contain `needle`; returns the log.
    fn wait_log(&self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_millis(SIGNAL_WAIT_MS);
        loop {
            let log = self.stderr.lock().expect("stderr").clone();
            if log.contains(needle) || Instant::now() >= deadline {
                return log;
            }
            thread::sleep(Duration::from_millis(10));
        }
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
        // Checkouts belong to their workspace's user, not to the test (root).
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
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
    let agent = Agent::start();
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
fn v1_requires_the_bearer_token() {
    let agent = Agent::start();
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
        json!({"workspace": "w1", "exists": true, "sha": repo.second_sha, "pristine": true}),
        "a checkout no process ran in yet"
    );
    let (status, reply) = agent.call("DELETE", "/v1/workspaces/w1", None);
    assert_eq!((status, reply), (200, json!({"deleted": true})));
    assert!(!path.exists());
    let (_, reply) = agent.get("/v1/workspaces/w1");
    assert_eq!(
        reply,
        json!({"workspace": "w1", "exists": false, "sha": null, "pristine": false})
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
    let agent = Agent::start_with(AgentOptions {
        prefixes: vec![temp_prefix(), "file:///nonexistent/".into()],
        ..Default::default()
    });
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
    // 2 s: time for the shell to write the pid even on a loaded machine.
    let reply = agent.exec("w", "sleep 30 & echo $! > child.pid; sleep 30", 2_000);
    assert_eq!(reply["timed_out"], true, "{reply}");
    assert_eq!(reply["exit_code"], Value::Null);
    assert_eq!(reply["signal"], 9);

    let pid = std::fs::read_to_string(path.join("child.pid")).expect("pid file");
    let pid: u32 = pid.trim().parse().expect("the shell wrote its child's pid");
    let stat = PathBuf::from(format!("/proc/{pid}/stat"));
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
    assert!(!alive(), "background sleep {pid} survived the timeout");
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
        token: Some("agent-secret".into()),
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

/// A new process is started only within its fence's window: past
/// `start_by_ms` the agent refuses (409) and starts nothing, while a known
/// id is still answered (a replay), whatever the time.
#[test]
fn a_start_past_its_window_is_refused_and_a_replay_is_not() {
    let agent = Agent::start();
    let path = agent.empty_workspace("w");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    let late = json!({
        "id": "late", "workspace": "w", "command": "echo ran > late.txt",
        "timeout_ms": 5_000, "start_by_ms": now_ms - 1_000,
    });
    let (status, reply) = agent.post("/v1/processes", late);
    assert_eq!(status, 409, "{reply}");
    assert_eq!(error_code(&reply), "start_window_passed");
    let (status, _) = agent.get("/v1/processes/late");
    assert_eq!(status, 404, "nothing was started");
    assert!(!path.join("late.txt").exists());

    let body = |start_by_ms: u64| {
        json!({"id": "timely", "workspace": "w", "command": "true", "timeout_ms": 5_000,
               "start_by_ms": start_by_ms})
    };
    let (status, reply) = agent.post("/v1/processes", body(now_ms + 60_000));
    assert_eq!(status, 201, "{reply}");
    let (status, reply) = agent.post("/v1/processes", body(now_ms - 60_000));
    assert_eq!(status, 200, "a replay of a known id: {reply}");
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

/// The pid a command writes to `file`, once it is there (within 10 s). The shell creates the
/// file before it writes the pid: wait for a number, not for the file (an empty pid would read
/// /proc//stat).
fn written_pid(file: &Path) -> Option<String> {
    let written = || {
        std::fs::read_to_string(file)
            .ok()
            .filter(|p| p.trim().parse::<u32>().is_ok())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while written().is_none() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    written()
}

/// Whether `pid` is gone (or a zombie) within `bound`.
fn gone_within(pid: &str, bound: Duration) -> bool {
    let deadline = Instant::now() + bound;
    while pid_alive(pid) && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(20));
    }
    !pid_alive(pid)
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

/// A crash of the agent (SIGKILL) takes its commands with it, as a container's crash does: a
/// command never finishes unobserved, to be run again by the next agent. Its detached process
/// outlives the request that started it, though (forked from a thread as long-lived as the agent).
#[test]
fn a_detached_process_dies_with_the_agent_and_not_with_its_request() {
    let mut agent = Agent::start();
    let path = agent.empty_workspace("w");
    let body = json!({
        "id": "check-1",
        "workspace": "w",
        "command": "echo $$ > shell.pid; sleep 30; echo end > end",
        "timeout_ms": 60_000,
    });
    let (status, reply) = agent.post("/v1/processes", body);
    assert_eq!(status, 201, "{reply}");
    let pid = written_pid(&path.join("shell.pid")).expect("the command wrote its shell's pid");
    let (status, seen) = agent.get("/v1/processes/check-1");
    assert_eq!(
        (status, &seen["status"]),
        (200, &json!("running")),
        "{seen}"
    );
    assert!(pid_alive(&pid), "running after its request ended");

    agent.child.kill().expect("SIGKILL the agent");
    agent.child.wait().expect("the agent is gone");
    assert!(
        gone_within(&pid, Duration::from_secs(5)),
        "the command's shell {} outlived the agent",
        pid.trim()
    );
    assert!(!path.join("end").exists(), "the command never finished");
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
    let pid = written_pid(&path.join("child.pid")).expect("the command wrote its child's pid");

    let (status, killed) = agent.post("/v1/processes/deploy-1/kill?wait_ms=10000", json!({}));
    assert_eq!(status, 200, "{killed}");
    assert_eq!(killed["status"], "killed", "{killed}");
    assert_eq!(killed["signal"], 9);
    // The orphaned background sleep went with the group.
    assert!(
        gone_within(&pid, Duration::from_secs(5)),
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

// -- isolation -----------------------------------------------------------------------------

/// Pids of live (not zombie) processes whose real uid is `uid`.
fn live_pids_of(uid: u32) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_owned())
                .unwrap_or_default()
        };
        let real_uid = field("Uid:")
            .split_whitespace()
            .next()
            .and_then(|u| u.parse().ok());
        if real_uid == Some(uid) && !field("State:").starts_with('Z') {
            pids.push(pid);
        }
    }
    pids
}

/// Waits (bounded by `SIGNAL_WAIT_MS`) until `ready` holds.
fn wait_until(what: &str, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_millis(SIGNAL_WAIT_MS);
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen within {SIGNAL_WAIT_MS} ms"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

/// Waits for `path` to exist.
fn wait_for_file(path: &Path) {
    wait_until(&format!("{} appearing", path.display()), || path.exists());
}

/// Waits for a command to have written a pid (a line ending in a newline) to `path`.
fn wait_for_pid(path: &Path) -> u32 {
    wait_until(&format!("a pid in {}", path.display()), || {
        std::fs::read_to_string(path).is_ok_and(|t| t.ends_with('\n'))
    });
    let text = std::fs::read_to_string(path).expect("pid file");
    text.trim().parse().expect("a pid")
}

fn owner(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").uid()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("metadata").mode() & 0o7777
}

/// `key=value` pairs of the output line that starts with `label`.
fn line_fields(output: &str, label: &str) -> std::collections::BTreeMap<String, String> {
    let line = output
        .lines()
        .find(|l| l.starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} line in {output}"));
    line[label.len()..]
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn each_workspace_runs_as_a_user_of_its_own() {
    if !isolation_available("each_workspace_runs_as_a_user_of_its_own") {
        return;
    }
    let agent = Agent::start();
    let a = agent.empty_workspace("a");
    let b = agent.empty_workspace("b");
    let (uid_a, uid_b) = (owner(&a), owner(&b));
    assert_ne!(uid_a, uid_b, "two workspaces, two users");
    for uid in [uid_a, uid_b] {
        assert!(
            (UID_BASE..UID_END).contains(&uid),
            "uid {uid} outside the range"
        );
    }
    assert_eq!(mode(&a), 0o700, "a workspace is its user's alone");
    assert_eq!(
        mode(&agent.root),
        0o711,
        "the root: traversable, not listable"
    );
    assert_eq!(mode(&agent.root.join("workspaces")), 0o711);
    let reply = agent.exec(
        "a",
        "id -u; id -g; id -G; umask; echo x > f; stat -c %a:%u f a.txt",
        10_000,
    );
    let expected = format!("{uid_a}\n{uid_a}\n{uid_a}\n0077\n600:{uid_a}\n600:{uid_a}\n");
    assert_eq!(reply["output"], expected.as_str(), "{reply}");

    // A re-checkout keeps the uid; a deleted workspace's uid is not the next one handed out.
    agent.empty_workspace("a");
    assert_eq!(owner(&a), uid_a);
    let (status, _) = agent.call("DELETE", "/v1/sandboxes/a", None);
    assert_eq!(status, 200);
    let c = agent.empty_workspace("c");
    assert!(
        ![uid_a, uid_b].contains(&owner(&c)),
        "uid {} reused at once",
        owner(&c)
    );
}

#[test]
fn a_workspace_cannot_read_another_or_the_agent_or_its_secrets() {
    if !isolation_available("a_workspace_cannot_read_another_or_the_agent_or_its_secrets") {
        return;
    }
    let agent = Agent::start();
    let token = agent.token.clone().expect("token");
    let victim = agent.empty_workspace("victim");
    agent.empty_workspace("thief");
    let marker = format!("sluice-marker-{}", std::process::id());
    // What `.dev.vars` is to `npm start`: a root-owned 0600 file the thief knows the path of.
    let secrets = TempDir::new("secrets");
    let dev_vars = secrets.0.join("dev.vars");
    std::fs::write(&dev_vars, format!("ADMIN_TOKEN={marker}\n")).expect("dev.vars");
    std::fs::set_permissions(&dev_vars, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    let body = json!({
        "id": "victim-waits", "workspace": "victim", "timeout_ms": 60_000,
        "env": {"SLUICE_SECRET": marker},
        "command": ": sluice-victim-waits; echo \"$SLUICE_SECRET\" > secret.txt; touch ready; \
                    i=0; while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
    });
    assert_eq!(agent.post("/v1/processes", body).0, 201);
    wait_for_file(&victim.join("ready"));
    let agent_pid = agent.child.id();
    let script = format!(
        r#"seen=0; readable=0; tried=0; denied=0; leaked=0
for d in /proc/[0-9]*; do
  case "$(tr '\0' ' ' < $d/cmdline 2>/dev/null)" in *sluice-victim-wait[s]*)
    seen=$((seen+1)); cat $d/environ > /dev/null 2>&1 && readable=$((readable+1));;
  esac
  tried=$((tried+1))
  if cat $d/environ > /dev/null 2>&1; then
    tr '\0' '\n' < $d/environ | grep -q 'sluice-mar[k]er-' && leaked=$((leaked+1))
  else denied=$((denied+1)); fi
done
echo "victim-process seen=$seen readable=$readable"
echo "all-environ tried=$tried denied=$denied leaked=$leaked"
try() {{ if "$@" > /dev/null 2>&1; then echo "$1-$2 read"; else echo "$1-$2 denied"; fi; }}
try cat {victim}/secret.txt
try ls {victim}
try ls {workspaces}
try cat /proc/{agent_pid}/environ
try cat {dev_vars}
echo "agent-cmdline $(od -An -v -tx1 /proc/{agent_pid}/cmdline | tr -d ' \n')"
"#,
        victim = victim.display(),
        workspaces = agent.root.join("workspaces").display(),
        dev_vars = dev_vars.display(),
    );
    let reply = agent.exec("thief", &script, 30_000);
    let out = reply["output"].as_str().expect("output");
    assert_eq!(reply["exit_code"], 0, "{out}");
    let victim_process = line_fields(out, "victim-process");
    assert!(
        victim_process["seen"] != "0",
        "the thief found the victim's process: {out}"
    );
    assert_eq!(victim_process["readable"], "0", "{out}");
    let all = line_fields(out, "all-environ");
    assert!(all["denied"].parse::<u32>().expect("count") > 0, "{out}");
    assert_eq!(all["leaked"], "0", "{out}");
    for attempt in [
        format!("cat-{}/secret.txt denied", victim.display()),
        format!("ls-{} denied", victim.display()),
        format!("ls-{} denied", agent.root.join("workspaces").display()),
        format!("cat-/proc/{agent_pid}/environ denied"),
        format!("cat-{} denied", dev_vars.display()),
    ] {
        assert!(
            out.lines().any(|l| l == attempt),
            "expected {attempt:?} in {out}"
        );
    }
    let hex = out
        .lines()
        .find_map(|l| l.strip_prefix("agent-cmdline "))
        .unwrap_or_else(|| panic!("no agent-cmdline line in {out}"));
    let cmdline = decode_hex(hex);
    assert!(
        cmdline.contains("sluice-sandbox-agent"),
        "the cmdline was read: {cmdline:?}"
    );
    assert!(!cmdline.contains(&token), "{cmdline:?}");
    assert!(!out.contains(&marker) && !out.contains(&token), "{out}");

    // Not vacuous: the marker really is in the victim's environment (root can read it) ...
    let victim_pids: Vec<u32> = live_pids_of(owner(&victim));
    assert!(
        victim_pids
            .iter()
            .any(|pid| std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| String::from_utf8_lossy(&env).contains(&marker))),
        "no victim process has the marker: {victim_pids:?}"
    );
    std::fs::write(victim.join("release"), "").expect("release");
    let (_, done) = agent.get("/v1/processes/victim-waits?wait_ms=20000");
    assert_eq!(done["status"], "exited", "{done}");
}

fn decode_hex(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .filter_map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok())
        .collect();
    String::from_utf8_lossy(&bytes).replace('\0', " ")
}

/// A command that leaves two processes outside its process group (one in a session of its
/// own, one double-forked) and writes their pids, then sleeps.
const ESCAPES: &str = "setsid sh -c 'echo $$ > setsid.pid; exec sleep 1000' > /dev/null 2>&1 & \
                       sh -c 'sleep 1000 > /dev/null 2>&1 & echo $! > dfork.pid' & \
                       sleep 1000";

/// Waits for `ESCAPES`' pid files in `dir` and checks both processes run as `uid`.
fn escaped_pids(dir: &Path, uid: u32) -> Vec<u32> {
    let pids: Vec<u32> = ["setsid.pid", "dfork.pid"]
        .iter()
        .map(|f| wait_for_pid(&dir.join(f)))
        .collect();
    let live = live_pids_of(uid);
    for pid in &pids {
        assert!(
            live.contains(pid),
            "escaped process {pid} is not running as {uid}: {live:?}"
        );
    }
    pids
}

#[test]
fn kill_discard_and_timeout_reach_processes_that_left_the_group() {
    if !isolation_available("kill_discard_and_timeout_reach_processes_that_left_the_group") {
        return;
    }
    let agent = Agent::start();
    let start = |id: &str, ws: &str| {
        let body = json!({"id": id, "workspace": ws, "command": ESCAPES, "timeout_ms": 60_000});
        assert_eq!(agent.post("/v1/processes", body).0, 201);
    };

    // A kill answered `killed` means nothing of the workspace's user runs any more.
    let dir = agent.empty_workspace("k");
    let uid = owner(&dir);
    start("k1", "k");
    escaped_pids(&dir, uid);
    let (_, killed) = agent.post("/v1/processes/k1/kill?wait_ms=10000", json!({}));
    assert_eq!(killed["status"], "killed", "{killed}");
    assert_eq!(
        live_pids_of(uid),
        Vec::<u32>::new(),
        "survivors of the kill"
    );

    // Discarding the sandbox, with another workspace's processes left alone.
    let dir = agent.empty_workspace("d");
    let other = agent.empty_workspace("other");
    let (uid, other_uid) = (owner(&dir), owner(&other));
    start("d1", "d");
    start("o1", "other");
    escaped_pids(&dir, uid);
    escaped_pids(&other, other_uid);
    let (status, reply) = agent.call("DELETE", "/v1/sandboxes/d", None);
    assert_eq!((status, &reply["killed"]), (200, &json!(1)), "{reply}");
    assert_eq!(
        live_pids_of(uid),
        Vec::<u32>::new(),
        "survivors of the discard"
    );
    assert!(
        !live_pids_of(other_uid).is_empty(),
        "the other sandbox was hit"
    );

    // A timeout.
    let dir = agent.empty_workspace("t");
    let uid = owner(&dir);
    let body = json!({"id": "t1", "workspace": "t", "command": ESCAPES, "timeout_ms": 2_000});
    assert_eq!(agent.post("/v1/processes", body).0, 201);
    escaped_pids(&dir, uid);
    let (_, done) = agent.get("/v1/processes/t1?wait_ms=20000");
    assert_eq!(done["status"], "timed_out", "{done}");
    assert_eq!(
        live_pids_of(uid),
        Vec::<u32>::new(),
        "survivors of the timeout"
    );

    // What an exec left running (its output elsewhere, so the exec returned) is killed
    // before the next checkout of its workspace.
    let (_, killed) = agent.post("/v1/processes/o1/kill?wait_ms=10000", json!({}));
    assert_eq!(killed["status"], "killed", "{killed}");
    let reply = agent.exec(
        "other",
        "rm -f *.pid; setsid sh -c 'echo $$ > setsid.pid; exec sleep 1000' > /dev/null 2>&1 &",
        10_000,
    );
    assert_eq!(reply["exit_code"], 0);
    let daemon = wait_for_pid(&other.join("setsid.pid"));
    assert_eq!(
        live_pids_of(other_uid),
        vec![daemon],
        "the daemon outlived its exec"
    );
    agent.empty_workspace("other");
    assert_eq!(
        live_pids_of(other_uid),
        Vec::<u32>::new(),
        "the checkout killed the daemon"
    );
}

#[test]
fn a_restarted_agent_keeps_its_workspaces_and_kills_what_the_last_one_left() {
    if !isolation_available(
        "a_restarted_agent_keeps_its_workspaces_and_kills_what_the_last_one_left",
    ) {
        return;
    }
    let state = TempDir::new("state");
    let root = state.0.join("root");
    let first = Agent::start_with(AgentOptions {
        root: Some(&root),
        ..Default::default()
    });
    let dir = first.empty_workspace("w");
    let uid = owner(&dir);
    let (_, before) = first.get("/v1/workspaces/w");
    first.exec(
        "w",
        "setsid sh -c 'echo $$ > daemon.pid; exec sleep 1000' > /dev/null 2>&1 &",
        10_000,
    );
    let daemon = wait_for_pid(&dir.join("daemon.pid"));
    drop(first); // SIGKILL: nothing of the agent cleans up
    assert_eq!(
        live_pids_of(uid),
        vec![daemon],
        "the daemon outlived its agent"
    );

    let second = Agent::start_with(AgentOptions {
        root: Some(&root),
        ..Default::default()
    });
    assert_eq!(
        live_pids_of(uid),
        Vec::<u32>::new(),
        "killed before the agent was ready"
    );
    let (_, mut after) = second.get("/v1/workspaces/w");
    // A new agent does not know what ran in it: never pristine to it.
    assert_eq!(after["pristine"], false, "{after}");
    after["pristine"] = before["pristine"].clone();
    assert_eq!(after, before, "the workspace is still there");
    assert_eq!(
        second.exec("w", "id -u", 10_000)["output"],
        format!("{uid}\n").as_str()
    );
}

#[test]
fn the_agent_refuses_to_start_without_isolation_or_a_token() {
    // Not root: refused, naming the flag that accepts it.
    if is_root() {
        let refused = Agent::refusal(AgentOptions {
            as_nobody: true,
            unisolated: false,
            ..Default::default()
        });
        assert!(!refused.status.success());
        assert!(
            refused.stderr.contains("--unisolated") && refused.stderr.contains("not root"),
            "{}",
            refused.stderr
        );
    }
    // No token.
    let refused = Agent::refusal(AgentOptions {
        token: None,
        ..Default::default()
    });
    assert!(!refused.status.success());
    assert!(
        refused.stderr.contains("--insecure-no-token"),
        "{}",
        refused.stderr
    );
    // --insecure-no-token off loopback.
    let refused = Agent::refusal(AgentOptions {
        token: None,
        extra_args: vec!["--insecure-no-token"],
        listen: "0.0.0.0:0",
        ..Default::default()
    });
    assert!(!refused.status.success());
    assert!(refused.stderr.contains("loopback"), "{}", refused.stderr);
    // The token on the command line, where every user can read it.
    let refused = Agent::refusal(AgentOptions {
        extra_args: vec!["--token", "t"],
        ..Default::default()
    });
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        refused.stderr.contains("SANDBOX_AGENT_TOKEN"),
        "{}",
        refused.stderr
    );
    // A prefix that does not pin a host.
    let refused = Agent::refusal(AgentOptions {
        prefixes: vec!["https://github.com".into()],
        ..Default::default()
    });
    assert!(refused.stderr.contains("whole host"), "{}", refused.stderr);
}

#[test]
fn without_a_token_only_loopback_hosts_are_answered() {
    let agent = Agent::start_with(AgentOptions {
        token: None,
        extra_args: vec!["--insecure-no-token"],
        ..Default::default()
    });
    let (status, reply) = agent.get("/v1/workspaces/w");
    assert_eq!(status, 200, "{reply}");
    // A page whose own name resolves to 127.0.0.1 (DNS rebinding) sends that name.
    let (status, reply) = agent.exchange(
        "GET",
        "/v1/workspaces/w",
        &[("Host", "evil.example:8791")],
        b"",
    );
    assert_eq!((status, error_code(&reply)), (403, "host_not_allowed"));
}

#[test]
fn an_unisolated_agent_runs_commands_as_its_own_user() {
    if !is_root() {
        eprintln!("an_unisolated_agent_runs_commands_as_its_own_user: skipped, needs root to become {NOBODY}");
        return;
    }
    let state = TempDir::new("nobody");
    let root = state.0.join("root");
    std::fs::create_dir(&root).expect("root");
    std::os::unix::fs::chown(&root, Some(NOBODY), Some(NOBODY)).expect("chown");
    let agent = Agent::start_with(AgentOptions {
        as_nobody: true,
        unisolated: true,
        root: Some(&root),
        ..Default::default()
    });
    let log = agent.wait_log("warning: --unisolated");
    assert!(log.contains("warning: --unisolated"), "it warns: {log}");
    let dir = agent.empty_workspace("w");
    assert_eq!(owner(&dir), NOBODY);
    assert_eq!(
        agent.exec("w", "id -u; cat a.txt", 10_000)["output"],
        format!("{NOBODY}\ntwo").as_str()
    );
    let (status, _) = agent.call("DELETE", "/v1/sandboxes/w", None);
    assert_eq!(status, 200);
    assert!(!dir.exists());
}

#[test]
fn requests_that_change_something_must_be_json() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    let bearer = format!("Bearer {}", agent.token.clone().expect("token"));
    let body = json!({"workspace": "w", "command": "touch ran", "timeout_ms": 10_000}).to_string();
    for (method, path, content_type) in [
        ("POST", "/v1/exec", None),
        ("POST", "/v1/exec", Some("text/plain")),
        (
            "POST",
            "/v1/exec",
            Some("application/x-www-form-urlencoded"),
        ),
        ("DELETE", "/v1/sandboxes/w", None),
        ("POST", "/v1/processes/p/kill", None),
    ] {
        let mut headers = vec![("Authorization", bearer.as_str())];
        headers.extend(content_type.map(|c| ("Content-Type", c)));
        let (status, reply) = agent.exchange(method, path, &headers, body.as_bytes());
        assert_eq!(
            (status, error_code(&reply)),
            (415, "unsupported_media_type"),
            "{method} {path} {content_type:?}"
        );
        assert!(reply["error"]["message"].is_string());
    }
    // Nothing ran, nothing was deleted: the workspace is there and has no `ran`.
    let check = agent.exec("w", "ls", 10_000);
    assert_eq!(check["output"], "a.txt\n");
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json; charset=utf-8"),
    ];
    let (status, _) = agent.exchange("POST", "/v1/exec", &headers, body.as_bytes());
    assert_eq!(status, 200, "a charset parameter is fine");
}

#[test]
fn clone_urls_outside_the_prefixes_are_refused() {
    let repo = make_repo();
    let allowed = Agent::start_with(AgentOptions {
        prefixes: vec![format!("{}/", repo.url)],
        ..Default::default()
    });
    // The repository is a directory: its URL plus '/' is a prefix of nothing but its insides,
    // so clone it by that same URL with a trailing slash.
    let (status, reply) = allowed.post(
        "/v1/workspaces",
        checkout_body("ok", &format!("{}/", repo.url), &repo.second_sha),
    );
    assert_eq!(status, 201, "{reply}");
    let other = make_repo();
    for (url, why) in [
        (other.url.clone(), "--git-url-prefix"),
        ("https://github.com/acme/app.git".into(), "--git-url-prefix"),
        (
            format!(
                "{}/../{}",
                repo.url,
                other.url.rsplit('/').next().unwrap_or_default()
            ),
            "'..'",
        ),
    ] {
        let (status, reply) = allowed.post(
            "/v1/workspaces",
            checkout_body("no", &url, &other.second_sha),
        );
        assert_eq!(
            (status, error_code(&reply)),
            (400, "invalid_request"),
            "{url}: {reply}"
        );
        let message = reply["error"]["message"].as_str().expect("message");
        assert!(message.contains(why), "{message}");
    }
    // By default only https://github.com/: a local path is refused before git runs.
    let default = Agent::start_with(AgentOptions {
        prefixes: Vec::new(),
        ..Default::default()
    });
    let (status, reply) = default.post(
        "/v1/workspaces",
        checkout_body("f", &repo.url, &repo.second_sha),
    );
    assert_eq!(
        (status, error_code(&reply)),
        (400, "invalid_request"),
        "{reply}"
    );
    assert!(
        reply["error"]["message"]
            .as_str()
            .expect("message")
            .contains("https://github.com/"),
        "{reply}"
    );
    let (_, probe) = default.get("/v1/workspaces/f");
    assert_eq!(probe["exists"], json!(false));
}

#[test]
fn the_checkout_token_is_in_no_command_line_and_no_file() {
    // A slow server: upload-pack's pack-objects waits for the test to look around.
    let signals = TempDir::new("signals");
    std::fs::set_permissions(&signals.0, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let hook = signals.0.join("hook.sh");
    let dir = signals.0.display();
    std::fs::write(&hook, format!(
        "#!/bin/sh\ntouch {dir}/started\ni=0\nwhile [ ! -e {dir}/release ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done\nexec \"$@\"\n"
    )).expect("hook");
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let gitconfig = format!("[uploadpack]\n\tpackObjectsHook = {}\n", hook.display());
    let agent = Arc::new(Agent::start_with(AgentOptions {
        gitconfig: &gitconfig,
        ..Default::default()
    }));
    let repo = make_repo();
    let token = "ghs_SuperSecretInstallationToken";
    // base64("x-access-token:ghs_SuperSecretInstallationToken"), the header form.
    let header_b64 = "eC1hY2Nlc3MtdG9rZW46Z2hzX1N1cGVyU2VjcmV0SW5zdGFsbGF0aW9uVG9rZW4=";
    let mut body = checkout_body("tok", &repo.url, &repo.second_sha);
    body["token"] = json!(token);
    let checkout = {
        let agent = agent.clone();
        thread::spawn(move || agent.post("/v1/workspaces", body))
    };
    wait_for_file(&signals.0.join("started"));
    // Mid-checkout: no process's argv has the token; git's own environment has it.
    let mut git_fetches = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !cmdline.contains(token) && !cmdline.contains(header_b64),
            "argv: {cmdline}"
        );
        if cmdline.starts_with("git fetch") {
            let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
            git_fetches.push((
                owner(&entry.path()),
                String::from_utf8_lossy(&environ).into_owned(),
            ));
        }
    }
    std::fs::write(signals.0.join("release"), "").expect("release");
    let (status, reply) = checkout.join().expect("checkout thread");
    assert_eq!(status, 201, "{reply}");
    assert!(!git_fetches.is_empty(), "no git fetch seen mid-checkout");
    for (uid, environ) in &git_fetches {
        assert!(
            environ.contains(&format!("=Authorization: Basic {header_b64}")),
            "{environ}"
        );
        if is_root() {
            assert!(
                (UID_BASE..UID_END).contains(uid),
                "git ran as {uid}, not the workspace's user"
            );
        }
    }
    let path = PathBuf::from(reply["path"].as_str().expect("path"));
    for file in files_under(&path) {
        let text = String::from_utf8_lossy(&std::fs::read(&file).expect("read")).into_owned();
        assert!(
            !text.contains(token) && !text.contains(header_b64),
            "token in {}",
            file.display()
        );
    }
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

/// A caller streams a running command's output with `since`: the chunks,
/// read in turn while it runs and once it ended, are the whole output.
#[test]
fn output_streams_in_chunks_with_since() {
    let agent = Agent::start();
    agent.empty_workspace("w");
    let body = json!({
        "id": "streamed",
        "workspace": "w",
        "command": "for i in 1 2 3 4 5; do echo line $i é; sleep 0.3; done",
        "timeout_ms": 30_000,
    });
    let (status, _) = agent.post("/v1/processes", body);
    assert_eq!(status, 201);
    let (mut at, mut joined, mut chunks) = (0u64, String::new(), 0);
    // Bounded: the command ends within ~2 s; each poll waits at most 1 s.
    for _ in 0..60 {
        let (status, s) = agent.get(&format!("/v1/processes/streamed?wait_ms=1000&since={at}"));
        assert_eq!(status, 200, "{s}");
        assert_eq!(s["output_from"], json!(at));
        let text = s["output"].as_str().expect("output");
        if !text.is_empty() {
            chunks += 1;
        }
        joined.push_str(text);
        at = s["output_next"].as_u64().expect("output_next");
        if s["status"] != "running" {
            break;
        }
    }
    let expected: String = (1..=5).map(|i| format!("line {i} é\n")).collect();
    assert_eq!(joined, expected);
    assert!(chunks >= 2, "it came in more than one chunk ({chunks})");
    assert_eq!(at, expected.len() as u64);
}

/// Writes an executable script.
fn write_script(path: &Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path.parent().unwrap()).expect("script dir");
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).expect("script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// A toolchain installed the way rustup installs one for root: `<home>/.cargo/bin/<tool>` and
/// `<home>/.rustup` (`RUSTUP_HOME`), in a home only its owner may enter (mode 700). The agent
/// lets a workspace's user run the tool, which finds its rustup home, and neither can be
/// written through; the host's home keeps its mode.
#[test]
fn a_toolchain_in_a_home_the_workspace_users_cannot_enter_runs_read_only() {
    use std::os::unix::fs::PermissionsExt;
    if !isolation_available("a_toolchain_in_a_home_the_workspace_users_cannot_enter_runs_read_only")
    {
        return;
    }
    let dir = TempDir::new("tool-home");
    let home = dir.0.join("root-home");
    write_script(
        &home.join(".cargo/bin/mytool"),
        "echo \"tool ran as $(id -u) with $(cat \"$RUSTUP_HOME/settings.toml\")\"",
    );
    std::fs::create_dir_all(home.join(".rustup")).unwrap();
    std::fs::write(home.join(".rustup/settings.toml"), "stable").unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let bin = home.join(".cargo/bin");
    let agent = Agent::start_with(AgentOptions {
        path: Some(format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display())),
        env: vec![("RUSTUP_HOME", home.join(".rustup").display().to_string())],
        ..Default::default()
    });
    agent.empty_workspace("w");
    let run = |command: &str| {
        let body = json!({"workspace": "w", "command": command, "timeout_ms": 10_000});
        let (status, reply) = agent.post("/v1/exec", body);
        assert_eq!(status, 200, "{reply}");
        reply
    };
    let ran = run("mytool");
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let out = ran["output"].as_str().unwrap();
    assert!(
        out.starts_with("tool ran as ") && out.ends_with(" with stable\n"),
        "{out}"
    );
    assert!(
        !out.starts_with("tool ran as 0 "),
        "the tool ran as root: {out}"
    );
    let write = run("touch \"$(dirname \"$(command -v mytool)\")/x\" \"$RUSTUP_HOME/x\"");
    assert_ne!(write["exit_code"], 0, "a toolchain was writable: {write}");
    assert!(!bin.join("x").exists() && !home.join(".rustup/x").exists());
    let mode = std::fs::metadata(&home).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the host's home changed mode");
    let log = agent.stderr.lock().unwrap().clone();
    assert!(log.contains("mounted read-only"), "{log}");
}

/// A second workspace at a commit this agent already fetched checks out from the kept pack:
/// with its origin gone it still checks out, read-only bytes the agent owns; another
/// repository's URL at the same commit is never served from it.
#[test]
fn a_commit_already_fetched_checks_out_again_from_its_kept_pack() {
    if !isolation_available("a_commit_already_fetched_checks_out_again_from_its_kept_pack") {
        return;
    }
    let agent = Agent::start();
    let repo = make_repo();
    let (status, reply) = agent.post(
        "/v1/workspaces",
        checkout_body("first", &repo.url, &repo.second_sha),
    );
    assert_eq!(status, 201, "{reply}");
    // The origin goes away: only the kept pack can serve the commit now.
    let origin = PathBuf::from(repo.url.trim_start_matches("file://"));
    let moved = origin.with_extension("gone");
    std::fs::rename(&origin, &moved).expect("move the origin away");
    let (status, reply) = agent.post(
        "/v1/workspaces",
        checkout_body("second", &repo.url, &repo.second_sha),
    );
    assert_eq!(status, 201, "{reply}");
    let path = PathBuf::from(reply["path"].as_str().expect("path"));
    assert_eq!(git(&path, &["rev-parse", "HEAD"]), repo.second_sha);
    assert_eq!(
        std::fs::read_to_string(path.join("a.txt")).expect("a"),
        "two"
    );
    // Shallow, with FETCH_HEAD, as a fetch at depth 1 makes it.
    assert_eq!(git(&path, &["rev-list", "--count", "HEAD"]), "1");
    assert_eq!(git(&path, &["rev-parse", "FETCH_HEAD"]), repo.second_sha);
    let owner = std::fs::metadata(&path).expect("workspace").uid();
    let packs = files_under(&path.join(".git/objects/pack"));
    assert!(!packs.is_empty());
    for f in &packs {
        let meta = std::fs::metadata(f).expect("pack file");
        assert_eq!(
            (meta.uid(), meta.mode() & 0o777),
            (0, 0o444),
            "{}",
            f.display()
        );
    }
    assert_ne!(owner, 0, "the workspace is its user's");
    // What was not fetched before is not there: the origin really is gone.
    let (status, reply) = agent.post(
        "/v1/workspaces",
        checkout_body("third", &repo.url, &repo.first_sha),
    );
    assert_eq!(
        (status, error_code(&reply)),
        (422, "checkout_failed"),
        "{reply}"
    );
    // Another repository at the same commit fetches from its own URL (gone too): refused.
    let other = format!("{}-other", repo.url);
    let (status, reply) = agent.post(
        "/v1/workspaces",
        checkout_body("fourth", &other, &repo.second_sha),
    );
    assert_eq!(
        (status, error_code(&reply)),
        (422, "checkout_failed"),
        "{reply}"
    );
    std::fs::rename(&moved, &origin).expect("move the origin back");
}

/// A response header's value (case-insensitive name).
fn header_of<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// `build`'s `dist/**` (regular files, and a link as a link) unpacks into `test` as `test`'s
/// user's files; a corrupted archive or a pattern leaving the workspace is refused.
#[test]
fn an_archive_of_one_workspace_unpacks_into_another() {
    let agent = Agent::start();
    agent.empty_workspace("build");
    let made = agent.exec(
        "build",
        "mkdir -p dist/sub && echo a > dist/a.txt && echo b > dist/sub/b.txt \
         && head -c 100000 /dev/urandom > dist/big.bin \
         && echo c > other.txt && ln -s /etc/hostname dist/link",
        10_000,
    );
    assert_eq!(made["exit_code"], 0, "{made}");
    let bearer = format!("Bearer {}", agent.token.clone().expect("token"));
    let json_headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let (status, head, archive) = agent.exchange_bytes(
        "POST",
        "/v1/workspaces/build/archive",
        &json_headers,
        br#"{"patterns": ["dist/**"]}"#,
    );
    assert_eq!(status, 200, "{head} {}", String::from_utf8_lossy(&archive));
    assert_eq!(
        header_of(&head, "X-Sluice-Archive-Files"),
        Some("4"),
        "{head}"
    );
    // Over tiny_http's 32 KiB chunking threshold, still with its length (R2 needs it).
    assert_eq!(
        header_of(&head, "Content-Length"),
        Some(archive.len().to_string().as_str())
    );
    assert!(header_of(&head, "Transfer-Encoding").is_none(), "{head}");
    let sha = header_of(&head, "X-Sluice-Archive-Sha256")
        .expect("sha")
        .to_owned();
    assert_eq!(sha.len(), 64);

    let test = agent.empty_workspace("test");
    let gzip_headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/gzip"),
    ];
    let wrong = format!("/v1/workspaces/test/archive?sha256={}", "0".repeat(64));
    let (status, _, body) = agent.exchange_bytes("PUT", &wrong, &gzip_headers, &archive);
    assert_eq!(status, 422, "{}", String::from_utf8_lossy(&body));
    assert!(
        !test.join("dist").exists(),
        "nothing unpacked from a corrupt archive"
    );

    let path = format!("/v1/workspaces/test/archive?sha256={sha}");
    let (status, _, body) = agent.exchange_bytes("PUT", &path, &gzip_headers, &archive);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let reply: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(reply["files"], 4, "{reply}");
    let read = |p: &str| agent.exec("test", &format!("cat {p}"), 10_000)["output"].clone();
    assert_eq!(read("dist/a.txt"), "a\n");
    assert_eq!(read("dist/sub/b.txt"), "b\n");
    assert!(!test.join("other.txt").exists());
    let link = std::fs::read_link(test.join("dist/link")).expect("a link is archived as a link");
    assert_eq!(link, PathBuf::from("/etc/hostname"));
    let owner = std::fs::metadata(&test).expect("workspace").uid();
    let file = std::fs::metadata(test.join("dist/a.txt")).expect("a").uid();
    assert_eq!(file, owner, "unpacked files are the workspace user's");

    let (status, reply) = agent.post(
        "/v1/workspaces/build/archive",
        json!({"patterns": ["../x"]}),
    );
    assert_eq!(
        (status, error_code(&reply)),
        (400, "invalid_request"),
        "{reply}"
    );
    let (status, reply) = agent.post("/v1/workspaces/nope/archive", json!({"patterns": ["x"]}));
    assert_eq!(
        (status, error_code(&reply)),
        (404, "workspace_not_found"),
        "{reply}"
    );
}

/// A digest of files' names and contents keys a cache: it changes with a file's content, and
/// a missing file is refused naming it.
#[test]
fn a_digest_changes_with_the_files_content_and_names_a_missing_one() {
    let agent = Agent::start();
    agent.empty_workspace("dig");
    agent.exec("dig", "echo one > lock.json", 10_000);
    let digest = |files: Value| agent.post("/v1/workspaces/dig/digest", json!({ "files": files }));
    let (status, first) = digest(json!(["lock.json"]));
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["sha256"].as_str().map(str::len), Some(64));
    assert_eq!(digest(json!(["lock.json"])).1, first, "stable");
    agent.exec("dig", "echo two > lock.json", 10_000);
    assert_ne!(digest(json!(["lock.json"])).1, first);
    let (status, reply) = digest(json!(["lock.json", "nope.lock"]));
    assert_eq!(
        (status, error_code(&reply)),
        (422, "key_file_unreadable"),
        "{reply}"
    );
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("nope.lock"),
        "{reply}"
    );
    let (status, _) = digest(json!(["../etc/passwd"]));
    assert_eq!(status, 400);
}

/// Takes a snapshot of `workspace` (`since` as `{agent, ms}`): status, headers, bytes.
fn snapshot_of(agent: &Agent, workspace: &str, since: Option<(&str, u64)>) -> (String, Vec<u8>) {
    let bearer = format!("Bearer {}", agent.token.clone().expect("token"));
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let body = match since {
        Some((id, ms)) => json!({"snapshot": {"since": {"agent": id, "ms": ms}}}),
        None => json!({"snapshot": {}}),
    };
    let path = format!("/v1/workspaces/{workspace}/archive");
    let (status, head, bytes) =
        agent.exchange_bytes("POST", &path, &headers, body.to_string().as_bytes());
    assert_eq!(status, 200, "{head} {}", String::from_utf8_lossy(&bytes));
    (head, bytes)
}

/// The member names of a gzipped tar, as `tar -tz` lists them.
fn members_of(archive: &[u8]) -> Vec<String> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("tar")
        .args(["-tzf", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("tar");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(archive)
        .expect("write");
    let out = child.wait_with_output().expect("tar -t");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end_matches('/').to_owned())
        .collect()
}

/// Two steps' snapshots of one workspace, the first against the checkout's tree and the second
/// holding only what changed (a file given a 1985 mtime included, a directory moved whole, an
/// untouched tree not), unpack over a fresh checkout of the same commit in another workspace
/// and, pruned, leave exactly the first workspace's tree: moved, deleted and removed-from-the-
/// checkout entries included, `.git` too, and no manifest behind.
#[test]
fn snapshots_of_two_steps_restore_the_tree_the_second_left() {
    let agent = Agent::start();
    let repo = make_repo();
    for (ws, baseline) in [("first", true), ("second", false)] {
        let mut body = checkout_body(ws, &repo.url, &repo.second_sha);
        body["baseline"] = json!(baseline);
        let (status, reply) = agent.post("/v1/workspaces", body);
        assert_eq!(status, 201, "{reply}");
    }
    let (_, state) = agent.get("/v1/workspaces/first");
    assert_eq!(state["pristine"], true, "{state}");
    let step = json!({"id": "step-1", "workspace": "first", "timeout_ms": 10_000,
        "command": "mkdir -p deep/a/b stay build empty && echo f > deep/a/b/f \
                    && echo s > stay/s.txt && echo one > build/out && echo gone > gone.txt \
                    && rm a.txt && ln -s stay/s.txt link"});
    let (status, started) = agent.post("/v1/processes", step);
    assert_eq!(status, 201, "{started}");
    let (_, ended) = agent.get("/v1/processes/step-1?wait_ms=10000");
    assert_eq!(ended["exit_code"], 0, "{ended}");
    let id = started["agent"]
        .as_str()
        .expect("a process names its agent")
        .to_owned();
    let (_, state) = agent.get("/v1/workspaces/first");
    assert_eq!(
        (state["last_process"].clone(), state["pristine"].clone()),
        (json!("step-1"), json!(false))
    );

    // The job's first snapshot: what changed since this agent's checkout, set apart from the
    // step by more than the agent's 100 ms slack.
    std::thread::sleep(Duration::from_millis(300));
    let (head, one) = snapshot_since_checkout(&agent, "first");
    assert_eq!(
        header_of(&head, "X-Sluice-Snapshot-Full"),
        Some("false"),
        "{head}"
    );
    assert_eq!(header_of(&head, "X-Sluice-Agent"), Some(id.as_str()));
    let taken: u64 = header_of(&head, "X-Sluice-Snapshot-Taken-Ms")
        .and_then(|v| v.parse().ok())
        .expect("taken");
    let first_members = members_of(&one);
    for m in ["deep/a/b/f", "stay/s.txt", "link"] {
        assert!(
            first_members.contains(&m.to_owned()),
            "{m}: {first_members:?}"
        );
    }
    assert!(!agent.exec("first", "ls -a", 10_000)["output"]
        .as_str()
        .unwrap_or_default()
        .contains(".sluice-snapshot-paths"));

    // Step 2 changes a little: a directory moved whole, a file stamped 1985.
    std::thread::sleep(Duration::from_millis(300));
    let changed = agent.exec(
        "first",
        "echo two >> build/out && mv build/out build/moved && mv deep moved && rm gone.txt \
         && rmdir empty && echo old > old.txt && touch -d 1985-01-01 old.txt",
        10_000,
    );
    assert_eq!(changed["exit_code"], 0, "{changed}");
    let (head, two) = snapshot_of(&agent, "first", Some((&id, taken)));
    assert_eq!(
        header_of(&head, "X-Sluice-Snapshot-Full"),
        Some("false"),
        "{head}"
    );
    let second_members = members_of(&two);
    for m in ["build/moved", "old.txt", "moved/a/b/f"] {
        assert!(
            second_members.contains(&m.to_owned()),
            "{m}: {second_members:?}"
        );
    }
    for untouched in ["stay/s.txt", "link"] {
        assert!(
            !second_members.contains(&untouched.to_owned()),
            "{untouched}, untouched, is not taken again: {second_members:?}"
        );
    }
    // Another agent's time, or one this agent holds no tree of, is not trusted: all of it.
    for since in [("another-agent", taken), (id.as_str(), taken - 1)] {
        let (head, _) = snapshot_of(&agent, "first", Some(since));
        assert_eq!(
            header_of(&head, "X-Sluice-Snapshot-Full"),
            Some("true"),
            "{head}"
        );
    }
    restore_chain(&agent, "second", &[&one, &two], "step-2");
    assert_restored_as(&agent, "second", "first");
    refused_over_a_full_checkout(&agent, &repo);
}

/// A chain taken over a checkout of another shape (full history, no `.git/shallow`: the
/// agent's fallback fetch) is refused over a shallow one rather than left without the objects
/// its tree's history needs, and no step is named as having left it.
fn refused_over_a_full_checkout(agent: &Agent, repo: &Repo) {
    for ws in ["full", "third"] {
        let mut body = checkout_body(ws, &repo.url, &repo.second_sha);
        body["baseline"] = json!(true);
        assert_eq!(agent.post("/v1/workspaces", body).0, 201);
    }
    let unshallowed = agent.exec("full", "rm .git/shallow", 10_000);
    assert_eq!(unshallowed["exit_code"], 0, "{unshallowed}");
    let (_, taken) = snapshot_since_checkout(agent, "full");
    let bearer = format!("Bearer {}", agent.token.clone().expect("token"));
    let gzip = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/gzip"),
    ];
    let path = format!(
        "/v1/workspaces/third/archive?sha256={}&prune=true&after=step-x",
        sha256_hex(&taken)
    );
    let (status, _, body) = agent.exchange_bytes("PUT", &path, &gzip, &taken);
    let reply: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(
        (status, error_code(&reply)),
        (422, "snapshot_base_differs"),
        "{reply}"
    );
    let (_, state) = agent.get("/v1/workspaces/third");
    assert_ne!(
        state["last_process"], "step-x",
        "a refused tree is named by no step: {state}"
    );
}

/// `restored` holds `original`'s tree (but git's own records of its checkout, which carry its
/// time), and names `step-2` as the process that left it.
fn assert_restored_as(agent: &Agent, restored: &str, original: &str) {
    let tree = |ws: &str| {
        let listing = "find . -not -path './.git/index' -printf '%y %p \\n' | sort \
                       && find . -type f -not -path './.git/index' -not -path './.git/logs/*' \
                          -not -name FETCH_HEAD -exec sha256sum {} + | sort \
                       && readlink link && git status --porcelain";
        agent.exec(ws, listing, 10_000)["output"].clone()
    };
    let (_, state) = agent.get(&format!("/v1/workspaces/{restored}"));
    assert_eq!(
        state["last_process"], "step-2",
        "the tree step-2 left: {state}"
    );
    let seen = tree(restored);
    assert_eq!(seen, tree(original));
    for absent in [
        "gone.txt",
        "a.txt",
        "build/out",
        "empty",
        "deep",
        ".sluice-snapshot-paths",
    ] {
        let text = seen.as_str().unwrap_or_default();
        assert!(!text.contains(&format!("./{absent} ")), "{absent}: {seen}");
    }
    let read = |p: &str| agent.exec(restored, &format!("cat {p}"), 10_000)["output"].clone();
    assert_eq!(read("build/moved"), "one\ntwo\n");
    assert_eq!(read("moved/a/b/f"), "f\n");
}

fn snapshot_since_checkout(agent: &Agent, workspace: &str) -> (String, Vec<u8>) {
    let bearer = format!("Bearer {}", agent.token.clone().expect("token"));
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let path = format!("/v1/workspaces/{workspace}/archive");
    let body = br#"{"snapshot": {"since_checkout": true}}"#;
    let (status, head, bytes) = agent.exchange_bytes("POST", &path, &headers, body);
    assert_eq!(status, 200, "{head}");
    (head, bytes)
}

/// Unpacks `chain` in order into `workspace`, the last pruning and naming `after`.
fn restore_chain(agent: &Agent, workspace: &str, chain: &[&Vec<u8>], after: &str) {
    let bearer = format!("Bearer {}", agent.token.clone().expect("token"));
    let gzip = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/gzip"),
    ];
    for (i, archive) in chain.iter().enumerate() {
        let sha = sha256_hex(archive);
        let last = i + 1 == chain.len();
        let path =
            format!("/v1/workspaces/{workspace}/archive?sha256={sha}&prune={last}&after={after}");
        let (status, _, body) = agent.exchange_bytes("PUT", &path, &gzip, archive);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Schedules of the snapshot model below, and random operations per step.
const SNAPSHOT_SCHEDULES: u64 = 6;
const SNAPSHOT_OPS_PER_STEP: usize = 6;
const SNAPSHOT_STEPS: usize = 3;
/// Between a step and its snapshot: more than the agent's 100 ms ctime slack.
const STEP_TO_SNAPSHOT_MS: u64 = 150;

/// One random change to a workspace, as a shell command on a small namespace of directories
/// and files, so that moves, deletions and re-creations meet: what steps do to a tree.
fn random_op(next: &mut dyn FnMut(u64) -> u64) -> String {
    let d = |n: u64| format!("d{n}");
    let f = |n: u64| format!("f{n}");
    let (a, b, c) = (next(3), next(3), next(4));
    match next(9) {
        0 => format!(
            "mkdir -p {}/{} && echo {c} > {}/{}/{}",
            d(a),
            d(b),
            d(a),
            d(b),
            f(c)
        ),
        1 => format!("echo more-{c} >> {}", f(c)),
        2 => format!("rm -rf {}", d(a)),
        3 if a == b => "true".to_owned(),
        3 => format!(
            "if [ -e {} ]; then rm -rf {} && mv {} {}; fi",
            d(a),
            d(b),
            d(a),
            d(b)
        ),
        4 => format!(
            "if [ -f {} ] && [ -d {} ]; then mv {} {}/{}-moved; fi",
            f(c),
            d(a),
            f(c),
            d(a),
            f(c)
        ),
        5 => format!("ln -sfn {} l{a}", f(c)),
        6 => format!("if [ -f {} ]; then truncate -s 0 {}; fi", f(c), f(c)),
        7 => format!("rm -f {} a.txt", f(c)),
        _ => format!(
            "mkdir -p {} && echo n > {}/new-{c} && chmod 600 {}/new-{c}",
            d(a),
            d(a),
            d(a)
        ),
    }
}

/// Whatever a job's steps do to its tree (random makes, appends, deletions, directory and file
/// moves, links, truncations, removals of checked-out files), the snapshot after each step,
/// unpacked in order over a fresh checkout and pruned, rebuilds exactly the tree the last step
/// left: a real file system's times and inodes, not a model's.
#[test]
fn seeded_steps_restore_exactly_the_tree_the_last_step_left() {
    let agent = Agent::start();
    let repo = make_repo();
    let mut seed: u64 = 0x736e_6170_7321;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for schedule in 0..SNAPSHOT_SCHEDULES {
        let (ws, copy) = (format!("m{schedule}"), format!("r{schedule}"));
        for (w, baseline) in [(&ws, true), (&copy, false)] {
            let mut body = checkout_body(w, &repo.url, &repo.second_sha);
            body["baseline"] = json!(baseline);
            assert_eq!(agent.post("/v1/workspaces", body).0, 201);
        }
        let mut chain = Vec::new();
        let mut since: Option<u64> = None;
        let id = agent_id_of(&agent, &ws);
        for step in 0..SNAPSHOT_STEPS {
            let ops: Vec<String> = (0..SNAPSHOT_OPS_PER_STEP)
                .map(|_| random_op(&mut next))
                .collect();
            let ran = agent.exec(&ws, &ops.join("; "), 10_000);
            assert_eq!(
                ran["exit_code"], 0,
                "schedule {schedule} step {step}: {ran}"
            );
            // Past the agent's 100 ms slack: what the step did is older than the snapshot's
            // moment, so only the baseline's paths, inodes and times can tell it changed.
            std::thread::sleep(Duration::from_millis(STEP_TO_SNAPSHOT_MS));
            let (head, archive) = match since {
                None => snapshot_since_checkout(&agent, &ws),
                Some(ms) => snapshot_of(&agent, &ws, Some((&id, ms))),
            };
            since = header_of(&head, "X-Sluice-Snapshot-Taken-Ms").and_then(|v| v.parse().ok());
            chain.push(archive);
        }
        let refs: Vec<&Vec<u8>> = chain.iter().collect();
        restore_chain(&agent, &copy, &refs, "step-2");
        assert_eq!(
            tree_of(&agent, &copy),
            tree_of(&agent, &ws),
            "schedule {schedule}"
        );
    }
}

/// The agent's id, as a process started in `workspace` reports it.
fn agent_id_of(agent: &Agent, workspace: &str) -> String {
    let id = format!("probe-{workspace}");
    let body = json!({"id": id, "workspace": workspace, "timeout_ms": 10_000, "command": "true"});
    let (status, started) = agent.post("/v1/processes", body);
    assert_eq!(status, 201, "{started}");
    started["agent"].as_str().expect("agent").to_owned()
}

/// A workspace's tree: every entry's type and path, every file's content hash, every link's
/// target (git's own records of its checkout, which carry its time, aside).
fn tree_of(agent: &Agent, workspace: &str) -> Value {
    let listing = "find . -not -path './.git/index' -printf '%y %p %l\\n' | sort \
                   && find . -type f -not -path './.git/index' -not -path './.git/logs/*' \
                      -not -name FETCH_HEAD -exec sha256sum {} + | sort";
    let seen = agent.exec(workspace, listing, 10_000);
    assert_eq!(seen["exit_code"], 0, "{seen}");
    seen["output"].clone()
}
