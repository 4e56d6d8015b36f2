//! Timestamps as the API writes them: RFC 3339 in UTC with the fraction
//! trimmed (Go's `RFC3339Nano`), from Unix nanoseconds. Go's zero time
//! is `0001-01-01T00:00:00Z`.

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

pub const ZERO: &str = "0001-01-01T00:00:00Z";

/// Unix nanoseconds to RFC 3339; 0 is Go's zero time.
pub fn rfc3339(nanos: i64) -> String {
    if nanos == 0 {
        return ZERO.to_string();
    }
    OffsetDateTime::from_unix_timestamp_nanos(nanos as i128)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| ZERO.to_string())
}

/// RFC 3339 to Unix nanoseconds; Go's zero time (and anything before the
/// epoch) is 0.
pub fn parse(s: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    let n = t.unix_timestamp_nanos();
    Some(if n < 0 { 0 } else { n as i64 })
}

/// RFC 3339 to Unix nanoseconds, before the epoch too; times beyond what
/// 64 bits of nanoseconds hold (1677 to 2262) are clamped to the ends.
pub fn parse_signed(s: &str) -> Option<i64> {
    let n = OffsetDateTime::parse(s, &Rfc3339)
        .ok()?
        .unix_timestamp_nanos();
    Some(n.clamp(i64::MIN.into(), i64::MAX.into()) as i64)
}

/// Serde helpers for optional timestamps stored as Unix nanoseconds.
pub mod opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<i64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(n) => s.serialize_str(&super::rfc3339(*n)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        match s {
            None => Ok(None),
            Some(s) => super::parse(&s)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom(format!("invalid time {s:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        assert_eq!(rfc3339(0), ZERO);
        let n = 1_714_564_803_045_120_000;
        assert_eq!(rfc3339(n), "2024-05-01T12:00:03.04512Z");
        assert_eq!(parse("2024-05-01T12:00:03.04512Z"), Some(n));
        assert_eq!(parse(ZERO), Some(0));
    }
}
