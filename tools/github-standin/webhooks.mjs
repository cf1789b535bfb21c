// Webhook helpers for tests: builders for GitHub `pull_request` and `push` payloads (same shapes
// GitHub sends), HMAC signing as GitHub does it, and a sender that posts like GitHub-Hookshot.

import { createHash, createHmac, randomUUID } from 'node:crypto';

const ZERO_SHA = '0'.repeat(40);

// Stable numeric ids derived from names, so a repository has the same id in webhook payloads and
// in the stand-in's REST responses across runs (the Worker may key state on repository.id).
function stableId(kind, name) {
  return 1_000_000 + (createHash('sha256').update(`${kind}:${name}`).digest().readUInt32BE(0) % 900_000_000);
}

export function repoId(owner, repo) {
  return stableId('repo', `${owner}/${repo}`);
}

export function accountId(login) {
  return stableId('account', login);
}

function nodeId(prefix, id) {
  return `${prefix}_${Buffer.from(String(id)).toString('base64url')}`;
}

function isoNow() {
  return new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
}

function account(login, type) {
  const id = accountId(login);
  return { login, id, node_id: nodeId('U', id), type, site_admin: false, html_url: `https://github.com/${login}` };
}

function repository(owner, repo, cloneUrl) {
  const id = repoId(owner, repo);
  return {
    id,
    node_id: nodeId('R', id),
    name: repo,
    full_name: `${owner}/${repo}`,
    private: false,
    owner: account(owner, 'User'),
    html_url: `https://github.com/${owner}/${repo}`,
    url: `https://api.github.com/repos/${owner}/${repo}`,
    clone_url: cloneUrl ?? `https://github.com/${owner}/${repo}.git`,
    default_branch: 'main',
    fork: false,
    visibility: 'public',
  };
}

function installation(installationId) {
  return { id: installationId, node_id: nodeId('I', installationId) };
}

export function pullRequestPayload({
  owner, repo, sha, action = 'opened', number = 1, draft = false, senderLogin = 'octocat', senderType = 'User',
  installationId = 42, cloneUrl, baseRef = 'main', headRef = 'feature', baseSha = sha,
  headOwner = owner, authorAssociation = 'OWNER', merged = false, closedAt, mergedAt,
}) {
  const repoObj = repository(owner, repo, cloneUrl);
  const user = account(senderLogin, senderType);
  const now = isoNow();
  const closed = action === 'closed';
  // When GitHub dated the close (and the merge): now, unless the caller replays an earlier one.
  const closedOn = closedAt ?? mergedAt ?? now;
  const prId = stableId('pr', `${owner}/${repo}#${number}`);
  return {
    action,
    number,
    pull_request: {
      url: `${repoObj.url}/pulls/${number}`,
      id: prId,
      node_id: nodeId('PR', prId),
      html_url: `${repoObj.html_url}/pull/${number}`,
      number,
      state: closed ? 'closed' : 'open',
      locked: false,
      title: `Pull request #${number}`,
      user,
      body: null,
      created_at: now,
      updated_at: now,
      closed_at: closed ? closedOn : null,
      merged_at: closed && merged ? (mergedAt ?? closedOn) : null,
      merge_commit_sha: null,
      draft,
      // A fork's head lives in the fork (headOwner/repo).
      head: {
        label: `${headOwner}:${headRef}`, ref: headRef, sha, user: account(headOwner, 'User'),
        repo: headOwner === owner ? repoObj : { ...repository(headOwner, repo), fork: true },
      },
      base: { label: `${owner}:${baseRef}`, ref: baseRef, sha: baseSha, user: repoObj.owner, repo: repoObj },
      author_association: authorAssociation,
      merged: closed && merged,
      mergeable: null,
    },
    repository: repoObj,
    sender: user,
    installation: installation(installationId),
  };
}

