//! The one HTTP error type: every handler's failure becomes a JSON
//! `{"error": {"code", "message"}}` here. 5xx answers hide internals (the
//! caller logs them with the request id); 4xx answers say what was wrong.

use serde_json::json;

#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(400, code, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(404, "not_found", message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, "internal", message)
    }

    pub fn is_server_error(&self) -> bool {
        self.status >= 500
    }

    /// The JSON body. A 5xx names only the request id to quote.
    pub fn body(&self, request_id: &str) -> serde_json::Value {
        let message = if self.status >= 500 && self.status != 503 {
            format!("internal error; quote request id {request_id}")
        } else {
            self.message.clone()
        };
        json!({ "error": { "code": self.code, "message": message, "request_id": request_id } })
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::internal(e.to_string())
    }
}
