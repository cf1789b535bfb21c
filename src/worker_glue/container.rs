//! `SandboxContainer`: the production sandbox. One Durable Object (and so
//! one Cloudflare Container) per run instance, running the sandbox agent
//! image (`crates/sandbox-agent/Dockerfile`). It starts the container on
//! first use and forwards the agent's HTTP API to it; `ContainerTransport`
//! is how the Worker reaches it. Under `wrangler dev` there is no Docker,
//! `state.container()` is None, and every call answers 503
//! `containers_unavailable` (the run reports an infrastructure fault).

use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use worker::{
    durable_object, ContainerStartupOptions, Delay, DurableObject, Env, Request, Response, Result,
    State,
};

use crate::net::{HttpRequest, HttpResponse, Transport};
use crate::sandbox::agent::SANDBOX_ID_HEADER;

use super::bindings;
use super::platform::worker_request;

/// The port the agent listens on inside the image (see its Dockerfile).
const AGENT_PORT: u16 = 8080;
/// A fresh container takes a moment before the agent listens: retry the
/// connection this many times, this far apart (about 10 s in all, well
/// inside a step's timeout).
const BOOT_ATTEMPTS_MAX: u32 = 40;
const BOOT_RETRY_MS: u64 = 250;

#[durable_object]
pub struct SandboxContainer {
    state: State,
    env: Env,
}

fn unavailable(message: &str) -> Result<Response> {
    Ok(Response::from_json(
        &json!({ "error": { "code": "containers_unavailable", "message": message } }),
    )?
    .with_status(503))
}

impl DurableObject for SandboxContainer {
    fn new(state: State, env: Env) -> Self {
        SandboxContainer { state, env }
    }

    async fn fetch(&self, req: Request) -> Result<Response> {
        let Some(container) = self.state.container() else {
            return unavailable("this runtime has no Cloudflare Containers (local development uses SANDBOX_BACKEND=agent)");
        };
        if !container.running() {
            let mut options = ContainerStartupOptions::new();
            if let Some(token) = bindings::text(&self.env, bindings::SANDBOX_AGENT_TOKEN) {
                options.add_env(bindings::SANDBOX_AGENT_TOKEN, &token);
            }
            // Checkouts clone from GitHub.
            options.enable_internet(true);
            container.start(Some(options))?;
        }
        let port = container.get_tcp_port(AGENT_PORT)?;
        let mut last = String::new();
        for _ in 0..BOOT_ATTEMPTS_MAX {
            match port.fetch_request(req.clone()?).await {
                Ok(resp) => return Ok(resp),
                Err(e) => {
                    last = e.to_string();
                    Delay::from(Duration::from_millis(BOOT_RETRY_MS)).await;
                }
            }
        }
        unavailable(&format!("the sandbox agent did not answer: {last}"))
    }
}

/// Reaches the sandbox agent inside the container a request names
/// (`SANDBOX_ID_HEADER`: a run instance's id names its container).
pub struct ContainerTransport {
    pub env: Env,
}

#[async_trait(?Send)]
impl Transport for ContainerTransport {
    async fn send(&self, req: HttpRequest) -> std::result::Result<HttpResponse, String> {
        let sandbox_id = req
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(SANDBOX_ID_HEADER))
            .map(|(_, v)| v.clone())
            .ok_or_else(|| {
                format!("a sandbox request must name its sandbox ({SANDBOX_ID_HEADER})")
            })?;
        let ns = self
            .env
            .durable_object(bindings::SANDBOX)
            .map_err(|e| e.to_string())?;
        let stub = ns
            .id_from_name(&sandbox_id)
            .and_then(|id| id.get_stub())
            .map_err(|e| e.to_string())?;
        let mut resp = stub
            .fetch_with_request(worker_request(req)?)
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status_code();
        let body = resp.text().await.map_err(|e| e.to_string())?;
        Ok(HttpResponse { status, body })
    }
}
