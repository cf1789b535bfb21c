// CPU read from /proc for the bench's figures (scripts/bench-creation.mjs, bench-perf.mjs and
// bench-ab.mjs): each workerd and node process's
// CPU seconds, a wait until the stacks have finished what a round set going, and one until
// they have let go of the objects earlier rounds left open. Linux only.

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

// A Sluice workerd holding more open files than this waits for its idle objects to be evicted
// before a round: each Durable Object with SQLite storage keeps three open (its database, WAL
// and shared memory files). One stack created back to back at 50 concurrent reached about 2,770
// open objects (8,470 open files) in two of four scratch runs, and its SQLite then failed
// creates with SQLITE_NOMEM (500); in the other two the runtime began evicting idle objects at
// about 2,000 and levelled at 6,600 open files (2026-12-07). 3,000 is about 1,000 objects. The
// Workflows peer's workerd is left out: it never evicts its engine objects within a run (none
// of 1,000 closed in 80 s idle), which is why the peer's instances per run are bounded instead
// (bench-creation.mjs).
const OPEN_FILES_MAX = 3_000;
// Bound of that wait: all of a Sluice stack's idle objects were gone within one 25 s pause
// (2026-12-07); a workerd still over the bound after this is reported, not waited on.
const EVICTION_WAIT_MS_MAX = 60_000;
const EVICTION_SAMPLE_MS = 500;

// The most open files any workerd outside process group `skipPgid` holds.
function mostOpenFiles(skipPgid) {
  let most = 0;
  for (const [pid, p] of cpuByProcess()) {
    if (!p.cmd.includes('workerd') || p.pgrp === skipPgid) continue;
    try {
      most = Math.max(most, readdirSync(`/proc/${pid}/fd`).length);
    } catch {
      // The process ended meanwhile.
    }
  }
  return most;
}

// Waits until no workerd outside process group `skipPgid` (the peer's) holds more than
// OPEN_FILES_MAX open files: a Sluice stack's objects of earlier rounds are evicted once idle, so
// a round starts with at most about a thousand of them open. Returns the ms waited, whether it
// got there within EVICTION_WAIT_MS_MAX, and the most open files it last read.
export async function awaitIdleObjectsEvicted(skipPgid) {
  const t0 = Date.now();
  let [openFiles, waitedMs] = [mostOpenFiles(skipPgid), 0];
  while (openFiles > OPEN_FILES_MAX) {
    if (waitedMs > EVICTION_WAIT_MS_MAX) return { waitedMs, evicted: false, openFiles };
    await new Promise((resolve) => setTimeout(resolve, EVICTION_SAMPLE_MS));
    [openFiles, waitedMs] = [mostOpenFiles(skipPgid), Date.now() - t0];
  }
  return { waitedMs, evicted: true, openFiles };
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
