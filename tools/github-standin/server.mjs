// GitHub stand-in: a local HTTP server speaking the subset of GitHub's REST API (App installation
// tokens, repository contents, refs, branches, check runs, deployments and their statuses, pull
// requests, releases) and smart-HTTP git that Sluice uses, backed by real bare git repositories,
// and GitHub Actions' OIDC issuer (`oidc.mjs`: its keys and the tokens a dispatching workflow
// sends). Used by end-to-end tests and by `npm start` without a real GitHub App. Also runnable as
// a CLI (see parseCli below).
//
// One module per resource registers its routes on one router (router.mjs); every handler is given
// the hub (hub.mjs), the stand-in's shared state in one object:
//   tokens.mjs       the App, installation tokens       check-runs.mjs   check runs
//   repos.mjs        repository, contents, refs, tags   deployments.mjs  deployments, statuses
//   pulls.mjs        pull requests, comments, people    releases.mjs     releases
//   oidc-routes.mjs  the OIDC issuer's routes           latency.mjs      latency a test asks for
//   control.mjs      health, recorded calls, reset      git-http.mjs     git over smart HTTP
//   http.mjs, git-read.mjs: the plumbing they share.

import { createPublicKey } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { resolve as resolvePath } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { registerCheckRuns } from './check-runs.mjs';
import { recordCall, registerControl } from './control.mjs';
import { registerDeployments } from './deployments.mjs';
import { GIT_ROUTE, handleGit } from './git-http.mjs';
import { ApiError, decodeSegment, DOCS, notFound, parseAuthorization, parseJsonBody, readBody, sendJson } from './http.mjs';
import { createHub } from './hub.mjs';
import { holdAnswer, registerLatency, takeLatency } from './latency.mjs';
import { registerOidc } from './oidc-routes.mjs';
import { registerPulls } from './pulls.mjs';
import { registerReleases } from './releases.mjs';
import { registerRepos } from './repos.mjs';
import { createRouter } from './router.mjs';
import { registerTokens, requireInstallationToken, requireRepoInScope } from './tokens.mjs';

export async function startStandin({
  port = 0, host = '127.0.0.1', reposDir, appId, publicKeyPem, installations = [42], tokenTtlSeconds = 3600, log = false,
} = {}) {
  if (!reposDir) throw new Error('startStandin: reposDir is required');
  if (appId === undefined || appId === null) throw new Error('startStandin: appId is required');
  if (!publicKeyPem) throw new Error('startStandin: publicKeyPem is required');
  const root = resolvePath(reposDir);
  mkdirSync(root, { recursive: true });
  // createPublicKey accepts SPKI and PKCS#1 public keys and derives the public half of a private key.
  const publicKey = createPublicKey(publicKeyPem);
  const installationIds = new Set(installations.map(Number));
  const s = createHub({ root, appId, publicKey, installationIds, tokenTtlSeconds, log });
  const router = createRouter({ decodeSegment });
  for (const register of [
    registerControl, registerLatency, registerOidc, registerTokens, registerRepos, registerCheckRuns, registerDeployments,
    registerPulls, registerReleases,
  ]) register(router);

  const server = createServer((req, res) => {
    handle(s, router, req, res).catch(() => res.destroy());
  });
  await new Promise((resolveListen, rejectListen) => {
    server.once('error', rejectListen);
    // `host` is loopback unless a caller needs it reachable elsewhere on this machine (the
    // container layer listens on the Docker bridge gateway, where containers reach the host).
    server.listen(port, host, resolveListen);
  });
  const actualPort = server.address().port;
  s.state.baseUrl = `http://${host}:${actualPort}`;

  return {
    url: s.state.baseUrl,
    port: actualPort,
    state: s.state,
    close() {
      for (const child of s.children) child.kill('SIGKILL');
      server.closeAllConnections();
      return new Promise((resolveClose) => server.close(() => resolveClose()));
    },
  };
}

