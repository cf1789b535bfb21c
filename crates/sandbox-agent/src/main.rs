//! sluice-sandbox-agent: runs checkouts and commands for Sluice CI runs over a small JSON HTTP
//! API. In production it runs inside a Cloudflare Container; in development on localhost.

mod api;
mod archive;
mod clone_url;
mod error;
mod exec;
mod host_tools;
mod limits;
mod packs;
mod process;
mod snapshot;
mod uid_block;
mod users;
mod workspace;

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;

/// Env var holding the bearer token (never an argument: every user can read
/// /proc/<pid>/cmdline).
pub const TOKEN_ENV: &str = "SANDBOX_AGENT_TOKEN";

/// Env var with space-separated git URL prefixes, for when no `--git-url-prefix` is given (a
/// container's environment is what its starter controls).
pub const GIT_URL_PREFIXES_ENV: &str = sluice_sandbox_protocol::GIT_URL_PREFIXES_ENV;

const USAGE: &str = "\
usage: sluice-sandbox-agent [--listen 127.0.0.1:8791] --root DIR [--git-url-prefix PREFIX]...
                            [--unisolated] [--insecure-no-token]
The bearer token comes from the SANDBOX_AGENT_TOKEN environment variable.
  --git-url-prefix PREFIX  a checkout may clone only URLs starting with PREFIX (repeatable;
                           default https://github.com/, or SANDBOX_GIT_URL_PREFIXES)
  --unisolated             run every command as the agent's own user instead of a user per
                           workspace (for developers without root). Commands of one run can
                           then read another's files and environment: NOT safe for untrusted
                           pull requests.
  --insecure-no-token      accept requests without a token; only on a loopback address, where
                           every local process can then run commands.";

#[derive(Debug)]
struct Args {
    listen: String,
    root: PathBuf,
    git_url_prefixes: Vec<String>,
    unisolated: bool,
    insecure_no_token: bool,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut listen = "127.0.0.1:8791".to_owned();
    let mut root = None;
    let mut git_url_prefixes = Vec::new();
    let (mut unisolated, mut insecure_no_token) = (false, false);
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => listen = value()?,
            "--root" => root = Some(PathBuf::from(value()?)),
            "--git-url-prefix" => git_url_prefixes.push(value()?),
            "--unisolated" => unisolated = true,
            "--insecure-no-token" => insecure_no_token = true,
            "--token" => {
                return Err(format!(
                    "--token would put the token in /proc/<pid>/cmdline, which every user of \
                     the host can read; pass it in {TOKEN_ENV}"
                ))
            }
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    let root = root.ok_or("--root is required")?;
    Ok(Args {
        listen,
        root,
        git_url_prefixes,
        unisolated,
        insecure_no_token,
    })
}

/// Reads the token and removes it from the agent's environment, so nothing the agent starts
/// could inherit it by mistake. This does not rewrite /proc/<pid>/environ, which keeps showing
/// the environment the process started with: what keeps the token from commands is that they
/// run as other users, who cannot read that file (`users`). Called first thing in `main`,
/// before any other thread exists (`remove_var` is not thread-safe).
fn take_token() -> Option<String> {
    let token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
    std::env::remove_var(TOKEN_ENV);
    token
}

/// Whether every address `listen` names is a loopback one.
fn loopback_only(listen: &str) -> Result<bool, String> {
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve --listen {listen}: {e}"))?
        .collect();
    Ok(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()))
}

/// The checks that make the agent refuse to start, and its state when none does.
fn prepare(args: &Args, token: Option<String>) -> Result<api::State, String> {
    match (&token, args.insecure_no_token) {
        (None, false) => {
            return Err(format!(
                "no token: set {TOKEN_ENV} (every request must then carry it), or pass \
                 --insecure-no-token to accept requests without one on a loopback address"
            ))
        }
        (Some(_), true) => {
            return Err(format!(
                "{TOKEN_ENV} is set and --insecure-no-token given; choose one"
            ))
        }
        (None, true) if !loopback_only(&args.listen)? => {
            return Err(format!(
                "--insecure-no-token is accepted only on a loopback address, not --listen {}",
                args.listen
            ))
        }
        _ => {}
    }
    let mut prefixes = args.git_url_prefixes.clone();
    if prefixes.is_empty() {
        if let Ok(value) = std::env::var(GIT_URL_PREFIXES_ENV) {
            prefixes = value.split_whitespace().map(str::to_owned).collect();
        }
    }
    let urls = clone_url::Policy::new(prefixes)?;
    let block = if args.unisolated {
        eprintln!(
            "warning: --unisolated: commands run as the agent's own user and can read each \
             other's files and environment; do not run untrusted pull requests here"
        );
        None
    } else {
        Some(claim_block(&args.root)?)
    };
    let users = match &block {
        Some(b) => format!(
            "a user per workspace (uids {}..{})",
            b.first,
            b.first + uid_block::UIDS_PER_AGENT
        ),
        None => "the agent's own user (--unisolated)".to_owned(),
    };
    eprintln!(
        "commands run as {users}; checkouts clone only from {:?}",
        urls.prefixes()
    );
    let tools = host_tools(&args.root, block.is_some());
    let workspaces = workspace::Workspaces::open(&args.root, block, urls)?;
    let scratch = archive::Scratch::open(&args.root)?;
    Ok(api::State::new(token, workspaces, scratch, tools))
}

