//! Issue 24: pull-request previews. The real `preview`, `preview-teardown`
//! and `preview-reconcile` runs and the engine over the strict fakes
//! (GitHub's deployments, statuses, comments and pull requests with their
//! shapes and codes; the sandbox), one test per rule: a head's preview in
//! its pull request's transient environment with one comment; the queue
//! policy's preview rules (a new head supersedes waiting and unconfirmed
//! previews unconditionally, naming itself, never a running one; the
//! confirmation timeout; auto-skips announced, an operator's skip silent);
//! teardown on close, once; the sweep's reconcile of a close that never
//! arrived; forks.

mod common;

use common::fakes::*;
use common::{block_on, T0};
use sluice::engine::{CreateRequest, Status};
use sluice::gates::serial;
use sluice::runs::gate::TURN_EVENT;
use sluice::runs::kit::inputs::PullNumber;
use sluice::runs::kit::preview::{
    preview_request, reconcile_request, teardown_request, PreviewInput, ReconcileInput,
    TeardownInput,
};
use sluice::runs::sweep::PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT;
use sluice::runs::Waker;
use sluice::store::previews;

const HEAD_BRANCH: &str = "feature";
const PREVIEW_TOML: &str = "[preview]\ncommand = \"./preview.sh\"\nteardown = \"./teardown.sh\"\n";
const CONFIRM_TOML: &str = "[preview]\ncommand = \"./preview.sh\"\nteardown = \"./teardown.sh\"\n\
    confirm = true\nconfirmation_timeout = \"30m\"\n";

fn pr() -> PullNumber {
    PullNumber::new(PR_NUMBER).unwrap()
}

/// A rig whose default branch (`main`, at `base`) says `config`, with the
/// preview and teardown commands scripted (the preview's running
/// `duration_ms` of virtual time when given).
fn preview_rig(config: &str, duration_ms: Option<i64>) -> Rig {
    preview_rig_with(config, duration_ms, 0)
}

/// `preview_rig` whose teardown command runs `teardown_ms` of virtual time.
fn preview_rig_with(config: &str, duration_ms: Option<i64>, teardown_ms: i64) -> Rig {
    let rig = Rig::new();
    rig.github.commit(REPO, BRANCH, &[(".sluice.toml", config)]);
    let out =
        "deployed $SLUICE_SHA\nSLUICE_ENVIRONMENT_URL=https://pr-$SLUICE_PR.preview.example/\n";
    match duration_ms {
        Some(ms) => rig.sandbox.script_timed("./preview.sh", 0, out, ms),
        None => rig.sandbox.script("./preview.sh", 0, out),
    }
    rig.sandbox
        .script_timed("./teardown.sh", 0, "removed pr-$SLUICE_PR\n", teardown_ms);
    rig
}

fn input(sha: &str) -> PreviewInput {
    PreviewInput {
        repo: REPO.into(),
        pr: pr(),
        sha: sha.into(),
        head_branch: HEAD_BRANCH.into(),
        installation_id: INSTALLATION,
        default_branch: BRANCH.into(),
        sender: "ana".into(),
        fork: false,
    }
}

/// A push of `sha` to the pull request's head branch, and its preview.
fn push(rig: &Rig, sha: &str) -> Inst {
    rig.github.commit(REPO, sha, &[("README.md", "hello")]);
    rig.github.set_head(REPO, HEAD_BRANCH, sha);
    rig.github.set_pull_head(REPO, PR_NUMBER, sha);
    rig.create(preview_request(&input(sha), format!("s{}", &sha[..12])))
}

fn teardown(sha: &str) -> CreateRequest {
    let t = TeardownInput {
        repo: REPO.into(),
        pr: pr(),
        installation_id: INSTALLATION,
        sha: sha.into(),
        head_branch: HEAD_BRANCH.into(),
        default_branch: BRANCH.into(),
        why: "this pull request was closed".into(),
        evicted: false,
        fork: false,
    };
    teardown_request(&t, T0 + 1_000)
}

fn notifications_of(rig: &Rig, event: &str) -> Vec<serde_json::Value> {
    rig.github
        .notifications()
        .into_iter()
        .filter(|n| n.header("X-Sluice-Event") == Some(event))
        .map(|n| {
            assert!(n.signature_is_valid());
            n.json()
        })
        .collect()
}

