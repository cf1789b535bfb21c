// GitHub stand-in: a local HTTP server speaking the subset of GitHub's REST API (App installation
// tokens, repository contents, refs, branches, check runs, deployments and their statuses) and smart-HTTP git that Sluice uses,
// backed by real bare git repositories, and GitHub Actions' OIDC issuer (`oidc.mjs`: its keys and
// the tokens a dispatching workflow sends). Used by end-to-end tests and by `npm start` without a
// real GitHub App. Also runnable as a CLI (see parseCli below).

import { spawn } from 'node:child_process';
import { createPublicKey, randomInt, verify as verifySignature } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { resolve as resolvePath } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { commitFiles, isValidName, readGit, repoExists, repoPath } from './git.mjs';
import { createOidcIssuer, OIDC_PREFIX } from './oidc.mjs';
import { accountId, repoId } from './webhooks.mjs';

// Request bodies are JSON documents or git negotiation; 10 MiB is far above either in tests and
// bounds memory per request.
const MAX_BODY_BYTES = 10 * 1024 * 1024;
// A clone of a test repository takes well under a second; 60 s leaves room for a loaded CI machine
// while making sure a wedged `git http-backend` cannot hold a connection and a process forever.
const GIT_BACKEND_TIMEOUT_MS = 60_000;
// CGI headers from git http-backend are a handful of short lines; more means the child is broken.
const MAX_CGI_HEADER_BYTES = 64 * 1024;
// GitHub: the JWT 'exp' may be at most 10 minutes in the future.
const MAX_JWT_EXP_AHEAD_SECONDS = 600;
// Clock drift allowance for a JWT 'iat' slightly in the future (GitHub tolerates small drift and
// recommends back-dating iat by 60 s).
const MAX_JWT_IAT_AHEAD_SECONDS = 60;
// GitHub's contents API returns file content inline only up to 1 MB; larger files come back with
// encoding "none" and empty content.
const MAX_INLINE_CONTENT_BYTES = 1024 * 1024;
// GitHub's documented maximum for check run output.summary and output.text.
const MAX_OUTPUT_CHARS = 65535;
// GitHub's documented maximum number of annotations per check run request.
const MAX_ANNOTATIONS_PER_REQUEST = 50;
// Recorded calls are kept for inspection; the oldest are dropped beyond this so a long `npm start`
// session cannot grow without bound.
const MAX_RECORDED_CALLS = 10_000;
// A test's latency (`POST /_standin/latency`) is at most 10 minutes: longer than any step's own
// timeout, so a delay can always outlast what it delays.
const LATENCY_MS_MAX = 600_000;
// In-memory check runs, deployments and live tokens are likewise bounded.
const MAX_CHECK_RUNS = 100_000;
const MAX_DEPLOYMENTS = 100_000;
const MAX_LIVE_TOKENS = 10_000;
// GitHub pagination defaults for list endpoints.
const DEFAULT_PER_PAGE = 30;
const MAX_PER_PAGE = 100;

