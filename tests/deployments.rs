//! Issue 14: every deploy is a GitHub deployment in its environment, with
//! statuses that follow the run. The real `deploy` run and engine over the
//! strict fakes (`common::fake_deployments` serves GitHub's deployments and
//! statuses with GitHub's shapes, status codes and `auto_inactive` rule).
//! One test per path, each asserting the status sequence the deployment
//! shows, then replay, rollbacks, permissions and configuration.

mod common;

use common::fake_deployments::*;
use common::fakes::*;
use common::{block_on, T0};
use serde_json::json;
use sluice::engine::{Clock, Command, CreateRequest, Interrupt, Status};
use sluice::runs::environment::Environments;
use sluice::runs::inputs::DeployInput;

/// The rig's production environment marked `production`, and a transient
/// preview for `release/*`.
const FLAGGED_ENVIRONMENTS: &str = "[production]\nrepos = [\"octo/hello\"]\n\
    branches = [\"main\"]\nsecrets = [\"DEPLOY_TOKEN\"]\nproduction = true\n\
    [preview]\nrepos = [\"octo/*\"]\nbranches = [\"release/*\"]\ntransient = true\n";
const PRODUCTION_TOML: &str =
    "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nenvironment = \"production\"\n";
const CONFIRM_TOML: &str =
    "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nconfirm = true\n";

fn details_url(id: &str) -> String {
    format!("{PUBLIC_URL}/v1/executions/{id}")
}

/// The signed link of a deploy command's log (`LOG_LINK_SECRET` is set).
fn is_log_link(url: Option<&str>, id: &str) -> bool {
    url.is_some_and(|u| u.starts_with(&format!("{PUBLIC_URL}/logs/{id}/")) && u.contains("&sig="))
}

fn descriptions(d: &Deployment) -> Vec<&str> {
    d.statuses.iter().map(|s| s.description.as_str()).collect()
}

// ---------------------------------------------------------------------------
// The paths, one status sequence each
// ---------------------------------------------------------------------------

#[test]
fn a_deploy_is_a_deployment_queued_then_in_progress_then_success() {
    let a = sha('a');
    let mut rig = Rig::new();
    rig.environments = Environments::parse(Some(FLAGGED_ENVIRONMENTS));
    rig.github
        .commit(REPO, &a, &[(".sluice.toml", PRODUCTION_TOML)]);
    rig.sandbox.script(
        "./deploy.sh",
        0,
        "published\nSLUICE_ENVIRONMENT_URL=https://hello-$SLUICE_SHA.example.com/\n",
    );
    rig.secrets.set("DEPLOY_TOKEN", "t0ken-value-123");
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);

    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "in_progress", "success"]);
    assert_eq!(
        (d.environment.as_str(), d.task.as_str(), d.execution()),
        ("production", "deploy", Some(da.id.as_str()))
    );
    assert_eq!(
        (d.production, d.transient),
        (true, false),
        "the operator's flags"
    );
    let [queued, running, success] = &d.statuses[..] else {
        panic!("{d:#?}");
    };
    assert_eq!(queued.log_url, Some(details_url(&da.id)));
    assert!(
        is_log_link(running.log_url.as_deref(), &da.id),
        "{running:?}"
    );
    assert!(
        is_log_link(success.log_url.as_deref(), &da.id),
        "{success:?}"
    );
    assert_eq!(
        success.environment_url,
        Some(format!("https://hello-{a}.example.com/"))
    );
    assert_eq!(
        (
            queued.environment_url.as_ref(),
            running.environment_url.as_ref()
        ),
        (None, None)
    );
    assert_eq!(success.description, "Deployed by Sluice.");
    // What Sluice sent: `auto_merge: false` and no required contexts (the
    // fake refuses anything else), the success keeping `auto_inactive`.
    let create = &rig.github.calls_to("create-deployment")[0];
    let body: serde_json::Value = serde_json::from_str(create.body.as_deref().unwrap()).unwrap();
    assert_eq!(body["ref"], a.as_str());
    assert_eq!(body["production_environment"], true);
    assert!(
        body.get("transient_environment").is_none(),
        "unset: GitHub's default"
    );
    let posts = rig.github.calls_to("create-deployment-status");
    let last: serde_json::Value = serde_json::from_str(posts[2].body.as_deref().unwrap()).unwrap();
    assert_eq!(last["auto_inactive"], true);
    // Deployment calls use a token of their own: deployments, nothing else.
    let grants: Vec<Grant> = rig
        .github
        .issued_tokens()
        .iter()
        .map(|t| rig.github.grant_of(t).unwrap())
        .collect();
    let deployments: Vec<&Grant> = grants
        .iter()
        .filter(|g| g.permissions.contains_key("deployments"))
        .collect();
    assert_eq!(deployments.len(), 1, "{grants:?}");
    assert_eq!(
        deployments[0].permissions.keys().collect::<Vec<_>>(),
        ["deployments", "metadata"]
    );
    assert_eq!(deployments[0].repositories, ["hello"]);
    assert_eq!(
        rig.github
            .only_check_run(&a, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("success")
    );
}

