//! Which events start which runs, and how each instance is named (the name
//! is the idempotency key: ADR-0001 rule 1).

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::engine::CreateRequest;
use crate::engine::InstanceId;
use crate::github::webhook::{CheckRunEvent, Event, PullRequestEvent, PushEvent};

use super::RunName;

/// Pull request actions that mean "there is new code to check".
const CHECK_ACTIONS: [&str; 4] = ["opened", "synchronize", "reopened", "ready_for_review"];

/// Characters of the sha in an instance key: as in ADR-0001's examples.
const KEY_SHA_CHARS: usize = 12;

#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// A valid event Sluice does not act on, and why.
    Ignore(String),
    Create(Vec<CreateRequest>),
    /// Events for running instances: a button of their check run pressed.
    Send(Vec<EventSend>),
}

/// An event for an instance, decided at the edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventSend {
    pub instance_id: String,
    pub event_type: String,
    pub payload: serde_json::Value,
}

/// The event a pressed check-run button sends its instance.
pub const CHECK_ACTION_EVENT: &str = "check-run-action";

/// What a pressed button says, as the instance receives it: it checks the
/// check run is its own and the sender may decide (`runs::approval`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckAction {
    pub check_run_id: u64,
    pub identifier: String,
    pub sender: String,
}

/// What a `check` instance needs, decided at the edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckInput {
    pub repo: String,
    pub sha: String,
    pub installation_id: u64,
    pub pr_number: u64,
    /// A first-time contributor's fork: the check waits for someone with
    /// write access to press "Approve and run" (GitHub Actions' default).
    #[serde(default)]
    pub needs_approval: bool,
}

/// `author_association` values of someone who never contributed.
const FIRST_TIME_ASSOCIATIONS: [&str; 3] = ["FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "NONE"];

/// A pull request from a fork by someone who never contributed to the
/// repository: its code runs only once a maintainer approves it.
fn needs_approval(pr: &PullRequestEvent) -> bool {
    let from_fork = pr
        .pull_request
        .head
        .repo
        .as_ref()
        .is_none_or(|r| !r.full_name.eq_ignore_ascii_case(&pr.repository.full_name));
    let first_time = pr
        .pull_request
        .author_association
        .as_deref()
        .is_none_or(|a| FIRST_TIME_ASSOCIATIONS.contains(&a));
    from_fork && first_time
}

/// What a `deploy` instance needs: the pushed commit and where it came
/// from. Whether the branch deploys at all is decided inside the run, by
/// `.sluice.toml` on the default branch and the operator's environments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployInput {
    pub repo: String,
    pub branch: String,
    pub sha: String,
    pub installation_id: u64,
    /// Where the deploy policy is read (`repository.default_branch`).
    pub default_branch: String,
}

pub fn plan(event: &Event) -> Plan {
    match event {
        Event::PullRequest(pr) => plan_pull_request(pr),
        Event::Push(push) => plan_push(push),
        Event::CheckRun(run) => plan_check_run(run),
        Event::Ping => Plan::Ignore("ping".into()),
        Event::Other(name) => Plan::Ignore(format!("{name} events start no run")),
    }
}

