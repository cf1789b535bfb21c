//! The `schedules` run: records the default branch's `[[schedule]]`
//! (`kit::schedule` says what a schedule is; `edge::scheduler` fires them).

use serde_json::json;

use crate::engine::{Ctx, RunError, RunOutcome};
use crate::store::schedules::{self as store, RepoSchedules};

use crate::runs::kit::config::{self, ConfigState, CONFIG_PATH};
use crate::runs::kit::inputs::SchedulesInput;
use crate::runs::kit::report::{github_failure, github_step};
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::schedule::resolve;
use crate::runs::kit::tags::FailureTag;
use crate::runs::kit::RunEnv;

// ---------------------------------------------------------------------------
// The `schedules` run: record the default branch's schedules
// ---------------------------------------------------------------------------

pub struct SchedulesRun;

#[async_trait::async_trait(?Send)]
impl Run for SchedulesRun {
    const NAME: RunName = RunName::new("schedules");
    const GATED: bool = false;
    const BOOKKEEPING: bool = true;
    type Input = SchedulesInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &SchedulesInput,
    ) -> Result<RunOutcome, RunError> {
        record_schedules(ctx, env, input).await
    }
}

/// Reads the config on the default branch (its newest state, not the
/// pushed commit's: the record must end as the branch is) and records it.
async fn record_schedules(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &SchedulesInput,
) -> Result<RunOutcome, RunError> {
    let (state, read_ms): (ConfigState, i64) = ctx
        .step("read schedules", github_step(), |_| async {
            let read_ms = env.clock.now_ms();
            let text = env
                .github
                .file_at(
                    input.installation_id,
                    &input.repo,
                    CONFIG_PATH,
                    &input.default_branch,
                )
                .await
                .map_err(github_failure)?;
            Ok((
                text.map_or(ConfigState::Missing, |t| config::parse(&t)),
                read_ms,
            ))
        })
        .await?;
    let (schedules, error) = match &state {
        ConfigState::Missing => (Some(Vec::new()), None),
        ConfigState::Valid { config } => {
            (Some(resolve(&config.schedule, &input.default_branch)), None)
        }
        ConfigState::Invalid { message } => (None, Some(message.clone())),
    };
    let count = schedules.as_ref().map(Vec::len);
    let row = RepoSchedules {
        repo: input.repo.clone(),
        installation_id: i64::try_from(input.installation_id).unwrap_or(i64::MAX),
        default_branch: input.default_branch.clone(),
        schedules_json: json!(schedules.unwrap_or_default()).to_string(),
        error: error.clone(),
        read_ms,
    };
    let keep = count.is_none();
    let _: () = ctx
        .step(
            "record schedules",
            crate::engine::StepConfig::default(),
            |_| async {
                store::record(env.db, &row, keep)
                    .await
                    .map_err(|e| FailureTag::Gate.retryable(e.to_string()))
            },
        )
        .await?;
    Ok(RunOutcome::Complete(
        json!({ "schedules": count, "error": error }),
    ))
}
