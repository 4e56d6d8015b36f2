//! Mirrors and sources, one design for one server and a cluster: the
//! sourcing stream reads each origin through the JetStream API, wherever
//! the origin lives.
//!
//! For each source, a durable pull consumer on the origin (named for the
//! sourcing stream and the source, so it is found again after a restart
//! or a leader change; `direct`, so it is not listed among the origin's
//! consumers) with up to [`MAX_ACK_PENDING`] messages outstanding,
//! pulled [`PULL_BATCH`] at a time with the next pull out before the last
//! is used up. Each delivery becomes an `Op::Sourced` input to the
//! sourcing stream. No ack leaves before the copies it covers are durable
//! (after the group commit on one server, after the Raft commit in a
//! cluster), so an origin never drops a message the copy could still lose
//! (incident 2):
//! - the consumer acks all up to a message (`all`), and the driver tells
//!   the links each durable position ([`Links::durable`]): one ack then
//!   covers every copy at or below it. In a cluster each ack is a Raft
//!   entry on the origin; one per step, not one per copy. The copies
//!   themselves go as runs, many to an entry (`Op::Copies`, taken at the
//!   end of the driver's batch with [`Links::take_runs`]);
//! - a work-queue origin takes explicit acks only (nats-server's 10098):
//!   its consumer acks each, and each copy is replied to with its
//!   delivery's ack subject (`Inboxed::Copy`), once applied and durable.
//!
//! Many copies in flight must still never let the position skip one
//! still to come. A session starts with the consumer reset to just past
//! its ack floor (`CONSUMER.RESET`), or made new, so it delivers in
//! origin order from there, its consumer sequence counting from 1:
//! - a delivery whose consumer sequence is not the next expected (one
//!   was missed) starts a new session;
//! - each copy names the copy before it in the session (`after`), and the
//!   stream stores it only right after that one; the first copy of a
//!   session follows whatever is stored;
//! - a copy at or below the position is a duplicate (a redelivery, or a
//!   reset going back to an ack floor whose acks were lost): acked, not
//!   stored, and not a link in the chain; so is a redelivery of a copy
//!   proposed earlier in the session (it names itself, so it is never
//!   stored, only acked once that copy is);
//! - a delivery with an earlier consumer sequence than expected (from
//!   another session) starts a new session too;
//! - a copy not applied in time (refused, out of order) starts a new
//!   session.
//!
//! A new consumer starts after the position (as nats-server's does); it
//! goes away by itself (`inactive_threshold`) once nobody pulls from it.
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
//! An `external` source with a `deliver` prefix (an origin in another
//! account: its consumer API imported under `external.api`, a stream
//! export of the prefix, and `$JS.FC.>` imported for flow control, as
//! nats-server's cross-account sourcing is configured) reads the same
//! way, through a push consumer the link makes: looked up (an origin
//! answers no reset of a consumer it lacks), reset if found, else made
//! with a deliver subject under the prefix, named for this stream and
//! the source. Pulls cannot go there: a service import brings back one
//! reply per request.
//!
//! Sans-IO: [`Links::follow`] takes the time (milliseconds on any
//! monotonic clock) and returns the requests to send; what comes back on
//! the links' inbox goes to [`Links::inbox`].

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;
use jetstream::api::time::rfc3339;
use jetstream::consumer::ack_info;
use jetstream::output::OutMsg;
use jetstream::stream::SourceSpec;
use serde_json::{json, Value};

use crate::request::Inbound;
use crate::stream_sm::Op;

/// Deliveries a source's consumer leaves unacknowledged at most: copies
/// in flight between the origin and the durable copy.
pub const MAX_ACK_PENDING: u64 = 16384;
/// Messages one pull asks for; another goes out once fewer than this
/// are still asked for.
pub const PULL_BATCH: u64 = 4096;
/// Bytes one pull asks for at most: with the pulls outstanding, what a
/// source holds in flight whatever its messages' size.
pub const PULL_MAX_BYTES: u64 = 8 << 20;
/// A run of copies (`Op::Copies`) is proposed once it holds this many
/// bytes of messages; the rest at the end of the driver's batch
/// ([`Links::take_runs`]).
pub const RUN_MAX_BYTES: usize = 1 << 20;
/// Pull requests wait this long on the origin.
const PULL_EXPIRES_MS: u64 = 900;
/// A copy proposed and not applied in this long (refused: out of order,
/// or lost) starts a new session.
const APPLIED_WITHIN_MS: u64 = 5_000;
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
    /// Asked it to create the consumer (then to reset it, if
    /// `Link::reset_after`).
    Creating,
    /// Asked it to reset the consumer to just past its ack floor.
    Resetting,
    Ready,
    /// Waiting before asking again.
    Resting,
}

#[derive(Debug)]
struct Link {
    consumer: String,
    /// A push source's deliver subject: its durable consumer's, or for
    /// an `external` source with a `deliver` prefix, the one under it
    /// that the consumer this link makes delivers to (`push_deliver`).
    deliver: Option<String>,
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
    /// A pull source: the origin sequence of the last copy of this
    /// session that was not a duplicate (the next copy's `after`).
    chain: Option<u64>,
    /// A pull source's pulls still waiting on the origin.
    pulls: VecDeque<Pull>,
    /// A pull source whose consumer is being updated: reset it after.
    reset_after: bool,
    /// The origin's stream identity, as its consumer create said
    /// (`Nats-Stream-Identity`): a later create names it, so an origin
    /// made again is told apart.
    identity: Option<String>,
    /// A pull source whose consumer acks all up to a message (`all`; a
    /// work-queue origin refuses it, and an older flotilla's consumer
    /// acks each): its copies are acked one ack per durable step, not
    /// one each.
    acks_all: bool,
    /// Under `acks_all`: the deliveries not yet acked (origin sequence →
    /// ack subject, the latest for a sequence delivered again).
    unacked: BTreeMap<u64, String>,
    /// Under `acks_all`: the copies taken since the run was last
    /// proposed, in the order delivered, and their messages' bytes.
    run: Vec<Op>,
    run_bytes: usize,
}

