//! What a pull-request preview asks of GitHub beyond deployments: the one
//! comment on the pull request that it keeps up to date (created once,
//! then edited in place), over a token of its own with `pull_requests:
//! write` only.
//!
//! Observe before acting (ADR-0001 rule 2,
//! docs/adr/0001-durable-execution-scope.md): the comment is found by its
//! marker before one is created, so a replayed step edits the comment it
//! made instead of posting a second.

use serde::Deserialize;
use serde_json::json;

use super::client::{segs, GitHub, GitHubError};

/// What preview comment calls need, and nothing more.
pub const PREVIEW_PERMISSIONS: &[(&str, &str)] = &[("pull_requests", "write")];
/// Comments read to find the preview's own (GitHub's maximum page). A
/// pull request with more comments before the preview's first one gets a
/// second preview comment rather than a scan without end.
const COMMENTS_PER_PAGE: u32 = 100;

#[derive(Deserialize)]
struct Comment {
    id: u64,
    #[serde(default)]
    body: Option<String>,
}

impl GitHub<'_> {
    async fn preview_auth(&self, installation: u64, repo: &str) -> Result<String, GitHubError> {
        let token = self
            .cached_token(installation, repo, "preview", PREVIEW_PERMISSIONS)
            .await?;
        Ok(format!("token {}", token.expose()))
    }

    /// Writes `body` into the pull request's comment carrying `marker`:
    /// edits it when it is there (`PATCH /repos/{o}/{r}/issues/comments/{id}`),
    /// else creates it. Returns the comment's id.
    pub async fn upsert_comment(
        &self,
        installation: u64,
        repo: &str,
        number: u64,
        marker: &str,
        body: &str,
    ) -> Result<u64, GitHubError> {
        let auth = self.preview_auth(installation, repo).await?;
        let list = format!(
            "/repos/{}/issues/{number}/comments?per_page={COMMENTS_PER_PAGE}",
            segs(repo)
        );
        let comments: Vec<Comment> = self
            .get_with(&auth, &list, "comments")
            .await?
            .unwrap_or_default();
        let text = format!("{body}\n\n<!-- {marker} -->");
        let found = comments
            .iter()
            .find(|c| c.body.as_deref().is_some_and(|b| b.contains(marker)));
        let (method, path) = match found {
            Some(c) => (
                "PATCH",
                format!("/repos/{}/issues/comments/{}", segs(repo), c.id),
            ),
            None => (
                "POST",
                format!("/repos/{}/issues/{number}/comments", segs(repo)),
            ),
        };
        let resp = self
            .call(
                method,
                &path,
                &auth,
                Some(json!({ "body": text }).to_string()),
            )
            .await?;
        let answer: Comment = Self::decode(&Self::expect_ok(resp)?, "comment")?;
        Ok(answer.id)
    }
}

/// What the sweep's reconcile reads of a pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullState {
    pub open: bool,
    /// When GitHub closed it, ms since the epoch (None while open, or a
    /// date GitHub's format does not parse).
    pub closed_ms: Option<i64>,
}

#[derive(Deserialize)]
struct PullAnswer {
    state: String,
    #[serde(default)]
    closed_at: Option<String>,
}

impl GitHub<'_> {
    /// `GET /repos/{o}/{r}/pulls/{n}`: whether it is open, and when it
    /// closed; None when GitHub knows no such pull request.
    pub async fn pull_state(
        &self,
        installation: u64,
        repo: &str,
        number: u64,
    ) -> Result<Option<PullState>, GitHubError> {
        let auth = self.preview_auth(installation, repo).await?;
        let path = format!("/repos/{}/pulls/{number}", segs(repo));
        let found: Option<PullAnswer> = self.get_with(&auth, &path, "pull request").await?;
        Ok(found.map(|p| PullState {
            open: p.state == "open",
            closed_ms: p
                .closed_at
                .as_deref()
                .and_then(super::client::parse_rfc3339_ms),
        }))
    }
}
