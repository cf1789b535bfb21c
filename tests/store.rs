//! The index's SQL against real SQLite with the real migrations: what the
//! sweep resumes and what the retention purge removes, and that a batch is
//! all-or-nothing (local D1 once failed to roll one back).

mod common;

use common::{block_on, World, T0};
use serde_json::json;
use sluice::engine::{CreateRequest, Status};
use sluice::gates::serial::{self, GroupFilter};
use sluice::store::executions::{self, Cursor, ListFilter};
use sluice::store::sqlite::SqliteDb;
use sluice::store::{Database, Param, Stmt, SyncSql};

fn create(w: &World, key: &str) -> String {
    let req = CreateRequest {
        indexed: false,
        key: key.into(),
        run: "probe".into(),
        input: json!({}),
        repo: None,
        entity: None,
        sha: None,
        max_steps: None,
        max_duration_ms: None,
    };
    w.create_indexed(req)
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

// --- pages: every list reaches every row, with filters ---

/// Inserts an execution row as the engine's create would, with the
/// columns the lists filter on.
fn row(db: &SqliteDb, id: &str, run: &str, repo: &str, entity: &str, status: &str, at: i64) {
    block_on(db.run(Stmt::new(
        "INSERT INTO executions (id, key, run, repo, entity, status, input_json, created_ms, \
         updated_ms) VALUES (?1, ?1, ?2, ?3, ?4, ?5, '{}', ?6, ?6)",
        vec![
            Param::from(id),
            Param::from(run),
            Param::from(repo),
            Param::from(entity),
            Param::from(status),
            Param::from(at),
        ],
    )))
    .expect("insert");
}

/// Every page of `filter`, following cursors until there is none; the
/// number of pages is bounded by the rows (a cursor that does not advance
/// would fail the bound, not loop).
fn all_pages(db: &SqliteDb, filter: &ListFilter, limit: u32) -> (Vec<String>, usize) {
    let mut ids = Vec::new();
    let mut after: Option<Cursor> = None;
    let pages_max = 1 + 1_000 / limit as usize;
    for pages in 1..=pages_max {
        let page = block_on(executions::list_page(db, filter, after.as_ref(), limit)).unwrap();
        assert!(page.items.len() <= limit as usize);
        ids.extend(page.items.into_iter().map(|r| r.id));
        match page.next_cursor {
            Some(c) => after = Some(Cursor::decode(&c).expect("a cursor the store made decodes")),
            None => return (ids, pages),
        }
    }
    panic!("more than {pages_max} pages: a cursor did not advance");
}

#[test]
fn run_sets_leave_runs_out_or_list_them_alone_across_pages() {
    let db = SqliteDb::with_migrations().unwrap();
    for i in 0..30 {
        let run = ["check", "deploy", "schedules"][i % 3];
        let repo = if i % 2 == 0 { "octo/a" } else { "octo/b" };
        row(
            &db,
            &format!("r-{i:02}"),
            run,
            repo,
            "branch:main",
            "complete",
            T0 + i as i64 / 2,
        );
    }
    let ids = |f: &ListFilter| all_pages(&db, f, 4).0;
    let wanted = |keep: &dyn Fn(usize) -> bool| -> Vec<String> {
        (0..30)
            .rev()
            .filter(|i| keep(*i))
            .map(|i| format!("r-{i:02}"))
            .collect()
    };
    let out = ListFilter {
        runs_excluded: vec!["schedules".into()],
        ..ListFilter::default()
    };
    assert_eq!(ids(&out), wanted(&|i| i % 3 != 2));
    let alone = ListFilter {
        runs_only: Some(vec!["schedules".into()]),
        repo: Some("octo/a".into()),
        ..ListFilter::default()
    };
    assert_eq!(ids(&alone), wanted(&|i| i % 3 == 2 && i % 2 == 0));
    let two = ListFilter {
        runs_excluded: vec!["schedules".into(), "check".into()],
        ..ListFilter::default()
    };
    assert_eq!(ids(&two), wanted(&|i| i % 3 == 1));
    let none = ListFilter {
        runs_only: Some(Vec::new()),
        ..ListFilter::default()
    };
    assert!(ids(&none).is_empty(), "an empty set matches nothing");
}

#[test]
fn the_executions_list_pages_through_every_row_newest_first() {
    let db = SqliteDb::with_migrations().unwrap();
    // 450 rows (more than the old 200-row cap), many sharing a millisecond
    // so ties are broken by id across page boundaries.
    for i in 0..450 {
        let run = if i % 3 == 0 { "deploy" } else { "check" };
        let status = if i % 5 == 0 { "skipped" } else { "complete" };
        let repo = if i % 2 == 0 { "octo/a" } else { "octo/b" };
        row(
            &db,
            &format!("x-{i:03}"),
            run,
            repo,
            &format!("pr:{}", i % 7),
            status,
            T0 + i / 4,
        );
    }
    let (ids, pages) = all_pages(&db, &ListFilter::default(), 200);
    assert_eq!(ids.len(), 450, "every row is reachable");
    assert_eq!(pages, 3);
    let mut sorted = ids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(
        ids, sorted,
        "newest first, ties by id descending, no repeats"
    );

    // Pages of 7 give the same sequence.
    assert_eq!(all_pages(&db, &ListFilter::default(), 7).0, ids);

    // Filters compose with the cursor.
    let f = ListFilter {
        run: Some("deploy".into()),
        repo: Some("octo/a".into()),
        status: Some("complete".into()),
        ..ListFilter::default()
    };
    let (deploys, _) = all_pages(&db, &f, 10);
    let want: Vec<String> = (0..450)
        .rev()
        .filter(|i| i % 3 == 0 && i % 2 == 0 && i % 5 != 0)
        .map(|i| format!("x-{i:03}"))
        .collect();
    assert_eq!(deploys, want);

    let entity = ListFilter {
        entity: Some("pr:3".into()),
        ..ListFilter::default()
    };
    assert_eq!(
        all_pages(&db, &entity, 9).0.len(),
        (0..450).filter(|i| i % 7 == 3).count()
    );

    // The time range: created at or after `since`, before `until`.
    let range = ListFilter {
        since_ms: Some(T0 + 10),
        until_ms: Some(T0 + 12),
        ..ListFilter::default()
    };
    let (in_range, _) = all_pages(&db, &range, 3);
    assert_eq!(
        in_range,
        ["x-047", "x-046", "x-045", "x-044", "x-043", "x-042", "x-041", "x-040"]
    );
}

#[test]
fn the_last_page_has_no_cursor_and_a_foreign_cursor_decodes_to_nothing() {
    let db = SqliteDb::with_migrations().unwrap();
    for i in 0..4 {
        row(
            &db,
            &format!("r{i}"),
            "check",
            "o/r",
            "pr:1",
            "complete",
            T0 + i,
        );
    }
    let exact = block_on(executions::list_page(&db, &ListFilter::default(), None, 4)).unwrap();
    assert_eq!(exact.items.len(), 4);
    assert_eq!(
        exact.next_cursor, None,
        "exactly a page: no empty next page"
    );
    let empty = block_on(executions::list_page(
        &db,
        &ListFilter {
            repo: Some("nobody/here".into()),
            ..ListFilter::default()
        },
        None,
        4,
    ))
    .unwrap();
    assert!(empty.items.is_empty() && empty.next_cursor.is_none());
    for bad in [
        "",
        ".",
        "x.y",
        "12",
        "12.",
        "+1.a",
        &format!("1.{}", "k".repeat(201)),
    ] {
        assert_eq!(Cursor::decode(bad), None, "{bad:?}");
    }
    let c = Cursor {
        at_ms: -5,
        key: "a.b".into(),
    };
    assert_eq!(Cursor::decode(&c.encode()), Some(c), "a key may hold dots");
}

#[test]
fn deliveries_steps_and_groups_page_too() {
    let db = SqliteDb::with_migrations().unwrap();
    for i in 0..25 {
        let (event, repo) = if i % 2 == 0 {
            ("push", "o/a")
        } else {
            ("pull_request", "o/b")
        };
        block_on(executions::record_delivery(
            &db,
            &executions::DeliveryRow {
                delivery_id: format!("d.{i:02}"),
                event: event.into(),
                action: None,
                repo: Some(repo.into()),
                instance_ids_json: "[]".into(),
                received_ms: T0 + i / 3,
            },
        ))
        .unwrap();
    }
    let f = executions::DeliveryFilter {
        event: Some("push".into()),
        ..Default::default()
    };
    let mut seen = Vec::new();
    let mut after = None;
    for _ in 0..25 {
        let page = block_on(executions::deliveries_page(&db, &f, after.as_ref(), 4)).unwrap();
        seen.extend(page.items.iter().map(|d| d.delivery_id.clone()));
        match page.next_cursor {
            Some(c) => after = Cursor::decode(&c),
            None => break,
        }
    }
    let want: Vec<String> = (0..25)
        .rev()
        .filter(|i| i % 2 == 0)
        .map(|i| format!("d.{i:02}"))
        .collect();
    assert_eq!(seen, want);

    // Steps: by seq, after the cursor.
    row(&db, "s1", "probe", "o/a", "pr:1", "running", T0);
    for seq in 0..5i64 {
        block_on(db.run(Stmt::new(
            "INSERT INTO execution_steps (execution_id, seq, name, kind, state, attempts, \
             started_ms) VALUES ('s1', ?1, ?2, 'step', 'done', 1, ?3)",
            vec![
                Param::from(seq),
                Param::from(format!("step {seq}")),
                Param::from(T0),
            ],
        )))
        .unwrap();
    }
    let first = block_on(executions::steps_page(&db, "s1", None, 3)).unwrap();
    assert_eq!(
        first.items.iter().map(|s| s.seq).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    assert_eq!(first.next_cursor.as_deref(), Some("2"));
    let rest = block_on(executions::steps_page(&db, "s1", Some(2), 3)).unwrap();
    assert_eq!(rest.items.iter().map(|s| s.seq).collect::<Vec<_>>(), [3, 4]);
    assert_eq!(rest.next_cursor, None);

    // Groups: by key after the cursor, filtered by the repository of their
    // live rows' executions.
    for (i, (group, repo)) in [("g:a", "o/a"), ("g:b", "o/b"), ("g:c", "o/a")]
        .iter()
        .enumerate()
    {
        let id = format!("w{i}");
        row(&db, &id, "deploy", repo, "branch:main", "waiting", T0);
        block_on(db.run(Stmt::new(
            "INSERT INTO serial_queue (group_key, execution_id, instance_id, revision, state, \
             arrived_ms, heartbeat_ms, updated_ms) VALUES (?1, ?2, ?2, 'abc', 'waiting', ?3, ?3, ?3)",
            vec![Param::from(*group), Param::from(id.as_str()), Param::from(T0)],
        )))
        .unwrap();
    }
    let gf = |repo: Option<&str>, after: Option<&str>| GroupFilter {
        repo: repo.map(str::to_owned),
        after: after.map(str::to_owned),
    };
    let p1 = block_on(serial::groups_page(&db, &gf(None, None), 2, T0)).unwrap();
    assert_eq!(
        p1.items
            .iter()
            .map(|g| g.group.as_str())
            .collect::<Vec<_>>(),
        ["g:a", "g:b"]
    );
    assert_eq!(p1.next_cursor.as_deref(), Some("g:b"));
    let p2 = block_on(serial::groups_page(&db, &gf(None, Some("g:b")), 2, T0)).unwrap();
    assert_eq!(
        p2.items
            .iter()
            .map(|g| g.group.as_str())
            .collect::<Vec<_>>(),
        ["g:c"]
    );
    assert_eq!(p2.next_cursor, None);
    let of_a = block_on(serial::groups_page(&db, &gf(Some("o/a"), None), 10, T0)).unwrap();
    assert_eq!(
        of_a.items
            .iter()
            .map(|g| g.group.as_str())
            .collect::<Vec<_>>(),
        ["g:a", "g:c"]
    );
}

#[test]
fn human_waits_are_the_waiting_event_waits_a_person_decides() {
    let db = SqliteDb::with_migrations().unwrap();
    let wait = |id: &str, seq: i64, name: &str, state: &str, deadline: i64| {
        block_on(db.run(Stmt::new(
            "INSERT INTO execution_steps (execution_id, seq, name, kind, state, attempts, \
             started_ms, wake_at_ms) VALUES (?1, ?2, ?3, 'wait', ?4, 0, ?5, ?6)",
            vec![
                Param::from(id),
                Param::from(seq),
                Param::from(name),
                Param::from(state),
                Param::from(T0),
                Param::from(deadline),
            ],
        )))
        .unwrap();
    };
    row(&db, "fork", "check", "o/a", "pr:9", "waiting", T0);
    wait("fork", 3, "approval", "done", T0 + 5);
    wait("fork", 4, "approval#2", "waiting", T0 + 50);
    row(&db, "dep", "deploy", "o/a", "branch:main", "waiting", T0);
    wait("dep", 1, "confirmation", "waiting", T0 + 10);
    row(&db, "turn", "deploy", "o/a", "branch:main", "waiting", T0);
    wait("turn", 1, "turn", "waiting", T0 + 1);
    row(
        &db,
        "gone",
        "deploy",
        "o/a",
        "branch:main",
        "terminated",
        T0,
    );
    wait("gone", 1, "confirmation", "waiting", T0 + 1);
    let found = block_on(executions::human_waits(
        &db,
        &["approval", "confirmation"],
        10,
    ))
    .unwrap();
    let got: Vec<(&str, &str, Option<i64>)> = found
        .iter()
        .map(|h| {
            (
                h.execution.id.as_str(),
                h.wait_name.as_str(),
                h.wait_deadline_ms,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("dep", "confirmation", Some(T0 + 10)),
            ("fork", "approval#2", Some(T0 + 50))
        ],
        "earliest deadline first; a serial turn and a finished execution are not decisions"
    );
    assert!(block_on(executions::human_waits(&db, &[], 10))
        .unwrap()
        .is_empty());
}

/// Held inline entries written together go out in statements under what
/// Durable Object storage keeps in one string; an entry too large for one
/// goes alone, after the rows before it, so a write that fails leaves the
/// entries before the failure written and none after it: never a gap.
#[test]
fn a_write_of_many_entries_splits_and_fails_as_a_prefix() {
    use sluice::journal::{Entry, EntryKind, EntryState};
    use sluice::store::journal::{JournalStore, SqlJournal};
    use sluice::store::SyncSql;
    // Both statement forms: a batch of plain done steps, and one whose
    // first entry carries an error message, so every row takes the full form.
    for plain in [true, false] {
        let entry = |seq: u32, value: String| Entry {
            seq,
            name: format!("s{seq}"),
            kind: EntryKind::Step,
            state: EntryState::Done,
            value: Some(value),
            error_tag: None,
            error_message: (!plain && seq == 0).then(|| "noted".to_owned()),
            attempts: 1,
            started_ms: T0,
            finished_ms: Some(T0),
            wake_at_ms: None,
            rev: i64::from(seq) + 1,
        };
        // 700 KB of backslashes, JSON-escaped once as a result and again in
        // its row: over one statement's bound alone.
        let big = serde_json::to_string(&"\\".repeat(350_000)).unwrap();
        let journal = SqlJournal::open(SqliteDb::open_in_memory().unwrap()).unwrap();
        // Rows of 300 KB each: three to a statement at most.
        let many: Vec<Entry> = (0..8).map(|i| entry(i, "y".repeat(300_000))).collect();
        journal.put_entries(&many).unwrap();
        assert_eq!(journal.entries().unwrap(), many, "plain: {plain}");
        let journal = SqlJournal::open(SqliteDb::open_in_memory().unwrap()).unwrap();
        common::create_every_journal_table(&journal);
        journal
            .storage()
            .exec(
                "CREATE TRIGGER refuse_s1 BEFORE INSERT ON journal WHEN NEW.name = 's1' \
                 BEGIN SELECT RAISE(FAIL, 'storage full'); END",
                &[],
            )
            .unwrap();
        let batch = [
            entry(0, "1".into()),
            entry(1, "2".into()),
            entry(2, big),
            entry(3, "4".into()),
        ];
        assert!(journal.put_entries(&batch).is_err());
        let written: Vec<u32> = journal.entries().unwrap().iter().map(|e| e.seq).collect();
        assert!(
            written.iter().enumerate().all(|(i, seq)| *seq == i as u32) && !written.contains(&2),
            "a prefix, the big entry not written past the failure (plain: {plain}): {written:?}"
        );
    }
}

/// A pass's changed entries reach `execution_steps` field for field, in as
/// few statements as the JSON size allows: 300 entries, half with 4,096
/// character error messages, names in any script, are 3 statements past
/// the record's update, and a second mirror of changed entries replaces rows.
#[test]
fn mirrored_steps_arrive_whole_in_a_few_statements() {
    use sluice::journal::{Entry, EntryKind, EntryState, InstanceRecord};
    use sluice::store::journal::JournalStore;
    let w = World::new();
    let id = create(&w, "mirrored");
    let rec: InstanceRecord = w.journal.load_instance().unwrap().unwrap();
    let entry = |seq: u32, failed: bool| Entry {
        seq,
        name: format!("étape «{seq}» 🚀 \"quoted\""),
        kind: if seq % 3 == 0 {
            EntryKind::Sleep
        } else {
            EntryKind::Step
        },
        state: if failed {
            EntryState::Failed
        } else {
            EntryState::Done
        },
        value: (seq % 2 == 0).then(|| "x".repeat(seq as usize)),
        error_tag: failed.then(|| "Blip".to_owned()),
        error_message: failed.then(|| format!("{seq}: {}", "é\n".repeat(2048))),
        attempts: seq % 4,
        started_ms: T0 + i64::from(seq),
        finished_ms: (seq % 5 != 0).then_some(T0 + 1_000 + i64::from(seq)),
        wake_at_ms: (seq % 3 == 0).then_some(T0 + 2_000),
        rev: i64::from(seq) + 1,
    };
    let entries: Vec<Entry> = (0..300).map(|s| entry(s, s % 2 == 1)).collect();
    let stmts = executions::mirror_stmts(&rec, &entries, 300, T0);
    // 150 messages of 8 KB as JSON: 1.2 MB of rows, three statements.
    assert_eq!(stmts.len(), 4, "the record's update and three of step rows");
    block_on(w.index.batch(stmts)).unwrap();
    let rows = block_on(executions::steps(w.index.as_ref(), &id, 1_000)).unwrap();
    assert_eq!(rows.len(), 300);
    for (row, e) in rows.iter().zip(&entries) {
        assert_eq!(
            (
                row.seq,
                row.name.as_str(),
                row.kind.as_str(),
                row.state.as_str()
            ),
            (
                i64::from(e.seq),
                e.name.as_str(),
                e.kind.as_str(),
                e.state.as_str()
            )
        );
        assert_eq!(row.attempts, i64::from(e.attempts));
        assert_eq!(
            (row.started_ms, row.finished_ms, row.wake_at_ms),
            (e.started_ms, e.finished_ms, e.wake_at_ms)
        );
        assert_eq!(
            (&row.error_tag, &row.error_message),
            (&e.error_tag, &e.error_message)
        );
        assert_eq!(row.result_bytes, e.value.as_ref().map(|v| v.len() as i64));
    }
    let changed = Entry {
        state: EntryState::Done,
        error_tag: None,
        error_message: None,
        value: Some("42".into()),
        ..entry(7, true)
    };
    block_on(
        w.index
            .batch(executions::mirror_stmts(&rec, &[changed], 300, T0)),
    )
    .unwrap();
    let rows = block_on(executions::steps(w.index.as_ref(), &id, 1_000)).unwrap();
    assert_eq!(rows.len(), 300);
    assert_eq!(
        (
            rows[7].state.as_str(),
            rows[7].error_message.as_deref(),
            rows[7].result_bytes
        ),
        ("done", None, Some(2))
    );
}

/// The record is stored as its fields with the version first, read back
/// field for field (also when stored with other spacing), and a record of
/// another version is refused rather than read as this one.
#[test]
fn the_instance_record_round_trips_and_another_version_is_refused() {
    use sluice::store::journal::JournalStore;
    let w = World::new();
    create(&w, "versioned");
    let stored = |w: &World| -> String {
        let rows = w
            .journal
            .storage()
            .exec("SELECT record FROM instance", &[])
            .unwrap();
        rows[0]["record"].as_str().unwrap().to_owned()
    };
    let json = stored(&w);
    assert!(json.starts_with("{\"v\":1,"), "{json}");
    let rec = w.journal.load_instance().unwrap().unwrap();
    w.journal.save_instance(&rec).unwrap();
    assert_eq!(stored(&w), json, "saving what was loaded changes nothing");
    let set = |record: String| {
        w.journal
            .storage()
            .exec("UPDATE instance SET record = ?1", &[Param::Text(record)])
            .unwrap();
        // Written past the journal, which holds what it saved last.
        w.journal.reread().unwrap();
    };
    // Spaced out, as another writer might: still version 1, the same record.
    let mut value: serde_json::Value = serde_json::from_str(&json).unwrap();
    set(serde_json::to_string_pretty(&value).unwrap());
    let reread = w.journal.load_instance().unwrap().unwrap();
    w.journal.save_instance(&reread).unwrap();
    assert_eq!(stored(&w), json);
    value["v"] = json!(2);
    set(value.to_string());
    let refused = w.journal.load_instance().unwrap_err();
    assert!(
        refused.to_string().contains("instance record version 2"),
        "{refused}"
    );
}

/// The journal holds the record and the kept interrupt it wrote last
/// (`SqlJournal`'s `Held`): after every write, what it answers is what a
/// read of its storage answers, a kept terminate stays one, and a journal
/// opened over that storage reads the same.
#[test]
fn what_the_journal_holds_is_what_its_storage_has() {
    use sluice::journal::Interrupt;
    use sluice::store::journal::JournalStore;
    let w = World::new();
    let agrees = |when: &str| {
        let held = (
            w.journal.load_instance().unwrap(),
            w.journal.kept_interrupt().unwrap(),
        );
        w.journal.reread().unwrap();
        let stored = (
            w.journal.load_instance().unwrap(),
            w.journal.kept_interrupt().unwrap(),
        );
        assert_eq!(held, stored, "{when}");
        stored
    };
    assert_eq!(agrees("fresh"), (None, None));
    create(&w, "held");
    let (rec, _) = agrees("created");
    let mut rec = rec.expect("the record");
    rec.passes += 1;
    w.journal.save_instance(&rec).unwrap();
    assert_eq!(agrees("saved").0.unwrap().passes, rec.passes);
    for (kept, then) in [
        (Some(Interrupt::Pause), Some(Interrupt::Pause)),
        (Some(Interrupt::Terminate), Some(Interrupt::Terminate)),
        (Some(Interrupt::Pause), Some(Interrupt::Terminate)),
        (None, None),
        (Some(Interrupt::Pause), Some(Interrupt::Pause)),
    ] {
        w.journal.keep_interrupt(kept).unwrap();
        assert_eq!(agrees("kept").1, then, "after keeping {kept:?}");
    }
    // A write the storage refuses leaves what the journal holds as it was.
    w.journal
        .storage()
        .exec(
            "CREATE TRIGGER refuse_record BEFORE INSERT ON instance \
             BEGIN SELECT RAISE(FAIL, 'storage full'); END",
            &[],
        )
        .unwrap();
    let mut refused = rec.clone();
    refused.passes += 1;
    assert!(w.journal.save_instance(&refused).is_err());
    assert_eq!(agrees("refused").0.unwrap().passes, rec.passes);
    // A purge refused half way (the record deleted, the interrupt kept).
    let sql = w.journal.storage();
    sql.exec("DROP TRIGGER refuse_record", &[]).unwrap();
    sql.exec(
        "CREATE TRIGGER refuse_forget BEFORE DELETE ON pending_interrupt \
         BEGIN SELECT RAISE(FAIL, 'storage full'); END",
        &[],
    )
    .unwrap();
    assert!(w.journal.clear().is_err());
    assert_eq!(
        agrees("half cleared"),
        (None, Some(Interrupt::Pause)),
        "the record is gone, the interrupt stays"
    );
    sql.exec("DROP TRIGGER refuse_forget", &[]).unwrap();
    w.journal.clear().unwrap();
    assert_eq!(agrees("cleared"), (None, None));
}

/// A first pass writes the row and its state as one statement: on an
/// index without the row it leaves what the insert and the update did, and
/// on one that has the row (a retried first pass) it updates it the same.
#[test]
fn the_first_mirror_upserts_what_the_insert_and_update_would_write() {
    use sluice::journal::{InstanceRecord, Status};
    use sluice::store::journal::JournalStore;
    let w = World::new();
    create(&w, "upserted");
    let mut rec: InstanceRecord = w.journal.load_instance().unwrap().unwrap();
    rec.status = Status::Complete;
    rec.output = Some("{\"ok\":true}".into());
    rec.finished_ms = Some(T0 + 5);
    rec.passes = 1;
    rec.costs.do_rows_written = 13;
    let fresh = || std::rc::Rc::new(common::CountingDb::new());
    let row = |db: &common::CountingDb| {
        let row = block_on(executions::get(db, &rec.id))
            .unwrap()
            .expect("the row");
        serde_json::to_value(&row).unwrap()
    };
    let two = fresh();
    block_on(two.batch(vec![
        executions::insert_stmt(&rec),
        executions::record_stmt(&rec, 3, T0 + 9),
    ]))
    .unwrap();
    let one = fresh();
    block_on(one.batch(vec![executions::upsert_stmt(&rec, 3, T0 + 9)])).unwrap();
    assert_eq!(row(&one), row(&two));
    // Again over the row: its state moves, its identity stays.
    rec.status = Status::Errored;
    rec.error_message = Some("late".into());
    block_on(one.batch(vec![executions::upsert_stmt(&rec, 4, T0 + 20)])).unwrap();
    block_on(two.batch(vec![executions::record_stmt(&rec, 4, T0 + 20)])).unwrap();
    assert_eq!(row(&one), row(&two));
    assert_eq!(row(&one)["status"], "errored");
    // Another row holding the key under another id (written some other
    // way) is left alone, as `INSERT OR IGNORE` left it: no error, no row.
    let other = fresh();
    let mut foreign = rec.clone();
    foreign.id = "foreign-id".into();
    foreign.status = Status::Queued;
    block_on(other.batch(vec![executions::insert_stmt(&foreign)])).unwrap();
    let before = block_on(executions::get(other.as_ref(), "foreign-id")).unwrap();
    block_on(other.batch(vec![executions::upsert_stmt(&rec, 5, T0 + 30)])).unwrap();
    assert!(block_on(executions::get(other.as_ref(), &rec.id))
        .unwrap()
        .is_none());
    let after = block_on(executions::get(other.as_ref(), "foreign-id")).unwrap();
    assert_eq!(after, before);
    assert_eq!(after.unwrap().status, "queued");
}

/// A plain done step (no error, no wake-up) is written by statements that
/// name its constant columns instead of binding them: every shape of entry,
/// written alone, in a batch of plain steps and in a mixed batch, reads
/// back exactly as it was written.
#[test]
fn every_entry_reads_back_as_written_alone_or_batched() {
    use sluice::journal::{Entry, EntryKind, EntryState};
    use sluice::store::journal::{JournalStore, SqlJournal};
    let plain = |seq: u32| Entry {
        seq,
        name: format!("step \"{seq}\" ✓"),
        kind: EntryKind::Step,
        state: EntryState::Done,
        value: Some(format!("{{\"n\":{seq}}}")),
        error_tag: None,
        error_message: None,
        attempts: 1 + seq % 3,
        started_ms: T0 + i64::from(seq),
        finished_ms: Some(T0 + 2 * i64::from(seq)),
        wake_at_ms: None,
        rev: i64::from(seq) + 7,
    };
    let others = |seq: u32| {
        vec![
            Entry {
                value: None,
                ..plain(seq)
            },
            Entry {
                state: EntryState::Failed,
                error_tag: Some("Boom".into()),
                error_message: Some("it broke".into()),
                ..plain(seq)
            },
            Entry {
                state: EntryState::Retrying,
                finished_ms: None,
                wake_at_ms: Some(T0 + 5_000),
                error_tag: Some("Flaky".into()),
                ..plain(seq)
            },
            Entry {
                kind: EntryKind::Sleep,
                state: EntryState::Waiting,
                value: None,
                finished_ms: None,
                wake_at_ms: Some(T0 + 9),
                ..plain(seq)
            },
            Entry {
                kind: EntryKind::Wait,
                state: EntryState::Done,
                ..plain(seq)
            },
            // A done step with any of the columns the plain form names
            // NULL set is not plain: each must survive.
            Entry {
                error_tag: Some("Note".into()),
                ..plain(seq)
            },
            Entry {
                error_message: Some("said on the way".into()),
                ..plain(seq)
            },
            Entry {
                wake_at_ms: Some(T0 + 1),
                ..plain(seq)
            },
        ]
    };
    let reads_back = |written: &[Entry]| {
        let journal = SqlJournal::open(SqliteDb::open_in_memory().unwrap()).unwrap();
        journal.put_entries(written).unwrap();
        assert_eq!(journal.entries().unwrap(), written, "a batch reads back");
        let journal = SqlJournal::open(SqliteDb::open_in_memory().unwrap()).unwrap();
        for e in written {
            journal.put_entry(e).unwrap();
        }
        assert_eq!(
            journal.entries().unwrap(),
            written,
            "single writes read back"
        );
    };
    reads_back(&(0..5).map(plain).collect::<Vec<_>>());
    let mixed: Vec<Entry> = others(0)
        .into_iter()
        .chain([plain(0)])
        .enumerate()
        .map(|(i, e)| Entry { seq: i as u32, ..e })
        .collect();
    reads_back(&mixed);
    for (i, e) in others(3).into_iter().enumerate() {
        reads_back(&[Entry { seq: i as u32, ..e }]);
    }
}

/// A storage shared by two journals: the same object's storage, opened
/// again after an eviction.
struct SharedDb(std::rc::Rc<SqliteDb>);

impl SyncSql for SharedDb {
    fn exec(
        &self,
        sql: &str,
        params: &[Param],
    ) -> Result<Vec<sluice::store::Row>, sluice::store::StoreError> {
        self.0.exec(sql, params)
    }
}

/// A new object's journal creates no table until a write needs one (issue
/// 26: the four `CREATE TABLE`s were a creation's largest SQL cost). Reads
/// of a table not there answer as the empty table would, removals of
/// nothing do nothing, and a journal opened again over storage holding
/// some of the tables reads what is there.
#[test]
fn a_journal_creates_each_table_with_the_first_write_that_needs_it() {
    use sluice::journal::{Entry, EntryKind, EntryState, Interrupt};
    use sluice::store::journal::{JournalStore, SqlJournal};
    let w = World::new();
    create(&w, "lazy");
    let rec = w.journal.load_instance().unwrap().unwrap();
    let db = std::rc::Rc::new(SqliteDb::open_in_memory().unwrap());
    let tables = || -> Vec<String> {
        let rows = db
            .exec(
                "SELECT name FROM sqlite_master WHERE type = 'table' \
                   AND name NOT LIKE 'sqlite_%' ORDER BY name",
                &[],
            )
            .unwrap();
        rows.iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let journal = SqlJournal::open(SharedDb(db.clone())).unwrap();
    assert_eq!(journal.load_instance().unwrap(), None);
    assert_eq!(journal.entries().unwrap(), []);
    assert_eq!(journal.entries_since(0).unwrap(), []);
    assert_eq!(journal.entry_count().unwrap(), 0);
    assert_eq!(journal.next_event("go").unwrap(), None);
    assert_eq!(journal.kept_interrupt().unwrap(), None);
    journal.truncate_from(0).unwrap();
    journal.clear_events().unwrap();
    journal.keep_interrupt(None).unwrap();
    journal.clear().unwrap();
    assert_eq!(
        tables(),
        Vec::<String>::new(),
        "reads and removals create nothing"
    );

    journal.save_instance(&rec).unwrap();
    assert_eq!(tables(), ["instance"]);
    let step = Entry {
        seq: 0,
        name: "build".into(),
        kind: EntryKind::Step,
        state: EntryState::Done,
        value: Some("1".into()),
        error_tag: None,
        error_message: None,
        attempts: 1,
        started_ms: T0,
        finished_ms: Some(T0),
        wake_at_ms: None,
        rev: 1,
    };
    journal.put_entry(&step).unwrap();
    assert_eq!(tables(), ["instance", "journal"]);
    // Opened again over these two tables: what was written, and nothing
    // of the two it has not.
    let again = SqlJournal::open(SharedDb(db.clone())).unwrap();
    assert_eq!(again.load_instance().unwrap(), Some(rec.clone()));
    assert_eq!(again.entries().unwrap(), [step.clone()]);
    assert_eq!(again.entry_count().unwrap(), 1);
    assert_eq!(
        (
            again.kept_interrupt().unwrap(),
            again.next_event("go").unwrap()
        ),
        (None, None)
    );
    drop(again);

    let seq = journal.push_event("go", "{}", T0).unwrap();
    assert_eq!(journal.next_event("go").unwrap().map(|e| e.seq), Some(seq));
    assert_eq!(tables(), ["events", "instance", "journal"]);
    journal.keep_interrupt(Some(Interrupt::Pause)).unwrap();
    assert_eq!(
        tables(),
        ["events", "instance", "journal", "pending_interrupt"]
    );
    let again = SqlJournal::open(SharedDb(db.clone())).unwrap();
    assert_eq!(again.kept_interrupt().unwrap(), Some(Interrupt::Pause));
    // Only the interrupt's table (a pause kept before any record, which a
    // create then finds): read alone.
    let bare = std::rc::Rc::new(SqliteDb::open_in_memory().unwrap());
    SqlJournal::open(SharedDb(bare.clone()))
        .unwrap()
        .keep_interrupt(Some(Interrupt::Terminate))
        .unwrap();
    let reopened = SqlJournal::open(SharedDb(bare)).unwrap();
    assert_eq!(
        reopened.kept_interrupt().unwrap(),
        Some(Interrupt::Terminate)
    );
    assert_eq!(reopened.load_instance().unwrap(), None);
    // A purge refused at the entries keeps the record, so a later create
    // finds the old life and does not replay its entries as its own.
    db.exec(
        "CREATE TRIGGER refuse_purge BEFORE DELETE ON journal \
         BEGIN SELECT RAISE(FAIL, 'storage full'); END",
        &[],
    )
    .unwrap();
    assert!(journal.clear().is_err());
    let half = SqlJournal::open(SharedDb(db.clone())).unwrap();
    assert_eq!(half.load_instance().unwrap(), Some(rec.clone()));
    assert_eq!(half.entry_count().unwrap(), 1);
    db.exec("DROP TRIGGER refuse_purge", &[]).unwrap();
    // A purge empties every table there is.
    journal.clear().unwrap();
    let purged = SqlJournal::open(SharedDb(db.clone())).unwrap();
    assert_eq!(
        (
            purged.load_instance().unwrap(),
            purged.kept_interrupt().unwrap()
        ),
        (None, None)
    );
    assert_eq!(
        (
            purged.entry_count().unwrap(),
            purged.next_event("go").unwrap()
        ),
        (0, None)
    );
}
