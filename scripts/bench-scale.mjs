// Scale figures for `npm run bench`: a burst of signed pull_request deliveries, a crowd of trivial
// checks through the sandbox pool, Sluice's own overhead per check (from the GitHub stand-in's
// record of each check-run update), and what checks and deploys cost (from `GET /v1/costs`)
// against the same runs modeled on Workflows' step billing. Timing is measured here only, never
// asserted in tests; these machines are shared, so read the figures as noisy.

import { readFileSync } from 'node:fs';
import http from 'node:http';
import { pullRequestPayload, pushPayload, signedDelivery } from '../tools/github-standin/webhooks.mjs';
import { TERMINAL, pollUntil } from '../tools/stack/index.mjs';
import { pct } from './bench-stats.mjs';
import { inPool } from './bench-pool.mjs';

const OWNER = 'scale';
// The burst: what a monorepo opening pull requests at once, or a bot, sends.
const BURST_DELIVERIES = 500;
const BURST_CONCURRENCY = 50;
// The pool crowd: 100 trivial checks at once through POOL_CAPACITY sandboxes.
const CROWD_CHECKS = 100;
// Each crowd check's command: long enough to see sandboxes busy at once, short enough for 100.
const CROWD_COMMAND_S = 0.3;
export const POOL_CAPACITY = 8;
// Rounds of one check alone, for Sluice's own overhead, and of one deploy alone, for its cost.
const OVERHEAD_ROUNDS = 10;
const DEPLOY_ROUNDS = 5;
// Every wait for executions to finish: the crowd is 100 clones and commands on 2 cores.
const FINISH_TIMEOUT_MS = 300_000;
const POLL_MS = 100;

const until = (fn, what, timeoutMs = FINISH_TIMEOUT_MS) => pollUntil(fn, { what, timeoutMs, intervalMs: POLL_MS });
const ms = (v) => (Number.isFinite(v) ? `${Math.round(v)} ms` : 'n/a');
const usd = (v) => `$${v.toFixed(4)}`;

// Lets the event loop see what arrived while synchronous work (the commits, made with
// execFileSync: seconds for hundreds) blocked it. The Worker's server closes a keep-alive
// connection idle for 5 s; fetch drops its idle ones after 4 s, but not while the loop is
// blocked, so without this turn the first request after the commits reuses a connection whose
// close is already waiting unread and fails "other side closed" (a client artifact, 1 in 500).
const settleIdleConnections = () => new Promise((resolve) => setTimeout(resolve, 50));

function prPayload(stack, repo, sha, number) {
  return pullRequestPayload({ owner: OWNER, repo, sha, number, installationId: 42, cloneUrl: stack.cloneUrl(OWNER, repo) });
}

async function finished(stack, id) {
  return until(async () => {
    const { body } = await stack.api(`/v1/executions/${id}`);
    return TERMINAL.has(body.execution?.status) ? body : null;
  }, `${id} to finish`);
}

// A just-started `wrangler dev` compiles the Worker's wasm in tiers and opens its first
// connections while it answers its first ~100 deliveries (their ack p50 was ~330 ms against
// ~130 ms after, in runs of this burst). The burst meets a Worker warmed by this many deliveries
// to another repository, as one in service is; the warm-up's own figures are printed beside.
const BURST_WARMUP = 50;
// One answer's bound: GitHub's own is 10 s; a loaded 2-core machine can be slower.
const ACK_TIMEOUT_MS = 30_000;
// `http::ack_first::CREATE_DEFER_MAX_MS`, for the table's label.
const CREATE_DEFER_MAX_S = 5;

