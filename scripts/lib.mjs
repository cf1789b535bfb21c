// Helpers shared by `npm start`, the sample-webhook sender and the end-to-end test harness:
// project paths, wrangler's offline environment, env-file reading/writing, process groups and
// bounded waits.

import { spawn } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, statfsSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as util from 'node:util';

export const ROOT = fileURLToPath(new URL('..', import.meta.url)).replace(/\/$/, '');
export const WRANGLER_BIN = join(ROOT, 'node_modules', '.bin', 'wrangler');
export const AGENT_BIN = join(ROOT, 'target', 'debug', 'sluice-sandbox-agent');

// The agent prints exactly this line once it is accepting connections (crates/sandbox-agent).
const AGENT_READY_RE = /sluice-sandbox-agent listening on (http:\/\/\S+)/;
// The agent binds and prints its ready line within milliseconds; 15 s covers a loaded machine
// while still failing fast when the binary is broken.
export const AGENT_START_TIMEOUT_MS = 15_000;
// A refusal to start is one paragraph; this keeps a chatty agent's log out of the error.
const AGENT_STARTUP_LOG_CHARS_MAX = 4_000;
// A single health probe must not hang a wait loop on a half-open connection.
const PROBE_TIMEOUT_MS = 2_000;
// Polling interval while waiting for an HTTP endpoint to come up.
const PROBE_INTERVAL_MS = 100;

// Same as scripts/env.sh: no telemetry, no request.cf fetch from Cloudflare, config/logs kept in
// the project (or in `dir` for isolated test stacks) instead of the home directory.
export function wranglerEnv(dir = join(ROOT, '.wrangler')) {
  const env = {
    WRANGLER_SEND_METRICS: 'false',
    CLOUDFLARE_CF_FETCH_ENABLED: 'false',
    XDG_CONFIG_HOME: join(dir, 'config'),
    WRANGLER_LOG_PATH: join(dir, 'logs'),
  };
  mkdirSync(env.XDG_CONFIG_HOME, { recursive: true });
  mkdirSync(env.WRANGLER_LOG_PATH, { recursive: true });
  return env;
}

// Test and bench stacks run without wrangler's devtools inspector. With it on, wrangler 4.86's
// InspectorProxyWorker relays every runtime inspector event (each console line, each subrequest's
// network events: ~50 per delivered webhook) to wrangler's node process as an HTTP request, which
// appends it to the debug log file: under a 500-delivery burst that was 80% of node's CPU and 90%
// of the proxy runtime's, on a 2-core machine the Worker needs. Wrangler has no flag for it; it
// turns the proxy off when a VS Code debug terminal owns the inspector, which this variable says
// (with no bootloader in NODE_OPTIONS nothing attaches). `npm start` keeps the inspector for people.
// The harness checks the inspector port stays closed, so an upgrade that changes this is seen.
export const NO_INSPECTOR_ENV = { VSCODE_INSPECTOR_OPTIONS: '{}' };

// Where test and bench stacks keep their throwaway state (persisted D1 and Durable Object state,
// the stand-in's git repositories, logs): /dev/shm when it is a RAM filesystem with room, else
// the temp dir. On a disk, each SQLite commit of the local D1 and Durable Objects waits for an
// fsync, and the one workerd thread that runs the Worker, every object and D1 waits with it:
// under the bench's burst that was a third of the throughput (37-47 vs 52-62 deliveries a second
// in alternating runs). The state is deleted with the stack; a kill -9 of the stack keeps it
// (tmpfs outlives processes), as the soak needs.
const SCRATCH_RAM_DIR = '/dev/shm';
// Room a RAM scratch dir must have: a soak's stacks hold a few hundred MB at most; a container's
// default 64 MB /dev/shm is too small and falls back to the temp dir.
const SCRATCH_RAM_FREE_MIN_BYTES = 1024 ** 3;
// statfs(2)'s f_type of a tmpfs (linux/magic.h).
const TMPFS_MAGIC = 0x01021994;

// SLUICE_SCRATCH_DIR overrides the choice (a kill -9 of a test run leaves its files behind,
// and in RAM they stay until removed: `rm -rf /dev/shm/sluice-*`).
export function scratchRoot() {
  if (process.env.SLUICE_SCRATCH_DIR) return process.env.SLUICE_SCRATCH_DIR;
  try {
    const s = statfsSync(SCRATCH_RAM_DIR);
    if (s.type === TMPFS_MAGIC && s.bavail * s.bsize >= SCRATCH_RAM_FREE_MIN_BYTES) return SCRATCH_RAM_DIR;
  } catch {
    // No /dev/shm here.
  }
  return tmpdir();
}

export function randomToken(bytes = 24) {
  return randomBytes(bytes).toString('hex');
}

// An RSA key pair shaped like a GitHub App's: GitHub hands out PKCS#1 ("BEGIN RSA PRIVATE KEY").
export function generateAppKeyPair() {
  return generateKeyPairSync('rsa', {
    modulusLength: 2048,
    privateKeyEncoding: { type: 'pkcs1', format: 'pem' },
    publicKeyEncoding: { type: 'spki', format: 'pem' },
  });
}

// Parses a .dev.vars / .env file the way wrangler does (dotenv rules); missing file -> {}.
export function readEnvFile(path) {
  if (!existsSync(path)) return {};
  const text = readFileSync(path, 'utf8');
  if (typeof util.parseEnv === 'function') return util.parseEnv(text);
  return parseSimpleEnv(text);
}

