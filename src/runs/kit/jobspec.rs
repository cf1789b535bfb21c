//! `[jobs.<name>]` as `.sluice.toml` writes it, and what makes it valid:
//! names, caps, `needs` naming jobs and forming no cycle. Below `config`
//! (which parses and validates it) and `pipeline` (which expands it).
//! Pure: no I/O here.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::duration::command_timeout_ms;

/// Most globs one `paths` list may hold (`[check]`'s and a job's): each is
/// matched against every changed file of the commit.
pub const PATHS_MAX: usize = 100;
/// Most jobs one pipeline may name: a pipeline is a handful of jobs, and
/// each is read, ordered and listed on every pass of its commit's parent.
pub const JOBS_MAX: usize = 20;
/// Most cells one job's matrix may expand to: each is a sandbox.
pub const MATRIX_CELLS_MAX: usize = 16;
/// Most shards one job may split into: each is a sandbox.
pub const SHARDS_MAX: u32 = 16;
/// Most units (cells × shards, over all jobs) one commit starts: what one
/// parent spawns and reads back in one index query (D1 binds at most 100
/// parameters), and what one push may ask of the sandbox pool.
pub const UNITS_MAX: usize = 64;
/// Longest job name: it is part of a check run name and an instance key.
pub const JOB_NAME_CHARS_MAX: usize = 40;
/// Longest matrix value: it is shown in the check run's name.
pub const MATRIX_VALUE_CHARS_MAX: usize = 64;

/// The prefix of every check run a job reports through (`sluice/<job>`).
pub const JOB_CHECK_PREFIX: &str = "sluice/";

/// Names a job may not take: the check runs of Sluice's other runs, and
/// `check`, whose check run (`sluice/check`) sums up a pipeline.
const RESERVED_JOB_NAMES: [&str; 3] = ["check", "deploy", "release-notes"];

/// `[jobs.<name>]`: one job of the commit's pipeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// A shell command run at the repository root (or `steps`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub command: String,
    /// `["npm ci", "npm run build", "npm test"]` instead of `command`: each
    /// a durable step with its own log, in one workspace, stopping at the
    /// first that fails (ADR-0015,
    /// `docs/adr/0015-multi-step-jobs-resume-from-snapshots.md`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<String>,
    /// Whether the workspace each step leaves is captured, so that a step
    /// after a lost container resumes from those bytes; default true. Off,
    /// a lost workspace runs the job again from its first step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<bool>,
    /// Go-style duration; default 30 minutes, at most 1 hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Jobs of the same commit that must pass (or be skipped by their
    /// `paths`) first; one that fails skips this job, naming it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// The events that run it; none named: every event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on: Vec<JobEvent>,
    /// As `[check] paths`: a change touching none of them skips the job.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// `{ node = ["20", "22"] }`: one unit per combination, each with
    /// `SLUICE_MATRIX_<KEY>` set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub matrix: BTreeMap<String, Vec<MatrixValue>>,
    /// Split over this many units, each with `SLUICE_SHARD_INDEX` (1-based)
    /// and `SLUICE_SHARD_TOTAL`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// Whether a failed unit cancels its live siblings; default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_fast: Option<bool>,
    /// The sandbox image class (`sandbox::image`); default `base`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// A Containers instance type the class allows; default its first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_type: Option<String>,
    /// `["dist/**"]`: the workspace's files these globs match are
    /// uploaded when the command passes, and unpacked into the workspace
    /// of every job that `needs` this one before its command
    /// (`runs::kit::artifacts`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// Dependency caches (`runs::kit::caches`): each restored before the
    /// command by a key derived from its `key_files`, saved after it passed
    /// when that exact key missed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<CacheConfig>,
}

/// `{ paths = ["node_modules", "~/.npm"], key_files = ["package-lock.json"] }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Directories (or files) in the checkout; `~/` is the command's home,
    /// which is the checkout too.
    pub paths: Vec<String>,
    /// Files whose content keys the cache (a lockfile).
    pub key_files: Vec<String>,
}

/// Caches one job may name: a language's dependencies and its tool's own
/// cache, for a couple of languages.
pub const CACHES_PER_JOB_MAX: usize = 4;
/// Paths or key files one cache may name.
pub const CACHE_ENTRIES_MAX: usize = 16;

/// A cache path or key file relative to the checkout: `~/` is the
/// command's home, which is the checkout.
fn in_checkout(p: &str) -> &str {
    p.strip_prefix("~/").unwrap_or(p).trim_end_matches('/')
}

impl CacheConfig {
    /// `paths` as the archive's globs: each path itself (a file) and all
    /// under it (a directory).
    pub fn globs(&self) -> Vec<String> {
        let paths = self.paths.iter().map(|p| in_checkout(p));
        paths
            .clone()
            .map(|p| format!("{p}/**"))
            .chain(paths.map(str::to_owned))
            .collect()
    }

