//! A consumer as a state machine: where it is in the stream, what is
//! delivered and not yet acknowledged, queued pull requests, and timers
//! (redelivery, heartbeats, request expiry, inactivity). Time comes in as
//! Unix nanoseconds; messages to send go out through `out`.
//!
//! Invariants:
//! - Every pending entry is a stream sequence below `next_sseq` that was
//!   delivered and not acknowledged; its `dseq` is the consumer sequence
//!   of its first delivery.
//! - The ack floor never passes a pending sequence.
//! - Consumer sequences handed out are strictly increasing by one.
//! - `num_pending` counts matching stored messages at or after
//!   `next_sseq` (plus the unsent part of a last-per-subject start).

mod config;
mod priority;
pub mod state;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use store::{Filter, MsgStore, StoredMsg};

pub use config::{
    check as check_config, check_update as check_config_update, defaults as apply_defaults,
    prepare_create, stamp_ephemeral, stamp_required_level, valid_group_name, AccountConsumerLimits,
    Via,
};
pub use state::ConsumerState;

use crate::api::{
    AckPolicy, ApiError, ConsumerConfig, ConsumerInfo, DeliverPolicy, PriorityGroupState,
    PriorityPolicy, PullRequest, ReplayPolicy, SequenceInfo, E,
};
use crate::headers;
use crate::output::{OutMsg, Output};
use jsapi::advisory::{Delivery, Event};
use priority::{Ask, Pin, Verdict};

const MS: i64 = 1_000_000;
/// The header that tells a pinned client its pin.
const PIN_ID: &str = "Nats-Pin-Id";
/// Flow-control window bounds, as nats-server.
const FC_MAX_WINDOW: u64 = 32 * 1024 * 1024;
const FC_START_WINDOW: u64 = FC_MAX_WINDOW / 16;
/// Added to a pull consumer's inactive threshold, as nats-server does.
const PULL_INACTIVE_GRACE: i64 = 100 * MS;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Pending {
    /// Consumer sequence of the first delivery.
    dseq: u64,
    /// When the ack wait started (delivery, progress, or a NAK's delay).
    ts: i64,
}

#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Waiting {
    reply: String,
    batch: i64,
    /// Bytes this request may still receive, when it set a limit.
    bytes_left: Option<i64>,
    expires: Option<i64>,
    no_wait: bool,
    heartbeat: i64,
    next_heartbeat: Option<i64>,
    delivered: u64,
    /// Its priority group fields.
    #[serde(default)]
    ask: Ask,
}

/// What an acknowledgement changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// Stream sequences this consumer is done with (for retention).
    pub done: Vec<u64>,
    /// A `+NXT` request to serve after the ack.
    pub next: Option<(PullRequest, String)>,
    /// Whether the ack's reply subject gets an (empty) answer.
    pub reply: bool,
    /// What the ack reports: a NAK, a TERM, a sampled ack.
    pub events: Vec<Event>,
}

pub struct Consumer {
    pub name: String,
    stream: String,
    pub config: ConsumerConfig,
    pub created: i64,
    /// The server made the name up (legacy ephemeral create): nats-server
    /// leaves it out of the config it reports.
    pub name_generated: bool,
    filter: Filter,
    /// Everything beyond config and durable state, as one value so a
    /// replicated stream's snapshot carries it whole.
    rt: Runtime,
    dirty: bool,
}

/// Everything a consumer holds beyond its config and durable state: a
/// replica restored with it behaves exactly as one that applied every
/// entry (waiting pull requests, push interest, redelivery order, flow
/// control, timers).
#[derive(serde::Serialize, serde::Deserialize)]
struct Runtime {
    next_sseq: u64,
    dseq: u64,
    delivered_sseq: u64,
    last_delivered: Option<i64>,
    floor_dseq: u64,
    floor_sseq: u64,
    last_ack: Option<i64>,
    pending: BTreeMap<u64, Pending>,
    rdc: BTreeMap<u64, u64>,
    redeliver: VecDeque<u64>,
    queued: BTreeSet<u64>,
    num_pending: u64,
    /// Last-per-subject start: these sequences first, then from `lps_resume`.
    lps: VecDeque<u64>,
    lps_resume: u64,
    waiting: VecDeque<Waiting>,
    push_active: bool,
    heartbeat_at: Option<i64>,
    fc_pending: Option<(String, u64)>,
    fc_counter: u64,
    pbytes: u64,
    maxpb: u64,
    /// Last pull request, delivery or ack; drives inactivity.
    last_activity: i64,
    inactive_since: Option<i64>,
    /// Replay-original pacing: when the next message may go out, and the
    /// stored time and send time of the previous one.
    replay_at: Option<i64>,
    replay_prev: Option<(i64, i64)>,
    /// Replay-original applies until this sequence (the last one when the
    /// consumer was created); newer messages go out at once.
    replay_until: u64,
    /// When a pause ends, so the driver wakes the consumer then.
    pause_wake: Option<i64>,
    /// `pinned_client`: the current pin, and how many were handed out.
    #[serde(default)]
    pin: Option<Pin>,
    #[serde(default)]
    pins_issued: u64,
}

impl Consumer {
    /// The runtime state (see [`Runtime`]), for a replicated stream's
    /// snapshot.
    pub fn runtime(&self) -> Vec<u8> {
        serde_json::to_vec(&self.rt).expect("runtime serializes")
    }

    /// Takes on runtime state from [`Consumer::runtime`]; false if it
    /// does not decode (the consumer is left as restored from its durable
    /// state).
    pub fn restore_runtime(&mut self, data: &[u8]) -> bool {
        let Ok(r) = serde_json::from_slice::<Runtime>(data) else {
            return false;
        };
        self.rt = r;
        true
    }
}

/// Subjects a consumer listens on besides its deliveries.
pub fn ack_prefix(stream: &str, consumer: &str) -> String {
    format!("$JS.ACK.{stream}.{consumer}.")
}

pub fn flow_control_prefix(stream: &str, consumer: &str) -> String {
    format!("$JS.FC.{stream}.{consumer}.")
}

/// The stream position a new consumer starts at.
fn start_seq(
    cfg: &ConsumerConfig,
    filter: &Filter,
    store: &dyn MsgStore,
    stream_mmps: i64,
) -> (u64, VecDeque<u64>, u64) {
    let st = store.state();
    let mut lps = VecDeque::new();
    let mut resume = 0;
    let mut seq = if cfg.opt_start_seq > 0 {
        cfg.opt_start_seq
    } else {
        match cfg.deliver_policy {
            DeliverPolicy::All => st.first_seq,
            DeliverPolicy::Last => {
                if filter.is_all() {
                    st.last_seq
                } else {
                    store
                        .last_matching(filter)
                        .ok()
                        .flatten()
                        .map_or(st.last_seq, |m| m.seq)
                }
            }
            DeliverPolicy::LastPerSubject => {
                if stream_mmps == 1 {
                    st.first_seq
                } else {
                    let seqs = store.multi_last_seqs(filter);
                    resume = st.last_seq + 1;
                    match seqs.first() {
                        Some(&s) => {
                            lps = seqs.into_iter().collect();
                            s
                        }
                        None => st.last_seq + 1,
                    }
                }
            }
            DeliverPolicy::ByStartTime => store.seq_for_time(cfg.opt_start_time.unwrap_or(0)),
            DeliverPolicy::New => st.last_seq + 1,
            DeliverPolicy::ByStartSequence => cfg.opt_start_seq,
        }
    };
    if cfg.opt_start_seq == 0 {
        if st.first_seq == 0 && st.last_seq == 0 {
            seq = 1;
        } else if seq > st.last_seq && lps.is_empty() {
            seq = st.last_seq + 1;
        }
    }
    if seq < st.first_seq {
        seq = st.first_seq;
    }
    (seq.max(1), lps, resume)
}

