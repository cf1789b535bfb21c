//! Workspace snapshots between the steps of a job (`steps = [...]`,
//! ADR-0015, `docs/adr/0015-multi-step-jobs-resume-from-snapshots.md`):
//! after a step passes, what its workspace changed is packed by the
//! sandbox and stored in R2 (`take`, one step); a later step that finds
//! its workspace gone unpacks every snapshot before it, in order, over a
//! fresh checkout of the commit (`restore_chain`, inside its command step).
//!
//! Each snapshot holds only what changed since the one before (by the
//! same agent's clock; a step that ran in a new container after a restore
//! counts from its own start), and the manifest of every path, so the
//! last one's prune removes what a step deleted. A snapshot that cannot be
//! taken breaks the chain: a later lost workspace then runs the job again
//! from its first step, never from a clean tree mid-way.

use serde::{Deserialize, Serialize};

use crate::engine::{Ctx, RunError, StepFailure};
use crate::sandbox::{AgentTime, SandboxError};

use super::artifacts::{archive_step, json_of, step_failed};
use super::tags::FailureTag;
use super::RunEnv;

/// A snapshot as its step journals it: where it is and what it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepSnapshot {
    /// Its R2 key.
    pub key: String,
    pub sha256: String,
    pub bytes: u64,
    /// Entries it holds (changed ones; all when `full`).
    pub files: u64,
    pub full: bool,
    /// When its walk began, by its agent's clock: the next one's `since`.
    pub taken: AgentTime,
    /// How long taking and storing it took.
    pub duration_ms: i64,
}

/// Where R2 keeps a snapshot: under its instance, generation and the
/// job's run-through (`steps::again`), so no two steps ever share a key.
pub fn key_of(instance_id: &str, generation: u32, run: u32, step: usize) -> String {
    format!(
        "{}g{generation}-r{run}-s{step}.tar.gz",
        prefix_of(instance_id)
    )
}

/// Every snapshot of an instance is under this prefix (the sweep's and the
/// end's deletes).
pub fn prefix_of(instance_id: &str) -> String {
    format!("snapshots/{instance_id}/")
}

/// What a snapshot after a step holds changes since: the one before it
/// (the agent holds that tree as its baseline) when the step ran on the
/// same agent; else (a new container, where the step's tree was restored
/// over a fresh checkout), and for a job's first, the checkout (None here:
/// `since_checkout`). An agent without that baseline takes all of it.
pub fn since_of(previous: Option<&StepSnapshot>, started: Option<&AgentTime>) -> Option<AgentTime> {
    let previous = previous?;
    match started {
        Some(started) if started.agent != previous.taken.agent => None,
        _ => Some(previous.taken.clone()),
    }
}

/// What a snapshot's step needs.
pub struct Take<'a> {
    /// The step's journal name.
    pub name: &'a str,
    pub sandbox: &'a str,
    pub workspace: &'a str,
    pub key: &'a str,
    pub previous: Option<&'a StepSnapshot>,
    /// When the step's process started, by its agent's clock.
    pub started: Option<&'a AgentTime>,
    /// The step's sandbox process id: the tree must still be its.
    pub process: Option<&'a str>,
}

