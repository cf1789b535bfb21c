// End-to-end: the `sluice/check` slice. A signed pull_request webhook goes into the built Worker
// under `wrangler dev`; the Worker reads .sluice.toml through the GitHub stand-in, reports a check
// run, clones the repository through the sandbox agent, runs the command and completes the check
// run. Also: delivery/instance deduplication, repositories without configuration, rejected and
// ignored input, and the admin API's authentication.

import assert from 'node:assert/strict';
import { createHmac, randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import http from 'node:http';
import { after, before, test } from 'node:test';
import { execFileSync } from 'node:child_process';
import { repoPath } from '../../tools/github-standin/git.mjs';
import { checkRunRequestedActionPayload, mergeGroupPayload, pullRequestPayload, signBody } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, TERMINAL, startStack } from './harness.mjs';

const CHECK_NAME = 'sluice/check';
const OWNER = 'acme';
// A run is a token exchange, a config read, a local clone and a one-line command: a few seconds.
// 60 s allows a loaded 2-core CI machine.
const RUN_TIMEOUT_MS = 60_000;
// node:test's own limit per test: a run wait plus the requests around it.
const TEST_TIMEOUT_MS = 3 * 60_000;
// Starting the stack: wrangler dev ~1.5 s prebuilt, migrations ~2 s; a build when not prebuilt.
const STACK_START_TIMEOUT_MS = 16 * 60_000;
// Just over the 25 MiB webhook limit (GitHub caps payloads at 25 MB).
const OVERSIZED_BYTES = 26 * 1024 * 1024;

// The markers the commands print ("sluice-passed", "sluice-failed") do not occur in the command
// text itself, so finding them in the check run proves the command's output was reported.
const PASSING_CONFIG = '[check]\ncommand = "echo sluice passed | tr \' \' - && test -f README.md"\n';
const FAILING_CONFIG = '[check]\ncommand = "echo sluice failed | tr \' \' - >&2; exit 3"\n';
const PASS_MARKER = 'sluice-passed';
const FAIL_MARKER = 'sluice-failed';

let stack;

