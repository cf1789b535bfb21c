//! JSON bodies the `/v1/` API accepts: `POST /v1/executions` (one
//! `sluice::engine::CreateRequest` or an array of them), operator commands
//! (`sluice::engine::Command`, and the restart body `{"from_step": ...}`),
//! and event payloads (`POST /v1/executions/{id}/events/{type}`).
//!
//! Input: the body. The Worker reads it with `Request::text`, which decodes
//! UTF-8 leniently (invalid sequences become U+FFFD); so does the target.
//!
//! The dispatch itself (`worker_glue::router`, compiled only for wasm) is
//! mirrored here step by step: parse a `serde_json::Value`, then an array
//! of at most `BATCH_CREATE_MAX` items or one object, each decoded with
//! `serde_json::from_value::<CreateRequest>`.
//!
//! Asserts, besides "no panic":
//! - a create request, a command and an event payload each survive the JSON
//!   trip to the instance's Durable Object (floats within serde_json's
//!   default precision);
//! - decoding straight from text and through a `Value` (what the handler
//!   does) agree whenever the straight decoding succeeds;
//! - every decoded create request names a valid instance id.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use sluice::engine::{Command, CreateRequest, InstanceId};
use sluice_fuzz::same_json;

/// Instances one batch may create (`worker_glue::router`).
const BATCH_CREATE_MAX: usize = 100;

fn check_create(c: &CreateRequest) {
    assert!(InstanceId::parse(c.id().as_str()).is_ok(), "{:?}", c.key);
    let text = serde_json::to_string(c).expect("a create serializes");
    let back: CreateRequest = serde_json::from_str(&text).expect("a create reads back");
    let (a, b) = (json!(c), json!(back));
    assert!(same_json(&a, &b), "{a} became {b}");
}

fuzz_target!(|data: &[u8]| {
    let body = String::from_utf8_lossy(data);
    let body = body.as_ref();

    // POST /v1/executions, decoded straight from text.
    let direct = serde_json::from_str::<CreateRequest>(body);
    if let Ok(c) = &direct {
        check_create(c);
    }

    // The same body as the handler reads it.
    let Ok(value) = serde_json::from_str::<Value>(body) else {
        assert!(direct.is_err(), "a create request that is not JSON");
        return;
    };
    match &value {
        Value::Array(items) if items.len() <= BATCH_CREATE_MAX => {
            for item in items {
                if let Ok(c) = serde_json::from_value::<CreateRequest>(item.clone()) {
                    check_create(&c);
                }
            }
        }
        Value::Array(_) => {}
        single => {
            let via_value = serde_json::from_value::<CreateRequest>(single.clone());
            if let Ok(c) = &via_value {
                check_create(c);
            }
            if let Ok(c) = &direct {
                let v = via_value.expect("the handler refuses what decodes from text");
                assert!(same_json(&json!(c), &json!(v)));
            }
        }
    }

    // An operator command as the Worker forwards it to the instance.
    if let Ok(cmd) = serde_json::from_str::<Command>(body) {
        let text = serde_json::to_string(&cmd).expect("a command serializes");
        assert_eq!(serde_json::from_str::<Command>(&text).ok(), Some(cmd));
    }
    // The restart body `{"from_step": "name"}` is decoded by a private type
    // of `worker_glue::router`; the nearest public shape is the restart
    // command it becomes.
    if let Value::Object(fields) = &value {
        let mut tagged = fields.clone();
        tagged.insert("command".into(), json!("restart"));
        if let Ok(cmd) = serde_json::from_value::<Command>(Value::Object(tagged)) {
            assert!(matches!(cmd, Command::Restart { .. }), "{cmd:?}");
        }
    }

    // An event payload travels to the instance wrapped with its type.
    let wrapped = json!({ "type": "deploy-confirm", "payload": value });
    let text = serde_json::to_string(&wrapped).expect("an event serializes");
    let back: Value = serde_json::from_str(&text).expect("an event reads back");
    assert!(same_json(&wrapped, &back), "{wrapped} became {back}");
});
