//! `JournalStore` over any synchronous SQL storage: a Durable Object's
//! SQLite in the Worker, `rusqlite` natively. The SQL is written once here.

use std::cell::RefCell;

use serde::Deserialize;

use crate::journal::{Entry, EntryKind, EntryState, Event, InstanceRecord, Interrupt};

use super::journal_tables::{Table, Tables};
use super::sql::{decode, Param, StoreError, SyncSql};

/// The instance's own storage. Synchronous, as a Durable Object's SQLite
/// storage is; every method is one local write or read.
pub trait JournalStore {
    fn load_instance(&self) -> Result<Option<InstanceRecord>, StoreError>;
    fn save_instance(&self, record: &InstanceRecord) -> Result<(), StoreError>;
    fn entries(&self) -> Result<Vec<Entry>, StoreError>;
    /// Writes one entry (insert or replace at its `seq`).
    fn put_entry(&self, entry: &Entry) -> Result<(), StoreError>;
    /// Writes several entries as one unit, in order (inline steps).
    fn put_entries(&self, entries: &[Entry]) -> Result<(), StoreError> {
        entries.iter().try_for_each(|e| self.put_entry(e))
    }
    /// Removes entries from `seq` on (restart from a step).
    fn truncate_from(&self, seq: u32) -> Result<(), StoreError>;
    /// Drops every event, consumed or pending (a restart starts with an
    /// empty inbox).
    fn clear_events(&self) -> Result<(), StoreError>;
    fn entries_since(&self, rev: i64) -> Result<Vec<Entry>, StoreError>;
    /// How many durable calls are journaled (without reading their values).
    fn entry_count(&self) -> Result<u32, StoreError>;
    fn push_event(&self, event_type: &str, payload: &str, now_ms: i64) -> Result<i64, StoreError>;
    /// The oldest event of this type no wait has consumed.
    fn next_event(&self, event_type: &str) -> Result<Option<Event>, StoreError>;
    /// Marks the event consumed by the wait at `entry_seq` and writes that
    /// entry, as one unit.
    fn consume_event(&self, event_seq: i64, entry: &Entry) -> Result<(), StoreError>;
    /// Wipes everything (retention purge of a finished instance).
    fn clear(&self) -> Result<(), StoreError>;
    /// Keeps (or, with None, forgets) the pause or terminate a running
    /// pass answered "pending", until the driver carried it out.
    fn keep_interrupt(&self, interrupt: Option<Interrupt>) -> Result<(), StoreError>;
    fn kept_interrupt(&self) -> Result<Option<Interrupt>, StoreError>;
}

/// Version of the record JSON, so a future field change can be migrated.
const RECORD_VERSION: u32 = 1;

/// The record and the kept interrupt, in one row: one statement where a
/// pass made two (`read_held`).
const READ_HELD: &str = "SELECT (SELECT record FROM instance WHERE singleton = 1) AS record, \
     (SELECT kind FROM pending_interrupt WHERE singleton = 1) AS interrupt";
/// `READ_HELD` where only the record's table exists.
const READ_RECORD: &str = "SELECT record, NULL AS interrupt FROM instance WHERE singleton = 1";
/// `READ_HELD` where only the interrupt's table exists.
const READ_INTERRUPT: &str =
    "SELECT NULL AS record, kind AS interrupt FROM pending_interrupt WHERE singleton = 1";

/// A value the journal holds as its storage does (`Some`), or has not
/// read (`None`): it is the storage's only writer, so what it wrote last
/// is what a read returns (a Durable Object runs one instance of itself).
/// A failed statement leaves the held value as it was; a write of several
/// statements forgets it first.
type Held<T> = RefCell<Option<T>>;

/// A stored value as this version decodes it (None: there is none).
type Decoded<T> = Result<Option<T>, StoreError>;

pub struct SqlJournal<S: SyncSql> {
    sql: S,
    /// Which of its tables exist (`journal_tables`).
    tables: Tables,
    /// The record as last read or saved: a pass and a command read it
    /// back (JSON decoded) several times a creation.
    record: Held<Option<InstanceRecord>>,
    /// The kept interrupt as last read or written.
    interrupt: Held<Option<Interrupt>>,
}

