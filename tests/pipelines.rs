//! Pipelines (`[jobs.<name>]`), natively: the commit's check as the
//! parent starting each job's units as child instances, joined by wakes;
//! the real runs and engine over the strict fakes of `common::fakes`.
//! Ends with the seeded model of the child primitive: crashes between a
//! spawn and its record, children ending before their parent waits, lost
//! and duplicated wakes, operator restarts and terminations.

mod common;

use common::block_on;
use common::fakes::*;
use serde_json::json;
use sluice::engine::{Command, CreateRequest, Status};
use sluice::runs::inputs::{CheckInput, PullNumber};
use sluice::store::executions;

const THREE_JOBS: &str = "[jobs.lint]\ncommand = \"./lint.sh\"\n\n\
    [jobs.test]\ncommand = \"./test.sh\"\n\n\
    [jobs.e2e]\ncommand = \"./e2e.sh\"\nneeds = [\"test\"]\n";

/// A pull request's check of `head` judged against `base` (`paths`).
fn pr_check(rig: &Rig, head: &str, base: Option<&str>) -> Inst {
    scoped_check(rig, head, base, None, &format!("pr{PR_NUMBER}"))
}

/// A check of `head` with the cache scope the trigger gave it, keyed by
/// `tail` (a pull request's or a branch's).
fn scoped_check(
    rig: &Rig,
    head: &str,
    base: Option<&str>,
    cache_scope: Option<sluice::runs::inputs::CacheScope>,
    tail: &str,
) -> Inst {
    let input = CheckInput {
        repo: REPO.into(),
        sha: head.into(),
        installation_id: INSTALLATION,
        pr_number: PullNumber::new(PR_NUMBER),
        needs_approval: false,
        sender: "ana".into(),
        inputs: Default::default(),
        merge_group: None,
        base_sha: base.map(str::to_owned),
        wakes: None,
        job: None,
        spec: None,
        rerun: None,
        artifacts_from: Vec::new(),
        cache_scope,
    };
    rig.create(CreateRequest {
        indexed: false,
        key: format!("check:{REPO}:{}:{tail}", &head[..12]),
        run: "check".into(),
        input: json!(input),
        repo: Some(REPO.into()),
        entity: Some(format!("pr:{PR_NUMBER}")),
        sha: Some(head.into()),
        max_steps: None,
        max_duration_ms: None,
    })
}

fn rig_with(config: &str, head: &str) -> Rig {
    let rig = Rig::new();
    rig.github.commit(REPO, head, &[(".sluice.toml", config)]);
    rig.github.set_pull_head(REPO, PR_NUMBER, head);
    rig
}

/// The job units the parent asked for, by check run name.
fn spawned(rig: &Rig) -> Vec<(String, Inst)> {
    rig.create_spawned()
        .into_iter()
        .map(|i| {
            let input: CheckInput = serde_json::from_value(i.input.clone()).unwrap();
            (input.job.expect("a job unit").check_run_name(), i)
        })
        .collect()
}

fn names(units: &[(String, Inst)]) -> Vec<&str> {
    units.iter().map(|(n, _)| n.as_str()).collect()
}

fn conclusion(rig: &Rig, sha: &str, name: &str) -> String {
    rig.github
        .only_check_run(sha, name)
        .conclusion
        .unwrap_or_else(|| "(open)".into())
}

