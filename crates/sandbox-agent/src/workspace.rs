//! Workspaces: one fresh git checkout of one commit per workspace id, under
//! `<root>/workspaces/<id>`. Container disk is not durable (ADR rule 5), so a step probes its
//! workspace and re-creates it when missing; a checkout therefore always starts from scratch.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine;

use sluice_redact::Redactor;

use crate::error::ApiError;
use crate::exec;
use crate::limits::{ERROR_OUTPUT_BYTES_MAX, GIT_TIMEOUT_MS};
use crate::lock;

/// Variables git may take from the agent's environment: the operator's git config, proxies and
/// CA bundles. Everything else (notably the agent's token) is withheld.
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

/// Transports a checkout may use. `file://` serves local mirrors and tests; the rest (ssh,
/// `ext::`) could run arbitrary programs or need keys the agent does not have.
const URL_SCHEMES: &[&str] = &["https://", "http://", "file://"];

pub struct Workspaces {
    /// Canonical `<root>/workspaces`.
    dir: PathBuf,
    /// Ids with a checkout or delete in flight; a second one gets 409 instead of racing.
    busy: Mutex<HashSet<String>>,
}

pub struct Checkout {
    pub path: PathBuf,
    pub duration_ms: u64,
}

/// Releases a workspace id claimed by `Workspaces::claim`.
struct Busy<'a> {
    set: &'a Mutex<HashSet<String>>,
    id: String,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        lock(self.set).remove(&self.id);
    }
}

pub fn is_sha(value: &str) -> bool {
    value.len() == 40 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Workspaces {
    pub fn new(root: &Path) -> io::Result<Self> {
        let dir = root.join("workspaces");
        fs::create_dir_all(&dir)?;
        Ok(Workspaces {
            dir: dir.canonicalize()?,
            busy: Mutex::default(),
        })
    }

    /// Path of a workspace; `id` must already be validated (no `/`, no `..`).
    fn path(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// The workspace directory if it exists.
    pub fn existing(&self, id: &str) -> Option<PathBuf> {
        Some(self.path(id)).filter(|p| p.is_dir())
    }

    fn claim(&self, id: &str) -> Result<Busy<'_>, ApiError> {
        if !lock(&self.busy).insert(id.to_owned()) {
            return Err(ApiError::new(
                409,
                "workspace_busy",
                format!("workspace {id} is being checked out or deleted; retry shortly"),
            ));
        }
        Ok(Busy {
            set: &self.busy,
            id: id.to_owned(),
        })
    }

    /// The commit checked out in the workspace, if it exists and has one.
    pub fn head(&self, id: &str) -> Option<String> {
        let path = self.existing(id)?;
        if !path.join(".git").is_dir() {
            return None;
        }
        let head = Git::new(&path, &self.dir, None)
            .run(&["rev-parse", "--verify", "-q", "HEAD"], false)
            .ok()?;
        Some(head.trim().to_owned()).filter(|h| is_sha(h))
    }

    /// Removes the workspace; `false` if there was none.
    pub fn delete(&self, id: &str) -> Result<bool, ApiError> {
        let _busy = self.claim(id)?;
        remove_tree(&self.path(id)).map_err(|e| internal("cannot remove workspace", e))
    }

    /// Replaces the workspace with a fresh checkout of `sha` from `repo_url`. `token` (a GitHub
    /// installation token) is sent as a per-command header only and never written to disk.
    pub fn checkout(
        &self,
        id: &str,
        repo_url: &str,
        sha: &str,
        token: Option<&str>,
    ) -> Result<Checkout, ApiError> {
        if !URL_SCHEMES.iter().any(|s| repo_url.starts_with(s))
            || repo_url
                .chars()
                .any(|c| c.is_control() || c.is_whitespace())
        {
            return Err(ApiError::invalid(
                "repo_url must be an http(s):// or file:// URL without spaces",
            ));
        }
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
        let _busy = self.claim(id)?;
        let path = self.path(id);
        remove_tree(&path).map_err(|e| internal("cannot remove the previous workspace", e))?;
        fs::create_dir(&path).map_err(|e| internal("cannot create the workspace", e))?;
        let git = Git::new(&path, &self.dir, token);
        match git.fetch_and_checkout(repo_url, &sha) {
            Ok(()) => Ok(Checkout {
                path,
                duration_ms: started.elapsed().as_millis() as u64,
            }),
            Err(message) => {
                // A half-made checkout must not look usable to a later probe.
                let _ = remove_tree(&path);
                Err(ApiError::new(422, "checkout_failed", git.scrub(&message)))
            }
        }
    }
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
}

impl<'a> Git<'a> {
    fn new(dir: &'a Path, ceiling: &'a Path, token: Option<&'a str>) -> Self {
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
        }
    }

    fn fetch_and_checkout(&self, url: &str, sha: &str) -> Result<(), String> {
        self.run(&["init", "-q"], false)?;
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
        let head = self.run(&["rev-parse", "HEAD"], false)?;
        if head.trim() != sha {
            return Err(format!("checked out {} instead of {sha}", head.trim()));
        }
        Ok(())
    }

    fn command(&self, args: &[&str], authenticated: bool) -> Command {
        let mut cmd = Command::new("git");
        if let (true, Some(header)) = (authenticated, &self.auth_header) {
            // Per-command config: unlike a remote or credential helper it never reaches
            // .git/config.
            cmd.arg("-c").arg(format!("http.extraHeader={header}"));
        }
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
        cmd
    }

    /// Runs one git command bounded by `GIT_TIMEOUT_MS`; `Ok(output)` on exit 0, else a
    /// message quoting the end of git's output (scrub before returning it to a caller).
    fn run(&self, args: &[&str], authenticated: bool) -> Result<String, String> {
        let step = format!("git {}", args.first().copied().unwrap_or_default());
        let timeout = Duration::from_millis(GIT_TIMEOUT_MS);
        let command = self.command(args, authenticated);
        let (finished, output) = exec::run(command, timeout, self.redactor.clone())
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
        let git = Git::new(dir, dir, Some("s3cret-token"));
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
        let git = Git::new(dir, dir, Some("abc"));
        // base64("x-access-token:abc")
        assert_eq!(
            git.auth_header.as_deref(),
            Some("Authorization: Basic eC1hY2Nlc3MtdG9rZW46YWJj")
        );
        assert!(Git::new(dir, dir, Some("")).auth_header.is_none());
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
