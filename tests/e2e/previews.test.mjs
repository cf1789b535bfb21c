// End-to-end: pull-request previews (issue 24) through the built Worker, the stand-in and the
// sandbox agent, with real git repositories. Opening a pull request deploys its head into its own
// transient environment (`pr-<n>`, the URL its command printed, one comment on the pull request
// edited in place); pushes in quick succession leave the newest deployed and the one that waited
// `superseded`; an unanswered confirmation ends `confirmation_timeout` with its deployment
// `inactive` and a signed `preview_auto_skipped` notification; closing tears down once and leaves
// every deployment `inactive`; a close GitHub never delivered is torn down by the sweep's
// reconcile; a fork's pull request gets no preview and no secret.

import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { checkRunRequestedActionPayload, pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, TERMINAL, startStack } from './harness.mjs';

const OWNER = 'acme';
// A preview is a clone and a short command: 90 s is ample for each wait below.
const RUN_TIMEOUT_MS = 90_000;
const TEST_TIMEOUT_MS = 4 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;
const NOTIFY_SECRET = 'notify-secret-for-previews';
const PREVIEW_TOKEN = 'preview-token-0123456789';
// The operator's transient environment for previews, exporting PREVIEW_TOKEN to any branch of
// acme's repositories. TOML literal strings: an env file cannot carry a double quote.
const ENVIRONMENTS = "[previews]\nrepos = ['acme/*']\nbranches = ['**']\nsecrets = ['PREVIEW_TOKEN']\ntransient = true\n";
// The shortest reconcile interval the sweep takes (half a sweep interval): the dropped close is
// reconciled within seconds of the test driving the cron, not the default ten minutes.
const PREVIEW_RECONCILE_INTERVAL = '30s';
// How often the test drives the cron while it waits for the reconcile (`npm start` does every 30 s).
const CRON_EVERY_MS = 2_000;

let stack;
let notifications;

before(async () => {
  notifications = await startNotifications();
  stack = await startStack({
    vars: { NOTIFY_URL: notifications.url, NOTIFY_SECRET, PREVIEW_TOKEN, ENVIRONMENTS, PREVIEW_RECONCILE_INTERVAL },
  });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
  await notifications?.close();
});