const APP_PERMISSIONS = { checks: 'write', contents: 'write', deployments: 'write', metadata: 'read', pull_requests: 'write' };
// GitHub's cap on the commits one comparison lists.
const MAX_COMPARE_COMMITS = 250;
// Issue comments and releases kept in memory are bounded like check runs.
const MAX_COMMENTS = 100_000;
const MAX_RELEASES = 100_000;
// Pull request numbers the stand-in allocates start above those tests register by hand.
const FIRST_PULL_NUMBER = 1000;
// GitHub's limits on check run buttons (`actions`).
const ACTIONS_MAX = 3;
const ACTION_LIMITS = { label: 20, identifier: 20, description: 40 };
const PERMISSION_RANK = { read: 1, write: 2 };
const CHECK_STATUSES = ['queued', 'in_progress', 'completed'];
// GitHub's deployment status states, and its documented maximum description length.
const DEPLOYMENT_STATES = ['error', 'failure', 'inactive', 'in_progress', 'queued', 'pending', 'success'];
const MAX_DEPLOYMENT_DESCRIPTION_CHARS = 140;
// GitHub's maximum length of an environment name.
const MAX_ENVIRONMENT_CHARS = 255;
const CHECK_CONCLUSIONS = ['action_required', 'cancelled', 'failure', 'neutral', 'success', 'skipped', 'stale', 'timed_out'];
const TOKEN_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
// Branch/tag/sha names accepted as a `ref`; excludes git revision syntax (`:`, `^`, `~`, `..`,
// `@{`) so a ref can never be interpreted as anything but a name.
const REF_RE = /^(?![-/])(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/+#-]{1,255}$/;
const SHA_RE = /^[0-9a-f]{40}$/;
const WRITE_METHODS = new Set(['POST', 'PATCH', 'PUT', 'DELETE']);

const DOCS = {
  root: 'https://docs.github.com/rest',
  token: 'https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app',
  repo: 'https://docs.github.com/rest/repos/repos#get-a-repository',
  contents: 'https://docs.github.com/rest/repos/contents#get-repository-content',
  ref: 'https://docs.github.com/rest/git/refs#get-a-reference',
  tag: 'https://docs.github.com/rest/git/tags#get-a-tag',
  branch: 'https://docs.github.com/rest/branches/branches#get-a-branch',
  createRun: 'https://docs.github.com/rest/checks/runs#create-a-check-run',
  updateRun: 'https://docs.github.com/rest/checks/runs#update-a-check-run',
  getRun: 'https://docs.github.com/rest/checks/runs#get-a-check-run',
  listRuns: 'https://docs.github.com/rest/checks/runs#list-check-runs-for-a-git-reference',
  pull: 'https://docs.github.com/rest/pulls/pulls#get-a-pull-request',
  permission: 'https://docs.github.com/rest/collaborators/collaborators#get-repository-permissions-for-a-user',
  createDeployment: 'https://docs.github.com/rest/deployments/deployments#create-a-deployment',
  listDeployments: 'https://docs.github.com/rest/deployments/deployments#list-deployments',
  getDeployment: 'https://docs.github.com/rest/deployments/deployments#get-a-deployment',
  createStatus: 'https://docs.github.com/rest/deployments/statuses#create-a-deployment-status',
  listStatuses: 'https://docs.github.com/rest/deployments/statuses#list-deployment-statuses',
  repoInstallation: 'https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app',
  compare: 'https://docs.github.com/rest/commits/commits#compare-two-commits',
  app: 'https://docs.github.com/rest/apps/apps#get-the-authenticated-app',
  tags: 'https://docs.github.com/rest/repos/repos#list-repository-tags',
  listPulls: 'https://docs.github.com/rest/pulls/pulls#list-pull-requests',
  createPull: 'https://docs.github.com/rest/pulls/pulls#create-a-pull-request',
  updatePull: 'https://docs.github.com/rest/pulls/pulls#update-a-pull-request',
  createRef: 'https://docs.github.com/rest/git/refs#create-a-reference',
  putContents: 'https://docs.github.com/rest/repos/contents#create-or-update-file-contents',
  comments: 'https://docs.github.com/rest/issues/comments#create-an-issue-comment',
  releaseByTag: 'https://docs.github.com/rest/releases/releases#get-a-release-by-tag-name',
  createRelease: 'https://docs.github.com/rest/releases/releases#create-a-release',
  latestRelease: 'https://docs.github.com/rest/releases/releases#get-the-latest-release',
};

class ApiError extends Error {
  constructor(status, message, documentationUrl = DOCS.root, extra = {}, headers = {}) {
    super(message);
    this.status = status;
    this.body = { message, documentation_url: documentationUrl, ...extra, status: String(status) };
    this.headers = headers;
  }
}

const notFound = (doc = DOCS.root) => new ApiError(404, 'Not Found', doc);
const invalidRequest = (detail, doc) => new ApiError(422, `Invalid request.\n\n${detail}`, doc);

function isoSeconds(ms) {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function sendJson(res, status, body, headers = {}) {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'Content-Type': 'application/json; charset=utf-8',
    'Content-Length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

// ---------------------------------------------------------------------------------------------
// Authentication

function parseAuthorization(header) {
  const match = /^(\S+)\s+(\S+)\s*$/.exec(header ?? '');
  if (!match) return { scheme: null, credential: null };
  const scheme = { bearer: 'Bearer', token: 'token', basic: 'Basic' }[match[1].toLowerCase()] ?? null;
  return { scheme, credential: scheme ? match[2] : null };
}

function decodeJsonPart(part) {
  if (!/^[A-Za-z0-9_-]+$/.test(part)) return null;
  try {
    const value = JSON.parse(Buffer.from(part, 'base64url').toString('utf8'));
    return value && typeof value === 'object' ? value : null;
  } catch {
    return null;
  }
}

// Verifies an App JWT the way GitHub does; returns null when valid, else GitHub's error message.
function jwtProblem(jwt, { appId, publicKey, nowSec }) {
  const undecodable = 'A JSON web token could not be decoded';
  const parts = (jwt ?? '').split('.');
  if (parts.length !== 3) return undecodable;
  const [header, claims] = parts.slice(0, 2).map(decodeJsonPart);
  if (!header || !claims || header.alg !== 'RS256' || !/^[A-Za-z0-9_-]+$/.test(parts[2])) return undecodable;
  if (claims.iss === undefined || String(claims.iss) !== String(appId)) {
    return "'Issuer' claim ('iss') must be the ID of this GitHub App";
  }
  const signed = Buffer.from(`${parts[0]}.${parts[1]}`);
  if (!verifySignature('RSA-SHA256', signed, publicKey, Buffer.from(parts[2], 'base64url'))) return undecodable;
  if (!Number.isInteger(claims.iat) || claims.iat > nowSec + MAX_JWT_IAT_AHEAD_SECONDS) {
    return "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued";
  }
  if (!Number.isInteger(claims.exp) || claims.exp <= nowSec) {
    return "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires";
  }
  if (claims.exp > nowSec + MAX_JWT_EXP_AHEAD_SECONDS) return "'Expiration time' claim ('exp') is too far in the future";
  return null;
}

function randomToken() {
  let body = '';
  for (let i = 0; i < 36; i++) body += TOKEN_ALPHABET[randomInt(TOKEN_ALPHABET.length)];
  return `ghs_${body}`;
}

function requestedPermissions(requested) {
  if (requested === undefined) return { ...APP_PERMISSIONS };
  if (!requested || typeof requested !== 'object' || Array.isArray(requested)) {
    throw invalidRequest('"permissions" must be an object.', DOCS.token);
  }
  for (const [name, level] of Object.entries(requested)) {
    const granted = APP_PERMISSIONS[name];
    if (!granted || !PERMISSION_RANK[level] || PERMISSION_RANK[level] > PERMISSION_RANK[granted]) {
      throw new ApiError(422, 'The permissions requested are not granted to this installation.', DOCS.token);
    }
  }
  // GitHub always includes metadata:read in installation tokens.
  return { ...requested, metadata: 'read' };
}

function hasPermission(token, name, level) {
  return (PERMISSION_RANK[token.permissions[name]] ?? 0) >= PERMISSION_RANK[level];
}

function requirePermission(token, name, level) {
  if (!hasPermission(token, name, level)) {
    throw new ApiError(403, 'Resource not accessible by integration', DOCS.root);
  }
}

// ---------------------------------------------------------------------------------------------
// Request plumbing

function payloadTooLarge() {
  return new ApiError(413, 'Payload Too Large', DOCS.root, {}, { Connection: 'close' });
}

// Reads a request body of at most MAX_BODY_BYTES. Beyond that the 413 is answered with
// "Connection: close" and the rest of the upload is discarded until Node closes the socket.
function readBody(req) {
  return new Promise((resolve, reject) => {
    if (Number(req.headers['content-length'] ?? 0) > MAX_BODY_BYTES) {
      reject(payloadTooLarge());
      return;
    }
    const chunks = [];
    let size = 0;
    const onData = (chunk) => {
      size += chunk.length;
      if (size <= MAX_BODY_BYTES) {
        chunks.push(chunk);
        return;
      }
      req.off('data', onData);
      reject(payloadTooLarge());
    };
    req.on('data', onData);
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}

// Empty bodies count as `{}` (GitHub accepts body-less POSTs such as access_tokens).
function parseJsonBody(raw) {
  if (raw.length === 0) return {};
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch {
    return undefined;
  }
}

function requireObjectBody(ctx) {
  if (ctx.body === undefined) throw new ApiError(400, 'Problems parsing JSON', DOCS.root);
  if (!ctx.body || typeof ctx.body !== 'object' || Array.isArray(ctx.body)) {
    throw invalidRequest('Invalid input: the request body must be a JSON object.', DOCS.root);
  }
  return ctx.body;
}

function decodeSegment(segment) {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw notFound();
  }
}

// ---------------------------------------------------------------------------------------------
// Git reads

async function tryGit(dir, args) {
  try {
    return await readGit(dir, args);
  } catch {
    return null;
  }
}

async function revParse(dir, rev) {
  const out = await tryGit(dir, ['rev-parse', '--verify', '--quiet', rev]);
  return out ? out.toString().trim() : null;
}

// Resolves a branch, tag, full ref or (abbreviated) sha to a commit sha, like GitHub's `ref`.
async function resolveCommit(dir, ref) {
  if (typeof ref !== 'string' || !REF_RE.test(ref)) return null;
  const candidates = [`refs/heads/${ref}`, `refs/tags/${ref}`];
  if (ref.startsWith('refs/')) candidates.unshift(ref);
  if (/^[0-9a-f]{4,40}$/i.test(ref)) candidates.push(ref.toLowerCase());
  for (const candidate of candidates) {
    const sha = await revParse(dir, `${candidate}^{commit}`);
    if (sha) return sha;
  }
  return null;
}

async function defaultBranch(dir) {
  const out = await tryGit(dir, ['symbolic-ref', '--short', 'HEAD']);
  return out ? out.toString().trim() : 'main';
}

// `git ls-tree -z -l` lines: "<mode> <type> <sha> <size>\t<path>".
function parseLsTree(buf) {
  return buf
    .toString('utf8')
    .split('\0')
    .filter(Boolean)
    .map((line) => {
      const tab = line.indexOf('\t');
      const [mode, type, sha, size] = line.slice(0, tab).trim().split(/\s+/);
      return { mode, type, sha, size: size === '-' ? 0 : Number(size), path: line.slice(tab + 1) };
    });
}

function parseSignature(line) {
  const match = /^(.*) <(.*)> (\d+) [+-]\d{4}$/.exec(line ?? '');
  if (!match) return null;
  return { name: match[1], email: match[2], date: isoSeconds(Number(match[3]) * 1000) };
}

async function readCommit(dir, sha) {
  const text = (await readGit(dir, ['cat-file', 'commit', sha])).toString('utf8');
  const split = text.indexOf('\n\n');
  const headers = text.slice(0, split).split('\n');
  const field = (name) => headers.filter((h) => h.startsWith(`${name} `)).map((h) => h.slice(name.length + 1));
  return {
    tree: field('tree')[0],
    parents: field('parent'),
    author: parseSignature(field('author')[0]),
    committer: parseSignature(field('committer')[0]),
    message: split === -1 ? '' : text.slice(split + 2).replace(/\n$/, ''),
  };
}

function wrapBase64(buf) {
  const b64 = buf.toString('base64');
  // GitHub (Ruby's Base64.encode64) breaks lines every 60 characters and ends with a newline.
  return b64 ? `${b64.match(/.{1,60}/g).join('\n')}\n` : '';
}

// ---------------------------------------------------------------------------------------------
// The server

export async function startStandin({
  port = 0, host = '127.0.0.1', reposDir, appId, publicKeyPem, installations = [42], tokenTtlSeconds = 3600, log = false,
} = {}) {
  if (!reposDir) throw new Error('startStandin: reposDir is required');
  if (appId === undefined || appId === null) throw new Error('startStandin: appId is required');
  if (!publicKeyPem) throw new Error('startStandin: publicKeyPem is required');
  const root = resolvePath(reposDir);
  mkdirSync(root, { recursive: true });
  // createPublicKey accepts SPKI and PKCS#1 public keys and derives the public half of a private key.
  const publicKey = createPublicKey(publicKeyPem);
  const installationIds = new Set(installations.map(Number));

  const state = {
    baseUrl: null,
    calls: [],
    checkRuns: new Map(), // id -> { repo: 'owner/name', run, history }
    checkSuites: new Map(), // 'owner/name@sha' -> suite id
    tokens: new Map(), // token -> { installationId, expiresAtMs, permissions, repositories }
    pulls: new Map(), // 'owner/repo#n' -> { head_sha, head_ref, head_repo, author_association, title, ... }
    comments: new Map(), // 'owner/repo#n' -> [{ id, body, user }]
    releases: new Map(), // 'owner/repo@tag' -> release
    latestReleases: new Map(), // 'owner/repo' -> tag of the release marked Latest
    nextPullNumber: FIRST_PULL_NUMBER,
    nextCommentId: 7_000_000_001,
    nextReleaseId: 8_000_000_001,
    permissions: new Map(), // 'owner/repo:login' -> admin | write | read | none
    deployments: new Map(), // id -> { repo: 'owner/name', deployment, statuses: [oldest first] }
    nextCallSeq: 1,
    // Ids above 2^31 catch 32-bit truncation in clients; the random offset catches hard-coded ids.
    nextCheckRunId: 4_000_000_001 + randomInt(1_000_000) * 1000,
    nextCheckSuiteId: 9_000_000_001 + randomInt(1_000_000) * 1000,
    nextDeploymentId: 3_000_000_001 + randomInt(1_000_000) * 1000,
    nextDeploymentStatusId: 6_000_000_001 + randomInt(1_000_000) * 1000,
    // Latency a test asked for (`POST /_standin/latency`): the next `count` requests whose path
    // starts with `path_prefix` are held `delay_ms` before they are served (`before`: a slow
    // clone) or after their answer was made (`after`: an answer that is old when it arrives).
    latency: [],
  };
  const children = new Set();
  // GitHub Actions' OIDC issuer (tokens a dispatching workflow sends Sluice).
  const oidc = createOidcIssuer(() => `${state.baseUrl}${OIDC_PREFIX}`);

  // -- auth ------------------------------------------------------------------------------------

  function liveToken(credential) {
    const token = credential && state.tokens.get(credential);
    return token && token.expiresAtMs > Date.now() ? token : null;
  }

  function requireInstallationToken(ctx) {
    const token = ctx.auth.scheme === 'Bearer' || ctx.auth.scheme === 'token' ? liveToken(ctx.auth.credential) : null;
    if (!token) throw new ApiError(401, 'Bad credentials', DOCS.root);
    return token;
  }

  function basicAuthToken(ctx) {
    if (ctx.auth.scheme !== 'Basic') return null;
    const decoded = Buffer.from(ctx.auth.credential, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    return colon === -1 ? null : liveToken(decoded.slice(colon + 1));
  }

  // Repository names (not full names) a token is limited to, as GitHub's `repositories` body
  // field; null = every repository of the installation.
  function requestedRepositories(requested) {
    if (requested === undefined) return null;
    if (!Array.isArray(requested) || requested.length === 0 || requested.some((r) => typeof r !== 'string' || r.includes('/'))) {
      throw invalidRequest('"repositories" must be a non-empty array of repository names.', DOCS.token);
    }
    return requested;
  }

  // A token limited to some repositories sees no other: GitHub answers 404 for them.
  function requireRepoInScope(token, owner, repo) {
    if (token.repositories && !token.repositories.includes(repo)) throw notFound();
  }

  function storeToken(installationId, permissions, repositories = null) {
    const now = Date.now();
    for (const [key, value] of state.tokens) if (value.expiresAtMs <= now) state.tokens.delete(key);
    if (state.tokens.size >= MAX_LIVE_TOKENS) state.tokens.delete(state.tokens.keys().next().value);
    const token = randomToken();
    // Whole seconds, so the advertised expires_at is exactly when the token stops working.
    const expiresAtMs = Math.floor(now / 1000) * 1000 + tokenTtlSeconds * 1000;
    state.tokens.set(token, { installationId, expiresAtMs, permissions, repositories });
    return { token, expiresAtMs };
  }

  // -- helpers shared by repo endpoints ----------------------------------------------------------

  function repoUrls(owner, repo) {
    return { api: `${state.baseUrl}/repos/${owner}/${repo}`, html: `${state.baseUrl}/${owner}/${repo}` };
  }

  function requireRepo(owner, repo, doc) {
    if (!repoExists(root, owner, repo)) throw notFound(doc);
    return repoPath(root, owner, repo);
  }

  // -- handlers: apps --------------------------------------------------------------------------

  async function createAccessToken(ctx, rawInstallationId) {
    const jwtError = ctx.auth.scheme === 'Bearer'
      ? jwtProblem(ctx.auth.credential, { appId, publicKey, nowSec: Math.floor(Date.now() / 1000) })
      : 'A JSON web token could not be decoded';
    if (jwtError) throw new ApiError(401, jwtError, DOCS.token);
    const installationId = Number(rawInstallationId);
    if (!/^\d+$/.test(rawInstallationId) || !installationIds.has(installationId)) throw notFound(DOCS.token);
    const body = requireObjectBody(ctx);
    const permissions = requestedPermissions(body.permissions);
    const repositories = requestedRepositories(body.repositories);
    const { token, expiresAtMs } = storeToken(installationId, permissions, repositories);
    const answer = { token, expires_at: isoSeconds(expiresAtMs), permissions, repository_selection: repositories ? 'selected' : 'all' };
    if (repositories) answer.repositories = repositories.map((name) => ({ name }));
    sendJson(ctx.res, 201, answer);
  }

  function requireAppJwt(ctx, doc) {
    const jwtError = ctx.auth.scheme === 'Bearer'
      ? jwtProblem(ctx.auth.credential, { appId, publicKey, nowSec: Math.floor(Date.now() / 1000) })
      : 'A JSON web token could not be decoded';
    if (jwtError) throw new ApiError(401, jwtError, doc);
  }

  // GET /repos/{owner}/{repo}/installation (App JWT): the installation that holds a repository;
  // 404 when the App is not installed on it. The stand-in's repositories all belong to its first
  // installation.
  function getRepoInstallation(ctx, owner, repo) {
    requireAppJwt(ctx, DOCS.repoInstallation);
    requireRepo(owner, repo, DOCS.repoInstallation);
    const [id] = installationIds;
    sendJson(ctx.res, 200, {
      id,
      account: { login: owner, id: accountId(owner), type: 'User' },
      app_id: Number(appId),
      app_slug: 'sluice',
      target_type: 'User',
      repository_selection: 'all',
      permissions: { ...APP_PERMISSIONS },
      events: ['check_run', 'check_suite', 'pull_request', 'push'],
      access_tokens_url: `${state.baseUrl}/app/installations/${id}/access_tokens`,
    });
  }

  // GET /app (App JWT): the authenticated App.
  function getApp(ctx) {
    requireAppJwt(ctx, DOCS.app);
    sendJson(ctx.res, 200, { id: Number(appId), slug: 'sluice', name: 'Sluice', owner: { login: 'octo', type: 'Organization' } });
  }

  // DELETE /installation/token: revokes the token that authenticates the request (204).
  function revokeToken(ctx) {
    state.tokens.delete(ctx.auth.credential);
    ctx.res.writeHead(204).end();
  }

  // -- handlers: repositories --------------------------------------------------------------------

  async function getRepo(ctx, owner, repo) {
    requirePermission(ctx.token, 'metadata', 'read');
    const dir = requireRepo(owner, repo, DOCS.repo);
    const urls = repoUrls(owner, repo);
    const id = repoId(owner, repo);
    sendJson(ctx.res, 200, {
      id,
      node_id: `R_${Buffer.from(String(id)).toString('base64url')}`,
      name: repo,
      full_name: `${owner}/${repo}`,
      owner: { login: owner, id: accountId(owner), type: 'User', url: `${state.baseUrl}/users/${owner}` },
      private: false,
      visibility: 'public',
      fork: false,
      html_url: urls.html,
      url: urls.api,
      clone_url: `${urls.html}.git`,
      default_branch: await defaultBranch(dir),
    });
  }

  function contentEntry(owner, repo, ref, entry) {
    const urls = repoUrls(owner, repo);
    const name = entry.path.split('/').pop();
    const type = entry.type === 'tree' ? 'dir' : entry.type === 'commit' ? 'submodule' : entry.mode === '120000' ? 'symlink' : 'file';
    const encodedPath = entry.path.split('/').map(encodeURIComponent).join('/');
    const url = `${urls.api}/contents/${encodedPath}?ref=${encodeURIComponent(ref)}`;
    const gitUrl = entry.type === 'commit' ? null : `${urls.api}/git/${entry.type === 'tree' ? 'trees' : 'blobs'}/${entry.sha}`;
    const htmlUrl = entry.type === 'commit' ? null : `${urls.html}/${type === 'dir' ? 'tree' : 'blob'}/${ref}/${encodedPath}`;
    return {
      type,
      size: entry.type === 'blob' ? entry.size : 0,
      name,
      path: entry.path,
      sha: entry.sha,
      url,
      git_url: gitUrl,
      html_url: htmlUrl,
      download_url: entry.type === 'blob' ? `${urls.html}/raw/${ref}/${encodedPath}` : null,
      _links: { self: url, git: gitUrl, html: htmlUrl },
    };
  }

  async function fileObject(dir, owner, repo, ref, entry) {
    const base = contentEntry(owner, repo, ref, entry);
    if (base.type === 'symlink') {
      return { ...base, target: (await readGit(dir, ['cat-file', 'blob', entry.sha])).toString('utf8') };
    }
    if (base.type !== 'file') return base;
    if (entry.size > MAX_INLINE_CONTENT_BYTES) return { ...base, encoding: 'none', content: '' };
    const blob = await readGit(dir, ['cat-file', 'blob', entry.sha]);
    return { ...base, encoding: 'base64', content: wrapBase64(blob) };
  }

  // Normalises a contents path; '.'/'..' segments never name anything on GitHub.
  function contentPath(raw) {
    const parts = (raw ?? '').split('/').filter(Boolean).map(decodeSegment);
    if (parts.some((p) => p === '.' || p === '..' || p.includes('\0'))) throw notFound(DOCS.contents);
    return parts.join('/');
  }

  async function getContents(ctx, owner, repo, rawPath) {
    requirePermission(ctx.token, 'contents', 'read');
    const dir = requireRepo(owner, repo, DOCS.contents);
    const path = contentPath(rawPath);
    const ref = ctx.query.get('ref') || (await defaultBranch(dir));
    const commit = await resolveCommit(dir, ref);
    if (!commit) throw notFound(DOCS.contents);
    const [entry] = path ? parseLsTree(await readGit(dir, ['ls-tree', '-z', '-l', commit, '--', path])) : [{ type: 'tree' }];
    if (!entry || (path && entry.path !== path)) throw notFound(DOCS.contents);
    if (entry.type !== 'tree') {
      sendJson(ctx.res, 200, await fileObject(dir, owner, repo, ref, entry));
      return;
    }
    const listArgs = path ? ['ls-tree', '-z', '-l', commit, '--', `${path}/`] : ['ls-tree', '-z', '-l', commit];
    const entries = parseLsTree(await readGit(dir, listArgs));
    sendJson(ctx.res, 200, entries.map((e) => contentEntry(owner, repo, ref, e)));
  }

  async function getRef(ctx, owner, repo, rawRef) {
    requirePermission(ctx.token, 'contents', 'read');
    const dir = requireRepo(owner, repo, DOCS.ref);
    const ref = rawRef.split('/').map(decodeSegment).join('/');
    if (!REF_RE.test(ref) || !/^(heads|tags)\//.test(ref)) throw notFound(DOCS.ref);
    const out = await tryGit(dir, ['show-ref', '--verify', `refs/${ref}`]);
    if (!out) throw notFound(DOCS.ref);
    const sha = out.toString().split(' ')[0];
    const type = (await readGit(dir, ['cat-file', '-t', sha])).toString().trim();
    const urls = repoUrls(owner, repo);
    sendJson(ctx.res, 200, {
      ref: `refs/${ref}`,
      node_id: `REF_${Buffer.from(`${repoId(owner, repo)}:refs/${ref}`).toString('base64url')}`,
      url: `${urls.api}/git/refs/${ref}`,
      object: { sha, type, url: `${urls.api}/git/${type}s/${sha}` },
    });
  }

  // GET /repos/{o}/{r}/git/tags/{sha}: an annotated tag's object (its name, message, tagger and
  // the object it names: a commit, or another tag object for a tag of a tag). The API serves
  // tag objects only: any other sha, known or not, is 404, as on GitHub.
  async function getTag(ctx, owner, repo, rawSha) {
    requirePermission(ctx.token, 'contents', 'read');
    const dir = requireRepo(owner, repo, DOCS.tag);
    const sha = decodeSegment(rawSha);
    if (!SHA_RE.test(sha)) throw notFound(DOCS.tag);
    const type = (await tryGit(dir, ['cat-file', '-t', sha]))?.toString().trim();
    if (type !== 'tag') throw notFound(DOCS.tag);
    const text = (await readGit(dir, ['cat-file', 'tag', sha])).toString('utf8');
    const split = text.indexOf('\n\n');
    const headers = (split === -1 ? text : text.slice(0, split)).split('\n');
    const field = (name) => headers.find((h) => h.startsWith(`${name} `))?.slice(name.length + 1);
    const [object, objectType] = [field('object'), field('type')];
    const urls = repoUrls(owner, repo);
    sendJson(ctx.res, 200, {
      node_id: `TAG_${Buffer.from(sha).toString('base64url')}`,
      tag: field('tag'),
      sha,
      url: `${urls.api}/git/tags/${sha}`,
      message: split === -1 ? '' : text.slice(split + 2),
      tagger: parseSignature(field('tagger')),
      object: { sha: object, type: objectType, url: `${urls.api}/git/${objectType}s/${object}` },
      verification: { verified: false, reason: 'unsigned', signature: null, payload: null, verified_at: null },
    });
  }

  // GET /repos/{o}/{r}/compare/{base}...{head}: how head relates to base (`identical`, `ahead`,
  // `behind`, `diverged`), with the counts and the commits base lacks (oldest first, at most 250
  // as GitHub lists); 404 when either side is unknown.
  async function compareCommits(ctx, owner, repo, rawBasehead) {
    requirePermission(ctx.token, 'contents', 'read');
    const dir = requireRepo(owner, repo, DOCS.compare);
    const basehead = decodeSegment(rawBasehead);
    const parts = basehead.split('...');
    if (parts.length !== 2) throw notFound(DOCS.compare);
    const [base, head] = await Promise.all(parts.map((p) => resolveCommit(dir, p)));
    if (!base || !head) throw notFound(DOCS.compare);
    const count = async (range) => Number((await readGit(dir, ['rev-list', '--count', range])).toString().trim());
    const [aheadBy, behindBy] = [await count(`${base}..${head}`), await count(`${head}..${base}`)];
    const status = aheadBy === 0 && behindBy === 0 ? 'identical' : behindBy === 0 ? 'ahead' : aheadBy === 0 ? 'behind' : 'diverged';
    const mergeBase = (await tryGit(dir, ['merge-base', base, head]))?.toString().trim() ?? null;
    const listed = aheadBy === 0 ? [] : (await readGit(dir, ['rev-list', '--reverse', '--max-count=250', `${base}..${head}`])).toString().trim().split('\n');
    const urls = repoUrls(owner, repo);
    sendJson(ctx.res, 200, {
      url: `${urls.api}/compare/${basehead}`,
      status,
      ahead_by: aheadBy,
      behind_by: behindBy,
      total_commits: aheadBy,
      base_commit: { sha: base },
      merge_base_commit: { sha: mergeBase },
      commits: await Promise.all(listed.filter(Boolean).map((sha) => commitObject(dir, urls, sha))),
    });
  }

  // A commit as a comparison lists it: its message and signatures, and its `author` the GitHub
  // user of a noreply address (`<login>@users.noreply.github.com`), else null.
  async function commitObject(dir, urls, sha) {
    const c = await readCommit(dir, sha);
    const login = /^([^@]+)@users\.noreply\.github\.com$/.exec(c.author?.email ?? '')?.[1];
    return {
      sha,
      url: `${urls.api}/commits/${sha}`,
      commit: { message: c.message, author: c.author, committer: c.committer },
      author: login ? { login, type: 'User' } : null,
      parents: c.parents.map((p) => ({ sha: p })),
    };
  }

  async function getBranch(ctx, owner, repo, rawBranch) {
    requirePermission(ctx.token, 'contents', 'read');
    const dir = requireRepo(owner, repo, DOCS.branch);
    const branch = rawBranch.split('/').map(decodeSegment).join('/');
    const sha = REF_RE.test(branch) ? await revParse(dir, `refs/heads/${branch}^{commit}`) : null;
    if (!sha) throw new ApiError(404, 'Branch not found', DOCS.branch);
    const commit = await readCommit(dir, sha);
    const urls = repoUrls(owner, repo);
    const commitUrl = `${urls.api}/commits/${sha}`;
    sendJson(ctx.res, 200, {
      name: branch,
      commit: {
        sha,
        node_id: `C_${Buffer.from(sha).toString('base64url')}`,
        commit: {
          author: commit.author,
          committer: commit.committer,
          message: commit.message,
          tree: { sha: commit.tree, url: `${urls.api}/git/trees/${commit.tree}` },
          url: `${urls.api}/git/commits/${sha}`,
          comment_count: 0,
        },
        url: commitUrl,
        html_url: `${urls.html}/commit/${sha}`,
        parents: commit.parents.map((p) => ({ sha: p, url: `${urls.api}/commits/${p}`, html_url: `${urls.html}/commit/${p}` })),
      },
      _links: { self: `${urls.api}/branches/${branch}`, html: `${urls.html}/tree/${branch}` },
      protected: false,
      protection: { enabled: false, required_status_checks: { enforcement_level: 'off', contexts: [], checks: [] } },
      protection_url: `${urls.api}/branches/${branch}/protection`,
    });
  }

  // -- handlers: check runs ----------------------------------------------------------------------

  function optionalString(body, key, doc) {
    if (!(key in body) || body[key] === null) return;
    if (typeof body[key] !== 'string') throw invalidRequest(`For 'properties/${key}', ${JSON.stringify(body[key])} is not a string.`, doc);
  }

  function optionalEnum(body, key, allowed, doc) {
    if (!(key in body) || body[key] === null) return;
    if (!allowed.includes(body[key])) throw invalidRequest(`For 'properties/${key}', ${JSON.stringify(body[key])} is not a member of enum.`, doc);
  }

  function optionalTimestamp(body, key, doc) {
    if (!(key in body) || body[key] === null) return undefined;
    const ms = typeof body[key] === 'string' && /^\d{4}-\d{2}-\d{2}T/.test(body[key]) ? Date.parse(body[key]) : NaN;
    if (Number.isNaN(ms)) throw invalidRequest(`For 'properties/${key}', ${JSON.stringify(body[key])} is not a date-time.`, doc);
    return isoSeconds(ms);
  }

  function charCount(text) {
    return [...text].length;
  }

  function validateOutput(output, doc) {
    if (output === undefined || output === null) return undefined;
    if (typeof output !== 'object' || Array.isArray(output)) throw invalidRequest(`For 'properties/output', ${JSON.stringify(output)} is not an object.`, doc);
    for (const key of ['title', 'summary']) {
      if (output[key] === undefined || output[key] === null) throw invalidRequest(`"${key}" wasn't supplied.`, doc);
      optionalString(output, key, doc);
    }
    optionalString(output, 'text', doc);
    for (const key of ['summary', 'text']) {
      if (typeof output[key] === 'string' && charCount(output[key]) > MAX_OUTPUT_CHARS) {
        throw invalidRequest(`For 'properties/${key}', the value is longer than ${MAX_OUTPUT_CHARS} characters.`, doc);
      }
    }
    const annotations = output.annotations ?? [];
    if (!Array.isArray(annotations) || annotations.length > MAX_ANNOTATIONS_PER_REQUEST) {
      throw invalidRequest(`For 'properties/annotations', at most ${MAX_ANNOTATIONS_PER_REQUEST} annotations are allowed per request.`, doc);
    }
    return { title: output.title, summary: output.summary, text: output.text ?? null, annotations: annotations.length };
  }

  // Validates a create/update body without side effects; returns the normalised fields.
  function checkRunFields(body, doc) {
    for (const key of ['name', 'details_url', 'external_id']) optionalString(body, key, doc);
    if ('name' in body && !body.name) throw invalidRequest('"name" wasn\'t supplied.', doc);
    optionalEnum(body, 'status', CHECK_STATUSES, doc);
    optionalEnum(body, 'conclusion', CHECK_CONCLUSIONS, doc);
    const fields = {};
    for (const key of ['name', 'details_url', 'external_id', 'status', 'conclusion']) {
      if (key in body) fields[key] = body[key];
    }
    for (const key of ['started_at', 'completed_at']) {
      if (key in body) fields[key] = optionalTimestamp(body, key, doc) ?? null;
    }
    const output = validateOutput(body.output, doc);
    if (output) fields.output = output;
    if ('actions' in body) fields.actions = validateActions(body.actions, doc);
    return fields;
  }

  function validateActions(actions, doc) {
    const ok = Array.isArray(actions) && actions.length <= ACTIONS_MAX && actions.every((a) => a && typeof a === 'object'
      && Object.entries(ACTION_LIMITS).every(([k, max]) => typeof a[k] === 'string' && a[k].length > 0 && a[k].length <= max));
    if (!ok) throw new ApiError(422, 'Validation Failed', doc, { errors: [{ resource: 'CheckRun', field: 'actions', code: 'invalid' }] });
    return actions.map(({ label, identifier, description }) => ({ label, identifier, description }));
  }

  // GitHub: a conclusion or completed_at implies status "completed", which requires a conclusion.
  function nextStatus(current, fields, nowIso, doc) {
    const completing = fields.conclusion != null || fields.completed_at != null;
    const status = completing ? 'completed' : (fields.status ?? current.status);
    if (status !== 'completed') return { status, conclusion: null, completed_at: null };
    const conclusion = fields.conclusion ?? current.conclusion;
    if (!conclusion) {
      throw new ApiError(422, 'Validation Failed', doc, {
        errors: [{ resource: 'CheckRun', field: 'conclusion', code: 'missing_field' }],
      });
    }
    return { status, conclusion, completed_at: fields.completed_at ?? current.completed_at ?? nowIso };
  }

  function applyFields(run, fields, nowIso, doc) {
    const next = nextStatus(run, fields, nowIso, doc);
    for (const key of ['name', 'details_url', 'external_id', 'started_at', 'actions']) {
      if (key in fields) run[key] = fields[key];
    }
    if (fields.output) {
      const { annotations, ...text } = fields.output;
      run.output = { ...run.output, ...text, annotations_count: run.output.annotations_count + annotations };
    }
    Object.assign(run, next);
  }

  function checkSuiteId(repoKey, sha) {
    const key = `${repoKey}@${sha}`;
    if (!state.checkSuites.has(key)) state.checkSuites.set(key, state.nextCheckSuiteId++);
    return state.checkSuites.get(key);
  }

  function newCheckRun(owner, repo, headSha, nowIso) {
    const id = state.nextCheckRunId++;
    const urls = repoUrls(owner, repo);
    const url = `${urls.api}/check-runs/${id}`;
    return {
      id,
      head_sha: headSha,
      node_id: `CR_${Buffer.from(String(id)).toString('base64url')}`,
      external_id: null,
      url,
      html_url: `${urls.html}/runs/${id}`,
      details_url: null,
      status: 'queued',
      conclusion: null,
      started_at: nowIso,
      completed_at: null,
      output: { title: null, summary: null, text: null, annotations_count: 0, annotations_url: `${url}/annotations` },
      name: null,
      check_suite: { id: checkSuiteId(`${owner}/${repo}`, headSha) },
      app: { id: Number(appId), slug: 'sluice', name: 'Sluice' },
      pull_requests: [],
      actions: [],
    };
  }

  function recordHistory(entry) {
    entry.history.push({ status: entry.run.status, conclusion: entry.run.conclusion, at_ms: Date.now() });
  }

  async function createCheckRun(ctx, owner, repo) {
    requirePermission(ctx.token, 'checks', 'write');
    const dir = requireRepo(owner, repo, DOCS.createRun);
    const body = requireObjectBody(ctx);
    for (const key of ['name', 'head_sha']) {
      if (body[key] === undefined || body[key] === null) throw invalidRequest(`"${key}" wasn't supplied.`, DOCS.createRun);
    }
    optionalString(body, 'head_sha', DOCS.createRun);
    const fields = checkRunFields(body, DOCS.createRun);
    const headSha = body.head_sha;
    const exists = SHA_RE.test(headSha) && (await revParse(dir, `${headSha}^{commit}`)) === headSha;
    if (!exists) throw new ApiError(422, `No commit found for SHA: ${headSha}`, DOCS.createRun);
    if (state.checkRuns.size >= MAX_CHECK_RUNS) throw new ApiError(403, 'Check run limit of the stand-in reached', DOCS.createRun);
    const nowIso = isoSeconds(Date.now());
    const run = newCheckRun(owner, repo, headSha, nowIso);
    applyFields(run, fields, nowIso, DOCS.createRun);
    const entry = { repo: `${owner}/${repo}`, run, history: [] };
    recordHistory(entry);
    state.checkRuns.set(run.id, entry);
    sendJson(ctx.res, 201, run);
  }

  function requireCheckRun(owner, repo, rawId, doc) {
    requireRepo(owner, repo, doc);
    const entry = /^\d+$/.test(rawId) ? state.checkRuns.get(Number(rawId)) : undefined;
    if (!entry || entry.repo !== `${owner}/${repo}`) throw notFound(doc);
    return entry;
  }

  async function updateCheckRun(ctx, owner, repo, rawId) {
    requirePermission(ctx.token, 'checks', 'write');
    const entry = requireCheckRun(owner, repo, rawId, DOCS.updateRun);
    const fields = checkRunFields(requireObjectBody(ctx), DOCS.updateRun);
    applyFields(entry.run, fields, isoSeconds(Date.now()), DOCS.updateRun);
    recordHistory(entry);
    sendJson(ctx.res, 200, entry.run);
  }

  async function getCheckRun(ctx, owner, repo, rawId) {
    requirePermission(ctx.token, 'checks', 'read');
    sendJson(ctx.res, 200, requireCheckRun(owner, repo, rawId, DOCS.getRun).run);
  }

  function pageParams(query) {
    const perPage = Math.min(Math.max(Number.parseInt(query.get('per_page') ?? '', 10) || DEFAULT_PER_PAGE, 1), MAX_PER_PAGE);
    const page = Math.max(Number.parseInt(query.get('page') ?? '', 10) || 1, 1);
    return { start: (page - 1) * perPage, end: page * perPage };
  }

  // GitHub's default filter=latest keeps only the most recent run of each name.
  function latestPerName(runs) {
    const latest = new Map();
    for (const run of runs) if (!latest.has(run.name) || latest.get(run.name).id < run.id) latest.set(run.name, run);
    return [...latest.values()];
  }

  async function listCheckRunsForRef(ctx, owner, repo, rawRef) {
    requirePermission(ctx.token, 'checks', 'read');
    const dir = requireRepo(owner, repo, DOCS.listRuns);
    const ref = rawRef.split('/').map(decodeSegment).join('/');
    const sha = await resolveCommit(dir, ref);
    if (!sha) throw new ApiError(422, `No commit found for SHA: ${ref}`, DOCS.listRuns);
    const { query } = ctx;
    let runs = [...state.checkRuns.values()]
      .filter((e) => e.repo === `${owner}/${repo}` && e.run.head_sha === sha)
      .map((e) => e.run);
    if (query.has('check_name')) runs = runs.filter((r) => r.name === query.get('check_name'));
    if (query.has('status')) runs = runs.filter((r) => r.status === query.get('status'));
    if ((query.get('filter') ?? 'latest') === 'latest') runs = latestPerName(runs);
    runs.sort((a, b) => b.id - a.id);
    const { start, end } = pageParams(query);
    sendJson(ctx.res, 200, { total_count: runs.length, check_runs: runs.slice(start, end) });
  }

  // -- handlers: deployments and deployment statuses ---------------------------------------------

  const appRef = () => ({ id: Number(appId), slug: 'sluice', name: 'Sluice' });
  const botCreator = () => ({ login: 'sluice[bot]', type: 'Bot' });

  function optionalBoolean(body, key, doc) {
    if (!(key in body) || body[key] === null) return undefined;
    if (typeof body[key] !== 'boolean') throw invalidRequest(`For 'properties/${key}', ${JSON.stringify(body[key])} is not a boolean.`, doc);
    return body[key];
  }

  function validationFailed(doc, resource, field, code = 'invalid', message = undefined) {
    const error = { resource, field, code };
    if (message) error.message = message;
    return new ApiError(422, 'Validation Failed', doc, { errors: [error] });
  }

  // The fields of a create-deployment body, validated as GitHub types them.
  function deploymentFields(body) {
    const doc = DOCS.createDeployment;
    if (body.ref === undefined || body.ref === null) throw invalidRequest('"ref" wasn\'t supplied.', doc);
    for (const key of ['ref', 'task', 'environment', 'description']) optionalString(body, key, doc);
    const payload = body.payload ?? {};
    if (typeof payload !== 'string' && (typeof payload !== 'object' || Array.isArray(payload))) {
      throw invalidRequest(`For 'properties/payload', ${JSON.stringify(payload)} is not an object or a string.`, doc);
    }
    const contexts = body.required_contexts;
    if (contexts !== undefined && (!Array.isArray(contexts) || contexts.some((c) => typeof c !== 'string'))) {
      throw invalidRequest(`For 'properties/required_contexts', ${JSON.stringify(contexts)} is not an array of strings.`, doc);
    }
    const environment = body.environment ?? 'production';
    if (!environment || charCount(environment) > MAX_ENVIRONMENT_CHARS) throw validationFailed(doc, 'Deployment', 'environment');
    const autoMerge = optionalBoolean(body, 'auto_merge', doc) ?? true;
    const transient = optionalBoolean(body, 'transient_environment', doc) ?? false;
    // GitHub's default: production only for an environment named `production`.
    const production = optionalBoolean(body, 'production_environment', doc) ?? environment === 'production';
    return { ref: body.ref, task: body.task ?? 'deploy', payload, environment, description: body.description ?? '', contexts, autoMerge, transient, production };
  }

  // GitHub refuses a deployment whose required contexts are not all `success` (409). The
  // stand-in's contexts are its check runs on the commit (latest per name); by default all of them.
  function failingContexts(owner, repo, sha, required) {
    const runs = latestPerName([...state.checkRuns.values()]
      .filter((e) => e.repo === `${owner}/${repo}` && e.run.head_sha === sha)
      .map((e) => e.run));
    const stateOf = (name) => {
      const run = runs.find((r) => r.name === name);
      if (!run) return 'missing';
      return run.status === 'completed' ? run.conclusion : 'pending';
    };
    const names = required ?? runs.map((r) => r.name);
    return names.map((context) => ({ context, state: stateOf(context) })).filter((c) => c.state !== 'success');
  }

  async function createDeployment(ctx, owner, repo) {
    requirePermission(ctx.token, 'deployments', 'write');
    const dir = requireRepo(owner, repo, DOCS.createDeployment);
    const fields = deploymentFields(requireObjectBody(ctx));
    const sha = await resolveCommit(dir, fields.ref);
    if (!sha) throw new ApiError(422, `No ref found for: ${fields.ref}`, DOCS.createDeployment);
    const base = await defaultBranch(dir);
    const baseSha = await resolveCommit(dir, base);
    const behind = baseSha && (await tryGit(dir, ['merge-base', '--is-ancestor', baseSha, sha])) === null;
    if (fields.autoMerge && behind) {
      // GitHub merges the default branch into the ref and answers 202 without a deployment; the
      // stand-in does not write the merge, it only answers as GitHub does.
      sendJson(ctx.res, 202, { message: `Auto-merged ${base} into ${fields.ref} on deployment.` });
      return;
    }
    const failing = failingContexts(owner, repo, sha, fields.contexts);
    if (failing.length > 0) {
      throw new ApiError(409, `Conflict: Commit status checks failed for ${fields.ref}.`, DOCS.createDeployment, {
        errors: [{ contexts: failing, resource: 'Deployment', field: 'required_contexts', code: 'invalid' }],
      });
    }
    if (state.deployments.size >= MAX_DEPLOYMENTS) throw new ApiError(403, 'Deployment limit of the stand-in reached', DOCS.createDeployment);
    const id = state.nextDeploymentId++;
    const nowIso = isoSeconds(Date.now());
    const { api } = repoUrls(owner, repo);
    const deployment = {
      url: `${api}/deployments/${id}`,
      id,
      node_id: `DE_${Buffer.from(String(id)).toString('base64url')}`,
      sha,
      ref: fields.ref,
      task: fields.task,
      payload: fields.payload,
      original_environment: fields.environment,
      environment: fields.environment,
      description: fields.description,
      creator: botCreator(),
      created_at: nowIso,
      updated_at: nowIso,
      statuses_url: `${api}/deployments/${id}/statuses`,
      repository_url: api,
      transient_environment: fields.transient,
      production_environment: fields.production,
      performed_via_github_app: appRef(),
    };
    state.deployments.set(id, { repo: `${owner}/${repo}`, deployment, statuses: [] });
    sendJson(ctx.res, 201, deployment);
  }

  function listDeployments(ctx, owner, repo) {
    requirePermission(ctx.token, 'deployments', 'read');
    requireRepo(owner, repo, DOCS.listDeployments);
    const { query } = ctx;
    const filters = ['sha', 'ref', 'task', 'environment'].filter((k) => query.has(k));
    const list = [...state.deployments.values()]
      .filter((e) => e.repo === `${owner}/${repo}` && filters.every((k) => e.deployment[k] === query.get(k)))
      .map((e) => e.deployment)
      .sort((a, b) => b.id - a.id);
    const { start, end } = pageParams(query);
    sendJson(ctx.res, 200, list.slice(start, end));
  }

  function requireDeployment(owner, repo, rawId, doc) {
    requireRepo(owner, repo, doc);
    const entry = /^\d+$/.test(rawId) ? state.deployments.get(Number(rawId)) : undefined;
    if (!entry || entry.repo !== `${owner}/${repo}`) throw notFound(doc);
    return entry;
  }

  function getDeployment(ctx, owner, repo, rawId) {
    requirePermission(ctx.token, 'deployments', 'read');
    sendJson(ctx.res, 200, requireDeployment(owner, repo, rawId, DOCS.getDeployment).deployment);
  }

  function newStatus(entry, fields, nowIso) {
    const id = state.nextDeploymentStatusId++;
    const { deployment } = entry;
    return {
      url: `${deployment.url}/statuses/${id}`,
      id,
      node_id: `DES_${Buffer.from(String(id)).toString('base64url')}`,
      state: fields.state,
      creator: botCreator(),
      description: fields.description,
      environment: deployment.environment,
      target_url: fields.logUrl,
      log_url: fields.logUrl,
      environment_url: fields.environmentUrl,
      created_at: nowIso,
      updated_at: nowIso,
      deployment_url: deployment.url,
      repository_url: deployment.repository_url,
      performed_via_github_app: appRef(),
    };
  }

  // The fields of a create-status body; an unknown state or an over-long description is a 422.
  function statusFields(body) {
    const doc = DOCS.createStatus;
    if (body.state === undefined || body.state === null) throw invalidRequest('"state" wasn\'t supplied.', doc);
    if (!DEPLOYMENT_STATES.includes(body.state)) throw validationFailed(doc, 'DeploymentStatus', 'state');
    for (const key of ['description', 'log_url', 'target_url', 'environment_url', 'environment']) optionalString(body, key, doc);
    const description = body.description ?? '';
    if (charCount(description) > MAX_DEPLOYMENT_DESCRIPTION_CHARS) {
      throw validationFailed(doc, 'DeploymentStatus', 'description', 'custom', `description is too long (maximum is ${MAX_DEPLOYMENT_DESCRIPTION_CHARS} characters)`);
    }
    return {
      state: body.state,
      description,
      // Setting log_url sets target_url to the same value; target_url alone is the legacy form.
      logUrl: body.log_url ?? body.target_url ?? '',
      environmentUrl: body.environment_url ?? '',
      environment: body.environment ?? null,
      autoInactive: optionalBoolean(body, 'auto_inactive', doc) ?? true,
    };
  }

  // GitHub's `auto_inactive` (documented): a `success` adds an `inactive` status to every prior
  // non-transient, non-production deployment of the same repository and environment whose latest
  // state is `success`.
  function autoInactivate(entry, nowIso) {
    const { id, environment } = entry.deployment;
    for (const other of state.deployments.values()) {
      const d = other.deployment;
      const prior = other.repo === entry.repo && d.id < id && d.environment === environment;
      const latest = other.statuses.at(-1);
      if (prior && !d.transient_environment && !d.production_environment && latest?.state === 'success') {
        const inactive = newStatus(other, { state: 'inactive', description: '', logUrl: '', environmentUrl: '' }, nowIso);
        other.statuses.push({ ...inactive, auto_inactive: true });
        d.updated_at = nowIso;
      }
    }
  }

  function createDeploymentStatus(ctx, owner, repo, rawId) {
    requirePermission(ctx.token, 'deployments', 'write');
    const entry = requireDeployment(owner, repo, rawId, DOCS.createStatus);
    const fields = statusFields(requireObjectBody(ctx));
    const nowIso = isoSeconds(Date.now());
    if (fields.environment) entry.deployment.environment = fields.environment;
    const status = newStatus(entry, fields, nowIso);
    entry.statuses.push(status);
    entry.deployment.updated_at = nowIso;
    if (fields.state === 'success' && fields.autoInactive) autoInactivate(entry, nowIso);
    sendJson(ctx.res, 201, status);
  }

  function listDeploymentStatuses(ctx, owner, repo, rawId) {
    requirePermission(ctx.token, 'deployments', 'read');
    const entry = requireDeployment(owner, repo, rawId, DOCS.listStatuses);
    const newestFirst = entry.statuses.map(({ auto_inactive: _, ...s }) => s).reverse();
    const { start, end } = pageParams(ctx.query);
    sendJson(ctx.res, 200, newestFirst.slice(start, end));
  }

  // -- handlers: pull requests and collaborators -------------------------------------------------

  // GET /repos/{o}/{r}/pulls/{n}: the pull requests the test registered (`_standin/.../pulls/{n}`).
  function getPull(ctx, owner, repo, rawNumber) {
    requirePermission(ctx.token, 'pull_requests', 'read');
    const dir = requireRepo(owner, repo, DOCS.pull);
    const pull = state.pulls.get(`${owner}/${repo}#${rawNumber}`);
    if (!pull) throw notFound(DOCS.pull);
    return pullObject(dir, owner, repo, Number(rawNumber), pull).then((p) => sendJson(ctx.res, 200, p));
  }

  // A pull request in GitHub's shape; the head sha of one the stand-in opened is its branch's.
  async function pullObject(dir, owner, repo, number, pull) {
    const urls = repoUrls(owner, repo);
    const headSha = pull.head_sha ?? (await revParse(dir, `refs/heads/${pull.head_ref}^{commit}`));
    return {
      url: `${urls.api}/pulls/${number}`,
      html_url: `${urls.html}/pull/${number}`,
      number,
      state: pull.state ?? 'open',
      title: pull.title ?? `Pull request #${number}`,
      body: pull.body ?? null,
      user: { login: pull.user ?? owner, type: 'User' },
      labels: (pull.labels ?? []).map((name) => ({ name })),
      merged: Boolean(pull.merged),
      merged_at: pull.merged ? (pull.merged_at ?? isoSeconds(Date.now())) : null,
      closed_at: (pull.state ?? 'open') === 'closed' ? (pull.closed_at ?? pull.merged_at ?? null) : null,
      head: { ref: pull.head_ref, sha: headSha, repo: { full_name: pull.head_repo ?? `${owner}/${repo}` } },
      base: { ref: pull.base_ref ?? 'main', repo: { full_name: `${owner}/${repo}` } },
      author_association: pull.author_association ?? 'OWNER',
    };
  }

  // GET /repos/{o}/{r}/pulls?head=owner:branch&state=open|closed|all
  async function listPulls(ctx, owner, repo) {
    requirePermission(ctx.token, 'pull_requests', 'read');
    const dir = requireRepo(owner, repo, DOCS.listPulls);
    const want = ctx.query.get('state') ?? 'open';
    if (!['open', 'closed', 'all'].includes(want)) throw invalidRequest('state must be open, closed or all.', DOCS.listPulls);
    const head = ctx.query.get('head');
    const out = [];
    for (const [key, pull] of state.pulls) {
      const [repoKey, number] = key.split('#');
      if (repoKey !== `${owner}/${repo}`) continue;
      if (want !== 'all' && (pull.state ?? 'open') !== want) continue;
      if (head && head !== `${(pull.head_repo ?? repoKey).split('/')[0]}:${pull.head_ref}`) continue;
      out.push(await pullObject(dir, owner, repo, Number(number), pull));
    }
    out.sort((a, b) => b.number - a.number);
    const { start, end } = pageParams(ctx.query);
    sendJson(ctx.res, 200, out.slice(start, end));
  }

  // POST /repos/{o}/{r}/pulls {title, head, base, body}: 422 when the head branch is missing or
  // an open pull request from it exists, as GitHub answers.
  async function createPull(ctx, owner, repo) {
    requirePermission(ctx.token, 'pull_requests', 'write');
    const dir = requireRepo(owner, repo, DOCS.createPull);
    const body = requireObjectBody(ctx);
    for (const key of ['title', 'head', 'base']) {
      if (typeof body[key] !== 'string' || !body[key]) throw invalidRequest(`"${key}" wasn't supplied.`, DOCS.createPull);
    }
    optionalString(body, 'body', DOCS.createPull);
    const head = body.head.includes(':') ? body.head.split(':')[1] : body.head;
    const headSha = REF_RE.test(head) ? await revParse(dir, `refs/heads/${head}^{commit}`) : null;
    const baseSha = REF_RE.test(body.base) ? await revParse(dir, `refs/heads/${body.base}^{commit}`) : null;
    if (!headSha || !baseSha) {
      throw new ApiError(422, 'Validation Failed', DOCS.createPull, { errors: [{ resource: 'PullRequest', field: headSha ? 'base' : 'head', code: 'invalid' }] });
    }
    for (const [key, p] of state.pulls) {
      if (key.startsWith(`${owner}/${repo}#`) && p.head_ref === head && (p.state ?? 'open') === 'open') {
        throw new ApiError(422, 'Validation Failed', DOCS.createPull, { errors: [{ resource: 'PullRequest', code: 'custom', message: `A pull request already exists for ${owner}:${head}.` }] });
      }
    }
    const number = state.nextPullNumber++;
    const pull = { head_ref: head, base_ref: body.base, title: body.title, body: body.body ?? null, state: 'open', merged: false, user: 'sluice[bot]', labels: [] };
    state.pulls.set(`${owner}/${repo}#${number}`, pull);
    sendJson(ctx.res, 201, await pullObject(dir, owner, repo, number, pull));
  }

  // PATCH /repos/{o}/{r}/pulls/{n} {title, body, state}: a merged pull request cannot reopen.
  async function updatePull(ctx, owner, repo, rawNumber) {
    requirePermission(ctx.token, 'pull_requests', 'write');
    const dir = requireRepo(owner, repo, DOCS.updatePull);
    const pull = state.pulls.get(`${owner}/${repo}#${rawNumber}`);
    if (!pull) throw notFound(DOCS.updatePull);
    const body = requireObjectBody(ctx);
    optionalString(body, 'title', DOCS.updatePull);
    optionalString(body, 'body', DOCS.updatePull);
    optionalEnum(body, 'state', ['open', 'closed'], DOCS.updatePull);
    if (body.state === 'open' && pull.merged) throw invalidRequest('A merged pull request cannot be reopened.', DOCS.updatePull);
    if (body.state === 'closed' && (pull.state ?? 'open') !== 'closed') pull.closed_at = isoSeconds(Date.now());
    for (const key of ['title', 'body', 'state']) if (typeof body[key] === 'string') pull[key] = body[key];
    sendJson(ctx.res, 200, await pullObject(dir, owner, repo, Number(rawNumber), pull));
  }

  // GET /repos/{o}/{r}/tags: newest first (by the tagged commit's time), each with its commit.
  async function listTags(ctx, owner, repo) {
    requirePermission(ctx.token, 'contents', 'read');
    const dir = requireRepo(owner, repo, DOCS.tags);
    const out = await readGit(dir, ['for-each-ref', '--sort=-creatordate', '--format=%(refname:short)%00%(objectname)%00%(*objectname)', 'refs/tags']);
    const urls = repoUrls(owner, repo);
    const tags = out.toString('utf8').split('\n').filter(Boolean).map((line) => {
      const [name, object, peeled] = line.split('\0');
      const sha = peeled || object;
      return { name, commit: { sha, url: `${urls.api}/commits/${sha}` }, zipball_url: `${urls.api}/zipball/refs/tags/${name}`, tarball_url: `${urls.api}/tarball/refs/tags/${name}`, node_id: `REF_${Buffer.from(name).toString('base64url')}` };
    });
    const { start, end } = pageParams(ctx.query);
    sendJson(ctx.res, 200, tags.slice(start, end));
  }

  // POST /repos/{o}/{r}/git/refs {ref, sha}: 422 when it exists or the sha is no object.
  async function createRef(ctx, owner, repo) {
    requirePermission(ctx.token, 'contents', 'write');
    const dir = requireRepo(owner, repo, DOCS.createRef);
    const body = requireObjectBody(ctx);
    const name = typeof body.ref === 'string' ? body.ref.replace(/^refs\//, '') : '';
    if (!/^(heads|tags)\//.test(name) || !REF_RE.test(name) || !SHA_RE.test(body.sha ?? '')) {
      throw invalidRequest('Reference name is invalid or sha is not a full commit id.', DOCS.createRef);
    }
    if (!(await revParse(dir, `${body.sha}^{commit}`))) throw new ApiError(422, 'Object does not exist', DOCS.createRef);
    if (await revParse(dir, `refs/${name}`)) throw new ApiError(422, 'Reference already exists', DOCS.createRef);
    await readGit(dir, ['update-ref', `refs/${name}`, body.sha, '0'.repeat(40)]);
    const urls = repoUrls(owner, repo);
    sendJson(ctx.res, 201, { ref: `refs/${name}`, url: `${urls.api}/git/refs/${name}`, object: { sha: body.sha, type: 'commit' } });
  }

  // PUT /repos/{o}/{r}/contents/{path} {message, content, branch, sha}: a commit on the branch.
  // Updating an existing file needs its blob sha (422 without, 409 on a stale one), as on GitHub.
  async function putContents(ctx, owner, repo, rawPath) {
    requirePermission(ctx.token, 'contents', 'write');
    const dir = requireRepo(owner, repo, DOCS.putContents);
    const path = contentPath(rawPath);
    const body = requireObjectBody(ctx);
    for (const key of ['message', 'content']) {
      if (typeof body[key] !== 'string') throw invalidRequest(`"${key}" wasn't supplied.`, DOCS.putContents);
    }
    const branch = body.branch ?? (await defaultBranch(dir));
    const head = REF_RE.test(branch) ? await revParse(dir, `refs/heads/${branch}^{commit}`) : null;
    if (!head || !path) throw new ApiError(404, `Branch ${branch} not found`, DOCS.putContents);
    const [entry] = parseLsTree(await readGit(dir, ['ls-tree', '-z', '-l', head, '--', path]));
    const existing = entry && entry.path === path ? entry.sha : null;
    if (existing && !body.sha) throw invalidRequest('"sha" wasn\'t supplied.', DOCS.putContents);
    if ((body.sha ?? null) !== existing) throw new ApiError(409, `${path} does not match ${body.sha}`, DOCS.putContents);
    const content = Buffer.from(body.content, 'base64');
    const sha = commitFiles(root, owner, repo, { branch, files: { [path]: content }, message: body.message });
    const [written] = parseLsTree(await readGit(dir, ['ls-tree', '-z', '-l', sha, '--', path]));
    sendJson(ctx.res, existing ? 200 : 201, { content: { name: path.split('/').pop(), path, sha: written.sha, size: written.size }, commit: { sha, message: body.message } });
  }

  // GET and POST /repos/{o}/{r}/issues/{n}/comments (a pull request is an issue).
  function listComments(ctx, owner, repo, rawNumber) {
    requirePermission(ctx.token, 'pull_requests', 'read');
    requireRepo(owner, repo, DOCS.comments);
    if (!state.pulls.has(`${owner}/${repo}#${rawNumber}`)) throw notFound(DOCS.comments);
    const { start, end } = pageParams(ctx.query);
    sendJson(ctx.res, 200, (state.comments.get(`${owner}/${repo}#${rawNumber}`) ?? []).slice(start, end));
  }

  function createComment(ctx, owner, repo, rawNumber) {
    requirePermission(ctx.token, 'pull_requests', 'write');
    requireRepo(owner, repo, DOCS.comments);
    const key = `${owner}/${repo}#${rawNumber}`;
    if (!state.pulls.has(key)) throw notFound(DOCS.comments);
    const body = requireObjectBody(ctx);
    if (typeof body.body !== 'string' || !body.body) throw invalidRequest('"body" wasn\'t supplied.', DOCS.comments);
    const total = [...state.comments.values()].reduce((n, list) => n + list.length, 0);
    if (total >= MAX_COMMENTS) throw new ApiError(403, 'Comment limit of the stand-in reached', DOCS.comments);
    const comment = { id: state.nextCommentId++, body: body.body, user: { login: 'sluice[bot]', type: 'Bot' }, created_at: isoSeconds(Date.now()) };
    state.comments.set(key, [...(state.comments.get(key) ?? []), comment]);
    sendJson(ctx.res, 201, comment);
  }

  // GET /repos/{o}/{r}/releases/tags/{tag} and POST /repos/{o}/{r}/releases: one release per tag
  // (422 already_exists for a second); a missing tag is made at `target_commitish`.
  function getReleaseByTag(ctx, owner, repo, rawTag) {
    requirePermission(ctx.token, 'contents', 'read');
    requireRepo(owner, repo, DOCS.releaseByTag);
    const release = state.releases.get(`${owner}/${repo}@${decodeSegment(rawTag)}`);
    if (!release) throw notFound(DOCS.releaseByTag);
    sendJson(ctx.res, 200, release);
  }

  async function createRelease(ctx, owner, repo) {
    requirePermission(ctx.token, 'contents', 'write');
    const dir = requireRepo(owner, repo, DOCS.createRelease);
    const body = requireObjectBody(ctx);
    if (typeof body.tag_name !== 'string' || !REF_RE.test(body.tag_name)) throw invalidRequest('"tag_name" wasn\'t supplied.', DOCS.createRelease);
    optionalString(body, 'name', DOCS.createRelease);
    optionalString(body, 'body', DOCS.createRelease);
    if (body.prerelease !== undefined && typeof body.prerelease !== 'boolean') throw invalidRequest('"prerelease" is not a boolean.', DOCS.createRelease);
    // make_latest: "true" (the default for a published release), "false" or "legacy" (newest by
    // creation date, which for a release made now is this one).
    if (body.make_latest !== undefined && !['true', 'false', 'legacy'].includes(body.make_latest)) {
      throw new ApiError(422, 'Validation Failed', DOCS.createRelease, { errors: [{ resource: 'Release', code: 'invalid', field: 'make_latest' }] });
    }
    const key = `${owner}/${repo}@${body.tag_name}`;
    if (state.releases.has(key)) {
      throw new ApiError(422, 'Validation Failed', DOCS.createRelease, { errors: [{ resource: 'Release', code: 'already_exists', field: 'tag_name' }] });
    }
    optionalString(body, 'target_commitish', DOCS.createRelease);
    const target = body.target_commitish ?? (await defaultBranch(dir));
    if (state.releases.size >= MAX_RELEASES) throw new ApiError(403, 'Release limit of the stand-in reached', DOCS.createRelease);
    // A missing tag is made at `target_commitish` (the default branch without one); an existing
    // tag is used as it is, whatever `target_commitish` says.
    if (!(await revParse(dir, `refs/tags/${body.tag_name}`))) {
      const commit = await resolveCommit(dir, target);
      if (!commit) throw new ApiError(422, 'Validation Failed', DOCS.createRelease, { errors: [{ resource: 'Release', code: 'invalid', field: 'target_commitish' }] });
      await readGit(dir, ['update-ref', `refs/tags/${body.tag_name}`, commit, '0'.repeat(40)]);
    }
    const urls = repoUrls(owner, repo);
    const id = state.nextReleaseId++;
    const release = { id, url: `${urls.api}/releases/${id}`, html_url: `${urls.html}/releases/tag/${body.tag_name}`, tag_name: body.tag_name, target_commitish: target, name: body.name ?? body.tag_name, body: body.body ?? null, draft: false, prerelease: body.prerelease === true, created_at: isoSeconds(Date.now()), author: { login: 'sluice[bot]', type: 'Bot' } };
    state.releases.set(key, release);
    // Drafts and pre-releases never become Latest, as GitHub documents.
    if (body.make_latest !== 'false' && !release.prerelease) state.latestReleases.set(`${owner}/${repo}`, body.tag_name);
    sendJson(ctx.res, 201, release);
  }

  // GET /repos/{o}/{r}/releases/latest: the release marked Latest (404 when none is).
  function getLatestRelease(ctx, owner, repo) {
    requirePermission(ctx.token, 'contents', 'read');
    requireRepo(owner, repo, DOCS.latestRelease);
    const tag = state.latestReleases.get(`${owner}/${repo}`);
    const release = tag && state.releases.get(`${owner}/${repo}@${tag}`);
    if (!release) throw notFound(DOCS.latestRelease);
    sendJson(ctx.res, 200, release);
  }

  // GET /repos/{o}/{r}/collaborators/{u}/permission: the owner is admin; others as registered,
  // else "read" (anyone may read a public repository), as GitHub answers.
  function getPermission(ctx, owner, repo, rawUser) {
    requirePermission(ctx.token, 'metadata', 'read');
    requireRepo(owner, repo, DOCS.permission);
    const user = decodeSegment(rawUser);
    const permission = user === owner ? 'admin' : (state.permissions.get(`${owner}/${repo}:${user}`) ?? 'read');
    sendJson(ctx.res, 200, { permission, role_name: permission, user: { login: user, type: 'User' } });
  }

  // -- handlers: stand-in control ----------------------------------------------------------------

  function controlPull(ctx, owner, repo, rawNumber) {
    const body = requireObjectBody(ctx);
    if (!/^\d+$/.test(rawNumber) || !SHA_RE.test(body.head_sha ?? '')) throw invalidRequest('Expected {head_sha}.', DOCS.root);
    state.pulls.set(`${owner}/${repo}#${rawNumber}`, {
      head_sha: body.head_sha, head_ref: body.head_ref ?? 'feature', head_repo: body.head_repo ?? `${owner}/${repo}`,
      author_association: body.author_association ?? 'OWNER',
      // What a merged pull request's notes read: its title, author, labels and state.
      title: body.title, user: body.user, labels: Array.isArray(body.labels) ? body.labels : [],
      state: body.merged ? 'closed' : 'open', merged: Boolean(body.merged),
    });
    sendJson(ctx.res, 201, { ok: true });
  }

  // POST /_standin/repos/{o}/{r}/pulls/{n}/close {merged}: a person merges (fast-forwarding the
  // base branch when it can) or closes a pull request on GitHub.
  async function controlClosePull(ctx, owner, repo, rawNumber) {
    const pull = state.pulls.get(`${owner}/${repo}#${rawNumber}`);
    if (!pull) throw notFound();
    const { merged = false } = requireObjectBody(ctx);
    if (merged && !pull.merged) {
      const dir = requireRepo(owner, repo, DOCS.root);
      const head = await revParse(dir, `refs/heads/${pull.head_ref}^{commit}`);
      const base = await revParse(dir, `refs/heads/${pull.base_ref ?? 'main'}^{commit}`);
      if (head && base && (await tryGit(dir, ['merge-base', '--is-ancestor', base, head])) !== null) {
        await readGit(dir, ['update-ref', `refs/heads/${pull.base_ref ?? 'main'}`, head, base]);
      }
      pull.merged = true;
      pull.merged_at = isoSeconds(Date.now());
    }
    if ((pull.state ?? 'open') !== 'closed') pull.closed_at = pull.merged_at ?? isoSeconds(Date.now());
    pull.state = 'closed';
    sendJson(ctx.res, 200, { ok: true });
  }

  function controlPulls(ctx) {
    const repo = ctx.query.get('repo');
    const pulls = [...state.pulls.entries()]
      .filter(([key]) => !repo || key.startsWith(`${repo}#`))
      .map(([key, p]) => ({ ...p, repository: key.split('#')[0], number: Number(key.split('#')[1]), comments: state.comments.get(key) ?? [] }));
    sendJson(ctx.res, 200, { pulls });
  }

  function controlReleases(ctx) {
    const repo = ctx.query.get('repo');
    const releases = [...state.releases.entries()].filter(([key]) => !repo || key.startsWith(`${repo}@`)).map(([key, r]) => ({ ...r, repository: key.split('@')[0] }));
    sendJson(ctx.res, 200, { releases });
  }

  function controlPermission(ctx, owner, repo, rawUser) {
    const { permission } = requireObjectBody(ctx);
    if (!['admin', 'write', 'read', 'none'].includes(permission)) throw invalidRequest('Expected {permission}.', DOCS.root);
    state.permissions.set(`${owner}/${repo}:${decodeSegment(rawUser)}`, permission);
    sendJson(ctx.res, 201, { ok: true });
  }

  function controlCalls(ctx) {
    const method = ctx.query.get('method')?.toUpperCase();
    const prefix = ctx.query.get('path_prefix');
    const calls = state.calls.filter((c) => (!method || c.method === method) && (!prefix || c.path.startsWith(prefix)));
    sendJson(ctx.res, 200, { calls });
  }

  function controlCheckRuns(ctx) {
    const repo = ctx.query.get('repo');
    const runs = [...state.checkRuns.values()]
      .filter((e) => !repo || e.repo === repo)
      .map((e) => ({ ...e.run, repository: e.repo, history: e.history }));
    sendJson(ctx.res, 200, { check_runs: runs });
  }

  // Every deployment with its statuses, oldest first (`auto_inactive: true` on those GitHub's rule
  // added, not a request).
  function controlDeployments(ctx) {
    const repo = ctx.query.get('repo');
    const deployments = [...state.deployments.values()]
      .filter((e) => !repo || e.repo === repo)
      .map((e) => ({ ...e.deployment, repository: e.repo, statuses: e.statuses }));
    sendJson(ctx.res, 200, { deployments });
  }

  function controlCommit(ctx, owner, repo) {
    if (!isValidName(owner) || !isValidName(repo)) throw notFound();
    const { branch = 'main', files = {}, message = 'Update files', removeOthers = false } = requireObjectBody(ctx);
    const filesOk = files && typeof files === 'object' && !Array.isArray(files)
      && Object.values(files).every((v) => typeof v === 'string' || v === null);
    if (!filesOk || typeof branch !== 'string' || !REF_RE.test(branch) || typeof message !== 'string') {
      throw invalidRequest('Expected {branch: string, files: {path: string|null}, message: string, removeOthers: boolean}.', DOCS.root);
    }
    let sha;
    try {
      sha = commitFiles(root, owner, repo, { branch, files, message, removeOthers: Boolean(removeOthers) });
    } catch (err) {
      throw invalidRequest(String(err.message).split('\n')[0], DOCS.root);
    }
    sendJson(ctx.res, 201, { sha });
  }

  // -- GitHub Actions' OIDC issuer (oidc.mjs) ----------------------------------------------------

  function oidcBody(ctx) {
    const body = ctx.body ?? {};
    const { claims = {}, audience, key = 'issuer', kid } = body;
    const ok = body && typeof body === 'object' && !Array.isArray(body)
      && claims && typeof claims === 'object' && !Array.isArray(claims)
      && (audience === undefined || typeof audience === 'string')
      && ['issuer', 'stranger'].includes(key) && (kid === undefined || typeof kid === 'string');
    if (!ok) throw invalidRequest('Expected {claims: object, audience: string, key: "issuer"|"stranger", kid: string}.', DOCS.root);
    return { claims, audience, key, kid };
  }

  // POST /_standin/oidc/tokens {claims, audience, key, kid}: a token with chosen claims (a test hook).
  function controlOidcToken(ctx) {
    sendJson(ctx.res, 201, { value: oidc.mint(oidcBody(ctx)) });
  }

  // POST /_standin/oidc/jobs {claims}: a workflow job; its ACTIONS_ID_TOKEN_REQUEST_URL and _TOKEN.
  function controlOidcJob(ctx) {
    const { claims } = oidcBody(ctx);
    const requestToken = oidc.registerJob(claims);
    sendJson(ctx.res, 201, { request_url: `${state.baseUrl}${OIDC_PREFIX}/idtoken?api-version=2.0`, request_token: requestToken });
  }

  // GET /_standin/oidc/idtoken?api-version=2.0&audience=A (bearer: the job's request token): what
  // the runner's endpoint answers a job granted `id-token: write`.
  function oidcIdToken(ctx) {
    const requestToken = ctx.auth.scheme === 'Bearer' ? ctx.auth.credential : null;
    const value = oidc.tokenForJob(requestToken, ctx.query.get('audience'));
    if (!value) throw new ApiError(401, 'Bad credentials', DOCS.root);
    sendJson(ctx.res, 200, { value });
  }

  // POST /_standin/latency {path_prefix, delay_ms, count, when: 'before'|'after'} (a test hook).
  function controlLatency(ctx) {
    const body = requireObjectBody(ctx);
    const ok = typeof body.path_prefix === 'string' && Number.isInteger(body.delay_ms) && body.delay_ms >= 0
      && body.delay_ms <= LATENCY_MS_MAX && Number.isInteger(body.count) && body.count > 0
      && ['before', 'after'].includes(body.when ?? 'before');
    if (!ok) throw invalidRequest(`Expected {path_prefix, delay_ms (0..${LATENCY_MS_MAX}), count (> 0), when: before|after}.`, DOCS.root);
    state.latency.push({ prefix: body.path_prefix, delayMs: body.delay_ms, left: body.count, when: body.when ?? 'before' });
    sendJson(ctx.res, 201, { ok: true });
  }

  // The latency rule the request takes, if any (each rule serves `count` requests).
  function takeLatency(path) {
    const rule = state.latency.find((r) => r.left > 0 && path.startsWith(r.prefix));
    if (rule) rule.left -= 1;
    return rule ?? null;
  }

  function controlReset(ctx) {
    state.latency.length = 0;
    state.calls.length = 0;
    state.checkRuns.clear();
    state.checkSuites.clear();
    state.deployments.clear();
    state.pulls.clear();
    state.permissions.clear();
    state.comments.clear();
    state.releases.clear();
    state.latestReleases.clear();
    oidc.reset();
    sendJson(ctx.res, 200, { ok: true });
  }

  // -- routing -----------------------------------------------------------------------------------

  const R = '([^/]+)';
  const routes = [
    { method: 'GET', re: /^\/_standin\/healthz$/, handler: (ctx) => sendJson(ctx.res, 200, { ok: true }) },
    { method: 'GET', re: /^\/_standin\/calls$/, handler: controlCalls },
    { method: 'GET', re: /^\/_standin\/check-runs$/, handler: controlCheckRuns },
    { method: 'GET', re: /^\/_standin\/deployments$/, handler: controlDeployments },
    { method: 'POST', re: new RegExp(`^/_standin/repos/${R}/${R}/commits$`), handler: controlCommit },
    { method: 'POST', re: /^\/_standin\/reset$/, handler: controlReset },
    { method: 'POST', re: /^\/_standin\/latency$/, handler: controlLatency },
    { method: 'POST', re: new RegExp(`^/_standin/repos/${R}/${R}/pulls/${R}$`), handler: controlPull },
    { method: 'POST', re: new RegExp(`^/_standin/repos/${R}/${R}/collaborators/${R}$`), handler: controlPermission },
    { method: 'POST', re: new RegExp(`^/_standin/repos/${R}/${R}/pulls/${R}/close$`), handler: controlClosePull },
    { method: 'GET', re: /^\/_standin\/pulls$/, handler: controlPulls },
    { method: 'GET', re: /^\/_standin\/releases$/, handler: controlReleases },
    { method: 'GET', re: /^\/_standin\/oidc\/\.well-known\/openid-configuration$/, handler: (ctx) => sendJson(ctx.res, 200, oidc.discovery()) },
    { method: 'GET', re: /^\/_standin\/oidc\/\.well-known\/jwks$/, handler: (ctx) => sendJson(ctx.res, 200, oidc.jwks()) },
    { method: 'POST', re: /^\/_standin\/oidc\/tokens$/, handler: controlOidcToken },
    { method: 'POST', re: /^\/_standin\/oidc\/jobs$/, handler: controlOidcJob },
    { method: 'GET', re: /^\/_standin\/oidc\/idtoken$/, handler: oidcIdToken },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/pulls$`), handler: listPulls, auth: true },
    { method: 'POST', re: new RegExp(`^/repos/${R}/${R}/pulls$`), handler: createPull, auth: true },
    { method: 'PATCH', re: new RegExp(`^/repos/${R}/${R}/pulls/${R}$`), handler: updatePull, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/tags$`), handler: listTags, auth: true },
    { method: 'POST', re: new RegExp(`^/repos/${R}/${R}/git/refs$`), handler: createRef, auth: true },
    { method: 'PUT', re: new RegExp(`^/repos/${R}/${R}/contents/(.+)$`), handler: putContents, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/issues/${R}/comments$`), handler: listComments, auth: true },
    { method: 'POST', re: new RegExp(`^/repos/${R}/${R}/issues/${R}/comments$`), handler: createComment, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/releases/tags/${R}$`), handler: getReleaseByTag, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/releases/latest$`), handler: getLatestRelease, auth: true },
    { method: 'POST', re: new RegExp(`^/repos/${R}/${R}/releases$`), handler: createRelease, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/pulls/${R}$`), handler: getPull, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/collaborators/${R}/permission$`), handler: getPermission, auth: true },
    { method: 'POST', re: new RegExp(`^/app/installations/${R}/access_tokens$`), handler: createAccessToken },
    { method: 'DELETE', re: /^\/installation\/token$/, handler: revokeToken, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/installation$`), handler: getRepoInstallation },
    { method: 'GET', re: /^\/app$/, handler: getApp },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}$`), handler: getRepo, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/contents(?:/(.*))?$`), handler: getContents, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/git/ref/(.+)$`), handler: getRef, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/git/tags/${R}$`), handler: getTag, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/compare/([^/]+)$`), handler: compareCommits, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/branches/(.+)$`), handler: getBranch, auth: true },
    { method: 'POST', re: new RegExp(`^/repos/${R}/${R}/check-runs$`), handler: createCheckRun, auth: true },
    { method: 'PATCH', re: new RegExp(`^/repos/${R}/${R}/check-runs/${R}$`), handler: updateCheckRun, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/check-runs/${R}$`), handler: getCheckRun, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/commits/(.+)/check-runs$`), handler: listCheckRunsForRef, auth: true },
    { method: 'POST', re: new RegExp(`^/repos/${R}/${R}/deployments$`), handler: createDeployment, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/deployments$`), handler: listDeployments, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/deployments/${R}$`), handler: getDeployment, auth: true },
    { method: 'POST', re: new RegExp(`^/repos/${R}/${R}/deployments/${R}/statuses$`), handler: createDeploymentStatus, auth: true },
    { method: 'GET', re: new RegExp(`^/repos/${R}/${R}/deployments/${R}/statuses$`), handler: listDeploymentStatuses, auth: true },
  ];
  // Owner and repo segments are single path segments; later captures (paths, refs) stay raw so
  // their slashes survive and each handler decodes them per segment.
  const DECODED_CAPTURES = 2;
  const GIT_ROUTE = /^\/([^/]+)\/([^/]+?)(?:\.git)?\/(info\/refs|git-upload-pack|git-receive-pack)$/;

  function matchRoute(method, path) {
    for (const route of routes) {
      const match = route.re.exec(path);
      if (!match || route.method !== method) continue;
      const params = match.slice(1).map((p, i) => (p !== undefined && i < DECODED_CAPTURES ? decodeSegment(p) : p));
      return { route, params };
    }
    return null;
  }

  async function handleApi(ctx) {
    const matched = matchRoute(ctx.method, ctx.path);
    if (!matched) throw notFound();
    const raw = await readBody(ctx.req);
    ctx.body = parseJsonBody(raw);
    ctx.call.body = raw.length > 0 ? (ctx.body ?? null) : null;
    if (matched.route.auth) ctx.token = requireInstallationToken(ctx);
    if (ctx.token && ctx.path.startsWith('/repos/')) requireRepoInScope(ctx.token, matched.params[0], matched.params[1]);
    await matched.route.handler(ctx, ...matched.params);
  }

  // -- git smart HTTP ----------------------------------------------------------------------------

  function parseCgiHead(head) {
    const headers = {};
    let status = 200;
    for (const line of head.split(/\r?\n/)) {
      const colon = line.indexOf(':');
      if (colon <= 0) continue;
      const name = line.slice(0, colon).trim();
      const value = line.slice(colon + 1).trim();
      if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10) || 500;
      else headers[name] = value;
    }
    return { status, headers };
  }

  function backendEnv(ctx, pathInfo) {
    const { req } = ctx;
    const env = {
      PATH: process.env.PATH,
      HOME: process.env.HOME ?? root,
      GIT_CONFIG_NOSYSTEM: '1',
      GIT_CONFIG_GLOBAL: '/dev/null',
      GIT_PROJECT_ROOT: root,
      GIT_HTTP_EXPORT_ALL: '1',
      GATEWAY_INTERFACE: 'CGI/1.1',
      SERVER_PROTOCOL: 'HTTP/1.1',
      REQUEST_METHOD: req.method,
      PATH_INFO: pathInfo,
      QUERY_STRING: ctx.rawQuery,
      REMOTE_ADDR: req.socket.remoteAddress ?? '',
      CONTENT_TYPE: req.headers['content-type'] ?? '',
    };
    if (req.headers['content-length'] !== undefined) env.CONTENT_LENGTH = req.headers['content-length'];
    if (req.headers['git-protocol'] !== undefined) env.HTTP_GIT_PROTOCOL = req.headers['git-protocol'];
    // http-backend inflates gzip request bodies itself when told the encoding.
    if (req.headers['content-encoding'] !== undefined) env.HTTP_CONTENT_ENCODING = req.headers['content-encoding'];
    return env;
  }

  // Runs `git http-backend` as a CGI program: request body to stdin, CGI headers parsed from
  // stdout, remaining stdout streamed as the response body.
  function runHttpBackend(ctx, pathInfo) {
    const { req, res } = ctx;
    return new Promise((resolve) => {
      const child = spawn('git', ['http-backend'], { env: backendEnv(ctx, pathInfo), stdio: ['pipe', 'pipe', 'pipe'] });
      children.add(child);
      let stderr = '';
      let head = Buffer.alloc(0);
      let headersDone = false;
      let failed = false;
      const fail = (status, message) => {
        if (failed) return;
        failed = true;
        child.kill('SIGKILL');
        if (res.headersSent) res.destroy();
        else sendJson(res, status, { message, documentation_url: DOCS.root, status: String(status) }, { Connection: 'close' });
      };
      const timer = setTimeout(() => fail(504, 'git http-backend timed out'), GIT_BACKEND_TIMEOUT_MS);

      let received = 0;
      req.on('data', (chunk) => {
        received += chunk.length;
        if (received > MAX_BODY_BYTES) {
          req.unpipe(child.stdin);
          fail(413, 'Payload Too Large');
        }
      });
      req.pipe(child.stdin);
      child.stdin.on('error', () => {}); // EPIPE when the child exits early; reported via exit status.
      child.stderr.on('data', (chunk) => {
        if (stderr.length < MAX_CGI_HEADER_BYTES) stderr += chunk;
      });

      const onHeadData = (chunk) => {
        if (failed) return; // a 413/504 has already been answered
        head = Buffer.concat([head, chunk]);
        const text = head.toString('latin1');
        const end = /\r?\n\r?\n/.exec(text);
        if (!end) {
          if (head.length > MAX_CGI_HEADER_BYTES) fail(502, 'git http-backend sent oversized headers');
          return;
        }
        headersDone = true;
        child.stdout.off('data', onHeadData);
        const { status, headers } = parseCgiHead(text.slice(0, end.index));
        res.writeHead(status, headers);
        res.write(head.subarray(end.index + end[0].length));
        child.stdout.pipe(res);
      };
      child.stdout.on('data', onHeadData);

      res.on('close', () => child.kill('SIGKILL'));
      child.on('close', (code) => {
        clearTimeout(timer);
        children.delete(child);
        if (!headersDone && !res.headersSent) {
          if (log) console.error(`git http-backend exited ${code}: ${stderr.trim()}`);
          sendJson(res, 502, { message: 'git http-backend failed', documentation_url: DOCS.root, status: '502' });
        }
        resolve();
      });
      child.on('error', (err) => {
        clearTimeout(timer);
        children.delete(child);
        if (!res.headersSent) sendJson(res, 500, { message: `cannot run git: ${err.message}`, documentation_url: DOCS.root, status: '500' });
        resolve();
      });
    });
  }

  async function handleGit(ctx, [, rawOwner, rawRepo, endpoint]) {
    const owner = decodeSegment(rawOwner);
    const repo = decodeSegment(rawRepo);
    const token = basicAuthToken(ctx);
    if (!token) throw new ApiError(401, 'Invalid username or token.', DOCS.root, {}, { 'WWW-Authenticate': 'Basic realm="GitHub"' });
    const inScope = !token.repositories || token.repositories.includes(repo);
    if (!repoExists(root, owner, repo) || !inScope || !hasPermission(token, 'contents', 'read')) {
      throw new ApiError(404, 'Repository not found.', DOCS.root);
    }
    const service = endpoint === 'info/refs' ? ctx.query.get('service') : endpoint;
    if (service === 'git-receive-pack') throw new ApiError(403, 'Write access to repository not granted.', DOCS.root);
    const methodOk = endpoint === 'info/refs' ? ctx.method === 'GET' : ctx.method === 'POST';
    if (!methodOk || service !== 'git-upload-pack') throw notFound();
    await runHttpBackend(ctx, `/${owner}/${repo}.git/${endpoint}`);
  }

  // -- request entry point -----------------------------------------------------------------------

  function recordCall(ctx) {
    const call = {
      seq: state.nextCallSeq++,
      method: ctx.method,
      path: ctx.path,
      query: Object.fromEntries(ctx.query),
      status: null,
      write: WRITE_METHODS.has(ctx.method),
      body: null,
      auth_scheme: ctx.auth.scheme,
      at_ms: Date.now(),
    };
    state.calls.push(call);
    if (state.calls.length > MAX_RECORDED_CALLS) state.calls.shift();
    return call;
  }

  async function handle(req, res) {
    // The path is routed exactly as sent (no dot-segment normalisation), so '..' can never be
    // resolved into a different repository or file; handlers reject such segments.
    const target = req.url ?? '/';
    const queryStart = target.indexOf('?');
    const path = queryStart === -1 ? target : target.slice(0, queryStart);
    const rawQuery = queryStart === -1 ? '' : target.slice(queryStart + 1);
    const ctx = {
      req, res, method: req.method, path, rawQuery, query: new URLSearchParams(rawQuery),
      auth: parseAuthorization(req.headers.authorization), body: undefined, token: null,
    };
    // Control endpoints are not recorded: tests read the log through them.
    ctx.call = ctx.path.startsWith('/_standin/') ? {} : recordCall(ctx);
    res.on('close', () => {
      ctx.call.status = res.statusCode;
      if (log) console.error(`${ctx.method} ${req.url} -> ${res.statusCode}`);
    });
    const slow = ctx.path.startsWith('/_standin/') ? null : takeLatency(ctx.path);
    if (slow?.when === 'before') await delay(slow.delayMs);
    if (slow?.when === 'after') holdAnswer(res, slow.delayMs);
    try {
      const git = GIT_ROUTE.exec(ctx.path);
      if (git && !ctx.path.startsWith('/repos/') && !ctx.path.startsWith('/_standin/')) await handleGit(ctx, git);
      else await handleApi(ctx);
    } catch (err) {
      if (err instanceof ApiError) {
        sendJson(res, err.status, err.body, err.headers);
        if (err.headers.Connection === 'close') req.resume();
        return;
      }
      if (log) console.error(err);
      sendJson(res, 500, { message: 'Internal Server Error', documentation_url: DOCS.root, status: '500' });
    }
  }

  // The answer is made now and sent `delayMs` later (headers and body wait for `end`).
  function holdAnswer(res, delayMs) {
    const end = res.end.bind(res);
    res.end = (...args) => {
      setTimeout(() => end(...args), delayMs);
      return res;
    };
  }

  const server = createServer((req, res) => {
    handle(req, res).catch(() => res.destroy());
  });
  await new Promise((resolveListen, rejectListen) => {
    server.once('error', rejectListen);
    // `host` is loopback unless a caller needs it reachable elsewhere on this machine (the
    // container layer listens on the Docker bridge gateway, where containers reach the host).
    server.listen(port, host, resolveListen);
  });
  const actualPort = server.address().port;
  state.baseUrl = `http://${host}:${actualPort}`;

  return {
    url: state.baseUrl,
    port: actualPort,
    state,
    close() {
      for (const child of children) child.kill('SIGKILL');
      server.closeAllConnections();
      return new Promise((resolveClose) => server.close(() => resolveClose()));
    },
  };
}

