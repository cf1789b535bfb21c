//! The `deploy` run: on a push to the branch `.sluice.toml` names, run the
//! deploy command, serialized per repository + branch (+ label) so two
//! deploys never overlap and the newest commit wins (ADR-0004), with the
//! group's queue policy, and report `sluice/deploy`.
//!
//! The run reads as its steps: read config, [wait for confirmation], read
//! head, enqueue, claim (waiting for the handoff), re-read head, admission,
//! lease, command (heartbeating), release.

use std::cell::RefCell;
use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::engine::{Ctx, RunError, RunOutcome, StepConfig, StepFailure};
use crate::gates::policy::{Current, QueuePolicy, SkipReason};
use crate::gates::serial::{self, Arrival, ClaimOutcome, EnqueueOutcome};
use crate::gates::{admission, lease};
use crate::limits::{SERIAL_POLL_MS, STEP_RETRY_INLINE_MS_MAX};

use super::check::verdict_of;
use super::command::{run_command, Beat, CommandSpec};
use super::config::{command_timeout_ms, parse_duration_ms, DeployConfig, RepoConfig};
use super::notify::{self, AutoSkipped};
use super::report::{github_failure, github_step, reported, CheckTarget, Verdict};
use super::triggers::DeployInput;
use super::{configured, Configured, RunEnv};

pub const DEPLOY_CHECK_NAME: &str = "sluice/deploy";
/// The event a releasing holder sends the next waiter (push handoff).
pub const TURN_EVENT: &str = "serial-turn";
/// The event an operator sends to confirm a deploy that asks for it.
pub const CONFIRM_EVENT: &str = "deploy-confirm";
/// The sandbox pool every deploy is admitted to.
const POOL: &str = "sandbox";
/// A confirmation nobody gives is bounded (ADR-0001 rule 3: hibernation
/// only for bounded human decisions): 72 h, as release approval.
const CONFIRMATION_TIMEOUT_MS_DEFAULT: i64 = 72 * 3600 * 1000;
/// Admission polls: a full pool frees a slot when a command ends; 5 s keeps
/// the wait cheap, 120 polls (10 minutes) bound it before the run reports
/// an infrastructure fault.
const ADMISSION_POLL_MS: i64 = 5_000;
const ADMISSION_POLLS_MAX: u32 = 120;
/// Lease retries: a busy sandbox is one this instance itself held in an
/// earlier attempt, so it frees within a lease TTL at most.
const LEASE_RETRIES: u32 = 5;

/// The serialization group: repository, branch and lane label.
pub fn group_key(input: &DeployInput, deploy: &DeployConfig) -> String {
    match &deploy.label {
        Some(label) => format!("deploy:{}:{}:{label}", input.repo, input.branch),
        None => format!("deploy:{}:{}", input.repo, input.branch),
    }
}

pub fn policy_of(deploy: &DeployConfig) -> Result<QueuePolicy, String> {
    let q = deploy.queue.clone().unwrap_or_default();
    let ms = |v: &Option<String>| v.as_deref().map(parse_duration_ms).transpose();
    QueuePolicy::from_config(
        q.supersede,
        ms(&q.queued_timeout)?,
        ms(&q.supersede_after)?,
        ms(&q.confirmation_timeout)?,
    )
    .map_err(|e| e.to_string())
}

/// How the gate ended for this execution.
enum Gate {
    Holding,
    Skipped(Verdict),
}

fn gate_failure(e: crate::store::StoreError) -> StepFailure {
    StepFailure::retryable("SerialQueue", e.to_string())
}

fn skipped(reason: SkipReason, tag: &str, summary: String) -> Verdict {
    Verdict::Skipped {
        reason: Some(reason.as_str().to_owned()),
        tag: Some(tag.to_owned()),
        summary,
    }
}

/// Wake-ups by events (handoffs, supersede notices) one waiter may take
/// beyond its timed polls: each is followed by a claim, so a handoff is
/// never mistaken for a timeout; the bound only stops a storm of stray
/// events.
const WAITER_WAKES_MAX: u32 = 32;

/// A claim and when it was made (the first one's time starts the waiter's
/// queued-timeout clock for its poll schedule).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claimed {
    outcome: ClaimOutcome,
    at_ms: i64,
}