function previewTest(name, fn) {
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
      seen.push({ signed: req.headers['x-sluice-signature-256'] === want, event: req.headers['x-sluice-event'], body: JSON.parse(body) });
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

// `.sluice.toml` on the default branch: the preview records its commit and whether it got the
// environment's secret, sleeps `sleepS`, prints its URL; the teardown records itself.
function previewConfig(log, { sleepS = 0, extra = [] } = {}) {
  return [
    '[preview]',
    `command = "echo deploy $SLUICE_SHA pr$SLUICE_PR token-$PREVIEW_TOKEN >> ${log}; sleep ${sleepS}; echo SLUICE_ENVIRONMENT_URL=https://pr-$SLUICE_PR.preview.example/"`,
    `teardown = "echo teardown pr$SLUICE_PR >> ${log}"`,
    'environment = "previews"',
    ...extra,
    '',
  ].join('\n');
}

function setUp(repo, config) {
  const log = stack.sharedFile(`${repo}.log`);
  stack.commit(OWNER, repo, { '.sluice.toml': config(log), 'README.md': `# ${repo}\n` });
  return log;
}

function lines(file) {
  try {
    return readFileSync(file, 'utf8').split('\n').filter(Boolean);
  } catch {
    return [];
  }
}

// A commit on the pull request's head branch, which the stand-in then serves as its head.
async function headCommit(repo, number, branch, n) {
  const sha = stack.commit(OWNER, repo, { 'CHANGE.md': `change ${n}\n` }, { branch });
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/${number}`, { head_sha: sha, head_ref: branch });
  return sha;
}

async function sendPull(repo, sha, { number, branch, action = 'opened', before: prev, ...rest }) {
  const payload = pullRequestPayload({
    owner: OWNER, repo, sha, action, number, headRef: branch, installationId: INSTALLATION_ID, ...rest,
  });
  if (prev) payload.before = prev;
  const res = await stack.sendWebhook('pull_request', payload);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  return res.body.instances;
}

async function previewOf(repo, sha, opts) {
  const instances = await sendPull(repo, sha, opts);
  const previews = instances.filter((i) => i.run === 'preview');
  assert.equal(previews.length, 1, JSON.stringify(instances));
  return previews[0].id;
}

async function execution(id) {
  const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.execution;
}

async function terminal(id) {
  return stack.waitFor(async () => {
    const e = await execution(id);
    return TERMINAL.has(e.status) ? e : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, intervalMs: 250, message: `${id} to end` });
}

async function deploymentsOf(repo) {
  const { deployments } = await stack.standinGet(`/_standin/deployments?repo=${OWNER}/${repo}`);
  return deployments;
}

async function commentsOf(repo, number) {
  const { pulls } = await stack.standinGet(`/_standin/pulls?repo=${OWNER}/${repo}`);
  return pulls.find((p) => p.number === number)?.comments ?? [];
}

const states = (d) => d.statuses.map((s) => s.state);

previewTest('opening a pull request deploys its head into pr-<n> with its URL and one comment, edited in place at the next push', async () => {
  const repo = 'opened';
  const log = setUp(repo, (l) => previewConfig(l));
  const a = await headCommit(repo, 3, 'feature-a', 1);
  const first = await previewOf(repo, a, { number: 3, branch: 'feature-a' });
  assert.equal((await terminal(first)).status, 'complete');
  const [d] = await deploymentsOf(repo);
  assert.deepEqual([d.sha, d.environment, d.transient_environment, d.production_environment], [a, 'pr-3', true, false]);
  assert.deepEqual(states(d), ['queued', 'in_progress', 'success']);
  assert.equal(d.statuses.at(-1).environment_url, 'https://pr-3.preview.example/');
  assert.deepEqual(lines(log), [`deploy ${a} pr3 token-${PREVIEW_TOKEN}`], 'the environment secret reached the command');
  let comments = await commentsOf(repo, 3);
  assert.equal(comments.length, 1, JSON.stringify(comments));
  assert.match(comments[0].body, /https:\/\/pr-3\.preview\.example\//);
  assert.ok(comments[0].body.includes(a));

  const b = await headCommit(repo, 3, 'feature-a', 2);
  const second = await previewOf(repo, b, { number: 3, branch: 'feature-a', action: 'synchronize', before: a });
  assert.equal((await terminal(second)).status, 'complete');
  comments = await commentsOf(repo, 3);
  assert.equal(comments.length, 1, 'one comment, edited in place');
  assert.ok(comments[0].body.includes(b) && !comments[0].body.includes(a), comments[0].body);
  // The secret is in no stored log or summary.
  const stored = JSON.stringify(await execution(second));
  assert.ok(!stored.includes(PREVIEW_TOKEN));
});

previewTest('two quick pushes: the one that waited behind the running preview is superseded naming the newest, which deploys', async () => {
  const repo = 'quick';
  const log = setUp(repo, (l) => previewConfig(l, { sleepS: 4 }));
  const branch = 'feature-q';
  const a = await headCommit(repo, 5, branch, 1);
  const pa = await previewOf(repo, a, { number: 5, branch });
  await stack.waitFor(() => lines(log).length === 1, { timeoutMs: RUN_TIMEOUT_MS, message: 'the first preview to start' });
  const b = await headCommit(repo, 5, branch, 2);
  const pb = await previewOf(repo, b, { number: 5, branch, action: 'synchronize', before: a });
  await stack.waitFor(async () => (await execution(pb)).status === 'waiting', { timeoutMs: RUN_TIMEOUT_MS, message: 'the second to wait' });
  const c = await headCommit(repo, 5, branch, 3);
  const pc = await previewOf(repo, c, { number: 5, branch, action: 'synchronize', before: b });
  const [ea, eb, ec] = [await terminal(pa), await terminal(pb), await terminal(pc)];
  assert.equal(ea.status, 'complete', 'the running one was never touched');
  assert.deepEqual([eb.status, eb.reason], ['skipped', 'superseded']);
  assert.equal(ec.status, 'complete');
  const deployed = lines(log).map((l) => l.split(' ')[1]);
  assert.deepEqual(deployed, [a, c], 'the middle head never deployed');
  const ofB = (await deploymentsOf(repo)).find((d) => d.sha === b);
  assert.deepEqual(states(ofB), ['queued', 'inactive']);
  assert.ok(ofB.statuses.at(-1).description.includes(c), ofB.statuses.at(-1).description);
  const note = notifications.seen.find((n) => n.event === 'preview_auto_skipped' && n.body.revision === b);
  assert.ok(note?.signed, JSON.stringify(notifications.seen));
  assert.deepEqual([note.body.reason, note.body.newer_revision], ['superseded', c]);
});

previewTest('an unanswered confirmation ends confirmation_timeout, its deployment inactive, announced', async () => {
  const repo = 'unconfirmed';
  const log = setUp(repo, (l) => previewConfig(l, { extra: ['confirm = true', 'confirmation_timeout = "3s"'] }));
  const a = await headCommit(repo, 8, 'feature-u', 1);
  const e = await terminal(await previewOf(repo, a, { number: 8, branch: 'feature-u' }));
  assert.deepEqual([e.status, e.reason], ['skipped', 'confirmation_timeout']);
  const [d] = await deploymentsOf(repo);
  assert.deepEqual(states(d), ['queued', 'inactive']);
  assert.deepEqual(lines(log), [], 'nothing ran');
  const note = notifications.seen.find((n) => n.event === 'preview_auto_skipped' && n.body.revision === a);
  assert.ok(note?.signed, JSON.stringify(notifications.seen));
  assert.equal(note.body.reason, 'confirmation_timeout');
});

previewTest('closing tears the preview down once and leaves every deployment of pr-<n> inactive', async () => {
  const repo = 'closed';
  const log = setUp(repo, (l) => previewConfig(l));
  const a = await headCommit(repo, 11, 'feature-c', 1);
  assert.equal((await terminal(await previewOf(repo, a, { number: 11, branch: 'feature-c' }))).status, 'complete');
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/11/close`, { merged: false });
  const closedAt = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  const first = await sendPull(repo, a, { number: 11, branch: 'feature-c', action: 'closed', closedAt });
  const again = await sendPull(repo, a, { number: 11, branch: 'feature-c', action: 'closed', closedAt });
  const teardowns = [...first, ...again].filter((i) => i.run === 'preview-teardown');
  assert.equal(new Set(teardowns.map((i) => i.id)).size, 1, JSON.stringify(teardowns));
  assert.equal((await terminal(teardowns[0].id)).status, 'complete');
  assert.deepEqual(lines(log).filter((l) => l.startsWith('teardown')), ['teardown pr11'], 'torn down once');
  const deployments = await deploymentsOf(repo);
  assert.ok(deployments.length >= 1 && deployments.every((d) => d.statuses.at(-1).state === 'inactive'), JSON.stringify(deployments.map(states)));
  assert.match((await commentsOf(repo, 11))[0].body, /torn down/);
});

