//! The `cancel-checks` run: the end of what live checks were for. GitHub
//! closed a pull request, or destroyed a merge queue group (dequeued or
//! invalidated; a merged group's commit is its base's now, and its check
//! goes on for the deploy that may need it); the checks
//! still running for it are worth nothing, so their check runs conclude
//! `cancelled` saying why, their instances are terminated and their
//! processes killed, as a newer head ends an older one's (`cancel_check`).
//!
//! A fresh short instance per event (ADR-0001 rule 4,
//! docs/adr/0001-durable-execution-scope.md): the checks to end are read
//! from the index when it runs, those of the pull request (unless it is
//! open again by then: a reopen is a new attempt of its check, and a late
//! cancel must not end it) or those of the group's own commit. Its one step
//! is idempotent: a retry or a replay ends nothing twice.

use serde_json::json;

use crate::engine::{Ctx, RunError, RunOutcome, StepFailure};
use crate::runs::kit::inputs::{CancelChecksInput, CancelOf};
use crate::runs::kit::report::{github_failure, github_step};
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::tags::FailureTag;
use crate::runs::kit::RunEnv;
use crate::store::executions::{self, ShaFilter};

use super::{cancel_check, check_run_name_of, Ending};

/// The `cancel-checks` run.
pub struct CancelChecksRun;

#[async_trait::async_trait(?Send)]
impl Run for CancelChecksRun {
    const NAME: RunName = RunName::new("cancel-checks");
    const GATED: bool = false;
    // Nobody asked for it: the dashboard lists it apart from the runs.
    const BOOKKEEPING: bool = true;
    type Input = CancelChecksInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &CancelChecksInput,
    ) -> Result<RunOutcome, RunError> {
        run(ctx, env, input).await
    }
}

async fn run(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CancelChecksInput,
) -> Result<RunOutcome, RunError> {
    let ending = ending_of(&input.of);
    let entity = input.of.entity();
    let shas = input.of.sha().map_or(ShaFilter::All, ShaFilter::Only);
    let ended: Vec<String> = ctx
        .step("cancel live checks", github_step(), |_| async {
            if reopened(env, input).await? {
                return Ok(Vec::new());
            }
            let live = executions::live_checks_of(env.db, &input.repo, &entity, shas)
                .await
                .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
            for row in &live {
                let name = check_run_name_of(&row.input_json);
                cancel_check(env, input.installation_id, &input.repo, row, &name, &ending).await?;
            }
            Ok(live.into_iter().map(|r| r.id).collect())
        })
        .await?;
    Ok(RunOutcome::Complete(json!({ "cancelled": ended })))
}

/// A closed pull request that is open again by the time this runs (a
/// cancel that ran late: the sweep recreated it, GitHub errors retried it)
/// ends nothing: its live checks are the reopened pull request's.
async fn reopened(env: &RunEnv<'_>, input: &CancelChecksInput) -> Result<bool, StepFailure> {
    let CancelOf::Pull { number } = &input.of else {
        return Ok(false);
    };
    let open = env
        .github
        .pull_is_open(input.installation_id, &input.repo, number.get())
        .await
        .map_err(github_failure)?;
    Ok(open == Some(true))
}

/// What an ended check's run says.
fn ending_of(of: &CancelOf) -> Ending {
    match of {
        CancelOf::Pull { number } => Ending {
            title: "Pull request closed",
            summary: format!("Cancelled: pull request #{number} was closed."),
        },
        CancelOf::Group { branch, reason, .. } => Ending {
            title: "Merge group destroyed",
            summary: format!(
                "Cancelled: GitHub's merge queue destroyed the group `{branch}` ({}), so \
                 nothing will merge this commit.",
                reason.as_deref().unwrap_or("no reason given")
            ),
        },
    }
}
