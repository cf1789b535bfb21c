//! Running a command in the sandbox as ONE replay-safe step: ensure the
//! workspace, start a detached process keyed by the instance, wait for it,
//! store the log. A replayed attempt (the Worker died mid-step) finds the
//! process it started instead of starting another (ADR-0001 rule 2); a
//! workspace lost with its container is checked out again inside the
//! retried step (rule 5).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::{Backoff, Ctx, InstanceId, RunError, StepConfig, StepFailure};
use crate::limits::{LOG_TAIL_BYTES_MAX, LOG_TAIL_LINES_MAX, PROCESS_POLL_MS};
use crate::sandbox::{Checkout, ProcessSpec, ProcessState, SandboxError};
use crate::secret::{redact, Secret};

use super::RunEnv;

/// Retries of the command step: infrastructure faults (agent unreachable,
/// checkout failed, container replaced), not the command's own failure.
const COMMAND_STEP_RETRIES: u32 = 2;
const COMMAND_STEP_RETRY_DELAY_MS: i64 = 2_000;
/// Time a command step may take beyond its wait: checkout and log upload.
const COMMAND_STEP_MARGIN_MS: i64 = 3 * 60 * 1000;
/// How long one step waits for a running command: with the margin, well
/// inside the 15 minutes one Durable Object alarm invocation may run.
const COMMAND_STEP_WAIT_MS: i64 = 10 * 60 * 1000;
/// Long-polls in one step.
const POLLS_PER_STEP: i64 = COMMAND_STEP_WAIT_MS / PROCESS_POLL_MS;
/// Rounds beyond `timeout / wait` before the run gives up on a process the
/// agent should already have killed at its timeout.
const COMMAND_ROUNDS_EXTRA: i64 = 2;
/// The pause between rounds: it only ends the pass (a new invocation).
const COMMAND_RESUME_MS: i64 = 1_000;

const _: () = assert!(COMMAND_STEP_WAIT_MS + COMMAND_STEP_MARGIN_MS < 15 * 60 * 1000);
const _: () = assert!(POLLS_PER_STEP >= 1);

/// Called between a running command's long-polls (every 20 s): a holder
/// heartbeats what it holds through the whole command.
#[async_trait::async_trait(?Send)]
pub trait Beat {
    async fn beat(&self);
}

pub struct CommandSpec<'a> {
    /// The step's name; also names the log.
    pub step: &'a str,
    pub repo_url: &'a str,
    pub sha: &'a str,
    pub installation_id: u64,
    pub command: &'a str,
    pub timeout_ms: i64,
    pub env: BTreeMap<String, String>,
    /// Exported to the command, scrubbed from its log, never journaled.
    pub secret_env: Vec<(String, Secret)>,
    pub beat: Option<&'a dyn Beat>,
}

/// What the step journals: never the full log, never a secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandResult {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// The last lines of the redacted log.
    pub tail: String,
    pub log_key: String,
    pub output_bytes: u64,
    pub duration_ms: Option<i64>,
}

fn sandbox_failure(tag: &str, e: SandboxError) -> StepFailure {
    StepFailure {
        tag: tag.to_owned(),
        message: e.to_string(),
        retryable: e.retryable(),
    }
}

pub async fn run_command(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
) -> Result<CommandResult, RunError> {
    let process_id = InstanceId::from_key(&format!(
        "{}:{}:g{}",
        ctx.instance_id(),
        spec.step,
        ctx.generation()
    ));
    let workspace = ctx.instance_id().to_owned();
    let log_key = format!(
        "logs/{}/{}.log",
        ctx.instance_id(),
        InstanceId::from_key(spec.step)
    );
    let cfg = StepConfig::default()
        .retries(
            COMMAND_STEP_RETRIES,
            COMMAND_STEP_RETRY_DELAY_MS,
            Backoff::Exponential,
        )
        .timeout_ms(COMMAND_STEP_WAIT_MS + COMMAND_STEP_MARGIN_MS);
    let (pid, ws, key) = (process_id.as_str(), workspace.as_str(), log_key.as_str());
    // A long command spans several steps: each observes (or starts) the
    // process and waits at most COMMAND_STEP_WAIT_MS, then the run sleeps a
    // moment, ending the pass, so no pass outlives the platform's limit on
    // one invocation.
    let rounds_max = spec.timeout_ms / COMMAND_STEP_WAIT_MS + COMMAND_ROUNDS_EXTRA;
    for _ in 0..rounds_max {
        let progress = command_round(ctx, env, spec, cfg, pid, ws, key).await?;
        match progress {
            Progress::Finished(result) => return Ok(result),
            Progress::Running => {
                ctx.sleep("command still running", COMMAND_RESUME_MS)
                    .await?
            }
        }
    }
    Err(RunError::NonRetryable {
        step: spec.step.to_owned(),
        failure: StepFailure::fatal(
            "ProcessWedged",
            format!(
                "still running {rounds_max} rounds after its {} ms timeout",
                spec.timeout_ms
            ),
        ),
    })
}

