// End-to-end: pipelines (`[jobs.<name>]`, issue 27) through the built Worker under `wrangler dev`,
// the GitHub stand-in, the local sandbox agent and real git repositories:
// - lint and test run at once, e2e only after test passed, each its own check run, and
//   sluice/check sums them up; a failing test skips e2e naming test;
// - `shards = 4` runs four shards at once, each told its index;
// - a docs-only change reports the path-filtered job `skipped` "no matching change";
// - a merge queue group runs the jobs marked `on = ["merge_group"]` on the queue's commit;
// - a newer head of the pull request cancels the older pipeline's live job, killing it;
// - Re-run on a job's check run re-runs that job and what needs it, keeping the rest;
// - a job's artifacts reach the job that needs it, and download behind a signed link;
// - a job's cache is saved on a miss, restored on a hit, falls back to its prefix, and a fork's
//   is never read by another pull request;
// - a job of several `steps` runs each in the tree the last left, each with its own log and
//   time on the page; a failing step ends its job and the rest read "not run".

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { chromium } from 'playwright-core';
import { after, before, test } from 'node:test';
import { checkRunRerequestedPayload, mergeGroupPayload, pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { APP_ID, INSTALLATION_ID, TERMINAL, startStack } from './harness.mjs';

const OWNER = 'acme';
// A pipeline is a few runs of a clone and a one-line command each, in waves: 90 s allows a
// loaded 2-core CI machine.
const RUN_TIMEOUT_MS = 90_000;
const TEST_TIMEOUT_MS = 4 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;
// Four shards at once need four check slots of one repository (the default is 2).
const VARS = { CHECKS_PER_REPO: '6', POOL_CAPACITY: '8' };

let stack;

before(async () => {
  stack = await startStack({ vars: VARS });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

function pipelineTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail() ?? '(no stack)'}\n`);
      throw err;
    }
  });
}

function pr(repo, sha, overrides = {}) {
  return pullRequestPayload({ owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo), ...overrides });
}

/// The commit's check (the pipeline's parent) a delivery started.
async function parentOf(event, payload) {
  const res = await stack.sendWebhook(event, payload, randomUUID());
  assert.equal(res.status, 202, `${event}: ${JSON.stringify(res.body)}`);
  const checks = res.body.instances.filter((i) => i.run === 'check');
  assert.equal(checks.length, 1, JSON.stringify(res.body));
  return checks[0].id;
}

async function waitForTerminal(id) {
  const body = await stack.waitFor(async () => {
    const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
    return res.status === 200 && TERMINAL.has(res.body.execution.status) ? res.body : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: `execution ${id} to finish` });
  return body.execution;
}

async function runsOn(repo, sha) {
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  return runs.filter((r) => r.head_sha === sha);
}

/// The newest check run of each name on `sha`.
async function byName(repo, sha) {
  const out = {};
  for (const r of (await runsOn(repo, sha)).sort((a, b) => a.id - b.id)) out[r.name] = r;
  return out;
}

/// `kind ns` lines a job's command appended, by kind.
function marks(file) {
  if (!existsSync(file)) return {};
  const out = {};
  for (const line of readFileSync(file, 'utf8').trim().split('\n').filter(Boolean)) {
    const [kind, ns] = line.split(' ');
    (out[kind] ??= []).push(BigInt(ns));
  }
  return out;
}

// Debian's package puts the real binary here; /usr/bin/chromium is a wrapper script.
function chromiumPath() {
  const candidates = [process.env.SLUICE_CHROMIUM, '/usr/lib/chromium/chromium', '/usr/bin/chromium'].filter(Boolean);
  const found = candidates.find((p) => existsSync(p));
  assert.ok(found, `no chromium at ${candidates.join(', ')}: install Debian's chromium (scripts/setup.sh does as root)`);
  return found;
}

/// What a person sees of the execution page's pipeline, in a real Chromium, signed in as
/// `npm start`'s link does: each job box's text, by job name.
async function pipelineSeen(id) {
  return onExecutionPage(id, async (page) => {
    const boxes = page.locator('#pipeline .job');
    const seen = {};
    for (let i = 0; i < await boxes.count(); i++) {
      const text = (await boxes.nth(i).innerText()).trim();
      seen[text.split(/\s/)[0]] = text;
    }
    seen.outcome = (await page.locator('#facts dd').first().innerText()).trim();
    return seen;
  });
}

/// `read(page)` on execution `id`'s page in a real Chromium, signed in as `npm start`'s link does.
async function onExecutionPage(id, read) {
  const browser = await chromium.launch({ executablePath: chromiumPath(), headless: true });
  try {
    const page = await (await browser.newContext()).newPage();
    await page.goto(`${stack.url}/ui/login#token=${stack.adminToken}`);
    await page.waitForURL(/\/ui\/executions$/);
    await page.goto(`${stack.url}/ui/executions/${encodeURIComponent(id)}`);
    return await read(page);
  } finally {
    await browser.close();
  }
}

const mark = (file, kind) => `echo ${kind} $(date +%s%N) >> ${file}`;

pipelineTest('lint and test run at once, e2e after test; a failing test skips e2e naming it', async () => {
  const repo = 'three';
  const log = stack.sharedFile('three.log');
  const config = [
    '[jobs.lint]', `command = "${mark(log, 'lint-start')}; sleep 2; ${mark(log, 'lint-end')}"`, '',
    '[jobs.test]', `command = "${mark(log, 'test-start')}; sleep 2; test -f ok && ${mark(log, 'test-end')}"`, '',
    '[jobs.e2e]', `command = "${mark(log, 'e2e-start')}"`, 'needs = ["test"]', '',
  ].join('\n');
  const good = stack.commit(OWNER, repo, { '.sluice.toml': config, ok: 'yes\n' });
  const parent = await parentOf('pull_request', pr(repo, good, { number: 3 }));
  assert.equal((await waitForTerminal(parent)).status, 'complete');
  const runs = await byName(repo, good);
  for (const name of ['sluice/lint', 'sluice/test', 'sluice/e2e', 'sluice/check']) {
    assert.equal(runs[name]?.conclusion, 'success', `${name}: ${JSON.stringify(runs[name])}`);
  }
  const m = marks(log);
  assert.ok(m['lint-start'][0] < m['test-end'][0] && m['test-start'][0] < m['lint-end'][0], 'lint and test overlapped');
  assert.ok(m['test-end'][0] < m['e2e-start'][0], 'e2e started after test passed');
  assert.match(runs['sluice/check'].output.summary, /`e2e` \(after test\) \| ✅ passed/);
  assert.ok(runs['sluice/e2e'].started_at >= runs['sluice/test'].completed_at, 'check runs in needs order');

  const bad = stack.commit(OWNER, repo, { '.sluice.toml': config }, { removeOthers: true });
  const failing = await parentOf('pull_request', pr(repo, bad, { number: 3, action: 'synchronize' }));
  assert.equal((await waitForTerminal(failing)).status, 'complete');
  const after = await byName(repo, bad);
  assert.equal(after['sluice/test'].conclusion, 'failure');
  assert.equal(after['sluice/lint'].conclusion, 'success');
  assert.equal(after['sluice/e2e'].conclusion, 'skipped');
  assert.match(after['sluice/e2e'].output.summary, /`test`, which it needs, failed/);
  assert.equal(after['sluice/check'].conclusion, 'failure');
  assert.match(after['sluice/check'].output.summary, /Failed: test did not pass/);
  assert.equal(marks(log)['e2e-start'].length, 1, 'e2e never ran for the failing commit');

  // The API returns the graph; the page shows it as a person reads it.
  const api = await stack.api(`/v1/executions/${encodeURIComponent(failing)}`);
  const graph = Object.fromEntries(api.body.pipeline.jobs.map((j) => [j.name, j]));
  assert.deepEqual([graph.lint.stage, graph.test.stage, graph.e2e.stage], [0, 0, 1]);
  assert.deepEqual(graph.e2e.needs, ['test']);
  assert.equal(graph.test.result, 'failed');
  assert.equal(graph.e2e.result, 'blocked');
  assert.equal(graph.test.units[0].conclusion, 'failure');
  const seen = await pipelineSeen(failing);
  assert.equal(seen.outcome, 'failed', 'the failing pipeline reads as failed');
  assert.match(seen.test, /^test\s+failed/);
  assert.match(seen.lint, /^lint\s+passed/);
  assert.match(seen.e2e, /skipped: a need failed[\s\S]*← test[\s\S]*`test`, which it needs, failed/);

  // Re-run on the failed job, once the file is back: test and e2e run again, lint is kept.
  const payload = checkRunRerequestedPayload({
    owner: OWNER, repo, checkRun: after['sluice/test'], pullNumber: 3, appId: APP_ID, installationId: INSTALLATION_ID,
  });
  const lintRuns = marks(log)['lint-start'].length;
  const rerun = await parentOf('check_run', payload);
  assert.notEqual(rerun, failing, 'a new attempt of the commit check');
  assert.equal((await waitForTerminal(rerun)).status, 'complete');
  const again = await byName(repo, bad);
  assert.equal(again['sluice/test'].conclusion, 'failure', 'still no ok file: test fails again');
  assert.equal(marks(log)['test-start'].length, 3, 'test ran a third time');
  assert.equal(marks(log)['lint-start'].length, lintRuns, 'lint was kept, not run');
  assert.match(again['sluice/check'].output.summary, /`lint` \| ✅ passed: kept from the attempt re-run/);
});

pipelineTest('shards = 4 run four shards at once, each told its index', async () => {
  const repo = 'sharded';
  const log = stack.sharedFile('shards.log');
  const config = [
    '[jobs.suite]',
    `command = "${mark(log, 'start-$SLUICE_SHARD_INDEX-of-$SLUICE_SHARD_TOTAL')}; sleep 3; ${mark(log, 'end')}"`,
    'shards = 4', '',
  ].join('\n');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const parent = await parentOf('pull_request', pr(repo, sha, { number: 4 }));
  assert.equal((await waitForTerminal(parent)).status, 'complete');
  const runs = await byName(repo, sha);
  for (const n of [1, 2, 3, 4]) {
    assert.equal(runs[`sluice/suite (${n}/4)`]?.conclusion, 'success', JSON.stringify(Object.keys(runs)));
  }
  const m = marks(log);
  const starts = [1, 2, 3, 4].map((n) => m[`start-${n}-of-4`]?.[0]);
  assert.ok(starts.every(Boolean), `every shard ran once with its index: ${JSON.stringify(Object.keys(m))}`);
  const lastStart = starts.reduce((a, b) => (a > b ? a : b));
  const firstEnd = m.end.reduce((a, b) => (a < b ? a : b));
  assert.ok(lastStart < firstEnd, 'the four shards ran at once');
});

pipelineTest('a docs-only change reports the path-filtered job skipped, and its dependents run', async () => {
  const repo = 'docs';
  const config = [
    '[jobs.build]', 'command = "true"', 'paths = ["src/**"]', '',
    '[jobs.docs]', 'command = "true"', 'needs = ["build"]', '',
  ].join('\n');
  const base = stack.commit(OWNER, repo, { '.sluice.toml': config, 'src/lib.txt': 'v1\n' });
  const head = stack.commit(OWNER, repo, { 'README.md': '# only docs\n' });
  const parent = await parentOf('pull_request', pr(repo, head, { number: 5, baseSha: base }));
  assert.equal((await waitForTerminal(parent)).status, 'complete');
  const runs = await byName(repo, head);
  assert.equal(runs['sluice/build']?.conclusion, 'skipped', JSON.stringify(runs['sluice/build']));
  assert.match(runs['sluice/build'].output.summary, /no matching change/);
  assert.equal(runs['sluice/docs']?.conclusion, 'success');
  assert.equal(runs['sluice/check'].conclusion, 'success');
});

pipelineTest('a merge queue group runs the jobs marked for it on the queue commit', async () => {
  const repo = 'queue';
  const config = [
    '[jobs.unit]', 'command = "true"', '',
    '[jobs.integration]', 'command = "true"', 'on = ["merge_group"]', '',
  ].join('\n');
  const baseSha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const branch = `gh-readonly-queue/main/pr-9-${baseSha}`;
  const headSha = stack.commit(OWNER, repo, { '.sluice.toml': config, 'fix.txt': 'fixed\n' }, { branch });
  const payload = mergeGroupPayload({
    action: 'checks_requested', owner: OWNER, repo, headSha, baseSha, installationId: INSTALLATION_ID,
    headRef: `refs/heads/${branch}`,
  });
  const parent = await parentOf('merge_group', payload);
  assert.equal((await waitForTerminal(parent)).status, 'complete');
  const runs = await byName(repo, headSha);
  assert.equal(runs['sluice/integration']?.conclusion, 'success', JSON.stringify(Object.keys(runs)));
  assert.equal(runs['sluice/unit']?.conclusion, 'success');

  // On the pull request itself, integration is left out, reported skipped.
  const prSha = stack.commit(OWNER, repo, { '.sluice.toml': config, 'pr.txt': 'pr\n' }, { branch: 'feature' });
  const onPr = await parentOf('pull_request', pr(repo, prSha, { number: 9, baseSha }));
  assert.equal((await waitForTerminal(onPr)).status, 'complete');
  const prRuns = await byName(repo, prSha);
  assert.equal(prRuns['sluice/integration']?.conclusion, 'skipped');
  assert.match(prRuns['sluice/integration'].output.summary, /its `on` leaves out/);
});

pipelineTest('a newer head of the pull request cancels the older pipeline, killing its job', async () => {
  const repo = 'newer';
  const log = stack.sharedFile('newer.log');
  const config = [
    '[jobs.slow]', `command = "${mark(log, 'start')}; sleep 60; ${mark(log, 'end')}"`, '',
  ].join('\n');
  const old = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const pull = `/_standin/repos/${OWNER}/${repo}/pulls/6`;
  await stack.standinPost(pull, { head_sha: old });
  const first = await parentOf('pull_request', pr(repo, old, { number: 6 }));
  await stack.waitFor(async () => (marks(log).start?.length ?? 0) >= 1, {
    timeoutMs: RUN_TIMEOUT_MS, message: 'the old pipeline job to start',
  });
  const fresh = stack.commit(OWNER, repo, { '.sluice.toml': config.replace('sleep 60', 'true'), 'v.txt': '2\n' });
  await stack.standinPost(pull, { head_sha: fresh });
  const second = await parentOf('pull_request', pr(repo, fresh, { number: 6, action: 'synchronize' }));
  await waitForTerminal(first);
  const oldRuns = await stack.waitFor(async () => {
    const runs = await byName(repo, old);
    return runs['sluice/slow']?.status === 'completed' ? runs : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: 'the old job check run to end' });
  assert.equal(oldRuns['sluice/slow'].conclusion, 'cancelled', JSON.stringify(oldRuns['sluice/slow']));
  assert.ok(oldRuns['sluice/slow'].output.summary.includes(fresh.slice(0, 7)), oldRuns['sluice/slow'].output.summary);
  assert.equal((await waitForTerminal(second)).status, 'complete');
  assert.equal((await byName(repo, fresh))['sluice/slow'].conclusion, 'success');
  assert.equal(marks(log).end?.length ?? 0, 1, 'the old job was killed: only the new one ended');
});

pipelineTest("build's artifacts reach test before its command, and download behind a signed link", async () => {
  const repo = 'artifacts';
  // build makes dist/ (two files, one nested) and a file outside the globs; test passes only
  // if build's dist/ is in its own fresh checkout, and the other file is not.
  const config = [
    '[jobs.build]',
    'command = "mkdir -p dist/js && echo built-$SLUICE_SHA > dist/app.txt && echo x > dist/js/a.js && head -c 200000 /dev/urandom > dist/big.bin && echo no > scratch.txt"',
    'artifacts = ["dist/**"]', '',
    '[jobs.test]',
    'command = "test \\"$(cat dist/app.txt)\\" = built-$SLUICE_SHA && test -f dist/js/a.js && test $(wc -c < dist/big.bin) = 200000 && test ! -e scratch.txt"',
    'needs = ["build"]', '',
  ].join('\n');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const parent = await parentOf('pull_request', pr(repo, sha, { number: 9 }));
  assert.equal((await waitForTerminal(parent)).status, 'complete');
  const runs = await byName(repo, sha);
  for (const name of ['sluice/build', 'sluice/test', 'sluice/check']) {
    assert.equal(runs[name]?.conclusion, 'success', `${name}: ${JSON.stringify(runs[name]?.output)}`);
  }
  const summary = runs['sluice/build'].output.summary;
  // Over the agent's 32 KiB chunking threshold: the archive still streams with its length.
  assert.match(summary, /\*\*Artifacts\*\*: 3 files, /);
  const link = /\[download\]\((http[^)]+)\)/.exec(summary)?.[1];
  assert.ok(link, summary);
  const res = await fetch(link);
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'application/gzip');
  const archive = Buffer.from(await res.arrayBuffer());
  const listed = execFileSync('tar', ['-tzf', '-'], { input: archive }).toString().trim().split('\n').sort();
  assert.deepEqual(listed, ['dist/app.txt', 'dist/big.bin', 'dist/js/a.js']);
  // The same path with a signature of another path, or none, is refused.
  const forged = link.replace(/\/artifacts\/[^?]+/, `/artifacts/${parent}`);
  assert.equal((await fetch(forged)).status, 403);
  assert.equal((await fetch(link.split('?')[0])).status, 403);
  // The API lists it with the pipeline, with a download path.
  const detail = await stack.api(`/v1/executions/${encodeURIComponent(parent)}`);
  const listedByApi = detail.body.artifacts;
  assert.equal(listedByApi.length, 1, JSON.stringify(listedByApi));
  assert.equal(listedByApi[0].label, 'sluice/build');
  assert.equal(listedByApi[0].files, 3);
  assert.equal((await fetch(`${stack.url}${listedByApi[0].download}`)).status, 200);
});

