//! The `preview-teardown` run: a pull request closed (GitHub's `closed`
//! event, or the sweep finding it closed when that event never came), so
//! its preview is removed. A fresh short instance per close, named by the
//! pull request and when GitHub closed it (ADR-0001 rule 4,
//! docs/adr/0001-durable-execution-scope.md): the webhook's and the
//! sweep's creates of one close are one instance.
//!
//! Its steps: read `[preview]` on the default branch; a pull request open
//! again by now ends nothing (its reopen deploys a new preview); take the
//! pull request's group through the gate primitive, so a running preview
//! deploy ends first (ADR-0004: docs/adr/0004-serialized-run-groups.md;
//! the teardown supersedes previews still waiting); holding it, check the
//! index still holds the preview live, run `teardown` with the
//! environment's secrets, mark every deployment of `pr-<n>` this App made
//! `inactive` and mark the index row torn down if it still names the
//! preview found live (a compare-and-set); then, released, say so on the
//! pull request. Recording before the release is what makes a teardown
//! happen once: another teardown waiting on the group finds nothing live,
//! and a preview that deploys after it marks the row live again itself.

use std::cell::Cell;
use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::json;

use crate::engine::{Ctx, RunError, RunOutcome, StepConfig};
use crate::github::{DeploymentState, NewStatus};

use crate::runs::kit::command::{run_command, verdict_of, CommandSpec, TEARDOWN_COMMAND_STEP};
use crate::runs::kit::config::ConfigState;
use crate::runs::kit::config::{command_timeout_ms, PreviewConfig, RepoConfig};
use crate::runs::kit::gate::{self, with_gates, Gates, Held, Pool, Serial};
use crate::runs::kit::preview::{self as kit, TeardownInput};
use crate::runs::kit::report::{github_failure, github_step, Verdict};
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::tags::FailureTag;
use crate::runs::kit::{read_config, RunEnv, NOT_CONFIGURED};
use crate::store::previews;

use crate::runs::run::deploy;

/// The `preview-teardown` run.
pub struct PreviewTeardownRun;

#[async_trait(?Send)]
impl Run for PreviewTeardownRun {
    const NAME: RunName = RunName::new(kit::TEARDOWN_RUN);
    const GATED: bool = true;
    type Input = TeardownInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &TeardownInput,
    ) -> Result<RunOutcome, RunError> {
        run(ctx, env, input).await
    }
}

/// The skip reason of a teardown with nothing live to tear down.
const NO_LIVE_PREVIEW: &str = "no-live-preview";
/// The skip reason of a fork's teardown where the environment exports
/// secrets: a fork's code never runs with them.
const FORK: &str = "fork";

fn skipped(reason: &str) -> RunOutcome {
    RunOutcome::Skipped {
        reason: Some(reason.into()),
        tag: None,
    }
}

async fn run(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &TeardownInput,
) -> Result<RunOutcome, RunError> {
    let state = read_config(
        ctx,
        env,
        input.installation_id,
        &input.repo,
        &input.default_branch,
    )
    .await?;
    let ConfigState::Valid { config } = state else {
        return Ok(skipped(NOT_CONFIGURED));
    };
    let Some(preview) = config_preview(config) else {
        return Ok(skipped(NOT_CONFIGURED));
    };
    // A fork's code never runs a teardown with the environment's secrets:
    // only a secret-less environment's fork preview (a maintainer's) is
    // torn down, with no secret.
    if input.fork && has_secrets(env, input, &preview) {
        return Ok(skipped(FORK));
    }
    if !input.evicted && open_again(ctx, env, input).await? {
        return Ok(skipped("reopened"));
    }
    let Some(seen) = live(ctx, env, input, "teardown: preview live?").await? else {
        return Ok(skipped(NO_LIVE_PREVIEW));
    };
    // The index knows a fork whatever the input says (the sweep's, the
    // cap's and an operator's teardowns are made from the index).
    if seen.fork && has_secrets(env, input, &preview) {
        return Ok(skipped(FORK));
    }
    let (verdict, done) = gated(ctx, env, input, &preview).await?;
    if let Some(outcome) = skip_of(&verdict) {
        return Ok(outcome);
    }
    if let Some(summary) = not_torn(&verdict) {
        // The row stays live: the sweep's reconcile tries again.
        return Err(RunError::NonRetryable {
            step: TEARDOWN_COMMAND_STEP.into(),
            failure: FailureTag::EffectFailed.fatal(summary),
        });
    }
    if done.recorded {
        comment(ctx, env, input).await?;
    }
    Ok(RunOutcome::Complete(json!({
        "torn_down": input.pr.get(),
        "inactive": done.inactive,
        "recorded": done.recorded,
    })))
}

