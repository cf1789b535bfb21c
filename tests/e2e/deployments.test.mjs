// End-to-end: deploys that GitHub shows (issue 14). Every push that Sluice deploys, supersedes or
// skips is a GitHub deployment in its environment, with statuses that follow the run, as the
// stand-in (GitHub's shapes, codes and documented `auto_inactive` rule) records them. A burst of
// pushes leaves exactly one deployment `success` (the newest commit, with the URL its command
// reported and a log link that opens) and every other `inactive` naming a newer revision; a
// failing deploy command ends `failure` with its log link.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { pushPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, TERMINAL, startStack } from './harness.mjs';

const OWNER = 'acme';
// A burst of deploys, each a clone and a ~1 s command, run one after another: 90 s is ample.
const BURST_TIMEOUT_MS = 90_000;
const TEST_TIMEOUT_MS = 4 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;
// The operator's grant: acme's main branches deploy to `production`, a production environment
// (GitHub's default for that name), where GitHub's `auto_inactive` does not retire earlier
// successes: Sluice does.
const ENVIRONMENTS = "[production]\nrepos = ['acme/*']\nbranches = ['main']\n";
// Pushes in a burst, and the gap between them: a few arrive while the first deploy runs.
const BURST = 5;
const BURST_GAP_MS = 250;
// The signed log link of an execution's command: PUBLIC_URL/logs/{instance}/{step}?exp=…&sig=…
const LOG_LINK = (url, id) => new RegExp(`^${url}/logs/${id}/[^?]+\\?exp=\\d+&sig=[0-9a-f]{64}$`);

let stack;

