//! `[[schedule]]`, natively: cron validation in the config, the slot
//! arithmetic, the `schedules` run recording the default branch's
//! schedules in real SQLite, and the sweep's firing: once per slot however
//! often it ticks, late within a bound, never beside a live run of the
//! same commit, and a claim whose create was lost created by the next tick.

mod common;

use std::cell::Cell;

use async_trait::async_trait;
use common::fakes::*;
use common::{block_on, T0};
use serde_json::json;
use sluice::engine::{CreateRequest, InstanceId, Status};
use sluice::runs::config::{self, ConfigState};
use sluice::runs::edge::scheduler::{FireReport, Scheduler};
use sluice::runs::inputs::CheckInput;
use sluice::runs::inputs::SchedulesInput;
use sluice::runs::schedule::{due_slot, parse_cron, SCHEDULE_LATE_MS_MAX};
use sluice::runs::sweep::Instances;
use sluice::store::schedules;

const MINUTE_MS: i64 = 60_000;
/// T0 is on the hour: an hourly schedule's slot is T0 itself.
const HOURLY: &str = "[[schedule]]\ncron = \"0 * * * *\"\nrun = \"check\"\n";

fn invalid(toml: &str) -> String {
    match config::parse(toml) {
        ConfigState::Invalid { message } => message,
        other => panic!("{toml}: {other:?}"),
    }
}

#[test]
fn invalid_schedules_make_the_config_invalid_naming_the_entry() {
    let m = invalid("[[schedule]]\ncron = \"0 3 * *\"\nrun = \"check\"\n");
    assert!(
        m.contains("[[schedule]] 1") && m.contains("five are expected"),
        "{m}"
    );
    let m = invalid("[[schedule]]\ncron = \"0 25 * * *\"\nrun = \"check\"\n");
    assert!(m.contains("is invalid"), "{m}");
    let m = invalid("[[schedule]]\ncron = \"0 3 * * *\"\nrun = \"check\"\n[[schedule]]\ncron = \"0 3 * * *\"\nrun = \"probe\"\n");
    assert!(
        m.contains("[[schedule]] 2") && m.contains("cannot be scheduled"),
        "{m}"
    );
    assert!(invalid("[[schedule]]\ncron = \"0 3 * * *\"\n").contains("run"));
    assert!(matches!(config::parse(HOURLY), ConfigState::Valid { .. }));
}

#[test]
fn a_slot_is_the_latest_occurrence_while_it_is_at_most_ten_minutes_old() {
    let hourly = parse_cron("0 * * * *").unwrap();
    assert_eq!(due_slot(&hourly, T0), Some(T0));
    assert_eq!(due_slot(&hourly, T0 + 30_000), Some(T0));
    assert_eq!(due_slot(&hourly, T0 + SCHEDULE_LATE_MS_MAX), Some(T0));
    assert_eq!(due_slot(&hourly, T0 + SCHEDULE_LATE_MS_MAX + 1), None);
    assert_eq!(
        due_slot(&hourly, T0 - 1),
        None,
        "the previous slot is an hour old"
    );
    let every_five = parse_cron("*/5 * * * *").unwrap();
    assert_eq!(
        due_slot(&every_five, T0 + 7 * MINUTE_MS),
        Some(T0 + 5 * MINUTE_MS)
    );
}

/// Runs the `schedules` run of a push of `sha` to the default branch.
fn sync(rig: &Rig, sha: &str) {
    let input = SchedulesInput {
        repo: REPO.into(),
        installation_id: INSTALLATION,
        default_branch: BRANCH.into(),
        sha: sha.into(),
    };
    let i = rig.create(CreateRequest {
        indexed: false,
        key: format!("schedules:{REPO}:{}", &sha[..12]),
        run: "schedules".into(),
        input: json!(input),
        repo: Some(REPO.into()),
        entity: Some(format!("branch:{BRANCH}")),
        sha: Some(sha.into()),
        max_steps: None,
        max_duration_ms: None,
    });
    assert_eq!(rig.pass(&i).status, Status::Complete);
}

fn recorded(rig: &Rig) -> schedules::RepoSchedules {
    block_on(schedules::get(rig.index.as_ref(), REPO))
        .unwrap()
        .expect("recorded")
}

