//! Which events start which runs, and how each instance is named (the name
//! is the idempotency key: ADR-0001 rule 1).
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md)

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::engine::CreateRequest;
use crate::engine::InstanceId;
use crate::github::webhook::{
    Account, CheckRunEvent, CheckSuiteEvent, Event, MergeGroupEvent, PullRequestEvent, PushEvent,
    Repository, SuiteRef,
};

use crate::runs::kit::approval::RELEASE_EVENT;
use crate::runs::kit::inputs::{
    CacheScope, CancelChecksInput, CancelOf, CheckAction, CheckInput, Decision, DeployInput,
    NeededCheck, PullNumber, ReleaseInput, SchedulesInput, CHECK_ACTION_EVENT,
};
use crate::runs::kit::key::{short, Attempt, CancelScope, InstanceKey, Subject};
use crate::runs::kit::pipeline::JobsRerun;
use crate::runs::kit::Run;
use crate::runs::run::check::cancel::CancelChecksRun;
use crate::runs::run::check::{CheckRun, CHECK_RUN_NAME};
use crate::runs::run::deploy::DeployRun;
use crate::runs::run::release::{ReleaseNotesRun, BRANCH_PREFIX, RELEASE_CHECK_NAME};
use crate::runs::run::schedules::SchedulesRun;

use super::registry;

/// Pull request actions that mean "there is new code to check".
const CHECK_ACTIONS: [&str; 4] = ["opened", "synchronize", "reopened", "ready_for_review"];

#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A valid event Sluice does not act on, and why.
    Ignore(String),
    Create(Vec<CreateRequest>),
    /// Events for running instances: a button of their check run pressed.
    Send(Vec<EventSend>),
    /// Events for the instance an index names (`store::releases`): a
    /// release's decision, found by its pull request or check run. The
    /// webhook looks the instance up and starts none (ADR-0001 rule 4).
    Route(Vec<RoutedEvent>),
    /// Fresh attempts of runs that exist: resolved against the index at
    /// intake (`http::webhook::accept`), so a re-run repeats the very run
    /// it names (its input, its approval, its branch), never what a payload
    /// claims.
    Rerun(Vec<Rerun>),
}

/// Which index entry finds a routed event's instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteKey {
    Pull(u64),
    CheckRun(u64),
}

/// An event for whichever instance waits on `by` in `repo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoutedEvent {
    pub repo: String,
    pub by: RouteKey,
    pub event_type: String,
    pub payload: serde_json::Value,
    /// Who acted: routing bounds what one sender may send a wait.
    pub sender: String,
    /// When GitHub dated the decision (a pull request's merge or close,
    /// signed with the delivery), ms since the epoch; None for a press,
    /// which has no date.
    pub dated_ms: Option<i64>,
}

/// One re-run asked for by a `rerequested` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rerun {
    pub of: RerunOf,
    /// `rerun-cr<check run>-<suite updated, s>` or `rerun-cs<suite>-<…>`:
    /// from what the signature covers, so a redelivery, and a captured body
    /// posted again under any delivery id, is the same attempt; a new press
    /// (GitHub resets the suite, moving `updated_at`) is another.
    pub attempt: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum RerunOf {
    /// The instance a check run reported (its `external_id`).
    Instance(String),
    /// Every Sluice run of a commit (a check suite's Re-run all).
    Commit { repo: String, sha: String },
}

/// What a re-run is made from: an existing instance's index row.
pub struct RerunSource<'a> {
    pub key: &'a str,
    pub run: &'a str,
    pub input_json: &'a str,
    pub repo: Option<&'a str>,
    pub entity: Option<&'a str>,
    pub sha: Option<&'a str>,
}

pub use crate::runs::kit::key::base_key;

/// A fresh attempt of `source` (a run whose `Run::RERUNNABLE` is set; no
/// other is re-run from GitHub): the same input under `<base key>:<attempt>`,
/// a deploy's as a new arrival (`as_new_arrival`).
pub fn rerun_create(source: &RerunSource<'_>, attempt: &str) -> Option<CreateRequest> {
    let name = registry::rerunnable(source.run)?;
    let attempt = Attempt::parse(attempt)?;
    let input = if name == DeployRun::NAME {
        as_new_arrival(source.input_json)?
    } else {
        serde_json::from_str(source.input_json).ok()?
    };
    let key = InstanceKey::parse(source.key)?.with_attempt(Some(attempt));
    Some(CreateRequest {
        indexed: false,
        key: key.to_string(),
        run: name.as_str().into(),
        input,
        repo: source.repo.map(str::to_owned),
        entity: source.entity.map(str::to_owned),
        sha: source.sha.map(str::to_owned),
        max_steps: None,
        max_duration_ms: None,
    })
}

/// A re-run of a commit's pipeline: as `rerun_create`, the check told which
/// jobs to run again and which attempt's results the others keep.
pub fn pipeline_rerun_create(
    source: &RerunSource<'_>,
    attempt: &str,
    rerun: Option<&JobsRerun>,
) -> Option<CreateRequest> {
    let mut create = rerun_create(source, attempt)?;
    if let Some(rerun) = rerun.filter(|_| create.run == CheckRun::NAME.as_str()) {
        create.input["rerun"] = serde_json::json!(rerun);
    }
    Some(create)
}

/// The commit's check that started a pipeline unit, and the unit's job:
/// a Re-run pressed on a unit's check run re-runs that job through its
/// parent, so the jobs that need it run again too.
pub fn unit_of(run: &str, input_json: &str) -> Option<(String, String)> {
    if run != CheckRun::NAME.as_str() {
        return None;
    }
    let input: CheckInput = serde_json::from_str(input_json).ok()?;
    Some((input.wakes?, input.job?.job))
}

/// A deploy's re-run is a new arrival of its commit, never imperative
/// (whatever the run it repeats was): it queues as a desired-state deploy,
/// head-checked when it arrives and when it is dequeued, so it deploys only
/// while that commit is the branch's head. Pressing Re-run on a dispatched
/// rollback's check run therefore rolls nothing back once the branch moved
/// on; a rollback is asked for again through dispatch, which proves who
/// asks.
fn as_new_arrival(input_json: &str) -> Option<serde_json::Value> {
    let mut input: DeployInput = serde_json::from_str(input_json).ok()?;
    input.imperative = false;
    serde_json::to_value(input).ok()
}

/// An event for an instance, decided at the edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventSend {
    pub instance_id: String,
    pub event_type: String,
    pub payload: serde_json::Value,
}

/// `author_association` values of someone who never contributed.
const FIRST_TIME_ASSOCIATIONS: [&str; 3] = ["FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE"];

/// A pull request from a fork by someone who never contributed to the
/// repository: its code runs only once a maintainer approves it.
fn needs_approval(pr: &PullRequestEvent) -> bool {
    let from_fork = from_fork(pr);
    let first_time = pr
        .pull_request
        .author_association
        .as_deref()
        .is_none_or(|a| FIRST_TIME_ASSOCIATIONS.contains(&a));
    from_fork && first_time
}

/// Whether the pull request's head is in another repository (or one
/// GitHub no longer names: a deleted fork).
fn from_fork(pr: &PullRequestEvent) -> bool {
    pr.pull_request
        .head
        .repo
        .as_ref()
        .is_none_or(|r| !r.full_name.eq_ignore_ascii_case(&pr.repository.full_name))
}