#[test]
fn a_failing_deploy_ends_failure_with_its_log_link() {
    let a = sha('a');
    let rig = Rig::new();
    rig.github
        .commit(REPO, &a, &[(".sluice.toml", DEPLOY_TOML)]);
    rig.sandbox.script(
        "./deploy.sh",
        3,
        "boom\nSLUICE_ENVIRONMENT_URL=https://never.example.com\n",
    );
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);

    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "in_progress", "failure"]);
    assert_eq!(d.environment, BRANCH, "no environment: the branch's name");
    assert_eq!((d.production, d.transient), (false, false));
    let failure = d.latest().unwrap();
    assert!(
        failure
            .description
            .starts_with("`./deploy.sh` exited with code 3 after"),
        "{failure:?}"
    );
    assert!(
        is_log_link(failure.log_url.as_deref(), &da.id),
        "{failure:?}"
    );
    assert_eq!(failure.environment_url, None, "only a success has one");
}

#[test]
fn an_infrastructure_fault_ends_error() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], DEPLOY_TOML);
    rig.sandbox.st.borrow_mut().checkout_fails = true;
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Errored);

    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "in_progress", "error"]);
    let error = d.latest().unwrap();
    assert!(
        error
            .description
            .starts_with("Sluice could not run this deploy:")
            && error.description.contains("CheckoutFailed"),
        "{error:?}"
    );
    assert!(error.description.chars().count() <= DESCRIPTION_CHARS_MAX);
    assert_eq!(
        rig.github
            .only_check_run(&a, "sluice/deploy")
            .conclusion
            .as_deref(),
        Some("cancelled"),
        "an infrastructure fault is no red failure"
    );
}

/// A holds the group, B waits, D arrives and supersedes B: B is `inactive`
/// naming D; A and D deploy, and D's success retires A's (`auto_inactive`).
#[test]
fn a_waiter_superseded_ends_inactive_naming_the_newer_revision() {
    let (a, b, d) = (sha('a'), sha('b'), sha('d'));
    let rig = deploy_rig(&[&a, &b, &d], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    assert_eq!(
        rig.github.only_deployment(&a).states(),
        ["queued", "in_progress"]
    );
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    assert_eq!(
        rig.github.only_deployment(&b).states(),
        ["queued"],
        "queued while it waits for the group"
    );
    rig.github.set_head(REPO, BRANCH, &d);
    let dd = rig.deploy(&d);
    assert_eq!(rig.pass(&dd).status, Status::Waiting);
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Skipped);

    let b_dep = rig.github.only_deployment(&b);
    assert_eq!(b_dep.states(), ["queued", "inactive"]);
    assert_eq!(
        b_dep.latest().unwrap().description,
        format!("Not deployed: superseded by a newer revision, {d}.")
    );

    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(
        rig.github.only_deployment(&a).states(),
        ["queued", "in_progress", "success"]
    );
    assert_eq!(rig.deliver(&dd), 1);
    assert_eq!(rig.pass(&dd).status, Status::Complete);
    assert_eq!(
        rig.github.only_deployment(&d).states(),
        ["queued", "in_progress", "success"]
    );
    let a_dep = rig.github.only_deployment(&a);
    assert_eq!(
        a_dep.states(),
        ["queued", "in_progress", "success", "inactive"],
        "GitHub's auto_inactive retired A when D succeeded"
    );
    assert!(a_dep.latest().unwrap().auto, "GitHub's, not Sluice's");
    let successes: Vec<String> = rig
        .github
        .all_deployments()
        .iter()
        .filter(|x| x.latest().is_some_and(|s| s.state == "success"))
        .map(|x| x.sha.clone())
        .collect();
    assert_eq!(successes, [d.clone()], "one success: the newest commit");
}

