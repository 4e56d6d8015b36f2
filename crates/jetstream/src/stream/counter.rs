//! Counters (ADR-49, `allow_msg_counter`): every subject of such a stream
//! is a counter. A publish carries `Nats-Incr` and no body; the stream
//! stores the subject's last value plus the increment as `{"val":"<n>"}`,
//! keeping the headers. A message from a source counts only what its
//! origin's value moved since that origin was last seen here, which
//! `Nats-Counter-Sources` remembers per origin stream and subject.
//!
//! Values are arbitrary-precision integers, as nats-server's `big.Int`s
//! are; everything here is a pure function of the stored last message and
//! the incoming one, so every replica computes the same value.

use std::collections::BTreeMap;

use bytes::Bytes;
use num_bigint::BigInt;

use crate::api::{ApiError, E};
use crate::headers;

/// `Nats-Counter-Sources`: origin stream, then origin subject, to the
/// last value seen from it (Go's `map[string]map[string]string`, whose
/// JSON has its keys sorted, as a `BTreeMap`'s is).
type Sources = BTreeMap<String, BTreeMap<String, String>>;

/// A counter message's body.
#[derive(serde::Deserialize)]
struct Value {
    #[serde(default)]
    val: String,
}

/// What a counter publish stores, and the value its PubAck reports.
pub struct Counted {
    pub headers: Bytes,
    pub payload: Bytes,
    pub value: String,
}

