//! The `cancel-checks` run: the end of what live checks were for. GitHub
//! closed a pull request, or destroyed a merge queue group; the checks
//! still running for it are worth nothing, so their check runs conclude
//! `cancelled` saying why, their instances are terminated and their
//! processes killed, as a newer head ends an older one's (`cancel_check`).
//!
//! A fresh short instance per event (ADR-0001 rule 4,
//! docs/adr/0001-durable-execution-scope.md): the checks to end are read
//! from the index when it runs, so one that started after the event was
//! delivered but before this ran is ended too. Its one step is
//! idempotent: a retry or a replay ends nothing twice.

use serde_json::json;

use crate::engine::{Ctx, RunError, RunOutcome};
use crate::runs::kit::inputs::{CancelChecksInput, CancelOf};
use crate::runs::kit::report::github_step;
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::tags::FailureTag;
use crate::runs::kit::RunEnv;
use crate::store::executions;

use super::{cancel_check, Ending};

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
    let ended: Vec<String> = ctx
        .step("cancel live checks", github_step(), |_| async {
            let live = executions::live_checks_of(env.db, &input.repo, &entity, None)
                .await
                .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
            for (id, sha) in &live {
                cancel_check(env, input.installation_id, &input.repo, (id, sha), &ending).await?;
            }
            Ok(live.into_iter().map(|(id, _)| id).collect())
        })
        .await?;
    Ok(RunOutcome::Complete(json!({ "cancelled": ended })))
}

/// What an ended check's run says.
fn ending_of(of: &CancelOf) -> Ending {
    match of {
        CancelOf::Pull { number } => Ending {
            title: "Pull request closed",
            summary: format!("Cancelled: pull request #{number} was closed."),
        },
        CancelOf::Group { branch, reason } if reason.as_deref() == Some("merged") => Ending {
            title: "Merge group merged",
            summary: format!(
                "Cancelled: GitHub's merge queue merged the group `{branch}`; its checks are \
                 no longer needed."
            ),
        },
        CancelOf::Group { branch, reason } => Ending {
            title: "Merge group destroyed",
            summary: format!(
                "Cancelled: GitHub's merge queue destroyed the group `{branch}` ({}), so \
                 nothing will merge this commit.",
                reason.as_deref().unwrap_or("no reason given")
            ),
        },
    }
}
