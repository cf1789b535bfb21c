// End-to-end: the Cloudflare Containers sandbox backend (SANDBOX_BACKEND=container) under
// `wrangler dev`, where there is no Docker and so no container. The SandboxContainer Durable
// Object is bound and answers, the run retries its command step, then reports an infrastructure
// fault: the check run concludes `cancelled` (not a red test failure) naming the cause.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, startStack } from './harness.mjs';

// Two retries of the command step (2 s, then 4 s backoff) and the reporting around them.
const RUN_TIMEOUT_MS = 60_000;
const TEST_TIMEOUT_MS = 3 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;

let stack;

before(async () => {
  stack = await startStack({ vars: { SANDBOX_BACKEND: 'container' } });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

test('without a container runtime the check reports an infrastructure fault, not a failure', { timeout: TEST_TIMEOUT_MS }, async (t) => {
  try {
    const sha = stack.commit('acme', 'boxed', { '.sluice.toml': '[check]\ncommand = "true"\n' });
    const payload = pullRequestPayload({ owner: 'acme', repo: 'boxed', sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl('acme', 'boxed') });
    const res = await stack.sendWebhook('pull_request', payload);
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const id = res.body.instances[0].id;
    const done = await stack.waitFor(async () => {
      const { body } = await stack.api(`/v1/executions/${id}`);
      return ['complete', 'errored', 'skipped'].includes(body.execution?.status) ? body : null;
    }, { timeoutMs: RUN_TIMEOUT_MS, message: 'the check to end' });
    assert.equal(done.execution.status, 'errored', JSON.stringify(done.execution));
    assert.equal(done.execution.error_tag, 'RetriesExhausted');
    assert.match(done.execution.error_message, /containers_unavailable/);
    const command = done.steps.find((s) => s.name === 'run check command');
    assert.equal(command.attempts, 3, 'the command step was retried');

    const { check_runs: runs } = await stack.standinGet('/_standin/check-runs?repo=acme/boxed');
    assert.equal(runs.length, 1);
    assert.equal(runs[0].conclusion, 'cancelled');
    assert.match(runs[0].output.summary, /containers_unavailable/);
  } catch (err) {
    console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail() ?? ''}\n`);
    throw err;
  }
});
