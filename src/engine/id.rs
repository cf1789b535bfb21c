//! Instance ids: the one sanitizing constructor from a semantic key.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::limits::INSTANCE_ID_CHARS_MAX;

/// Hex digits of the key's hash appended when the key had to be changed to
/// fit the alphabet: keeps two keys that normalize alike distinct.
const KEY_HASH_HEX_CHARS: usize = 8;

/// An instance id: 1..=100 chars of `[A-Za-z0-9_-]`. It names the
/// instance's Durable Object and its D1 row.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct InstanceId(String);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidInstanceId(pub String);

impl fmt::Display for InvalidInstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "instance id {:?} must be 1 to {INSTANCE_ID_CHARS_MAX} characters of [A-Za-z0-9_-]",
            self.0
        )
    }
}

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl InstanceId {
    /// Accepts an id exactly as given, or refuses it.
    pub fn parse(raw: &str) -> Result<InstanceId, InvalidInstanceId> {
        if raw.is_empty() || raw.len() > INSTANCE_ID_CHARS_MAX || !raw.chars().all(allowed) {
            return Err(InvalidInstanceId(raw.to_owned()));
        }
        Ok(InstanceId(raw.to_owned()))
    }

    /// Normalizes a semantic key such as `check:octo/hello:0123456789ab` to
    /// the id alphabet. A key already valid is kept as is; otherwise every
    /// other character becomes `-` and a short hash of the key is appended,
    /// so `a/b-c` and `a-b/c` stay two instances.
    pub fn from_key(key: &str) -> InstanceId {
        if let Ok(id) = InstanceId::parse(key) {
            return id;
        }
        let mapped: String = key
            .chars()
            .map(|c| if allowed(c) { c } else { '-' })
            .collect();
        let digest = hex::encode(Sha256::digest(key.as_bytes()));
        let hash = &digest[..KEY_HASH_HEX_CHARS];
        let keep = INSTANCE_ID_CHARS_MAX - KEY_HASH_HEX_CHARS - 1;
        // `mapped` is ASCII, so byte truncation is char truncation.
        let head = if mapped.len() > keep {
            &mapped[..keep]
        } else {
            &mapped
        };
        let head = if head.is_empty() { "i" } else { head };
        InstanceId(format!("{head}-{hash}"))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for InstanceId {
    type Error = InvalidInstanceId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        InstanceId::parse(&s)
    }
}

impl From<InstanceId> for String {
    fn from(id: InstanceId) -> String {
        id.0
    }
}

impl fmt::Display for InstanceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_ids_are_kept() {
        assert_eq!(InstanceId::from_key("bench-1").as_str(), "bench-1");
    }

    #[test]
    fn keys_are_normalized_and_stay_distinct() {
        let a = InstanceId::from_key("check:a/b-c:0123456789ab");
        let b = InstanceId::from_key("check:a-b/c:0123456789ab");
        assert_ne!(a, b);
        assert!(a.as_str().starts_with("check-a-b-c-0123456789ab-"));
        assert!(InstanceId::parse(a.as_str()).is_ok());
    }

    #[test]
    fn long_keys_fit_the_limit() {
        let key = format!("check:{}:{}", "o/".repeat(200), "f".repeat(12));
        let id = InstanceId::from_key(&key);
        assert_eq!(id.as_str().len(), INSTANCE_ID_CHARS_MAX);
        assert!(InstanceId::parse(id.as_str()).is_ok());
    }

    #[test]
    fn parse_refuses_bad_ids() {
        for bad in ["", "a b", "a:b", "é", &"x".repeat(101)] {
            assert!(InstanceId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
