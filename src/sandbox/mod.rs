//! The `Sandbox` interface runs use to check out code and run commands,
//! and its one implementation: the sandbox agent's HTTP API
//! (`crates/sandbox-agent`), reached on localhost in development and
//! through a Cloudflare Container in production.
//!
//! Every call names the sandbox it is for (the container id: a run
//! instance's own id), so a run can also observe or kill a process another
//! instance left in its own sandbox (a stalled holder's deploy).

pub mod agent;
pub mod image;
pub mod lifecycle;
pub mod metered;

use std::collections::BTreeMap;
use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::secret::Secret;

#[derive(Debug, Clone, PartialEq)]
pub struct SandboxError {
    /// The agent's error code (`checkout_failed`, `process_not_found`, ...)
    /// or `unreachable` when no answer came back.
    pub code: String,
    pub message: String,
    pub status: Option<u16>,
}

impl SandboxError {
    /// Unreachable agents, busy agents and 5xx may recover; a checkout that
    /// failed with 422 may too (a flaky network), bad requests never do.
    pub fn retryable(&self) -> bool {
        match self.status {
            None => true,
            Some(s) => s >= 500 || s == 429 || s == 409 || s == 422,
        }
    }
}

impl fmt::Display for SandboxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sandbox {}: {}", self.code, self.message)
    }
}

pub struct Checkout<'a> {
    pub workspace: &'a str,
    pub repo_url: &'a str,
    pub sha: &'a str,
    pub token: Option<&'a Secret>,
    /// Keep the tree as the first snapshot's baseline (a job of steps).
    pub baseline: bool,
}

pub use sluice_sandbox_protocol::{AgentTime, ProcessState, ProcessStatus, WorkspaceState};

/// A process to start: borrowed from the run, sent as the protocol's
/// `ProcessRequest`.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessSpec<'a> {
    /// Caller-chosen idempotency key: starting an existing id returns it.
    pub id: &'a str,
    pub workspace: &'a str,
    pub command: &'a str,
    pub timeout_ms: i64,
    pub env: BTreeMap<String, String>,
    /// Values the sandbox scrubs from the output before it keeps any.
    pub redact: Vec<&'a str>,
    /// The fence's start window (ms since the epoch): the sandbox refuses
    /// to start a new process past it (409 `START_WINDOW_PASSED`, the protocol's).
    pub start_by_ms: Option<i64>,
}

#[async_trait(?Send)]
pub trait Sandbox {
    async fn checkout(&self, sandbox: &str, req: &Checkout<'_>) -> Result<(), SandboxError>;
    async fn workspace(
        &self,
        sandbox: &str,
        workspace: &str,
    ) -> Result<WorkspaceState, SandboxError>;
    /// Starts a detached process, or returns the one already known by id.
    async fn start(
        &self,
        sandbox: &str,
        spec: &ProcessSpec<'_>,
    ) -> Result<ProcessState, SandboxError>;
    /// The process's state, long-polling up to `wait_ms` for it to finish.
    /// None when the agent does not know the id (a replaced container).
    /// A process's state, long-polling up to `wait_ms` for its end. With
    /// `since`, `output` holds only the output from that byte on
    /// (`output_next` is where to ask from next): how a running command's
    /// log is streamed.
    async fn process(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
        since: Option<u64>,
    ) -> Result<Option<ProcessState>, SandboxError>;
    /// Kills the process and everything in its process group, then waits up
    /// to `wait_ms` for it to exit. The state says whether it did (`finished`);
    /// None when the agent does not know the id (it is not running there).
    async fn kill(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
    ) -> Result<Option<ProcessState>, SandboxError>;
    /// The run that owned the sandbox has ended: nothing of it stays (its
    /// workspace is deleted; a container is destroyed).
    async fn discard(&self, sandbox: &str) -> Result<(), SandboxError>;
    /// The SHA-256 (hex) of `files`' names and contents in the workspace,
    /// read as its user: what keys a dependency cache.
    async fn digest(
        &self,
        sandbox: &str,
        workspace: &str,
        files: &[String],
    ) -> Result<String, SandboxError>;
}

/// An archive of a workspace's files as stored: its size, how many files,
/// and its SHA-256 (checked when it is unpacked).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Archived {
    pub bytes: u64,
    pub files: u64,
    pub sha256: String,
}

/// Moves archives of a workspace's files between a sandbox and object
/// storage (a job's artifacts), streamed: never a whole archive in the
/// Worker's memory.
#[async_trait(?Send)]
pub trait Archives {
    /// Packs the regular files of `workspace` matching `patterns` and
    /// stores them at `key`.
    async fn save(
        &self,
        sandbox: &str,
        workspace: &str,
        patterns: &[String],
        key: &str,
    ) -> Result<Archived, SandboxError>;
    /// Unpacks the archive at `key` (which must be `sha256`) into
    /// `workspace`; how many files it held. `last_of`: the archive is the
    /// last snapshot of a job's chain, the tree that process left: what
    /// its manifest does not list goes, and the workspace records it
    /// (`WorkspaceState::last_process`).
    async fn restore(
        &self,
        sandbox: &str,
        workspace: &str,
        key: &str,
        sha256: &str,
        last_of: Option<&str>,
    ) -> Result<u64, SandboxError>;
    /// Snapshots `workspace` and stores it at `key`: what changed since
    /// `since` when it is the same agent's time, else all of it; without
    /// `since`, what changed since the workspace's checkout by that agent.
    async fn snapshot(
        &self,
        sandbox: &str,
        workspace: &str,
        since: Option<&AgentTime>,
        key: &str,
    ) -> Result<Snapshotted, SandboxError>;
}

/// A workspace snapshot as stored: its archive, and when its walk began
/// by the clock of the agent that took it (the next snapshot's `since`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshotted {
    pub archived: Archived,
    pub taken: AgentTime,
    /// It holds every entry, not only those changed since.
    pub full: bool,
}
