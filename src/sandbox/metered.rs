//! The sandbox, counted into an instance's `cost::Meter`: a checkout by
//! the time it took, a process by its run time once it is seen finished
//! (once per process id, however often it is polled).

use async_trait::async_trait;

use crate::clock::Clock;
use crate::cost::Meter;

use super::{Checkout, ProcessSpec, ProcessState, Sandbox, SandboxError, WorkspaceState};

pub struct MeteredSandbox<'a> {
    pub inner: &'a dyn Sandbox,
    pub meter: &'a Meter,
    pub clock: &'a dyn Clock,
}

impl MeteredSandbox<'_> {
    fn seen(&self, sandbox: &str, state: &ProcessState) {
        if let (true, Some(ms)) = (state.finished(), state.duration_ms) {
            self.meter
                .process_finished(&format!("{sandbox}/{}", state.id), ms);
        }
    }
}

#[async_trait(?Send)]
impl Sandbox for MeteredSandbox<'_> {
    async fn checkout(&self, sandbox: &str, req: &Checkout<'_>) -> Result<(), SandboxError> {
        let start = self.clock.now_ms();
        let r = self.inner.checkout(sandbox, req).await;
        let ms = (self.clock.now_ms() - start).max(0) as u64;
        self.meter.record(|u| u.sandbox_ms += ms);
        r
    }
    async fn workspace(
        &self,
        sandbox: &str,
        workspace: &str,
    ) -> Result<WorkspaceState, SandboxError> {
        self.inner.workspace(sandbox, workspace).await
    }
    async fn digest(
        &self,
        sandbox: &str,
        workspace: &str,
        files: &[String],
    ) -> Result<String, SandboxError> {
        self.inner.digest(sandbox, workspace, files).await
    }
    async fn start(
        &self,
        sandbox: &str,
        spec: &ProcessSpec<'_>,
    ) -> Result<ProcessState, SandboxError> {
        let state = self.inner.start(sandbox, spec).await?;
        self.seen(sandbox, &state);
        Ok(state)
    }
    async fn process(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
        since: Option<u64>,
    ) -> Result<Option<ProcessState>, SandboxError> {
        let state = self.inner.process(sandbox, id, wait_ms, since).await?;
        if let Some(s) = &state {
            self.seen(sandbox, s);
        }
        Ok(state)
    }
    async fn kill(
        &self,
        sandbox: &str,
        id: &str,
        wait_ms: i64,
    ) -> Result<Option<ProcessState>, SandboxError> {
        let state = self.inner.kill(sandbox, id, wait_ms).await?;
        if let Some(s) = &state {
            self.seen(sandbox, s);
        }
        Ok(state)
    }
    async fn discard(&self, sandbox: &str) -> Result<(), SandboxError> {
        self.inner.discard(sandbox).await
    }
}