impl Consumer {
    /// A new consumer positioned by its deliver policy. `config` must have
    /// been checked and defaulted.
    pub fn new(
        stream: &str,
        config: ConsumerConfig,
        created: i64,
        store: &dyn MsgStore,
        stream_mmps: i64,
    ) -> Self {
        let filter = Filter::new(config.filters());
        let (next_sseq, lps, lps_resume) = start_seq(&config, &filter, store, stream_mmps);
        let mut c = Consumer {
            name: config.name.clone(),
            stream: stream.to_string(),
            created,
            name_generated: false,
            filter,
            rt: Runtime {
                next_sseq,
                dseq: 0,
                delivered_sseq: next_sseq - 1,
                last_delivered: None,
                floor_dseq: 0,
                floor_sseq: next_sseq - 1,
                last_ack: None,
                pending: BTreeMap::new(),
                rdc: BTreeMap::new(),
                redeliver: VecDeque::new(),
                queued: BTreeSet::new(),
                num_pending: 0,
                lps,
                lps_resume,
                waiting: VecDeque::new(),
                push_active: false,
                heartbeat_at: None,
                fc_pending: None,
                fc_counter: 0,
                pbytes: 0,
                maxpb: FC_START_WINDOW,
                last_activity: created,
                inactive_since: Some(created),
                replay_at: None,
                replay_prev: None,
                replay_until: store.state().last_seq,
                pause_wake: config.pause_until,
                pin: None,
                pins_issued: 0,
            },
            dirty: true,
            config,
        };
        c.recount(store);
        c
    }

    /// A consumer brought back from persisted state.
    pub fn restore(
        stream: &str,
        config: ConsumerConfig,
        created: i64,
        st: &ConsumerState,
        store: &dyn MsgStore,
        now: i64,
    ) -> Self {
        let mut c = Consumer::new(stream, config, created, store, 0);
        c.rt.lps.clear();
        c.rt.dseq = st.delivered_dseq;
        c.rt.delivered_sseq = st.delivered_sseq;
        c.rt.next_sseq = st.delivered_sseq + 1;
        c.rt.floor_dseq = st.ack_floor_dseq;
        c.rt.floor_sseq = st.ack_floor_sseq;
        c.rt.pending = st
            .pending
            .iter()
            .map(|p| {
                (
                    p.sseq,
                    Pending {
                        dseq: p.dseq,
                        ts: p.ts,
                    },
                )
            })
            .collect();
        c.rt.rdc = st.redelivered.iter().copied().collect();
        c.rt.last_activity = now;
        c.rt.inactive_since = Some(now);
        c.recount(store);
        c.dirty = false;
        c
    }

    pub fn state(&self) -> ConsumerState {
        ConsumerState {
            delivered_dseq: self.rt.dseq,
            delivered_sseq: self.rt.delivered_sseq,
            ack_floor_dseq: self.rt.floor_dseq,
            ack_floor_sseq: self.rt.floor_sseq,
            pending: self
                .rt
                .pending
                .iter()
                .map(|(&sseq, p)| state::PendingEntry {
                    sseq,
                    dseq: p.dseq,
                    ts: p.ts,
                })
                .collect(),
            redelivered: self.rt.rdc.iter().map(|(&s, &n)| (s, n)).collect(),
        }
    }

    /// Whether persisted state is behind; clears the flag.
    pub fn take_dirty(&mut self) -> bool {
        std::mem::take(&mut self.dirty)
    }

    pub fn filter(&self) -> &Filter {
        &self.filter
    }

    pub fn is_push(&self) -> bool {
        self.config.is_push()
    }

    /// Whether acks are listened for (not with ack policy `none`).
    pub fn takes_acks(&self) -> bool {
        !matches!(
            self.config.ack_policy,
            AckPolicy::None | AckPolicy::FlowControl
        )
    }

    /// After a config update: filters may have changed.
    pub fn set_config_derived(&mut self, store: &dyn MsgStore) {
        self.filter = Filter::new(self.config.filters());
        self.recount(store);
        self.dirty = true;
    }

    fn recount(&mut self, store: &dyn MsgStore) {
        let after = if self.rt.lps.is_empty() {
            self.rt.next_sseq
        } else {
            self.rt.lps_resume
        };
        let mut n = store.num_pending(after, &self.filter, false);
        if !self.rt.lps.is_empty() {
            n += self.rt.lps.len() as u64;
        }
        self.rt.num_pending = n;
    }

    /// Updates the consumer for a message newly stored at `seq`.
    pub fn on_stored(&mut self, seq: u64, subject: &str) {
        if seq >= self.rt.next_sseq && self.filter.matches(subject) {
            self.rt.num_pending += 1;
        }
    }

    /// Updates the consumer for a message removed from the stream; a
    /// pending one is dropped (nats-server terminates it).
    pub fn on_removed(&mut self, seq: u64, subject: &str) {
        if seq >= self.rt.next_sseq && self.filter.matches(subject) && self.rt.lps.is_empty() {
            self.rt.num_pending = self.rt.num_pending.saturating_sub(1);
        }
        if self.rt.pending.remove(&seq).is_some() {
            self.rt.queued.remove(&seq);
            self.rt.redeliver.retain(|&s| s != seq);
            self.move_floor();
            self.dirty = true;
        }
    }

    /// After a purge: skip what is gone and recount.
    pub fn on_purged(&mut self, store: &dyn MsgStore) {
        let first = store.state().first_seq;
        if self.rt.next_sseq < first {
            self.rt.next_sseq = first;
        }
        let gone: Vec<u64> = self
            .rt
            .pending
            .keys()
            .copied()
            .filter(|s| matches!(store.get(*s), Ok(None)))
            .collect();
        for s in gone {
            self.rt.pending.remove(&s);
            self.rt.queued.remove(&s);
        }
        self.rt
            .redeliver
            .retain(|s| self.rt.pending.contains_key(s));
        self.rt.lps.retain(|&s| s >= first);
        if self.rt.pending.is_empty() && self.rt.floor_sseq + 1 < self.rt.next_sseq {
            self.rt.floor_sseq = self.rt.next_sseq - 1;
            self.rt.floor_dseq = self.rt.dseq;
        }
        self.recount(store);
        self.dirty = true;
    }

    /// Whether this consumer still needs stream message `seq` (interest
    /// and work-queue retention).
    pub fn needs(&self, seq: u64, subject: &str) -> bool {
        if !self.filter.matches(subject) {
            return false;
        }
        if self.rt.rdc.contains_key(&seq) && !self.rt.pending.contains_key(&seq) {
            // Delivered max times and dropped: kept, as nats-server does.
            return true;
        }
        if seq <= self.rt.floor_sseq {
            return false;
        }
        match self.config.ack_policy {
            AckPolicy::Explicit => seq >= self.rt.next_sseq || self.rt.pending.contains_key(&seq),
            _ => true,
        }
    }

    pub fn set_push_active(&mut self, active: bool, now: i64) {
        if active == self.rt.push_active {
            return;
        }
        self.rt.push_active = active;
        if active {
            self.rt.inactive_since = None;
            self.rt.last_activity = now;
            if self.config.idle_heartbeat > 0 {
                self.rt.heartbeat_at = Some(now + self.config.idle_heartbeat);
            }
        } else {
            self.rt.inactive_since = Some(now);
            self.rt.heartbeat_at = None;
        }
    }

    pub fn push_active(&self) -> bool {
        self.rt.push_active
    }

    /// Whether unacked deliveries go out again after a wait: not without
    /// one (the `flow_control` ack policy), as in nats-server.
    fn redelivers(&self) -> bool {
        self.config.ack_wait > 0 || !self.config.backoff.is_empty()
    }

    fn ack_wait(&self, redeliveries: u64) -> i64 {
        if !self.config.backoff.is_empty() {
            let i = (redeliveries as usize).min(self.config.backoff.len() - 1);
            return self.config.backoff[i];
        }
        self.config.ack_wait
    }

    fn ack_subject(&self, dc: u64, sseq: u64, dseq: u64, ts: i64, pending: u64) -> String {
        format!(
            "$JS.ACK.{}.{}.{dc}.{sseq}.{dseq}.{ts}.{pending}",
            self.stream, self.name
        )
    }

