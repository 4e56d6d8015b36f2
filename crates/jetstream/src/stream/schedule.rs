//! Message schedules (ADR-51): a message with `Nats-Schedule` makes the
//! stream publish a copy of it (or of its source subject's last message)
//! to `Nats-Schedule-Target`, once (`@at`) or repeatedly (`@every`, cron).
//!
//! The stream keeps an index of live schedules and when each is due. The
//! index is replicated state: it changes only as messages are stored and
//! as schedules fire, both inside applied inputs, and `tick(now)` fires
//! what is due at the input's time. So every replica fires the same
//! schedules at the same input and stores the same messages. A snapshot
//! carries the index, since it cannot always be rebuilt from the messages
//! (a fired copy that carried the next time may be gone).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use jiff::tz::TimeZone;
use serde::{Deserialize, Serialize};

use super::cron::Cron;
use crate::api::{ApiError, E};
use crate::headers;

pub const SCHEDULE: &str = "Nats-Schedule";
pub const TIME_ZONE: &str = "Nats-Schedule-Time-Zone";
pub const TTL: &str = "Nats-Schedule-TTL";
pub const ROLLUP: &str = "Nats-Schedule-Rollup";
pub const TARGET: &str = "Nats-Schedule-Target";
pub const SOURCE: &str = "Nats-Schedule-Source";
pub const SCHEDULER: &str = "Nats-Scheduler";
pub const NEXT: &str = "Nats-Schedule-Next";
/// `Nats-Schedule-Next` of a one-shot schedule's message: remove the
/// schedule once it is stored.
pub const PURGE: &str = "purge";

const SEC: i64 = 1_000_000_000;

/// When a schedule fires next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// Unix nanoseconds.
    pub at: i64,
    /// `@every` and cron repeat; `@at` fires once.
    pub repeat: bool,
    /// `at` as `Nats-Schedule-Next` carries it (RFC 3339 with the zone's
    /// offset and the fraction trimmed, Go's `RFC3339Nano`).
    pub text: String,
}

/// The zone of `Nats-Schedule-Time-Zone`: `Ok(None)` without the header.
/// `Local` is UTC: replicas must agree, so none has a local zone.
pub fn zone(h: &[u8]) -> Result<Option<TimeZone>, ApiError> {
    let Some(name) = headers::get(h, TIME_ZONE) else {
        return Ok(None);
    };
    if name.is_empty() {
        return Err(E::MESSAGE_SCHEDULES_TIME_ZONE_INVALID.err());
    }
    if name == "Local" {
        return Ok(Some(TimeZone::UTC));
    }
    TimeZone::get(name)
        .map(Some)
        .map_err(|_| E::MESSAGE_SCHEDULES_TIME_ZONE_INVALID.err())
}

/// When the schedule in `h` fires after `ts`: `Ok(None)` when `h` holds
/// no schedule. A time long past (`now` is later) is skipped to the next
/// one after `now`, so a schedule missed while a server was down fires
/// once, not once per miss; `@at` fires however late it is.
pub fn due(h: &[u8], ts: i64, now: i64) -> Result<Option<Due>, ApiError> {
    let tz = zone(h)?;
    let pattern = headers::get(h, SCHEDULE).unwrap_or("");
    if pattern.is_empty() {
        return Ok(None);
    }
    parse(pattern, tz.as_ref(), ts, now)
        .map(Some)
        .ok_or_else(|| E::MESSAGE_SCHEDULES_PATTERN_INVALID.err())
}

/// nats-server's `parseMsgSchedule`.
fn parse(pattern: &str, tz: Option<&TimeZone>, ts: i64, now: i64) -> Option<Due> {
    if let Some(at) = pattern.strip_prefix("@at ") {
        if tz.is_some() {
            return None;
        }
        let at = crate::api::time::parse_signed(at)?;
        return Some(Due {
            at,
            repeat: false,
            text: format(at, &TimeZone::UTC),
        });
    }
    if let Some(every) = pattern.strip_prefix("@every ") {
        if tz.is_some() {
            return None;
        }
        let every = crate::duration::parse(every).ok()?;
        let every = i64::try_from(every.as_nanos()).ok()?;
        if every < SEC {
            return None;
        }
        let mut at = round_to_second(ts).checked_add(every)?;
        if at < now {
            at = round_to_second(now).checked_add(every)?;
        }
        return Some(Due {
            at,
            repeat: true,
            text: format(at, &TimeZone::UTC),
        });
    }
    let pattern = match pattern {
        "@yearly" | "@annually" => "0 0 0 1 1 *",
        "@monthly" => "0 0 0 1 * *",
        "@weekly" => "0 0 0 * * 0",
        "@daily" | "@midnight" => "0 0 0 * * *",
        "@hourly" => "0 0 * * * *",
        other => other,
    };
    let cron = Cron::parse(pattern).ok()?;
    let tz = tz.cloned().unwrap_or(TimeZone::UTC);
    let mut next = cron.next_after(&tz, ts)?;
    if (next.timestamp().as_nanosecond() as i64) < now {
        next = cron.next_after(&tz, round_to_second(now))?;
    }
    let at = next.timestamp().as_nanosecond() as i64;
    Some(Due {
        at,
        repeat: true,
        text: format(at, &tz),
    })
}

