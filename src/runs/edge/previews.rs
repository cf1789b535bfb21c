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
//! one; `preview-teardown:<repo>:pr<n>:closed-<closed at, s>`, so a
//! redelivered close is the same teardown (the sweep's reconcile makes one
//! of its own key: `kit::preview::swept_teardown_request`).

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
    let fork = head
        .repo
        .as_ref()
        .is_none_or(|r| !r.full_name.eq_ignore_ascii_case(&pr.repository.full_name));
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
                why: "this pull request was closed".into(),
                evicted: false,
                fork,
            },
            closed_ms,
        ));
    }
    if !PREVIEW_ACTIONS.contains(&pr.action.as_str()) || pr.pull_request.draft {
        return None;
    }
    let arrival = arrival_of(pr)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::github::webhook::{parse, Event};
    use crate::runs::kit::key::InstanceKey;
    use serde_json::json;

    const HEAD: &str = "0123456789abcdef0123456789abcdef01234567";
    const BEFORE: &str = "fedcba9876543210fedcba9876543210fedcba98";

    fn event(action: &str, head_repo: &str, extra: serde_json::Value) -> PullRequestEvent {
        let mut body = json!({
            "action": action, "number": 7,
            "pull_request": {"number": 7, "draft": false,
                "updated_at": "2026-12-04T10:00:00Z", "closed_at": "2026-12-04T11:00:00Z",
                "head": {"sha": HEAD, "ref": "feature", "repo": {"full_name": head_repo}},
                "base": {"sha": BEFORE, "ref": "main"}},
            "repository": {"full_name": "octo/hello", "name": "hello",
                "owner": {"login": "octo"}, "default_branch": "trunk"},
            "sender": {"login": "ana", "type": "User"},
            "installation": {"id": 42}
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        match parse("pull_request", body.to_string().as_bytes()).unwrap() {
            Event::PullRequest(pr) => *pr,
            other => panic!("{other:?}"),
        }
    }

    fn planned(action: &str, extra: serde_json::Value) -> Option<CreateRequest> {
        plan_preview(&event(action, "octo/hello", extra))
    }

    /// Each arrival of a head is one instance, named by the event: a
    /// redelivery is the same key, a later arrival of the same head another.
    #[test]
    fn heads_are_previewed_once_per_arrival() {
        let opened = planned("opened", json!({})).unwrap();
        assert_eq!(opened.key, "preview:octo/hello:pr7:0123456789ab:opened");
        assert_eq!(opened.run, "preview");
        assert_eq!(opened.entity.as_deref(), Some("pr:7"));
        assert_eq!(opened.input["default_branch"], "trunk");
        assert_eq!(opened.input["head_branch"], "feature");
        assert!(opened.input.get("fork").is_none());
        let pushed = planned("synchronize", json!({"before": BEFORE})).unwrap();
        assert_eq!(
            pushed.key,
            "preview:octo/hello:pr7:0123456789ab:sfedcba987654"
        );
        let reopened = planned("reopened", json!({})).unwrap();
        assert_eq!(
            reopened.key,
            "preview:octo/hello:pr7:0123456789ab:reopened-1796378400"
        );
        assert!(planned("ready_for_review", json!({})).is_some());
        for key in [&opened.key, &pushed.key, &reopened.key] {
            let parsed = InstanceKey::parse(key).unwrap();
            assert_eq!(&parsed.to_string(), key);
        }
    }

    #[test]
    fn drafts_and_other_actions_start_no_preview() {
        let draft = json!({"pull_request": {"number": 7, "draft": true,
            "head": {"sha": HEAD, "ref": "feature", "repo": {"full_name": "octo/hello"}},
            "base": {"sha": BEFORE, "ref": "main"}}});
        assert!(planned("opened", draft).is_none());
        for action in ["edited", "labeled", "assigned"] {
            assert!(planned(action, json!({})).is_none(), "{action}");
        }
    }

    /// A close is a teardown named by when GitHub closed it: the key the
    /// sweep's reconcile builds from GitHub's `closed_at`.
    #[test]
    fn a_close_is_a_teardown_named_by_when_github_closed_it() {
        let closed = planned("closed", json!({})).unwrap();
        assert_eq!(closed.run, "preview-teardown");
        assert_eq!(
            closed.key,
            "preview-teardown:octo/hello:pr7:closed-1796382000"
        );
        assert_eq!(closed.input["sha"], HEAD);
        assert_eq!(
            InstanceKey::parse(&closed.key).unwrap().to_string(),
            closed.key
        );
    }

    /// A fork's head is planned with `fork`, which the run refuses (its
    /// check says why): no secret reaches a fork's code.
    #[test]
    fn a_forks_head_is_marked_fork() {
        let fork = plan_preview(&event("opened", "mallory/hello", json!({}))).unwrap();
        assert_eq!(fork.input["fork"], true);
        let closed = plan_preview(&event("closed", "mallory/hello", json!({}))).unwrap();
        assert_eq!(closed.input["fork"], true, "its teardown runs nothing");
    }
}
