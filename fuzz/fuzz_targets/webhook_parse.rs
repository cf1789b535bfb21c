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
//!   with a commit sha, a deploy only for a push to a branch that was not
//!   deleted, of a non-zero commit, re-runs only for a `rerequested` check
//!   run or suite of Sluice's own App, and nothing its own bot user caused;
//! - every planned instance passes `check_planned_create` and carries the
//!   event's repository, commit and installation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use sluice::github::webhook::{parse, Event, ParseError};
use sluice::runs::inputs::{Decision, ReleaseInput};
use sluice::runs::inputs::{CheckInput, DeployInput};
use sluice::runs::triggers::{plan, Plan, RouteKey, Rerun, RerunOf};
use sluice_fuzz::{check_planned_create, is_lower_sha, line, plan_context, APP_ID, APP_SLUG};

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
            assert!(matches!(
                event,
                "pull_request" | "push" | "check_run" | "check_suite" | "merge_group"
            ));
        }
        Ok(ev) => {
            assert!(is_object, "a non-object decoded");
            match ev {
                Event::PullRequest(_) => assert_eq!(event, "pull_request"),
                Event::Push(_) => assert_eq!(event, "push"),
                Event::CheckRun(_) => assert_eq!(event, "check_run"),
                Event::CheckSuite(_) => assert_eq!(event, "check_suite"),
                Event::MergeGroup(_) => assert_eq!(event, "merge_group"),
                Event::Ping => assert_eq!(event, "ping"),
                Event::Other(name) => {
                    assert_eq!(name, event);
                    assert!(!matches!(
                        event,
                        "pull_request" | "push" | "ping" | "check_run" | "check_suite" | "merge_group"
                    ));
                }
            }
        }
    }
    let Ok(ev) = parsed else { return };

    let cx = plan_context();
    let p = plan(&ev, &cx);
    assert_eq!(plan(&ev, &cx), p, "the plan is deterministic");
    let creates = match &p {
        Plan::Ignore(reason) => {
            assert!(!reason.is_empty(), "an ignore says why");
            return;
        }
        Plan::Create(creates) => creates,
        Plan::Send(sends) => {
            assert!(!from_own_bot(&ev), "Sluice's own action planned {p:?}");
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
        Plan::Route(routes) => {
            assert!(!from_own_bot(&ev), "Sluice's own action planned {p:?}");
            // Only a release's decision: its pull request closed, or a
            // button or re-run of its check run; routed, never created.
            assert_eq!(routes.len(), 1);
            let r = &routes[0];
            assert_eq!(r.event_type, sluice::runs::approval::RELEASE_EVENT);
            let decision: sluice::runs::inputs::Decision =
                serde_json::from_value(r.payload.clone()).expect("a decision decodes");
            match (&ev, r.by, decision) {
                (Event::PullRequest(pr), RouteKey::Pull(n), Decision::PullClosed { number, .. }) => {
                    assert_eq!(pr.action, "closed");
                    assert!(pr.pull_request.head.name.starts_with("sluice/release-notes/"));
                    assert_eq!((n, number), (pr.number, pr.number));
                }
                (Event::CheckRun(run), RouteKey::CheckRun(id), _) => {
                    assert_eq!(id, run.check_run.id);
                    assert_eq!(run.check_run.name.as_deref(), Some("sluice/release-notes"));
                }
                other => panic!("{other:?} routed"),
            }
            assert_eq!(r.repo, repo_of(&ev));
            return;
        }
        Plan::Rerun(reruns) => {
            assert!(!from_own_bot(&ev), "Sluice's own action planned {p:?}");
            check_reruns(&ev, reruns);
            return;
        }
    };
    assert!(!from_own_bot(&ev), "Sluice's own action planned {p:?}");
    // A push to the default branch also records its schedules.
    let records_schedules = matches!(&ev, Event::Push(p)
        if p.repository.default_branch.as_deref() == p.git_ref.strip_prefix("refs/heads/"));
    let want = if records_schedules { 2 } else { 1 };
    assert_eq!(creates.len(), want, "one event starts one instance (and a schedules record)");
    if records_schedules {
        check_planned_create(&creates[1]);
        assert_eq!(creates[1].run, "schedules");
        assert_eq!(creates[1].sha, creates[0].sha);
    }
    let c = &creates[0];
    check_planned_create(c);
    match &ev {
        // A closed pull request or a destroyed merge group ends its checks.
        Event::PullRequest(pr) if pr.action == "closed" => {
            assert_eq!(c.run, "cancel-checks");
            assert_eq!(c.entity.as_deref(), Some(&*format!("pr:{}", pr.number)));
        }
        Event::MergeGroup(group) if group.action == "destroyed" => {
            assert_eq!(c.run, "cancel-checks");
            let branch = group.merge_group.head_ref.strip_prefix("refs/heads/").expect("a branch");
            assert_eq!(c.entity.as_deref(), Some(&*format!("branch:{branch}")));
        }
        Event::PullRequest(pr) => {
            let retargeted = pr.action == "edited"
                && pr.changes.as_ref().is_some_and(|c| c.get("base").is_some());
            assert!(
                CHECK_ACTIONS.contains(&pr.action.as_str()) || retargeted,
                "{:?}",
                pr.action
            );
            assert!(!pr.pull_request.draft);
            let sha = pr.pull_request.head.sha.to_ascii_lowercase();
            assert!(is_lower_sha(&sha));
            let input: CheckInput = serde_json::from_value(c.input.clone()).expect("decoded");
            assert_eq!(c.run, "check");
            assert_eq!(input.sha, sha);
            assert_eq!(input.repo, pr.repository.full_name);
            assert_eq!(input.installation_id, pr.installation.id);
            assert_eq!(input.pr_number.map(|n| n.get()), Some(pr.number));
        }
        Event::Push(push) if push.git_ref.starts_with("refs/tags/") => {
            assert!(!push.deleted);
            let input: ReleaseInput = serde_json::from_value(c.input.clone()).expect("decoded");
            assert_eq!(c.run, "release-notes");
            assert_eq!(Some(input.tag.as_str()), push.git_ref.strip_prefix("refs/tags/"));
            assert_eq!(input.repo, push.repository.full_name);
            assert_eq!(Some(&input.default_branch), push.repository.default_branch.as_ref());
        }
        Event::Push(push) => {
            let branch = push
                .git_ref
                .strip_prefix("refs/heads/")
                .expect("only branch pushes deploy");
            assert!(!push.deleted);
            let input: DeployInput = serde_json::from_value(c.input.clone()).expect("decoded");
            assert_eq!(c.run, "deploy");
            assert_eq!(input.branch, branch);
            assert_eq!(input.sha, push.after.to_ascii_lowercase());
            assert_eq!(input.repo, push.repository.full_name);
            assert_eq!(Some(&input.default_branch), push.repository.default_branch.as_ref());
            assert_eq!(input.installation_id, push.installation.id);
        }
        Event::MergeGroup(group) => {
            assert_eq!(group.action, "checks_requested");
            let branch = group.merge_group.head_ref.strip_prefix("refs/heads/").expect("a branch");
            let input: CheckInput = serde_json::from_value(c.input.clone()).expect("decoded");
            assert_eq!(c.run, "check");
            assert_eq!(input.sha, group.merge_group.head_sha.to_ascii_lowercase());
            assert_eq!(input.merge_group.as_deref(), Some(branch));
            assert_eq!(input.pr_number, None);
            assert!(!input.needs_approval, "queued pull requests passed the branch's rules");
        }
        Event::CheckRun(_) | Event::CheckSuite(_) | Event::Ping | Event::Other(_) => {
            panic!("{ev:?} planned {p:?}")
        }
    }
});

