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

// Issue 23's cache and artifact throughput: a dependency-like tree of ARCHIVE_FILES files,
// ARCHIVE_BYTES in all (half base64 of random bytes, half repeated source text: it compresses
// about as a node_modules does), packed by the agent as the workspace's user (what a cache save
// or an artifact upload streams to R2) and unpacked into another workspace (a restore). The
// agent's part only: the R2 leg under `wrangler dev` is a local file.
const ARCHIVE_FILES = 20_000;
const ARCHIVE_BYTES = 200_000_000;
// A 200 MB tree packs and unpacks in tens of seconds on 2 shared cores; two rounds at most.
const ARCHIVE_ROUNDS_MAX = 2;
const ARCHIVE_TIMEOUT_MS = 10 * 60_000;
const MAKE_TREE = [
  'mkdir -p node_modules/dep &&',
  `(head -c ${ARCHIVE_BYTES / 2 * 3 / 4} /dev/urandom | base64 -w 120; yes 'module.exports = function () { return 42; };' | head -c ${ARCHIVE_BYTES / 2})`,
  `| head -c ${ARCHIVE_BYTES} | split -b ${ARCHIVE_BYTES / ARCHIVE_FILES} -a 5 -d - node_modules/dep/f`,
].join(' ');

async function raw(stack, method, path, body, contentType) {
  const res = await fetch(`${stack.agentUrl}${path}`, {
    method,
    headers: { Authorization: `Bearer ${stack.agentToken}`, 'Content-Type': contentType },
    body,
    signal: AbortSignal.timeout(ARCHIVE_TIMEOUT_MS),
  });
  if (res.status >= 400) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res;
}

async function archiveRound(stack, i, sha) {
  const token = await stack.installationToken(BENCH_REPO);
  const [src, dst] = [`bench-pack-${i}`, `bench-unpack-${i}`];
  for (const ws of [src, dst]) {
    await call(stack, 'POST', '/v1/workspaces', { workspace: ws, repo_url: stack.cloneUrl(BENCH_OWNER, BENCH_REPO), sha, token });
  }
  const made = await call(stack, 'POST', '/v1/exec', { workspace: src, command: MAKE_TREE, timeout_ms: ARCHIVE_TIMEOUT_MS });
  if (made.exit_code !== 0) throw new Error(`making the tree: ${made.output}`);
  const t0 = Date.now();
  const packed = await raw(stack, 'POST', `/v1/workspaces/${src}/archive`, JSON.stringify({ patterns: ['node_modules/**'] }), 'application/json');
  const archive = Buffer.from(await packed.arrayBuffer());
  const packMs = Date.now() - t0;
  const files = Number(packed.headers.get('x-sluice-archive-files'));
  if (files !== ARCHIVE_FILES) throw new Error(`packed ${files} files, not ${ARCHIVE_FILES}`);
  const sha256 = packed.headers.get('x-sluice-archive-sha256');
  const t1 = Date.now();
  const unpacked = await (await raw(stack, 'PUT', `/v1/workspaces/${dst}/archive?sha256=${sha256}`, archive, 'application/gzip')).json();
  const unpackMs = Date.now() - t1;
  if (unpacked.files !== ARCHIVE_FILES) throw new Error(`unpacked ${unpacked.files} files`);
  for (const ws of [src, dst]) await call(stack, 'DELETE', `/v1/workspaces/${ws}`);
  return { packMs, unpackMs, archiveBytes: archive.length };
}

