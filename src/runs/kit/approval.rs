//! Bounded human decisions on a check run's buttons (ADR-0001 rule 3: an
//! instance hibernates only for a decision with a named decider and a
//! declared timeout). The check run shows a button; pressing it sends a
//! `check_run` `requested_action` webhook, which intake turns into an event
//! for the instance the check run's external id names. The instance itself
//! checks the event is about its own check run and that the sender may
//! decide (write access, asked of GitHub), so neither the button nor the
//! webhook route decides anything.
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md)

use serde::{Deserialize, Serialize};

use crate::engine::{Ctx, RunError, StepConfig};
use crate::github::{CheckAction as Button, CheckOutput, CheckRunUpdate};

use super::inputs::{CheckAction, CHECK_ACTION_EVENT};
use super::report::{github_failure, github_step, CheckTarget};
use super::RunEnv;

/// Presses one instance may receive before it stops listening: a decision
/// that never comes ends at the window, a flood of presses by people who
/// may not decide ends here.
const PRESSES_MAX: u32 = 50;

/// Permissions that may decide (GitHub reports `maintain` as `write` here).
const DECIDERS: [&str; 2] = ["admin", "write"];

/// What the check run asks for, and for how long.
pub struct Ask<'a> {
    pub check_run_id: u64,
    pub title: &'a str,
    pub summary: String,
    pub button: Button,
    pub window_ms: i64,
}

/// How the wait ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "decided", rename_all = "snake_case")]
pub enum Decided {
    Approved { by: String },
    TimedOut,
}

/// Shows the button and waits, bounded, until someone who may decide
/// presses it.
pub async fn ask(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
    a: &Ask<'_>,
) -> Result<Decided, RunError> {
    let deadline_ms: i64 = ctx
        .step("approval deadline", StepConfig::once(), |_| async {
            Ok(ctx.now_ms() + a.window_ms)
        })
        .await?;
    show(
        ctx,
        env,
        target,
        a,
        Some(vec![a.button.clone()]),
        "request approval",
    )
    .await?;
    for _ in 0..PRESSES_MAX {
        // Every round is a journaled wait, even one left with no time (it
        // times out at once): a replay takes the same rounds whatever the
        // clock says now.
        let left_ms = (deadline_ms - ctx.now_ms()).max(0);
        let payload = match ctx
            .wait_for_event(APPROVAL_WAIT, CHECK_ACTION_EVENT, left_ms)
            .await
        {
            Ok(p) => p,
            Err(RunError::EventTimedOut { .. }) => break,
            Err(e) => return Err(e),
        };
        let Ok(press) = serde_json::from_value::<CheckAction>(payload) else {
            continue;
        };
        if press.check_run_id != a.check_run_id || press.identifier != a.button.identifier {
            continue;
        }
        if may_decide(ctx, env, target, &press.sender).await? {
            let done = format!("Approved by @{} to run.", press.sender);
            let approved = Ask {
                summary: done,
                ..clone_ask(a)
            };
            show(
                ctx,
                env,
                target,
                &approved,
                Some(Vec::new()),
                "show approval",
            )
            .await?;
            return Ok(Decided::Approved { by: press.sender });
        }
    }
    Ok(Decided::TimedOut)
}

fn clone_ask<'a>(a: &Ask<'a>) -> Ask<'a> {
    Ask {
        check_run_id: a.check_run_id,
        title: a.title,
        summary: a.summary.clone(),
        button: a.button.clone(),
        window_ms: a.window_ms,
    }
}

/// Updates the check run's text and buttons, as the step `name`.
async fn show(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
    a: &Ask<'_>,
    actions: Option<Vec<Button>>,
    name: &str,
) -> Result<(), RunError> {
    let update = CheckRunUpdate {
        output: Some(CheckOutput {
            title: a.title.to_owned(),
            summary: a.summary.clone(),
        }),
        actions,
        ..CheckRunUpdate::default()
    };
    ctx.step(name, github_step(), |_| async {
        env.github
            .update_check_run(target.installation_id, target.repo, a.check_run_id, &update)
            .await
            .map_err(github_failure)
    })
    .await
}

/// Who may decide a bounded human wait on GitHub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deciders {
    /// Anyone with write access to the repository, asked of GitHub.
    WriteAccess,
    /// Exactly these GitHub logins (compared as GitHub does, ignoring case).
    Named(Vec<String>),
}

impl Deciders {
    /// Named approvers, or write access when none are named.
    pub fn of(approvers: &[String]) -> Deciders {
        if approvers.is_empty() {
            Deciders::WriteAccess
        } else {
            Deciders::Named(approvers.to_vec())
        }
    }

