//! The stable tags runs give what they record: step failures (`FailureTag`,
//! the journal's and the API's `error_tag`) and skips (`SkipTag`, the
//! instance's tag when it ends skipped). One enum each, one string form
//! each, so a run never spells a tag twice.

use serde::{Deserialize, Serialize};

use crate::engine::StepFailure;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureTag {
    /// GitHub's REST API failed (the message says how).
    GitHubApi,
    /// The sandbox agent did not answer or refused.
    SandboxUnavailable,
    /// A checkout failed (a flaky network, a missing commit).
    CheckoutFailed,
    /// The sandbox no longer knows a running process (its container went).
    ProcessLost,
    /// A process ran on past every round its timeout allows.
    ProcessWedged,
    LogUploadFailed,
    /// A gate's D1 statement failed, or answered what it never should.
    Gate,
    /// A statement of another index table (a release's approval) failed.
    Index,
    /// The sandbox is leased to another execution.
    LeaseBusy,
    /// The fence refused a spawn: the execution no longer holds its group.
    GroupLost,
    /// A deploy's holder could not read the branch head at its dequeue
    /// (distinct from `GitHubApi`, which an older version recorded there
    /// and then deployed: a replay keeps each meaning).
    HeadUnreadable,
    WakeFailed,
    NotifyFailed,
    /// The probe run's side effect failed.
    EffectFailed,
    /// A job's artifacts could not be packed, stored or unpacked.
    ArtifactFailed,
}

impl FailureTag {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureTag::GitHubApi => "GitHubApi",
            FailureTag::SandboxUnavailable => "SandboxUnavailable",
            FailureTag::CheckoutFailed => "CheckoutFailed",
            FailureTag::ProcessLost => "ProcessLost",
            FailureTag::ProcessWedged => "ProcessWedged",
            FailureTag::LogUploadFailed => "LogUploadFailed",
            FailureTag::Gate => "Gate",
            FailureTag::Index => "Index",
            FailureTag::LeaseBusy => "LeaseBusy",
            FailureTag::GroupLost => "GroupLost",
            FailureTag::HeadUnreadable => "HeadUnreadable",
            FailureTag::WakeFailed => "WakeFailed",
            FailureTag::NotifyFailed => "NotifyFailed",
            FailureTag::EffectFailed => "EffectFailed",
            FailureTag::ArtifactFailed => "ArtifactFailed",
        }
    }

    pub fn retryable(self, message: impl Into<String>) -> StepFailure {
        StepFailure::retryable(self.as_str(), message)
    }

    pub fn fatal(self, message: impl Into<String>) -> StepFailure {
        StepFailure::fatal(self.as_str(), message)
    }

    /// A failure of this tag, retryable as `retryable` says.
    pub fn failure(self, message: impl Into<String>, retryable: bool) -> StepFailure {
        StepFailure {
            tag: self.as_str().to_owned(),
            message: message.into(),
            retryable,
        }
    }

    /// Whether `f` carries this tag.
    pub fn is(self, f: &StepFailure) -> bool {
        f.tag == self.as_str()
    }
}

/// The tag an instance that ended skipped records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SkipTag {
    /// Not run on purpose: superseded, not current, an operator's skip.
    RunSkipped,
    /// Waited past its queued timeout behind a live holder (ADR-0004).
    /// (ADR-0004: docs/adr/0004-serialized-run-groups.md)
    SerialQueueTimedOut,
}

impl SkipTag {
    pub fn as_str(self) -> &'static str {
        match self {
            SkipTag::RunSkipped => "RunSkipped",
            SkipTag::SerialQueueTimedOut => "SerialQueueTimedOut",
        }
    }
}
