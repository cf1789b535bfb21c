//! Instance ids: `sluice::engine::InstanceId::{parse, from_key}` and the id's
//! serde form (ids travel in paths, D1 rows and Durable Object names).
//!
//! Input: a key or id (a Rust string: UTF-8).
//!
//! Asserts, besides "no panic":
//! - `from_key` always makes an id that `parse` accepts, 1..=100 characters;
//! - a string `parse` accepts is its own key, kept as is; any other key
//!   becomes an id ending in `-` and the first 8 hex digits of its SHA-256;
//! - `from_key` is idempotent (an id's key is itself);
//! - an id reads back from its JSON, and a JSON string deserializes as an id
//!   exactly when `parse` accepts it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use sluice::engine::InstanceId;
use sluice::limits::INSTANCE_ID_CHARS_MAX;

/// Hex digits of the key's hash a normalized id ends with (`engine::id`).
const KEY_HASH_HEX_CHARS: usize = 8;

fuzz_target!(|data: &[u8]| {
    let Ok(key) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = InstanceId::parse(key);
    let id = InstanceId::from_key(key);
    let s = id.as_str();
    assert!(InstanceId::parse(s).is_ok(), "from_key made {s:?}");
    assert!(!s.is_empty() && s.len() <= INSTANCE_ID_CHARS_MAX);
    match &parsed {
        Ok(p) => {
            assert_eq!(p.as_str(), key);
            assert_eq!(&id, p, "a valid key is kept as is");
        }
        Err(_) => {
            let digest = hex::encode(Sha256::digest(key.as_bytes()));
            let suffix = format!("-{}", &digest[..KEY_HASH_HEX_CHARS]);
            assert!(s.ends_with(&suffix), "{s:?} for {key:?}");
        }
    }
    assert_eq!(InstanceId::from_key(s), id, "from_key is idempotent");

    let json = serde_json::to_string(&id).expect("an id serializes");
    assert_eq!(json, serde_json::to_string(s).expect("a string serializes"));
    let back: InstanceId = serde_json::from_str(&json).expect("an id reads back");
    assert_eq!(back, id);
    let as_json = serde_json::to_string(key).expect("a string serializes");
    let decoded = serde_json::from_str::<InstanceId>(&as_json);
    assert_eq!(decoded.is_ok(), parsed.is_ok(), "{key:?}");
});