// ---------------------------------------------------------------------------------------------
// CLI

function parseCli(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      port: { type: 'string', default: '8790' },
      'repos-dir': { type: 'string' },
      'app-id': { type: 'string' },
      'public-key-file': { type: 'string' },
      'installation-id': { type: 'string', multiple: true },
      'token-ttl-seconds': { type: 'string', default: '3600' },
      log: { type: 'boolean', default: false },
    },
  });
  for (const required of ['repos-dir', 'app-id', 'public-key-file']) {
    if (!values[required]) throw new Error(`missing --${required}`);
  }
  return {
    port: Number(values.port),
    reposDir: values['repos-dir'],
    appId: values['app-id'],
    publicKeyPem: readFileSync(values['public-key-file'], 'utf8'),
    installations: (values['installation-id'] ?? ['42']).map(Number),
    tokenTtlSeconds: Number(values['token-ttl-seconds']),
    log: values.log,
  };
}

async function main() {
  let opts;
  try {
    opts = parseCli(process.argv.slice(2));
  } catch (err) {
    console.error(`github-standin: ${err.message}`);
    console.error('usage: node server.mjs --port 8790 --repos-dir DIR --app-id ID --public-key-file FILE [--installation-id 42]... [--token-ttl-seconds N] [--log]');
    process.exit(2);
  }
  const standin = await startStandin(opts);
  console.log(`github-standin listening on ${standin.url}`);
  const stop = () => standin.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolvePath(process.argv[1])).href) {
  await main();
}
