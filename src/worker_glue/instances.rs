//! The client of run instances: every request to a `RunInstance` Durable
//! Object goes through here (create, poke, event, command, purge), and the
//! waker other instances use to send one an event.

use js_sys::Promise;
use serde_json::{json, Value};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;
use worker::Env;

use crate::engine::{CreateRequest, Created, InstanceId};
use crate::http::ApiError;
use crate::runs::{Spawner, Termination, Terminator, Waker};

use super::bindings;

/// What an instance's object answers (404) for a command to an id it holds
/// no instance of.
pub const NO_INSTANCE: &str = "no such instance";

/// The operations a `RunInstance` serves, and their names: written once
/// for the client and the object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceOp {
    /// Create (idempotent by id) and run.
    Create,
    /// The sweep: create if the object lost its create, and run.
    Poke,
    Event,
    Command,
    /// Wipe a finished instance's storage (retention).
    Purge,
}

impl InstanceOp {
    pub const ALL: [InstanceOp; 5] = [
        InstanceOp::Create,
        InstanceOp::Poke,
        InstanceOp::Event,
        InstanceOp::Command,
        InstanceOp::Purge,
    ];

    pub fn name(self) -> &'static str {
        match self {
            InstanceOp::Create => "create",
            InstanceOp::Poke => "poke",
            InstanceOp::Event => "event",
            InstanceOp::Command => "command",
            InstanceOp::Purge => "purge",
        }
    }

    pub fn parse(name: &str) -> Option<InstanceOp> {
        InstanceOp::ALL.into_iter().find(|op| op.name() == name)
    }
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(e.to_string())
}

/// A Durable Object stub as the runtime hands it out, called by RPC: the
/// object's `serve` (`instance::RunInstance::serve_rpc`). A `fetch` would
/// build a `Request` here and a `Response` there, and stream both bodies.
#[wasm_bindgen]
extern "C" {
    type RawStub;
    #[wasm_bindgen(method, catch)]
    fn serve(this: &RawStub, op: &str, body: &str) -> Result<Promise, JsValue>;
    #[wasm_bindgen(method, catch)]
    fn fetch(this: &RawStub, url: &str, init: &js_sys::Object) -> Result<Promise, JsValue>;

    /// The `Response` a stub's `fetch` resolves to.
    type RawResponse;
    #[wasm_bindgen(method, getter)]
    fn status(this: &RawResponse) -> u16;
    #[wasm_bindgen(method, catch)]
    fn text(this: &RawResponse) -> Result<Promise, JsValue>;
}

fn js_error(e: JsValue) -> ApiError {
    internal(super::platform::js_err(e))
}

/// Sends an operation to an instance's Durable Object: its status and JSON.
pub async fn request(
    env: &Env,
    id: &InstanceId,
    op: InstanceOp,
    body: &Value,
) -> Result<(u16, Value), ApiError> {
    let ns = env
        .durable_object(bindings::RUN_INSTANCE)
        .map_err(internal)?;
    let stub: RawStub = ns
        .id_from_name(id.as_str())
        .and_then(|i| i.get_stub())
        .map_err(internal)?
        .into_rpc();
    let body = body.to_string();
    let sent = stub.serve(op.name(), &body).map_err(js_error)?;
    let answer = match JsFuture::from(sent).await {
        Ok(answer) => answer,
        Err(e) => {
            let message = super::platform::js_err(e);
            if crate::net::rpc_method_missing(&message) {
                return request_by_fetch(&stub, op, body).await;
            }
            return Err(internal(message));
        }
    };
    let pair: js_sys::Array = answer.dyn_into().map_err(js_error)?;
    let (status, text) = (pair.get(0).as_f64(), pair.get(1).as_string());
    let (Some(status), Some(text)) = (status, text) else {
        return Err(internal(format!(
            "instance {id} {op:?}: not a [status, body] answer"
        )));
    };
    let value: Value = serde_json::from_str(&text).map_err(internal)?;
    Ok((status as u16, value))
}

/// The operation sent as the release before RPC sent it, a POST to
/// `/<name>`: for an object still running that release during a deploy
/// (`net::rpc_method_missing`). This release's objects serve it too.
async fn request_by_fetch(
    stub: &RawStub,
    op: InstanceOp,
    body: String,
) -> Result<(u16, Value), ApiError> {
    let init = js_sys::Object::new();
    for (k, v) in [("method", "POST"), ("body", body.as_str())] {
        js_sys::Reflect::set(&init, &k.into(), &v.into()).map_err(js_error)?;
    }
    let url = format!("https://instance/{}", op.name());
    let sent = stub.fetch(&url, &init).map_err(js_error)?;
    let resp: RawResponse = JsFuture::from(sent)
        .await
        .map_err(js_error)?
        .unchecked_into();
    let text = JsFuture::from(resp.text().map_err(js_error)?)
        .await
        .map_err(js_error)?
        .as_string()
        .unwrap_or_default();
    let value: Value = serde_json::from_str(&text).map_err(internal)?;
    Ok((resp.status(), value))
}

