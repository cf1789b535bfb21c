//! `FakeGitHub`'s tags, comparisons, pull requests (full ones, with
//! branches, labels and comments), branch refs, file commits through the
//! contents API and releases, with GitHub's shapes and status codes
//! (REST "Repositories/tags", "Commits/compare", "Pulls", "Git refs",
//! "Contents", "Issue comments", "Releases"), as strict as the rest of the
//! fake.
#![allow(dead_code)]

use std::collections::HashMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{json, Value};
use sluice::net::{HttpRequest, HttpResponse};

use super::fakes::{not_found, reply, FakeGitHub};

/// A pull request as GitHub keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct FakePull {
    pub number: u64,
    pub repo: String,
    pub title: String,
    pub body: String,
    pub head: String,
    pub base: String,
    pub state: String,
    pub merged: bool,
    pub author: String,
    pub labels: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FakeRelease {
    pub id: u64,
    pub repo: String,
    pub tag: String,
    pub body: String,
    /// `make_latest` as sent (GitHub takes "true", "false" or "legacy").
    pub make_latest: Option<String>,
    pub prerelease: bool,
    /// `target_commitish` as sent: where a missing tag is made.
    pub target: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct FakeComment {
    pub repo: String,
    pub number: u64,
    pub body: String,
}

/// A commit of a comparison, as the test sets it up.
#[derive(Debug, Clone)]
pub struct FakeCommit {
    pub sha: String,
    pub message: String,
    pub author: String,
}

#[derive(Default)]
pub struct ReleaseState {
    /// Tags per repository, newest first as GitHub lists them: each ref's
    /// object (a commit, or a tag object of `tag_objects`).
    pub tags: HashMap<String, Vec<(String, String)>>,
    /// Annotated tags' objects by (repo, sha): the object each names, as
    /// (type, sha).
    pub tag_objects: HashMap<(String, String), (String, String)>,
    /// Commits between two shas, by (repo, base, head).
    pub compares: HashMap<(String, String, String), Vec<FakeCommit>>,
    pub pulls: Vec<FakePull>,
    pub releases: Vec<FakeRelease>,
    pub comments: Vec<FakeComment>,
    /// Commits made through the contents API.
    pub commits_made: u64,
}

fn body_of(req: &HttpRequest) -> Option<Value> {
    req.body
        .as_deref()
        .and_then(|b| serde_json::from_str(b).ok())
}

/// A blob id for a file's text: stable, so an update must name it.
pub fn blob_sha(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    format!("{h:016x}{:024x}", text.len())
}

impl FakeGitHub {
    // --- what the test sets up ---

    pub fn add_tag(&self, repo: &str, name: &str, sha: &str) {
        let mut st = self.rel.borrow_mut();
        st.tags
            .entry(repo.into())
            .or_default()
            .insert(0, (name.into(), sha.into()));
    }

    /// An annotated tag `name` of `target` (a commit, or another tag object
    /// when `kind` is "tag"), as `git tag -a` makes: the ref names a new tag
    /// object. Returns the tag object's sha.
    pub fn add_tag_object(&self, repo: &str, name: &str, kind: &str, target: &str) -> String {
        let mut st = self.rel.borrow_mut();
        let sha = format!("{:040x}", 0x7a90_0000u64 + st.tag_objects.len() as u64 + 1);
        st.tag_objects
            .insert((repo.into(), sha.clone()), (kind.into(), target.into()));
        st.tags
            .entry(repo.into())
            .or_default()
            .retain(|(n, _)| n != name);
        st.tags
            .entry(repo.into())
            .or_default()
            .insert(0, (name.into(), sha.clone()));
        sha
    }

    /// Points an existing tag at `object` (a push with `--force`), or
    /// deletes it (`None`); its tag object stays, as git keeps it until
    /// collected.
    pub fn move_tag(&self, repo: &str, name: &str, object: Option<&str>) {
        let mut st = self.rel.borrow_mut();
        let tags = st.tags.entry(repo.into()).or_default();
        match object {
            Some(o) => {
                for t in tags.iter_mut().filter(|(n, _)| n == name) {
                    t.1 = o.into();
                }
            }
            None => tags.retain(|(n, _)| n != name),
        }
    }

    /// The commit an object peels to (itself when it is no tag object).
    fn peeled(&self, repo: &str, sha: &str) -> String {
        let st = self.rel.borrow();
        let mut at = sha.to_owned();
        while let Some((_, target)) = st.tag_objects.get(&(repo.to_owned(), at.clone())) {
            at = target.clone();
        }
        at
    }

    pub fn set_compare(&self, repo: &str, base: &str, head: &str, commits: Vec<FakeCommit>) {
        self.rel
            .borrow_mut()
            .compares
            .insert((repo.into(), base.into(), head.into()), commits);
    }

    /// A merged pull request the notes will read.
    pub fn merged_pull(&self, repo: &str, number: u64, title: &str, author: &str, labels: &[&str]) {
        self.rel.borrow_mut().pulls.push(FakePull {
            number,
            repo: repo.into(),
            title: title.into(),
            body: String::new(),
            head: format!("feature-{number}"),
            base: "main".into(),
            state: "closed".into(),
            merged: true,
            author: author.into(),
            labels: labels.iter().map(|l| l.to_string()).collect(),
        });
    }

    pub fn release_pulls(&self) -> Vec<FakePull> {
        self.rel
            .borrow()
            .pulls
            .iter()
            .filter(|p| p.head.starts_with("sluice/release-notes/"))
            .cloned()
            .collect()
    }

    pub fn releases(&self) -> Vec<FakeRelease> {
        self.rel.borrow().releases.clone()
    }

    /// A release made outside Sluice (by hand, or by another approval).
    pub fn add_release(&self, repo: &str, tag: &str) {
        let mut st = self.rel.borrow_mut();
        let id = 5000 + st.releases.len() as u64 + 1;
        st.releases.push(FakeRelease {
            id,
            repo: repo.into(),
            tag: tag.into(),
            body: String::new(),
            make_latest: None,
            prerelease: false,
            target: None,
        });
    }

    pub fn comments_on(&self, number: u64) -> Vec<String> {
        self.rel
            .borrow()
            .comments
            .iter()
            .filter(|c| c.number == number)
            .map(|c| c.body.clone())
            .collect()
    }

    /// Closes (or merges) a pull request as a person would on GitHub.
    pub fn close_pull_as_person(&self, number: u64, merged: bool) {
        if let Some(p) = self
            .rel
            .borrow_mut()
            .pulls
            .iter_mut()
            .find(|p| p.number == number)
        {
            p.state = "closed".into();
            p.merged = merged;
        }
    }

    // --- serving ---

    /// `GET /repos/{o}/{r}/git/ref/tags/{tag}`: the ref's object, a commit
    /// or (annotated) a tag object.
    fn tag_ref(&self, repo: &str, tag: &str) -> HttpResponse {
        let st = self.rel.borrow();
        let found = st
            .tags
            .get(repo)
            .and_then(|tags| tags.iter().find(|(name, _)| name == tag))
            .map(|(_, sha)| sha.clone());
        match found {
            Some(sha) => {
                let kind = match st.tag_objects.contains_key(&(repo.to_owned(), sha.clone())) {
                    true => "tag",
                    false => "commit",
                };
                reply(
                    200,
                    json!({ "ref": format!("refs/tags/{tag}"), "object": { "sha": sha, "type": kind } }),
                )
            }
            None => not_found(),
        }
    }

    /// `GET /repos/{o}/{r}/git/tags/{sha}` (REST "Git tags", get a tag): a
    /// tag object and what it names; 404 for any other sha.
    fn tag_object(&self, repo: &str, sha: &str) -> HttpResponse {
        let st = self.rel.borrow();
        match st.tag_objects.get(&(repo.to_owned(), sha.to_owned())) {
            Some((kind, target)) => reply(
                200,
                json!({ "sha": sha, "tag": "", "message": "", "object": { "sha": target, "type": kind } }),
            ),
            None => not_found(),
        }
    }

    pub fn release_route(method: &str, s: &[&str]) -> Option<&'static str> {
        Some(match (method, s) {
            ("GET", ["repos", _, _, "tags"]) => "tags",
            ("GET", ["repos", _, _, "git", "ref", "tags", _]) => "tag-ref",
            ("GET", ["repos", _, _, "git", "tags", _]) => "tag-object",
            ("GET", ["repos", _, _, "pulls"]) => "list-pulls",
            ("POST", ["repos", _, _, "pulls"]) => "create-pull",
            ("PATCH", ["repos", _, _, "pulls", _]) => "update-pull",
            ("POST", ["repos", _, _, "git", "refs"]) => "create-ref",
            ("PUT", ["repos", _, _, "contents", rest @ ..]) if !rest.is_empty() => "put-contents",
            ("GET", ["repos", _, _, "issues", _, "comments"]) => "list-comments",
            ("POST", ["repos", _, _, "issues", _, "comments"]) => "create-comment",
            ("PATCH", ["repos", _, _, "issues", "comments", _]) => "update-comment",
            ("GET", ["repos", _, _, "releases", "tags", _]) => "release-by-tag",
            ("GET", ["repos", _, _, "releases", "latest"]) => "latest-release",
            ("POST", ["repos", _, _, "releases"]) => "create-release",
            _ => return None,
        })
    }

    /// The permission each route needs.
    pub fn release_permission(route: &str) -> Option<(&'static str, &'static str)> {
        Some(match route {
            "tags" | "tag-ref" | "tag-object" | "release-by-tag" | "latest-release" => {
                ("contents", "read")
            }
            "create-ref" | "put-contents" | "create-release" => ("contents", "write"),
            "list-pulls" | "list-comments" => ("pull_requests", "read"),
            "create-pull" | "update-pull" | "create-comment" | "update-comment" => {
                ("pull_requests", "write")
            }
            _ => return None,
        })
    }

    pub fn serve_release(
        &self,
        route: &str,
        req: &HttpRequest,
        repo: &str,
        segs: &[String],
        query: &HashMap<String, String>,
    ) -> Option<HttpResponse> {
        Some(match route {
            "tags" => self.list_tags(repo, query),
            "tag-ref" => self.tag_ref(repo, &segs[6]),
            "tag-object" => self.tag_object(repo, &segs[5]),
            "list-pulls" => self.list_pulls(repo, query),
            "create-pull" => self.create_pull(req, repo),
            "update-pull" => self.update_pull(req, repo, &segs[4]),
            "create-ref" => self.create_ref(req, repo),
            "put-contents" => self.put_contents(req, repo, &segs[4..].join("/")),
            "list-comments" => self.list_comments(repo, &segs[4]),
            "create-comment" => self.create_comment(req, repo, &segs[4]),
            "update-comment" => self.update_comment(req, repo, &segs[5]),
            "release-by-tag" => self.release_by_tag(repo, &segs[5]),
            "latest-release" => self.latest_release(repo),
            "create-release" => self.create_release(req, repo),
            _ => return None,
        })
    }

    /// `GET /repos/{o}/{r}/pulls/{n}` for a pull request the release
    /// state holds.
    pub fn full_pull(&self, repo: &str, number: u64) -> Option<HttpResponse> {
        let st = self.rel.borrow();
        let p = st
            .pulls
            .iter()
            .find(|p| p.repo == repo && p.number == number)?;
        let head_sha = self
            .st
            .borrow()
            .heads
            .get(&(repo.to_owned(), p.head.clone()))
            .cloned()
            .unwrap_or_else(|| "0".repeat(40));
        Some(reply(200, pull_json(p, &head_sha)))
    }

    fn list_tags(&self, repo: &str, query: &HashMap<String, String>) -> HttpResponse {
        let per_page: usize = query
            .get("per_page")
            .and_then(|p| p.parse().ok())
            .unwrap_or(30);
        let page: usize = query.get("page").and_then(|p| p.parse().ok()).unwrap_or(1);
        if per_page > 100 || page == 0 {
            return reply(422, json!({ "message": "per_page is at most 100" }));
        }
        let tags = self
            .rel
            .borrow()
            .tags
            .get(repo)
            .cloned()
            .unwrap_or_default();
        // GitHub lists each tag with the commit it peels to.
        let list: Vec<Value> = tags
            .iter()
            .skip((page - 1) * per_page)
            .take(per_page)
            .map(|(name, sha)| {
                json!({ "name": name, "commit": { "sha": self.peeled(repo, sha), "url": "" } })
            })
            .collect();
        reply(200, json!(list))
    }

    /// `GET /repos/{o}/{r}/compare/{base}...{head}` for a range the test
    /// set up (`set_compare`); None for any other.
    pub fn release_compare(&self, repo: &str, range: &str) -> Option<HttpResponse> {
        let (base, head) = range.split_once("...")?;
        let st = self.rel.borrow();
        let commits = st.compares.get(&(repo.into(), base.into(), head.into()))?;
        let list: Vec<Value> = commits
            .iter()
            .map(|c| {
                json!({ "sha": c.sha, "commit": { "message": c.message, "author": { "name": c.author } },
                        "author": { "login": c.author } })
            })
            .collect();
        Some(reply(
            200,
            json!({ "status": "ahead", "ahead_by": list.len(), "total_commits": list.len(), "commits": list }),
        ))
    }

    fn list_pulls(&self, repo: &str, query: &HashMap<String, String>) -> HttpResponse {
        let st = self.rel.borrow();
        let owner = repo.split('/').next().unwrap_or_default();
        let state = query.get("state").map_or("open", String::as_str);
        let list: Vec<Value> = st
            .pulls
            .iter()
            .filter(|p| p.repo == repo && (state == "all" || p.state == state))
            .filter(|p| {
                query
                    .get("head")
                    .is_none_or(|h| *h == format!("{owner}:{}", p.head))
            })
            .map(|p| pull_json(p, ""))
            .collect();
        reply(200, json!(list))
    }

    fn create_pull(&self, req: &HttpRequest, repo: &str) -> HttpResponse {
        let Some(b) = body_of(req) else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        let (Some(title), Some(head), Some(base)) =
            (b["title"].as_str(), b["head"].as_str(), b["base"].as_str())
        else {
            return reply(422, json!({ "message": "Validation Failed" }));
        };
        if !self
            .st
            .borrow()
            .heads
            .contains_key(&(repo.to_owned(), head.to_owned()))
        {
            return reply(
                422,
                json!({ "message": "Validation Failed", "errors": [{ "field": "head", "code": "invalid" }] }),
            );
        }
        let mut st = self.rel.borrow_mut();
        if st
            .pulls
            .iter()
            .any(|p| p.repo == repo && p.head == head && p.state == "open")
        {
            return reply(
                422,
                json!({ "message": format!("A pull request already exists for {head}.") }),
            );
        }
        let number = 100 + st.pulls.len() as u64 + 1;
        let p = FakePull {
            number,
            repo: repo.into(),
            title: title.into(),
            body: b["body"].as_str().unwrap_or_default().into(),
            head: head.into(),
            base: base.into(),
            state: "open".into(),
            merged: false,
            author: "sluice[bot]".into(),
            labels: Vec::new(),
        };
        let answer = pull_json(&p, "");
        st.pulls.push(p);
        reply(201, answer)
    }

    fn update_pull(&self, req: &HttpRequest, repo: &str, number: &str) -> HttpResponse {
        let Some(b) = body_of(req) else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        let mut st = self.rel.borrow_mut();
        let Some(p) = st
            .pulls
            .iter_mut()
            .find(|p| p.repo == repo && p.number.to_string() == number)
        else {
            return not_found();
        };
        if let Some(t) = b["title"].as_str() {
            p.title = t.into();
        }
        if let Some(t) = b["body"].as_str() {
            p.body = t.into();
        }
        match b["state"].as_str() {
            Some("closed") => p.state = "closed".into(),
            Some("open") if !p.merged => p.state = "open".into(),
            Some(other) if other != "open" => {
                return reply(422, json!({ "message": "Validation Failed" }))
            }
            _ => {}
        }
        reply(200, pull_json(p, ""))
    }

    fn create_ref(&self, req: &HttpRequest, repo: &str) -> HttpResponse {
        let Some(b) = body_of(req) else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        let (Some(r), Some(sha)) = (b["ref"].as_str(), b["sha"].as_str()) else {
            return reply(422, json!({ "message": "Invalid request" }));
        };
        let Some(branch) = r.strip_prefix("refs/heads/") else {
            return reply(422, json!({ "message": "Reference name is invalid" }));
        };
        let mut st = self.st.borrow_mut();
        if !st.commits.contains_key(&(repo.to_owned(), sha.to_owned())) {
            return reply(422, json!({ "message": "Object does not exist" }));
        }
        let key = (repo.to_owned(), branch.to_owned());
        if st.heads.contains_key(&key) {
            return reply(422, json!({ "message": "Reference already exists" }));
        }
        st.heads.insert(key, sha.to_owned());
        reply(
            201,
            json!({ "ref": r, "object": { "sha": sha, "type": "commit" } }),
        )
    }

    fn put_contents(&self, req: &HttpRequest, repo: &str, path: &str) -> HttpResponse {
        let Some(b) = body_of(req) else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        let (Some(_), Some(content), Some(branch)) = (
            b["message"].as_str(),
            b["content"].as_str(),
            b["branch"].as_str(),
        ) else {
            return reply(
                422,
                json!({ "message": "Invalid request: message, content, branch" }),
            );
        };
        let Ok(bytes) = STANDARD.decode(content) else {
            return reply(422, json!({ "message": "content is not valid Base64" }));
        };
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut st = self.st.borrow_mut();
        let Some(parent) = st.heads.get(&(repo.to_owned(), branch.to_owned())).cloned() else {
            return reply(
                404,
                json!({ "message": format!("Branch {branch} not found") }),
            );
        };
        let mut files = st
            .commits
            .get(&(repo.to_owned(), parent))
            .cloned()
            .unwrap_or_default();
        let existing = files.get(path).map(|t| blob_sha(t));
        if existing.as_deref() != b["sha"].as_str() {
            return reply(
                409,
                json!({ "message": format!("{path} does not match {:?}", b["sha"].as_str()) }),
            );
        }
        files.insert(path.to_owned(), text.clone());
        let made = {
            let mut rel = self.rel.borrow_mut();
            rel.commits_made += 1;
            rel.commits_made
        };
        let sha = format!("{:040x}", 0xc0ffee_0000u64 + made);
        st.commits.insert((repo.to_owned(), sha.clone()), files);
        st.heads
            .insert((repo.to_owned(), branch.to_owned()), sha.clone());
        let status = if existing.is_some() { 200 } else { 201 };
        reply(
            status,
            json!({ "content": { "path": path, "sha": blob_sha(&text) }, "commit": { "sha": sha } }),
        )
    }

    fn list_comments(&self, repo: &str, number: &str) -> HttpResponse {
        let st = self.rel.borrow();
        let list: Vec<Value> = st
            .comments
            .iter()
            .enumerate()
            .filter(|(_, c)| c.repo == repo && c.number.to_string() == number)
            .map(|(i, c)| json!({ "id": i + 1, "body": c.body }))
            .collect();
        reply(200, json!(list))
    }

    /// `PATCH /repos/{o}/{r}/issues/comments/{id}`: GitHub's 200 with the
    /// comment, 404 for an id of another repository or none.
    fn update_comment(&self, req: &HttpRequest, repo: &str, id: &str) -> HttpResponse {
        let Some(body) = body_of(req).and_then(|b| b["body"].as_str().map(str::to_owned)) else {
            return reply(422, json!({ "message": "body is required" }));
        };
        let mut st = self.rel.borrow_mut();
        let index = id.parse::<usize>().ok().and_then(|i| i.checked_sub(1));
        match index
            .and_then(|i| st.comments.get_mut(i))
            .filter(|c| c.repo == repo)
        {
            Some(c) => {
                c.body = body.clone();
                reply(200, json!({ "id": index.unwrap_or(0) + 1, "body": body }))
            }
            None => not_found(),
        }
    }

    fn create_comment(&self, req: &HttpRequest, repo: &str, number: &str) -> HttpResponse {
        let Some(body) = body_of(req).and_then(|b| b["body"].as_str().map(str::to_owned)) else {
            return reply(422, json!({ "message": "body is required" }));
        };
        // A pull request the release state opened, or one a test set a
        // head for (a preview's).
        let known = number
            .parse::<u64>()
            .ok()
            .filter(|n| self.st.borrow().pulls.contains_key(&(repo.to_owned(), *n)));
        let mut st = self.rel.borrow_mut();
        let Some(n) = st
            .pulls
            .iter()
            .find(|p| p.repo == repo && p.number.to_string() == number)
            .map(|p| p.number)
            .or(known)
        else {
            return not_found();
        };
        st.comments.push(FakeComment {
            repo: repo.into(),
            number: n,
            body: body.clone(),
        });
        reply(201, json!({ "id": st.comments.len(), "body": body }))
    }

    fn release_by_tag(&self, repo: &str, tag: &str) -> HttpResponse {
        let st = self.rel.borrow();
        match st.releases.iter().find(|r| r.repo == repo && r.tag == tag) {
            Some(r) => reply(
                200,
                json!({ "id": r.id, "tag_name": r.tag, "body": r.body }),
            ),
            None => not_found(),
        }
    }

    /// GitHub's "Latest": the last release made without `make_latest:
    /// "false"` and not a pre-release.
    fn latest_release(&self, repo: &str) -> HttpResponse {
        let st = self.rel.borrow();
        let latest =
            st.releases.iter().rev().find(|r| {
                r.repo == repo && !r.prerelease && r.make_latest.as_deref() != Some("false")
            });
        match latest {
            Some(r) => reply(200, json!({ "id": r.id, "tag_name": r.tag })),
            None => not_found(),
        }
    }

    fn create_release(&self, req: &HttpRequest, repo: &str) -> HttpResponse {
        let Some(b) = body_of(req) else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        let Some(tag) = b["tag_name"].as_str() else {
            return reply(422, json!({ "message": "tag_name is required" }));
        };
        let mut st = self.rel.borrow_mut();
        if st.releases.iter().any(|r| r.repo == repo && r.tag == tag) {
            return reply(
                422,
                json!({ "message": "Validation Failed", "errors": [{ "resource": "Release", "code": "already_exists", "field": "tag_name" }] }),
            );
        }
        let make_latest = b["make_latest"].as_str().map(str::to_owned);
        if !matches!(
            make_latest.as_deref(),
            None | Some("true" | "false" | "legacy")
        ) {
            return reply(
                422,
                json!({ "message": "Validation Failed", "errors": [{ "resource": "Release", "code": "invalid", "field": "make_latest" }] }),
            );
        }
        let id = 5000 + st.releases.len() as u64 + 1;
        st.releases.push(FakeRelease {
            make_latest,
            prerelease: b["prerelease"].as_bool().unwrap_or(false),
            target: b["target_commitish"].as_str().map(str::to_owned),
            id,
            repo: repo.into(),
            tag: tag.into(),
            body: b["body"].as_str().unwrap_or_default().into(),
        });
        reply(201, json!({ "id": id, "tag_name": tag }))
    }
}

fn pull_json(p: &FakePull, head_sha: &str) -> Value {
    json!({
        "number": p.number, "title": p.title, "body": p.body, "state": p.state,
        "merged": p.merged, "merged_at": if p.merged { json!("2026-12-01T12:00:00Z") } else { Value::Null },
        "user": { "login": p.author },
        "labels": p.labels.iter().map(|l| json!({ "name": l })).collect::<Vec<_>>(),
        "head": { "ref": p.head, "sha": head_sha }, "base": { "ref": p.base },
    })
}
