//! Dependency caches (`cache = [{ paths, key_files }]` on a job, issue 23).
//! Before the command (`restore`, one step, after the checkout): each
//! cache's key is derived from its key files' content (read in the sandbox
//! as the workspace's user), its paths and the image class; the entry with
//! the exact key in the first readable scope is unpacked, else the newest
//! entry with the same prefix (GitHub's `restore-keys`). After the command
//! passed (`save`, one step): a cache whose exact key missed is packed and
//! stored in the run's write scope, and the repository's entries are kept
//! under `CACHE_BYTES_PER_REPO`, least recently used first. Which scopes a
//! run reads and writes is `inputs::CacheScope`, decided from the signed
//! event: a fork's pull request writes where nothing else reads.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::engine::{Ctx, RunError, StepFailure};
use crate::store::caches::{self, CacheRow};

use super::artifacts::{archive_step, json_of};
use super::command::{prepare_workspace, CommandSpec};
use super::inputs::CacheScope;
use super::jobspec::CacheConfig;
use super::tags::FailureTag;
use super::RunEnv;

pub const RESTORE_STEP: &str = "restore caches";
pub const SAVE_STEP: &str = "save caches";

/// Entries evicted at most per save: a save adds one entry, so a handful
/// always brings the repository back under its cap.
const EVICT_PER_SAVE_MAX: u32 = 20;

/// How a cache's restore went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hit {
    Exact,
    /// The newest entry with the same paths and class, another key.
    Prefix,
    Miss,
    /// Its key files could not be read: neither restored nor saved.
    Unkeyed,
}

/// One cache as the restore step journals it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Restored {
    pub paths: Vec<String>,
    pub key: String,
    pub hit: Hit,
    /// The restored entry's scope and size, when one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    pub bytes: i64,
    pub ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// What a job's caches need to know of its run.
pub struct Caches<'a> {
    pub repo: &'a str,
    pub scope: &'a CacheScope,
    /// The image class: a cache built by one toolchain is not another's.
    pub class: &'a str,
    pub caches: &'a [CacheConfig],
}

/// `v1-<class>-<16 hex of the paths>-`: entries sharing it differ only by
/// their key files.
pub fn prefix_of(class: &str, cache: &CacheConfig) -> String {
    let paths = Sha256::digest(cache.paths.join("\n").as_bytes());
    let short: String = paths.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("v1-{class}-{short}-")
}

/// The entry a run restores among `rows` (its prefix's, newest first):
/// the exact key in the first readable scope holding it, else the newest
/// entry of the first readable scope holding any.
pub fn pick<'r>(rows: &'r [CacheRow], read: &[String], key: &str) -> Option<(&'r CacheRow, Hit)> {
    let exact = read
        .iter()
        .find_map(|s| rows.iter().find(|r| &r.scope == s && r.key == key));
    let newest = || {
        read.iter()
            .find_map(|s| rows.iter().find(|r| &r.scope == s))
    };
    exact
        .map(|r| (r, Hit::Exact))
        .or_else(|| newest().map(|r| (r, Hit::Prefix)))
}

/// Where R2 keeps an entry, one object per writer: two runs saving the
/// same key never overwrite the bytes the first one's row describes.
fn r2_key(repo: &str, scope: &str, key: &str, writer: &str) -> String {
    format!("caches/{repo}/{scope}/{key}/{writer}.tar.gz")
}

/// Checks the commit out and restores each cache into it, in one step.
pub async fn restore(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    spec: &CommandSpec<'_>,
    c: &Caches<'_>,
) -> Result<Vec<Restored>, RunError> {
    let ws = ctx.instance_id();
    ctx.step_boxed(RESTORE_STEP, archive_step(), &mut |_| {
        Box::pin(async move {
            prepare_workspace(env, spec, ws).await?;
            let mut out = Vec::new();
            for cache in c.caches {
                out.push(restore_one(env, spec.held.sandbox_id, ws, c, cache).await?);
            }
            json_of(&out)
        })
    })
    .await
}

