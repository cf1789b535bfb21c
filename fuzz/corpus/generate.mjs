#!/usr/bin/env node
// Writes the seed corpus of every fuzz target under fuzz/corpus/<target>/ (docs/fuzzing.md).
// Deterministic: the same files, byte for byte, on every run; each target's folder is emptied
// first, so what is committed is exactly what this script writes. Run it after changing it:
//   node fuzz/corpus/generate.mjs
//
// The webhook payloads follow the shapes GitHub documents for each event and action (field
// names, nesting, types), filled with made-up values (octo/hello, ana, ...). Two are written in
// full (every URL field GitHub sends), the others carry the documented fields without the
// repetitive *_url ones, to keep the corpus small and the fuzzer fast. The `.sluice.toml`
// seeds are README.md's example (read from README.md when this runs) and the configurations the
// unit tests of src/runs/kit/config.rs use. Routes are the ones src/http/routes.rs serves.
//
// Inputs that once made a target fail belong in REGRESSIONS below (base64), so regenerating
// the corpus keeps them.

import { createHmac } from 'node:crypto';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');

// Must equal FUZZ_SECRET in fuzz/src/lib.rs: the secret a webhook_intake input is checked
// against unless it names its own. A fuzzing value only.
const FUZZ_SECRET = 'fuzz-only-webhook-secret';
// Must equal the ACCESS_* constants in fuzz/src/lib.rs: the team, audience, time and fixed key
// an access_jwt input is checked against, and its signature placeholder.
const ACCESS_ISSUER = 'https://fuzz-team.cloudflareaccess.com';
const ACCESS_AUD = 'fuzz-aud';
const ACCESS_NOW_S = 1764504000;
const ACCESS_KID = 'fuzz-key-1';
const ACCESS_N = Buffer.alloc(256, 0xc3).toString('base64url');
const ACCESS_SIGN = 'SIGN';
// Must equal SIGN_PLACEHOLDER in fuzz/src/lib.rs: "the right signature of this body".
const SIGN = 'sign';
// Seeds above this size would slow every execution of their target; the full-shape payloads
// are the largest and stay below it.
const SEED_BYTES_MAX = 24 * 1024;

const TARGETS = [
  'webhook_intake',
  'webhook_signature',
  'webhook_parse',
  'sluice_toml',
  'duration',
  'routes',
  'instance_id',
  'api_bodies',
  'admin_auth',
  'access_jwt',
  'dashboard_forms',
  'agent_protocol',
];

// Inputs that made a target fail, as { target, name, base64, why }. None has been a panic of
// Sluice; these two failed the harness's first, too literal checks (kept so the checks that
// replaced them stay exercised).
const REGRESSIONS = [
  {
    target: 'webhook_intake',
    name: 'secret-is-words-of-a-message',
    why: 'the secret "Signature-256 is not sha25" is part of the fixed message for a malformed signature',
    base64: 'WC1HaXRIdWItRXZlbnQ6IHBpbmcKWC1HaXRIdWItRGVsaXZlcnk6IDEKQ29udGVudC1UeXBlOiBhcHBsaWNhdGlvbi9qc29uClgtSHViLVNpZ25hdHVyZS0yNTY6IHNoYTI1Nj16egpYLUZ1enotU2VjcmV0OiBTaWduYXR1cmUtMjU2IGlzIG5vdCBzaGEyNQoKe30=',
  },
  {
    target: 'admin_auth',
    name: 'token-is-words-of-a-message',
    why: 'the token " Bearer " is part of the fixed message for a missing Authorization header',
    base64: 'IEJlYXJlciA=',
  },
];

// --- GitHub payload shapes -------------------------------------------------------------------

const API = 'https://api.github.com';
const WEB = 'https://github.com';
const SHA_HEAD = '0123456789abcdef0123456789abcdef01234567';
const SHA_BASE = 'fedcba9876543210fedcba9876543210fedcba98';
const SHA_PUSH = '89abcdef0123456789abcdef0123456789abcdef';
const SHA_ZERO = '0'.repeat(40);
const STAMP = '2026-11-30T12:00:00Z';
const INSTALLATION = { id: 42, node_id: 'MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNDI=' };

function user(login, id, type = 'User', full = false) {
  const u = { login, id, node_id: `MDQ6VXNlcj${id}`, type, site_admin: false };
  if (full) {
    Object.assign(u, {
      avatar_url: `https://avatars.githubusercontent.com/u/${id}?v=4`,
      gravatar_id: '',
      url: `${API}/users/${login}`,
      html_url: `${WEB}/${login}`,
      followers_url: `${API}/users/${login}/followers`,
      following_url: `${API}/users/${login}/following{/other_user}`,
      gists_url: `${API}/users/${login}/gists{/gist_id}`,
      starred_url: `${API}/users/${login}/starred{/owner}{/repo}`,
      subscriptions_url: `${API}/users/${login}/subscriptions`,
      organizations_url: `${API}/users/${login}/orgs`,
      repos_url: `${API}/users/${login}/repos`,
      events_url: `${API}/users/${login}/events{/privacy}`,
      received_events_url: `${API}/users/${login}/received_events`,
    });
  }
  return u;
}