// Deliveries signed before the clock starts and posted over node's http with keep-alive, the
// lightest sender node has: the 2 cores are shared with wrangler, and GitHub signs and sends on
// machines of its own.
function burstSender(stack) {
  const url = new URL(`${stack.url}/webhooks/github`);
  const agent = new http.Agent({ keepAlive: true, maxSockets: BURST_CONCURRENCY });
  const post = ({ body, headers }) => new Promise((resolve) => {
    const req = http.request(url, { method: 'POST', agent, timeout: ACK_TIMEOUT_MS, headers: { ...headers, 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { text += c; });
      res.on('end', () => resolve({ status: res.statusCode, text }));
      res.on('error', (error) => resolve({ status: 0, error }));
    });
    req.on('timeout', () => req.destroy(new Error(`no answer in ${ACK_TIMEOUT_MS} ms`)));
    req.on('error', (error) => resolve({ status: 0, error }));
    req.end(body);
  });
  return { post, close: () => agent.destroy() };
}

function signedPrs(stack, repo, count) {
  const shas = Array.from({ length: count }, (_, i) => stack.commit(OWNER, repo, { 'README.md': `# ${repo} ${i}\n` }));
  return shas.map((sha, i) => signedDelivery({ secret: stack.secret, event: 'pull_request', payload: prPayload(stack, repo, sha, i + 1) }));
}

// Posts deliveries BURST_CONCURRENCY at a time: each answer's time, status and instance ids.
async function postAll(sender, deliveries) {
  return inPool(deliveries, BURST_CONCURRENCY, async (d) => {
    const start = Date.now();
    const res = await sender.post(d);
    let body = res.text;
    try { body = JSON.parse(res.text); } catch { /* wrangler's own errors are text */ }
    const restarted = typeof body === 'string' && body.includes('restarted mid-request');
    // What a failed answer said (or why there was none), so a 5xx in the table can be traced.
    const said = res.status >= 500 || res.status === 0
      ? `${res.status} ${res.error ? `${res.error.message} (${res.error.code ?? ''}) after ${Date.now() - start} ms` : (typeof body === 'string' ? body : JSON.stringify(body))}`.slice(0, 300)
      : null;
    const ids = (body?.instances ?? []).map((x) => x.id);
    return { ms: Date.now() - start, status: res.status, restarted, said, ids, body: ids.length ? null : String(res.text).slice(0, 200) };
  });
}

// Instances of `ids` finished by the deadline, one at a time (early ones finish first); and
// what each of the others last read as, so a lost one can be traced.
async function finishedBy(stack, ids, deadlineMs) {
  let n = 0;
  const unfinished = [];
  for (const id of ids) {
    const left = deadlineMs - Date.now();
    let last = 'not asked: the deadline had passed';
    if (left > 0 && await until(async () => {
      // A request this client could not make (a reset under the load) is asked again, not
      // counted as a lost delivery.
      const got = await stack.api(`/v1/executions/${id}`).catch((e) => ({ status: 0, body: { error: e.message } }));
      const { status, body } = got;
      last = `${status} ${body?.execution?.status ?? JSON.stringify(body?.error ?? body).slice(0, 120)}`;
      return status === 200 && TERMINAL.has(body.execution?.status) ? true : null;
    }, `${id} to finish`, left).catch((e) => { last += ` (${e.message.slice(0, 120)})`; return false; })) n += 1;
    else unfinished.push(`${id}: ${last}`);
  }
  return { done: n, unfinished };
}

