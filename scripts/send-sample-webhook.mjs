// Sends a signed `pull_request` webhook for the demo repository that `npm start` serves from the
// GitHub stand-in, the way GitHub would, and shows how to follow the run it starts.
//
//   node scripts/send-sample-webhook.mjs              # PR opened at the demo repo's head commit
//   node scripts/send-sample-webhook.mjs --new-commit # push a new commit first (a fresh run;
//                                                     # the same head sha is deduplicated)
//   SLUICE_URL=http://127.0.0.1:8787 overrides where the Worker is.

import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { commitFiles, headSha, repoPath } from '../tools/github-standin/git.mjs';
import { pullRequestPayload, sendWebhook } from '../tools/github-standin/webhooks.mjs';
import { DEV, readEnvFile } from '../tools/stack/index.mjs';

// The Worker answers a webhook after recording it, well under a second; 30 s means it is wedged.
const SEND_TIMEOUT_MS = 30_000;
// The installation id the stand-in started by `npm start` accepts.
const INSTALLATION_ID = 42;

function fail(message) {
  console.error(`send-sample-webhook: ${message}`);
  process.exit(1);
}

// The same merge wrangler does: defaults written by `npm start`, then .dev.vars on top.
function mergedVars() {
  if (!existsSync(DEV.defaultsFile)) fail(`${DEV.defaultsFile} is missing; start Sluice first with 'npm start'`);
  const userVars = readEnvFile(DEV.devVarsFile);
  const defaults = readEnvFile(DEV.defaultsFile);
  if (userVars.GITHUB_API_URL || !defaults.GITHUB_API_URL) {
    fail('the sample targets the demo repository of the GitHub stand-in, but .dev.vars configures a real GitHub App');
  }
  return { ...defaults, ...userVars };
}

function demoHead(newCommit) {
  const { owner, repo } = DEV.demo;
  if (!existsSync(repoPath(DEV.standinReposDir, owner, repo))) fail(`no demo repository ${owner}/${repo}; start Sluice first with 'npm start'`);
  if (!newCommit) return headSha(DEV.standinReposDir, owner, repo);
  return commitFiles(DEV.standinReposDir, owner, repo, {
    files: { 'NOTES.md': `Sample commit made at ${new Date().toISOString()}\n` },
    message: 'Sample commit from send-sample-webhook',
  });
}

function printNextSteps(workerUrl, vars, body) {
  const auth = `-H "Authorization: Bearer ${vars.ADMIN_TOKEN}"`;
  for (const instance of body?.instances ?? []) {
    console.log(`\nFollow execution ${instance.id} (${instance.run}, created: ${instance.created}):`);
    console.log(`  curl ${auth} ${workerUrl}/v1/executions/${instance.id}`);
  }
  console.log(`\nCheck runs the stand-in received:\n  curl '${vars.GITHUB_API_URL}/_standin/check-runs?repo=${DEV.demo.owner}/${DEV.demo.repo}'`);
}

async function main() {
  const { values } = parseArgs({ options: { 'new-commit': { type: 'boolean', default: false } } });
  const vars = mergedVars();
  const workerUrl = process.env.SLUICE_URL || DEV.workerUrl;
  const sha = demoHead(values['new-commit']);
  const { owner, repo } = DEV.demo;
  const payload = pullRequestPayload({
    owner,
    repo,
    sha,
    action: values['new-commit'] ? 'synchronize' : 'opened',
    installationId: INSTALLATION_ID,
    cloneUrl: `${vars.GITHUB_API_URL}/${owner}/${repo}.git`,
  });
  setTimeout(() => fail(`no answer from ${workerUrl} within ${SEND_TIMEOUT_MS} ms`), SEND_TIMEOUT_MS).unref();
  console.log(`POST ${workerUrl}/webhooks/github (pull_request ${payload.action}, ${owner}/${repo} @ ${sha.slice(0, 12)})`);
  let res;
  try {
    res = await sendWebhook({ url: `${workerUrl}/webhooks/github`, secret: vars.GITHUB_WEBHOOK_SECRET, event: 'pull_request', payload });
  } catch (err) {
    fail(`cannot reach ${workerUrl}: ${err.cause?.code ?? err.message} (is 'npm start' running?)`);
  }
  console.log(`HTTP ${res.status} (delivery ${res.deliveryId})`);
  console.log(typeof res.body === 'string' ? res.body : JSON.stringify(res.body, null, 2));
  printNextSteps(workerUrl, vars, res.body);
  process.exitCode = res.status >= 400 ? 1 : 0;
}

await main();
