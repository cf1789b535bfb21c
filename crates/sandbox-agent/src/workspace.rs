//! Workspaces: one fresh git checkout of one commit per workspace id, under
//! `<root>/workspaces/<id>`. Container disk is not durable (ADR rule 5), so a step probes its
//! workspace and re-creates it when missing; a checkout therefore always starts from scratch.
//!
//! Isolated (the default), each workspace has a user of its own from the agent's uid block
//! (`uid_block`): its directory is 0700 and owned by that user, and its git commands and its
//! commands run as that user (`users::RunAs`). `<root>` and `<root>/workspaces` are 0711:
//! traversable, not listable. A workspace keeps its uid until it is deleted, and the uid is
//! released only once nothing runs as it any more.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;

use sluice_redact::Redactor;

use crate::clone_url;
use crate::error::ApiError;
use crate::exec;
use crate::limits::{ERROR_OUTPUT_BYTES_MAX, GIT_TIMEOUT_MS};
use crate::lock;
use crate::packs::{Kept, PackStore};
use crate::snapshot::Baseline;
use crate::uid_block::{Allocation, UidBlock};
use crate::users::{self, RunAs};

/// Variables git may take from the agent's environment: the operator's git config, proxies and
/// CA bundles. Everything else (notably the agent's token) is withheld. Isolated, git runs as
/// the workspace's user, so the files these name must be readable by any user.
const GIT_ENV_PASSTHROUGH: &[&str] = &[
    "HOME",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
];

/// Config every git command of a checkout gets (in its environment, as the token is): a fetch
/// keeps the pack it receives (`fetch.unpackLimit`) instead of writing each object loose, and
/// starts no background maintenance (a throwaway workspace never needs it). Measured on a
/// 50-file commit with git 2.47: a shallow fetch 24 ms -> 16 ms, most of a dependent job's
/// checkout.
const GIT_CHECKOUT_CONFIG: &[(&str, &str)] =
    &[("fetch.unpackLimit", "1"), ("maintenance.auto", "false")];

/// Mode of `<root>` and `<root>/workspaces` when isolated: workspace users may pass through to
/// their own directory but not list the others.
const ROOT_MODE: u32 = 0o711;
/// Mode of a workspace directory: its user's alone.
const WORKSPACE_MODE: u32 = 0o700;

pub struct Workspaces {
    /// Canonical `<root>/workspaces`.
    dir: PathBuf,
    /// Isolated: the uid block this agent holds. None: `--unisolated`.
    block: Option<UidBlock>,
    urls: clone_url::Policy,
    table: Mutex<Table>,
    /// Isolated: the packs of commits already fetched (`packs.rs`). None unisolated, where a
    /// command could write the bytes another workspace would read.
    packs: Option<PackStore>,
}

struct Table {
    /// Ids with a checkout or delete in flight; a second one gets 409 instead of racing, and no
    /// command starts there meanwhile.
    busy: HashSet<String>,
    /// Isolated: which workspace holds which uid.
    uids: Option<Allocation>,
    /// When each workspace's checkout by this agent ended (ms since the epoch): a job's first
    /// snapshot holds what changed since (`snapshot.rs`).
    checked_out: HashMap<String, u64>,
    /// The last process started in each workspace since its checkout, or the one a restore
    /// named: whose tree it holds (`WorkspaceState::last_process`).
    last_process: HashMap<String, String>,
    /// Each workspace's trees as this agent last saw them (at its checkout, when asked, and at
    /// each snapshot), newest last: what the next snapshot holds changes since.
    baselines: HashMap<String, Vec<Arc<Baseline>>>,
}

/// Baselines kept per workspace: the newest, and the one before it (the `since` of a
/// snapshot retried after its answer was lost, whose attempt made the newest).
const BASELINES_KEPT: usize = 2;

pub struct Checkout {
    pub path: PathBuf,
    pub duration_ms: u64,
}

/// Releases a workspace id claimed by `Workspaces::claim`.
struct Busy<'a> {
    table: &'a Mutex<Table>,
    id: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        lock(self.table).busy.remove(&self.id);
    }
}

