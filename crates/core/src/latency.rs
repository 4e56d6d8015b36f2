//! Service latency tracking (nats-server's `serviceLatency`): a request
//! through a service import whose export says `latency` is sampled
//! ([`sample`]), timed from the import to its reply, and the measurement
//! published in the exporter's account on the export's results subject,
//! in nats-server's `ServiceLatency` JSON ([`Report`]).
//!
//! The outcomes, each with its status as nats-server sends it:
//! - 200: the reply came (`sendTrackingLatency`), reported by the
//!   server that opened the reply path, when the reply reaches it;
//! - 400: a sampled request without a reply subject
//!   (`sendBadRequestTrackingLatency`), when it is imported;
//! - 503: nothing in the exporter received the request
//!   (`sendBackendErrorTrackingLatency`), when it is imported;
//! - 504: no reply within the export's response threshold, when the
//!   account's sweeper finds the path expired ([`sweeper`]).
//!
//! A reply from another server is reported with what this server saw
//! (no `responder`): nats-server merges the responder's server's own
//! measurement, sent through the system account, which flotilla does
//! not have yet.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use config::options::ServiceLatency;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::client::{Account, Client};
use crate::server::Server;

/// nats-server's `ServiceLatencyType`.
pub const TYPE: &str = "io.nats.server.metric.v1.service_latency";

/// The headers of a request that asked for it to be measured, by
/// canonical name (Go's `http.Header`, as nats-server reports them).
pub type Header = BTreeMap<String, Vec<String>>;

/// A sampled request, kept with its open reply path until the reply.
#[derive(Debug)]
pub struct Tracking {
    /// The export's results subject, in the exporter's account.
    pub results: String,
    /// Who asked, and what its import shares of it.
    pub requester: Weak<Client>,
    pub requester_account: String,
    pub share: bool,
    /// The headers that triggered the measurement, if they did.
    pub header: Option<Header>,
    /// When the request went into the exporter.
    pub at: Instant,
    pub at_unix: i64,
}

/// Whether a request with `headers` is measured (nats-server's
/// `shouldSample`): always at 100 %, at random below; otherwise when its
/// tracing headers (Jaeger's `Uber-Trace-Id`, Zipkin's B3, W3C's
/// `traceparent`) say it is sampled. `Some(header)`: measured, with the
/// headers that asked, if any.
pub fn sample(latency: &ServiceLatency, headers: Option<&[u8]>) -> Option<Option<Header>> {
    if latency.sampling >= 100 {
        return Some(None);
    }
    // nats-server's draw: a value in 0..100 at most the percentage.
    if latency.sampling > 0 && fastrand::i32(0..100) <= i32::from(latency.sampling) {
        return Some(None);
    }
    let h = parse(headers?);
    traced(&h).map(Some)
}

/// The tracing decision of nats-server's `shouldSample` on parsed headers.
fn traced(h: &Header) -> Option<Header> {
    let first = |k: &str| h.get(k).and_then(|v| v.first()).map(String::as_str);
    let pick = |keys: &[&str]| -> Header {
        keys.iter()
            .filter_map(|k| h.get(*k).map(|v| (k.to_string(), v.clone())))
            .collect()
    };
    const B3: &[&str] = &[
        "X-B3-Sampled",
        "X-B3-Traceid",
        "X-B3-Parentspanid",
        "X-B3-Spanid",
    ];
    if let Some(uber) = first("Uber-Trace-Id") {
        // trace:span:parent:flags, flags' low bit set.
        let tk: Vec<&str> = uber.split(':').collect();
        let flags = tk
            .get(3)
            .filter(|f| tk.len() == 4 && (1..=2).contains(&f.len()))?;
        let bits = u8::from_str_radix(flags, 16).ok()?;
        if bits & 1 == 0 {
            return None;
        }
        let mut out = pick(&["Uber-Trace-Id"]);
        for (k, v) in h.iter().filter(|(k, _)| k.starts_with("Uberctx-")) {
            out.insert(k.clone(), v.clone());
        }
        return Some(out);
    }
    let sampled = first("X-B3-Sampled");
    if sampled == Some("1") {
        return Some(pick(B3));
    }
    if sampled == Some("0") {
        return None;
    }
    if h.contains_key("X-B3-Traceid") {
        return Some(pick(B3));
    }
    if let Some(b3) = first("B3") {
        let tk: Vec<&str> = b3.split('-').collect();
        let denied = (tk.len() > 2 && tk[2] == "0") || (tk.len() == 1 && tk[0] == "0");
        return (!denied).then(|| pick(&["B3"]));
    }
    if let Some(parent) = first("Traceparent") {
        // version-trace-parent-flags, flags' low bit set (Go parses them
        // as a signed byte: past 7f they are no flags).
        let tk: Vec<&str> = parent.split('-').collect();
        let flags = tk.get(3).filter(|f| tk.len() == 4 && f.len() == 2)?;
        let bits = i8::from_str_radix(flags, 16).ok()?;
        return (bits & 1 == 1).then(|| pick(&["Traceparent", "Tracestate"]));
    }
    None
}