pipelineTest("a job's cache: saved on a miss, restored on the next run, a changed lockfile falls back, a fork's is never read", async () => {
  const repo = 'cached';
  // The install's work, counted: it makes node_modules only when the cache did not bring it.
  const config = [
    '[jobs.install]',
    `command = '''if [ -f node_modules/dep/index.js ]; then echo "work=reused-$(cat node_modules/dep/index.js)"; else mkdir -p node_modules/dep && cat package-lock.json > node_modules/dep/index.js && echo "work=installed"; fi'''`,
    'cache = [{ paths = ["node_modules"], key_files = ["package-lock.json"] }]', '',
  ].join('\n');
  const work = (run) => /^work=(\S+)$/m.exec(run.output.summary)?.[1];
  const round = async (files, number, overrides = {}) => {
    const sha = stack.commit(OWNER, repo, { '.sluice.toml': config, ...files });
    const parent = await parentOf('pull_request', pr(repo, sha, { number, ...overrides }));
    assert.equal((await waitForTerminal(parent)).status, 'complete');
    const run = (await byName(repo, sha))['sluice/install'];
    assert.equal(run?.conclusion, 'success', JSON.stringify(run?.output));
    return run;
  };
  const first = await round({ 'package-lock.json': 'v1\n' }, 11);
  assert.equal(work(first), 'installed');
  assert.match(first.output.summary, /cache `node_modules`: miss; saved \d+ bytes/);
  const second = await round({ 'package-lock.json': 'v1\n', 'a.txt': 'another commit\n' }, 11);
  assert.equal(work(second), 'reused-v1', 'the exact key skipped the install');
  assert.match(second.output.summary, /cache `node_modules`: hit `pr:11`/);
  const third = await round({ 'package-lock.json': 'v2\n' }, 11);
  assert.equal(work(third), 'reused-v1', 'the prefix fallback brought the older tree');
  assert.match(third.output.summary, /restored an older key from `pr:11`.*; saved/);
  // A fork's pull request saves into its own scope; another pull request does not read it.
  const fork = await round({ 'package-lock.json': 'v3\n' }, 12, { headOwner: 'stranger' });
  assert.equal(work(fork), 'installed');
  const other = await round({ 'package-lock.json': 'v3\n', 'b.txt': 'x\n' }, 13);
  assert.equal(work(other), 'installed', "pull request 13 never reads the fork's cache");
});

