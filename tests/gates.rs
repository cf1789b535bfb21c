//! The gates (src/gates/) natively: real SQLite running the real
//! migrations, time passed in as numbers, D1 round trips counted.

mod common;

use common::{block_on, CountingDb, T0};
use sluice::gates::admission::{self, AdmissionOutcome};
use sluice::gates::lease::{self, LeaseOutcome};
use sluice::gates::policy::{ArrivalRule, NewerFacts, PolicyError, WaiterFacts};
use sluice::gates::serial::{
    self, Arrival, ClaimOutcome, EnqueueOutcome, RowState, Skipped, WaitReason,
};
use sluice::gates::{Current, QueuePolicy, SkipReason};
use sluice::limits::{
    HOLDER_STALE_MS, LEASE_TTL_MS, QUEUE_POLICY_MS_MAX, SERIAL_QUEUED_TIMEOUT_MS_DEFAULT,
    SLOT_TTL_MS,
};
use sluice::store::sql::decode;
use sluice::store::Database;

const G: &str = "deploy:octo/hello:main";
const MIN: i64 = 60_000;

fn fresh() -> CountingDb {
    CountingDb::new()
}

fn arrival<'a>(id: &'a str, rev: &'a str, current: Current) -> Arrival<'a> {
    Arrival {
        group: G,
        execution_id: id,
        revision: rev,
        current,
        current_read_ms: None,
        imperative: false,
    }
}

/// The instance's row in `executions` (a waiter is live while its instance
/// is queued, running or waiting), written around the round-trip count.
fn set_status(db: &CountingDb, id: &str, status: &str) {
    common::set_instance_status(&db.db, serial::instance_of(id), status);
}

fn enq(db: &CountingDb, id: &str, rev: &str, current: Current, now: i64) -> EnqueueOutcome {
    common::ensure_instance(&db.db, serial::instance_of(id));
    block_on(serial::enqueue(
        db,
        &arrival(id, rev, current),
        &QueuePolicy::default(),
        now,
    ))
    .expect("enqueue")
}

fn enq_with(db: &CountingDb, a: &Arrival<'_>, p: &QueuePolicy, now: i64) -> EnqueueOutcome {
    common::ensure_instance(&db.db, serial::instance_of(a.execution_id));
    block_on(serial::enqueue(db, a, p, now)).expect("enqueue")
}

fn claim(db: &CountingDb, id: &str, now: i64) -> ClaimOutcome {
    block_on(serial::claim(db, G, id, &QueuePolicy::default(), now)).expect("claim")
}

fn claim_with(db: &CountingDb, id: &str, p: &QueuePolicy, now: i64) -> ClaimOutcome {
    block_on(serial::claim(db, G, id, p, now)).expect("claim")
}

fn queued(superseded: &[(&str, &str, &str)]) -> EnqueueOutcome {
    EnqueueOutcome::Queued {
        superseded: superseded
            .iter()
            .map(|(id, rev, by)| Skipped {
                execution_id: (*id).into(),
                revision: (*rev).into(),
                reason: Some(SkipReason::Superseded),
                superseded_by: Some((*by).into()),
            })
            .collect(),
    }
}

fn holding() -> ClaimOutcome {
    ClaimOutcome::Holding { took_over: None }
}

