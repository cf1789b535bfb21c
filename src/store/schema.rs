//! What the database holds: the tables `GET /v1/setup` checks against the
//! migrations (a database the migrations never ran on has none of them).

use serde_json::Value;

use super::sql::{Database, StoreError};
use crate::stmt;

/// The names of the tables in the database.
pub async fn tables(db: &dyn Database) -> Result<Vec<String>, StoreError> {
    let rows = db
        .all(stmt!("SELECT name FROM sqlite_master WHERE type = 'table'"))
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| r.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect())
}