#[test]
fn a_head_is_previewed_in_its_pull_requests_transient_environment_with_one_comment() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = preview_rig(PREVIEW_TOML, None);
    let pa = push(&rig, &a);
    let status = rig.run_to_end(&pa);
    assert_eq!(status, Status::Complete, "{:?}", rig.row(&pa));
    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "in_progress", "success"]);
    assert_eq!((d.environment.as_str(), d.transient), ("pr-7", true));
    let url = "https://pr-7.preview.example/";
    assert_eq!(d.latest().unwrap().environment_url.as_deref(), Some(url));
    assert_eq!(
        rig.github
            .only_check_run(&a, "sluice/preview")
            .conclusion
            .as_deref(),
        Some("success")
    );
    let comments = rig.github.comments_on(PR_NUMBER);
    assert_eq!(comments.len(), 1, "{comments:?}");
    assert!(
        comments[0].contains(url) && comments[0].contains(&a),
        "{comments:?}"
    );

    let pb = push(&rig, &b);
    assert_eq!(rig.run_to_end(&pb), Status::Complete);
    let comments = rig.github.comments_on(PR_NUMBER);
    assert_eq!(
        comments.len(),
        1,
        "one comment, updated in place: {comments:?}"
    );
    assert!(comments[0].contains(&b) && !comments[0].contains(&a));
    assert_eq!(rig.github.calls_to("update-comment").len(), 1);
    let row = block_on(previews::get(rig.index.as_ref(), REPO, PR_NUMBER))
        .unwrap()
        .unwrap();
    assert_eq!((row.state.as_str(), row.sha.as_str()), ("live", b.as_str()));
    assert_eq!(
        (row.url.as_deref(), row.result.as_deref()),
        (Some(url), Some("success"))
    );
}

/// A running preview is never touched; a new head supersedes the one
/// waiting behind it, naming itself, announced; the queued timeout never
/// applies (an hour and a half behind a running one is no timeout).
#[test]
fn a_new_head_supersedes_the_waiting_preview_never_the_running_one() {
    let (a, b, c) = (sha('a'), sha('b'), sha('c'));
    let rig = preview_rig(PREVIEW_TOML, Some(90 * MINUTE_MS));
    let pa = push(&rig, &a);
    assert_eq!(rig.pass(&pa).status, Status::Waiting, "A's command runs");
    let pb = push(&rig, &b);
    assert_eq!(
        rig.pass(&pb).status,
        Status::Waiting,
        "B waits for the group"
    );
    rig.clock.advance(61 * MINUTE_MS);
    assert_eq!(rig.pass(&pb).status, Status::Waiting, "no queued timeout");
    let pc = push(&rig, &c);
    assert_eq!(rig.pass(&pc).status, Status::Waiting);
    rig.deliver(&pb);
    assert_eq!(rig.pass(&pb).status, Status::Skipped);
    assert_eq!(rig.row(&pb).reason.as_deref(), Some("superseded"));
    let db = rig.github.only_deployment(&b);
    assert_eq!(db.states(), ["queued", "inactive"]);
    assert!(db.latest().unwrap().description.contains(&c), "{db:?}");
    let skipped = notifications_of(&rig, "preview_auto_skipped");
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!(skipped[0]["reason"], "superseded");
    assert_eq!(skipped[0]["newer_revision"], c.as_str());

    assert_eq!(rig.run_to_end(&pa), Status::Complete, "A was never touched");
    assert_eq!(
        rig.github.only_deployment(&a).states(),
        ["queued", "in_progress", "success"]
    );
    rig.deliver(&pc);
    assert_eq!(rig.run_to_end(&pc), Status::Complete);
}

/// An unconfirmed preview is superseded by a new head at once, whatever
/// `supersede_after` would say (previews have none): the pull request has
/// moved past it.
#[test]
fn an_unconfirmed_preview_is_superseded_by_a_new_head_at_once() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = preview_rig(CONFIRM_TOML, None);
    let pa = push(&rig, &a);
    assert_eq!(
        rig.pass(&pa).status,
        Status::Waiting,
        "A waits for a confirmation"
    );
    let pb = push(&rig, &b);
    assert_eq!(rig.pass(&pb).status, Status::Waiting);
    assert_eq!(rig.deliver(&pa), 1, "B told A");
    assert_eq!(rig.pass(&pa).status, Status::Skipped);
    assert_eq!(rig.row(&pa).reason.as_deref(), Some("superseded"));
    let da = rig.github.only_deployment(&a);
    assert_eq!(da.states(), ["queued", "inactive"]);
    assert!(da.latest().unwrap().description.contains(&b), "{da:?}");
    let skipped = notifications_of(&rig, "preview_auto_skipped");
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0]["newer_revision"], b.as_str());
    assert_eq!(
        rig.pass(&pb).status,
        Status::Waiting,
        "B still waits for its own"
    );
}

