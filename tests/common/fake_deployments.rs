//! `FakeGitHub`'s deployments and deployment statuses, with GitHub's shapes
//! and status codes (REST "Deployments", "Deployment statuses"), as strict
//! as the rest of the fake: what Sluice must always send (`auto_merge:
//! false`, `required_contexts: []`, a payload object) is refused otherwise
//! and recorded as unexpected.
#![allow(dead_code)]

use std::collections::HashMap;

use serde_json::{json, Value};
use sluice::net::{HttpRequest, HttpResponse};

use super::fakes::{not_found, reply, FakeGitHub, APP_ID};

/// GitHub's documented maximum for a status description.
pub const DESCRIPTION_CHARS_MAX: usize = 140;
/// GitHub's maximum length of an environment name.
const ENVIRONMENT_CHARS_MAX: usize = 255;
const STATES: [&str; 7] = [
    "error",
    "failure",
    "inactive",
    "in_progress",
    "queued",
    "pending",
    "success",
];

/// A deployment as GitHub keeps it, with every status it was given.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub id: u64,
    pub repo: String,
    pub sha: String,
    pub task: String,
    pub environment: String,
    pub payload: Value,
    pub description: Option<String>,
    pub production: bool,
    pub transient: bool,
    /// The App that created it (APP_ID for Sluice's own).
    pub app_id: u64,
    pub statuses: Vec<DeploymentStatus>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DeploymentStatus {
    pub id: u64,
    pub state: String,
    pub description: String,
    pub log_url: Option<String>,
    pub environment_url: Option<String>,
    /// Added by GitHub's `auto_inactive` rule, not by a request.
    pub auto: bool,
}

impl Deployment {
    /// Its states, oldest first.
    pub fn states(&self) -> Vec<&str> {
        self.statuses.iter().map(|s| s.state.as_str()).collect()
    }

    pub fn latest(&self) -> Option<&DeploymentStatus> {
        self.statuses.last()
    }

    pub fn execution(&self) -> Option<&str> {
        self.payload["sluice"]["execution"].as_str()
    }

    pub fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "url": format!("https://api.github.com/repos/{}/deployments/{}", self.repo, self.id),
            "sha": self.sha,
            "ref": self.sha,
            "task": self.task,
            "payload": self.payload,
            "original_environment": self.environment,
            "environment": self.environment,
            "description": self.description,
            "creator": { "login": "sluice[bot]", "type": "Bot" },
            "transient_environment": self.transient,
            "production_environment": self.production,
            "performed_via_github_app": { "id": self.app_id, "slug": "sluice" },
        })
    }
}

impl DeploymentStatus {
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "state": self.state,
            "description": self.description,
            "log_url": self.log_url.clone().unwrap_or_default(),
            "target_url": self.log_url.clone().unwrap_or_default(),
            "environment_url": self.environment_url.clone().unwrap_or_default(),
            "creator": { "login": "sluice[bot]", "type": "Bot" },
        })
    }
}

fn body_of(req: &HttpRequest) -> Option<Value> {
    req.body
        .as_deref()
        .and_then(|b| serde_json::from_str::<Value>(b).ok())
}

