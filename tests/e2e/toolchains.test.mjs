// End-to-end: a repository's own test suite as a check, the way a team brings it. Two fixture
// projects with real registry dependencies (tests/fixtures/rust-crate: `cargo test` with `itoa`
// from crates.io; tests/fixtures/node-package: `npm ci && npm test` with `ms` from npm) run on the
// sandbox agent with the host's toolchains. Run as root, as CI runs, the agent runs each workspace
// as an unprivileged user of its own, who reaches rustup's toolchain in root's home only through
// the agent's read-only mounts (crates/sandbox-agent/src/host_tools.rs). A command the sandbox
// does not have ends the check naming it and why, never a bare exit 127. An image class
// (`image = "node"`) is validated and changes nothing here: the host's tools run.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, TERMINAL, startStack } from './harness.mjs';

const OWNER = 'acme';
const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');
// A cold `cargo test` of a one-dependency crate (index fetch, download, two compilations) takes
// ~10 s on a quiet 2-core machine; `npm ci` of one package ~2 s. 5 minutes allows a loaded CI
// machine and a slow registry.
const RUN_TIMEOUT_MS = 5 * 60_000;
// node:test's own limit per test: a run wait plus the requests around it.
const TEST_TIMEOUT_MS = RUN_TIMEOUT_MS + 60_000;
// Starting the stack: wrangler dev ~1.5 s prebuilt, migrations ~2 s; a build when not prebuilt.
const STACK_START_TIMEOUT_MS = 16 * 60_000;
// The commands' timeout in .sluice.toml: inside RUN_TIMEOUT_MS, so a hung install ends the check
// timed_out rather than the test waiting it out.
const COMMAND_TIMEOUT = '4m';

let stack;

before(async () => {
  stack = await startStack();
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

function toolchainTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail() ?? '(no stack)'}\n--- agent log tail ---\n${stack?.agentLogTail() ?? ''}\n`);
      throw err;
    }
  });
}

// A fixture project's files as `{ relative path: content }`, for a commit.
function fixtureFiles(name) {
  const root = path.join(FIXTURES, name);
  const files = {};
  const walk = (dir) => {
    for (const entry of readdirSync(dir)) {
      const full = path.join(dir, entry);
      if (statSync(full).isDirectory()) walk(full);
      else files[path.relative(root, full)] = readFileSync(full, 'utf8');
    }
  };
  walk(root);
  return files;
}

function checkConfig(command) {
  return `[check]\ncommand = ${JSON.stringify(command)}\ntimeout = "${COMMAND_TIMEOUT}"\n`;
}

// Opens a pull request at a commit of `files`, waits for its check to finish and returns the
// execution and its one check run.
async function checkOf(repo, files) {
  const sha = stack.commit(OWNER, repo, files);
  const payload = pullRequestPayload({
    owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo),
  });
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  const [instance] = res.body.instances;
  assert.equal(instance?.run, 'check', JSON.stringify(res.body));
  const { execution } = await stack.waitFor(async () => {
    const got = await stack.api(`/v1/executions/${encodeURIComponent(instance.id)}`);
    assert.equal(got.status, 200, JSON.stringify(got.body));
    return TERMINAL.has(got.body.execution.status) ? got.body : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: `the check of ${repo} to finish` });
  assert.equal(execution.status, 'complete', JSON.stringify(execution, null, 2));
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  assert.equal(runs.length, 1, JSON.stringify(runs, null, 2));
  assert.equal(runs[0].head_sha, sha);
  assert.equal(runs[0].status, 'completed');
  return runs[0];
}

toolchainTest('a crate\'s own cargo test, with a crates.io dependency, passes as a check', async () => {
  const files = { ...fixtureFiles('rust-crate'), '.sluice.toml': checkConfig('cargo test --locked') };
  const run = await checkOf('crate', files);
  assert.equal(run.conclusion, 'success', run.output.summary);
  // The tail is the test harness's own report: both tests ran and passed.
  assert.match(run.output.summary, /test result: ok\. 2 passed; 0 failed/);
});

toolchainTest('a package\'s own npm test, after npm ci of an npm dependency, passes as a check', async () => {
  const files = { ...fixtureFiles('node-package'), '.sluice.toml': checkConfig('npm ci --no-audit --no-fund && npm test') };
  const run = await checkOf('package', files);
  assert.equal(run.conclusion, 'success', run.output.summary);
  assert.match(run.output.summary, /# pass 1\n# fail 0/);
});

toolchainTest('a command the sandbox does not have fails the check naming it and why', async () => {
  const files = { 'README.md': '# tools\n', '.sluice.toml': checkConfig('sluice-no-such-tool --version') };
  const run = await checkOf('missing', files);
  assert.equal(run.conclusion, 'failure', run.output.summary);
  assert.match(run.output.summary, /exited with code 127/);
  assert.match(run.output.summary, /`sluice-no-such-tool` was not found: exit 127 is the shell's "command not found"/);
  assert.match(run.output.summary, /sandbox's `PATH`/);
});

toolchainTest('under the agent backend an image class is only validated: a node check uses the host\'s node', async () => {
  const config = '[check]\ncommand = "node --version"\nimage = "node"\ninstance_type = "standard-1"\n';
  const run = await checkOf('imaged', { 'README.md': '# imaged\n', '.sluice.toml': config });
  assert.equal(run.conclusion, 'success', run.output.summary);
  // The host's Node (the one running this test), not the node image's.
  assert.ok(run.output.summary.includes(process.version), run.output.summary);
});