/// Go's `Round(time.Second)`: halves round up.
fn round_to_second(ns: i64) -> i64 {
    let rem = ns.rem_euclid(SEC);
    if rem >= SEC / 2 {
        ns - rem + SEC
    } else {
        ns - rem
    }
}

/// Go's `RFC3339Nano` in `tz`: `Z` for UTC, else the offset.
fn format(ns: i64, tz: &TimeZone) -> String {
    let Ok(ts) = jiff::Timestamp::from_nanosecond(i128::from(ns)) else {
        return String::new();
    };
    let zoned = ts.to_zoned(tz.clone());
    let mut text = zoned.strftime("%Y-%m-%dT%H:%M:%S").to_string();
    let frac = zoned.subsec_nanosecond();
    if frac > 0 {
        let digits = format!("{frac:09}");
        text.push('.');
        text.push_str(digits.trim_end_matches('0'));
    }
    let offset = zoned.offset().seconds();
    if offset == 0 && *tz == TimeZone::UTC {
        text.push('Z');
    } else {
        let sign = if offset < 0 { '-' } else { '+' };
        let abs = offset.unsigned_abs();
        text.push_str(&format!("{sign}{:02}:{:02}", abs / 3600, abs / 60 % 60));
    }
    text
}

/// The message a schedule publishes when it fires.
#[derive(Debug, PartialEq, Eq)]
pub struct Fired {
    pub subject: String,
    pub headers: Bytes,
    pub payload: Bytes,
    pub next: Due,
}

/// What the schedule stored as `schedule` (its subject, headers and body)
/// publishes on firing at `at`, with `source_last` the last message on its
/// `Nats-Schedule-Source` (when it has one and the subject holds any).
/// `None` when the stored schedule is not a valid one any more.
pub fn fire(
    subject: &str,
    schedule: (&[u8], &Bytes),
    source_last: Option<(Option<&[u8]>, &Bytes)>,
    at: i64,
    now: i64,
) -> Option<Fired> {
    let (h, payload) = schedule;
    let next = due(h, at, now).ok()??;
    let ttl = headers::get(h, TTL).unwrap_or("");
    if !ttl.is_empty() && super::parse_ttl(ttl).is_err() {
        return None;
    }
    let target = headers::get(h, TARGET).filter(|t| !t.is_empty())?;
    let rollup = headers::get(h, ROLLUP).unwrap_or("");
    let (copy_headers, copy_payload) = match source_last {
        Some((sh, sp)) => (sh, sp.clone()),
        None => (Some(h), payload.clone()),
    };
    let kept = copy_headers.and_then(|block| {
        headers::retain(block, |name| {
            !name.starts_with(SCHEDULE)
                && !name.starts_with("Nats-Expected-")
                && name != headers::MSG_ID
                && name != headers::TTL
                && name != headers::ROLLUP
        })
    });
    let next_text = if next.repeat {
        next.text.as_str()
    } else {
        PURGE
    };
    let mut added = vec![(SCHEDULER, subject), (NEXT, next_text)];
    if !ttl.is_empty() {
        added.push((headers::TTL, ttl));
    }
    if !rollup.is_empty() {
        added.push((headers::ROLLUP, rollup));
    }
    Some(Fired {
        subject: target.to_string(),
        headers: headers::append(kept.as_deref(), &added),
        payload: copy_payload,
        next,
    })
}