before(async () => {
  stack = await startStack();
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

// Runs a test body and, when it fails, prints the Worker's log tail next to the failure.
function withLogs(fn) {
  return async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail() ?? '(no stack)'}\n--- agent log tail ---\n${stack?.agentLogTail() ?? ''}\n`);
      throw err;
    }
  };
}

function sluiceTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, withLogs(fn));
}

// -- helpers -------------------------------------------------------------------------------------

function prPayload(repo, sha, overrides = {}) {
  return pullRequestPayload({
    owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo), ...overrides,
  });
}

// Sends a pull_request opened webhook and checks the 202 that names exactly one new instance.
async function openPullRequest(repo, sha) {
  const deliveryId = randomUUID();
  const res = await stack.sendWebhook('pull_request', prPayload(repo, sha), deliveryId);
  assert.equal(res.status, 202, `webhook for ${repo}: ${JSON.stringify(res.body)}`);
  assert.equal(res.body.delivery, deliveryId);
  assert.equal(res.body.duplicate, false);
  // The pull request's check, and its preview (`src/runs/edge/previews.rs`).
  const checks = res.body.instances.filter((i) => i.run !== 'preview');
  assert.equal(checks.length, 1, JSON.stringify(res.body));
  const [instance] = checks;
  assert.equal(instance.run, 'check');
  assert.equal(instance.created, true);
  assert.equal(typeof instance.id, 'string');
  return { instance, deliveryId, body: res.body };
}

async function getExecution(id) {
  const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
  assert.equal(res.status, 200, `GET execution ${id}: ${JSON.stringify(res.body)}`);
  return res.body;
}

// Waits until the execution reaches any terminal status, then asserts it is `expected`, so a run
// that errors fails at once with its error instead of after the timeout.
async function waitForTerminal(id, expected) {
  const result = await stack.waitFor(async () => {
    const body = await getExecution(id);
    return TERMINAL.has(body.execution.status) ? body : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: `execution ${id} to finish` });
  assert.equal(result.execution.status, expected, `execution ${id}: ${JSON.stringify(result, null, 2)}`);
  return result;
}

async function checkRunsFor(repo) {
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  return runs;
}

async function checkRunPosts(repo) {
  const { calls } = await stack.standinGet(`/_standin/calls?method=POST&path_prefix=/repos/${OWNER}/${repo}/check-runs`);
  return calls.length;
}

// Status sequence of a check run with repeats collapsed (progress updates may repeat a status).
function statusPath(history) {
  return history.map((h) => h.status).filter((status, i, all) => i === 0 || all[i - 1] !== status);
}

async function assertOneCompletedCheckRun(repo, sha, { conclusion, outputMarker }) {
  const runs = await checkRunsFor(repo);
  assert.equal(runs.length, 1, `check runs for ${repo}: ${JSON.stringify(runs, null, 2)}`);
  const [run] = runs;
  assert.equal(run.name, CHECK_NAME);
  assert.equal(run.head_sha, sha);
  assert.equal(run.status, 'completed');
  assert.equal(run.conclusion, conclusion);
  assert.deepEqual(statusPath(run.history), ['in_progress', 'completed']);
  assert.equal(typeof run.output.summary, 'string', 'check run has an output summary');
  assert.ok(run.output.summary.includes(outputMarker), `summary should include ${outputMarker}: ${run.output.summary}`);
  assert.equal(typeof run.details_url, 'string', 'details_url is set');
  assert.ok(run.details_url.startsWith(stack.url), `details_url ${run.details_url} should point at the Worker (${stack.url})`);
  return run;
}

async function countWrites() {
  const executions = await stack.api('/v1/executions');
  const deliveries = await stack.api('/v1/deliveries');
  assert.equal(executions.status, 200, JSON.stringify(executions.body));
  assert.equal(deliveries.status, 200, JSON.stringify(deliveries.body));
  return { executions: executions.body.executions.length, deliveries: deliveries.body.deliveries.length };
}

// A webhook POST with exactly the given headers and body, signed (correctly) unless told not to.
function postWebhookRaw(body, { event = 'pull_request', delivery = randomUUID(), contentType = 'application/json', signature, omit = [] } = {}) {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body);
  const headers = {
    'Content-Type': contentType,
    'Content-Length': String(buf.length),
    'X-GitHub-Event': event,
    'X-GitHub-Delivery': delivery,
    'X-Hub-Signature-256': signature ?? `sha256=${createHmac('sha256', stack.secret).update(buf).digest('hex')}`,
    'User-Agent': 'GitHub-Hookshot/e2e',
  };
  for (const name of omit) delete headers[name];
  return stack.rawRequest('POST', '/webhooks/github', { headers, body: buf });
}

function assertErrorBody(res, status, label) {
  assert.equal(res.status, status, `${label}: expected ${status}, got ${res.status} ${res.text.slice(0, 500)}`);
  assert.equal(typeof res.body?.error?.code, 'string', `${label}: error.code in ${res.text.slice(0, 500)}`);
  assert.equal(typeof res.body?.error?.message, 'string', `${label}: error.message in ${res.text.slice(0, 500)}`);
}

// Junk that looks like a delivery (its headers, `extra` among them) and `bodyBytes` of body, on a
// connection of its own (wrangler dev takes a whole body before its Worker sees the request, and
// a connection left with an unread one is not one to reuse). Resolves with the answer once it is
// in (a connection closed under the rest of it keeps what arrived); rejects after
// JUNK_ANSWER_TIMEOUT_MS without one.
function sendJunk(extra, bodyBytes) {
  const url = new URL('/webhooks/github', stack.url);
  const headers = { 'Content-Type': 'application/json', 'X-GitHub-Event': 'pull_request', 'X-GitHub-Delivery': randomUUID(), ...extra };
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      req.destroy();
      reject(new Error(`no answer within ${JUNK_ANSWER_TIMEOUT_MS} ms (${JSON.stringify(extra)}, ${bodyBytes} bytes of body)`));
    }, JUNK_ANSWER_TIMEOUT_MS);
    let answer = null;
    const done = () => {
      clearTimeout(timer);
      req.destroy();
      let body = null;
      try { body = JSON.parse(answer.text); } catch { /* not JSON: the assertion shows the text */ }
      resolve({ status: answer.status, body, text: answer.text.slice(0, 300) });
    };
    const req = http.request(url, { method: 'POST', headers, agent: new http.Agent({ keepAlive: false }) }, (res) => {
      answer = { status: res.statusCode, text: '' };
      res.setEncoding('utf8');
      res.on('data', (c) => { answer.text += c; });
      res.on('end', done);
      res.on('close', done);
    });
    req.on('error', (err) => {
      if (answer) return done();
      clearTimeout(timer);
      reject(err);
    });
    req.end(Buffer.alloc(bodyBytes, 0x20));
  });
}

// Bodies just over GitHub's 25 MB cap, and one just under it (read whole into the HMAC). An answer
// is a few ms of Worker time once wrangler dev has taken the body; 60 s allows a loaded 2-core
// machine.
const JUNK_OVER_BYTES = 26 * 1024 * 1024;
const JUNK_UNDER_BYTES = 24 * 1024 * 1024;
const JUNK_ANSWER_TIMEOUT_MS = 60_000;

// -- tests ---------------------------------------------------------------------------------------

sluiceTest('GET /healthz answers ok', async () => {
  const res = await stack.api('/healthz', { auth: false });
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { ok: true });
});

sluiceTest('a passing command completes the check run with success', async () => {
  const repo = 'passing';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': PASSING_CONFIG, 'README.md': '# passing\n' });
  const { instance } = await openPullRequest(repo, sha);
  const { execution } = await waitForTerminal(instance.id, 'complete');
  assert.equal(execution.id, instance.id);
  assert.equal(execution.run, 'check');
  assert.equal(execution.sha, sha);
  const run = await assertOneCompletedCheckRun(repo, sha, { conclusion: 'success', outputMarker: PASS_MARKER });

  // The summary links the full log: a signed link that opens it as text, without the admin token.
  const link = /\((http[^)\s]+\/logs\/[^)\s]+)\)/.exec(run.output.summary)?.[1];
  assert.ok(link, `a log link in the summary: ${run.output.summary}`);
  const open = await fetch(link);
  assert.equal(open.status, 200);
  assert.match(open.headers.get('content-type'), /^text\/plain/);
  assert.equal(open.headers.get('x-content-type-options'), 'nosniff');
  assert.ok((await open.text()).includes(PASS_MARKER));
  const url = new URL(link);
  const tampered = new URL(link);
  tampered.searchParams.set('sig', '0'.repeat(64));
  assert.equal((await fetch(tampered)).status, 403, 'a bad signature');
  const unsigned = `${url.origin}${url.pathname}`;
  assert.equal((await fetch(unsigned)).status, 403, 'no signature');
  const exp = Date.now() - 1000;
  const sig = createHmac('sha256', stack.logLinkSecret).update(`${url.pathname}\n${exp}`).digest('hex');
  const expired = await fetch(`${url.origin}${url.pathname}?exp=${exp}&sig=${sig}`);
  assert.equal(expired.status, 403, 'an expired link');
  assert.equal((await expired.json()).error.code, 'link_expired');
});

// GitHub's merge queue: a group's commit on its gh-readonly-queue branch gets sluice/check, so a
// required check never stalls the queue; `destroyed` starts nothing; a group whose branch is gone
// by the time its check starts is skipped, neutral, without running its command.
sluiceTest('a merge queue group is checked on its commit; one destroyed before its check starts runs nothing', async () => {
  const repo = 'queued';
  const files = { '.sluice.toml': PASSING_CONFIG, 'README.md': '# queued\n' };
  const baseSha = stack.commit(OWNER, repo, files);
  const group = (n, headSha, action = 'checks_requested') => mergeGroupPayload({
    action, owner: OWNER, repo, headSha, baseSha, installationId: INSTALLATION_ID,
    headRef: `refs/heads/gh-readonly-queue/main/pr-${n}-${baseSha}`, reason: 'dequeued',
  });
  const queue = (n) => `gh-readonly-queue/main/pr-${n}-${baseSha}`;
  const headSha = stack.commit(OWNER, repo, { ...files, 'fix.txt': 'fixed\n' }, { branch: queue(7) });
  const res = await stack.sendWebhook('merge_group', group(7, headSha), randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.equal(res.body.instances.length, 1, JSON.stringify(res.body));
  assert.equal(res.body.instances[0].run, 'check');
  const { execution } = await waitForTerminal(res.body.instances[0].id, 'complete');
  assert.equal(execution.sha, headSha);
  const [run] = (await checkRunsFor(repo)).filter((r) => r.head_sha === headSha);
  assert.equal(run?.name, CHECK_NAME);
  assert.equal(run.conclusion, 'success', run.output.summary);
  assert.ok(run.output.summary.includes(PASS_MARKER), run.output.summary);

  // `destroyed` ends the group's live checks; this one had already finished and stays.
  const destroyed = await stack.sendWebhook('merge_group', group(7, headSha, 'destroyed'), randomUUID());
  assert.equal(destroyed.status, 202, JSON.stringify(destroyed.body));
  assert.equal(destroyed.body.instances[0]?.run, 'cancel-checks', JSON.stringify(destroyed.body));
  await waitForTerminal(destroyed.body.instances[0].id, 'complete');
  const [still] = (await checkRunsFor(repo)).filter((r) => r.head_sha === headSha);
  assert.equal(still.conclusion, 'success', 'a finished check keeps its conclusion');

  // Dequeued before its check started: GitHub deleted the group's branch.
  const goneSha = stack.commit(OWNER, repo, { ...files, 'other.txt': 'other\n' }, { branch: queue(8) });
  execFileSync('git', ['--git-dir', repoPath(stack.reposDir, OWNER, repo), 'update-ref', '-d', `refs/heads/${queue(8)}`]);
  const late = await stack.sendWebhook('merge_group', group(8, goneSha), randomUUID());
  assert.equal(late.status, 202, JSON.stringify(late.body));
  await waitForTerminal(late.body.instances[0].id, 'skipped');
  const [skipped] = (await checkRunsFor(repo)).filter((r) => r.head_sha === goneSha);
  assert.equal(skipped?.conclusion, 'neutral', JSON.stringify(skipped));
  assert.match(skipped.output.summary, /merge queue's group `gh-readonly-queue\/main\/pr-8-[0-9a-f]{40}` is gone/);
  assert.ok(!skipped.output.summary.includes(PASS_MARKER), 'its command never ran');
});

// `[check] paths`: a docs-only pull request reports `skipped` (branch protection counts it as
// passed, so a required check never hangs) and runs nothing; one touching src/ runs.
sluiceTest('a change outside [check] paths is skipped without running; one inside runs', async () => {
  const repo = 'paths';
  const config = `[check]\ncommand = "echo sluice passed | tr ' ' -"\npaths = ["src/**"]\n`;
  const base = stack.commit(OWNER, repo, { '.sluice.toml': config, 'src/lib.txt': 'v1\n' });
  const branchFrom = (branch) => execFileSync('git', ['--git-dir', repoPath(stack.reposDir, OWNER, repo), 'update-ref', `refs/heads/${branch}`, base]);
  branchFrom('docs');
  branchFrom('code');
  const docs = stack.commit(OWNER, repo, { 'README.md': '# docs only\n' }, { branch: 'docs' });
  const code = stack.commit(OWNER, repo, { 'src/lib.txt': 'v2\n' }, { branch: 'code' });
  const open = async (number, sha) => {
    await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/${number}`, { head_sha: sha });
    const res = await stack.sendWebhook('pull_request', prPayload(repo, sha, { number, baseSha: base }), randomUUID());
    assert.equal(res.status, 202, JSON.stringify(res.body));
    return res.body.instances[0].id;
  };
  await waitForTerminal(await open(1, docs), 'skipped');
  await waitForTerminal(await open(2, code), 'complete');
  const runs = await checkRunsFor(repo);
  const skipped = runs.find((r) => r.head_sha === docs);
  assert.equal(skipped?.conclusion, 'skipped', JSON.stringify(skipped));
  assert.match(skipped.output.summary, /no matching change/);
  assert.ok(!skipped.output.summary.includes(PASS_MARKER), 'its command never ran');
  const ran = runs.find((r) => r.head_sha === code);
  assert.equal(ran?.conclusion, 'success', JSON.stringify(ran));
  assert.ok(ran.output.summary.includes(PASS_MARKER), ran.output.summary);
});

