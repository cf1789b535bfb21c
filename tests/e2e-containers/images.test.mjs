// End-to-end inside real containers (docs/containers-local.md): image classes
// (src/sandbox/image.rs). A `[check]` selects one with `image = "node"` or `image = "rust"` (and
// may ask a larger `instance_type` the class allows); its command runs in that class's container,
// built offline from Debian's packages (scripts/containers/setup.sh: node-packages.txt,
// rust-packages.txt), which the host's own Node (20) and Rust (rustup) are not. An unknown class
// fails the check naming the classes that exist, before any container starts. A job's artifacts
// stream from its container to the container of the job that needs it.
//
// Run by `npm test` when the machine can run containers (scripts/test.sh), and by
// `npm run test:containers`.

import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { after, before } from 'node:test';
import { startStack } from '../e2e/harness.mjs';
import { OWNER, checkRuns, marker1, waitForTerminal, loggedTest, openPullRequest } from './helpers.mjs';

// node:test's limit per test: a run wait (a cold container of a class, a crate's build) plus the
// requests around it.
const TEST_TIMEOUT_MS = 8 * 60_000;
// A rust check builds and tests a crate in a container on 2 shared cores: a minute or two cold.
const RUST_RUN_TIMEOUT_MS = 6 * 60_000;
// Starting the stack: setup.sh (cold: mmdebstrap of three images), the agent's release build,
// the Worker build when not prebuilt, and wrangler dev building every class's agent image.
const STACK_START_TIMEOUT_MS = 45 * 60_000;

// Where the command ran: its host name, and whether it is a Docker container.
const WHERE = [
  'printf "sluice-%s=%s\\n" host "$(hostname)"',
  'printf "sluice-%s=%s\\n" dockerenv "$(test -f /.dockerenv && echo yes || echo no)"',
].join('; ');

const NODE_CONFIG = `[check]\ncommand = '''${WHERE}; printf "sluice-%s=%s\\n" node "$(node --version)"; npm --version'''\nimage = "node"\n`;

// A crate with no dependencies (nothing to fetch from a registry), with one unit test.
const CRATE = {
  'Cargo.toml': '[package]\nname = "boxed"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n',
  'src/lib.rs': 'pub fn add(a: u32, b: u32) -> u32 {\n    a + b\n}\n\n#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(super::add(2, 3), 5);\n    }\n}\n',
};
const RUST_CONFIG = `[check]\ncommand = '''${WHERE}; printf "sluice-%s=%s\\n" cargo "$(cargo --version)"; cargo test --offline 2>&1'''\nimage = "rust"\ninstance_type = "standard-2"\n`;

let stack;

before(async () => {
  stack = await startStack({ containers: true });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await stack?.stop();
});

async function concluded(repo, sha, id, timeoutMs) {
  await waitForTerminal(stack, id, 'complete', timeoutMs);
  // The pull request's check (its preview's check run aside).
  const runs = (await checkRuns(stack, repo)).filter((r) => r.name === 'sluice/check');
  assert.equal(runs.length, 1, JSON.stringify(runs, null, 2));
  assert.equal(runs[0].head_sha, sha);
  assert.equal(runs[0].status, 'completed');
  return runs[0];
}

function assertInContainer(summary) {
  const host = marker1(summary, 'host');
  assert.notEqual(host, hostname(), 'the command ran on the host');
  assert.equal(marker1(summary, 'dockerenv'), 'yes');
}

loggedTest(() => stack, TEST_TIMEOUT_MS, 'a node check runs node --version in the node image and passes', async () => {
  const repo = 'imaged-node';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': NODE_CONFIG, 'README.md': '# node\n' });
  const id = await openPullRequest(stack, repo, sha);
  const run = await concluded(repo, sha, id);
  const summary = run.output.summary;
  assert.equal(run.conclusion, 'success', summary);
  assertInContainer(summary);
  // Debian bookworm's Node.js (18), not the host's.
  assert.match(marker1(summary, 'node'), /^v18\.\d+\.\d+$/, summary);
});

loggedTest(() => stack, TEST_TIMEOUT_MS, 'a rust check on a larger instance type builds and tests a crate in the rust image', async () => {
  const repo = 'imaged-rust';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': RUST_CONFIG, ...CRATE });
  const id = await openPullRequest(stack, repo, sha);
  const run = await concluded(repo, sha, id, RUST_RUN_TIMEOUT_MS);
  const summary = run.output.summary;
  assert.equal(run.conclusion, 'success', summary);
  assertInContainer(summary);
  // Debian's cargo-web (1.85 or newer), not the host's rustup toolchain.
  assert.match(marker1(summary, 'cargo'), /^cargo 1\.\d+\.\d+/, summary);
  assert.match(summary, /test tests::adds \.\.\. ok/, summary);
  assert.match(summary, /test result: ok\. 1 passed/, summary);
});

loggedTest(() => stack, TEST_TIMEOUT_MS, 'an unknown image class fails the check naming the classes that exist', async () => {
  const repo = 'imaged-unknown';
  const config = '[check]\ncommand = "true"\nimage = "python"\n';
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const id = await openPullRequest(stack, repo, sha);
  const run = await concluded(repo, sha, id);
  assert.equal(run.conclusion, 'failure', run.output.summary);
  assert.match(run.output.summary, /image "python" is no sandbox image class \(classes: base, node, rust\)/);
});

// A job's artifacts between two containers (each unit has its own): the archive streams from
// build's container through its object to R2 and from R2 into test's container
// (`src/worker_glue/archives.rs`, the container object's `pass_archive`).
loggedTest(() => stack, TEST_TIMEOUT_MS, "build's artifacts stream from its container to test's through R2", async () => {
  const repo = 'containers-artifacts';
  const config = [
    '[jobs.build]',
    `command = '''${WHERE}; mkdir -p dist && hostname > dist/built-on && echo built-$SLUICE_SHA > dist/app.txt'''`,
    'artifacts = ["dist/**"]', '',
    '[jobs.test]',
    `command = '''${WHERE}; test "$(cat dist/app.txt)" = built-$SLUICE_SHA && printf "sluice-%s=%s\\n" built "$(cat dist/built-on)"'''`,
    'needs = ["build"]', '',
  ].join('\n');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const id = await openPullRequest(stack, repo, sha);
  await waitForTerminal(stack, id, 'complete');
  const runs = Object.fromEntries((await checkRuns(stack, repo)).map((r) => [r.name, r]));
  for (const name of ['sluice/build', 'sluice/test', 'sluice/check']) {
    assert.equal(runs[name]?.conclusion, 'success', `${name}: ${runs[name]?.output?.summary}`);
  }
  const testSummary = runs['sluice/test'].output.summary;
  assertInContainer(testSummary);
  // Made in build's container, read in test's: two containers, one archive between them.
  assert.notEqual(marker1(testSummary, 'built'), marker1(testSummary, 'host'), testSummary);
  assert.match(runs['sluice/build'].output.summary, /\*\*Artifacts\*\*: 2 files, /);
});
