//! The journal's four tables, each created by the first write that needs
//! it (issue 26). A new object's four `CREATE TABLE`s were the largest
//! SQL cost of a creation: SQLite parses each twice (the statement, then
//! the schema row it writes) and Durable Object storage bills the schema
//! rows it writes. A 0-step instance now creates only `instance`; a run
//! with steps adds `journal`; `events` and `pending_interrupt` appear only
//! where a run waits for an event or an operator's interrupt is kept.
//!
//! What each table holds and why is in `journal.sql`; this module only
//! knows which of them exist. Reads of a table that does not exist answer
//! as the empty table would (`SqlJournal` asks `has` first).

use std::cell::Cell;

use serde::Deserialize;

use super::sql::{decode, split_statements, StoreError, SyncSql};

/// One of the journal's tables (`journal.sql`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    Instance,
    Journal,
    Events,
    PendingInterrupt,
}

impl Table {
    /// Every table, in the order a purge empties them: the record after
    /// the entries and events, so a purge that fails half way leaves the
    /// record while any of the old life's entries or events stay, and a
    /// later create finds it instead of replaying them as its own.
    pub const ALL: [Table; 4] = [
        Table::Journal,
        Table::Events,
        Table::Instance,
        Table::PendingInterrupt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Table::Instance => "instance",
            Table::Journal => "journal",
            Table::Events => "events",
            Table::PendingInterrupt => "pending_interrupt",
        }
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }

    fn named(name: &str) -> Option<Table> {
        Table::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The statement deleting every row (a purge).
    pub fn delete_all(self) -> String {
        format!("DELETE FROM {}", self.name())
    }

    /// Its `CREATE TABLE IF NOT EXISTS` statement, as `journal.sql` has it.
    fn create_statement(self) -> Result<&'static str, StoreError> {
        let head = format!("CREATE TABLE IF NOT EXISTS {} (", self.name());
        schema_statements()
            .iter()
            .find(|s| s.starts_with(&head))
            .map(String::as_str)
            .ok_or_else(|| StoreError::Query(format!("journal.sql creates no {}", self.name())))
    }
}

/// The journal schema: what each table and column is for.
pub const JOURNAL_SCHEMA: &str = include_str!("journal.sql");

/// `JOURNAL_SCHEMA`'s statements, split once per isolate.
fn schema_statements() -> &'static [String] {
    static STATEMENTS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    STATEMENTS.get_or_init(|| split_statements(JOURNAL_SCHEMA))
}

/// Which tables exist: read once when the journal opens, then kept as its
/// own writes create them (it is the storage's only writer).
#[derive(Debug, Default)]
pub struct Tables {
    present: Cell<u8>,
}

/// The journal's tables that exist, by name: one statement.
const PRESENT_TABLES: &str = "SELECT name FROM sqlite_master WHERE type = 'table' \
     AND name IN ('instance', 'journal', 'events', 'pending_interrupt')";

impl Tables {
    /// Reads which tables the storage holds.
    pub fn read(sql: &impl SyncSql) -> Result<Tables, StoreError> {
        let tables = Tables::default();
        tables.read_again(sql)?;
        Ok(tables)
    }

    /// Reads them again: a write that did not go through the journal (a
    /// test's) may have created one. Unchanged if the read fails.
    pub fn read_again(&self, sql: &impl SyncSql) -> Result<(), StoreError> {
        #[derive(Deserialize)]
        struct Named {
            name: String,
        }
        let rows = decode::<Named>(sql.exec(PRESENT_TABLES, &[])?)?;
        let present = rows
            .iter()
            .filter_map(|r| Table::named(&r.name))
            .fold(0, |bits, t| bits | t.bit());
        self.present.set(present);
        Ok(())
    }

    pub fn has(&self, table: Table) -> bool {
        self.present.get() & table.bit() != 0
    }

    /// Creates `table` unless it exists. A write that needs it calls this
    /// first, in the same synchronous turn: in a Durable Object both land
    /// in one implicit transaction.
    pub fn ensure(&self, sql: &impl SyncSql, table: Table) -> Result<(), StoreError> {
        if !self.has(table) {
            sql.exec(table.create_statement()?, &[])?;
            self.mark(table);
        }
        Ok(())
    }

    fn mark(&self, table: Table) {
        self.present.set(self.present.get() | table.bit());
    }
}

#[cfg(test)]
mod tests {
    use super::Table;

    #[test]
    fn the_query_of_present_tables_names_every_table() {
        let named = super::PRESENT_TABLES.matches('\'').count() / 2;
        assert_eq!(named, Table::ALL.len() + 1, "each table and 'table'");
        for t in Table::ALL {
            assert!(super::PRESENT_TABLES.contains(&format!("'{}'", t.name())));
        }
    }

    #[test]
    fn every_table_has_its_create_statement_in_the_schema() {
        for t in Table::ALL {
            let create = t.create_statement().unwrap();
            assert!(create.contains(&format!(" {} (", t.name())), "{create}");
        }
    }
}
