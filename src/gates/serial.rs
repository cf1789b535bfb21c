//! The serial queue (ADR-0004): for executions of one group, at most one
//! holds the group, and the newest waiter wins. State is the `serial_queue`
//! table (migrations/0003_gates.sql); every operation is one D1 round trip
//! in the common case and safe to replay:
//!
//! - [`enqueue`]: one `INSERT … SELECT … ON CONFLICT DO UPDATE … RETURNING`
//!   that inserts the arrival and supersedes the waiters it replaces in the
//!   same statement (so atomically), returning exactly the rows it changed.
//!   A replayed enqueue changes nothing and reads its row (a second trip).
//! - [`claim`]: one conditional `UPDATE … FROM … RETURNING` that decides
//!   this waiter's turn (claim, keep waiting, time out, yield), refreshes its
//!   poll time, and flips a stale holder it takes over to `stale`.
//! - [`heartbeat`], [`release`], [`skip`], [`skip_all`]: one statement each.
//!
//! Architecture invariant: no I/O but `Database`, no clock (`now_ms` is an
//! argument), no `worker` types. Policy decisions are in `gates::policy`;
//! the SQL here binds them and `tests/gates.rs` checks the two agree.
//! (ADR-0004: docs/adr/0004-serialized-run-groups.md)

use serde::{Deserialize, Serialize};

use crate::limits::{
    GROUPS_LISTED_MAX, HOLDER_STALE_MS, RECENT_SKIPS_LISTED_MAX, SKIP_ALL_MAX, WAITERS_LISTED_MAX,
};
use crate::stmt;
use crate::store::executions::Page;
use crate::store::sql::{decode, Database, Stmt, StoreError};

use super::policy::{ArrivalRule, Current, QueuePolicy, SkipReason};

/// A `serial_queue.state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowState {
    Waiting,
    Holding,
    Released,
    Superseded,
    TimedOut,
    Skipped,
    Stale,
}

impl RowState {
    pub const ALL: [RowState; 7] = [
        RowState::Waiting,
        RowState::Holding,
        RowState::Released,
        RowState::Superseded,
        RowState::TimedOut,
        RowState::Skipped,
        RowState::Stale,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RowState::Waiting => "waiting",
            RowState::Holding => "holding",
            RowState::Released => "released",
            RowState::Superseded => "superseded",
            RowState::TimedOut => "timed_out",
            RowState::Skipped => "skipped",
            RowState::Stale => "stale",
        }
    }

    pub fn parse(s: &str) -> Option<RowState> {
        RowState::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// Waiting or holding: the row still takes part in the group.
    pub fn is_live(self) -> bool {
        matches!(self, RowState::Waiting | RowState::Holding)
    }
}

/// One execution arriving at its group's queue.
#[derive(Debug, Clone)]
pub struct Arrival<'a> {
    pub group: &'a str,
    /// Its gate id: the instance id, with the generation after a restart
    /// (`execution_id_of`).
    pub execution_id: &'a str,
    /// The revision it would ship (a full sha).
    pub revision: &'a str,
    /// Read by the caller once, before the enqueue (and journaled, so a
    /// replay passes the same value).
    pub current: Current,
    /// When `current` was asked for (ms): only waiters that arrived before
    /// it are judged by it. None: whenever they arrived.
    pub current_read_ms: Option<i64>,
    /// An operator's raw command: exempt from queue policy on both sides.
    pub imperative: bool,
}

/// An execution skipped by a gate operation, for the caller to conclude its
/// check run `neutral` and notify (automatic skips) or stay silent
/// (operator skips, `reason` None).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub execution_id: String,
    pub revision: String,
    pub reason: Option<SkipReason>,
    /// The newer revision (superseded) or the branch head (not_current).
    pub superseded_by: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EnqueueOutcome {
    /// Queued; `superseded` are the waiters this arrival replaced, already
    /// marked in the same statement.
    Queued { superseded: Vec<Skipped> },
    /// The revision is not the current one: the execution fails RunSkipped
    /// (a neutral check naming `current`). Recorded, supersedes nothing.
    NotCurrent { current: String },
    /// A replay: the row existed; nothing was changed.
    Existing(RowState),
}

/// The holder as a waiter sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HolderView {
    pub execution_id: String,
    pub revision: String,
    pub heartbeat_age_ms: i64,
    /// Silent past `HOLDER_STALE_MS`: no longer blocks; the next claim
    /// takes the group over.
    pub stale: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClaimOutcome {
    /// This execution holds the group; `took_over` names a stale holder
    /// whose row this claim flipped to `stale`.
    Holding { took_over: Option<String> },
    /// Not yet: wait for the handoff. `ahead` counts live waiters
    /// that claim first.
    Waiting {
        holder: Option<HolderView>,
        ahead: u32,
    },
    /// Replaced by a newer revision: fail RunSkipped, a neutral check.
    Superseded { by: String },
    /// Queued past the timeout behind a live holder: SerialQueueTimedOut.
    TimedOut,
    /// Skipped as not current (`reason` Some) or by an operator (None).
    Skipped { reason: Option<SkipReason> },
    /// Already released (a replay after release).
    Released,
    /// It held the group, went stale, and `taken_over_by` took the group:
    /// it must stop.
    Lost { taken_over_by: Option<String> },
    /// No row for this execution in this group: enqueue first.
    NotEnqueued,
}