// A push. For a tag, GitHub names in `after` what the ref names (an annotated tag's object, else
// the commit) and in `head_commit` the commit the tag names (`headCommit`; git.mjs's
// `tagPushShas` reads both from a repository), and lists no `commits`.
export function pushPayload({
  owner, repo, ref = 'refs/heads/main', before = ZERO_SHA, after, installationId = 42, cloneUrl,
  senderLogin = 'octocat', senderType = 'User', message = 'Update files', headCommit = after,
}) {
  // Push payloads differ from other events: repository.owner also carries `name`, and
  // created_at/pushed_at are Unix seconds rather than ISO strings.
  const base = repository(owner, repo, cloneUrl);
  const nowSec = Math.floor(Date.now() / 1000);
  const repoObj = { ...base, owner: { name: owner, ...base.owner }, master_branch: 'main', created_at: nowSec, pushed_at: nowSec };
  const deleted = after === ZERO_SHA;
  const tag = ref.startsWith('refs/tags/');
  const pusher = { name: senderLogin, email: `${senderLogin}@users.noreply.github.com` };
  const commit = deleted ? null : {
    id: headCommit,
    tree_id: null,
    distinct: true,
    message,
    timestamp: isoNow(),
    url: `${base.html_url}/commit/${headCommit}`,
    author: { ...pusher, username: senderLogin },
    committer: { ...pusher, username: senderLogin },
    added: [],
    removed: [],
    modified: [],
  };
  return {
    ref,
    before,
    after,
    created: before === ZERO_SHA,
    deleted,
    forced: false,
    base_ref: null,
    compare: tag && before === ZERO_SHA
      ? `${base.html_url}/compare/${ref.slice('refs/tags/'.length)}`
      : `${base.html_url}/compare/${before.slice(0, 12)}...${after.slice(0, 12)}`,
    commits: commit && !tag ? [commit] : [],
    head_commit: commit,
    repository: repoObj,
    pusher,
    sender: account(senderLogin, senderType),
    installation: installation(installationId),
  };
}

export function signBody(secret, bodyString) {
  return `sha256=${createHmac('sha256', secret).update(bodyString).digest('hex')}`;
}

// A delivery as GitHub sends it: the JSON body and its headers, signed with the webhook secret.
export function signedDelivery({ secret, event, payload, deliveryId = randomUUID() }) {
  const body = JSON.stringify(payload);
  const headers = {
    'Content-Type': 'application/json',
    'X-GitHub-Event': event,
    'X-GitHub-Delivery': deliveryId,
    'X-Hub-Signature-256': signBody(secret, body),
    'User-Agent': 'GitHub-Hookshot/standin',
  };
  return { body, headers, deliveryId };
}

// Transport failures (a kept-alive socket the server closed under us: undici's `fetch failed`)
// are retried with the same delivery id, as GitHub redelivers a delivery it could not hand over.
// Two tries: one stale pooled socket explains a failure; a second failure is a real one.
const SEND_TRIES = 2;

export async function sendWebhook({ url, secret, event, payload, deliveryId = randomUUID() }) {
  const { body, headers } = signedDelivery({ secret, event, payload, deliveryId });
  let res;
  for (let attempt = 1; !res; attempt += 1) {
    try {
      res = await fetch(url, { method: 'POST', headers, body });
    } catch (err) {
      if (attempt >= SEND_TRIES) throw err;
    }
  }
  const text = await res.text();
  let parsed = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // Non-JSON replies (plain "ok", HTML errors) are returned as text.
  }
  return { status: res.status, body: parsed, deliveryId };
}

// `check_run` `requested_action`: someone pressed a button of a check run (GitHub's documented
// shape: the check run, the button's identifier, the repository, the sender, the installation).
export function checkRunRequestedActionPayload({ owner, repo, checkRun, identifier, senderLogin = 'octocat', installationId = 42 }) {
  return {
    action: 'requested_action',
    check_run: checkRun,
    requested_action: { identifier },
    repository: repository(owner, repo),
    sender: account(senderLogin, 'User'),
    installation: installation(installationId),
  };
}