impl Link {
    /// A push source's deliver subject.
    fn deliver_subject(&self) -> Option<&str> {
        self.deliver.as_deref()
    }

    /// Whether this link makes its push consumer (an `external` source
    /// with a `deliver` prefix), rather than reading through the user's.
    fn makes_push(&self) -> bool {
        self.spec.consumer.is_none() && self.deliver.is_some()
    }

    /// Starts over: reset the consumer at the next `follow`.
    fn start_over(&mut self, now: u64) {
        self.state = State::Fresh;
        self.since = now;
        self.in_flight = None;
        self.last = None;
        self.chain = None;
        self.pulls.clear();
        // The reset delivers them again; acked then. The run stays: its
        // copies came in order, each naming the one before it, and one
        // the new session brings again is a duplicate.
        self.unacked.clear();
    }

    /// A status on a pull's deliver subject: it ends a pull (404, 408,
    /// 409 with its bytes used up); a consumer that is gone (409 Consumer
    /// Deleted) or an origin without a leader (503) is looked up again.
    fn pull_status(&mut self, text: &str, now: u64) {
        if text.contains("Consumer Deleted") || text.starts_with("NATS/1.0 503") {
            self.start_over(now);
        } else if ["408", "404", "409"]
            .iter()
            .any(|c| text[9..].starts_with(c))
        {
            self.pulls.pop_front();
        }
    }

    /// Whether a pull delivery with consumer sequence `consumer_seq` is
    /// the next of this session (then expected past). A reset's
    /// deliveries may overtake its answer: taken while it is awaited too,
    /// but only in the new session's order (what comes from before the
    /// reset is dropped). Out of order while ready, a delivery was missed
    /// (the position could skip it) or one from another session took its
    /// place: a new session.
    fn in_session_order(&mut self, consumer_seq: u64, now: u64) -> bool {
        let ready = self.state == State::Ready;
        if !ready && self.state != State::Resetting {
            return false;
        }
        if consumer_seq != self.expect {
            if ready {
                self.start_over(now);
            }
            return false;
        }
        self.expect += 1;
        true
    }

    /// Adds a copy of `size` bytes to the run, handing the run over once
    /// it is full.
    fn add_to_run(&mut self, op: Op, size: usize) -> Inboxed {
        self.run.push(op);
        self.run_bytes += size;
        match self.run_bytes >= RUN_MAX_BYTES {
            true => Inboxed::Input(self.take_run()),
            false => Inboxed::Nothing,
        }
    }

    /// A status from a durable source's consumer (`h`, its headers;
    /// `reply`, its reply subject). A flow-control request, or a
    /// heartbeat naming a stalled one, is answered through the log
    /// (`Op::SourceFlowControl`, naming the last copy proposed), or at once
    /// when nothing was copied since the reset. A heartbeat saying more
    /// was delivered than arrived (some went out before the reset was
    /// answered), a consumer deleted or an origin without a leader: start
    /// over.
    fn durable_status(&mut self, key: &str, h: &[u8], reply: Option<&str>, now: u64) -> Inboxed {
        let text = String::from_utf8_lossy(h);
        if !text.starts_with("NATS/1.0 100") {
            if text.contains("Consumer Deleted") || text.starts_with("NATS/1.0 503") {
                self.start_over(now);
            }
            return Inboxed::Nothing;
        }
        let delivered =
            jetstream::headers::get(h, "Nats-Last-Consumer").and_then(|v| v.parse::<u64>().ok());
        if self.state == State::Ready && delivered.is_some_and(|d| d >= self.expect) {
            self.start_over(now);
            return Inboxed::Nothing;
        }
        let fc = reply
            .filter(|r| !r.is_empty())
            .or_else(|| jetstream::headers::get(h, "Nats-Consumer-Stalled"));
        let Some(to) = fc else {
            return Inboxed::Nothing;
        };
        match self.last {
            Some((stream_seq, consumer_seq)) => {
                let op = Op::SourceFlowControl {
                    key: key.to_string(),
                    stream_seq,
                    consumer_seq,
                };
                Inboxed::Copy(op, to.to_string())
            }
            None => Inboxed::Send(OutMsg {
                subject: to.to_string(),
                route: None,
                reply: None,
                headers: None,
                payload: Bytes::new(),
            }),
        }
    }

    /// The run taken so far, as one input: a run of one is that copy.
    fn take_run(&mut self) -> Op {
        self.run_bytes = 0;
        let mut copies = std::mem::take(&mut self.run);
        match copies.len() {
            1 => copies.pop().expect("one"),
            _ => Op::Copies { copies },
        }
    }

