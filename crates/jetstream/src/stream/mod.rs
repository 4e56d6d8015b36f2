//! A stream as a state machine over its message store: publish checks
//! (expected headers, duplicates, rollups, TTLs, limits), retention,
//! purge and message operations, and its consumers.
//!
//! The driver feeds it inputs with the current time, makes the store's
//! writes durable, then sends what `take_outputs` returns and the replies
//! the methods returned. Nothing here reads a clock or touches a socket.
//!
//! Invariants:
//! - A message id is in the duplicate window only if a message carrying
//!   it was stored (or skipped for no interest) within the window.
//! - After every operation the store is within the configured limits.
//! - With interest or work-queue retention, a message leaves the stream
//!   exactly when no consumer needs it; every replica applying the same
//!   inputs removes the same messages.

pub mod batch;
pub mod config;
pub mod counter;
mod cron;
mod dedupe;
pub mod fast_batch;
mod publish;
pub mod schedule;
mod sourcing;

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine;
use bytes::Bytes;
use store::{Filter, MsgStore, Purge, StoreError, StoredMsg};

use crate::api::{
    self, ApiError, ConsumerAction, ConsumerConfig, ConsumerInfo, CreateConsumerRequest, LostData,
    MsgGetRequest, PullRequest, PurgeRequest, Retention, Storage, StoredMessage, StreamConfig,
    StreamInfo, StreamState, E,
};
use crate::consumer::{self, Consumer, ConsumerState};
use crate::headers;
use crate::output::{OutMsg, Output};
use crate::transform::Transform;
use dedupe::Dedupe;
use jsapi::advisory::{Action, Event};
pub use sourcing::{SourceSpec, Sourced, MIRROR};

/// Largest header block accepted, as nats-server.
const MAX_HEADER: usize = 65535;
/// Removals done per tick, so expiry of a huge backlog stays incremental.
const EXPIRE_BATCH: usize = 10_000;
const SEC: i64 = 1_000_000_000;

/// The answer to a publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PubAck {
    Stored(u64),
    /// Stored in a counter stream: the counter's value after it.
    Counted(u64, String),
    /// Staged in an atomic batch: an empty reply.
    Staged,
    /// An atomic batch stored: its last sequence, id and size.
    Batched {
        seq: u64,
        batch: String,
        count: u64,
    },
    Duplicate(u64),
    Error(ApiError),
}

impl PubAck {
    /// The exact bytes nats-server sends.
    pub fn encode(&self, stream: &str) -> Bytes {
        let name = String::from_utf8(crate::api::gojson::to_vec(stream)).expect("JSON is UTF-8");
        let s = match self {
            PubAck::Stored(seq) => format!("{{\"stream\":{name},\"seq\":{seq}}}"),
            PubAck::Staged => String::new(),
            PubAck::Batched { seq, batch, count } => {
                let batch =
                    String::from_utf8(crate::api::gojson::to_vec(batch)).expect("JSON is UTF-8");
                format!("{{\"stream\":{name},\"seq\":{seq},\"batch\":{batch},\"count\":{count}}}")
            }
            PubAck::Counted(seq, value) => {
                format!("{{\"stream\":{name},\"seq\":{seq},\"val\":\"{value}\"}}")
            }
            PubAck::Duplicate(seq) => {
                format!("{{\"stream\":{name},\"seq\":{seq},\"duplicate\": true}}")
            }
            PubAck::Error(e) => format!(
                "{{\"error\":{},\"stream\":{name},\"seq\":0}}",
                String::from_utf8(crate::api::gojson::to_vec(e)).expect("JSON is UTF-8")
            ),
        };
        Bytes::from(s)
    }
}

/// Header name/value pairs to add to a message.
type HeaderPairs<'a> = &'a [(&'a str, &'a str)];

/// An `Nats-Expected-*` header; an empty value expects nothing, as in
/// nats-server.
fn expectation<'a>(h: &'a [u8], name: &str) -> Option<&'a str> {
    headers::get(h, name).filter(|v| !v.is_empty())
}

/// A message published to one of the stream's subjects.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    pub subject: &'a str,
    pub headers: Option<&'a [u8]>,
    pub payload: &'a [u8],
}

pub struct Stream {
    pub config: StreamConfig,
    pub created: i64,
    store: Box<dyn MsgStore>,
    dedupe: Dedupe,
    last_msg_id: String,
    consumers: BTreeMap<String, Consumer>,
    input_transform: Option<Transform>,
    republish: Option<Transform>,
    /// Per-message TTL expiry: (expires at, seq).
    ttl: BTreeSet<(i64, u64)>,
    /// Messages with `Nats-TTL: never`, exempt from max_age.
    never: BTreeSet<u64>,
    out: Vec<Output>,
    pump_due: bool,
    /// Consumers created or deleted since the driver last looked.
    consumers_changed: bool,
    /// The config changed since the driver last looked (a new stream
    /// starts changed: its driver has not seen its config).
    config_changed: bool,
    /// Mirror and sources, by key.
    sources: BTreeMap<String, sourcing::Source>,
    /// Atomic batches being staged.
    batches: batch::Batches,
    /// Live message schedules and when each is due.
    schedules: schedule::Schedules,
}

fn store_err(e: StoreError) -> ApiError {
    match e {
        StoreError::TooLarge(_) => E::STREAM_STORE_FAILED.with("err", "message too large"),
        other => E::STREAM_STORE_FAILED.with("err", other),
    }
}

/// `Nats-TTL` in nanoseconds: `-1` for `never`, else at least a second.
fn parse_ttl(v: &str) -> Result<i64, ()> {
    if v.eq_ignore_ascii_case("never") {
        return Ok(-1);
    }
    let d = match crate::duration::parse(v) {
        Ok(d) => d,
        Err(_) => match v.parse::<u64>() {
            Ok(secs) => crate::duration::from_secs(secs as f64, v).map_err(|_| ())?,
            Err(_) => return Err(()),
        },
    };
    if d.as_nanos() < SEC as u128 {
        return Err(());
    }
    Ok(d.as_nanos() as i64)
}

