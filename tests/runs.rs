//! The `check` and `deploy` runs end to end, natively: the real runs and
//! the real engine over the strict fakes of `common::fakes` (GitHub's REST
//! API, the sandbox agent, the waker, the Worker's secrets). Tests read as
//! "apply → expect".

mod common;

use common::fakes::*;
use common::{block_on, ManualClock, T0};
use futures::FutureExt;
use serde_json::{json, Value};
use sluice::engine::{Clock, Command, CommandError, CreateRequest, Status};
use sluice::gates::serial;
use sluice::github::client::parse_rfc3339_ms;
use sluice::limits::{HOLDER_STALE_MS, SERIAL_QUEUED_TIMEOUT_MS_DEFAULT};
use sluice::net::HttpRequest;
use sluice::runs::environment::Environments;
use sluice::runs::gate::TURN_EVENT;
use sluice::runs::Waker;
use sluice::store::journal::JournalStore;
use sluice::store::Database;

// ---------------------------------------------------------------------------
// The fakes themselves
// ---------------------------------------------------------------------------

#[test]
fn the_fake_formats_token_expiry_as_the_client_parses_it() {
    for ms in [0, T0, T0 + 3_600_000, 951_782_400_000 /* 2000-02-29 */] {
        assert_eq!(
            parse_rfc3339_ms(&rfc3339(ms)),
            Some(ms - ms.rem_euclid(1000)),
            "{}",
            rfc3339(ms)
        );
    }
    let gh = FakeGitHub::new(ManualClock::new(T0));
    let r = gh.handle(HttpRequest {
        method: "DELETE",
        url: format!("{}/repos/{REPO}", gh.api_url),
        headers: vec![],
        body: None,
    });
    assert_eq!(r.status, 599);
    assert_eq!(
        gh.st.borrow_mut().unexpected.drain(..).count(),
        1,
        "an unknown request is recorded"
    );
}

// ---------------------------------------------------------------------------
// 1. check: verdicts and configuration
// ---------------------------------------------------------------------------

#[test]
fn a_passing_check_reports_success_with_the_log_tail_and_stores_the_log() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    let log = "Compiling hello v0.1.0\nrunning 3 tests\ntest result: ok. 3 passed; 0 failed\n";
    rig.sandbox.script("cargo test", 0, log);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.statuses, ["in_progress", "completed"]);
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    assert_eq!(
        run.external_id.as_deref(),
        Some(c.id.as_str()),
        "the instance finds its own check run again"
    );
    assert_eq!(
        run.details_url,
        Some(format!("{PUBLIC_URL}/v1/executions/{}", c.id))
    );
    assert_eq!(run.title.as_deref(), Some("Passed"));
    assert!(
        run.summary().contains("`cargo test` exited with code 0"),
        "{}",
        run.summary()
    );
    assert!(
        run.summary()
            .contains("test result: ok. 3 passed; 0 failed"),
        "the tail is in the summary"
    );
    // The whole log is stored under the key the command step returned.
    let result = rig.command_result(&c, "run check command");
    assert_eq!(rig.log(&result.log_key).as_deref(), Some(log));
    // The summary links it: a signed link to this step's log, valid a week.
    let url = result.log_url.as_deref().expect("a log link");
    assert!(run.summary().contains(url), "{}", run.summary());
    let (path, query) = url
        .strip_prefix(PUBLIC_URL)
        .and_then(|rest| rest.split_once('?'))
        .expect("a link to the Worker");
    assert_eq!(
        sluice::runs::loglink::verify(LOG_LINK_SECRET.as_bytes(), path, query, rig.now()),
        Ok(())
    );
    assert_eq!(
        format!("logs{}.log", path.trim_start_matches("/logs")),
        result.log_key,
        "the link opens this log"
    );
    assert_eq!((result.exit_code, result.timed_out), (Some(0), false));
    let out = rig.output(&c);
    assert_eq!(
        (out["check_run_id"].as_u64(), out["conclusion"].as_str()),
        (Some(run.id), Some("success"))
    );
    // The sandbox checked out the PR head with an installation token and
    // ran the command with the PR's variables.
    let co = rig.sandbox.checkouts_in(&c.id);
    assert_eq!(co.len(), 1);
    assert_eq!(
        (co[0].repo_url.as_str(), co[0].sha.as_str()),
        (CLONE_URL, s.as_str())
    );
    let token = co[0].token.as_ref().expect("a token");
    let grant = rig.github.grant_of(token).expect("a token GitHub issued");
    assert_eq!(
        grant.repositories,
        ["hello"],
        "scoped to the one repository"
    );
    assert_eq!(
        grant
            .permissions
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>(),
        ["contents:read", "metadata:read"],
        "a checkout can read, nothing else"
    );
    assert!(grant.revoked, "revoked once the checkout was done");
    let start = &rig.sandbox.starts_in(&c.id)[0];
    assert_eq!(start.env["SLUICE_SHA"], s);
    assert_eq!(start.env["SLUICE_REPO"], REPO);
    assert_eq!(start.env["SLUICE_PR"], PR_NUMBER.to_string());
    assert_eq!(rig.row(&c).status, "complete");
}

/// Issue 8 item 7: no token for the whole installation with every
/// permission; Sluice's own is the repository's, for checks and contents.
#[test]
fn every_token_is_scoped_to_the_repository() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let c = rig.check(&s);
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    let grants: Vec<Grant> = rig
        .github
        .issued_tokens()
        .iter()
        .map(|t| rig.github.grant_of(t).unwrap())
        .collect();
    assert_eq!(
        grants.len(),
        2,
        "the API token and the checkout's: {grants:?}"
    );
    for g in &grants {
        assert_eq!(g.repositories, ["hello"]);
        assert!(!g.permissions.values().any(|v| v == "admin"));
    }
    assert!(grants
        .iter()
        .any(|g| g.permissions.get("checks").map(String::as_str) == Some("write")));
}

/// Issue 8 item 8: a check run another App made with Sluice's name and
/// the instance's external id is neither found nor touched.
#[test]
fn a_check_run_of_another_app_is_not_taken_for_ours() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let c = rig.check(&s);
    let foreign = rig
        .github
        .foreign_check_run(REPO, &s, "sluice/check", &c.id);
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    let runs = rig.github.check_runs_on(&s);
    let theirs = runs.iter().find(|r| r.id == foreign).unwrap();
    assert_eq!(
        (theirs.statuses.len(), theirs.conclusion.as_deref()),
        (1, None),
        "untouched"
    );
    let ours: Vec<_> = runs.iter().filter(|r| r.id != foreign).collect();
    assert_eq!(ours.len(), 1);
    assert_eq!(ours[0].conclusion.as_deref(), Some("success"));
}

/// Issue 8 item 8: a branch name is one path of segments, each
/// percent-encoded: `#` and `?` cannot cut the request short.
#[test]
fn branch_names_are_percent_encoded_in_api_paths() {
    let m = sha('a');
    let branch = "feat/a#b?c";
    let config = format!("[deploy]\nbranch = \"{branch}\"\ncommand = \"./deploy.sh\"\n");
    let rig = deploy_rig(&[&m], &config);
    rig.github.set_head(REPO, BRANCH, &m);
    rig.github.set_head(REPO, branch, &m);
    let d = rig.deploy_pushed(REPO, branch, &m, None);
    assert_eq!(rig.run_to_end(&d), Status::Complete);
    let reads = rig.github.calls_to("ref");
    assert!(
        !reads.is_empty()
            && reads
                .iter()
                .all(|c| c.path.ends_with("/git/ref/heads/feat/a%23b%3Fc")),
        "{reads:?}"
    );
    let run = rig.github.only_check_run(&m, "sluice/deploy");
    assert_eq!(
        run.conclusion.as_deref(),
        Some("success"),
        "{}",
        run.summary()
    );
}

#[test]
fn a_long_command_spans_several_passes_and_starts_once() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    // Still running after more long-polls than one step waits for.
    rig.sandbox.script_running("cargo test", 0, "done\n", 45);
    let c = rig.check(&s);
    let first = rig.pass(&c);
    assert_eq!(
        first.status,
        Status::Waiting,
        "the pass ends while the command runs"
    );
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    let names = rig.step_names(&c);
    assert!(
        names.contains(&"run check command#2".to_owned()),
        "{names:?}"
    );
    assert!(
        names.contains(&"command still running".to_owned()),
        "{names:?}"
    );
    assert_eq!(
        rig.sandbox.starts_in(&c.id).len(),
        1,
        "observed, never started again"
    );
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
}

#[test]
fn a_check_that_exits_3_reports_failure() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox
        .script("cargo test", 3, "test tests::it_works ... FAILED\n");
    let c = rig.check(&s);

    assert_eq!(
        rig.run_to_end(&c),
        Status::Complete,
        "a red test is a verdict, not an instance error"
    );

    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.statuses, ["in_progress", "completed"]);
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert!(run.summary().contains("exited with code 3"));
    assert!(run.summary().contains("it_works ... FAILED"));
    assert_eq!(
        rig.command_result(&c, "run check command").exit_code,
        Some(3)
    );
}

/// `image = "rust"` with a larger `instance_type`: the command runs in the
/// instance's sandbox of that class (its own Containers class, reached by
/// its address), which is discarded with its lease when the run ends.
#[test]
fn a_check_runs_in_the_image_class_it_selects_and_discards_that_sandbox() {
    let rig = Rig::new();
    let s = sha('a');
    let toml =
        "[check]\ncommand = \"cargo test\"\nimage = \"rust\"\ninstance_type = \"standard-2\"\n";
    rig.github.commit(REPO, &s, &[(".sluice.toml", toml)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let c = rig.check(&s);
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    let address = format!("{}~rust.standard-2", c.id);
    let starts = rig.sandbox.started_in();
    assert_eq!(starts, [address.clone()]);
    let discarded = rig.sandbox.discarded();
    assert!(discarded.contains(&address), "{discarded:?}");
    assert!(rig.held_by(&c).is_empty(), "{:?}", rig.held_by(&c));
}

/// A check in an image class's sandbox terminated mid-command whose
/// finalize fails at the lease release (D1 down) still holds that lease;
/// the sweep finds the instance by it and finalizes again, which frees it
/// and discards the classed sandbox.
#[test]
fn a_classed_sandbox_left_held_by_a_failed_finalize_is_released_by_the_sweep() {
    let rig = Rig::new();
    let s = sha('a');
    let toml = "[check]\ncommand = \"cargo test\"\nimage = \"rust\"\n";
    rig.github.commit(REPO, &s, &[(".sluice.toml", toml)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    rig.sandbox.hold(&s);
    rig.clock.freeze_timers(true);
    let c = rig.check(&s);
    let mut pass = rig.start_pass(&c);
    rig.holds_in_flight(&mut pass);
    drop(pass);
    rig.clock.freeze_timers(false);
    rig.sandbox.release(&s);
    assert_eq!(rig.command(&c, Command::Terminate), Status::Terminated);
    rig.index
        .fail_next_matching("DELETE FROM container_leases", 1);
    assert!(rig.try_finalize(&c).is_err());
    let held = rig.held_by(&c);
    assert!(held.iter().any(|h| h.contains("lease")), "{held:?}");
    assert_eq!(rig.sweep().finalized, 1);
    assert!(rig.held_by(&c).is_empty(), "{:?}", rig.held_by(&c));
    let address = format!("{}~rust.standard-1", c.id);
    assert!(rig.sandbox.discarded().contains(&address));
}

/// An image class that does not exist fails the check before anything
/// runs, naming the classes that do.
#[test]
fn an_unknown_image_class_fails_the_check_naming_the_classes() {
    let rig = Rig::new();
    let s = sha('a');
    let toml = "[check]\ncommand = \"cargo test\"\nimage = \"python\"\n";
    rig.github.commit(REPO, &s, &[(".sluice.toml", toml)]);
    let c = rig.check(&s);
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    let summary = run.summary();
    assert!(
        summary.contains("image \"python\" is no sandbox image class (classes: base, node, rust)"),
        "{summary}"
    );
    assert!(rig.sandbox.checkouts_in(&c.id).is_empty(), "nothing ran");
}

#[test]
fn a_commit_without_sluice_toml_is_not_configured_and_makes_no_check_run() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[("README.md", "hello")]);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Skipped);

    assert_eq!(rig.row(&c).reason.as_deref(), Some("not-configured"));
    for route in ["list-check-runs", "create-check-run", "update-check-run"] {
        assert!(rig.github.calls_to(route).is_empty(), "no {route} call");
    }
    assert_eq!(rig.github.calls_to("contents").len(), 1);
    assert!(rig.sandbox.checkouts_in(&c.id).is_empty());
}

#[test]
fn an_invalid_sluice_toml_fails_the_check_naming_the_problem() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(
        REPO,
        &s,
        &[(".sluice.toml", "[chek]\ncommand = \"cargo test\"\n")],
    );
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert!(
        run.summary()
            .contains("`.sluice.toml` at this commit is invalid"),
        "{}",
        run.summary()
    );
    assert!(
        run.summary().contains("chek"),
        "names the bad key: {}",
        run.summary()
    );
    assert!(rig.sandbox.checkouts_in(&c.id).is_empty(), "nothing ran");
}

#[test]
fn a_config_with_only_deploy_is_not_configured_for_checks() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github
        .commit(REPO, &s, &[(".sluice.toml", DEPLOY_TOML)]);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Skipped);

    assert_eq!(rig.row(&c).reason.as_deref(), Some("not-configured"));
    assert!(rig.github.check_runs_on(&s).is_empty());
    assert!(rig.github.calls_to("create-check-run").is_empty());
}

// ---------------------------------------------------------------------------
// 2. check: replay safety of the command step
// ---------------------------------------------------------------------------

/// The GitHub calls of a check until its check run shows in progress,
/// in order, once the API token is cached: the config, then the check run
/// created in progress (no lookup first, no separate start).
#[test]
fn a_check_shows_in_progress_after_two_github_calls_once_the_token_is_cached() {
    let rig = Rig::new();
    let (a, b) = (sha('a'), sha('b'));
    for s in [&a, &b] {
        rig.github.commit(REPO, s, &[(".sluice.toml", CHECK_TOML)]);
    }
    rig.sandbox.script("cargo test", 0, "ok\n");
    let first = rig.check(&a);
    assert_eq!(rig.run_to_end(&first), Status::Complete);
    rig.github.set_pull_head(REPO, PR_NUMBER, &b);
    let before = rig.github.all_calls().len();
    let second = rig.check_in(REPO, &b);
    assert_eq!(rig.run_to_end(&second), Status::Complete);
    let calls = rig.github.all_calls();
    let routes: Vec<&str> = calls[before..].iter().map(|c| c.route).collect();
    let opened = routes
        .iter()
        .position(|r| *r == "create-check-run")
        .expect("a check run was created");
    assert_eq!(&routes[..=opened], ["contents", "create-check-run"]);
    let created = &calls[before + opened];
    assert!(
        created
            .body
            .as_deref()
            .unwrap()
            .contains("\"status\":\"in_progress\""),
        "created in progress: {:?}",
        created.body
    );
    assert_eq!(
        rig.github.only_check_run(&b, "sluice/check").statuses,
        ["in_progress", "completed"]
    );
}

/// The executor dies after GitHub created the check run, before the step's
/// result was journaled: the next pass looks for it first and finds it.
#[test]
fn a_pass_that_dies_after_creating_the_check_run_finds_it_instead_of_creating_another() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    rig.github.hang_after_applying_next("create-check-run");
    let c = rig.check(&s);

    rig.clock.freeze_timers(true);
    let mut dying = rig.start_pass(&c);
    assert!(dying.as_mut().now_or_never().is_none());
    drop(dying);
    rig.clock.freeze_timers(false);
    assert_eq!(
        rig.github.check_runs_on(&s).len(),
        1,
        "created, never journaled"
    );

    assert_eq!(rig.run_to_end(&c), Status::Complete);
    assert_eq!(
        rig.github.calls_to("create-check-run").len(),
        1,
        "not created again"
    );
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    assert_eq!(run.statuses, ["in_progress", "completed"]);
}

/// What an instance holds of the gates in the index: its pool slots and
/// the holder of its sandbox's lease.
fn gate_rows(rig: &Rig, c: &Inst) -> (usize, Option<String>) {
    let slots = block_on(rig.index.db.all(sluice::stmt!(
        "SELECT pool FROM pool_slots WHERE holder = ?1",
        c.id.as_str()
    )))
    .unwrap()
    .len();
    let lease = block_on(rig.index.db.all(sluice::stmt!(
        "SELECT holder FROM container_leases WHERE sandbox_id = ?1",
        c.id.as_str()
    )))
    .unwrap()
    .first()
    .map(|r| r["holder"].as_str().unwrap().to_owned());
    (slots, lease)
}

