//! `sandbox::Archives` in the Worker: a job's artifacts streamed between
//! the sandbox agent (local, or in its container through the container's
//! object) and R2. The agent's answer body goes to R2's `put` as it
//! arrives (a response body with a Content-Length is a stream R2 takes),
//! and R2's object body goes to the agent's `PUT` the same way: no archive
//! is ever whole in the Worker's memory.

use wasm_bindgen::JsValue;
use worker::{
    Bucket, Env, Fetch, Headers, HttpMetadata, Method, Request, RequestInit, Response, ResponseBody,
};

use crate::sandbox::{image, AgentTime, Archived, Archives, SandboxError, Snapshotted};
use crate::secret::Secret;
use sluice_sandbox_protocol::{
    self as protocol, ArchiveRequest, ErrorBody, SnapshotRequest, ARCHIVE_FILES_HEADER,
    ARCHIVE_SHA256_HEADER, SANDBOX_ID_HEADER, SNAPSHOT_AGENT_HEADER, SNAPSHOT_FULL_HEADER,
    SNAPSHOT_TAKEN_HEADER,
};

/// Where the agent is: a URL (the local agent), or each sandbox's own
/// container object.
pub enum Reach {
    Url(String),
    Containers(Env),
}

pub struct WorkerArchives {
    pub reach: Reach,
    pub token: Option<Secret>,
    pub bucket: Option<Bucket>,
}

fn failed(code: &str, message: impl Into<String>) -> SandboxError {
    SandboxError {
        code: code.into(),
        message: message.into(),
        status: None,
    }
}

impl WorkerArchives {
    fn bucket(&self) -> Result<&Bucket, SandboxError> {
        self.bucket
            .as_ref()
            .ok_or_else(|| failed("no_r2", "the R2 binding LOGS is not configured"))
    }

    fn headers(&self, sandbox: &str, content_type: &str) -> Result<Headers, SandboxError> {
        let headers = Headers::new();
        let set = |k: &str, v: &str| {
            headers
                .set(k, v)
                .map_err(|e| failed("internal", e.to_string()))
        };
        set("Content-Type", content_type)?;
        set(SANDBOX_ID_HEADER, sandbox)?;
        if let Some(t) = &self.token {
            set("Authorization", &format!("Bearer {}", t.expose()))?;
        }
        Ok(headers)
    }

    /// Sends `init` to the agent's archive path of `workspace` in `sandbox`.
    async fn send(
        &self,
        sandbox: &str,
        path: &str,
        init: &RequestInit,
    ) -> Result<Response, SandboxError> {
        let unreachable = |e: worker::Error| failed("unreachable", e.to_string());
        match &self.reach {
            Reach::Url(base) => {
                let url = format!("{}{path}", base.trim_end_matches('/'));
                let req = Request::new_with_init(&url, init).map_err(unreachable)?;
                Fetch::Request(req).send().await.map_err(unreachable)
            }
            Reach::Containers(env) => {
                let binding = image::binding_of(sandbox).map_err(|m| failed("invalid", m))?;
                let ns = env.durable_object(binding).map_err(unreachable)?;
                let stub = ns
                    .id_from_name(sandbox)
                    .and_then(|id| id.get_stub())
                    .map_err(unreachable)?;
                let req = Request::new_with_init(&format!("http://sandbox{path}"), init)
                    .map_err(unreachable)?;
                stub.fetch_with_request(req).await.map_err(unreachable)
            }
        }
    }
}

/// The agent's (or the container object's) JSON error as a sandbox error.
async fn refused(mut resp: Response) -> SandboxError {
    let status = resp.status_code();
    let text = resp.text().await.unwrap_or_default();
    match serde_json::from_str::<ErrorBody>(&text) {
        Ok(e) => SandboxError {
            code: e.error.code,
            message: e.error.message,
            status: Some(status),
        },
        Err(_) => SandboxError {
            code: "bad_answer".into(),
            message: format!(
                "the sandbox answered {status}: {}",
                text.chars().take(200).collect::<String>()
            ),
            status: Some(status),
        },
    }
}

fn header_number(resp: &Response, name: &str) -> Option<u64> {
    resp.headers().get(name).ok().flatten()?.parse().ok()
}

impl WorkerArchives {
    /// Asks the agent for an archive (of matching files, or a snapshot).
    async fn pack(
        &self,
        sandbox: &str,
        workspace: &str,
        request: &ArchiveRequest,
    ) -> Result<Response, SandboxError> {
        let body = serde_json::to_string(request).map_err(|e| failed("internal", e.to_string()))?;
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_headers(self.headers(sandbox, "application/json")?)
            .with_body(Some(JsValue::from_str(&body)));
        let resp = self
            .send(sandbox, &protocol::archive_path(workspace), &init)
            .await?;
        if resp.status_code() != 200 {
            return Err(refused(resp).await);
        }
        Ok(resp)
    }

