//! Shared harness for native tests: real SQLite for the journal and for
//! D1's tables (the same migration files), and a clock the test drives.
#![allow(dead_code)]

pub mod fake_deployments;
pub mod fake_releases;
pub mod fakes;
pub mod keys;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use async_trait::async_trait;
use sluice::engine::{Clock, Engine, InterruptFlag};
use sluice::store::journal::SqlJournal;
use sluice::store::sqlite::SqliteDb;
use sluice::store::{Database, Row, Stmt, StoreError};

/// A clock that moves only when told to, or when every future a
/// `block_on` drives is waiting on a timer: then virtual time jumps to the
/// earliest timer (as tokio's paused time does). So a step timeout fires as
/// soon as its body is pending on nothing else, and concurrent timers (a
/// heartbeat beside a long-poll) fire in deadline order.
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

/// A pending in-process sleep, registered for `block_on` to fire.
struct Timer {
    id: u64,
    deadline_ms: i64,
    now: Rc<Cell<i64>>,
    waker: Option<std::task::Waker>,
}

thread_local! {
    static TIMERS: RefCell<Vec<Timer>> = const { RefCell::new(Vec::new()) };
    static TIMER_IDS: Cell<u64> = const { Cell::new(0) };
}

struct Sleep {
    id: u64,
    deadline_ms: i64,
    now: Rc<Cell<i64>>,
}

impl Future for Sleep {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.now.get() >= self.deadline_ms {
            return std::task::Poll::Ready(());
        }
        TIMERS.with(|t| {
            let mut t = t.borrow_mut();
            match t.iter_mut().find(|x| x.id == self.id) {
                Some(x) => x.waker = Some(cx.waker().clone()),
                None => t.push(Timer {
                    id: self.id,
                    deadline_ms: self.deadline_ms,
                    now: self.now.clone(),
                    waker: Some(cx.waker().clone()),
                }),
            }
        });
        std::task::Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        let id = self.id;
        let _ = TIMERS.try_with(|t| t.borrow_mut().retain(|x| x.id != id));
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
        let id = TIMER_IDS.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        Box::pin(Sleep {
            id,
            deadline_ms: self.0.get() + ms.max(0),
            now: self.0.clone(),
        })
    }
}

/// Fires the earliest registered timer: its clock jumps to the deadline.
/// False when there is none.
fn fire_earliest_timer() -> bool {
    let due = TIMERS.with(|t| {
        let mut t = t.borrow_mut();
        let i = (0..t.len()).min_by_key(|&i| t[i].deadline_ms)?;
        Some(t.remove(i))
    });
    let Some(timer) = due else {
        return false;
    };
    timer.now.set(timer.now.get().max(timer.deadline_ms));
    if let Some(w) = timer.waker {
        w.wake();
    }
    true
}

/// Self-wakes in a row `block_on` allows before it calls the future a spin
/// (a fake polled in a loop): far more than any real chain of wake-ups.
const SELF_WAKES_MAX: u32 = 100_000;
/// Timers one `block_on` may fire: a 60-minute wait in 20 s long-polls with
/// a 60 s heartbeat beside it is a few hundred.
const TIMERS_FIRED_MAX: u32 = 1_000_000;

struct Flag(std::sync::atomic::AtomicBool);

