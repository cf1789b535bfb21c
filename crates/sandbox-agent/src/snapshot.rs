//! A workspace as a snapshot between two steps of a job (`steps = [...]`), and back: ADR-0015
//! (`docs/adr/0015-multi-step-jobs-resume-from-snapshots.md`).
//!
//! A snapshot holds every entry (file, link, directory; `.git` too) whose data or status
//! changed at or after its `since` (Linux's file systems, ext4, xfs, btrfs, tmpfs and so
//! overlayfs, stamp a renamed inode's ctime too), and a manifest of every path the workspace
//! then held. A job's snapshots unpacked in order over a fresh checkout, then pruned to the
//! last one's manifest, are the tree that last snapshot saw: what a step after a lost
//! container resumes from.
//!
//! Status-change time (ctime) is what no command of the workspace's user can set back (a
//! package manager sets mtimes to 1985; `touch -d` sets any mtime), so a change is never
//! missed by a `since` of the same agent; another agent's `since` (a new container) is not
//! trusted, and the snapshot is whole. As for archives, the agent only lists; `tar`, `dd`,
//! `cat` and `rm` run as the workspace's user.

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_sandbox_protocol::{AgentTime, SNAPSHOT_MANIFEST};

use crate::archive::{internal, reopen_at_start, Packed, Scratch};
use crate::error::ApiError;
use crate::limits::ARCHIVE_ENTRIES_MAX;
use crate::process::agent_id;
use crate::users::RunAs;

/// A change this long before `since` is taken again: the kernel stamps ctime from a coarse
/// clock that may lag the clock `since` was read from by one tick (1 to 10 ms); 100 ms is ten
/// ticks at the slowest rate and costs only the files changed in it.
const CTIME_SLACK_MS: u64 = 100;

/// A snapshot made: the archive, when its walk began (by this agent's clock), and whether it
/// holds every entry.
pub struct Snapshot {
    pub packed: Packed,
    pub taken_ms: u64,
    pub full: bool,
}

impl Snapshot {
    /// An archive of matching files answered as a snapshot's would be: whole, taken now.
    pub fn plain(packed: Packed) -> Self {
        Snapshot {
            packed,
            taken_ms: now_ms(),
            full: true,
        }
    }
}

/// What a snapshot holds changes since.
#[derive(Clone, Copy)]
pub enum Since<'a> {
    /// The time of an agent: this one's is trusted, another's is not.
    Agent(&'a AgentTime),
    /// The end of the workspace's checkout by this agent, if it made one.
    Checkout(Option<u64>),
    /// Nothing: the snapshot is whole.
    Start,
}

