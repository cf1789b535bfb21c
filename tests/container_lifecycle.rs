//! The sandbox container's lifecycle (`sandbox::lifecycle`) natively: each
//! transition is a sequence of events (a request, an answer, a failure,
//! the alarm) and the decisions they produce, under a clock the test moves.
//! Plus the one relation wrangler.toml must keep with the code: the pool
//! never admits more runs than `max_instances` containers.

use sluice::limits::{CONTAINER_INSTANCES_MAX, PROCESS_POLL_MS};
use sluice::runs::config::parse_duration_ms;
use sluice::sandbox::lifecycle::*;
use sluice::secret::Secret;

const T0: i64 = 1_700_000_000_000;
const MIN: i64 = 60_000;
const TOKEN: &str = "agent-token-0123456789";

fn lifecycle() -> Lifecycle {
    let (settings, warning) = Settings::new(None, Some(Secret::new(TOKEN.to_owned())));
    assert_eq!(warning, None);
    Lifecycle::new(settings, Record::default())
}

fn poll(id: &str) -> Call {
    Call::of(
        "GET",
        &format!("/v1/processes/{id}?wait_ms={PROCESS_POLL_MS}"),
        None,
    )
}

fn start_process(id: &str, timeout_ms: i64) -> Call {
    let body = format!(
        r#"{{"id":"{id}","workspace":"w","command":"make","timeout_ms":{timeout_ms},"env":{{}}}}"#
    );
    Call::of("POST", "/v1/processes", Some(&body))
}

fn process_answer(id: &str, status: &str) -> String {
    format!(
        r#"{{"id":"{id}","status":"{status}","exit_code":null,"signal":null,"output":"","output_bytes":0,"output_truncated":false,"started_ms":null,"duration_ms":null}}"#
    )
}

fn discard() -> Call {
    Call::of("DELETE", "/v1/sandboxes/inst-1", None)
}

/// A request that reaches a running, ready agent and is answered 200.
fn served(lc: &mut Lifecycle, call: &Call, body: &str, now: i64) -> Vec<Effect> {
    let (route, _) = lc.on_request(call, true, now);
    assert!(
        matches!(route, Route::Agent { start: None, .. }),
        "{route:?}"
    );
    lc.on_answer(call, 200, body, now)
}

#[test]
fn a_first_request_starts_the_container_with_the_token_and_arms_the_idle_alarm() {
    let mut lc = lifecycle();
    let call = Call::of("GET", "/v1/workspaces/w", None);
    let (route, effects) = lc.on_request(&call, false, T0);
    let Route::Agent {
        start: Some(opts),
        await_ready,
        timeout_ms,
    } = route
    else {
        panic!("expected a start, got {route:?}");
    };
    assert_eq!(
        opts.env,
        vec![(AGENT_TOKEN_ENV.to_owned(), Secret::new(TOKEN.to_owned()))]
    );
    assert_eq!(AGENT_TOKEN_ENV, "SANDBOX_AGENT_TOKEN");
    assert!(opts.enable_internet);
    assert!(
        await_ready,
        "a fresh container is probed before the request"
    );
    assert_eq!(timeout_ms, FORWARD_QUICK_MS);
    assert_eq!(
        effects,
        vec![
            Effect::ArmAlarm {
                at_ms: T0 + SLEEP_AFTER_MS_DEFAULT
            },
            Effect::Persist
        ]
    );
    // The token never shows in a log line of the options.
    assert!(!format!("{opts:?}").contains(TOKEN));

    lc.on_ready();
    assert_eq!(
        lc.on_answer(&call, 200, "{}", T0 + 5),
        vec![Effect::Persist]
    );
    // The next request goes straight to the agent: no start, no probe, the
    // alarm already armed.
    let (route, effects) = lc.on_request(&call, true, T0 + 10);
    assert_eq!(
        route,
        Route::Agent {
            start: None,
            await_ready: false,
            timeout_ms: FORWARD_QUICK_MS
        }
    );
    assert_eq!(effects, vec![Effect::Persist]);
}