    /// The next message to deliver: a redelivery first, else the next new
    /// one. `None` when there is nothing (or the ack-pending limit holds
    /// new ones back).
    fn next_msg(
        &mut self,
        store: &dyn MsgStore,
        now: i64,
        out: &mut Vec<Output>,
    ) -> Option<(StoredMsg, bool)> {
        while let Some(seq) = self.rt.redeliver.pop_front() {
            self.rt.queued.remove(&seq);
            if !self.rt.pending.contains_key(&seq) {
                continue;
            }
            // This would be delivery number `count + 1`.
            let count = self.rt.rdc.get(&seq).copied().unwrap_or(0) + 1;
            if self.config.max_deliver > 0 && count + 1 > self.config.max_deliver as u64 {
                // Already delivered max times: done with it. Not an ack:
                // the ack floor stays.
                self.max_deliveries(seq, out);
                self.rt.pending.remove(&seq);
                self.rt.rdc.insert(seq, count);
                self.dirty = true;
                continue;
            }
            match store.get(seq) {
                Ok(Some(m)) => {
                    self.rt.rdc.insert(seq, count);
                    if let Some(p) = self.rt.pending.get_mut(&seq) {
                        p.ts = now;
                    }
                    return Some((m, true));
                }
                Ok(None) => {
                    self.rt.pending.remove(&seq);
                    self.move_floor();
                }
                Err(_) => return self.unreadable_redelivery(seq),
            }
        }
        let max_ack = self.config.max_ack_pending;
        if self.config.ack_policy != AckPolicy::None
            && max_ack > 0
            && self.rt.pending.len() as i64 >= max_ack
        {
            return None;
        }
        while let Some(&seq) = self.rt.lps.front() {
            let read = store.get(seq);
            if read.is_err() {
                // Stays first, for when it reads again.
                return None;
            }
            self.rt.lps.pop_front();
            if let Some(m) = read.ok().flatten() {
                self.rt.next_sseq = seq + 1;
                if self.rt.lps.is_empty() {
                    self.rt.next_sseq = self.rt.lps_resume.max(seq + 1);
                }
                return Some((m, false));
            }
            self.rt.num_pending = self.rt.num_pending.saturating_sub(1);
            if self.rt.lps.is_empty() {
                self.rt.next_sseq = self.rt.lps_resume;
            }
        }
        // A record that does not read back holds delivery here: the
        // store's owner learns of it (`MsgStore::damage`) and repairs the
        // store, and nothing after it is skipped meanwhile.
        let Ok(next) = store.next_matching(self.rt.next_sseq, &self.filter) else {
            return None;
        };
        let Some(m) = next else {
            // Nothing more matches: the scan reached the end of the stream.
            self.rt.next_sseq = self.rt.next_sseq.max(store.state().last_seq + 1);
            return None;
        };
        self.rt.next_sseq = m.seq + 1;
        Some((m, false))
    }

    /// A redelivery whose message does not read back: it waits, first in
    /// line, until it reads again (see `next_msg`); nothing goes out.
    fn unreadable_redelivery(&mut self, seq: u64) -> Option<(StoredMsg, bool)> {
        self.rt.redeliver.push_front(seq);
        self.rt.queued.insert(seq);
        None
    }

    /// Builds the delivered form of `m` (headers-only when configured).
    fn delivered_form(&self, m: &StoredMsg) -> (Option<Bytes>, Bytes) {
        if self.config.headers_only {
            let size = m.payload.len().to_string();
            let h = headers::append(m.headers.as_deref(), &[("Nats-Msg-Size", &size)]);
            return (Some(h), Bytes::new());
        }
        (m.headers.clone(), m.payload.clone())
    }

    fn record_delivery(&mut self, m: &StoredMsg, redelivery: bool, now: i64) -> (u64, u64) {
        self.rt.dseq += 1;
        let dseq = self.rt.dseq;
        if !redelivery {
            self.rt.num_pending = self.rt.num_pending.saturating_sub(1);
            if m.seq > self.rt.delivered_sseq {
                self.rt.delivered_sseq = m.seq;
            }
        }
        self.rt.last_delivered = Some(now);
        self.rt.last_activity = now;
        self.dirty = true;
        let dc = if redelivery {
            self.rt.rdc.get(&m.seq).copied().unwrap_or(0) + 1
        } else {
            1
        };
        match self.config.ack_policy {
            AckPolicy::None => {
                self.rt.floor_dseq = dseq;
                self.rt.floor_sseq = self.rt.floor_sseq.max(m.seq);
            }
            _ => {
                self.rt
                    .pending
                    .entry(m.seq)
                    .or_insert(Pending { dseq, ts: now });
            }
        }
        (dc, dseq)
    }

    /// Delivers as much as the consumer may now. Returns the stream
    /// sequences a no-ack consumer is done with (for interest retention).
    pub fn pump(&mut self, store: &dyn MsgStore, now: i64, out: &mut Vec<Output>) -> Vec<u64> {
        let mut done = Vec::new();
        if self.config.pause_until.is_some_and(|until| now < until) {
            return done;
        }
        loop {
            if self.is_push() {
                let stalled = self.config.flow_control && self.rt.pbytes > self.rt.maxpb;
                if !self.rt.push_active || stalled || self.rt.replay_at.is_some_and(|at| now < at) {
                    break;
                }
            } else {
                self.expire_waiting(now, out);
                if self.rt.waiting.is_empty() {
                    break;
                }
            }
            let Some((m, redelivery)) = self.next_msg(store, now, out) else {
                break;
            };
            if self.replay_waits(&m, now) {
                self.unpop(&m, redelivery);
                break;
            }
            let (hdrs, payload) = self.delivered_form(&m);
            let dc = if redelivery {
                self.rt.rdc.get(&m.seq).copied().unwrap_or(0) + 1
            } else {
                1
            };
            // The ack subject as it will be sent (made once, with the
            // counts `record_delivery` is about to set): its length counts
            // towards the request's bytes.
            let pending_after = if redelivery {
                self.rt.num_pending
            } else {
                self.rt.num_pending.saturating_sub(1)
            };
            let reply = self.ack_subject(dc, m.seq, self.rt.dseq + 1, m.ts, pending_after);
            let size = (m.subject.len()
                + reply.len()
                + hdrs.as_ref().map_or(0, |h| h.len())
                + payload.len()) as i64;
            let (target, pin) = if self.is_push() {
                (self.config.deliver_subject.clone(), None)
            } else {
                match self.take_request(size, redelivery, now, out) {
                    Some(taken) => taken,
                    None => {
                        self.unpop(&m, redelivery);
                        break;
                    }
                }
            };
            let hdrs = match pin {
                Some(id) => Some(headers::append(hdrs.as_deref(), &[(PIN_ID, &id)])),
                None => hdrs,
            };
            let (dc, dseq) = self.record_delivery(&m, redelivery, now);
            debug_assert_eq!(
                reply,
                self.ack_subject(dc, m.seq, dseq, m.ts, self.rt.num_pending)
            );
            out.push(Output::Publish(OutMsg {
                subject: m.subject.clone(),
                route: Some(target.clone()),
                reply: Some(reply),
                headers: hdrs,
                payload,
            }));
            if self.config.ack_policy == AckPolicy::None {
                done.push(m.seq);
            }
            if self.is_push() {
                if self.config.idle_heartbeat > 0 {
                    self.rt.heartbeat_at = Some(now + self.config.idle_heartbeat);
                }
                if self.config.flow_control {
                    self.rt.pbytes += size as u64;
                    // Past half the window; or, acking by flow control,
                    // at the most pending the consumer may have.
                    let acks_due = self.acks_by_flow_control()
                        && self.rt.pending.len() as i64 >= self.config.max_ack_pending;
                    if self.rt.pbytes > self.rt.maxpb / 2 || acks_due {
                        self.request_flow_control(out);
                    }
                }
            } else {
                self.finish_requests(out);
            }
        }
        if !self.is_push() {
            self.finish_no_wait(store, out);
        }
        done
    }

