//! A workspace's files as a gzipped tar and back: what a job's `artifacts` upload and the jobs
//! that need it restore (`GET`/`PUT /v1/workspaces/{id}/archive`).
//!
//! The agent only lists the workspace (never following a link, which is archived as a link);
//! `tar` itself runs as the
//! workspace's user, so an archive holds only what that user can read and an extraction
//! writes only where that user may (a member named `../x` or `/etc/x` is refused by tar, and
//! would be that user's to write anyway). The archive passes through a file of the agent's
//! (`<root>/archives`, 0700), bounded in bytes, and is checked against its SHA-256 before it
//! is unpacked.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::exec;
use crate::limits::{ARCHIVE_BYTES_MAX, ARCHIVE_ENTRIES_MAX, ARCHIVE_TIMEOUT_MS};
use crate::users::RunAs;

/// How often a running `tar` is checked for its end: a cheap `try_wait`.
const TAR_POLL: Duration = Duration::from_millis(5);

/// An archive made of a workspace's files: an unlinked file of the agent's, its size, hash
/// and how many files it holds.
pub struct Packed {
    pub file: File,
    pub bytes: u64,
    pub sha256: String,
    pub files: usize,
}

/// Where archives pass through: `<root>/archives`, the agent's alone.
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    pub fn open(root: &Path) -> Result<Self, String> {
        let dir = root.join("archives");
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))?;
        Ok(Scratch { dir })
    }

    /// A new file here, already unlinked: it goes when its last handle does.
    pub(crate) fn temp(&self) -> io::Result<File> {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = self.dir.join(N.fetch_add(1, Ordering::Relaxed).to_string());
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        fs::remove_file(&path)?;
        Ok(file)
    }

    /// Packs the regular files of `workspace` whose path matches one of `patterns`.
    pub fn pack(
        &self,
        workspace: &Path,
        run_as: RunAs,
        patterns: &[String],
    ) -> Result<Packed, ApiError> {
        let names = matching_files(workspace, patterns)?;
        let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
        self.tar_listed(workspace, run_as, &names, names.len())
    }

    /// `names` NUL-separated in a scratch file, read back from its start.
    pub(crate) fn listing(&self, names: &[&[u8]]) -> Result<File, ApiError> {
        let mut list = self.temp().map_err(internal)?;
        for name in names {
            list.write_all(name).map_err(internal)?;
            list.write_all(b"\0").map_err(internal)?;
        }
        reopen_at_start(list)
    }

    /// Packs exactly the entries `names` (a directory without what it holds), each taken as a
    /// name even when it starts with a dash; `files` is what the archive says it holds.
    pub(crate) fn tar_listed(
        &self,
        workspace: &Path,
        run_as: RunAs,
        names: &[&[u8]],
        files: usize,
    ) -> Result<Packed, ApiError> {
        let list = self.listing(names)?;
        let out = self.temp().map_err(internal)?;
        let args = [
            "-czf",
            "-",
            "--null",
            "--verbatim-files-from",
            "--no-recursion",
            "-T",
            "-",
        ];
        let stdout = out.try_clone().map_err(internal)?;
        self.run_tool("tar", workspace, run_as, &args, list, stdout)?;
        self.packed(out, files)
    }

    /// The archive tar wrote to `out`, with its size and hash.
    pub(crate) fn packed(&self, out: File, files: usize) -> Result<Packed, ApiError> {
        let (bytes, sha256) = digest(&out)?;
        Ok(Packed {
            file: reopen_at_start(out)?,
            bytes,
            sha256,
            files,
        })
    }

    /// Unpacks the archive `body` sends into `workspace`, after checking it is `sha256`;
    /// the number of files it held.
    pub fn unpack(
        &self,
        workspace: &Path,
        run_as: RunAs,
        body: &mut dyn Read,
        sha256: &str,
    ) -> Result<usize, ApiError> {
        let mut archive = self.temp().map_err(internal)?;
        let copied =
            io::copy(&mut body.take(ARCHIVE_BYTES_MAX + 1), &mut archive).map_err(internal)?;
        if copied > ARCHIVE_BYTES_MAX {
            return Err(too_large());
        }
        let (_, actual) = digest(&archive)?;
        if !actual.eq_ignore_ascii_case(sha256) {
            return Err(ApiError::new(
                422,
                "archive_corrupt",
                format!("the archive's SHA-256 is {actual}, not {sha256}"),
            ));
        }
        let listing = self.temp().map_err(internal)?;
        let args = [
            "-xzvf",
            "-",
            "--no-same-owner",
            "--no-same-permissions",
            "--no-overwrite-dir",
        ];
        let stdin = reopen_at_start(archive)?;
        let stdout = listing.try_clone().map_err(internal)?;
        self.run_tool("tar", workspace, run_as, &args, stdin, stdout)?;
        let mut names = String::new();
        reopen_at_start(listing)?
            .read_to_string(&mut names)
            .map_err(internal)?;
        Ok(names.lines().filter(|l| !l.ends_with('/')).count())
    }
}

