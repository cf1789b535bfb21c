//! The database interface Sluice's logic is written against, and its two
//! implementations: D1 (in the Worker) and SQLite via `rusqlite` (native
//! tests), both running the same `migrations/*.sql`.
//!
//! Architecture invariant: SQL lives here and next to the function that binds
//! it (`store::executions`, `gates::*`); no other module builds SQL strings.

pub mod executions;
pub mod journal;
pub mod sql;

#[cfg(not(target_arch = "wasm32"))]
pub mod sqlite;

#[cfg(target_arch = "wasm32")]
pub mod d1;

pub use sql::{Database, Param, Row, Stmt, StoreError, SyncSql};
