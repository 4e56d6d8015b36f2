//! Publishing into a stream in two steps: [`Stream::check`] decides
//! whether a message may be stored, and how (its subject after the
//! transform, its headers and body after counters and TTL rules), without
//! changing anything; [`Stream::store_checked`] stores what passed. One
//! message goes through both at once. An atomic batch checks every one of
//! its messages first, each seeing what the ones before it would change
//! ([`BatchDiff`]), and stores them only if all pass.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use num_bigint::BigInt;
use store::{Filter, Purge};

use super::{counter, expectation, parse_ttl, store_err, PubAck, Stream, MAX_HEADER, SEC};
use crate::api::{ApiError, Retention, E};
use crate::headers;

/// A message that passed the checks, as it will be stored.
pub(super) struct Checked<'a> {
    pub subject: String,
    pub headers: Option<Bytes>,
    /// The body as published, unless a counter rewrote it.
    pub payload: Cow<'a, [u8]>,
    pub msg_id: Option<String>,
    /// `Some(true)`: roll up the stream; `Some(false)`: the subject.
    pub rollup: Option<bool>,
    /// Nanoseconds; -1 never expires.
    pub ttl: i64,
    /// A counter's value after this message.
    pub counted: Option<String>,
}

/// What the messages of a batch checked so far would change: the rules
/// nats-server applies to a batch's later messages
/// (`checkMsgHeadersPreClusteredProposal` with its staged diff).
#[derive(Default)]
pub(super) struct BatchDiff {
    /// Subjects written, with how many messages and bytes.
    subjects: BTreeMap<String, (u64, u64)>,
    msg_ids: BTreeSet<String>,
    /// Each counter subject's last message in the batch.
    counters: BTreeMap<String, (Bytes, Bytes)>,
    /// Subjects whose expected last sequence was checked, and against what.
    expected: BTreeMap<String, u64>,
}

impl BatchDiff {
    fn first(&self) -> bool {
        self.subjects.is_empty()
    }

    fn totals(&self) -> (u64, u64) {
        self.subjects
            .values()
            .fold((0, 0), |(m, b), (dm, db)| (m + dm, b + db))
    }
}

/// Message-local header facts, read once.
#[derive(Default)]
struct Read {
    incr: Option<BigInt>,
    msg_id: Option<String>,
    rollup: Option<bool>,
    ttl: i64,
    /// A duplicate of what is stored at this sequence: nothing else counts.
    duplicate: Option<u64>,
    /// A schedule that gets `Nats-Rollup: sub`.
    schedule_rollup: bool,
}

