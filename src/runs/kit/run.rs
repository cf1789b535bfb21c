//! What a run is: a type implementing [`Run`], known by a [`RunName`].
//! Its capabilities (re-run, dispatch, schedule) are constants on the
//! trait, so the edge asks the registry instead of matching names.

use std::fmt;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::engine::{Ctx, RestartRequest, RunError, RunOutcome, Status};

use super::gate;
use super::report::CheckRunOf;
use super::RunEnv;

/// A run's name, as instances are created with it (`CreateRequest.run`).
/// Each run declares its own (`Run::NAME`); `edge::registry` is the one
/// place a name meets its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RunName(&'static str);

impl RunName {
    pub const fn new(name: &'static str) -> RunName {
        RunName(name)
    }

    pub const fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for RunName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl PartialEq<str> for RunName {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for RunName {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// One run.
#[async_trait(?Send)]
pub trait Run {
    const NAME: RunName;
    /// The name of the check run it reports through, if any (what
    /// GitHub's Re-run on that check run is matched by).
    const CHECK_RUN: Option<&'static str> = None;
    /// Whether GitHub's Re-run (of its check run or the commit's suite)
    /// makes a fresh attempt of it (`edge::triggers::rerun_create`).
    const RERUNNABLE: bool = false;
    /// Whether `POST /v1/dispatch` may start it.
    const DISPATCHABLE: bool = false;
    /// Whether a `[[schedule]]` may start it (`kit::schedule::SCHEDULABLE_RUNS`
    /// lists the same runs for the config's validation).
    const SCHEDULABLE: bool = false;
    /// Whether it is Sluice's own bookkeeping (recording a repository's
    /// schedules), not work a person or a push asked for: the dashboard
    /// lists its instances apart from the runs users asked for.
    const BOOKKEEPING: bool = false;
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

    /// Whether a check run named `name` is one it reports through (what
    /// GitHub's Re-run on a check run is matched by).
    fn reports_as(name: &str) -> bool {
        Self::CHECK_RUN == Some(name)
    }

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

    /// After it ended, however it ended, once the engine mirrored its end
    /// to the index (a mirror that failed is retried by the instance's
    /// alarm or the sweep, and the one told waits for it): whom to
    /// tell (a check wakes the run that waits for it). Best effort; the
    /// one told reads the index, so a duplicate costs a read.
    async fn ended(
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