const OCTO = (full) => user('octo', 1001, 'Organization', full);
const ANA = (full) => user('ana', 2002, 'User', full);

function repo(owner, name, { full = false, id = 3003, push = false } = {}) {
  const fullName = `${owner.login}/${name}`;
  const r = {
    id,
    node_id: `MDEwOlJlcG9zaXRvcnk${id}`,
    name,
    full_name: fullName,
    private: false,
    owner: push ? { name: owner.login, email: null, ...owner } : owner,
    html_url: `${WEB}/${fullName}`,
    description: 'A repository Sluice checks and deploys',
    fork: false,
    url: `${API}/repos/${fullName}`,
    created_at: push ? 1764504000 : '2026-01-01T00:00:00Z',
    updated_at: STAMP,
    pushed_at: push ? 1764504000 : STAMP,
    git_url: `git://github.com/${fullName}.git`,
    ssh_url: `git@github.com:${fullName}.git`,
    clone_url: `${WEB}/${fullName}.git`,
    svn_url: `${WEB}/${fullName}`,
    homepage: null,
    size: 12,
    stargazers_count: 3,
    watchers_count: 3,
    language: 'Rust',
    has_issues: true,
    has_projects: true,
    has_downloads: true,
    has_wiki: true,
    has_pages: false,
    forks_count: 1,
    mirror_url: null,
    archived: false,
    disabled: false,
    open_issues_count: 1,
    license: null,
    allow_forking: true,
    is_template: false,
    topics: [],
    visibility: 'public',
    forks: 1,
    open_issues: 1,
    watchers: 3,
    default_branch: 'main',
  };
  if (push) Object.assign(r, { stargazers: 3, master_branch: 'main', organization: owner.login });
  if (full) {
    const u = `${API}/repos/${fullName}`;
    Object.assign(r, {
      forks_url: `${u}/forks`,
      keys_url: `${u}/keys{/key_id}`,
      collaborators_url: `${u}/collaborators{/collaborator}`,
      teams_url: `${u}/teams`,
      hooks_url: `${u}/hooks`,
      issue_events_url: `${u}/issues/events{/number}`,
      events_url: `${u}/events`,
      assignees_url: `${u}/assignees{/user}`,
      branches_url: `${u}/branches{/branch}`,
      tags_url: `${u}/tags`,
      blobs_url: `${u}/git/blobs{/sha}`,
      git_tags_url: `${u}/git/tags{/sha}`,
      git_refs_url: `${u}/git/refs{/sha}`,
      trees_url: `${u}/git/trees{/sha}`,
      statuses_url: `${u}/statuses/{sha}`,
      languages_url: `${u}/languages`,
      stargazers_url: `${u}/stargazers`,
      contributors_url: `${u}/contributors`,
      subscribers_url: `${u}/subscribers`,
      subscription_url: `${u}/subscription`,
      commits_url: `${u}/commits{/sha}`,
      git_commits_url: `${u}/git/commits{/sha}`,
      comments_url: `${u}/comments{/number}`,
      issue_comment_url: `${u}/issues/comments{/number}`,
      contents_url: `${u}/contents/{+path}`,
      compare_url: `${u}/compare/{base}...{head}`,
      merges_url: `${u}/merges`,
      archive_url: `${u}/{archive_format}{/ref}`,
      downloads_url: `${u}/downloads`,
      issues_url: `${u}/issues{/number}`,
      pulls_url: `${u}/pulls{/number}`,
      milestones_url: `${u}/milestones{/number}`,
      notifications_url: `${u}/notifications{?since,all,participating}`,
      labels_url: `${u}/labels{/name}`,
      releases_url: `${u}/releases{/id}`,
      deployments_url: `${u}/deployments`,
    });
  }
  return r;
}