/// An unanswered confirmation ends `confirmation_timeout` at its window,
/// its deployment `inactive`, announced.
#[test]
fn an_unanswered_preview_confirmation_ends_inactive_and_announced() {
    let a = sha('a');
    let rig = preview_rig(CONFIRM_TOML, None);
    let pa = push(&rig, &a);
    assert_eq!(rig.run_to_end(&pa), Status::Skipped);
    assert_eq!(rig.row(&pa).reason.as_deref(), Some("confirmation_timeout"));
    assert_eq!(
        rig.github.only_deployment(&a).states(),
        ["queued", "inactive"]
    );
    let skipped = notifications_of(&rig, "preview_auto_skipped");
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0]["reason"], "confirmation_timeout");
    assert!(rig.sandbox.all_runs().is_empty(), "nothing ran");
}

/// An operator's skip of a waiting preview is silent.
#[test]
fn an_operators_skip_of_a_preview_is_silent() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = preview_rig(PREVIEW_TOML, Some(30 * MINUTE_MS));
    let pa = push(&rig, &a);
    assert_eq!(rig.pass(&pa).status, Status::Waiting);
    let pb = push(&rig, &b);
    assert_eq!(rig.pass(&pb).status, Status::Waiting);
    // `POST /v1/executions/{id}/skip`: skip in the queue, then wake.
    let group = sluice::runs::kit::preview::group_of(REPO, pr());
    assert!(block_on(serial::skip(rig.index.as_ref(), &group, &pb.id, rig.now())).unwrap());
    block_on(rig.waker.wake(&pb.id, TURN_EVENT)).unwrap();
    assert_eq!(rig.deliver(&pb), 1);
    assert_eq!(rig.pass(&pb).status, Status::Skipped);
    assert_eq!(rig.row(&pb).reason, None);
    assert_eq!(
        rig.github.only_deployment(&b).states(),
        ["queued", "inactive"]
    );
    assert!(notifications_of(&rig, "preview_auto_skipped").is_empty());
}

/// A close starts a teardown that waits for the running preview deploy,
/// runs `teardown` once and leaves every deployment of the environment
/// `inactive`.
#[test]
fn closing_waits_for_the_running_preview_then_tears_down_once() {
    let a = sha('a');
    let rig = preview_rig(PREVIEW_TOML, Some(10 * MINUTE_MS));
    let pa = push(&rig, &a);
    assert_eq!(rig.pass(&pa).status, Status::Waiting, "A's command runs");
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let t = rig.create(teardown(&a));
    assert_eq!(
        rig.pass(&t).status,
        Status::Waiting,
        "it waits for the group"
    );
    assert_eq!(rig.run_to_end(&pa), Status::Complete);
    rig.deliver(&t);
    assert_eq!(rig.run_to_end(&t), Status::Complete);
    let runs: Vec<_> = rig
        .sandbox
        .all_runs()
        .into_iter()
        .filter(|r| r.workspace == t.id)
        .collect();
    assert_eq!(runs.len(), 1, "teardown ran once: {runs:?}");
    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "in_progress", "success", "inactive"]);
    let row = block_on(previews::get(rig.index.as_ref(), REPO, PR_NUMBER))
        .unwrap()
        .unwrap();
    assert_eq!(row.state, "torn_down");
    assert!(rig.github.comments_on(PR_NUMBER)[0].contains("torn down"));
}

/// A close GitHub never delivered: the sweep asks GitHub within the
/// reconcile interval, and the close's own teardown runs.
#[test]
fn the_sweep_tears_down_a_preview_whose_close_event_never_came() {
    let a = sha('a');
    let rig = preview_rig(PREVIEW_TOML, None);
    let pa = push(&rig, &a);
    assert_eq!(rig.run_to_end(&pa), Status::Complete);
    rig.sweep();
    assert!(rig
        .pokes
        .poked
        .borrow()
        .iter()
        .all(|p| !p.starts_with("preview-reconcile")));
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    rig.clock.advance(PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT + 1);
    let now = rig.now();
    let report = rig.sweep();
    assert_eq!(report.reconciled, 1);
    let reconcile = ReconcileInput {
        slot: 0,
        repo: REPO.into(),
        pr: pr(),
        installation_id: INSTALLATION,
        sha: a.clone(),
        head_branch: HEAD_BRANCH.into(),
        default_branch: BRANCH.into(),
        fork: false,
    };
    let req = reconcile_request(&reconcile, now / PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT);
    assert!(rig.pokes.poked.borrow().contains(&req.id().to_string()));
    assert_eq!(rig.sweep().reconciled, 0, "asked once per interval");
    let r = rig.create(req);
    assert_eq!(rig.run_to_end(&r), Status::Complete);
    let spawned = rig.create_spawned();
    assert_eq!(spawned.len(), 1);
    assert!(
        spawned[0].id.starts_with("preview-teardown"),
        "{}",
        spawned[0].id
    );
    assert_eq!(rig.run_to_end(&spawned[0]), Status::Complete);
    assert_eq!(
        rig.github.only_deployment(&a).latest().unwrap().state,
        "inactive"
    );
}

