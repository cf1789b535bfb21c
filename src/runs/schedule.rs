//! Schedules: `[[schedule]]` in the default branch's `.sluice.toml`
//!
//! ```toml
//! [[schedule]]
//! cron = "0 3 * * *"     # POSIX cron, UTC
//! run = "check"          # or "deploy"
//! branch = "main"        # optional: the default branch
//! ```
//!
//! Two halves. The `schedules` run, started by every push to a default
//! branch, reads the config there and records its schedules in D1
//! (`store::schedules`). The cron sweep (`Scheduler::fire`) fires each
//! schedule's latest slot once: the slot is claimed in `schedule_slots`
//! before its instance is created (a second tick, or two sweeps at once,
//! find the claim), and a claim whose create did not happen is created by
//! the next tick. A slot whose commit already has a live instance of the
//! same run (a webhook's) starts nothing.

use croner::Cron;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::engine::{CreateRequest, Ctx, RunError, RunOutcome};
use crate::github::GitHub;
use crate::store::schedules::{self as store, RepoSchedules, Slot};
use crate::store::Database;

use super::check::NO_PULL_REQUEST;
use super::config::{self, ConfigState, ScheduleConfig, CONFIG_PATH};
use super::registry::{Run, RunName};
use super::report::{github_failure, github_step};
use super::sweep::Instances;
use super::tags::FailureTag;
use super::triggers::{check_create, deploy_create, RunTarget};
use super::RunEnv;

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
        match RunName::parse(&s.run) {
            Some(RunName::Check | RunName::Deploy) => {}
            _ => {
                return Err(at(format!(
                    "run {:?} cannot be scheduled (check, deploy)",
                    s.run
                )))
            }
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

// ---------------------------------------------------------------------------
// The `schedules` run: record the default branch's schedules
// ---------------------------------------------------------------------------

/// A push to a default branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulesInput {
    pub repo: String,
    pub installation_id: u64,
    pub default_branch: String,
    pub sha: String,
}

pub struct SchedulesRun;

#[async_trait::async_trait(?Send)]
impl Run for SchedulesRun {
    const NAME: RunName = RunName::Schedules;
    const GATED: bool = false;
    type Input = SchedulesInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &SchedulesInput,
    ) -> Result<RunOutcome, RunError> {
        record_schedules(ctx, env, input).await
    }
}

/// Reads the config on the default branch (its newest state, not the
/// pushed commit's: the record must end as the branch is) and records it.
async fn record_schedules(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &SchedulesInput,
) -> Result<RunOutcome, RunError> {
    let (state, read_ms): (ConfigState, i64) = ctx
        .step("read schedules", github_step(), |_| async {
            let read_ms = env.clock.now_ms();
            let text = env
                .github
                .file_at(
                    input.installation_id,
                    &input.repo,
                    CONFIG_PATH,
                    &input.default_branch,
                )
                .await
                .map_err(github_failure)?;
            Ok((
                text.map_or(ConfigState::Missing, |t| config::parse(&t)),
                read_ms,
            ))
        })
        .await?;
    let (schedules, error) = match &state {
        ConfigState::Missing => (Some(Vec::new()), None),
        ConfigState::Valid { config } => {
            (Some(resolve(&config.schedule, &input.default_branch)), None)
        }
        ConfigState::Invalid { message } => (None, Some(message.clone())),
    };
    let count = schedules.as_ref().map(Vec::len);
    let row = RepoSchedules {
        repo: input.repo.clone(),
        installation_id: i64::try_from(input.installation_id).unwrap_or(i64::MAX),
        default_branch: input.default_branch.clone(),
        schedules_json: json!(schedules.unwrap_or_default()).to_string(),
        error: error.clone(),
        read_ms,
    };
    let keep = count.is_none();
    let _: () = ctx
        .step(
            "record schedules",
            crate::engine::StepConfig::default(),
            |_| async {
                store::record(env.db, &row, keep)
                    .await
                    .map_err(|e| FailureTag::Gate.retryable(e.to_string()))
            },
        )
        .await?;
    Ok(RunOutcome::Complete(
        json!({ "schedules": count, "error": error }),
    ))
}

// ---------------------------------------------------------------------------
// Firing: the cron sweep's half
// ---------------------------------------------------------------------------

/// What one firing did, logged with the sweep's report.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FireReport {
    pub fired: u32,
    /// Slots whose commit already had a live instance of the run.
    pub live: u32,
    pub failed: u32,
}

pub struct Scheduler<'a> {
    pub db: &'a dyn Database,
    pub github: &'a GitHub<'a>,
    pub instances: &'a dyn Instances,
}

