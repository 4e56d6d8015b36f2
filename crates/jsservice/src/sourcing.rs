//! Mirrors and sources, one design for one server and a cluster: the
//! sourcing stream reads each origin through the JetStream API, wherever
//! the origin lives.
//!
//! For each source, a durable pull consumer on the origin (named for the
//! sourcing stream and the source, so it is found again after a restart
//! or a leader change; `direct`, so it is not listed among the origin's
//! consumers) with explicit acks and one message outstanding. Each
//! delivery becomes an `Op::Sourced` input to the sourcing stream, replied
//! to with the delivery's ack subject: the ack goes out once the copy is
//! applied and durable (after the group commit on one server, after the
//! Raft commit in a cluster). A work-queue origin therefore never drops a
//! message the copy could still lose (incident 2), and one message
//! outstanding keeps the copies in origin order, so the source position
//! never skips one still to come. A redelivery (a lost ack, a restart) is
//! at or below the position and is not stored again.
//!
//! The consumer starts after the position; it goes away by itself
//! (`inactive_threshold`) once nobody pulls from it.
//!
//! A source that names a durable consumer on the origin (`consumer`, a
//! push consumer with the `flow_control` ack policy, made by the user)
//! reads through it instead: the link resets it (`CONSUMER.RESET`, back
//! to just past its ack floor), takes its deliveries on its deliver
//! subject, and answers its flow-control requests, which ack (an ack-all,
//! under that policy). Each delivery is proposed as it comes, to be
//! stored only right after the one before it (`after`); a flow-control
//! request is answered through the log too (`Op::SourceFlowControl`),
//! naming the last copy proposed, so the answer leaves once that copy is
//! durable and acks it only if it was stored. So the origin's ack floor
//! never passes a copy that could still be lost, and the position never
//! skips one. A gap in the consumer sequence, or copies not applied in
//! time, resets the consumer again.
//!
//! Sans-IO: [`Links::follow`] takes the time (milliseconds on any
//! monotonic clock) and returns the requests to send; what comes back on
//! the links' inbox goes to [`Links::inbox`].

use std::collections::BTreeMap;

use bytes::Bytes;
use jetstream::api::time::rfc3339;
use jetstream::consumer::ack_info;
use jetstream::output::OutMsg;
use jetstream::stream::SourceSpec;
use serde_json::{json, Value};

use crate::request::Inbound;
use crate::stream_sm::Op;

/// Pull requests wait this long on the origin; a new one goes out as
/// each expires.
const PULL_EVERY_MS: u64 = 1_000;
const PULL_EXPIRES_NS: u64 = 900_000_000;
/// An API request unanswered this long is asked again.
const ANSWER_WITHIN_MS: u64 = 2_000;
/// Unacknowledged deliveries are redelivered after this.
const ACK_WAIT_NS: u64 = 5_000_000_000;
/// The origin removes the consumer after this long without pulls.
const INACTIVE_NS: u64 = 30_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// To be looked up at the next `follow`: new, or its consumer gone.
    Fresh,
    /// Asked the origin whether the consumer exists.
    Looking,
    /// Asked it to create the consumer.
    Creating,
    Ready {
        last_pull: Option<u64>,
    },
    /// Waiting before asking again.
    Resting,
}

#[derive(Debug)]
struct Link {
    consumer: String,
    spec: SourceSpec,
    state: State,
    /// When the state was entered (ms).
    since: u64,
    /// A durable source: the consumer sequence expected next; the last
    /// copy proposed (origin sequence, when) while the position has not
    /// reached it; and the last copy proposed since the reset (origin and
    /// consumer sequences), which a flow-control answer names.
    expect: u64,
    in_flight: Option<(u64, u64)>,
    last: Option<(u64, u64)>,
    /// The origin's stream identity, as its consumer create said
    /// (`Nats-Stream-Identity`): a later create names it, so an origin
    /// made again is told apart.
    identity: Option<String>,
}

impl Link {
    /// A durable source's deliver subject.
    fn deliver_subject(&self) -> Option<&str> {
        self.spec.consumer.as_ref().map(|(_, d)| d.as_str())
    }

    /// Starts over: reset the consumer at the next `follow`.
    fn start_over(&mut self, now: u64) {
        self.state = State::Fresh;
        self.since = now;
        self.in_flight = None;
        self.last = None;
    }
}