pub fn is_sha(value: &str) -> bool {
    value.len() == 40 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

fn busy_error(id: &str) -> ApiError {
    ApiError::new(
        409,
        "workspace_busy",
        format!("workspace {id} is being checked out or deleted; retry shortly"),
    )
}

fn kill_unconfirmed(message: String) -> ApiError {
    ApiError::new(500, "kill_unconfirmed", message)
}

impl Workspaces {
    /// Opens `<root>/workspaces`. Isolated (`block` given), it first makes sure the agent can
    /// become a workspace user, prepares the directories' modes, kills whatever still runs as
    /// a uid of the block (a previous agent's processes, which nobody observes any more), keeps
    /// the workspaces whose directory a uid of the block owns and removes the others.
    pub fn open(
        root: &Path,
        block: Option<UidBlock>,
        urls: clone_url::Policy,
    ) -> Result<Self, String> {
        let dir = root.join("workspaces");
        let display = dir.display().to_string();
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {display}: {e}"))?;
        let dir = dir
            .canonicalize()
            .map_err(|e| format!("cannot resolve {display}: {e}"))?;
        let uids = match &block {
            None => None,
            Some(block) => Some(open_isolated(&dir, block)?),
        };
        let packs = match &block {
            None => None,
            Some(_) => Some(PackStore::open(root)?),
        };
        Ok(Workspaces {
            dir,
            block,
            urls,
            table: Mutex::new(Table {
                busy: HashSet::new(),
                uids,
                checked_out: HashMap::new(),
                last_process: HashMap::new(),
                baselines: HashMap::new(),
            }),
            packs,
        })
    }

    /// Path of a workspace; `id` must already be validated (no `/`, no `..`).
    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// The workspace directory and who runs there, if it exists (isolated: and holds a uid).
    fn existing_in(&self, table: &Table, id: &str) -> Option<(PathBuf, RunAs)> {
        let run_as = match &table.uids {
            None => RunAs::Agent,
            Some(uids) => RunAs::User(uids.get(id)?),
        };
        Some(self.path(id))
            .filter(|p| p.is_dir())
            .map(|p| (p, run_as))
    }

    /// The workspace directory if it exists.
    pub fn existing(&self, id: &str) -> Option<PathBuf> {
        self.existing_in(&lock(&self.table), id).map(|(p, _)| p)
    }

    /// Starts something in an existing workspace with `start(dir, run_as)`. Holding the table
    /// across it means no command starts while a checkout or delete of the workspace is in
    /// flight (one would kill it, or see the token git has in its environment).
    pub fn start_in<T>(
        &self,
        id: &str,
        start: impl FnOnce(&Path, RunAs) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let table = lock(&self.table);
        if table.busy.contains(id) {
            return Err(busy_error(id));
        }
        let (path, run_as) = self.existing_in(&table, id).ok_or_else(|| {
            ApiError::new(
                404,
                "workspace_not_found",
                format!("workspace {id} does not exist"),
            )
        })?;
        start(&path, run_as)
    }

    /// Runs `f` on an existing workspace, holding it as a checkout does: no command starts
    /// and no checkout or delete begins there meanwhile (a command already running goes on).
    pub fn with_claimed<T>(
        &self,
        id: &str,
        f: impl FnOnce(&Path, RunAs) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        let _busy = self.claim(id)?;
        let (path, run_as) = self.existing_in(&lock(&self.table), id).ok_or_else(|| {
            ApiError::new(
                404,
                "workspace_not_found",
                format!("workspace {id} does not exist"),
            )
        })?;
        f(&path, run_as)
    }

    fn claim(&self, id: &str) -> Result<Busy<'_>, ApiError> {
        if !lock(&self.table).busy.insert(id.to_owned()) {
            return Err(busy_error(id));
        }
        Ok(Busy {
            table: &self.table,
            id: id.to_owned(),
        })
    }

    /// Claims `id` for a checkout and gives it its uid (the one it holds, or a free one).
    fn claim_for_checkout(&self, id: &str) -> Result<(Busy<'_>, RunAs), ApiError> {
        // Uids of the block something runs as; none should, but a uid is never handed out
        // while one does.
        let running = match &self.block {
            Some(block) => users::uids_with_processes(|u| block.contains(u)),
            None => Default::default(),
        };
        let busy = self.claim(id)?;
        let mut table = lock(&self.table);
        let run_as = match &mut table.uids {
            None => RunAs::Agent,
            Some(uids) => match uids.assign(id, |u| running.contains(&u)) {
                Some(uid) => RunAs::User(uid),
                None => {
                    drop(table);
                    return Err(ApiError::new(
                        503,
                        "no_free_uid",
                        "every uid of the agent's block is held by a workspace; delete some",
                    ));
                }
            },
        };
        drop(table);
        Ok((busy, run_as))
    }

    /// Who runs in workspace `id` now: None when isolated and it holds no uid.
    fn run_as(&self, id: &str) -> Option<RunAs> {
        match &lock(&self.table).uids {
            None => Some(RunAs::Agent),
            Some(uids) => uids.get(id).map(RunAs::User),
        }
    }

    /// Gives the workspace's uid back once nothing runs as it (`kill_user`) and nothing it left
    /// in the shared temp directories remains; otherwise the uid stays held, so it is never
    /// handed to another workspace.
    fn release(&self, id: &str, run_as: RunAs) -> Result<(), String> {
        let RunAs::User(uid) = run_as else {
            return Ok(());
        };
        users::kill_user(uid)?;
        users::sweep_files(|u| u == uid)?;
        if let Some(uids) = &mut lock(&self.table).uids {
            uids.release(id);
        }
        Ok(())
    }

    /// The commit checked out in the workspace, if it exists and has one (none while a
    /// checkout or delete is in flight). git runs as the workspace's user: never as the agent
    /// in a repository a command could have configured (core.fsmonitor runs a program).
    pub fn head(&self, id: &str) -> Option<String> {
        let (path, run_as) = {
            let table = lock(&self.table);
            if table.busy.contains(id) {
                return None;
            }
            self.existing_in(&table, id)?
        };
        if !path.join(".git").is_dir() {
            return None;
        }
        let head = Git::new(&path, &self.dir, None, run_as)
            .run(&["rev-parse", "--verify", "-q", "HEAD"], false)
            .ok()?;
        Some(head.trim().to_owned()).filter(|h| is_sha(h))
    }

    /// When the workspace's checkout by this agent ended (ms since the epoch); None when this
    /// agent made none (it started since, or the workspace is gone).
    pub fn checked_out_ms(&self, id: &str) -> Option<u64> {
        lock(&self.table).checked_out.get(id).copied()
    }

    /// Forgets what this agent knew of the workspace's tree (a checkout or delete begins).
    fn forget_tree(&self, id: &str) {
        let mut table = lock(&self.table);
        table.checked_out.remove(id);
        table.last_process.remove(id);
        table.baselines.remove(id);
    }

    /// Keeps `baseline` as the workspace's newest.
    pub fn keep_baseline(&self, id: &str, baseline: Baseline) {
        let mut table = lock(&self.table);
        let kept = table.baselines.entry(id.to_owned()).or_default();
        kept.push(Arc::new(baseline));
        let excess = kept.len().saturating_sub(BASELINES_KEPT);
        kept.drain(..excess);
    }

    /// The baseline taken at `ms`, if this agent still holds it.
    pub fn baseline(&self, id: &str, ms: u64) -> Option<Arc<Baseline>> {
        let table = lock(&self.table);
        let kept = table.baselines.get(id)?;
        kept.iter().find(|b| b.ms == ms).cloned()
    }

    /// Whether the workspace is a checkout by this agent that no process has run in yet.
    pub fn pristine(&self, id: &str) -> bool {
        let table = lock(&self.table);
        table.checked_out.contains_key(id) && !table.last_process.contains_key(id)
    }

    /// The process whose tree the workspace holds, as far as this agent knows.
    pub fn last_process(&self, id: &str) -> Option<String> {
        lock(&self.table).last_process.get(id).cloned()
    }

    /// Records that `process` (just started, or named by a restore) made the workspace's tree.
    pub fn set_last_process(&self, id: &str, process: &str) {
        lock(&self.table)
            .last_process
            .insert(id.to_owned(), process.to_owned());
    }

    /// Kills everything running as the workspace's user, removes the workspace and releases
    /// its uid; `false` if there was no workspace.
    pub fn delete(&self, id: &str) -> Result<bool, ApiError> {
        let _busy = self.claim(id)?;
        let run_as = self.run_as(id);
        if let Some(RunAs::User(uid)) = run_as {
            users::kill_user(uid).map_err(kill_unconfirmed)?;
        }
        self.forget_tree(id);
        let removed =
            remove_tree(&self.path(id)).map_err(|e| internal("cannot remove workspace", e))?;
        if let Some(run_as) = run_as {
            if let Err(e) = self.release(id, run_as) {
                eprintln!("warning: workspace {id} keeps its uid: {e}");
            }
        }
        Ok(removed)
    }

    /// Replaces the workspace with a fresh checkout of `sha` from `repo_url`. `token` (a GitHub
    /// installation token) reaches git in its environment only, never argv or disk.
    pub fn checkout(
        &self,
        id: &str,
        repo_url: &str,
        sha: &str,
        token: Option<&str>,
        baseline: bool,
    ) -> Result<Checkout, ApiError> {
        self.urls.check(repo_url).map_err(ApiError::invalid)?;
        if !is_sha(sha) {
            return Err(ApiError::invalid("sha must be 40 hex characters"));
        }
        // A line break would let the token inject extra HTTP headers.
        if token.is_some_and(|t| t.chars().any(char::is_control)) {
            return Err(ApiError::invalid(
                "token must not contain control characters",
            ));
        }
        let sha = sha.to_ascii_lowercase();
        let started = Instant::now();
        let (_busy, run_as) = self.claim_for_checkout(id)?;
        self.forget_tree(id);
        let path = self.path(id);
        fresh_dir(&path, run_as)?;
        let git = Git::new(&path, &self.dir, token, run_as);
        match self.fetch_or_reuse(&git, repo_url, &sha) {
            Ok(()) => {
                // Walked before any process can run in it: the first snapshot's baseline.
                // A tree too large to walk has none: the first snapshot is whole.
                let tree = baseline.then(|| Baseline::of(&path)).and_then(|walked| {
                    walked.map_err(|e| eprintln!("warning: {}", e.message)).ok()
                });
                let ended_ms = tree.as_ref().map_or_else(crate::snapshot::now_ms, |t| t.ms);
                lock(&self.table)
                    .checked_out
                    .insert(id.to_owned(), ended_ms);
                if let Some(tree) = tree {
                    self.keep_baseline(id, tree);
                }
                Ok(Checkout {
                    path,
                    duration_ms: started.elapsed().as_millis() as u64,
                })
            }
            Err(message) => {
                // A half-made checkout must not look usable to a later probe.
                let _ = remove_tree(&path);
                if let Err(e) = self.release(id, run_as) {
                    eprintln!("warning: workspace {id} keeps its uid: {e}");
                }
                Err(ApiError::new(422, "checkout_failed", git.scrub(&message)))
            }
        }
    }
}

