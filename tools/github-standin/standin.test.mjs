// Tests for the GitHub stand-in: real HTTP against a started server, real bare git repositories in
// a temp dir, real RSA keys. Run with `node --test tools/github-standin/`.

import assert from 'node:assert/strict';
import { execFile, execFileSync, spawn } from 'node:child_process';
import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { commitFiles, createRepo, headSha, tagAnnotated, tagCommit, tagPushShas } from './git.mjs';
import { startStandin } from './server.mjs';
import { checkRunRequestedActionPayload, pullRequestPayload, pushPayload, repoId, sendWebhook, signBody } from './webhooks.mjs';

const execFileAsync = promisify(execFile);
const HERE = fileURLToPath(new URL('.', import.meta.url));
const APP_ID = 1234;
const INSTALLATION = 42;
const OWNER = 'acme';
const REPO = 'widgets';
const BIG_FILE_BYTES = 1024 * 1024 + 10; // just over GitHub's 1 MB inline-content limit
// Git must not consult the invoking user's config, credential helpers or a terminal.
const GIT_ENV = { ...process.env, GIT_TERMINAL_PROMPT: '0', GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', GIT_ASKPASS: '', SSH_ASKPASS: '' };

let tmp;
let reposDir;
let keys;
let otherKeys;
let standin;
let mainSha;
let firstSha;
let featureSha;

function rsaKeys() {
  return generateKeyPairSync('rsa', { modulusLength: 2048 });
}

function b64url(value) {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

function makeJwt(privateKey, claims = {}, header = { alg: 'RS256', typ: 'JWT' }) {
  const now = Math.floor(Date.now() / 1000);
  const body = { iat: now - 60, exp: now + 540, iss: APP_ID, ...claims };
  const signingInput = `${b64url(header)}.${b64url(body)}`;
  const signature = sign('RSA-SHA256', Buffer.from(signingInput), privateKey).toString('base64url');
  return `${signingInput}.${signature}`;
}

async function request(method, path, { auth, body, rawBody, headers = {}, base = standin.url } = {}) {
  const init = { method, headers: { ...headers } };
  if (auth) init.headers.Authorization = auth;
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    init.headers['Content-Type'] = 'application/json';
  }
  if (rawBody !== undefined) init.body = rawBody;
  const res = await fetch(`${base}${path}`, init);
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // leave json null; tests asserting on JSON will fail loudly
  }
  return { status: res.status, headers: res.headers, json, text };
}

// fetch() normalises dot segments (even percent-encoded ones); this sends the path verbatim.
function rawGet(path, auth) {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: standin.port, path, headers: { Authorization: auth } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(text) }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function issueToken(jwtClaims = {}, body) {
  const res = await request('POST', `/app/installations/${INSTALLATION}/access_tokens`, {
    auth: `Bearer ${makeJwt(keys.privateKey, jwtClaims)}`,
    body,
  });
  assert.equal(res.status, 201, res.text);
  return res.json.token;
}

function gitHashObject(content) {
  const buf = Buffer.from(content);
  return createHash('sha1').update(`blob ${buf.length}\0`).update(buf).digest('hex');
}

function basicHeader(token) {
  return `Authorization: Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}`;
}

async function gitClone(url, dest, extraArgs = []) {
  return execFileAsync('git', ['-c', 'credential.helper=', ...extraArgs, 'clone', '--quiet', url, dest], { env: GIT_ENV });
}

before(() => {
  tmp = mkdtempSync(join(tmpdir(), 'standin-test-'));
  reposDir = join(tmp, 'repos');
  keys = rsaKeys();
  otherKeys = rsaKeys();
  firstSha = commitFiles(reposDir, OWNER, REPO, {
    files: { 'README.md': 'first\n', 'docs/guide.md': 'guide\n' },
    message: 'first commit',
  });
  mainSha = commitFiles(reposDir, OWNER, REPO, {
    files: {
      'README.md': '# Widgets\n'.repeat(20),
      '.sluice/config.yml': 'steps:\n  - run: cargo test\n',
      'big.bin': 'x'.repeat(BIG_FILE_BYTES),
    },
    message: 'second commit',
  });
  featureSha = commitFiles(reposDir, OWNER, REPO, { branch: 'feature/x', files: { 'feature.txt': 'feature\n' }, message: 'feature' });
});

before(async () => {
  standin = await startStandin({
    reposDir,
    appId: APP_ID,
    publicKeyPem: keys.publicKey.export({ type: 'spki', format: 'pem' }),
    installations: [INSTALLATION],
  });
});

after(async () => {
  await standin?.close();
  rmSync(tmp, { recursive: true, force: true });
});

// ---------------------------------------------------------------------------------------------
// git.mjs

test('git helpers: createRepo is idempotent and commitFiles keeps, replaces and removes files', () => {
  const dir = createRepo(reposDir, 'helpers', 'repo');
  assert.equal(createRepo(reposDir, 'helpers', 'repo'), dir);
  assert.equal(headSha(reposDir, 'helpers', 'repo', 'main'), null);
  const a = commitFiles(reposDir, 'helpers', 'repo', { files: { 'a.txt': 'a', 'b/c.txt': 'c' }, message: 'a' });
  assert.match(a, /^[0-9a-f]{40}$/);
  assert.equal(headSha(reposDir, 'helpers', 'repo'), a);
  const b = commitFiles(reposDir, 'helpers', 'repo', { files: { 'd.txt': 'd', 'a.txt': null }, message: 'b' });
  const lsTree = (rev) => execFileSyncGit(dir, ['ls-tree', '-r', '--name-only', rev]).trim().split('\n');
  assert.deepEqual(lsTree(b), ['b/c.txt', 'd.txt']);
  assert.equal(execFileSyncGit(dir, ['rev-parse', `${b}^`]).trim(), a);
  const c = commitFiles(reposDir, 'helpers', 'repo', { files: { 'only.txt': 'o' }, removeOthers: true });
  assert.deepEqual(lsTree(c), ['only.txt']);
  assert.equal(execFileSyncGit(dir, ['symbolic-ref', 'HEAD']).trim(), 'refs/heads/main');
  assert.throws(() => createRepo(reposDir, '..', 'x'), /invalid owner\/repo/);
  assert.throws(() => commitFiles(reposDir, 'helpers', 'repo', { files: { '../escape': 'x' } }), /invalid file path/);
});

// Synchronous git is fine here only because no server request is in flight meanwhile.
function execFileSyncGit(gitDir, args) {
  return execFileSync('git', [`--git-dir=${gitDir}`, ...args], { env: GIT_ENV, encoding: 'utf8' });
}

// ---------------------------------------------------------------------------------------------
// Installation access tokens

test('access token: a valid JWT gets a ghs_ token with GitHub-shaped fields', async () => {
  const before = Date.now();
  const res = await request('POST', `/app/installations/${INSTALLATION}/access_tokens`, {
    auth: `Bearer ${makeJwt(keys.privateKey)}`,
  });
  assert.equal(res.status, 201);
  assert.equal(res.headers.get('content-type'), 'application/json; charset=utf-8');
  assert.match(res.json.token, /^ghs_[A-Za-z0-9]{36}$/);
  assert.match(res.json.expires_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
  const expires = Date.parse(res.json.expires_at);
  assert.ok(Math.abs(expires - (before + 3600_000)) < 5_000, `expires_at ${res.json.expires_at}`);
  assert.deepEqual(res.json.permissions, { checks: 'write', contents: 'write', deployments: 'write', metadata: 'read', pull_requests: 'write' });
  assert.equal(res.json.repository_selection, 'all');
});

test('compare: how a commit relates to a branch (identical, behind, ahead or diverged), 404 for unknowns', async () => {
  const token = await issueToken();
  const auth = `token ${token}`;
  const cmp = (basehead) => request('GET', `/repos/${OWNER}/${REPO}/compare/${encodeURIComponent(basehead)}`, { auth });
  const same = await cmp(`main...${mainSha}`);
  assert.equal(same.status, 200, same.text);
  assert.deepEqual([same.json.status, same.json.ahead_by, same.json.behind_by], ['identical', 0, 0]);
  const older = await cmp(`main...${firstSha}`);
  assert.deepEqual([older.json.status, older.json.behind_by], ['behind', 1]);
  const feature = await cmp(`main...${featureSha}`);
  assert.ok(['ahead', 'diverged'].includes(feature.json.status), feature.text);
  assert.ok(feature.json.commits.some((c) => c.sha === featureSha));
  // The files head changes from the merge base, as GitHub lists them.
  assert.deepEqual(feature.json.files.map((f) => [f.filename, f.status]), [['feature.txt', 'added']]);
  assert.deepEqual(same.json.files, []);
  assert.equal((await cmp(`main...${'f'.repeat(40)}`)).status, 404);
  assert.equal((await cmp('main')).status, 404);
});

test('app JWT: GET /repos/{o}/{r}/installation finds the installation, 404 elsewhere; GET /app names the App', async () => {
  const auth = `Bearer ${makeJwt(keys.privateKey)}`;
  const found = await request('GET', `/repos/${OWNER}/${REPO}/installation`, { auth });
  assert.equal(found.status, 200, found.text);
  assert.equal(found.json.id, INSTALLATION);
  assert.equal(found.json.app_id, APP_ID);
  assert.equal(found.json.account.login, OWNER);
  const missing = await request('GET', `/repos/${OWNER}/no-such-repo/installation`, { auth });
  assert.equal(missing.status, 404);
  const noJwt = await request('GET', `/repos/${OWNER}/${REPO}/installation`, {});
  assert.equal(noJwt.status, 401);
  const app = await request('GET', '/app', { auth });
  assert.equal(app.status, 200);
  assert.deepEqual([app.json.id, app.json.slug], [APP_ID, 'sluice']);
  assert.equal((await request('GET', '/app', { auth: 'Bearer nope' })).status, 401);
});

test('access token: GitHub\'s documented claims (iat now-60, exp now+600) and a string iss are accepted', async () => {
  const now = Math.floor(Date.now() / 1000);
  await issueToken({ iat: now - 60, exp: now + 600 });
  await issueToken({ iss: String(APP_ID) });
});

test('access token: JWT problems are 401 with GitHub\'s messages', async () => {
  const now = Math.floor(Date.now() / 1000);
  const path = `/app/installations/${INSTALLATION}/access_tokens`;
  const undecodable = 'A JSON web token could not be decoded';
  const hs256 = makeJwt(keys.privateKey, {}, { alg: 'HS256', typ: 'JWT' });
  const cases = [
    [undefined, undecodable],
    ['Bearer not.a.jwt', undecodable],
    ['Bearer abc', undecodable],
    [`Bearer ${hs256}`, undecodable],
    [`token ${makeJwt(keys.privateKey)}`, undecodable],
    [`Bearer ${makeJwt(otherKeys.privateKey)}`, undecodable],
    [`Bearer ${makeJwt(keys.privateKey, { iss: 999 })}`, /'iss'/],
    [`Bearer ${makeJwt(keys.privateKey, { iss: undefined })}`, /'iss'/],
    [`Bearer ${makeJwt(keys.privateKey, { exp: now - 5 })}`, /'exp'.*future time/],
    [`Bearer ${makeJwt(keys.privateKey, { exp: String(now + 60) })}`, /'exp'/],
    [`Bearer ${makeJwt(keys.privateKey, { iat: now, exp: now + 601 + 5 })}`, "'Expiration time' claim ('exp') is too far in the future"],
    [`Bearer ${makeJwt(keys.privateKey, { iat: now + 120, exp: now + 300 })}`, /'iat'/],
  ];
  for (const [auth, expected] of cases) {
    const res = await request('POST', path, { auth });
    assert.equal(res.status, 401, `${auth}: ${res.text}`);
    if (expected instanceof RegExp) assert.match(res.json.message, expected);
    else assert.equal(res.json.message, expected);
    assert.match(res.json.documentation_url, /^https:\/\/docs\.github\.com\/rest/);
  }
});

test('access token: a tampered payload fails signature verification', async () => {
  const [h, , s] = makeJwt(keys.privateKey).split('.');
  const now = Math.floor(Date.now() / 1000);
  const forged = `${h}.${b64url({ iat: now - 60, exp: now + 500, iss: APP_ID, extra: 1 })}.${s}`;
  const res = await request('POST', `/app/installations/${INSTALLATION}/access_tokens`, { auth: `Bearer ${forged}` });
  assert.equal(res.status, 401);
  assert.equal(res.json.message, 'A JSON web token could not be decoded');
});

test('access token: unknown installation is 404, bad body is 400', async () => {
  const auth = `Bearer ${makeJwt(keys.privateKey)}`;
  for (const id of ['43', 'abc']) {
    const res = await request('POST', `/app/installations/${id}/access_tokens`, { auth });
    assert.equal(res.status, 404);
    assert.equal(res.json.message, 'Not Found');
  }
  const bad = await request('POST', `/app/installations/${INSTALLATION}/access_tokens`, {
    auth, rawBody: '{not json', headers: { 'Content-Type': 'application/json' },
  });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.message, 'Problems parsing JSON');
});

