//! Webhook signature verification and payload decoding. Parse at the edge:
//! past this module an event is a typed value.

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureError {
    Missing,
    Malformed,
    Mismatch,
}

/// The HMAC-SHA256 `X-Hub-Signature-256` carries, as bytes.
pub type Signature = [u8; 32];

/// Reads `X-Hub-Signature-256` as GitHub writes it: `sha256=` and 64 hex
/// digits (either case; whitespace around them aside). Checked before a
/// byte of the body is read: anything else cannot be GitHub's.
pub fn parse_signature(header: Option<&str>) -> Result<Signature, SignatureError> {
    let header = header.ok_or(SignatureError::Missing)?;
    let hex_sig = header
        .strip_prefix("sha256=")
        .ok_or(SignatureError::Malformed)?
        .trim();
    let mut sig = [0u8; 32];
    hex::decode_to_slice(hex_sig, &mut sig).map_err(|_| SignatureError::Malformed)?;
    Ok(sig)
}

/// A body's HMAC-SHA256 under one secret, fed as the body streams in, so
/// the body is checked without being gathered first.
#[derive(Clone)]
pub struct BodyMac(Option<Hmac<Sha256>>);

impl BodyMac {
    pub fn new(secret: &[u8]) -> BodyMac {
        // HMAC takes keys of any length, so this is always Some; a None
        // would match no signature (the safe side).
        BodyMac(Hmac::<Sha256>::new_from_slice(secret).ok())
    }

    pub fn update(&mut self, chunk: &[u8]) {
        if let Some(mac) = &mut self.0 {
            mac.update(chunk);
        }
    }

    /// Whether the body fed so far has `signature`, compared in constant time.
    pub fn matches(self, signature: &Signature) -> bool {
        self.0
            .is_some_and(|mac| mac.verify_slice(signature).is_ok())
    }
}