/// An environment exporting a secret, which previews select in
/// `SECRET_TOML`.
const SECRET_ENVIRONMENTS: &str = "[previews]\nrepos = [\"octo/hello\"]\nbranches = [\"**\"]\n\
    secrets = [\"PREVIEW_TOKEN\"]\ntransient = true\n";
const SECRET_TOML: &str = "[preview]\ncommand = \"./preview.sh\"\nteardown = \"./teardown.sh\"\n\
    environment = \"previews\"\n";

fn fork_preview(rig: &Rig, a: &str) -> Inst {
    rig.github.commit(REPO, a, &[("README.md", "hello")]);
    rig.github.set_pull_head(REPO, PR_NUMBER, a);
    let fork = PreviewInput {
        fork: true,
        ..input(a)
    };
    rig.create(preview_request(&fork, "opened".into()))
}

/// A fork's pull request into an environment that exports secrets gets no
/// preview and no secret; its check says why; its close runs nothing.
#[test]
fn a_forks_pull_request_gets_no_preview_where_secrets_are_and_its_check_says_why() {
    let a = sha('a');
    let mut rig = preview_rig(SECRET_TOML, None);
    rig.environments = sluice::runs::environment::Environments::parse(Some(SECRET_ENVIRONMENTS));
    rig.secrets.set("PREVIEW_TOKEN", "preview-secret-value");
    let p = fork_preview(&rig, &a);
    assert_eq!(rig.run_to_end(&p), Status::Skipped);
    let check = rig.github.only_check_run(&a, "sluice/preview");
    assert_eq!(check.conclusion.as_deref(), Some("neutral"));
    assert!(check
        .summary
        .unwrap_or_default()
        .contains("exports secrets"));
    assert!(
        check.actions.is_empty(),
        "no button: it can never be previewed"
    );
    assert!(rig.sandbox.all_runs().is_empty());
    assert!(rig.github.deployments_on(&a).is_empty());
    let fork = TeardownInput {
        fork: true,
        ..serde_json::from_value(teardown(&a).input).unwrap()
    };
    let f = rig.create(teardown_request(&fork, T0 + 2_000));
    assert_eq!(rig.run_to_end(&f), Status::Skipped);
    assert_eq!(rig.row(&f).reason.as_deref(), Some("fork"));
    assert!(rig.sandbox.all_runs().is_empty());
}

/// Into an environment without secrets, a maintainer asks for a fork's
/// preview with **Preview** on its check run (someone without write access
/// cannot); it then deploys with no secret, and its close tears it down.
#[test]
fn a_maintainer_previews_a_fork_with_no_secret_by_pressing_preview() {
    let a = sha('a');
    let rig = preview_rig(PREVIEW_TOML, None);
    rig.github.set_permission(REPO, "maintainer", "write");
    rig.github.set_permission(REPO, "drive-by", "read");
    let p = fork_preview(&rig, &a);
    assert_eq!(rig.pass(&p).status, Status::Waiting);
    let run = rig.github.only_check_run(&a, "sluice/preview");
    assert_eq!(run.actions, ["preview"], "the button is shown");
    let press = |sender: &str| {
        let payload = serde_json::json!({ "check_run_id": run.id, "identifier": "preview", "sender": sender });
        p.world
            .engine()
            .send_event("check-run-action", &payload)
            .expect("event");
    };
    press("drive-by");
    assert_eq!(
        rig.pass(&p).status,
        Status::Waiting,
        "someone without write access decides nothing"
    );
    assert!(rig.sandbox.all_runs().is_empty(), "no code ran");
    press("maintainer");
    assert_eq!(rig.run_to_end(&p), Status::Complete, "{:?}", rig.row(&p));
    let d = rig.github.only_deployment(&a);
    assert_eq!(
        (d.environment.as_str(), d.states()),
        ("pr-7", vec!["queued", "in_progress", "success"])
    );
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let fork = TeardownInput {
        fork: true,
        ..serde_json::from_value(teardown(&a).input).unwrap()
    };
    let t = rig.create(teardown_request(&fork, T0 + 2_000));
    assert_eq!(rig.run_to_end(&t), Status::Complete, "{:?}", rig.row(&t));
    assert_eq!(
        rig.github.only_deployment(&a).latest().unwrap().state,
        "inactive"
    );
}

