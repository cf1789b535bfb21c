// `npm run demo`: against a running `npm start`, sends the signed webhooks GitHub would for a small
// story, then prints the dashboard URL where it shows:
//   - a pull request whose check passes, and one whose check fails;
//   - three quick pushes to main, each a deploy: the first deploys, the second waits behind it and
//     is superseded by the third (newest commit wins), which deploys last.
// It waits (bounded) for every execution to finish and prints how each ended; --no-wait skips that.
//
//   npm run demo                  # or: node scripts/demo.mjs [--no-wait]
//   SLUICE_URL=http://127.0.0.1:8787 overrides where the Worker is.
//
// runDemo() is also what tests/e2e/dashboard.test.mjs sends, against its own stack.

import { existsSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { commitFiles, headSha, repoPath } from '../tools/github-standin/git.mjs';
import { pullRequestPayload, pushPayload, sendWebhook } from '../tools/github-standin/webhooks.mjs';
import { DEV, TERMINAL, readEnvFile } from '../tools/stack/index.mjs';

// The installation id the stand-in started by `npm start` accepts.
const INSTALLATION_ID = 42;
// A webhook is answered after it is recorded, well under a second; 30 s means the Worker is wedged.
const SEND_TIMEOUT_MS = 30_000;
// Two checks and three deploys (a clone and a ~2 s command each, the deploys one after another):
// a minute on a quiet laptop; three allow a loaded 2-core machine.
const WAIT_TIMEOUT_MS = 3 * 60_000;
const POLL_INTERVAL_MS = 1_000;
// Between the pushes: short enough that the second still waits when the third arrives.
const PUSH_GAP_MS = 300;
// Pull request numbers the demo uses, apart from what send-sample-webhook sends (#1).
const PASSING_PR = 101;
const FAILING_PR = 102;

const CHECK_PASSES = 'echo "all tests pass"';
const CHECK_FAILS = 'echo "test demo::adds ... FAILED" >&2; exit 1';
// The deploy lasts long enough for the next pushes to queue behind it.
const DEPLOY = 'echo "deploying $SLUICE_SHA"; sleep 2; echo "deployed $SLUICE_SHA"';

function config(check) {
  return `[check]\ncommand = '${check}'\n\n[deploy]\nbranch = "main"\ncommand = '${DEPLOY}'\n`;
}

const README = '# hello\n\nDemo repository served by the Sluice GitHub stand-in.\n';

// Sends one signed webhook; a refusal is an error naming what the Worker said.
async function send(ctx, event, payload) {
  const res = await sendWebhook({
    url: `${ctx.workerUrl}/webhooks/github`, secret: ctx.webhookSecret, event, payload,
  });
  if (res.status !== 202) throw new Error(`${event} webhook answered ${res.status}: ${JSON.stringify(res.body)}`);
  return res.body.instances ?? [];
}

// Opens a pull request from `branch` whose `.sluice.toml` runs `check`.
async function pullRequest(ctx, number, branch, check) {
  const { owner, repo } = ctx;
  const sha = commitFiles(ctx.reposDir, owner, repo, {
    branch, files: { '.sluice.toml': config(check), 'README.md': README }, message: `Demo: ${branch}`,
  });
  const payload = pullRequestPayload({
    owner, repo, sha, number, headRef: branch, installationId: INSTALLATION_ID, cloneUrl: ctx.cloneUrl,
  });
  // The pull request's check (it also plans a preview, which ends `not-configured`: the demo
  // declares no `[preview]`).
  return (await send(ctx, 'pull_request', payload)).filter((i) => i.run === 'check');
}

// Three commits to main, each pushed as soon as it exists.
async function pushes(ctx, count) {
  const { owner, repo } = ctx;
  const out = [];
  let before = headSha(ctx.reposDir, owner, repo, 'main') ?? undefined;
  for (let i = 1; i <= count; i++) {
    const message = `Demo release ${i}`;
    const after = commitFiles(ctx.reposDir, owner, repo, {
      files: { '.sluice.toml': config(CHECK_PASSES), 'README.md': README, 'VERSION': `${Date.now()}-${i}\n` }, message,
    });
    const payload = pushPayload({ owner, repo, before, after, installationId: INSTALLATION_ID, cloneUrl: ctx.cloneUrl, message });
    // The push's deploy (a push to the default branch also records its schedules).
    out.push(...(await send(ctx, 'push', payload)).filter((i) => i.run === 'deploy'));
    before = after;
    await new Promise((r) => setTimeout(r, PUSH_GAP_MS));
  }
  return out;
}

// Sends the story; answers the instances it created, in order: passing check, failing check, then
// the three deploys oldest first.
export async function runDemo(ctx) {
  const passing = await pullRequest(ctx, PASSING_PR, 'demo-passing', CHECK_PASSES);
  const failing = await pullRequest(ctx, FAILING_PR, 'demo-failing', CHECK_FAILS);
  const deploys = await pushes(ctx, 3);
  return [...passing, ...failing, ...deploys];
}

// Polls the API until every instance is finished or the deadline passes; answers the executions.
export async function waitFinished(ctx, ids, timeoutMs = WAIT_TIMEOUT_MS) {
  const deadline = Date.now() + timeoutMs;
  const done = new Map();
  while (done.size < ids.length && Date.now() < deadline) {
    for (const id of ids.filter((i) => !done.has(i))) {
      const res = await fetch(`${ctx.workerUrl}/v1/executions/${id}`, {
        headers: { Authorization: `Bearer ${ctx.adminToken}` }, signal: AbortSignal.timeout(SEND_TIMEOUT_MS),
      });
      if (!res.ok) continue;
      const { execution } = await res.json();
      if (TERMINAL.has(execution.status)) done.set(id, execution);
    }
    if (done.size < ids.length) await new Promise((r) => setTimeout(r, POLL_INTERVAL_MS));
  }
  return ids.map((id) => done.get(id) ?? { id, status: 'still running' });
}

function fail(message) {
  console.error(`demo: ${message}`);
  process.exit(1);
}

// The same merge wrangler does: defaults written by `npm start`, then .dev.vars on top.
function localContext() {
  if (!existsSync(DEV.defaultsFile)) fail(`${DEV.defaultsFile} is missing; start Sluice first with 'npm start'`);
  const userVars = readEnvFile(DEV.devVarsFile);
  const defaults = readEnvFile(DEV.defaultsFile);
  if (userVars.GITHUB_API_URL || !defaults.GITHUB_API_URL) {
    fail('the demo uses the GitHub stand-in\'s demo repository, but .dev.vars configures a real GitHub App');
  }
  const vars = { ...defaults, ...userVars };
  const { owner, repo } = DEV.demo;
  if (!existsSync(repoPath(DEV.standinReposDir, owner, repo))) fail(`no demo repository ${owner}/${repo}; start Sluice first with 'npm start'`);
  return {
    workerUrl: process.env.SLUICE_URL || DEV.workerUrl,
    webhookSecret: vars.GITHUB_WEBHOOK_SECRET,
    adminToken: vars.ADMIN_TOKEN,
    reposDir: DEV.standinReposDir,
    cloneUrl: `${vars.GITHUB_API_URL}/${owner}/${repo}.git`,
    owner,
    repo,
  };
}

async function main() {
  const { values } = parseArgs({ options: { 'no-wait': { type: 'boolean', default: false } } });
  const ctx = localContext();
  let instances;
  try {
    instances = await runDemo(ctx);
  } catch (err) {
    fail(`${err.cause?.code ?? err.message} (is 'npm start' running at ${ctx.workerUrl}?)`);
  }
  for (const i of instances) console.log(`sent: ${i.run} ${i.id}${i.created ? '' : ' (existed)'}`);
  console.log(`\nDashboard: ${ctx.workerUrl}/ui/login#token=${ctx.adminToken}`);
  console.log(`  executions: ${ctx.workerUrl}/ui/executions?repo=${ctx.owner}/${ctx.repo}`);
  console.log(`  deploy queue: ${ctx.workerUrl}/ui/groups/${encodeURIComponent(`deploy:${ctx.owner}/${ctx.repo}:main`)}`);
  if (values['no-wait']) return;
  console.log('\nWaiting for them to finish...');
  for (const e of await waitFinished(ctx, instances.map((i) => i.id))) {
    console.log(`  ${e.id}: ${e.status}${e.reason ? ` (${e.reason})` : ''}${e.error_tag ? ` [${e.error_tag}]` : ''}`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  setTimeout(() => fail(`gave up after ${WAIT_TIMEOUT_MS + 60_000} ms`), WAIT_TIMEOUT_MS + 60_000).unref();
  await main();
}
