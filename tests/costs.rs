//! Cost counters (`sluice::cost`): every billed unit an execution uses is
//! counted as the call happens, by the services the glue wraps, and folded
//! into its record at each pass; `GET /v1/executions/{id}` and
//! `GET /v1/costs` show them with dollars. The fakes count the same calls
//! from the other side, so each counter is checked against what the
//! outside saw.

mod common;

use common::block_on;
use common::fakes::*;
use sluice::cost::{prices, CostUnits, Meter};
use sluice::engine::{InstanceId, Status};
use sluice::http::lists;
use sluice::store::journal::{JournalStore, SqlJournal};
use sluice::store::metered::MeteredSql;
use sluice::store::sqlite::SqliteDb;
use std::rc::Rc;

/// A check's counters, against the fakes' own records of the run.
#[test]
fn a_check_counts_the_github_calls_statements_blobs_and_sandbox_time_it_used() {
    let rig = Rig::new();
    let s = sha('a');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox
        .script_timed("cargo test", 0, "test result: ok\n", 4_000);
    let c = rig.check(&s);

    assert_eq!(rig.run_to_end(&c), Status::Complete);

    let costs = rig.record(&c).costs;
    let api_calls = rig
        .github
        .all_calls()
        .iter()
        .filter(|call| call.route != "notify")
        .count() as u64;
    assert_eq!(costs.github_calls, api_calls, "every GitHub call, once");
    // Every statement SQLite received was counted, but for the ones the
    // finalize after the last pass sent: those are still in the meter,
    // which no later pass folds (documented in docs/openapi.json).
    let unfolded = c.world.meter.peek();
    assert_eq!(
        costs.d1_statements + unfolded.d1_statements,
        u64::from(rig.index.statements.get()),
        "every D1 statement, once"
    );
    assert_eq!(costs.sandbox_ms, 4_000, "the command's own run time");
    let keys = rig.blobs.0.borrow().len() as u64;
    assert!(
        costs.r2_class_a >= keys && keys >= 1,
        "{costs:?}: {keys} objects"
    );
    assert!(
        costs.d1_rows_written >= 1 && costs.d1_rows_read >= 1,
        "{costs:?}"
    );
}

/// A replayed step does no work again, so it costs nothing again: a pass
/// that replays the whole journal adds no GitHub call and no sandbox time.
#[test]
fn a_replay_counts_no_work_twice() {
    let rig = Rig::new();
    let s = sha('b');
    rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
    rig.sandbox
        .script_timed("cargo test", 0, "test result: ok\n", 2_000);
    let c = rig.check(&s);
    assert_eq!(rig.run_to_end(&c), Status::Complete);
    let before = rig.record(&c).costs;
    let calls = rig.github.all_calls().len();
    // The sweep pokes a finished instance: a pass that runs no body.
    rig.pass(&c);
    assert_eq!(rig.github.all_calls().len(), calls);
    let after = rig.record(&c).costs;
    assert_eq!(
        (after.github_calls, after.sandbox_ms),
        (before.github_calls, before.sandbox_ms)
    );
}

/// The API shows an execution's units with their dollars, and sums them
/// per repository.
#[test]
fn the_api_shows_an_executions_costs_and_sums_them_per_repository() {
    let rig = Rig::new();
    for digit in ['c', 'd'] {
        let s = sha(digit);
        rig.github.commit(REPO, &s, &[(".sluice.toml", CHECK_TOML)]);
        rig.sandbox
            .script_timed("cargo test", 0, "test result: ok\n", 1_000);
        let c = rig.check(&s);
        assert_eq!(rig.run_to_end(&c), Status::Complete);
    }
    let db = rig.index.as_ref();
    let rows = block_on(sluice::store::executions::costs_by_repo(db, 0, None, 10)).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].repo.as_deref(), rows[0].executions),
        (Some(REPO), 2)
    );
    let listed = block_on(lists::costs(db, "since=0&run=check")).unwrap();
    let total = &listed["total"];
    assert_eq!(total["executions"], 2);
    let units: CostUnits = serde_json::from_value(total["costs"]["units"].clone()).unwrap();
    assert_eq!(units, rows[0].units);
    assert_eq!(units.sandbox_ms, 2_000);
    let dollars = total["costs"]["dollars"]["total"].as_f64().unwrap();
    assert!((dollars - prices::dollars(&units).total).abs() < 1e-12);
    assert!(total["costs"]["workflows_dollars"].as_f64().unwrap() > 0.0);
    // Another run's filter finds nothing; a bad parameter is refused.
    let none = block_on(lists::costs(db, "run=deploy")).unwrap();
    assert_eq!(none["repositories"].as_array().unwrap().len(), 0);
    assert!(block_on(lists::costs(db, "cursor=1")).is_err());

    let id = rows_first_id(&rig);
    let one = block_on(lists::execution(db, &id, "")).unwrap();
    assert!(one["costs"]["units"]["github_calls"].as_u64().unwrap() > 0);
    assert_eq!(one["costs"]["prices_taken"], prices::PRICES_TAKEN);
}

fn rows_first_id(rig: &Rig) -> InstanceId {
    let rows = block_on(sluice::store::Database::all(
        rig.index.as_ref(),
        sluice::stmt!("SELECT id FROM executions ORDER BY id LIMIT 1"),
    ))
    .unwrap();
    InstanceId::parse(rows[0]["id"].as_str().unwrap()).unwrap()
}

/// An instance's own storage counts the rows its journal writes and reads.
#[test]
fn the_journal_storage_counts_its_rows() {
    let meter = Rc::new(Meter::new());
    let journal = SqlJournal::open(MeteredSql {
        inner: SqliteDb::open_in_memory().unwrap(),
        meter: meter.clone(),
    })
    .unwrap();
    meter.take();
    assert_eq!(journal.load_instance().unwrap(), None);
    let read = meter.take();
    assert_eq!((read.do_rows_written, read.do_rows_read), (0, 0));
    let rig = Rig::new();
    let c = rig.check(&sha('e'));
    journal.save_instance(&rig.record(&c)).unwrap();
    assert_eq!(meter.take().do_rows_written, 1);
    // The journal holds what it saved: reading it back costs no row...
    assert!(journal.load_instance().unwrap().is_some());
    assert_eq!(meter.take().do_rows_read, 0);
    // ...until it reads storage again (after reading which tables exist).
    journal.reread().unwrap();
    assert_eq!(meter.take().do_rows_read, 1, "one table: instance");
    assert!(journal.load_instance().unwrap().is_some());
    assert_eq!(meter.take().do_rows_read, 1);
}
