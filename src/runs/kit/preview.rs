//! What the preview runs share with the edge that plans them (issue 24):
//! their inputs, the names they use (the serial group, the GitHub
//! environment, the comment's marker) and the preview lane's queue policy.
//! A pull request's preview is an entity lifecycle (ADR-0001 rule 4,
//! docs/adr/0001-durable-execution-scope.md): a short instance per event,
//! the state in GitHub and in the `previews` index.

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::config::{PreviewConfig, QueueConfig};
use super::inputs::{DeployInput, PullNumber};
use super::key::{InstanceKey, Subject};
use crate::engine::CreateRequest;
use crate::gates::policy::QueuePolicy;
use crate::limits::QUEUE_POLICY_MS_MAX;

/// The runs' names (`Run::NAME`): here, so the edge, the sweep and the
/// reconcile run name them alike.
pub const PREVIEW_RUN: &str = "preview";
pub const TEARDOWN_RUN: &str = "preview-teardown";
pub const RECONCILE_RUN: &str = "preview-reconcile";

/// The check run a preview reports through.
pub const PREVIEW_CHECK_NAME: &str = "sluice/preview";
/// The payload key of the event a newer preview sends an unconfirmed one
/// (`approval::CONFIRM_EVENT` with `{"superseded_by": <sha>}`): an
/// operator's confirmation carries no such key.
pub const SUPERSEDED_BY: &str = "superseded_by";

/// What a `preview` instance needs: a pull request's head to deploy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreviewInput {
    pub repo: String,
    pub pr: PullNumber,
    pub sha: String,
    /// The pull request's head branch (in `repo` unless `fork`): its head
    /// is re-read as the current revision, and the environment's
    /// `branches` are matched against it.
    pub head_branch: String,
    pub installation_id: u64,
    /// Where `[preview]` is read.
    pub default_branch: String,
    #[serde(default)]
    pub sender: String,
    /// The head is in another repository: no preview, no secret.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fork: bool,
}

/// What a `preview-teardown` instance needs: a closed pull request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeardownInput {
    pub repo: String,
    pub pr: PullNumber,
    pub installation_id: u64,
    /// The commit checked out to run `teardown`: the pull request's last
    /// head (its branch may be deleted with the merge).
    pub sha: String,
    pub head_branch: String,
    pub default_branch: String,
    /// Why, as the pull request's comment says it ("this pull request
    /// was closed", ...).
    pub why: String,
    /// Torn down by the per-repository cap (`PREVIEW_LIVE_PER_REPO_MAX`)
    /// while its pull request is open: no reopen check.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub evicted: bool,
    /// The head is in a fork: it never had a preview, and its code never
    /// runs a teardown with the environment's secrets.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fork: bool,
}

/// Live previews one repository keeps at most. Each is a running
/// deployment somewhere that costs money until torn down; ten open pull
/// requests previewed at once is a busy team, and past it the least
/// recently updated is torn down (a push to it previews it again).
pub const PREVIEW_LIVE_PER_REPO_MAX: u32 = 10;
/// Previews one arrival evicts at most: normally one (the cap is passed by
/// one at a time); a lowered cap is caught up with over a few arrivals.
pub const PREVIEW_EVICTIONS_PER_ARRIVAL_MAX: u32 = 5;

/// The serial group of one pull request's previews: one preview deploy of
/// it at a time (ADR-0004's gate, docs/adr/0004-serialized-run-groups.md).
pub fn group_of(repo: &str, pr: PullNumber) -> String {
    format!("preview:{repo}:pr{pr}")
}

/// The GitHub environment of one pull request's previews.
pub fn environment_of(pr: PullNumber) -> String {
    format!("pr-{pr}")
}

/// The marker of the one comment a pull request's previews keep updated.
pub fn comment_marker(pr: PullNumber) -> String {
    format!("sluice-preview:pr{pr}")
}

/// The entity the index files a pull request's runs under.
pub fn entity_of(pr: PullNumber) -> String {
    format!("pr:{pr}")
}