/// Not the head when it arrives (the gate's head read) and no longer the
/// head when it takes the group (the re-read): both `inactive` naming it.
#[test]
fn a_deploy_that_is_not_current_ends_inactive_naming_the_head() {
    let (a, b, c, f) = (sha('a'), sha('b'), sha('c'), sha('f'));
    let rig = deploy_rig(&[&a, &b, &c, &f], DEPLOY_TOML);
    rig.sandbox.hold(&a);
    rig.clock.freeze_timers(true);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let mut a_pass = rig.start_pass(&da);
    rig.holds_in_flight(&mut a_pass);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    // At arrival: C is not the head (B is).
    let dc = rig.deploy(&c);
    assert_eq!(rig.pass(&dc).status, Status::Skipped);
    let c_dep = rig.github.only_deployment(&c);
    assert_eq!(c_dep.states(), ["queued", "inactive"]);
    assert_eq!(
        c_dep.latest().unwrap().description,
        format!("Not deployed: not the branch head; the head is {b}.")
    );

    // At dequeue: F was pushed while B waited.
    rig.github.set_head(REPO, BRANCH, &f);
    rig.sandbox.release(&a);
    assert_eq!(block_on(a_pass).status, Status::Complete);
    rig.clock.freeze_timers(false);
    assert_eq!(rig.deliver(&db), 1);
    assert_eq!(rig.pass(&db).status, Status::Skipped);
    let b_dep = rig.github.only_deployment(&b);
    assert_eq!(
        b_dep.states(),
        ["queued", "inactive"],
        "its command never started"
    );
    assert!(
        b_dep.latest().unwrap().description.contains(&f),
        "{b_dep:?}"
    );
}

#[test]
fn a_queued_timeout_ends_inactive() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 90 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    let (a_end, db) = block_on(futures::future::join(rig.drive(&da, 0), async {
        rig.clock.sleep(MINUTE_MS).await;
        rig.github.set_head(REPO, BRANCH, &b);
        let db = rig.deploy(&b);
        assert_eq!(rig.drive(&db, 0).await, Status::Skipped);
        db
    }));
    assert_eq!(a_end, Status::Complete);
    assert_eq!(rig.row(&db).reason.as_deref(), Some("queued_timeout"));
    let b_dep = rig.github.only_deployment(&b);
    assert_eq!(b_dep.states(), ["queued", "inactive"]);
    assert!(
        b_dep
            .latest()
            .unwrap()
            .description
            .contains("waited over 60 minutes"),
        "{b_dep:?}"
    );
}

#[test]
fn an_unanswered_confirmation_ends_inactive() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], CONFIRM_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Skipped);
    assert_eq!(rig.row(&da).reason.as_deref(), Some("confirmation_timeout"));
    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "inactive"]);
    assert_eq!(
        descriptions(&d)[0],
        "Waiting for an operator's confirmation, then for its turn."
    );
    assert!(descriptions(&d)[1].contains("nobody confirmed"), "{d:?}");
}

