// End-to-end: every way a run starts besides a plain pull_request or push (issue 10), through the
// built Worker under `wrangler dev`, the GitHub stand-in and real git repositories:
// - a failed check re-run from GitHub's Re-run button (`check_run` `rerequested`, GitHub's
//   payload shape) passes on its second attempt as a second check run;
// - `check_suite` `requested` starts nothing;
// - a Dependabot pull request gets its check;
// - Action-mode dispatch with a good, a wrong, a stale and a replayed signature, and a dispatched
//   rollback of an older commit, whose Re-run after a newer deploy deploys nothing;
// - a dispatched deploy into an environment that restricts branches: refused with the key alone
//   and with a token minted for another branch (or audience, or signed by a stranger, or
//   expired), deployed with the token the action's script gets the way a workflow step does;
// - a schedule firing once per slot although the cron handler is driven twice.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, test } from 'node:test';
import { dispatch, dispatchBody, repositoryKey, signDispatch } from '../../scripts/dispatch.mjs';
import { checkRunRerequestedPayload, checkSuitePayload, pullRequestPayload, pushPayload } from '../../tools/github-standin/webhooks.mjs';
import { APP_ID, INSTALLATION_ID, TERMINAL, startStack } from './harness.mjs';

const OWNER = 'acme';
// A run is a token exchange, a config read, a local clone and a one-line command: a few seconds;
// 60 s allows a loaded 2-core CI machine.
const RUN_TIMEOUT_MS = 60_000;
const TEST_TIMEOUT_MS = 3 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;
const DISPATCH_SECRET = `dispatch-${randomUUID()}`;
// `production` restricts branches: only main's workflows deploy there, with their OIDC token.
const ENVIRONMENTS = "[production]\nrepos = ['acme/guarded']\nbranches = ['main']\n";
const DISPATCH_SCRIPT = fileURLToPath(new URL('../../scripts/dispatch.mjs', import.meta.url));
// The action's script: a token request and one dispatch.
const SCRIPT_TIMEOUT_MS = 60_000;
// Older than the Worker's 5-minute window (DISPATCH_WINDOW_MS) by a minute.
const STALE_S = 6 * 60;

let stack;

before(async () => {
  stack = await startStack({ vars: { DISPATCH_SECRET, ENVIRONMENTS } });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

function sluiceTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail() ?? '(no stack)'}\n`);
      throw err;
    }
  });
}

async function waitForTerminal(id, expected) {
  const body = await stack.waitFor(async () => {
    const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
    return res.status === 200 && TERMINAL.has(res.body.execution.status) ? res.body : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: `execution ${id} to finish` });
  assert.equal(body.execution.status, expected, `execution ${id}: ${JSON.stringify(body, null, 2)}`);
  return body.execution;
}

async function checkRuns(repo) {
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  return runs;
}

async function executionsOf(repo, run) {
  const res = await stack.api(`/v1/executions?repo=${OWNER}/${repo}&run=${run}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.executions;
}

function pr(repo, sha, overrides = {}) {
  return pullRequestPayload({ owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo), ...overrides });
}

async function created(event, payload, run) {
  const res = await stack.sendWebhook(event, payload);
  assert.equal(res.status, 202, `${event}: ${JSON.stringify(res.body)}`);
  const mine = res.body.instances.filter((i) => i.run === run);
  assert.equal(mine.length, 1, JSON.stringify(res.body));
  assert.equal(mine[0].created, true);
  return mine[0].id;
}

