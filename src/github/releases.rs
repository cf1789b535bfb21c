//! What the `release-notes` run asks of GitHub: tags, a comparison of two
//! commits, pull requests (read, open, update, close, comment on) and the
//! branch and file of an approval pull request, and releases.
//!
//! Every call that writes uses a token of its own, scoped to the one
//! repository with `contents: write` (the branch, the file, the release)
//! and `pull_requests: write` (the pull request and its comments), cached
//! like the API token; nothing else Sluice does holds write access to a
//! repository's contents.
//!
//! Observe before acting (ADR-0001 rule 2): a branch that exists is kept,
//! a file with the same text is not committed again, an open pull request
//! from the branch is updated rather than doubled, a comment carrying its
//! marker is not posted twice, and a release is found by its tag before one
//! is created.
//! (ADR-0001: docs/adr/0001-durable-execution-scope.md)

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::client::{seg, segs, GitHub, GitHubError};

/// What release-notes calls need, and nothing more.
pub const RELEASE_PERMISSIONS: &[(&str, &str)] =
    &[("contents", "write"), ("pull_requests", "write")];
/// Tags read per page (GitHub's maximum).
const TAGS_PER_PAGE: u32 = 100;
/// Pages of tags read to find the previous one: 500 tags, far more than a
/// repository cuts between two releases; an older one is not looked for.
pub const TAG_PAGES_MAX: u32 = 5;
/// Commits one comparison lists: GitHub's own cap for `compare` (it
/// answers at most 250 commits whatever the page size).
pub const COMPARE_COMMITS_MAX: usize = 250;
/// Comments read to find one already posted (GitHub's maximum page): a run
/// posts a handful on its pull request.
const COMMENTS_PER_PAGE: u32 = 100;

/// Tag objects followed from a tag's ref to its commit: a tag of a tag is
/// legal git, and rare; no release tool makes a chain of four, and a longer
/// one is refused rather than followed without end.
pub const TAG_PEEL_DEPTH_MAX: u32 = 4;

/// A git object a ref or a tag object names (`object: {sha, type}`).
#[derive(Deserialize)]
struct GitObject {
    sha: String,
    #[serde(rename = "type")]
    kind: String,
}

/// A tag and the commit it names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tag {
    pub name: String,
    pub sha: String,
}

/// A commit of a comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitInfo {
    pub sha: String,
    pub message: String,
    /// The GitHub user it is attributed to, when GitHub knows one.
    pub author: Option<String>,
}

/// A pull request as the notes and the decision read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullInfo {
    pub number: u64,
    pub title: String,
    pub author: Option<String>,
    pub labels: Vec<String>,
    pub state: String,
    pub merged: bool,
}

#[derive(Deserialize)]
struct TagAnswer {
    name: String,
    commit: ShaAnswer,
}

#[derive(Deserialize)]
struct ShaAnswer {
    sha: String,
}

#[derive(Deserialize)]
struct Login {
    login: String,
}

#[derive(Deserialize)]
struct CompareAnswer {
    #[serde(default)]
    commits: Vec<CompareCommit>,
}

#[derive(Deserialize)]
struct CompareCommit {
    sha: String,
    commit: CommitMessage,
    #[serde(default)]
    author: Option<Login>,
}

#[derive(Deserialize)]
struct CommitMessage {
    message: String,
}

#[derive(Deserialize)]
struct LabelAnswer {
    name: String,
}

#[derive(Deserialize)]
struct PullAnswer {
    number: u64,
    #[serde(default)]
    title: String,
    #[serde(default)]
    user: Option<Login>,
    #[serde(default)]
    labels: Vec<LabelAnswer>,
    #[serde(default)]
    state: String,
    #[serde(default)]
    merged: bool,
    #[serde(default)]
    merged_at: Option<String>,
}

impl From<PullAnswer> for PullInfo {
    fn from(p: PullAnswer) -> PullInfo {
        PullInfo {
            number: p.number,
            title: p.title,
            author: p.user.map(|u| u.login),
            labels: p.labels.into_iter().map(|l| l.name).collect(),
            state: p.state,
            merged: p.merged || p.merged_at.is_some(),
        }
    }
}

#[derive(Deserialize)]
struct FileAnswer {
    sha: String,
    #[serde(default)]
    content: Option<String>,
}

