//! Time and duration texts exactly as nats-server's monitoring prints them.

use std::time::{Duration, SystemTime};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// An empty JSON object (`{}`), for sections nats-server reports with
/// nothing in them.
#[derive(serde::Serialize, Default, Debug, Clone, Copy)]
pub struct Empty {}

/// RFC 3339 in UTC with the fraction trimmed of trailing zeros, as Go's
/// `time.RFC3339Nano`.
pub fn rfc3339(t: SystemTime) -> String {
    OffsetDateTime::from(t)
        .format(&Rfc3339)
        .unwrap_or_else(|_| "0001-01-01T00:00:00Z".to_string())
}

/// nats-server's `myUptime`: whole seconds as `1y2d3h4m5s`, dropping the
/// larger units that are zero.
pub fn uptime(d: Duration) -> String {
    let mut s = d.as_secs();
    let years = s / (365 * 86400);
    s %= 365 * 86400;
    let days = s / 86400;
    s %= 86400;
    let hours = s / 3600;
    s %= 3600;
    let mins = s / 60;
    s %= 60;
    if years > 0 {
        format!("{years}y{days}d{hours}h{mins}m{s}s")
    } else if days > 0 {
        format!("{days}d{hours}h{mins}m{s}s")
    } else if hours > 0 {
        format!("{hours}h{mins}m{s}s")
    } else if mins > 0 {
        format!("{mins}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// Go's `time.Duration.String()`, used for round-trip times.
pub use jsapi::duration::format as go_duration;

/// The round trip as nats-server shows it: microsecond precision between
/// 1µs and 1ms.
pub fn rtt(nanos: u64) -> String {
    let mut d = Duration::from_nanos(nanos);
    if d > Duration::from_micros(1) && d < Duration::from_millis(1) {
        d = Duration::from_micros(d.as_micros() as u64);
    }
    go_duration(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptimes() {
        assert_eq!(uptime(Duration::from_millis(999)), "0s");
        assert_eq!(uptime(Duration::from_secs(60)), "1m0s");
        assert_eq!(uptime(Duration::from_secs(7207)), "2h0m7s");
        assert_eq!(uptime(Duration::from_secs(86400 + 3)), "1d0h0m3s");
        assert_eq!(
            uptime(Duration::from_secs(
                365 * 86400 + 2 * 86400 + 3 * 3600 + 4 * 60 + 5
            )),
            "1y2d3h4m5s"
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_nanos(812)), "812ns");
        assert_eq!(go_duration(Duration::from_nanos(523_000)), "523µs");
        assert_eq!(go_duration(Duration::from_nanos(1_234_567)), "1.234567ms");
        assert_eq!(go_duration(Duration::from_millis(2500)), "2.5s");
        assert_eq!(go_duration(Duration::from_secs(60)), "1m0s");
        assert_eq!(go_duration(Duration::from_millis(3_723_500)), "1h2m3.5s");
        assert_eq!(rtt(523_456), "523µs");
    }

    #[test]
    fn timestamps() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_714_564_803_045_120_000);
        assert_eq!(rfc3339(t), "2024-05-01T12:00:03.04512Z");
        assert_eq!(
            rfc3339(SystemTime::UNIX_EPOCH + Duration::from_secs(1)),
            "1970-01-01T00:00:01Z"
        );
    }
}
