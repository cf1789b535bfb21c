//! The uids this agent gives its workspaces: one block of `UIDS_PER_AGENT` ids per agent,
//! claimed host-wide with a lock file so that two agents on one host (two local stacks, the
//! tests' agents) never hand out the same uid, and `Allocation`, the pure table of which
//! workspace holds which uid of the block.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// First uid of the first block. Above the ids distributions give people and services (below
/// 65536) and the first /etc/subuid allocation (100000-165535), below systemd-nspawn's
/// container range (from 524288). A block that overlaps an id of /etc/passwd, /etc/group,
/// /etc/subuid or /etc/subgid is skipped anyway.
pub const UID_BASE: u32 = 200_000;

/// Uids one agent hands out, so workspaces it keeps at once. A container's agent keeps one, a
/// local agent one per run instance until the run ends (the pool admits 8 by default); 1024
/// leaves room for runs whose workspaces outlive them, and (handed out round robin) keeps a
/// released uid unused for the next 1023 allocations.
pub const UIDS_PER_AGENT: u32 = 1_024;

/// Agents one host may run at once (each local stack and each test's agent claims a block).
pub const AGENTS_PER_HOST_MAX: u32 = 64;

const _: () = assert!(UID_BASE >= 165_536, "above the first subordinate-id range");
const _: () = assert!(
    UID_BASE as u64 + UIDS_PER_AGENT as u64 * AGENTS_PER_HOST_MAX as u64 <= 524_288,
    "below systemd-nspawn's container uids"
);

/// Where the agents of a host record their blocks: a root-only directory on tmpfs, so the
/// records go with a reboot, when no agent runs either.
const LOCK_DIR: &str = "/run/sluice-sandbox-agent";

/// Files whose ids a block must not overlap: users, groups, and the subordinate ids that
/// rootless containers map to host uids.
const ID_FILES: &[(&str, IdFile)] = &[
    ("/etc/passwd", IdFile::Passwd),
    ("/etc/group", IdFile::Group),
    ("/etc/subuid", IdFile::Subordinate),
    ("/etc/subgid", IdFile::Subordinate),
];

#[derive(Clone, Copy)]
enum IdFile {
    Passwd,
    Group,
    Subordinate,
}

/// The block this agent holds for as long as it runs: `first..first + UIDS_PER_AGENT`, and the
/// locked file that records it (the lock ends with the process).
pub struct UidBlock {
    pub first: u32,
    _lock: File,
}

impl UidBlock {
    pub fn contains(&self, uid: u32) -> bool {
        (self.first..self.first + UIDS_PER_AGENT).contains(&uid)
    }

    /// Claims a block for the agent serving `root` (canonical): the block last recorded for
    /// this root if it is free (a restarted agent finds its workspaces' uids again), else the
    /// first free block that overlaps no reserved id and whose last root has no workspaces left.
    pub fn claim(root: &Path) -> Result<UidBlock, String> {
        let dir = Path::new(LOCK_DIR);
        prepare_lock_dir(dir)?;
        let reserved = reserved_ids();
        let root_text = root.to_string_lossy().into_owned();
        let mut order: Vec<u32> = (0..AGENTS_PER_HOST_MAX).collect();
        let records: Vec<Option<String>> = order.iter().map(|i| record(dir, *i)).collect();
        if let Some(mine) = records
            .iter()
            .position(|r| r.as_deref() == Some(&root_text))
        {
            order.retain(|i| *i as usize != mine);
            order.insert(0, mine as u32);
        }
        for index in order {
            let first = UID_BASE + index * UIDS_PER_AGENT;
            if overlaps(&reserved, first) {
                continue;
            }
            let path = dir.join(format!("block-{index}"));
            let mut file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(TryLockError::WouldBlock) => {
                    if records[index as usize].as_deref() == Some(&root_text) {
                        return Err(format!(
                            "another agent already serves --root {root_text} (uid block {first})"
                        ));
                    }
                    continue;
                }
                Err(TryLockError::Error(e)) => {
                    return Err(format!("cannot lock {}: {e}", path.display()))
                }
            }
            let last = read_record(&mut file);
            if !last.is_empty() && last != root_text && has_workspaces(Path::new(&last)) {
                // Its agent is gone but its workspaces (owned by these uids) are still on
                // disk: a workspace of ours could read them. Leave the block to that root.
                continue;
            }
            write_record(&mut file, &root_text)
                .map_err(|e| format!("cannot record {}: {e}", path.display()))?;
            return Ok(UidBlock { first, _lock: file });
        }
        Err(format!(
            "no free uid block: {AGENTS_PER_HOST_MAX} agents run on this host, or their \
             blocks are reserved (see {LOCK_DIR})"
        ))
    }
}