/// lint and test start together; e2e, which needs test, starts only once
/// test passed; each is its own check run, and `sluice/check` sums them up
/// with a link to each job's log.
#[test]
fn lint_and_test_run_together_and_e2e_after_test() {
    let a = sha('a');
    let rig = rig_with(THREE_JOBS, &a);
    for c in ["./lint.sh", "./test.sh", "./e2e.sh"] {
        rig.sandbox.script(c, 0, "ok\n");
    }
    let parent = pr_check(&rig, &a, None);
    assert_eq!(rig.pass(&parent).status, Status::Waiting);
    let first = spawned(&rig);
    assert_eq!(names(&first), ["sluice/lint", "sluice/test"]);
    assert!(rig.sandbox.all_runs().is_empty(), "the parent runs nothing");
    let reads = rig.github.calls_to("contents").len();
    assert!(reads >= 1, "the parent read .sluice.toml");
    for (_, unit) in &first {
        assert_eq!(rig.run_to_end(unit), Status::Complete);
    }
    assert_eq!(
        rig.github.calls_to("contents").len(),
        reads,
        "a unit runs the job its parent read, without reading the file again"
    );
    assert!(rig.deliver(&parent) >= 1, "the units woke their parent");
    assert_eq!(rig.pass(&parent).status, Status::Waiting);
    let second = spawned(&rig);
    assert_eq!(names(&second), ["sluice/e2e"]);
    let (test, e2e) = (&first[1].1, &second[0].1);
    assert_eq!(rig.run_to_end(e2e), Status::Complete);
    rig.deliver(&parent);
    assert_eq!(rig.run_to_end(&parent), Status::Complete);
    let (t, e) = (
        rig.sandbox.only_run_in(&test.id),
        rig.sandbox.only_run_in(&e2e.id),
    );
    assert!(
        t.end_ms().is_some_and(|end| end <= e.started_ms),
        "{t:?} {e:?}"
    );
    for job in ["sluice/lint", "sluice/test", "sluice/e2e", "sluice/check"] {
        assert_eq!(conclusion(&rig, &a, job), "success", "{job}");
    }
    let summary = rig
        .github
        .only_check_run(&a, "sluice/check")
        .summary()
        .to_owned();
    assert!(
        summary.contains(&format!("/v1/executions/{}", e2e.id)),
        "{summary}"
    );
    assert!(summary.contains("`e2e` (after test)"), "{summary}");
    let out = rig.row(&parent).output_json.unwrap();
    assert!(
        out.contains(r#""jobs":{"e2e":"passed","lint":"passed","test":"passed"}"#),
        "{out}"
    );
}

/// A failing test skips e2e (a `skipped` check run naming test, no child,
/// no process) and fails the pipeline; lint's pass stands.
/// Each job runs in the sandbox of the image class it selects: a job
/// without `image` in its unit's own (base) sandbox, `image = "node"` in the
/// unit's `node` sandbox on the class's default type, a larger
/// `instance_type` in that type's. Each is discarded when its unit ends.
#[test]
fn each_job_runs_in_the_image_class_it_selects() {
    let a = sha('a');
    let config = "[jobs.lint]\ncommand = \"./lint.sh\"\n\n\
        [jobs.web]\ncommand = \"./web.sh\"\nimage = \"node\"\n\n\
        [jobs.build]\ncommand = \"./build.sh\"\nimage = \"rust\"\ninstance_type = \"standard-2\"\n";
    let rig = rig_with(config, &a);
    for c in ["./lint.sh", "./web.sh", "./build.sh"] {
        rig.sandbox.script(c, 0, "ok\n");
    }
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    let units = spawned(&rig);
    assert_eq!(names(&units), ["sluice/build", "sluice/lint", "sluice/web"]);
    for (_, unit) in &units {
        assert_eq!(rig.run_to_end(unit), Status::Complete);
    }
    rig.deliver(&parent);
    assert_eq!(rig.run_to_end(&parent), Status::Complete);
    let expected = [
        format!("{}~rust.standard-2", units[0].1.id),
        units[1].1.id.clone(),
        format!("{}~node.basic", units[2].1.id),
    ];
    let started = rig.sandbox.started_in();
    let discarded = rig.sandbox.discarded();
    for address in &expected {
        assert!(started.contains(address), "{address} in {started:?}");
        assert!(discarded.contains(address), "{address} in {discarded:?}");
    }
    assert_eq!(conclusion(&rig, &a, "sluice/check"), "success");
    // Each job's check run says where it ran.
    for (job, place) in [
        ("sluice/build", "in the `rust` sandbox (standard-2)."),
        ("sluice/lint", "in the `base` sandbox (lite)."),
        ("sluice/web", "in the `node` sandbox (basic)."),
    ] {
        let run = rig.github.only_check_run(&a, job);
        assert!(run.summary().contains(place), "{job}: {}", run.summary());
    }
}

#[test]
fn a_failing_job_skips_what_needs_it_naming_it() {
    let a = sha('a');
    let rig = rig_with(THREE_JOBS, &a);
    rig.sandbox.script("./lint.sh", 0, "ok\n");
    rig.sandbox.script("./test.sh", 1, "1 failed\n");
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    for (_, unit) in spawned(&rig) {
        rig.run_to_end(&unit);
    }
    rig.deliver(&parent);
    assert_eq!(rig.run_to_end(&parent), Status::Complete);
    assert!(spawned(&rig).is_empty(), "e2e never started");
    assert_eq!(conclusion(&rig, &a, "sluice/test"), "failure");
    assert_eq!(conclusion(&rig, &a, "sluice/lint"), "success");
    let e2e = rig.github.only_check_run(&a, "sluice/e2e");
    assert_eq!(e2e.conclusion.as_deref(), Some("skipped"));
    assert!(
        e2e.summary().contains("`test`, which it needs, failed"),
        "{}",
        e2e.summary()
    );
    let check = rig.github.only_check_run(&a, "sluice/check");
    assert_eq!(check.conclusion.as_deref(), Some("failure"));
    assert!(
        check.summary().contains("Failed: test did not pass"),
        "{}",
        check.summary()
    );
}

/// `shards = 4` starts four units at once, each told its index; a matrix
/// exports its cell. A failed shard cancels its live siblings (fail_fast),
/// killing their processes.
#[test]
fn shards_start_at_once_and_a_failed_one_cancels_its_siblings() {
    let a = sha('a');
    let config = "[jobs.suite]\ncommand = \"./suite.sh\"\ntimeout = \"59m\"\nshards = 4\n\n\
        [jobs.node]\ncommand = \"./node.sh\"\nmatrix = { node = [20, 22] }\n";
    let rig = rig_with(config, &a);
    rig.sandbox.script("./node.sh", 0, "ok\n");
    rig.sandbox
        .script_timed("./suite.sh", 0, "ok\n", 55 * MINUTE_MS);
    rig.sandbox.script_when(
        "./suite.sh",
        ("SLUICE_SHARD_INDEX", "2"),
        1,
        "shard 2 failed\n",
    );
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    let units = spawned(&rig);
    assert_eq!(
        names(&units),
        [
            "sluice/node (node 20)",
            "sluice/node (node 22)",
            "sluice/suite (1/4)",
            "sluice/suite (2/4)",
            "sluice/suite (3/4)",
            "sluice/suite (4/4)"
        ]
    );
    for (_, unit) in &units {
        rig.pass(unit);
    }
    let env = |i: usize| rig.sandbox.starts_in(&units[i].1.id)[0].env.clone();
    assert_eq!(env(1)["SLUICE_MATRIX_NODE"], "22");
    assert_eq!(
        (
            env(4)["SLUICE_SHARD_INDEX"].as_str(),
            env(4)["SLUICE_SHARD_TOTAL"].as_str()
        ),
        ("3", "4")
    );
    let live = rig.sandbox.live_runs_at(rig.now());
    let live_shards = units[2..]
        .iter()
        .filter(|(_, u)| live.iter().any(|r| r.workspace == u.id));
    assert_eq!(
        live_shards.count(),
        3,
        "four shards ran at once; shard 2 ended"
    );
    rig.run_to_end(&units[3].1);
    rig.deliver(&parent);
    rig.pass(&parent);
    let cancelled = rig.terminator.asked.borrow().clone();
    let siblings: Vec<&Inst> = [2, 4, 5].iter().map(|&i| &units[i].1).collect();
    assert_eq!(
        cancelled,
        siblings.iter().map(|i| i.id.clone()).collect::<Vec<_>>()
    );
    rig.apply_terminations(&siblings);
    for s in &siblings {
        assert!(rig.sandbox.only_run_in(&s.id).killed, "{} killed", s.id);
    }
    let (_, shard1) = &units[2];
    let run = rig.github.only_check_run(&a, "sluice/suite (1/4)");
    assert_eq!(
        run.conclusion.as_deref(),
        Some("cancelled"),
        "{}",
        shard1.id
    );
    assert!(
        run.summary().contains("`sluice/suite (2/4)` failed"),
        "{}",
        run.summary()
    );
    for (_, unit) in &units[..2] {
        rig.run_to_end(unit);
    }
    rig.deliver(&parent);
    assert_eq!(rig.run_to_end(&parent), Status::Complete);
    assert_eq!(conclusion(&rig, &a, "sluice/check"), "failure");
    assert_eq!(conclusion(&rig, &a, "sluice/node (node 22)"), "success");
}

/// The D1 calls of a parent's first pass, which starts a wave of `shards`
/// units, and of creating the units' objects; the rig, its parent, and
/// the units asked for (not yet created).
fn first_wave(shards: u32) -> (Rig, Inst, u32, Vec<CreateRequest>) {
    let a = sha('a');
    let config = format!("[jobs.suite]\ncommand = \"./suite.sh\"\nshards = {shards}\n");
    let rig = rig_with(&config, &a);
    rig.sandbox.script("./suite.sh", 0, "ok\n");
    let parent = pr_check(&rig, &a, None);
    let before = rig.index.calls.get();
    rig.pass(&parent);
    let calls = rig.index.calls.get() - before;
    let asked: Vec<CreateRequest> = rig.spawner.spawned.borrow_mut().drain(..).collect();
    (rig, parent, calls, asked)
}

/// A wave's units are indexed in one D1 batch, so its D1 calls do not grow
/// with its width, and their objects write nothing to D1 when created. A
/// unit whose create never reaches its object is still listed, queued,
/// and the sweep's poke creates it: the pipeline ends as if nothing was
/// lost (issue 26, item 2).
#[test]
fn a_wave_of_units_costs_one_d1_batch_and_a_lost_create_is_swept() {
    let (_, _, narrow, _) = first_wave(2);
    let (rig, parent, wide, mut asked) = first_wave(16);
    assert_eq!(narrow, wide, "the parent's D1 calls for 2 units and for 16");
    assert_eq!(asked.len(), 16);
    assert!(
        asked.iter().all(|c| c.indexed),
        "every unit's row was written"
    );
    let lost = asked.remove(5);
    let listed = |id: &str| block_on(executions::get(rig.index.as_ref(), id)).unwrap();
    let row = listed(lost.id().as_str()).expect("the lost unit is listed");
    assert_eq!(row.status, "queued");
    let before = rig.index.calls.get();
    let mut units: Vec<Inst> = asked.into_iter().map(|c| rig.create(c)).collect();
    assert_eq!(
        rig.index.calls.get(),
        before,
        "the objects' creates wrote nothing to D1"
    );
    for u in &units {
        assert_eq!(rig.run_to_end(u), Status::Complete);
        assert!(listed(&u.id).is_some_and(|r| r.status == "complete"));
    }
    rig.clock.advance(sluice::limits::SWEEP_OVERDUE_MS + 1);
    rig.sweep();
    assert_eq!(*rig.pokes.poked.borrow(), [lost.id().to_string()]);
    units.extend(rig.create_poked());
    assert_eq!(rig.run_to_end(units.last().unwrap()), Status::Complete);
    rig.deliver(&parent);
    assert_eq!(rig.run_to_end(&parent), Status::Complete);
    let a = sha('a');
    assert_eq!(conclusion(&rig, &a, "sluice/check"), "success");
    assert_eq!(conclusion(&rig, &a, "sluice/suite (6/16)"), "success");
}

/// A unit whose create never reached its object, of a parent an operator
/// terminated: its row ends with the parent's units (the object answers
/// "no instance", so the row is ended in D1), and the sweep never creates
/// it after the pipeline ended.
#[test]
fn a_lost_unit_of_a_terminated_parent_is_never_created_later() {
    let (rig, parent, _, mut asked) = first_wave(2);
    let lost = asked.remove(1);
    let units: Vec<Inst> = asked.into_iter().map(|c| rig.create(c)).collect();
    rig.command(&parent, Command::Terminate);
    rig.finalize(&parent);
    assert!(
        rig.terminator
            .asked
            .borrow()
            .contains(&lost.id().to_string()),
        "the lost unit was asked to end with the others"
    );
    rig.apply_terminations(&units.iter().collect::<Vec<_>>());
    let row = block_on(executions::get(rig.index.as_ref(), lost.id().as_str()))
        .unwrap()
        .expect("listed");
    assert_eq!(row.status, "terminated");
    rig.clock.advance(sluice::limits::SWEEP_OVERDUE_MS + 1);
    rig.sweep();
    assert!(
        !rig.pokes.poked.borrow().contains(&lost.id().to_string()),
        "{:?}",
        rig.pokes.poked.borrow()
    );
}

/// A job whose `paths` no changed file matches concludes `skipped` "no
/// matching change" without a child; the jobs that need it run.
#[test]
fn a_path_filtered_job_reports_skipped_and_lets_its_dependents_run() {
    let (base, a) = (sha('0'), sha('a'));
    let config = "[jobs.rust]\ncommand = \"./rust.sh\"\npaths = [\"src/**\"]\n\n\
        [jobs.docs]\ncommand = \"./docs.sh\"\nneeds = [\"rust\"]\n";
    let rig = rig_with(config, &a);
    rig.github
        .set_changed_files(REPO, &base, &a, &["docs/guide.md"]);
    rig.sandbox.script("./docs.sh", 0, "ok\n");
    let parent = pr_check(&rig, &a, Some(&base));
    rig.pass(&parent);
    let units = spawned(&rig);
    assert_eq!(names(&units), ["sluice/docs"]);
    let rust = rig.github.only_check_run(&a, "sluice/rust");
    assert_eq!(rust.conclusion.as_deref(), Some("skipped"));
    assert!(
        rust.summary().contains("no matching change"),
        "{}",
        rust.summary()
    );
    rig.run_to_end(&units[0].1);
    rig.deliver(&parent);
    assert_eq!(rig.run_to_end(&parent), Status::Complete);
    assert_eq!(conclusion(&rig, &a, "sluice/check"), "success");
    assert!(rig.sandbox.all_runs().iter().all(|r| r.workspace != "rust"));
}

/// A newer head of the pull request ends the older pipeline: its parent
/// and its live units, processes killed, each check run `cancelled`
/// naming the newer head.
#[test]
fn a_newer_head_cancels_the_older_pipeline_and_its_units() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = rig_with(THREE_JOBS, &a);
    rig.github.commit(REPO, &b, &[(".sluice.toml", THREE_JOBS)]);
    for c in ["./lint.sh", "./test.sh", "./e2e.sh"] {
        rig.sandbox.script_timed(c, 0, "ok\n", 30 * MINUTE_MS);
    }
    let old = pr_check(&rig, &a, None);
    rig.pass(&old);
    let old_units = spawned(&rig);
    for (_, u) in &old_units {
        rig.pass(u);
    }
    rig.github.set_pull_head(REPO, PR_NUMBER, &b);
    let new = pr_check(&rig, &b, None);
    rig.pass(&new);
    let mut all: Vec<&Inst> = old_units.iter().map(|(_, u)| u).collect();
    all.push(&old);
    assert_eq!(rig.apply_terminations(&all), 3);
    for (name, u) in &old_units {
        assert!(rig.sandbox.only_run_in(&u.id).killed, "{name}");
        let run = rig.github.only_check_run(&a, name);
        assert_eq!(run.conclusion.as_deref(), Some("cancelled"), "{name}");
        assert!(run.summary().contains(&b), "{name}: {}", run.summary());
    }
    assert_eq!(conclusion(&rig, &a, "sluice/check"), "cancelled");
}