/// One round of a command, as one replay-safe step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "progress", rename_all = "snake_case")]
enum Progress {
    Running,
    Finished(CommandResult),
}

async fn command_round(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    cfg: StepConfig,
    pid: &str,
    ws: &str,
    key: &str,
) -> Result<Progress, RunError> {
    ctx.step(spec.step, cfg, |_attempt| async move {
        let state = match env
            .sandbox
            .process(pid, 0)
            .await
            .map_err(|e| sandbox_failure("SandboxUnavailable", e))?
        {
            Some(state) => state,
            None => {
                ensure_workspace(env, spec, ws).await?;
                let mut all_env = spec.env.clone();
                for (k, v) in &spec.secret_env {
                    all_env.insert(k.clone(), v.expose().clone());
                }
                let p = ProcessSpec {
                    id: pid,
                    workspace: ws,
                    command: spec.command,
                    timeout_ms: spec.timeout_ms,
                    env: all_env,
                };
                env.sandbox
                    .start(&p)
                    .await
                    .map_err(|e| sandbox_failure("SandboxUnavailable", e))?
            }
        };
        let Some(state) = wait_for_exit(env, pid, state, spec.beat).await? else {
            return Ok(Progress::Running);
        };
        let secrets: Vec<&str> = spec
            .secret_env
            .iter()
            .map(|(_, v)| v.expose().as_str())
            .collect();
        let log = redact(&state.output, &secrets);
        env.blobs
            .put_text(key, &log)
            .await
            .map_err(|m| StepFailure::retryable("LogUploadFailed", m))?;
        Ok(Progress::Finished(CommandResult {
            exit_code: state.exit_code,
            timed_out: state.status == "timed_out",
            tail: tail(&log),
            log_key: key.to_owned(),
            output_bytes: state.output_bytes,
            duration_ms: state.duration_ms,
        }))
    })
    .await
}

/// Checks out the commit unless the workspace already holds it (a retried
/// attempt on the same container).
async fn ensure_workspace(
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    ws: &str,
) -> Result<(), StepFailure> {
    let state = env
        .sandbox
        .workspace(ws)
        .await
        .map_err(|e| sandbox_failure("SandboxUnavailable", e))?;
    if state.exists && state.sha.as_deref() == Some(spec.sha) {
        return Ok(());
    }
    let token = env
        .github
        .installation_token(spec.installation_id)
        .await
        .map_err(|e| StepFailure {
            tag: "GitHubApi".into(),
            message: e.to_string(),
            retryable: e.retryable(),
        })?;
    let checkout = Checkout {
        workspace: ws,
        repo_url: spec.repo_url,
        sha: spec.sha,
        token: Some(&token),
    };
    env.sandbox
        .checkout(&checkout)
        .await
        .map_err(|e| sandbox_failure("CheckoutFailed", e))
}

/// Waits (long-polling) for the process to finish, at most
/// COMMAND_STEP_WAIT_MS; None when it is still running then.
async fn wait_for_exit(
    env: &RunEnv<'_>,
    pid: &str,
    mut state: ProcessState,
    beat: Option<&dyn Beat>,
) -> Result<Option<ProcessState>, StepFailure> {
    for _ in 0..POLLS_PER_STEP {
        if state.finished() {
            return Ok(Some(state));
        }
        if let Some(b) = beat {
            b.beat().await;
        }
        state = env
            .sandbox
            .process(pid, PROCESS_POLL_MS)
            .await
            .map_err(|e| sandbox_failure("SandboxUnavailable", e))?
            .ok_or_else(|| {
                StepFailure::retryable(
                    "ProcessLost",
                    "the sandbox no longer knows the process (container replaced)",
                )
            })?;
    }
    Ok(state.finished().then_some(state))
}

/// The last lines of a log, within the summary budget, cut on a char
/// boundary.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.trim_end().lines().collect();
    let start = lines.len().saturating_sub(LOG_TAIL_LINES_MAX);
    let joined = lines[start..].join("\n");
    if joined.len() <= LOG_TAIL_BYTES_MAX {
        return joined;
    }
    let mut cut = joined.len() - LOG_TAIL_BYTES_MAX;
    while !joined.is_char_boundary(cut) {
        cut += 1;
    }
    joined[cut..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end() {
        let log: String = (0..200).map(|i| format!("line {i}\n")).collect();
        let t = tail(&log);
        assert!(t.ends_with("line 199"));
        assert_eq!(t.lines().count(), LOG_TAIL_LINES_MAX);
        let wide = "é".repeat(LOG_TAIL_BYTES_MAX);
        assert!(tail(&wide).len() <= LOG_TAIL_BYTES_MAX);
    }
}
