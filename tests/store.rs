//! The index's SQL against real SQLite with the real migrations: what the
//! sweep resumes and what the retention purge removes, and that a batch is
//! all-or-nothing (local D1 once failed to roll one back).

mod common;

use common::{block_on, World, T0};
use serde_json::json;
use sluice::engine::{CreateRequest, Status};
use sluice::store::executions;
use sluice::store::sqlite::SqliteDb;
use sluice::store::{Database, Param, Stmt};

fn create(w: &World, key: &str) -> String {
    let req = CreateRequest {
        key: key.into(),
        run: "probe".into(),
        input: json!({}),
        repo: None,
        entity: None,
        sha: None,
        max_steps: None,
        max_duration_ms: None,
    };
    block_on(w.engine().create(&req)).expect("create").id
}

#[test]
fn the_sweep_finds_only_overdue_live_instances() {
    let w = World::new();
    let due = create(&w, "a");
    let index = w.index.as_ref();
    // A second instance in the same index, finished.
    let done = World::with_index(w.index.clone());
    let done_id = create(&done, "b");
    block_on(index.run(Stmt::new(
        "UPDATE executions SET status = 'complete', wake_at_ms = NULL, finished_ms = ?2 WHERE id = ?1",
        vec![Param::from(done_id.as_str()), Param::from(T0)],
    )))
    .unwrap();
    assert!(
        block_on(executions::overdue(index, T0 - 1, 10))
            .unwrap()
            .is_empty(),
        "not yet due"
    );
    let rows = block_on(executions::overdue(index, T0, 10)).unwrap();
    assert_eq!(
        rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [due.as_str()]
    );
    assert_eq!(rows[0].run, "probe", "enough to recreate the instance");
}

#[test]
fn retention_purges_finished_instances_with_their_steps() {
    let w = World::new();
    let id = create(&w, "old");
    let index = w.index.as_ref();
    block_on(index.batch(vec![
        Stmt::new(
            "UPDATE executions SET status = 'complete', wake_at_ms = NULL, finished_ms = ?2 WHERE id = ?1",
            vec![Param::from(id.as_str()), Param::from(T0)],
        ),
        Stmt::new(
            "INSERT INTO execution_steps (execution_id, seq, name, kind, state, attempts, started_ms) \
             VALUES (?1, 0, 'a', 'step', 'done', 1, ?2)",
            vec![Param::from(id.as_str()), Param::from(T0)],
        ),
    ]))
    .unwrap();
    let thirty_days = 30 * 24 * 3600 * 1000;
    assert!(block_on(executions::finished_before(index, T0, 10))
        .unwrap()
        .is_empty());
    assert_eq!(
        block_on(executions::finished_before(index, T0 + thirty_days, 10)).unwrap(),
        [id.clone()]
    );
    block_on(executions::delete(index, &id)).unwrap();
    assert!(block_on(executions::get(index, &id)).unwrap().is_none());
    assert!(block_on(executions::steps(index, &id, 10))
        .unwrap()
        .is_empty());
}

#[test]
fn a_batch_is_all_or_nothing() {
    let db = SqliteDb::with_migrations().unwrap();
    let good = Stmt::new(
        "INSERT INTO webhook_deliveries (delivery_id, event, instance_ids_json, received_ms) VALUES ('d1', 'push', '[]', 1)",
        vec![],
    );
    // Violates the executions CHECK on status.
    let bad = Stmt::new(
        "INSERT INTO executions (id, key, run, status, input_json, created_ms, updated_ms) \
         VALUES ('x', 'x', 'probe', 'bogus', '{}', 1, 1)",
        vec![],
    );
    assert!(block_on(db.batch(vec![good, bad])).is_err());
    assert!(
        block_on(executions::delivery(&db, "d1")).unwrap().is_none(),
        "the first statement was rolled back"
    );
}

#[test]
fn the_status_column_refuses_unknown_states() {
    let w = World::new();
    let id = create(&w, "c");
    let r = block_on(w.index.run(Stmt::new(
        "UPDATE executions SET status = 'done' WHERE id = ?1",
        vec![Param::from(id.as_str())],
    )));
    assert!(r.is_err(), "CHECK (status IN (...)) guards the column");
    assert_eq!(w.engine().record().unwrap().unwrap().status, Status::Queued);
}
