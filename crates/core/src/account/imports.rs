//! What an account takes from others: its stream and service imports,
//! resolved from the config's plain `Import`s to the exporting accounts,
//! with the subject maps each needs; and, on the exporting side, the
//! reply paths its service requests left open (`Responses`).
//!
//! Generic over the subscription type like the rest of `account`; the
//! routing that uses these tables is `crate::imports`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use config::options::{LinkKind, ResponseType};
use parking_lot::Mutex;
use subjects::transform::{tokenize, Transform};

use super::Account;
use crate::latency::Tracking;

/// How one subject space's subjects become another's, for one import.
#[derive(Debug)]
pub enum SubjectMap {
    /// Unchanged (nats-server's `usePub`).
    Same,
    /// Always this subject (a literal import).
    Literal(String),
    Transform(Transform),
}

impl SubjectMap {
    /// From `src` (which the subjects mapped match) to `dest`, where a
    /// `*` of `dest` is `src`'s wildcard at the same position.
    fn new(src: &str, dest: &str) -> Result<SubjectMap, String> {
        if src == dest {
            return Ok(SubjectMap::Same);
        }
        if subjects::is_literal(dest.as_bytes()) {
            return Ok(SubjectMap::Literal(dest.to_string()));
        }
        Transform::new(src, &tokenize(dest)).map(SubjectMap::Transform)
    }

    pub fn apply(&self, subject: &str) -> String {
        match self {
            SubjectMap::Same => subject.to_string(),
            SubjectMap::Literal(to) => to.clone(),
            SubjectMap::Transform(t) => t.apply(subject).unwrap_or_else(|| subject.to_string()),
        }
    }
}

/// A stream the account imports: what `from` publishes on `subject`
/// reaches the account's subscribers on `local`.
#[derive(Debug)]
pub struct StreamImport<S> {
    pub from: Arc<Account<S>>,
    pub subject: String,
    pub local: String,
    /// The exporter's subject → the one subscribers see.
    pub shown: SubjectMap,
    /// The importer's subject → the exporter's: where a subscription's
    /// shadow listens.
    pub back: SubjectMap,
    /// A traced message stays traced into the importer (`allow_trace`).
    pub allow_trace: bool,
}

impl<S> StreamImport<S> {
    /// Where a subscription on `subject` in the importing account listens
    /// in the exporter's, if it meets this import at all.
    pub fn shadow_subject(&self, subject: &str) -> Option<String> {
        let both = subjects::intersection(subject, &self.local)?;
        Some(self.back.apply(&both))
    }
}

/// A service the account imports: a request its clients publish on a
/// subject `local` matches goes to `to` on the exporter's mapped subject.
#[derive(Debug)]
pub struct ServiceImport<S> {
    pub to: Arc<Account<S>>,
    pub local: String,
    /// The importer's subject → the exporter's.
    pub request: SubjectMap,
    pub response: ResponseType,
    pub threshold: Duration,
    /// Requests carry the requester's full client info.
    pub share: bool,
    /// A traced request stays traced in the exporter (its export's
    /// `allow_trace`).
    pub allow_trace: bool,
    /// Requests are timed (the export's `latency`).
    pub latency: Option<Arc<config::options::ServiceLatency>>,
    /// One of the imports every account has from the system account
    /// (`crate::system_imports`), not the config's.
    pub system: bool,
}

/// Everything one account imports.
#[derive(Debug)]
pub struct Imports<S> {
    pub streams: Vec<Arc<StreamImport<S>>>,
    pub services: Vec<ServiceImport<S>>,
}

impl<S> Default for Imports<S> {
    fn default() -> Self {
        Imports {
            streams: Vec::new(),
            services: Vec::new(),
        }
    }
}

