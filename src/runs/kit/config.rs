//! `.sluice.toml`: what a repository asks Sluice to run. `[check]` is read
//! at the commit being checked (so a change to it is tested by the same
//! commit); `[deploy]` on the default branch, where only those who may
//! merge can write it, and it can only select an environment the operator
//! grants (`runs::environment`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use super::duration::{command_timeout_ms, parse_duration_ms};
use super::environment;
pub use super::jobspec::JobConfig;
pub use super::schedule::ScheduleConfig;
use crate::limits::CONFIG_BYTES_MAX;
use crate::sandbox::image;

pub const CONFIG_PATH: &str = ".sluice.toml";

/// Why `[deploy] secrets` is refused, and what replaces it.
pub const SECRETS_MOVED: &str = "[deploy] secrets is no longer read from .sluice.toml: anyone \
     who can push a branch could export them. Ask the operator of this Sluice to grant the \
     secrets in an environment (README: Environments) and select it with \
     [deploy] environment = \"<name>\".";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepoConfig {
    /// Bots whose events start nothing here (`"renovate[bot]"`): other
    /// bots are treated like users.
    #[serde(default)]
    pub ignore_bots: Vec<String>,
    #[serde(default)]
    pub check: Option<CheckConfig>,
    /// `[jobs.<name>]`: the commit's pipeline (`runs::pipeline`), read at
    /// the commit like `[check]`, which it replaces.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub jobs: BTreeMap<String, JobConfig>,
    #[serde(default)]
    pub deploy: Option<DeployConfig>,
    /// `[[schedule]]`, read on the default branch (`runs::schedule`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule: Vec<ScheduleConfig>,
    /// `[release_notes]`, read on the default branch (`runs::release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_notes: Option<ReleaseNotesConfig>,
    /// `[preview]`, read on the default branch (`runs::preview`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<PreviewConfig>,
}

/// `[release_notes]`: which pushed tags get notes and a release, who
/// approves them and how long they wait.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseNotesConfig {
    /// A glob over tag names (`*` any run of characters, `?` one): `"v*"`.
    pub tags: String,
    /// GitHub logins who may approve or reject; none named: anyone with
    /// write access.
    #[serde(default)]
    pub approvers: Vec<String>,
    /// Go-style duration; default 72 h (`runs::release`).
    #[serde(default)]
    pub confirmation_timeout: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckConfig {
    /// A shell command run at the repository root.
    pub command: String,
    /// Go-style duration ("30m"); default 30 minutes, at most 1 hour.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Globs (`src/**`, `*.md`; `**` spans directories) of the files whose
    /// change needs this check: a pull request or merge group that changes
    /// none of them concludes `skipped` ("no matching change"), which
    /// branch protection counts as passed. Empty: every change runs it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// The sandbox image class (`sandbox::image`); default `base`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A Containers instance type the class allows; default its first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
}

/// Most `[check] paths` globs: a filter is a few directories, and the
/// match costs globs times changed files.
pub const CHECK_PATHS_MAX: usize = super::jobspec::PATHS_MAX;
/// Longest `[check] paths` glob: a path in a repository, with room.
pub const CHECK_PATH_CHARS_MAX: usize = 512;

/// Whether a change to `files` needs the check `paths` filters (every
/// change does when `paths` is empty).
pub fn paths_match(paths: &[String], files: &[String]) -> bool {
    paths.is_empty()
        || files
            .iter()
            .any(|f| paths.iter().any(|g| glob_match::glob_match(g, f)))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeployConfig {
    /// The branch whose pushes deploy.
    pub branch: String,
    pub command: String,
    /// The operator's environment to deploy to (`runs::environment`): its
    /// grant decides whether this branch may, and which secrets it gets.
    #[serde(default)]
    pub environment: Option<String>,
    /// Refused: secrets were once named here, which let any pusher export
    /// them. Kept so the refusal can say what to do instead.
    #[serde(default)]
    pub secrets: Option<Vec<String>>,
    /// Distinguishes two deploy lanes of one branch (ADR-0004's checkLabel).
    /// (ADR-0004: docs/adr/0004-serialized-run-groups.md)
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub timeout: Option<String>,
    /// Wait for an operator's confirmation (event `deploy-confirm`) before
    /// joining the queue; bounded by `[deploy.queue] confirmation_timeout`.
    #[serde(default)]
    pub confirm: Option<bool>,
    #[serde(default)]
    pub queue: Option<QueueConfig>,
    /// Jobs of the pushed commit that must pass before the deploy joins
    /// the queue: `["check"]` (the `[check]`, or with `[jobs]` the whole
    /// pipeline) or jobs by name (`["test"]`). The deploy starts the
    /// commit's pipeline and waits for it, holding nothing; a failure skips
    /// the deploy (`needs_failed`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
}

/// What `[deploy] needs = ["check"]` names: the `[check]`, or the whole
/// pipeline its check run `sluice/check` sums up.
pub const WHOLE_CHECK: &str = "check";

/// The queue policy of a deploy group; every setting off when absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    #[serde(default)]
    pub supersede: Option<bool>,
    #[serde(default)]
    pub queued_timeout: Option<String>,
    #[serde(default)]
    pub supersede_after: Option<String>,
    #[serde(default)]
    pub confirmation_timeout: Option<String>,
}

