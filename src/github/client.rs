//! The REST calls Sluice makes, over a `Transport` (the Worker's fetch).
//! Every installation token is scoped to one repository and the permissions
//! its use needs: the API token (cached until shortly before it expires)
//! to check runs and contents; the deployments token (cached the same way,
//! `deployments.rs`) to deployments alone; a checkout's (never cached,
//! revoked once the checkout is done) to reading the repository. Path
//! segments are percent-encoded, so a branch or file name cannot reshape a
//! request.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::clock::Clock;
use crate::limits::TOKEN_REFRESH_MARGIN_MS;
use crate::net::{HttpRequest, HttpResponse, Transport};
use crate::secret::Secret;

use super::app::{app_jwt, Rs256Signer};

#[derive(Debug, Clone, PartialEq)]
pub struct GitHubError {
    /// HTTP status, or None when the request never got an answer.
    pub status: Option<u16>,
    pub message: String,
    /// Retrying cannot help: Sluice is misconfigured (no App key) or GitHub
    /// gave an answer that will not change (not a file, not JSON we know).
    pub permanent: bool,
}

impl GitHubError {
    pub fn network(message: impl Into<String>) -> GitHubError {
        GitHubError {
            status: None,
            message: message.into(),
            permanent: false,
        }
    }

    pub fn permanent(message: impl Into<String>) -> GitHubError {
        GitHubError {
            status: None,
            message: message.into(),
            permanent: true,
        }
    }

    /// Network faults, rate limits and 5xx are worth retrying; other 4xx
    /// answers will not change.
    pub fn retryable(&self) -> bool {
        if self.permanent {
            return false;
        }
        match self.status {
            None => true,
            Some(s) => s == 429 || s >= 500 || s == 403 && self.message.contains("rate limit"),
        }
    }
}

impl fmt::Display for GitHubError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "GitHub answered {s}: {}", self.message),
            None => write!(f, "GitHub unreachable: {}", self.message),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckConclusion {
    Success,
    Failure,
    Neutral,
    Cancelled,
    TimedOut,
    ActionRequired,
    Skipped,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CheckRunUpdate {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conclusion: Option<CheckConclusion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<CheckOutput>,
    /// Buttons on the check run (`requested_action` when pressed); an
    /// empty list removes them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<CheckAction>>,
}

/// A check run button: GitHub allows a 20-character label and identifier
/// and a 40-character description.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckAction {
    pub label: &'static str,
    pub description: &'static str,
    pub identifier: &'static str,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckOutput {
    pub title: String,
    pub summary: String,
}

/// A cached token's key: API URL, installation, repository and the
/// permission set it was issued for.
type TokenKey = (String, u64, String, &'static str);

thread_local! {
    /// Cached tokens by `TokenKey`, with their expiry in ms. Per isolate: a
    /// cold isolate asks once more, which is harmless.
    static TOKENS: RefCell<HashMap<TokenKey, (Secret, i64)>> = RefCell::new(HashMap::new());
}

/// What Sluice's own calls need: check runs, and `.sluice.toml` and branch
/// heads (contents). GitHub adds metadata:read to every token.
/// A pull request's head (pull_requests:read) tells a check whether a
/// newer head superseded it; a decider's permission needs metadata:read.
/// Deployments have a token of their own (`deployments.rs`).
pub const API_PERMISSIONS: &[(&str, &str)] = &[
    ("checks", "write"),
    ("contents", "read"),
    ("pull_requests", "read"),
];
/// A checkout reads the repository, nothing more.
pub const CHECKOUT_PERMISSIONS: &[(&str, &str)] = &[("contents", "read")];

/// Characters kept as they are in a path segment or query value: RFC 3986's
/// unreserved set. Everything else (`/`, `?`, `#`, `%`, `..`'s dots are
/// safe) is percent-encoded.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One path segment (or query value), percent-encoded.
pub(super) fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

/// A `/`-separated path (a file path, `owner/name`, a branch with slashes)
/// with each segment percent-encoded.
pub(super) fn segs(path: &str) -> String {
    path.split('/').map(seg).collect::<Vec<_>>().join("/")
}

/// The most files GitHub's compare lists ("Compare two commits": the
/// response includes a maximum of 300 files); a list this long may be cut.
pub const COMPARE_FILES_MAX: usize = 300;

/// What a comparison says changed.
#[derive(Debug, Clone, PartialEq)]
pub struct ChangedFiles {
    pub files: Vec<String>,
    /// False when GitHub may have left files out.
    pub complete: bool,
}

/// `GET /repos/{o}/{r}/compare/{base}...{head}`: how `head` relates to
/// `base`, and what it changes from their merge base.
pub(super) fn compare_path(repo: &str, base: &str, head: &str) -> String {
    format!(
        "/repos/{}/compare/{}...{}",
        segs(repo),
        seg(base),
        seg(head)
    )
}

/// The repository's name without its owner: what `repositories` takes.
fn repo_name(repo: &str) -> &str {
    repo.rsplit_once('/').map_or(repo, |(_, name)| name)
}

/// A check run to create: this App's, for one commit, matched again by
/// its `external_id` (the instance id).
pub struct NewCheckRun<'a> {
    pub name: &'a str,
    pub sha: &'a str,
    pub external_id: &'a str,
    pub details_url: &'a str,
    /// "queued" or "in_progress".
    pub status: &'static str,
}

