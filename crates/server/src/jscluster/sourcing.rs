//! Mirrors and sources of replicated streams, driven by the sourcing
//! stream's leader over the JetStream API, wherever the origin lives.
//!
//! For each source, a durable pull consumer on the origin (named for the
//! sourcing stream and the source, so a new leader finds it again) with
//! explicit acks and one message outstanding. Each delivery becomes an
//! `Op::Sourced` entry in the sourcing stream's log, replied to with the
//! delivery's ack subject: the leader acks once the copy is applied, that
//! is, on a majority's disks. A work-queue origin therefore never drops a
//! message the copy could still lose (incident 2), and one message
//! outstanding keeps the copies in origin order, so the replicated source
//! position never skips one still to come. A redelivery (a lost ack, a
//! new leader) is at or below the position and is not stored again.
//!
//! The consumer starts after the position; it goes away by itself
//! (`inactive_threshold`) once nobody pulls from it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jetstream::api::time::rfc3339;
use jetstream::consumer::ack_info;
use jetstream::output::OutMsg;
use jetstream::stream::SourceSpec;
use jsservice::stream_sm::Op;
use serde_json::{json, Value};
use tracing::{info, warn};

use crate::js::Inbound;

/// Pull requests wait this long on the origin; a new one goes out as
/// each expires.
const PULL_EVERY: Duration = Duration::from_secs(1);
const PULL_EXPIRES: Duration = Duration::from_millis(900);
/// An API request unanswered this long is asked again.
const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// Unacknowledged deliveries are redelivered after this.
const ACK_WAIT: Duration = Duration::from_secs(5);
/// The origin removes the consumer after this long without pulls.
const INACTIVE: Duration = Duration::from_secs(30);

enum State {
    /// Asked the origin whether the consumer exists.
    Looking,
    /// Asked it to create the consumer.
    Creating,
    Ready {
        last_pull: Option<Instant>,
    },
    /// Waiting before asking again.
    Resting,
}

struct Link {
    origin: String,
    consumer: String,
    spec: SourceSpec,
    state: State,
    since: Instant,
}

/// The sources of the streams this server leads.
pub struct Links {
    /// Where answers and deliveries come back: `<inbox>.R.<n>` and
    /// `<inbox>.S.<group>.<source>`.
    inbox: String,
    links: BTreeMap<(u64, String), Link>,
    /// Request number → link.
    asked: BTreeMap<u64, (u64, String)>,
    next: u64,
}

/// A short stable token for a source key (keys hold subjects).
fn token(key: &str) -> String {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{h:016x}")
}

fn request(subject: String, reply: String, body: Value) -> OutMsg {
    OutMsg {
        subject,
        route: None,
        reply: Some(reply),
        headers: None,
        payload: if body.is_null() {
            bytes::Bytes::new()
        } else {
            body.to_string().into()
        },
    }
}

impl Links {
    pub fn new(inbox: String) -> Links {
        Links {
            inbox,
            links: BTreeMap::new(),
            asked: BTreeMap::new(),
            next: 0,
        }
    }

    /// Keeps one link per source of every stream led here (`led`: group,
    /// stream name, its sources) and returns the requests due: lookups,
    /// creates, pulls.
    pub fn follow(&mut self, led: &[(u64, String, Vec<SourceSpec>)]) -> Vec<OutMsg> {
        self.links.retain(|(g, key), _| {
            led.iter()
                .any(|(lg, _, specs)| lg == g && specs.iter().any(|s| &s.key == key))
        });
        let links = &self.links;
        self.asked.retain(|_, k| links.contains_key(k));
        let mut out = Vec::new();
        for (group, stream, specs) in led {
            for spec in specs {
                let k = (*group, spec.key.clone());
                let link = self.links.entry(k).or_insert_with(|| Link {
                    origin: spec.origin.clone(),
                    consumer: format!("src_{stream}_{}", token(&spec.key)),
                    spec: spec.clone(),
                    state: State::Resting,
                    since: Instant::now() - ANSWER_WITHIN,
                });
                // The position moves on as copies are applied.
                link.spec = spec.clone();
            }
        }
        let keys: Vec<(u64, String)> = self.links.keys().cloned().collect();
        for k in keys {
            self.step(&k, &mut out);
        }
        out
    }

    fn ask(&mut self, k: &(u64, String)) -> (u64, String) {
        // One question per link at a time: an older one's answer is stale.
        self.asked.retain(|_, v| v != k);
        self.next += 1;
        self.asked.insert(self.next, k.clone());
        (self.next, format!("{}.R.{}", self.inbox, self.next))
    }

    fn step(&mut self, k: &(u64, String), out: &mut Vec<OutMsg>) {
        let (asking, waited) = {
            let l = &self.links[k];
            (
                matches!(l.state, State::Looking | State::Creating | State::Resting),
                l.since.elapsed() >= ANSWER_WITHIN,
            )
        };
        if asking && waited {
            let (_, reply) = self.ask(k);
            let l = self.links.get_mut(k).expect("listed");
            l.state = State::Looking;
            l.since = Instant::now();
            out.push(request(
                format!("$JS.API.CONSUMER.INFO.{}.{}", l.origin, l.consumer),
                reply,
                Value::Null,
            ));
            return;
        }
        let deliver = format!("{}.S.{}.{}", self.inbox, k.0, token(&k.1));
        let l = self.links.get_mut(k).expect("listed");
        if let State::Ready { last_pull } = &mut l.state {
            if last_pull.is_none_or(|t| t.elapsed() >= PULL_EVERY) {
                *last_pull = Some(Instant::now());
                out.push(request(
                    format!("$JS.API.CONSUMER.MSG.NEXT.{}.{}", l.origin, l.consumer),
                    deliver,
                    json!({"batch": 16, "expires": PULL_EXPIRES.as_nanos() as u64}),
                ));
            }
        }
    }