/// What reading the config at a commit found. Journaled as a step result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ConfigState {
    Missing,
    Invalid { message: String },
    Valid { config: RepoConfig },
}

pub fn parse(text: &str) -> ConfigState {
    if text.len() > CONFIG_BYTES_MAX {
        return ConfigState::Invalid {
            message: format!("{CONFIG_PATH} is larger than {CONFIG_BYTES_MAX} bytes"),
        };
    }
    let config: RepoConfig = match toml::from_str(text) {
        Ok(c) => c,
        Err(e) => {
            return ConfigState::Invalid {
                message: e.to_string(),
            }
        }
    };
    if let Err(message) = validate(&config) {
        return ConfigState::Invalid { message };
    }
    ConfigState::Valid { config }
}

/// A release nobody answers is bounded (ADR-0001's reference: 72 h).
/// (ADR-0001: docs/adr/0001-durable-execution-scope.md)
pub const RELEASE_WINDOW_MS_DEFAULT: i64 = crate::limits::HUMAN_DECISION_WINDOW_MS_DEFAULT;
/// The longest window a repository may ask for: a replan restarts it, and
/// the ceiling (run start + waits + budget) must still fit.
pub const RELEASE_WINDOW_MS_MAX: i64 = 5 * 24 * 3600 * 1000;

/// The window `[release_notes] confirmation_timeout` asks for.
pub fn release_window_ms(cfg: &ReleaseNotesConfig) -> Result<i64, String> {
    let ms = match cfg.confirmation_timeout.as_deref() {
        None => return Ok(RELEASE_WINDOW_MS_DEFAULT),
        Some(v) => parse_duration_ms(v)?,
    };
    if !(1..=RELEASE_WINDOW_MS_MAX).contains(&ms) {
        return Err(format!(
            "{ms} ms is outside 1 ms to {} hours",
            RELEASE_WINDOW_MS_MAX / 3_600_000
        ));
    }
    Ok(ms)
}

/// `[release_notes]` as `config::parse` checks it.
fn validate_release_notes(cfg: &ReleaseNotesConfig) -> Result<(), String> {
    if cfg.tags.trim().is_empty() {
        return Err("[release_notes] tags is empty".into());
    }
    if cfg.approvers.iter().any(|a| a.trim().is_empty()) {
        return Err("[release_notes] approvers names an empty login".into());
    }
    release_window_ms(cfg)
        .map(|_| ())
        .map_err(|e| format!("[release_notes] confirmation_timeout: {e}"))
}

fn validate_paths(paths: &[String]) -> Result<(), String> {
    if paths.len() > CHECK_PATHS_MAX {
        return Err(format!(
            "[check] paths has {} globs, at most {CHECK_PATHS_MAX}",
            paths.len()
        ));
    }
    match paths
        .iter()
        .find(|g| g.trim().is_empty() || g.len() > CHECK_PATH_CHARS_MAX)
    {
        Some(g) => Err(format!(
            "[check] paths: {g:?} is not a glob of at most {CHECK_PATH_CHARS_MAX} characters"
        )),
        None => Ok(()),
    }
}

fn validate_needs(needs: &[String], c: &RepoConfig) -> Result<(), String> {
    if needs.is_empty() {
        return Ok(());
    }
    if c.check.is_none() && c.jobs.is_empty() {
        return Err("[deploy] needs names jobs, but this file has no [check] or [jobs]".into());
    }
    let known = |j: &str| j == WHOLE_CHECK || c.jobs.contains_key(j);
    if let Some(job) = needs.iter().find(|j| !known(j)) {
        let mut jobs: Vec<&str> = c.jobs.keys().map(String::as_str).collect();
        jobs.insert(0, WHOLE_CHECK);
        return Err(format!(
            "[deploy] needs names {job:?}, which is no job (jobs: {})",
            jobs.join(", ")
        ));
    }
    Ok(())
}

