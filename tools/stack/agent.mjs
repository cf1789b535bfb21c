// The sandbox agent as a local process: whether it can isolate workspaces here, where its
// checkouts may clone from, and starting it.

import { existsSync } from 'node:fs';
import { AGENT_BIN } from './env.mjs';
import { killGroup, spawnGroup } from './process.mjs';

// The agent prints exactly this line once it is accepting connections (crates/sandbox-agent).
const AGENT_READY_RE = /sluice-sandbox-agent listening on (http:\/\/\S+)/;
// The agent binds and prints its ready line within milliseconds; 15 s covers a loaded machine
// while still failing fast when the binary is broken.
export const AGENT_START_TIMEOUT_MS = 15_000;
// A refusal to start is one paragraph; this keeps a chatty agent's log out of the error.
const AGENT_STARTUP_LOG_CHARS_MAX = 4_000;
// Whether the sandbox agent can isolate workspaces here: it runs each workspace's commands as a
// user of their own only when it runs as root; otherwise it must be started --unisolated (commands
// run as this user; not safe for untrusted pull requests).
export const AGENT_ISOLATED = process.getuid?.() === 0;

// Where GitHub serves git unless GITHUB_GIT_URL says otherwise (`github::GIT_URL_DEFAULT`).
export const GIT_URL_DEFAULT = 'https://github.com';

// The `--git-url-prefix` an agent needs for the Worker's checkouts: the Worker derives every clone
// URL as `<GITHUB_GIT_URL>/<owner>/<name>.git` (`github::clone_url`), so the agent must allow
// exactly that base, whether github.com, a GitHub Enterprise Server or the stand-in.
export function gitUrlPrefix(gitUrl) {
  return `${(gitUrl || GIT_URL_DEFAULT).replace(/\/+$/, '')}/`;
}

// What `npm start`'s local agent allows checkouts from: where the Worker clones, GITHUB_GIT_URL
// as wrangler gives it to the Worker (.dev.vars over the defaults npm start writes).
export function localAgentGitUrlPrefixes(userVars, defaults) {
  return [gitUrlPrefix(userVars.GITHUB_GIT_URL || defaults.GITHUB_GIT_URL)];
}

// Starts the sandbox agent and resolves its base URL once it prints its ready line. Output is
// passed to `onOutput(chunk)` (for log files or the terminal). `gitUrlPrefixes`: where its
// checkouts may clone from (the agent's default is https://github.com/ only). `root` must be a
// directory the workspace users can reach (not under a 0700 directory) and nothing else of
// ours should be readable below its parents.
export async function startAgent({ listen, root, token, gitUrlPrefixes = [], unisolated = !AGENT_ISOLATED, onOutput = () => {} }) {
  if (!existsSync(AGENT_BIN)) throw new Error(`${AGENT_BIN} is missing; run 'npm run build'`);
  const args = ['--listen', listen, '--root', root];
  for (const prefix of gitUrlPrefixes) args.push('--git-url-prefix', prefix);
  if (unisolated) args.push('--unisolated');
  const child = spawnGroup(AGENT_BIN, args, {
    env: { SANDBOX_AGENT_TOKEN: token },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // What it said before it was ready: a refusal to start says why there.
  let said = '';
  child.stderr.on('data', (chunk) => {
    if (said.length < AGENT_STARTUP_LOG_CHARS_MAX) said += chunk;
    onOutput(chunk);
  });
  const url = await new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`sandbox agent not ready after ${AGENT_START_TIMEOUT_MS} ms`)), AGENT_START_TIMEOUT_MS);
    child.stdout.on('data', (chunk) => {
      onOutput(chunk);
      seen += chunk;
      const match = AGENT_READY_RE.exec(seen);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.exited.then(({ code, signal, error }) => {
      clearTimeout(timer);
      reject(new Error(`sandbox agent exited before it was ready (code ${code}, signal ${signal}${error ? `, ${error.message}` : ''}): ${said.trim()}`));
    });
  }).catch((err) => {
    killGroup(child, 'SIGKILL');
    throw err;
  });
  return { child, url };
}
