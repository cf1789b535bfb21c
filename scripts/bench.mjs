// `npm run bench`: timing figures, printed as a table, measured side by side in ONE run on the same
// machine. Sluice's engine runs under one `wrangler dev`; the peer, a JS Worker with a Cloudflare
// Workflow doing the same work (bench/workflows-peer), runs under another started by the same
// wrangler. Both sides are timed by server-side timestamps taken inside steps. Timing belongs
// here, never in tests: these machines are shared and noisy, so read ratios, not absolutes.
//
// Usage: npm run bench [-- --rounds N] [-- --only engine|scale|creation|creation-trend|perf|check-latency|pipelines|caches|snapshots|profile|ab] [-- --ack-first off]   (builds
// the Worker first unless SLUICE_PREBUILT=1). `--only engine` runs the engine's figures against the
// Workflows peer (steps, inline steps, sleep, events); `--only profile` a CPU profile of one creation
// and one step (scripts/bench-profile.mjs), with no peer. `--only creation` the creation rate with
// each process's CPU per create, and an instance's fixed cost as a mean (scripts/bench-creation.mjs); `--only creation-trend` each side's creation rate and CPU round by round from fresh stacks, which is why the two are warmed differently; `--only perf`
// where each side's workerd spends a creation's CPU, by Linux perf (scripts/bench-perf.mjs). `--only scale` runs the scale section alone, with no peer (and
// quotes the last soak); the full run measures creation with the creation section's rounds; `--only check-latency` only one trivial check's webhook -> in_progress and
// webhook -> completed, --rounds times (default 10), with no peer; `--only pipelines` the pipeline figures (scripts/bench-pipelines.mjs), 3 rounds by default, with no peer; `--only caches` the agent's pack and unpack of a 200 MB dependency-like tree (scripts/bench-agent.mjs) and a real npm install cold and warm (scripts/bench-pipelines.mjs); `--only snapshots` the agent's snapshot after a step that made that tree, after one that changed a little of it, and the restore of both over a fresh checkout (ADR-0015). `--ack-first off` measures with burst deferral off, as on Cloudflare (ACK_FIRST;
// src/http/ack_first.rs); the default is `on`, as `npm start` and the test stacks run.
// `--only ab --base <dir>` this build against another commit's build/ copied to <dir>: two Sluice
// stacks taking turns, paired per round (scripts/bench-ab.mjs); how a change is measured.
// `--log-level warn` runs Sluice's stack at LOG_LEVEL=warn: no structured line per creation, as
// the peer writes none (under `wrangler dev` every line is also appended to wrangler's debug log
// file by its node process, CPU the two cores share; Cloudflare has no such process).

import { mkdtempSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  NO_INSPECTOR_ENV, ROOT, WRANGLER_BIN, scratchRoot, delay, freePort, pollUntil, spawnGroup, startStack, stopGroup, waitForHttp, wranglerEnv,
} from '../tools/stack/index.mjs';
import { benchAgent, benchArchives, benchSnapshots } from './bench-agent.mjs';
import { benchProfile } from './bench-profile.mjs';
import { median, pct } from './bench-stats.mjs';
import { benchGates } from './bench-gates.mjs';
import { benchInstall, benchPipelines } from './bench-pipelines.mjs';
import { benchContainers } from './bench-containers.mjs';
import { benchCheckLatency, benchScale, POOL_CAPACITY } from './bench-scale.mjs';
import { assertCreationPeerBudget, benchCreation, benchCreationTrend } from './bench-creation.mjs';
import { benchPerf } from './bench-perf.mjs';
import { benchAb } from './bench-ab.mjs';
import { soakSummary } from './soak.mjs';

// Rounds per figure: enough for a median and a p99-ish max on 2 cores in a few minutes.
const ROUNDS_DEFAULT = 7;
const STEPS = 100;
// A step's own share is read over this many steps, less a 0-step run: whole-millisecond
// timestamps then resolve 1 us a step (over STEPS, 10 us, the share of a Sluice step).
// Under the 1,024 steps local Workflows allows an instance.
const MARGINAL_STEPS = 1_000;
const STEPS_RESOLUTION_US = 1000 / MARGINAL_STEPS;
// Pipeline rounds: each fan-out round takes over 10 s, so fewer than the engine's.
const PIPELINE_ROUNDS_DEFAULT = 3;
const SLEEP_MS = 1_000;
// Bound of every wait for a run to reach a state: a 100-step run takes well under a second.
const RUN_TIMEOUT_MS = 60_000;
const POLL_MS = 10;
// Both sides idle this long in their wait before the event is sent, so neither is measured while
// still suspending.
const SETTLE_BEFORE_EVENT_MS = 100;
const PEER_START_TIMEOUT_MS = 60_000;
// Peer instances one round of benchEngine creates (steps, 0 steps, many steps, sleep, event): the
// creation section measures the peer while it holds few (scripts/bench-creation.mjs).
const ENGINE_PEER_INSTANCES_PER_ROUND = 5;
const STOP_GRACE_MS = 5_000;

