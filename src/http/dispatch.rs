//! Action-mode dispatch (`POST /v1/dispatch`): a workflow step (the
//! composite action `action.yml`) starts a named run with inputs.
//!
//! Each repository has a key of its own, derived from the operator's
//! `DISPATCH_SECRET` (`repository_key`: HMAC-SHA256 of the lowercased
//! `owner/name`), so one repository's workflows can dispatch for it alone.
//! The request carries `X-Sluice-Timestamp` (Unix seconds) and
//! `X-Sluice-Signature: sha256=<hex HMAC-SHA256(key, "<timestamp>.<body>")>`.
//! A request older than `DISPATCH_WINDOW_MS`, or one whose signature was
//! already used (`dispatch_signatures`), is 401. The instance is named by
//! the signature alone, so a request that raced its own replay, or a retry
//! after the branch moved, still starts one run.
//!
//! A named `sha` must be on the branch (the branch's head or an ancestor of
//! it, by GitHub's compare): code nobody merged there (another branch, a
//! fork's pull request) is never dispatched, so it never sees a deploy's
//! secrets and never skips a fork's approval. A deploy naming `sha` is
//! imperative (a rollback, a hotfix): the queue policy neither skips it nor
//! lets it skip others, and it deploys that revision whatever the branch's
//! head is; it still waits for the group. Without `sha`, the branch's head
//! is run, as a push would.
//!
//! The key is a repository secret, which a workflow on any branch can
//! read, so it proves the repository but not the branch. A request may
//! also carry GitHub Actions' OIDC token (`X-Sluice-OIDC-Token`, checked by
//! `http::oidc`), which proves the repository, the branch and the GitHub
//! environment its workflow ran in. A deploy is planned only when the
//! environment that `.sluice.toml` on the default branch selects for the
//! branch lets it in with what the request proved
//! (`runs::environment::Environments::dispatch_check`: the key alone
//! reaches only environments that restrict no branch and ask for no
//! token); the deploy's grant step checks it again on the policy it reads.
//! A request with a token is named by the token (`oidc::VerifiedToken::id`),
//! so one token starts one run of a kind.

use std::collections::BTreeMap;

use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use crate::engine::CreateRequest;
use crate::github::{GitHub, GitHubError};
use crate::runs::config::{self, ConfigState, CONFIG_PATH};
use crate::runs::deploy::DeployRun;
use crate::runs::environment::Environments;
use crate::runs::inputs::{DeployInput, Dispatched};
use crate::runs::key::{InstanceKey, Subject};
use crate::runs::registry;
use crate::runs::triggers::{check_request, deploy_request, RunTarget};
use crate::runs::Run;
use crate::secret::Secret;

use super::oidc::VerifiedToken;
use super::ApiError;

pub const TIMESTAMP_HEADER: &str = "X-Sluice-Timestamp";
pub const SIGNATURE_HEADER: &str = "X-Sluice-Signature";
pub use crate::limits::DISPATCH_WINDOW_MS;
/// A dispatch is a run name, a repository, a revision and a few inputs.
pub const DISPATCH_BODY_BYTES_MAX: usize = 64 * 1024;
/// Inputs are knobs (a target, a flag), not payloads.
pub const INPUTS_MAX: usize = 20;
pub const INPUT_NAME_CHARS_MAX: usize = 64;
pub const INPUT_VALUE_BYTES_MAX: usize = 1024;
/// A shorter operator secret could be guessed offline from one captured
/// request (its signature is an oracle): 32 characters of a random token.
pub const DISPATCH_SECRET_CHARS_MIN: usize = 32;
/// Git refuses longer ref names on most filesystems.
const BRANCH_CHARS_MAX: usize = 255;

/// What a dispatch asks for. Inputs are journaled and shown in the API, so
/// they never carry secrets (a value equal to a configured secret is
/// refused): secrets come from the operator's environments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchRequest {
    /// `check` or `deploy`.
    pub run: String,
    /// `owner/name`.
    pub repo: String,
    /// The branch to check or deploy (a deploy's default: the default branch).
    #[serde(default)]
    pub branch: Option<String>,
    /// An explicit revision (40 hex digits) on the branch.
    #[serde(default)]
    pub sha: Option<String>,
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
}

