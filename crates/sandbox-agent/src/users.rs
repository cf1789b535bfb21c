//! Who a child runs as, and how everything it started is killed.
//!
//! Isolated (the default; the agent runs as root): each workspace has an unprivileged uid of its
//! own (`uid_block`), so one workspace's commands cannot read another's files or
//! `/proc/<pid>/environ`, nor the agent's, and a kill reaches every process of that uid,
//! including those that left the command's process group (`setsid`, a double fork).
//! `--unisolated`: children run as the agent's own user, and a kill reaches the process group.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::limits::{KILL_CONFIRM_MS, SWEEP_ENTRIES_MAX, WAIT_POLL_MS_MAX, WAIT_POLL_MS_MIN};

/// Who a child runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunAs {
    /// The agent's own user (`--unisolated`).
    Agent,
    /// A workspace's own user; its gid is the same number.
    User(u32),
}

impl RunAs {
    /// Sets up `command`'s child between fork and exec: a session of its own, then (for a
    /// workspace user) no supplementary groups, the user's gid and uid, then umask 077.
    ///
    /// The new session leaves the agent's controlling terminal, so a command cannot push
    /// keystrokes into the terminal the agent was started from (TIOCSTI), and makes the child
    /// the leader of a new process group, which `kill_group` signals. The umask keeps what a
    /// command writes (in its workspace, in /tmp) its own.
    pub fn prepare(self, command: &mut Command) {
        let user = match self {
            RunAs::Agent => None,
            RunAs::User(uid) => Some(uid),
        };
        // SAFETY: the hook runs in the forked child before exec and only makes system calls
        // (setsid, setgroups, setgid, setuid, umask, prctl, getppid), which are
        // async-signal-safe, and builds io::Errors from errno without allocating.
        let agent = std::process::id();
        unsafe {
            command.pre_exec(move || {
                check(libc::setsid())?;
                if let Some(uid) = user {
                    become_user(uid)?;
                }
                libc::umask(0o077);
                die_with_the_agent(agent)
            });
        }
    }

    /// Kills the process group `pgid` and, for a workspace user, every process of that user,
    /// confirming none is left; Err names what survived.
    pub fn kill(self, pgid: u32) -> Result<(), String> {
        kill_group(pgid);
        match self {
            RunAs::Agent => Ok(()),
            RunAs::User(uid) => kill_user(uid),
        }
    }
}

/// In the forked child: SIGKILL when the agent dies, as a container's processes die with it,
/// so a command never finishes unobserved after a crash of its sandbox host (the next agent
/// would run it again). Set after the uid change, which clears it; a parent that died before
/// it was set is seen by the parent pid changing. What the command started itself is killed by
/// the next agent, which kills every process of its uids before it serves.
fn die_with_the_agent(agent: u32) -> io::Result<()> {
    // SAFETY (the caller's): prctl and getppid are async-signal-safe.
    check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) })?;
    if unsafe { libc::getppid() } as u32 != agent {
        // From errno, as everything in the forked child: no allocation between fork and exec.
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    Ok(())
}

fn check(result: libc::c_int) -> io::Result<()> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// setgroups([]), setgid, setuid, in that order: the first two need the privilege that setuid
/// gives up. As root, setuid sets the real, effective and saved uid, so there is no way back.
///
/// # Safety
/// Only call in a forked child before exec (or in a single-threaded process).
unsafe fn become_user(uid: u32) -> io::Result<()> {
    check(libc::setgroups(0, std::ptr::null()))?;
    check(libc::setgid(uid))?;
    check(libc::setuid(uid))
}

/// SIGKILLs every process in the group led by `pgid` (a child made by `RunAs::prepare` leads
/// its own), so grandchildren like a backgrounded `sleep` die too.
pub fn kill_group(pgid: u32) {
    match i32::try_from(pgid) {
        // kill(0) and kill(-1) would hit our own group or every process we may signal.
        Ok(pgid) if pgid > 1 => {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        _ => {}
    }
}

/// Kills every process of `uid` and confirms that none is left, within `KILL_CONFIRM_MS`. A
/// process that is gone but not yet reaped (a zombie) counts as gone: it runs nothing and holds
/// no open file.
pub fn kill_user(uid: u32) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(KILL_CONFIRM_MS);
    let mut poll_ms = WAIT_POLL_MS_MIN;
    // Bounded by `deadline`.
    loop {
        let left = live_processes(|u| u == uid);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let pids: Vec<u32> = left.iter().map(|(pid, _)| *pid).collect();
            return Err(format!(
                "processes of uid {uid} still run {KILL_CONFIRM_MS} ms after SIGKILL: pids {pids:?}"
            ));
        }
        as_user(uid, true).map_err(|e| format!("cannot signal the processes of uid {uid}: {e}"))?;
        thread::sleep(Duration::from_millis(poll_ms));
        poll_ms = (poll_ms * 2).min(WAIT_POLL_MS_MAX);
    }
}

/// Proves the agent can become `uid` (what isolation needs): a forked child switches and exits.
pub fn probe(uid: u32) -> io::Result<()> {
    as_user(uid, false)
}

