//! A workspace as a snapshot between two steps of a job (`steps = [...]`), and back: ADR-0015
//! (`docs/adr/0015-multi-step-jobs-resume-from-snapshots.md`).
//!
//! A snapshot holds every entry (file, link, fifo, directory; `.git` too) that changed since a
//! baseline: the tree as this agent saw it at the job's checkout or at its last snapshot (each
//! path's inode). An entry changed when its path or inode is not the baseline's (it was made,
//! moved or replaced: a moved directory's whole subtree is new paths) or its data or status
//! changed since (ctime, which no command of the workspace's user can set back; a package
//! manager sets mtimes to 1985). Without the baseline `since` names (another agent's time, an
//! agent restarted since, a lost answer's retry) the snapshot is whole. It also holds the
//! manifest of every path; the job's snapshots unpacked in order over a fresh checkout, then
//! pruned to the last manifest, are the tree that last snapshot saw.
//!
//! Names are bytes (any a file system holds but NUL). As for archives, the agent only lists;
//! `tar`, `dd`, `cat`, `rm` and `xargs` run as the workspace's user.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_sandbox_protocol::SNAPSHOT_MANIFEST;

use crate::archive::{internal, reopen_at_start, Packed, Scratch};
use crate::error::ApiError;
use crate::limits::ARCHIVE_ENTRIES_MAX;
use crate::users::RunAs;

/// A change this long before the baseline is taken again: the kernel stamps ctime from a
/// coarse clock that may lag the clock the baseline's time was read from by one tick (1 to
/// 10 ms); 100 ms is ten ticks at the slowest rate and costs only the files changed in it.
const CTIME_SLACK_MS: u64 = 100;

/// Where a workspace's objects live (`content_addressed`).
const GIT_OBJECTS: &[u8] = b".git/objects/";
/// The marker of a checkout fetched at depth 1 (the agent's usual); a full-history fetch (its
/// fallback) leaves none. A chain taken over one shape does not restore over the other.
const GIT_SHALLOW: &[u8] = b".git/shallow";

/// A git object or pack, named by its content: never pruned (one more is harmless, and a fresh
/// checkout's pack may be named otherwise than the one the manifest saw), and judged changed
/// by path and inode alone (a kept pack's hard links change its ctime, never its bytes).
fn content_addressed(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(GIT_OBJECTS) else {
        return false;
    };
    let hex = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_hexdigit);
    if let Some(pack) = rest.strip_prefix(b"pack/pack-") {
        return [&b".pack"[..], b".idx", b".rev", b".bitmap"]
            .iter()
            .any(|ext| pack.strip_suffix(*ext).is_some_and(hex));
    }
    matches!(rest.split(|b| *b == b'/').collect::<Vec<_>>().as_slice(),
        [dir, file] if dir.len() == 2 && hex(dir) && file.len() == 38 && hex(file))
}

/// A snapshot made: the archive, when its walk began (by this agent's clock), whether it holds
/// every entry, and the tree it saw (the next one's baseline).
pub struct Snapshot {
    pub packed: Packed,
    pub taken_ms: u64,
    pub full: bool,
    pub baseline: Option<Baseline>,
}

impl Snapshot {
    /// An archive of matching files answered as a snapshot's would be: whole, taken now.
    pub fn plain(packed: Packed) -> Self {
        Snapshot {
            packed,
            taken_ms: now_ms(),
            full: true,
            baseline: None,
        }
    }
}

/// A workspace's tree as this agent saw it at `ms`: each path's inode and change time.
pub struct Baseline {
    pub ms: u64,
    seen: HashMap<Vec<u8>, (u64, u64)>,
}

impl Baseline {
    /// The tree of `workspace` now.
    pub fn of(workspace: &Path) -> Result<Baseline, ApiError> {
        let ms = now_ms();
        Ok(Baseline::from_walk(ms, walk(workspace)?))
    }

    fn from_walk(ms: u64, entries: Vec<Entry>) -> Baseline {
        let seen = entries
            .into_iter()
            .map(|e| (e.name, (e.ino, e.changed_ms)))
            .collect();
        Baseline { ms, seen }
    }

    /// Whether `e` is not as this baseline saw it: another path or inode; for all but
    /// content-addressed objects, another change time (a file system that keeps whole seconds,
    /// a clock stepped back) or one since the baseline, less the slack.
    fn differs(&self, e: &Entry) -> bool {
        let Some(&(ino, changed_ms)) = self.seen.get(&e.name) else {
            return true;
        };
        ino != e.ino
            || (!content_addressed(&e.name)
                && (changed_ms != e.changed_ms
                    || e.changed_ms >= self.ms.saturating_sub(CTIME_SLACK_MS)))
    }
}

/// One entry of a workspace's walk.
struct Entry {
    /// Its path in the workspace, as the file system's bytes.
    name: Vec<u8>,
    ino: u64,
    /// The later of its data and status change, in ms since the epoch.
    changed_ms: u64,
}