async fn restore_one(
    env: &RunEnv<'_>,
    sandbox: &str,
    ws: &str,
    c: &Caches<'_>,
    cache: &CacheConfig,
) -> Result<Restored, StepFailure> {
    let started = env.clock.now_ms();
    let prefix = prefix_of(c.class, cache);
    let mut r = Restored {
        paths: cache.paths.clone(),
        key: String::new(),
        hit: Hit::Miss,
        scope: None,
        bytes: 0,
        ms: 0,
        why: None,
    };
    let digest = match env.sandbox.digest(sandbox, ws, &cache.key_paths()).await {
        Ok(d) => d,
        Err(e) if e.status == Some(422) => {
            r.hit = Hit::Unkeyed;
            r.why = Some(e.message);
            return Ok(r);
        }
        Err(e) => return Err(FailureTag::SandboxUnavailable.failure(e.to_string(), e.retryable())),
    };
    r.key = format!("{prefix}{digest}");
    let rows = caches::candidates(env.db, c.repo, &c.scope.read, &prefix)
        .await
        .map_err(|e| FailureTag::Index.retryable(e.to_string()))?;
    if let Some((row, hit)) = pick(&rows, &c.scope.read, &r.key) {
        match env
            .archives
            .restore(sandbox, ws, &row.r2_key, &row.sha256, None)
            .await
        {
            Ok(_) => {
                let _ = caches::used(env.db, row, env.clock.now_ms()).await;
                (r.hit, r.scope, r.bytes) = (hit, Some(row.scope.clone()), row.bytes);
            }
            // An entry whose bytes are gone or not the ones recorded is
            // forgotten and counts as a miss: the run saves a good one.
            Err(e) if matches!(e.code.as_str(), "archive_corrupt" | "artifact_gone") => {
                let _ = caches::forget(env.db, row).await;
                r.why = Some(format!(
                    "the entry found was unusable ({}), so forgotten",
                    e.message
                ));
            }
            Err(e) => return Err(FailureTag::ArtifactFailed.failure(e.to_string(), e.retryable())),
        }
    }
    r.ms = env.clock.now_ms() - started;
    Ok(r)
}

/// One cache as the save step journals it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    pub key: String,
    pub bytes: i64,
    pub ms: i64,
}

/// After the command passed: saves each cache whose exact key missed into
/// the run's write scope (none: nothing), in one step.
pub async fn save(
    ctx: &Ctx<'_>,
    env: &RunEnv<'_>,
    sandbox: &str,
    c: &Caches<'_>,
    restored: &[Restored],
) -> Result<Vec<Saved>, RunError> {
    let Some(scope) = c.scope.write.as_deref() else {
        return Ok(Vec::new());
    };
    let wanted: Vec<(&CacheConfig, &Restored)> = c
        .caches
        .iter()
        .zip(restored)
        .filter(|(_, r)| matches!(r.hit, Hit::Prefix | Hit::Miss))
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let ws = ctx.instance_id();
    let wanted = &wanted;
    ctx.step_boxed(SAVE_STEP, archive_step(), &mut |_| {
        Box::pin(async move {
            let mut out = Vec::new();
            for (cache, r) in wanted {
                out.push(save_one(env, sandbox, ws, c, scope, cache, r).await?);
            }
            evict(env, c.repo).await;
            json_of(&out)
        })
    })
    .await
}

async fn save_one(
    env: &RunEnv<'_>,
    sandbox: &str,
    ws: &str,
    c: &Caches<'_>,
    scope: &str,
    cache: &CacheConfig,
    r: &Restored,
) -> Result<Saved, StepFailure> {
    let started = env.clock.now_ms();
    let key = r2_key(c.repo, scope, &r.key, ws);
    let archived = env
        .archives
        .save(sandbox, ws, &cache.globs(), &key)
        .await
        .map_err(|e| FailureTag::ArtifactFailed.failure(e.to_string(), e.retryable()))?;
    let now = env.clock.now_ms();
    let row = CacheRow {
        repo: c.repo.to_owned(),
        scope: scope.to_owned(),
        key: r.key.clone(),
        prefix: prefix_of(c.class, cache),
        r2_key: key,
        bytes: i64::try_from(archived.bytes).unwrap_or(i64::MAX),
        files: i64::try_from(archived.files).unwrap_or(i64::MAX),
        sha256: archived.sha256,
        created_ms: now,
        used_ms: now,
    };
    let inserted = caches::saved(env.db, &row)
        .await
        .map_err(|e| FailureTag::Index.retryable(e.to_string()))?;
    if !inserted {
        // Another run saved this key first: its row stands, these bytes go.
        let _ = env.blobs.delete(&row.r2_key).await;
    }
    Ok(Saved {
        key: row.key,
        bytes: row.bytes,
        ms: now - started,
    })
}

/// Deletes the repository's least recently used entries while they hold
/// more than its cap. Best effort: what is left over is the next save's.
async fn evict(env: &RunEnv<'_>, repo: &str) {
    let cap = i64::try_from(env.cache_bytes_per_repo).unwrap_or(i64::MAX);
    let Ok(mut total) = caches::repo_bytes(env.db, repo).await else {
        return;
    };
    if total <= cap {
        return;
    }
    let Ok(rows) = caches::least_used(env.db, repo, EVICT_PER_SAVE_MAX).await else {
        return;
    };
    for row in rows {
        if total <= cap {
            break;
        }
        if env.blobs.delete(&row.r2_key).await.is_ok() && caches::forget(env.db, &row).await.is_ok()
        {
            total -= row.bytes;
        }
    }
}

pub use super::artifacts::step_failed;