sluiceTest('a failing command completes the check run with failure', async () => {
  const repo = 'failing';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': FAILING_CONFIG, 'README.md': '# failing\n' });
  const { instance } = await openPullRequest(repo, sha);
  const { execution } = await waitForTerminal(instance.id, 'complete');
  assert.equal(execution.sha, sha);
  await assertOneCompletedCheckRun(repo, sha, { conclusion: 'failure', outputMarker: FAIL_MARKER });
});

sluiceTest('repeated deliveries and repeated head shas start nothing new', async () => {
  const repo = 'dedupe';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': PASSING_CONFIG, 'README.md': '# dedupe\n' });
  const payload = prPayload(repo, sha);
  const { instance, deliveryId } = await openPullRequest(repo, sha);

  // Same delivery again (GitHub redelivery), then a new delivery for the same head sha — both
  // while the first run is still in flight, then again after it finished.
  async function repeatBoth() {
    const redelivery = await stack.sendWebhook('pull_request', payload, deliveryId);
    assert.ok(redelivery.status >= 200 && redelivery.status < 300, `redelivery: ${redelivery.status} ${JSON.stringify(redelivery.body)}`);
    assert.equal(redelivery.body.duplicate, true, JSON.stringify(redelivery.body));
    assert.deepEqual(redelivery.body.instances.filter((i) => i.run === 'check').map((i) => i.id), [instance.id]);

    const newDelivery = await stack.sendWebhook('pull_request', { ...payload, action: 'synchronize' });
    assert.ok(newDelivery.status >= 200 && newDelivery.status < 300, `new delivery: ${newDelivery.status} ${JSON.stringify(newDelivery.body)}`);
    assert.equal(newDelivery.body.duplicate, false);
    const newChecks = newDelivery.body.instances.filter((i) => i.run === 'check');
    assert.equal(newChecks.length, 1, JSON.stringify(newDelivery.body));
    assert.equal(newChecks[0].id, instance.id);
    assert.equal(newChecks[0].created, false);
  }

  await repeatBoth();
  await waitForTerminal(instance.id, 'complete');
  await assertOneCompletedCheckRun(repo, sha, { conclusion: 'success', outputMarker: PASS_MARKER });
  assert.equal(await checkRunPosts(repo), 1, 'exactly one check run was created');

  // Each repeat is answered only after its work is done (a duplicate or an
  // existing instance creates nothing, in the background neither): the
  // answers are the signal that nothing more happens.
  await repeatBoth();
  assert.equal((await checkRunsFor(repo)).length, 1);
  assert.equal(await checkRunPosts(repo), 1, 'no check run created by repeats after completion');
  assert.equal((await getExecution(instance.id)).execution.status, 'complete');
});

