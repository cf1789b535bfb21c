//! Event decoding and the trigger plan: `sluice::github::webhook::parse`
//! on any event name and body, then `sluice::runs::triggers::plan` on every
//! event that parses (what intake does after the signature check).
//!
//! Input: line 1 the `X-GitHub-Event` name, the rest the body.
//!
//! Asserts, besides "no panic":
//! - the decoded variant is the one the event name selects, and `BadJson`
//!   exactly when the body is not a JSON object;
//! - the plan is deterministic, ignores pings and events Sluice does not
//!   act on, and creates a check only for an open, non-draft pull request
//!   from a non-bot with a commit sha, a deploy only for a push to a branch
//!   that was not deleted, by a non-bot, of a non-zero commit;
//! - every planned instance passes `check_planned_create` and carries the
//!   event's repository, commit and installation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sluice::github::webhook::{parse, Event, ParseError};
use sluice::runs::triggers::{plan, CheckInput, DeployInput, Plan};
use sluice_fuzz::{check_planned_create, is_lower_sha, line};

/// Pull request actions that mean new code to check (`runs::triggers`).
const CHECK_ACTIONS: [&str; 4] = ["opened", "synchronize", "reopened", "ready_for_review"];

fuzz_target!(|data: &[u8]| {
    let (event_raw, body) = line(data);
    // Header values reach intake as strings.
    let event = String::from_utf8_lossy(event_raw);
    let event = event.as_ref();
    let is_object = serde_json::from_slice::<Value>(body).is_ok_and(|v| v.is_object());

    let parsed = parse(event, body);
    match &parsed {
        Err(ParseError::BadJson(_)) => assert!(!is_object, "an object was called bad JSON"),
        Err(ParseError::WrongShape { event: e, .. }) => {
            assert!(is_object);
            assert_eq!(e, event);
            assert!(matches!(event, "pull_request" | "push" | "check_run"));
        }
        Ok(ev) => {
            assert!(is_object, "a non-object decoded");
            match ev {
                Event::PullRequest(_) => assert_eq!(event, "pull_request"),
                Event::Push(_) => assert_eq!(event, "push"),
                Event::CheckRun(_) => assert_eq!(event, "check_run"),
                Event::Ping => assert_eq!(event, "ping"),
                Event::Other(name) => {
                    assert_eq!(name, event);
                    assert!(!matches!(event, "pull_request" | "push" | "ping" | "check_run"));
                }
            }
        }
    }
    let Ok(ev) = parsed else { return };

    let p = plan(&ev);
    assert_eq!(plan(&ev), p, "the plan is deterministic");
    let creates = match &p {
        Plan::Ignore(reason) => {
            assert!(!reason.is_empty(), "an ignore says why");
            return;
        }
        Plan::Create(creates) => creates,
        Plan::Send(sends) => {
            // Only a pressed button of a check run naming a valid instance.
            let Event::CheckRun(run) = &ev else {
                panic!("{ev:?} planned {p:?}")
            };
            assert_eq!(run.action, "requested_action");
            assert_eq!(sends.len(), 1);
            assert_eq!(Some(sends[0].instance_id.as_str()), run.check_run.external_id.as_deref());
            assert!(sluice::engine::InstanceId::parse(&sends[0].instance_id).is_ok());
            return;
        }
    };
    assert_eq!(creates.len(), 1, "one event starts one instance");
    let c = &creates[0];
    check_planned_create(c);
    match &ev {
        Event::PullRequest(pr) => {
            assert!(
                CHECK_ACTIONS.contains(&pr.action.as_str()),
                "{:?}",
                pr.action
            );
            assert!(!pr.pull_request.draft);
            assert_ne!(pr.sender.kind.as_deref(), Some("Bot"));
            let sha = pr.pull_request.head.sha.to_ascii_lowercase();
            assert!(is_lower_sha(&sha));
            let input: CheckInput = serde_json::from_value(c.input.clone()).expect("decoded");
            assert_eq!(c.run, "check");
            assert_eq!(input.sha, sha);
            assert_eq!(input.repo, pr.repository.full_name);
            assert_eq!(input.installation_id, pr.installation.id);
            assert_eq!(input.pr_number, pr.number);
        }
        Event::Push(push) => {
            let branch = push
                .git_ref
                .strip_prefix("refs/heads/")
                .expect("only branch pushes deploy");
            assert!(!push.deleted);
            assert_ne!(push.sender.kind.as_deref(), Some("Bot"));
            let input: DeployInput = serde_json::from_value(c.input.clone()).expect("decoded");
            assert_eq!(c.run, "deploy");
            assert_eq!(input.branch, branch);
            assert_eq!(input.sha, push.after.to_ascii_lowercase());
            assert_eq!(input.repo, push.repository.full_name);
            assert_eq!(Some(&input.default_branch), push.repository.default_branch.as_ref());
            assert_eq!(input.installation_id, push.installation.id);
        }
        Event::CheckRun(_) | Event::Ping | Event::Other(_) => panic!("{ev:?} planned {p:?}"),
    }
});