// Fallback for Node 20 releases before util.parseEnv (20.12): KEY=VALUE, KEY="VALUE" with \n
// escapes, KEY='VALUE', optional `export`, # comments.
function parseSimpleEnv(text) {
  const vars = {};
  for (const line of text.split(/\r?\n/)) {
    const match = /^\s*(?:export\s+)?([\w.-]+)\s*=\s*(.*?)\s*$/.exec(line);
    if (!match) continue;
    let value = match[2];
    if (/^"(.*)"$/.test(value)) value = value.slice(1, -1).replace(/\\n/g, '\n').replace(/\\r/g, '\r');
    else if (/^'(.*)'$/.test(value)) value = value.slice(1, -1);
    else value = value.replace(/\s+#.*$/, '');
    vars[match[1]] = value;
  }
  return vars;
}

// Serialises vars for `wrangler dev --env-file`. Values are double-quoted on one line with literal
// \n escapes (dotenv turns them back into newlines). dotenv has no escape for `"` and
// dotenv-expand would rewrite `$NAME`, so such values are refused rather than silently mangled.
export function formatEnvFile(vars) {
  let out = '# Written by Sluice scripts; values here are defaults, .dev.vars overrides them.\n';
  for (const [key, raw] of Object.entries(vars)) {
    const value = String(raw);
    if (!/^[A-Z_][A-Z0-9_]*$/.test(key)) throw new Error(`invalid env var name ${key}`);
    if (/["$]/.test(value)) throw new Error(`env var ${key} contains '"' or '$', which env files cannot carry`);
    out += `${key}="${value.replace(/\r?\n/g, '\\n')}"\n`;
  }
  return out;
}

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

// Whether the sandbox agent can isolate workspaces here: it runs each workspace's commands as a
// user of their own only when it runs as root; otherwise it must be started --unisolated (commands
// run as this user; not safe for untrusted pull requests).
export const AGENT_ISOLATED = process.getuid?.() === 0;

// Where GitHub serves git unless GITHUB_GIT_URL says otherwise (`github::GIT_URL_DEFAULT`).
export const GIT_URL_DEFAULT = 'https://github.com';

// The `--git-url-prefix` an agent needs for the Worker's checkouts: the Worker derives every clone
// URL as `<GITHUB_GIT_URL>/<owner>/<name>.git` (`github::clone_url`), so the agent must allow
// exactly that base, whether github.com, a GitHub Enterprise Server or the stand-in.
export function gitUrlPrefix(gitUrl) {
  return `${(gitUrl || GIT_URL_DEFAULT).replace(/\/+$/, '')}/`;
}

// What `npm start`'s local agent allows checkouts from: where the Worker clones, GITHUB_GIT_URL
// as wrangler gives it to the Worker (.dev.vars over the defaults npm start writes).
export function localAgentGitUrlPrefixes(userVars, defaults) {
  return [gitUrlPrefix(userVars.GITHUB_GIT_URL || defaults.GITHUB_GIT_URL)];
}

// Starts the sandbox agent and resolves its base URL once it prints its ready line. Output is
// passed to `onOutput(chunk)` (for log files or the terminal). `gitUrlPrefixes`: where its
// checkouts may clone from (the agent's default is https://github.com/ only). `root` must be a
// directory the workspace users can reach (not under a 0700 directory) and nothing else of
// ours should be readable below its parents.
export async function startAgent({ listen, root, token, gitUrlPrefixes = [], unisolated = !AGENT_ISOLATED, onOutput = () => {} }) {
  if (!existsSync(AGENT_BIN)) throw new Error(`${AGENT_BIN} is missing; run 'npm run build'`);
  const args = ['--listen', listen, '--root', root];
  for (const prefix of gitUrlPrefixes) args.push('--git-url-prefix', prefix);
  if (unisolated) args.push('--unisolated');
  const child = spawnGroup(AGENT_BIN, args, {
    env: { SANDBOX_AGENT_TOKEN: token },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // What it said before it was ready: a refusal to start says why there.
  let said = '';
  child.stderr.on('data', (chunk) => {
    if (said.length < AGENT_STARTUP_LOG_CHARS_MAX) said += chunk;
    onOutput(chunk);
  });
  const url = await new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`sandbox agent not ready after ${AGENT_START_TIMEOUT_MS} ms`)), AGENT_START_TIMEOUT_MS);
    child.stdout.on('data', (chunk) => {
      onOutput(chunk);
      seen += chunk;
      const match = AGENT_READY_RE.exec(seen);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.exited.then(({ code, signal, error }) => {
      clearTimeout(timer);
      reject(new Error(`sandbox agent exited before it was ready (code ${code}, signal ${signal}${error ? `, ${error.message}` : ''}): ${said.trim()}`));
    });
  }).catch((err) => {
    killGroup(child, 'SIGKILL');
    throw err;
  });
  return { child, url };
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

// Layout of the local development setup (`npm start`, scripts/send-sample-webhook.mjs).
export const DEV = {
  workerUrl: 'http://127.0.0.1:8787',
  demo: { owner: 'demo', repo: 'hello' },
  standinReposDir: join(ROOT, '.sluice', 'standin-repos'),
  defaultsFile: join(ROOT, '.wrangler', 'sluice-defaults.vars'),
  devVarsFile: join(ROOT, '.dev.vars'),
};
