//! Deploy environments: which repositories and branches may deploy to
//! each, and which Worker secrets it exports. They are the operator's,
//! declared in the Worker's own configuration (the `ENVIRONMENTS` var),
//! never in a repository: a pusher can only *select* an environment with
//! `[deploy] environment = "..."`, and the grant decides.
//!
//! ```toml
//! [production]
//! repos = ["acme/web"]          # owner/name globs, case-insensitive
//! branches = ["main"]           # branch globs: `*` stops at `/`, `**` does not
//! secrets = ["CLOUDFLARE_API_TOKEN"]
//! production = true             # optional: GitHub's `production_environment`
//! transient = false             # optional: GitHub's `transient_environment`
//! dispatch_oidc = true          # optional: a dispatch here needs GitHub's OIDC token
//! oidc_environment = "prod"     # optional: ...from a job in this GitHub environment
//! ```
//!
//! Every refusal a pusher sees is the same sentence, whether the
//! environment does not exist, does not allow the repository or branch, or
//! lacks a secret: nothing tells which environments or secrets exist.
//!
//! A dispatched deploy (`POST /v1/dispatch`) also shows where it comes
//! from ([`Environments::dispatch_check`]): the HMAC key alone (which every
//! workflow of the repository can read, on any branch) reaches only an
//! environment that restricts no branch and does not ask for a token; any
//! other needs GitHub Actions' OIDC token from a workflow that ran on the
//! dispatched branch (and in the named GitHub environment).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Sluice's own credentials and settings (the bindings named in
/// `src/worker_glue/bindings.rs`): a deploy may never export them, or any
/// commit could read the App's key.
pub const RESERVED_SECRET_NAMES: &[&str] = &[
    "GITHUB_APP_PRIVATE_KEY",
    "GITHUB_APP_ID",
    "GITHUB_APP_SLUG",
    "GITHUB_WEBHOOK_SECRET",
    "GITHUB_WEBHOOK_SECRET_PREVIOUS",
    "DISPATCH_SECRET",
    "DISPATCH_OIDC_AUDIENCE",
    "GITHUB_OIDC_ISSUER",
    "GITHUB_API_URL",
    "ADMIN_TOKEN",
    "SANDBOX_AGENT_TOKEN",
    "SANDBOX_URL",
    "SANDBOX_BACKEND",
    "NOTIFY_SECRET",
    "NOTIFY_URL",
    "PUBLIC_URL",
    "POOL_CAPACITY",
    "CHECKS_CAPACITY",
    "CHECKS_PER_REPO",
    "RETENTION_DAYS",
    "CACHE_BYTES_PER_REPO",
    "ENVIRONMENTS",
    "GITHUB_GIT_URL",
    "CONTAINER_SLEEP_AFTER",
    "ACCESS_TEAM_DOMAIN",
    "ACCESS_AUD",
    "ACCESS_CERTS_URL",
    "LOG_LINK_SECRET",
    "LOG_LEVEL",
];

/// Whether a deploy may read this Worker secret.
pub fn deploy_may_read(name: &str) -> bool {
    !RESERVED_SECRET_NAMES.contains(&name)
}

/// Longest `ENVIRONMENTS` value: a Worker var is at most 5 KiB on the free
/// plan and 64 KiB (bindings in total) otherwise.
const ENVIRONMENTS_BYTES_MAX: usize = 64 * 1024;
/// Environments, and globs or secrets per environment, that one Worker
/// declares: far above any real account, small enough to scan per deploy.
const ENVIRONMENTS_MAX: usize = 64;
const LIST_ITEMS_MAX: usize = 64;
/// GitHub refuses an environment name longer than this.
const GITHUB_ENVIRONMENT_CHARS_MAX: usize = 255;

