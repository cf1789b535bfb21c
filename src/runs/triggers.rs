//! Which events start which runs, and how each instance is named (the name
//! is the idempotency key: ADR-0001 rule 1).

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::engine::CreateRequest;
use crate::github::webhook::{Event, PullRequestEvent, PushEvent};

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
}

/// What a `check` instance needs, decided at the edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckInput {
    pub repo: String,
    pub sha: String,
    pub installation_id: u64,
    pub pr_number: u64,
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
        Event::Ping => Plan::Ignore("ping".into()),
        Event::Other(name) => Plan::Ignore(format!("{name} events start no run")),
    }
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
}
