//! GitHub deployments and their statuses (REST "Deployments" and
//! "Deployment statuses"): what a deploy execution records so that GitHub's
//! own views (a repository's Environments panel, a commit's deployment
//! history) show what Sluice deployed, from which commit, and how it ended.
//!
//! Every call uses a token of its own with `deployments: write` and nothing
//! else: an installation that has not granted the permission yet (an App
//! upgraded to ask for it waits for each owner's approval) refuses only
//! these calls, never the check runs and contents the API token serves.
//!
//! Observe before acting, as check runs do: a deployment is found by its
//! payload's execution id (and this App's id) before one is created, and a
//! deployment's latest state is there to read before a status is posted
//! (`runs::deployment` posts only what is not there already).

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::client::{seg, segs, GitHub, GitHubError};

/// What deployment calls need, and nothing more.
pub const DEPLOYMENTS_PERMISSIONS: &[(&str, &str)] = &[("deployments", "write")];
/// GitHub's documented maximum for a deployment status description; a
/// longer one is refused with 422.
pub const DESCRIPTION_CHARS_MAX: usize = 140;
/// Deployments listed per lookup, GitHub's maximum page. The list is newest
/// first: the one an execution created is among the newest hundred of its
/// commit (and environment) unless a hundred deploys of the same commit
/// followed it before the lookup, far beyond any replay's window.
const DEPLOYMENTS_PER_PAGE: u32 = 100;
/// Statuses read to find a deployment's latest (GitHub's maximum page): a
/// deploy posts at most four per generation, and GitHub's `auto_inactive`
/// one more.
const STATUSES_PER_PAGE: u32 = 100;
/// The task Sluice's deployments carry (GitHub's default, said explicitly so
/// the lookup can filter on it).
pub const TASK: &str = "deploy";
/// The payload key naming the execution and its generation
/// (`{"sluice": {"execution": id, "generation": n}}`).
const PAYLOAD_KEY: &str = "sluice";

/// A deployment status's state, as GitHub names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeploymentState {
    Error,
    Failure,
    Inactive,
    InProgress,
    Queued,
    Pending,
    Success,
}

impl DeploymentState {
    pub const ALL: [DeploymentState; 7] = [
        DeploymentState::Error,
        DeploymentState::Failure,
        DeploymentState::Inactive,
        DeploymentState::InProgress,
        DeploymentState::Queued,
        DeploymentState::Pending,
        DeploymentState::Success,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentState::Error => "error",
            DeploymentState::Failure => "failure",
            DeploymentState::Inactive => "inactive",
            DeploymentState::InProgress => "in_progress",
            DeploymentState::Queued => "queued",
            DeploymentState::Pending => "pending",
            DeploymentState::Success => "success",
        }
    }

    /// A state GitHub may add later is not one of ours: None.
    pub fn parse(s: &str) -> Option<DeploymentState> {
        DeploymentState::ALL.into_iter().find(|d| d.as_str() == s)
    }

    /// The deployment has ended (nothing is running for it).
    pub fn is_terminal(self) -> bool {
        !matches!(
            self,
            DeploymentState::InProgress | DeploymentState::Queued | DeploymentState::Pending
        )
    }
}

/// A deployment to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDeployment<'a> {
    /// The commit deployed: the deployment's `ref` (a rollback is a new
    /// deployment of the older commit).
    pub sha: &'a str,
    pub environment: &'a str,
    /// The Sluice execution (instance id) the payload names.
    pub execution_id: &'a str,
    /// Its generation (0, then one more per operator restart): a restart
    /// that runs the deploy again is a deployment of its own.
    pub generation: u32,
    pub description: &'a str,
    /// `production_environment`; None leaves GitHub's default (true only
    /// for an environment named `production`).
    pub production: Option<bool>,
    /// `transient_environment`; None leaves GitHub's default (false).
    pub transient: Option<bool>,
}

/// A status to post.
#[derive(Debug, Clone, PartialEq)]
pub struct NewStatus<'a> {
    pub state: DeploymentState,
    /// Clipped to `DESCRIPTION_CHARS_MAX` characters.
    pub description: &'a str,
    pub log_url: Option<&'a str>,
    pub environment_url: Option<&'a str>,
}

