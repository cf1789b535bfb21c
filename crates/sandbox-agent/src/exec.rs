//! Running one command: its own session and process group, as the user `users::RunAs` says,
//! stdout and stderr interleaved into one bounded buffer, and everything it started killed at
//! the timeout.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::OsString;
use std::io::{self, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::host_tools::HostTools;
use crate::limits::{
    KILL_REAP_MS, OUTPUT_BYTES_MAX, OUTPUT_DRAIN_MS, OUTPUT_HEAD_BYTES, OUTPUT_READ_CHUNK_BYTES,
    WAIT_POLL_FAST_MS, WAIT_POLL_MS_MAX, WAIT_POLL_MS_MIN,
};
use crate::lock;
use crate::users::{kill_group, RunAs};
use sluice_redact::{Redactor, StreamRedactor};

/// PATH for commands when the agent itself has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The agent's PATH, or a standard one when the agent has none (a bare container entrypoint).
pub fn path_env() -> OsString {
    std::env::var_os("PATH").unwrap_or_else(|| DEFAULT_PATH.into())
}

/// Builds `sh -c <command>` for a step: runs in `dir` with a minimal environment (so the agent's
/// own secrets never leak into user code): the host's toolchains as `tools` makes them
/// reachable, plus the caller's `env`, which may override it.
pub fn shell_command(
    dir: &Path,
    command: &str,
    env: &BTreeMap<String, String>,
    tools: &HostTools,
) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(command).current_dir(dir).env_clear();
    tools.apply(&mut cmd);
    cmd.env("HOME", dir).env("LANG", "C.UTF-8").envs(env);
    cmd
}

/// Output of a command as it is kept in memory: the first `OUTPUT_HEAD_BYTES` and the most
/// recent bytes, `OUTPUT_BYTES_MAX` in total, so the tail (where errors are) is never lost.
/// Secrets are scrubbed as the bytes arrive, before anything is cut: a secret that straddles
/// the cut is masked whole, never left half visible.
#[derive(Default)]
pub struct Output {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    /// Bytes written, after redaction.
    total_bytes: u64,
    /// None once the output is closed: later bytes (from a process that escaped the kill) are
    /// dropped rather than kept unscrubbed.
    redactor: Option<StreamRedactor>,
}

/// A rendering of `Output` for a response.
pub struct Captured {
    pub text: String,
    pub bytes: u64,
    pub truncated: bool,
}

impl Output {
    pub fn new(redactor: Redactor) -> Output {
        Output {
            redactor: Some(StreamRedactor::new(redactor)),
            ..Output::default()
        }
    }

    /// Takes raw bytes from the command's pipe.
    fn write(&mut self, chunk: &[u8]) {
        if let Some(stream) = self.redactor.as_mut() {
            let scrubbed = stream.push(chunk);
            self.keep(&scrubbed);
        }
    }

    /// Flushes what the redactor held back for a match that can no longer come.
    fn close(&mut self) {
        if let Some(stream) = self.redactor.take() {
            let rest = stream.finish();
            self.keep(&rest);
        }
    }

    fn keep(&mut self, chunk: &[u8]) {
        self.total_bytes += chunk.len() as u64;
        let head_take = OUTPUT_HEAD_BYTES
            .saturating_sub(self.head.len())
            .min(chunk.len());
        self.head.extend_from_slice(&chunk[..head_take]);
        let rest = &chunk[head_take..];
        let tail_max = OUTPUT_BYTES_MAX - OUTPUT_HEAD_BYTES;
        let rest = &rest[rest.len().saturating_sub(tail_max)..];
        let overflow = (self.tail.len() + rest.len()).saturating_sub(tail_max);
        self.tail.drain(..overflow);
        self.tail.extend(rest);
    }