impl<S> Imports<S> {
    /// Builds `account`'s imports from the config's, checked at load:
    /// `find` gives the exporting accounts, `export` the exporter's
    /// response settings for a service subject.
    pub fn build(
        account: &str,
        imports: &[config::options::Import],
        exports: &[config::options::Export],
        find: impl Fn(&str) -> Arc<Account<S>>,
    ) -> Imports<S> {
        let mut out = Imports::default();
        for i in imports.iter().filter(|i| i.account == account) {
            let local = i.local_subject();
            // Checked at load (`config::file::links`): the maps build.
            let (Ok(shown), Ok(back)) = (
                SubjectMap::new(&i.subject, local),
                SubjectMap::new(local, &i.subject),
            ) else {
                debug_assert!(false, "an import the config checked: {i:?}");
                continue;
            };
            match i.kind {
                LinkKind::Stream => out.streams.push(Arc::new(StreamImport {
                    from: find(&i.from),
                    subject: i.subject.clone(),
                    local: local.to_string(),
                    shown,
                    back,
                    allow_trace: i.allow_trace,
                })),
                LinkKind::Service => {
                    let export = exports.iter().find(|e| {
                        e.account == i.from
                            && e.kind == LinkKind::Service
                            && subjects::subject_matches_filter(
                                i.subject.as_bytes(),
                                e.subject.as_bytes(),
                            )
                    });
                    let (response, threshold, allow_trace) = export.map_or(
                        (
                            ResponseType::Singleton,
                            config::options::DEFAULT_RESPONSE_THRESHOLD,
                            false,
                        ),
                        |e| (e.response, e.response_threshold, e.allow_trace),
                    );
                    let latency = export.and_then(|e| e.latency.clone()).map(Arc::new);
                    debug_assert!(
                        latency.is_none() || response == ResponseType::Singleton,
                        "only a singleton's latency is tracked (`check_latency`)"
                    );
                    out.services.push(ServiceImport {
                        to: find(&i.from),
                        local: local.to_string(),
                        request: back,
                        response,
                        threshold,
                        share: i.share,
                        allow_trace,
                        latency,
                        system: false,
                    })
                }
            }
        }
        out
    }

    /// The service imports a publish on `subject` goes through, in the
    /// order written: every one whose subject matches, as each of
    /// nats-server's is a subscription in the importer's trie (two
    /// accounts' `$JS.FC.>` imported under one subject both hear a
    /// flow-control reply).
    pub fn services<'a>(
        &'a self,
        subject: &'a [u8],
    ) -> impl Iterator<Item = &'a ServiceImport<S>> + 'a {
        self.services
            .iter()
            .filter(move |s| subjects::subject_matches_filter(subject, s.local.as_bytes()))
    }
}

/// The imports every account has from the system account `system`, as
/// nats-server adds them (`addSystemAccountExports`, `registerSystemImports`):
/// a client of `account` asking `$SYS.REQ.SERVER.PING.CONNZ` or
/// `$SYS.REQ.ACCOUNT.PING.CONNZ` gets its own account's connections from
/// every server, `$SYS.REQ.ACCOUNT.PING.STATZ` its own account's figures,
/// and `$SYS.REQ.USER.INFO` who it is (the system account imports that
/// one from itself).
pub fn system_imports<S>(account: &str, system: &Arc<Account<S>>) -> Vec<ServiceImport<S>> {
    let mut wanted = vec![(
        "$SYS.REQ.USER.INFO".to_string(),
        format!("$SYS.REQ.USER.{account}.INFO"),
        ResponseType::Singleton,
        true,
    )];
    if account != system.name {
        let connz = format!("$SYS.REQ.ACCOUNT.{account}.CONNZ");
        let statz = format!("$SYS.REQ.ACCOUNT.{account}.STATZ");
        for (local, theirs) in [
            ("$SYS.REQ.ACCOUNT.PING.CONNZ", connz.clone()),
            ("$SYS.REQ.SERVER.PING.CONNZ", connz),
            ("$SYS.REQ.ACCOUNT.PING.STATZ", statz),
        ] {
            wanted.push((local.to_string(), theirs, ResponseType::Stream, false));
        }
    }
    wanted
        .into_iter()
        .filter_map(|(local, theirs, response, share)| {
            // An account name that is no subject token has none.
            let request = SubjectMap::new(&local, &theirs).ok()?;
            subjects::is_valid_publish_subject(theirs.as_bytes()).then(|| ServiceImport {
                to: system.clone(),
                local,
                request,
                response,
                threshold: config::options::DEFAULT_RESPONSE_THRESHOLD,
                share,
                allow_trace: false,
                latency: None,
                system: true,
            })
        })
        .collect()
}