pub struct GitHub<'a> {
    pub transport: &'a dyn Transport,
    pub signer: &'a dyn Rs256Signer,
    pub clock: &'a dyn Clock,
    pub api_url: String,
    pub app_id: Option<String>,
    /// PKCS#8 DER of the App's private key, or why there is none.
    pub key_der: Result<Secret<Vec<u8>>, String>,
}

#[derive(Deserialize)]
struct TokenAnswer {
    token: String,
    expires_at: String,
}

#[derive(Deserialize)]
struct Content {
    #[serde(default)]
    encoding: Option<String>,
    #[serde(default)]
    content: Option<String>,
}

#[derive(Deserialize)]
struct PullAnswer {
    head: RefObject,
    /// `open` or `closed`.
    #[serde(default)]
    state: Option<String>,
}

#[derive(Deserialize)]
struct PermissionAnswer {
    permission: String,
}

#[derive(Deserialize)]
struct RefAnswer {
    object: RefObject,
}

#[derive(Deserialize)]
struct RefObject {
    sha: String,
}

#[derive(Deserialize)]
struct CheckRunAnswer {
    id: u64,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    conclusion: Option<String>,
    #[serde(default)]
    external_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    /// The App that created it.
    #[serde(default)]
    app: Option<AppRef>,
}

#[derive(Deserialize)]
struct AppRef {
    id: u64,
}

#[derive(Deserialize)]
struct CheckRunList {
    check_runs: Vec<CheckRunAnswer>,
}

/// A repository as `GET /repos/{o}/{r}` answers it (the fields Sluice uses).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RepositoryInfo {
    pub full_name: String,
    pub default_branch: String,
}

#[derive(Deserialize)]
struct ErrorAnswer {
    message: String,
}

impl<'a> GitHub<'a> {
    fn url(&self, path: &str) -> String {
        format!("{}{}", self.api_url.trim_end_matches('/'), path)
    }

    pub(super) async fn call(
        &self,
        method: &'static str,
        path: &str,
        auth: &str,
        body: Option<String>,
    ) -> Result<HttpResponse, GitHubError> {
        let mut headers = vec![
            (
                "Accept".to_owned(),
                "application/vnd.github+json".to_owned(),
            ),
            ("X-GitHub-Api-Version".to_owned(), "2022-11-28".to_owned()),
            ("User-Agent".to_owned(), "sluice".to_owned()),
            ("Authorization".to_owned(), auth.to_owned()),
        ];
        if body.is_some() {
            headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
        }
        let req = HttpRequest {
            method,
            url: self.url(path),
            headers,
            body,
        };
        self.transport.send(req).await.map_err(GitHubError::network)
    }

    /// A 2xx answer, or the error GitHub gave.
    pub(super) fn expect_ok(resp: HttpResponse) -> Result<String, GitHubError> {
        if (200..300).contains(&resp.status) {
            return Ok(resp.body);
        }
        let message = serde_json::from_str::<ErrorAnswer>(&resp.body)
            .map(|e| e.message)
            .unwrap_or_else(|_| resp.body.chars().take(200).collect());
        Err(GitHubError {
            status: Some(resp.status),
            message,
            permanent: false,
        })
    }

    pub(super) fn decode<T: for<'de> Deserialize<'de>>(
        body: &str,
        what: &str,
    ) -> Result<T, GitHubError> {
        serde_json::from_str(body)
            .map_err(|e| GitHubError::permanent(format!("unexpected {what} answer: {e}")))
    }