impl<S: SyncSql> SqlJournal<S> {
    /// Wraps the storage, reads which of its tables exist (none in a new
    /// object: each is created by its first write), and reads the record
    /// and the kept interrupt (a pass reads both first).
    pub fn open(sql: S) -> Result<SqlJournal<S>, StoreError> {
        let journal = SqlJournal {
            tables: Tables::read(&sql)?,
            sql,
            record: RefCell::new(None),
            interrupt: RefCell::new(None),
        };
        // A value this version cannot read is reported by the read that
        // wants it (`load_instance`, `kept_interrupt`), not by the open.
        let _ = journal.read_held()?;
        Ok(journal)
    }

    /// Reads the record and the kept interrupt in one statement and holds
    /// each that decodes; answers both as decoded.
    fn read_held(&self) -> Result<(Decoded<InstanceRecord>, Decoded<Interrupt>), StoreError> {
        #[derive(Deserialize)]
        struct HeldRow {
            record: Option<String>,
            interrupt: Option<String>,
        }
        let read = match (
            self.tables.has(Table::Instance),
            self.tables.has(Table::PendingInterrupt),
        ) {
            (true, true) => Some(READ_HELD),
            (true, false) => Some(READ_RECORD),
            (false, true) => Some(READ_INTERRUPT),
            (false, false) => None,
        };
        let rows = match read {
            Some(statement) => self.sql.exec(statement, &[])?,
            None => Vec::new(),
        };
        // At most one row (READ_HELD's always, of two NULLs at worst).
        let row = decode::<HeldRow>(rows)?.into_iter().next();
        let (record, interrupt) = row.map_or((None, None), |r| (r.record, r.interrupt));
        let record = record.as_deref().map(decode_record).transpose();
        let interrupt = interrupt.as_deref().map(parse_interrupt).transpose();
        if let Ok(held) = &record {
            *self.record.borrow_mut() = Some(held.clone());
        }
        if let Ok(held) = interrupt {
            *self.interrupt.borrow_mut() = Some(held);
        }
        Ok((record, interrupt))
    }

    pub fn storage(&self) -> &S {
        &self.sql
    }

    /// Forgets what the journal holds, so its next reads go to storage:
    /// for a write that did not go through it (a test's direct statement,
    /// which may have created a table too).
    pub fn reread(&self) -> Result<(), StoreError> {
        self.forget_held();
        self.tables.read_again(&self.sql)
    }

    fn forget_held(&self) {
        self.record.borrow_mut().take();
        self.interrupt.borrow_mut().take();
    }
}

fn parse_interrupt(kind: &str) -> Result<Interrupt, StoreError> {
    Interrupt::parse(kind).ok_or_else(|| StoreError::Decode(format!("kept interrupt {kind:?}")))
}

/// The record as stored: its fields and the version beside them.
#[derive(serde::Serialize)]
struct VersionedRecord<'a> {
    v: u32,
    #[serde(flatten)]
    record: &'a InstanceRecord,
}

/// How every record this version saves begins (`VersionedRecord` writes
/// `v` first): a record that does so is read without a second parse.
const RECORD_PREFIX: &str = "{\"v\":1,";

/// The version of a stored record, read on its own.
#[derive(Deserialize)]
struct RecordVersion {
    v: u32,
}

/// A stored record: checked to be this version, then read as the record
/// itself (its `v` is a field the record ignores). Not through
/// `VersionedRecord`: a flattened field is read by buffering the whole map
/// first, and a pass reads the record at least twice.
fn decode_record(json: &str) -> Result<InstanceRecord, StoreError> {
    let decode = |e: serde_json::Error| StoreError::Decode(e.to_string());
    if !json.starts_with(RECORD_PREFIX) {
        let RecordVersion { v } = serde_json::from_str(json).map_err(decode)?;
        if v != RECORD_VERSION {
            return Err(StoreError::Decode(format!("instance record version {v}")));
        }
    }
    serde_json::from_str(json).map_err(decode)
}

