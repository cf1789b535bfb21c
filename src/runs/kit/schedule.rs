//! Schedules: `[[schedule]]` in the default branch's `.sluice.toml`
//!
//! ```toml
//! [[schedule]]
//! cron = "0 3 * * *"     # POSIX cron, UTC
//! run = "check"          # or "deploy"
//! branch = "main"        # optional: the default branch
//! ```
//!
//! Two halves, over this file's parsing and validation. The `schedules`
//! run (`run::schedules`), started by every push to a default branch, reads
//! the config there and records its schedules in D1 (`store::schedules`).
//! The cron sweep (`edge::scheduler::Scheduler::fire`) fires each
//! schedule's latest slot once: the slot is claimed in `schedule_slots`
//! before its instance is created (a second tick, or two sweeps at once,
//! find the claim), and a claim whose create did not happen is created by
//! the next tick. A slot whose commit already has a live instance of the
//! same run (a webhook's) starts nothing.

use croner::Cron;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The runs a schedule may start. The registry's test checks this is
/// exactly the runs whose `Run::SCHEDULABLE` is true (`edge::registry`);
/// it lives here because the config's validation, a kit concern, needs it.
pub const SCHEDULABLE_RUNS: [&str; 2] = ["check", "deploy"];

/// A repository's schedules are few (a nightly, a weekly).
pub const SCHEDULES_MAX: usize = 10;
/// A slot still fires when the sweep reaches it this late: the sweep runs
/// every minute, and ten cover a few lost ticks (a Worker deploy, an
/// outage) without firing a slot long past.
pub const SCHEDULE_LATE_MS_MAX: i64 = 10 * 60_000;
/// Repositories with schedules read per D1 page.
pub const SCHEDULED_REPOS_PAGE: u32 = 1_000;
/// Pages read per tick: 10,000 repositories with schedules, more than one
/// D1 database serves well (docs/capacity.md); past it, shard.
pub const SCHEDULED_REPO_PAGES_MAX: u32 = 10;
/// New slots fired per tick (each a few GitHub and D1 calls, well inside
/// one invocation's subrequest limit); the rest fire on the next ticks,
/// so 500 slots due at once all fire within the 10-minute lateness bound.
pub const FIRES_PER_TICK_MAX: u32 = 50;
/// Schedules fire at most this often: a run is a check run, a container
/// and installation rate limit; a cron every minute is a mistake or abuse.
pub const SCHEDULE_INTERVAL_MS_MIN: i64 = 15 * 60_000;
/// Occurrences inspected to check the interval: every gap of any cron
/// within a day shows in the first 200 at 15-minute spacing or wider.
const INTERVAL_SAMPLES: usize = 200;
/// Slot records are kept this long: past the lateness bound, no tick can
/// reach their slot again.
pub const SLOTS_KEPT_MS: i64 = 24 * 3600 * 1000;

/// One `[[schedule]]`: a run fired on a cron, on a branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// Five fields, UTC: `"0 3 * * *"`.
    pub cron: String,
    /// `check` or `deploy`.
    pub run: String,
    /// Default: the repository's default branch.
    #[serde(default)]
    pub branch: Option<String>,
}

/// One schedule as recorded: what fires and on which branch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scheduled {
    pub cron: String,
    pub run: String,
    pub branch: String,
}

impl Scheduled {
    /// Names the schedule across config edits: the same cron, run and
    /// branch are the same schedule wherever the file lists it.
    pub fn identity(&self) -> String {
        let digest = Sha256::digest(format!("{}|{}|{}", self.cron, self.run, self.branch));
        hex::encode(&digest[..6])
    }
}

/// A cron expression (five fields, UTC) that fires at least once a year
/// and at most every 15 minutes, or why not.
pub fn parse_schedule_cron(expr: &str) -> Result<Cron, String> {
    let cron = parse_cron(expr)?;
    // A fixed start keeps validation deterministic (2026-01-01T00:00Z).
    let start = chrono::DateTime::from_timestamp(1_767_225_600, 0).ok_or("bad reference time")?;
    let mut it = cron.iter_after(start);
    let Some(mut last) = it.next() else {
        return Err(format!("cron {expr:?} never fires"));
    };
    for next in it.take(INTERVAL_SAMPLES) {
        if (next - last).num_milliseconds() < SCHEDULE_INTERVAL_MS_MIN {
            return Err(format!(
                "cron {expr:?} fires more often than every {} minutes",
                SCHEDULE_INTERVAL_MS_MIN / 60_000
            ));
        }
        last = next;
    }
    Ok(cron)
}

/// A cron expression (five fields, UTC), or why not.
pub fn parse_cron(expr: &str) -> Result<Cron, String> {
    let fields = expr.split_whitespace().count();
    if fields != 5 {
        return Err(format!(
            "cron {expr:?} has {fields} fields; five are expected (minute hour day month weekday)"
        ));
    }
    expr.parse::<Cron>()
        .map_err(|e| format!("cron {expr:?} is invalid: {e}"))
}

/// Checks `[[schedule]]` (part of `config::validate`).
pub fn validate(list: &[ScheduleConfig]) -> Result<(), String> {
    if list.len() > SCHEDULES_MAX {
        return Err(format!("at most {SCHEDULES_MAX} [[schedule]] entries"));
    }
    for (i, s) in list.iter().enumerate() {
        let at = |m: String| format!("[[schedule]] {}: {m}", i + 1);
        parse_schedule_cron(&s.cron).map_err(at)?;
        if !SCHEDULABLE_RUNS.contains(&s.run.as_str()) {
            return Err(at(format!(
                "run {:?} cannot be scheduled ({})",
                s.run,
                SCHEDULABLE_RUNS.join(", ")
            )));
        }
        if s.branch.as_deref().is_some_and(|b| b.trim().is_empty()) {
            return Err(at("branch is empty".into()));
        }
    }
    Ok(())
}

/// The schedules as recorded, each on its branch.
pub fn resolve(list: &[ScheduleConfig], default_branch: &str) -> Vec<Scheduled> {
    list.iter()
        .map(|s| Scheduled {
            cron: s.cron.trim().to_owned(),
            run: s.run.clone(),
            branch: s
                .branch
                .clone()
                .unwrap_or_else(|| default_branch.to_owned()),
        })
        .collect()
}

/// The slot to fire at `now_ms`: the latest occurrence at or before now,
/// if it is at most `SCHEDULE_LATE_MS_MAX` old.
pub fn due_slot(cron: &Cron, now_ms: i64) -> Option<i64> {
    let now = chrono::DateTime::from_timestamp_millis(now_ms)?;
    let slot = cron.find_previous_occurrence(&now, true).ok()?;
    let slot_ms = slot.timestamp_millis();
    (now_ms - slot_ms <= SCHEDULE_LATE_MS_MAX).then_some(slot_ms)
}
