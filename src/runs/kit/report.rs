//! The shared skeleton of a run that reports through a check run: open it,
//! run the body, conclude it from the body's verdict. A run reads as a
//! short list of steps; no run repeats this.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::engine::{Backoff, Ctx, RunError, RunOutcome, StepConfig, StepFailure};
use crate::github::client::NewCheckRun;
use crate::github::{CheckConclusion, CheckOutput, CheckRunUpdate, GitHubError};
use crate::limits::{
    CHECK_SUMMARY_CHARS_MAX, HEARTBEAT_INTERVAL_MS, HOLDER_STALE_MS, LEASE_TTL_MS, SLOT_TTL_MS,
};

use super::tags::{FailureTag, SkipTag};
use super::RunEnv;
use crate::gates::SkipReason;

/// The check run a run reports through, named from its input.
pub struct CheckRunOf {
    pub name: String,
    pub installation_id: u64,
    pub repo: String,
    pub sha: String,
}

/// GitHub calls: a few quick retries ride out a blip or a rate limit.
const GITHUB_STEP_RETRIES: u32 = 4;
const GITHUB_STEP_RETRY_DELAY_MS: i64 = 1_000;
const GITHUB_STEP_TIMEOUT_MS: i64 = 60_000;

pub fn github_step() -> StepConfig {
    StepConfig::default()
        .retries(
            GITHUB_STEP_RETRIES,
            GITHUB_STEP_RETRY_DELAY_MS,
            Backoff::Exponential,
        )
        .timeout_ms(GITHUB_STEP_TIMEOUT_MS)
}

pub fn github_failure(e: GitHubError) -> StepFailure {
    FailureTag::GitHubApi.failure(e.to_string(), e.retryable())
}

/// How a run's work ended. A verdict is not an error: an infrastructure
/// fault never shows as a red test failure, a skip never as a failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Passed {
        summary: String,
    },
    Failed {
        summary: String,
    },
    TimedOut {
        summary: String,
    },
    /// Sluice could not do the work (sandbox down, checkout failed).
    InfraFault {
        summary: String,
    },
    /// Not done on purpose (superseded, not current), with the reason (none
    /// for an operator's explicit skip), the typed tag the instance records
    /// (`RunSkipped`, ...) and the newer revision a skip names.
    Skipped {
        reason: Option<SkipReason>,
        tag: SkipTag,
        summary: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        newer: Option<String>,
    },
    /// A newer head of the pull request replaced this one: nothing of it
    /// is worth finishing.
    Superseded {
        summary: String,
        newer: String,
    },
}

impl Verdict {
    /// The one mapping from verdict to check run conclusion.
    pub fn conclusion(&self) -> CheckConclusion {
        match self {
            Verdict::Passed { .. } => CheckConclusion::Success,
            Verdict::Failed { .. } => CheckConclusion::Failure,
            Verdict::TimedOut { .. } => CheckConclusion::TimedOut,
            Verdict::InfraFault { .. } => CheckConclusion::Cancelled,
            // GitHub's `skipped`: branch protection counts it as passed, and
            // nothing was wrong with the change.
            Verdict::Skipped {
                reason: Some(SkipReason::NoMatchingChange),
                ..
            } => CheckConclusion::Skipped,
            Verdict::Skipped { .. } => CheckConclusion::Neutral,
            Verdict::Superseded { .. } => CheckConclusion::Cancelled,
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Verdict::Passed { .. } => "Passed",
            Verdict::Failed { .. } => "Failed",
            Verdict::TimedOut { .. } => "Timed out",
            Verdict::InfraFault { .. } => "Sluice could not run this",
            Verdict::Skipped { .. } => "Skipped",
            Verdict::Superseded { .. } => "Superseded",
        }
    }

    /// The same verdict with a paragraph added to its summary.
    pub fn with_note(mut self, note: String) -> Verdict {
        match &mut self {
            Verdict::Passed { summary }
            | Verdict::Failed { summary }
            | Verdict::TimedOut { summary }
            | Verdict::InfraFault { summary }
            | Verdict::Skipped { summary, .. }
            | Verdict::Superseded { summary, .. } => {
                summary.push_str("\n\n");
                summary.push_str(&note);
            }
        }
        self
    }