#[test]
fn without_a_token_the_container_gets_no_token_variable() {
    let (settings, _) = Settings::new(None, None);
    let mut lc = Lifecycle::new(settings, Record::default());
    let (route, _) = lc.on_request(&Call::Quick, false, T0);
    let Route::Agent {
        start: Some(opts), ..
    } = route
    else {
        panic!("{route:?}")
    };
    assert!(opts.env.is_empty());
}

#[test]
fn sleep_after_comes_from_the_var_with_a_default_and_bounds() {
    let parsed = |v: &str| Settings::new(Some(parse_duration_ms(v)), None);
    assert_eq!(
        Settings::new(None, None).0.sleep_after_ms,
        SLEEP_AFTER_MS_DEFAULT
    );
    assert_eq!(SLEEP_AFTER_MS_DEFAULT, 10 * MIN, "ADR-0001's 10 minutes");
    assert_eq!(
        parsed("10m"),
        (
            Settings {
                sleep_after_ms: 10 * MIN,
                agent_token: None,
                git_url: None,
            },
            None
        )
    );
    assert_eq!(parsed("2h").0.sleep_after_ms, 120 * MIN);
    let (short, warning) = parsed("30s");
    assert_eq!(short.sleep_after_ms, SLEEP_AFTER_MS_MIN);
    assert!(warning.is_some_and(|w| w.contains("outside")));
    let (long, warning) = parsed("30d");
    assert_eq!(long.sleep_after_ms, SLEEP_AFTER_MS_MAX);
    assert!(warning.is_some());
    let (bad, warning) = parsed("ten minutes");
    assert_eq!(bad.sleep_after_ms, SLEEP_AFTER_MS_DEFAULT);
    assert!(warning.is_some_and(|w| w.contains("CONTAINER_SLEEP_AFTER")));
}

#[test]
fn an_idle_container_is_destroyed_by_the_alarm_after_sleep_after() {
    let mut lc = lifecycle();
    let (_, effects) = lc.on_request(&Call::Quick, false, T0);
    assert!(effects.contains(&Effect::ArmAlarm {
        at_ms: T0 + 10 * MIN
    }));
    lc.on_answer(&Call::Quick, 200, "{}", T0 + 100);
    // The alarm at T0 + 10 min: the last request ended at T0 + 100 ms, so
    // the container has 100 ms of its window left.
    assert_eq!(
        lc.on_alarm(true, T0 + 10 * MIN),
        vec![
            Effect::ArmAlarm {
                at_ms: T0 + 100 + 10 * MIN
            },
            Effect::Persist
        ]
    );
    assert_eq!(
        lc.on_alarm(true, T0 + 100 + 10 * MIN),
        vec![Effect::Destroy(Why::Idle), Effect::Persist]
    );
    assert_eq!(lc.record().alarm_ms, None);
    // The next request starts a fresh container and arms a new alarm.
    let (route, effects) = lc.on_request(&Call::Quick, false, T0 + 11 * MIN);
    assert!(matches!(
        route,
        Route::Agent {
            start: Some(_),
            await_ready: true,
            ..
        }
    ));
    assert!(effects.contains(&Effect::ArmAlarm {
        at_ms: T0 + 21 * MIN
    }));
}

#[test]
fn activity_pushes_the_idle_stop_back() {
    let mut lc = lifecycle();
    lc.on_request(&Call::Quick, false, T0);
    lc.on_answer(&Call::Quick, 200, "{}", T0);
    served(&mut lc, &Call::Quick, "{}", T0 + 7 * MIN);
    assert_eq!(
        lc.on_alarm(true, T0 + 10 * MIN),
        vec![
            Effect::ArmAlarm {
                at_ms: T0 + 17 * MIN
            },
            Effect::Persist
        ]
    );
}

