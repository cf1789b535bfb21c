// Latency a test asks for (`POST /_standin/latency`): the next requests under a path prefix are
// held before they are served, or their answer is held after it was made.

import { DOCS, invalidRequest, requireObjectBody, sendJson } from './http.mjs';

// A test's latency (`POST /_standin/latency`) is at most 10 minutes: longer than any step's own
// timeout, so a delay can always outlast what it delays.
const LATENCY_MS_MAX = 600_000;

// POST /_standin/latency {path_prefix, delay_ms, count, when: 'before'|'after'} (a test hook).
function controlLatency(s, ctx) {
  const { state } = s;
  const body = requireObjectBody(ctx);
  const ok = typeof body.path_prefix === 'string' && Number.isInteger(body.delay_ms) && body.delay_ms >= 0
    && body.delay_ms <= LATENCY_MS_MAX && Number.isInteger(body.count) && body.count > 0
    && ['before', 'after'].includes(body.when ?? 'before');
  if (!ok) throw invalidRequest(`Expected {path_prefix, delay_ms (0..${LATENCY_MS_MAX}), count (> 0), when: before|after}.`, DOCS.root);
  state.latency.push({ prefix: body.path_prefix, delayMs: body.delay_ms, left: body.count, when: body.when ?? 'before' });
  sendJson(ctx.res, 201, { ok: true });
}

// The latency rule the request takes, if any (each rule serves `count` requests).
export function takeLatency(s, path) {
  const { state } = s;
  const rule = state.latency.find((r) => r.left > 0 && path.startsWith(r.prefix));
  if (rule) rule.left -= 1;
  return rule ?? null;
}

// The answer is made now and sent `delayMs` later (headers and body wait for `end`).
export function holdAnswer(res, delayMs) {
  const end = res.end.bind(res);
  res.end = (...args) => {
    setTimeout(() => end(...args), delayMs);
    return res;
  };
}

// Registers this resource's routes on the stand-in's one router.
export function registerLatency(router) {
  router.route('POST', /^\/_standin\/latency$/, controlLatency);
}
