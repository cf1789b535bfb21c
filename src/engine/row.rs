//! An instance's index row while only its object holds the instance
//! (ADR-0018, `docs/adr/0018-a-single-creates-row-rides-its-first-pass.md`).
//! A single create saves the record and answers once the row is in D1,
//! but does not write the row itself: the first pass writes it before its
//! first step body (a step may claim a gate, whose statements read the
//! instance's own row) or, when no step body runs, in the same batch as
//! its mirror. So a creation whose first pass runs no body costs one D1
//! round trip instead of two; one that runs a body still costs two.

use std::cell::Cell;

use crate::journal::InstanceRecord;
use crate::store::{executions, Database, StoreError};

/// The row a pass writes before its first step body, once.
pub struct PendingRow<'a> {
    index: &'a dyn Database,
    insert: crate::store::Stmt,
    written: Cell<bool>,
    /// D1 refused it: the pass ran no step body after.
    refused: Cell<bool>,
    /// Told when the row lands (the object's create is waiting to answer).
    on_indexed: Option<&'a dyn Fn()>,
}

impl<'a> PendingRow<'a> {
    pub fn new(
        index: &'a dyn Database,
        rec: &InstanceRecord,
        on_indexed: Option<&'a dyn Fn()>,
    ) -> PendingRow<'a> {
        PendingRow {
            index,
            insert: executions::insert_stmt(rec),
            written: Cell::new(false),
            refused: Cell::new(false),
            on_indexed,
        }
    }

    /// Writes the row unless this pass already did. A failure leaves it
    /// pending: the caller runs no step body.
    pub async fn write(&self) -> Result<(), StoreError> {
        if self.written.get() {
            return Ok(());
        }
        if let Err(e) = self.index.run(self.insert.clone()).await {
            self.refused.set(true);
            return Err(e);
        }
        self.written.set(true);
        if let Some(told) = self.on_indexed {
            told();
        }
        Ok(())
    }

    pub fn written(&self) -> bool {
        self.written.get()
    }

    pub fn refused(&self) -> bool {
        self.refused.get()
    }
}
