//! The durable step engine: instances, journal, replay, retries, timers,
//! events and ceilings.
//!
//! Architecture invariant: nothing here knows `worker`; the engine reaches
//! storage, the index and time only through `JournalStore`, `Database` and
//! `Clock`, so every rule is tested natively against real SQLite.

pub mod config;
pub mod context;
pub mod driver;
pub mod error;
pub mod executor;
pub mod id;
pub mod row;

pub use crate::clock::Clock;
pub use crate::journal::Status;
pub use config::{Backoff, StepConfig};
pub use context::{BoxedBody, Ctx, Interrupt, InterruptFlag, PassStats};
pub use error::{RunError, StepFailure};
pub use executor::{
    index_creates, Command, CommandError, CreateRequest, Created, Ended, Engine, PassResult,
    RestartRequest, RunOutcome, RunRegistry, TOMBSTONE_KEPT_MS,
};
pub use id::InstanceId;
