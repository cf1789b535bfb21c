// Repositories and their git data over the REST API: the repository, contents (read and
// write), refs, annotated tags, tags, compare, branches; and the control endpoint that commits.

import { defaultBranch, parseLsTree, parseSignature, readCommit, resolveCommit, revParse, tryGit, wrapBase64 } from './git-read.mjs';
import { commitFiles, isValidName, readGit } from './git.mjs';
import { ApiError, decodeSegment, DOCS, invalidRequest, notFound, pageParams, REF_RE, repoUrls, requireObjectBody, requireRepo, sendJson, SHA_RE } from './http.mjs';
import { R } from './router.mjs';
import { requirePermission } from './tokens.mjs';
import { accountId, repoId } from './webhooks.mjs';

// GitHub's contents API returns file content inline only up to 1 MB; larger files come back with
// encoding "none" and empty content.
const MAX_INLINE_CONTENT_BYTES = 1024 * 1024;

// GitHub's cap on the commits one comparison lists.
const MAX_COMPARE_COMMITS = 250;
// GitHub's cap on the files one comparison lists ("a maximum of 300 files").
const MAX_COMPARE_FILES = 300;
// Git's empty tree: what a commit with no common history with base is compared from.
const EMPTY_TREE = '4b825dc642cb6eb9a060e54bf8d69288fbee4904';

