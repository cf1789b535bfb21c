// `npm run bench -- --only creation`: where an instance's creation goes, for issue 26.
// - The creation rate at 50 concurrent (Sluice's POST /v1/executions of a 0-step probe against
//   the Workflows peer's create), CREATION_ROUNDS rounds in alternating order, with each
//   process's CPU per create over the round, read from /proc/<pid>/stat: the machine has two
//   cores, so the rate is whatever CPU the two stacks, wrangler's node processes and this
//   client leave. Then the same for a trivial request on each side, so the CPU a creation adds
//   reads apart from what every request through `wrangler dev` costs.
// - An instance's fixed cost: FIXED_CREATES sequential creates of each probe (0 steps, 100
//   inline, 100 durable), the record's created_ms to finished_ms. Timestamps are whole
//   milliseconds; the mean over many resolves what a p50 at 0 or 1 ms cannot.
// Linux only (/proc). Timing is read here, never asserted in tests.

import { readFileSync, readdirSync } from 'node:fs';
import { inPool } from './bench-scale.mjs';
import { median } from './bench-stats.mjs';
import { pollUntil } from '../tools/stack/index.mjs';

// Rounds of the rate: eleven, alternating, so neither side always follows the other's leftovers, and
// the median of the pairs' ratios is not moved by two or three rounds a busy machine disturbed.
const CREATION_ROUNDS = 11;
// Creates per round: a steady rate at the concurrency, as the scale section's.
const CREATES = 200;
const CONCURRENCY = 50;
// Sequential creates per probe for the fixed cost: enough for a mean to resolve a tenth of a
// millisecond from whole-millisecond timestamps.
const FIXED_CREATES = 20;
// Bound of every wait for an instance to complete: a 100-step probe takes milliseconds.
const DONE_TIMEOUT_MS = 60_000;
const POLL_MS = 5;
// Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ, 100 on Linux).
const TICKS_PER_S = 100;

// CPU seconds of every workerd and node process, with its process group and command line.
export function cpuByProcess() {
  const out = new Map();
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (!/workerd|node/.test(cmd)) continue;
      // Fields after the command name (which may hold spaces) start after its closing paren:
      // state, ppid, pgrp, ..., utime (12th), stime (13th).
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
      out.set(pid, { cmd, pgrp: Number(fields[2]), s: (Number(fields[11]) + Number(fields[12])) / TICKS_PER_S });
    } catch {
      // The process ended meanwhile.
    }
  }
  return out;
}

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

async function round(create, label, peerPgid) {
  const before = cpuByProcess();
  const t0 = Date.now();
  const ok = await inPool([...Array(CREATES).keys()], CONCURRENCY, (i) => create(`${label}-${i}`));
  const rate = (ok.filter(Boolean).length * 1000) / (Date.now() - t0);
  return { rate, cpu: cpuPerCreate(before, cpuByProcess(), CREATES, peerPgid) };
}

// Each side's creation of one 0-step probe under a fresh key: whether it was created.
export function creators(stack, peer) {
  return {
    sluice: async (key) => (await stack.api('/v1/executions', { method: 'POST', body: { key: `creation:${key}`, run: 'probe', input: { steps: 0 } } })).status === 201,
    workflows: async (id) => {
      const res = await fetch(`${peer.url}/create?id=creation-${id}`, { method: 'POST', body: JSON.stringify({ steps: 0 }) }).catch(() => null);
      await res?.text();
      return Boolean(res?.ok);
    },
  };
}

export async function benchCreation(stack, peer) {
  const { sluice, workflows } = creators(stack, peer);
  const rounds = [];
  for (let r = 0; r < CREATION_ROUNDS; r++) {
    const sides = r % 2 === 0 ? ['sluice', 'peer'] : ['peer', 'sluice'];
    const got = {};
    for (const side of sides) got[side] = await round(side === 'sluice' ? sluice : workflows, `${side}-${r}`, peer.pgid);
    rounds.push(got);
  }
  const rows = [{
    figure: `creation at ${CONCURRENCY} concurrent, ${CREATION_ROUNDS} alternating rounds of ${CREATES}: p50 (ratio: p50 of the rounds', ${rounds.map((x) => (x.sluice.rate / x.peer.rate).toFixed(2)).join(', ')})`,
    sluice: `${median(rounds.map((x) => x.sluice.rate)).toFixed(0)}/s`,
    peer: `${median(rounds.map((x) => x.peer.rate)).toFixed(0)}/s`,
    ratio: `${median(rounds.map((x) => x.sluice.rate / x.peer.rate)).toFixed(2)}x`,
    target: '>= 1x',
    met: median(rounds.map((x) => x.sluice.rate / x.peer.rate)) >= 1,
  }];
  const last = rounds[rounds.length - 1];
  const cpu = (side) => last[side].cpu.map((c) => `${c.what} ${c.ms.toFixed(2)}`).join(', ');
  rows.push({ figure: 'creation: CPU ms per create by process, last round', sluice: cpu('sluice'), peer: cpu('peer'), target: '' });
  rows.push(...(await trivialRequests(stack, peer, last)));
  rows.push(...(await fixedCost(stack)));
  return rows;
}

// What a request costs before any instance: Sluice's GET /healthz and the peer's 404, each
// through its own `wrangler dev` (whose entry worker and request log every request pays), and
// what a creation adds on each side's workerd: where the creation gap is, and where it is not.
async function trivialRequests(stack, peer, lastCreation) {
  const answers = (url, status) => async () => {
    const res = await fetch(url).catch(() => null);
    await res?.text();
    return res?.status === status;
  };
  const health = answers(`${stack.url}/healthz`, 200);
  const notFound = answers(`${peer.url}/nope`, 404);
  const got = { sluice: await round(health, 'trivial', peer.pgid), peer: await round(notFound, 'trivial', peer.pgid) };
  const workerd = (cpu, side) => cpu.find((c) => c.what === `${side === 'sluice' ? 'Sluice stack' : 'peer'} workerd`)?.ms ?? 0;
  const cell = (side) => `${got[side].rate.toFixed(0)}/s, workerd ${workerd(got[side].cpu, side).toFixed(2)} ms`;
  const added = (side) => workerd(lastCreation[side].cpu, side) - workerd(got[side].cpu, side);
  return [
    { figure: 'a trivial request (Sluice GET /healthz, the peer\'s 404) at 50 concurrent: rate, workerd CPU per request', sluice: cell('sluice'), peer: cell('peer'), target: '' },
    { figure: 'workerd CPU a creation adds to a trivial request (last round less the above)', sluice: `${added('sluice').toFixed(2)} ms`, peer: `${added('peer').toFixed(2)} ms`, ratio: `${(added('sluice') / added('peer')).toFixed(2)}x the peer's`, target: '' },
  ];
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
