//! Mirrors and sources: what a stream copies from other streams, and how
//! far it has got with each.
//!
//! The driver runs one consumer per source on the origin stream and feeds
//! its deliveries here with the origin sequence from the ack subject. A
//! mirror stores each message at the origin's own sequence (skipping what
//! the origin skipped) with the origin's timestamp; a source stores it as
//! a publish of its own, tagged `Nats-Stream-Source: <origin> <seq>
//! <filter> <dest> <subject>`, so duplicates by message id still apply.
//!
//! Invariant: a source's position is the origin sequence of the last
//! message this stream stored (or deliberately passed over) from it. A
//! message at or below the position is never stored again.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::{store_err, PubAck, Stream};
use crate::api::{ApiError, StreamSource, StreamSourceInfo, E};
use crate::headers;
use crate::transform::Transform;

/// The key of a stream's mirror among its sources.
pub const MIRROR: &str = "mirror";
/// Sourced messages scanned backwards at recovery for positions newer
/// than the ones journaled.
const RECOVERY_SCAN: u64 = 16_384;

/// One mirror or source as this stream follows it.
#[derive(Debug, Clone)]
pub struct Source {
    pub origin: String,
    pub mirror: bool,
    filter_subject: String,
    /// Source transforms: (filter, destination).
    transforms: Vec<(String, Option<Transform>)>,
    /// The transforms as configured (for its info).
    shown_transforms: Vec<crate::api::SubjectTransform>,
    opt_start_seq: u64,
    opt_start_time: Option<i64>,
    /// A durable consumer on the origin to read through: name and
    /// deliver subject.
    consumer: Option<(String, String)>,
    /// The origin's API prefix (see [`SourceSpec::api`]).
    api: String,
    /// The origin's deliver prefix (see [`SourceSpec::deliver`]).
    deliver: Option<String>,
    /// The source's `external`, as configured (for its info).
    external: Option<crate::api::ExternalStream>,
    /// The name, filter and destination that tag sourced messages.
    tag: (String, String, String),
    pub position: u64,
    lag: u64,
    active: Option<i64>,
}

/// What the driver needs to set up a source's consumer on the origin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceSpec {
    pub key: String,
    pub origin: String,
    pub filter_subject: String,
    pub filter_subjects: Vec<String>,
    /// Deliver from this origin sequence (0: per `start_time`, or all).
    pub start_seq: u64,
    pub start_time: Option<i64>,
    /// The last origin sequence copied.
    pub position: u64,
    /// Read through this durable push consumer on the origin (name,
    /// deliver subject), which acks by flow control.
    pub consumer: Option<(String, String)>,
    /// The origin's JetStream API prefix: `$JS.API`, or another
    /// domain's or account's (`external.api`, such as `$JS.hub.API`).
    pub api: String,
    /// An `external` source's `deliver` prefix: read through a push
    /// consumer the link makes on the origin, delivering under it (the
    /// origin's account exports that prefix as a stream, and its API's
    /// replies come back one each), rather than by pulls.
    pub deliver: Option<String>,
}

/// A message a source's consumer delivered.
#[derive(Debug, Clone, Copy)]
pub struct Sourced<'a> {
    pub key: &'a str,
    pub origin_seq: u64,
    pub origin_ts: i64,
    /// Messages left on the origin after this one (the lag).
    pub pending: u64,
    /// Store only if the position is this (the copy before was stored).
    pub after: Option<u64>,
    pub subject: &'a str,
    pub headers: Option<&'a [u8]>,
    pub payload: &'a [u8],
}

fn key_of(s: &StreamSource) -> (String, (String, String, String)) {
    let (filter, dest) = if s.subject_transforms.is_empty() {
        let f = if s.filter_subject.is_empty() {
            ">"
        } else {
            &s.filter_subject
        };
        (f.to_string(), ">".to_string())
    } else {
        let or_all = |v: &str| {
            if v.is_empty() {
                ">".to_string()
            } else {
                v.to_string()
            }
        };
        let srcs: Vec<String> = s
            .subject_transforms
            .iter()
            .map(|t| or_all(&t.src))
            .collect();
        let dests: Vec<String> = s
            .subject_transforms
            .iter()
            .map(|t| or_all(&t.dest))
            .collect();
        (srcs.join("\u{c}"), dests.join("\u{c}"))
    };
    // An origin in another domain is another origin, whatever its name
    // (nats-server's composeIName adds the API prefix's hash).
    let name = match &s.external {
        Some(ext) => format!("{}:{}", s.name, api_prefix(&ext.api)),
        None => s.name.clone(),
    };
    let key = format!("{name} {filter} {dest}");
    (key, (name, filter, dest))
}