pub async fn run(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
) -> Result<RunOutcome, RunError> {
    let target = CheckTarget {
        name: DEPLOY_CHECK_NAME,
        installation_id: input.installation_id,
        repo: &input.repo,
        sha: &input.sha,
    };
    let branch = input.branch.as_str();
    let pick = |c: RepoConfig| c.deploy.filter(|d| d.branch == branch);
    let deploy = match configured(ctx, env, &target, pick).await? {
        Configured::Run(deploy) => deploy,
        Configured::Done(outcome) => return Ok(outcome),
    };
    let policy = match policy_of(&deploy) {
        Ok(p) => p,
        Err(m) => {
            let summary = format!("`[deploy.queue]` is invalid: {m}");
            return reported(ctx, env, &target, || async {
                Ok(Verdict::Failed { summary })
            })
            .await;
        }
    };
    let group = group_key(input, &deploy);
    // The newer revision an automatic skip names, set by the gate (replay
    // sets it again from the same journaled steps).
    let newer: RefCell<Option<String>> = RefCell::new(None);
    let outcome = reported(ctx, env, &target, || async {
        if let Some(v) = confirm(ctx, input, &deploy, &policy).await? {
            return Ok(v);
        }
        match serial_gate(ctx, env, input, &group, &policy, &newer).await? {
            Gate::Skipped(v) => {
                // Leaving the line passes the turn on: with supersede-after
                // the oldest waiter (the one a release wakes) may yield to a
                // newer one, which must not wait for its poll.
                release(ctx, env, &group).await?;
                return Ok(v);
            }
            Gate::Holding => {}
        }
        let result = holding(ctx, env, input, &deploy, &group, &newer).await;
        if result.as_ref().err().is_some_and(RunError::is_suspension) {
            return result;
        }
        release(ctx, env, &group).await?;
        result
    })
    .await?;
    if let RunOutcome::Skipped {
        reason: Some(reason),
        ..
    } = &outcome
    {
        if let Some(r) = SkipReason::parse(reason) {
            let newer = newer.borrow().clone();
            let n = AutoSkipped {
                event: "deployment_auto_skipped",
                execution_id: ctx.instance_id(),
                repo: &input.repo,
                branch: &input.branch,
                revision: &input.sha,
                reason: r.as_str(),
                newer_revision: newer.as_deref(),
                at_ms: ctx.now_ms(),
            };
            notify::auto_skipped(ctx, env, &n).await?;
        }
    }
    Ok(outcome)
}

/// `[deploy] confirm = true`: wait (bounded) for an operator's confirmation
/// before joining the queue, so a deploy awaiting a human holds nothing.
async fn confirm(
    ctx: &Ctx<'_>,
    input: &DeployInput,
    deploy: &DeployConfig,
    policy: &QueuePolicy,
) -> Result<Option<Verdict>, RunError> {
    if !deploy.confirm.unwrap_or(false) {
        return Ok(None);
    }
    let timeout_ms = policy
        .confirmation_timeout_ms
        .unwrap_or(CONFIRMATION_TIMEOUT_MS_DEFAULT);
    match ctx
        .wait_for_event("confirmation", CONFIRM_EVENT, timeout_ms)
        .await
    {
        Ok(_) => Ok(None),
        Err(RunError::EventTimedOut { .. }) => Ok(Some(skipped(
            SkipReason::ConfirmationTimeout,
            "RunSkipped",
            format!(
                "Not deployed: nobody confirmed {} within {} minutes.",
                input.sha,
                timeout_ms / 60_000
            ),
        ))),
        Err(e) => Err(e),
    }
}

