//! A job's artifacts (`artifacts = ["dist/**"]`, issue 23): when a unit's
//! command passes, the files of its workspace the globs match are packed
//! into one archive in R2 (`save`, one step); a unit of a job that `needs`
//! it reads where those archives are (`needed`, one step) and unpacks them
//! into its workspace after its checkout, before its command starts
//! (`restore`, inside the command step). GitHub Actions' `upload-artifact`
//! runs on success by default; so does this: a failed command uploads
//! nothing, and its dependents are skipped anyway.
//!
//! The bytes never pass through a journal: the step records the archive's
//! size, file count and SHA-256, and the sandbox refuses to unpack bytes
//! with another hash.

use crate::engine::{Backoff, Ctx, RunError, StepConfig, StepFailure};
use crate::sandbox::SandboxError;
use crate::store::artifacts::{self, ArtifactRow};

use super::tags::FailureTag;
use super::RunEnv;

/// The step that uploads a unit's artifacts.
pub const SAVE_STEP: &str = "save artifacts";
/// The step that reads where the needed jobs' artifacts are.
pub const READ_STEP: &str = "read artifacts";

/// A step that moves archives (an artifact's, a cache's) is one archive
/// and one transfer each; three attempts ride out an R2 or sandbox hiccup,
/// and a container that went away will not come back.
const ARCHIVE_STEP_RETRIES: u32 = 2;
/// Between attempts: R2's and the agent's transient errors clear in
/// seconds.
const ARCHIVE_STEP_RETRY_DELAY_MS: i64 = 2_000;
/// A transfer of up to the agent's 1 GiB archive bound at R2's pace, with
/// a margin: past it the attempt is retried.
const ARCHIVE_STEP_TIMEOUT_MS: i64 = 15 * 60 * 1000;

/// The bounds of a step that moves archives (`caches` uses them too).
pub fn archive_step() -> StepConfig {
    StepConfig::default()
        .retries(
            ARCHIVE_STEP_RETRIES,
            ARCHIVE_STEP_RETRY_DELAY_MS,
            Backoff::Exponential,
        )
        .timeout_ms(ARCHIVE_STEP_TIMEOUT_MS)
}

/// Where R2 keeps a unit's archive.
pub fn key_of(instance_id: &str) -> String {
    format!("artifacts/{instance_id}.tar.gz")
}

/// What a unit's save needs to know.
pub struct SaveSpec<'a> {
    pub sandbox_id: &'a str,
    /// The unit's instance id: also its workspace's.
    pub instance_id: &'a str,
    pub job: &'a str,
    /// The unit's check run name.
    pub label: &'a str,
    pub patterns: &'a [String],
}

/// Packs and uploads the unit's matching files, then records them.
pub async fn save(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    spec: &SaveSpec<'_>,
) -> Result<ArtifactRow, RunError> {
    ctx.step_boxed(SAVE_STEP, archive_step(), &mut |_| {
        Box::pin(async {
            let key = key_of(spec.instance_id);
            let archived = env
                .archives
                .save(spec.sandbox_id, spec.instance_id, spec.patterns, &key)
                .await
                .map_err(artifact_failure)?;
            let row = ArtifactRow {
                instance_id: spec.instance_id.to_owned(),
                job: spec.job.to_owned(),
                label: spec.label.to_owned(),
                r2_key: key,
                bytes: i64::try_from(archived.bytes).unwrap_or(i64::MAX),
                files: i64::try_from(archived.files).unwrap_or(i64::MAX),
                sha256: archived.sha256,
                created_ms: env.clock.now_ms(),
            };
            artifacts::saved(env.db, &row)
                .await
                .map_err(|e| FailureTag::Index.retryable(e.to_string()))?;
            json_of(&row)
        })
    })
    .await
}

/// Whether a failed step's error is the step's own (its attempts spent):
/// what a best-effort step may note and go on from. Anything else (a
/// suspension, a termination, the run's ceiling) must propagate.
pub fn step_failed(e: &RunError) -> bool {
    matches!(
        e,
        RunError::RetriesExhausted { .. }
            | RunError::NonRetryable { .. }
            | RunError::StepTimedOut { .. }
    )
}

/// A boxed step's result (`Ctx::step_boxed`).
pub fn json_of<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, StepFailure> {
    serde_json::to_value(value).map_err(|e| StepFailure::fatal("Encode", e.to_string()))
}

