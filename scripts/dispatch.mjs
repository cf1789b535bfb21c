#!/usr/bin/env node
// Starts a Sluice run: the client of POST /v1/dispatch that action.yml runs (and the end-to-end
// tests use). Reads SLUICE_URL, SLUICE_DISPATCH_KEY (the repository's key), SLUICE_RUN,
// SLUICE_REPO and optional SLUICE_BRANCH, SLUICE_SHA, SLUICE_INPUTS (a JSON object); prints the
// answer, writes `instance-id` to $GITHUB_OUTPUT when set, and exits 1 on a refusal.
//
// `node scripts/dispatch.mjs key <owner/name>` prints a repository's key from the operator's
// DISPATCH_SECRET (in the environment): store it as that repository's SLUICE_DISPATCH_KEY secret.
import { createHmac } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

// A dispatch is answered once GitHub named the revision: a few calls, well under this.
const REQUEST_TIMEOUT_MS = 30_000;

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

// Sends one dispatch signed with the repository's key; `timestampS` and `signature` may be forced
// (tests of refusals).
export async function dispatch(url, key, body, { timestampS = Math.floor(Date.now() / 1000), signature } = {}) {
  const res = await fetch(`${url.replace(/\/$/, '')}/v1/dispatch`, {
    method: 'POST',
    headers: {
      'Content-Type': 'application/json',
      'X-Sluice-Timestamp': String(timestampS),
      'X-Sluice-Signature': signature ?? signDispatch(key, timestampS, body),
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
  const { status, json } = await dispatch(env.SLUICE_URL, env.SLUICE_DISPATCH_KEY, body);
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
