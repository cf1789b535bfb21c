//! Object storage for logs and large step outputs (R2 in the Worker).
//! ADR-0001 rule 2: results over 1 MiB go here and the step returns a key.
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md)

use async_trait::async_trait;

#[async_trait(?Send)]
pub trait Blobs {
    async fn put_text(&self, key: &str, text: &str) -> Result<(), String>;
    async fn get_text(&self, key: &str) -> Result<Option<String>, String>;
    /// Keys starting with `prefix`, at most `limit`, in key order.
    async fn list(&self, prefix: &str, limit: u32) -> Result<Vec<String>, String>;
    async fn delete(&self, key: &str) -> Result<(), String>;
}
