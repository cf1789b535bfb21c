// The stand-in's shared state in one explicit object, the hub every handler is given: its
// configuration, the resources tests and the Worker create, the git children it runs and GitHub
// Actions' OIDC issuer.

import { randomInt } from 'node:crypto';
import { createOidcIssuer, OIDC_PREFIX } from './oidc.mjs';

// Pull request numbers the stand-in allocates start above those tests register by hand.
const FIRST_PULL_NUMBER = 1000;

// `root`: the repositories' directory; `publicKey`: the App's (a KeyObject); `installationIds`: a
// Set of the App's installations.
export function createHub({ root, appId, publicKey, installationIds, tokenTtlSeconds, log }) {
  const state = {
    baseUrl: null,
    calls: [],
    checkRuns: new Map(), // id -> { repo: 'owner/name', run, history }
    checkSuites: new Map(), // 'owner/name@sha' -> suite id
    tokens: new Map(), // token -> { installationId, expiresAtMs, permissions, repositories }
    pulls: new Map(), // 'owner/repo#n' -> { head_sha, head_ref, head_repo, author_association, title, ... }
    comments: new Map(), // 'owner/repo#n' -> [{ id, body, user }]
    releases: new Map(), // 'owner/repo@tag' -> release
    latestReleases: new Map(), // 'owner/repo' -> tag of the release marked Latest
    nextPullNumber: FIRST_PULL_NUMBER,
    nextCommentId: 7_000_000_001,
    nextReleaseId: 8_000_000_001,
    permissions: new Map(), // 'owner/repo:login' -> admin | write | read | none
    deployments: new Map(), // id -> { repo: 'owner/name', deployment, statuses: [oldest first] }
    nextCallSeq: 1,
    // Ids above 2^31 catch 32-bit truncation in clients; the random offset catches hard-coded ids.
    nextCheckRunId: 4_000_000_001 + randomInt(1_000_000) * 1000,
    nextCheckSuiteId: 9_000_000_001 + randomInt(1_000_000) * 1000,
    nextDeploymentId: 3_000_000_001 + randomInt(1_000_000) * 1000,
    nextDeploymentStatusId: 6_000_000_001 + randomInt(1_000_000) * 1000,
    // Latency a test asked for (`POST /_standin/latency`): the next `count` requests whose path
    // starts with `path_prefix` are held `delay_ms` before they are served (`before`: a slow
    // clone) or after their answer was made (`after`: an answer that is old when it arrives).
    latency: [],
  };
  return {
    root,
    appId,
    publicKey,
    installationIds,
    tokenTtlSeconds,
    log,
    state,
    // `git http-backend` processes serving a request, killed at close.
    children: new Set(),
    // GitHub Actions' OIDC issuer (tokens a dispatching workflow sends Sluice).
    oidc: createOidcIssuer(() => `${state.baseUrl}${OIDC_PREFIX}`),
  };
}