sluiceTest('a failed check re-run from GitHub passes on its second attempt as a second check run', async () => {
  const repo = 'flaky';
  const attempts = stack.sharedFile('flaky-attempts');
  // Fails the first time it runs, passes after: a flaky test.
  const config = `[check]\ncommand = "n=$(wc -l < ${attempts}); echo attempt >> ${attempts}; test $n -ge 1"\n`;
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config, 'README.md': '# flaky\n' });
  const first = await created('pull_request', pr(repo, sha, { number: 4 }), 'check');
  await waitForTerminal(first, 'complete');
  const [failed] = await checkRuns(repo);
  assert.equal(failed.conclusion, 'failure', JSON.stringify(failed));

  // A redelivery of the same press is the same attempt; a new press would be another.
  const payload = checkRunRerequestedPayload({
    owner: OWNER, repo, checkRun: failed, pullNumber: 4, appId: APP_ID, installationId: INSTALLATION_ID,
  });
  const delivery = randomUUID();
  const res = await stack.sendWebhook('check_run', payload, delivery);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const [rerun] = res.body.instances;
  assert.equal(rerun.run, 'check');
  assert.notEqual(rerun.id, first, 'a fresh instance, never the finished one');
  const again = await stack.sendWebhook('check_run', payload, delivery);
  assert.equal(again.body.duplicate, true);
  await waitForTerminal(rerun.id, 'complete');

  const runs = await checkRuns(repo);
  assert.equal(runs.length, 2, JSON.stringify(runs, null, 2));
  const byInstance = Object.fromEntries(runs.map((r) => [r.external_id, r]));
  assert.equal(byInstance[first].conclusion, 'failure', 'the first attempt keeps its result');
  assert.equal(byInstance[rerun.id].conclusion, 'success');
  assert.equal(byInstance[rerun.id].head_sha, sha);
  assert.equal(readFileSync(attempts, 'utf8').trim().split('\n').length, 2, 'the command ran twice');
});

sluiceTest('check_suite requested starts nothing; a Dependabot pull request gets its check', async () => {
  const repo = 'bots';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': '[check]\ncommand = "true"\n', 'README.md': '# bots\n' });
  const requested = await stack.sendWebhook('check_suite', checkSuitePayload({
    action: 'requested', owner: OWNER, repo, headSha: sha, headBranch: 'main', appId: APP_ID, installationId: INSTALLATION_ID,
  }));
  assert.equal(requested.status, 200, JSON.stringify(requested.body));
  assert.equal(requested.body.ignored, true);

  const check = await created('pull_request', pr(repo, sha, { senderLogin: 'dependabot[bot]', senderType: 'Bot' }), 'check');
  await waitForTerminal(check, 'complete');
  const runs = await checkRuns(repo);
  assert.deepEqual(runs.map((r) => [r.external_id, r.conclusion]), [[check, 'success']]);
});

sluiceTest('dispatch: a good signature starts the run; wrong, stale and replayed ones are 401', async () => {
  const repo = 'dispatched';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': '[check]\ncommand = "test \\"$SLUICE_INPUT_TARGET\\" = eu"\n', 'README.md': '# d\n' });
  const body = dispatchBody({ run: 'check', repo: `${OWNER}/${repo}`, branch: 'main', inputs: { TARGET: 'eu' } });
  const now = Math.floor(Date.now() / 1000);
  const key = repositoryKey(DISPATCH_SECRET, `${OWNER}/${repo}`);
  const good = await dispatch(stack.url, key, body, { timestampS: now });
  assert.equal(good.status, 202, JSON.stringify(good.json));
  assert.equal(good.json.sha, sha);
  await waitForTerminal(good.json.instance_id, 'complete');
  const [run] = await checkRuns(repo);
  assert.equal(run.conclusion, 'success', 'the command saw its input');

  const replayed = await dispatch(stack.url, key, body, { timestampS: now });
  assert.deepEqual([replayed.status, replayed.json.error.code], [401, 'replayed']);
  const wrong = await dispatch(stack.url, 'not-the-key', body);
  assert.deepEqual([wrong.status, wrong.json.error.code], [401, 'bad_signature']);
  const operatorSecret = await dispatch(stack.url, DISPATCH_SECRET, body);
  assert.equal(operatorSecret.status, 401, 'only the repository key signs');
  const otherRepoKey = await dispatch(stack.url, repositoryKey(DISPATCH_SECRET, `${OWNER}/other`), body);
  assert.equal(otherRepoKey.status, 401, "another repository's key does not sign for this one");
  const stale = await dispatch(stack.url, key, body, { timestampS: now - STALE_S });
  assert.deepEqual([stale.status, stale.json.error.code], [401, 'stale_signature']);
  const forged = await dispatch(stack.url, key, body, { timestampS: now, signature: signDispatch(key, now + 1, body) });
  assert.equal(forged.status, 401, 'the timestamp is signed');
  const unknown = await dispatch(stack.url, key, dispatchBody({ run: 'release', repo: `${OWNER}/${repo}` }));
  assert.deepEqual([unknown.status, unknown.json.error.code], [422, 'unknown_run']);
  const nowhere = `${OWNER}/nowhere`;
  const notInstalled = await dispatch(stack.url, repositoryKey(DISPATCH_SECRET, nowhere), dispatchBody({ run: 'check', repo: nowhere, branch: 'main' }));
  assert.equal(notInstalled.status, 404, JSON.stringify(notInstalled.json));
  assert.equal((await checkRuns(repo)).length, 1, 'no refused request started anything');
});

