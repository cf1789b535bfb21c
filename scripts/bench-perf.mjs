// `npm run bench -- --only perf`: where each side's workerd spends its CPU while it creates
// instances, read with Linux perf (issue 26; docs/capacity.md, "Where the rest of a creation's
// CPU goes"). For each side in turn: PERF_CREATES creations at CONCURRENCY with
// `perf record -g` attached to that side's workerd, then perf's CPU per creation and the shares
// of the parts that tell the two apart (compiled JavaScript and wasm, SQLite, the object's
// creation, requests). Needs `perf` (Debian's linux-perf) and a kernel that lets this user
// sample (kernel.perf_event_paranoid <= 2 for its own processes); without them it says so.
// Linux only. perf's figures include its own sampling cost, so read shares, not totals.

import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { cpuByProcess, settle } from './bench-cpu.mjs';
import { creators } from './bench-creation.mjs';
import { inPool } from './bench-pool.mjs';

// Creations per side: enough samples (at PERF_HZ, some ten thousand) for a share to read to a
// tenth of a percent.
const PERF_CREATES = 1500;
const CONCURRENCY = 50;
// Unmeasured creations first: the first requests compile code.
const WARM_CREATES = 200;
// perf's sampling rate: a sample per half millisecond of CPU.
const PERF_HZ = 2000;
// perf attaches to the processes before it samples; what it misses meanwhile is not measured.
const PERF_ATTACH_MS = 500;
// Bound of the wait for perf to write its file after SIGINT.
const PERF_STOP_TIMEOUT_MS = 60_000;

// Inclusive shares read from perf's report, by the symbol that owns the work.
const PARTS = [
  ['SQLite calls of the object (SqlStorage::exec)', /\] workerd::api::SqlStorage::exec$/],
  ['SQLite statements prepared, in objects and local D1 (sqlite3Prepare)', /\] sqlite3Prepare$/],
  ['creating the object (Worker::Actor::Actor)', /\] workerd::Worker::Actor::Actor$/],
  ['outgoing requests (Fetcher::fetch)', /\] workerd::api::Fetcher::fetch$/],
  ['RPC calls (JsRpcTargetBase::callImpl)', /\] workerd::api::JsRpcTargetBase::callImpl$/],
  ['garbage collection (Heap::CollectGarbage)', /\] v8::internal::Heap::CollectGarbage$/],
];

function hasPerf() {
  try {
    execFileSync('perf', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

// The workerd processes of one side: the peer's are in its process group, Sluice's are the rest.
function workerdPids(peerPgid, side) {
  return [...cpuByProcess()]
    .filter(([, p]) => p.cmd.includes('workerd') && (p.pgrp === peerPgid) === (side === 'peer'))
    .map(([pid]) => pid);
}

function report(file, args) {
  return execFileSync('perf', ['report', '-i', file, '--stdio', '-g', 'none', ...args], { encoding: 'utf8', maxBuffer: 64 << 20, stdio: ['ignore', 'pipe', 'ignore'] });
}

// perf's CPU per creation and the shares that matter, from one recording.
function readRecording(file) {
  const byDso = report(file, ['--no-children', '--sort', 'dso']);
  const events = Number(/Event count \(approx\.\): (\d+)/.exec(byDso)?.[1] ?? 0);
  const dso = (re) => byDso.split('\n').filter((l) => re.test(l)).reduce((sum, l) => sum + Number.parseFloat(l), 0);
  const bySymbol = report(file, ['--children', '--sort', 'sym']).split('\n');
  const share = (re) => Number.parseFloat(bySymbol.find((l) => re.test(l.trim())) ?? '0');
  return {
    msPerCreate: events / 1e6 / PERF_CREATES,
    compiled: dso(/\[JIT\]/),
    kernel: dso(/\[kernel/),
    parts: PARTS.map(([what, re]) => [what, share(re)]),
  };
}

async function recordSide(side, creator, peerPgid, dir) {
  await inPool([...Array(WARM_CREATES).keys()], CONCURRENCY, (i) => creator.create(`perf-warm-${side}-${i}`));
  // Recorded from idle to idle: a Workflows create answers before its instance runs.
  if (!(await settle()).settled) console.error(`perf: ${side}'s stack was still busy before the recording`);
  const file = join(dir, `${side}.data`);
  const perf = spawn('perf', ['record', '-F', String(PERF_HZ), '-g', '-o', file, '-p', workerdPids(peerPgid, side).join(',')], { stdio: 'ignore' });
  const exited = new Promise((resolve) => perf.on('exit', resolve));
  await new Promise((resolve) => setTimeout(resolve, PERF_ATTACH_MS));
  await inPool([...Array(PERF_CREATES).keys()], CONCURRENCY, (i) => creator.create(`perf-${side}-${i}`));
  if (!(await settle()).settled) console.error(`perf: ${side}'s stack was still busy at the recording's end`);
  perf.kill('SIGINT');
  const timer = setTimeout(() => perf.kill('SIGKILL'), PERF_STOP_TIMEOUT_MS);
  await exited;
  clearTimeout(timer);
  return readRecording(file);
}

export async function benchPerf(stack, peer) {
  if (!hasPerf()) return [{ figure: 'perf of a creation', sluice: 'perf is not installed here (Debian: linux-perf)', target: '' }];
  const { sluice, peer: workflows } = creators(stack, peer);
  const dir = mkdtempSync(join(tmpdir(), 'sluice-perf-'));
  try {
    const s = await recordSide('sluice', sluice, peer.pgid, dir);
    const p = await recordSide('peer', workflows, peer.pgid, dir);
    const pct = (x) => `${x.toFixed(1)}%`;
    return [
      { figure: `workerd CPU per creation under perf (${PERF_CREATES} at ${CONCURRENCY} concurrent, 0 steps)`, sluice: `${s.msPerCreate.toFixed(2)} ms`, peer: `${p.msPerCreate.toFixed(2)} ms`, ratio: `${(s.msPerCreate / p.msPerCreate).toFixed(2)}x`, target: '' },
      { figure: 'of it, compiled code (wasm, JavaScript) / the kernel', sluice: `${pct(s.compiled)} / ${pct(s.kernel)}`, peer: `${pct(p.compiled)} / ${pct(p.kernel)}`, target: '' },
      ...PARTS.map(([what], i) => ({ figure: `of it, ${what}`, sluice: pct(s.parts[i][1]), peer: pct(p.parts[i][1]), target: '' })),
    ];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
