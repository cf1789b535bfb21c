//! The host's toolchains, made reachable to the workspace users read-only.
//!
//! The agent gives commands its own PATH. Run as root by `npm start`, that PATH often names
//! toolchains installed in root's home (rustup's `~/.cargo/bin`, nvm's
//! `~/.nvm/versions/node/<v>/bin`), which a workspace's unprivileged user cannot reach (`/root`
//! is mode 700): `cargo test` would end with exit 127 after 0 s. Such a PATH entry's toolchain
//! (the directory holding its `bin`) is bind-mounted read-only, in a mount namespace of the
//! command's own, onto `<root>/.host-tools/<n>`, which the user can reach, and the entry is
//! rewritten to point there; rustup's home (`~/.rustup`) comes along as `RUSTUP_HOME`. The
//! host's own directories never change mode, and a command cannot write into a toolchain.
//!
//! A command's writable state stays its own: `CARGO_HOME` and npm's cache default to the
//! workspace's `HOME`. Where the mount namespace cannot be made (a container without
//! CAP_SYS_ADMIN, whose toolchains are installed system-wide anyway), nothing is mounted and
//! the agent says at startup which entries the workspaces cannot reach.

use std::ffi::{CString, OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// The directory under the agent's root holding the mount points. Workspace ids are
/// `[A-Za-z0-9_-]`, so no workspace is ever named like it.
const TOOLS_DIR: &str = ".host-tools";

/// PATH entries exposed at most: a PATH of more toolchains than this is not a developer's.
const EXPOSED_MAX: usize = 16;

/// One read-only bind mount made in a command's mount namespace.
struct Mount {
    source: CString,
    target: CString,
}

/// What commands see of the host's toolchains: the PATH they get, extra environment, and the
/// mounts that make both reachable.
#[derive(Clone)]
pub struct HostTools {
    path: OsString,
    env: Vec<(String, OsString)>,
    mounts: Arc<Vec<Mount>>,
}

/// Whether a user that is neither the owner nor in the group may traverse `dir` and every
/// directory above it (the permission a workspace user has).
pub fn reachable_by_others(dir: &Path) -> bool {
    dir.ancestors()
        .all(|d| fs::metadata(d).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o001 != 0))
}

impl HostTools {
    /// The agent's PATH as it is, nothing mounted (`--unisolated`: commands run as the agent's
    /// own user, who reaches what it installed).
    pub fn as_is(path: OsString) -> HostTools {
        HostTools {
            path,
            env: Vec::new(),
            mounts: Arc::new(Vec::new()),
        }
    }

    /// Finds the PATH entries workspace users cannot reach and plans their mounts under
    /// `root` (with rustup's home, when it is unreachable too); returns the plan and one line
    /// per toolchain, for the startup log.
    pub fn discover(
        path: &OsStr,
        rustup_home: Option<&Path>,
        root: &Path,
    ) -> (HostTools, Vec<String>) {
        let tools = root.join(TOOLS_DIR);
        let mut plan = Plan::default();
        let mut entries = Vec::new();
        for entry in std::env::split_paths(path) {
            entries.push(plan.entry(&entry, &tools));
        }
        if !plan.mounts.is_empty() {
            if let Some(rustup) = rustup_home.filter(|r| r.is_dir()) {
                if !reachable_by_others(&rustup) {
                    let target = plan.mount(&rustup, &tools);
                    plan.env
                        .push(("RUSTUP_HOME".into(), target.into_os_string()));
                }
            }
        }
        let path = std::env::join_paths(entries).unwrap_or_else(|_| path.to_owned());
        let tools = HostTools {
            path,
            env: plan.env,
            mounts: Arc::new(plan.mounts),
        };
        (tools, plan.notes)
    }

    /// Creates the mount points and checks a command can be started with the mounts; on
    /// failure (no mount namespace here) the agent's PATH is used as it is, and Err says why.
    pub fn prepare(
        self,
        agent_path: OsString,
        root: &Path,
    ) -> Result<HostTools, (HostTools, String)> {
        if self.mounts.is_empty() {
            return Ok(self);
        }
        let fallback = |why: String| (HostTools::as_is(agent_path.clone()), why);
        let tools = root.join(TOOLS_DIR);
        if let Err(e) = make_mount_points(&tools, self.mounts.len()) {
            return Err(fallback(format!("cannot create {}: {e}", tools.display())));
        }
        let mut probe = Command::new("true");
        self.apply(&mut probe);
        match probe.status() {
            Ok(s) if s.success() => Ok(self),
            Ok(s) => Err(fallback(format!("a probe with the mounts ended {s}"))),
            Err(e) => Err(fallback(format!("cannot make a mount namespace: {e}"))),
        }
    }