    pub fn retained_bytes(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    pub fn capture(&self) -> Captured {
        let omitted_bytes = self.total_bytes - self.retained_bytes() as u64;
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let text = if omitted_bytes == 0 {
            // Nothing cut: decode as one buffer so a character split across head and tail
            // survives.
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            String::from_utf8_lossy(&all).into_owned()
        } else {
            // The cut may land inside a UTF-8 character: skip its continuation bytes (at most
            // 3) rather than render a replacement character.
            let skip = tail
                .iter()
                .take(3)
                .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
                .count();
            format!(
                "{}\n[sluice-sandbox-agent: {omitted_bytes} bytes of output omitted]\n{}",
                String::from_utf8_lossy(&self.head),
                String::from_utf8_lossy(&tail[skip..])
            )
        };
        Captured {
            text,
            bytes: self.total_bytes,
            truncated: omitted_bytes > 0,
        }
    }
}

/// The output from a byte offset on: what a caller streaming the log asks
/// for.
#[derive(Debug, PartialEq, Eq)]
pub struct Since {
    pub text: String,
    /// Where `text`'s bytes start (after an omission line, when the
    /// asked-for bytes are no longer held).
    pub from: u64,
    /// The offset to ask from next.
    pub next: u64,
}

impl Output {
    /// The output from byte `since` on, as far as it is held, ending at a
    /// character boundary (a character split by the pipe comes whole in the
    /// next chunk).
    pub fn since(&self, since: u64) -> Since {
        let begin = since.min(self.total_bytes);
        let head_len = self.head.len() as u64;
        let tail_start = self.total_bytes - self.tail.len() as u64;
        if begin >= tail_start || tail_start == head_len {
            // Contiguous: from `begin` in the head (if it reaches there),
            // then the tail.
            let mut bytes = Vec::new();
            if begin < head_len {
                bytes.extend_from_slice(&self.head[begin as usize..]);
            }
            let skip_tail = begin.saturating_sub(tail_start) as usize;
            bytes.extend(self.tail.iter().skip(skip_tail).copied());
            let keep = complete_prefix_len(&bytes);
            return Since {
                text: String::from_utf8_lossy(&bytes[..keep]).into_owned(),
                from: begin,
                next: begin + keep as u64,
            };
        }
        // Bytes between the head and the tail are gone: what is left of the
        // head, a line naming the gap, then the tail from a whole character.
        let head_rest = self.head.get(begin as usize..).unwrap_or_default();
        let gap_from = begin.max(head_len);
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let skip = continuation_len(&tail);
        let keep = complete_prefix_len(&tail[skip..]);
        let text = format!(
            "{}\n[sluice-sandbox-agent: {} bytes of output omitted]\n{}",
            String::from_utf8_lossy(head_rest),
            tail_start - gap_from + skip as u64,
            String::from_utf8_lossy(&tail[skip..skip + keep])
        );
        Since {
            text,
            from: begin,
            next: tail_start + (skip + keep) as u64,
        }
    }
}

/// Leading UTF-8 continuation bytes (at most 3): the rest of a character
/// whose start was cut off.
fn continuation_len(bytes: &[u8]) -> usize {
    bytes
        .iter()
        .take(3)
        .take_while(|b| (**b & 0b1100_0000) == 0b1000_0000)
        .count()
}

/// The length of `bytes` without a trailing incomplete UTF-8 character.
fn complete_prefix_len(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        // Invalid bytes (not UTF-8 output) pass as they are, lossily.
        Err(_) => bytes.len(),
    }
}

/// How a command ended.
pub struct Finished {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
}

/// A started command. Dropping it without `wait` kills what it started, so an unwinding
/// handler never leaves a command running unobserved.
pub struct Running {
    child: Child,
    /// Who it runs as: what a kill must reach.
    run_as: RunAs,
    output: Arc<Mutex<Output>>,
    reader_done: mpsc::Receiver<()>,
    started: Instant,
    reaped: bool,
}

/// Starts `command` as `run_as`, in its own session and process group, with stdin null and
/// stdout+stderr on one pipe, so the captured output keeps the order in which it was written.
pub fn spawn(mut command: Command, run_as: RunAs, redactor: Redactor) -> io::Result<Running> {
    let (reader, writer) = io::pipe()?;
    let output = Arc::new(Mutex::new(Output::new(redactor)));
    let (done_tx, reader_done) = mpsc::channel();
    let sink = output.clone();
    // Started before the child so a failed thread spawn leaves nothing to clean up.
    thread::Builder::new()
        .name("output".into())
        .spawn(move || {
            read_into(reader, &sink);
            let _ = done_tx.send(());
        })?;
    command
        .stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer);
    run_as.prepare(&mut command);
    let started = Instant::now();
    // The spawner drops `command`, which holds our copies of the pipe's write end: the reader
    // sees EOF only once every copy is closed. (On the error paths above, dropping does the same.)
    let child = spawn_from_lifelong_thread(command)?;
    Ok(Running {
        child,
        run_as,
        output,
        reader_done,
        started,
        reaped: false,
    })
}