impl Stream {
    /// A new stream over an empty store; `config` must be checked.
    pub fn create(
        config: StreamConfig,
        created: i64,
        mut store: Box<dyn MsgStore>,
    ) -> Result<Self, ApiError> {
        if config.first_seq > 1 && store.state().last_seq == 0 {
            store.reset_to(config.first_seq).map_err(store_err)?;
        }
        Ok(Stream::with_store(config, created, store))
    }

    fn with_store(config: StreamConfig, created: i64, store: Box<dyn MsgStore>) -> Self {
        let mut s = Stream {
            input_transform: None,
            republish: None,
            config,
            created,
            store,
            dedupe: Dedupe::default(),
            last_msg_id: String::new(),
            consumers: BTreeMap::new(),
            ttl: BTreeSet::new(),
            never: BTreeSet::new(),
            out: Vec::new(),
            pump_due: false,
            consumers_changed: false,
            config_changed: true,
            sources: BTreeMap::new(),
            batches: batch::Batches::default(),
            schedules: schedule::Schedules::default(),
        };
        s.compile_transforms();
        s.rebuild_sources();
        s
    }

    /// A stream reopened over a recovered store: rebuilds the duplicate
    /// window, the last message id and the TTL index from the messages.
    pub fn recover(config: StreamConfig, created: i64, store: Box<dyn MsgStore>, now: i64) -> Self {
        let mut s = Stream::with_store(config, created, store);
        let st = s.store.state();
        let window_start = now - s.config.duplicate_window;
        let scan_ttl = s.config.allow_msg_ttl;
        let scan_schedules = s.config.allow_msg_schedules;
        let mut seq = if scan_ttl || scan_schedules {
            st.first_seq
        } else {
            s.store.seq_for_time(window_start)
        };
        while let Ok(Some(m)) = s.store.next_with_headers(seq) {
            seq = m.seq + 1;
            if scan_schedules {
                s.track_schedule(m.seq, &m.subject, m.headers.as_deref(), m.ts);
            }
            let Some(h) = m.headers.as_deref() else {
                continue;
            };
            if m.ts > window_start && s.config.duplicate_window > 0 {
                if let Some(id) = headers::get(h, headers::MSG_ID) {
                    s.dedupe.insert(id, m.seq, m.ts);
                }
            }
            if scan_ttl {
                s.index_ttl(m.seq, m.ts, h);
            }
        }
        if let Ok(Some(last)) = s.store.get(st.last_seq) {
            s.last_msg_id = last
                .headers
                .as_deref()
                .and_then(|h| headers::get(h, headers::MSG_ID))
                .unwrap_or("")
                .to_string();
        }
        s
    }

    fn compile_transforms(&mut self) {
        self.input_transform = self
            .config
            .subject_transform
            .as_ref()
            .and_then(|t| Transform::new(&t.src, &t.dest).ok());
        self.republish = self
            .config
            .republish
            .as_ref()
            .and_then(|r| Transform::new(&r.src, &r.dest).ok());
    }

    fn index_ttl(&mut self, seq: u64, ts: i64, h: &[u8]) {
        if let Some(v) = headers::get(h, headers::TTL) {
            match parse_ttl(v) {
                Ok(-1) => {
                    self.never.insert(seq);
                }
                Ok(ttl) => {
                    self.ttl.insert((ts + ttl, seq));
                }
                Err(()) => {}
            }
        }
    }

    pub fn store(&self) -> &dyn MsgStore {
        self.store.as_ref()
    }

    pub fn store_mut(&mut self) -> &mut dyn MsgStore {
        self.store.as_mut()
    }

    /// The store, the stream given up (a replica hands it to catch-up).
    pub fn into_store(self) -> Box<dyn MsgStore> {
        self.store
    }

    pub fn take_outputs(&mut self) -> Vec<Output> {
        std::mem::take(&mut self.out)
    }

    /// Stores a published message, or says why not.
    pub fn publish(&mut self, msg: Incoming<'_>, now: i64) -> PubAck {
        let batch_id = msg
            .headers
            .and_then(|h| headers::get(h, batch::BATCH_ID))
            .filter(|id| !id.is_empty());
        if let Some(id) = batch_id {
            return self.batch_publish(id, msg, now);
        }
        match self.try_publish(msg, now, false) {
            Ok(ack) => ack,
            Err(e) => PubAck::Error(e),
        }
    }

    /// A message from a source, already tagged: published without the
    /// stream's own subject transform.
    fn publish_sourced(
        &mut self,
        subject: &str,
        headers: &[u8],
        payload: &[u8],
        now: i64,
    ) -> PubAck {
        let msg = Incoming {
            subject,
            headers: Some(headers),
            payload,
        };
        match self.try_publish(msg, now, true) {
            Ok(ack) => ack,
            Err(e) => PubAck::Error(e),
        }
    }

    fn try_publish(
        &mut self,
        msg: Incoming<'_>,
        now: i64,
        sourced: bool,
    ) -> Result<PubAck, ApiError> {
        if self.config.duplicate_window > 0 {
            self.dedupe.expire(now - self.config.duplicate_window);
        }
        match self.check(msg, sourced, None, now)? {
            Ok(checked) => self.store_checked(checked, now),
            Err(seq) => Ok(PubAck::Duplicate(seq)),
        }
    }

    fn remember_id(&mut self, id: Option<&str>, seq: u64, now: i64) {
        self.last_msg_id = id.unwrap_or("").to_string();
        if let Some(id) = id {
            if self.config.duplicate_window > 0 {
                self.dedupe.insert(id, seq, now);
            }
        }
    }

    fn remove(&mut self, seq: u64, erase: bool) -> Result<bool, ApiError> {
        let subject = match self.store.get(seq).map_err(store_err)? {
            Some(m) => m.subject,
            None => return Ok(false),
        };
        let removed = self.store.remove(seq, erase).map_err(store_err)?;
        if removed {
            for c in self.consumers.values_mut() {
                c.on_removed(seq, &subject);
            }
            self.never.remove(&seq);
            self.schedules.remove_seq(seq);
        }
        Ok(removed)
    }