/// Nobody asks within the window: no preview, silently.
#[test]
fn an_unasked_forks_preview_ends_at_its_window_running_nothing() {
    let a = sha('a');
    let rig = preview_rig(PREVIEW_TOML, None);
    let p = fork_preview(&rig, &a);
    assert_eq!(rig.run_to_end(&p), Status::Skipped);
    assert_eq!(rig.row(&p).reason, None);
    let check = rig.github.only_check_run(&a, "sluice/preview");
    assert!(check
        .summary
        .unwrap_or_default()
        .contains("nobody with write access"));
    assert!(rig.sandbox.all_runs().is_empty());
    assert!(rig.github.notifications().is_empty(), "silent");
}

/// Past `PREVIEW_LIVE_PER_REPO_MAX` live previews, the least recently
/// updated is torn down (its pull request still open), saying why.
#[test]
fn past_the_cap_the_least_recently_updated_preview_is_torn_down_saying_why() {
    use sluice::runs::kit::preview::PREVIEW_LIVE_PER_REPO_MAX;
    let rig = preview_rig(PREVIEW_TOML, None);
    let first_pr = 100;
    for i in 0..=u64::from(PREVIEW_LIVE_PER_REPO_MAX) {
        let number = first_pr + i;
        let head = format!("{:040x}", 0xabc000 + i);
        rig.github.commit(REPO, &head, &[("README.md", "hello")]);
        rig.github.set_head(REPO, &format!("f{number}"), &head);
        rig.github.set_pull_head(REPO, number, &head);
        let p = PreviewInput {
            pr: PullNumber::new(number).unwrap(),
            head_branch: format!("f{number}"),
            ..input(&head)
        };
        let inst = rig.create(preview_request(&p, "opened".into()));
        assert_eq!(rig.run_to_end(&inst), Status::Complete);
        rig.clock.advance(MINUTE_MS);
    }
    let spawned = rig.create_spawned();
    assert_eq!(spawned.len(), 1, "one over the cap");
    assert!(
        spawned[0]
            .id
            .starts_with(&format!("preview-teardown-octo-hello-pr{first_pr}-capped")),
        "{}",
        spawned[0].id
    );
    assert_eq!(
        rig.run_to_end(&spawned[0]),
        Status::Complete,
        "{:?}",
        rig.row(&spawned[0])
    );
    let row = block_on(previews::get(rig.index.as_ref(), REPO, first_pr))
        .unwrap()
        .unwrap();
    assert_eq!(row.state, "torn_down");
    let live = block_on(previews::live(rig.index.as_ref(), Some(REPO), 100)).unwrap();
    assert_eq!(live.len(), PREVIEW_LIVE_PER_REPO_MAX as usize);
    let comment = &rig.github.comments_on(first_pr)[0];
    assert!(
        comment.contains("torn down") && comment.contains("live previews"),
        "{comment}"
    );
}

/// An operator's Tear down (the dashboard's) of a live preview whose pull
/// request is open: torn down, once per head, saying why.
#[test]
fn an_operator_tears_a_live_preview_down_while_its_pull_request_is_open() {
    use sluice::runs::kit::preview::operator_teardown_request;
    let a = sha('a');
    let rig = preview_rig(PREVIEW_TOML, None);
    let pa = push(&rig, &a);
    assert_eq!(rig.run_to_end(&pa), Status::Complete);
    let row = block_on(previews::get(rig.index.as_ref(), REPO, PR_NUMBER))
        .unwrap()
        .unwrap();
    let req = operator_teardown_request(&row).unwrap();
    assert_eq!(
        req.key,
        format!("preview-teardown:{REPO}:pr7:operator-{}", &a[..12])
    );
    let t = rig.create(req);
    assert_eq!(rig.run_to_end(&t), Status::Complete, "{:?}", rig.row(&t));
    assert_eq!(
        rig.github.only_deployment(&a).latest().unwrap().state,
        "inactive"
    );
    let row = block_on(previews::get(rig.index.as_ref(), REPO, PR_NUMBER))
        .unwrap()
        .unwrap();
    assert_eq!(row.state, "torn_down");
    assert!(rig.github.comments_on(PR_NUMBER)[0].contains("an operator tore it down"));
}

