//! The cron sweep's half of schedules: fires each recorded schedule's due
//! slot once (`kit::schedule` has the parsing; the `schedules` run records
//! them).

use serde_json::json;

use crate::engine::CreateRequest;
use crate::github::GitHub;
use crate::store::schedules::{self as store, RepoSchedules, Slot};
use crate::store::Database;

use crate::runs::kit::key::Attempt;
use crate::runs::kit::schedule::{
    due_slot, parse_cron, Scheduled, FIRES_PER_TICK_MAX, SCHEDULED_REPOS_PAGE,
    SCHEDULED_REPO_PAGES_MAX, SLOTS_KEPT_MS,
};
use crate::runs::kit::Run;
use crate::runs::run::deploy::DeployRun;

use super::registry;
use super::sweep::Instances;
use super::triggers::{check_request, deploy_request, RunTarget};

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
    let attempt = Some(Attempt::Schedule(format!(
        "{}-{}",
        s.identity(),
        slot_ms / 1000
    )));
    match registry::capabilities(&s.run)? {
        c if !c.schedulable => None,
        _ if s.run == DeployRun::NAME.as_str() => deploy_request(&at, &s.branch, None, attempt),
        _ => check_request(&at, None, false, attempt).map(|mut c| {
            c.entity = Some(format!("branch:{}", s.branch));
            c
        }),
    }
}