    /// Drops the oldest messages until the limits hold.
    fn enforce_limits(&mut self, subject: &str) -> Result<(), ApiError> {
        let (per_subject, max_msgs, max_bytes) = (
            self.config.max_msgs_per_subject,
            self.config.max_msgs,
            self.config.max_bytes,
        );
        if per_subject > 0 {
            while let Some(st) = self.store.subject_state(subject) {
                if st.msgs as i64 <= per_subject {
                    break;
                }
                if !self.remove(st.first, false)? {
                    break;
                }
            }
        }
        loop {
            let st = self.store.state();
            let over = (max_msgs > 0 && st.msgs as i64 > max_msgs)
                || (max_bytes > 0 && st.bytes > max_bytes as u64);
            if !over || st.msgs == 0 {
                break;
            }
            if !self.remove(st.first_seq, false)? {
                break;
            }
        }
        Ok(())
    }

    fn republish(&mut self, seq: u64, subject: &str, h: Option<&[u8]>, payload: &[u8], now: i64) {
        let Some(t) = &self.republish else { return };
        let Some(dest) = t.apply(subject) else { return };
        let headers_only = self
            .config
            .republish
            .as_ref()
            .is_some_and(|r| r.headers_only);
        let prev = self.previous_on_subject(subject, seq);
        let mut pairs: Vec<(&str, String)> = vec![
            ("Nats-Stream", self.config.name.clone()),
            ("Nats-Subject", subject.to_string()),
            ("Nats-Sequence", seq.to_string()),
            ("Nats-Time-Stamp", api::time::rfc3339(now)),
            ("Nats-Last-Sequence", prev.to_string()),
        ];
        if headers_only {
            pairs.push(("Nats-Msg-Size", payload.len().to_string()));
        }
        let pairs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.out.push(Output::Publish(OutMsg {
            subject: dest,
            route: None,
            reply: None,
            headers: Some(headers::append(h, &pairs)),
            payload: if headers_only {
                Bytes::new()
            } else {
                Bytes::copy_from_slice(payload)
            },
        }));
    }

    fn previous_on_subject(&self, subject: &str, seq: u64) -> u64 {
        let Some(st) = self.store.subject_state(subject) else {
            return 0;
        };
        if st.first >= seq {
            return 0;
        }
        let mut prev = 0;
        let mut at = st.first;
        while let Ok(Some(m)) = self.store.next_matching(at, &Filter::one(subject)) {
            if m.seq >= seq {
                break;
            }
            prev = m.seq;
            at = m.seq + 1;
        }
        prev
    }

    /// Applies a new configuration (already checked against the old).
    pub fn update(&mut self, config: StreamConfig) -> Result<(), ApiError> {
        config::check_consumer_limits(
            &self.config,
            &config,
            self.consumers
                .iter()
                .map(|(name, c)| (name.as_str(), &c.config)),
        )?;
        if !config.allow_atomic {
            self.batches.clear();
        }
        if !config.allow_batched {
            self.batches.clear_fast();
        }
        let to_interest =
            self.config.retention == Retention::Limits && config.retention != Retention::Limits;
        self.config = config;
        self.config_changed = true;
        if to_interest {
            // Messages kept under limits now need interest: with no
            // consumers nothing wants them; otherwise acked ones go.
            if self.consumers.is_empty() {
                self.purge_inner(&Purge {
                    filter: None,
                    seq: None,
                    keep: None,
                })?;
            } else {
                self.reconcile()?;
            }
        }
        self.compile_transforms();
        self.rebuild_sources();
        let subjects: Vec<String> = self
            .store
            .subjects_totals(&Filter::all())
            .into_keys()
            .collect();
        for s in subjects {
            self.enforce_limits(&s)?;
        }
        self.enforce_limits("")?;
        Ok(())
    }

    fn state(&self, deleted_details: bool) -> StreamState {
        let st = self.store.state();
        let lost = (!st.lost.is_empty()).then(|| LostData {
            msgs: st.lost.clone(),
            bytes: st.lost_bytes,
        });
        StreamState {
            messages: st.msgs,
            bytes: st.bytes,
            first_seq: if st.last_seq == 0 && st.msgs == 0 {
                0
            } else {
                st.first_seq
            },
            first_ts: st.first_ts,
            last_seq: st.last_seq,
            last_ts: st.last_ts,
            num_subjects: st.num_subjects,
            subjects: BTreeMap::new(),
            num_deleted: st.num_deleted,
            deleted: if deleted_details {
                self.store.deleted()
            } else {
                Vec::new()
            },
            lost,
            consumer_count: self.consumers.values().filter(|c| !c.config.direct).count() as u64,
        }
    }

    pub fn info(&self, now: i64, deleted_details: bool, subjects_filter: &str) -> StreamInfo {
        let mut state = self.state(deleted_details);
        if !subjects_filter.is_empty() {
            state.subjects = self.store.subjects_totals(&Filter::one(subjects_filter));
        }
        let (mirror, sources) = self.source_infos(now);
        StreamInfo {
            config: self.config.clone(),
            created: self.created,
            state,
            cluster: None,
            mirror,
            sources,
            ts: now,
        }
    }

    /// Subject counts matching `filter`, for paged STREAM.INFO.
    pub fn subjects_totals(&self, filter: &str) -> BTreeMap<String, u64> {
        self.store.subjects_totals(&Filter::one(filter))
    }

    /// Whether the stream's config lets it be purged (sealed, deny_purge).
    pub fn check_purge(&self) -> Result<(), ApiError> {
        if self.config.sealed {
            return Err(E::STREAM_SEALED.err());
        }
        if self.config.deny_purge {
            return Err(E::STREAM_PURGE_FAILED.with("err", "stream purge not permitted"));
        }
        Ok(())
    }

    /// Whether the stream's config lets messages be deleted (sealed,
    /// deny_delete).
    pub fn check_delete(&self) -> Result<(), ApiError> {
        if self.config.sealed {
            return Err(E::STREAM_SEALED.err());
        }
        if self.config.deny_delete {
            return Err(E::STREAM_MSG_DELETE_FAILED.with("err", "message delete not permitted"));
        }
        Ok(())
    }