/// A close tears down only a preview the index holds live: one never
/// previewed ends skipped, running nothing.
#[test]
fn a_close_tears_down_nothing_for_a_pull_request_never_previewed() {
    let a = sha('a');
    let rig = preview_rig(PREVIEW_TOML, None);
    rig.github.commit(REPO, &a, &[("README.md", "hello")]);
    rig.github.set_pull_head(REPO, PR_NUMBER, &a);
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let never = rig.create(teardown(&a));
    assert_eq!(rig.run_to_end(&never), Status::Skipped);
    assert_eq!(rig.row(&never).reason.as_deref(), Some("no-live-preview"));
    assert!(rig.sandbox.all_runs().is_empty());
}

/// A close whose teardown ran before the preview of the pull request's
/// last head arrived (it found nothing live): the preview, holding the
/// group, finds the pull request closed and deploys nothing, and the index
/// row its arrival marked live is caught by the sweep: its reconcile starts
/// a teardown of its own key, which tears down once.
#[test]
fn a_preview_arriving_after_its_close_is_torn_down_by_the_sweep_once() {
    let a = sha('a');
    let rig = preview_rig(PREVIEW_TOML, None);
    rig.github.commit(REPO, &a, &[("README.md", "hello")]);
    rig.github.set_pull_head(REPO, PR_NUMBER, &a);
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let early = rig.create(teardown(&a));
    assert_eq!(rig.run_to_end(&early), Status::Skipped, "nothing live yet");
    let pa = push(&rig, &a);
    assert_eq!(rig.run_to_end(&pa), Status::Skipped, "{:?}", rig.row(&pa));
    assert!(
        rig.sandbox.all_runs().is_empty(),
        "a closed pull request's preview deploys nothing"
    );
    rig.clock.advance(PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT + 1);
    let now = rig.now();
    assert_eq!(rig.sweep().reconciled, 1);
    let reconcile = ReconcileInput {
        slot: 0,
        repo: REPO.into(),
        pr: pr(),
        installation_id: INSTALLATION,
        sha: a.clone(),
        head_branch: HEAD_BRANCH.into(),
        default_branch: BRANCH.into(),
        fork: false,
    };
    let r = rig.create(reconcile_request(
        &reconcile,
        now / PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT,
    ));
    assert_eq!(rig.run_to_end(&r), Status::Complete);
    let spawned = rig.create_spawned();
    assert_eq!(spawned.len(), 1);
    assert!(spawned[0].id.contains("swept"), "{}", spawned[0].id);
    assert_eq!(
        rig.run_to_end(&spawned[0]),
        Status::Complete,
        "{:?}",
        rig.row(&spawned[0])
    );
    let torn: Vec<_> = rig
        .sandbox
        .all_runs()
        .into_iter()
        .filter(|r| r.workspace == spawned[0].id)
        .collect();
    assert_eq!(torn.len(), 1);
    assert_eq!(
        rig.github.only_deployment(&a).latest().unwrap().state,
        "inactive"
    );
}

/// The teardown command's runs (not the previews').
fn teardown_runs(rig: &Rig) -> usize {
    rig.sandbox
        .all_runs()
        .into_iter()
        .filter(|r| r.workspace.starts_with("preview-teardown"))
        .count()
}

fn index_row(rig: &Rig) -> previews::PreviewRow {
    block_on(previews::get(rig.index.as_ref(), REPO, PR_NUMBER))
        .unwrap()
        .unwrap()
}

/// A close's teardown holds the group while its command runs; the pull
/// request is reopened and a new head's preview waits behind it. The
/// teardown records itself only while the index still names the preview it
/// tore down, and the new preview marks itself live holding the group: the
/// index says live, so the next close tears the new preview down.
#[test]
fn a_preview_deployed_after_a_teardown_stays_live_in_the_index() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = preview_rig_with(PREVIEW_TOML, None, 10 * MINUTE_MS);
    let pa = push(&rig, &a);
    assert_eq!(rig.run_to_end(&pa), Status::Complete);
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let t = rig.create(teardown(&a));
    assert_eq!(rig.pass(&t).status, Status::Waiting, "teardown runs");
    assert_eq!(teardown_runs(&rig), 1);
    rig.github.set_pull_closed(REPO, PR_NUMBER, false);
    let pb = push(&rig, &b);
    assert_eq!(
        rig.pass(&pb).status,
        Status::Waiting,
        "B waits for the group"
    );
    assert_eq!(rig.run_to_end(&t), Status::Complete, "{:?}", rig.row(&t));
    rig.deliver(&pb);
    assert_eq!(rig.run_to_end(&pb), Status::Complete, "{:?}", rig.row(&pb));
    assert_eq!(
        rig.github.only_deployment(&b).latest().unwrap().state,
        "success"
    );
    let row = index_row(&rig);
    assert_eq!(
        (
            row.state.as_str(),
            row.sha.as_str(),
            row.execution_id.as_str()
        ),
        ("live", b.as_str(), pb.id.as_str()),
        "B is live in the index"
    );
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let t2 = rig.create(teardown_request(
        &serde_json::from_value(teardown(&b).input).unwrap(),
        T0 + 9_000,
    ));
    assert_eq!(rig.run_to_end(&t2), Status::Complete, "{:?}", rig.row(&t2));
    assert_eq!(teardown_runs(&rig), 2, "the next close tears B down");
    assert_eq!(index_row(&rig).state, "torn_down");
}

