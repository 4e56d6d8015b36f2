//! Message tracing (ADR-41), as nats-server 2.11 does it: a message
//! published with `Nats-Trace-Dest` makes every server it passes through
//! send one event to that subject, naming where the message came in,
//! where it went (clients, routes, streams) and its headers. With
//! `Nats-Trace-Only` it is routed and reported but delivered to nobody.
//! A route carries it with `Nats-Trace-Hop` naming the hop, so the next
//! server's event can be matched to this one's egress. Across accounts
//! the event names the mapping, service import or stream export taken,
//! and tracing goes past an import only where `allow_trace` lets it
//! (`crate::imports`).
//!
//! The W3C `traceparent` header (account-configured tracing) is not
//! supported.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde::Serialize;

use crate::client::{Client, Subscription};
use crate::server::Server;

pub const DEST: &str = "Nats-Trace-Dest";
pub const ONLY: &str = "Nats-Trace-Only";
pub const HOP: &str = "Nats-Trace-Hop";
/// A destination meaning "tracing disabled upstream" (not a subject):
/// what a service import without `allow_trace` puts in `DEST`.
pub const DISABLED: &str = "trace disabled";

/// nats-server's connection kinds, as events name them.
pub const CLIENT: u8 = 0;
pub const ROUTER: u8 = 1;

/// Messages the server itself sent (events), for their `seq`.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// What a traced message's headers asked for.
pub struct Asked {
    /// Deliver to nobody.
    pub only: bool,
    /// Where to send the event, when it is a subject.
    pub dest: Option<String>,
    /// The hop this server is, when a route brought it.
    pub hop: String,
    headers: BTreeMap<String, Vec<String>>,
}

/// Reads the trace headers of a message: `None` unless it carries
/// `Nats-Trace-Dest` (the common case, found with one scan).
pub fn asked(headers: Option<&[u8]>) -> Option<Asked> {
    let h = headers?;
    if !contains(h, DEST.as_bytes()) {
        return None;
    }
    let text = std::str::from_utf8(h).ok()?;
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.split("\r\n").skip(1) {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim_matches([' ', '\t']);
        if !k.is_empty() && !v.is_empty() {
            map.entry(k.to_string()).or_default().push(v.to_string());
        }
    }
    let first = |k: &str| map.get(k).and_then(|v| v.first()).cloned();
    let dest = first(DEST)?;
    if dest == DISABLED {
        return None;
    }
    let only =
        first(ONLY).is_some_and(|v| matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on"));
    let dest = subjects::is_valid_literal_subject(dest.as_bytes()).then_some(dest);
    Some(Asked {
        only,
        dest,
        hop: first(HOP).unwrap_or_default(),
        headers: map,
    })
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(hay, needle).is_some()
}

/// One traced message on this server: the events so far.
pub struct Trace {
    pub only: bool,
    pub dest: String,
    /// The account it came in to: an egress in another names its own.
    account: String,
    hop: String,
    hops: u32,
    headers: BTreeMap<String, Vec<String>>,
    msg_size: usize,
    events: Vec<Step>,
}

/// One step of a trace, its fields in nats-server's order.
#[derive(Serialize)]
#[serde(untagged)]
enum Step {
    In(Ingress),
    Sm(Mapping),
    Se(StreamExport),
    Si(ServiceImport),
    Eg(Egress),
    Js(Stored),
}

/// A step that is only its type and time, and what follows.
#[derive(Serialize)]
struct Base {
    #[serde(rename = "type")]
    kind_of: &'static str,
    ts: String,
}

impl Base {
    fn of(kind_of: &'static str) -> Base {
        Base { kind_of, ts: now() }
    }
}

/// The account's subject mapping took the message to `to`.
#[derive(Serialize)]
struct Mapping {
    #[serde(flatten)]
    base: Base,
    to: String,
}

/// A stream export took the message into `acc`, under `to`.
#[derive(Serialize)]
struct StreamExport {
    #[serde(flatten)]
    base: Base,
    acc: String,
    to: String,
}

/// A service import took the message from `from` into `acc`, on `to`.
#[derive(Serialize)]
struct ServiceImport {
    #[serde(flatten)]
    base: Base,
    acc: String,
    from: String,
    to: String,
}

/// What every ingress and egress step starts with: the step, when, and
/// the connection (kind, id, name).
#[derive(Serialize)]
struct Conn {
    #[serde(rename = "type")]
    kind_of: &'static str,
    ts: String,
    kind: u8,
    cid: u64,
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
}

impl Conn {
    fn of(kind_of: &'static str, kind: u8, client: &Client) -> Conn {
        Conn {
            kind_of,
            ts: now(),
            kind,
            cid: client.cid,
            name: client.meta.lock().name.clone(),
        }
    }
}

#[derive(Serialize)]
struct Ingress {
    #[serde(flatten)]
    conn: Conn,
    acc: String,
    subj: String,
}

#[derive(Serialize)]
struct Egress {
    #[serde(flatten)]
    conn: Conn,
    #[serde(skip_serializing_if = "String::is_empty")]
    hop: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    acc: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    sub: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    queue: String,
}

#[derive(Serialize)]
struct Stored {
    #[serde(rename = "type")]
    kind_of: &'static str,
    ts: String,
    stream: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    subject: String,
}

fn now() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    jsapi::time::rfc3339(nanos)
}