previewTest('a close GitHub never delivered is torn down by the sweep reconciling with GitHub', async () => {
  const repo = 'dropped';
  const log = setUp(repo, (l) => previewConfig(l));
  const a = await headCommit(repo, 13, 'feature-d', 1);
  assert.equal((await terminal(await previewOf(repo, a, { number: 13, branch: 'feature-d' }))).status, 'complete');
  // Closed on GitHub; its `closed` webhook is never sent.
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/13/close`, { merged: true });
  await stack.waitFor(async () => {
    await stack.scheduled();
    return lines(log).some((l) => l === 'teardown pr13');
  }, { timeoutMs: RUN_TIMEOUT_MS, intervalMs: CRON_EVERY_MS, message: 'the sweep to tear the preview down' });
  await stack.waitFor(async () => (await deploymentsOf(repo)).every((d) => d.statuses.at(-1).state === 'inactive'), {
    timeoutMs: RUN_TIMEOUT_MS, message: 'the deployments to end inactive',
  });
  assert.deepEqual(lines(log).filter((l) => l.startsWith('teardown')), ['teardown pr13']);
});

previewTest('the dashboard lists live previews and tears one down after it asks', async () => {
  const repo = 'listed';
  const log = setUp(repo, (l) => previewConfig(l));
  const a = await headCommit(repo, 19, 'feature-l', 1);
  assert.equal((await terminal(await previewOf(repo, a, { number: 19, branch: 'feature-l' }))).status, 'complete');
  const page = async () => (await fetch(`${stack.url}/ui/previews`, { headers: { Authorization: `Bearer ${stack.adminToken}` } })).text();
  assert.match(await page(), /https:\/\/pr-19\.preview\.example\//);
  const action = `${stack.url}/ui/previews/${encodeURIComponent(`${OWNER}/${repo}:19`)}/teardown`;
  const post = (confirmed) => fetch(action, {
    method: 'POST',
    headers: { Authorization: `Bearer ${stack.adminToken}`, 'Content-Type': 'application/x-www-form-urlencoded' },
    body: `confirmed=${confirmed}`,
  });
  const ask = await post('');
  assert.equal(ask.status, 200);
  assert.match(await ask.text(), /Tear down acme\/listed:19\?/);
  assert.deepEqual(lines(log).filter((l) => l.startsWith('teardown')), [], 'nothing before it is confirmed');
  const done = await post('1');
  const body = await done.text();
  assert.equal(done.status, 200, body);
  assert.match(body, /Its teardown is started/);
  await stack.waitFor(() => lines(log).includes('teardown pr19'), { timeoutMs: RUN_TIMEOUT_MS, message: 'the teardown to run' });
  await stack.waitFor(async () => !(await page()).includes('pr-19.preview.example'), { timeoutMs: RUN_TIMEOUT_MS, message: 'the list to drop it' });
  assert.equal((await deploymentsOf(repo))[0].statuses.at(-1).state, 'inactive');
});

previewTest("a fork's pull request gets no preview and no secret; its check says why", async () => {
  const repo = 'forked';
  const log = setUp(repo, (l) => previewConfig(l));
  const a = await headCommit(repo, 17, 'feature-f', 1);
  const e = await terminal(await previewOf(repo, a, { number: 17, branch: 'feature-f', headOwner: 'mallory' }));
  assert.equal(e.status, 'skipped');
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  const run = runs.find((r) => r.name === 'sluice/preview');
  assert.equal(run?.conclusion, 'neutral', JSON.stringify(runs));
  assert.match(run.output.summary, /fork/);
  assert.deepEqual(await deploymentsOf(repo), []);
  // Its close runs no teardown either: the fork's code never gets the secrets.
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/17/close`, { merged: false });
  const closed = await sendPull(repo, a, { number: 17, branch: 'feature-f', headOwner: 'mallory', action: 'closed' });
  const teardown = closed.find((i) => i.run === 'preview-teardown');
  const t = await terminal(teardown.id);
  assert.deepEqual([t.status, t.reason], ['skipped', 'fork']);
  assert.deepEqual(lines(log), [], 'nothing ran, so no secret reached a fork');
});