    /// The API token for `repo`, from the cache while it has more than 5
    /// minutes left.
    pub async fn installation_token(
        &self,
        installation: u64,
        repo: &str,
    ) -> Result<Secret, GitHubError> {
        self.cached_token(installation, repo, "api", API_PERMISSIONS)
            .await
    }

    /// A token for `permissions` (named `purpose` in the cache), from the
    /// cache while it has more than 5 minutes left.
    pub(super) async fn cached_token(
        &self,
        installation: u64,
        repo: &str,
        purpose: &'static str,
        permissions: &[(&str, &str)],
    ) -> Result<Secret, GitHubError> {
        let now = self.clock.now_ms();
        let cache_key = (self.api_url.clone(), installation, repo.to_owned(), purpose);
        let cached = TOKENS.with(|t| t.borrow().get(&cache_key).cloned());
        if let Some((token, expires_ms)) = cached {
            if expires_ms - now > TOKEN_REFRESH_MARGIN_MS {
                return Ok(token);
            }
        }
        let (token, expires_ms) = self.issue_token(installation, repo, permissions).await?;
        TOKENS.with(|t| {
            t.borrow_mut()
                .insert(cache_key, (token.clone(), expires_ms))
        });
        Ok(token)
    }

    /// A fresh token that can only read `repo`, for one checkout: revoke it
    /// (`revoke_token`) when the checkout is done.
    pub async fn checkout_token(
        &self,
        installation: u64,
        repo: &str,
    ) -> Result<Secret, GitHubError> {
        let (token, _) = self
            .issue_token(installation, repo, CHECKOUT_PERMISSIONS)
            .await?;
        Ok(token)
    }

    /// Revokes a token (`DELETE /installation/token`, authenticated by
    /// itself). A token already revoked or expired (401) is as good.
    pub async fn revoke_token(&self, token: &Secret) -> Result<(), GitHubError> {
        let auth = format!("token {}", token.expose());
        let resp = self
            .call("DELETE", "/installation/token", &auth, None)
            .await?;
        if resp.status == 401 {
            return Ok(());
        }
        Self::expect_ok(resp).map(|_| ())
    }

    /// `Bearer <App JWT>`, signed with the App's key.
    async fn app_auth(&self) -> Result<String, GitHubError> {
        let key = self
            .key_der
            .as_ref()
            .map_err(|m| GitHubError::permanent(m.clone()))?;
        let app_id = self
            .app_id
            .as_deref()
            .ok_or_else(|| GitHubError::permanent("GITHUB_APP_ID is not set"))?;
        let now = self.clock.now_ms();
        let jwt = app_jwt(self.signer, key.expose(), app_id, now / 1000)
            .await
            .map_err(|m| GitHubError::network(format!("cannot sign the App JWT: {m}")))?;
        Ok(format!("Bearer {jwt}"))
    }

    /// The App's installation on `repo` (`GET /repos/{o}/{r}/installation`),
    /// or None when the App is not installed there.
    pub async fn repo_installation(&self, repo: &str) -> Result<Option<u64>, GitHubError> {
        #[derive(Deserialize)]
        struct Installation {
            id: u64,
        }
        let auth = self.app_auth().await?;
        let path = format!("/repos/{}/installation", segs(repo));
        let resp = self.call("GET", &path, &auth, None).await?;
        if resp.status == 404 {
            return Ok(None);
        }
        let found: Installation = Self::decode(&Self::expect_ok(resp)?, "installation")?;
        Ok(Some(found.id))
    }

    /// The App as GitHub knows it (`GET /app`): its slug. Proves the key
    /// signs JWTs GitHub accepts (the setup self-check).
    pub async fn app_slug(&self) -> Result<String, GitHubError> {
        #[derive(Deserialize)]
        struct App {
            slug: String,
        }
        let auth = self.app_auth().await?;
        let resp = self.call("GET", "/app", &auth, None).await?;
        let app: App = Self::decode(&Self::expect_ok(resp)?, "app")?;
        Ok(app.slug)
    }

