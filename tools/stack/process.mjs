// Process groups, bounded commands, ports and polling: the pieces every stack process (wrangler,
// the agent, a build) is started, waited for and stopped with.

import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { ROOT } from './env.mjs';

// A single health probe must not hang a wait loop on a half-open connection.
const PROBE_TIMEOUT_MS = 2_000;
// Polling interval while waiting for an HTTP endpoint to come up.
const PROBE_INTERVAL_MS = 100;

// Spawns a command as the leader of its own process group, so the whole tree (wrangler and its
// workerd, a command the agent runs) can be signalled at once.
export function spawnGroup(cmd, args, { cwd = ROOT, env = {}, stdio = 'inherit' } = {}) {
  const child = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio, detached: true });
  child.exited = new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }));
    child.once('error', (error) => resolve({ code: null, signal: null, error }));
  });
  return child;
}

// Signals a process group; a group that is already gone is not an error. Signalled even when the
// leader has exited, because its children (wrangler's workerd) may outlive it.
export function killGroup(child, signal = 'SIGTERM') {
  if (!child?.pid) return;
  try {
    process.kill(-child.pid, signal);
  } catch (err) {
    if (err.code !== 'ESRCH') throw err;
  }
}

// Stops a group: SIGTERM, up to `graceMs` for the leader to exit, then SIGKILL for whatever is
// left of the group (a leader that exits on SIGTERM may leave children behind).
export async function stopGroup(child, graceMs) {
  if (!child?.pid) return;
  killGroup(child, 'SIGTERM');
  await Promise.race([child.exited, delay(graceMs)]);
  killGroup(child, 'SIGKILL');
  await child.exited;
}

// Polls `fn` every `intervalMs` until it returns a truthy value (returned); an error thrown by
// `fn` ends the wait at once (unlike the e2e harness's waitFor, which tolerates them).
export async function pollUntil(fn, { what, timeoutMs, intervalMs }) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const v = await fn();
    if (v) return v;
    await delay(intervalMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
}

export function delay(ms) {
  return new Promise((resolve) => {
    setTimeout(resolve, ms);
  });
}

// A port that was free a moment ago (bind to 0, read it, release it). Another process may take it
// in between; callers bind immediately after.
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}
// Polls `url` until it answers 200 or `timeoutMs` passes. `alive()` returning false (the server
// process died) ends the wait early.
export async function waitForHttp(url, { timeoutMs, alive = () => true }) {
  const deadline = Date.now() + timeoutMs;
  let last = 'no attempt';
  while (Date.now() < deadline) {
    if (!alive()) throw new Error(`server exited while waiting for ${url} (last: ${last})`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(PROBE_TIMEOUT_MS) });
      if (res.status === 200) return;
      last = `HTTP ${res.status}`;
      await res.arrayBuffer();
    } catch (err) {
      last = err.cause?.code ?? err.message;
    }
    await delay(PROBE_INTERVAL_MS);
  }
  throw new Error(`${url} did not answer 200 within ${timeoutMs} ms (last: ${last})`);
}

// Runs a command to completion in its own process group, killing the group if it outlasts
// `timeoutMs`. With stdio 'pipe' the combined output is collected and returned (and included in
// the error when the command fails). `onChild` sees the child, so a signal handler can stop it.
export async function runBounded(cmd, args, { timeoutMs, label = cmd, cwd, env, stdio = 'inherit', onChild = () => {} }) {
  const piped = stdio === 'pipe';
  const child = spawnGroup(cmd, args, { cwd, env, stdio: piped ? ['ignore', 'pipe', 'pipe'] : ['ignore', 'inherit', 'inherit'] });
  onChild(child);
  let output = '';
  if (piped) {
    child.stdout.on('data', (chunk) => { output += chunk; });
    child.stderr.on('data', (chunk) => { output += chunk; });
  }
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup(child, 'SIGKILL');
  }, timeoutMs);
  const { code, signal, error } = await child.exited;
  clearTimeout(timer);
  const tail = output.split('\n').slice(-40).join('\n');
  if (timedOut) throw new Error(`${label} did not finish within ${timeoutMs} ms\n${tail}`);
  if (error) throw new Error(`${label} could not start: ${error.message}`);
  if (code !== 0) throw new Error(`${label} failed (exit ${code ?? signal})\n${tail}`);
  return output;
}

// Resolves once nothing listens on 127.0.0.1:`port` any more (bind succeeds), so a restarted
// server can take the same port after its predecessor was killed.
export async function waitPortFree(port, timeoutMs) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const free = await new Promise((resolve) => {
      const server = createServer();
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
    });
    if (free) return;
    if (Date.now() > deadline) throw new Error(`port ${port} still in use after ${timeoutMs} ms`);
    await delay(PROBE_INTERVAL_MS);
  }
}

// Whether something accepts connections on 127.0.0.1:`port` now (one bounded probe).
export function portListens(port) {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1' });
    const done = (v) => { socket.destroy(); resolve(v); };
    socket.setTimeout(PROBE_TIMEOUT_MS, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

// The last `n` lines of a log file, or a note that it is missing.
export function tailLines(path, n) {
  if (!existsSync(path)) return `(no ${path})`;
  return readFileSync(path, 'utf8').split('\n').slice(-n).join('\n');
}
