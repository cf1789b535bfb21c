//! A commit's pipeline: the jobs `.sluice.toml` names (`[jobs.<name>]`, or
//! `[check]` as the one job `check`), validated, ordered by `needs`, and
//! expanded into units (a job's matrix cells times its shards), each of
//! which runs as its own child instance and check run
//! (`runs::run::check::pipeline`). Pure: no I/O here.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::config::{command_timeout_ms, CheckConfig, RepoConfig, CHECK_PATHS_MAX};

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
    /// A shell command run at the repository root.
    pub command: String,
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

/// One unit of a job: what one child instance runs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct JobUnit {
    pub job: String,
    /// The matrix cell, key to value; empty without a matrix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cell: Vec<(String, String)>,
    /// `(index, total)`, index from 1; None without shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<(u32, u32)>,
    /// Which cell, from 0, in the matrix's order (a key needs no values).
    #[serde(default)]
    pub cell_index: u32,
}

impl JobUnit {
    /// Its check run: `sluice/test`, `sluice/test (node 20)`,
    /// `sluice/test (2/4)`, `sluice/test (node 20, 2/4)`.
    pub fn check_run_name(&self) -> String {
        let mut parts: Vec<String> = self.cell.iter().map(|(k, v)| format!("{k} {v}")).collect();
        if let Some((i, n)) = self.shard {
            parts.push(format!("{i}/{n}"));
        }
        match parts.is_empty() {
            true => format!("{JOB_CHECK_PREFIX}{}", self.job),
            false => format!("{JOB_CHECK_PREFIX}{} ({})", self.job, parts.join(", ")),
        }
    }

    /// Its part of an instance key: `test`, `test.m1`, `test.s2`,
    /// `test.m1.s2` (no `:`, which separates key fields).
    pub fn key_part(&self) -> String {
        let mut s = self.job.clone();
        if !self.cell.is_empty() {
            s.push_str(&format!(".m{}", self.cell_index));
        }
        if let Some((i, _)) = self.shard {
            s.push_str(&format!(".s{i}"));
        }
        s
    }

    /// The variables its command sees.
    pub fn vars(&self) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::from([("SLUICE_JOB".to_owned(), self.job.clone())]);
        for (k, v) in &self.cell {
            vars.insert(
                format!("SLUICE_MATRIX_{}", k.to_ascii_uppercase()),
                v.clone(),
            );
        }
        if let Some((i, n)) = self.shard {
            vars.insert("SLUICE_SHARD_INDEX".into(), i.to_string());
            vars.insert("SLUICE_SHARD_TOTAL".into(), n.to_string());
        }
        vars
    }
}

/// A job of a pipeline, with its units.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub name: String,
    pub config: JobConfig,
    pub units: Vec<JobUnit>,
}

impl Job {
    pub fn fail_fast(&self) -> bool {
        self.config.fail_fast.unwrap_or(true)
    }

    pub fn runs_on(&self, event: JobEvent) -> bool {
        self.config.on.is_empty() || self.config.on.contains(&event)
    }
}

/// What a commit's config asks to run.
#[derive(Debug, Clone, PartialEq)]
pub enum Pipeline {
    /// `[check]` alone: one job run in the commit's own instance, reported
    /// as `sluice/check`, as before pipelines.
    Single(CheckConfig),
    /// `[jobs]`: every job in `needs` order (a job after those it needs).
    Jobs(Vec<Job>),
}

/// The pipeline a valid config names, if any.
pub fn of(config: &RepoConfig) -> Option<Pipeline> {
    if !config.jobs.is_empty() {
        return ordered(&config.jobs).ok().map(Pipeline::Jobs);
    }
    config.check.clone().map(Pipeline::Single)
}