    pub fn purge(&mut self, req: &PurgeRequest) -> Result<u64, ApiError> {
        if req.seq > 0 && req.keep > 0 {
            return Err(E::BAD_REQUEST.err());
        }
        self.check_purge()?;
        let p = Purge {
            filter: (!req.filter.is_empty()).then(|| req.filter.clone()),
            seq: (req.seq > 0).then_some(req.seq),
            keep: (req.keep > 0).then_some(req.keep),
        };
        self.purge_inner(&p)
            .map_err(|e| E::STREAM_PURGE_FAILED.with("err", e.description))
    }

    fn purge_inner(&mut self, p: &Purge) -> Result<u64, ApiError> {
        let n = self.store.purge(p).map_err(store_err)?;
        let first = self.store.state().first_seq;
        self.never.retain(|&s| s >= first);
        for c in self.consumers.values_mut() {
            c.on_purged(self.store.as_ref());
        }
        Ok(n)
    }

    pub fn delete_msg(&mut self, seq: u64, erase: bool) -> Result<(), ApiError> {
        self.check_delete()?;
        if self.config.storage == Storage::File {
            // nats-server's file store fails these outright, where its
            // memory store only reports the sequence missing.
            let st = self.store.state();
            if seq == 0 || seq < st.first_seq {
                return Err(E::STREAM_MSG_DELETE_FAILED.with("err", "no message found"));
            }
            if seq > st.last_seq {
                return Err(E::STREAM_MSG_DELETE_FAILED.with("err", "stream store EOF"));
            }
        }
        if self.remove(seq, erase)? {
            Ok(())
        } else {
            Err(E::SEQUENCE_NOT_FOUND.with("seq", seq))
        }
    }

    /// The message a MSG.GET or DIRECT.GET asks for.
    pub fn lookup(&self, req: &MsgGetRequest) -> Option<StoredMsg> {
        let start = match req.start_time {
            Some(t) => self.store.seq_for_time(t),
            None => req.seq,
        };
        if !req.next_by_subj.is_empty() {
            return self
                .store
                .next_matching(start, &Filter::one(&req.next_by_subj))
                .ok()
                .flatten();
        }
        if req.seq > 0 || req.start_time.is_some() {
            if req.start_time.is_some() {
                return self
                    .store
                    .next_matching(start, &Filter::all())
                    .ok()
                    .flatten();
            }
            return self.store.get(start).ok().flatten();
        }
        if !req.last_by_subj.is_empty() {
            return self
                .store
                .last_matching(&Filter::one(&req.last_by_subj))
                .ok()
                .flatten();
        }
        None
    }

