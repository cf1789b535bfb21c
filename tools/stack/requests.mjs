// Requests to a stack and waits on it: a raw HTTP request (for answers a fetch would hide), a
// bounded promise, and waitFor, the poll every test and script waits with.

import { request as httpRequest } from 'node:http';
import { delay } from './process.mjs';

// An execution's statuses that end it (the engine's `Status::is_terminal`): what every wait for a
// run to finish stops at.
export const TERMINAL = new Set(['complete', 'errored', 'terminated', 'skipped']);

// Any single request to the Worker or the stand-in; webhooks and API reads answer in milliseconds.
export const REQUEST_TIMEOUT_MS = 30_000;
// waitFor() defaults: long enough for a clone plus a short command, short enough to fail a test
// that is stuck well before node:test's own timeout.
const WAIT_TIMEOUT_MS = 30_000;
const WAIT_INTERVAL_MS = 200;

export function withTimeout(promise, ms, label) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${label}: no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

export function parseBody(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// Sends a request exactly as given (headers, Content-Length, body) with node:http, and resolves
// on the response even if the server answers early and closes before the whole body is sent
// (what a 413 for an oversized upload does).
export function rawRequest(baseUrl, method, path, { headers = {}, body } = {}) {
  const url = new URL(path, baseUrl);
  return withTimeout(new Promise((resolve, reject) => {
    let responded = false;
    const req = httpRequest(url, { method, headers }, (res) => {
      responded = true;
      const chunks = [];
      res.on('data', (chunk) => chunks.push(chunk));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode, headers: res.headers, body: parseBody(text), text });
      });
      res.on('error', reject);
    });
    req.on('error', (err) => {
      if (!responded) reject(err);
    });
    req.end(body);
  }), REQUEST_TIMEOUT_MS, `${method} ${path}`);
}

// Polls `fn` until it returns a truthy value (returned), or throws after `timeoutMs` with the
// last value or error seen, so a timeout says what state things were stuck in.
export async function waitFor(fn, { timeoutMs = WAIT_TIMEOUT_MS, intervalMs = WAIT_INTERVAL_MS, message = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const value = await fn();
      if (value) return value;
      last = value;
    } catch (err) {
      last = err;
    }
    if (Date.now() >= deadline) {
      const detail = last instanceof Error ? last.stack : JSON.stringify(last);
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${message}; last: ${detail}`);
    }
    await delay(intervalMs);
  }
}