/// The serial gate: read the head once, enqueue (superseding older
/// waiters in the same statement), then claim until holding, skipped or
/// timed out. Waiting costs no CPU: the waiter waits for the releasing
/// holder's handoff event, polling only as the fallback for a dead holder.
async fn serial_gate(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    group: &str,
    policy: &QueuePolicy,
    newer: &RefCell<Option<String>>,
) -> Result<Gate, RunError> {
    let gate_id = gate_id(ctx);
    let gate_id = gate_id.as_str();
    let head: Result<Option<String>, RunError> = ctx
        .step("read head", github_step(), |_| async {
            env.github
                .branch_head(input.installation_id, &input.repo, &input.branch)
                .await
                .map_err(github_failure)
        })
        .await;
    let current = match head {
        Ok(Some(sha)) => Current::Known(sha),
        Err(e) if e.is_suspension() || e == RunError::Terminated => return Err(e),
        // The head read failed: the group falls back to arrival order.
        _ => Current::Unknown,
    };
    let arrived: EnqueueOutcome = ctx
        .step("enqueue", StepConfig::default(), |_| {
            let current = current.clone();
            async move {
                let arrival = Arrival {
                    group,
                    execution_id: gate_id,
                    revision: &input.sha,
                    current,
                    imperative: false,
                };
                let outcome = serial::enqueue(env.db, &arrival, policy, ctx.now_ms())
                    .await
                    .map_err(gate_failure)?;
                if let EnqueueOutcome::Queued { superseded } = &outcome {
                    // Superseded waiters learn it now, not at their next poll.
                    for s in superseded {
                        let _ = env
                            .waker
                            .wake(serial::instance_of(&s.execution_id), TURN_EVENT)
                            .await;
                    }
                }
                Ok(outcome)
            }
        })
        .await?;
    if let EnqueueOutcome::NotCurrent { current } = arrived {
        *newer.borrow_mut() = Some(current.clone());
        return Ok(Gate::Skipped(skipped(
            SkipReason::NotCurrent,
            "RunSkipped",
            format!(
                "Not deployed: {} is not the head of `{}`; the head is {current}.",
                input.sha, input.branch
            ),
        )));
    }
    // Timed polls: one per SERIAL_POLL_MS up to the queued timeout, the
    // last landing just past it so that claim itself decides the timeout.
    let polls_max = (policy.queued_timeout_ms / SERIAL_POLL_MS).max(0) as u32 + 1;
    let (mut polls, mut wakes) = (0u32, 0u32);
    let mut first_claim_ms = None;
    while polls <= polls_max && wakes <= WAITER_WAKES_MAX {
        let claimed: Claimed = ctx
            .step("claim", StepConfig::default(), |_| async {
                let at_ms = ctx.now_ms();
                let outcome = serial::claim(env.db, group, gate_id, policy, at_ms)
                    .await
                    .map_err(gate_failure)?;
                Ok(Claimed { outcome, at_ms })
            })
            .await?;
        let deadline_ms = *first_claim_ms.get_or_insert(claimed.at_ms) + policy.queued_timeout_ms;
        match claimed.outcome {
            ClaimOutcome::Holding { .. } => return Ok(Gate::Holding),
            ClaimOutcome::Waiting { .. } => {
                // A poll every SERIAL_POLL_MS; the one that reaches the
                // deadline lands 1 ms past it (the gate's check is strict).
                let remaining_ms = (deadline_ms - claimed.at_ms).max(0);
                let wait_ms = if remaining_ms <= SERIAL_POLL_MS {
                    remaining_ms + 1
                } else {
                    SERIAL_POLL_MS
                };
                match ctx.wait_for_event("turn", TURN_EVENT, wait_ms).await {
                    Ok(_) => wakes += 1,
                    Err(RunError::EventTimedOut { .. }) => polls += 1,
                    Err(e) => return Err(e),
                }
            }
            ClaimOutcome::Superseded { by } => {
                *newer.borrow_mut() = Some(by.clone());
                return Ok(Gate::Skipped(skipped(
                    SkipReason::Superseded,
                    "RunSkipped",
                    format!(
                        "Not deployed: superseded by a newer revision of `{}`, {by}.",
                        input.branch
                    ),
                )));
            }
            ClaimOutcome::TimedOut => return Ok(Gate::Skipped(timed_out(input, policy))),
            ClaimOutcome::Skipped { reason: None } => {
                return Ok(Gate::Skipped(Verdict::Skipped {
                    reason: None,
                    tag: Some("RunSkipped".into()),
                    summary: "Not deployed: an operator skipped this deploy.".into(),
                }))
            }
            ClaimOutcome::Skipped { reason: Some(r) } => {
                return Ok(Gate::Skipped(skipped(
                    r,
                    "RunSkipped",
                    format!("Not deployed: skipped ({}).", r.as_str()),
                )))
            }
            other => {
                return Err(RunError::NonRetryable {
                    step: "claim".into(),
                    failure: StepFailure::fatal(
                        "SerialQueue",
                        format!("unexpected claim outcome {other:?}"),
                    ),
                })
            }
        }
    }
    Ok(Gate::Skipped(timed_out(input, policy)))
}