/// The check summary's lines: per cache, hit or miss, sizes and times.
pub fn summary(restored: &[Restored], saved: &[Saved]) -> String {
    let mut lines = Vec::new();
    for r in restored {
        let paths = r.paths.join(", ");
        let seconds = |ms: i64| ms as f64 / 1000.0;
        let how = match (r.hit, &r.scope) {
            (Hit::Exact, Some(s)) => format!(
                "hit `{s}` ({} bytes, restored in {:.1} s)",
                r.bytes,
                seconds(r.ms)
            ),
            (Hit::Prefix, Some(s)) => format!(
                "restored an older key from `{s}` ({} bytes, {:.1} s)",
                r.bytes,
                seconds(r.ms)
            ),
            (Hit::Unkeyed, _) => format!(
                "not used: {}",
                r.why
                    .as_deref()
                    .unwrap_or("its key files could not be read")
            ),
            _ => match &r.why {
                Some(why) => format!("miss ({why})"),
                None => "miss".to_owned(),
            },
        };
        let save = saved
            .iter()
            .find(|s| s.key == r.key)
            .map(|s| format!("; saved {} bytes in {:.1} s", s.bytes, seconds(s.ms)))
            .unwrap_or_default();
        lines.push(format!("- cache `{paths}`: {how}{save}"));
    }
    match lines.is_empty() {
        true => String::new(),
        false => format!("**Caches**\n{}", lines.join("\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scope: &str, key: &str, created_ms: i64) -> CacheRow {
        CacheRow {
            repo: "o/r".into(),
            scope: scope.into(),
            key: key.into(),
            prefix: "p-".into(),
            r2_key: r2_key("o/r", scope, key, "w"),
            bytes: 1,
            files: 1,
            sha256: String::new(),
            created_ms,
            used_ms: created_ms,
        }
    }

    /// Every writer/reader pair: the default branch's entries are
    /// everyone's; a pull request's its own; a fork's its own alone; a
    /// merge group and a push read no pull request's.
    #[test]
    fn each_reader_sees_exactly_the_scopes_it_may() {
        let main = Some("main");
        let writers = [
            ("push to main", CacheScope::push("main", main)),
            ("same-repo pr 7", CacheScope::pull(7, false, main)),
            ("fork pr 9", CacheScope::pull(9, true, main)),
            ("push to dev", CacheScope::push("dev", main)),
        ];
        let readers = [
            (
                "push to main (a deploy's needs)",
                CacheScope::push("main", main),
                ["push to main"].as_slice(),
            ),
            (
                "same-repo pr 7",
                CacheScope::pull(7, false, main),
                &["push to main", "same-repo pr 7"],
            ),
            (
                "same-repo pr 8",
                CacheScope::pull(8, false, main),
                &["push to main"],
            ),
            (
                "fork pr 9",
                CacheScope::pull(9, true, main),
                &["push to main", "fork pr 9"],
            ),
            (
                "pr 9 not a fork",
                CacheScope::pull(9, false, main),
                &["push to main"],
            ),
            (
                "merge group",
                CacheScope::merge_group(main),
                &["push to main"],
            ),
            (
                "push to dev",
                CacheScope::push("dev", main),
                &["push to main", "push to dev"],
            ),
        ];
        for (reader, scope, allowed) in readers {
            for (writer, w) in &writers {
                let written = w.write.clone().expect("writes");
                let rows = [row(&written, "p-k", 1)];
                let seen = pick(&rows, &scope.read, "p-k").is_some();
                assert_eq!(
                    seen,
                    allowed.contains(writer),
                    "{reader} reading {writer}'s"
                );
            }
        }
        assert_eq!(CacheScope::merge_group(main).write, None);
    }

    #[test]
    fn the_exact_key_wins_then_the_newest_of_the_first_scope_holding_any() {
        let read = vec!["pr:7".to_owned(), "branch:main".to_owned()];
        let rows = [
            row("pr:7", "p-old", 3),
            row("branch:main", "p-new", 2),
            row("branch:main", "p-k", 1),
        ];
        let (r, hit) = pick(&rows, &read, "p-k").unwrap();
        assert_eq!((r.key.as_str(), hit), ("p-k", Hit::Exact));
        let (r, hit) = pick(&rows, &read, "p-other").unwrap();
        assert_eq!(
            (r.key.as_str(), hit),
            ("p-old", Hit::Prefix),
            "own scope first"
        );
        assert!(pick(&rows, &["fork-pr:9".to_owned()], "p-k").is_none());
    }

    #[test]
    fn a_key_depends_on_the_class_and_the_paths() {
        let c = |paths: &[&str]| CacheConfig {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            key_files: vec!["package-lock.json".into()],
        };
        assert_eq!(
            prefix_of("node", &c(&["node_modules"])),
            prefix_of("node", &c(&["node_modules"]))
        );
        assert_ne!(
            prefix_of("node", &c(&["node_modules"])),
            prefix_of("base", &c(&["node_modules"]))
        );
        assert_ne!(
            prefix_of("node", &c(&["node_modules"])),
            prefix_of("node", &c(&["node_modules", "~/.npm"]))
        );
        assert_eq!(
            c(&["node_modules", "~/.npm/"]).globs(),
            ["node_modules/**", ".npm/**", "node_modules", ".npm"]
        );
    }
}
