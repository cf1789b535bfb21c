//! The `preview` run (issue 24): a deploy of a pull request's head into a
//! transient environment of its own (`pr-<n>`), on one serialized group
//! per pull request through the gate primitive (`gate::with_gates`, never
//! a second implementation: ADR-0004, docs/adr/0004-serialized-run-groups.md),
//! reported as `sluice/preview`, with one comment on the pull request kept
//! up to date. A pull request's previews are an entity lifecycle (ADR-0001
//! rule 4, docs/adr/0001-durable-execution-scope.md): one short instance
//! per head, the state in GitHub and the `previews` index; the close is
//! `teardown.rs`'s.
//!
//! The run reads as its steps: read `[preview]` on the default branch, [a
//! fork gets none], grant the environment, record the preview live and
//! supersede the pull request's older unconfirmed previews, then the
//! deploy's own work (`deploy::recorded_work`: the GitHub deployment,
//! [confirmation], the gates, re-read the head, the command), then the
//! comment and the index, and announce an automatic skip.
//!
//! The queue policy's preview rules (`kit::preview::preview_policy`): a new
//! head supersedes every waiting preview of its pull request (the gate's
//! current-revision rule, the head branch's head read at arrival) and
//! every unconfirmed one (told by an event naming the new head); the
//! queued timeout and supersede-after never apply; the confirmation timeout
//! does; a running preview is never touched.

pub mod fork;
pub mod reconcile;
pub mod teardown;

use std::cell::Cell;

use async_trait::async_trait;
use serde_json::json;

use crate::engine::{Ctx, RestartRequest, RunError, RunOutcome, Status, StepConfig};
use crate::gates::policy::SkipReason;

use crate::runs::kit::approval::CONFIRM_EVENT;
use crate::runs::kit::config::{parse_duration_ms, DeployConfig, RepoConfig};
use crate::runs::kit::deployment::{self, Place};
use crate::runs::kit::gate::{self, BranchRef, Gates, Pool, Serial};
use crate::runs::kit::inputs::PullNumber;
use crate::runs::kit::notify::{self, AutoSkipped};
use crate::runs::kit::preview::{self as kit, PreviewInput, PREVIEW_CHECK_NAME, SUPERSEDED_BY};
use crate::runs::kit::report::Verdict;
use crate::runs::kit::report::{github_failure, github_step, reported, CheckRunOf, CheckTarget};
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::tags::{FailureTag, SkipTag};
use crate::runs::kit::{configured_at, unless_ignored, Configured, RunEnv};
use crate::store::previews;

use super::deploy::{self, Lane};

/// The `preview` run.
pub struct PreviewRun;

#[async_trait(?Send)]
impl Run for PreviewRun {
    const NAME: RunName = RunName::new(kit::PREVIEW_RUN);
    const CHECK_RUN: Option<&'static str> = Some(PREVIEW_CHECK_NAME);
    const GATED: bool = true;
    type Input = PreviewInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &PreviewInput,
    ) -> Result<RunOutcome, RunError> {
        run(ctx, env, input).await
    }

    fn check_run(&self, input: &PreviewInput) -> Option<CheckRunOf> {
        Some(CheckRunOf {
            name: PREVIEW_CHECK_NAME.to_owned(),
            installation_id: input.installation_id,
            repo: input.repo.clone(),
            sha: input.sha.clone(),
        })
    }

    /// A preview ended from outside leaves its GitHub deployment
    /// `inactive` or `error`, as a deploy does.
    async fn abandoned(
        &self,
        env: &RunEnv<'_>,
        instance_id: &str,
        input: &PreviewInput,
        status: Status,
    ) {
        deployment::conclude_abandoned(env, &input.as_deploy(), instance_id, status).await;
    }

    /// As a deploy's: the gates re-entered, a confirmation asked again, a
    /// generation that queues again records a deployment of its own.
    async fn prepare_restart(
        &self,
        env: &RunEnv<'_>,
        req: &RestartRequest<'_>,
    ) -> Result<u32, String> {
        deploy::prepare_restart(env, req).await
    }
}

