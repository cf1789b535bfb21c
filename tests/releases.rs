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
use sluice::runs::release::branch_of;
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
    push_tag_object(rig, tag, &sha(c), &sha(c))
}

/// A push of `tag` as GitHub sends it: `after` names what the ref names
/// (the commit, or an annotated tag's object), `head_commit` the commit.
/// Each push is one of its own (its own `pushed_at`).
fn push_tag_object(rig: &Rig, tag: &str, after: &str, commit: &str) -> Inst {
    thread_local!(static PUSHES: Cell<u32> = const { Cell::new(0) });
    // Each push is a push of its own: GitHub signs when it happened.
    let pushed_at = PUSHES.with(|n| {
        n.set(n.get() + 1);
        1_700_000_000 + n.get()
    });
    let body = json!({
        "ref": format!("refs/tags/{tag}"), "before": "0".repeat(40), "after": after,
        "deleted": false, "head_commit": {"id": commit},
        "repository": {"full_name": REPO, "name": "hello", "owner": {"login": "octo"},
                       "default_branch": BRANCH, "pushed_at": pushed_at},
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
    assert_eq!(
        req.input["sha"],
        json!(commit),
        "the commit, never a tag object"
    );
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

/// The head of pull request `number`'s branch now, as GitHub reports it in
/// the event, and the branch.
fn pull_head(rig: &Rig, number: u64) -> (String, String) {
    let branch = rig
        .github
        .release_pulls()
        .into_iter()
        .find(|p| p.number == number)
        .map(|p| p.head)
        .unwrap_or_default();
    let key = (REPO.to_owned(), branch.clone());
    let head = rig.github.st.borrow().heads.get(&key).cloned();
    (head.unwrap_or_else(|| sha('9')), branch)
}

fn pull_closed(rig: &Rig, insts: &[&Inst], number: u64, merged: bool, by: &str) -> u32 {
    pull_closed_at(rig, insts, number, merged, by, &pull_head(rig, number).0)
}

fn pull_closed_at(
    rig: &Rig,
    insts: &[&Inst],
    number: u64,
    merged: bool,
    by: &str,
    head: &str,
) -> u32 {
    pull_closed_event(rig, insts, number, merged, by, head, None)
}

/// A merge or close of pull request `number` that GitHub dated `at_ms`,
/// delivered now.
fn pull_closed_dated(rig: &Rig, insts: &[&Inst], number: u64, by: &str, at_ms: i64) -> u32 {
    let head = pull_head(rig, number).0;
    pull_closed_event(rig, insts, number, true, by, &head, Some(at_ms))
}

fn pull_closed_event(
    rig: &Rig,
    insts: &[&Inst],
    number: u64,
    merged: bool,
    by: &str,
    head: &str,
    at_ms: Option<i64>,
) -> u32 {
    rig.github.close_pull_as_person(number, merged);
    let branch = pull_head(rig, number).1;
    let at = at_ms.map(iso);
    let body = json!({
        "action": "closed", "number": number,
        "pull_request": {"number": number, "merged": merged,
            "merged_at": if merged { at.clone() } else { None }, "closed_at": at,
            "head": {"sha": head, "ref": branch},
            "base": {"sha": sha('a'), "ref": BRANCH}},
        "repository": repository(),
        "sender": {"login": by, "type": "User"},
        "installation": {"id": INSTALLATION}
    });
    webhook(rig, insts, "pull_request", body)
}

/// GitHub's timestamp (whole seconds, UTC) of `ms`.
fn iso(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since the epoch (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{y:04}-{m:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
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

/// The approval pull request of `tag`'s latest push.
fn pr_of(rig: &Rig, tag: &str) -> u64 {
    rig.github
        .release_pulls()
        .into_iter()
        .filter(|p| p.head.starts_with(&format!("sluice/release-notes/{tag}-")))
        .map(|p| p.number)
        .max()
        .unwrap()
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
        (branch_of(&i.id, "v1.1.0").as_str(), BRANCH, "open")
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
        false,
    ))
    .unwrap();
    assert_eq!(found.map(|w| w.instance_id), Some(i.id.clone()));
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

// --- tags as release tools make them: peeled to their commit ---

/// `git tag -a v1.1.0 -m v1.1.0` (what `npm version` and `cargo release`
/// make): the ref names a tag object; the push's `head_commit` the commit.
/// Its named approver's merge publishes it, and the tag was read through
/// its object.
#[test]
fn an_annotated_tag_is_released_when_its_approver_merges() {
    let rig = release_rig(&toml("\"ana\"", "72h"));
    let object = rig
        .github
        .add_tag_object(REPO, "v1.1.0", "commit", &sha('1'));
    let i = push_tag_object(&rig, "v1.1.0", &object, &sha('1'));
    to_waiting(&rig, &i);
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "ana"), 1);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    let releases = rig.github.releases();
    assert_eq!(releases.len(), 1, "{:?}", check_of(&rig, &i));
    assert_eq!(releases[0].tag, "v1.1.0");
    assert_eq!(releases[0].target.as_deref(), Some(sha('1').as_str()));
    let peeled = rig.github.calls_to("tag-object");
    assert!(
        peeled.iter().all(|c| c.path.ends_with(&object)),
        "{peeled:?}"
    );
    assert!(!peeled.is_empty(), "the tag object was read");
    assert_eq!(check_of(&rig, &i)["conclusion"], "success");
    assert_clean(&rig);
}

/// A tag of a tag is peeled through both objects; Approve publishes.
#[test]
fn a_tag_of_a_tag_is_peeled_to_its_commit() {
    let rig = release_rig(&toml("", "72h"));
    let inner = rig
        .github
        .add_tag_object(REPO, "v1.1.0", "commit", &sha('1'));
    let outer = rig.github.add_tag_object(REPO, "v1.1.0", "tag", &inner);
    let i = push_tag_object(&rig, "v1.1.0", &outer, &sha('1'));
    to_waiting(&rig, &i);
    check_run_event(
        &rig,
        &[&i],
        "requested_action",
        Some("release-approve"),
        "maint",
    );
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert_eq!(rig.github.releases().len(), 1);
    let paths: Vec<String> = rig
        .github
        .calls_to("tag-object")
        .into_iter()
        .map(|c| c.path)
        .collect();
    assert!(paths.iter().any(|p| p.ends_with(&outer)), "{paths:?}");
    assert!(paths.iter().any(|p| p.ends_with(&inner)), "{paths:?}");
    assert_clean(&rig);
}

/// A tag deleted while its release waited is made again at the commit the
/// notes were approved for.
#[test]
fn a_deleted_tag_is_made_again_at_the_approved_commit() {
    let rig = release_rig(&toml("", "72h"));
    let object = rig
        .github
        .add_tag_object(REPO, "v1.1.0", "commit", &sha('1'));
    let i = push_tag_object(&rig, "v1.1.0", &object, &sha('1'));
    to_waiting(&rig, &i);
    rig.github.move_tag(REPO, "v1.1.0", None);
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "maint"), 1);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    let releases = rig.github.releases();
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].target.as_deref(), Some(sha('1').as_str()));
}