/// Terminating a pipeline's parent ends its live units first: their
/// processes are killed and their check runs concluded.
#[test]
fn terminating_the_parent_ends_its_live_units() {
    let a = sha('a');
    let rig = rig_with(THREE_JOBS, &a);
    for c in ["./lint.sh", "./test.sh"] {
        rig.sandbox.script_timed(c, 0, "ok\n", 30 * MINUTE_MS);
    }
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    let units = spawned(&rig);
    for (_, u) in &units {
        rig.pass(u);
    }
    rig.command(&parent, Command::Terminate);
    rig.finalize(&parent);
    let all: Vec<&Inst> = units.iter().map(|(_, u)| u).collect();
    assert_eq!(rig.apply_terminations(&all), 2);
    for (name, u) in &units {
        assert!(rig.sandbox.only_run_in(&u.id).killed, "{name}");
        assert_eq!(conclusion(&rig, &a, name), "cancelled", "{name}");
    }
    assert_eq!(conclusion(&rig, &a, "sluice/check"), "cancelled");
}

/// An operator's restart of the parent ends its live units first (their
/// processes killed, their check runs `cancelled`), then runs every job
/// again as new units, which the restarted parent waits for.
#[test]
fn restarting_the_parent_ends_its_live_units_and_runs_every_job_again() {
    let a = sha('a');
    let rig = rig_with(THREE_JOBS, &a);
    for c in ["./lint.sh", "./test.sh"] {
        rig.sandbox.script_timed(c, 0, "ok\n", 30 * MINUTE_MS);
    }
    rig.sandbox.script("./e2e.sh", 0, "ok\n");
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    let first = spawned(&rig);
    for (_, u) in &first {
        rig.pass(u);
    }
    rig.command(
        &parent,
        Command::Restart {
            from_step: Some("await jobs".into()),
        },
    );
    let old: Vec<&Inst> = first.iter().map(|(_, u)| u).collect();
    assert_eq!(rig.apply_terminations(&old), 2);
    for (name, u) in &first {
        assert!(rig.sandbox.only_run_in(&u.id).killed, "{name}");
        assert!(rig.record(u).status.is_terminal(), "{name}");
    }
    rig.pass(&parent);
    let second = run_pipeline(&rig, &parent);
    assert_eq!(names(&second), ["sluice/lint", "sluice/test", "sluice/e2e"]);
    for (name, u) in &second {
        assert!(
            first.iter().all(|(_, f)| f.id != u.id),
            "{name} is a new unit"
        );
    }
    assert_eq!(newest_conclusion(&rig, &a, "sluice/check"), "success");
    let lint: Vec<_> = rig
        .github
        .check_runs_on(&a)
        .into_iter()
        .filter(|r| r.name == "sluice/lint")
        .map(|r| r.conclusion.unwrap_or_default())
        .collect();
    assert_eq!(lint, ["cancelled", "success"]);
}

// ---------------------------------------------------------------------------
// The seeded model of the child primitive
// ---------------------------------------------------------------------------

/// Schedules the model runs: each a pipeline under random operations.
const SCHEDULES: u64 = 200;
/// Random operations per schedule before everything is let run out.
const OPS_PER_SCHEDULE: u32 = 16;
/// Drain rounds: three waves of jobs and a few passes each.
const DRAIN_ROUNDS_MAX: u32 = 16;

/// Whatever happens between the parent's calls (a pass that dies and is
/// replayed from a restart, a unit that ends before its parent waits, a
/// lost or duplicated wake, a terminated unit, time passing), the pipeline
/// ends: every job concluded once; e2e never started unless test passed;
/// no unit ran twice; `sluice/check` passed exactly when every job did.
#[test]
fn seeded_pipelines_keep_needs_order_and_end_every_job() {
    let mut seed: u64 = 0x7069_7065_6c69;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut passed, mut failed) = (0, 0);
    for schedule in 0..SCHEDULES {
        let test_passes = next(3) != 0;
        match pipeline_schedule(schedule, test_passes, &mut next).as_str() {
            "success" => passed += 1,
            _ => failed += 1,
        }
    }
    assert!(passed >= SCHEDULES / 5, "{passed} passed");
    assert!(failed >= SCHEDULES / 5, "{failed} failed");
    let swept = SWEPT_UNITS.load(std::sync::atomic::Ordering::Relaxed);
    assert!(swept >= 10, "only {swept} lost creates were swept up");
}

fn pipeline_schedule(schedule: u64, test_passes: bool, next: &mut dyn FnMut(u64) -> u64) -> String {
    let a = sha('a');
    let rig = rig_with(THREE_JOBS, &a);
    rig.sandbox.script("./lint.sh", 0, "ok\n");
    rig.sandbox
        .script("./test.sh", if test_passes { 0 } else { 1 }, "t\n");
    rig.sandbox.script("./e2e.sh", 0, "ok\n");
    let parent = pr_check(&rig, &a, None);
    let mut units: Vec<Inst> = Vec::new();
    for _ in 0..OPS_PER_SCHEDULE {
        let live: Vec<&Inst> = units
            .iter()
            .filter(|u| !rig.record(u).status.is_terminal())
            .collect();
        match next(8) {
            0 | 1 if !rig.record(&parent).status.is_terminal() => drop(rig.pass(&parent)),
            2 => {
                if let Some(u) = live.get(next(live.len().max(1) as u64) as usize) {
                    drop(rig.pass(u));
                }
            }
            3 => rig.waker.lose_next.set(1),
            4 => drop(rig.deliver(&parent)),
            5 => {
                let steps = [
                    None,
                    Some("start jobs lint, test"),
                    Some("read jobs"),
                    Some("await jobs"),
                ];
                let from_step = steps[next(4) as usize].map(str::to_owned);
                let _ = rig.try_command(&parent, Command::Restart { from_step });
            }
            6 => rig
                .clock
                .advance(sluice::runs::run::check::pipeline::JOB_WAIT_MS / 2),
            _ => {
                // The Worker's terminator: a restart's ends of the previous
                // generation's units land some operations later.
                rig.apply_terminations(&units.iter().collect::<Vec<_>>());
                // Now and then one unit's create never reaches its object:
                // its row, written with the wave's, is the sweep's to poke.
                spawn_new(&rig, &mut units, next(4) == 0);
            }
        }
        assert_needs_order(&rig, &a, schedule);
    }
    drain(&rig, &parent, &mut units, schedule);
    assert_needs_order(&rig, &a, schedule);
    assert_every_job_concluded_once(&rig, &a, test_passes, schedule);
    newest_conclusion(&rig, &a, "sluice/check")
}

