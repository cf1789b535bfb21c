// Deployments and deployment statuses with GitHub's codes and its documented `auto_inactive`
// rule, and the control endpoint that lists them.

import { latestPerName } from './check-runs.mjs';
import { defaultBranch, resolveCommit, tryGit } from './git-read.mjs';
import { ApiError, charCount, DOCS, invalidRequest, isoSeconds, notFound, optionalBoolean, optionalString, pageParams, repoUrls, requireObjectBody, requireRepo, sendJson, validationFailed } from './http.mjs';
import { R } from './router.mjs';
import { requirePermission } from './tokens.mjs';

// Deployments kept in memory are bounded like check runs.
const MAX_DEPLOYMENTS = 100_000;

// GitHub's deployment status states, and its documented maximum description length.
const DEPLOYMENT_STATES = ['error', 'failure', 'inactive', 'in_progress', 'queued', 'pending', 'success'];
const MAX_DEPLOYMENT_DESCRIPTION_CHARS = 140;

// GitHub's maximum length of an environment name.
const MAX_ENVIRONMENT_CHARS = 255;
const appRef = (s) => ({ id: Number(s.appId), slug: 'sluice', name: 'Sluice' });
const botCreator = () => ({ login: 'sluice[bot]', type: 'Bot' });

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
function failingContexts(s, owner, repo, sha, required) {
  const { state } = s;
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

async function createDeployment(s, ctx, owner, repo) {
  const { state } = s;
  requirePermission(ctx.token, 'deployments', 'write');
  const dir = requireRepo(s, owner, repo, DOCS.createDeployment);
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
  const failing = failingContexts(s, owner, repo, sha, fields.contexts);
  if (failing.length > 0) {
    throw new ApiError(409, `Conflict: Commit status checks failed for ${fields.ref}.`, DOCS.createDeployment, {
      errors: [{ contexts: failing, resource: 'Deployment', field: 'required_contexts', code: 'invalid' }],
    });
  }
  if (state.deployments.size >= MAX_DEPLOYMENTS) throw new ApiError(403, 'Deployment limit of the stand-in reached', DOCS.createDeployment);
  const id = state.nextDeploymentId++;
  const nowIso = isoSeconds(Date.now());
  const { api } = repoUrls(s, owner, repo);
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
    performed_via_github_app: appRef(s),
  };
  state.deployments.set(id, { repo: `${owner}/${repo}`, deployment, statuses: [] });
  sendJson(ctx.res, 201, deployment);
}

function listDeployments(s, ctx, owner, repo) {
  const { state } = s;
  requirePermission(ctx.token, 'deployments', 'read');
  requireRepo(s, owner, repo, DOCS.listDeployments);
  const { query } = ctx;
  const filters = ['sha', 'ref', 'task', 'environment'].filter((k) => query.has(k));
  const list = [...state.deployments.values()]
    .filter((e) => e.repo === `${owner}/${repo}` && filters.every((k) => e.deployment[k] === query.get(k)))
    .map((e) => e.deployment)
    .sort((a, b) => b.id - a.id);
  const { start, end } = pageParams(query);
  sendJson(ctx.res, 200, list.slice(start, end));
}

function requireDeployment(s, owner, repo, rawId, doc) {
  const { state } = s;
  requireRepo(s, owner, repo, doc);
  const entry = /^\d+$/.test(rawId) ? state.deployments.get(Number(rawId)) : undefined;
  if (!entry || entry.repo !== `${owner}/${repo}`) throw notFound(doc);
  return entry;
}

function getDeployment(s, ctx, owner, repo, rawId) {
  requirePermission(ctx.token, 'deployments', 'read');
  sendJson(ctx.res, 200, requireDeployment(s, owner, repo, rawId, DOCS.getDeployment).deployment);
}

function newStatus(s, entry, fields, nowIso) {
  const { state } = s;
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
    performed_via_github_app: appRef(s),
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
function autoInactivate(s, entry, nowIso) {
  const { state } = s;
  const { id, environment } = entry.deployment;
  for (const other of state.deployments.values()) {
    const d = other.deployment;
    const prior = other.repo === entry.repo && d.id < id && d.environment === environment;
    const latest = other.statuses.at(-1);
    if (prior && !d.transient_environment && !d.production_environment && latest?.state === 'success') {
      const inactive = newStatus(s, other, { state: 'inactive', description: '', logUrl: '', environmentUrl: '' }, nowIso);
      other.statuses.push({ ...inactive, auto_inactive: true });
      d.updated_at = nowIso;
    }
  }
}

function createDeploymentStatus(s, ctx, owner, repo, rawId) {
  requirePermission(ctx.token, 'deployments', 'write');
  const entry = requireDeployment(s, owner, repo, rawId, DOCS.createStatus);
  const fields = statusFields(requireObjectBody(ctx));
  const nowIso = isoSeconds(Date.now());
  if (fields.environment) entry.deployment.environment = fields.environment;
  const status = newStatus(s, entry, fields, nowIso);
  entry.statuses.push(status);
  entry.deployment.updated_at = nowIso;
  if (fields.state === 'success' && fields.autoInactive) autoInactivate(s, entry, nowIso);
  sendJson(ctx.res, 201, status);
}

function listDeploymentStatuses(s, ctx, owner, repo, rawId) {
  requirePermission(ctx.token, 'deployments', 'read');
  const entry = requireDeployment(s, owner, repo, rawId, DOCS.listStatuses);
  const newestFirst = entry.statuses.map(({ auto_inactive: _, ...s }) => s).reverse();
  const { start, end } = pageParams(ctx.query);
  sendJson(ctx.res, 200, newestFirst.slice(start, end));
}

// Every deployment with its statuses, oldest first (`auto_inactive: true` on those GitHub's rule
// added, not a request).
function controlDeployments(s, ctx) {
  const { state } = s;
  const repo = ctx.query.get('repo');
  const deployments = [...state.deployments.values()]
    .filter((e) => !repo || e.repo === repo)
    .map((e) => ({ ...e.deployment, repository: e.repo, statuses: e.statuses }));
  sendJson(ctx.res, 200, { deployments });
}

// Registers this resource's routes on the stand-in's one router.
export function registerDeployments(router) {
  router.route('GET', /^\/_standin\/deployments$/, controlDeployments);
  router.route('POST', new RegExp(`^/repos/${R}/${R}/deployments$`), createDeployment, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/deployments$`), listDeployments, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/deployments/${R}$`), getDeployment, { auth: true });
  router.route('POST', new RegExp(`^/repos/${R}/${R}/deployments/${R}/statuses$`), createDeploymentStatus, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/deployments/${R}/statuses$`), listDeploymentStatuses, { auth: true });
}