/// Where the archives of the units `ids` are (those that made one).
pub async fn needed(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    ids: &[String],
) -> Result<Vec<ArtifactRow>, RunError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    ctx.step_boxed(READ_STEP, StepConfig::default(), &mut |_| {
        Box::pin(async {
            let rows = artifacts::of_units(env.db, ids)
                .await
                .map_err(|e| FailureTag::Index.retryable(e.to_string()))?;
            json_of(&rows)
        })
    })
    .await
}

/// Unpacks each archive into the workspace `ws` of `sandbox`: called after
/// the checkout, before the command starts (again on a retried attempt:
/// unpacking twice leaves the same files).
pub async fn restore(
    env: &RunEnv<'_>,
    sandbox: &str,
    ws: &str,
    rows: &[ArtifactRow],
) -> Result<(), StepFailure> {
    for row in rows {
        env.archives
            .restore(sandbox, ws, &row.r2_key, &row.sha256, None)
            .await
            .map_err(|e| {
                let mut f = artifact_failure(e);
                f.message = format!("unpacking the artifacts of {}: {}", row.label, f.message);
                f
            })?;
    }
    Ok(())
}

/// The path of an archive's download link (`GET /artifacts/{id}`).
pub fn path_of(instance_id: &str) -> String {
    format!("/artifacts/{instance_id}")
}

/// The expiry and signature of a link to a unit's archive, valid as long
/// as a log's link (`loglink::LOG_LINK_TTL_MS`).
pub fn signature(secret: &[u8], instance_id: &str, now_ms: i64) -> (i64, String) {
    let exp = now_ms + super::loglink::LOG_LINK_TTL_MS;
    (
        exp,
        super::loglink::signature(secret, &path_of(instance_id), exp),
    )
}

/// The signed path (and query) that downloads a unit's archive.
pub fn signed_path(secret: &[u8], instance_id: &str, now_ms: i64) -> String {
    let (exp, sig) = signature(secret, instance_id, now_ms);
    format!("{}?exp={exp}&sig={sig}", path_of(instance_id))
}

/// A signed link to download a unit's archive; None without
/// `LOG_LINK_SECRET`.
pub fn link(env: &RunEnv<'_>, instance_id: &str, now_ms: i64) -> Option<String> {
    let secret = env.log_link_secret.as_ref()?;
    Some(super::loglink::signed_link(
        &env.public_url,
        secret.expose().as_bytes(),
        &path_of(instance_id),
        now_ms,
    ))
}

/// The check summary's line for a unit's archive.
pub fn listed(env: &RunEnv<'_>, row: &ArtifactRow, now_ms: i64) -> String {
    let what = described(row);
    match link(env, &row.instance_id, now_ms) {
        Some(url) => format!(
            "**Artifacts**: {what}, [download]({url}) (link valid 7 days; the API and the \
             dashboard list it too)"
        ),
        None => format!("**Artifacts**: {what}, stored at `{}`", row.r2_key),
    }
}

fn artifact_failure(e: SandboxError) -> StepFailure {
    FailureTag::ArtifactFailed.failure(e.to_string(), e.retryable())
}

/// "3 files, 1.2 MB": how a listing says what an archive holds.
pub fn described(row: &ArtifactRow) -> String {
    let files = match row.files {
        1 => "1 file".to_owned(),
        n => format!("{n} files"),
    };
    format!("{files}, {}", human_bytes(row.bytes))
}

pub fn human_bytes(bytes: i64) -> String {
    const UNITS: [&str; 4] = ["bytes", "KB", "MB", "GB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit + 1 < UNITS.len() {
        value /= 1000.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} bytes"),
        _ => format!("{value:.1} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_says_files_and_size() {
        let row = |files, bytes| ArtifactRow {
            instance_id: "i".into(),
            job: "build".into(),
            label: "sluice/build".into(),
            r2_key: key_of("i"),
            bytes,
            files,
            sha256: String::new(),
            created_ms: 0,
        };
        assert_eq!(described(&row(1, 512)), "1 file, 512 bytes");
        assert_eq!(described(&row(3, 1_234_567)), "3 files, 1.2 MB");
        assert_eq!(key_of("abc"), "artifacts/abc.tar.gz");
    }
}