/// Creates each unit asked for once (a second spawn of a key is the
/// instance it names, as the Worker's create is); with `lose_one`, the
/// first new one's create is lost on its way to its object.
fn spawn_new(rig: &Rig, units: &mut Vec<Inst>, mut lose_one: bool) {
    let asked: Vec<CreateRequest> = rig.spawner.spawned.borrow_mut().drain(..).collect();
    for create in asked {
        if !units.iter().any(|u| u.id == create.id().as_str()) {
            if std::mem::take(&mut lose_one) {
                continue;
            }
            units.push(rig.create(create));
        }
    }
}

/// Units the seeded model's sweeps created after their create was lost.
static SWEPT_UNITS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// The cron sweep, once the rows of lost creates are overdue: each poke of
/// an instance without an object creates it, as the object does.
fn sweep_lost(rig: &Rig, parent: &Inst, units: &mut Vec<Inst>) {
    rig.clock.advance(sluice::limits::SWEEP_OVERDUE_MS + 1);
    rig.sweep();
    let poked: Vec<CreateRequest> = rig.pokes.requests.borrow_mut().drain(..).collect();
    for create in poked {
        let id = create.id();
        if id.as_str() != parent.id && !units.iter().any(|u| u.id == id.as_str()) {
            units.push(rig.create(create));
            SWEPT_UNITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

fn drain(rig: &Rig, parent: &Inst, units: &mut Vec<Inst>, schedule: u64) {
    for _ in 0..DRAIN_ROUNDS_MAX {
        if rig.record(parent).status.is_terminal() {
            return;
        }
        let r = rig.pass(parent);
        rig.apply_terminations(&units.iter().collect::<Vec<_>>());
        spawn_new(rig, units, false);
        sweep_lost(rig, parent, units);
        for u in units.iter() {
            if !rig.record(u).status.is_terminal() {
                rig.run_to_end(u);
            }
        }
        rig.deliver(parent);
        if let Some(wake) = r.wake_at_ms.filter(|_| rig.waker.recorded().is_empty()) {
            rig.clock.set(wake.max(rig.now()));
        }
        let r = rig.pass(parent);
        if let Some(wake) = r.wake_at_ms {
            rig.clock.set(wake.max(rig.now()));
        }
    }
    panic!("schedule {schedule}: the pipeline did not end in {DRAIN_ROUNDS_MAX} rounds");
}

/// e2e's process never starts unless a test check run passed before it:
/// the newest test check run opened before each e2e one that ran passed.
fn assert_needs_order(rig: &Rig, sha: &str, schedule: u64) {
    let runs = rig.github.check_runs_on(sha);
    for e2e in runs
        .iter()
        .filter(|r| r.name == "sluice/e2e" && r.conclusion.as_deref() != Some("skipped"))
    {
        let test = runs
            .iter()
            .filter(|r| r.name == "sluice/test" && r.id < e2e.id)
            .next_back();
        assert_eq!(
            test.and_then(|t| t.conclusion.as_deref()),
            Some("success"),
            "schedule {schedule}: e2e {} after {test:?}",
            e2e.id
        );
    }
}

/// Every check run concluded, a job's earlier ones (a restart's previous
/// generation, cancelled if it was live) included: the newest stands.
fn assert_every_job_concluded_once(rig: &Rig, sha: &str, test_passes: bool, schedule: u64) {
    let runs = rig.github.check_runs_on(sha);
    for job in ["sluice/lint", "sluice/test", "sluice/e2e", "sluice/check"] {
        let of: Vec<_> = runs.iter().filter(|r| r.name == job).collect();
        assert!(!of.is_empty(), "schedule {schedule}: no {job}");
        let (last, earlier) = of.split_last().expect("not empty");
        assert!(
            last.conclusion.is_some(),
            "schedule {schedule}: {job} concluded"
        );
        for r in earlier {
            assert!(
                r.conclusion.is_some(),
                "schedule {schedule}: an earlier {job} left open: {of:?}"
            );
        }
    }
    let running: Vec<_> = rig
        .sandbox
        .all_runs()
        .into_iter()
        .filter(|p| p.ended_ms.is_none())
        .collect();
    assert!(
        running.is_empty(),
        "schedule {schedule}: no process outlives its pipeline: {running:?}"
    );
    let processes = rig.sandbox.all_runs();
    let mut workspaces: Vec<&str> = processes.iter().map(|r| r.workspace.as_str()).collect();
    workspaces.sort();
    let before = workspaces.len();
    workspaces.dedup();
    assert_eq!(
        before,
        workspaces.len(),
        "schedule {schedule}: no unit ran twice"
    );
    let all_passed = ["sluice/lint", "sluice/test", "sluice/e2e"]
        .iter()
        .all(|j| newest_conclusion(rig, sha, j) == "success");
    let check = newest_conclusion(rig, sha, "sluice/check");
    assert_eq!(check == "success", all_passed, "schedule {schedule}");
    if !test_passes {
        assert_eq!(
            newest_conclusion(rig, sha, "sluice/e2e"),
            "skipped",
            "schedule {schedule}"
        );
    }
}

/// The conclusion of the newest check run named `name` (a restarted
/// pipeline's generation that stands).
fn newest_conclusion(rig: &Rig, sha: &str, name: &str) -> String {
    rig.github
        .check_runs_on(sha)
        .into_iter()
        .filter(|r| r.name == name)
        .next_back()
        .and_then(|r| r.conclusion)
        .unwrap_or_else(|| "(open)".into())
}

/// Records what `accept` asks to create (nothing is created on the answer
/// path; the test creates them itself).
struct NoObjects;

#[async_trait::async_trait(?Send)]
impl sluice::http::webhook::InstanceCreator for NoObjects {
    async fn create(
        &self,
        req: &CreateRequest,
    ) -> Result<sluice::engine::Created, sluice::http::ApiError> {
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

/// The instances a `rerequested` delivery asks for.
fn rerun(rig: &Rig, delivery: &str, of: sluice::runs::triggers::RerunOf) -> Vec<CreateRequest> {
    use sluice::http::webhook::{accept, Delivery, Intake, Planned};
    let intake = Intake::Act(Delivery {
        delivery: delivery.into(),
        event: "check_run".into(),
        action: Some("rerequested".into()),
        repo: Some(REPO.into()),
        planned: Planned::Rerun(vec![sluice::runs::triggers::Rerun {
            of,
            attempt: format!("rerun-{delivery}"),
        }]),
    });
    block_on(accept(
        rig.index.as_ref(),
        &NoObjects,
        intake,
        rig.now(),
        "test",
    ))
    .unwrap()
    .create_after
}

/// Runs a pipeline's parent to its end, running each unit it starts.
fn run_pipeline(rig: &Rig, parent: &Inst) -> Vec<(String, Inst)> {
    let mut all = Vec::new();
    for _ in 0..10 {
        if rig.pass(parent).status.is_terminal() {
            return all;
        }
        for (name, unit) in spawned(rig) {
            rig.run_to_end(&unit);
            all.push((name, unit));
        }
        rig.deliver(parent);
    }
    panic!("the pipeline did not end in 10 rounds");
}

/// Re-run on a job's check run re-runs that job and the jobs that need it,
/// through a new attempt of the commit's check; the others keep their
/// results. The suite's Re-run re-runs only the failed and cancelled jobs
/// (and what they blocked), as GitHub's "Re-run failed jobs".
#[test]
fn a_rerun_repeats_the_job_and_its_dependents_and_keeps_the_rest() {
    use sluice::runs::triggers::RerunOf;
    let a = sha('a');
    let rig = rig_with(THREE_JOBS, &a);
    rig.sandbox.script("./lint.sh", 0, "ok\n");
    rig.sandbox.script("./test.sh", 1, "flaky\n");
    rig.sandbox.script("./e2e.sh", 0, "ok\n");
    let parent = pr_check(&rig, &a, None);
    let first = run_pipeline(&rig, &parent);
    assert_eq!(names(&first), ["sluice/lint", "sluice/test"]);
    let e2e = rig.github.only_check_run(&a, "sluice/e2e");
    assert_eq!(e2e.conclusion.as_deref(), Some("skipped"));
    let out = rig.row(&parent).output_json.unwrap();
    assert!(out.contains(r#""e2e":"blocked""#), "{out}");

    rig.sandbox.rescript("./test.sh", 0, "ok now\n");
    let made = rerun(&rig, "d1", RerunOf::Instance(first[1].1.id.clone()));
    assert_eq!(made.len(), 1, "one new attempt of the commit's check");
    assert!(made[0]
        .key
        .starts_with(&format!("check:{REPO}:{}:pr{PR_NUMBER}:rerun-", &a[..12])));
    let second = rig.create(made[0].clone());
    let units = run_pipeline(&rig, &second);
    assert_eq!(
        names(&units),
        ["sluice/test", "sluice/e2e"],
        "lint is kept, not run"
    );
    let out = rig.row(&second).output_json.unwrap();
    assert!(
        out.contains(r#""jobs":{"e2e":"passed","lint":"passed","test":"passed"}"#),
        "{out}"
    );
    let check: Vec<_> = rig
        .github
        .check_runs_on(&a)
        .into_iter()
        .filter(|c| c.name == "sluice/check")
        .collect();
    let newest = check.last().unwrap();
    assert_eq!(newest.conclusion.as_deref(), Some("success"));
    assert!(
        newest.summary().contains("kept from the attempt re-run"),
        "{}",
        newest.summary()
    );

    // The suite's Re-run after everything passed runs nothing again.
    let made = rerun(
        &rig,
        "d2",
        RerunOf::Commit {
            repo: REPO.into(),
            sha: a.clone(),
        },
    );
    assert_eq!(made.len(), 1);
    let third = rig.create(made[0].clone());
    assert!(
        run_pipeline(&rig, &third).is_empty(),
        "no failed job: nothing runs"
    );
}

const BUILD_THEN_TEST: &str =
    "[jobs.build]\ncommand = \"./build.sh\"\nartifacts = [\"dist/**\"]\n\n\
    [jobs.lint]\ncommand = \"./lint.sh\"\nartifacts = [\"lint/**\"]\n\n\
    [jobs.test]\ncommand = \"./test.sh\"\nneeds = [\"build\"]\n";

/// build's `artifacts` are uploaded when it passes and unpacked into test's
/// workspace (which needs build) after its checkout, before its command;
/// lint's, which test does not need, are not. build's check run lists the
/// archive with a signed link, and the index records it for the API.
#[test]
fn a_jobs_artifacts_reach_the_jobs_that_need_it_before_their_command() {
    let a = sha('a');
    let rig = rig_with(BUILD_THEN_TEST, &a);
    for c in ["./build.sh", "./lint.sh", "./test.sh"] {
        rig.sandbox.script(c, 0, "ok\n");
    }
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    let first = spawned(&rig);
    assert_eq!(names(&first), ["sluice/build", "sluice/lint"]);
    for (_, unit) in &first {
        assert_eq!(rig.run_to_end(unit), Status::Complete);
    }
    let build = &first[0].1;
    let key = format!("artifacts/{}.tar.gz", build.id);
    let stored = rig.sandbox.st.borrow().archives.get(&key).cloned();
    assert_eq!(stored, Some((build.id.clone(), vec!["dist/**".to_owned()])));
    let summary = rig
        .github
        .only_check_run(&a, "sluice/build")
        .summary()
        .to_owned();
    assert!(summary.contains("**Artifacts**: 1 file"), "{summary}");
    assert!(
        summary.contains(&format!("/artifacts/{}?exp=", build.id)),
        "a signed link: {summary}"
    );
    rig.deliver(&parent);
    rig.pass(&parent);
    let second = spawned(&rig);
    assert_eq!(names(&second), ["sluice/test"]);
    let test = &second[0].1;
    assert_eq!(rig.run_to_end(test), Status::Complete);
    let starts = rig.sandbox.st.borrow().starts.clone();
    let test_start = starts
        .iter()
        .find(|s| s.workspace == test.id && s.spawned)
        .expect("test started");
    assert_eq!(
        test_start.unpacked,
        [key.clone()],
        "build's, and only build's"
    );
    let rows = block_on(sluice::store::artifacts::of_units(
        rig.index.as_ref(),
        &[build.id.clone(), test.id.clone()],
    ));
    let rows = rows.expect("artifacts index");
    assert_eq!(rows.len(), 1, "test uploads nothing: {rows:?}");
    assert_eq!(
        (rows[0].job.as_str(), rows[0].label.as_str()),
        ("build", "sluice/build")
    );
    // Past the retention, the sweep deletes the bytes, then the row.
    rig.blobs
        .0
        .borrow_mut()
        .insert(key.clone(), "archive".into());
    rig.clock.advance(sluice::limits::RETENTION_MS_DEFAULT + 1);
    rig.sweep();
    assert!(
        !rig.blobs.0.borrow().contains_key(&key),
        "the archive is deleted"
    );
    let left = block_on(sluice::store::artifacts::of_units(
        rig.index.as_ref(),
        &[build.id.clone()],
    ));
    assert_eq!(left.expect("artifacts index"), []);
}

/// An upload that fails ends the job as an infrastructure fault
/// (`cancelled`, saying why) and its dependents are skipped naming it: a
/// dependent never runs without what it needs.
#[test]
fn an_upload_that_fails_ends_the_job_and_skips_its_dependents() {
    let a = sha('a');
    let rig = rig_with(BUILD_THEN_TEST, &a);
    for c in ["./build.sh", "./lint.sh", "./test.sh"] {
        rig.sandbox.script(c, 0, "ok\n");
    }
    rig.sandbox.st.borrow_mut().archive_fails = true;
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    for (_, unit) in &spawned(&rig) {
        rig.run_to_end(unit);
    }
    assert_eq!(conclusion(&rig, &a, "sluice/build"), "cancelled");
    let summary = rig
        .github
        .only_check_run(&a, "sluice/build")
        .summary()
        .to_owned();
    assert!(
        summary.contains("ArtifactFailed") || summary.contains("the sandbox is down"),
        "{summary}"
    );
    rig.deliver(&parent);
    assert_eq!(rig.run_to_end(&parent), Status::Complete);
    assert!(
        spawned(&rig).iter().all(|(n, _)| n != "sluice/test"),
        "test never starts"
    );
    assert_eq!(conclusion(&rig, &a, "sluice/test"), "skipped");
}

const CACHED: &str = "[jobs.install]\ncommand = \"./install.sh\"\n\
    cache = [{ paths = [\"node_modules\", \"~/.npm\"], key_files = [\"package-lock.json\"] }]\n";

/// One pipeline of `sha` with `scope` to its end; the install unit's id.
fn cached_round(
    rig: &Rig,
    sha: &str,
    scope: sluice::runs::inputs::CacheScope,
    tail: &str,
) -> String {
    rig.github.commit(REPO, sha, &[(".sluice.toml", CACHED)]);
    rig.github.set_pull_head(REPO, PR_NUMBER, sha);
    let parent = scoped_check(rig, sha, None, Some(scope), tail);
    rig.pass(&parent);
    let units = spawned(rig);
    let unit = &units.last().expect("the install unit").1;
    assert_eq!(rig.run_to_end(unit), Status::Complete);
    rig.deliver(&parent);
    assert_eq!(rig.run_to_end(&parent), Status::Complete);
    unit.id.clone()
}

/// What the unit's command found unpacked in its workspace when it started.
fn unpacked_at_start(rig: &Rig, unit: &str) -> Vec<String> {
    let starts = rig.sandbox.st.borrow().starts.clone();
    let start = starts.iter().find(|s| s.workspace == unit && s.spawned);
    start.expect("the command started").unpacked.clone()
}

fn saved_keys(rig: &Rig) -> Vec<String> {
    let mut keys: Vec<String> = rig
        .sandbox
        .st
        .borrow()
        .archives
        .keys()
        .filter(|k| k.starts_with("caches/"))
        .cloned()
        .collect();
    keys.sort();
    keys
}

/// A job's cache misses and is saved after the command passed; the next
/// run with the same lockfile restores it before its command and saves
/// nothing; a changed lockfile restores the newest entry of the prefix and
/// saves its own key.
#[test]
fn a_cache_is_saved_on_a_miss_restored_on_a_hit_and_falls_back_to_its_prefix() {
    use sluice::runs::inputs::CacheScope;
    let rig = Rig::new();
    rig.sandbox.script("./install.sh", 0, "installed\n");
    let pr = || CacheScope::pull(PR_NUMBER, false, Some("main"));
    let first = cached_round(&rig, &sha('a'), pr(), "pr1");
    assert_eq!(
        unpacked_at_start(&rig, &first),
        Vec::<String>::new(),
        "a miss"
    );
    let saved = saved_keys(&rig);
    assert_eq!(saved.len(), 1, "saved after the pass: {saved:?}");
    assert!(
        saved[0].starts_with(&format!("caches/{REPO}/pr:{PR_NUMBER}/v1-base-")),
        "{saved:?}"
    );
    let summary = rig
        .github
        .only_check_run(&sha('a'), "sluice/install")
        .summary()
        .to_owned();
    assert!(
        summary.contains("cache `node_modules, ~/.npm`: miss; saved"),
        "{summary}"
    );

    let tokens = rig.github.calls_to("token").len();
    let second = cached_round(&rig, &sha('b'), pr(), "pr1");
    assert_eq!(
        unpacked_at_start(&rig, &second),
        saved,
        "the exact key, before the command"
    );
    let st = rig.sandbox.st.borrow();
    let checkouts = st
        .checkouts
        .iter()
        .filter(|c| c.workspace == second)
        .count();
    assert_eq!(checkouts, 1, "checked out once, by the restore step");
    drop(st);
    let minted = rig.github.calls_to("token").len() - tokens;
    assert_eq!(minted, 1, "one checkout token: the command step needs none");
    assert_eq!(saved_keys(&rig), saved, "a hit saves nothing");
    let summary = rig
        .github
        .only_check_run(&sha('b'), "sluice/install")
        .summary()
        .to_owned();
    assert!(
        summary.contains(&format!("hit `pr:{PR_NUMBER}`")),
        "{summary}"
    );

    rig.sandbox
        .st
        .borrow_mut()
        .key_files
        .insert("package-lock.json".into(), "v2".into());
    let third = cached_round(&rig, &sha('c'), pr(), "pr1");
    assert_eq!(
        unpacked_at_start(&rig, &third),
        saved,
        "the prefix's newest"
    );
    assert_eq!(saved_keys(&rig).len(), 2, "and its own key saved");
    let summary = rig
        .github
        .only_check_run(&sha('c'), "sluice/install")
        .summary()
        .to_owned();
    assert!(summary.contains("restored an older key"), "{summary}");
}

/// A fork's pull request saves where only it reads: the next push to main
/// (what a deploy's `needs` runs) and a same-repository pull request miss,
/// and what main saves, the fork's next run reads.
#[test]
fn a_forks_cache_never_reaches_a_push_to_main_or_another_pull_request() {
    use sluice::runs::inputs::CacheScope;
    let rig = Rig::new();
    rig.sandbox.script("./install.sh", 0, "installed\n");
    let fork = || CacheScope::pull(9, true, Some("main"));
    cached_round(&rig, &sha('a'), fork(), "pr9");
    let poisoned = saved_keys(&rig);
    assert!(poisoned[0].contains("/fork-pr:9/"), "{poisoned:?}");
    let main = cached_round(
        &rig,
        &sha('b'),
        CacheScope::push("main", Some("main")),
        "branch-main",
    );
    assert_eq!(
        unpacked_at_start(&rig, &main),
        Vec::<String>::new(),
        "main never reads the fork's"
    );
    let other = cached_round(
        &rig,
        &sha('c'),
        CacheScope::pull(7, false, Some("main")),
        "pr7",
    );
    let main_saved: Vec<String> = saved_keys(&rig)
        .into_iter()
        .filter(|k| k.contains("/branch:main/"))
        .collect();
    assert_eq!(
        unpacked_at_start(&rig, &other),
        main_saved,
        "pr 7 reads main's, not the fork's"
    );
    let fork_again = cached_round(&rig, &sha('d'), fork(), "pr9");
    assert_eq!(
        unpacked_at_start(&rig, &fork_again),
        poisoned,
        "its own first"
    );
}

/// An entry whose bytes are not the ones its row records (or are gone) is
/// forgotten and counts as a miss, and the run saves a good one: a bad
/// entry never fails a check, nor stays.
#[test]
fn an_unusable_cache_entry_is_forgotten_as_a_miss_and_saved_again() {
    use sluice::runs::inputs::CacheScope;
    use sluice::store::Database as _;
    let rig = Rig::new();
    rig.sandbox.script("./install.sh", 0, "installed\n");
    let pr = || CacheScope::pull(PR_NUMBER, false, Some("main"));
    cached_round(&rig, &sha('a'), pr(), "pr1");
    let first = saved_keys(&rig);
    block_on(
        rig.index
            .run(sluice::stmt!("UPDATE caches SET sha256 = 'tampered'")),
    )
    .unwrap();
    let second = cached_round(&rig, &sha('b'), pr(), "pr1");
    assert_eq!(
        unpacked_at_start(&rig, &second),
        Vec::<String>::new(),
        "nothing unpacked"
    );
    assert_eq!(conclusion(&rig, &sha('b'), "sluice/install"), "success");
    let summary = rig
        .github
        .only_check_run(&sha('b'), "sluice/install")
        .summary()
        .to_owned();
    assert!(
        summary.contains("miss (the entry found was unusable"),
        "{summary}"
    );
    assert!(summary.contains("; saved"), "{summary}");
    let now = saved_keys(&rig);
    assert_eq!(
        now.len(),
        2,
        "a new object, its own: {now:?} after {first:?}"
    );
    let third = cached_round(&rig, &sha('c'), pr(), "pr1");
    let good: Vec<String> = now.into_iter().filter(|k| !first.contains(k)).collect();
    assert_eq!(
        unpacked_at_start(&rig, &third),
        good,
        "the good entry is found"
    );
}

// --- Multi-step jobs (`steps = [...]`, ADR-0015) ---

const STEPS: &str = "[jobs.build]\nsteps = [\"./install.sh\", \"./compile.sh\", \"./test.sh\"]\n";
const STEPS_UNSNAPSHOTTED: &str =
    "[jobs.build]\nsteps = [\"./install.sh\", \"./compile.sh\", \"./test.sh\"]\nsnapshot = false\n";

/// The job's one unit, run to its end with every step scripted to exit
/// `exits` (by command), after `prepare` set the fakes up.
fn steps_unit(
    config: &str,
    exits: &[(&str, i32)],
    prepare: impl FnOnce(&Rig),
) -> (Rig, Inst, Status) {
    let a = sha('a');
    let rig = rig_with(config, &a);
    for (command, code) in exits {
        rig.sandbox
            .script(command, *code, &format!("{command} said {code}\n"));
    }
    prepare(&rig);
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    let units = spawned(&rig);
    assert_eq!(names(&units), ["sluice/build"]);
    let unit = units.into_iter().next().expect("the build unit").1;
    let status = rig.run_to_end(&unit);
    (rig, unit, status)
}

const ALL_PASS: [(&str, i32); 3] = [("./install.sh", 0), ("./compile.sh", 0), ("./test.sh", 0)];

/// What each process the unit spawned ran, and the tree it started on.
fn started(rig: &Rig, unit: &Inst) -> Vec<(String, Vec<String>)> {
    rig.sandbox
        .starts_in(&unit.id)
        .into_iter()
        .filter(|s| s.spawned)
        .map(|s| (s.command, s.tree))
        .collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// Each step runs in order in the tree the ones before it left, as its
/// own durable step with its own log; the workspace is captured between
/// steps; the summary lists every step with its time.
#[test]
fn steps_run_in_order_each_with_its_log_in_the_tree_the_last_left() {
    let (rig, unit, status) = steps_unit(STEPS, &ALL_PASS, |_| {});
    assert_eq!(status, Status::Complete);
    assert_eq!(
        started(&rig, &unit),
        [
            ("./install.sh".to_owned(), vec![]),
            ("./compile.sh".to_owned(), strings(&["./install.sh"])),
            (
                "./test.sh".to_owned(),
                strings(&["./install.sh", "./compile.sh"])
            ),
        ]
    );
    assert_eq!(rig.sandbox.checkouts_in(&unit.id).len(), 1, "one checkout");
    let logs: Vec<String> = (1..=3)
        .map(|n| rig.command_result(&unit, &format!("run step {n}")).log_key)
        .collect();
    for (n, key) in logs.iter().enumerate() {
        let log = rig.log(key).unwrap_or_default();
        let command = ALL_PASS[n].0;
        assert!(log.contains(&format!("{command} said 0")), "{key}: {log}");
    }
    let snapshots = rig.sandbox.st.borrow().snapshots.len();
    assert_eq!(snapshots, 2, "between steps, never after the last");
    let summary = rig
        .github
        .only_check_run(&sha('a'), "sluice/build")
        .summary()
        .to_owned();
    for line in [
        "1. `./install.sh` passed in",
        "2. `./compile.sh` passed in",
        "3. `./test.sh` passed in",
    ] {
        assert!(summary.contains(line), "{line}: {summary}");
    }
    assert!(summary.contains("; snapshot "), "{summary}");
}

/// A failing step ends the job failed, naming it; the steps after it are
/// never started, and say so.
#[test]
fn a_failing_step_ends_the_job_and_the_rest_are_not_run() {
    let exits = [("./install.sh", 0), ("./compile.sh", 2), ("./test.sh", 0)];
    let (rig, unit, status) = steps_unit(STEPS, &exits, |_| {});
    assert_eq!(
        status,
        Status::Complete,
        "a failed check is a completed run"
    );
    let a = sha('a');
    assert_eq!(conclusion(&rig, &a, "sluice/build"), "failure");
    let commands: Vec<String> = started(&rig, &unit).into_iter().map(|(c, _)| c).collect();
    assert_eq!(commands, ["./install.sh", "./compile.sh"]);
    let summary = rig
        .github
        .only_check_run(&a, "sluice/build")
        .summary()
        .to_owned();
    assert!(
        summary.starts_with("`./compile.sh` exited with code 2"),
        "{summary}"
    );
    assert!(
        summary.contains("2. `./compile.sh` failed (exit 2)"),
        "{summary}"
    );
    assert!(summary.contains("3. `./test.sh` not run"), "{summary}");
}

/// A container lost between two steps: the next step resumes from the
/// snapshots (unpacked over a fresh checkout), never re-running the steps
/// before it and never starting on a clean tree.
#[test]
fn a_container_lost_between_steps_resumes_from_the_snapshot() {
    let (rig, unit, status) = steps_unit(STEPS, &ALL_PASS, |rig| {
        rig.sandbox.st.borrow_mut().replace_container_when = Some(ReplaceWhen::AfterSnapshot);
    });
    assert_eq!(status, Status::Complete);
    assert_eq!(rig.sandbox.st.borrow().containers_replaced, 1);
    assert_eq!(
        started(&rig, &unit),
        [
            ("./install.sh".to_owned(), vec![]),
            ("./compile.sh".to_owned(), strings(&["./install.sh"])),
            (
                "./test.sh".to_owned(),
                strings(&["./install.sh", "./compile.sh"])
            ),
        ],
        "install ran once; compile started on install's tree"
    );
    assert_eq!(
        rig.sandbox.checkouts_in(&unit.id).len(),
        2,
        "the base of the restore"
    );
    let unpacked = rig.sandbox.st.borrow().unpacked.get(&unit.id).cloned();
    let first = format!("snapshots/{}/g0-r0-s0.tar.gz", unit.id);
    assert_eq!(unpacked, Some(vec![format!("{first} (pruned)")]));
}

/// A process lost mid-step (its container replaced while it ran): the
/// step runs again on the tree the step before left, restored from the
/// snapshots, not on what the lost run half did.
#[test]
fn a_step_whose_container_went_mid_run_restarts_on_the_tree_before_it() {
    let (rig, unit, status) = steps_unit(STEPS, &ALL_PASS, |rig| {
        let mut st = rig.sandbox.st.borrow_mut();
        st.scripts.retain(|(c, _)| c != "./compile.sh");
        st.replace_container_when = Some(ReplaceWhen::WhileRunning("./compile.sh".into()));
        drop(st);
        rig.sandbox
            .script_running("./compile.sh", 0, "compiled\n", 3);
    });
    assert_eq!(status, Status::Complete);
    let compiles: Vec<Vec<String>> = started(&rig, &unit)
        .into_iter()
        .filter(|(c, _)| c == "./compile.sh")
        .map(|(_, tree)| tree)
        .collect();
    assert_eq!(
        compiles,
        [strings(&["./install.sh"]), strings(&["./install.sh"])]
    );
}

/// With `snapshot = false`, a workspace lost between steps runs the job
/// again from its first step in a fresh checkout: a later step never runs
/// on a clean tree.
#[test]
fn without_snapshots_a_lost_workspace_runs_the_job_again_from_its_first_step() {
    let (rig, unit, status) = steps_unit(STEPS_UNSNAPSHOTTED, &ALL_PASS, |rig| {
        rig.sandbox.st.borrow_mut().replace_container_when =
            Some(ReplaceWhen::AfterExit("./install.sh".into()));
    });
    assert_eq!(status, Status::Complete);
    assert_eq!(rig.sandbox.st.borrow().snapshots.len(), 0, "none taken");
    assert_eq!(
        started(&rig, &unit),
        [
            ("./install.sh".to_owned(), vec![]),
            ("./install.sh".to_owned(), vec![]),
            ("./compile.sh".to_owned(), strings(&["./install.sh"])),
            (
                "./test.sh".to_owned(),
                strings(&["./install.sh", "./compile.sh"])
            ),
        ]
    );
    assert!(rig.command_result(&unit, "run step 3 (again 1)").exit_code == Some(0));
    let summary = rig
        .github
        .only_check_run(&sha('a'), "sluice/build")
        .summary()
        .to_owned();
    assert!(
        summary.contains("the steps ran again from the first (1 time)"),
        "{summary}"
    );
}

/// A snapshot that cannot be taken is no failure, but it breaks the
/// chain: a workspace lost after it runs the job again from the first
/// step, never from a tree missing that step's work.
#[test]
fn a_snapshot_that_cannot_be_taken_breaks_the_chain_and_a_loss_starts_over() {
    let (rig, unit, status) = steps_unit(STEPS, &ALL_PASS, |rig| {
        let mut st = rig.sandbox.st.borrow_mut();
        st.snapshot_fails = true;
        st.replace_container_when = Some(ReplaceWhen::AfterExit("./install.sh".into()));
    });
    assert_eq!(status, Status::Complete);
    let commands: Vec<String> = started(&rig, &unit).into_iter().map(|(c, _)| c).collect();
    assert_eq!(
        commands,
        ["./install.sh", "./install.sh", "./compile.sh", "./test.sh"]
    );
    for (command, tree) in started(&rig, &unit) {
        if command == "./test.sh" {
            assert_eq!(tree, strings(&["./install.sh", "./compile.sh"]));
        }
    }
}

/// A job whose workspace is lost at every run-through ends saying so,
/// bounded by `RUN_THROUGHS_MAX`.
#[test]
fn a_workspace_lost_at_every_run_through_ends_the_job_saying_so() {
    let (rig, unit, status) = steps_unit(STEPS_UNSNAPSHOTTED, &ALL_PASS, |rig| {
        rig.sandbox.st.borrow_mut().replace_container_when =
            Some(ReplaceWhen::AfterEveryExit("./install.sh".into()));
    });
    assert_eq!(
        status,
        Status::Errored,
        "an infrastructure fault, concluded cancelled"
    );
    let installs = started(&rig, &unit)
        .iter()
        .filter(|(c, _)| c == "./install.sh")
        .count();
    assert_eq!(installs as u32, sluice::runs::kit::steps::RUN_THROUGHS_MAX);
    assert!(started(&rig, &unit)
        .iter()
        .all(|(c, _)| c == "./install.sh"));
    assert_eq!(conclusion(&rig, &sha('a'), "sluice/build"), "cancelled");
    let summary = rig
        .github
        .only_check_run(&sha('a'), "sluice/build")
        .summary()
        .to_owned();
    assert!(summary.contains("lost 3 times"), "{summary}");
    let errored = rig.record(&unit);
    assert!(
        errored
            .error_message
            .as_deref()
            .unwrap_or_default()
            .contains("lost 3 times"),
        "{errored:?}"
    );
}

/// Schedules of the multi-step model.
const STEP_SCHEDULES: u64 = 200;
/// Random operations per schedule before the unit is run out.
const STEP_OPS_PER_SCHEDULE: u32 = 14;
const STEP_COMMANDS: [&str; 3] = ["./install.sh", "./compile.sh", "./test.sh"];

/// Whatever happens to a multi-step job (its container replaced after a
/// snapshot, after a step's exit or mid-step; its agent restarted mid-step
/// over the same disk; snapshots that cannot be
/// taken; an operator's pause, resume or restart from any step, while it
/// runs or after it ended; time passing), every step's process starts on
/// exactly the tree the steps before it left (the model's effect: each
/// started command appends to its workspace's tree), and the job ends,
/// concluded once: passed, or cancelled after its run-throughs.
#[test]
fn seeded_steps_start_only_on_the_tree_the_steps_before_left() {
    let mut seed: u64 = 0x7374_6570_7321;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut resumed, mut again) = (0, 0);
    for schedule in 0..STEP_SCHEDULES {
        let (restores, run_throughs) = steps_schedule(schedule, &mut next);
        resumed += u32::from(restores > 0);
        again += u32::from(run_throughs > 0);
    }
    // The schedules reach both ways back, not only the quiet path.
    assert!(resumed >= 10, "{resumed} schedules restored from snapshots");
    assert!(again >= 10, "{again} schedules ran the steps again");
}

/// One schedule; how many snapshots it unpacked and how many run-throughs
/// began again.
fn steps_schedule(schedule: u64, next: &mut dyn FnMut(u64) -> u64) -> (usize, usize) {
    let a = sha('a');
    let config = [STEPS, STEPS_UNSNAPSHOTTED][next(2) as usize];
    let rig = rig_with(config, &a);
    rig.sandbox.script("./install.sh", 0, "i\n");
    rig.sandbox.script_running("./compile.sh", 0, "c\n", 2);
    rig.sandbox.script("./test.sh", 0, "t\n");
    let parent = pr_check(&rig, &a, None);
    rig.pass(&parent);
    let unit = spawned(&rig).into_iter().next().expect("the unit").1;
    for _ in 0..STEP_OPS_PER_SCHEDULE {
        let live = !rig.record(&unit).status.is_terminal();
        let op = next(8);
        match op {
            0..=2 if live => drop(rig.pass(&unit)),
            3 => {
                let command = STEP_COMMANDS[next(3) as usize].to_owned();
                rig.sandbox.st.borrow_mut().replace_container_when = Some(match next(5) {
                    0 => ReplaceWhen::AfterSnapshot,
                    1 => ReplaceWhen::AfterExit(command),
                    2 => ReplaceWhen::AgentRestartWhileRunning(command),
                    _ => ReplaceWhen::WhileRunning("./compile.sh".into()),
                });
            }
            4 => {
                let mut st = rig.sandbox.st.borrow_mut();
                st.snapshot_fails = !st.snapshot_fails;
            }
            5 => {
                let from = [
                    None,
                    Some("run step 1"),
                    Some("run step 2"),
                    Some("snapshot after run step 1"),
                    Some("run step 3"),
                    Some("snapshot after run step 2"),
                ];
                let from_step = from[next(6) as usize].map(str::to_owned);
                let _ = rig.try_command(&unit, Command::Restart { from_step });
            }
            6 => {
                let paused = rig.record(&unit).status == Status::Paused;
                let cmd = if paused {
                    Command::Resume
                } else {
                    Command::Pause
                };
                let _ = rig.try_command(&unit, cmd);
            }
            _ => rig.clock.advance(next(3) as i64 * 1_000),
        }
        assert_steps_on_their_trees(&rig, &unit, schedule);
    }
    if rig.record(&unit).status == Status::Paused {
        rig.command(&unit, Command::Resume);
    }
    let status = rig.run_to_end(&unit);
    assert!(status.is_terminal(), "schedule {schedule}: {status:?}");
    assert_steps_on_their_trees(&rig, &unit, schedule);
    let conclusion = newest_conclusion(&rig, &a, "sluice/build");
    assert!(
        ["success", "cancelled"].contains(&conclusion.as_str()),
        "schedule {schedule}: {conclusion}"
    );
    let restores = rig
        .sandbox
        .st
        .borrow()
        .unpacked
        .get(&unit.id)
        .map_or(0, Vec::len);
    let again = rig
        .journal(&unit)
        .iter()
        .filter(|e| e.name.starts_with("check out again"))
        .count();
    (restores, again)
}

fn assert_steps_on_their_trees(rig: &Rig, unit: &Inst, schedule: u64) {
    for start in rig
        .sandbox
        .starts_in(&unit.id)
        .into_iter()
        .filter(|s| s.spawned)
    {
        let k = STEP_COMMANDS
            .iter()
            .position(|c| *c == start.command)
            .expect("a step's command");
        assert_eq!(
            start.tree,
            strings(&STEP_COMMANDS[..k]),
            "schedule {schedule}: {} started on another tree",
            start.command
        );
    }
}

const STEPS_CACHED: &str = "[jobs.build]\n\
    steps = [\"./install.sh\", \"./compile.sh\"]\n\
    cache = [{ paths = [\"node_modules\"], key_files = [\"package-lock.json\"] }]\n\
    artifacts = [\"dist/**\"]\n";

/// A job of steps with a cache and artifacts, as a Node project moving
/// from GitHub Actions writes one: the cache is restored into the one
/// checkout before the first step (no second checkout, no second token),
/// the first snapshot is taken over that checkout, and the cache and the
/// artifacts are saved once, after the last step passed.
#[test]
fn a_job_of_steps_restores_its_cache_before_the_first_and_saves_after_the_last() {
    use sluice::runs::inputs::CacheScope;
    let rig = Rig::new();
    rig.sandbox.script("./install.sh", 0, "installed\n");
    rig.sandbox.script("./compile.sh", 0, "compiled\n");
    let scope = || CacheScope::pull(PR_NUMBER, false, Some("main"));
    for (round, head) in [(0, sha('a')), (1, sha('b'))] {
        rig.github
            .commit(REPO, &head, &[(".sluice.toml", STEPS_CACHED)]);
        rig.github.set_pull_head(REPO, PR_NUMBER, &head);
        let parent = scoped_check(&rig, &head, None, Some(scope()), "pr1");
        rig.pass(&parent);
        let unit = spawned(&rig).pop().expect("the build unit").1;
        let tokens = rig.github.calls_to("token").len();
        assert_eq!(rig.run_to_end(&unit), Status::Complete);
        assert_eq!(conclusion(&rig, &head, "sluice/build"), "success");
        assert_eq!(
            rig.sandbox.checkouts_in(&unit.id).len(),
            1,
            "round {round}: one checkout"
        );
        assert_eq!(
            rig.github.calls_to("token").len() - tokens,
            1,
            "round {round}: one token"
        );
        let commands: Vec<String> = started(&rig, &unit).into_iter().map(|(c, _)| c).collect();
        assert_eq!(commands, ["./install.sh", "./compile.sh"]);
        let names: Vec<String> = rig.journal(&unit).into_iter().map(|e| e.name).collect();
        let at = |n: &str| {
            names
                .iter()
                .position(|x| x == n)
                .unwrap_or_else(|| panic!("{n}: {names:?}"))
        };
        assert!(at("run step 1") < at("snapshot after run step 1"));
        assert!(at("snapshot after run step 1") < at("run step 2"));
        assert!(at("run step 2") < at("save artifacts"), "{names:?}");
        let caches = saved_keys(&rig);
        assert_eq!(
            caches.len(),
            1,
            "round {round}: saved once, on the first round's miss: {caches:?}"
        );
        if round == 1 {
            assert_eq!(
                unpacked_at_start(&rig, &unit.id),
                caches,
                "the hit, before the first step"
            );
        }
        rig.deliver(&parent);
        assert_eq!(rig.run_to_end(&parent), Status::Complete);
    }
}