    /// Whether `login` is one of the named approvers (compared as GitHub
    /// compares logins): known without asking GitHub.
    pub fn names(&self, login: &str) -> bool {
        match self {
            Deciders::WriteAccess => false,
            Deciders::Named(names) => names.iter().any(|n| n.eq_ignore_ascii_case(login)),
        }
    }

    /// The named approvers as a JSON array for the approval's row
    /// (`store::releases::Waiter::names` reads it back); None for write
    /// access.
    pub fn to_json(&self) -> Option<String> {
        match self {
            Deciders::WriteAccess => None,
            Deciders::Named(names) => serde_json::to_string(names).ok(),
        }
    }

    /// Who they are, in words (a check run's text, the waiting list).
    pub fn describe(&self, repo: &str) -> String {
        match self {
            Deciders::WriteAccess => format!("someone with write access to {repo}"),
            Deciders::Named(names) => names
                .iter()
                .map(|n| format!("@{n}"))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Whether `login` has write access to the repository, asked of GitHub
/// (journaled: the answer at the press is the answer).
async fn may_decide(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
    login: &str,
) -> Result<bool, RunError> {
    may_decide_as(ctx, env, target, login, &Deciders::WriteAccess).await
}

/// Whether `login` is one of `deciders`: a named approver, or (none
/// named) someone GitHub says has write access. Journaled as one step.
pub async fn may_decide_as(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
    login: &str,
    deciders: &Deciders,
) -> Result<bool, RunError> {
    ctx.step("check decider", github_step(), |_| async {
        if let Deciders::Named(_) = deciders {
            return Ok(deciders.names(login));
        }
        let permission = env
            .github
            .permission_of(target.installation_id, target.repo, login)
            .await
            .map_err(github_failure)?;
        Ok(permission.is_some_and(|p| DECIDERS.contains(&p.as_str())))
    })
    .await
}

/// Who decides a human wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider {
    /// An operator, through the API or the dashboard (a deploy's
    /// confirmation: `POST /v1/executions/{id}/events/deploy-confirm`).
    Operator,
    /// Someone with write access, on the check run's button on GitHub (the
    /// instance asks GitHub who pressed it; an event sent any other way is
    /// not a press of its check run and decides nothing).
    GitHubWriteAccess,
    /// A release's approvers (`[release_notes] approvers`, or write access
    /// when none are named), on the approval pull request or the check
    /// run's buttons; who exactly is the approval's row
    /// (`store::releases`).
    ReleaseApprovers,
}

/// A wait a person decides: the wait's step name, the event that ends it
/// and who sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanWait {
    pub wait: &'static str,
    pub event_type: &'static str,
    pub decider: Decider,
}

// The waits people decide, named here (the runs that wait import them).
/// The event an operator sends to confirm a deploy that asks for it.
pub const CONFIRM_EVENT: &str = "deploy-confirm";
/// The wait for it; a restart never reuses a confirmation (see
/// `prepare_restart`).
pub const CONFIRM_WAIT: &str = "confirmation";
/// The event every decision about a release arrives as (a merge, a close,
/// a button, a re-run; a wake with no payload asks it to read its row).
pub const RELEASE_EVENT: &str = "release-decision";
/// The wait for it (each round after the first is `release approval#2`).
pub const RELEASE_WAIT: &str = "release approval";

/// Every wait of every run that a person decides: what the dashboard lists
/// as waiting approvals. A run that adds one adds it here.
pub const HUMAN_WAITS: [HumanWait; 3] = [
    HumanWait {
        wait: CONFIRM_WAIT,
        event_type: CONFIRM_EVENT,
        decider: Decider::Operator,
    },
    HumanWait {
        wait: APPROVAL_WAIT,
        event_type: CHECK_ACTION_EVENT,
        decider: Decider::GitHubWriteAccess,
    },
    HumanWait {
        wait: RELEASE_WAIT,
        event_type: RELEASE_EVENT,
        decider: Decider::ReleaseApprovers,
    },
];

/// Whether events of `event_type` may come only from GitHub's webhook
/// (a wait a person decides on GitHub): the API refuses to send them, so
/// an operator cannot press a button in a decider's name.
pub fn github_only(event_type: &str) -> bool {
    HUMAN_WAITS
        .iter()
        .any(|w| w.event_type == event_type && w.decider != Decider::Operator)
}

/// The name of the approval wait (each round after the first is
/// `approval#2`, ...).
pub const APPROVAL_WAIT: &str = "approval";

/// The human wait a journaled wait name is a round of (`approval#3` is
/// `approval`'s).
pub fn human_wait_of(step_name: &str) -> Option<&'static HumanWait> {
    let base = step_name.split_once('#').map_or(step_name, |(b, _)| b);
    HUMAN_WAITS.iter().find(|w| w.wait == base)
}
