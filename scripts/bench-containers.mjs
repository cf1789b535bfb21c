// Figures of the local container layer (docs/containers-local.md) next to the agent-process
// backend's: `npm run bench:containers` prints them as a table, and `npm run bench` adds them as
// rows (benchContainers) when this machine can run containers. Not a test: node --test does not
// pick this file up.
//
// - cold start: the sandbox from its start to the agent answering its first request. Containers:
//   the SandboxContainer Durable Object's own measure, start() to the first 200 of GET /healthz
//   (its log line "sandbox container ready N ms after start"), one per check; agent process:
//   spawn to the first 200 of GET /healthz; and per image class (`node`, `rust`: each its own
//   image, src/sandbox/image.rs), the cold starts of a few checks that select it;
// - check, webhook to conclusion: the 202 of a pull_request webhook to the check run completed
//   (a cold start, a clone and a one-line command);
// - the `run check command` step (workspace, clone, start, wait, log upload), from its timeline;
// - warm command round trip: `POST /v1/exec` of `true` to a running agent: through the
//   container's sidecar tunnel (the path the runtime takes, minus workerd), or on localhost;
// - sizes: the agent image, and the release agent binary the image holds (the process backend
//   runs the debug build of the same agent: target/debug, as `npm start` does).

import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pullRequestPayload } from '../tools/github-standin/webhooks.mjs';
import {
  INSTALLATION_ID, ROOT, containerAtGate, docker, gate, ingressPort, openGate, randomToken, startAgent, startStack, stopGroup, tunnelledAt,
} from '../tools/stack/index.mjs';

// Checks per backend: each one a fresh sandbox; 5 gives a p50 and a spread in ~30 s.
const CHECKS = Number(process.env.SLUICE_MEASURE_CHECKS ?? 5);
// Warm round trips through one running sandbox, and fresh agent processes spawned.
const ROUND_TRIPS = 50;
const AGENT_SPAWNS = 5;
// One check run, start to end: seconds here; the bound fails a stuck run.
const RUN_TIMEOUT_MS = 3 * 60_000;
const POLL_MS = 50;
// One request to a local agent: milliseconds; the bound fails a wedged one.
const REQUEST_TIMEOUT_MS = 10_000;
// A spawned agent answering its first /healthz: milliseconds; the bound fails one that never does.
const AGENT_READY_TIMEOUT_MS = 10_000;
const AGENT_STOP_GRACE_MS = 5_000;
// Between /healthz probes of a spawned agent (it prints its ready line after it listens, so the
// first probe normally answers).
const AGENT_PROBE_INTERVAL_MS = 5;
const AGENT_RELEASE_BIN = join(ROOT, 'target', 'release', 'sluice-sandbox-agent');
const READY_LINE = /sandbox container ready (\d+) ms after start/g;
// Lines of the Worker log read for the ready lines: a measured stack writes a few thousand.
const WORKER_LOG_LINES_MAX = 200_000;

const CONFIG = '[check]\ncommand = "echo measured"\n';
// Issue 23: each image class's cold start (a container of its own image), a few checks each.
const OTHER_CLASSES = ['node', 'rust'];
const CLASS_CHECKS = Number(process.env.SLUICE_MEASURE_CLASS_CHECKS ?? 3);
const HELD_CONFIG = `[check]\ncommand = '''${gate('measure')}'''\n`;