// --- enqueue ---

/// The arrival's row, then (second arm) the waiters it supersedes, which
/// conflict with their own rows and are updated in place. The second arm is
/// empty on a replay (the arrival's row exists), and the arrival's own
/// conflict updates nothing, so a replay changes nothing and returns no rows.
/// SQLite materializes a SELECT that reads the table it inserts into before
/// inserting, so the NOT EXISTS sees the table as it was.
/// ?1 group, ?2 execution, ?3 revision, ?4 now, ?5 imperative, ?6 rule
/// ('not_current' | 'older' | 'none'), ?7 current revision, ?8 arrived
/// before (for 'older': supersede_after, strictly; for 'not_current': when
/// the head read was asked for, that ms included),
/// ?9 instance, ?10 judged current (0 when the head read failed), ?11 when
/// the head was read (NULL: none was).
const ENQUEUE_SQL: &str = "\
INSERT INTO serial_queue (group_key, execution_id, revision, imperative, state, arrived_ms, heartbeat_ms, updated_ms, \
  instance_id, judged_current, current_read_ms) \
SELECT ?1, ?2, ?3, ?5, 'waiting', ?4, ?4, ?4, ?9, ?10, ?11 \
UNION ALL \
SELECT group_key, execution_id, revision, imperative, state, arrived_ms, heartbeat_ms, updated_ms, instance_id, \
  judged_current, current_read_ms \
FROM serial_queue \
WHERE group_key = ?1 AND state = 'waiting' AND imperative = 0 \
  AND NOT EXISTS (SELECT 1 FROM serial_queue m WHERE m.group_key = ?1 AND m.execution_id = ?2) \
  AND (?6 = 'not_current' AND revision <> ?7 AND (?8 IS NULL OR arrived_ms <= ?8) \
       OR ?6 = 'older' AND (?8 IS NULL OR arrived_ms < ?8)) \
ON CONFLICT (group_key, execution_id) DO UPDATE SET \
  state = 'superseded', superseded_by = ?3, skipped_reason = 'superseded', ended_by = ?2, updated_ms = ?4 \
WHERE excluded.execution_id <> ?2 AND serial_queue.state = 'waiting' AND serial_queue.imperative = 0 \
RETURNING execution_id, revision, state";

/// A not-current arrival is recorded as skipped (so "explain" shows it) and
/// touches no other row.
const ENQUEUE_NOT_CURRENT_SQL: &str = "\
INSERT INTO serial_queue (group_key, execution_id, revision, imperative, state, arrived_ms, heartbeat_ms, \
  superseded_by, skipped_reason, updated_ms, instance_id) \
VALUES (?1, ?2, ?3, 0, 'skipped', ?4, ?4, ?5, 'not_current', ?4, ?6) \
ON CONFLICT (group_key, execution_id) DO NOTHING \
RETURNING execution_id";

#[derive(Deserialize)]
struct ReturnedRow {
    execution_id: String,
    revision: String,
    state: String,
}

#[derive(Deserialize)]
struct StateRow {
    state: String,
    skipped_reason: Option<String>,
    superseded_by: Option<String>,
}

fn parse_state(s: &str) -> Result<RowState, StoreError> {
    RowState::parse(s)
        .ok_or_else(|| StoreError::Decode(format!("serial_queue.state: unknown {s:?}")))
}

fn parse_reason(s: Option<&str>) -> Result<Option<SkipReason>, StoreError> {
    s.map(|r| {
        SkipReason::parse(r).ok_or_else(|| {
            StoreError::Decode(format!("serial_queue.skipped_reason: unknown {r:?}"))
        })
    })
    .transpose()
}

/// Puts an execution in its group's queue (ADR-0004). See [`EnqueueOutcome`].
pub async fn enqueue(
    db: &dyn Database,
    arrival: &Arrival<'_>,
    policy: &QueuePolicy,
    now_ms: i64,
) -> Result<EnqueueOutcome, StoreError> {
    let rule = policy.arrival_rule(
        &arrival.current,
        arrival.current_read_ms,
        arrival.revision,
        arrival.imperative,
        now_ms,
    );
    if let ArrivalRule::NotCurrent { current } = &rule {
        return enqueue_not_current(db, arrival, current, now_ms).await;
    }
    let (mode, current, arrived_before_ms) = match &rule {
        ArrivalRule::SupersedeNotCurrent { current, read_ms } => {
            ("not_current", Some(current.as_str()), *read_ms)
        }
        ArrivalRule::SupersedeOlder { arrived_before_ms } => ("older", None, *arrived_before_ms),
        ArrivalRule::SupersedeNone | ArrivalRule::NotCurrent { .. } => ("none", None, None),
    };
    let rows: Vec<ReturnedRow> = decode(
        db.all(stmt!(
            ENQUEUE_SQL,
            arrival.group,
            arrival.execution_id,
            arrival.revision,
            now_ms,
            i64::from(arrival.imperative),
            mode,
            current,
            arrived_before_ms,
            instance_of(arrival.execution_id),
            i64::from(arrival.current != Current::Unknown),
            match arrival.current {
                Current::Known(_) => arrival.current_read_ms,
                _ => None,
            },
        ))
        .await?,
    )?;
    if !rows.iter().any(|r| r.execution_id == arrival.execution_id) {
        // Our row existed, so the statement superseded nothing either.
        return existing(db, arrival).await;
    }
    let superseded = rows
        .into_iter()
        .filter(|r| r.execution_id != arrival.execution_id)
        .map(|r| superseded_by(r, arrival.revision))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(EnqueueOutcome::Queued { superseded })
}

