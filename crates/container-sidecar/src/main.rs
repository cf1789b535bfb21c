//! sluice-container-sidecar: a local stand-in for the networking sidecar that `wrangler dev`
//! (4.86, workerd 1.20260426) starts beside every container, for machines that cannot pull
//! the default image (`cloudflare/proxy-everything`). Selected with
//! `MINIFLARE_CONTAINER_EGRESS_IMAGE`; see docs/containers-local.md.
//!
//! The contract, as workerd's container client uses it (read from its source, nothing copied):
//! the runtime creates this container first (bridge network, NET_ADMIN, port 39001 published
//! on the host) and starts the application container inside this one's network namespace.
//! It then speaks HTTP/1.1 to the published ingress port:
//!
//! - `PUT /egress` with a JSON body (the egress listener's port, a DNS allow-list, whether
//!   internet access is on): the readiness probe and the egress configuration. Answered 200.
//! - `GET /ca`: the CA certificate the runtime injects into the container for HTTPS egress
//!   interception. Answered 200 with an empty body: this stand-in intercepts nothing.
//! - `CONNECT` with `X-Dst-Addr: 127.0.0.1:<port>`: a tunnel to a port inside the shared
//!   network namespace (the application's listener). 200 and a byte pipe when the port
//!   accepts; 400 when nothing listens there, which the runtime reports as "Container is not
//!   listening to port" (a retryable disconnect, what a booting container looks like).
//!
//! Not implemented: egress interception (iptables/TPROXY to the runtime's egress listener),
//! DNS filtering and the internet switch. The application's outbound traffic leaves through
//! Docker's bridge unchanged, as it does under runtimes that talk to Docker directly. Sluice
//! binds no egress handlers, so nothing it uses depends on them.
//!
//! Only loopback destinations are tunnelled: the ingress port is published on the host, and
//! it must not become an open proxy to anything else.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

/// Where the runtime tells us to listen (`--http-ingress-address`); this is its value too.
const INGRESS_DEFAULT: &str = "0.0.0.0:39001";
/// Longest request head (request line and headers). The runtime's heads are a few hundred
/// bytes; 16 KiB is generous and bounds what a stray client can make us buffer.
const HEAD_BYTES_MAX: usize = 16 * 1024;
/// Longest `PUT /egress` body: a port, a hostname allow-list and a flag. 1 MiB bounds memory.
const BODY_BYTES_MAX: usize = 1024 * 1024;
/// How long a client may take to send its request head (and a body). The runtime sends
/// everything at once; a client that stalls this long is dropped instead of holding a thread.
const HEAD_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Dialling a port in our own network namespace either connects or is refused at once; the
/// bound only covers a wedged kernel queue, and stays under the runtime's 2 s probe timeout.
const DIAL_TIMEOUT: Duration = Duration::from_millis(1_500);
/// Connections served at once (one thread each). One run holds a handful (a long-poll, a
/// command start, probes); 256 leaves headroom and bounds threads if something floods us.
const CONNECTIONS_MAX: usize = 256;
/// Size of one read while piping a tunnel.
const PIPE_CHUNK_BYTES: usize = 64 * 1024;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: sluice-container-sidecar [--http-ingress-address 0.0.0.0:39001] [runtime flags...]\n\
             Flags the runtime passes that this stand-in does not act on are accepted and logged."
        );
        return ExitCode::SUCCESS;
    }
    let listen = flag_value(&args, "--http-ingress-address").unwrap_or(INGRESS_DEFAULT);
    let listener = match TcpListener::bind(listen) {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("sidecar: cannot listen on {listen}: {e}");
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "sidecar: listening on {listen}; runtime flags: {}",
        args.join(" ")
    );
    serve(listener);
    ExitCode::FAILURE
}

/// The value following `name` in `args`, if any.
fn flag_value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1).map(String::as_str)
}