/// A header block's fields by canonical name (Go's `ReadMIMEHeader`).
fn parse(block: &[u8]) -> Header {
    let mut out = Header::new();
    let Ok(text) = std::str::from_utf8(block) else {
        return out;
    };
    for line in text.split("\r\n").skip(1).take_while(|l| !l.is_empty()) {
        if let Some((k, v)) = line.split_once(':') {
            out.entry(canonical(k.trim()))
                .or_default()
                .push(v.trim().to_string());
        }
    }
    out
}

/// Go's `CanonicalMIMEHeaderKey`: each dash-separated word capitalized;
/// a key with a character outside a token is left as it is.
fn canonical(key: &str) -> String {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if !key.chars().all(token) {
        return key.to_string();
    }
    let mut upper = true;
    key.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// How a tracked request ended.
pub enum Outcome<'a> {
    /// Its reply came, from `responder` (`None`: another server's
    /// client, or the server itself).
    Answered {
        responder: Option<(&'a Client, &'a str)>,
    },
    /// It had no reply subject.
    BadRequest,
    /// Nothing in the exporter received it.
    NoDelivery,
    /// No reply within the response threshold.
    Timeout,
}

/// nats-server's `ServiceLatency`, in its field order.
#[derive(Serialize)]
struct Report<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: String,
    timestamp: String,
    status: u16,
    #[serde(rename = "description", skip_serializing_if = "str::is_empty")]
    error: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    requestor: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    responder: Option<Map<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    header: Option<&'a Header>,
    start: String,
    service: i64,
    system: i64,
    total: i64,
}

/// The measurement of `tracking` ended by `outcome` at `now`, as the JSON
/// published on its results subject.
pub fn report(server: &Server, tracking: &Tracking, outcome: Outcome<'_>, now: Instant) -> Vec<u8> {
    let requester = tracking.requester.upgrade();
    let requestor = requester.as_ref().map(|c| {
        let detail = crate::imports::Detail {
            share: tracking.share,
            server: tracking.share,
        };
        crate::imports::client_info(server, &tracking.requester_account, c, detail, None)
    });
    let req_rtt = requester.map_or(0, |c| rtt(&c));
    let elapsed = now.saturating_duration_since(tracking.at).as_nanos() as i64;
    let (status, error) = match outcome {
        Outcome::Answered { .. } => (200, ""),
        Outcome::BadRequest => (400, "Bad Request"),
        Outcome::NoDelivery => (503, "Service Unavailable"),
        Outcome::Timeout => (504, "Service Timeout"),
    };
    let (mut service, mut system, mut total) = (0, 0, 0);
    let mut responder = None;
    if let Outcome::Answered { responder: by } = outcome {
        let resp_rtt = by.map_or(0, |(c, _)| rtt(c));
        responder = by.map(|(c, account)| {
            let detail = crate::imports::Detail {
                share: true,
                server: true,
            };
            crate::imports::client_info(server, account, c, detail, None)
        });
        // What the responder's round trip does not explain is service;
        // the requester's is added to the total (nats-server's estimate).
        service = (elapsed - resp_rtt).max(0);
        total = req_rtt + elapsed;
        if resp_rtt > 0 {
            system = Instant::now().saturating_duration_since(now).as_nanos() as i64;
            total += system;
        }
    }
    let report = Report {
        kind: TYPE,
        id: event_id(),
        timestamp: jsapi::time::rfc3339(unix_now()),
        status,
        error,
        requestor,
        responder,
        header: tracking.header.as_ref(),
        start: jsapi::time::rfc3339(tracking.at_unix - req_rtt),
        service,
        system,
        total,
    };
    serde_json::to_vec(&report).expect("a latency report serializes")
}

fn rtt(client: &Client) -> i64 {
    client.rtt.load(std::sync::atomic::Ordering::Relaxed) as i64
}

pub fn unix_now() -> i64 {
    crate::client::unix_nanos(std::time::SystemTime::now()) as i64
}

