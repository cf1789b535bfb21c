// End-to-end inside real containers (docs/containers-local.md): SANDBOX_BACKEND = "container"
// under `wrangler dev` on this machine's Docker. A signed pull_request webhook starts a `check`;
// the SandboxContainer Durable Object starts a container from crates/sandbox-agent/Dockerfile.local,
// the agent in it clones from the GitHub stand-in through the Docker bridge gateway and runs the
// command. The command prints where it ran; the test proves that was the container, not the host.
//
// Not part of `npm test` (it needs Docker): `npm run test:containers`.

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { after, before, test } from 'node:test';
import { pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { docker } from '../../scripts/containers/layer.mjs';
import { INSTALLATION_ID, startStack } from '../e2e/harness.mjs';

const OWNER = 'acme';
const TERMINAL = new Set(['complete', 'errored', 'terminated', 'skipped']);
// A run here is a container start (~1 s), a clone through the bridge and a one-line command;
// measured at a few seconds warm. 3 minutes allows a cold Docker on a loaded 2-core machine and
// still fails well inside the test's own limit.
const RUN_TIMEOUT_MS = 3 * 60_000;
// node:test's limit per test: a run wait plus the requests around it.
const TEST_TIMEOUT_MS = 5 * 60_000;
// Starting the stack: setup.sh (cold: apt installs, mmdebstrap, builds), the agent's release
// build, the Worker build when not prebuilt, and wrangler dev building the agent image.
const STACK_START_TIMEOUT_MS = 45 * 60_000;

// Prints where it runs. The markers are assembled by the shell, so finding them in the report
// proves the command's output (not its text) came back.
const WHERE_COMMAND = [
  'cat /etc/os-release',
  'printf "sluice-%s=%s\\n" host "$(hostname)"',
  'printf "sluice-%s=%s\\n" pid1 "$(tr "\\0" " " </proc/1/cmdline)"',
  'printf "sluice-%s=%s\\n" dockerenv "$(test -f /.dockerenv && echo yes || echo no)"',
  'printf "sluice-%s=%s\\n" cwd "$(pwd)"',
].join('; ');
const PASSING_CONFIG = `[check]\ncommand = '''${WHERE_COMMAND}'''\n`;
const FAILING_CONFIG = `[check]\ncommand = '''printf "sluice-%s=%s\\n" failed "$(hostname)" >&2; exit 3'''\n`;

let stack;

before(async () => {
  stack = await startStack({ containers: true });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

function containerTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail() ?? '(no stack)'}\n`);
      throw err;
    }
  });
}

async function openPullRequest(repo, sha) {
  const payload = pullRequestPayload({
    owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo),
  });
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  assert.equal(res.status, 202, JSON.stringify(res.body));
  assert.equal(res.body.instances.length, 1, JSON.stringify(res.body));
  return res.body.instances[0].id;
}

// Waits for any terminal status, then asserts `expected`, so an errored run fails at once with
// its error instead of after the timeout.
async function waitForTerminal(id, expected) {
  const done = await stack.waitFor(async () => {
    const { body } = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
    return TERMINAL.has(body.execution?.status) ? body : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: `execution ${id} to finish` });
  assert.equal(done.execution.status, expected, JSON.stringify(done, null, 2));
  return done;
}

async function completedCheckRun(repo, sha) {
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  assert.equal(runs.length, 1, JSON.stringify(runs, null, 2));
  const [run] = runs;
  assert.equal(run.name, 'sluice/check');
  assert.equal(run.head_sha, sha);
  assert.equal(run.status, 'completed');
  return run;
}

function marker(summary, name) {
  const match = new RegExp(`sluice-${name}=(.*)`).exec(summary);
  assert.ok(match, `no sluice-${name}= line in the summary:\n${summary}`);
  return match[1].trim();
}

// Hostnames of the Worker's sandbox containers (an app container in its sidecar's network
// namespace reports either its own or the sidecar's, depending on the runtime).
async function containerHostnames() {
  const names = await stack.sandboxContainers();
  if (!names.length) return [];
  const out = await docker(stack.docker, ['inspect', '--format', '{{.Config.Hostname}}', ...names]);
  return out.split('\n').map((h) => h.trim()).filter(Boolean);
}

containerTest('a check command runs inside a container and concludes success', async () => {
  const repo = 'boxed';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': PASSING_CONFIG, 'README.md': '# boxed\n' });
  const id = await openPullRequest(repo, sha);
  const { steps } = await waitForTerminal(id, 'complete');
  const run = await completedCheckRun(repo, sha);
  assert.equal(run.conclusion, 'success', run.output.summary);
  const summary = run.output.summary;

  // The container's os-release (the offline base image: Debian bookworm) ...
  assert.match(summary, /^VERSION_CODENAME=bookworm$/m, summary);
  // ... its own hostname, not the host's, and one Docker gave a sandbox container ...
  const host = marker(summary, 'host');
  assert.notEqual(host, hostname(), 'the command ran on the host');
  assert.match(host, /^[0-9a-f]{12}$/, `a Docker container's hostname, got ${host}`);
  assert.ok((await containerHostnames()).includes(host), `${host} is the hostname of one of this Worker's containers`);
  // ... the agent as PID 1 of its own PID namespace, Docker's marker file, and the image's
  // workspace root.
  assert.match(marker(summary, 'pid1'), /sluice-sandbox-agent --listen 0\.0\.0\.0:8080 --root \/workspace/);
  assert.equal(marker(summary, 'dockerenv'), 'yes');
  assert.match(marker(summary, 'cwd'), /^\/workspace\//);

  const command = steps.find((s) => s.name === 'run check command');
  assert.ok(command, JSON.stringify(steps));
  assert.equal(command.attempts, 1, 'the command step ran once, without an infrastructure retry');
});

containerTest('a failing command inside a container concludes failure', async () => {
  const repo = 'boxed-failing';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': FAILING_CONFIG, 'README.md': '# failing\n' });
  const id = await openPullRequest(repo, sha);
  await waitForTerminal(id, 'complete');
  const run = await completedCheckRun(repo, sha);
  assert.equal(run.conclusion, 'failure', run.output.summary);
  const host = marker(run.output.summary, 'failed');
  assert.notEqual(host, hostname(), 'the command ran on the host');
  assert.ok((await containerHostnames()).includes(host), `${host} is the hostname of one of this Worker's containers`);
});