/// A not-current arrival: recorded as skipped, touching no other row.
async fn enqueue_not_current(
    db: &dyn Database,
    arrival: &Arrival<'_>,
    current: &str,
    now_ms: i64,
) -> Result<EnqueueOutcome, StoreError> {
    let rows = db
        .all(stmt!(
            ENQUEUE_NOT_CURRENT_SQL,
            arrival.group,
            arrival.execution_id,
            arrival.revision,
            now_ms,
            current,
            instance_of(arrival.execution_id),
        ))
        .await?;
    if rows.is_empty() {
        return existing(db, arrival).await;
    }
    Ok(EnqueueOutcome::NotCurrent {
        current: current.to_owned(),
    })
}

/// A waiter the enqueue statement superseded, as the caller is told.
fn superseded_by(r: ReturnedRow, revision: &str) -> Result<Skipped, StoreError> {
    if parse_state(&r.state)? != RowState::Superseded {
        return Err(StoreError::Decode(format!(
            "enqueue returned {} in state {}",
            r.execution_id, r.state
        )));
    }
    Ok(Skipped {
        execution_id: r.execution_id,
        revision: r.revision,
        reason: Some(SkipReason::Superseded),
        superseded_by: Some(revision.to_owned()),
    })
}

/// A replayed enqueue: report the row as it is. A not-current row reports
/// `NotCurrent` again, as the first call did.
async fn existing(db: &dyn Database, arrival: &Arrival<'_>) -> Result<EnqueueOutcome, StoreError> {
    let row = read_state(db, arrival.group, arrival.execution_id)
        .await?
        .ok_or_else(|| {
            StoreError::Decode(format!(
                "serial_queue row of {} vanished",
                arrival.execution_id
            ))
        })?;
    let state = parse_state(&row.state)?;
    match (
        state,
        parse_reason(row.skipped_reason.as_deref())?,
        row.superseded_by,
    ) {
        (RowState::Skipped, Some(SkipReason::NotCurrent), Some(current)) => {
            Ok(EnqueueOutcome::NotCurrent { current })
        }
        _ => Ok(EnqueueOutcome::Existing(state)),
    }
}

async fn read_state(
    db: &dyn Database,
    group: &str,
    execution_id: &str,
) -> Result<Option<StateRow>, StoreError> {
    let rows = db
        .all(stmt!(
            "SELECT state, skipped_reason, superseded_by FROM serial_queue WHERE group_key = ?1 AND execution_id = ?2",
            group,
            execution_id,
        ))
        .await?;
    Ok(decode(rows)?.into_iter().next())
}

// --- claim ---

// SQL fragments of the claim, shared so each condition is written once.
// `m` is the claimant's row. ?1 group, ?2 claimant, ?3 now, ?4 holder stale
// before, ?5 timed out before, ?6 supersede (0/1).

/// A row's instance is live: queued, running or waiting (a paused or
/// finished instance blocks nobody: it cannot take a turn it is handed).
/// `$row` names the serial_queue row.
macro_rules! instance_live {
    ($row:literal) => {
        concat!(
            "EXISTS (SELECT 1 FROM executions e WHERE e.id = ",
            $row,
            ".instance_id AND e.status IN ('queued','running','waiting'))"
        )
    };
}

/// A holder other than the claimant that heartbeated within HOLDER_STALE_MS.
macro_rules! live_holder {
    () => {
        "EXISTS (SELECT 1 FROM serial_queue h WHERE h.group_key = ?1 AND h.state = 'holding' \
         AND h.execution_id <> ?2 AND h.heartbeat_ms >= ?4)"
    };
}

/// An older waiter whose instance is live: it claims first (FIFO).
macro_rules! live_older_waiter {
    () => {
        concat!(
            "EXISTS (SELECT 1 FROM serial_queue w WHERE w.group_key = ?1 AND w.state = 'waiting' \
             AND w.seq < m.seq AND ",
            instance_live!("w"),
            ")"
        )
    };
}

/// The newest newer non-imperative row the claimant yields to
/// (`QueuePolicy::yields_at_claim`): one that has held the group, so running
/// this older revision now would undo it, and that is newer for sure: it
/// knew the head, read after the claimant arrived (or its run names no
/// current revision, and arrival order ranks). NULL when none.
macro_rules! winner {
    ($col:literal) => {
        concat!(
            "(SELECT n.",
            $col,
            " FROM serial_queue n WHERE n.group_key = ?1 AND n.seq > m.seq AND n.imperative = 0 \
             AND ?6 = 1 AND m.imperative = 0 AND n.claimed_ms IS NOT NULL AND n.judged_current = 1 \
             AND (n.current_read_ms IS NULL OR n.current_read_ms >= m.arrived_ms) \
             ORDER BY n.seq DESC LIMIT 1)"
        )
    };
}

