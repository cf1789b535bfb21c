// End-to-end: the dashboard in a real headless Chromium (Debian's `chromium`, driven by
// playwright-core with executablePath) against `wrangler dev`. An unauthenticated request is
// refused; the sign-in link npm start prints signs in; the demo's signed webhooks show up on an
// open executions page without a reload, grouped by repository and entity; the execution page
// shows the step timeline; a group page explains a waiter and a skip from the page takes effect;
// a branch named <script>alert(1)</script> renders as text; a Cloudflare Access JWT (verified by
// the Worker's WebCrypto against keys a local server publishes) opens the API and the pages, and
// a wrong audience, an expired token, a bad signature or an unknown key does not; a GitHub-only
// event posted through the dashboard's form is refused as the API refuses it. Screenshots go to
// $SLUICE_E2E_ARTIFACTS (default target/e2e-artifacts/dashboard/).

import assert from 'node:assert/strict';
import { createSign, generateKeyPairSync } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { chromium } from 'playwright-core';
import { ROOT } from '../../tools/stack/index.mjs';
import { runDemo, waitFinished } from '../../scripts/demo.mjs';
import { pushPayload } from '../../tools/github-standin/webhooks.mjs';
import { INSTALLATION_ID, startStack } from './harness.mjs';

const OWNER = 'acme';
const STACK_START_TIMEOUT_MS = 16 * 60_000;
const TEST_TIMEOUT_MS = 4 * 60_000;
// Pages re-fetch their live regions every 5 s (layout::REFRESH_MS); two checks and three deploys
// finish within a minute here. Both bounds leave room for a loaded 2-core machine.
const LIVE_UPDATE_TIMEOUT_MS = 30_000;
const DEMO_TIMEOUT_MS = 3 * 60_000;
// One navigation or one element to appear: the Worker answers a page in milliseconds.
const PAGE_TIMEOUT_MS = 20_000;
const ARTIFACTS = process.env.SLUICE_E2E_ARTIFACTS || join(ROOT, 'target', 'e2e-artifacts', 'dashboard');
const XSS = '<script>alert(1)</script>';
// A common phone's CSS viewport, and playwright's default desktop one.
const PHONE = { width: 390, height: 844 };
const DESKTOP = { width: 1280, height: 720 };

// The Access application the stack is configured for; its keys come from a local server.
const ACCESS_TEAM = 'sluice-e2e.cloudflareaccess.com';
const ACCESS_AUD = 'sluice-e2e-aud-0123456789abcdef';
const ACCESS_KID = 'e2e-key-1';
const ACCESS_TOKEN_TTL_S = 600;

let stack;
let browser;
let certs;

// Debian's package puts the real binary here; /usr/bin/chromium is a wrapper script.
function chromiumPath() {
  const candidates = [process.env.SLUICE_CHROMIUM, '/usr/lib/chromium/chromium', '/usr/bin/chromium'].filter(Boolean);
  const found = candidates.find((p) => existsSync(p));
  assert.ok(found, `no chromium at ${candidates.join(', ')}: install Debian's chromium (scripts/setup.sh does as root)`);
  return found;
}

before(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  certs = await startCerts();
  stack = await startStack({
    vars: { ACCESS_TEAM_DOMAIN: ACCESS_TEAM, ACCESS_AUD, ACCESS_CERTS_URL: certs.url },
  });
  browser = await chromium.launch({ executablePath: chromiumPath(), headless: true });
}, { timeout: STACK_START_TIMEOUT_MS });

after(async () => {
  await browser?.close();
  await stack?.stop();
  await certs?.close();
});

// The team's JWKS as Access publishes it (/cdn-cgi/access/certs), for a key made here.
function startCerts() {
  const key = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const other = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = { ...key.publicKey.export({ format: 'jwk' }), kid: ACCESS_KID, alg: 'RS256', use: 'sig' };
  const server = createServer((req, res) => {
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({ keys: [jwk] }));
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => resolve({
      url: `http://127.0.0.1:${server.address().port}/cdn-cgi/access/certs`,
      privateKey: key.privateKey,
      otherKey: other.privateKey,
      close: () => new Promise((r) => server.close(r)),
    }));
  });
}