impl Stream {
    /// Whether `msg` may be stored and how; `Ok(Err(seq))` is a duplicate
    /// of what was stored at `seq`. Changes nothing.
    pub(super) fn check<'a>(
        &self,
        msg: super::Incoming<'a>,
        sourced: bool,
        mut batch: Option<&mut BatchDiff>,
        now: i64,
    ) -> Result<Result<Checked<'a>, u64>, ApiError> {
        let subject = match (sourced, self.input_transform.as_ref()) {
            (false, Some(t)) => t
                .apply(msg.subject)
                .unwrap_or_else(|| msg.subject.to_string()),
            _ => msg.subject.to_string(),
        };
        if self.config.sealed {
            return Err(E::STREAM_SEALED.err());
        }
        // Headers a server adds in transit are not stored.
        let hdrs: Option<Bytes> = match msg.headers {
            Some(h) if headers::get(h, headers::REQUEST_INFO).is_some() => {
                headers::without(h, &[headers::REQUEST_INFO])
            }
            Some(h) => Some(Bytes::copy_from_slice(h)),
            None => None,
        };
        let mut read = match hdrs.as_deref() {
            Some(h) => {
                self.check_headers(h, &subject, msg.payload, sourced, batch.as_deref_mut(), now)?
            }
            None => Read::default(),
        };
        let mut hdrs = hdrs;
        if read.schedule_rollup {
            hdrs = Some(headers::append(
                hdrs.as_deref(),
                &[(headers::ROLLUP, "sub")],
            ));
            read.rollup = Some(false);
        }
        if let Some(seq) = read.duplicate {
            return Ok(Err(seq));
        }
        if let (Some(all), Some(diff)) = (read.rollup, batch.as_deref()) {
            // In a batch a roll-up of the stream comes first, and one of a
            // subject before the batch writes to it.
            if all && !diff.first() {
                return Err(E::STREAM_ROLLUP_FAILED.with("err", "batch rollup all invalid"));
            }
            if !all && diff.subjects.contains_key(&subject) {
                return Err(E::STREAM_ROLLUP_FAILED.with("err", "batch rollup sub invalid"));
            }
        }
        if read.incr.is_none() && self.config.allow_msg_counter {
            return Err(E::MESSAGE_INCR_MISSING.err());
        }
        let mut checked = Checked {
            msg_id: read.msg_id,
            rollup: read.rollup,
            ttl: read.ttl,
            counted: None,
            headers: hdrs,
            payload: Cow::Borrowed(msg.payload),
            subject,
        };
        if let (Some(incr), true) = (read.incr, self.config.allow_msg_counter) {
            self.count(&mut checked, incr, batch.as_deref_mut())?;
        }
        self.check_size(&checked)?;
        self.raise_ttl(&mut checked);
        self.check_discard_new(&checked, batch.as_deref())?;
        if let Some(diff) = batch {
            let size = self.store.msg_size(
                &checked.subject,
                checked.headers.as_deref(),
                &checked.payload,
            );
            let entry = diff.subjects.entry(checked.subject.clone()).or_default();
            entry.0 += 1;
            entry.1 += size;
        }
        Ok(Ok(checked))
    }

    /// The checks on a message's headers, in nats-server's order.
    fn check_headers(
        &self,
        h: &[u8],
        subject: &str,
        payload: &[u8],
        sourced: bool,
        mut batch: Option<&mut BatchDiff>,
        now: i64,
    ) -> Result<Read, ApiError> {
        let mut incr = None;
        if let Some(text) = headers::get(h, headers::INCR) {
            let value = counter::parse_incr(text).ok_or_else(|| E::MESSAGE_INCR_INVALID.err())?;
            // What a source brings is stored as it came (or counted, in a
            // counter stream).
            if !sourced {
                counter::check_publish(self.config.allow_msg_counter, h, payload)?;
            }
            incr = Some(value);
        }
        if let Some(exp) = expectation(h, headers::EXPECTED_STREAM) {
            if exp != self.config.name {
                return Err(E::STREAM_NOT_MATCH.err());
            }
        }
        let ttl_text = headers::get(h, headers::TTL);
        let mut ttl = 0;
        if let Some(t) = ttl_text.and_then(|v| parse_ttl(v).ok()) {
            if !self.config.allow_msg_ttl {
                return Err(E::MESSAGE_TTL_DISABLED.err());
            }
            ttl = t;
        }
        self.check_expected_sequences(h, subject, batch.as_deref_mut())?;
        // What a source brings was checked where it was published.
        let schedule_rollup = !sourced && self.check_schedule(h, subject, now)?;
        if !sourced && headers::get(h, headers::STREAM_SOURCE).is_some() && self.sources.is_empty()
        {
            return Err(E::MESSAGE_SOURCE_HDR_NOT_ALLOWED.err());
        }
        let msg_id = headers::get(h, headers::MSG_ID).filter(|id| !id.is_empty());
        if let Some(id) = msg_id {
            if let Some(seq) = self.duplicate_of(id, batch)? {
                return Ok(Read {
                    duplicate: Some(seq),
                    ..Read::default()
                });
            }
        }
        if let Some(want) = expectation(h, headers::EXPECTED_LAST_MSG_ID) {
            if want != self.last_msg_id {
                return Err(E::STREAM_WRONG_LAST_MSG_ID.with("id", &self.last_msg_id));
            }
        }
        let rollup = self.check_rollup(h)?;
        if ttl_text.is_some_and(|v| parse_ttl(v).is_err()) {
            return Err(E::MESSAGE_TTL_INVALID.err());
        }
        Ok(Read {
            incr,
            msg_id: msg_id.map(str::to_string),
            rollup,
            ttl,
            duplicate: None,
            schedule_rollup,
        })
    }

    /// `Nats-Expected-Last-Subject-Sequence` (with its subject override)
    /// and `Nats-Expected-Last-Sequence`. In a batch only the first message
    /// may expect a last sequence, and a subject's expectation holds only
    /// before the batch writes to it.
    fn check_expected_sequences(
        &self,
        h: &[u8],
        subject: &str,
        mut batch: Option<&mut BatchDiff>,
    ) -> Result<(), ApiError> {
        let subj_seq = expectation(h, headers::EXPECTED_LAST_SUBJ_SEQ);
        let subj_seq_subj = expectation(h, headers::EXPECTED_LAST_SUBJ_SEQ_SUBJ);
        if let Some(v) = subj_seq {
            let want = headers::parse_u64(v);
            let on = subj_seq_subj.unwrap_or(subject);
            if let Some(diff) = batch.as_deref() {
                if diff.subjects.contains_key(on) {
                    return Err(E::STREAM_WRONG_LAST_SEQUENCE_CONSTANT.err());
                }
                if let Some(&seen) = diff.expected.get(on) {
                    return match want == Some(seen) {
                        true => Ok(()),
                        false => Err(E::STREAM_WRONG_LAST_SEQUENCE.with("seq", seen)),
                    };
                }
            }
            let found = if subjects::is_literal(on.as_bytes()) {
                self.store.subject_state(on).map_or(0, |s| s.last)
            } else {
                self.store
                    .last_matching(&Filter::one(on))
                    .map_err(store_err)?
                    .map_or(0, |m| m.seq)
            };
            if want != Some(found) {
                return Err(E::STREAM_WRONG_LAST_SEQUENCE.with("seq", found));
            }
            if let Some(diff) = batch.as_deref_mut() {
                diff.expected.insert(on.to_string(), found);
            }
        } else if subj_seq_subj.is_some() {
            return Err(E::STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID.err());
        }
        if let Some(v) = expectation(h, headers::EXPECTED_LAST_SEQ) {
            let last = self.store.state().last_seq;
            if headers::parse_u64(v) != Some(last) {
                return Err(E::STREAM_WRONG_LAST_SEQUENCE.with("seq", last));
            }
            if batch.is_some_and(|diff| !diff.first()) {
                return Err(E::STREAM_WRONG_LAST_SEQUENCE_CONSTANT.err());
            }
        }
        Ok(())
    }

    /// `Nats-Rollup`: `sub` or `all`, where roll-ups are allowed.
    fn check_rollup(&self, h: &[u8]) -> Result<Option<bool>, ApiError> {
        let Some(v) = headers::get(h, headers::ROLLUP) else {
            return Ok(None);
        };
        if !self.config.allow_rollup_hdrs || self.config.deny_purge {
            return Err(E::STREAM_ROLLUP_FAILED.with("err", "rollup not permitted"));
        }
        match v.to_ascii_lowercase().as_str() {
            "sub" => Ok(Some(false)),
            "all" => Ok(Some(true)),
            _ => Err(E::STREAM_ROLLUP_FAILED.with("err", format!("rollup value invalid: {v:?}"))),
        }
    }

    /// The sequence `id` was stored at within the duplicate window, if it
    /// was; in a batch, an id seen before (in the batch or the window) is
    /// refused.
    fn duplicate_of(
        &self,
        id: &str,
        batch: Option<&mut BatchDiff>,
    ) -> Result<Option<u64>, ApiError> {
        let stored = match self.config.duplicate_window > 0 {
            true => self.dedupe.get(id),
            false => None,
        };
        match batch {
            None => Ok(stored),
            Some(diff) => {
                if stored.is_some() || !diff.msg_ids.insert(id.to_string()) {
                    return Err(E::ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE.err());
                }
                Ok(None)
            }
        }
    }

    /// A counter message: the subject's last value (in the batch, or
    /// stored) plus the increment.
    fn count(
        &self,
        checked: &mut Checked<'_>,
        incr: BigInt,
        batch: Option<&mut BatchDiff>,
    ) -> Result<(), ApiError> {
        let h = checked.headers.clone().unwrap_or_default();
        let in_batch = batch
            .as_deref()
            .and_then(|diff| diff.counters.get(&checked.subject).cloned());
        let stored = match in_batch {
            Some(_) => None,
            None => self
                .store
                .last_matching(&Filter::one(&checked.subject))
                .map_err(store_err)?,
        };
        let last = match &in_batch {
            Some((h, p)) => Some((Some(&h[..]), &p[..])),
            None => stored
                .as_ref()
                .map(|m| (m.headers.as_deref(), &m.payload[..])),
        };
        let counted = counter::count(last, &h, &checked.payload, incr, &checked.subject)?;
        if let Some(diff) = batch {
            let kept = (counted.headers.clone(), counted.payload.clone());
            diff.counters.insert(checked.subject.clone(), kept);
        }
        checked.headers = Some(counted.headers);
        checked.payload = Cow::Owned(counted.payload.to_vec());
        checked.counted = Some(counted.value);
        Ok(())
    }

    fn check_size(&self, checked: &Checked<'_>) -> Result<(), ApiError> {
        let hlen = checked.headers.as_ref().map_or(0, |h| h.len());
        if self.config.max_msg_size >= 0 {
            let max = self.config.max_msg_size as usize;
            if hlen > max || checked.payload.len() > max - hlen {
                return Err(E::STREAM_MESSAGE_EXCEEDS_MAXIMUM.err());
            }
        }
        if hlen > MAX_HEADER {
            return Err(E::STREAM_HEADER_EXCEEDS_MAXIMUM.err());
        }
        Ok(())
    }

    /// With subject delete markers, a message must outlive the marker TTL,
    /// or a marker could be missed; one message per subject is the
    /// exception. nats-server rewrites the header in whole seconds.
    fn raise_ttl(&self, checked: &mut Checked<'_>) {
        let marker_ttl = self.config.subject_delete_marker_ttl;
        if checked.ttl > 0
            && marker_ttl > 0
            && self.config.max_msgs_per_subject != 1
            && checked.ttl / SEC < marker_ttl / SEC
        {
            let secs = marker_ttl / SEC;
            checked.ttl = secs * SEC;
            let kept = checked
                .headers
                .as_deref()
                .and_then(|h| headers::without(h, &[headers::TTL]));
            checked.headers = Some(headers::append(
                kept.as_deref(),
                &[(headers::TTL, &secs.to_string())],
            ));
        }
    }

    /// `discard: new`: refused when the stream (or the subject, with
    /// `discard_new_per_subject`) is full, counting what the batch would
    /// add before it; a message replacing a subject's oldest under
    /// `max_msgs_per_subject` passes.
    fn check_discard_new(
        &self,
        checked: &Checked<'_>,
        batch: Option<&BatchDiff>,
    ) -> Result<(), ApiError> {
        if self.config.discard != crate::api::Discard::New {
            return Ok(());
        }
        let cfg = &self.config;
        let subject = checked.subject.as_str();
        let (h, payload) = (checked.headers.as_deref(), &checked.payload[..]);
        let (batch_msgs, batch_bytes) = batch.map_or((0, 0), BatchDiff::totals);
        let batch_subject = batch
            .and_then(|diff| diff.subjects.get(subject))
            .map_or(0, |(m, _)| *m);
        let st = self.store.state();
        let subj = if cfg.max_msgs_per_subject > 0 {
            self.store.subject_state(subject)
        } else {
            None
        };
        let subject_msgs = subj.map_or(0, |s| s.msgs) + batch_subject;
        let at_subject_limit = subj.is_some() && subject_msgs as i64 >= cfg.max_msgs_per_subject;
        if at_subject_limit && cfg.discard_new_per_subject && checked.rollup.is_none() {
            return Err(E::STREAM_STORE_FAILED.with("err", "maximum messages per subject exceeded"));
        }
        if cfg.max_msgs > 0 && (st.msgs + batch_msgs) as i64 >= cfg.max_msgs && !at_subject_limit {
            return Err(E::STREAM_STORE_FAILED.with("err", "maximum messages exceeded"));
        }
        if cfg.max_bytes > 0 {
            let size = self.store.msg_size(subject, h, payload);
            if st.bytes + batch_bytes + size > cfg.max_bytes as u64 {
                let replaces_bigger = at_subject_limit
                    && subj
                        .and_then(|s| self.store.get(s.first).ok().flatten())
                        .is_some_and(|m| {
                            self.store
                                .msg_size(&m.subject, m.headers.as_deref(), &m.payload)
                                >= size
                        });
                if !replaces_bigger {
                    return Err(E::STREAM_STORE_FAILED.with("err", "maximum bytes exceeded"));
                }
            }
        }
        Ok(())
    }

    /// Stores a checked message: the sequence, the duplicate window,
    /// TTLs, consumers, roll-ups, limits, republish.
    pub(super) fn store_checked(
        &mut self,
        checked: Checked<'_>,
        now: i64,
    ) -> Result<PubAck, ApiError> {
        let Checked {
            subject,
            headers,
            payload,
            msg_id,
            rollup,
            ttl,
            counted,
        } = checked;
        let h = headers.as_deref();
        if self.config.retention == Retention::Interest
            && !self
                .consumers
                .values()
                .any(|c| c.filter().matches(&subject))
        {
            // Nobody is interested: the sequence is used, nothing is stored.
            let seq = self.store.skip(now).map_err(store_err)?;
            self.remember_id(msg_id.as_deref(), seq, now);
            return Ok(PubAck::Stored(seq));
        }
        let seq = self
            .store
            .store(&subject, h, &payload, now)
            .map_err(store_err)?;
        self.remember_id(msg_id.as_deref(), seq, now);
        self.track_schedule(seq, &subject, h, now);
        if ttl > 0 {
            self.ttl.insert((now + ttl, seq));
        } else if ttl == -1 {
            self.never.insert(seq);
        }
        for c in self.consumers.values_mut() {
            c.on_stored(seq, &subject);
        }
        self.pump_due = true;
        if let Some(all) = rollup {
            let filter = (!all).then(|| subject.clone());
            self.purge_inner(&Purge {
                filter,
                keep: Some(1),
                seq: None,
            })?;
        }
        self.end_schedule(h)?;
        self.enforce_limits(&subject)?;
        self.republish(seq, &subject, h, &payload, now);
        Ok(match counted {
            Some(value) => PubAck::Counted(seq, value),
            None => PubAck::Stored(seq),
        })
    }
}
