// End-to-end inside real containers (docs/containers-local.md): SANDBOX_BACKEND = "container"
// under `wrangler dev` on this machine's Docker. A signed pull_request webhook starts a `check`;
// the SandboxContainer Durable Object starts a container from crates/sandbox-agent/Dockerfile.local,
// the agent in it clones from the GitHub stand-in through the Docker bridge gateway and runs the
// command. The command prints where it ran; the test proves that was the container, not the host,
// that the container's agent requires the token the Worker started it with, and that the
// container is destroyed when its run ends.
//
// Run by `npm test` when the machine can run containers (scripts/test.sh), and by
// `npm run test:containers`.

import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, before } from 'node:test';
import { docker } from '../../tools/stack/index.mjs';
import { startStack } from '../e2e/harness.mjs';
import {
  OWNER, checkRuns, containerAtGate, gate, marker1, openGate, tunnelled, waitContainerGone, waitForTerminal, loggedTest, openPullRequest } from './helpers.mjs';

// node:test's limit per test: a run wait plus the requests around it.
const TEST_TIMEOUT_MS = 5 * 60_000;
// Starting the stack: setup.sh (cold: apt installs, mmdebstrap, builds), the agent's release
// build, the Worker build when not prebuilt, and wrangler dev building the agent image.
const STACK_START_TIMEOUT_MS = 45 * 60_000;

// Prints where it runs. The markers are assembled by the shell, so finding them in the report
// proves the command's output (not its text) came back. `tokenenv` counts the agent token in the
// command's own environment (the agent starts commands with a clean one).
const WHERE_COMMAND = [
  'cat /etc/os-release',
  'printf "sluice-%s=%s\\n" host "$(hostname)"',
  'printf "sluice-%s=%s\\n" pid1 "$(tr "\\0" " " </proc/1/cmdline)"',
  'printf "sluice-%s=%s\\n" dockerenv "$(test -f /.dockerenv && echo yes || echo no)"',
  'printf "sluice-%s=%s\\n" cwd "$(pwd)"',
  'printf "sluice-%s=%s\\n" tokenenv "$(env | grep -c SANDBOX_AGENT_TOKEN)"',
].join('; ');
const PASSING_CONFIG = `[check]\ncommand = '''${gate('where')}; ${WHERE_COMMAND}'''\n`;
const FAILING_CONFIG = `[check]\ncommand = '''printf "sluice-%s=%s\\n" failed "$(hostname)" >&2; exit 3'''\n`;

let stack;

before(async () => {
  stack = await startStack({ containers: true });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

async function completedCheckRun(repo, sha) {
  const runs = await checkRuns(stack, repo);
  assert.equal(runs.length, 1, JSON.stringify(runs, null, 2));
  const [run] = runs;
  assert.equal(run.name, 'sluice/check');
  assert.equal(run.head_sha, sha);
  assert.equal(run.status, 'completed');
  return run;
}

// Whether the container was started with the agent token: its environment as Docker holds it
// (compared, never printed).
async function startedWithToken(container) {
  const env = JSON.parse(await docker(stack.docker, ['inspect', '--format', '{{json .Config.Env}}', container]));
  return env.includes(`SANDBOX_AGENT_TOKEN=${stack.agentToken}`);
}

// The agent in `container` refuses a request without the token or with a wrong one, and serves
// it with the token the Worker holds.
async function assertTokenRequired(container) {
  const path = '/v1/workspaces/token-probe';
  const bare = await tunnelled(stack, container, { path });
  assert.equal(bare.status, 401, `without a token the agent must refuse: ${bare.body}`);
  assert.match(bare.body, /unauthorized/);
  const wrong = await tunnelled(stack, container, { path, token: 'not-the-token' });
  assert.equal(wrong.status, 401, `a wrong token must be refused: ${wrong.body}`);
  const right = await tunnelled(stack, container, { path, token: stack.agentToken });
  assert.equal(right.status, 200, right.body);
  assert.equal(JSON.parse(right.body).exists, false);
}

loggedTest(() => stack, TEST_TIMEOUT_MS, 'a check runs inside a container whose agent requires its token, and the container goes with the run', async () => {
  const repo = 'boxed';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': PASSING_CONFIG, 'README.md': '# boxed\n' });
  const id = await openPullRequest(stack, repo, sha);

  // While the command holds at its gate: the container's start options and its agent.
  const box = await containerAtGate(stack, 'where');
  assert.ok(await startedWithToken(box.name), 'the container was started with SANDBOX_AGENT_TOKEN in its env');
  await assertTokenRequired(box.name);
  const sidecarHost = await docker(stack.docker, ['inspect', '--format', '{{.Config.Hostname}}', `${box.name}-proxy`]);
  await openGate(stack, box.name, 'where');

  const { steps } = await waitForTerminal(stack, id, 'complete');
  const run = await completedCheckRun(repo, sha);
  assert.equal(run.conclusion, 'success', run.output.summary);
  const summary = run.output.summary;
  // The container's os-release (the offline base image: Debian bookworm) ...
  assert.match(summary, /^VERSION_CODENAME=bookworm$/m, summary);
  // ... its own hostname, not the host's: the container's (or its sidecar's, whose network and
  // name it shares) ...
  const host = marker1(summary, 'host');
  assert.notEqual(host, hostname(), 'the command ran on the host');
  assert.match(host, /^[0-9a-f]{12}$/, `a Docker container's hostname, got ${host}`);
  assert.ok([box.hostname, sidecarHost].includes(host), `${host} is the run's container's hostname (${box.hostname}, ${sidecarHost})`);
  // ... the agent as PID 1 of its own PID namespace, Docker's marker file, the image's
  // workspace root, and a command environment without the agent's token.
  assert.match(marker1(summary, 'pid1'), /sluice-sandbox-agent --listen 0\.0\.0\.0:8080 --root \/workspace/);
  assert.equal(marker1(summary, 'dockerenv'), 'yes');
  assert.match(marker1(summary, 'cwd'), /^\/workspace\//);
  assert.equal(marker1(summary, 'tokenenv'), '0', 'the command does not see the agent token');

  const command = steps.find((s) => s.name === 'run check command');
  assert.ok(command, JSON.stringify(steps));
  assert.equal(command.attempts, 1, 'the command step ran once, without an infrastructure retry');
  // The run ended, so its sandbox was discarded: the container is destroyed.
  await waitContainerGone(stack, box.name);
});

loggedTest(() => stack, TEST_TIMEOUT_MS, 'a failing command inside a container concludes failure', async () => {
  const repo = 'boxed-failing';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': FAILING_CONFIG, 'README.md': '# failing\n' });
  const id = await openPullRequest(stack, repo, sha);
  await waitForTerminal(stack, id, 'complete');
  const run = await completedCheckRun(repo, sha);
  assert.equal(run.conclusion, 'failure', run.output.summary);
  const host = marker1(run.output.summary, 'failed');
  assert.notEqual(host, hostname(), 'the command ran on the host');
  assert.match(host, /^[0-9a-f]{12}$/, `a Docker container's hostname, got ${host}`);
});
