// End-to-end harness: one isolated Sluice stack per call to startStack() — the built Worker under
// `wrangler dev` (own port, own persisted D1/DO state), the GitHub stand-in with real bare git
// repositories, and the sandbox agent — in fresh temp directories (the agent's root apart from the
// rest, which its workspace users must not reach), all torn down by stop().
//
// The Worker runs in its own process group so a test can kill -9 it mid-run and restart it on the
// same state (killWorker / restartWorker). Child output goes to files in the temp dir; logTail()
// shows the Worker's recent log when a test fails.

import { chmodSync, closeSync, createWriteStream, existsSync, mkdtempSync, openSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { startStandin } from '../github-standin/server.mjs';
import { startAgent, gitUrlPrefix } from './agent.mjs';
import { APP_ID, INSTALLATION_ID } from './app.mjs';
import { checkPoolCapacity, containerLogs, prepareContainerLayer, removeContainers, sandboxContainers } from './containers.mjs';
import { NO_INSPECTOR_ENV, ROOT, WRANGLER_BIN, formatEnvFile, generateAppKeyPair, randomToken, scratchRoot, wranglerEnv } from './env.mjs';
import { liveGroups, liveTmpDirs } from './live.mjs';
import { freePort, killGroup, portListens, runBounded, spawnGroup, stopGroup, tailLines, waitForHttp, waitPortFree } from './process.mjs';
import { LOG_TAIL_LINES, makeStackApi } from './stack-api.mjs';

// A cold `worker-build --release` is 33-42 s plus the agent build; 15 minutes allows a cold cargo
// cache on a slow CI machine and still ends a hung build.
const BUILD_TIMEOUT_MS = 15 * 60_000;
// `wrangler d1 migrations apply --local` takes ~2 s.
const MIGRATIONS_TIMEOUT_MS = 60_000;
// Wrangler 4.86's local apply has once failed on CI with a bare `false == true` (an assertion
// inside wrangler, before any migration ran). Each migration file applies in one D1 batch and is
// recorded in `d1_migrations` with it, so another attempt resumes where the last one stopped;
// three attempts cover a transient failure and still end a real one (a broken migration fails
// every attempt, with wrangler's own message).
const MIGRATIONS_ATTEMPTS = 3;
// `wrangler dev` answers ~1.5 s after start with a prebuilt Worker; a loaded 2-core CI machine
// running other suites can be many times slower.
const WORKER_START_TIMEOUT_MS = 60_000;
// With containers (startStack({ containers: true })) wrangler first builds the agent image (a
// COPY onto a cached base: seconds) and checks the sidecar image; 3 minutes allows a cold
// Docker build cache on a loaded machine.
const CONTAINERS_WORKER_START_TIMEOUT_MS = 3 * 60_000;
// After kill -9 the kernel frees the port at once; this only covers the group's exit racing us.
const PORT_RELEASE_TIMEOUT_MS = 10_000;
// Children get this long to exit on SIGTERM at stop() before their group is killed.
const STOP_GRACE_MS = 5_000;

let buildPromise = null;
let lastStack = null;

// Builds once per process unless the caller already built (npm test sets SLUICE_PREBUILT=1).
function ensureBuilt() {
  if (process.env.SLUICE_PREBUILT) return Promise.resolve();
  buildPromise ??= runBounded('bash', [join(ROOT, 'scripts', 'build.sh')], {
    label: 'scripts/build.sh', timeoutMs: BUILD_TIMEOUT_MS, stdio: 'pipe',
  });
  return buildPromise;
}

// The Worker log tail of the most recently started stack (for failure output).
export function logTail(n = LOG_TAIL_LINES) {
  return lastStack ? lastStack.logTail(n) : '(no stack started)';
}

// Options: `vars` (Worker vars over the defaults), `config` (another wrangler config), and
// `containers: true`, which runs the sandbox in real containers on this machine's Docker
// (SANDBOX_BACKEND = "container"; scripts/containers/, docs/containers-local.md): no agent
// process, and the GitHub stand-in listens on the Docker bridge gateway so the containers can
// clone from it.
export async function startStack(opts = {}) {
  await ensureBuilt();
  // The state (D1, Durable Objects), repositories and logs in RAM where there is room; the
  // agent's workspaces and the commands' shared files stay in the temp dir, where commands can
  // execute what they build (a RAM /dev/shm may be mounted noexec).
  const tmp = mkdtempSync(join(scratchRoot(), 'sluice-e2e-'));
  liveTmpDirs.add(tmp);
  // The agent's root lives apart from the stack's files: its workspace users must be able to
  // reach it, and must not reach the Worker's vars or state (tmp stays 0700).
  const sandbox = mkdtempSync(join(tmpdir(), 'sluice-e2e-sandbox-'));
  liveTmpDirs.add(sandbox);
  // Files tests let every run's command write (sharedFile): the runs' users differ.
  const shared = mkdtempSync(join(tmpdir(), 'sluice-e2e-shared-'));
  chmodSync(shared, 0o755);
  liveTmpDirs.add(shared);
  const paths = {
    tmp,
    repos: join(tmp, 'repos'),
    sandbox,
    shared,
    state: join(tmp, 'state'),
    envFile: join(tmp, 'worker.vars'),
    workerLog: join(tmp, 'worker.log'),
    agentLog: join(tmp, 'agent.log'),
    migrationsLog: join(tmp, 'migrations.log'),
  };
  const cleanups = [];
  try {
    return await buildStack(opts, paths, cleanups);
  } catch (err) {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
    const tail = tailLines(paths.workerLog, LOG_TAIL_LINES);
    for (const dir of [tmp, sandbox, shared]) {
      if (!process.env.SLUICE_E2E_KEEP_TMP) rmSync(dir, { recursive: true, force: true });
      liveTmpDirs.delete(dir);
    }
    err.message += `\n--- worker log tail ---\n${tail}`;
    throw err;
  }
}

async function buildStack(opts, paths, cleanups) {
  const secret = randomToken();
  const adminToken = randomToken();
  const logLinkSecret = randomToken();
  const agentToken = randomToken();
  const keys = generateAppKeyPair();
  const layer = opts.containers ? await prepareContainerLayer() : null;
  if (layer) checkPoolCapacity(opts.vars, layer.maxInstances);

  const standin = await startStandin({
    port: 0, host: layer?.gateway ?? '127.0.0.1', reposDir: paths.repos, appId: APP_ID, publicKeyPem: keys.publicKey, installations: [INSTALLATION_ID],
  });
  cleanups.push(() => standin.close());

  const { agent, restartAgent } = layer ? { agent: null, restartAgent: null } : await startLocalAgent(paths, standin, agentToken, cleanups);

  const port = await freePort();
  const inspectorPort = await freePort();
  const url = `http://127.0.0.1:${port}`;
  writeFileSync(paths.envFile, formatEnvFile({
    GITHUB_API_URL: standin.url,
    // Clone URLs are derived from it (never taken from a payload): the stand-in serves git.
    GITHUB_GIT_URL: standin.url,
    GITHUB_APP_ID: String(APP_ID),
    GITHUB_APP_SLUG: 'sluice',
    GITHUB_APP_PRIVATE_KEY: keys.privateKey,
    GITHUB_WEBHOOK_SECRET: secret,
    ADMIN_TOKEN: adminToken,
    ...(agent ? { SANDBOX_URL: agent.url } : {}),
    SANDBOX_BACKEND: layer ? 'container' : 'agent',
    SANDBOX_AGENT_TOKEN: agentToken,
    // As under `npm start`: wrangler dev shares one thread between the Worker and its objects, so
    // a burst's creations wait for its answers (src/http/ack_first.rs). `vars` may turn it off.
    ACK_FIRST: 'on',
    LOG_LINK_SECRET: logLinkSecret,
    PUBLIC_URL: url,
    // The stand-in plays GitHub Actions' OIDC issuer too (dispatch tokens). The Worker takes an
    // issuer other than GitHub's on loopback only, which the container layer's stand-in is not.
    ...(layer ? {} : { GITHUB_OIDC_ISSUER: `${standin.url}/_standin/oidc` }),
    ...opts.vars,
  }), { mode: 0o600 });

  // Built once up front, so wrangler's [build] command is skipped (SLUICE_SKIP_BUILD).
  // `inspector: true` (the bench's profile only) keeps it, for a CPU profile over its protocol.
  const noInspector = opts.inspector ? {} : NO_INSPECTOR_ENV;
  const env = { ...wranglerEnv(join(paths.tmp, 'wrangler')), ...noInspector, SLUICE_SKIP_BUILD: '1', ...layer?.env };
  const config = layer ? layer.config : opts.config;
  const configArgs = config ? ['--config', config] : [];
  const migrationsOutput = await applyMigrations(paths, configArgs, env);
  writeFileSync(paths.migrationsLog, migrationsOutput);

  const devArgs = [
    'dev', '--port', String(port), '--ip', '127.0.0.1', '--inspector-port', String(inspectorPort),
    '--persist-to', paths.state, '--env-file', paths.envFile, '--test-scheduled',
    '--show-interactive-dev-session=false', ...configArgs,
  ];
  let worker = null;

  async function startWorker() {
    await waitPortFree(port, PORT_RELEASE_TIMEOUT_MS);
    const fd = openSync(paths.workerLog, 'a');
    try {
      worker = spawnWorker(devArgs, env, fd);
    } finally {
      closeSync(fd);
    }
    liveGroups.add(worker);
    const current = worker;
    await waitForHttp(`${url}/healthz`, {
      timeoutMs: layer ? CONTAINERS_WORKER_START_TIMEOUT_MS : WORKER_START_TIMEOUT_MS,
      alive: () => current.exitCode === null && current.signalCode === null,
    });
    // The port wrangler is given stays closed: its inspector is off (NO_INSPECTOR_ENV).
    if (!opts.inspector && await portListens(inspectorPort)) {
      throw new Error(`wrangler opened its inspector on ${inspectorPort} although NO_INSPECTOR_ENV asks it not to: see tools/stack/env.mjs`);
    }
  }

  async function killWorker() {
    if (!worker) return;
    const current = worker;
    worker = null;
    killGroup(current, 'SIGKILL');
    await current.exited;
    liveGroups.delete(current);
  }

  if (layer) {
    // The runtime leaves its containers running when wrangler dies: remove the ones this stack
    // started (after killWorker, which is pushed next and so runs first).
    const before = new Set(await sandboxContainers(layer.docker));
    cleanups.push(async () => {
      const mine = (await sandboxContainers(layer.docker)).filter((name) => !before.has(name));
      // Their output (the agent's request log, the sidecar's) goes to the temp dir first, for
      // SLUICE_E2E_KEEP_TMP=1 post-mortems.
      for (const name of mine) {
        const log = await containerLogs(layer.docker, name).catch((err) => `(no logs: ${err.message})`);
        writeFileSync(join(paths.tmp, `${name}.log`), log);
      }
      await removeContainers(layer.docker, mine);
    });
  }
  cleanups.push(killWorker); // before starting, so a Worker that never gets healthy is killed too
  await startWorker();

  const stack = makeStackApi({ inspectorPort: opts.inspector ? inspectorPort : null, url, standin, paths, secret, adminToken, logLinkSecret, agentToken, agent, layer, killWorker, startWorker, restartAgent, cleanups, appKey: keys.privateKey });
  lastStack = stack;
  return stack;
}

// The sandbox agent as a process of this stack (without containers), with a restart that keeps its
// port and root.
async function startLocalAgent(paths, standin, agentToken, cleanups) {
  const agentLog = createWriteStream(paths.agentLog, { flags: 'a' });
  const agentOpts = {
    root: paths.sandbox,
    token: agentToken,
    // Checkouts clone from the stand-in only (the agent refuses any other URL).
    gitUrlPrefixes: [gitUrlPrefix(standin.url)],
    onOutput: (chunk) => agentLog.write(chunk),
  };
  const agent = await startAgent({ listen: '127.0.0.1:0', ...agentOpts });
  liveGroups.add(agent.child);
  // kill -9 of the agent's group, then a new agent on the same port and sandbox root (the
  // Worker's SANDBOX_URL stays right): what a crash of the sandbox host looks like.
  const agentPort = Number(new URL(agent.url).port);
  const restartAgent = async () => {
    const old = agent.child;
    killGroup(old, 'SIGKILL');
    await old.exited;
    liveGroups.delete(old);
    await waitPortFree(agentPort, PORT_RELEASE_TIMEOUT_MS);
    agent.child = (await startAgent({ listen: `127.0.0.1:${agentPort}`, ...agentOpts })).child;
    liveGroups.add(agent.child);
  };
  cleanups.push(async () => {
    await stopGroup(agent.child, STOP_GRACE_MS);
    liveGroups.delete(agent.child);
    agentLog.end();
  });
  return { agent, restartAgent };
}

// Applies the migrations to the stack's local D1, again after a failed attempt (see
// MIGRATIONS_ATTEMPTS). A failure that stays names every attempt's error and the stack trace from
// wrangler's own debug log, which its console output leaves out.
async function applyMigrations(paths, configArgs, env) {
  const args = ['d1', 'migrations', 'apply', 'DB', '--local', '--persist-to', paths.state, ...configArgs];
  const failures = [];
  for (let attempt = 1; attempt <= MIGRATIONS_ATTEMPTS; attempt++) {
    try {
      return await runBounded(WRANGLER_BIN, args, {
        label: `wrangler d1 migrations apply (attempt ${attempt})`, timeoutMs: MIGRATIONS_TIMEOUT_MS, env: { ...env, CI: 'true' }, stdio: 'pipe',
      });
    } catch (e) {
      failures.push(e.message);
      console.error(`# ${e.message.split('\n')[0]}; ${attempt < MIGRATIONS_ATTEMPTS ? 'trying again' : 'giving up'}`);
    }
  }
  throw new Error(`${failures.join('\n\n')}\n\n--- wrangler debug log tail ---\n${wranglerLogTail(env.WRANGLER_LOG_PATH)}`);
}

// The newest wrangler debug log's last lines (its errors carry the stack trace there).
function wranglerLogTail(dir) {
  const logs = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith('.log')).sort() : [];
  return logs.length ? tailLines(join(dir, logs[logs.length - 1]), 60) : `(no wrangler log in ${dir})`;
}

function spawnWorker(args, env, logFd) {
  return spawnGroup(WRANGLER_BIN, args, { env, stdio: ['ignore', logFd, logFd] });
}
