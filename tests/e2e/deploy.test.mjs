// End-to-end: serialized deploys (ADR-0004 with the queue policy). Bursts of signed pushes to one
// branch whose deploy command records its start and end: no two deploys overlap, the last deploy
// is the newest commit, every other push ends as a neutral `sluice/deploy` skip naming the newer
// revision with a signed notification, the configured secret reaches the command but never a log
// or a summary, and an operator's skip is silent.

import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { pushPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, TERMINAL, startStack } from './harness.mjs';

const OWNER = 'acme';
const AUTO_REASONS = new Set(['superseded', 'not_current', 'queued_timeout', 'confirmation_timeout']);
// A burst of deploys, each a clone and a ~1.5 s command, run one after another: 90 s is ample.
const BURST_TIMEOUT_MS = 90_000;
const TEST_TIMEOUT_MS = 4 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;
const NOTIFY_SECRET = 'notify-secret-for-tests';
const DEPLOY_TOKEN = 'deploy-token-0123456789';
// The operator's grant: acme's main branches deploy to production, which exports DEPLOY_TOKEN.
// TOML literal strings ('...'): an env file cannot carry a double quote.
const ENVIRONMENTS = "[production]\nrepos = ['acme/*']\nbranches = ['main']\nsecrets = ['DEPLOY_TOKEN']\n";
// Pushes in a burst, and the gap between them: a few arrive while the first deploy runs.
const BURST = 6;
const BURST_GAP_MS = 250;

let stack;
let notifications;

before(async () => {
  notifications = await startNotifications();
  stack = await startStack({ vars: { NOTIFY_URL: notifications.url, NOTIFY_SECRET, DEPLOY_TOKEN, ENVIRONMENTS } });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
  await notifications?.close();
});

function deployTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail(120) ?? ''}\n`);
      throw err;
    }
  });
}

// Receives notifications and checks their signature.
function startNotifications() {
  const seen = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      const want = `sha256=${createHmac('sha256', NOTIFY_SECRET).update(body).digest('hex')}`;
      seen.push({ signed: req.headers['x-sluice-signature-256'] === want, body: JSON.parse(body) });
      res.writeHead(204).end();
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({
      url: `http://127.0.0.1:${server.address().port}/hook`,
      seen,
      close: () => new Promise((r) => server.close(r)),
    }));
  });
}

function deployConfig(logFile, sleepS) {
  return [
    '[deploy]',
    'branch = "main"',
    // Records start and end with the commit and the time; prints the secret so the test can see
    // it is scrubbed from what Sluice stores.
    `command = "echo start $SLUICE_SHA $(date +%s%N) >> ${logFile}; echo token=$DEPLOY_TOKEN; sleep ${sleepS}; echo end $SLUICE_SHA $(date +%s%N) >> ${logFile}"`,
    'environment = "production"',
    '',
  ].join('\n');
}

async function push(repo, sha, before, branch = 'main') {
  const payload = pushPayload({
    owner: OWNER, repo, after: sha, before, ref: `refs/heads/${branch}`, installationId: INSTALLATION_ID,
    // Ignored by Sluice (it derives the URL from the repository); pointing it elsewhere proves so.
    cloneUrl: 'http://127.0.0.1:9/elsewhere.git',
  });
  const res = await stack.sendWebhook('push', payload);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  // A push to the default branch also records its schedules (a `schedules` instance).
  const deploys = res.body.instances.filter((i) => i.run === 'deploy');
  assert.equal(deploys.length, 1, JSON.stringify(res.body));
  return deploys[0].id;
}

