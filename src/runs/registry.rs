//! Every run, registered once. A run is a type implementing [`Run`]: its
//! name, its input type, the check run it reports through, and whether it
//! holds the gates. The registry maps a name to the run and erases the
//! input type, so the engine sees runs as names and JSON.
//!
//! Adding a run: write `src/runs/<name>.rs` with a unit struct implementing
//! `Run`, add its `RunName` variant and one arm to `run_of`.

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::engine::{Ctx, RestartRequest, RunError, RunOutcome, RunRegistry, Status};

use super::metered::Metered;
use super::{check, deploy, gate, probe, release, report, schedule, RunEnv};

/// The runs Sluice has, by the name instances are created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunName {
    Check,
    Deploy,
    Probe,
    /// Records the default branch's `[[schedule]]` (`runs::schedule`).
    Schedules,
    /// A pushed tag's notes and release, approved by a person
    /// (`runs::release`).
    ReleaseNotes,
}

impl RunName {
    pub const ALL: [RunName; 5] = [
        RunName::Check,
        RunName::Deploy,
        RunName::Probe,
        RunName::Schedules,
        RunName::ReleaseNotes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunName::Check => "check",
            RunName::Deploy => "deploy",
            RunName::Probe => "probe",
            RunName::Schedules => "schedules",
            RunName::ReleaseNotes => "release-notes",
        }
    }

    pub fn parse(s: &str) -> Option<RunName> {
        RunName::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// The check run a run reports through, named from its input.
pub struct CheckRunOf {
    pub name: &'static str,
    pub installation_id: u64,
    pub repo: String,
    pub sha: String,
}

/// One run.
#[async_trait(?Send)]
pub trait Run {
    const NAME: RunName;
    /// Whether it touches a sandbox through the gates: then finalize
    /// releases them (killing its process first) and a restart re-enters
    /// them (`gate::prepare_restart`).
    const GATED: bool;
    type Input: DeserializeOwned + Serialize;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &Self::Input,
    ) -> Result<RunOutcome, RunError>;

    /// The check run it reports through, so one an instance left open when
    /// it ended from outside (terminated, a crash loop) is concluded.
    fn check_run(&self, _input: &Self::Input) -> Option<CheckRunOf> {
        None
    }

    /// After it ended from outside (terminated, a crash loop), beyond its
    /// check run: what else it left open (a deploy's GitHub deployment).
    /// Best effort, as the check run's conclusion.
    async fn abandoned(
        &self,
        _env: &RunEnv<'_>,
        _instance_id: &str,
        _input: &Self::Input,
        _status: Status,
    ) {
    }

    /// Before an operator's restart: the gates' rules, unless the run adds
    /// its own (a deploy's confirmation).
    async fn prepare_restart(
        &self,
        env: &RunEnv<'_>,
        req: &RestartRequest<'_>,
    ) -> Result<u32, String> {
        if Self::GATED {
            gate::prepare_restart(env, req).await
        } else {
            Ok(req.from_seq)
        }
    }
}

/// A run with its input type erased.
#[async_trait(?Send)]
trait AnyRun {
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
}

struct Erased<R>(R);

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
impl<R: Run> AnyRun for Erased<R> {
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
        let released = if R::GATED {
            gate::finalize(env, instance_id).await
        } else {
            Ok(())
        };
        if matches!(status, Status::Terminated | Status::Errored) {
            if let Ok(i) = decode::<R::Input>(input) {
                if let Some(c) = self.0.check_run(&i) {
                    report::conclude_abandoned(env, &c, instance_id, status).await;
                }
                self.0.abandoned(env, instance_id, &i, status).await;
            }
        }
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
}

/// Whether an operator's create request names a run and gives exactly its
/// input; checked before the instance exists (`POST /v1/executions`).
pub fn check_create(run: &str, input: &Value) -> Result<(), String> {
    let name = RunName::parse(run).ok_or_else(|| unknown(run).to_string())?;
    run_of(name)
        .check_input(input)
        .map_err(|m| format!("input of run `{run}`: {m}"))
}

/// The one place a name meets its run.
fn run_of(name: RunName) -> &'static dyn AnyRun {
    match name {
        RunName::Check => &Erased(check::CheckRun),
        RunName::Deploy => &Erased(deploy::DeployRun),
        RunName::Probe => &Erased(probe::ProbeRun),
        RunName::Schedules => &Erased(schedule::SchedulesRun),
        RunName::ReleaseNotes => &Erased(release::ReleaseNotesRun),
    }
}

/// The registered runs with the services they use: what the engine calls.
pub struct Registry<'a> {
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

#[async_trait(?Send)]
impl RunRegistry for Registry<'_> {
    async fn execute(
        &self,
        run: &str,
        ctx: &Ctx<'_>,
        input: &Value,
    ) -> Result<RunOutcome, RunError> {
        let name = RunName::parse(run).ok_or_else(|| unknown(run))?;
        match self.meter {
            Some(meter) => {
                let metered = Metered::new(&self.env, meter);
                run_of(name)
                    .execute(ctx, &metered.env(&self.env), input)
                    .await
            }
            None => run_of(name).execute(ctx, &self.env, input).await,
        }
    }

    async fn finalize(
        &self,
        run: &str,
        instance_id: &str,
        input: &Value,
        status: Status,
    ) -> Result<(), String> {
        let name = RunName::parse(run).ok_or_else(|| unknown(run).to_string())?;
        match self.meter {
            Some(meter) => {
                let metered = Metered::new(&self.env, meter);
                run_of(name)
                    .finalize(&metered.env(&self.env), instance_id, input, status)
                    .await
            }
            None => {
                run_of(name)
                    .finalize(&self.env, instance_id, input, status)
                    .await
            }
        }
    }

    async fn prepare_restart(&self, run: &str, req: &RestartRequest<'_>) -> Result<u32, String> {
        let name = RunName::parse(run).ok_or_else(|| unknown(run).to_string())?;
        run_of(name).prepare_restart(&self.env, req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_create_naming_a_clone_url_is_refused() {
        let check = json!({"repo": "octo/hello", "sha": "a".repeat(40),
                           "installation_id": 1, "pr_number": 2});
        assert_eq!(check_create("check", &check), Ok(()));
        let mut evil = check.clone();
        evil["clone_url"] = json!("https://attacker.example/x.git");
        let refused = check_create("check", &evil).unwrap_err();
        assert!(refused.contains("`clone_url`"), "{refused}");
        assert!(check_create("nope", &check).is_err());
        assert!(check_create("probe", &json!({"steps": 2})).is_ok());
    }
}