sluiceTest('a repository without .sluice.toml is skipped without a check run', async () => {
  const repo = 'unconfigured';
  const sha = stack.commit(OWNER, repo, { 'README.md': '# no sluice here\n' });
  const { instance } = await openPullRequest(repo, sha);
  const { execution } = await waitForTerminal(instance.id, 'skipped');
  assert.equal(execution.reason, 'not-configured');
  // Terminal: the instance will do nothing more.
  assert.deepEqual(await checkRunsFor(repo), []);
  assert.equal(await checkRunPosts(repo), 0);
});

sluiceTest('bad webhook input is rejected with a JSON error and writes nothing', async () => {
  const repo = 'rejected';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': PASSING_CONFIG, 'README.md': '# rejected\n' });
  const good = JSON.stringify(prPayload(repo, sha));
  const baseline = await countWrites();

  const cases = [
    ['bad signature', 401, () => postWebhookRaw(good, { signature: signBody('not-the-secret', good) })],
    ['missing signature', 401, () => postWebhookRaw(good, { omit: ['X-Hub-Signature-256'] })],
    ['missing X-GitHub-Event', 400, () => postWebhookRaw(good, { omit: ['X-GitHub-Event'] })],
    ['missing X-GitHub-Delivery', 400, () => postWebhookRaw(good, { omit: ['X-GitHub-Delivery'] })],
    ['form-encoded body', 415, () => postWebhookRaw(`payload=${encodeURIComponent(good)}`, { contentType: 'application/x-www-form-urlencoded' })],
    ['malformed JSON', 400, () => postWebhookRaw('{"action": "opened", "pull_request": ')],
    ['wrong shape for pull_request', 422, () => postWebhookRaw(JSON.stringify({ action: 'opened', number: 'one', pull_request: 42 }))],
    ['oversized body', 413, () => postWebhookRaw(Buffer.alloc(OVERSIZED_BYTES, 0x20))],
  ];
  // A refused delivery starts no background work: its answer is the signal.
  for (const [label, status, send] of cases) {
    assertErrorBody(await send(), status, label);
  }
  assert.deepEqual(await countWrites(), baseline);
  assert.equal(await checkRunPosts(repo), 0);
});

