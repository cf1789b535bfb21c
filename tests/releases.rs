//! The `release-notes` run natively: a pushed tag becomes an approval pull
//! request and an `action_required` check run; a decision arrives as a
//! signed webhook that intake plans and `accept` routes through the D1
//! index to the waiting instance (the real path, over the rig's engine).

#![allow(clippy::unwrap_used)]

mod common;

use std::cell::Cell;

use serde_json::{json, Value};
use sluice::engine::{Created, Status};
use sluice::github::webhook::sign;
use sluice::http::error::ApiError;
use sluice::http::webhook::{accept, intake, InstanceCreator, IntakeConfig, WebhookHeaders};
use sluice::runs::triggers::{plan, EventSend, Plan, PlanContext};
use sluice::store::releases;

use common::block_on;
use common::fake_releases::FakeCommit;
use common::fakes::{sha, Inst, Rig, APP_ID, BRANCH, INSTALLATION, MINUTE_MS, REPO};

const SECRET: &str = "s3cret";
const CHECK: &str = "sluice/release-notes";
const HOUR_MS: i64 = 60 * MINUTE_MS;

fn toml(approvers: &str, timeout: &str) -> String {
    format!(
        "[release_notes]\ntags = \"v*\"\napprovers = [{approvers}]\nconfirmation_timeout = \"{timeout}\"\n"
    )
}

/// A repository with v1.0.0 released and v1.1.0 (at `sha('1')`) to come:
/// two merged pull requests and a plain commit between them.
fn release_rig(config: &str) -> Rig {
    let rig = Rig::new();
    let main = sha('a');
    rig.github.commit(REPO, &main, &[(".sluice.toml", config)]);
    rig.github.set_head(REPO, BRANCH, &main);
    rig.github.commit(REPO, &sha('0'), &[]);
    rig.github.add_tag(REPO, "v1.0.0", &sha('0'));
    rig.github.set_permission(REPO, "maint", "write");
    rig.github.set_permission(REPO, "reader", "read");
    tagged(&rig, "v1.1.0", '1', '0');
    rig
}

/// Tags `v` at `sha(c)`, with its commits since `sha(prev)`.
fn tagged(rig: &Rig, v: &str, c: char, prev: char) {
    rig.github.commit(REPO, &sha(c), &[]);
    rig.github.add_tag(REPO, v, &sha(c));
    let commit = |s: char, message: &str, author: &str| FakeCommit {
        sha: sha(s),
        message: message.into(),
        author: author.into(),
    };
    rig.github.set_compare(
        REPO,
        &sha(prev),
        &sha(c),
        vec![
            commit('3', "Merge pull request #3 from ana/fix\n\nFix", "ana"),
            commit('4', "Add a flag (#4)", "bo"),
            commit('5', "Tidy the docs", "carl"),
        ],
    );
    rig.github
        .merged_pull(REPO, 3, "Fix the crash", "ana", &["bug"]);
    rig.github.merged_pull(REPO, 4, "Add a flag", "bo", &[]);
}

fn push_tag(rig: &Rig, tag: &str, c: char) -> Inst {
    let body = json!({
        "ref": format!("refs/tags/{tag}"), "before": "0".repeat(40), "after": sha(c),
        "deleted": false, "head_commit": {"id": sha(c)},
        "repository": {"full_name": REPO, "name": "hello", "owner": {"login": "octo"},
                       "default_branch": BRANCH},
        "sender": {"login": "maint", "type": "User"},
        "installation": {"id": INSTALLATION}
    });
    let event = sluice::github::webhook::parse("push", body.to_string().as_bytes()).unwrap();
    let cx = PlanContext {
        app_id: Some(APP_ID),
        app_slug: Some("sluice"),
    };
    let Plan::Create(mut creates) = plan(&event, &cx) else {
        panic!("a tag push creates its release-notes run")
    };
    assert_eq!(creates.len(), 1);
    let req = creates.remove(0);
    assert_eq!(req.run, "release-notes");
    rig.create(req)
}

/// Sends routed events to the rig's instances, as the Worker's objects do.
struct RigObjects<'a> {
    insts: Vec<&'a Inst>,
    sent: Cell<u32>,
}