async fn run(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &PreviewInput,
) -> Result<RunOutcome, RunError> {
    let target = CheckTarget {
        name: PREVIEW_CHECK_NAME,
        installation_id: input.installation_id,
        repo: &input.repo,
        sha: &input.sha,
    };
    let pick = |c: RepoConfig| unless_ignored(c, &input.sender, |c| c.preview);
    // `[preview]` selects an operator environment, so only the default
    // branch may say it (ADR-0009: docs/adr/0009-policy-on-the-default-branch.md).
    let place = format!("on the default branch `{}`", input.default_branch);
    let reference = input.default_branch.as_str();
    let preview = match configured_at(ctx, env, &target, reference, &place, pick).await? {
        Configured::Run(p) => p,
        Configured::Done(outcome) => return Ok(outcome),
    };
    let deploy = kit::as_deploy_config(&preview, &input.head_branch);
    if let Some(summary) = input
        .fork
        .then(|| fork::secrets_refusal(env, &deploy, input))
        .flatten()
    {
        return reported(ctx, env, &target, |_| async { Ok(fork_refused(summary)) }).await;
    }
    let as_deploy = input.as_deploy();
    if let Some(summary) = deploy::refused_environment(ctx, env, &as_deploy, &deploy).await? {
        return reported(ctx, env, &target, |_| async {
            Ok(Verdict::Failed { summary })
        })
        .await;
    }
    let confirmation_ms = preview
        .confirmation_timeout
        .as_deref()
        .map(parse_duration_ms)
        .transpose()
        .map_err(|message| RunError::InvalidInput { message })?;
    let policy = kit::preview_policy(confirmation_ms);
    let window_ms = deploy::confirmation_window(&deploy, &policy);
    // A fork's preview first waits for a maintainer's button.
    let waits_ms = match input.fork {
        true => Some(window_ms.unwrap_or(0) + fork::FORK_PREVIEW_WINDOW_MS),
        false => window_ms,
    };
    deploy::extend_ceiling(ctx, &deploy, waits_ms).await?;
    let ran = Cell::new(deployment::Ran::default());
    let (outcome, verdict) = deployed(ctx, env, input, &deploy, &policy, window_ms, &ran).await?;
    let ran = ran.take();
    after(ctx, env, input, verdict.as_ref(), &ran).await?;
    notify_auto_skip(ctx, env, input, &outcome, verdict.as_ref()).await?;
    Ok(outcome)
}

/// The preview's deploy inside its check run, through the deploy's own
/// work on the pull request's group; the outcome and the verdict.
async fn deployed(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &PreviewInput,
    deploy: &DeployConfig,
    policy: &crate::gates::policy::QueuePolicy,
    window_ms: Option<i64>,
    ran: &Cell<deployment::Ran>,
) -> Result<(RunOutcome, Option<Verdict>), RunError> {
    let group = kit::group_of(&input.repo, input.pr);
    let environment = kit::environment_of(input.pr);
    let gates = Gates {
        serial: Some(Serial {
            group: &group,
            revision: &input.sha,
            // A fork's head branch is not this repository's: arrival order
            // decides, and a maintainer's press is an explicit revision.
            head: (!input.fork).then_some(BranchRef {
                installation_id: input.installation_id,
                repo: &input.repo,
                branch: &input.head_branch,
            }),
            policy,
            imperative: input.fork,
        }),
        pools: &[Pool {
            name: gate::POOL,
            capacity: env.pool_capacity,
        }],
        report: None,
        sandbox: None,
    };
    let lane = Lane {
        place: Some(Place {
            environment: &environment,
            transient: true,
        }),
        vars: vec![("SLUICE_PR".to_owned(), input.pr.to_string())],
        supersedable: true,
        fork: input.fork,
        live: Some(started_of(ctx, input)),
    };
    let as_deploy = input.as_deploy();
    let target = CheckTarget {
        name: PREVIEW_CHECK_NAME,
        installation_id: input.installation_id,
        repo: &input.repo,
        sha: &input.sha,
    };
    let seen = std::cell::RefCell::new(None);
    let (target, seen_ref) = (&target, &seen);
    let (as_deploy, lane, gates) = (&as_deploy, &lane, &gates);
    let outcome = reported(ctx, env, target, |report| async move {
        let v = match fork_waits(ctx, env, input, target, report.id).await? {
            Some(v) => v,
            None => {
                arrive(ctx, env, input).await?;
                let parts = (as_deploy, deploy, lane);
                deploy::recorded_work(ctx, env, parts, gates, window_ms, ran).await?
            }
        };
        *seen_ref.borrow_mut() = Some(v.clone());
        Ok(v)
    })
    .await?;
    let seen = seen.into_inner();
    Ok((outcome, seen))
}