function p50(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

export function summary(values) {
  if (!values.length) return 'n/a';
  return `p50 ${p50(values).toFixed(1)} ms (min ${Math.min(...values).toFixed(1)}, max ${Math.max(...values).toFixed(1)}, n=${values.length})`;
}

async function webhook(stack, repo, config) {
  const sha = stack.commit('acme', repo, { '.sluice.toml': config });
  const payload = pullRequestPayload({ owner: 'acme', repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl('acme', repo) });
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  if (res.status !== 202) throw new Error(`webhook: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.instances[0].id;
}

async function runCheck(stack, repo, config = CONFIG) {
  const started = performance.now();
  const id = await webhook(stack, repo, config);
  const deadline = Date.now() + RUN_TIMEOUT_MS;
  for (;;) {
    const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=acme/${repo}`);
    if (runs[0]?.status === 'completed') {
      const elapsed = performance.now() - started;
      if (runs[0].conclusion !== 'success') throw new Error(`${repo}: ${runs[0].conclusion}: ${runs[0].output.summary}`);
      // The check run is concluded before the instance's pass ends and mirrors its steps to
      // the index: read them once the instance has ended.
      let step;
      while (!step?.finished_ms) {
        if (Date.now() > deadline) throw new Error(`${repo}: its steps never reached the index`);
        const { body } = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
        step = body.steps?.find((s) => s.name === 'run check command');
        if (!step?.finished_ms) await new Promise((r) => setTimeout(r, POLL_MS));
      }
      return { id, elapsed, step: step.finished_ms - step.started_ms };
    }
    if (Date.now() > deadline) throw new Error(`${repo}: no conclusion within ${RUN_TIMEOUT_MS} ms`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

async function timed(fn) {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

// Round trips to the agent of a running container: a check whose command holds at a gate.
async function containerRoundTrips(stack) {
  const id = await webhook(stack, 'measure-held', HELD_CONFIG);
  const box = await containerAtGate(stack, 'measure');
  const body = JSON.stringify({ workspace: id, command: 'true', timeout_ms: 10_000 });
  const port = await ingressPort(stack, box.name);
  const out = [];
  for (let i = 0; i < ROUND_TRIPS; i += 1) {
    out.push(await timed(async () => {
      const res = await tunnelledAt(port, { method: 'POST', path: '/v1/exec', body, token: stack.agentToken });
      if (res.status !== 200) throw new Error(`POST /v1/exec through the tunnel: HTTP ${res.status} ${res.body}`);
    }));
  }
  const image = await docker(stack.docker, ['inspect', '--format', '{{.Config.Image}}', box.name]);
  const imageBytes = Number(await docker(stack.docker, ['image', 'inspect', '--format', '{{.Size}}', image]));
  await openGate(stack, box.name, 'measure');
  return { roundTrips: out, image, imageBytes };
}

async function agentCall(url, token, method, path, body) {
  const res = await fetch(`${url}${path}`, {
    method, body, headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' }, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  await res.arrayBuffer();
  return res.status;
}

// Spawn -> first 200 of /healthz, for fresh agent processes (the backend's own binary, the debug
// build `npm start` runs).
async function agentColdStarts() {
  const out = [];
  for (let i = 0; i < AGENT_SPAWNS; i += 1) {
    const root = mkdtempSync(join(tmpdir(), 'sluice-measure-agent-'));
    const t0 = performance.now();
    const agent = await startAgent({ listen: '127.0.0.1:0', root, token: randomToken() });
    try {
      const deadline = Date.now() + AGENT_READY_TIMEOUT_MS;
      while ((await agentCall(agent.url, '', 'GET', '/healthz').catch(() => 0)) !== 200) {
        if (Date.now() > deadline) throw new Error(`a spawned agent did not answer within ${AGENT_READY_TIMEOUT_MS} ms`);
        await new Promise((r) => setTimeout(r, AGENT_PROBE_INTERVAL_MS));
      }
      out.push(performance.now() - t0);
    } finally {
      await stopGroup(agent.child, AGENT_STOP_GRACE_MS);
      rmSync(root, { recursive: true, force: true });
    }
  }
  return out;
}

async function agentRoundTrips(stack) {
  const ws = 'measure-warm';
  // The isolated agent knows a workspace from its checkout (which gives it its user); the
  // stand-in's git wants a token.
  const sha = stack.commit('bench', 'measure', { 'README.md': '# measure\n' });
  const checkout = JSON.stringify({
    workspace: ws, repo_url: stack.cloneUrl('bench', 'measure'), sha, token: await stack.installationToken('measure'),
  });
  const made = await agentCall(stack.agentUrl, stack.agentToken, 'POST', '/v1/workspaces', checkout);
  if (made >= 300) throw new Error(`POST /v1/workspaces: HTTP ${made}`);
  const body = JSON.stringify({ workspace: ws, command: 'true', timeout_ms: 10_000 });
  const out = [];
  for (let i = 0; i < ROUND_TRIPS; i += 1) {
    out.push(await timed(async () => {
      const status = await agentCall(stack.agentUrl, stack.agentToken, 'POST', '/v1/exec', body);
      if (status !== 200) throw new Error(`POST /v1/exec: HTTP ${status}`);
    }));
  }
  return out;
}

async function measureBackend(containers) {
  const stack = await startStack(containers ? { containers: true } : {});
  try {
    const checks = [];
    for (let i = 0; i < CHECKS; i += 1) checks.push(await runCheck(stack, `measure-${i}`));
    if (!containers) return { checks, roundTrips: await agentRoundTrips(stack), coldStarts: await agentColdStarts() };
    const held = await containerRoundTrips(stack);
    const readyLines = () => [...stack.logTail(WORKER_LOG_LINES_MAX).matchAll(READY_LINE)].map((m) => Number(m[1]));
    const coldStarts = readyLines();
    // Each check of a new repository starts a container of its class: the ready lines its checks
    // add are that class's cold starts.
    const classColdStarts = {};
    for (const cls of OTHER_CLASSES) {
      const before = readyLines().length;
      for (let i = 0; i < CLASS_CHECKS; i += 1) {
        await runCheck(stack, `measure-${cls}-${i}`, `[check]\ncommand = "echo measured"\nimage = "${cls}"\n`);
      }
      classColdStarts[cls] = readyLines().slice(before);
    }
    return { checks, coldStarts, classColdStarts, ...held };
  } finally {
    await stack.stop();
  }
}

// Both backends' figures.
export async function measure() {
  const agent = await measureBackend(false);
  const boxed = await measureBackend(true);
  return { agent, boxed, agentBinaryBytes: statSync(AGENT_RELEASE_BIN).size };
}

const mb = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;

// [figure, containers, agent process] for each figure.
export function figureRows({ agent, boxed, agentBinaryBytes }) {
  return [
    ['sandbox cold start, start -> agent answers', summary(boxed.coldStarts), summary(agent.coldStarts)],
    ...OTHER_CLASSES.map((cls) => [`  of the \`${cls}\` image class`, summary(boxed.classColdStarts?.[cls] ?? []), 'n/a (the host\'s tools)']),
    ['warm command round trip, POST /v1/exec `true`', summary(boxed.roundTrips), summary(agent.roundTrips)],
    ['check, webhook 202 -> check run completed', summary(boxed.checks.map((c) => c.elapsed)), summary(agent.checks.map((c) => c.elapsed))],
    ['`run check command` step', summary(boxed.checks.map((c) => c.step)), summary(agent.checks.map((c) => c.step))],
    ['size (containers: the agent image; agent process: the release agent binary)', `${mb(boxed.imageBytes)} (${boxed.image})`, mb(agentBinaryBytes)],
  ];
}

// Whether this machine can run the container layer, or why not.
async function unavailable() {
  if (process.getuid?.() !== 0) return 'not root (the layer installs and runs Docker)';
  try {
    await docker('docker', ['info', '--format', '{{.ServerVersion}}']);
    return null;
  } catch (err) {
    return `Docker does not answer (${err.message.split('\n')[0]}); npm run test:containers sets it up`;
  }
}

// Rows for `npm run bench`'s table: the figures, or one row saying why they were skipped.
export async function benchContainers() {
  const why = await unavailable();
  if (why) return [{ figure: 'container figures', sluice: `skipped: ${why}`, target: '' }];
  const rows = figureRows(await measure());
  return rows.flatMap(([figure, boxed, agent]) => [
    { figure: `containers: ${figure}`, sluice: boxed, target: 'see docs/containers-local.md' },
    { figure: `agent process: ${figure}`, sluice: agent, target: '' },
  ]);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop())) {
  const rows = figureRows(await measure());
  console.log('\n| figure | containers | agent process |\n| --- | --- | --- |');
  for (const [figure, boxed, agent] of rows) console.log(`| ${figure} | ${boxed} | ${agent} |`);
}