test('access token: requested permissions narrow the token and cannot exceed the app\'s', async () => {
  const auth = `Bearer ${makeJwt(keys.privateKey)}`;
  const tooMuch = await request('POST', `/app/installations/${INSTALLATION}/access_tokens`, { auth, body: { permissions: { administration: 'write' } } });
  assert.equal(tooMuch.status, 422);
  const narrow = await request('POST', `/app/installations/${INSTALLATION}/access_tokens`, { auth, body: { permissions: { checks: 'read' } } });
  assert.equal(narrow.status, 201);
  assert.deepEqual(narrow.json.permissions, { checks: 'read', metadata: 'read' });
  const write = await request('POST', `/repos/${OWNER}/${REPO}/check-runs`, {
    auth: `token ${narrow.json.token}`, body: { name: 'ci', head_sha: mainSha },
  });
  assert.equal(write.status, 403);
  assert.equal(write.json.message, 'Resource not accessible by integration');
  const contents = await request('GET', `/repos/${OWNER}/${REPO}/contents/README.md`, { auth: `token ${narrow.json.token}` });
  assert.equal(contents.status, 403);
});

test('access token: `repositories` limits it to those repositories, over the API and git', async () => {
  commitFiles(reposDir, OWNER, 'other', { files: { 'x.txt': 'x\n' } });
  const token = await issueToken({}, { repositories: [REPO], permissions: { contents: 'read' } });
  const mine = await request('GET', `/repos/${OWNER}/${REPO}/contents/README.md`, { auth: `token ${token}` });
  assert.equal(mine.status, 200);
  const other = await request('GET', `/repos/${OWNER}/other/contents/x.txt`, { auth: `token ${token}` });
  assert.equal(other.status, 404, 'another repository of the installation is out of reach');
  await assert.rejects(
    gitClone(`${standin.url}/${OWNER}/other.git`, join(tmp, 'scoped-other'), ['-c', `http.extraHeader=${basicHeader(token)}`]),
    /not found|404/i,
  );
  await gitClone(`${standin.url}/${OWNER}/${REPO}.git`, join(tmp, 'scoped-mine'), ['-c', `http.extraHeader=${basicHeader(token)}`]);
  const bad = await request('POST', `/app/installations/${INSTALLATION}/access_tokens`, {
    auth: `Bearer ${makeJwt(keys.privateKey)}`, body: { repositories: [`${OWNER}/${REPO}`] },
  });
  assert.equal(bad.status, 422, 'names, not full names');
});

test('DELETE /installation/token revokes the token that authenticates it (204), then 401', async () => {
  const token = await issueToken();
  const revoked = await request('DELETE', '/installation/token', { auth: `token ${token}` });
  assert.equal(revoked.status, 204);
  const after = await request('GET', `/repos/${OWNER}/${REPO}`, { auth: `token ${token}` });
  assert.equal(after.status, 401);
  const again = await request('DELETE', '/installation/token', { auth: `token ${token}` });
  assert.equal(again.status, 401, 'a revoked token cannot revoke');
});

test('app key formats: PKCS#1 public, PKCS#1 private and PKCS#8 private PEMs all verify JWTs', async () => {
  const pems = [
    keys.publicKey.export({ type: 'pkcs1', format: 'pem' }),
    keys.privateKey.export({ type: 'pkcs1', format: 'pem' }),
    keys.privateKey.export({ type: 'pkcs8', format: 'pem' }),
  ];
  assert.match(pems[0], /BEGIN RSA PUBLIC KEY/);
  assert.match(pems[1], /BEGIN RSA PRIVATE KEY/);
  assert.match(pems[2], /BEGIN PRIVATE KEY/);
  for (const publicKeyPem of pems) {
    const other = await startStandin({ reposDir, appId: APP_ID, publicKeyPem });
    try {
      const ok = await request('POST', `/app/installations/42/access_tokens`, { base: other.url, auth: `Bearer ${makeJwt(keys.privateKey)}` });
      assert.equal(ok.status, 201);
      const bad = await request('POST', `/app/installations/42/access_tokens`, { base: other.url, auth: `Bearer ${makeJwt(otherKeys.privateKey)}` });
      assert.equal(bad.status, 401);
    } finally {
      await other.close();
    }
  }
});

// ---------------------------------------------------------------------------------------------
// Token auth on /repos

test('repos endpoints: missing, unknown, expired and JWT credentials are "Bad credentials"', async () => {
  const token = await issueToken();
  const expired = await issueToken();
  standin.state.tokens.get(expired).expiresAtMs = Date.now() - 1;
  const path = `/repos/${OWNER}/${REPO}`;
  for (const auth of [undefined, 'token ghs_000000000000000000000000000000000000', `token ${expired}`, `Bearer ${makeJwt(keys.privateKey)}`, `Basic ${Buffer.from(`x:${token}`).toString('base64')}`]) {
    const res = await request('GET', path, { auth });
    assert.equal(res.status, 401, String(auth));
    assert.equal(res.json.message, 'Bad credentials');
  }
  for (const auth of [`token ${token}`, `Bearer ${token}`]) {
    assert.equal((await request('GET', path, { auth })).status, 200, auth);
  }
});

// ---------------------------------------------------------------------------------------------
// Repository reads

test('GET repo: repository object with clone_url on the stand-in; unknown repos 404', async () => {
  const auth = `token ${await issueToken()}`;
  const res = await request('GET', `/repos/${OWNER}/${REPO}`, { auth });
  assert.equal(res.status, 200);
  assert.equal(res.json.id, repoId(OWNER, REPO));
  assert.equal(res.json.name, REPO);
  assert.equal(res.json.full_name, `${OWNER}/${REPO}`);
  assert.equal(res.json.owner.login, OWNER);
  assert.equal(res.json.private, false);
  assert.equal(res.json.default_branch, 'main');
  assert.equal(res.json.clone_url, `${standin.url}/${OWNER}/${REPO}.git`);
  for (const path of [`/repos/${OWNER}/nope`, `/repos/nobody/${REPO}`, `/repos/${OWNER}/%2E%2E`, `/repos/${OWNER}/..`, `/repos/${OWNER}/%E0%A4%A`]) {
    const missing = await rawGet(path, auth);
    assert.equal(missing.status, 404, path);
    assert.equal(missing.json.message, 'Not Found');
  }
});

test('GET contents: file object with wrapped base64 content at the default branch, a branch and a sha', async () => {
  const auth = `token ${await issueToken()}`;
  const readme = '# Widgets\n'.repeat(20);
  const res = await request('GET', `/repos/${OWNER}/${REPO}/contents/README.md`, { auth });
  assert.equal(res.status, 200);
  const file = res.json;
  assert.equal(file.type, 'file');
  assert.equal(file.encoding, 'base64');
  assert.equal(file.name, 'README.md');
  assert.equal(file.path, 'README.md');
  assert.equal(file.size, Buffer.byteLength(readme));
  assert.equal(file.sha, gitHashObject(readme));
  assert.equal(Buffer.from(file.content, 'base64').toString(), readme);
  const lines = file.content.split('\n');
  assert.equal(lines.pop(), '', 'content ends with a newline');
  assert.ok(lines.length > 1 && lines.every((l) => l.length <= 60) && lines[0].length === 60);
  assert.equal(file.url, `${standin.url}/repos/${OWNER}/${REPO}/contents/README.md?ref=main`);
  assert.equal(file.git_url, `${standin.url}/repos/${OWNER}/${REPO}/git/blobs/${file.sha}`);
  for (const key of ['html_url', 'download_url']) assert.equal(typeof file[key], 'string');
  assert.deepEqual(file._links, { self: file.url, git: file.git_url, html: file.html_url });

  const atFirst = await request('GET', `/repos/${OWNER}/${REPO}/contents/README.md?ref=${firstSha}`, { auth });
  assert.equal(Buffer.from(atFirst.json.content, 'base64').toString(), 'first\n');
  const nested = await request('GET', `/repos/${OWNER}/${REPO}/contents/.sluice/config.yml?ref=main`, { auth });
  assert.equal(Buffer.from(nested.json.content, 'base64').toString(), 'steps:\n  - run: cargo test\n');
  const onBranch = await request('GET', `/repos/${OWNER}/${REPO}/contents/feature.txt?ref=feature/x`, { auth });
  assert.equal(onBranch.status, 200);
  assert.equal(Buffer.from(onBranch.json.content, 'base64').toString(), 'feature\n');
});

test('GET contents: directories list entries; files over 1 MB have encoding "none"', async () => {
  const auth = `token ${await issueToken()}`;
  const root = await request('GET', `/repos/${OWNER}/${REPO}/contents/`, { auth });
  assert.equal(root.status, 200);
  assert.deepEqual(root.json.map((e) => [e.name, e.type]).sort(), [['.sluice', 'dir'], ['README.md', 'file'], ['big.bin', 'file'], ['docs', 'dir']]);
  const docs = await request('GET', `/repos/${OWNER}/${REPO}/contents/docs?ref=${firstSha}`, { auth });
  assert.deepEqual(docs.json.map((e) => e.path), ['docs/guide.md']);
  assert.equal(docs.json[0].size, 6);
  const big = await request('GET', `/repos/${OWNER}/${REPO}/contents/big.bin`, { auth });
  assert.equal(big.json.encoding, 'none');
  assert.equal(big.json.content, '');
  assert.equal(big.json.size, BIG_FILE_BYTES);
});

test('GET contents: missing path or ref is GitHub\'s 404 body', async () => {
  const auth = `token ${await issueToken()}`;
  const expected = { message: 'Not Found', documentation_url: 'https://docs.github.com/rest/repos/contents#get-repository-content', status: '404' };
  const paths = [
    'contents/nope.txt',
    'contents/docs/guide.md/more',
    'contents/README?ref=main',
    `contents/README.md?ref=${'0'.repeat(40)}`,
    'contents/README.md?ref=no-such-branch',
    'contents/README.md?ref=main:README.md',
    'contents/README.md?ref=main~1',
    'contents/docs/%2E%2E/README.md',
    'contents/docs/../README.md',
    'contents/feature.txt',
  ];
  for (const p of paths) {
    const res = await rawGet(`/repos/${OWNER}/${REPO}/${p}`, auth);
    assert.equal(res.status, 404, p);
    assert.deepEqual(res.json, expected, p);
  }
});

