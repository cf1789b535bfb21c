//! The run registry and each run. A run is an async function over a
//! `Ctx` and a `RunEnv` (the services it may use), reading as a short list
//! of durable steps.

pub mod check;
pub mod command;
pub mod config;
pub mod deploy;
pub mod gate;
pub mod notify;
pub mod probe;
pub mod report;
pub mod sweep;
pub mod triggers;

use async_trait::async_trait;
use serde_json::Value;

use crate::blobs::Blobs;
use crate::engine::{Clock, Ctx, RestartRequest, RunError, RunOutcome, RunRegistry, Status};
use crate::github::GitHub;
use crate::sandbox::Sandbox;
use crate::secret::Secret;
use crate::store::Database;

use config::{ConfigState, CONFIG_PATH};
use report::{github_failure, github_step};

/// Wakes another instance with an event (the serial gate's push handoff).
#[async_trait(?Send)]
pub trait Waker {
    async fn wake(&self, instance_id: &str, event_type: &str) -> Result<(), String>;
}

/// Worker secrets by name (a deploy's `secrets = [...]`).
pub trait SecretSource {
    fn secret(&self, name: &str) -> Option<Secret>;
}

/// Where automatic skips are announced: a signed JSON POST.
#[derive(Clone)]
pub struct NotifyTarget {
    pub url: String,
    pub secret: Option<Secret>,
}

/// The services a run may use.
pub struct RunEnv<'a> {
    /// Time (and in-process waits) for the run's own logic; the engine's
    /// steps take time from `Ctx`, the same clock.
    pub clock: &'a dyn Clock,
    pub github: GitHub<'a>,
    pub sandbox: &'a dyn Sandbox,
    pub blobs: &'a dyn Blobs,
    /// The shared index (D1): the gates live there.
    pub db: &'a dyn Database,
    pub waker: &'a dyn Waker,
    pub secrets: &'a dyn SecretSource,
    pub notify: Option<NotifyTarget>,
    /// Containers the sandbox pool admits at once.
    pub pool_capacity: u32,
    /// The Worker's own base URL, for check run details links.
    pub public_url: String,
}

pub struct Registry<'a> {
    pub env: RunEnv<'a>,
}

fn decode<T: serde::de::DeserializeOwned>(input: &Value) -> Result<T, RunError> {
    serde_json::from_value(input.clone()).map_err(|e| RunError::InvalidInput {
        message: e.to_string(),
    })
}

#[async_trait(?Send)]
impl RunRegistry for Registry<'_> {
    async fn execute(
        &self,
        run: &str,
        ctx: &Ctx<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError> {
        match run {
            "check" => check::run(ctx, &self.env, &decode(input)?).await,
            "probe" => probe::run(ctx, &self.env, &decode(input)?).await,
            "deploy" => deploy::run(ctx, &self.env, &decode(input)?).await,
            other => Err(RunError::UnknownRun {
                run: other.to_owned(),
            }),
        }
    }

    async fn finalize(
        &self,
        run: &str,
        instance_id: &str,
        input: &Value,
        status: Status,
    ) -> Result<(), String> {
        let released = match run {
            "deploy" | "check" => gate::finalize(&self.env, instance_id).await,
            _ => Ok(()),
        };
        // A run that ended from outside (terminated while idle, a crash
        // loop) never concluded its check run: conclude it, so it does not
        // block a merge as `in_progress` for ever.
        if matches!(status, Status::Terminated | Status::Errored) {
            let target = match run {
                "check" => decode::<triggers::CheckInput>(input)
                    .ok()
                    .map(|i| (check::CHECK_RUN_NAME, i.installation_id, i.repo, i.sha)),
                "deploy" => decode::<triggers::DeployInput>(input)
                    .ok()
                    .map(|i| (deploy::DEPLOY_CHECK_NAME, i.installation_id, i.repo, i.sha)),
                _ => None,
            };
            if let Some((name, installation, repo, sha)) = target {
                report::conclude_abandoned(
                    &self.env,
                    name,
                    installation,
                    &repo,
                    &sha,
                    instance_id,
                    status,
                )
                .await;
            }
        }
        released
    }

    async fn prepare_restart(&self, run: &str, req: &RestartRequest<'_>) -> Result<u32, String> {
        match run {
            "deploy" => deploy::prepare_restart(&self.env, req).await,
            "check" => gate::prepare_restart(&self.env, req).await,
            _ => Ok(req.from_seq),
        }
    }
}

/// What a run's section of `.sluice.toml` says at the commit.
pub enum Configured<T> {
    /// The section is there: run with it.
    Run(T),
    /// Already decided: skipped `not-configured` (no check run), or an
    /// invalid file reported as a failed check run.
    Done(RunOutcome),
}

/// Reads the config at the target's commit and picks the run's section:
/// the shared start of every run that reports through a check run.
pub async fn configured<T>(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &report::CheckTarget<'_>,
    pick: impl FnOnce(config::RepoConfig) -> Option<T>,
) -> Result<Configured<T>, RunError> {
    let not_configured = || {
        Configured::Done(RunOutcome::Skipped {
            reason: Some("not-configured".into()),
            tag: None,
        })
    };
    match read_config(ctx, env, target.installation_id, target.repo, target.sha).await? {
        ConfigState::Missing => Ok(not_configured()),
        ConfigState::Valid { config } => {
            Ok(pick(config).map_or_else(not_configured, Configured::Run))
        }
        ConfigState::Invalid { message } => {
            let summary =
                format!("`.sluice.toml` at this commit is invalid:\n\n```\n{message}\n```");
            let outcome = report::reported(ctx, env, target, || async {
                Ok(report::Verdict::Failed { summary })
            })
            .await?;
            Ok(Configured::Done(outcome))
        }
    }
}

/// Reads `.sluice.toml` at a commit, as a step.
pub async fn read_config(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    installation_id: u64,
    repo: &str,
    sha: &str,
) -> Result<ConfigState, RunError> {
    ctx.step("read config", github_step(), |_| async {
        let text = env
            .github
            .file_at(installation_id, repo, CONFIG_PATH, sha)
            .await
            .map_err(github_failure)?;
        Ok(match text {
            None => ConfigState::Missing,
            Some(t) => config::parse(&t),
        })
    })
    .await
}