sluiceTest('oversized unsigned bodies sent beside a signed delivery: refused on their headers, the signed one runs', async () => {
  const repo = 'junk-beside';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': PASSING_CONFIG, 'README.md': '# beside\n' });
  const wellFormed = `sha256=${'0'.repeat(64)}`;
  const [unsignedA, unsignedB, unsignedChunked, declared, wrongSigned, signed] = await Promise.all([
    sendJunk({ 'Content-Length': String(JUNK_OVER_BYTES) }, JUNK_OVER_BYTES),
    sendJunk({ 'Content-Length': String(JUNK_OVER_BYTES) }, JUNK_OVER_BYTES),
    sendJunk({ 'Transfer-Encoding': 'chunked' }, JUNK_OVER_BYTES),
    sendJunk({ 'X-Hub-Signature-256': wellFormed, 'Content-Length': String(JUNK_OVER_BYTES) }, JUNK_OVER_BYTES),
    sendJunk({ 'X-Hub-Signature-256': wellFormed }, JUNK_UNDER_BYTES),
    openPullRequest(repo, sha),
  ]);
  // Unsigned: refused on the headers (a Worker that read first would answer 413 at the cap).
  for (const junk of [unsignedA, unsignedB, unsignedChunked]) {
    assert.deepEqual([junk.status, junk.body?.error?.code], [401, 'missing_signature'], JSON.stringify(junk));
  }
  // Well-formed but wrong: past the cap by its declared length, naming the limit; or read whole
  // into the HMAC and refused for its signature.
  assert.deepEqual([declared.status, declared.body?.error?.code, declared.body?.error?.message],
    [413, 'payload_too_large', 'webhook bodies are at most 26214400 bytes'], JSON.stringify(declared));
  assert.deepEqual([wrongSigned.status, wrongSigned.body?.error?.code], [401, 'bad_signature'], JSON.stringify(wrongSigned));
  const done = await waitForTerminal(signed.instance.id, 'complete');
  assert.equal(done.execution.sha, sha);
  await assertOneCompletedCheckRun(repo, sha, { conclusion: 'success', outputMarker: PASS_MARKER });
});