/// A repository's dispatch key: what its workflows hold (`SLUICE_DISPATCH_KEY`),
/// never the operator's secret itself. Hex, so it is a plain string secret.
pub fn repository_key(secret: &Secret, repo: &str) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.expose().as_bytes()) else {
        return String::new();
    };
    mac.update(b"sluice-dispatch:");
    mac.update(repo.to_ascii_lowercase().as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// The repository a request claims, to derive the key its signature must
/// be made with (nothing else of the body is read before the signature).
pub fn claimed_repo(body: &[u8]) -> Result<String, ApiError> {
    #[derive(Deserialize)]
    struct Claim {
        repo: String,
    }
    serde_json::from_slice::<Claim>(body)
        .map(|c| c.repo)
        .map_err(|_| {
            ApiError::bad_request("bad_json", "the body must be a JSON object naming `repo`")
        })
}

/// `sha256=<hex>` over `<timestamp>.<body>`: what the action sends.
pub fn sign(secret: &[u8], timestamp_s: i64, body: &[u8]) -> String {
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return String::new();
    };
    mac.update(format!("{timestamp_s}.").as_bytes());
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

fn unauthorized(code: &'static str, message: &str) -> ApiError {
    ApiError::new(401, code, message)
}

/// Checks the signature, made with the claimed repository's key, and its
/// age; the signature's hex (the request's identity) when both are good.
pub fn verify(
    secret: Option<&Secret>,
    repo: &str,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_ms: i64,
) -> Result<String, ApiError> {
    let secret = secret
        .filter(|s| s.expose().len() >= DISPATCH_SECRET_CHARS_MIN)
        .ok_or_else(|| {
            ApiError::new(
                503,
                "not_configured",
                format!("DISPATCH_SECRET is not set (or shorter than {DISPATCH_SECRET_CHARS_MIN} characters)"),
            )
        })?;
    let key = repository_key(secret, repo);
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(unauthorized(
            "unsigned",
            "X-Sluice-Timestamp and X-Sluice-Signature are required",
        ));
    };
    let ts: i64 = timestamp
        .trim()
        .parse()
        .map_err(|_| unauthorized("bad_timestamp", "X-Sluice-Timestamp is not Unix seconds"))?;
    if ts.saturating_mul(1000).abs_diff(now_ms) > DISPATCH_WINDOW_MS.unsigned_abs() {
        return Err(unauthorized(
            "stale_signature",
            "the request is older than 5 minutes (or its clock is off): sign it again",
        ));
    }
    let given = signature
        .trim()
        .strip_prefix("sha256=")
        .and_then(|h| hex::decode(h).ok())
        .ok_or_else(|| unauthorized("bad_signature", "the signature is not sha256=<hex>"))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes())
        .map_err(|_| unauthorized("bad_signature", "the signature does not match"))?;
    mac.update(format!("{ts}.").as_bytes());
    mac.update(body);
    mac.verify_slice(&given)
        .map_err(|_| unauthorized("bad_signature", "the signature does not match"))?;
    Ok(hex::encode(given))
}

fn wrong_input(message: impl Into<String>) -> ApiError {
    ApiError::new(422, "wrong_input", message)
}

/// Decodes and checks a dispatch: 400 for bad JSON, 422 for anything else.
pub fn parse(body: &[u8]) -> Result<DispatchRequest, ApiError> {
    let req: DispatchRequest = serde_json::from_slice(body).map_err(|e| {
        if e.is_data() {
            wrong_input(e.to_string())
        } else {
            ApiError::bad_request("bad_json", e.to_string())
        }
    })?;
    if registry::dispatchable(&req.run).is_none() {
        let may: Vec<&str> = registry::names()
            .filter(|n| registry::dispatchable(n.as_str()).is_some())
            .map(|n| n.as_str())
            .collect();
        return Err(ApiError::new(
            422,
            "unknown_run",
            format!(
                "run {:?} cannot be dispatched ({})",
                req.run,
                may.join(", ")
            ),
        ));
    }
    check_repo(&req.repo)?;
    if let Some(b) = &req.branch {
        check_branch(b)?;
    }
    if let Some(sha) = &req.sha {
        if sha.len() != 40 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) || is_zero(sha) {
            return Err(wrong_input("sha must be a commit id (40 hex digits)"));
        }
    }
    check_inputs(&req.inputs)?;
    Ok(req)
}

fn is_zero(sha: &str) -> bool {
    sha.bytes().all(|b| b == b'0')
}

fn check_repo(repo: &str) -> Result<(), ApiError> {
    let good = |part: &str| {
        !part.is_empty()
            && part.len() <= 100
            && part != "."
            && part != ".."
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    };
    match repo.split_once('/') {
        Some((owner, name)) if good(owner) && good(name) => Ok(()),
        _ => Err(wrong_input("repo must be owner/name")),
    }
}

fn check_branch(branch: &str) -> Result<(), ApiError> {
    let bad = branch.is_empty()
        || branch.chars().count() > BRANCH_CHARS_MAX
        || branch.starts_with('/')
        || branch.ends_with('/')
        || branch.contains("..")
        || branch
            .chars()
            .any(|c| c.is_control() || " ~^:?*[\\".contains(c));
    if bad {
        return Err(wrong_input(format!(
            "branch {branch:?} is not a branch name"
        )));
    }
    Ok(())
}