const b64url = (v) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url');

// An Access JWT for a person; `claims` and `opts` override what a wrong token gets wrong.
function accessJwt(claims = {}, { kid = ACCESS_KID, key = certs.privateKey } = {}) {
  const now = Math.floor(Date.now() / 1000);
  const header = b64url({ alg: 'RS256', kid, typ: 'JWT' });
  const payload = b64url({
    iss: `https://${ACCESS_TEAM}`, aud: [ACCESS_AUD], email: 'operator@example.com', sub: 'user-1',
    iat: now, nbf: now, exp: now + ACCESS_TOKEN_TTL_S, ...claims,
  });
  const signature = createSign('RSA-SHA256').update(`${header}.${payload}`).sign(key).toString('base64url');
  return `${header}.${payload}.${signature}`;
}

function uiTest(name, fn) {
  test(name, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    try {
      await fn(t);
    } catch (err) {
      console.error(`\n--- worker log tail (${t.name}) ---\n${stack?.logTail(120) ?? ''}\n`);
      throw err;
    }
  });
}

// A fresh browser context, signed in through the link `npm start` prints (app.js submits the
// token from the fragment, which no server sees). Every dialog the page opens is recorded.
async function signedIn() {
  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(PAGE_TIMEOUT_MS);
  const dialogs = [];
  page.on('dialog', (d) => {
    dialogs.push(d.message());
    d.dismiss().catch(() => {});
  });
  await page.goto(`${stack.url}/ui/login#token=${stack.adminToken}`);
  await page.waitForURL(/\/ui\/executions$/);
  assert.equal(new URL(page.url()).hash, '', 'the token is gone from the address bar');
  return { context, page, dialogs };
}

async function shot(page, name) {
  await page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
}

async function execution(id) {
  const res = await stack.api(`/v1/executions/${id}`);
  assert.equal(res.status, 200, JSON.stringify(res.body));
  return res.body.execution;
}

async function push(repo, sha, { before, branch = 'main' } = {}) {
  const payload = pushPayload({ owner: OWNER, repo, after: sha, before, ref: `refs/heads/${branch}`, installationId: INSTALLATION_ID });
  const res = await stack.sendWebhook('push', payload);
  assert.equal(res.status, 202, JSON.stringify(res.body));
  // A push to the default branch also records its schedules (a `schedules` instance).
  const deploys = res.body.instances.filter((i) => i.run === 'deploy');
  assert.equal(deploys.length, 1, JSON.stringify(res.body));
  return deploys[0].id;
}

uiTest('without credentials the API and the pages are refused, and a page offers sign-in', async () => {
  const api = await stack.api('/v1/executions', { auth: false });
  assert.equal(api.status, 401, JSON.stringify(api.body));
  assert.equal(api.body.error.code, 'unauthorized');
  const forged = await stack.api('/v1/executions', { auth: false, headers: { Cookie: 'sluice_session=4102444800.00ff' } });
  assert.equal(forged.status, 401, 'a forged session cookie is refused');

  const context = await browser.newContext();
  const page = await context.newPage();
  page.setDefaultTimeout(PAGE_TIMEOUT_MS);
  const res = await page.goto(`${stack.url}/ui/groups`);
  assert.equal(res.status(), 401);
  await page.locator('form#login input[name="token"]').waitFor();
  assert.equal(await page.locator('#groups').count(), 0, 'the refusal shows nothing of the groups');
  const posted = page.waitForResponse((r) => r.url().endsWith('/ui/login') && r.request().method() === 'POST');
  await page.goto(`${stack.url}/ui/login#token=not-the-token`);
  assert.equal((await posted).status(), 401, 'app.js posted the wrong token and it was refused');
  await page.locator('form#login').waitFor();
  assert.match(await page.locator('main').innerText(), /not the admin token/);
  assert.ok((await context.cookies()).every((c) => c.name !== 'sluice_session'), 'a wrong token gets no session');
  await shot(page, 'refused');
  await context.close();

  const action = await stack.rawRequest('POST', '/ui/executions/check-x/terminate', {
    headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, body: 'confirmed=1',
  });
  assert.equal(action.status, 401, 'an action without credentials is refused');
});

