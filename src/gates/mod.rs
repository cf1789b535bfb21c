//! Gates an execution passes before its run body touches a container, in
//! this order (ADR-0004): the serial queue (one holder per group, newest
//! waiter wins), pool admission (bounded containers per pool), the
//! container lease (one user per sandbox). All three are D1 tables
//! (migrations/0003_gates.sql) claimed by one conditional statement each.
//!
//! Architecture invariant: decisions and SQL only. Gates do no I/O but
//! `store::Database`, never read a clock (`now_ms` is an argument) and know
//! no `worker` types; the engine calls them inside durable steps, so every
//! operation is safe to replay.
//! (ADR-0004: docs/adr/0004-serialized-run-groups.md)

pub mod admission;
pub mod fence;
pub mod lease;
pub mod policy;
pub mod serial;
pub mod sweep;

pub use policy::{Current, QueuePolicy, SkipReason};
