// Git helpers for the GitHub stand-in: bare repositories on disk, driven by the real `git` CLI
// (execFile only, never a shell), so clones and API reads see exactly what git would.

import { execFile, execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// GitHub owner/repo names are ASCII letters, digits, '-', '_' and '.'; anything else (and '.'/'..')
// could escape reposDir, so it is refused before touching the filesystem.
const NAME_RE = /^[A-Za-z0-9_.-]{1,100}$/;

// Largest stdout we buffer from a read command (ls-tree of a big tree, a 1 MiB blob); far above
// what the contents API serves, small enough that a runaway command cannot exhaust memory.
const MAX_GIT_OUTPUT_BYTES = 16 * 1024 * 1024;

// Fixed identity and no user/system config, so commits work on a machine with no git setup and
// do not depend on whoever runs the tests.
const COMMIT_ENV = {
  GIT_AUTHOR_NAME: 'Sluice Stand-in',
  GIT_AUTHOR_EMAIL: 'standin@sluice.invalid',
  GIT_COMMITTER_NAME: 'Sluice Stand-in',
  GIT_COMMITTER_EMAIL: 'standin@sluice.invalid',
  GIT_CONFIG_NOSYSTEM: '1',
  GIT_CONFIG_GLOBAL: '/dev/null',
};

const ZERO_SHA = '0'.repeat(40);

export function isValidName(name) {
  return typeof name === 'string' && NAME_RE.test(name) && name !== '.' && name !== '..';
}

function assertNames(owner, repo) {
  if (!isValidName(owner) || !isValidName(repo)) {
    throw new Error(`invalid owner/repo name: ${owner}/${repo}`);
  }
}

export function repoPath(reposDir, owner, repo) {
  assertNames(owner, repo);
  return join(reposDir, owner, `${repo}.git`);
}

function gitSync(gitDir, args, { input, env } = {}) {
  return execFileSync('git', [`--git-dir=${gitDir}`, ...args], {
    input,
    env: { ...process.env, ...COMMIT_ENV, ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
    maxBuffer: MAX_GIT_OUTPUT_BYTES,
  });
}

// Async read for the HTTP server, so a slow git command never blocks other requests.
// Resolves stdout as a Buffer; rejects with err.code = exit status on failure.
export function readGit(gitDir, args) {
  return new Promise((resolve, reject) => {
    execFile(
      'git',
      ['--literal-pathspecs', `--git-dir=${gitDir}`, ...args],
      { encoding: 'buffer', maxBuffer: MAX_GIT_OUTPUT_BYTES, env: { ...process.env, ...COMMIT_ENV } },
      (err, stdout) => (err ? reject(err) : resolve(stdout)),
    );
  });
}

export function repoExists(reposDir, owner, repo) {
  return isValidName(owner) && isValidName(repo) && existsSync(join(repoPath(reposDir, owner, repo), 'HEAD'));
}

export function createRepo(reposDir, owner, repo) {
  const dir = repoPath(reposDir, owner, repo);
  if (existsSync(join(dir, 'HEAD'))) return dir;
  mkdirSync(join(reposDir, owner), { recursive: true });
  execFileSync('git', ['init', '--quiet', '--bare', '--initial-branch=main', dir], {
    env: { ...process.env, ...COMMIT_ENV },
    stdio: 'pipe',
  });
  // GitHub lets clients fetch any reachable commit by sha and use partial-clone filters;
  // CI checkouts of a pull request head rely on the former.
  gitSync(dir, ['config', 'uploadpack.allowReachableSHA1InWant', 'true']);
  gitSync(dir, ['config', 'uploadpack.allowFilter', 'true']);
  return dir;
}

export function headSha(reposDir, owner, repo, branch = 'main') {
  const dir = repoPath(reposDir, owner, repo);
  try {
    return gitSync(dir, ['rev-parse', '--verify', '--quiet', `refs/heads/${branch}^{commit}`]).toString().trim();
  } catch {
    return null;
  }
}

function assertFilePath(path) {
  const parts = path.split('/');
  const bad = path.includes('\0') || path.includes('\n') || parts.some((p) => p === '' || p === '.' || p === '..' || p === '.git');
  if (bad) throw new Error(`invalid file path: ${JSON.stringify(path)}`);
}

// Builds the index for the new commit: starts from the parent's tree (unless removeOthers), then
// adds each file as a blob, or removes it when its content is null.
function stageFiles(dir, env, parent, files, removeOthers) {
  if (parent && !removeOthers) gitSync(dir, ['read-tree', parent], { env });
  let indexInfo = '';
  for (const [path, content] of Object.entries(files)) {
    assertFilePath(path);
    if (content === null) {
      indexInfo += `0 ${ZERO_SHA}\t${path}\0`;
      continue;
    }
    const blob = gitSync(dir, ['hash-object', '-w', '--stdin'], { input: content }).toString().trim();
    indexInfo += `100644 ${blob}\t${path}\0`;
  }
  if (indexInfo) gitSync(dir, ['update-index', '-z', '--index-info'], { input: indexInfo, env });
}

// Commits `files` ({path: string | Buffer | null}) onto `branch` of the bare repo with plumbing
// commands and a throwaway index, so no work tree or clone is needed. Returns the commit sha.
export function commitFiles(reposDir, owner, repo, { branch = 'main', files = {}, message = 'Update files', removeOthers = false } = {}) {
  const dir = createRepo(reposDir, owner, repo);
  const parent = headSha(reposDir, owner, repo, branch);
  const tmp = mkdtempSync(join(tmpdir(), 'standin-index-'));
  try {
    const env = { GIT_INDEX_FILE: join(tmp, 'index') };
    stageFiles(dir, env, parent, files, removeOthers);
    const tree = gitSync(dir, ['write-tree'], { env }).toString().trim();
    const parentArgs = parent ? ['-p', parent] : [];
    const sha = gitSync(dir, ['commit-tree', tree, ...parentArgs], { input: message }).toString().trim();
    // Old-value check makes a concurrent writer fail loudly instead of silently losing a commit.
    gitSync(dir, ['update-ref', `refs/heads/${branch}`, sha, parent ?? ZERO_SHA]);
    return sha;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

// Points tag `name` at commit `sha` (a lightweight tag, as `git tag name sha`).
export function tagCommit(reposDir, owner, repo, name, sha) {
  const dir = repoPath(reposDir, owner, repo);
  gitSync(dir, ['update-ref', `refs/tags/${name}`, sha]);
}

// Tag names git itself accepts that cannot be read as an option or a revision expression.
const TAG_NAME_RE = /^(?![-/.])(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/+-]{1,255}$/;

function assertTagName(name) {
  if (typeof name !== 'string' || !TAG_NAME_RE.test(name)) throw new Error(`invalid tag name: ${JSON.stringify(name)}`);
}

// Makes `name` an annotated tag of `target` (a commit, or another tag's object for a tag of a
// tag), as `git tag -a name -m message target` does, and release tools (`npm version`, `cargo
// release`) too; `force` moves an existing one (`git tag -f`). Returns the new tag object's sha.
export function tagAnnotated(reposDir, owner, repo, name, target, { message = name, force = false } = {}) {
  assertTagName(name);
  if (!/^[0-9a-f]{40}$/.test(target)) throw new Error(`invalid object id: ${JSON.stringify(target)}`);
  const dir = repoPath(reposDir, owner, repo);
  gitSync(dir, ['tag', '-a', ...(force ? ['-f'] : []), '-m', message, name, target]);
  return gitSync(dir, ['rev-parse', '--verify', `refs/tags/${name}`]).toString().trim();
}

// What a push of tag `name` names: `after`, the ref's object (the tag object of an annotated tag,
// else the commit), and `headCommit`, the commit it peels to, as a push event carries them; null
// when there is no such tag.
export function tagPushShas(reposDir, owner, repo, name) {
  assertTagName(name);
  const dir = repoPath(reposDir, owner, repo);
  try {
    const after = gitSync(dir, ['rev-parse', '--verify', '--quiet', `refs/tags/${name}`]).toString().trim();
    const headCommit = gitSync(dir, ['rev-parse', '--verify', '--quiet', `refs/tags/${name}^{commit}`]).toString().trim();
    return { after, headCommit };
  } catch {
    return null;
  }
}