/// Terminated while it waits (no pass runs: finalize concludes), it never
/// deployed: `inactive`. Terminated while its command runs: `error`, the
/// environment may be half deployed.
#[test]
fn a_terminated_deploy_is_inactive_before_its_command_and_error_during_it() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting, "A's command runs on");
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);

    assert_eq!(rig.command(&db, Command::Terminate), Status::Terminated);
    rig.finalize(&db);
    let b_dep = rig.github.only_deployment(&b);
    assert_eq!(b_dep.states(), ["queued", "inactive"]);
    assert_eq!(
        b_dep.latest().unwrap().description,
        "Not deployed: terminated by an operator before its command started."
    );

    assert_eq!(rig.command(&da, Command::Terminate), Status::Terminated);
    rig.finalize(&da);
    assert!(rig.sandbox.only_run_in(&da.id).killed);
    let a_dep = rig.github.only_deployment(&a);
    assert_eq!(a_dep.states(), ["queued", "in_progress", "error"]);
    assert!(a_dep
        .latest()
        .unwrap()
        .description
        .contains("partly deployed"));

    rig.finalize(&da);
    assert_eq!(
        rig.github.only_deployment(&a).statuses.len(),
        3,
        "finalize again posts nothing: the deployment has ended"
    );
}

/// A terminate that reaches a running pass: the run's own cleanup step
/// concludes the deployment, and finalize finds nothing left to do.
#[test]
fn a_terminate_inside_a_pass_concludes_the_deployment_in_its_cleanup_step() {
    let a = sha('a');
    let rig = deploy_rig_timed(&[&a], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting, "A's command runs on");
    da.world.interrupt.set(Some(Interrupt::Terminate));
    rig.clock.advance(2_000);
    assert_eq!(rig.pass(&da).status, Status::Terminated);
    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "in_progress", "error"]);
    assert!(rig
        .step_names(&da)
        .contains(&"deployment: conclude".to_owned()));
    assert!(
        rig.sandbox.only_run_in(&da.id).killed,
        "killed before anything was released"
    );
}

/// The cron sweep every minute until `done` (a dead holder's group is
/// taken over by the sweep's wake-up).
async fn sweep_every_minute(rig: &Rig, done: &std::cell::Cell<bool>) {
    for _ in 0..24 * 60 {
        if done.get() {
            return;
        }
        rig.clock.sleep(MINUTE_MS).await;
        rig.sweep();
    }
}

/// A holder whose executor went silent while its command ran is taken
/// over; the newer deploy runs after its process ends and succeeds. When
/// the old holder comes back, its success is fenced: posting it would
/// retire the newer one's (`auto_inactive`), so it ends `inactive`.
#[test]
fn a_holder_taken_over_during_its_command_does_not_retire_the_newer_success() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(
        rig.pass(&da).status,
        Status::Waiting,
        "A's command runs on; A goes silent"
    );
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
        rb.started_ms >= ra.end_ms().unwrap(),
        "B ran after A's process"
    );
    assert_eq!(
        rig.github.only_deployment(&b).states(),
        ["queued", "in_progress", "success"]
    );

    assert_eq!(block_on(rig.drive(&da, 0)), Status::Complete);
    let a_dep = rig.github.only_deployment(&a);
    assert_eq!(a_dep.states(), ["queued", "in_progress", "inactive"]);
    assert_eq!(
        a_dep.latest().unwrap().description,
        "Deployed, but a newer deploy took the group over and ran after it."
    );
    assert_eq!(
        rig.github.only_deployment(&b).states(),
        ["queued", "in_progress", "success"],
        "B stays the environment's active deployment"
    );
}

// ---------------------------------------------------------------------------
// Replay, rollbacks, another App's deployments, permissions
// ---------------------------------------------------------------------------

/// GitHub applies the create and a status but their answers are lost: the
/// retries find what was applied and repeat nothing.
#[test]
fn lost_answers_create_one_deployment_and_no_status_twice() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], DEPLOY_TOML);
    rig.github.lose_answer_next("create-deployment");
    rig.github.lose_answer_next("create-deployment-status");
    rig.github.fail_next("list-deployment-statuses", 1, 502);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);

    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "in_progress", "success"]);
    let codes = |route| {
        rig.github
            .calls_to(route)
            .iter()
            .map(|c| c.status)
            .collect::<Vec<_>>()
    };
    assert_eq!(codes("create-deployment"), [502], "the retry found it");
    assert_eq!(codes("create-deployment-status"), [502, 201, 201]);
    assert_eq!(rig.entry(&da, "create deployment").attempts, 2);
    assert_eq!(rig.entry(&da, "deployment: queued").attempts, 3);

    // A replayed pass (the journal answers) calls GitHub for nothing.
    let calls = rig.github.all_calls().len();
    assert_eq!(rig.pass(&da).status, Status::Complete);
    assert_eq!(rig.github.all_calls().len(), calls);
}