    /// Under `acks_all`: one ack for every delivery the durable position
    /// covers (the newest such; it acks all before it).
    fn ack_durable(&mut self, durable: u64, out: &mut Vec<OutMsg>) {
        // Taken from the front, so a look that covers nothing new costs
        // nothing whatever is still unacked.
        let mut newest = None;
        while let Some(first) = self.unacked.first_entry() {
            if *first.key() > durable {
                break;
            }
            newest = Some(first.remove_entry());
        }
        if let Some((seq, to)) = newest {
            // Every copy it acks is stored, or was before.
            assert!(seq <= durable, "an ack past the durable position");
            out.push(OutMsg {
                subject: to,
                route: None,
                reply: None,
                headers: None,
                payload: Bytes::from_static(b"+ACK"),
            });
        }
    }

    /// Messages the pulls still waiting on the origin ask for, at `now`.
    fn asked_for(&self, now: u64) -> u64 {
        self.pulls
            .iter()
            .filter(|p| p.expires > now)
            .map(|p| p.msgs)
            .sum()
    }

    /// A delivery of `size` bytes used up part of the oldest pull; one
    /// with too few bytes left for another such message is done (the
    /// origin ends it, maybe without a word).
    fn delivered(&mut self, size: u64) {
        let Some(front) = self.pulls.front_mut() else {
            return;
        };
        front.msgs = front.msgs.saturating_sub(1);
        front.bytes = front.bytes.saturating_sub(size);
        if front.msgs == 0 || front.bytes < size {
            self.pulls.pop_front();
        }
    }
}

/// A pull request waiting on the origin.
#[derive(Debug, Clone, Copy)]
struct Pull {
    /// When it expires (ms).
    expires: u64,
    /// What it still asks for.
    msgs: u64,
    bytes: u64,
}