impl super::Stream {
    /// What storing a message at `seq` does to the schedules: a schedule
    /// takes over its subject; any other message there, unless a fired
    /// copy, ends the subject's schedule; a fired copy says when its
    /// schedule is due next. Called as messages are stored and again, in
    /// order, when a stream is recovered.
    pub(super) fn track_schedule(&mut self, seq: u64, subject: &str, h: Option<&[u8]>, ts: i64) {
        if !self.config.allow_msg_schedules {
            return;
        }
        let scheduler = h
            .and_then(|h| headers::get(h, SCHEDULER))
            .filter(|s| !s.is_empty());
        match h.map(|h| due(h, ts, ts)) {
            Some(Ok(Some(due))) => self.schedules.add(seq, subject, due.at),
            _ if scheduler.is_none() => self.schedules.remove_subject(subject),
            _ => {}
        }
        let next = h
            .and_then(|h| headers::get(h, NEXT))
            .filter(|n| *n != PURGE);
        if let (Some(next), Some(scheduler)) = (next, scheduler) {
            if let Some(at) = crate::api::time::parse_signed(next) {
                self.schedules.update(scheduler, at);
            }
        }
    }

    /// A stored message with `Nats-Schedule-Next: purge` ends the schedule
    /// its `Nats-Scheduler` names: the schedule's subject is purged.
    pub(super) fn end_schedule(&mut self, h: Option<&[u8]>) -> Result<(), ApiError> {
        // Only a stream with schedules, or one that copies another's,
        // can hold such a message (elsewhere a publish of one is refused).
        let can_hold = self.config.allow_msg_schedules || !self.sources.is_empty();
        let Some(h) = h.filter(|_| can_hold) else {
            return Ok(());
        };
        if headers::get(h, NEXT) != Some(PURGE) {
            return Ok(());
        }
        let Some(scheduler) = headers::get(h, SCHEDULER).filter(|s| !s.is_empty()) else {
            return Ok(());
        };
        let scheduler = scheduler.to_string();
        self.purge_inner(&store::Purge {
            filter: Some(scheduler.clone()),
            keep: None,
            seq: None,
        })?;
        self.schedules.remove_subject(&scheduler);
        Ok(())
    }

    /// Fires every schedule due at `now`, in sequence order.
    pub(super) fn fire_schedules(&mut self, now: i64) {
        for (at, seq) in self.schedules.due_by(now, super::EXPIRE_BATCH) {
            self.fire_one(seq, at, now);
        }
    }

    /// Publishes what the schedule at `seq`, due `at`, makes, and moves it
    /// on: to its next time, or (fired once) away. A stored schedule that
    /// is gone or no longer valid is forgotten. A copy the stream refuses
    /// is retried a second later when the schedule fires only once.
    fn fire_one(&mut self, seq: u64, at: i64, now: i64) {
        let Some(subject) = self.schedules.subject_at(seq).map(str::to_string) else {
            return;
        };
        // A read that fails changes nothing here (the store reports the
        // damage and the replica is repaired); only a schedule that is
        // gone is forgotten.
        let Ok(schedule) = self.store.get(seq) else {
            return;
        };
        let Some((h, body)) = schedule
            .as_ref()
            .and_then(|m| Some((m.headers.as_ref()?, &m.payload)))
        else {
            return self.schedules.remove_seq(seq);
        };
        let source = headers::get(h, SOURCE).filter(|s| !s.is_empty());
        let source_last = match source {
            Some(source) => match self.store.last_matching(&store::Filter::one(source)) {
                Ok(last) => last,
                Err(_) => return,
            },
            None => None,
        };
        let source_last = source_last
            .as_ref()
            .map(|m| (m.headers.as_deref(), &m.payload));
        let Some(fired) = fire(&subject, (h, body), source_last, at, now) else {
            return self.schedules.remove_seq(seq);
        };
        let copy = super::Incoming {
            subject: &fired.subject,
            headers: Some(&fired.headers),
            payload: &fired.payload,
        };
        let stored = self.try_publish(copy, now, true).is_ok();
        match (stored, fired.next.repeat) {
            (_, true) => self.schedules.update(&subject, fired.next.at),
            (true, false) => self.schedules.remove_subject(&subject),
            (false, false) => self.schedules.update(&subject, now + SEC),
        }
    }

