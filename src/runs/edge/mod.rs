//! Where runs meet the world: the registry (the one place a run's name
//! meets its run), trigger planning (which event starts which run, named
//! how), the schedule firer and the sweep. Imports the runs and the kit.

pub mod previews;
pub mod registry;
pub mod scheduler;
pub mod sweep;
pub mod triggers;
