//! A commit's pipeline (`[jobs.<name>]`, `kit::pipeline`): the commit's
//! check is the parent. Once its preflight passed (supersede, merge group,
//! approval), it starts each job's units as child instances when the jobs
//! they need have ended (ADR-0001's child spawn, named from the parent's id
//! so a replayed start creates nothing twice), and joins them without
//! polling: a child wakes its parent when it ends (`NEEDS_EVENT`, the
//! serial handoff's push), and a lost wake costs one bounded wait. Each
//! unit passes the gates and reports its own check run (`sluice/<job>`); a
//! job whose needs failed, or that `paths` filters out, is concluded
//! `skipped` by the parent without a child, so a required check never
//! hangs. The parent's own check run, `sluice/check`, sums the pipeline up.
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md; ADR-0013:
//! docs/adr/0013-pipelines-as-child-instances.md)

use futures_util::StreamExt;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::engine::{self, CreateRequest, Ctx, InstanceId, RunError, StepConfig, StepFailure};
use crate::github::{CheckConclusion, CheckOutput, CheckRunUpdate};
use crate::journal::Entry;
use crate::runs::kit::config::paths_match;
use crate::runs::kit::config::CONFIG_PATH;
use crate::runs::kit::inputs::CheckInput;
use crate::runs::kit::key::{InstanceKey, Subject};
use crate::runs::kit::needs::NEEDS_EVENT;
use crate::runs::kit::pipeline::{rerun_selection, Job, JobEvent, JobRecord, JobResult, JobUnit};
use crate::runs::kit::report::{details_url, github_failure, github_step, Verdict};
use crate::runs::kit::run::Run;
use crate::runs::kit::tags::FailureTag;
use crate::runs::kit::RunEnv;
use crate::store::executions::{self, Standing};

use super::{cancel_check, CheckRun, Ending};

/// One wait for a child's wake: a lost wake delays the pipeline at most
/// this long before the parent reads its children again.
pub const JOB_WAIT_MS: i64 = 5 * 60 * 1000;
/// The longest a parent waits for its jobs: a chain of jobs of up to an
/// hour each (`[jobs] timeout` is at most 1 h) with their admission; it
/// fits inside the check's run ceiling (`RUN_DURATION_MS_DEFAULT`, 6 h).
pub const PIPELINE_WAIT_MS_MAX: i64 = 5 * 3600 * 1000;
const _: () = assert!(PIPELINE_WAIT_MS_MAX < crate::limits::RUN_DURATION_MS_DEFAULT);
/// Rounds of the parent's loop at most: each either sees a unit end (at
/// most `UNITS_MAX`), or waits up to `JOB_WAIT_MS` (at most 60 in
/// `PIPELINE_WAIT_MS_MAX`), or was woken early by a stray event; twice
/// their sum keeps a flood of events from growing the journal without end.
const PIPELINE_ROUNDS_MAX: u32 = 2 * (crate::runs::kit::pipeline::UNITS_MAX as u32 + 60);
/// Characters of the parent's id in a child's key: ids end in a hash.
const PARENT_TAIL_CHARS: usize = 12;

/// The first step of a pipeline's body: a restart at or after it starts
/// here (`restart_point`), so every job runs again as a unit of the new
/// generation.
const DEADLINE_STEP: &str = "pipeline deadline";

/// Which kind of event the commit's check was started by (`on`).
fn event_of(input: &CheckInput) -> JobEvent {
    match (&input.merge_group, input.pr_number) {
        (Some(_), _) => JobEvent::MergeGroup,
        (None, Some(_)) => JobEvent::PullRequest,
        (None, None) => JobEvent::Push,
    }
}

