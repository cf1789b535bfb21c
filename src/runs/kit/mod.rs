//! The kit: what every run shares, naming no run. The services a run may
//! use (`RunEnv` and its interfaces), what a run is (`run::Run`,
//! `run::RunName`), its inputs and instance keys, the config and its
//! validation, commands, approvals, the gate protocol, deployments,
//! reports and logs. Imports nothing from `runs::run` or `runs::edge`
//! (tests/tidy.rs `runs_are_built_in_storeys`).

pub mod approval;
pub mod artifacts;
pub mod caches;
pub mod command;
pub mod config;
pub mod deployment;
pub mod duration;
pub mod environment;
pub mod gate;
pub mod inputs;
pub mod jobspec;
pub mod key;
pub mod log;
pub mod loglink;
pub mod metered;
pub mod needs;
pub mod notify;
pub mod pipeline;
pub mod preview;
pub mod report;
pub mod run;
pub mod schedule;
pub mod snapshots;
pub mod steps;
pub mod tags;

use async_trait::async_trait;

use crate::blobs::Blobs;
use crate::engine::{Clock, Ctx, RunError, RunOutcome};
use crate::github::GitHub;
use crate::net::Transport;
use crate::sandbox::Sandbox;
use crate::secret::Secret;
use crate::store::Database;

use config::{ConfigState, CONFIG_PATH};
use report::{github_failure, github_step};

/// Wakes another instance with an event (the serial gate's push handoff).
#[async_trait(?Send)]
pub trait Waker {
    async fn wake(&self, instance_id: &str, event_type: &str) -> Result<(), String>;

    /// Sends an event with a payload the woken instance reads (a newer
    /// preview telling an unconfirmed one what superseded it). A waker that
    /// carries no payload refuses.
    async fn send(
        &self,
        instance_id: &str,
        event_type: &str,
        _payload: &serde_json::Value,
    ) -> Result<(), String> {
        Err(format!(
            "{event_type} to {instance_id}: this waker sends no payload"
        ))
    }
}

/// Starts another instance (a child a run needs, `kit::needs`): the
/// instance is created in its object, which writes its index row; creating
/// an existing key creates nothing.
#[async_trait(?Send)]
pub trait Spawner {
    async fn spawn(&self, create: &crate::engine::CreateRequest) -> Result<(), String>;
}

/// Ends other instances: a check whose pull request moved on to a newer
/// head is terminated by the newer head's check (kill before release is
/// then `finalize`'s).
#[async_trait(?Send)]
pub trait Terminator {
    async fn terminate(&self, instance_id: &str) -> Result<Termination, String>;
}

/// What a terminate found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    /// The instance ended, or had already ended.
    Ended,
    /// Its object has no instance: a row whose create never arrived (a
    /// wave's batch wrote it, the spawn did not get through). The caller
    /// ends the row (`executions::end_uncreated`), or the sweep would
    /// create it later, after whoever wanted it ended.
    NoInstance,
}

/// Worker secrets by name (those an environment grants a deploy).
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
    /// Outbound HTTP for what is not GitHub (notifications, the probe).
    pub http: &'a dyn Transport,
    pub github: GitHub<'a>,
    pub sandbox: &'a dyn Sandbox,
    /// Moves a job's artifacts between its sandbox and R2.
    pub archives: &'a dyn crate::sandbox::Archives,
    pub blobs: &'a dyn Blobs,
    /// The shared index (D1): the gates live there.
    pub db: &'a dyn Database,
    pub waker: &'a dyn Waker,
    pub terminator: &'a dyn Terminator,
    pub spawner: &'a dyn Spawner,
    pub secrets: &'a dyn SecretSource,
    /// The operator's deploy environments (the `ENVIRONMENTS` var).
    pub environments: &'a environment::Environments,
    /// Where GitHub serves git (`GITHUB_GIT_URL`): clone URLs come from it.
    pub git_url: String,
    pub notify: Option<NotifyTarget>,
    /// Containers the sandbox pool admits at once.
    pub pool_capacity: u32,
    /// Checks admitted at once, all repositories together: below
    /// `pool_capacity`, so deploys always find a sandbox.
    pub checks_capacity: u32,
    /// Checks of one repository admitted at once.
    pub checks_per_repo: u32,
    /// The Worker's own base URL, for check run details links.
    pub public_url: String,
    /// Signs log links (`LOG_LINK_SECRET`); none, no links.
    pub log_link_secret: Option<Secret>,
    /// A repository's dependency caches at most (`CACHE_BYTES_PER_REPO`):
    /// past it the least recently used go (`kit::caches`).
    pub cache_bytes_per_repo: u64,
}

pub use run::{Run, RunName};

/// The skip reason of a commit without `.sluice.toml` (or without the
/// run's section): no check run is made.
pub const NOT_CONFIGURED: &str = "not-configured";

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
    pick: impl FnOnce(config::RepoConfig) -> Result<Option<T>, RunOutcome>,
) -> Result<Configured<T>, RunError> {
    configured_at(ctx, env, target, target.sha, "at this commit", pick).await
}

/// The skip reason of an event a repository's `ignore_bots` names.
pub const IGNORED_BOT: &str = "ignored-bot";

/// An event caused by a bot the config names ends skipped, with no check
/// run; else the run's section as `pick` chooses it.
pub fn unless_ignored<T>(
    config: config::RepoConfig,
    sender: &str,
    pick: impl FnOnce(config::RepoConfig) -> Option<T>,
) -> Result<Option<T>, RunOutcome> {
    if config
        .ignore_bots
        .iter()
        .any(|b| b.eq_ignore_ascii_case(sender))
    {
        return Err(RunOutcome::Skipped {
            reason: Some(IGNORED_BOT.into()),
            tag: None,
        });
    }
    Ok(pick(config))
}

/// `configured`, reading the config at `reference` (a commit or a branch),
/// which the invalid-config summary calls `place`.
pub async fn configured_at<T>(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &report::CheckTarget<'_>,
    reference: &str,
    place: &str,
    pick: impl FnOnce(config::RepoConfig) -> Result<Option<T>, RunOutcome>,
) -> Result<Configured<T>, RunError> {
    let not_configured = || {
        Configured::Done(RunOutcome::Skipped {
            reason: Some(NOT_CONFIGURED.into()),
            tag: None,
        })
    };
    match read_config(ctx, env, target.installation_id, target.repo, reference).await? {
        ConfigState::Missing => Ok(not_configured()),
        ConfigState::Valid { config } => Ok(match pick(config) {
            Ok(picked) => picked.map_or_else(not_configured, Configured::Run),
            Err(outcome) => Configured::Done(outcome),
        }),
        ConfigState::Invalid { message } => {
            let summary = format!("`.sluice.toml` {place} is invalid:\n\n```\n{message}\n```");
            let outcome = report::reported(ctx, env, target, |_| async {
                Ok(report::Verdict::Failed { summary })
            })
            .await?;
            Ok(Configured::Done(outcome))
        }
    }
}

/// Reads `.sluice.toml` at a commit or branch, as a step.
pub async fn read_config(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    installation_id: u64,
    repo: &str,
    reference: &str,
) -> Result<ConfigState, RunError> {
    ctx.step("read config", github_step(), |_| async {
        let text = env
            .github
            .file_at(installation_id, repo, CONFIG_PATH, reference)
            .await
            .map_err(github_failure)?;
        Ok(match text {
            None => ConfigState::Missing,
            Some(t) => config::parse(&t),
        })
    })
    .await
}