fn check_inputs(inputs: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if inputs.len() > INPUTS_MAX {
        return Err(wrong_input(format!("at most {INPUTS_MAX} inputs")));
    }
    for (name, value) in inputs {
        let first_ok = name.bytes().next().is_some_and(|b| b.is_ascii_uppercase());
        let rest_ok = name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
        if !first_ok || !rest_ok || name.len() > INPUT_NAME_CHARS_MAX {
            return Err(wrong_input(format!(
                "input name {name:?} must be A-Z, 0-9 and _ (starting with a letter), at most {INPUT_NAME_CHARS_MAX}"
            )));
        }
        if value.len() > INPUT_VALUE_BYTES_MAX || value.contains('\0') {
            return Err(wrong_input(format!(
                "input {name} must be text of at most {INPUT_VALUE_BYTES_MAX} bytes"
            )));
        }
    }
    Ok(())
}

/// Shorter values are not secrets worth the name (a flag, a port): an
/// input is not refused for containing one.
const SECRET_MATCH_CHARS_MIN: usize = 8;

/// Inputs are journaled and shown: one that carries a configured secret,
/// in any form the log scrubber knows (plain, base64, URL- or JSON-encoded,
/// wrapped), is refused before anything stores it.
pub fn refuse_secret_values(req: &DispatchRequest, secrets: &[Secret]) -> Result<(), ApiError> {
    let redactor = sluice_redact::Redactor::new(
        secrets
            .iter()
            .map(|s| s.expose().as_str())
            .filter(|s| s.len() >= SECRET_MATCH_CHARS_MIN),
    );
    let leaked = req.inputs.iter().find(|(_, v)| redactor.redact(v) != **v);
    match leaked {
        Some((name, _)) => Err(wrong_input(format!(
            "input {name} carries a secret: inputs are recorded and shown, secrets come from the operator's environments"
        ))),
        None => Ok(()),
    }
}

fn github_error(e: GitHubError) -> ApiError {
    ApiError::new(502, "github_unavailable", format!("GitHub: {}", e.message))
}

/// What a request proved: its signature (made with the repository's key),
/// and the OIDC token it carried, once verified.
#[derive(Debug, Clone, Copy)]
pub struct Proof<'a> {
    pub signature_hex: &'a str,
    pub token: Option<&'a VerifiedToken>,
}

impl Proof<'_> {
    /// What names the instance: the token when there is one (one token,
    /// one run of a kind), else the signature.
    /// (The key's `dispatch-` prefix is `kit::key`'s.)
    fn instance_proof(&self) -> String {
        match self.token {
            Some(t) => format!("oidc-{}", t.id),
            None => {
                let sig = self.signature_hex;
                sig[..sig.len().min(16)].to_owned()
            }
        }
    }
}

/// The instance a dispatch starts: the repository's installation, its
/// name as GitHub spells it (group and pool keys must match a webhook's)
/// and the revision, resolved through GitHub; a deploy only when its
/// environment lets in what the request proved. Named by the token, or
/// else by the signature.
pub async fn plan(
    github: &GitHub<'_>,
    environments: &Environments,
    req: &DispatchRequest,
    proof: &Proof<'_>,
) -> Result<CreateRequest, ApiError> {
    let installation_id = github
        .repo_installation(&req.repo)
        .await
        .map_err(github_error)?
        .ok_or_else(|| ApiError::not_found(format!("the App is not installed on {}", req.repo)))?;
    let found = github
        .repository(installation_id, &req.repo)
        .await
        .map_err(github_error)?
        .ok_or_else(|| ApiError::not_found(format!("no repository {}", req.repo)))?;
    let repo = found.full_name.as_str();
    check_token_repository(proof.token, repo)?;
    let branch = req
        .branch
        .clone()
        .unwrap_or_else(|| found.default_branch.clone());
    let is_deploy = DeployRun::NAME == req.run.as_str();
    let dispatched = Dispatched {
        origin: proof.token.map(|t| t.origin.clone()),
    };
    if is_deploy {
        let at = Deployed {
            installation_id,
            repo,
            default_branch: &found.default_branch,
            branch: &branch,
        };
        check_deploy_proof(github, environments, &at, &dispatched).await?;
    }
    let sha = revision(github, installation_id, repo, &branch, req.sha.as_deref()).await?;
    let at = RunTarget {
        repo,
        default_branch: Some(&found.default_branch),
        installation_id,
        sha: &sha,
        sender: "dispatch",
    };
    let planned = if is_deploy {
        deploy_request(&at, &branch, None, None)
    } else {
        check_request(&at, None, false, None).map(|mut c| {
            c.entity = Some(format!("branch:{branch}"));
            c
        })
    };
    let mut create = planned.ok_or_else(|| wrong_input(format!("{sha} is not a commit id")))?;
    let subject = Subject::Dispatch {
        proof: proof.instance_proof(),
    };
    create.key = InstanceKey::new(&create.run, repo, subject).to_string();
    with_dispatch_input(&mut create, req, dispatched)?;
    Ok(create)
}