/// Two teardowns of one preview (a close's, and an operator's pressed
/// while it ran): the first records itself torn down before it lets go of
/// the group, so the second, waiting on the group, finds nothing live and
/// runs no teardown command again, even when the first is held up after
/// its command (here GitHub failing while it retires the deployments).
#[test]
fn a_second_teardown_waiting_on_the_group_runs_nothing_again() {
    use sluice::runs::kit::preview::operator_teardown_request;
    let a = sha('a');
    let rig = preview_rig(PREVIEW_TOML, None);
    let pa = push(&rig, &a);
    assert_eq!(rig.run_to_end(&pa), Status::Complete);
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let t1 = rig.create(teardown(&a));
    // Past the inline retries: the teardown suspends after its command.
    rig.github.fail_next("list-deployments", 3, 500);
    assert_eq!(rig.pass(&t1).status, Status::Waiting, "{:?}", rig.row(&t1));
    assert_eq!(teardown_runs(&rig), 1, "its command ran");
    let t2 = rig.create(operator_teardown_request(&index_row(&rig)).unwrap());
    assert_eq!(
        rig.pass(&t2).status,
        Status::Waiting,
        "the second waits for the group"
    );
    assert_eq!(teardown_runs(&rig), 1);
    assert_eq!(rig.run_to_end(&t1), Status::Complete, "{:?}", rig.row(&t1));
    rig.deliver(&t2);
    assert_eq!(rig.run_to_end(&t2), Status::Skipped, "{:?}", rig.row(&t2));
    assert_eq!(rig.row(&t2).reason.as_deref(), Some("no-live-preview"));
    assert_eq!(teardown_runs(&rig), 1, "teardown ran once");
    assert_eq!(index_row(&rig).state, "torn_down");
}
/// An environment that exports no secret, which a maintainer may preview
/// a fork into (`SECRET_TOML` selects it).
const NO_SECRET_ENVIRONMENTS: &str =
    "[previews]\nrepos = [\"octo/hello\"]\nbranches = [\"**\"]\ntransient = true\n";

/// A maintainer's fork preview into `previews`, which exports no secret.
fn approved_fork_preview(rig: &Rig, a: &str) -> Inst {
    rig.github.set_permission(REPO, "maintainer", "write");
    let p = fork_preview(rig, a);
    assert_eq!(rig.pass(&p).status, Status::Waiting);
    let run = rig.github.only_check_run(a, "sluice/preview");
    let payload = serde_json::json!({ "check_run_id": run.id, "identifier": "preview", "sender": "maintainer" });
    p.world
        .engine()
        .send_event("check-run-action", &payload)
        .expect("event");
    p
}

