// `npm run soak`: crash trials. Each trial starts work on the local stack — one check, a burst
// of pushes to one branch that deploys (plain; with the first push's head read reaching the
// Worker 7 s late while the branch moves on, a delayed enqueue; or with slow checkouts), or a
// burst of pull requests sent at once (whose creations wait for the burst's answers:
// `http::ack_first`) — then, at a random moment, kill -9s the Worker's whole
// process group (workerd: the Worker, its Durable Objects, D1 and R2, all on the persisted local
// state) and, in every other pair of trials, the sandbox agent's too (the whole stack but the
// GitHub stand-in, which plays GitHub); it restarts them on the same state and drives the cron
// sweep until every instance ended. Deliveries whose answer the kill cut off are redelivered with
// the same delivery id, as GitHub does. Side effects are counted outside the engine (the
// stand-in's records, and lines the commands append to a file outside the sandbox):
//   - every instance ends (complete, or skipped: superseded / not current), none errored;
//   - no side effect twice: one check run created per commit, one finished command per commit
//     (a command the agent's crash killed may run again; a finished one never), one GitHub
//     deployment per deploy execution;
//   - never two deploys of a branch at once (their start/end lines never overlap; a command
//     killed with the agent ends when the new agent starts, which kills what the old one left);
//   - the newest commit of a burst is the last one deployed.
// Prints trials, completions and violations, and keeps them in target/soak/last.json for the bench.
// Not part of `npm test`.
//
// Usage: npm run soak [-- --trials N] [-- --seed S]   (builds first unless SLUICE_PREBUILT=1)

import { mkdirSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { pullRequestPayload, pushPayload } from '../tools/github-standin/webhooks.mjs';
import { AGENT_ISOLATED, ROOT, TERMINAL, delay } from '../tools/stack/index.mjs';

const OWNER = 'soak';
// At least 20 trials; 30 is 5 of each of the six kinds.
const TRIALS_DEFAULT = 30;
// 'deploy needs check': a deploy burst whose deploys need the commit's check, which each
// deploy creates alone (a single create: its row is written by its first pass, ADR-0018).
const KINDS = ['check', 'deploy burst', 'pull burst', 'delayed enqueue', 'slow checkout', 'deploy needs check'];
// A delayed-enqueue trial: the first push's head read is answered when it is made and reaches
// the Worker this much later, while the later pushes arrive (past HEAD_READ_FRESH_MS, 5 s, so
// its enqueue reads again).
const HEAD_READ_DELAY_MS = 7_000;
// A slow-checkout trial: every fetch of the repository's git waits this long before it is
// served (a big clone), so the kill lands inside checkouts and deploys wait behind them.
const CHECKOUT_DELAY_MS = 1_500;
const CHECKOUT_DELAYED_FETCHES = 12;
// Pull requests a pull burst sends at once: more than `http::ack_first::BURST_ARRIVALS` (16),
// so their creations wait, and the kill can land while they do.
const BURST_PULLS = 20;
const PULL_SECONDS = 0.1;
// A trial's kill lands this long after its first webhook, at random: from before the first ack
// to well inside the command (a check runs ~1 s, a burst's deploys ~0.6 s each).
const KILL_WINDOW_MS = 2_500;
// Pushes per deploy burst, and how long each deploy's command runs.
const BURST_PUSHES = 3;
const DEPLOY_SECONDS = 0.6;
const CHECK_SECONDS = 0.8;
// After a restart, the sweep is driven this often (crons never fire under wrangler dev), until
// every instance ended or the bound passes (a stuck instance is a violation, not a hang).
const SWEEP_EVERY_MS = 1_000;
const SETTLE_TIMEOUT_MS = 120_000;
const RESULT_FILE = join(ROOT, 'target', 'soak', 'last.json');

// A small seeded generator, so a failing trial's kill point can be replayed with --seed.
function rng(seed) {
  let s = seed >>> 0 || 1;
  return () => ((s = (s * 1_103_515_245 + 12_345) >>> 0) / 2 ** 32);
}

// Sends a delivery; a kill may cut it off (then `res` is null and the trial redelivers it).
async function deliver(stack, event, payload, deliveryId) {
  try {
    const res = await stack.sendWebhook(event, payload, deliveryId);
    return res.status === 202 ? res.body.instances.map((i) => i.id) : null;
  } catch {
    return null;
  }
}

// Drives the sweep until every instance is terminal; returns their statuses (null: never ended).
async function settle(stack, ids) {
  const statuses = new Map();
  const deadline = Date.now() + SETTLE_TIMEOUT_MS;
  while (Date.now() < deadline) {
    await stack.scheduled().catch(() => {});
    for (const id of ids) {
      const { status, body } = await stack.api(`/v1/executions/${id}`).catch(() => ({ status: 0 }));
      if (status === 200 && TERMINAL.has(body.execution.status)) statuses.set(id, body.execution.status);
    }
    if (statuses.size === ids.length) break;
    await delay(SWEEP_EVERY_MS);
  }
  return ids.map((id) => statuses.get(id) ?? null);
}

// Sends the deliveries, kills the Worker at `killAfterMs`, restarts it, redelivers what the kill
// cut off, and returns every instance id the deliveries named.
// With `agentToo`, the agent is killed and restarted as well; `crash.agentBackMs` is when the new
// agent was up (every process of the old one is dead by then).
// With `crash.atOnce`, the deliveries are sent all at once, as a burst.
async function crashDuring(stack, deliveries, killAfterMs, agentToo, crash = {}) {
  const t0 = Date.now();
  const sending = crash.atOnce
    ? Promise.all(deliveries.map((d) => deliver(stack, d.event, d.payload, d.id)))
    : (async () => {
      const out = [];
      for (const [k, d] of deliveries.entries()) {
        // A lazy delivery makes its commit as it is sent (the branch moves now).
        if (d.lazy) deliveries[k] = d.lazy();
        const sent = deliveries[k];
        out.push(await deliver(stack, sent.event, sent.payload, sent.id));
      }
      return out;
    })();
  await delay(Math.max(0, killAfterMs - (Date.now() - t0)));
  await stack.killWorker();
  if (agentToo) {
    await stack.restartAgent();
    crash.agentBackMs = Date.now();
  }
  const first = await sending;
  await stack.restartWorker();
  const ids = [];
  for (const [i, d] of deliveries.entries()) {
    const got = first[i] ?? (await deliver(stack, d.event, d.payload, d.id));
    if (got) ids.push(...got);
    else ids.push(`lost:${d.id}`);
  }
  return [...new Set(ids)];
}

function lines(path) {
  return readFileSync(path, 'utf8').split('\n').filter(Boolean).map((l) => l.split(' '));
}

// One check, killed somewhere between its webhook and its conclusion.
async function checkTrial(stack, i, killAfterMs, agentToo) {
  const repo = `check-${i}`;
  const log = stack.sharedFile(`${repo}.log`);
  const cmd = `echo start $SLUICE_SHA $(date +%s%3N) >> ${log}; sleep ${CHECK_SECONDS}; echo end $SLUICE_SHA $(date +%s%3N) >> ${log}`;
  const toml = `[check]\ncommand = "${cmd}"\n`;
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': toml });
  const payload = pullRequestPayload({ owner: OWNER, repo, sha, installationId: 42, cloneUrl: stack.cloneUrl(OWNER, repo) });
  const crash = {};
  const ids = await crashDuring(stack, [{ event: 'pull_request', payload, id: randomUUID() }], killAfterMs, agentToo, crash);
  const statuses = await settle(stack, ids.filter((id) => !id.startsWith('lost:')));
  const violations = [];
  if (ids.some((id) => id.startsWith('lost:'))) violations.push('a delivery was never acknowledged');
  const { calls } = await stack.standinGet(`/_standin/calls?method=POST&path_prefix=/repos/${OWNER}/${repo}/check-runs`);
  if (calls.filter((c) => c.status < 300).length !== 1) violations.push(`${calls.length} check runs created`);
  violations.push(...commandViolations(lines(log), [sha], crash.agentBackMs, [sha]));
  return { ids, statuses, violations, killedCommands: killedCommands(lines(log)) };
}

// Pull requests sent at once, killed somewhere between the first answer and the last conclusion:
// each must be answered, get one check run, and run its command to its end once.
async function pullBurstTrial(stack, i, killAfterMs, agentToo) {
  const repo = `pulls-${i}`;
  const log = stack.sharedFile(`${repo}.log`);
  const cmd = `echo start $SLUICE_SHA $(date +%s%3N) >> ${log}; sleep ${PULL_SECONDS}; echo end $SLUICE_SHA $(date +%s%3N) >> ${log}`;
  stack.commit(OWNER, repo, { '.sluice.toml': `[check]\ncommand = "${cmd}"\n` });
  const shas = Array.from({ length: BURST_PULLS }, (_, k) => stack.commit(OWNER, repo, { V: `${k}` }));
  const deliveries = shas.map((sha, k) => ({
    event: 'pull_request', id: randomUUID(),
    payload: pullRequestPayload({ owner: OWNER, repo, sha, number: k + 1, installationId: 42, cloneUrl: stack.cloneUrl(OWNER, repo) }),
  }));
  const crash = { atOnce: true };
  const ids = await crashDuring(stack, deliveries, killAfterMs, agentToo, crash);
  const statuses = await settle(stack, ids.filter((id) => !id.startsWith('lost:')));
  const violations = [];
  if (ids.some((id) => id.startsWith('lost:'))) violations.push('a delivery was never acknowledged');
  // Each pull request plans its check and its preview (`src/runs/edge/previews.rs`).
  if (ids.length !== 2 * BURST_PULLS) violations.push(`${ids.length} instances for ${BURST_PULLS} pull requests (a check and a preview each)`);
  const { calls } = await stack.standinGet(`/_standin/calls?method=POST&path_prefix=/repos/${OWNER}/${repo}/check-runs`);
  const created = calls.filter((c) => c.status < 300).length;
  if (created !== BURST_PULLS) violations.push(`${created} check runs created for ${BURST_PULLS} pull requests`);
  violations.push(...commandViolations(lines(log), shas, crash.agentBackMs, shas));
  return { ids, statuses, violations, killedCommands: killedCommands(lines(log)) };
}

// Commands that started and never finished: the agent's crash killed them (so the trial shows
// that its kill landed inside a command, not only that nothing broke).
function killedCommands(logLines) {
  return logLines.filter((l) => l[0] === 'start').length - logLines.filter((l) => l[0] === 'end').length;
}

// No commit's command finished twice, and each of `mustFinish` finished once; a start without its
// end is allowed only for a command the agent's crash killed (started before the new agent was up).
export function commandViolations(logLines, shas, agentBackMs, mustFinish = []) {
  const violations = [];
  for (const sha of new Set([...shas, ...mustFinish])) {
    const mine = logLines.filter((l) => l[1] === sha);
    const ends = mine.filter((l) => l[0] === 'end').length;
    const starts = mine.filter((l) => l[0] === 'start');
    const killed = starts.length - ends;
    if (ends > 1) violations.push(`${sha.slice(0, 7)}'s command finished ${ends} times`);
    if (ends === 0 && mustFinish.includes(sha)) violations.push(`${sha.slice(0, 7)}'s command never finished`);
    // The Worker is down from the kill until after the new agent is up: two starts of one commit
    // before then are a duplicate, whatever ended.
    const early = agentBackMs ? starts.filter((l) => Number(l[2]) < agentBackMs).length : 0;
    if (early > 1) violations.push(`${sha.slice(0, 7)}'s command started ${early} times before the crash`);
    const pairs = spansOf(mine, agentBackMs);
    if (pairs.some((p) => p.ended && agentBackMs && p.start < agentBackMs && p.end > agentBackMs)) {
      violations.push(`${sha.slice(0, 7)}'s command outlived the agent's crash`);
    }
    if (killed > 0 && !pairs.filter((p) => !p.ended).every((p) => agentBackMs && p.start < agentBackMs)) {
      violations.push(`${sha.slice(0, 7)}'s command started ${starts.length} times, finished ${ends}`);
    }
  }
  return violations;
}

// A burst of pushes to one branch, killed somewhere inside it.
function deployTrial(stack, i, killAfterMs, agentToo) {
  return deployBurst(stack, `deploy-${i}`, killAfterMs, agentToo);
}

function deployNeedsCheckTrial(stack, i, killAfterMs, agentToo) {
  return deployBurst(stack, `needs-${i}`, killAfterMs, agentToo, { needsCheck: true });
}

// A deploy burst whose first push's head read reaches the Worker late (answered before the later
// pushes moved the branch): that stale read must supersede nobody who arrived after it.
async function delayedEnqueueTrial(stack, i, killAfterMs, agentToo) {
  const repo = `delayed-${i}`;
  await stack.standinPost('/_standin/latency', {
    path_prefix: `/repos/${OWNER}/${repo}/git/ref/heads/main`, delay_ms: HEAD_READ_DELAY_MS, count: 1, when: 'after',
  });
  return deployBurst(stack, repo, killAfterMs, agentToo, { pushEach: true });
}

// A deploy burst whose checkouts are slow: no taker may start beside a process whose checkout
// outlasted anything, and the kill lands inside checkouts.
async function slowCheckoutTrial(stack, i, killAfterMs, agentToo) {
  const repo = `slow-${i}`;
  await stack.standinPost('/_standin/latency', {
    path_prefix: `/${OWNER}/${repo}.git/`, delay_ms: CHECKOUT_DELAY_MS, count: CHECKOUT_DELAYED_FETCHES, when: 'before',
  });
  return deployBurst(stack, repo, killAfterMs, agentToo);
}

// The pushes of a burst, killed somewhere inside it. With `pushEach`, each commit is pushed to
// the branch just before its webhook (the head moves as the deliveries go); otherwise every
// commit is on the branch first.
async function deployBurst(stack, repo, killAfterMs, agentToo, { pushEach = false, needsCheck = false } = {}) {
  const log = stack.sharedFile(`${repo}.log`);
  const cmd = `echo start $SLUICE_SHA $(date +%s%3N) >> ${log}; sleep ${DEPLOY_SECONDS}; echo end $SLUICE_SHA $(date +%s%3N) >> ${log}`;
  const deploy = `[deploy]\nbranch = "main"\ncommand = "${cmd}"\n`;
  const toml = needsCheck ? `[check]\ncommand = "true"\n\n${deploy}needs = ["check"]\n` : deploy;
  const files = (k) => (k === 0 ? { '.sluice.toml': toml, V: '0' } : { V: `${k}` });
  const deliveryOf = (sha) => ({
    event: 'push', id: randomUUID(),
    payload: pushPayload({ owner: OWNER, repo, after: sha, installationId: 42, cloneUrl: stack.cloneUrl(OWNER, repo) }),
  });
  const shas = [];
  const deliveries = Array.from({ length: BURST_PUSHES }, (_, k) => {
    if (pushEach) return { lazy: () => deliveryOf(shas[k] = stack.commit(OWNER, repo, files(k))) };
    return deliveryOf(shas[k] = stack.commit(OWNER, repo, files(k)));
  });
  const crash = {};
  const ids = await crashDuring(stack, deliveries, killAfterMs, agentToo, crash);
  const statuses = await settle(stack, ids.filter((id) => !id.startsWith('lost:')));
  const violations = deployViolations(lines(log), shas, ids, crash.agentBackMs);
  const killedCmds = killedCommands(lines(log));
  const { deployments } = await stack.standinGet(`/_standin/deployments?repo=${OWNER}/${repo}`);
  for (const sha of shas) {
    const n = deployments.filter((d) => d.sha === sha).length;
    if (n > 1) violations.push(`${n} GitHub deployments of ${sha.slice(0, 7)}`);
  }
  return { ids, statuses, violations, killedCommands: killedCmds };
}

// Each start with its end: the next line of its sha, when that is an end (a command writes
// start, then end). A start without one was killed: by the agent's crash when it started before
// the new agent was up (it ended then: the new agent kills what the old one left before it
// serves), else it never ended (Infinity: overlaps anything after it).
function spansOf(logLines, agentBackMs) {
  const spans = [];
  for (const [k, line] of logLines.entries()) {
    if (line[0] !== 'start') continue;
    const t = Number(line[2]);
    const next = logLines.slice(k + 1).find((l) => l[1] === line[1]);
    const end = next?.[0] === 'end' ? Number(next[2]) : null;
    const killedAt = agentBackMs && t < agentBackMs ? agentBackMs : Infinity;
    spans.push({ sha: line[1], start: t, end: end ?? killedAt, ended: end !== null });
  }
  return spans.sort((a, b) => a.start - b.start);
}

export function deployViolations(logLines, shas, ids, agentBackMs) {
  const violations = [];
  if (ids.some((id) => id.startsWith('lost:'))) violations.push('a delivery was never acknowledged');
  const starts = logLines.filter((l) => l[0] === 'start');
  // The newest commit's deploy must have run to its end; older ones may be superseded.
  violations.push(...commandViolations(logLines, starts.map((l) => l[1]), agentBackMs, [shas.at(-1)]));
  const spans = spansOf(logLines, agentBackMs);
  for (let k = 1; k < spans.length; k++) if (spans[k].start < spans[k - 1].end) violations.push('two deploys at once');
  if (starts.at(-1)?.[1] !== shas.at(-1)) violations.push('the newest commit was not deployed last');
  return violations;
}

async function trial(stack, i, random) {
  const killAfterMs = Math.floor(random() * KILL_WINDOW_MS);
  const kind = KINDS[i % KINDS.length];
  // Trials 3-4, 7-8, ... kill the agent too: half of each kind (the kinds cycle in threes). A command dies with its agent,
  // but what it started lives on until the next agent kills it by uid, which only an isolated
  // agent (root) can: an unisolated one's leftovers would outlive it.
  const agentToo = AGENT_ISOLATED && Math.floor(i / 2) % 2 === 1;
  const run = {
    check: checkTrial, 'deploy burst': deployTrial, 'pull burst': pullBurstTrial,
    'delayed enqueue': delayedEnqueueTrial, 'slow checkout': slowCheckoutTrial,
    'deploy needs check': deployNeedsCheckTrial,
  }[kind];
  const r = await run(stack, i, killAfterMs, agentToo);
  const ended = r.statuses.filter((s) => s === 'complete' || s === 'skipped').length;
  const violations = [...r.violations];
  const unfinished = r.statuses.filter((s) => s !== 'complete' && s !== 'skipped');
  if (unfinished.length) violations.push(`instances ended ${unfinished.map((s) => s ?? 'never').join(', ')}`);
  const killed = agentToo ? 'Worker and agent' : 'Worker';
  const cut = r.killedCommands ? `, ${r.killedCommands} command(s) killed mid-run and run again` : '';
  console.log(`soak: trial ${i + 1} (${kind}, ${killed} killed at ${killAfterMs} ms): ${ended}/${r.statuses.length} ended${cut}` + (violations.length ? `; VIOLATIONS: ${violations.join('; ')}` : ''));
  return { kind, killed, killAfterMs, instances: r.statuses.length, completed: ended, killedCommands: r.killedCommands, violations };
}

// The last soak's figures as bench rows (the bench quotes them; it does not re-run the soak).
export function soakSummary() {
  if (!existsSync(RESULT_FILE)) return [{ figure: 'crash soak (npm run soak)', sluice: 'not run yet', target: '>= 20 trials, 0 violations' }];
  const s = JSON.parse(readFileSync(RESULT_FILE, 'utf8'));
  return [{
    figure: `crash soak (npm run soak, ${s.finished_at}): trials / instances completed / violations`,
    sluice: `${s.trials} / ${s.completed} of ${s.instances} / ${s.violations}`,
    target: '>= 20 / all / 0',
    met: s.trials >= 20 && s.completed === s.instances && s.violations === 0,
  }];
}

async function main() {
  const { values } = parseArgs({ options: { trials: { type: 'string' }, seed: { type: 'string' } } });
  const trials = Number(values.trials ?? TRIALS_DEFAULT);
  const seed = Number(values.seed ?? Date.now() % 1_000_000);
  const { startStack } = await import('../tools/stack/index.mjs');
  console.log(`soak: ${trials} trials, seed ${seed}; starting the stack...`);
  if (!AGENT_ISOLATED) console.log('soak: not root, so the agent runs unisolated and no trial kills it (its commands would outlive it)');
  const stack = await startStack();
  const random = rng(seed);
  const results = [];
  try {
    for (let i = 0; i < trials; i++) results.push(await trial(stack, i, random));
  } finally {
    await stack.stop();
  }
  const sum = (k) => results.reduce((t, r) => t + (typeof r[k] === 'number' ? r[k] : r[k].length), 0);
  const summary = { trials: results.length, instances: sum('instances'), completed: sum('completed'), violations: sum('violations'), killed_commands: sum('killedCommands'), seed, finished_at: new Date().toISOString().slice(0, 16) + 'Z', results };
  mkdirSync(join(ROOT, 'target', 'soak'), { recursive: true });
  writeFileSync(RESULT_FILE, JSON.stringify(summary, null, 2));
  console.log(`\nsoak: trials ${summary.trials}, instances ${summary.instances}, completed ${summary.completed}, violations ${summary.violations}, commands killed with the agent and run again ${summary.killed_commands} (seed ${seed})`);
  if (summary.violations > 0 || summary.completed !== summary.instances) process.exit(1);
}

if (process.argv[1] && import.meta.url.endsWith(process.argv[1].split('/').pop())) {
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
}