/// The preview's index row as this execution marks it live.
fn started_of<'a>(ctx: &'a Ctx<'_>, input: &'a PreviewInput) -> previews::Started<'a> {
    previews::Started {
        repo: &input.repo,
        pr: input.pr.get(),
        installation_id: input.installation_id,
        default_branch: &input.default_branch,
        head_branch: &input.head_branch,
        sha: &input.sha,
        execution_id: ctx.instance_id(),
        fork: input.fork,
    }
}

/// A fork's preview waits for a maintainer's button (the verdict when it
/// never came); a same-repository one goes on at once.
async fn fork_waits(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &PreviewInput,
    target: &CheckTarget<'_>,
    check_run_id: u64,
) -> Result<Option<Verdict>, RunError> {
    match input.fork {
        true => fork::approved(ctx, env, target, check_run_id).await,
        false => Ok(None),
    }
}

/// A fork's pull request into an environment with secrets: no preview,
/// no secret, and its check says why.
fn fork_refused(summary: String) -> Verdict {
    Verdict::Skipped {
        reason: None,
        tag: SkipTag::RunSkipped,
        summary,
        newer: None,
    }
}

/// The preview is live in the index, and the pull request's older
/// unconfirmed previews are told that this head superseded them (an
/// event naming it, which only a waiting confirmation reads; an older one
/// already queued is superseded by this one's enqueue). One step: a replay
/// tells nobody twice what it told already (a second telling is a no-op).
async fn arrive(ctx: &Ctx<'_>, env: &RunEnv<'_>, input: &PreviewInput) -> Result<(), RunError> {
    ctx.step("preview: arrive", github_step(), |_| async {
        let gate = |e: crate::store::StoreError| FailureTag::Gate.retryable(e.to_string());
        let me = ctx.instance_id();
        let repo = input.repo.as_str();
        let started = started_of(ctx, input);
        previews::started(env.db, &started, ctx.now_ms())
            .await
            .map_err(gate)?;
        let entity = kit::entity_of(input.pr);
        let older = previews::older_live(env.db, "preview", repo, &entity, me)
            .await
            .map_err(gate)?;
        let payload = json!({ SUPERSEDED_BY: input.sha });
        for id in &older {
            // Best effort: an older preview that cannot be told waits
            // out its own confirmation timeout.
            let _ = env.waker.send(id, CONFIRM_EVENT, &payload).await;
        }
        Ok(older)
    })
    .await
    .map(|_: Vec<String>| ())?;
    capped(ctx, env, input).await
}

/// The repository's live previews past `PREVIEW_LIVE_PER_REPO_MAX` (this
/// one counted, as the most recently updated) are torn down, the least
/// recently updated first, each saying why on its pull request.
async fn capped(ctx: &Ctx<'_>, env: &RunEnv<'_>, input: &PreviewInput) -> Result<(), RunError> {
    ctx.step("preview: cap", StepConfig::default(), |_| async {
        let gate = |e: crate::store::StoreError| FailureTag::Gate.retryable(e.to_string());
        let (keep, most) = (
            kit::PREVIEW_LIVE_PER_REPO_MAX,
            kit::PREVIEW_EVICTIONS_PER_ARRIVAL_MAX,
        );
        let beyond = previews::beyond_cap(env.db, &input.repo, input.pr.get(), keep, most)
            .await
            .map_err(gate)?;
        let mut evicted = Vec::new();
        for row in beyond {
            let Some(pr) = u64::try_from(row.pr).ok().and_then(PullNumber::new) else {
                continue;
            };
            let teardown = kit::TeardownInput {
                repo: row.repo,
                pr,
                installation_id: u64::try_from(row.installation_id).unwrap_or(0),
                sha: row.sha,
                head_branch: row.head_branch,
                default_branch: row.default_branch,
                why: format!(
                    "the repository has more than {keep} live previews and this one was updated \
                     least recently; push to it again to preview it again"
                ),
                evicted: true,
                fork: row.fork != 0,
            };
            env.spawner
                .spawn(&kit::eviction_request(&teardown))
                .await
                .map_err(|e| FailureTag::Index.retryable(e))?;
            evicted.push(pr.get());
        }
        Ok(evicted)
    })
    .await
    .map(|_: Vec<u64>| ())
}