/// A reply path a service request left open in the exporting account:
/// a reply there goes to `reply` in `to`.
pub struct Pending<S> {
    pub to: Arc<Account<S>>,
    pub reply: Bytes,
    pub response: ResponseType,
    pub threshold: Duration,
    /// When it was made, or last carried a reply.
    pub last: Instant,
    /// The request is timed (a singleton's only).
    pub tracking: Option<Box<Tracking>>,
}

/// Where a reply goes: [`Responses::take`]'s answer.
pub struct Taken<S> {
    pub to: Arc<Account<S>>,
    pub reply: Bytes,
    /// The request was timed: its reply is the end of the measurement.
    pub tracking: Option<Box<Tracking>>,
}

/// The open reply paths of one exporting account on this server, under
/// its prefix `_R_.xxxxxx.`: a reply subject is the prefix and six more
/// characters, as nats-server's `newServiceReply` makes them.
pub struct Responses<S> {
    prefix: String,
    pending: Mutex<hashbrown::HashMap<Bytes, Pending<S>>>,
    /// Timed requests answered by another server's client: the half of
    /// their measurement that came first, by reply path, waiting for the
    /// other (see [`Responses::meet`]).
    waiting: Mutex<hashbrown::HashMap<Bytes, (Instant, Half)>>,
    swept: Mutex<Instant>,
}

/// One half of a measurement whose responder is another server's client.
pub enum Half {
    /// Measured here, when the reply came: the total.
    Reply {
        m1: Box<crate::latency::Report>,
        results: String,
    },
    /// Measured by the responder's server: the service time and who.
    Remote(Box<crate::latency::Report>),
}

/// How long a half waits for the other.
const HALF_WAITS: Duration = Duration::from_secs(120);

/// nats-server's service reply prefix.
pub const REPLY_PREFIX: &str = "_R_.";

fn base62(n: usize) -> String {
    const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..n)
        .map(|_| DIGITS[fastrand::usize(..DIGITS.len())] as char)
        .collect()
}

impl<S> Default for Responses<S> {
    fn default() -> Self {
        Responses {
            prefix: format!("{REPLY_PREFIX}{}.", base62(6)),
            pending: Mutex::new(hashbrown::HashMap::new()),
            waiting: Mutex::new(hashbrown::HashMap::new()),
            swept: Mutex::new(Instant::now()),
        }
    }
}

impl<S> Responses<S> {
    /// `_R_.xxxxxx.>`: what this server's reply subscription in the
    /// account listens on (told to routes, so replies come back here).
    pub fn wildcard(&self) -> String {
        format!("{}>", self.prefix)
    }

    /// Opens a reply path for one request; returns its reply subject,
    /// which ends in `suffix` (a timed request's `.<server hash>.T`).
    pub fn open(&self, pending: Pending<S>, now: Instant, suffix: &str) -> Bytes {
        debug_assert!(
            pending.tracking.is_none() || pending.response == ResponseType::Singleton,
            "a tracked path closes with its one reply"
        );
        // Clients may not use reply paths as replies (`reserved_reply`),
        // but one may be here: the path of a chain's hop before, or
        // another server's, brought by a leaf node whose own service
        // import asked (nats-server carries `_R_.` over leaf nodes).
        self.sweep(now);
        let mut map = self.pending.lock();
        loop {
            let reply = Bytes::from(format!("{}{}{suffix}", self.prefix, base62(6)));
            if !map.contains_key(&reply) {
                map.insert(reply.clone(), pending);
                return reply;
            }
        }
    }

