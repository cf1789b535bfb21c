// Project paths, wrangler's offline environment, env-file reading/writing and the secrets a
// stack is given: shared by `npm start`, the scripts and the end-to-end harness (tools/stack/).

import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, statfsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as util from 'node:util';

export const ROOT = fileURLToPath(new URL('../..', import.meta.url)).replace(/\/$/, '');
export const WRANGLER_BIN = join(ROOT, 'node_modules', '.bin', 'wrangler');
export const AGENT_BIN = join(ROOT, 'target', 'debug', 'sluice-sandbox-agent');

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
// Layout of the local development setup (`npm start`, scripts/send-sample-webhook.mjs).
export const DEV = {
  workerUrl: 'http://127.0.0.1:8787',
  demo: { owner: 'demo', repo: 'hello' },
  standinReposDir: join(ROOT, '.sluice', 'standin-repos'),
  defaultsFile: join(ROOT, '.wrangler', 'sluice-defaults.vars'),
  devVarsFile: join(ROOT, '.dev.vars'),
};
