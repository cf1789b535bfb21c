// `npm run bench -- --only ab --base <dir>`: this build of the Worker against another, side by side
// (issue 26). <dir> is a copy of another commit's `build/` (check it out, `npm run build`,
// `cp -r build /tmp/base`, come back and build again). Two Sluice stacks run at once, one per
// build, and take turns: AB_ROUNDS rounds each of AB_CREATES creations at AB_CONCURRENCY (a 0-step
// probe, as `--only creation`), then AB_STEP_ROUNDS sequential probes of AB_STEPS durable steps,
// each followed by one of AB_STEPS inline steps.
// What each round cost is read per stack: its workerd and its wrangler (node) processes' CPU from
// /proc. The figures are paired medians: each round's ratio against the other build's round next
// to it, so load from outside (these machines are shared) cancels out of most pairs. Without the
// pairing, a change of 5% did not read apart from a rerun of the same build. Linux only (/proc).

import { existsSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ROOT, pollUntil, startStack } from '../tools/stack/index.mjs';
import { awaitIdleObjectsEvicted, cpuByProcess } from './bench-cpu.mjs';
import { inPool } from './bench-pool.mjs';
import { median } from './bench-stats.mjs';

// Rounds per build: pairs enough for a median that 2-3 disturbed rounds do not move.
const AB_ROUNDS = 16;
// Creations per round: whole CPU ticks (10 ms) resolve 0.05 ms a creation.
const AB_CREATES = 200;
const AB_CONCURRENCY = 50;
// Unmeasured creations first on each stack: the first requests compile the wasm.
const AB_WARM_CREATES = 200;
// Durable steps per step probe: whole-millisecond timestamps resolve 1 us a step.
const AB_STEPS = 1_000;
const AB_STEP_ROUNDS = 10;
// Bound of the wait for a step probe to end: 1,000 steps take tens of milliseconds.
const AB_STEP_TIMEOUT_MS = 60_000;
const AB_POLL_MS = 5;
// The base build's wrangler config, written next to wrangler.toml so its relative paths hold.
const BASE_CONFIG = join(ROOT, 'wrangler.ab-base.toml');

function baseConfig(dir) {
  const shim = join(resolve(dir), 'worker', 'shim.mjs');
  if (!existsSync(shim)) throw new Error(`--base ${dir}: no worker/shim.mjs there; copy a built build/ directory`);
  const config = readFileSync(join(ROOT, 'wrangler.toml'), 'utf8');
  const main = /^main = ".*"$/m;
  if (!main.test(config)) throw new Error('wrangler.toml has no main = "..." line to point at the base build');
  writeFileSync(BASE_CONFIG, config.replace(main, `main = ${JSON.stringify(shim)}`));
  return BASE_CONFIG;
}

// Starts a stack and the processes it started (its wrangler, workerd, stand-in and agent).
async function ownedStack(opts) {
  const before = new Set(cpuByProcess().keys());
  const stack = await startStack(opts);
  return { stack, pids: [...cpuByProcess().keys()].filter((pid) => !before.has(pid)) };
}

// CPU ms per unit of the stack's workerd and wrangler over a round.
function cpuOf(pids, before, after, units) {
  const out = { workerd: 0, wrangler: 0 };
  for (const pid of pids) {
    const p = after.get(pid);
    if (!p) continue;
    const ms = ((p.s - (before.get(pid)?.s ?? 0)) * 1000) / units;
    if (p.cmd.includes('workerd')) out.workerd += ms;
    else if (p.cmd.includes('wrangler')) out.wrangler += ms;
  }
  return out;
}

const probe = (stack, key, input) => stack.api('/v1/executions', { method: 'POST', body: { key, run: 'probe', input } });