#[async_trait::async_trait(?Send)]
impl InstanceCreator for RigObjects<'_> {
    async fn create(&self, _req: &sluice::engine::CreateRequest) -> Result<Created, ApiError> {
        Err(ApiError::internal(
            "a decision's webhook must start no instance",
        ))
    }

    async fn send(&self, e: &EventSend) -> Result<bool, ApiError> {
        let i = self
            .insts
            .iter()
            .find(|i| i.id == e.instance_id)
            .ok_or_else(|| ApiError::internal("no such instance"))?;
        self.sent.set(self.sent.get() + 1);
        Ok(i.world
            .engine()
            .send_event(&e.event_type, &e.payload)
            .unwrap_or(false))
    }
}

/// A signed webhook through intake and `accept`: how many events reached
/// an instance.
fn webhook(rig: &Rig, insts: &[&Inst], event: &str, body: Value) -> u32 {
    thread_local!(static N: Cell<u32> = const { Cell::new(0) });
    let delivery = N.with(|n| {
        n.set(n.get() + 1);
        format!("delivery-{}", n.get())
    });
    let body = body.to_string().into_bytes();
    let signature = sign(SECRET.as_bytes(), &body);
    let h = WebhookHeaders {
        event: Some(event),
        delivery: Some(&delivery),
        signature: Some(&signature),
        content_type: Some("application/json"),
        content_length: None,
    };
    let cfg = IntakeConfig {
        secret: Some(SECRET),
        app_id: Some(APP_ID),
        app_slug: Some("sluice"),
        ..IntakeConfig::default()
    };
    let planned = intake(&h, &body, &cfg).unwrap();
    let objects = RigObjects {
        insts: insts.to_vec(),
        sent: Cell::new(0),
    };
    block_on(accept(
        rig.index.as_ref(),
        &objects,
        planned,
        rig.now(),
        "req",
    ))
    .unwrap();
    objects.sent.get()
}

fn repository() -> Value {
    json!({"full_name": REPO, "name": "hello", "owner": {"login": "octo"}, "default_branch": BRANCH})
}

/// The approval branch's head now, as GitHub reports it in the event.
fn notes_head(rig: &Rig) -> String {
    let key = (REPO.to_owned(), "sluice/release-notes/v1.1.0".to_owned());
    rig.github
        .st
        .borrow()
        .heads
        .get(&key)
        .cloned()
        .unwrap_or_else(|| sha('9'))
}

fn pull_closed(rig: &Rig, insts: &[&Inst], number: u64, merged: bool, by: &str) -> u32 {
    pull_closed_at(rig, insts, number, merged, by, &notes_head(rig))
}

fn pull_closed_at(
    rig: &Rig,
    insts: &[&Inst],
    number: u64,
    merged: bool,
    by: &str,
    head: &str,
) -> u32 {
    rig.github.close_pull_as_person(number, merged);
    let body = json!({
        "action": "closed", "number": number,
        "pull_request": {"number": number, "merged": merged,
            "head": {"sha": head, "ref": "sluice/release-notes/v1.1.0"},
            "base": {"sha": sha('a'), "ref": BRANCH}},
        "repository": repository(),
        "sender": {"login": by, "type": "User"},
        "installation": {"id": INSTALLATION}
    });
    webhook(rig, insts, "pull_request", body)
}

fn check_run_event(
    rig: &Rig,
    insts: &[&Inst],
    action: &str,
    button: Option<&str>,
    by: &str,
) -> u32 {
    let i = insts[0];
    let id = check_of(rig, i)["id"].as_u64().unwrap();
    let mut body = json!({
        "action": action,
        "check_run": {"id": id, "name": CHECK, "external_id": i.id, "head_sha": i.input["sha"],
                      "app": {"id": APP_ID.parse::<u64>().unwrap()}},
        "repository": repository(),
        "sender": {"login": by, "type": "User"},
        "installation": {"id": INSTALLATION}
    });
    if let Some(b) = button {
        body["requested_action"] = json!({"identifier": b});
    }
    webhook(rig, insts, "check_run", body)
}

