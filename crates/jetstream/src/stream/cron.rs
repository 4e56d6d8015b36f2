//! Six-field cron patterns (seconds first), read as nats-server's
//! `cron.go` reads them (robfig/cron's rules): lists, ranges, steps, month
//! and weekday names, `*` and `?`. Day of month and day of week must both
//! match when either is `*`, and either may match when both are
//! restricted. Times are found in a time zone; the search gives up five
//! years ahead.
//!
//! Hand-written rather than taken from a crate: the crates read weekdays
//! from 1, or AND the two day fields, or take five fields, and a
//! schedule must fire at the same instant nats-server's would.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan, Zoned};

/// Set in a field's bits when it was `*` or `?` (the day rule above).
const STAR: u64 = 1 << 63;
const SEC_NS: i128 = 1_000_000_000;

/// A parsed pattern: one bit per allowed value in each field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cron {
    second: u64,
    minute: u64,
    hour: u64,
    day_of_month: u64,
    month: u64,
    day_of_week: u64,
}

struct Bounds {
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const SECONDS: Bounds = Bounds {
    min: 0,
    max: 59,
    names: &[],
};
const MINUTES: Bounds = SECONDS;
const HOURS: Bounds = Bounds {
    min: 0,
    max: 23,
    names: &[],
};
const DAYS_OF_MONTH: Bounds = Bounds {
    min: 1,
    max: 31,
    names: &[],
};
/// Names index from `min`: `jan` is 1.
const MONTHS: Bounds = Bounds {
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
/// Names index from `min`: `sun` is 0.
const DAYS_OF_WEEK: Bounds = Bounds {
    min: 0,
    max: 6,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Cron {
    /// Parses a pattern of exactly six whitespace-separated fields.
    pub fn parse(pattern: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = pattern.split_whitespace().collect();
        if fields.len() != 6 {
            return Err(format!("pattern requires 6 fields, got {}", fields.len()));
        }
        Ok(Cron {
            second: field(fields[0], &SECONDS)?,
            minute: field(fields[1], &MINUTES)?,
            hour: field(fields[2], &HOURS)?,
            day_of_month: field(fields[3], &DAYS_OF_MONTH)?,
            month: field(fields[4], &MONTHS)?,
            day_of_week: field(fields[5], &DAYS_OF_WEEK)?,
        })
    }

    /// The first matching instant strictly after `after` (Unix
    /// nanoseconds), in `tz`; `None` when none falls within five years.
    pub fn next_after(&self, tz: &TimeZone, after: i64) -> Option<Zoned> {
        let start = Timestamp::from_nanosecond(i128::from(after)).ok()?;
        let mut next = truncate(&start.to_zoned(tz.clone()), SEC_NS)?
            .checked_add(SignedDuration::from_secs(1))
            .ok()?;
        let year_limit = next.year() + 5;
        let mut truncated = false;
        'wrap: loop {
            if next.year() > year_limit {
                return None;
            }
            while !has(self.month, next.month()) {
                if !std::mem::replace(&mut truncated, true) {
                    next = at(tz, &next, 1, 0)?;
                }
                next = next.checked_add(1.month()).ok()?;
                if next.month() == 1 {
                    continue 'wrap;
                }
            }
            while !self.day_matches(&next) {
                if !std::mem::replace(&mut truncated, true) {
                    next = at(tz, &next, next.day(), 0)?;
                }
                next = next.checked_add(1.day()).ok()?;
                if next.day() == 1 {
                    continue 'wrap;
                }
            }
            while !has(self.hour, next.hour()) {
                if !std::mem::replace(&mut truncated, true) {
                    next = at(tz, &next, next.day(), next.hour())?;
                }
                next = next.checked_add(SignedDuration::from_hours(1)).ok()?;
                if next.hour() == 0 {
                    continue 'wrap;
                }
            }
            while !has(self.minute, next.minute()) {
                if !std::mem::replace(&mut truncated, true) {
                    next = truncate(&next, 60 * SEC_NS)?;
                }
                next = next.checked_add(SignedDuration::from_mins(1)).ok()?;
                if next.minute() == 0 {
                    continue 'wrap;
                }
            }
            while !has(self.second, next.second()) {
                if !std::mem::replace(&mut truncated, true) {
                    next = truncate(&next, SEC_NS)?;
                }
                next = next.checked_add(SignedDuration::from_secs(1)).ok()?;
                if next.second() == 0 {
                    continue 'wrap;
                }
            }
            return Some(next);
        }
    }

    fn day_matches(&self, t: &Zoned) -> bool {
        let dom = has(self.day_of_month, t.day());
        let dow = has(self.day_of_week, t.weekday().to_sunday_zero_offset());
        if self.day_of_month & STAR != 0 || self.day_of_week & STAR != 0 {
            dom && dow
        } else {
            dom || dow
        }
    }
}

fn has(bits: u64, value: i8) -> bool {
    (0..63).contains(&value) && bits & (1 << value) != 0
}

/// `t`'s date (with `day`) at `hour`:00:00 in `tz`, as Go's `time.Date`.
fn at(tz: &TimeZone, t: &Zoned, day: i8, hour: i8) -> Option<Zoned> {
    jiff::civil::date(t.year(), t.month(), day)
        .at(hour, 0, 0, 0)
        .to_zoned(tz.clone())
        .ok()
}

/// `t` rounded down to a multiple of `unit` nanoseconds since the epoch
/// (Go's `Truncate`, which counts from a minute-aligned zero).
fn truncate(t: &Zoned, unit: i128) -> Option<Zoned> {
    let ns = t.timestamp().as_nanosecond();
    let ts = Timestamp::from_nanosecond(ns - ns.rem_euclid(unit)).ok()?;
    Some(ts.to_zoned(t.time_zone().clone()))
}

/// A comma-separated list of ranges, as bits.
fn field(text: &str, bounds: &Bounds) -> Result<u64, String> {
    let mut bits = 0;
    for expr in text.split(',').filter(|e| !e.is_empty()) {
        bits |= range(expr, bounds)?;
    }
    Ok(bits)
}

/// `*`, `?`, `n`, `n-m`, each optionally `/step`.
fn range(expr: &str, bounds: &Bounds) -> Result<u64, String> {
    let range_and_step: Vec<&str> = expr.split('/').collect();
    let low_and_high: Vec<&str> = range_and_step[0].split('-').collect();
    let single = low_and_high.len() == 1;
    let (start, mut end, mut extra) = if low_and_high[0] == "*" || low_and_high[0] == "?" {
        (bounds.min, bounds.max, STAR)
    } else {
        let start = number_or_name(low_and_high[0], bounds)?;
        let end = match low_and_high.len() {
            1 => start,
            2 => number_or_name(low_and_high[1], bounds)?,
            _ => return Err(format!("too many hyphens: {expr}")),
        };
        (start, end, 0)
    };
    let step = match range_and_step.len() {
        1 => 1,
        2 => {
            let step = number(range_and_step[1])?;
            if single {
                end = bounds.max;
            }
            if step > 1 {
                extra = 0;
            }
            step
        }
        _ => return Err(format!("too many slashes: {expr}")),
    };
    if start < bounds.min {
        return Err(format!(
            "beginning of range ({start}) below minimum: {expr}"
        ));
    }
    if end > bounds.max {
        return Err(format!("end of range ({end}) above maximum: {expr}"));
    }
    if start > end {
        return Err(format!("beginning of range beyond end of range: {expr}"));
    }
    if step == 0 {
        return Err(format!("step of range should be a positive number: {expr}"));
    }
    let mut bits = 0u64;
    let mut value = start;
    while value <= end {
        bits |= 1 << value;
        value += step;
    }
    Ok(bits | extra)
}

fn number_or_name(text: &str, bounds: &Bounds) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    match bounds.names.iter().position(|name| *name == lower) {
        Some(i) => Ok(bounds.min + i as u32),
        None => number(text),
    }
}

/// A non-negative decimal number, as Go's `strconv.Atoi` reads one.
fn number(text: &str) -> Result<u32, String> {
    let n: i64 = text
        .parse()
        .map_err(|_| format!("failed to parse int from {text}"))?;
    u32::try_from(n)
        .ok()
        .filter(|&n| n < 64)
        .ok_or_else(|| format!("number out of range: {text}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(text: &str) -> i64 {
        let ts: Timestamp = text.parse().unwrap();
        ts.as_nanosecond() as i64
    }

    fn next(pattern: &str, zone: &str, after: &str) -> Option<String> {
        let tz = TimeZone::get(zone).unwrap();
        let cron = Cron::parse(pattern).unwrap();
        cron.next_after(&tz, ns(after))
            .map(|z| z.timestamp().to_string())
    }

    #[test]
    fn fields_read_as_nats_server_reads_them() {
        let cases: &[(&str, &str, &str, Option<&str>)] = &[
            // every second, minute, hour
            (
                "* * * * * *",
                "UTC",
                "2026-01-01T00:00:00Z",
                Some("2026-01-01T00:00:01Z"),
            ),
            (
                "0 0 * * * *",
                "UTC",
                "2026-01-01T00:30:00Z",
                Some("2026-01-01T01:00:00Z"),
            ),
            (
                "0 */15 * * * *",
                "UTC",
                "2026-01-01T00:31:00Z",
                Some("2026-01-01T00:45:00Z"),
            ),
            (
                "30 5 4 * * *",
                "UTC",
                "2026-01-01T05:00:00Z",
                Some("2026-01-02T04:05:30Z"),
            ),
            // ranges, lists and steps
            (
                "0 0 8-11 * * *",
                "UTC",
                "2026-01-01T11:00:00Z",
                Some("2026-01-02T08:00:00Z"),
            ),
            (
                "0 0 0-23/6 * * *",
                "UTC",
                "2026-01-01T07:00:00Z",
                Some("2026-01-01T12:00:00Z"),
            ),
            (
                "0 0 0 1,15 * *",
                "UTC",
                "2026-01-02T00:00:00Z",
                Some("2026-01-15T00:00:00Z"),
            ),
            // names, case-insensitively; Sunday is 0
            (
                "0 0 0 * * SUN",
                "UTC",
                "2026-01-01T00:00:00Z",
                Some("2026-01-04T00:00:00Z"),
            ),
            (
                "0 0 0 * * 0",
                "UTC",
                "2026-01-01T00:00:00Z",
                Some("2026-01-04T00:00:00Z"),
            ),
            (
                "0 0 0 1 mar-apr *",
                "UTC",
                "2026-01-01T00:00:00Z",
                Some("2026-03-01T00:00:00Z"),
            ),
            // both day fields restricted: either matches (the 1st, or a Friday)
            (
                "0 30 4 1 * 5",
                "UTC",
                "2026-01-01T05:00:00Z",
                Some("2026-01-02T04:30:00Z"),
            ),
            // month and year wrap
            (
                "0 0 0 1 1 *",
                "UTC",
                "2026-06-01T00:00:00Z",
                Some("2027-01-01T00:00:00Z"),
            ),
            // never within five years
            ("0 0 0 30 2 *", "UTC", "2026-01-01T00:00:00Z", None),
            // in a time zone: 09:00 in Amsterdam is 08:00 UTC in winter
            (
                "0 0 9 * * *",
                "Europe/Amsterdam",
                "2026-01-01T00:00:00Z",
                Some("2026-01-01T08:00:00Z"),
            ),
            (
                "0 0 9 * * *",
                "Europe/Amsterdam",
                "2026-07-01T00:00:00Z",
                Some("2026-07-01T07:00:00Z"),
            ),
        ];
        for (pattern, zone, after, want) in cases {
            let got = next(pattern, zone, after);
            assert_eq!(got.as_deref(), *want, "{pattern} in {zone} after {after}");
        }
    }

    #[test]
    fn malformed_patterns_are_refused() {
        for bad in [
            "* * * * *",
            "* * * * * * *",
            "60 * * * * *",
            "* * 24 * * *",
            "* * * 0 * *",
            "* * * * 13 *",
            "* * * * * 7",
            "5-1 * * * * *",
            "1-2-3 * * * * *",
            "*/0 * * * * *",
            "1/2/3 * * * * *",
            "-1 * * * * *",
            "x * * * * *",
            "* * * * foo *",
        ] {
            assert!(Cron::parse(bad).is_err(), "{bad}");
        }
    }
}
