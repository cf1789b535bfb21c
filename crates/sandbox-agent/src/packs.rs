//! Commits this agent already fetched, kept as the pack git received, so that the next workspace
//! of the same repository at the same commit (a pipeline job that `needs` another, a retried
//! checkout) checks out with no fetch: the pack is hard-linked into the new workspace's `.git`.
//! A fetch is most of a checkout (a shallow one is two HTTP round trips and three git
//! processes on the server's side); on the path from a job's end to its dependent's command it
//! was about half the time.
//!
//! Trust: only isolated agents keep packs. A kept pack's files belong to the agent and are
//! read-only (0444), so the workspace user that fetched it, and every one it is linked to, can
//! read and unlink its own link but never change the bytes another workspace reads. The store
//! (`<root>/packs`, 0700) cannot be reached by workspace users at all. An entry is named by the
//! repository URL's SHA-256 and the commit, so a checkout of one repository is never served
//! another's objects. Packs are kept only from a fetch git made before any command of the
//! workspace ran (its processes were killed first), and git verified every object as it
//! indexed the pack.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use crate::limits::{PACK_STORE_AGE_MS, PACK_STORE_BYTES_MAX, PACK_STORE_ENTRIES_MAX};

/// Mode of the store: the agent's alone.
const STORE_MODE: u32 = 0o700;
/// Mode of a kept pack file: nobody writes it again.
const PACK_FILE_MODE: u32 = 0o444;

pub struct PackStore {
    /// `<root>/packs`.
    dir: PathBuf,
}

/// A complete entry: the files of one pack (`.pack`, `.idx`, and `.rev` when git wrote one).
pub struct Kept {
    entry: PathBuf,
    files: Vec<PathBuf>,
}

/// One kept pack takes at most this share of the store's bytes: a repository's full history
/// (a server that refused a fetch by sha) would otherwise push every other entry out.
const PACK_STORE_SHARE_MAX: u64 = 4;

impl PackStore {
    /// Opens (creating) `<root>/packs`, after checking the agent owns it.
    pub fn open(root: &Path) -> Result<Self, String> {
        let dir = root.join("packs");
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let meta = fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        if !meta.is_dir() || meta.uid() != euid() {
            return Err(format!(
                "{} is not a directory the agent owns",
                dir.display()
            ));
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(STORE_MODE))
            .map_err(|e| format!("cannot restrict {}: {e}", dir.display()))?;
        let store = PackStore { dir };
        store.evict(SystemTime::now());
        Ok(store)
    }

    fn entry(&self, url: &str, sha: &str) -> PathBuf {
        let url_hash = Sha256::digest(url.as_bytes());
        let hex: String = url_hash.iter().map(|b| format!("{b:02x}")).collect();
        self.dir.join(format!("{hex}-{sha}"))
    }

    /// The kept pack of `sha` fetched from `url`, if there is a complete one (`Kept::used`
    /// marks it used once it checked out).
    pub fn find(&self, url: &str, sha: &str) -> Option<Kept> {
        let entry = self.entry(url, sha);
        // Past its age an entry is gone for readers at once; its bytes go at
        // the next keep (eviction lists the store: not on every checkout).
        let used = fs::metadata(&entry).and_then(|m| m.modified()).ok()?;
        let age = SystemTime::now().duration_since(used).unwrap_or_default();
        if age > Duration::from_millis(PACK_STORE_AGE_MS) {
            return None;
        }
        let mut files: Vec<PathBuf> = fs::read_dir(&entry)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .collect();
        files.sort();
        let has = |ext: &str| {
            files
                .iter()
                .any(|f| f.extension().is_some_and(|e| e == ext))
        };
        if !has("pack") || !has("idx") {
            return None;
        }
        Some(Kept { entry, files })
    }

    /// Forgets the kept pack of `sha` from `url` (it did not check out): renamed aside first,
    /// so no new checkout links it while it goes.
    pub fn forget(&self, url: &str, sha: &str) {
        let entry = self.entry(url, sha);
        let aside = self.staging(sha);
        if fs::rename(&entry, &aside).is_ok() {
            let _ = fs::remove_dir_all(&aside);
        }
    }