sluiceTest('valid events Sluice does not act on are ignored and write nothing', async () => {
  const repo = 'ignored';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': PASSING_CONFIG, 'README.md': '# ignored\n' });
  const pr = prPayload(repo, sha);
  const issue = {
    action: 'opened',
    issue: { number: 7, title: 'An issue', state: 'open', user: pr.sender },
    repository: pr.repository,
    sender: pr.sender,
    installation: pr.installation,
  };
  const baseline = await countWrites();

  const cases = [
    ['issues event', 'issues', issue],
    ['draft pull_request', 'pull_request', prPayload(repo, sha, { draft: true })],
    ["pull_request caused by Sluice's own App", 'pull_request', prPayload(repo, sha, { senderLogin: 'sluice[bot]', senderType: 'Bot' })],
  ];
  for (const [label, event, payload] of cases) {
    const res = await stack.sendWebhook(event, payload);
    assert.ok(res.status >= 200 && res.status < 300, `${label}: ${res.status} ${JSON.stringify(res.body)}`);
    assert.equal(res.body.ignored, true, `${label}: ${JSON.stringify(res.body)}`);
    assert.equal(typeof res.body.reason, 'string', `${label}: reason`);
  }

  // An ignored delivery starts no background work: its answer is the signal.
  assert.deepEqual(await countWrites(), baseline);
  assert.equal(await checkRunPosts(repo), 0);
  assert.deepEqual(await checkRunsFor(repo), []);
});

sluiceTest('the /v1/ API requires the admin bearer token', async () => {
  for (const path of ['/v1/executions', '/v1/deliveries', '/v1/executions/does-not-matter']) {
    const missing = await stack.api(path, { auth: false });
    assert.equal(missing.status, 401, `${path} without a token: ${JSON.stringify(missing.body)}`);
    assert.equal(typeof missing.body?.error?.code, 'string', `${path}: JSON error body`);
    const wrong = await stack.api(path, { auth: false, headers: { Authorization: 'Bearer not-the-admin-token' } });
    assert.equal(wrong.status, 401, `${path} with a wrong token: ${JSON.stringify(wrong.body)}`);
  }
  assert.equal((await stack.api('/v1/executions')).status, 200, 'the right token is accepted');
});

