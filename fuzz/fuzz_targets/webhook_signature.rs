//! `sluice::github::webhook::{verify_signature, sign}` on any secret, body
//! and `X-Hub-Signature-256` value.
//!
//! Input: line 1 the secret's bytes, line 2 the header (`<none>`: absent),
//! the rest the body.
//!
//! Asserts, besides "no panic":
//! - a header verifies only if it is `sha256=` and the body's HMAC-SHA256
//!   under the secret (hex case and surrounding whitespace aside);
//! - what `sign` writes is `sha256=` and 64 lowercase hex digits, and verifies;
//! - that signature is refused for another body, another secret, and with
//!   any one of its hex digits changed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::github::webhook::{sign, verify_signature, SignatureError};
use sluice_fuzz::line;

/// The second line that stands for "no header at all".
const ABSENT: &[u8] = b"<none>";
const PREFIX: &str = "sha256=";

fuzz_target!(|data: &[u8]| {
    let (secret, rest) = line(data);
    let (header_raw, body) = line(rest);
    let header_text = String::from_utf8_lossy(header_raw);
    let header = (header_raw != ABSENT).then_some(header_text.as_ref());

    let signed = sign(secret, body);
    let hex_sig = signed.strip_prefix(PREFIX).expect("sign writes sha256=");
    assert_eq!(hex_sig.len(), 64);
    assert!(hex_sig
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));

    match verify_signature(secret, body, header) {
        Ok(()) => {
            let given = header.expect("verified without a header");
            let given = given
                .strip_prefix(PREFIX)
                .expect("verified without sha256=");
            assert_eq!(
                given.trim().to_ascii_lowercase(),
                hex_sig,
                "verified a header that is not the body's HMAC"
            );
        }
        Err(SignatureError::Missing) => assert!(header.is_none()),
        Err(SignatureError::Malformed | SignatureError::Mismatch) => assert!(header.is_some()),
    }

    assert_eq!(verify_signature(secret, body, Some(&signed)), Ok(()));

    let mut other_body = body.to_vec();
    other_body.push(b'x');
    assert_eq!(
        verify_signature(secret, &other_body, Some(&signed)),
        Err(SignatureError::Mismatch)
    );
    // Not a trailing NUL: HMAC pads short keys with zeros, so `k` and `k\0`
    // are the same key by design.
    let mut other_secret = secret.to_vec();
    other_secret.push(b'x');
    assert_eq!(
        verify_signature(&other_secret, body, Some(&signed)),
        Err(SignatureError::Mismatch)
    );
    // One digit changed, at a position the input picks.
    let at = data.len() % hex_sig.len();
    let mut flipped: Vec<u8> = hex_sig.bytes().collect();
    flipped[at] = if flipped[at] == b'0' { b'1' } else { b'0' };
    let flipped = format!(
        "{PREFIX}{}",
        String::from_utf8(flipped).expect("hex is ASCII")
    );
    assert_eq!(
        verify_signature(secret, body, Some(&flipped)),
        Err(SignatureError::Mismatch)
    );
});