/// Where a step sits in an instance's journal.
fn position(rig: &Rig, c: &Inst, name: &str) -> usize {
    let names = rig.step_names(c);
    names
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no step {name:?} in {names:?}"))
}

/// Issue 26: a check's verdict reaches GitHub before its gates are
/// released (the release is off the path from the webhook to the
/// conclusion). The pass dies inside the conclusion, after GitHub applied
/// it: every gate is still held then, and the replay releases them.
#[test]
fn a_check_run_is_concluded_before_the_gates_are_released_and_a_crash_there_still_releases() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let c = rig.check(&s);
    rig.github.hang_after_applying_next("update-check-run");

    rig.clock.freeze_timers(true);
    let mut dying = rig.start_pass(&c);
    assert!(dying.as_mut().now_or_never().is_none());
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("success"), "concluded");
    assert_eq!(
        gate_rows(&rig, &c),
        (3, Some(c.id.clone())),
        "while its three pool slots and its lease are still held"
    );
    assert!(!rig.step_names(&c).contains(&"release gates".to_owned()));
    drop(dying);
    rig.clock.freeze_timers(false);

    assert_eq!(rig.run_to_end(&c), Status::Complete);
    assert_eq!(gate_rows(&rig, &c), (0, None), "released on replay");
    assert!(position(&rig, &c, "complete check run") < position(&rig, &c, "release gates"));
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.statuses, ["in_progress", "completed"], "concluded once");
    assert_eq!(rig.output(&c)["conclusion"], "success");
}

/// The pass dies after the conclusion was journaled, in the release (its
/// first statement failed and the retry's wait never came): the replay
/// does not conclude again and releases everything.
#[test]
fn a_pass_that_dies_between_the_conclusion_and_the_release_releases_on_replay() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let c = rig.check(&s);
    // The release's first statement: the instance's live processes.
    rig.index
        .fail_next_matching("SELECT process_id, sandbox_id, start_by_ms FROM sandbox", 1);

    rig.clock.freeze_timers(true);
    let mut dying = rig.start_pass(&c);
    assert!(dying.as_mut().now_or_never().is_none());
    assert_eq!(
        rig.entry(&c, "complete check run").state,
        sluice::journal::EntryState::Done
    );
    assert_eq!(
        rig.github
            .only_check_run(&s, "sluice/check")
            .conclusion
            .as_deref(),
        Some("success")
    );
    assert_eq!(gate_rows(&rig, &c).0, 3, "held when the pass died");
    drop(dying);
    rig.clock.freeze_timers(false);

    assert_eq!(rig.run_to_end(&c), Status::Complete);
    assert_eq!(gate_rows(&rig, &c), (0, None));
    assert_eq!(
        rig.entry(&c, "release gates").state,
        sluice::journal::EntryState::Done,
        "the body's own release, not only the finalize after it"
    );
    assert_eq!(rig.github.calls_to("update-check-run").len(), 1);
}

/// An instance an older version left in flight, whose journal holds the
/// release where the conclusion now goes (that version released, then
/// concluded), replays in its own order: no journal mismatch, the check
/// run concluded after the release it journaled.
#[test]
fn a_journal_that_released_before_concluding_replays_in_its_order() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let c = rig.check(&s);
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    // The older version's journal as it died after its release: the
    // conclusion dropped, the release in its place.
    let (conclude, release) = (
        position(&rig, &c, "complete check run"),
        position(&rig, &c, "release gates"),
    );
    assert_eq!(release, conclude + 1);
    let mut released = rig.journal(&c)[release].clone();
    released.seq = conclude as u32;
    let journal = &c.world.journal;
    journal.truncate_from(conclude as u32).unwrap();
    journal.put_entry(&released).unwrap();
    let mut record = journal.load_instance().unwrap().unwrap();
    record.status = Status::Running;
    (record.finished_ms, record.output) = (None, None);
    journal.save_instance(&record).unwrap();
    {
        let mut st = rig.github.st.borrow_mut();
        let run = st.check_runs.iter_mut().find(|r| r.head_sha == s).unwrap();
        run.statuses.pop();
        run.conclusion = None;
    }

    assert_eq!(rig.run_to_end(&c), Status::Complete);
    let names = rig.step_names(&c);
    assert_eq!(
        names[conclude..],
        ["release gates", "complete check run"],
        "{names:?}"
    );
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.statuses, ["in_progress", "completed"]);
    assert_eq!(run.conclusion.as_deref(), Some("success"));
}

/// A deploy keeps the other order: its gates are released (the group
/// handed over) before its check run is concluded, since its verdict is
/// settled after the gates (`Gates::report` is None for it).
#[test]
fn a_deploy_releases_its_gates_before_it_concludes_its_check_run() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let d = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&d), Status::Complete);
    assert!(position(&rig, &d, "release gates") < position(&rig, &d, "complete check run"));
}

/// An operator's restart from the top runs the check again on the check run
/// the first generation created.
#[test]
fn a_restarted_check_reuses_its_check_run() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let c = rig.check(&s);
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    rig.command(&c, Command::Restart { from_step: None });
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    assert_eq!(rig.github.calls_to("create-check-run").len(), 1);
    assert_eq!(
        rig.github.only_check_run(&s, "sluice/check").statuses,
        ["in_progress", "completed", "in_progress", "completed"]
    );
}

#[test]
fn a_pass_that_dies_mid_command_is_replayed_by_observing_the_process() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script_running("cargo test", 0, "ok\n", 3);
    let c = rig.check(&s);

    // The pass reaches the command's long-poll and the executor dies there.
    rig.clock.freeze_timers(true);
    let mut dying = rig.start_pass(&c);
    assert!(dying.as_mut().now_or_never().is_none());
    drop(dying);
    assert_eq!(rig.sandbox.starts_in(&c.id).len(), 1);
    rig.clock.freeze_timers(false);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let starts = rig.sandbox.starts_in(&c.id);
    assert_eq!(
        starts.len(),
        1,
        "the replay observed the process instead of starting it again: {starts:#?}"
    );
    assert!(starts[0].spawned);
    assert_eq!(rig.sandbox.checkouts_in(&c.id).len(), 1);
    assert_eq!(rig.github.calls_to("create-check-run").len(), 1);
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    let rec = rig.record(&c);
    assert_eq!(
        (rec.passes, rec.clean_passes),
        (2, 2),
        "the dead pass counted, and was caught up"
    );
}

#[test]
fn a_container_replaced_mid_wait_is_checked_out_and_started_again() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script_running("cargo test", 0, "ok\n", 2);
    rig.sandbox.replace_container_at_poll(2);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    assert_eq!(rig.sandbox.st.borrow().containers_replaced, 1);
    let starts = rig.sandbox.starts_in(&c.id);
    assert_eq!(starts.len(), 2, "started again in the new container");
    assert!(starts.iter().all(|s| s.spawned));
    assert_eq!(starts[0].id, starts[1].id, "under the same idempotency key");
    assert_eq!(
        rig.sandbox.checkouts_in(&c.id).len(),
        2,
        "the lost workspace was checked out again"
    );
    let step = rig.entry(&c, "run check command");
    assert_eq!(step.attempts, 2, "the step retried once (ProcessLost)");
    assert_eq!(rig.github.check_runs_on(&s).len(), 1, "still one check run");
    assert_eq!(
        rig.github
            .only_check_run(&s, "sluice/check")
            .conclusion
            .as_deref(),
        Some("success")
    );
}

// ---------------------------------------------------------------------------
// 3. GitHub faults
// ---------------------------------------------------------------------------

#[test]
fn github_blips_are_retried_and_the_check_still_completes() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    rig.github.fail_next("token", 1, 502);
    // The second contents failure backs off 4 s: past the inline limit, so
    // the instance suspends and the next pass retries.
    rig.github.fail_next("contents", 2, 502);
    // GitHub creates the check run but the answer is lost: the retry must
    // find it, not create a second.
    rig.github.lose_answer_next("create-check-run");
    rig.github.fail_next("update-check-run", 1, 502);
    let c = rig.check(&s);

    let first = rig.pass(&c);
    assert_eq!(
        first.status,
        Status::Waiting,
        "suspended for the long backoff"
    );
    assert_eq!(rig.entry(&c, "read config").state.as_str(), "retrying");
    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let statuses = |route| {
        rig.github
            .calls_to(route)
            .iter()
            .map(|c| c.status)
            .collect::<Vec<_>>()
    };
    // The API token (after the blip), then the checkout's own.
    assert_eq!(statuses("token"), [502, 201, 201]);
    assert_eq!(statuses("contents"), [502, 502, 200]);
    assert_eq!(
        statuses("create-check-run"),
        [502],
        "not re-posted: the retry found the run"
    );
    // The lost create's retry finds the run, already in progress (nothing
    // to start); the conclusion looks first whether something else
    // concluded it, on both its attempts (its first update answered 502).
    assert_eq!(statuses("list-check-runs"), [200, 200, 200]);
    assert_eq!(statuses("update-check-run"), [502, 200]);
    assert_eq!(
        rig.entry(&c, "read config").attempts,
        4,
        "token 502, contents 502 twice, then read"
    );
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.statuses, ["in_progress", "completed"]);
    assert_eq!(run.conclusion.as_deref(), Some("success"));
}

/// A 422 will not change on retry: the create step fails at once and the
/// instance errors. No check run exists, so there is nothing to conclude:
/// the PR shows no `sluice/check`, and the error is on the instance.
#[test]
fn a_422_on_check_run_create_is_not_retried() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    rig.github.fail_next("create-check-run", 1, 422);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Errored);

    assert_eq!(
        rig.github.calls_to("create-check-run").len(),
        1,
        "not retried"
    );
    let row = rig.row(&c);
    assert_eq!(row.error_tag.as_deref(), Some("NonRetryable"));
    assert!(
        row.error_message.as_deref().unwrap().contains("422"),
        "{row:?}"
    );
    let step = rig.entry(&c, "create check run");
    assert_eq!((step.state.as_str(), step.attempts), ("failed", 1));
    assert!(
        rig.github.check_runs_on(&s).is_empty(),
        "nothing was created, nothing concluded"
    );
    assert!(
        rig.sandbox.checkouts_in(&c.id).is_empty(),
        "the command never ran"
    );
}

// ---------------------------------------------------------------------------
// 4. deploy: serialization, not-current, supersede, operator skip
// ---------------------------------------------------------------------------

#[test]
fn deploys_of_a_branch_never_overlap_and_the_release_hands_the_group_over() {
    let (a, b, c) = (sha('a'), sha('b'), sha('c'));
    let rig = deploy_rig(&[&a, &b, &c], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);

    // A arrives at the head and takes the group; its command is in flight.
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    assert_eq!(rig.queue_state(&da), "holding");

    // B, the new head, arrives: it waits for the turn event, holding nothing.
    rig.clock.advance(MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    let p = rig.pass(&db);
    assert_eq!(
        (p.status, p.wake_at_ms),
        (
            Status::Waiting,
            Some(rig.now() + SERIAL_QUEUED_TIMEOUT_MS_DEFAULT + 1)
        ),
        "B waits for the handoff, bounded by its queued timeout"
    );
    assert!(rig.record(&db).reason.unwrap().contains("serial-turn"));
    assert_eq!(rig.queue_state(&db), "waiting");
    assert!(rig.sandbox.starts_in(&db.id).is_empty());
    assert_eq!(
        rig.github.only_check_run(&b, "sluice/deploy").statuses,
        ["in_progress"]
    );

    // C, not the head, is skipped at once: neutral, naming the head, announced.
    rig.clock.advance(MINUTE_MS);
    let dc = rig.deploy(&c);
    assert_eq!(rig.pass(&dc).status, Status::Skipped);
    let row = rig.row(&dc);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (Some("not_current"), Some("RunSkipped"))
    );
    let run = rig.github.only_check_run(&c, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary().contains(&format!("the head is {b}")),
        "{}",
        run.summary()
    );
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].signature_is_valid(), "{:?}", notes[0]);
    assert_eq!(
        notes[0].header("X-Sluice-Event"),
        Some("deployment_auto_skipped")
    );
    let n = notes[0].json();
    assert_eq!(
        (n["reason"].as_str(), n["revision"].as_str()),
        (Some("not_current"), Some(c.as_str()))
    );
    assert_eq!(
        (n["newer_revision"].as_str(), n["execution_id"].as_str()),
        (Some(b.as_str()), Some(dc.id.as_str()))
    );
    assert_eq!(
        rig.queue_state(&db),
        "waiting",
        "a not-current arrival supersedes nobody"
    );
    assert!(rig.sandbox.starts_in(&dc.id).is_empty());

    // A's command ends: its release wakes B.
    rig.clock.advance(MINUTE_MS);
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(
        rig.github
            .only_check_run(&a, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
    assert_eq!(rig.queue_state(&da), "released");
    assert_eq!(
        rig.waker.recorded(),
        [(db.id.clone(), TURN_EVENT.to_owned())]
    );

    // Delivered, the wake lets B take the group, re-read the head and deploy.
    rig.clock.advance(1_000);
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Complete);
    assert_eq!(
        rig.step_names(&db),
        [
            "read config",
            "create check run",
            "start check run",
            "create deployment",
            "deployment: queued",
            "gate: enter",
            "gate: read head",
            "gate: enqueue",
            "gate: claim",
            "gate: turn",
            "gate: claim#2",
            "gate: admission",
            "gate: lease",
            "re-read head",
            "deployment: in progress",
            "run deploy command",
            "deployment: conclude",
            "check group still held",
            "release gates",
            "complete check run",
        ]
    );
    assert_eq!(rig.sandbox.starts_in(&db.id)[0].env["SLUICE_HEAD_SHA"], b);
    assert_eq!(
        rig.github
            .only_check_run(&b, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
    let (ra, rb) = (
        rig.sandbox.only_run_in(&da.id),
        rig.sandbox.only_run_in(&db.id),
    );
    assert_eq!((ra.sha.as_str(), rb.sha.as_str()), (a.as_str(), b.as_str()));
    assert!(
        ra.ended_ms.unwrap() <= rb.started_ms,
        "A ran {ra:?}, B ran {rb:?}: they overlap"
    );
    assert_eq!(rig.sandbox.all_runs().len(), 2, "C never ran");
    assert_eq!(
        rig.github.notifications().len(),
        1,
        "only C's skip was announced"
    );
}

#[test]
fn a_newer_arrival_supersedes_the_waiting_deploy() {
    let (a, b, d) = (sha('a'), sha('b'), sha('d'));
    let rig = deploy_rig(&[&a, &b, &d], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // D, newer still, arrives: B is superseded in D's enqueue and woken.
    rig.clock.advance(MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &d);
    let dd = rig.deploy(&d);
    assert_eq!(rig.pass(&dd).status, Status::Waiting);
    assert_eq!(rig.queue_row(&db)["state"], "superseded");
    assert_eq!(rig.queue_row(&db)["superseded_by"], d.as_str());
    assert_eq!(
        rig.waker.recorded(),
        [(db.id.clone(), TURN_EVENT.to_owned())]
    );

    // B learns it at once: neutral, naming D, announced.
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Skipped);
    let row = rig.row(&db);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (Some("superseded"), Some("RunSkipped"))
    );
    let run = rig.github.only_check_run(&b, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(run.summary().contains(&d), "{}", run.summary());
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].signature_is_valid());
    let n = notes[0].json();
    assert_eq!(
        (n["reason"].as_str(), n["newer_revision"].as_str()),
        (Some("superseded"), Some(d.as_str()))
    );
    assert_eq!(n["revision"], b.as_str());

    // A was never touched; its release hands the group to D.
    assert!(rig.sandbox.runs_in(&da.id)[0].ended_ms.is_none());
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(rig.deliver(&dd), 1);
    assert_eq!(rig.pass(&dd).status, Status::Complete);
    assert!(rig.sandbox.runs_in(&db.id).is_empty(), "B never ran");
    assert_eq!(
        rig.github
            .only_check_run(&d, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
}

/// ADR-0004: the holder re-reads the head after it takes the group; a head
/// that moved on while it waited (the newer push's deploy not queued yet)
/// skips it, and the group is released for the newer one.
#[test]
fn a_holder_whose_commit_is_no_longer_the_head_skips_at_dequeue() {
    let (a, b, f) = (sha('a'), sha('b'), sha('f'));
    let rig = deploy_rig(&[&a, &b, &f], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // F is pushed; its webhook has not arrived when A hands over to B.
    rig.github.set_head(REPO, BRANCH, &f);
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Skipped);

    let row = rig.row(&db);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (Some("not_current"), Some("RunSkipped"))
    );
    assert!(rig.step_names(&db).contains(&"re-read head".to_owned()));
    assert!(rig.sandbox.runs_in(&db.id).is_empty(), "B never ran");
    assert_eq!(
        rig.queue_state(&db),
        "released",
        "the group is free for F's deploy"
    );
    let run = rig.github.only_check_run(&b, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary().contains(&format!("moved on to {f}")),
        "{}",
        run.summary()
    );
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].signature_is_valid());
    let n = notes[0].json();
    assert_eq!(n["reason"], "not_current");
    // The notification names the head the deploy yielded to.
    assert_eq!(n["newer_revision"].as_str(), Some(f.as_str()));
}

