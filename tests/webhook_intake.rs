//! Webhook intake against every kind of bad input: each is a 4xx with a
//! JSON error code, and a valid event Sluice does not act on is ignored.
//! (The end-to-end suite proves the same cases write nothing to D1.)

use serde_json::json;
use sluice::github::webhook::sign;
use sluice::http::body::{BodyLimit, BODY_PART_BYTES};
use sluice::http::webhook::{
    check_declared_length, intake, plan_verified, preflight, read_signed, Delivery, Intake,
    IntakeConfig, Planned, WebhookHeaders,
};
use sluice::http::ApiError;
use sluice::limits::WEBHOOK_BODY_BYTES_MAX;

const SECRET: &str = "s3cret";
/// The oldest event acted on: 2026-01-01T00:00:00Z, as if the retention
/// ended then.
const NOT_BEFORE_MS: i64 = 1_767_225_600_000;

fn pr_body(action: &str, draft: bool, sender_type: &str) -> Vec<u8> {
    let login = if sender_type == "Bot" {
        "dependabot[bot]"
    } else {
        "ana"
    };
    pr_body_from(action, draft, login, sender_type)
}

/// The App these deliveries go to: its bot user is `sluice[bot]`.
const APP_SLUG: &str = "sluice";

fn pr_body_from(action: &str, draft: bool, login: &str, sender_type: &str) -> Vec<u8> {
    json!({
        "action": action,
        "number": 3,
        "pull_request": {
            "number": 3, "draft": draft,
            "head": {"sha": "a".repeat(40), "ref": "feature"},
            "base": {"sha": "b".repeat(40), "ref": "main"}
        },
        "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"},
                       "clone_url": "https://github.com/octo/hello.git"},
        "sender": {"login": login, "type": sender_type},
        "installation": {"id": 42}
    })
    .to_string()
    .into_bytes()
}

struct Req {
    event: Option<&'static str>,
    delivery: Option<&'static str>,
    content_type: Option<&'static str>,
    signature: Option<String>,
    body: Vec<u8>,
    /// The previous webhook secret, while it is being rotated out.
    previous: Option<&'static str>,
}

impl Req {
    fn signed(event: &'static str, body: Vec<u8>) -> Req {
        Req {
            event: Some(event),
            delivery: Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
            content_type: Some("application/json"),
            signature: Some(sign(SECRET.as_bytes(), &body)),
            body,
            previous: None,
        }
    }

    fn run(&self, secret: Option<&str>) -> Result<Intake, (u16, &'static str)> {
        let h = WebhookHeaders {
            event: self.event,
            delivery: self.delivery,
            signature: self.signature.as_deref(),
            content_type: self.content_type,
            content_length: None,
        };
        let cfg = IntakeConfig {
            secret,
            previous_secret: self.previous,
            not_before_ms: NOT_BEFORE_MS,
            app_id: None,
            app_slug: Some(APP_SLUG),
        };
        intake(&h, &self.body, &cfg).map_err(|e| (e.status, e.code))
    }
}

fn status(r: &Req) -> Result<Intake, (u16, &'static str)> {
    r.run(Some(SECRET))
}

#[test]
fn a_signed_pull_request_plans_one_check() {
    let r = Req::signed("pull_request", pr_body("opened", false, "User"));
    let Ok(Intake::Act(Delivery {
        planned: Planned::Create(creates),
        delivery,
        ..
    })) = status(&r)
    else {
        panic!("{:?}", status(&r))
    };
    // The check, and the pull request's preview (`runs::edge::previews`).
    let runs: Vec<&str> = creates.iter().map(|c| c.run.as_str()).collect();
    assert_eq!(runs, ["check", "preview"]);
    assert_eq!(delivery, "72d3162e-cc78-11e3-81ab-4c9367dc0958");
    // Content-Type parameters are allowed.
    let mut r = r;
    r.content_type = Some("application/json; charset=utf-8");
    assert!(matches!(status(&r), Ok(Intake::Act(_))));
}

