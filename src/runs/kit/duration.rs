//! Durations as `.sluice.toml` writes them ("90s", "1h30m") and the
//! bounds of a configured command's timeout. Below `config` and `jobspec`,
//! which both read them.

use crate::limits::{COMMAND_TIMEOUT_MS_DEFAULT, COMMAND_TIMEOUT_MS_MAX};

/// A command's timeout: the configured one, or the default, capped.
pub fn command_timeout_ms(configured: Option<&str>) -> Result<i64, String> {
    let ms = match configured {
        None => COMMAND_TIMEOUT_MS_DEFAULT,
        Some(v) => parse_duration_ms(v)?,
    };
    if ms <= 0 || ms > COMMAND_TIMEOUT_MS_MAX {
        return Err(format!(
            "timeout must be between 1s and {}m",
            COMMAND_TIMEOUT_MS_MAX / 60_000
        ));
    }
    Ok(ms)
}

/// Parses Go-style durations: "90s", "30m", "2h", "1h30m", "500ms".
pub fn parse_duration_ms(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    let mut total: i64 = 0;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("bad duration {s:?}: expected a number"));
        }
        let n: i64 = rest[..digits]
            .parse()
            .map_err(|_| format!("bad duration {s:?}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit_ms = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            u => {
                return Err(format!(
                    "bad duration {s:?}: unknown unit {u:?} (use ms, s, m, h, d)"
                ))
            }
        };
        rest = &rest[unit_len..];
        total = n
            .checked_mul(unit_ms)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(|| format!("duration {s:?} is too large"))?;
    }
    Ok(total)
}