fn is_waiting(o: &ClaimOutcome) -> bool {
    matches!(o, ClaimOutcome::Waiting { .. })
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct QRow {
    seq: i64,
    execution_id: String,
    revision: String,
    imperative: i64,
    state: String,
    arrived_ms: i64,
    heartbeat_ms: i64,
    claimed_ms: Option<i64>,
    superseded_by: Option<String>,
    skipped_reason: Option<String>,
    ended_by: Option<String>,
    judged_current: i64,
    current_read_ms: Option<i64>,
}

fn rows_of(db: &dyn Database, group: &str) -> Vec<QRow> {
    let rows = block_on(db.all(sluice::stmt!(
        "SELECT seq, execution_id, revision, imperative, state, arrived_ms, heartbeat_ms, claimed_ms, \
         superseded_by, skipped_reason, ended_by, judged_current, current_read_ms FROM serial_queue \
         WHERE group_key = ?1 ORDER BY seq",
        group
    )))
    .expect("select");
    decode(rows).expect("decode")
}

fn row(db: &CountingDb, id: &str) -> QRow {
    rows_of(&db.db, G)
        .into_iter()
        .find(|r| r.execution_id == id)
        .expect("row exists")
}

fn state(db: &CountingDb, id: &str) -> String {
    row(db, id).state
}

/// Counts the D1 round trips `f` makes.
fn trips<T>(db: &CountingDb, f: impl FnOnce() -> T) -> (T, u32) {
    let before = db.calls.get();
    let out = f();
    (out, db.calls.get() - before)
}

// --- serial queue: ADR-0004 rule by rule ---

#[test]
fn first_arrival_claims_and_holds() {
    let db = fresh();
    let (out, n) = trips(&db, || enq(&db, "a", "r1", Current::NotDeclared, T0));
    assert_eq!(out, queued(&[]));
    assert_eq!(n, 1, "enqueue is one round trip");
    let (out, n) = trips(&db, || claim(&db, "a", T0));
    assert_eq!(out, holding());
    assert_eq!(n, 1, "claim is one round trip");
    // Quoted by `npm run bench`.
    println!("bench: claim D1 round trips = {n}");
    let r = row(&db, "a");
    assert_eq!((r.state.as_str(), r.claimed_ms), ("holding", Some(T0)));
}

/// ADR-0004's sequence diagram: three pushes in quick succession.
#[test]
fn burst_newest_waiter_wins_and_holder_is_never_touched() {
    let db = fresh();
    assert_eq!(enq(&db, "a", "rA", Current::NotDeclared, T0), queued(&[]));
    assert_eq!(claim(&db, "a", T0), holding());
    assert_eq!(
        enq(&db, "b", "rB", Current::NotDeclared, T0 + 1),
        queued(&[])
    );
    match claim(&db, "b", T0 + 2) {
        ClaimOutcome::Waiting {
            holder: Some(h),
            ahead: 0,
        } => {
            assert_eq!(
                (h.execution_id.as_str(), h.revision.as_str(), h.stale),
                ("a", "rA", false)
            );
            assert_eq!(h.heartbeat_age_ms, 2);
        }
        other => panic!("b should wait behind a: {other:?}"),
    }
    let holder_before = row(&db, "a");
    let (out, n) = trips(&db, || enq(&db, "c", "rC", Current::NotDeclared, T0 + 3));
    assert_eq!(
        out,
        queued(&[("b", "rB", "rC")]),
        "c supersedes b, and says so"
    );
    assert_eq!(
        n, 1,
        "enqueue + supersede is one round trip (one statement)"
    );
    // Quoted by `npm run bench`.
    println!("bench: enqueue+supersede D1 round trips = {n}");
    let b = row(&db, "b");
    assert_eq!(
        (
            b.state.as_str(),
            b.skipped_reason.as_deref(),
            b.superseded_by.as_deref(),
            b.ended_by.as_deref()
        ),
        ("superseded", Some("superseded"), Some("rC"), Some("c"))
    );
    assert_eq!(
        row(&db, "a"),
        holder_before,
        "the holder is never touched by a newer arrival"
    );
    assert_eq!(
        claim(&db, "b", T0 + 4),
        ClaimOutcome::Superseded { by: "rC".into() }
    );
    assert!(is_waiting(&claim(&db, "c", T0 + 5)));
    let (next, n) = trips(&db, || {
        block_on(serial::release(&db, G, "a", T0 + 6)).expect("release")
    });
    assert_eq!(
        next.as_deref(),
        Some("c"),
        "release names the live waiter to wake"
    );
    assert_eq!(n, 1);
    assert_eq!(claim(&db, "c", T0 + 7), holding());
    assert_eq!(state(&db, "a"), "released");
}

#[test]
fn not_current_arrival_is_skipped_at_once_and_supersedes_nothing() {
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq(&db, "b", "r3", Current::Known("r3".into()), T0 + 1);
    let waiting_before = row(&db, "b");
    // A late or re-requested older commit: the head is r3.
    let (out, n) = trips(&db, || {
        enq(&db, "c", "r2", Current::Known("r3".into()), T0 + 2)
    });
    assert_eq!(
        out,
        EnqueueOutcome::NotCurrent {
            current: "r3".into()
        }
    );
    assert_eq!(n, 1);
    assert_eq!(
        row(&db, "b"),
        waiting_before,
        "the head's waiting deploy is not displaced"
    );
    let c = row(&db, "c");
    assert_eq!(
        (
            c.state.as_str(),
            c.skipped_reason.as_deref(),
            c.superseded_by.as_deref()
        ),
        ("skipped", Some("not_current"), Some("r3"))
    );
    assert_eq!(
        claim(&db, "c", T0 + 3),
        ClaimOutcome::Skipped {
            reason: Some(SkipReason::NotCurrent)
        }
    );
    // A replay answers as the first call did and changes nothing.
    assert_eq!(
        enq(&db, "c", "r2", Current::Known("r3".into()), T0 + 4),
        EnqueueOutcome::NotCurrent {
            current: "r3".into()
        }
    );
    assert_eq!(row(&db, "c"), c);
}

#[test]
fn current_arrival_supersedes_every_non_current_waiter_whatever_its_age() {
    for policy in [
        QueuePolicy {
            supersede_after_ms: Some(30 * MIN),
            ..QueuePolicy::default()
        },
        QueuePolicy {
            supersede: false,
            ..QueuePolicy::default()
        },
    ] {
        let db = fresh();
        let a = |id: &'static str, rev: &'static str, current: Current| Arrival {
            group: G,
            execution_id: id,
            revision: rev,
            current,
            current_read_ms: None,
            imperative: false,
        };
        enq_with(&db, &a("h", "r0", Current::NotDeclared), &policy, T0);
        assert_eq!(claim_with(&db, "h", &policy, T0), holding());
        // Young waiters (well inside supersede_after), one of them at the
        // current revision, one imperative.
        enq_with(&db, &a("b", "r1", Current::Unknown), &policy, T0 + 1);
        enq_with(&db, &a("same", "r9", Current::Unknown), &policy, T0 + 2);
        enq_with(
            &db,
            &Arrival {
                imperative: true,
                ..a("i", "r1", Current::NotDeclared)
            },
            &policy,
            T0 + 3,
        );
        let out = enq_with(
            &db,
            &a("c", "r9", Current::Known("r9".into())),
            &policy,
            T0 + 4,
        );
        assert_eq!(out, queued(&[("b", "r1", "r9")]), "{policy:?}");
        assert_eq!(
            state(&db, "same"),
            "waiting",
            "a waiter at the current revision stays (ADR: 'whose revision is not')"
        );
        assert_eq!(state(&db, "i"), "waiting", "imperative waiters are exempt");
        assert_eq!(state(&db, "h"), "holding");
    }
}

#[test]
fn queued_timeout_only_behind_a_live_holder() {
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq(&db, "b", "r2", Current::NotDeclared, T0);
    let mut t = T0;
    // The holder heartbeats every minute for a long deploy.
    while t < T0 + SERIAL_QUEUED_TIMEOUT_MS_DEFAULT {
        t += MIN;
        assert!(block_on(serial::heartbeat(&db, G, "a", t)).expect("heartbeat"));
    }
    assert!(
        is_waiting(&claim(&db, "b", T0 + SERIAL_QUEUED_TIMEOUT_MS_DEFAULT)),
        "exactly 60 min is not past it"
    );
    assert_eq!(
        claim(&db, "b", T0 + SERIAL_QUEUED_TIMEOUT_MS_DEFAULT + 1),
        ClaimOutcome::TimedOut
    );
    let b = row(&db, "b");
    assert_eq!(
        (b.state.as_str(), b.skipped_reason.as_deref()),
        ("timed_out", Some("queued_timeout"))
    );
    assert_eq!(state(&db, "a"), "holding");

    // Behind a dead holder the waiter is not timed out: it takes over.
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq(&db, "b", "r2", Current::NotDeclared, T0);
    assert!(block_on(serial::heartbeat(&db, G, "a", T0 + 50 * MIN)).expect("heartbeat"));
    assert_eq!(
        claim(&db, "b", T0 + 61 * MIN),
        ClaimOutcome::Holding {
            took_over: Some("a".into())
        }
    );

    // With no holder at all, an old waiter claims (free group, nothing to time out behind).
    let db = fresh();
    enq(&db, "b", "r2", Current::NotDeclared, T0);
    assert_eq!(
        claim(&db, "b", T0 + 2 * SERIAL_QUEUED_TIMEOUT_MS_DEFAULT),
        holding()
    );
}

#[test]
fn stale_holder_stops_blocking_and_cannot_heartbeat_afterwards() {
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq(&db, "b", "r2", Current::NotDeclared, T0 + 1);
    match claim(&db, "b", T0 + HOLDER_STALE_MS) {
        ClaimOutcome::Waiting {
            holder: Some(h), ..
        } => assert!(!h.stale, "10 min exactly is not stale"),
        other => panic!("{other:?}"),
    }
    let (out, n) = trips(&db, || claim(&db, "b", T0 + HOLDER_STALE_MS + 1));
    assert_eq!(
        out,
        ClaimOutcome::Holding {
            took_over: Some("a".into())
        }
    );
    assert_eq!(n, 1, "the takeover is the same single statement");
    let a = row(&db, "a");
    assert_eq!(
        (a.state.as_str(), a.ended_by.as_deref()),
        ("stale", Some("b"))
    );
    assert_eq!(
        rows_of(&db.db, G)
            .iter()
            .filter(|r| r.state == "holding")
            .count(),
        1
    );
    // The stale holder comes back.
    assert!(
        !block_on(serial::heartbeat(&db, G, "a", T0 + HOLDER_STALE_MS + 2)).expect("heartbeat")
    );
    assert_eq!(
        claim(&db, "a", T0 + HOLDER_STALE_MS + 3),
        ClaimOutcome::Lost {
            taken_over_by: Some("b".into())
        }
    );
    assert_eq!(
        block_on(serial::release(&db, G, "a", T0 + HOLDER_STALE_MS + 4)).expect("release"),
        None
    );
    assert_eq!(state(&db, "a"), "stale");
    assert_eq!(
        state(&db, "b"),
        "holding",
        "the stale holder's release does not free b's group"
    );

    // A stale holder nobody took over still holds: its heartbeat is accepted.
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    assert!(block_on(serial::heartbeat(&db, G, "a", T0 + 3 * HOLDER_STALE_MS)).expect("heartbeat"));
    assert_eq!(state(&db, "a"), "holding");
}

#[test]
fn an_arrival_whose_head_read_failed_supersedes_nobody() {
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq(&db, "new", "r3", Current::Known("r3".into()), T0 + 1);
    // ADR-0004 let an older commit arriving after a newer one supersede it
    // when the head read failed, so the head's deploy never ran: an
    // unknown head judges nobody now; the dequeue's read decides.
    assert_eq!(enq(&db, "old", "r2", Current::Unknown, T0 + 2), queued(&[]));
    assert_eq!(state(&db, "new"), "waiting");
}

#[test]
fn a_head_read_judges_only_waiters_that_arrived_before_it() {
    let db = fresh();
    enq(&db, "c", "rc", Current::NotDeclared, T0);
    claim(&db, "c", T0);
    // An older waiter whose own read failed, then B reads head = B at
    // T0 + 2; its enqueue is delayed (a D1 backoff, a stalled pass) while
    // D arrives as the head (its read failed too, so it judges nobody).
    enq(&db, "older", "ra", Current::Unknown, T0 + 1);
    let read_b = T0 + 2;
    enq(&db, "d", "rd", Current::Unknown, T0 + 3);
    let late = Arrival {
        current_read_ms: Some(read_b),
        ..arrival("b", "rb", Current::Known("rb".into()))
    };
    assert_eq!(
        enq_with(&db, &late, &QueuePolicy::default(), T0 + 20 * MIN),
        queued(&[("older", "ra", "rb")]),
        "the waiter that arrived after B's read is never judged by it"
    );
    assert_eq!(state(&db, "d"), "waiting");
}

#[test]
fn replayed_enqueue_claim_and_release_change_nothing() {
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    enq(&db, "b", "r2", Current::NotDeclared, T0 + 1); // supersedes a
    let snapshot = rows_of(&db.db, G);
    let (out, n) = trips(&db, || enq(&db, "b", "r2", Current::NotDeclared, T0 + 2));
    assert_eq!(out, EnqueueOutcome::Existing(RowState::Waiting));
    assert_eq!(n, 2, "a replay costs a read");
    assert_eq!(
        enq(&db, "a", "r1", Current::NotDeclared, T0 + 3),
        EnqueueOutcome::Existing(RowState::Superseded)
    );
    assert_eq!(
        rows_of(&db.db, G),
        snapshot,
        "a replayed enqueue supersedes nothing, not even older waiters"
    );

    // An older waiter's replay does not supersede a newer arrival.
    let db = fresh();
    enq(&db, "h", "r0", Current::NotDeclared, T0);
    claim(&db, "h", T0);
    let p = QueuePolicy {
        supersede: false,
        ..QueuePolicy::default()
    };
    enq_with(
        &db,
        &arrival("old", "r1", Current::NotDeclared),
        &QueuePolicy::default(),
        T0 + 1,
    );
    enq_with(&db, &arrival("new", "r2", Current::NotDeclared), &p, T0 + 2);
    assert_eq!(
        enq(&db, "old", "r1", Current::NotDeclared, T0 + 3),
        EnqueueOutcome::Existing(RowState::Waiting)
    );
    assert_eq!(state(&db, "new"), "waiting");

    // Claim replayed by the holder; release replayed.
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    assert_eq!(claim(&db, "a", T0), holding());
    assert_eq!(claim(&db, "a", T0 + 5), holding());
    let a = row(&db, "a");
    assert_eq!(
        (a.claimed_ms, a.heartbeat_ms),
        (Some(T0), T0 + 5),
        "claimed once; a replay is a heartbeat"
    );
    enq(&db, "b", "r2", Current::NotDeclared, T0 + 6);
    assert_eq!(
        block_on(serial::release(&db, G, "a", T0 + 7))
            .expect("release")
            .as_deref(),
        Some("b")
    );
    let snapshot = rows_of(&db.db, G);
    assert_eq!(
        block_on(serial::release(&db, G, "a", T0 + 8))
            .expect("release")
            .as_deref(),
        Some("b"),
        "same answer"
    );
    assert_eq!(
        rows_of(&db.db, G),
        snapshot,
        "a replayed release changes nothing"
    );
    assert_eq!(claim(&db, "a", T0 + 9), ClaimOutcome::Released);
    assert_eq!(claim(&db, "nobody", T0 + 9), ClaimOutcome::NotEnqueued);
}

#[test]
fn imperative_work_is_exempt_on_both_sides_but_still_serializes() {
    let db = fresh();
    let p = QueuePolicy::default();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq(&db, "b", "r2", Current::NotDeclared, T0 + 1);
    let raw = Arrival {
        imperative: true,
        ..arrival("raw", "r0", Current::Known("r2".into()))
    };
    assert_eq!(
        enq_with(&db, &raw, &p, T0 + 2),
        queued(&[]),
        "not current, yet queued; supersedes nobody"
    );
    assert_eq!(state(&db, "b"), "waiting");
    // Past the queued timeout behind a live holder: raw is not aged out.
    let late = T0 + SERIAL_QUEUED_TIMEOUT_MS_DEFAULT + 10;
    assert!(block_on(serial::heartbeat(&db, G, "a", late)).expect("heartbeat"));
    assert_eq!(
        enq(&db, "c", "r3", Current::NotDeclared, late - 5),
        queued(&[("b", "r2", "r3")]),
        "raw is not superseded"
    );
    assert!(is_waiting(&claim(&db, "raw", late)));
    assert_eq!(
        claim(&db, "c", late),
        ClaimOutcome::Waiting {
            holder: claim_holder(&db, late),
            ahead: 1
        }
    );
    block_on(serial::release(&db, G, "a", late)).expect("release");
    // FIFO: raw arrived before c, so c waits behind it.
    assert!(is_waiting(&claim(&db, "c", late + 1)));
    assert_eq!(claim(&db, "raw", late + 2), holding());
    assert!(is_waiting(&claim(&db, "c", late + 3)));
    block_on(serial::release(&db, G, "raw", late + 4)).expect("release");
    assert_eq!(
        claim(&db, "c", late + 5),
        holding(),
        "a newer run that ran imperatively does not supersede c"
    );
}

fn claim_holder(db: &CountingDb, now: i64) -> Option<serial::HolderView> {
    let h = rows_of(&db.db, G)
        .into_iter()
        .find(|r| r.state == "holding")?;
    Some(serial::HolderView {
        heartbeat_age_ms: now - h.heartbeat_ms,
        stale: h.heartbeat_ms < now - HOLDER_STALE_MS,
        execution_id: h.execution_id,
        revision: h.revision,
    })
}

#[test]
fn operator_skip_records_no_reason_and_never_touches_the_holder() {
    let db = fresh();
    let p = QueuePolicy {
        supersede: false,
        ..QueuePolicy::default()
    };
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq_with(&db, &arrival("b", "r2", Current::NotDeclared), &p, T0 + 1);
    enq_with(&db, &arrival("c", "r3", Current::NotDeclared), &p, T0 + 2);
    enq_with(
        &db,
        &Arrival {
            imperative: true,
            ..arrival("raw", "r4", Current::NotDeclared)
        },
        &p,
        T0 + 3,
    );
    enq_with(&db, &arrival("d", "r5", Current::NotDeclared), &p, T0 + 4);
    assert!(block_on(serial::skip(&db, G, "b", T0 + 5)).expect("skip"));
    let b = row(&db, "b");
    assert_eq!((b.state.as_str(), b.skipped_reason), ("skipped", None));
    assert!(
        !block_on(serial::skip(&db, G, "b", T0 + 6)).expect("skip"),
        "a replay skips nothing"
    );
    assert!(
        !block_on(serial::skip(&db, G, "a", T0 + 6)).expect("skip"),
        "never the holder"
    );
    assert_eq!(
        claim(&db, "b", T0 + 7),
        ClaimOutcome::Skipped { reason: None }
    );

    let skipped = block_on(serial::skip_all(&db, G, T0 + 8)).expect("skip_all");
    let ids: Vec<_> = skipped
        .iter()
        .map(|s| (s.execution_id.as_str(), s.reason))
        .collect();
    assert_eq!(
        ids,
        [("c", None), ("raw", None), ("d", None)],
        "imperative included, oldest first"
    );
    assert_eq!(state(&db, "a"), "holding");
    assert!(rows_of(&db.db, G).iter().all(|r| r.state != "waiting"));
    assert!(block_on(serial::skip_all(&db, G, T0 + 9))
        .expect("skip_all")
        .is_empty());
}

/// Scenario 10: supersede-after is applied when a new deployment is
/// enqueued, never later at a waiter's own claim (the queue-policy seed).
#[test]
fn supersede_after_applies_at_enqueue_only() {
    let p = QueuePolicy {
        supersede_after_ms: Some(30 * MIN),
        ..QueuePolicy::default()
    };
    let db = fresh();
    enq_with(&db, &arrival("h", "r0", Current::NotDeclared), &p, T0);
    claim_with(&db, "h", &p, T0);
    enq_with(&db, &arrival("b", "r1", Current::NotDeclared), &p, T0);
    assert_eq!(
        enq_with(
            &db,
            &arrival("c", "r2", Current::NotDeclared),
            &p,
            T0 + 10 * MIN
        ),
        queued(&[]),
        "b is 10 min old: spared"
    );
    // 30 minutes later b has aged past supersede_after, and c is newer and
    // live: the old code superseded b here, at its own claim.
    let later = T0 + 40 * MIN;
    assert!(block_on(serial::heartbeat(&db, G, "h", later)).expect("heartbeat"));
    assert!(is_waiting(&claim_with(&db, "b", &p, later)));
    assert_eq!(state(&db, "b"), "waiting");
    // Both deploy, oldest first.
    block_on(serial::release(&db, G, "h", later + 1)).expect("release");
    assert_eq!(claim_with(&db, "b", &p, later + 2), holding());
    block_on(serial::release(&db, G, "b", later + 3)).expect("release");
    assert_eq!(claim_with(&db, "c", &p, later + 4), holding());
    // An arrival past b's age still supersedes the aged waiters it finds.
    enq_with(
        &db,
        &arrival("d", "r3", Current::NotDeclared),
        &p,
        later + 5,
    );
    assert_eq!(
        enq_with(
            &db,
            &arrival("e", "r4", Current::NotDeclared),
            &p,
            later + 31 * MIN
        ),
        queued(&[("d", "r3", "r4")])
    );
}

/// Issue 24, the preview lane (`runs::kit::preview::preview_policy`): a
/// waiter behind a running preview never times out in the queue (the
/// queued timeout does not apply), a new head supersedes it whatever its
/// age (no supersede-after), naming the new head, and the running one is
/// never touched.
#[test]
fn the_preview_lane_supersedes_by_head_and_never_times_out() {
    let p = sluice::runs::kit::preview::preview_policy(None);
    assert_eq!(p.supersede_after_ms, None);
    let db = fresh();
    enq_with(
        &db,
        &arrival("h", "r0", Current::Known("r0".into())),
        &p,
        T0,
    );
    assert_eq!(claim_with(&db, "h", &p, T0), holding());
    assert_eq!(
        enq_with(
            &db,
            &arrival("b", "r1", Current::Known("r1".into())),
            &p,
            T0 + 1
        ),
        queued(&[]),
        "a holder is never superseded"
    );
    let later = T0 + 3 * sluice::limits::SERIAL_QUEUED_TIMEOUT_MS_DEFAULT;
    assert!(block_on(serial::heartbeat(&db, G, "h", later)).expect("heartbeat"));
    assert!(
        is_waiting(&claim_with(&db, "b", &p, later)),
        "three deploy queued timeouts behind a running preview: still waiting"
    );
    assert_eq!(
        enq_with(
            &db,
            &arrival("c", "r2", Current::Known("r2".into())),
            &p,
            later + 1
        ),
        queued(&[("b", "r1", "r2")]),
        "the new head supersedes the waiting one, naming itself"
    );
    assert_eq!(state(&db, "h"), "holding");
}

#[test]
fn supersede_off_is_fifo() {
    let p = QueuePolicy {
        supersede: false,
        ..QueuePolicy::default()
    };
    let db = fresh();
    for (i, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let rev = format!("r{i}");
        assert_eq!(
            enq_with(
                &db,
                &arrival(id, &rev, Current::NotDeclared),
                &p,
                T0 + i as i64
            ),
            queued(&[])
        );
    }
    let mut order = Vec::new();
    let mut t = T0 + 10;
    let mut live: Vec<&str> = vec!["d", "c", "b", "a"]; // polled newest first to tempt a jump
    for _ in 0..20 {
        if live.is_empty() {
            break;
        }
        for id in live.clone() {
            t += 1;
            if claim_with(&db, id, &p, t) == holding() {
                order.push(id);
                block_on(serial::release(&db, G, id, t)).expect("release");
                live.retain(|x| *x != id);
            }
        }
    }
    assert_eq!(order, ["a", "b", "c", "d"]);
}

/// A head's waiter never yields to an older commit queued again after it
/// (a restart or a re-run) whose head read failed: arriving later means a
/// newer revision only when the arrival knew the head.
#[test]
fn a_waiter_never_yields_to_a_later_arrival_that_did_not_know_the_head() {
    let db = fresh();
    enq(&db, "c", "rc", Current::NotDeclared, T0);
    claim(&db, "c", T0);
    enq(&db, "d", "rd", Current::Known("rd".into()), T0 + 1);
    // An older commit queued again; its read failed, so it judges nobody.
    assert_eq!(enq(&db, "b", "rb", Current::Unknown, T0 + 2), queued(&[]));
    block_on(serial::release(&db, G, "c", T0 + 3)).expect("release");
    // D is paused meanwhile: B takes its turn (its dequeue read skips it).
    set_status(&db, "d", "paused");
    assert_eq!(claim(&db, "b", T0 + 4), holding());
    block_on(serial::release(&db, G, "b", T0 + 5)).expect("release");
    set_status(&db, "d", "waiting");
    assert_eq!(
        claim(&db, "d", T0 + 6),
        holding(),
        "the head deploys: B's later arrival did not make it newer"
    );
}

/// A waiter never yields to a later arrival whose head read was made
/// before the waiter arrived (its enqueue delayed): that read ranks nothing
/// (found by review: the head was skipped `superseded` by an older commit).
#[test]
fn a_waiter_never_yields_to_a_later_arrival_whose_read_came_before_it() {
    let db = fresh();
    enq(&db, "c", "rc", Current::NotDeclared, T0);
    claim(&db, "c", T0);
    enq(&db, "d", "rd", Current::Known("rd".into()), T0 + 1);
    let late = Arrival {
        current_read_ms: Some(T0),
        ..arrival("b", "rb", Current::Known("rb".into()))
    };
    assert_eq!(
        enq_with(&db, &late, &QueuePolicy::default(), T0 + 2),
        queued(&[])
    );
    block_on(serial::release(&db, G, "c", T0 + 3)).expect("release");
    set_status(&db, "d", "paused");
    assert_eq!(claim(&db, "b", T0 + 4), holding());
    block_on(serial::release(&db, G, "b", T0 + 5)).expect("release");
    set_status(&db, "d", "waiting");
    assert_eq!(claim(&db, "d", T0 + 6), holding(), "the head must deploy");
}

#[test]
fn a_paused_waiter_stops_blocking_and_yields_when_it_returns() {
    for (p, returns_to) in [
        (QueuePolicy::default(), "superseded"),
        (
            QueuePolicy {
                supersede: false,
                ..QueuePolicy::default()
            },
            "waits its turn",
        ),
    ] {
        let db = fresh();
        let imperative = Arrival {
            imperative: true,
            ..arrival("old", "r1", Current::NotDeclared)
        };
        enq_with(&db, &arrival("h", "r0", Current::NotDeclared), &p, T0);
        claim_with(&db, "h", &p, T0);
        // An imperative older waiter is never superseded by arrival.
        let old = if p.supersede {
            imperative
        } else {
            arrival("old", "r1", Current::NotDeclared)
        };
        let old_non_imperative = !old.imperative;
        enq_with(&db, &old, &p, T0 + 1);
        enq_with(&db, &arrival("new", "r2", Current::NotDeclared), &p, T0 + 2);
        assert!(is_waiting(&claim_with(&db, "old", &p, T0 + MIN)));
        // old's instance is paused: it is not handed the group and blocks nobody.
        set_status(&db, "old", "paused");
        assert_eq!(
            block_on(serial::release(&db, G, "h", T0 + 2 * MIN))
                .expect("release")
                .as_deref(),
            Some("new")
        );
        assert_eq!(
            claim_with(&db, "new", &p, T0 + 2 * MIN),
            holding(),
            "{returns_to}: a paused older waiter does not block"
        );
        set_status(&db, "old", "waiting");
        let back = claim_with(&db, "old", &p, T0 + 3 * MIN);
        match returns_to {
            "superseded" if old_non_imperative => assert_eq!(
                back,
                ClaimOutcome::Superseded { by: "r2".into() },
                "never run an older revision after a newer one"
            ),
            _ => assert!(is_waiting(&back)),
        }
    }
}

#[test]
fn explain_and_groups_show_why_each_waits() {
    let db = fresh();
    let p = QueuePolicy {
        supersede: false,
        ..QueuePolicy::default()
    };
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq_with(
        &db,
        &Arrival {
            imperative: true,
            ..arrival("raw", "r0", Current::NotDeclared)
        },
        &p,
        T0 + 1,
    );
    enq_with(&db, &arrival("b", "r2", Current::NotDeclared), &p, T0 + 2);
    enq(&db, "late", "r1", Current::Known("r2".into()), T0 + 3);
    enq(&db, "c", "r3", Current::NotDeclared, T0 + 4); // supersedes b
    let now = T0 + 10 * MIN;
    claim(&db, "c", now - MIN);
    assert!(block_on(serial::heartbeat(&db, G, "a", now - 2 * MIN)).expect("heartbeat"));
    let v = block_on(serial::explain(&db, G, &QueuePolicy::default(), now)).expect("explain");
    let h = v.holder.as_ref().expect("holder");
    assert_eq!(
        (
            h.execution_id.as_str(),
            h.held_ms,
            h.heartbeat_age_ms,
            h.stale
        ),
        ("a", 10 * MIN, 2 * MIN, false)
    );
    let why: Vec<_> = v
        .waiters
        .iter()
        .map(|w| (w.execution_id.as_str(), w.why.clone(), w.times_out_in_ms))
        .collect();
    assert_eq!(
        why,
        [
            // raw's instance waits (live): it claims first.
            (
                "raw",
                WaitReason::BehindHolder {
                    execution_id: "a".into()
                },
                None
            ),
            (
                "c",
                WaitReason::BehindWaiter {
                    execution_id: "raw".into()
                },
                Some(SERIAL_QUEUED_TIMEOUT_MS_DEFAULT - 10 * MIN + 4)
            ),
        ]
    );
    let ended: Vec<_> = v
        .recent
        .iter()
        .map(|e| {
            (
                e.execution_id.as_str(),
                e.state,
                e.reason,
                e.superseded_by.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        ended,
        [
            (
                "b",
                RowState::Superseded,
                Some(SkipReason::Superseded),
                Some("r3")
            ),
            (
                "late",
                RowState::Skipped,
                Some(SkipReason::NotCurrent),
                Some("r2")
            ),
        ]
    );
    // Later: raw's instance is paused; the holder went stale after c's last claim.
    set_status(&db, "raw", "paused");
    let later = T0 + 50 * MIN;
    assert!(block_on(serial::heartbeat(
        &db,
        G,
        "a",
        later - HOLDER_STALE_MS - MIN / 2
    ))
    .expect("heartbeat"));
    assert!(is_waiting(&claim(&db, "c", later - MIN)));
    let v = block_on(serial::explain(&db, G, &QueuePolicy::default(), later)).expect("explain");
    assert!(v.holder.as_ref().is_some_and(|h| h.stale));
    let why: Vec<_> = v
        .waiters
        .iter()
        .map(|w| (w.execution_id.as_str(), w.why.clone()))
        .collect();
    assert_eq!(
        why,
        [
            ("raw", WaitReason::InstanceNotLive),
            (
                "c",
                WaitReason::NextToClaim {
                    takes_over: Some("a".into())
                }
            )
        ]
    );

    let summary = block_on(serial::groups(&db, later)).expect("groups");
    assert_eq!(summary.len(), 1);
    let s = &summary[0];
    assert_eq!(
        (
            s.group.as_str(),
            s.holder.as_deref(),
            s.holder_stale,
            s.waiting
        ),
        (G, Some("a"), true, 2)
    );
    assert_eq!(s.oldest_waited_ms, Some(50 * MIN - 1));
    assert_eq!(s.holder_heartbeat_age_ms, Some(HOLDER_STALE_MS + MIN / 2));
}

#[test]
fn purge_deletes_only_ended_rows_older_than_the_cutoff() {
    let db = fresh();
    enq(&db, "a", "r1", Current::NotDeclared, T0);
    claim(&db, "a", T0);
    enq(&db, "b", "r2", Current::NotDeclared, T0 + 1);
    enq(&db, "c", "r3", Current::NotDeclared, T0 + 2); // supersedes b at T0 + 2
    enq(&db, "old", "r0", Current::Known("r3".into()), T0 + 3); // skipped at T0 + 3
    let n = block_on(serial::purge_ended(&db, T0 + 3, 10)).expect("purge");
    assert_eq!(n, 1, "only b ended before the cutoff");
    let left: Vec<_> = rows_of(&db.db, G)
        .into_iter()
        .map(|r| r.execution_id)
        .collect();
    assert_eq!(
        left,
        ["a", "c", "old"],
        "holder and waiter stay whatever their age"
    );
    assert_eq!(
        block_on(serial::purge_ended(&db, T0 + 100, 10)).expect("purge"),
        1
    );
    assert_eq!(
        block_on(serial::purge_ended(&db, T0 + 100, 10)).expect("purge"),
        0
    );
}

#[test]
fn the_table_refuses_inconsistent_rows() {
    let db = fresh();
    let bad = [
        // superseded without a reason
        "INSERT INTO serial_queue (group_key, execution_id, revision, state, arrived_ms, heartbeat_ms, updated_ms, superseded_by) VALUES ('g','x','r','superseded',0,0,0,'r2')",
        // an automatic reason on an imperative row
        "INSERT INTO serial_queue (group_key, execution_id, revision, imperative, state, arrived_ms, heartbeat_ms, updated_ms, skipped_reason, superseded_by) VALUES ('g','x','r',1,'superseded',0,0,0,'superseded','r2')",
        // timed out without a reason
        "INSERT INTO serial_queue (group_key, execution_id, revision, state, arrived_ms, heartbeat_ms, updated_ms) VALUES ('g','x','r','timed_out',0,0,0)",
        // not_current on a waiting row
        "INSERT INTO serial_queue (group_key, execution_id, revision, state, arrived_ms, heartbeat_ms, updated_ms, skipped_reason, superseded_by) VALUES ('g','x','r','waiting',0,0,0,'not_current','r2')",
        // an admitted slot without its admission time
        "INSERT INTO pool_slots (pool, holder, state, arrived_ms, heartbeat_ms) VALUES ('p','x','admitted',0,0)",
        // a reason outside the set
        "INSERT INTO serial_queue (group_key, execution_id, revision, state, arrived_ms, heartbeat_ms, updated_ms, skipped_reason) VALUES ('g','x','r','skipped',0,0,0,'bored')",
        // holding without a claim time
        "INSERT INTO serial_queue (group_key, execution_id, revision, state, arrived_ms, heartbeat_ms, updated_ms) VALUES ('g','x','r','holding',0,0,0)",
        // a state outside the set
        "INSERT INTO serial_queue (group_key, execution_id, revision, state, arrived_ms, heartbeat_ms, updated_ms) VALUES ('g','x','r','running',0,0,0)",
    ];
    for sql in bad {
        assert!(
            block_on(db.run(sluice::stmt!(sql))).is_err(),
            "accepted: {sql}"
        );
    }
}

// --- serial queue: seeded interleavings ---

/// splitmix64: tiny, deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> Option<T> {
        if xs.is_empty() {
            None
        } else {
            Some(xs[self.below(xs.len() as u64) as usize])
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    NotArrived,
    Waiting,
    Holding,
    /// Ended by the queue or by its own release.
    Done,
    /// A holder that stopped heartbeating and will never call again (its
    /// executor died; the row goes stale).
    Crashed,
    /// A waiter whose instance an operator paused: not live, calls again
    /// when resumed.
    Paused,
    /// Learned from a refused heartbeat that it lost the group.
    Lost,
}

struct Exec {
    id: String,
    revision: String,
    current: Current,
    imperative: bool,
    phase: Phase,
    /// Step at which it arrived / first held the group (model clock of ops).
    arrived_step: Option<usize>,
    claimed_step: Option<usize>,
    queued: bool,
    released: bool,
    /// When it arrived, and when its current revision was asked for (a
    /// delayed read is older than its arrival).
    arrived_ms: i64,
    read_ms: Option<i64>,
}

const SCHEDULES_DEFAULT: u64 = 1_000;
const OPS_PER_SCHEDULE_MAX: usize = 70;
const QUIESCE_ROUNDS_MAX: usize = 400;
const SEED_BASE: u64 = 0x5EED_0004;

/// The states a row may move to from `from` (ADR-0004: a holder is never
/// superseded, timed out or skipped; ended rows stay ended).
fn transition_allowed(from: &str, to: &str) -> bool {
    match from {
        "waiting" => true,
        "holding" => matches!(to, "holding" | "released" | "stale"),
        _ => from == to,
    }
}

/// Checks the table after every operation; `prev` is the table before it.
fn check_invariants(prev: &[QRow], cur: &[QRow], execs: &[Exec]) {
    let holders: Vec<_> = cur
        .iter()
        .filter(|r| r.state == "holding")
        .map(|r| r.execution_id.as_str())
        .collect();
    assert!(holders.len() <= 1, "two holders: {holders:?}");
    for p in prev {
        let c = cur
            .iter()
            .find(|c| c.seq == p.seq)
            .expect("rows are never deleted here");
        assert!(
            transition_allowed(&p.state, &c.state),
            "{}: {} -> {}",
            c.execution_id,
            p.state,
            c.state
        );
        assert_eq!(
            (c.arrived_ms, &c.revision, c.imperative),
            (p.arrived_ms, &p.revision, p.imperative)
        );
    }
    for r in cur {
        let reason = r
            .skipped_reason
            .as_deref()
            .map(|s| SkipReason::parse(s).expect("known reason"));
        match r.state.as_str() {
            "superseded" => {
                assert_eq!(reason, Some(SkipReason::Superseded), "{}", r.execution_id);
                let by = r
                    .ended_by
                    .as_deref()
                    .expect("superseded names its superseder");
                let newer = cur
                    .iter()
                    .find(|n| n.execution_id == by)
                    .expect("superseder has a row");
                assert!(
                    newer.seq > r.seq,
                    "{} superseded by older {}",
                    r.execution_id,
                    by
                );
                assert_eq!(r.superseded_by.as_ref(), Some(&newer.revision));
                assert_eq!(newer.imperative, 0, "imperative arrivals supersede nobody");
            }
            "timed_out" => assert_eq!(reason, Some(SkipReason::QueuedTimeout)),
            "skipped" => assert!(matches!(reason, None | Some(SkipReason::NotCurrent))),
            _ => assert_eq!(reason, None, "{} {}", r.execution_id, r.state),
        }
        if r.imperative == 1 {
            assert!(
                !matches!(r.state.as_str(), "superseded" | "timed_out"),
                "imperative {} aged out",
                r.execution_id
            );
        }
        if r.state == "holding" {
            let e = execs.iter().find(|e| e.id == r.execution_id).expect("exec");
            assert!(
                matches!(e.phase, Phase::Holding | Phase::Crashed),
                "{} holds but is {:?}",
                e.id,
                e.phase
            );
        }
    }
}

/// The claim verdict as ADR-0004 and the policy say, from the table before
/// the claim: an independent statement of what `CLAIM_SQL` must do.
fn expected_claim(
    rows: &[QRow],
    paused: &[String],
    id: &str,
    p: &QueuePolicy,
    now: i64,
) -> (String, Option<String>) {
    let me = rows
        .iter()
        .find(|r| r.execution_id == id)
        .expect("claimant row");
    if me.state != "waiting" {
        return (me.state.clone(), None);
    }
    let live_holder = rows.iter().any(|r| {
        r.state == "holding" && r.execution_id != id && r.heartbeat_ms >= now - HOLDER_STALE_MS
    });
    let live_older_waiter = rows
        .iter()
        .any(|r| r.state == "waiting" && r.seq < me.seq && !paused.contains(&r.execution_id));
    let facts = WaiterFacts {
        revision: &me.revision,
        arrived_ms: me.arrived_ms,
        imperative: me.imperative == 1,
        waiting: true,
    };
    let winner = rows.iter().filter(|n| n.seq > me.seq).rev().find(|n| {
        let newer = NewerFacts {
            imperative: n.imperative == 1,
            has_claimed: n.claimed_ms.is_some(),
            judged_current: n.judged_current == 1,
            current_read_ms: n.current_read_ms,
        };
        p.yields_at_claim(&facts, &newer)
    });
    if let Some(w) = winner {
        return ("superseded".into(), Some(w.revision.clone()));
    }
    if p.queued_timed_out(&facts, live_holder, now) {
        return ("timed_out".into(), None);
    }
    if !live_holder && !live_older_waiter {
        return ("holding".into(), None);
    }
    ("waiting".into(), None)
}

fn outcome_state(o: &ClaimOutcome) -> &'static str {
    match o {
        ClaimOutcome::Holding { .. } => "holding",
        ClaimOutcome::Waiting { .. } => "waiting",
        ClaimOutcome::Superseded { .. } => "superseded",
        ClaimOutcome::TimedOut => "timed_out",
        ClaimOutcome::Skipped { .. } => "skipped",
        ClaimOutcome::Released => "released",
        ClaimOutcome::Lost { .. } => "stale",
        ClaimOutcome::NotEnqueued => "none",
    }
}

struct Schedule {
    policy: QueuePolicy,
    crashes: bool,
    operator_skips: bool,
}

/// One schedule's world: the model of each execution, the queue's table, the
/// model clock and the trace a failing schedule prints.
struct Model<'t> {
    rng: Rng,
    sched: Schedule,
    execs: Vec<Exec>,
    db: CountingDb,
    now: i64,
    /// Operations applied so far (the model clock of ops).
    step: usize,
    trace: &'t mut Vec<String>,
}

/// The operations a schedule is made of, one per step.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// The next execution that has not arrived enqueues.
    Arrive(usize),
    /// A waiter polls its claim.
    Claim,
    Heartbeat,
    Release,
    /// An arrived execution replays its enqueue; a holder its claim.
    Replay,
    /// A holder's executor dies, or a waiter's instance is paused.
    CrashOrPause,
    Resume,
    OperatorSkip,
    /// Time passes.
    Advance,
}