#[test]
fn an_operator_skip_ends_a_waiter_silently() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // `POST /v1/executions/{id}/skip`: skip in the queue, then wake.
    rig.clock.advance(MINUTE_MS);
    assert!(block_on(serial::skip(rig.index.as_ref(), GROUP, &db.id, rig.now())).unwrap());
    block_on(rig.waker.wake(&db.id, TURN_EVENT)).unwrap();
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Skipped);

    let row = rig.row(&db);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (None, Some("RunSkipped")),
        "an operator's skip records no reason"
    );
    assert_eq!(
        rig.queue_row(&db)["skipped_reason"],
        Value::Null,
        "an operator's skip records no reason"
    );
    assert_eq!(
        rig.github
            .only_check_run(&b, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("neutral")
    );
    assert!(
        rig.github.notifications().is_empty(),
        "an operator's skip is silent"
    );
    assert!(rig.github.calls_to("notify").is_empty());
    // Its GitHub deployment ends inactive, never having run (issue 14).
    let b_dep = rig.github.only_deployment(&b);
    assert_eq!(b_dep.states(), ["queued", "inactive"]);
    assert!(
        b_dep.latest().unwrap().description.starts_with("Not "),
        "{b_dep:?}"
    );
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
}

// ---------------------------------------------------------------------------
// 5. deploy: what a 60-minute wait costs
// ---------------------------------------------------------------------------

/// What B's wait cost: its claim steps, passes and minutes until skipped.
struct WaitCost {
    /// Durable calls of the gate while it waited: its claims and waits.
    gate_steps: usize,
    waited_min: i64,
}

/// A holds the group for 90 minutes (a real 90-minute process, its holder
/// heartbeating throughout); B, the head, arrives a minute later and waits
/// behind it, its alarms firing `alarm_late_ms` late.
fn wait_behind_a_live_holder(alarm_late_ms: i64) -> WaitCost {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 90 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let (a_end, (db, arrived, b_end)) = block_on(futures::future::join(rig.drive(&da, 0), async {
        rig.clock.sleep(MINUTE_MS).await;
        rig.github.set_head(REPO, BRANCH, &b);
        let db = rig.deploy(&b);
        let arrived = rig.now();
        assert!(rig.drive(&db, alarm_late_ms).await.is_terminal());
        (db, arrived, rig.now())
    }));
    assert_eq!(a_end, Status::Complete);
    let cost = WaitCost {
        gate_steps: rig
            .step_names(&db)
            .into_iter()
            .filter(|n| n.starts_with("gate: claim") || n.starts_with("gate: turn"))
            .count(),
        waited_min: (b_end - arrived) / MINUTE_MS,
    };
    let row = rig.row(&db);
    assert_eq!(
        (
            row.status.as_str(),
            row.reason.as_deref(),
            row.error_tag.as_deref()
        ),
        (
            "skipped",
            Some("queued_timeout"),
            Some("SerialQueueTimedOut")
        )
    );
    let run = rig.github.only_check_run(&b, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary().contains("waited over 60 minutes"),
        "{}",
        run.summary()
    );
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert!(notes[0].signature_is_valid());
    assert_eq!(notes[0].json()["reason"], "queued_timeout");
    // A heartbeated throughout: never taken over, it released its group.
    assert_eq!(rig.queue_state(&da), "released");
    assert!(rig.sandbox.runs_in(&db.id).is_empty(), "B never ran");
    cost
}

#[test]
fn a_waiter_behind_a_live_holder_times_out_in_at_most_4_durable_steps() {
    for late_ms in [3, 0] {
        let cost = wait_behind_a_live_holder(late_ms);
        println!(
            "scenario 5 (alarms {late_ms} ms late): B's wait took {} gate steps, skipped after {} min",
            cost.gate_steps, cost.waited_min
        );
        assert!(cost.gate_steps <= 4, "{} gate steps", cost.gate_steps);
        // The claim just past the 60-minute deadline decides the timeout.
        assert_eq!(cost.waited_min, 60);
    }
}

/// A handoff just before the waiter's deadline is taken, not mistaken for a
/// timeout: with `queued_timeout = 30m`, A's release at 25 minutes hands B
/// the free group at once and B deploys.
#[test]
fn a_handoff_before_the_deadline_is_taken_not_timed_out() {
    let (a, b) = (sha('a'), sha('b'));
    let config = format!("{DEPLOY_TOML}[deploy.queue]\nqueued_timeout = \"30m\"\n");
    let rig = deploy_rig_timed(&[&a, &b], &config, 25 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let (a_end, (db, b_end)) = block_on(futures::future::join(rig.drive(&da, 0), async {
        rig.clock.sleep(1_000).await;
        rig.github.set_head(REPO, BRANCH, &b);
        let db = rig.deploy(&b);
        let end = rig.drive(&db, 0).await;
        (db, end)
    }));
    assert_eq!((a_end, b_end), (Status::Complete, Status::Complete));
    assert_eq!(rig.row(&db).reason, None, "B was not skipped");
    let (ra, rb) = (
        rig.sandbox.only_run_in(&da.id),
        rig.sandbox.only_run_in(&db.id),
    );
    assert!(
        ra.end_ms().unwrap() <= rb.started_ms,
        "{ra:?} overlaps {rb:?}"
    );
    assert!(
        rb.started_ms - ra.end_ms().unwrap() < MINUTE_MS,
        "B took the group at A's release, not at a poll: {ra:?} {rb:?}"
    );
}

// ---------------------------------------------------------------------------
// 6. deploy: secrets
// ---------------------------------------------------------------------------

#[test]
fn a_deploy_secret_reaches_the_process_and_nothing_else() {
    const VALUE: &str = "cf-api-token-5f2b7c9e1d44";
    let a = sha('a');
    let config =
        "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nenvironment = \"production\"\n";
    let rig = Rig::new();
    rig.github.commit(REPO, &a, &[(".sluice.toml", config)]);
    rig.sandbox.script(
        "./deploy.sh",
        0,
        "auth with ${DEPLOY_TOKEN}\npublished hello@$SLUICE_SHA\n",
    );
    rig.secrets.set("DEPLOY_TOKEN", VALUE);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);

    assert_eq!(rig.run_to_end(&da), Status::Complete);

    let start = &rig.sandbox.starts_in(&da.id)[0];
    assert_eq!(start.env["DEPLOY_TOKEN"], VALUE, "exported to the command");
    let tokens = rig.github.issued_tokens();
    assert!(
        start.redact.iter().any(|v| v == VALUE) && start.redact.iter().any(|v| tokens.contains(v)),
        "the agent scrubs the secret and the checkout token: {:?}",
        start.redact.len()
    );
    let result = rig.command_result(&da, "run deploy command");
    let log = rig.log(&result.log_key).expect("log stored");
    assert!(
        log.contains("auth with ***\n") && !log.contains(VALUE),
        "{log}"
    );
    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    assert!(run.summary().contains("auth with ***") && !run.summary().contains(VALUE));
    // Nowhere else: not the journal, not D1, not a request to GitHub. The
    // installation token Sluice used for the checkout neither.
    let journal = rig.journal_dump(&da);
    let index = rig.index_dump();
    let to_github: String = rig
        .github
        .all_calls()
        .iter()
        .map(|c| format!("{} {} {:?}", c.method, c.path, c.body))
        .collect();
    let tokens = rig.github.issued_tokens();
    assert!(!tokens.is_empty());
    for secret in tokens.iter().map(String::as_str).chain([VALUE]) {
        assert!(!journal.contains(secret), "{secret} is in the journal");
        assert!(!index.contains(secret), "{secret} is in D1");
        assert!(!to_github.contains(secret), "{secret} was sent to GitHub");
    }
    assert!(
        index.contains("run deploy command"),
        "the dump does read the step timeline"
    );
}

/// The deploy config a pusher of branch `evil` writes at their commit.
const EVIL_TOML: &str =
    "[deploy]\nbranch = \"evil\"\ncommand = \"./deploy.sh\"\nenvironment = \"production\"\n";
const SECRET_VALUE: &str = "cf-api-token-5f2b7c9e1d44";

/// A rig whose default branch deploys `main_config`, with DEPLOY_TOKEN set.
fn environment_rig(main_sha: &str, main_config: &str) -> Rig {
    let rig = Rig::new();
    rig.github
        .commit(REPO, main_sha, &[(".sluice.toml", main_config)]);
    rig.github.set_head(REPO, BRANCH, main_sha);
    rig.sandbox
        .script("./deploy.sh", 0, "auth with ${DEPLOY_TOKEN}\n");
    rig.secrets.set("DEPLOY_TOKEN", SECRET_VALUE);
    rig
}

/// Item 1 of the security issue, as a pusher of a branch would try it: the
/// config at the pushed commit names the branch and the environment. The
/// policy is read on the default branch, which deploys `main` only.
#[test]
fn a_branch_cannot_grant_itself_a_deploy_or_its_secrets() {
    let (m, e) = (sha('a'), sha('e'));
    let rig = environment_rig(
        &m,
        "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nenvironment = \"production\"\n",
    );
    rig.github.commit(REPO, &e, &[(".sluice.toml", EVIL_TOML)]);
    rig.github.set_head(REPO, "evil", &e);
    let de = rig.deploy_pushed(REPO, "evil", &e, None);

    assert_eq!(rig.run_to_end(&de), Status::Skipped);

    assert!(rig.sandbox.starts_in(&de.id).is_empty(), "nothing ran");
    assert!(
        rig.github.check_runs_on(&e).is_empty(),
        "a branch main's config does not deploy is not a deploy"
    );
    let reads = rig.github.calls_to("contents");
    assert!(
        !reads.is_empty() && reads.iter().all(|c| c.path.contains("ref=main")),
        "the policy was read on the default branch only: {reads:?}"
    );
}

/// The default branch may name a branch the environment does not allow:
/// the operator's grant decides, and the refusal names no secret.
#[test]
fn an_environment_refuses_a_branch_it_does_not_allow() {
    let m = sha('a');
    let s = sha('5');
    let config =
        "[deploy]\nbranch = \"staging\"\ncommand = \"./deploy.sh\"\nenvironment = \"production\"\n";
    let rig = environment_rig(&m, config);
    rig.github.commit(REPO, &s, &[]);
    rig.github.set_head(REPO, "staging", &s);
    let ds = rig.deploy_pushed(REPO, "staging", &s, None);

    assert_eq!(rig.run_to_end(&ds), Status::Complete);

    assert!(rig.sandbox.starts_in(&ds.id).is_empty());
    let run = rig.github.only_check_run(&s, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    let summary = run.summary();
    assert!(
        summary.contains("may not deploy to environment `production`"),
        "{summary}"
    );
    assert!(
        !summary.contains("DEPLOY_TOKEN") && !summary.contains(SECRET_VALUE),
        "{summary}"
    );
    assert_eq!(
        rig.queue_states(&ds).len(),
        0,
        "a refused deploy never queued"
    );
}

/// Unknown environments and environments closed to this repository get
/// the same words: a pusher learns nothing about what exists.
#[test]
fn refusals_do_not_tell_which_environments_exist() {
    let summaries: Vec<String> = ["production", "nonexistent"]
        .into_iter()
        .map(|name| {
            let m = sha('a');
            let config = format!("[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nenvironment = \"{name}\"\n");
            let mut rig = environment_rig(&m, &config);
            // production exists but is not open to octo/hello.
            rig.environments = Environments::parse(Some(
                "[production]\nrepos = [\"octo/other\"]\nbranches = [\"main\"]\nsecrets = [\"DEPLOY_TOKEN\"]\n",
            ));
            let d = rig.deploy(&m);
            assert_eq!(rig.run_to_end(&d), Status::Complete);
            assert!(rig.sandbox.starts_in(&d.id).is_empty());
            rig.github.only_check_run(&m, "sluice/deploy").summary().replace(name, "<name>")
        })
        .collect();
    assert_eq!(summaries[0], summaries[1]);
}

#[test]
fn an_environment_missing_a_secret_deploys_nothing_and_names_none() {
    let m = sha('a');
    let rig = Rig::new();
    rig.github.commit(
        REPO,
        &m,
        &[(".sluice.toml", "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nenvironment = \"production\"\n")],
    );
    rig.github.set_head(REPO, BRANCH, &m);
    let d = rig.deploy(&m);

    assert_eq!(rig.run_to_end(&d), Status::Complete);

    let run = rig.github.only_check_run(&m, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert!(
        run.summary().contains("missing one of its secrets"),
        "{}",
        run.summary()
    );
    assert!(!run.summary().contains("DEPLOY_TOKEN"), "{}", run.summary());
    assert!(rig.sandbox.starts_in(&d.id).is_empty());
    assert_eq!(
        rig.queue_state(&d),
        "released",
        "the group is released on this exit too"
    );
}

/// A deploy that selects no environment runs with no secret at all.
#[test]
fn a_deploy_without_an_environment_gets_no_secret() {
    let m = sha('a');
    let rig = environment_rig(&m, DEPLOY_TOML);
    let d = rig.deploy(&m);
    assert_eq!(rig.run_to_end(&d), Status::Complete);
    let start = &rig.sandbox.starts_in(&d.id)[0];
    assert!(!start.env.contains_key("DEPLOY_TOKEN"), "{:?}", start.env);
    assert!(!start.env.values().any(|v| v == SECRET_VALUE));
}

#[test]
fn secrets_named_in_the_repository_are_refused_with_the_migration() {
    let m = sha('a');
    let rig = environment_rig(
        &m,
        "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nsecrets = [\"DEPLOY_TOKEN\"]\n",
    );
    let d = rig.deploy(&m);
    assert_eq!(rig.run_to_end(&d), Status::Complete);
    let run = rig.github.only_check_run(&m, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    assert!(
        run.summary().contains("[deploy] environment"),
        "{}",
        run.summary()
    );
    assert!(rig.sandbox.starts_in(&d.id).is_empty());
}

/// Repository and branch globs follow GitHub's: `*` stops at `/`.
#[test]
fn environment_globs_match_as_githubs_branch_filters() {
    let envs = Environments::parse(Some(
        "[staging]\nrepos = [\"Octo/*\"]\nbranches = [\"release/*\", \"hotfix/**\"]\n",
    ));
    assert!(envs.error().is_none(), "{:?}", envs.error());
    assert!(envs.grant("staging", "octo/hello", "release/1.2").is_ok());
    assert!(envs.grant("staging", "octo/hello", "hotfix/a/b").is_ok());
    assert!(envs.grant("staging", "octo/hello", "release/1/2").is_err());
    assert!(envs.grant("staging", "other/hello", "release/1").is_err());
    assert!(envs.grant("production", "octo/hello", "release/1").is_err());
    for bad in [
        "[p]\nrepos = [\"octo/x\"]\n",
        "[p]\nrepos = [\"octo\"]\nbranches = [\"main\"]\n",
        "[p]\nrepos = [\"octo/x\"]\nbranches = [\"main\"]\nsecrets = [\"GITHUB_APP_PRIVATE_KEY\"]\n",
        "[p]\nrepos = [\"octo/x\"]\nbranches = [\"main\"]\nsecret = [\"X\"]\n",
        "[Prod]\nrepos = [\"octo/x\"]\nbranches = [\"main\"]\n",
    ] {
        let envs = Environments::parse(Some(bad));
        assert!(envs.error().is_some(), "{bad:?} must be refused");
        assert!(envs.grant("p", "octo/x", "main").is_err(), "an invalid declaration grants nothing");
    }
}

// ---------------------------------------------------------------------------
// 7. finalize after an operator's terminate
// ---------------------------------------------------------------------------

/// Fencing: a holder whose executor died before its command (its pass
/// dropped mid-checkout) goes stale; a newer deploy takes the group over
/// and deploys; when the old holder resumes, its fence refuses the spawn:
/// it starts no command and says why.
#[test]
fn a_holder_that_stalled_and_was_taken_over_does_not_deploy() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    rig.sandbox.st.borrow_mut().checkout_hangs = true;
    rig.clock.freeze_timers(true);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    assert_eq!(rig.queue_state(&da), "holding");
    drop(a_pass);
    rig.clock.freeze_timers(false);
    rig.sandbox.st.borrow_mut().checkout_hangs = false;

    rig.clock.advance(11 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.run_to_end(&db), Status::Complete);
    assert_eq!(
        rig.sandbox.runs_in(&db.id).len(),
        1,
        "B took the stale group over and deployed"
    );

    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert!(
        rig.sandbox.runs_in(&da.id).is_empty(),
        "A never deploys after losing its group"
    );
    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("cancelled"));
    assert!(
        run.summary().contains("lost its group"),
        "{}",
        run.summary()
    );
}

#[test]
fn a_restarted_deploy_queues_afresh_and_deploys_again() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert_eq!(rig.sandbox.runs_in(&da.id).len(), 1);
    assert_eq!(
        rig.command(&da, Command::Restart { from_step: None }),
        Status::Queued
    );
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert_eq!(
        rig.sandbox.runs_in(&da.id).len(),
        2,
        "the restart deployed again"
    );
}

