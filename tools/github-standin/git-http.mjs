// git over smart HTTP: `git http-backend` as a CGI program behind Basic auth with an installation
// token, clone and fetch only.

import { spawn } from 'node:child_process';
import { repoExists } from './git.mjs';
import { ApiError, decodeSegment, DOCS, MAX_BODY_BYTES, notFound, sendJson } from './http.mjs';
import { basicAuthToken, hasPermission } from './tokens.mjs';

// A clone of a test repository takes well under a second; 60 s leaves room for a loaded CI machine
// while making sure a wedged `git http-backend` cannot hold a connection and a process forever.
const GIT_BACKEND_TIMEOUT_MS = 60_000;

// CGI headers from git http-backend are a handful of short lines; more means the child is broken.
const MAX_CGI_HEADER_BYTES = 64 * 1024;

function parseCgiHead(head) {
  const headers = {};
  let status = 200;
  for (const line of head.split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim();
    const value = line.slice(colon + 1).trim();
    if (name.toLowerCase() === 'status') status = Number.parseInt(value, 10) || 500;
    else headers[name] = value;
  }
  return { status, headers };
}

function backendEnv(s, ctx, pathInfo) {
  const { root } = s;
  const { req } = ctx;
  const env = {
    PATH: process.env.PATH,
    HOME: process.env.HOME ?? root,
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_PROJECT_ROOT: root,
    GIT_HTTP_EXPORT_ALL: '1',
    GATEWAY_INTERFACE: 'CGI/1.1',
    SERVER_PROTOCOL: 'HTTP/1.1',
    REQUEST_METHOD: req.method,
    PATH_INFO: pathInfo,
    QUERY_STRING: ctx.rawQuery,
    REMOTE_ADDR: req.socket.remoteAddress ?? '',
    CONTENT_TYPE: req.headers['content-type'] ?? '',
  };
  if (req.headers['content-length'] !== undefined) env.CONTENT_LENGTH = req.headers['content-length'];
  if (req.headers['git-protocol'] !== undefined) env.HTTP_GIT_PROTOCOL = req.headers['git-protocol'];
  // http-backend inflates gzip request bodies itself when told the encoding.
  if (req.headers['content-encoding'] !== undefined) env.HTTP_CONTENT_ENCODING = req.headers['content-encoding'];
  return env;
}

// Runs `git http-backend` as a CGI program: request body to stdin, CGI headers parsed from
// stdout, remaining stdout streamed as the response body.
function runHttpBackend(s, ctx, pathInfo) {
  const { log, children } = s;
  const { req, res } = ctx;
  return new Promise((resolve) => {
    const child = spawn('git', ['http-backend'], { env: backendEnv(s, ctx, pathInfo), stdio: ['pipe', 'pipe', 'pipe'] });
    children.add(child);
    let stderr = '';
    let head = Buffer.alloc(0);
    let headersDone = false;
    let failed = false;
    const fail = (status, message) => {
      if (failed) return;
      failed = true;
      child.kill('SIGKILL');
      if (res.headersSent) res.destroy();
      else sendJson(res, status, { message, documentation_url: DOCS.root, status: String(status) }, { Connection: 'close' });
    };
    const timer = setTimeout(() => fail(504, 'git http-backend timed out'), GIT_BACKEND_TIMEOUT_MS);

    let received = 0;
    req.on('data', (chunk) => {
      received += chunk.length;
      if (received > MAX_BODY_BYTES) {
        req.unpipe(child.stdin);
        fail(413, 'Payload Too Large');
      }
    });
    req.pipe(child.stdin);
    child.stdin.on('error', () => {}); // EPIPE when the child exits early; reported via exit status.
    child.stderr.on('data', (chunk) => {
      if (stderr.length < MAX_CGI_HEADER_BYTES) stderr += chunk;
    });

    const onHeadData = (chunk) => {
      if (failed) return; // a 413/504 has already been answered
      head = Buffer.concat([head, chunk]);
      const text = head.toString('latin1');
      const end = /\r?\n\r?\n/.exec(text);
      if (!end) {
        if (head.length > MAX_CGI_HEADER_BYTES) fail(502, 'git http-backend sent oversized headers');
        return;
      }
      headersDone = true;
      child.stdout.off('data', onHeadData);
      const { status, headers } = parseCgiHead(text.slice(0, end.index));
      res.writeHead(status, headers);
      res.write(head.subarray(end.index + end[0].length));
      child.stdout.pipe(res);
    };
    child.stdout.on('data', onHeadData);

    res.on('close', () => child.kill('SIGKILL'));
    child.on('close', (code) => {
      clearTimeout(timer);
      children.delete(child);
      if (!headersDone && !res.headersSent) {
        if (log) console.error(`git http-backend exited ${code}: ${stderr.trim()}`);
        sendJson(res, 502, { message: 'git http-backend failed', documentation_url: DOCS.root, status: '502' });
      }
      resolve();
    });
    child.on('error', (err) => {
      clearTimeout(timer);
      children.delete(child);
      if (!res.headersSent) sendJson(res, 500, { message: `cannot run git: ${err.message}`, documentation_url: DOCS.root, status: '500' });
      resolve();
    });
  });
}

export async function handleGit(s, ctx, [, rawOwner, rawRepo, endpoint]) {
  const { root } = s;
  const owner = decodeSegment(rawOwner);
  const repo = decodeSegment(rawRepo);
  const token = basicAuthToken(s, ctx);
  if (!token) throw new ApiError(401, 'Invalid username or token.', DOCS.root, {}, { 'WWW-Authenticate': 'Basic realm="GitHub"' });
  const inScope = !token.repositories || token.repositories.includes(repo);
  if (!repoExists(root, owner, repo) || !inScope || !hasPermission(token, 'contents', 'read')) {
    throw new ApiError(404, 'Repository not found.', DOCS.root);
  }
  const service = endpoint === 'info/refs' ? ctx.query.get('service') : endpoint;
  if (service === 'git-receive-pack') throw new ApiError(403, 'Write access to repository not granted.', DOCS.root);
  const methodOk = endpoint === 'info/refs' ? ctx.method === 'GET' : ctx.method === 'POST';
  if (!methodOk || service !== 'git-upload-pack') throw notFound();
  await runHttpBackend(s, ctx, `/${owner}/${repo}.git/${endpoint}`);
}

// The smart-HTTP paths (`/{owner}/{repo}[.git]/info/refs`, `git-upload-pack`, `git-receive-pack`).
export const GIT_ROUTE = /^\/([^/]+)\/([^/]+?)(?:\.git)?\/(info\/refs|git-upload-pack|git-receive-pack)$/;