    /// `key_files` relative to the checkout.
    pub fn key_paths(&self) -> Vec<String> {
        self.key_files
            .iter()
            .map(|p| in_checkout(p).to_owned())
            .collect()
    }
}

/// The event kinds `on` selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobEvent {
    PullRequest,
    /// A push's commit (a deploy's `needs`), a dispatch or a schedule.
    Push,
    MergeGroup,
}

/// A matrix value as TOML allows it to be written: `"20"`, `20`, `true`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MatrixValue {
    Text(String),
    Number(i64),
    Flag(bool),
}

impl MatrixValue {
    pub fn text(&self) -> String {
        match self {
            MatrixValue::Text(s) => s.clone(),
            MatrixValue::Number(n) => n.to_string(),
            MatrixValue::Flag(b) => b.to_string(),
        }
    }
}

/// `[jobs]` as `config::parse` checks it.
pub fn validate(jobs: &BTreeMap<String, JobConfig>, with_check: bool) -> Result<(), String> {
    if jobs.is_empty() {
        return Ok(());
    }
    if with_check {
        return Err(
            "[check] and [jobs] together: name every job [jobs.<name>]; \
                    sluice/check then sums up the pipeline"
                .into(),
        );
    }
    if jobs.len() > JOBS_MAX {
        return Err(format!(
            "[jobs] names {} jobs, at most {JOBS_MAX}",
            jobs.len()
        ));
    }
    for (name, job) in jobs {
        validate_job(name, job).map_err(|e| format!("[jobs.{name}] {e}"))?;
    }
    order(jobs)?;
    let units: usize = jobs.values().map(unit_count).sum();
    if units > UNITS_MAX {
        return Err(format!(
            "[jobs] expand to {units} units (matrix cells times shards), at most {UNITS_MAX}"
        ));
    }
    Ok(())
}

/// Whether `name` may name a job.
pub fn is_job_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= JOB_NAME_CHARS_MAX
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn validate_job(name: &str, job: &JobConfig) -> Result<(), String> {
    if !is_job_name(name) {
        return Err(format!(
            "is no job name: letters, digits, `_` and `-`, at most {JOB_NAME_CHARS_MAX}"
        ));
    }
    if RESERVED_JOB_NAMES.contains(&name) {
        return Err(format!(
            "`{name}` is taken (sluice/{name} is another run's check run)"
        ));
    }
    validate_commands(job)?;
    command_timeout_ms(job.timeout.as_deref())?;
    if job.paths.len() > PATHS_MAX || job.paths.iter().any(|g| g.trim().is_empty()) {
        return Err(format!("paths: at most {PATHS_MAX} globs, none empty"));
    }
    if job.shards.is_some_and(|n| n == 0 || n > SHARDS_MAX) {
        return Err(format!("shards must be 1 to {SHARDS_MAX}"));
    }
    crate::sandbox::image::select(job.image.as_deref(), job.instance_type.as_deref())?;
    validate_artifacts(&job.artifacts)?;
    validate_caches(&job.cache)?;
    validate_matrix(&job.matrix)
}

/// Most steps one job may list: each is a durable step with its log and
/// a snapshot between it and the next (ADR-0015); a build is a handful.
pub const STEPS_PER_JOB_MAX: usize = 20;
/// Longest step command: it is the step's label on every page and in the
/// check summary.
pub const STEP_CHARS_MAX: usize = 1_000;

/// `command` or 1 to `STEPS_PER_JOB_MAX` `steps`, never both, none empty.
fn validate_commands(job: &JobConfig) -> Result<(), String> {
    match (job.command.trim().is_empty(), job.steps.is_empty()) {
        (true, true) => Err("needs a `command` or `steps`".into()),
        (false, false) => Err("has both `command` and `steps`: give one".into()),
        (false, true) if job.snapshot.is_some() => {
            Err("`snapshot` is for `steps`: a single `command` has nothing to resume".into())
        }
        (false, true) => Ok(()),
        (true, false) => {
            if job.steps.len() > STEPS_PER_JOB_MAX {
                return Err(format!("steps: at most {STEPS_PER_JOB_MAX}"));
            }
            match job
                .steps
                .iter()
                .position(|c| c.trim().is_empty() || c.len() > STEP_CHARS_MAX)
            {
                Some(i) => Err(format!(
                    "steps[{i}] is empty or longer than {STEP_CHARS_MAX} characters"
                )),
                None => Ok(()),
            }
        }
    }
}

impl JobConfig {
    /// The commands the job runs in order: its `steps`, or its `command`.
    pub fn commands(&self) -> Vec<&str> {
        if self.steps.is_empty() {
            vec![self.command.as_str()]
        } else {
            self.steps.iter().map(String::as_str).collect()
        }
    }

