// The App and its installation tokens: App JWTs checked as GitHub checks them, tokens with
// permissions and repositories, revocation, the App and a repository's installation.

import { randomInt, verify as verifySignature } from 'node:crypto';
import { ApiError, DOCS, invalidRequest, isoSeconds, notFound, requireObjectBody, requireRepo, sendJson } from './http.mjs';
import { R } from './router.mjs';
import { accountId } from './webhooks.mjs';

// GitHub: the JWT 'exp' may be at most 10 minutes in the future.
const MAX_JWT_EXP_AHEAD_SECONDS = 600;

// Clock drift allowance for a JWT 'iat' slightly in the future (GitHub tolerates small drift and
// recommends back-dating iat by 60 s).
const MAX_JWT_IAT_AHEAD_SECONDS = 60;

// Live tokens kept in memory are bounded like check runs; the oldest goes first.
const MAX_LIVE_TOKENS = 10_000;
const APP_PERMISSIONS = { checks: 'write', contents: 'write', deployments: 'write', metadata: 'read', pull_requests: 'write' };
const PERMISSION_RANK = { read: 1, write: 2 };
const TOKEN_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

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

export function hasPermission(token, name, level) {
  return (PERMISSION_RANK[token.permissions[name]] ?? 0) >= PERMISSION_RANK[level];
}

export function requirePermission(token, name, level) {
  if (!hasPermission(token, name, level)) {
    throw new ApiError(403, 'Resource not accessible by integration', DOCS.root);
  }
}

function liveToken(s, credential) {
  const { state } = s;
  const token = credential && state.tokens.get(credential);
  return token && token.expiresAtMs > Date.now() ? token : null;
}

export function requireInstallationToken(s, ctx) {
  const token = ctx.auth.scheme === 'Bearer' || ctx.auth.scheme === 'token' ? liveToken(s, ctx.auth.credential) : null;
  if (!token) throw new ApiError(401, 'Bad credentials', DOCS.root);
  return token;
}

export function basicAuthToken(s, ctx) {
  if (ctx.auth.scheme !== 'Basic') return null;
  const decoded = Buffer.from(ctx.auth.credential, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  return colon === -1 ? null : liveToken(s, decoded.slice(colon + 1));
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
export function requireRepoInScope(token, owner, repo) {
  if (token.repositories && !token.repositories.includes(repo)) throw notFound();
}

function storeToken(s, installationId, permissions, repositories = null) {
  const { state, tokenTtlSeconds } = s;
  const now = Date.now();
  for (const [key, value] of state.tokens) if (value.expiresAtMs <= now) state.tokens.delete(key);
  if (state.tokens.size >= MAX_LIVE_TOKENS) state.tokens.delete(state.tokens.keys().next().value);
  const token = randomToken();
  // Whole seconds, so the advertised expires_at is exactly when the token stops working.
  const expiresAtMs = Math.floor(now / 1000) * 1000 + tokenTtlSeconds * 1000;
  state.tokens.set(token, { installationId, expiresAtMs, permissions, repositories });
  return { token, expiresAtMs };
}

async function createAccessToken(s, ctx, rawInstallationId) {
  const { appId, publicKey, installationIds } = s;
  const jwtError = ctx.auth.scheme === 'Bearer'
    ? jwtProblem(ctx.auth.credential, { appId, publicKey, nowSec: Math.floor(Date.now() / 1000) })
    : 'A JSON web token could not be decoded';
  if (jwtError) throw new ApiError(401, jwtError, DOCS.token);
  const installationId = Number(rawInstallationId);
  if (!/^\d+$/.test(rawInstallationId) || !installationIds.has(installationId)) throw notFound(DOCS.token);
  const body = requireObjectBody(ctx);
  const permissions = requestedPermissions(body.permissions);
  const repositories = requestedRepositories(body.repositories);
  const { token, expiresAtMs } = storeToken(s, installationId, permissions, repositories);
  const answer = { token, expires_at: isoSeconds(expiresAtMs), permissions, repository_selection: repositories ? 'selected' : 'all' };
  if (repositories) answer.repositories = repositories.map((name) => ({ name }));
  sendJson(ctx.res, 201, answer);
}

function requireAppJwt(s, ctx, doc) {
  const { appId, publicKey } = s;
  const jwtError = ctx.auth.scheme === 'Bearer'
    ? jwtProblem(ctx.auth.credential, { appId, publicKey, nowSec: Math.floor(Date.now() / 1000) })
    : 'A JSON web token could not be decoded';
  if (jwtError) throw new ApiError(401, jwtError, doc);
}

// GET /repos/{owner}/{repo}/installation (App JWT): the installation that holds a repository;
// 404 when the App is not installed on it. The stand-in's repositories all belong to its first
// installation.
function getRepoInstallation(s, ctx, owner, repo) {
  const { state, appId, installationIds } = s;
  requireAppJwt(s, ctx, DOCS.repoInstallation);
  requireRepo(s, owner, repo, DOCS.repoInstallation);
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
function getApp(s, ctx) {
  const { appId } = s;
  requireAppJwt(s, ctx, DOCS.app);
  sendJson(ctx.res, 200, { id: Number(appId), slug: 'sluice', name: 'Sluice', owner: { login: 'octo', type: 'Organization' } });
}

// DELETE /installation/token: revokes the token that authenticates the request (204).
function revokeToken(s, ctx) {
  const { state } = s;
  state.tokens.delete(ctx.auth.credential);
  ctx.res.writeHead(204).end();
}

// Registers this resource's routes on the stand-in's one router.
export function registerTokens(router) {
  router.route('POST', new RegExp(`^/app/installations/${R}/access_tokens$`), createAccessToken);
  router.route('DELETE', /^\/installation\/token$/, revokeToken, { auth: true });
  router.route('GET', new RegExp(`^/repos/${R}/${R}/installation$`), getRepoInstallation);
  router.route('GET', /^\/app$/, getApp);
}