    /// `POST /app/installations/{id}/access_tokens` for one repository and
    /// `permissions`: the token and its expiry.
    async fn issue_token(
        &self,
        installation: u64,
        repo: &str,
        permissions: &[(&str, &str)],
    ) -> Result<(Secret, i64), GitHubError> {
        let auth = self.app_auth().await?;
        let path = format!("/app/installations/{installation}/access_tokens");
        let permissions: serde_json::Map<String, serde_json::Value> = permissions
            .iter()
            .map(|(name, level)| ((*name).to_owned(), json!(level)))
            .collect();
        let body = json!({ "repositories": [repo_name(repo)], "permissions": permissions });
        let resp = self
            .call("POST", &path, &auth, Some(body.to_string()))
            .await?;
        let answer: TokenAnswer = Self::decode(&Self::expect_ok(resp)?, "access token")?;
        let expires_ms = parse_rfc3339_ms(&answer.expires_at).ok_or_else(|| {
            GitHubError::network(format!("bad expires_at {:?}", answer.expires_at))
        })?;
        Ok((Secret::new(answer.token), expires_ms))
    }

    async fn auth(&self, installation: u64, repo: &str) -> Result<String, GitHubError> {
        Ok(format!(
            "token {}",
            self.installation_token(installation, repo).await?.expose()
        ))
    }

    /// A GET with the installation's token: the decoded answer, or None on
    /// 404.
    async fn get<T: for<'de> Deserialize<'de>>(
        &self,
        installation: u64,
        repo: &str,
        path: &str,
        what: &str,
    ) -> Result<Option<T>, GitHubError> {
        let auth = self.auth(installation, repo).await?;
        self.get_with(&auth, path, what).await
    }

    /// A GET with `auth`: the decoded answer, or None on 404.
    pub(super) async fn get_with<T: for<'de> Deserialize<'de>>(
        &self,
        auth: &str,
        path: &str,
        what: &str,
    ) -> Result<Option<T>, GitHubError> {
        let resp = self.call("GET", path, auth, None).await?;
        if resp.status == 404 {
            return Ok(None);
        }
        Self::decode(&Self::expect_ok(resp)?, what).map(Some)
    }