/// One environment as the operator declared it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Environment {
    /// `owner/name` globs of the repositories that may deploy here.
    pub repos: Vec<String>,
    /// Globs of the branches whose pushes may deploy here.
    pub branches: Vec<String>,
    /// Names of the Worker secrets exported to the deploy command.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Whether end users interact with it: the GitHub deployments' flag
    /// `production_environment`. Unset leaves GitHub's default (true only
    /// for an environment named `production`).
    #[serde(default)]
    pub production: Option<bool>,
    /// Whether it exists only for a while (a preview): the GitHub
    /// deployments' flag `transient_environment` (GitHub then shows an
    /// inactive one as destroyed). Unset is GitHub's default, false.
    #[serde(default)]
    pub transient: Option<bool>,
    /// A dispatch into this environment needs GitHub Actions' OIDC token,
    /// even when `branches` restricts nothing.
    #[serde(default)]
    pub dispatch_oidc: bool,
    /// The GitHub environment the dispatching job must run in: the token's
    /// `environment` claim, so that environment's protection rules
    /// (required reviewers, deployment branches) stand before a dispatch
    /// reaches this one. Implies `dispatch_oidc`.
    #[serde(default)]
    pub oidc_environment: Option<String>,
}

/// The glob that matches every branch name: an environment whose
/// `branches` holds it restricts no branch. Any other list restricts (even
/// `*`, which stops at `/`).
pub const EVERY_BRANCH: &str = "**";

impl Environment {
    /// Whether some branch may not deploy here: `branches` lacks `**`.
    pub fn restricts_branches(&self) -> bool {
        !self.branches.iter().any(|g| g == EVERY_BRANCH)
    }

    /// Whether a dispatch here must carry GitHub's OIDC token.
    pub fn dispatch_needs_token(&self) -> bool {
        self.restricts_branches() || self.dispatch_oidc || self.oidc_environment.is_some()
    }
}

/// What a GitHub Actions OIDC token proved about the workflow that
/// dispatched (its signature, issuer, audience and times already checked by
/// `http::oidc`): recorded in a dispatched deploy's input, where the
/// deploy's own grant step reads it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionsOrigin {
    /// `owner/name` of the repository the workflow ran in.
    pub repository: String,
    /// The ref the workflow ran from (`refs/heads/<branch>` for a branch).
    #[serde(rename = "ref")]
    pub git_ref: String,
    /// The GitHub environment the job ran in, if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// Which workflow file and ref dispatched, and who started the run:
    /// for the record (the API shows the input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
}

/// Why a dispatched deploy may not reach the environment it selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DispatchRefusal {
    /// Only the HMAC key: the environment asks for a token.
    TokenRequired,
    /// The token is another repository's.
    OtherRepository { token: String },
    /// The token's workflow ran from another ref than the dispatched branch.
    OtherRef { token: String },
    /// The token's job ran in another GitHub environment (or none).
    OtherEnvironment {
        expected: String,
        token: Option<String>,
    },
}

impl DispatchRefusal {
    /// A stable code for the API's error and the run's record.
    pub fn code(&self) -> &'static str {
        match self {
            DispatchRefusal::TokenRequired => "oidc_required",
            DispatchRefusal::OtherRepository { .. } => "oidc_wrong_repository",
            DispatchRefusal::OtherRef { .. } => "oidc_wrong_ref",
            DispatchRefusal::OtherEnvironment { .. } => "oidc_wrong_environment",
        }
    }

    /// One sentence that says what would pass. It names the environment
    /// only as the repository's own config selects it, and the GitHub
    /// environment only to a token of this repository and branch.
    pub fn sentence(&self, environment: &str, repo: &str, branch: &str) -> String {
        let needs = format!(
            "a dispatched deploy of `{repo}` to environment `{environment}` needs GitHub Actions' \
             OIDC token from a workflow run on branch `{branch}`"
        );
        match self {
            DispatchRefusal::TokenRequired => format!(
                "{needs} (the workflow grants `permissions: id-token: write` and the action sends \
                 the token); the dispatch key alone may dispatch checks and deploys to \
                 environments that restrict no branch"
            ),
            DispatchRefusal::OtherRepository { token } => {
                format!("{needs}; the token is `{token}`'s")
            }
            DispatchRefusal::OtherRef { token } => {
                format!("{needs}; the token's run is of `{token}`")
            }
            DispatchRefusal::OtherEnvironment { expected, token } => format!(
                "{needs} in GitHub environment `{expected}`; the token's job ran in {}",
                token
                    .as_deref()
                    .map_or("no environment".to_owned(), |t| format!("`{t}`"))
            ),
        }
    }
}