/// A token is evidence about one repository: another's contradicts the
/// request, whatever it asks for.
fn check_token_repository(token: Option<&VerifiedToken>, repo: &str) -> Result<(), ApiError> {
    match token {
        Some(t) if !t.origin.repository.eq_ignore_ascii_case(repo) => Err(ApiError::new(
            403,
            "oidc_wrong_repository",
            format!(
                "the OIDC token is of a workflow in `{}`, not `{repo}`",
                t.origin.repository
            ),
        )),
        _ => Ok(()),
    }
}

/// A deploy goes ahead only where the environment its policy selects lets
/// in what the request proved: 403 with the refusal's code and sentence.
async fn check_deploy_proof(
    github: &GitHub<'_>,
    environments: &Environments,
    at: &Deployed<'_>,
    dispatched: &Dispatched,
) -> Result<(), ApiError> {
    let environment = deploy_environment(github, at).await?;
    let (repo, branch) = (at.repo, at.branch);
    environments
        .dispatch_check(
            environment.as_deref(),
            repo,
            branch,
            dispatched.origin.as_ref(),
        )
        .map_err(|refusal| {
            let name = environment.as_deref().unwrap_or_default();
            ApiError::new(403, refusal.code(), refusal.sentence(name, repo, branch))
        })
}

/// Where a dispatched deploy would go.
struct Deployed<'a> {
    installation_id: u64,
    repo: &'a str,
    default_branch: &'a str,
    branch: &'a str,
}

/// The environment `[deploy]` selects for the branch, read where the
/// deploy reads it (`.sluice.toml` on the default branch). No file, no
/// section for the branch or an invalid file select none: the deploy then
/// deploys nothing, and says why.
async fn deploy_environment(
    github: &GitHub<'_>,
    at: &Deployed<'_>,
) -> Result<Option<String>, ApiError> {
    let text = github
        .file_at(at.installation_id, at.repo, CONFIG_PATH, at.default_branch)
        .await
        .map_err(github_error)?;
    let Some(ConfigState::Valid { config }) = text.as_deref().map(config::parse) else {
        return Ok(None);
    };
    Ok(config
        .deploy
        .filter(|d| d.branch == at.branch)
        .and_then(|d| d.environment))
}

/// The commit to run: the branch's head, or the named sha when it is on
/// the branch (its head or an ancestor).
async fn revision(
    github: &GitHub<'_>,
    installation_id: u64,
    repo: &str,
    branch: &str,
    sha: Option<&str>,
) -> Result<String, ApiError> {
    let Some(sha) = sha.map(str::to_ascii_lowercase) else {
        return github
            .branch_head(installation_id, repo, branch)
            .await
            .map_err(github_error)?
            .ok_or_else(|| wrong_input(format!("{repo} has no branch {branch:?}")));
    };
    let on_branch = github
        .is_on_branch(installation_id, repo, branch, &sha)
        .await
        .map_err(github_error)?;
    if !on_branch {
        return Err(wrong_input(format!(
            "{sha} is not on {branch}: only commits merged there are dispatched"
        )));
    }
    Ok(sha)
}

/// The request's inputs in the planned run's input, and for a deploy what
/// the request proved and, for an explicit revision, the imperative flag.
fn with_dispatch_input(
    create: &mut CreateRequest,
    req: &DispatchRequest,
    dispatched: Dispatched,
) -> Result<(), ApiError> {
    let inputs =
        serde_json::to_value(&req.inputs).map_err(|e| ApiError::internal(e.to_string()))?;
    if let Some(input) = create.input.as_object_mut() {
        if !req.inputs.is_empty() {
            input.insert("inputs".into(), inputs);
        }
    }
    if DeployRun::NAME == create.run.as_str() {
        let mut deploy: DeployInput = serde_json::from_value(create.input.clone())
            .map_err(|e| ApiError::internal(e.to_string()))?;
        deploy.imperative = req.sha.is_some();
        deploy.dispatch = Some(dispatched);
        create.input =
            serde_json::to_value(deploy).map_err(|e| ApiError::internal(e.to_string()))?;
    }
    Ok(())
}