/// The repository an event names.
fn repo_of(ev: &Event) -> String {
    match ev {
        Event::PullRequest(e) => e.repository.full_name.clone(),
        Event::Push(e) => e.repository.full_name.clone(),
        Event::CheckRun(e) => e.repository.full_name.clone(),
        Event::CheckSuite(e) => e.repository.full_name.clone(),
        Event::MergeGroup(e) => e.repository.full_name.clone(),
        Event::Ping | Event::Other(_) => String::new(),
    }
}

fn from_own_bot(ev: &Event) -> bool {
    let login = match ev {
        Event::PullRequest(e) => &e.sender.login,
        Event::Push(e) => &e.sender.login,
        Event::CheckRun(e) => &e.sender.login,
        Event::CheckSuite(e) => &e.sender.login,
        Event::MergeGroup(e) => &e.sender.login,
        Event::Ping | Event::Other(_) => return false,
    };
    login.eq_ignore_ascii_case(&format!("{APP_SLUG}[bot]"))
}

/// A re-run is asked for (`rerequested`) of Sluice's own App; it names a
/// valid instance (a check run's) or the suite's commit, and its attempt
/// comes from the signed body (what was rerequested and the suite's
/// `updated_at`), never the delivery id, so a replay is the same attempt.
fn check_reruns(ev: &Event, reruns: &[Rerun]) {
    let (action, app) = match ev {
        Event::CheckRun(e) => (&e.action, e.check_run.app.as_ref().map(|a| a.id)),
        Event::CheckSuite(e) => (&e.action, e.check_suite.app.as_ref().map(|a| a.id)),
        _ => panic!("{ev:?} planned re-runs"),
    };
    assert_eq!(action, "rerequested");
    assert_eq!(app.map(|id| id.to_string()).as_deref(), Some(APP_ID));
    assert_eq!(reruns.len(), 1);
    let r = &reruns[0];
    let (what, suite) = match ev {
        Event::CheckRun(e) => (format!("cr{}", e.check_run.id), e.check_run.check_suite.as_ref()),
        Event::CheckSuite(e) => (format!("cs{}", e.check_suite.id.unwrap_or_default()), Some(&e.check_suite)),
        _ => unreachable!(),
    };
    let want = match suite.and_then(|s| s.updated_ms()) {
        Some(ms) => format!("rerun-{what}-{}", ms.div_euclid(1000)),
        None => format!("rerun-{what}"),
    };
    assert_eq!(r.attempt, want);
    match (&r.of, ev) {
        (RerunOf::Instance(id), Event::CheckRun(e)) => {
            assert_eq!(Some(id.as_str()), e.check_run.external_id.as_deref());
            assert!(sluice::engine::InstanceId::parse(id).is_ok());
        }
        (RerunOf::Commit { repo, sha }, Event::CheckSuite(e)) => {
            assert_eq!(repo, &e.repository.full_name);
            assert!(is_lower_sha(sha), "{sha}");
        }
        (of, _) => panic!("{ev:?} planned a re-run of {of:?}"),
    }
}