fn prepare_lock_dir(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let meta = fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() || meta.uid() != me {
        return Err(format!(
            "{} must be a directory owned by uid {me}",
            dir.display()
        ));
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))
}

/// The root recorded for block `index`, if any (read without locking: only a hint of order).
fn record(dir: &Path, index: u32) -> Option<String> {
    fs::read_to_string(dir.join(format!("block-{index}")))
        .ok()
        .filter(|s| !s.is_empty())
}

fn read_record(file: &mut File) -> String {
    let mut text = String::new();
    match file.read_to_string(&mut text) {
        Ok(_) => text,
        Err(_) => String::new(),
    }
}

fn write_record(file: &mut File, root: &str) -> std::io::Result<()> {
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(root.as_bytes())
}

fn has_workspaces(root: &Path) -> bool {
    fs::read_dir(root.join("workspaces")).is_ok_and(|mut entries| entries.next().is_some())
}

/// Ids in use or delegated on this host, as inclusive ranges.
fn reserved_ids() -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    for (path, kind) in ID_FILES {
        if let Ok(text) = fs::read_to_string(path) {
            ranges.extend(parse_ids(&text, *kind));
        }
    }
    ranges
}

fn parse_ids(text: &str, kind: IdFile) -> Vec<(u64, u64)> {
    let mut ranges = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        let number = |i: usize| fields.get(i).and_then(|f| f.trim().parse::<u64>().ok());
        match kind {
            IdFile::Passwd => {
                ranges.extend([number(2), number(3)].into_iter().flatten().map(|u| (u, u)))
            }
            IdFile::Group => ranges.extend(number(2).map(|g| (g, g))),
            IdFile::Subordinate => {
                if let (Some(start), Some(count)) = (number(1), number(2)) {
                    if count > 0 {
                        ranges.push((start, start + count - 1));
                    }
                }
            }
        }
    }
    ranges
}

fn overlaps(reserved: &[(u64, u64)], first: u32) -> bool {
    let (lo, hi) = (first as u64, first as u64 + UIDS_PER_AGENT as u64 - 1);
    reserved.iter().any(|(a, b)| *a <= hi && lo <= *b)
}

/// Which workspace holds which uid of a block. A workspace keeps its uid from its first
/// checkout until it is deleted; uids are handed out round robin so a released one stays
/// unused as long as possible.
pub struct Allocation {
    first: u32,
    by_workspace: BTreeMap<String, u32>,
    /// Offset of the next uid to try.
    cursor: u32,
}

impl Allocation {
    pub fn new(first: u32) -> Self {
        Allocation {
            first,
            by_workspace: BTreeMap::new(),
            cursor: 0,
        }
    }

    pub fn get(&self, workspace: &str) -> Option<u32> {
        self.by_workspace.get(workspace).copied()
    }

    fn taken(&self, uid: u32) -> bool {
        self.by_workspace.values().any(|u| *u == uid)
    }

    /// Records what a workspace found on disk holds; false (nothing recorded) when `uid` is
    /// outside the block or already held.
    pub fn adopt(&mut self, workspace: &str, uid: u32) -> bool {
        let offset = uid.wrapping_sub(self.first);
        if offset >= UIDS_PER_AGENT || self.taken(uid) || self.get(workspace).is_some() {
            return false;
        }
        self.by_workspace.insert(workspace.to_owned(), uid);
        self.cursor = (offset + 1) % UIDS_PER_AGENT;
        true
    }