/// The commit's latest `sluice/release-notes` check run: what GitHub shows.
fn latest(rig: &Rig, i: &Inst) -> common::fakes::CheckRun {
    rig.github
        .check_runs_on(i.input["sha"].as_str().unwrap())
        .into_iter()
        .filter(|c| c.name == CHECK)
        .max_by_key(|c| c.id)
        .unwrap()
}

fn check_of(rig: &Rig, i: &Inst) -> Value {
    let c = latest(rig, i);
    let mut v = c.to_json();
    v["summary"] = json!(c.summary());
    v
}

fn pr_of(rig: &Rig, tag: &str) -> u64 {
    rig.github
        .release_pulls()
        .into_iter()
        .find(|p| p.head == format!("sluice/release-notes/{tag}"))
        .unwrap()
        .number
}

/// Nothing the strict fake refused or does not serve was sent.
fn assert_clean(rig: &Rig) {
    let st = rig.github.st.borrow();
    assert!(st.unexpected.is_empty(), "{:?}", st.unexpected);
    assert!(
        st.reopened_check_runs.is_empty(),
        "a completed check run was changed: {:?}",
        st.reopened_check_runs
    );
}

/// Runs `i` to its waiting point and checks what it asked.
fn to_waiting(rig: &Rig, i: &Inst) {
    assert_eq!(rig.pass(i).status, Status::Waiting);
    let check = check_of(rig, i);
    assert_eq!(check["status"], "completed", "{check}");
    assert_eq!(check["conclusion"], "action_required", "{check}");
}

#[test]
fn a_pushed_tag_opens_an_approval_pull_request_and_asks_on_its_check_run() {
    let rig = release_rig(&toml("", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    assert_eq!(
        latest(&rig, &i).actions,
        ["release-approve", "release-reject"]
    );
    let pulls = rig.github.release_pulls();
    assert_eq!(pulls.len(), 1);
    let p = &pulls[0];
    assert_eq!(
        (p.head.as_str(), p.base.as_str(), p.state.as_str()),
        ("sluice/release-notes/v1.1.0", BRANCH, "open")
    );
    assert!(
        p.body.contains("### bug\n\n- Fix the crash (#3) by @ana"),
        "{}",
        p.body
    );
    assert!(
        p.body
            .contains("### Other changes\n\n- Add a flag (#4) by @bo"),
        "{}",
        p.body
    );
    assert!(
        p.body.contains("- 5555555 Tidy the docs by @carl"),
        "{}",
        p.body
    );
    assert!(p.body.contains("v1.0.0...v1.1.0"), "{}", p.body);
    // The branch carries the notes file.
    let head = rig.github.st.borrow().heads[&(REPO.to_owned(), p.head.clone())].clone();
    let files = rig.github.st.borrow().commits[&(REPO.to_owned(), head)].clone();
    assert!(files["release-notes/v1.1.0.md"].contains("Fix the crash"));
    // The index finds the instance by its pull request and its check run.
    let found = block_on(releases::waiting_on_pull(
        rig.index.as_ref(),
        REPO,
        p.number,
        rig.now(),
    ))
    .unwrap();
    assert_eq!(found.as_deref(), Some(i.id.as_str()));
    // Listed as waiting, with who decides and until when.
    let list = block_on(sluice::http::lists::executions(
        rig.index.as_ref(),
        "status=waiting",
    ))
    .unwrap();
    let row = &list["executions"][0];
    assert_eq!(row["id"], json!(i.id));
    assert_eq!(
        row["waiting_for"]["decider"],
        "someone with write access to octo/hello"
    );
    assert_eq!(
        row["waiting_for"]["until_ms"],
        json!(rig.now() + 72 * HOUR_MS)
    );
    assert!(
        rig.github.st.borrow().unexpected.is_empty(),
        "{:?}",
        rig.github.st.borrow().unexpected
    );
}

#[test]
fn merging_the_pull_request_publishes_the_release() {
    let rig = release_rig(&toml("", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "maint"), 1);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    let releases = rig.github.releases();
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].tag, "v1.1.0");
    assert!(releases[0].body.contains("Fix the crash (#3) by @ana"));
    assert_eq!(
        releases[0].make_latest.as_deref(),
        Some("true"),
        "the newest tag"
    );
    let check = check_of(&rig, &i);
    assert_eq!(check["conclusion"], "success", "{check}");
    assert!(
        rig.github.notifications().is_empty(),
        "an approval announces nothing"
    );
    // A redelivery of the same decision finds nobody waiting.
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "maint"), 0);
    assert_clean(&rig);
}