#[test]
fn terminating_a_waiting_deploy_then_finalizing_withdraws_it_from_the_queue() {
    let (a, b, e) = (sha('a'), sha('b'), sha('e'));
    let rig = deploy_rig(&[&a, &b, &e], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    rig.clock.advance(MINUTE_MS);
    assert_eq!(rig.command(&db, Command::Terminate), Status::Terminated);
    assert_eq!(
        rig.queue_state(&db),
        "waiting",
        "the engine alone knows nothing of the gate"
    );
    rig.finalize(&db);
    assert_eq!(rig.queue_state(&db), "released");
    let run = rig.github.only_check_run(&b, "sluice/deploy");
    assert_eq!(
        (
            run.statuses.last().map(String::as_str),
            run.conclusion.as_deref()
        ),
        (Some("completed"), Some("cancelled")),
        "the check run the terminated deploy opened does not stay in progress"
    );
    rig.finalize(&db);
    assert_eq!(rig.queue_state(&db), "released", "finalize is idempotent");

    // The group proceeds: a new head queues, and A's release hands the
    // group to it, not to the terminated B.
    rig.github.set_head(REPO, BRANCH, &e);
    let de = rig.deploy(&e);
    assert_eq!(rig.pass(&de).status, Status::Waiting);
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(
        rig.waker.recorded(),
        [(de.id.clone(), TURN_EVENT.to_owned())]
    );
    assert_eq!(rig.deliver(&de), 1);
    assert_eq!(rig.pass(&de).status, Status::Complete);
    assert!(rig.sandbox.runs_in(&db.id).is_empty());
}

#[test]
fn terminating_the_holder_then_finalizing_hands_the_group_to_the_waiter_at_once() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // A's executor dies mid-command; an operator terminates A.
    drop(a_pass);
    rig.clock.freeze_timers(false);
    rig.clock.advance(MINUTE_MS);
    assert_eq!(rig.command(&da, Command::Terminate), Status::Terminated);
    rig.finalize(&da);

    assert_eq!(rig.queue_state(&da), "released");
    assert_eq!(
        rig.waker.recorded(),
        [(db.id.clone(), TURN_EVENT.to_owned())]
    );
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(
        rig.pass(&db).status,
        Status::Complete,
        "B took the group without waiting for A to go stale"
    );
    assert!(rig.now() - T0 < HOLDER_STALE_MS);
    assert_eq!(
        rig.github
            .only_check_run(&b, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
}

// ---------------------------------------------------------------------------
// 8. deploys under adversity: one test per scenario of the gates' review
// (operator commands, stalls, lost wake-ups, dead holders, kills, ceilings)
// ---------------------------------------------------------------------------

/// Scenario 1: an operator's restart from a step past the gate, while
/// another execution holds the group, is refused naming why; a restart from
/// inside the gate re-enters it as a new arrival. The holder that still
/// holds may restart its command: its old process is killed first.
#[test]
fn scenario_1_a_restart_past_the_gate_needs_the_group() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(block_on(rig.drive(&da, 0)), Status::Complete);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting, "B's command runs on");
    assert_eq!(rig.queue_state(&db), "holding");

    for step in ["run deploy command", "re-read head"] {
        let refused = rig.try_command(
            &da,
            Command::Restart {
                from_step: Some(step.into()),
            },
        );
        match refused {
            Err(CommandError::Conflict(m)) => {
                assert!(m.contains("no longer holds"), "{m}");
                assert!(m.contains(GROUP), "{m}");
            }
            other => panic!("restart of A from {step:?}: {other:?}"),
        }
    }
    // From inside the gate: A queues afresh and, not the head, is skipped.
    let st = rig.command(
        &da,
        Command::Restart {
            from_step: Some("gate: admission".into()),
        },
    );
    assert_eq!(st, Status::Queued);
    assert_eq!(rig.run_to_end(&da), Status::Skipped);
    assert_eq!(rig.row(&da).reason.as_deref(), Some("not_current"));
    assert_eq!(rig.sandbox.runs_in(&da.id).len(), 1, "A deployed once");

    // B still holds: it may restart its command; the old process dies first.
    let st = rig.command(
        &db,
        Command::Restart {
            from_step: Some("run deploy command".into()),
        },
    );
    assert_eq!(st, Status::Queued);
    assert_eq!(block_on(rig.drive(&db, 0)), Status::Complete);
    let runs = rig.sandbox.runs_in(&db.id);
    assert_eq!(runs.len(), 2);
    assert!(runs[0].killed, "the first process was killed: {runs:?}");
    rig.assert_no_overlap();
    assert!(rig.held_by(&db).is_empty(), "{:?}", rig.held_by(&db));
}

/// Scenario 1: a plain restart of a paused holder kills its process and
/// releases its row before the new generation queues, so the two never run
/// at once in the workspace.
#[test]
fn scenario_1_restarting_a_paused_holder_kills_its_process_first() {
    let a = sha('a');
    let rig = deploy_rig_timed(&[&a], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting, "its command runs on");
    assert_eq!(rig.command(&da, Command::Pause), Status::Paused);
    assert_eq!(
        rig.command(&da, Command::Restart { from_step: None }),
        Status::Queued
    );
    assert_eq!(rig.queue_states(&da), ["released"], "generation 0 left");
    assert_eq!(block_on(rig.drive(&da, 0)), Status::Complete);
    let runs = rig.sandbox.runs_in(&da.id);
    assert_eq!(runs.len(), 2);
    assert!(runs[0].killed, "{runs:?}");
    rig.assert_no_overlap();
    assert_eq!(rig.queue_states(&da), ["released", "released"]);
}

/// Scenario 2: the holder beats while a long sandbox call is in flight (an
/// 11-minute checkout), so a newer arrival during it waits instead of
/// taking the group over and deploying beside it.
#[test]
fn scenario_2_a_holder_heartbeats_through_a_long_checkout() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 2 * MINUTE_MS);
    rig.sandbox.st.borrow_mut().checkout_ms = 11 * MINUTE_MS;
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let (a_end, b_end) = block_on(futures::future::join(rig.drive(&da, 0), async {
        rig.clock.sleep(10 * MINUTE_MS + 30_000).await;
        rig.github.set_head(REPO, BRANCH, &b);
        let db = rig.deploy(&b);
        let end = rig.drive(&db, 0).await;
        assert_eq!(rig.sandbox.runs_in(&db.id).len(), 1);
        end
    }));
    assert_eq!((a_end, b_end), (Status::Complete, Status::Complete));
    assert_eq!(rig.queue_state(&da), "released", "A was never taken over");
    assert_eq!(rig.sandbox.runs_in(&da.id).len(), 1);
    rig.assert_no_overlap();
}

/// Scenario 3: terminating a holder kills its process and confirms the end
/// before the group is released and handed on.
#[test]
fn scenario_3_terminate_kills_before_it_releases() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting, "A's command runs on");
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    let terminated_at = rig.now();
    assert_eq!(rig.command(&da, Command::Terminate), Status::Terminated);
    rig.finalize(&da);
    let ra = rig.sandbox.only_run_in(&da.id);
    assert!(ra.killed, "{ra:?}");
    assert_eq!(ra.ended_ms, Some(terminated_at));
    assert!(rig.held_by(&da).is_empty());
    assert_eq!(
        rig.waker.recorded(),
        [(db.id.clone(), TURN_EVENT.to_owned())]
    );
    assert_eq!(block_on(rig.drive(&db, 0)), Status::Complete);
    rig.assert_no_overlap();
}

/// Scenario 3: when the kill cannot be confirmed, nothing is released (the
/// safe side): the rows stay held, nobody is handed the group, and the
/// sweep finalizes again until the kill is confirmed.
#[test]
fn scenario_3_an_unconfirmed_kill_keeps_the_group_held() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    rig.sandbox.st.borrow_mut().kill_fails = true;
    assert_eq!(rig.command(&da, Command::Terminate), Status::Terminated);
    assert!(rig.try_finalize(&da).is_err());
    assert_eq!(rig.queue_state(&da), "holding");
    assert!(
        rig.waker.recorded().is_empty(),
        "nobody was handed the group"
    );
    assert_eq!(rig.sweep().finalized, 0, "the sweep tried and failed");
    rig.sandbox.st.borrow_mut().kill_fails = false;
    rig.clock.advance(MINUTE_MS);
    assert_eq!(rig.sweep().finalized, 1);
    assert!(rig.held_by(&da).is_empty());
    assert!(rig.sandbox.only_run_in(&da.id).killed);
    assert_eq!(block_on(rig.drive(&db, 0)), Status::Complete);
    rig.assert_no_overlap();
}

const CONFIRM_TOML: &str =
    "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nconfirm = true\n";

/// Scenario 4: a deploy that asks for confirmation gets a ceiling covering
/// its window (72 h by default) plus its deploy, so an unanswered one is
/// skipped `confirmation_timeout`, neutral and announced, instead of ending
/// `RunDurationExceeded` at the 6 h default ceiling.
#[test]
fn scenario_4_an_unanswered_confirmation_times_out_as_a_skip() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], CONFIRM_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Skipped);
    assert_eq!(rig.now() - T0, 72 * 60 * MINUTE_MS, "after the 72 h window");
    let row = rig.row(&da);
    assert_eq!(
        (row.reason.as_deref(), row.error_tag.as_deref()),
        (Some("confirmation_timeout"), Some("RunSkipped"))
    );
    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary().contains("confirmation_timeout"),
        "{}",
        run.summary()
    );
    let notes = rig.github.notifications();
    assert_eq!(notes.len(), 1);
    assert_eq!(notes[0].json()["reason"], "confirmation_timeout");
    assert!(rig.sandbox.all_runs().is_empty());
}

/// Scenario 4: a restart never reuses the confirmation an earlier
/// generation received, from the top or from past the gate.
#[test]
fn scenario_4_a_restart_asks_for_confirmation_again() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], CONFIRM_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting);
    da.world
        .engine()
        .send_event("deploy-confirm", &json!({ "by": "ana" }))
        .unwrap();
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert_eq!(rig.sandbox.all_runs().len(), 1);
    for (deployed, from_step) in [(1, None), (2, Some("run deploy command".to_owned()))] {
        assert_eq!(
            rig.command(&da, Command::Restart { from_step }),
            Status::Queued
        );
        let p = rig.pass(&da);
        assert_eq!(p.status, Status::Waiting);
        assert!(
            rig.record(&da)
                .reason
                .unwrap_or_default()
                .contains("deploy-confirm"),
            "it waits for a new confirmation"
        );
        assert_eq!(
            rig.sandbox.all_runs().len(),
            deployed,
            "not deployed unasked"
        );
        da.world
            .engine()
            .send_event("deploy-confirm", &json!({ "by": "ana" }))
            .unwrap();
        assert_eq!(rig.run_to_end(&da), Status::Complete);
    }
    assert_eq!(rig.sandbox.all_runs().len(), 3);
}

/// Scenario 5: a lost handoff costs at most one sweep interval: the sweep
/// finds the free group with a live waiter and wakes it.
#[test]
fn scenario_5_a_lost_handoff_is_recovered_by_the_next_sweep() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 5 * MINUTE_MS + 30_000);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    rig.waker.lose_next.set(1);
    let done = std::cell::Cell::new(false);
    let (db, ..) = block_on(futures::future::join3(
        async {
            rig.clock.sleep(1_000).await;
            rig.github.set_head(REPO, BRANCH, &b);
            let db = rig.deploy(&b);
            assert_eq!(rig.drive(&db, 0).await, Status::Complete);
            done.set(true);
            db
        },
        rig.drive(&da, 0),
        sweep_every_minute(&rig, &done),
    ));
    let (ra, rb) = (
        rig.sandbox.only_run_in(&da.id),
        rig.sandbox.only_run_in(&db.id),
    );
    let idle_ms = rb.started_ms - ra.end_ms().unwrap();
    println!("lost wake-up: the group sat free {idle_ms} ms with a live waiter");
    assert!(
        (0..=MINUTE_MS + 2_000).contains(&idle_ms),
        "the group sat idle {idle_ms} ms with B waiting"
    );
}

/// The cron sweep, every minute of virtual time until `done`.
async fn sweep_every_minute(rig: &Rig, done: &std::cell::Cell<bool>) {
    for _ in 0..24 * 60 {
        if done.get() {
            return;
        }
        rig.clock.sleep(MINUTE_MS).await;
        rig.sweep();
    }
}

/// Scenario 5: a release wakes the first live waiter; a paused older one
/// (which cannot take the turn) is passed over.
#[test]
fn scenario_5_a_release_passes_over_a_paused_waiter() {
    let (a, b, c) = (sha('a'), sha('b'), sha('c'));
    let fifo = "[deploy]\nbranch = \"release\"\ncommand = \"./deploy.sh\"\n[deploy.queue]\nsupersede = false\n";
    let rig = deploy_rig_timed(&[&a, &b, &c], fifo, 5 * MINUTE_MS);
    // The default branch carries the policy; no head of `release` is known
    // (the read answers 404): arrival order decides.
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy_pushed(REPO, "release", &a, None);
    assert_eq!(rig.pass(&da).status, Status::Waiting);
    let db = rig.deploy_pushed(REPO, "release", &b, None);
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    let dc = rig.deploy_pushed(REPO, "release", &c, None);
    assert_eq!(rig.pass(&dc).status, Status::Waiting);
    assert_eq!(rig.command(&db, Command::Pause), Status::Paused);
    assert_eq!(block_on(rig.drive(&da, 0)), Status::Complete);
    assert_eq!(
        rig.waker.recorded(),
        [(dc.id.clone(), TURN_EVENT.to_owned())],
        "C, the live waiter, is woken; paused B is not"
    );
    assert_eq!(block_on(rig.drive(&dc, 0)), Status::Complete);
    rig.assert_no_overlap();
}

/// Scenario 5: a holder that died without releasing frees its group within
/// the stale threshold plus one sweep interval; when its process outlived
/// it, the taker waits for that process to end before it deploys.
#[test]
fn scenario_5_a_dead_holder_frees_its_group_within_eleven_minutes() {
    for process_outlives_it in [false, true] {
        let (a, b) = (sha('a'), sha('b'));
        let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
        rig.github.set_head(REPO, BRANCH, &a);
        let da = rig.deploy(&a);
        if process_outlives_it {
            // A's pass ends with its 30-minute command running; A never runs again.
            assert_eq!(rig.pass(&da).status, Status::Waiting);
        } else {
            // A's executor dies mid-checkout, before any command.
            rig.sandbox.st.borrow_mut().checkout_hangs = true;
            rig.clock.freeze_timers(true);
            let mut a_pass = rig.start_pass(&da);
            rig.holds_in_flight(&mut a_pass);
            drop(a_pass);
            rig.clock.freeze_timers(false);
            rig.sandbox.st.borrow_mut().checkout_hangs = false;
        }
        let last_beat = rig.now();
        rig.github.set_head(REPO, BRANCH, &b);
        let done = std::cell::Cell::new(false);
        let db = block_on(futures::future::join(
            async {
                let db = rig.deploy(&b);
                assert_eq!(rig.drive(&db, 0).await, Status::Complete);
                done.set(true);
                db
            },
            sweep_every_minute(&rig, &done),
        ))
        .0;
        let rb = rig.sandbox.only_run_in(&db.id);
        let claimed = rig
            .journal(&db)
            .into_iter()
            .filter(|e| e.name.starts_with("gate: claim"))
            .last()
            .and_then(|e| e.finished_ms)
            .unwrap();
        println!(
            "dead holder (its process {}): the group was taken {} ms after its last heartbeat",
            if process_outlives_it {
                "outlived it"
            } else {
                "died with it"
            },
            claimed - last_beat
        );
        assert!(
            claimed - last_beat <= HOLDER_STALE_MS + MINUTE_MS,
            "the group was taken {} ms after A's last beat",
            claimed - last_beat
        );
        if process_outlives_it {
            let ra = rig.sandbox.only_run_in(&da.id);
            assert!(
                !ra.killed,
                "a running deploy is never cancelled by a newer one"
            );
            assert!(rb.started_ms >= ra.end_ms().unwrap());
        }
        rig.assert_no_overlap();
    }
}