async function getRepo(s, ctx, owner, repo) {
  const { state } = s;
  requirePermission(ctx.token, 'metadata', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.repo);
  const urls = repoUrls(s, owner, repo);
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

function contentEntry(s, owner, repo, ref, entry) {
  const urls = repoUrls(s, owner, repo);
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

async function fileObject(s, dir, owner, repo, ref, entry) {
  const base = contentEntry(s, owner, repo, ref, entry);
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

async function getContents(s, ctx, owner, repo, rawPath) {
  requirePermission(ctx.token, 'contents', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.contents);
  const path = contentPath(rawPath);
  const ref = ctx.query.get('ref') || (await defaultBranch(dir));
  const commit = await resolveCommit(dir, ref);
  if (!commit) throw notFound(DOCS.contents);
  const [entry] = path ? parseLsTree(await readGit(dir, ['ls-tree', '-z', '-l', commit, '--', path])) : [{ type: 'tree' }];
  if (!entry || (path && entry.path !== path)) throw notFound(DOCS.contents);
  if (entry.type !== 'tree') {
    sendJson(ctx.res, 200, await fileObject(s, dir, owner, repo, ref, entry));
    return;
  }
  const listArgs = path ? ['ls-tree', '-z', '-l', commit, '--', `${path}/`] : ['ls-tree', '-z', '-l', commit];
  const entries = parseLsTree(await readGit(dir, listArgs));
  sendJson(ctx.res, 200, entries.map((e) => contentEntry(s, owner, repo, ref, e)));
}

async function getRef(s, ctx, owner, repo, rawRef) {
  requirePermission(ctx.token, 'contents', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.ref);
  const ref = rawRef.split('/').map(decodeSegment).join('/');
  if (!REF_RE.test(ref) || !/^(heads|tags)\//.test(ref)) throw notFound(DOCS.ref);
  const out = await tryGit(dir, ['show-ref', '--verify', `refs/${ref}`]);
  if (!out) throw notFound(DOCS.ref);
  const sha = out.toString().split(' ')[0];
  const type = (await readGit(dir, ['cat-file', '-t', sha])).toString().trim();
  const urls = repoUrls(s, owner, repo);
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
async function getTag(s, ctx, owner, repo, rawSha) {
  requirePermission(ctx.token, 'contents', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.tag);
  const sha = decodeSegment(rawSha);
  if (!SHA_RE.test(sha)) throw notFound(DOCS.tag);
  const type = (await tryGit(dir, ['cat-file', '-t', sha]))?.toString().trim();
  if (type !== 'tag') throw notFound(DOCS.tag);
  const text = (await readGit(dir, ['cat-file', 'tag', sha])).toString('utf8');
  const split = text.indexOf('\n\n');
  const headers = (split === -1 ? text : text.slice(0, split)).split('\n');
  const field = (name) => headers.find((h) => h.startsWith(`${name} `))?.slice(name.length + 1);
  const [object, objectType] = [field('object'), field('type')];
  const urls = repoUrls(s, owner, repo);
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
async function compareCommits(s, ctx, owner, repo, rawBasehead) {
  requirePermission(ctx.token, 'contents', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.compare);
  const basehead = decodeSegment(rawBasehead);
  const parts = basehead.split('...');
  if (parts.length !== 2) throw notFound(DOCS.compare);
  const [base, head] = await Promise.all(parts.map((p) => resolveCommit(dir, p)));
  if (!base || !head) throw notFound(DOCS.compare);
  const count = async (range) => Number((await readGit(dir, ['rev-list', '--count', range])).toString().trim());
  const [aheadBy, behindBy] = [await count(`${base}..${head}`), await count(`${head}..${base}`)];
  const status = aheadBy === 0 && behindBy === 0 ? 'identical' : behindBy === 0 ? 'ahead' : aheadBy === 0 ? 'behind' : 'diverged';
  const mergeBase = (await tryGit(dir, ['merge-base', base, head]))?.toString().trim() ?? null;
  const listed = aheadBy === 0 ? [] : (await readGit(dir, ['rev-list', '--reverse', `--max-count=${MAX_COMPARE_COMMITS}`, `${base}..${head}`])).toString().trim().split('\n');
  const urls = repoUrls(s, owner, repo);
  sendJson(ctx.res, 200, {
    url: `${urls.api}/compare/${basehead}`,
    status,
    ahead_by: aheadBy,
    behind_by: behindBy,
    total_commits: aheadBy,
    base_commit: { sha: base },
    merge_base_commit: { sha: mergeBase },
    commits: await Promise.all(listed.filter(Boolean).map((sha) => commitObject(dir, urls, sha))),
    // Without a common history, everything head holds is new to base.
    files: await changedFiles(dir, mergeBase ?? EMPTY_TREE, head),
  });
}

// The files head changes from the merge base, as a comparison lists them (at most
// MAX_COMPARE_FILES, as GitHub: "the response includes a maximum of 300 files"); a rename has
// its `previous_filename`.
async function changedFiles(dir, base, head) {
  const out = (await readGit(dir, ['diff', '--name-status', '-M', '-z', base, head])).toString();
  const fields = out.split('\0').filter((f) => f !== '');
  const STATUS = { A: 'added', D: 'removed', M: 'modified', T: 'changed', C: 'copied', R: 'renamed' };
  const files = [];
  for (let i = 0; i < fields.length && files.length < MAX_COMPARE_FILES;) {
    const code = fields[i][0];
    const renamed = code === 'R' || code === 'C';
    const [from, to] = renamed ? [fields[i + 1], fields[i + 2]] : [null, fields[i + 1]];
    files.push({ filename: to, status: STATUS[code] ?? 'modified', ...(renamed ? { previous_filename: from } : {}) });
    i += renamed ? 3 : 2;
  }
  return files;
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

async function getBranch(s, ctx, owner, repo, rawBranch) {
  requirePermission(ctx.token, 'contents', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.branch);
  const branch = rawBranch.split('/').map(decodeSegment).join('/');
  const sha = REF_RE.test(branch) ? await revParse(dir, `refs/heads/${branch}^{commit}`) : null;
  if (!sha) throw new ApiError(404, 'Branch not found', DOCS.branch);
  const commit = await readCommit(dir, sha);
  const urls = repoUrls(s, owner, repo);
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

// GET /repos/{o}/{r}/tags: newest first (by the tagged commit's time), each with its commit.
async function listTags(s, ctx, owner, repo) {
  requirePermission(ctx.token, 'contents', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.tags);
  const out = await readGit(dir, ['for-each-ref', '--sort=-creatordate', '--format=%(refname:short)%00%(objectname)%00%(*objectname)', 'refs/tags']);
  const urls = repoUrls(s, owner, repo);
  const tags = out.toString('utf8').split('\n').filter(Boolean).map((line) => {
    const [name, object, peeled] = line.split('\0');
    const sha = peeled || object;
    return { name, commit: { sha, url: `${urls.api}/commits/${sha}` }, zipball_url: `${urls.api}/zipball/refs/tags/${name}`, tarball_url: `${urls.api}/tarball/refs/tags/${name}`, node_id: `REF_${Buffer.from(name).toString('base64url')}` };
  });
  const { start, end } = pageParams(ctx.query);
  sendJson(ctx.res, 200, tags.slice(start, end));
}

// POST /repos/{o}/{r}/git/refs {ref, sha}: 422 when it exists or the sha is no object.
async function createRef(s, ctx, owner, repo) {
  requirePermission(ctx.token, 'contents', 'write');
  const dir = requireRepo(s, owner, repo, DOCS.createRef);
  const body = requireObjectBody(ctx);
  const name = typeof body.ref === 'string' ? body.ref.replace(/^refs\//, '') : '';
  if (!/^(heads|tags)\//.test(name) || !REF_RE.test(name) || !SHA_RE.test(body.sha ?? '')) {
    throw invalidRequest('Reference name is invalid or sha is not a full commit id.', DOCS.createRef);
  }
  if (!(await revParse(dir, `${body.sha}^{commit}`))) throw new ApiError(422, 'Object does not exist', DOCS.createRef);
  if (await revParse(dir, `refs/${name}`)) throw new ApiError(422, 'Reference already exists', DOCS.createRef);
  await readGit(dir, ['update-ref', `refs/${name}`, body.sha, '0'.repeat(40)]);
  const urls = repoUrls(s, owner, repo);
  sendJson(ctx.res, 201, { ref: `refs/${name}`, url: `${urls.api}/git/refs/${name}`, object: { sha: body.sha, type: 'commit' } });
}

// PUT /repos/{o}/{r}/contents/{path} {message, content, branch, sha}: a commit on the branch.
// Updating an existing file needs its blob sha (422 without, 409 on a stale one), as on GitHub.
async function putContents(s, ctx, owner, repo, rawPath) {
  const { root } = s;
  requirePermission(ctx.token, 'contents', 'write');
  const dir = requireRepo(s, owner, repo, DOCS.putContents);
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

function controlCommit(s, ctx, owner, repo) {
  const { root } = s;
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

// Registers this resource's routes on the stand-in's one router.
export function registerRepos(router) {
  router.route('POST', new RegExp(`^/_standin/repos/${R}/${R}/commits$`), controlCommit);
  router.route('GET', new RegExp(`^/repos/${R}/${R}/tags$`), listTags, { auth: true });
  router.route('POST', new RegExp(`^/repos/${R}/${R}/git/refs$`), createRef, { auth: true });
  router.route('PUT', new RegExp(`^/repos/${R}/${R}/contents/(.+)$`), putContents, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}$`), getRepo, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/contents(?:/(.*))?$`), getContents, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/git/ref/(.+)$`), getRef, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/git/tags/${R}$`), getTag, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/compare/([^/]+)$`), compareCommits, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/branches/(.+)$`), getBranch, { auth: true });
}