    fn summary(&self) -> &str {
        match self {
            Verdict::Passed { summary }
            | Verdict::Failed { summary }
            | Verdict::TimedOut { summary }
            | Verdict::InfraFault { summary }
            | Verdict::Skipped { summary, .. }
            | Verdict::Superseded { summary, .. } => summary,
        }
    }
}

/// The execution's page in Sluice's API (`GET /v1/executions/{id}`, behind
/// the admin token): a check run's details link and a deployment's log link.
pub fn details_url(env: &RunEnv<'_>, instance_id: &str) -> String {
    format!(
        "{}/v1/executions/{instance_id}",
        env.public_url.trim_end_matches('/')
    )
}

/// The step that concludes a check run.
pub const CONCLUDE_STEP: &str = "complete check run";

/// Where a check run lives.
pub struct CheckTarget<'a> {
    pub name: &'a str,
    pub installation_id: u64,
    pub repo: &'a str,
    pub sha: &'a str,
}

/// The check run a body reports through, handed to it by [`reported`]: its
/// id, and whether the body already concluded it. A run whose verdict is its
/// gates' verdict names it in `gate::Gates::report`, and `gate::with_gates`
/// concludes it ([`Report::conclude_held`]) before it releases the gates, so
/// the release is off the path to the verdict; `reported` then concludes
/// only a check run the body did not.
#[derive(Clone)]
pub struct Report<'a> {
    pub id: u64,
    target: &'a CheckTarget<'a>,
    concluded: Rc<Cell<bool>>,
}

/// The conclusion taken while the gates are still held keeps them (pool
/// slots, the sandbox lease, a serial group) with no heartbeat beside it, so
/// it gets one quick retry and a shorter attempt timeout than a GitHub
/// step's; when it still fails, the gates are released and `reported`
/// concludes after them with a GitHub step's full retries.
const CONCLUDE_HELD_RETRIES: u32 = 1;
const CONCLUDE_HELD_RETRY_DELAY_MS: i64 = 1_000;
const CONCLUDE_HELD_TIMEOUT_MS: i64 = 20_000;
/// The longest the held conclusion keeps the gates past the body's last
/// heartbeat: its attempts and the wait between them.
const CONCLUDE_HELD_MS_MAX: i64 = (CONCLUDE_HELD_RETRIES as i64 + 1) * CONCLUDE_HELD_TIMEOUT_MS
    + CONCLUDE_HELD_RETRY_DELAY_MS * CONCLUDE_HELD_RETRIES as i64;
// Nothing held goes stale while the check run is concluded: the last beat
// was at most one interval before it.
const _: () = assert!(HEARTBEAT_INTERVAL_MS + CONCLUDE_HELD_MS_MAX < HOLDER_STALE_MS);
const _: () = assert!(HEARTBEAT_INTERVAL_MS + CONCLUDE_HELD_MS_MAX < SLOT_TTL_MS);
const _: () = assert!(HEARTBEAT_INTERVAL_MS + CONCLUDE_HELD_MS_MAX < LEASE_TTL_MS);
// Its one retry waits in-process: no suspension while the gates are held.
const _: () = assert!(CONCLUDE_HELD_RETRY_DELAY_MS <= crate::limits::STEP_RETRY_INLINE_MS_MAX);