uiTest('the demo shows up on an open page without a reload, grouped by repository and entity, with step timelines', async () => {
  const repo = 'demo';
  // The demo's first commit is on main before any webhook (deploy config is read there).
  stack.commit(OWNER, repo, { 'README.md': '# demo\n' });
  const { context, page } = await signedIn();
  const res = await page.goto(`${stack.url}/ui/executions?repo=${OWNER}/${repo}`);
  assert.match(res.headers()['content-security-policy'] ?? '', /script-src 'self'/);
  assert.equal(Number(await page.locator('body').getAttribute('data-refresh-ms')) > 0, true, 'the list is live');
  // Marks this document: a full reload would lose it.
  await page.evaluate(() => { window.sluiceNoReload = true; });

  const instances = await runDemo({
    workerUrl: stack.url, webhookSecret: stack.secret, adminToken: stack.adminToken,
    reposDir: stack.reposDir, cloneUrl: stack.cloneUrl(OWNER, repo), owner: OWNER, repo,
  });
  assert.deepEqual(instances.map((i) => i.run), ['check', 'check', 'deploy', 'deploy', 'deploy']);
  const ends = await waitFinished({ workerUrl: stack.url, adminToken: stack.adminToken }, instances.map((i) => i.id), DEMO_TIMEOUT_MS);
  const [passing, failing, ...deploys] = ends;
  assert.equal(passing.status, 'complete', JSON.stringify(passing));
  assert.equal(failing.status, 'complete', JSON.stringify(failing));
  assert.equal(deploys.at(-1).status, 'complete', 'the newest push deploys');
  // An older push ends skipped naming why: superseded in the queue, or not_current when it read
  // the branch head after the newest push landed (which one depends on timing).
  const skippedDeploy = deploys.find((d) => d.status === 'skipped' && ['superseded', 'not_current'].includes(d.reason));
  assert.ok(skippedDeploy, JSON.stringify(deploys));
  const { check_runs: checks } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  assert.equal(checks.find((c) => c.head_sha === passing.sha && c.name === 'sluice/check')?.conclusion, 'success');
  assert.equal(checks.find((c) => c.head_sha === failing.sha && c.name === 'sluice/check')?.conclusion, 'failure');

  // Every execution is on the page that was open all along, in its repository and entity.
  const list = page.locator('#executions');
  for (const e of ends) {
    await list.locator(`a.exec:has-text("${e.id}")`).waitFor({ timeout: LIVE_UPDATE_TIMEOUT_MS });
  }
  assert.equal(await page.evaluate(() => window.sluiceNoReload), true, 'updated without a full reload');
  const text = await list.innerText();
  assert.ok(text.includes(`${OWNER}/${repo}`), text);
  for (const label of ['pull request #101', 'pull request #102', 'branch main', skippedDeploy.reason]) {
    assert.ok(text.includes(label), `the list shows ${label}: ${text}`);
  }
  // A person reads each run's outcome first: the failing pull request's check reads failed,
  // the passing one's passed (both are the engine's `complete`).
  const outcome = async (id) => (await list.locator('tr', { has: page.locator(`a.exec:has-text("${id}")`) })
    .first().locator('td[data-label="Outcome"]').innerText()).trim();
  assert.equal(await outcome(failing.id), 'failed');
  assert.equal(await outcome(passing.id), 'passed');
  await shot(page, 'executions');
  // Readable on a phone: nothing scrolls sideways at a phone's width.
  await page.setViewportSize(PHONE);
  const overflowPx = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflowPx <= 1, `the list scrolls sideways on a phone by ${overflowPx} px`);
  await shot(page, 'executions-phone');
  await page.setViewportSize(DESKTOP);

  // The execution page: its step timeline, attempts and durations.
  await list.locator(`a.exec:has-text("${passing.id}")`).first().click();
  await page.waitForURL(`**/ui/executions/${passing.id}`);
  const timeline = await page.locator('main').innerText();
  for (const step of ['read pull request head', 'create check run', 'complete check run']) {
    assert.ok(timeline.includes(step), `the timeline shows ${step}: ${timeline}`);
  }
  assert.ok(await page.locator('main table tbody tr').count() >= 5, 'one row per step');
  await shot(page, 'execution');

  // The command's log: one link, text/plain, the redacted output; refused without credentials.
  const links = page.locator('a.log');
  assert.equal(await links.count(), 1, 'the command step links its log');
  const href = await links.getAttribute('href');
  const log = await page.request.get(`${stack.url}${href}`);
  assert.equal(log.status(), 200);
  assert.match(log.headers()['content-type'], /^text\/plain/);
  assert.match(log.headers()['content-security-policy'], /sandbox/);
  assert.match(await log.text(), /all tests pass/);
  const anonymous = await stack.rawRequest('GET', href);
  assert.equal(anonymous.status, 401, 'a log needs a credential');

  // The failing pull request's page leads with the failing command's last log lines, then the
  // phases a person knows with their durations, drawn to scale; the engine's own step list is
  // folded one click away.
  await page.goto(`${stack.url}/ui/executions/${failing.id}`);
  const failure = page.locator('#facts .failure');
  assert.match(await failure.locator('pre.tail').innerText(), /test demo::adds \.\.\. FAILED/);
  assert.match(await failure.locator('.how').innerText(), /exited with code 1/);
  assert.equal((await page.locator('#facts dd').first().innerText()).trim(), 'failed');
  const phases = page.locator('#phases');
  const phaseText = await phases.innerText();
  for (const label of ['Checkout and config', 'Command', 'Report', 'run check command', 'read pull request head']) {
    assert.ok(phaseText.includes(label), `the phases show ${label}: ${phaseText}`);
  }
  assert.match(await phases.locator('tr.ph-command td[data-label="Duration"]').innerText(), /\d+ (ms|s|min)/);
  // Each bar is drawn as wide as its width says (SVG geometry: the CSP allows no inline style).
  const drawn = await page.evaluate(() => [...document.querySelectorAll('#phases svg.bars rect')].map((r) => ({
    attr: parseFloat(r.getAttribute('width')),
    px: r.getBoundingClientRect().width,
    track: r.ownerSVGElement.getBoundingClientRect().width,
  })));
  assert.ok(drawn.length >= 4 && drawn.some((d) => d.px > 0), JSON.stringify(drawn));
  for (const d of drawn) {
    assert.ok(Math.abs((d.px / d.track) * 100 - d.attr) <= 1.5, `a bar is drawn to scale: ${JSON.stringify(d)}`);
  }
  const engineSteps = page.locator('details.engine-steps');
  assert.equal(await engineSteps.locator('table.steps').isVisible(), false, 'the step list is folded');
  await engineSteps.locator('summary').click();
  await engineSteps.locator('table.steps').waitFor({ state: 'visible' });
  assert.ok(await engineSteps.locator('tbody tr').count() >= 5, 'one row per step');
  await shot(page, 'execution-failed');

  // Sluice's own bookkeeping (each push's `schedules` instance; a closed pull request's
  // `cancel-checks`) is listed apart.
  const BOOKKEEPING = ['schedules', 'cancel-checks'];
  await page.goto(`${stack.url}/ui/executions?repo=${OWNER}/${repo}`);
  const asked = await page.locator('#executions td[data-label="Run"]').allInnerTexts();
  assert.ok(asked.length >= ends.length && !asked.some((r) => BOOKKEEPING.includes(r)), asked.join());
  await page.locator('a.apart-link').click();
  await page.waitForURL(/bookkeeping=1/);
  const kept = await page.locator('#executions td[data-label="Run"]').allInnerTexts();
  assert.ok(kept.length > 0 && kept.every((r) => BOOKKEEPING.includes(r)), kept.join());
  await context.close();
});