    /// The schedule headers of a message a client published, in
    /// nats-server's order. `Ok(true)`: a schedule without `Nats-Rollup`,
    /// which gets `Nats-Rollup: sub` (one schedule per subject).
    pub(super) fn check_schedule(
        &self,
        h: &[u8],
        subject: &str,
        now: i64,
    ) -> Result<bool, ApiError> {
        // Every header read below starts so (`Nats-Scheduler` too): one
        // pass over a publish's headers when it has none of them.
        if !headers::has_prefix(h, SCHEDULE) {
            return Ok(false);
        }
        let allowed = self.config.allow_msg_schedules;
        let disabled = || E::MESSAGE_SCHEDULES_DISABLED.err();
        let mut add_rollup = false;
        match due(h, now, now) {
            Err(e) => return Err(if allowed { e } else { disabled() }),
            Ok(None) => {}
            Ok(Some(_)) if !allowed => return Err(disabled()),
            Ok(Some(_)) => add_rollup = self.check_schedule_fields(h, subject)?,
        }
        let scheduler = headers::get(h, SCHEDULER).unwrap_or("");
        match headers::get(h, NEXT).unwrap_or("") {
            "" if scheduler.is_empty() => {}
            "" => return Err(E::MESSAGE_SCHEDULES_SCHEDULER_INVALID.err()),
            PURGE => {
                if scheduler.is_empty()
                    || scheduler == subject
                    || !subjects::is_valid_publish_subject(scheduler.as_bytes())
                {
                    return Err(E::MESSAGE_SCHEDULES_SCHEDULER_INVALID.err());
                }
                if !allowed {
                    return Err(disabled());
                }
                // Ending something that is not a schedule is refused; ending
                // nothing passes (nats-server stays compatible so).
                let last = self
                    .store
                    .last_matching(&store::Filter::one(scheduler))
                    .map_err(super::store_err)?;
                let is_schedule = |m: &store::StoredMsg| {
                    m.headers
                        .as_deref()
                        .and_then(|h| headers::get(h, SCHEDULE))
                        .is_some_and(|p| !p.is_empty())
                };
                if last.is_some_and(|m| !is_schedule(&m)) {
                    return Err(E::MESSAGE_SCHEDULES_SCHEDULER_INVALID.err());
                }
            }
            _ => return Err(E::MESSAGE_SCHEDULES_SCHEDULER_INVALID.err()),
        }
        Ok(add_rollup)
    }

    /// A valid schedule's TTL, rollup, target and source headers.
    fn check_schedule_fields(&self, h: &[u8], subject: &str) -> Result<bool, ApiError> {
        let ttl = headers::get(h, TTL).unwrap_or("");
        if !ttl.is_empty() && super::parse_ttl(ttl).is_err() {
            return Err(E::MESSAGE_SCHEDULES_TTL_INVALID.err());
        }
        let rollup = headers::get(h, ROLLUP).unwrap_or("");
        if !rollup.is_empty() && rollup != "sub" {
            return Err(E::MESSAGE_SCHEDULES_ROLLUP_INVALID.err());
        }
        if !ttl.is_empty() && !self.config.allow_msg_ttl {
            return Err(E::MESSAGE_TTL_DISABLED.err());
        }
        let valid = |s: &str| subjects::is_valid_publish_subject(s.as_bytes());
        let target = headers::get(h, TARGET).unwrap_or("");
        if target.is_empty() || !valid(target) || target == subject {
            return Err(E::MESSAGE_SCHEDULES_TARGET_INVALID.err());
        }
        let source = headers::get(h, SOURCE).unwrap_or("");
        if !source.is_empty() && (source == target || source == subject || !valid(source)) {
            return Err(E::MESSAGE_SCHEDULES_SOURCE_INVALID.err());
        }
        let in_stream = |s: &str| {
            self.config
                .subjects
                .iter()
                .any(|own| subjects::subjects_collide(own.as_bytes(), s.as_bytes()))
        };
        if !in_stream(target) {
            return Err(E::MESSAGE_SCHEDULES_TARGET_INVALID.err());
        }
        if !source.is_empty() && !in_stream(source) {
            return Err(E::MESSAGE_SCHEDULES_SOURCE_INVALID.err());
        }
        match headers::get(h, headers::ROLLUP).unwrap_or("") {
            "" => Ok(true),
            r if r.eq_ignore_ascii_case("sub") => Ok(false),
            _ => Err(E::MESSAGE_SCHEDULES_ROLLUP_INVALID.err()),
        }
    }
}

/// The live schedules: each schedule subject's message and when it is
/// due next.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Vec<(String, u64, i64)>", into = "Vec<(String, u64, i64)>")]
pub struct Schedules {
    by_subject: BTreeMap<String, (u64, i64)>,
    by_due: BTreeSet<(i64, u64)>,
    subject_of: BTreeMap<u64, String>,
}

