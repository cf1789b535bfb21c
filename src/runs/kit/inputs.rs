//! What each run receives: its input, decided at the edge (`edge::triggers`,
//! dispatch, the scheduler) and recorded with the instance, and the events a
//! waiting run is sent. Inputs are read back from every journal and index
//! row ever written, so a field's wire shape never changes: new fields come
//! with `#[serde(default)]`.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use super::environment::ActionsOrigin;

/// A pull request's number (never 0: GitHub numbers from 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct PullNumber(u64);

impl PullNumber {
    /// None for 0, which names no pull request.
    pub fn new(n: u64) -> Option<PullNumber> {
        (n != 0).then_some(PullNumber(n))
    }

    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for PullNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// `Option<PullNumber>` on the wire as the number, 0 for none: the shape
/// `pr_number` has had since the first check was recorded.
mod pull_number_or_zero {
    use super::PullNumber;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(n: &Option<PullNumber>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(n.map_or(0, PullNumber::get))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<PullNumber>, D::Error> {
        Ok(PullNumber::new(u64::deserialize(d)?))
    }
}

/// What a `check` instance needs, decided at the edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckInput {
    pub repo: String,
    pub sha: String,
    pub installation_id: u64,
    /// The pull request checked; none for a dispatched or scheduled check.
    /// Written as 0 when none (what instances made before it was typed
    /// recorded, and still read).
    #[serde(with = "pull_number_or_zero")]
    pub pr_number: Option<PullNumber>,
    /// A first-time contributor's fork: the check waits for someone with
    /// write access to press "Approve and run" (GitHub Actions' default).
    #[serde(default)]
    pub needs_approval: bool,
    /// Who caused the event: a bot the repository names in `ignore_bots`
    /// is skipped.
    #[serde(default)]
    pub sender: String,
    /// A dispatch's inputs, exported to the command as `SLUICE_INPUT_<NAME>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, String>,
    /// A merge queue's group: the queue's branch (`gh-readonly-queue/...`)
    /// whose commit this checks. The check reads it before it runs and
    /// skips when GitHub has destroyed the group. Absent in instances made
    /// before merge queues were handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_group: Option<String>,
    /// The commit the change is judged against for `[check] paths`: the
    /// pull request's base, the merge group's base. None for a dispatched
    /// or scheduled check, and in instances made before paths existed:
    /// then every change runs the check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_sha: Option<String>,
    /// The instance that needs this check (a deploy's `needs`): woken
    /// (`kit::needs::NEEDS_EVENT`) when the check ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wakes: Option<String>,
    /// A pipeline job's unit (`kit::pipeline`): this instance runs that
    /// unit alone, started by the commit's check (`wakes`), which did the
    /// supersede, approval and `paths` work before it. None: the commit's
    /// own check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<super::pipeline::JobUnit>,
    /// A unit's job as its parent read it from `.sluice.toml` at the same
    /// commit: the unit runs it without reading the file again (a GitHub
    /// call off the path from a job's end to its dependent's start). None:
    /// the unit reads it (instances made before the parent passed it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<super::pipeline::JobConfig>,
    /// A unit's: the instance ids of the units of the jobs it needs whose
    /// job uploads artifacts (`runs::kit::artifacts`): their archives are
    /// unpacked into its workspace before its command.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts_from: Vec<String>,
    /// Which dependency caches it may read and where it writes one
    /// (`runs::kit::caches`), decided from the signed event when it was
    /// planned: never from the repository's files. None (a dispatch, a
    /// schedule, an instance made before caches): it neither restores nor
    /// saves one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<CacheScope>,
    /// A re-run of a pipeline from GitHub (`kit::pipeline::JobsRerun`):
    /// the jobs it leaves alone keep their results from the attempt it
    /// names. None: every job runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<super::pipeline::JobsRerun>,
}

/// The dependency caches a check may read, in the order it prefers them,
/// and the scope it saves to (none: it saves nothing), as GitHub scopes
/// Actions caches: the default branch's are everyone's; a pull request's
/// its own; a fork's pull request's its own too, and never read by
/// anything else, so nothing a fork writes reaches a same-repository run
/// or a deploy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheScope {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write: Option<String>,
    pub read: Vec<String>,
}

impl CacheScope {
    fn branch(name: &str) -> String {
        format!("branch:{name}")
    }

    /// A pull request's check: its own scope first (a fork's apart), then
    /// the default branch's.
    pub fn pull(number: u64, fork: bool, default_branch: Option<&str>) -> CacheScope {
        let own = match fork {
            true => format!("fork-pr:{number}"),
            false => format!("pr:{number}"),
        };
        let mut read = vec![own.clone()];
        read.extend(default_branch.map(Self::branch));
        CacheScope {
            write: Some(own),
            read,
        }
    }

    /// A commit pushed to `branch` (a deploy's `needs`): its branch's scope,
    /// then the default branch's; the default branch writes for everyone.
    pub fn push(branch: &str, default_branch: Option<&str>) -> CacheScope {
        let own = Self::branch(branch);
        let mut read = vec![own.clone()];
        read.extend(default_branch.map(Self::branch).filter(|d| *d != own));
        CacheScope {
            write: Some(own),
            read,
        }
    }