/// The operator's environments, or why their declaration is unusable (then
/// every grant is refused, and the check says an operator must look).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Environments {
    by_name: BTreeMap<String, Environment>,
    error: Option<String>,
}

/// Why a deploy may not use the environment it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Unknown, or not open to this repository and branch: one answer.
    NotGranted,
    /// `ENVIRONMENTS` does not parse; the message is for the operator.
    Misconfigured(String),
}

impl Refusal {
    /// The sentence a check run shows: never which environments exist.
    pub fn summary(&self, environment: &str, repo: &str, branch: &str) -> String {
        match self {
            Refusal::NotGranted => format!(
                "Not deployed: `{repo}` branch `{branch}` may not deploy to environment \
                 `{environment}`. Environments and what they allow are set by the operator of \
                 this Sluice (the `ENVIRONMENTS` variable), not in the repository."
            ),
            Refusal::Misconfigured(_) => "Not deployed: this Sluice's `ENVIRONMENTS` \
                 configuration is invalid; an operator must fix it (`GET /v1/config` with the \
                 admin token names the error)."
                .to_owned(),
        }
    }
}

impl Environments {
    /// Parses the `ENVIRONMENTS` var; unset means no environment at all.
    pub fn parse(text: Option<&str>) -> Environments {
        match text.map(parse_checked).unwrap_or(Ok(BTreeMap::new())) {
            Ok(by_name) => Environments {
                by_name,
                error: None,
            },
            Err(message) => Environments {
                by_name: BTreeMap::new(),
                error: Some(message),
            },
        }
    }

    /// The declared environments, for the operator's `GET /v1/config`.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Environment)> {
        self.by_name.iter().map(|(n, e)| (n.as_str(), e))
    }

    /// Why the declaration is unusable, for the operator.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// The environment `name`, if it lets `repo`'s `branch` deploy to it.
    pub fn grant(&self, name: &str, repo: &str, branch: &str) -> Result<&Environment, Refusal> {
        if let Some(message) = &self.error {
            return Err(Refusal::Misconfigured(message.clone()));
        }
        let env = self.by_name.get(name).ok_or(Refusal::NotGranted)?;
        let repo = repo.to_ascii_lowercase();
        let repo_ok = env
            .repos
            .iter()
            .any(|g| glob_match::glob_match(&g.to_ascii_lowercase(), &repo));
        let branch_ok = env
            .branches
            .iter()
            .any(|g| glob_match::glob_match(g, branch));
        if repo_ok && branch_ok {
            Ok(env)
        } else {
            Err(Refusal::NotGranted)
        }
    }
}