export async function benchArchives(stack, { rounds }) {
  const sha = stack.commit(BENCH_OWNER, BENCH_REPO, { 'README.md': '# agent bench\n' });
  const rs = [];
  for (let i = 0; i < Math.min(rounds, ARCHIVE_ROUNDS_MAX); i++) rs.push(await archiveRound(stack, i, sha));
  const mbps = (ms) => `${(ARCHIVE_BYTES / 1e6 / (ms / 1000)).toFixed(0)} MB/s (${(ms / 1000).toFixed(1)} s)`;
  const what = `${ARCHIVE_FILES} files, ${ARCHIVE_BYTES / 1e6} MB`;
  return [
    { figure: `agent: pack a dependency-like tree (${what}) as a cache save does (p50)`, sluice: mbps(median(rs.map((r) => r.packMs))), peer: '', target: '', met: true },
    { figure: `agent: unpack it into another workspace as a restore does (p50)`, sluice: mbps(median(rs.map((r) => r.unpackMs))), peer: '', target: '', met: true },
    { figure: '  the archive (gzip)', sluice: `${(median(rs.map((r) => r.archiveBytes)) / 1e6).toFixed(0)} MB`, peer: '', target: '', met: true },
  ];
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

// Issue 23's snapshots between a job's steps (ADR-0015): step 1 makes the same dependency-like
// tree (an install), step 2 changes a little of it (a build's output, a few sources); the agent
// snapshots after each as the job does (the first since the checkout, the second since the
// first), then a fresh checkout in another workspace takes both back, pruned, as a step after a
// lost container does. The agent's part only, as above.
const SMALL_CHANGE = 'mkdir -p build && head -c 1000000 /dev/urandom > build/out.bin && touch node_modules/dep/f0000[0-9] && rm node_modules/dep/f19999';

async function stepProcess(stack, ws, id, command) {
  const started = await call(stack, 'POST', '/v1/processes', { id, workspace: ws, command, timeout_ms: ARCHIVE_TIMEOUT_MS });
  for (let i = 0; i < ARCHIVE_TIMEOUT_MS / LONG_POLL_MS; i++) {
    const state = await call(stack, 'GET', `/v1/processes/${id}?wait_ms=${LONG_POLL_MS}`);
    if (state.status !== 'running') {
      if (state.exit_code !== 0) throw new Error(`${command}: ${state.output}`);
      return started;
    }
  }
  throw new Error(`${command} still running after ${ARCHIVE_TIMEOUT_MS} ms`);
}

async function snapshotOf(stack, ws, since) {
  const t0 = Date.now();
  const body = JSON.stringify({ snapshot: since ? { since } : { since_checkout: true } });
  const res = await raw(stack, 'POST', `/v1/workspaces/${ws}/archive`, body, 'application/json');
  const archive = Buffer.from(await res.arrayBuffer());
  return {
    ms: Date.now() - t0,
    archive,
    sha256: res.headers.get('x-sluice-archive-sha256'),
    files: Number(res.headers.get('x-sluice-archive-files')),
    taken: { agent: res.headers.get('x-sluice-agent'), ms: Number(res.headers.get('x-sluice-snapshot-taken-ms')) },
  };
}

async function snapshotRound(stack, i, sha) {
  const token = await stack.installationToken(BENCH_REPO);
  const [src, dst] = [`bench-steps-${i}`, `bench-resume-${i}`];
  await call(stack, 'POST', '/v1/workspaces', { workspace: src, repo_url: stack.cloneUrl(BENCH_OWNER, BENCH_REPO), sha, token, baseline: true });
  await stepProcess(stack, src, `bench-step1-${i}-${Date.now()}`, MAKE_TREE);
  const first = await snapshotOf(stack, src, null);
  const step2 = `bench-step2-${i}-${Date.now()}`;
  await stepProcess(stack, src, step2, SMALL_CHANGE);
  const second = await snapshotOf(stack, src, first.taken);
  await call(stack, 'POST', '/v1/workspaces', { workspace: dst, repo_url: stack.cloneUrl(BENCH_OWNER, BENCH_REPO), sha, token: await stack.installationToken(BENCH_REPO) });
  const t0 = Date.now();
  for (const [s, last] of [[first, false], [second, true]]) {
    const tail = last ? `&prune=true&after=${step2}` : '';
    await raw(stack, 'PUT', `/v1/workspaces/${dst}/archive?sha256=${s.sha256}${tail}`, s.archive, 'application/gzip');
  }
  const restoreMs = Date.now() - t0;
  const count = await call(stack, 'POST', '/v1/exec', { workspace: dst, command: 'find node_modules -type f | wc -l; test -f build/out.bin', timeout_ms: 60_000 });
  if (count.exit_code !== 0 || Number(count.output.trim()) !== ARCHIVE_FILES - 1) throw new Error(`restored tree: ${count.output}`);
  for (const ws of [src, dst]) await call(stack, 'DELETE', `/v1/workspaces/${ws}`);
  return { first, second, restoreMs };
}

export async function benchSnapshots(stack, { rounds }) {
  const sha = stack.commit(BENCH_OWNER, BENCH_REPO, { 'README.md': '# agent bench\n' });
  const rs = [];
  for (let i = 0; i < Math.min(rounds, ARCHIVE_ROUNDS_MAX); i++) rs.push(await snapshotRound(stack, i, sha));
  const s = (ms) => `${(ms / 1000).toFixed(1)} s`;
  const size = (r) => `${r.files} entries, ${(r.archive.length / 1e6).toFixed(1)} MB`;
  const mid = rs[Math.floor(rs.length / 2)];
  return [
    { figure: `agent: snapshot after a step that made ${ARCHIVE_FILES} files, ${ARCHIVE_BYTES / 1e6} MB (p50)`, sluice: `${s(median(rs.map((r) => r.first.ms)))} (${size(mid.first)})`, peer: '', target: '', met: true },
    { figure: 'agent: snapshot after a step that changed 1 MB and 11 files of it (p50)', sluice: `${s(median(rs.map((r) => r.second.ms)))} (${size(mid.second)})`, peer: '', target: '', met: true },
    { figure: 'agent: restore both over a fresh checkout, pruned (p50)', sluice: s(median(rs.map((r) => r.restoreMs))), peer: '', target: '', met: true },
  ];
}
