// Pipeline figures for `npm run bench` (issue 27, ADR-0013): fan-out overhead (N independent jobs
// of S seconds, wall time webhook -> the commit's check ended, over S), join latency (a job's
// command ends -> the command of the job that needs it starts, from the commands' own clocks),
// durable steps per job, a parent starting 50 units at once (webhook -> every unit's first step),
// and a one-job pipeline's webhook -> its check run completed (as `[check]`, and as one
// `[jobs.unit]` with the parent's summary check after it). Local agent backend, the
// bench stack's pools (bench-scale.mjs's POOL_CAPACITY, every check slot open to one repository).

import { readFileSync } from 'node:fs';
import { pollUntil } from '../tools/stack/index.mjs';
import { pullRequestPayload } from '../tools/github-standin/webhooks.mjs';
import { median, pct } from './bench-stats.mjs';

const OWNER = 'bench';
// Issue 27's figure: N = 4 jobs of S = 10 s.
const FAN_OUT_JOBS = 4;
const FAN_OUT_SECONDS = 10;
// A fan-out round is S plus clones and admission; a join round two one-line commands.
const RUN_TIMEOUT_MS = 120_000;
const POLL_MS = 20;
const TERMINAL = new Set(['complete', 'errored', 'terminated', 'skipped']);
const INSTALLATION_ID = 42;

async function parentOf(stack, repo, sha, number) {
  const payload = pullRequestPayload({ owner: OWNER, repo, sha, number, installationId: INSTALLATION_ID, cloneUrl: stack.cloneUrl(OWNER, repo) });
  const t0 = Date.now();
  const res = await stack.sendWebhook('pull_request', payload);
  if (res.status !== 202) throw new Error(`pull_request: ${res.status} ${JSON.stringify(res.body)}`);
  const check = res.body.instances.find((i) => i.run === 'check');
  if (!check) throw new Error(`no check: ${JSON.stringify(res.body)}`);
  return { id: check.id, t0 };
}

async function ended(stack, id) {
  let execution;
  await pollUntil(async () => {
    const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
    execution = res.body?.execution;
    return TERMINAL.has(execution?.status);
  }, { what: `execution ${id} to end`, timeoutMs: RUN_TIMEOUT_MS, intervalMs: POLL_MS });
  if (execution.status !== 'complete') throw new Error(`${id} ended ${execution.status}`);
  return { at: Date.now(), execution };
}

/// Durable steps per job: the parent's and its units' steps over the jobs.
async function stepsPerJob(stack, parentId, jobs) {
  const res = await stack.api(`/v1/executions/${encodeURIComponent(parentId)}`);
  const units = res.body.pipeline?.jobs.flatMap((j) => j.units) ?? [];
  let steps = res.body.execution.step_count;
  for (const u of units) {
    const r = await stack.api(`/v1/executions/${encodeURIComponent(u.id)}`);
    steps += r.body.execution.step_count;
  }
  return steps / jobs;
}

async function fanOutRound(stack, i) {
  const repo = `fanout-${i}`;
  const config = Array.from({ length: FAN_OUT_JOBS }, (_, j) => `[jobs.j${j}]\ncommand = "sleep ${FAN_OUT_SECONDS}"\n`).join('\n');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const { id, t0 } = await parentOf(stack, repo, sha, 1);
  const { at } = await ended(stack, id);
  return { ratio: (at - t0) / (FAN_OUT_SECONDS * 1000), steps: await stepsPerJob(stack, id, FAN_OUT_JOBS) };
}

async function joinRound(stack, i) {
  const repo = `join-${i}`;
  const log = stack.sharedFile(`join-${i}.log`);
  const config = [
    '[jobs.first]', `command = "echo end $(date +%s%N) >> ${log}"`, '',
    '[jobs.second]', `command = "echo start $(date +%s%N) >> ${log}"`, 'needs = ["first"]', '',
  ].join('\n');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const { id, t0 } = await parentOf(stack, repo, sha, 1);
  const { at } = await ended(stack, id);
  const marks = Object.fromEntries(readFileSync(log, 'utf8').trim().split('\n').map((l) => l.split(' ')));
  const endMs = Number(BigInt(marks.end) / 1_000_000n);
  // The dependent's command step began (its checkout, fence and process start follow, in the
  // sandbox): same machine, same clock as the commands' `date`.
  const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
  const second = res.body.pipeline.jobs.find((j) => j.name === 'second').units[0].id;
  const unit = await stack.api(`/v1/executions/${encodeURIComponent(second)}`);
  const step = unit.body.steps.find((s) => s.name.startsWith('run check command'));
  return { joinMs: Number(BigInt(marks.start) - BigInt(marks.end)) / 1e6, toStepMs: step.started_ms - endMs, wallMs: at - t0 };
}