/// A list page: `per_page` (at most 100, default 30) newest first.
fn page<T: Clone>(mut items: Vec<T>, query: &HashMap<String, String>) -> Vec<T> {
    let per_page = query
        .get("per_page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(30)
        .clamp(1, 100);
    items.reverse();
    items.truncate(per_page);
    items
}

fn invalid(message: &str) -> HttpResponse {
    reply(
        422,
        json!({ "message": "Validation Failed", "errors": [{ "message": message }] }),
    )
}

impl FakeGitHub {
    // --- what the test reads back ---

    pub fn deployments_on(&self, sha: &str) -> Vec<Deployment> {
        let st = self.st.borrow();
        st.deployments
            .iter()
            .filter(|d| d.sha == sha)
            .cloned()
            .collect()
    }

    pub fn only_deployment(&self, sha: &str) -> Deployment {
        let all = self.deployments_on(sha);
        assert_eq!(all.len(), 1, "exactly one deployment of {sha}: {all:#?}");
        all.into_iter().next().unwrap()
    }

    /// The one deployment of `sha` that Sluice (APP_ID) made.
    pub fn only_deployment_of_ours(&self, sha: &str) -> Deployment {
        let ours: Vec<Deployment> = self
            .deployments_on(sha)
            .into_iter()
            .filter(|d| d.app_id.to_string() == APP_ID)
            .collect();
        assert_eq!(
            ours.len(),
            1,
            "exactly one deployment of {sha} by Sluice: {ours:#?}"
        );
        ours.into_iter().next().unwrap()
    }

    pub fn all_deployments(&self) -> Vec<Deployment> {
        self.st.borrow().deployments.clone()
    }

    /// The installation has not granted `permission`: a token asking for it
    /// is refused (422), as GitHub refuses one.
    pub fn withhold(&self, permission: &str) {
        self.st.borrow_mut().withheld.insert(permission.into());
    }

    /// A deployment another App made with Sluice's payload: Sluice must
    /// neither find nor update it.
    pub fn foreign_deployment(&self, repo: &str, sha: &str, environment: &str, execution: &str) {
        let mut st = self.st.borrow_mut();
        let id = 7000 + st.deployments.len() as u64 + 1;
        st.deployments.push(Deployment {
            id,
            repo: repo.into(),
            sha: sha.into(),
            task: "deploy".into(),
            environment: environment.into(),
            payload: json!({ "sluice": { "execution": execution } }),
            description: None,
            production: false,
            transient: false,
            app_id: 999,
            statuses: Vec::new(),
        });
    }

    // --- serving ---

    pub fn create_deployment(&self, req: &HttpRequest, repo: &str) -> HttpResponse {
        let Some(body) = body_of(req) else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        if body["auto_merge"] != json!(false) || body["required_contexts"] != json!([]) {
            return self.refuse(
                req,
                422,
                "Sluice must send auto_merge false and required_contexts []",
            );
        }
        if !body["payload"].is_object() {
            return self.refuse(req, 422, "Sluice's payload is an object");
        }
        let Some(git_ref) = body["ref"].as_str() else {
            return invalid("\"ref\" wasn't supplied.");
        };
        let environment = body["environment"].as_str().unwrap_or("production");
        if environment.is_empty() || environment.chars().count() > ENVIRONMENT_CHARS_MAX {
            return invalid("environment is invalid");
        }
        let flag = |k: &str| body[k].as_bool();
        let mut st = self.st.borrow_mut();
        if !st
            .commits
            .contains_key(&(repo.to_owned(), git_ref.to_owned()))
        {
            return reply(
                422,
                json!({ "message": format!("No ref found for: {git_ref}") }),
            );
        }
        let d = Deployment {
            id: 5000 + st.deployments.len() as u64 + 1,
            repo: repo.to_owned(),
            sha: git_ref.to_owned(),
            task: body["task"].as_str().unwrap_or("deploy").to_owned(),
            environment: environment.to_owned(),
            payload: body["payload"].clone(),
            description: body["description"].as_str().map(str::to_owned),
            // GitHub's defaults: production only for `production`.
            production: flag("production_environment").unwrap_or(environment == "production"),
            transient: flag("transient_environment").unwrap_or(false),
            app_id: APP_ID.parse().expect("APP_ID is a number"),
            statuses: Vec::new(),
        };
        let answer = d.to_json();
        st.deployments.push(d);
        reply(201, answer)
    }

    pub fn list_deployments(&self, repo: &str, query: &HashMap<String, String>) -> HttpResponse {
        let st = self.st.borrow();
        let matches = |d: &&Deployment| {
            d.repo == repo
                && query.get("sha").is_none_or(|v| *v == d.sha)
                && query.get("ref").is_none_or(|v| *v == d.sha)
                && query.get("task").is_none_or(|v| *v == d.task)
                && query.get("environment").is_none_or(|v| *v == d.environment)
        };
        let found: Vec<Value> = st
            .deployments
            .iter()
            .filter(matches)
            .map(Deployment::to_json)
            .collect();
        reply(200, Value::Array(page(found, query)))
    }

    pub fn list_deployment_statuses(
        &self,
        repo: &str,
        id: &str,
        query: &HashMap<String, String>,
    ) -> HttpResponse {
        let st = self.st.borrow();
        let Some(d) = st
            .deployments
            .iter()
            .find(|d| d.repo == repo && d.id.to_string() == id)
        else {
            return not_found();
        };
        let all: Vec<Value> = d.statuses.iter().map(DeploymentStatus::to_json).collect();
        reply(200, Value::Array(page(all, query)))
    }

    pub fn create_deployment_status(
        &self,
        req: &HttpRequest,
        repo: &str,
        id: &str,
    ) -> HttpResponse {
        let Some(body) = body_of(req) else {
            return self.refuse(req, 400, "Problems parsing JSON");
        };
        let state = body["state"].as_str().unwrap_or_default().to_owned();
        if !STATES.contains(&state.as_str()) {
            return invalid(&format!("state {state:?} is not one of {STATES:?}"));
        }
        let description = body["description"].as_str().unwrap_or_default().to_owned();
        if description.chars().count() > DESCRIPTION_CHARS_MAX {
            return invalid("description is too long (maximum is 140 characters)");
        }
        let url = |k: &str| {
            body[k]
                .as_str()
                .filter(|u| !u.is_empty())
                .map(str::to_owned)
        };
        let auto_inactive = body["auto_inactive"].as_bool().unwrap_or(true);
        let mut st = self.st.borrow_mut();
        let status_id = 8000
            + st.deployments
                .iter()
                .map(|d| d.statuses.len())
                .sum::<usize>() as u64;
        let Some(at) = st
            .deployments
            .iter()
            .position(|d| d.repo == repo && d.id.to_string() == id)
        else {
            return not_found();
        };
        let status = DeploymentStatus {
            id: status_id + 1,
            state: state.clone(),
            description,
            log_url: url("log_url"),
            environment_url: url("environment_url"),
            auto: false,
        };
        let answer = status.to_json();
        st.deployments[at].statuses.push(status);
        if state == "success" && auto_inactive {
            auto_inactivate(&mut st.deployments, at, status_id + 2);
        }
        reply(201, answer)
    }
}

/// GitHub's `auto_inactive`, as documented: a `success` marks every prior
/// non-transient, non-production deployment of the repository's same
/// environment whose latest state is `success` inactive (the README's
/// "Deployments on GitHub" says what that means for production
/// environments). `tools/github-standin` applies the same rule.
fn auto_inactivate(deployments: &mut [Deployment], at: usize, mut next_id: u64) {
    let (repo, environment, id) = {
        let d = &deployments[at];
        (d.repo.clone(), d.environment.clone(), d.id)
    };
    for d in deployments.iter_mut() {
        let prior = d.id < id
            && d.repo == repo
            && d.environment == environment
            && !d.transient
            && !d.production;
        if prior && d.latest().is_some_and(|s| s.state == "success") {
            d.statuses.push(DeploymentStatus {
                id: next_id,
                state: "inactive".into(),
                description: String::new(),
                log_url: None,
                environment_url: None,
                auto: true,
            });
            next_id += 1;
        }
    }
}
