//! A connection's subject permissions, compiled once at CONNECT from its
//! user's `permissions` into tries, and checked as nats-server's
//! `client.go` checks them:
//! - a publish must match `publish.allow` (when there is one) and no
//!   `publish.deny`, or be the reply subject of a request this client
//!   received, under `allow_responses`;
//! - a subscription must match `subscribe.allow` and no
//!   `subscribe.deny`, queue groups included (`"subject queue"`);
//! - a wildcard or queue subscription that overlaps a deny entry is
//!   allowed, but the messages the deny names are not delivered to it
//!   (checked on every delivery to a client whose permits deny any
//!   subscription: a subscription the deny names was refused, so only
//!   overlapping ones can match).

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use subjects::{SubResult, Sublist};

use config::options::{Permissions, ResponsePermission, SubjectPermission};

/// Reply grants kept before a sweep for used and expired ones
/// (nats-server's `replyPermLimit`).
const SWEEP_AT: usize = 4096;
/// Grants are also swept at least this often (`replyPruneTime`).
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What one connection may do. Shared by its reader (publish and
/// subscribe checks) and by publishers delivering to it (deny filter,
/// reply grants).
pub struct Permits {
    /// The permissions as configured, for who asks (`USER.INFO`).
    source: Permissions,
    publish: Rules,
    subscribe: Rules,
    response: Option<ResponsePermission>,
    replies: Mutex<Replies>,
}

/// An allow and a deny trie; a missing one does not restrict.
#[derive(Default)]
struct Rules {
    allow: Option<Sublist<()>>,
    deny: Option<Sublist<()>>,
}

/// Reply subjects this client may publish to once, because a request
/// carrying them was delivered to it.
struct Replies {
    granted: hashbrown::HashMap<Box<[u8]>, Grant>,
    added_since_sweep: usize,
    last_sweep: Option<Instant>,
}

struct Grant {
    at: Instant,
    used: i64,
}

impl Permits {
    /// nats-server's `publicPermissions`: both lists of publish and
    /// subscribe (each key left out when empty; subscribe entries with
    /// their queue), and `responses` when granted (`ttl` in ns).
    pub fn public(&self) -> serde_json::Value {
        let side = |sp: &Option<SubjectPermission>| {
            let mut m = serde_json::Map::new();
            if let Some(sp) = sp {
                if let Some(allow) = sp.allow.as_ref().filter(|a| !a.is_empty()) {
                    m.insert("allow".into(), allow.clone().into());
                }
                if !sp.deny.is_empty() {
                    m.insert("deny".into(), sp.deny.clone().into());
                }
            }
            serde_json::Value::Object(m)
        };
        let mut out = serde_json::Map::new();
        out.insert("publish".into(), side(&self.source.publish));
        out.insert("subscribe".into(), side(&self.source.subscribe));
        if let Some(r) = &self.source.response {
            let ttl = r.expires.map_or(0, |d| d.as_nanos() as u64);
            out.insert(
                "responses".into(),
                serde_json::json!({"max": r.max_msgs, "ttl": ttl}),
            );
        }
        serde_json::Value::Object(out)
    }

    pub fn new(p: &Permissions) -> Self {
        let publish = p.publish.as_ref().map(|sp| rules(sp, false));
        let subscribe = p.subscribe.as_ref().map(|sp| rules(sp, true));
        Permits {
            source: p.clone(),
            publish: publish.unwrap_or_default(),
            subscribe: subscribe.unwrap_or_default(),
            response: p.response.clone(),
            replies: Mutex::new(Replies {
                granted: hashbrown::HashMap::new(),
                added_since_sweep: 0,
                last_sweep: None,
            }),
        }
    }

    /// Whether the publish rules alone allow `subject`: the answer a
    /// connection may cache.
    pub fn publish_allowed(&self, subject: &[u8]) -> bool {
        let allowed = self
            .publish
            .allow
            .as_ref()
            .is_none_or(|allow| !allow.matches(subject).psubs.is_empty());
        allowed
            && self
                .publish
                .deny
                .as_ref()
                .is_none_or(|deny| deny.matches(subject).psubs.is_empty())
    }

    /// Whether `allow_responses` lets this client publish to `subject`
    /// now, using up one reply of its grant if so.
    pub fn reply_allowed(&self, subject: &[u8], now: Instant) -> bool {
        let Some(rp) = &self.response else {
            return false;
        };
        let mut replies = self.replies.lock();
        let Some(grant) = replies.granted.get_mut(subject) else {
            return false;
        };
        grant.used += 1;
        let spent = rp.max_msgs > 0 && grant.used > rp.max_msgs;
        let expired = rp.expires.is_some_and(|ttl| now - grant.at > ttl);
        if spent || expired {
            replies.granted.remove(subject);
            return false;
        }
        true
    }

    /// Whether this client earns reply grants from the requests it gets.
    pub fn grants_replies(&self) -> bool {
        self.response.is_some()
    }

    /// A request with reply subject `reply` was delivered to this client:
    /// it may answer it, unless its publish rules already allow that.
    pub fn grant_reply(&self, reply: &[u8], now: Instant) {
        if self.response.is_none() || self.publish_allowed(reply) {
            return;
        }
        let mut replies = self.replies.lock();
        replies
            .granted
            .insert(reply.into(), Grant { at: now, used: 0 });
        replies.added_since_sweep += 1;
        let due = replies
            .last_sweep
            .is_none_or(|at| now.saturating_duration_since(at) > SWEEP_EVERY);
        if replies.added_since_sweep > SWEEP_AT || due {
            self.sweep(&mut replies, now);
        }
    }

    /// Drops grants used up or expired (nats-server's `pruneReplyPerms`).
    fn sweep(&self, replies: &mut Replies, now: Instant) {
        let rp = self.response.as_ref().expect("only grants are swept");
        replies.granted.retain(|_, g| {
            let spent = rp.max_msgs > 0 && g.used >= rp.max_msgs;
            let expired = rp.expires.is_some_and(|ttl| now - g.at > ttl);
            !(spent || expired)
        });
        replies.added_since_sweep = 0;
        replies.last_sweep = Some(now);
    }

    /// Whether this client may subscribe to `subject`, in `queue` if
    /// given (nats-server's `canSubscribe`).
    pub fn subscribe_allowed(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        let mut allowed = true;
        if let Some(allow) = &self.subscribe.allow {
            let found = allow.matches(subject);
            allowed = !found.psubs.is_empty();
            if let Some(q) = queue.filter(|_| !found.qsubs.is_empty()) {
                // A queue named in the allow list is allowed even where
                // the plain subject is not.
                allowed = queue_matches(q, &found);
            }
        }
        if allowed {
            if let Some(deny) = &self.subscribe.deny {
                let found = deny.matches(subject);
                allowed = found.psubs.is_empty();
                if let Some(q) = queue.filter(|_| allowed && !found.qsubs.is_empty()) {
                    allowed = !queue_matches(q, &found);
                }
            }
        }
        allowed
    }

    /// Whether deliveries to this client must be checked against a
    /// subscribe deny list.
    pub fn filters_deliveries(&self) -> bool {
        self.subscribe.deny.is_some()
    }

    /// Whether a message on `subject` must not reach a subscription of
    /// this client in `queue` (nats-server's `checkDenySub`).
    pub fn denies_delivery(&self, subject: &[u8], queue: Option<&[u8]>) -> bool {
        let Some(deny) = &self.subscribe.deny else {
            return false;
        };
        let found = deny.matches(subject);
        if !found.psubs.is_empty() {
            return true;
        }
        match queue {
            Some(q) if !found.qsubs.is_empty() => queue_matches(q, &found),
            _ => false,
        }
    }
}

/// Builds the tries of one `publish` or `subscribe` block. Entries were
/// checked when the config was read; one that does not fit a trie is
/// left out of it, so it allows nothing and denies nothing.
fn rules(sp: &SubjectPermission, queues: bool) -> Rules {
    let build = |entries: &[String]| {
        let mut trie = Sublist::new();
        for (key, entry) in entries.iter().enumerate() {
            let (subject, queue) = if queues {
                split_queue(entry)
            } else {
                (entry.as_str(), None)
            };
            let _ = trie.insert(subject.as_bytes(), queue.map(str::as_bytes), key as u64, ());
        }
        trie
    };
    // An empty subscribe allow list restricts nothing, as in nats-server;
    // an empty publish allow list (from `allow_responses`) allows nothing.
    let allow = match &sp.allow {
        Some(list) if queues && list.is_empty() => None,
        Some(list) => Some(build(list)),
        None => None,
    };
    let deny = (!sp.deny.is_empty()).then(|| build(&sp.deny));
    Rules { allow, deny }
}

/// `"subject queue"` into its parts; a bare subject has no queue.
fn split_queue(entry: &str) -> (&str, Option<&str>) {
    let mut parts = entry.split_whitespace();
    let subject = parts.next().unwrap_or("");
    (subject, parts.next())
}

/// Whether `queue` is one of the queue entries found (nats-server's
/// `queueMatches`): by name, or by a queue entry with wildcards. No
/// queue entries means any queue.
fn queue_matches(queue: &[u8], found: &SubResult<()>) -> bool {
    found.qsubs.is_empty()
        || found.qsubs.iter().any(|(name, _)| {
            &name[..] == queue
                || (!subjects::is_literal(name) && subjects::subject_matches_filter(queue, name))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perms(
        publish: Option<(Option<&[&str]>, &[&str])>,
        subscribe: Option<(Option<&[&str]>, &[&str])>,
    ) -> Permits {
        let sp = |(allow, deny): (Option<&[&str]>, &[&str])| SubjectPermission {
            allow: allow.map(|a| a.iter().map(|s| s.to_string()).collect()),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        };
        Permits::new(&Permissions {
            publish: publish.map(sp),
            subscribe: subscribe.map(sp),
            response: None,
        })
    }

    #[test]
    fn publish_allow_then_deny() {
        let p = perms(Some((Some(&["foo.>", "bar"]), &["foo.secret"])), None);
        for (subject, want) in [
            ("foo.a", true),
            ("foo.a.b", true),
            ("bar", true),
            ("foo.secret", false),
            ("baz", false),
            ("foo", false),
        ] {
            assert_eq!(p.publish_allowed(subject.as_bytes()), want, "{subject}");
        }
        let deny_only = perms(Some((None, &[">"])), None);
        assert!(!deny_only.publish_allowed(b"anything"));
        let nothing = perms(None, None);
        assert!(nothing.publish_allowed(b"anything"));
    }

    #[test]
    fn subscribe_with_queues() {
        // allow "foo" plain; "bar" only in queue v1; deny queue "bad" on baz.
        let p = perms(
            None,
            Some((Some(&["foo", "bar v1", "baz", "q.* v.*"]), &["baz bad"])),
        );
        for (subject, queue, want) in [
            ("foo", None, true),
            ("foo", Some("any"), true),
            ("bar", None, false),
            ("bar", Some("v1"), true),
            ("bar", Some("v2"), false),
            ("baz", Some("good"), true),
            ("baz", Some("bad"), false),
            ("q.x", Some("v.one"), true),
            ("q.x", Some("w"), false),
            ("other", None, false),
        ] {
            assert_eq!(
                p.subscribe_allowed(subject.as_bytes(), queue.map(str::as_bytes)),
                want,
                "{subject} {queue:?}"
            );
        }
    }

    #[test]
    fn deny_filters_overlapping_wildcards() {
        let p = perms(None, Some((None, &["foo.secret"])));
        assert!(p.subscribe_allowed(b"foo.*", None));
        assert!(!p.subscribe_allowed(b"foo.secret", None));
        assert!(p.filters_deliveries());
        assert!(!perms(None, Some((Some(&["a"]), &[]))).filters_deliveries());
        assert!(p.denies_delivery(b"foo.secret", None));
        assert!(!p.denies_delivery(b"foo.open", None));
    }

    #[test]
    fn reply_grants_are_used_up_and_expire() {
        let p = Permits::new(&Permissions {
            publish: Some(SubjectPermission {
                allow: Some(vec![]),
                deny: vec![],
            }),
            subscribe: None,
            response: Some(ResponsePermission {
                max_msgs: 2,
                expires: Some(Duration::from_secs(60)),
            }),
        });
        let t0 = Instant::now();
        assert!(!p.publish_allowed(b"_INBOX.a"));
        assert!(!p.reply_allowed(b"_INBOX.a", t0), "no request yet");
        p.grant_reply(b"_INBOX.a", t0);
        assert!(p.reply_allowed(b"_INBOX.a", t0));
        assert!(p.reply_allowed(b"_INBOX.a", t0));
        assert!(!p.reply_allowed(b"_INBOX.a", t0), "two replies allowed");
        p.grant_reply(b"_INBOX.b", t0);
        let late = t0 + Duration::from_secs(61);
        assert!(!p.reply_allowed(b"_INBOX.b", late), "expired");
    }
}