function pullRequestEvent(action, { full = false, draft = false, sender = ANA(full), headRepo, headSha = SHA_HEAD } = {}) {
  const base = repo(OCTO(full), 'hello', { full });
  const head = headRepo ?? base;
  const n = 7;
  const prUrl = `${API}/repos/octo/hello/pulls/${n}`;
  const pr = {
    url: prUrl,
    id: 900007,
    node_id: 'PR_kwDOAAAAAA4AAAAH',
    html_url: `${WEB}/octo/hello/pull/${n}`,
    diff_url: `${WEB}/octo/hello/pull/${n}.diff`,
    patch_url: `${WEB}/octo/hello/pull/${n}.patch`,
    issue_url: `${API}/repos/octo/hello/issues/${n}`,
    number: n,
    state: action === 'closed' ? 'closed' : 'open',
    locked: false,
    title: 'Make the greeting configurable',
    user: ANA(full),
    body: 'Adds `GREETING`; `cargo test` covers it.\r\n\r\n- [x] tests',
    created_at: STAMP,
    updated_at: STAMP,
    closed_at: action === 'closed' ? STAMP : null,
    merged_at: null,
    merge_commit_sha: null,
    assignee: null,
    assignees: [],
    requested_reviewers: [],
    requested_teams: [],
    labels: [{ id: 11, node_id: 'LA_kwDO', url: `${API}/repos/octo/hello/labels/ci`, name: 'ci', color: 'ededed', default: false, description: null }],
    milestone: null,
    draft,
    head: { label: `${head.owner.login}:feature`, ref: 'feature', sha: headSha, user: head.owner, repo: head },
    base: { label: 'octo:main', ref: 'main', sha: SHA_BASE, user: base.owner, repo: base },
    author_association: 'CONTRIBUTOR',
    auto_merge: null,
    active_lock_reason: null,
    merged: false,
    mergeable: null,
    rebaseable: null,
    mergeable_state: 'unknown',
    merged_by: null,
    comments: 0,
    review_comments: 0,
    maintainer_can_modify: false,
    commits: 1,
    additions: 10,
    deletions: 2,
    changed_files: 2,
  };
  if (full) {
    Object.assign(pr, {
      commits_url: `${prUrl}/commits`,
      review_comments_url: `${prUrl}/comments`,
      review_comment_url: `${API}/repos/octo/hello/pulls/comments{/number}`,
      comments_url: `${API}/repos/octo/hello/issues/${n}/comments`,
      statuses_url: `${API}/repos/octo/hello/statuses/${headSha}`,
      _links: {
        self: { href: prUrl },
        html: { href: `${WEB}/octo/hello/pull/${n}` },
        issue: { href: `${API}/repos/octo/hello/issues/${n}` },
        comments: { href: `${API}/repos/octo/hello/issues/${n}/comments` },
        review_comments: { href: `${prUrl}/comments` },
        review_comment: { href: `${API}/repos/octo/hello/pulls/comments{/number}` },
        commits: { href: `${prUrl}/commits` },
        statuses: { href: `${API}/repos/octo/hello/statuses/${headSha}` },
      },
    });
  }
  const event = { action, number: n, pull_request: pr, repository: base, organization: { login: 'octo', id: 1001 }, sender, installation: INSTALLATION };
  if (action === 'synchronize') Object.assign(event, { before: SHA_BASE, after: headSha });
  return event;
}

function commit(id, message) {
  const who = { name: 'Ana', email: 'ana@example.com', username: 'ana' };
  return {
    id,
    tree_id: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
    distinct: true,
    message,
    timestamp: '2026-11-30T12:00:00+01:00',
    url: `${WEB}/octo/hello/commit/${id}`,
    author: who,
    committer: who,
    added: [],
    removed: [],
    modified: ['src/main.rs'],
  };
}

function pushEvent({ full = false, ref = 'refs/heads/main', before = SHA_BASE, after = SHA_PUSH, deleted = false, sender = ANA(full) } = {}) {
  const created = before === SHA_ZERO;
  const head = deleted ? null : commit(after, 'Make the greeting configurable');
  return {
    ref,
    before,
    after,
    repository: repo(OCTO(full), 'hello', { full, push: true }),
    pusher: { name: 'ana', email: 'ana@example.com' },
    organization: { login: 'octo', id: 1001 },
    sender,
    installation: INSTALLATION,
    created,
    deleted,
    forced: false,
    base_ref: null,
    compare: `${WEB}/octo/hello/compare/${before.slice(0, 12)}...${after.slice(0, 12)}`,
    commits: head ? [head] : [],
    head_commit: head,
  };
}

const APP = { id: 77, slug: 'sluice', node_id: 'A_kwHOAAAATQ', owner: OCTO(false), name: 'Sluice', description: '', external_url: 'https://sluice.example.com', html_url: `${WEB}/apps/sluice`, created_at: STAMP, updated_at: STAMP, permissions: { checks: 'write', contents: 'read', metadata: 'read' }, events: ['pull_request', 'push'] };

function pingEvent() {
  return {
    zen: 'Design for failure.',
    hook_id: 123456,
    hook: {
      type: 'App',
      id: 123456,
      name: 'web',
      active: true,
      events: ['pull_request', 'push'],
      config: { content_type: 'json', insecure_ssl: '0', url: 'https://sluice.example.com/webhooks/github' },
      updated_at: STAMP,
      created_at: STAMP,
      app_id: 77,
      deliveries_url: `${API}/app/hook/deliveries`,
    },
  };
}

