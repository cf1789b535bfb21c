//! The sandbox agent's HTTP API, written once: the request and response
//! bodies, the paths, the error codes, and the limits both sides must
//! agree on. The agent (`crates/sandbox-agent`) serves it; the Worker's
//! client (`src/sandbox/agent.rs`) calls it. Serde types only, so it builds
//! for the Worker's wasm32 target as well as natively.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Longest workspace or process id. Ids are caller-chosen keys (run
/// instance, step, generation); 100 characters fits them and keeps paths
/// far below filesystem name limits (255).
pub const ID_CHARS_MAX: usize = 100;
/// Largest `timeout_ms` of a command: one hour, the longest CI step Sluice
/// supports (anything longer should be split into steps).
pub const TIMEOUT_MS_MAX: u64 = 60 * 60 * 1000;
/// Longest long-poll on `GET /v1/processes/{id}?wait_ms=N`: under common
/// 30 s proxy and subrequest idle timeouts, so the answer always arrives.
pub const WAIT_MS_MAX: u64 = 25_000;
/// Largest request body: requests carry a command line and an env map,
/// never file contents.
pub const REQUEST_BYTES_MAX: usize = 1024 * 1024;
/// Most values in a request's `redact` list: a run's secrets plus its
/// tokens; a longer list is a bug in the caller, not a bigger run.
pub const REDACT_VALUES_MAX: usize = 64;

/// Names the sandbox a request is for, for a transport that reaches one
/// agent per sandbox (the Worker's Containers transport); the agent
/// ignores it.
pub const SANDBOX_ID_HEADER: &str = "X-Sluice-Sandbox";

/// The agent's environment variable naming the clone URL prefixes it
/// accepts (whitespace- or comma-separated; `--git-url-prefix` on its
/// command line): the Worker sets it at container start from
/// `GITHUB_GIT_URL`.
pub const GIT_URL_PREFIXES_ENV: &str = "SANDBOX_GIT_URL_PREFIXES";

pub const PATH_WORKSPACES: &str = "/v1/workspaces";
pub const PATH_PROCESSES: &str = "/v1/processes";

/// `/v1/workspaces/{id}`.
pub fn workspace_path(id: &str) -> String {
    format!("{PATH_WORKSPACES}/{id}")
}

/// `/v1/processes/{id}?wait_ms={wait_ms}`.
pub fn process_path(id: &str, wait_ms: u64) -> String {
    format!("{PATH_PROCESSES}/{id}?wait_ms={wait_ms}")
}

/// `GET /v1/processes/{id}?wait_ms=N&since=B`: as `process_path`, with
/// `output` holding only the output from byte `since` on (`output_from`,
/// `output_next` say where it starts and ends), so a caller streams a
/// running command's log in chunks.
pub fn process_since_path(id: &str, wait_ms: u64, since: u64) -> String {
    format!("{PATH_PROCESSES}/{id}?wait_ms={wait_ms}&since={since}")
}

/// `DELETE /v1/sandboxes/{id}`: the run that owned sandbox `id` has ended.
/// The agent kills what still runs in its workspace and deletes it; the
/// Worker's container object then destroys the container.
pub fn sandbox_path(id: &str) -> String {
    format!("/v1/sandboxes/{id}")
}

/// `/v1/processes/{id}/kill?wait_ms={wait_ms}`. The agent kills the
/// process's group and, when it isolates workspaces, everything running as
/// the workspace's user (so also what left the group, and any other process
/// of that workspace); a timeout ends a process the same way.
pub fn kill_path(id: &str, wait_ms: u64) -> String {
    format!("{PATH_PROCESSES}/{id}/kill?wait_ms={wait_ms}")
}

/// Ids become directory names and registry keys: 1..=ID_CHARS_MAX of
/// `[A-Za-z0-9_-]`.
pub fn valid_id(id: &str) -> bool {
    (1..=ID_CHARS_MAX).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `POST /v1/workspaces`: a fresh checkout of `sha`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckoutRequest {
    pub workspace: String,
    pub repo_url: String,
    pub sha: String,
    /// Used for this checkout only, never written into it.
    #[serde(default)]
    pub token: Option<String>,
    /// Keep the checked-out tree as the baseline of the workspace's first
    /// snapshot (`SnapshotRequest::since_checkout`): a job of steps.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub baseline: bool,
}

/// `/v1/workspaces/{id}/archive`: `POST` an [`ArchiveRequest`] for the
/// matching files (or a snapshot) as a gzipped tar; `PUT` one
/// (`?sha256=<hex>`, `Content-Type: application/gzip`) to unpack it into
/// the workspace, adding `&prune=true&after=<process id>` after a job's
/// last snapshot to remove what its manifest does not list and record the
/// tree as the one that process left (`WorkspaceState::last_process`).
pub fn archive_path(workspace: &str) -> String {
    format!("{PATH_WORKSPACES}/{workspace}/archive")
}

/// How many files an archive holds (a response header).
pub const ARCHIVE_FILES_HEADER: &str = "X-Sluice-Archive-Files";
/// The SHA-256 (hex) of the archive's bytes (a response header).
pub const ARCHIVE_SHA256_HEADER: &str = "X-Sluice-Archive-Sha256";

/// Globs one archive may name: a job's `artifacts` list is a handful.
pub const ARCHIVE_PATTERNS_MAX: usize = 32;

/// `POST /v1/workspaces/{id}/archive`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArchiveRequest {
    /// Workspace-relative globs (`dist/**`), matched against the paths
    /// of regular files. Empty for a snapshot.
    #[serde(default)]
    pub patterns: Vec<String>,
    /// Instead of matching files: the whole workspace (`.git` too) as a
    /// snapshot between two steps of a job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRequest>,
}