#[derive(Deserialize)]
struct EntryRow {
    seq: u32,
    name: String,
    kind: String,
    state: String,
    value: Option<String>,
    error_tag: Option<String>,
    error_message: Option<String>,
    attempts: u32,
    started_ms: i64,
    finished_ms: Option<i64>,
    wake_at_ms: Option<i64>,
    rev: i64,
}

impl EntryRow {
    fn into_entry(self) -> Result<Entry, StoreError> {
        let kind = match self.kind.as_str() {
            "step" => EntryKind::Step,
            "sleep" => EntryKind::Sleep,
            "wait" => EntryKind::Wait,
            other => return Err(StoreError::Decode(format!("journal kind {other:?}"))),
        };
        let state = match self.state.as_str() {
            "done" => EntryState::Done,
            "failed" => EntryState::Failed,
            "retrying" => EntryState::Retrying,
            "waiting" => EntryState::Waiting,
            other => return Err(StoreError::Decode(format!("journal state {other:?}"))),
        };
        Ok(Entry {
            seq: self.seq,
            name: self.name,
            kind,
            state,
            value: self.value,
            error_tag: self.error_tag,
            error_message: self.error_message,
            attempts: self.attempts,
            started_ms: self.started_ms,
            finished_ms: self.finished_ms,
            wake_at_ms: self.wake_at_ms,
            rev: self.rev,
        })
    }
}

#[derive(Deserialize)]
struct EventRow {
    seq: i64,
    #[serde(rename = "type")]
    event_type: String,
    payload: String,
    received_ms: i64,
}

const SELECT_ENTRIES: &str = "SELECT seq, name, kind, state, value, error_tag, error_message, \
     attempts, started_ms, finished_ms, wake_at_ms, rev FROM journal";

/// Which of the journal's two write forms an entry, or a batch, takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RowForm {
    /// A step that completed with nothing else to say (no error, no
    /// wake-up): every inline step and nearly every durable step. Its
    /// statements bind only the seven columns that vary and name the rest,
    /// so a write converts five fewer values into the runtime's and SQLite
    /// extracts five fewer from each row of a batch (issue 26: about half
    /// of a batched row's SQLite time).
    PlainDone,
    /// Any other entry: all twelve columns bound.
    Full,
}

impl RowForm {
    fn of(e: &Entry) -> RowForm {
        let plain = e.kind == EntryKind::Step
            && e.state == EntryState::Done
            && e.error_tag.is_none()
            && e.error_message.is_none()
            && e.wake_at_ms.is_none();
        if plain {
            RowForm::PlainDone
        } else {
            RowForm::Full
        }
    }

    /// One form for a whole batch: the plain one only when every entry
    /// can take it, as held inline entries always can.
    fn of_all(entries: &[Entry]) -> RowForm {
        match entries.iter().all(|e| RowForm::of(e) == RowForm::PlainDone) {
            true => RowForm::PlainDone,
            false => RowForm::Full,
        }
    }