/// What planning knows besides the event: who Sluice is on GitHub. (The
/// delivery id is not part of any plan: the signature does not cover it.)
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanContext<'a> {
    /// The App's id: only its own check runs are re-run or pressed.
    pub app_id: Option<&'a str>,
    /// The App's slug (`GITHUB_APP_SLUG`): events its bot user
    /// (`<slug>[bot]`) causes start nothing, so Sluice never loops on itself.
    pub app_slug: Option<&'a str>,
}

pub fn plan(event: &Event, cx: &PlanContext<'_>) -> Plan {
    if let Some(sender) = sender_of(event).filter(|s| is_own_bot(s, cx)) {
        return Plan::Ignore(format!("caused by Sluice's own App ({sender})"));
    }
    match event {
        Event::PullRequest(pr) => with_previews(pr, plan_pull_request(pr)),
        Event::Push(push) => plan_push(push),
        Event::CheckRun(run) => plan_check_run(run, cx),
        Event::CheckSuite(suite) => plan_check_suite(suite, cx),
        Event::MergeGroup(group) => plan_merge_group(group),
        Event::Ping => Plan::Ignore("ping".into()),
        Event::Other(name) => Plan::Ignore(format!("{name} events start no run")),
    }
}

/// `plan` with the preview instance a pull-request event adds
/// (`edge::previews`: a head to preview, a close to tear down).
fn with_previews(pr: &PullRequestEvent, plan: Plan) -> Plan {
    match (super::previews::plan_preview(pr), plan) {
        (Some(create), Plan::Create(mut creates)) => {
            creates.push(create);
            Plan::Create(creates)
        }
        (Some(create), Plan::Ignore(_)) => Plan::Create(vec![create]),
        (_, plan) => plan,
    }
}

fn sender_of(event: &Event) -> Option<&str> {
    match event {
        Event::PullRequest(e) => Some(&e.sender.login),
        Event::Push(e) => Some(&e.sender.login),
        Event::CheckRun(e) => Some(&e.sender.login),
        Event::CheckSuite(e) => Some(&e.sender.login),
        Event::MergeGroup(e) => Some(&e.sender.login),
        Event::Ping | Event::Other(_) => None,
    }
}

/// Whether `login` is the App's own bot user, `<slug>[bot]`.
fn is_own_bot(login: &str, cx: &PlanContext<'_>) -> bool {
    let Some(slug) = cx.app_slug.filter(|s| !s.is_empty()) else {
        return false;
    };
    login
        .strip_suffix("[bot]")
        .is_some_and(|name| name.eq_ignore_ascii_case(slug))
}

/// A pressed button of a Sluice check run goes to the instance its
/// external id names; a re-run starts a fresh attempt; the rest (the
/// created and completed events of Sluice's own check runs) starts nothing.
fn plan_check_run(run: &CheckRunEvent, cx: &PlanContext<'_>) -> Plan {
    if !is_ours(run.check_run.app.as_ref().map(|a| a.id), cx) {
        return Plan::Ignore("a check run of another App".into());
    }
    if run.check_run.name.as_deref() == Some(RELEASE_CHECK_NAME) {
        return plan_release_check_run(run);
    }
    if run.action == "rerequested" {
        return plan_rerun(run);
    }
    let (Some(action), "requested_action") = (&run.requested_action, run.action.as_str()) else {
        return Plan::Ignore(format!("check_run action {:?} starts no run", run.action));
    };
    let Some(instance) = run
        .check_run
        .external_id
        .as_deref()
        .and_then(|id| InstanceId::parse(id).ok())
    else {
        return Plan::Ignore("the check run names no Sluice instance".into());
    };
    let payload = CheckAction {
        check_run_id: run.check_run.id,
        identifier: action.identifier.clone(),
        sender: run.sender.login.clone(),
    };
    Plan::Send(vec![EventSend {
        instance_id: instance.as_str().to_owned(),
        event_type: CHECK_ACTION_EVENT.into(),
        payload: json!(payload),
    }])
}

/// A button or Re-run of a release's check run: a decision for the
/// instance waiting on that check run.
fn plan_release_check_run(run: &CheckRunEvent) -> Plan {
    let sender = run.sender.login.clone();
    let check_run_id = run.check_run.id;
    let decision = match (run.action.as_str(), &run.requested_action) {
        ("requested_action", Some(a)) => Decision::Button {
            check_run_id,
            identifier: a.identifier.clone(),
            sender,
        },
        ("rerequested", _) => Decision::Replan {
            check_run_id,
            sender,
        },
        (other, _) => {
            return Plan::Ignore(format!("check_run action {other:?} decides no release"))
        }
    };
    Plan::Route(vec![RoutedEvent {
        repo: run.repository.full_name.clone(),
        by: RouteKey::CheckRun(check_run_id),
        event_type: RELEASE_EVENT.into(),
        payload: json!(decision),
        sender: run.sender.login.clone(),
        dated_ms: None,
    }])
}

/// A release's approval pull request closed (merged or not): a decision
/// for the instance waiting on it.
fn plan_release_pull(pr: &PullRequestEvent) -> Plan {
    let decided_ms = pr.pull_request.decided_ms();
    let decision = Decision::PullClosed {
        number: pr.number,
        merged: pr.pull_request.merged,
        sender: pr.sender.login.clone(),
        head_sha: Some(pr.pull_request.head.sha.clone()),
        decided_ms,
    };
    Plan::Route(vec![RoutedEvent {
        repo: pr.repository.full_name.clone(),
        by: RouteKey::Pull(pr.number),
        event_type: RELEASE_EVENT.into(),
        payload: json!(decision),
        sender: pr.sender.login.clone(),
        dated_ms: decided_ms,
    }])
}

/// Whether a check run (or suite) is this App's: without a configured App
/// id, whatever GitHub sent to this App's webhook.
fn is_ours(app_id: Option<u64>, cx: &PlanContext<'_>) -> bool {
    match (cx.app_id, app_id) {
        (Some(mine), Some(theirs)) => mine == theirs.to_string(),
        (Some(_), None) => false,
        (None, _) => true,
    }
}

/// The identity of one re-run, from what the signature covers: what was
/// rerequested (`cr<check run id>` or `cs<suite id>`) and the suite's
/// `updated_at`, which GitHub moves when it resets the suite for the
/// request. A redelivery, or a captured body posted under a new delivery
/// id, names the same attempt and so the same instances; a new press moves
/// `updated_at` and is another. Without `updated_at` (GitHub always sends
/// it) the thing rerequested is re-run at most once.
fn rerun_attempt(what: &str, suite: Option<&SuiteRef>) -> String {
    let attempt = Attempt::Rerun(match suite.and_then(SuiteRef::updated_ms) {
        Some(ms) => format!("{what}-{}", ms.div_euclid(1_000)),
        None => what.to_owned(),
    });
    attempt.to_string()
}

