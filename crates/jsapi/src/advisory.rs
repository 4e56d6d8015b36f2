//! JetStream's advisories and metrics (`$JS.EVENT.>`), in nats-server's
//! JSON (`jetstream_events.go`): every event starts with `type`, `id`
//! and `timestamp`, then its own fields in Go's order; `domain` only
//! when one is configured. See `docs/wire/jetstream-advisories.md`.
//!
//! The state machines say *what* happened (an [`Event`]); the driver
//! that sends it gives the id, the time and the domain ([`Event::render`]).

use serde::Serialize;

/// Where API audits go, in the requester's account.
pub const API_AUDIT: &str = "$JS.EVENT.ADVISORY.API";

const ADVISORY: &str = "io.nats.jetstream.advisory.v1.";

/// What became of a stream or consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Create,
    Delete,
    Modify,
}

impl Action {
    fn word(self) -> &'static str {
        match self {
            Action::Create => "CREATED",
            Action::Delete => "DELETED",
            Action::Modify => "UPDATED",
        }
    }
}

/// A message's place in a consumer's deliveries, as its ack subject
/// tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub stream: String,
    pub consumer: String,
    pub consumer_seq: u64,
    pub stream_seq: u64,
    pub deliveries: u64,
}

/// Something a stream or consumer reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// `STREAM.{CREATED,UPDATED,DELETED}.<stream>`.
    Stream { stream: String, action: Action },
    /// `CONSUMER.{CREATED,DELETED}.<stream>.<consumer>`.
    Consumer {
        stream: String,
        consumer: String,
        action: Action,
    },
    /// `CONSUMER.PAUSE`: paused until `until` (unix ns), or resumed.
    Pause {
        stream: String,
        consumer: String,
        until: Option<i64>,
    },
    /// `CONSUMER.PINNED`: a `pinned_client` consumer's group pinned a
    /// client, by pin id.
    Pinned {
        stream: String,
        consumer: String,
        group: String,
        pinned_id: String,
    },
    /// `CONSUMER.UNPINNED`: a group's pin ended, for `reason` (`admin`:
    /// the UNPIN API; `timeout`: the client stopped pulling).
    Unpinned {
        stream: String,
        consumer: String,
        group: String,
        reason: &'static str,
    },
    /// `CONSUMER.MAX_DELIVERIES`: a message delivered `deliveries` times
    /// (its max) goes no more.
    MaxDeliveries(Delivery),
    /// `CONSUMER.MSG_NAKED`.
    Nak(Delivery),
    /// `CONSUMER.MSG_TERMINATED`, with the client's reason (or the
    /// server's).
    Terminated(Delivery, String),
    /// `$JS.EVENT.METRIC.CONSUMER.ACK`: a sampled ack, `ack_time` ns
    /// after the delivery.
    AckSampled(Delivery, i64),
}

impl Event {
    /// The subject it is published on, in the stream's account.
    pub fn subject(&self) -> String {
        let a = "$JS.EVENT.ADVISORY";
        match self {
            Event::Stream { stream, action } => format!("{a}.STREAM.{}.{stream}", action.word()),
            Event::Consumer {
                stream,
                consumer,
                action,
            } => format!("{a}.CONSUMER.{}.{stream}.{consumer}", action.word()),
            Event::Pause {
                stream, consumer, ..
            } => format!("{a}.CONSUMER.PAUSE.{stream}.{consumer}"),
            Event::Pinned {
                stream, consumer, ..
            } => format!("{a}.CONSUMER.PINNED.{stream}.{consumer}"),
            Event::Unpinned {
                stream, consumer, ..
            } => format!("{a}.CONSUMER.UNPINNED.{stream}.{consumer}"),
            Event::MaxDeliveries(d) => {
                format!("{a}.CONSUMER.MAX_DELIVERIES.{}.{}", d.stream, d.consumer)
            }
            Event::Nak(d) => format!("{a}.CONSUMER.MSG_NAKED.{}.{}", d.stream, d.consumer),
            Event::Terminated(d, _) => {
                format!("{a}.CONSUMER.MSG_TERMINATED.{}.{}", d.stream, d.consumer)
            }
            Event::AckSampled(d, _) => {
                format!("$JS.EVENT.METRIC.CONSUMER.ACK.{}.{}", d.stream, d.consumer)
            }
        }
    }

