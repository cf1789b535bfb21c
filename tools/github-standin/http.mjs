// The stand-in's HTTP plumbing shared by every resource: GitHub's error shapes and
// documentation links, JSON answers, request bodies, paging, body-field checks, and the
// repository a request names.

import { repoExists, repoPath } from './git.mjs';

// Request bodies are JSON documents or git negotiation; 10 MiB is far above either in tests and
// bounds memory per request.
export const MAX_BODY_BYTES = 10 * 1024 * 1024;

// GitHub pagination defaults for list endpoints.
const DEFAULT_PER_PAGE = 30;
const MAX_PER_PAGE = 100;

// Branch/tag/sha names accepted as a `ref`; excludes git revision syntax (`:`, `^`, `~`, `..`,
// `@{`) so a ref can never be interpreted as anything but a name.
export const REF_RE = /^(?![-/])(?!.*\.\.)(?!.*@\{)[A-Za-z0-9._/+#-]{1,255}$/;
export const SHA_RE = /^[0-9a-f]{40}$/;

export const DOCS = {
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
  updateComment: 'https://docs.github.com/rest/issues/comments#update-an-issue-comment',
  releaseByTag: 'https://docs.github.com/rest/releases/releases#get-a-release-by-tag-name',
  createRelease: 'https://docs.github.com/rest/releases/releases#create-a-release',
  latestRelease: 'https://docs.github.com/rest/releases/releases#get-the-latest-release',
};

export class ApiError extends Error {
  constructor(status, message, documentationUrl = DOCS.root, extra = {}, headers = {}) {
    super(message);
    this.status = status;
    this.body = { message, documentation_url: documentationUrl, ...extra, status: String(status) };
    this.headers = headers;
  }
}

export const notFound = (doc = DOCS.root) => new ApiError(404, 'Not Found', doc);
export const invalidRequest = (detail, doc) => new ApiError(422, `Invalid request.\n\n${detail}`, doc);

export function isoSeconds(ms) {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function sendJson(res, status, body, headers = {}) {
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

export function parseAuthorization(header) {
  const match = /^(\S+)\s+(\S+)\s*$/.exec(header ?? '');
  if (!match) return { scheme: null, credential: null };
  const scheme = { bearer: 'Bearer', token: 'token', basic: 'Basic' }[match[1].toLowerCase()] ?? null;
  return { scheme, credential: scheme ? match[2] : null };
}

function payloadTooLarge() {
  return new ApiError(413, 'Payload Too Large', DOCS.root, {}, { Connection: 'close' });
}

// Reads a request body of at most MAX_BODY_BYTES. Beyond that the 413 is answered with
// "Connection: close" and the rest of the upload is discarded until Node closes the socket.
export function readBody(req) {
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
export function parseJsonBody(raw) {
  if (raw.length === 0) return {};
  try {
    return JSON.parse(raw.toString('utf8'));
  } catch {
    return undefined;
  }
}

export function requireObjectBody(ctx) {
  if (ctx.body === undefined) throw new ApiError(400, 'Problems parsing JSON', DOCS.root);
  if (!ctx.body || typeof ctx.body !== 'object' || Array.isArray(ctx.body)) {
    throw invalidRequest('Invalid input: the request body must be a JSON object.', DOCS.root);
  }
  return ctx.body;
}

export function decodeSegment(segment) {
  try {
    return decodeURIComponent(segment);
  } catch {
    throw notFound();
  }
}

export function pageParams(query) {
  const perPage = Math.min(Math.max(Number.parseInt(query.get('per_page') ?? '', 10) || DEFAULT_PER_PAGE, 1), MAX_PER_PAGE);
  const page = Math.max(Number.parseInt(query.get('page') ?? '', 10) || 1, 1);
  return { start: (page - 1) * perPage, end: page * perPage };
}

export function optionalString(body, key, doc) {
  if (!(key in body) || body[key] === null) return;
  if (typeof body[key] !== 'string') throw invalidRequest(`For 'properties/${key}', ${JSON.stringify(body[key])} is not a string.`, doc);
}

export function optionalEnum(body, key, allowed, doc) {
  if (!(key in body) || body[key] === null) return;
  if (!allowed.includes(body[key])) throw invalidRequest(`For 'properties/${key}', ${JSON.stringify(body[key])} is not a member of enum.`, doc);
}

export function optionalTimestamp(body, key, doc) {
  if (!(key in body) || body[key] === null) return undefined;
  const ms = typeof body[key] === 'string' && /^\d{4}-\d{2}-\d{2}T/.test(body[key]) ? Date.parse(body[key]) : NaN;
  if (Number.isNaN(ms)) throw invalidRequest(`For 'properties/${key}', ${JSON.stringify(body[key])} is not a date-time.`, doc);
  return isoSeconds(ms);
}

export function optionalBoolean(body, key, doc) {
  if (!(key in body) || body[key] === null) return undefined;
  if (typeof body[key] !== 'boolean') throw invalidRequest(`For 'properties/${key}', ${JSON.stringify(body[key])} is not a boolean.`, doc);
  return body[key];
}

export function charCount(text) {
  return [...text].length;
}

export function validationFailed(doc, resource, field, code = 'invalid', message = undefined) {
  const error = { resource, field, code };
  if (message) error.message = message;
  return new ApiError(422, 'Validation Failed', doc, { errors: [error] });
}

export function repoUrls(s, owner, repo) {
  const { state } = s;
  return { api: `${state.baseUrl}/repos/${owner}/${repo}`, html: `${state.baseUrl}/${owner}/${repo}` };
}

export function requireRepo(s, owner, repo, doc) {
  const { root } = s;
  if (!repoExists(root, owner, repo)) throw notFound(doc);
  return repoPath(root, owner, repo);
}
