// Check runs: create, update, get, list for a ref (GitHub's validation and status rules), and
// the control endpoint that lists them with their history.

import { resolveCommit, revParse } from './git-read.mjs';
import { ApiError, charCount, decodeSegment, DOCS, invalidRequest, isoSeconds, notFound, optionalEnum, optionalString, optionalTimestamp, pageParams, repoUrls, requireObjectBody, requireRepo, sendJson, SHA_RE } from './http.mjs';
import { R } from './router.mjs';
import { requirePermission } from './tokens.mjs';

// GitHub's documented maximum for check run output.summary and output.text.
const MAX_OUTPUT_CHARS = 65535;

// GitHub's documented maximum number of annotations per check run request.
const MAX_ANNOTATIONS_PER_REQUEST = 50;

// Check runs kept in memory are bounded, so a long `npm start` session cannot grow without bound.
const MAX_CHECK_RUNS = 100_000;

// GitHub's limits on check run buttons (`actions`).
const ACTIONS_MAX = 3;
const ACTION_LIMITS = { label: 20, identifier: 20, description: 40 };
const CHECK_STATUSES = ['queued', 'in_progress', 'completed'];
const CHECK_CONCLUSIONS = ['action_required', 'cancelled', 'failure', 'neutral', 'success', 'skipped', 'stale', 'timed_out'];

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

function checkSuiteId(s, repoKey, sha) {
  const { state } = s;
  const key = `${repoKey}@${sha}`;
  if (!state.checkSuites.has(key)) state.checkSuites.set(key, state.nextCheckSuiteId++);
  return state.checkSuites.get(key);
}

function newCheckRun(s, owner, repo, headSha, nowIso) {
  const { state, appId } = s;
  const id = state.nextCheckRunId++;
  const urls = repoUrls(s, owner, repo);
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
    check_suite: { id: checkSuiteId(s, `${owner}/${repo}`, headSha) },
    app: { id: Number(appId), slug: 'sluice', name: 'Sluice' },
    pull_requests: [],
    actions: [],
  };
}

function recordHistory(entry) {
  entry.history.push({ status: entry.run.status, conclusion: entry.run.conclusion, at_ms: Date.now() });
}

async function createCheckRun(s, ctx, owner, repo) {
  const { state } = s;
  requirePermission(ctx.token, 'checks', 'write');
  const dir = requireRepo(s, owner, repo, DOCS.createRun);
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
  const run = newCheckRun(s, owner, repo, headSha, nowIso);
  applyFields(run, fields, nowIso, DOCS.createRun);
  const entry = { repo: `${owner}/${repo}`, run, history: [] };
  recordHistory(entry);
  state.checkRuns.set(run.id, entry);
  sendJson(ctx.res, 201, run);
}

function requireCheckRun(s, owner, repo, rawId, doc) {
  const { state } = s;
  requireRepo(s, owner, repo, doc);
  const entry = /^\d+$/.test(rawId) ? state.checkRuns.get(Number(rawId)) : undefined;
  if (!entry || entry.repo !== `${owner}/${repo}`) throw notFound(doc);
  return entry;
}

async function updateCheckRun(s, ctx, owner, repo, rawId) {
  requirePermission(ctx.token, 'checks', 'write');
  const entry = requireCheckRun(s, owner, repo, rawId, DOCS.updateRun);
  const fields = checkRunFields(requireObjectBody(ctx), DOCS.updateRun);
  applyFields(entry.run, fields, isoSeconds(Date.now()), DOCS.updateRun);
  recordHistory(entry);
  sendJson(ctx.res, 200, entry.run);
}

async function getCheckRun(s, ctx, owner, repo, rawId) {
  requirePermission(ctx.token, 'checks', 'read');
  sendJson(ctx.res, 200, requireCheckRun(s, owner, repo, rawId, DOCS.getRun).run);
}

// GitHub's default filter=latest keeps only the most recent run of each name.
export function latestPerName(runs) {
  const latest = new Map();
  for (const run of runs) if (!latest.has(run.name) || latest.get(run.name).id < run.id) latest.set(run.name, run);
  return [...latest.values()];
}

async function listCheckRunsForRef(s, ctx, owner, repo, rawRef) {
  const { state } = s;
  requirePermission(ctx.token, 'checks', 'read');
  const dir = requireRepo(s, owner, repo, DOCS.listRuns);
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

function controlCheckRuns(s, ctx) {
  const { state } = s;
  const repo = ctx.query.get('repo');
  const runs = [...state.checkRuns.values()]
    .filter((e) => !repo || e.repo === repo)
    .map((e) => ({ ...e.run, repository: e.repo, history: e.history }));
  sendJson(ctx.res, 200, { check_runs: runs });
}

// Registers this resource's routes on the stand-in's one router.
export function registerCheckRuns(router) {
  router.route('GET', /^\/_standin\/check-runs$/, controlCheckRuns);
  router.route('POST', new RegExp(`^/repos/${R}/${R}/check-runs$`), createCheckRun, { auth: true });
  router.route('PATCH', new RegExp(`^/repos/${R}/${R}/check-runs/${R}$`), updateCheckRun, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/check-runs/${R}$`), getCheckRun, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/commits/(.+)/check-runs$`), listCheckRunsForRef, { auth: true });
}