impl Workspaces {
    /// Checks out `sha` from the pack a checkout of the same commit kept, else fetches it (and
    /// keeps the pack for the next). A kept pack that does not check out is no worse than none:
    /// the workspace starts over and fetches.
    fn fetch_or_reuse(&self, git: &Git<'_>, url: &str, sha: &str) -> Result<(), String> {
        let Some(packs) = &self.packs else {
            return git.fetch_and_checkout(url, sha);
        };
        if let Some(kept) = packs.find(url, sha) {
            match git.checkout_kept(&kept, sha, url) {
                Ok(()) => {
                    kept.used();
                    return Ok(());
                }
                Err(e) => {
                    eprintln!("warning: the kept pack of {sha} did not check out: {e}");
                    packs.forget(url, sha);
                    fresh_dir(git.dir, git.run_as).map_err(|e| e.message)?;
                }
            }
        }
        git.fetch_and_checkout(url, sha)?;
        // A fetch by sha at depth 1 leaves a shallow boundary; the full-history fallback
        // does not, and its pack is every commit's: not kept.
        if !git.dir.join(".git/shallow").exists() {
            return Ok(());
        }
        if let Err(e) = packs.keep(url, sha, &git.dir.join(".git/objects/pack")) {
            eprintln!("warning: the pack of {sha} is not kept: {e}");
        }
        Ok(())
    }
}