/// Verifies `X-Hub-Signature-256` (`sha256=<hex>`): HMAC-SHA256 of the raw
/// body under the webhook secret, compared in constant time.
pub fn verify_signature(
    secret: &[u8],
    body: &[u8],
    header: Option<&str>,
) -> Result<(), SignatureError> {
    let sig = parse_signature(header)?;
    let mut mac = BodyMac::new(secret);
    mac.update(body);
    if mac.matches(&sig) {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// Signs a body the way GitHub does (for the tests and the sample sender).
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(m) => m,
        Err(_) => return String::new(),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Account {
    pub login: String,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Repository {
    pub full_name: String,
    pub name: String,
    pub owner: Account,
    /// Where to clone from is never taken from a payload: runs derive it
    /// from `full_name` and the configured GitHub (`GITHUB_GIT_URL`).
    #[serde(default)]
    pub default_branch: Option<String>,
    #[serde(default)]
    pub private: bool,
    /// When the repository was last pushed to: in a push event, this push
    /// (Unix seconds there; an ISO string in other events).
    #[serde(default)]
    pub pushed_at: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Installation {
    pub id: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct GitRef {
    pub sha: String,
    #[serde(rename = "ref")]
    pub name: String,
    /// The repository the ref lives in: a fork's for a fork's pull request
    /// (null when the fork was deleted).
    #[serde(default)]
    pub repo: Option<RepoName>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RepoName {
    pub full_name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PullRequest {
    pub number: u64,
    #[serde(default)]
    pub draft: bool,
    pub head: GitRef,
    pub base: GitRef,
    /// ISO 8601: changes with every event the pull request sends.
    #[serde(default)]
    pub updated_at: Option<String>,
    /// The author's relation to the repository: `FIRST_TIME_CONTRIBUTOR`,
    /// `FIRST_TIMER` and `NONE` are who has never contributed.
    #[serde(default)]
    pub author_association: Option<String>,
    /// Whether a closed pull request was merged (`closed` events).
    #[serde(default)]
    pub merged: bool,
    /// When it was merged and closed (ISO 8601, GitHub's clock; null while
    /// open): signed with the delivery, so a decision is dated by GitHub,
    /// not by when it reached Sluice.
    #[serde(default)]
    pub merged_at: Option<String>,
    #[serde(default)]
    pub closed_at: Option<String>,
}

impl PullRequest {
    /// When a closed pull request was decided, ms since the epoch: its
    /// merge when merged, else its close. None when the payload has no
    /// date GitHub's format parses.
    pub fn decided_ms(&self) -> Option<i64> {
        let at = match self.merged {
            true => self.merged_at.as_deref().or(self.closed_at.as_deref()),
            false => self.closed_at.as_deref(),
        };
        at.and_then(super::client::parse_rfc3339_ms)
    }
}

/// `check_run`: Sluice acts on `requested_action` (a button of its check
/// run was pressed) and later on `rerequested`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CheckRunEvent {
    pub action: String,
    pub check_run: CheckRunRef,
    #[serde(default)]
    pub requested_action: Option<RequestedAction>,
    pub repository: Repository,
    pub sender: Account,
    pub installation: Installation,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CheckRunRef {
    pub id: u64,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub head_sha: Option<String>,
    /// Sluice sets it to the instance id.
    #[serde(default)]
    pub external_id: Option<String>,
    /// The App that created it.
    #[serde(default)]
    pub app: Option<AppRef>,
    #[serde(default)]
    pub check_suite: Option<SuiteRef>,
    #[serde(default)]
    pub pull_requests: Vec<PullRef>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AppRef {
    pub id: u64,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PullRef {
    pub number: u64,
}

/// A check suite as a `check_run` or `check_suite` event carries it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SuiteRef {
    #[serde(default)]
    pub id: Option<u64>,
    /// ISO 8601. GitHub resets a suite's status to `queued` whenever one of
    /// its check runs, or the suite itself, is rerequested, so a
    /// `rerequested` event's suite was updated by that very request: the
    /// signed mark of one attempt.
    #[serde(default)]
    pub updated_at: Option<String>,
    #[serde(default)]
    pub head_branch: Option<String>,
    #[serde(default)]
    pub head_sha: Option<String>,
    #[serde(default)]
    pub pull_requests: Vec<PullRef>,
    #[serde(default)]
    pub app: Option<AppRef>,
}

/// `check_suite`: `requested`, `rerequested` (Re-run all), `completed`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CheckSuiteEvent {
    pub action: String,
    pub check_suite: SuiteRef,
    pub repository: Repository,
    pub sender: Account,
    pub installation: Installation,
}

impl SuiteRef {
    /// `updated_at` in ms since the epoch (GitHub's timestamps are whole
    /// seconds); None when absent or not a timestamp.
    pub fn updated_ms(&self) -> Option<i64> {
        self.updated_at
            .as_deref()
            .and_then(super::client::parse_rfc3339_ms)
    }
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RequestedAction {
    pub identifier: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PullRequestEvent {
    pub action: String,
    pub number: u64,
    /// `synchronize`: the head before the push (a preview's arrival).
    #[serde(default)]
    pub before: Option<String>,
    /// `edited`: what changed (`title`, `body`, `base`), each with its
    /// previous value.
    #[serde(default)]
    pub changes: Option<serde_json::Value>,
    pub pull_request: PullRequest,
    pub repository: Repository,
    pub sender: Account,
    pub installation: Installation,
}

/// `merge_group`: GitHub's merge queue made a commit the branch's required
/// checks must report on (`checks_requested`), or threw a group away
/// (`destroyed`: merged, dequeued or invalidated).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MergeGroupEvent {
    pub action: String,
    pub merge_group: MergeGroup,
    /// Why a group was destroyed: `merged`, `dequeued`, `invalidated`.
    #[serde(default)]
    pub reason: Option<String>,
    pub repository: Repository,
    pub sender: Account,
    pub installation: Installation,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MergeGroup {
    /// The commit to check: the base with the queued pull requests merged.
    pub head_sha: String,
    /// The queue's branch for this group,
    /// `refs/heads/gh-readonly-queue/<base>/pr-<n>-<sha>`; GitHub deletes it
    /// when the group is destroyed.
    pub head_ref: String,
    /// The commit the group's changes are made on (the base's head).
    #[serde(default)]
    pub base_sha: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct PushEvent {
    #[serde(rename = "ref")]
    pub git_ref: String,
    pub before: String,
    pub after: String,
    #[serde(default)]
    pub deleted: bool,
    /// The commit pushed (for a tag, the commit it names).
    #[serde(default)]
    pub head_commit: Option<HeadCommit>,
    pub repository: Repository,
    pub sender: Account,
    pub installation: Installation,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct HeadCommit {
    pub id: String,
}

/// A decoded event Sluice may act on.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    PullRequest(Box<PullRequestEvent>),
    Push(Box<PushEvent>),
    CheckRun(Box<CheckRunEvent>),
    CheckSuite(Box<CheckSuiteEvent>),
    MergeGroup(Box<MergeGroupEvent>),
    /// Sent when a hook is created; acknowledged, nothing to do.
    Ping,
    /// An event Sluice does not act on (still valid JSON).
    Other(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ParseError {
    /// The body is not JSON (or not a JSON object).
    BadJson(String),
    /// JSON, but not the shape of the named event.
    WrongShape { event: String, message: String },
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::BadJson(m) => write!(f, "body is not a JSON object: {m}"),
            ParseError::WrongShape { event, message } => {
                write!(f, "body is not a {event} payload: {message}")
            }
        }
    }
}

impl Event {
    /// When the event happened by its own (signed) payload, in ms: a push's
    /// `repository.pushed_at`, a pull request's `updated_at`, a
    /// `rerequested` check run's or suite's suite `updated_at` (the
    /// request reset the suite). None for events without one: other check
    /// run actions (a button pressed days after its suite last changed).
    pub fn occurred_ms(&self) -> Option<i64> {
        match self {
            Event::Push(p) => match p.repository.pushed_at.as_ref()? {
                serde_json::Value::Number(n) => n.as_i64().map(|s| s.saturating_mul(1000)),
                serde_json::Value::String(iso) => super::client::parse_rfc3339_ms(iso),
                _ => None,
            },
            Event::PullRequest(pr) => pr
                .pull_request
                .updated_at
                .as_deref()
                .and_then(super::client::parse_rfc3339_ms),
            Event::CheckRun(c) if c.action == "rerequested" => {
                c.check_run.check_suite.as_ref()?.updated_ms()
            }
            Event::CheckSuite(c) if c.action == "rerequested" => c.check_suite.updated_ms(),
            // A merge group carries only its commit's own (author) date.
            Event::CheckRun(_)
            | Event::CheckSuite(_)
            | Event::MergeGroup(_)
            | Event::Ping
            | Event::Other(_) => None,
        }
    }
}

/// The events Sluice acts on: the App subscribes to exactly these
/// (`github-app-manifest.json`); `ping` comes unasked.
pub const EVENTS_ACTED_ON: &[&str] = &[
    "check_run",
    "check_suite",
    "merge_group",
    "pull_request",
    "push",
];

/// Decodes a body by its `X-GitHub-Event` name.
pub fn parse(event: &str, body: &[u8]) -> Result<Event, ParseError> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ParseError::BadJson(e.to_string()))?;
    decode(event, value)
}

/// Decodes a body read from parts (a large body is kept as it arrived,
/// never copied into one buffer first).
pub fn parse_reader(event: &str, body: impl std::io::Read) -> Result<Event, ParseError> {
    let value: serde_json::Value =
        serde_json::from_reader(body).map_err(|e| ParseError::BadJson(e.to_string()))?;
    decode(event, value)
}

fn decode(event: &str, value: serde_json::Value) -> Result<Event, ParseError> {
    if !value.is_object() {
        return Err(ParseError::BadJson("expected an object".into()));
    }
    let shape = |e: serde_json::Error| ParseError::WrongShape {
        event: event.to_owned(),
        message: e.to_string(),
    };
    Ok(match event {
        "pull_request" => {
            Event::PullRequest(Box::new(serde_json::from_value(value).map_err(shape)?))
        }
        "push" => Event::Push(Box::new(serde_json::from_value(value).map_err(shape)?)),
        "check_run" => Event::CheckRun(Box::new(serde_json::from_value(value).map_err(shape)?)),
        "check_suite" => Event::CheckSuite(Box::new(serde_json::from_value(value).map_err(shape)?)),
        "merge_group" => Event::MergeGroup(Box::new(serde_json::from_value(value).map_err(shape)?)),
        "ping" => Event::Ping,
        other => Event::Other(other.to_owned()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_verify_and_reject() {
        let body = br#"{"zen":"x"}"#;
        let good = sign(b"s3cret", body);
        assert_eq!(verify_signature(b"s3cret", body, Some(&good)), Ok(()));
        assert_eq!(
            verify_signature(b"other", body, Some(&good)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_signature(b"s3cret", b"{}", Some(&good)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify_signature(b"s3cret", body, None),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify_signature(b"s3cret", body, Some("sha1=abc")),
            Err(SignatureError::Malformed)
        );
        assert_eq!(
            verify_signature(b"s3cret", body, Some("sha256=zz")),
            Err(SignatureError::Malformed)
        );
        // GitHub's documented test vector.
        let doc = verify_signature(
            b"It's a Secret to Everybody",
            b"Hello, World!",
            Some("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"),
        );
        assert_eq!(doc, Ok(()));
    }

    #[test]
    fn bodies_decode_by_event() {
        assert!(matches!(
            parse("pull_request", b"nope"),
            Err(ParseError::BadJson(_))
        ));
        assert!(matches!(
            parse("pull_request", b"[1]"),
            Err(ParseError::BadJson(_))
        ));
        assert!(matches!(
            parse("pull_request", br#"{"action":"opened"}"#),
            Err(ParseError::WrongShape { .. })
        ));
        assert_eq!(parse("ping", br#"{"zen":"x"}"#), Ok(Event::Ping));
        assert_eq!(
            parse("issues", br#"{"action":"opened"}"#),
            Ok(Event::Other("issues".into()))
        );
    }

    #[test]
    fn a_closed_pull_request_is_dated_by_its_merge_or_its_close() {
        let closed = |merged: bool, merged_at: Option<&str>, closed_at: Option<&str>| {
            let body = serde_json::json!({
                "action": "closed", "number": 3,
                "pull_request": {"number": 3, "merged": merged, "merged_at": merged_at,
                    "closed_at": closed_at, "head": {"sha": "a", "ref": "x"},
                    "base": {"sha": "b", "ref": "main"}},
                "repository": {"full_name": "o/r", "name": "r", "owner": {"login": "o"}},
                "sender": {"login": "ana"}, "installation": {"id": 1}
            });
            match parse("pull_request", body.to_string().as_bytes()) {
                Ok(Event::PullRequest(pr)) => pr.pull_request.decided_ms(),
                other => panic!("{other:?}"),
            }
        };
        let (t1, t2) = ("2026-12-04T10:00:00Z", "2026-12-04T10:00:05Z");
        assert_eq!(closed(true, Some(t1), Some(t2)), Some(1_796_378_400_000));
        assert_eq!(closed(false, None, Some(t2)), Some(1_796_378_405_000));
        // No date, or none GitHub's format parses: undated.
        assert_eq!(closed(false, None, None), None);
        assert_eq!(closed(true, Some("yesterday"), None), None);
    }
}
