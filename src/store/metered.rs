//! The storage an instance uses, counted into its `cost::Meter` as each
//! call happens: D1 statements and the rows D1 reports (`MeteredDb`), the
//! rows its own SQLite storage reads and writes (`MeteredSql`), R2
//! operations by class (`MeteredBlobs`).

use std::rc::Rc;

use async_trait::async_trait;

use crate::blobs::Blobs;
use crate::cost::Meter;

use super::sql::{Database, Param, Row, Stmt, StoreError, SyncSql, Usage};

/// The shared index, counted.
pub struct MeteredDb<'a> {
    pub inner: &'a dyn Database,
    pub meter: &'a Meter,
}

impl MeteredDb<'_> {
    fn count(&self, statements: usize, usage: Usage) {
        self.meter.record(|u| {
            u.d1_statements += statements as u64;
            u.d1_rows_read += usage.rows_read;
            u.d1_rows_written += usage.rows_written;
        });
    }
}

#[async_trait(?Send)]
impl Database for MeteredDb<'_> {
    async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        Ok(self.all_counted(stmt).await?.0)
    }
    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        Ok(self.run_counted(stmt).await?.0)
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
        Ok(self.batch_counted(stmts).await?.0)
    }
    // A statement that failed still went to D1: it counts, with no rows.
    async fn all_counted(&self, stmt: Stmt) -> Result<(Vec<Row>, Usage), StoreError> {
        let r = self.inner.all_counted(stmt).await;
        self.count(1, r.as_ref().map(|r| r.1).unwrap_or_default());
        r
    }
    async fn run_counted(&self, stmt: Stmt) -> Result<(u64, Usage), StoreError> {
        let r = self.inner.run_counted(stmt).await;
        self.count(1, r.as_ref().map(|r| r.1).unwrap_or_default());
        r
    }
    async fn batch_counted(&self, stmts: Vec<Stmt>) -> Result<(Vec<u64>, Usage), StoreError> {
        let n = stmts.len();
        let r = self.inner.batch_counted(stmts).await;
        self.count(n, r.as_ref().map(|r| r.1).unwrap_or_default());
        r
    }
}

/// An instance's own storage, counted. Owned (the journal keeps it for the
/// object's lifetime), sharing the object's meter.
pub struct MeteredSql<S> {
    pub inner: S,
    pub meter: Rc<Meter>,
}

impl<S: SyncSql> SyncSql for MeteredSql<S> {
    fn exec(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError> {
        Ok(self.exec_counted(sql, params)?.0)
    }
    fn exec_counted(&self, sql: &str, params: &[Param]) -> Result<(Vec<Row>, Usage), StoreError> {
        let (rows, usage) = self.inner.exec_counted(sql, params)?;
        self.meter.record(|u| {
            u.do_rows_read += usage.rows_read;
            u.do_rows_written += usage.rows_written;
        });
        Ok((rows, usage))
    }
}

/// Object storage, counted by R2's operation classes: a put and a list are
/// class A, a get class B; a delete is free.
pub struct MeteredBlobs<'a> {
    pub inner: &'a dyn Blobs,
    pub meter: &'a Meter,
}

#[async_trait(?Send)]
impl Blobs for MeteredBlobs<'_> {
    async fn put_text(&self, key: &str, text: &str) -> Result<(), String> {
        self.meter.record(|u| u.r2_class_a += 1);
        self.inner.put_text(key, text).await
    }
    async fn get_text(&self, key: &str) -> Result<Option<String>, String> {
        self.meter.record(|u| u.r2_class_b += 1);
        self.inner.get_text(key).await
    }
    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<String>, String> {
        self.meter.record(|u| u.r2_class_a += 1);
        self.inner.list(prefix, limit).await
    }
    async fn delete(&self, key: &str) -> Result<(), String> {
        self.inner.delete(key).await
    }
}