/// In a forked child that became `uid`: kill(-1, SIGKILL) when `kill`, then exit without exec.
/// POSIX kill(-1) signals every process the caller may signal, which for an unprivileged uid is
/// every process whose real or saved uid is that uid, however it detached; the caller itself is
/// spared. The uid is the whole of what a workspace runs, so nothing of it escapes.
fn as_user(uid: u32, kill: bool) -> io::Result<()> {
    // Never executed: the hook ends the child before exec.
    let mut helper = Command::new("/nonexistent/sluice-sandbox-agent-kill-helper");
    helper
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: the hook runs in the forked child before exec and only makes system calls
    // (setgroups, setgid, setuid, kill, _exit).
    unsafe {
        helper.pre_exec(move || {
            become_user(uid)?;
            if kill {
                libc::kill(-1, libc::SIGKILL);
            }
            libc::_exit(0)
        });
    }
    let status = helper.spawn()?.wait()?;
    if status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!("the helper ended with {status}")))
    }
}

/// A process as `/proc/<pid>/status` describes it: its state letter and its real, effective
/// and saved uids.
#[derive(Debug, PartialEq, Eq)]
struct Status {
    state: char,
    uids: [u32; 3],
}

fn parse_status(text: &str) -> Option<Status> {
    let mut state = None;
    let mut uids = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("State:") {
            state = rest.trim_start().chars().next();
        } else if let Some(rest) = line.strip_prefix("Uid:") {
            let mut ids = rest.split_whitespace().map(|s| s.parse::<u32>().ok());
            let (Some(Some(r)), Some(Some(e)), Some(Some(s))) =
                (ids.next(), ids.next(), ids.next())
            else {
                return None;
            };
            uids = Some([r, e, s]);
        }
    }
    Some(Status {
        state: state?,
        uids: uids?,
    })
}

/// Live (not zombie, not dead) processes with a real, effective or saved uid that `matches`,
/// as (pid, uid). Bounded by the number of processes; a process that ends while we read is
/// skipped.
pub fn live_processes(matches: impl Fn(u32) -> bool) -> Vec<(u32, u32)> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(text) = fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let Some(status) = parse_status(&text) else {
            continue;
        };
        if matches!(status.state, 'Z' | 'X' | 'x') {
            continue;
        }
        if let Some(uid) = status.uids.iter().copied().find(|u| matches(*u)) {
            found.push((pid, uid));
        }
    }
    found
}

/// The uids among `matches` that have a live process.
pub fn uids_with_processes(matches: impl Fn(u32) -> bool) -> BTreeSet<u32> {
    live_processes(matches)
        .into_iter()
        .map(|(_, uid)| uid)
        .collect()
}

/// The world-writable directories where any user may leave files that outlive its workspace:
/// a later workspace given the same uid would own them, so they go when the uid is released.
const SHARED_DIRS: &[&str] = &["/tmp", "/var/tmp", "/dev/shm", "/run/lock"];

/// Removes what the uids that `owned` selects left in `SHARED_DIRS`: an entry such a uid owns
/// goes whole (symlinks are not followed), and only world-writable directories are searched,
/// the only places those uids could have written. At most `SWEEP_ENTRIES_MAX` entries are
/// looked at; past that it stops with an error (the caller keeps the uid out of use).
pub fn sweep_files(owned: impl Fn(u32) -> bool) -> Result<usize, String> {
    let mut pending: Vec<PathBuf> = SHARED_DIRS.iter().map(PathBuf::from).collect();
    let (mut seen, mut removed) = (0usize, 0usize);
    while let Some(dir) = pending.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > SWEEP_ENTRIES_MAX {
                return Err(format!(
                    "more than {SWEEP_ENTRIES_MAX} entries under {SHARED_DIRS:?}; stopped"
                ));
            }
            let path = entry.path();
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            if owned(meta.uid()) {
                if remove_entry(&path, meta.is_dir()).is_ok() {
                    removed += 1;
                }
            } else if meta.is_dir() && meta.mode() & 0o002 != 0 {
                pending.push(path);
            }
        }
    }
    Ok(removed)
}

fn remove_entry(path: &Path, is_dir: bool) -> io::Result<()> {
    if is_dir {
        fs::remove_dir_all(path)
    } else {
        fs::remove_file(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_state_and_uids() {
        let text = "Name:\tsleep\nUmask:\t0077\nState:\tS (sleeping)\nTgid:\t7\n\
                    Uid:\t200001\t200002\t200003\t200001\nGid:\t5\t5\t5\t5\n";
        assert_eq!(
            parse_status(text),
            Some(Status {
                state: 'S',
                uids: [200001, 200002, 200003]
            })
        );
        assert_eq!(parse_status("State:\tZ (zombie)\n"), None, "no Uid line");
        assert_eq!(parse_status("State:\tR\nUid:\t1\tx\t1\t1\n"), None);
    }

    #[test]
    fn finds_our_own_process_by_uid() {
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        let pids: Vec<u32> = live_processes(|u| u == me)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert!(pids.contains(&std::process::id()), "{pids:?}");
    }
}
