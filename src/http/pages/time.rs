//! Times and durations as the pages show them: UTC ISO-8601 and "3 min
//! ago" relative to a `now_ms` the caller passes (the renderers read no
//! clock). All of it is total: any `i64` gives text, never a panic.

const SECOND_MS: i64 = 1_000;
const MINUTE_MS: i64 = 60 * SECOND_MS;
const HOUR_MS: i64 = 60 * MINUTE_MS;
const DAY_MS: i64 = 24 * HOUR_MS;

/// The last instant ISO-8601 writes with four year digits
/// (9999-12-31T23:59:59.999Z); later (or negative) values are not times
/// Sluice records, so they are shown as raw numbers.
pub const ISO_MS_MAX: i64 = 253_402_300_799_999;

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`). `days` is within 0..=2_932_896.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// (year, month, day) to days since 1970-01-01 (`days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Splits a time into its calendar fields, or None outside 0..=ISO_MS_MAX.
fn fields(ms: i64) -> Option<[i64; 6]> {
    if !(0..=ISO_MS_MAX).contains(&ms) {
        return None;
    }
    let (y, mo, d) = civil_from_days(ms / DAY_MS);
    let in_day = ms % DAY_MS;
    let (h, mi, s) = (
        in_day / HOUR_MS,
        in_day % HOUR_MS / MINUTE_MS,
        in_day % MINUTE_MS / SECOND_MS,
    );
    Some([y, mo, d, h, mi, s])
}

/// `2024-05-01T12:03:04Z`, or None when `ms` is out of range.
pub fn iso8601(ms: i64) -> Option<String> {
    let [y, mo, d, h, mi, s] = fields(ms)?;
    Some(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"))
}

/// `2024-05-01T12:03`: the value format of `<input type="datetime-local">`
/// (which has no zone; the pages label those inputs UTC).
pub fn datetime_local(ms: i64) -> Option<String> {
    let [y, mo, d, h, mi, _] = fields(ms)?;
    Some(format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}"))
}

/// Parses `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM` or `YYYY-MM-DDTHH:MM:SS`, with
/// an optional trailing `Z`, as UTC; None for anything else.
pub fn parse_utc(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z').unwrap_or(s);
    let (date, time) = match s.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (s, None),
    };
    let num = |part: &str, digits: usize| -> Option<i64> {
        (part.len() == digits && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse().ok())
            .flatten()
    };
    let mut d = date.split('-');
    let (y, mo, day) = (num(d.next()?, 4)?, num(d.next()?, 2)?, num(d.next()?, 2)?);
    let mut hms = [0i64; 3];
    if let Some(t) = time {
        let parts: Vec<&str> = t.split(':').collect();
        if !(2..=3).contains(&parts.len()) {
            return None;
        }
        for (slot, p) in hms.iter_mut().zip(&parts) {
            *slot = num(p, 2)?;
        }
    }
    let [h, mi, sec] = hms;
    let valid = d.next().is_none()
        && (1..=12).contains(&mo)
        && (1..=days_in_month(y, mo)).contains(&day)
        && h < 24
        && mi < 60
        && sec < 60;
    valid.then(|| {
        days_from_civil(y, mo, day) * DAY_MS + h * HOUR_MS + mi * MINUTE_MS + sec * SECOND_MS
    })
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A length of time in its two largest units: `850 ms`, `42 s`,
/// `3 min 4 s`, `2 h 5 min`, `3 d 4 h`. Negative lengths show as 0 ms.
pub fn duration(ms: i64) -> String {
    let ms = ms.max(0);
    let pair = |big: i64, big_unit: &str, small: i64, small_unit: &str| {
        if small == 0 {
            format!("{big} {big_unit}")
        } else {
            format!("{big} {big_unit} {small} {small_unit}")
        }
    };
    if ms < SECOND_MS {
        format!("{ms} ms")
    } else if ms < MINUTE_MS {
        format!("{} s", ms / SECOND_MS)
    } else if ms < HOUR_MS {
        pair(ms / MINUTE_MS, "min", ms % MINUTE_MS / SECOND_MS, "s")
    } else if ms < DAY_MS {
        pair(ms / HOUR_MS, "h", ms % HOUR_MS / MINUTE_MS, "min")
    } else {
        pair(ms / DAY_MS, "d", ms % DAY_MS / HOUR_MS, "h")
    }
}

/// Within this of `now_ms` a time reads "just now": closer than a page
/// refresh (a few seconds), so it does not count up between polls.
const JUST_NOW_MS: i64 = 5 * SECOND_MS;

/// `3 min ago`, `in 5 min`, or `just now`, in the largest whole unit.
pub fn relative(ms: i64, now_ms: i64) -> String {
    let delta = now_ms.saturating_sub(ms);
    let span = delta.unsigned_abs();
    if span < JUST_NOW_MS.unsigned_abs() {
        return "just now".to_owned();
    }
    let units = [
        (DAY_MS, "d"),
        (HOUR_MS, "h"),
        (MINUTE_MS, "min"),
        (SECOND_MS, "s"),
    ];
    let (unit_ms, name) = units
        .into_iter()
        .find(|(u, _)| span >= u.unsigned_abs())
        .unwrap_or((SECOND_MS, "s"));
    let n = span / unit_ms.unsigned_abs();
    if delta >= 0 {
        format!("{n} {name} ago")
    } else {
        format!("in {n} {name}")
    }
}