// A pull request as a check run or check suite names it (GitHub's `pull_requests` items: number,
// head and base refs with their shas and repository).
function pullRef({ owner, repo, number, headRef, headSha, baseRef = 'main', baseSha }) {
  const repoObj = { id: repoId(owner, repo), url: `https://api.github.com/repos/${owner}/${repo}`, name: repo };
  return {
    url: `https://api.github.com/repos/${owner}/${repo}/pulls/${number}`,
    id: stableId('pull', `${owner}/${repo}#${number}`),
    number,
    head: { ref: headRef, sha: headSha, repo: repoObj },
    base: { ref: baseRef, sha: baseSha ?? headSha, repo: repoObj },
  };
}

function app(appId) {
  return { id: appId, slug: 'sluice', node_id: nodeId('A', appId), name: 'Sluice', owner: account('octo', 'Organization') };
}

function suite({ owner, repo, headSha, headBranch, pullRequests, appId, status = 'completed' }) {
  const id = stableId('suite', `${owner}/${repo}@${headSha}`);
  return {
    id,
    node_id: nodeId('CS', id),
    head_branch: headBranch,
    head_sha: headSha,
    status,
    conclusion: null,
    url: `https://api.github.com/repos/${owner}/${repo}/check-suites/${id}`,
    before: ZERO_SHA,
    after: headSha,
    pull_requests: pullRequests,
    app: app(appId),
    created_at: isoNow(),
    updated_at: isoNow(),
    rerequestable: true,
    runs_rerequestable: true,
  };
}

// `check_run` `rerequested`: someone pressed Re-run on a check run. `checkRun` is the run as the
// REST API returns it (the stand-in's record); the event adds what GitHub's payload carries
// beside it: the pull requests it belongs to and its check suite with the head branch.
export function checkRunRerequestedPayload({
  owner, repo, checkRun, pullNumber, headBranch = 'feature', appId, senderLogin = 'octocat', installationId = 42,
}) {
  const pullRequests = pullNumber ? [pullRef({ owner, repo, number: pullNumber, headRef: headBranch, headSha: checkRun.head_sha })] : [];
  return {
    action: 'rerequested',
    check_run: {
      ...checkRun,
      app: checkRun.app ?? app(appId),
      pull_requests: pullRequests,
      check_suite: suite({ owner, repo, headSha: checkRun.head_sha, headBranch, pullRequests, appId }),
    },
    repository: repository(owner, repo),
    sender: account(senderLogin, 'User'),
    installation: installation(installationId),
  };
}

// `check_suite` `requested` (GitHub made a suite for a push) or `rerequested` (Re-run all checks).
export function checkSuitePayload({
  action, owner, repo, headSha, headBranch, pullNumbers = [], appId, senderLogin = 'octocat', installationId = 42,
}) {
  const pullRequests = pullNumbers.map((number) => pullRef({ owner, repo, number, headRef: headBranch, headSha }));
  return {
    action,
    check_suite: suite({ owner, repo, headSha, headBranch, pullRequests, appId, status: action === 'requested' ? 'queued' : 'completed' }),
    repository: repository(owner, repo),
    sender: account(senderLogin, 'User'),
    installation: installation(installationId),
  };
}

// `merge_group` (GitHub's merge queue, https://docs.github.com/webhooks/webhook-events-and-payloads#merge_group):
// `checks_requested` when the queue made a group's commit that required checks must report on,
// `destroyed` (with `reason`: merged, invalidated, dequeued) when it threw the group away.
// `headRef` is the group's branch, refs/heads/gh-readonly-queue/<base>/pr-<n>-<base sha>.
export function mergeGroupPayload({
  action, owner, repo, headSha, headRef, baseSha, baseRef = 'refs/heads/main', reason,
  senderLogin = 'octocat', installationId = 42, message = 'Merge queue group',
}) {
  const who = { name: senderLogin, email: `${senderLogin}@users.noreply.github.com` };
  const payload = {
    action,
    merge_group: {
      head_sha: headSha,
      head_ref: headRef,
      base_sha: baseSha,
      base_ref: baseRef,
      head_commit: { id: headSha, tree_id: null, message, timestamp: isoNow(), author: who, committer: who },
    },
    repository: repository(owner, repo),
    sender: account(senderLogin, 'User'),
    installation: installation(installationId),
  };
  if (action === 'destroyed') payload.reason = reason ?? 'merged';
  return payload;
}
