//! What a run needs before it may go on: the check of its commit, for a
//! deploy whose `[deploy] needs = ["check"]`. The run starts the check as a
//! child instance (ADR-0001's child spawn,
//! docs/adr/0001-durable-execution-scope.md: named by its key, so a replayed
//! start creates nothing twice, and an existing check of that commit, a
//! merge queue group's, is taken as it is), and joins it without polling: the child wakes its parent when it
//! ends (`NEEDS_EVENT`). The verdict is read where it is recorded, the
//! check run on GitHub (the system of record), or the index for a check
//! that ended without one. A lost wake costs one bounded wait
//! (`NEEDS_WAIT_MS`), never the verdict; the parent holds no group and no
//! sandbox while it waits.

use serde::{Deserialize, Serialize};

use crate::engine::{CreateRequest, Ctx, RunError, Status, StepConfig, StepFailure};
use crate::store::executions;

use super::config::WHOLE_CHECK;
use super::inputs::{CheckInput, NeededCheck};
use super::key::{Attempt, InstanceKey};
use super::pipeline::JobResult;
use super::report::{github_failure, github_step};
use super::tags::FailureTag;
use super::RunEnv;

/// The event a needed check sends the run that waits for it when it ends.
pub const NEEDS_EVENT: &str = "needs-ended";
/// One wait for the needed check's wake: a lost wake delays the run at most
/// this long before it reads the verdict again.
pub const NEEDS_WAIT_MS: i64 = 5 * 60 * 1000;
/// Waits before the run gives up: 14 × 5 minutes = 70 minutes, past the
/// longest check (`[check] timeout` is at most an hour) and its admission.
pub const NEEDS_ROUNDS_MAX: u32 = 14;
/// The longest a run waits for what it needs (its ceiling grows by it).
pub const NEEDS_WAIT_MS_MAX: i64 = NEEDS_WAIT_MS * NEEDS_ROUNDS_MAX as i64;

/// Reads of the needed check a run makes at most: one per bounded wait
/// (`NEEDS_ROUNDS_MAX`), one per wake (its check's, and any an operator
/// sends), a fresh attempt's; four times the rounds keeps a flood of events
/// from growing the journal without end.
const NEEDS_READS_MAX: u32 = 4 * NEEDS_ROUNDS_MAX;

/// Conclusions of a needed check run that let the run go on: it passed, or
/// its `paths` say the change needs no check.
const PASSING_CONCLUSIONS: [&str; 2] = ["success", "skipped"];
/// Conclusions that judged the commit and found it wanting.
const FAILING_CONCLUSIONS: [&str; 3] = ["failure", "timed_out", "action_required"];

/// Whether what a run needs passed.
#[derive(Debug, Clone, PartialEq)]
pub enum Needs {
    Met,
    /// It did not pass, and why (for the run's summary).
    Failed(String),
}

/// A read of the needed check, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Read {
    Passed,
    /// Its verdict: the commit failed.
    Failed {
        why: String,
    },
    /// It ended without judging the commit (cancelled, skipped as not
    /// current, terminated, errored): another attempt may.
    NoVerdict {
        why: String,
    },
    Pending,
}

