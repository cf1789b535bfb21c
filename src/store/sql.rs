//! Statements, parameters and rows shared by D1, a Durable Object's SQLite
//! storage and native SQLite. Parameters use `?1`-style placeholders, which
//! all three accept.

use std::borrow::Cow;
use std::fmt;

use async_trait::async_trait;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// One result row, column name to value.
pub type Row = Map<String, Value>;

#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}
impl From<u32> for Param {
    fn from(v: u32) -> Self {
        Param::Int(i64::from(v))
    }
}
impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Param::Text(v.to_owned())
    }
}
impl From<String> for Param {
    fn from(v: String) -> Self {
        Param::Text(v)
    }
}
impl From<&String> for Param {
    fn from(v: &String) -> Self {
        Param::Text(v.clone())
    }
}
impl<T: Into<Param>> From<Option<T>> for Param {
    fn from(v: Option<T>) -> Self {
        v.map_or(Param::Null, Into::into)
    }
}

/// A statement and its bound parameters.
#[derive(Debug, Clone)]
pub struct Stmt {
    pub sql: Cow<'static, str>,
    pub params: Vec<Param>,
}

impl Stmt {
    pub fn new(sql: impl Into<Cow<'static, str>>, params: Vec<Param>) -> Stmt {
        Stmt {
            sql: sql.into(),
            params,
        }
    }
}

/// Builds a `Stmt` from SQL and any parameters convertible to `Param`.
#[macro_export]
macro_rules! stmt {
    ($sql:expr $(, $p:expr)* $(,)?) => {
        $crate::store::Stmt::new($sql, vec![$($crate::store::Param::from($p)),*])
    };
}

#[derive(Debug, Clone, PartialEq)]
pub enum StoreError {
    /// The database refused or failed the statement.
    Query(String),
    /// A row did not have the shape the caller expected.
    Decode(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Query(m) => write!(f, "database error: {m}"),
            StoreError::Decode(m) => write!(f, "unexpected row shape: {m}"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Rows a statement read and wrote, as the database reports them for
/// billing: D1's and Durable Object storage's `rows_read`/`rows_written`
/// in the Worker (index writes and scanned rows included); natively the
/// rows returned and the rows changed, a lower bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub rows_read: u64,
    pub rows_written: u64,
}

/// The shared index (D1 in the Worker): asynchronous, one round trip a call.
#[async_trait(?Send)]
pub trait Database {
    /// Runs a query and returns its rows.
    async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError>;
    /// Runs a write and returns how many rows it changed (D1's `meta.changes`).
    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError>;
    /// Runs statements as one transaction: all apply or none do. Returns the
    /// changes of each statement.
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError>;

    /// `all` with what it cost; by default the rows returned count as read.
    async fn all_counted(&self, stmt: Stmt) -> Result<(Vec<Row>, Usage), StoreError> {
        let rows = self.all(stmt).await?;
        let rows_read = rows.len() as u64;
        Ok((
            rows,
            Usage {
                rows_read,
                rows_written: 0,
            },
        ))
    }
    /// `run` with what it cost; by default the rows changed count as written.
    async fn run_counted(&self, stmt: Stmt) -> Result<(u64, Usage), StoreError> {
        let changes = self.run(stmt).await?;
        Ok((
            changes,
            Usage {
                rows_read: 0,
                rows_written: changes,
            },
        ))
    }
    /// `batch` with what it cost.
    async fn batch_counted(&self, stmts: Vec<Stmt>) -> Result<(Vec<u64>, Usage), StoreError> {
        let changes = self.batch(stmts).await?;
        let rows_written = changes.iter().sum();
        Ok((
            changes,
            Usage {
                rows_read: 0,
                rows_written,
            },
        ))
    }
}

/// An instance's own storage (a Durable Object's SQLite): synchronous, as
/// `state.storage().sql()` is, and local to the executor.
pub trait SyncSql {
    fn exec(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError>;

    /// `exec` with what it cost; by default the rows returned count as
    /// read and a statement returning none as one row written.
    fn exec_counted(&self, sql: &str, params: &[Param]) -> Result<(Vec<Row>, Usage), StoreError> {
        let rows = self.exec(sql, params)?;
        let usage = match rows.len() {
            0 => Usage {
                rows_read: 0,
                rows_written: 1,
            },
            n => Usage {
                rows_read: n as u64,
                rows_written: 0,
            },
        };
        Ok((rows, usage))
    }
}

/// Whether a statement yields rows: a query, or a write that returns some
/// (`RETURNING`). A storage may skip reading back a statement that does not.
pub fn returns_rows(sql: &str) -> bool {
    let head = sql.trim_start();
    let starts = |k: &str| {
        head.get(..k.len())
            .is_some_and(|h| h.eq_ignore_ascii_case(k))
    };
    ["SELECT", "WITH", "PRAGMA", "VALUES"]
        .iter()
        .any(|k| starts(k))
        || sql
            .as_bytes()
            .windows("RETURNING".len())
            // The first byte alone rules out almost every window: a step's
            // write scanned its 300 bytes a letter-case comparison each,
            // 4% of the step's CPU.
            .any(|w| matches!(w[0], b'R' | b'r') && w.eq_ignore_ascii_case(b"RETURNING"))
}

/// Decodes rows into a typed shape.
pub fn decode<T: DeserializeOwned>(rows: Vec<Row>) -> Result<Vec<T>, StoreError> {
    rows.into_iter().map(decode_row).collect()
}

pub fn decode_row<T: DeserializeOwned>(row: Row) -> Result<T, StoreError> {
    serde_json::from_value(Value::Object(normalize(row)))
        .map_err(|e| StoreError::Decode(e.to_string()))
}

/// JavaScript hands integers back as floats; make whole floats integers so
/// typed rows decode the same from D1 and from SQLite.
fn normalize(row: Row) -> Row {
    row.into_iter()
        .map(|(k, v)| {
            let v = match v {
                Value::Number(n) if n.is_f64() => match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
                    _ => Value::Number(n),
                },
                other => other,
            };
            (k, v)
        })
        .collect()
}

/// Splits a migration file into statements, dropping `--` comments. Used to
/// apply the very same files natively that `wrangler d1 migrations apply`
/// applies to D1.
pub fn split_statements(sql: &str) -> Vec<String> {
    let mut stripped = String::with_capacity(sql.len());
    for line in sql.lines() {
        let code = match line.find("--") {
            Some(i) => &line[..i],
            None => line,
        };
        stripped.push_str(code);
        stripped.push('\n');
    }
    stripped
        .split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::returns_rows;

    #[test]
    fn a_statement_with_a_result_is_named_so_whatever_its_case() {
        for yes in [
            "SELECT 1",
            "  select seq FROM journal",
            "WITH x AS (SELECT 1) SELECT * FROM x",
            "INSERT INTO events (type) VALUES (?1) RETURNING seq",
            "update t set a = 1 returning a",
        ] {
            assert!(returns_rows(yes), "{yes}");
        }
        for no in [
            "INSERT OR REPLACE INTO journal (seq) VALUES (?1)",
            "DELETE FROM journal",
            "CREATE TABLE IF NOT EXISTS t (a)",
            "",
        ] {
            assert!(!returns_rows(no), "{no}");
        }
    }
}
