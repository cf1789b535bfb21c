// Pull requests, their comments and collaborators' permissions; the control endpoints that
// register a pull request, a person's merge or close, and a permission.

import { revParse, tryGit } from './git-read.mjs';
import { readGit } from './git.mjs';
import { ApiError, decodeSegment, DOCS, invalidRequest, isoSeconds, notFound, optionalEnum, optionalString, pageParams, REF_RE, repoUrls, requireObjectBody, requireRepo, sendJson, SHA_RE } from './http.mjs';
import { R } from './router.mjs';
import { requirePermission } from './tokens.mjs';

// Issue comments kept in memory are bounded like check runs.
const MAX_COMMENTS = 100_000;

// GET /repos/{o}/{r}/pulls/{n}: the pull requests the test registered (`_standin/.../pulls/{n}`).
function getPull(s, ctx, owner, repo, rawNumber) {
  const { state } = s;
  requirePermission(ctx.token, 'pull_requests', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.pull);
  const pull = state.pulls.get(`${owner}/${repo}#${rawNumber}`);
  if (!pull) throw notFound(DOCS.pull);
  return pullObject(s, dir, owner, repo, Number(rawNumber), pull).then((p) => sendJson(ctx.res, 200, p));
}

// A pull request in GitHub's shape; the head sha of one the stand-in opened is its branch's.
async function pullObject(s, dir, owner, repo, number, pull) {
  const urls = repoUrls(s, owner, repo);
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
async function listPulls(s, ctx, owner, repo) {
  const { state } = s;
  requirePermission(ctx.token, 'pull_requests', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.listPulls);
  const want = ctx.query.get('state') ?? 'open';
  if (!['open', 'closed', 'all'].includes(want)) throw invalidRequest('state must be open, closed or all.', DOCS.listPulls);
  const head = ctx.query.get('head');
  const out = [];
  for (const [key, pull] of state.pulls) {
    const [repoKey, number] = key.split('#');
    if (repoKey !== `${owner}/${repo}`) continue;
    if (want !== 'all' && (pull.state ?? 'open') !== want) continue;
    if (head && head !== `${(pull.head_repo ?? repoKey).split('/')[0]}:${pull.head_ref}`) continue;
    out.push(await pullObject(s, dir, owner, repo, Number(number), pull));
  }
  out.sort((a, b) => b.number - a.number);
  const { start, end } = pageParams(ctx.query);
  sendJson(ctx.res, 200, out.slice(start, end));
}

// POST /repos/{o}/{r}/pulls {title, head, base, body}: 422 when the head branch is missing or
// an open pull request from it exists, as GitHub answers.
async function createPull(s, ctx, owner, repo) {
  const { state } = s;
  requirePermission(ctx.token, 'pull_requests', 'write');
  const dir = requireRepo(s, owner, repo, DOCS.createPull);
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
  sendJson(ctx.res, 201, await pullObject(s, dir, owner, repo, number, pull));
}

// PATCH /repos/{o}/{r}/pulls/{n} {title, body, state}: a merged pull request cannot reopen.
async function updatePull(s, ctx, owner, repo, rawNumber) {
  const { state } = s;
  requirePermission(ctx.token, 'pull_requests', 'write');
  const dir = requireRepo(s, owner, repo, DOCS.updatePull);
  const pull = state.pulls.get(`${owner}/${repo}#${rawNumber}`);
  if (!pull) throw notFound(DOCS.updatePull);
  const body = requireObjectBody(ctx);
  optionalString(body, 'title', DOCS.updatePull);
  optionalString(body, 'body', DOCS.updatePull);
  optionalEnum(body, 'state', ['open', 'closed'], DOCS.updatePull);
  if (body.state === 'open' && pull.merged) throw invalidRequest('A merged pull request cannot be reopened.', DOCS.updatePull);
  if (body.state === 'closed' && (pull.state ?? 'open') !== 'closed') pull.closed_at = isoSeconds(Date.now());
  for (const key of ['title', 'body', 'state']) if (typeof body[key] === 'string') pull[key] = body[key];
  sendJson(ctx.res, 200, await pullObject(s, dir, owner, repo, Number(rawNumber), pull));
}

// GET and POST /repos/{o}/{r}/issues/{n}/comments (a pull request is an issue).
function listComments(s, ctx, owner, repo, rawNumber) {
  const { state } = s;
  requirePermission(ctx.token, 'pull_requests', 'read');
  requireRepo(s, owner, repo, DOCS.comments);
  if (!state.pulls.has(`${owner}/${repo}#${rawNumber}`)) throw notFound(DOCS.comments);
  const { start, end } = pageParams(ctx.query);
  sendJson(ctx.res, 200, (state.comments.get(`${owner}/${repo}#${rawNumber}`) ?? []).slice(start, end));
}

function createComment(s, ctx, owner, repo, rawNumber) {
  const { state } = s;
  requirePermission(ctx.token, 'pull_requests', 'write');
  requireRepo(s, owner, repo, DOCS.comments);
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

// PATCH /repos/{o}/{r}/issues/comments/{id}: edits a comment's body (a preview's one comment,
// updated in place); 200 with the comment, 404 for an id of another repository or none, 422
// without a body, as GitHub answers.
function updateComment(s, ctx, owner, repo, rawId) {
  const { state } = s;
  requirePermission(ctx.token, 'pull_requests', 'write');
  requireRepo(s, owner, repo, DOCS.updateComment);
  const body = requireObjectBody(ctx);
  if (typeof body.body !== 'string' || !body.body) throw invalidRequest('"body" wasn\'t supplied.', DOCS.updateComment);
  for (const [key, list] of state.comments.entries()) {
    if (!key.startsWith(`${owner}/${repo}#`)) continue;
    const comment = list.find((c) => String(c.id) === rawId);
    if (!comment) continue;
    comment.body = body.body;
    comment.updated_at = isoSeconds(Date.now());
    sendJson(ctx.res, 200, comment);
    return;
  }
  throw notFound(DOCS.updateComment);
}

// GET /repos/{o}/{r}/collaborators/{u}/permission: the owner is admin; others as registered,
// else "read" (anyone may read a public repository), as GitHub answers.
function getPermission(s, ctx, owner, repo, rawUser) {
  const { state } = s;
  requirePermission(ctx.token, 'metadata', 'read');
  requireRepo(s, owner, repo, DOCS.permission);
  const user = decodeSegment(rawUser);
  const permission = user === owner ? 'admin' : (state.permissions.get(`${owner}/${repo}:${user}`) ?? 'read');
  sendJson(ctx.res, 200, { permission, role_name: permission, user: { login: user, type: 'User' } });
}

function controlPull(s, ctx, owner, repo, rawNumber) {
  const { state } = s;
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
async function controlClosePull(s, ctx, owner, repo, rawNumber) {
  const { state } = s;
  const pull = state.pulls.get(`${owner}/${repo}#${rawNumber}`);
  if (!pull) throw notFound();
  const { merged = false } = requireObjectBody(ctx);
  if (merged && !pull.merged) {
    const dir = requireRepo(s, owner, repo, DOCS.root);
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

function controlPulls(s, ctx) {
  const { state } = s;
  const repo = ctx.query.get('repo');
  const pulls = [...state.pulls.entries()]
    .filter(([key]) => !repo || key.startsWith(`${repo}#`))
    .map(([key, p]) => ({ ...p, repository: key.split('#')[0], number: Number(key.split('#')[1]), comments: state.comments.get(key) ?? [] }));
  sendJson(ctx.res, 200, { pulls });
}

function controlPermission(s, ctx, owner, repo, rawUser) {
  const { state } = s;
  const { permission } = requireObjectBody(ctx);
  if (!['admin', 'write', 'read', 'none'].includes(permission)) throw invalidRequest('Expected {permission}.', DOCS.root);
  state.permissions.set(`${owner}/${repo}:${decodeSegment(rawUser)}`, permission);
  sendJson(ctx.res, 201, { ok: true });
}

// Registers this resource's routes on the stand-in's one router.
export function registerPulls(router) {
  router.route('POST', new RegExp(`^/_standin/repos/${R}/${R}/pulls/${R}$`), controlPull);
  router.route('POST', new RegExp(`^/_standin/repos/${R}/${R}/collaborators/${R}$`), controlPermission);
  router.route('POST', new RegExp(`^/_standin/repos/${R}/${R}/pulls/${R}/close$`), controlClosePull);
  router.route('GET', /^\/_standin\/pulls$/, controlPulls);
  router.route('GET', new RegExp(`^/repos/${R}/${R}/pulls$`), listPulls, { auth: true });
  router.route('POST', new RegExp(`^/repos/${R}/${R}/pulls$`), createPull, { auth: true });
  router.route('PATCH', new RegExp(`^/repos/${R}/${R}/pulls/${R}$`), updatePull, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/issues/${R}/comments$`), listComments, { auth: true });
  router.route('POST', new RegExp(`^/repos/${R}/${R}/issues/${R}/comments$`), createComment, { auth: true });
  router.route('PATCH', new RegExp(`^/repos/${R}/${R}/issues/comments/${R}$`), updateComment, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/pulls/${R}$`), getPull, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/collaborators/${R}/permission$`), getPermission, { auth: true });
}