    /// Gives `command` the PATH and environment and, when there are mounts, a mount namespace
    /// of its own holding them. Call before the caller's own environment is set (which may
    /// override these) and before the user change (`RunAs::prepare`), which gives up the
    /// privilege mounting needs.
    pub fn apply(&self, command: &mut Command) {
        command.env("PATH", &self.path);
        for (k, v) in &self.env {
            command.env(k, v);
        }
        if self.mounts.is_empty() {
            return;
        }
        let mounts = self.mounts.clone();
        // SAFETY: the hook runs in the forked child before exec and only makes system calls
        // (unshare, mount) over strings built before the fork, which are async-signal-safe.
        unsafe {
            command.pre_exec(move || mount_all(&mounts));
        }
    }

    /// The PATH commands get.
    #[cfg(test)]
    pub fn path(&self) -> &OsStr {
        &self.path
    }
}

#[derive(Default)]
struct Plan {
    mounts: Vec<Mount>,
    env: Vec<(String, OsString)>,
    notes: Vec<String>,
}

impl Plan {
    /// The PATH entry commands get for `entry`: itself when reachable (or when it is not a
    /// toolchain's `bin`), else its toolchain mounted.
    fn entry(&mut self, entry: &Path, tools: &Path) -> PathBuf {
        let (Some(toolchain), Some(bin)) = (entry.parent(), entry.file_name()) else {
            return entry.to_owned();
        };
        if !entry.is_dir() || reachable_by_others(entry) || self.mounts.len() >= EXPOSED_MAX {
            return entry.to_owned();
        }
        let target = self.mount(toolchain, tools);
        self.notes.push(format!(
            "{} (PATH {}) is under a directory the workspace users cannot enter",
            toolchain.display(),
            entry.display()
        ));
        target.join(bin)
    }

    fn mount(&mut self, source: &Path, tools: &Path) -> PathBuf {
        let target = tools.join(self.mounts.len().to_string());
        let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).ok();
        if let (Some(source), Some(target)) = (c(source), c(&target)) {
            self.mounts.push(Mount { source, target });
        }
        target
    }
}

/// `<tools>/0..n`, empty directories any user may enter (mount points).
fn make_mount_points(tools: &Path, n: usize) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true).mode(0o755);
    for i in 0..n {
        let dir = tools.join(i.to_string());
        builder.create(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    }
    fs::set_permissions(tools, fs::Permissions::from_mode(0o755))
}

/// In the forked child: a private mount namespace, then each toolchain bound read-only.
fn mount_all(mounts: &[Mount]) -> io::Result<()> {
    let check = |r: libc::c_int| {
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    let none = std::ptr::null();
    // SAFETY (the caller's): unshare and mount are system calls; every pointer is a CString
    // made before the fork, or null where mount(2) allows it.
    unsafe {
        check(libc::unshare(libc::CLONE_NEWNS))?;
        // Nothing mounted here propagates back to the host.
        check(libc::mount(
            none,
            c"/".as_ptr(),
            none,
            libc::MS_REC | libc::MS_PRIVATE,
            none as _,
        ))?;
        for m in mounts {
            let flags = libc::MS_BIND | libc::MS_REC;
            check(libc::mount(
                m.source.as_ptr(),
                m.target.as_ptr(),
                none,
                flags,
                none as _,
            ))?;
            let ro = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
            check(libc::mount(none, m.target.as_ptr(), none, ro, none as _))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reachable_entries_are_kept_and_nothing_is_mounted() {
        let (tools, notes) =
            HostTools::discover(OsStr::new("/usr/bin:/bin"), None, Path::new("/tmp"));
        assert_eq!(tools.path(), OsStr::new("/usr/bin:/bin"));
        assert!(tools.mounts.is_empty() && notes.is_empty());
    }
}