/// `check_run` `rerequested` (the Re-run button): a fresh attempt of the
/// instance its Sluice check run reported.
fn plan_rerun(run: &CheckRunEvent) -> Plan {
    match run.check_run.name.as_deref() {
        Some(name) if registry::rerunnable_by_check_run(name) => {}
        other => return Plan::Ignore(format!("check run {other:?} is not Sluice's")),
    }
    match run
        .check_run
        .external_id
        .as_deref()
        .filter(|id| InstanceId::parse(id).is_ok())
    {
        Some(id) => Plan::Rerun(vec![Rerun {
            of: RerunOf::Instance(id.to_owned()),
            attempt: rerun_attempt(
                &format!("cr{}", run.check_run.id),
                run.check_run.check_suite.as_ref(),
            ),
        }]),
        None => Plan::Ignore("the check run names no Sluice instance".into()),
    }
}

/// `check_suite`: `requested` (a new suite after a push) starts nothing,
/// since `pull_request` and `push` start the runs; `rerequested` (Re-run
/// all) re-runs every Sluice run of the suite's commit.
fn plan_check_suite(suite: &CheckSuiteEvent, cx: &PlanContext<'_>) -> Plan {
    if !is_ours(suite.check_suite.app.as_ref().map(|a| a.id), cx) {
        return Plan::Ignore("a check suite of another App".into());
    }
    if suite.action != "rerequested" {
        return Plan::Ignore(format!(
            "check_suite {:?}: pull_request and push start the runs",
            suite.action
        ));
    }
    let sha = suite
        .check_suite
        .head_sha
        .as_deref()
        .unwrap_or_default()
        .to_ascii_lowercase();
    if !valid_sha(&sha) {
        return Plan::Ignore("the suite names no commit".into());
    }
    let Some(suite_id) = suite.check_suite.id else {
        return Plan::Ignore("the suite has no id".into());
    };
    Plan::Rerun(vec![Rerun {
        of: RerunOf::Commit {
            repo: suite.repository.full_name.clone(),
            sha,
        },
        attempt: rerun_attempt(&format!("cs{suite_id}"), Some(&suite.check_suite)),
    }])
}

/// What every planned run is about.
pub(crate) struct RunTarget<'a> {
    pub repo: &'a str,
    /// Where a deploy's policy is read; a deploy needs it.
    pub default_branch: Option<&'a str>,
    pub installation_id: u64,
    pub sha: &'a str,
    pub sender: &'a str,
}

impl<'a> RunTarget<'a> {
    fn of(
        repository: &'a Repository,
        installation_id: u64,
        sha: &'a str,
        sender: &'a Account,
    ) -> Self {
        RunTarget {
            repo: &repository.full_name,
            default_branch: repository.default_branch.as_deref(),
            installation_id,
            sha,
            sender: &sender.login,
        }
    }
}

/// A check of pull request `number` (none for a dispatch's or a
/// schedule's) at `at.sha`; None when the sha is not a commit id.
/// `attempt` names a re-run or a schedule's slot. Two pull requests at one
/// commit are two checks (`kit::key`): a fork's pull request opened at a
/// maintainer's commit neither shares nor, superseded, cancels the
/// maintainer's.
pub(crate) fn check_request(
    at: &RunTarget<'_>,
    number: Option<PullNumber>,
    needs_approval: bool,
    attempt: Option<Attempt>,
) -> Option<CreateRequest> {
    let input = check_input(at, number, needs_approval)?;
    Some(check_request_of(input, attempt))
}

/// A check's input at `at.sha`; None when the sha is not a commit id.
fn check_input(
    at: &RunTarget<'_>,
    number: Option<PullNumber>,
    needs_approval: bool,
) -> Option<CheckInput> {
    Some(CheckInput {
        repo: at.repo.to_owned(),
        sha: commit_id(at.sha)?,
        installation_id: at.installation_id,
        pr_number: number,
        needs_approval,
        sender: at.sender.to_owned(),
        inputs: BTreeMap::new(),
        merge_group: None,
        base_sha: None,
        wakes: None,
        job: None,
        spec: None,
        rerun: None,
        artifacts_from: Vec::new(),
        cache_scope: None,
    })
}

/// The creation of a check with `input`, keyed by its commit and pull
/// request (`kit::key`).
fn check_request_of(input: CheckInput, attempt: Option<Attempt>) -> CreateRequest {
    let subject = Subject::Check {
        sha: input.sha.clone(),
        pr: input.pr_number,
        job: None,
    };
    let key = InstanceKey::new(CheckRun::NAME.as_str(), &input.repo, subject).with_attempt(attempt);
    CreateRequest {
        indexed: false,
        key: key.to_string(),
        run: CheckRun::NAME.as_str().into(),
        repo: Some(input.repo.clone()),
        entity: Some(input.entity()),
        sha: Some(input.sha.clone()),
        input: json!(input),
        max_steps: None,
        max_duration_ms: None,
    }
}

/// A deploy of `at.sha` pushed to `branch`; `before` is the push's (a
/// rollback is a new deploy), `attempt` names a re-run or a slot. None
/// without a commit id or a default branch to read the policy on.
pub(crate) fn deploy_request(
    at: &RunTarget<'_>,
    branch: &str,
    before: Option<&str>,
    attempt: Option<Attempt>,
) -> Option<CreateRequest> {
    let sha = at.sha.to_ascii_lowercase();
    if !valid_sha(&sha) || sha.bytes().all(|b| b == b'0') {
        return None;
    }
    let default_branch = at.default_branch?.to_owned();
    let repo = at.repo.to_owned();
    let input = DeployInput {
        repo: repo.clone(),
        branch: branch.to_owned(),
        sha: sha.clone(),
        installation_id: at.installation_id,
        default_branch,
        sender: at.sender.to_owned(),
        imperative: false,
        inputs: BTreeMap::new(),
        dispatch: None,
        needs_check: needed_check(at, branch).map(Box::new),
    };
    let subject = Subject::Deploy {
        branch: branch.to_owned(),
        sha: sha.clone(),
        before: before.map(str::to_owned),
    };
    let key = InstanceKey::new(DeployRun::NAME.as_str(), &repo, subject).with_attempt(attempt);
    Some(CreateRequest {
        indexed: false,
        key: key.to_string(),
        run: DeployRun::NAME.as_str().into(),
        input: json!(input),
        repo: Some(repo),
        entity: Some(format!("branch:{branch}")),
        sha: Some(sha),
        max_steps: None,
        max_duration_ms: None,
    })
}

/// `sha` as a lowercase commit id, if it is one.
fn commit_id(sha: &str) -> Option<String> {
    let sha = sha.to_ascii_lowercase();
    valid_sha(&sha).then_some(sha)
}

/// The check a deploy of `at.sha` pushed to `branch` starts when its
/// `[deploy] needs` it: the commit's branch check (no pull request; the same
/// key a merge queue group's check of that commit has, so a group's check
/// that passed is taken as it is).
fn needed_check(at: &RunTarget<'_>, branch: &str) -> Option<NeededCheck> {
    let mut create = check_request(at, None, false, None)?;
    create.entity = Some(format!("branch:{branch}"));
    create.input["cache_scope"] = json!(CacheScope::push(branch, at.default_branch));
    Some(NeededCheck {
        create,
        check_run: CHECK_RUN_NAME.to_owned(),
    })
}

fn valid_sha(sha: &str) -> bool {
    sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit())
}

