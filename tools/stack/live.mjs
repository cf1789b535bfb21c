// The processes and temp dirs of stacks not stopped yet, killed and removed when this process
// exits or is interrupted (the test runner sends SIGTERM/SIGINT on cancel), so a dead test or
// script never leaves wrangler or the agent behind.

import { rmSync } from 'node:fs';
import { killGroup } from './process.mjs';

// Process groups still alive; killed when the test process exits or is interrupted (the test
// runner sends SIGTERM/SIGINT on cancel), so a dead test never leaves wrangler or the agent behind.
export const liveGroups = new Set();

// Temp dirs of stacks not stopped yet; removed (best effort) if the process dies first.
export const liveTmpDirs = new Set();

function killLiveGroups() {
  for (const child of liveGroups) killGroup(child, 'SIGKILL');
  if (process.env.SLUICE_E2E_KEEP_TMP) return;
  for (const dir of liveTmpDirs) {
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch {
      // A child killed a moment ago may still be writing; leaving a temp dir behind is harmless.
    }
  }
}

process.on('exit', killLiveGroups);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    killLiveGroups();
    // Only re-raise (default action: terminate) when nobody else, e.g. node:test, handles it.
    if (process.listenerCount(signal) === 0) process.kill(process.pid, signal);
  });
}