test('GET git/ref/heads: ref object for branches with slashes; unknown 404', async () => {
  const auth = `token ${await issueToken()}`;
  const res = await request('GET', `/repos/${OWNER}/${REPO}/git/ref/heads/main`, { auth });
  assert.equal(res.status, 200);
  assert.equal(res.json.ref, 'refs/heads/main');
  assert.equal(typeof res.json.node_id, 'string');
  assert.equal(res.json.url, `${standin.url}/repos/${OWNER}/${REPO}/git/refs/heads/main`);
  assert.deepEqual(res.json.object, { sha: mainSha, type: 'commit', url: `${standin.url}/repos/${OWNER}/${REPO}/git/commits/${mainSha}` });
  const feature = await request('GET', `/repos/${OWNER}/${REPO}/git/ref/heads/feature/x`, { auth });
  assert.equal(feature.json.object.sha, featureSha);
  for (const ref of ['heads/nope', 'heads/feature', 'main', 'heads/main~1']) {
    const missing = await request('GET', `/repos/${OWNER}/${REPO}/git/ref/${ref}`, { auth });
    assert.equal(missing.status, 404, ref);
  }
});

test('latency: an answer made now arrives later (after), a request is served later (before), count bounds it', async () => {
  const repo = 'latency';
  const first = commitFiles(reposDir, OWNER, repo, { files: { 'a.txt': 'a\n' } });
  const auth = `token ${await issueToken()}`;
  const path = `/repos/${OWNER}/${repo}/git/ref/heads/main`;
  const bad = await request('POST', '/_standin/latency', { body: { path_prefix: path, delay_ms: -1, count: 1 } });
  assert.equal(bad.status, 422);
  const set = await request('POST', '/_standin/latency', { body: { path_prefix: path, delay_ms: 400, count: 1, when: 'after' } });
  assert.equal(set.status, 201);
  const t0 = Date.now();
  const pending = request('GET', path, { auth });
  // The branch moves while the answer is held: the answer still names the head it was made at.
  await new Promise((r) => setTimeout(r, 100));
  const moved = commitFiles(reposDir, OWNER, repo, { files: { 'b.txt': 'b\n' } });
  const held = await pending;
  assert.ok(Date.now() - t0 >= 400, 'held for its delay');
  assert.equal(held.json.object.sha, first, 'the answer was made before the branch moved');
  const next = await request('GET', path, { auth });
  assert.equal(next.json.object.sha, moved, 'the rule served its one request');
  await request('POST', '/_standin/latency', { body: { path_prefix: path, delay_ms: 300, count: 1, when: 'before' } });
  const t1 = Date.now();
  const served = await request('GET', path, { auth });
  assert.ok(Date.now() - t1 >= 300);
  assert.equal(served.json.object.sha, moved);
});

test('GET branches: branch object with commit sha and parents; unknown 404', async () => {
  const auth = `token ${await issueToken()}`;
  const res = await request('GET', `/repos/${OWNER}/${REPO}/branches/main`, { auth });
  assert.equal(res.status, 200);
  assert.equal(res.json.name, 'main');
  assert.equal(res.json.protected, false);
  assert.equal(res.json.commit.sha, mainSha);
  assert.equal(res.json.commit.commit.message, 'second commit');
  assert.deepEqual(res.json.commit.parents.map((p) => p.sha), [firstSha]);
  assert.equal(res.json.commit.commit.author.name, 'Sluice Stand-in');
  const feature = await request('GET', `/repos/${OWNER}/${REPO}/branches/feature/x`, { auth });
  assert.equal(feature.json.commit.sha, featureSha);
  const missing = await request('GET', `/repos/${OWNER}/${REPO}/branches/nope`, { auth });
  assert.equal(missing.status, 404);
  assert.equal(missing.json.message, 'Branch not found');
});

// ---------------------------------------------------------------------------------------------
// Check runs

test('check runs: create, update through completion, get, and list for a ref', async () => {
  const auth = `token ${await issueToken()}`;
  const base = `/repos/${OWNER}/${REPO}`;
  const created = await request('POST', `${base}/check-runs`, {
    auth, body: { name: 'sluice / build', head_sha: mainSha, details_url: 'https://ci.example/run/1', external_id: 'run-1' },
  });
  assert.equal(created.status, 201, created.text);
  const run = created.json;
  assert.ok(Number.isSafeInteger(run.id) && run.id > 2 ** 31);
  assert.equal(run.name, 'sluice / build');
  assert.equal(run.head_sha, mainSha);
  assert.equal(run.status, 'queued');
  assert.equal(run.conclusion, null);
  assert.equal(run.completed_at, null);
  assert.match(run.started_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);
  assert.equal(run.details_url, 'https://ci.example/run/1');
  assert.equal(run.external_id, 'run-1');
  assert.equal(run.url, `${standin.url}${base}/check-runs/${run.id}`);
  assert.equal(typeof run.html_url, 'string');
  assert.equal(typeof run.node_id, 'string');
  assert.deepEqual(run.output, { title: null, summary: null, text: null, annotations_count: 0, annotations_url: `${run.url}/annotations` });
  assert.deepEqual(run.app, { id: APP_ID, slug: 'sluice', name: 'Sluice' });
  assert.equal(typeof run.check_suite.id, 'number');
  assert.deepEqual(run.pull_requests, []);

  const progress = await request('PATCH', `${base}/check-runs/${run.id}`, { auth, body: { status: 'in_progress', output: { title: 'Building', summary: 'step 1/3' } } });
  assert.equal(progress.status, 200);
  assert.equal(progress.json.status, 'in_progress');
  assert.equal(progress.json.output.title, 'Building');
  assert.equal(progress.json.name, 'sluice / build', 'fields not sent are kept');

  const done = await request('PATCH', `${base}/check-runs/${run.id}`, { auth, body: { conclusion: 'success', output: { title: 'Passed', summary: 'all green', text: 'details' } } });
  assert.equal(done.json.status, 'completed', 'a conclusion completes the run');
  assert.equal(done.json.conclusion, 'success');
  assert.match(done.json.completed_at, /Z$/);
  assert.deepEqual([done.json.output.summary, done.json.output.text], ['all green', 'details']);

  const fetched = await request('GET', `${base}/check-runs/${run.id}`, { auth });
  assert.deepEqual(fetched.json, done.json);

  const second = await request('POST', `${base}/check-runs`, { auth, body: { name: 'sluice / lint', head_sha: mainSha, conclusion: 'failure', completed_at: '2026-01-02T03:04:05.678Z' } });
  assert.equal(second.json.status, 'completed');
  assert.equal(second.json.completed_at, '2026-01-02T03:04:05Z');
  assert.ok(second.json.id > run.id, 'ids increase');
  assert.equal(second.json.check_suite.id, run.check_suite.id, 'same head sha, same suite');
  const rerun = await request('POST', `${base}/check-runs`, { auth, body: { name: 'sluice / build', head_sha: mainSha, status: 'in_progress' } });

  const byBranch = await request('GET', `${base}/commits/main/check-runs`, { auth });
  assert.equal(byBranch.status, 200);
  assert.equal(byBranch.json.total_count, 2, 'filter=latest keeps the newest run per name');
  assert.deepEqual(byBranch.json.check_runs.map((r) => r.id), [rerun.json.id, second.json.id]);
  const all = await request('GET', `${base}/commits/${mainSha}/check-runs?filter=all`, { auth });
  assert.equal(all.json.total_count, 3);
  const named = await request('GET', `${base}/commits/${mainSha}/check-runs?check_name=${encodeURIComponent('sluice / lint')}`, { auth });
  assert.deepEqual(named.json.check_runs.map((r) => r.id), [second.json.id]);
  const paged = await request('GET', `${base}/commits/${mainSha}/check-runs?filter=all&per_page=1&page=2`, { auth });
  assert.equal(paged.json.total_count, 3);
  assert.deepEqual(paged.json.check_runs.map((r) => r.id), [second.json.id]);
  const other = await request('GET', `${base}/commits/${firstSha}/check-runs`, { auth });
  assert.deepEqual(other.json, { total_count: 0, check_runs: [] });
  const unknownRef = await request('GET', `${base}/commits/nope/check-runs`, { auth });
  assert.equal(unknownRef.status, 422);
});

test('check runs: validation errors follow GitHub\'s rules', async () => {
  const auth = `token ${await issueToken()}`;
  const path = `/repos/${OWNER}/${REPO}/check-runs`;
  const post = (body) => request('POST', path, { auth, body });

  const noConclusion = await post({ name: 'x', head_sha: mainSha, status: 'completed' });
  assert.equal(noConclusion.status, 422);
  assert.equal(noConclusion.json.message, 'Validation Failed');
  assert.deepEqual(noConclusion.json.errors, [{ resource: 'CheckRun', field: 'conclusion', code: 'missing_field' }]);

  const unknownSha = 'f'.repeat(40);
  const noCommit = await post({ name: 'x', head_sha: unknownSha });
  assert.equal(noCommit.status, 422);
  assert.equal(noCommit.json.message, `No commit found for SHA: ${unknownSha}`);

  const invalid = [
    { head_sha: mainSha },
    { name: '', head_sha: mainSha },
    { name: 'x' },
    { name: 'x', head_sha: 'main' },
    { name: 'x', head_sha: mainSha.slice(0, 12) },
    { name: 'x', head_sha: 42 },
    { name: 7, head_sha: mainSha },
    { name: 'x', head_sha: mainSha, status: 'done' },
    { name: 'x', head_sha: mainSha, conclusion: 'passed' },
    { name: 'x', head_sha: mainSha, started_at: 'yesterday' },
    { name: 'x', head_sha: mainSha, output: { title: 't' } },
    { name: 'x', head_sha: mainSha, output: { summary: 's' } },
    { name: 'x', head_sha: mainSha, output: 'text' },
    { name: 'x', head_sha: mainSha, output: { title: 't', summary: 's'.repeat(65536) } },
    { name: 'x', head_sha: mainSha, output: { title: 't', summary: 's', text: 't'.repeat(65536) } },
    [],
  ];
  for (const body of invalid) {
    const res = await post(body);
    assert.equal(res.status, 422, JSON.stringify(body).slice(0, 100));
  }
  const maxSummary = await post({ name: 'x', head_sha: mainSha, output: { title: 't', summary: 's'.repeat(65535) } });
  assert.equal(maxSummary.status, 201);

  const notJson = await request('POST', path, { auth, rawBody: 'name=x', headers: { 'Content-Type': 'application/json' } });
  assert.equal(notJson.status, 400);
  assert.equal(notJson.json.message, 'Problems parsing JSON');

  const unknownRepo = await request('POST', `/repos/${OWNER}/nope/check-runs`, { auth, body: { name: 'x', head_sha: mainSha } });
  assert.equal(unknownRepo.status, 404);
});