#[test]
fn approve_on_the_check_run_publishes_and_a_replayed_publish_makes_one_release() {
    let rig = release_rig(&toml("", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    // GitHub creates the release and the answer is lost: the retry finds it.
    rig.github.lose_answer_next("create-release");
    assert_eq!(
        check_run_event(
            &rig,
            &[&i],
            "requested_action",
            Some("release-approve"),
            "maint"
        ),
        1
    );
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert_eq!(
        rig.github.releases().len(),
        1,
        "one release whatever the replays"
    );
    assert_eq!(rig.github.calls_to("create-release").len(), 1);
    let pr = pr_of(&rig, "v1.1.0");
    assert!(rig.github.comments_on(pr)[0].contains("Released `v1.1.0`"));
    assert_eq!(
        rig.github.release_pulls()[0].state,
        "open",
        "left for the team"
    );
    assert!(rig.github.calls_to("release-by-tag").len() >= 2);
    assert_eq!(check_of(&rig, &i)["conclusion"], "success");
    assert_clean(&rig);
}

#[test]
fn reject_or_closing_unmerged_publishes_nothing_and_ends_neutral_rejected() {
    for by_button in [true, false] {
        let rig = release_rig(&toml("", "72h"));
        let i = push_tag(&rig, "v1.1.0", '1');
        to_waiting(&rig, &i);
        let pr = pr_of(&rig, "v1.1.0");
        let sent = if by_button {
            check_run_event(
                &rig,
                &[&i],
                "requested_action",
                Some("release-reject"),
                "maint",
            )
        } else {
            pull_closed(&rig, &[&i], pr, false, "maint")
        };
        assert_eq!(sent, 1);
        assert_eq!(rig.run_to_end(&i), Status::Skipped);
        assert_eq!(rig.row(&i).reason.as_deref(), Some("rejected"));
        assert_eq!(check_of(&rig, &i)["conclusion"], "neutral");
        assert!(rig.github.releases().is_empty());
        assert_eq!(rig.github.release_pulls()[0].state, "closed");
        assert!(
            rig.github.notifications().is_empty(),
            "a person's answer is not announced"
        );
    }
}

#[test]
fn someone_who_may_not_decide_is_answered_on_the_pull_request_and_decides_nothing() {
    // Named approvers: write access alone does not decide.
    let rig = release_rig(&toml("\"Ana\"", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    let pr = pr_of(&rig, "v1.1.0");
    check_run_event(
        &rig,
        &[&i],
        "requested_action",
        Some("release-approve"),
        "maint",
    );
    assert_eq!(rig.pass(&i).status, Status::Waiting);
    pull_closed(&rig, &[&i], pr, false, "reader");
    assert_eq!(rig.pass(&i).status, Status::Waiting);
    let comments = rig.github.comments_on(pr);
    assert_eq!(comments.len(), 2, "{comments:?}");
    assert!(
        comments[0].contains("@maint pressed Approve, but only @Ana may decide"),
        "{comments:?}"
    );
    assert!(
        comments[1].contains("@reader closed the pull request"),
        "{comments:?}"
    );
    assert!(rig.github.releases().is_empty());
    // The named approver decides (logins compare as GitHub does).
    check_run_event(
        &rig,
        &[&i],
        "requested_action",
        Some("release-approve"),
        "ana",
    );
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert_eq!(rig.github.releases().len(), 1);
}

#[test]
fn an_unanswered_release_times_out_closes_its_pull_request_and_is_announced() {
    let rig = release_rig(&toml("", "30m"));
    let i = push_tag(&rig, "v1.1.0", '1');
    let entered_ms = rig.now();
    to_waiting(&rig, &i);
    rig.clock.set(entered_ms + 30 * MINUTE_MS - 1);
    assert_eq!(
        rig.pass(&i).status,
        Status::Waiting,
        "not before the window ends"
    );
    assert_eq!(rig.run_to_end(&i), Status::Skipped);
    assert_eq!(rig.row(&i).reason.as_deref(), Some("confirmation_timeout"));
    assert_eq!(check_of(&rig, &i)["conclusion"], "neutral");
    let pr = rig.github.release_pulls()[0].clone();
    assert_eq!(pr.state, "closed");
    assert!(rig.github.comments_on(pr.number)[0].contains("within 30 minutes"));
    let n = rig.github.notifications();
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].header("X-Sluice-Event"), Some("release_auto_skipped"));
    assert_eq!(n[0].json()["reason"], "confirmation_timeout");
    assert_eq!(n[0].json()["tag"], "v1.1.0");
    assert!(n[0].signature_is_valid());
    assert!(rig.github.releases().is_empty());
    assert_clean(&rig);
}

#[test]
fn a_decision_arriving_after_the_deadline_decides_nothing() {
    let rig = release_rig(&toml("", "30m"));
    let i = push_tag(&rig, "v1.1.0", '1');
    let entered_ms = rig.now();
    to_waiting(&rig, &i);
    // The window has ended but no pass has timed the wait out yet: a merge
    // and an Approve then reach no instance.
    rig.clock.set(entered_ms + 30 * MINUTE_MS + 1);
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(
        check_run_event(
            &rig,
            &[&i],
            "requested_action",
            Some("release-approve"),
            "maint"
        ),
        0
    );
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "maint"), 0);
    assert_eq!(rig.run_to_end(&i), Status::Skipped);
    assert_eq!(rig.row(&i).reason.as_deref(), Some("confirmation_timeout"));
    assert!(rig.github.releases().is_empty());
}