    /// With replay `original`, whether `m` must wait to keep the spacing
    /// the messages were stored with.
    fn replay_waits(&mut self, m: &StoredMsg, now: i64) -> bool {
        if self.config.replay_policy != ReplayPolicy::Original
            || !self.is_push()
            || m.seq > self.rt.replay_until
        {
            self.rt.replay_at = None;
            return false;
        }
        if let Some((prev_ts, sent_at)) = self.rt.replay_prev {
            let gap = m.ts - prev_ts;
            if gap > MS && now < sent_at + gap {
                self.rt.replay_at = Some(sent_at + gap);
                return true;
            }
        }
        self.rt.replay_prev = Some((m.ts, now));
        self.rt.replay_at = None;
        false
    }

    /// The pull request that takes a message of `size` bytes, and the pin
    /// id the delivery carries (`pinned_client`). Requests that cannot take
    /// it (byte limit) are ended with a 409, those holding a stale pin with
    /// a 423; those the priority policy holds back stay. The chosen one
    /// goes behind the others of its priority so requests share
    /// deliveries.
    fn take_request(
        &mut self,
        size: i64,
        redelivery: bool,
        now: i64,
        out: &mut Vec<Output>,
    ) -> Option<(String, Option<String>)> {
        let policy = self.config.priority_policy;
        // The message at hand counts as pending, as nats-server counts it.
        let pending = self.rt.num_pending + u64::from(redelivery);
        let mut cycled = 0;
        while let Some(mut w) = self.rt.waiting.pop_front() {
            let pin = self.rt.pin.as_ref();
            let pinned =
                match priority::verdict(&w.ask, policy, pin, pending, self.rt.pending.len()) {
                    Verdict::Take { pinned } => pinned,
                    Verdict::WrongPin => {
                        let pend = pending_headers(w.batch, w.bytes_left.unwrap_or(0));
                        status(out, &w.reply, 423, "Nats-Wrong-Pin-Id", &pend);
                        continue;
                    }
                    Verdict::Skip => {
                        self.rt.waiting.push_back(w);
                        cycled += 1;
                        if cycled >= self.rt.waiting.len() {
                            return None;
                        }
                        continue;
                    }
                };
            if let Some(left) = w.bytes_left {
                if size > left {
                    let pend = pending_headers(w.batch, left);
                    status(out, &w.reply, 409, "Message Size Exceeds MaxBytes", &pend);
                    continue;
                }
                w.bytes_left = Some(left - size);
            }
            if pinned {
                let id = priority::pin_id(&self.name, self.rt.pins_issued, now);
                self.rt.pins_issued += 1;
                self.rt.pin = Some(Pin {
                    id: id.clone(),
                    since: now,
                    deadline: now.saturating_add(self.config.priority_timeout),
                    group: w.ask.group.clone(),
                });
                if !w.ask.group.is_empty() {
                    out.push(Output::Event(Event::Pinned {
                        stream: self.stream.clone(),
                        consumer: self.name.clone(),
                        group: w.ask.group.clone(),
                        pinned_id: id.clone(),
                    }));
                }
                w.ask.pin = id;
            }
            w.batch -= 1;
            w.delivered += 1;
            if w.heartbeat > 0 {
                w.next_heartbeat = Some(now + w.heartbeat);
            }
            let reply = w.reply.clone();
            let pin = (policy == PriorityPolicy::PinnedClient).then(|| w.ask.pin.clone());
            self.wait(w);
            return Some((reply, pin));
        }
        None
    }

    /// Queues a request: behind every request of its priority or a more
    /// urgent one under `prioritized`, else at the back.
    fn wait(&mut self, w: Waiting) {
        let policy = self.config.priority_policy;
        let at = priority::insert_at(&self.rt.waiting, policy, |q| q.ask.priority, w.ask.priority);
        self.rt.waiting.insert(at, w);
    }

    /// Removes requests that got all they asked for. One that ran out of
    /// messages but not of bytes hears `409 Batch Completed`.
    fn finish_requests(&mut self, out: &mut Vec<Output>) {
        let mut keep = VecDeque::new();
        for w in std::mem::take(&mut self.rt.waiting) {
            match w.bytes_left {
                Some(0) => {}
                Some(left) if w.batch <= 0 => {
                    status(
                        out,
                        &w.reply,
                        409,
                        "Batch Completed",
                        &pending_headers(0, left),
                    );
                }
                _ if w.batch <= 0 => {}
                _ => keep.push_back(w),
            }
        }
        self.rt.waiting = keep;
    }

