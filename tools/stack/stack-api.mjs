// The handle startStack() returns: the stack's URLs, secrets and paths, requests to the Worker and
// the stand-in, webhooks signed with the stack's secret, and the controls (kill/restart the
// Worker or the agent, stop).

import { chmodSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { commitFiles } from '../github-standin/git.mjs';
import { sendWebhook as postWebhook } from '../github-standin/webhooks.mjs';
import { mintInstallationToken } from './app.mjs';
import { sandboxContainers } from './containers.mjs';
import { liveTmpDirs } from './live.mjs';
import { tailLines } from './process.mjs';
import { REQUEST_TIMEOUT_MS, parseBody, rawRequest, waitFor, withTimeout } from './requests.mjs';

// Lines of the Worker log shown by logTail() when no count is given.
export const LOG_TAIL_LINES = 80;

export function makeStackApi({ inspectorPort, url, standin, paths, secret, adminToken, logLinkSecret, agentToken, agent, layer, killWorker, startWorker, restartAgent, cleanups, appKey }) {
  async function api(path, { method = 'GET', body, headers = {}, auth = true } = {}) {
    const init = { method, headers: { ...headers }, signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) };
    if (auth) init.headers.Authorization = `Bearer ${adminToken}`;
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers['Content-Type'] = 'application/json';
    }
    const res = await fetch(`${url}${path}`, init);
    return { status: res.status, headers: res.headers, body: parseBody(await res.text()) };
  }

  async function standinGet(path) {
    const res = await fetch(`${standin.url}${path}`, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
    if (res.status !== 200) throw new Error(`stand-in GET ${path} -> HTTP ${res.status}`);
    return res.json();
  }

  // The stand-in's control endpoints (register a pull request, a collaborator's permission).
  async function standinPost(path, body) {
    const res = await fetch(`${standin.url}${path}`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    if (res.status >= 300) throw new Error(`stand-in POST ${path} -> HTTP ${res.status}: ${await res.text()}`);
    return res.json();
  }

  return {
    url,
    // The devtools inspector's port when the stack was started with `inspector: true`, else null.
    inspectorPort,
    standin,
    standinUrl: standin.url,
    reposDir: paths.repos,
    tmpDir: paths.tmp,
    agentUrl: agent?.url ?? null,
    // A getter: restartAgent() replaces the process.
    get agentPid() { return agent?.child.pid ?? null; },
    agentToken,
    sandboxRoot: paths.sandbox,
    // The Worker's vars file, 0600 in the stack's 0700 directory: what .dev.vars is to `npm start`.
    envFile: paths.envFile,
    // An empty file that the commands of every run may append to (each workspace has a user of
    // its own, so a file one command creates is its alone): how tests watch runs side by side.
    sharedFile: (name) => {
      const path = join(paths.shared, name);
      writeFileSync(path, '');
      chmodSync(path, 0o666);
      return path;
    },
    // With containers: the docker CLI wrangler uses, and the Worker's sandbox containers.
    docker: layer?.docker ?? null,
    sandboxContainers: () => (layer ? sandboxContainers(layer.docker) : Promise.resolve([])),
    secret,
    adminToken,
    logLinkSecret,
    sendWebhook: (event, payload, deliveryId) => withTimeout(
      postWebhook({ url: `${url}/webhooks/github`, secret, event, payload, deliveryId }),
      REQUEST_TIMEOUT_MS,
      `webhook ${event}`,
    ),
    api,
    rawRequest: (method, path, init) => rawRequest(url, method, path, init),
    standinGet,
    standinPost,
    // An installation token for one repository (contents:read), as the Worker mints them: for
    // callers of the agent itself (the bench), whose checkouts the stand-in's git authenticates.
    installationToken: (repoName) => mintInstallationToken(standin.url, appKey, repoName),
    waitFor,
    scheduled: async (cron = '* * * * *') => {
      const res = await fetch(`${url}/__scheduled?cron=${cron.replaceAll(' ', '+')}`, { signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
      return { status: res.status, body: await res.text() };
    },
    commit: (owner, repo, files, commitOpts = {}) => commitFiles(paths.repos, owner, repo, { files, ...commitOpts }),
    cloneUrl: (owner, repo) => `${standin.url}/${owner}/${repo}.git`,
    killWorker,
    restartWorker: async () => {
      await killWorker();
      await startWorker();
    },
    // Null with containers (the sandbox is Docker's there).
    restartAgent,
    logTail: (n = LOG_TAIL_LINES) => tailLines(paths.workerLog, n),
    agentLogTail: (n = LOG_TAIL_LINES) => tailLines(paths.agentLog, n),
    async stop() {
      for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
      cleanups.length = 0;
      for (const dir of [paths.tmp, paths.sandbox, paths.shared]) {
        if (!process.env.SLUICE_E2E_KEEP_TMP) rmSync(dir, { recursive: true, force: true });
        liveTmpDirs.delete(dir);
      }
    },
  };
}