/// Decrements the live-connection count when a connection's thread ends, panics included.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Accept loop: one thread per connection, at most `CONNECTIONS_MAX` at once. Returns only if
/// accepting fails for good.
fn serve(listener: TcpListener) {
    let live = Arc::new(AtomicUsize::new(0));
    for stream in listener.incoming() {
        let mut stream = match stream {
            Ok(stream) => stream,
            Err(e) => {
                // Transient (e.g. EMFILE while many tunnels are open): keep accepting.
                eprintln!("sidecar: accept failed: {e}");
                continue;
            }
        };
        if live.fetch_add(1, Ordering::SeqCst) >= CONNECTIONS_MAX {
            live.fetch_sub(1, Ordering::SeqCst);
            let _ = respond(
                &mut stream,
                503,
                "Service Unavailable",
                "too many connections",
            );
            continue;
        }
        let slot = Slot(live.clone());
        let spawned = thread::Builder::new()
            .name("connection".into())
            .spawn(move || {
                let _slot = slot;
                if let Err(e) = handle(stream) {
                    eprintln!("sidecar: connection ended with an error: {e}");
                }
            });
        if let Err(e) = spawned {
            eprintln!("sidecar: cannot start a connection thread: {e}");
        }
    }
}

#[derive(Debug, PartialEq)]
struct Head {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Reads up to the end of the request head; returns the head and any bytes read past it.
fn read_head(stream: &mut impl Read) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > HEAD_BYTES_MAX {
            return Err(invalid("request head too large"));
        }
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "connection closed before the request head ended",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn parse_head(raw: &[u8]) -> io::Result<Head> {
    let text = std::str::from_utf8(raw).map_err(|_| invalid("request head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid(format!("bad request line {request_line:?}")));
    };
    if !version.starts_with("HTTP/1.") || method.is_empty() || target.is_empty() {
        return Err(invalid(format!("bad request line {request_line:?}")));
    }
    let mut headers = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(format!("bad header line {line:?}")))?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    Ok(Head {
        method: method.to_owned(),
        target: target.to_owned(),
        headers,
    })
}

/// The tunnel destination, which must be a loopback address of our network namespace
/// (`localhost` is taken as 127.0.0.1, which is what the runtime sends anyway).
fn loopback_destination(dst: &str) -> Result<SocketAddr, String> {
    let (host, port) = dst
        .rsplit_once(':')
        .ok_or_else(|| format!("destination {dst:?} has no port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("destination {dst:?} has a bad port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse()
            .map_err(|_| format!("destination {dst:?} is not an IP address"))?
    };
    if !ip.is_loopback() {
        return Err(format!(
            "destination {dst:?} is outside this network namespace"
        ));
    }
    Ok(SocketAddr::new(ip, port))
}

fn respond(stream: &mut TcpStream, status: u16, reason: &str, body: &str) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(body.as_bytes())?;
    stream.flush()
}

fn handle(mut client: TcpStream) -> io::Result<()> {
    client.set_read_timeout(Some(HEAD_READ_TIMEOUT))?;
    let (raw, rest) = read_head(&mut client)?;
    let head = match parse_head(&raw) {
        Ok(head) => head,
        Err(e) => return respond(&mut client, 400, "Bad Request", &e.to_string()),
    };
    let path = head.target.split('?').next().unwrap_or_default();
    match (head.method.as_str(), path) {
        ("CONNECT", _) => tunnel(client, &head, rest),
        ("PUT", "/egress") => {
            let body = read_body(&mut client, &head, rest)?;
            eprintln!("sidecar: egress configuration (not enforced): {body}");
            respond(&mut client, 200, "OK", "{}")
        }
        ("GET", "/ca") => respond(&mut client, 200, "OK", ""),
        _ => respond(&mut client, 404, "Not Found", "unknown endpoint"),
    }
}

fn read_body(client: &mut TcpStream, head: &Head, mut body: Vec<u8>) -> io::Result<String> {
    let length: usize = match head.header("content-length") {
        Some(v) => v.parse().map_err(|_| invalid("bad Content-Length"))?,
        None => 0,
    };
    if length > BODY_BYTES_MAX {
        return Err(invalid("request body too large"));
    }
    let mut chunk = [0u8; 4096];
    while body.len() < length {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "body cut short",
            ));
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(length);
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn tunnel(mut client: TcpStream, head: &Head, early: Vec<u8>) -> io::Result<()> {
    let dst = head.header("x-dst-addr").unwrap_or(&head.target).to_owned();
    let addr = match loopback_destination(&dst) {
        Ok(addr) => addr,
        Err(message) => return respond(&mut client, 403, "Forbidden", &message),
    };
    let mut upstream = match TcpStream::connect_timeout(&addr, DIAL_TIMEOUT) {
        Ok(upstream) => upstream,
        // 400 is what the runtime reads as "the container is not listening (yet)".
        Err(e) => {
            eprintln!("sidecar: CONNECT {dst}: {e} -> 400");
            return respond(&mut client, 400, "Bad Request", &format!("{dst}: {e}"));
        }
    };
    client.set_read_timeout(None)?;
    client.write_all(b"HTTP/1.1 200 OK\r\n\r\n")?;
    upstream.write_all(&early)?;
    pipe_both_ways(client, upstream)
}

/// Copies bytes both ways until both directions end. An orderly end (EOF) of one direction
/// half-closes the other side; an error tears both sockets down so neither thread blocks.
fn pipe_both_ways(client: TcpStream, upstream: TcpStream) -> io::Result<()> {
    let (client_read, upstream_write) = (client.try_clone()?, upstream.try_clone()?);
    let (closer_a, closer_b) = (client.try_clone()?, upstream.try_clone()?);
    let inbound = thread::Builder::new().name("pipe".into()).spawn(move || {
        let result = copy(client_read, upstream_write);
        if result.is_err() {
            let _ = closer_a.shutdown(Shutdown::Both);
            let _ = closer_b.shutdown(Shutdown::Both);
        }
        result
    })?;
    let outbound = copy(upstream.try_clone()?, client.try_clone()?);
    if outbound.is_err() {
        let _ = client.shutdown(Shutdown::Both);
        let _ = upstream.shutdown(Shutdown::Both);
    }
    let inbound = inbound
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("pipe thread panicked")));
    outbound.and(inbound)
}