/// A restart that runs the deploy again (from the top) is a deployment of
/// its own, of the same execution's next generation: the earlier one is
/// retired when it was still live, or by GitHub's `auto_inactive` when the
/// new one succeeds. A restart from past the deployment's creation
/// continues the same deployment.
#[test]
fn a_restart_is_a_new_deployment_and_retires_the_earlier_one() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    rig.command(&da, Command::Restart { from_step: None });
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    let of_a = rig.github.deployments_on(&a);
    assert_eq!(of_a.len(), 2, "{of_a:#?}");
    assert_eq!(
        of_a[0].states(),
        ["queued", "in_progress", "success", "inactive"]
    );
    assert!(of_a[0].latest().unwrap().auto, "GitHub's auto_inactive");
    assert_eq!(of_a[1].states(), ["queued", "in_progress", "success"]);
    assert_eq!(of_a[1].payload["sluice"]["generation"], 1);

    // Restarted while it waited behind a running holder: its queued
    // deployment is retired as the restart records its own.
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    rig.command(&db, Command::Restart { from_step: None });
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    let of_b = rig.github.deployments_on(&b);
    assert_eq!(of_b.len(), 2, "{of_b:#?}");
    assert_eq!(of_b[0].states(), ["queued", "inactive"]);
    assert_eq!(
        of_b[0].latest().unwrap().description,
        "Not deployed: restarted by an operator, a new attempt replaces it."
    );
    assert_eq!(of_b[1].states(), ["queued"]);

    // From inside the gate too, the generation that queues again records
    // its own (the earlier one may already be terminal: never posted over).
    rig.command(
        &db,
        Command::Restart {
            from_step: Some("gate: enqueue".into()),
        },
    );
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    let of_b = rig.github.deployments_on(&b);
    assert_eq!(of_b.len(), 3, "one per generation: {of_b:#?}");
    assert_eq!(of_b[1].states(), ["queued", "inactive"]);
    assert_eq!(of_b[2].states(), ["queued"]);
}

/// A restart of a deploy that succeeded, from inside its gates, while a
/// newer one failed: the live success is never marked inactive by the new
/// generation's skip (its own deployment gets the skip).
#[test]
fn a_restart_from_the_gates_never_retires_a_live_success() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    rig.github.set_head(REPO, BRANCH, &b);
    let restart = Command::Restart {
        from_step: Some("gate: enter".into()),
    };
    rig.command(&da, restart);
    assert_eq!(
        rig.run_to_end(&da),
        Status::Skipped,
        "A is no longer the head"
    );
    let of_a = rig.github.deployments_on(&a);
    assert_eq!(of_a.len(), 2, "{of_a:#?}");
    assert_eq!(
        of_a[0].states(),
        ["queued", "in_progress", "success"],
        "the live success stays"
    );
    assert_eq!(of_a[1].latest().map(|s| s.state.as_str()), Some("inactive"));
}

/// A restart whose configuration no longer deploys: what the earlier
/// generation recorded is retired, not left queued.
#[test]
fn a_restart_that_deploys_nothing_retires_the_earlier_deployment() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig_timed(&[&a, &b], DEPLOY_TOML, 30 * MINUTE_MS);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.pass(&da).status, Status::Waiting);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.pass(&db).status, Status::Waiting);
    // The default branch drops its deploy section; B is restarted.
    rig.github.commit(REPO, &b, &[(".sluice.toml", CHECK_TOML)]);
    rig.command(&db, Command::Restart { from_step: None });
    assert_eq!(rig.pass(&db).status, Status::Skipped);
    assert_eq!(rig.row(&db).reason.as_deref(), Some("not-configured"));
    assert_eq!(
        rig.github.only_deployment(&b).states(),
        ["queued", "inactive"]
    );
}