uiTest('a group page explains a waiter, and a skip from the page takes effect', async () => {
  const repo = 'queue';
  const logFile = stack.sharedFile('queue.log');
  const config = `[deploy]\nbranch = "main"\ncommand = "echo start >> ${logFile}; sleep 30"\n`;
  const first = stack.commit(OWNER, repo, { '.sluice.toml': config, 'VERSION': '1\n' });
  const holder = await push(repo, first);
  const group = `deploy:${OWNER}/${repo}:main`;
  const groupPath = `/v1/groups/${encodeURIComponent(group)}`;
  await stack.waitFor(async () => (await stack.api(groupPath)).body.holder?.execution_id === holder,
    { timeoutMs: LIVE_UPDATE_TIMEOUT_MS, message: 'the first deploy to hold its group' });
  const second = stack.commit(OWNER, repo, { '.sluice.toml': config, 'VERSION': '2\n' });
  const waiter = await push(repo, second, { before: first });
  await stack.waitFor(async () => (await stack.api(groupPath)).body.waiters?.some((w) => w.execution_id === waiter),
    { timeoutMs: LIVE_UPDATE_TIMEOUT_MS, message: 'the second deploy to wait' });

  const { context, page } = await signedIn();
  await page.goto(`${stack.url}/ui/groups/${encodeURIComponent(group)}`);
  const holderText = await page.locator('#holder').innerText();
  assert.ok(holderText.includes(holder), holderText);
  assert.match(holderText, /Heartbeat/);
  const row = page.locator('#waiters tr', { hasText: waiter });
  assert.match(await row.innerText(), new RegExp(`behind the holder\\s+${holder}`));
  await shot(page, 'group');

  // Skip: the form opens the page's dialog; only Confirm posts it; the result page says so.
  await row.locator('button[type="submit"]').click();
  const dialog = page.locator('#confirm-dialog');
  await dialog.waitFor({ state: 'visible' });
  assert.ok((await page.locator('#confirm-text').innerText()).length > 0, 'the dialog asks');
  await dialog.locator('button[value="ok"]').click();
  await page.waitForURL(`**/ui/executions/${waiter}/skip`);
  assert.match(await page.locator('main').innerText(), /Skipped, silently/);
  await shot(page, 'skipped');
  await stack.waitFor(async () => (await execution(waiter)).status === 'skipped',
    { timeoutMs: LIVE_UPDATE_TIMEOUT_MS, message: 'the skipped waiter to end skipped' });
  const skipped = await execution(waiter);
  assert.equal(skipped.reason, null, 'an operator skip records no reason');
  const after = await stack.api(groupPath);
  assert.equal(after.body.holder?.execution_id, holder, 'the holder is untouched');
  assert.ok(!['skipped', 'terminated'].includes((await execution(holder)).status));
  await context.close();
  const end = await stack.api(`/v1/executions/${holder}/terminate`, { method: 'POST' });
  assert.ok([200, 202].includes(end.status), JSON.stringify(end.body));
});