impl From<Vec<(String, u64, i64)>> for Schedules {
    fn from(list: Vec<(String, u64, i64)>) -> Self {
        let mut schedules = Schedules::default();
        for (subject, seq, at) in list {
            schedules.add(seq, &subject, at);
        }
        schedules
    }
}

impl From<Schedules> for Vec<(String, u64, i64)> {
    fn from(schedules: Schedules) -> Self {
        schedules
            .by_subject
            .into_iter()
            .map(|(subject, (seq, at))| (subject, seq, at))
            .collect()
    }
}

impl Schedules {
    /// `subject`'s schedule is now the message at `seq`, due `at`.
    pub fn add(&mut self, seq: u64, subject: &str, at: i64) {
        self.remove_subject(subject);
        self.by_subject.insert(subject.to_string(), (seq, at));
        self.by_due.insert((at, seq));
        self.subject_of.insert(seq, subject.to_string());
        self.assert_consistent();
    }

    /// `subject`'s schedule is due again at `at`.
    pub fn update(&mut self, subject: &str, at: i64) {
        if let Some((seq, due)) = self.by_subject.get_mut(subject) {
            self.by_due.remove(&(*due, *seq));
            *due = at;
            self.by_due.insert((at, *seq));
        }
        self.assert_consistent();
    }

    pub fn remove_subject(&mut self, subject: &str) {
        if let Some((seq, at)) = self.by_subject.remove(subject) {
            self.by_due.remove(&(at, seq));
            self.subject_of.remove(&seq);
        }
        self.assert_consistent();
    }

    /// The message at `seq` is gone; so is its schedule, if it was one.
    pub fn remove_seq(&mut self, seq: u64) {
        if let Some(subject) = self.subject_of.get(&seq).cloned() {
            self.remove_subject(&subject);
        }
    }

    /// The schedule subject whose message is at `seq`.
    pub fn subject_at(&self, seq: u64) -> Option<&str> {
        self.subject_of.get(&seq).map(String::as_str)
    }

    /// Up to `limit` schedules due at `now`, as (due, seq), in sequence
    /// order (nats-server fires them so).
    pub fn due_by(&self, now: i64, limit: usize) -> Vec<(i64, u64)> {
        let mut due: Vec<(i64, u64)> = self
            .by_due
            .iter()
            .take_while(|(at, _)| *at <= now)
            .take(limit)
            .copied()
            .collect();
        due.sort_by_key(|&(_, seq)| seq);
        due
    }

    pub fn next_deadline(&self) -> Option<i64> {
        self.by_due.first().map(|&(at, _)| at)
    }

    pub fn is_empty(&self) -> bool {
        self.by_subject.is_empty()
    }

