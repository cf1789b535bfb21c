//! A job of several steps (`steps = ["npm ci", "npm run build", "npm
//! test"]`, ADR-0015, `docs/adr/0015-multi-step-jobs-resume-from-snapshots.md`):
//! each command is a durable step with its own log and time, run in order
//! in one workspace, stopping at the first that fails. Between two steps
//! the workspace is captured (`snapshots`), so a step that finds its
//! container gone resumes from the tree the step before it left.
//!
//! A later step never runs in a fresh checkout: when its workspace is lost
//! and no snapshot restores it (`snapshot = false`, or one could not be
//! taken), the job runs again from its first step in a fresh checkout (a
//! new run-through, its steps named `... (again n)`), at most
//! `RUN_THROUGHS_MAX` times.

use serde::{Deserialize, Serialize};

use crate::engine::{Backoff, Ctx, RunError, StepConfig};

use super::command::{
    checkout_fresh, run_step_command, step_name, CommandResult, CommandSpec, Continuation,
};
use super::snapshots::{self, StepSnapshot, Take};
use super::tags::FailureTag;
use super::RunEnv;

/// Times a job's steps may be run through from the first: a container lost
/// with no snapshot to resume from three times in one job is an outage,
/// not bad luck, and the check says so.
pub const RUN_THROUGHS_MAX: u32 = 3;

/// A fresh checkout before another run-through: one checkout, retried as
/// a command step's infrastructure faults are.
const CHECKOUT_STEP_RETRIES: u32 = 2;
const CHECKOUT_STEP_RETRY_DELAY_MS: i64 = 2_000;
/// A clone of a large repository, with margin.
const CHECKOUT_STEP_TIMEOUT_MS: i64 = 5 * 60 * 1000;

/// One step as it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRun {
    pub command: String,
    pub result: CommandResult,
    /// The snapshot taken after it (none after the last, a failure, or
    /// with `snapshot = false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<StepSnapshot>,
}

/// The steps of the run-through that ended, and how many came before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepsRun {
    pub steps: Vec<StepRun>,
    /// Run-throughs begun again from the first step after a lost workspace.
    pub again: u32,
}

impl StepsRun {
    /// The step that decides the job: the first that failed, else the last.
    pub fn deciding(&self) -> Option<&StepRun> {
        self.steps.last()
    }
}

/// Whether a step's command passed.
pub fn passed(result: &CommandResult) -> bool {
    result.exit_code == Some(0) && !result.timed_out
}

/// Runs `commands` as the job's steps; `base` is every step's spec but its
/// name, command and workspace rule.
pub async fn run_steps(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    base: &CommandSpec<'_>,
    commands: &[&str],
    snapshot: bool,
) -> Result<StepsRun, RunError> {
    let mut lost_at = 0;
    for again in 0..RUN_THROUGHS_MAX {
        if again > 0 {
            check_out_again(ctx, env, base, again).await?;
        }
        let through = RunThrough {
            base,
            commands,
            snapshot,
            again,
        };
        match run_through(ctx, env, &through).await? {
            Through::Ended(steps) => return Ok(StepsRun { steps, again }),
            Through::Lost(index) => lost_at = index,
        }
    }
    Err(RunError::NonRetryable {
        step: step_name(lost_at, RUN_THROUGHS_MAX - 1),
        failure: FailureTag::SandboxUnavailable.fatal(format!(
            "the workspace was lost {RUN_THROUGHS_MAX} times with nothing to resume from"
        )),
    })
}

/// How a run-through ended.
enum Through {
    /// Its steps, up to the first that failed.
    Ended(Vec<StepRun>),
    /// This step found its workspace lost with nothing to restore it.
    Lost(usize),
}

struct RunThrough<'a> {
    base: &'a CommandSpec<'a>,
    commands: &'a [&'a str],
    snapshot: bool,
    again: u32,
}

/// One run-through of the steps; `Lost` when a later step found its
/// workspace lost with nothing to restore it.
async fn run_through(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    t: &RunThrough<'_>,
) -> Result<Through, RunError> {
    let base = t.base;
    let mut chain: Vec<StepSnapshot> = Vec::new();
    let mut chained = t.snapshot;
    let mut done = Vec::new();
    for (i, command) in t.commands.iter().enumerate() {
        let name = step_name(i, t.again);
        let first = i == 0;
        let after = done
            .last()
            .and_then(|s: &StepRun| s.result.process.clone())
            .unwrap_or_default();
        let spec = CommandSpec {
            step: &name,
            command,
            env: base.env.clone(),
            secret_env: base.secret_env.clone(),
            restore: if first { base.restore } else { &[] },
            prepared: first && (base.prepared || t.again > 0),
            pristine: first,
            continues: (!first).then_some(Continuation {
                after: &after,
                chain: whole_chain(&chain, i),
            }),
            ..*base
        };
        let Some(result) = run_step_command(ctx, env, &spec).await? else {
            return Ok(Through::Lost(i));
        };
        let ok = passed(&result);
        let snapshot = match ok && i + 1 < t.commands.len() && chained {
            true => snapshot_after(ctx, env, base, i, t.again, &result, chain.last()).await?,
            false => None,
        };
        chained &= snapshot.is_some();
        chain.extend(snapshot.clone());
        done.push(StepRun {
            command: (*command).to_owned(),
            result,
            snapshot,
        });
        if !ok {
            break;
        }
    }
    Ok(Through::Ended(done))
}