impl futures::task::ArcWake for Flag {
    fn wake_by_ref(arc_self: &std::sync::Arc<Self>) {
        arc_self.0.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Runs a future to completion on this thread in virtual time: when it is
/// pending and nothing woke it, the earliest timer fires.
pub fn block_on<F: Future>(f: F) -> F::Output {
    use std::sync::atomic::Ordering;
    let flag = std::sync::Arc::new(Flag(std::sync::atomic::AtomicBool::new(false)));
    let waker = futures::task::waker(flag.clone());
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let (mut spins, mut fired) = (0u32, 0u32);
    loop {
        flag.0.store(false, Ordering::SeqCst);
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        if flag.0.load(Ordering::SeqCst) {
            spins += 1;
            assert!(
                spins < SELF_WAKES_MAX,
                "block_on: the future keeps waking itself"
            );
            continue;
        }
        spins = 0;
        fired += 1;
        assert!(fired < TIMERS_FIRED_MAX, "block_on: timers keep firing");
        assert!(
            fire_earliest_timer(),
            "block_on: the future is pending with no timer to fire (a deadlock, or frozen timers)"
        );
    }
}

/// D1 stand-in that counts round trips (each call is one).
pub struct CountingDb {
    pub db: SqliteDb,
    pub calls: Cell<u32>,
    pub batches: Cell<u32>,
    /// Statements received (each statement of a batch counts).
    pub statements: Cell<u32>,
    pub fail_next_batch: Cell<bool>,
    /// Fails this many coming `run` calls (a D1 write that errors).
    pub fail_next_runs: Cell<u32>,
    /// Fails the coming `all` calls whose SQL starts with a prefix, so many
    /// times each (one statement kind erroring, as D1 under load).
    pub fail_matching: RefCell<Vec<(&'static str, u32)>>,
}

impl CountingDb {
    /// The next `n` `all` calls whose SQL starts with `prefix` fail.
    pub fn fail_next_matching(&self, prefix: &'static str, n: u32) {
        self.fail_matching.borrow_mut().push((prefix, n));
    }

    fn injected_all_failure(&self, sql: &str) -> bool {
        let mut faults = self.fail_matching.borrow_mut();
        let hit = faults
            .iter_mut()
            .find(|(prefix, n)| *n > 0 && sql.starts_with(prefix));
        hit.map(|(_, n)| *n -= 1).is_some()
    }
}

impl CountingDb {
    pub fn new() -> CountingDb {
        CountingDb {
            db: SqliteDb::with_migrations().expect("migrations apply"),
            calls: Cell::new(0),
            batches: Cell::new(0),
            statements: Cell::new(0),
            fail_next_batch: Cell::new(false),
            fail_next_runs: Cell::new(0),
            fail_matching: RefCell::new(Vec::new()),
        }
    }
}

#[async_trait(?Send)]
impl Database for CountingDb {
    async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
        self.calls.set(self.calls.get() + 1);
        self.statements.set(self.statements.get() + 1);
        if self.injected_all_failure(&stmt.sql) {
            return Err(StoreError::Query("injected statement failure".into()));
        }
        self.db.all(stmt).await
    }
    async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
        self.calls.set(self.calls.get() + 1);
        self.statements.set(self.statements.get() + 1);
        if self.fail_next_runs.get() > 0 {
            self.fail_next_runs.set(self.fail_next_runs.get() - 1);
            return Err(StoreError::Query("injected run failure".into()));
        }
        self.db.run(stmt).await
    }
    async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
        self.calls.set(self.calls.get() + 1);
        self.batches.set(self.batches.get() + 1);
        self.statements
            .set(self.statements.get() + stmts.len() as u32);
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
    /// The instance's cost meter, as its Durable Object holds one.
    pub meter: sluice::cost::Meter,
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
    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<String>, String> {
        let mut keys: Vec<String> = self
            .0
            .borrow()
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        keys.sort();
        keys.truncate(limit as usize);
        Ok(keys)
    }
    async fn delete(&self, key: &str) -> Result<(), String> {
        self.0.borrow_mut().remove(key);
        Ok(())
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
            meter: sluice::cost::Meter::new(),
        }
    }

    pub fn engine(&self) -> Engine<'_> {
        Engine {
            journal: &self.journal,
            blobs: Some(&self.blobs),
            index: self.index.as_ref(),
            clock: &self.clock,
            meter: Some(&self.meter),
            on_indexed: None,
        }
    }

    /// Creates as a delivery's or a batch's creates are: the row indexed
    /// first (queued and due), then the object. Returns the instance id.
    #[allow(dead_code)]
    pub fn create_indexed(&self, req: sluice::engine::CreateRequest) -> String {
        let mut batch = [req];
        let now = sluice::engine::Clock::now_ms(&self.clock);
        let index = self.index.as_ref();
        block_on(sluice::engine::index_creates(index, &mut batch, now)).expect("row");
        block_on(self.engine().create(&batch[0]))
            .expect("create")
            .id
    }

    /// The journal's entry names, in order.
    pub fn journal_names(&self) -> Vec<String> {
        use sluice::store::journal::JournalStore;
        let entries = self.journal.entries().expect("journal");
        entries.into_iter().map(|e| e.name).collect()
    }
}

/// Writes an instance's `executions` row with this status (a serial waiter
/// is live while its instance is queued, running or waiting), directly on
/// the SQLite underneath, so no round trip is counted.
pub fn set_instance_status(db: &SqliteDb, id: &str, status: &str) {
    block_on(db.run(sluice::stmt!(
        "INSERT INTO executions (id, key, run, status, input_json, created_ms, updated_ms) \
         VALUES (?1, ?1, 'deploy', ?2, 'null', 0, 0) \
         ON CONFLICT (id) DO UPDATE SET status = excluded.status",
        id,
        status,
    )))
    .expect("executions row");
}

/// An `executions` row for the instance, status `waiting`, unless it has one.
pub fn ensure_instance(db: &SqliteDb, id: &str) {
    block_on(db.run(sluice::stmt!(
        "INSERT OR IGNORE INTO executions (id, key, run, status, input_json, created_ms, updated_ms) \
         VALUES (?1, ?1, 'deploy', 'waiting', 'null', 0, 0)",
        id,
    )))
    .expect("executions row");
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

/// Creates every table of a journal, which its first writes would, so a
/// test can put a trigger on one before anything was written there.
pub fn create_every_journal_table<S: sluice::store::SyncSql>(journal: &SqlJournal<S>) {
    let statements =
        sluice::store::sql::split_statements(sluice::store::journal_tables::JOURNAL_SCHEMA);
    for s in statements {
        journal.storage().exec(&s, &[]).unwrap();
    }
    journal.reread().unwrap();
}
