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
//! ```
//!
//! Every refusal a pusher sees is the same sentence, whether the
//! environment does not exist, does not allow the repository or branch, or
//! lacks a secret: nothing tells which environments or secrets exist.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::config::deploy_may_read;

/// Longest `ENVIRONMENTS` value: a Worker var is at most 5 KiB on the free
/// plan and 64 KiB (bindings in total) otherwise.
const ENVIRONMENTS_BYTES_MAX: usize = 64 * 1024;
/// Environments, and globs or secrets per environment, that one Worker
/// declares: far above any real account, small enough to scan per deploy.
const ENVIRONMENTS_MAX: usize = 64;
const LIST_ITEMS_MAX: usize = 64;

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
