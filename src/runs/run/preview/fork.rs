//! A fork's pull request gets a preview only when a maintainer asks for
//! one, and then only into an environment that exports no secret: a
//! fork's code runs in the preview command, so it must never receive a
//! secret. The preview's check run shows **Preview**; someone with write
//! access presses it (a bounded human decision, ADR-0001 rule 3:
//! docs/adr/0001-durable-execution-scope.md, through `kit::approval`).

use crate::engine::{Ctx, RunError};
use crate::github::CheckAction as Button;
use crate::limits::{
    HUMAN_DECISION_WINDOW_MS_DEFAULT, RUN_DURATION_MS_DEFAULT, RUN_DURATION_MS_MAX,
};

use crate::runs::kit::approval::{self, Ask, Decided};
use crate::runs::kit::config::DeployConfig;
use crate::runs::kit::preview::PreviewInput;
use crate::runs::kit::report::{CheckTarget, Verdict};
use crate::runs::kit::tags::SkipTag;
use crate::runs::kit::RunEnv;

/// How long a fork's preview waits for a maintainer's **Preview**: the
/// bound of a human decision, as a first-time contributor's check.
pub const FORK_PREVIEW_WINDOW_MS: i64 = HUMAN_DECISION_WINDOW_MS_DEFAULT;
/// The button's identifier.
pub const PREVIEW_ACTION: &str = "preview";

// The run's ceiling covers the button's window, the longest confirmation
// window and the deploy itself.
const _: () = assert!(
    FORK_PREVIEW_WINDOW_MS + HUMAN_DECISION_WINDOW_MS_DEFAULT + RUN_DURATION_MS_DEFAULT
        <= RUN_DURATION_MS_MAX
);

/// Why a fork's pull request cannot be previewed at all: its environment
/// exports secrets. None: a maintainer may ask for one.
pub fn secrets_refusal(
    env: &RunEnv<'_>,
    deploy: &DeployConfig,
    input: &PreviewInput,
) -> Option<String> {
    let name = deploy.environment.as_deref()?;
    let granted = env
        .environments
        .grant(name, &input.repo, &input.head_branch)
        .ok()?;
    (!granted.secrets.is_empty()).then(|| {
        format!(
            "No preview: the head of #{} is in a fork, and environment `{name}` exports secrets, \
             which a fork's code must never receive. A maintainer can preview forks only with \
             an environment that exports none.",
            input.pr
        )
    })
}

/// Waits, bounded, for someone with write access to press **Preview**;
/// the verdict when nobody did.
pub async fn approved(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    target: &CheckTarget<'_>,
    check_run_id: u64,
) -> Result<Option<Verdict>, RunError> {
    let ask = Ask {
        check_run_id,
        title: "Waiting for a maintainer",
        summary: "This pull request comes from a fork. Its preview runs, with no secret, once \
                  someone with write access to the repository presses **Preview**."
            .into(),
        button: Button {
            label: "Preview",
            description: "Deploy this fork's head as a preview",
            identifier: PREVIEW_ACTION,
        },
        window_ms: FORK_PREVIEW_WINDOW_MS,
    };
    Ok(match approval::ask(ctx, env, target, &ask).await? {
        Decided::Approved { .. } => None,
        Decided::TimedOut => Some(Verdict::Skipped {
            reason: None,
            tag: SkipTag::RunSkipped,
            summary: format!(
                "No preview: nobody with write access asked for this fork's preview within {} \
                 hours.",
                FORK_PREVIEW_WINDOW_MS / 3_600_000
            ),
            newer: None,
        }),
    })
}