/// The child that runs `unit` for generation `generation` of the parent
/// `parent_id`. A restarted parent's units are new instances (`.g<n>`):
/// its restart ended the previous generation's, whose keys now name
/// finished instances a create would hand back.
pub fn unit_create(
    input: &CheckInput,
    parent_id: &str,
    generation: u32,
    job: &Job,
    unit: &JobUnit,
    artifacts_from: &[String],
) -> CreateRequest {
    let tail: String = parent_id.chars().rev().take(PARENT_TAIL_CHARS).collect();
    let mut tail: String = tail.chars().rev().collect();
    if generation > 0 {
        tail.push_str(&format!(".g{generation}"));
    }
    let subject = Subject::Check {
        sha: input.sha.clone(),
        pr: input.pr_number,
        job: Some(format!("{}-{tail}", unit.key_part())),
    };
    let key = InstanceKey::new(CheckRun::NAME.as_str(), &input.repo, subject);
    let child = CheckInput {
        needs_approval: false,
        wakes: Some(parent_id.to_owned()),
        job: Some(unit.clone()),
        spec: Some(job.config.clone()),
        rerun: None,
        artifacts_from: artifacts_from.to_vec(),
        ..input.clone()
    };
    CreateRequest {
        indexed: false,
        key: key.to_string(),
        run: CheckRun::NAME.as_str().into(),
        repo: Some(input.repo.clone()),
        entity: Some(input.entity()),
        sha: Some(input.sha.clone()),
        input: serde_json::json!(child),
        max_steps: None,
        max_duration_ms: None,
    }
}

/// The child's instance id (what its check run's `external_id` is).
fn unit_id(create: &CreateRequest) -> String {
    InstanceId::from_key(&create.key).to_string()
}

/// A started unit as the parent tracks it.
struct Started {
    job: String,
    unit: JobUnit,
    id: String,
    result: Option<JobResult>,
}

/// What the parent knows of its pipeline: every job's result once known,
/// why a skipped one was skipped, and the units it started.
struct Board<'j> {
    jobs: &'j [Job],
    results: BTreeMap<String, JobResult>,
    why: BTreeMap<String, String>,
    started: Vec<Started>,
}

/// What one round decides for the jobs not yet started.
#[derive(Default)]
struct Wave<'j> {
    skip: Vec<(&'j Job, JobResult, String)>,
    start: Vec<&'j Job>,
}

impl<'j> Board<'j> {
    fn is_started(&self, job: &str) -> bool {
        self.started.iter().any(|s| s.job == job)
    }

    /// The jobs whose needs have all ended: started, or skipped naming the
    /// need that did not pass (or the filter that left them out).
    fn wave(&self, filtered: &BTreeMap<String, String>) -> Wave<'j> {
        let mut wave = Wave::default();
        for job in self.jobs {
            if self.results.contains_key(&job.name) || self.is_started(&job.name) {
                continue;
            }
            let needs: Vec<(&String, Option<&JobResult>)> = job
                .config
                .needs
                .iter()
                .map(|n| (n, self.results.get(n)))
                .collect();
            if let Some((n, Some(r))) = needs
                .iter()
                .find(|(_, r)| r.is_some_and(|r| !r.lets_dependents_run()))
            {
                let why = format!("`{n}`, which it needs, {}", result_word(**r));
                wave.skip.push((job, JobResult::Blocked, why));
            } else if needs.iter().all(|(_, r)| r.is_some()) {
                match filtered.get(&job.name) {
                    Some(why) => wave.skip.push((job, JobResult::Skipped, why.clone())),
                    None => wave.start.push(job),
                }
            }
        }
        wave
    }

    fn settle(&mut self) {
        for job in self.jobs {
            if self.results.contains_key(&job.name) || !self.is_started(&job.name) {
                continue;
            }
            let units: Vec<Option<JobResult>> = self
                .started
                .iter()
                .filter(|s| s.job == job.name)
                .map(|s| s.result)
                .collect();
            if units.iter().all(Option::is_some) {
                let ended: Vec<JobResult> = units.into_iter().flatten().collect();
                self.results
                    .insert(job.name.clone(), JobResult::of_units(&ended));
            }
        }
    }

    /// The started units of the jobs `job` needs that upload artifacts:
    /// whose archives its units unpack (a job kept from the attempt a
    /// re-run repeats has no unit here, so hands none on).
    fn artifacts_for(&self, job: &Job) -> Vec<String> {
        let uploads = |name: &str| {
            self.jobs
                .iter()
                .any(|j| j.name == name && !j.config.artifacts.is_empty())
        };
        self.started
            .iter()
            .filter(|s| job.config.needs.contains(&s.job) && uploads(&s.job))
            .map(|s| s.id.clone())
            .collect()
    }

    fn done(&self) -> bool {
        self.results.len() == self.jobs.len()
    }

    fn live(&self) -> Vec<&Started> {
        self.started.iter().filter(|s| s.result.is_none()).collect()
    }
}