impl Scratch {
    /// The SHA-256 (hex) of `files`' names and contents, read as the workspace's user
    /// (`sha256sum`): what keys a dependency cache. A file that is missing or unreadable is
    /// an error naming it.
    pub fn digest(
        &self,
        workspace: &Path,
        run_as: RunAs,
        files: &[String],
    ) -> Result<String, ApiError> {
        let out = self.temp().map_err(internal)?;
        let stdin = self.temp().map_err(internal)?;
        let mut args = vec!["--"];
        args.extend(files.iter().map(String::as_str));
        let stdout = out.try_clone().map_err(internal)?;
        self.run_tool("sha256sum", workspace, run_as, &args, stdin, stdout)
            .map_err(|mut e| {
                if e.code == "archive_failed" {
                    e.code = "key_file_unreadable";
                }
                e
            })?;
        let (_, sha) = digest(&out)?;
        Ok(sha)
    }
}

/// Workspace-relative paths of the regular files and symbolic links (archived as links, never
/// followed: `node_modules/.bin` is links) matching a pattern, in order, never under `.git`
/// and never through a link to a directory.
pub fn matching_files(workspace: &Path, patterns: &[String]) -> Result<Vec<String>, ApiError> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    let mut seen = 0usize;
    while let Some(rel) = pending.pop() {
        let entries = fs::read_dir(workspace.join(&rel)).map_err(internal)?;
        for entry in entries.flatten() {
            seen += 1;
            if seen > ARCHIVE_ENTRIES_MAX {
                return Err(ApiError::new(
                    422,
                    "too_many_files",
                    format!(
                        "the workspace has more than {ARCHIVE_ENTRIES_MAX} entries to look through"
                    ),
                ));
            }
            let path = rel.join(entry.file_name());
            let Some(name) = path.to_str().map(str::to_owned) else {
                continue;
            };
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && name != ".git" {
                pending.push(path);
            } else if (kind.is_file() || kind.is_symlink())
                && patterns.iter().any(|p| glob_match::glob_match(p, &name))
            {
                found.push(name);
            }
        }
    }
    found.sort();
    Ok(found)
}

impl Scratch {
    /// Runs `tool args` (tar, sha256sum) in `dir` as `run_as`, its stdin and stdout the files
    /// given, bounded in time and (through RLIMIT_FSIZE) in the bytes it may write to one file.
    pub(crate) fn run_tool(
        &self,
        tool: &str,
        dir: &Path,
        run_as: RunAs,
        args: &[&str],
        stdin: File,
        stdout: File,
    ) -> Result<(), ApiError> {
        let stderr = self.temp().map_err(internal)?;
        let mut command = Command::new(tool);
        command
            .args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", exec::path_env())
            .env("LC_ALL", "C")
            .stdin(Stdio::from(stdin))
            .stdout(Stdio::from(stdout))
            .stderr(Stdio::from(stderr.try_clone().map_err(internal)?));
        run_as.prepare(&mut command);
        limit_file_size(&mut command);
        let mut child = command.spawn().map_err(internal)?;
        let started = Instant::now();
        // Bounded by ARCHIVE_TIMEOUT_MS: tar is killed past it.
        let status = loop {
            if let Some(status) = child.try_wait().map_err(internal)? {
                break status;
            }
            if started.elapsed() > Duration::from_millis(ARCHIVE_TIMEOUT_MS) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(ApiError::new(
                    504,
                    "archive_timed_out",
                    format!("{tool} ran past {ARCHIVE_TIMEOUT_MS} ms"),
                ));
            }
            std::thread::sleep(TAR_POLL);
        };
        if status.success() {
            return Ok(());
        }
        if status.signal() == Some(libc::SIGXFSZ) {
            return Err(too_large());
        }
        let mut text = String::new();
        let _ = reopen_at_start(stderr)?
            .take(4096)
            .read_to_string(&mut text);
        Err(ApiError::new(
            422,
            "archive_failed",
            format!("{tool} {} failed ({status}): {}", args[0], text.trim()),
        ))
    }
}

/// No file the child writes may grow past ARCHIVE_BYTES_MAX (SIGXFSZ ends it).
fn limit_file_size(command: &mut Command) {
    let limit = libc::rlimit {
        rlim_cur: ARCHIVE_BYTES_MAX,
        rlim_max: ARCHIVE_BYTES_MAX,
    };
    // SAFETY: the hook runs in the forked child before exec and only calls setrlimit, which is
    // async-signal-safe; the struct was built before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        413,
        "archive_too_large",
        format!("the archive exceeds {ARCHIVE_BYTES_MAX} bytes"),
    )
}

pub(crate) fn reopen_at_start(mut file: File) -> Result<File, ApiError> {
    use std::io::Seek;
    file.seek(io::SeekFrom::Start(0)).map_err(internal)?;
    Ok(file)
}

/// The size and SHA-256 (hex) of `file`'s content.
fn digest(file: &File) -> Result<(u64, String), ApiError> {
    let mut reader = reopen_at_start(file.try_clone().map_err(internal)?)?;
    let mut hasher = Sha256::new();
    let bytes = io::copy(&mut reader, &mut hasher).map_err(internal)?;
    let hex = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok((bytes, hex))
}

pub(crate) fn internal(e: io::Error) -> ApiError {
    ApiError::new(500, "internal", format!("archive: {e}"))
}