/// How a release is published: as a pre-release, and whether it takes
/// "Latest" from the one GitHub shows now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseKind {
    pub prerelease: bool,
    pub latest: bool,
}

#[derive(Deserialize)]
struct IdAnswer {
    id: u64,
}

#[derive(Deserialize)]
struct CommentAnswer {
    #[serde(default)]
    body: Option<String>,
}

/// What an approval pull request is.
pub struct NewPull<'a> {
    /// The branch it proposes (created from `base_sha` when missing).
    pub branch: &'a str,
    pub base: &'a str,
    pub base_sha: &'a str,
    pub path: &'a str,
    pub content: &'a str,
    pub title: &'a str,
    pub body: &'a str,
}

impl GitHub<'_> {
    async fn release_auth(&self, installation: u64, repo: &str) -> Result<String, GitHubError> {
        let token = self
            .cached_token(installation, repo, "release", RELEASE_PERMISSIONS)
            .await?;
        Ok(format!("token {}", token.expose()))
    }

    /// A write with the release token: the answer's body, or GitHub's error.
    async fn release_call(
        &self,
        installation: u64,
        repo: &str,
        method: &'static str,
        path: &str,
        body: serde_json::Value,
    ) -> Result<(u16, String), GitHubError> {
        let auth = self.release_auth(installation, repo).await?;
        let resp = self
            .call(method, path, &auth, Some(body.to_string()))
            .await?;
        let status = resp.status;
        Self::expect_ok(resp).map(|b| (status, b))
    }

    /// The repository's tags, newest first as GitHub lists them, up to
    /// `TAG_PAGES_MAX` pages.
    pub async fn tags(&self, installation: u64, repo: &str) -> Result<Vec<Tag>, GitHubError> {
        let auth = self.release_auth(installation, repo).await?;
        let mut tags = Vec::new();
        for page in 1..=TAG_PAGES_MAX {
            let path = format!(
                "/repos/{}/tags?per_page={TAGS_PER_PAGE}&page={page}",
                segs(repo)
            );
            let found: Vec<TagAnswer> = self
                .get_with(&auth, &path, "tags")
                .await?
                .ok_or_else(|| GitHubError::permanent(format!("no repository {repo}")))?;
            let last = found.len() < TAGS_PER_PAGE as usize;
            tags.extend(found.into_iter().map(|t| Tag {
                name: t.name,
                sha: t.commit.sha,
            }));
            if last {
                break;
            }
        }
        Ok(tags)
    }

    /// The commits reachable from `head` and not from `base`, oldest first
    /// (at most `COMPARE_COMMITS_MAX`, GitHub's cap).
    pub async fn compare(
        &self,
        installation: u64,
        repo: &str,
        base: &str,
        head: &str,
    ) -> Result<Vec<CommitInfo>, GitHubError> {
        let auth = self.release_auth(installation, repo).await?;
        let path = format!(
            "{}?per_page={COMPARE_COMMITS_MAX}",
            super::client::compare_path(repo, base, head)
        );
        let answer: CompareAnswer = self
            .get_with(&auth, &path, "comparison")
            .await?
            .ok_or_else(|| GitHubError::permanent(format!("cannot compare {base}...{head}")))?;
        Ok(answer
            .commits
            .into_iter()
            .take(COMPARE_COMMITS_MAX)
            .map(|c| CommitInfo {
                sha: c.sha,
                message: c.commit.message,
                author: c.author.map(|a| a.login),
            })
            .collect())
    }

    /// A pull request, or None when there is none of that number.
    pub async fn pull(
        &self,
        installation: u64,
        repo: &str,
        number: u64,
    ) -> Result<Option<PullInfo>, GitHubError> {
        let auth = self.release_auth(installation, repo).await?;
        let path = format!("/repos/{}/pulls/{number}", segs(repo));
        let found: Option<PullAnswer> = self.get_with(&auth, &path, "pull request").await?;
        Ok(found.map(PullInfo::from))
    }

    /// Opens the approval pull request, or updates the open one from its
    /// branch: the branch exists, carries `content` at `path`, and one open
    /// pull request proposes it. Returns its number.
    pub async fn open_pull(
        &self,
        installation: u64,
        repo: &str,
        p: &NewPull<'_>,
    ) -> Result<(u64, String), GitHubError> {
        self.ensure_branch(installation, repo, p.branch, p.base_sha)
            .await?;
        self.put_file(installation, repo, p.branch, p.path, p.content, p.title)
            .await?;
        // What a merge must merge to approve these notes: the branch as
        // Sluice left it (a push to it after this changes what is merged).
        let head = self
            .branch_head(installation, repo, p.branch)
            .await?
            .ok_or_else(|| GitHubError::permanent(format!("branch {} vanished", p.branch)))?;
        let owner = repo.split_once('/').map_or(repo, |(o, _)| o);
        let auth = self.release_auth(installation, repo).await?;
        let list = format!(
            "/repos/{}/pulls?head={}&state=open",
            segs(repo),
            seg(&format!("{owner}:{}", p.branch))
        );
        let open: Vec<PullAnswer> = self
            .get_with(&auth, &list, "pulls")
            .await?
            .unwrap_or_default();
        if let Some(pull) = open.first() {
            let path = format!("/repos/{}/pulls/{}", segs(repo), pull.number);
            let body = json!({ "title": p.title, "body": p.body });
            self.release_call(installation, repo, "PATCH", &path, body)
                .await?;
            return Ok((pull.number, head));
        }
        let path = format!("/repos/{}/pulls", segs(repo));
        let body = json!({ "title": p.title, "head": p.branch, "base": p.base, "body": p.body });
        let (_, text) = self
            .release_call(installation, repo, "POST", &path, body)
            .await?;
        let created: PullAnswer = Self::decode(&text, "pull request")?;
        Ok((created.number, head))
    }

    /// Creates `branch` at `sha` unless it exists.
    async fn ensure_branch(
        &self,
        installation: u64,
        repo: &str,
        branch: &str,
        sha: &str,
    ) -> Result<(), GitHubError> {
        if self
            .branch_head(installation, repo, branch)
            .await?
            .is_some()
        {
            return Ok(());
        }
        let path = format!("/repos/{}/git/refs", segs(repo));
        let body = json!({ "ref": format!("refs/heads/{branch}"), "sha": sha });
        match self
            .release_call(installation, repo, "POST", &path, body)
            .await
        {
            // Created by a replayed attempt whose answer was lost.
            Err(e) if e.status == Some(422) && e.message.contains("already exists") => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Commits `content` at `path` on `branch` unless it is there already.
    async fn put_file(
        &self,
        installation: u64,
        repo: &str,
        branch: &str,
        path: &str,
        content: &str,
        message: &str,
    ) -> Result<(), GitHubError> {
        let auth = self.release_auth(installation, repo).await?;
        let at = format!(
            "/repos/{}/contents/{}?ref={}",
            segs(repo),
            segs(path),
            seg(branch)
        );
        let existing: Option<FileAnswer> = self.get_with(&auth, &at, "contents").await?;
        let encoded = STANDARD.encode(content);
        let same = existing
            .as_ref()
            .and_then(|f| f.content.as_deref())
            .map(|c| {
                let cleaned: String = c.chars().filter(|ch| !ch.is_whitespace()).collect();
                cleaned == encoded
            });
        if same == Some(true) {
            return Ok(());
        }
        let mut body = json!({ "message": message, "content": encoded, "branch": branch });
        if let Some(f) = existing {
            body["sha"] = json!(f.sha);
        }
        let put = format!("/repos/{}/contents/{}", segs(repo), segs(path));
        self.release_call(installation, repo, "PUT", &put, body)
            .await
            .map(|_| ())
    }

    /// Closes a pull request (one already closed stays closed).
    pub async fn close_pull(
        &self,
        installation: u64,
        repo: &str,
        number: u64,
    ) -> Result<(), GitHubError> {
        let path = format!("/repos/{}/pulls/{number}", segs(repo));
        self.release_call(
            installation,
            repo,
            "PATCH",
            &path,
            json!({ "state": "closed" }),
        )
        .await
        .map(|_| ())
    }

    /// Comments on a pull request unless a comment containing `marker` is
    /// there already (a replayed step posts nothing twice).
    pub async fn comment_once(
        &self,
        installation: u64,
        repo: &str,
        number: u64,
        marker: &str,
        body: &str,
    ) -> Result<(), GitHubError> {
        let auth = self.release_auth(installation, repo).await?;
        let list = format!(
            "/repos/{}/issues/{number}/comments?per_page={COMMENTS_PER_PAGE}",
            segs(repo)
        );
        let comments: Vec<CommentAnswer> = self
            .get_with(&auth, &list, "comments")
            .await?
            .unwrap_or_default();
        if comments
            .iter()
            .any(|c| c.body.as_deref().is_some_and(|b| b.contains(marker)))
        {
            return Ok(());
        }
        let path = format!("/repos/{}/issues/{number}/comments", segs(repo));
        let text = format!("{body}\n\n<!-- {marker} -->");
        self.release_call(installation, repo, "POST", &path, json!({ "body": text }))
            .await
            .map(|_| ())
    }

    /// The commit `tag` names now, or None when it is gone. The ref
    /// (`GET /repos/{o}/{r}/git/ref/tags/{tag}`) names a commit for a
    /// lightweight tag and a tag object for an annotated one (what `git tag
    /// -a`, `npm version` and `cargo release` make); a tag object is peeled
    /// through `GET /repos/{o}/{r}/git/tags/{sha}` until a commit, at most
    /// `TAG_PEEL_DEPTH_MAX` of them. A tag of a tree or a blob answers that
    /// object's sha, which no commit equals.
    pub async fn tag_target(
        &self,
        installation: u64,
        repo: &str,
        tag: &str,
    ) -> Result<Option<String>, GitHubError> {
        #[derive(Deserialize)]
        struct Named {
            object: GitObject,
        }
        let auth = self.release_auth(installation, repo).await?;
        let path = format!("/repos/{}/git/ref/tags/{}", segs(repo), seg(tag));
        let Some(mut object) = self
            .get_with::<Named>(&auth, &path, "tag ref")
            .await?
            .map(|r| r.object)
        else {
            return Ok(None);
        };
        for _ in 0..TAG_PEEL_DEPTH_MAX {
            if object.kind != "tag" {
                return Ok(Some(object.sha));
            }
            let path = format!("/repos/{}/git/tags/{}", segs(repo), seg(&object.sha));
            match self.get_with::<Named>(&auth, &path, "tag object").await? {
                Some(t) => object = t.object,
                // The tag was deleted (and its object collected) meanwhile.
                None => return Ok(None),
            }
        }
        if object.kind != "tag" {
            return Ok(Some(object.sha));
        }
        Err(GitHubError::permanent(format!(
            "tag {tag} is a chain of more than {TAG_PEEL_DEPTH_MAX} tag objects"
        )))
    }

    /// The tag of the release GitHub shows as "Latest", None when there is
    /// none (`GET /releases/latest` answers 404).
    pub async fn latest_release_tag(
        &self,
        installation: u64,
        repo: &str,
    ) -> Result<Option<String>, GitHubError> {
        #[derive(Deserialize)]
        struct Latest {
            tag_name: String,
        }
        let auth = self.release_auth(installation, repo).await?;
        let path = format!("/repos/{}/releases/latest", segs(repo));
        let found = self
            .get_with::<Latest>(&auth, &path, "latest release")
            .await?;
        Ok(found.map(|l| l.tag_name))
    }

    /// The release of `tag`, found before one is created: its id and
    /// whether this call created it. A tag that was deleted meanwhile is
    /// made again at `sha` (`target_commitish`), the commit approved.
    /// `kind` says whether it is a pre-release and whether it becomes the
    /// repository's "Latest" (`make_latest`; GitHub's default would make
    /// any new one so).
    pub async fn ensure_release(
        &self,
        installation: u64,
        repo: &str,
        tag: &str,
        sha: &str,
        body: &str,
        kind: ReleaseKind,
    ) -> Result<(u64, bool), GitHubError> {
        let auth = self.release_auth(installation, repo).await?;
        let by_tag = format!("/repos/{}/releases/tags/{}", segs(repo), seg(tag));
        if let Some(found) = self.get_with::<IdAnswer>(&auth, &by_tag, "release").await? {
            return Ok((found.id, false));
        }
        let path = format!("/repos/{}/releases", segs(repo));
        let create = json!({
            "tag_name": tag, "name": tag, "body": body, "target_commitish": sha,
            "prerelease": kind.prerelease,
            "make_latest": if kind.latest { "true" } else { "false" },
        });
        let (_, text) = self
            .release_call(installation, repo, "POST", &path, create)
            .await?;
        let created: IdAnswer = Self::decode(&text, "release")?;
        Ok((created.id, true))
    }
}