/// Scenario 6: a finalize that fails (D1 down during an operator's
/// terminate) leaves rows behind; the sweep finalizes again until every
/// gate row is released; ended queue rows are purged after retention.
#[test]
fn scenario_6_a_failed_finalize_is_retried_by_the_sweep() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 5 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting);
    assert_eq!(rig.command(&da, Command::Terminate), Status::Terminated);
    // The lease release fails (an `all`: it returns the sandboxes it freed).
    rig.index
        .fail_next_matching("DELETE FROM container_leases", 1);
    assert!(rig.try_finalize(&da).is_err());
    assert!(!rig.held_by(&da).is_empty(), "something was left held");
    let swept = rig.sweep();
    assert_eq!(swept.finalized, 1, "{swept:?}");
    assert!(rig.held_by(&da).is_empty(), "{:?}", rig.held_by(&da));
    assert_eq!(rig.sweep().finalized, 0, "nothing left to finalize");

    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(block_on(rig.drive(&db, 0)), Status::Complete);
    rig.clock
        .advance(sluice::limits::RETENTION_MS_DEFAULT + MINUTE_MS);
    rig.sweep();
    let rows = block_on(
        rig.index
            .db
            .all(sluice::stmt!("SELECT COUNT(*) AS n FROM serial_queue")),
    )
    .unwrap();
    assert_eq!(rows[0]["n"], 0, "ended rows purged after retention");
}

/// Issue 8 item 4: checks of every repository together take at most
/// `checks_capacity` (3 of the rig's 4 sandboxes), so a deploy pushed while
/// pull requests fill their share starts at once.
#[test]
fn pull_requests_never_take_the_sandbox_a_deploy_needs() {
    let rig = Rig::new();
    let d = sha('d');
    rig.github
        .commit(REPO, &d, &[(".sluice.toml", DEPLOY_TOML)]);
    rig.github.set_head(REPO, BRANCH, &d);
    rig.sandbox
        .script_timed("./deploy.sh", 0, "deployed\n", MINUTE_MS);
    rig.sandbox
        .script_timed("cargo test", 0, "ok\n", 30 * MINUTE_MS);
    let mut checks = Vec::new();
    for (repo, digits) in [(REPO, "123"), ("octo/other", "456")] {
        for s in digits.chars().map(sha) {
            rig.github.commit(repo, &s, &[(".sluice.toml", CHECK_TOML)]);
            checks.push(rig.check_in(repo, &s));
        }
    }
    let deploy = rig.deploy(&d);
    let all: Vec<&Inst> = checks.iter().chain([&deploy]).collect();
    let ends = block_on(futures::future::join_all(
        all.iter().map(|i| rig.drive(i, 0)),
    ));
    assert!(ends.iter().all(|s| *s == Status::Complete), "{ends:?}");
    let check_runs: Vec<ProcessRun> = rig
        .sandbox
        .all_runs()
        .into_iter()
        .filter(|r| r.sha != d)
        .collect();
    let most = check_runs
        .iter()
        .map(|r| {
            check_runs
                .iter()
                .filter(|o| {
                    o.started_ms <= r.started_ms && o.end_ms().is_none_or(|e| e > r.started_ms)
                })
                .count()
        })
        .max()
        .unwrap();
    assert_eq!(most, 3, "checks of all repositories: 3 at once");
    let deployed = rig.sandbox.only_run_in(&deploy.id);
    assert!(
        deployed.started_ms < T0 + MINUTE_MS,
        "the deploy did not wait for checks: {deployed:?}"
    );
}

/// A check's three pools (its repository's, all checks', every sandbox's)
/// are taken in one admission step while they have room; a check whose
/// repository pool admits it but whose checks pool is full keeps the
/// first and takes the rest in a later round, after a release.
#[test]
fn free_pools_are_taken_in_one_admission_step_and_a_full_one_in_a_later_round() {
    let rig = Rig::new();
    rig.sandbox
        .script_timed("cargo test", 0, "ok\n", 10 * MINUTE_MS);
    let mut checks = Vec::new();
    // Two repositories, two checks each: the rig's checks pool holds 3.
    for (repo, digits) in [(REPO, "12"), ("octo/other", "34")] {
        for s in digits.chars().map(sha) {
            rig.github.commit(repo, &s, &[(".sluice.toml", CHECK_TOML)]);
            checks.push(rig.check_in(repo, &s));
        }
    }
    let ends = block_on(futures::future::join_all(
        checks.iter().map(|c| rig.drive(c, 0)),
    ));
    assert!(ends.iter().all(|s| *s == Status::Complete), "{ends:?}");
    let rounds = |c: &Inst| {
        rig.step_names(c)
            .iter()
            .filter(|n| n.starts_with("gate: admission"))
            .count()
    };
    let (waited, at_once): (Vec<&Inst>, Vec<&Inst>) = checks.iter().partition(|c| rounds(c) > 1);
    assert_eq!(
        (waited.len(), at_once.len()),
        (1, 3),
        "the checks pool holds 3"
    );
    for c in &at_once {
        let first: serde_json::Value =
            serde_json::from_str(&rig.entry(c, "gate: admission").value.unwrap()).unwrap();
        assert_eq!(
            (first["admitted"].clone(), first["pools"].clone()),
            (true.into(), 3.into())
        );
    }
    let first: serde_json::Value =
        serde_json::from_str(&rig.entry(waited[0], "gate: admission").value.unwrap()).unwrap();
    assert_eq!(
        (first["admitted"].clone(), first["pools"].clone()),
        (false.into(), 1.into()),
        "its repository's slot taken, queued for the checks pool"
    );
}

/// Scenario 7: checks pass admission (their repository's pool bounds them:
/// 2 at once in the rig), and the sandbox lease is held by the execution's gate id, so a restarted
/// generation is a different holder of the same sandbox.
#[test]
fn scenario_7_checks_are_admitted_to_the_pool() {
    let rig = Rig::new();
    let shas: Vec<String> = "12345".chars().map(sha).collect();
    for s in &shas {
        rig.github.commit(REPO, s, &[(".sluice.toml", CHECK_TOML)]);
    }
    rig.sandbox
        .script_timed("cargo test", 0, "ok\n", 10 * MINUTE_MS);
    let checks: Vec<Inst> = shas.iter().map(|s| rig.check(s)).collect();
    let ends = block_on(futures::future::join_all(
        checks.iter().map(|c| rig.drive(c, 0)),
    ));
    assert!(ends.iter().all(|s| *s == Status::Complete), "{ends:?}");
    let runs = rig.sandbox.all_runs();
    let most = runs
        .iter()
        .map(|r| rig.sandbox.live_runs_at(r.started_ms).len())
        .max()
        .unwrap();
    assert_eq!(most, 2, "one repository's checks: 2 at once: {runs:#?}");
    let last = runs.iter().max_by_key(|r| r.started_ms).unwrap();
    assert!(
        last.started_ms >= T0 + 20 * MINUTE_MS,
        "the fifth waited for two rounds of slots"
    );

    let c = &checks[0];
    let lease_holder = |c: &Inst| {
        block_on(rig.index.db.all(sluice::stmt!(
            "SELECT holder FROM container_leases WHERE sandbox_id = ?1",
            c.id.as_str()
        )))
        .unwrap()
        .first()
        .map(|r| r["holder"].as_str().unwrap().to_owned())
    };
    assert_eq!(lease_holder(c), None, "released at the end");
    assert_eq!(
        rig.command(c, Command::Restart { from_step: None }),
        Status::Queued
    );
    rig.sandbox.hold(&shas[0]);
    rig.clock.freeze_timers(true);
    let mut pass = rig.start_pass(c);
    rig.holds_in_flight(&mut pass);
    assert_eq!(lease_holder(c), Some(format!("{}.g1", c.id)));
    drop(pass);
    rig.clock.freeze_timers(false);
}

/// Scenario 10 (issue 21): a deploy whose checkout takes 6 minutes, then
/// is paused (its heartbeats stop) and taken over, is never run beside:
/// the taker waits until the sandbox says the process ended. Its fence is
/// passed after the checkout, immediately before the start, and nothing
/// is taken for ended because a clock passed (before, the fence's deadline
/// counted from before the checkout, so the taker started 2 minutes early).
#[test]
fn scenario_10_a_slow_checkout_never_lets_a_taker_start_beside_its_process() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.sandbox.st.borrow_mut().checkout_ms = 6 * MINUTE_MS;
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting, "A's command runs on");
    assert_eq!(rig.command(&da, Command::Pause), Status::Paused);
    rig.github.set_head(REPO, BRANCH, &b);
    let done = std::cell::Cell::new(false);
    let db = block_on(futures::future::join(
        async {
            let db = rig.deploy(&b);
            assert_eq!(rig.drive(&db, 0).await, Status::Complete);
            done.set(true);
            db
        },
        sweep_every_minute(&rig, &done),
    ))
    .0;
    let (ra, rb) = (
        rig.sandbox.only_run_in(&da.id),
        rig.sandbox.only_run_in(&db.id),
    );
    assert!(
        !ra.killed,
        "a running deploy is never cancelled by a newer one"
    );
    assert!(
        rb.started_ms >= ra.end_ms().unwrap(),
        "B started at {} while A ran until {:?}",
        rb.started_ms,
        ra.end_ms()
    );
    rig.assert_no_overlap();
}

/// Scenario 10 (issue 21): a holder whose start request is held up after
/// its fence (its pass stalled, so its heartbeats stopped) is taken over;
/// the taker judges the process never started only once its start window
/// passed, and the held-up start that reaches the sandbox while the
/// taker's deploy runs is refused there: the two never run at once.
#[test]
fn scenario_10_a_start_that_comes_after_its_window_is_refused() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 5 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    rig.sandbox.st.borrow_mut().starts_held = Some(da.id.clone());
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    let fenced = block_on(rig.index.db.all(sluice::stmt!(
        "SELECT state FROM sandbox_processes WHERE instance_id = ?1",
        da.id.as_str()
    )))
    .unwrap();
    assert_eq!(fenced[0]["state"], "live", "A passed its fence");
    rig.clock.advance(11 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    let (b_end, _) = block_on(futures::future::join(rig.drive(&db, 0), async {
        for _ in 0..60 {
            if !rig.sandbox.runs_in(&db.id).is_empty() {
                break;
            }
            rig.clock.sleep(10_000).await;
        }
        assert_eq!(rig.sandbox.runs_in(&db.id).len(), 1, "B deploys");
        // A's start reaches the sandbox now, while B's deploy runs.
        rig.sandbox.release_starts();
        a_pass.await
    }));
    assert_eq!(b_end, Status::Complete);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert!(rig.sandbox.runs_in(&da.id).is_empty(), "A never started");
    assert_eq!(rig.sandbox.st.borrow().late_starts_refused, 1);
    rig.assert_no_overlap();
}

/// During a rollout, a container may still run an agent from before start
/// windows, which refuses the field: the deploy still runs, fenced again
/// with its deadline as its window (found by review: every start on such a
/// container failed for good).
#[test]
fn an_agent_from_before_start_windows_still_deploys_with_its_deadline_as_the_window() {
    let a = sha('a');
    let rig = deploy_rig_timed(&[&a], DEPLOY_TOML, 2 * MINUTE_MS);
    rig.sandbox.st.borrow_mut().predates_start_windows = true;
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert_eq!(rig.sandbox.runs_in(&da.id).len(), 1);
    let row = block_on(rig.index.db.all(sluice::stmt!(
        "SELECT start_by_ms, deadline_ms FROM sandbox_processes WHERE instance_id = ?1",
        da.id.as_str()
    )))
    .unwrap();
    assert_eq!(
        row[0]["start_by_ms"], row[0]["deadline_ms"],
        "unknown counts as ended only past the deadline"
    );
}

/// Scenario 11 (issue 21): B reads head = B, then its enqueue is delayed
/// (the read's answer takes 10 minutes); meanwhile C holds and D arrives
/// as the head. B's stale read never supersedes D: it is read again at the
/// enqueue (B is then not current) and, whatever its age, judges only
/// waiters that arrived before it was asked for. D deploys last.
#[test]
fn scenario_11_a_delayed_enqueue_never_supersedes_the_head() {
    let (c, b, d) = (sha('c'), sha('b'), sha('d'));
    let rig = deploy_rig_timed(&[&c, &b, &d], DEPLOY_TOML, 20 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &c);
    let dc = rig.deploy(&c);
    assert_eq!(rig.pass(&dc).status, Status::Waiting, "C holds and deploys");
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    rig.github.delay_answer_next("ref", 10 * MINUTE_MS);
    let (ended, insts) = block_on(async {
        let b_side = rig.drive(&db, 0);
        let d_side = async {
            rig.clock.sleep(MINUTE_MS).await;
            rig.github.set_head(REPO, BRANCH, &d);
            let dd = rig.deploy(&d);
            (rig.drive(&dd, 0).await, dd)
        };
        let ((b_end, (d_end, dd)), c_end) =
            futures::future::join(futures::future::join(b_side, d_side), rig.drive(&dc, 0)).await;
        ((b_end, d_end, c_end), dd)
    });
    let dd = insts;
    assert_eq!(ended, (Status::Skipped, Status::Complete, Status::Complete));
    assert!(rig.sandbox.runs_in(&db.id).is_empty(), "B never deploys");
    let (rc, rd) = (
        rig.sandbox.only_run_in(&dc.id),
        rig.sandbox.only_run_in(&dd.id),
    );
    assert!(rd.started_ms >= rc.end_ms().unwrap(), "D deployed last");
    assert_eq!(rig.row(&db).reason.as_deref(), Some("not_current"));
    assert_eq!(rig.queue_state(&dd), "released");
    rig.assert_no_overlap();
}

/// Scenario 12 (issue 21): a head read that fails at dequeue is retried
/// within its bound (the group held meanwhile); past it the deploy ends
/// `head_unknown`, neutral and announced, and deploys nothing, never
/// blindly.
#[test]
fn scenario_12_a_failed_head_read_at_dequeue_retries_then_deploys_nothing() {
    for (failures, deploys) in [(3, true), (6, false)] {
        let (a, b) = (sha('a'), sha('b'));
        let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 5 * MINUTE_MS);
        rig.github.set_head(REPO, BRANCH, &a);
        let da = rig.deploy(&a);
        assert_eq!(rig.pass(&da).status, Status::Waiting);
        rig.github.set_head(REPO, BRANCH, &b);
        let db = rig.deploy(&b);
        assert_eq!(rig.pass(&db).status, Status::Waiting, "B waits behind A");
        // B's only head read left is the one at its dequeue.
        rig.github.fail_next("ref", failures, 502);
        let ends = block_on(futures::future::join(rig.drive(&da, 0), rig.drive(&db, 0)));
        let b_end = if deploys {
            Status::Complete
        } else {
            Status::Skipped
        };
        assert_eq!(ends, (Status::Complete, b_end));
        let ran = !rig.sandbox.runs_in(&db.id).is_empty();
        assert_eq!(ran, deploys, "{failures} failed reads");
        if !deploys {
            let run = rig.github.only_check_run(&b, "sluice/deploy");
            assert_eq!(run.conclusion.as_deref(), Some("neutral"));
            assert!(
                run.summary().contains("did not say what the head"),
                "{}",
                run.summary()
            );
            assert_eq!(rig.row(&db).reason.as_deref(), Some("head_unknown"));
            assert!(
                rig.github
                    .notifications()
                    .iter()
                    .any(|n| n.json()["reason"] == "head_unknown"),
                "an automatic skip is announced"
            );
        }
        rig.assert_no_overlap();
    }
}