// 500 signed deliveries, 50 in flight: ack latency, 5xx, and every delivery's instance created
// once and run to its end (with ACK_FIRST on, creations wait while a burst is answered:
// `http::ack_first`).
async function burst(stack) {
  // No .sluice.toml: each check ends not-configured at once, so the figure is the ack path and
  // the creation, not 500 clones. A commit each: one instance per delivery (the key is the sha).
  const warm = signedPrs(stack, 'burst-warmup', BURST_WARMUP);
  const deliveries = signedPrs(stack, 'burst', BURST_DELIVERIES);
  await settleIdleConnections();
  const sender = burstSender(stack);
  try {
    const warmAcks = await postAll(sender, warm);
    await finishedBy(stack, warmAcks.flatMap((a) => a.ids), Date.now() + FINISH_TIMEOUT_MS);
    const t0 = Date.now();
    const acks = await postAll(sender, deliveries);
    const wallMs = Date.now() - t0;
    // Lost: a delivery not acknowledged with an instance of its own, or one that never finished.
    const ids = [...new Set(acks.flatMap((a) => a.ids))];
    const { done, unfinished } = await finishedBy(stack, ids, Date.now() + FINISH_TIMEOUT_MS);
    // Each lost delivery, traced: an answer that named no instance, or an instance unfinished.
    const lostWhy = [
      ...acks.filter((a) => a.ids.length === 0).map((a) => `answered ${a.status} naming no instance: ${a.body}`),
      ...unfinished,
    ];
    return {
      perSecond: (BURST_DELIVERIES * 1000) / wallMs,
      p50: pct(acks.map((a) => a.ms), 50),
      p99: pct(acks.map((a) => a.ms), 99),
      fiveXx: acks.filter((a) => a.status >= 500 || a.status === 0).length,
      // 5xx that `wrangler dev` itself answered: its local runtime restarted mid-request under
      // the load (the request never reached an answer of Sluice's; GitHub would redeliver).
      restarts: acks.filter((a) => a.restarted).length,
      failures: acks.filter((a) => a.said).slice(0, 3).map((a) => a.said),
      // A delivery may start more than one instance (a check and a preview): every id counts.
      lost: acks.filter((a) => a.ids.length === 0).length + (ids.length - done),
      lostWhy: lostWhy.slice(0, 3),
      settledMs: Date.now() - t0,
      warmup: { p50: pct(warmAcks.map((a) => a.ms), 50), p99: pct(warmAcks.map((a) => a.ms), 99) },
    };
  } finally {
    sender.close();
  }
}

