//! Outgoing HTTP behind an interface: the Worker's `fetch` in production,
//! anything in tests. GitHub and the sandbox agent are both reached this way.

use async_trait::async_trait;

pub struct HttpRequest {
    pub method: &'static str,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Option<String>,
}

pub struct HttpResponse {
    pub status: u16,
    pub body: String,
}

#[async_trait(?Send)]
pub trait Transport {
    /// Sends the request; `Err` only when no answer came back.
    async fn send(&self, req: HttpRequest) -> Result<HttpResponse, String>;
}
