//! A commit's pipeline: the jobs `.sluice.toml` names (`[jobs.<name>]`, or
//! `[check]` as the one job `check`), validated, ordered by `needs`, and
//! expanded into units (a job's matrix cells times its shards), each of
//! which runs as its own child instance and check run
//! (`runs::run::check::pipeline`). Pure: no I/O here.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::config::{CheckConfig, RepoConfig};
use super::jobspec::order;
pub use super::jobspec::{
    is_job_name, JobConfig, JobEvent, MatrixValue, JOBS_MAX, JOB_CHECK_PREFIX, MATRIX_CELLS_MAX,
    SHARDS_MAX, UNITS_MAX,
};

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

/// The jobs in `needs` order (a job after those it needs), expanded.
fn ordered(jobs: &BTreeMap<String, JobConfig>) -> Result<Vec<Job>, String> {
    Ok(order(jobs)?
        .into_iter()
        .map(|name| Job {
            name: name.clone(),
            units: units_of(name, &jobs[name]),
            config: jobs[name].clone(),
        })
        .collect())
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
    /// Not run: filtered out by `paths` or `on` (nothing to check).
    Skipped,
    /// Not run: a job it needs did not pass. Its check run concludes
    /// `skipped` too, but it lets no dependent run (a chain stops here).
    Blocked,
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
        } else if units.contains(&JobResult::Blocked) {
            JobResult::Blocked
        } else if !units.is_empty() && units.iter().all(|u| *u == JobResult::Skipped) {
            JobResult::Skipped
        } else {
            JobResult::Passed
        }
    }
}

/// One job as the pipeline's parent records it in its output: what the
/// dashboard and the API draw the pipeline from (boxes, `needs` arrows,
/// why a job was skipped).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    pub result: JobResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// A re-run of a commit's pipeline asked for on GitHub: the jobs it
/// selects run again at the same commit, the rest keep their results from
/// the attempt `of` (the newest attempt of the commit's check).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsRerun {
    /// The parent instance whose job results are kept.
    pub of: String,
    /// A check run's Re-run: that job. None: the check suite's Re-run,
    /// which re-runs the jobs that failed or were cancelled (as GitHub's
    /// "Re-run failed jobs").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// The jobs a re-run runs again, given the results `previous` of the
/// attempt it repeats: the job asked for, or every job that did not end
/// passed or skipped (no result counts as not ended), and every job that
/// needs one of them, transitively (their results came from the old run).
pub fn rerun_selection(
    jobs: &[Job],
    previous: &BTreeMap<String, JobResult>,
    job: Option<&str>,
) -> BTreeSet<String> {
    let mut chosen: BTreeSet<String> = match job {
        Some(j) => jobs
            .iter()
            .filter(|x| x.name == j)
            .map(|x| x.name.clone())
            .collect(),
        None => jobs
            .iter()
            .filter(|x| {
                !previous
                    .get(&x.name)
                    .is_some_and(|r| r.lets_dependents_run())
            })
            .map(|x| x.name.clone())
            .collect(),
    };
    // Each round adds a job or stops: bounded by the jobs.
    for _ in 0..jobs.len() {
        let more: Vec<String> = jobs
            .iter()
            .filter(|x| !chosen.contains(&x.name))
            .filter(|x| x.config.needs.iter().any(|n| chosen.contains(n)))
            .map(|x| x.name.clone())
            .collect();
        if more.is_empty() {
            break;
        }
        chosen.extend(more);
    }
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::kit::config::{parse, ConfigState};

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
        assert_eq!(JobResult::of_units(&[Blocked]), Blocked);
        assert!(Skipped.lets_dependents_run() && !Cancelled.lets_dependents_run());
        assert!(!Blocked.lets_dependents_run());
    }

    #[test]
    fn a_rerun_selects_the_job_or_the_failed_ones_and_what_needs_them() {
        let js = jobs(
            "[jobs.lint]\ncommand = \"l\"\n[jobs.unit]\ncommand = \"u\"\n\
             [jobs.e2e]\ncommand = \"e\"\nneeds = [\"unit\"]\n\
             [jobs.smoke]\ncommand = \"s\"\nneeds = [\"e2e\"]\n\
             [jobs.docs]\ncommand = \"d\"\npaths = [\"docs/**\"]\n",
        )
        .unwrap();
        use JobResult::*;
        let prev: BTreeMap<String, JobResult> = [
            ("lint", Passed),
            ("unit", Failed),
            ("e2e", Blocked),
            ("smoke", Blocked),
            ("docs", Skipped),
        ]
        .map(|(n, r)| (n.to_owned(), r))
        .into();
        let names = |s: BTreeSet<String>| s.into_iter().collect::<Vec<_>>();
        assert_eq!(
            names(rerun_selection(&js, &prev, None)),
            ["e2e", "smoke", "unit"]
        );
        assert_eq!(names(rerun_selection(&js, &prev, Some("lint"))), ["lint"]);
        assert_eq!(
            names(rerun_selection(&js, &prev, Some("e2e"))),
            ["e2e", "smoke"]
        );
        assert!(rerun_selection(&js, &prev, Some("gone")).is_empty());
        let none = BTreeMap::new();
        assert_eq!(
            rerun_selection(&js, &none, None).len(),
            5,
            "no results: all run"
        );
    }
}
