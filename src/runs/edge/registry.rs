//! Every run, registered once. A run is a type implementing
//! `kit::run::Run`: its name, its input type, the check run it reports
//! through, whether it holds the gates, and what may start it again (a
//! re-run, a dispatch, a schedule). The registry maps a name to the run and
//! erases the input type, so the engine sees runs as names and JSON.
//!
//! Adding a run: write `src/runs/run/<name>.rs` with a unit struct
//! implementing `Run`, and add one line to `RUNS` (ARCHITECTURE.md, "How to
//! add a run").

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::engine::{Ctx, RestartRequest, RunError, RunOutcome, RunRegistry, Status};

use crate::runs::kit::metered::Metered;
use crate::runs::kit::run::{Run, RunName};
use crate::runs::kit::{gate, report, RunEnv};
use crate::runs::run::{check, deploy, preview, probe, release, schedules};

/// A run with its input type erased: what the registry holds.
#[async_trait(?Send)]
pub trait AnyRun {
    async fn execute(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError>;
    async fn finalize(
        &self,
        env: &RunEnv<'_>,
        instance_id: &str,
        input: &Value,
        status: Status,
    ) -> Result<(), String>;
    async fn prepare_restart(
        &self,
        env: &RunEnv<'_>,
        req: &RestartRequest<'_>,
    ) -> Result<u32, String>;
    fn check_input(&self, input: &Value) -> Result<(), String>;
    fn name(&self) -> RunName;
    fn capabilities(&self) -> Capabilities;
    /// The name of the check run it reports through (a run without one
    /// answers None).
    /// Whether it reports through the check run named `name`.
    fn reports_as(&self, name: &str) -> bool;
}

/// What may start a run besides its triggers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    pub rerunnable: bool,
    pub dispatchable: bool,
    pub schedulable: bool,
    /// Sluice's own bookkeeping, listed apart (`Run::BOOKKEEPING`).
    pub bookkeeping: bool,
}

/// A run as the registry holds it (`Registered(MyRun)` in `RUNS`).
pub struct Registered<R>(pub R);

/// Whether `input` is exactly a `T`: it decodes, and names no field `T`
/// does not have (a field like `clone_url` would otherwise be dropped in
/// silence, and its sender believe it was used).
fn check_exact<T: DeserializeOwned + Serialize>(input: &Value) -> Result<(), String> {
    let decoded: T = serde_json::from_value(input.clone()).map_err(|e| e.to_string())?;
    let known = serde_json::to_value(&decoded).map_err(|e| e.to_string())?;
    let (Some(given), Some(known)) = (input.as_object(), known.as_object()) else {
        return Ok(());
    };
    match given.keys().find(|k| !known.contains_key(*k)) {
        None => Ok(()),
        Some(k) => Err(format!("unknown input field `{k}`")),
    }
}

fn decode<T: DeserializeOwned>(input: &Value) -> Result<T, RunError> {
    serde_json::from_value(input.clone()).map_err(|e| RunError::InvalidInput {
        message: e.to_string(),
    })
}