#[test]
fn a_request_in_flight_keeps_the_container() {
    let mut lc = lifecycle();
    let checkout = Call::of("POST", "/v1/workspaces", Some("{}"));
    let (route, _) = lc.on_request(&checkout, false, T0);
    assert!(matches!(
        route,
        Route::Agent {
            timeout_ms: FORWARD_CHECKOUT_MS,
            ..
        }
    ));
    assert_eq!(lc.in_flight(), 1);
    // The checkout is still running when the alarm fires.
    assert_eq!(
        lc.on_alarm(true, T0 + 10 * MIN),
        vec![
            Effect::ArmAlarm {
                at_ms: T0 + 20 * MIN
            },
            Effect::Persist
        ]
    );
    lc.on_answer(&checkout, 201, "{}", T0 + 12 * MIN);
    assert_eq!(lc.in_flight(), 0);
    assert_eq!(
        lc.on_alarm(true, T0 + 20 * MIN),
        vec![
            Effect::ArmAlarm {
                at_ms: T0 + 22 * MIN
            },
            Effect::Persist
        ]
    );
    assert_eq!(
        lc.on_alarm(true, T0 + 22 * MIN)[0],
        Effect::Destroy(Why::Idle)
    );
}

#[test]
fn a_running_command_keeps_its_container_until_its_own_timeout() {
    let mut lc = lifecycle();
    let start = start_process("p1", 30 * MIN);
    lc.on_request(&start, false, T0);
    lc.on_ready();
    lc.on_answer(&start, 201, &process_answer("p1", "running"), T0);
    let deadline = T0 + 30 * MIN + PROCESS_DEADLINE_MARGIN_MS;
    assert_eq!(lc.record().processes.get("p1"), Some(&deadline));
    // Nobody polls (a paused run): the alarm waits for the command's own
    // timeout instead of killing it.
    assert_eq!(
        lc.on_alarm(true, T0 + 10 * MIN),
        vec![Effect::ArmAlarm { at_ms: deadline }, Effect::Persist]
    );
    assert_eq!(lc.on_alarm(true, deadline)[0], Effect::Destroy(Why::Idle));
}

#[test]
fn a_command_seen_to_end_no_longer_holds_the_container() {
    let mut lc = lifecycle();
    let start = start_process("p1", 30 * MIN);
    lc.on_request(&start, false, T0);
    lc.on_answer(&start, 201, &process_answer("p1", "running"), T0);
    served(
        &mut lc,
        &poll("p1"),
        &process_answer("p1", "running"),
        T0 + MIN,
    );
    assert!(lc.record().processes.contains_key("p1"));
    served(
        &mut lc,
        &poll("p1"),
        &process_answer("p1", "exited"),
        T0 + 2 * MIN,
    );
    assert!(lc.record().processes.is_empty());
    assert_eq!(
        lc.on_alarm(true, T0 + 10 * MIN),
        vec![
            Effect::ArmAlarm {
                at_ms: T0 + 12 * MIN
            },
            Effect::Persist
        ]
    );
    // A kill answered 404 (unknown: not running there) ends it as well.
    let start = start_process("p2", 30 * MIN);
    served(
        &mut lc,
        &start,
        &process_answer("p2", "running"),
        T0 + 11 * MIN,
    );
    let kill = Call::of("POST", "/v1/processes/p2/kill?wait_ms=5000", None);
    assert_eq!(kill.forward_timeout_ms(), 5_000 + 5_000 + FORWARD_MARGIN_MS);
    // Any other 404 (an agent without the endpoint) says nothing about it.
    lc.on_request(&kill, true, T0 + 11 * MIN);
    lc.on_answer(
        &kill,
        404,
        r#"{"error":{"code":"not_found","message":""}}"#,
        T0 + 11 * MIN,
    );
    assert!(lc.record().processes.contains_key("p2"));
    lc.on_request(&kill, true, T0 + 11 * MIN);
    lc.on_answer(
        &kill,
        404,
        r#"{"error":{"code":"process_not_found","message":""}}"#,
        T0 + 11 * MIN,
    );
    assert!(lc.record().processes.is_empty());
}