async function handleApi(s, router, ctx) {
  const matched = router.match(ctx.method, ctx.path);
  if (!matched) throw notFound();
  const raw = await readBody(ctx.req);
  ctx.body = parseJsonBody(raw);
  ctx.call.body = raw.length > 0 ? (ctx.body ?? null) : null;
  if (matched.route.auth) ctx.token = requireInstallationToken(s, ctx);
  if (ctx.token && ctx.path.startsWith('/repos/')) requireRepoInScope(ctx.token, matched.params[0], matched.params[1]);
  await matched.route.handler(s, ctx, ...matched.params);
}

async function handle(s, router, req, res) {
  // The path is routed exactly as sent (no dot-segment normalisation), so '..' can never be
  // resolved into a different repository or file; handlers reject such segments.
  const target = req.url ?? '/';
  const queryStart = target.indexOf('?');
  const path = queryStart === -1 ? target : target.slice(0, queryStart);
  const rawQuery = queryStart === -1 ? '' : target.slice(queryStart + 1);
  const ctx = {
    req, res, method: req.method, path, rawQuery, query: new URLSearchParams(rawQuery),
    auth: parseAuthorization(req.headers.authorization), body: undefined, token: null,
  };
  // Control endpoints are not recorded: tests read the log through them.
  ctx.call = ctx.path.startsWith('/_standin/') ? {} : recordCall(s, ctx);
  res.on('close', () => {
    ctx.call.status = res.statusCode;
    if (s.log) console.error(`${ctx.method} ${req.url} -> ${res.statusCode}`);
  });
  const slow = ctx.path.startsWith('/_standin/') ? null : takeLatency(s, ctx.path);
  if (slow?.when === 'before') await delay(slow.delayMs);
  if (slow?.when === 'after') holdAnswer(res, slow.delayMs);
  try {
    const git = GIT_ROUTE.exec(ctx.path);
    if (git && !ctx.path.startsWith('/repos/') && !ctx.path.startsWith('/_standin/')) await handleGit(s, ctx, git);
    else await handleApi(s, router, ctx);
  } catch (err) {
    if (err instanceof ApiError) {
      sendJson(res, err.status, err.body, err.headers);
      if (err.headers.Connection === 'close') req.resume();
      return;
    }
    if (s.log) console.error(err);
    sendJson(res, 500, { message: 'Internal Server Error', documentation_url: DOCS.root, status: '500' });
  }
}
// ---------------------------------------------------------------------------------------------
// CLI

function parseCli(argv) {
  const { values } = parseArgs({
    args: argv,
    options: {
      port: { type: 'string', default: '8790' },
      'repos-dir': { type: 'string' },
      'app-id': { type: 'string' },
      'public-key-file': { type: 'string' },
      'installation-id': { type: 'string', multiple: true },
      'token-ttl-seconds': { type: 'string', default: '3600' },
      log: { type: 'boolean', default: false },
    },
  });
  for (const required of ['repos-dir', 'app-id', 'public-key-file']) {
    if (!values[required]) throw new Error(`missing --${required}`);
  }
  return {
    port: Number(values.port),
    reposDir: values['repos-dir'],
    appId: values['app-id'],
    publicKeyPem: readFileSync(values['public-key-file'], 'utf8'),
    installations: (values['installation-id'] ?? ['42']).map(Number),
    tokenTtlSeconds: Number(values['token-ttl-seconds']),
    log: values.log,
  };
}

async function main() {
  let opts;
  try {
    opts = parseCli(process.argv.slice(2));
  } catch (err) {
    console.error(`github-standin: ${err.message}`);
    console.error('usage: node server.mjs --port 8790 --repos-dir DIR --app-id ID --public-key-file FILE [--installation-id 42]... [--token-ttl-seconds N] [--log]');
    process.exit(2);
  }
  const standin = await startStandin(opts);
  console.log(`github-standin listening on ${standin.url}`);
  const stop = () => standin.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolvePath(process.argv[1])).href) {
  await main();
}