/// A pressed button of a Sluice check run goes to the instance its
/// external id names; everything else about check runs starts nothing yet.
fn plan_check_run(run: &CheckRunEvent) -> Plan {
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

fn is_bot(kind: Option<&str>) -> bool {
    kind == Some("Bot")
}

fn valid_sha(sha: &str) -> bool {
    sha.len() == 40 && sha.chars().all(|c| c.is_ascii_hexdigit())
}

fn plan_pull_request(pr: &PullRequestEvent) -> Plan {
    if !CHECK_ACTIONS.contains(&pr.action.as_str()) {
        return Plan::Ignore(format!("pull_request action {:?} starts no run", pr.action));
    }
    if pr.pull_request.draft {
        return Plan::Ignore("draft pull request".into());
    }
    if is_bot(pr.sender.kind.as_deref()) {
        return Plan::Ignore(format!("sender {} is a bot", pr.sender.login));
    }
    let sha = pr.pull_request.head.sha.to_ascii_lowercase();
    if !valid_sha(&sha) {
        return Plan::Ignore(format!(
            "head sha {:?} is not a commit id",
            pr.pull_request.head.sha
        ));
    }
    let repo = pr.repository.full_name.clone();
    let input = CheckInput {
        repo: repo.clone(),
        sha: sha.clone(),
        installation_id: pr.installation.id,
        pr_number: pr.number,
        needs_approval: needs_approval(pr),
    };
    Plan::Create(vec![CreateRequest {
        key: format!("check:{repo}:{}", &sha[..KEY_SHA_CHARS]),
        run: RunName::Check.as_str().into(),
        input: json!(input),
        repo: Some(repo),
        entity: Some(format!("pr:{}", pr.number)),
        sha: Some(sha),
        max_steps: None,
        max_duration_ms: None,
    }])
}

fn short(sha: &str) -> &str {
    sha.get(..KEY_SHA_CHARS).unwrap_or(sha)
}

fn plan_push(push: &PushEvent) -> Plan {
    let Some(branch) = push.git_ref.strip_prefix("refs/heads/") else {
        return Plan::Ignore(format!("push to {} (not a branch)", push.git_ref));
    };
    if push.deleted {
        return Plan::Ignore(format!("branch {branch} was deleted"));
    }
    if is_bot(push.sender.kind.as_deref()) {
        return Plan::Ignore(format!("sender {} is a bot", push.sender.login));
    }
    let sha = push.after.to_ascii_lowercase();
    if !valid_sha(&sha) || sha.bytes().all(|b| b == b'0') {
        return Plan::Ignore(format!("after {:?} is not a commit id", push.after));
    }
    let repo = push.repository.full_name.clone();
    let Some(default_branch) = push.repository.default_branch.clone() else {
        // GitHub always sends it; without it no deploy policy can be read.
        return Plan::Ignore("push without repository.default_branch".into());
    };
    let input = DeployInput {
        repo: repo.clone(),
        branch: branch.to_owned(),
        sha: sha.clone(),
        installation_id: push.installation.id,
        default_branch,
    };
    Plan::Create(vec![CreateRequest {
        // `before` is part of the identity: pushing an older commit back
        // (a rollback) is a new deploy, while a redelivery is the same one.
        key: format!(
            "deploy:{repo}:{branch}:{}:{}",
            &sha[..KEY_SHA_CHARS],
            short(&push.before)
        ),
        run: RunName::Deploy.as_str().into(),
        input: json!(input),
        repo: Some(repo),
        entity: Some(format!("branch:{branch}")),
        sha: Some(sha),
        max_steps: None,
        max_duration_ms: None,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::webhook::parse;

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
        let Plan::Create(reqs) = plan(&pr("synchronize", false, "User")) else {
            panic!()
        };
        assert_eq!(reqs.len(), 1);
        assert_eq!(reqs[0].key, "check:octo/hello:0123456789ab");
        assert_eq!(reqs[0].run, "check");
        assert_eq!(reqs[0].entity.as_deref(), Some("pr:7"));
        assert_eq!(reqs[0].input["installation_id"], 42);
    }

    #[test]
    fn drafts_bots_and_other_actions_are_ignored() {
        assert!(matches!(
            plan(&pr("closed", false, "User")),
            Plan::Ignore(_)
        ));
        assert!(matches!(plan(&pr("opened", true, "User")), Plan::Ignore(_)));
        assert!(matches!(plan(&pr("opened", false, "Bot")), Plan::Ignore(_)));
        assert!(matches!(plan(&Event::Ping), Plan::Ignore(_)));
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
        let Plan::Create(reqs) = plan(&push("refs/heads/main", sha, false)) else {
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
        assert!(matches!(
            plan(&push("refs/tags/v1", sha, false)),
            Plan::Ignore(_)
        ));
        assert!(matches!(
            plan(&push("refs/heads/main", &"0".repeat(40), true)),
            Plan::Ignore(_)
        ));
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
        let Plan::Create(reqs) = plan(event) else {
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
        let Plan::Send(sends) = plan(&event) else {
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
        assert!(matches!(plan(&not_ours), Plan::Ignore(_)));
        let other = parse("check_run", body("check-x", "completed").as_bytes()).unwrap();
        assert!(matches!(plan(&other), Plan::Ignore(_)));
    }
}