    /// Puts back a message taken by `next_msg` but not delivered.
    fn unpop(&mut self, m: &StoredMsg, redelivery: bool) {
        if redelivery {
            if let Some(n) = self.rt.rdc.get_mut(&m.seq) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.rt.rdc.remove(&m.seq);
                }
            }
            self.rt.redeliver.push_front(m.seq);
            self.rt.queued.insert(m.seq);
        } else if self.rt.next_sseq > m.seq {
            if self.rt.lps_resume > 0
                && self.rt.next_sseq == self.rt.lps_resume
                && m.seq < self.rt.lps_resume
            {
                self.rt.lps.push_front(m.seq);
            }
            self.rt.next_sseq = m.seq;
        }
    }

    /// `no_wait` requests end once nothing more is available.
    fn finish_no_wait(&mut self, store: &dyn MsgStore, out: &mut Vec<Output>) {
        if self.rt.waiting.is_empty() || self.has_more(store) {
            return;
        }
        let mut keep = VecDeque::new();
        for w in std::mem::take(&mut self.rt.waiting) {
            if w.no_wait && (w.expires.is_none() || w.delivered > 0) {
                status(out, &w.reply, 404, "No Messages", &[]);
            } else {
                keep.push_back(w);
            }
        }
        self.rt.waiting = keep;
    }

    fn has_more(&self, store: &dyn MsgStore) -> bool {
        if !self.rt.redeliver.is_empty() || !self.rt.lps.is_empty() {
            return true;
        }
        let blocked = self.config.ack_policy != AckPolicy::None
            && self.config.max_ack_pending > 0
            && self.rt.pending.len() as i64 >= self.config.max_ack_pending;
        !blocked
            && self.rt.num_pending > 0
            && store
                .next_matching(self.rt.next_sseq, &self.filter)
                .ok()
                .flatten()
                .is_some()
    }

    fn expire_waiting(&mut self, now: i64, out: &mut Vec<Output>) {
        if self
            .rt
            .waiting
            .iter()
            .all(|w| w.expires.is_none_or(|e| e > now))
        {
            return;
        }
        let mut keep = VecDeque::new();
        for w in std::mem::take(&mut self.rt.waiting) {
            if w.expires.is_some_and(|e| e <= now) {
                let pend = pending_headers(w.batch, w.bytes_left.unwrap_or(0));
                status(out, &w.reply, 408, "Request Timeout", &pend);
            } else {
                keep.push_back(w);
            }
        }
        self.rt.waiting = keep;
    }

    /// A pull request (`MSG.NEXT` or `+NXT`).
    pub fn pull(
        &mut self,
        req: PullRequest,
        reply: &str,
        store: &dyn MsgStore,
        now: i64,
        out: &mut Vec<Output>,
    ) -> Vec<u64> {
        self.rt.last_activity = now;
        self.rt.inactive_since = None;
        if self.is_push() {
            status(out, reply, 409, "Consumer is push based", &[]);
            return Vec::new();
        }
        if req.idle_heartbeat > 0 && (req.expires == 0 || req.idle_heartbeat * 2 > req.expires) {
            status(
                out,
                reply,
                400,
                "Bad Request - heartbeat value too large",
                &[],
            );
            return Vec::new();
        }
        let batch = req.batch.max(1);
        if self.config.max_batch > 0 && batch > self.config.max_batch {
            status(
                out,
                reply,
                409,
                &format!("Exceeded MaxRequestBatch of {}", self.config.max_batch),
                &[],
            );
            return Vec::new();
        }
        if self.config.max_expires > 0 && req.expires > self.config.max_expires {
            let d = crate::duration::format(std::time::Duration::from_nanos(
                self.config.max_expires as u64,
            ));
            status(
                out,
                reply,
                409,
                &format!("Exceeded MaxRequestExpires of {d}"),
                &[],
            );
            return Vec::new();
        }
        if self.config.max_bytes > 0 && req.max_bytes > self.config.max_bytes {
            status(
                out,
                reply,
                409,
                &format!("Exceeded MaxRequestMaxBytes of {}", self.config.max_bytes),
                &[],
            );
            return Vec::new();
        }
        let groups = &self.config.priority_groups;
        match priority::check_pull(
            &req,
            self.config.priority_policy,
            groups,
            self.rt.pin.as_ref(),
        ) {
            Err((code, description)) => {
                status(out, reply, code, description, &[]);
                return Vec::new();
            }
            // The pinned client pulled again: its pin lasts longer.
            Ok(true) => {
                if let Some(pin) = self.rt.pin.as_mut() {
                    pin.deadline = now.saturating_add(self.config.priority_timeout);
                }
            }
            Ok(false) => {}
        }
        if req.no_wait {
            // nats-server counts what is left to deliver (redeliveries
            // included) against what waiting requests already asked for.
            let msgs_pending = self.rt.num_pending + self.rt.redeliver.len() as u64;
            if req.expires == 0 && msgs_pending == 0 {
                status(out, reply, 404, "No Messages", &[]);
                return Vec::new();
            }
            if msgs_pending > 0 {
                self.expire_waiting(now, out);
                let asked: i64 = self.rt.waiting.iter().map(|w| w.batch.max(0)).sum();
                if (msgs_pending as i64) < asked {
                    status(out, reply, 408, "Requests Pending", &[]);
                    return Vec::new();
                }
            }
        }
        if self.rt.waiting.len() as i64 >= self.config.max_waiting.max(1) {
            self.expire_waiting(now, out);
            if self.rt.waiting.len() as i64 >= self.config.max_waiting.max(1) {
                if req.idle_heartbeat == 0 {
                    status(out, reply, 409, "Exceeded MaxWaiting", &[]);
                }
                return Vec::new();
            }
        }
        self.wait(Waiting {
            ask: Ask::of(&req),
            reply: reply.to_string(),
            batch,
            bytes_left: (req.max_bytes > 0).then_some(req.max_bytes),
            expires: (req.expires > 0).then(|| now + req.expires),
            no_wait: req.no_wait,
            heartbeat: req.idle_heartbeat,
            next_heartbeat: (req.idle_heartbeat > 0).then(|| now + req.idle_heartbeat),
            delivered: 0,
        });
        self.pump(store, now, out)
    }

    /// An acknowledgement published to `subject` (the ack reply of a
    /// delivery) with body `body`; `reply` is the ack's own reply subject,
    /// used by `+NXT` as the pull request's inbox.
    pub fn ack(&mut self, subject: &str, body: &[u8], reply: Option<&str>, now: i64) -> AckOutcome {
        let mut outcome = AckOutcome::default();
        let Some((dc, sseq, dseq)) = parse_ack_subject(subject) else {
            return outcome;
        };
        let delivery = |c: &Consumer| c.delivery(sseq, dseq, dc);
        self.rt.last_activity = now;
        self.rt.last_ack = Some(now);
        // nats-server ignores (and does not answer) an ack or term of
        // something not delivered yet; everything else is answered.
        let ahead = sseq >= self.rt.next_sseq && !self.config.flow_control;
        outcome.reply = sseq > 0;
        let text = std::str::from_utf8(body).unwrap_or("").trim();
        match text {
            "" | "+ACK" | "+OK" => {
                if ahead {
                    outcome.reply = false;
                } else {
                    self.sample(delivery(self), now, &mut outcome);
                    self.ack_seq(sseq, &mut outcome);
                }
            }
            "+WPI" => {
                if let Some(p) = self.rt.pending.get_mut(&sseq) {
                    p.ts = now;
                    self.dirty = true;
                }
            }
            t if t.starts_with("+TERM") => {
                if ahead {
                    outcome.reply = false;
                } else {
                    self.ack_seq(sseq, &mut outcome);
                }
                // Stale or repeated, a TERM is still reported (as
                // nats-server's `processTerm` does).
                let reason = t["+TERM".len()..].trim().to_string();
                outcome
                    .events
                    .push(Event::Terminated(delivery(self), reason));
            }
            t if t.starts_with("-NAK") => {
                // Reported when the message is pending and the delivery
                // is in range, before any delay applies.
                let live = dseq > self.rt.floor_dseq && dseq <= self.rt.dseq;
                if live && self.rt.pending.contains_key(&sseq) {
                    outcome.events.push(Event::Nak(delivery(self)));
                }
                self.nak(sseq, t["-NAK".len()..].trim(), now)
            }
            t if t.starts_with("+NXT") => {
                outcome.reply = false;
                if !ahead {
                    self.ack_seq(sseq, &mut outcome);
                }
                if !ahead {
                    self.sample(delivery(self), now, &mut outcome);
                }
                let rest = t["+NXT".len()..].trim();
                if let (Ok(req), Some(reply)) = (PullRequest::parse(rest.as_bytes()), reply) {
                    outcome.next = Some((req, reply.to_string()));
                }
            }
            _ => {}
        }
        outcome
    }

    /// A message's delivery, as `Event`s report it.
    fn delivery(&self, stream_seq: u64, consumer_seq: u64, deliveries: u64) -> Delivery {
        Delivery {
            stream: self.stream.clone(),
            consumer: self.name.clone(),
            consumer_seq,
            stream_seq,
            deliveries,
        }
    }

    /// `sample_freq`: an explicit ack of a pending message is reported
    /// (`$JS.EVENT.METRIC.CONSUMER.ACK`) with how long it took, as often
    /// as the percentage says. nats-server draws at random; here the draw
    /// is a hash of the delivery, so every replica draws alike.
    fn sample(&self, d: Delivery, now: i64, outcome: &mut AckOutcome) {
        if self.config.ack_policy != AckPolicy::Explicit {
            return;
        }
        let freq: i64 = self
            .config
            .sample_freq
            .trim_end_matches('%')
            .parse()
            .unwrap_or(0);
        let Some(p) = self.rt.pending.get(&d.stream_seq) else {
            return;
        };
        let drawn = || {
            let mut x = d.consumer_seq ^ (self.created as u64).rotate_left(17);
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
            ((x ^ (x >> 31)) % 100) as i64
        };
        if freq >= 100 || (freq > 0 && drawn() <= freq) {
            let ack_time = now - p.ts;
            outcome.events.push(Event::AckSampled(d, ack_time));
        }
    }

    /// A message delivered as often as `max_deliver` allows goes no
    /// more: reported once, as it leaves pending.
    fn max_deliveries(&self, sseq: u64, out: &mut Vec<Output>) {
        debug_assert!(self.config.max_deliver > 0, "only a bounded consumer");
        let Some(p) = self.rt.pending.get(&sseq) else {
            return;
        };
        let d = self.delivery(sseq, p.dseq, self.config.max_deliver as u64);
        out.push(Output::Event(Event::MaxDeliveries(d)));
    }

    fn ack_seq(&mut self, sseq: u64, outcome: &mut AckOutcome) {
        match self.config.ack_policy {
            AckPolicy::None => {}
            AckPolicy::All | AckPolicy::FlowControl => {
                let Some(p) = self.rt.pending.get(&sseq).copied() else {
                    return;
                };
                let covered: Vec<u64> = self.rt.pending.range(..=sseq).map(|(&s, _)| s).collect();
                for s in covered {
                    self.rt.pending.remove(&s);
                    self.rt.queued.remove(&s);
                    self.rt.rdc.remove(&s);
                    outcome.done.push(s);
                }
                self.rt
                    .redeliver
                    .retain(|s| self.rt.pending.contains_key(s));
                self.rt.floor_dseq = self.rt.floor_dseq.max(p.dseq);
                self.rt.floor_sseq = self.rt.floor_sseq.max(sseq);
                self.move_floor();
                self.dirty = true;
            }
            AckPolicy::Explicit => {
                if self.rt.pending.remove(&sseq).is_none() {
                    return;
                }
                self.rt.queued.remove(&sseq);
                self.rt.redeliver.retain(|&s| s != sseq);
                self.rt.rdc.remove(&sseq);
                outcome.done.push(sseq);
                self.move_floor();
                self.dirty = true;
            }
        }
    }

    fn nak(&mut self, sseq: u64, arg: &str, now: i64) {
        if !self.rt.pending.contains_key(&sseq) {
            return;
        }
        let wait = self.ack_wait(self.rt.rdc.get(&sseq).copied().unwrap_or(0));
        let delay = if arg.is_empty() {
            None
        } else if arg.starts_with('{') {
            serde_json::from_str::<serde_json::Value>(arg)
                .ok()
                .and_then(|v| v.get("delay").and_then(|d| d.as_i64()))
        } else {
            crate::duration::parse(arg)
                .ok()
                .map(|d| d.as_nanos() as i64)
        };
        match delay {
            Some(d) if d > 0 => {
                // Redeliver after the delay: the wait restarts so it ends then.
                if let Some(p) = self.rt.pending.get_mut(&sseq) {
                    p.ts = now - wait + d;
                }
                self.rt.queued.remove(&sseq);
                self.rt.redeliver.retain(|&s| s != sseq);
            }
            _ => {
                if self.rt.queued.insert(sseq) {
                    self.rt.redeliver.push_back(sseq);
                }
            }
        }
        self.dirty = true;
    }

    /// Recomputes the ack floor from what is still pending.
    fn move_floor(&mut self) {
        match self.rt.pending.iter().next() {
            Some((&sseq, p)) => {
                self.rt.floor_sseq = self.rt.floor_sseq.max(sseq - 1);
                self.rt.floor_dseq = self.rt.floor_dseq.max(p.dseq - 1);
            }
            None => {
                self.rt.floor_dseq = self.rt.dseq;
                self.rt.floor_sseq = self.rt.floor_sseq.max(self.rt.next_sseq.saturating_sub(1));
            }
        }
    }

    /// Whether this consumer's acks come with its flow-control replies
    /// (the `flow_control` ack policy) rather than on ack subjects.
    fn acks_by_flow_control(&self) -> bool {
        self.config.ack_policy == AckPolicy::FlowControl
    }

    /// Sends a flow-control request on the deliver subject, unless one is
    /// out already.
    fn request_flow_control(&mut self, out: &mut Vec<Output>) {
        if self.rt.fc_pending.is_some() {
            return;
        }
        self.rt.fc_counter += 1;
        let reply = format!(
            "{}{}",
            flow_control_prefix(&self.stream, &self.name),
            base62(self.rt.fc_counter)
        );
        self.rt.fc_pending = Some((reply.clone(), self.rt.pbytes));
        let target = self.config.deliver_subject.clone();
        status_with_reply(out, &target, Some(reply), 100, "FlowControl Request", &[]);
    }

    /// A reply to a flow-control request; `last` is what it said was
    /// received (`Nats-Last-Stream`, `Nats-Last-Consumer`). Only the
    /// reply to the request last sent counts. Under the `flow_control`
    /// ack policy it acks every delivery up to that stream sequence;
    /// returns the sequences so acked.
    pub fn flow_control_reply(&mut self, subject: &str, last: Option<(u64, u64)>) -> Vec<u64> {
        let Some((fc, size)) = &self.rt.fc_pending else {
            return Vec::new();
        };
        if fc != subject {
            return Vec::new();
        }
        self.rt.maxpb = (self.rt.maxpb * 2).min(FC_MAX_WINDOW);
        self.rt.pbytes = self.rt.pbytes.saturating_sub(*size);
        self.rt.fc_pending = None;
        match last {
            Some((sseq, dseq)) if self.acks_by_flow_control() && sseq > 0 => {
                self.ack_through(sseq, dseq)
            }
            _ => Vec::new(),
        }
    }

    /// Acks every delivery up to stream sequence `sseq` (consumer
    /// sequence `dseq`), as an ack-all does.
    fn ack_through(&mut self, sseq: u64, dseq: u64) -> Vec<u64> {
        if sseq <= self.rt.floor_sseq {
            return Vec::new();
        }
        let covered: Vec<u64> = self.rt.pending.range(..=sseq).map(|(&s, _)| s).collect();
        for s in &covered {
            self.rt.pending.remove(s);
            self.rt.queued.remove(s);
            self.rt.rdc.remove(s);
        }
        self.rt
            .redeliver
            .retain(|s| self.rt.pending.contains_key(s));
        self.rt.floor_dseq = self.rt.floor_dseq.max(dseq);
        self.rt.floor_sseq = self.rt.floor_sseq.max(sseq);
        self.move_floor();
        self.dirty = true;
        covered
    }

    /// Timers: redelivery, request expiry, heartbeats. Returns whether the
    /// consumer should be deleted for inactivity.
    pub fn tick(&mut self, store: &dyn MsgStore, now: i64, out: &mut Vec<Output>) -> bool {
        if self.rt.pause_wake.is_some_and(|u| now >= u) {
            self.rt.pause_wake = None;
            // The pause ran out: told as nats-server's timer tells it.
            out.push(Output::Event(Event::Pause {
                stream: self.stream.clone(),
                consumer: self.name.clone(),
                until: self.config.pause_until,
            }));
        }
        // A pinned client that stopped pulling loses its pin.
        if let Some(pin) = self.rt.pin.take_if(|pin| now >= pin.deadline) {
            out.push(Output::Event(Event::Unpinned {
                stream: self.stream.clone(),
                consumer: self.name.clone(),
                group: pin.group,
                reason: "timeout",
            }));
        }
        // Redelivery of what waited too long for an ack.
        let mut expired: Vec<u64> = self
            .rt
            .pending
            .iter()
            .filter(|(s, p)| {
                self.redelivers()
                    && !self.rt.queued.contains(s)
                    && now >= p.ts + self.ack_wait(self.rt.rdc.get(s).copied().unwrap_or(0))
            })
            .map(|(&s, _)| s)
            .collect();
        expired.sort_unstable();
        for s in expired {
            // nats-server's delivery count here is the number of
            // redeliveries (at least 1), so only `max_deliver` 1 ends at
            // expiry; otherwise the next delivery attempt drops it.
            let dc = self
                .rt
                .rdc
                .get(&s)
                .copied()
                .filter(|&d| d >= 1)
                .unwrap_or(1);
            if self.config.max_deliver > 0 && dc >= self.config.max_deliver as u64 {
                // Delivered max_deliver times: stop trying. Not an ack:
                // the ack floor stays.
                self.max_deliveries(s, out);
                self.rt.pending.remove(&s);
                self.rt.rdc.insert(s, dc);
                self.dirty = true;
                continue;
            }
            self.rt.queued.insert(s);
            self.rt.redeliver.push_back(s);
        }
        self.expire_waiting(now, out);
        // Pull-request heartbeats.
        let pairs = self.heartbeat_headers();
        for w in self.rt.waiting.iter_mut() {
            if let Some(at) = w.next_heartbeat {
                if now >= at {
                    status(out, &w.reply, 100, "Idle Heartbeat", &pairs);
                    w.next_heartbeat = Some(now + w.heartbeat);
                }
            }
        }
        // Push idle heartbeats.
        if self.is_push() && self.rt.push_active {
            if let Some(at) = self.rt.heartbeat_at {
                if now >= at {
                    status(
                        out,
                        &self.config.deliver_subject.clone(),
                        100,
                        "Idle Heartbeat",
                        &pairs,
                    );
                    self.rt.heartbeat_at = Some(now + self.config.idle_heartbeat);
                    // Acking by flow control, a quiet consumer still asks
                    // for what was received.
                    if self.acks_by_flow_control() && !self.rt.pending.is_empty() {
                        self.request_flow_control(out);
                    }
                }
            }
        }
        let _ = store;
        self.inactive(now)
    }

    /// The headers of an idle heartbeat: the last consumer sequence
    /// delivered, the stream position scanned to, and a stalled flow
    /// control request.
    fn heartbeat_headers(&self) -> Vec<(&'static str, String)> {
        let mut pairs = vec![
            ("Nats-Last-Consumer", self.rt.dseq.to_string()),
            (
                "Nats-Last-Stream",
                self.rt.next_sseq.saturating_sub(1).to_string(),
            ),
        ];
        if let Some((fc, _)) = &self.rt.fc_pending {
            pairs.push(("Nats-Consumer-Stalled", fc.clone()));
        }
        pairs
    }

    /// How long without activity before deletion: the configured
    /// threshold, and for pull consumers the 100ms nats-server adds (its
    /// random jitter on top is left out, for determinism).
    fn inactive_after(&self) -> i64 {
        let threshold = self.config.inactive_threshold;
        if threshold > 0 && !self.is_push() {
            threshold + PULL_INACTIVE_GRACE
        } else {
            threshold
        }
    }

    fn inactive(&self, now: i64) -> bool {
        let threshold = self.inactive_after();
        if threshold <= 0 {
            return false;
        }
        if self.is_push() {
            return self.rt.inactive_since.is_some_and(|t| now - t >= threshold);
        }
        if !self.rt.waiting.is_empty() {
            return false;
        }
        now - self.rt.last_activity >= threshold
            && self
                .rt
                .pending
                .values()
                .all(|p| now >= p.ts + self.config.ack_wait + threshold)
    }

    /// The earliest time `tick` has something to do.
    pub fn next_deadline(&self) -> Option<i64> {
        let mut d: Option<i64> = None;
        let mut at = |t: i64| d = Some(d.map_or(t, |x| x.min(t)));
        for (s, p) in &self.rt.pending {
            if self.redelivers() && !self.rt.queued.contains(s) {
                at(p.ts + self.ack_wait(self.rt.rdc.get(s).copied().unwrap_or(0)));
            }
        }
        for w in &self.rt.waiting {
            if let Some(e) = w.expires {
                at(e);
            }
            if let Some(h) = w.next_heartbeat {
                at(h);
            }
        }
        if self.rt.push_active {
            if let Some(h) = self.rt.heartbeat_at {
                at(h);
            }
        }
        if let Some(r) = self.rt.replay_at {
            at(r);
        }
        if let Some(u) = self.rt.pause_wake {
            at(u);
        }
        if let Some(pin) = &self.rt.pin {
            at(pin.deadline);
        }
        if self.config.inactive_threshold > 0 {
            let base = self.rt.inactive_since.unwrap_or(self.rt.last_activity);
            at(base + self.inactive_after());
        }
        d
    }

    /// Pauses deliveries until `until` (or resumes, with `None` or a time
    /// already past).
    pub fn set_pause(&mut self, until: Option<i64>) {
        self.config.pause_until = until;
        self.rt.pause_wake = until;
        // The API level the config needs changes with it.
        self.config.metadata.insert(
            "_nats.req.level".into(),
            config::required_level(&self.config).to_string(),
        );
        self.dirty = true;
    }

    /// Sends `409 Consumer Deleted` to queued pull requests.
    pub fn on_deleted(&mut self, out: &mut Vec<Output>) {
        for w in std::mem::take(&mut self.rt.waiting) {
            status(out, &w.reply, 409, "Consumer Deleted", &[]);
        }
    }

    pub fn info(&self, now: i64) -> ConsumerInfo {
        let mut config = self.config.clone();
        if self.name_generated {
            config.name.clear();
        }
        ConsumerInfo {
            stream_name: self.stream.clone(),
            name: self.name.clone(),
            created: self.created,
            config,
            delivered: SequenceInfo {
                consumer_seq: self.rt.dseq,
                stream_seq: self.rt.delivered_sseq,
                last_active: self.rt.last_delivered,
            },
            ack_floor: SequenceInfo {
                consumer_seq: self.rt.floor_dseq,
                stream_seq: self.rt.floor_sseq,
                last_active: self.rt.last_ack,
            },
            num_ack_pending: self.rt.pending.len() as u64,
            num_redelivered: if self.config.max_deliver == 1 {
                0
            } else {
                self.rt.rdc.len() as u64
            },
            num_waiting: self.rt.waiting.len() as u64,
            num_pending: self.rt.num_pending,
            cluster: None,
            push_bound: self.is_push() && self.rt.push_active,
            paused: self.config.pause_until.is_some_and(|u| now < u),
            pause_remaining: self.config.pause_until.map_or(0, |u| (u - now).max(0)),
            ts: now,
            priority_groups: self.priority_state(),
        }
    }

    /// The first priority group's state, as nats-server reports it.
    fn priority_state(&self) -> Vec<PriorityGroupState> {
        let Some(group) = self.config.priority_groups.first() else {
            return Vec::new();
        };
        let pin = self.rt.pin.as_ref();
        vec![PriorityGroupState {
            group: group.clone(),
            pinned_client_id: pin.map(|p| p.id.clone()).unwrap_or_default(),
            pinned_ts: pin.map_or(0, |p| p.since),
        }]
    }

    /// `CONSUMER.RESET`: starts delivering again from `seq` (0: just past
    /// the ack floor), forgetting what is pending and redelivered, as
    /// nats-server's `resetStartingSeq` does. A reset may not go below a
    /// configured start; only `all`, `by_start_sequence` and
    /// `by_start_time` consumers may name a sequence. Returns it.
    pub fn reset(&mut self, seq: u64, store: &dyn MsgStore) -> Result<u64, ApiError> {
        let invalid = |why: &str| E::CONSUMER_INVALID_RESET.with("err", why);
        let seq = match (seq, self.config.deliver_policy) {
            (0, _) => self.rt.floor_sseq + 1,
            (seq, DeliverPolicy::All) => seq,
            (seq, DeliverPolicy::ByStartSequence) if seq < self.config.opt_start_seq => {
                return Err(invalid("below start seq"))
            }
            (seq, DeliverPolicy::ByStartSequence) => seq,
            (seq, DeliverPolicy::ByStartTime) => {
                if seq < store.seq_for_time(self.config.opt_start_time.unwrap_or(0)) {
                    return Err(invalid("below start time"));
                }
                seq
            }
            _ => return Err(invalid("not allowed")),
        }
        .max(1);
        let rt = &mut self.rt;
        rt.pending.clear();
        rt.rdc.clear();
        rt.redeliver.clear();
        rt.queued.clear();
        rt.lps.clear();
        rt.lps_resume = 0;
        rt.next_sseq = seq;
        rt.dseq = 0;
        rt.delivered_sseq = seq - 1;
        rt.floor_dseq = 0;
        rt.floor_sseq = seq - 1;
        rt.last_delivered = None;
        // Deliveries before the reset no longer count against flow
        // control, and a request about them goes unanswered.
        rt.fc_pending = None;
        rt.pbytes = 0;
        rt.last_ack = None;
        self.recount(store);
        self.dirty = true;
        Ok(seq)
    }

    /// The reply subjects of the pull requests waiting.
    pub fn waiting_replies(&self) -> impl Iterator<Item = &str> {
        self.rt.waiting.iter().map(|w| w.reply.as_str())
    }

    /// Forgets the waiting requests to `reply`, silently: nobody listens
    /// there any more (nats-server drops them so).
    pub fn drop_waiting(&mut self, reply: &str) {
        self.rt.waiting.retain(|w| w.reply != reply);
    }

    /// `CONSUMER.UNPIN`: the pinned client loses its pin; the next
    /// delivery pins another.
    pub fn unpin(&mut self, group: &str, out: &mut Vec<Output>) -> Result<(), ApiError> {
        if !self.config.priority_groups.iter().any(|g| g == group) {
            return Err(E::CONSUMER_INVALID_PRIORITY_GROUP.err());
        }
        self.rt.pin = None;
        // Told even when nothing was pinned, as nats-server tells it.
        out.push(Output::Event(Event::Unpinned {
            stream: self.stream.clone(),
            consumer: self.name.clone(),
            group: group.to_string(),
            reason: "admin",
        }));
        Ok(())
    }
}

