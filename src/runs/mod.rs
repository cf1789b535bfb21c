//! The runs, in three storeys, each importing only the ones below it
//! (tests/tidy.rs `runs_are_built_in_storeys`):
//! - `kit`: what every run shares, naming no run (services, the `Run`
//!   trait, inputs and keys, config, commands, approvals, gates, reports);
//! - `run`: the runs (check, deploy, probe, release notes, schedules),
//!   each a short list of steps on the kit;
//! - `edge`: where runs meet the world (the registry, the one place a name
//!   meets its run; trigger planning; the schedule firer; the sweep).
//!
//! The re-exports below keep the paths the rest of the crate uses.

pub mod edge;
pub mod kit;
pub mod run;

pub use edge::{registry, sweep, triggers};
pub use kit::{
    approval, command, config, configured, configured_at, deployment, environment, gate, inputs,
    key, log, loglink, metered, needs, notify, pipeline, report, schedule, tags, unless_ignored,
    Configured, NotifyTarget, RunEnv, SecretSource, Spawner, Termination, Terminator, Waker,
    NOT_CONFIGURED,
};
pub use kit::{Run, RunName};
pub use registry::Registry;
pub use run::{check, deploy, probe, release};