    /// MSG.GET: the JSON form of a stored message.
    pub fn get_msg(&self, req: &MsgGetRequest) -> Result<StoredMessage, ApiError> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let m = self.lookup(req).ok_or_else(|| E::NO_MESSAGE_FOUND.err())?;
        Ok(StoredMessage {
            subject: m.subject.clone(),
            seq: m.seq,
            hdrs: if req.no_hdr {
                None
            } else {
                m.headers.as_ref().map(|h| b64.encode(h))
            },
            data: (!m.payload.is_empty()).then(|| b64.encode(&m.payload)),
            time: m.ts,
        })
    }

    /// DIRECT.GET: the message itself with stream headers added, or a
    /// status (404) message.
    pub fn direct_get(&self, req: &MsgGetRequest, reply: &str) -> Vec<OutMsg> {
        let status = |code, desc: &str, pairs: &[(&str, &str)]| OutMsg {
            subject: reply.to_string(),
            route: None,
            reply: None,
            headers: Some(headers::build(Some((code, desc)), pairs)),
            payload: Bytes::new(),
        };
        let wrap = |m: &StoredMsg, extra: &[(&str, &str)]| {
            let seq = m.seq.to_string();
            let ts = api::time::rfc3339(m.ts);
            let mut pairs = vec![
                ("Nats-Stream", self.config.name.as_str()),
                ("Nats-Subject", m.subject.as_str()),
                ("Nats-Sequence", seq.as_str()),
                ("Nats-Time-Stamp", ts.as_str()),
            ];
            pairs.extend_from_slice(extra);
            OutMsg {
                subject: reply.to_string(),
                route: None,
                reply: None,
                headers: if req.no_hdr {
                    None
                } else {
                    Some(headers::append(m.headers.as_deref(), &pairs))
                },
                payload: m.payload.clone(),
            }
        };
        if !req.multi_last.is_empty() {
            return self.direct_multi_last(req, &status, &wrap);
        }
        if req.batch > 0 {
            let filter = if req.next_by_subj.is_empty() {
                Filter::all()
            } else {
                Filter::one(&req.next_by_subj)
            };
            let mut seq = match req.start_time {
                Some(t) => self.store.seq_for_time(t),
                None => req.seq,
            };
            let mut out = Vec::new();
            let mut prev = 0u64;
            let mut bytes = 0i64;
            while (out.len() as i64) < req.batch {
                let Some(m) = self.store.next_matching(seq, &filter).ok().flatten() else {
                    break;
                };
                seq = m.seq + 1;
                let left = self.store.num_pending(seq, &filter, false).to_string();
                let p = prev.to_string();
                bytes += (m.subject.len()
                    + m.headers.as_ref().map_or(0, |h| h.len())
                    + m.payload.len()) as i64;
                out.push(wrap(
                    &m,
                    &[("Nats-Num-Pending", &left), ("Nats-Last-Sequence", &p)],
                ));
                prev = m.seq;
                if req.max_bytes > 0 && bytes >= req.max_bytes {
                    break;
                }
            }
            if out.is_empty() {
                return vec![status(404, "Message Not Found", &[])];
            }
            let left = self.store.num_pending(seq, &filter, false).to_string();
            let p = prev.to_string();
            out.push(status(
                204,
                "EOB",
                &[("Nats-Num-Pending", &left), ("Nats-Last-Sequence", &p)],
            ));
            return out;
        }
        match self.lookup(req) {
            Some(m) => vec![wrap(&m, &[])],
            None => vec![status(404, "Message Not Found", &[])],
        }
    }

    /// DIRECT.GET with `multi_last`: the newest message of each subject
    /// matching the filters, at or before `up_to_seq` (or `up_to_time`),
    /// in sequence order, then an EOB naming where the lookup stopped.
    fn direct_multi_last(
        &self,
        req: &MsgGetRequest,
        status: &dyn Fn(u16, &str, HeaderPairs) -> OutMsg,
        wrap: &dyn Fn(&StoredMsg, HeaderPairs) -> OutMsg,
    ) -> Vec<OutMsg> {
        /// nats-server refuses lookups that would answer with more.
        const MAX_RESPONSES: usize = 1024;
        let st = self.store.state();
        let mut up_to = req.up_to_seq;
        if let Some(t) = req.up_to_time {
            let seq = self.store.seq_for_time(t);
            if seq <= st.first_seq {
                return vec![status(404, "No Results", &[])];
            }
            up_to = seq - 1;
        }
        if up_to == 0 {
            up_to = st.last_seq;
        }
        let filter = Filter::new(req.multi_last.iter().map(String::as_str));
        let mut seqs = Vec::new();
        for (subject, _) in self.store.subjects_totals(&filter) {
            let Some(ss) = self.store.subject_state(&subject) else {
                continue;
            };
            let last = if ss.last <= up_to {
                Some(ss.last)
            } else {
                // Walk the subject up to the bound.
                let one = Filter::one(&subject);
                let mut found = None;
                let mut at = ss.first;
                while let Ok(Some(m)) = self.store.next_matching(at, &one) {
                    if m.seq > up_to {
                        break;
                    }
                    found = Some(m.seq);
                    at = m.seq + 1;
                }
                found
            };
            if let Some(seq) = last.filter(|&s| s >= req.seq) {
                seqs.push(seq);
            }
        }
        if seqs.len() > MAX_RESPONSES {
            return vec![status(413, "Too Many Results", &[])];
        }
        if seqs.is_empty() {
            return vec![status(404, "No Results", &[])];
        }
        seqs.sort_unstable();
        let mut out = Vec::new();
        let mut prev = 0u64;
        let mut bytes = 0i64;
        let mut sent = 0usize;
        for (i, &seq) in seqs.iter().enumerate() {
            let Ok(Some(m)) = self.store.get(seq) else {
                continue;
            };
            let left = (seqs.len() - i - 1).to_string();
            let p = prev.to_string();
            out.push(wrap(
                &m,
                &[("Nats-Num-Pending", &left), ("Nats-Last-Sequence", &p)],
            ));
            prev = seq;
            sent += 1;
            bytes += (m.subject.len() + m.headers.as_ref().map_or(0, |h| h.len()) + m.payload.len())
                as i64;
            if (req.max_bytes > 0 && bytes >= req.max_bytes)
                || (req.batch > 0 && sent as i64 >= req.batch)
            {
                break;
            }
        }
        let left = (seqs.len() - sent).to_string();
        let p = prev.to_string();
        let u = up_to.to_string();
        out.push(status(
            204,
            "EOB",
            &[
                ("Nats-Num-Pending", &left),
                ("Nats-Last-Sequence", &p),
                ("Nats-UpTo-Sequence", &u),
            ],
        ));
        out
    }

    /// Expiry by age and per-message TTL, then consumer timers. Call with
    /// the current time whenever `next_deadline` has passed.
    pub fn tick(&mut self, now: i64) -> Result<(), ApiError> {
        self.batches.expire(now);
        self.fire_schedules(now);
        if self.config.duplicate_window > 0 {
            self.dedupe.expire(now - self.config.duplicate_window);
        }
        let mut expired: Vec<(u64, bool)> = Vec::new();
        while let Some(&(at, seq)) = self.ttl.iter().next() {
            if at > now || expired.len() >= EXPIRE_BATCH {
                break;
            }
            self.ttl.remove(&(at, seq));
            expired.push((seq, true));
        }
        if self.config.max_age > 0 {
            for seq in self.store.expired(now - self.config.max_age, EXPIRE_BATCH) {
                if !self.never.contains(&seq) {
                    expired.push((seq, false));
                }
            }
        }
        for (seq, by_ttl) in expired {
            self.expire_one(seq, by_ttl, now)?;
        }
        let names: Vec<String> = self.consumers.keys().cloned().collect();
        let mut gone = Vec::new();
        for name in names {
            let c = self.consumers.get_mut(&name).expect("listed");
            if c.tick(self.store.as_ref(), now, &mut self.out) {
                gone.push(name);
            }
        }
        for name in gone {
            self.delete_consumer(&name)?;
            self.out.push(Output::ConsumerDeleted(name));
        }
        self.pump_due = true;
        Ok(())
    }

    /// Removes an expired message; the last of its subject leaves a delete
    /// marker when the stream asks for them (KV `limit_markers`).
    fn expire_one(&mut self, seq: u64, by_ttl: bool, now: i64) -> Result<(), ApiError> {
        let Some(m) = self.store.get(seq).map_err(store_err)? else {
            return Ok(());
        };
        let is_marker = m
            .headers
            .as_deref()
            .and_then(|h| headers::get(h, headers::MARKER_REASON))
            .is_some();
        self.remove(seq, false)?;
        let marker_ttl = self.config.subject_delete_marker_ttl;
        if marker_ttl > 0 && !is_marker && self.store.subject_state(&m.subject).is_none() {
            let ttl = crate::duration::format(std::time::Duration::from_nanos(marker_ttl as u64));
            let _ = by_ttl;
            let h = headers::build(
                None,
                &[
                    (headers::MARKER_REASON, "MaxAge"),
                    (headers::TTL, &ttl),
                    (headers::ROLLUP, "sub"),
                ],
            );
            let seq = self
                .store
                .store(&m.subject, Some(&h), &[], now)
                .map_err(store_err)?;
            self.ttl.insert((now + marker_ttl, seq));
            for c in self.consumers.values_mut() {
                c.on_stored(seq, &m.subject);
            }
        }
        Ok(())
    }

    /// The earliest time `tick` has work.
    pub fn next_deadline(&self) -> Option<i64> {
        let mut d: Option<i64> = None;
        let mut at = |t: i64| d = Some(d.map_or(t, |x| x.min(t)));
        if let Some(&(t, _)) = self.ttl.iter().next() {
            at(t);
        }
        if self.config.max_age > 0 {
            let st = self.store.state();
            if st.msgs > 0 {
                at(st.first_ts + self.config.max_age);
            }
        }
        if let Some(t) = self.dedupe.oldest() {
            at(t + self.config.duplicate_window);
        }
        if let Some(t) = self.batches.next_deadline() {
            at(t);
        }
        if let Some(t) = self.schedules.next_deadline() {
            at(t);
        }
        for c in self.consumers.values() {
            if let Some(t) = c.next_deadline() {
                at(t);
            }
        }
        d
    }

    /// Lets consumers deliver what arrived. Cheap when nothing did.
    pub fn pump(&mut self, now: i64) -> Result<(), ApiError> {
        if !std::mem::take(&mut self.pump_due) {
            return Ok(());
        }
        let names: Vec<String> = self.consumers.keys().cloned().collect();
        let mut done = Vec::new();
        for name in names {
            let c = self.consumers.get_mut(&name).expect("listed");
            done.extend(c.pump(self.store.as_ref(), now, &mut self.out));
        }
        self.retire(done)
    }

    /// Removes messages no consumer needs any more (interest and work-queue
    /// retention).
    fn retire(&mut self, mut seqs: Vec<u64>) -> Result<(), ApiError> {
        if self.config.retention == Retention::Limits || seqs.is_empty() {
            return Ok(());
        }
        seqs.sort_unstable();
        seqs.dedup();
        for seq in seqs {
            let Some(m) = self.store.get(seq).map_err(store_err)? else {
                continue;
            };
            if !self.consumers.values().any(|c| c.needs(seq, &m.subject)) {
                self.remove(seq, false)?;
            }
        }
        Ok(())
    }

    /// After a restart, removes what no consumer needs any more (interest
    /// and work-queue retention): a crash can land between an ack becoming
    /// durable and the removal it caused.
    pub fn reconcile(&mut self) -> Result<(), ApiError> {
        if self.config.retention == Retention::Limits || self.consumers.is_empty() {
            return Ok(());
        }
        let st = self.store.state();
        let upto = self
            .consumers
            .values()
            .map(|c| c.state().delivered_sseq)
            .max()
            .unwrap_or(0)
            .min(st.last_seq);
        let mut seqs = Vec::new();
        let mut seq = st.first_seq;
        while seq <= upto {
            match self.store.next_matching(seq, &Filter::all()) {
                Ok(Some(m)) if m.seq <= upto => {
                    seqs.push(m.seq);
                    seq = m.seq + 1;
                }
                _ => break,
            }
        }
        self.retire(seqs)
    }

    // ---- consumers ----

    /// Consumers clients see: internal ones feeding other streams'
    /// sources are left out, as nats-server leaves out direct consumers.
    pub fn consumer_names(&self) -> Vec<String> {
        self.consumers
            .iter()
            .filter(|(_, c)| !c.config.direct)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Every consumer, internal ones included.
    pub fn all_consumer_names(&self) -> Vec<String> {
        self.consumers.keys().cloned().collect()
    }

    pub fn consumer(&self, name: &str) -> Option<&Consumer> {
        self.consumers.get(name)
    }

    pub fn consumer_info(&self, name: &str, now: i64) -> Result<ConsumerInfo, ApiError> {
        self.consumers
            .get(name)
            .map(|c| c.info(now))
            .ok_or_else(|| E::CONSUMER_NOT_FOUND.err())
    }

    /// Consumers whose persisted state is behind, with that state.
    pub fn dirty_consumers(&mut self) -> Vec<(String, ConsumerState)> {
        self.consumers
            .iter_mut()
            .filter_map(|(n, c)| c.take_dirty().then(|| (n.clone(), c.state())))
            .collect()
    }

    /// Whether consumers were created or deleted since last asked.
    pub fn take_consumers_changed(&mut self) -> bool {
        std::mem::take(&mut self.consumers_changed)
    }

    /// Whether the config changed since [`Stream::take_config_changed`]
    /// was last called (or since the stream was made).
    pub fn config_changed(&self) -> bool {
        self.config_changed
    }

    /// Like [`Stream::config_changed`], and marks the change seen.
    pub fn take_config_changed(&mut self) -> bool {
        std::mem::take(&mut self.config_changed)
    }

    /// How many consumers a user sees (`consumer_names().len()`, without
    /// building the names).
    pub fn consumer_count(&self) -> usize {
        self.consumers.values().filter(|c| !c.config.direct).count()
    }

    /// Creates (or updates) a consumer from an API request, asked `via`
    /// a subject that may name it and its filter, within the `account`'s
    /// limits.
    pub fn add_consumer(
        &mut self,
        mut req: CreateConsumerRequest,
        via: consumer::Via<'_>,
        generated_name: impl FnOnce() -> String,
        account: consumer::AccountConsumerLimits,
        now: i64,
    ) -> Result<ConsumerInfo, ApiError> {
        consumer::prepare_create(&mut req, via.name, via.filter, via.durable_api)?;
        let cfg = &mut req.config;
        let name = if !cfg.durable_name.is_empty() {
            cfg.durable_name.clone()
        } else {
            cfg.name.clone()
        };
        if let Some(existing) = self.consumers.get(&name) {
            if existing.config.pause_until.is_some() {
                cfg.pause_until = existing.config.pause_until;
            }
        }
        consumer::apply_defaults(cfg, &self.config, account);
        consumer::check_config(cfg, &self.config)?;
        account.check(cfg)?;
        if self.consumers.contains_key(&name) {
            let mut requested = cfg.clone();
            requested.name = name.clone();
            let mut want = requested.clone();
            consumer::stamp_ephemeral(&mut want);
            let existing_cfg = self.consumers[&name].config.clone();
            let same = |b: &ConsumerConfig| {
                let mut a = existing_cfg.clone();
                let mut b = b.clone();
                a.metadata.retain(|k, _| !k.starts_with("_nats."));
                b.metadata.retain(|k, _| !k.starts_with("_nats."));
                a == b
            };
            // nats-server compares a create with the request as given,
            // before an ephemeral's inactive threshold is stamped in.
            if req.action == ConsumerAction::Create && !same(&requested) {
                return Err(E::CONSUMER_ALREADY_EXISTS.err());
            }
            if same(&want) {
                return Ok(self.consumers[&name].info(now));
            }
            if self.config.retention == Retention::WorkQueue {
                self.check_work_queue(&want, Some(&name))?;
            }
            let bound = self.consumers[&name].push_active();
            consumer::check_config_update(&existing_cfg, &want, bound)?;
            let existing = self.consumers.get_mut(&name).expect("checked above");
            if existing.config.deliver_subject != want.deliver_subject {
                // The driver watches the new subject for interest.
                self.consumers_changed = true;
            }
            existing.config = want;
            existing.set_config_derived(self.store.as_ref());
            self.pump_due = true;
            return Ok(existing.info(now));
        }
        if req.action == ConsumerAction::Update {
            return Err(E::CONSUMER_DOES_NOT_EXIST.err());
        }
        let public = self.consumer_count() as i64;
        let max_consumers = account.max_consumers(&self.config);
        if !cfg.direct && max_consumers > 0 && public >= max_consumers {
            return Err(E::MAXIMUM_CONSUMERS_LIMIT.err());
        }
        if self.config.retention == Retention::WorkQueue {
            self.check_work_queue(cfg, None)?;
        }
        if cfg.durable_name.len() > 255 {
            return Err(E::CONSUMER_NAME_TOO_LONG.with("max", 255));
        }
        consumer::stamp_ephemeral(cfg);
        let generated = name.is_empty();
        let name = if generated { generated_name() } else { name };
        cfg.name = name.clone();
        let mut c = Consumer::new(
            &self.config.name,
            cfg.clone(),
            now,
            self.store.as_ref(),
            self.config.max_msgs_per_subject,
        );
        c.name_generated = generated;
        let info = c.info(now);
        self.out.push(Output::Event(Event::Consumer {
            stream: self.config.name.clone(),
            consumer: name.clone(),
            action: Action::Create,
        }));
        if c.config.pause_until.is_some_and(|u| u > now) {
            self.out.push(Output::Event(Event::Pause {
                stream: self.config.name.clone(),
                consumer: name.clone(),
                until: c.config.pause_until,
            }));
        }
        self.consumers.insert(name, c);
        self.consumers_changed = true;
        self.pump_due = true;
        Ok(info)
    }

    /// nats-server's work-queue rules: explicit ack, deliver all, and
    /// filters that no other consumer's can collide with.
    fn check_work_queue(&self, cfg: &ConsumerConfig, except: Option<&str>) -> Result<(), ApiError> {
        // A stream sourcing from this one takes what it is given.
        if cfg.direct {
            return Ok(());
        }
        if cfg.ack_policy != api::AckPolicy::Explicit {
            return Err(E::CONSUMER_WQ_REQUIRES_EXPLICIT_ACK.err());
        }
        if cfg.deliver_policy != api::DeliverPolicy::All {
            return Err(E::CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL.err());
        }
        let others: Vec<&Consumer> = self
            .consumers
            .values()
            .filter(|c| Some(c.name.as_str()) != except && !c.config.direct)
            .collect();
        if others.is_empty() {
            return Ok(());
        }
        let mine = cfg.filters();
        if mine.is_empty() {
            return Err(E::CONSUMER_WQ_MULTIPLE_UNFILTERED.err());
        }
        for o in others {
            let theirs = o.config.filters();
            if theirs.is_empty() {
                return Err(E::CONSUMER_WQ_CONSUMER_NOT_UNIQUE.err());
            }
            for a in &mine {
                for b in &theirs {
                    if subjects::subjects_collide(a.as_bytes(), b.as_bytes()) {
                        return Err(E::CONSUMER_WQ_CONSUMER_NOT_UNIQUE.err());
                    }
                }
            }
        }
        Ok(())
    }

    /// Restores a consumer from persisted state at startup.
    pub fn restore_consumer(
        &mut self,
        config: ConsumerConfig,
        created: i64,
        state: &ConsumerState,
        now: i64,
    ) {
        let name = config.name.clone();
        let c = Consumer::restore(
            &self.config.name,
            config,
            created,
            state,
            self.store.as_ref(),
            now,
        );
        self.consumers.insert(name, c);
        self.pump_due = true;
    }

    /// A consumer's runtime state (see `Consumer::runtime`).
    pub fn consumer_runtime(&self, name: &str) -> Option<Vec<u8>> {
        self.consumers.get(name).map(|c| c.runtime())
    }

    pub fn restore_consumer_runtime(&mut self, name: &str, data: &[u8]) -> bool {
        self.consumers
            .get_mut(name)
            .is_some_and(|c| c.restore_runtime(data))
    }

    /// The duplicate window: (time, message id, sequence), oldest first.
    /// The live message schedules, for a replicated stream's snapshot.
    pub fn schedules(&self) -> &schedule::Schedules {
        &self.schedules
    }

    /// Puts back the schedules a snapshot carried (the messages alone
    /// may not say when each is due).
    pub fn restore_schedules(&mut self, schedules: schedule::Schedules) {
        self.schedules = schedules;
    }

    /// The open atomic batches, for a replicated stream's snapshot.
    pub fn batches(&self) -> &batch::Batches {
        &self.batches
    }

    pub fn restore_batches(&mut self, batches: batch::Batches) {
        self.batches = batches;
    }

    pub fn dedupe_entries(&self) -> Vec<(i64, String, u64)> {
        self.dedupe.entries()
    }

    /// Replaces the duplicate window, ids of removed messages included.
    pub fn restore_dedupe(&mut self, entries: Vec<(i64, String, u64)>) {
        self.dedupe.restore(entries);
    }

    pub fn delete_consumer(&mut self, name: &str) -> Result<(), ApiError> {
        let Some(mut c) = self.consumers.remove(name) else {
            return Err(E::CONSUMER_NOT_FOUND.err());
        };
        c.on_deleted(&mut self.out);
        self.out.push(Output::Event(Event::Consumer {
            stream: self.config.name.clone(),
            consumer: name.to_string(),
            action: Action::Delete,
        }));
        self.consumers_changed = true;
        if self.config.retention == Retention::Interest {
            if self.consumers.is_empty() {
                self.purge_inner(&Purge::default())?;
            } else {
                let st = self.store.state();
                let from = c.state().ack_floor_sseq.max(st.first_seq);
                let seqs: Vec<u64> = (from..=st.last_seq).collect();
                self.retire(seqs)?;
            }
        }
        Ok(())
    }

    /// An ack for consumer `name`. Returns whether a double-ack reply
    /// should be sent (after the changes are durable).
    pub fn ack(
        &mut self,
        name: &str,
        subject: &str,
        body: &[u8],
        reply: Option<&str>,
        now: i64,
    ) -> Result<bool, ApiError> {
        let Some(c) = self.consumers.get_mut(name) else {
            return Ok(false);
        };
        let outcome = c.ack(subject, body, reply, now);
        self.out
            .extend(outcome.events.into_iter().map(Output::Event));
        self.pump_due = true;
        self.retire(outcome.done)?;
        if let Some((req, reply)) = outcome.next {
            self.pull(name, req, &reply, now)?;
            return Ok(false);
        }
        Ok(outcome.reply && reply.is_some())
    }

    pub fn pull(
        &mut self,
        name: &str,
        req: PullRequest,
        reply: &str,
        now: i64,
    ) -> Result<(), ApiError> {
        let Some(c) = self.consumers.get_mut(name) else {
            return Ok(());
        };
        let done = c.pull(req, reply, self.store.as_ref(), now, &mut self.out);
        self.retire(done)
    }

    /// CONSUMER.PAUSE: returns the consumer's info after the change.
    pub fn pause_consumer(
        &mut self,
        name: &str,
        until: Option<i64>,
        now: i64,
    ) -> Result<ConsumerInfo, ApiError> {
        let c = self
            .consumers
            .get_mut(name)
            .ok_or_else(|| E::CONSUMER_NOT_FOUND.err())?;
        // A time already past is kept (and echoed) but pauses nothing;
        // Go's zero time resumes.
        let until = until.filter(|&u| u > 0);
        if c.config.pause_until != until {
            self.out.push(Output::Event(Event::Pause {
                stream: self.config.name.clone(),
                consumer: name.to_string(),
                until,
            }));
        }
        c.set_pause(until);
        self.pump_due = true;
        Ok(c.info(now))
    }

    /// Whether any pull request waits.
    pub fn has_waiting_pulls(&self) -> bool {
        self.consumers
            .values()
            .any(|c| c.waiting_replies().next().is_some())
    }

    /// Every waiting pull request: (consumer, reply subject).
    pub fn waiting_pulls(&self) -> Vec<(String, String)> {
        self.consumers
            .iter()
            .flat_map(|(name, c)| {
                c.waiting_replies()
                    .map(move |r| (name.clone(), r.to_string()))
            })
            .collect()
    }

    /// Forgets `consumer`'s pull requests waiting on `replies`, whose
    /// requesters stopped listening.
    pub fn drop_pulls(&mut self, consumer: &str, replies: &[String]) {
        if let Some(c) = self.consumers.get_mut(consumer) {
            for reply in replies {
                c.drop_waiting(reply);
            }
        }
    }

    /// `CONSUMER.RESET`: the consumer starts again from `seq` (0: its ack
    /// floor); an interest stream drops what nobody needs any more.
    /// Returns the consumer's info and the sequence it starts from.
    pub fn reset_consumer(
        &mut self,
        name: &str,
        seq: u64,
        now: i64,
    ) -> Result<(ConsumerInfo, u64), ApiError> {
        let c = self
            .consumers
            .get_mut(name)
            .ok_or_else(|| E::CONSUMER_NOT_FOUND.err())?;
        let seq = c.reset(seq, self.store.as_ref())?;
        let info = c.info(now);
        if self.config.retention != Retention::Limits {
            self.reconcile()?;
        }
        self.pump_due = true;
        Ok((info, seq))
    }

    /// `CONSUMER.UNPIN`: the consumer's pinned client loses its pin; the
    /// next delivery pins another.
    pub fn unpin_consumer(&mut self, name: &str, group: &str) -> Result<(), ApiError> {
        let c = self
            .consumers
            .get_mut(name)
            .ok_or_else(|| E::CONSUMER_NOT_FOUND.err())?;
        c.unpin(group, &mut self.out)?;
        self.pump_due = true;
        Ok(())
    }

    /// A flow-control reply to consumer `name`; `last` is the stream and
    /// consumer sequences it says were received (acks, under the
    /// `flow_control` ack policy).
    pub fn flow_control_reply(
        &mut self,
        name: &str,
        subject: &str,
        last: Option<(u64, u64)>,
    ) -> Result<(), ApiError> {
        let Some(c) = self.consumers.get_mut(name) else {
            return Ok(());
        };
        let done = c.flow_control_reply(subject, last);
        self.pump_due = true;
        self.retire(done)
    }

    pub fn set_push_interest(&mut self, name: &str, active: bool, now: i64) {
        if let Some(c) = self.consumers.get_mut(name) {
            c.set_push_active(active, now);
            self.pump_due = true;
        }
    }

    /// Push consumers and the subjects whose interest they need.
    pub fn push_targets(&self) -> Vec<(String, String, String)> {
        self.consumers
            .values()
            .filter(|c| c.is_push())
            .map(|c| {
                (
                    c.name.clone(),
                    c.config.deliver_subject.clone(),
                    c.config.deliver_group.clone(),
                )
            })
            .collect()
    }

    /// Deletes everything: consumers are told, storage is removed.
    pub fn delete(&mut self) -> Result<(), ApiError> {
        let names: Vec<String> = self.consumers.keys().cloned().collect();
        let stream = self.config.name.clone();
        for n in names {
            if let Some(mut c) = self.consumers.remove(&n) {
                c.on_deleted(&mut self.out);
                self.out.push(Output::Event(Event::Consumer {
                    stream: stream.clone(),
                    consumer: n,
                    action: Action::Delete,
                }));
            }
        }
        // After its consumers', as nats-server's `stop` tells them.
        self.out.push(Output::Event(Event::Stream {
            stream,
            action: Action::Delete,
        }));
        self.store
            .delete_all()
            .map_err(|e| E::STREAM_DELETE.with("err", e))
    }
}