/// A push of an older commit is a new deploy (its instance key names
/// `before`) and a new deployment of that commit: the environment's
/// history reads as what ran, and each success retires the one before.
#[test]
fn a_rollback_is_a_new_deployment_of_the_older_commit() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    let push = |s: &str, before: &str| {
        let input = DeployInput {
            repo: REPO.into(),
            branch: BRANCH.into(),
            sha: s.into(),
            installation_id: INSTALLATION,
            default_branch: BRANCH.into(),
            sender: "ana".into(),
            imperative: false,
            inputs: Default::default(),
            dispatch: None,
            needs_check: None,
        };
        rig.github.set_head(REPO, BRANCH, s);
        let i = rig.create(CreateRequest {
            indexed: false,
            key: format!("deploy:{REPO}:{BRANCH}:{}:{}", &s[..12], &before[..12]),
            run: "deploy".into(),
            input: json!(input),
            repo: Some(REPO.into()),
            entity: Some(format!("branch:{BRANCH}")),
            sha: Some(s.into()),
            max_steps: None,
            max_duration_ms: None,
        });
        assert_eq!(rig.run_to_end(&i), Status::Complete);
        i
    };
    let zero = "0".repeat(40);
    let first = push(&a, &zero);
    push(&b, &a);
    let rollback = push(&a, &b);
    assert_ne!(first.id, rollback.id);

    let of_a = rig.github.deployments_on(&a);
    assert_eq!(of_a.len(), 2, "{of_a:#?}");
    assert_eq!(of_a[0].execution(), Some(first.id.as_str()));
    assert_eq!(
        of_a[0].states(),
        ["queued", "in_progress", "success", "inactive"]
    );
    assert_eq!(of_a[1].execution(), Some(rollback.id.as_str()));
    assert_eq!(of_a[1].states(), ["queued", "in_progress", "success"]);
    assert_eq!(
        rig.github.only_deployment(&b).states(),
        ["queued", "in_progress", "success", "inactive"],
        "the rollback retired b"
    );
}

