//! GitHub API calls, counted into an instance's `cost::Meter`: every
//! request the client sends through this transport is one call (answered
//! or not), which is what the installation's rate limit and the user's
//! wait are spent on.

use async_trait::async_trait;

use crate::cost::Meter;
use crate::net::{HttpRequest, HttpResponse, Transport};

pub struct MeteredTransport<'a> {
    pub inner: &'a dyn Transport,
    pub meter: &'a Meter,
}

#[async_trait(?Send)]
impl Transport for MeteredTransport<'_> {
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, String> {
        self.meter.record(|u| u.github_calls += 1);
        self.inner.send(req).await
    }
}
