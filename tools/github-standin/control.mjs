// The stand-in's own endpoints: health, the record of calls, reset.

import { sendJson } from './http.mjs';

// Recorded calls are kept for inspection; the oldest are dropped beyond this so a long `npm start`
// session cannot grow without bound.
const MAX_RECORDED_CALLS = 10_000;
const WRITE_METHODS = new Set(['POST', 'PATCH', 'PUT', 'DELETE']);

export function recordCall(s, ctx) {
  const { state } = s;
  const call = {
    seq: state.nextCallSeq++,
    method: ctx.method,
    path: ctx.path,
    query: Object.fromEntries(ctx.query),
    status: null,
    write: WRITE_METHODS.has(ctx.method),
    body: null,
    auth_scheme: ctx.auth.scheme,
    at_ms: Date.now(),
  };
  state.calls.push(call);
  if (state.calls.length > MAX_RECORDED_CALLS) state.calls.shift();
  return call;
}

function controlCalls(s, ctx) {
  const { state } = s;
  const method = ctx.query.get('method')?.toUpperCase();
  const prefix = ctx.query.get('path_prefix');
  const calls = state.calls.filter((c) => (!method || c.method === method) && (!prefix || c.path.startsWith(prefix)));
  sendJson(ctx.res, 200, { calls });
}

function controlReset(s, ctx) {
  const { state, oidc } = s;
  state.latency.length = 0;
  state.calls.length = 0;
  state.checkRuns.clear();
  state.checkSuites.clear();
  state.deployments.clear();
  state.pulls.clear();
  state.permissions.clear();
  state.comments.clear();
  state.releases.clear();
  state.latestReleases.clear();
  oidc.reset();
  sendJson(ctx.res, 200, { ok: true });
}

// Registers this resource's routes on the stand-in's one router.
export function registerControl(router) {
  router.route('GET', /^\/_standin\/healthz$/, (s, ctx) => sendJson(ctx.res, 200, { ok: true }));
  router.route('GET', /^\/_standin\/calls$/, controlCalls);
  router.route('POST', /^\/_standin\/reset$/, controlReset);
}
