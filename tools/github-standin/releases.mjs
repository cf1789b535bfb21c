// Releases: one per tag, a missing tag made at `target_commitish`, the Latest mark; and the
// control endpoint that lists them.

import { defaultBranch, resolveCommit, revParse } from './git-read.mjs';
import { readGit } from './git.mjs';
import { ApiError, decodeSegment, DOCS, invalidRequest, isoSeconds, notFound, optionalString, REF_RE, repoUrls, requireObjectBody, requireRepo, sendJson } from './http.mjs';
import { R } from './router.mjs';
import { requirePermission } from './tokens.mjs';

// Releases kept in memory are bounded like check runs.
const MAX_RELEASES = 100_000;

// GET /repos/{o}/{r}/releases/tags/{tag} and POST /repos/{o}/{r}/releases: one release per tag
// (422 already_exists for a second); a missing tag is made at `target_commitish`.
function getReleaseByTag(s, ctx, owner, repo, rawTag) {
  const { state } = s;
  requirePermission(ctx.token, 'contents', 'read');
  requireRepo(s, owner, repo, DOCS.releaseByTag);
  const release = state.releases.get(`${owner}/${repo}@${decodeSegment(rawTag)}`);
  if (!release) throw notFound(DOCS.releaseByTag);
  sendJson(ctx.res, 200, release);
}

async function createRelease(s, ctx, owner, repo) {
  const { state } = s;
  requirePermission(ctx.token, 'contents', 'write');
  const dir = requireRepo(s, owner, repo, DOCS.createRelease);
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
  const urls = repoUrls(s, owner, repo);
  const id = state.nextReleaseId++;
  const release = { id, url: `${urls.api}/releases/${id}`, html_url: `${urls.html}/releases/tag/${body.tag_name}`, tag_name: body.tag_name, target_commitish: target, name: body.name ?? body.tag_name, body: body.body ?? null, draft: false, prerelease: body.prerelease === true, created_at: isoSeconds(Date.now()), author: { login: 'sluice[bot]', type: 'Bot' } };
  state.releases.set(key, release);
  // Drafts and pre-releases never become Latest, as GitHub documents.
  if (body.make_latest !== 'false' && !release.prerelease) state.latestReleases.set(`${owner}/${repo}`, body.tag_name);
  sendJson(ctx.res, 201, release);
}

// GET /repos/{o}/{r}/releases/latest: the release marked Latest (404 when none is).
function getLatestRelease(s, ctx, owner, repo) {
  const { state } = s;
  requirePermission(ctx.token, 'contents', 'read');
  requireRepo(s, owner, repo, DOCS.latestRelease);
  const tag = state.latestReleases.get(`${owner}/${repo}`);
  const release = tag && state.releases.get(`${owner}/${repo}@${tag}`);
  if (!release) throw notFound(DOCS.latestRelease);
  sendJson(ctx.res, 200, release);
}

function controlReleases(s, ctx) {
  const { state } = s;
  const repo = ctx.query.get('repo');
  const releases = [...state.releases.entries()].filter(([key]) => !repo || key.startsWith(`${repo}@`)).map(([key, r]) => ({ ...r, repository: key.split('@')[0] }));
  sendJson(ctx.res, 200, { releases });
}

// Registers this resource's routes on the stand-in's one router.
export function registerReleases(router) {
  router.route('GET', /^\/_standin\/releases$/, controlReleases);
  router.route('GET', new RegExp(`^/repos/${R}/${R}/releases/tags/${R}$`), getReleaseByTag, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/releases/latest$`), getLatestRelease, { auth: true });
  router.route('POST', new RegExp(`^/repos/${R}/${R}/releases$`), createRelease, { auth: true });
}