#[derive(Deserialize)]
struct DeploymentAnswer {
    id: u64,
    #[serde(default)]
    payload: Value,
    /// The App that created it, when an App did.
    #[serde(default)]
    performed_via_github_app: Option<AppRef>,
}

#[derive(Deserialize)]
struct AppRef {
    id: u64,
}

/// A deployment this App made for an execution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub id: u64,
    /// The execution's generation that made it (0 when the payload has
    /// none).
    pub generation: u32,
}

#[derive(Deserialize)]
struct StatusAnswer {
    id: u64,
    state: String,
}

/// `s` cut to at most `max` characters (GitHub counts characters).
pub fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

impl GitHub<'_> {
    async fn deployments_auth(&self, installation: u64, repo: &str) -> Result<String, GitHubError> {
        let token = self
            .cached_token(installation, repo, "deployments", DEPLOYMENTS_PERMISSIONS)
            .await?;
        Ok(format!("token {}", token.expose()))
    }

    /// The deployments of `sha` this App created for `execution_id` (in
    /// `environment` when given), newest first.
    pub async fn find_deployments(
        &self,
        installation: u64,
        repo: &str,
        sha: &str,
        environment: Option<&str>,
        execution_id: &str,
    ) -> Result<Vec<Found>, GitHubError> {
        let auth = self.deployments_auth(installation, repo).await?;
        let mut path = format!(
            "/repos/{}/deployments?sha={}&task={}&per_page={DEPLOYMENTS_PER_PAGE}",
            segs(repo),
            seg(sha),
            seg(TASK)
        );
        if let Some(e) = environment {
            path.push_str(&format!("&environment={}", seg(e)));
        }
        let mut list: Vec<DeploymentAnswer> = self
            .get_with(&auth, &path, "deployments")
            .await?
            .ok_or_else(|| GitHubError::permanent(format!("no repository {repo}")))?;
        list.sort_by_key(|d| std::cmp::Reverse(d.id));
        Ok(list
            .into_iter()
            .filter(|d| {
                d.payload[PAYLOAD_KEY]["execution"].as_str() == Some(execution_id)
                    && self.made_by_us(d)
            })
            .map(|d| Found {
                id: d.id,
                generation: d.payload[PAYLOAD_KEY]["generation"]
                    .as_u64()
                    .and_then(|g| u32::try_from(g).ok())
                    .unwrap_or(0),
            })
            .collect())
    }

    /// Creates the deployment, or returns the one this execution already
    /// created (a replayed step whose answer was lost).
    pub async fn ensure_deployment(
        &self,
        installation: u64,
        repo: &str,
        new: &NewDeployment<'_>,
    ) -> Result<u64, GitHubError> {
        let found = self
            .find_deployments(
                installation,
                repo,
                new.sha,
                Some(new.environment),
                new.execution_id,
            )
            .await?;
        if let Some(f) = found.iter().find(|f| f.generation == new.generation) {
            return Ok(f.id);
        }
        let auth = self.deployments_auth(installation, repo).await?;
        let mut body = json!({
            "ref": new.sha,
            "task": TASK,
            // Never merge the default branch into the ref, and deploy
            // whatever the commit's statuses say: the deploy is already
            // decided (the grant, the queue) when it is recorded.
            "auto_merge": false,
            "required_contexts": [],
            "payload": {
                PAYLOAD_KEY: { "execution": new.execution_id, "generation": new.generation }
            },
            "environment": new.environment,
            "description": clip(new.description, DESCRIPTION_CHARS_MAX),
        });
        if let Some(p) = new.production {
            body["production_environment"] = json!(p);
        }
        if let Some(t) = new.transient {
            body["transient_environment"] = json!(t);
        }
        let path = format!("/repos/{}/deployments", segs(repo));
        let resp = self
            .call("POST", &path, &auth, Some(body.to_string()))
            .await?;
        match resp.status {
            // 202: GitHub merged the default branch into the ref instead;
            // 409: that merge conflicted. Neither can happen with
            // `auto_merge: false`, and neither is a deployment.
            202 | 409 => Err(GitHubError {
                status: Some(resp.status),
                message: format!("no deployment was created: {}", resp.body),
                permanent: true,
            }),
            _ => {
                let created: DeploymentAnswer =
                    Self::decode(&Self::expect_ok(resp)?, "deployment")?;
                Ok(created.id)
            }
        }
    }

    /// The deployment's latest state (None before its first status).
    pub async fn deployment_state(
        &self,
        installation: u64,
        repo: &str,
        id: u64,
    ) -> Result<Option<DeploymentState>, GitHubError> {
        let history = self.deployment_history(installation, repo, id).await?;
        Ok(history.first().copied().flatten())
    }

    /// The deployment's states, newest first (None for a state GitHub may
    /// add later).
    pub async fn deployment_history(
        &self,
        installation: u64,
        repo: &str,
        id: u64,
    ) -> Result<Vec<Option<DeploymentState>>, GitHubError> {
        let auth = self.deployments_auth(installation, repo).await?;
        let path = format!(
            "/repos/{}/deployments/{id}/statuses?per_page={STATUSES_PER_PAGE}",
            segs(repo)
        );
        let mut statuses: Vec<StatusAnswer> = self
            .get_with(&auth, &path, "deployment statuses")
            .await?
            .ok_or_else(|| GitHubError::permanent(format!("deployment {id} is gone")))?;
        // The newest is the highest id, whatever order the page is in.
        statuses.sort_by_key(|s| std::cmp::Reverse(s.id));
        Ok(statuses
            .iter()
            .map(|s| DeploymentState::parse(&s.state))
            .collect())
    }

    /// The deployments this App made in `environment` (any commit), newest
    /// first: the newest `DEPLOYMENTS_PER_PAGE` of the environment.
    pub async fn environment_deployments(
        &self,
        installation: u64,
        repo: &str,
        environment: &str,
    ) -> Result<Vec<u64>, GitHubError> {
        let auth = self.deployments_auth(installation, repo).await?;
        let path = format!(
            "/repos/{}/deployments?environment={}&task={}&per_page={DEPLOYMENTS_PER_PAGE}",
            segs(repo),
            seg(environment),
            seg(TASK)
        );
        let list: Vec<DeploymentAnswer> = self
            .get_with(&auth, &path, "deployments")
            .await?
            .ok_or_else(|| GitHubError::permanent(format!("no repository {repo}")))?;
        let mut ours: Vec<u64> = list
            .into_iter()
            .filter(|d| self.made_by_us(d))
            .map(|d| d.id)
            .collect();
        ours.sort_by_key(|id| std::cmp::Reverse(*id));
        Ok(ours)
    }

    /// Whether this App created the deployment.
    fn made_by_us(&self, d: &DeploymentAnswer) -> bool {
        let app_id = self.app_id.as_deref().unwrap_or_default();
        d.performed_via_github_app
            .as_ref()
            .is_some_and(|a| a.id.to_string() == app_id)
    }

    /// Posts a status (observe first with `deployment_state`: a status
    /// posted twice is two statuses). A `success` keeps GitHub's
    /// `auto_inactive` (said explicitly): older successful deployments of
    /// the environment become inactive.
    pub async fn create_deployment_status(
        &self,
        installation: u64,
        repo: &str,
        id: u64,
        status: &NewStatus<'_>,
    ) -> Result<(), GitHubError> {
        let auth = self.deployments_auth(installation, repo).await?;
        let mut body = json!({
            "state": status.state,
            "description": clip(status.description, DESCRIPTION_CHARS_MAX),
        });
        if let Some(u) = status.log_url {
            body["log_url"] = json!(u);
        }
        if let Some(u) = status.environment_url {
            body["environment_url"] = json!(u);
        }
        if status.state == DeploymentState::Success {
            body["auto_inactive"] = json!(true);
        }
        let path = format!("/repos/{}/deployments/{id}/statuses", segs(repo));
        let resp = self
            .call("POST", &path, &auth, Some(body.to_string()))
            .await?;
        Self::expect_ok(resp).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_and_only_three_are_live() {
        for s in DeploymentState::ALL {
            assert_eq!(DeploymentState::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), json!(s.as_str()));
        }
        let live: Vec<_> = DeploymentState::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .collect();
        assert_eq!(
            live,
            [
                DeploymentState::InProgress,
                DeploymentState::Queued,
                DeploymentState::Pending
            ]
        );
        assert_eq!(DeploymentState::parse("waiting"), None);
    }

    #[test]
    fn clip_counts_characters() {
        assert_eq!(clip("ééé", 2), "éé");
        assert_eq!(clip("ab", 140), "ab");
    }
}
