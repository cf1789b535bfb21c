//! Shared harness for native tests: real SQLite for the journal and for
//! D1's tables (the same migration files), and a clock the test drives.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use async_trait::async_trait;
use sluice::engine::{Clock, Engine, InterruptFlag};
use sluice::store::journal::SqlJournal;
use sluice::store::sqlite::SqliteDb;
use sluice::store::{Database, Row, Stmt, StoreError};

/// A clock that moves only when told to. An in-process sleep advances it
/// at once, so a step timeout fires as soon as its body is pending.
#[derive(Clone)]
pub struct ManualClock(pub Rc<Cell<i64>>, pub Rc<Cell<bool>>);

impl ManualClock {
    pub fn new(start_ms: i64) -> ManualClock {
        ManualClock(Rc::new(Cell::new(start_ms)), Rc::new(Cell::new(false)))
    }
    /// Makes in-process sleeps never finish, so a pending body stays
    /// pending: the test can then drop the pass mid-step (a crash).
    pub fn freeze_timers(&self, frozen: bool) {
        self.1.set(frozen);
    }
    pub fn advance(&self, ms: i64) {
        self.0.set(self.0.get() + ms);
    }
    pub fn set(&self, ms: i64) {
        self.0.set(ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.get()
    }
    fn sleep(&self, ms: i64) -> Pin<Box<dyn Future<Output = ()> + '_>> {
        if self.1.get() {
            return Box::pin(std::future::pending());
        }
        // Time moves when the timer is polled, i.e. only when the body it
        // races is still pending.
        Box::pin(async move { self.advance(ms.max(0)) })
    }
}

/// D1 stand-in that counts round trips (each call is one).
pub struct CountingDb {
    pub db: SqliteDb,
    pub calls: Cell<u32>,
    pub batches: Cell<u32>,
    pub fail_next_batch: Cell<bool>,
    /// Fails this many coming `run` calls (a D1 write that errors).
    pub fail_next_runs: Cell<u32>,
}

impl CountingDb {
    pub fn new() -> CountingDb {
        CountingDb {
            db: SqliteDb::with_migrations().expect("migrations apply"),
            calls: Cell::new(0),
            batches: Cell::new(0),
            fail_next_batch: Cell::new(false),
            fail_next_runs: Cell::new(0),
        }
    }
}

#[async_trait(?Send)]
impl Database for CountingDb {
    async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        self.calls.set(self.calls.get() + 1);
        self.db.all(stmt).await
    }
    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        self.calls.set(self.calls.get() + 1);
        if self.fail_next_runs.get() > 0 {
            self.fail_next_runs.set(self.fail_next_runs.get() - 1);
            return Err(StoreError::Query("injected run failure".into()));
        }
        self.db.run(stmt).await
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
        self.calls.set(self.calls.get() + 1);
        self.batches.set(self.batches.get() + 1);
        if self.fail_next_batch.replace(false) {
            return Err(StoreError::Query("injected batch failure".into()));
        }
        self.db.batch(stmts).await
    }
}

/// One instance's world: its own journal storage, the shared index, a clock.
pub struct World {
    pub journal: SqlJournal<SqliteDb>,
    pub index: Rc<CountingDb>,
    pub clock: ManualClock,
    pub interrupt: InterruptFlag,
    pub blobs: MemoryBlobs,
}

/// Object storage in memory.
#[derive(Default)]
pub struct MemoryBlobs(pub RefCell<std::collections::HashMap<String, String>>);

#[async_trait(?Send)]
impl sluice::blobs::Blobs for MemoryBlobs {
    async fn put_text(&self, key: &str, text: &str) -> Result<(), String> {
        self.0.borrow_mut().insert(key.to_owned(), text.to_owned());
        Ok(())
    }
    async fn get_text(&self, key: &str) -> Result<Option<String>, String> {
        Ok(self.0.borrow().get(key).cloned())
    }
}

pub const T0: i64 = 1_800_000_000_000;

impl World {
    pub fn new() -> World {
        World::with_index(Rc::new(CountingDb::new()))
    }

    /// Another instance sharing the same index.
    pub fn with_index(index: Rc<CountingDb>) -> World {
        World {
            journal: SqlJournal::open(SqliteDb::open_in_memory().expect("sqlite"))
                .expect("journal schema"),
            index,
            clock: ManualClock::new(T0),
            interrupt: Rc::new(Cell::new(None)),
            blobs: MemoryBlobs::default(),
        }
    }

    pub fn engine(&self) -> Engine<'_> {
        Engine {
            journal: &self.journal,
            blobs: Some(&self.blobs),
            index: self.index.as_ref(),
            clock: &self.clock,
        }
    }
}

pub fn block_on<F: Future>(f: F) -> F::Output {
    futures::executor::block_on(f)
}

/// Side effects counted outside the engine, by name.
#[derive(Default)]
pub struct Effects(pub RefCell<std::collections::HashMap<String, u32>>);

impl Effects {
    pub fn hit(&self, name: &str) -> u32 {
        let mut m = self.0.borrow_mut();
        let n = m.entry(name.to_owned()).or_insert(0);
        *n += 1;
        *n
    }
    pub fn count(&self, name: &str) -> u32 {
        self.0.borrow().get(name).copied().unwrap_or(0)
    }
}