type SpawnJob = (Command, mpsc::Sender<io::Result<Child>>);

/// Forks every command from one thread that lives as long as the agent. A child dies with the
/// agent (`RunAs::prepare` sets its parent-death signal), but Linux sends that signal when the
/// *thread* that forked it exits, and requests run on short-lived threads: forked there, a
/// detached process would be killed as its request thread ended.
fn spawn_from_lifelong_thread(command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnJob>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, queue) = mpsc::channel::<SpawnJob>();
        // Bounded by the agent's life: it serves spawns until the process exits.
        let started = thread::Builder::new()
            .name("spawner".into())
            .spawn(move || {
                for (mut command, reply) in queue {
                    let _ = reply.send(command.spawn());
                }
            });
        if let Err(e) = started {
            eprintln!("error: cannot start the spawner thread: {e}");
        }
        Mutex::new(jobs)
    });
    let (reply, answer) = mpsc::channel();
    let gone = || io::Error::other("the spawner thread is gone");
    lock(spawner).send((command, reply)).map_err(|_| gone())?;
    answer.recv().map_err(|_| gone())?
}

/// Copies the pipe into `output` until EOF, i.e. until every process holding the write end
/// has exited or closed it (bounded by the kill in `Running::wait`).
fn read_into(mut reader: io::PipeReader, output: &Mutex<Output>) {
    let mut buf = vec![0u8; OUTPUT_READ_CHUNK_BYTES];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lock(output).write(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    lock(output).close();
}

impl Running {
    /// The live output buffer, readable while the command runs.
    pub fn output(&self) -> Arc<Mutex<Output>> {
        self.output.clone()
    }

    /// The process group id (the child leads its own group).
    pub fn pgid(&self) -> u32 {
        self.child.id()
    }

    pub fn run_as(&self) -> RunAs {
        self.run_as
    }

    /// Waits for the command to exit, killing what it started at `timeout`.
    pub fn wait(mut self, timeout: Duration) -> Finished {
        let deadline = self.started + timeout;
        let mut poll_ms = WAIT_POLL_MS_MIN;
        let mut timed_out = false;
        // Bounded by `deadline`: past it the group is killed and the loop ends.
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) => {}
                Err(_) => {
                    // We can no longer observe the child: stop it rather than leak it.
                    self.kill_all();
                    break reap(&mut self.child);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                timed_out = true;
                self.kill_all();
                break reap(&mut self.child);
            }
            thread::sleep(Duration::from_millis(poll_ms).min(deadline - now));
            poll_ms = next_poll_ms(poll_ms, self.started.elapsed());
        };
        self.reaped = true;
        // Background children may still hold the output pipe; give them a moment to finish
        // writing, then kill the rest of the group so the call returns.
        let drain = Duration::from_millis(OUTPUT_DRAIN_MS);
        if self.reader_done.recv_timeout(drain).is_err() {
            kill_group(self.child.id());
            if self.reader_done.recv_timeout(drain).is_err() {
                // Something that left the group (setsid) still holds the pipe: as a workspace
                // user it dies with the rest of that user; as the agent's own user
                // (`--unisolated`) it cannot be found, so give up on the remaining output (the
                // reader thread ends when that process does).
                self.kill_all();
                if self.reader_done.recv_timeout(drain).is_err() {
                    lock(&self.output).close();
                }
            }
        }
        Finished {
            exit_code: status.and_then(|s| s.code()),
            signal: status.and_then(|s| s.signal()),
            timed_out,
            duration_ms: self.started.elapsed().as_millis() as u64,
        }
    }

    /// Kills everything the command started (`RunAs::kill`).
    fn kill_all(&self) {
        if let Err(e) = self.run_as.kill(self.child.id()) {
            eprintln!("warning: {e}");
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_all();
            reap(&mut self.child);
        }
    }
}