#[async_trait(?Send)]
impl<R: Run> AnyRun for Registered<R> {
    async fn execute(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError> {
        self.0.run(ctx, env, &decode(input)?).await
    }

    /// Releases what the instance still holds and, when it ended from
    /// outside, concludes the check run it left open (so it does not block
    /// a merge as `in_progress` for ever) and whatever else the run left
    /// open (`Run::abandoned`).
    async fn finalize(
        &self,
        env: &RunEnv<'_>,
        instance_id: &str,
        input: &Value,
        status: Status,
    ) -> Result<(), String> {
        let release = || async {
            match R::GATED {
                true => gate::finalize(env, instance_id).await,
                false => Ok(()),
            }
        };
        let Ok(i) = decode::<R::Input>(input) else {
            return release().await;
        };
        if status == Status::Complete {
            // Its end is in the index and its own steps released its gates:
            // whoever waits for it hears of it before the sandbox's cleanup
            // (a job's end -> its dependent's start).
            self.0.ended(env, instance_id, &i, status).await;
            return release().await;
        }
        let released = release().await;
        if matches!(status, Status::Terminated | Status::Errored) {
            if let Some(c) = self.0.check_run(&i) {
                report::conclude_abandoned(env, &c, instance_id, status).await;
            }
            self.0.abandoned(env, instance_id, &i, status).await;
        }
        self.0.ended(env, instance_id, &i, status).await;
        released
    }

    async fn prepare_restart(
        &self,
        env: &RunEnv<'_>,
        req: &RestartRequest<'_>,
    ) -> Result<u32, String> {
        self.0.prepare_restart(env, req).await
    }

    fn check_input(&self, input: &Value) -> Result<(), String> {
        check_exact::<R::Input>(input)
    }

    fn name(&self) -> RunName {
        R::NAME
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            rerunnable: R::RERUNNABLE,
            dispatchable: R::DISPATCHABLE,
            schedulable: R::SCHEDULABLE,
            bookkeeping: R::BOOKKEEPING,
        }
    }

    fn reports_as(&self, name: &str) -> bool {
        R::reports_as(name)
    }
}

/// One registered run.
pub type Entry = &'static (dyn AnyRun + Sync);

/// Every run: the one place a name meets its run. Adding a run adds a
/// line here.
pub static RUNS: [Entry; 9] = [
    &Registered(check::CheckRun),
    &Registered(check::cancel::CancelChecksRun),
    &Registered(deploy::DeployRun),
    &Registered(probe::ProbeRun),
    &Registered(schedules::SchedulesRun),
    &Registered(release::ReleaseNotesRun),
    &Registered(preview::PreviewRun),
    &Registered(preview::teardown::PreviewTeardownRun),
    &Registered(preview::reconcile::PreviewReconcileRun),
];

/// The run named `name` in `runs`, if there is one.
fn named_in(runs: &[Entry], name: &str) -> Option<Entry> {
    runs.iter().find(|r| r.name() == name).copied()
}

/// The run named `name`, if Sluice has one.
fn run_named(name: &str) -> Option<Entry> {
    named_in(&RUNS, name)
}

fn run_of(run: &str) -> Result<Entry, RunError> {
    run_named(run).ok_or_else(|| unknown(run))
}

/// The name of every run Sluice has.
pub fn names() -> impl Iterator<Item = RunName> {
    RUNS.iter().map(|r| r.name())
}

/// What may start the run named `name` again, if Sluice has it.
pub fn capabilities(name: &str) -> Option<Capabilities> {
    run_named(name).map(|r| r.capabilities())
}

/// `name` as a run GitHub's Re-run repeats, or None.
pub fn rerunnable(name: &str) -> Option<RunName> {
    run_named(name)
        .filter(|r| r.capabilities().rerunnable)
        .map(|r| r.name())
}

/// `name` as a run `POST /v1/dispatch` may start, or None.
pub fn dispatchable(name: &str) -> Option<RunName> {
    run_named(name)
        .filter(|r| r.capabilities().dispatchable)
        .map(|r| r.name())
}

/// The runs that are Sluice's own bookkeeping (`Run::BOOKKEEPING`): the
/// dashboard lists their instances apart.
pub fn bookkeeping() -> impl Iterator<Item = RunName> {
    RUNS.iter()
        .filter(|r| r.capabilities().bookkeeping)
        .map(|r| r.name())
}

/// Whether a check run named `check_run` reports a run that GitHub's
/// Re-run repeats.
pub fn rerunnable_by_check_run(check_run: &str) -> bool {
    RUNS.iter()
        .any(|r| r.capabilities().rerunnable && r.reports_as(check_run))
}

