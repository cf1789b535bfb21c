//! What an instance's own storage holds: its record (with its run
//! `Status`), its step journal and its event inbox. The storage is the
//! authoritative truth of the instance; D1 holds a mirror (see
//! `store::executions`).
//!
//! Architecture invariant: above the leaves only (it uses `cost`). The engine (which writes it) and the
//! store (which keeps it, `store::journal::JournalStore`, and mirrors it to
//! D1) both depend on it; it depends on neither, so the store never depends
//! on the engine.

pub mod status;

use serde::{Deserialize, Serialize};

pub use status::Status;

/// The instance itself, one row in its own storage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceRecord {
    pub id: String,
    /// The semantic key the id was normalized from.
    pub key: String,
    pub run: String,
    /// The run's input, JSON.
    pub input: String,
    pub status: Status,
    pub repo: Option<String>,
    pub entity: Option<String>,
    pub sha: Option<String>,
    pub created_ms: i64,
    /// Journaled start of the first pass: the run ceiling counts from here,
    /// so it is the same on every replay.
    pub started_ms: Option<i64>,
    pub wake_at_ms: Option<i64>,
    pub finished_ms: Option<i64>,
    pub reason: Option<String>,
    pub error_tag: Option<String>,
    pub error_message: Option<String>,
    /// The result, JSON, when complete.
    pub output: Option<String>,
    pub max_steps: u32,
    pub max_duration_ms: i64,
    /// Executor passes started and passes that ended normally: a gap means
    /// the executor died mid-pass.
    pub passes: u32,
    pub clean_passes: u32,
    /// Journal revision already mirrored to D1.
    pub mirrored_rev: i64,
    /// Incremented by every operator restart, so side effects keyed by the
    /// instance (sandbox process ids) are fresh after a restart.
    #[serde(default)]
    pub generation: u32,
    /// Cost counters across all passes (mirrored to D1).
    #[serde(default)]
    pub journal_writes: u64,
    #[serde(default)]
    pub index_round_trips: u64,
    /// Billed units across all passes (`crate::cost`), mirrored to D1.
    #[serde(default)]
    pub costs: crate::cost::CostUnits,
    /// The last D1 mirror failed: the next pass (or the sweep's poke of a
    /// finished instance) sends it again.
    #[serde(default)]
    pub mirror_pending: bool,
    /// Only the object holds this instance yet: a single create writes its
    /// index row with the first pass (before its first step body, or with
    /// its mirror), not before it answers. Cleared once D1 has the row
    /// (ADR-0018, `docs/adr/0018-a-single-creates-row-rides-its-first-pass.md`).
    #[serde(default)]
    pub row_pending: bool,
    /// Passes in a row whose row write D1 refused: the retry backs off.
    #[serde(default)]
    pub row_refusals: u32,
}

/// What an operator asked of a pass in progress; the next durable call
/// honours it. The journal keeps it until the driver carried it out, so a
/// pass that dies does not drop it (`JournalStore::keep_interrupt`).
/// Ordered by strength: of two asked of one pass, the greater stands (a
/// terminate is never softened into a pause), and `Option::max` merges a
/// held one with none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Interrupt {
    Pause,
    Terminate,
}

impl Interrupt {
    pub fn as_str(self) -> &'static str {
        match self {
            Interrupt::Pause => "pause",
            Interrupt::Terminate => "terminate",
        }
    }

    pub fn parse(s: &str) -> Option<Interrupt> {
        match s {
            "pause" => Some(Interrupt::Pause),
            "terminate" => Some(Interrupt::Terminate),
            _ => None,
        }
    }

    /// The status an instance takes when this is carried out.
    pub fn status(self) -> Status {
        match self {
            Interrupt::Pause => Status::Paused,
            Interrupt::Terminate => Status::Terminated,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    Step,
    Sleep,
    Wait,
}

impl EntryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryKind::Step => "step",
            EntryKind::Sleep => "sleep",
            EntryKind::Wait => "wait",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EntryState {
    /// Result journaled; replay returns it.
    Done,
    /// Ended in a typed error; replay returns the same error.
    Failed,
    /// An attempt failed and the next waits for its backoff.
    Retrying,
    /// A sleep or an event wait in progress.
    Waiting,
}

impl EntryState {
    pub fn as_str(self) -> &'static str {
        match self {
            EntryState::Done => "done",
            EntryState::Failed => "failed",
            EntryState::Retrying => "retrying",
            EntryState::Waiting => "waiting",
        }
    }
}

/// One durable call of the run body, at its position `seq`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub seq: u32,
    pub name: String,
    pub kind: EntryKind,
    pub state: EntryState,
    /// Done: the result JSON. Failed: the `RunError` JSON.
    pub value: Option<String>,
    pub error_tag: Option<String>,
    pub error_message: Option<String>,
    pub attempts: u32,
    pub started_ms: i64,
    pub finished_ms: Option<i64>,
    pub wake_at_ms: Option<i64>,
    /// Write revision, increasing across the journal: what changed since the
    /// last D1 mirror is `rev > mirrored_rev`.
    pub rev: i64,
}

/// An event sent to the instance, kept until a wait consumes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: i64,
    pub event_type: String,
    pub payload: String,
    pub received_ms: i64,
}
