//! The database interface Sluice's logic is written against, with the SQL
//! itself. Implementations: D1 and Durable Object storage in
//! `worker_glue::platform`, SQLite via `rusqlite` here (native tests), all
//! running the same `migrations/*.sql`.
//!
//! Architecture invariant: SQL lives here and next to the function that binds
//! it (`store::executions`, `gates::*`); no other module builds SQL strings.

pub mod artifacts;
pub mod caches;
pub mod dispatch;
pub mod executions;
pub mod journal;
pub mod journal_tables;
pub mod metered;
pub mod previews;
pub mod releases;
pub mod schedules;
pub mod schema;
pub mod sql;

#[cfg(not(target_arch = "wasm32"))]
pub mod sqlite;

pub use sql::{Database, Param, Row, Stmt, StoreError, SyncSql, Usage};