/// The preview lane's queue policy (the queue-policy seed's preview rules):
/// a newer head supersedes every waiting preview of the pull request
/// (newest wins, `supersede_after` never applies); no queued timeout:
/// a waiter waits for the running preview of its own pull request, which
/// ends within its command's timeout or is taken over after
/// `HOLDER_STALE_MS`, so the bound is set past the run's ceiling, which
/// reaches first (`PREVIEW_QUEUED_TIMEOUT_MS`); the confirmation timeout
/// applies.
pub fn preview_policy(confirmation_timeout_ms: Option<i64>) -> QueuePolicy {
    QueuePolicy {
        supersede: true,
        queued_timeout_ms: PREVIEW_QUEUED_TIMEOUT_MS,
        supersede_after_ms: None,
        confirmation_timeout_ms,
    }
}

/// The queued "timeout" of a preview waiter: the longest the policy
/// allows, which no preview run lives to see (its ceiling after any
/// confirmation is `RUN_DURATION_MS_DEFAULT`), so the queued timeout never
/// applies to previews.
pub const PREVIEW_QUEUED_TIMEOUT_MS: i64 = QUEUE_POLICY_MS_MAX;
const _: () = assert!(crate::limits::RUN_DURATION_MS_DEFAULT < PREVIEW_QUEUED_TIMEOUT_MS);

impl PreviewInput {
    /// The preview as the deploy machinery sees it: a deploy of the head
    /// branch's commit; a fork's (a maintainer asked for that very commit,
    /// and its branch is not this repository's) is an explicit revision,
    /// whose head is not read.
    pub fn as_deploy(&self) -> DeployInput {
        DeployInput {
            repo: self.repo.clone(),
            branch: self.head_branch.clone(),
            sha: self.sha.clone(),
            installation_id: self.installation_id,
            default_branch: self.default_branch.clone(),
            sender: self.sender.clone(),
            imperative: self.fork,
            inputs: Default::default(),
            dispatch: None,
            needs_check: None,
        }
    }
}

/// `[preview]` as the deploy machinery sees it.
pub fn as_deploy_config(p: &PreviewConfig, head_branch: &str) -> super::config::DeployConfig {
    super::config::DeployConfig {
        branch: head_branch.to_owned(),
        command: p.command.clone(),
        environment: p.environment.clone(),
        secrets: None,
        label: None,
        timeout: p.timeout.clone(),
        confirm: p.confirm,
        queue: Some(QueueConfig {
            supersede: Some(true),
            queued_timeout: None,
            supersede_after: None,
            confirmation_timeout: p.confirmation_timeout.clone(),
        }),
        needs: Vec::new(),
    }
}

/// What a `preview-reconcile` instance needs: a preview the index holds
/// live, whose pull request GitHub may have closed without telling Sluice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReconcileInput {
    pub repo: String,
    pub pr: PullNumber,
    pub installation_id: u64,
    pub sha: String,
    pub head_branch: String,
    pub default_branch: String,
    /// The sweep's reconcile slot it was made in (`reconcile_request`).
    #[serde(default)]
    pub slot: i64,
    /// The index row says the head is in a fork: the teardown it starts
    /// gets no secret.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fork: bool,
}

fn request(
    run: &str,
    key: InstanceKey,
    repo: &str,
    pr: PullNumber,
    sha: &str,
    input: serde_json::Value,
) -> CreateRequest {
    CreateRequest {
        indexed: false,
        key: key.to_string(),
        run: run.into(),
        repo: Some(repo.to_owned()),
        entity: Some(entity_of(pr)),
        sha: Some(sha.to_owned()),
        input,
        max_steps: None,
        max_duration_ms: None,
    }
}