    /// The statement writing one entry, bound with `params`.
    fn single(self) -> &'static str {
        match self {
            RowForm::PlainDone => UPSERT_ENTRY_DONE,
            RowForm::Full => UPSERT_ENTRY_ALL,
        }
    }

    /// The statement writing a JSON array of `row_json` rows.
    fn batched(self) -> &'static str {
        match self {
            RowForm::PlainDone => UPSERT_ENTRIES_DONE,
            RowForm::Full => UPSERT_ENTRIES_ALL,
        }
    }

    /// An entry's parameters in this form's order.
    fn params(self, e: &Entry) -> Vec<Param> {
        match self {
            RowForm::PlainDone => vec![
                Param::from(e.seq),
                Param::from(e.name.as_str()),
                Param::from(e.value.as_deref()),
                Param::from(e.attempts),
                Param::from(e.started_ms),
                Param::from(e.finished_ms),
                Param::from(e.rev),
            ],
            RowForm::Full => vec![
                Param::from(e.seq),
                Param::from(e.name.as_str()),
                Param::from(e.kind.as_str()),
                Param::from(e.state.as_str()),
                Param::from(e.value.as_deref()),
                Param::from(e.error_tag.as_deref()),
                Param::from(e.error_message.as_deref()),
                Param::from(e.attempts),
                Param::from(e.started_ms),
                Param::from(e.finished_ms),
                Param::from(e.wake_at_ms),
                Param::from(e.rev),
            ],
        }
    }

    /// An entry as a batched row: `params` in order, as a JSON array. A
    /// tuple serializes straight from the entry's fields, with no `Value`
    /// tree or copy of its strings between. Numbers, strings and nulls
    /// only: serializing cannot fail.
    fn row_json(self, e: &Entry) -> String {
        match self {
            RowForm::PlainDone => serde_json::to_string(&(
                e.seq,
                &e.name,
                &e.value,
                e.attempts,
                e.started_ms,
                e.finished_ms,
                e.rev,
            )),
            RowForm::Full => serde_json::to_string(&(
                e.seq,
                &e.name,
                e.kind.as_str(),
                e.state.as_str(),
                &e.value,
                &e.error_tag,
                &e.error_message,
                e.attempts,
                e.started_ms,
                e.finished_ms,
                e.wake_at_ms,
                e.rev,
            )),
        }
        .unwrap_or_default()
    }
}

const UPSERT_ENTRY_ALL: &str = "INSERT OR REPLACE INTO journal (seq, name, kind, state, value, \
     error_tag, error_message, attempts, started_ms, finished_ms, wake_at_ms, rev) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)";

/// `UPSERT_ENTRY_ALL` of `RowForm::PlainDone`; the literals are
/// `EntryKind::Step` and `EntryState::Done` as stored (`tests/store.rs`
/// reads both forms back).
const UPSERT_ENTRY_DONE: &str = "INSERT OR REPLACE INTO journal (seq, name, kind, state, value, \
     error_tag, error_message, attempts, started_ms, finished_ms, wake_at_ms, rev) \
     VALUES (?1, ?2, 'step', 'done', ?3, NULL, NULL, ?4, ?5, ?6, NULL, ?7)";

/// `UPSERT_ENTRY_ALL` for many rows, each a JSON array in its column order.
const UPSERT_ENTRIES_ALL: &str = "INSERT OR REPLACE INTO journal (seq, name, kind, state, value, \
     error_tag, error_message, attempts, started_ms, finished_ms, wake_at_ms, rev) \
     SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), \
     json_extract(value, '$[2]'), json_extract(value, '$[3]'), json_extract(value, '$[4]'), \
     json_extract(value, '$[5]'), json_extract(value, '$[6]'), json_extract(value, '$[7]'), \
     json_extract(value, '$[8]'), json_extract(value, '$[9]'), json_extract(value, '$[10]'), \
     json_extract(value, '$[11]') FROM json_each(?1) ORDER BY key";

/// `UPSERT_ENTRY_DONE` for many rows, each a JSON array of its parameters.
const UPSERT_ENTRIES_DONE: &str = "INSERT OR REPLACE INTO journal (seq, name, kind, state, value, \
     error_tag, error_message, attempts, started_ms, finished_ms, wake_at_ms, rev) \
     SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'), 'step', 'done', \
     json_extract(value, '$[2]'), NULL, NULL, json_extract(value, '$[3]'), \
     json_extract(value, '$[4]'), json_extract(value, '$[5]'), NULL, \
     json_extract(value, '$[6]') FROM json_each(?1) ORDER BY key";

/// Bytes of one batched array: half of the 2,000,000 bytes Durable
/// Object storage keeps in one string, so a write of held inline entries
/// never meets that limit, whatever their names and escapes.
const UPSERT_ENTRIES_JSON_BYTES_MAX: usize = 1_000_000;