    /// The three views hold the same schedules.
    fn assert_consistent(&self) {
        debug_assert_eq!(self.by_subject.len(), self.by_due.len());
        debug_assert_eq!(self.by_subject.len(), self.subject_of.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(text: &str) -> i64 {
        crate::api::time::parse_signed(text).unwrap()
    }

    fn hdr(pairs: &[(&str, &str)]) -> Bytes {
        headers::build(None, pairs)
    }

    #[test]
    fn patterns_fire_as_in_nats_server() {
        let ts = ns("2026-01-01T10:00:00.4Z");
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<(&'a str, bool)>);
        let cases: &[Case] = &[
            (
                &[(SCHEDULE, "@at 2009-11-10T23:00:00Z")],
                Some(("2009-11-10T23:00:00Z", false)),
            ),
            (
                &[(SCHEDULE, "@at 2030-01-01T01:00:00+01:00")],
                Some(("2030-01-01T00:00:00Z", false)),
            ),
            (
                &[(SCHEDULE, "@every 5m")],
                Some(("2026-01-01T10:05:00Z", true)),
            ),
            (
                &[(SCHEDULE, "@hourly")],
                Some(("2026-01-01T11:00:00Z", true)),
            ),
            (
                &[(SCHEDULE, "@daily")],
                Some(("2026-01-02T00:00:00Z", true)),
            ),
            (
                &[(SCHEDULE, "0 0 12 * * *"), (TIME_ZONE, "Europe/Amsterdam")],
                Some(("2026-01-01T12:00:00+01:00", true)),
            ),
            (&[(TARGET, "orders")], None),
        ];
        for (pairs, want) in cases {
            let got = due(&hdr(pairs), ts, ts).unwrap();
            let got = got.as_ref().map(|d| (d.text.as_str(), d.repeat));
            assert_eq!(got, *want, "{pairs:?}");
        }
    }

    #[test]
    fn bad_patterns_and_zones_are_refused() {
        let ts = ns("2026-01-01T10:00:00Z");
        let cases: &[(&[(&str, &str)], u16)] = &[
            (&[(SCHEDULE, "@every 500ms")], 10189),
            (&[(SCHEDULE, "@every soon")], 10189),
            (&[(SCHEDULE, "@at tomorrow")], 10189),
            (&[(SCHEDULE, "* * * *")], 10189),
            (
                &[(SCHEDULE, "@at 2030-01-01T00:00:00Z"), (TIME_ZONE, "UTC")],
                10189,
            ),
            (&[(SCHEDULE, "@every 1m"), (TIME_ZONE, "UTC")], 10189),
            (&[(SCHEDULE, "@hourly"), (TIME_ZONE, "")], 10223),
            (&[(SCHEDULE, "@hourly"), (TIME_ZONE, "Mars/Olympus")], 10223),
            (&[(SCHEDULE, "@hourly"), (TIME_ZONE, "+02:00")], 10223),
        ];
        for (pairs, code) in cases {
            let err = due(&hdr(pairs), ts, ts).unwrap_err();
            assert_eq!(err.err_code, *code, "{pairs:?}");
        }
    }

    #[test]
    fn a_long_missed_repeat_fires_once_then_after_now() {
        let h = hdr(&[(SCHEDULE, "@every 1m")]);
        let long_ago = ns("2026-01-01T00:00:00Z");
        let now = ns("2026-01-01T05:00:00.2Z");
        let due = due(&h, long_ago, now).unwrap().unwrap();
        assert_eq!(due.text, "2026-01-01T05:01:00Z");
    }

    #[test]
    fn firing_copies_the_body_and_rewrites_the_headers() {
        let schedule = hdr(&[
            (SCHEDULE, "@every 1m"),
            (TARGET, "orders"),
            (TTL, "5m"),
            (ROLLUP, "sub"),
            (headers::MSG_ID, "x"),
            (headers::ROLLUP, "sub"),
            ("Nats-Expected-Last-Sequence", "4"),
            ("App", "kept"),
        ]);
        let at = ns("2026-01-01T10:01:00Z");
        let body = Bytes::from_static(b"order");
        let fired = fire("sched.a", (&schedule, &body), None, at, at).unwrap();
        assert_eq!(fired.subject, "orders");
        assert_eq!(fired.payload, body);
        let want = hdr(&[
            ("App", "kept"),
            (SCHEDULER, "sched.a"),
            (NEXT, "2026-01-01T10:02:00Z"),
            (headers::TTL, "5m"),
            (headers::ROLLUP, "sub"),
        ]);
        assert_eq!(fired.headers, want);

        let sampled = Bytes::from_static(b"21.5C");
        let src_hdr = hdr(&[("Unit", "C")]);
        let fired = fire(
            "sched.a",
            (&schedule, &body),
            Some((Some(&src_hdr), &sampled)),
            at,
            at,
        )
        .unwrap();
        assert_eq!(fired.payload, sampled);
        assert_eq!(headers::get(&fired.headers, "Unit"), Some("C"));
        assert_eq!(headers::get(&fired.headers, "App"), None);

        let once = hdr(&[(SCHEDULE, "@at 2026-01-01T10:00:00Z"), (TARGET, "orders")]);
        let fired = fire("sched.b", (&once, &body), None, at, at).unwrap();
        assert_eq!(headers::get(&fired.headers, NEXT), Some(PURGE));
        let no_target = hdr(&[(SCHEDULE, "@every 1m")]);
        assert_eq!(fire("sched.c", (&no_target, &body), None, at, at), None);
    }

    #[test]
    fn the_index_keeps_one_schedule_per_subject() {
        let mut schedules = Schedules::default();
        schedules.add(1, "a", 50);
        schedules.add(2, "b", 10);
        schedules.add(3, "a", 30);
        assert_eq!(schedules.due_by(100, 10), vec![(10, 2), (30, 3)]);
        assert_eq!(schedules.next_deadline(), Some(10));
        schedules.update("b", 70);
        assert_eq!(schedules.due_by(60, 10), vec![(30, 3)]);
        schedules.remove_seq(3);
        assert_eq!(schedules.subject_at(3), None);
        let json = serde_json::to_string(&schedules).unwrap();
        assert_eq!(serde_json::from_str::<Schedules>(&json).unwrap(), schedules);
    }
}