const { values: args } = parseArgs({ options: { rounds: { type: 'string' }, only: { type: 'string' }, 'ack-first': { type: 'string' }, 'log-level': { type: 'string' }, base: { type: 'string' } } });
const rounds = Number(args.rounds ?? ROUNDS_DEFAULT);
const ackFirst = args['ack-first'] ?? 'on';
if (!['on', 'off'].includes(ackFirst)) throw new Error(`--ack-first takes on or off, not ${ackFirst}`);


const until = (fn, what, timeoutMs = RUN_TIMEOUT_MS) => pollUntil(fn, { what, timeoutMs, intervalMs: POLL_MS });

async function startPeer() {
  console.log('bench: starting the Workflows peer (wrangler dev)...');
  const port = await freePort();
  // On the same scratch storage as Sluice's stack, so both pay the same for their commits; a
  // fresh directory each run (Workflows keeps instances by id across restarts), removed at stop.
  const tmp = mkdtempSync(join(scratchRoot(), 'sluice-bench-peer-'));
  const child = spawnGroup(WRANGLER_BIN, [
    'dev', '--config', join(ROOT, 'bench', 'workflows-peer', 'wrangler.toml'), '--port', String(port), '--ip', '127.0.0.1',
    '--inspector-port', String(await freePort()), '--persist-to', join(tmp, 'state'), '--show-interactive-dev-session=false',
  ], { env: { ...wranglerEnv(tmp), ...NO_INSPECTOR_ENV }, stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/status?id=warmup`, { timeoutMs: PEER_START_TIMEOUT_MS }).catch(() => {});
  await until(async () => (await fetch(`${url}/nope`).catch(() => null))?.status === 404, 'peer to answer', PEER_START_TIMEOUT_MS);
  return {
    url,
    // The peer's wrangler leads its own process group (spawnGroup): its workerd is in it.
    pgid: child.pid,
    stop: async () => {
      await stopGroup(child, STOP_GRACE_MS);
      rmSync(tmp, { recursive: true, force: true });
    },
  };
}

function peerApi(peer) {
  const call = async (path, init) => (await fetch(`${peer.url}${path}`, init)).json();
  return {
    create: (id, params) => call(`/create?id=${id}`, { method: 'POST', body: JSON.stringify(params) }),
    status: (id) => call(`/status?id=${id}`),
    event: (id, type) => call(`/event?id=${id}&type=${type}`, { method: 'POST' }),
    async done(id) {
      return until(async () => {
        const s = await call(`/status?id=${id}`);
        return s.status === 'complete' ? s.output : null;
      }, `peer ${id} to complete`);
    },
  };
}

function sluiceApi(stack) {
  const get = async (id) => (await stack.api(`/v1/executions/${id}`)).body;
  return {
    async create(key, input) {
      const res = await stack.api('/v1/executions', { method: 'POST', body: { key, run: 'probe', input } });
      if (res.status !== 201) throw new Error(`create ${key}: ${res.status} ${JSON.stringify(res.body)}`);
      return res.body.id;
    },
    get,
    async done(id) {
      return until(async () => {
        const e = await get(id);
        if (e.execution?.status === 'errored') throw new Error(`${id} errored: ${e.execution.error_message}`);
        return e.execution?.status === 'complete' ? e : null;
      }, `${id} to complete`);
    },
    async waitingOnEvent(id) {
      return until(async () => {
        const e = await get(id);
        return e.execution?.status === 'waiting' && (e.execution.reason ?? '').includes('event') ? e : null;
      }, `${id} to wait for its event`);
    },
  };
}

async function benchEngine(stack, peer, tag) {
  const s = sluiceApi(stack);
  const p = peerApi(peer);
  const out = { sSteps: [], sInline: [], sZero: [], sMany: [], sManyInline: [], pSteps: [], pZero: [], pMany: [], sLate: [], pLate: [], sEvent: [], pEvent: [], d1PerStep: [], writesPerStep: [] };
  for (let i = 0; i < rounds; i++) {
    // 100 no-op steps, create -> complete.
    const id = await s.create(`bench:${tag}:steps:${i}`, { steps: STEPS });
    const e = await s.done(id);
    out.sSteps.push(e.execution.finished_ms - e.execution.created_ms);
    out.d1PerStep.push(e.execution.index_round_trips / STEPS);
    out.writesPerStep.push(e.execution.journal_writes / STEPS);
    // The same as inline steps (Ctx::step_inline): plain computations, journaled together.
    const iid = await s.create(`bench:${tag}:inline:${i}`, { steps: STEPS, inline: true });
    const ie = await s.done(iid);
    out.sInline.push(ie.execution.finished_ms - ie.execution.created_ms);
    const pid = `steps-${tag}-${i}`;
    const created = await p.create(pid, { steps: STEPS });
    const po = await p.done(pid);
    out.pSteps.push(po.done_ms - created.created_ms);
    // The same with no steps: what creation and one pass cost, so a step's own share is
    // (STEPS run - 0-step run) / STEPS on each side.
    const zid = await s.create(`bench:${tag}:zero:${i}`, { steps: 0 });
    const ze = await s.done(zid);
    out.sZero.push(ze.execution.finished_ms - ze.execution.created_ms);
    const pzid = `zero-${tag}-${i}`;
    const pzCreated = await p.create(pzid, { steps: 0 });
    const pzo = await p.done(pzid);
    out.pZero.push(pzo.done_ms - pzCreated.created_ms);
    // MARGINAL_STEPS on each side, for a step's own share.
    for (const [list, input] of [[out.sMany, { steps: MARGINAL_STEPS }], [out.sManyInline, { steps: MARGINAL_STEPS, inline: true }]]) {
      const mid = await s.create(`bench:${tag}:many:${input.inline ? 'inline' : 'durable'}:${i}`, input);
      const me = await s.done(mid);
      list.push(me.execution.finished_ms - me.execution.created_ms);
    }
    const pmid = `many-${tag}-${i}`;
    const pmCreated = await p.create(pmid, { steps: MARGINAL_STEPS });
    const pmo = await p.done(pmid);
    out.pMany.push(pmo.done_ms - pmCreated.created_ms);

    // A 1 s sleep: how late the step after it starts.
    const sid = await s.create(`bench:${tag}:sleep:${i}`, { steps: 0, sleep_ms: SLEEP_MS });
    const se = await s.done(sid);
    const nap = se.steps.find((x) => x.name === 'nap');
    out.sLate.push(JSON.parse(se.execution.output_json).after_sleep_ms - nap.wake_at_ms);
    const psid = `sleep-${tag}-${i}`;
    await p.create(psid, { steps: 0, sleepMs: SLEEP_MS });
    const pso = await p.done(psid);
    out.pLate.push(pso.after_sleep_ms - pso.before_sleep_ms - SLEEP_MS);

    // Send event -> the step after the wait starts.
    const eid = await s.create(`bench:${tag}:event:${i}`, { steps: 0, wait_event: 'go' });
    await s.waitingOnEvent(eid);
    await delay(SETTLE_BEFORE_EVENT_MS);
    // Timed from the Worker's receipt of the event, as the peer times from its Worker's sendEvent.
    const sent = await stack.api(`/v1/executions/${eid}/events/go`, { method: 'POST', body: {} });
    const ee = await s.done(eid);
    out.sEvent.push(JSON.parse(ee.execution.output_json).after_event_ms - sent.body.received_ms);
    const peid = `event-${tag}-${i}`;
    await p.create(peid, { steps: 0, waitEvent: 'go' });
    // Locally a Workflow waiting for an event reports "running"; its 'before wait' step output
    // shows it reached the wait.
    await until(async () => ((await p.status(peid)).__LOCAL_DEV_STEP_OUTPUTS ?? []).includes('waiting'), `peer ${peid} to wait`);
    await delay(SETTLE_BEFORE_EVENT_MS);
    const psent = await p.event(peid, 'go');
    const peo = await p.done(peid);
    out.pEvent.push(peo.after_event_ms - psent.sent_ms);
  }
  return out;
}

const fmt = (v, unit = 'ms') => (Number.isFinite(v) ? `${Number.isInteger(v) ? v : v.toFixed(2)} ${unit}`.trim() : 'n/a');

export function printTable(rows) {
  const header = ['figure', 'Sluice', 'peer', 'ratio', 'target', 'met'];
  const lines = rows.map((r) => [r.figure, r.sluice, r.peer ?? '', r.ratio ?? '', r.target, r.met === undefined ? '' : r.met ? 'yes' : 'NO']);
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => String(l[i]).length)));
  const row = (cells) => `| ${cells.map((c, i) => String(c).padEnd(widths[i])).join(' | ')} |`;
  console.log(row(header));
  console.log(`|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`);
  for (const l of lines) console.log(row(l));
}

// Peer instances the engine rows create before the creation section: their warm-up round and,
// in the full run, their measured rounds, `rounds` iterations each.
function enginePeerInstances() {
  return ENGINE_PEER_INSTANCES_PER_ROUND * rounds * (args.only === 'creation' ? 1 : 2);
}

async function main() {
  if (args.only === 'ab') {
    console.log(`bench: this build against ${args.base}, two Sluice stacks (wrangler dev each)...`);
    // Two Sluice stacks of its own, no peer.
    if (!args.base) throw new Error('--only ab needs --base <a built build/ directory of another commit>');
    return finish(await benchAb(args.base));
  }
  console.log(`bench: ${rounds} rounds per figure; starting Sluice (wrangler dev)...`);
  // Refused before anything starts, not after the engine rows.
  if (args.only === undefined || args.only === 'creation') assertCreationPeerBudget(enginePeerInstances());
  if (args.only === 'profile') {
    // Its own stack: the inspector stays off everywhere else (tools/stack/env.mjs says why).
    const profiled = await startStack({ inspector: true });
    try {
      return finish(await benchProfile(profiled));
    } finally {
      await profiled.stop();
    }
  }
  // The scale section's pool: POOL_CAPACITY sandboxes, all check slots open to one repository.
  const stack = await startStack({ vars: { POOL_CAPACITY: String(POOL_CAPACITY), CHECKS_PER_REPO: String(POOL_CAPACITY - 1), ACK_FIRST: ackFirst, ...(args['log-level'] ? { LOG_LEVEL: args['log-level'] } : {}) } });
  if (args.only === 'check-latency') {
    try {
      return finish(await benchCheckLatency(stack, args.rounds ? { rounds } : {}));
    } finally {
      await stack.stop();
    }
  }
  if (args.only === 'snapshots') {
    try {
      return finish(await benchSnapshots(stack, { rounds }));
    } finally {
      await stack.stop();
    }
  }
  if (args.only === 'caches') {
    try {
      return finish([...(await benchArchives(stack, { rounds })), ...(await benchInstall(stack))]);
    } finally {
      await stack.stop();
    }
  }
  if (args.only === 'pipelines') {
    try {
      return finish(await benchPipelines(stack, { rounds: Number(args.rounds ?? PIPELINE_ROUNDS_DEFAULT) }));
    } finally {
      await stack.stop();
    }
  }
  // The scale section has no creation rows and needs no peer: the full run's creation figure is
  // the creation section's (below).
  if (args.only === 'scale') {
    try {
      return finish([...(await benchScale(stack, { ackFirst })), ...soakSummary()]);
    } finally {
      await stack.stop();
    }
  }
  const peer = await startPeer();
  const rows = [];
  try {
    // From fresh stacks: the trend shows each side's warm-up itself.
    if (args.only === 'creation-trend') {
      return finish(await benchCreationTrend(stack, peer));
    }
    // One warm-up round on each side, not counted (first-request compilation).
    await benchEngine(stack, peer, 'warmup').catch(() => {});
    if (args.only === 'creation') {
      return finish(await benchCreation(stack, peer, { peerInstancesBefore: enginePeerInstances() }));
    }
    if (args.only === 'perf') {
      return finish(await benchPerf(stack, peer));
    }
    const r = await benchEngine(stack, peer, 'run');
    const sSteps = median(r.sSteps);
    const pSteps = median(r.pSteps);
    const both = (xs) => `${fmt(median(xs))} / ${fmt(pct(xs, 99))}`;
    rows.push({ figure: `${STEPS} no-op steps, create -> complete (p50 / p99)`, sluice: both(r.sSteps), peer: both(r.pSteps), ratio: `1/${(pSteps / sSteps).toFixed(1)}`, target: '<= 1/10 of peer', met: sSteps * 10 <= pSteps });
    const sInline = median(r.sInline);
    rows.push({ figure: `${STEPS} no-op inline steps (Ctx::step_inline), create -> complete (p50 / p99)`, sluice: both(r.sInline), peer: both(r.pSteps), ratio: `1/${(pSteps / sInline).toFixed(1)}`, target: '<= 1/50 of peer', met: sInline * 50 <= pSteps });
    // Timestamps are whole milliseconds: a p50 of 0 is under the resolution, not a ratio.
    const zeroRatio = median(r.sZero) > 0 ? `1/${(median(r.pZero) / median(r.sZero)).toFixed(1)}` : 'Sluice under 1 ms';
    rows.push({ figure: '0 steps (creation and one pass), create -> complete (p50 / p99)', sluice: both(r.sZero), peer: both(r.pZero), ratio: zeroRatio, target: '', met: true });
    // A step's own share, without the fixed cost of an instance: timestamps are whole
    // milliseconds, so a share under STEPS_RESOLUTION_US reads as that bound.
    const perStep = (runs, zero) => median(runs.map((t, i) => Math.max(((t - zero[i]) * 1000) / MARGINAL_STEPS, STEPS_RESOLUTION_US)));
    const pPerStep = perStep(r.pMany, r.pZero);
    for (const [what, runs] of [['step', r.sMany], ['inline step (Ctx::step_inline)', r.sManyInline]]) {
      const us = perStep(runs, r.sZero);
      rows.push({ figure: `one no-op ${what}, beyond a 0-step run ((${MARGINAL_STEPS} - 0) / ${MARGINAL_STEPS}, p50)`, sluice: `${us <= STEPS_RESOLUTION_US ? '<= ' : ''}${us.toFixed(1)} us`, peer: `${pPerStep.toFixed(0)} us`, ratio: `1/${(pPerStep / us).toFixed(0)}`, target: '<= 1/50 of peer', met: us * 50 <= pPerStep });
    }
    rows.push({ figure: `sleep ${SLEEP_MS} ms, lateness (p50)`, sluice: fmt(median(r.sLate)), peer: fmt(median(r.pLate)), ratio: '', target: '<= 10 ms', met: median(r.sLate) <= 10 });
    rows.push({ figure: 'send event -> resumed step (p50)', sluice: fmt(median(r.sEvent)), peer: fmt(median(r.pEvent)), ratio: '', target: '<= 5 ms', met: median(r.sEvent) <= 5 });
    rows.push({ figure: 'D1 round trips per completed step', sluice: fmt(median(r.d1PerStep), ''), peer: 'n/a', target: '~0 (one batch per pass)', met: median(r.d1PerStep) <= 0.05 });
    rows.push({ figure: 'object-storage writes per step', sluice: fmt(median(r.writesPerStep), ''), peer: 'n/a', target: '1', met: median(r.writesPerStep) <= 1 });
    if (args.only === 'engine') return finish(rows);
    // Creation next, while both stacks have run only the engine's rounds: the scale section once
    // measured it after Sluice's burst (and, in the full run, the gates, agent and pipeline
    // sections) against a peer that had run only the engine rows, stacks of unequal history.
    // This is the one creation figure, each side warmed as scripts/bench-creation.mjs says.
    rows.push(...(await benchCreation(stack, peer, { peerInstancesBefore: enginePeerInstances() })));
    rows.push(...(await benchGates(stack, { rounds })));
    rows.push(...(await benchAgent(stack, { rounds })));
    rows.push(...(await benchArchives(stack, { rounds })), ...(await benchInstall(stack)));
    rows.push(...(await benchSnapshots(stack, { rounds })));
    rows.push(...(await benchPipelines(stack, { rounds: PIPELINE_ROUNDS_DEFAULT })));
    rows.push(...(await benchScale(stack, { ackFirst })), ...soakSummary());
  } finally {
    await peer.stop();
    await stack.stop();
  }
  // Containers next to the agent process, when this machine runs Docker (else one row says why).
  // A failure here still prints every figure measured above, with the reason in its row.
  rows.push(...(await benchContainers().catch((err) => [
    { figure: 'containers: cold start, warm round trip, image size', sluice: 'not measured', peer: '', target: '', met: false, note: String(err.message ?? err) },
  ])));
  finish(rows);
}

function finish(rows) {
  console.log('');
  printTable(rows);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop())) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