pub fn now_ms() -> u64 {
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

/// Every entry under `workspace` but sockets (never following a link, never the manifest),
/// sorted by name.
fn walk(workspace: &Path) -> Result<Vec<Entry>, ApiError> {
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
            let (Ok(kind), Ok(meta)) = (entry.file_type(), entry.metadata()) else {
                continue;
            };
            let name = path.as_os_str().as_bytes().to_vec();
            if name == SNAPSHOT_MANIFEST.as_bytes() || kind.is_socket() {
                continue;
            }
            if kind.is_dir() {
                pending.push(path);
            }
            found.push(Entry {
                name,
                ino: meta.ino(),
                changed_ms: changed_ms(&meta),
            });
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

impl Scratch {
    /// Snapshots `workspace`: the entries that differ from `baseline`, else all of them, and
    /// the manifest of every path.
    pub fn snapshot(
        &self,
        workspace: &Path,
        run_as: RunAs,
        baseline: Option<&Baseline>,
    ) -> Result<Snapshot, ApiError> {
        let taken_ms = now_ms();
        let entries = walk(workspace)?;
        let all: Vec<&[u8]> = entries.iter().map(|e| e.name.as_slice()).collect();
        self.write_manifest(workspace, run_as, &all)?;
        let mut members: Vec<&[u8]> = entries
            .iter()
            .filter(|e| baseline.is_none_or(|b| b.differs(e)))
            .map(|e| e.name.as_slice())
            .collect();
        let files = members.len();
        members.push(SNAPSHOT_MANIFEST.as_bytes());
        let packed = self.tar_listed(workspace, run_as, &members, files);
        let removed = self.remove_manifest(workspace, run_as);
        let packed = packed?;
        removed?;
        Ok(Snapshot {
            packed,
            taken_ms,
            full: baseline.is_none(),
            baseline: Some(Baseline::from_walk(taken_ms, entries)),
        })
    }

    /// Writes the manifest into the workspace as its user: never through a link or over a
    /// file already there (`conv=excl`), which `rm` removes first (the name is Sluice's).
    fn write_manifest(&self, ws: &Path, run_as: RunAs, names: &[&[u8]]) -> Result<(), ApiError> {
        self.remove_manifest(ws, run_as)?;
        let manifest = self.listing(names)?;
        let out = self.temp().map_err(internal)?;
        let of = format!("of={SNAPSHOT_MANIFEST}");
        let args = [of.as_str(), "conv=excl", "status=none"];
        self.run_tool("dd", ws, run_as, &args, manifest, out)
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
    /// list (what a step deleted, or what the checkout had and the step removed), never a git
    /// object or pack, then the manifest; how many entries went. A chain over a checkout of
    /// another shape (shallow or full) is refused: its objects are not the ones the tree needs.
    pub fn prune(&self, workspace: &Path, run_as: RunAs) -> Result<usize, ApiError> {
        let out = self.temp().map_err(internal)?;
        let stdin = self.temp().map_err(internal)?;
        let args = ["--", SNAPSHOT_MANIFEST];
        let copy = out.try_clone().map_err(internal)?;
        self.run_tool("cat", workspace, run_as, &args, stdin, copy)
            .map_err(|mut e| {
                e.code = "snapshot_manifest_missing".into();
                e
            })?;
        let mut text = Vec::new();
        reopen_at_start(out)?
            .read_to_end(&mut text)
            .map_err(internal)?;
        let kept: HashSet<&[u8]> = text.split(|b| *b == 0).filter(|n| !n.is_empty()).collect();
        let entries = walk(workspace)?;
        let shallow = entries.iter().any(|e| e.name == GIT_SHALLOW);
        if shallow != kept.contains(GIT_SHALLOW) {
            self.remove_manifest(workspace, run_as)?;
            return Err(ApiError::new(
                422,
                "snapshot_base_differs",
                "the checkout under the snapshots was fetched otherwise (shallow or full) than \
                 the one they were taken over",
            ));
        }
        let extra = extras(&entries, &kept);
        if !extra.is_empty() {
            let list = self.listing(&extra)?;
            let args = ["-0", "rm", "-rf", "--"];
            let out = self.temp().map_err(internal)?;
            self.run_tool("xargs", workspace, run_as, &args, list, out)?;
        }
        self.remove_manifest(workspace, run_as)?;
        Ok(extra.len())
    }
}

/// The entries `kept` does not list, outermost only (a removed directory takes what it
/// holds), never a git object or pack.
fn extras<'e>(entries: &'e [Entry], kept: &HashSet<&[u8]>) -> Vec<&'e [u8]> {
    let mut extra: Vec<&[u8]> = Vec::new();
    let mut removed: HashSet<&[u8]> = HashSet::new();
    for e in entries {
        let name = e.name.as_slice();
        // Sorted, so a directory comes before what it holds.
        let under_removed = name
            .iter()
            .enumerate()
            .any(|(i, b)| *b == b'/' && removed.contains(&name[..i]));
        if !under_removed && !content_addressed(name) && !kept.contains(name) {
            extra.push(name);
            removed.insert(name);
        }
    }
    extra
}

#[cfg(test)]
mod tests {
    use super::content_addressed;

    #[test]
    fn only_objects_and_packs_named_by_their_content_are_content_addressed() {
        for name in [
            ".git/objects/ab/0123456789abcdef0123456789abcdef012345",
            ".git/objects/pack/pack-0123abcd.pack",
            ".git/objects/pack/pack-0123abcd.idx",
            ".git/objects/pack/pack-0123abcd.rev",
        ] {
            assert!(content_addressed(name.as_bytes()), "{name}");
        }
        for name in [
            ".git/objects/info/alternates",
            ".git/objects/pack/pack-0123abcd.keep",
            ".git/objects/pack/multi-pack-index",
            ".git/objects/ab",
            ".git/objects/zz/0123456789abcdef0123456789abcdef012345",
            ".git/shallow",
            "src/objects/ab/0123456789abcdef0123456789abcdef012345",
        ] {
            assert!(!content_addressed(name.as_bytes()), "{name}");
        }
    }
}