    /// Its JSON, as event `id`, sent at `now` (unix ns) in `account`.
    pub fn render(&self, id: &str, now: i64, domain: Option<&str>, account: &str) -> Vec<u8> {
        let head = |kind: &str| Head::new(kind, id, now);
        match self {
            Event::Stream { stream, action } => typed(
                head("stream_action"),
                StreamAction {
                    stream,
                    action: *action,
                    domain,
                },
            ),
            Event::Consumer {
                stream,
                consumer,
                action,
            } => typed(
                head("consumer_action"),
                ConsumerAction {
                    stream,
                    consumer,
                    action: *action,
                    domain,
                },
            ),
            Event::Pause {
                stream,
                consumer,
                until,
            } => typed(
                head("consumer_pause"),
                Pause {
                    stream,
                    consumer,
                    paused: until.is_some_and(|u| now < u),
                    pause_until: crate::time::rfc3339(until.unwrap_or(0)),
                    domain,
                },
            ),
            Event::Pinned { .. } | Event::Unpinned { .. } => self.pin(id, now, domain, account),
            _ => self.delivery(id, now, domain),
        }
    }

    /// A pinned or unpinned group's JSON.
    fn pin(&self, id: &str, now: i64, domain: Option<&str>, account: &str) -> Vec<u8> {
        let (stream, consumer, group, kind, pinned_id, reason) = match self {
            Event::Pinned {
                stream,
                consumer,
                group,
                pinned_id,
            } => (
                stream,
                consumer,
                group,
                "consumer_group_pinned",
                Some(pinned_id.as_str()),
                None,
            ),
            Event::Unpinned {
                stream,
                consumer,
                group,
                reason,
            } => (
                stream,
                consumer,
                group,
                "consumer_group_unpinned",
                None,
                Some(*reason),
            ),
            other => unreachable!("not a pin event: {other:?}"),
        };
        let body = Pin {
            account,
            stream,
            consumer,
            domain,
            group,
            pinned_id,
            reason,
        };
        typed(Head::new(kind, id, now), body)
    }

    /// A delivery's JSON: MAX_DELIVERIES, NAK, TERM, the ack metric.
    fn delivery(&self, id: &str, now: i64, domain: Option<&str>) -> Vec<u8> {
        let head = |kind: &str| Head::new(kind, id, now);
        match self {
            Event::MaxDeliveries(d) => typed(
                head("max_deliver"),
                MaxDeliver {
                    stream: &d.stream,
                    consumer: &d.consumer,
                    stream_seq: d.stream_seq,
                    deliveries: d.deliveries,
                    domain,
                },
            ),
            Event::Nak(d) => typed(head("nak"), DeliveryEvent::of(d, None, None, domain)),
            Event::Terminated(d, reason) => typed(
                head("terminated"),
                DeliveryEvent::of(d, Some(reason), None, domain),
            ),
            Event::AckSampled(d, ack_time) => typed(
                Head::metric("consumer_ack", id, now),
                DeliveryEvent::of(d, None, Some(*ack_time), domain),
            ),
            other => unreachable!("not a delivery event: {other:?}"),
        }
    }
}

/// `type`, `id` and `timestamp` (nats-server's `TypedEvent`).
#[derive(Serialize)]
pub struct Head<'a> {
    #[serde(rename = "type")]
    kind: String,
    id: &'a str,
    timestamp: String,
}

