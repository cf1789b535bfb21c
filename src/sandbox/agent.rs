//! The sandbox agent's HTTP API, over a `Transport`.

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::net::{HttpRequest, HttpResponse, Transport};
use crate::secret::Secret;

use super::{Checkout, ProcessSpec, ProcessState, Sandbox, SandboxError, WorkspaceState};

/// Names the sandbox a request is for, for a transport that reaches one
/// agent per sandbox (`worker_glue::container::ContainerTransport`); the
/// agent itself ignores it.
pub const SANDBOX_ID_HEADER: &str = "X-Sluice-Sandbox";

/// The agent's error code for a process id it does not know.
const PROCESS_NOT_FOUND: &str = "process_not_found";

pub struct AgentSandbox<'a> {
    pub transport: &'a dyn Transport,
    pub base_url: String,
    pub token: Option<Secret>,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    code: String,
    message: String,
}

impl AgentSandbox<'_> {
    async fn call(
        &self,
        sandbox: &str,
        method: &'static str,
        path: &str,
        body: Option<String>,
    ) -> Result<HttpResponse, SandboxError> {
        let mut headers = vec![
            ("Content-Type".to_owned(), "application/json".to_owned()),
            (SANDBOX_ID_HEADER.to_owned(), sandbox.to_owned()),
        ];
        if let Some(t) = &self.token {
            headers.push(("Authorization".to_owned(), format!("Bearer {}", t.expose())));
        }
        let url = format!("{}{}", self.base_url.trim_end_matches('/'), path);
        self.transport
            .send(HttpRequest {
                method,
                url,
                headers,
                body,
            })
            .await
            .map_err(|m| SandboxError {
                code: "unreachable".into(),
                message: m,
                status: None,
            })
    }

    fn error(resp: &HttpResponse) -> SandboxError {
        match serde_json::from_str::<ErrorBody>(&resp.body) {
            Ok(e) => SandboxError {
                code: e.error.code,
                message: e.error.message,
                status: Some(resp.status),
            },
            Err(_) => SandboxError {
                code: "bad_answer".into(),
                message: resp.body.chars().take(200).collect(),
                status: Some(resp.status),
            },
        }
    }

    fn decode<T: for<'de> Deserialize<'de>>(resp: &HttpResponse) -> Result<T, SandboxError> {
        serde_json::from_str(&resp.body).map_err(|e| SandboxError {
            code: "bad_answer".into(),
            message: format!("unexpected agent answer: {e}"),
            status: Some(resp.status),
        })
    }
}

#[async_trait(?Send)]
impl Sandbox for AgentSandbox<'_> {
    async fn checkout(&self, sandbox: &str, req: &Checkout<'_>) -> Result<(), SandboxError> {
        let body = json!({
            "workspace": req.workspace,
            "repo_url": req.repo_url,
            "sha": req.sha,
            "token": req.token.map(|t| t.expose().as_str()),
        });
        let resp = self
            .call(sandbox, "POST", "/v1/workspaces", Some(body.to_string()))
            .await?;
        if resp.status == 201 || resp.status == 200 {
            return Ok(());
        }
        Err(Self::error(&resp))
    }

    async fn workspace(
        &self,
        sandbox: &str,
        workspace: &str,
    ) -> Result<WorkspaceState, SandboxError> {
        let path = format!("/v1/workspaces/{workspace}");
        let resp = self.call(sandbox, "GET", &path, None).await?;
        if resp.status != 200 {
            return Err(Self::error(&resp));
        }
        Self::decode(&resp)
    }

    async fn start(
        &self,
        sandbox: &str,
        spec: &ProcessSpec<'_>,
    ) -> Result<ProcessState, SandboxError> {
        let body = serde_json::to_string(spec).map_err(|e| SandboxError {
            code: "bad_request".into(),
            message: e.to_string(),
            status: None,
        })?;
        let resp = self
            .call(sandbox, "POST", "/v1/processes", Some(body))
            .await?;
        if resp.status == 201 || resp.status == 200 {
            return Self::decode(&resp);
        }
        Err(Self::error(&resp))
    }

    async fn process(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
    ) -> Result<Option<ProcessState>, SandboxError> {
        let path = format!("/v1/processes/{id}?wait_ms={wait_ms}");
        let resp = self.call(sandbox, "GET", &path, None).await?;
        Self::state_or_unknown(&resp)
    }

    async fn kill(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
    ) -> Result<Option<ProcessState>, SandboxError> {
        let path = format!("/v1/processes/{id}/kill?wait_ms={wait_ms}");
        let resp = self.call(sandbox, "POST", &path, None).await?;
        Self::state_or_unknown(&resp)
    }
}

impl AgentSandbox<'_> {
    /// A process answer: its state, or None when the agent does not know
    /// the process. Only the agent's own `process_not_found` means that: any
    /// other 404 (an agent without the endpoint) must not pass for "not
    /// running".
    fn state_or_unknown(resp: &HttpResponse) -> Result<Option<ProcessState>, SandboxError> {
        match resp.status {
            200 => Self::decode(resp).map(Some),
            404 => {
                let e = Self::error(resp);
                if e.code == PROCESS_NOT_FOUND {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
            _ => Err(Self::error(resp)),
        }
    }
}