#[test]
fn an_answer_that_is_not_a_process_state_keeps_the_process_tracked() {
    let mut lc = lifecycle();
    let start = start_process("p1", MIN);
    lc.on_request(&start, false, T0);
    lc.on_answer(&start, 201, "not json", T0);
    served(&mut lc, &poll("p1"), "garbled", T0 + 1);
    assert!(
        lc.record().processes.contains_key("p1"),
        "forgetting a live process could reap it"
    );
}

#[test]
fn the_process_table_is_bounded() {
    let mut lc = lifecycle();
    lc.on_request(&Call::Quick, false, T0);
    lc.on_answer(&Call::Quick, 200, "{}", T0);
    for i in 0..(PROCESSES_TRACKED_MAX as i64 + 10) {
        let id = format!("p{i}");
        served(
            &mut lc,
            &start_process(&id, MIN + i),
            &process_answer(&id, "running"),
            T0,
        );
    }
    let table = &lc.record().processes;
    assert_eq!(table.len(), PROCESSES_TRACKED_MAX);
    // The earliest deadlines went first; the latest is kept.
    assert!(!table.contains_key("p0"));
    assert!(table.contains_key(&format!("p{}", PROCESSES_TRACKED_MAX + 9)));
}

#[test]
fn a_discard_reaches_the_agent_then_destroys_the_container() {
    let mut lc = lifecycle();
    served_first(&mut lc, T0);
    let (route, effects) = lc.on_request(&discard(), true, T0 + MIN);
    assert_eq!(
        route,
        Route::Agent {
            start: None,
            await_ready: false,
            timeout_ms: FORWARD_DISCARD_MS
        }
    );
    assert_eq!(effects, vec![Effect::Persist]);
    let body = r#"{"discarded":"inst-1","killed":1,"deleted":true}"#;
    assert_eq!(
        lc.on_answer(&discard(), 200, body, T0 + MIN),
        vec![
            Effect::Destroy(Why::Discarded),
            Effect::DeleteAlarm,
            Effect::Persist
        ]
    );
    assert_eq!(lc.record().alarm_ms, None);
    assert!(lc.record().processes.is_empty());
}

/// A container started, its agent ready, one request served at `now`.
fn served_first(lc: &mut Lifecycle, now: i64) {
    lc.on_request(&Call::Quick, false, now);
    lc.on_ready();
    lc.on_answer(&Call::Quick, 200, "{}", now);
}

#[test]
fn a_discard_the_agent_refused_or_lost_still_destroys_the_container() {
    let mut lc = lifecycle();
    served_first(&mut lc, T0);
    lc.on_request(&discard(), true, T0);
    assert_eq!(
        lc.on_answer(&discard(), 500, "{}", T0)[0],
        Effect::Destroy(Why::Discarded)
    );

    let mut lc = lifecycle();
    served_first(&mut lc, T0);
    lc.on_request(&discard(), true, T0);
    assert_eq!(
        lc.on_forward_failed(&discard(), true, T0),
        vec![
            Effect::Destroy(Why::Discarded),
            Effect::DeleteAlarm,
            Effect::Persist
        ]
    );
}

#[test]
fn a_discard_with_no_container_starts_none() {
    let mut lc = lifecycle();
    let (route, effects) = lc.on_request(&discard(), false, T0);
    assert_eq!(route, Route::AnswerDiscarded);
    assert_eq!(effects, vec![Effect::Persist]);
    assert_eq!(lc.in_flight(), 0);
    assert_eq!(
        lc.record().alarm_ms,
        None,
        "no alarm for a container that does not exist"
    );
}