impl<S: SyncSql> SqlJournal<S> {
    /// Writes the rows of `array` (an open JSON array) and empties it.
    fn upsert_rows(&self, array: &mut String, form: RowForm) -> Result<(), StoreError> {
        if array.len() <= 1 {
            return Ok(());
        }
        array.push(']');
        self.tables.ensure(&self.sql, Table::Journal)?;
        self.sql
            .exec(form.batched(), &[Param::from(array.as_str())])?;
        array.truncate(1);
        Ok(())
    }
}

impl<S: SyncSql> JournalStore for SqlJournal<S> {
    fn load_instance(&self) -> Result<Option<InstanceRecord>, StoreError> {
        if let Some(held) = self.record.borrow().as_ref() {
            return Ok(held.clone());
        }
        self.read_held()?.0
    }

    fn save_instance(&self, record: &InstanceRecord) -> Result<(), StoreError> {
        let json = serde_json::to_string(&VersionedRecord {
            v: RECORD_VERSION,
            record,
        })
        .map_err(|e| StoreError::Decode(e.to_string()))?;
        self.tables.ensure(&self.sql, Table::Instance)?;
        self.sql.exec(
            "INSERT OR REPLACE INTO instance (singleton, record) VALUES (1, ?1)",
            &[Param::Text(json)],
        )?;
        *self.record.borrow_mut() = Some(Some(record.clone()));
        Ok(())
    }

    fn entries(&self) -> Result<Vec<Entry>, StoreError> {
        if !self.tables.has(Table::Journal) {
            return Ok(Vec::new());
        }
        let rows = self
            .sql
            .exec(&format!("{SELECT_ENTRIES} ORDER BY seq"), &[])?;
        decode::<EntryRow>(rows)?
            .into_iter()
            .map(EntryRow::into_entry)
            .collect()
    }

    fn put_entry(&self, entry: &Entry) -> Result<(), StoreError> {
        let form = RowForm::of(entry);
        self.tables.ensure(&self.sql, Table::Journal)?;
        self.sql.exec(form.single(), &form.params(entry))?;
        Ok(())
    }

    /// One statement over a JSON array of rows, not one per entry.
    fn put_entries(&self, entries: &[Entry]) -> Result<(), StoreError> {
        if let [one] = entries {
            return self.put_entry(one);
        }
        // Rows go out in arrays of at most UPSERT_ENTRIES_JSON_BYTES_MAX; a
        // row over it alone (a large result, escaped) goes as its own entry.
        let form = RowForm::of_all(entries);
        let mut array = String::from("[");
        for e in entries {
            let row = form.row_json(e);
            if row.len() + 2 > UPSERT_ENTRIES_JSON_BYTES_MAX {
                // The rows before it first: a failure leaves a prefix of
                // the entries written, never a gap.
                self.upsert_rows(&mut array, form)?;
                self.put_entry(e)?;
                continue;
            }
            if array.len() + row.len() + 2 > UPSERT_ENTRIES_JSON_BYTES_MAX {
                self.upsert_rows(&mut array, form)?;
            }
            if array.len() > 1 {
                array.push(',');
            }
            array.push_str(&row);
        }
        self.upsert_rows(&mut array, form)
    }

    fn truncate_from(&self, seq: u32) -> Result<(), StoreError> {
        if !self.tables.has(Table::Journal) {
            return Ok(());
        }
        self.sql
            .exec("DELETE FROM journal WHERE seq >= ?1", &[Param::from(seq)])?;
        Ok(())
    }

    fn clear_events(&self) -> Result<(), StoreError> {
        if !self.tables.has(Table::Events) {
            return Ok(());
        }
        self.sql.exec("DELETE FROM events", &[])?;
        Ok(())
    }

    fn entries_since(&self, rev: i64) -> Result<Vec<Entry>, StoreError> {
        if !self.tables.has(Table::Journal) {
            return Ok(Vec::new());
        }
        let rows = self.sql.exec(
            &format!("{SELECT_ENTRIES} WHERE rev > ?1 ORDER BY seq"),
            &[Param::from(rev)],
        )?;
        decode::<EntryRow>(rows)?
            .into_iter()
            .map(EntryRow::into_entry)
            .collect()
    }

