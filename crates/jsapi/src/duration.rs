//! Go's duration text (`time.ParseDuration` and `Duration.String`), which
//! NATS uses in config files and in the `Nats-TTL` header.

use std::time::Duration;

/// Durations longer than this are refused: no setting needs more, and
/// timers and instants stay far from overflow.
pub const MAX: Duration = Duration::from_secs(365 * 86400);

fn bounded(secs: f64, s: &str) -> Result<Duration, String> {
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if d <= MAX => Ok(d),
        _ => Err(format!("duration \"{s}\" is longer than a year")),
    }
}

/// Seconds as a duration, within [`MAX`].
pub fn from_secs(secs: f64, text: &str) -> Result<Duration, String> {
    bounded(secs, text)
}

/// `300ms`, `1.5h`, `2h45m`, `0`; at most a year.
pub fn parse(s: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration \"{s}\"");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let body = s.strip_prefix('+').unwrap_or(s);
    if body.starts_with('-') {
        return Err(format!("time: negative duration \"{s}\" is not allowed"));
    }
    if body.is_empty() {
        return Err(invalid());
    }
    let mut total = 0f64;
    let mut rest = body;
    while !rest.is_empty() {
        let num_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || *b == b'.')
            .count();
        if num_len == 0 {
            return Err(invalid());
        }
        let n: f64 = rest[..num_len].parse().map_err(|_| invalid())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .char_indices()
            .find(|(_, c)| c.is_ascii_digit() || *c == '.')
            .map_or(rest.len(), |(i, _)| i);
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let scale = match unit {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => return Err(format!("time: missing unit in duration \"{s}\"")),
            u => return Err(format!("time: unknown unit \"{u}\" in duration \"{s}\"")),
        };
        total += n * scale;
    }
    bounded(total, s)
}

/// Go's `Duration.String()`: `1h2m3.5s`, `500ms`, `0s`.
pub fn format(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".to_string();
    }
    fn frac(value: u128, unit: u128, suffix: &str) -> String {
        let whole = value / unit;
        let rem = value % unit;
        if rem == 0 {
            return format!("{whole}{suffix}");
        }
        let digits = unit.ilog10() as usize;
        let f = format!("{rem:0digits$}");
        format!("{whole}.{}{suffix}", f.trim_end_matches('0'))
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return frac(ns, 1_000, "µs");
    }
    if ns < 1_000_000_000 {
        return frac(ns, 1_000_000, "ms");
    }
    let total_secs = ns / 1_000_000_000;
    let h = total_secs / 3600;
    let m = (total_secs % 3600) / 60;
    let secs = frac(ns % 60_000_000_000, 1_000_000_000, "s");
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert!(parse("2").unwrap_err().contains("missing unit"));
        assert!(parse("3d").unwrap_err().contains("unknown unit \"d\""));
        assert!(parse("abc").unwrap_err().contains("invalid duration"));
        assert!(parse("-1s").is_err());
        assert!(parse("100000000000000000000s")
            .unwrap_err()
            .contains("longer than a year"));
    }

    #[test]
    fn formatting() {
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_nanos(812)), "812ns");
        assert_eq!(format(Duration::from_nanos(523_000)), "523µs");
        assert_eq!(format(Duration::from_nanos(1_234_567)), "1.234567ms");
        assert_eq!(format(Duration::from_millis(2500)), "2.5s");
        assert_eq!(format(Duration::from_secs(60)), "1m0s");
        assert_eq!(format(Duration::from_secs(900)), "15m0s");
        assert_eq!(format(Duration::from_millis(3_723_500)), "1h2m3.5s");
    }
}