/// `Nats-Incr` read as Go's `big.Int.SetString(v, 10)` reads it: an
/// optional sign, then decimal digits.
pub fn parse_incr(text: &str) -> Option<BigInt> {
    let (negative, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let magnitude = BigInt::parse_bytes(digits.as_bytes(), 10)?;
    Some(if negative { -magnitude } else { magnitude })
}

/// A value as Go's `SetString` leaves it when the text does not parse: 0.
fn value_or_zero(text: &str) -> BigInt {
    parse_incr(text).unwrap_or_default()
}

/// The counter message to store for a publish of `incr` on `subject`,
/// whose headers are `incoming`, given the subject's last stored message.
/// A message from a source (`Nats-Stream-Source`) adds the difference to
/// what its origin reported last instead, and `Nats-Incr` is rewritten to
/// say so.
pub fn count(
    last: Option<(Option<&[u8]>, &[u8])>,
    incoming: &[u8],
    payload: &[u8],
    mut incr: BigInt,
    subject: &str,
) -> Result<Counted, ApiError> {
    let broken = || E::MESSAGE_COUNTER_BROKEN.err();
    let mut total = BigInt::default();
    let mut sources = Sources::new();
    if let Some((last_headers, last_payload)) = last {
        let value: Value = serde_json::from_slice(last_payload).map_err(|_| broken())?;
        if let Some(text) = last_headers.and_then(|h| headers::get(h, headers::COUNTER_SOURCES)) {
            if !text.is_empty() {
                sources = serde_json::from_str(text).map_err(|_| broken())?;
            }
        }
        total = value_or_zero(&value.val);
    }
    let mut out = Bytes::copy_from_slice(incoming);
    if let Some(tag) = headers::get(incoming, headers::STREAM_SOURCE) {
        let fields: Vec<&str> = tag.split(' ').collect();
        let origin_stream = fields[0].to_string();
        let origin_subject = fields.get(4).map_or(subject, |s| *s).to_string();
        let reported: Value = serde_json::from_slice(payload).map_err(|_| broken())?;
        let reported = value_or_zero(&reported.val);
        let seen = sources.entry(origin_stream).or_default();
        let previous = seen
            .insert(origin_subject, reported.to_string())
            .map_or_else(BigInt::default, |p| value_or_zero(&p));
        incr = reported - previous;
        out = headers::set(Some(&out), headers::INCR, &incr.to_string());
    }
    total += incr;
    let value = total.to_string();
    if !sources.is_empty() {
        let text = String::from_utf8(crate::api::gojson::to_vec(&sources)).map_err(|_| broken())?;
        out = headers::set(Some(&out), headers::COUNTER_SOURCES, &text);
    }
    let body = format!("{{\"val\":\"{value}\"}}");
    Ok(Counted {
        headers: out,
        payload: Bytes::from(body),
        value,
    })
}

/// nats-server's refusals of a counter publish that is not from a source:
/// counters off, a body, or a header that cannot go with an increment.
pub fn check_publish(enabled: bool, h: &[u8], payload: &[u8]) -> Result<(), ApiError> {
    if !enabled {
        return Err(E::MESSAGE_INCR_DISABLED.err());
    }
    if !payload.is_empty() {
        return Err(E::MESSAGE_INCR_PAYLOAD.err());
    }
    let named = |name: &str| headers::get(h, name).is_some_and(|v| !v.is_empty());
    let numeric = |name: &str| headers::get(h, name).and_then(headers::parse_u64).is_some();
    if named(headers::ROLLUP)
        || named(headers::EXPECTED_STREAM)
        || named(headers::EXPECTED_LAST_MSG_ID)
        || named(headers::EXPECTED_LAST_SUBJ_SEQ_SUBJ)
        || numeric(headers::EXPECTED_LAST_SEQ)
        || numeric(headers::EXPECTED_LAST_SUBJ_SEQ)
    {
        return Err(E::MESSAGE_INCR_INVALID.err());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr_headers(v: &str) -> Bytes {
        headers::build(None, &[(headers::INCR, v)])
    }

    #[test]
    fn increments_parse_as_go_reads_them() {
        for (text, want) in [
            ("+1", Some(1)),
            ("-10", Some(-10)),
            ("0", Some(0)),
            ("7", Some(7)),
        ] {
            assert_eq!(parse_incr(text), want.map(BigInt::from), "{text}");
        }
        for bad in ["", "+", "-", "1.5", "1_000", "++1", " 1", "x"] {
            assert_eq!(parse_incr(bad), None, "{bad:?}");
        }
        let huge = "123456789012345678901234567890";
        assert_eq!(parse_incr(huge).unwrap().to_string(), huge);
    }

    #[test]
    fn values_add_up_from_the_last_message() {
        let h = incr_headers("+5");
        let first = count(None, &h, b"", BigInt::from(5), "c").unwrap();
        assert_eq!(first.payload, &b"{\"val\":\"5\"}"[..]);
        assert_eq!(first.headers, h);
        let last = Some((Some(&first.headers[..]), &first.payload[..]));
        let second = count(last, &incr_headers("-7"), b"", BigInt::from(-7), "c").unwrap();
        assert_eq!(second.value, "-2");
        let broken = count(Some((None, b"nope")), &h, b"", BigInt::from(1), "c");
        assert_eq!(broken.err().map(|e| e.err_code), Some(10172));
    }

    #[test]
    fn a_sourced_value_counts_what_its_origin_moved() {
        let sourced = |val: &str| {
            let h = headers::build(
                None,
                &[
                    (headers::INCR, "+1"),
                    (headers::STREAM_SOURCE, "ORIGIN 9   c.a"),
                ],
            );
            (h, format!("{{\"val\":\"{val}\"}}"))
        };
        let (h, body) = sourced("10");
        let first = count(None, &h, body.as_bytes(), BigInt::from(1), "c").unwrap();
        assert_eq!(first.value, "10");
        assert_eq!(headers::get(&first.headers, headers::INCR), Some("10"));
        assert_eq!(
            headers::get(&first.headers, headers::COUNTER_SOURCES),
            Some("{\"ORIGIN\":{\"c.a\":\"10\"}}")
        );
        let (h, body) = sourced("12");
        let last = Some((Some(&first.headers[..]), &first.payload[..]));
        let second = count(last, &h, body.as_bytes(), BigInt::from(1), "c").unwrap();
        assert_eq!(second.value, "12");
        assert_eq!(headers::get(&second.headers, headers::INCR), Some("2"));
    }

    #[test]
    fn refusals() {
        let ok = incr_headers("+1");
        assert!(check_publish(true, &ok, b"").is_ok());
        let code = |r: Result<(), ApiError>| r.err().map(|e| e.err_code);
        assert_eq!(code(check_publish(false, &ok, b"")), Some(10168));
        assert_eq!(code(check_publish(true, &ok, b"x")), Some(10170));
        let with = |name: &str, v: &str| headers::build(None, &[(headers::INCR, "+1"), (name, v)]);
        assert_eq!(
            code(check_publish(true, &with(headers::ROLLUP, "sub"), b"")),
            Some(10171)
        );
        assert_eq!(
            code(check_publish(
                true,
                &with(headers::EXPECTED_LAST_SEQ, "3"),
                b""
            )),
            Some(10171)
        );
        assert!(check_publish(true, &with(headers::EXPECTED_LAST_SEQ, "x"), b"").is_ok());
    }
}