    /// Streams the agent's archive into R2 at `key`; what it is, and the
    /// answer's headers.
    async fn store(&self, resp: Response, key: &str) -> Result<(Archived, Headers), SandboxError> {
        let bucket = self.bucket()?;
        let headers = resp.headers().clone();
        let files = header_number(&resp, ARCHIVE_FILES_HEADER).unwrap_or(0);
        let bytes = header_number(&resp, "Content-Length")
            .ok_or_else(|| failed("bad_answer", "the archive came without its length"))?;
        let sha256 = headers
            .get(ARCHIVE_SHA256_HEADER)
            .ok()
            .flatten()
            .ok_or_else(|| failed("bad_answer", "the archive came without its SHA-256"))?;
        let stream = match resp.body() {
            ResponseBody::Stream(s) => s.clone(),
            _ => return Err(failed("bad_answer", "the archive came without a body")),
        };
        let metadata = HttpMetadata {
            content_type: Some("application/gzip".into()),
            ..HttpMetadata::default()
        };
        bucket
            .put(key, worker::Data::ReadableStream(stream))
            .http_metadata(metadata)
            .execute()
            .await
            .map_err(|e| SandboxError {
                code: "r2_put_failed".into(),
                message: e.to_string(),
                status: Some(503),
            })?;
        let archived = Archived {
            bytes,
            files,
            sha256,
        };
        Ok((archived, headers))
    }
}

#[async_trait::async_trait(?Send)]
impl Archives for WorkerArchives {
    async fn save(
        &self,
        sandbox: &str,
        workspace: &str,
        patterns: &[String],
        key: &str,
    ) -> Result<Archived, SandboxError> {
        let request = ArchiveRequest {
            patterns: patterns.to_vec(),
            snapshot: None,
        };
        let resp = self.pack(sandbox, workspace, &request).await?;
        self.store(resp, key).await.map(|(archived, _)| archived)
    }

    async fn snapshot(
        &self,
        sandbox: &str,
        workspace: &str,
        since: Option<&AgentTime>,
        key: &str,
    ) -> Result<Snapshotted, SandboxError> {
        let request = ArchiveRequest {
            patterns: Vec::new(),
            snapshot: Some(SnapshotRequest {
                since: since.cloned(),
                since_checkout: since.is_none(),
            }),
        };
        let resp = self.pack(sandbox, workspace, &request).await?;
        let (archived, headers) = self.store(resp, key).await?;
        let taken = AgentTime {
            agent: headers
                .get(SNAPSHOT_AGENT_HEADER)
                .ok()
                .flatten()
                .ok_or_else(|| failed("bad_answer", "the snapshot came without its agent"))?,
            ms: headers
                .get(SNAPSHOT_TAKEN_HEADER)
                .ok()
                .flatten()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| failed("bad_answer", "the snapshot came without its time"))?,
        };
        let full = headers.get(SNAPSHOT_FULL_HEADER).ok().flatten().as_deref() != Some("false");
        Ok(Snapshotted {
            archived,
            taken,
            full,
        })
    }

    async fn restore(
        &self,
        sandbox: &str,
        workspace: &str,
        key: &str,
        sha256: &str,
        last_of: Option<&str>,
    ) -> Result<u64, SandboxError> {
        let object = self
            .bucket()?
            .get(key)
            .execute()
            .await
            .map_err(|e| SandboxError {
                code: "r2_get_failed".into(),
                message: e.to_string(),
                status: Some(503),
            })?
            .ok_or_else(|| failed("artifact_gone", format!("{key} is no longer stored")))?;
        let length = object.size();
        let stream = match object.body().map(|b| b.response_body()) {
            Some(Ok(ResponseBody::Stream(s))) => s,
            _ => return Err(failed("artifact_gone", format!("{key} has no body"))),
        };
        let headers = self.headers(sandbox, "application/gzip")?;
        headers
            .set("Content-Length", &length.to_string())
            .map_err(|e| failed("internal", e.to_string()))?;
        let mut init = RequestInit::new();
        init.with_method(Method::Put)
            .with_headers(headers)
            .with_body(Some(stream.into()));
        let last = match last_of {
            Some(process) => format!("&prune=true&after={process}"),
            None => String::new(),
        };
        let path = format!(
            "{}?sha256={sha256}{last}",
            protocol::archive_path(workspace)
        );
        let mut resp = self.send(sandbox, &path, &init).await?;
        if resp.status_code() != 200 {
            return Err(refused(resp).await);
        }
        let unpacked: serde_json::Value = resp
            .json()
            .await
            .map_err(|e| failed("bad_answer", e.to_string()))?;
        Ok(unpacked["files"].as_u64().unwrap_or(0))
    }
}