fn timed_out(input: &DeployInput, policy: &QueuePolicy) -> Verdict {
    skipped(
        SkipReason::QueuedTimeout,
        "SerialQueueTimedOut",
        format!(
            "Not deployed: {} waited over {} minutes behind a running deploy.",
            input.sha,
            policy.queued_timeout_ms / 60_000
        ),
    )
}

/// This execution's id in the serial queue (see `serial::execution_id_of`).
fn gate_id(ctx: &Ctx<'_>) -> String {
    serial::execution_id_of(ctx.instance_id(), ctx.generation())
}

/// Heartbeats everything the holder holds, between the command's polls.
struct HolderBeat<'a> {
    env: &'a RunEnv<'a>,
    group: &'a str,
    /// The instance (pool slot and lease holder).
    id: &'a str,
    /// Its execution id in the serial queue.
    gate_id: &'a str,
}

#[async_trait(?Send)]
impl Beat for HolderBeat<'_> {
    async fn beat(&self) {
        let now = self.env.github.clock.now_ms();
        // Failures are ignored here: the deploy in flight is never
        // cancelled (ADR-0004), and a holder that lost its group was
        // stopped before its command by the "still holding" step.
        let _ = serial::heartbeat(self.env.db, self.group, self.gate_id, now).await;
        let _ = admission::heartbeat(self.env.db, POOL, self.id, now).await;
        let _ = lease::heartbeat(self.env.db, self.id, self.id, now).await;
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Admitted {
    admitted: bool,
}

/// Holding the group: re-read the head, enter the pool, lease the sandbox,
/// run the command with the secrets.
async fn holding(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &DeployInput,
    deploy: &DeployConfig,
    group: &str,
    newer: &RefCell<Option<String>>,
) -> Result<Verdict, RunError> {
    // A holder that stalled past the heartbeat bound (paused, or its
    // executor gone) may have been taken over: it must not deploy then.
    let still_holding: bool = ctx
        .step("still holding", StepConfig::default(), |_| async {
            serial::heartbeat(env.db, group, &gate_id(ctx), ctx.now_ms())
                .await
                .map_err(gate_failure)
        })
        .await?;
    if !still_holding {
        return Ok(Verdict::InfraFault {
            summary: "Not deployed: this deploy stalled past the 10-minute heartbeat bound and a newer deploy took its group over.".into(),
        });
    }
    let head: Option<String> = ctx
        .step("re-read head", github_step(), |_| async {
            env.github
                .branch_head(input.installation_id, &input.repo, &input.branch)
                .await
                .map_err(github_failure)
        })
        .await
        .or_else(|e| {
            if e.is_suspension() || e == RunError::Terminated {
                Err(e)
            } else {
                Ok(None)
            }
        })?;
    if let Some(h) = &head {
        if h != &input.sha {
            *newer.borrow_mut() = Some(h.clone());
            return Ok(skipped(
                SkipReason::NotCurrent,
                "RunSkipped",
                format!(
                    "Not deployed: `{}` moved on to {h} while this deploy waited.",
                    input.branch
                ),
            ));
        }
    }
    let gate_id = gate_id(ctx);
    let beat = HolderBeat {
        env,
        group,
        id: ctx.instance_id(),
        gate_id: &gate_id,
    };
    let admitted: Admitted = ctx
        .step(
            "admission",
            StepConfig::default()
                .timeout_ms(ADMISSION_POLL_MS * i64::from(ADMISSION_POLLS_MAX) + 60_000),
            |_| {
                let beat = &beat;
                async move {
                    for _ in 0..ADMISSION_POLLS_MAX {
                        let now = ctx.now_ms();
                        match admission::acquire(
                            env.db,
                            POOL,
                            ctx.instance_id(),
                            env.pool_capacity,
                            now,
                        )
                        .await
                        .map_err(gate_failure)?
                        {
                            admission::AdmissionOutcome::Admitted => {
                                return Ok(Admitted { admitted: true })
                            }
                            admission::AdmissionOutcome::Queued { .. } => {
                                beat.beat().await;
                                env.github.clock.sleep(ADMISSION_POLL_MS).await;
                            }
                        }
                    }
                    Ok(Admitted { admitted: false })
                }
            },
        )
        .await?;
    if !admitted.admitted {
        return Ok(Verdict::InfraFault {
            summary: format!(
                "No sandbox capacity within {} minutes.",
                ADMISSION_POLL_MS * i64::from(ADMISSION_POLLS_MAX) / 60_000
            ),
        });
    }
    ctx.step(
        "lease sandbox",
        StepConfig::default().retries(
            LEASE_RETRIES,
            STEP_RETRY_INLINE_MS_MAX,
            crate::engine::Backoff::Constant,
        ),
        |_| async {
            match lease::acquire(env.db, ctx.instance_id(), ctx.instance_id(), ctx.now_ms())
                .await
                .map_err(gate_failure)?
            {
                lease::LeaseOutcome::Acquired { .. } => Ok(()),
                lease::LeaseOutcome::Busy { holder, .. } => Err(StepFailure::retryable(
                    "LeaseBusy",
                    format!("sandbox held by {holder:?}"),
                )),
            }
        },
    )
    .await?;
    let mut secret_env = Vec::with_capacity(deploy.secrets.len());
    for name in &deploy.secrets {
        match env.secrets.secret(name) {
            Some(v) => secret_env.push((name.clone(), v)),
            None => return Ok(Verdict::Failed { summary: format!("Not deployed: the Worker secret `{name}` named in `[deploy] secrets` is not set.") }),
        }
    }
    let timeout_ms = command_timeout_ms(deploy.timeout.as_deref())
        .map_err(|m| RunError::InvalidInput { message: m })?;
    let mut vars = BTreeMap::new();
    vars.insert("SLUICE_SHA".to_owned(), input.sha.clone());
    vars.insert(
        "SLUICE_HEAD_SHA".to_owned(),
        head.unwrap_or_else(|| input.sha.clone()),
    );
    vars.insert("SLUICE_BRANCH".to_owned(), input.branch.clone());
    vars.insert("SLUICE_REPO".to_owned(), input.repo.clone());
    if let Some(label) = &deploy.label {
        vars.insert("SLUICE_DEPLOY_LABEL".to_owned(), label.clone());
    }
    let spec = CommandSpec {
        step: "run deploy command",
        repo_url: &input.clone_url,
        sha: &input.sha,
        installation_id: input.installation_id,
        command: &deploy.command,
        timeout_ms,
        env: vars,
        secret_env,
        beat: Some(&beat),
    };
    let result = run_command(ctx, env, &spec).await?;
    Ok(verdict_of(&deploy.command, &result))
}

/// Releases the group, the pool slot and the lease on every exit path, and
/// hands the group to the live waiter at once.
async fn release(ctx: &Ctx<'_>, env: &RunEnv<'_>, group: &str) -> Result<(), RunError> {
    ctx.cleanup_step("release", StepConfig::default(), |_| async {
        let now = ctx.now_ms();
        let id = ctx.instance_id();
        let next = serial::release(env.db, group, &gate_id(ctx), now)
            .await
            .map_err(gate_failure)?;
        admission::release(env.db, POOL, id)
            .await
            .map_err(gate_failure)?;
        lease::release(env.db, id, id).await.map_err(gate_failure)?;
        if let Some(next) = next {
            let _ = env.waker.wake(serial::instance_of(&next), TURN_EVENT).await;
        }
        Ok(())
    })
    .await
}

/// After the instance ended by a path its body could not clean up on (an
/// operator's terminate, a crash loop): withdraw from every gate and wake
/// whoever is next.
pub async fn finalize(env: &RunEnv<'_>, instance_id: &str) {
    let now = env.github.clock.now_ms();
    if let Ok(woken) = serial::abandon(env.db, instance_id, now).await {
        for (_, next) in woken {
            if let Some(next) = next {
                let _ = env.waker.wake(serial::instance_of(&next), TURN_EVENT).await;
            }
        }
    }
    let _ = admission::release(env.db, POOL, instance_id).await;
    let _ = lease::release(env.db, instance_id, instance_id).await;
}