fn plan_pull_request(pr: &PullRequestEvent) -> Plan {
    if pr.action == "closed" && pr.pull_request.head.name.starts_with(BRANCH_PREFIX) {
        return plan_release_pull(pr);
    }
    if pr.action == "closed" {
        return plan_closed_pull(pr);
    }
    if !CHECK_ACTIONS.contains(&pr.action.as_str()) && !retargeted(pr) {
        return Plan::Ignore(format!("pull_request action {:?} starts no run", pr.action));
    }
    if pr.pull_request.draft {
        return Plan::Ignore("draft pull request".into());
    }
    // Bots are treated like users (a Dependabot pull request gets its
    // check); a repository skips the ones it names (`ignore_bots`).
    let at = RunTarget::of(
        &pr.repository,
        pr.installation.id,
        &pr.pull_request.head.sha,
        &pr.sender,
    );
    match check_input(&at, PullNumber::new(pr.number), needs_approval(pr)) {
        Some(mut input) => {
            input.base_sha = commit_id(&pr.pull_request.base.sha);
            input.cache_scope = Some(CacheScope::pull(
                pr.number,
                from_fork(pr),
                at.default_branch,
            ));
            Plan::Create(vec![check_request_of(input, reopen_attempt(pr))])
        }
        None => Plan::Ignore(format!(
            "head sha {:?} is not a commit id",
            pr.pull_request.head.sha
        )),
    }
}

/// `merge_group`: the queue's commit gets the repository's check as a pull
/// request's head does, so a required `sluice/check` never stalls GitHub's
/// merge queue. Nothing needs approval: only pull requests that passed the
/// branch's rules are queued. `destroyed` starts nothing: a check that has
/// not started finds the group's branch gone and skips (`runs::run::check`).
fn plan_merge_group(group: &MergeGroupEvent) -> Plan {
    let Some(branch) = group.merge_group.head_ref.strip_prefix("refs/heads/") else {
        return Plan::Ignore(format!(
            "merge group ref {:?} is not a branch",
            group.merge_group.head_ref
        ));
    };
    match group.action.as_str() {
        "checks_requested" => {}
        // A merged group's commit is its base branch's now: its check goes
        // on (a deploy of that commit may need it).
        "destroyed" if group.reason.as_deref() == Some("merged") => {
            return Plan::Ignore("merge group merged: its check goes on".into());
        }
        "destroyed" => {
            let Some(sha) = commit_id(&group.merge_group.head_sha) else {
                return Plan::Ignore("merge group head sha is not a commit id".into());
            };
            let when = format!("destroyed-{}", short(&sha));
            let of = CancelOf::Group {
                branch: branch.to_owned(),
                reason: group.reason.clone(),
                sha,
            };
            let scope = CancelScope::Group(branch.to_owned());
            let (repo, installation) = (&group.repository.full_name, group.installation.id);
            return Plan::Create(vec![cancel_request(repo, installation, of, scope, when)]);
        }
        other => return Plan::Ignore(format!("merge_group action {other:?} starts no run")),
    }
    let at = RunTarget::of(
        &group.repository,
        group.installation.id,
        &group.merge_group.head_sha,
        &group.sender,
    );
    let Some(mut input) = check_input(&at, None, false) else {
        return Plan::Ignore(format!(
            "merge group head sha {:?} is not a commit id",
            group.merge_group.head_sha
        ));
    };
    input.merge_group = Some(branch.to_owned());
    input.cache_scope = Some(CacheScope::merge_group(at.default_branch));
    input.base_sha = group.merge_group.base_sha.as_deref().and_then(commit_id);
    Plan::Create(vec![check_request_of(input, None)])
}

/// A reopened pull request's check is a new attempt (named by when GitHub
/// reopened it, so a redelivery is the same one): closing may have
/// cancelled the check of that very head, which would otherwise stand. So is
/// a retargeted one's: a paths skip against the old base must not stand.
fn reopen_attempt(pr: &PullRequestEvent) -> Option<Attempt> {
    let what = match pr.action.as_str() {
        "reopened" => "reopened",
        _ if retargeted(pr) => "retargeted",
        _ => return None,
    };
    let at_ms = (pr.pull_request.updated_at.as_deref())
        .and_then(crate::github::client::parse_rfc3339_ms)?;
    Some(Attempt::Rerun(format!("{what}-{}", at_ms / 1000)))
}

/// An `edited` pull request whose base branch changed: what it changes
/// (and so its `[check] paths`) is judged against the new base, as a new
/// attempt of its check.
fn retargeted(pr: &PullRequestEvent) -> bool {
    pr.action == "edited" && pr.changes.as_ref().is_some_and(|c| c.get("base").is_some())
}

/// A closed pull request (merged or not) ends its live checks: a
/// `cancel-checks` instance per close, named by when GitHub closed it, so a
/// redelivery is the same instance and a close after a reopen another.
fn plan_closed_pull(pr: &PullRequestEvent) -> Plan {
    let closed_ms = pr.pull_request.decided_ms().or_else(|| {
        (pr.pull_request.updated_at.as_deref()).and_then(crate::github::client::parse_rfc3339_ms)
    });
    let (Some(number), Some(closed_ms)) = (PullNumber::new(pr.number), closed_ms) else {
        return Plan::Ignore("closed pull request without a number or a close date".into());
    };
    let of = CancelOf::Pull { number };
    let when = format!("closed-{}", closed_ms / 1000);
    Plan::Create(vec![cancel_request(
        &pr.repository.full_name,
        pr.installation.id,
        of,
        CancelScope::Pull(number),
        when,
    )])
}

/// The creation of a `cancel-checks` instance for `of`.
fn cancel_request(
    repo: &str,
    installation_id: u64,
    of: CancelOf,
    scope: CancelScope,
    when: String,
) -> CreateRequest {
    let key = InstanceKey::new(
        CancelChecksRun::NAME.as_str(),
        repo,
        Subject::Cancel { of: scope, when },
    );
    let input = CancelChecksInput {
        repo: repo.to_owned(),
        installation_id,
        of,
    };
    CreateRequest {
        indexed: false,
        key: key.to_string(),
        run: CancelChecksRun::NAME.as_str().into(),
        repo: Some(repo.to_owned()),
        entity: Some(input.of.entity()),
        sha: None,
        input: json!(input),
        max_steps: None,
        max_duration_ms: None,
    }
}

fn plan_push(push: &PushEvent) -> Plan {
    if let Some(tag) = push.git_ref.strip_prefix("refs/tags/") {
        return plan_tag(push, tag);
    }
    let Some(branch) = push.git_ref.strip_prefix("refs/heads/") else {
        return Plan::Ignore(format!("push to {} (not a branch or a tag)", push.git_ref));
    };
    if push.deleted {
        return Plan::Ignore(format!("branch {branch} was deleted"));
    }
    if push.repository.default_branch.is_none() {
        // GitHub always sends it; without it no deploy policy can be read.
        return Plan::Ignore("push without repository.default_branch".into());
    }
    let at = RunTarget::of(
        &push.repository,
        push.installation.id,
        &push.after,
        &push.sender,
    );
    // `before` is part of the identity: pushing an older commit back (a
    // rollback) is a new deploy, while a redelivery is the same one.
    let Some(deploy) = deploy_request(&at, branch, Some(&push.before), None) else {
        return Plan::Ignore(format!("after {:?} is not a commit id", push.after));
    };
    let mut creates = vec![deploy];
    // A push to the default branch may change its `[[schedule]]`.
    if push.repository.default_branch.as_deref() == Some(branch) {
        creates.extend(schedules_create(&at, &push.before));
    }
    Plan::Create(creates)
}