/// An annotated tag made again at other code while it waited publishes
/// nothing, and the refusal names the commit it names now (never a tag
/// object).
#[test]
fn an_annotated_tag_moved_to_another_commit_is_not_released() {
    let rig = release_rig(&toml("", "72h"));
    let object = rig
        .github
        .add_tag_object(REPO, "v1.1.0", "commit", &sha('1'));
    let i = push_tag_object(&rig, "v1.1.0", &object, &sha('1'));
    to_waiting(&rig, &i);
    rig.github.commit(REPO, &sha('9'), &[]);
    rig.github
        .add_tag_object(REPO, "v1.1.0", "commit", &sha('9'));
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "maint"), 1);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert!(rig.github.releases().is_empty());
    let check = check_of(&rig, &i);
    assert_eq!(check["conclusion"], "failure", "{check}");
    let summary = check["summary"].as_str().unwrap();
    assert!(
        summary.contains(&format!("now names {}, not {}", sha('9'), sha('1'))),
        "{summary}"
    );
}

/// A chain of tag objects longer than the bound is not followed: nothing
/// is released.
#[test]
fn a_chain_of_tags_longer_than_the_bound_is_refused() {
    let rig = release_rig(&toml("", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    // Re-made as a chain of tag objects one longer than is followed.
    let mut at = rig
        .github
        .add_tag_object(REPO, "v1.1.0", "commit", &sha('1'));
    for _ in 0..sluice::github::releases::TAG_PEEL_DEPTH_MAX {
        at = rig.github.add_tag_object(REPO, "v1.1.0", "tag", &at);
    }
    check_run_event(
        &rig,
        &[&i],
        "requested_action",
        Some("release-approve"),
        "maint",
    );
    assert_eq!(rig.run_to_end(&i), Status::Errored);
    assert!(rig.github.releases().is_empty());
    let followed = rig.github.calls_to("tag-object").len() as u32;
    assert_eq!(
        followed,
        sluice::github::releases::TAG_PEEL_DEPTH_MAX,
        "the chain is followed no further than the bound"
    );
}

// --- the wait's rules ---

/// Sends a decision straight to the instance, as routing would: what the
/// instance itself does with an event routing let through.
fn send_decision(i: &Inst, decision: Value) {
    let sent = i
        .world
        .engine()
        .send_event(sluice::runs::approval::RELEASE_EVENT, &decision)
        .unwrap();
    assert!(sent);
}

/// 60 presses by someone who may decide nothing: routing lets a window
/// have 3 of them, the instance answers once and counts no round, so the
/// wait stays open (50 rounds would have ended it); the approver's merge
/// still publishes.
#[test]
fn sixty_presses_by_someone_who_may_not_decide_leave_the_wait_open() {
    let rig = release_rig(&toml("\"Ana\"", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    let steps_waiting = rig.journal(&i).len();
    let routed: u32 = (0..60)
        .map(|_| {
            check_run_event(
                &rig,
                &[&i],
                "requested_action",
                Some("release-approve"),
                "maint",
            )
        })
        .sum();
    assert_eq!(routed, releases::SENDER_EVENTS_PER_WINDOW_MAX);
    assert_eq!(rig.pass(&i).status, Status::Waiting);
    // Were routing to let them all through, they still cost no round.
    let check_id = check_of(&rig, &i)["id"].as_u64().unwrap();
    for _ in 0..60 {
        send_decision(
            &i,
            json!({"kind": "button", "check_run_id": check_id,
                   "identifier": "release-approve", "sender": "maint"}),
        );
    }
    assert_eq!(rig.pass(&i).status, Status::Waiting, "the wait is open");
    let pr = pr_of(&rig, "v1.1.0");
    let comments = rig.github.comments_on(pr);
    assert_eq!(comments.len(), 1, "answered once: {comments:?}");
    assert!(comments[0].contains("@maint pressed Approve, but only @Ana may decide"));
    // Each press cost its wait (the first filled the wait already
    // journaled, the next one waits now); the first also the decider
    // check and the answer.
    assert_eq!(rig.journal(&i).len(), steps_waiting + 63 + 2);
    assert_eq!(pull_closed(&rig, &[&i], pr, true, "ana"), 1);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert_eq!(rig.github.releases().len(), 1);
    assert_clean(&rig);
}

/// Routing takes a window's events from a bounded number of senders; a
/// named approver is past that bound.
#[test]
fn routing_bounds_the_senders_of_a_window_but_never_a_named_approver() {
    let rig = release_rig(&toml("\"Ana\"", "72h"));
    let i = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &i);
    let max = releases::SENDERS_PER_WINDOW_MAX;
    for n in 0..max {
        let by = format!("user{n}");
        let sent = check_run_event(&rig, &[&i], "requested_action", Some("release-reject"), &by);
        assert_eq!(sent, 1, "{by}");
    }
    let late = check_run_event(
        &rig,
        &[&i],
        "requested_action",
        Some("release-reject"),
        "one-more",
    );
    assert_eq!(late, 0, "past the senders a window takes");
    assert_eq!(rig.pass(&i).status, Status::Waiting);
    assert_eq!(
        rig.github.comments_on(pr_of(&rig, "v1.1.0")).len() as u32,
        max
    );
    // Many presses of the approver herself all reach the wait.
    for _ in 0..releases::SENDER_EVENTS_PER_WINDOW_MAX + 2 {
        assert_eq!(
            check_run_event(&rig, &[&i], "requested_action", Some("nope"), "ANA"),
            1
        );
    }
    let sent = check_run_event(
        &rig,
        &[&i],
        "requested_action",
        Some("release-approve"),
        "ana",
    );
    assert_eq!(sent, 1, "a named approver's answer always reaches her wait");
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert_eq!(rig.github.releases().len(), 1);
}

/// A merge GitHub dated before the deadline decides though its delivery
/// arrives after it (within the grace); a press then decides nothing.
#[test]
fn a_merge_dated_before_the_deadline_and_delivered_after_it_publishes() {
    let rig = release_rig(&toml("", "30m"));
    let i = push_tag(&rig, "v1.1.0", '1');
    let entered_ms = rig.now();
    to_waiting(&rig, &i);
    let deadline_ms = entered_ms + 30 * MINUTE_MS;
    rig.clock.set(deadline_ms + 5 * MINUTE_MS);
    assert_eq!(
        rig.pass(&i).status,
        Status::Waiting,
        "it listens past the deadline"
    );
    let press = check_run_event(
        &rig,
        &[&i],
        "requested_action",
        Some("release-approve"),
        "maint",
    );
    assert_eq!(
        press, 0,
        "a press has no date: after the deadline it is too late"
    );
    let pr = pr_of(&rig, "v1.1.0");
    let merged_ms = deadline_ms - MINUTE_MS;
    assert_eq!(pull_closed_dated(&rig, &[&i], pr, "maint", merged_ms), 1);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert_eq!(rig.github.releases().len(), 1);
    assert_eq!(check_of(&rig, &i)["conclusion"], "success");
}

/// A merge GitHub dated after the deadline is answered and decides
/// nothing; the window ends at its grace, unanswered.
#[test]
fn a_merge_dated_after_the_deadline_is_answered_and_publishes_nothing() {
    let rig = release_rig(&toml("", "30m"));
    let i = push_tag(&rig, "v1.1.0", '1');
    let entered_ms = rig.now();
    to_waiting(&rig, &i);
    let deadline_ms = entered_ms + 30 * MINUTE_MS;
    rig.clock.set(deadline_ms + 2 * MINUTE_MS);
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(
        pull_closed_dated(&rig, &[&i], pr, "maint", deadline_ms + MINUTE_MS),
        1
    );
    assert_eq!(rig.pass(&i).status, Status::Waiting);
    let told = rig.github.comments_on(pr);
    assert!(
        told[0].contains("@maint merged the pull request 60 s after the window"),
        "{told:?}"
    );
    assert_eq!(rig.run_to_end(&i), Status::Skipped);
    assert_eq!(rig.row(&i).reason.as_deref(), Some("confirmation_timeout"));
    assert!(rig.github.releases().is_empty());
    // The window ended at the deadline plus its grace (the window itself,
    // 30 minutes, here).
    let ended = rig
        .journal(&i)
        .into_iter()
        .find(|e| e.name.starts_with("claim decision"));
    assert_eq!(
        ended.map(|e| e.started_ms),
        Some(deadline_ms + 30 * MINUTE_MS)
    );
}

/// Past the grace, a dated decision reaches nobody; one routed before the
/// grace ended is taken even when the pass runs after it: the timeout's
/// claim never races it.
#[test]
fn the_grace_ends_the_wait_and_a_decision_routed_within_it_still_wins() {
    let rig = release_rig(&toml("", "30m"));
    let i = push_tag(&rig, "v1.1.0", '1');
    let entered_ms = rig.now();
    to_waiting(&rig, &i);
    let deadline_ms = entered_ms + 30 * MINUTE_MS;
    let until_ms = deadline_ms + 30 * MINUTE_MS;
    let pr = pr_of(&rig, "v1.1.0");
    rig.clock.set(until_ms - 1);
    assert_eq!(
        pull_closed_dated(&rig, &[&i], pr, "maint", deadline_ms - 1000),
        1
    );
    rig.clock.set(until_ms + MINUTE_MS);
    assert_eq!(rig.run_to_end(&i), Status::Complete);
    assert_eq!(rig.github.releases().len(), 1);

    let rig = release_rig(&toml("", "30m"));
    let i = push_tag(&rig, "v1.1.0", '1');
    let entered_ms = rig.now();
    to_waiting(&rig, &i);
    let deadline_ms = entered_ms + 30 * MINUTE_MS;
    rig.clock.set(deadline_ms + 30 * MINUTE_MS);
    let pr = pr_of(&rig, "v1.1.0");
    assert_eq!(
        pull_closed_dated(&rig, &[&i], pr, "maint", deadline_ms - 1000),
        0,
        "past the grace"
    );
    assert_eq!(rig.run_to_end(&i), Status::Skipped);
    assert!(rig.github.releases().is_empty());
}

// --- one tag push, one proposal ---

/// Moves `v1.1.0` to `sha('2')`, with its commits since v1.0.0.
fn retag(rig: &Rig) {
    rig.github.commit(REPO, &sha('2'), &[]);
    rig.github.move_tag(REPO, "v1.1.0", Some(&sha('2')));
    let commits = rig.github.rel.borrow().compares[&(REPO.to_owned(), sha('0'), sha('1'))].clone();
    rig.github.set_compare(REPO, &sha('0'), &sha('2'), commits);
}

/// A tag pushed again at another commit proposes on a pull request of its
/// own and supersedes the earlier push's, which is closed with a comment
/// naming the new commit; the new one publishes at its commit.
#[test]
fn a_tag_pushed_again_at_another_commit_supersedes_the_earlier_proposal() {
    let rig = release_rig(&toml("", "72h"));
    let first = push_tag(&rig, "v1.1.0", '1');
    to_waiting(&rig, &first);
    let first_pr = pr_of(&rig, "v1.1.0");
    retag(&rig);
    let second = push_tag(&rig, "v1.1.0", '2');
    assert_ne!(first.id, second.id, "one push, one instance");
    to_waiting(&rig, &second);
    let second_pr = pr_of(&rig, "v1.1.0");
    assert_ne!(first_pr, second_pr, "a pull request of its own");
    assert_eq!(rig.deliver(&first), 1, "the new push woke the earlier");
    assert_eq!(rig.run_to_end(&first), Status::Skipped);
    assert_eq!(rig.row(&first).reason.as_deref(), Some("superseded"));
    let pulls = rig.github.release_pulls();
    let state = |n: u64| pulls.iter().find(|p| p.number == n).unwrap().state.clone();
    assert_eq!(
        (state(first_pr).as_str(), state(second_pr).as_str()),
        ("closed", "open")
    );
    let said = rig.github.comments_on(first_pr);
    assert!(
        said[0].contains(&format!(
            "`v1.1.0` was pushed again and now names {}",
            sha('2')
        )),
        "{said:?}"
    );
    let n = rig.github.notifications();
    assert_eq!(n[0].json()["reason"], "superseded");
    assert_eq!(n[0].json()["newer_revision"], json!(sha('2')));
    assert_eq!(rig.pass(&second).status, Status::Waiting);
    assert_eq!(
        pull_closed(&rig, &[&first, &second], second_pr, true, "maint"),
        1
    );
    assert_eq!(rig.run_to_end(&second), Status::Complete);
    let releases = rig.github.releases();
    assert_eq!(releases.len(), 1);
    assert_eq!(releases[0].target.as_deref(), Some(sha('2').as_str()));
    assert_clean(&rig);
}

/// The earlier push reaching its wait after the later one (its instance was
/// slow) finds the tag names another commit and supersedes itself.
#[test]
fn an_earlier_push_entering_its_wait_late_supersedes_itself() {
    let rig = release_rig(&toml("", "72h"));
    let first = push_tag(&rig, "v1.1.0", '1');
    retag(&rig);
    let second = push_tag(&rig, "v1.1.0", '2');
    to_waiting(&rig, &second);
    assert_eq!(rig.run_to_end(&first), Status::Skipped);
    assert_eq!(rig.row(&first).reason.as_deref(), Some("superseded"));
    assert_eq!(
        rig.pass(&second).status,
        Status::Waiting,
        "the later push still waits"
    );
    let open: Vec<_> = rig
        .github
        .release_pulls()
        .into_iter()
        .filter(|p| p.state == "open")
        .collect();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].head, branch_of(&second.id, "v1.1.0"));
}
