//! The sandbox agent's HTTP API as types (`sluice_sandbox_protocol`): the
//! request bodies the agent decodes (any web page can reach a local agent,
//! issue 8), and the answers the Worker decodes from an agent that runs
//! beside untrusted commands. The agent's own request handling is private
//! to its binary crate; these are the shapes it and the Worker share.
//!
//! Input: a body (bytes, decoded with `serde_json::from_slice` as the agent
//! does); its first line is also tried as an id.
//!
//! Asserts, besides "no panic":
//! - every body that decodes survives the JSON trip unchanged;
//! - `valid_id` accepts exactly 1..=`ID_CHARS_MAX` of `[A-Za-z0-9_-]`, and
//!   the paths built from a valid id hold it as one path segment.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;
use sluice_fuzz::line;
use sluice_sandbox_protocol::{
    kill_path, process_path, sandbox_path, valid_id, workspace_path, CheckoutRequest, ErrorBody,
    ProcessRequest, ProcessState, WorkspaceState, ID_CHARS_MAX, WAIT_MS_MAX,
};

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(body: &[u8]) {
    let Ok(v) = serde_json::from_slice::<T>(body) else {
        return;
    };
    let text = serde_json::to_vec(&v).expect("a protocol value serializes");
    let back: T = serde_json::from_slice(&text).expect("and reads back");
    assert_eq!(back, v);
}

fuzz_target!(|data: &[u8]| {
    round_trip::<CheckoutRequest>(data);
    round_trip::<ProcessRequest>(data);
    round_trip::<ProcessState>(data);
    round_trip::<WorkspaceState>(data);
    round_trip::<ErrorBody>(data);

    let (first, _) = line(data);
    let id = String::from_utf8_lossy(first);
    let id = id.as_ref();
    let expected = (1..=ID_CHARS_MAX).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    assert_eq!(valid_id(id), expected, "{id:?}");
    if expected {
        let wait = u64::from(first.len() as u32) % (WAIT_MS_MAX + 1);
        for path in [
            workspace_path(id),
            process_path(id, wait),
            sandbox_path(id),
            kill_path(id, wait),
        ] {
            let path_only = path.split('?').next().unwrap_or(&path);
            assert!(
                path_only.split('/').any(|seg| seg == id),
                "{path} lost the id {id}"
            );
            assert!(!path_only.contains("//"));
        }
    }
});
