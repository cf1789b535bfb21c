// GitHub Actions' OIDC issuer, as the stand-in plays it: a discovery document and a JWKS under
// `<stand-in>/_standin/oidc` (the issuer URL the Worker's GITHUB_OIDC_ISSUER names in tests), RS256
// tokens with GitHub's claims, and the runner's token endpoint (ACTIONS_ID_TOKEN_REQUEST_URL,
// bearer ACTIONS_ID_TOKEN_REQUEST_TOKEN, `&audience=`), so a test can run the action's client
// as a workflow step would. GitHub's shapes: https://docs.github.com/actions/reference/security/oidc
// (claims; a token expires 5 minutes after it is issued and is not valid before 10 minutes
// earlier, as the documented example shows) and token.actions.githubusercontent.com's
// /.well-known/openid-configuration.

import { generateKeyPairSync, randomBytes, randomInt, randomUUID, sign } from 'node:crypto';

export const OIDC_PREFIX = '/_standin/oidc';
const TOKEN_TTL_SECONDS = 300;
const NOT_BEFORE_SECONDS = 600;
// Jobs a test registers (each a request token): far above any test, bounding memory.
const MAX_JOBS = 1000;
// The claims GitHub lists as supported (its discovery document's claims_supported).
const CLAIMS_SUPPORTED = [
  'sub', 'aud', 'exp', 'iat', 'iss', 'jti', 'nbf', 'ref', 'sha', 'repository', 'repository_id',
  'repository_owner', 'repository_owner_id', 'enterprise', 'enterprise_id', 'run_id', 'run_number',
  'run_attempt', 'actor', 'actor_id', 'workflow', 'workflow_ref', 'workflow_sha', 'head_ref',
  'base_ref', 'event_name', 'ref_type', 'ref_protected', 'environment', 'environment_node_id',
  'job_workflow_ref', 'job_workflow_sha', 'repository_visibility', 'runner_environment',
  'issuer_scope', 'check_run_id',
];

function b64url(value) {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

function signJwt(privateKey, header, claims) {
  const input = `${b64url(header)}.${b64url(claims)}`;
  return `${input}.${sign('RSA-SHA256', Buffer.from(input), privateKey).toString('base64url')}`;
}

// `issuerUrl` is a function: the stand-in knows its port only once it listens.
export function createOidcIssuer(issuerUrl) {
  const issuer = generateKeyPairSync('rsa', { modulusLength: 2048 });
  // GitHub's key ids are hex thumbprints.
  const kid = randomBytes(20).toString('hex').toUpperCase();
  // A key GitHub never published: signs forgeries for tests of refusal.
  const stranger = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jobs = new Map(); // request token -> claims the job's tokens carry

  function jwks() {
    const { kty, n, e } = issuer.publicKey.export({ format: 'jwk' });
    return { keys: [{ kty, alg: 'RS256', use: 'sig', kid, n, e }] };
  }

  function discovery() {
    const iss = issuerUrl();
    return {
      issuer: iss,
      jwks_uri: `${iss}/.well-known/jwks`,
      subject_types_supported: ['public', 'pairwise'],
      response_types_supported: ['id_token'],
      claims_supported: CLAIMS_SUPPORTED,
      id_token_signing_alg_values_supported: ['RS256'],
      scopes_supported: ['openid'],
    };
  }

  // GitHub's claims for a job of `repository` run from `ref` (in `environment`, when named);
  // `overrides` replace any of them (null removes one).
  function claimsOf(overrides = {}, audience) {
    const now = Math.floor(Date.now() / 1000);
    const repository = overrides.repository ?? 'acme/widgets';
    const ref = overrides.ref ?? 'refs/heads/main';
    const environment = overrides.environment ?? null;
    const owner = repository.split('/')[0];
    const context = environment ? `environment:${environment}` : `ref:${ref}`;
    const claims = {
      jti: randomUUID(),
      sub: `repo:${repository}:${context}`,
      aud: audience ?? `https://github.com/${owner}`,
      ref,
      sha: '0'.repeat(40),
      repository,
      repository_id: String(randomInt(1_000_000, 900_000_000)),
      repository_owner: owner,
      repository_owner_id: String(randomInt(1_000_000, 900_000_000)),
      repository_visibility: 'private',
      run_id: String(randomInt(1_000_000_000, 9_000_000_000)),
      run_number: '1',
      run_attempt: '1',
      actor: 'octocat',
      actor_id: '583231',
      workflow: 'deploy',
      workflow_ref: `${repository}/.github/workflows/deploy.yml@${ref}`,
      workflow_sha: '0'.repeat(40),
      job_workflow_ref: `${repository}/.github/workflows/deploy.yml@${ref}`,
      job_workflow_sha: '0'.repeat(40),
      event_name: 'workflow_dispatch',
      ref_type: ref.startsWith('refs/tags/') ? 'tag' : 'branch',
      ref_protected: 'false',
      runner_environment: 'github-hosted',
      ...(environment ? { environment } : {}),
      iss: issuerUrl(),
      nbf: now - NOT_BEFORE_SECONDS,
      exp: now + TOKEN_TTL_SECONDS,
      iat: now,
    };
    for (const [k, v] of Object.entries(overrides)) {
      if (v === null) delete claims[k];
      else claims[k] = v;
    }
    return claims;
  }

  // A token with chosen claims (a test hook). `key: 'stranger'` signs with a key the JWKS does not
  // hold (under the issuer's kid unless `kid` says otherwise): a forgery.
  function mint({ claims = {}, audience, key = 'issuer', kid: kidOverride } = {}) {
    const privateKey = key === 'stranger' ? stranger.privateKey : issuer.privateKey;
    const header = { typ: 'JWT', alg: 'RS256', x5t: kid, kid: kidOverride ?? kid };
    return signJwt(privateKey, header, claimsOf(claims, audience));
  }

  // A job of a workflow run: its request token and the claims its tokens will carry.
  function registerJob(claims = {}) {
    if (jobs.size >= MAX_JOBS) jobs.delete(jobs.keys().next().value);
    const requestToken = randomBytes(24).toString('base64url');
    jobs.set(requestToken, claims);
    return requestToken;
  }

  // The runner's token endpoint: the job's token for `audience`, or null for an unknown job.
  function tokenForJob(requestToken, audience) {
    const claims = requestToken ? jobs.get(requestToken) : undefined;
    if (!claims) return null;
    return mint({ claims, audience: audience || undefined });
  }

  return { jwks, discovery, mint, registerJob, tokenForJob, reset: () => jobs.clear() };
}