/// What a person sees of a unit's execution page, in a real Chromium: each step row's name and
/// the text behind its log link, the failure box when there is one.
async function unitSeen(id) {
  return onExecutionPage(id, async (page) => {
    const rows = page.locator('table.steps tbody tr');
    const steps = {};
    for (let i = 0; i < await rows.count(); i++) {
      const cells = rows.nth(i).locator('td');
      // The step list is folded under its phase: read its text, not what is drawn.
      const name = (await cells.nth(1).textContent()).trim();
      const link = rows.nth(i).locator('a', { hasText: /log/i });
      const href = await link.count() ? await link.first().getAttribute('href') : null;
      const log = href ? await (await page.request.get(new URL(href, stack.url).href)).text() : null;
      steps[name] = { duration: (await cells.nth(6).textContent()).trim(), log };
    }
    const failure = page.locator('.failure');
    const why = await failure.count() ? (await failure.innerText()).trim() : null;
    return { steps, why };
  });
}

pipelineTest('a job of steps runs each in the tree the last left, each with its log; a failing step ends its job', async () => {
  const repo = 'steps';
  const config = [
    '[jobs.build]',
    'steps = [',
    '  "mkdir -p out && echo one > out/a && echo scratch > tmp.txt && echo step-one-ran",',
    '  "test \\"$(cat out/a)\\" = one && echo two >> out/a && rm tmp.txt && echo step-two-ran",',
    '  "test \\"$(cat out/a | tr \'\\\\n\' ,)\\" = one,two, && test ! -e tmp.txt && echo step-three-ran",',
    ']', '',
    '[jobs.broken]',
    'steps = ["echo fine", "echo about-to-fail && exit 3", "echo never-ran"]',
    'snapshot = false', '',
  ].join('\n');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const parent = await parentOf('pull_request', pr(repo, sha, { number: 12 }));
  assert.equal((await waitForTerminal(parent)).status, 'complete');
  const runs = await byName(repo, sha);
  assert.equal(runs['sluice/build']?.conclusion, 'success', JSON.stringify(runs['sluice/build']?.output));
  const built = runs['sluice/build'].output.summary;
  for (const n of [1, 2, 3]) assert.match(built, new RegExp(`${n}\\. \`[^\n]+\` passed in \\d+\\.\\d s`), built);
  assert.match(built, /; snapshot [\d.]+ (bytes|KB|MB)/, 'steps 1 and 2 left snapshots');
  assert.equal(runs['sluice/broken'].conclusion, 'failure');
  const broken = runs['sluice/broken'].output.summary;
  assert.match(broken, /^`echo about-to-fail && exit 3` exited with code 3/);
  assert.match(broken, /3\. `echo never-ran` not run/);

  const api = await stack.api(`/v1/executions/${encodeURIComponent(parent)}`);
  const units = Object.fromEntries(api.body.pipeline.jobs.map((j) => [j.name, j.units[0].id]));
  const seen = await unitSeen(units.build);
  assert.deepEqual(
    Object.keys(seen.steps).filter((n) => /^(run step|snapshot after)/.test(n)),
    ['run step 1', 'snapshot after run step 1', 'run step 2', 'snapshot after run step 2', 'run step 3'],
  );
  for (const [n, said] of [[1, 'step-one-ran'], [2, 'step-two-ran'], [3, 'step-three-ran']]) {
    const step = seen.steps[`run step ${n}`];
    assert.ok(step.log?.includes(said), `run step ${n}'s own log: ${step.log}`);
    assert.ok(!step.log.includes(n === 1 ? 'step-two-ran' : 'step-one-ran'), 'only its own output');
    assert.match(step.duration, /\d/, `run step ${n} shows its time`);
  }
  const failed = await unitSeen(units.broken);
  assert.match(failed.why ?? '', /exited with code 3/, 'the failed job reads as failed');
  assert.match(failed.why ?? '', /about-to-fail/);
  assert.ok(!('run step 3' in failed.steps), 'the step after the failure never ran');
});
