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

/// Whether a failed call to a Durable Object's RPC method never reached
/// the object's code: workerd refuses it because the object's class has
/// no such method, or is no RPC receiver at all. That is an object still
/// running an older release during a deploy (gradual deployments route a
/// newer Worker to it); its caller may then send the same operation by
/// `fetch`, which that release serves, without it running twice. Any
/// other failure may have happened inside the object, and is not retried.
pub fn rpc_method_missing(message: &str) -> bool {
    // workerd's own words: the first for a class without the method, the
    // second for one not extending `DurableObject`.
    const REFUSALS: [&str; 2] = [
        "The RPC receiver does not implement the method",
        "The receiving Durable Object does not support RPC",
    ];
    REFUSALS.iter().any(|r| message.contains(r))
}

#[cfg(test)]
mod tests {
    use super::rpc_method_missing;

    #[test]
    fn only_a_refusal_before_the_object_ran_is_a_missing_method() {
        for missing in [
            "TypeError: The RPC receiver does not implement the method \"serve\".",
            "The receiving Durable Object does not support RPC, because its class was not \
             declared with `extends DurableObject`.",
        ] {
            assert!(rpc_method_missing(missing), "{missing}");
        }
        for reached in [
            "Network connection lost.",
            "Durable Object reset because its code was updated.",
            "RuntimeError: unreachable",
            "Error: the RPC receiver failed",
            "",
        ] {
            assert!(!rpc_method_missing(reached), "{reached}");
        }
    }
}