/// The sources of one stream.
#[derive(Debug)]
pub struct Links {
    stream: String,
    /// Where answers and deliveries come back: `<inbox>.R.<n>` and
    /// `<inbox>.S.<source token>`.
    inbox: String,
    links: BTreeMap<String, Link>,
    /// Request number → source key.
    asked: BTreeMap<u64, String>,
    next: u64,
}

/// What arrived on the inbox asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Inboxed {
    Nothing,
    /// A request to send (a create after a failed lookup).
    Send(OutMsg),
    /// A copy to apply: the input, and the ack subject to answer once it
    /// is applied.
    Copy(Op, String),
    /// An input to apply, answering nobody.
    Input(Op),
}

const IDENTITY: &str = "Nats-Stream-Identity";

/// A short stable token for a source key (keys hold subjects).
fn token(key: &str) -> String {
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("{h:016x}")
}

/// `<api>.CONSUMER.<verb>.<origin>.<consumer>`, on the origin's API
/// (another domain's for an `external` source).
fn api_subject(spec: &SourceSpec, verb: &str, consumer: &str) -> String {
    format!("{}.CONSUMER.{verb}.{}.{consumer}", spec.api, spec.origin)
}

fn request(subject: String, reply: String, body: Value) -> OutMsg {
    OutMsg {
        subject,
        route: None,
        reply: Some(reply),
        headers: None,
        payload: if body.is_null() {
            Bytes::new()
        } else {
            body.to_string().into()
        },
    }
}

