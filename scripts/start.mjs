// `npm start`: a complete local Sluice. Installs and builds, applies D1 migrations, starts the
// sandbox agent and (unless .dev.vars configures a real GitHub App) the GitHub stand-in with a demo
// repository, then runs the Worker under `wrangler dev` and drives its cron handler.
//
// Values in .dev.vars always win: the defaults written here go to .wrangler/sluice-defaults.vars,
// which wrangler reads before .dev.vars.

import { createPublicKey } from 'node:crypto';
import { chmodSync, existsSync, lstatSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { commitFiles, headSha } from '../tools/github-standin/git.mjs';
import { startStandin } from '../tools/github-standin/server.mjs';
import {
  AGENT_ISOLATED, DEV, ROOT, WRANGLER_BIN, formatEnvFile, generateAppKeyPair, localAgentGitUrlPrefixes, prepareContainerLayer, randomToken,
  readEnvFile, removeContainers, runBounded, sandboxContainers, spawnGroup, startAgent, stopGroup, waitForHttp, wranglerEnv,
} from '../tools/stack/index.mjs';

const WORKER_URL = DEV.workerUrl;
const { hostname: WORKER_HOST, port: WORKER_PORT } = new URL(WORKER_URL);
const AGENT_HOST = '127.0.0.1';
const AGENT_PORT = '8791';
const STANDIN_PORT = 8790;
const STANDIN_APP_ID = 1;
const STANDIN_INSTALLATION_ID = 42;
const DEMO = DEV.demo;

const STATE_DIR = join(ROOT, '.sluice');
const STANDIN_REPOS_DIR = DEV.standinReposDir;
const STANDIN_KEY_FILE = join(STATE_DIR, 'standin-app-key.pem');
// Outside the checkout: the agent's workspace users must reach their workspaces, and nothing of
// the checkout (.dev.vars, the stand-in's key, wrangler's state) should be on the way. One fixed
// name per user, so a restarted agent finds its workspaces (and kills what they left running).
const AGENT_ROOT = join(tmpdir(), `sluice-sandbox-${process.getuid?.() ?? 'user'}`);
const WRANGLER_DIR = join(ROOT, '.wrangler');
const PERSIST_DIR = join(WRANGLER_DIR, 'state');
const DEFAULTS_FILE = DEV.defaultsFile;
const DEV_VARS_FILE = DEV.devVarsFile;

// Cold installs of worker-build and wasm-bindgen-cli take ~5 minutes each on 2 cores; 30 minutes
// still ends a setup that hangs (e.g. a registry that stopped answering).
const SETUP_TIMEOUT_MS = 30 * 60_000;
// A cold `worker-build --release` is 33-42 s plus the agent build; 15 minutes allows a cold cargo
// cache on a slow machine.
const BUILD_TIMEOUT_MS = 15 * 60_000;
// Applying migrations locally takes ~2 s.
const MIGRATIONS_TIMEOUT_MS = 2 * 60_000;
// `wrangler dev` answers ~1.5 s after start with a prebuilt Worker; the first start in a checkout
// also bundles the shim and unpacks workerd, so allow a minute.
const WORKER_START_TIMEOUT_MS = 60_000;
// Crons never fire by themselves under `wrangler dev`; the Worker's scheduled handler (sweeping
// waits and stuck runs) only runs when something calls /__scheduled. Every 30 s keeps a dev
// session close to a deployed per-minute cron without flooding the log.
const CRON_INTERVAL_MS = 30_000;
// One cron tick must not pile up behind a wedged Worker; the next tick tries again.
const CRON_REQUEST_TIMEOUT_MS = 25_000;
// Children get this long to exit on SIGTERM before their process group is killed.
const SHUTDOWN_GRACE_MS = 5_000;

const DEMO_FILES = {
  '.sluice.toml': '[check]\ncommand = "echo hello from sluice && test -f README.md"\n',
  'README.md': '# hello\n\nDemo repository served by the Sluice GitHub stand-in.\n',
};

// `npm run start:containers` (or SLUICE_CONTAINERS=1): the sandbox runs in real containers on this
// machine's Docker (SANDBOX_BACKEND = "container"; docs/containers-local.md) instead of an agent
// process.
const CONTAINERS = process.argv.includes('--containers') || process.env.SLUICE_CONTAINERS === '1';

const children = new Set();
let standin = null;
let layer = null;
let cronTimer = null;
let shuttingDown = false;

function log(message) {
  console.log(`[sluice] ${message}`);
}

function track(child) {
  children.add(child);
  child.exited.then(() => children.delete(child));
  return child;
}

async function shutdown(code) {
  if (shuttingDown) return;
  shuttingDown = true;
  clearInterval(cronTimer);
  await Promise.all([...children].map((child) => stopGroup(child, SHUTDOWN_GRACE_MS)));
  // The runtime leaves its containers running when wrangler stops.
  if (layer) await removeContainers(layer.docker, await sandboxContainers(layer.docker)).catch((err) => log(`removing containers: ${err.message}`));
  if (standin) await standin.close();
  process.exit(code);
}

function runStep(label, cmd, args, timeoutMs, env = {}) {
  log(label);
  return runBounded(cmd, args, { label, timeoutMs, env, onChild: track });
}

// The stand-in's App key is generated once and kept, so a restart keeps the same identity.
function standinKey() {
  if (!existsSync(STANDIN_KEY_FILE)) {
    writeFileSync(STANDIN_KEY_FILE, generateAppKeyPair().privateKey, { mode: 0o600 });
  }
  return readFileSync(STANDIN_KEY_FILE, 'utf8');
}

// The demo repository gets its first commit once; later starts reuse its history.
function ensureDemoRepo() {
  const existing = headSha(STANDIN_REPOS_DIR, DEMO.owner, DEMO.repo);
  if (existing) return existing;
  return commitFiles(STANDIN_REPOS_DIR, DEMO.owner, DEMO.repo, { files: DEMO_FILES, message: 'Add Sluice demo' });
}

// The stand-in replaces GitHub only when .dev.vars configures no GitHub App at all; a user who
// set an App id or key means their real App, so their values are not pointed at the stand-in.
function wantsStandin(userVars) {
  return !['GITHUB_API_URL', 'GITHUB_APP_ID', 'GITHUB_APP_PRIVATE_KEY'].some((key) => userVars[key]);
}

async function startGithub(userVars, defaults) {
  if (!wantsStandin(userVars)) {
    if (!userVars.GITHUB_API_URL) defaults.GITHUB_API_URL = 'https://api.github.com';
    return null;
  }
  const privateKey = standinKey();
  standin = await startStandin({
    port: STANDIN_PORT,
    // With containers, where they reach the host (the Docker bridge gateway).
    host: layer?.gateway ?? '127.0.0.1',
    reposDir: STANDIN_REPOS_DIR,
    appId: STANDIN_APP_ID,
    publicKeyPem: createPublicKey(privateKey).export({ type: 'spki', format: 'pem' }),
    installations: [STANDIN_INSTALLATION_ID],
  });
  defaults.GITHUB_API_URL = standin.url;
  defaults.GITHUB_GIT_URL = standin.url;
  // Dispatch tokens from the stand-in's OIDC issuer (POST /_standin/oidc/tokens mints one). The
  // Worker takes an issuer other than GitHub's on loopback only: not with containers, where the
  // stand-in listens on the Docker bridge.
  if (!layer) defaults.GITHUB_OIDC_ISSUER = `${standin.url}/_standin/oidc`;
  defaults.GITHUB_APP_ID = String(STANDIN_APP_ID);
  defaults.GITHUB_APP_SLUG = 'sluice';
  defaults.GITHUB_APP_PRIVATE_KEY = privateKey;
  return { url: standin.url, demoSha: ensureDemoRepo() };
}

// Writes output chunks line by line with a prefix, so interleaved agent and wrangler logs stay
// readable; a partial last line waits for its end.
function prefixLines(prefix, stream) {
  let pending = '';
  return (chunk) => {
    pending += chunk;
    const lines = pending.split('\n');
    pending = lines.pop();
    for (const line of lines) stream.write(`${prefix}${line}\n`);
  };
}

// Keeps what holds secrets readable by this user alone, whatever mode it was created with:
// .dev.vars (the App key, the webhook secret, tokens), the defaults file, the stand-in's key, and
// the directories holding them and wrangler's state. The workspace users of an isolated agent
// run on this machine too.
function restrictSecrets() {
  for (const [path, mode] of [
    [STATE_DIR, 0o700], [WRANGLER_DIR, 0o700], [DEV_VARS_FILE, 0o600], [DEFAULTS_FILE, 0o600], [STANDIN_KEY_FILE, 0o600],
  ]) {
    if (existsSync(path)) chmodSync(path, mode);
  }
}

// The agent's root, made if missing; a directory someone else made (the name is predictable, in
// a shared /tmp) is refused rather than used.
function agentRoot() {
  mkdirSync(AGENT_ROOT, { recursive: true, mode: 0o711 });
  const stat = lstatSync(AGENT_ROOT);
  if (!stat.isDirectory() || stat.uid !== process.getuid?.()) {
    throw new Error(`${AGENT_ROOT} is not a directory of this user; remove it or start as its owner`);
  }
  return AGENT_ROOT;
}

function isLocalAgentUrl(url) {
  try {
    const { hostname, port } = new URL(url);
    return ['127.0.0.1', 'localhost'].includes(hostname) && port === AGENT_PORT;
  } catch {
    return false;
  }
}

// The local agent runs unless .dev.vars points SANDBOX_URL at some other agent. It must accept
// the token the Worker will send, so a token from .dev.vars is used as is.
// Without root the agent cannot give each workspace a user of its own: it runs --unisolated
// (commands as this user), which is fine for your own repositories only.
async function startSandbox(userVars, defaults) {
  if (userVars.SANDBOX_URL && !isLocalAgentUrl(userVars.SANDBOX_URL)) return null;
  const token = userVars.SANDBOX_AGENT_TOKEN || randomToken();
  if (!AGENT_ISOLATED) {
    log('warning: not root, so the sandbox agent runs --unisolated: commands run as this user and can read '
      + 'each other\'s files and environment. Do not let it run untrusted pull requests.');
  }
  const agent = await startAgent({
    listen: `${AGENT_HOST}:${AGENT_PORT}`,
    root: agentRoot(),
    token,
    // Checkouts clone from where the Worker derives clone URLs: GITHUB_GIT_URL as the Worker
    // reads it (.dev.vars over the defaults written here: the stand-in, a GitHub Enterprise
    // Server, or github.com when unset).
    gitUrlPrefixes: localAgentGitUrlPrefixes(userVars, defaults),
    onOutput: prefixLines('[agent] ', process.stderr),
  });
  track(agent.child);
  defaults.SANDBOX_URL = agent.url;
  defaults.SANDBOX_AGENT_TOKEN = token;
  return agent.url;
}

function startWrangler(env) {
  const args = [
    'dev', '--port', WORKER_PORT, '--ip', WORKER_HOST, '--persist-to', PERSIST_DIR,
    '--test-scheduled', '--show-interactive-dev-session=false', '--env-file', DEFAULTS_FILE,
  ];
  if (existsSync(DEV_VARS_FILE)) args.push('--env-file', DEV_VARS_FILE);
  if (layer) args.push('--config', layer.config);
  const child = track(spawnGroup(WRANGLER_BIN, args, { env: { ...env, ...layer?.env }, stdio: ['ignore', 'inherit', 'inherit'] }));
  child.exited.then(({ code, signal }) => {
    if (shuttingDown) return;
    log(`wrangler dev exited (${code ?? signal}); stopping`);
    shutdown(code || 1);
  });
  return child;
}

async function cronTick() {
  try {
    const res = await fetch(`${WORKER_URL}/__scheduled?cron=*+*+*+*+*`, { signal: AbortSignal.timeout(CRON_REQUEST_TIMEOUT_MS) });
    await res.arrayBuffer();
    if (res.status !== 200) log(`cron tick answered HTTP ${res.status}`);
  } catch (err) {
    if (!shuttingDown) log(`cron tick failed: ${err.cause?.code ?? err.message}`);
  }
}

// setInterval would start a second tick while a slow one is still running; chaining does not.
function driveCron() {
  cronTimer = setTimeout(async () => {
    await cronTick();
    if (!shuttingDown) driveCron();
  }, CRON_INTERVAL_MS);
}

function printBanner({ github, sandboxUrl, defaults, userVars }) {
  const adminToken = userVars.ADMIN_TOKEN || defaults.ADMIN_TOKEN;
  const lines = [
    '',
    `Sluice is running at ${WORKER_URL}`,
    github
      ? `  GitHub: stand-in at ${github.url} (demo repository ${DEMO.owner}/${DEMO.repo} at ${github.demoSha.slice(0, 12)})`
      : `  GitHub: ${userVars.GITHUB_API_URL || defaults.GITHUB_API_URL} (App configured in .dev.vars)`,
    layer
      ? '  Sandbox: containers on this machine\'s Docker (crates/sandbox-agent/Dockerfile.local)'
      : `  Sandbox agent: ${sandboxUrl
        ? `${sandboxUrl} (${AGENT_ISOLATED ? 'a user per workspace' : '--unisolated: commands run as you'}; workspaces in ${AGENT_ROOT})`
        : `${userVars.SANDBOX_URL} (from .dev.vars)`}`,
    `  Cron handler: driven every ${CRON_INTERVAL_MS / 1000} s`,
    '',
  ];
  lines.push(
    'Dashboard (the link signs you in; the token after # never reaches the server\'s log):',
    `  ${WORKER_URL}/ui/login#token=${adminToken}`,
    '',
  );
  if (github) {
    lines.push(
      'Send sample webhooks (a passing PR, a failing PR, three pushes to main):', '  npm run demo',
      'or one pull_request webhook for the demo repository:', '  node scripts/send-sample-webhook.mjs', '',
    );
  }
  lines.push(
    'Inspect executions:',
    `  curl -H "Authorization: Bearer ${adminToken}" ${WORKER_URL}/v1/executions`,
    '',
    'Press Ctrl-C to stop.',
    '',
  );
  console.log(lines.join('\n'));
}

async function main() {
  process.once('SIGINT', () => shutdown(130));
  process.once('SIGTERM', () => shutdown(143));
  const wEnv = wranglerEnv();

  await runStep('setup (scripts/setup.sh)', 'bash', [join(ROOT, 'scripts', 'setup.sh')], SETUP_TIMEOUT_MS);
  // SLUICE_SKIP_BUILD=1 means "already built", as for wrangler's [build] command.
  if (process.env.SLUICE_SKIP_BUILD === '1') log('build skipped (SLUICE_SKIP_BUILD=1)');
  else await runStep('build (scripts/build.sh)', 'bash', [join(ROOT, 'scripts', 'build.sh')], BUILD_TIMEOUT_MS);
  await runStep('applying D1 migrations', WRANGLER_BIN, ['d1', 'migrations', 'apply', 'DB', '--local', '--persist-to', PERSIST_DIR],
    MIGRATIONS_TIMEOUT_MS, { ...wEnv, CI: 'true', SLUICE_SKIP_BUILD: '1' });

  mkdirSync(STATE_DIR, { recursive: true, mode: 0o700 });
  restrictSecrets();
  if (CONTAINERS) {
    log('container layer (scripts/containers/setup.sh, the agent image\'s build context)');
    layer = await prepareContainerLayer();
  }
  const userVars = readEnvFile(DEV_VARS_FILE);
  const defaults = {
    // Locally the sandbox is an agent process unless containers were asked for.
    SANDBOX_BACKEND: layer ? 'container' : 'agent',
    // wrangler dev runs the Worker, its objects and D1 on one thread: a burst's creations wait
    // for its answers (src/http/ack_first.rs; off on Cloudflare, where it buys nothing).
    ACK_FIRST: 'on',
    GITHUB_WEBHOOK_SECRET: 'dev-webhook-secret',
    // A fresh token every start (unless .dev.vars sets one): the banner prints it and a sign-in
    // link, so a dashboard left open in a browser from an earlier start is signed out.
    ADMIN_TOKEN: randomToken(),
    // Signs the log links in check summaries; a fresh one per start is fine locally.
    LOG_LINK_SECRET: randomToken(),
    PUBLIC_URL: WORKER_URL,
  };
  const github = await startGithub(userVars, defaults);
  let sandboxUrl = null;
  if (layer) defaults.SANDBOX_AGENT_TOKEN = userVars.SANDBOX_AGENT_TOKEN || randomToken();
  else sandboxUrl = await startSandbox(userVars, defaults);
  writeFileSync(DEFAULTS_FILE, formatEnvFile(defaults), { mode: 0o600 });
  restrictSecrets();

  // Built above, so wrangler's [build] command is skipped.
  const wrangler = startWrangler({ ...wEnv, SLUICE_SKIP_BUILD: '1' });
  await waitForHttp(`${WORKER_URL}/healthz`, { timeoutMs: WORKER_START_TIMEOUT_MS, alive: () => wrangler.exitCode === null });
  printBanner({ github, sandboxUrl, defaults, userVars });
  driveCron();
}

main().catch(async (err) => {
  console.error(`[sluice] ${err.message}`);
  await shutdown(1);
});