sluiceTest('dispatch: a rollback deploys the older commit although the branch moved on', async () => {
  const repo = 'rollback';
  const deployed = stack.sharedFile('rollback-deployed');
  const config = `[deploy]\nbranch = "main"\ncommand = "echo $SLUICE_SHA >> ${deployed}"\n`;
  const old = stack.commit(OWNER, repo, { '.sluice.toml': config, 'v.txt': '1\n' });
  const head = stack.commit(OWNER, repo, { 'v.txt': '2\n' });
  const key = repositoryKey(DISPATCH_SECRET, `${OWNER}/${repo}`);
  const elsewhere = stack.commit(OWNER, repo, { 'v.txt': 'unmerged\n' }, { branch: 'unmerged' });
  const refused = await dispatch(stack.url, key, dispatchBody({ run: 'deploy', repo: `${OWNER}/${repo}`, sha: elsewhere }));
  assert.equal(refused.status, 422, `a commit not on main is never deployed: ${JSON.stringify(refused.json)}`);
  const res = await dispatch(stack.url, key, dispatchBody({ run: 'deploy', repo: `${OWNER}/${repo}`, sha: old }));
  assert.equal(res.status, 202, JSON.stringify(res.json));
  assert.equal(res.json.input.imperative, true);
  await waitForTerminal(res.json.instance_id, 'complete');
  assert.deepEqual(readFileSync(deployed, 'utf8').trim().split('\n'), [old], `not ${head}: the explicit revision`);
});