/// The index remembers that a preview is a fork's: the teardowns made from
/// it (an operator's, the cap's, the sweep's) are a fork's, so once the
/// environment exports a secret they run nothing rather than hand it to the
/// fork's code.
#[test]
fn a_forks_preview_torn_down_from_the_index_never_gets_a_secret() {
    use sluice::runs::kit::preview::operator_teardown_request;
    let a = sha('a');
    let mut rig = preview_rig(SECRET_TOML, None);
    rig.environments = sluice::runs::environment::Environments::parse(Some(NO_SECRET_ENVIRONMENTS));
    let p = approved_fork_preview(&rig, &a);
    assert_eq!(rig.run_to_end(&p), Status::Complete, "{:?}", rig.row(&p));
    let row = index_row(&rig);
    assert!(row.is_fork(), "{row:?}");
    // An operator adds a secret to the environment.
    rig.environments = sluice::runs::environment::Environments::parse(Some(SECRET_ENVIRONMENTS));
    rig.secrets.set("PREVIEW_TOKEN", "preview-secret-value");
    let req = operator_teardown_request(&row).unwrap();
    let input: TeardownInput = serde_json::from_value(req.input.clone()).unwrap();
    assert!(input.fork, "the operator's teardown is a fork's");
    let t = rig.create(req);
    assert_eq!(rig.run_to_end(&t), Status::Skipped, "{:?}", rig.row(&t));
    assert_eq!(rig.row(&t).reason.as_deref(), Some("fork"));
    assert_eq!(teardown_runs(&rig), 0, "the fork's code never ran with it");
    // The same teardown, as an older input that did not say fork: the
    // index says it, holding the group too.
    let unflagged = TeardownInput {
        fork: false,
        why: "an operator tore it down".into(),
        ..input
    };
    let u = rig.create(teardown_request(&unflagged, T0 + 5_000));
    assert_eq!(rig.run_to_end(&u), Status::Skipped, "{:?}", rig.row(&u));
    assert_eq!(rig.row(&u).reason.as_deref(), Some("fork"));
    assert_eq!(teardown_runs(&rig), 0);
    // The sweep's reconcile carries the flag into its teardown.
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    rig.clock.advance(PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT + 1);
    let now = rig.now();
    assert_eq!(rig.sweep().reconciled, 1);
    let reconcile = ReconcileInput {
        slot: 0,
        repo: REPO.into(),
        pr: pr(),
        installation_id: INSTALLATION,
        sha: a.clone(),
        head_branch: HEAD_BRANCH.into(),
        default_branch: BRANCH.into(),
        fork: true,
    };
    let req = reconcile_request(&reconcile, now / PREVIEW_RECONCILE_INTERVAL_MS_DEFAULT);
    assert!(rig.pokes.poked.borrow().contains(&req.id().to_string()));
    let r = rig.create(req);
    assert_eq!(rig.run_to_end(&r), Status::Complete);
    let spawned = rig.create_spawned();
    assert_eq!(spawned.len(), 1);
    let swept: TeardownInput = serde_json::from_value(spawned[0].input.clone()).unwrap();
    assert!(swept.fork, "the sweep's teardown is a fork's");
    assert_eq!(rig.run_to_end(&spawned[0]), Status::Skipped);
    assert_eq!(teardown_runs(&rig), 0);
}

/// A fork's preview waits for a maintainer; the environment gains a secret
/// meanwhile: when its command would start, it is refused, and nothing of
/// the fork's runs.
#[test]
fn a_forks_preview_whose_environment_gained_a_secret_runs_nothing() {
    let a = sha('a');
    let mut rig = preview_rig(SECRET_TOML, None);
    rig.environments = sluice::runs::environment::Environments::parse(Some(NO_SECRET_ENVIRONMENTS));
    let p = approved_fork_preview(&rig, &a);
    rig.environments = sluice::runs::environment::Environments::parse(Some(SECRET_ENVIRONMENTS));
    rig.secrets.set("PREVIEW_TOKEN", "preview-secret-value");
    let end = rig.run_to_end(&p);
    assert!(end.is_terminal() && end != Status::Complete, "{end:?}");
    assert!(rig.sandbox.all_runs().is_empty(), "no code of the fork ran");
}

/// A preview waiting for its confirmation when its pull request closes:
/// the close's teardown tears down what is live, and a confirmation given
/// later (from the approvals page, say) deploys nothing, since nothing
/// would ever tear it down.
#[test]
fn a_preview_confirmed_after_its_pull_request_closed_deploys_nothing() {
    let a = sha('a');
    let rig = preview_rig(CONFIRM_TOML, None);
    let pa = push(&rig, &a);
    assert_eq!(
        rig.pass(&pa).status,
        Status::Waiting,
        "A waits for a confirmation"
    );
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let t = rig.create(teardown(&a));
    assert_eq!(rig.run_to_end(&t), Status::Complete, "{:?}", rig.row(&t));
    assert_eq!(index_row(&rig).state, "torn_down");
    block_on(
        rig.waker
            .send(&pa.id, "deploy-confirm", &serde_json::json!({})),
    )
    .unwrap();
    assert_eq!(rig.deliver(&pa), 1);
    assert_eq!(rig.run_to_end(&pa), Status::Skipped, "{:?}", rig.row(&pa));
    let deployed: Vec<_> = rig
        .sandbox
        .all_runs()
        .into_iter()
        .filter(|r| r.workspace == pa.id)
        .collect();
    assert!(deployed.is_empty(), "nothing deployed: {deployed:?}");
    assert_eq!(
        rig.github.only_deployment(&a).latest().unwrap().state,
        "inactive"
    );
    assert_eq!(index_row(&rig).state, "torn_down");
}