/// Scenario 9: a deploy that waits past its run ceiling still releases its
/// gates (cleanup runs past the ceiling), and the recorded error names the
/// wait that hung, not the cleanup.
#[test]
fn scenario_9_a_waiter_past_its_ceiling_still_leaves_the_queue() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 25 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let (a_end, db) = block_on(futures::future::join(rig.drive(&da, 0), async {
        rig.clock.sleep(MINUTE_MS).await;
        rig.github.set_head(REPO, BRANCH, &b);
        let db = rig.deploy_with_ceiling(&b, Some(20 * MINUTE_MS));
        assert_eq!(rig.drive(&db, 0).await, Status::Errored);
        db
    }));
    assert_eq!(a_end, Status::Complete);
    let row = rig.row(&db);
    assert_eq!(row.error_tag.as_deref(), Some("RunDurationExceeded"));
    let message = row.error_message.unwrap_or_default();
    assert!(message.contains("gate: turn"), "names the wait: {message}");
    assert_eq!(rig.queue_state(&db), "released", "it left the queue");
    assert!(rig.held_by(&db).is_empty());
    assert_eq!(
        rig.github
            .only_check_run(&b, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("cancelled")
    );
    assert!(rig.sandbox.runs_in(&db.id).is_empty());
}

/// Issue 8 item 8: webhook deliveries are forgotten after the retention
/// (the intake refuses events that old by their timestamp), not kept for
/// ever.
#[test]
fn the_sweep_purges_deliveries_past_the_retention() {
    use sluice::store::executions::{self, DeliveryRow};
    let rig = Rig::new();
    let row = |id: &str, received_ms| DeliveryRow {
        delivery_id: id.into(),
        event: "push".into(),
        action: None,
        repo: Some(REPO.into()),
        instance_ids_json: "[]".into(),
        received_ms,
    };
    let retention = sluice::limits::RETENTION_MS_DEFAULT;
    let db = rig.index.as_ref();
    block_on(executions::record_delivery(
        db,
        &row("old", rig.now() - retention - 1),
    ))
    .unwrap();
    block_on(executions::record_delivery(
        db,
        &row("new", rig.now() - retention + 60_000),
    ))
    .unwrap();
    rig.sweep();
    assert!(
        block_on(executions::delivery(db, "old")).unwrap().is_none(),
        "past retention: gone"
    );
    assert!(
        block_on(executions::delivery(db, "new")).unwrap().is_some(),
        "within it: kept"
    );
}

// ---------------------------------------------------------------------------
// Bounded untrusted compute (issue 8 item 4)
// ---------------------------------------------------------------------------

/// A newer head of the pull request ends the older head's check: its check
/// run is concluded `cancelled` naming the newer head, its instance is
/// terminated and its process killed before its gates are released.
#[test]
fn a_newer_head_supersedes_the_older_heads_check() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = Rig::new();
    for s in [&a, &b] {
        rig.github.commit(REPO, s, &[(".sluice.toml", CHECK_TOML)]);
    }
    rig.sandbox
        .script_timed("cargo test", 0, "ok\n", 30 * MINUTE_MS);
    rig.github.set_pull_head(REPO, PR_NUMBER, &a);
    let ca = rig.check(&a);
    assert_eq!(rig.pass(&ca).status, Status::Waiting, "A's command runs");
    assert!(rig.sandbox.only_run_in(&ca.id).ended_ms.is_none());

    rig.github.set_pull_head(REPO, PR_NUMBER, &b);
    let cb = rig.check(&b);
    let first = rig.pass(&cb);
    assert_eq!(rig.terminator.asked.borrow().as_slice(), [ca.id.clone()]);
    assert_eq!(rig.apply_terminations(&[&ca]), 1);

    let ra = rig.sandbox.only_run_in(&ca.id);
    assert!(ra.killed, "A's process was killed: {ra:?}");
    let run_a = rig.github.only_check_run(&a, "sluice/check");
    assert_eq!(run_a.conclusion.as_deref(), Some("cancelled"));
    assert!(
        run_a.summary().contains(&b),
        "names the newer head: {}",
        run_a.summary()
    );
    assert_eq!(rig.row(&ca).status, "terminated");
    assert!(
        rig.held_by(&ca).is_empty(),
        "nothing of A stays held: {:?}",
        rig.held_by(&ca)
    );
    let _ = first;
    assert_eq!(rig.run_to_end(&cb), Status::Complete);
    let run_b = rig.github.only_check_run(&b, "sluice/check");
    assert_eq!(run_b.conclusion.as_deref(), Some("success"));
    let run_a = rig.github.only_check_run(&a, "sluice/check");
    assert!(
        run_a.summary().contains(&b),
        "A's conclusion stays: {}",
        run_a.summary()
    );
}

/// A check that starts after its pull request moved on runs nothing.
#[test]
fn a_check_of_a_head_no_longer_current_runs_nothing() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = Rig::new();
    rig.github.commit(REPO, &a, &[(".sluice.toml", CHECK_TOML)]);
    rig.github.set_pull_head(REPO, PR_NUMBER, &b);
    let ca = rig.check(&a);
    assert_eq!(rig.run_to_end(&ca), Status::Skipped);
    assert!(rig.sandbox.starts_in(&ca.id).is_empty());
    let run = rig.github.only_check_run(&a, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("cancelled"));
    assert!(run.summary().contains(&b), "{}", run.summary());
    assert!(rig.terminator.asked.borrow().is_empty(), "it ends nobody");
}

fn first_timer_check(rig: &Rig, s: &str) -> Inst {
    rig.github.commit(REPO, s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let input = json!({
        "repo": REPO, "sha": s, "installation_id": INSTALLATION,
        "pr_number": PR_NUMBER, "needs_approval": true,
    });
    rig.create(sluice::engine::CreateRequest {
        indexed: false,
        key: format!("check:{REPO}:{}", &s[..12]),
        run: "check".into(),
        input,
        repo: Some(REPO.into()),
        entity: Some(format!("pr:{PR_NUMBER}")),
        sha: Some(s.into()),
        max_steps: None,
        max_duration_ms: None,
    })
}

fn press(i: &Inst, check_run_id: u64, sender: &str) {
    let payload =
        json!({ "check_run_id": check_run_id, "identifier": "approve", "sender": sender });
    i.world
        .engine()
        .send_event("check-run-action", &payload)
        .expect("event");
}

/// A first-time contributor's fork runs only once someone with write
/// access presses "Approve and run"; presses by others, or about another
/// check run, change nothing.
#[test]
fn a_first_time_contributors_fork_waits_for_approval() {
    let s = sha('a');
    let rig = Rig::new();
    let c = first_timer_check(&rig, &s);
    rig.github.set_permission(REPO, "maintainer", "write");
    rig.github.set_permission(REPO, "drive-by", "read");
    assert_eq!(rig.pass(&c).status, Status::Waiting);
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.actions, ["approve"], "the button is shown");
    assert_eq!(run.title.as_deref(), Some("Waiting for approval"));

    press(&c, run.id, "drive-by");
    press(&c, run.id + 1, "maintainer");
    assert_eq!(
        rig.pass(&c).status,
        Status::Waiting,
        "neither press decides"
    );
    assert!(rig.sandbox.starts_in(&c.id).is_empty(), "no code ran");

    press(&c, run.id, "maintainer");
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    assert_eq!(rig.sandbox.starts_in(&c.id).len(), 1);
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    assert!(run.actions.is_empty(), "the button is gone");
    let asked: Vec<String> = rig
        .github
        .calls_to("permission")
        .iter()
        .map(|c| c.path.clone())
        .collect();
    assert!(
        asked
            .iter()
            .any(|p| p.ends_with("/collaborators/drive-by/permission")),
        "{asked:?}"
    );
}

/// Nobody approves: after the 72 h window the check ends neutral, having
/// run nothing; its ceiling covered the wait.
#[test]
fn an_unapproved_fork_ends_skipped_at_the_window() {
    let s = sha('a');
    let rig = Rig::new();
    let c = first_timer_check(&rig, &s);
    let end = block_on(rig.drive(&c, 0));
    assert_eq!(end, Status::Skipped, "{:?}", rig.row(&c).error_message);
    assert!(rig.now() >= T0 + 72 * 3600 * 1000, "it waited the window");
    assert!(rig.sandbox.starts_in(&c.id).is_empty());
    let run = rig.github.only_check_run(&s, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(run.summary().contains("approved"), "{}", run.summary());
}

// ---------------------------------------------------------------------------
// Logs streamed while the command runs (issue 12 item 5)
// ---------------------------------------------------------------------------

fn log_key_of(i: &Inst) -> String {
    format!(
        "logs/{}/{}.log",
        i.id,
        sluice::engine::InstanceId::from_key("run check command")
    )
}

/// A run whose executor dies in the middle of its command still leaves
/// what the command printed; at the end the parts become one log.
#[test]
fn a_command_log_streams_while_it_runs_and_is_sealed_at_the_end() {
    let s = sha('a');
    let rig = Rig::new();
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script_streaming(
        "cargo test",
        "Compiling hello\n",
        "Compiling hello\ntest result: ok\n",
        100,
    );
    let c = rig.check(&s);
    assert_eq!(
        rig.pass(&c).status,
        Status::Waiting,
        "the command still runs"
    );
    let key = log_key_of(&c);
    let so_far = block_on(sluice::runs::log::read(&rig.blobs, &key)).unwrap();
    assert_eq!(
        so_far.as_deref(),
        Some("Compiling hello\n"),
        "what it printed is stored"
    );

    assert_eq!(rig.run_to_end(&c), Status::Complete);
    assert_eq!(
        rig.log(&key).as_deref(),
        Some("Compiling hello\ntest result: ok\n")
    );
    let parts: Vec<String> = rig
        .blobs
        .0
        .borrow()
        .keys()
        .filter(|k| k.contains(".parts/"))
        .cloned()
        .collect();
    assert!(
        parts.is_empty(),
        "the parts are gone once sealed: {parts:?}"
    );
}

/// A secret split across two stored parts is masked when they are joined.
#[test]
fn sealing_masks_a_secret_split_across_parts() {
    use sluice::blobs::Blobs;
    const SECRET: &str = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";
    let blobs = common::MemoryBlobs::default();
    let (a, b) = SECRET.split_at(17);
    let first = format!("token {a}");
    let key = "logs/x/y.log";
    block_on(blobs.put_text(
        &format!("{key}.parts/{:012}-{:012}", 0, first.len()),
        &first,
    ))
    .unwrap();
    let second = format!("{b} done\n");
    let end = first.len() + second.len();
    block_on(blobs.put_text(
        &format!("{key}.parts/{:012}-{end:012}", first.len()),
        &second,
    ))
    .unwrap();
    let sealed = block_on(sluice::runs::log::seal(
        &blobs,
        key,
        &sluice_redact::Redactor::new([SECRET]),
    ))
    .unwrap();
    assert_eq!(sealed, "token *** done\n");
    assert_eq!(
        block_on(blobs.get_text(key)).unwrap().as_deref(),
        Some("token *** done\n")
    );
}

/// Bots are treated like users (a Dependabot pull request gets its check),
/// except those the repository names in `ignore_bots`.
#[test]
fn a_bot_the_repository_ignores_starts_nothing() {
    let s = sha('a');
    let rig = Rig::new();
    let config = format!("ignore_bots = [\"renovate[bot]\"]\n{CHECK_TOML}");
    rig.github
        .commit(REPO, &s, &[(".sluice.toml", config.as_str())]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let make = |sender: &str, attempt: &str| {
        rig.create(sluice::engine::CreateRequest {
            indexed: false,
            key: format!("check:{REPO}:{}:{attempt}", &s[..12]),
            run: "check".into(),
            input: json!({"repo": REPO, "sha": s, "installation_id": INSTALLATION, "pr_number": PR_NUMBER, "sender": sender}),
            repo: Some(REPO.into()),
            entity: Some(format!("pr:{PR_NUMBER}")),
            sha: Some(s.clone()),
            max_steps: None,
            max_duration_ms: None,
        })
    };
    let renovate = make("renovate[bot]", "1");
    assert_eq!(rig.run_to_end(&renovate), Status::Skipped);
    assert_eq!(rig.row(&renovate).reason.as_deref(), Some("ignored-bot"));
    assert!(
        rig.github.check_runs_on(&s).is_empty(),
        "no check run for an ignored bot"
    );
    let dependabot = make("dependabot[bot]", "2");
    assert_eq!(rig.run_to_end(&dependabot), Status::Complete);
    assert_eq!(
        rig.github
            .only_check_run(&s, "sluice/check")
            .conclusion
            .as_deref(),
        Some("success")
    );
}

/// Records what `accept` asks to create.
#[derive(Default)]
struct RecordingCreator {
    created: std::cell::RefCell<Vec<sluice::engine::CreateRequest>>,
}

#[async_trait::async_trait(?Send)]
impl sluice::http::webhook::InstanceCreator for RecordingCreator {
    async fn create(
        &self,
        req: &sluice::engine::CreateRequest,
    ) -> Result<sluice::engine::Created, sluice::http::ApiError> {
        self.created.borrow_mut().push(req.clone());
        Ok(sluice::engine::Created {
            id: req.id().to_string(),
            created: true,
            status: Status::Queued,
            row_pending: false,
        })
    }
    async fn send(
        &self,
        _: &sluice::runs::triggers::EventSend,
    ) -> Result<bool, sluice::http::ApiError> {
        Ok(false)
    }
}

fn rerun_intake(
    delivery: &str,
    of: sluice::runs::triggers::RerunOf,
) -> sluice::http::webhook::Intake {
    use sluice::http::webhook::{Delivery, Intake, Planned};
    Intake::Act(Delivery {
        delivery: delivery.into(),
        event: "check_run".into(),
        action: Some("rerequested".into()),
        repo: Some(REPO.into()),
        planned: Planned::Rerun(vec![sluice::runs::triggers::Rerun {
            of,
            attempt: format!("rerun-{delivery}"),
        }]),
    })
}

/// A Re-run repeats the run its check run reported, with that run's own
/// input (a fork's approval, its pull request), under a fresh key; a
/// suite's Re-run all repeats each run of the commit once; a run past
/// retention (its row purged) is re-run by nothing.
#[test]
fn a_rerun_is_made_from_the_run_it_repeats_and_a_purged_run_reruns_nothing() {
    use sluice::http::webhook::accept;
    use sluice::runs::triggers::RerunOf;
    let s = sha('a');
    let rig = Rig::new();
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 1, "flaky\n");
    let first = rig.check(&s);
    assert_eq!(rig.run_to_end(&first), Status::Complete);
    let creator = RecordingCreator::default();
    // The instances the answer asks their objects to create, after it.
    let mut made = Vec::new();

    let of = RerunOf::Instance(first.id.clone());
    made.extend(
        block_on(accept(
            rig.index.as_ref(),
            &creator,
            rerun_intake("d1", of),
            rig.now(),
            "test",
        ))
        .unwrap()
        .create_after,
    );
    assert!(
        creator.created.borrow().is_empty(),
        "no object on the answer path"
    );
    assert_eq!(made.len(), 1);
    assert_eq!(
        made[0].input, first.input,
        "the same input, approval included"
    );
    assert_eq!(made[0].key, format!("check:{REPO}:{}:rerun-d1", &s[..12]));
    assert_ne!(made[0].id().as_str(), first.id);

    let commit = RerunOf::Commit {
        repo: REPO.into(),
        sha: s.clone(),
    };
    made.extend(
        block_on(accept(
            rig.index.as_ref(),
            &creator,
            rerun_intake("d2", commit),
            rig.now(),
            "test",
        ))
        .unwrap()
        .create_after,
    );
    assert_eq!(made.len(), 2, "the commit's one run, once");

    let gone = RerunOf::Instance("check-octo-hello-purged-1".into());
    made.extend(
        block_on(accept(
            rig.index.as_ref(),
            &creator,
            rerun_intake("d3", gone),
            rig.now(),
            "test",
        ))
        .unwrap()
        .create_after,
    );
    assert_eq!(made.len(), 2, "nothing to repeat, nothing made");
}

/// Re-run on a dispatched rollback's check run, after a newer commit
/// deployed, is a new arrival of the old commit: a desired-state deploy,
/// head-checked, so it deploys nothing (skipped, not current). The rollback
/// itself (imperative, as dispatch records it) did deploy its old revision.
#[test]
fn a_rerun_of_a_dispatched_rollback_after_a_newer_deploy_deploys_nothing() {
    use sluice::http::webhook::accept;
    use sluice::runs::inputs::DeployInput;
    use sluice::runs::triggers::RerunOf;
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &b);
    let input = DeployInput {
        repo: REPO.into(),
        branch: BRANCH.into(),
        sha: a.clone(),
        installation_id: INSTALLATION,
        default_branch: BRANCH.into(),
        sender: "dispatch".into(),
        imperative: true,
        inputs: Default::default(),
        dispatch: None,
        needs_check: None,
    };
    let rollback = rig.create(sluice::engine::CreateRequest {
        indexed: false,
        key: format!("deploy:{REPO}:dispatch-feedfacefeedface"),
        run: "deploy".into(),
        input: json!(input),
        repo: Some(REPO.into()),
        entity: Some(format!("branch:{BRANCH}")),
        sha: Some(a.clone()),
        max_steps: None,
        max_duration_ms: None,
    });
    assert_eq!(rig.run_to_end(&rollback), Status::Complete);
    assert_eq!(rig.sandbox.runs_in(&rollback.id).len(), 1, "A rolled back");
    let newer = rig.deploy(&b);
    assert_eq!(rig.run_to_end(&newer), Status::Complete);

    let pressed = rerun_intake("cr77-1796403600", RerunOf::Instance(rollback.id.clone()));
    let made = block_on(accept(
        rig.index.as_ref(),
        &RecordingCreator::default(),
        pressed,
        rig.now(),
        "test",
    ))
    .unwrap()
    .create_after;
    assert_eq!(made.len(), 1);
    assert_eq!(
        made[0].input["imperative"],
        Value::Null,
        "{}",
        made[0].input
    );
    let rerun = rig.create(made[0].clone());
    assert_eq!(rig.run_to_end(&rerun), Status::Skipped);
    assert_eq!(rig.row(&rerun).reason.as_deref(), Some("not_current"));
    assert!(
        rig.sandbox.runs_in(&rerun.id).is_empty(),
        "A is not deployed over B again"
    );
    assert_eq!(rig.sandbox.runs_in(&newer.id).len(), 1);
}