/// The host's toolchains as the workspace users reach them (`host_tools`), said at startup.
fn host_tools(root: &Path, isolated: bool) -> host_tools::HostTools {
    let path = exec::path_env();
    if !isolated {
        return host_tools::HostTools::as_is(path);
    }
    // rustup's home: where it says, else its default under the agent's home.
    let rustup = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")));
    let (tools, notes) = host_tools::HostTools::discover(&path, rustup.as_deref(), root);
    match tools.prepare(path, root) {
        Ok(tools) => {
            for note in notes {
                eprintln!("{note}: mounted read-only for their commands");
            }
            tools
        }
        Err((tools, why)) => {
            for note in notes {
                eprintln!("warning: {note}: its commands are not found there");
            }
            eprintln!("warning: the toolchains above are not mounted: {why}");
            tools
        }
    }
}

/// Isolation needs root: only root can make a child another user.
fn claim_block(root: &Path) -> Result<uid_block::UidBlock, String> {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(format!(
            "the agent runs as uid {euid}, not root, so it cannot run each workspace's \
             commands as a user of their own. Run it as root, or pass --unisolated to run \
             commands as this user (NOT safe for untrusted pull requests)"
        ));
    }
    std::fs::create_dir_all(root)
        .and_then(|()| root.canonicalize())
        .map_err(|e| format!("cannot prepare root {}: {e}", root.display()))
        .and_then(|root| uid_block::UidBlock::claim(&root))
}

/// Locks a mutex even if a panicking thread poisoned it: every critical section in the agent
/// leaves its data consistent, and one panicked request must not wedge all the others.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn main() -> ExitCode {
    let token = take_token();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.iter().any(|a| a == "--help" || a == "-h") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse_args(argv.into_iter()) {
        Ok(args) => args,
        Err(message) => {
            eprintln!("error: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let state = match prepare(&args, token) {
        Ok(state) => Arc::new(state),
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::FAILURE;
        }
    };
    let server = match tiny_http::Server::http(&args.listen) {
        Ok(server) => server,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let Some(addr) = server.server_addr().to_ip() else {
        eprintln!("error: listening address is not an IP socket");
        return ExitCode::FAILURE;
    };
    // The caller (tests, dev scripts) waits for this exact line to learn the bound port.
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "sluice-sandbox-agent listening on http://{addr}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        eprintln!("warning: could not write the ready line to stdout");
    }
    drop(stdout);
    serve(&server, &state)
}

/// Decrements the in-flight request count when dropped, including when a handler panics.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accept loop: one thread per request, at most `REQUESTS_CONCURRENT_MAX` at once.
fn serve(server: &tiny_http::Server, state: &Arc<api::State>) -> ExitCode {
    let active = Arc::new(AtomicUsize::new(0));
    // Runs for the life of the process; it ends only if tiny_http's accept thread fails.
    loop {
        let request = match server.recv() {
            Ok(request) => request,
            Err(e) => {
                // tiny_http stops accepting after an accept error; exit so the container
                // (or the developer) restarts us instead of hanging with a dead listener.
                eprintln!("error: accepting connections failed: {e}");
                return ExitCode::FAILURE;
            }
        };
        if active.fetch_add(1, Ordering::SeqCst) >= limits::REQUESTS_CONCURRENT_MAX {
            active.fetch_sub(1, Ordering::SeqCst);
            api::respond_busy(request);
            continue;
        }
        let slot = Slot(active.clone());
        let state = state.clone();
        let spawned = thread::Builder::new()
            .name("request".into())
            .spawn(move || {
                let _slot = slot;
                api::serve(&state, request);
            });
        if let Err(e) = spawned {
            // The closure (and the request in it) was dropped: tiny_http answers it with 500.
            eprintln!("error: cannot start a request thread: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        parse_args(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn parses_flags_and_defaults() {
        let args = parse(&["--root", "/tmp/x"]).expect("valid args");
        assert_eq!(args.listen, "127.0.0.1:8791");
        assert_eq!(args.root, PathBuf::from("/tmp/x"));
        assert!(args.git_url_prefixes.is_empty());
        assert!(!args.unisolated && !args.insecure_no_token);
        let args = parse(&[
            "--listen",
            "0.0.0.0:1",
            "--root",
            "r",
            "--git-url-prefix",
            "file:///a/",
            "--git-url-prefix",
            "https://x.example/",
            "--unisolated",
            "--insecure-no-token",
        ])
        .expect("ok");
        assert_eq!(args.listen, "0.0.0.0:1");
        assert_eq!(args.git_url_prefixes, ["file:///a/", "https://x.example/"]);
        assert!(args.unisolated && args.insecure_no_token);
    }

    #[test]
    fn rejects_bad_flags() {
        assert!(parse(&[]).is_err(), "--root is required");
        assert!(parse(&["--root"]).is_err(), "flag without value");
        assert!(parse(&["--root", "r", "--bogus"]).is_err());
        let token = parse(&["--root", "r", "--token", "t"]).expect_err("--token is refused");
        assert!(token.contains(TOKEN_ENV), "{token}");
    }

    #[test]
    fn only_loopback_listeners_count_as_loopback() {
        assert_eq!(loopback_only("127.0.0.1:0"), Ok(true));
        assert_eq!(loopback_only("[::1]:0"), Ok(true));
        assert_eq!(loopback_only("0.0.0.0:0"), Ok(false));
        assert_eq!(loopback_only("[::]:0"), Ok(false));
        assert!(loopback_only("no-port").is_err());
    }
}