/// One conditional UPDATE. The derived table `d` decides the claimant's
/// verdict; the claimant's row takes it, and a stale holder is flipped to
/// `stale` only when the verdict is `holding`, so a group never has two
/// holding rows. The verdict reads no column this statement writes except
/// the claimant's own state (which maps 'holding' to 'holding'), so it is
/// the same whichever row SQLite updates first.
const CLAIM_SQL: &str = concat!(
    "UPDATE serial_queue SET \
       state = CASE WHEN serial_queue.execution_id <> ?2 THEN 'stale' \
                    WHEN serial_queue.state = 'waiting' THEN d.verdict ELSE serial_queue.state END, \
       heartbeat_ms = CASE WHEN serial_queue.execution_id = ?2 AND serial_queue.state IN ('waiting','holding') \
                      THEN MAX(serial_queue.heartbeat_ms, ?3) ELSE serial_queue.heartbeat_ms END, \
       claimed_ms = CASE WHEN serial_queue.execution_id = ?2 AND serial_queue.state = 'waiting' \
                    AND d.verdict = 'holding' THEN ?3 ELSE serial_queue.claimed_ms END, \
       superseded_by = CASE WHEN serial_queue.execution_id = ?2 AND serial_queue.state = 'waiting' \
                       AND d.verdict = 'superseded' THEN d.winner_revision ELSE serial_queue.superseded_by END, \
       skipped_reason = CASE WHEN serial_queue.execution_id <> ?2 OR serial_queue.state <> 'waiting' \
                          THEN serial_queue.skipped_reason \
                        WHEN d.verdict = 'superseded' THEN 'superseded' \
                        WHEN d.verdict = 'timed_out' THEN 'queued_timeout' \
                        ELSE serial_queue.skipped_reason END, \
       ended_by = CASE WHEN serial_queue.execution_id <> ?2 THEN ?2 \
                  WHEN serial_queue.state = 'waiting' AND d.verdict = 'superseded' THEN d.winner_id \
                  ELSE serial_queue.ended_by END, \
       updated_ms = CASE WHEN serial_queue.execution_id <> ?2 OR serial_queue.state IN ('waiting','holding') \
                    THEN ?3 ELSE serial_queue.updated_ms END \
     FROM (SELECT CASE WHEN m.state <> 'waiting' THEN m.state \
                       WHEN ",
    winner!("seq"),
    " IS NOT NULL THEN 'superseded' \
                       WHEN m.imperative = 0 AND m.arrived_ms < ?5 AND ",
    live_holder!(),
    " THEN 'timed_out' \
                       WHEN NOT ",
    live_holder!(),
    " AND NOT ",
    live_older_waiter!(),
    " THEN 'holding' \
                       ELSE 'waiting' END AS verdict, ",
    winner!("revision"),
    " AS winner_revision, ",
    winner!("execution_id"),
    " AS winner_id \
           FROM serial_queue m WHERE m.group_key = ?1 AND m.execution_id = ?2) AS d \
     WHERE serial_queue.group_key = ?1 \
       AND (serial_queue.execution_id = ?2 \
            OR (serial_queue.state = 'holding' AND serial_queue.heartbeat_ms < ?4 AND d.verdict = 'holding')) \
     RETURNING execution_id, state, superseded_by, skipped_reason, ended_by, \
       (SELECT h.execution_id FROM serial_queue h WHERE h.group_key = ?1 AND h.state = 'holding' \
          AND h.execution_id <> ?2 LIMIT 1) AS holder_id, \
       (SELECT h.revision FROM serial_queue h WHERE h.group_key = ?1 AND h.state = 'holding' \
          AND h.execution_id <> ?2 LIMIT 1) AS holder_revision, \
       (SELECT h.heartbeat_ms FROM serial_queue h WHERE h.group_key = ?1 AND h.state = 'holding' \
          AND h.execution_id <> ?2 LIMIT 1) AS holder_heartbeat_ms, \
       (SELECT COUNT(*) FROM serial_queue w WHERE w.group_key = ?1 AND w.state = 'waiting' \
          AND w.seq < serial_queue.seq AND \
          EXISTS (SELECT 1 FROM executions e WHERE e.id = w.instance_id \
            AND e.status IN ('queued','running','waiting'))) AS waiters_ahead"
);

#[derive(Deserialize)]
struct ClaimRow {
    execution_id: String,
    state: String,
    superseded_by: Option<String>,
    skipped_reason: Option<String>,
    ended_by: Option<String>,
    holder_id: Option<String>,
    holder_revision: Option<String>,
    holder_heartbeat_ms: Option<i64>,
    waiters_ahead: i64,
}

