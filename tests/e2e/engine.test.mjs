// End-to-end: the durable engine under `wrangler dev`, through the probe run (an operator's
// diagnostic run created over the admin API). A run that sleeps, waits for an event sent over
// HTTP and completes; an event sent before its wait; pause, resume and terminate; and a crash:
// the whole `wrangler dev` process group is killed with SIGKILL in the middle of a multi-step run,
// started again on the same local state, and the instance completes with every completed step
// executed exactly once (side effects counted outside the engine).

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { startStack } from './harness.mjs';

// A probe with a 1 s sleep finishes in about a second; 60 s allows a loaded 2-core CI machine.
const RUN_TIMEOUT_MS = 60_000;
// After a kill -9 the instance's watchdog alarm (15 s) or the sweep resumes it; 90 s allows both.
const RESUME_TIMEOUT_MS = 90_000;
const TEST_TIMEOUT_MS = 4 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;
// The crash probe: enough steps, each long enough, that the kill lands mid-run and mid-step.
const CRASH_STEPS = 8;
const CRASH_STEP_DELAY_MS = 400;
// How often the crash test also drives the cron sweep while it waits.
const SWEEP_EVERY_MS = 5_000;

let stack;
let effects;

before(async () => {
  stack = await startStack();
  effects = await startEffects();
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
  await effects?.close();
});

function engineTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail() ?? ''}\n`);
      throw err;
    }
  });
}

// Records every side effect a probe step reports, outside the engine.
function startEffects() {
  const seen = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      try {
        seen.push({ ...JSON.parse(body), at: Date.now() });
      } catch {
        // Not from a probe; ignored.
      }
      res.writeHead(204).end();
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({
      url: `http://127.0.0.1:${server.address().port}/effect`,
      seen,
      of: (instance) => seen.filter((e) => e.instance === instance),
      close: () => new Promise((r) => server.close(r)),
    }));
  });
}

async function createProbe(key, input) {
  const res = await stack.api('/v1/executions', { method: 'POST', body: { key, run: 'probe', input } });
  assert.equal(res.status, 201, JSON.stringify(res.body));
  return res.body.id;
}