    fn create(&mut self, k: &(u64, String)) -> OutMsg {
        let (_, reply) = self.ask(k);
        let l = self.links.get_mut(k).expect("listed");
        l.state = State::Creating;
        l.since = Instant::now();
        let s = &l.spec;
        let mut config = json!({
            "durable_name": l.consumer,
            "ack_policy": "explicit",
            "ack_wait": ACK_WAIT.as_nanos() as u64,
            "max_ack_pending": 1,
            "inactive_threshold": INACTIVE.as_nanos() as u64,
        });
        if s.start_seq > 0 {
            config["deliver_policy"] = json!("by_start_sequence");
            config["opt_start_seq"] = json!(s.start_seq);
        } else if let Some(t) = s.start_time {
            config["deliver_policy"] = json!("by_start_time");
            config["opt_start_time"] = json!(rfc3339(t));
        } else {
            config["deliver_policy"] = json!("all");
        }
        if !s.filter_subject.is_empty() {
            config["filter_subject"] = json!(s.filter_subject);
        }
        if !s.filter_subjects.is_empty() {
            config["filter_subjects"] = json!(s.filter_subjects);
        }
        request(
            format!("$JS.API.CONSUMER.CREATE.{}.{}", l.origin, l.consumer),
            reply,
            json!({"stream_name": l.origin, "config": config}),
        )
    }

    /// Something arrived on the inbox (`routed`: the subject it was
    /// routed on). Returns a request to send (a create after a failed
    /// lookup), or the copy to propose: the stream group, the entry, and
    /// the ack subject to answer once it is applied.
    pub fn inbox(&mut self, routed: &str, m: Inbound) -> Inboxed {
        let Some(rest) = routed.strip_prefix(&format!("{}.", self.inbox)) else {
            return Inboxed::Nothing;
        };
        let tokens: Vec<&str> = rest.split('.').collect();
        match tokens.as_slice() {
            ["R", n] => {
                let Some(k) = n.parse().ok().and_then(|n: u64| self.asked.remove(&n)) else {
                    return Inboxed::Nothing;
                };
                self.answered(&k, &m.payload)
            }
            ["S", group, source] => match group.parse() {
                Ok(group) => self.copy(group, source, m),
                Err(_) => Inboxed::Nothing,
            },
            _ => Inboxed::Nothing,
        }
    }

    fn answered(&mut self, k: &(u64, String), body: &[u8]) -> Inboxed {
        let v: Value = serde_json::from_slice(body).unwrap_or_default();
        let code = v["error"]["err_code"].as_u64();
        let Some(l) = self.links.get_mut(k) else {
            return Inboxed::Nothing;
        };
        match (&l.state, code) {
            (State::Looking, None) | (State::Creating, None) => {
                info!(
                    "JetStream cluster source {} of stream group {}: consuming from '{}'",
                    k.1, k.0, l.origin
                );
                l.state = State::Ready { last_pull: None };
                Inboxed::Nothing
            }
            // Consumer not found: make it.
            (State::Looking, Some(10014)) => Inboxed::Send(self.create(k)),
            _ => {
                warn!(
                    "JetStream cluster source {} of stream group {}: origin '{}' answered {}",
                    k.1, k.0, l.origin, v["error"]
                );
                l.state = State::Resting;
                l.since = Instant::now();
                Inboxed::Nothing
            }
        }
    }

    /// A message routed to `<inbox>.S.<group>.<token>`, as delivered.
    fn copy(&mut self, group: u64, source: &str, m: Inbound) -> Inboxed {
        let Some((k, l)) = self
            .links
            .iter_mut()
            .find(|((g, key), _)| *g == group && token(key) == source)
        else {
            return Inboxed::Nothing;
        };
        if let Some(h) = m.headers.as_deref().filter(|h| h.starts_with(b"NATS/1.0 ")) {
            // A status ends a pull (404, 408); a consumer that is gone
            // (409 Consumer Deleted) or an origin without a leader (503)
            // is looked up again.
            let text = String::from_utf8_lossy(h);
            if text.contains("Consumer Deleted") || text.starts_with("NATS/1.0 503") {
                l.state = State::Resting;
                l.since = Instant::now() - ANSWER_WITHIN;
            }
            return Inboxed::Nothing;
        }
        let Some(ack) = m.reply.clone() else {
            return Inboxed::Nothing;
        };
        let Some(info) = ack_info(&ack) else {
            return Inboxed::Nothing;
        };
        let op = Op::Sourced {
            key: k.1.clone(),
            origin_seq: info.stream_seq,
            origin_ts: info.ts,
            pending: info.pending,
            subject: m.subject,
            headers: m.headers,
            payload: m.payload,
        };
        Inboxed::Copy(group, op, ack)
    }
}

/// What the inbox produced.
pub enum Inboxed {
    Nothing,
    Send(OutMsg),
    Copy(u64, Op, String),
}
