//! A command's log, streamed to object storage while it runs: every poll
//! of the process stores the output since the last one as a part keyed by
//! its byte range (`<log>.parts/<from>-<next>`), so a run killed in the
//! middle of its command still leaves what it printed. When the command
//! ends, the parts are joined, scrubbed once more as a whole (a secret the
//! agent missed cannot hide across a part boundary), stored as the log and
//! removed. The agent already scrubbed every byte before it kept it.

use sluice_redact::Redactor;

use crate::blobs::Blobs;
use crate::sandbox::ProcessState;

/// Parts one log may have: a part per poll (20 s) for a command's hour is
/// 180, plus retried steps; a log past this stops streaming (its end still
/// comes whole with the last poll's part).
pub const PARTS_MAX: u32 = 1000;

fn parts_prefix(log_key: &str) -> String {
    format!("{log_key}.parts/")
}

/// Zero-padded so key order is byte order.
fn part_key(log_key: &str, from: u64, next: u64) -> String {
    format!("{}{from:012}-{next:012}", parts_prefix(log_key))
}

fn range_of(key: &str, prefix: &str) -> Option<(u64, u64)> {
    let (from, next) = key.strip_prefix(prefix)?.split_once('-')?;
    Some((from.parse().ok()?, next.parse().ok()?))
}

/// The parts stored so far, by range, in order.
async fn parts(blobs: &dyn Blobs, log_key: &str) -> Result<Vec<(u64, u64, String)>, String> {
    let prefix = parts_prefix(log_key);
    let mut out: Vec<(u64, u64, String)> = blobs
        .list(&prefix, PARTS_MAX)
        .await?
        .into_iter()
        .filter_map(|k| range_of(&k, &prefix).map(|(f, n)| (f, n, k)))
        .collect();
    out.sort();
    Ok(out)
}

/// Where streaming resumes: the end of the furthest part (a retried step
/// goes on from what an earlier attempt stored).
pub async fn resume_offset(blobs: &dyn Blobs, log_key: &str) -> Result<u64, String> {
    Ok(parts(blobs, log_key)
        .await?
        .iter()
        .map(|(_, next, _)| *next)
        .max()
        .unwrap_or(0))
}

/// Stores the output a poll with `since` returned; the offset to ask from
/// next (`at` when the answer carried no range).
pub async fn append(
    blobs: &dyn Blobs,
    log_key: &str,
    at: u64,
    state: &ProcessState,
) -> Result<u64, String> {
    let (from, next) = match (state.output_from, state.output_next) {
        (Some(from), Some(next)) => (from, next),
        // An agent that does not stream (an older image): its last answer
        // carries the whole output.
        _ if state.finished() => (0, state.output_bytes.max(1)),
        _ => return Ok(at),
    };
    if next > from && !state.output.is_empty() {
        blobs
            .put_text(&part_key(log_key, from, next), &state.output)
            .await?;
    }
    Ok(next.max(at))
}

/// The parts joined in order; a range no part covers is named, not
/// invented.
pub async fn joined(blobs: &dyn Blobs, log_key: &str) -> Result<String, String> {
    let mut text = String::new();
    let mut cursor = 0;
    for (from, next, key) in parts(blobs, log_key).await? {
        if next <= cursor {
            continue;
        }
        if from > cursor {
            text.push_str(&format!(
                "\n[sluice: {} bytes of output were not stored]\n",
                from - cursor
            ));
        }
        let part = blobs.get_text(&key).await?.unwrap_or_default();
        let skip = usize::try_from(cursor.saturating_sub(from)).unwrap_or(usize::MAX);
        text.push_str(part.get(skip..).unwrap_or_default());
        cursor = next;
    }
    Ok(text)
}

/// Forgets a log before a fresh process writes it (a restart's new
/// generation, a process lost with its container): what an earlier process
/// printed is never spliced into the new one's, nor shown as its log.
pub async fn reset(blobs: &dyn Blobs, log_key: &str) -> Result<(), String> {
    for (_, _, key) in parts(blobs, log_key).await? {
        blobs.delete(&key).await?;
    }
    blobs.delete(log_key).await
}

/// Joins the parts, scrubs the whole, stores it as the log and removes the
/// parts: the log as the run keeps it.
pub async fn seal(blobs: &dyn Blobs, log_key: &str, redactor: &Redactor) -> Result<String, String> {
    let log = redactor.redact(&joined(blobs, log_key).await?);
    blobs.put_text(log_key, &log).await?;
    for (_, _, key) in parts(blobs, log_key).await? {
        blobs.delete(&key).await?;
    }
    Ok(log)
}

/// The log as far as it is known: the sealed log, or the parts streamed so
/// far of a command still running (or killed before it ended).
pub async fn read(blobs: &dyn Blobs, log_key: &str) -> Result<Option<String>, String> {
    if let Some(log) = blobs.get_text(log_key).await? {
        return Ok(Some(log));
    }
    let streamed = joined(blobs, log_key).await?;
    Ok((!streamed.is_empty()).then_some(streamed))
}
