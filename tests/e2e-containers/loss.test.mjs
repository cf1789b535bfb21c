// End-to-end inside real containers: container loss (ADR-0001 rule 5). A check's command holds at
// a gate after leaving a file in its checkout; the test `docker kill`s the run's container in the
// middle of that command. The command step's long-poll fails, the step is retried, the Durable
// Object starts a fresh container, the retried step finds an empty disk (the agent does not know
// the workspace), checks out again inside the step and starts the command afresh, which the test
// then lets finish. The run completes with one command completion recorded.
//
// Run by `npm test` when the machine can run containers (scripts/test.sh), and by
// `npm run test:containers`.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { docker } from '../../tools/stack/index.mjs';
import { INSTALLATION_ID, startStack } from '../e2e/harness.mjs';
import {
  OWNER, checkRuns, containerAtGate, execution, gate, marker1, markers, openGate, storedLogs, waitForTerminal,
} from './helpers.mjs';

// node:test's limit: two container starts, two clones, a step retry (2 s backoff) and the waits.
const TEST_TIMEOUT_MS = 8 * 60_000;
const STACK_START_TIMEOUT_MS = 45 * 60_000;
const README = '# lost and found\n';

// Says whether the checkout still holds what an earlier attempt left, proves the checkout is
// there, leaves a file, holds at the gate, and records its completion.
const COMMAND = [
  'printf "sluice-%s=%s\\n" leftover "$(test -f left-by-attempt && echo yes || echo no)"',
  'printf "sluice-%s=%s\\n" readme "$(head -n1 README.md)"',
  'touch left-by-attempt',
  gate('loss'),
  'printf "sluice-%s=%s\\n" completed "$(hostname)"',
].join('; ');
const CONFIG = `[check]\ncommand = '''${COMMAND}'''\n`;

let stack;

before(async () => {
  stack = await startStack({ containers: true });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

test('a container killed mid-command: the retried step checks out again on a fresh disk and the run completes once', { timeout: TEST_TIMEOUT_MS }, async (t) => {
  try {
    await lostAndRepaired();
  } catch (err) {
    console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail(150) ?? '(no stack)'}\n`);
    throw err;
  }
});

async function lostAndRepaired() {
  const repo = 'lost';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': CONFIG, 'README.md': README });
  const payload = pullRequestPayload({ owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo) });
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const id = res.body.instances[0].id;

  // The first attempt's command holds at its gate, its file left in the checkout: kill the box.
  const first = await containerAtGate(stack, 'loss');
  await docker(stack.docker, ['kill', first.name]);

  // A fresh container (another Docker container, not the killed one restarted) reaches the gate.
  const second = await containerAtGate(stack, 'loss', { except: [first.id] });
  assert.notEqual(second.hostname, first.hostname);
  await openGate(stack, second.name, 'loss');

  const { steps } = await waitForTerminal(stack, id, 'complete');
  const [run] = await checkRuns(stack, repo);
  assert.equal(run.conclusion, 'success', run.output.summary);
  const summary = run.output.summary;
  // The retried attempt ran on an empty disk, checked out again (the README is there, the file the
  // killed attempt left is not), and completed once, in the new container.
  assert.equal(marker1(summary, 'leftover'), 'no', summary);
  assert.equal(marker1(summary, 'readme'), README.trim());
  assert.equal(marker1(summary, 'completed'), second.hostname);

  // One command step, retried once after the loss, completed once; the stored log holds one
  // completion.
  const commandSteps = steps.filter((s) => s.name === 'run check command');
  assert.equal(commandSteps.length, 1, JSON.stringify(steps, null, 2));
  assert.equal(commandSteps[0].state, 'done', JSON.stringify(commandSteps[0]));
  assert.equal(commandSteps[0].attempts, 2, `one failed attempt (the loss) and one that completed: ${JSON.stringify(commandSteps[0])}`);
  const logs = storedLogs(stack).filter((log) => log.includes('sluice-readme='));
  assert.equal(logs.length, 1, 'one stored command log');
  assert.deepEqual(markers(logs[0], 'completed'), [second.hostname], logs[0]);
}

// A job of steps (ADR-0015) killed after its first step: step 1 builds a file naming its
// container; step 2 marks that it began (in whichever container), holds at a gate, then reports
// what its tree holds. Retried in a fresh container, step 2 starts on the tree step 1 left,
// unpacked from its snapshot: not a clean checkout, and not what its own lost attempt began.
const STEP_TWO = `touch began-in-$(hostname); ${gate('steps')}; printf "sluice-%s=%s\\n" made-in "$(cat out/made-in)" a "$(cat out/a)" runs-in "$(hostname)" began "$(ls began-in-* | wc -l)"`;
const STEPS_CONFIG = [
  '[jobs.build]',
  'steps = [',
  "  '''mkdir -p out && hostname > out/made-in && echo one > out/a''',",
  `  '''${STEP_TWO}''',`,
  ']', '',
].join('\n');

test("a job killed after its first step resumes from the snapshot: the second step sees the first step's output", { timeout: TEST_TIMEOUT_MS }, async (t) => {
  try {
    await resumedFromSnapshot();
  } catch (err) {
    console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail(150) ?? '(no stack)'}\n`);
    throw err;
  }
});

async function resumedFromSnapshot() {
  const repo = 'resumed';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': STEPS_CONFIG, 'README.md': README });
  const payload = pullRequestPayload({ owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo) });
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const parent = res.body.instances.find((i) => i.run === 'check').id;

  const first = await containerAtGate(stack, 'steps');
  await docker(stack.docker, ['kill', first.name]);
  const second = await containerAtGate(stack, 'steps', { except: [first.id] });
  assert.notEqual(second.hostname, first.hostname);
  await openGate(stack, second.name, 'steps');

  await waitForTerminal(stack, parent, 'complete');
  const run = (await checkRuns(stack, repo)).find((r) => r.name === 'sluice/build');
  assert.equal(run?.conclusion, 'success', JSON.stringify(run?.output));
  const summary = run.output.summary;
  assert.equal(marker1(summary, 'made-in'), first.hostname, 'step 1 ran once, in the killed container');
  assert.equal(marker1(summary, 'a'), 'one', "step 1's output reached step 2");
  assert.equal(marker1(summary, 'runs-in'), second.hostname);
  assert.equal(marker1(summary, 'began'), '1', "not the lost attempt's half-begun tree");
  const unit = (await execution(stack, parent)).pipeline.jobs[0].units[0].id;
  const { steps } = await execution(stack, unit);
  const names = steps.map((s) => s.name);
  assert.ok(names.includes('snapshot after run step 1'), names.join(', '));
  assert.ok(!names.some((n) => n.startsWith('check out again')), `no run-through began again: ${names.join(', ')}`);
  assert.equal(steps.filter((s) => s.name === 'run step 1').length, 1);
}