// Issue 8 item 6: the admin API cannot send the installation token to a host it names.
sluiceTest('POST /v1/executions refuses an input that names a clone_url', async () => {
  const input = { repo: `${OWNER}/nope`, sha: 'a'.repeat(40), installation_id: INSTALLATION_ID, pr_number: 1, clone_url: 'http://127.0.0.1:9/x.git' };
  const res = await stack.api('/v1/executions', { method: 'POST', body: { key: 'check:clone-url-attack', run: 'check', input } });
  assert.equal(res.status, 422, JSON.stringify(res.body));
  assert.match(JSON.stringify(res.body), /clone_url/);
  const listed = await stack.api('/v1/executions');
  assert.equal(listed.status, 200);
  assert.ok(!JSON.stringify(listed.body).includes('clone-url-attack'), 'no instance was made');
});

// -- bounded untrusted compute (issue 8 item 4) ---------------------------------------------------

async function stepNames(id) {
  const body = await getExecution(id);
  return (body.steps ?? []).map((s) => s.name);
}

sluiceTest('a newer head of the pull request cancels the older check and kills its process', async () => {
  const repo = 'superseded';
  const pids = stack.sharedFile('superseded.pids');
  // Records its pid, then runs long; only a kill ends it early.
  const config = `[check]\ncommand = "echo $$ >> ${pids}; sleep 300"\n`;
  const a = stack.commit(OWNER, repo, { '.sluice.toml': config, 'v': '1\n' });
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/1`, { head_sha: a });
  const { instance: ia } = await openPullRequest(repo, a);
  const pid = await stack.waitFor(async () => readFileSync(pids, 'utf8').trim() || null, { timeoutMs: RUN_TIMEOUT_MS, message: 'the first head to start' });

  const b = stack.commit(OWNER, repo, { '.sluice.toml': '[check]\ncommand = "true"\n', 'v': '2\n' });
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/1`, { head_sha: b });
  const res = await stack.sendWebhook('pull_request', prPayload(repo, b, { action: 'synchronize' }), randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  await waitForTerminal(res.body.instances[0].id, 'complete');
  await waitForTerminal(ia.id, 'terminated');

  const runA = (await checkRunsFor(repo)).find((r) => r.head_sha === a);
  assert.equal(runA.conclusion, 'cancelled');
  assert.ok(runA.output.summary.includes(b), `names the newer head: ${runA.output.summary}`);
  // Its process is gone: the kill came before the release.
  await stack.waitFor(async () => !existsSync(`/proc/${pid}`), { timeoutMs: 10_000, message: `pid ${pid} to be gone` });
});