async function execution(id) {
  const res = await stack.api(`/v1/executions/${id}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.execution;
}

async function waitAllTerminal(ids) {
  const out = new Map();
  await stack.waitFor(async () => {
    for (const id of ids) {
      if (out.has(id)) continue;
      const e = await execution(id);
      if (TERMINAL.has(e.status)) out.set(id, e);
    }
    return out.size === ids.length;
  }, { timeoutMs: BURST_TIMEOUT_MS, intervalMs: 250, message: 'every deploy of the burst to finish' });
  return ids.map((id) => out.get(id));
}

function readDeployLog(file) {
  const lines = readFileSync(file, 'utf8').trim().split('\n').map((l) => l.split(' '));
  const runs = [];
  for (const [kind, sha, ns] of lines) {
    if (kind === 'start') runs.push({ sha, start: BigInt(ns) });
    else runs.find((r) => r.sha === sha && r.end === undefined).end = BigInt(ns);
  }
  return runs;
}

deployTest('a burst of pushes: never two deploys at once, the newest commit wins, the rest skip neutral', async () => {
  const repo = 'svc';
  const logFile = stack.sharedFile('deploys.log');
  const shas = [];
  const ids = [];
  let prev;
  for (let i = 0; i < BURST; i++) {
    const sha = stack.commit(OWNER, repo, { '.sluice.toml': deployConfig(logFile, 1.5), 'VERSION': `${i}\n` }, { message: `v${i}` });
    ids.push(await push(repo, sha, prev));
    shas.push(sha);
    prev = sha;
    await new Promise((r) => setTimeout(r, BURST_GAP_MS));
  }
  const ends = await waitAllTerminal(ids);
  const newest = shas.at(-1);

  const runs = readDeployLog(logFile);
  assert.ok(runs.length >= 1, 'something deployed');
  for (let i = 1; i < runs.length; i++) {
    assert.ok(runs[i].start > runs[i - 1].end, `deploy ${runs[i].sha} started before ${runs[i - 1].sha} ended`);
  }
  assert.equal(runs.at(-1).sha, newest, 'production ends on the newest commit');
  assert.ok(runs.length < BURST, `a burst must not deploy every commit (${runs.length} of ${BURST})`);

  const deployed = new Set(runs.map((r) => r.sha));
  const { check_runs: checks } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  for (const [i, e] of ends.entries()) {
    const check = checks.find((c) => c.head_sha === shas[i] && c.name === 'sluice/deploy');
    assert.ok(check, `a sluice/deploy check run for ${shas[i]}`);
    assert.equal(check.status, 'completed');
    if (deployed.has(shas[i])) {
      assert.equal(e.status, 'complete', JSON.stringify(e));
      assert.equal(check.conclusion, 'success');
      assert.ok(check.output.summary.includes('token=***'), `the secret is scrubbed: ${check.output.summary}`);
      assert.ok(!check.output.summary.includes(DEPLOY_TOKEN));
    } else {
      assert.equal(e.status, 'skipped', JSON.stringify(e));
      assert.ok(AUTO_REASONS.has(e.reason), `skip reason ${e.reason}`);
      assert.equal(e.error_tag, 'RunSkipped');
      assert.equal(check.conclusion, 'neutral');
      const newer = shas.slice(i + 1);
      assert.ok(newer.some((s) => check.output.summary.includes(s)), `the skip names a newer revision: ${check.output.summary}`);
      const note = notifications.seen.find((n) => n.body.execution_id === e.id);
      assert.ok(note, `a notification for ${e.id}`);
      assert.ok(note.signed, 'the notification is signed');
      assert.equal(note.body.reason, e.reason);
      assert.equal(note.body.revision, shas[i]);
    }
  }

  // Idle now: no holder, no waiter; the overview lists only busy groups.
  const groups = await stack.api('/v1/groups');
  assert.equal(groups.status, 200);
  assert.ok(!groups.body.groups.some((g) => g.group === `deploy:${OWNER}/${repo}:main`), JSON.stringify(groups.body));
  const explained = await stack.api(`/v1/groups/${encodeURIComponent(`deploy:${OWNER}/${repo}:main`)}`);
  assert.equal(explained.status, 200);
  assert.equal(explained.body.holder, null);
  assert.ok(explained.body.recent.some((r) => AUTO_REASONS.has(r.reason)), JSON.stringify(explained.body));
});

deployTest('an operator skips a waiting deploy: it ends skipped and no notification is sent', async () => {
  const repo = 'ops';
  const logFile = stack.sharedFile('ops.log');
  const first = stack.commit(OWNER, repo, { '.sluice.toml': deployConfig(logFile, 3), 'VERSION': 'a\n' });
  const holder = await push(repo, first);
  await stack.waitFor(async () => {
    try {
      return readFileSync(logFile, 'utf8').includes('start');
    } catch {
      return false;
    }
  }, { timeoutMs: BURST_TIMEOUT_MS, message: 'the first deploy to start' });
  const second = stack.commit(OWNER, repo, { 'VERSION': 'b\n' });
  const waiter = await push(repo, second, first);
  await stack.waitFor(async () => {
    const v = await stack.api(`/v1/groups/${encodeURIComponent(`deploy:${OWNER}/${repo}:main`)}`);
    return v.body.waiters?.some((w) => w.execution_id === waiter);
  }, { timeoutMs: BURST_TIMEOUT_MS, message: 'the second deploy to queue' });

  const skip = await stack.api(`/v1/executions/${waiter}/skip`, { method: 'POST' });
  assert.equal(skip.status, 200, JSON.stringify(skip.body));
  const [h, w] = await waitAllTerminal([holder, waiter]);
  assert.equal(h.status, 'complete', 'the running deploy is never touched');
  assert.equal(w.status, 'skipped');
  assert.ok(!AUTO_REASONS.has(w.reason), `an operator skip is not an automatic one: ${w.reason}`);
  assert.ok(!notifications.seen.some((n) => n.body.execution_id === waiter), 'an operator skip is silent');
  assert.equal((await stack.api(`/v1/executions/${holder}/skip`, { method: 'POST' })).status, 409, 'a finished deploy cannot be skipped');
});

deployTest('an operator restart of a deploy past its gate while another holds the group deploys nothing beside it', async () => {
  const repo = 'restarts';
  const logFile = stack.sharedFile('restarts.log');
  const first = stack.commit(OWNER, repo, { '.sluice.toml': deployConfig(logFile, 0.2), 'VERSION': 'a\n' });
  const a = await push(repo, first);
  const [doneA] = await waitAllTerminal([a]);
  assert.equal(doneA.status, 'complete');
  // B, the new head, holds the group with a longer deploy.
  const second = stack.commit(OWNER, repo, { '.sluice.toml': deployConfig(logFile, 4), 'VERSION': 'b\n' });
  const b = await push(repo, second, first);
  await stack.waitFor(() => readDeployLog(logFile).some((r) => r.sha === second), {
    timeoutMs: BURST_TIMEOUT_MS, message: "B's deploy to start",
  });

  // A restart of A from its command would deploy without the group: refused, naming why.
  const refused = await stack.api(`/v1/executions/${a}/restart`, { method: 'POST', body: { from_step: 'run deploy command' } });
  assert.equal(refused.status, 409, JSON.stringify(refused.body));
  assert.match(refused.body.error.message, /no longer holds/);
  // From inside the gate it queues afresh; behind B and not the head, it is skipped.
  const reentered = await stack.api(`/v1/executions/${a}/restart`, { method: 'POST', body: { from_step: 'gate: enqueue' } });
  assert.equal(reentered.status, 200, JSON.stringify(reentered.body));
  const [endA, endB] = await waitAllTerminal([a, b]);
  assert.equal(endB.status, 'complete', JSON.stringify(endB));
  assert.equal(endA.status, 'skipped', JSON.stringify(endA));
  assert.equal(endA.reason, 'not_current');

  const runs = readDeployLog(logFile);
  assert.deepEqual(runs.map((r) => r.sha), [first, second], 'A deployed once, before B; nothing after');
  assert.ok(runs[1].start > runs[0].end, 'the deploys never overlapped');
});

// Issue 8 item 1, as a branch pusher would try it: branch `evil` names itself and the
// environment in its own .sluice.toml, with a command that would print the secret. The policy is
// read on the default branch, which deploys `main` only: nothing runs, nothing leaks.
deployTest('a pushed branch cannot grant itself a deploy or the environment\'s secrets', async () => {
  const repo = 'guarded';
  // Writable by the command, were it to run (each run's user is its own).
  const leak = stack.sharedFile('leak.txt');
  stack.commit(OWNER, repo, { '.sluice.toml': deployConfig(stack.sharedFile('guarded.log'), 0) });
  const evilConfig = [
    '[deploy]', 'branch = "evil"', `command = "echo $DEPLOY_TOKEN > ${leak}; echo token=$DEPLOY_TOKEN"`,
    'environment = "production"', '',
  ].join('\n');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': evilConfig }, { branch: 'evil' });
  const id = await push(repo, sha, undefined, 'evil');
  const [end] = await waitAllTerminal([id]);
  assert.equal(end.status, 'skipped', JSON.stringify(end));
  assert.equal(end.reason, 'not-configured');
  assert.equal(readFileSync(leak, 'utf8'), '', 'the evil command never ran');
  const { check_runs: checks } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  assert.ok(!JSON.stringify(checks).includes(DEPLOY_TOKEN));
  assert.ok(!stack.logTail(400).includes(DEPLOY_TOKEN), 'not in the Worker log');
});

deployTest('GET /v1/config shows the environments as the Worker reads them, with no secret value', async () => {
  const res = await stack.api('/v1/config');
  assert.equal(res.status, 200, JSON.stringify(res.body));
  assert.equal(res.body.environments_error, null);
  const production = res.body.environments.find((e) => e.name === 'production');
  assert.deepEqual(production.secrets, [{ name: 'DEPLOY_TOKEN', set: true }]);
  assert.ok(!JSON.stringify(res.body).includes(DEPLOY_TOKEN));
});

// `[deploy] needs = ["check"]`: a push to main starts the commit's check and deploys only after it
// passed; a commit whose check fails is never deployed (skipped `needs_failed`).
deployTest('a deploy that needs its check deploys after the check passes, and never when it fails', async () => {
  const repo = 'needs';
  const log = stack.sharedFile('needs.log');
  const config = [
    '[check]',
    `command = "echo tested $SLUICE_SHA $(date +%s%N) >> ${log}; test -f ok"`,
    '',
    '[deploy]',
    'branch = "main"',
    `command = "echo deployed $SLUICE_SHA $(date +%s%N) >> ${log}"`,
    'needs = ["check"]',
    '',
  ].join('\n');
  const good = stack.commit(OWNER, repo, { '.sluice.toml': config, ok: 'yes\n' });
  const [passed] = await waitAllTerminal([await push(repo, good, '0'.repeat(40))]);
  assert.equal(passed.status, 'complete', JSON.stringify(passed));
  const bad = stack.commit(OWNER, repo, { '.sluice.toml': config }, { removeOthers: true });
  const [failed] = await waitAllTerminal([await push(repo, bad, good)]);
  assert.equal(failed.status, 'skipped', JSON.stringify(failed));
  assert.equal(failed.reason, 'needs_failed');

  const lines = readFileSync(log, 'utf8').trim().split('\n').map((l) => l.split(' '));
  const at = (kind, sha) => lines.find(([k, s]) => k === kind && s === sha)?.[2];
  assert.ok(at('tested', good) && at('deployed', good), lines.join('\n'));
  assert.ok(BigInt(at('tested', good)) < BigInt(at('deployed', good)), 'tested before deployed');
  assert.ok(at('tested', bad), 'the failing commit was tested');
  assert.equal(at('deployed', bad), undefined, 'and never deployed');
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  const deployRun = runs.find((r) => r.head_sha === bad && r.name === 'sluice/deploy');
  assert.equal(deployRun?.conclusion, 'neutral', JSON.stringify(runs));
  assert.match(deployRun.output.summary, /`sluice\/check` of [0-9a-f]{40} concluded failure/);
});

// `[deploy] needs = ["test"]` naming a job of the pipeline: the deploy waits for that job of the
// pushed commit and deploys only after it passed; a commit whose test job fails never deploys.
deployTest('a deploy that needs a pipeline job deploys after it passes, and never when it fails', async () => {
  const repo = 'needs-jobs';
  const log = stack.sharedFile('needs-jobs.log');
  const config = [
    '[jobs.lint]',
    'command = "true"',
    '',
    '[jobs.test]',
    `command = "echo tested $SLUICE_SHA $(date +%s%N) >> ${log}; test -f ok"`,
    '',
    '[deploy]',
    'branch = "main"',
    `command = "echo deployed $SLUICE_SHA $(date +%s%N) >> ${log}"`,
    'needs = ["test"]',
    '',
  ].join('\n');
  const good = stack.commit(OWNER, repo, { '.sluice.toml': config, ok: 'yes\n' });
  const [passed] = await waitAllTerminal([await push(repo, good, '0'.repeat(40))]);
  assert.equal(passed.status, 'complete', JSON.stringify(passed));
  const bad = stack.commit(OWNER, repo, { '.sluice.toml': config }, { removeOthers: true });
  const [failed] = await waitAllTerminal([await push(repo, bad, good)]);
  assert.equal(failed.status, 'skipped', JSON.stringify(failed));
  assert.equal(failed.reason, 'needs_failed');

  const lines = readFileSync(log, 'utf8').trim().split('\n').map((l) => l.split(' '));
  const at = (kind, sha) => lines.find(([k, s]) => k === kind && s === sha)?.[2];
  assert.ok(BigInt(at('tested', good)) < BigInt(at('deployed', good)), lines.join('\n'));
  assert.ok(at('tested', bad), 'the failing commit was tested');
  assert.equal(at('deployed', bad), undefined, 'and never deployed');
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  const testRun = runs.find((r) => r.head_sha === bad && r.name === 'sluice/test');
  assert.equal(testRun?.conclusion, 'failure', JSON.stringify(runs.map((r) => [r.name, r.conclusion])));
  const deployRun = runs.find((r) => r.head_sha === bad && r.name === 'sluice/deploy');
  assert.equal(deployRun?.conclusion, 'neutral', JSON.stringify(runs));
  assert.match(deployRun.output.summary, /`test` of [0-9a-f]{40} failed/);
});