/// A captured `rerequested` body, posted again under fresh delivery ids,
/// is the re-run it already was: its attempt comes from the signed body,
/// so every replay names the instance the first made (created: false),
/// and one older than the retention is refused by the suite's signed
/// `updated_at`.
#[test]
fn a_replayed_rerequest_under_new_delivery_ids_reruns_once() {
    use sluice::github::webhook::sign;
    use sluice::http::webhook::{accept, intake, IntakeConfig, WebhookHeaders};
    let s = sha('a');
    let rig = Rig::new();
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox.script("cargo test", 1, "flaky\n");
    let first = rig.check(&s);
    assert_eq!(rig.run_to_end(&first), Status::Complete);
    const SECRET: &str = "webhook-secret";
    let body_at = |suite_updated: &str| {
        json!({
            "action": "rerequested",
            "check_run": {"id": 77, "name": "sluice/check", "external_id": first.id,
                          "head_sha": s, "app": {"id": 1},
                          "check_suite": {"id": 5, "head_sha": s, "updated_at": suite_updated}},
            "repository": {"full_name": REPO, "name": "hello", "owner": {"login": "octo"}},
            "sender": {"login": "maintainer", "type": "User"},
            "installation": {"id": INSTALLATION}
        })
        .to_string()
        .into_bytes()
    };
    let at_t0 = rfc3339(rig.now());
    let body = body_at(&at_t0);
    let signature = sign(SECRET.as_bytes(), &body);
    let cfg = IntakeConfig {
        secret: Some(SECRET),
        not_before_ms: rig.now() - 86_400_000,
        ..IntakeConfig::default()
    };
    let deliver = |delivery: &str, body: &[u8], signature: &str| {
        let h = WebhookHeaders {
            event: Some("check_run"),
            delivery: Some(delivery),
            signature: Some(signature),
            content_type: Some("application/json"),
            content_length: None,
        };
        let planned = intake(&h, body, &cfg).map_err(|e| (e.status, e.code))?;
        let accepted = block_on(accept(
            rig.index.as_ref(),
            &RecordingCreator::default(),
            planned,
            rig.now(),
            "test",
        ))
        .unwrap();
        Ok::<_, (u16, &str)>(accepted.body["instances"].clone())
    };
    let pressed = deliver("delivery-1", &body, &signature).unwrap();
    assert_eq!(pressed[0]["created"], true, "{pressed}");
    for replay in ["delivery-2", "delivery-3"] {
        let again = deliver(replay, &body, &signature).unwrap();
        assert_eq!(
            again[0]["id"], pressed[0]["id"],
            "{replay}: the same re-run"
        );
        assert_eq!(again[0]["created"], false, "{replay}: nothing new");
    }
    let runs = block_on(sluice::store::executions::runs_of_commit(
        rig.index.as_ref(),
        REPO,
        &s,
        10,
    ))
    .unwrap();
    assert_eq!(runs.len(), 2, "the check and its one re-run");

    let stale = body_at(&rfc3339(rig.now() - 2 * 86_400_000));
    let refused = deliver("delivery-4", &stale, &sign(SECRET.as_bytes(), &stale));
    assert_eq!(refused.unwrap_err(), (422, "stale_delivery"));
}

/// A restart's new process writes a log of its own: what the killed
/// generation printed is neither spliced into it nor shown as its log.
#[test]
fn a_restarted_commands_log_is_its_own_processs() {
    let a = sha('a');
    let rig = Rig::new();
    rig.github
        .commit(REPO, &a, &[(".sluice.toml", DEPLOY_TOML)]);
    rig.sandbox.script_streaming(
        "./deploy.sh",
        "first generation says hi\n",
        "first generation says hi\nand more\n",
        100,
    );
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting, "its command runs on");
    let step_key = sluice::engine::InstanceId::from_key("run deploy command");
    let key = sluice::runs::loglink::log_key(&da.id, step_key.as_str());
    let streamed = block_on(sluice::runs::log::read(&rig.blobs, &key)).unwrap();
    assert!(
        streamed.is_some_and(|l| l.contains("first generation")),
        "the first process streamed"
    );
    assert_eq!(rig.command(&da, Command::Pause), Status::Paused);
    rig.sandbox.st.borrow_mut().scripts.clear();
    rig.sandbox.script("./deploy.sh", 0, "second generation\n");
    assert_eq!(
        rig.command(&da, Command::Restart { from_step: None }),
        Status::Queued
    );
    assert_eq!(block_on(rig.drive(&da, 0)), Status::Complete);
    let log = block_on(sluice::runs::log::read(&rig.blobs, &key))
        .unwrap()
        .expect("sealed");
    assert!(log.contains("second generation"), "{log}");
    assert!(
        !log.contains("first generation"),
        "no splice of the killed process: {log}"
    );
}

/// A webhook body for `REPO` as GitHub sends it: `fields` plus the
/// repository, the sender (`ana`) and the installation.
fn delivered(fields: Value) -> Value {
    let mut body = json!({
        "repository": {"full_name": REPO, "name": "hello",
                       "owner": {"login": "octo", "name": "octo"},
                       "clone_url": "https://github.com/octo/hello.git",
                       "default_branch": "main"},
        "sender": {"login": "ana", "type": "User"},
        "installation": {"id": INSTALLATION}
    });
    merge_into(&mut body, fields);
    body
}

/// `extra`'s fields written over `into`'s, nested objects merged.
fn merge_into(into: &mut Value, extra: Value) {
    match (into, extra) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge_into(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// A `pull_request` delivery of pull request `number` at `head` against
/// base `sha('b')`, opened by a member of the repository; `pull_fields`
/// are written over the pull request's.
fn pull_event(action: &str, number: u64, head: &str, pull_fields: Value) -> Value {
    let mut pull = json!({
        "number": number, "draft": false, "merged": false, "author_association": "MEMBER",
        "head": {"sha": head, "ref": "feature", "repo": {"full_name": REPO}},
        "base": {"sha": sha('b'), "ref": "main"}
    });
    merge_into(&mut pull, pull_fields);
    delivered(json!({ "action": action, "number": number, "pull_request": pull }))
}

/// A `merge_group` delivery for `queue` (the group's branch) at `head`.
fn group_event(action: &str, queue: &str, head: &str, reason: Option<&str>) -> Value {
    delivered(json!({
        "action": action, "reason": reason,
        "merge_group": {"head_sha": head, "head_ref": format!("refs/heads/{queue}"),
                        "base_sha": sha('a'), "base_ref": "refs/heads/main"}
    }))
}

/// What `event` (its name as `X-GitHub-Event`) plans to create.
fn planned(name: &str, event: Value) -> Vec<sluice::engine::CreateRequest> {
    use sluice::github::webhook::parse;
    use sluice::runs::triggers::{plan, Plan, PlanContext};
    let event = parse(name, event.to_string().as_bytes()).expect("an event");
    let cx = PlanContext {
        app_id: None,
        app_slug: None,
    };
    match plan(&event, &cx) {
        Plan::Create(reqs) => reqs,
        other => panic!("{other:?}"),
    }
}

/// The one creation `event` plans besides a pull request's preview or
/// teardown (`runs::edge::previews`, tested in `tests/previews.rs`).
fn planned_one(name: &str, event: Value) -> sluice::engine::CreateRequest {
    let mut reqs = planned(name, event);
    reqs.retain(|r| !r.run.starts_with("preview"));
    assert_eq!(reqs.len(), 1, "{reqs:?}");
    reqs.remove(0)
}

/// The check GitHub's merge queue asks for: planned from a `merge_group`
/// `checks_requested` delivery for `queue` at `sha`.
fn merge_group_check(queue: &str, sha: &str) -> sluice::engine::CreateRequest {
    planned_one(
        "merge_group",
        group_event("checks_requested", queue, sha, None),
    )
}

/// A merge queue's group is checked at its commit, as a pull request's head
/// is, while GitHub keeps the group's branch; a group destroyed before its
/// check started (its branch deleted) is skipped neutral and runs nothing,
/// so no sandbox is spent on a commit nobody will merge.
#[test]
fn a_merge_group_is_checked_while_its_branch_stands_and_skipped_once_destroyed() {
    let rig = Rig::new();
    let (kept, gone) = (sha('c'), sha('d'));
    let kept_queue = format!("gh-readonly-queue/main/pr-7-{}", sha('a'));
    let gone_queue = format!("gh-readonly-queue/main/pr-8-{}", sha('b'));
    for s in [&kept, &gone] {
        rig.github.commit(REPO, s, &[(".sluice.toml", CHECK_TOML)]);
    }
    rig.github.set_head(REPO, &kept_queue, &kept);
    rig.sandbox
        .script("cargo test", 0, "test result: ok. 1 passed\n");

    let checked = rig.create(merge_group_check(&kept_queue, &kept));
    assert_eq!(rig.run_to_end(&checked), Status::Complete);
    let run = rig.github.only_check_run(&kept, "sluice/check");
    assert_eq!(
        run.conclusion.as_deref(),
        Some("success"),
        "{}",
        run.summary()
    );
    assert_eq!(rig.sandbox.all_runs().len(), 1);

    let skipped = rig.create(merge_group_check(&gone_queue, &gone));
    assert_eq!(rig.run_to_end(&skipped), Status::Skipped);
    let run = rig.github.only_check_run(&gone, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary()
            .contains(&format!("group `{gone_queue}` is gone")),
        "{}",
        run.summary()
    );
    assert_eq!(
        rig.sandbox.all_runs().len(),
        1,
        "the destroyed group ran nothing"
    );
}

/// Closing a pull request ends its live check as a newer head does: the
/// check run concluded `cancelled` saying the pull request was closed, the
/// instance terminated, its process killed, nothing of it left held. A
/// check of another pull request is left alone, and a redelivered close is
/// the same instance.
#[test]
fn closing_a_pull_request_cancels_its_live_check_and_kills_its_process() {
    let (a, other) = (sha('a'), sha('e'));
    let rig = Rig::new();
    for s in [&a, &other] {
        rig.github.commit(REPO, s, &[(".sluice.toml", CHECK_TOML)]);
    }
    rig.sandbox
        .script_timed("cargo test", 0, "ok\n", 30 * MINUTE_MS);
    rig.github.set_pull_head(REPO, PR_NUMBER, &a);
    let ca = rig.check(&a);
    assert_eq!(rig.pass(&ca).status, Status::Waiting, "A's command runs");
    let pull = |action: &str, number: u64, head: &str| {
        pull_event(
            action,
            number,
            head,
            json!({"closed_at": "2026-12-05T07:00:00Z"}),
        )
    };
    rig.github.set_pull_head(REPO, 99, &other);
    let unrelated = rig.create(planned_one("pull_request", pull("opened", 99, &other)));
    assert_eq!(rig.pass(&unrelated).status, Status::Waiting);

    let closed = pull("closed", PR_NUMBER, &a);
    rig.github.set_pull_closed(REPO, PR_NUMBER, true);
    let req = planned_one("pull_request", closed.clone());
    assert_eq!(planned_one("pull_request", closed).key, req.key);
    let end = rig.create(req);
    assert_eq!(rig.run_to_end(&end), Status::Complete);
    assert_eq!(rig.terminator.asked.borrow().as_slice(), [ca.id.clone()]);
    assert_eq!(rig.apply_terminations(&[&ca]), 1);

    assert!(
        rig.sandbox.only_run_in(&ca.id).killed,
        "A's process was killed"
    );
    let run_a = rig.github.only_check_run(&a, "sluice/check");
    assert_eq!(run_a.conclusion.as_deref(), Some("cancelled"));
    assert!(
        run_a
            .summary()
            .contains(&format!("pull request #{PR_NUMBER} was closed")),
        "{}",
        run_a.summary()
    );
    assert_eq!(rig.row(&ca).status, "terminated");
    assert!(rig.held_by(&ca).is_empty(), "{:?}", rig.held_by(&ca));
    assert_ne!(
        rig.row(&unrelated).status,
        "terminated",
        "another pull request's check goes on"
    );
    assert!(rig
        .github
        .check_runs_on(&other)
        .iter()
        .all(|r| r.conclusion.is_none()));
}

/// GitHub destroying a merge queue group ends the group's running check:
/// its check run concluded `cancelled` naming the group and the reason,
/// its process killed.
#[test]
fn a_destroyed_merge_group_cancels_its_running_check() {
    let rig = Rig::new();
    let head = sha('c');
    let queue = format!("gh-readonly-queue/main/pr-7-{}", sha('a'));
    rig.github
        .commit(REPO, &head, &[(".sluice.toml", CHECK_TOML)]);
    rig.github.set_head(REPO, &queue, &head);
    rig.sandbox
        .script_timed("cargo test", 0, "ok\n", 30 * MINUTE_MS);
    let check = rig.create(merge_group_check(&queue, &head));
    assert_eq!(rig.pass(&check).status, Status::Waiting, "its command runs");

    let destroyed = group_event("destroyed", &queue, &head, Some("invalidated"));
    let end = rig.create(planned_one("merge_group", destroyed));
    assert_eq!(rig.run_to_end(&end), Status::Complete);
    assert_eq!(rig.apply_terminations(&[&check]), 1);
    assert!(rig.sandbox.only_run_in(&check.id).killed);
    let run = rig.github.only_check_run(&head, "sluice/check");
    assert_eq!(run.conclusion.as_deref(), Some("cancelled"));
    assert!(
        run.summary()
            .contains(&format!("destroyed the group `{queue}` (invalidated)")),
        "{}",
        run.summary()
    );
}

/// `[check] paths`: a pull request that changes none of the globs is
/// skipped (GitHub's `skipped`, which branch protection counts as passed)
/// and runs nothing; one that changes a matching file runs; a change
/// GitHub cannot list (the base unknown to it) runs too.
#[test]
fn a_change_outside_the_checks_paths_is_skipped_and_runs_nothing() {
    let rig = Rig::new();
    let base = sha('b');
    let (docs, code, unknown) = (sha('d'), sha('c'), sha('e'));
    let toml = "[check]\ncommand = \"cargo test\"\npaths = [\"src/**\", \"Cargo.*\"]\n";
    for s in [&docs, &code, &unknown] {
        rig.github.commit(REPO, s, &[(".sluice.toml", toml)]);
    }
    rig.github
        .set_changed_files(REPO, &base, &docs, &["README.md", "docs/guide.md"]);
    rig.github
        .set_changed_files(REPO, &base, &code, &["docs/x.md", "src/lib/deep.rs"]);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let pull = |number: u64, head: &str| {
        pull_event("opened", number, head, json!({"base": {"sha": base}}))
    };
    let config = sha('f');
    rig.github.commit(REPO, &config, &[(".sluice.toml", toml)]);
    rig.github
        .set_changed_files(REPO, &base, &config, &[".sluice.toml", "README.md"]);
    for (number, head) in [(21, &docs), (22, &code), (23, &unknown), (24, &config)] {
        rig.github.set_pull_head(REPO, number, head);
        let check = rig.create(planned_one("pull_request", pull(number, head)));
        rig.run_to_end(&check);
    }
    let skipped = rig.github.only_check_run(&docs, "sluice/check");
    assert_eq!(skipped.conclusion.as_deref(), Some("skipped"));
    assert!(
        skipped.summary().contains("no matching change") && skipped.summary().contains("src/**"),
        "{}",
        skipped.summary()
    );
    // A change to `.sluice.toml`, where the paths are written, is checked.
    for ran in [&code, &unknown, &config] {
        let run = rig.github.only_check_run(ran, "sluice/check");
        assert_eq!(
            run.conclusion.as_deref(),
            Some("success"),
            "{}",
            run.summary()
        );
    }
    assert_eq!(
        rig.sandbox.all_runs().len(),
        3,
        "the docs-only change ran nothing"
    );
}

const NEEDS_TOML: &str = "[check]\ncommand = \"cargo test\"\n\n\
    [deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nneeds = [\"check\"]\n";

/// The deploy a push of `head` to main plans, as the trigger fills it in
/// (with the check of its commit, should it need it).
fn pushed_deploy(rig: &Rig, head: &str) -> Inst {
    let push = delivered(json!({"ref": "refs/heads/main", "before": sha('0'), "after": head}));
    let deploy = planned("push", push)
        .into_iter()
        .find(|r| r.run == "deploy")
        .expect("a deploy");
    rig.create(deploy)
}

/// A deploy that needs the check of its commit starts that check and waits
/// for it holding nothing (no pool slot, no group); the check, ending,
/// wakes it, and it deploys only because the check passed.
#[test]
fn a_deploy_that_needs_its_check_deploys_once_the_check_passes() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], NEEDS_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    rig.sandbox.script("cargo test", 0, "test result: ok\n");
    let d = pushed_deploy(&rig, &a);
    assert_eq!(
        rig.pass(&d).status,
        Status::Waiting,
        "it waits for its check"
    );
    assert!(
        rig.held_by(&d).is_empty(),
        "holding nothing: {:?}",
        rig.held_by(&d)
    );
    assert!(rig.sandbox.all_runs().is_empty(), "nothing deployed yet");
    let [check] = <[Inst; 1]>::try_from(rig.create_spawned())
        .ok()
        .expect("one check");
    assert_eq!(check.run, "check");
    assert_eq!(rig.run_to_end(&check), Status::Complete);
    assert_eq!(
        rig.waker.recorded().last().cloned(),
        Some((d.id.clone(), "needs-ended".to_owned())),
        "the check woke the deploy"
    );
    let woken_at = rig.now();
    assert_eq!(rig.deliver(&d), 1);
    assert_eq!(rig.run_to_end(&d), Status::Complete);
    assert!(
        rig.now() < woken_at + sluice::runs::needs::NEEDS_WAIT_MS,
        "the wake, not the wait's bound, moved it on"
    );
    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(
        run.conclusion.as_deref(),
        Some("success"),
        "{}",
        run.summary()
    );
    let (tested, deployed) = (
        rig.sandbox.only_run_in(&check.id),
        rig.sandbox.only_run_in(&d.id),
    );
    assert!(
        tested
            .end_ms()
            .is_some_and(|end| end <= deployed.started_ms),
        "the tests, then the deploy: {tested:?} {deployed:?}"
    );
}

