// End-to-end: the release-notes run through `wrangler dev`, the GitHub stand-in and real git
// repositories with tags. A pushed tag opens an approval pull request and an `action_required`
// `sluice/release-notes` check run; a person merging it (a signed `pull_request` closed webhook)
// publishes the release and the check concludes `success`. With a short configured
// `confirmation_timeout`, an unanswered release is skipped `confirmation_timeout`, its pull
// request closed with a comment and its check `neutral`, announced by a signed notification.

import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { tagCommit } from '../../tools/github-standin/git.mjs';
import { checkRunRequestedActionPayload, pullRequestPayload, pushPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, startStack } from './harness.mjs';

const OWNER = 'acme';
const CHECK = 'sluice/release-notes';
// A release composes its notes and opens its pull request in a few GitHub calls: 60 s is ample.
const STEP_TIMEOUT_MS = 60_000;
const TEST_TIMEOUT_MS = 4 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;
const NOTIFY_SECRET = 'notify-secret-for-release-tests';

let stack;
let notifications;

before(async () => {
  notifications = await startNotifications();
  stack = await startStack({ vars: { NOTIFY_URL: notifications.url, NOTIFY_SECRET } });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
  await notifications?.close();
});

function releaseTest(name, fn) {
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

// A repository with v1.0.0 released, then a merged pull request (#7, labelled `bug`, by ana) and a
// plain commit, tagged `tag`. Returns the tagged commit.
async function repoWithTag(repo, config, tag) {
  const first = stack.commit(OWNER, repo, { '.sluice.toml': config, 'README.md': 'lib\n' }, { message: 'Start' });
  tagCommit(stack.reposDir, OWNER, repo, 'v1.0.0', first);
  const merged = stack.commit(OWNER, repo, { 'fix.txt': 'fixed\n' }, { message: 'Merge pull request #7 from ana/fix\n\nFix the crash' });
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/7`, {
    head_sha: merged, title: 'Fix the crash', user: 'ana', labels: ['bug'], merged: true,
  });
  const head = stack.commit(OWNER, repo, { 'docs.txt': 'docs\n' }, { message: 'Tidy the docs' });
  tagCommit(stack.reposDir, OWNER, repo, tag, head);
  return head;
}

async function pushTag(repo, tag, sha) {
  const payload = pushPayload({ owner: OWNER, repo, ref: `refs/tags/${tag}`, after: sha, installationId: INSTALLATION_ID, senderLogin: OWNER });
  const res = await stack.sendWebhook('push', payload);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.equal(res.body.instances.length, 1);
  assert.equal(res.body.instances[0].run, 'release-notes');
  return res.body.instances[0].id;
}

async function execution(id) {
  const res = await stack.api(`/v1/executions/${id}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.execution;
}

async function releasePull(repo, tag) {
  const { pulls } = await stack.standinGet(`/_standin/pulls?repo=${OWNER}/${repo}`);
  return pulls.find((p) => p.head_ref === `sluice/release-notes/${tag}`);
}

// The commit's latest `sluice/release-notes` check run: what GitHub shows.
async function latestCheck(repo, sha) {
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  return runs.filter((r) => r.name === CHECK && r.head_sha === sha).sort((a, b) => b.id - a.id)[0];
}

async function waitingForApproval(repo, tag, sha, id) {
  await stack.waitFor(async () => (await execution(id)).status === 'waiting', {
    timeoutMs: STEP_TIMEOUT_MS, message: `${tag} waiting for its approval`,
  });
  const check = await latestCheck(repo, sha);
  assert.equal(check.status, 'completed');
  assert.equal(check.conclusion, 'action_required');
  assert.deepEqual(check.actions.map((a) => a.identifier), ['release-approve', 'release-reject']);
  const pull = await releasePull(repo, tag);
  assert.ok(pull, 'an approval pull request');
  assert.equal(pull.state, 'open');
  return { check, pull };
}

releaseTest('a pushed tag waits on an approval pull request; merging it publishes the release', async () => {
  const repo = 'lib';
  const sha = await repoWithTag(repo, '[release_notes]\ntags = "v*"\n', 'v1.1.0');
  const id = await pushTag(repo, 'v1.1.0', sha);
  const { pull } = await waitingForApproval(repo, 'v1.1.0', sha, id);
  assert.match(pull.body, /### bug\n\n- Fix the crash \(#7\) by @ana/);
  assert.match(pull.body, /Tidy the docs/);
  assert.match(pull.body, /v1\.0\.0\.\.\.v1\.1\.0/);
  // The waiting list says who decides and until when.
  const waiting = await stack.api(`/v1/executions?status=waiting&repo=${OWNER}/${repo}`);
  const row = waiting.body.executions.find((e) => e.id === id);
  assert.equal(row.waiting_for.wait, 'release approval');
  assert.equal(row.waiting_for.decider, `someone with write access to ${OWNER}/${repo}`);
  assert.ok(row.waiting_for.until_ms > Date.now() + 71 * 3600_000, JSON.stringify(row.waiting_for));

  // The owner merges it on GitHub; GitHub sends the closed event.
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/${pull.number}/close`, { merged: true });
  const closed = pullRequestPayload({
    owner: OWNER, repo, sha, action: 'closed', number: pull.number, merged: true,
    headRef: `sluice/release-notes/v1.1.0`, senderLogin: OWNER, installationId: INSTALLATION_ID,
  });
  const res = await stack.sendWebhook('pull_request', closed);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.deepEqual(res.body.instances.map((i) => [i.id, i.delivered]), [[id, true]], 'routed to the waiting instance, none created');
  await stack.waitFor(async () => (await execution(id)).status === 'complete', {
    timeoutMs: STEP_TIMEOUT_MS, message: 'the release published',
  });
  const { releases } = await stack.standinGet(`/_standin/releases?repo=${OWNER}/${repo}`);
  assert.equal(releases.length, 1);
  assert.equal(releases[0].tag_name, 'v1.1.0');
  assert.match(releases[0].body, /Fix the crash \(#7\) by @ana/);
  const check = await latestCheck(repo, sha);
  assert.equal(check.conclusion, 'success');
  // A redelivery of the decision finds nobody waiting and publishes nothing again.
  const again = await stack.sendWebhook('pull_request', closed);
  assert.equal(again.status, 202);
  assert.deepEqual(again.body.instances, []);
});

releaseTest('an unanswered release times out: skipped confirmation_timeout, pull request closed, announced', async () => {
  const repo = 'lib-timeout';
  const sha = await repoWithTag(repo, '[release_notes]\ntags = "v*"\nconfirmation_timeout = "5s"\n', 'v2.0.0');
  const id = await pushTag(repo, 'v2.0.0', sha);
  const { pull } = await waitingForApproval(repo, 'v2.0.0', sha, id);
  // The instance's own alarm ends the window; the cron is driven too, as production's would tick.
  await stack.waitFor(async () => {
    await stack.scheduled();
    return (await execution(id)).status === 'skipped';
  }, { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 1000, message: 'the window to end' });
  const e = await execution(id);
  assert.equal(e.reason, 'confirmation_timeout');
  const closed = await releasePull(repo, 'v2.0.0');
  assert.equal(closed.number, pull.number);
  assert.equal(closed.state, 'closed');
  assert.match(closed.comments.map((c) => c.body).join('\n'), /Nobody decided on the release of `v2\.0\.0`/);
  assert.equal((await latestCheck(repo, sha)).conclusion, 'neutral');
  const { releases } = await stack.standinGet(`/_standin/releases?repo=${OWNER}/${repo}`);
  assert.equal(releases.length, 0);
  await stack.waitFor(() => notifications.seen.some((n) => n.body.execution_id === id), {
    timeoutMs: STEP_TIMEOUT_MS, message: 'the notification',
  });
  const n = notifications.seen.find((x) => x.body.execution_id === id);
  assert.ok(n.signed);
  assert.equal(n.event, 'release_auto_skipped');
  assert.equal(n.body.reason, 'confirmation_timeout');
  assert.equal(n.body.tag, 'v2.0.0');
});

releaseTest('a stranger\'s Reject is answered on the pull request and decides nothing; the owner\'s Approve publishes', async () => {
  const repo = 'lib-buttons';
  const sha = await repoWithTag(repo, '[release_notes]\ntags = "v*"\n', 'v3.0.0');
  const id = await pushTag(repo, 'v3.0.0', sha);
  const { check, pull } = await waitingForApproval(repo, 'v3.0.0', sha, id);
  const press = async (identifier, senderLogin) => {
    const res = await stack.sendWebhook('check_run', checkRunRequestedActionPayload({
      owner: OWNER, repo, checkRun: check, identifier, senderLogin, installationId: INSTALLATION_ID,
    }));
    assert.equal(res.status, 202, JSON.stringify(res.body));
    assert.deepEqual(res.body.instances.map((i) => i.id), [id], 'routed by the check run to the waiting instance');
  };
  // `stranger` has read access only (the stand-in's default for a user it does not know).
  await press('release-reject', 'stranger');
  await stack.waitFor(async () => (await releasePull(repo, 'v3.0.0')).comments.length === 1, {
    timeoutMs: STEP_TIMEOUT_MS, message: 'the answer to the stranger',
  });
  const answered = await releasePull(repo, 'v3.0.0');
  assert.match(answered.comments[0].body, /@stranger pressed Reject, but only someone with write access/);
  assert.equal(answered.state, 'open');
  assert.equal((await execution(id)).status, 'waiting', 'decided nothing');
  // The API cannot press in anyone's name.
  const forged = await stack.api(`/v1/executions/${id}/events/release-decision`, {
    method: 'POST', body: { kind: 'button', check_run_id: check.id, identifier: 'release-approve', sender: OWNER },
  });
  assert.equal(forged.status, 403);
  assert.equal(forged.body.error.code, 'github_only');
  await press('release-approve', OWNER);
  await stack.waitFor(async () => (await execution(id)).status === 'complete', {
    timeoutMs: STEP_TIMEOUT_MS, message: 'the release published',
  });
  const { releases } = await stack.standinGet(`/_standin/releases?repo=${OWNER}/${repo}`);
  assert.deepEqual(releases.map((r) => r.tag_name), ['v3.0.0']);
  assert.equal((await latestCheck(repo, sha)).conclusion, 'success');
  assert.equal(pull.number, (await releasePull(repo, 'v3.0.0')).number);
});