/// One entry of a workspace's walk.
struct Entry {
    name: String,
    /// Its data or status changed at or after the cutoff.
    changed: bool,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The later of an entry's data and status change, in ms since the epoch.
fn changed_ms(meta: &fs::Metadata) -> u64 {
    let ms =
        |secs: i64, nsecs: i64| (secs.max(0) as u64) * 1000 + (nsecs.max(0) as u64) / 1_000_000;
    ms(meta.ctime(), meta.ctime_nsec()).max(ms(meta.mtime(), meta.mtime_nsec()))
}

/// Every entry under `workspace` (never following a link, never the manifest), sorted, each
/// marked changed when it changed at or after `cutoff_ms`.
fn walk(workspace: &Path, cutoff_ms: u64) -> Result<Vec<Entry>, ApiError> {
    let mut found = Vec::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        for entry in fs::read_dir(workspace.join(&rel))
            .map_err(internal)?
            .flatten()
        {
            if found.len() >= ARCHIVE_ENTRIES_MAX {
                return Err(ApiError::new(
                    422,
                    "too_many_files",
                    format!("the workspace has more than {ARCHIVE_ENTRIES_MAX} entries"),
                ));
            }
            let path = rel.join(entry.file_name());
            let Some(name) = path.to_str().map(str::to_owned) else {
                continue;
            };
            let (Ok(kind), Ok(meta)) = (entry.file_type(), entry.metadata()) else {
                continue;
            };
            if name == SNAPSHOT_MANIFEST || !(kind.is_dir() || kind.is_file() || kind.is_symlink())
            {
                continue;
            }
            let changed = changed_ms(&meta) >= cutoff_ms;
            if kind.is_dir() {
                pending.push(path);
            }
            found.push(Entry { name, changed });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// `names` NUL-separated in a scratch file, read back from its start.
fn listing(scratch: &Scratch, names: &[&str]) -> Result<fs::File, ApiError> {
    let mut list = scratch.temp().map_err(internal)?;
    for name in names {
        list.write_all(name.as_bytes()).map_err(internal)?;
        list.write_all(b"\0").map_err(internal)?;
    }
    reopen_at_start(list)
}

impl Scratch {
    /// Snapshots `workspace`: the entries changed since `since` (when it is this agent's
    /// time), else all of them, and the manifest of every path.
    pub fn snapshot(
        &self,
        workspace: &Path,
        run_as: RunAs,
        since: Since<'_>,
    ) -> Result<Snapshot, ApiError> {
        let taken_ms = now_ms();
        let since_ms = match since {
            Since::Agent(t) => (t.agent == agent_id()).then_some(t.ms),
            Since::Checkout(at) => at,
            Since::Start => None,
        }
        .map(|ms| ms.saturating_sub(CTIME_SLACK_MS));
        let entries = walk(workspace, since_ms.unwrap_or(0))?;
        let all: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        let manifest = listing(self, &all)?;
        let out = self.temp().map_err(internal)?;
        let write = [
            "of=".to_owned() + SNAPSHOT_MANIFEST,
            "status=none".to_owned(),
        ];
        let write: Vec<&str> = write.iter().map(String::as_str).collect();
        self.run_tool(
            "dd",
            workspace,
            run_as,
            &write,
            manifest,
            out.try_clone().map_err(internal)?,
        )?;
        let mut members: Vec<&str> = entries
            .iter()
            .filter(|e| e.changed)
            .map(|e| e.name.as_str())
            .collect();
        let files = members.len();
        members.push(SNAPSHOT_MANIFEST);
        let packed = self.tar_listed(workspace, run_as, &members, files);
        let removed = self.remove_manifest(workspace, run_as);
        let packed = packed?;
        removed?;
        Ok(Snapshot {
            packed,
            taken_ms,
            full: since_ms.is_none(),
        })
    }

    /// Packs exactly the entries `names` (directories without what they hold).
    fn tar_listed(
        &self,
        workspace: &Path,
        run_as: RunAs,
        names: &[&str],
        files: usize,
    ) -> Result<Packed, ApiError> {
        let list = listing(self, names)?;
        let out = self.temp().map_err(internal)?;
        let args = ["-czf", "-", "--null", "--no-recursion", "-T", "-"];
        let stdout = out.try_clone().map_err(internal)?;
        self.run_tool("tar", workspace, run_as, &args, list, stdout)?;
        self.packed(out, files)
    }

    fn remove_manifest(&self, workspace: &Path, run_as: RunAs) -> Result<(), ApiError> {
        let (stdin, stdout) = (
            self.temp().map_err(internal)?,
            self.temp().map_err(internal)?,
        );
        let args = ["-f", "--", SNAPSHOT_MANIFEST];
        self.run_tool("rm", workspace, run_as, &args, stdin, stdout)
    }

    /// After a job's last snapshot was unpacked: removes every entry its manifest does not
    /// list (what a step deleted, or what the checkout had and the step removed), then the
    /// manifest; how many entries went.
    pub fn prune(&self, workspace: &Path, run_as: RunAs) -> Result<usize, ApiError> {
        let out = self.temp().map_err(internal)?;
        let stdin = self.temp().map_err(internal)?;
        let args = ["--", SNAPSHOT_MANIFEST];
        self.run_tool(
            "cat",
            workspace,
            run_as,
            &args,
            stdin,
            out.try_clone().map_err(internal)?,
        )
        .map_err(|mut e| {
            e.code = "snapshot_manifest_missing".into();
            e
        })?;
        let mut text = Vec::new();
        reopen_at_start(out)?
            .read_to_end(&mut text)
            .map_err(internal)?;
        let kept: HashSet<&[u8]> = text.split(|b| *b == 0).filter(|n| !n.is_empty()).collect();
        let mut extra: Vec<&str> = Vec::new();
        let entries = walk(workspace, u64::MAX)?;
        for e in &entries {
            // Sorted: a removed directory's entries follow it, and go with it.
            let under_removed = extra
                .last()
                .is_some_and(|d| e.name.strip_prefix(d).is_some_and(|r| r.starts_with('/')));
            if !under_removed && !kept.contains(e.name.as_bytes()) {
                extra.push(&e.name);
            }
        }
        if !extra.is_empty() {
            let list = listing(self, &extra)?;
            let args = ["-0", "rm", "-rf", "--"];
            self.run_tool(
                "xargs",
                workspace,
                run_as,
                &args,
                list,
                self.temp().map_err(internal)?,
            )?;
        }
        self.remove_manifest(workspace, run_as)?;
        Ok(extra.len())
    }
}