/// The teardown on the pull request's group: how it ended, and what it
/// did holding the group.
async fn gated(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &TeardownInput,
    preview: &PreviewConfig,
) -> Result<(Verdict, Retired), RunError> {
    let group = kit::group_of(&input.repo, input.pr);
    let policy = kit::preview_policy(None);
    let gates = Gates {
        serial: Some(Serial {
            group: &group,
            revision: &input.sha,
            // Arrival order decides: a teardown supersedes the previews
            // still waiting and waits for a running one.
            head: None,
            policy: &policy,
            imperative: false,
        }),
        pools: &[Pool {
            name: gate::POOL,
            capacity: env.pool_capacity,
        }],
        report: None,
        sandbox: None,
    };
    let done = Cell::new(Retired::default());
    let verdict = with_gates(ctx, env, &gates, |held| {
        torn(ctx, env, input, preview, held, &done)
    })
    .await?;
    Ok((verdict, done.get()))
}

/// What a teardown did holding the group, once its command passed.
#[derive(Debug, Clone, Copy, Default)]
struct Retired {
    /// Deployments it marked `inactive`.
    inactive: usize,
    /// Whether it marked the index row torn down (false: the row names a
    /// newer preview by now, which stays live).
    recorded: bool,
}

/// What the index holds of a live preview.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Live {
    /// The preview execution the row names: the teardown records itself
    /// only while the row still names it (a compare-and-set).
    execution_id: String,
    /// The index says the head is in a fork (the teardown's input may not:
    /// one the sweep made before the index knew).
    fork: bool,
}

/// A teardown skipped at the gates (superseded by a reopened pull request's
/// preview, an operator's skip) or finding nothing live once it held them.
fn skip_of(verdict: &Verdict) -> Option<RunOutcome> {
    let Verdict::Skipped {
        reason, summary, ..
    } = verdict
    else {
        return None;
    };
    Some(RunOutcome::Skipped {
        reason: match reason {
            Some(r) => Some(r.as_str().to_owned()),
            None if summary == NO_LIVE_PREVIEW || summary == FORK => Some(summary.clone()),
            // An operator's skip of the waiting teardown.
            None => None,
        },
        tag: None,
    })
}

/// Why the teardown did not tear down, if it did not.
fn not_torn(verdict: &Verdict) -> Option<String> {
    match verdict {
        Verdict::Passed { .. } => None,
        Verdict::Failed { summary }
        | Verdict::TimedOut { summary }
        | Verdict::InfraFault { summary }
        | Verdict::Skipped { summary, .. }
        | Verdict::Superseded { summary, .. } => Some(summary.clone()),
    }
}

fn config_preview(config: RepoConfig) -> Option<PreviewConfig> {
    config.preview
}

/// Whether the environment `[preview]` selects exports any secret.
fn has_secrets(env: &RunEnv<'_>, input: &TeardownInput, preview: &PreviewConfig) -> bool {
    let Some(name) = preview.environment.as_deref() else {
        return false;
    };
    env.environments
        .grant(name, &input.repo, &input.head_branch)
        .map_or(true, |e| !e.secrets.is_empty())
}

/// The pull request's preview as the index holds it, when live: a pull
/// request never previewed (or torn down already) has nothing to tear down.
async fn live(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &TeardownInput,
    step: &str,
) -> Result<Option<Live>, RunError> {
    ctx.step(step, StepConfig::default(), |_| async {
        let row = previews::get(env.db, &input.repo, input.pr.get())
            .await
            .map_err(|e| FailureTag::Gate.retryable(e.to_string()))?;
        Ok(row.filter(|r| r.state == "live").map(|r| Live {
            fork: r.is_fork(),
            execution_id: r.execution_id,
        }))
    })
    .await
}

/// A teardown skipped holding the group (`skip_of` maps it back).
fn held_skip(why: &str) -> Verdict {
    Verdict::Skipped {
        reason: None,
        tag: crate::runs::kit::tags::SkipTag::RunSkipped,
        summary: why.into(),
        newer: None,
    }
}

/// A pull request open again by the time this runs ends nothing: its
/// reopen deploys a new preview.
async fn open_again(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &TeardownInput,
) -> Result<bool, RunError> {
    ctx.step("teardown: pull request open?", github_step(), |_| async {
        let open = env
            .github
            .pull_is_open(input.installation_id, &input.repo, input.pr.get())
            .await
            .map_err(github_failure)?;
        Ok(open == Some(true))
    })
    .await
}