    /// The workspace's uid, or the next free one (held by no workspace, and no process runs as
    /// it: `busy`), or None when the block is full.
    pub fn assign(&mut self, workspace: &str, busy: impl Fn(u32) -> bool) -> Option<u32> {
        if let Some(uid) = self.get(workspace) {
            return Some(uid);
        }
        // Bounded by the block's size.
        for step in 0..UIDS_PER_AGENT {
            let offset = (self.cursor + step) % UIDS_PER_AGENT;
            let uid = self.first + offset;
            if !self.taken(uid) && !busy(uid) {
                self.by_workspace.insert(workspace.to_owned(), uid);
                self.cursor = (offset + 1) % UIDS_PER_AGENT;
                return Some(uid);
            }
        }
        None
    }

    /// Frees the workspace's uid; call only once nothing runs as it.
    pub fn release(&mut self, workspace: &str) -> Option<u32> {
        self.by_workspace.remove(workspace)
    }

    pub fn holds(&self, uid: u32) -> bool {
        self.taken(uid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assigns_round_robin_and_reuses_only_after_release() {
        let mut a = Allocation::new(UID_BASE);
        assert_eq!(a.assign("a", |_| false), Some(UID_BASE));
        assert_eq!(a.assign("a", |_| false), Some(UID_BASE), "a keeps its uid");
        assert_eq!(a.assign("b", |_| false), Some(UID_BASE + 1));
        assert_eq!(a.release("a"), Some(UID_BASE));
        // The released uid is not handed out next.
        assert_eq!(a.assign("c", |_| false), Some(UID_BASE + 2));
        // A uid with a live process is skipped.
        assert_eq!(a.assign("d", |u| u == UID_BASE + 3), Some(UID_BASE + 4));
    }

    #[test]
    fn a_full_block_assigns_nothing_and_wraps_after_release() {
        let mut a = Allocation::new(UID_BASE);
        for i in 0..UIDS_PER_AGENT {
            assert!(a.assign(&format!("w{i}"), |_| false).is_some());
        }
        assert_eq!(a.assign("over", |_| false), None);
        a.release("w5");
        assert_eq!(a.assign("over", |_| false), Some(UID_BASE + 5));
    }

    #[test]
    fn adopt_refuses_foreign_and_duplicate_uids() {
        let mut a = Allocation::new(UID_BASE);
        assert!(a.adopt("a", UID_BASE + 7));
        assert!(!a.adopt("b", UID_BASE + 7), "one uid, one workspace");
        assert!(!a.adopt("c", UID_BASE - 1));
        assert!(!a.adopt("d", UID_BASE + UIDS_PER_AGENT));
        assert!(a.holds(UID_BASE + 7));
        assert_eq!(
            a.assign("e", |_| false),
            Some(UID_BASE + 8),
            "after adopted"
        );
    }

    #[test]
    fn reserved_ids_skip_overlapping_blocks() {
        let passwd = "root:x:0:0::/root:/bin/sh\nodd:x:200500:7::/:/bin/sh\nbroken\n";
        let sub = "alice:100000:65536\nbob:201024:10\nzero:300000:0\n";
        let mut reserved = parse_ids(passwd, IdFile::Passwd);
        reserved.extend(parse_ids(sub, IdFile::Subordinate));
        assert!(reserved.contains(&(200_500, 200_500)));
        assert!(reserved.contains(&(201_024, 201_033)));
        assert!(
            overlaps(&reserved, UID_BASE),
            "200500 is in the first block"
        );
        assert!(
            overlaps(&reserved, UID_BASE + UIDS_PER_AGENT),
            "bob's range"
        );
        assert!(!overlaps(&reserved, UID_BASE + 2 * UIDS_PER_AGENT));
        assert_eq!(parse_ids("g:x:42:\n", IdFile::Group), vec![(42, 42)]);
    }
}