/// Tries to take the group; a waiter calls it on arrival and each time it is
/// woken (a handoff, the sweep, its queued-timeout deadline). It applies
/// the queued timeout to this waiter. One round trip.
pub async fn claim(
    db: &dyn Database,
    group: &str,
    execution_id: &str,
    policy: &QueuePolicy,
    now_ms: i64,
) -> Result<ClaimOutcome, StoreError> {
    let rows: Vec<ClaimRow> = decode(
        db.all(stmt!(
            CLAIM_SQL,
            group,
            execution_id,
            now_ms,
            now_ms.saturating_sub(HOLDER_STALE_MS),
            policy.timed_out_before_ms(now_ms),
            i64::from(policy.supersede),
        ))
        .await?,
    )?;
    let took_over = rows
        .iter()
        .find(|r| r.execution_id != execution_id)
        .map(|r| r.execution_id.clone());
    let Some(own) = rows.into_iter().find(|r| r.execution_id == execution_id) else {
        return Ok(ClaimOutcome::NotEnqueued);
    };
    let outcome = match parse_state(&own.state)? {
        RowState::Holding => ClaimOutcome::Holding { took_over },
        RowState::Waiting => ClaimOutcome::Waiting {
            holder: match (own.holder_id, own.holder_revision, own.holder_heartbeat_ms) {
                (Some(id), Some(revision), Some(heartbeat_ms)) => Some(HolderView {
                    execution_id: id,
                    revision,
                    heartbeat_age_ms: now_ms.saturating_sub(heartbeat_ms),
                    stale: heartbeat_ms < now_ms.saturating_sub(HOLDER_STALE_MS),
                }),
                _ => None,
            },
            ahead: u32::try_from(own.waiters_ahead).unwrap_or(u32::MAX),
        },
        RowState::Superseded => ClaimOutcome::Superseded {
            by: own.superseded_by.unwrap_or_default(),
        },
        RowState::TimedOut => ClaimOutcome::TimedOut,
        RowState::Skipped => ClaimOutcome::Skipped {
            reason: parse_reason(own.skipped_reason.as_deref())?,
        },
        RowState::Released => ClaimOutcome::Released,
        RowState::Stale => ClaimOutcome::Lost {
            taken_over_by: own.ended_by,
        },
    };
    Ok(outcome)
}

// --- heartbeat, release, skip ---

/// A holder's sign of life. False when it no longer holds the group (taken
/// over while stale, or released): the caller must stop. A holder that went
/// stale but that nobody took over still holds, and this refreshes it.
pub async fn heartbeat(
    db: &dyn Database,
    group: &str,
    execution_id: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    Ok(db.run(heartbeat_stmt(group, execution_id, now_ms)).await? == 1)
}

/// The heartbeat as a statement, for a holder that beats all it holds in
/// one batch; one change when it still holds the group.
pub fn heartbeat_stmt(group: &str, execution_id: &str, now_ms: i64) -> Stmt {
    stmt!(
        "UPDATE serial_queue SET heartbeat_ms = MAX(heartbeat_ms, ?3), updated_ms = ?3 \
         WHERE group_key = ?1 AND execution_id = ?2 AND state = 'holding'",
        group,
        execution_id,
        now_ms,
    )
}

/// Leaves the group on any exit path (a waiter withdraws the same way).
/// Returns the live waiter to wake now, if the group is free (a push
/// handoff; the sweep is the fallback). A replay changes nothing and names
/// the same waiter. One round trip.
pub async fn release(
    db: &dyn Database,
    group: &str,
    execution_id: &str,
    now_ms: i64,
) -> Result<Option<String>, StoreError> {
    #[derive(Deserialize)]
    struct Next {
        next: Option<String>,
    }
    let rows: Vec<Next> = decode(
        db.all(stmt!(
            "UPDATE serial_queue SET \
               state = CASE WHEN state IN ('holding','waiting') THEN 'released' ELSE state END, \
               updated_ms = CASE WHEN state IN ('holding','waiting') THEN ?3 ELSE updated_ms END \
             WHERE group_key = ?1 AND execution_id = ?2 \
             RETURNING (SELECT w.execution_id FROM serial_queue w WHERE w.group_key = ?1 AND w.state = 'waiting' \
                AND EXISTS (SELECT 1 FROM executions e WHERE e.id = w.instance_id \
                  AND e.status IN ('queued','running','waiting')) \
                AND NOT EXISTS (SELECT 1 FROM serial_queue h WHERE h.group_key = ?1 AND h.state = 'holding') \
                ORDER BY w.seq LIMIT 1) AS next",
            group,
            execution_id,
            now_ms,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next().and_then(|r| r.next))
}

/// Separates an instance id from its generation in a gate execution id:
/// ids never contain it (they are `[A-Za-z0-9_-]`).
pub const GENERATION_SEPARATOR: char = '.';

/// The execution id an instance uses in the gates: its own id, with its
/// generation appended after an operator's restart, so a restarted run
/// queues afresh instead of finding its finished row.
pub fn execution_id_of(instance_id: &str, generation: u32) -> String {
    match generation {
        0 => instance_id.to_owned(),
        g => format!("{instance_id}{GENERATION_SEPARATOR}g{g}"),
    }
}

/// The instance an execution id belongs to (to wake it).
pub fn instance_of(execution_id: &str) -> &str {
    execution_id
        .split(GENERATION_SEPARATOR)
        .next()
        .unwrap_or(execution_id)
}

/// The live rows (group, execution id) of an instance, every generation:
/// normally one.
pub async fn live_rows_of(
    db: &dyn Database,
    instance_id: &str,
) -> Result<Vec<(String, String)>, StoreError> {
    #[derive(Deserialize)]
    struct Live {
        group_key: String,
        execution_id: String,
    }
    let rows: Vec<Live> = decode(
        db.all(stmt!(
            // "id" or "id.<anything>": a range, not LIKE (D1 refuses LIKE
            // patterns as long as an instance id, and `_` is a wildcard).
            // '.' and '/' are adjacent bytes.
            "SELECT group_key, execution_id FROM serial_queue \
             WHERE (execution_id = ?1 OR (execution_id > ?1 || '.' AND execution_id < ?1 || '/')) \
             AND state IN ('waiting','holding') ORDER BY seq LIMIT ?2",
            instance_id,
            GROUPS_LISTED_MAX,
        ))
        .await?,
    )?;
    Ok(rows
        .into_iter()
        .map(|r| (r.group_key, r.execution_id))
        .collect())
}

/// An instance ended without cleaning up (an operator terminated it, its
/// executor crash-looped): it releases what it holds and withdraws what it
/// waits for, in every group. Returns, per group, the live waiter to wake.
/// Idempotent.
pub async fn abandon(
    db: &dyn Database,
    instance_id: &str,
    now_ms: i64,
) -> Result<Vec<(String, Option<String>)>, StoreError> {
    let mut woken = Vec::new();
    for (group, execution_id) in live_rows_of(db, instance_id).await? {
        let next = release(db, &group, &execution_id, now_ms).await?;
        woken.push((group, next));
    }
    Ok(woken)
}

/// An operator skips one waiter (never the holder): state `skipped`, no
/// reason. True when it was waiting.
pub async fn skip(
    db: &dyn Database,
    group: &str,
    execution_id: &str,
    now_ms: i64,
) -> Result<bool, StoreError> {
    let changes = db
        .run(stmt!(
            "UPDATE serial_queue SET state = 'skipped', updated_ms = ?3 \
             WHERE group_key = ?1 AND execution_id = ?2 AND state = 'waiting'",
            group,
            execution_id,
            now_ms,
        ))
        .await?;
    Ok(changes == 1)
}

/// An operator skips an execution waiting in any group, every generation
/// (never a holder): the rows it skipped, empty when it was not waiting.
pub async fn skip_instance(
    db: &dyn Database,
    instance_id: &str,
    now_ms: i64,
) -> Result<Vec<String>, StoreError> {
    let mut skipped = Vec::new();
    for (group, execution_id) in live_rows_of(db, instance_id).await? {
        if skip(db, &group, &execution_id, now_ms).await? {
            skipped.push(execution_id);
        }
    }
    Ok(skipped)
}

/// An operator skips every waiter of a group, imperative ones included,
/// never the holder; at most `SKIP_ALL_MAX` per call (oldest first).
pub async fn skip_all(
    db: &dyn Database,
    group: &str,
    now_ms: i64,
) -> Result<Vec<Skipped>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        execution_id: String,
        revision: String,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "UPDATE serial_queue SET state = 'skipped', updated_ms = ?2 \
             WHERE seq IN (SELECT seq FROM serial_queue WHERE group_key = ?1 AND state = 'waiting' \
                           ORDER BY seq LIMIT ?3) \
             RETURNING execution_id, revision",
            group,
            now_ms,
            SKIP_ALL_MAX,
        ))
        .await?,
    )?;
    Ok(rows
        .into_iter()
        .map(|r| Skipped {
            execution_id: r.execution_id,
            revision: r.revision,
            reason: None,
            superseded_by: None,
        })
        .collect())
}