/// `[jobs]` as `config::parse` checks it.
pub fn validate(config: &RepoConfig) -> Result<(), String> {
    if config.jobs.is_empty() {
        return Ok(());
    }
    if config.check.is_some() {
        return Err(
            "[check] and [jobs] together: name every job [jobs.<name>]; \
                    sluice/check then sums up the pipeline"
                .into(),
        );
    }
    if config.jobs.len() > JOBS_MAX {
        return Err(format!(
            "[jobs] names {} jobs, at most {JOBS_MAX}",
            config.jobs.len()
        ));
    }
    for (name, job) in &config.jobs {
        validate_job(name, job).map_err(|e| format!("[jobs.{name}] {e}"))?;
    }
    let units: usize = ordered(&config.jobs)?.iter().map(|j| j.units.len()).sum();
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
    if job.command.trim().is_empty() {
        return Err("command is empty".into());
    }
    command_timeout_ms(job.timeout.as_deref())?;
    if job.paths.len() > CHECK_PATHS_MAX || job.paths.iter().any(|g| g.trim().is_empty()) {
        return Err(format!(
            "paths: at most {CHECK_PATHS_MAX} globs, none empty"
        ));
    }
    if job.shards.is_some_and(|n| n == 0 || n > SHARDS_MAX) {
        return Err(format!("shards must be 1 to {SHARDS_MAX}"));
    }
    validate_matrix(&job.matrix)
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

/// The jobs in `needs` order (Kahn's algorithm, ties by name), or why they
/// cannot be ordered: an unknown name, a cycle.
fn ordered(jobs: &BTreeMap<String, JobConfig>) -> Result<Vec<Job>, String> {
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
            out.push(Job {
                name: name.clone(),
                units: units_of(name, &jobs[name]),
                config: jobs[name].clone(),
            });
        }
    }
    Ok(out)
}

/// A job's units: every matrix cell (keys in order, the last varying
/// fastest) times every shard.
pub fn units_of(name: &str, job: &JobConfig) -> Vec<JobUnit> {
    let mut cells: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (key, values) in &job.matrix {
        cells = cells
            .into_iter()
            .flat_map(|cell| {
                values.iter().map(move |v| {
                    let mut c = cell.clone();
                    c.push((key.clone(), v.text()));
                    c
                })
            })
            .collect();
    }
    let shards = job.shards.filter(|&n| n > 1);
    let mut units = Vec::new();
    for (i, cell) in cells.into_iter().enumerate() {
        let indices: Vec<Option<(u32, u32)>> = match shards {
            None => vec![None],
            Some(n) => (1..=n).map(|s| Some((s, n))).collect(),
        };
        for shard in indices {
            units.push(JobUnit {
                job: name.to_owned(),
                cell: cell.clone(),
                shard,
                cell_index: i as u32,
            });
        }
    }
    units
}

/// How a job's units ended, summed up as the job's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobResult {
    Passed,
    Failed,
    /// Ended without judging the commit (cancelled, terminated).
    Cancelled,
    /// Not run: filtered out by `paths` or `on`, or a job it needs failed.
    Skipped,
}

impl JobResult {
    /// Whether a job that needs it may run: it passed, or there was
    /// nothing for it to check.
    pub fn lets_dependents_run(self) -> bool {
        matches!(self, JobResult::Passed | JobResult::Skipped)
    }