impl Environments {
    /// Whether a dispatched deploy of `repo`'s `branch` into environment
    /// `name` (None: the deploy selects none, so it gets no secret) may go
    /// ahead, with `origin` what its OIDC token proved (None: only the
    /// HMAC key). An environment that does not grant the repository and
    /// branch (or does not exist) asks for a token like a restricted one,
    /// so a refusal tells nothing of which environments exist; the grant
    /// itself is the deploy's to refuse.
    pub fn dispatch_check(
        &self,
        name: Option<&str>,
        repo: &str,
        branch: &str,
        origin: Option<&ActionsOrigin>,
    ) -> Result<(), DispatchRefusal> {
        let Some(name) = name else {
            return Ok(());
        };
        let granted = self.grant(name, repo, branch).ok();
        if granted.is_some_and(|e| !e.dispatch_needs_token()) {
            return Ok(());
        }
        let origin = origin.ok_or(DispatchRefusal::TokenRequired)?;
        if !origin.repository.eq_ignore_ascii_case(repo) {
            return Err(DispatchRefusal::OtherRepository {
                token: origin.repository.clone(),
            });
        }
        if origin.git_ref != format!("refs/heads/{branch}") {
            return Err(DispatchRefusal::OtherRef {
                token: origin.git_ref.clone(),
            });
        }
        let expected = granted.and_then(|e| e.oidc_environment.as_deref());
        match expected {
            // GitHub compares environment names without regard to case.
            Some(want)
                if !origin
                    .environment
                    .as_deref()
                    .is_some_and(|got| got.eq_ignore_ascii_case(want)) =>
            {
                Err(DispatchRefusal::OtherEnvironment {
                    expected: want.to_owned(),
                    token: origin.environment.clone(),
                })
            }
            _ => Ok(()),
        }
    }
}

fn parse_checked(text: &str) -> Result<BTreeMap<String, Environment>, String> {
    if text.len() > ENVIRONMENTS_BYTES_MAX {
        return Err(format!(
            "ENVIRONMENTS is longer than {ENVIRONMENTS_BYTES_MAX} bytes"
        ));
    }
    let by_name: BTreeMap<String, Environment> =
        toml::from_str(text).map_err(|e| format!("ENVIRONMENTS is not valid TOML: {e}"))?;
    if by_name.len() > ENVIRONMENTS_MAX {
        return Err(format!(
            "ENVIRONMENTS declares more than {ENVIRONMENTS_MAX} environments"
        ));
    }
    for (name, env) in &by_name {
        validate(name, env).map_err(|m| format!("ENVIRONMENTS [{name}]: {m}"))?;
    }
    Ok(by_name)
}

fn validate(name: &str, env: &Environment) -> Result<(), String> {
    if !is_name(name) {
        return Err("an environment name is [a-z0-9_-]+".into());
    }
    for (what, list) in [
        ("repos", &env.repos),
        ("branches", &env.branches),
        ("secrets", &env.secrets),
    ] {
        if list.len() > LIST_ITEMS_MAX {
            return Err(format!("{what} lists more than {LIST_ITEMS_MAX} items"));
        }
        if list.iter().any(|item| item.trim().is_empty()) {
            return Err(format!("{what} has an empty item"));
        }
    }
    if env.repos.is_empty() || env.branches.is_empty() {
        // An environment open to everything must be said in globs ("*/*",
        // "**"), never by leaving a list out.
        return Err("repos and branches must each name at least one glob".into());
    }
    if env.production == Some(true) && env.transient == Some(true) {
        // End users rely on a production environment; a transient one is
        // expected to disappear. GitHub would take both: say which.
        return Err("an environment is production or transient, not both".into());
    }
    if let Some(gh) = &env.oidc_environment {
        // GitHub's own bound on an environment name.
        if gh.trim().is_empty()
            || gh.chars().count() > GITHUB_ENVIRONMENT_CHARS_MAX
            || gh.chars().any(char::is_control)
        {
            return Err(format!(
                "oidc_environment is a GitHub environment's name (1 to {GITHUB_ENVIRONMENT_CHARS_MAX} characters)"
            ));
        }
    }
    if env.repos.iter().any(|r| !r.contains('/')) {
        return Err("a repos glob is owner/name (\"acme/*\" for an organization)".into());
    }
    for secret in &env.secrets {
        if !secret
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!("secret name {secret:?} must be [A-Za-z0-9_]+"));
        }
        if !deploy_may_read(secret) {
            return Err(format!(
                "secret {secret:?} is one of Sluice's own credentials; no deploy may read it"
            ));
        }
    }
    Ok(())
}

/// An environment name: what `[deploy] environment` may say.
pub fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}
