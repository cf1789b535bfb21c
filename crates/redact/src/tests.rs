use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use base64::Engine;

use super::*;

const TOKEN: &str = "ghs_16C7e42F292c6912E7710c838347Ae178B4a";

fn scrub(secrets: &[&str], text: &str) -> String {
    Redactor::new(secrets.iter().copied()).redact(text)
}

#[test]
fn plain_value_is_masked_everywhere() {
    assert_eq!(scrub(&["tok123"], "a tok123 b tok123"), "a *** b ***");
}

#[test]
fn short_values_are_not_secrets() {
    assert_eq!(scrub(&["ab"], "abc"), "abc");
}

#[test]
fn base64_at_every_alignment_and_alphabet_is_masked() {
    for prefix in ["", "u", "us", "user:"] {
        let input = format!("{prefix}{TOKEN}");
        for encoded in [STANDARD.encode(&input), URL_SAFE.encode(&input)] {
            let out = scrub(&[TOKEN], &format!("Authorization: Basic {encoded}"));
            assert!(out.contains(MASK_STR), "{out}");
            // At most the characters that also encode the prefix or the
            // padding survive: never a run that decodes to token bytes.
            let longest_visible = out
                .trim_start_matches("Authorization: Basic ")
                .split("***")
                .map(str::len)
                .max()
                .unwrap_or(0);
            assert!(longest_visible <= 10, "{prefix:?}: {out}");
        }
    }
}

const MASK_STR: &str = "***";

#[test]
fn percent_and_json_forms_are_masked() {
    let secret = "p@ss/w\"rd+1 x";
    let url = format!("https://x/?q={}", utf8_percent_encode_all(secret));
    assert_eq!(scrub(&[secret], &url), "https://x/?q=***");
    assert_eq!(scrub(&[secret], &url.to_lowercase()), "https://x/?q=***");
    let json = serde_json::json!({ "password": secret }).to_string();
    assert_eq!(scrub(&[secret], &json), r#"{"password":"***"}"#);
}

fn utf8_percent_encode_all(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[test]
fn line_wrapped_base64_is_masked() {
    let encoded = STANDARD.encode(format!("{TOKEN}{TOKEN}"));
    let wrapped: Vec<String> = encoded
        .as_bytes()
        .chunks(20)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let out = scrub(&[TOKEN], &wrapped.join("\n"));
    let visible: String = out.split("***").collect::<Vec<_>>().concat();
    assert!(visible.replace('\n', "").len() <= 4, "{out}");
}

#[test]
fn overlapping_secrets_leave_no_part_of_either() {
    let a = "secretAAAAoverlap";
    let b = "overlapBBBBsecret";
    let out = scrub(&[a, b], "x secretAAAAoverlapBBBBsecret y");
    assert_eq!(out, "x *** y");
    // A self-overlapping value is masked through its last repetition.
    assert_eq!(scrub(&["abab"], "<ababab>"), "<***>");
}

#[test]
fn multi_line_secret_is_masked_line_by_line() {
    let key = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----\n";
    let out = scrub(&[key], "line: MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n");
    assert_eq!(out, "line: ***\n");
}

#[test]
fn a_secret_split_across_chunks_is_masked() {
    let text = format!("before {TOKEN} middle {} after", STANDARD.encode(TOKEN));
    for chunk in [1, 2, 3, 7, 40, 41, 1000] {
        let mut stream = StreamRedactor::new(Redactor::new([TOKEN]));
        let mut out = Vec::new();
        for piece in text.as_bytes().chunks(chunk) {
            out.extend(stream.push(piece));
        }
        out.extend(stream.finish());
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out, "before *** middle *** after", "chunks of {chunk}");
    }
}

#[test]
fn stream_holds_back_at_most_one_span() {
    let redactor = Redactor::new([TOKEN]);
    let span = redactor.span_max;
    assert!(span < 4 * TOKEN.len() * SPAN_PER_NEEDLE_BYTE);
    let mut stream = StreamRedactor::new(redactor);
    let emitted = stream.push(&[b'x'; 10_000]);
    assert!(emitted.len() >= 10_000 - span);
    let rest = stream.finish();
    assert_eq!(emitted.len() + rest.len(), 10_000);
}

#[test]
fn no_secrets_passes_output_through() {
    let mut stream = StreamRedactor::new(Redactor::new(Vec::<String>::new()));
    assert_eq!(stream.push(b"abc"), b"abc");
    assert!(stream.finish().is_empty());
}

#[test]
fn text_around_masks_keeps_multibyte_characters() {
    assert_eq!(scrub(&[TOKEN], &format!("é{TOKEN}é")), "é***é");
}