/// The creation of a `preview` instance of this arrival of a head.
pub fn preview_request(input: &PreviewInput, arrival: String) -> CreateRequest {
    let subject = Subject::Preview {
        pr: input.pr,
        sha: Some(input.sha.clone()),
        arrival,
    };
    let key = InstanceKey::new(PREVIEW_RUN, &input.repo, subject);
    request(
        PREVIEW_RUN,
        key,
        &input.repo,
        input.pr,
        &input.sha,
        json!(input),
    )
}

/// The creation of a `preview-teardown` instance for a pull request GitHub
/// closed at `closed_ms` (a redelivery is the same instance).
pub fn teardown_request(input: &TeardownInput, closed_ms: i64) -> CreateRequest {
    teardown_request_as(input, format!("closed-{}", closed_ms / 1000))
}

/// The sweep's teardown of a closed pull request whose preview is still
/// live, in its reconcile slot: a key of its own, since the close's own
/// teardown may have run already and found nothing live (the preview
/// arriving just after it). Teardowns check the index again holding the
/// group, so two keys of one close tear down once.
pub fn swept_teardown_request(input: &TeardownInput, closed_ms: i64, slot: &str) -> CreateRequest {
    teardown_request_as(input, format!("closed-{}-{slot}", closed_ms / 1000))
}

fn teardown_request_as(input: &TeardownInput, arrival: String) -> CreateRequest {
    let subject = Subject::Preview {
        pr: input.pr,
        sha: None,
        arrival,
    };
    let key = InstanceKey::new(TEARDOWN_RUN, &input.repo, subject);
    request(
        TEARDOWN_RUN,
        key,
        &input.repo,
        input.pr,
        &input.sha,
        json!(input),
    )
}

/// The creation of the teardown of a preview evicted by the cap: one per
/// evicted head (a replayed eviction starts nothing twice).
pub fn eviction_request(input: &TeardownInput) -> CreateRequest {
    let subject = Subject::Preview {
        pr: input.pr,
        sha: None,
        arrival: format!("capped-{}", super::key::short(&input.sha)),
    };
    let key = InstanceKey::new(TEARDOWN_RUN, &input.repo, subject);
    request(
        TEARDOWN_RUN,
        key,
        &input.repo,
        input.pr,
        &input.sha,
        json!(input),
    )
}

/// The teardown an operator asks for (the dashboard's Tear down) of a live
/// preview the index holds: one per head (pressing twice is one teardown),
/// torn down whether or not its pull request is open.
pub fn operator_teardown_request(
    row: &crate::store::previews::PreviewRow,
) -> Option<CreateRequest> {
    let pr = u64::try_from(row.pr).ok().and_then(PullNumber::new)?;
    let input = TeardownInput {
        repo: row.repo.clone(),
        pr,
        installation_id: u64::try_from(row.installation_id).ok()?,
        sha: row.sha.clone(),
        head_branch: row.head_branch.clone(),
        default_branch: row.default_branch.clone(),
        why: "an operator tore it down; push to it again to preview it again".into(),
        evicted: true,
        fork: row.is_fork(),
    };
    let subject = Subject::Preview {
        pr,
        sha: None,
        arrival: format!("operator-{}", super::key::short(&row.sha)),
    };
    let key = InstanceKey::new(TEARDOWN_RUN, &input.repo, subject);
    Some(request(
        TEARDOWN_RUN,
        key,
        &input.repo,
        pr,
        &input.sha,
        json!(input),
    ))
}

/// The creation of a `preview-reconcile` instance in the sweep's `slot`
/// (one per preview per reconcile interval).
pub fn reconcile_request(input: &ReconcileInput, slot: i64) -> CreateRequest {
    let input = &ReconcileInput {
        slot,
        ..input.clone()
    };
    let subject = Subject::Preview {
        pr: input.pr,
        sha: None,
        arrival: format!("check-{slot}"),
    };
    let key = InstanceKey::new(RECONCILE_RUN, &input.repo, subject);
    request(
        RECONCILE_RUN,
        key,
        &input.repo,
        input.pr,
        &input.sha,
        json!(input),
    )
}