sluiceTest('closing a pull request cancels its running check and kills its process', async () => {
  const repo = 'closed';
  const pids = stack.sharedFile('closed.pids');
  // Records its pid, then runs long; only a kill ends it early.
  const config = `[check]\ncommand = "echo $$ >> ${pids}; sleep 300"\n`;
  const a = stack.commit(OWNER, repo, { '.sluice.toml': config, 'v': '1\n' });
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/1`, { head_sha: a });
  const { instance } = await openPullRequest(repo, a);
  const pid = await stack.waitFor(async () => readFileSync(pids, 'utf8').trim() || null, { timeoutMs: RUN_TIMEOUT_MS, message: 'the check to start' });

  // GitHub closes the pull request, then sends the event.
  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/pulls/1/close`, { merged: false });
  const closed = prPayload(repo, a, { action: 'closed', closedAt: new Date().toISOString() });
  const res = await stack.sendWebhook('pull_request', closed, randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.equal(res.body.instances[0]?.run, 'cancel-checks', JSON.stringify(res.body));
  await waitForTerminal(res.body.instances[0].id, 'complete');
  await waitForTerminal(instance.id, 'terminated');
  const [run] = await checkRunsFor(repo);
  assert.equal(run.conclusion, 'cancelled');
  assert.match(run.output.summary, /pull request #1 was closed/);
  await stack.waitFor(async () => !existsSync(`/proc/${pid}`), { timeoutMs: 10_000, message: `pid ${pid} to be gone` });
});

sluiceTest('a first-time contributor\'s fork runs only once a maintainer presses Approve and run', async () => {
  const repo = 'forked';
  const marker = stack.sharedFile('forked.ran');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': `[check]\ncommand = "echo ran >> ${marker}"\n` });
  const payload = prPayload(repo, sha, { headOwner: 'stranger', authorAssociation: 'FIRST_TIME_CONTRIBUTOR', number: 2 });
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const id = res.body.instances[0].id;
  const run = await stack.waitFor(async () => {
    const r = (await checkRunsFor(repo)).find((c) => c.head_sha === sha);
    return r?.actions?.some((a) => a.identifier === 'approve') ? r : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: 'the Approve and run button' });
  assert.equal(run.output.title, 'Waiting for approval');

  const pressBy = async (login) => {
    const body = checkRunRequestedActionPayload({ owner: OWNER, repo, checkRun: run, identifier: 'approve', senderLogin: login, installationId: INSTALLATION_ID });
    const r = await stack.sendWebhook('check_run', body, randomUUID());
    assert.equal(r.status, 202, JSON.stringify(r.body));
  };
  await pressBy('drive-by');
  // The press was looked at (a decider check was journaled) and changed nothing.
  await stack.waitFor(async () => (await stepNames(id)).includes('check decider'), { timeoutMs: RUN_TIMEOUT_MS, message: 'the first press to be checked' });
  assert.equal((await getExecution(id)).execution.status, 'waiting');
  assert.equal(readFileSync(marker, 'utf8'), '', 'no code ran on a reader\'s press');

  await stack.standinPost(`/_standin/repos/${OWNER}/${repo}/collaborators/maintainer`, { permission: 'write' });
  await pressBy('maintainer');
  await waitForTerminal(id, 'complete');
  assert.equal(readFileSync(marker, 'utf8'), 'ran\n');
  const done = (await checkRunsFor(repo)).find((c) => c.head_sha === sha);
  assert.equal(done.conclusion, 'success');
  assert.deepEqual(done.actions, [], 'the button is gone');
});

// Deliveries sent at once are a burst (http::ack_first: 16 within 250 ms), whose creations wait
// until it ends; more than one burst's worth, and all a repository's pull requests at once.
const BURST_PULLS = 24;
// The burst's checks run CHECKS_PER_REPO (2) at a time: 12 rounds of a clone and a one-line
// command, ~4 s here; the bound allows a loaded 2-core CI machine many times slower.
const BURST_RUNS_TIMEOUT_MS = 4 * 60_000;

test('a burst of pull requests: every delivery answered, every check created once and run once', { timeout: BURST_RUNS_TIMEOUT_MS + 60_000 }, withLogs(async () => {
  const repo = 'burst';
  const marker = stack.sharedFile('burst.ran');
  stack.commit(OWNER, repo, { '.sluice.toml': `[check]\ncommand = "echo $SLUICE_SHA >> ${marker}"\n` });
  const shas = Array.from({ length: BURST_PULLS }, (_, i) => stack.commit(OWNER, repo, { V: `${i}\n` }));
  const answers = await Promise.all(shas.map((sha, i) => stack.sendWebhook('pull_request', prPayload(repo, sha, { number: 100 + i }), randomUUID())));
  for (const res of answers) {
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const checks = res.body.instances.filter((i) => i.run === 'check');
    assert.equal(checks.length, 1, JSON.stringify(res.body));
    assert.equal(checks[0].created, true);
  }
  const ids = answers.map((res) => res.body.instances.find((i) => i.run === 'check').id);
  assert.equal(new Set(ids).size, BURST_PULLS, 'one instance per delivery');
  // One deadline for all: which check the pool admits last is not the first delivery's.
  const ended = await stack.waitFor(async () => {
    const bodies = await Promise.all(ids.map(getExecution));
    return bodies.every((b) => TERMINAL.has(b.execution.status)) ? bodies : null;
  }, { timeoutMs: BURST_RUNS_TIMEOUT_MS, intervalMs: 250, message: 'every check of the burst to finish' });
  assert.deepEqual(ended.map((b) => b.execution.status), ids.map(() => 'complete'));
  // Each command ran exactly once (counted outside the engine), and each head has one check run.
  const ran = readFileSync(marker, 'utf8').trim().split('\n').sort();
  assert.deepEqual(ran, [...shas].sort());
  const runs = await checkRunsFor(repo);
  for (const sha of shas) {
    const mine = runs.filter((r) => r.head_sha === sha);
    assert.equal(mine.length, 1, `check runs of ${sha}`);
    assert.equal(mine[0].conclusion, 'success');
  }
}));
