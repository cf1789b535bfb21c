// `npm run bench -- --only creation`: where an instance's creation goes, for issue 26.
// - The creation rate at 50 concurrent (Sluice's POST /v1/executions of a 0-step probe against
//   the Workflows peer's create), CREATION_ROUNDS rounds in alternating order, two ways: the
//   answers' rate, and the rate at which the round's instances were created and run to
//   completion (the last one's server-side finish). Local Workflows answers a create before its
//   engine object has even started (it hands `init` to waitUntil), while Sluice answers once the
//   instance is indexed, which for a 0-step probe is after its pass: so every round waits for
//   both stacks to settle (scripts/bench-cpu.mjs) before it starts and before it reads each
//   process's CPU per instance from /proc/<pid>/stat, and neither side's leftovers land in the
//   other's round. The machine has two cores, so the rate is whatever CPU the two stacks,
//   wrangler's node processes and this client leave. Then the same for a trivial request on each
//   side, so the CPU a creation adds reads apart from what every request through `wrangler dev`
//   costs.
// - An instance's fixed cost: FIXED_CREATES sequential creates of each probe (0 steps, 100
//   inline, 100 durable), the record's created_ms to finished_ms. Timestamps are whole
//   milliseconds; the mean over many resolves what a p50 at 0 or 1 ms cannot.
// Linux only (/proc). Timing is read here, never asserted in tests.

import { awaitIdleObjectsEvicted, cpuByProcess, settle } from './bench-cpu.mjs';
import { inPool } from './bench-pool.mjs';
import { median } from './bench-stats.mjs';
import { REQUEST_TIMEOUT_MS, pollUntil } from '../tools/stack/index.mjs';

// Rounds of the rate, alternating, so neither side always follows the other's leftovers, and
// the median of the pairs' ratios is not moved by two or three rounds a busy machine disturbed.
const CREATION_ROUNDS = 7;
// Creates per round: about half a second at the concurrency, few enough that the peer stays
// under PEER_INSTANCES_FAIR_MAX through the measured rounds.
const CREATES = 100;
// The two sides are warmed differently, because their histories move their figures in
// opposite directions (`--only creation-trend`, 2026-12-07, three runs of twelve alternating
// rounds of 200 from fresh stacks):
// - Sluice's wasm is compiled lazily and tiered up by V8: its first round ran at 175-282/s and
//   3.65-5.5 ms of workerd CPU per instance, its later rounds at 208-332/s and 3.5-4.8 ms; in
//   a full run warmed with 600 its CPU per instance still fell from 4.9 to 3.3 ms through the
//   measured rounds. It lets idle objects go, so its history
//   costs it nothing further. It is warmed with SLUICE_WARM_ROUNDS of WARM_CREATES.
// - The local Workflows peer is near its best from its first round (276-389/s) and keeps every
//   instance's engine object open: from somewhere between its 1,200th and 1,800th instance its
//   CPU per instance rose from 2.75-4.25 ms to 4.2-5.65 ms and its rate fell to 213-268/s.
//   Rounds measured there compare Sluice with a slowed peer: this section, when it measured
//   nine rounds with the peer at 800-2,400 instances, read 0.99-1.17x; the trend runs' rounds
//   at up to 1,200 peer instances read 0.55-0.93x. The peer is warmed with one round and
//   measured while it holds at most PEER_INSTANCES_FAIR_MAX.
const SLUICE_WARM_ROUNDS = 5;
const PEER_WARM_ROUNDS = 1;
const WARM_CREATES = 200;
// The most instances the peer holds by the last measured round (the engine rows' before it, its
// warm-up and every round): under the earliest slide seen above.
const PEER_INSTANCES_FAIR_MAX = 1_000;
// Peer instances this section creates.
const PEER_INSTANCES_OWN = PEER_WARM_ROUNDS * WARM_CREATES + CREATION_ROUNDS * CREATES;
// The trend (`--only creation-trend`): rounds of TREND_CREATES from fresh stacks, each side's
// figures against how many instances it has created. Its 2,400 peer instances stay under what
// one local Workflows session creates before it loses some (below).
const TREND_ROUNDS = 12;
const TREND_CREATES = 200;
// One local Workflows session keeps every instance's engine object open (three file
// descriptors each, none let go after 80 s idle), and past about 2,550-2,640 instances it still
// answers most creates 200 while the instance never exists (its status reads 500, still 35 s
// later; docs/capacity.md). Sluice's stack lets idle objects go, and a round waits for that
// when it holds many (bench-cpu.mjs, awaitIdleObjectsEvicted). Either side's runtime also
// restarts now and then at far fewer objects (wrangler's proxy answers 503 "Your worker
// restarted mid-request"), for a reason not found: a round that loses creates is printed, and
// the ratio is a median.
export const CREATION_CONCURRENCY = 50;
// Sequential creates per probe for the fixed cost: enough for a mean to resolve a tenth of a
// millisecond from whole-millisecond timestamps.
const FIXED_CREATES = 20;
// Bound of every wait for an instance to complete: a 100-step probe takes milliseconds.
const DONE_TIMEOUT_MS = 60_000;
const POLL_MS = 5;
// Completion times are read with this many requests at once, after the round's CPU is read.
const FINISH_READS_CONCURRENCY = 10;

