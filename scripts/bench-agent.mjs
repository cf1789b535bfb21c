// Sandbox-agent figures for `npm run bench` (they were wall-clock asserts in the agent's tests,
// which belong here): how soon a long-poll answers after its process exits, how soon a command
// past its timeout comes back killed, and how soon a short wait on a running process returns.
// The stack's own agent is used; each figure is the median of a few rounds.

import { median } from './bench-stats.mjs';

// A process that ends on its own after this long; its long-poll waits up to the agent's cap.
const EXIT_AFTER_MS = 300;
const LONG_POLL_MS = 20_000;
// A command that would sleep 30 s, timed out at this.
const EXEC_TIMEOUT_MS = 300;
const SHORT_WAIT_MS = 100;
// The stand-in repository the rounds' workspaces are checked out from.
const BENCH_OWNER = 'bench';
const BENCH_REPO = 'agent';

async function call(stack, method, path, body) {
  const res = await fetch(`${stack.agentUrl}${path}`, {
    method,
    headers: { Authorization: `Bearer ${stack.agentToken}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(LONG_POLL_MS + 10_000),
  });
  const json = await res.json();
  if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

async function round(stack, i, sha) {
  const ws = `bench-agent-${i}`;
  // Any checkout will do for these commands; only a checkout gives a workspace its user. The
  // stand-in's git wants a token, as GitHub's does for a private repository.
  const token = await stack.installationToken(BENCH_REPO);
  await call(stack, 'POST', '/v1/workspaces', { workspace: ws, repo_url: stack.cloneUrl(BENCH_OWNER, BENCH_REPO), sha, token });
  const id = `bench-poll-${i}-${Date.now()}`;
  const t0 = Date.now();
  await call(stack, 'POST', '/v1/processes', { id, workspace: ws, command: `sleep ${EXIT_AFTER_MS / 1000}`, timeout_ms: 10_000 });
  const done = await call(stack, 'GET', `/v1/processes/${id}?wait_ms=${LONG_POLL_MS}`);
  const pollLate = Date.now() - t0 - EXIT_AFTER_MS;
  if (done.status !== 'exited') throw new Error(`long-poll answered ${done.status}`);
  const t1 = Date.now();
  const timedOut = await call(stack, 'POST', '/v1/exec', { workspace: ws, command: 'sleep 30', timeout_ms: EXEC_TIMEOUT_MS });
  const killLate = Date.now() - t1 - EXEC_TIMEOUT_MS;
  if (!timedOut.timed_out) throw new Error('exec did not time out');
  const slow = `bench-slow-${i}-${Date.now()}`;
  await call(stack, 'POST', '/v1/processes', { id: slow, workspace: ws, command: 'sleep 5', timeout_ms: 10_000 });
  const t2 = Date.now();
  await call(stack, 'GET', `/v1/processes/${slow}?wait_ms=${SHORT_WAIT_MS}`);
  const shortWait = Date.now() - t2;
  await call(stack, 'POST', `/v1/processes/${slow}/kill?wait_ms=5000`);
  return { pollLate, killLate, shortWait };
}

export async function benchAgent(stack, { rounds }) {
  const sha = stack.commit(BENCH_OWNER, BENCH_REPO, { 'README.md': '# agent bench\n' });
  const rs = [];
  for (let i = 0; i < rounds; i++) rs.push(await round(stack, i, sha));
  const m = (k) => median(rs.map((r) => r[k]));
  return [
    { figure: 'agent: process exit -> its long-poll answers (p50)', sluice: `${m('pollLate')} ms`, peer: '', target: '<= 100 ms', met: m('pollLate') <= 100 },
    { figure: `agent: command past its ${EXEC_TIMEOUT_MS} ms timeout -> answered killed (p50)`, sluice: `${m('killLate')} ms`, peer: '', target: '<= 2 s (output drain)', met: m('killLate') <= 2_000 },
    { figure: `agent: wait_ms=${SHORT_WAIT_MS} on a running process returns in (p50)`, sluice: `${m('shortWait')} ms`, peer: '', target: '<= 500 ms', met: m('shortWait') <= 500 },
  ];
}
