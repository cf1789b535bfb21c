//! The `preview-reconcile` run: the sweep found a preview the index holds
//! live that nobody asked GitHub about for `PREVIEW_RECONCILE_INTERVAL_MS`
//! (`runs::sweep`), so it asks GitHub, the system of record (ADR-0001 rule
//! 4, docs/adr/0001-durable-execution-scope.md), whether the pull request
//! is still open. A closed one gets a teardown of its own
//! (`…:closed-<closed_at>-swept-<slot>`: the close's own teardown may have
//! run before the preview arrived, finding nothing live); a teardown checks
//! the index again holding the pull request's group, so a close event that
//! was delivered and the sweep's reconcile tear down once.

use async_trait::async_trait;
use serde_json::json;

use crate::engine::{Ctx, RunError, RunOutcome, StepConfig};

use crate::runs::kit::preview::{
    self as kit, swept_teardown_request, ReconcileInput, TeardownInput,
};
use crate::runs::kit::report::{github_failure, github_step};
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::tags::FailureTag;
use crate::runs::kit::RunEnv;
use crate::store::previews;

/// The `preview-reconcile` run.
pub struct PreviewReconcileRun;

#[async_trait(?Send)]
impl Run for PreviewReconcileRun {
    const NAME: RunName = RunName::new(kit::RECONCILE_RUN);
    const GATED: bool = false;
    // Nobody asked for it: the dashboard lists it apart from the runs.
    const BOOKKEEPING: bool = true;
    type Input = ReconcileInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &ReconcileInput,
    ) -> Result<RunOutcome, RunError> {
        run(ctx, env, input).await
    }
}

/// What GitHub said of the pull request, as journaled.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
enum Found {
    Open,
    /// Closed at this time (ms since the epoch).
    Closed(i64),
    /// GitHub knows no such pull request (the repository gone, say): the
    /// preview has nothing left to preview.
    Gone,
}

async fn run(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &ReconcileInput,
) -> Result<RunOutcome, RunError> {
    let found: Found = ctx
        .step("reconcile: read pull request", github_step(), |_| async {
            let state = env
                .github
                .pull_state(input.installation_id, &input.repo, input.pr.get())
                .await
                .map_err(github_failure)?;
            Ok(match state {
                Some(s) if s.open => Found::Open,
                Some(s) => Found::Closed(s.closed_ms.unwrap_or_else(|| ctx.now_ms())),
                None => Found::Gone,
            })
        })
        .await?;
    let closed_ms = match found {
        Found::Open => return Ok(RunOutcome::Complete(json!({ "open": true }))),
        Found::Closed(ms) => ms,
        Found::Gone => {
            ctx.step("reconcile: forget", StepConfig::default(), |_| async {
                previews::forget(env.db, &input.repo, input.pr.get(), ctx.now_ms())
                    .await
                    .map_err(|e| FailureTag::Gate.retryable(e.to_string()))
            })
            .await?;
            return Ok(RunOutcome::Complete(json!({ "gone": true })));
        }
    };
    let teardown = swept_teardown_request(
        &TeardownInput {
            repo: input.repo.clone(),
            pr: input.pr,
            installation_id: input.installation_id,
            sha: input.sha.clone(),
            head_branch: input.head_branch.clone(),
            default_branch: input.default_branch.clone(),
            why: "this pull request was closed (its close event never reached Sluice)".into(),
            evicted: false,
            fork: input.fork,
        },
        closed_ms,
        &format!("swept-{}", input.slot),
    );
    ctx.step(
        "reconcile: start teardown",
        StepConfig::default(),
        |_| async {
            env.spawner
                .spawn(&teardown)
                .await
                .map_err(|e| FailureTag::Index.retryable(e))
        },
    )
    .await?;
    Ok(RunOutcome::Complete(json!({ "teardown": teardown.key })))
}
