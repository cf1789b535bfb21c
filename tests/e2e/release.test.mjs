// End-to-end: the release-notes run through `wrangler dev`, the GitHub stand-in and real git
// repositories with tags, annotated (`git tag -a`, as release tools make them) and lightweight. A
// pushed tag opens an approval pull request and an `action_required` `sluice/release-notes`
// check run; its named approver merging it (a signed `pull_request` closed webhook) or pressing
// Approve publishes the release and the check concludes `success`; a tag moved meanwhile is not
// released. Presses of someone who may not decide are answered once and leave the wait open; a
// merge GitHub dated inside the window decides though it arrives after the deadline; a tag
// pushed again supersedes the earlier push's proposal. With a short configured
// `confirmation_timeout`, an unanswered release is skipped `confirmation_timeout`, its pull
// request closed with a comment and its check `neutral`, announced by a signed notification.

import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { createServer } from 'node:http';
import { after, before, test } from 'node:test';
import { headSha, tagAnnotated, tagCommit, tagPushShas } from '../../tools/github-standin/git.mjs';
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
// plain commit, tagged `tag` (annotated unless `lightweight`). Returns the tagged commit.
async function repoWithTag(repo, config, tag, { lightweight = false } = {}) {
  const first = stack.commit(OWNER, repo, { '.sluice.toml': config, 'README.md': 'lib\n' }, { message: 'Start' });
  tagCommit(stack.reposDir, OWNER, repo, 'v1.0.0', first);
  const merged = stack.commit(OWNER, repo, { 'fix.txt': 'fixed\n' }, { message: 'Merge pull request #7 from ana/fix\n\nFix the crash' });
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/7`, {
    head_sha: merged, title: 'Fix the crash', user: 'ana', labels: ['bug'], merged: true,
  });
  const head = stack.commit(OWNER, repo, { 'docs.txt': 'docs\n' }, { message: 'Tidy the docs' });
  if (lightweight) tagCommit(stack.reposDir, OWNER, repo, tag, head);
  else tagAnnotated(stack.reposDir, OWNER, repo, tag, head);
  return head;
}

// Pushes `tag` as it is in the repository now, in the shape GitHub sends: `after` names the tag
// object of an annotated tag, `head_commit` the commit. Returns the instance it created.
async function pushTag(repo, tag) {
  const { after, headCommit } = tagPushShas(stack.reposDir, OWNER, repo, tag);
  const payload = pushPayload({ owner: OWNER, repo, ref: `refs/tags/${tag}`, after, headCommit, installationId: INSTALLATION_ID, senderLogin: OWNER });
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

// Every approval pull request of `tag`, oldest first (each push of a tag proposes on a branch of
// its own, `sluice/release-notes/<tag>-<push>`).
async function releasePulls(repo, tag) {
  const { pulls } = await stack.standinGet(`/_standin/pulls?repo=${OWNER}/${repo}`);
  return pulls.filter((p) => p.head_ref.startsWith(`sluice/release-notes/${tag}-`)).sort((a, b) => a.number - b.number);
}

// The approval pull request of the latest push of `tag`.
async function releasePull(repo, tag) {
  return (await releasePulls(repo, tag)).at(-1);
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

// `login` merges the pull request on GitHub and GitHub sends the closed event, dated when the
// stand-in merged it and naming the head as Sluice left it. Returns the webhook's answer.
async function merge(repo, pull, login) {
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/${pull.number}/close`, { merged: true });
  const { pulls } = await stack.standinGet(`/_standin/pulls?repo=${OWNER}/${repo}`);
  return sendMerged(repo, pull, login, pulls.find((p) => p.number === pull.number).merged_at);
}

// The closed event of a merged pull request, GitHub dating the merge `mergedAt`.
async function sendMerged(repo, pull, login, mergedAt) {
  const proposed = headSha(stack.reposDir, OWNER, repo, pull.head_ref);
  const closed = pullRequestPayload({
    owner: OWNER, repo, sha: proposed, action: 'closed', number: pull.number, merged: true, mergedAt,
    headRef: pull.head_ref, senderLogin: login, installationId: INSTALLATION_ID,
  });
  const res = await stack.sendWebhook('pull_request', closed);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  return { res, closed };
}

async function press(repo, check, identifier, senderLogin) {
  const res = await stack.sendWebhook('check_run', checkRunRequestedActionPayload({
    owner: OWNER, repo, checkRun: check, identifier, senderLogin, installationId: INSTALLATION_ID,
  }));
  assert.equal(res.status, 202, JSON.stringify(res.body));
  return res.body.instances;
}

async function published(repo, id, tag) {
  await stack.waitFor(async () => (await execution(id)).status === 'complete', {
    timeoutMs: STEP_TIMEOUT_MS, message: `${tag} published`,
  });
  const { releases } = await stack.standinGet(`/_standin/releases?repo=${OWNER}/${repo}`);
  assert.deepEqual(releases.map((r) => r.tag_name), [tag]);
  return releases[0];
}