before(async () => {
  stack = await startStack({ vars: { ENVIRONMENTS } });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

function deploymentTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail(120) ?? ''}\n`);
      throw err;
    }
  });
}

function deployConfig(command) {
  return ['[deploy]', 'branch = "main"', `command = ${JSON.stringify(command)}`, 'environment = "production"', ''].join('\n');
}

async function push(repo, sha, before) {
  const payload = pushPayload({ owner: OWNER, repo, after: sha, before, ref: 'refs/heads/main', installationId: INSTALLATION_ID });
  const res = await stack.sendWebhook('push', payload);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  // A push to the default branch also records its schedules (a `schedules` instance).
  const deploys = res.body.instances.filter((i) => i.run === 'deploy');
  assert.equal(deploys.length, 1, JSON.stringify(res.body));
  return deploys[0].id;
}

async function waitAllTerminal(ids) {
  const out = new Map();
  await stack.waitFor(async () => {
    for (const id of ids) {
      if (out.has(id)) continue;
      const res = await stack.api(`/v1/executions/${id}`);
      assert.equal(res.status, 200, JSON.stringify(res.body));
      if (TERMINAL.has(res.body.execution.status)) out.set(id, res.body.execution);
    }
    return out.size === ids.length;
  }, { timeoutMs: BURST_TIMEOUT_MS, intervalMs: 250, message: 'every deploy to finish' });
  return ids.map((id) => out.get(id));
}

async function deploymentsOf(repo) {
  const { deployments } = await stack.standinGet(`/_standin/deployments?repo=${OWNER}/${repo}`);
  return deployments;
}

const states = (d) => d.statuses.map((s) => s.state);

deploymentTest('a burst of pushes: one deployment success (the newest commit), every other inactive naming a newer revision', async () => {
  const repo = 'shown';
  const command = 'echo deploying $SLUICE_SHA; sleep 1; echo SLUICE_ENVIRONMENT_URL=https://shown-$SLUICE_SHA.example.com/';
  const shas = [];
  const ids = [];
  let prev;
  for (let i = 0; i < BURST; i++) {
    const sha = stack.commit(OWNER, repo, { '.sluice.toml': deployConfig(command), 'VERSION': `${i}\n` }, { message: `v${i}` });
    ids.push(await push(repo, sha, prev));
    shas.push(sha);
    prev = sha;
    await new Promise((r) => setTimeout(r, BURST_GAP_MS));
  }
  const ends = await waitAllTerminal(ids);
  const newest = shas.at(-1);
  assert.equal(ends.at(-1).status, 'complete', JSON.stringify(ends.at(-1)));

  const deployments = await deploymentsOf(repo);
  // One deployment per execution, of its own commit, in the environment, as Sluice asked for it.
  assert.equal(deployments.length, BURST, JSON.stringify(deployments.map((d) => [d.sha, states(d)])));
  for (const [i, id] of ids.entries()) {
    const mine = deployments.filter((d) => d.payload?.sluice?.execution === id);
    assert.equal(mine.length, 1, `one deployment of ${id}`);
    assert.deepEqual(
      [mine[0].sha, mine[0].environment, mine[0].task, mine[0].production_environment, mine[0].transient_environment],
      [shas[i], 'production', 'deploy', true, false],
    );
  }
  const calls = (await stack.standinGet(`/_standin/calls?method=post&path_prefix=${encodeURIComponent(`/repos/${OWNER}/${repo}/deployments`)}`)).calls;
  const creates = calls.filter((c) => c.path === `/repos/${OWNER}/${repo}/deployments`);
  assert.equal(creates.length, BURST, 'created once each');
  assert.ok(creates.every((c) => c.status === 201 && c.body.auto_merge === false && c.body.required_contexts.length === 0));
  assert.ok(calls.every((c) => c.status === 201), JSON.stringify(calls.filter((c) => c.status !== 201)));

  const successes = deployments.filter((d) => d.statuses.at(-1)?.state === 'success');
  assert.equal(successes.length, 1, JSON.stringify(deployments.map((d) => [d.sha, states(d)])));
  const [winner] = successes;
  assert.equal(winner.sha, newest, 'the environment runs the newest commit');
  assert.deepEqual(states(winner), ['queued', 'in_progress', 'success']);
  const success = winner.statuses.at(-1);
  assert.equal(success.environment_url, `https://shown-${newest}.example.com/`, 'the URL the command reported');
  assert.match(success.log_url, LOG_LINK(stack.url, ids.at(-1)));
  const log = await fetch(success.log_url);
  assert.equal(log.status, 200, 'the log link opens without the admin token');
  assert.ok((await log.text()).includes(`deploying ${newest}`));

  for (const d of deployments.filter((x) => x !== winner)) {
    const i = shas.indexOf(d.sha);
    const last = d.statuses.at(-1);
    assert.equal(last.state, 'inactive', `${d.sha}: ${JSON.stringify(states(d))}`);
    assert.ok(!last.auto_inactive, 'Sluice retired it, not GitHub (a production environment)');
    assert.ok(shas.slice(i + 1).some((s) => last.description.includes(s)), `names a newer revision: ${last.description}`);
    assert.equal(states(d)[0], 'queued');
    const ran = states(d).includes('in_progress');
    assert.deepEqual(states(d), ran ? ['queued', 'in_progress', 'success', 'inactive'] : ['queued', 'inactive'], d.sha);
  }
  assert.ok(deployments.some((d) => !states(d).includes('in_progress')), 'a burst does not deploy every commit');
});

deploymentTest('a failing deploy command ends failure with its log link', async () => {
  const repo = 'broken';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': deployConfig('echo about to fail; exit 7') });
  const id = await push(repo, sha);
  const [end] = await waitAllTerminal([id]);
  assert.equal(end.status, 'complete', JSON.stringify(end));

  const [d, ...others] = await deploymentsOf(repo);
  assert.equal(others.length, 0);
  assert.equal(d.sha, sha);
  assert.deepEqual(states(d), ['queued', 'in_progress', 'failure']);
  const failure = d.statuses.at(-1);
  assert.match(failure.description, /exited with code 7/);
  assert.equal(failure.environment_url, '', 'only a success has one');
  assert.match(failure.log_url, LOG_LINK(stack.url, id));
  const log = await fetch(failure.log_url);
  assert.equal(log.status, 200);
  assert.ok((await log.text()).includes('about to fail'));
  const { check_runs: checks } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  assert.equal(checks.find((c) => c.name === 'sluice/deploy')?.conclusion, 'failure');
});