fn result_word(r: JobResult) -> &'static str {
    match r {
        JobResult::Passed => "passed",
        JobResult::Failed => "failed",
        JobResult::Cancelled => "was cancelled",
        JobResult::Skipped | JobResult::Blocked => "was skipped",
    }
}

/// Runs the pipeline `jobs` for the commit's check `input` and sums it up;
/// `results` receives every job's result (the parent's output lists them
/// for a deploy's `needs`).
pub async fn drive(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    jobs: &[Job],
    results: &RefCell<Vec<JobRecord>>,
) -> Result<Verdict, RunError> {
    let filtered = filtered_out(ctx, env, input, jobs).await?;
    let deadline_ms: i64 = ctx
        .step(DEADLINE_STEP, StepConfig::default(), |_| async {
            Ok(env.clock.now_ms() + PIPELINE_WAIT_MS_MAX)
        })
        .await?;
    let kept = kept_results(ctx, env, input, jobs).await?;
    let why = kept
        .keys()
        .map(|k| (k.clone(), "kept from the attempt re-run".to_owned()))
        .collect();
    let mut board = Board {
        jobs,
        results: kept,
        why,
        started: Vec::new(),
    };
    let mut timed_out = false;
    for _ in 0..PIPELINE_ROUNDS_MAX {
        advance(ctx, env, input, &mut board, &filtered).await?;
        if board.done() {
            break;
        }
        if read_units(ctx, env, input, &mut board).await? {
            continue;
        }
        let left_ms = deadline_ms - ctx.now_ms();
        if left_ms <= 0 {
            timed_out = true;
            break;
        }
        match ctx
            .wait_for_event("await jobs", NEEDS_EVENT, left_ms.min(JOB_WAIT_MS))
            .await
        {
            Ok(_) | Err(RunError::EventTimedOut { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if !board.done() {
        give_up(ctx, env, input, &mut board, timed_out).await?;
    }
    *results.borrow_mut() = records(&board);
    Ok(summary(env, &board))
}

/// The results a re-run keeps (`CheckInput::rerun`): those of the
/// attempt it repeats, for the jobs it does not select. An attempt whose
/// results cannot be read keeps nothing: every job runs again.
async fn kept_results(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    jobs: &[Job],
) -> Result<BTreeMap<String, JobResult>, RunError> {
    let Some(rerun) = &input.rerun else {
        return Ok(BTreeMap::new());
    };
    let previous: BTreeMap<String, JobResult> = ctx
        .step(
            "read the attempt re-run",
            StepConfig::default(),
            |_| async {
                let row = executions::get(env.db, &rerun.of)
                    .await
                    .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
                Ok(row
                    .and_then(|r| r.output_json)
                    .and_then(|o| serde_json::from_str::<serde_json::Value>(&o).ok())
                    .and_then(|o| serde_json::from_value(o.get("jobs")?.clone()).ok())
                    .unwrap_or_default())
            },
        )
        .await?;
    let again = rerun_selection(jobs, &previous, rerun.job.as_deref());
    Ok(previous
        .into_iter()
        .filter(|(name, _)| !again.contains(name) && jobs.iter().any(|j| &j.name == name))
        .collect())
}

/// Every job as the parent's output records it, in `needs` order.
fn records(board: &Board<'_>) -> Vec<JobRecord> {
    board
        .jobs
        .iter()
        .map(|j| JobRecord {
            name: j.name.clone(),
            needs: j.config.needs.clone(),
            result: board
                .results
                .get(&j.name)
                .copied()
                .unwrap_or(JobResult::Cancelled),
            why: board.why.get(&j.name).cloned(),
        })
        .collect()
}

/// Starts the jobs whose needs ended and concludes the ones to skip, until
/// a round starts or skips nothing (a skip can end what others need).
async fn advance(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    board: &mut Board<'_>,
    filtered: &BTreeMap<String, String>,
) -> Result<(), RunError> {
    // Each round ends or starts at least one job: bounded by the jobs.
    for _ in 0..=board.jobs.len() {
        let wave = board.wave(filtered);
        if wave.skip.is_empty() && wave.start.is_empty() {
            return Ok(());
        }
        if !wave.skip.is_empty() {
            let skip: Vec<(&Job, String)> = wave
                .skip
                .iter()
                .map(|(j, _, why)| (*j, why.clone()))
                .collect();
            skip_jobs(ctx, env, input, &skip).await?;
            for (job, result, why) in wave.skip {
                board.results.insert(job.name.clone(), result);
                board.why.insert(job.name.clone(), why);
            }
        }
        if !wave.start.is_empty() {
            let units = start_jobs(ctx, env, input, board, &wave.start).await?;
            board.started.extend(units);
        }
    }
    Ok(())
}

/// Units created at once by a parent's spawn step: 6 keeps a wave of 50
/// to 9 round trips in a row while leaving the Worker's six simultaneous
/// outbound connections (Cloudflare's limit per request) to the creates.
const SPAWN_CONCURRENCY_MAX: usize = 6;

/// Spawns every unit of `jobs`, in one step.
async fn start_jobs(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    board: &Board<'_>,
    jobs: &[&Job],
) -> Result<Vec<Started>, RunError> {
    let parent = ctx.instance_id();
    let mut started = Vec::new();
    let mut creates = Vec::new();
    for job in jobs {
        let from = board.artifacts_for(job);
        for unit in &job.units {
            let create = unit_create(input, parent, ctx.generation(), job, unit, &from);
            started.push(Started {
                job: job.name.clone(),
                unit: unit.clone(),
                id: unit_id(&create),
                result: None,
            });
            creates.push(create);
        }
    }
    let names: Vec<&str> = jobs.iter().map(|j| j.name.as_str()).collect();
    ctx.step(
        &format!("start jobs {}", names.join(", ")),
        StepConfig::default(),
        |_| async {
            // Every unit's row in one D1 batch, so the wave costs one
            // statement batch however wide it is; a unit whose create is
            // lost below is then due for the sweep's poke.
            let mut creates = creates.clone();
            engine::index_creates(env.db, &mut creates, env.clock.now_ms())
                .await
                .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
            // A few at a time, each its own object's create: a wave of 50
            // shards would otherwise wait out 50 round trips in a row. A
            // spawn is keyed, so a retry after a partial wave creates
            // nothing twice.
            let spawned: Vec<Result<(), String>> = futures_util::stream::iter(&creates)
                .map(|create| env.spawner.spawn(create))
                .buffer_unordered(SPAWN_CONCURRENCY_MAX)
                .collect()
                .await;
            match spawned.into_iter().find_map(Result::err) {
                Some(m) => Err(FailureTag::Gate.retryable(m)),
                None => Ok(()),
            }
        },
    )
    .await?;
    Ok(started)
}

/// Concludes each unit of each job `skip` names `skipped`, saying why: a
/// check run of its own, named as a started unit's would be (`external_id`
/// the child it would have been), so branch protection finds it.
async fn skip_jobs(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    skip: &[(&Job, String)],
) -> Result<(), RunError> {
    let names: Vec<&str> = skip.iter().map(|(j, _)| j.name.as_str()).collect();
    ctx.step(
        &format!("skip jobs {}", names.join(", ")),
        github_step(),
        |_| async {
            for (job, why) in skip {
                for unit in &job.units {
                    let id = unit_id(&unit_create(
                        input,
                        ctx.instance_id(),
                        ctx.generation(),
                        job,
                        unit,
                        &[],
                    ));
                    let summary = format!("Not run: {why}.");
                    conclude_unit(
                        env,
                        input,
                        unit,
                        &id,
                        CheckConclusion::Skipped,
                        "Skipped",
                        summary,
                    )
                    .await?;
                }
            }
            Ok(())
        },
    )
    .await
}

/// Creates (or finds) a unit's check run and concludes it.
async fn conclude_unit(
    env: &RunEnv<'_>,
    input: &CheckInput,
    unit: &JobUnit,
    id: &str,
    conclusion: CheckConclusion,
    title: &str,
    summary: String,
) -> Result<(), StepFailure> {
    let (installation, repo) = (input.installation_id, input.repo.as_str());
    let name = unit.check_run_name();
    let url = details_url(env, id);
    let run_id = env
        .github
        .ensure_check_run(installation, repo, &input.sha, &name, id, &url)
        .await
        .map_err(github_failure)?;
    let update = CheckRunUpdate {
        status: Some("completed"),
        conclusion: Some(conclusion),
        output: Some(CheckOutput {
            title: title.into(),
            summary,
        }),
        ..CheckRunUpdate::default()
    };
    env.github
        .update_check_run(installation, repo, run_id, &update)
        .await
        .map_err(github_failure)
}

/// A unit's end as the parent journals it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct UnitEnd {
    id: String,
    result: JobResult,
}

/// Reads the live units' standings from the index, records the ended
/// ones, and cancels the live siblings of a failed unit whose job fails
/// fast. Whether any unit ended.
async fn read_units(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    board: &mut Board<'_>,
) -> Result<bool, RunError> {
    let live: Vec<String> = board.live().iter().map(|s| s.id.clone()).collect();
    if live.is_empty() {
        return Ok(false);
    }
    let ended: Vec<UnitEnd> = ctx
        .step("read jobs", StepConfig::default(), |_| async {
            let ids: Vec<&str> = live.iter().map(String::as_str).collect();
            let rows = executions::standings(env.db, &ids)
                .await
                .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
            Ok(rows.iter().filter_map(unit_end).collect())
        })
        .await?;
    for end in &ended {
        if let Some(s) = board.started.iter_mut().find(|s| s.id == end.id) {
            s.result = Some(end.result);
        }
    }
    fail_fast(ctx, env, input, board, &ended).await?;
    board.settle();
    Ok(!ended.is_empty())
}

/// An ended child's result: its check run's conclusion as its output
/// recorded it; one that ended without judging the commit was cancelled.
fn unit_end(row: &Standing) -> Option<UnitEnd> {
    let status = crate::engine::Status::parse(&row.status)?;
    if !status.is_terminal() {
        return None;
    }
    let conclusion = row
        .output_json
        .as_deref()
        .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok())
        .and_then(|o| {
            o.get("conclusion")
                .and_then(|c| c.as_str())
                .map(str::to_owned)
        });
    let result = match conclusion.as_deref() {
        Some("success") => JobResult::Passed,
        Some("skipped") => JobResult::Skipped,
        Some("failure" | "timed_out" | "action_required") => JobResult::Failed,
        _ => JobResult::Cancelled,
    };
    Some(UnitEnd {
        id: row.id.clone(),
        result,
    })
}

/// A unit that failed cancels its job's live siblings when the job fails
/// fast (the default): their processes are killed, their check runs
/// concluded `cancelled` naming the failed unit.
async fn fail_fast(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    board: &Board<'_>,
    ended: &[UnitEnd],
) -> Result<(), RunError> {
    let mut cancel: Vec<(&Started, String)> = Vec::new();
    for end in ended.iter().filter(|e| e.result == JobResult::Failed) {
        let Some(failed) = board.started.iter().find(|s| s.id == end.id) else {
            continue;
        };
        let fast = board
            .jobs
            .iter()
            .any(|j| j.name == failed.job && j.fail_fast());
        for s in board.live() {
            if fast && s.job == failed.job && !cancel.iter().any(|(c, _)| c.id == s.id) {
                cancel.push((s, failed.unit.check_run_name()));
            }
        }
    }
    if cancel.is_empty() {
        return Ok(());
    }
    ctx.step("cancel siblings", github_step(), |_| async {
        for (s, failed) in &cancel {
            let ending = Ending {
                title: "Cancelled: a sibling failed",
                summary: format!("Cancelled: `{failed}` failed, and `{}` fails fast.", s.job),
            };
            let live = executions::LiveCheck {
                id: s.id.clone(),
                sha: input.sha.clone(),
                input_json: String::new(),
            };
            cancel_check(
                env,
                input.installation_id,
                &input.repo,
                &live,
                &s.unit.check_run_name(),
                &ending,
            )
            .await?;
        }
        Ok(())
    })
    .await
}

/// The pipeline ran out of time (or rounds): its live units are cancelled,
/// and the jobs not started are skipped saying so.
async fn give_up(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    board: &mut Board<'_>,
    timed_out: bool,
) -> Result<(), RunError> {
    let why = match timed_out {
        true => format!(
            "the pipeline ran past {} hours",
            PIPELINE_WAIT_MS_MAX / 3_600_000
        ),
        false => "the pipeline was woken more often than it may be".to_owned(),
    };
    let live: Vec<(String, JobUnit)> = board
        .live()
        .iter()
        .map(|s| (s.id.clone(), s.unit.clone()))
        .collect();
    ctx.step("cancel live jobs", github_step(), |_| async {
        for (id, unit) in &live {
            let ending = Ending {
                title: "Cancelled: the pipeline gave up",
                summary: format!("Cancelled: {why}."),
            };
            let row = executions::LiveCheck {
                id: id.clone(),
                sha: input.sha.clone(),
                input_json: String::new(),
            };
            cancel_check(
                env,
                input.installation_id,
                &input.repo,
                &row,
                &unit.check_run_name(),
                &ending,
            )
            .await?;
        }
        Ok(())
    })
    .await?;
    for s in board.started.iter_mut().filter(|s| s.result.is_none()) {
        s.result = Some(JobResult::Cancelled);
    }
    board.settle();
    let left: Vec<(&Job, String)> = board
        .jobs
        .iter()
        .filter(|j| !board.results.contains_key(&j.name))
        .map(|j| (j, why.clone()))
        .collect();
    if !left.is_empty() {
        skip_jobs(ctx, env, input, &left).await?;
    }
    for (job, why) in left {
        // Not judged: a deploy that needs it must not take it as passed.
        board.results.insert(job.name.clone(), JobResult::Cancelled);
        board.why.insert(job.name.clone(), why);
    }
    Ok(())
}

/// The jobs this commit's check leaves out, and why: those `on` does not
/// select for its event, and those whose `paths` no changed file matches
/// (read once, as `[check] paths`: a change that cannot be listed, or that
/// touches `.sluice.toml`, runs every job).
async fn filtered_out(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    jobs: &[Job],
) -> Result<BTreeMap<String, String>, RunError> {
    let event = event_of(input);
    let mut out: BTreeMap<String, String> = jobs
        .iter()
        .filter(|j| !j.runs_on(event))
        .map(|j| {
            (
                j.name.clone(),
                format!("its `on` leaves out {event:?} events"),
            )
        })
        .collect();
    let filtered: Vec<&Job> = jobs
        .iter()
        .filter(|j| !j.config.paths.is_empty() && !out.contains_key(&j.name))
        .collect();
    let Some(base) = input.base_sha.as_deref().filter(|_| !filtered.is_empty()) else {
        return Ok(out);
    };
    let unneeded: BTreeSet<String> = ctx
        .step("read changed files", github_step(), |_| async {
            let changed = env
                .github
                .changed_files(input.installation_id, &input.repo, base, &input.sha)
                .await
                .map_err(github_failure)?;
            let Some(c) =
                changed.filter(|c| c.complete && !c.files.iter().any(|f| f == CONFIG_PATH))
            else {
                return Ok(BTreeSet::new());
            };
            Ok(filtered
                .iter()
                .filter(|j| !paths_match(&j.config.paths, &c.files))
                .map(|j| j.name.clone())
                .collect())
        })
        .await?;
    let since: String = base.chars().take(12).collect();
    for name in unneeded {
        out.insert(
            name,
            format!("no matching change: no file changed since {since} matches its `paths`"),
        );
    }
    Ok(out)
}

/// The parent's verdict: passed when every job passed or was skipped, with
/// a table of the jobs, their results and their units' logs.
fn summary(env: &RunEnv<'_>, board: &Board<'_>) -> Verdict {
    let mut lines = vec![
        "| Job | Result | Logs |".to_owned(),
        "|---|---|---|".to_owned(),
    ];
    for job in board.jobs {
        let result = board
            .results
            .get(&job.name)
            .copied()
            .unwrap_or(JobResult::Cancelled);
        let mut cell = result_label(result).to_owned();
        if let Some(why) = board.why.get(&job.name) {
            cell.push_str(&format!(": {why}"));
        }
        let logs: Vec<String> = board
            .started
            .iter()
            .filter(|s| s.job == job.name)
            .map(|s| format!("[{}]({})", s.unit.check_run_name(), details_url(env, &s.id)))
            .collect();
        let needs = match job.config.needs.is_empty() {
            true => String::new(),
            false => format!(" (after {})", job.config.needs.join(", ")),
        };
        lines.push(format!(
            "| `{}`{needs} | {cell} | {} |",
            job.name,
            logs.join(" ")
        ));
    }
    let table = lines.join("\n");
    // A blocked job is named by the job that blocked it.
    let bad: Vec<&str> = board
        .results
        .iter()
        .filter(|(_, r)| !r.lets_dependents_run() && **r != JobResult::Blocked)
        .map(|(n, _)| n.as_str())
        .collect();
    let passed = board.results.values().all(|r| r.lets_dependents_run());
    match passed {
        true => Verdict::Passed {
            summary: format!("Every job passed or had nothing to check.\n\n{table}"),
        },
        false => Verdict::Failed {
            summary: format!("Failed: {} did not pass.\n\n{table}", bad.join(", ")),
        },
    }
}

fn result_label(r: JobResult) -> &'static str {
    match r {
        JobResult::Passed => "✅ passed",
        JobResult::Failed => "❌ failed",
        JobResult::Cancelled => "⏹ cancelled",
        JobResult::Skipped | JobResult::Blocked => "⏭ skipped",
    }
}

/// Where a restart of a pipeline's parent asked at `from_seq` begins: no
/// later than the pipeline's first step. A later one would replay a
/// journaled spawn whose units the restart has ended, and the new
/// generation would wait on units that never run again.
pub fn restart_point(entries: &[Entry], from_seq: u32) -> u32 {
    entries
        .iter()
        .find(|e| e.name == DEADLINE_STEP)
        .map_or(from_seq, |e| e.seq.min(from_seq))
}

/// Ends the live units a parent started (the parent was terminated,
/// restarted or ended in an error): their check runs conclude `cancelled`,
/// their instances are terminated and their processes killed. `Err` when
/// a live unit may not have ended (the listing or one of its ends failed):
/// a restart is refused then, while a terminate's ending stays best effort
/// as the parent's own check run's conclusion.
pub async fn end_children(
    env: &RunEnv<'_>,
    parent_id: &str,
    input: &CheckInput,
    why: &str,
) -> Result<(), String> {
    let live = executions::live_checks_of(
        env.db,
        &input.repo,
        &input.entity(),
        executions::ShaFilter::Only(&input.sha),
    )
    .await
    .map_err(|e| format!("cannot list the pipeline's live jobs: {e}"))?;
    let mut failed = None;
    for row in live {
        let Ok(child) = serde_json::from_str::<CheckInput>(&row.input_json) else {
            continue;
        };
        let Some(unit) = child
            .job
            .filter(|_| child.wakes.as_deref() == Some(parent_id))
        else {
            continue;
        };
        let ending = Ending {
            title: "Cancelled: the pipeline ended",
            summary: format!("Cancelled: the commit's pipeline {why}."),
        };
        let name = unit.check_run_name();
        let ended = cancel_check(
            env,
            input.installation_id,
            &input.repo,
            &row,
            &name,
            &ending,
        )
        .await;
        if let Err(e) = ended {
            failed = Some(format!("cannot end the job {name}: {}", e.message));
        }
    }
    failed.map_or(Ok(()), Err)
}
