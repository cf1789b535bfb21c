//! Queue policy: which waiters an arrival supersedes and when a waiter ages
//! out. Pure decisions over plain values; `gates::serial` binds them into
//! its SQL and the tests check the two agree.
//!
//! Invariants (ADR-0004 and the queue-policy seed):
//! - only waiting work is ever skipped automatically, never a holder;
//! - imperative work (an operator's raw command) is exempt on both sides;
//! - every automatic skip carries a [`SkipReason`]; an operator's skip none.
//!
//! (ADR-0004: docs/adr/0004-serialized-run-groups.md)

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::{QUEUE_POLICY_MS_MAX, SERIAL_QUEUED_TIMEOUT_MS_DEFAULT};

/// The revision a serialized run must match, read by the caller once before
/// the execution touches the queue (for a deploy: the branch head through
/// the GitHub API). Compared byte for byte with the arrival's revision, so
/// both must be full lowercase shas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Current {
    /// The run names no current revision: arrival order decides.
    NotDeclared,
    /// The head read succeeded.
    Known(String),
    /// The head read failed: the arrival supersedes nobody (it cannot tell
    /// an older waiter from a newer one) and is judged at its dequeue, where
    /// the head is read again (ADR-0004 let it supersede by arrival order;
    /// that let an older commit supersede the head's deploy, so the head
    /// never deployed).
    Unknown,
}

/// Why an execution was skipped automatically; the `skipped_reason` column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// A newer arrival (or a current one) replaced this waiter.
    Superseded,
    /// The revision was not the current one when it arrived.
    NotCurrent,
    /// Waited past the queued timeout behind a live holder.
    QueuedTimeout,
    /// Nobody confirmed in time (enforced by the engine's wait, recorded by
    /// the caller; the serial queue itself never sets it).
    ConfirmationTimeout,
    /// A person with the say answered no (a release rejected); the serial
    /// queue never sets it.
    Rejected,
    /// The holder could not learn the branch head at its dequeue within its
    /// bound: it deploys nothing rather than deploy blind (the serial queue
    /// never sets it; the holder releases).
    HeadUnknown,
    /// The change touches none of the files a check's `paths` names (the
    /// serial queue never sets it).
    NoMatchingChange,
    /// A job the run needs did not pass (`[deploy] needs`; the serial
    /// queue never sets it).
    NeedsFailed,
}

impl SkipReason {
    pub const ALL: [SkipReason; 8] = [
        SkipReason::Superseded,
        SkipReason::NotCurrent,
        SkipReason::QueuedTimeout,
        SkipReason::ConfirmationTimeout,
        SkipReason::Rejected,
        SkipReason::HeadUnknown,
        SkipReason::NoMatchingChange,
        SkipReason::NeedsFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::Superseded => "superseded",
            SkipReason::NotCurrent => "not_current",
            SkipReason::QueuedTimeout => "queued_timeout",
            SkipReason::ConfirmationTimeout => "confirmation_timeout",
            SkipReason::Rejected => "rejected",
            SkipReason::HeadUnknown => "head_unknown",
            SkipReason::NoMatchingChange => "no_matching_change",
            SkipReason::NeedsFailed => "needs_failed",
        }
    }

    pub fn parse(s: &str) -> Option<SkipReason> {
        SkipReason::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A group's queue policy (`[deploy.queue]`); the defaults are ADR-0004's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QueuePolicy {
    /// Newest waiter wins: an arrival supersedes older waiters. Off, the
    /// group is FIFO (a current arrival still supersedes non-current waiters:
    /// that is correctness, not policy).
    pub supersede: bool,
    /// A waiter queued longer than this behind a live holder times out.
    pub queued_timeout_ms: i64,
    /// When set, an arrival supersedes only waiters older than this (the
    /// queue-policy seed: the age rule applies when a new deployment is
    /// enqueued, never later at a waiter's claim).
    pub supersede_after_ms: Option<i64>,
    /// Carried for the engine, which enforces it as a wait with a timeout and
    /// records [`SkipReason::ConfirmationTimeout`].
    pub confirmation_timeout_ms: Option<i64>,
}

impl Default for QueuePolicy {
    fn default() -> Self {
        QueuePolicy {
            supersede: true,
            queued_timeout_ms: SERIAL_QUEUED_TIMEOUT_MS_DEFAULT,
            supersede_after_ms: None,
            confirmation_timeout_ms: None,
        }
    }
}

/// A `[deploy.queue]` duration outside `1..=QUEUE_POLICY_MS_MAX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub setting: &'static str,
    pub value_ms: i64,
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[deploy.queue] {}: expected a duration between 1 ms and {} ms, got {} ms",
            self.setting, QUEUE_POLICY_MS_MAX, self.value_ms
        )
    }
}

impl std::error::Error for PolicyError {}

fn duration(setting: &'static str, value_ms: i64) -> Result<i64, PolicyError> {
    if (1..=QUEUE_POLICY_MS_MAX).contains(&value_ms) {
        Ok(value_ms)
    } else {
        Err(PolicyError { setting, value_ms })
    }
}

impl QueuePolicy {
    /// Builds the policy from `[deploy.queue]` values already parsed (the
    /// config layer turns "30m" into ms); `None` keeps the default.
    pub fn from_config(
        supersede: Option<bool>,
        queued_timeout_ms: Option<i64>,
        supersede_after_ms: Option<i64>,
        confirmation_timeout_ms: Option<i64>,
    ) -> Result<QueuePolicy, PolicyError> {
        let default = QueuePolicy::default();
        Ok(QueuePolicy {
            supersede: supersede.unwrap_or(default.supersede),
            queued_timeout_ms: match queued_timeout_ms {
                Some(ms) => duration("queued_timeout", ms)?,
                None => default.queued_timeout_ms,
            },
            supersede_after_ms: supersede_after_ms
                .map(|ms| duration("supersede_after", ms))
                .transpose()?,
            confirmation_timeout_ms: confirmation_timeout_ms
                .map(|ms| duration("confirmation_timeout", ms))
                .transpose()?,
        })
    }