/// An `external.api` as a subject prefix, without a trailing dot; empty
/// is this domain's API.
fn api_prefix(api: &str) -> String {
    match api.trim_end_matches('.') {
        "" => "$JS.API".to_string(),
        prefix => prefix.to_string(),
    }
}

fn source_from(s: &StreamSource, mirror: bool) -> Source {
    let transforms = s
        .subject_transforms
        .iter()
        .map(|t| {
            let src = if t.src.is_empty() {
                ">".to_string()
            } else {
                t.src.clone()
            };
            let tr = (!t.dest.is_empty())
                .then(|| Transform::new(&src, &t.dest).ok())
                .flatten();
            (src, tr)
        })
        .collect();
    Source {
        origin: s.name.clone(),
        mirror,
        filter_subject: s.filter_subject.clone(),
        transforms,
        shown_transforms: s.subject_transforms.clone(),
        opt_start_seq: s.opt_start_seq,
        opt_start_time: s.opt_start_time,
        consumer: s
            .consumer
            .as_ref()
            .map(|c| (c.name.clone(), c.deliver_subject.clone())),
        api: api_prefix(s.external.as_ref().map_or("", |e| e.api.as_str())),
        deliver: s
            .external
            .as_ref()
            .map(|e| e.deliver.trim_end_matches('.'))
            .filter(|d| !d.is_empty())
            .map(str::to_string),
        external: s.external.clone(),
        tag: key_of(s).1,
        position: 0,
        lag: 0,
        active: None,
    }
}

impl Source {
    fn spec(&self, key: &str) -> SourceSpec {
        let filter_subjects: Vec<String> = self.transforms.iter().map(|(f, _)| f.clone()).collect();
        let (filter_subject, filter_subjects) = match filter_subjects.len() {
            0 => (self.filter_subject.clone(), Vec::new()),
            1 => (filter_subjects[0].clone(), Vec::new()),
            _ => (String::new(), filter_subjects),
        };
        let (start_seq, start_time) = if self.position > 0 {
            (self.position + 1, None)
        } else if self.opt_start_seq > 0 {
            (self.opt_start_seq, None)
        } else {
            (0, self.opt_start_time)
        };
        SourceSpec {
            key: key.to_string(),
            origin: self.origin.clone(),
            filter_subject,
            filter_subjects,
            start_seq,
            start_time,
            position: self.position,
            consumer: self.consumer.clone(),
            api: self.api.clone(),
            deliver: self.deliver.clone(),
        }
    }

    /// The subject a sourced message is stored under.
    fn map_subject(&self, subject: &str) -> String {
        for (filter, tr) in &self.transforms {
            if subjects::subject_matches_filter(subject.as_bytes(), filter.as_bytes()) {
                return tr
                    .as_ref()
                    .and_then(|t| t.apply(subject))
                    .unwrap_or_else(|| subject.to_string());
            }
        }
        subject.to_string()
    }

    fn info(&self, now: i64) -> StreamSourceInfo {
        StreamSourceInfo {
            name: self.origin.clone(),
            external: self.external.clone(),
            lag: self.lag,
            active: self.active.map_or(-1, |t| (now - t).max(0)),
            error: None,
            filter_subject: self.filter_subject.clone(),
            subject_transforms: self.shown_transforms.clone(),
        }
    }
}

impl Stream {
    /// Rebuilds the set of sources from the configuration, keeping the
    /// positions of those that stay.
    pub(super) fn rebuild_sources(&mut self) {
        let mut next = BTreeMap::new();
        if let Some(m) = &self.config.mirror {
            let mut s = source_from(m, true);
            if let Some(old) = self.sources.get(MIRROR) {
                s.position = old.position;
            }
            next.insert(MIRROR.to_string(), s);
        }
        for src in &self.config.sources {
            let (key, _) = key_of(src);
            let mut s = source_from(src, false);
            if let Some(old) = self.sources.get(&key) {
                s.position = old.position;
                s.lag = old.lag;
                s.active = old.active;
            }
            next.insert(key, s);
        }
        self.sources = next;
    }

    /// Consumers the driver should run on origin streams, one per source.
    pub fn source_specs(&self) -> Vec<SourceSpec> {
        self.sources.iter().map(|(k, s)| s.spec(k)).collect()
    }

    /// A source's origin was made again (its stream identity changed):
    /// the source starts over from where its config says. Not a mirror,
    /// whose sequences are the origin's.
    pub fn reset_source(&mut self, key: &str) {
        if key == MIRROR {
            return;
        }
        if let Some(s) = self.sources.get_mut(key) {
            s.position = 0;
        }
    }

    /// Each source's position, for the driver to journal.
    pub fn source_positions(&self) -> BTreeMap<String, u64> {
        self.sources
            .iter()
            .map(|(k, s)| (k.clone(), s.position))
            .collect()
    }