#[test]
fn a_lost_connection_makes_the_next_request_probe_again() {
    let mut lc = lifecycle();
    served_first(&mut lc, T0);
    let call = poll("p1");
    lc.on_request(&call, true, T0);
    assert_eq!(
        lc.on_forward_failed(&call, true, T0 + 1),
        vec![Effect::Persist]
    );
    assert_eq!(lc.in_flight(), 0);
    let (route, _) = lc.on_request(&call, true, T0 + 2);
    assert!(matches!(
        route,
        Route::Agent {
            start: None,
            await_ready: true,
            ..
        }
    ));
}

#[test]
fn a_lost_container_is_started_afresh_and_forgets_its_processes() {
    let mut lc = lifecycle();
    let start = start_process("p1", 30 * MIN);
    lc.on_request(&start, false, T0);
    lc.on_ready();
    lc.on_answer(&start, 201, &process_answer("p1", "running"), T0);
    // docker kill: the long-poll fails with the container gone.
    let call = poll("p1");
    lc.on_request(&call, true, T0 + MIN);
    lc.on_forward_failed(&call, false, T0 + MIN);
    assert!(
        lc.record().processes.is_empty(),
        "its processes died with it"
    );
    // The retried step's first call finds no container: a fresh start, probed.
    let (route, _) = lc.on_request(&call, false, T0 + MIN + 2_000);
    assert!(
        matches!(
            route,
            Route::Agent {
                start: Some(_),
                await_ready: true,
                ..
            }
        ),
        "{route:?}"
    );
}

#[test]
fn a_container_whose_agent_never_answers_is_destroyed() {
    let mut lc = lifecycle();
    lc.on_request(&Call::Quick, false, T0);
    assert_eq!(
        lc.on_not_ready(true, T0 + READY_TOTAL_MS),
        vec![Effect::Destroy(Why::NotReady), Effect::Persist]
    );
    assert_eq!(lc.in_flight(), 0);
    // A start that failed outright has nothing to destroy.
    lc.on_request(&Call::Quick, false, T0 + READY_TOTAL_MS);
    assert_eq!(
        lc.on_not_ready(false, T0 + READY_TOTAL_MS),
        vec![Effect::Persist]
    );
}

#[test]
fn the_alarm_of_a_stopped_container_does_nothing() {
    let mut lc = lifecycle();
    served_first(&mut lc, T0);
    assert_eq!(lc.on_alarm(false, T0 + 10 * MIN), vec![Effect::Persist]);
    assert_eq!(lc.record().alarm_ms, None);
}

#[test]
fn the_record_survives_the_object_and_the_rest_starts_fresh() {
    let mut lc = lifecycle();
    let start = start_process("p1", 30 * MIN);
    lc.on_request(&start, false, T0);
    lc.on_ready();
    lc.on_answer(&start, 201, &process_answer("p1", "running"), T0);
    let stored = serde_json::to_string(lc.record()).expect("a record serializes");
    // The object is evicted; a new one loads the record.
    let record: Record = serde_json::from_str(&stored).expect("and reads back");
    let mut again = Lifecycle::new(lc.settings.clone(), record);
    assert_eq!(again.record(), lc.record());
    // The container still runs, but this object never saw its agent answer.
    let (route, effects) = again.on_request(&poll("p1"), true, T0 + MIN);
    assert!(matches!(
        route,
        Route::Agent {
            start: None,
            await_ready: true,
            ..
        }
    ));
    assert_eq!(
        effects,
        vec![Effect::Persist],
        "the alarm armed before eviction still stands"
    );
}