test('check runs: update and get validate ids and bodies', async () => {
  const auth = `token ${await issueToken()}`;
  const base = `/repos/${OWNER}/${REPO}/check-runs`;
  const { json: run } = await request('POST', base, { auth, body: { name: 'u', head_sha: mainSha } });
  for (const id of ['1', '99999999999', 'abc']) {
    assert.equal((await request('PATCH', `${base}/${id}`, { auth, body: { status: 'in_progress' } })).status, 404, id);
    assert.equal((await request('GET', `${base}/${id}`, { auth })).status, 404, id);
  }
  const otherRepo = commitFiles(reposDir, OWNER, 'other', { files: { a: 'a' } });
  assert.match(otherRepo, /^[0-9a-f]{40}$/);
  assert.equal((await request('GET', `/repos/${OWNER}/other/check-runs/${run.id}`, { auth })).status, 404, 'run belongs to another repo');

  const completedNoConclusion = await request('PATCH', `${base}/${run.id}`, { auth, body: { status: 'completed' } });
  assert.equal(completedNoConclusion.status, 422);
  assert.equal(completedNoConclusion.json.message, 'Validation Failed');
  const badEnum = await request('PATCH', `${base}/${run.id}`, { auth, body: { conclusion: 'great' } });
  assert.equal(badEnum.status, 422);
  const after = await request('GET', `${base}/${run.id}`, { auth });
  assert.equal(after.json.status, 'queued', 'failed updates change nothing');
  const notJson = await request('PATCH', `${base}/${run.id}`, { auth, rawBody: '{', headers: { 'Content-Type': 'application/json' } });
  assert.equal(notJson.status, 400);
  const completedAt = await request('PATCH', `${base}/${run.id}`, { auth, body: { completed_at: '2026-03-01T00:00:00Z', conclusion: 'cancelled' } });
  assert.equal(completedAt.json.status, 'completed');
  assert.equal(completedAt.json.completed_at, '2026-03-01T00:00:00Z');
});

// ---------------------------------------------------------------------------------------------
// Git smart HTTP

test('git smart HTTP: clone with a Basic installation token works; without or with a bad one it fails', async () => {
  const token = await issueToken();
  const url = `${standin.url}/${OWNER}/${REPO}.git`;
  const dest = join(tmp, 'clone-ok');
  await gitClone(url, dest, ['-c', `http.extraHeader=${basicHeader(token)}`]);
  assert.equal(readFileSync(join(dest, 'README.md'), 'utf8'), '# Widgets\n'.repeat(20));
  const { stdout: head } = await execFileAsync('git', ['-C', dest, 'rev-parse', 'HEAD'], { env: GIT_ENV });
  assert.equal(head.trim(), mainSha);

  // GitHub serves any reachable commit by sha, which CI uses to check out a pull request head.
  await execFileAsync('git', ['-C', dest, '-c', `http.extraHeader=${basicHeader(token)}`, 'fetch', '--quiet', 'origin', featureSha], { env: GIT_ENV });
  const { stdout: type } = await execFileAsync('git', ['-C', dest, 'cat-file', '-t', featureSha], { env: GIT_ENV });
  assert.equal(type.trim(), 'commit');

  await assert.rejects(gitClone(url, join(tmp, 'clone-none')), /Authentication failed|could not read Username|terminal prompts disabled/);
  await assert.rejects(gitClone(url, join(tmp, 'clone-bad'), ['-c', `http.extraHeader=${basicHeader('ghs_bogus')}`]), /Authentication failed|401|could not read/);
  assert.equal(existsSync(join(tmp, 'clone-none', 'README.md')), false);

  const protocolV0 = join(tmp, 'clone-v0');
  await gitClone(url, protocolV0, ['-c', 'protocol.version=0', '-c', `http.extraHeader=${basicHeader(token)}`]);
  assert.equal(readFileSync(join(protocolV0, '.sluice', 'config.yml'), 'utf8'), 'steps:\n  - run: cargo test\n');
});

test('git smart HTTP: gzip-encoded upload-pack requests are inflated by http-backend', async () => {
  const token = await issueToken();
  const want = `want ${mainSha} ofs-delta\n`;
  const pktLine = (text) => `${(text.length + 4).toString(16).padStart(4, '0')}${text}`;
  const negotiation = `${pktLine(want)}0000${pktLine('done\n')}`;
  const res = await fetch(`${standin.url}/${OWNER}/${REPO}.git/git-upload-pack`, {
    method: 'POST',
    headers: {
      Authorization: `Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}`,
      'Content-Type': 'application/x-git-upload-pack-request',
      'Content-Encoding': 'gzip',
    },
    body: gzipSync(negotiation),
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'application/x-git-upload-pack-result');
  const body = Buffer.from(await res.arrayBuffer()).toString('latin1');
  assert.ok(body.startsWith('0008NAK\n'), body.slice(0, 20));
  assert.ok(body.includes('PACK'));
});

test('git smart HTTP: 401 carries WWW-Authenticate; receive-pack is refused; unknown repo 404', async () => {
  const token = await issueToken();
  const basic = `Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}`;
  const refs = `/${OWNER}/${REPO}.git/info/refs?service=git-upload-pack`;
  const unauthenticated = await request('GET', refs);
  assert.equal(unauthenticated.status, 401);
  assert.equal(unauthenticated.headers.get('www-authenticate'), 'Basic realm="GitHub"');
  const tokenScheme = await request('GET', refs, { auth: `token ${token}` });
  assert.equal(tokenScheme.status, 401);

  const ok = await request('GET', refs, { auth: basic });
  assert.equal(ok.status, 200);
  assert.equal(ok.headers.get('content-type'), 'application/x-git-upload-pack-advertisement');
  assert.match(ok.text, /# service=git-upload-pack/);
  assert.ok(ok.text.includes(mainSha));

  const receive = await request('GET', `/${OWNER}/${REPO}.git/info/refs?service=git-receive-pack`, { auth: basic });
  assert.equal(receive.status, 403);
  const receivePost = await request('POST', `/${OWNER}/${REPO}.git/git-receive-pack`, { auth: basic, rawBody: '0000' });
  assert.equal(receivePost.status, 403);
  const missing = await request('GET', `/${OWNER}/nope.git/info/refs?service=git-upload-pack`, { auth: basic });
  assert.equal(missing.status, 404);

  const clone = join(tmp, 'clone-push');
  await gitClone(`${standin.url}/${OWNER}/${REPO}.git`, clone, ['-c', `http.extraHeader=${basicHeader(token)}`]);
  writeFileSync(join(clone, 'pushed.txt'), 'nope');
  const gitIn = (args) => execFileAsync('git', ['-C', clone, '-c', 'user.name=t', '-c', 'user.email=t@t', '-c', `http.extraHeader=${basicHeader(token)}`, ...args], { env: GIT_ENV });
  await gitIn(['add', 'pushed.txt']);
  await gitIn(['commit', '--quiet', '-m', 'push attempt']);
  await assert.rejects(gitIn(['push', 'origin', 'HEAD:main']), /403|denied|not granted/);
  assert.equal(headSha(reposDir, OWNER, REPO, 'main'), mainSha);
});

// ---------------------------------------------------------------------------------------------
// Control endpoints and general behaviour

test('calls log: records requests with parsed bodies and auth scheme, never credentials', async () => {
  await request('POST', '/_standin/reset');
  const jwt = makeJwt(keys.privateKey);
  const tokenRes = await request('POST', `/app/installations/${INSTALLATION}/access_tokens`, { auth: `Bearer ${jwt}` });
  const token = tokenRes.json.token;
  await request('GET', `/repos/${OWNER}/${REPO}/contents/README.md?ref=main`, { auth: `token ${token}` });
  await request('POST', `/repos/${OWNER}/${REPO}/check-runs`, { auth: `Bearer ${token}`, body: { name: 'log', head_sha: mainSha } });
  await request('GET', `/${OWNER}/${REPO}.git/info/refs?service=git-upload-pack`, { auth: `Basic ${Buffer.from(`x-access-token:${token}`).toString('base64')}` });
  await request('GET', '/nowhere');

  const { json } = await request('GET', '/_standin/calls');
  const summary = json.calls.map((c) => [c.method, c.path, c.status, c.auth_scheme, c.write]);
  assert.deepEqual(summary, [
    ['POST', `/app/installations/${INSTALLATION}/access_tokens`, 201, 'Bearer', true],
    ['GET', `/repos/${OWNER}/${REPO}/contents/README.md`, 200, 'token', false],
    ['POST', `/repos/${OWNER}/${REPO}/check-runs`, 201, 'Bearer', true],
    ['GET', `/${OWNER}/${REPO}.git/info/refs`, 200, 'Basic', false],
    ['GET', '/nowhere', 404, null, false],
  ]);
  assert.deepEqual(json.calls[1].query, { ref: 'main' });
  assert.deepEqual(json.calls[2].body, { name: 'log', head_sha: mainSha });
  assert.equal(json.calls[0].body, null, 'no request body is recorded as null');
  assert.equal(json.calls[1].body, null);
  assert.ok(json.calls.every((c, i) => c.seq > (json.calls[i - 1]?.seq ?? 0) && typeof c.at_ms === 'number'));
  const serialized = JSON.stringify(json);
  assert.ok(!serialized.includes(token) && !serialized.includes(jwt), 'no credential in the log');

  const posts = await request('GET', `/_standin/calls?method=post&path_prefix=${encodeURIComponent(`/repos/${OWNER}/${REPO}/check-runs`)}`);
  assert.deepEqual(posts.json.calls.map((c) => c.path), [`/repos/${OWNER}/${REPO}/check-runs`]);
});

test('control: check-runs with history, commits, reset, healthz', async () => {
  await request('POST', '/_standin/reset');
  const auth = `token ${await issueToken()}`;
  const { json: run } = await request('POST', `/repos/${OWNER}/${REPO}/check-runs`, { auth, body: { name: 'h', head_sha: mainSha } });
  await request('PATCH', `/repos/${OWNER}/${REPO}/check-runs/${run.id}`, { auth, body: { status: 'in_progress' } });
  await request('PATCH', `/repos/${OWNER}/${REPO}/check-runs/${run.id}`, { auth, body: { conclusion: 'neutral' } });
  const listed = await request('GET', `/_standin/check-runs?repo=${OWNER}/${REPO}`);
  assert.equal(listed.json.check_runs.length, 1);
  const [entry] = listed.json.check_runs;
  assert.equal(entry.id, run.id);
  assert.equal(entry.conclusion, 'neutral');
  assert.deepEqual(entry.history.map((h) => [h.status, h.conclusion]), [['queued', null], ['in_progress', null], ['completed', 'neutral']]);
  assert.ok(entry.history.every((h) => typeof h.at_ms === 'number'));
  assert.deepEqual((await request('GET', '/_standin/check-runs?repo=someone/else')).json, { check_runs: [] });

  const commit = await request('POST', '/_standin/repos/fresh/repo/commits', { body: { files: { 'x.txt': 'x' }, message: 'init' } });
  assert.equal(commit.status, 201);
  assert.equal(commit.json.sha, headSha(reposDir, 'fresh', 'repo', 'main'));
  const onBranch = await request('POST', '/_standin/repos/fresh/repo/commits', { body: { branch: 'pr/1', files: { 'y.txt': 'y' } } });
  assert.equal(onBranch.json.sha, headSha(reposDir, 'fresh', 'repo', 'pr/1'));
  for (const body of [{ files: { 'x.txt': 5 } }, { files: { '../x': 'x' } }, { branch: 'a..b', files: {} }]) {
    assert.equal((await request('POST', '/_standin/repos/fresh/repo/commits', { body })).status, 422, JSON.stringify(body));
  }
  assert.equal((await request('POST', '/_standin/repos/fresh/repo/commits', { rawBody: 'nope' })).status, 400);

  assert.deepEqual((await request('GET', '/_standin/healthz')).json, { ok: true });
  await request('POST', '/_standin/reset');
  assert.deepEqual((await request('GET', '/_standin/check-runs')).json, { check_runs: [] });
  assert.deepEqual((await request('GET', '/_standin/calls')).json, { calls: [] });
  assert.equal((await request('GET', `/repos/${OWNER}/${REPO}/check-runs/${run.id}`, { auth })).status, 404);
});

test('unknown paths and methods are GitHub-style 404 JSON; oversized bodies are 413', async () => {
  for (const [method, path] of [['GET', '/'], ['GET', '/users/acme'], ['DELETE', `/repos/${OWNER}/${REPO}`], ['PUT', '/_standin/reset']]) {
    const res = await request(method, path);
    assert.equal(res.status, 404, `${method} ${path}`);
    assert.deepEqual(res.json, { message: 'Not Found', documentation_url: 'https://docs.github.com/rest', status: '404' });
    assert.equal(res.headers.get('content-type'), 'application/json; charset=utf-8');
  }
  const auth = `token ${await issueToken()}`;
  const huge = await request('POST', `/repos/${OWNER}/${REPO}/check-runs`, { auth, rawBody: 'x'.repeat(11 * 1024 * 1024) });
  assert.equal(huge.status, 413);
  assert.equal(await chunkedUploadStatus(`/repos/${OWNER}/${REPO}/check-runs`, auth, 11 * 1024 * 1024), 413);
  assert.equal((await request('GET', '/_standin/healthz')).status, 200, 'server still up');
});

// Streams `bytes` with chunked encoding (no Content-Length), resolving the response status.
function chunkedUploadStatus(path, auth, bytes) {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port: standin.port, path, method: 'POST', headers: { Authorization: auth, 'Content-Type': 'application/json' } });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.on('error', () => {}); // the server closes the socket while we are still writing
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    let sent = 0;
    const pump = () => {
      while (sent < bytes) {
        sent += chunk.length;
        if (!req.write(chunk)) return void req.once('drain', pump);
      }
      req.end();
    };
    pump();
    setTimeout(() => reject(new Error('no response to oversized chunked upload')), 10_000).unref();
  });
}