    /// A fresh name in the store for an entry being made or removed.
    fn staging(&self, sha: &str) -> PathBuf {
        static STAGED: AtomicU64 = AtomicU64::new(0);
        let n = STAGED.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!(".new-{n}-{sha}"))
    }

    /// Keeps the pack a fetch just wrote into `pack_dir` (a workspace's `.git/objects/pack`)
    /// as the entry of `sha` from `url`: its files become the agent's and read-only, then are
    /// linked into the store. Nothing is kept unless the fetch wrote exactly one pack.
    pub fn keep(&self, url: &str, sha: &str, pack_dir: &Path) -> Result<(), String> {
        let entry = self.entry(url, sha);
        if entry.exists() {
            return Ok(());
        }
        let files = one_pack(pack_dir)?;
        // Only a store on the workspace's filesystem can link it (else the workspace's pack
        // would change hands for nothing), and only a pack that leaves room for others.
        let device = |p: &Path| fs::metadata(p).map(|m| m.dev()).ok();
        if device(pack_dir).is_none() || device(pack_dir) != device(&self.dir) {
            return Err("the store is on another filesystem than the workspaces".into());
        }
        let bytes: u64 = files
            .iter()
            .filter_map(|f| fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        if bytes > PACK_STORE_BYTES_MAX / PACK_STORE_SHARE_MAX {
            return Err(format!("the pack is {bytes} bytes, too large to keep"));
        }
        let staging = self.staging(sha);
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir(&staging).map_err(|e| format!("cannot create the entry: {e}"))?;
        let linked = files.iter().try_for_each(|f| {
            std::os::unix::fs::lchown(f, Some(euid()), Some(egid()))?;
            fs::set_permissions(f, fs::Permissions::from_mode(PACK_FILE_MODE))?;
            fs::hard_link(f, staging.join(f.file_name().unwrap_or_default()))
        });
        // Another checkout may have kept the same commit meanwhile: either entry is the same.
        let kept = linked.and_then(|()| fs::rename(&staging, &entry));
        let _ = fs::remove_dir_all(&staging);
        kept.map_err(|e| format!("cannot keep the pack: {e}"))?;
        self.evict(SystemTime::now());
        Ok(())
    }

    /// Removes entries unused for `PACK_STORE_AGE_MS`, then the least recently used ones while
    /// there are more than `PACK_STORE_ENTRIES_MAX` or they hold more than
    /// `PACK_STORE_BYTES_MAX`.
    pub fn evict(&self, now: SystemTime) {
        let Ok(read) = fs::read_dir(&self.dir) else {
            return;
        };
        let mut entries: Vec<(SystemTime, u64, PathBuf)> = read
            .flatten()
            .filter_map(|e| {
                let used = e.metadata().ok()?.modified().ok()?;
                Some((used, entry_bytes(&e.path()), e.path()))
            })
            .collect();
        entries.sort();
        let mut count = entries.len();
        let mut bytes: u64 = entries.iter().map(|(_, b, _)| b).sum();
        let age = Duration::from_millis(PACK_STORE_AGE_MS);
        for (used, size, path) in entries {
            let stale = now.duration_since(used).is_ok_and(|d| d > age);
            if !stale && count <= PACK_STORE_ENTRIES_MAX && bytes <= PACK_STORE_BYTES_MAX {
                break;
            }
            if fs::remove_dir_all(&path).is_ok() {
                count -= 1;
                bytes = bytes.saturating_sub(size);
            }
        }
    }
}

impl Kept {
    /// Marks the entry used (it checked out): the least recently used go first.
    pub fn used(&self) {
        let _ = fs::File::open(&self.entry).and_then(|f| f.set_modified(SystemTime::now()));
    }