/// Reaps a child that was just SIGKILLed, waiting at most `KILL_REAP_MS`. A child stuck in
/// uninterruptible I/O past that stays a zombie rather than blocking the caller forever.
fn reap(child: &mut Child) -> Option<ExitStatus> {
    let deadline = Instant::now() + Duration::from_millis(KILL_REAP_MS);
    let mut poll_ms = WAIT_POLL_MS_MIN;
    // Bounded by `deadline`.
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(poll_ms));
                poll_ms = (poll_ms * 2).min(WAIT_POLL_MS_MAX);
            }
            _ => return None,
        }
    }
}

/// The sleep after one of `poll_ms` when the command has run for `elapsed`: the minimum for
/// the first `WAIT_POLL_FAST_MS`, then doubling up to `WAIT_POLL_MS_MAX`.
fn next_poll_ms(poll_ms: u64, elapsed: Duration) -> u64 {
    if elapsed < Duration::from_millis(WAIT_POLL_FAST_MS) {
        WAIT_POLL_MS_MIN
    } else {
        (poll_ms * 2).min(WAIT_POLL_MS_MAX)
    }
}

/// Runs a command to completion (or `timeout`) and returns how it ended plus its output.
pub fn run(
    command: Command,
    run_as: RunAs,
    timeout: Duration,
    redactor: Redactor,
) -> io::Result<(Finished, Captured)> {
    let running = spawn(command, run_as, redactor)?;
    let output = running.output();
    let finished = running.wait(timeout);
    let captured = lock(&output).capture();
    Ok((finished, captured))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_stay_quick_for_a_quarter_second_then_back_off_to_the_cap() {
        let fast = Duration::from_millis(WAIT_POLL_FAST_MS - 1);
        assert_eq!(next_poll_ms(1, fast), WAIT_POLL_MS_MIN);
        let slow = Duration::from_millis(WAIT_POLL_FAST_MS);
        assert_eq!(next_poll_ms(1, slow), 2);
        assert_eq!(next_poll_ms(32, slow), WAIT_POLL_MS_MAX);
        assert_eq!(next_poll_ms(WAIT_POLL_MS_MAX, slow), WAIT_POLL_MS_MAX);
    }

    #[test]
    fn output_keeps_everything_under_the_cap() {
        let mut out = Output::new(Redactor::default());
        out.write(b"hello ");
        out.write(b"world");
        let c = out.capture();
        assert_eq!(c.text, "hello world");
        assert_eq!(c.bytes, 11);
        assert!(!c.truncated);
    }

    #[test]
    fn output_keeps_head_and_tail_when_truncated() {
        let mut out = Output::new(Redactor::default());
        out.write(&vec![b'h'; OUTPUT_HEAD_BYTES]);
        // Many small chunks, then one larger than the whole tail budget.
        for _ in 0..1000 {
            out.write(&[b'~'; 1000]);
        }
        out.write(&vec![b'y'; OUTPUT_BYTES_MAX]);
        out.write(b"END");
        assert_eq!(out.retained_bytes(), OUTPUT_BYTES_MAX);
        let c = out.capture();
        assert!(c.truncated);
        assert_eq!(
            c.bytes,
            (OUTPUT_HEAD_BYTES + 1000 * 1000 + OUTPUT_BYTES_MAX + 3) as u64
        );
        assert!(c.text.starts_with(&"h".repeat(OUTPUT_HEAD_BYTES)));
        assert!(c.text.ends_with("yyyEND"));
        assert!(!c.text.contains('~'), "the middle is dropped");
        assert!(c.text.contains("bytes of output omitted"));
    }

    #[test]
    fn a_secret_across_the_cut_is_masked_whole() {
        const SECRET: &str = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";
        let mut out = Output::new(Redactor::new([SECRET]));
        // The secret starts 10 bytes before the end of the kept head, arriving in two writes.
        out.write(&vec![b'h'; OUTPUT_HEAD_BYTES - 10]);
        out.write(&SECRET.as_bytes()[..5]);
        out.write(&SECRET.as_bytes()[5..]);
        out.write(&vec![b'~'; OUTPUT_BYTES_MAX]);
        out.close();
        let text = out.capture().text;
        assert!(out.capture().truncated);
        for window in SECRET.as_bytes().windows(5) {
            let part = std::str::from_utf8(window).unwrap_or_default();
            assert!(
                !text.contains(part),
                "{part:?} of the secret survived the cut"
            );
        }
        assert!(
            text.contains("hhh***"),
            "the mask sits where the secret was"
        );
    }

    #[test]
    fn bytes_after_close_are_dropped_not_kept_unscrubbed() {
        let mut out = Output::new(Redactor::new(["s3cret-value"]));
        out.write(b"a ");
        out.close();
        out.write(b"s3cret-value");
        assert_eq!(out.capture().text, "a ");
    }

    #[test]
    fn output_split_character_is_not_mangled() {
        let mut out = Output::new(Redactor::default());
        let mut data = vec![b'a'; OUTPUT_HEAD_BYTES - 1];
        data.extend_from_slice("é".as_bytes()); // 2 bytes: straddles head and tail
        out.write(&data);
        assert_eq!(
            out.capture().text,
            format!("{}é", "a".repeat(OUTPUT_HEAD_BYTES - 1))
        );
    }

    #[test]
    fn run_reports_exit_code_and_signal() {
        let env = BTreeMap::new();
        let dir = std::env::temp_dir();
        let timeout = Duration::from_secs(10);
        let none = Redactor::default;
        let cmd = shell_command(&dir, "echo a; exit 7", &env, &HostTools::as_is(path_env()));
        let (fin, out) = run(cmd, RunAs::Agent, timeout, none()).expect("run");
        assert_eq!(
            (fin.exit_code, fin.signal, fin.timed_out),
            (Some(7), None, false)
        );
        assert_eq!(out.text, "a\n");
        let cmd = shell_command(&dir, "kill -TERM $$", &env, &HostTools::as_is(path_env()));
        let (fin, _) = run(cmd, RunAs::Agent, timeout, none()).expect("run");
        assert_eq!((fin.exit_code, fin.signal), (None, Some(libc::SIGTERM)));
    }
}