previewTest("a maintainer previews a fork's pull request, with no secret, by pressing Preview", async () => {
  const repo = 'forkpreview';
  const log = stack.sharedFile(`${repo}.log`);
  // No environment: no secret, so a maintainer may ask for a fork's preview.
  const config = [
    '[preview]',
    `command = "echo deploy $SLUICE_SHA token-$PREVIEW_TOKEN >> ${log}; echo SLUICE_ENVIRONMENT_URL=https://pr-$SLUICE_PR.preview.example/"`,
    `teardown = "echo teardown pr$SLUICE_PR >> ${log}"`,
    '',
  ].join('\n');
  stack.commit(OWNER, repo, { '.sluice.toml': config, 'README.md': `# ${repo}\n` });
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/collaborators/maintainer`, { permission: 'write' });
  const a = await headCommit(repo, 23, 'feature-m', 1);
  const id = await previewOf(repo, a, { number: 23, branch: 'feature-m', headOwner: 'stranger' });
  const run = await stack.waitFor(async () => {
    const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
    const r = runs.find((c) => c.name === 'sluice/preview');
    return r?.actions?.some((x) => x.identifier === 'preview') ? r : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: 'the Preview button' });
  assert.deepEqual(lines(log), [], 'nothing runs before a maintainer asks');
  const body = checkRunRequestedActionPayload({ owner: OWNER, repo, checkRun: run, identifier: 'preview', senderLogin: 'maintainer', installationId: INSTALLATION_ID });
  assert.equal((await stack.sendWebhook('check_run', body)).status, 202);
  assert.equal((await terminal(id)).status, 'complete');
  assert.deepEqual(lines(log), [`deploy ${a} token-`], 'deployed, with no secret');
  const [d] = await deploymentsOf(repo);
  assert.deepEqual([d.environment, states(d)], ['pr-23', ['queued', 'in_progress', 'success']]);
});