    /// What an arrival does to the queue. Decided once, before the enqueue
    /// statement, which binds the answer. `read_ms` is when the current
    /// revision was asked for: a waiter that arrived later may have read a
    /// newer head than this one, so only older arrivals are judged by it.
    pub fn arrival_rule(
        &self,
        current: &Current,
        read_ms: Option<i64>,
        revision: &str,
        imperative: bool,
        now_ms: i64,
    ) -> ArrivalRule {
        if imperative {
            return ArrivalRule::SupersedeNone;
        }
        match current {
            Current::Known(head) if head != revision => ArrivalRule::NotCurrent {
                current: head.clone(),
            },
            Current::Known(head) => ArrivalRule::SupersedeNotCurrent {
                current: head.clone(),
                read_ms,
            },
            Current::NotDeclared if self.supersede => ArrivalRule::SupersedeOlder {
                arrived_before_ms: self.supersede_after_before_ms(now_ms),
            },
            Current::NotDeclared | Current::Unknown => ArrivalRule::SupersedeNone,
        }
    }

    /// Waiters that arrived before this have aged past `supersede_after`.
    pub fn supersede_after_before_ms(&self, now_ms: i64) -> Option<i64> {
        self.supersede_after_ms.map(|ms| now_ms.saturating_sub(ms))
    }

    /// Waiters that arrived before this have waited past the queued timeout.
    pub fn timed_out_before_ms(&self, now_ms: i64) -> i64 {
        now_ms.saturating_sub(self.queued_timeout_ms)
    }

    /// Whether a waiter fails `queued_timeout` at its claim: queued past the
    /// timeout while a live holder blocks the group. Imperative work never
    /// ages out.
    pub fn queued_timed_out(
        &self,
        waiter: &WaiterFacts<'_>,
        live_holder: bool,
        now_ms: i64,
    ) -> bool {
        !waiter.imperative && live_holder && waiter.arrived_ms < self.timed_out_before_ms(now_ms)
    }

    /// Whether a waiter, at its claim, yields to a newer non-imperative
    /// execution that already took the group: running this older revision
    /// now would undo it. Only with supersede on; imperative work is exempt
    /// on both sides, and so is a newer row whose head read failed or was
    /// made before the waiter arrived (it may be an older commit queued
    /// again, or read late). (Supersede-after does not apply here: the seed
    /// ages waiters only when a new one is enqueued.)
    pub fn yields_at_claim(&self, waiter: &WaiterFacts<'_>, newer: &NewerFacts) -> bool {
        self.supersede
            && !waiter.imperative
            && !newer.imperative
            && newer.has_claimed
            && newer.judged_current
            && newer.current_read_ms.is_none_or(|r| r >= waiter.arrived_ms)
    }
}

/// What one arrival does to the waiters already queued in its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArrivalRule {
    /// The revision is not the known current one: skip the arrival at once,
    /// supersede nothing.
    NotCurrent { current: String },
    /// The revision is current: supersede every waiter whose revision is not
    /// and that arrived no later than the head read was asked for
    /// (`read_ms`; None: whenever it arrived), regardless of `supersede` and
    /// `supersede_after`. A waiter that arrived after the read may have
    /// judged a newer head, so a read delayed on its way to the enqueue
    /// never supersedes it.
    SupersedeNotCurrent {
        current: String,
        read_ms: Option<i64>,
    },
    /// Supersede every older waiter, or only those that arrived before
    /// `arrived_before_ms` when `supersede_after` is set.
    SupersedeOlder { arrived_before_ms: Option<i64> },
    /// Supersede nobody: supersede off, or an imperative arrival.
    SupersedeNone,
}

/// What the policy needs to know about one queued row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaiterFacts<'a> {
    pub revision: &'a str,
    pub arrived_ms: i64,
    pub imperative: bool,
    /// In state `waiting` (only waiters are ever skipped automatically).
    pub waiting: bool,
}

/// What the policy needs to know about a newer row of the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewerFacts {
    pub imperative: bool,
    /// It holds or has held the group.
    pub has_claimed: bool,
    /// Its arrival knew the head (or its run names none): only then does
    /// arriving later mean a newer revision.
    pub judged_current: bool,
    /// When its arrival asked for the head (None: its run names none):
    /// newer than a waiter only if read after that waiter arrived.
    pub current_read_ms: Option<i64>,
}

impl ArrivalRule {
    /// Whether this arrival supersedes the (older) waiter `w`.
    pub fn supersedes(&self, w: &WaiterFacts<'_>) -> bool {
        if !w.waiting || w.imperative {
            return false;
        }
        match self {
            ArrivalRule::NotCurrent { .. } | ArrivalRule::SupersedeNone => false,
            ArrivalRule::SupersedeNotCurrent { current, read_ms } => {
                w.revision != current && read_ms.is_none_or(|r| w.arrived_ms <= r)
            }
            ArrivalRule::SupersedeOlder {
                arrived_before_ms: None,
            } => true,
            ArrivalRule::SupersedeOlder {
                arrived_before_ms: Some(before),
            } => w.arrived_ms < *before,
        }
    }
}