impl Op {
    /// The operation a draw of `choice` (0..100; 100 at quiescence, where a
    /// waiter polls) names in `m`'s state; one that cannot apply there falls
    /// through to the next range that can, and finally to `Advance`.
    fn chosen(choice: u64, m: &Model<'_>) -> Op {
        let next_arrival = m.execs.iter().position(|e| e.phase == Phase::NotArrived);
        let any = |ph: Phase| m.execs.iter().any(|e| e.phase == ph);
        match choice {
            0..=17 if next_arrival.is_some() => Op::Arrive(next_arrival.unwrap_or(0)),
            18..=49 | 100 if any(Phase::Waiting) => Op::Claim,
            50..=62 if any(Phase::Holding) => Op::Heartbeat,
            63..=72 if any(Phase::Holding) => Op::Release,
            73..=78 => Op::Replay,
            79..=81 if m.sched.crashes => Op::CrashOrPause,
            84..=85 if m.sched.crashes => Op::Resume,
            82..=83 if m.sched.operator_skips => Op::OperatorSkip,
            _ => Op::Advance,
        }
    }
}

/// A schedule's policy, drawn first.
fn drawn_policy(rng: &mut Rng) -> QueuePolicy {
    match rng.below(10) {
        0 | 1 => QueuePolicy {
            supersede_after_ms: Some(rng.range(1, 30) * MIN),
            ..QueuePolicy::default()
        },
        2 | 3 => QueuePolicy {
            supersede: false,
            ..QueuePolicy::default()
        },
        // A pull request's preview lane (issue 24): no queued timeout, no
        // supersede-after.
        4 => sluice::runs::kit::preview::preview_policy(None),
        _ => QueuePolicy::default(),
    }
}

