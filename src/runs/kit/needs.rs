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

use crate::engine::{CreateRequest, Ctx, RunError, StepConfig, StepFailure};
use crate::store::executions;

use super::inputs::{CheckInput, NeededCheck};
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

/// Conclusions of a needed check run that let the run go on: it passed, or
/// its `paths` say the change needs no check.
const PASSING_CONCLUSIONS: [&str; 2] = ["success", "skipped"];
/// Index states of an instance that has ended.
const ENDED_STATES: [&str; 4] = ["complete", "errored", "terminated", "skipped"];

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
    Failed { why: String },
    Pending,
}

/// Starts `needed` (woken back to this instance) and waits, bounded, for
/// its verdict. Holds nothing while it waits.
pub async fn await_needed(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    needed: &NeededCheck,
) -> Result<Needs, RunError> {
    let create = waking(&needed.create, ctx.instance_id())?;
    let input: CheckInput = decoded(&create)?;
    ctx.step("start needed check", StepConfig::default(), |_| async {
        env.spawner
            .spawn(&create)
            .await
            .map_err(|m| FailureTag::Gate.retryable(m))
    })
    .await?;
    let id = create.id();
    for _ in 0..NEEDS_ROUNDS_MAX {
        let read: Read = ctx
            .step("read needed check", github_step(), |_| async {
                read_verdict(env, needed, &input, id.as_str()).await
            })
            .await?;
        match read {
            Read::Passed => return Ok(Needs::Met),
            Read::Failed { why } => return Ok(Needs::Failed(why)),
            Read::Pending => {}
        }
        match ctx
            .wait_for_event("await needed check", NEEDS_EVENT, NEEDS_WAIT_MS)
            .await
        {
            Ok(_) | Err(RunError::EventTimedOut { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Needs::Failed(format!(
        "`{}` did not finish within {} minutes",
        needed.check_run,
        NEEDS_WAIT_MS_MAX / 60_000
    )))
}

/// `create` with this instance as the one it wakes when it ends.
fn waking(create: &CreateRequest, parent: &str) -> Result<CreateRequest, RunError> {
    let mut input = decoded(create)?;
    input.wakes = Some(parent.to_owned());
    let mut create = create.clone();
    create.input = serde_json::json!(input);
    Ok(create)
}

fn decoded(create: &CreateRequest) -> Result<CheckInput, RunError> {
    serde_json::from_value(create.input.clone()).map_err(|e| RunError::InvalidInput {
        message: format!("the needed check's input: {e}"),
    })
}

/// The needed check's verdict: its check run's conclusion on GitHub; a
/// check that ended without one (its commit has no `[check]`, it errored)
/// did not pass.
async fn read_verdict(
    env: &RunEnv<'_>,
    needed: &NeededCheck,
    input: &CheckInput,
    id: &str,
) -> Result<Read, StepFailure> {
    let name = needed.check_run.as_str();
    let conclusion = env
        .github
        .check_run_conclusion(input.installation_id, &input.repo, &input.sha, name, id)
        .await
        .map_err(github_failure)?;
    match conclusion {
        Some(c) if PASSING_CONCLUSIONS.contains(&c.as_str()) => return Ok(Read::Passed),
        Some(c) => {
            return Ok(Read::Failed {
                why: format!("`{name}` of {} concluded {c}", input.sha),
            })
        }
        None => {}
    }
    let row = executions::get(env.db, id)
        .await
        .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
    Ok(match row.map(|r| r.status) {
        Some(s) if ENDED_STATES.contains(&s.as_str()) => Read::Failed {
            why: format!("`{name}` of {} ended {s} without a verdict", input.sha),
        },
        _ => Read::Pending,
    })
}