    /// A file's text at a ref, or None when the file does not exist there.
    pub async fn file_at(
        &self,
        installation: u64,
        repo: &str,
        path: &str,
        git_ref: &str,
    ) -> Result<Option<String>, GitHubError> {
        let path_q = format!(
            "/repos/{}/contents/{}?ref={}",
            segs(repo),
            segs(path),
            seg(git_ref)
        );
        let Some(content) = self
            .get::<Content>(installation, repo, &path_q, "contents")
            .await?
        else {
            return Ok(None);
        };
        let (Some("base64"), Some(b64)) = (content.encoding.as_deref(), content.content) else {
            return Err(GitHubError::permanent(format!("{path} is not a file")));
        };
        let cleaned: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
        let bytes = STANDARD
            .decode(cleaned)
            .map_err(|e| GitHubError::permanent(format!("{path}: bad base64 ({e})")))?;
        String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| GitHubError::permanent(format!("{path} is not UTF-8 text")))
    }

    /// The repository as GitHub names it (`full_name`, in its own letter
    /// case) and its default branch; None for one this installation cannot see.
    pub async fn repository(
        &self,
        installation: u64,
        repo: &str,
    ) -> Result<Option<RepositoryInfo>, GitHubError> {
        let path = format!("/repos/{}", segs(repo));
        self.get::<RepositoryInfo>(installation, repo, &path, "repository")
            .await
    }

    /// Whether `sha` is on `branch`: its head, or an ancestor of it
    /// (`GET /repos/{o}/{r}/compare/{branch}...{sha}` is `identical` or
    /// `behind`). An unknown commit (404) is not on it.
    pub async fn is_on_branch(
        &self,
        installation: u64,
        repo: &str,
        branch: &str,
        sha: &str,
    ) -> Result<bool, GitHubError> {
        #[derive(Deserialize)]
        struct Comparison {
            status: String,
        }
        let path = compare_path(repo, branch, sha);
        let found = self
            .get::<Comparison>(installation, repo, &path, "comparison")
            .await?;
        Ok(found.is_some_and(|c| c.status == "identical" || c.status == "behind"))
    }

    /// The files `head` changes against `base` (GitHub's three-dot compare:
    /// from their merge base), renamed files under both names; None when
    /// either commit is unknown (404). `complete` is false when GitHub's
    /// list may be cut short (it lists at most `COMPARE_FILES_MAX`).
    pub async fn changed_files(
        &self,
        installation: u64,
        repo: &str,
        base: &str,
        head: &str,
    ) -> Result<Option<ChangedFiles>, GitHubError> {
        #[derive(Deserialize)]
        struct File {
            filename: String,
            #[serde(default)]
            previous_filename: Option<String>,
        }
        #[derive(Deserialize)]
        struct Comparison {
            /// Absent: GitHub did not list the files (not "none changed").
            #[serde(default)]
            files: Option<Vec<File>>,
        }
        let path = compare_path(repo, base, head);
        let Some(found) = self
            .get::<Comparison>(installation, repo, &path, "comparison")
            .await?
        else {
            return Ok(None);
        };
        let Some(listed) = found.files else {
            return Ok(Some(ChangedFiles {
                files: Vec::new(),
                complete: false,
            }));
        };
        let complete = listed.len() < COMPARE_FILES_MAX;
        let files = listed
            .into_iter()
            .flat_map(|f| std::iter::once(f.filename).chain(f.previous_filename))
            .collect();
        Ok(Some(ChangedFiles { files, complete }))
    }

    /// The commit a branch points at, or None when the branch is gone.
    pub async fn branch_head(
        &self,
        installation: u64,
        repo: &str,
        branch: &str,
    ) -> Result<Option<String>, GitHubError> {
        let path = format!("/repos/{}/git/ref/heads/{}", segs(repo), segs(branch));
        let Some(r) = self
            .get::<RefAnswer>(installation, repo, &path, "ref")
            .await?
        else {
            return Ok(None);
        };
        Ok(Some(r.object.sha))
    }

    /// A pull request's head commit, or None when there is no such pull
    /// request.
    pub async fn pull_head(
        &self,
        installation: u64,
        repo: &str,
        number: u64,
    ) -> Result<Option<String>, GitHubError> {
        let path = format!("/repos/{}/pulls/{number}", segs(repo));
        let pull = self
            .get::<PullAnswer>(installation, repo, &path, "pull request")
            .await?;
        Ok(pull.map(|p| p.head.sha))
    }

    /// Whether a pull request is open now; None when GitHub does not know it.
    pub async fn pull_is_open(
        &self,
        installation: u64,
        repo: &str,
        number: u64,
    ) -> Result<Option<bool>, GitHubError> {
        let path = format!("/repos/{}/pulls/{number}", segs(repo));
        let pull = self
            .get::<PullAnswer>(installation, repo, &path, "pull request")
            .await?;
        Ok(pull.map(|p| p.state.as_deref() == Some("open")))
    }

    /// A user's permission on the repository (`admin`, `write`, `read`,
    /// `none`); None for a user GitHub does not know.
    pub async fn permission_of(
        &self,
        installation: u64,
        repo: &str,
        login: &str,
    ) -> Result<Option<String>, GitHubError> {
        let path = format!(
            "/repos/{}/collaborators/{}/permission",
            segs(repo),
            seg(login)
        );
        let answer = self
            .get::<PermissionAnswer>(installation, repo, &path, "permission")
            .await?;
        Ok(answer.map(|a| a.permission))
    }

    /// Finds the check run this instance created earlier (observe before
    /// acting: a replayed create must not make a second check run).
    pub async fn find_check_run(
        &self,
        installation: u64,
        repo: &str,
        sha: &str,
        name: &str,
        external_id: &str,
    ) -> Result<Option<u64>, GitHubError> {
        Ok(self
            .find_check_run_state(installation, repo, sha, name, external_id)
            .await?
            .map(|(id, _)| id))
    }

    /// The check run this instance created, with its status (`queued`,
    /// `in_progress`, `completed`).
    pub async fn find_check_run_state(
        &self,
        installation: u64,
        repo: &str,
        sha: &str,
        name: &str,
        external_id: &str,
    ) -> Result<Option<(u64, String)>, GitHubError> {
        let found = self
            .find_check_run_answer(installation, repo, sha, name, external_id)
            .await?;
        Ok(found.map(|c| (c.id, c.status.unwrap_or_default())))
    }

    /// The conclusion of this App's check run `name` for instance
    /// `external_id` at `sha`: None while there is no such run or it has
    /// not completed (`success`, `failure`, `skipped`, ... once it has).
    pub async fn check_run_conclusion(
        &self,
        installation: u64,
        repo: &str,
        sha: &str,
        name: &str,
        external_id: &str,
    ) -> Result<Option<String>, GitHubError> {
        let found = self
            .find_check_run_answer(installation, repo, sha, name, external_id)
            .await?;
        Ok(found
            .filter(|c| c.status.as_deref() == Some("completed"))
            .and_then(|c| c.conclusion))
    }

    async fn find_check_run_answer(
        &self,
        installation: u64,
        repo: &str,
        sha: &str,
        name: &str,
        external_id: &str,
    ) -> Result<Option<CheckRunAnswer>, GitHubError> {
        // Only this App's check runs: another App's run of the same name and
        // external id is not ours to update (GitHub filters by `app_id`; the
        // answer is checked again below).
        let app_id = self.app_id.as_deref().unwrap_or_default();
        let path = format!(
            "/repos/{}/commits/{}/check-runs?check_name={}&app_id={}&filter=all",
            segs(repo),
            seg(sha),
            seg(name),
            seg(app_id)
        );
        let Some(list) = self
            .get::<CheckRunList>(installation, repo, &path, "check runs")
            .await?
        else {
            return Err(GitHubError::permanent(format!("no commit {sha} in {repo}")));
        };
        Ok(list.check_runs.into_iter().find(|c| {
            c.external_id.as_deref() == Some(external_id)
                && c.name.as_deref().is_none_or(|n| n == name)
                && c.app.as_ref().is_some_and(|a| a.id.to_string() == app_id)
        }))
    }

    /// Creates a queued check run, or returns the one this instance already
    /// created.
    pub async fn ensure_check_run(
        &self,
        installation: u64,
        repo: &str,
        sha: &str,
        name: &str,
        external_id: &str,
        details_url: &str,
    ) -> Result<u64, GitHubError> {
        if let Some(id) = self
            .find_check_run(installation, repo, sha, name, external_id)
            .await?
        {
            return Ok(id);
        }
        let new = NewCheckRun {
            name,
            sha,
            external_id,
            details_url,
            status: "queued",
        };
        self.create_check_run(installation, repo, &new).await
    }

    /// Creates a check run, whatever exists: the caller knows it made none
    /// (`Ctx::may_have_run`) or looked first. One call.
    pub async fn create_check_run(
        &self,
        installation: u64,
        repo: &str,
        new: &NewCheckRun<'_>,
    ) -> Result<u64, GitHubError> {
        let auth = self.auth(installation, repo).await?;
        let body = json!({
            "name": new.name,
            "head_sha": new.sha,
            "external_id": new.external_id,
            "details_url": new.details_url,
            "status": new.status,
        });
        let resp = self
            .call(
                "POST",
                &format!("/repos/{}/check-runs", segs(repo)),
                &auth,
                Some(body.to_string()),
            )
            .await?;
        let created: CheckRunAnswer = Self::decode(&Self::expect_ok(resp)?, "check run")?;
        Ok(created.id)
    }

    pub async fn update_check_run(
        &self,
        installation: u64,
        repo: &str,
        id: u64,
        update: &CheckRunUpdate,
    ) -> Result<(), GitHubError> {
        let auth = self.auth(installation, repo).await?;
        let body =
            serde_json::to_string(update).map_err(|e| GitHubError::network(e.to_string()))?;
        let resp = self
            .call(
                "PATCH",
                &format!("/repos/{}/check-runs/{id}", segs(repo)),
                &auth,
                Some(body),
            )
            .await?;
        Self::expect_ok(resp).map(|_| ())
    }
}

/// Parses GitHub's `YYYY-MM-DDTHH:MM:SSZ` (fractions allowed) to ms.
pub fn parse_rfc3339_ms(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let time = time.split('.').next()?;
    let mut t = time.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (hh, mm, ss) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    // Days from civil date (proleptic Gregorian), H. Hinnant's algorithm.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_githubs_timestamps() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_ms("2016-07-11T22:14:10Z"),
            Some(1_468_275_250_000)
        );
        assert_eq!(
            parse_rfc3339_ms("2024-02-29T12:00:00.123Z"),
            Some(1_709_208_000_000)
        );
        assert_eq!(parse_rfc3339_ms("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
    }

    #[test]
    fn retryable_statuses() {
        let e = |s| GitHubError {
            status: s,
            message: String::new(),
            permanent: false,
        };
        assert!(e(None).retryable());
        assert!(e(Some(502)).retryable());
        assert!(e(Some(429)).retryable());
        assert!(!e(Some(422)).retryable());
        assert!(!e(Some(404)).retryable());
        assert!(!GitHubError::permanent("no key").retryable());
    }
}
