//! Signed, expiring links to a command's log (`GET /logs/{instance}/{step}`):
//! what a check summary points at, readable in a browser without the admin
//! token. The signature is an HMAC-SHA256 under `LOG_LINK_SECRET` over the
//! path and the expiry, so a link opens one log until its time is up and
//! can be neither redirected to another log nor extended.

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// How long a link in a check summary opens its log: a week of reviews
/// and re-runs; the operator's API reads logs without a link after that.
pub const LOG_LINK_TTL_MS: i64 = 7 * 24 * 3600 * 1000;

/// Why a link is refused (both answer 403).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkError {
    /// Missing or wrong signature, or a malformed query.
    BadSignature,
    Expired,
}

/// The path of a log's link; `step_key` is the step's id form.
pub fn path_of(instance_id: &str, step_key: &str) -> String {
    format!("/logs/{instance_id}/{step_key}")
}

/// Where the log the link opens is stored.
pub fn log_key(instance_id: &str, step_key: &str) -> String {
    format!("logs/{instance_id}/{step_key}.log")
}

fn mac(secret: &[u8], path: &str, exp_ms: i64) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(path.as_bytes());
    mac.update(b"\n");
    mac.update(exp_ms.to_string().as_bytes());
    Some(mac)
}

/// The hex signature of `path` until `exp_ms`.
pub fn signature(secret: &[u8], path: &str, exp_ms: i64) -> String {
    mac(secret, path, exp_ms)
        .map(|m| hex::encode(m.finalize().into_bytes()))
        .unwrap_or_default()
}

/// The query that signs `path` until `exp_ms`.
pub fn signed_query(secret: &[u8], path: &str, exp_ms: i64) -> String {
    format!("exp={exp_ms}&sig={}", signature(secret, path, exp_ms))
}

/// `path` (a log's, an archive's) on this Worker, signed for
/// `LOG_LINK_TTL_MS` from `now_ms`.
pub fn signed_link(public_url: &str, secret: &[u8], path: &str, now_ms: i64) -> String {
    let query = signed_query(secret, path, now_ms + LOG_LINK_TTL_MS);
    format!("{}{path}?{query}", public_url.trim_end_matches('/'))
}

/// A link to the log of `instance_id`'s step, valid for `LOG_LINK_TTL_MS`.
pub fn link(
    public_url: &str,
    secret: &[u8],
    instance_id: &str,
    step_key: &str,
    now_ms: i64,
) -> String {
    signed_link(public_url, secret, &path_of(instance_id, step_key), now_ms)
}

/// Checks a link's query for `path` at `now_ms` (constant-time compare).
pub fn verify(secret: &[u8], path: &str, query: &str, now_ms: i64) -> Result<(), LinkError> {
    let (mut exp, mut sig) = (None, None);
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("exp", v)) => exp = v.parse::<i64>().ok(),
            Some(("sig", v)) => sig = hex::decode(v).ok(),
            _ => return Err(LinkError::BadSignature),
        }
    }
    let (Some(exp), Some(sig)) = (exp, sig) else {
        return Err(LinkError::BadSignature);
    };
    let mac = mac(secret, path, exp).ok_or(LinkError::BadSignature)?;
    mac.verify_slice(&sig)
        .map_err(|_| LinkError::BadSignature)?;
    if now_ms >= exp {
        return Err(LinkError::Expired);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"log-link-secret";
    const NOW: i64 = 1_800_000_000_000;

    fn query_of(url: &str) -> (&str, &str) {
        let rest = url.strip_prefix("https://sluice.example").unwrap();
        rest.split_once('?').unwrap()
    }

    #[test]
    fn a_link_opens_its_log_until_it_expires() {
        let url = link("https://sluice.example/", SECRET, "inst-1", "step-a", NOW);
        let (path, query) = query_of(&url);
        assert_eq!(path, "/logs/inst-1/step-a");
        assert_eq!(verify(SECRET, path, query, NOW + 1), Ok(()));
        assert_eq!(
            verify(SECRET, path, query, NOW + LOG_LINK_TTL_MS),
            Err(LinkError::Expired)
        );
    }

    #[test]
    fn a_link_opens_no_other_log_and_cannot_be_extended() {
        let url = link("https://sluice.example", SECRET, "inst-1", "step-a", NOW);
        let (path, query) = query_of(&url);
        let bad = |p: &str, q: &str| verify(SECRET, p, q, NOW);
        assert_eq!(
            bad("/logs/inst-2/step-a", query),
            Err(LinkError::BadSignature)
        );
        let later = query.replace(
            &format!("exp={}", NOW + LOG_LINK_TTL_MS),
            "exp=9999999999999",
        );
        assert_eq!(bad(path, &later), Err(LinkError::BadSignature));
        assert_eq!(
            verify(b"other", path, query, NOW),
            Err(LinkError::BadSignature)
        );
        for q in ["", "exp=1", "sig=00", "exp=x&sig=zz", "exp=1&sig=00&more=1"] {
            assert_eq!(bad(path, q), Err(LinkError::BadSignature), "{q:?}");
        }
    }
}