    fn entry_count(&self) -> Result<u32, StoreError> {
        #[derive(Deserialize)]
        struct Count {
            n: u32,
        }
        if !self.tables.has(Table::Journal) {
            return Ok(0);
        }
        let rows = self.sql.exec("SELECT COUNT(*) AS n FROM journal", &[])?;
        Ok(decode::<Count>(rows)?.first().map_or(0, |c| c.n))
    }

    fn push_event(&self, event_type: &str, payload: &str, now_ms: i64) -> Result<i64, StoreError> {
        self.tables.ensure(&self.sql, Table::Events)?;
        let rows = self.sql.exec(
            "INSERT INTO events (type, payload, received_ms) VALUES (?1, ?2, ?3) RETURNING seq",
            &[
                Param::from(event_type),
                Param::from(payload),
                Param::from(now_ms),
            ],
        )?;
        #[derive(Deserialize)]
        struct Seq {
            seq: i64,
        }
        decode::<Seq>(rows)?
            .into_iter()
            .next()
            .map(|s| s.seq)
            .ok_or_else(|| StoreError::Decode("insert returned no seq".into()))
    }

    fn next_event(&self, event_type: &str) -> Result<Option<Event>, StoreError> {
        if !self.tables.has(Table::Events) {
            return Ok(None);
        }
        let rows = self.sql.exec(
            "SELECT seq, type, payload, received_ms FROM events \
             WHERE type = ?1 AND consumed_by IS NULL ORDER BY seq LIMIT 1",
            &[Param::from(event_type)],
        )?;
        Ok(decode::<EventRow>(rows)?.into_iter().next().map(|r| Event {
            seq: r.seq,
            event_type: r.event_type,
            payload: r.payload,
            received_ms: r.received_ms,
        }))
    }

    fn consume_event(&self, event_seq: i64, entry: &Entry) -> Result<(), StoreError> {
        // Both writes land in one implicit transaction in a Durable Object
        // (no await between them); natively the test store is in memory.
        self.tables.ensure(&self.sql, Table::Events)?;
        self.sql.exec(
            "UPDATE events SET consumed_by = ?1 WHERE seq = ?2",
            &[Param::from(entry.seq), Param::from(event_seq)],
        )?;
        self.put_entry(entry)
    }

    fn clear(&self) -> Result<(), StoreError> {
        // Unknown until every statement ran: one that fails leaves a part
        // deleted.
        self.forget_held();
        // In `Table::ALL`'s order: the record after the entries and events.
        for table in Table::ALL.into_iter().filter(|t| self.tables.has(*t)) {
            self.sql.exec(&table.delete_all(), &[])?;
        }
        *self.record.borrow_mut() = Some(None);
        *self.interrupt.borrow_mut() = Some(None);
        Ok(())
    }

    fn keep_interrupt(&self, interrupt: Option<Interrupt>) -> Result<(), StoreError> {
        match interrupt {
            None if !self.tables.has(Table::PendingInterrupt) => {}
            None => {
                self.sql.exec("DELETE FROM pending_interrupt", &[])?;
            }
            // Never softened here either: a kept terminate stays one.
            Some(i) => {
                self.tables.ensure(&self.sql, Table::PendingInterrupt)?;
                self.sql.exec(
                    "INSERT INTO pending_interrupt (singleton, kind) VALUES (1, ?1) \
                     ON CONFLICT (singleton) DO UPDATE SET kind = \
                     CASE WHEN kind = 'terminate' THEN kind ELSE excluded.kind END",
                    &[Param::from(i.as_str())],
                )?;
            }
        }
        // As the statement merges it (`Interrupt` orders pause first).
        if let Some(held) = self.interrupt.borrow_mut().as_mut() {
            *held = interrupt.and_then(|i| (*held).max(Some(i)));
        }
        Ok(())
    }

    fn kept_interrupt(&self) -> Result<Option<Interrupt>, StoreError> {
        if let Some(held) = *self.interrupt.borrow() {
            return Ok(held);
        }
        self.read_held()?.1
    }
}
