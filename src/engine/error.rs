//! The closed set of typed failures a run can end in, each with a stable
//! tag recorded on the step and the instance.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a step body failed one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepFailure {
    /// A stable tag (`CheckoutFailed`, `GitHubApi`, ...).
    pub tag: String,
    pub message: String,
    /// A non-retryable failure fails the step at once.
    pub retryable: bool,
}

impl StepFailure {
    /// Its message cut to `STEP_ERROR_MESSAGE_BYTES_MAX` (at a character
    /// boundary, saying how much was cut), as the engine journals it.
    pub fn bounded(mut self) -> StepFailure {
        let max = crate::limits::STEP_ERROR_MESSAGE_BYTES_MAX;
        if self.message.len() > max {
            let cut = (0..=max)
                .rev()
                .find(|i| self.message.is_char_boundary(*i))
                .unwrap_or(0);
            let dropped = self.message.len() - cut;
            self.message.truncate(cut);
            self.message
                .push_str(&format!(" [{dropped} more bytes cut]"));
        }
        self
    }

    pub fn retryable(tag: &str, message: impl Into<String>) -> StepFailure {
        StepFailure {
            tag: tag.to_owned(),
            message: message.into(),
            retryable: true,
        }
    }

    pub fn fatal(tag: &str, message: impl Into<String>) -> StepFailure {
        StepFailure {
            tag: tag.to_owned(),
            message: message.into(),
            retryable: false,
        }
    }
}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.tag, self.message)
    }
}

/// Why the body stopped without a result. `Suspended` is control flow, not
/// a failure: the instance waits for a timer or an event and replays later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "tag")]
pub enum RunError {
    /// The instance waits until `wake_at_ms` (or an event, when `event`).
    Suspended {
        wake_at_ms: i64,
        waiting_on: String,
    },
    StepTimedOut {
        step: String,
        timeout_ms: i64,
    },
    RetriesExhausted {
        step: String,
        attempts: u32,
        last: StepFailure,
    },
    NonRetryable {
        step: String,
        failure: StepFailure,
    },
    RunDurationExceeded {
        max_duration_ms: i64,
        in_progress: String,
    },
    EventTimedOut {
        step: String,
        event_type: String,
        timeout_ms: i64,
    },
    StepResultTooLarge {
        step: String,
        bytes: usize,
        max_bytes: usize,
    },
    StepLimitExceeded {
        limit: u32,
    },
    InvalidStep {
        step: String,
        reason: String,
    },
    Terminated,
    /// The body's durable calls no longer match the journal: the run's code
    /// changed under a live instance, or its step names are not
    /// deterministic.
    JournalMismatch {
        index: u32,
        expected: String,
        actual: String,
    },
    /// The executor crashed mid-pass this many times in a row.
    ExecutorCrashLoop {
        crashes: u32,
    },
    /// The instance's own storage or the index failed.
    Store {
        message: String,
    },
    /// D1 refused the instance's index row, `refusals` passes in a row
    /// (ADR-0018, `docs/adr/0018-a-single-creates-row-rides-its-first-pass.md`):
    /// the pass ran no step body; its alarm backs off.
    RowRefused {
        refusals: u32,
        message: String,
    },
    /// The run's input did not decode.
    InvalidInput {
        message: String,
    },
    /// The run is not registered (an instance created by a newer deploy).
    UnknownRun {
        run: String,
    },
    /// The object holds no instance (never created, or purged): nothing to
    /// run, and no alarm to keep.
    NoInstance,
}

impl RunError {
    /// The stable tag recorded as `error_tag`.
    pub fn tag(&self) -> &'static str {
        match self {
            RunError::Suspended { .. } => "Suspended",
            RunError::StepTimedOut { .. } => "StepTimedOut",
            RunError::RetriesExhausted { .. } => "RetriesExhausted",
            RunError::NonRetryable { .. } => "NonRetryable",
            RunError::RunDurationExceeded { .. } => "RunDurationExceeded",
            RunError::EventTimedOut { .. } => "EventTimedOut",
            RunError::StepResultTooLarge { .. } => "StepResultTooLarge",
            RunError::StepLimitExceeded { .. } => "StepLimitExceeded",
            RunError::InvalidStep { .. } => "InvalidStep",
            RunError::Terminated => "Terminated",
            RunError::JournalMismatch { .. } => "JournalMismatch",
            RunError::ExecutorCrashLoop { .. } => "ExecutorCrashLoop",
            RunError::Store { .. } => "Store",
            RunError::RowRefused { .. } => "RowRefused",
            RunError::InvalidInput { .. } => "InvalidInput",
            RunError::UnknownRun { .. } => "UnknownRun",
            RunError::NoInstance => "NoInstance",
        }
    }

    pub fn is_suspension(&self) -> bool {
        matches!(self, RunError::Suspended { .. })
    }

    /// The failure a step's body reported, when this error carries one
    /// (so a run can tell `CheckoutFailed` from a timeout).
    pub fn step_failure(&self) -> Option<&StepFailure> {
        match self {
            RunError::RetriesExhausted { last, .. } => Some(last),
            RunError::NonRetryable { failure, .. } => Some(failure),
            _ => None,
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Suspended {
                wake_at_ms,
                waiting_on,
            } => {
                write!(f, "suspended on {waiting_on} until {wake_at_ms}")
            }
            RunError::StepTimedOut { step, timeout_ms } => {
                write!(f, "step {step:?} exceeded its timeout of {timeout_ms} ms")
            }
            RunError::RetriesExhausted {
                step,
                attempts,
                last,
            } => {
                write!(f, "step {step:?} failed {attempts} attempts; last: {last}")
            }
            RunError::NonRetryable { step, failure } => {
                write!(f, "step {step:?} failed without retry: {failure}")
            }
            RunError::RunDurationExceeded {
                max_duration_ms,
                in_progress,
            } => write!(
                f,
                "run exceeded its max duration of {max_duration_ms} ms during {in_progress}"
            ),
            RunError::EventTimedOut {
                step,
                event_type,
                timeout_ms,
            } => write!(
                f,
                "wait {step:?} for event {event_type:?} timed out after {timeout_ms} ms"
            ),
            RunError::StepResultTooLarge {
                step,
                bytes,
                max_bytes,
            } => write!(
                f,
                "step {step:?} returned {bytes} bytes, over the {max_bytes}-byte limit"
            ),
            RunError::StepLimitExceeded { limit } => {
                write!(f, "run exceeded its limit of {limit} steps")
            }
            RunError::InvalidStep { step, reason } => write!(f, "step {step:?}: {reason}"),
            RunError::Terminated => write!(f, "terminated by an operator"),
            RunError::JournalMismatch {
                index,
                expected,
                actual,
            } => write!(
                f,
                "journal mismatch at position {index}: journal has {expected}, run called {actual}"
            ),
            RunError::ExecutorCrashLoop { crashes } => {
                write!(f, "executor crashed {crashes} times in a row")
            }
            RunError::Store { message } => write!(f, "storage failed: {message}"),
            RunError::RowRefused {
                refusals: n,
                message: m,
            } => write!(f, "row refused {n}x: {m}"),
            RunError::InvalidInput { message } => write!(f, "invalid run input: {message}"),
            RunError::UnknownRun { run } => write!(f, "no run named {run:?} is registered"),
            RunError::NoInstance => write!(f, "instance does not exist"),
        }
    }
}

impl std::error::Error for RunError {}

impl From<crate::store::StoreError> for RunError {
    fn from(e: crate::store::StoreError) -> Self {
        RunError::Store {
            message: e.to_string(),
        }
    }
}