// What a process is: this client, or a workerd or node process of the peer's wrangler (its
// process group) or of the rest (Sluice's stack: its wrangler, the stand-in, the agent).
function processName(pid, p, peerPgid) {
  if (pid === String(process.pid)) return 'this client';
  const side = p.pgrp === peerPgid ? 'peer' : 'Sluice stack';
  const kind = p.cmd.includes('workerd') ? 'workerd' : p.cmd.includes('wrangler') ? 'wrangler (node)' : 'node';
  return `${side} ${kind}`;
}

// CPU per create over a round, summed by process name, largest first.
function cpuPerCreate(before, after, creates, peerPgid) {
  const byName = new Map();
  for (const [pid, p] of after) {
    const ms = ((p.s - (before.get(pid)?.s ?? 0)) * 1000) / creates;
    const name = processName(pid, p, peerPgid);
    byName.set(name, (byName.get(name) ?? 0) + ms);
  }
  return [...byName].filter(([, ms]) => ms >= 0.05).map(([what, ms]) => ({ what, ms })).sort((x, y) => y.ms - x.ms);
}

// One round: CREATES creations at CREATION_CONCURRENCY once both stacks are idle, then (once they are
// idle again) the CPU each process spent per instance and when each instance finished.
export async function creationRound(side, label, peerPgid, creates = CREATES) {
  const eviction = await awaitIdleObjectsEvicted(peerPgid);
  if (eviction.waitedMs) console.error(`creation: ${label} waited ${eviction.waitedMs} ms for Sluice's idle objects to be evicted${eviction.evicted ? '' : `; a workerd still holds ${eviction.openFiles} open files`}`);
  const idleBefore = await settle();
  const before = cpuByProcess();
  const t0 = Date.now();
  const ids = await inPool([...Array(creates).keys()], CREATION_CONCURRENCY, (i) => side.create(`${label}-${i}`));
  const answeredMs = Date.now() - t0;
  const { settled, waitedMs } = await settle();
  const after = cpuByProcess();
  const created = ids.filter(Boolean);
  const finished = side.finishedMs ? (await inPool(created, FINISH_READS_CONCURRENCY, side.finishedMs)).filter(Number.isFinite) : [];
  // CPU per instance that exists and finished (per answered request for a trivial round): a
  // side that lost instances does not look cheaper for it.
  const cpu = cpuPerCreate(before, after, Math.max(1, side.finishedMs ? finished.length : created.length), peerPgid);
  return {
    rate: (created.length * 1000) / answeredMs,
    // Instances run to completion per second: a missing finish counts as not created.
    completedRate: finished.length ? (finished.length * 1000) / Math.max(1, Math.max(...finished) - t0) : 0,
    unfinished: creates - finished.length,
    settled: settled && idleBefore.settled,
    // settle()'s wait after the round's last answer: its quiet window, plus however long the
    // stacks kept working, which an unsettled next round would have run beside.
    settleMs: waitedMs,
    cpu,
  };
}

// Each side's creation of one 0-step probe under a fresh key (its id, or null when it was not
// created), and when an instance finished (server time in ms, or null when it has not): Sluice's
// record's finished_ms, the peer's last step's Date.now() (a step before its instance's end).
export function creators(stack, peer) {
  return {
    sluice: {
      create: async (key) => {
        const res = await stack.api('/v1/executions', { method: 'POST', body: { key: `creation:${key}`, run: 'probe', input: { steps: 0 } } }).catch((err) => ({ status: String(err) }));
        if (res.status !== 201) console.error(`creation: create ${key} answered ${res.status} ${JSON.stringify(res.body)?.slice(0, 300)}`);
        return res.status === 201 ? res.body.id : null;
      },
      finishedMs: async (id) => {
        const res = await stack.api(`/v1/executions/${id}`).catch((err) => ({ status: String(err) }));
        const e = res.body?.execution;
        if (!(e?.status === 'complete' && Number.isFinite(e.finished_ms))) console.error(`creation: ${id} reads ${res.status} ${JSON.stringify(res.body)?.slice(0, 300)}`);
        return e?.status === 'complete' ? e.finished_ms : null;
      },
    },
    peer: {
      create: async (key) => {
        const id = `creation-${key}`;
        const res = await fetch(`${peer.url}/create?id=${id}`, { method: 'POST', body: JSON.stringify({ steps: 0 }), signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }).catch(() => null);
        const body = await res?.text().catch(() => null);
        if (!res?.ok) console.error(`creation: peer create ${id} answered ${res?.status} ${body?.slice(0, 300)}`);
        return res?.ok ? id : null;
      },
      finishedMs: async (id) => {
        const res = await fetch(`${peer.url}/status?id=${id}`, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) }).catch(() => null);
        const s = res?.ok ? await res.json().catch(() => null) : null;
        if (s?.status !== 'complete') console.error(`creation: peer ${id} reads ${res?.status} ${JSON.stringify(s).slice(0, 300)}`);
        return s?.status === 'complete' ? s.output?.done_ms ?? null : null;
      },
    },
  };
}