/// Execution `i` before it arrives, its head and kind drawn.
fn drawn_exec(rng: &mut Rng, i: usize) -> Exec {
    let revision = format!("r{i:02}");
    let current = match rng.below(20) {
        0..=7 => Current::NotDeclared,
        8..=11 => Current::Unknown,
        12..=16 => Current::Known(revision.clone()),
        _ => Current::Known("r99".into()),
    };
    Exec {
        id: format!("e{i}"),
        revision,
        current,
        imperative: rng.chance(12),
        phase: Phase::NotArrived,
        arrived_step: None,
        arrived_ms: 0,
        read_ms: None,
        claimed_step: None,
        queued: false,
        released: false,
    }
}

impl<'t> Model<'t> {
    /// A schedule drawn from `seed`: its policy, whether executors crash and
    /// operators skip, and its executions.
    fn drawn(seed: u64, trace: &'t mut Vec<String>) -> Self {
        let mut rng = Rng(seed);
        let policy = drawn_policy(&mut rng);
        let crashes = rng.chance(40);
        let sched = Schedule {
            operator_skips: crashes && rng.chance(30),
            crashes,
            policy,
        };
        trace.push(format!(
            "seed {seed:#x}: {:?}, crashes {}, operator skips {}",
            sched.policy, sched.crashes, sched.operator_skips
        ));
        let k = rng.range(2, 8) as usize;
        let execs = (0..k).map(|i| drawn_exec(&mut rng, i)).collect();
        Model {
            rng,
            sched,
            execs,
            db: CountingDb::new(),
            now: T0,
            step: 0,
            trace,
        }
    }

    /// Records `what` at the current time and step.
    fn log(&mut self, what: String) {
        let line = format!("t+{} {} {what}", self.now - T0, self.step);
        self.trace.push(line);
    }

    fn in_phase(&self, ph: Phase) -> Vec<usize> {
        self.execs
            .iter()
            .enumerate()
            .filter(|(_, e)| e.phase == ph)
            .map(|(i, _)| i)
            .collect()
    }

    fn rows(&self) -> Vec<QRow> {
        rows_of(&self.db.db, G)
    }

    /// Draws (or, at quiescence, takes a waiter's poll as) one operation,
    /// applies it, checks the invariants and returns the table after it.
    fn operate(&mut self, quiesce: bool) -> Vec<QRow> {
        let before = self.rows();
        let choice = if quiesce { 100 } else { self.rng.below(100) };
        match Op::chosen(choice, self) {
            Op::Arrive(i) => self.arrive(i, &before),
            Op::Claim => self.claim(&before),
            Op::Heartbeat => self.heartbeat(&before),
            Op::Release => self.release(),
            Op::Replay => self.replay(&before),
            Op::CrashOrPause => self.crash_or_pause(),
            Op::Resume => self.resume(),
            Op::OperatorSkip => self.operator_skip(&before),
            Op::Advance => self.advance(),
        }
        let cur = self.rows();
        check_invariants(&before, &cur, &self.execs);
        cur
    }

    /// Execution `i` enqueues, its head read a moment ago, or (a delayed
    /// enqueue) minutes ago, before some waiters arrived; the SQL's
    /// supersessions must be `ArrivalRule::supersedes`'s.
    fn arrive(&mut self, i: usize, before: &[QRow]) {
        let now = self.now;
        let read_ms = match self.rng.below(4) {
            0 => None,
            1 => Some(now - self.rng.range(0, 30) * MIN),
            _ => Some(now - self.rng.range(0, 2_000)),
        };
        let p = self.sched.policy.clone();
        let e = &self.execs[i];
        let a = Arrival {
            group: G,
            execution_id: &e.id,
            revision: &e.revision,
            current: e.current.clone(),
            current_read_ms: read_ms,
            imperative: e.imperative,
        };
        let rule = p.arrival_rule(&a.current, a.current_read_ms, a.revision, a.imperative, now);
        let mut predicted: Vec<String> = before
            .iter()
            .filter(|w| {
                rule.supersedes(&WaiterFacts {
                    revision: &w.revision,
                    arrived_ms: w.arrived_ms,
                    imperative: w.imperative == 1,
                    waiting: w.state == "waiting",
                })
            })
            .map(|w| w.execution_id.clone())
            .collect();
        if matches!(rule, ArrivalRule::NotCurrent { .. }) {
            predicted.clear();
        }
        let (out, n) = trips(&self.db, || enq_with(&self.db, &a, &p, now));
        let line = format!(
            "enqueue {} {:?} imp {} -> {out:?}",
            e.id, e.current, e.imperative
        );
        self.log(line);
        assert_eq!(n, 1, "a first enqueue is one round trip");
        let step = self.step;
        let e = &mut self.execs[i];
        e.arrived_step = Some(step);
        e.arrived_ms = now;
        e.read_ms = read_ms;
        match out {
            EnqueueOutcome::Queued { superseded } => {
                let mut got: Vec<String> =
                    superseded.iter().map(|s| s.execution_id.clone()).collect();
                got.sort();
                predicted.sort();
                assert_eq!(got, predicted, "SQL and ArrivalRule::supersedes disagree");
                e.phase = Phase::Waiting;
                e.queued = true;
                for s in superseded {
                    assert_eq!(s.superseded_by.as_deref(), Some(e.revision.as_str()));
                }
                for x in self.execs.iter().filter(|x| got.contains(&x.id)) {
                    // The superseded execution learns at its next claim; until then it polls.
                    assert!(
                        matches!(x.phase, Phase::Waiting | Phase::Paused),
                        "{} superseded while {:?}",
                        x.id,
                        x.phase
                    );
                }
            }
            EnqueueOutcome::NotCurrent { current } => {
                assert!(
                    matches!(rule, ArrivalRule::NotCurrent { .. }),
                    "not current under {rule:?}"
                );
                assert_eq!(current, "r99");
                e.phase = Phase::Done;
            }
            EnqueueOutcome::Existing(s) => panic!("first enqueue found a row: {s:?}"),
        }
    }

    /// A waiter claims; the outcome must be `expected_claim`'s.
    fn claim(&mut self, before: &[QRow]) {
        let i = self.rng.pick(&self.in_phase(Phase::Waiting)).unwrap_or(0);
        let id = self.execs[i].id.clone();
        let paused: Vec<String> = self
            .execs
            .iter()
            .filter(|e| e.phase == Phase::Paused)
            .map(|e| e.id.clone())
            .collect();
        let (p, now) = (self.sched.policy.clone(), self.now);
        let expected = expected_claim(before, &paused, &id, &p, now);
        let (out, n) = trips(&self.db, || claim_with(&self.db, &id, &p, now));
        self.log(format!("claim {id} -> {out:?}"));
        assert_eq!(n, 1, "a claim is one round trip");
        assert_eq!(
            outcome_state(&out),
            expected.0,
            "claim of {id} disagrees with the model"
        );
        let by_row = || row(&self.db, &id).superseded_by;
        let phase = match out {
            ClaimOutcome::Holding { took_over } => {
                let stale_holder = before
                    .iter()
                    .find(|r| r.state == "holding")
                    .map(|r| r.execution_id.clone());
                assert_eq!(
                    took_over, stale_holder,
                    "a takeover names the stale holder it flipped"
                );
                self.execs[i].claimed_step = Some(self.step);
                Phase::Holding
            }
            ClaimOutcome::Waiting { .. } => return,
            ClaimOutcome::Superseded { by } => {
                assert_eq!(Some(by), expected.1.or_else(by_row));
                Phase::Done
            }
            ClaimOutcome::TimedOut | ClaimOutcome::Skipped { .. } => Phase::Done,
            other => panic!("a waiter got {other:?}"),
        };
        self.execs[i].phase = phase;
    }

    /// A holder heartbeats: accepted exactly while its row holds.
    fn heartbeat(&mut self, before: &[QRow]) {
        let i = self.rng.pick(&self.in_phase(Phase::Holding)).unwrap_or(0);
        let id = self.execs[i].id.clone();
        let holds = before
            .iter()
            .any(|r| r.execution_id == id && r.state == "holding");
        let ok = block_on(serial::heartbeat(&self.db, G, &id, self.now)).expect("heartbeat");
        self.log(format!("heartbeat {id} -> {ok}"));
        assert_eq!(ok, holds, "heartbeat of {id}");
        if !ok {
            self.execs[i].phase = Phase::Lost;
        }
    }

    /// A holder releases, naming the first live waiter of a free group; a
    /// replayed release changes nothing and answers the same.
    fn release(&mut self) {
        let i = self.rng.pick(&self.in_phase(Phase::Holding)).unwrap_or(0);
        let id = self.execs[i].id.clone();
        let now = self.now;
        let next = block_on(serial::release(&self.db, G, &id, now)).expect("release");
        self.log(format!("release {id} -> {next:?}"));
        let after = self.rows();
        let expected_next = if after.iter().any(|r| r.state == "holding") {
            None
        } else {
            after
                .iter()
                .find(|r| {
                    r.state == "waiting"
                        && !self
                            .execs
                            .iter()
                            .any(|e| e.id == r.execution_id && e.phase == Phase::Paused)
                })
                .map(|r| r.execution_id.clone())
        };
        assert_eq!(
            next, expected_next,
            "release names the first live waiter of a free group"
        );
        self.execs[i].phase = Phase::Done;
        self.execs[i].released = true;
        let again = block_on(serial::release(&self.db, G, &id, now + 1)).expect("release");
        assert_eq!(again, next);
        assert_eq!(self.rows(), after, "a replayed release changed the table");
    }

    /// Replays: an arrived execution's enqueue, then a holder's claim.
    fn replay(&mut self, before: &[QRow]) {
        let arrived: Vec<usize> = self
            .execs
            .iter()
            .enumerate()
            .filter(|(_, e)| e.phase != Phase::NotArrived)
            .map(|(i, _)| i)
            .collect();
        if let Some(i) = self.rng.pick(&arrived) {
            self.replay_enqueue(i, before);
        }
        if let Some(i) = self.rng.pick(&self.in_phase(Phase::Holding)) {
            self.replay_claim(i);
        }
    }

    fn replay_enqueue(&mut self, i: usize, before: &[QRow]) {
        let e = &self.execs[i];
        let a = Arrival {
            group: G,
            execution_id: &e.id,
            revision: &e.revision,
            current: e.current.clone(),
            current_read_ms: None,
            imperative: e.imperative,
        };
        let out = enq_with(&self.db, &a, &self.sched.policy, self.now);
        let line = format!("replay enqueue {} -> {out:?}", e.id);
        self.log(line);
        assert!(
            matches!(
                out,
                EnqueueOutcome::Existing(_) | EnqueueOutcome::NotCurrent { .. }
            ),
            "{out:?}"
        );
        assert_eq!(self.rows(), before, "a replayed enqueue changed the table");
    }

    fn replay_claim(&mut self, i: usize) {
        let id = self.execs[i].id.clone();
        let before = self.rows();
        let out = claim_with(&self.db, &id, &self.sched.policy, self.now);
        self.log(format!("replay claim {id} -> {out:?}"));
        let mine = before
            .iter()
            .find(|r| r.execution_id == id)
            .map(|r| r.state.clone());
        match mine.as_deref() {
            Some("holding") => assert_eq!(out, holding()),
            Some("stale") => {
                assert!(matches!(
                    out,
                    ClaimOutcome::Lost {
                        taken_over_by: Some(_)
                    }
                ));
                self.execs[i].phase = Phase::Lost;
            }
            other => panic!("holder {id} row {other:?}"),
        }
        let after = self.rows();
        for (b, a) in before.iter().zip(&after) {
            if b.execution_id != id {
                assert_eq!(a, b, "a replayed claim touched another row");
            }
        }
    }