    /// Where a reply on `subject` goes: the requester's account and
    /// reply subject. A singleton's path closes with its first reply; a
    /// stream's or chunked one's stays until its threshold passes idle.
    pub fn take(&self, subject: &[u8], now: Instant) -> Option<Taken<S>> {
        let mut map = self.pending.lock();
        let p = map.get_mut(subject)?;
        if now.duration_since(p.last) > p.threshold {
            // A tracked one is the sweeper's to report (504).
            if p.tracking.is_none() {
                map.remove(subject);
            }
            return None;
        }
        p.last = now;
        if p.response != ResponseType::Singleton {
            return Some(Taken {
                to: p.to.clone(),
                reply: p.reply.clone(),
                tracking: None,
            });
        }
        let p = map.remove(subject).expect("found above");
        Some(Taken {
            to: p.to,
            reply: p.reply,
            tracking: p.tracking,
        })
    }

    /// The open paths: (reply subject here, requester's account, its
    /// reply subject, whether it is timed), for `/accountz`.
    pub fn list(&self) -> Vec<(Bytes, String, Bytes, bool)> {
        let map = self.pending.lock();
        map.iter()
            .map(|(k, p)| {
                let tracked = p.tracking.is_some();
                (k.clone(), p.to.name.clone(), p.reply.clone(), tracked)
            })
            .collect()
    }

    /// Closes the path of a request nothing in the exporter received;
    /// returns its tracking, if it was timed.
    pub fn close(&self, reply: &[u8]) -> Option<Box<Tracking>> {
        self.pending.lock().remove(reply)?.tracking
    }

    /// Pairs the two halves of a measurement whose responder is another
    /// server's client (nats-server's `m1` and `m2`): the first to come
    /// waits; the second completes it, and the measurement and its
    /// results subject come back. A remote half for no request open
    /// here is dropped.
    pub fn meet(
        &self,
        reply: &[u8],
        half: Half,
        now: Instant,
    ) -> Option<(crate::latency::Report, String)> {
        let mut waiting = self.waiting.lock();
        match (waiting.remove(reply), half) {
            (Some((_, Half::Remote(m2))), Half::Reply { mut m1, results })
            | (Some((_, Half::Reply { mut m1, results })), Half::Remote(m2)) => {
                m1.merge(&m2);
                Some((*m1, results))
            }
            (_, Half::Remote(_)) if !self.pending.lock().contains_key(reply) => None,
            (_, half) => {
                waiting.insert(Bytes::copy_from_slice(reply), (now, half));
                None
            }
        }
    }

    /// Closes the timed paths idle past their threshold, and returns what
    /// they tracked (each a 504 to report); drops halves that waited too
    /// long for the other.
    pub fn expire_tracked(&self, now: Instant) -> Vec<Box<Tracking>> {
        self.waiting
            .lock()
            .retain(|_, (at, _)| now.duration_since(*at) < HALF_WAITS);
        let mut map = self.pending.lock();
        let expired: Vec<Bytes> = map
            .iter()
            .filter(|(_, p)| p.tracking.is_some() && now.duration_since(p.last) > p.threshold)
            .map(|(k, _)| k.clone())
            .collect();
        expired
            .iter()
            .filter_map(|k| map.remove(k)?.tracking)
            .collect()
    }

    /// Reply paths open now.
    pub fn open_count(&self) -> usize {
        self.pending.lock().len()
    }