/// Holding the pull request's group: run `teardown` at the pull request's
/// last head with the environment's secrets (none for a fork's, from the
/// input or the index), then,
/// still holding it, retire its deployments and record it torn down.
async fn torn(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &TeardownInput,
    preview: &PreviewConfig,
    held: Held<'_>,
    done: &Cell<Retired>,
) -> Result<Verdict, RunError> {
    // Holding the group: a teardown that ran meanwhile (another key of the
    // same close, the sweep's, an eviction) recorded itself holding it too,
    // so this one finds nothing live and runs nothing twice.
    let Some(seen) = live(ctx, env, input, "teardown: still live?").await? else {
        return Ok(held_skip(NO_LIVE_PREVIEW));
    };
    let fork = input.fork || seen.fork;
    if fork && has_secrets(env, input, preview) {
        return Ok(held_skip(FORK));
    }
    let deploy_cfg = kit::as_deploy_config(preview, &input.head_branch);
    let as_deploy = crate::runs::kit::inputs::DeployInput {
        repo: input.repo.clone(),
        branch: input.head_branch.clone(),
        sha: input.sha.clone(),
        installation_id: input.installation_id,
        default_branch: input.default_branch.clone(),
        sender: String::new(),
        imperative: false,
        inputs: BTreeMap::new(),
        dispatch: None,
        needs_check: None,
    };
    let secret_env = match deploy::granted_secrets(env, &as_deploy, &deploy_cfg) {
        // Belt and braces: a fork's teardown gets no secret whatever the
        // environment says by now.
        Ok(_) if fork => Vec::new(),
        Ok(s) => s,
        Err(summary) => return Ok(Verdict::Failed { summary }),
    };
    let timeout_ms = command_timeout_ms(preview.timeout.as_deref())
        .map_err(|m| RunError::InvalidInput { message: m })?;
    let mut vars = BTreeMap::new();
    vars.insert("SLUICE_SHA".to_owned(), input.sha.clone());
    vars.insert("SLUICE_BRANCH".to_owned(), input.head_branch.clone());
    vars.insert("SLUICE_REPO".to_owned(), input.repo.clone());
    vars.insert("SLUICE_PR".to_owned(), input.pr.to_string());
    let spec = CommandSpec {
        step: TEARDOWN_COMMAND_STEP,
        repo: &input.repo,
        sha: &input.sha,
        installation_id: input.installation_id,
        command: &preview.teardown,
        timeout_ms,
        env: vars,
        secret_env,
        held: &held,
        restore: &[],
        prepared: false,
        continues: None,
        pristine: false,
    };
    let result = run_command(ctx, env, &spec).await?;
    let verdict = verdict_of(&preview.teardown, &result);
    if matches!(verdict, Verdict::Passed { .. }) {
        // Still holding the group: a preview waiting for it deploys only
        // after the row says torn down (and marks it live again itself).
        done.set(retire(ctx, env, input, &seen.execution_id).await?);
    }
    Ok(verdict)
}

/// Holding the group: every deployment of the pull request's environment
/// this App made is `inactive`, and the index row is torn down if it still
/// names `execution_id`, the preview this teardown found live.
async fn retire(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &TeardownInput,
    execution_id: &str,
) -> Result<Retired, RunError> {
    let environment = kit::environment_of(input.pr);
    let (installation, repo) = (input.installation_id, input.repo.as_str());
    let retired: usize = ctx
        .step("teardown: deployments inactive", github_step(), |_| async {
            let ids = env
                .github
                .environment_deployments(installation, repo, &environment)
                .await
                .map_err(github_failure)?;
            let mut n = 0;
            for id in ids {
                let latest = env
                    .github
                    .deployment_state(installation, repo, id)
                    .await
                    .map_err(github_failure)?;
                if latest == Some(DeploymentState::Inactive) {
                    continue;
                }
                let new = NewStatus {
                    state: DeploymentState::Inactive,
                    description: "Torn down: the pull request was closed.",
                    log_url: None,
                    environment_url: None,
                };
                env.github
                    .create_deployment_status(installation, repo, id, &new)
                    .await
                    .map_err(github_failure)?;
                n += 1;
            }
            Ok(n)
        })
        .await?;
    let recorded = ctx
        .step("teardown: record", StepConfig::default(), |_| async {
            previews::torn_down(env.db, repo, input.pr.get(), execution_id, ctx.now_ms())
                .await
                .map_err(|e| FailureTag::Gate.retryable(e.to_string()))
        })
        .await?;
    Ok(Retired {
        inactive: retired,
        recorded,
    })
}

/// The pull request's comment says the preview was torn down (a courtesy:
/// GitHub refusing it changes nothing).
async fn comment(ctx: &Ctx<'_>, env: &RunEnv<'_>, input: &TeardownInput) -> Result<(), RunError> {
    let (installation, repo) = (input.installation_id, input.repo.as_str());
    let marker = kit::comment_marker(input.pr);
    let body = format!("**Preview** torn down: {}.", input.why);
    let commented = ctx
        .step("teardown: comment", github_step(), |_| async {
            env.github
                .upsert_comment(installation, repo, input.pr.get(), &marker, &body)
                .await
                .map_err(github_failure)
        })
        .await;
    match commented {
        Err(e) if e.is_suspension() || e == RunError::Terminated => Err(e),
        _ => Ok(()),
    }
}