/// A dispatched deploy of an explicit revision (`POST /v1/dispatch`, a
/// rollback while the head moved on) is a new deployment of that commit:
/// its success retires the newer commit's, as what the environment runs.
#[test]
fn a_dispatched_rollback_is_a_new_deployment_of_its_revision() {
    let (a, b) = (sha('a'), sha('b'));
    let rig = deploy_rig(&[&a, &b], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    rig.github.set_head(REPO, BRANCH, &b);
    let db = rig.deploy(&b);
    assert_eq!(rig.run_to_end(&db), Status::Complete);

    // A was deployed from main: it is on the branch.
    rig.github.set_on_branch(REPO, BRANCH, &a);
    let body = json!({"run": "deploy", "repo": REPO, "sha": a});
    let req = sluice::http::dispatch::parse(body.to_string().as_bytes()).expect("valid");
    let registry = rig.registry();
    let proof = sluice::http::dispatch::Proof {
        signature_hex: "feedface",
        token: None,
    };
    let env = &registry.env;
    let create = block_on(sluice::http::dispatch::plan(
        &env.github,
        env.environments,
        &req,
        &proof,
    ))
    .expect("planned");
    let rollback = rig.create(create);
    assert_eq!(rig.run_to_end(&rollback), Status::Complete);

    let of_a = rig.github.deployments_on(&a);
    assert_eq!(of_a.len(), 2, "{of_a:#?}");
    assert_eq!(
        of_a[0].states(),
        ["queued", "in_progress", "success", "inactive"]
    );
    assert_eq!(of_a[1].execution(), Some(rollback.id.as_str()));
    assert_eq!(of_a[1].states(), ["queued", "in_progress", "success"]);
    assert_eq!(of_a[1].environment, BRANCH);
    assert_eq!(
        rig.github.only_deployment(&b).states(),
        ["queued", "in_progress", "success", "inactive"],
        "the rollback retired b, though b is the branch head"
    );
}

/// In a production environment GitHub's documented `auto_inactive` retires
/// nothing: each success retires the success it replaces itself, past the
/// deploys that failed in between, naming its own revision. A deployment of
/// another App in the environment is left alone.
#[test]
fn in_a_production_environment_a_success_retires_the_one_it_replaces() {
    let (a, b, c) = (sha('a'), sha('b'), sha('c'));
    let mut rig = Rig::new();
    rig.environments = Environments::parse(Some(FLAGGED_ENVIRONMENTS));
    rig.secrets.set("DEPLOY_TOKEN", "t0ken-value-123");
    for s in [&a, &b, &c] {
        rig.github
            .commit(REPO, s, &[(".sluice.toml", PRODUCTION_TOML)]);
    }
    let deploy = |s: &str, exit_code: i32| {
        rig.sandbox.st.borrow_mut().scripts.clear();
        rig.sandbox.script("./deploy.sh", exit_code, "deploying\n");
        rig.github.set_head(REPO, BRANCH, s);
        let i = rig.deploy(s);
        assert_eq!(rig.run_to_end(&i), Status::Complete);
    };
    deploy(&a, 0);
    rig.github
        .foreign_deployment(REPO, &a, "production", "someone-else");
    deploy(&b, 1);
    deploy(&c, 0);

    let a_dep = rig.github.only_deployment_of_ours(&a);
    assert_eq!(
        a_dep.states(),
        ["queued", "in_progress", "success", "inactive"]
    );
    let retired = a_dep.latest().unwrap();
    assert!(!retired.auto, "Sluice's, not GitHub's: {retired:?}");
    assert_eq!(
        retired.description,
        format!("Replaced: {c} was deployed after it.")
    );
    assert_eq!(
        rig.github.only_deployment(&b).states(),
        ["queued", "in_progress", "failure"]
    );
    assert_eq!(
        rig.github.only_deployment(&c).states(),
        ["queued", "in_progress", "success"]
    );
    let foreign = rig.github.all_deployments();
    assert!(foreign
        .iter()
        .any(|d| d.app_id != APP_ID.parse::<u64>().unwrap() && d.statuses.is_empty()));

    // A deploy later: it reads C's statuses, retires C, and stops there (A
    // was retired with C's success).
    let d = sha('d');
    rig.github
        .commit(REPO, &d, &[(".sluice.toml", PRODUCTION_TOML)]);
    let reads = rig.github.calls_to("list-deployment-statuses").len();
    deploy(&d, 0);
    assert_eq!(
        rig.github.only_deployment(&c).states(),
        ["queued", "in_progress", "success", "inactive"]
    );
    assert_eq!(
        rig.github.only_deployment_of_ours(&a).statuses.len(),
        4,
        "nothing more on A"
    );
    let scanned = rig.github.calls_to("list-deployment-statuses").len() - reads;
    assert_eq!(scanned, 3 + 1, "one read per status step of D, one of C");
}

#[test]
fn a_deployment_of_another_app_is_not_taken_for_ours() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], DEPLOY_TOML);
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    rig.github.foreign_deployment(REPO, &a, BRANCH, &da.id);
    rig.github.lose_answer_next("create-deployment");
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    let all = rig.github.deployments_on(&a);
    assert_eq!(all.len(), 2);
    let theirs = all
        .iter()
        .find(|d| d.app_id != APP_ID.parse::<u64>().unwrap())
        .unwrap();
    assert!(theirs.statuses.is_empty(), "untouched: {theirs:?}");
    let ours = all
        .iter()
        .find(|d| d.app_id == APP_ID.parse::<u64>().unwrap())
        .unwrap();
    assert_eq!(ours.states(), ["queued", "in_progress", "success"]);
}

/// An installation that has not granted `deployments` yet (an App upgraded
/// to ask for it): the deploy goes ahead, its checks and contents unharmed,
/// and the check run says why there is no deployment.
#[test]
fn an_installation_without_the_deployments_permission_still_deploys() {
    let a = sha('a');
    let rig = deploy_rig(&[&a], DEPLOY_TOML);
    rig.github.withhold("deployments");
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    assert!(rig.github.all_deployments().is_empty());
    assert_eq!(rig.sandbox.all_runs().len(), 1, "deployed");
    let run = rig.github.only_check_run(&a, "sluice/deploy");
    assert_eq!(run.conclusion.as_deref(), Some("success"));
    assert!(
        run.summary().contains("GitHub recorded no deployment")
            && run.summary().contains("deployments: write"),
        "{}",
        run.summary()
    );
    assert_eq!(
        rig.entry(&da, "create deployment").attempts,
        1,
        "a refusal is not retried"
    );
}