sluiceTest('dispatch: a deploy into an environment that restricts branches needs an OIDC token from that branch', async () => {
  const repo = 'guarded';
  const full = `${OWNER}/${repo}`;
  const deployed = stack.sharedFile('guarded-deployed');
  const config = `[deploy]\nbranch = "main"\ncommand = "echo $SLUICE_SHA >> ${deployed}"\nenvironment = "production"\n`;
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config, 'v.txt': '1\n' });
  const key = repositoryKey(DISPATCH_SECRET, full);
  const body = dispatchBody({ run: 'deploy', repo: full });
  // A token from the stand-in's issuer: main's workflow of this repository, for this Sluice.
  const mint = async (claims = {}, extra = {}) => (await stack.standinPost('/_standin/oidc/tokens', {
    claims: { repository: full, ref: 'refs/heads/main', ...claims }, audience: stack.url, ...extra,
  })).value;
  const refusal = async (oidcToken) => {
    const res = await dispatch(stack.url, key, body, { oidcToken });
    return [res.status, res.json?.error?.code];
  };

  // The key alone (what a workflow on any branch can read) is not enough.
  assert.deepEqual(await refusal(undefined), [403, 'oidc_required']);
  // Nor a token of a workflow that ran on another branch...
  assert.deepEqual(await refusal(await mint({ ref: 'refs/heads/feature' })), [403, 'oidc_wrong_ref']);
  // ...or one minted for another audience (GitHub's default), signed by a stranger, of a key GitHub
  // never published, or expired: the Worker's WebCrypto checks each against the issuer's keys.
  const now = Math.floor(Date.now() / 1000);
  assert.deepEqual(await refusal(await mint({}, { audience: undefined })), [401, 'oidc_wrong_audience']);
  assert.deepEqual(await refusal(await mint({}, { key: 'stranger' })), [401, 'oidc_bad_signature']);
  assert.deepEqual(await refusal(await mint({}, { kid: 'no-such-key' })), [401, 'oidc_unknown_kid']);
  assert.deepEqual(await refusal(await mint({ iat: now - 3600, nbf: now - 4200, exp: now - 3300 })), [401, 'oidc_expired']);

  // As a step of a workflow on main granted `id-token: write`: the action's script asks the runner
  // for a token for Sluice's URL and sends it.
  const job = await stack.standinPost('/_standin/oidc/jobs', { claims: { repository: full, ref: 'refs/heads/main' } });
  const output = join(stack.tmpDir, 'guarded-github-output');
  writeFileSync(output, '');
  await promisify(execFile)(process.execPath, [DISPATCH_SCRIPT], {
    timeout: SCRIPT_TIMEOUT_MS,
    env: {
      PATH: process.env.PATH, SLUICE_URL: `${stack.url}/`, SLUICE_DISPATCH_KEY: key, SLUICE_RUN: 'deploy',
      SLUICE_REPO: full, SLUICE_INPUTS: '{}', SLUICE_OIDC: 'true', GITHUB_OUTPUT: output,
      ACTIONS_ID_TOKEN_REQUEST_URL: job.request_url, ACTIONS_ID_TOKEN_REQUEST_TOKEN: job.request_token,
    },
  });
  const id = /^instance-id=(.+)$/m.exec(readFileSync(output, 'utf8'))?.[1];
  assert.ok(id, 'the script wrote the instance id');
  const execution = await waitForTerminal(id, 'complete');
  assert.match(execution.key, /:dispatch-oidc-[0-9a-f]{16}$/, 'named by its token');
  const origin = JSON.parse(execution.input_json).dispatch?.origin;
  assert.deepEqual([origin?.repository, origin?.ref], [full, 'refs/heads/main'], 'what the token proved is recorded');
  assert.deepEqual(readFileSync(deployed, 'utf8').trim().split('\n'), [sha], 'deployed once, by the token\'s dispatch alone');
  const [run] = await checkRuns(repo);
  assert.equal(run.conclusion, 'success');
});

sluiceTest('a re-run of a dispatched rollback after a newer deploy deploys nothing older than the head', async () => {
  const repo = 'rollback-rerun';
  const deployed = stack.sharedFile('rollback-rerun-deployed');
  const config = `[deploy]\nbranch = "main"\ncommand = "echo $SLUICE_SHA >> ${deployed}"\n`;
  const old = stack.commit(OWNER, repo, { '.sluice.toml': config, 'v.txt': '1\n' });
  const head = stack.commit(OWNER, repo, { 'v.txt': '2\n' });
  const key = repositoryKey(DISPATCH_SECRET, `${OWNER}/${repo}`);
  const rollback = await dispatch(stack.url, key, dispatchBody({ run: 'deploy', repo: `${OWNER}/${repo}`, sha: old }));
  assert.equal(rollback.status, 202, JSON.stringify(rollback.json));
  await waitForTerminal(rollback.json.instance_id, 'complete');
  // A newer deploy: a push of the head.
  const push = pushPayload({ owner: OWNER, repo, before: old, after: head, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo) });
  await waitForTerminal(await created('push', push, 'deploy'), 'complete');
  assert.deepEqual(readFileSync(deployed, 'utf8').trim().split('\n'), [old, head]);

  // Re-run pressed on the rollback's sluice/deploy check run: a new arrival of the old commit,
  // head-checked, so it deploys nothing.
  const rollbackRun = (await checkRuns(repo)).find((r) => r.external_id === rollback.json.instance_id);
  assert.equal(rollbackRun?.name, 'sluice/deploy', JSON.stringify(await checkRuns(repo)));
  const press = checkRunRerequestedPayload({ owner: OWNER, repo, checkRun: rollbackRun, appId: APP_ID, installationId: INSTALLATION_ID });
  const rerun = await created('check_run', press, 'deploy');
  const ended = await waitForTerminal(rerun, 'skipped');
  assert.equal(ended.reason, 'not_current', JSON.stringify(ended));
  const rerunRun = (await checkRuns(repo)).find((r) => r.external_id === rerun);
  assert.equal(rerunRun?.conclusion, 'neutral', JSON.stringify(rerunRun));
  assert.deepEqual(readFileSync(deployed, 'utf8').trim().split('\n'), [old, head], 'nothing older than the head deployed again');
});

