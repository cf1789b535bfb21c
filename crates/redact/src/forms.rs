//! The forms a secret is searched for in output.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use base64::Engine;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Shorter values would mask ordinary words; every credential Sluice handles
/// (GitHub tokens are 40 characters) is far longer.
pub const SECRET_LEN_MIN: usize = 4;

/// An encoded form shorter than this (the stable middle of a short secret's
/// base64) would mask ordinary text too often to be worth it.
pub const DERIVED_NEEDLE_LEN_MIN: usize = 8;

/// RFC 3986 unreserved characters stay as they are; everything else is
/// percent-encoded, as `encodeURIComponent` and `urllib.parse.quote` do.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Every needle for `secrets`, deduplicated, longest first.
pub fn needles<S: AsRef<str>>(secrets: impl IntoIterator<Item = S>) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    for secret in secrets {
        for base in bases(secret.as_ref()) {
            out.push(base.as_bytes().to_vec());
            for derived in derived_forms(base) {
                if derived.len() >= DERIVED_NEEDLE_LEN_MIN && derived != base {
                    out.push(derived.into_bytes());
                }
            }
        }
    }
    out.sort_unstable_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    out.dedup();
    out
}

/// The value, trimmed, and each line of a multi-line value (a PEM key is
/// often printed a line at a time).
fn bases(secret: &str) -> Vec<&str> {
    let mut bases = vec![secret, secret.trim()];
    if secret.contains('\n') {
        bases.extend(secret.lines().map(str::trim));
    }
    bases.retain(|b| b.len() >= SECRET_LEN_MIN);
    bases.sort_unstable();
    bases.dedup();
    bases
}

fn derived_forms(base: &str) -> Vec<String> {
    let mut forms = vec![
        utf8_percent_encode(base, COMPONENT).to_string(),
        lowercase_escapes(&utf8_percent_encode(base, COMPONENT).to_string()),
        json_escaped(base),
        // The whole encoded input (`base64 <<< $TOKEN`), padding and all.
        STANDARD.encode(base),
        URL_SAFE.encode(base),
    ];
    for shift in 0..3 {
        forms.push(base64_core(&STANDARD_NO_PAD, base.as_bytes(), shift));
        forms.push(base64_core(&URL_SAFE_NO_PAD, base.as_bytes(), shift));
    }
    forms
}

/// `%2f` instead of `%2F`: both are valid and both are printed by tools.
fn lowercase_escapes(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut hex_left = 0;
    for c in encoded.chars() {
        if c == '%' {
            hex_left = 2;
            out.push(c);
        } else if hex_left > 0 {
            hex_left -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The value as it appears inside a JSON string.
fn json_escaped(base: &str) -> String {
    let quoted = serde_json::Value::String(base.to_owned()).to_string();
    quoted
        .strip_prefix('"')
        .and_then(|q| q.strip_suffix('"'))
        .unwrap_or(&quoted)
        .to_owned()
}

/// The base64 characters that depend only on the secret's bytes when it
/// sits `shift` bytes (mod 3) into a longer encoded input: the characters
/// that also encode a neighbouring byte are dropped at both ends.
fn base64_core(engine: &impl Engine, secret: &[u8], shift: usize) -> String {
    let mut input = vec![0u8; shift];
    input.extend_from_slice(secret);
    let encoded = engine.encode(&input);
    // Of the first group's four characters, those before 8*shift bits hold
    // a neighbour's bits: none at shift 0, two at 1, three at 2.
    let skip = [0, 2, 3][shift];
    // A last partial group ends in a character that also holds the
    // following byte's bits.
    let cut = usize::from(input.len() % 3 != 0);
    encoded
        .get(skip..encoded.len().saturating_sub(cut))
        .unwrap_or_default()
        .to_owned()
}