#[test]
fn the_schedules_run_records_the_default_branchs_schedules_and_keeps_them_through_a_typo() {
    let (a, b, c) = (sha('a'), sha('b'), sha('c'));
    let rig = Rig::new();
    rig.github.commit(REPO, &a, &[(".sluice.toml", HOURLY)]);
    rig.github.set_head(REPO, BRANCH, &a);
    sync(&rig, &a);
    let row = recorded(&rig);
    assert_eq!(row.error, None);
    let listed: serde_json::Value = serde_json::from_str(&row.schedules_json).unwrap();
    assert_eq!(
        listed,
        json!([{ "cron": "0 * * * *", "run": "check", "branch": "main" }])
    );

    // A typo keeps the schedules and says why.
    rig.github.commit(
        REPO,
        &b,
        &[(
            ".sluice.toml",
            "[[schedule]]\ncron = \"nope\"\nrun = \"check\"\n",
        )],
    );
    rig.github.set_head(REPO, BRANCH, &b);
    rig.clock.advance(MINUTE_MS);
    sync(&rig, &b);
    let row = recorded(&rig);
    assert!(
        row.error
            .as_deref()
            .is_some_and(|e| e.contains("five are expected")),
        "{row:?}"
    );
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&row.schedules_json).unwrap(),
        listed
    );

    // Removing the file removes the schedules.
    rig.github.commit(REPO, &c, &[]);
    rig.github.set_head(REPO, BRANCH, &c);
    rig.clock.advance(MINUTE_MS);
    sync(&rig, &c);
    assert_eq!(recorded(&rig).schedules_json, "[]");
}

fn fire(rig: &Rig, instances: &dyn Instances) -> FireReport {
    let registry = rig.registry();
    let scheduler = Scheduler {
        db: rig.index.as_ref(),
        github: &registry.env.github,
        instances,
    };
    block_on(scheduler.fire(rig.now()))
}

/// A scheduled rig: hourly checks recorded for REPO, its head `a`, the
/// clock at T0 (a slot).
fn scheduled_rig(a: &str) -> Rig {
    let rig = Rig::new();
    rig.github.commit(
        REPO,
        a,
        &[(
            ".sluice.toml",
            &format!("{HOURLY}[check]\ncommand = \"true\"\n"),
        )],
    );
    rig.github.set_head(REPO, BRANCH, a);
    rig.clock.set(T0 - 5 * MINUTE_MS);
    sync(&rig, a);
    rig.clock.set(T0);
    rig
}

#[test]
fn a_slot_fires_once_however_often_the_sweep_ticks_and_late_within_the_bound() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = scheduled_rig(&a);
    assert_eq!(fire(&rig, &rig.pokes).fired, 1);
    assert_eq!(
        fire(&rig, &rig.pokes),
        FireReport::default(),
        "a second tick in the slot"
    );
    // The head moves within the slot: still the one run of this slot.
    rig.github.set_head(REPO, BRANCH, &b);
    rig.clock.advance(3 * MINUTE_MS);
    assert_eq!(fire(&rig, &rig.pokes).fired, 0);
    let poked = rig.pokes.poked.borrow().clone();
    assert_eq!(poked.len(), 1, "{poked:?}");

    // The instance is a check of the head at the slot, on no pull request.
    let slot = block_on(schedules::slot(
        rig.index.as_ref(),
        &format!("{REPO}:{}:{}", identity(), T0 / 1000),
    ))
    .unwrap()
    .expect("slot");
    let create: CreateRequest = serde_json::from_str(&slot.create_json).unwrap();
    let input: CheckInput = serde_json::from_value(create.input.clone()).unwrap();
    assert_eq!((input.sha.as_str(), input.pr_number), (a.as_str(), None));
    assert_eq!(create.id().as_str(), poked[0]);

    // The next slot, reached 9 minutes late, fires; one 11 minutes late does not.
    rig.clock.set(T0 + 3600_000 + 9 * MINUTE_MS);
    assert_eq!(fire(&rig, &rig.pokes).fired, 1);
    rig.clock.set(T0 + 2 * 3600_000 + 11 * MINUTE_MS);
    assert_eq!(fire(&rig, &rig.pokes).fired, 0);
    assert_eq!(rig.pokes.poked.borrow().len(), 2);
}

fn identity() -> String {
    sluice::runs::schedule::Scheduled {
        cron: "0 * * * *".into(),
        run: "check".into(),
        branch: BRANCH.into(),
    }
    .identity()
}

#[test]
fn a_commit_already_being_checked_is_not_checked_again_by_the_schedule() {
    let a = sha('a');
    let rig = scheduled_rig(&a);
    rig.sandbox.script("true", 0, "");
    rig.sandbox.hold(&a);
    let webhook = rig.check(&a);
    let mut pass = rig.start_pass(&webhook);
    rig.holds_in_flight(&mut pass);
    let report = fire(&rig, &rig.pokes);
    assert_eq!((report.fired, report.live), (0, 1));
    assert!(rig.pokes.poked.borrow().is_empty());
    assert_eq!(
        fire(&rig, &rig.pokes),
        FireReport::default(),
        "the slot is spent"
    );
    rig.sandbox.release(&a);
    assert_eq!(block_on(pass).status, Status::Complete);
}