/// An empty directory at `path` for `run_as`: first everything still running as that user is
/// killed (so nothing left from before sees the checkout, or git's token), then the old tree
/// goes and a new one is made, 0700 and the user's own.
fn fresh_dir(path: &Path, run_as: RunAs) -> Result<(), ApiError> {
    if let RunAs::User(uid) = run_as {
        users::kill_user(uid).map_err(kill_unconfirmed)?;
    }
    remove_tree(path).map_err(|e| internal("cannot remove the previous workspace", e))?;
    fs::create_dir(path).map_err(|e| internal("cannot create the workspace", e))?;
    fs::set_permissions(path, fs::Permissions::from_mode(WORKSPACE_MODE))
        .map_err(|e| internal("cannot restrict the workspace", e))?;
    if let RunAs::User(uid) = run_as {
        std::os::unix::fs::chown(path, Some(uid), Some(uid))
            .map_err(|e| internal("cannot give the workspace to its user", e))?;
    }
    Ok(())
}

/// The isolated half of `Workspaces::open`; returns who holds which uid.
fn open_isolated(dir: &Path, block: &UidBlock) -> Result<Allocation, String> {
    prepare_root(dir)?;
    users::probe(block.first).map_err(|e| {
        format!(
            "cannot switch to uid {} ({e}): run the agent as root (with CAP_SETUID and              CAP_SETGID), or pass --unisolated",
            block.first
        )
    })?;
    for uid in users::uids_with_processes(|u| block.contains(u)) {
        users::kill_user(uid).map_err(|e| format!("a previous agent's processes: {e}"))?;
    }
    let mut uids = Allocation::new(block.first);
    let entries = fs::read_dir(dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let kept = match (name.to_str(), fs::symlink_metadata(&path)) {
            (Some(id), Ok(meta)) => {
                sluice_sandbox_protocol::valid_id(id) && meta.is_dir() && uids.adopt(id, meta.uid())
            }
            _ => false,
        };
        // A directory no uid of ours owns (a crash before its chown, an agent that held
        // another block): nobody can run there, and a checkout would replace it anyway.
        if !kept {
            if let Err(e) = remove_tree(&path) {
                eprintln!("warning: cannot remove stale {}: {e}", path.display());
            }
        }
    }
    if let Err(e) = users::sweep_files(|u| block.contains(u) && !uids.holds(u)) {
        eprintln!("warning: sweeping the files of released uids: {e}");
    }
    Ok(uids)
}