/// The five numeric tokens of an ack subject (delivery count, stream seq,
/// consumer seq, timestamp, pending), unparsed:
/// `$JS.ACK.<stream>.<consumer>.<dc>.<sseq>.<dseq>.<ts>.<pending>` (v1, 9
/// tokens) or the v2 form with domain and account hash before the stream
/// (11 tokens or more). Every replica reads one per ack, so it keeps the
/// tokens on the stack.
fn ack_numbers(subject: &str) -> Option<[&str; 5]> {
    let mut tokens = [""; 11];
    let mut n = 0;
    for t in subject.split('.') {
        if let Some(slot) = tokens.get_mut(n) {
            *slot = t;
        }
        n += 1;
    }
    let base = match n {
        9 => 4,
        n if n >= 11 => 6,
        _ => return None,
    };
    let mut numbers = [""; 5];
    numbers.copy_from_slice(&tokens[base..base + 5]);
    Some(numbers)
}

/// An ack subject's (delivery count, stream seq, consumer seq).
pub fn parse_ack_subject(subject: &str) -> Option<(u64, u64, u64)> {
    let t = ack_numbers(subject)?;
    let num = |i: usize| t[i].parse::<u64>().ok();
    Some((num(0)?, num(1)?, num(2)?))
}

/// Everything a delivery's ack subject says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckInfo {
    pub delivered: u64,
    pub stream_seq: u64,
    pub consumer_seq: u64,
    pub ts: i64,
    pub pending: u64,
}