/// A unique event id, as nats-server's (a NUID: 22 base-62 characters).
fn event_id() -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..22)
        .map(|_| DIGITS[fastrand::usize(..DIGITS.len())] as char)
        .collect()
}

/// How often an exporter's expired tracked requests are looked for.
const SWEEP: Duration = Duration::from_secs(1);

/// Starts, once per exporting account, the task that reports its tracked
/// requests left without a reply past their threshold (504). It ends
/// with the account or the server.
pub fn sweeper(server: &Arc<Server>, exporter: &Arc<Account>) {
    exporter.latency_sweeper.get_or_init(|| {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (server, account) = (Arc::downgrade(server), Arc::downgrade(exporter));
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(SWEEP);
            loop {
                tick.tick().await;
                let (Some(server), Some(account)) = (server.upgrade(), account.upgrade()) else {
                    return;
                };
                let now = Instant::now();
                let expired = account.responses.expire_tracked(now);
                if expired.is_empty() {
                    continue;
                }
                let mut publisher =
                    crate::internal::InternalPublisher::new(server.clone(), account);
                for t in expired {
                    let json = report(&server, &t, Outcome::Timeout, now);
                    publisher.publish(&t.results, &t.results, None, None, &json);
                }
                publisher.flush();
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(lines: &[&str]) -> Vec<u8> {
        let mut b = b"NATS/1.0\r\n".to_vec();
        for l in lines {
            b.extend_from_slice(l.as_bytes());
            b.extend_from_slice(b"\r\n");
        }
        b.extend_from_slice(b"\r\n");
        b
    }

    /// nats-server's `TestServiceLatencyHeaderTriggered` cases, with the
    /// headers each reports.
    #[test]
    fn headers_trigger_as_nats_server_decides() {
        let by_headers = ServiceLatency {
            sampling: 0,
            results: "r".into(),
        };
        let keys = |lines: &[&str]| {
            sample(&by_headers, Some(&block(lines)))
                .map(|h| h.unwrap_or_default().into_keys().collect::<Vec<_>>())
        };
        let uber = "uber-trace-id: 479fefe9525eddb:5adb976bfc1f95c1:479fefe9525eddb:1";
        assert_eq!(
            keys(&[uber, "uberctx-x: y", "other: z"]),
            Some(vec!["Uber-Trace-Id".into(), "Uberctx-X".into()])
        );
        assert_eq!(
            keys(&["Uber-Trace-Id: 479fefe9525eddb:5adb976bfc1f95c1:479fefe9525eddb:0"]),
            None
        );
        assert_eq!(
            keys(&["X-B3-Sampled: 1", "X-B3-TraceId: 80f198ee56343ba8"]),
            Some(vec!["X-B3-Sampled".into(), "X-B3-Traceid".into()])
        );
        assert_eq!(keys(&["X-B3-Sampled: 0", "X-B3-TraceId: 80f1"]), None);
        assert_eq!(
            keys(&["X-B3-TraceId: 80f198ee56343ba864fe8b2a57d3eff7"]),
            Some(vec!["X-B3-Traceid".into()])
        );
        assert_eq!(
            keys(&["b3: 80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90"]),
            Some(vec!["B3".into()])
        );
        assert_eq!(keys(&["b3: 0"]), None);
        assert_eq!(keys(&["b3: 80f198ee-e457b5a2-0"]), None);
        assert_eq!(
            keys(&[
                "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                "tracestate: rojo=00f067aa0ba902b7"
            ]),
            Some(vec!["Traceparent".into(), "Tracestate".into()])
        );
        assert_eq!(
            keys(&["traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"]),
            None
        );
        assert_eq!(keys(&["Other: 1"]), None);
        assert_eq!(sample(&by_headers, None), None);
    }

    #[test]
    fn a_full_sampling_measures_everything_and_a_partial_one_some() {
        let all = ServiceLatency {
            sampling: 100,
            results: "r".into(),
        };
        assert!((0..100).all(|_| sample(&all, None) == Some(None)));
        let half = ServiceLatency {
            sampling: 50,
            ..all
        };
        let hits = (0..10_000)
            .filter(|_| sample(&half, None).is_some())
            .count();
        // nats-server's draw takes 51 of 100 values.
        assert!((4_700..5_500).contains(&hits), "{hits}");
    }

    #[test]
    fn keys_are_canonical_as_go_makes_them() {
        assert_eq!(canonical("x-b3-traceid"), "X-B3-Traceid");
        assert_eq!(canonical("UBER-TRACE-ID"), "Uber-Trace-Id");
        assert_eq!(canonical("bad key"), "bad key");
    }
}