    /// A holder's executor dies; a waiter's instance is paused (a crashed
    /// waiter is resumed by its alarm or the sweep, so only a pause takes it
    /// out of the line).
    fn crash_or_pause(&mut self) {
        let live: Vec<usize> = self
            .execs
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e.phase, Phase::Waiting | Phase::Holding))
            .map(|(i, _)| i)
            .collect();
        let Some(i) = self.rng.pick(&live) else {
            return;
        };
        let id = self.execs[i].id.clone();
        if self.execs[i].phase == Phase::Holding {
            self.log(format!("crash {id}"));
            self.execs[i].phase = Phase::Crashed;
        } else {
            self.log(format!("pause {id}"));
            set_status(&self.db, &id, "paused");
            self.execs[i].phase = Phase::Paused;
        }
    }

    fn resume(&mut self) {
        if let Some(i) = self.rng.pick(&self.in_phase(Phase::Paused)) {
            let id = self.execs[i].id.clone();
            self.log(format!("resume {id}"));
            set_status(&self.db, &id, "waiting");
            self.execs[i].phase = Phase::Waiting;
        }
    }

    /// An operator skips a waiter: applies to waiting rows only, with no
    /// reason recorded.
    fn operator_skip(&mut self, before: &[QRow]) {
        let Some(i) = self.rng.pick(&self.in_phase(Phase::Waiting)) else {
            return;
        };
        let id = self.execs[i].id.clone();
        let waiting = before
            .iter()
            .any(|r| r.execution_id == id && r.state == "waiting");
        let skipped = block_on(serial::skip(&self.db, G, &id, self.now)).expect("skip");
        self.log(format!("operator skip {id} -> {skipped}"));
        assert_eq!(skipped, waiting, "skip applies to waiting rows only");
        if skipped {
            assert_eq!(row(&self.db, &id).skipped_reason, None);
            self.execs[i].phase = Phase::Done;
        }
    }

    /// Time passes: seconds, minutes, about the stale-holder bound, or past
    /// the queued timeout.
    fn advance(&mut self) {
        let rng = &mut self.rng;
        let dt = match rng.below(100) {
            0..=59 => rng.range(1, 60_000),
            60..=84 => rng.range(MIN, 5 * MIN),
            85..=94 => rng.range(HOLDER_STALE_MS - 2 * MIN, HOLDER_STALE_MS + 2 * MIN),
            _ => rng.range(
                SERIAL_QUEUED_TIMEOUT_MS_DEFAULT,
                SERIAL_QUEUED_TIMEOUT_MS_DEFAULT + 10 * MIN,
            ),
        };
        self.now += dt;
        self.log(format!("advance {dt}"));
    }

    /// Quiescence: everyone arrives, then waiters poll and holders finish.
    fn quiesce(&mut self, mut prev: Vec<QRow>) {
        for _ in 0..QUIESCE_ROUNDS_MAX {
            if let Some(i) = self.execs.iter().position(|e| e.phase == Phase::NotArrived) {
                self.late_arrival(i);
            } else if let Some(i) = self.execs.iter().position(|e| e.phase == Phase::Holding) {
                self.finish(i);
            } else if self.execs.iter().any(|e| e.phase == Phase::Waiting) {
                self.now += common_poll();
                let _ = self.operate(true);
            } else {
                break;
            }
            let cur = self.rows();
            check_invariants(&prev, &cur, &self.execs);
            prev = cur;
            self.step += 1;
        }
        assert!(
            self.execs
                .iter()
                .all(|e| matches!(e.phase, Phase::Done | Phase::Lost)),
            "not quiescent after {QUIESCE_ROUNDS_MAX} rounds"
        );
    }

    /// Execution `i` arrives at quiescence, with no head read.
    fn late_arrival(&mut self, i: usize) {
        let e = &self.execs[i];
        let a = Arrival {
            group: G,
            execution_id: &e.id,
            revision: &e.revision,
            current: e.current.clone(),
            current_read_ms: None,
            imperative: e.imperative,
        };
        let out = enq_with(&self.db, &a, &self.sched.policy, self.now);
        let line = format!("enqueue {} -> {out:?}", e.id);
        self.log(line);
        let (step, now) = (self.step, self.now);
        let e = &mut self.execs[i];
        e.arrived_step = Some(step);
        e.arrived_ms = now;
        match out {
            EnqueueOutcome::Queued { .. } => {
                e.phase = Phase::Waiting;
                e.queued = true;
            }
            _ => e.phase = Phase::Done,
        }
    }

    /// Holder `i` finishes: releases if its heartbeat is still accepted.
    fn finish(&mut self, i: usize) {
        let id = self.execs[i].id.clone();
        if block_on(serial::heartbeat(&self.db, G, &id, self.now)).expect("heartbeat") {
            block_on(serial::release(&self.db, G, &id, self.now)).expect("release");
            self.execs[i].released = true;
            self.execs[i].phase = Phase::Done;
        } else {
            self.execs[i].phase = Phase::Lost;
        }
        self.log(format!("finish {id}"));
    }

    /// The survivor of a burst is the newest: the newest queued
    /// non-imperative arrival that knew its head (a failed read judges
    /// nobody: the dequeue's read does) is the last non-imperative
    /// execution to take the group (or timed out), and every other one its
    /// head read could judge (it arrived before the read was asked for) took
    /// the group before it arrived or was skipped with a reason. Returns
    /// whether there was a survivor to check.
    fn survivor_check(&self) -> bool {
        let table = self.rows();
        let deploys: Vec<&Exec> = self
            .execs
            .iter()
            .filter(|e| e.queued && !e.imperative)
            .collect();
        let Some(newest) = deploys
            .iter()
            .filter(|e| e.current != Current::Unknown)
            .max_by_key(|e| e.arrived_step)
        else {
            return false;
        };
        let read_ms = match newest.current {
            Current::Known(_) => newest.read_ms,
            _ => None,
        };
        let judged = |e: &Exec| {
            e.arrived_step < newest.arrived_step && read_ms.is_none_or(|r| e.arrived_ms < r)
        };
        let newest_row = table
            .iter()
            .find(|r| r.execution_id == newest.id)
            .expect("row");
        assert!(
            newest.claimed_step.is_some() || newest_row.state == "timed_out",
            "newest {} neither ran nor timed out: {}",
            newest.id,
            newest_row.state
        );
        for e in deploys.iter().filter(|e| e.id != newest.id && judged(e)) {
            let r = table.iter().find(|r| r.execution_id == e.id).expect("row");
            match e.claimed_step {
                Some(c) => assert!(
                    c < newest.arrived_step.unwrap_or(0),
                    "{} took the group after newest {} arrived",
                    e.id,
                    newest.id
                ),
                None => assert!(
                    matches!(r.state.as_str(), "superseded" | "timed_out")
                        && r.skipped_reason.is_some(),
                    "{} never ran and was not skipped with a reason: {}",
                    e.id,
                    r.state
                ),
            }
        }
        true
    }
}

/// Runs one schedule: its drawn operations, then (without crashes) quiescence
/// and, under the default policy, the survivor check; returns whether it
/// ended with the survivor check.
fn run_schedule(seed: u64, trace: &mut Vec<String>) -> bool {
    let mut m = Model::drawn(seed, trace);
    let ops = m.rng.range(10, OPS_PER_SCHEDULE_MAX as i64) as usize;
    let mut prev = Vec::new();
    for _ in 0..ops {
        prev = m.operate(false);
        m.step += 1;
    }
    let preview_lane = m.sched.policy == sluice::runs::kit::preview::preview_policy(None);
    if preview_lane {
        // The preview lane's rule: nothing ever times out in its queue.
        assert!(
            m.trace.iter().all(|l| !l.contains("TimedOut")),
            "a preview waiter timed out in the queue"
        );
    }
    if m.sched.crashes {
        return false;
    }
    m.quiesce(prev);
    assert!(
        !preview_lane || m.trace.iter().all(|l| !l.contains("TimedOut")),
        "a preview waiter timed out in the queue"
    );
    m.sched.policy == QueuePolicy::default() && m.survivor_check()
}

/// How far the model moves time while waiters wait at quiescence: a
/// sweep interval, the fallback that wakes them.
fn common_poll() -> i64 {
    sluice::limits::SWEEP_INTERVAL_MS
}

