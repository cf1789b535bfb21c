//! Native SQLite (`rusqlite`, bundled) behind the same interfaces as D1 and
//! a Durable Object's storage, so engine and gate logic is tested against a
//! real database running the real migration files.

use std::cell::RefCell;
use std::path::Path;

use async_trait::async_trait;
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::Connection;
use serde_json::Value;

use super::sql::{split_statements, Database, Param, Row, Stmt, StoreError, SyncSql};

/// The largest string, blob or row D1 and Durable Object storage keep
/// (Cloudflare's published limits for both).
pub const PLATFORM_VALUE_BYTES_MAX: i32 = 2_000_000;

pub struct SqliteDb {
    conn: RefCell<Connection>,
}

impl SqliteDb {
    pub fn open_in_memory() -> Result<SqliteDb, StoreError> {
        let conn = Connection::open_in_memory().map_err(query_err)?;
        // D1 and Durable Object storage refuse a string, blob or row over
        // 2,000,000 bytes ("string or blob too big"); so does the stand-in,
        // or a write the platform refuses would pass here.
        conn.set_limit(
            rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH,
            PLATFORM_VALUE_BYTES_MAX,
        );
        Ok(SqliteDb {
            conn: RefCell::new(conn),
        })
    }

    /// An in-memory database with every `migrations/*.sql` applied in order,
    /// exactly as `wrangler d1 migrations apply` applies them.
    pub fn with_migrations() -> Result<SqliteDb, StoreError> {
        let db = SqliteDb::open_in_memory()?;
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .map_err(|e| StoreError::Query(format!("{}: {e}", dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "sql"))
            .collect();
        files.sort();
        for file in files {
            let sql = std::fs::read_to_string(&file)
                .map_err(|e| StoreError::Query(format!("{}: {e}", file.display())))?;
            db.apply_script(&sql)?;
        }
        Ok(db)
    }

    /// Applies a script of `;`-separated statements in one transaction.
    pub fn apply_script(&self, sql: &str) -> Result<(), StoreError> {
        let mut conn = self.conn.borrow_mut();
        let tx = conn.transaction().map_err(query_err)?;
        for s in split_statements(sql) {
            tx.execute_batch(&s)
                .map_err(|e| StoreError::Query(format!("{e}: {s}")))?;
        }
        tx.commit().map_err(query_err)
    }

    fn query(conn: &Connection, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError> {
        let mut st = conn.prepare_cached(sql).map_err(query_err)?;
        let names: Vec<String> = st.column_names().iter().map(|s| s.to_string()).collect();
        let values: Vec<SqlValue> = params.iter().map(to_sql).collect();
        let mut rows = st
            .query(rusqlite::params_from_iter(values))
            .map_err(query_err)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(query_err)? {
            let mut map = Row::new();
            for (i, name) in names.iter().enumerate() {
                let v = match row.get_ref(i).map_err(query_err)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(n) => Value::from(n),
                    ValueRef::Real(f) => Value::from(f),
                    ValueRef::Text(t) => Value::from(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Value::from(String::from_utf8_lossy(b).into_owned()),
                };
                map.insert(name.clone(), v);
            }
            out.push(map);
        }
        Ok(out)
    }

    fn execute(conn: &Connection, stmt: &Stmt) -> Result<u64, StoreError> {
        let values: Vec<SqlValue> = stmt.params.iter().map(to_sql).collect();
        let mut st = conn.prepare_cached(&stmt.sql).map_err(query_err)?;
        // A statement with RETURNING yields rows; count them as changes.
        if st.column_count() > 0 {
            let mut rows = st
                .query(rusqlite::params_from_iter(values))
                .map_err(query_err)?;
            let mut n = 0;
            while rows.next().map_err(query_err)?.is_some() {
                n += 1;
            }
            return Ok(n);
        }
        let n = st
            .execute(rusqlite::params_from_iter(values))
            .map_err(query_err)?;
        Ok(n as u64)
    }
}

fn to_sql(p: &Param) -> SqlValue {
    match p {
        Param::Null => SqlValue::Null,
        Param::Int(n) => SqlValue::Integer(*n),
        Param::Real(f) => SqlValue::Real(*f),
        Param::Text(s) => SqlValue::Text(s.clone()),
    }
}

fn query_err(e: rusqlite::Error) -> StoreError {
    StoreError::Query(e.to_string())
}

#[async_trait(?Send)]
impl Database for SqliteDb {
    async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        SqliteDb::query(&self.conn.borrow(), &stmt.sql, &stmt.params)
    }

    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        SqliteDb::execute(&self.conn.borrow(), &stmt)
    }

    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
        let mut conn = self.conn.borrow_mut();
        let tx = conn.transaction().map_err(query_err)?;
        let mut changes = Vec::with_capacity(stmts.len());
        for s in &stmts {
            changes.push(SqliteDb::execute(&tx, s)?);
        }
        tx.commit().map_err(query_err)?;
        Ok(changes)
    }
}

impl SyncSql for SqliteDb {
    fn exec_counted(
        &self,
        sql: &str,
        params: &[Param],
    ) -> Result<(Vec<Row>, super::Usage), StoreError> {
        let rows = self.exec(sql, params)?;
        let rows_written = match rows.len() {
            0 => self.conn.borrow().changes(),
            _ => 0,
        };
        let usage = super::Usage {
            rows_read: rows.len() as u64,
            rows_written,
        };
        Ok((rows, usage))
    }

    fn exec(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError> {
        let conn = self.conn.borrow();
        let mut st = conn.prepare_cached(sql).map_err(query_err)?;
        // The Durable Object's storage reads back only what `returns_rows`
        // names: a statement with a result it would miss fails every test.
        if st.column_count() > 0 && !super::sql::returns_rows(sql) {
            return Err(StoreError::Query(format!(
                "returns rows, but store::sql::returns_rows says not: {sql}"
            )));
        }
        if st.column_count() == 0 {
            let values: Vec<SqlValue> = params.iter().map(to_sql).collect();
            st.execute(rusqlite::params_from_iter(values))
                .map_err(query_err)?;
            return Ok(Vec::new());
        }
        drop(st);
        SqliteDb::query(&conn, sql, params)
    }
}