/// Fails its first poke, as a Durable Object that did not answer.
#[derive(Default)]
struct LosesFirstPoke {
    calls: Cell<u32>,
    created: std::cell::RefCell<Vec<String>>,
}

#[async_trait(?Send)]
impl Instances for LosesFirstPoke {
    async fn poke(&self, create: &CreateRequest) -> Result<(), String> {
        self.calls.set(self.calls.get() + 1);
        if self.calls.get() == 1 {
            return Err("the object did not answer".into());
        }
        self.created.borrow_mut().push(create.id().to_string());
        Ok(())
    }
    async fn purge(&self, _: &InstanceId) -> Result<(), String> {
        Ok(())
    }
}

#[test]
fn a_claimed_slot_whose_create_was_lost_is_created_by_the_next_tick() {
    let a = sha('a');
    let rig = scheduled_rig(&a);
    let flaky = LosesFirstPoke::default();
    assert_eq!(fire(&rig, &flaky).failed, 1);
    rig.clock.advance(MINUTE_MS);
    assert_eq!(fire(&rig, &flaky).fired, 1);
    assert_eq!(fire(&rig, &flaky), FireReport::default());
    assert_eq!(flaky.created.borrow().len(), 1);
}

#[test]
fn a_push_to_the_default_branch_also_records_its_schedules() {
    use sluice::github::webhook::parse;
    use sluice::runs::triggers::{plan, Plan, PlanContext};
    let push = |branch: &str| {
        json!({
            "ref": format!("refs/heads/{branch}"), "before": "0".repeat(40), "after": "c".repeat(40),
            "repository": {"full_name": REPO, "name": "hello", "owner": {"login": "octo"}, "default_branch": BRANCH},
            "sender": {"login": "ana", "type": "User"}, "installation": {"id": INSTALLATION}
        })
        .to_string()
    };
    let runs = |branch: &str| match plan(
        &parse("push", push(branch).as_bytes()).unwrap(),
        &PlanContext::default(),
    ) {
        Plan::Create(c) => c.into_iter().map(|c| c.run).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(runs(BRANCH), ["deploy", "schedules"]);
    assert_eq!(runs("feature"), ["deploy"]);
}

#[test]
fn a_schedule_that_fires_too_often_or_never_is_refused() {
    let m = invalid("[[schedule]]\ncron = \"*/5 * * * *\"\nrun = \"check\"\n");
    assert!(m.contains("more often than every 15 minutes"), "{m}");
    let m = invalid("[[schedule]]\ncron = \"0,10 3 * * *\"\nrun = \"check\"\n");
    assert!(m.contains("more often"), "{m}");
    let m = invalid("[[schedule]]\ncron = \"0 0 31 2 *\"\nrun = \"check\"\n");
    assert!(m.contains("never fires"), "{m}");
    for fine in ["*/15 * * * *", "0 3 * * *", "30 2 * * 1", "0 0 29 2 *"] {
        let toml = format!("[[schedule]]\ncron = \"{fine}\"\nrun = \"deploy\"\n");
        assert!(
            matches!(config::parse(&toml), ConfigState::Valid { .. }),
            "{fine}"
        );
    }
}

/// Many slots due at once fire over a few ticks, a bounded number each, and
/// none twice.
#[test]
fn many_due_slots_fire_over_several_ticks_never_twice() {
    use sluice::runs::schedule::FIRES_PER_TICK_MAX;
    let rig = Rig::new();
    let repos = FIRES_PER_TICK_MAX + 10;
    let list = json!([{ "cron": "0 * * * *", "run": "check", "branch": BRANCH }]).to_string();
    for n in 0..repos {
        let repo = format!("octo/r{n:03}");
        rig.github.set_head(&repo, BRANCH, &sha('a'));
        let row = schedules::RepoSchedules {
            repo,
            installation_id: i64::try_from(INSTALLATION).unwrap(),
            default_branch: BRANCH.into(),
            schedules_json: list.clone(),
            error: None,
            read_ms: T0 - MINUTE_MS,
        };
        block_on(schedules::record(rig.index.as_ref(), &row, false)).unwrap();
    }
    rig.clock.set(T0);
    assert_eq!(fire(&rig, &rig.pokes).fired, FIRES_PER_TICK_MAX);
    rig.clock.advance(MINUTE_MS);
    assert_eq!(fire(&rig, &rig.pokes).fired, 10);
    rig.clock.advance(MINUTE_MS);
    assert_eq!(fire(&rig, &rig.pokes).fired, 0);
    let mut poked = rig.pokes.poked.borrow().clone();
    poked.sort();
    poked.dedup();
    assert_eq!(poked.len() as u32, repos, "each repository's slot once");
}