/// The snapshots step `index` may be restored from: one per step before
/// it, or none (a snapshot that could not be taken leaves a gap no later
/// one fills: each holds only what changed since the one before).
fn whole_chain(chain: &[StepSnapshot], index: usize) -> &[StepSnapshot] {
    if chain.len() == index {
        chain
    } else {
        &[]
    }
}

async fn snapshot_after(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    base: &CommandSpec<'_>,
    index: usize,
    again: u32,
    result: &CommandResult,
    previous: Option<&StepSnapshot>,
) -> Result<Option<StepSnapshot>, RunError> {
    let name = format!("snapshot after {}", step_name(index, again));
    let key = snapshots::key_of(ctx.instance_id(), ctx.generation(), again, index);
    let take = Take {
        name: &name,
        sandbox: base.held.sandbox_id,
        workspace: ctx.instance_id(),
        key: &key,
        previous,
        started: result.started.as_ref(),
        process: result.process.as_deref(),
    };
    snapshots::take(ctx, env, &take).await
}

/// A new run-through starts from a fresh checkout, whatever the lost one
/// left in a workspace that survived.
async fn check_out_again(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    base: &CommandSpec<'_>,
    again: u32,
) -> Result<(), RunError> {
    let cfg = StepConfig::default()
        .retries(
            CHECKOUT_STEP_RETRIES,
            CHECKOUT_STEP_RETRY_DELAY_MS,
            Backoff::Exponential,
        )
        .timeout_ms(CHECKOUT_STEP_TIMEOUT_MS);
    let name = format!("check out again ({again})");
    ctx.step(&name, cfg, |_| async {
        checkout_fresh(env, base, ctx.instance_id()).await
    })
    .await
}

/// `command` as inline code on one line: newlines as spaces, fenced by one
/// backtick more than its longest run of them (CommonMark), so nothing in
/// it reads as Markdown or ends a list item.
fn code(command: &str) -> String {
    let flat: String = command
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let longest = flat.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    match longest {
        0 => format!("`{flat}`"),
        n => {
            let fence = "`".repeat(n + 1);
            format!("{fence} {flat} {fence}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::code;

    #[test]
    fn a_step_reads_as_one_line_of_code_whatever_it_holds() {
        assert_eq!(code("npm test"), "`npm test`");
        assert_eq!(code("echo `date`"), "`` echo `date` ``");
        assert_eq!(code("a\n```\n# b"), "```` a ``` # b ````");
        assert!(!code("x\ny").contains('\n'));
    }
}

/// The check summary's list of steps: each with how it ended and its time,
/// and those not run.
pub fn summary(run: &StepsRun, commands: &[&str]) -> String {
    let mut lines = vec!["**Steps**".to_owned(), String::new()];
    for (i, command) in commands.iter().enumerate() {
        let line = match run.steps.get(i) {
            Some(s) => {
                let seconds = s.result.duration_ms.unwrap_or(0) as f64 / 1000.0;
                let how = match (passed(&s.result), s.result.timed_out, s.result.exit_code) {
                    (true, _, _) => "passed".to_owned(),
                    (false, true, _) => "timed out".to_owned(),
                    (false, false, Some(code)) => format!("failed (exit {code})"),
                    (false, false, None) => "killed by a signal".to_owned(),
                };
                let snapshot = s.snapshot.as_ref().map_or(String::new(), |snap| {
                    format!(
                        "; snapshot {} in {:.1} s",
                        super::artifacts::human_bytes(
                            i64::try_from(snap.bytes).unwrap_or(i64::MAX)
                        ),
                        snap.duration_ms as f64 / 1000.0
                    )
                });
                format!(
                    "{}. {} {how} in {seconds:.1} s{snapshot}",
                    i + 1,
                    code(command)
                )
            }
            None => format!("{}. {} not run", i + 1, code(command)),
        };
        lines.push(line);
    }
    if run.again > 0 {
        lines.push(String::new());
        lines.push(format!(
            "The workspace was lost with nothing to resume from; the steps ran again from the \
             first ({} time{}).",
            run.again,
            if run.again == 1 { "" } else { "s" }
        ));
    }
    lines.join("\n")
}
