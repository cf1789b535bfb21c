//! Everything that knows GitHub's JSON: webhook signatures and payloads,
//! the App JWT and installation tokens, and the REST calls Sluice makes.
//!
//! Architecture invariant: no other module parses or builds GitHub JSON.

pub mod app;
pub mod client;
pub mod deployments;
pub mod metered;
pub mod previews;
pub mod releases;
pub mod webhook;

pub use client::{CheckAction, CheckConclusion, CheckOutput, CheckRunUpdate, GitHub, GitHubError};
pub use deployments::{DeploymentState, NewDeployment, NewStatus};

/// Where GitHub serves git when `GITHUB_GIT_URL` is unset.
pub const GIT_URL_DEFAULT: &str = "https://github.com";

/// The clone URL of `repo` (`owner/name`) on the GitHub at `git_url`: the
/// only source of a URL the sandbox clones from, so no request or payload
/// can send the installation token to a host of its choosing.
pub fn clone_url(git_url: &str, repo: &str) -> Result<String, String> {
    let valid = |part: &str| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    match repo.split_once('/') {
        Some((owner, name)) if valid(owner) && valid(name) => Ok(format!(
            "{}/{owner}/{name}.git",
            git_url.trim_end_matches('/')
        )),
        _ => Err(format!("{repo:?} is not an owner/name repository")),
    }
}