/// A pushed tag: a `release-notes` instance, which reads whether the tag
/// is one `[release_notes] tags` selects on the default branch. The commit
/// is the push's `head_commit` (an annotated tag's `after` is the tag
/// object). One push, one instance: the push's identity is what the
/// signature covers (`push_identity`), so pushing a tag again (at another
/// commit, or at the same one after a release ended) asks again, while a
/// redelivery, or the same body posted under another delivery id, is the
/// same push.
fn plan_tag(push: &PushEvent, tag: &str) -> Plan {
    if push.deleted {
        return Plan::Ignore(format!("tag {tag} was deleted"));
    }
    let Some(default_branch) = push.repository.default_branch.clone() else {
        return Plan::Ignore("push without repository.default_branch".into());
    };
    let sha = push
        .head_commit
        .as_ref()
        .map_or(push.after.as_str(), |c| c.id.as_str())
        .to_ascii_lowercase();
    if !valid_sha(&sha) || tag.is_empty() {
        return Plan::Ignore(format!("tag {tag:?} names no commit id"));
    }
    let repo = push.repository.full_name.clone();
    let input = ReleaseInput {
        repo: repo.clone(),
        tag: tag.to_owned(),
        sha: sha.clone(),
        installation_id: push.installation.id,
        default_branch,
        sender: push.sender.login.clone(),
    };
    let subject = Subject::Release {
        tag: tag.to_owned(),
        sha: sha.clone(),
        push: push_identity(push),
    };
    Plan::Create(vec![CreateRequest {
        indexed: false,
        key: InstanceKey::new(ReleaseNotesRun::NAME.as_str(), &repo, subject).to_string(),
        run: ReleaseNotesRun::NAME.as_str().into(),
        input: json!(input),
        repo: Some(repo),
        entity: Some(format!("tag:{tag}")),
        sha: Some(sha),
        max_steps: None,
        max_duration_ms: None,
    }])
}

/// One push of a ref as its signed body names it: the object pushed (a new
/// tag object each time for an annotated tag) and when (`pushed_at`, Unix
/// seconds in a push event), never the delivery id, which the signature
/// does not cover.
fn push_identity(push: &PushEvent) -> String {
    let at = match push.repository.pushed_at.as_ref() {
        Some(serde_json::Value::Number(n)) => n.as_i64().map(|s| format!("-p{s}")),
        _ => None,
    };
    format!("{}{}", short(&push.after), at.unwrap_or_default())
}