/// An operation whose only good answer is 200.
async fn expect_ok(
    env: &Env,
    id: &InstanceId,
    op: InstanceOp,
    body: &Value,
) -> Result<Value, ApiError> {
    let (status, value) = request(env, id, op, body).await?;
    // The object kept the instance but D1 has no row of it yet (ADR-0018,
    // `docs/adr/0018-a-single-creates-row-rides-its-first-pass.md`):
    // the caller may create it again and wait.
    if status == 503 && matches!(op, InstanceOp::Create | InstanceOp::Poke) {
        let why = value
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("unavailable");
        return Err(ApiError::new(
            503,
            "index_row_pending",
            format!("instance {id}: {why}"),
        ));
    }
    if status != 200 {
        return Err(ApiError::internal(format!(
            "instance {id} {op:?} answered {status}: {value}"
        )));
    }
    Ok(value)
}

/// Creates an instance (or finds it: the id is the idempotency key).
pub async fn create(env: &Env, create: &CreateRequest) -> Result<Created, ApiError> {
    let value = expect_ok(env, &create.id(), InstanceOp::Create, &json!(create)).await?;
    serde_json::from_value(value).map_err(internal)
}

/// Pokes an instance (the sweep): creates it if its object lost the create,
/// and runs a pass if it is runnable.
pub async fn poke(env: &Env, create: &CreateRequest) -> Result<(), ApiError> {
    expect_ok(env, &create.id(), InstanceOp::Poke, &json!(create)).await?;
    Ok(())
}

pub async fn purge(env: &Env, id: &InstanceId) -> Result<(), ApiError> {
    expect_ok(env, id, InstanceOp::Purge, &json!({})).await?;
    Ok(())
}

/// Sends an event; the object answers 202, 404 (no such instance), 409
/// (finished) or 413 (too large).
pub async fn event(
    env: &Env,
    id: &InstanceId,
    event_type: &str,
    payload: &Value,
) -> Result<(u16, Value), ApiError> {
    let body = json!({ "type": event_type, "payload": payload });
    request(env, id, InstanceOp::Event, &body).await
}

/// Terminates instances for a run (a newer pull request head ends the
/// older head's check).
#[async_trait::async_trait(?Send)]
impl Terminator for InstanceWaker {
    async fn terminate(&self, instance_id: &str) -> Result<Termination, String> {
        let id = InstanceId::parse(instance_id).map_err(|e| e.to_string())?;
        let body = json!(crate::engine::Command::Terminate);
        let (status, value) = request(&self.env, &id, InstanceOp::Command, &body)
            .await
            .map_err(|e| e.message)?;
        // 409: it ended meanwhile, which is as good.
        match status {
            s if s < 300 || s == 409 => Ok(Termination::Ended),
            // The object's own answer for an id it holds no instance of
            // (`command_error`), not any 404 (an unknown operation).
            404 if value.get("error").and_then(Value::as_str) == Some(NO_INSTANCE) => {
                Ok(Termination::NoInstance)
            }
            _ => Err(format!("terminate {instance_id}: {status} {value}")),
        }
    }
}

/// Starts a child instance a run needs: created in its own object.
#[async_trait::async_trait(?Send)]
impl Spawner for InstanceWaker {
    async fn spawn(&self, create: &CreateRequest) -> Result<(), String> {
        self::create(&self.env, create)
            .await
            .map(|_| ())
            .map_err(|e| e.message)
    }
}

/// Wakes an instance by sending it an event through its Durable Object.
pub struct InstanceWaker {
    pub env: Env,
}

#[async_trait::async_trait(?Send)]
impl Waker for InstanceWaker {
    async fn wake(&self, instance_id: &str, event_type: &str) -> Result<(), String> {
        self.send(instance_id, event_type, &json!({})).await
    }

    async fn send(
        &self,
        instance_id: &str,
        event_type: &str,
        payload: &Value,
    ) -> Result<(), String> {
        let id = InstanceId::parse(instance_id).map_err(|e| e.to_string())?;
        let (status, value) = event(&self.env, &id, event_type, payload)
            .await
            .map_err(|e| e.message)?;
        if status < 300 {
            Ok(())
        } else {
            Err(format!("wake {instance_id}: {status} {value}"))
        }
    }
}