/// Starts `needed` (woken back to this instance) and waits, bounded in
/// time (`NEEDS_WAIT_MS_MAX`), for the verdict of its newest attempt (a
/// Re-run of a flaky check counts). A check that ended without a verdict
/// (a merge queue group's, cancelled or skipped when the group merged) is
/// started once more as an attempt of this run's own. Holds nothing.
pub async fn await_needed(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    needed: &NeededCheck,
    jobs: &[String],
) -> Result<Needs, RunError> {
    let create = waking(&needed.create, ctx.instance_id())?;
    let input: CheckInput = decoded(&create)?;
    spawn(ctx, env, "start needed check", &create).await?;
    let deadline_ms: i64 = ctx
        .step("needs deadline", StepConfig::default(), |_| async {
            Ok(env.clock.now_ms() + NEEDS_WAIT_MS_MAX)
        })
        .await?;
    let mut retried = false;
    for _ in 0..NEEDS_READS_MAX {
        let read: Read = ctx
            .step("read needed check", github_step(), |_| async {
                match jobs.iter().any(|j| j == WHOLE_CHECK) {
                    true => read_verdict(env, needed, &input, &create).await,
                    false => read_jobs(env, jobs, &input, &create).await,
                }
            })
            .await?;
        match read {
            Read::Passed => return Ok(Needs::Met),
            Read::Failed { why } => return Ok(Needs::Failed(why)),
            Read::NoVerdict { .. } if !retried => {
                retried = true;
                let again = fresh_attempt(&create, ctx.instance_id())?;
                spawn(ctx, env, "start needed check again", &again).await?;
                continue;
            }
            Read::NoVerdict { why } => return Ok(Needs::Failed(why)),
            Read::Pending => {}
        }
        let left_ms = deadline_ms - ctx.now_ms();
        if left_ms <= 0 {
            break;
        }
        match ctx
            .wait_for_event(
                "await needed check",
                NEEDS_EVENT,
                left_ms.min(NEEDS_WAIT_MS),
            )
            .await
        {
            Ok(_) | Err(RunError::EventTimedOut { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Needs::Failed(format!(
        "`{}` was still running after {} minutes",
        needed.check_run,
        NEEDS_WAIT_MS_MAX / 60_000
    )))
}

async fn spawn(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    name: &str,
    create: &CreateRequest,
) -> Result<(), RunError> {
    ctx.step(name, StepConfig::default(), |_| async {
        env.spawner
            .spawn(create)
            .await
            .map_err(|m| FailureTag::Gate.retryable(m))
    })
    .await
}

/// `create` with this instance as the one it wakes when it ends.
fn waking(create: &CreateRequest, parent: &str) -> Result<CreateRequest, RunError> {
    let mut input = decoded(create)?;
    input.wakes = Some(parent.to_owned());
    let mut create = create.clone();
    create.input = serde_json::json!(input);
    Ok(create)
}

/// Another attempt of the needed check, this run's own
/// (`<key>:rerun-needs-<parent>`): named by the parent, so a replay starts
/// nothing twice.
fn fresh_attempt(create: &CreateRequest, parent: &str) -> Result<CreateRequest, RunError> {
    let key = InstanceKey::parse(&create.key).ok_or_else(|| RunError::InvalidInput {
        message: format!("the needed check's key {:?} is no instance key", create.key),
    })?;
    let tail: String = parent.chars().rev().take(ATTEMPT_PARENT_CHARS).collect();
    let attempt = Attempt::Rerun(format!("needs-{}", tail.chars().rev().collect::<String>()));
    let mut again = create.clone();
    again.key = key.base().with_attempt(Some(attempt)).to_string();
    Ok(again)
}

/// Characters of the parent's id that name its own attempt of a needed
/// check: ids end in a hash, and one parent starts at most one.
const ATTEMPT_PARENT_CHARS: usize = 12;

fn decoded(create: &CreateRequest) -> Result<CheckInput, RunError> {
    serde_json::from_value(create.input.clone()).map_err(|e| RunError::InvalidInput {
        message: format!("the needed check's input: {e}"),
    })
}

/// The verdict of the needed check's newest attempt: its check run's
/// conclusion on GitHub; one that ended without a conclusion that judged
/// the commit gave no verdict.
async fn read_verdict(
    env: &RunEnv<'_>,
    needed: &NeededCheck,
    input: &CheckInput,
    create: &CreateRequest,
) -> Result<Read, StepFailure> {
    let name = needed.check_run.as_str();
    let base = crate::runs::kit::key::base_key(&create.key);
    let newest = executions::newest_attempt(env.db, &base)
        .await
        .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
    let Some((id, status)) = newest else {
        return Ok(Read::Pending);
    };
    let conclusion = env
        .github
        .check_run_conclusion(input.installation_id, &input.repo, &input.sha, name, &id)
        .await
        .map_err(github_failure)?;
    let of = format!("`{name}` of {}", input.sha);
    Ok(match conclusion {
        Some(c) if PASSING_CONCLUSIONS.contains(&c.as_str()) => Read::Passed,
        Some(c) if FAILING_CONCLUSIONS.contains(&c.as_str()) => Read::Failed {
            why: format!("{of} concluded {c}"),
        },
        Some(c) => Read::NoVerdict {
            why: format!("{of} concluded {c}"),
        },
        None if Status::parse(&status).is_some_and(Status::is_terminal) => Read::NoVerdict {
            why: format!("{of} ended {status} without a verdict"),
        },
        None => Read::Pending,
    })
}

/// The results of the jobs `jobs` names, as the newest attempt of the
/// commit's check recorded them when its pipeline ended (its output's
/// `jobs`, each summed from the job units' check runs). A pipeline that
/// does not name a job fails the need, saying so.
async fn read_jobs(
    env: &RunEnv<'_>,
    jobs: &[String],
    input: &CheckInput,
    create: &CreateRequest,
) -> Result<Read, StepFailure> {
    let base = crate::runs::kit::key::base_key(&create.key);
    let newest = executions::newest_attempt(env.db, &base)
        .await
        .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
    let Some((id, status)) = newest else {
        return Ok(Read::Pending);
    };
    if !Status::parse(&status).is_some_and(Status::is_terminal) {
        return Ok(Read::Pending);
    }
    let rows = executions::standings(env.db, &[id.as_str()])
        .await
        .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
    let output = rows
        .first()
        .and_then(|r| r.output_json.as_deref())
        .and_then(|o| serde_json::from_str::<serde_json::Value>(o).ok());
    let results: Option<std::collections::BTreeMap<String, JobResult>> = output
        .as_ref()
        .and_then(|o| o.get("jobs"))
        .and_then(|j| serde_json::from_value(j.clone()).ok());
    let of = |job: &str| format!("`{job}` of {}", input.sha);
    let Some(results) = results else {
        return Ok(Read::NoVerdict {
            why: format!(
                "the pipeline of {} ended {status} without job results",
                input.sha
            ),
        });
    };
    for job in jobs {
        match results.get(job) {
            None => {
                return Ok(Read::Failed {
                    why: format!("{} is no job of that commit's pipeline", of(job)),
                })
            }
            Some(r) if r.lets_dependents_run() => {}
            Some(JobResult::Failed) => {
                return Ok(Read::Failed {
                    why: format!("{} failed", of(job)),
                })
            }
            Some(JobResult::Blocked) => {
                return Ok(Read::Failed {
                    why: format!("{} did not run: a job it needs failed", of(job)),
                })
            }
            Some(_) => {
                return Ok(Read::NoVerdict {
                    why: format!("{} was cancelled", of(job)),
                })
            }
        }
    }
    Ok(Read::Passed)
}