/// Deletes rows that ended (any state but waiting and holding) before
/// `before_ms`, at most `limit`; for the retention sweep. Returns how many.
pub async fn purge_ended(db: &dyn Database, before_ms: i64, limit: u32) -> Result<u64, StoreError> {
    db.run(stmt!(
        "DELETE FROM serial_queue WHERE seq IN (SELECT seq FROM serial_queue \
           WHERE updated_ms < ?1 AND state NOT IN ('waiting','holding') ORDER BY updated_ms LIMIT ?2)",
        before_ms,
        limit,
    ))
    .await
}

// --- explain ---

/// Why a waiter is waiting, as "explain" shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitReason {
    /// The group is held by a live holder.
    BehindHolder { execution_id: String },
    /// An older live waiter claims first.
    BehindWaiter { execution_id: String },
    /// Nothing blocks it: it takes the group at its next poll (taking over
    /// a stale holder if one is named).
    NextToClaim { takes_over: Option<String> },
    /// Its instance is paused (or already finished): it blocks nobody and
    /// is not handed the group until it runs again.
    InstanceNotLive,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExplainedHolder {
    pub execution_id: String,
    pub revision: String,
    pub imperative: bool,
    pub held_ms: i64,
    pub heartbeat_age_ms: i64,
    pub stale: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExplainedWaiter {
    pub execution_id: String,
    pub revision: String,
    pub imperative: bool,
    pub waited_ms: i64,
    pub why: WaitReason,
    /// Time left before the queued timeout, when a live holder makes it
    /// run (0: it times out at its next poll). None for imperative waiters
    /// and when no live holder blocks the group.
    pub times_out_in_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExplainedEnd {
    pub execution_id: String,
    pub revision: String,
    pub state: RowState,
    pub reason: Option<SkipReason>,
    pub superseded_by: Option<String>,
    pub ended_by: Option<String>,
    pub ended_ago_ms: i64,
}

/// A group as an operator sees it: who holds it, who waits and why, and the
/// most recent skips and takeovers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupView {
    pub group: String,
    pub holder: Option<ExplainedHolder>,
    /// Oldest first, at most `WAITERS_LISTED_MAX`.
    pub waiters: Vec<ExplainedWaiter>,
    pub waiters_truncated: bool,
    /// Newest first, at most `RECENT_SKIPS_LISTED_MAX`: superseded, timed
    /// out, skipped and stale rows.
    pub recent: Vec<ExplainedEnd>,
}

#[derive(Deserialize)]
struct FullRow {
    execution_id: String,
    /// 1 when the row's instance is queued, running or waiting.
    instance_live: i64,
    revision: String,
    imperative: i64,
    state: String,
    arrived_ms: i64,
    heartbeat_ms: i64,
    claimed_ms: Option<i64>,
    superseded_by: Option<String>,
    skipped_reason: Option<String>,
    ended_by: Option<String>,
    updated_ms: i64,
}

/// The group's holder, its live waiters and recent ends, as one statement.
const EXPLAIN_SQL: &str = "\
SELECT * FROM (SELECT execution_id, revision, imperative, state, arrived_ms, heartbeat_ms, claimed_ms, \
   superseded_by, skipped_reason, ended_by, updated_ms, \
   EXISTS (SELECT 1 FROM executions e WHERE e.id = serial_queue.instance_id \
     AND e.status IN ('queued','running','waiting')) AS instance_live FROM serial_queue \
   WHERE group_key = ?1 AND state IN ('holding','waiting') \
   ORDER BY state = 'holding' DESC, seq LIMIT ?2) \
UNION ALL \
SELECT * FROM (SELECT execution_id, revision, imperative, state, arrived_ms, heartbeat_ms, claimed_ms, \
   superseded_by, skipped_reason, ended_by, updated_ms, 0 AS instance_live FROM serial_queue \
   WHERE group_key = ?1 AND state IN ('superseded','timed_out','skipped','stale') \
   ORDER BY updated_ms DESC, seq DESC LIMIT ?3)";

/// The group's holder, live waiters and recent ends. One round trip.
pub async fn explain(
    db: &dyn Database,
    group: &str,
    policy: &QueuePolicy,
    now_ms: i64,
) -> Result<GroupView, StoreError> {
    let rows: Vec<FullRow> = decode(
        db.all(stmt!(
            EXPLAIN_SQL,
            group,
            WAITERS_LISTED_MAX + 2,
            RECENT_SKIPS_LISTED_MAX,
        ))
        .await?,
    )?;
    let mut view = GroupView {
        group: group.to_owned(),
        holder: None,
        waiters: Vec::new(),
        waiters_truncated: false,
        recent: Vec::new(),
    };
    // The live waiter that claims before the next one (FIFO).
    let mut ahead: Option<String> = None;
    for r in rows {
        match parse_state(&r.state)? {
            RowState::Holding => view.holder = Some(explained_holder(r, now_ms)),
            RowState::Waiting if view.waiters.len() >= WAITERS_LISTED_MAX as usize => {
                view.waiters_truncated = true;
            }
            RowState::Waiting => {
                let w = explained_waiter(r, view.holder.as_ref(), ahead.as_deref(), policy, now_ms);
                if w.why != WaitReason::InstanceNotLive {
                    ahead = Some(w.execution_id.clone());
                }
                view.waiters.push(w);
            }
            RowState::Released => {
                return Err(StoreError::Decode(format!(
                    "explain read released row {}",
                    r.execution_id
                )));
            }
            ended => view.recent.push(explained_end(r, ended, now_ms)?),
        }
    }
    Ok(view)
}

fn explained_holder(r: FullRow, now_ms: i64) -> ExplainedHolder {
    ExplainedHolder {
        held_ms: now_ms.saturating_sub(r.claimed_ms.unwrap_or(r.arrived_ms)),
        heartbeat_age_ms: now_ms.saturating_sub(r.heartbeat_ms),
        stale: r.heartbeat_ms < now_ms.saturating_sub(HOLDER_STALE_MS),
        imperative: r.imperative != 0,
        execution_id: r.execution_id,
        revision: r.revision,
    }
}

/// Why a waiter waits: its instance is not live, an older live waiter
/// claims first, a live holder holds, or nothing blocks it.
fn explained_waiter(
    r: FullRow,
    holder: Option<&ExplainedHolder>,
    ahead: Option<&str>,
    policy: &QueuePolicy,
    now_ms: i64,
) -> ExplainedWaiter {
    let live_holder = holder.filter(|h| !h.stale);
    let why = if r.instance_live == 0 {
        WaitReason::InstanceNotLive
    } else if let Some(ahead) = ahead {
        WaitReason::BehindWaiter {
            execution_id: ahead.to_owned(),
        }
    } else if let Some(h) = live_holder {
        WaitReason::BehindHolder {
            execution_id: h.execution_id.clone(),
        }
    } else {
        WaitReason::NextToClaim {
            takes_over: holder.map(|h| h.execution_id.clone()),
        }
    };
    let imperative = r.imperative != 0;
    let times_out_in_ms = (live_holder.is_some() && !imperative).then(|| {
        r.arrived_ms
            .saturating_add(policy.queued_timeout_ms)
            .saturating_sub(now_ms)
            .max(0)
    });
    ExplainedWaiter {
        waited_ms: now_ms.saturating_sub(r.arrived_ms),
        execution_id: r.execution_id,
        revision: r.revision,
        imperative,
        why,
        times_out_in_ms,
    }
}

fn explained_end(r: FullRow, state: RowState, now_ms: i64) -> Result<ExplainedEnd, StoreError> {
    Ok(ExplainedEnd {
        reason: parse_reason(r.skipped_reason.as_deref())?,
        ended_ago_ms: now_ms.saturating_sub(r.updated_ms),
        execution_id: r.execution_id,
        revision: r.revision,
        state,
        superseded_by: r.superseded_by,
        ended_by: r.ended_by,
    })
}

/// One group with live rows, for the overview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GroupSummary {
    pub group: String,
    pub holder: Option<String>,
    pub holder_heartbeat_age_ms: Option<i64>,
    pub holder_stale: bool,
    pub waiting: u32,
    pub oldest_waited_ms: Option<i64>,
}