/// A failing check skips the deploy (`needs_failed`, a neutral check run
/// naming why) and nothing is deployed.
#[test]
fn a_deploy_whose_check_fails_deploys_nothing() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], NEEDS_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    rig.sandbox
        .script("cargo test", 101, "test result: FAILED\n");
    let d = pushed_deploy(&rig, &a);
    rig.pass(&d);
    for check in rig.create_spawned() {
        rig.run_to_end(&check);
    }
    assert_eq!(rig.run_to_end(&d), Status::Skipped);
    assert_eq!(rig.row(&d).reason.as_deref(), Some("needs_failed"));
    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("neutral"));
    assert!(
        run.summary().contains("`sluice/check` of") && run.summary().contains("concluded failure"),
        "{}",
        run.summary()
    );
    assert!(rig.sandbox.runs_in(&d.id).is_empty(), "nothing deployed");
}

/// A lost wake costs one bounded wait, never the verdict: the deploy reads
/// the check again after `NEEDS_WAIT_MS` and deploys.
#[test]
fn a_lost_wake_from_the_needed_check_delays_the_deploy_by_one_wait() {
    use sluice::runs::needs::NEEDS_WAIT_MS;
    let a = sha('a');
    let rig = deploy_rig(&[&a], NEEDS_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    rig.sandbox.script("cargo test", 0, "ok\n");
    let d = pushed_deploy(&rig, &a);
    rig.pass(&d);
    rig.waker.lose_next.set(1);
    for check in rig.create_spawned() {
        assert_eq!(rig.run_to_end(&check), Status::Complete);
    }
    assert_eq!(rig.waker.lost.get(), 1);
    assert_eq!(rig.pass(&d).status, Status::Waiting, "no wake came");
    rig.clock.advance(NEEDS_WAIT_MS);
    assert_eq!(rig.run_to_end(&d), Status::Complete);
    assert_eq!(rig.sandbox.runs_in(&d.id).len(), 1, "deployed");
}

/// Cases of the seeded needs model: every operation meets every other many
/// times, in about a second.
const NEEDS_SCHEDULES: u64 = 300;
/// Operations per schedule before the drain.
const NEEDS_OPS_PER_SCHEDULE: u32 = 14;

/// A deploy that needs its check, under every interleaving of: passes of
/// either, wakes delivered, lost or late, the clock moving past the wait's
/// bound, an operator's restart of the deploy from any of its needs steps
/// (or the top, also after it ended), an operator's terminate of the check
/// (the deploy then starts an attempt of its own), and duplicated spawns.
/// After every operation: the deploy's process never started unless a
/// check of its commit concluded success. At the end: a commit whose tests
/// pass is deployed, one whose tests fail is skipped.
#[test]
fn seeded_needs_schedules_never_deploy_an_untested_commit() {
    let mut seed: u64 = 0x6e65_6564_73;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut deployed, mut refused) = (0, 0);
    for schedule in 0..NEEDS_SCHEDULES {
        let passes = next(2) == 0;
        match needs_schedule(schedule, passes, &mut next) {
            Status::Complete => deployed += 1,
            Status::Skipped => refused += 1,
            _ => {}
        }
    }
    // The schedules reach both ends, many times: the property is not
    // vacuous.
    assert!(deployed >= NEEDS_SCHEDULES / 5, "{deployed} deployed");
    assert!(refused >= NEEDS_SCHEDULES / 5, "{refused} refused");
}

/// One schedule; how the deploy ended.
fn needs_schedule(schedule: u64, passes: bool, next: &mut dyn FnMut(u64) -> u64) -> Status {
    let a = sha('a');
    let rig = deploy_rig(&[&a], NEEDS_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let code = if passes { 0 } else { 1 };
    rig.sandbox.script("cargo test", code, "tests\n");
    let d = pushed_deploy(&rig, &a);
    let mut checks: Vec<Inst> = Vec::new();
    let ended = |i: &Inst| rig.record(i).status.is_terminal();
    for _ in 0..NEEDS_OPS_PER_SCHEDULE {
        let live = checks.iter().filter(|c| !ended(c)).last();
        match next(8) {
            0 if !ended(&d) => drop(rig.pass(&d)),
            1 => {
                if let Some(c) = live {
                    drop(rig.pass(c));
                }
            }
            2 => drop(rig.deliver(&d)),
            3 => rig.waker.lose_next.set(1),
            4 => rig.clock.advance(sluice::runs::needs::NEEDS_WAIT_MS / 2),
            5 => {
                let steps = [None, Some("start needed check"), Some("read needed check")];
                let from_step = steps[next(3) as usize].map(str::to_owned);
                let _ = rig.try_command(&d, Command::Restart { from_step });
            }
            6 => {
                if let Some(c) = live {
                    rig.command(c, Command::Terminate);
                    rig.finalize(c);
                }
            }
            _ => spawn_once(&rig, &mut checks),
        }
        assert_only_tested_commits_deploy(&rig, &d, schedule);
    }
    let status = drain_needs(&rig, &d, &mut checks);
    assert_only_tested_commits_deploy(&rig, &d, schedule);
    if passes {
        // Whatever happened to a check, a commit whose tests pass deploys.
        assert_eq!(status, Status::Complete, "schedule {schedule}");
        assert!(
            !rig.sandbox.runs_in(&d.id).is_empty(),
            "schedule {schedule}: deployed"
        );
    } else {
        assert_eq!(status, Status::Skipped, "schedule {schedule}");
    }
    status
}

/// Lets everything run out: children created and run to their end, wakes
/// delivered, the deploy run until it ends.
fn drain_needs(rig: &Rig, d: &Inst, checks: &mut Vec<Inst>) -> Status {
    for _ in 0..NEEDS_DRAIN_ROUNDS_MAX {
        if rig.record(d).status.is_terminal() {
            return rig.record(d).status;
        }
        drop(rig.pass(d));
        spawn_once(rig, checks);
        for c in checks.iter() {
            if !rig.record(c).status.is_terminal() {
                rig.run_to_end(c);
            }
        }
        rig.deliver(d);
        let status = rig.pass(d);
        if let Some(wake) = status.wake_at_ms {
            rig.clock.set(wake.max(rig.now()));
        }
    }
    panic!("the deploy did not end in {NEEDS_DRAIN_ROUNDS_MAX} drain rounds");
}

/// Drain rounds: a deploy needs at most two attempts of its check and a few
/// passes of its own.
const NEEDS_DRAIN_ROUNDS_MAX: u32 = 12;

/// Creates each check the deploy asked for once: a second spawn of a key is
/// the instance it names, as the Worker's create is.
fn spawn_once(rig: &Rig, checks: &mut Vec<Inst>) {
    let asked: Vec<CreateRequest> = rig.spawner.spawned.borrow_mut().drain(..).collect();
    for create in asked {
        if !checks.iter().any(|c| c.id == create.id().as_str()) {
            checks.push(rig.create(create));
        }
    }
}

fn assert_only_tested_commits_deploy(rig: &Rig, d: &Inst, schedule: u64) {
    if rig.sandbox.runs_in(&d.id).is_empty() {
        return;
    }
    let passed = rig
        .github
        .check_runs_on(&sha('a'))
        .into_iter()
        .any(|r| r.name == "sluice/check" && r.conclusion.as_deref() == Some("success"));
    assert!(
        passed,
        "schedule {schedule}: a deploy ran before its check passed"
    );
}

/// A cancel that runs late, after its pull request was reopened, ends
/// nothing: the reopened pull request's check is a new attempt, and it
/// goes on.
#[test]
fn a_late_cancel_after_a_reopen_ends_nothing_and_the_reopen_checks_again() {
    let a = sha('a');
    let rig = Rig::new();
    rig.github.commit(REPO, &a, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox
        .script_timed("cargo test", 0, "ok\n", 30 * MINUTE_MS);
    rig.github.set_pull_head(REPO, PR_NUMBER, &a);
    let pull = |action: &str, updated: &str| {
        let times = json!({"closed_at": "2026-12-05T07:00:00Z", "updated_at": updated});
        pull_event(action, PR_NUMBER, &a, times)
    };
    let first = rig.create(planned_one(
        "pull_request",
        pull("opened", "2026-12-05T06:00:00Z"),
    ));
    let late_cancel = planned_one("pull_request", pull("closed", "2026-12-05T07:00:00Z"));
    let reopened = planned_one("pull_request", pull("reopened", "2026-12-05T07:05:00Z"));
    assert_ne!(reopened.id(), first_id(&first), "a reopen is a new attempt");
    let again = rig.create(reopened);
    assert_eq!(
        rig.pass(&again).status,
        Status::Waiting,
        "the reopened check runs"
    );

    let end = rig.create(late_cancel);
    assert_eq!(rig.run_to_end(&end), Status::Complete);
    assert!(rig.terminator.asked.borrow().is_empty(), "it ended nothing");
    assert!(rig.sandbox.only_run_in(&again.id).ended_ms.is_none());
}

fn first_id(i: &Inst) -> sluice::engine::InstanceId {
    sluice::engine::InstanceId::parse(&i.id).expect("an id")
}

/// A re-run of the needed check counts: the deploy reads the newest
/// attempt of its commit's check, so a flaky failure re-run green lets a
/// re-run of the deploy through.
#[test]
fn a_rerun_of_the_needed_check_that_passes_lets_the_deploy_through() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], NEEDS_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    rig.sandbox.script("cargo test", 1, "flaky\n");
    let d = pushed_deploy(&rig, &a);
    rig.pass(&d);
    let [check] = <[Inst; 1]>::try_from(rig.create_spawned())
        .ok()
        .expect("one check");
    assert_eq!(rig.run_to_end(&check), Status::Complete);
    assert_eq!(
        rig.run_to_end(&d),
        Status::Skipped,
        "the flaky failure skips it"
    );
    // Re-run on the check (a new attempt of its key), green this time.
    rig.sandbox.rescript("cargo test", 0, "ok\n");
    rig.clock.advance(MINUTE_MS);
    let mut rerun = planned_check_create(&check);
    rerun.key = format!("{}:rerun-cr9-1796403600", rerun.key);
    let rerun = rig.create(rerun);
    assert_eq!(rig.run_to_end(&rerun), Status::Complete);
    rig.command(&d, Command::Restart { from_step: None });
    let status = rig.run_to_end(&d);
    let runs = rig.github.check_runs_on(&sha('a'));
    assert_eq!(status, Status::Complete, "{:?} {runs:#?}", rig.row(&d));
    assert_eq!(rig.sandbox.runs_in(&d.id).len(), 1, "deployed");
}

/// The creation a check instance was made from, again.
fn planned_check_create(check: &Inst) -> CreateRequest {
    CreateRequest {
        indexed: false,
        key: format!("check:{REPO}:{}", &sha('a')[..12]),
        run: "check".into(),
        input: check.input.clone(),
        repo: Some(REPO.into()),
        entity: Some("branch:main".into()),
        sha: Some(sha('a')),
        max_steps: None,
        max_duration_ms: None,
    }
}

/// A first-time contributor's fork cannot skip its check with `paths` of
/// its own: it waits for "Approve and run" first, and runs nothing without
/// it.
#[test]
fn a_first_time_forks_paths_wait_for_approval() {
    let rig = Rig::new();
    let (base, head) = (sha('b'), sha('d'));
    let toml = "[check]\ncommand = \"cargo test\"\npaths = [\"nope/**\"]\n";
    rig.github.commit(REPO, &head, &[(".sluice.toml", toml)]);
    rig.github
        .set_changed_files(REPO, &base, &head, &["src/evil.rs"]);
    rig.github.set_pull_head(REPO, 31, &head);
    let mut fork = pull_event(
        "opened",
        31,
        &head,
        json!({"author_association": "FIRST_TIME_CONTRIBUTOR", "base": {"sha": base},
               "head": {"repo": {"full_name": "mallory/hello"}}}),
    );
    fork["sender"]["login"] = json!("mallory");
    let check = rig.create(planned_one("pull_request", fork));
    assert_eq!(
        rig.pass(&check).status,
        Status::Waiting,
        "it waits for approval"
    );
    let run = rig.github.only_check_run(&head, "sluice/check");
    assert_eq!(run.conclusion, None, "not skipped by its own paths");
    assert!(
        rig.github.calls_to("compare").is_empty(),
        "its paths not read yet"
    );
    assert_eq!(
        rig.run_to_end(&check),
        Status::Skipped,
        "unapproved, it times out"
    );
    assert!(rig.sandbox.all_runs().is_empty());
    let run = rig.github.only_check_run(&head, "sluice/check");
    assert_ne!(
        run.conclusion.as_deref(),
        Some("skipped"),
        "{}",
        run.summary()
    );
}