    /// Closes paths idle past their threshold (nats-server's
    /// `checkExpiredResponses`), at most once a second.
    fn sweep(&self, now: Instant) {
        {
            let mut swept = self.swept.lock();
            if now.duration_since(*swept) < Duration::from_secs(1) {
                return;
            }
            *swept = now;
        }
        // A timed path is left for the sweeper, which reports it (504).
        self.pending
            .lock()
            .retain(|_, p| p.tracking.is_some() || now.duration_since(p.last) <= p.threshold);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_follow_nats_server() {
        let m = |src: &str, dest: &str, s: &str| SubjectMap::new(src, dest).unwrap().apply(s);
        assert_eq!(m("foo.>", "p.foo.>", "foo.a.b"), "p.foo.a.b");
        assert_eq!(m("p.foo.>", "foo.>", "p.foo.a"), "foo.a");
        assert_eq!(m("svc.*", "local.*", "svc.x"), "local.x");
        assert_eq!(m("x.*.*", "y.*.*", "x.1.2"), "y.1.2");
        assert_eq!(m("a.*", "fixed", "a.q"), "fixed");
        assert_eq!(m("a.>", "a.>", "a.q"), "a.q");
    }

    /// A timed request answered on another server: its two halves meet
    /// whichever comes first, merge as nats-server's `merge`, and a
    /// remote half for no request open here is dropped.
    #[test]
    fn latency_halves_meet_in_either_order() {
        use crate::latency::Report;
        let to = Account::<()>::new("B");
        let r = Responses::<()>::default();
        let t0 = Instant::now();
        let open = || Pending {
            to: to.clone(),
            reply: Bytes::from_static(b"_INBOX.x"),
            response: ResponseType::Singleton,
            threshold: Duration::from_secs(2),
            last: t0,
            tracking: None,
        };
        let m1 = || Report {
            service: 1_000,
            ..Report::default()
        };
        let mut responder = serde_json::Map::new();
        responder.insert("rtt".into(), 100.into());
        let m2 = || Report {
            service: 600,
            responder: Some(responder.clone()),
            ..Report::default()
        };
        let reply = |m1: Report| Half::Reply {
            m1: Box::new(m1),
            results: "lat".into(),
        };
        // The reply first, then the responder's half.
        let path = r.open(open(), t0, ".h.T");
        assert!(r.meet(&path, reply(m1()), t0).is_none(), "waits");
        let (merged, results) = r.meet(&path, Half::Remote(Box::new(m2())), t0).unwrap();
        assert_eq!(results, "lat");
        assert_eq!((merged.service, merged.system), (600, 300));
        assert!(merged.responder.is_some());
        // The responder's half first, while the request is open.
        let path = r.open(open(), t0, ".h.T");
        assert!(r.meet(&path, Half::Remote(Box::new(m2())), t0).is_none());
        let (merged, _) = r.meet(&path, reply(m1()), t0).unwrap();
        assert_eq!((merged.service, merged.system), (600, 300));
        // A responder's half for a path never opened here.
        let stray = Half::Remote(Box::new(m2()));
        assert!(r.meet(b"_R_.none.h.T", stray, t0).is_none());
        assert!(
            r.meet(b"_R_.none.h.T", reply(m1()), t0).is_none(),
            "nothing waited"
        );
    }

    #[test]
    fn a_singleton_path_closes_with_its_reply_a_stream_one_with_time() {
        let to = Account::<()>::new("B");
        let r = Responses::<()>::default();
        let t0 = Instant::now();
        let open = |response| Pending {
            to: to.clone(),
            reply: Bytes::from_static(b"_INBOX.x"),
            response,
            threshold: Duration::from_secs(2),
            last: t0,
            tracking: None,
        };
        let one = r.open(open(ResponseType::Singleton), t0, "");
        assert!(one.starts_with(b"_R_.") && one.len() == 17, "{one:?}");
        assert_eq!(r.take(&one, t0).unwrap().reply, &b"_INBOX.x"[..]);
        assert!(r.take(&one, t0).is_none(), "a singleton answers once");
        let many = r.open(open(ResponseType::Stream), t0, "");
        for s in 1..=3 {
            assert!(r.take(&many, t0 + Duration::from_secs(s)).is_some());
        }
        assert!(
            r.take(&many, t0 + Duration::from_secs(6)).is_none(),
            "idle past 2 s"
        );
        assert_eq!(r.open_count(), 0);
    }
}
