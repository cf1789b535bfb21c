//! The `check` run: on a pull request's head commit, run `[check] command`
//! from `.sluice.toml` and report `sluice/check`.

use std::collections::BTreeMap;

use async_trait::async_trait;

use crate::engine::{Ctx, RunError, RunOutcome};

use super::command::{run_command, CommandResult, CommandSpec};
use super::config::{command_timeout_ms, CheckConfig};
use super::gate::{self, with_gates, Gates, Held, Pool};
use super::registry::{CheckRunOf, Run, RunName};
use super::report::{reported, CheckTarget, Verdict};
use super::triggers::CheckInput;
use super::{configured, Configured, RunEnv};

pub const CHECK_RUN_NAME: &str = "sluice/check";

/// The `check` run.
pub struct CheckRun;

#[async_trait(?Send)]
impl Run for CheckRun {
    const NAME: RunName = RunName::Check;
    const GATED: bool = true;
    type Input = CheckInput;

    async fn run(
        &self,
        ctx: &Ctx<'_>,
        env: &RunEnv<'_>,
        input: &CheckInput,
    ) -> Result<RunOutcome, RunError> {
        run(ctx, env, input).await
    }

    fn check_run(&self, input: &CheckInput) -> Option<CheckRunOf> {
        Some(CheckRunOf {
            name: CHECK_RUN_NAME,
            installation_id: input.installation_id,
            repo: input.repo.clone(),
            sha: input.sha.clone(),
        })
    }
}

async fn run(ctx: &Ctx<'_>, env: &RunEnv<'_>, input: &CheckInput) -> Result<RunOutcome, RunError> {
    let target = CheckTarget {
        name: CHECK_RUN_NAME,
        installation_id: input.installation_id,
        repo: &input.repo,
        sha: &input.sha,
    };
    let check = match configured(ctx, env, &target, |c| c.check).await? {
        Configured::Run(check) => check,
        Configured::Done(outcome) => return Ok(outcome),
    };
    // Checks serialize nothing, but pass admission (their repository's
    // pool, all checks', every sandbox's) and the sandbox lease.
    let repo_pool = gate::checks_pool_of(&input.repo);
    let pools = [
        Pool {
            name: &repo_pool,
            capacity: env.checks_per_repo,
        },
        Pool {
            name: gate::CHECKS_POOL,
            capacity: env.checks_capacity,
        },
        Pool {
            name: gate::POOL,
            capacity: env.pool_capacity,
        },
    ];
    let gates = Gates {
        serial: None,
        pools: &pools,
    };
    reported(ctx, env, &target, || {
        with_gates(ctx, env, &gates, |held| {
            check_held(ctx, env, input, &check, held)
        })
    })
    .await
}

async fn check_held(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    input: &CheckInput,
    check: &CheckConfig,
    held: Held<'_>,
) -> Result<Verdict, RunError> {
    let timeout_ms = command_timeout_ms(check.timeout.as_deref())
        .map_err(|m| RunError::InvalidInput { message: m })?;
    let mut vars = BTreeMap::new();
    vars.insert("SLUICE_SHA".to_owned(), input.sha.clone());
    vars.insert("SLUICE_REPO".to_owned(), input.repo.clone());
    vars.insert("SLUICE_PR".to_owned(), input.pr_number.to_string());
    let spec = CommandSpec {
        step: "run check command",
        repo: &input.repo,
        sha: &input.sha,
        installation_id: input.installation_id,
        command: &check.command,
        timeout_ms,
        env: vars,
        secret_env: Vec::new(),
        held: &held,
    };
    let result = run_command(ctx, env, &spec).await?;
    Ok(verdict_of(&check.command, &result))
}

/// Maps a command's end to a verdict, with the log tail in the summary.
pub fn verdict_of(command: &str, r: &CommandResult) -> Verdict {
    let seconds = r.duration_ms.unwrap_or(0) as f64 / 1000.0;
    let how = match (r.timed_out, r.exit_code) {
        (true, _) => "timed out".to_owned(),
        (false, Some(code)) => format!("exited with code {code}"),
        (false, None) => "was killed by a signal".to_owned(),
    };
    let summary = format!(
        "`{command}` {how} after {seconds:.1} s.\n\nLast lines of the log ({} bytes in all, stored at `{}`):\n\n```\n{}\n```",
        r.output_bytes, r.log_key, r.tail
    );
    match (r.timed_out, r.exit_code) {
        (true, _) => Verdict::TimedOut { summary },
        (false, Some(0)) => Verdict::Passed { summary },
        _ => Verdict::Failed { summary },
    }
}
