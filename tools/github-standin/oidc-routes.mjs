// The routes of GitHub Actions' OIDC issuer (`oidc.mjs`): its discovery document and keys,
// tokens with chosen claims, and the runner's token endpoint for a registered job.

import { ApiError, DOCS, invalidRequest, sendJson } from './http.mjs';
import { OIDC_PREFIX } from './oidc.mjs';

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
function controlOidcToken(s, ctx) {
  const { oidc } = s;
  sendJson(ctx.res, 201, { value: oidc.mint(oidcBody(ctx)) });
}

// POST /_standin/oidc/jobs {claims}: a workflow job; its ACTIONS_ID_TOKEN_REQUEST_URL and _TOKEN.
function controlOidcJob(s, ctx) {
  const { state, oidc } = s;
  const { claims } = oidcBody(ctx);
  const requestToken = oidc.registerJob(claims);
  sendJson(ctx.res, 201, { request_url: `${state.baseUrl}${OIDC_PREFIX}/idtoken?api-version=2.0`, request_token: requestToken });
}

// GET /_standin/oidc/idtoken?api-version=2.0&audience=A (bearer: the job's request token): what
// the runner's endpoint answers a job granted `id-token: write`.
function oidcIdToken(s, ctx) {
  const { oidc } = s;
  const requestToken = ctx.auth.scheme === 'Bearer' ? ctx.auth.credential : null;
  const value = oidc.tokenForJob(requestToken, ctx.query.get('audience'));
  if (!value) throw new ApiError(401, 'Bad credentials', DOCS.root);
  sendJson(ctx.res, 200, { value });
}

// Registers this resource's routes on the stand-in's one router.
export function registerOidc(router) {
  router.route('GET', /^\/_standin\/oidc\/\.well-known\/openid-configuration$/, (s, ctx) => sendJson(ctx.res, 200, s.oidc.discovery()));
  router.route('GET', /^\/_standin\/oidc\/\.well-known\/jwks$/, (s, ctx) => sendJson(ctx.res, 200, s.oidc.jwks()));
  router.route('POST', /^\/_standin\/oidc\/tokens$/, controlOidcToken);
  router.route('POST', /^\/_standin\/oidc\/jobs$/, controlOidcJob);
  router.route('GET', /^\/_standin\/oidc\/idtoken$/, oidcIdToken);
}