/// After the deploy: the pull request's comment shows what it deployed
/// (when its command ran), and the index records how it ended.
async fn after(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &PreviewInput,
    verdict: Option<&Verdict>,
    ran: &deployment::Ran,
) -> Result<(), RunError> {
    let Some(verdict) = verdict else {
        return Ok(());
    };
    let result = result_of(verdict);
    if ran.concluded {
        let body = comment_body(input, verdict, ran);
        let marker = kit::comment_marker(input.pr);
        // The comment is a courtesy: GitHub refusing it changes nothing.
        let commented = ctx
            .step("preview: comment", github_step(), |_| async {
                let (installation, repo, pr) = (input.installation_id, &input.repo, input.pr.get());
                env.github
                    .upsert_comment(installation, repo, pr, &marker, &body)
                    .await
                    .map_err(github_failure)
            })
            .await;
        match commented {
            Err(e) if e.is_suspension() || e == RunError::Terminated => return Err(e),
            _ => {}
        }
    }
    ctx.step("preview: record", StepConfig::default(), |_| async {
        let url = ran.environment_url.as_deref();
        let (repo, pr, me) = (input.repo.as_str(), input.pr.get(), ctx.instance_id());
        previews::ended(env.db, repo, pr, me, result, url, ctx.now_ms())
            .await
            .map_err(|e| FailureTag::Gate.retryable(e.to_string()))
    })
    .await
}

/// How a preview deploy ended, in the index's words.
fn result_of(verdict: &Verdict) -> &'static str {
    match verdict {
        Verdict::Passed { .. } => "success",
        Verdict::Failed { .. } => "failure",
        Verdict::TimedOut { .. } => "timed_out",
        Verdict::InfraFault { .. } => "error",
        Verdict::Skipped { .. } | Verdict::Superseded { .. } => "skipped",
    }
}

/// The pull request's one preview comment: the URL, the commit it shows,
/// and the log.
pub fn comment_body(input: &PreviewInput, verdict: &Verdict, ran: &deployment::Ran) -> String {
    let log = ran
        .log_url
        .as_deref()
        .map_or_else(String::new, |u| format!(" ([log]({u}))"));
    match (verdict, ran.environment_url.as_deref()) {
        (Verdict::Passed { .. }, Some(url)) => format!(
            "**Preview** of {}: {url}{log}\n\nUpdated by Sluice at each push; torn down when \
             this pull request closes.",
            input.sha
        ),
        (Verdict::Passed { .. }, None) => format!(
            "**Preview** of {} deployed; its command reported no URL \
             (`SLUICE_ENVIRONMENT_URL=`){log}.",
            input.sha
        ),
        _ => format!("**Preview** of {} failed{log}.", input.sha),
    }
}

/// Every automatic skip of a preview is announced (`preview_auto_skipped`);
/// an operator's skip (no reason) and a fork's stay silent.
async fn notify_auto_skip(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &PreviewInput,
    outcome: &RunOutcome,
    verdict: Option<&Verdict>,
) -> Result<(), RunError> {
    let RunOutcome::Skipped {
        reason: Some(reason),
        ..
    } = outcome
    else {
        return Ok(());
    };
    let Some(r) = SkipReason::parse(reason) else {
        return Ok(());
    };
    let newer = match verdict {
        Some(Verdict::Skipped { newer, .. }) => newer.as_deref(),
        _ => None,
    };
    let n = AutoSkipped {
        event: "preview_auto_skipped",
        execution_id: ctx.instance_id(),
        repo: &input.repo,
        branch: &input.head_branch,
        revision: &input.sha,
        reason: r.as_str(),
        newer_revision: newer,
        tag: None,
        at_ms: ctx.now_ms(),
    };
    notify::auto_skipped(ctx, env, &n).await?;
    Ok(())
}