impl Trace {
    /// A trace begun where the message came in: from `from` (a client or
    /// a route, of `kind`) in `account`, on `subject`.
    pub fn new(
        asked: Asked,
        dest: String,
        kind: u8,
        from: &Client,
        account: &str,
        subject: &[u8],
        msg_size: usize,
    ) -> Trace {
        let ingress = Step::In(Ingress {
            conn: Conn::of("in", kind, from),
            acc: account.to_string(),
            subj: String::from_utf8_lossy(subject).into_owned(),
        });
        Trace {
            only: asked.only,
            dest,
            account: account.to_string(),
            hop: asked.hop,
            hops: 0,
            headers: asked.headers,
            msg_size,
            events: vec![ingress],
        }
    }

    /// The message went (or, trace only, would go) to a client's
    /// subscription, which took it on `subject` (a stream import's, in
    /// the exporter, for a delivery through one).
    pub fn went_to_client(&mut self, sub: &Subscription, subject: &[u8]) {
        let client = &sub.client;
        let acc = &sub.account.name;
        self.events.push(Step::Eg(Egress {
            conn: Conn::of("eg", CLIENT, client),
            hop: String::new(),
            acc: if *acc != self.account {
                acc.clone()
            } else {
                String::new()
            },
            sub: String::from_utf8_lossy(subject).into_owned(),
            queue: sub
                .queue
                .as_ref()
                .map(|q| String::from_utf8_lossy(q).into_owned())
                .unwrap_or_default(),
        }));
    }

    /// The account's mappings took the message to `to`.
    pub fn mapped_to(&mut self, to: &str) {
        self.events.push(Step::Sm(Mapping {
            base: Base::of("sm"),
            to: to.to_string(),
        }));
    }

    /// A stream import took the message into `account`, shown as `to`.
    pub fn stream_export(&mut self, account: &str, to: &str) {
        self.events.push(Step::Se(StreamExport {
            base: Base::of("se"),
            acc: account.to_string(),
            to: to.to_string(),
        }));
    }

    /// A service import took the message from `from` into `account`'s
    /// `to`.
    pub fn service_import(&mut self, account: &str, from: &str, to: &str) {
        self.events.push(Step::Si(ServiceImport {
            base: Base::of("si"),
            acc: account.to_string(),
            from: from.to_string(),
            to: to.to_string(),
        }));
    }

    /// The message went to a stream (trace only: would have).
    pub fn went_to_stream(&mut self, stream: &str, subject: &[u8]) {
        self.events.push(Step::Js(Stored {
            kind_of: "js",
            ts: now(),
            stream: stream.to_string(),
            subject: String::from_utf8_lossy(subject).into_owned(),
        }));
    }

    /// The message goes over a route: the hop id its `Nats-Trace-Hop`
    /// header carries.
    pub fn goes_over_route(&mut self, route: &Client) -> String {
        self.hops += 1;
        let hop = match self.hop.is_empty() {
            true => self.hops.to_string(),
            false => format!("{}.{}", self.hop, self.hops),
        };
        self.events.push(Step::Eg(Egress {
            conn: Conn::of("eg", ROUTER, route),
            hop: hop.clone(),
            acc: String::new(),
            sub: String::new(),
            queue: String::new(),
        }));
        hop
    }

    /// The event, as nats-server's `MsgTraceEvent` JSON.
    pub fn event(self, server: &Server) -> Bytes {
        let opts = server.opts();
        // Named only where a cluster is configured, as nats-server does.
        let cluster = match opts.cluster.enabled() {
            true => server.routes.cluster_name().0,
            false => String::new(),
        };
        let body = Event {
            server: ServerInfo {
                name: &server.name,
                host: &opts.host,
                id: &server.id,
                cluster: &cluster,
                ver: protocol::NATS_VERSION,
                jetstream: opts.jetstream.enabled,
                flags: u64::from(opts.jetstream.enabled),
                seq: SEQ.fetch_add(1, Ordering::Relaxed) + 1,
                time: now(),
            },
            request: Request {
                header: self.headers,
                msgsize: self.msg_size,
            },
            hops: self.hops,
            events: self.events,
        };
        Bytes::from(serde_json::to_vec(&body).expect("event serializes"))
    }
}

#[derive(Serialize)]
struct Event<'a> {
    server: ServerInfo<'a>,
    request: Request,
    #[serde(skip_serializing_if = "is_zero")]
    hops: u32,
    events: Vec<Step>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Serialize)]
struct ServerInfo<'a> {
    name: &'a str,
    host: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    cluster: &'a str,
    ver: &'static str,
    jetstream: bool,
    flags: u64,
    seq: u64,
    time: String,
}

#[derive(Serialize)]
struct Request {
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    header: BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "is_zero_usize")]
    msgsize: usize,
}

fn is_zero_usize(n: &usize) -> bool {
    *n == 0
}