/// The sources of one stream.
#[derive(Debug)]
pub struct Links {
    stream: String,
    /// The sourcing stream's account: a consumer a link makes on another
    /// account's origin is named for it too, so two accounts' streams of
    /// one name never share one there (nats-server hashes it in too).
    account: String,
    /// Where answers and deliveries come back: `<inbox>.R.<n>` and
    /// `<inbox>.S.<source token>`.
    inbox: String,
    links: BTreeMap<String, Link>,
    /// Request number → source key.
    asked: BTreeMap<u64, String>,
    /// The positions last known durable (`Links::durable`).
    durable: BTreeMap<String, u64>,
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

/// A push source's deliver subject: its durable consumer's, or one
/// under an `external` source's `deliver` prefix, named for this stream
/// and the source so it is the same after a restart or a leader change.
fn push_deliver(account: &str, stream: &str, spec: &SourceSpec) -> Option<String> {
    if let Some((_, deliver)) = &spec.consumer {
        return Some(deliver.clone());
    }
    let prefix = spec.deliver.as_deref()?;
    let named = format!("{account} {stream} {}", spec.key);
    Some(format!("{prefix}.{}", token(&named)))
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
            account: String::new(),
            inbox,
            links: BTreeMap::new(),
            asked: BTreeMap::new(),
            durable: BTreeMap::new(),
            next: 0,
        }
    }

    /// The links of a stream in `account`.
    pub fn in_account(mut self, account: &str) -> Links {
        self.account = account.to_string();
        self
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
            let deliver = push_deliver(&self.account, &self.stream, spec);
            let consumer = match (&spec.consumer, &spec.deliver) {
                (Some((name, _)), _) => name.clone(),
                // On another account's origin: named for this account too.
                (None, Some(_)) => format!(
                    "src_{}_{}",
                    self.stream,
                    token(&format!("{} {}", self.account, spec.key))
                ),
                (None, None) => format!("src_{}_{}", self.stream, token(&spec.key)),
            };
            let link = self.links.entry(spec.key.clone()).or_insert_with(|| Link {
                consumer,
                deliver: deliver.clone(),
                spec: spec.clone(),
                state: State::Fresh,
                since: now,
                expect: 1,
                in_flight: None,
                last: None,
                chain: None,
                pulls: VecDeque::new(),
                reset_after: false,
                identity: None,
                acks_all: true,
                unacked: BTreeMap::new(),
                run: Vec::new(),
                run_bytes: 0,
            });
            // The position moves on as copies are applied.
            link.spec = spec.clone();
            if link.deliver != deliver {
                // A source's `deliver` changed: read anew.
                link.deliver = deliver;
                link.start_over(now);
            }
        }
        let keys: Vec<String> = self.links.keys().cloned().collect();
        let mut out = Vec::new();
        for key in keys {
            self.step(&key, now, &mut out);
        }
        self.ack_durable(&mut out);
        out
    }

    fn ack_durable(&mut self, out: &mut Vec<OutMsg>) {
        for (key, link) in &mut self.links {
            if let Some(&p) = self.durable.get(key) {
                link.ack_durable(p, out);
            }
        }
    }

    /// The sources' positions known to be durable (applied in a cluster,
    /// where an entry applies once a quorum holds it; synced on one
    /// server): the acks they allow, for the links that ack all. An ack
    /// never leaves before the copies it covers are durable, so an origin
    /// (a work queue, an interest stream) never drops one the copy could
    /// still lose.
    pub fn durable(&mut self, positions: &BTreeMap<String, u64>) -> Vec<OutMsg> {
        self.durable.clone_from(positions);
        let mut out = Vec::new();
        self.ack_durable(&mut out);
        out
    }

    fn ask(&mut self, key: &str) -> String {
        // One question per link at a time: an older one's answer is stale.
        self.asked.retain(|_, k| k != key);
        self.next += 1;
        self.asked.insert(self.next, key.to_string());
        format!("{}.R.{}", self.inbox, self.next)
    }

    /// The copies taken since the last call, as one run (`Op::Copies`)
    /// per source, for the driver to apply or propose at the end of its
    /// batch: one entry for many copies.
    pub fn take_runs(&mut self) -> Vec<Op> {
        self.links
            .values_mut()
            .filter(|l| !l.run.is_empty())
            .map(Link::take_run)
            .collect()
    }

    /// The deliver subjects of durable sources, for the driver to
    /// subscribe and route to [`Links::inbox`].
    pub fn deliver_subjects(&self) -> Vec<String> {
        self.links
            .values()
            .filter_map(|l| l.deliver_subject().map(str::to_string))
            .collect()
    }

    /// A push source's step: when fresh (or asked long ago), reset the
    /// user's consumer, or look up the one this link makes (an origin
    /// answers no reset of a consumer it does not have); and see the last
    /// copy applied in time or start over.
    fn step_durable(&mut self, key: &str, now: u64, out: &mut Vec<OutMsg>) {
        let link = &self.links[key];
        let due = match link.state {
            State::Fresh => true,
            State::Ready => false,
            _ => now.saturating_sub(link.since) >= ANSWER_WITHIN_MS,
        };
        if due {
            if !link.makes_push() {
                out.push(self.reset(key, now));
                return;
            }
            let reply = self.ask(key);
            let link = self.links.get_mut(key).expect("listed");
            link.start_over(now);
            link.state = State::Looking;
            out.push(request(
                api_subject(&link.spec, "INFO", &link.consumer),
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
        if self.links[key].deliver.is_some() {
            return self.step_durable(key, now, out);
        }
        let link = &self.links[key];
        let due = match link.state {
            State::Fresh => true,
            State::Looking | State::Creating | State::Resetting | State::Resting => {
                now.saturating_sub(link.since) >= ANSWER_WITHIN_MS
            }
            State::Ready => false,
        };
        if due {
            let reply = self.ask(key);
            let link = self.links.get_mut(key).expect("listed");
            link.start_over(now);
            link.state = State::Looking;
            out.push(request(
                api_subject(&link.spec, "INFO", &link.consumer),
                reply,
                Value::Null,
            ));
            return;
        }
        let deliver = format!("{}.S.{}", self.inbox, token(key));
        let link = self.links.get_mut(key).expect("listed");
        if link.state != State::Ready {
            return;
        }
        if let Some((seq, since)) = link.in_flight {
            if link.spec.position >= seq {
                link.in_flight = None;
            } else if now.saturating_sub(since) >= APPLIED_WITHIN_MS {
                // Refused (out of order) or lost: a new session.
                link.start_over(now);
                return self.step(key, now, out);
            }
        }
        link.pulls.retain(|p| p.expires > now);
        if link.asked_for(now) < PULL_BATCH {
            link.pulls.push_back(Pull {
                expires: now + PULL_EXPIRES_MS,
                msgs: PULL_BATCH,
                bytes: PULL_MAX_BYTES,
            });
            out.push(request(
                api_subject(&link.spec, "MSG.NEXT", &link.consumer),
                deliver,
                json!({
                    "batch": PULL_BATCH,
                    "max_bytes": PULL_MAX_BYTES,
                    "expires": PULL_EXPIRES_MS * 1_000_000,
                }),
            ));
        }
    }

    /// Asks the origin to reset a source's consumer to just past its ack
    /// floor: a new session, its consumer sequence from 1.
    fn reset(&mut self, key: &str, now: u64) -> OutMsg {
        let reply = self.ask(key);
        let link = self.links.get_mut(key).expect("listed");
        link.start_over(now);
        link.state = State::Resetting;
        link.expect = 1;
        request(
            api_subject(&link.spec, "RESET", &link.consumer),
            reply,
            Value::Null,
        )
    }

    /// Asks the origin to make the consumer (`reset_after`: it exists,
    /// with an older config, and is updated then reset).
    fn create(&mut self, key: &str, now: u64, reset_after: bool) -> OutMsg {
        let reply = self.ask(key);
        let link = self.links.get_mut(key).expect("listed");
        link.state = State::Creating;
        link.since = now;
        link.reset_after = reset_after;
        // A new session starts with the consumer: its sequence from 1.
        link.expect = 1;
        let spec = &link.spec;
        let mut config = match &link.deliver {
            // A push consumer acking by its flow control, as a durable
            // source's must (its heartbeat and flow control are the
            // policy's defaults).
            Some(deliver) => json!({
                "durable_name": link.consumer,
                "deliver_subject": deliver,
                "ack_policy": "flow_control",
                "max_ack_pending": MAX_ACK_PENDING,
                "inactive_threshold": INACTIVE_NS,
                "direct": true,
            }),
            None => json!({
                "durable_name": link.consumer,
                "ack_policy": if link.acks_all { "all" } else { "explicit" },
                "ack_wait": ACK_WAIT_NS,
                "max_ack_pending": MAX_ACK_PENDING,
                "inactive_threshold": INACTIVE_NS,
                "direct": true,
            }),
        };
        if spec.position > 0 && !reset_after {
            // Made again (gone while nobody pulled): after what is here.
            config["deliver_policy"] = json!("by_start_sequence");
            config["opt_start_seq"] = json!(spec.position + 1);
        } else if spec.start_seq > 0 {
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
        if link.deliver.is_some() {
            // The consumer, as a lookup, a reset or a create answers: it
            // must ack by flow control (nats-server's 10217 otherwise). One
            // this link makes is reset if found, made if not; made, it
            // delivers from its start.
            let acks_by_fc = v["config"]["ack_policy"] == "flow_control";
            match (link.state, code, acks_by_fc) {
                (State::Looking, None, true) => return Inboxed::Send(self.reset(key, now)),
                (State::Resetting, None, true) | (State::Creating, None, true) => {
                    link.state = State::Ready;
                }
                (State::Looking, Some(10014), _) => {
                    return Inboxed::Send(self.create(key, now, false));
                }
                _ => {
                    link.state = State::Resting;
                    link.since = now;
                }
            }
            return Inboxed::Nothing;
        }
        match (link.state, code) {
            (State::Looking, None) => {
                // Found: reset to its ack floor, after updating a consumer
                // an older flotilla made (one message outstanding). Its
                // ack policy stays (an update cannot change it).
                link.acks_all = v["config"]["ack_policy"] == "all";
                match v["config"]["max_ack_pending"].as_u64() == Some(MAX_ACK_PENDING) {
                    true => Inboxed::Send(self.reset(key, now)),
                    false => Inboxed::Send(self.create(key, now, true)),
                }
            }
            (State::Creating, None) => {
                link.identity = m
                    .headers
                    .as_deref()
                    .and_then(|h| jetstream::headers::get(h, IDENTITY))
                    .map(str::to_string)
                    .or(link.identity.take());
                if link.reset_after {
                    return Inboxed::Send(self.reset(key, now));
                }
                // New: it delivers from its start; the first pull goes out
                // with the next `follow`.
                link.state = State::Ready;
                Inboxed::Nothing
            }
            (State::Resetting, None) => {
                link.state = State::Ready;
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
            (State::Looking, Some(10014)) => Inboxed::Send(self.create(key, now, false)),
            // A work-queue origin takes explicit acks only (10084, 10098):
            // made again, acking each.
            (State::Creating, Some(10084 | 10098)) if link.acks_all => {
                link.acks_all = false;
                let reset_after = link.reset_after;
                Inboxed::Send(self.create(key, now, reset_after))
            }
            _ => {
                link.state = State::Resting;
                link.since = now;
                Inboxed::Nothing
            }
        }
    }

    /// A message routed to `<inbox>.S.<token>`, as delivered: a copy in
    /// the session's order, or a status.
    fn copy(&mut self, source: &str, m: Inbound, now: u64) -> Inboxed {
        let Some((key, link)) = self.links.iter_mut().find(|(k, _)| token(k) == source) else {
            return Inboxed::Nothing;
        };
        if let Some(h) = m.headers.as_deref().filter(|h| h.starts_with(b"NATS/1.0 ")) {
            link.pull_status(&String::from_utf8_lossy(h), now);
            return Inboxed::Nothing;
        }
        let Some(ack) = m.reply.clone() else {
            return Inboxed::Nothing;
        };
        let Some(info) = ack_info(&ack) else {
            return Inboxed::Nothing;
        };
        if !link.in_session_order(info.consumer_seq, now) {
            return Inboxed::Nothing;
        }
        let size = m.subject.len() + m.headers.as_ref().map_or(0, |h| h.len()) + m.payload.len();
        link.delivered(size as u64);
        let duplicate = info.stream_seq <= link.spec.position;
        let redelivery = !duplicate && link.chain.is_some_and(|c| info.stream_seq <= c);
        if link.acks_all {
            // Acked once the position is durable past it, with the others
            // (`Links::durable`); a duplicate or a redelivery is not
            // proposed at all.
            link.unacked.insert(info.stream_seq, ack.clone());
            if duplicate || redelivery {
                return Inboxed::Nothing;
            }
        }
        let after = if duplicate {
            // A duplicate: acked, not stored, not a link in the chain.
            None
        } else if redelivery {
            // A redelivery (ack wait passed) of a copy proposed in this
            // session and not yet applied: acked if that copy was stored,
            // never stored itself (it names itself), no link in the chain.
            Some(info.stream_seq)
        } else {
            link.in_flight = Some((info.stream_seq, now));
            link.chain.replace(info.stream_seq)
        };
        let op = Op::Sourced {
            key: key.clone(),
            origin_seq: info.stream_seq,
            origin_ts: info.ts,
            pending: info.pending,
            after,
            subject: m.subject,
            headers: m.headers,
            payload: m.payload,
        };
        match link.acks_all {
            true => link.add_to_run(op, size),
            false => Inboxed::Copy(op, ack),
        }
    }

    /// What a durable source's consumer sent: a delivery (copied in
    /// turn), a flow-control request (answered at once, acking nothing:
    /// the copies' own acks do), or a status.
    fn durable_delivery(&mut self, key: &str, m: Inbound, now: u64) -> Inboxed {
        let link = self.links.get_mut(key).expect("found");
        // The reset's deliveries may overtake its answer (in a cluster
        // the consumer delivers as the reset is applied, and the answer
        // leaves after): taken while it is awaited too.
        let ready = link.state == State::Ready;
        if !ready && !matches!(link.state, State::Resetting | State::Creating) {
            return Inboxed::Nothing;
        }
        if let Some(h) = m.headers.as_deref().filter(|h| h.starts_with(b"NATS/1.0 ")) {
            return link.durable_status(key, h, m.reply.as_deref(), now);
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
                State::Ready if l.deliver.is_some() => {
                    l.in_flight.map(|(_, since)| since + ANSWER_WITHIN_MS)
                }
                // A pull due now (a due time long past), else when the
                // next pull expires, or the copy under way is overdue.
                State::Ready => {
                    let asked: u64 = l.pulls.iter().map(|p| p.msgs).sum();
                    let expiry = l.pulls.iter().map(|p| p.expires).min();
                    let overdue = l.in_flight.map(|(_, since)| since + APPLIED_WITHIN_MS);
                    match asked < PULL_BATCH {
                        true => Some(0),
                        false => expiry.into_iter().chain(overdue).min(),
                    }
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
        assert_eq!(body["config"]["max_ack_pending"], MAX_ACK_PENDING);
        assert_eq!(body["config"]["ack_policy"], "all");
        assert_eq!(body["config"]["direct"], true);
        assert_eq!(
            links.inbox(&reply_to(&create), answer("{}"), 10_002),
            Inboxed::Nothing
        );
        let out = links.follow(&[spec("O")], 10_003);
        assert_eq!(out.len(), 1);
        assert!(out[0].subject.starts_with("$JS.API.CONSUMER.MSG.NEXT.O."));
        let pull: Value = serde_json::from_slice(&out[0].payload).unwrap();
        assert_eq!(pull["batch"], PULL_BATCH);
        // A delivery becomes a copy, acked once it is durable.
        let ack = "$JS.ACK.O.src_S_x.1.7.1.1700000000000000000.0";
        let m = Inbound {
            subject: "o.a".into(),
            reply: Some(ack.into()),
            headers: None,
            payload: Bytes::from_static(b"hi"),
        };
        assert_eq!(links.inbox(&reply_to(&out[0]), m, 10_004), Inboxed::Nothing);
        match &links.take_runs()[..] {
            [Op::Sourced { origin_seq, .. }] => assert_eq!(*origin_seq, 7),
            other => panic!("{other:?}"),
        }
        assert!(links.take_runs().is_empty(), "taken once");
        let key = spec("O").key;
        assert!(links
            .durable(&BTreeMap::from([(key.clone(), 6)]))
            .is_empty());
        let acks = links.durable(&BTreeMap::from([(key, 7)]));
        assert_eq!(acks.len(), 1);
        assert_eq!(
            (acks[0].subject.as_str(), &acks[0].payload[..]),
            (ack, &b"+ACK"[..])
        );
        // Fewer than a batch still asked for: a second pull, then none
        // while the two ask for more than a batch...
        assert_eq!(links.follow(&[spec("O")], 10_005).len(), 1);
        assert!(links.follow(&[spec("O")], 10_500).is_empty());
        // ...and another once they have expired.
        assert_eq!(links.follow(&[spec("O")], 11_006).len(), 1);
    }

    /// Many deliveries in flight: each copy names the one before it, a
    /// duplicate is acked without being a link, the next pull goes out
    /// before the last is used up, and a missed delivery resets the
    /// consumer to its ack floor (a new session from consumer sequence 1).
    #[test]
    fn a_pull_link_keeps_many_in_flight_in_order() {
        let mut links = Links::new("S", "_INBOX.s".into());
        let mut positioned = spec("O");
        positioned.position = 3;
        let specs = std::slice::from_ref(&positioned);
        let out = links.follow(specs, 10_000);
        // Found, with this version's config: reset to its ack floor.
        let found = format!(r#"{{"config":{{"max_ack_pending":{MAX_ACK_PENDING}}}}}"#);
        let Inboxed::Send(reset) = links.inbox(&reply_to(&out[0]), answer(&found), 10_001) else {
            panic!("a reset")
        };
        assert!(reset.subject.starts_with("$JS.API.CONSUMER.RESET.O.src_S_"));
        let deliver = format!("_INBOX.s.S.{}", token(&positioned.key));
        // The reset's first delivery overtakes its answer: a duplicate
        // (its ack was lost), acked, and no link in the chain.
        let d = |sseq, dseq| delivery("o.a", sseq, dseq);
        match links.inbox(&deliver, d(3, 1), 10_002) {
            Inboxed::Copy(
                Op::Sourced {
                    origin_seq: 3,
                    after: None,
                    ..
                },
                _,
            ) => {}
            other => panic!("{other:?}"),
        }
        // A straggler from before the reset is dropped.
        assert_eq!(links.inbox(&deliver, d(9, 40), 10_002), Inboxed::Nothing);
        assert_eq!(
            links.inbox(&reply_to(&reset), answer("{}"), 10_003),
            Inboxed::Nothing
        );
        let pulls = links.follow(specs, 10_004);
        assert_eq!(pulls.len(), 1);
        for (sseq, dseq, after) in [(4, 2, None), (6, 3, Some(4)), (7, 4, Some(6))] {
            match links.inbox(&deliver, d(sseq, dseq), 10_005) {
                Inboxed::Copy(
                    Op::Sourced {
                        origin_seq,
                        after: a,
                        ..
                    },
                    _,
                ) => {
                    assert_eq!((origin_seq, a), (sseq, after));
                }
                other => panic!("{other:?}"),
            }
        }
        // Fewer than a batch still asked for: the next pull, at once.
        assert_eq!(links.next_wake(), Some(0));
        assert_eq!(links.follow(specs, 10_006).len(), 1);
        // Copy 6 redelivered (its ack wait passed): it names itself, so it
        // is only acked if copy 6 was stored, and the chain stays at 7.
        match links.inbox(&deliver, d(6, 5), 10_006) {
            Inboxed::Copy(
                Op::Sourced {
                    origin_seq: 6,
                    after: Some(6),
                    ..
                },
                _,
            ) => {}
            other => panic!("{other:?}"),
        }
        // Delivery 6 never came: a new session.
        assert_eq!(links.inbox(&deliver, d(9, 7), 10_007), Inboxed::Nothing);
        let out = links.follow(specs, 10_008);
        assert!(out[0].subject.starts_with("$JS.API.CONSUMER.INFO.O."));
    }

    /// A source of `O` whose consumer was made new and pulled from at
    /// 10,003 ms: the links, and the subject deliveries come to.
    fn pulling() -> (Links, String) {
        let mut links = Links::new("S", "_INBOX.s".into());
        let out = links.follow(&[spec("O")], 10_000);
        let created = r#"{"error":{"err_code":10014}}"#;
        let Inboxed::Send(create) = links.inbox(&reply_to(&out[0]), answer(created), 10_001) else {
            panic!("a create")
        };
        links.inbox(&reply_to(&create), answer("{}"), 10_002);
        let pulls = links.follow(&[spec("O")], 10_003);
        let deliver = reply_to(&pulls[0]);
        (links, deliver)
    }

    /// A delivery from another session that takes a sequence number's
    /// place shows when the real one comes: a new session, never a
    /// silent drop (the next copy would skip the real one).
    #[test]
    fn a_delivery_behind_the_expected_sequence_starts_over() {
        let (mut links, deliver) = pulling();
        for seq in [1, 2] {
            let copy = links.inbox(&deliver, delivery("o.a", seq, seq), 10_004);
            assert_eq!(copy, Inboxed::Nothing);
        }
        assert!(matches!(&links.take_runs()[..], [Op::Copies { copies }] if copies.len() == 2));
        assert_eq!(
            links.inbox(&deliver, delivery("o.a", 2, 2), 10_005),
            Inboxed::Nothing
        );
        let out = links.follow(&[spec("O")], 10_006);
        assert!(
            out[0].subject.starts_with("$JS.API.CONSUMER.INFO.O."),
            "{out:?}"
        );
    }

    /// Under ack-all, one ack covers every delivery the durable position
    /// passed, whatever the order they came in; a duplicate or a
    /// redelivery is not proposed, only acked with the rest; nothing past
    /// the durable position is acked.
    #[test]
    fn one_ack_covers_what_the_durable_position_passed() {
        let (mut links, deliver) = pulling();
        let key = spec("O").key;
        let at = |p| BTreeMap::from([(key.clone(), p)]);
        for (sseq, dseq) in [(1, 1), (2, 2), (3, 3)] {
            let copy = links.inbox(&deliver, delivery("o.a", sseq, dseq), 10_004);
            assert_eq!(copy, Inboxed::Nothing);
        }
        // One run, each copy naming the one before it.
        let [Op::Copies { copies }] = &links.take_runs()[..] else {
            panic!("one run")
        };
        let chain: Vec<_> = copies
            .iter()
            .map(|c| match c {
                Op::Sourced {
                    origin_seq, after, ..
                } => (*origin_seq, *after),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(chain, [(1, None), (2, Some(1)), (3, Some(2))]);
        // 2 delivered again (its ack wait passed): not proposed.
        assert_eq!(
            links.inbox(&deliver, delivery("o.a", 2, 4), 10_005),
            Inboxed::Nothing
        );
        assert!(links.take_runs().is_empty());
        let acks = links.durable(&at(2));
        let subjects: Vec<&str> = acks.iter().map(|m| m.subject.as_str()).collect();
        assert_eq!(subjects, [delivery("o.a", 2, 4).reply.unwrap()]);
        // Nothing new is durable: nothing more to ack.
        assert!(links.durable(&at(2)).is_empty());
        assert!(links
            .follow(&[spec("O")], 10_006)
            .iter()
            .all(|m| !m.subject.starts_with("$JS.ACK")));
        let acks = links.durable(&at(3));
        assert_eq!(acks[0].subject, delivery("o.a", 3, 3).reply.unwrap());
        // A duplicate after the position: not proposed, acked by the next
        // look at the durable positions (the links follow).
        let mut applied = spec("O");
        applied.position = 3;
        links.follow(std::slice::from_ref(&applied), 10_007);
        assert_eq!(
            links.inbox(&deliver, delivery("o.a", 3, 5), 10_007),
            Inboxed::Nothing
        );
        let out = links.follow(std::slice::from_ref(&applied), 10_008);
        let acks: Vec<_> = out
            .iter()
            .filter(|m| m.subject.starts_with("$JS.ACK"))
            .collect();
        assert_eq!(acks.len(), 1);
        assert_eq!(acks[0].subject, delivery("o.a", 3, 5).reply.unwrap());
    }

    /// A run is proposed once it holds a run's bytes, without waiting for
    /// the end of the batch.
    #[test]
    fn a_full_run_is_proposed_at_once() {
        let (mut links, deliver) = pulling();
        let big = |seq: u64| Inbound {
            payload: Bytes::from(vec![0u8; RUN_MAX_BYTES / 2]),
            ..delivery("o.a", seq, seq)
        };
        assert_eq!(links.inbox(&deliver, big(1), 10_004), Inboxed::Nothing);
        match links.inbox(&deliver, big(2), 10_004) {
            Inboxed::Input(Op::Copies { copies }) => assert_eq!(copies.len(), 2),
            other => panic!("{other:?}"),
        }
        assert!(links.take_runs().is_empty());
    }

    /// A work-queue origin refuses a consumer that acks all (10098): the
    /// link makes it again acking each, and answers each copy's own ack
    /// subject once applied.
    #[test]
    fn a_work_queue_origin_gets_explicit_acks() {
        let mut links = Links::new("S", "_INBOX.s".into());
        let out = links.follow(&[spec("O")], 10_000);
        let missing = r#"{"error":{"err_code":10014}}"#;
        let Inboxed::Send(create) = links.inbox(&reply_to(&out[0]), answer(missing), 10_001) else {
            panic!("a create")
        };
        let refused = r#"{"error":{"err_code":10098}}"#;
        let Inboxed::Send(again) = links.inbox(&reply_to(&create), answer(refused), 10_002) else {
            panic!("a second create")
        };
        let body: Value = serde_json::from_slice(&again.payload).unwrap();
        assert_eq!(body["config"]["ack_policy"], "explicit");
        links.inbox(&reply_to(&again), answer("{}"), 10_003);
        let pulls = links.follow(&[spec("O")], 10_004);
        let d = delivery("o.a", 1, 1);
        let ack = d.reply.clone().unwrap();
        match links.inbox(&reply_to(&pulls[0]), d, 10_005) {
            Inboxed::Copy(Op::Sourced { origin_seq: 1, .. }, to) => assert_eq!(to, ack),
            other => panic!("{other:?}"),
        }
        let key = spec("O").key;
        assert!(links.durable(&BTreeMap::from([(key, 1)])).is_empty());
    }

    /// A consumer an older flotilla made (one message outstanding) is
    /// updated, then reset.
    #[test]
    fn an_older_consumer_is_updated_then_reset() {
        let mut links = Links::new("S", "_INBOX.s".into());
        let out = links.follow(&[spec("O")], 10_000);
        let old = r#"{"config":{"max_ack_pending":1}}"#;
        let Inboxed::Send(update) = links.inbox(&reply_to(&out[0]), answer(old), 10_001) else {
            panic!("an update")
        };
        assert!(update.subject.starts_with("$JS.API.CONSUMER.CREATE.O."));
        let Inboxed::Send(reset) = links.inbox(&reply_to(&update), answer("{}"), 10_002) else {
            panic!("a reset")
        };
        assert!(reset.subject.starts_with("$JS.API.CONSUMER.RESET.O."));
    }

    /// A copy not applied in time (refused out of order) starts a new
    /// session.
    #[test]
    fn a_copy_not_applied_in_time_starts_over() {
        let (mut links, deliver) = pulling();
        links.inbox(&deliver, delivery("o.a", 1, 1), 10_004);
        // Position still 0 long after: looked up again.
        let out = links.follow(&[spec("O")], 10_004 + APPLIED_WITHIN_MS);
        assert!(
            out[0].subject.starts_with("$JS.API.CONSUMER.INFO.O."),
            "{out:?}"
        );
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

    /// An `external` source with a `deliver` prefix (another account's
    /// origin, whose API replies come back one each through a service
    /// import): the link makes a push consumer delivering under the
    /// prefix, then reads as through a durable one.
    #[test]
    fn an_external_deliver_prefix_makes_a_push_consumer() {
        let mut external = spec("O");
        external.api = "RI.JS.A.API".into();
        external.deliver = Some("RI.DELIVER.A".into());
        external.start_seq = 3;
        let mut links = Links::new("S", "_INBOX.s".into());
        let out = links.follow(std::slice::from_ref(&external), 10_000);
        assert_eq!(out.len(), 1);
        let consumer = format!("src_S_{}", token(&format!(" {}", external.key)));
        assert_eq!(
            out[0].subject,
            format!("RI.JS.A.API.CONSUMER.INFO.O.{consumer}")
        );
        let deliver = links.deliver_subjects();
        assert_eq!(deliver.len(), 1);
        assert!(deliver[0].starts_with("RI.DELIVER.A."), "{deliver:?}");
        // Not found: made, pushing to the deliver subject from the start.
        let missing = r#"{"error":{"code":404,"err_code":10014}}"#;
        let Inboxed::Send(create) = links.inbox(&reply_to(&out[0]), answer(missing), 10_001) else {
            panic!("a create");
        };
        assert_eq!(
            create.subject,
            format!("RI.JS.A.API.CONSUMER.CREATE.O.{consumer}")
        );
        let body: Value = serde_json::from_slice(&create.payload).unwrap();
        assert_eq!(body["config"]["deliver_subject"], deliver[0].as_str());
        assert_eq!(body["config"]["ack_policy"], "flow_control");
        assert_eq!(body["config"]["opt_start_seq"], 3);
        // Its first delivery may overtake the create's answer.
        match links.inbox(&deliver[0], delivery("o.a", 3, 1), 10_002) {
            Inboxed::Input(Op::Sourced {
                origin_seq: 3,
                after: None,
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        let made = r#"{"config":{"ack_policy":"flow_control"}}"#;
        assert_eq!(
            links.inbox(&reply_to(&create), answer(made), 10_003),
            Inboxed::Nothing
        );
        match links.inbox(&deliver[0], delivery("o.a", 4, 2), 10_004) {
            Inboxed::Input(Op::Sourced {
                origin_seq: 4,
                after: Some(3),
                ..
            }) => {}
            other => panic!("{other:?}"),
        }
        // Found after a restart: reset to its ack floor.
        let mut links = Links::new("S", "_INBOX.s".into());
        let out = links.follow(std::slice::from_ref(&external), 20_000);
        let Inboxed::Send(reset) = links.inbox(&reply_to(&out[0]), answer(made), 20_001) else {
            panic!("a reset");
        };
        assert_eq!(
            reset.subject,
            format!("RI.JS.A.API.CONSUMER.RESET.O.{consumer}")
        );
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