// Issue 26's wide fan-out: a parent starting WIDE_UNITS units at once (jobs a, b and c of 16
// shards each and d of 2), each `true`. Wall time from the webhook until every unit has begun
// its first step (each unit's own earliest step start, from the API), and until the parent ended.
const WIDE_SHARDS = [['a', 16], ['b', 16], ['c', 16], ['d', 2]];
const WIDE_UNITS = WIDE_SHARDS.reduce((n, [, s]) => n + s, 0);

export async function wideRound(stack, i) {
  const repo = `wide-${i}`;
  const config = WIDE_SHARDS.map(([job, shards]) => `[jobs.${job}]\ncommand = "true"\nshards = ${shards}\n`).join('\n');
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': config });
  const { id, t0 } = await parentOf(stack, repo, sha, 1);
  const { at } = await ended(stack, id);
  const res = await stack.api(`/v1/executions/${encodeURIComponent(id)}`);
  const units = res.body.pipeline.jobs.flatMap((j) => j.units);
  if (units.length !== WIDE_UNITS) throw new Error(`${units.length} units, not ${WIDE_UNITS}`);
  let lastFirstStep = 0;
  for (const u of units) {
    const r = await stack.api(`/v1/executions/${encodeURIComponent(u.id)}?steps_limit=1`);
    lastFirstStep = Math.max(lastFirstStep, r.body.steps[0].started_ms);
  }
  return { startedMs: lastFirstStep - t0, endedMs: at - t0 };
}

// Issue 23's warm / cold: a real dependency install (scripts/bench-fixtures/npm-install: 165
// packages from the npm registry) as a job with a cache of node_modules and ~/.npm, keyed by its
// lockfile. The first commit's install runs cold (and saves the cache), the second commit's with
// the cache restored; each install's time is the command's own, from its check run's summary.
const INSTALL_FIXTURE = new URL('./bench-fixtures/npm-install/', import.meta.url);
const INSTALL_CONFIG = [
  '[jobs.install]',
  'command = "npm install --no-audit --no-fund --prefer-offline"',
  'timeout = "10m"',
  'cache = [{ paths = ["node_modules", "~/.npm"], key_files = ["package-lock.json"] }]', '',
].join('\n');

async function installSeconds(stack, repo, files, number) {
  const sha = stack.commit(OWNER, repo, { '.sluice.toml': INSTALL_CONFIG, ...files });
  const { id } = await parentOf(stack, repo, sha, number);
  await ended(stack, id);
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  const run = runs.find((r) => r.head_sha === sha && r.name === 'sluice/install');
  if (run?.conclusion !== 'success') throw new Error(`install: ${JSON.stringify(run?.output)}`);
  const seconds = Number(/exited with code 0 after ([\d.]+) s/.exec(run.output.summary)?.[1]);
  return { seconds, summary: run.output.summary };
}