/// A snapshot of a workspace: every entry changed at or after `since`
/// (all of them without it, or when `since` is another agent's time),
/// and the list of every path the workspace holds, so that unpacking the
/// snapshots of a job in order and then pruning (`PUT ...&prune=true`)
/// leaves exactly the tree the last one saw.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<AgentTime>,
    /// Without `since`: what changed since the workspace's checkout, when
    /// this agent made it (a job's first snapshot: over a fresh checkout
    /// of the same commit, the rest is the checkout's own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub since_checkout: bool,
}

/// A moment by one agent's clock: `agent` is the id the agent took when
/// it started (`ProcessState::agent`, `SNAPSHOT_AGENT_HEADER`), so a time
/// is never compared with another machine's files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTime {
    pub agent: String,
    /// Milliseconds since the Unix epoch, by that agent's clock.
    pub ms: u64,
}

/// A snapshot's answer: the id of the agent that took it.
pub const SNAPSHOT_AGENT_HEADER: &str = "X-Sluice-Agent";
/// A snapshot's answer: when its walk of the workspace began (ms, by the
/// agent's clock): the `since` of the next snapshot of the same tree.
pub const SNAPSHOT_TAKEN_HEADER: &str = "X-Sluice-Snapshot-Taken-Ms";
/// A snapshot's answer: `true` when it holds every entry (no `since`, or
/// another agent's), `false` when only those changed since.
pub const SNAPSHOT_FULL_HEADER: &str = "X-Sluice-Snapshot-Full";
/// The member of a snapshot that lists every path of the workspace
/// (NUL-separated); pruning reads it, then removes it.
pub const SNAPSHOT_MANIFEST: &str = ".sluice-snapshot-paths";

/// `POST /v1/workspaces/{id}/digest`: the SHA-256 of files' names and
/// contents, read as the workspace's user (a dependency cache's key).
pub fn digest_path(workspace: &str) -> String {
    format!("{PATH_WORKSPACES}/{workspace}/digest")
}

/// Files one digest may name.
pub const DIGEST_FILES_MAX: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DigestRequest {
    /// Workspace-relative paths (`valid_archive_pattern`, no wildcard).
    pub files: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DigestAnswer {
    pub sha256: String,
}

/// A workspace-relative path of a file (a cache's key file or path): a
/// valid pattern with no wildcard.
pub fn valid_workspace_path(p: &str) -> bool {
    valid_archive_pattern(p) && !p.contains(['*', '?', '[', '{'])
}

/// A workspace-relative glob: not empty, at most 256 bytes, not
/// absolute, no `..` component, no backslash or control character.
pub fn valid_archive_pattern(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= 256
        && !p.starts_with('/')
        && !p.split('/').any(|c| c == "..")
        && !p.chars().any(|c| c == '\\' || c.is_control())
}

/// `GET /v1/workspaces/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkspaceState {
    pub workspace: String,
    pub exists: bool,
    /// The checked-out commit, when it exists.
    pub sha: Option<String>,
    /// The id of the last process started in it since its checkout (or
    /// the one a restore named, `?after=`), as this agent knows: a job's
    /// step runs in place only after the step before it
    /// (`runs::kit::command::Continuation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_process: Option<String>,
    /// A checkout by this agent that no process has run in yet (None: an
    /// agent that does not say). An agent that restarted since does not
    /// know, and says false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pristine: Option<bool>,
}

/// `POST /v1/processes`: starts a detached process, or answers the one
/// already known by `id` (201 new, 200 known).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessRequest {
    /// Caller-chosen idempotency key.
    pub id: String,
    pub workspace: String,
    pub command: String,
    pub timeout_ms: u64,
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// Values scrubbed from the output as it is captured, before the agent
    /// keeps or truncates any of it (sluice-redact's forms).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redact: Vec<String>,
    /// The fence's start window (ms since the Unix epoch): the agent refuses
    /// to start a new process past it (409 `START_WINDOW_PASSED`), so a
    /// caller that stalled after its fence cannot start a process once a
    /// taker may have judged it never started. A known id is answered
    /// whatever the time (a replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_by_ms: Option<u64>,
}

/// The agent's error code for a start that arrived past its
/// `start_by_ms` (409): nothing was started; fence again and retry.
pub const START_WINDOW_PASSED: &str = "start_window_passed";

/// A detached process's state, as the agent names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessStatus {
    Running,
    Exited,
    /// Killed by the agent at its timeout.
    TimedOut,
    /// Killed on request (`POST /v1/processes/{id}/kill`).
    Killed,
}

/// A process as the agent reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessState {
    pub id: String,
    pub status: ProcessStatus,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The captured output (head and tail when truncated).
    pub output: String,
    pub output_bytes: u64,
    pub output_truncated: bool,
    #[serde(default)]
    pub started_ms: Option<u64>,
    pub duration_ms: Option<i64>,
    /// The id the agent took when it started: `started_ms` is by its
    /// clock (a snapshot's `since`, `AgentTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// With `since`: the output's byte offset where `output` starts (later
    /// than `since` when the agent no longer holds those bytes: then
    /// `output` begins with a line saying how many were omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_from: Option<u64>,
    /// With `since`: the offset to ask from next (never inside a UTF-8
    /// character).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_next: Option<u64>,
}

impl ProcessState {
    pub fn finished(&self) -> bool {
        self.status != ProcessStatus::Running
    }
}

/// Every error answer: `{"error": {"code", "message"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
}

/// The agent's error code for a process id it does not know (404).
pub const PROCESS_NOT_FOUND: &str = "process_not_found";