#[test]
fn bad_input_is_refused_with_the_right_status() {
    let good = || Req::signed("pull_request", pr_body("opened", false, "User"));
    let cases: Vec<(&str, Req, u16, &str)> = vec![
        ("no secret configured", good(), 503, "not_configured"),
        (
            "missing event",
            Req {
                event: None,
                ..good()
            },
            400,
            "missing_event",
        ),
        (
            "missing delivery",
            Req {
                delivery: None,
                ..good()
            },
            400,
            "missing_delivery",
        ),
        (
            "form encoded",
            Req {
                content_type: Some("application/x-www-form-urlencoded"),
                ..good()
            },
            415,
            "unsupported_media_type",
        ),
        (
            "no content type",
            Req {
                content_type: None,
                ..good()
            },
            415,
            "unsupported_media_type",
        ),
        (
            "missing signature",
            Req {
                signature: None,
                ..good()
            },
            401,
            "missing_signature",
        ),
        (
            "wrong signature",
            Req {
                signature: Some(sign(b"other", &good().body)),
                ..good()
            },
            401,
            "bad_signature",
        ),
        (
            "garbage signature",
            Req {
                signature: Some("sha256=xyz".into()),
                ..good()
            },
            401,
            "bad_signature",
        ),
        (
            "bad json",
            Req::signed("pull_request", b"{not json".to_vec()),
            400,
            "bad_json",
        ),
        (
            "json array",
            Req::signed("pull_request", b"[]".to_vec()),
            400,
            "bad_json",
        ),
        (
            "wrong shape",
            Req::signed("pull_request", br#"{"action":"opened"}"#.to_vec()),
            422,
            "wrong_shape",
        ),
        (
            "wrong types",
            Req::signed("pull_request", br#"{"action":1,"number":"x"}"#.to_vec()),
            422,
            "wrong_shape",
        ),
        (
            "oversized",
            Req::signed("pull_request", vec![b' '; WEBHOOK_BODY_BYTES_MAX + 1]),
            413,
            "payload_too_large",
        ),
    ];
    for (name, req, want_status, want_code) in cases {
        let secret = if name == "no secret configured" {
            None
        } else {
            Some(SECRET)
        };
        match req.run(secret) {
            Err((s, code)) => assert_eq!((s, code), (want_status, want_code), "{name}"),
            Ok(i) => panic!("{name}: accepted as {i:?}"),
        }
    }
    assert_eq!(
        check_declared_length(Some(&(WEBHOOK_BODY_BYTES_MAX + 1).to_string()))
            .unwrap_err()
            .status,
        413
    );
    assert!(check_declared_length(Some("12")).is_ok());
    assert!(
        check_declared_length(Some("not a number")).is_ok(),
        "the body's real length is checked after reading"
    );
}

#[test]
fn valid_events_sluice_does_not_act_on_are_ignored() {
    for (event, body) in [
        ("issues", br#"{"action":"opened"}"#.to_vec()),
        ("ping", br#"{"zen":"Keep it logically awesome."}"#.to_vec()),
        ("pull_request", pr_body("closed", false, "User")),
        ("pull_request", pr_body("opened", true, "User")),
        (
            "pull_request",
            pr_body_from("opened", false, "Sluice[bot]", "Bot"),
        ),
    ] {
        let r = Req::signed(event, body);
        assert!(
            matches!(status(&r), Ok(Intake::Ignored { .. })),
            "{event}: {:?}",
            status(&r)
        );
    }
}

#[test]
fn another_apps_bot_is_treated_like_a_user() {
    let r = Req::signed("pull_request", pr_body("opened", false, "Bot"));
    match status(&r) {
        Ok(Intake::Act(Delivery {
            planned: Planned::Create(creates),
            ..
        })) => {
            assert_eq!(creates[0].run, "check", "Dependabot's PR gets its check")
        }
        other => panic!("{other:?}"),
    }
}

fn push_body(pushed_at: i64) -> Vec<u8> {
    json!({
        "ref": "refs/heads/main", "before": "0".repeat(40), "after": "c".repeat(40),
        "repository": {"full_name": "octo/hello", "name": "hello", "owner": {"login": "octo"},
                       "default_branch": "main", "pushed_at": pushed_at},
        "sender": {"login": "ana", "type": "User"},
        "installation": {"id": 42}
    })
    .to_string()
    .into_bytes()
}

/// Deliveries are remembered for the retention only; a signed event older
/// than that (a capture replayed after its record was purged) is refused
/// by its own timestamp, while a fresh one is acted on.
#[test]
fn a_signed_event_older_than_the_retention_is_refused() {
    let old = Req::signed("push", push_body(NOT_BEFORE_MS / 1000 - 1));
    assert_eq!(status(&old).unwrap_err(), (422, "stale_delivery"));
    let fresh = Req::signed("push", push_body(NOT_BEFORE_MS / 1000 + 60));
    assert!(
        matches!(status(&fresh), Ok(Intake::Act(_))),
        "{:?}",
        status(&fresh)
    );
    let mut body: serde_json::Value =
        serde_json::from_slice(&pr_body("opened", false, "User")).unwrap();
    body["pull_request"]["updated_at"] = json!("2025-12-31T23:59:59Z");
    let old_pr = Req::signed("pull_request", body.to_string().into_bytes());
    assert_eq!(status(&old_pr).unwrap_err(), (422, "stale_delivery"));
}

/// What the Worker does with a delivery (`worker_glue::router::webhook`):
/// the headers first, then the body streamed into its signature check, then
/// the plan. Counts the chunks it pulled from `chunks`.
fn serve<S>(h: &WebhookHeaders<'_>, chunks: S, cfg: &IntakeConfig<'_>) -> Result<Intake, ApiError>
where
    S: futures::Stream<Item = Result<Vec<u8>, String>> + Unpin,
{
    futures::executor::block_on(async {
        let pre = preflight(h, cfg)?;
        let body = read_signed(chunks, &pre, cfg).await?;
        plan_verified(&pre, &body, cfg)
    })
}

fn config(secret: &str) -> IntakeConfig<'_> {
    IntakeConfig {
        secret: Some(secret),
        previous_secret: None,
        not_before_ms: NOT_BEFORE_MS,
        app_id: None,
        app_slug: Some(APP_SLUG),
    }
}

/// A body that counts how many of its chunks were pulled.
fn counted<'a>(
    pulled: &'a std::cell::Cell<usize>,
    chunks: Vec<Vec<u8>>,
) -> impl futures::Stream<Item = Result<Vec<u8>, String>> + Unpin + 'a {
    futures::stream::iter(chunks.into_iter().map(move |c| {
        pulled.set(pulled.get() + 1);
        Ok(c)
    }))
}

/// Nothing is buffered before a delivery is authenticated enough: without
/// a well-formed `X-Hub-Signature-256` (`sha256=` and 64 hex digits), an
/// `X-GitHub-Event` or a JSON content type, or with a declared length past
/// GitHub's cap, the delivery is refused before one chunk of its body is
/// pulled.
#[test]
fn a_webhook_without_its_headers_is_refused_before_its_body_is_read() {
    let body = pr_body("opened", false, "User");
    let good_sig = sign(SECRET.as_bytes(), &body);
    let over = (WEBHOOK_BODY_BYTES_MAX + 1).to_string();
    let good = WebhookHeaders {
        event: Some("pull_request"),
        delivery: Some("d-1"),
        signature: Some(&good_sig),
        content_type: Some("application/json"),
        content_length: Some("120"),
    };
    let short_sig = format!("sha256={}", "ab".repeat(31));
    let cases: Vec<(&str, WebhookHeaders<'_>, u16, &str)> = vec![
        (
            "unsigned",
            WebhookHeaders {
                signature: None,
                ..good.clone()
            },
            401,
            "missing_signature",
        ),
        (
            "sha1",
            WebhookHeaders {
                signature: Some("sha1=0123"),
                ..good.clone()
            },
            401,
            "bad_signature",
        ),
        (
            "short",
            WebhookHeaders {
                signature: Some(&short_sig),
                ..good.clone()
            },
            401,
            "bad_signature",
        ),
        (
            "no event",
            WebhookHeaders {
                event: None,
                ..good.clone()
            },
            400,
            "missing_event",
        ),
        (
            "form",
            WebhookHeaders {
                content_type: Some("text/plain"),
                ..good.clone()
            },
            415,
            "unsupported_media_type",
        ),
        (
            "declared too long",
            WebhookHeaders {
                content_length: Some(&over),
                ..good.clone()
            },
            413,
            "payload_too_large",
        ),
    ];
    for (name, h, want_status, want_code) in cases {
        let pulled = std::cell::Cell::new(0);
        let junk = vec![vec![b'x'; 64 * 1024]; 4];
        let e = serve(&h, counted(&pulled, junk), &config(SECRET)).unwrap_err();
        assert_eq!((e.status, e.code), (want_status, want_code), "{name}");
        assert_eq!(pulled.get(), 0, "{name}: no chunk of the body was read");
    }
    let e = serve(
        &WebhookHeaders {
            content_length: Some(&over),
            ..good.clone()
        },
        counted(&std::cell::Cell::new(0), Vec::new()),
        &config(SECRET),
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        format!("webhook bodies are at most {WEBHOOK_BODY_BYTES_MAX} bytes"),
        "the refusal names the limit"
    );
    let pulled = std::cell::Cell::new(0);
    let halves = vec![body[..50].to_vec(), body[50..].to_vec()];
    let planned = serve(&good, counted(&pulled, halves), &config(SECRET));
    assert!(matches!(planned, Ok(Intake::Act(_))), "{planned:?}");
    assert_eq!(pulled.get(), 2);
}

/// A body streams into its HMAC and into parts that are never
/// reallocated: a large signed delivery takes the bytes it has plus at most
/// one part's room (a doubling vector would reserve up to twice), and
/// decodes across its parts; one over GitHub's cap is refused the moment
/// it passes it, without pulling the rest.
#[test]
fn a_body_streams_into_its_signature_within_the_cap_without_doubling() {
    let mut value: serde_json::Value =
        serde_json::from_slice(&pr_body("opened", false, "User")).unwrap();
    // A large but real delivery: GitHub's pushes carry up to thousands of
    // commits.
    value["padding"] = json!("p".repeat(3 * BODY_PART_BYTES + 12_345));
    let body = value.to_string().into_bytes();
    let sig = sign(SECRET.as_bytes(), &body);
    let cfg = config(SECRET);
    for declared in [None, Some(body.len().to_string())] {
        let h = WebhookHeaders {
            event: Some("pull_request"),
            delivery: Some("d-2"),
            signature: Some(&sig),
            content_type: Some("application/json"),
            content_length: declared.as_deref(),
        };
        let pre = preflight(&h, &cfg).unwrap();
        let chunks = futures::stream::iter(
            body.chunks(64 * 1024)
                .map(|c| Ok::<_, String>(c.to_vec()))
                .collect::<Vec<_>>(),
        );
        let got = futures::executor::block_on(read_signed(chunks, &pre, &cfg)).unwrap();
        assert_eq!(got.len(), body.len());
        assert!(
            got.reserved_bytes() <= body.len() + BODY_PART_BYTES,
            "{declared:?}: reserved {} for {} bytes",
            got.reserved_bytes(),
            body.len()
        );
        assert!(got.parts() > 1, "kept in parts, never gathered into one");
        let planned = plan_verified(&pre, &got, &cfg);
        assert!(matches!(planned, Ok(Intake::Act(_))), "{planned:?}");
    }

    let pulled = std::cell::Cell::new(0usize);
    let chunk = vec![b'x'; 64 * 1024];
    let endless = futures::stream::iter(std::iter::repeat_with(|| {
        pulled.set(pulled.get() + 1);
        Ok::<_, String>(chunk.clone())
    }));
    let h = WebhookHeaders {
        event: Some("pull_request"),
        delivery: Some("d-3"),
        signature: Some(&sig),
        content_type: Some("application/json"),
        content_length: None,
    };
    let pre = preflight(&h, &cfg).unwrap();
    let refused = futures::executor::block_on(read_signed(endless, &pre, &cfg)).unwrap_err();
    assert_eq!((refused.status, refused.code), (413, "payload_too_large"));
    assert_eq!(refused.message, BodyLimit::WEBHOOK.too_large().message);
    assert_eq!(
        pulled.get(),
        WEBHOOK_BODY_BYTES_MAX / chunk.len() + 1,
        "stopped at the limit"
    );
}

/// Rotating the App's webhook secret drops no delivery: the previous one
/// is accepted until the operator unsets it; any other is not.
#[test]
fn the_previous_webhook_secret_is_accepted_while_rotating() {
    let body = pr_body("opened", false, "User");
    let mut r = Req::signed("pull_request", body.clone());
    r.signature = Some(sign(b"old-secret", &body));
    assert_eq!(
        status(&r).unwrap_err(),
        (401, "bad_signature"),
        "unknown without rotation"
    );
    r.previous = Some("old-secret");
    assert!(matches!(status(&r), Ok(Intake::Act(_))), "{:?}", status(&r));
    r.signature = Some(sign(b"some-other", &body));
    assert_eq!(status(&r).unwrap_err(), (401, "bad_signature"));
}

// ---------------------------------------------------------------------------
// Accepting a delivery: answered from one D1 batch; objects created after
// ---------------------------------------------------------------------------

mod accepting {
    use super::*;
    use futures::executor::block_on;
    use sluice::engine::{CreateRequest, Created};
    use sluice::http::error::ApiError;
    use sluice::http::webhook::{accept, InstanceCreator};
    use sluice::limits::SWEEP_OVERDUE_MS;
    use sluice::runs::triggers::EventSend;
    use sluice::stmt;
    use sluice::store::executions;
    use sluice::store::sqlite::SqliteDb;
    use sluice::store::{Database, Row, Stmt, StoreError};
    use std::cell::Cell;

    const NOW_MS: i64 = NOT_BEFORE_MS + 60_000;

    /// Counts what the answer path asks of the instances' objects.
    #[derive(Default)]
    struct Objects {
        creates: Cell<u32>,
    }

    #[async_trait::async_trait(?Send)]
    impl InstanceCreator for Objects {
        async fn create(&self, req: &CreateRequest) -> Result<Created, ApiError> {
            self.creates.set(self.creates.get() + 1);
            Err(ApiError::internal(format!(
                "not on the answer path: {}",
                req.key
            )))
        }
        async fn send(&self, _: &EventSend) -> Result<bool, ApiError> {
            Ok(true)
        }
    }

    /// A pull request's check, planned (its preview, which the same
    /// delivery plans too, left out: these tests count one instance).
    fn planned() -> Intake {
        let mut intake = status(&Req::signed(
            "pull_request",
            pr_body("opened", false, "User"),
        ))
        .unwrap();
        if let Intake::Act(Delivery {
            planned: Planned::Create(creates),
            ..
        }) = &mut intake
        {
            creates.retain(|c| c.run == "check");
        }
        intake
    }

    /// The answer names the instance, its row and the delivery's record are
    /// in D1, and no object was asked anything yet: the create comes after.
    #[test]
    fn a_delivery_is_answered_from_one_batch_and_its_object_created_after() {
        let db = SqliteDb::with_migrations().unwrap();
        let objects = Objects::default();
        let a = block_on(accept(&db, &objects, planned(), NOW_MS, "req-1")).unwrap();
        assert_eq!(a.status, 202);
        assert_eq!(objects.creates.get(), 0, "no object on the answer path");
        assert_eq!(a.create_after.len(), 1);
        let id = a.create_after[0].id();
        assert_eq!(a.body["instances"][0]["id"], id.as_str());
        assert_eq!(a.body["instances"][0]["created"], true);
        let row = block_on(executions::get(&db, id.as_str()))
            .unwrap()
            .expect("indexed");
        assert_eq!(
            (row.status.as_str(), row.wake_at_ms),
            ("queued", Some(NOW_MS))
        );
        // Had the create after the answer never arrived, the sweep finds
        // the instance overdue and recreates its object from this row.
        let overdue = block_on(executions::overdue(&db, NOW_MS + SWEEP_OVERDUE_MS, 10)).unwrap();
        assert_eq!(overdue.len(), 1);
        assert_eq!(overdue[0].id, id.as_str());
    }

    /// A redelivery (same GUID) answers what the first created and asks
    /// nothing; another delivery of the same commit creates no second
    /// instance.
    #[test]
    fn a_redelivery_creates_nothing_and_a_second_delivery_finds_the_instance() {
        let db = SqliteDb::with_migrations().unwrap();
        let objects = Objects::default();
        let first = block_on(accept(&db, &objects, planned(), NOW_MS, "req-1")).unwrap();
        let again = block_on(accept(&db, &objects, planned(), NOW_MS + 5, "req-2")).unwrap();
        assert_eq!(again.body["duplicate"], true);
        assert_eq!(
            again.body["instances"][0]["id"],
            first.body["instances"][0]["id"]
        );
        assert!(again.create_after.is_empty());
        let mut other = Req::signed("pull_request", pr_body("opened", false, "User"));
        other.delivery = Some("0b9f0d5c-0000-4000-8000-000000000001");
        let second = block_on(accept(
            &db,
            &objects,
            status(&other).unwrap(),
            NOW_MS + 9,
            "req-3",
        ))
        .unwrap();
        assert_eq!(second.body["duplicate"], false);
        assert_eq!(
            second.body["instances"][0]["created"], false,
            "the instance exists"
        );
        assert_eq!(objects.creates.get(), 0);
    }

    /// Counts the D1 round trips the answer path makes.
    struct Counted<'a> {
        db: &'a SqliteDb,
        trips: Cell<u32>,
    }

    #[async_trait::async_trait(?Send)]
    impl Database for Counted<'_> {
        async fn all(&self, stmt: Stmt) -> Result<Vec<Row>, StoreError> {
            self.trips.set(self.trips.get() + 1);
            self.db.all(stmt).await
        }
        async fn run(&self, stmt: Stmt) -> Result<u64, StoreError> {
            self.trips.set(self.trips.get() + 1);
            self.db.run(stmt).await
        }
        async fn batch(&self, stmts: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
            self.trips.set(self.trips.get() + 1);
            self.db.batch(stmts).await
        }
    }

    /// A delivery that only creates is answered from one D1 round trip; its
    /// redelivery from two (the batch that writes nothing, then the first
    /// arrival's record) and still creates nothing.
    #[test]
    fn a_creating_delivery_costs_one_round_trip_and_its_redelivery_two() {
        let db = SqliteDb::with_migrations().unwrap();
        let counted = Counted {
            db: &db,
            trips: Cell::new(0),
        };
        let objects = Objects::default();
        let first = block_on(accept(&counted, &objects, planned(), NOW_MS, "req-1")).unwrap();
        assert_eq!(
            (first.body["duplicate"].clone(), counted.trips.get()),
            (false.into(), 1)
        );
        let again = block_on(accept(&counted, &objects, planned(), NOW_MS + 5, "req-2")).unwrap();
        assert_eq!(
            (again.body["duplicate"].clone(), counted.trips.get()),
            (true.into(), 3)
        );
        assert_eq!(
            again.body["instances"][0]["id"],
            first.body["instances"][0]["id"]
        );
        assert!(again.create_after.is_empty());
    }

    /// A redelivery of a delivery whose run was purged first (its row gone,
    /// the delivery's record kept) writes no row back: the sweep would
    /// otherwise recreate the purged run from it.
    #[test]
    fn a_redelivery_never_brings_a_purged_run_back() {
        let db = SqliteDb::with_migrations().unwrap();
        let objects = Objects::default();
        let first = block_on(accept(&db, &objects, planned(), NOW_MS, "req-1")).unwrap();
        let id = first.create_after[0].id();
        block_on(db.run(stmt!("DELETE FROM executions WHERE id = ?1", id.as_str()))).unwrap();
        let again = block_on(accept(&db, &objects, planned(), NOW_MS + 5, "req-2")).unwrap();
        assert_eq!(again.body["duplicate"], true);
        assert!(again.create_after.is_empty());
        assert!(block_on(executions::get(&db, id.as_str()))
            .unwrap()
            .is_none());
        let overdue = block_on(executions::overdue(&db, NOW_MS + SWEEP_OVERDUE_MS, 10)).unwrap();
        assert!(overdue.is_empty(), "nothing for the sweep to recreate");
    }

    /// A database whose writes fail (D1 down).
    struct Down;

    #[async_trait::async_trait(?Send)]
    impl Database for Down {
        async fn all(&self, _: Stmt) -> Result<Vec<Row>, StoreError> {
            Err(StoreError::Query("D1 is down".into()))
        }
        async fn run(&self, _: Stmt) -> Result<u64, StoreError> {
            Err(StoreError::Query("D1 is down".into()))
        }
        async fn batch(&self, _: Vec<Stmt>) -> Result<Vec<u64>, StoreError> {
            Err(StoreError::Query("D1 is down".into()))
        }
    }

    /// One `delivery_received` line a delivery, naming the instance it
    /// created (no separate `instance_created` line on the answer path); a
    /// redelivery's line says duplicate; one that failed still has its
    /// line, saying how.
    #[test]
    fn every_delivery_writes_one_line_naming_what_it_created_or_how_it_failed() {
        let rec = sluice::obs::Recorder::install();
        let db = SqliteDb::with_migrations().unwrap();
        let objects = Objects::default();
        let first = block_on(accept(&db, &objects, planned(), NOW_MS, "req-1")).unwrap();
        block_on(accept(&db, &objects, planned(), NOW_MS + 5, "req-2")).unwrap();
        let failed = block_on(accept(&Down, &objects, planned(), NOW_MS + 9, "req-3"));
        assert!(failed.is_err());
        assert!(rec.of(sluice::obs::Kind::InstanceCreated).is_empty());
        let lines = rec.of(sluice::obs::Kind::DeliveryReceived);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0]["request_id"], "req-1");
        assert_eq!(lines[0]["duplicate"], false);
        assert_eq!(
            lines[0]["created_ids"],
            json!([first.body["instances"][0]["id"]])
        );
        assert_eq!(lines[1]["duplicate"], true);
        assert!(lines[1].get("created_ids").is_none());
        assert_eq!(lines[2]["request_id"], "req-3");
        assert_eq!(lines[2]["failed"], "internal");
    }
}