// Throws unless the section, after `peerInstancesBefore` peer instances (the engine rows'),
// measures the peer under PEER_INSTANCES_FAIR_MAX: the bench calls it before it starts anything.
export function assertCreationPeerBudget(peerInstancesBefore) {
  if (peerInstancesBefore + PEER_INSTANCES_OWN > PEER_INSTANCES_FAIR_MAX) {
    throw new Error(`the creation section would take the peer to ${peerInstancesBefore + PEER_INSTANCES_OWN} instances, past the ${PEER_INSTANCES_FAIR_MAX} it is measured under (scripts/bench-creation.mjs): run it with fewer --rounds`);
  }
}

export async function benchCreation(stack, peer, { peerInstancesBefore = 0 } = {}) {
  assertCreationPeerBudget(peerInstancesBefore);
  const sides = creators(stack, peer);
  for (let r = 0; r < SLUICE_WARM_ROUNDS; r++) await creationRound(sides.sluice, `warm-${r}`, peer.pgid, WARM_CREATES);
  for (let r = 0; r < PEER_WARM_ROUNDS; r++) await creationRound(sides.peer, `warm-${r}`, peer.pgid, WARM_CREATES);
  const rounds = await alternatingRounds(sides, peer.pgid, { n: CREATION_ROUNDS, creates: CREATES, label: 'measured' });
  const ratioRow = (key, figure) => {
    const ratios = rounds.map((x) => x.sluice[key] / x.peer[key]);
    return {
      figure: `${figure} (ratio: p50 of the rounds', ${ratios.map((r) => r.toFixed(2)).join(', ')})`,
      sluice: `${median(rounds.map((x) => x.sluice[key])).toFixed(0)}/s`,
      peer: `${median(rounds.map((x) => x.peer[key])).toFixed(0)}/s`,
      ratio: `${median(ratios).toFixed(2)}x`,
      target: '>= 1x',
      met: median(ratios) >= 1,
    };
  };
  const unfinished = (side) => rounds.reduce((n, x) => n + x[side].unfinished, 0);
  const unsettled = (side) => rounds.filter((x) => !x[side].settled).length;
  const workerd = (side) => rounds.map((x) => workerdMs(x[side].cpu, side));
  const rows = [
    ratioRow('rate', `creation at ${CREATION_CONCURRENCY} concurrent, ${CREATION_ROUNDS} alternating rounds of ${CREATES}: answers, p50`),
    ratioRow('completedRate', `  created and run to completion (round start -> the last instance's finish: Sluice's finished_ms, the peer's last step's start), p50`),
    { figure: '  instances not found complete after the round; rounds that did not settle before or after', sluice: `${unfinished('sluice')}; ${unsettled('sluice')}`, peer: `${unfinished('peer')}; ${unsettled('peer')}`, target: '0; 0', met: unfinished('sluice') + unfinished('peer') + unsettled('sluice') + unsettled('peer') === 0 },
    { figure: '  workerd CPU per instance found complete, p50 of the rounds', sluice: `${median(workerd('sluice')).toFixed(2)} ms`, peer: `${median(workerd('peer')).toFixed(2)} ms`, ratio: `${(median(workerd('sluice')) / median(workerd('peer'))).toFixed(2)}x`, target: '' },
  ];
  const last = rounds[rounds.length - 1];
  const cpu = (side) => last[side].cpu.map((c) => `${c.what} ${c.ms.toFixed(2)}`).join(', ');
  rows.push({ figure: 'creation: CPU ms per instance by process (to completion), last round', sluice: cpu('sluice'), peer: cpu('peer'), target: '' });
  rows.push(...(await trivialRequests(stack, peer, last)));
  rows.push(...(await fixedCost(stack)));
  return rows;
}