// A daily cron whose slot is this minute: the latest slot stays this one for the rest of the day,
// so two ticks a few seconds apart reach the same slot even across a minute boundary.
function cronEndingNow() {
  const now = new Date();
  return `${now.getUTCMinutes()} ${now.getUTCHours()} * * *`;
}

sluiceTest('a schedule fires once per slot although the cron handler runs twice', async () => {
  const repo = 'nightly';
  const cron = cronEndingNow();
  const config = `[check]\ncommand = "true"\n\n[[schedule]]\ncron = "${cron}"\nrun = "check"\n`;
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config, 'README.md': '# nightly\n' });
  const push = pushPayload({ owner: OWNER, repo, after: sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo) });
  const sync = await created('push', push, 'schedules');
  await waitForTerminal(sync, 'complete');

  for (let tick = 0; tick < 2; tick++) {
    const res = await stack.scheduled();
    assert.equal(res.status, 200, res.body);
  }
  const fired = await stack.waitFor(async () => {
    const checks = await executionsOf(repo, 'check');
    return checks.length > 0 ? checks : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: 'the scheduled check' });
  await waitForTerminal(fired[0].id, 'complete');
  // Both ticks have answered and the slot's run finished: a second run would exist by now.
  const checks = await executionsOf(repo, 'check');
  assert.equal(checks.length, 1, JSON.stringify(checks, null, 2));
  assert.equal(checks[0].sha, sha);
  assert.match(checks[0].key, /:schedule-[0-9a-f]+-\d+$/);
  const [run] = await checkRuns(repo);
  assert.equal(run.conclusion, 'success');
});

sluiceTest('GET /v1/setup answers what is configured, behind the admin token', async () => {
  const refused = await stack.api('/v1/setup', { auth: false });
  assert.equal(refused.status, 401);
  const res = await stack.api('/v1/setup');
  assert.equal(res.status, 200, JSON.stringify(res.body));
  const byName = Object.fromEntries(res.body.checks.map((c) => [c.name, c]));
  assert.deepEqual(res.body.missing, [], JSON.stringify(res.body, null, 2));
  assert.equal(res.body.ok, true);
  for (const name of ['webhook_secret', 'private_key', 'github_api', 'd1', 'r2', 'sandbox', 'dispatch_secret', 'dispatch_oidc']) {
    assert.equal(byName[name]?.ok, true, `${name}: ${JSON.stringify(byName[name])}`);
  }
  assert.match(byName.github_api.detail, /"sluice"/, 'GitHub answered GET /app with a JWT the key signed');
  assert.match(byName.dispatch_oidc.detail, /1 keys at http:\/\/127\.0\.0\.1:\d+\/_standin\/oidc\/\.well-known\/jwks/, 'the issuer\'s keys were fetched');
  assert.ok(!JSON.stringify(res.body).includes(DISPATCH_SECRET), 'no value is shown');
});