fn validate(c: &RepoConfig) -> Result<(), String> {
    validate_preview(c.preview.as_ref())?;
    super::schedule::validate(&c.schedule)?;
    super::jobspec::validate(&c.jobs, c.check.is_some())?;
    if let Some(r) = &c.release_notes {
        validate_release_notes(r)?;
    }
    if let Some(check) = &c.check {
        if check.command.trim().is_empty() {
            return Err("[check] command is empty".into());
        }
        command_timeout_ms(check.timeout.as_deref())?;
        validate_paths(&check.paths)?;
        image::select(check.image.as_deref(), check.instance_type.as_deref())
            .map_err(|e| format!("[check] {e}"))?;
    }
    if let Some(d) = &c.deploy {
        if d.command.trim().is_empty() {
            return Err("[deploy] command is empty".into());
        }
        if d.branch.trim().is_empty() {
            return Err("[deploy] branch is empty".into());
        }
        command_timeout_ms(d.timeout.as_deref())?;
        validate_needs(&d.needs, c)?;
        if d.secrets.is_some() {
            return Err(SECRETS_MOVED.into());
        }
        if let Some(e) = d
            .environment
            .as_deref()
            .filter(|e| !environment::is_name(e))
        {
            return Err(format!(
                "[deploy] environment {e:?} is not an environment name ([a-z0-9_-]+)"
            ));
        }
        if let Some(q) = &d.queue {
            for (name, v) in [
                ("queued_timeout", &q.queued_timeout),
                ("supersede_after", &q.supersede_after),
                ("confirmation_timeout", &q.confirmation_timeout),
            ] {
                if let Some(v) = v {
                    parse_duration_ms(v).map_err(|e| format!("[deploy.queue] {name}: {e}"))?;
                }
            }
        }
    }
    Ok(())
}

// --- `[preview]`: pull-request previews (issue 24) ---

/// `[preview]`: a deploy of each same-repository pull request's head into a
/// transient environment of its own (`pr-<n>`), torn down when the pull
/// request closes. Read on the default branch: it selects an operator
/// environment, and so receives its secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewConfig {
    /// Deploys the pull request's head; prints `SLUICE_ENVIRONMENT_URL=`.
    pub command: String,
    /// Removes what `command` deployed (the pull request closed).
    pub teardown: String,
    /// The operator's environment (`runs::environment`), typically
    /// `transient = true`: its grant decides which repositories may use it,
    /// matching the pull request's head branch against its `branches`.
    #[serde(default)]
    pub environment: Option<String>,
    /// Each command's timeout (Go-style duration); default 30 minutes.
    #[serde(default)]
    pub timeout: Option<String>,
    /// Wait for an operator's confirmation (`deploy-confirm`) first.
    #[serde(default)]
    pub confirm: Option<bool>,
    /// How long an unanswered confirmation waits (default 72 h).
    #[serde(default)]
    pub confirmation_timeout: Option<String>,
}

