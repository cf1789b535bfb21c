// A real sandbox container under test or measurement (docs/containers-local.md): a command that
// holds at a gate until the caller opens it (so a test or the bench can act on the container while
// the command runs: inspect it, call its agent, kill it), finding the container at a gate, and a
// request to a container's agent through its sidecar, the way the runtime reaches it.

import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { docker } from './containers.mjs';

// A run here is a container start (~0.5 s), a clone through the bridge and a short command:
// seconds warm. 3 minutes allows a cold Docker on a loaded 2-core machine and still fails well
// inside node:test's limit.
export const CONTAINER_RUN_TIMEOUT_MS = 3 * 60_000;
// How long a gated command waits for the test to open its gate, in 0.1 s sleeps inside the
// container: the test opens it within seconds of the command starting; the bound ends the
// command (failing the run) if the test died.
export const GATE_WAIT_S = 120;
// Finding the container whose command reached its gate: a container start, a clone and the
// command's first line, seconds; the run's own bound covers a cold machine.
export const GATE_REACHED_TIMEOUT_MS = CONTAINER_RUN_TIMEOUT_MS;
// A finished run's container is destroyed by its finalize (the discard) right after the run
// ends: a Docker stop and removal, seconds.
export const CONTAINER_GONE_TIMEOUT_MS = 60_000;
// One request to an agent through a sidecar tunnel: milliseconds; the bound fails a wedged one.
export const TUNNEL_TIMEOUT_MS = 10_000;
// Where the sidecar (crates/container-sidecar) takes the runtime's CONNECTs, published on the host.
export const SIDECAR_INGRESS_PORT = '39001/tcp';
// The agent's port inside the container (crates/sandbox-agent/Dockerfile).
const AGENT_ADDR = '127.0.0.1:8080';

const marker = (name, what) => `/tmp/sluice-gate-${name}.${what}`;

// A shell prefix that announces the command reached its gate, then holds until the test opens
// it (openGate) or GATE_WAIT_S passes (then the command exits 97: the run fails).
export function gate(name) {
  const ticks = GATE_WAIT_S * 10;
  return [
    `touch ${marker(name, 'reached')}`,
    `i=0; while [ ! -f ${marker(name, 'open')} ] && [ $i -lt ${ticks} ]; do sleep 0.1; i=$((i+1)); done`,
    `{ test -f ${marker(name, 'open')} || exit 97; }`,
  ].join('; ');
}

// The Worker's running app containers (not their sidecars).
export async function runningSandboxes(stack) {
  const out = await docker(stack.docker, ['ps', '--filter', 'name=workerd-sluice-SandboxContainer-', '--format', '{{.Names}}']);
  return out ? out.split('\n').filter((n) => !n.endsWith('-proxy')) : [];
}

async function reachedGate(stack, container, name) {
  try {
    await docker(stack.docker, ['exec', container, 'test', '-f', marker(name, 'reached')]);
    return true;
  } catch {
    return false;
  }
}

// Waits for the running container whose command reached gate `name` (skipping containers whose
// id is in `except`); resolves to { name, id, hostname }.
export async function containerAtGate(stack, name, { except = [] } = {}) {
  return stack.waitFor(async () => {
    for (const container of await runningSandboxes(stack)) {
      const id = await docker(stack.docker, ['inspect', '--format', '{{.Id}}', container]);
      if (except.includes(id) || !(await reachedGate(stack, container, name))) continue;
      const hostname = await docker(stack.docker, ['inspect', '--format', '{{.Config.Hostname}}', container]);
      return { name: container, id, hostname };
    }
    return null;
  }, { timeoutMs: GATE_REACHED_TIMEOUT_MS, intervalMs: 250, message: `a container's command to reach gate ${name}` });
}

export async function openGate(stack, container, name) {
  await docker(stack.docker, ['exec', container, 'touch', marker(name, 'open')]);
}

// Waits until no container (running or not) of that name is left.
export async function waitContainerGone(stack, container) {
  await stack.waitFor(async () => !(await stack.sandboxContainers()).includes(container), {
    timeoutMs: CONTAINER_GONE_TIMEOUT_MS, message: `container ${container} to be destroyed`,
  });
}

// The host port the container's sidecar publishes its ingress on.
export async function ingressPort(stack, container) {
  const format = `{{(index (index .NetworkSettings.Ports "${SIDECAR_INGRESS_PORT}") 0).HostPort}}`;
  return Number(await docker(stack.docker, ['inspect', '--format', format, `${container}-proxy`]));
}

// One HTTP request to the agent in `container` through its sidecar's CONNECT tunnel, as the
// runtime makes it. Resolves to { status, body }.
export async function tunnelled(stack, container, { method = 'GET', path, body, token }) {
  const port = await ingressPort(stack, container);
  return tunnelledAt(port, { method, path, body, token });
}

export function tunnelledAt(port, { method = 'GET', path, body, token }) {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const fail = (err) => { clearTimeout(timer); socket.destroy(); reject(err); };
    const timer = setTimeout(() => fail(new Error(`${method} ${path} through the tunnel: no answer within ${TUNNEL_TIMEOUT_MS} ms`)), TUNNEL_TIMEOUT_MS);
    socket.once('error', fail);
    socket.write(`CONNECT ${AGENT_ADDR} HTTP/1.1\r\nX-Dst-Addr: ${AGENT_ADDR}\r\n\r\n`);
    let head = '';
    const onData = (chunk) => {
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (!head.startsWith('HTTP/1.1 200')) { fail(new Error(`CONNECT: ${head.split('\r\n')[0]}`)); return; }
      const headers = { 'Content-Type': 'application/json', ...(token ? { Authorization: `Bearer ${token}` } : {}) };
      const req = httpRequest({ method, path, headers, createConnection: () => socket }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c) => { text += c; });
        res.on('end', () => { clearTimeout(timer); socket.destroy(); resolve({ status: res.statusCode, body: text }); });
      });
      req.once('error', fail);
      req.end(body);
    };
    socket.on('data', onData);
  });
}