    /// The result of a job from its units' results: a failure wins, then a
    /// cancellation; all skipped is skipped.
    pub fn of_units(units: &[JobResult]) -> JobResult {
        if units.contains(&JobResult::Failed) {
            JobResult::Failed
        } else if units.contains(&JobResult::Cancelled) {
            JobResult::Cancelled
        } else if !units.is_empty() && units.iter().all(|u| *u == JobResult::Skipped) {
            JobResult::Skipped
        } else {
            JobResult::Passed
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::config::{parse, ConfigState};
    use super::*;

    fn jobs(text: &str) -> Result<Vec<Job>, String> {
        match parse(text) {
            ConfigState::Valid { config } => match of(&config) {
                Some(Pipeline::Jobs(j)) => Ok(j),
                other => Err(format!("no jobs: {other:?}")),
            },
            ConfigState::Invalid { message } => Err(message),
            ConfigState::Missing => Err("missing".into()),
        }
    }

    #[test]
    fn jobs_are_ordered_after_what_they_need() {
        let j = jobs(
            "[jobs.e2e]\ncommand = \"e\"\nneeds = [\"test\"]\n\
             [jobs.lint]\ncommand = \"l\"\n[jobs.test]\ncommand = \"t\"\n",
        )
        .unwrap();
        let names: Vec<&str> = j.iter().map(|j| j.name.as_str()).collect();
        assert_eq!(names, ["lint", "test", "e2e"]);
    }

    #[test]
    fn cycles_unknown_needs_and_caps_make_the_file_invalid() {
        let cycle = jobs(
            "[jobs.a]\ncommand = \"x\"\nneeds = [\"b\"]\n[jobs.b]\ncommand = \"x\"\nneeds = [\"a\"]\n\
             [jobs.c]\ncommand = \"x\"\n",
        );
        assert_eq!(cycle.unwrap_err(), "[jobs] needs form a cycle among a, b");
        let unknown = jobs("[jobs.a]\ncommand = \"x\"\nneeds = [\"nope\"]\n").unwrap_err();
        assert!(
            unknown.contains("needs \"nope\", which is no job"),
            "{unknown}"
        );
        let many: String = (0..=JOBS_MAX)
            .map(|i| format!("[jobs.j{i}]\ncommand = \"x\"\n"))
            .collect();
        assert!(jobs(&many).unwrap_err().contains("at most 20"));
        let cells =
            jobs("[jobs.a]\ncommand = \"x\"\nmatrix = { a = [1,2,3,4,5], b = [1,2,3,4] }\n");
        assert!(cells.unwrap_err().contains("20 cells, at most 16"));
        let units: String = (0..5)
            .map(|i| format!("[jobs.j{i}]\ncommand = \"x\"\nshards = 16\n"))
            .collect();
        assert!(jobs(&units).unwrap_err().contains("80 units"));
        for bad in [
            "[jobs.check]\ncommand = \"x\"\n",
            "[jobs.\"a b\"]\ncommand = \"x\"\n",
            "[jobs.a]\ncommand = \" \"\n",
            "[jobs.a]\ncommand = \"x\"\nshards = 0\n",
            "[jobs.a]\ncommand = \"x\"\nmatrix = { \"node-v\" = [\"1\"] }\n",
            "[jobs.a]\ncommand = \"x\"\nmatrix = { node = [] }\n",
            "[jobs.a]\ncommand = \"x\"\non = [\"tag\"]\n",
            "[check]\ncommand = \"x\"\n[jobs.a]\ncommand = \"x\"\n",
        ] {
            assert!(jobs(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn matrices_and_shards_expand_into_named_units() {
        let j = jobs(
            "[jobs.test]\ncommand = \"x\"\nmatrix = { node = [20, \"22\"], os = [\"linux\"] }\n\
             shards = 2\n",
        )
        .unwrap();
        let names: Vec<String> = j[0].units.iter().map(JobUnit::check_run_name).collect();
        assert_eq!(
            names,
            [
                "sluice/test (node 20, os linux, 1/2)",
                "sluice/test (node 20, os linux, 2/2)",
                "sluice/test (node 22, os linux, 1/2)",
                "sluice/test (node 22, os linux, 2/2)",
            ]
        );
        let keys: Vec<String> = j[0].units.iter().map(JobUnit::key_part).collect();
        assert_eq!(
            keys,
            ["test.m0.s1", "test.m0.s2", "test.m1.s1", "test.m1.s2"]
        );
        let vars = j[0].units[3].vars();
        assert_eq!(vars["SLUICE_MATRIX_NODE"], "22");
        assert_eq!(vars["SLUICE_SHARD_INDEX"], "2");
        assert_eq!(vars["SLUICE_SHARD_TOTAL"], "2");
        let plain = jobs("[jobs.lint]\ncommand = \"x\"\nshards = 1\n").unwrap();
        assert_eq!(plain[0].units.len(), 1);
        assert_eq!(plain[0].units[0].check_run_name(), "sluice/lint");
        assert_eq!(plain[0].units[0].key_part(), "lint");
    }

    #[test]
    fn a_check_alone_stays_one_job() {
        let ConfigState::Valid { config } = parse("[check]\ncommand = \"t\"\n") else {
            panic!()
        };
        assert!(matches!(of(&config), Some(Pipeline::Single(_))));
    }

    #[test]
    fn a_job_result_sums_its_units() {
        use JobResult::*;
        assert_eq!(JobResult::of_units(&[Passed, Failed, Cancelled]), Failed);
        assert_eq!(JobResult::of_units(&[Passed, Cancelled]), Cancelled);
        assert_eq!(JobResult::of_units(&[Skipped, Skipped]), Skipped);
        assert_eq!(JobResult::of_units(&[Passed, Skipped]), Passed);
        assert!(Skipped.lets_dependents_run() && !Cancelled.lets_dependents_run());
    }
}