// ---------------------------------------------------------------------------------------------
// Webhooks

test('signBody matches GitHub\'s documented test vector', () => {
  assert.equal(
    signBody("It's a Secret to Everybody", 'Hello, World!'),
    'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17',
  );
});

test('payload builders produce GitHub webhook shapes', () => {
  const cloneUrl = `${standin.url}/${OWNER}/${REPO}.git`;
  const pr = pullRequestPayload({ owner: OWNER, repo: REPO, sha: featureSha, cloneUrl, number: 7, action: 'synchronize', headRef: 'feature/x' });
  assert.equal(pr.action, 'synchronize');
  assert.equal(pr.number, 7);
  assert.equal(pr.pull_request.number, 7);
  assert.equal(pr.pull_request.state, 'open');
  assert.equal(pr.pull_request.draft, false);
  assert.equal(pr.pull_request.head.sha, featureSha);
  assert.equal(pr.pull_request.head.ref, 'feature/x');
  assert.equal(pr.pull_request.head.repo.clone_url, cloneUrl);
  assert.equal(pr.pull_request.base.ref, 'main');
  assert.equal(pr.pull_request.user.login, 'octocat');
  assert.deepEqual(
    [pr.repository.id, pr.repository.name, pr.repository.full_name, pr.repository.owner.login, pr.repository.owner.type, pr.repository.private, pr.repository.default_branch],
    [repoId(OWNER, REPO), REPO, `${OWNER}/${REPO}`, OWNER, 'User', false, 'main'],
  );
  assert.deepEqual([pr.sender.login, pr.sender.type, pr.installation.id], ['octocat', 'User', 42]);
  const bot = pullRequestPayload({ owner: OWNER, repo: REPO, sha: featureSha, senderLogin: 'dependabot[bot]', senderType: 'Bot', draft: true, action: 'closed', installationId: 7 });
  assert.deepEqual([bot.sender.type, bot.pull_request.draft, bot.pull_request.state, bot.installation.id], ['Bot', true, 'closed', 7]);

  const push = pushPayload({ owner: OWNER, repo: REPO, after: mainSha, before: firstSha, cloneUrl });
  assert.equal(push.ref, 'refs/heads/main');
  assert.deepEqual([push.before, push.after, push.created, push.deleted, push.forced], [firstSha, mainSha, false, false, false]);
  assert.equal(push.head_commit.id, mainSha);
  assert.match(push.head_commit.timestamp, /Z$/);
  assert.equal(typeof push.head_commit.message, 'string');
  assert.equal(push.commits.length, 1);
  assert.deepEqual([push.repository.owner.name, push.repository.owner.login], [OWNER, OWNER]);
  assert.equal(push.repository.clone_url, cloneUrl);
  assert.equal(typeof push.repository.created_at, 'number');
  assert.equal(push.pusher.name, 'octocat');
  assert.equal(push.installation.id, 42);
  const created = pushPayload({ owner: OWNER, repo: REPO, after: mainSha });
  assert.equal(created.created, true);
  const deleted = pushPayload({ owner: OWNER, repo: REPO, before: mainSha, after: '0'.repeat(40) });
  assert.deepEqual([deleted.deleted, deleted.head_commit, deleted.commits], [true, null, []]);
});

test('sendWebhook posts a signed delivery with GitHub headers and returns the parsed reply', async () => {
  const received = [];
  const receiver = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      received.push({ headers: req.headers, body: Buffer.concat(chunks).toString() });
      res.writeHead(202, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ accepted: true }));
    });
  });
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  try {
    const payload = pushPayload({ owner: OWNER, repo: REPO, after: mainSha });
    const result = await sendWebhook({ url: `http://127.0.0.1:${receiver.address().port}/webhook`, secret: 's3cret', event: 'push', payload, deliveryId: 'd-1' });
    assert.deepEqual(result, { status: 202, body: { accepted: true }, deliveryId: 'd-1' });
    const [{ headers, body }] = received;
    assert.deepEqual(JSON.parse(body), payload);
    assert.equal(headers['content-type'], 'application/json');
    assert.equal(headers['x-github-event'], 'push');
    assert.equal(headers['x-github-delivery'], 'd-1');
    assert.equal(headers['x-hub-signature-256'], signBody('s3cret', body));
    assert.equal(headers['user-agent'], 'GitHub-Hookshot/standin');
    const generated = await sendWebhook({ url: `http://127.0.0.1:${receiver.address().port}/`, secret: 's', event: 'ping', payload: {} });
    assert.match(generated.deliveryId, /^[0-9a-f-]{36}$/);
  } finally {
    await new Promise((r) => receiver.close(r));
  }
});

// ---------------------------------------------------------------------------------------------
// CLI

test('CLI: prints the listening line and serves until terminated', async () => {
  const keyFile = join(tmp, 'app.pem');
  writeFileSync(keyFile, createPrivateKey(keys.privateKey.export({ type: 'pkcs1', format: 'pem' })).export({ type: 'pkcs1', format: 'pem' }));
  const child = spawn(process.execPath, [join(HERE, 'server.mjs'), '--port', '0', '--repos-dir', reposDir, '--app-id', String(APP_ID), '--public-key-file', keyFile, '--installation-id', '42', '--installation-id', '77'], { stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    const line = await new Promise((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d) => {
        out += d;
        if (out.includes('\n')) resolve(out.split('\n')[0]);
      });
      child.once('exit', (code) => reject(new Error(`exited ${code}`)));
    });
    const match = /^github-standin listening on (http:\/\/127\.0\.0\.1:(\d+))$/.exec(line);
    assert.ok(match, line);
    assert.deepEqual((await request('GET', '/_standin/healthz', { base: match[1] })).json, { ok: true });
    const res = await request('POST', '/app/installations/77/access_tokens', { base: match[1], auth: `Bearer ${makeJwt(keys.privateKey)}` });
    assert.equal(res.status, 201);
  } finally {
    child.kill('SIGTERM');
  }
  const code = await new Promise((r) => (child.exitCode !== null ? r(child.exitCode) : child.once('exit', r)));
  assert.equal(code, 0);
});

test('CLI: missing required options exit with status 2 and usage', async () => {
  const result = await execFileAsync(process.execPath, [join(HERE, 'server.mjs'), '--port', '0']).catch((err) => err);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /missing --repos-dir/);
});

test('pulls and permissions: registered pull requests answer their head, 404 otherwise; permissions by user', async () => {
  const auth = `token ${await issueToken()}`;
  assert.equal((await request('GET', `/repos/${OWNER}/${REPO}/pulls/5`, { auth })).status, 404);
  const reg = await request('POST', `/_standin/repos/${OWNER}/${REPO}/pulls/5`, { body: { head_sha: mainSha, head_repo: 'fork/widgets', author_association: 'FIRST_TIME_CONTRIBUTOR' } });
  assert.equal(reg.status, 201);
  const pull = await request('GET', `/repos/${OWNER}/${REPO}/pulls/5`, { auth });
  assert.equal(pull.status, 200);
  assert.equal(pull.json.head.sha, mainSha);
  assert.equal(pull.json.author_association, 'FIRST_TIME_CONTRIBUTOR');
  const perm = async (user) => (await request('GET', `/repos/${OWNER}/${REPO}/collaborators/${user}/permission`, { auth })).json.permission;
  assert.equal(await perm(OWNER), 'admin');
  assert.equal(await perm('stranger'), 'read');
  await request('POST', `/_standin/repos/${OWNER}/${REPO}/collaborators/maint`, { body: { permission: 'write' } });
  assert.equal(await perm('maint'), 'write');
  const noPulls = await issueToken({}, { permissions: { contents: 'read' } });
  assert.equal((await request('GET', `/repos/${OWNER}/${REPO}/pulls/5`, { auth: `token ${noPulls}` })).status, 403);
});

test('check run actions: GitHub\'s limits hold, and requested_action payloads carry the run and the identifier', async () => {
  const auth = `token ${await issueToken()}`;
  const created = await request('POST', `/repos/${OWNER}/${REPO}/check-runs`, { auth, body: { name: 'ci', head_sha: mainSha, external_id: 'inst-1' } });
  const id = created.json.id;
  const good = [{ label: 'Approve and run', identifier: 'approve', description: 'Run it' }];
  const ok = await request('PATCH', `/repos/${OWNER}/${REPO}/check-runs/${id}`, { auth, body: { actions: good } });
  assert.equal(ok.status, 200);
  assert.deepEqual(ok.json.actions, good);
  const long = await request('PATCH', `/repos/${OWNER}/${REPO}/check-runs/${id}`, { auth, body: { actions: [{ ...good[0], label: 'x'.repeat(21) }] } });
  assert.equal(long.status, 422);
  const payload = checkRunRequestedActionPayload({ owner: OWNER, repo: REPO, checkRun: ok.json, identifier: 'approve', senderLogin: 'maint' });
  assert.equal(payload.check_run.external_id, 'inst-1');
  assert.equal(payload.requested_action.identifier, 'approve');
  assert.equal(payload.sender.login, 'maint');
});

// ---------------------------------------------------------------------------------------------
// Deployments and deployment statuses

// What Sluice sends: no merge of the default branch, no required contexts.
const SLUICE_DEPLOYMENT = { auto_merge: false, required_contexts: [] };

async function createDeployment(auth, body) {
  return request('POST', `/repos/${OWNER}/${REPO}/deployments`, { auth, body: { ...SLUICE_DEPLOYMENT, ...body } });
}

async function postStatus(auth, id, body) {
  return request('POST', `/repos/${OWNER}/${REPO}/deployments/${id}/statuses`, { auth, body });
}

