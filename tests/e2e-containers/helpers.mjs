// Shared pieces of the end-to-end layer inside real containers (docs/containers-local.md): the
// run waits, the stored state, and (from tools/stack/sandbox-gates.mjs, shared with the bench) a
// command that holds at a gate until the test opens it and a request to a container's agent
// through its sidecar, the way the runtime reaches it.
//
// Not a test file (node --test picks *.test.mjs only).

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { CONTAINER_RUN_TIMEOUT_MS as RUN_TIMEOUT_MS, INSTALLATION_ID, TERMINAL } from '../../tools/stack/index.mjs';

export { RUN_TIMEOUT_MS };
export {
  CONTAINER_GONE_TIMEOUT_MS, GATE_REACHED_TIMEOUT_MS, GATE_WAIT_S, SIDECAR_INGRESS_PORT, TUNNEL_TIMEOUT_MS,
  containerAtGate, gate, ingressPort, openGate, runningSandboxes, tunnelled, tunnelledAt, waitContainerGone,
} from '../../tools/stack/index.mjs';

export const OWNER = 'acme';
export { TERMINAL };
// The stored state (D1, Durable Objects, R2) of one stack holds a few hundred files; bound the walk.
const STATE_FILES_MAX = 10_000;

export async function execution(stack, id) {
  const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

// Waits for any terminal status, then asserts `expected`, so an errored run fails at once with
// its error instead of after the timeout.
export async function waitForTerminal(stack, id, expected, timeoutMs = RUN_TIMEOUT_MS) {
  const done = await stack.waitFor(async () => {
    const body = await execution(stack, id);
    return TERMINAL.has(body.execution?.status) ? body : null;
  }, { timeoutMs, message: `execution ${id} to finish` });
  if (expected) assert.equal(done.execution.status, expected, JSON.stringify(done, null, 2));
  return done;
}

export async function checkRuns(stack, repo) {
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  return runs;
}

// `sluice-<name>=<value>` lines a command printed, in order.
export function markers(text, name) {
  return [...text.matchAll(new RegExp(`^sluice-${name}=(.*)$`, 'gm'))].map((m) => m[1].trim());
}

export function marker1(text, name) {
  const found = markers(text, name);
  assert.equal(found.length, 1, `one sluice-${name}= line in:\n${text}`);
  return found[0];
}

// Every file the stack stored (D1, Durable Object storage, R2 objects), with its bytes.
export function storedFiles(stack) {
  const out = [];
  const walk = (dir) => {
    for (const entry of readdirSync(dir)) {
      const path = join(dir, entry);
      if (statSync(path).isDirectory()) walk(path);
      else out.push({ path, bytes: readFileSync(path) });
      if (out.length > STATE_FILES_MAX) throw new Error(`more than ${STATE_FILES_MAX} files under ${dir}`);
    }
  };
  walk(join(stack.tmpDir, 'state'));
  return out;
}

// The R2 objects of the stack (`state/v3/r2/<bucket>/blobs/`): the stored command logs.
export function storedLogs(stack) {
  return storedFiles(stack)
    .filter((f) => f.path.includes(`${join('v3', 'r2')}`) && f.path.includes(`${join('blobs', '')}`))
    .map((f) => f.bytes.toString('utf8'));
}

// A test that prints the Worker's log tail when it fails (`stack()` is the file's running stack).
export function loggedTest(stack, timeoutMs, name, fn) {
  test(name, { timeout: timeoutMs }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack()?.logTail() ?? '(no stack)'}\n`);
      throw err;
    }
  });
}

// Opens a pull request of `sha` and returns its check's instance id (its preview, if any, aside).
export async function openPullRequest(stack, repo, sha) {
  const payload = pullRequestPayload({
    owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo),
  });
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const checks = res.body.instances.filter((i) => i.run === 'check');
  assert.equal(checks.length, 1, JSON.stringify(res.body));
  return checks[0].id;
}