impl<'a> Head<'a> {
    /// An advisory's head: `kind` is the part after
    /// `io.nats.jetstream.advisory.v1.`.
    pub fn new(kind: &str, id: &'a str, now: i64) -> Head<'a> {
        Head {
            kind: format!("{ADVISORY}{kind}"),
            id,
            timestamp: crate::time::rfc3339(now),
        }
    }

    fn metric(kind: &str, id: &'a str, now: i64) -> Head<'a> {
        Head {
            kind: format!("io.nats.jetstream.metric.v1.{kind}"),
            id,
            timestamp: crate::time::rfc3339(now),
        }
    }
}

/// An event's JSON: its head, then its body's fields.
pub fn typed<B: Serialize>(head: Head<'_>, body: B) -> Vec<u8> {
    #[derive(Serialize)]
    struct Typed<'a, B> {
        #[serde(flatten)]
        head: Head<'a>,
        #[serde(flatten)]
        body: B,
    }
    serde_json::to_vec(&Typed { head, body }).expect("events serialize")
}

#[derive(Serialize)]
struct StreamAction<'a> {
    stream: &'a str,
    action: Action,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
}

#[derive(Serialize)]
struct ConsumerAction<'a> {
    stream: &'a str,
    consumer: &'a str,
    action: Action,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
}

#[derive(Serialize)]
struct Pause<'a> {
    stream: &'a str,
    consumer: &'a str,
    paused: bool,
    pause_until: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
}

/// PINNED (with `pinned_id`) or UNPINNED (with `reason`).
#[derive(Serialize)]
struct Pin<'a> {
    account: &'a str,
    stream: &'a str,
    consumer: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
    group: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pinned_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
}

#[derive(Serialize)]
struct MaxDeliver<'a> {
    stream: &'a str,
    consumer: &'a str,
    stream_seq: u64,
    deliveries: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
}

/// NAK, TERM and the ack metric: the delivery, and a reason or an ack
/// time.
#[derive(Serialize)]
struct DeliveryEvent<'a> {
    stream: &'a str,
    consumer: &'a str,
    consumer_seq: u64,
    stream_seq: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    ack_time: Option<i64>,
    deliveries: u64,
    #[serde(skip_serializing_if = "reason_omitted")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    domain: Option<&'a str>,
}

fn reason_omitted(r: &Option<&str>) -> bool {
    r.is_none_or(|r| r.is_empty())
}

impl<'a> DeliveryEvent<'a> {
    fn of(
        d: &'a Delivery,
        reason: Option<&'a str>,
        ack_time: Option<i64>,
        domain: Option<&'a str>,
    ) -> Self {
        DeliveryEvent {
            stream: &d.stream,
            consumer: &d.consumer,
            consumer_seq: d.consumer_seq,
            stream_seq: d.stream_seq,
            ack_time,
            deliveries: d.deliveries,
            reason,
            domain,
        }
    }
}

/// nats-server's `JSAPIAudit`: a request to the API and its answer, in
/// the requester's account. `client` is the requester's `ClientInfo`
/// (`null` when unknown).
#[derive(Serialize)]
pub struct Audit<'a> {
    pub server: &'a str,
    pub client: Option<&'a serde_json::Value>,
    pub subject: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub request: &'a str,
    pub response: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<&'a str>,
}

/// An advisory that is a struct of its own fields, of type `KIND`
/// (after `io.nats.jetstream.advisory.v1.`).
pub trait Advisory: Serialize + Sized {
    const KIND: &'static str;

    /// Its JSON, as event `id`, sent at `now` (unix ns).
    fn render(&self, id: &str, now: i64) -> Vec<u8> {
        typed(Head::new(Self::KIND, id, now), self)
    }
}

impl Advisory for Audit<'_> {
    const KIND: &'static str = "api_audit";
}

/// A request waiting for its answer, as its audit tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditNote {
    pub subject: String,
    pub request: Vec<u8>,
    /// The requester's `ClientInfo`; `None` when unknown (over a route).
    pub client: Option<serde_json::Value>,
}