test('deployments: create (201) with GitHub\'s shape and defaults, get, and list with filters newest first', async () => {
  await request('POST', '/_standin/reset');
  const auth = `token ${await issueToken({}, { permissions: { deployments: 'write' }, repositories: [REPO] })}`;
  const created = await createDeployment(auth, {
    ref: mainSha, task: 'deploy', environment: 'main', description: 'Sluice deploy',
    payload: { sluice: { execution: 'deploy-1', generation: 0 } },
  });
  assert.equal(created.status, 201, created.text);
  const d = created.json;
  assert.equal(typeof d.id, 'number');
  assert.ok(d.id > 2 ** 31, 'ids past 32 bits');
  assert.deepEqual(
    [d.sha, d.ref, d.task, d.environment, d.original_environment, d.description, d.transient_environment, d.production_environment],
    [mainSha, mainSha, 'deploy', 'main', 'main', 'Sluice deploy', false, false],
  );
  assert.deepEqual(d.payload, { sluice: { execution: 'deploy-1', generation: 0 } });
  assert.equal(d.performed_via_github_app.id, APP_ID);
  assert.equal(d.url, `${standin.url}/repos/${OWNER}/${REPO}/deployments/${d.id}`);
  assert.equal(d.statuses_url, `${d.url}/statuses`);
  assert.match(d.created_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$/);

  // GitHub's defaults: the environment is `production`, which is a production environment; a
  // branch name as `ref` resolves to its commit.
  const defaults = await createDeployment(auth, { ref: 'feature/x', transient_environment: true });
  assert.equal(defaults.status, 201, defaults.text);
  assert.deepEqual(
    [defaults.json.sha, defaults.json.ref, defaults.json.environment, defaults.json.production_environment, defaults.json.transient_environment],
    [featureSha, 'feature/x', 'production', true, true],
  );
  const flagged = await createDeployment(auth, { ref: mainSha, environment: 'production', production_environment: false });
  assert.equal(flagged.json.production_environment, false, 'an explicit flag wins');

  const list = async (query) => (await request('GET', `/repos/${OWNER}/${REPO}/deployments${query}`, { auth })).json.map((x) => x.id);
  assert.deepEqual(await list(''), [flagged.json.id, defaults.json.id, d.id], 'newest first');
  assert.deepEqual(await list(`?sha=${mainSha}`), [flagged.json.id, d.id]);
  assert.deepEqual(await list(`?sha=${mainSha}&environment=main&task=deploy`), [d.id]);
  assert.deepEqual(await list('?ref=feature%2Fx'), [defaults.json.id]);
  assert.deepEqual(await list('?environment=staging'), []);
  assert.deepEqual(await list('?per_page=1&page=2'), [defaults.json.id]);

  const got = await request('GET', `/repos/${OWNER}/${REPO}/deployments/${d.id}`, { auth });
  assert.equal(got.status, 200);
  assert.deepEqual(got.json, d);
  for (const id of ['999', 'abc']) {
    assert.equal((await request('GET', `/repos/${OWNER}/${REPO}/deployments/${id}`, { auth })).status, 404);
  }
  assert.equal((await request('GET', `/repos/${OWNER}/nope/deployments`, { auth })).status, 404);
});