/// Groups with a holder or a waiter, by name, at most `GROUPS_LISTED_MAX`.
pub async fn groups(db: &dyn Database, now_ms: i64) -> Result<Vec<GroupSummary>, StoreError> {
    Ok(
        groups_page(db, &GroupFilter::default(), GROUPS_LISTED_MAX, now_ms)
            .await?
            .items,
    )
}

/// Filters and the page start of the groups overview.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupFilter {
    /// Only groups with a live row of an execution of this repository.
    pub repo: Option<String>,
    /// The cursor: groups whose key sorts after this one.
    pub after: Option<String>,
}

/// One page of groups with a holder or a waiter, by name; the next cursor
/// is the last group's key.
pub async fn groups_page(
    db: &dyn Database,
    f: &GroupFilter,
    limit: u32,
    now_ms: i64,
) -> Result<Page<GroupSummary>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        group_key: String,
        holder: Option<String>,
        holder_heartbeat_ms: Option<i64>,
        waiting: i64,
        oldest_arrived_ms: Option<i64>,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "SELECT group_key, \
               MAX(CASE WHEN state = 'holding' THEN execution_id END) AS holder, \
               MAX(CASE WHEN state = 'holding' THEN heartbeat_ms END) AS holder_heartbeat_ms, \
               SUM(state = 'waiting') AS waiting, \
               MIN(CASE WHEN state = 'waiting' THEN arrived_ms END) AS oldest_arrived_ms \
             FROM serial_queue WHERE state IN ('holding','waiting') \
               AND (?2 IS NULL OR group_key > ?2) \
               AND (?3 IS NULL OR group_key IN (SELECT q.group_key FROM serial_queue q \
                 JOIN executions e ON e.id = q.instance_id \
                 WHERE e.repo = ?3 AND q.state IN ('holding','waiting'))) \
             GROUP BY group_key ORDER BY group_key LIMIT ?1",
            limit.saturating_add(1),
            f.after.clone(),
            f.repo.clone(),
        ))
        .await?,
    )?;
    let stale_before = now_ms.saturating_sub(HOLDER_STALE_MS);
    let mut items: Vec<GroupSummary> = rows
        .into_iter()
        .map(|r| GroupSummary {
            group: r.group_key,
            holder: r.holder,
            holder_heartbeat_age_ms: r.holder_heartbeat_ms.map(|h| now_ms.saturating_sub(h)),
            holder_stale: r.holder_heartbeat_ms.is_some_and(|h| h < stale_before),
            waiting: u32::try_from(r.waiting).unwrap_or(u32::MAX),
            oldest_waited_ms: r.oldest_arrived_ms.map(|a| now_ms.saturating_sub(a)),
        })
        .collect();
    let more = items.len() > limit as usize;
    items.truncate(limit as usize);
    let next_cursor = if more {
        items.last().map(|g| g.group.clone())
    } else {
        None
    };
    Ok(Page { items, next_cursor })
}