/// Requests waiting for their answers, by reply subject, so each answer
/// is audited with its request: at most `limit`, the oldest forgotten
/// first (answered by another server, or never).
#[derive(Debug, Default)]
pub struct AuditBook {
    by_reply: std::collections::HashMap<String, AuditNote>,
    order: std::collections::VecDeque<String>,
}

impl AuditBook {
    pub fn note(&mut self, reply: String, note: AuditNote, limit: usize) {
        if self.by_reply.insert(reply.clone(), note).is_none() {
            self.order.push_back(reply);
        }
        while self.order.len() > limit {
            let oldest = self.order.pop_front().expect("longer than the limit");
            self.by_reply.remove(&oldest);
        }
        debug_assert_eq!(self.by_reply.len(), self.order.len(), "one entry per reply");
    }

    /// The request an answer to `reply` answers, taken.
    pub fn take(&mut self, reply: &str) -> Option<AuditNote> {
        let note = self.by_reply.remove(reply)?;
        self.order.retain(|r| r != reply);
        Some(note)
    }
}

/// A replicated stream's (or consumer's) leadership: nats-server's
/// `JSStreamLeaderElectedAdvisory` and `JSConsumerLeaderElectedAdvisory`.
/// `replicas` includes the new leader; `account` is set only on the copy
/// sent to the system account.
#[derive(Serialize)]
pub struct LeaderElected<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account: Option<&'a str>,
    pub stream: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<&'a str>,
    pub leader: &'a str,
    pub replicas: &'a [crate::PeerInfo],
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<&'a str>,
}

impl LeaderElected<'_> {
    pub fn subject(&self) -> String {
        match self.consumer {
            Some(c) => format!(
                "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.{}.{c}",
                self.stream
            ),
            None => format!("$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED.{}", self.stream),
        }
    }

    pub fn render(&self, id: &str, now: i64) -> Vec<u8> {
        let kind = match self.consumer {
            Some(_) => "consumer_leader_elected",
            None => "stream_leader_elected",
        };
        typed(Head::new(kind, id, now), self)
    }
}

/// Where a server that ran out of disk says so, in the system account.
pub const OUT_OF_STORAGE: &str = "$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE";

/// nats-server's `JSServerOutOfSpaceAdvisory` (its type is
/// `server_out_of_space`).
#[derive(Serialize)]
pub struct OutOfSpace<'a> {
    pub server: &'a str,
    pub server_id: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub stream: &'a str,
    pub cluster: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<&'a str>,
}

impl Advisory for OutOfSpace<'_> {
    const KIND: &'static str = "server_out_of_space";
}

/// Where the meta group's new leader is told, in the system account.
pub const DOMAIN_LEADER_ELECTED: &str = "$JS.EVENT.ADVISORY.DOMAIN.LEADER_ELECTED";

/// nats-server's `JSDomainLeaderElectedAdvisory`: `leader` is the meta
/// leader's node id (not its name).
#[derive(Serialize)]
pub struct DomainLeaderElected<'a> {
    pub leader: &'a str,
    pub replicas: &'a [crate::PeerInfo],
    pub cluster: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<&'a str>,
}