test('deployments: bad bodies are 422, an unknown ref 422, auto_merge 202 behind the default branch, failing contexts 409', async () => {
  await request('POST', '/_standin/reset');
  const auth = `token ${await issueToken()}`;
  const noRef = await createDeployment(auth, { environment: 'main' });
  assert.equal(noRef.status, 422);
  assert.match(noRef.json.message, /"ref" wasn't supplied/);
  const unknown = await createDeployment(auth, { ref: 'f'.repeat(40) });
  assert.equal(unknown.status, 422);
  assert.equal(unknown.json.message, `No ref found for: ${'f'.repeat(40)}`);
  for (const bad of [{ payload: [1] }, { auto_merge: 'no' }, { required_contexts: 'ci' }, { environment: 'x'.repeat(256) }, { production_environment: 1 }]) {
    const res = await createDeployment(auth, { ref: mainSha, ...bad });
    assert.equal(res.status, 422, JSON.stringify(bad));
  }
  assert.equal((await request('POST', `/repos/${OWNER}/${REPO}/deployments`, { auth, rawBody: '{' })).status, 400);

  // GitHub's defaults merge the default branch into a ref behind it (202, no deployment) and
  // require every context to pass (409 names the failing ones).
  const behind = await request('POST', `/repos/${OWNER}/${REPO}/deployments`, { auth, body: { ref: firstSha, required_contexts: [] } });
  assert.equal(behind.status, 202);
  assert.equal(behind.json.message, `Auto-merged main into ${firstSha} on deployment.`);
  const { json: run } = await request('POST', `/repos/${OWNER}/${REPO}/check-runs`, { auth, body: { name: 'ci', head_sha: mainSha } });
  const pending = await request('POST', `/repos/${OWNER}/${REPO}/deployments`, { auth, body: { ref: mainSha } });
  assert.equal(pending.status, 409);
  assert.deepEqual(pending.json.errors[0].contexts, [{ context: 'ci', state: 'pending' }]);
  const named = await request('POST', `/repos/${OWNER}/${REPO}/deployments`, { auth, body: { ref: mainSha, required_contexts: ['lint'] } });
  assert.deepEqual(named.json.errors[0].contexts, [{ context: 'lint', state: 'missing' }]);
  await request('PATCH', `/repos/${OWNER}/${REPO}/check-runs/${run.id}`, { auth, body: { conclusion: 'success' } });
  assert.equal((await request('POST', `/repos/${OWNER}/${REPO}/deployments`, { auth, body: { ref: mainSha } })).status, 201);
  assert.equal((await request('GET', '/_standin/deployments')).json.deployments.length, 1, 'only the 201 created one');
});

test('deployment statuses: create (201) and list newest first; log_url sets target_url; bad state 422; unknown 404', async () => {
  await request('POST', '/_standin/reset');
  const auth = `token ${await issueToken()}`;
  const { json: d } = await createDeployment(auth, { ref: mainSha, environment: 'main' });
  const queued = await postStatus(auth, d.id, { state: 'queued', description: 'waiting' });
  assert.equal(queued.status, 201, queued.text);
  assert.deepEqual(
    [queued.json.state, queued.json.description, queued.json.environment, queued.json.log_url, queued.json.target_url, queued.json.environment_url],
    ['queued', 'waiting', 'main', '', '', ''],
  );
  assert.equal(queued.json.deployment_url, d.url);
  assert.equal(queued.json.url, `${d.url}/statuses/${queued.json.id}`);
  const log = 'https://sluice.example/logs/x?exp=1&sig=ab';
  const done = await postStatus(auth, d.id, { state: 'success', log_url: log, environment_url: 'https://app.example/' });
  assert.equal(done.status, 201);
  assert.deepEqual([done.json.log_url, done.json.target_url, done.json.environment_url], [log, log, 'https://app.example/']);
  const legacy = await postStatus(auth, d.id, { state: 'in_progress', target_url: log });
  assert.equal(legacy.json.log_url, log, 'target_url alone is the legacy log_url');

  const listed = await request('GET', `/repos/${OWNER}/${REPO}/deployments/${d.id}/statuses`, { auth });
  assert.equal(listed.status, 200);
  assert.deepEqual(listed.json.map((s) => s.state), ['in_progress', 'success', 'queued'], 'newest first');
  const onePage = await request('GET', `/repos/${OWNER}/${REPO}/deployments/${d.id}/statuses?per_page=1`, { auth });
  assert.deepEqual(onePage.json.map((s) => s.id), [legacy.json.id]);

  for (const bad of [{ state: 'waiting' }, { description: 'x' }, { state: 'success', description: 'x'.repeat(141) }, { state: 'error', log_url: 5 }]) {
    const res = await postStatus(auth, d.id, bad);
    assert.equal(res.status, 422, JSON.stringify(bad));
  }
  assert.equal((await postStatus(auth, d.id, { state: 'failure', description: 'é'.repeat(140) })).status, 201, '140 characters, not bytes');
  assert.equal((await postStatus(auth, 123, { state: 'success' })).status, 404);
  assert.equal((await request('GET', `/repos/${OWNER}/${REPO}/deployments/123/statuses`, { auth })).status, 404);
});

test('deployment statuses: a success retires prior successes of its environment (auto_inactive), as documented', async () => {
  await request('POST', '/_standin/reset');
  const auth = `token ${await issueToken()}`;
  const deploy = async (environment, extra = {}) => {
    const { json } = await createDeployment(auth, { ref: mainSha, environment, ...extra });
    return json.id;
  };
  const [old, failed, other, transient, prod] = [
    await deploy('main'), await deploy('main'), await deploy('staging'), await deploy('main', { transient_environment: true }),
    await deploy('production'),
  ];
  for (const id of [old, other, transient, prod]) await postStatus(auth, id, { state: 'success' });
  await postStatus(auth, failed, { state: 'failure' });
  const prodNext = await deploy('production');
  await postStatus(auth, prodNext, { state: 'success' });
  const kept = await deploy('main');
  await postStatus(auth, kept, { state: 'success', auto_inactive: false });
  const newest = await deploy('main');
  await postStatus(auth, newest, { state: 'success' });

  const states = Object.fromEntries((await request('GET', '/_standin/deployments')).json.deployments
    .map((d) => [d.id, d.statuses.map((s) => (s.auto_inactive ? 'auto:' : '') + s.state)]));
  assert.deepEqual(states[old], ['success', 'auto:inactive'], 'retired by the next success of `main`');
  assert.deepEqual(states[failed], ['failure'], 'only successes are retired');
  assert.deepEqual(states[other], ['success'], 'another environment');
  assert.deepEqual(states[transient], ['success'], 'GitHub documents the rule for non-transient deployments');
  assert.deepEqual(states[prod], ['success'], 'GitHub documents the rule for non-production environments');
  assert.deepEqual(states[kept], ['success', 'auto:inactive'], 'auto_inactive false retires none, but is retired by a later success');
  assert.deepEqual(states[newest], ['success']);
  const listed = await request('GET', `/repos/${OWNER}/${REPO}/deployments/${old}/statuses`, { auth });
  assert.deepEqual(listed.json.map((s) => s.state), ['inactive', 'success']);
  assert.ok(!('auto_inactive' in listed.json[0]), 'the API shape has no marker');
});

test('deployments: need the deployments permission (403), stay within the token\'s repositories (404), and every call is recorded', async () => {
  await request('POST', '/_standin/reset');
  const checksOnly = `token ${await issueToken({}, { permissions: { checks: 'write' } })}`;
  const refused = await createDeployment(checksOnly, { ref: mainSha });
  assert.equal(refused.status, 403);
  assert.equal(refused.json.message, 'Resource not accessible by integration');
  assert.equal((await request('GET', `/repos/${OWNER}/${REPO}/deployments`, { auth: checksOnly })).status, 403);
  const reader = `token ${await issueToken({}, { permissions: { deployments: 'read' } })}`;
  assert.equal((await request('GET', `/repos/${OWNER}/${REPO}/deployments`, { auth: reader })).status, 200);
  assert.equal((await createDeployment(reader, { ref: mainSha })).status, 403);
  const elsewhere = `token ${await issueToken({}, { repositories: ['other'] })}`;
  assert.equal((await createDeployment(elsewhere, { ref: mainSha })).status, 404);
  assert.equal((await createDeployment('token ghs_nope', { ref: mainSha })).status, 401);

  const writer = `token ${await issueToken({}, { permissions: { deployments: 'write' } })}`;
  const { json: d } = await createDeployment(writer, { ref: mainSha, environment: 'main' });
  await postStatus(writer, d.id, { state: 'in_progress' });
  await request('GET', `/repos/${OWNER}/${REPO}/deployments/${d.id}/statuses`, { auth: writer });
  const { json } = await request('GET', `/_standin/calls?path_prefix=${encodeURIComponent(`/repos/${OWNER}/${REPO}/deployments`)}`);
  assert.deepEqual(json.calls.map((c) => [c.method, c.path, c.status]), [
    ['POST', `/repos/${OWNER}/${REPO}/deployments`, 403],
    ['GET', `/repos/${OWNER}/${REPO}/deployments`, 403],
    ['GET', `/repos/${OWNER}/${REPO}/deployments`, 200],
    ['POST', `/repos/${OWNER}/${REPO}/deployments`, 403],
    ['POST', `/repos/${OWNER}/${REPO}/deployments`, 404],
    ['POST', `/repos/${OWNER}/${REPO}/deployments`, 401],
    ['POST', `/repos/${OWNER}/${REPO}/deployments`, 201],
    ['POST', `/repos/${OWNER}/${REPO}/deployments/${d.id}/statuses`, 201],
    ['GET', `/repos/${OWNER}/${REPO}/deployments/${d.id}/statuses`, 200],
  ]);
  assert.deepEqual(json.calls[6].body, { ...SLUICE_DEPLOYMENT, ref: mainSha, environment: 'main' });
  await request('POST', '/_standin/reset');
  assert.deepEqual((await request('GET', '/_standin/deployments')).json, { deployments: [] });
});

// ---------------------------------------------------------------------------------------------
// Releases: tags, compare, pulls, refs, contents writes, comments, releases

test('tags and compare: tags newest first with their commits; compare lists head\'s commits since base', async () => {
  const repo = 'notes';
  const v1 = commitFiles(reposDir, OWNER, repo, { files: { 'a.txt': 'a\n' }, message: 'first' });
  tagCommit(reposDir, OWNER, repo, 'v1.0.0', v1);
  const c2 = commitFiles(reposDir, OWNER, repo, { files: { 'b.txt': 'b\n' }, message: 'Merge pull request #7 from ana/b\n\nAdd b' });
  const c3 = commitFiles(reposDir, OWNER, repo, { files: { 'c.txt': 'c\n' }, message: 'Add c (#8)' });
  tagCommit(reposDir, OWNER, repo, 'v1.1.0', c3);
  const auth = `token ${await issueToken()}`;
  const tags = await request('GET', `/repos/${OWNER}/${repo}/tags?per_page=100`, { auth });
  assert.equal(tags.status, 200);
  assert.deepEqual(new Set(tags.json.map((t) => `${t.name}@${t.commit.sha}`)), new Set([`v1.0.0@${v1}`, `v1.1.0@${c3}`]));
  const cmp = await request('GET', `/repos/${OWNER}/${repo}/compare/v1.0.0...${c3}`, { auth });
  assert.equal(cmp.status, 200, cmp.text);
  assert.equal(cmp.json.status, 'ahead');
  assert.deepEqual(cmp.json.commits.map((c) => c.sha), [c2, c3], 'oldest first');
  assert.match(cmp.json.commits[0].commit.message, /^Merge pull request #7/);
  assert.equal((await request('GET', `/repos/${OWNER}/${repo}/compare/nope...${c3}`, { auth })).status, 404);
  const noContents = await issueToken({}, { permissions: { checks: 'read' } });
  assert.equal((await request('GET', `/repos/${OWNER}/${repo}/tags`, { auth: `token ${noContents}` })).status, 403);
});

test('annotated tags as git makes them: the ref names the tag object, git/tags peels it, tags lists the commit', async () => {
  const repo = 'annotated';
  const c1 = commitFiles(reposDir, OWNER, repo, { files: { 'a.txt': 'a\n' }, message: 'first' });
  const c2 = commitFiles(reposDir, OWNER, repo, { files: { 'b.txt': 'b\n' }, message: 'second' });
  tagCommit(reposDir, OWNER, repo, 'light', c1);
  const object = tagAnnotated(reposDir, OWNER, repo, 'v1.1.0', c2, { message: 'v1.1.0' });
  assert.notEqual(object, c2, 'a tag object of its own');
  // A tag of a tag (git's "nested tag").
  const outer = tagAnnotated(reposDir, OWNER, repo, 'v1.1.0-signed', object);
  const auth = `token ${await issueToken()}`;
  const ref = async (name) => (await request('GET', `/repos/${OWNER}/${repo}/git/ref/tags/${name}`, { auth })).json.object;
  assert.deepEqual([(await ref('light')).type, (await ref('light')).sha], ['commit', c1]);
  assert.deepEqual([(await ref('v1.1.0')).type, (await ref('v1.1.0')).sha], ['tag', object]);
  const tag = await request('GET', `/repos/${OWNER}/${repo}/git/tags/${object}`, { auth });
  assert.equal(tag.status, 200, tag.text);
  assert.deepEqual([tag.json.sha, tag.json.tag, tag.json.message], [object, 'v1.1.0', 'v1.1.0\n']);
  assert.deepEqual([tag.json.object.type, tag.json.object.sha], ['commit', c2]);
  assert.equal(tag.json.object.url, `${standin.url}/repos/${OWNER}/${repo}/git/commits/${c2}`);
  assert.equal(tag.json.tagger.email, 'standin@sluice.invalid');
  assert.match(tag.json.tagger.date, /Z$/);
  assert.equal(tag.json.verification.verified, false);
  const nested = await request('GET', `/repos/${OWNER}/${repo}/git/tags/${outer}`, { auth });
  assert.deepEqual([nested.json.object.type, nested.json.object.sha], ['tag', object]);
  // Only tag objects: a commit's sha, an unknown one and a malformed one are 404, as on GitHub.
  for (const sha of [c2, 'f'.repeat(40), 'nope']) {
    const missing = await request('GET', `/repos/${OWNER}/${repo}/git/tags/${sha}`, { auth });
    assert.equal(missing.status, 404, sha);
    assert.equal(missing.json.documentation_url, 'https://docs.github.com/rest/git/tags#get-a-tag');
  }
  const noContents = await issueToken({}, { permissions: { checks: 'read' } });
  assert.equal((await request('GET', `/repos/${OWNER}/${repo}/git/tags/${object}`, { auth: `token ${noContents}` })).status, 403);
  // Listed with the commits they peel to.
  const tags = await request('GET', `/repos/${OWNER}/${repo}/tags?per_page=100`, { auth });
  assert.deepEqual(new Set(tags.json.map((t) => `${t.name}@${t.commit.sha}`)), new Set([`light@${c1}`, `v1.1.0@${c2}`, `v1.1.0-signed@${c2}`]));
  // Moved with `git tag -f -a`: a new object at the other commit.
  const moved = tagAnnotated(reposDir, OWNER, repo, 'v1.1.0', c1, { force: true });
  assert.notEqual(moved, object);
  assert.deepEqual(tagPushShas(reposDir, OWNER, repo, 'v1.1.0'), { after: moved, headCommit: c1 });
  assert.deepEqual(tagPushShas(reposDir, OWNER, repo, 'light'), { after: c1, headCommit: c1 });
  assert.equal(tagPushShas(reposDir, OWNER, repo, 'gone'), null);
  assert.throws(() => tagAnnotated(reposDir, OWNER, repo, '--force', c1), /invalid tag name/);
});

test('a tag push as GitHub sends it: after names the tag object, head_commit the commit, no commits listed', () => {
  const object = 'a'.repeat(40);
  const push = pushPayload({ owner: OWNER, repo: REPO, ref: 'refs/tags/v1.1.0', after: object, headCommit: mainSha });
  assert.deepEqual([push.after, push.head_commit.id, push.commits, push.created], [object, mainSha, [], true]);
  assert.equal(push.compare, `https://github.com/${OWNER}/${REPO}/compare/v1.1.0`);
  const light = pushPayload({ owner: OWNER, repo: REPO, ref: 'refs/tags/v1', after: mainSha });
  assert.deepEqual([light.after, light.head_commit.id], [mainSha, mainSha]);
  // A closed pull request's dates: now, or the ones a test replays.
  const at = '2026-12-04T10:00:00Z';
  const merged = pullRequestPayload({ owner: OWNER, repo: REPO, sha: mainSha, action: 'closed', merged: true, mergedAt: at });
  assert.deepEqual([merged.pull_request.merged_at, merged.pull_request.closed_at], [at, at]);
  const closed = pullRequestPayload({ owner: OWNER, repo: REPO, sha: mainSha, action: 'closed', closedAt: at });
  assert.deepEqual([closed.pull_request.merged_at, closed.pull_request.closed_at], [null, at]);
});

test('approval pull request: a branch, a file committed through contents, a pull request, comments, a merge', async () => {
  const repo = 'notes2';
  const base = commitFiles(reposDir, OWNER, repo, { files: { 'README.md': 'hi\n' }, message: 'init' });
  const auth = `token ${await issueToken()}`;
  const ref = (body) => request('POST', `/repos/${OWNER}/${repo}/git/refs`, { auth, body });
  assert.equal((await ref({ ref: 'refs/heads/sluice/release-notes/v1', sha: base })).status, 201);
  const again = await ref({ ref: 'refs/heads/sluice/release-notes/v1', sha: base });
  assert.equal(again.status, 422);
  assert.equal(again.json.message, 'Reference already exists');
  assert.equal((await ref({ ref: 'refs/heads/x', sha: 'f'.repeat(40) })).status, 422);
  const put = (body) => request('PUT', `/repos/${OWNER}/${repo}/contents/release-notes/v1.md`, { auth, body });
  const created = await put({ message: 'notes', content: Buffer.from('# v1\n').toString('base64'), branch: 'sluice/release-notes/v1' });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.json.content.sha, gitHashObject('# v1\n'));
  const stale = await put({ message: 'notes', content: Buffer.from('# v1 again\n').toString('base64'), branch: 'sluice/release-notes/v1' });
  assert.equal(stale.status, 422, 'an update names the blob it replaces');
  const updated = await put({ message: 'notes', content: Buffer.from('# v1 again\n').toString('base64'), branch: 'sluice/release-notes/v1', sha: created.json.content.sha });
  assert.equal(updated.status, 200, updated.text);
  const read = await request('GET', `/repos/${OWNER}/${repo}/contents/release-notes/v1.md?ref=sluice/release-notes/v1`, { auth });
  assert.equal(Buffer.from(read.json.content, 'base64').toString(), '# v1 again\n');
  assert.equal(headSha(reposDir, OWNER, repo, 'main'), base, 'main is untouched');

  const pr = await request('POST', `/repos/${OWNER}/${repo}/pulls`, { auth, body: { title: 'Release notes for v1', head: 'sluice/release-notes/v1', base: 'main', body: 'notes' } });
  assert.equal(pr.status, 201, pr.text);
  assert.equal(pr.json.state, 'open');
  assert.equal(pr.json.head.sha, updated.json.commit.sha);
  const dup = await request('POST', `/repos/${OWNER}/${repo}/pulls`, { auth, body: { title: 't', head: 'sluice/release-notes/v1', base: 'main' } });
  assert.equal(dup.status, 422);
  assert.equal((await request('POST', `/repos/${OWNER}/${repo}/pulls`, { auth, body: { title: 't', head: 'missing', base: 'main' } })).status, 422);
  const listed = await request('GET', `/repos/${OWNER}/${repo}/pulls?head=${OWNER}:sluice/release-notes/v1&state=open`, { auth });
  assert.deepEqual(listed.json.map((p) => p.number), [pr.json.number]);
  const n = pr.json.number;
  const patched = await request('PATCH', `/repos/${OWNER}/${repo}/pulls/${n}`, { auth, body: { body: 'new notes' } });
  assert.equal(patched.json.body, 'new notes');
  const comment = await request('POST', `/repos/${OWNER}/${repo}/issues/${n}/comments`, { auth, body: { body: 'hello <!-- m -->' } });
  assert.equal(comment.status, 201);
  const comments = await request('GET', `/repos/${OWNER}/${repo}/issues/${n}/comments`, { auth });
  assert.deepEqual(comments.json.map((c) => c.body), ['hello <!-- m -->']);
  assert.equal((await request('POST', `/repos/${OWNER}/${repo}/issues/99999/comments`, { auth, body: { body: 'x' } })).status, 404);
  // A comment edited in place (a preview's): 200 with it, 404 for an unknown id, 422 without a body.
  const edited = await request('PATCH', `/repos/${OWNER}/${repo}/issues/comments/${comment.json.id}`, { auth, body: { body: 'edited <!-- m -->' } });
  assert.equal(edited.status, 200);
  assert.equal(edited.json.body, 'edited <!-- m -->');
  assert.deepEqual((await request('GET', `/repos/${OWNER}/${repo}/issues/${n}/comments`, { auth })).json.map((c) => c.body), ['edited <!-- m -->']);
  assert.equal((await request('PATCH', `/repos/${OWNER}/${repo}/issues/comments/99999`, { auth, body: { body: 'x' } })).status, 404);
  assert.equal((await request('PATCH', `/repos/${OWNER}/${repo}/issues/comments/${comment.json.id}`, { auth, body: {} })).status, 422);
  // A person merges it: the base fast-forwards, the pull request is closed and merged.
  assert.equal((await request('POST', `/_standin/repos/${OWNER}/${repo}/pulls/${n}/close`, { body: { merged: true } })).status, 200);
  const merged = await request('GET', `/repos/${OWNER}/${repo}/pulls/${n}`, { auth });
  assert.equal(merged.json.merged, true);
  assert.equal(merged.json.state, 'closed');
  assert.match(merged.json.merged_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  assert.equal(merged.json.closed_at, merged.json.merged_at, 'closed by its merge');
  assert.equal(headSha(reposDir, OWNER, repo, 'main'), updated.json.commit.sha);
  assert.equal((await request('PATCH', `/repos/${OWNER}/${repo}/pulls/${n}`, { auth, body: { state: 'open' } })).status, 422);
  const readOnly = await issueToken({}, { permissions: { contents: 'read', pull_requests: 'read' } });
  assert.equal((await request('POST', `/repos/${OWNER}/${repo}/issues/${n}/comments`, { auth: `token ${readOnly}`, body: { body: 'x' } })).status, 403);
});

test('releases: one per existing tag (422 already_exists for a second), found by its tag', async () => {
  const repo = 'notes3';
  const sha = commitFiles(reposDir, OWNER, repo, { files: { 'a.txt': 'a\n' }, message: 'init' });
  tagCommit(reposDir, OWNER, repo, 'v2.0.0', sha);
  const auth = `token ${await issueToken()}`;
  assert.equal((await request('GET', `/repos/${OWNER}/${repo}/releases/tags/v2.0.0`, { auth })).status, 404);
  const created = await request('POST', `/repos/${OWNER}/${repo}/releases`, { auth, body: { tag_name: 'v2.0.0', name: 'v2.0.0', body: '## v2.0.0' } });
  assert.equal(created.status, 201, created.text);
  const found = await request('GET', `/repos/${OWNER}/${repo}/releases/tags/v2.0.0`, { auth });
  assert.equal(found.json.id, created.json.id);
  assert.equal(found.json.body, '## v2.0.0');
  const second = await request('POST', `/repos/${OWNER}/${repo}/releases`, { auth, body: { tag_name: 'v2.0.0' } });
  assert.equal(second.status, 422);
  assert.equal(second.json.errors[0].code, 'already_exists');
  // A missing tag is made where `target_commitish` says (GitHub: "unused if the tag exists").
  const badTarget = await request('POST', `/repos/${OWNER}/${repo}/releases`, { auth, body: { tag_name: 'v9', target_commitish: 'f'.repeat(40) } });
  assert.equal(badTarget.status, 422);
  assert.equal(badTarget.json.errors[0].field, 'target_commitish');
  const made = await request('POST', `/repos/${OWNER}/${repo}/releases`, { auth, body: { tag_name: 'v9', target_commitish: sha, make_latest: 'false' } });
  assert.equal(made.status, 201, made.text);
  assert.equal(made.json.target_commitish, sha);
  assert.equal(execFileSync('git', [`--git-dir=${join(reposDir, OWNER, `${repo}.git`)}`, 'rev-parse', 'refs/tags/v9']).toString().trim(), sha);
  const listed = await request('GET', `/_standin/releases?repo=${OWNER}/${repo}`);
  assert.equal(listed.json.releases.length, 2);
  // make_latest: the default marks the new release Latest; "false" leaves Latest where it was.
  assert.equal((await request('GET', `/repos/${OWNER}/${repo}/releases/latest`, { auth })).json.tag_name, 'v2.0.0');
  tagCommit(reposDir, OWNER, repo, 'v1.9.0', sha);
  const bad = await request('POST', `/repos/${OWNER}/${repo}/releases`, { auth, body: { tag_name: 'v1.9.0', make_latest: 'yes' } });
  assert.equal(bad.status, 422);
  assert.equal(bad.json.errors[0].field, 'make_latest');
  const older = await request('POST', `/repos/${OWNER}/${repo}/releases`, { auth, body: { tag_name: 'v1.9.0', make_latest: 'false' } });
  assert.equal(older.status, 201, older.text);
  assert.equal((await request('GET', `/repos/${OWNER}/${repo}/releases/latest`, { auth })).json.tag_name, 'v2.0.0');
  tagCommit(reposDir, OWNER, repo, 'v3.0.0-rc1', sha);
  const rc = await request('POST', `/repos/${OWNER}/${repo}/releases`, { auth, body: { tag_name: 'v3.0.0-rc1', prerelease: true } });
  assert.equal(rc.json.prerelease, true);
  assert.equal((await request('GET', `/repos/${OWNER}/${repo}/releases/latest`, { auth })).json.tag_name, 'v2.0.0', 'a pre-release is never Latest');
});

function decodeJwt(token) {
  const [h, p, s] = token.split('.');
  return { header: JSON.parse(Buffer.from(h, 'base64url')), claims: JSON.parse(Buffer.from(p, 'base64url')), input: `${h}.${p}`, signature: Buffer.from(s, 'base64url') };
}

// Verifies an RS256 token against a JWKS as a relying party would: the key by `kid`.
function verifiesAgainst(jwks, token) {
  const { header, input, signature } = decodeJwt(token);
  const jwk = jwks.keys.find((k) => k.kid === header.kid);
  if (!jwk) return false;
  return verify('RSA-SHA256', Buffer.from(input), createPublicKey({ key: jwk, format: 'jwk' }), signature);
}

test('OIDC issuer: discovery and JWKS as GitHub publishes them; minted tokens carry GitHub\'s claims and verify', async () => {
  const issuer = `${standin.url}/_standin/oidc`;
  const discovery = await request('GET', '/_standin/oidc/.well-known/openid-configuration');
  assert.equal(discovery.status, 200);
  assert.equal(discovery.json.issuer, issuer);
  assert.equal(discovery.json.jwks_uri, `${issuer}/.well-known/jwks`);
  assert.deepEqual(discovery.json.id_token_signing_alg_values_supported, ['RS256']);
  for (const claim of ['repository', 'ref', 'environment', 'jti', 'workflow_ref']) assert.ok(discovery.json.claims_supported.includes(claim), claim);
  const jwks = (await request('GET', '/_standin/oidc/.well-known/jwks')).json;
  assert.equal(jwks.keys.length, 1);
  assert.deepEqual(Object.keys(jwks.keys[0]).sort(), ['alg', 'e', 'kid', 'kty', 'n', 'use']);

  const minted = await request('POST', '/_standin/oidc/tokens', { body: { claims: { repository: 'acme/widgets', ref: 'refs/heads/release/1', environment: 'production' }, audience: 'https://sluice.example' } });
  assert.equal(minted.status, 201, minted.text);
  const { header, claims } = decodeJwt(minted.json.value);
  assert.equal(header.alg, 'RS256');
  assert.equal(header.kid, jwks.keys[0].kid);
  assert.equal(claims.iss, issuer);
  assert.equal(claims.aud, 'https://sluice.example');
  assert.equal(claims.sub, 'repo:acme/widgets:environment:production', 'the environment names the subject');
  assert.equal(claims.ref_type, 'branch');
  assert.equal(claims.workflow_ref, 'acme/widgets/.github/workflows/deploy.yml@refs/heads/release/1');
  assert.equal(claims.exp - claims.iat, 300, 'five minutes');
  assert.equal(claims.iat - claims.nbf, 600);
  assert.ok(verifiesAgainst(jwks, minted.json.value));

  // Chosen claims, removed claims, GitHub's default audience, and forgeries.
  const custom = decodeJwt((await request('POST', '/_standin/oidc/tokens', { body: { claims: { exp: 1, jti: null } } })).json.value).claims;
  assert.equal(custom.exp, 1);
  assert.ok(!('jti' in custom));
  assert.equal(custom.aud, 'https://github.com/acme', 'GitHub\'s default audience is the owner\'s URL');
  assert.equal(custom.sub, 'repo:acme/widgets:ref:refs/heads/main');
  const forged = (await request('POST', '/_standin/oidc/tokens', { body: { key: 'stranger' } })).json.value;
  assert.equal(decodeJwt(forged).header.kid, jwks.keys[0].kid);
  assert.ok(!verifiesAgainst(jwks, forged), 'a stranger\'s signature does not verify');
  const unknownKid = (await request('POST', '/_standin/oidc/tokens', { body: { kid: 'no-such-key' } })).json.value;
  assert.ok(!verifiesAgainst(jwks, unknownKid));
  const bad = await request('POST', '/_standin/oidc/tokens', { body: { key: 'nobody' } });
  assert.equal(bad.status, 422);
});

test('OIDC issuer: a job\'s request token gets its tokens for the audience it asks; anything else is 401', async () => {
  const job = await request('POST', '/_standin/oidc/jobs', { body: { claims: { repository: 'acme/widgets', ref: 'refs/heads/main' } } });
  assert.equal(job.status, 201, job.text);
  const url = new URL(job.json.request_url);
  assert.equal(url.searchParams.get('api-version'), '2.0', 'the client appends &audience=');
  const asked = await request('GET', `${url.pathname}${url.search}&audience=${encodeURIComponent('https://sluice.example')}`, { auth: `Bearer ${job.json.request_token}` });
  assert.equal(asked.status, 200, asked.text);
  const { claims } = decodeJwt(asked.json.value);
  assert.deepEqual([claims.aud, claims.repository, claims.ref], ['https://sluice.example', 'acme/widgets', 'refs/heads/main']);
  const noAudience = await request('GET', `${url.pathname}${url.search}`, { auth: `Bearer ${job.json.request_token}` });
  assert.equal(decodeJwt(noAudience.json.value).claims.aud, 'https://github.com/acme');
  for (const auth of [undefined, 'Bearer not-a-job', `token ${job.json.request_token}`]) {
    const refused = await request('GET', `${url.pathname}${url.search}`, { auth });
    assert.equal(refused.status, 401, String(auth));
  }
});
