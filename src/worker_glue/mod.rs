//! The Worker glue: bindings, the platform implementations of Sluice's
//! interfaces (D1, Durable Object storage, fetch, WebCrypto, R2, time),
//! the run instance Durable Object, and the fetch and scheduled handlers.
//!
//! Architecture invariant: this is the only module that names `worker::`
//! types; it holds no decisions, only the carrying out of decisions made
//! in `engine`, `runs` and `http`.

pub mod archives;
pub mod bindings;
pub mod compose;
pub mod container;
pub mod instance;
pub mod instances;
pub mod platform;
pub mod router;
pub mod scheduled;
pub mod setup;