/// Whether an operator's create request names a run and gives exactly its
/// input; checked before the instance exists (`POST /v1/executions`).
pub fn validate_create(run: &str, input: &Value) -> Result<(), String> {
    run_of(run)
        .map_err(|e| e.to_string())?
        .check_input(input)
        .map_err(|m| format!("input of run `{run}`: {m}"))
}

/// The registered runs with the services they use: what the engine calls.
pub struct Registry<'a> {
    /// The runs it knows: `RUNS` (a test adds its own, as
    /// ARCHITECTURE.md's "How to add a run" is checked).
    pub runs: &'a [Entry],
    pub env: RunEnv<'a>,
    /// The instance's cost meter: with one, every D1, R2, GitHub and
    /// sandbox call a run makes is counted into it (`runs::metered`).
    pub meter: Option<&'a crate::cost::Meter>,
}

fn unknown(run: &str) -> RunError {
    RunError::UnknownRun {
        run: run.to_owned(),
    }
}

impl Registry<'_> {
    fn run_of(&self, run: &str) -> Result<Entry, RunError> {
        named_in(self.runs, run).ok_or_else(|| unknown(run))
    }
}

#[async_trait(?Send)]
impl RunRegistry for Registry<'_> {
    async fn execute(
        &self,
        run: &str,
        ctx: &Ctx<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError> {
        let run = self.run_of(run)?;
        match self.meter {
            Some(meter) => {
                let metered = Metered::new(&self.env, meter);
                run.execute(ctx, &metered.env(&self.env), input).await
            }
            None => run.execute(ctx, &self.env, input).await,
        }
    }

    async fn finalize(
        &self,
        run: &str,
        instance_id: &str,
        input: &Value,
        status: Status,
    ) -> Result<(), String> {
        let run = self.run_of(run).map_err(|e| e.to_string())?;
        match self.meter {
            Some(meter) => {
                let metered = Metered::new(&self.env, meter);
                run.finalize(&metered.env(&self.env), instance_id, input, status)
                    .await
            }
            None => run.finalize(&self.env, instance_id, input, status).await,
        }
    }

    async fn prepare_restart(&self, run: &str, req: &RestartRequest<'_>) -> Result<u32, String> {
        let run = self.run_of(run).map_err(|e| e.to_string())?;
        run.prepare_restart(&self.env, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::kit::schedule::SCHEDULABLE_RUNS;
    use serde_json::json;

    #[test]
    fn every_run_is_registered_once_and_schedules_name_the_schedulable_runs() {
        let all: Vec<RunName> = names().collect();
        for (i, n) in all.iter().enumerate() {
            assert!(!all[i + 1..].contains(n), "{n} registered twice");
        }
        let schedulable: Vec<&str> = RUNS
            .iter()
            .filter(|r| r.capabilities().schedulable)
            .map(|r| r.name().as_str())
            .collect();
        assert_eq!(schedulable, SCHEDULABLE_RUNS);
        assert_eq!(rerunnable("check"), Some(check::CheckRun::NAME));
        assert_eq!(rerunnable("probe"), None);
        assert!(rerunnable_by_check_run(deploy::DEPLOY_CHECK_NAME));
        assert!(!rerunnable_by_check_run(release::RELEASE_CHECK_NAME));
        assert_eq!(dispatchable("release-notes"), None);
    }

    #[test]
    fn a_create_naming_a_clone_url_is_refused() {
        let check = json!({"repo": "octo/hello", "sha": "a".repeat(40),
                           "installation_id": 1, "pr_number": 2});
        assert_eq!(validate_create("check", &check), Ok(()));
        let mut evil = check.clone();
        evil["clone_url"] = json!("https://attacker.example/x.git");
        let refused = validate_create("check", &evil).unwrap_err();
        assert!(refused.contains("`clone_url`"), "{refused}");
        assert!(validate_create("nope", &check).is_err());
        assert!(validate_create("probe", &json!({"steps": 2})).is_ok());
    }
}