function checkSuite(action) {
  return {
    id: 5005,
    node_id: 'CS_kwDOAAAAAAAAAAA',
    head_branch: 'feature',
    head_sha: SHA_HEAD,
    status: action === 'completed' ? 'completed' : 'queued',
    conclusion: null,
    url: `${API}/repos/octo/hello/check-suites/5005`,
    before: SHA_BASE,
    after: SHA_HEAD,
    pull_requests: [{ url: `${API}/repos/octo/hello/pulls/7`, id: 900007, number: 7, head: { ref: 'feature', sha: SHA_HEAD, repo: { id: 3003, url: `${API}/repos/octo/hello`, name: 'hello' } }, base: { ref: 'main', sha: SHA_BASE, repo: { id: 3003, url: `${API}/repos/octo/hello`, name: 'hello' } } }],
    app: APP,
    created_at: STAMP,
    updated_at: STAMP,
    rerequestable: true,
    runs_rerequestable: true,
    latest_check_runs_count: 1,
    check_runs_url: `${API}/repos/octo/hello/check-suites/5005/check-runs`,
    head_commit: { id: SHA_HEAD, tree_id: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', message: 'Make the greeting configurable', timestamp: STAMP, author: { name: 'Ana', email: 'ana@example.com' }, committer: { name: 'Ana', email: 'ana@example.com' } },
  };
}

function checkRunEvent(action) {
  const event = {
    action,
    check_run: {
      id: 6006,
      name: 'sluice/check',
      node_id: 'CR_kwDOAAAAAAAAAAA',
      head_sha: SHA_HEAD,
      external_id: 'check-octo-hello-0123456789ab-1a2b3c4d',
      url: `${API}/repos/octo/hello/check-runs/6006`,
      html_url: `${WEB}/octo/hello/runs/6006`,
      details_url: 'https://sluice.example.com/v1/executions/check-octo-hello-0123456789ab-1a2b3c4d',
      status: 'completed',
      conclusion: 'failure',
      started_at: STAMP,
      completed_at: STAMP,
      output: { title: 'cargo test failed', summary: 'exit code 101', text: null, annotations_count: 0, annotations_url: `${API}/repos/octo/hello/check-runs/6006/annotations` },
      check_suite: checkSuite('completed'),
      app: APP,
      pull_requests: checkSuite('completed').pull_requests,
    },
    repository: repo(OCTO(false), 'hello'),
    sender: ANA(false),
    installation: INSTALLATION,
  };
  if (action === 'requested_action') event.requested_action = { identifier: 'approve' };
  return event;
}

function checkSuiteEvent(action) {
  return { action, check_suite: checkSuite(action), repository: repo(OCTO(false), 'hello'), sender: ANA(false), installation: INSTALLATION };
}

// GitHub's merge queue: `merge_group` with `checks_requested` (a group's commit to check) or
// `destroyed` (with a reason). The group's head commit is GitHub's simple commit shape.
function mergeGroupEvent(action, reason) {
  const headRef = `refs/heads/gh-readonly-queue/main/pr-7-${SHA_BASE}`;
  const head = commit(SHA_HEAD, 'Merge pull request #7');
  const event = {
    action,
    merge_group: {
      head_sha: SHA_HEAD,
      head_ref: headRef,
      base_sha: SHA_BASE,
      base_ref: 'refs/heads/main',
      head_commit: { id: head.id, tree_id: head.tree_id, message: head.message, timestamp: head.timestamp, author: head.author, committer: head.committer },
    },
    repository: repo(OCTO(false), 'hello'),
    sender: ANA(false),
    installation: INSTALLATION,
  };
  if (reason) event.reason = reason;
  return event;
}

// Each event as (X-GitHub-Event, file name, payload).
const EVENTS = [
  ['pull_request', 'pull_request-opened-full', pullRequestEvent('opened', { full: true })],
  ['pull_request', 'pull_request-synchronize', pullRequestEvent('synchronize')],
  ['pull_request', 'pull_request-reopened', pullRequestEvent('reopened')],
  ['pull_request', 'pull_request-ready_for_review', pullRequestEvent('ready_for_review')],
  ['pull_request', 'pull_request-closed', pullRequestEvent('closed')],
  ['pull_request', 'pull_request-opened-draft', pullRequestEvent('opened', { draft: true })],
  ['pull_request', 'pull_request-opened-by-bot', pullRequestEvent('opened', { sender: user('dependabot[bot]', 49699333, 'Bot') })],
  ['pull_request', 'pull_request-opened-from-fork', pullRequestEvent('opened', { headRepo: { ...repo(ANA(false), 'hello', { id: 4004 }), fork: true } })],
  ['push', 'push-main-full', pushEvent({ full: true })],
  ['push', 'push-new-branch', pushEvent({ ref: 'refs/heads/release', before: SHA_ZERO })],
  ['push', 'push-branch-deleted', pushEvent({ ref: 'refs/heads/feature', after: SHA_ZERO, deleted: true })],
  ['push', 'push-tag', pushEvent({ ref: 'refs/tags/v1.0.0' })],
  ['ping', 'ping', pingEvent()],
  ['check_run', 'check_run-rerequested', checkRunEvent('rerequested')],
  ['check_run', 'check_run-requested_action', checkRunEvent('requested_action')],
  ['check_suite', 'check_suite-requested', checkSuiteEvent('requested')],
  ['check_suite', 'check_suite-rerequested', checkSuiteEvent('rerequested')],
  ['merge_group', 'merge_group-checks_requested', mergeGroupEvent('checks_requested')],
  ['merge_group', 'merge_group-destroyed', mergeGroupEvent('destroyed', 'dequeued')],
];

// --- seeds per target --------------------------------------------------------------------------

const seeds = new Map(TARGETS.map((t) => [t, []]));
const add = (target, name, content) => seeds.get(target).push([name, Buffer.from(content)]);

const DELIVERY = '72d3162e-cc78-11e3-81ab-4c9367dc0958';
function request(event, body, { signature = SIGN, contentType = 'application/json', extra = [] } = {}) {
  const lines = [];
  if (event !== null) lines.push(`X-GitHub-Event: ${event}`);
  lines.push(`X-GitHub-Delivery: ${DELIVERY}`);
  if (contentType !== null) lines.push(`Content-Type: ${contentType}`);
  if (signature !== null) lines.push(`X-Hub-Signature-256: ${signature}`);
  lines.push(...extra);
  return `${lines.join('\n')}\n\n${body}`;
}
const hmac = (secret, body) => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

for (const [event, name, payload] of EVENTS) {
  const body = JSON.stringify(payload);
  add('webhook_intake', name, request(event, body));
  add('webhook_parse', name, `${event}\n${body}`);
}
// Caused by Sluice's own App (its bot user, fuzz/src/lib.rs's APP_SLUG): starts nothing.
const ownAppBody = JSON.stringify(pullRequestEvent('opened', { sender: user('sluice[bot]', 49699334, 'Bot') }));
add('webhook_intake', 'pull_request-opened-by-own-app', request('pull_request', ownAppBody));
const prBody = JSON.stringify(pullRequestEvent('synchronize'));
const pushBody = JSON.stringify(pushEvent());
add('webhook_intake', 'signed-literally', request('pull_request', prBody, { signature: hmac(FUZZ_SECRET, prBody) }));
add('webhook_intake', 'signed-uppercase-hex', request('push', pushBody, { signature: `sha256=${hmac(FUZZ_SECRET, pushBody).slice(7).toUpperCase()}` }));
add('webhook_intake', 'content-type-charset', request('push', pushBody, { contentType: 'application/json; charset=utf-8' }));
add('webhook_intake', 'content-type-form', request('push', pushBody, { contentType: 'application/x-www-form-urlencoded' }));
add('webhook_intake', 'no-signature', request('push', pushBody, { signature: null }));
add('webhook_intake', 'wrong-signature', request('push', pushBody, { signature: hmac('another secret', pushBody) }));
add('webhook_intake', 'sha1-signature', request('push', pushBody, { signature: 'sha1=3d9e1d1e8f7c6a5b4c3d2e1f0a9b8c7d6e5f4a3b' }));
add('webhook_intake', 'no-secret-configured', request('push', pushBody, { extra: ['X-Fuzz-Secret:'] }));
add('webhook_intake', 'own-secret', request('ping', JSON.stringify(pingEvent()), { extra: ['X-Fuzz-Secret: It\'s a Secret to Everybody'] }));
add('webhook_intake', 'no-event', request(null, pushBody));
add('webhook_intake', 'declared-too-large', request('push', pushBody, { extra: ['Content-Length: 26214401'] }));
add('webhook_intake', 'not-json', request('push', 'payload=%7B%22ref%22%3A%22refs%2Fheads%2Fmain%22%7D'));
add('webhook_intake', 'array-body', request('pull_request', '[{"action":"opened"}]'));
add('webhook_intake', 'wrong-shape', request('pull_request', '{"action":"opened","number":"seven"}'));

// GitHub's documented test vector, then variants of it.
const DOC_SECRET = "It's a Secret to Everybody";
const DOC_BODY = 'Hello, World!';
const DOC_SIG = 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';
if (hmac(DOC_SECRET, DOC_BODY) !== DOC_SIG) throw new Error("GitHub's test vector does not verify");
add('webhook_signature', 'github-test-vector', `${DOC_SECRET}\n${DOC_SIG}\n${DOC_BODY}`);
add('webhook_signature', 'uppercase-hex', `${DOC_SECRET}\nsha256=${DOC_SIG.slice(7).toUpperCase()}\n${DOC_BODY}`);
add('webhook_signature', 'whitespace', `${DOC_SECRET}\nsha256= ${DOC_SIG.slice(7)} \n${DOC_BODY}`);
add('webhook_signature', 'absent', `${DOC_SECRET}\n<none>\n${DOC_BODY}`);
add('webhook_signature', 'sha1', `${DOC_SECRET}\nsha1=01a5f4b7c1e2d3f4a5b6c7d8e9f0a1b2c3d4e5f6\n${DOC_BODY}`);
add('webhook_signature', 'odd-hex', `${DOC_SECRET}\nsha256=abc\n${DOC_BODY}`);
add('webhook_signature', 'empty-secret', `\n${hmac('', DOC_BODY)}\n${DOC_BODY}`);
const longSecret = 'k'.repeat(100); // longer than SHA-256's block: HMAC hashes it first
add('webhook_signature', 'long-secret', `${longSecret}\n${hmac(longSecret, prBody)}\n${prBody}`);

// .sluice.toml: README's example, then the unit tests' configurations.
const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
// The .sluice.toml example is the block with a [check] table (README also shows ENVIRONMENTS).
const tomlBlock = [...readme.matchAll(/```toml\n([\s\S]*?)```/g)].find((m) => m[1].includes('[check]'));
if (!tomlBlock) throw new Error('README.md has no ```toml block with [check]');
add('sluice_toml', 'readme-example', tomlBlock[1]);
for (const [name, text] of [
  ['check', '[check]\ncommand = "cargo test"\ntimeout = "10m"\n'],
  ['check-default-timeout', '[check]\ncommand = "npm test"\n'],
  ['deploy-queue', '[deploy]\nbranch = "main"\ncommand = "./deploy"\nenvironment = "production"\n[deploy.queue]\nsupersede_after = "30m"\n'],
  ['deploy-lane', '[deploy]\nbranch = "main"\ncommand = "./deploy.sh staging"\nlabel = "staging"\nconfirm = true\ntimeout = "45m"\n[deploy.queue]\nsupersede = false\nqueued_timeout = "2h"\nconfirmation_timeout = "12h"\n'],
  ['inline-tables', 'check = { command = "make check", timeout = "1h" }\ndeploy = { branch = "main", command = "make deploy", queue = { supersede = true } }\n'],
  ['unknown-table', '[chek]\ncommand = "x"'],
  ['empty-command', '[check]\ncommand = ""'],
  ['timeout-too-long', '[check]\ncommand = "x"\ntimeout = "2h"'],
  ['not-toml', 'not toml ['],
  ['bad-environment-name', '[deploy]\nbranch = "main"\ncommand = "x"\nenvironment = "Prod Env"'],
  ['secrets-refused', '[deploy]\nbranch = "main"\ncommand = "x"\nsecrets = ["GITHUB_APP_PRIVATE_KEY"]'],
  ['bad-queue-duration', '[deploy]\nbranch = "main"\ncommand = "x"\n[deploy.queue]\nqueued_timeout = "1.5h"'],
  ['multiline-command', "[check]\ncommand = '''\ncargo fmt --check\ncargo test\n'''\n"],
]) add('sluice_toml', name, text);

// Durations: the documented forms, the unit tests' bad ones, and the bounds.
for (const [name, text] of [
  ['30m', '30m'], ['1h30m', '1h30m'], ['500ms', '500ms'], ['72h', '72h'], ['90s', '90s'], ['1d', '1d'],
  ['1h0m0s', '1h0m0s'], ['timeout-max', '3600000ms'], ['timeout-over', '3600001ms'], ['zero', '0s'],
  ['padded', ' 30m\t'], ['empty', ''], ['unit-only', 'm'], ['number-only', '10'], ['unknown-unit', '10x'],
  ['fraction', '1.5h'], ['overflow', '99999999999999999999h'], ['i64-edge', '106751991167d'],
]) add('duration', name, text);

// Routes: method, then path (and query). Every route src/http/routes.rs serves, and refusals.
const ID = 'check-octo-hello-0123456789ab-1a2b3c4d';
for (const [name, method, path] of [
  ['healthz', 'GET', '/healthz'],
  ['webhook', 'POST', '/webhooks/github'],
  ['webhook-get', 'GET', '/webhooks/github'],
  ['list-executions', 'GET', '/v1/executions?run=check&repo=octo%2Fhello&status=running&entity=pr:7'],
  ['create-execution', 'POST', '/v1/executions'],
  ['get-execution', 'GET', `/v1/executions/${ID}`],
  ['send-event', 'POST', `/v1/executions/${ID}/events/deploy-confirm`],
  ['terminate', 'POST', `/v1/executions/${ID}/terminate`],
  ['restart', 'POST', `/v1/executions/${ID}/restart/`],
  ['skip', 'POST', `/v1/executions/${ID}/skip`],
  ['deliveries', 'GET', '/v1/deliveries'],
  ['groups', 'GET', '/v1/groups'],
  ['explain-group', 'GET', '/v1/groups/deploy%3Aocto%2Fhello%3Amain'],
  ['skip-all', 'POST', '/v1/groups/deploy%3Aocto%2Fhello%3Amain%3Astaging/skip-all'],
  ['bad-percent', 'GET', '/v1/groups/%zz'],
  ['bad-id', 'GET', '/v1/executions/a:b'],
  ['unknown-verb', 'POST', '/v1/executions/x/explode'],
  ['not-found', 'GET', '/nope'],
  ['delete', 'DELETE', '/v1/executions'],
]) add('routes', name, `${method}\n${path}`);

// Instance ids and the keys triggers and the API name instances by.
for (const [name, text] of [
  ['valid', 'bench-1'],
  ['check-key', 'check:octo/hello:0123456789ab'],
  ['deploy-key', 'deploy:octo/hello:main:89abcdef0123:000000000000'],
  ['lookalike-a', 'check:a/b-c:0123456789ab'],
  ['lookalike-b', 'check:a-b/c:0123456789ab'],
  ['long-key', `check:${'o/'.repeat(60)}:ffffffffffff`],
  ['max-length', 'x'.repeat(100)],
  ['over-length', 'x'.repeat(101)],
  ['non-ascii', 'é'],
  ['space', 'a b'],
  ['empty', ''],
]) add('instance_id', name, text);

// API bodies: create requests (one, a batch), commands, restart bodies, event payloads.
const checkInput = { repo: 'octo/hello', sha: SHA_HEAD, installation_id: 42, pr_number: 7 };
const create = { key: 'check:octo/hello:0123456789ab', run: 'check', input: checkInput, repo: 'octo/hello', entity: 'pr:7', sha: SHA_HEAD };
for (const [name, value] of [
  ['create-check', create],
  ['create-probe-limits', { key: 'probe-1', run: 'probe', input: { steps: 3, sleep_ms: 1500, ratio: 0.25, note: 'snow \u2603' }, max_steps: 25000, max_duration_ms: 21600000 }],
  ['create-batch', [create, { ...create, key: 'check:octo/hello:fedcba987654', sha: SHA_BASE }]],
  ['command-terminate', { command: 'terminate' }],
  ['command-pause', { command: 'pause' }],
  ['command-resume', { command: 'resume' }],
  ['command-restart-from', { command: 'restart', from_step: 'run deploy command' }],
  ['restart-body', { from_step: 'read config' }],
  ['restart-body-null', { from_step: null }],
  ['event-payload', { approved: true, by: 'ana', at: 1764504000000, note: null }],
]) add('api_bodies', name, JSON.stringify(value));
add('api_bodies', 'duplicate-key', '{"key":"a","key":"b","run":"probe","input":null}');
add('api_bodies', 'wrong-types', '{"key":1,"run":["check"],"input":{},"max_steps":-1}');
add('api_bodies', 'floats', '[1e308,-0.0,5e-324,0.1,123456789012345678901234567890]');
add('api_bodies', 'empty', '');

// Admin auth: token, then the Authorization header (also tried as a Content-Length).
for (const [name, text] of [
  ['ok', 't0k-admin-token\nBearer t0k-admin-token'],
  ['wrong-token', 't0k-admin-token\nBearer nope'],
  ['no-header', 't0k-admin-token\n<none>'],
  ['no-bearer', 't0k-admin-token\nt0k-admin-token'],
  ['unset', '<none>\nBearer x'],
  ['empty-token', '\nBearer '],
  ['length-over', 't\n26214401'],
  ['length-at-limit', 't\n 26214400 '],
]) add('admin_auth', name, text);

// Access tokens: header line, then (optionally) the JWKS body the fake fetch returns. Claims
// in the shape Cloudflare Access documents for a person and for a service token.
const b64url = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
const jwtHeader = { alg: 'RS256', kid: ACCESS_KID, typ: 'JWT' };
const person = {
  aud: [ACCESS_AUD], email: 'ana@example.com', exp: ACCESS_NOW_S + 3600, iat: ACCESS_NOW_S - 60,
  nbf: ACCESS_NOW_S - 60, iss: ACCESS_ISSUER, type: 'app', identity_nonce: 'n0nce', sub: '7335d417-61e4-5a5c-9b3f-aa2d5b8e1c09', country: 'DE',
};
const service = { aud: [ACCESS_AUD], common_name: '88bf3b6d86161464f6509f7219099e57.access', exp: ACCESS_NOW_S + 3600, iat: ACCESS_NOW_S, iss: ACCESS_ISSUER, sub: '', type: 'app' };
const jwt = (header, payload, sig = ACCESS_SIGN) => `${b64url(header)}.${b64url(payload)}.${sig}`;
const jwks = {
  keys: [
    { kid: ACCESS_KID, kty: 'RSA', alg: 'RS256', use: 'sig', e: 'AQAB', n: ACCESS_N },
    { kid: 'ec-key', kty: 'EC', crv: 'P-256', x: 'f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU', y: 'x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0' },
    { kid: 'enc-key', kty: 'RSA', use: 'enc', e: 'AQAB', n: ACCESS_N },
  ],
  public_cert: { kid: ACCESS_KID, cert: '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n' },
};
for (const [name, token, body = ''] of [
  ['person', jwt(jwtHeader, person)],
  ['service-token', jwt(jwtHeader, service)],
  ['aud-string', jwt(jwtHeader, { ...person, aud: ACCESS_AUD })],
  ['fractional-times', jwt(jwtHeader, { ...person, exp: ACCESS_NOW_S + 0.5, iat: ACCESS_NOW_S + 60.5 })],
  ['expired', jwt(jwtHeader, { ...person, exp: ACCESS_NOW_S - 61 })],
  ['not-yet-valid', jwt(jwtHeader, { ...person, nbf: ACCESS_NOW_S + 61 })],
  ['wrong-audience', jwt(jwtHeader, { ...person, aud: ['another-app'] })],
  ['wrong-issuer', jwt(jwtHeader, { ...person, iss: 'https://evil.cloudflareaccess.com' })],
  ['alg-none', jwt({ alg: 'none', kid: ACCESS_KID }, person, '')],
  ['alg-hs256', jwt({ alg: 'HS256', kid: ACCESS_KID }, person)],
  ['crit', jwt({ ...jwtHeader, crit: ['exp'] }, person)],
  ['no-kid', jwt({ alg: 'RS256' }, person)],
  ['unknown-kid', jwt({ ...jwtHeader, kid: 'rotated-away' }, person)],
  ['bad-signature', jwt(jwtHeader, person, Buffer.alloc(256, 7).toString('base64url'))],
  ['two-parts', `${b64url(jwtHeader)}.${b64url(person)}`],
  ['padded', `  ${jwt(jwtHeader, person)} `],
  ['absent', '<none>'],
  ['fetched-keys', jwt(jwtHeader, person), JSON.stringify(jwks)],
  ['fetched-keys-without-kid', jwt({ ...jwtHeader, kid: 'rotated-away' }, person), JSON.stringify(jwks)],
  ['fetched-garbage', jwt(jwtHeader, person), '{"keys":{}}'],
]) add('access_jwt', name, body ? `${token}\n${body}` : token);

// Dashboard forms: list filters (and the next page), action forms, origin checks, URLs.
for (const [name, text] of [
  ['list-filters', 'repo=octo%2Fhello&run=check&status=running&entity=pr%3A7&since=2026-11-01T00%3A00&until=2026-12-01T00:00:00Z&cursor=eyJjIjoxfQ'],
  ['list-before-1970', 'since=1969-12-31&until=0001-01-01T00:00'],
  ['list-odd', 'repo=&run=+check+&&=x&status&a+b=c+d&repo=%zz%4'],
  ['restart-form', 'confirmed=1&csrf=c5rf-t0ken&from_step=run+deploy+command'],
  ['event-form', 'type=+deploy-confirm+&payload=%7B%22ok%22%3Atrue%7D'],
  ['same-origin', 'same-origin\nhttps://sluice.example.com'],
  ['cross-site', 'cross-site\nhttps://evil.example'],
  ['https-url', 'https://logs.example.com/r2/run.log?X-Amz-Signature=abc'],
  ['javascript-url', 'javascript:alert(1)'],
  ['protocol-relative', '//evil.example/x'],
  ['markup', '<script>alert("x")</script> & \'quoted\' &amp;'],
]) add('dashboard_forms', name, text);

// The sandbox agent's protocol: its request bodies and its answers.
const workspace = 'check-octo-hello-0123456789ab-1a2b3c4d';
for (const [name, value] of [
  ['checkout', { workspace, repo_url: `${WEB}/octo/hello.git`, sha: SHA_HEAD, token: 'ghs_not-a-real-token' }],
  ['process', { id: `${workspace}-g1-run`, workspace, command: 'cargo test', timeout_ms: 1800000, env: { SLUICE_SHA: SHA_HEAD, SLUICE_REPO: 'octo/hello' } }],
  ['process-state', { id: `${workspace}-g1-run`, status: 'exited', exit_code: 0, signal: null, output: 'test result: ok\n', output_bytes: 16, output_truncated: false, started_ms: 1764504000000, duration_ms: 1200 }],
  ['process-killed', { id: 'p', status: 'killed', exit_code: null, signal: 9, output: '', output_bytes: 0, output_truncated: false, duration_ms: null }],
  ['workspace-state', { workspace, exists: true, sha: SHA_HEAD }],
  ['error', { error: { code: 'process_not_found', message: 'no process p' } }],
  ['unknown-field', { workspace, repo_url: 'file:///etc', sha: SHA_HEAD, extra: 1 }],
]) add('agent_protocol', name, JSON.stringify(value));
add('agent_protocol', 'path-traversal-id', '../../etc/passwd\n{}');

for (const { target, name, base64 } of REGRESSIONS) add(target, `regression-${name}`, Buffer.from(base64, 'base64'));

// --- write ----------------------------------------------------------------------------------------

let files = 0;
let bytes = 0;
for (const [target, list] of seeds) {
  const dir = join(HERE, target);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const names = new Set();
  for (const [name, content] of list) {
    if (names.has(name)) throw new Error(`${target}: two seeds named ${name}`);
    if (content.length > SEED_BYTES_MAX) throw new Error(`${target}/${name}: ${content.length} bytes > ${SEED_BYTES_MAX}`);
    names.add(name);
    writeFileSync(join(dir, name), content);
    files += 1;
    bytes += content.length;
  }
  if (readdirSync(dir).length !== list.length) throw new Error(`${target}: stray files`);
}
console.log(`fuzz corpus: ${files} seed files, ${bytes} bytes, in ${seeds.size} targets`);
