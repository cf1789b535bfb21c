//! The durable step engine: instances, journal, replay, retries, timers,
//! events and ceilings.
//!
//! Architecture invariant: nothing here knows `worker`; the engine reaches
//! storage, the index and time only through `JournalStore`, `Database` and
//! `Clock`, so every rule is tested natively against real SQLite.

pub mod clock;
pub mod config;
pub mod context;
pub mod error;
pub mod executor;
pub mod id;
pub mod journal;
pub mod status;

pub use clock::Clock;
pub use config::{Backoff, StepConfig};
pub use context::{Ctx, Interrupt, InterruptFlag, PassStats};
pub use error::{RunError, StepFailure};
pub use executor::{
    Command, CommandError, CreateRequest, Created, Engine, PassResult, RestartRequest, RunOutcome,
    RunRegistry,
};
pub use id::InstanceId;
pub use status::Status;
