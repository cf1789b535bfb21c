//! The `probe` run: an operator's diagnostic of the engine itself, created
//! only through the admin API (`POST /v1/executions`). It runs N small
//! steps, optionally sleeps and waits for an event, and can report each
//! step's side effect to a URL, so the engine's promises (a completed step
//! never runs again, timers, events) are observable from outside. The
//! end-to-end tests and `npm run bench` use it.

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::engine::{Ctx, RunError, RunOutcome, StepConfig, StepFailure};
use crate::limits::STEPS_PER_RUN_MAX_CEILING;
use crate::net::HttpRequest;

use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::tags::FailureTag;
use crate::runs::kit::RunEnv;

/// A probe step's artificial duration is capped: it is a diagnostic.
const PROBE_STEP_DELAY_MS_MAX: i64 = 10_000;

#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ProbeInput {
    #[serde(default)]
    pub steps: u32,
    /// In-process delay inside each step body (to land a crash mid-step).
    #[serde(default)]
    pub step_delay_ms: i64,
    #[serde(default)]
    pub sleep_ms: i64,
    #[serde(default)]
    pub wait_event: Option<String>,
    #[serde(default)]
    pub event_timeout_ms: Option<i64>,
    /// POSTed `{instance, step, attempt}` at the start of every step body.
    #[serde(default)]
    pub effects_url: Option<String>,
    /// The steps are inline (`Ctx::step_inline`): plain computations,
    /// journaled together. Without effects or delays only.
    #[serde(default)]
    pub inline: bool,
}

/// Default bound of the probe's event wait.
const PROBE_EVENT_TIMEOUT_MS_DEFAULT: i64 = 10 * 60 * 1000;

/// The `probe` run.
pub struct ProbeRun;

#[async_trait::async_trait(?Send)]
impl Run for ProbeRun {
    const NAME: RunName = RunName::new("probe");
    const GATED: bool = false;
    type Input = ProbeInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &ProbeInput,
    ) -> Result<RunOutcome, RunError> {
        run(ctx, env, input).await
    }
}

async fn run(ctx: &Ctx<'_>, env: &RunEnv<'_>, input: &ProbeInput) -> Result<RunOutcome, RunError> {
    if input.steps > STEPS_PER_RUN_MAX_CEILING {
        return Err(RunError::InvalidInput {
            message: format!("at most {STEPS_PER_RUN_MAX_CEILING} steps"),
        });
    }
    let delay_ms = input.step_delay_ms.clamp(0, PROBE_STEP_DELAY_MS_MAX);
    if input.inline && (delay_ms > 0 || input.effects_url.is_some()) {
        return Err(RunError::InvalidInput {
            message: "inline steps have no delay and report no effect".into(),
        });
    }
    for i in (0..input.steps).filter(|_| input.inline) {
        ctx.step_inline("step", || Ok(i))?;
    }
    for i in (0..input.steps).filter(|_| !input.inline) {
        ctx.step("step", StepConfig::default(), |attempt| async move {
            effect(ctx, env, input, i, attempt).await?;
            if delay_ms > 0 {
                env.clock.sleep(delay_ms).await;
            }
            Ok(i)
        })
        .await?;
    }
    let mut after_sleep_ms = None;
    if input.sleep_ms > 0 {
        ctx.sleep("nap", input.sleep_ms).await?;
        after_sleep_ms = Some(
            ctx.step("after sleep", StepConfig::default(), |_| async {
                Ok(ctx.now_ms())
            })
            .await?,
        );
    }
    let mut event = None;
    let mut after_event_ms = None;
    if let Some(ty) = &input.wait_event {
        let timeout = input
            .event_timeout_ms
            .unwrap_or(PROBE_EVENT_TIMEOUT_MS_DEFAULT);
        event = Some(ctx.wait_for_event("wait", ty, timeout).await?);
        after_event_ms = Some(
            ctx.step("after event", StepConfig::default(), |_| async {
                Ok(ctx.now_ms())
            })
            .await?,
        );
    }
    Ok(RunOutcome::Complete(json!({
        "steps": input.steps,
        "after_sleep_ms": after_sleep_ms,
        "event": event,
        "after_event_ms": after_event_ms,
    })))
}

async fn effect(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &ProbeInput,
    i: u32,
    attempt: u32,
) -> Result<(), StepFailure> {
    let Some(url) = &input.effects_url else {
        return Ok(());
    };
    let body = json!({ "instance": ctx.instance_id(), "step": i, "attempt": attempt }).to_string();
    let req = HttpRequest {
        method: "POST",
        url: url.clone(),
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: Some(body),
    };
    match env.http.send(req).await {
        Ok(r) if r.status < 300 => Ok(()),
        Ok(r) => {
            Err(FailureTag::EffectFailed.retryable(format!("effects URL answered {}", r.status)))
        }
        Err(m) => Err(FailureTag::EffectFailed.retryable(m)),
    }
}