    /// Hard-links the pack into `pack_dir` (a new workspace's `.git/objects/pack`).
    pub fn link_into(&self, pack_dir: &Path) -> Result<(), String> {
        for f in &self.files {
            let name = f.file_name().unwrap_or_default();
            fs::hard_link(f, pack_dir.join(name))
                .map_err(|e| format!("cannot link the kept pack: {e}"))?;
        }
        Ok(())
    }
}

/// The files of the one pack in `pack_dir`, each a regular file (never a link to elsewhere).
fn one_pack(pack_dir: &Path) -> Result<Vec<PathBuf>, String> {
    let read = fs::read_dir(pack_dir).map_err(|e| format!("cannot list the pack: {e}"))?;
    let mut files = Vec::new();
    for e in read.flatten() {
        let meta = fs::symlink_metadata(e.path()).map_err(|e| e.to_string())?;
        if !meta.file_type().is_file() {
            return Err(format!("{} is not a regular file", e.path().display()));
        }
        files.push(e.path());
    }
    let packs = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "pack"))
        .count();
    if packs != 1 || files.len() > 3 {
        return Err(format!("the fetch wrote {packs} packs, not one"));
    }
    Ok(files)
}

fn entry_bytes(entry: &Path) -> u64 {
    fs::read_dir(entry)
        .map(|r| {
            r.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn egid() -> u32 {
    // SAFETY: getegid has no preconditions.
    unsafe { libc::getegid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(name: &str) -> (PathBuf, PackStore) {
        let root = std::env::temp_dir().join(format!("sluice-packs-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(&root).expect("root");
        let store = PackStore::open(&root).expect("store");
        (root, store)
    }

    /// An entry of `bytes` bytes last used `ago` before `now`.
    fn entry(store: &PackStore, sha: &str, bytes: usize, now: SystemTime, ago: Duration) {
        let dir = store.entry("https://github.com/o/r.git", sha);
        fs::create_dir(&dir).expect("entry");
        fs::write(dir.join("pack-1.pack"), vec![0u8; bytes]).expect("pack");
        fs::write(dir.join("pack-1.idx"), b"").expect("idx");
        let used = fs::File::open(&dir).expect("open");
        used.set_modified(now - ago).expect("mtime");
    }

    #[test]
    fn eviction_drops_stale_entries_then_the_least_recently_used_over_the_count() {
        let (root, store) = store("evict");
        let now = SystemTime::now();
        let tick = Duration::from_secs(1);
        let stale = Duration::from_millis(PACK_STORE_AGE_MS) + tick;
        entry(&store, &"a".repeat(40), 10, now, stale);
        for i in 0..PACK_STORE_ENTRIES_MAX {
            let sha = format!("{i:040x}");
            entry(
                &store,
                &sha,
                10,
                now,
                tick * (PACK_STORE_ENTRIES_MAX - i) as u32,
            );
        }
        entry(&store, &"f".repeat(40), 10, now, Duration::ZERO);
        store.evict(now);
        let url = "https://github.com/o/r.git";
        assert!(store.find(url, &"a".repeat(40)).is_none(), "stale");
        // One over the count: the least recently used of the rest goes.
        assert!(store.find(url, &format!("{:040x}", 0)).is_none(), "oldest");
        assert!(store.find(url, &format!("{:040x}", 1)).is_some());
        assert!(store.find(url, &"f".repeat(40)).is_some(), "newest");
        // Another repository's URL finds nothing at the same commit.
        assert!(store
            .find("https://github.com/o/other.git", &"f".repeat(40))
            .is_none());
        let _ = fs::remove_dir_all(root);
    }

    #[test]
    fn an_entry_without_its_index_is_not_found() {
        let (root, store) = store("partial");
        let dir = store.entry("u", &"b".repeat(40));
        fs::create_dir(&dir).expect("entry");
        fs::write(dir.join("pack-1.pack"), b"x").expect("pack");
        assert!(store.find("u", &"b".repeat(40)).is_none());
        let _ = fs::remove_dir_all(root);
    }
}