impl Links {
    /// The links of stream `stream`, answered on `inbox` (a subject this
    /// stream's driver subscribes to, with `.>` after it).
    pub fn new(stream: &str, inbox: String) -> Links {
        Links {
            stream: stream.to_string(),
            inbox,
            links: BTreeMap::new(),
            asked: BTreeMap::new(),
            next: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// The inbox answers and deliveries come back on (followed by `.>`).
    pub fn inbox_subject(&self) -> &str {
        &self.inbox
    }

    /// Keeps one link per source in `specs` (the stream's sources, with
    /// their positions as applied) and returns the requests due at `now`:
    /// lookups, creates, pulls.
    pub fn follow(&mut self, specs: &[SourceSpec], now: u64) -> Vec<OutMsg> {
        self.links
            .retain(|key, _| specs.iter().any(|s| &s.key == key));
        let links = &self.links;
        self.asked.retain(|_, k| links.contains_key(k));
        for spec in specs {
            let consumer = match &spec.consumer {
                Some((name, _)) => name.clone(),
                None => format!("src_{}_{}", self.stream, token(&spec.key)),
            };
            let link = self.links.entry(spec.key.clone()).or_insert_with(|| Link {
                consumer,
                spec: spec.clone(),
                state: State::Fresh,
                since: now,
                expect: 1,
                in_flight: None,
                last: None,
                identity: None,
            });
            // The position moves on as copies are applied.
            link.spec = spec.clone();
        }
        let keys: Vec<String> = self.links.keys().cloned().collect();
        let mut out = Vec::new();
        for key in keys {
            self.step(&key, now, &mut out);
        }
        out
    }

    fn ask(&mut self, key: &str) -> String {
        // One question per link at a time: an older one's answer is stale.
        self.asked.retain(|_, k| k != key);
        self.next += 1;
        self.asked.insert(self.next, key.to_string());
        format!("{}.R.{}", self.inbox, self.next)
    }

    /// The deliver subjects of durable sources, for the driver to
    /// subscribe and route to [`Links::inbox`].
    pub fn deliver_subjects(&self) -> Vec<String> {
        self.links
            .values()
            .filter_map(|l| l.deliver_subject().map(str::to_string))
            .collect()
    }

    /// A durable source's step: reset the consumer when fresh (or asked
    /// long ago), and see the last copy applied in time or start over.
    fn step_durable(&mut self, key: &str, now: u64, out: &mut Vec<OutMsg>) {
        let link = &self.links[key];
        let due = match link.state {
            State::Fresh => true,
            State::Ready { .. } => false,
            _ => now.saturating_sub(link.since) >= ANSWER_WITHIN_MS,
        };
        if due {
            let reply = self.ask(key);
            let link = self.links.get_mut(key).expect("listed");
            link.start_over(now);
            link.state = State::Looking;
            // The reset restarts the consumer sequence.
            link.expect = 1;
            out.push(request(
                api_subject(&link.spec, "RESET", &link.consumer),
                reply,
                Value::Null,
            ));
            return;
        }
        let link = self.links.get_mut(key).expect("listed");
        if let Some((seq, since)) = link.in_flight {
            if link.spec.position >= seq {
                link.in_flight = None;
            } else if now.saturating_sub(since) >= ANSWER_WITHIN_MS {
                // Refused or lost: the consumer delivers them again.
                link.start_over(now);
            }
        }
    }

    fn step(&mut self, key: &str, now: u64, out: &mut Vec<OutMsg>) {
        if self.links[key].spec.consumer.is_some() {
            return self.step_durable(key, now, out);
        }
        let link = &self.links[key];
        let due = match link.state {
            State::Fresh => true,
            State::Looking | State::Creating | State::Resting => {
                now.saturating_sub(link.since) >= ANSWER_WITHIN_MS
            }
            State::Ready { .. } => false,
        };
        if due {
            let reply = self.ask(key);
            let link = self.links.get_mut(key).expect("listed");
            link.state = State::Looking;
            link.since = now;
            out.push(request(
                api_subject(&link.spec, "INFO", &link.consumer),
                reply,
                Value::Null,
            ));
            return;
        }
        let deliver = format!("{}.S.{}", self.inbox, token(key));
        let link = self.links.get_mut(key).expect("listed");
        if let State::Ready { last_pull } = &mut link.state {
            if last_pull.is_none_or(|t| now.saturating_sub(t) >= PULL_EVERY_MS) {
                *last_pull = Some(now);
                out.push(request(
                    api_subject(&link.spec, "MSG.NEXT", &link.consumer),
                    deliver,
                    json!({"batch": 16, "expires": PULL_EXPIRES_NS}),
                ));
            }
        }
    }

    fn create(&mut self, key: &str, now: u64) -> OutMsg {
        let reply = self.ask(key);
        let link = self.links.get_mut(key).expect("listed");
        link.state = State::Creating;
        link.since = now;
        let spec = &link.spec;
        let mut config = json!({
            "durable_name": link.consumer,
            "ack_policy": "explicit",
            "ack_wait": ACK_WAIT_NS,
            "max_ack_pending": 1,
            "inactive_threshold": INACTIVE_NS,
            "direct": true,
        });
        if spec.start_seq > 0 {
            config["deliver_policy"] = json!("by_start_sequence");
            config["opt_start_seq"] = json!(spec.start_seq);
        } else if let Some(t) = spec.start_time {
            config["deliver_policy"] = json!("by_start_time");
            config["opt_start_time"] = json!(rfc3339(t));
        } else {
            config["deliver_policy"] = json!("all");
        }
        if !spec.filter_subject.is_empty() {
            config["filter_subject"] = json!(spec.filter_subject);
        }
        if !spec.filter_subjects.is_empty() {
            config["filter_subjects"] = json!(spec.filter_subjects);
        }
        let mut create = request(
            api_subject(spec, "CREATE", &link.consumer),
            reply,
            json!({"stream_name": spec.origin, "config": config}),
        );
        if let Some(identity) = &link.identity {
            create.headers = Some(jetstream::headers::build(None, &[(IDENTITY, identity)]));
        }
        create
    }

    /// Something arrived on the inbox, or a durable source's deliver
    /// subject, at `now` (`routed`: the subject it was routed on).
    pub fn inbox(&mut self, routed: &str, m: Inbound, now: u64) -> Inboxed {
        let durable = self
            .links
            .iter()
            .find(|(_, l)| l.deliver_subject() == Some(routed))
            .map(|(k, _)| k.clone());
        if let Some(key) = durable {
            return self.durable_delivery(&key, m, now);
        }
        let Some(rest) = routed
            .strip_prefix(self.inbox.as_str())
            .and_then(|r| r.strip_prefix('.'))
        else {
            return Inboxed::Nothing;
        };
        match rest.split_once('.') {
            Some(("R", n)) => {
                let Some(key) = n.parse().ok().and_then(|n: u64| self.asked.remove(&n)) else {
                    return Inboxed::Nothing;
                };
                self.answered(&key, &m, now)
            }
            Some(("S", source)) => self.copy(source, m, now),
            _ => Inboxed::Nothing,
        }
    }

    fn answered(&mut self, key: &str, m: &Inbound, now: u64) -> Inboxed {
        let v: Value = serde_json::from_slice(&m.payload).unwrap_or_default();
        let code = v["error"]["err_code"].as_u64();
        let Some(link) = self.links.get_mut(key) else {
            return Inboxed::Nothing;
        };
        if link.spec.consumer.is_some() {
            // The reset's answer: the consumer, which must ack by flow
            // control (nats-server's 10217 otherwise).
            let acks_by_fc = v["config"]["ack_policy"] == "flow_control";
            match (link.state, code, acks_by_fc) {
                (State::Looking, None, true) => {
                    link.state = State::Ready { last_pull: None };
                }
                _ => {
                    link.state = State::Resting;
                    link.since = now;
                }
            }
            return Inboxed::Nothing;
        }
        match (link.state, code) {
            (State::Looking | State::Creating, None) => {
                if link.state == State::Creating {
                    link.identity = m
                        .headers
                        .as_deref()
                        .and_then(|h| jetstream::headers::get(h, IDENTITY))
                        .map(str::to_string);
                }
                link.state = State::Ready { last_pull: None };
                // The first pull goes out with the next `follow`.
                Inboxed::Nothing
            }
            // The origin was made again since: the source starts over, and
            // its consumer is made anew.
            (State::Creating, Some(10225)) => {
                link.identity = None;
                // Asked again once the reset is applied.
                link.state = State::Resting;
                link.since = now;
                Inboxed::Input(Op::ResetSource {
                    key: key.to_string(),
                })
            }
            // Consumer not found: make it.
            (State::Looking, Some(10014)) => Inboxed::Send(self.create(key, now)),
            _ => {
                link.state = State::Resting;
                link.since = now;
                Inboxed::Nothing
            }
        }
    }

    /// A message routed to `<inbox>.S.<token>`, as delivered.
    fn copy(&mut self, source: &str, m: Inbound, now: u64) -> Inboxed {
        let Some((key, link)) = self.links.iter_mut().find(|(k, _)| token(k) == source) else {
            return Inboxed::Nothing;
        };
        if let Some(h) = m.headers.as_deref().filter(|h| h.starts_with(b"NATS/1.0 ")) {
            // A status ends a pull (404, 408); a consumer that is gone
            // (409 Consumer Deleted) or an origin without a leader (503)
            // is looked up again.
            let text = String::from_utf8_lossy(h);
            if text.contains("Consumer Deleted") || text.starts_with("NATS/1.0 503") {
                link.state = State::Fresh;
                link.since = now;
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
            key: key.clone(),
            origin_seq: info.stream_seq,
            origin_ts: info.ts,
            pending: info.pending,
            after: None,
            subject: m.subject,
            headers: m.headers,
            payload: m.payload,
        };
        Inboxed::Copy(op, ack)
    }

    /// What a durable source's consumer sent: a delivery (copied in
    /// turn), a flow-control request (answered at once, acking nothing:
    /// the copies' own acks do), or a status.
    fn durable_delivery(&mut self, key: &str, m: Inbound, now: u64) -> Inboxed {
        let link = self.links.get_mut(key).expect("found");
        // The reset's deliveries may overtake its answer (in a cluster
        // the consumer delivers as the reset is applied, and the answer
        // leaves after): taken while it is awaited too.
        let ready = matches!(link.state, State::Ready { .. });
        if !ready && link.state != State::Looking {
            return Inboxed::Nothing;
        }
        if let Some(h) = m.headers.as_deref().filter(|h| h.starts_with(b"NATS/1.0 ")) {
            let text = String::from_utf8_lossy(h);
            let answer = |to: &str| match link.last {
                Some((stream_seq, consumer_seq)) => {
                    let op = Op::SourceFlowControl {
                        key: key.to_string(),
                        stream_seq,
                        consumer_seq,
                    };
                    Inboxed::Copy(op, to.to_string())
                }
                // Nothing copied since the reset: nothing to ack.
                None => Inboxed::Send(OutMsg {
                    subject: to.to_string(),
                    route: None,
                    reply: None,
                    headers: None,
                    payload: Bytes::new(),
                }),
            };
            if text.starts_with("NATS/1.0 100") {
                // A heartbeat saying more was delivered than arrived (some
                // went out before the reset was answered): start over.
                let delivered = jetstream::headers::get(h, "Nats-Last-Consumer")
                    .and_then(|v| v.parse::<u64>().ok());
                if ready && delivered.is_some_and(|d| d >= link.expect) {
                    link.start_over(now);
                    return Inboxed::Nothing;
                }
                // A flow-control request, or a heartbeat naming a stalled one.
                if let Some(fc) = m.reply.as_deref().filter(|r| !r.is_empty()) {
                    return answer(fc);
                }
                if let Some(fc) = jetstream::headers::get(h, "Nats-Consumer-Stalled") {
                    return answer(fc);
                }
            } else if text.contains("Consumer Deleted") || text.starts_with("NATS/1.0 503") {
                link.start_over(now);
            }
            return Inboxed::Nothing;
        }
        let Some(ack) = m.reply.clone() else {
            return Inboxed::Nothing;
        };
        let Some(info) = ack_info(&ack) else {
            return Inboxed::Nothing;
        };
        if info.consumer_seq < link.expect {
            return Inboxed::Nothing;
        }
        if info.consumer_seq > link.expect {
            // A delivery missed: the position could skip it.
            link.start_over(now);
            return Inboxed::Nothing;
        }
        link.expect += 1;
        // The first copy after a reset follows whatever is stored (one
        // at or below the position is a duplicate); each later one
        // follows the copy before it.
        let after = link.in_flight.map(|(seq, _)| seq);
        link.in_flight = Some((info.stream_seq, now));
        link.last = Some((info.stream_seq, info.consumer_seq));
        let op = Op::Sourced {
            key: key.to_string(),
            origin_seq: info.stream_seq,
            origin_ts: info.ts,
            pending: info.pending,
            after,
            subject: m.subject,
            headers: m.headers,
            payload: m.payload,
        };
        // Acked by the flow-control answers, not on its ack subject.
        Inboxed::Input(op)
    }

    /// The earliest time `follow` has something to do, if any link is
    /// waiting.
    pub fn next_wake(&self) -> Option<u64> {
        self.links
            .values()
            .filter_map(|l| match l.state {
                // A durable source waits for its copy under way, if any
                // (deliveries wake the driver themselves).
                State::Ready { .. } if l.spec.consumer.is_some() => {
                    l.in_flight.map(|(_, since)| since + ANSWER_WITHIN_MS)
                }
                State::Ready { last_pull } => {
                    Some(last_pull.map_or(l.since, |t| t + PULL_EVERY_MS))
                }
                State::Fresh => Some(l.since),
                _ => Some(l.since + ANSWER_WITHIN_MS),
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(origin: &str) -> SourceSpec {
        SourceSpec {
            api: "$JS.API".into(),
            key: format!("{origin} > >"),
            origin: origin.to_string(),
            ..Default::default()
        }
    }

    fn reply_to(m: &OutMsg) -> String {
        m.reply.clone().expect("a request has a reply subject")
    }

    fn answer(body: &str) -> Inbound {
        Inbound {
            subject: "x".into(),
            reply: None,
            headers: None,
            payload: Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    #[test]
    fn a_link_looks_up_creates_then_pulls_and_copies() {
        let mut links = Links::new("S", "_INBOX.s".into());
        let out = links.follow(&[spec("O")], 10_000);
        assert_eq!(out.len(), 1);
        assert!(out[0].subject.starts_with("$JS.API.CONSUMER.INFO.O.src_S_"));
        // Not found: a create follows, naming the same consumer.
        let r = links.inbox(
            &reply_to(&out[0]),
            answer(r#"{"error":{"err_code":10014}}"#),
            10_001,
        );
        let Inboxed::Send(create) = r else {
            panic!("{r:?}")
        };
        assert!(create
            .subject
            .starts_with("$JS.API.CONSUMER.CREATE.O.src_S_"));
        let body: Value = serde_json::from_slice(&create.payload).unwrap();
        assert_eq!(body["config"]["max_ack_pending"], 1);
        assert_eq!(body["config"]["ack_policy"], "explicit");
        assert_eq!(body["config"]["direct"], true);
        assert_eq!(
            links.inbox(&reply_to(&create), answer("{}"), 10_002),
            Inboxed::Nothing
        );
        let out = links.follow(&[spec("O")], 10_003);
        assert_eq!(out.len(), 1);
        assert!(out[0].subject.starts_with("$JS.API.CONSUMER.MSG.NEXT.O."));
        // A delivery becomes a copy, answered on its ack subject.
        let ack = "$JS.ACK.O.src_S_x.1.7.1.1700000000000000000.0";
        let m = Inbound {
            subject: "o.a".into(),
            reply: Some(ack.into()),
            headers: None,
            payload: Bytes::from_static(b"hi"),
        };
        match links.inbox(&reply_to(&out[0]), m, 10_004) {
            Inboxed::Copy(Op::Sourced { origin_seq, .. }, to) => {
                assert_eq!(origin_seq, 7);
                assert_eq!(to, ack);
            }
            other => panic!("{other:?}"),
        }
        // No second pull until the first has had its time.
        assert!(links.follow(&[spec("O")], 10_500).is_empty());
        assert_eq!(links.follow(&[spec("O")], 11_004).len(), 1);
    }

    fn delivery(to: &str, sseq: u64, dseq: u64) -> Inbound {
        Inbound {
            subject: to.into(),
            reply: Some(format!("$JS.ACK.O.c.1.{sseq}.{dseq}.1700000000000000000.0")),
            headers: None,
            payload: Bytes::from_static(b"m"),
        }
    }

    #[test]
    fn a_durable_link_resets_copies_in_order_and_answers_flow_control() {
        let mut durable = spec("O");
        durable.consumer = Some(("c".into(), "agg.deliver".into()));
        let mut links = Links::new("S", "_INBOX.s".into());
        assert_eq!(links.deliver_subjects(), Vec::<String>::new());
        let out = links.follow(std::slice::from_ref(&durable), 10_000);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].subject, "$JS.API.CONSUMER.RESET.O.c");
        assert_eq!(links.deliver_subjects(), ["agg.deliver"]);
        // A delivery may overtake the reset's answer; the first copy
        // follows whatever is stored.
        match links.inbox("agg.deliver", delivery("o.a", 5, 1), 10_001) {
            Inboxed::Input(Op::Sourced {
                origin_seq: 5,
                after: None,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        let answer_body = r#"{"config":{"ack_policy":"flow_control"}}"#;
        assert_eq!(
            links.inbox(&reply_to(&out[0]), answer(answer_body), 10_002),
            Inboxed::Nothing
        );
        // Each later copy follows the one before it.
        match links.inbox("agg.deliver", delivery("o.a", 7, 2), 10_003) {
            Inboxed::Input(Op::Sourced {
                origin_seq: 7,
                after: Some(5),
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        // Flow control is answered through the log, naming the last copy.
        let fc = Inbound {
            subject: "agg.deliver".into(),
            reply: Some("$JS.FC.O.c.x".into()),
            headers: Some(Bytes::from_static(
                b"NATS/1.0 100 FlowControl Request\r\n\r\n",
            )),
            payload: Bytes::new(),
        };
        match links.inbox("agg.deliver", fc, 10_004) {
            Inboxed::Copy(
                Op::SourceFlowControl {
                    stream_seq: 7,
                    consumer_seq: 2,
                    ..
                },
                to,
            ) => {
                assert_eq!(to, "$JS.FC.O.c.x");
            }
            other => panic!("{other:?}"),
        }
        // A delivery missed: start over with another reset.
        assert_eq!(
            links.inbox("agg.deliver", delivery("o.a", 9, 4), 10_005),
            Inboxed::Nothing
        );
        let out = links.follow(&[durable], 10_006);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].subject, "$JS.API.CONSUMER.RESET.O.c");
    }

    #[test]
    fn a_new_link_asks_at_once_whatever_the_clock_reads() {
        // A monotonic clock may start at zero when the first stream is
        // made: the first question must not wait for it to pass the
        // answer time.
        for now in [0, 1, ANSWER_WITHIN_MS - 1, 10_000] {
            let mut links = Links::new("S", "_INBOX.s".into());
            assert_eq!(links.next_wake(), None);
            let out = links.follow(&[spec("O")], now);
            assert_eq!(out.len(), 1, "at {now}");
            assert!(out[0].subject.starts_with("$JS.API.CONSUMER.INFO.O."));
        }
    }

    #[test]
    fn answers_to_stale_questions_and_foreign_subjects_do_nothing() {
        let mut links = Links::new("S", "_INBOX.s".into());
        let first = links.follow(&[spec("O")], 10_000);
        // Asked again after the answer time: the first question is stale.
        let second = links.follow(&[spec("O")], 12_001);
        assert_eq!(second.len(), 1);
        assert_eq!(
            links.inbox(&reply_to(&first[0]), answer("{}"), 12_002),
            Inboxed::Nothing
        );
        assert_eq!(
            links.inbox("_INBOX.other.R.1", answer("{}"), 12_003),
            Inboxed::Nothing
        );
        // A removed source forgets its link.
        assert!(links.follow(&[], 12_004).is_empty());
        assert!(links.is_empty());
    }
}