export async function benchInstall(stack) {
  const files = Object.fromEntries(['package.json', 'package-lock.json'].map((f) => [f, readFileSync(new URL(f, INSTALL_FIXTURE), 'utf8')]));
  const cold = await installSeconds(stack, 'install', files, 1);
  const warm = await installSeconds(stack, 'install', { ...files, 'CHANGELOG.md': 'another commit\n' }, 1);
  if (!/cache `node_modules, ~\/\.npm`: hit/.test(warm.summary)) throw new Error(`the warm run missed: ${warm.summary}`);
  const restore = /hit `[^`]+` \((\d+) bytes, restored in ([\d.]+) s\)/.exec(warm.summary);
  const ratio = warm.seconds / cold.seconds;
  return [
    { figure: 'cache: a real npm install (165 packages), cold -> warm (the command\'s own time)', sluice: `${cold.seconds.toFixed(1)} s -> ${warm.seconds.toFixed(1)} s`, peer: '', target: '', met: true },
    { figure: '  warm / cold', sluice: ratio.toFixed(2), peer: '', target: '<= 0.25', met: ratio <= 0.25 },
    { figure: '  the warm run\'s restore (before its command)', sluice: restore ? `${(Number(restore[1]) / 1e6).toFixed(0)} MB in ${restore[2]} s` : '?', peer: '', target: '', met: true },
  ];
}

// When each of the commit's check runs first showed `completed`, from the stand-in's record.
async function completedAt(stack, repo, sha) {
  const { check_runs: runs } = await stack.standinGet(`/_standin/check-runs?repo=${OWNER}/${repo}`);
  return Object.fromEntries(runs.filter((r) => r.head_sha === sha).map((r) => [r.name, r.history.find((h) => h.status === 'completed')?.at_ms]));
}

// A trivial one-job pipeline, as `[check]` (the one-job pipeline in the commit's own instance) and
// as `[jobs.unit]` (a parent and one unit): webhook -> each check run `completed`.
async function oneJobRound(stack, i) {
  const out = {};
  for (const [kind, toml] of [['check', '[check]\ncommand = "true"\n'], ['jobs', '[jobs.unit]\ncommand = "true"\n']]) {
    const repo = `onejob-${kind}-${i}`;
    const sha = stack.commit(OWNER, repo, { '.sluice.toml': toml });
    const { id, t0 } = await parentOf(stack, repo, sha, 1);
    await ended(stack, id);
    const at = await completedAt(stack, repo, sha);
    if (kind === 'check') out.check = at['sluice/check'] - t0;
    else Object.assign(out, { unit: at['sluice/unit'] - t0, summary: at['sluice/check'] - t0 });
  }
  return out;
}

export async function benchPipelines(stack, { rounds }) {
  const fan = [];
  const joins = [];
  const one = [];
  const wide = [];
  for (let i = 0; i < rounds; i++) {
    fan.push(await fanOutRound(stack, i));
    joins.push(await joinRound(stack, i));
    one.push(await oneJobRound(stack, i));
    wide.push(await wideRound(stack, i));
  }
  const ratio = median(fan.map((r) => r.ratio));
  const join = joins.map((r) => r.joinMs);
  const toStep = joins.map((r) => r.toStepMs);
  const ms = (v) => `${Math.round(v)} ms`;
  const oneOf = (k) => one.map((r) => r[k]);
  const p50p99 = (v) => `${ms(median(v))} / ${ms(pct(v, 99))}`;
  return [
    { figure: `pipeline: ${FAN_OUT_JOBS} jobs of ${FAN_OUT_SECONDS} s, wall / S (p50)`, sluice: ratio.toFixed(2), peer: '', target: '<= 1.15', met: ratio <= 1.15 },
    { figure: 'pipeline: a job ends -> its dependent command starts (p50 / p99)', sluice: p50p99(join), peer: '', target: 'p50 <= 100 ms', met: median(join) <= 100 },
    { figure: '  of which: the job ends -> the dependent\'s command step begins, before its checkout', sluice: p50p99(toStep), peer: '', target: '', met: true },
    { figure: `pipeline: a parent starts ${WIDE_UNITS} units: webhook -> every unit's first step (p50 / p99)`, sluice: p50p99(wide.map((r) => r.startedMs)), peer: '', target: '', met: true },
    { figure: `  and webhook -> the parent ended, ${WIDE_UNITS} \`true\` units through the pools (p50 / p99)`, sluice: p50p99(wide.map((r) => r.endedMs)), peer: '', target: '', met: true },
    { figure: 'pipeline: durable steps per job (parent and units)', sluice: median(fan.map((r) => r.steps)).toFixed(1), peer: '', target: '', met: true },
    { figure: 'one-job pipeline [check] "true": webhook -> sluice/check completed (p50 / p99)', sluice: p50p99(oneOf('check')), peer: '', target: 'p50 <= 200 ms', met: median(oneOf('check')) <= 200 },
    { figure: 'one job [jobs.unit] "true": webhook -> sluice/unit completed (p50 / p99)', sluice: p50p99(oneOf('unit')), peer: '', target: 'p50 <= 200 ms', met: median(oneOf('unit')) <= 200 },
    { figure: 'one job [jobs.unit]: webhook -> the summary sluice/check completed (p50 / p99)', sluice: p50p99(oneOf('summary')), peer: '', target: '', met: true },
  ];
}
