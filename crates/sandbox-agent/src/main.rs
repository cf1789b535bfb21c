//! sluice-sandbox-agent: runs checkouts and commands for Sluice CI runs over a small JSON HTTP
//! API. In production it runs inside a Cloudflare Container; in development on localhost.

mod api;
mod error;
mod exec;
mod limits;
mod process;
mod workspace;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;

/// Env var holding the bearer token when `--token` is not given (keeps it out of `ps`).
pub const TOKEN_ENV: &str = "SANDBOX_AGENT_TOKEN";

const USAGE: &str =
    "usage: sluice-sandbox-agent [--listen 127.0.0.1:8791] --root DIR [--token TOKEN]\n\
     The token may also be given in the SANDBOX_AGENT_TOKEN environment variable.";

struct Args {
    listen: String,
    root: PathBuf,
    token: Option<String>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut listen = "127.0.0.1:8791".to_owned();
    let mut root = None;
    let mut token = None;
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--listen" => listen = value()?,
            "--root" => root = Some(PathBuf::from(value()?)),
            "--token" => token = Some(value()?),
            _ => return Err(format!("unknown argument {flag:?}")),
        }
    }
    let root = root.ok_or("--root is required")?;
    Ok(Args {
        listen,
        root,
        token,
    })
}

/// Locks a mutex even if a panicking thread poisoned it: every critical section in the agent
/// leaves its data consistent, and one panicked request must not wedge all the others.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn main() -> ExitCode {
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
    let token = args
        .token
        .or_else(|| std::env::var(TOKEN_ENV).ok())
        .filter(|t| !t.is_empty());
    if token.is_none() {
        eprintln!("warning: no token configured; /v1/ endpoints accept unauthenticated requests");
    }
    let state = match api::State::new(&args.root, token) {
        Ok(state) => Arc::new(state),
        Err(e) => {
            eprintln!("error: cannot prepare root {}: {e}", args.root.display());
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
        assert_eq!(args.token, None);
        let args = parse(&["--listen", "0.0.0.0:1", "--root", "r", "--token", "t"]).expect("ok");
        assert_eq!(args.listen, "0.0.0.0:1");
        assert_eq!(args.token.as_deref(), Some("t"));
    }

    #[test]
    fn rejects_bad_flags() {
        assert!(parse(&[]).is_err(), "--root is required");
        assert!(parse(&["--root"]).is_err(), "flag without value");
        assert!(parse(&["--root", "r", "--bogus"]).is_err());
    }
}