/// Reads a v1 or v2 ack subject.
pub fn ack_info(subject: &str) -> Option<AckInfo> {
    if !subject.starts_with("$JS.ACK.") {
        return None;
    }
    let t = ack_numbers(subject)?;
    let num = |i: usize| t[i].parse::<u64>().ok();
    Some(AckInfo {
        delivered: num(0)?,
        stream_seq: num(1)?,
        consumer_seq: num(2)?,
        ts: t[3].parse::<i64>().ok()?,
        pending: num(4)?,
    })
}

fn base62(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut s = Vec::new();
    loop {
        s.push(DIGITS[(n % 62) as usize]);
        n /= 62;
        if n == 0 {
            break;
        }
    }
    while s.len() < 4 {
        s.push(b'0');
    }
    s.reverse();
    String::from_utf8(s).expect("ascii")
}

fn pending_headers(batch: i64, bytes: i64) -> [(&'static str, String); 2] {
    [
        ("Nats-Pending-Messages", batch.max(0).to_string()),
        ("Nats-Pending-Bytes", bytes.max(0).to_string()),
    ]
}

fn status(out: &mut Vec<Output>, to: &str, code: u16, desc: &str, pairs: &[(&str, String)]) {
    status_with_reply(out, to, None, code, desc, pairs);
}

fn status_with_reply(
    out: &mut Vec<Output>,
    to: &str,
    reply: Option<String>,
    code: u16,
    desc: &str,
    pairs: &[(&str, String)],
) {
    let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    out.push(Output::Publish(OutMsg::status(
        to,
        reply,
        headers::build(Some((code, desc)), &pairs),
    )));
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The payloads a pull's outputs deliver to `inbox`.
    fn delivered(out: &[Output], inbox: &str) -> Vec<String> {
        out.iter()
            .filter_map(|o| match o {
                Output::Publish(m) if m.route.as_deref() == Some(inbox) => {
                    Some(String::from_utf8_lossy(&m.payload).into_owned())
                }
                _ => None,
            })
            .collect()
    }

    /// A message that does not read back holds delivery where it is:
    /// nothing after it goes out in its place, and once the store is
    /// opened again (which counts it lost) delivery goes on after it.
    #[test]
    fn an_unreadable_message_holds_delivery_instead_of_skipping() {
        use std::sync::Arc;
        use store::{Dir, FileStore, FileStoreConfig, MemDir};
        let dir = MemDir::new();
        let open = || FileStore::open(Arc::new(dir.clone()), FileStoreConfig::default()).unwrap();
        let mut store = open();
        for i in 1..=10 {
            let payload = format!("payload-{i:02}");
            store.store("s", None, payload.as_bytes(), i).unwrap();
        }
        store.sync_handle().expect("writes to sync").sync().unwrap();
        let segment = &dir.names()[0];
        let bytes = dir.read_all(segment).unwrap();
        let at = bytes.windows(10).position(|w| w == b"payload-05").unwrap();
        dir.flip_bit(segment, at + 8, 1);

        let config = ConsumerConfig {
            ack_policy: AckPolicy::None,
            ..Default::default()
        };
        let mut consumer = Consumer::new("S", config, 0, &store, 0);
        let pull = PullRequest {
            batch: 10,
            expires: 60_000_000_000,
            ..Default::default()
        };
        let mut out = Vec::new();
        consumer.pull(pull.clone(), "inbox", &store, 1, &mut out);
        let want: Vec<String> = (1..=4).map(|i| format!("payload-{i:02}")).collect();
        assert_eq!(delivered(&out, "inbox"), want);
        assert!(store.damage().is_some());

        let store = open();
        assert_eq!(store.state().lost, vec![5]);
        out.clear();
        consumer.pump(&store, 2, &mut out);
        let want: Vec<String> = (6..=10).map(|i| format!("payload-{i:02}")).collect();
        assert_eq!(delivered(&out, "inbox"), want);
    }

    #[test]
    fn ack_subjects_v1_and_v2() {
        let v1 = "$JS.ACK.S.C.2.10.7.1700000000000000000.3";
        assert_eq!(parse_ack_subject(v1), Some((2, 10, 7)));
        assert_eq!(
            ack_info(v1),
            Some(AckInfo {
                delivered: 2,
                stream_seq: 10,
                consumer_seq: 7,
                ts: 1_700_000_000_000_000_000,
                pending: 3,
            })
        );
        // v2: domain and account hash first; a trailing token may follow.
        let v2 = "$JS.ACK.hub.ACCHASH.S.C.1.5.4.17.0";
        let v2_more = "$JS.ACK.hub.ACCHASH.S.C.1.5.4.17.0.rand";
        for s in [v2, v2_more] {
            assert_eq!(parse_ack_subject(s), Some((1, 5, 4)), "{s}");
            assert_eq!(ack_info(s).map(|a| (a.ts, a.pending)), Some((17, 0)));
        }
    }

    #[test]
    fn ack_subjects_that_do_not_parse() {
        for s in [
            "$JS.ACK.S.C.2.10.7.17",     // 8 tokens
            "$JS.ACK.x.S.C.2.10.7.17.3", // 10 tokens
            "$JS.ACK.S.C.2.ten.7.17.3",  // not a number
            "$JS.ACK.S.C.-2.10.7.17.3",  // negative count
            "",
        ] {
            assert_eq!(parse_ack_subject(s), None, "{s}");
            assert_eq!(ack_info(s), None, "{s}");
        }
        // The numbers are all a sequence needs; the rest is ack_info's.
        let bad_tail = "$JS.ACK.S.C.2.10.7.soon.3";
        assert_eq!(parse_ack_subject(bad_tail), Some((2, 10, 7)));
        assert_eq!(ack_info(bad_tail), None);
        let not_ack = "$JS.NAK.S.C.2.10.7.17.3";
        assert_eq!(parse_ack_subject(not_ack), Some((2, 10, 7)));
        assert_eq!(ack_info(not_ack), None);
    }
}
