// End-to-end inside real containers: serialized deploys (ADR-0004). A burst of signed pushes to
// one branch, each deploy in its own container, whose command prints when it starts and ends
// (the containers share this machine's clock) and the configured secret: no two deploys overlap,
// the last deploy is the newest commit, every other push ends a neutral `sluice/deploy` skip,
// and the secret reaches the command but never the stored log, the journal, the index or a
// summary.
//
// Run by `npm test` when the machine can run containers (scripts/test.sh), and by
// `npm run test:containers`.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { pushPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, startStack } from '../e2e/harness.mjs';
import {
  OWNER, RUN_TIMEOUT_MS, TERMINAL, checkRuns, execution, marker1, storedFiles, storedLogs,
} from './helpers.mjs';

const AUTO_REASONS = new Set(['superseded', 'not_current', 'queued_timeout', 'confirmation_timeout']);
// The secret the deploy exports; long enough that redaction applies (secret.rs: 4+ characters).
const DEPLOY_TOKEN = 'deploy-token-in-a-container-0123456789';
// The operator's grant (README: Environments): acme's main branches deploy to production, which
// exports DEPLOY_TOKEN. TOML literal strings: an env file cannot carry a double quote.
const ENVIRONMENTS = "[production]\nrepos = ['acme/*']\nbranches = ['main']\nsecrets = ['DEPLOY_TOKEN']\n";
// Pushes in a burst, and the gap between them: several arrive while the first deploy runs.
const BURST = 5;
const BURST_GAP_MS = 250;
// Each deploy: a container start, a clone and a 1.5 s command, one after another; the bound is
// the run bound twice over (a cold machine, several deploys in a row).
const BURST_TIMEOUT_MS = 2 * RUN_TIMEOUT_MS;
const BURST_POLL_MS = 250;
const TEST_TIMEOUT_MS = BURST_TIMEOUT_MS + 60_000;
const STACK_START_TIMEOUT_MS = 45 * 60_000;

// Prints its start and end (ns on the shared clock) around a sleep, and the secret.
const CONFIG = [
  '[deploy]',
  'branch = "main"',
  `command = '''printf "sluice-%s=%s\\n" start "$(date +%s%N)"; echo "token=$DEPLOY_TOKEN"; sleep 1.5; printf "sluice-%s=%s\\n" end "$(date +%s%N)"'''`,
  'environment = "production"',
  '',
].join('\n');

let stack;

before(async () => {
  stack = await startStack({ containers: true, vars: { DEPLOY_TOKEN, ENVIRONMENTS } });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

async function push(repo, sha, previous) {
  const payload = pushPayload({ owner: OWNER, repo, after: sha, before: previous, ref: 'refs/heads/main', installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo) });
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
      const { execution: e } = await execution(stack, id);
      if (TERMINAL.has(e.status)) out.set(id, e);
    }
    return out.size === ids.length;
  }, { timeoutMs: BURST_TIMEOUT_MS, intervalMs: BURST_POLL_MS, message: 'every deploy of the burst to finish' });
  return ids.map((id) => out.get(id));
}

test('a burst of pushes deployed in containers: never two at once, the newest last, the secret nowhere stored', { timeout: TEST_TIMEOUT_MS }, async (t) => {
  try {
    await burst();
  } catch (err) {
    console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail(150) ?? '(no stack)'}\n`);
    throw err;
  }
});

async function burst() {
  const repo = 'boxed-svc';
  const shas = [];
  const ids = [];
  for (let i = 0; i < BURST; i++) {
    const sha = stack.commit(OWNER, repo, { '.sluice.toml': CONFIG, VERSION: `${i}\n` }, { message: `v${i}` });
    ids.push(await push(repo, sha, shas.at(-1)));
    shas.push(sha);
    await new Promise((r) => setTimeout(r, BURST_GAP_MS));
  }
  const ends = await waitAllTerminal(ids);
  const checks = await checkRuns(stack, repo);

  const deploys = [];
  for (const [i, e] of ends.entries()) {
    const check = checks.find((c) => c.head_sha === shas[i] && c.name === 'sluice/deploy');
    assert.ok(check, `a sluice/deploy check run for ${shas[i]}`);
    assert.equal(check.status, 'completed');
    const summary = check.output.summary;
    assert.ok(!summary.includes(DEPLOY_TOKEN), `the secret is not in a summary: ${summary}`);
    if (e.status === 'complete') {
      assert.equal(check.conclusion, 'success', summary);
      assert.ok(summary.includes('token=***'), `the secret reached the command and was scrubbed: ${summary}`);
      deploys.push({ sha: shas[i], start: BigInt(marker1(summary, 'start')), end: BigInt(marker1(summary, 'end')) });
    } else {
      assert.equal(e.status, 'skipped', JSON.stringify(e));
      assert.ok(AUTO_REASONS.has(e.reason), `skip reason ${e.reason}`);
      assert.equal(check.conclusion, 'neutral');
    }
  }

  deploys.sort((a, b) => (a.start < b.start ? -1 : 1));
  assert.ok(deploys.length >= 1, 'something deployed');
  for (let i = 1; i < deploys.length; i++) {
    assert.ok(deploys[i].start > deploys[i - 1].end, `deploy ${deploys[i].sha} started before ${deploys[i - 1].sha} ended`);
  }
  assert.equal(deploys.at(-1).sha, shas.at(-1), 'production ends on the newest commit');
  assert.ok(deploys.length < BURST, `a burst must not deploy every commit (${deploys.length} of ${BURST})`);

  // The stored logs (R2) are the deploys' own, scrubbed; nothing the stack stored (R2, the
  // journals, D1) holds the secret.
  const logs = storedLogs(stack).filter((log) => log.includes('token='));
  assert.equal(logs.length, deploys.length, 'one stored log per deploy');
  for (const log of logs) assert.ok(log.includes('token=***'), log);
  const leaks = storedFiles(stack).filter((f) => f.bytes.includes(DEPLOY_TOKEN)).map((f) => f.path);
  assert.deepEqual(leaks, [], 'the secret is in no stored file');
}