impl Advisory for DomainLeaderElected<'_> {
    const KIND: &'static str = "domain_leader_elected";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(e: &Event, domain: Option<&str>) -> serde_json::Value {
        serde_json::from_slice(&e.render("ID", 1_700_000_000_000_000_000, domain, "A")).unwrap()
    }

    fn delivery() -> Delivery {
        Delivery {
            stream: "S".into(),
            consumer: "C".into(),
            consumer_seq: 3,
            stream_seq: 7,
            deliveries: 2,
        }
    }

    #[test]
    fn events_carry_nats_servers_fields() {
        let cases: Vec<(Event, &str, serde_json::Value)> = vec![
            (
                Event::Stream {
                    stream: "S".into(),
                    action: Action::Modify,
                },
                "$JS.EVENT.ADVISORY.STREAM.UPDATED.S",
                serde_json::json!({"type": "io.nats.jetstream.advisory.v1.stream_action",
                    "stream": "S", "action": "modify"}),
            ),
            (
                Event::Consumer {
                    stream: "S".into(),
                    consumer: "C".into(),
                    action: Action::Delete,
                },
                "$JS.EVENT.ADVISORY.CONSUMER.DELETED.S.C",
                serde_json::json!({"type": "io.nats.jetstream.advisory.v1.consumer_action",
                    "stream": "S", "consumer": "C", "action": "delete"}),
            ),
            (
                Event::MaxDeliveries(delivery()),
                "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C",
                serde_json::json!({"type": "io.nats.jetstream.advisory.v1.max_deliver",
                    "stream": "S", "consumer": "C", "stream_seq": 7, "deliveries": 2}),
            ),
            (
                Event::Nak(delivery()),
                "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.S.C",
                serde_json::json!({"type": "io.nats.jetstream.advisory.v1.nak",
                    "stream": "S", "consumer": "C", "consumer_seq": 3, "stream_seq": 7,
                    "deliveries": 2}),
            ),
            (
                Event::Terminated(delivery(), String::new()),
                "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.S.C",
                serde_json::json!({"type": "io.nats.jetstream.advisory.v1.terminated",
                    "stream": "S", "consumer": "C", "consumer_seq": 3, "stream_seq": 7,
                    "deliveries": 2}),
            ),
            (
                Event::AckSampled(delivery(), 5),
                "$JS.EVENT.METRIC.CONSUMER.ACK.S.C",
                serde_json::json!({"type": "io.nats.jetstream.metric.v1.consumer_ack",
                    "stream": "S", "consumer": "C", "consumer_seq": 3, "stream_seq": 7,
                    "ack_time": 5, "deliveries": 2}),
            ),
            (
                Event::Unpinned {
                    stream: "S".into(),
                    consumer: "C".into(),
                    group: "g".into(),
                    reason: "admin",
                },
                "$JS.EVENT.ADVISORY.CONSUMER.UNPINNED.S.C",
                serde_json::json!({"type": "io.nats.jetstream.advisory.v1.consumer_group_unpinned",
                    "account": "A", "stream": "S", "consumer": "C", "group": "g",
                    "reason": "admin"}),
            ),
            (
                Event::Pause {
                    stream: "S".into(),
                    consumer: "C".into(),
                    until: None,
                },
                "$JS.EVENT.ADVISORY.CONSUMER.PAUSE.S.C",
                serde_json::json!({"type": "io.nats.jetstream.advisory.v1.consumer_pause",
                    "stream": "S", "consumer": "C", "paused": false,
                    "pause_until": "0001-01-01T00:00:00Z"}),
            ),
        ];
        for (event, subject, mut want) in cases {
            assert_eq!(event.subject(), subject);
            let got = json(&event, None);
            want["id"] = "ID".into();
            want["timestamp"] = "2023-11-14T22:13:20Z".into();
            assert_eq!(got, want, "{subject}");
            assert_eq!(json(&event, Some("hub"))["domain"], "hub", "{subject}");
        }
    }

    #[test]
    fn the_book_pairs_answers_with_requests_and_forgets_the_oldest() {
        let note = |s: &str| AuditNote {
            subject: s.into(),
            request: Vec::new(),
            client: None,
        };
        let mut book = AuditBook::default();
        for i in 0..3 {
            book.note(format!("r{i}"), note(&format!("s{i}")), 2);
        }
        assert!(book.take("r0").is_none(), "the oldest is forgotten");
        assert_eq!(book.take("r2").map(|n| n.subject), Some("s2".into()));
        assert!(book.take("r2").is_none(), "taken once");
        assert_eq!(book.take("r1").map(|n| n.subject), Some("s1".into()));
    }

    #[test]
    fn a_terms_reason_is_kept() {
        let e = Event::Terminated(delivery(), "bad payload".into());
        assert_eq!(json(&e, None)["reason"], "bad payload");
    }
}