impl Report<'_> {
    /// Concludes the check run from how the body ended, while the gates are
    /// still held: a verdict as itself, a failure as [`reported`] would (an
    /// infrastructure fault), a suspension not at all. It is the journaled
    /// step `reported` takes after the body, bounded shorter. A step that
    /// failed leaves the conclusion to `reported`, after the release (a
    /// failure never keeps the gates); a suspension is returned, so the
    /// resumed pass concludes and then releases.
    pub async fn conclude_held(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        outcome: &Result<Verdict, RunError>,
    ) -> Result<(), RunError> {
        let verdict = match outcome {
            Ok(v) => v.clone(),
            Err(e) => match failure_verdict(e) {
                Some(v) => v,
                None => return Ok(()),
            },
        };
        let cfg = github_step()
            .retries(
                CONCLUDE_HELD_RETRIES,
                CONCLUDE_HELD_RETRY_DELAY_MS,
                Backoff::Exponential,
            )
            .timeout_ms(CONCLUDE_HELD_TIMEOUT_MS);
        match conclude_with(ctx, env, self.target, self.id, &verdict, cfg).await {
            Ok(()) => {
                self.concluded.set(true);
                Ok(())
            }
            // GitHub failed or hung past the bound: `reported` concludes
            // again after the release.
            Err(e) if e.step_failure().is_some() || matches!(e, RunError::StepTimedOut { .. }) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

/// The verdict a body's failure concludes with; none for a suspension (the
/// body has not ended).
fn failure_verdict(e: &RunError) -> Option<Verdict> {
    match e {
        e if e.is_suspension() => None,
        RunError::Terminated => Some(Verdict::InfraFault {
            summary: "Terminated by an operator.".into(),
        }),
        e => Some(Verdict::InfraFault {
            summary: format!("{} ({})", e, e.tag()),
        }),
    }
}

/// Opens the check run (queued, then in progress), runs `body`, and
/// concludes the check run from its verdict unless the body did
/// ([`Report`]). A body that fails (not a suspension) concludes the check
/// run as an infrastructure fault and the instance errors with the body's
/// typed error.
pub async fn reported<'t, F, Fut>(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &'t CheckTarget<'t>,
    body: F,
) -> Result<RunOutcome, RunError>
where
    F: FnOnce(Report<'t>) -> Fut,
    Fut: Future<Output = Result<Verdict, RunError>>,
{
    let id = open_check_run(ctx, env, target).await?;
    let report = Report {
        id,
        target,
        concluded: Rc::default(),
    };
    let (verdict, failure) = match body(report.clone()).await {
        Ok(v) => (v, None),
        Err(e) => match failure_verdict(&e) {
            Some(v) => (v, Some(e)),
            None => return Err(e),
        },
    };
    if !report.concluded.get() {
        conclude(ctx, env, target, id, &verdict).await?;
    }
    match (failure, verdict) {
        (Some(e), _) => Err(e),
        (None, Verdict::Skipped { reason, tag, .. }) => Ok(RunOutcome::Skipped {
            reason: reason.map(|r| r.as_str().to_owned()),
            tag: Some(tag.as_str().to_owned()),
        }),
        (None, Verdict::Superseded { .. }) => Ok(RunOutcome::Skipped {
            reason: Some(SkipReason::Superseded.as_str().to_owned()),
            tag: Some(SkipTag::RunSkipped.as_str().to_owned()),
        }),
        (None, verdict) => Ok(RunOutcome::Complete(
            json!({ "check_run_id": id, "conclusion": verdict.conclusion(), "verdict": verdict }),
        )),
    }
}

/// Opens the check run in progress, in one GitHub call when nothing of it
/// can exist yet: created directly as `in_progress`, looked up by its
/// `external_id` first only when the step may have run before
/// (`Ctx::may_have_run`: a failed attempt, a pass that died, a restart), so
/// a replay never creates a second one. The start step then has nothing to
/// do; it still starts a check run created queued (by a journal an older
/// version wrote) or found not in progress.
async fn open_check_run(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
) -> Result<u64, RunError> {
    let details_url = details_url(env, ctx.instance_id());
    let in_progress = Cell::new(false);
    let id: u64 = ctx
        .step("create check run", github_step(), |attempt| {
            let (in_progress, details_url) = (&in_progress, details_url.as_str());
            async move {
                let (installation, repo) = (target.installation_id, target.repo);
                if ctx.may_have_run(attempt) {
                    let found = env
                        .github
                        .find_check_run_state(
                            installation,
                            repo,
                            target.sha,
                            target.name,
                            ctx.instance_id(),
                        )
                        .await
                        .map_err(github_failure)?;
                    if let Some((id, status)) = found {
                        in_progress.set(status == "in_progress");
                        return Ok(id);
                    }
                }
                let new = NewCheckRun {
                    name: target.name,
                    sha: target.sha,
                    external_id: ctx.instance_id(),
                    details_url,
                    status: "in_progress",
                };
                let id = env
                    .github
                    .create_check_run(installation, repo, &new)
                    .await
                    .map_err(github_failure)?;
                in_progress.set(true);
                Ok(id)
            }
        })
        .await?;
    ctx.step("start check run", github_step(), |_| async {
        if in_progress.get() {
            return Ok(());
        }
        let update = CheckRunUpdate {
            status: Some("in_progress"),
            ..CheckRunUpdate::default()
        };
        env.github
            .update_check_run(target.installation_id, target.repo, id, &update)
            .await
            .map_err(github_failure)
    })
    .await?;
    Ok(id)
}

/// Concludes, outside any run, a check run an instance left open when it
/// ended from outside. Best effort: GitHub down means it stays open.
pub async fn conclude_abandoned(
    env: &RunEnv<'_>,
    target: &CheckRunOf,
    instance_id: &str,
    status: crate::engine::Status,
) {
    let (installation, repo) = (target.installation_id, target.repo.as_str());
    let Ok(Some((id, state))) = env
        .github
        .find_check_run_state(installation, repo, &target.sha, &target.name, instance_id)
        .await
    else {
        return;
    };
    if state == "completed" {
        return;
    }
    let update = CheckRunUpdate {
        status: Some("completed"),
        conclusion: Some(CheckConclusion::Cancelled),
        output: Some(CheckOutput {
            title: "Sluice could not run this".into(),
            summary: format!("The run ended {} before it could report.", status.as_str()),
        }),
        ..CheckRunUpdate::default()
    };
    let _ = env
        .github
        .update_check_run(installation, repo, id, &update)
        .await;
}

/// Concludes the check run: a step, so it happens once.
pub async fn conclude(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
    id: u64,
    verdict: &Verdict,
) -> Result<(), RunError> {
    conclude_with(ctx, env, target, id, verdict, github_step()).await
}

/// The conclusion step, under `cfg`: one name whoever takes it (`reported`
/// after the body, or `with_gates` before it releases), so a replay finds
/// it where either journaled it (a held conclusion that failed is followed,
/// after the release, by `reported`'s, journaled `#2`).
async fn conclude_with(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
    id: u64,
    verdict: &Verdict,
    cfg: StepConfig,
) -> Result<(), RunError> {
    let mut summary = verdict.summary().to_owned();
    if summary.len() > CHECK_SUMMARY_CHARS_MAX {
        let mut cut = CHECK_SUMMARY_CHARS_MAX;
        while !summary.is_char_boundary(cut) {
            cut -= 1;
        }
        summary.truncate(cut);
    }
    let update = CheckRunUpdate {
        status: Some("completed"),
        conclusion: Some(verdict.conclusion()),
        output: Some(CheckOutput {
            title: verdict.title().to_owned(),
            summary,
        }),
        ..CheckRunUpdate::default()
    };
    // A cleanup step: it concludes the check run even for an instance an
    // operator is terminating. One already completed is left as it is: a
    // newer head's check concluded it (naming itself) before ending this
    // instance, or this step's answer was lost after it applied.
    ctx.cleanup_step(CONCLUDE_STEP, cfg, |_| async {
        let (installation, repo) = (target.installation_id, target.repo);
        let state = env
            .github
            .find_check_run_state(
                installation,
                repo,
                target.sha,
                target.name,
                ctx.instance_id(),
            )
            .await
            .map_err(github_failure)?;
        if state.is_some_and(|(_, status)| status == "completed") {
            return Ok(());
        }
        env.github
            .update_check_run(installation, repo, id, &update)
            .await
            .map_err(github_failure)
    })
    .await
}