#[test]
fn an_older_version_released_after_a_newer_tag_does_not_become_latest() {
    let rig = release_rig(&toml("", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    // v1.10.0 was released while v1.1.0 waited (its own approval aside):
    // the older one, approved now, is released without taking "Latest".
    rig.github.commit(REPO, &sha('7'), &[]);
    rig.github.add_tag(REPO, "v1.10.0", &sha('7'));
    rig.github.add_release(REPO, "v1.10.0");
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "maint"), 1);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    let releases = rig.github.releases();
    assert_eq!(releases.len(), 2);
    assert_eq!(releases[1].tag, "v1.1.0");
    assert_eq!(releases[1].make_latest.as_deref(), Some("false"));
    assert!(!releases[1].prerelease);
}

#[test]
fn a_rerun_regenerates_the_notes_and_restarts_the_window() {
    let rig = release_rig(&toml("", "1h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    let entered_ms = rig.now();
    to_waiting(&rig, &i);
    rig.clock.set(entered_ms + 40 * MINUTE_MS);
    // New information: another merged pull request in the range.
    rig.github
        .merged_pull(REPO, 6, "Speed up", "dee", &["perf"]);
    let mut commits = vec![FakeCommit {
        sha: sha('6'),
        message: "Speed up (#6)".into(),
        author: "dee".into(),
    }];
    commits
        .extend(rig.github.rel.borrow().compares[&(REPO.to_owned(), sha('0'), sha('1'))].clone());
    rig.github.set_compare(REPO, &sha('0'), &sha('1'), commits);
    assert_eq!(
        check_run_event(&rig, &[&i], "rerequested", None, "maint"),
        1
    );
    let replanned_ms = rig.now();
    assert_eq!(rig.pass(&i).status, Status::Waiting);
    assert_eq!(check_of(&rig, &i)["conclusion"], "action_required");
    let pr = rig.github.release_pulls()[0].clone();
    assert!(
        pr.body.contains("### perf\n\n- Speed up (#6) by @dee"),
        "{}",
        pr.body
    );
    assert_eq!(
        rig.github.release_pulls().len(),
        1,
        "the same pull request, updated"
    );
    // Past the first window, within the second.
    rig.clock.set(entered_ms + HOUR_MS + MINUTE_MS);
    assert_eq!(
        rig.pass(&i).status,
        Status::Waiting,
        "the replan restarted the window"
    );
    let list = block_on(sluice::http::lists::executions(
        rig.index.as_ref(),
        "status=waiting",
    ))
    .unwrap();
    assert_eq!(
        list["executions"][0]["waiting_for"]["until_ms"],
        json!(replanned_ms + HOUR_MS)
    );
    rig.clock.set(replanned_ms + HOUR_MS);
    assert_eq!(rig.run_to_end(&i), Status::Skipped);
    assert_eq!(rig.row(&i).reason.as_deref(), Some("confirmation_timeout"));
}

#[test]
fn a_newer_tag_waiting_supersedes_the_older_but_never_one_publishing() {
    let rig = release_rig(&toml("", "72h"));
    let older = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &older);
    tagged(&rig, "v1.2.0", '2', '1');
    let newer = push_tag(&rig, "v1.2.0", '2');
    to_waiting(&rig, &newer);
    assert_eq!(rig.deliver(&older), 1, "the newer woke the older");
    assert_eq!(rig.run_to_end(&older), Status::Skipped);
    assert_eq!(rig.row(&older).reason.as_deref(), Some("superseded"));
    let summary = check_of(&rig, &older)["summary"].to_string();
    assert!(summary.contains("Superseded by `v1.2.0`"), "{summary}");
    let old_pr = pr_of(&rig, "v1.1.0");
    let pulls = rig.github.release_pulls();
    assert_eq!(
        pulls.iter().find(|p| p.number == old_pr).unwrap().state,
        "closed"
    );
    let n = rig.github.notifications();
    assert_eq!(n[0].json()["reason"], "superseded");
    assert_eq!(n[0].json()["newer_revision"], "v1.2.0");
    // A late decision on the superseded one finds nobody waiting.
    assert_eq!(
        pull_closed(&rig, &[&older, &newer], old_pr, true, "maint"),
        0
    );
    assert_eq!(
        rig.pass(&newer).status,
        Status::Waiting,
        "the newer still waits"
    );

    // One already approved (publishing) is never touched by a newer tag.
    let rig = release_rig(&toml("", "72h"));
    let first = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &first);
    check_run_event(
        &rig,
        &[&first],
        "requested_action",
        Some("release-approve"),
        "maint",
    );
    // Three failures: the retry's backoff outgrows the in-process wait and
    // the instance suspends mid-publish.
    rig.github.fail_next("create-release", 3, 502);
    assert_eq!(
        rig.pass(&first).status,
        Status::Waiting,
        "publishing, retrying GitHub"
    );
    tagged(&rig, "v1.2.0", '2', '1');
    let second = push_tag(&rig, "v1.2.0", '2');
    to_waiting(&rig, &second);
    assert_eq!(
        rig.deliver(&first),
        0,
        "nothing to wake: it is past waiting"
    );
    rig.github.st.borrow_mut().faults.clear();
    assert_eq!(rig.run_to_end(&first), Status::Complete);
    assert_eq!(rig.github.releases()[0].tag, "v1.1.0");
    assert_eq!(rig.pass(&second).status, Status::Waiting);
    assert_clean(&rig);
}