/// FNV-1a's offset basis, where the digest of the schedules' traces starts.
const TRACE_DIGEST_START: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over a trace line: the same seeds drew the same schedules (every
/// operation, draw and outcome) exactly when the printed digest is the same,
/// which a refactor of the model can be checked by.
fn trace_digest(digest: u64, line: &str) -> u64 {
    line.bytes().chain([b'\n']).fold(digest, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[test]
fn seeded_interleavings_keep_the_serial_invariants() {
    let only: Option<u64> = std::env::var("GATES_SEED").ok().and_then(|s| {
        let s = s.trim_start_matches("0x");
        u64::from_str_radix(s, 16).ok()
    });
    let count: u64 = std::env::var("GATES_SCHEDULES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SCHEDULES_DEFAULT);
    let seeds: Vec<u64> = match only {
        Some(s) => vec![s],
        None => (0..count)
            .map(|i| SEED_BASE.wrapping_add(i.wrapping_mul(0x9E37_79B9)))
            .collect(),
    };
    // How often each interesting path ran, so a generator change that stops
    // reaching one fails here instead of passing vacuously.
    let markers = [
        "took_over: Some",
        "TimedOut",
        "-> Superseded",
        "reason: Some(Superseded)",
        "NotCurrent",
        "Lost",
        "heartbeat e",
        "-> false",
        "replay enqueue",
        "replay claim",
        "crash",
        "pause",
        "resume",
        "operator skip",
        "ahead: 1",
    ];
    let mut seen = vec![0u32; markers.len()];
    let mut digest = TRACE_DIGEST_START;
    let mut survivor_checks = 0u32;
    let n_seeds = seeds.len();
    for seed in seeds {
        let mut trace = Vec::new();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_schedule(seed, &mut trace)
        }));
        for line in &trace {
            digest = trace_digest(digest, line);
            for (m, n) in markers.iter().zip(seen.iter_mut()) {
                *n += u32::from(line.contains(m));
            }
        }
        survivor_checks += u32::from(matches!(result, Ok(true)));
        if let Err(e) = result {
            let tail = trace.len().saturating_sub(40);
            eprintln!("--- failing schedule, replay with GATES_SEED={seed:#x} ---");
            for line in &trace[tail..] {
                eprintln!("{line}");
            }
            std::panic::resume_unwind(e);
        }
    }
    eprintln!("{n_seeds} schedules, {survivor_checks} ended in the survivor check");
    eprintln!("schedule digest {digest:#018x}");
    for (m, n) in markers.iter().zip(&seen) {
        eprintln!("  {n:6} x {m}");
    }
    if only.is_none() {
        assert!(
            survivor_checks >= n_seeds as u32 / 10,
            "too few survivor checks: {survivor_checks}"
        );
        for (m, n) in markers.iter().zip(&seen) {
            assert!(*n > 0, "no schedule reached {m:?}");
        }
    }
}

// --- admission ---

const POOL: &str = "sandbox";

fn acquire(db: &CountingDb, holder: &str, capacity: u32, now: i64) -> AdmissionOutcome {
    block_on(admission::acquire(db, POOL, holder, capacity, now)).expect("acquire")
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Slot {
    seq: i64,
    holder: String,
    state: String,
    heartbeat_ms: i64,
}

fn slots(db: &CountingDb) -> Vec<Slot> {
    let rows = block_on(db.db.all(sluice::stmt!(
        "SELECT seq, holder, state, heartbeat_ms FROM pool_slots WHERE pool = ?1 ORDER BY seq",
        POOL
    )))
    .expect("select");
    decode(rows).expect("decode")
}

#[test]
fn releasing_everywhere_frees_every_pool_in_one_statement_and_names_each_next() {
    let db = fresh();
    let take = |pool: &str, holder: &str, now: i64| {
        block_on(admission::acquire(&db, pool, holder, 1, now)).expect("acquire")
    };
    assert_eq!(take("checks", "h1", T0), AdmissionOutcome::Admitted);
    assert_eq!(take("sandbox", "h1", T0), AdmissionOutcome::Admitted);
    assert_eq!(
        take("sandbox", "h2", T0 + 1),
        AdmissionOutcome::Queued { position: 1 }
    );
    assert_eq!(
        take("sandbox", "h3", T0 + 2),
        AdmissionOutcome::Queued { position: 2 }
    );
    assert_eq!(
        take("checks", "h3", T0 + 3),
        AdmissionOutcome::Queued { position: 1 }
    );
    let (released, n) = trips(&db, || {
        block_on(admission::release_everywhere(&db, "h1")).expect("release")
    });
    assert_eq!(n, 1, "one statement whatever the pools");
    assert_eq!(
        released,
        [
            ("checks".to_owned(), Some("h3".to_owned())),
            ("sandbox".to_owned(), Some("h2".to_owned())),
        ],
        "each pool's first waiter, by pool"
    );
    assert!(slots(&db).iter().all(|s| s.holder != "h1"));
    assert_eq!(take("sandbox", "h2", T0 + 4), AdmissionOutcome::Admitted);
    // A replay releases nothing and names nobody; a lone waiter leaving
    // names nobody either (it is the only one in line).
    assert!(block_on(admission::release_everywhere(&db, "h1"))
        .unwrap()
        .is_empty());
    assert_eq!(
        block_on(admission::release_everywhere(&db, "h3")).unwrap(),
        [("checks".to_owned(), None), ("sandbox".to_owned(), None)]
    );
}

#[test]
fn admission_respects_capacity_in_arrival_order() {
    let db = fresh();
    let (out, n) = trips(&db, || acquire(&db, "h1", 2, T0));
    assert_eq!(
        (out, n),
        (AdmissionOutcome::Admitted, 1),
        "admitted in one batch"
    );
    assert_eq!(acquire(&db, "h2", 2, T0 + 1), AdmissionOutcome::Admitted);
    let (out, n) = trips(&db, || acquire(&db, "h3", 2, T0 + 2));
    assert_eq!(
        (out, n),
        (AdmissionOutcome::Queued { position: 1 }, 2),
        "a queue position costs a read"
    );
    assert_eq!(
        acquire(&db, "h4", 2, T0 + 3),
        AdmissionOutcome::Queued { position: 2 }
    );
    assert_eq!(
        acquire(&db, "h5", 2, T0 + 4),
        AdmissionOutcome::Queued { position: 3 }
    );
    block_on(admission::release(&db, POOL, "h1")).expect("release");
    assert_eq!(
        acquire(&db, "h4", 2, T0 + 5),
        AdmissionOutcome::Queued { position: 2 },
        "h3 is first in line"
    );
    assert_eq!(acquire(&db, "h3", 2, T0 + 6), AdmissionOutcome::Admitted);
    assert_eq!(
        acquire(&db, "h4", 2, T0 + 7),
        AdmissionOutcome::Queued { position: 1 }
    );
    // Replays: a second acquire of an admitted slot, a second release.
    assert_eq!(acquire(&db, "h3", 2, T0 + 8), AdmissionOutcome::Admitted);
    assert_eq!(
        slots(&db).iter().filter(|s| s.state == "admitted").count(),
        2
    );
    block_on(admission::release(&db, POOL, "h2")).expect("release");
    block_on(admission::release(&db, POOL, "h2")).expect("release");
    assert_eq!(acquire(&db, "h4", 2, T0 + 9), AdmissionOutcome::Admitted);
    assert_eq!(
        acquire(&db, "h5", 2, T0 + 10),
        AdmissionOutcome::Queued { position: 1 }
    );
    assert!(
        !block_on(admission::heartbeat(&db, POOL, "h5", T0 + 11)).expect("heartbeat"),
        "a queued slot holds nothing"
    );
    // Capacity 0 is clamped to 1 rather than admitting nobody for ever.
    let db = fresh();
    assert_eq!(acquire(&db, "x", 0, T0), AdmissionOutcome::Admitted);
}

#[test]
fn admission_purges_silent_slots_on_the_next_acquire() {
    let db = fresh();
    assert_eq!(acquire(&db, "dead", 1, T0), AdmissionOutcome::Admitted);
    assert_eq!(
        acquire(&db, "w", 1, T0 + 1),
        AdmissionOutcome::Queued { position: 1 }
    );
    // w keeps polling, dead never beats again.
    let mut t = T0 + 1;
    while t + 30_000 < T0 + SLOT_TTL_MS {
        t += 30_000;
        assert_eq!(
            acquire(&db, "w", 1, t),
            AdmissionOutcome::Queued { position: 1 }
        );
    }
    assert_eq!(
        acquire(&db, "w", 1, T0 + SLOT_TTL_MS),
        AdmissionOutcome::Queued { position: 1 },
        "exactly the TTL is not past it"
    );
    let (out, n) = trips(&db, || acquire(&db, "w", 1, T0 + SLOT_TTL_MS + 1));
    assert_eq!(
        (out, n),
        (AdmissionOutcome::Admitted, 1),
        "purge and admit in the same batch"
    );
    assert!(!block_on(admission::heartbeat(
        &db,
        POOL,
        "dead",
        T0 + SLOT_TTL_MS + 2
    ))
    .expect("heartbeat"));
    assert_eq!(
        slots(&db)
            .iter()
            .map(|s| s.holder.as_str())
            .collect::<Vec<_>>(),
        ["w"]
    );
    assert!(
        block_on(admission::heartbeat(&db, POOL, "w", T0 + SLOT_TTL_MS + 3)).expect("heartbeat")
    );
}

/// What `admission::acquire` must answer, from the table before the call.
fn expected_admission(before: &[Slot], holder: &str, capacity: u32, now: i64) -> AdmissionOutcome {
    let live: Vec<&Slot> = before
        .iter()
        .filter(|s| s.heartbeat_ms >= now - SLOT_TTL_MS)
        .collect();
    let me = live.iter().find(|s| s.holder == holder);
    if me.is_some_and(|s| s.state == "admitted") {
        return AdmissionOutcome::Admitted;
    }
    let my_seq = me.map_or(i64::MAX, |s| s.seq);
    let admitted = live.iter().filter(|s| s.state == "admitted").count();
    let ahead = live
        .iter()
        .filter(|s| s.state == "queued" && s.seq < my_seq)
        .count();
    if admitted + ahead < capacity as usize {
        AdmissionOutcome::Admitted
    } else {
        AdmissionOutcome::Queued {
            position: ahead as u32 + 1,
        }
    }
}

#[test]
fn admission_interleavings_respect_capacity_and_order() {
    for seed in 0..300u64 {
        let mut rng = Rng(0xAD31_0000 + seed);
        let capacity = rng.range(1, 4) as u32;
        let holders: Vec<String> = (0..rng.range(2, 10)).map(|i| format!("h{i}")).collect();
        let db = fresh();
        let mut now = T0;
        let mut crashed = vec![false; holders.len()];
        for step in 0..80 {
            let i = rng.below(holders.len() as u64) as usize;
            let h = holders[i].as_str();
            let before = slots(&db);
            let what = rng.below(100);
            match what {
                _ if crashed[i] => now += rng.range(1, 3 * MIN),
                0..=44 => {
                    let out = acquire(&db, h, capacity, now);
                    assert_eq!(
                        out,
                        expected_admission(&before, h, capacity, now),
                        "seed {seed} step {step} acquire {h}"
                    );
                }
                45..=64 => {
                    let ok = block_on(admission::heartbeat(&db, POOL, h, now)).expect("heartbeat");
                    assert_eq!(
                        ok,
                        before
                            .iter()
                            .any(|s| s.holder == h && s.state == "admitted"),
                        "seed {seed} step {step}"
                    );
                }
                65..=79 => {
                    block_on(admission::release(&db, POOL, h)).expect("release");
                }
                80..=83 => crashed[i] = true,
                _ => now += rng.range(1, 4 * MIN),
            }
            let after = slots(&db);
            let admitted = after.iter().filter(|s| s.state == "admitted").count();
            assert!(
                admitted <= capacity as usize,
                "seed {seed} step {step}: {admitted} admitted > {capacity}"
            );
        }
    }
}

// --- container lease ---

const SANDBOX: &str = "sbx-1";

fn take(db: &CountingDb, holder: &str, now: i64) -> LeaseOutcome {
    block_on(lease::acquire(db, SANDBOX, holder, now)).expect("lease acquire")
}

/// An ended instance frees its own sandbox and those of its image classes
/// (`<id>~<class>.<type>`, `sandbox::image`) in one statement, and no other
/// instance's, even one whose id starts with its own.
#[test]
fn releasing_an_instances_sandboxes_frees_its_image_classes_only() {
    let db = fresh();
    let ids = [
        "i",
        "i~node.basic",
        "i~rust.standard-2",
        "ix~node.basic",
        "i-2",
        "i-2~rust.standard-1",
    ];
    for id in ids {
        assert!(matches!(
            block_on(lease::acquire(&db, id, "g", T0)).expect("acquire"),
            LeaseOutcome::Acquired { .. }
        ));
    }
    let (freed, n) = trips(&db, || {
        block_on(lease::release_sandbox(&db, "i")).expect("release")
    });
    let mut freed = freed;
    freed.sort();
    assert_eq!(freed, ["i", "i~node.basic", "i~rust.standard-2"]);
    assert_eq!(n, 1, "one statement");
    for kept in ["ix~node.basic", "i-2", "i-2~rust.standard-1"] {
        assert!(
            matches!(
                block_on(lease::acquire(&db, kept, "other", T0 + 1)).expect("acquire"),
                LeaseOutcome::Busy { .. }
            ),
            "{kept} is still held"
        );
    }
}

#[test]
fn lease_has_one_holder_and_is_reclaimed_when_stale() {
    let db = fresh();
    let (out, n) = trips(&db, || take(&db, "a", T0));
    assert_eq!(
        (out, n),
        (
            LeaseOutcome::Acquired {
                expires_ms: T0 + LEASE_TTL_MS
            },
            1
        )
    );
    let (out, n) = trips(&db, || take(&db, "b", T0 + 1));
    assert_eq!(
        (out, n),
        (
            LeaseOutcome::Busy {
                holder: Some("a".into()),
                expires_ms: T0 + LEASE_TTL_MS
            },
            2
        )
    );
    // A replay refreshes and keeps the original acquisition time.
    assert_eq!(
        take(&db, "a", T0 + 2),
        LeaseOutcome::Acquired {
            expires_ms: T0 + 2 + LEASE_TTL_MS
        }
    );
    let acquired: Vec<i64> = decode::<serde_json::Map<String, serde_json::Value>>(
        block_on(
            db.db
                .all(sluice::stmt!("SELECT acquired_ms FROM container_leases")),
        )
        .expect("select"),
    )
    .expect("decode")
    .iter()
    .filter_map(|r| r.get("acquired_ms").and_then(|v| v.as_i64()))
    .collect();
    assert_eq!(acquired, [T0]);
    assert!(block_on(lease::heartbeat(&db, SANDBOX, "a", T0 + 5 * MIN)).expect("heartbeat"));
    let expires = T0 + 5 * MIN + LEASE_TTL_MS;
    assert_eq!(
        take(&db, "b", expires - 1),
        LeaseOutcome::Busy {
            holder: Some("a".into()),
            expires_ms: expires
        }
    );
    assert_eq!(
        take(&db, "b", expires),
        LeaseOutcome::Acquired {
            expires_ms: expires + LEASE_TTL_MS
        },
        "reclaimed"
    );
    assert!(
        !block_on(lease::heartbeat(&db, SANDBOX, "a", expires + 1)).expect("heartbeat"),
        "a lost it"
    );
    block_on(lease::release(&db, SANDBOX, "a")).expect("release");
    assert!(
        matches!(take(&db, "c", expires + 2), LeaseOutcome::Busy { .. }),
        "a's release does not free b's lease"
    );
    block_on(lease::release(&db, SANDBOX, "b")).expect("release");
    block_on(lease::release(&db, SANDBOX, "b")).expect("release");
    assert!(matches!(
        take(&db, "c", expires + 3),
        LeaseOutcome::Acquired { .. }
    ));
}

#[test]
fn lease_interleavings_never_overlap() {
    for seed in 0..300u64 {
        let mut rng = Rng(0x1EA5_0000 + seed);
        let holders = ["a", "b", "c", "d"];
        let db = fresh();
        let mut now = T0;
        // Until when each holder may rightly believe it holds the sandbox.
        let mut valid_until = [i64::MIN; 4];
        for step in 0..60 {
            let i = rng.below(4) as usize;
            match rng.below(10) {
                0..=3 => match take(&db, holders[i], now) {
                    LeaseOutcome::Acquired { expires_ms } => {
                        for (j, v) in valid_until.iter().enumerate() {
                            assert!(
                                j == i || *v <= now,
                                "seed {seed} step {step}: {} acquired while {} valid",
                                holders[i],
                                holders[j]
                            );
                        }
                        valid_until[i] = expires_ms;
                    }
                    LeaseOutcome::Busy { holder, .. } => {
                        assert_ne!(holder.as_deref(), Some(holders[i]))
                    }
                },
                4..=5 => {
                    if block_on(lease::heartbeat(&db, SANDBOX, holders[i], now)).expect("heartbeat")
                    {
                        for (j, v) in valid_until.iter().enumerate() {
                            assert!(
                                j == i || *v <= now,
                                "seed {seed} step {step}: heartbeat while {} valid",
                                holders[j]
                            );
                        }
                        valid_until[i] = now + LEASE_TTL_MS;
                    } else {
                        valid_until[i] = i64::MIN;
                    }
                }
                6 => {
                    block_on(lease::release(&db, SANDBOX, holders[i])).expect("release");
                    valid_until[i] = i64::MIN;
                }
                _ => now += rng.range(1, 6 * MIN),
            }
        }
    }
}

// --- queue policy: pure decisions ---

const NOW: i64 = 10_000_000;

fn waiter(revision: &str, arrived_ms: i64) -> WaiterFacts<'_> {
    WaiterFacts {
        revision,
        arrived_ms,
        imperative: false,
        waiting: true,
    }
}

fn check(policy: &QueuePolicy, current: Current, imperative: bool, expected: ArrivalRule) {
    assert_eq!(
        policy.arrival_rule(&current, Some(NOW - 5), "new", imperative, NOW),
        expected,
        "{current:?}, imperative {imperative}"
    );
}

#[test]
fn arrival_rules() {
    let p = QueuePolicy::default();
    check(
        &p,
        Current::Known("other".into()),
        false,
        ArrivalRule::NotCurrent {
            current: "other".into(),
        },
    );
    check(
        &p,
        Current::Known("new".into()),
        false,
        ArrivalRule::SupersedeNotCurrent {
            current: "new".into(),
            read_ms: Some(NOW - 5),
        },
    );
    check(
        &p,
        Current::NotDeclared,
        false,
        ArrivalRule::SupersedeOlder {
            arrived_before_ms: None,
        },
    );
    check(&p, Current::Unknown, false, ArrivalRule::SupersedeNone);
    for c in [
        Current::Known("other".into()),
        Current::Known("new".into()),
        Current::NotDeclared,
    ] {
        check(&p, c, true, ArrivalRule::SupersedeNone);
    }
    let fifo = QueuePolicy {
        supersede: false,
        ..QueuePolicy::default()
    };
    check(
        &fifo,
        Current::NotDeclared,
        false,
        ArrivalRule::SupersedeNone,
    );
    check(
        &fifo,
        Current::Known("new".into()),
        false,
        ArrivalRule::SupersedeNotCurrent {
            current: "new".into(),
            read_ms: Some(NOW - 5),
        },
    );
    let aged = QueuePolicy {
        supersede_after_ms: Some(1_000),
        ..QueuePolicy::default()
    };
    check(
        &aged,
        Current::NotDeclared,
        false,
        ArrivalRule::SupersedeOlder {
            arrived_before_ms: Some(NOW - 1_000),
        },
    );
    check(&aged, Current::Unknown, false, ArrivalRule::SupersedeNone);
}

#[test]
fn supersedes_only_live_non_imperative_waiters() {
    let all = ArrivalRule::SupersedeOlder {
        arrived_before_ms: None,
    };
    assert!(all.supersedes(&waiter("a", NOW)));
    assert!(!all.supersedes(&WaiterFacts {
        imperative: true,
        ..waiter("a", 0)
    }));
    assert!(!all.supersedes(&WaiterFacts {
        waiting: false,
        ..waiter("a", 0)
    }));
    let aged = ArrivalRule::SupersedeOlder {
        arrived_before_ms: Some(NOW - 1_000),
    };
    assert!(aged.supersedes(&waiter("a", NOW - 1_001)));
    assert!(!aged.supersedes(&waiter("a", NOW - 1_000)));
    let current = ArrivalRule::SupersedeNotCurrent {
        current: "h".into(),
        read_ms: None,
    };
    assert!(
        current.supersedes(&waiter("a", NOW)),
        "a non-current waiter goes whatever its age"
    );
    assert!(!current.supersedes(&waiter("h", 0)));
    let read = ArrivalRule::SupersedeNotCurrent {
        current: "h".into(),
        read_ms: Some(NOW),
    };
    assert!(read.supersedes(&waiter("a", NOW)));
    assert!(
        !read.supersedes(&waiter("a", NOW + 1)),
        "a waiter that arrived once the head was read may know a newer one"
    );
    assert!(!ArrivalRule::NotCurrent {
        current: "h".into()
    }
    .supersedes(&waiter("a", 0)));
    assert!(!ArrivalRule::SupersedeNone.supersedes(&waiter("a", 0)));
}

#[test]
fn ageing() {
    let p = QueuePolicy::default();
    let old = waiter("a", NOW - SERIAL_QUEUED_TIMEOUT_MS_DEFAULT - 1);
    assert!(p.queued_timed_out(&old, true, NOW));
    assert!(
        !p.queued_timed_out(&old, false, NOW),
        "only behind a live holder"
    );
    assert!(!p.queued_timed_out(
        &WaiterFacts {
            imperative: true,
            ..old
        },
        true,
        NOW
    ));
    assert!(!p.queued_timed_out(
        &waiter("a", NOW - SERIAL_QUEUED_TIMEOUT_MS_DEFAULT),
        true,
        NOW
    ));

    let claimed = NewerFacts {
        imperative: false,
        has_claimed: true,
        judged_current: true,
        current_read_ms: None,
    };
    let waiting = NewerFacts {
        imperative: false,
        has_claimed: false,
        judged_current: true,
        current_read_ms: None,
    };
    assert!(p.yields_at_claim(&waiter("a", NOW), &claimed));
    assert!(
        !p.yields_at_claim(
            &waiter("a", NOW),
            &NewerFacts {
                judged_current: false,
                ..claimed
            }
        ),
        "a newer row whose head read failed may be an older commit queued again"
    );
    assert!(p.yields_at_claim(
        &waiter("a", NOW),
        &NewerFacts {
            current_read_ms: Some(NOW),
            ..claimed
        }
    ));
    assert!(
        !p.yields_at_claim(
            &waiter("a", NOW),
            &NewerFacts {
                current_read_ms: Some(NOW - 1),
                ..claimed
            }
        ),
        "a read made before the waiter arrived ranks nothing"
    );
    assert!(
        !p.yields_at_claim(&waiter("a", 0), &waiting),
        "a waiting newer one: arrival decided"
    );
    assert!(!p.yields_at_claim(
        &waiter("a", 0),
        &NewerFacts {
            imperative: true,
            ..claimed
        },
    ));
    let aged = QueuePolicy {
        supersede_after_ms: Some(1_000),
        ..p.clone()
    };
    assert!(
        !aged.yields_at_claim(&waiter("a", NOW - 1_001), &waiting),
        "supersede_after never applies at a claim"
    );
    let fifo = QueuePolicy {
        supersede: false,
        ..p
    };
    assert!(!fifo.yields_at_claim(&waiter("a", 0), &claimed));
}

#[test]
fn config() {
    assert_eq!(
        QueuePolicy::from_config(None, None, None, None),
        Ok(QueuePolicy::default())
    );
    let p = QueuePolicy::from_config(Some(false), Some(5_000), Some(6_000), Some(7_000))
        .expect("valid");
    assert_eq!(
        p,
        QueuePolicy {
            supersede: false,
            queued_timeout_ms: 5_000,
            supersede_after_ms: Some(6_000),
            confirmation_timeout_ms: Some(7_000)
        }
    );
    assert_eq!(
        QueuePolicy::from_config(None, Some(0), None, None),
        Err(PolicyError {
            setting: "queued_timeout",
            value_ms: 0
        })
    );
    assert!(QueuePolicy::from_config(None, None, Some(QUEUE_POLICY_MS_MAX + 1), None).is_err());
    assert!(QueuePolicy::from_config(None, None, None, Some(-1)).is_err());
    for r in SkipReason::ALL {
        assert_eq!(SkipReason::parse(r.as_str()), Some(r));
    }
}

#[test]
fn an_instance_is_found_by_its_own_id_in_every_generation() {
    let db = fresh();
    assert_eq!(serial::execution_id_of("inst", 0), "inst");
    let g1 = serial::execution_id_of("inst", 1);
    assert_eq!(serial::instance_of(&g1), "inst");
    enq(&db, "other", "r0", Current::NotDeclared, T0);
    claim(&db, "other", T0);
    enq(&db, &g1, "r1", Current::NotDeclared, T0 + 1);
    let rows = block_on(serial::live_rows_of(&db, "inst")).expect("live rows");
    assert_eq!(rows, [(G.to_owned(), g1.clone())]);
    assert!(
        block_on(serial::live_rows_of(&db, "ins"))
            .expect("live rows")
            .is_empty(),
        "a prefix is not the instance"
    );
    let woken = block_on(serial::abandon(&db, "other", T0 + 2)).expect("abandon");
    assert_eq!(
        woken,
        [(G.to_owned(), Some(g1.clone()))],
        "the waiter of the next generation is woken"
    );
}

// --- the run-level model: the real deploy run, the real engine and the
// sweep, under operator commands, stalls, crashes and lost wake-ups ---
//
// Each schedule is one branch's deploys in virtual time. Every instance is
// driven as its Durable Object would drive it (passes, alarms, wake-up
// events, the watchdog after a crash); beside them an adversary restarts
// (from the top or from any journaled step), pauses, resumes, terminates,
// stalls executors, crashes passes, loses wake-ups and fails a finalize,
// and the cron sweep runs every minute. The effect is modelled, not only
// the rows: the fake sandbox's processes run in virtual time whoever
// watches them. Checked throughout and at the end:
// - never two live deploy processes of the group;
// - no group free (no live holder) with a live, running waiter for longer
//   than one sweep interval;
// - every finished instance's gate rows released within one sweep;
// - the newest commit is the last to start deploying.

mod run_model {
    use std::cell::{Cell, OnceCell, RefCell};
    use std::task::{Poll, Waker};

    use futures::future::{join_all, select, Either};
    use sluice::engine::{Clock, Command, Status};
    use sluice::limits::{HOLDER_STALE_MS, SWEEP_INTERVAL_MS};
    use sluice::store::journal::JournalStore;
    use sluice::store::Database;

    use super::common::fake_deployments::Deployment;
    use super::common::fakes::*;
    use super::common::{block_on, T0};
    use super::Rng;

    const MIN: i64 = 60_000;
    /// The Durable Object's watchdog: a crashed pass resumes this much later.
    const WATCHDOG_MS: i64 = 15_000;
    /// Slack on the timing invariants for a pass's own latency (a pass runs
    /// in virtual time, but a claim may follow a short step).
    const SLACK_MS: i64 = 20_000;
    /// The monitor's sampling interval: well under the slack, so a breach
    /// is seen within it.
    const SAMPLE_MS: i64 = 10_000;
    /// Schedules per `cargo test` (RUN_MODEL_SCHEDULES for more): ~0.2 s
    /// each in a debug build.
    const SCHEDULES_DEFAULT: u64 = 120;
    /// Adversary operations per schedule, at most.
    const OPS_MAX: u64 = 40;
    /// Bounds each task's loop: a schedule lasts a few virtual hours.
    const LOOP_MAX: u32 = 20_000;

    /// What the adversary asks of one executor.
    #[derive(Default)]
    struct Ctl {
        inst: OnceCell<Inst>,
        /// The executor makes no progress until then (ms).
        stalled_until: Cell<i64>,
        /// Drop the pass in flight now (the isolate died).
        crash: Cell<bool>,
        in_pass: Cell<bool>,
        /// A crash happened at this time: the watchdog resumes it.
        crashed_at: Cell<Option<i64>>,
        signal: RefCell<Option<Waker>>,
    }

    impl Ctl {
        fn poke(&self) {
            if let Some(w) = self.signal.borrow_mut().take() {
                w.wake();
            }
        }
        /// Resolves when the adversary pokes this executor.
        async fn poked(&self) {
            let mut first = true;
            std::future::poll_fn(|cx| {
                if !first {
                    return Poll::Ready(());
                }
                first = false;
                *self.signal.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            })
            .await
        }
        fn status(&self) -> Option<Status> {
            let i = self.inst.get()?;
            Some(i.world.journal.load_instance().ok()??.status)
        }
    }

    struct World<'r> {
        rig: &'r Rig,
        ctls: Vec<Ctl>,
        shas: Vec<String>,
        over: Cell<bool>,
        trace: RefCell<Vec<String>>,
    }

    impl World<'_> {
        fn log(&self, what: String) {
            let t = (self.rig.now() - T0) / 1000;
            self.trace.borrow_mut().push(format!("t+{t}s {what}"));
        }
    }

    /// One executor: the instance's passes as its Durable Object runs them.
    async fn executor(w: &World<'_>, k: usize, arrive_ms: i64, head_moves_first: bool) {
        let rig = w.rig;
        rig.clock.sleep(arrive_ms).await;
        let sha = &w.shas[k];
        if !head_moves_first {
            rig.github.set_head(REPO, BRANCH, sha);
        }
        let ctl = &w.ctls[k];
        let _ = ctl.inst.set(rig.deploy(sha));
        let inst = ctl.inst.get().unwrap();
        w.log(format!("arrive {k}"));
        for _ in 0..LOOP_MAX {
            let status = ctl.status().unwrap();
            if w.over.get() && (status.is_terminal() || status == Status::Paused) {
                return;
            }
            if status.is_terminal() || status == Status::Paused {
                // Idle until a resume or a restart pokes it.
                let nap = rig.clock.sleep(MIN);
                select(nap, Box::pin(ctl.poked())).await;
                continue;
            }
            let stall = ctl.stalled_until.get() - rig.now();
            if stall > 0 {
                // Until the stall ends, or quiescence lifts it (and pokes).
                select(rig.clock.sleep(stall), Box::pin(ctl.poked())).await;
                continue;
            }
            rig.deliver(inst);
            ctl.in_pass.set(true);
            let result = faulty_pass(w, ctl, inst).await;
            ctl.in_pass.set(false);
            let Some(r) = result else {
                ctl.crashed_at.set(Some(rig.now()));
                w.log(format!("crash {k}"));
                rig.clock.sleep(WATCHDOG_MS).await;
                continue;
            };
            ctl.crashed_at.set(None);
            apply_late_interrupt(w, inst);
            if !r.status.is_runnable() {
                continue;
            }
            let due = r.wake_at_ms.unwrap_or(rig.now());
            let alarm = rig.clock.sleep(due - rig.now());
            let woken = Box::pin(rig.waker.woken(&inst.id));
            select(select(alarm, woken), Box::pin(ctl.poked())).await;
        }
        panic!("executor {k} did not settle");
    }

    /// A pass the adversary may stall (not polled: no heartbeat, no step)
    /// or crash (dropped mid-flight). None when it crashed.
    async fn faulty_pass(
        w: &World<'_>,
        ctl: &Ctl,
        inst: &Inst,
    ) -> Option<sluice::engine::PassResult> {
        let mut pass = w.rig.try_pass(inst);
        for _ in 0..LOOP_MAX {
            if ctl.crash.replace(false) {
                return None;
            }
            let stall = ctl.stalled_until.get() - w.rig.now();
            if stall > 0 {
                select(w.rig.clock.sleep(stall), Box::pin(ctl.poked())).await;
                continue;
            }
            match select(pass.as_mut(), Box::pin(ctl.poked())).await {
                Either::Left((r, _)) => return r,
                Either::Right(_) => continue,
            }
        }
        panic!("a pass did not end");
    }

    /// A pause or terminate the pass never reached a durable call for is
    /// applied after it, as the Durable Object does (then finalize).
    fn apply_late_interrupt(w: &World<'_>, inst: &Inst) {
        let Some(flag) = inst.world.interrupt.take() else {
            return;
        };
        let cmd = match flag {
            sluice::engine::Interrupt::Terminate => Command::Terminate,
            sluice::engine::Interrupt::Pause => Command::Pause,
        };
        if let Ok(st) = w.rig.try_command(inst, cmd) {
            if st.is_terminal() {
                let _ = w.rig.try_finalize(inst);
            }
        }
    }

    /// The adversary: random operator commands and faults.
    async fn adversary(w: &World<'_>, rng: &RefCell<Rng>) {
        let rig = w.rig;
        let ops = rng.borrow_mut().range(5, OPS_MAX as i64);
        for _ in 0..ops {
            let kind = rng.borrow_mut().below(10);
            let gap = match kind {
                0..=5 => rng.borrow_mut().range(1_000, 2 * MIN),
                6..=8 => rng.borrow_mut().range(2 * MIN, 8 * MIN),
                _ => rng
                    .borrow_mut()
                    .range(HOLDER_STALE_MS - MIN, HOLDER_STALE_MS + 3 * MIN),
            };
            rig.clock.sleep(gap).await;
            let k = rng.borrow_mut().below(w.ctls.len() as u64) as usize;
            let ctl = &w.ctls[k];
            let Some(inst) = ctl.inst.get() else { continue };
            let op = rng.borrow_mut().below(120);
            operate(w, rng, k, ctl, inst, op);
            ctl.poke();
        }
    }

    fn operate(w: &World<'_>, rng: &RefCell<Rng>, k: usize, ctl: &Ctl, inst: &Inst, op: u64) {
        let rig = w.rig;
        match op {
            0..=19 if !ctl.in_pass.get() => {
                let names = inst.world.journal_names();
                let pick = rng.borrow_mut().below(names.len() as u64 + 1) as usize;
                let from_step = match pick {
                    0 => None,
                    n => Some(names[n - 1].clone()),
                };
                let out = rig.try_command(
                    inst,
                    Command::Restart {
                        from_step: from_step.clone(),
                    },
                );
                w.log(format!("restart {k} from {from_step:?} -> {out:?}"));
            }
            20..=31 => {
                if ctl.in_pass.get() {
                    inst.world
                        .interrupt
                        .set(Some(sluice::engine::Interrupt::Pause));
                    w.log(format!("pause {k} (interrupt)"));
                } else {
                    let out = rig.try_command(inst, Command::Pause);
                    w.log(format!("pause {k} -> {out:?}"));
                }
            }
            32..=45 if !ctl.in_pass.get() => {
                let out = rig.try_command(inst, Command::Resume);
                w.log(format!("resume {k} -> {out:?}"));
            }
            46..=55 => {
                if ctl.in_pass.get() {
                    inst.world
                        .interrupt
                        .set(Some(sluice::engine::Interrupt::Terminate));
                    w.log(format!("terminate {k} (interrupt)"));
                } else if let Ok(st) = rig.try_command(inst, Command::Terminate) {
                    // Crash mid-finalize, sometimes: D1 fails half way.
                    let fail = rng.borrow_mut().chance(40);
                    // The write that fails: the first `run`, or the lease
                    // release (an `all`: it returns the sandboxes it freed).
                    const LEASES: &str = "DELETE FROM container_leases";
                    if fail {
                        rig.index.fail_next_runs.set(1);
                        rig.index.fail_next_matching(LEASES, 1);
                    }
                    let fin = rig.try_finalize(inst);
                    rig.index.fail_next_runs.set(0);
                    rig.index
                        .fail_matching
                        .borrow_mut()
                        .retain(|(p, _)| *p != LEASES);
                    w.log(format!("terminate {k} -> {st:?}, finalize {fin:?}"));
                }
            }
            56..=71 => {
                let stall = rng.borrow_mut().range(MIN, 14 * MIN);
                ctl.stalled_until.set(rig.now() + stall);
                w.log(format!("stall {k} for {} s", stall / 1000));
            }
            72..=79 if ctl.in_pass.get() => {
                ctl.crash.set(true);
                w.log(format!("crash {k} mid-pass"));
            }
            100..=119 => operate_world(w, rng, op),
            _ => {
                rig.waker.lose_next.set(rig.waker.lose_next.get() + 1);
                w.log("lose the next wake-up".into());
            }
        }
    }

    /// Faults of the world around the executors (issue 21): slow
    /// checkouts (a deadline computed before one would be passed while the
    /// process still runs), head reads answered late (a stale read reaching
    /// its enqueue), head reads failing (at arrival or at dequeue), and
    /// enqueues failing on D1 (a backoff between the read and the enqueue).
    fn operate_world(w: &World<'_>, rng: &RefCell<Rng>, op: u64) {
        let rig = w.rig;
        match op {
            100..=104 => {
                let slow = rng.borrow_mut().below(3) > 0;
                let ms = if slow {
                    rng.borrow_mut().range(MIN, 8 * MIN)
                } else {
                    0
                };
                rig.sandbox.st.borrow_mut().checkout_ms = ms;
                w.log(format!("slow checkouts: {} s", ms / 1000));
            }
            105..=109 => {
                // Half under the enqueue's 5 s freshness bound (the read is
                // used as it is), half over it (read again at the enqueue).
                let short = rng.borrow_mut().chance(50);
                let ms = if short {
                    rng.borrow_mut().range(100, 5_000)
                } else {
                    rng.borrow_mut().range(5_000, 15 * MIN)
                };
                rig.github.delay_answer_next("ref", ms);
                w.log(format!("delay head read by {} s", ms / 1000));
            }
            110..=114 => {
                // Up to twice the dequeue's attempts: often past its bound.
                let n = rng.borrow_mut().range(1, 13) as u32;
                rig.github.fail_next("ref", n, 502);
                w.log(format!("fail head reads x{n}"));
            }
            _ => {
                let n = rng.borrow_mut().range(1, 4) as u32;
                rig.index.fail_next_matching("INSERT INTO serial_queue", n);
                w.log(format!("fail enqueue x{n}"));
            }
        }
    }

    /// The cron sweep, every minute.
    async fn sweeper(w: &World<'_>) {
        for _ in 0..LOOP_MAX {
            if w.over.get() && settled(w) {
                return;
            }
            w.rig.clock.sleep(SWEEP_INTERVAL_MS).await;
            let r = w.rig.sweep();
            if r.woken + r.finalized > 0 {
                w.log(format!("sweep {r:?}"));
            }
        }
    }

    fn settled(w: &World<'_>) -> bool {
        w.ctls.iter().all(|c| {
            c.status()
                .is_none_or(|s| s.is_terminal() || s == Status::Paused)
        })
    }

    /// Whether the instance's executor can take a turn now.
    fn running(w: &World<'_>, ctl: &Ctl) -> bool {
        let now = w.rig.now();
        ctl.stalled_until.get() <= now && ctl.crashed_at.get().is_none_or(|t| now - t > WATCHDOG_MS)
    }

    /// Samples the invariants every few seconds of virtual time.
    async fn monitor(w: &World<'_>) {
        let mut free_since: Option<(i64, u32)> = None;
        let mut unreleased_since: Vec<Option<i64>> = vec![None; w.ctls.len()];
        for _ in 0..LOOP_MAX * 10 {
            if w.over.get() && settled(w) {
                return;
            }
            w.rig.clock.sleep(SAMPLE_MS).await;
            let now = w.rig.now();
            assert!(
                w.rig.sandbox.live_runs_at(now).len() <= 1,
                "two deploys at once: {:?}",
                w.rig.sandbox.live_runs_at(now)
            );
            free_since = check_free_group(w, free_since, now);
            // One query: finished instances (per D1) that still hold rows.
            let unreleased: Vec<String> =
                block_on(sluice::gates::sweep::unreleased(w.rig.index.as_ref(), 100))
                    .unwrap()
                    .into_iter()
                    .map(|u| u.id)
                    .collect();
            for (k, ctl) in w.ctls.iter().enumerate() {
                let Some(inst) = ctl.inst.get() else { continue };
                let held = unreleased.contains(&inst.id);
                unreleased_since[k] = match (held, unreleased_since[k]) {
                    (false, _) => None,
                    (true, None) => Some(now),
                    (true, Some(t)) => {
                        assert!(
                            now - t <= SWEEP_INTERVAL_MS + SLACK_MS,
                            "finished {k} still holds {:?} after {} s",
                            w.rig.held_by(inst),
                            (now - t) / 1000
                        );
                        Some(t)
                    }
                };
            }
        }
    }

    /// The group has no live holder while a live, running waiter exists:
    /// since when (and how many wake-ups were lost by then). Fails past one
    /// sweep interval; a wake-up lost meanwhile (the sweep's own, too) costs
    /// one more, so the clock starts again at each loss.
    fn check_free_group(w: &World<'_>, since: Option<(i64, u32)>, now: i64) -> Option<(i64, u32)> {
        let rows = block_on(w.rig.index.db.all(sluice::stmt!(
            "SELECT q.state, q.heartbeat_ms, q.instance_id, e.status FROM serial_queue q \
             LEFT JOIN executions e ON e.id = q.instance_id WHERE q.group_key = ?1 \
             AND q.state IN ('waiting','holding') ORDER BY q.seq",
            GROUP,
        )))
        .unwrap();
        let live_holder = rows.iter().any(|r| {
            r["state"] == "holding" && r["heartbeat_ms"].as_i64().unwrap() >= now - HOLDER_STALE_MS
        });
        // The waiter whose turn it is (FIFO among live instances) can take
        // it now: a newer one waits behind it by design (a failed head read
        // supersedes nobody, so two may wait), stalled or not.
        let next_waiter = rows.iter().find(|r| {
            r["state"] == "waiting"
                && matches!(r["status"].as_str(), Some("queued" | "running" | "waiting"))
        });
        let live_waiter = next_waiter.is_some_and(|r| {
            let id = r["instance_id"].as_str().unwrap_or("");
            w.ctls
                .iter()
                .find(|c| c.inst.get().is_some_and(|i| i.id == id))
                .is_some_and(|c| running(w, c))
        });
        if live_holder || !live_waiter {
            return None;
        }
        let lost = w.rig.waker.lost.get();
        let (since, lost_then) = match since {
            Some((t, l)) if l == lost => (t, l),
            _ => (now, lost),
        };
        assert!(
            now - since <= SWEEP_INTERVAL_MS + SLACK_MS,
            "the group sat free {} s with a live waiter at t+{}s: {rows:?}",
            (now - since) / 1000,
            (now - T0) / 1000
        );
        Some((since, lost_then))
    }

    /// Ends the adversary's schedule: every stall lifted, every paused
    /// instance resumed, so all of them run to an end.
    async fn quiesce(w: &World<'_>, adversary_done: &Cell<bool>) {
        for _ in 0..LOOP_MAX {
            if adversary_done.get() {
                break;
            }
            w.rig.clock.sleep(MIN).await;
        }
        for _ in 0..LOOP_MAX {
            let mut all = true;
            for ctl in &w.ctls {
                if ctl.stalled_until.replace(0) > w.rig.now() {
                    ctl.poke();
                }
                match (ctl.inst.get(), ctl.status()) {
                    (Some(inst), Some(Status::Paused)) => {
                        let _ = w.rig.try_command(inst, Command::Resume);
                        ctl.poke();
                        all = false;
                    }
                    (_, Some(s)) if s.is_terminal() => {}
                    _ => all = false,
                }
            }
            if all {
                w.over.set(true);
                for c in &w.ctls {
                    c.poke();
                }
                return;
            }
            w.rig.clock.sleep(MIN).await;
        }
        panic!("the schedule never quiesced");
    }

    /// Runs one schedule; returns its trace.
    pub fn run(seed: u64) -> Vec<String> {
        let rng = RefCell::new(Rng(seed));
        let k = rng.borrow_mut().range(2, 6) as usize;
        let shas: Vec<String> = (0..k).map(|i| sha(char::from(b'a' + i as u8))).collect();
        let refs: Vec<&str> = shas.iter().map(String::as_str).collect();
        let duration = rng.borrow_mut().range(MIN, 25 * MIN);
        let rig = deploy_rig_timed(&refs, DEPLOY_TOML, duration);
        let w = World {
            rig: &rig,
            ctls: (0..k).map(|_| Ctl::default()).collect(),
            shas,
            over: Cell::new(false),
            trace: RefCell::new(vec![format!(
                "seed {seed:#x}: {k} deploys of {} s",
                duration / 1000
            )]),
        };
        let arrivals: Vec<(i64, bool)> = (0..k)
            .map(|i| {
                let gap = rng.borrow_mut().range(10_000, 20 * MIN);
                let late = rng.borrow_mut().chance(10);
                (i as i64 * gap, late)
            })
            .collect();
        let adversary_done = Cell::new(false);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            block_on(async {
                let executors =
                    join_all((0..k).map(|i| executor(&w, i, arrivals[i].0, arrivals[i].1)));
                let adv = async {
                    adversary(&w, &rng).await;
                    adversary_done.set(true);
                };
                futures::future::join5(
                    executors,
                    adv,
                    sweeper(&w),
                    monitor(&w),
                    quiesce(&w, &adversary_done),
                )
                .await;
            });
            check_end(&w);
        }));
        let trace = w.trace.borrow().clone();
        if let Err(e) = outcome {
            eprintln!("--- failing run-level schedule, replay with RUN_MODEL_SEED={seed:#x} ---");
            for line in trace.iter().rev().take(60).rev() {
                eprintln!("{line}");
            }
            std::panic::resume_unwind(e);
        }
        trace
    }

    /// What GitHub shows of the deploys (issue 14), once every instance
    /// ended: no deployment left queued or in progress (an execution has one
    /// per generation that recorded one), at most one `success`, and no
    /// deploy that completed its command after the success's own ran (and
    /// was not replaced by a process started after it ended, whose
    /// deployment then speaks for the environment), unless its deployment
    /// ended `error` (an operator's terminate or a restart while it
    /// deployed).
    fn check_deployments(w: &World<'_>) {
        let deployments = w.rig.github.all_deployments();
        let latest = |d: &Deployment| d.latest().map(|s| s.state.clone());
        for d in &deployments {
            assert!(
                matches!(
                    latest(d).as_deref(),
                    Some("success" | "failure" | "error" | "inactive")
                ),
                "a deployment was left {:?}: {d:#?}",
                d.states()
            );
        }
        let successes: Vec<&Deployment> = deployments
            .iter()
            .filter(|d| latest(d).as_deref() == Some("success"))
            .collect();
        assert!(successes.len() <= 1, "two successes: {successes:#?}");
        let Some(winner) = successes.first() else {
            return;
        };
        let runs_of = |id: &str| w.rig.sandbox.runs_in(id);
        let won_at = runs_of(winner.execution().unwrap())
            .iter()
            .map(|r| r.started_ms)
            .max();
        let all_runs = w.rig.sandbox.all_runs();
        // A process that started once this one ended (killed or not) is
        // what the environment holds after it: this one was replaced.
        let replaced = |r: &ProcessRun| {
            let end = r.end_ms().unwrap_or(i64::MAX);
            all_runs.iter().any(|o| o.started_ms >= end)
        };
        for ctl in &w.ctls {
            let inst = ctl.inst.get().unwrap();
            for r in runs_of(&inst.id) {
                let later = !r.killed
                    && r.ended_ms.is_some()
                    && Some(r.started_ms) > won_at
                    && !replaced(&r);
                if !later {
                    continue;
                }
                let own = deployment_of_run(&deployments, &inst.id, &r).and_then(latest);
                assert!(
                    own.as_deref() == Some("error"),
                    "{} ran after the success of {:?} and its deployment ended {own:?}",
                    inst.id,
                    winner.execution()
                );
            }
        }
    }

    /// The deploy of the newest commit that was ever the head when it
    /// arrived is never skipped as superseded or not current (issue 21: a
    /// head read that reached its enqueue late superseded it, and
    /// production stayed on an older commit). Every instance's end is
    /// traced for the coverage markers.
    fn check_newest_never_judged_stale(w: &World<'_>, newest: &str) {
        for (k, ctl) in w.ctls.iter().enumerate() {
            let inst = ctl.inst.get().unwrap();
            let row = w.rig.row(inst);
            let reason = row.reason.clone().unwrap_or_default();
            w.log(format!("end {k}: {} {reason}", row.status));
            if w.shas[k] == newest {
                assert!(
                    !matches!(reason.as_str(), "superseded" | "not_current"),
                    "the newest head's deploy {k} ended {} {reason}",
                    row.status
                );
            }
        }
    }

    /// The deployment a run's generation reported through: the newest one
    /// recorded by that generation or an earlier one (a restart past the
    /// gates keeps its generation's deployment).
    fn deployment_of_run<'d>(
        deployments: &'d [Deployment],
        instance_id: &str,
        run: &ProcessRun,
    ) -> Option<&'d Deployment> {
        let step = sluice::runs::command::DEPLOY_COMMAND_STEP;
        let generation = (0..=GENERATIONS_MAX).find(|g| {
            sluice::runs::command::process_id(instance_id, step, *g).as_str() == run.id
        })?;
        deployments
            .iter()
            .filter(|d| d.execution() == Some(instance_id))
            .filter(|d| {
                d.payload["sluice"]["generation"]
                    .as_u64()
                    .is_some_and(|g| g <= u64::from(generation))
            })
            .max_by_key(|d| d.id)
    }

    /// Restarts of one instance a schedule can make, far more than its
    /// adversary's operations.
    const GENERATIONS_MAX: u32 = 100;

    /// After quiescence: nothing held, no overlap, the newest commit last.
    fn check_end(w: &World<'_>) {
        w.rig.assert_no_overlap();
        for (k, ctl) in w.ctls.iter().enumerate() {
            let inst = ctl.inst.get().unwrap();
            assert!(
                w.rig.held_by(inst).is_empty(),
                "{k} still holds {:?}",
                w.rig.held_by(inst)
            );
        }
        check_deployments(w);
        let runs = w.rig.sandbox.all_runs();
        // The newest commit is the branch head the last push left.
        let head = (REPO.to_owned(), BRANCH.to_owned());
        // Every push of the schedule may have come late (the head never set).
        let Some(newest) = w.rig.github.st.borrow().heads.get(&head).cloned() else {
            return;
        };
        check_newest_never_judged_stale(w, &newest);
        if let Some(last_newest) = runs
            .iter()
            .filter(|r| r.sha == newest)
            .map(|r| r.started_ms)
            .max()
        {
            for r in runs.iter().filter(|r| r.sha != newest && !r.killed) {
                assert!(
                    r.started_ms < last_newest,
                    "an older commit {} deployed after the newest started: {runs:#?}",
                    r.sha
                );
            }
        }
    }

    #[test]
    fn seeded_run_schedules_keep_deploys_apart_and_groups_moving() {
        let only = std::env::var("RUN_MODEL_SEED")
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
        let count: u64 = std::env::var("RUN_MODEL_SCHEDULES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(SCHEDULES_DEFAULT);
        let seeds: Vec<u64> = match only {
            Some(s) => vec![s],
            None => (0..count)
                .map(|i| 0x7E57_0007u64.wrapping_add(i.wrapping_mul(0x9E37_79B9)))
                .collect(),
        };
        let markers = [
            "restart",
            "-> Ok(Queued)",
            "Conflict",
            "pause",
            "resume",
            "terminate",
            "finalize Err",
            "stall",
            "crash",
            "lose",
            "sweep",
            "woken: 1",
            "finalized: 1",
            "slow checkouts",
            "delay head read",
            "fail head reads",
            "fail enqueue",
            "head_unknown",
        ];
        let mut seen = vec![0u32; markers.len()];
        for seed in &seeds {
            for line in run(*seed) {
                for (m, n) in markers.iter().zip(seen.iter_mut()) {
                    *n += u32::from(line.contains(m));
                }
            }
        }
        eprintln!("{} run-level schedules", seeds.len());
        for (m, n) in markers.iter().zip(&seen) {
            eprintln!("  {n:6} x {m}");
        }
        if only.is_none() {
            for (m, n) in markers.iter().zip(&seen) {
                assert!(*n > 0, "no schedule reached {m:?}");
            }
        }
    }
}
