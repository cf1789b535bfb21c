//! ARCHITECTURE.md's "How to add a run", followed for a toy run: its file
//! (here, this test: an input, a unit struct implementing `Run`, a body of
//! steps on the kit), its line in the registry's list, and its test. The
//! run is created, driven by the real engine over the rig's fakes through
//! a registry holding `RUNS` plus its line, and ends with its steps'
//! result; the production registry, without the line, refuses it.

mod common;

use async_trait::async_trait;
use common::block_on;
use common::fakes::*;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sluice::engine::{CreateRequest, Ctx, RunError, RunOutcome, RunRegistry, Status, StepConfig};
use sluice::runs::registry::{self, Entry, Registered, Registry, RUNS};
use sluice::runs::{Run, RunEnv, RunName};

/// Step 1: the run's file. Its input, decided where the instance is made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct GreetInput {
    name: String,
}

/// The run: reads the clock in one durable step, greets in another.
struct GreetRun;

#[async_trait(?Send)]
impl Run for GreetRun {
    const NAME: RunName = RunName::new("greet");
    const GATED: bool = false;
    type Input = GreetInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &GreetInput,
    ) -> Result<RunOutcome, RunError> {
        let at: i64 = ctx
            .step("read the clock", StepConfig::default(), |_| async {
                Ok(env.clock.now_ms())
            })
            .await?;
        let greeting: String = ctx
            .step("greet", StepConfig::default(), |_| async {
                Ok(format!("hello, {}", input.name))
            })
            .await?;
        Ok(RunOutcome::Complete(
            json!({ "greeting": greeting, "at": at }),
        ))
    }
}

/// Step 2: its line in the registry's list (in `src/runs/edge/registry.rs`
/// it is one more `&Registered(GreetRun)` in `RUNS`).
static GREET: Registered<GreetRun> = Registered(GreetRun);

fn runs_with_greet() -> Vec<Entry> {
    let mut runs = RUNS.to_vec();
    runs.push(&GREET);
    runs
}

/// Step 3: its test.
#[test]
fn a_run_added_by_its_file_and_one_registry_line_runs_to_its_end() {
    let rig = Rig::new();
    let runs = runs_with_greet();
    let registry = Registry {
        runs: &runs,
        ..rig.registry()
    };
    let inst = rig.create(CreateRequest {
        indexed: false,
        key: "greet:octo/hello:ana".into(),
        run: GreetRun::NAME.as_str().into(),
        input: json!({ "name": "ana" }),
        repo: Some(REPO.into()),
        entity: None,
        sha: None,
        max_steps: None,
        max_duration_ms: None,
    });
    let pass = block_on(inst.world.engine().pass(&registry, &inst.world.interrupt)).unwrap();
    assert_eq!(pass.status, Status::Complete);
    let record = inst.world.engine().record().unwrap().unwrap();
    let output: serde_json::Value = serde_json::from_str(&record.output.unwrap()).unwrap();
    assert_eq!(output["greeting"], "hello, ana");
    let steps = inst.world.journal_names();
    assert_eq!(steps, ["read the clock", "greet"]);
}

#[test]
fn without_its_registry_line_a_run_is_unknown() {
    let rig = Rig::new();
    let refused = block_on(rig.registry().finalize(
        "greet",
        "greet-1",
        &json!({ "name": "ana" }),
        Status::Complete,
    ));
    assert!(refused.unwrap_err().contains("greet"));
    assert!(registry::validate_create("greet", &json!({ "name": "ana" })).is_err());
    assert!(registry::names().all(|n| n != "greet"));
}