async function creationRound(side, tag) {
  // Both stacks' objects of earlier rounds evicted first: past about 2,770 open ones a workerd's
  // SQLite fails (scripts/bench-cpu.mjs), and a pair's two halves would not be alike.
  const eviction = await awaitIdleObjectsEvicted();
  if (!eviction.evicted) console.error(`ab: round ${tag} starts with a workerd still holding ${eviction.openFiles} open files`);
  const before = cpuByProcess();
  const t0 = Date.now();
  const ok = await inPool([...Array(AB_CREATES).keys()], AB_CONCURRENCY, async (i) => (await probe(side.stack, `ab:${tag}:${i}`, { steps: 0 })).status === 201);
  const failed = ok.filter((x) => !x).length;
  if (failed) console.error(`ab: round ${tag}: ${failed} of ${AB_CREATES} creates not answered 201`);
  const rate = (ok.filter(Boolean).length * 1000) / (Date.now() - t0);
  return { rate, ...cpuOf(side.pids, before, cpuByProcess(), AB_CREATES) };
}

// created_ms -> finished_ms of one probe, waited for.
async function probeMs(stack, key, input) {
  const res = await probe(stack, key, input);
  if (res.status !== 201) throw new Error(`create ${key}: ${res.status} ${JSON.stringify(res.body)}`);
  const e = await pollUntil(async () => {
    const got = (await stack.api(`/v1/executions/${res.body.id}`)).body.execution;
    return got?.status === 'complete' ? got : null;
  }, { what: `${key} to complete`, timeoutMs: AB_STEP_TIMEOUT_MS, intervalMs: AB_POLL_MS });
  return e.finished_ms - e.created_ms;
}

// The median over pairs of b's figure over a's, round by round.
const paired = (a, b) => median(a.map((x, i) => b[i] / x));

export async function benchAb(baseDir) {
  const config = baseConfig(baseDir);
  const sides = {};
  try {
    sides.base = await ownedStack({ config });
    sides.this = await ownedStack({});
    for (const [name, side] of Object.entries(sides)) {
      await inPool([...Array(AB_WARM_CREATES).keys()], AB_CONCURRENCY, (i) => probe(side.stack, `ab:warm:${name}:${i}`, { steps: 0 }));
    }
    const got = { base: [], this: [] };
    for (let r = 0; r < AB_ROUNDS; r++) {
      for (const name of r % 2 === 0 ? ['base', 'this'] : ['this', 'base']) got[name].push(await creationRound(sides[name], `${name}:${r}`));
    }
    const steps = { base: [], this: [] };
    const inline = { base: [], this: [] };
    for (let r = 0; r < AB_STEP_ROUNDS; r++) {
      for (const name of r % 2 === 0 ? ['base', 'this'] : ['this', 'base']) {
        steps[name].push(await probeMs(sides[name].stack, `ab:steps:${name}:${r}`, { steps: AB_STEPS }));
        inline[name].push(await probeMs(sides[name].stack, `ab:inline:${name}:${r}`, { steps: AB_STEPS, inline: true }));
      }
    }
    const row = (figure, of, unit, digits) => {
      const [a, b] = [got.base.map(of), got.this.map(of)];
      return { figure, sluice: `${median(b).toFixed(digits)}${unit}`, peer: `${median(a).toFixed(digits)}${unit}`, ratio: `${paired(a, b).toFixed(3)}x`, target: '' };
    };
    const stepUs = (ms) => (ms * 1000) / AB_STEPS;
    return [
      { figure: `this build (Sluice column) against --base ${baseDir} (peer column): paired medians of ${AB_ROUNDS} alternating rounds`, sluice: '', target: '' },
      row(`creations at ${AB_CONCURRENCY} concurrent, rate`, (x) => x.rate, '/s', 0),
      row('creation: workerd CPU ms per creation', (x) => x.workerd, ' ms', 2),
      row('creation: wrangler (node) CPU ms per creation', (x) => x.wrangler, ' ms', 2),
      ...[['durable', steps], ['inline', inline]].map(([kind, ms]) => ({
        figure: `one ${kind} no-op step (a ${AB_STEPS}-step probe's created -> finished / ${AB_STEPS}, ${AB_STEP_ROUNDS} alternating rounds)`,
        sluice: `${stepUs(median(ms.this)).toFixed(1)} us`,
        peer: `${stepUs(median(ms.base)).toFixed(1)} us`,
        ratio: `${paired(ms.base, ms.this).toFixed(3)}x`,
        target: '',
      })),
    ];
  } finally {
    for (const side of Object.values(sides)) await side.stack.stop();
    rmSync(config, { force: true });
  }
}