/// Copies `from` to `to` until EOF, then half-closes `to`.
fn copy(mut from: TcpStream, mut to: TcpStream) -> io::Result<()> {
    let mut buf = vec![0u8; PIPE_CHUNK_BYTES];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            // The peer may already be gone; a failed half-close changes nothing.
            let _ = to.shutdown(Shutdown::Write);
            return Ok(());
        }
        to.write_all(&buf[..n])?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    fn start() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        thread::spawn(move || serve(listener));
        addr
    }

    fn status_line(stream: &TcpStream) -> String {
        let mut line = String::new();
        io::BufReader::new(stream)
            .read_line(&mut line)
            .expect("status line");
        line
    }

    #[test]
    fn parses_heads_and_finds_headers_case_insensitively() {
        let head = parse_head(
            b"CONNECT 127.0.0.1:8080 HTTP/1.1\r\nX-Dst-Addr: 127.0.0.1:8080\r\nHost: x\r\n\r\n",
        )
        .expect("valid head");
        assert_eq!(head.method, "CONNECT");
        assert_eq!(head.header("x-dst-addr"), Some("127.0.0.1:8080"));
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
        assert!(parse_head(b"GET / SPDY/3\r\n\r\n").is_err());
    }

    #[test]
    fn read_head_keeps_bytes_past_the_head() {
        let mut input: &[u8] = b"CONNECT a:1 HTTP/1.1\r\n\r\nearly bytes";
        let (head, rest) = read_head(&mut input).expect("head");
        assert!(head.ends_with(b"\r\n\r\n"));
        assert_eq!(rest, b"early bytes");
    }

    #[test]
    fn only_loopback_destinations_are_tunnelled() {
        assert_eq!(
            loopback_destination("127.0.0.1:8080"),
            Ok("127.0.0.1:8080".parse().expect("addr"))
        );
        assert_eq!(
            loopback_destination("localhost:80"),
            Ok("127.0.0.1:80".parse().expect("addr"))
        );
        assert!(loopback_destination("[::1]:80").is_ok());
        assert!(loopback_destination("172.17.0.1:80").is_err());
        assert!(loopback_destination("example.com:443").is_err());
        assert!(loopback_destination("127.0.0.1").is_err());
    }

    #[test]
    fn tunnels_to_a_listening_port_and_refuses_a_closed_one() {
        let sidecar = start();
        let echo = TcpListener::bind("127.0.0.1:0").expect("bind echo");
        let echo_addr = echo.local_addr().expect("addr");
        thread::spawn(move || {
            let (mut conn, _) = echo.accept().expect("accept");
            let mut buf = [0u8; 5];
            conn.read_exact(&mut buf).expect("read");
            conn.write_all(&buf).expect("echo");
        });

        let mut stream = TcpStream::connect(sidecar).expect("connect");
        write!(
            stream,
            "CONNECT {echo_addr} HTTP/1.1\r\nX-Dst-Addr: {echo_addr}\r\n\r\nhello"
        )
        .expect("write");
        // One reader for the whole exchange: a second one would lose what the first buffered.
        let mut reader = io::BufReader::new(&stream);
        let mut line = String::new();
        reader.read_line(&mut line).expect("status line");
        assert!(line.starts_with("HTTP/1.1 200"), "{line}");
        reader.read_line(&mut String::new()).expect("blank line");
        let mut reply = Vec::new();
        reader
            .read_to_end(&mut reply)
            .expect("reply until the echo closes");
        assert_eq!(reply, b"hello");

        // A port nobody listens on: 400, what the runtime retries as "not listening yet".
        let closed = TcpListener::bind("127.0.0.1:0").expect("bind");
        let closed_addr = closed.local_addr().expect("addr");
        drop(closed);
        let mut stream = TcpStream::connect(sidecar).expect("connect");
        write!(
            stream,
            "CONNECT {closed_addr} HTTP/1.1\r\nX-Dst-Addr: {closed_addr}\r\n\r\n"
        )
        .expect("write");
        assert!(status_line(&stream).starts_with("HTTP/1.1 400"));

        let mut stream = TcpStream::connect(sidecar).expect("connect");
        write!(
            stream,
            "CONNECT 10.0.0.1:80 HTTP/1.1\r\nX-Dst-Addr: 10.0.0.1:80\r\n\r\n"
        )
        .expect("write");
        assert!(status_line(&stream).starts_with("HTTP/1.1 403"));
    }

    #[test]
    fn answers_the_configuration_endpoints() {
        let sidecar = start();
        let body = r#"{"port":1234,"dns":{"allowHostnames":[]}}"#;
        let mut stream = TcpStream::connect(sidecar).expect("connect");
        write!(
            stream,
            "PUT /egress HTTP/1.1\r\nHost: localhost\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .expect("write");
        assert!(status_line(&stream).starts_with("HTTP/1.1 200"));

        let mut stream = TcpStream::connect(sidecar).expect("connect");
        write!(stream, "GET /ca HTTP/1.1\r\nHost: localhost\r\n\r\n").expect("write");
        assert!(status_line(&stream).starts_with("HTTP/1.1 200"));

        let mut stream = TcpStream::connect(sidecar).expect("connect");
        write!(stream, "GET /other HTTP/1.1\r\n\r\n").expect("write");
        assert!(status_line(&stream).starts_with("HTTP/1.1 404"));
    }
}