const APPROVER = 'ana';
const NAMED = `[release_notes]\ntags = "v*"\napprovers = ["${APPROVER}"]\n`;

for (const [a, kind] of [['an', 'annotated'], ['a', 'lightweight']]) {
  const lightweight = kind === 'lightweight';

  releaseTest(`${a} ${kind} tag waits on an approval pull request; its named approver's merge publishes it`, async () => {
    const repo = `lib-merge-${kind}`;
    const sha = await repoWithTag(repo, NAMED, 'v1.1.0', { lightweight });
    const id = await pushTag(repo, 'v1.1.0');
    const { pull } = await waitingForApproval(repo, 'v1.1.0', sha, id);
    assert.match(pull.body, /### bug\n\n- Fix the crash \(#7\) by @ana/);
    assert.match(pull.body, /Tidy the docs/);
    assert.match(pull.body, /v1\.0\.0\.\.\.v1\.1\.0/);
    // The waiting list says who decides and until when.
    const waiting = await stack.api(`/v1/executions?status=waiting&repo=${OWNER}/${repo}`);
    const row = waiting.body.executions.find((e) => e.id === id);
    assert.equal(row.waiting_for.wait, 'release approval');
    assert.equal(row.waiting_for.decider, `@${APPROVER}`);
    assert.ok(row.waiting_for.until_ms > Date.now() + 71 * 3600_000, JSON.stringify(row.waiting_for));

    const { res, closed } = await merge(repo, pull, APPROVER);
    assert.deepEqual(res.body.instances.map((i) => [i.id, i.delivered]), [[id, true]], 'routed to the waiting instance, none created');
    const release = await published(repo, id, 'v1.1.0');
    assert.match(release.body, /Fix the crash \(#7\) by @ana/);
    assert.equal((await latestCheck(repo, sha)).conclusion, 'success');
    // A redelivery of the decision finds nobody waiting and publishes nothing again.
    const again = await stack.sendWebhook('pull_request', closed);
    assert.equal(again.status, 202);
    assert.deepEqual(again.body.instances, []);
  });

  releaseTest(`${a} ${kind} tag: a stranger's Reject is answered and decides nothing; the named approver's Approve publishes`, async () => {
    const repo = `lib-buttons-${kind}`;
    const sha = await repoWithTag(repo, NAMED, 'v3.0.0', { lightweight });
    const id = await pushTag(repo, 'v3.0.0');
    const { check, pull } = await waitingForApproval(repo, 'v3.0.0', sha, id);
    assert.deepEqual((await press(repo, check, 'release-reject', 'stranger')).map((i) => i.id), [id], 'routed by the check run');
    await stack.waitFor(async () => (await releasePull(repo, 'v3.0.0')).comments.length === 1, {
      timeoutMs: STEP_TIMEOUT_MS, message: 'the answer to the stranger',
    });
    const answered = await releasePull(repo, 'v3.0.0');
    assert.match(answered.comments[0].body, new RegExp(`@stranger pressed Reject, but only @${APPROVER} may decide`));
    assert.equal(answered.state, 'open');
    assert.equal((await execution(id)).status, 'waiting', 'decided nothing');
    // The API cannot press in anyone's name.
    const forged = await stack.api(`/v1/executions/${id}/events/release-decision`, {
      method: 'POST', body: { kind: 'button', check_run_id: check.id, identifier: 'release-approve', sender: APPROVER },
    });
    assert.equal(forged.status, 403);
    assert.equal(forged.body.error.code, 'github_only');
    assert.deepEqual((await press(repo, check, 'release-approve', APPROVER)).map((i) => i.id), [id]);
    await published(repo, id, 'v3.0.0');
    assert.equal((await latestCheck(repo, sha)).conclusion, 'success');
    assert.equal(pull.number, (await releasePull(repo, 'v3.0.0')).number);
  });
}

releaseTest('an annotated tag moved to another commit between proposal and merge is not released', async () => {
  const repo = 'lib-moved';
  const sha = await repoWithTag(repo, NAMED, 'v4.0.0');
  const id = await pushTag(repo, 'v4.0.0');
  const { pull } = await waitingForApproval(repo, 'v4.0.0', sha, id);
  // Someone re-tags other code (`git tag -f -a`); the approver merges the notes of the first.
  const other = stack.commit(OWNER, repo, { 'late.txt': 'late\n' }, { message: 'Late change' });
  tagAnnotated(stack.reposDir, OWNER, repo, 'v4.0.0', other, { force: true });
  const { res } = await merge(repo, pull, APPROVER);
  assert.deepEqual(res.body.instances.map((i) => i.id), [id]);
  await stack.waitFor(async () => (await execution(id)).status === 'complete', {
    timeoutMs: STEP_TIMEOUT_MS, message: 'the release run to end',
  });
  const check = await latestCheck(repo, sha);
  assert.equal(check.conclusion, 'failure');
  assert.match(check.output.summary, new RegExp(`now names ${other}, not ${sha}`), 'the commit, never the tag object');
  const { releases } = await stack.standinGet(`/_standin/releases?repo=${OWNER}/${repo}`);
  assert.deepEqual(releases, []);
});

releaseTest('60 presses by someone who may not decide leave the wait open; the approver\'s merge still publishes', async () => {
  const repo = 'lib-flood';
  const sha = await repoWithTag(repo, NAMED, 'v5.0.0');
  const id = await pushTag(repo, 'v5.0.0');
  const { check, pull } = await waitingForApproval(repo, 'v5.0.0', sha, id);
  let routed = 0;
  for (let n = 0; n < 60; n += 1) routed += (await press(repo, check, 'release-approve', 'stranger')).length;
  // Routing lets a window have a few of one sender's events; the rest reach nobody.
  assert.equal(routed, 3);
  await stack.waitFor(async () => (await releasePull(repo, 'v5.0.0')).comments.length === 1, {
    timeoutMs: STEP_TIMEOUT_MS, message: 'the answer to the stranger',
  });
  // The merge is routed: a positive signal that the wait took every press before it.
  const { res } = await merge(repo, pull, APPROVER);
  assert.deepEqual(res.body.instances.map((i) => [i.id, i.delivered]), [[id, true]], 'the wait is still open');
  await published(repo, id, 'v5.0.0');
  const comments = (await releasePull(repo, 'v5.0.0')).comments.map((c) => c.body);
  assert.equal(comments.filter((c) => c.includes('@stranger')).length, 1, 'answered once');
});

releaseTest('a merge GitHub dated before the deadline and delivered after it publishes; a press then decides nothing', async () => {
  const repo = 'lib-late';
  // A 20 s window: its grace is as long (at most an hour).
  const sha = await repoWithTag(repo, `${NAMED}confirmation_timeout = "20s"\n`, 'v6.0.0');
  const id = await pushTag(repo, 'v6.0.0');
  const { check, pull } = await waitingForApproval(repo, 'v6.0.0', sha, id);
  const waiting = await stack.api(`/v1/executions?status=waiting&repo=${OWNER}/${repo}`);
  const deadlineMs = waiting.body.executions.find((e) => e.id === id).waiting_for.until_ms;
  // The approver merges in time; GitHub's delivery is late.
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/${pull.number}/close`, { merged: true });
  const mergedAt = (await releasePull(repo, 'v6.0.0')).merged_at;
  assert.ok(Date.parse(mergedAt) < deadlineMs, `${mergedAt} is inside the window ending ${deadlineMs}`);
  await stack.waitFor(() => Date.now() > deadlineMs + 1000, { timeoutMs: 30_000, intervalMs: 100, message: 'the deadline to pass' });
  assert.equal((await execution(id)).status, 'waiting', 'it listens through the grace');
  assert.deepEqual(await press(repo, check, 'release-approve', APPROVER), [], 'a press has no date: too late');
  const { res } = await sendMerged(repo, pull, APPROVER, mergedAt);
  assert.deepEqual(res.body.instances.map((i) => [i.id, i.delivered]), [[id, true]]);
  await published(repo, id, 'v6.0.0');
  assert.equal((await latestCheck(repo, sha)).conclusion, 'success');
});

releaseTest('a tag pushed again at another commit supersedes the earlier proposal, which is closed naming the new commit', async () => {
  const repo = 'lib-repush';
  const sha = await repoWithTag(repo, NAMED, 'v7.0.0');
  const first = await pushTag(repo, 'v7.0.0');
  const { pull: earlier } = await waitingForApproval(repo, 'v7.0.0', sha, first);
  const fixed = stack.commit(OWNER, repo, { 'fix2.txt': 'fixed again\n' }, { message: 'Fix the release' });
  tagAnnotated(stack.reposDir, OWNER, repo, 'v7.0.0', fixed, { force: true });
  const second = await pushTag(repo, 'v7.0.0');
  assert.notEqual(second, first, 'one push, one instance');
  await stack.waitFor(async () => (await execution(first)).status === 'skipped', {
    timeoutMs: STEP_TIMEOUT_MS, message: 'the earlier push superseded',
  });
  assert.equal((await execution(first)).reason, 'superseded');
  const { pull: later } = await waitingForApproval(repo, 'v7.0.0', fixed, second);
  assert.notEqual(later.number, earlier.number, 'a pull request of its own');
  assert.notEqual(later.head_ref, earlier.head_ref);
  const closed = (await releasePulls(repo, 'v7.0.0')).find((p) => p.number === earlier.number);
  assert.equal(closed.state, 'closed');
  assert.match(closed.comments.map((c) => c.body).join('\n'), new RegExp(`pushed again and now names ${fixed}`));
  assert.match(later.body, /Fix the release/);
  await merge(repo, later, APPROVER);
  const release = await published(repo, second, 'v7.0.0');
  assert.equal(release.target_commitish, fixed);
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