async function execution(id) {
  const res = await stack.api(`/v1/executions/${id}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body;
}

async function waitStatus(id, statuses, timeoutMs = RUN_TIMEOUT_MS, extra = () => true) {
  let last;
  await stack.waitFor(async () => {
    last = await execution(id);
    return statuses.includes(last.execution.status) && extra(last);
  }, { timeoutMs, message: `${id} to reach ${statuses.join('|')}` }).catch((err) => {
    err.message += `\nlast: ${JSON.stringify(last)}`;
    throw err;
  });
  return last;
}

engineTest('a run sleeps, waits for an event sent over HTTP, and completes', async () => {
  const id = await createProbe('probe:sleep-event', { steps: 3, sleep_ms: 1000, wait_event: 'approve', event_timeout_ms: 120000 });
  const waiting = await waitStatus(id, ['waiting'], RUN_TIMEOUT_MS, (e) => (e.execution.reason ?? '').includes('approve'));
  const nap = waiting.steps.find((s) => s.name === 'nap');
  assert.equal(nap.state, 'done', 'the sleep ended before the wait began');
  assert.ok(nap.finished_ms >= nap.started_ms + 1000, 'slept at least a second');

  const sent = await stack.api(`/v1/executions/${id}/events/approve`, { method: 'POST', body: { by: 'ana' } });
  assert.equal(sent.status, 202, JSON.stringify(sent.body));
  const done = await waitStatus(id, ['complete']);
  const output = JSON.parse(done.execution.output_json);
  assert.deepEqual(output.event, { by: 'ana' });
  assert.deepEqual(done.steps.map((s) => s.name), ['step', 'step#2', 'step#3', 'nap', 'after sleep', 'wait', 'after event']);
  assert.ok(done.steps.every((s) => s.state === 'done'));
  // One journal write per step; a sleep or an event wait writes when it begins and when it ends.
  const steps = done.steps.filter((s) => s.kind === 'step').length;
  const waits = done.steps.length - steps;
  assert.equal(done.execution.journal_writes, steps + 2 * waits);
});

engineTest('a batch of creates is indexed in one D1 batch; a caller cannot skip the index', async () => {
  const keys = [1, 2, 3, 4, 5].map((i) => `probe:batch-${i}`);
  const res = await stack.api('/v1/executions', { method: 'POST', body: keys.map((key) => ({ key, run: 'probe', input: { steps: 2 } })) });
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.deepEqual(res.body.instances.map((i) => i.created), [true, true, true, true, true]);
  const batched = await Promise.all(res.body.instances.map((i) => waitStatus(i.id, ['complete'])));
  const alone = await waitStatus(await createProbe('probe:batch-alone', { steps: 2 }), ['complete']);
  // With a forged claim that its row is written: its first pass still writes it (ADR-0018).
  const forged = await stack.api('/v1/executions', { method: 'POST', body: { key: 'probe:batch-forged', run: 'probe', input: { steps: 2 }, indexed: true } });
  assert.equal(forged.status, 201, JSON.stringify(forged.body));
  const listed = await waitStatus(forged.body.id, ['complete']);
  assert.equal(listed.execution.index_round_trips, alone.execution.index_round_trips, 'the forged claim was ignored');
  for (const b of batched) {
    assert.deepEqual(b.steps.map((s) => s.name), ['step', 'step#2']);
    // The batch wrote the row: the object's pass made no D1 round trip for it.
    assert.equal(b.execution.index_round_trips, alone.execution.index_round_trips - 1, JSON.stringify(b.execution));
  }
  // A second batch of the same keys creates nothing.
  const again = await stack.api('/v1/executions', { method: 'POST', body: keys.map((key) => ({ key, run: 'probe', input: { steps: 2 } })) });
  assert.deepEqual(again.body.instances.map((i) => i.created), [false, false, false, false, false]);
  // One key twice in a batch is refused whole: nothing of it is created.
  const twice = await stack.api('/v1/executions', { method: 'POST', body: ['probe:batch-twice', 'probe:batch-other', 'probe:batch-twice'].map((key, n) => ({ key, run: 'probe', input: { steps: n } })) });
  assert.equal(twice.status, 422, JSON.stringify(twice.body));
  assert.match(JSON.stringify(twice.body), /repeated_key/);
  const other = await stack.api(`/v1/executions?run=probe&limit=100`);
  assert.ok(JSON.stringify(other.body).includes('probe:batch-1'), 'the list names keys');
  assert.ok(!JSON.stringify(other.body).includes('probe:batch-other'), 'no item of a refused batch was created');
  // An item with its own limits keeps them (its object writes its own row: the row cannot carry them).
  const limited = await stack.api('/v1/executions', { method: 'POST', body: [{ key: 'probe:batch-limited', run: 'probe', input: { steps: 3 }, max_steps: 2 }] });
  assert.equal(limited.status, 200, JSON.stringify(limited.body));
  const over = await waitStatus(limited.body.instances[0].id, ['errored']);
  assert.equal(over.execution.error_tag, 'StepLimitExceeded', JSON.stringify(over.execution));
});

// ADR-0018: a single create's object leaves the row to its first pass and
// answers once it is in D1, so what it answered is listed at once.
const ROW_BODY_MS = 10_000;

engineTest('a single create is answered once its index row is in D1, not after its pass', async () => {
  // A body of ROW_BODY_MS: the row is written before it starts, the answer does not wait for it.
  const slow = await stack.api('/v1/executions', { method: 'POST', body: { key: 'probe:row-slow', run: 'probe', input: { steps: 1, step_delay_ms: ROW_BODY_MS } } });
  assert.equal(slow.status, 201, JSON.stringify(slow.body));
  const running = await stack.api(`/v1/executions/${slow.body.id}`);
  assert.equal(running.status, 200, 'listed as soon as the create was answered');
  assert.equal(running.body.execution.status, 'running', JSON.stringify(running.body.execution));
  // No step body: the row rides the pass's one mirror batch, and the answer waits for it.
  const zero = await stack.api('/v1/executions', { method: 'POST', body: { key: 'probe:row-zero', run: 'probe', input: { steps: 0 } } });
  assert.equal(zero.status, 201, JSON.stringify(zero.body));
  const done = await stack.api(`/v1/executions/${zero.body.id}`);
  assert.equal(done.status, 200, JSON.stringify(done.body));
  assert.equal(done.body.execution.status, 'complete', 'its whole pass reached D1 with the row');
  assert.equal(done.body.execution.index_round_trips, 1, 'creation and pass in one D1 round trip');
  const again = await stack.api('/v1/executions', { method: 'POST', body: { key: 'probe:row-zero', run: 'probe', input: { steps: 0 } } });
  assert.deepEqual([again.status, again.body.created], [200, false]);
  const ended = await stack.api(`/v1/executions/${slow.body.id}/terminate`, { method: 'POST' });
  assert.ok([200, 202].includes(ended.status), JSON.stringify(ended.body));
});

engineTest('inline steps are journaled together and read back as steps', async () => {
  const id = await createProbe('probe:inline', { steps: 50, inline: true, sleep_ms: 200 });
  const done = await waitStatus(id, ['complete']);
  const steps = done.steps.filter((s) => s.name === 'step' || s.name.startsWith('step#'));
  assert.equal(steps.length, 50);
  assert.ok(steps.every((s) => s.state === 'done' && s.attempts === 1), JSON.stringify(steps.slice(0, 3)));
  assert.deepEqual(done.steps.slice(50).map((s) => s.name), ['nap', 'after sleep']);
  // One entry per step, written in one statement before the sleep: the sleep's pass replayed them.
  assert.equal(done.execution.journal_writes, 50 + 2 + 1);
  const refused = await createProbe('probe:inline-effects', { steps: 1, inline: true, effects_url: 'http://127.0.0.1:9/x' });
  const failed = await waitStatus(refused, ['errored']);
  assert.match(failed.execution.error_message, /inline steps have no delay and report no effect/);
});

engineTest('an event sent before the wait is kept for it', async () => {
  const id = await createProbe('probe:early-event', { steps: 0, sleep_ms: 1500, wait_event: 'go' });
  const sent = await stack.api(`/v1/executions/${id}/events/go`, { method: 'POST', body: { n: 1 } });
  assert.equal(sent.status, 202, JSON.stringify(sent.body));
  const done = await waitStatus(id, ['complete']);
  assert.deepEqual(JSON.parse(done.execution.output_json).event, { n: 1 });
});

engineTest('pause, resume and terminate over the API', async () => {
  const id = await createProbe('probe:commands', { steps: 1, wait_event: 'never' });
  await waitStatus(id, ['waiting'], RUN_TIMEOUT_MS, (e) => (e.execution.reason ?? '').includes('never'));
  assert.equal((await stack.api(`/v1/executions/${id}/pause`, { method: 'POST' })).status, 200);
  await waitStatus(id, ['paused']);
  assert.equal((await stack.api(`/v1/executions/${id}/pause`, { method: 'POST' })).status, 409, 'already paused');
  assert.equal((await stack.api(`/v1/executions/${id}/resume`, { method: 'POST' })).status, 200);
  await waitStatus(id, ['waiting']);
  assert.equal((await stack.api(`/v1/executions/${id}/terminate`, { method: 'POST' })).status, 200);
  const ended = await waitStatus(id, ['terminated']);
  assert.equal(ended.execution.error_tag, 'Terminated');
  const late = await stack.api(`/v1/executions/${id}/events/never`, { method: 'POST', body: {} });
  assert.equal(late.status, 409, 'a finished instance takes no events');
  assert.equal((await stack.api('/v1/executions/no-such-instance/pause', { method: 'POST' })).status, 404);
});

engineTest('a kill -9 mid-run: the instance completes and no completed step runs twice', async () => {
  const id = await createProbe('probe:crash', { steps: CRASH_STEPS, step_delay_ms: CRASH_STEP_DELAY_MS, effects_url: effects.url });
  await stack.waitFor(() => effects.of(id).length >= 3, { timeoutMs: RUN_TIMEOUT_MS, message: 'three steps to start' });
  await stack.killWorker();
  const beforeKill = effects.of(id).map((e) => e.step);
  const inFlight = Math.max(...beforeKill);
  assert.ok(inFlight < CRASH_STEPS - 1, 'killed before the last step');

  await stack.restartWorker();
  let lastSweep = 0;
  const done = await waitStatus(id, ['complete', 'errored'], RESUME_TIMEOUT_MS, () => {
    if (Date.now() - lastSweep > SWEEP_EVERY_MS) {
      lastSweep = Date.now();
      stack.scheduled().catch(() => {});
    }
    return true;
  });
  assert.equal(done.execution.status, 'complete', JSON.stringify(done.execution));

  const counts = new Map();
  for (const e of effects.of(id)) counts.set(e.step, (counts.get(e.step) ?? 0) + 1);
  for (let step = 0; step < CRASH_STEPS; step++) {
    const n = counts.get(step) ?? 0;
    if (step === inFlight) {
      assert.ok(n >= 1 && n <= 2, `the step in flight at the kill ran ${n} times (once, or again after the crash)`);
    } else {
      assert.equal(n, 1, `step ${step} ran ${n} times; a completed step must never run again`);
    }
  }
  assert.ok(done.execution.passes >= 2, 'the instance was resumed by a new pass');
});