    /// Whether its workspace is captured between steps (ADR-0015).
    pub fn snapshots(&self) -> bool {
        self.snapshot.unwrap_or(true)
    }
}

/// At most `CACHES_PER_JOB_MAX` caches, each with 1 to
/// `CACHE_ENTRIES_MAX` paths and key files inside the checkout.
fn validate_caches(caches: &[CacheConfig]) -> Result<(), String> {
    use sluice_sandbox_protocol::valid_workspace_path;
    if caches.len() > CACHES_PER_JOB_MAX {
        return Err(format!("cache: at most {CACHES_PER_JOB_MAX} caches"));
    }
    for c in caches {
        for (what, list) in [("paths", &c.paths), ("key_files", &c.key_files)] {
            if list.is_empty() || list.len() > CACHE_ENTRIES_MAX {
                return Err(format!(
                    "cache: {what} names 1 to {CACHE_ENTRIES_MAX} entries"
                ));
            }
            let bad = list.iter().find(|p| !valid_workspace_path(in_checkout(p)));
            if let Some(p) = bad {
                return Err(format!(
                    "cache: {what}: {p:?} is not a path inside the checkout (relative or ~/, \
                     no `..`, no wildcards)"
                ));
            }
        }
    }
    Ok(())
}

/// At most the protocol's number of globs, each workspace-relative.
fn validate_artifacts(globs: &[String]) -> Result<(), String> {
    use sluice_sandbox_protocol::{valid_archive_pattern, ARCHIVE_PATTERNS_MAX};
    if globs.len() > ARCHIVE_PATTERNS_MAX {
        return Err(format!(
            "artifacts: {} globs, at most {ARCHIVE_PATTERNS_MAX}",
            globs.len()
        ));
    }
    match globs.iter().find(|g| !valid_archive_pattern(g)) {
        Some(g) => Err(format!(
            "artifacts: {g:?} is not a glob inside the workspace (relative, no `..`, \
             at most 256 characters)"
        )),
        None => Ok(()),
    }
}

fn validate_matrix(matrix: &BTreeMap<String, Vec<MatrixValue>>) -> Result<(), String> {
    let mut cells: usize = 1;
    for (key, values) in matrix {
        let key_ok = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !key_ok {
            return Err(format!(
                "matrix key {key:?}: letters, digits and `_` (it names SLUICE_MATRIX_<KEY>)"
            ));
        }
        if values.is_empty() {
            return Err(format!("matrix key `{key}` has no values"));
        }
        let bad = values.iter().map(MatrixValue::text).find(|v| {
            v.is_empty() || v.len() > MATRIX_VALUE_CHARS_MAX || v.chars().any(char::is_control)
        });
        if let Some(v) = bad {
            return Err(format!(
                "matrix value {v:?} of `{key}`: 1 to {MATRIX_VALUE_CHARS_MAX} printable characters"
            ));
        }
        cells = cells.saturating_mul(values.len());
    }
    if cells > MATRIX_CELLS_MAX {
        return Err(format!(
            "matrix expands to {cells} cells, at most {MATRIX_CELLS_MAX}"
        ));
    }
    Ok(())
}

/// A job's unit count: its matrix cells times its shards.
fn unit_count(job: &JobConfig) -> usize {
    let cells = job.matrix.values().map(Vec::len).product::<usize>().max(1);
    cells.saturating_mul(job.shards.unwrap_or(1) as usize)
}

/// The job names in `needs` order (Kahn's algorithm, ties by name), or why
/// they cannot be ordered: an unknown name, a cycle.
pub fn order(jobs: &BTreeMap<String, JobConfig>) -> Result<Vec<&String>, String> {
    for (name, job) in jobs {
        if let Some(n) = job.needs.iter().find(|n| !jobs.contains_key(n.as_str())) {
            return Err(format!(
                "[jobs.{name}] needs {n:?}, which is no job (jobs: {})",
                jobs.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    let mut done: BTreeSet<&str> = BTreeSet::new();
    let mut out = Vec::with_capacity(jobs.len());
    // Each round places at least one job, or finds a cycle: bounded by the
    // number of jobs.
    while out.len() < jobs.len() {
        let ready: Vec<&String> = jobs
            .iter()
            .filter(|(n, j)| {
                !done.contains(n.as_str()) && j.needs.iter().all(|d| done.contains(d.as_str()))
            })
            .map(|(n, _)| n)
            .collect();
        if ready.is_empty() {
            let stuck: Vec<&str> = jobs
                .keys()
                .map(String::as_str)
                .filter(|n| !done.contains(n))
                .collect();
            return Err(format!(
                "[jobs] needs form a cycle among {}",
                stuck.join(", ")
            ));
        }
        for name in ready {
            done.insert(name);
            out.push(name);
        }
    }
    Ok(out)
}