#[test]
fn a_release_terminated_while_it_waits_leaves_the_index_and_closes_its_pull_request() {
    let rig = release_rig(&toml("", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(
        rig.command(&i, sluice::engine::Command::Terminate),
        Status::Terminated
    );
    rig.finalize(&i);
    assert_eq!(check_of(&rig, &i)["conclusion"], "cancelled");
    assert_eq!(rig.github.release_pulls()[0].state, "closed");
    assert!(rig.github.comments_on(pr)[0].contains("ended terminated"));
    assert_eq!(
        pull_closed(&rig, &[&i], pr, true, "maint"),
        0,
        "a decision after the end finds nobody waiting"
    );
    assert!(rig.github.releases().is_empty());
    assert_clean(&rig);
}

#[test]
fn a_replan_that_would_outlive_the_longest_ceiling_is_refused_and_the_window_stands() {
    let rig = release_rig(&toml("", "120h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    let entered_ms = rig.now();
    to_waiting(&rig, &i);
    rig.clock.set(entered_ms + 50 * HOUR_MS);
    check_run_event(&rig, &[&i], "rerequested", None, "maint");
    assert_eq!(rig.pass(&i).status, Status::Waiting);
    let pr = pr_of(&rig, "v1.1.0");
    assert!(rig.github.comments_on(pr)[0].contains("would outlive the run's longest ceiling"));
    // Later passes replay the same decision whatever the clock says.
    rig.clock.set(entered_ms + 119 * HOUR_MS);
    assert_eq!(rig.pass(&i).status, Status::Waiting);
    let list = block_on(sluice::http::lists::executions(
        rig.index.as_ref(),
        "status=waiting",
    ))
    .unwrap();
    assert_eq!(
        list["executions"][0]["waiting_for"]["until_ms"],
        json!(entered_ms + 120 * HOUR_MS)
    );
    rig.clock.set(entered_ms + 120 * HOUR_MS);
    assert_eq!(rig.run_to_end(&i), Status::Skipped);
    assert_eq!(rig.row(&i).reason.as_deref(), Some("confirmation_timeout"));
    assert_clean(&rig);
}

#[test]
fn the_sweep_purges_decided_approvals_past_the_retention_and_keeps_waiting_ones() {
    let rig = release_rig(&toml("", "72h"));
    let decided = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &decided);
    check_run_event(
        &rig,
        &[&decided],
        "requested_action",
        Some("release-reject"),
        "maint",
    );
    assert_eq!(rig.run_to_end(&decided), Status::Skipped);
    tagged(&rig, "v1.2.0", '2', '1');
    let waiting = push_tag(&rig, "v1.2.0", '2');
    to_waiting(&rig, &waiting);
    let db = rig.index.as_ref();
    rig.clock
        .advance(sluice::limits::RETENTION_MS_DEFAULT + MINUTE_MS);
    rig.sweep();
    assert!(
        block_on(releases::get(db, &decided.id)).unwrap().is_none(),
        "decided and old: gone"
    );
    assert!(
        block_on(releases::get(db, &waiting.id)).unwrap().is_some(),
        "a waiting approval is its instance's index"
    );
}

/// The notes were approved for the commit the tag named: a tag moved to
/// another commit meanwhile publishes nothing.
#[test]
fn a_tag_moved_while_it_waited_is_not_released() {
    let rig = release_rig(&toml("", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    // Someone re-points the tag at other code.
    rig.github.commit(REPO, &sha('9'), &[]);
    rig.github
        .rel
        .borrow_mut()
        .tags
        .insert(REPO.into(), vec![("v1.1.0".into(), sha('9'))]);
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "maint"), 1);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert!(
        rig.github.releases().is_empty(),
        "no release of unapproved code"
    );
    let check = check_of(&rig, &i);
    assert_eq!(check["conclusion"], "failure", "{check}");
    assert!(
        check["summary"]
            .as_str()
            .is_some_and(|s| s.contains("now names")),
        "{check}"
    );
}

/// A merge approves only the notes as proposed: a pull request someone
/// pushed to after Sluice proposed it publishes nothing when merged, and
/// the decider is told to press Approve instead.
#[test]
fn merging_a_pull_request_changed_after_the_proposal_publishes_nothing() {
    let rig = release_rig(&toml("", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    let pr = pr_of(&rig, "v1.1.0");
    // Someone pushed other code to the approval branch; the approver merges.
    let pushed = sha('7');
    assert_eq!(pull_closed_at(&rig, &[&i], pr, true, "maint", &pushed), 1);
    // The instance answers, then waits on (to its window's end here).
    assert_eq!(rig.run_to_end(&i), Status::Skipped);
    assert!(
        rig.github.releases().is_empty(),
        "a changed merge published nothing"
    );
    assert_eq!(rig.row(&i).reason.as_deref(), Some("confirmation_timeout"));
    let told = rig.github.comments_on(pr);
    assert!(
        told.iter()
            .any(|c| c.contains("changed after Sluice proposed")),
        "{told:?}"
    );
    assert!(
        told.iter()
            .any(|c| c.contains("proposed the notes (its head")
                && c.contains("published nothing. Press **Approve** on the")),
        "one sentence, no runs of spaces: {told:?}"
    );
}