#[test]
fn environment_names_and_flags_come_from_the_configuration() {
    // A lane's label keeps two lanes of a branch apart; a transient
    // environment is marked so; a branch name is percent-encoded in the
    // lookup's query.
    let (m, r, x) = (sha('a'), sha('b'), sha('c'));
    let mut rig = Rig::new();
    rig.environments = Environments::parse(Some(FLAGGED_ENVIRONMENTS));
    let lane = "[deploy]\nbranch = \"main\"\ncommand = \"./deploy.sh\"\nlabel = \"canary\"\n";
    rig.github.commit(REPO, &m, &[(".sluice.toml", lane)]);
    rig.sandbox.script("./deploy.sh", 0, "ok\n");
    rig.github.set_head(REPO, BRANCH, &m);
    let dm = rig.deploy(&m);
    assert_eq!(rig.run_to_end(&dm), Status::Complete);
    assert_eq!(rig.github.only_deployment(&m).environment, "main (canary)");

    let preview = "[deploy]\nbranch = \"release/1.0\"\ncommand = \"./deploy.sh\"\n\
                   environment = \"preview\"\n";
    rig.github.commit(REPO, &r, &[(".sluice.toml", preview)]);
    rig.github.set_head(REPO, BRANCH, &r);
    rig.github.set_head(REPO, "release/1.0", &r);
    let dr = rig.deploy_pushed(REPO, "release/1.0", &r, None);
    assert_eq!(rig.run_to_end(&dr), Status::Complete);
    let p = rig.github.only_deployment(&r);
    assert_eq!(
        (p.environment.as_str(), p.transient, p.production),
        ("preview", true, false)
    );

    let odd = "feat/a#b?c";
    let config = format!("[deploy]\nbranch = \"{odd}\"\ncommand = \"./deploy.sh\"\n");
    rig.github.commit(REPO, &x, &[(".sluice.toml", &config)]);
    rig.github.set_head(REPO, BRANCH, &x);
    rig.github.set_head(REPO, odd, &x);
    let dx = rig.deploy_pushed(REPO, odd, &x, None);
    assert_eq!(rig.run_to_end(&dx), Status::Complete);
    assert_eq!(rig.github.only_deployment(&x).environment, odd);
    let lookups = rig.github.calls_to("list-deployments");
    assert!(
        lookups
            .iter()
            .any(|c| c.path.contains("&environment=feat%2Fa%23b%3Fc")),
        "{lookups:?}"
    );
}

#[test]
fn an_environment_is_production_or_transient_not_both() {
    let both = "[production]\nrepos = [\"octo/*\"]\nbranches = [\"main\"]\n\
                production = true\ntransient = true\n";
    let e = Environments::parse(Some(both));
    assert!(e.error().unwrap().contains("not both"), "{:?}", e.error());
    let typo = "[production]\nrepos = [\"octo/*\"]\nbranches = [\"main\"]\nproduction = \"yes\"\n";
    assert!(Environments::parse(Some(typo)).error().is_some());
}

/// Only a valid http(s) URL the command reports is published.
#[test]
fn an_environment_url_that_is_not_a_plain_http_url_is_not_published() {
    let a = sha('a');
    let rig = Rig::new();
    rig.github
        .commit(REPO, &a, &[(".sluice.toml", DEPLOY_TOML)]);
    rig.sandbox.script(
        "./deploy.sh",
        0,
        "SLUICE_ENVIRONMENT_URL=javascript:alert(document.cookie)\n",
    );
    rig.github.set_head(REPO, BRANCH, &a);
    let da = rig.deploy(&a);
    assert_eq!(rig.run_to_end(&da), Status::Complete);
    let d = rig.github.only_deployment(&a);
    assert_eq!(d.states(), ["queued", "in_progress", "success"]);
    assert_eq!(d.latest().unwrap().environment_url, None);
    assert!(rig.now() >= T0);
}