/// The `schedules` run of a push to the default branch.
fn schedules_create(at: &RunTarget<'_>, before: &str) -> Option<CreateRequest> {
    let sha = at.sha.to_ascii_lowercase();
    let input = SchedulesInput {
        repo: at.repo.to_owned(),
        installation_id: at.installation_id,
        default_branch: at.default_branch?.to_owned(),
        sha: sha.clone(),
    };
    Some(CreateRequest {
        indexed: false,
        key: InstanceKey::new(
            SchedulesRun::NAME.as_str(),
            at.repo,
            Subject::Schedules {
                sha: sha.clone(),
                before: before.to_owned(),
            },
        )
        .to_string(),
        run: SchedulesRun::NAME.as_str().into(),
        input: json!(input),
        repo: Some(at.repo.to_owned()),
        entity: Some(format!("branch:{}", input.default_branch)),
        sha: Some(sha),
        max_steps: None,
        max_duration_ms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::webhook::parse;

    /// A delivery to an App without a configured id.
    const CX: PlanContext<'static> = PlanContext {
        app_id: None,
        app_slug: None,
    };

    fn pr(action: &str, draft: bool, sender_type: &str) -> Event {
        let body = json!({
            "action": action,
            "number": 7,
            "pull_request": {
                "number": 7, "draft": draft,
                "head": {"sha": "0123456789abcdef0123456789abcdef01234567", "ref": "feature"},
                "base": {"sha": "fedcba9876543210fedcba9876543210fedcba98", "ref": "main"}
            },
            "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"},
                           "clone_url": "https://github.com/octo/hello.git"},
            "sender": {"login": "ana", "type": sender_type},
            "installation": {"id": 42}
        });
        parse("pull_request", body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_pull_request_starts_one_check_named_by_repo_and_sha() {
        let Plan::Create(reqs) = plan(&pr("synchronize", false, "User"), &CX) else {
            panic!()
        };
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].key, "check:octo/hello:0123456789ab:pr7");
        assert_eq!(reqs[0].run, "check");
        assert_eq!(reqs[0].entity.as_deref(), Some("pr:7"));
        assert_eq!(reqs[0].input["installation_id"], 42);
    }

    fn merge_group(action: &str, head_ref: &str) -> Event {
        merge_group_why(action, head_ref, "dequeued")
    }

    fn merge_group_why(action: &str, head_ref: &str, reason: &str) -> Event {
        let body = json!({
            "action": action,
            "reason": reason,
            "merge_group": {
                "head_sha": "0123456789ABCDEF0123456789abcdef01234567",
                "head_ref": head_ref,
                "base_sha": "fedcba9876543210fedcba9876543210fedcba98",
                "base_ref": "refs/heads/main"
            },
            "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"},
                           "clone_url": "https://github.com/octo/hello.git"},
            "sender": {"login": "ana", "type": "User"},
            "installation": {"id": 42}
        });
        parse("merge_group", body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_merge_queue_group_gets_the_check_and_a_destroyed_one_ends_it() {
        let queue = "gh-readonly-queue/main/pr-7-fedcba9876543210fedcba9876543210fedcba98";
        let event = merge_group("checks_requested", &format!("refs/heads/{queue}"));
        let Plan::Create(reqs) = plan(&event, &CX) else {
            panic!("{:?}", plan(&event, &CX))
        };
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].run, "check");
        assert_eq!(reqs[0].key, "check:octo/hello:0123456789ab");
        assert_eq!(reqs[0].entity.as_deref(), Some(&*format!("branch:{queue}")));
        let input: CheckInput = serde_json::from_value(reqs[0].input.clone()).unwrap();
        assert_eq!(input.sha, "0123456789abcdef0123456789abcdef01234567");
        assert_eq!(input.merge_group.as_deref(), Some(queue));
        assert_eq!(input.pr_number, None);
        assert!(!input.needs_approval);

        // A destroyed group ends the group's live checks.
        let destroyed = merge_group("destroyed", &format!("refs/heads/{queue}"));
        let Plan::Create(ends) = plan(&destroyed, &CX) else {
            panic!("{:?}", plan(&destroyed, &CX))
        };
        assert_eq!(ends[0].run, "cancel-checks");
        // Keyed by the group's commit: the same branch names a later group
        // of the same pull request on the same parent.
        assert_eq!(
            ends[0].key,
            format!("cancel-checks:octo/hello:group:{queue}:destroyed-0123456789ab")
        );
        assert_eq!(ends[0].entity, reqs[0].entity, "it ends the group's checks");
        assert_eq!(
            ends[0].input["of"],
            json!({"kind": "group", "branch": queue, "reason": "dequeued",
                   "sha": "0123456789abcdef0123456789abcdef01234567"})
        );
        // A merged group's commit is its base's now: its check goes on.
        let merged = merge_group_why("destroyed", &format!("refs/heads/{queue}"), "merged");
        assert!(matches!(plan(&merged, &CX), Plan::Ignore(_)));
        let tag = merge_group("checks_requested", "refs/tags/v1");
        assert!(matches!(plan(&tag, &CX), Plan::Ignore(r) if r.contains("not a branch")));
    }

    /// A fork's pull request opened at a maintainer's commit is a check of
    /// its own: it neither shares the maintainer's instance (its approval,
    /// its check run) nor, when the fork moves on, cancels it.
    #[test]
    fn two_pull_requests_at_one_commit_are_two_checks() {
        let body = |number: u64, head_repo: &str, association: &str| {
            let body = json!({
                "action": "opened", "number": number,
                "pull_request": {
                    "number": number, "draft": false, "author_association": association,
                    "head": {"sha": "0123456789abcdef0123456789abcdef01234567", "ref": "feature",
                             "repo": {"full_name": head_repo}},
                    "base": {"sha": "fedcba9876543210fedcba9876543210fedcba98", "ref": "main"}
                },
                "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"}},
                "sender": {"login": "ana", "type": "User"},
                "installation": {"id": 42}
            });
            let Plan::Create(reqs) = plan(
                &parse("pull_request", body.to_string().as_bytes()).unwrap(),
                &CX,
            ) else {
                panic!("a pull request plans its check")
            };
            reqs.into_iter().next().unwrap()
        };
        let maintainer = body(7, "octo/hello", "MEMBER");
        let fork = body(8, "stranger/hello", "FIRST_TIME_CONTRIBUTOR");
        assert_ne!(maintainer.key, fork.key);
        assert_ne!(maintainer.id(), fork.id(), "two instances");
        assert_eq!(fork.entity.as_deref(), Some("pr:8"));
        assert_eq!(fork.input["needs_approval"], true);
        assert_eq!(maintainer.input["needs_approval"], false);
        // A redelivery is still the same instance.
        assert_eq!(
            body(8, "stranger/hello", "FIRST_TIME_CONTRIBUTOR").key,
            fork.key
        );
    }

    #[test]
    fn a_retargeted_pull_request_is_checked_again_and_other_edits_are_not() {
        let edited = |changes: serde_json::Value| {
            let body = json!({
                "action": "edited", "number": 7, "changes": changes,
                "pull_request": {
                    "number": 7, "draft": false, "updated_at": "2026-12-05T08:00:00Z",
                    "author_association": "MEMBER",
                    "head": {"sha": "0123456789abcdef0123456789abcdef01234567", "ref": "feature",
                             "repo": {"full_name": "octo/hello"}},
                    "base": {"sha": "fedcba9876543210fedcba9876543210fedcba98", "ref": "release"}
                },
                "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"},
                               "clone_url": "https://github.com/octo/hello.git"},
                "sender": {"login": "ana", "type": "User"},
                "installation": {"id": 42}
            });
            plan(
                &parse("pull_request", body.to_string().as_bytes()).unwrap(),
                &CX,
            )
        };
        let Plan::Create(reqs) = edited(json!({"base": {"ref": {"from": "main"}}})) else {
            panic!("a new base is a new attempt")
        };
        assert_eq!(
            reqs[0].key,
            "check:octo/hello:0123456789ab:pr7:rerun-retargeted-1796457600"
        );
        assert_eq!(
            reqs[0].input["base_sha"],
            "fedcba9876543210fedcba9876543210fedcba98"
        );
        let title = edited(json!({"title": {"from": "Old"}}));
        assert!(matches!(title, Plan::Ignore(_)), "{title:?}");
    }

    #[test]
    fn drafts_bots_and_other_actions_are_ignored() {
        assert!(matches!(
            plan(&pr("closed", false, "User"), &CX),
            Plan::Ignore(_)
        ));
        assert!(matches!(
            plan(&pr("opened", true, "User"), &CX),
            Plan::Ignore(_)
        ));
        assert!(
            matches!(plan(&pr("opened", false, "Bot"), &CX), Plan::Create(_)),
            "a bot's pull request gets its check (ignore_bots is the repository's)"
        );
        assert!(matches!(plan(&Event::Ping, &CX), Plan::Ignore(_)));
    }

    fn push(git_ref: &str, after: &str, deleted: bool) -> Event {
        let body = json!({
            "ref": git_ref, "before": "0".repeat(40), "after": after, "deleted": deleted,
            "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo", "name": "octo"},
                           "clone_url": "https://github.com/octo/hello.git", "default_branch": "main"},
            "sender": {"login": "ana", "type": "User"},
            "installation": {"id": 42}
        });
        parse("push", body.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn a_branch_push_starts_one_deploy_named_by_branch_and_sha() {
        let sha = "89abcdef0123456789abcdef0123456789abcdef";
        let Plan::Create(reqs) = plan(&push("refs/heads/main", sha, false), &CX) else {
            panic!()
        };
        assert_eq!(
            reqs[0].key,
            "deploy:octo/hello:main:89abcdef0123:000000000000"
        );
        assert_eq!(reqs[0].input["branch"], "main");
        assert_eq!(reqs[0].input["default_branch"], "main");
        assert!(
            reqs[0].input.get("clone_url").is_none(),
            "a payload's clone_url is never carried into a run"
        );
        let Plan::Create(tag) = plan(&push("refs/tags/v1", sha, false), &CX) else {
            panic!("a tag push plans its release notes")
        };
        assert_eq!(tag.len(), 1, "a tag deploys nothing");
        assert_eq!(tag[0].run, "release-notes");
        assert_eq!(
            tag[0].key, "release-notes:octo/hello:v1:89abcdef0123:89abcdef0123",
            "without pushed_at, the object pushed names the push"
        );
        assert_eq!(tag[0].input["default_branch"], "main");
        // One push, one proposal, named by what the signature covers: the
        // same body (under any delivery id) is the same push; the tag pushed
        // again later is another.
        let pushed_at = |at: i64| {
            let body = json!({
                "ref": "refs/tags/v1", "before": "0".repeat(40), "after": sha, "deleted": false,
                "repository": {"full_name": "octo/hello", "name": "hello",
                               "owner": {"login": "octo"}, "default_branch": "main",
                               "pushed_at": at},
                "sender": {"login": "ana", "type": "User"}, "installation": {"id": 42}
            });
            let event = parse("push", body.to_string().as_bytes()).unwrap();
            let Plan::Create(reqs) = plan(&event, &CX) else {
                panic!()
            };
            reqs[0].key.clone()
        };
        assert_eq!(
            pushed_at(1_700_000_000),
            "release-notes:octo/hello:v1:89abcdef0123:89abcdef0123-p1700000000"
        );
        assert_eq!(pushed_at(1_700_000_000), pushed_at(1_700_000_000));
        assert_ne!(pushed_at(1_700_000_000), pushed_at(1_700_000_060));
        assert!(matches!(
            plan(&push("refs/tags/v1", &"0".repeat(40), true), &CX),
            Plan::Ignore(_)
        ));
        assert!(matches!(
            plan(&push("refs/heads/main", &"0".repeat(40), true), &CX),
            Plan::Ignore(_)
        ));
    }

    fn closed(head_ref: &str, merged: bool) -> Plan {
        let body = json!({
            "action": "closed", "number": 12,
            "pull_request": {"number": 12, "merged": merged,
                "merged_at": merged.then_some("2026-12-04T10:00:00Z"),
                "closed_at": "2026-12-04T10:00:00Z",
                "head": {"sha": "0123456789abcdef0123456789abcdef01234567", "ref": head_ref},
                "base": {"sha": "fedcba9876543210fedcba9876543210fedcba98", "ref": "main"}},
            "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"}},
            "sender": {"login": "maint", "type": "User"},
            "installation": {"id": 42}
        });
        plan(
            &parse("pull_request", body.to_string().as_bytes()).unwrap(),
            &CX,
        )
    }

    /// Any other closed pull request ends its live checks, named by when
    /// GitHub closed it (a redelivery is the same instance).
    #[test]
    fn a_closed_pull_request_ends_its_live_checks() {
        let Plan::Create(ends) = closed("feature", true) else {
            panic!("{:?}", closed("feature", true))
        };
        // ...and tears its preview down (`edge::previews`).
        assert_eq!(ends.len(), 2);
        assert_eq!(
            ends[1].key,
            "preview-teardown:octo/hello:pr12:closed-1796378400"
        );
        assert_eq!(ends[0].run, "cancel-checks");
        assert_eq!(
            ends[0].key,
            "cancel-checks:octo/hello:pull:12:closed-1796378400"
        );
        assert_eq!(ends[0].entity.as_deref(), Some("pr:12"));
        assert_eq!(ends[0].input["of"], json!({"kind": "pull", "number": 12}));
    }

    #[test]
    fn a_release_decision_is_routed_by_its_pull_request_or_check_run() {
        let Plan::Route(routes) = closed("sluice/release-notes/v1.2.0", true) else {
            panic!()
        };
        assert_eq!(routes[0].by, RouteKey::Pull(12));
        assert_eq!(routes[0].event_type, RELEASE_EVENT);
        assert_eq!(
            routes[0].payload,
            json!({"kind": "pull_closed", "number": 12, "merged": true, "sender": "maint",
                   "head_sha": "0123456789abcdef0123456789abcdef01234567",
                   "decided_ms": 1_796_378_400_000_i64})
        );
        // Dated by GitHub's signed merge time; routed as the sender's.
        assert_eq!(routes[0].dated_ms, Some(1_796_378_400_000));
        assert_eq!(routes[0].sender, "maint");
        let check_run = |action: &str| {
            let body = json!({
                "action": action,
                "check_run": {"id": 99, "name": "sluice/release-notes", "external_id": "x:ask:1"},
                "requested_action": {"identifier": "release-approve"},
                "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"}},
                "sender": {"login": "maint", "type": "User"},
                "installation": {"id": 42}
            });
            plan(
                &parse("check_run", body.to_string().as_bytes()).unwrap(),
                &CX,
            )
        };
        let Plan::Route(r) = check_run("requested_action") else {
            panic!()
        };
        assert_eq!(r[0].by, RouteKey::CheckRun(99));
        assert_eq!(r[0].payload["kind"], "button");
        assert_eq!(r[0].dated_ms, None, "a press has no date");
        let Plan::Route(r) = check_run("rerequested") else {
            panic!()
        };
        assert_eq!(
            r[0].payload["kind"], "replan",
            "a re-run replans, it starts no instance"
        );
        assert!(matches!(check_run("completed"), Plan::Ignore(_)));
    }

    fn fork_pr(head_repo: &str, association: &str) -> Event {
        let body = json!({
            "action": "opened", "number": 7,
            "pull_request": {
                "number": 7, "draft": false, "author_association": association,
                "head": {"sha": "0123456789abcdef0123456789abcdef01234567", "ref": "feature",
                         "repo": {"full_name": head_repo}},
                "base": {"sha": "fedcba9876543210fedcba9876543210fedcba98", "ref": "main",
                         "repo": {"full_name": "octo/hello"}}
            },
            "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"}},
            "sender": {"login": "ana", "type": "User"},
            "installation": {"id": 42}
        });
        parse("pull_request", body.to_string().as_bytes()).unwrap()
    }

    fn approval_of(event: &Event) -> bool {
        let Plan::Create(reqs) = plan(event, &CX) else {
            panic!("{event:?}")
        };
        reqs[0].input["needs_approval"].as_bool().unwrap()
    }

    #[test]
    fn only_a_first_time_contributors_fork_needs_approval() {
        assert!(approval_of(&fork_pr(
            "stranger/hello",
            "FIRST_TIME_CONTRIBUTOR"
        )));
        assert!(approval_of(&fork_pr("stranger/hello", "NONE")));
        assert!(!approval_of(&fork_pr("regular/hello", "CONTRIBUTOR")));
        assert!(
            !approval_of(&fork_pr("octo/hello", "FIRST_TIME_CONTRIBUTOR")),
            "not a fork"
        );
        assert!(
            !approval_of(&fork_pr("Octo/Hello", "NONE")),
            "names compare as GitHub does"
        );
    }

    #[test]
    fn a_pressed_button_goes_to_the_instance_its_check_run_names() {
        let body = |external_id: &str, action: &str| {
            json!({
                "action": action,
                "check_run": {"id": 99, "name": "sluice/check", "external_id": external_id},
                "requested_action": {"identifier": "approve"},
                "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"}},
                "sender": {"login": "maintainer", "type": "User"},
                "installation": {"id": 42}
            })
            .to_string()
        };
        let event = parse(
            "check_run",
            body("check-octo-hello-0123-ab", "requested_action").as_bytes(),
        )
        .unwrap();
        let Plan::Send(sends) = plan(&event, &CX) else {
            panic!()
        };
        assert_eq!(sends[0].instance_id, "check-octo-hello-0123-ab");
        assert_eq!(sends[0].event_type, CHECK_ACTION_EVENT);
        assert_eq!(
            sends[0].payload,
            json!({"check_run_id": 99, "identifier": "approve", "sender": "maintainer"})
        );
        let not_ours = parse(
            "check_run",
            body("not an id!", "requested_action").as_bytes(),
        )
        .unwrap();
        assert!(matches!(plan(&not_ours, &CX), Plan::Ignore(_)));
        let other = parse("check_run", body("check-x", "completed").as_bytes()).unwrap();
        assert!(matches!(plan(&other, &CX), Plan::Ignore(_)));
    }

    /// A Re-run press, GitHub's shape: the suite's `updated_at` is when
    /// GitHub reset it for this press.
    fn rerequested_at(name: &str, app_id: u64, prs: &[u64], suite_updated: &str) -> Event {
        let body = json!({
            "action": "rerequested",
            "check_run": {
                "id": 4_000_000_123u64, "name": name, "external_id": "check-octo-hello-aa-1",
                "head_sha": "0123456789abcdef0123456789abcdef01234567",
                "app": {"id": app_id},
                "check_suite": {"id": 5, "head_branch": "main", "updated_at": suite_updated,
                                "head_sha": "0123456789abcdef0123456789abcdef01234567"},
                "pull_requests": prs.iter().map(|n| json!({"number": n})).collect::<Vec<_>>()
            },
            "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"},
                           "default_branch": "main"},
            "sender": {"login": "maintainer", "type": "User"},
            "installation": {"id": 42}
        });
        parse("check_run", body.to_string().as_bytes()).unwrap()
    }

    fn rerequested(name: &str, app_id: u64, prs: &[u64]) -> Event {
        rerequested_at(name, app_id, prs, "2026-12-04T17:00:00Z")
    }

    #[test]
    fn a_rerequested_check_run_is_a_new_attempt_of_the_instance_it_reported() {
        let cx = PlanContext {
            app_id: Some("77"),
            ..CX
        };
        let Plan::Rerun(r) = plan(&rerequested("sluice/check", 77, &[7]), &cx) else {
            panic!()
        };
        let want = Rerun {
            of: RerunOf::Instance("check-octo-hello-aa-1".into()),
            attempt: "rerun-cr4000000123-1796403600".into(),
        };
        assert_eq!(r, [want.clone()]);
        let later = rerequested_at("sluice/deploy", 77, &[], "2026-12-04T17:05:00Z");
        let Plan::Rerun(other) = plan(&later, &cx) else {
            panic!()
        };
        assert_ne!(
            other[0].attempt, want.attempt,
            "a second press (GitHub reset the suite again) is a third attempt"
        );
        // Another App's check run, or one that is not Sluice's, starts nothing.
        assert!(matches!(
            plan(&rerequested("sluice/check", 99, &[7]), &cx),
            Plan::Ignore(_)
        ));
        assert!(matches!(
            plan(&rerequested("lint", 77, &[7]), &cx),
            Plan::Ignore(_)
        ));
    }

    /// The attempt comes from the signed body, never the delivery id: a
    /// captured `rerequested` body posted again under fresh delivery ids
    /// plans the very same attempt each time (so the same instances, which
    /// exist already), and the suite's timestamp dates it for the
    /// stale-delivery rule. Without `updated_at` the check run is re-run
    /// at most once.
    #[test]
    fn a_replayed_rerequest_is_the_same_attempt_whatever_its_delivery() {
        let cx = PlanContext {
            app_id: Some("77"),
            ..CX
        };
        let event = rerequested("sluice/deploy", 77, &[]);
        let Plan::Rerun(first) = plan(&event, &cx) else {
            panic!()
        };
        for _ in 0..3 {
            assert_eq!(plan(&event, &cx), Plan::Rerun(first.clone()));
        }
        assert_eq!(event.occurred_ms(), Some(1_796_403_600_000));
        let undated = rerequested_at("sluice/deploy", 77, &[], "not a time");
        let Plan::Rerun(once) = plan(&undated, &cx) else {
            panic!()
        };
        assert_eq!(once[0].attempt, "rerun-cr4000000123");
        assert_eq!(undated.occurred_ms(), None);
    }

    #[test]
    fn a_rerun_repeats_the_runs_own_input_under_a_fresh_key() {
        let input = json!({"repo": "octo/hello", "sha": "a".repeat(40), "installation_id": 42,
                           "pr_number": 7, "needs_approval": true, "sender": "ana"});
        let text = input.to_string();
        let source = RerunSource {
            key: "check:octo/hello:aaaaaaaaaaaa:rerun-d1",
            run: "check",
            input_json: &text,
            repo: Some("octo/hello"),
            entity: Some("pr:7"),
            sha: Some("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        };
        let c = rerun_create(&source, "rerun-d2").expect("a check re-runs");
        assert_eq!(
            c.key, "check:octo/hello:aaaaaaaaaaaa:rerun-d2",
            "attempts do not nest"
        );
        assert_eq!(c.input, input, "its approval, PR and commit, as they were");
        assert_eq!(c.entity.as_deref(), Some("pr:7"));
        let probe = RerunSource {
            run: "probe",
            ..source
        };
        assert!(rerun_create(&probe, "rerun-d2").is_none());
        let schedules = RerunSource {
            run: "schedules",
            ..probe
        };
        assert!(rerun_create(&schedules, "rerun-d2").is_none());
    }

    /// A deploy's re-run is a new arrival: whatever the run it repeats was
    /// (a dispatched rollback is imperative), the re-run is a desired-state
    /// deploy of that commit, head-checked at arrival and at dequeue, so
    /// pressing Re-run on an old rollback's check run never rolls back.
    #[test]
    fn a_deploys_rerun_is_never_imperative() {
        let rollback = json!({"repo": "octo/hello", "branch": "main", "sha": "b".repeat(40),
                              "installation_id": 42, "default_branch": "main",
                              "sender": "dispatch", "imperative": true,
                              "inputs": {"REASON": "rollback"}});
        let text = rollback.to_string();
        let source = RerunSource {
            key: "deploy:octo/hello:dispatch-0123456789abcdef",
            run: "deploy",
            input_json: &text,
            repo: Some("octo/hello"),
            entity: Some("branch:main"),
            sha: Some("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"),
        };
        let c = rerun_create(&source, "rerun-cr9-1796403600").expect("a deploy re-runs");
        let input: DeployInput = serde_json::from_value(c.input.clone()).unwrap();
        assert!(!input.imperative, "{}", c.input);
        assert_eq!(input.sha, "b".repeat(40), "the same commit");
        assert_eq!(input.branch, "main");
        assert_eq!(
            input.inputs.get("REASON").map(String::as_str),
            Some("rollback")
        );
        assert_eq!(
            c.key,
            "deploy:octo/hello:dispatch-0123456789abcdef:rerun-cr9-1796403600"
        );
    }

    #[test]
    fn check_suites_rerun_the_commits_runs_on_rerequest_and_nothing_on_request() {
        let suite = |action: &str| {
            let body = json!({
                "action": action,
                "check_suite": {"id": 5, "head_branch": "feature", "head_sha": "0123456789ABCDEF0123456789abcdef01234567",
                                "updated_at": "2026-12-04T17:00:00Z",
                                "app": {"id": 77}, "pull_requests": [{"number": 7}, {"number": 8}]},
                "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"},
                               "default_branch": "main"},
                "sender": {"login": "maintainer", "type": "User"},
                "installation": {"id": 42}
            });
            parse("check_suite", body.to_string().as_bytes()).unwrap()
        };
        let cx = PlanContext {
            app_id: Some("77"),
            ..CX
        };
        assert!(matches!(plan(&suite("requested"), &cx), Plan::Ignore(_)));
        let Plan::Rerun(r) = plan(&suite("rerequested"), &cx) else {
            panic!()
        };
        let of = RerunOf::Commit {
            repo: "octo/hello".into(),
            sha: "0123456789abcdef0123456789abcdef01234567".into(),
        };
        assert_eq!(
            r[0].of, of,
            "the payload's pull requests and branch decide nothing"
        );
        assert_eq!(
            r[0].attempt, "rerun-cs5-1796403600",
            "the suite and the moment GitHub reset it name the attempt"
        );
    }
}