#[test]
fn readiness_is_bounded_per_probe_and_in_all() {
    let mut wait = ReadyWait::new(T0);
    assert_eq!(
        wait.next(T0),
        Some(Probe {
            delay_ms: 0,
            timeout_ms: READY_PROBE_TIMEOUT_MS
        })
    );
    let mut now = T0;
    let mut probes = 1;
    while let Some(p) = wait.next(now) {
        assert_eq!(p.delay_ms, READY_RETRY_MS);
        assert!(p.timeout_ms <= READY_PROBE_TIMEOUT_MS);
        assert!(
            now + p.delay_ms + p.timeout_ms <= T0 + READY_TOTAL_MS,
            "no probe outlives the wait"
        );
        // Each probe hangs until its own bound.
        now += p.delay_ms + p.timeout_ms;
        probes += 1;
        assert!(probes <= READY_PROBES_MAX);
    }
    assert!(now <= T0 + READY_TOTAL_MS);
    // A clock that stands still (probes failing at once) ends by count.
    let mut frozen = ReadyWait::new(T0);
    let count = std::iter::from_fn(|| frozen.next(T0)).count();
    assert_eq!(count as u32, READY_PROBES_MAX);
}

#[test]
fn every_call_has_a_bound() {
    let cases = [
        (
            Call::of("GET", "/v1/processes/p?wait_ms=20000", None),
            20_000 + FORWARD_MARGIN_MS,
        ),
        // The agent caps a long-poll at its own maximum.
        (
            Call::of("GET", "/v1/processes/p?wait_ms=99999999", None),
            25_000 + FORWARD_MARGIN_MS,
        ),
        (Call::of("GET", "/v1/processes/p", None), FORWARD_MARGIN_MS),
        (
            Call::of("POST", "/v1/workspaces", Some("{}")),
            FORWARD_CHECKOUT_MS,
        ),
        (Call::of("GET", "/v1/workspaces/w", None), FORWARD_QUICK_MS),
        (
            Call::of("DELETE", "/v1/sandboxes/s", None),
            FORWARD_DISCARD_MS,
        ),
        (
            Call::of("POST", "/v1/exec", Some(r#"{"timeout_ms":10000}"#)),
            10_000 + 5_000 + FORWARD_MARGIN_MS,
        ),
        (
            Call::of("POST", "/v1/exec", Some(r#"{"timeout_ms":999999999999}"#)),
            3_600_000 + 5_000 + FORWARD_MARGIN_MS,
        ),
        (Call::of("GET", "/healthz", None), FORWARD_QUICK_MS),
        (start_process("p", 30 * MIN), FORWARD_QUICK_MS),
    ];
    for (call, bound) in cases {
        assert_eq!(call.forward_timeout_ms(), bound, "{call:?}");
    }
    assert_eq!(
        start_process("p1", 90_000),
        Call::StartProcess {
            id: "p1".into(),
            timeout_ms: 90_000
        }
    );
    assert_eq!(
        discard(),
        Call::Discard {
            id: "inst-1".into()
        }
    );
    // A body that is not a command is the agent's to refuse, not a start.
    assert_eq!(Call::of("POST", "/v1/processes", Some("nope")), Call::Quick);
}

/// The pool admits at most `max_instances` runs at once, each with its own
/// container: wrangler.toml's `[[containers]]` entry and any POOL_CAPACITY
/// set there must keep that.
#[test]
fn wrangler_toml_keeps_the_pool_within_max_instances() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("wrangler.toml")).expect("wrangler.toml");
    let toml: toml::Value = toml::from_str(&text).expect("wrangler.toml parses");
    let containers = toml["containers"]
        .as_array()
        .expect("a [[containers]] entry");
    let sandbox = containers
        .iter()
        .find(|c| c["class_name"].as_str() == Some("SandboxContainer"))
        .expect("the SandboxContainer's [[containers]] entry");
    let max = sandbox["max_instances"]
        .as_integer()
        .expect("max_instances is set");
    assert_eq!(
        max,
        i64::from(CONTAINER_INSTANCES_MAX),
        "limits.rs mirrors max_instances"
    );
    if let Some(pool) = toml.get("vars").and_then(|v| v.get("POOL_CAPACITY")) {
        let pool: i64 = pool
            .as_str()
            .and_then(|p| p.parse().ok())
            .or(pool.as_integer())
            .expect("a number");
        assert!(
            pool <= max,
            "POOL_CAPACITY {pool} exceeds max_instances {max}"
        );
    }
    // The default capacity (POOL_CAPACITY unset) is checked against
    // CONTAINER_INSTANCES_MAX at compile time in src/worker_glue/container.rs.
}

/// The agent in a container accepts clones only from the configured GitHub
/// (issue 8 item 6): the Worker hands it that one prefix at start.
#[test]
fn a_container_is_told_the_only_git_host_it_may_clone_from() {
    let (mut settings, _) = Settings::new(None, Some(Secret::new(TOKEN.to_owned())));
    settings.git_url = Some("http://172.18.0.1:9123/".into());
    let mut lc = Lifecycle::new(settings, Record::default());
    let (route, _) = lc.on_request(&Call::of("GET", "/v1/workspaces/w", None), false, T0);
    let Route::Agent {
        start: Some(opts), ..
    } = route
    else {
        panic!("expected a start, got {route:?}");
    };
    let prefix = opts
        .env
        .iter()
        .find(|(k, _)| k == GIT_URL_PREFIXES_ENV)
        .map(|(_, v)| v.expose().clone());
    assert_eq!(prefix.as_deref(), Some("http://172.18.0.1:9123/"));
}

/// Every image class and instance type a job may select
/// (`sandbox::image::IMAGE_CLASSES`) is a binding in wrangler.toml to a
/// Durable Object class that has a migration, is declared in the Worker
/// (`sandbox_classes!`) and is a `[[containers]]` entry of that instance
/// type and `max_instances`; and no `[[containers]]` entry is outside the
/// table.
#[test]
fn wrangler_toml_declares_every_image_class_of_the_table() {
    use sluice::sandbox::image::IMAGE_CLASSES;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("wrangler.toml")).expect("wrangler.toml");
    let glue = std::fs::read_to_string(root.join("src/worker_glue/container.rs")).expect("glue");
    let toml: toml::Value = toml::from_str(&text).expect("wrangler.toml parses");
    let list = |key: &str| toml[key].as_array().cloned().unwrap_or_default();
    let bindings = toml["durable_objects"]["bindings"]
        .as_array()
        .expect("bindings")
        .clone();
    let migrated: Vec<String> = list("migrations")
        .iter()
        .flat_map(|m| {
            m["new_sqlite_classes"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|c| c.as_str().map(str::to_owned))
        .collect();
    let containers = list("containers");
    let mut classes = Vec::new();
    for class in IMAGE_CLASSES {
        for t in class.instance_types {
            let binding = bindings
                .iter()
                .find(|b| b["name"].as_str() == Some(t.binding))
                .unwrap_or_else(|| panic!("no binding {} ({}/{})", t.binding, class.name, t.name));
            let name = binding["class_name"].as_str().expect("class_name");
            assert!(
                migrated.iter().any(|m| m == name),
                "{name} has no migration"
            );
            assert!(
                glue.contains(&format!("    {name},\n")),
                "{name} is not in sandbox_classes!"
            );
            let entry = containers
                .iter()
                .find(|c| c["class_name"].as_str() == Some(name))
                .unwrap_or_else(|| panic!("{name} has no [[containers]] entry"));
            assert_eq!(entry["instance_type"].as_str(), Some(t.name), "{name}");
            assert_eq!(
                entry["max_instances"].as_integer(),
                Some(i64::from(CONTAINER_INSTANCES_MAX)),
                "{name}"
            );
            classes.push(name.to_owned());
        }
    }
    for c in &containers {
        let name = c["class_name"].as_str().unwrap_or_default();
        assert!(
            classes.iter().any(|k| k == name),
            "{name} is in no image class"
        );
    }
}
