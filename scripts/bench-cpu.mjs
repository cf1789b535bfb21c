// CPU read from /proc for the bench's figures (scripts/bench-creation.mjs, whose rounds the
// scale section runs too, bench-perf.mjs and bench-ab.mjs): each workerd and node process's
// CPU seconds, and a wait until the stacks have finished what a round set going. Linux only.

import { readFileSync, readdirSync } from 'node:fs';

// Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ, 100 on Linux).
const TICKS_PER_S = 100;
// How often settle() reads the processes' CPU: a tenth of a second is 10 ticks, so an idle
// interval reads as at most a tick or two of timers.
const SETTLE_SAMPLE_MS = 100;
// Consecutive idle samples that count as settled: a third of a second without work, longer
// than any gap between one instance's requests (its object's, its D1 batch's) on a busy stack.
const SETTLE_QUIET_SAMPLES = 3;
// CPU an idle sample may show, in seconds per sample: wrangler's and workerd's own timers.
const SETTLE_IDLE_CPU_S = 0.02;
// Bound of the wait: a round of 200 creations settles in a second or two; a stack that is
// still busy after this is reported, not waited on.
const SETTLE_TIMEOUT_MS = 60_000;

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

const workerdCpu = () => [...cpuByProcess().values()].filter((p) => p.cmd.includes('workerd')).reduce((sum, p) => sum + p.s, 0);

// Every workerd on the machine counts: the bench needs the machine to itself (a test run's
// workerd beside it would hold settle() to its bound and add to the Sluice stack's figures).
// Waits until every workerd process has been idle for SETTLE_QUIET_SAMPLES samples in a row:
// the work a round's answers left behind is done. A Workflows `create` answers before its
// engine object has run (local Workflows hands `init` to waitUntil), so a round timed to its
// last answer leaves the peer's instances to run into whatever is measured next. Returns the
// ms waited, and whether the stacks settled within SETTLE_TIMEOUT_MS.
export async function settle() {
  const t0 = Date.now();
  let last = workerdCpu();
  let quiet = 0;
  while (quiet < SETTLE_QUIET_SAMPLES) {
    if (Date.now() - t0 > SETTLE_TIMEOUT_MS) return { waitedMs: Date.now() - t0, settled: false };
    await new Promise((resolve) => setTimeout(resolve, SETTLE_SAMPLE_MS));
    const now = workerdCpu();
    quiet = now - last <= SETTLE_IDLE_CPU_S ? quiet + 1 : 0;
    last = now;
  }
  return { waitedMs: Date.now() - t0, settled: true };
}
