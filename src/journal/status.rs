//! The instance's run state, and the only place its transitions are decided.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Created, not yet run.
    Queued,
    /// An executor is running the body.
    Running,
    /// Suspended on a sleep, an event, or a retry backoff.
    Waiting,
    /// Suspended by an operator; only `resume` continues it.
    Paused,
    /// Ended in a typed error.
    Errored,
    /// Ended by an operator.
    Terminated,
    /// Ended with a result.
    Complete,
    /// Ended without doing its work, with a reason.
    Skipped,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Running => "running",
            Status::Waiting => "waiting",
            Status::Paused => "paused",
            Status::Errored => "errored",
            Status::Terminated => "terminated",
            Status::Complete => "complete",
            Status::Skipped => "skipped",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "queued" => Status::Queued,
            "running" => Status::Running,
            "waiting" => Status::Waiting,
            "paused" => Status::Paused,
            "errored" => Status::Errored,
            "terminated" => Status::Terminated,
            "complete" => Status::Complete,
            "skipped" => Status::Skipped,
            _ => return None,
        })
    }

    /// A finished instance stays finished: no transition leaves these,
    /// except an explicit `restart`.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Status::Errored | Status::Terminated | Status::Complete | Status::Skipped
        )
    }

    /// Whether an executor may run the body from this state.
    pub fn is_runnable(self) -> bool {
        matches!(self, Status::Queued | Status::Running | Status::Waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_classifies() {
        for s in [
            Status::Queued,
            Status::Running,
            Status::Waiting,
            Status::Paused,
            Status::Errored,
            Status::Terminated,
            Status::Complete,
            Status::Skipped,
        ] {
            assert_eq!(Status::parse(s.as_str()), Some(s));
            assert!(!(s.is_terminal() && s.is_runnable()));
        }
        assert_eq!(Status::parse("done"), None);
    }
}