fn validate_preview(p: Option<&PreviewConfig>) -> Result<(), String> {
    let Some(p) = p else {
        return Ok(());
    };
    if p.command.trim().is_empty() {
        return Err("[preview] command is empty".into());
    }
    if p.teardown.trim().is_empty() {
        return Err("[preview] teardown is empty".into());
    }
    command_timeout_ms(p.timeout.as_deref()).map_err(|e| format!("[preview] {e}"))?;
    if let Some(e) = p
        .environment
        .as_deref()
        .filter(|e| !environment::is_name(e))
    {
        return Err(format!(
            "[preview] environment {e:?} is not an environment name ([a-z0-9_-]+)"
        ));
    }
    if let Some(v) = &p.confirmation_timeout {
        let ms =
            parse_duration_ms(v).map_err(|e| format!("[preview] confirmation_timeout: {e}"))?;
        if !(1..=crate::limits::QUEUE_POLICY_MS_MAX).contains(&ms) {
            return Err(format!(
                "[preview] confirmation_timeout: {ms} ms is outside 1 ms to {} hours",
                crate::limits::QUEUE_POLICY_MS_MAX / 3_600_000
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploy_needs_name_jobs_that_exist() {
        let with = |check: &str, needs: &str| {
            let text =
                format!("{check}[deploy]\nbranch = \"main\"\ncommand = \"d\"\nneeds = {needs}\n");
            match parse(&text) {
                ConfigState::Invalid { message } => Some(message),
                _ => None,
            }
        };
        let check = "[check]\ncommand = \"t\"\n";
        assert_eq!(with(check, "[\"check\"]"), None);
        assert_eq!(with("", "[]"), None);
        assert!(with(check, "[\"lint\"]")
            .unwrap()
            .contains("\"lint\", which is no job"));
        assert!(with("", "[\"check\"]")
            .unwrap()
            .contains("no [check] or [jobs]"));
        let jobs = "[jobs.test]\ncommand = \"t\"\n";
        assert_eq!(with(jobs, "[\"test\", \"check\"]"), None);
        assert!(with(jobs, "[\"lint\"]")
            .unwrap()
            .contains("(jobs: check, test)"));
    }

    #[test]
    fn artifacts_are_globs_inside_the_workspace() {
        let with = |artifacts: &str| match parse(&format!(
            "[jobs.build]\ncommand = \"b\"\nartifacts = {artifacts}\n"
        )) {
            ConfigState::Invalid { message } => Some(message),
            _ => None,
        };
        assert_eq!(with("[\"dist/**\", \"reports/*.xml\"]"), None);
        for bad in [
            "[\"../up\"]",
            "[\"/etc/passwd\"]",
            "[\"\"]",
            "[\"a/../../b\"]",
        ] {
            let message = with(bad).unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(message.contains("[jobs.build] artifacts:"), "{message}");
        }
        let many: Vec<String> = (0..33).map(|i| format!("\"d{i}/**\"")).collect();
        assert!(with(&format!("[{}]", many.join(", ")))
            .unwrap()
            .contains("at most 32"));
    }

    #[test]
    fn a_job_runs_a_command_or_steps_never_both_nor_neither() {
        let with = |body: &str| match parse(&format!("[jobs.build]\n{body}\n")) {
            ConfigState::Invalid { message } => Some(message),
            _ => None,
        };
        assert_eq!(with("steps = [\"npm ci\", \"npm test\"]"), None);
        assert_eq!(with("steps = [\"npm ci\"]\nsnapshot = false"), None);
        let refused = [
            (
                "command = \"a\"\nsteps = [\"b\"]",
                "has both `command` and `steps`",
            ),
            ("timeout = \"1m\"", "needs a `command` or `steps`"),
            ("steps = []", "needs a `command` or `steps`"),
            ("steps = [\"a\", \" \"]", "steps[1] is empty"),
            (
                "command = \"a\"\nsnapshot = false",
                "`snapshot` is for `steps`",
            ),
            ("steps = [\"a\"]\nsnapshot = \"no\"", "snapshot"),
        ];
        for (body, says) in refused {
            let message = with(body).unwrap_or_else(|| panic!("{body} accepted"));
            assert!(message.contains(says), "{body}: {message}");
        }
        let many = vec!["\"x\""; crate::runs::kit::jobspec::STEPS_PER_JOB_MAX + 1].join(", ");
        assert!(with(&format!("steps = [{many}]"))
            .unwrap()
            .contains("at most 20"));
        let long = "x".repeat(crate::runs::kit::jobspec::STEP_CHARS_MAX + 1);
        assert!(with(&format!("steps = [\"{long}\"]")).is_some());
        let ConfigState::Valid { config } = parse("[jobs.build]\nsteps = [\"a\", \"b\"]\n") else {
            panic!("valid");
        };
        let job = &config.jobs["build"];
        assert_eq!(job.commands(), ["a", "b"]);
        assert!(job.snapshots(), "snapshots by default");
    }

    #[test]
    fn check_paths_select_the_changes_that_need_the_check() {
        let paths = vec!["src/**".to_owned(), "Cargo.*".to_owned()];
        let changed = |files: &[&str]| files.iter().map(|f| f.to_string()).collect::<Vec<_>>();
        assert!(paths_match(
            &paths,
            &changed(&["docs/a.md", "src/deep/x.rs"])
        ));
        assert!(paths_match(&paths, &changed(&["Cargo.lock"])));
        assert!(!paths_match(
            &paths,
            &changed(&["README.md", "docs/src/x.rs"])
        ));
        assert!(
            !paths_match(&paths, &[]),
            "nothing changed, nothing to check"
        );
        assert!(
            paths_match(&[], &changed(&["anything"])),
            "no paths: every change"
        );
        let refused =
            |paths: &str| match parse(&format!("[check]\ncommand = \"x\"\npaths = {paths}\n")) {
                ConfigState::Invalid { message } => Some(message),
                _ => None,
            };
        assert_eq!(refused("[\"src/**\"]"), None);
        assert!(refused("[\"\"]").unwrap().contains("[check] paths"));
        let many = format!("[{}]", vec!["\"a\""; CHECK_PATHS_MAX + 1].join(","));
        assert!(refused(&many).unwrap().contains("at most"));
        let long = format!("[\"{}\"]", "a".repeat(CHECK_PATH_CHARS_MAX + 1));
        assert!(refused(&long).is_some());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("30m"), Ok(1_800_000));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("72h"), Ok(259_200_000));
        for bad in ["", "m", "10", "10x", "1.5h", "99999999999999999999h"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn configs() {
        let ok = parse("[check]\ncommand = \"cargo test\"\ntimeout = \"10m\"\n");
        let ConfigState::Valid { config } = ok else {
            panic!("{ok:?}")
        };
        assert_eq!(config.check.unwrap().command, "cargo test");
        assert!(matches!(
            parse("[chek]\ncommand = \"x\""),
            ConfigState::Invalid { .. }
        ));
        assert!(matches!(
            parse("[check]\ncommand = \"\""),
            ConfigState::Invalid { .. }
        ));
        assert!(matches!(
            parse("[check]\ncommand = \"x\"\ntimeout = \"2h\""),
            ConfigState::Invalid { .. }
        ));
        assert!(matches!(parse("not toml ["), ConfigState::Invalid { .. }));
        let d = parse("[deploy]\nbranch = \"main\"\ncommand = \"./deploy\"\nenvironment = \"prod\"\n[deploy.queue]\nsupersede_after = \"30m\"\n");
        assert!(matches!(d, ConfigState::Valid { .. }), "{d:?}");
        assert!(matches!(
            parse("[deploy]\nbranch = \"main\"\ncommand = \"x\"\nenvironment = \"Prod Env\""),
            ConfigState::Invalid { .. }
        ));
    }

    #[test]
    fn image_classes_and_instance_types_are_checked_naming_what_exists() {
        let refused = |text: &str| match parse(text) {
            ConfigState::Invalid { message } => Some(message),
            _ => None,
        };
        let check = |extra: &str| format!("[check]\ncommand = \"x\"\n{extra}");
        let job = |extra: &str| format!("[jobs.build]\ncommand = \"x\"\n{extra}");
        // Unset: base on its first type, the instance's own sandbox.
        let ConfigState::Valid { config } = parse(&check("")) else {
            panic!("a plain [check] is valid")
        };
        let c = config.check.unwrap();
        let s = image::select(c.image.as_deref(), c.instance_type.as_deref()).unwrap();
        assert_eq!((s.class.name, s.instance_type.name), (image::BASE, "lite"));
        assert_eq!(s.address("inst"), "inst");
        for ok in [
            "image = \"node\"\n",
            "image = \"rust\"\ninstance_type = \"standard-2\"\n",
            "image = \"base\"\ninstance_type = \"lite\"\n",
        ] {
            assert_eq!(refused(&check(ok)), None, "{ok}");
            assert_eq!(refused(&job(ok)), None, "{ok}");
        }
        let unknown = refused(&check("image = \"python\"\n")).unwrap();
        assert_eq!(
            unknown,
            "[check] image \"python\" is no sandbox image class (classes: base, node, rust)"
        );
        let unknown = refused(&job("image = \"python\"\n")).unwrap();
        assert!(
            unknown.starts_with("[jobs.build] image \"python\""),
            "{unknown}"
        );
        let too_big = refused(&job("image = \"node\"\ninstance_type = \"standard-4\"\n"));
        assert_eq!(
            too_big.unwrap(),
            "[jobs.build] instance_type \"standard-4\" is not allowed for image \"node\" \
             (allowed: basic, standard-1)"
        );
        // A type without a class asks it of `base`.
        let base = refused(&check("instance_type = \"standard-2\"\n")).unwrap();
        assert!(
            base.contains("for image \"base\" (allowed: lite)"),
            "{base}"
        );
    }

    #[test]
    fn secrets_in_the_repository_are_refused_with_the_way_forward() {
        let text = "[deploy]\nbranch = \"main\"\ncommand = \"x\"\nsecrets = [\"CF_TOKEN\"]";
        assert_eq!(
            parse(text),
            ConfigState::Invalid {
                message: SECRETS_MOVED.into()
            }
        );
    }
}