/// Takes and stores a snapshot of the workspace a step just left, as one
/// step; None when it could not be taken (the chain breaks, the job goes
/// on).
pub async fn take(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    t: &Take<'_>,
) -> Result<Option<StepSnapshot>, RunError> {
    let since = since_of(t.previous, t.started);
    let taken = ctx
        .step_boxed(t.name, archive_step(), &mut |_| {
            let since = since.clone();
            Box::pin(async move {
                let began = env.clock.now_ms();
                still_after(env, t).await?;
                let s = env
                    .archives
                    .snapshot(t.sandbox, t.workspace, since.as_ref(), t.key)
                    .await
                    .map_err(snapshot_failure)?;
                json_of(&StepSnapshot {
                    key: t.key.to_owned(),
                    sha256: s.archived.sha256,
                    bytes: s.archived.bytes,
                    files: s.archived.files,
                    full: s.full,
                    taken: s.taken,
                    duration_ms: env.clock.now_ms() - began,
                })
            })
        })
        .await;
    match taken {
        Ok(snapshot) => Ok(Some(snapshot)),
        Err(e) if step_failed(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A snapshot is of the tree its step left: when another process started
/// in the workspace since (an operator restarted the job from this
/// snapshot, after later steps ran), it cannot be taken.
async fn still_after(env: &RunEnv<'_>, t: &Take<'_>) -> Result<(), StepFailure> {
    let state = env
        .sandbox
        .workspace(t.sandbox, t.workspace)
        .await
        .map_err(snapshot_failure)?;
    match (state.exists, state.last_process.as_deref(), t.process) {
        (true, Some(last), Some(step)) if last == step => Ok(()),
        _ => Err(FailureTag::SandboxUnavailable
            .fatal("the workspace no longer holds the tree its step left")),
    }
}

fn snapshot_failure(e: SandboxError) -> StepFailure {
    FailureTag::SandboxUnavailable.failure(e.to_string(), e.retryable())
}

/// Unpacks `chain` in order into the workspace (a fresh checkout of the
/// commit), pruning to the last one's manifest, which `last_of` (the
/// process of the step it followed) left. False when a snapshot is
/// no longer stored (the job ended and was restarted): nothing restores
/// the tree then.
pub async fn restore_chain(
    env: &RunEnv<'_>,
    sandbox: &str,
    ws: &str,
    chain: &[StepSnapshot],
    last_of: &str,
) -> Result<bool, StepFailure> {
    for (i, s) in chain.iter().enumerate() {
        let last = (i + 1 == chain.len()).then_some(last_of);
        match env
            .archives
            .restore(sandbox, ws, &s.key, &s.sha256, last)
            .await
        {
            Ok(_) => {}
            Err(e) if UNRESTORABLE.contains(&e.code.as_str()) => return Ok(false),
            Err(e) => {
                let mut f = snapshot_failure(e);
                f.message = format!("restoring the workspace from {}: {}", s.key, f.message);
                return Err(f);
            }
        }
    }
    Ok(true)
}

/// What `Archives::restore` says of a snapshot that will never unpack:
/// gone from R2 (the job ended and was restarted), not the recorded
/// bytes, refused by tar (a directory a step replaced by a file), no
/// manifest, a checkout of another shape under them (shallow or full). The
/// job runs again from its first step instead.
const UNRESTORABLE: [&str; 5] = [
    "artifact_gone",
    "archive_corrupt",
    "archive_failed",
    "snapshot_manifest_missing",
    "snapshot_base_differs",
];

/// Deletes an instance's snapshots (its job ended, or the sweep purges
/// it); best effort, bounded by what one listing returns.
pub async fn discard(blobs: &dyn crate::blobs::Blobs, instance_id: &str) {
    let Ok(keys) = blobs
        .list(&prefix_of(instance_id), SNAPSHOTS_LISTED_MAX)
        .await
    else {
        return;
    };
    for key in keys {
        let _ = blobs.delete(&key).await;
    }
}

/// Snapshots one instance may hold: every step of a job, in each of its
/// run-throughs and generations, with room to spare.
const SNAPSHOTS_LISTED_MAX: u32 = 1_000;

const _: () = assert!(
    (super::jobspec::STEPS_PER_JOB_MAX as u32) * 3 * 10 <= SNAPSHOTS_LISTED_MAX,
    "one listing holds every step's snapshot over 3 run-throughs and 10 generations"
);

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(agent: &str, ms: u64) -> StepSnapshot {
        StepSnapshot {
            key: "k".into(),
            sha256: "s".into(),
            bytes: 1,
            files: 1,
            full: false,
            taken: AgentTime {
                agent: agent.into(),
                ms,
            },
            duration_ms: 1,
        }
    }

    fn ran_on(agent: Option<&str>, ms: u64) -> Option<AgentTime> {
        agent.map(|a| AgentTime {
            agent: a.into(),
            ms,
        })
    }

    #[test]
    fn a_snapshot_counts_from_the_one_before_on_the_same_agent_else_from_the_step() {
        assert_eq!(
            since_of(None, ran_on(Some("a"), 5).as_ref()),
            None,
            "the first: the checkout"
        );
        let before = snap("a", 100);
        assert_eq!(
            since_of(Some(&before), ran_on(Some("a"), 150).as_ref()),
            Some(before.taken.clone())
        );
        // A new container restored the chain over its checkout before the
        // step began: what differs from that checkout.
        assert_eq!(since_of(Some(&before), ran_on(Some("b"), 7).as_ref()), None);
        // An agent that does not say: the one before's time, which another
        // agent does not trust (the snapshot is whole).
        assert_eq!(
            since_of(Some(&before), ran_on(None, 0).as_ref()),
            Some(before.taken.clone())
        );
        assert_eq!(key_of("i", 2, 1, 3), "snapshots/i/g2-r1-s3.tar.gz");
    }
}