#[cfg(test)]
mod since_tests {
    use super::*;

    fn concat_chunks(out: &Output) -> String {
        let (mut at, mut all) = (0, String::new());
        for _ in 0..10_000 {
            let c = out.since(at);
            all.push_str(&c.text);
            if c.next == at {
                break;
            }
            at = c.next;
        }
        all
    }

    #[test]
    fn chunks_read_in_turn_rebuild_the_output() {
        let mut out = Output::new(Redactor::default());
        let mut all = String::new();
        let mut at = 0;
        for i in 0..50 {
            let line = format!("line {i} é\n");
            // A character split across writes comes whole in one chunk.
            let (a, b) = line.as_bytes().split_at(line.len() - 2);
            out.write(a);
            let c = out.since(at);
            all.push_str(&c.text);
            at = c.next;
            out.write(b);
        }
        out.close();
        all.push_str(&out.since(at).text);
        let expected: String = (0..50).map(|i| format!("line {i} é\n")).collect();
        assert_eq!(all, expected);
        assert_eq!(concat_chunks(&out), expected);
    }

    #[test]
    fn bytes_no_longer_held_are_named_not_invented() {
        let mut out = Output::new(Redactor::default());
        out.write(&vec![b'h'; OUTPUT_HEAD_BYTES]);
        out.write(&vec![b'm'; OUTPUT_BYTES_MAX]);
        out.write(b"END");
        out.close();
        let c = out.since(OUTPUT_HEAD_BYTES as u64 + 10);
        assert!(
            c.text.starts_with("\n[sluice-sandbox-agent: "),
            "{}",
            &c.text[..60]
        );
        assert!(c.text.ends_with("mEND"));
        assert_eq!(c.next, (OUTPUT_HEAD_BYTES + OUTPUT_BYTES_MAX + 3) as u64);
        let past = out.since(c.next + 5);
        assert_eq!((past.text.as_str(), past.next), ("", c.next));
    }
}