// The trend behind the warm-ups above: TREND_ROUNDS alternating rounds of TREND_CREATES from
// fresh stacks, with no warm-up, each side's rate and workerd CPU per instance against the
// instances it has created so far.
export async function benchCreationTrend(stack, peer) {
  const rounds = await alternatingRounds(creators(stack, peer), peer.pgid, { n: TREND_ROUNDS, creates: TREND_CREATES, label: 'trend' });
  return rounds.map((got, r) => {
    const cell = (side) => `${got[side].rate.toFixed(0)}/s, workerd ${workerdMs(got[side].cpu, side).toFixed(2)} ms`;
    return {
      figure: `creation trend: round ${r}, instances ${r * TREND_CREATES + 1}-${(r + 1) * TREND_CREATES} of each side (answers per second, workerd CPU per instance)`,
      sluice: cell('sluice'),
      peer: cell('peer'),
      ratio: `${(got.sluice.rate / got.peer.rate).toFixed(2)}x`,
      target: '',
    };
  });
}

// `n` rounds of `creates` on each side, the order alternating so neither side always follows the
// other's leftovers; each round as { sluice, peer }, and printed as it ends.
async function alternatingRounds(sides, peerPgid, { n, creates, label }) {
  const rounds = [];
  for (let r = 0; r < n; r++) {
    const got = {};
    for (const side of r % 2 === 0 ? ['sluice', 'peer'] : ['peer', 'sluice']) {
      got[side] = await creationRound(sides[side], `${label}-${side}-${r}`, peerPgid, creates);
    }
    rounds.push(got);
    console.error(`creation ${label} round ${r}: ${['sluice', 'peer'].map((k) => `${k} ${got[k].rate.toFixed(0)}/s answered, ${got[k].completedRate.toFixed(0)}/s completed, workerd ${workerdMs(got[k].cpu, k).toFixed(2)} ms, settled in ${got[k].settleMs} ms`).join('; ')}`);
  }
  return rounds;
}

// What a request costs before any instance: Sluice's GET /healthz and the peer's 404, each
// through its own `wrangler dev` (whose entry worker and request log every request pays), and
// what a creation adds on each side's workerd: where the creation gap is, and where it is not.
async function trivialRequests(stack, peer, lastCreation) {
  const answers = (url, status) => ({
    create: async () => {
      const res = await fetch(url).catch(() => null);
      await res?.text();
      return res?.status === status;
    },
  });
  const health = answers(`${stack.url}/healthz`, 200);
  const notFound = answers(`${peer.url}/nope`, 404);
  const got = { sluice: await creationRound(health, 'trivial', peer.pgid), peer: await creationRound(notFound, 'trivial', peer.pgid) };
  const cell = (side) => `${got[side].rate.toFixed(0)}/s, workerd ${workerdMs(got[side].cpu, side).toFixed(2)} ms`;
  const added = (side) => workerdMs(lastCreation[side].cpu, side) - workerdMs(got[side].cpu, side);
  return [
    { figure: 'a trivial request (Sluice GET /healthz, the peer\'s 404) at 50 concurrent: rate, workerd CPU per request', sluice: cell('sluice'), peer: cell('peer'), target: '' },
    { figure: 'workerd CPU an instance adds to a trivial request (last round less the above)', sluice: `${added('sluice').toFixed(2)} ms`, peer: `${added('peer').toFixed(2)} ms`, ratio: `${(added('sluice') / added('peer')).toFixed(2)}x the peer's`, target: '' },
  ];
}

// A side's workerd CPU per instance (or request) from a round's figures by process.
function workerdMs(cpu, side) {
  return cpu.find((c) => c.what === `${side === 'sluice' ? 'Sluice stack' : 'peer'} workerd`)?.ms ?? 0;
}

async function fixedCost(stack) {
  const rows = [];
  for (const [name, input] of [['0 steps', { steps: 0 }], ['100 inline steps', { steps: 100, inline: true }], ['100 durable steps', { steps: 100 }]]) {
    const ms = [];
    for (let i = 0; i < FIXED_CREATES; i++) {
      const res = await stack.api('/v1/executions', { method: 'POST', body: { key: `fixed:${name}:${i}`, run: 'probe', input } });
      if (res.status !== 201) throw new Error(`create: ${res.status} ${JSON.stringify(res.body)}`);
      const e = await pollUntil(async () => {
        const got = (await stack.api(`/v1/executions/${res.body.id}`)).body.execution;
        return got?.status === 'complete' ? got : null;
      }, { what: `${res.body.id} to complete`, timeoutMs: DONE_TIMEOUT_MS, intervalMs: POLL_MS });
      ms.push(e.finished_ms - e.created_ms);
    }
    const mean = ms.reduce((a, b) => a + b, 0) / ms.length;
    rows.push({ figure: `${name}: created_ms -> finished_ms, mean of ${FIXED_CREATES} sequential (p50)`, sluice: `${mean.toFixed(2)} ms (${median(ms)} ms)`, target: '' });
  }
  return rows;
}