/// Instances one [`newer_revisions`] call asks about: D1 binds at most 100
/// parameters per statement.
pub const NEWER_REVISIONS_IDS_MAX: usize = 100;

/// For each of `instance_ids` whose rows name a newer revision
/// (`superseded_by`: the superseding arrival's, or the branch head a
/// `not_current` skip saw), the most recent one. At most
/// `NEWER_REVISIONS_IDS_MAX` ids are asked about.
pub async fn newer_revisions(
    db: &dyn Database,
    instance_ids: &[&str],
) -> Result<Vec<(String, String)>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        instance_id: String,
        superseded_by: String,
    }
    let ids = &instance_ids[..instance_ids.len().min(NEWER_REVISIONS_IDS_MAX)];
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let marks: Vec<String> = (1..=ids.len()).map(|i| format!("?{i}")).collect();
    let sql = format!(
        "SELECT instance_id, superseded_by FROM serial_queue WHERE superseded_by IS NOT NULL \
         AND instance_id IN ({}) ORDER BY seq",
        marks.join(", ")
    );
    let params = ids
        .iter()
        .map(|id| crate::store::Param::from(*id))
        .collect();
    let rows: Vec<Row> = decode(db.all(Stmt::new(sql, params)).await?)?;
    // Oldest first, so a later row of the same instance wins.
    let mut out: Vec<(String, String)> = Vec::new();
    for r in rows {
        match out.iter_mut().find(|(id, _)| *id == r.instance_id) {
            Some(entry) => entry.1 = r.superseded_by,
            None => out.push((r.instance_id, r.superseded_by)),
        }
    }
    Ok(out)
}

/// The serial group an instance last queued in, if any.
pub async fn group_of(db: &dyn Database, instance_id: &str) -> Result<Option<String>, StoreError> {
    #[derive(Deserialize)]
    struct Row {
        group_key: String,
    }
    let rows: Vec<Row> = decode(
        db.all(stmt!(
            "SELECT group_key FROM serial_queue WHERE instance_id = ?1 ORDER BY seq DESC LIMIT 1",
            instance_id,
        ))
        .await?,
    )?;
    Ok(rows.into_iter().next().map(|r| r.group_key))
}
