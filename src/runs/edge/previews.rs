//! Pull-request events to preview instances (issue 24), added by
//! `edge::triggers::plan` to what it plans for the same event: a head
//! (opened, synchronize, reopened, ready for review; not a draft) adds a
//! `preview` of it; a close adds a `preview-teardown`. Whether the
//! repository has `[preview]` is the run's to read (on the default branch),
//! as a check reads `[check]`.
//!
//! Keys (ADR-0001 rule 1, docs/adr/0001-durable-execution-scope.md):
//! `preview:<repo>:pr<n>:<sha12>:<arrival>`, the arrival naming the event
//! (`opened`, `s<before12>` for a push, `reopened-<s>`, `ready-<s>`), so a
//! redelivery is the same instance and a head pushed again later a new
//! one; `preview-teardown:<repo>:pr<n>:closed-<closed at, s>`, which the
//! sweep's reconcile builds the same way from GitHub's `closed_at`, so the
//! webhook's teardown and the sweep's are one instance.

use crate::engine::CreateRequest;
use crate::github::webhook::PullRequestEvent;

use crate::runs::kit::inputs::PullNumber;
use crate::runs::kit::key::short;
use crate::runs::kit::preview::{preview_request, teardown_request, PreviewInput, TeardownInput};

/// Pull-request actions that bring a head to preview.
const PREVIEW_ACTIONS: [&str; 4] = ["opened", "synchronize", "reopened", "ready_for_review"];

/// The preview instance a pull-request event starts, if any.
pub fn plan_preview(pr: &PullRequestEvent) -> Option<CreateRequest> {
    let number = PullNumber::new(pr.number)?;
    let head = &pr.pull_request.head;
    if !valid_sha(&head.sha) {
        return None;
    }
    if pr.action == "closed" {
        let closed_ms = pr.pull_request.decided_ms().or_else(|| updated_ms(pr))?;
        return Some(teardown_request(
            &TeardownInput {
                repo: pr.repository.full_name.clone(),
                pr: number,
                installation_id: pr.installation.id,
                sha: head.sha.clone(),
                head_branch: head.name.clone(),
                default_branch: default_branch(pr),
                why: "closed".into(),
            },
            closed_ms,
        ));
    }
    if !PREVIEW_ACTIONS.contains(&pr.action.as_str()) || pr.pull_request.draft {
        return None;
    }
    let arrival = arrival_of(pr)?;
    let fork = head
        .repo
        .as_ref()
        .is_none_or(|r| !r.full_name.eq_ignore_ascii_case(&pr.repository.full_name));
    let input = PreviewInput {
        repo: pr.repository.full_name.clone(),
        pr: number,
        sha: head.sha.clone(),
        head_branch: head.name.clone(),
        installation_id: pr.installation.id,
        default_branch: default_branch(pr),
        sender: pr.sender.login.clone(),
        fork,
    };
    Some(preview_request(&input, arrival))
}

fn valid_sha(sha: &str) -> bool {
    sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit())
}

fn default_branch(pr: &PullRequestEvent) -> String {
    pr.repository
        .default_branch
        .clone()
        .unwrap_or_else(|| "main".into())
}

fn updated_ms(pr: &PullRequestEvent) -> Option<i64> {
    pr.pull_request
        .updated_at
        .as_deref()
        .and_then(crate::github::client::parse_rfc3339_ms)
}

/// What names this arrival of a head (see the module's keys).
fn arrival_of(pr: &PullRequestEvent) -> Option<String> {
    match pr.action.as_str() {
        "opened" => Some("opened".into()),
        "synchronize" => Some(match pr.before.as_deref().filter(|b| valid_sha(b)) {
            Some(before) => format!("s{}", short(before)),
            None => format!("s{}", updated_ms(pr)? / 1000),
        }),
        "reopened" => Some(format!("reopened-{}", updated_ms(pr)? / 1000)),
        _ => Some(format!("ready-{}", updated_ms(pr)? / 1000)),
    }
}
