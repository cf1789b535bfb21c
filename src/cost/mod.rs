//! What an execution cost, in the units Cloudflare (and GitHub's rate
//! limit) bill it by, counted as the work happens: every Durable Object
//! request and journal row, every D1 statement and the rows D1 reports,
//! every R2 operation by class, every GitHub API call and the sandbox time
//! of every checkout and command. `prices` turns units into dollars.
//!
//! Counting, not estimating: the glue wraps each service an instance uses
//! (`store::metered`, `github::metered`, `sandbox::metered`) so the call
//! itself increments the instance's `Meter`; the engine folds the meter
//! into the instance's record at the end of each pass, before the pass's
//! mirror batch, which counts itself by the statements it sends.
//!
//! Architecture invariant: a leaf (no service, no I/O).

pub mod prices;

use std::cell::RefCell;

use serde::{Deserialize, Serialize};

/// Billed units of one execution (or a sum of executions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostUnits {
    /// Requests to the instance's Durable Object: fetches (create, event,
    /// command, poke) and alarm invocations.
    #[serde(default)]
    pub do_requests: u64,
    /// Wall-clock milliseconds the object was busy running passes (what
    /// Durable Objects bill duration by; in-process waits included).
    #[serde(default)]
    pub do_active_ms: u64,
    /// Rows the instance's own SQLite storage wrote (the journal).
    #[serde(default)]
    pub do_rows_written: u64,
    /// Rows the instance's own storage read.
    #[serde(default)]
    pub do_rows_read: u64,
    /// D1 statements sent (a batch counts each statement).
    #[serde(default)]
    pub d1_statements: u64,
    /// Rows D1 reported read (scanned) and written.
    #[serde(default)]
    pub d1_rows_read: u64,
    #[serde(default)]
    pub d1_rows_written: u64,
    /// R2 class A operations (put, list) and class B (get).
    #[serde(default)]
    pub r2_class_a: u64,
    #[serde(default)]
    pub r2_class_b: u64,
    /// Requests sent to the GitHub API (token, contents, check runs,
    /// deployments, ...), answered or not.
    #[serde(default)]
    pub github_calls: u64,
    /// Milliseconds the sandbox worked for the instance: checkouts and
    /// commands, each counted once.
    #[serde(default)]
    pub sandbox_ms: u64,
}

impl CostUnits {
    pub fn add(&mut self, o: &CostUnits) {
        self.do_requests += o.do_requests;
        self.do_active_ms += o.do_active_ms;
        self.do_rows_written += o.do_rows_written;
        self.do_rows_read += o.do_rows_read;
        self.d1_statements += o.d1_statements;
        self.d1_rows_read += o.d1_rows_read;
        self.d1_rows_written += o.d1_rows_written;
        self.r2_class_a += o.r2_class_a;
        self.r2_class_b += o.r2_class_b;
        self.github_calls += o.github_calls;
        self.sandbox_ms += o.sandbox_ms;
    }

    pub fn is_zero(&self) -> bool {
        *self == CostUnits::default()
    }
}

/// One instance's running count, shared by the wrappers of the services a
/// pass uses. Single-threaded (one Durable Object, one isolate).
#[derive(Debug, Default)]
pub struct Meter {
    units: RefCell<CostUnits>,
    /// Sandbox processes whose run time is already counted (a poll of a
    /// finished process answers its duration every time).
    counted_processes: RefCell<Vec<String>>,
}

/// Processes remembered per meter: a run starts a handful; past this many
/// the oldest are forgotten (a process polled again after that long is
/// counted again, an overcount of one command at worst).
const COUNTED_PROCESSES_MAX: usize = 64;

impl Meter {
    pub fn new() -> Meter {
        Meter::default()
    }

    pub fn record(&self, f: impl FnOnce(&mut CostUnits)) {
        f(&mut self.units.borrow_mut());
    }

    /// What was counted so far, without resetting.
    pub fn peek(&self) -> CostUnits {
        *self.units.borrow()
    }

    /// What was counted since the last take; resets the count.
    pub fn take(&self) -> CostUnits {
        std::mem::take(&mut *self.units.borrow_mut())
    }

    /// Counts a finished process's run time once per process id.
    pub fn process_finished(&self, process_id: &str, duration_ms: i64) {
        let mut seen = self.counted_processes.borrow_mut();
        if seen.iter().any(|p| p == process_id) {
            return;
        }
        if seen.len() >= COUNTED_PROCESSES_MAX {
            seen.remove(0);
        }
        seen.push(process_id.to_owned());
        self.record(|u| u.sandbox_ms += duration_ms.max(0) as u64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_resets_and_a_process_counts_once() {
        let m = Meter::new();
        m.record(|u| u.d1_statements += 2);
        m.process_finished("p1", 1_500);
        m.process_finished("p1", 1_500);
        let t = m.take();
        assert_eq!((t.d1_statements, t.sandbox_ms), (2, 1_500));
        assert!(m.take().is_zero());
        m.process_finished("p1", 1_500);
        assert!(m.take().is_zero());
    }
}
