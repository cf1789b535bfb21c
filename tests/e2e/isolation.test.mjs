// End-to-end: one sandbox per run, with nothing to steal. Two pull-request checks run at once on
// the stack's agent. The first (the victim) exports a secret and waits until the test releases it;
// the second (the thief), a fork's check, tries to read the victim's environment and workspace,
// the agent's environment and command line (its token) and the stack's Worker vars (what
// .dev.vars is to `npm start`). It finds nothing, and says so for each attempt, so the test
// cannot pass because an attempt never ran.

import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { pullRequestPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, TERMINAL, startStack } from './harness.mjs';

const OWNER = 'acme';
// A run is a token exchange, a config read, a local clone and a short command: seconds. 60 s
// allows a loaded 2-core machine.
const RUN_TIMEOUT_MS = 60_000;
// The victim waits at most this long for its release (in tenths of a second in its loop), so a
// failed test never leaves it running for long.
const VICTIM_WAIT_TENTHS = 1_200;
// node:test's limit: the victim's start, the thief's whole run, the victim's end.
const TEST_TIMEOUT_MS = 4 * 60_000;
const STACK_START_TIMEOUT_MS = 16 * 60_000;

let stack;

before(async () => {
  stack = await startStack();
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

async function openPullRequest(repo, sha) {
  const payload = pullRequestPayload({
    owner: OWNER, repo, sha, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo),
  });
  const res = await stack.sendWebhook('pull_request', payload, randomUUID());
  assert.equal(res.status, 202, `webhook for ${repo}: ${JSON.stringify(res.body)}`);
  // The pull request's check (its preview, `src/runs/edge/previews.rs`, aside).
  const checks = res.body.instances.filter((i) => i.run === 'check');
  assert.equal(checks.length, 1, JSON.stringify(res.body));
  return checks[0].id;
}

async function waitForTerminal(id) {
  const body = await stack.waitFor(async () => {
    const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
    return TERMINAL.has(res.body?.execution?.status) ? res.body : null;
  }, { timeoutMs: RUN_TIMEOUT_MS, message: `execution ${id} to finish` });
  assert.equal(body.execution.status, 'complete', JSON.stringify(body, null, 2));
}

async function checkRun(repo) {
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  assert.equal(runs.length, 1, JSON.stringify(runs, null, 2));
  return runs[0];
}

// The victim: its secret in the environment of a long-lived shell whose command line says
// `sluice-victim-waits`, a file in its workspace, and `ready` once both are in place.
function victimScript(secret) {
  return [
    `echo '${secret}' > secret.txt`,
    `exec env SLUICE_VICTIM_SECRET='${secret}' sh -c ': sluice-victim-waits; touch ready; i=0; `
      + `while [ ! -e release ] && [ $i -lt ${VICTIM_WAIT_TENTHS} ]; do sleep 0.1; i=$((i+1)); done; test -e release'`,
    '',
  ].join('\n');
}

// The thief: one line per attempt. The patterns are written so they do not match their own text
// (`wait[s]` matches "waits"), which sits in the thief's own command line.
function thiefScript({ victimDir, workspacesDir, agentPid, envFile }) {
  return `seen=0; readable=0; tried=0; denied=0; leaked=0
for d in /proc/[0-9]*; do
  case "$(tr '\\0' ' ' < $d/cmdline 2>/dev/null)" in *sluice-victim-wait[s]*)
    seen=$((seen+1)); cat $d/environ > /dev/null 2>&1 && readable=$((readable+1));;
  esac
  tried=$((tried+1))
  if cat $d/environ > /dev/null 2>&1; then
    tr '\\0' '\\n' < $d/environ | grep -q 'victim-secre[t]-' && leaked=$((leaked+1))
  else denied=$((denied+1)); fi
done
echo "victim-process seen=$seen readable=$readable"
echo "all-environ tried=$tried denied=$denied leaked=$leaked"
try() { if "$@" > /dev/null 2>&1; then echo "attempt $1 $2 read"; else echo "attempt $1 $2 denied"; fi; }
try cat ${victimDir}/secret.txt
try ls ${victimDir}
try ls ${workspacesDir}
try cat /proc/${agentPid}/environ
try cat ${envFile}
echo "agent-cmdline $(od -An -v -tx1 /proc/${agentPid}/cmdline | tr -d ' \\n')"
`;
}

function field(summary, label) {
  const line = summary.split('\n').find((l) => l.startsWith(`${label} `));
  assert.ok(line, `no "${label}" line in ${summary}`);
  return Object.fromEntries(line.slice(label.length + 1).split(' ').map((kv) => kv.split('=')));
}

test('a check cannot read another running check, the agent token or the Worker vars', { timeout: TEST_TIMEOUT_MS }, async (t) => {
  if (process.getuid?.() !== 0) {
    t.skip('the agent isolates workspaces only when it runs as root');
    return;
  }
  const secret = `victim-secret-${randomBytes(8).toString('hex')}`;
  const victimSha = stack.commit(OWNER, 'victim', {
    '.sluice.toml': '[check]\ncommand = "sh victim.sh"\n',
    'victim.sh': victimScript(secret),
  });
  const victimId = await openPullRequest('victim', victimSha);
  // The workspace is named by the instance; `ready` says the secret is in place and waiting.
  const victimDir = join(stack.sandboxRoot, 'workspaces', victimId);
  await stack.waitFor(() => existsSync(join(victimDir, 'ready')), { timeoutMs: RUN_TIMEOUT_MS, message: 'the victim to be ready' });

  const thiefSha = stack.commit(OWNER, 'thief', {
    '.sluice.toml': '[check]\ncommand = "sh thief.sh"\n',
    'thief.sh': thiefScript({
      victimDir, workspacesDir: join(stack.sandboxRoot, 'workspaces'), agentPid: stack.agentPid, envFile: stack.envFile,
    }),
  });
  const thiefId = await openPullRequest('thief', thiefSha);
  await waitForTerminal(thiefId);
  const { conclusion, output: { summary } } = await checkRun('thief');
  assert.equal(conclusion, 'success', summary);

  const victim = field(summary, 'victim-process');
  assert.ok(Number(victim.seen) >= 1, `the thief found the victim's process: ${summary}`);
  assert.equal(victim.readable, '0', summary);
  const all = field(summary, 'all-environ');
  assert.ok(Number(all.denied) > 0, summary);
  assert.equal(all.leaked, '0', summary);
  for (const attempt of [
    `attempt cat ${victimDir}/secret.txt denied`,
    `attempt ls ${victimDir} denied`,
    `attempt ls ${join(stack.sandboxRoot, 'workspaces')} denied`,
    `attempt cat /proc/${stack.agentPid}/environ denied`,
    `attempt cat ${stack.envFile} denied`,
  ]) {
    assert.ok(summary.split('\n').includes(attempt), `expected "${attempt}" in ${summary}`);
  }
  const hex = summary.split('\n').find((l) => l.startsWith('agent-cmdline '))?.slice('agent-cmdline '.length) ?? '';
  const cmdline = Buffer.from(hex, 'hex').toString('utf8');
  assert.match(cmdline, /sluice-sandbox-agent/, 'the agent\'s command line was read');
  assert.ok(!cmdline.includes(stack.agentToken), 'no token in the agent\'s command line');
  assert.ok(!summary.includes(secret) && !summary.includes(stack.agentToken), summary);

  // The victim was undisturbed and ends once released.
  writeFileSync(join(victimDir, 'release'), '');
  await waitForTerminal(victimId);
  assert.equal((await checkRun('victim')).conclusion, 'success');
});
