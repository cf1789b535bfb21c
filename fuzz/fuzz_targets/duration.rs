//! Durations in `.sluice.toml` (`timeout`, `[deploy.queue]`):
//! `sluice::runs::config::parse_duration_ms` and `command_timeout_ms`.
//!
//! Input: the duration's text (a TOML string: UTF-8). The same bytes also
//! build a Go-style duration from parts, for the round trip.
//!
//! Asserts, besides "no panic":
//! - a parsed duration is never negative, and reads back from `"<n>ms"`;
//! - `command_timeout_ms` accepts exactly the parsed durations within
//!   1 ms..=`COMMAND_TIMEOUT_MS_MAX`, and returns that same value;
//! - parts `<n><unit>...` written out parse to the sum of their values
//!   (surrounding whitespace allowed), or fail only when the sum overflows.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::limits::COMMAND_TIMEOUT_MS_MAX;
use sluice::runs::config::{command_timeout_ms, parse_duration_ms};

/// The units `parse_duration_ms` documents, with their value in ms.
const UNITS: [(&str, i64); 5] = [
    ("ms", 1),
    ("s", 1_000),
    ("m", 60_000),
    ("h", 3_600_000),
    ("d", 86_400_000),
];

/// Bytes of input per generated part: a 32-bit number and a unit.
const PART_BYTES: usize = 5;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let parsed = parse_duration_ms(text);
        if let Ok(ms) = parsed {
            assert!(ms >= 0, "{text:?} parsed to {ms}");
            assert!(!text.trim().is_empty());
            assert_eq!(parse_duration_ms(&format!("{ms}ms")), Ok(ms));
        }
        match (parsed, command_timeout_ms(Some(text))) {
            (Ok(ms), Ok(t)) => {
                assert_eq!(ms, t);
                assert!((1..=COMMAND_TIMEOUT_MS_MAX).contains(&t));
            }
            (Ok(ms), Err(_)) => assert!(ms <= 0 || ms > COMMAND_TIMEOUT_MS_MAX, "{ms}"),
            (Err(_), Ok(t)) => panic!("{text:?} is no duration but a timeout of {t}"),
            (Err(_), Err(_)) => {}
        }
    }

    let mut written = String::new();
    let mut sum: Option<i64> = Some(0);
    for part in data.chunks_exact(PART_BYTES) {
        let n = u32::from_le_bytes([part[0], part[1], part[2], part[3]]);
        let (unit, unit_ms) = UNITS[usize::from(part[4]) % UNITS.len()];
        written.push_str(&format!("{n}{unit}"));
        sum = sum.and_then(|s| i64::from(n).checked_mul(unit_ms)?.checked_add(s));
    }
    if written.is_empty() {
        return;
    }
    let expected = sum.ok_or(());
    assert_eq!(
        parse_duration_ms(&written).map_err(|_| ()),
        expected,
        "{written}"
    );
    assert_eq!(
        parse_duration_ms(&format!(" \t{written}\n")).map_err(|_| ()),
        expected
    );
});