/// Makes `<root>` and `<root>/workspaces` (`dir`) traversable but not listable, after checking
/// the agent owns them (another user could otherwise swap what the workspaces see), and that
/// every directory above `<root>` lets other users through.
fn prepare_root(dir: &Path) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let root = dir.parent().unwrap_or(dir);
    for d in [root, dir] {
        let meta = fs::symlink_metadata(d).map_err(|e| format!("{}: {e}", d.display()))?;
        if meta.uid() != me {
            return Err(format!(
                "{} is owned by uid {}, not by the agent (uid {me}); give --root a directory                  the agent owns",
                d.display(),
                meta.uid()
            ));
        }
        fs::set_permissions(d, fs::Permissions::from_mode(ROOT_MODE))
            .map_err(|e| format!("cannot set the mode of {}: {e}", d.display()))?;
    }
    for above in root.ancestors().skip(1) {
        let meta = fs::metadata(above).map_err(|e| format!("{}: {e}", above.display()))?;
        if meta.mode() & 0o001 == 0 {
            return Err(format!(
                "the workspace users cannot reach {}: {} is mode {:o}, not searchable by                  others; chmod o+x it or choose a --root they can reach",
                root.display(),
                above.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

fn internal(what: &str, e: io::Error) -> ApiError {
    ApiError::new(500, "internal", format!("{what}: {e}"))
}

/// Git commands for one workspace.
struct Git<'a> {
    dir: &'a Path,
    /// `<root>/workspaces`: git must never discover a repository above the workspace.
    ceiling: &'a Path,
    /// `Authorization: Basic base64(x-access-token:TOKEN)`, GitHub's form for app tokens.
    auth_header: Option<String>,
    /// Scrubs the token from git's output as it is captured.
    redactor: Redactor,
    /// The workspace's user: git runs as it.
    run_as: RunAs,
}

impl<'a> Git<'a> {
    fn new(dir: &'a Path, ceiling: &'a Path, token: Option<&'a str>, run_as: RunAs) -> Self {
        let token = token.filter(|t| !t.is_empty());
        let auth_header = token.map(|t| {
            let basic =
                base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{t}"));
            format!("Authorization: Basic {basic}")
        });
        Git {
            dir,
            ceiling,
            auth_header,
            redactor: Redactor::new(token),
            run_as,
        }
    }

    fn fetch_and_checkout(&self, url: &str, sha: &str) -> Result<(), String> {
        // No template: its sample hooks are files to copy that nothing runs.
        self.run(&["init", "-q", "--template="], false)?;
        let by_sha = self.run(
            &["fetch", "--depth", "1", "--no-tags", "--", url, sha],
            true,
        );
        match by_sha {
            Ok(_) => {
                self.run(&["checkout", "-q", "--detach", "FETCH_HEAD"], false)?;
            }
            Err(by_sha_error) => {
                // Servers speaking protocol v0 without uploadpack.allowReachableSHA1InWant
                // refuse a fetch by sha: fetch all branches and tags, then pick the commit.
                let refspecs = [
                    "+refs/heads/*:refs/remotes/origin/*",
                    "+refs/tags/*:refs/tags/*",
                ];
                let full = ["fetch", "--no-tags", "--", url, refspecs[0], refspecs[1]];
                self.run(&full, true)
                    .and_then(|_| self.run(&["checkout", "-q", "--detach", sha], false))
                    .map_err(|e| format!("{e}\n(after fetching by sha failed: {by_sha_error})"))?;
            }
        }
        self.verify_head(sha)
    }

    /// Checks out `sha` from a kept pack: linked in, with the commit as the shallow boundary
    /// (a fetch at depth 1 would have made the same), then verified as a fetched one is.
    fn checkout_kept(&self, kept: &Kept, sha: &str, url: &str) -> Result<(), String> {
        self.run(&["init", "-q", "--template="], false)?;
        let git_dir = self.dir.join(".git");
        kept.link_into(&git_dir.join("objects/pack"))?;
        // What the fetch would have left: the shallow boundary and FETCH_HEAD.
        for (name, text) in [
            ("shallow", format!("{sha}\n")),
            ("FETCH_HEAD", format!("{sha}\t\t{url}\n")),
        ] {
            let path = git_dir.join(name);
            fs::write(&path, text).map_err(|e| format!("cannot write {name}: {e}"))?;
            if let RunAs::User(uid) = self.run_as {
                std::os::unix::fs::chown(&path, Some(uid), Some(uid))
                    .map_err(|e| format!("cannot give {name} to its user: {e}"))?;
            }
        }
        self.run(&["checkout", "-q", "--detach", sha], false)?;
        self.verify_head(sha)
    }

    fn verify_head(&self, sha: &str) -> Result<(), String> {
        let head = self.run(&["rev-parse", "HEAD"], false)?;
        if head.trim() != sha {
            return Err(format!("checked out {} instead of {sha}", head.trim()));
        }
        Ok(())
    }

    fn command(&self, args: &[&str], authenticated: bool) -> Command {
        let mut cmd = Command::new("git");
        cmd.args(args).current_dir(self.dir).env_clear();
        for name in GIT_ENV_PASSTHROUGH {
            if let Some(value) = std::env::var_os(name) {
                cmd.env(name, value);
            }
        }
        cmd.env("PATH", exec::path_env())
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_CEILING_DIRECTORIES", self.ceiling)
            .env("LC_ALL", "C");
        let mut config: Vec<(&str, &str)> = GIT_CHECKOUT_CONFIG.to_vec();
        if let (true, Some(header)) = (authenticated, &self.auth_header) {
            // Config in the environment of this git process (and the remote helper it starts)
            // alone: argv is world-readable in /proc/<pid>/cmdline and `-c` would put it there;
            // a remote or credential helper would reach .git/config. The process runs as the
            // workspace's user before any command of the workspace does (`fresh_dir` killed
            // what was left), and other users cannot read its /proc/<pid>/environ.
            config.push(("http.extraHeader", header));
        }
        cmd.env("GIT_CONFIG_COUNT", config.len().to_string());
        for (i, (key, value)) in config.into_iter().enumerate() {
            cmd.env(format!("GIT_CONFIG_KEY_{i}"), key)
                .env(format!("GIT_CONFIG_VALUE_{i}"), value);
        }
        cmd
    }

    /// Runs one git command bounded by `GIT_TIMEOUT_MS`; `Ok(output)` on exit 0, else a
    /// message quoting the end of git's output (scrub before returning it to a caller).
    fn run(&self, args: &[&str], authenticated: bool) -> Result<String, String> {
        let step = format!("git {}", args.first().copied().unwrap_or_default());
        let timeout = Duration::from_millis(GIT_TIMEOUT_MS);
        let command = self.command(args, authenticated);
        let (finished, output) = exec::run(command, self.run_as, timeout, self.redactor.clone())
            .map_err(|e| format!("{step}: cannot run git: {e}"))?;
        if finished.exit_code == Some(0) {
            return Ok(output.text);
        }
        let text = output.text.trim_end();
        let tail =
            &text[floor_char_boundary(text, text.len().saturating_sub(ERROR_OUTPUT_BYTES_MAX))..];
        let how = if finished.timed_out {
            format!("timed out after {GIT_TIMEOUT_MS} ms")
        } else if let Some(code) = finished.exit_code {
            format!("failed with exit code {code}")
        } else {
            format!(
                "was killed by signal {}",
                finished.signal.unwrap_or_default()
            )
        };
        Err(format!("{step} {how}: {tail}"))
    }

    /// Removes the token, in every form sluice-redact knows (the header is its base64), from
    /// text bound for a caller.
    fn scrub(&self, text: &str) -> String {
        self.redactor.redact(text)
    }
}

/// The largest char boundary of `s` at or before `index`.
fn floor_char_boundary(s: &str, index: usize) -> usize {
    (0..=index.min(s.len()))
        .rev()
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(0)
}

/// Removes `path` recursively; `Ok(false)` if it did not exist.
fn remove_tree(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(e),
        Ok(_) => {}
    }
    if fs::remove_dir_all(path).is_err() {
        // Tools such as Go's module cache leave read-only directories whose entries cannot be
        // unlinked: make every directory writable, then try once more.
        make_dirs_writable(path);
        fs::remove_dir_all(path)?;
    }
    Ok(true)
}

/// Adds owner rwx to every directory under `path` (symlinks are not followed). The walk is
/// bounded by the size of the tree and uses an explicit stack so deep trees cannot overflow.
fn make_dirs_writable(path: &Path) {
    let mut pending = vec![path.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(meta) = fs::symlink_metadata(&dir) else {
            continue;
        };
        if !meta.is_dir() {
            continue;
        }
        let mut permissions = meta.permissions();
        permissions.set_mode(permissions.mode() | 0o700);
        let _ = fs::set_permissions(&dir, permissions);
        if let Ok(entries) = fs::read_dir(&dir) {
            pending.extend(entries.flatten().map(|entry| entry.path()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_removes_token_and_header() {
        let dir = Path::new("/nonexistent");
        let git = Git::new(dir, dir, Some("s3cret-token"), RunAs::Agent);
        let header = git.auth_header.clone().expect("header");
        let text = format!("fatal: s3cret-token and {header}");
        let scrubbed = git.scrub(&text);
        assert!(!scrubbed.contains("s3cret-token"), "{scrubbed}");
        assert!(!scrubbed.contains(&header[15..]), "{scrubbed}");
        // What stays is the encoding of the public `x-access-token:` prefix.
        let prefix = base64::engine::general_purpose::STANDARD.encode("x-access-token:");
        assert_eq!(
            scrubbed,
            format!("fatal: *** and Authorization: Basic {prefix}***")
        );
    }

    #[test]
    fn header_is_basic_x_access_token() {
        let dir = Path::new("/nonexistent");
        let git = Git::new(dir, dir, Some("abc"), RunAs::Agent);
        // base64("x-access-token:abc")
        assert_eq!(
            git.auth_header.as_deref(),
            Some("Authorization: Basic eC1hY2Nlc3MtdG9rZW46YWJj")
        );
        assert!(Git::new(dir, dir, Some(""), RunAs::Agent)
            .auth_header
            .is_none());
    }

    #[test]
    fn the_token_reaches_git_in_its_environment_only() {
        let dir = Path::new("/nonexistent");
        let git = Git::new(dir, dir, Some("ghs_argvToken"), RunAs::Agent);
        let header = git.auth_header.clone().expect("header");
        let fetch = git.command(&["fetch", "--", "https://github.com/a/b.git"], true);
        let args: Vec<String> = fetch
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert!(
            args.iter()
                .all(|a| !a.contains("ghs_") && !a.contains(&header[22..])),
            "{args:?}"
        );
        let env = |cmd: &Command, name: &str| {
            cmd.get_envs()
                .find(|(k, _)| *k == name)
                .and_then(|(_, v)| v.map(|v| v.to_string_lossy().into_owned()))
        };
        let last = GIT_CHECKOUT_CONFIG.len();
        assert_eq!(
            env(&fetch, &format!("GIT_CONFIG_KEY_{last}")).as_deref(),
            Some("http.extraHeader")
        );
        assert_eq!(
            env(&fetch, &format!("GIT_CONFIG_VALUE_{last}")),
            Some(header)
        );
        assert_eq!(
            env(&fetch, "GIT_CONFIG_COUNT"),
            Some((last + 1).to_string())
        );
        // Commands that talk to no server do not get it at all.
        let local = git.command(&["checkout", "-q", "--detach", "FETCH_HEAD"], false);
        assert_eq!(env(&local, "GIT_CONFIG_COUNT"), Some(last.to_string()));
        assert!(local
            .get_envs()
            .all(|(_, v)| v.is_none_or(|v| !v.to_string_lossy().contains("Basic"))));
    }

    #[test]
    fn remove_tree_handles_read_only_dirs() {
        let base = std::env::temp_dir().join(format!("sluice-agent-rm-{}", std::process::id()));
        let locked = base.join("a/b");
        fs::create_dir_all(&locked).expect("mkdir");
        fs::write(locked.join("f"), "x").expect("write");
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o500)).expect("chmod");
        fs::set_permissions(base.join("a"), fs::Permissions::from_mode(0o500)).expect("chmod");
        assert!(remove_tree(&base).expect("removed"));
        assert!(!base.exists());
        assert!(!remove_tree(&base).expect("absent is fine"));
    }

    #[test]
    fn floor_char_boundary_never_splits() {
        let s = "aé";
        assert_eq!(floor_char_boundary(s, 2), 1);
        assert_eq!(floor_char_boundary(s, 3), 3);
        assert_eq!(floor_char_boundary(s, 99), 3);
    }
}
