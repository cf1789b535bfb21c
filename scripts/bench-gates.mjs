// Serial-gate figures for `npm run bench`, against the ADR-0004 baseline (a 30 s poll): the
// handoff from a releasing holder to the next waiter, deploys actually started by a burst of 100
// pushes in 10 s, and (from native runs on real SQLite with a virtual clock, printed by the
// tests that assert them) D1 round trips of enqueue and claim, durable steps per 60-minute wait,
// and how fast the sweep recovers a dead holder's group and a lost handoff.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { pushPayload } from '../tools/github-standin/webhooks.mjs';
import { ROOT, delay, pollUntil } from '../tools/stack/index.mjs';

const OWNER = 'bench';
// The burst: 100 pushes over 10 s, each a new commit, to a branch whose deploy takes 5 s.
const BURST_PUSHES = 100;
const BURST_WINDOW_MS = 10_000;
const BURST_DEPLOY_S = 5;
// Every wait for executions to finish: a burst is a few deploys of 5 s each.
const FINISH_TIMEOUT_MS = 180_000;
const POLL_MS = 50;
// Native test runs are quick; a cold compile of the test binaries is not.
const NATIVE_TIMEOUT_MS = 15 * 60_000;

function deployToml(logFile, seconds) {
  return `[deploy]\nbranch = "main"\ncommand = "echo start $SLUICE_SHA >> ${logFile}; sleep ${seconds}"\n`;
}

const until = (fn, what, timeoutMs = FINISH_TIMEOUT_MS) => pollUntil(fn, { what, timeoutMs, intervalMs: POLL_MS });

async function push(stack, repo, sha) {
  const payload = pushPayload({ owner: OWNER, repo, after: sha, installationId: 42, cloneUrl: stack.cloneUrl(OWNER, repo) });
  const res = await stack.sendWebhook('push', payload);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  return res.body.instances[0].id;
}

async function finished(stack, id) {
  return until(async () => {
    const { body } = await stack.api(`/v1/executions/${id}`);
    return ['complete', 'skipped', 'errored', 'terminated'].includes(body.execution?.status) ? body : null;
  }, `${id} to finish`);
}

// One handoff: A holds, B waits; ms from A starting its release to B's claim that took the group.
async function handoff(stack, i) {
  const repo = `handoff-${i}`;
  const log = stack.sharedFile(`${repo}.log`);
  const a = await push(stack, repo, stack.commit(OWNER, repo, { '.sluice.toml': deployToml(log, 0.5), V: 'a' }));
  await until(() => statSync(log).size > 0, `${repo} A to start its command`);
  const b = await push(stack, repo, stack.commit(OWNER, repo, { V: 'b' }));
  const group = encodeURIComponent(`deploy:${OWNER}/${repo}:main`);
  await until(async () => (await stack.api(`/v1/groups/${group}`)).body.waiters?.some((w) => w.execution_id === b), `${repo} B to wait`);
  const [ea, eb] = [await finished(stack, a), await finished(stack, b)];
  assert.equal(eb.execution.status, 'complete', JSON.stringify(eb.execution));
  const release = ea.steps.find((s) => s.name === 'release gates');
  const claims = eb.steps.filter((s) => s.name.startsWith('gate: claim'));
  return { ms: claims.at(-1).finished_ms - release.started_ms, claims: claims.length };
}

async function burst(stack) {
  const repo = 'burst';
  const log = stack.sharedFile(`${repo}.log`);
  const ids = [];
  const start = Date.now();
  for (let i = 0; i < BURST_PUSHES; i++) {
    const files = i === 0 ? { '.sluice.toml': deployToml(log, BURST_DEPLOY_S), V: `${i}` } : { V: `${i}` };
    const sha = stack.commit(OWNER, repo, files);
    ids.push(await push(stack, repo, sha));
    const due = start + ((i + 1) * BURST_WINDOW_MS) / BURST_PUSHES;
    if (due > Date.now()) await delay(due - Date.now());
  }
  const windowMs = Date.now() - start;
  for (const id of ids) await finished(stack, id);
  const started = readFileSync(log, 'utf8').trim().split('\n').length;
  return { started, windowMs };
}

function nativeFigure(testFile, filter, pattern) {
  const out = execFileSync('cargo', ['test', '-q', '--test', testFile, filter, '--', '--nocapture'], {
    cwd: ROOT, encoding: 'utf8', timeout: NATIVE_TIMEOUT_MS, stdio: ['ignore', 'pipe', 'pipe'],
  });
  // The worst of every line the test printed.
  const found = [...out.matchAll(new RegExp(pattern, 'g'))].map((m) => Number(m[1]));
  if (!found.length) throw new Error(`no figure matching ${pattern} in cargo test --test ${testFile} ${filter}`);
  return Math.max(...found);
}

export async function benchGates(stack, { rounds }) {
  const handoffs = [];
  for (let i = 0; i < Math.max(rounds, 5); i++) handoffs.push((await handoff(stack, i)).ms);
  const sorted = [...handoffs].sort((x, y) => x - y);
  const p50 = sorted[Math.floor((sorted.length - 1) / 2)];
  const p99 = sorted.at(-1);
  const b = await burst(stack);
  const enqueueTrips = nativeFigure('gates', 'burst_newest_waiter_wins', /enqueue\+supersede D1 round trips = (\d+)/);
  const claimTrips = nativeFigure('gates', 'first_arrival_claims_and_holds', /claim D1 round trips = (\d+)/);
  const waiterSteps = nativeFigure('runs', 'a_waiter_behind_a_live_holder_times_out', /B's wait took (\d+) gate steps/);
  const deadHolderMs = nativeFigure('runs', 'scenario_5_a_dead_holder_frees', /taken (\d+) ms after its last heartbeat/);
  const lostWakeMs = nativeFigure('runs', 'scenario_5_a_lost_handoff', /sat free (\d+) ms with a live waiter/);
  const min = (ms) => `${(ms / 60_000).toFixed(1)} min`;
  return [
    { figure: 'handoff: holder releases -> next waiter holds (p50)', sluice: `${p50} ms`, peer: 'ADR poll: up to 30 s', target: '<= 250 ms', met: p50 <= 250 },
    { figure: `handoff (max of ${handoffs.length}, as p99)`, sluice: `${p99} ms`, peer: '', target: '<= 1 s', met: p99 <= 1000 },
    { figure: 'durable steps (claims + waits) on a 60-minute wait', sluice: `${waiterSteps}`, peer: 'ADR: up to 121 claims (+ sleeps)', target: '<= 4', met: waiterSteps <= 4 },
    { figure: 'dead holder: last heartbeat -> a waiter holds (virtual clock, worst)', sluice: min(deadHolderMs), peer: 'ADR: 10 min stale + 30 s poll', target: '<= 11 min', met: deadHolderMs <= 11 * 60_000 },
    { figure: 'lost handoff: free group with a live waiter (virtual clock)', sluice: min(lostWakeMs), peer: 'ADR: up to a 30 s poll', target: '<= 1 sweep (1 min)', met: lostWakeMs <= 60_000 + 2_000 },
    { figure: `${BURST_PUSHES} pushes in ${Math.round(b.windowMs / 1000)} s (${BURST_DEPLOY_S} s deploys): deploys started`, sluice: `${b.started}`, peer: '', target: '<= 3', met: b.started <= 3 },
    { figure: 'D1 statements: enqueue + supersede', sluice: `${enqueueTrips}`, peer: '', target: '1 (one batch)', met: enqueueTrips === 1 },
    { figure: 'D1 statements: claim', sluice: `${claimTrips}`, peer: '', target: '1', met: claimTrips === 1 },
  ];
}