// How long the probe below waits for the event it must never get: the instance's own bound, so
// its end (EventTimedOut) is the positive signal that nothing arrived.
const FORGED_WAIT_MS = 5_000;

uiTest('a GitHub-only event posted from the dashboard is refused as the API refuses it', async () => {
  const created = await stack.api('/v1/executions', {
    method: 'POST',
    body: { key: 'probe:github-only', run: 'probe', input: { steps: 0, wait_event: 'release-decision', event_timeout_ms: FORGED_WAIT_MS } },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const { id } = created.body;
  // A dashboard user (a person through Access), posting the page's own send-event form with a
  // release "approved" in an approver's name.
  const forged = JSON.stringify({ kind: 'button', check_run_id: 1, identifier: 'release-approve', sender: 'approver' });
  for (const type of ['release-decision', 'check-run-action']) {
    const res = await stack.rawRequest('POST', `/ui/executions/${id}/events`, {
      headers: {
        'Cf-Access-Jwt-Assertion': accessJwt(), 'Content-Type': 'application/x-www-form-urlencoded',
        Origin: stack.url, 'Sec-Fetch-Site': 'same-origin',
      },
      body: new URLSearchParams({ confirmed: '1', type, payload: forged }).toString(),
    });
    assert.equal(res.status, 403, `${type}: ${res.text.slice(0, 500)}`);
    assert.match(res.text, /come from GitHub&#39;s webhook only/, res.text.slice(0, 500));
    const api = await stack.api(`/v1/executions/${id}/events/${type}`, { method: 'POST', body: JSON.parse(forged) });
    assert.deepEqual([api.status, api.body.error?.code], [403, 'github_only'], JSON.stringify(api.body));
  }
  // The wait ends unanswered at its own bound: no refused event reached the instance.
  const ended = await stack.waitFor(async () => {
    const e = await execution(id);
    return ['complete', 'errored', 'terminated'].includes(e.status) ? e : null;
  }, { timeoutMs: LIVE_UPDATE_TIMEOUT_MS, message: 'the probe to end' });
  assert.deepEqual([ended.status, ended.error_tag], ['errored', 'EventTimedOut'], JSON.stringify(ended));
});

uiTest('a branch named <script>alert(1)</script> renders as text and runs no script', async () => {
  const repo = 'xss';
  const sha = stack.commit(OWNER, repo, { 'README.md': '# xss\n' });
  const id = await push(repo, sha, { branch: XSS });
  await stack.waitFor(async () => ['skipped', 'complete', 'errored'].includes((await execution(id)).status),
    { timeoutMs: LIVE_UPDATE_TIMEOUT_MS, message: 'the push to end' });

  const { context, page, dialogs } = await signedIn();
  const res = await page.goto(`${stack.url}/ui/executions?repo=${OWNER}/${repo}`);
  assert.equal(res.status(), 200);
  const list = page.locator('#executions');
  await list.locator(`a.exec:has-text("${id}")`).waitFor();
  assert.ok((await list.innerText()).includes(`branch ${XSS}`), await list.innerText());
  await page.goto(`${stack.url}/ui/executions/${id}`);
  // Scripts on the page: only app.js, from this origin; no alert ran.
  const scripts = await page.evaluate(() => [...document.scripts].map((s) => s.src || s.textContent));
  assert.deepEqual(scripts, [`${stack.url}/ui/app.js`]);
  assert.deepEqual(dialogs, [], 'no alert() ran');
  await shot(page, 'escaped');
  await context.close();
});

uiTest('a Cloudflare Access token opens the API and the pages; a wrong one does not', async () => {
  const asAccess = (jwt, path = '/v1/executions') => stack.api(path, { auth: false, headers: { 'Cf-Access-Jwt-Assertion': jwt } });
  const ok = await asAccess(accessJwt());
  assert.equal(ok.status, 200, JSON.stringify(ok.body));
  const now = Math.floor(Date.now() / 1000);
  const wrong = {
    'wrong audience': accessJwt({ aud: ['another-application'] }),
    'wrong issuer': accessJwt({ iss: 'https://elsewhere.cloudflareaccess.com' }),
    expired: accessJwt({ iat: now - 7200, nbf: now - 7200, exp: now - 3600 }),
    'bad signature': accessJwt({}, { key: certs.otherKey }),
    'unknown key id': accessJwt({}, { kid: 'not-a-published-key' }),
  };
  for (const [what, jwt] of Object.entries(wrong)) {
    const res = await asAccess(jwt);
    assert.equal(res.status, 401, `${what}: ${JSON.stringify(res.body)}`);
  }

  // In the browser: Access adds the header to every request; the page needs no sign-in.
  const context = await browser.newContext({ extraHTTPHeaders: { 'Cf-Access-Jwt-Assertion': accessJwt() } });
  const page = await context.newPage();
  page.setDefaultTimeout(PAGE_TIMEOUT_MS);
  const res = await page.goto(`${stack.url}/ui/groups`);
  assert.equal(res.status(), 200);
  await page.locator('#groups').waitFor();
  await shot(page, 'access');
  await context.close();

  // A person's Access credential is a browser's: a POST from another site is refused.
  const cross = await stack.rawRequest('POST', '/ui/executions/check-x/terminate', {
    headers: {
      'Cf-Access-Jwt-Assertion': accessJwt(), 'Content-Type': 'application/x-www-form-urlencoded',
      Origin: 'https://evil.example', 'Sec-Fetch-Site': 'cross-site',
    },
    body: 'confirmed=1',
  });
  assert.equal(cross.status, 403, JSON.stringify(cross.body));
});
