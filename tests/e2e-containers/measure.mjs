// Figures of the local container layer (docs/containers-local.md), printed as a table:
// `npm run bench:containers` (not a test: node --test does not pick this file up).
//
// - container cold start: the runtime creating the run's networking sidecar (the first thing it
//   does after the Durable Object calls start()) to the agent in the container answering its
//   first request, both read off Docker's clock (`docker inspect` Created, `docker logs -t`);
// - check, webhook to conclusion: the 202 of a pull_request webhook to the check run completed
//   (includes the cold start, the clone through the bridge and a one-line command), next to the
//   same figure with the agent-process backend;
// - the `run check command` step (workspace, clone, start, wait, log upload), from its timeline;
// - warm command round trip: `POST /v1/exec` of `true` to the agent of a running container,
//   through the sidecar's CONNECT tunnel (the path the runtime takes, minus workerd);
// - image sizes.

import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { randomUUID } from 'node:crypto';
import { pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { docker } from '../../scripts/containers/layer.mjs';
import { INSTALLATION_ID, startStack } from '../e2e/harness.mjs';

// Checks per backend: each one a fresh container; 5 gives a p50 and a spread in ~30 s.
const CHECKS = Number(process.env.SLUICE_MEASURE_CHECKS ?? 5);
// Warm round trips through one container's tunnel.
const ROUND_TRIPS = 50;
// One check run, start to end: seconds here; the bound fails a stuck run.
const RUN_TIMEOUT_MS = 3 * 60_000;
const POLL_MS = 50;
// One tunnelled request to the agent: milliseconds; the bound fails a wedged tunnel.
const ROUND_TRIP_TIMEOUT_MS = 10_000;
const SIDECAR_INGRESS_PORT = '39001/tcp';

const CONFIG = '[check]\ncommand = "echo measured"\n';

function p50(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

function summary(values) {
  return `p50 ${p50(values).toFixed(1)} ms (min ${Math.min(...values).toFixed(1)}, max ${Math.max(...values).toFixed(1)}, n=${values.length})`;
}

async function runCheck(stack, repo) {
  const sha = stack.commit('acme', repo, { '.sluice.toml': CONFIG });
  const payload = pullRequestPayload({ owner: 'acme', repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl('acme', repo) });
  const started = performance.now();
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  if (res.status !== 202) throw new Error(`webhook: ${res.status} ${JSON.stringify(res.body)}`);
  const id = res.body.instances[0].id;
  const deadline = Date.now() + RUN_TIMEOUT_MS;
  for (;;) {
    const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=acme/${repo}`);
    if (runs[0]?.status === 'completed') {
      const elapsed = performance.now() - started;
      if (runs[0].conclusion !== 'success') throw new Error(`${repo}: ${runs[0].conclusion}: ${runs[0].output.summary}`);
      const { body } = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
      const step = body.steps.find((s) => s.name === 'run check command');
      return { id, elapsed, step: step.finished_ms - step.started_ms };
    }
    if (Date.now() > deadline) throw new Error(`${repo}: no conclusion within ${RUN_TIMEOUT_MS} ms`);
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

async function inspect(stack, name, format) {
  return docker(stack.docker, ['inspect', '--format', format, name]);
}

// Docker sends container logs to `docker logs`' stdout and stderr by the stream they came on;
// the agent logs requests on stderr.
async function agentLog(stack, appName) {
  const { execFile } = await import('node:child_process');
  return new Promise((resolve, reject) => {
    execFile(stack.docker, ['logs', '--timestamps', appName], { encoding: 'utf8', timeout: ROUND_TRIP_TIMEOUT_MS }, (err, stdout, stderr) => {
      if (err) reject(err); else resolve(stdout + stderr);
    });
  });
}

// One HTTP request to the agent through the sidecar's CONNECT tunnel, as the runtime makes it.
function tunnelled(ingressPort, method, path, body, token) {
  return new Promise((resolve, reject) => {
    const socket = connect(ingressPort, '127.0.0.1');
    const timer = setTimeout(() => { socket.destroy(); reject(new Error('tunnel round trip timed out')); }, ROUND_TRIP_TIMEOUT_MS);
    socket.once('error', (err) => { clearTimeout(timer); reject(err); });
    socket.write('CONNECT 127.0.0.1:8080 HTTP/1.1\r\nX-Dst-Addr: 127.0.0.1:8080\r\n\r\n');
    let head = '';
    const onData = (chunk) => {
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (!head.startsWith('HTTP/1.1 200')) { clearTimeout(timer); socket.destroy(); reject(new Error(head.split('\r\n')[0])); return; }
      const headers = { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) };
      const req = httpRequest({ method, path, headers, createConnection: () => socket }, (res) => {
        res.resume();
        res.on('end', () => { clearTimeout(timer); socket.destroy(); resolve(res.statusCode); });
      });
      req.once('error', (err) => { clearTimeout(timer); reject(err); });
      req.end(body);
    };
    socket.on('data', onData);
  });
}

async function measureBackend(containers) {
  const stack = await startStack(containers ? { containers: true } : {});
  try {
    const checks = [];
    for (let i = 0; i < CHECKS; i += 1) checks.push(await runCheck(stack, `measure-${i}`));
    const out = { checks };
    if (!containers) return out;

    const names = (await stack.sandboxContainers()).filter((n) => !n.endsWith('-proxy'));
    // Sidecar created -> the agent's first answered request, both on Docker's clock.
    out.coldStarts = [];
    for (const name of names) {
      const created = Date.parse(await inspect(stack, `${name}-proxy`, '{{.Created}}'));
      const first = (await agentLog(stack, name)).split('\n').find((line) => / -> \d{3} /.test(line));
      if (first) out.coldStarts.push(Date.parse(first.split(' ')[0]) - created);
    }
    // Warm: the checks' containers are still running; take the newest (docker lists newest
    // first), whose workspace is the last check's.
    const app = names[0];
    const ingress = (await inspect(stack, `${app}-proxy`, `{{(index (index .NetworkSettings.Ports "${SIDECAR_INGRESS_PORT}") 0).HostPort}}`)).trim();
    const workspace = checks[checks.length - 1].id;
    const body = JSON.stringify({ workspace, command: 'true', timeout_ms: 10_000 });
    out.roundTrips = [];
    for (let i = 0; i < ROUND_TRIPS; i += 1) {
      const t0 = performance.now();
      const status = await tunnelled(Number(ingress), 'POST', '/v1/exec', body, stack.agentToken);
      if (status !== 200) throw new Error(`POST /v1/exec through the tunnel: HTTP ${status}`);
      out.roundTrips.push(performance.now() - t0);
    }
    const image = await docker(stack.docker, ['inspect', '--format', '{{.Config.Image}}', app]);
    out.images = {};
    for (const ref of [image, `${app}-proxy`]) {
      const tag = ref === image ? ref : await docker(stack.docker, ['inspect', '--format', '{{.Config.Image}}', ref]);
      out.images[tag] = Number(await docker(stack.docker, ['image', 'inspect', '--format', '{{.Size}}', tag]));
    }
    return out;
  } finally {
    await stack.stop();
  }
}

const process_ = await measureBackend(false);
const boxed = await measureBackend(true);
const mb = (bytes) => `${(bytes / 1e6).toFixed(1)} MB`;
console.log('\n| figure | value |\n| --- | --- |');
console.log(`| container cold start (sidecar created -> agent answers) | ${summary(boxed.coldStarts)} |`);
console.log(`| check, webhook 202 -> check run completed, containers | ${summary(boxed.checks.map((c) => c.elapsed))} |`);
console.log(`| check, webhook 202 -> check run completed, agent process | ${summary(process_.checks.map((c) => c.elapsed))} |`);
console.log(`| \`run check command\` step, containers | ${summary(boxed.checks.map((c) => c.step))} |`);
console.log(`| \`run check command\` step, agent process | ${summary(process_.checks.map((c) => c.step))} |`);
console.log(`| warm command round trip (POST /v1/exec \`true\` through the sidecar tunnel) | ${summary(boxed.roundTrips)} |`);
for (const [tag, size] of Object.entries(boxed.images)) console.log(`| image ${tag} | ${mb(size)} |`);