// The most intervals open at once, from [start, end] pairs.
export function maxOverlap(intervals) {
  const events = intervals.flatMap(([s, e]) => [[s, 1], [e, -1]]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let open = 0;
  let most = 0;
  for (const [, d] of events) most = Math.max(most, (open += d));
  return most;
}

// Admissions that overtook an earlier waiter: pairs where one entered the pools' queue first
// (the start of its first admission round, which queues it in the first pool before anything
// else) and the other was admitted first (the end of its last round). A round takes every pool
// with room, so its end says nothing about when it queued.
export function overtakes(waiters) {
  let n = 0;
  for (const a of waiters) {
    for (const b of waiters) if (a.queued < b.queued && b.admitted < a.admitted) n++;
  }
  return n;
}

function admissionOf(e) {
  const tries = e.steps.filter((s) => s.name.startsWith('gate: admission'));
  return { queued: tries[0]?.started_ms ?? Infinity, admitted: tries.at(-1)?.finished_ms ?? Infinity };
}

// 100 trivial checks at once through the pool: total time, FIFO admission, never > capacity busy.
async function crowd(stack) {
  const repo = 'crowd';
  const log = stack.sharedFile('crowd.log');
  // A command long enough that sandboxes are seen busy together.
  const cmd = `echo start $SLUICE_SHA $(date +%s%3N) >> ${log}; sleep ${CROWD_COMMAND_S}; echo end $SLUICE_SHA $(date +%s%3N) >> ${log}`;
  const toml = `[check]\ncommand = "${cmd}"\n`;
  const shas = Array.from({ length: CROWD_CHECKS }, (_, i) => stack.commit(OWNER, repo, i === 0 ? { '.sluice.toml': toml, V: '0' } : { V: `${i}` }));
  await settleIdleConnections();
  const t0 = Date.now();
  const acks = await inPool(shas, BURST_CONCURRENCY, (sha, i) => stack.sendWebhook('pull_request', prPayload(stack, repo, sha, i + 1)));
  const ends = [];
  for (const a of acks) ends.push(await finished(stack, a.body.instances[0].id));
  const totalMs = Date.now() - t0;
  const lines = readFileSync(log, 'utf8').trim().split('\n').map((l) => l.split(' '));
  const starts = new Map(lines.filter((l) => l[0] === 'start').map((l) => [l[1], Number(l[2])]));
  const stops = new Map(lines.filter((l) => l[0] === 'end').map((l) => [l[1], Number(l[2])]));
  return {
    totalMs,
    ran: starts.size,
    busyMax: maxOverlap([...starts.entries()].map(([s, t]) => [t, stops.get(s) ?? t])),
    overtakes: overtakes(ends.map(admissionOf)),
  };
}

// One check alone, OVERHEAD_ROUNDS times: webhook -> in_progress, and webhook -> completed minus
// the checkout's and the command's own time, from the stand-in's record of each update. `warmup`
// rounds first are run and dropped (the check-latency section's first-request compilation).
async function overhead(stack, { rounds: n = OVERHEAD_ROUNDS, warmup = 0, repo = 'overhead' } = {}) {
  const rounds = [];
  for (let i = 0; i < n + warmup; i++) {
    const sha = stack.commit(OWNER, repo, i === 0 ? { '.sluice.toml': '[check]\ncommand = "true"\n', V: '0' } : { V: `${i}` });
    const sent = Date.now();
    const res = await stack.sendWebhook('pull_request', prPayload(stack, repo, sha, i + 1));
    const e = await finished(stack, res.body.instances[0].id);
    const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
    const run = runs.find((r) => r.head_sha === sha);
    const at = (status) => run.history.find((h) => h.status === status)?.at_ms;
    const own = (name) => e.steps.filter((s) => s.name.startsWith(name)).reduce((t, s) => t + (s.finished_ms - s.started_ms), 0);
    // Each step from the webhook: when it started and how long it took (docs/capacity.md reads
    // where a trivial check's time goes from these), and the index's round trips.
    const steps = e.steps.map((s) => [s.name, s.started_ms - sent, s.finished_ms - s.started_ms]);
    const round = { bytes: JSON.stringify(e).length, sha, sent, inProgress: at('in_progress') - sent, completed: at('completed') - sent, work: own('checkout') + own('run check command'), finished: e.execution.finished_ms - sent, indexRoundTrips: e.execution.index_round_trips, steps };
    if (i >= warmup) rounds.push(round);
  }
  const last = rounds.at(-1);
  const { calls, others } = await callsBeforeInProgress(stack, last.sent, last.sent + last.inProgress, { repo, sha: last.sha });
  return { rounds, calls, others, bytes: last.bytes };
}

// The GitHub calls the last overhead check made from its webhook until its check run showed
// in_progress (its installation token cached by the earlier rounds), from the stand-in's call log.
// The same delivery starts a preview instance, which reads `.sluice.toml` on the default branch
// meanwhile: a read at another ref than the check's commit is that instance's, listed apart.
async function callsBeforeInProgress(stack, sentMs, inProgressMs, { repo, sha }) {
  const { calls } = await stack.standinGet('/_standin/calls');
  const named = (c) => `${c.method} ${c.path.replace(/^\/repos\/[^/]+\/[^/]+/, '')}${c.query?.ref ? `?ref=${c.query.ref.slice(0, 12)}` : ''}`;
  // The log is in arrival order and its times are whole milliseconds: a call the check made just
  // after its in_progress POST can carry the in_progress record's millisecond, so the window ends
  // at the POST that created this commit's check run (a failed one, retried, does not end it).
  const inWindow = calls.filter((c) => c.at_ms >= sentMs && c.at_ms <= inProgressMs);
  const post = inWindow.findIndex((c) => c.method === 'POST' && c.path === `/repos/${OWNER}/${repo}/check-runs` && c.status === 201 && c.body?.head_sha === sha);
  const window = post < 0 ? inWindow : inWindow.slice(0, post + 1);
  const othersRead = (c) => c.path.includes('/contents/') && c.query?.ref && c.query.ref !== sha;
  return { calls: window.filter((c) => !othersRead(c)).map(named), others: window.filter(othersRead).map(named) };
}

// `npm run bench -- --only check-latency [--rounds N]`: the one-check rows alone (webhook ->
// in_progress, webhook -> completed), N rounds after one dropped warm-up round, with each round's
// step timings printed; no peer, no burst, no crowd.
const CHECK_LATENCY_WARMUP_ROUNDS = 1;
export async function benchCheckLatency(stack, { rounds = OVERHEAD_ROUNDS } = {}) {
  const o = await overhead(stack, { rounds, warmup: CHECK_LATENCY_WARMUP_ROUNDS, repo: 'latency' });
  for (const r of o.rounds) console.log('check-latency: round', JSON.stringify({ inProgress: r.inProgress, completed: r.completed, finished: r.finished, indexRoundTrips: r.indexRoundTrips, steps: r.steps }));
  const col = (k) => o.rounds.map((r) => r[k]);
  const own = o.rounds.map((r) => r.completed - r.work);
  return [
    { figure: `one check: webhook -> check run in_progress p50 / p99 (${rounds} rounds)`, sluice: `${ms(pct(col('inProgress'), 50))} / ${ms(pct(col('inProgress'), 99))}`, target: 'p50 <= 60 ms', met: pct(col('inProgress'), 50) <= 60 },
    { figure: `one check (\`true\`): webhook -> completed p50 / p99 (${rounds} rounds)`, sluice: `${ms(pct(col('completed'), 50))} / ${ms(pct(col('completed'), 99))}`, target: 'p50 <= 200 ms, p99 <= 300 ms', met: pct(col('completed'), 50) <= 200 && pct(col('completed'), 99) <= 300 },
    { figure: 'one check: webhook -> instance finished (gates released) p50 / p99', sluice: `${ms(pct(col('finished'), 50))} / ${ms(pct(col('finished'), 99))}`, target: '' },
    { figure: "one check: Sluice's own time (completed minus checkout and command) p50 / p99", sluice: `${ms(pct(own, 50))} / ${ms(pct(own, 99))}`, target: '' },
  ];
}

// Deploys alone, for their cost units.
async function deploys(stack) {
  const repo = 'deploys';
  let bytes = 0;
  for (let i = 0; i < DEPLOY_ROUNDS; i++) {
    const files = i === 0 ? { '.sluice.toml': '[deploy]\nbranch = "main"\ncommand = "true"\n', V: '0' } : { V: `${i}` };
    const sha = stack.commit(OWNER, repo, files);
    const payload = pushPayload({ owner: OWNER, repo, after: sha, installationId: 42, cloneUrl: stack.cloneUrl(OWNER, repo) });
    const res = await stack.sendWebhook('push', payload);
    bytes = JSON.stringify(await finished(stack, res.body.instances[0].id)).length;
  }
  return bytes;
}

// Units and dollars per 1,000 executions of `run` in `repo` since `sinceMs` (GET /v1/costs).
async function costPer1000(stack, run, repo, sinceMs) {
  const { body } = await stack.api(`/v1/costs?since=${sinceMs}&run=${run}`);
  const r = body.repositories.find((x) => x.repo === `${OWNER}/${repo}`);
  const k = 1000 / r.executions;
  return { units: r.costs.units, steps: r.steps / r.executions, per1000: r.costs.dollars.total * k, workflows1000: r.costs.workflows_dollars * k, n: r.executions };
}

function costRows(label, c) {
  const u = c.units;
  const per = (v) => (v / c.n).toFixed(1);
  return [
    { figure: `${label}: units per run (DO req / DO rows w / D1 stmts / D1 rows r,w / R2 A,B / GitHub calls / sandbox ms)`, sluice: `${per(u.do_requests)} / ${per(u.do_rows_written)} / ${per(u.d1_statements)} / ${per(u.d1_rows_read)},${per(u.d1_rows_written)} / ${per(u.r2_class_a)},${per(u.r2_class_b)} / ${per(u.github_calls)} / ${per(u.sandbox_ms)}`, peer: `${c.steps.toFixed(1)} steps`, target: 'counted, not estimated' },
    { figure: `${label}: modeled $ per 1,000 runs (vs the same runs on Workflows step billing)`, sluice: usd(c.per1000), peer: usd(c.workflows1000), ratio: `${(c.per1000 / c.workflows1000).toFixed(2)}x`, target: '< Workflows', met: c.per1000 < c.workflows1000 },
  ];
}

// `ackFirst`: whether the stack runs with burst deferral (ACK_FIRST), for the burst rows' labels.
export async function benchScale(stack, { ackFirst = 'on' } = {}) {
  const since = Date.now();
  // Each section's raw figures as they come, so a later failure loses none.
  const b = await burst(stack);
  console.log('scale: burst', JSON.stringify(b));
  const o = await overhead(stack);
  console.log('scale: overhead', JSON.stringify(o));
  const cr = await crowd(stack);
  console.log('scale: crowd', JSON.stringify(cr));
  const deployBytes = await deploys(stack);
  const checks = await costPer1000(stack, 'check', 'overhead', since);
  const deployCosts = await costPer1000(stack, 'deploy', 'deploys', since);
  const col = (k) => o.rounds.map((r) => r[k]);
  const own = o.rounds.map((r) => r.completed - r.work);
  return [
    { figure: `burst: ${BURST_DELIVERIES} signed pull_request deliveries at ${BURST_CONCURRENCY} concurrent (after ${BURST_WARMUP} to warm the Worker; ACK_FIRST ${ackFirst}), acked per second`, sluice: `${b.perSecond.toFixed(0)}/s`, target: '>= 300/s', met: b.perSecond >= 300 },
    { figure: 'burst: ack latency p50 / p99', sluice: `${ms(b.p50)} / ${ms(b.p99)}`, target: 'p99 <= 250 ms', met: b.p99 <= 250 },
    { figure: "burst: deliveries lost (no instance of its own, or it never finished) / 5xx answers (of which wrangler dev's 'worker restarted mid-request')", sluice: `${b.lost} / ${b.fiveXx} (${b.restarts})`, target: '0 / 0', met: b.lost === 0 && b.fiveXx === 0 },
    { figure: `burst: from the first delivery until every instance ran to its end (${ackFirst === 'on' ? `creations wait for the answers, at most ${CREATE_DEFER_MAX_S} s` : 'creations go at once'})`, sluice: ms(b.settledMs), target: '' },
    { figure: `${CROWD_CHECKS} concurrent trivial checks through POOL_CAPACITY=${POOL_CAPACITY}: total time`, sluice: ms(cr.totalMs), target: `all ${CROWD_CHECKS} ran`, met: cr.ran === CROWD_CHECKS },
    { figure: 'pool crowd: most commands running at once / admissions that overtook an earlier waiter', sluice: `${cr.busyMax} / ${cr.overtakes}`, target: `<= ${POOL_CAPACITY} / 0`, met: cr.busyMax <= POOL_CAPACITY && cr.overtakes === 0 },
    { figure: 'one check: webhook -> check run in_progress p50 / p99', sluice: `${ms(pct(col('inProgress'), 50))} / ${ms(pct(col('inProgress'), 99))}`, target: 'p50 <= 60 ms', met: pct(col('inProgress'), 50) <= 60 },
    { figure: 'one check (`true`): webhook -> completed p50 / p99', sluice: `${ms(pct(col('completed'), 50))} / ${ms(pct(col('completed'), 99))}`, target: 'p50 <= 200 ms', met: pct(col('completed'), 50) <= 200 },
    { figure: "one check: Sluice's own time (completed minus checkout and command) p50 / p99", sluice: `${ms(pct(own, 50))} / ${ms(pct(own, 99))}`, target: '' },
    { figure: `one check: its GitHub calls before in_progress, token cached (${o.calls.join(', ')}; the preview instance's meanwhile: ${o.others.join(', ') || 'none'})`, sluice: String(o.calls.length), target: '<= 2', met: o.calls.length <= 2 },
    { figure: 'index bytes per run, as its API answer (execution + steps): check / deploy (feeds docs/capacity.md)', sluice: `${o.bytes} / ${deployBytes} B`, target: '' },
    ...costRows('check', checks),
    ...costRows('deploy', deployCosts),
  ];
}