    /// After a restart: positions from the journal, then anything newer
    /// the stored messages show.
    pub fn restore_source_positions(&mut self, journaled: &BTreeMap<String, u64>) {
        for (k, s) in self.sources.iter_mut() {
            if let Some(&p) = journaled.get(k) {
                s.position = s.position.max(p);
            }
        }
        let st = self.store.state();
        if let Some(m) = self.sources.get_mut(MIRROR) {
            m.position = m.position.max(st.last_seq);
            return;
        }
        if self.sources.is_empty() || st.msgs == 0 {
            return;
        }
        let floor = st.first_seq.max(st.last_seq.saturating_sub(RECOVERY_SCAN));
        let mut seq = st.last_seq;
        while seq >= floor && seq > 0 {
            if let Ok(Some(m)) = self.store.get(seq) {
                if let Some(tag) = m
                    .headers
                    .as_deref()
                    .and_then(|h| headers::get(h, headers::STREAM_SOURCE))
                {
                    let f: Vec<&str> = tag.split(' ').collect();
                    if f.len() >= 4 {
                        let key = format!("{} {} {}", f[0], f[2], f[3]);
                        if let (Some(s), Ok(n)) = (self.sources.get_mut(&key), f[1].parse::<u64>())
                        {
                            s.position = s.position.max(n);
                        }
                    }
                }
            }
            seq -= 1;
        }
    }

    /// A heartbeat (or any sign of life) from a source's consumer.
    pub fn source_alive(&mut self, key: &str, pending: Option<u64>, now: i64) {
        if let Some(s) = self.sources.get_mut(key) {
            s.active = Some(now);
            if let Some(p) = pending {
                s.lag = p;
            }
        }
    }

    /// Stores a message a source delivered. Returns whether it advanced
    /// the source (false for one already had); an error leaves the
    /// position where it was, so the message comes again.
    pub fn sourced(&mut self, m: Sourced<'_>, now: i64) -> Result<bool, ApiError> {
        let Some(src) = self.sources.get_mut(m.key) else {
            return Ok(false);
        };
        src.active = Some(now);
        src.lag = m.pending;
        if m.origin_seq <= src.position {
            return Ok(false);
        }
        if m.after.is_some_and(|after| after != src.position) {
            // The copy before this one was not stored: storing this one
            // would skip it. Not acked; the source starts over.
            return Err(E::SOURCE_CONSUMER_SETUP_FAILED.with("err", "copy out of order"));
        }
        if src.mirror {
            self.mirror_store(m)?;
        } else {
            let src = &self.sources[m.key];
            let subject = src.map_subject(m.subject);
            let (name, filter, dest) = &src.tag;
            let tag = format!("{name} {} {filter} {dest} {}", m.origin_seq, m.subject);
            let kept = m.headers.and_then(|h| {
                headers::retain(h, |n| {
                    n != headers::STREAM_SOURCE
                        && !n.starts_with("Nats-Expected-")
                        && !n.starts_with("Nats-Batch-")
                })
            });
            let h: Bytes = headers::append(kept.as_deref(), &[(headers::STREAM_SOURCE, &tag)]);
            if let PubAck::Error(e) = self.publish_sourced(&subject, &h, m.payload, now) {
                return Err(e);
            }
        }
        if let Some(s) = self.sources.get_mut(m.key) {
            s.position = m.origin_seq;
        }
        Ok(true)
    }

    /// A mirrored message at the origin's sequence and time.
    fn mirror_store(&mut self, m: Sourced<'_>) -> Result<(), ApiError> {
        let st = self.store.state();
        if m.origin_seq <= st.last_seq {
            return Ok(());
        }
        if st.msgs == 0 && m.origin_seq > st.last_seq + 1 {
            self.store.reset_to(m.origin_seq).map_err(store_err)?;
        } else {
            for _ in st.last_seq + 1..m.origin_seq {
                self.store.skip(m.origin_ts).map_err(store_err)?;
            }
        }
        let ts = m.origin_ts.max(self.store.state().last_ts);
        let seq = self
            .store
            .store(m.subject, m.headers, m.payload, ts)
            .map_err(store_err)?;
        debug_assert_eq!(seq, m.origin_seq, "a mirror keeps the origin's sequences");
        for c in self.consumers.values_mut() {
            c.on_stored(seq, m.subject);
        }
        self.pump_due = true;
        self.enforce_limits(m.subject)?;
        Ok(())
    }

    /// `mirror` and `sources` for stream info.
    pub(super) fn source_infos(
        &self,
        now: i64,
    ) -> (Option<StreamSourceInfo>, Vec<StreamSourceInfo>) {
        let mirror = self.sources.get(MIRROR).map(|s| s.info(now));
        let sources = self
            .sources
            .iter()
            .filter(|(k, _)| k.as_str() != MIRROR)
            .map(|(_, s)| s.info(now))
            .collect();
        (mirror, sources)
    }
}