    /// A merge queue's commit: it reads the default branch's and writes
    /// nothing (its group's branch is gone once it merged).
    pub fn merge_group(default_branch: Option<&str>) -> CacheScope {
        CacheScope {
            write: None,
            read: default_branch.map(Self::branch).into_iter().collect(),
        }
    }
}

impl CheckInput {
    /// What the check is for, as the index records it (`executions.entity`):
    /// the merge queue group's branch, else the pull request (`pr:0` for a
    /// dispatched or scheduled check).
    pub fn entity(&self) -> String {
        match &self.merge_group {
            Some(branch) => format!("branch:{branch}"),
            None => format!("pr:{}", self.pr_number.map_or(0, PullNumber::get)),
        }
    }
}

/// What a `deploy` instance needs: the pushed commit and where it came
/// from. Whether the branch deploys at all is decided inside the run, by
/// `.sluice.toml` on the default branch and the operator's environments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeployInput {
    pub repo: String,
    pub branch: String,
    pub sha: String,
    pub installation_id: u64,
    /// Where the deploy policy is read (`repository.default_branch`).
    pub default_branch: String,
    /// Who caused the event (`ignore_bots`).
    #[serde(default)]
    pub sender: String,
    /// A dispatched deploy of an explicit revision (a rollback, a hotfix):
    /// the queue policy neither skips it nor lets it skip others, and its
    /// head is not re-read, but it waits for the group like any deploy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub imperative: bool,
    /// A dispatch's inputs, exported to the command as `SLUICE_INPUT_<NAME>`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, String>,
    /// Set by `POST /v1/dispatch`: how the request proved where it came
    /// from, which the deploy's grant step weighs against its environment
    /// (`Environments::dispatch_check`). None for a push or a schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch: Option<Dispatched>,
    /// The check of this commit, as the trigger would start it: started
    /// and awaited when `[deploy] needs = ["check"]` (`kit::needs`). None
    /// in instances made before needs existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needs_check: Option<Box<NeededCheck>>,
}

/// The check a run may need (`kit::needs`), as the trigger that made the
/// run planned it: its creation and the check run that carries its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeededCheck {
    pub create: crate::engine::CreateRequest,
    /// Its check run's name (`sluice/check`).
    pub check_run: String,
}

/// How a dispatched deploy was authenticated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatched {
    /// What GitHub Actions' OIDC token proved; None: the repository's HMAC
    /// key alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<ActionsOrigin>,
}

/// What a `release-notes` instance needs, decided at the edge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseInput {
    pub repo: String,
    pub tag: String,
    /// The commit the tag names.
    pub sha: String,
    pub installation_id: u64,
    /// Where `[release_notes]` is read and the pull request is based.
    pub default_branch: String,
    #[serde(default)]
    pub sender: String,
}

/// A push to a default branch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulesInput {
    pub repo: String,
    pub installation_id: u64,
    pub default_branch: String,
    pub sha: String,
}

/// The event a pressed check-run button sends its instance.
pub const CHECK_ACTION_EVENT: &str = "check-run-action";

/// What a pressed button says, as the instance receives it: it checks the
/// check run is its own and the sender may decide (`runs::approval`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckAction {
    pub check_run_id: u64,
    pub identifier: String,
    pub sender: String,
}

/// What a decision says, as the instance receives it (`runs::triggers`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Decision {
    /// Approve or Reject on the check run.
    Button {
        check_run_id: u64,
        identifier: String,
        sender: String,
    },
    /// The approval pull request was closed, merged or not.
    PullClosed {
        number: u64,
        merged: bool,
        sender: String,
        /// The pull request's head when it closed: a merge approves only
        /// the notes as Sluice proposed them.
        #[serde(default)]
        head_sha: Option<String>,
        /// When GitHub dated it (merged, else closed), ms since the epoch:
        /// a decision is judged by when it was made.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decided_ms: Option<i64>,
    },
    /// Re-run on the check run: regenerate the notes, restart the window.
    Replan { check_run_id: u64, sender: String },
}

impl Decision {
    pub fn sender(&self) -> &str {
        match self {
            Decision::Button { sender, .. }
            | Decision::PullClosed { sender, .. }
            | Decision::Replan { sender, .. } => sender,
        }
    }
}

/// What a `cancel-checks` instance ends: the live checks of a pull request
/// GitHub closed, or of a merge queue group GitHub destroyed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum CancelOf {
    Pull {
        number: PullNumber,
    },
    Group {
        /// The group's branch (`gh-readonly-queue/...`).
        branch: String,
        /// GitHub's `reason`: `dequeued`, `invalidated`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The group's commit: only its checks end (the same branch names
        /// a later group of the same pull request on the same parent).
        sha: String,
    },
}

impl CancelOf {
    /// The `executions.entity` of the checks it ends (what the check's
    /// trigger recorded: `pr:<n>`, or `branch:<queue branch>`).
    pub fn entity(&self) -> String {
        match self {
            CancelOf::Pull { number } => format!("pr:{number}"),
            CancelOf::Group { branch, .. } => format!("branch:{branch}"),
        }
    }

    /// The one commit whose checks it ends, if only one's.
    pub fn sha(&self) -> Option<&str> {
        match self {
            CancelOf::Pull { .. } => None,
            CancelOf::Group { sha, .. } => Some(sha),
        }
    }
}

/// What a `cancel-checks` instance needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CancelChecksInput {
    pub repo: String,
    pub installation_id: u64,
    pub of: CancelOf,
}
