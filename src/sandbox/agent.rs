//! The sandbox agent's HTTP API, over a `Transport`.

use async_trait::async_trait;
use serde::Deserialize;

use crate::net::{HttpRequest, HttpResponse, Transport};
use crate::secret::Secret;

use super::{Checkout, ProcessSpec, ProcessState, Sandbox, SandboxError, WorkspaceState};

pub use sluice_sandbox_protocol::SANDBOX_ID_HEADER;
use sluice_sandbox_protocol::{
    self as protocol, CheckoutRequest, ErrorBody, ProcessRequest, PROCESS_NOT_FOUND,
};

pub struct AgentSandbox<'a> {
    pub transport: &'a dyn Transport,
    pub base_url: String,
    pub token: Option<Secret>,
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
        let body = CheckoutRequest {
            workspace: req.workspace.to_owned(),
            repo_url: req.repo_url.to_owned(),
            sha: req.sha.to_owned(),
            token: req.token.map(|t| t.expose().clone()),
            baseline: req.baseline,
        };
        let resp = self
            .call(
                sandbox,
                "POST",
                protocol::PATH_WORKSPACES,
                Some(encode(&body)?),
            )
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
        let path = protocol::workspace_path(workspace);
        let resp = self.call(sandbox, "GET", &path, None).await?;
        if resp.status != 200 {
            return Err(Self::error(&resp));
        }
        Self::decode(&resp)
    }

    async fn digest(
        &self,
        sandbox: &str,
        workspace: &str,
        files: &[String],
    ) -> Result<String, SandboxError> {
        let body = serde_json::to_string(&protocol::DigestRequest {
            files: files.to_vec(),
        })
        .map_err(|e| SandboxError {
            code: "internal".into(),
            message: e.to_string(),
            status: None,
        })?;
        let path = protocol::digest_path(workspace);
        let resp = self.call(sandbox, "POST", &path, Some(body)).await?;
        if resp.status != 200 {
            return Err(Self::error(&resp));
        }
        Self::decode::<protocol::DigestAnswer>(&resp).map(|a| a.sha256)
    }

    async fn start(
        &self,
        sandbox: &str,
        spec: &ProcessSpec<'_>,
    ) -> Result<ProcessState, SandboxError> {
        let body = ProcessRequest {
            id: spec.id.to_owned(),
            workspace: spec.workspace.to_owned(),
            command: spec.command.to_owned(),
            timeout_ms: u64::try_from(spec.timeout_ms).unwrap_or(0),
            env: Some(spec.env.clone()),
            redact: spec.redact.iter().map(|v| (*v).to_owned()).collect(),
            start_by_ms: spec.start_by_ms.and_then(|ms| u64::try_from(ms).ok()),
        };
        let resp = self
            .call(
                sandbox,
                "POST",
                protocol::PATH_PROCESSES,
                Some(encode(&body)?),
            )
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
        since: Option<u64>,
    ) -> Result<Option<ProcessState>, SandboxError> {
        let path = match since {
            Some(since) => protocol::process_since_path(id, wait_of(wait_ms), since),
            None => protocol::process_path(id, wait_of(wait_ms)),
        };
        let resp = self.call(sandbox, "GET", &path, None).await?;
        Self::state_or_unknown(&resp)
    }

    async fn kill(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
    ) -> Result<Option<ProcessState>, SandboxError> {
        let path = protocol::kill_path(id, wait_of(wait_ms));
        let resp = self.call(sandbox, "POST", &path, None).await?;
        Self::state_or_unknown(&resp)
    }

    async fn discard(&self, sandbox: &str) -> Result<(), SandboxError> {
        let resp = self
            .call(
                sandbox,
                "DELETE",
                &protocol::sandbox_path(super::image::instance_of(sandbox)),
                None,
            )
            .await?;
        if resp.status == 200 {
            return Ok(());
        }
        Err(Self::error(&resp))
    }
}

fn encode<T: serde::Serialize>(body: &T) -> Result<String, SandboxError> {
    serde_json::to_string(body).map_err(|e| SandboxError {
        code: "bad_request".into(),
        message: e.to_string(),
        status: None,
    })
}

/// A wait in ms as the agent takes it: never negative, at most its cap.
fn wait_of(wait_ms: i64) -> u64 {
    u64::try_from(wait_ms)
        .unwrap_or(0)
        .min(protocol::WAIT_MS_MAX)
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