impl Scheduler<'_> {
    /// Fires every recorded schedule whose slot is due at `now_ms`, at most
    /// `FIRES_PER_TICK_MAX` new ones (the next tick fires the rest).
    pub async fn fire(&self, now_ms: i64) -> FireReport {
        let mut report = FireReport::default();
        let mut after = String::new();
        for _ in 0..SCHEDULED_REPO_PAGES_MAX {
            let Ok(repos) = store::with_schedules(self.db, &after, SCHEDULED_REPOS_PAGE).await
            else {
                report.failed += 1;
                break;
            };
            for repo in &repos {
                self.fire_repo(repo, now_ms, &mut report).await;
            }
            match repos.last() {
                Some(last) if repos.len() == SCHEDULED_REPOS_PAGE as usize => {
                    after = last.repo.clone()
                }
                _ => break,
            }
        }
        let purged =
            store::purge_slots(self.db, now_ms - SLOTS_KEPT_MS, SCHEDULED_REPOS_PAGE).await;
        if purged.is_err() {
            report.failed += 1;
        }
        report
    }

    async fn fire_repo(&self, repo: &RepoSchedules, now_ms: i64, report: &mut FireReport) {
        let list: Vec<Scheduled> = serde_json::from_str(&repo.schedules_json).unwrap_or_default();
        for s in &list {
            if report.fired + report.live + report.failed >= FIRES_PER_TICK_MAX {
                return;
            }
            let Some(slot_ms) = parse_cron(&s.cron).ok().and_then(|c| due_slot(&c, now_ms)) else {
                continue;
            };
            match self.fire_slot(repo, s, slot_ms, now_ms).await {
                Ok(Fired::Created) => report.fired += 1,
                Ok(Fired::Live) => report.live += 1,
                Ok(Fired::Already) => {}
                Err(_) => report.failed += 1,
            }
        }
    }

    async fn fire_slot(
        &self,
        repo: &RepoSchedules,
        s: &Scheduled,
        slot_ms: i64,
        now_ms: i64,
    ) -> Result<Fired, String> {
        let slot_key = format!("{}:{}:{}", repo.repo, s.identity(), slot_ms / 1000);
        match store::slot(self.db, &slot_key)
            .await
            .map_err(|e| e.to_string())?
        {
            Some(claimed) if claimed.state == "claimed" => return self.create(&claimed).await,
            Some(_) => return Ok(Fired::Already),
            None => {}
        }
        let installation = u64::try_from(repo.installation_id).map_err(|e| e.to_string())?;
        let sha = self
            .github
            .branch_head(installation, &repo.repo, &s.branch)
            .await
            .map_err(|e| e.message)?
            .ok_or_else(|| format!("{} has no branch {}", repo.repo, s.branch))?;
        let create = planned(repo, s, installation, &sha, slot_ms)
            .ok_or_else(|| format!("cannot schedule {} at {sha}", s.run))?;
        let live = store::live_instance_of(self.db, &s.run, &repo.repo, &sha)
            .await
            .map_err(|e| e.to_string())?;
        let slot = Slot {
            slot_key,
            state: if live.is_some() { "live" } else { "claimed" }.into(),
            instance_id: live
                .clone()
                .unwrap_or_else(|| create.id().as_str().to_owned()),
            create_json: json!(create).to_string(),
        };
        if !store::claim(self.db, &slot, &repo.repo, now_ms)
            .await
            .map_err(|e| e.to_string())?
        {
            return Ok(Fired::Already);
        }
        if live.is_some() {
            return Ok(Fired::Live);
        }
        self.create(&slot).await
    }

    /// Creates a claimed slot's instance (creating an existing one finds it).
    async fn create(&self, slot: &Slot) -> Result<Fired, String> {
        let create: CreateRequest =
            serde_json::from_str(&slot.create_json).map_err(|e| e.to_string())?;
        self.instances.poke(&create).await?;
        store::mark_created(self.db, &slot.slot_key)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Fired::Created)
    }
}

enum Fired {
    Created,
    Live,
    Already,
}

/// The instance a slot starts: the run of the branch's head, named by the
/// schedule and the slot.
fn planned(
    repo: &RepoSchedules,
    s: &Scheduled,
    installation: u64,
    sha: &str,
    slot_ms: i64,
) -> Option<CreateRequest> {
    let at = RunTarget {
        repo: &repo.repo,
        default_branch: Some(&repo.default_branch),
        installation_id: installation,
        sha,
        sender: "schedule",
    };
    let attempt = format!("schedule-{}-{}", s.identity(), slot_ms / 1000);
    match RunName::parse(&s.run)? {
        RunName::Deploy => deploy_create(&at, &s.branch, None, Some(&attempt)),
        RunName::Check => check_create(&at, NO_PULL_REQUEST, false, Some(&attempt)).map(|mut c| {
            c.entity = Some(format!("branch:{}", s.branch));
            c
        }),
        _ => None,
    }
}
