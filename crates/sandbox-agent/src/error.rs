//! The agent's one error type: what every handler answers on failure, as
//! `{"error": {"code", "message"}}` with an HTTP status. A leaf: the
//! handlers (`api`), processes and workspaces all return it, so none of
//! them depends on another for it.

/// An error answered as `{"error": {"code", "message"}}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 for a well-formed JSON body whose fields are unacceptable.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_request", message)
    }
}
