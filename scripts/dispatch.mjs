#!/usr/bin/env node
// Starts a Sluice run: the client of POST /v1/dispatch that action.yml runs (and the end-to-end
// tests use). Reads SLUICE_URL, SLUICE_DISPATCH_KEY (the repository's key), SLUICE_RUN,
// SLUICE_REPO and optional SLUICE_BRANCH, SLUICE_SHA, SLUICE_INPUTS (a JSON object); prints the
// answer, writes `instance-id` to $GITHUB_OUTPUT when set, and exits 1 on a refusal.
//
// Where it comes from: in a GitHub Actions job granted `permissions: id-token: write` the runner
// sets ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN; the script then asks GitHub
// for an OIDC token for the audience SLUICE_OIDC_AUDIENCE (default: SLUICE_URL without a trailing
// slash, what Sluice expects unless its operator set DISPATCH_OIDC_AUDIENCE) and sends it as
// X-Sluice-OIDC-Token, so Sluice knows the branch (and GitHub environment) the workflow ran in.
// SLUICE_OIDC=false sends none; SLUICE_OIDC_TOKEN sends a token obtained otherwise. Without a
// token (local use) the key alone dispatches checks and deploys to environments that restrict no
// branch.
//
// `node scripts/dispatch.mjs key <owner/name>` prints a repository's key from the operator's
// DISPATCH_SECRET (in the environment): store it as that repository's SLUICE_DISPATCH_KEY secret.
import { createHmac } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

// A dispatch is answered once GitHub named the revision: a few calls, well under this.
const REQUEST_TIMEOUT_MS = 30_000;
// GitHub's token endpoint answers in well under a second.
const OIDC_REQUEST_TIMEOUT_MS = 15_000;

// The job's OIDC token for `audience`, from the runner's endpoint (what @actions/core's
// getIDToken does): GET <request URL>&audience=<audience> with the request token as bearer.
export async function requestOidcToken({ requestUrl, requestToken, audience }) {
  const url = `${requestUrl}&audience=${encodeURIComponent(audience)}`;
  const res = await fetch(url, {
    headers: { Authorization: `Bearer ${requestToken}`, Accept: 'application/json; api-version=2.0' },
    signal: AbortSignal.timeout(OIDC_REQUEST_TIMEOUT_MS),
  });
  const json = await res.json().catch(() => null);
  if (res.status !== 200 || typeof json?.value !== 'string') {
    throw new Error(`GitHub did not issue an OIDC token (${res.status}): does the job grant \`permissions: id-token: write\`?`);
  }
  return json.value;
}

// The token to send: SLUICE_OIDC_TOKEN, else the job's when the runner offers one, else none.
async function oidcTokenFrom(env) {
  if (env.SLUICE_OIDC === 'false') return undefined;
  if (env.SLUICE_OIDC_TOKEN) return env.SLUICE_OIDC_TOKEN;
  if (!env.ACTIONS_ID_TOKEN_REQUEST_URL || !env.ACTIONS_ID_TOKEN_REQUEST_TOKEN) return undefined;
  const audience = env.SLUICE_OIDC_AUDIENCE || env.SLUICE_URL.replace(/\/+$/, '');
  const token = await requestOidcToken({
    requestUrl: env.ACTIONS_ID_TOKEN_REQUEST_URL,
    requestToken: env.ACTIONS_ID_TOKEN_REQUEST_TOKEN,
    audience,
  });
  // The runner hides it from the job's log from here on.
  if (env.GITHUB_ACTIONS === 'true') console.log(`::add-mask::${token}`);
  return token;
}

// A repository's dispatch key (src/http/dispatch.rs `repository_key`): one repository's
// workflows can dispatch for it alone.
export function repositoryKey(secret, repo) {
  return createHmac('sha256', secret).update(`sluice-dispatch:${repo.toLowerCase()}`).digest('hex');
}

export function dispatchBody({ run, repo, branch, sha, inputs }) {
  const body = { run, repo };
  if (branch) body.branch = branch;
  if (sha) body.sha = sha;
  if (inputs && Object.keys(inputs).length > 0) body.inputs = inputs;
  return JSON.stringify(body);
}

export function signDispatch(key, timestampS, body) {
  return `sha256=${createHmac('sha256', key).update(`${timestampS}.${body}`).digest('hex')}`;
}

// Sends one dispatch signed with the repository's key, with `oidcToken` when given; `timestampS`
// and `signature` may be forced (tests of refusals).
export async function dispatch(url, key, body, { timestampS = Math.floor(Date.now() / 1000), signature, oidcToken } = {}) {
  const res = await fetch(`${url.replace(/\/$/, '')}/v1/dispatch`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      'X-Sluice-Timestamp': String(timestampS),
      'X-Sluice-Signature': signature ?? signDispatch(key, timestampS, body),
      ...(oidcToken ? { 'X-Sluice-OIDC-Token': oidcToken } : {}),
    },
    body,
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
  });
  return { status: res.status, json: await res.json().catch(() => null) };
}

async function main() {
  const env = process.env;
  if (process.argv[2] === 'key') {
    if (!env.DISPATCH_SECRET || !process.argv[3]) throw new Error('usage: DISPATCH_SECRET=... node scripts/dispatch.mjs key <owner/name>');
    console.log(repositoryKey(env.DISPATCH_SECRET, process.argv[3]));
    return;
  }
  const missing = ['SLUICE_URL', 'SLUICE_DISPATCH_KEY', 'SLUICE_RUN', 'SLUICE_REPO'].filter((k) => !env[k]);
  if (missing.length > 0) throw new Error(`${missing.join(', ')} must be set`);
  const body = dispatchBody({
    run: env.SLUICE_RUN,
    repo: env.SLUICE_REPO,
    branch: env.SLUICE_BRANCH,
    sha: env.SLUICE_SHA,
    inputs: JSON.parse(env.SLUICE_INPUTS || '{}'),
  });
  const oidcToken = await oidcTokenFrom(env);
  const { status, json } = await dispatch(env.SLUICE_URL, env.SLUICE_DISPATCH_KEY, body, { oidcToken });
  console.log(JSON.stringify(json));
  if (status !== 202) {
    console.error(`sluice refused the dispatch: ${status} ${json?.error?.code ?? ''} ${json?.error?.message ?? ''}`);
    process.exit(1);
  }
  if (env.GITHUB_OUTPUT) appendFileSync(env.GITHUB_OUTPUT, `instance-id=${json.instance_id}\n`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  main().catch((e) => {
    console.error(`sluice dispatch: ${e.message}`);
    process.exit(1);
  });
}
