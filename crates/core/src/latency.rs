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
//! A request answered by another server's client is measured on both:
//! the responder's server times it from delivery to reply and sends its
//! half through the system account ([`responder_half`]), to the server
//! its reply path names (`.<hash>.T`); the requester's server merges it
//! with its own ([`remote_half`], `Responses::meet`), as nats-server's
//! `m1` and `m2`. Without a system account, a reply from another server
//! is reported with this server's half alone (no `responder`).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use config::options::ServiceLatency;
use serde::{Deserialize, Serialize};
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

/// nats-server's `ServiceLatency`, in its field order: measured here,
/// or (as `m2`) by a responder's server.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Report {
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub timestamp: String,
    #[serde(default)]
    pub status: u16,
    #[serde(
        rename = "description",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requestor: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responder: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<Header>,
    #[serde(default)]
    pub start: String,
    #[serde(default)]
    pub service: i64,
    #[serde(default)]
    pub system: i64,
    #[serde(default)]
    pub total: i64,
}

impl Report {
    pub fn json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a latency report serializes")
    }

    /// Completes this server's measurement (`m1`, its total right) with
    /// the responder's server's (`m2`, its service time and responder
    /// right), as nats-server's `merge`: what neither explains is the
    /// system's.
    pub fn merge(&mut self, m2: &Report) {
        let rtt = m2
            .responder
            .as_ref()
            .and_then(|r| r.get("rtt"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        self.system = (self.service - (m2.service + rtt)).max(0);
        self.service = m2.service.max(0);
        self.responder = m2.responder.clone();
    }
}

/// nats-server's `remoteLatency`: a responder's server's half, sent to
/// the requester's server on `$SYS.LATENCY.M2.<its hash>`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Remote {
    pub account: String,
    pub req_id: String,
    pub m2: Report,
}

/// The subject prefix of responders' halves.
pub const REMOTE_PREFIX: &str = "$SYS.LATENCY.M2.";

/// This server's token in a timed request's reply path and in
/// [`REMOTE_PREFIX`] subjects (nats-server's `shash`).
pub fn node_hash(server: &Server) -> String {
    jsapi::go_hash(&server.name)
}

/// A timed request's reply path ends `.<hash>.T` (nats-server's
/// `isTrackedReply`).
pub fn is_tracked_reply(reply: &[u8]) -> bool {
    reply.len() > 15 && reply.ends_with(b".T")
}

/// The measurement of `tracking` ended by `outcome` at `now`.
pub fn measure(server: &Server, tracking: &Tracking, outcome: Outcome<'_>, now: Instant) -> Report {
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
        responder = by.map(|(c, account)| responder_info(server, c, account));
        // What the responder's round trip does not explain is service;
        // the requester's is added to the total (nats-server's estimate).
        service = (elapsed - resp_rtt).max(0);
        total = req_rtt + elapsed;
        if resp_rtt > 0 {
            system = Instant::now().saturating_duration_since(now).as_nanos() as i64;
            total += system;
        }
    }
    Report {
        kind: TYPE.to_string(),
        id: event_id(),
        timestamp: jsapi::time::rfc3339(unix_now()),
        status,
        error: error.to_string(),
        requestor,
        responder,
        header: tracking.header.clone(),
        start: jsapi::time::rfc3339(tracking.at_unix - req_rtt),
        service,
        system,
        total,
    }
}

/// A responder's full client info (nats-server's `getClientInfo(true)`).
fn responder_info(server: &Server, client: &Client, account: &str) -> Map<String, Value> {
    let detail = crate::imports::Detail {
        share: true,
        server: true,
    };
    crate::imports::client_info(server, account, client, detail, None)
}

/// When a request that another server sent was delivered to a client
/// here, for a tracked export: its reply ends the responder's half.
#[derive(Debug, Clone)]
pub struct RemoteStart {
    pub at: Instant,
    pub at_unix: i64,
    pub account: String,
}

/// The responder's half of a timed request that `client` answered on
/// `reply` (nats-server's `rrTracking` in `processInboundClientMsg`):
/// the subject it goes to, and the message.
pub fn responder_half(
    server: &Server,
    client: &Client,
    reply: &[u8],
    start: &RemoteStart,
) -> Option<(String, Vec<u8>)> {
    let reply = std::str::from_utf8(reply).ok()?;
    let mut tokens = reply.rsplit('.');
    let (_, hash) = (tokens.next()?, tokens.next()?);
    let responder = responder_info(server, client, &start.account);
    let rtt = rtt(client);
    let service = (start.at.elapsed().as_nanos() as i64 - rtt).max(0);
    let m2 = Report {
        status: 200,
        responder: Some(responder),
        start: jsapi::time::rfc3339(start.at_unix),
        timestamp: jsapi::time::rfc3339(0),
        service,
        total: service + rtt,
        ..Report::default()
    };
    let remote = Remote {
        account: start.account.clone(),
        req_id: reply.to_string(),
        m2,
    };
    let json = serde_json::to_vec(&remote).expect("a remote latency serializes");
    Some((format!("{REMOTE_PREFIX}{hash}"), json))
}

/// A responder's half came (on this server's [`REMOTE_PREFIX`] subject,
/// in the system account): with this server's half, the measurement is
/// published in the exporter's account.
pub fn remote_half(server: &Arc<Server>, body: &[u8]) {
    let Ok(remote) = serde_json::from_slice::<Remote>(body) else {
        tracing::error!("Error unmarshalling remote latency measurement");
        return;
    };
    let Some(exporter) = server.accounts.get(remote.account.as_bytes()) else {
        return;
    };
    let half = crate::account::imports::Half::Remote(Box::new(remote.m2));
    let met = exporter
        .responses
        .meet(remote.req_id.as_bytes(), half, Instant::now());
    if let Some((report, results)) = met {
        let mut publisher = crate::internal::InternalPublisher::new(server.clone(), exporter);
        publisher.publish(&results, &results, None, None, &report.json());
        publisher.flush();
    }
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
                    let json = measure(&server, &t, Outcome::Timeout, now).json();
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
