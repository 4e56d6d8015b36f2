//! Routing through imports, on the publisher's task: the three ways a
//! message crosses from one account's subject space to another's, and
//! nothing else does (nats-server's `addShadowSubscriptions`,
//! `processServiceImport` and `processServiceImportResponse`).
//!
//! - **Stream imports.** A client subscription in an account that imports
//!   a stream gets a *shadow* in the exporter's trie, on the exporter's
//!   subject for it ([`add_shadows`]). A message published there reaches
//!   the shadow, which delivers it to the subscriber under the importer's
//!   subject. The shadow is the exporter's interest, so routes hear of it
//!   in the exporter's account, and the message crosses a route in the
//!   exporter's account; it is mapped only on the subscriber's server.
//! - **Service imports.** A client's publish on an imported service's
//!   subject, after its own account's subscribers got it, is published
//!   again in the exporter's account on the exporter's subject
//!   ([`request`]), with a reply subject of a path opened in the
//!   exporter's `Responses`; and on again if the exporter imports that
//!   subject in turn (a chain), each hop's reply path leading to the
//!   one before.
//! - **Replies.** This server's subscription to its reply paths in the
//!   exporter (`_R_.xxxxxx.>`, told to routes so replies come back to the
//!   server that opened them) delivers a reply to the requester's reply
//!   subject in the requester's account ([`Delivery::reply`]).
//!
//! Which imports an account has is `account::imports`, built from the
//! options by `Server::configure_accounts` at start and by each reload.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::account::imports::Pending;
use crate::account::mappings::Mapped;
use crate::client::{Account, Client, Message, Subscription, Via};
use crate::conn::delivery::Delivery;
use crate::server::Server;

/// The header a request imported into another account carries: who asked
/// (nats-server's `ClientInfoHdr`).
pub const REQUEST_INFO: &str = "Nats-Request-Info";

/// Gives every live client subscription the shadows its account's
/// imports call for now (after `Server::configure_accounts`).
pub fn reshadow(server: &Server) {
    let mut clients: Vec<Arc<Client>> = server.clients.lock().values().cloned().collect();
    // The server's own subscriptions have shadows too.
    clients.push(server.system_client.clone());
    for client in clients.iter().filter(|c| !c.is_server()) {
        let subs: Vec<Arc<Subscription>> = client.subs.lock().values().cloned().collect();
        for sub in subs {
            remove_shadows(server, &sub);
            add_shadows(server, &sub);
        }
    }
}

/// Gives a client's new subscription its shadows: one in each exporter
/// whose stream its account imports on a subject it meets.
pub fn add_shadows(server: &Server, sub: &Arc<Subscription>) {
    debug_assert!(sub.via.is_none(), "a shadow has no shadows");
    if !sub.takes_imports {
        return;
    }
    let imports = sub.account.imports();
    if imports.streams.is_empty() || sub.is_closed() {
        return;
    }
    let Ok(subject) = std::str::from_utf8(&sub.subject) else {
        return;
    };
    let mut shadows = Vec::new();
    for import in &imports.streams {
        let Some(theirs) = import.shadow_subject(subject) else {
            continue;
        };
        let mut shadow = Subscription::new(
            server.next_sub_key(),
            sub.client.clone(),
            import.from.clone(),
            Bytes::from(theirs),
            sub.queue.clone(),
            sub.sid.clone(),
        );
        // A server subscription's shadow is told to routes as it is.
        shadow.advertised =
            std::sync::atomic::AtomicBool::new(sub.advertised.load(Ordering::Relaxed));
        shadow.via = Some(Via::Shadow {
            parent: sub.clone(),
            import: import.clone(),
        });
        let shadow = Arc::new(shadow);
        let inserted = shadow.account.sublist.write().insert(
            &shadow.subject,
            shadow.queue.as_deref(),
            shadow.key,
            shadow.clone(),
        );
        if inserted.is_ok() {
            server.interest.changed(&shadow.subject);
            server.interest_changed(&shadow, true);
            shadows.push(shadow);
        }
    }
    sub.shadows.lock().extend(shadows);
}

/// Removes a subscription's shadows (it is going, or its account's
/// imports changed).
pub fn remove_shadows(server: &Server, sub: &Subscription) {
    let shadows = std::mem::take(&mut *sub.shadows.lock());
    for shadow in shadows {
        debug_assert!(matches!(shadow.via, Some(Via::Shadow { .. })));
        if server.remove_from_trie(&shadow) {
            server.interest_changed(&shadow, false);
        }
    }
}

/// Where `account`'s mappings send a publish on `subject` on this
/// server; `None` when no mapping covers it.
pub fn mapped(server: &Server, account: &Account, subject: &[u8]) -> Option<Mapped> {
    let mappings = account.mappings()?;
    let subject = std::str::from_utf8(subject).ok()?;
    let cluster = if server.routes.enabled() {
        server.routes.cluster_name().0
    } else {
        String::new()
    };
    mappings.select(subject, &cluster, &mut |n| fastrand::u32(..n))
}

/// A client's publish (before its own account's subscribers get it, as
/// nats-server orders them): if the subject is an imported service's,
/// the request goes on to the exporter. Returns whether anyone there
/// got it.
pub fn request(
    delivery: &mut Delivery,
    server: &Server,
    account: &Arc<Account>,
    client: &Arc<Client>,
    msg: Message<'_>,
) -> bool {
    let asker = Asker {
        server,
        account,
        client,
    };
    forward(delivery, &asker, account, msg, 0, None)
}

/// How much of a client a `ClientInfo` tells.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Detail {
    /// All of it (`share`).
    pub share: bool,
    /// At least the server and cluster it is on.
    pub server: bool,
}

/// The hop a chained request comes from: what its header told, and
/// whether its import shared.
#[derive(Debug, Clone, Copy)]
struct Prior {
    detail: Detail,
    shared: bool,
}

/// Who asked a request, for the `Nats-Request-Info` every hop carries.
struct Asker<'a> {
    server: &'a Server,
    account: &'a Arc<Account>,
    client: &'a Arc<Client>,
}

/// Hops a request may take through service imports: each account's
/// import of a subject that another imports from it. Cycles are refused
/// at load (`config::links`); this bounds a chain regardless.
const MAX_HOPS: usize = 8;

/// One hop of a request, from `account` into the exporter of its import
/// of `msg`'s subject, and on from there when the exporter imports that
/// subject in turn (nats-server follows such chains, its service import
/// being a subscription in the importer's trie). A reply path is opened
/// at each hop, in the exporter, back to the hop before.
///
/// The header is the first hop's all along, as nats-server keeps it,
/// with the middle account as `svc`; a hop whose import shares after
/// one that did not adds the server and cluster (`prior`: the hop
/// before, none for the first).
fn forward(
    delivery: &mut Delivery,
    asker: &Asker<'_>,
    account: &Arc<Account>,
    msg: Message<'_>,
    hops: usize,
    prior: Option<Prior>,
) -> bool {
    debug_assert_eq!(hops == 0, prior.is_none(), "a prior hop past the first");
    let imports = account.imports();
    let mut delivered = false;
    for import in imports.services(msg.subject) {
        delivered |= forward_one(delivery, asker, account, import, msg, hops, prior);
    }
    delivered
}

/// [`forward`] through one of `account`'s service imports.
fn forward_one(
    delivery: &mut Delivery,
    asker: &Asker<'_>,
    account: &Arc<Account>,
    import: &crate::account::imports::ServiceImport<Subscription>,
    msg: Message<'_>,
    hops: usize,
    prior: Option<Prior>,
) -> bool {
    let Ok(subject) = std::str::from_utf8(msg.subject) else {
        return false;
    };
    let exporter = &import.to;
    let server = asker.server;
    // The exporter's mappings apply to what reaches it.
    let requested = import.request.apply(subject);
    let theirs = match mapped(server, exporter, requested.as_bytes()) {
        None => requested,
        Some(Mapped::To(to)) => to,
        Some(Mapped::Dropped) => return false,
    };
    // A trace goes into the exporter only where its export allows it:
    // otherwise a trace-only request stops here, and a delivered one goes
    // on untraced, its `Nats-Trace-Dest` saying so to other servers.
    let mut untraced = None;
    if let Some(trace) = delivery.trace.as_mut() {
        trace.service_import(&exporter.name, subject, &theirs);
        if !import.allow_trace {
            if trace.only {
                return false;
            }
            untraced = delivery.trace.take();
        }
    }
    // Timed, if its export asks and it is sampled; without a reply
    // subject, that is a bad request, reported at once.
    let now = Instant::now();
    let mut tracking = import.latency.as_ref().and_then(|latency| {
        let header = crate::latency::sample(latency, msg.headers)?;
        Some(Box::new(crate::latency::Tracking {
            results: latency.results.clone(),
            requester: Arc::downgrade(asker.client),
            requester_account: asker.account.name.clone(),
            share: import.share,
            header,
            at: now,
            at_unix: crate::latency::unix_now(),
        }))
    });
    if msg.reply.is_none() {
        if let Some(t) = tracking.take() {
            let outcome = crate::latency::Outcome::BadRequest;
            let report = crate::latency::measure(server, &t, outcome, now);
            delivery.publish_latency(exporter, &t.results, &report);
        }
    }
    // A reply in the JetStream ack space is the exporter's own, not a
    // path back (nats-server leaves `$JS.ACK` replies as they are).
    let reply = msg.reply.map(|r| {
        if r.starts_with(b"$JS.ACK.") {
            return Bytes::copy_from_slice(r);
        }
        replies_subscription(server, exporter);
        // A timed path names this server, so that a responder on another
        // server sends its half of the measurement here (only through a
        // system account, as nats-server's `newServiceReply`).
        let mut suffix = String::new();
        if tracking.is_some() {
            crate::latency::sweeper(delivery.server(), exporter);
            if server.opts().system_account().is_some() {
                suffix = format!(".{}.T", crate::latency::node_hash(server));
            }
        }
        let pending = Pending {
            to: account.clone(),
            reply: Bytes::copy_from_slice(r),
            response: import.response,
            threshold: import.threshold,
            last: now,
            tracking: tracking.take(),
        };
        exporter.responses.open(pending, now, &suffix)
    });
    // Past the first hop, the account it came through is named as `svc`.
    let through = prior.map(|_| account.name.as_str());
    let detail = match prior {
        None => Detail {
            share: import.share,
            server: import.share,
        },
        Some(p) => Detail {
            share: p.detail.share,
            server: p.detail.server || (!p.shared && import.share),
        },
    };
    let info = request_info(asker, detail, through);
    // Untraced from here on, here and on every hop after.
    let disabled;
    let base = match untraced {
        Some(_) => {
            disabled =
                protocol::headers::set(msg.headers, crate::trace::DEST, crate::trace::DISABLED);
            Some(&disabled[..])
        }
        None => msg.headers,
    };
    let headers = protocol::headers::set(base, REQUEST_INFO, &info);
    let result = exporter.sublist.read().matches(theirs.as_bytes());
    let forwarded = Message {
        subject: theirs.as_bytes(),
        routed: theirs.as_bytes(),
        reply: reply.as_deref(),
        headers: Some(&headers),
        payload: msg.payload,
    };
    let mut delivered = delivery.route_imported(&result, forwarded, true);
    if hops + 1 < MAX_HOPS && exporter.imports_services() {
        let onward = Message {
            headers: base,
            ..forwarded
        };
        let next = Prior {
            detail,
            shared: import.share,
        };
        delivered |= forward(delivery, asker, exporter, onward, hops + 1, Some(next));
    }
    if let Some(r) = reply.as_deref().filter(|_| !delivered) {
        if let Some(t) = exporter.responses.close(r) {
            let outcome = crate::latency::Outcome::NoDelivery;
            let report = crate::latency::measure(server, &t, outcome, Instant::now());
            delivery.publish_latency(exporter, &t.results, &report);
        }
    }
    if untraced.is_some() {
        delivery.trace = untraced;
    }
    delivered
}

/// The JSON of nats-server's `ClientInfo` that a request carries: the
/// account and round trip time; with `detail.share` who the requester
/// is (`getClientInfo(detailed)`), with `detail.server` at least the
/// server and cluster (`addServerAndClusterInfo`); in its field order.
/// `through`: the account a chained request last went through (`svc`).
fn request_info(asker: &Asker<'_>, detail: Detail, through: Option<&str>) -> String {
    let info = client_info(
        asker.server,
        &asker.account.name,
        asker.client,
        detail,
        through,
    );
    serde_json::Value::Object(info).to_string()
}

/// nats-server's full `ClientInfo` (`getClientInfo(true)`) of the client
/// connection `cid`, as JetStream's API audit reports its requester;
/// `None` for the server itself, a route, or a client gone.
pub fn requester_info(server: &Server, cid: u64) -> Option<serde_json::Value> {
    let client = server.clients.lock().get(&cid).cloned()?;
    if client.is_route {
        return None;
    }
    let account = client.account()?;
    let detail = Detail {
        share: true,
        server: true,
    };
    let mut info = client_info(server, &account.name, &client, detail, None);
    // nats-server's `forAdvisory`: no credentials, no alternates.
    info.remove("jwt");
    info.remove("alts");
    Some(serde_json::Value::Object(info))
}

/// nats-server's `ClientInfo` of `client`, in `account`, as
/// `getClientInfo` tells it (see [`Detail`]); `through`: the account a
/// chained request last went through (`svc`).
pub(crate) fn client_info(
    server: &Server,
    account: &str,
    client: &Client,
    detail: Detail,
    through: Option<&str>,
) -> serde_json::Map<String, serde_json::Value> {
    let share = detail.share;
    debug_assert!(
        !share || detail.server,
        "a full client info names the server"
    );
    let rtt = client.rtt.load(Ordering::Relaxed);
    let mut info = serde_json::Map::new();
    let mut put = |key: &str, value: serde_json::Value| {
        let empty = value.as_str() == Some("") || value.as_u64() == Some(0);
        if !empty {
            info.insert(key.to_string(), value);
        }
    };
    if share {
        let start = crate::client::unix_nanos(client.start) as i64;
        put("start", jsapi::time::rfc3339(start).into());
        put("host", client.addr.ip().to_string().into());
        put("id", client.cid.into());
    }
    put("acc", account.into());
    put("svc", through.unwrap_or_default().into());
    if share {
        let meta = client.meta.lock().clone();
        put("user", meta.user.unwrap_or_default().into());
        put("name", meta.name.into());
        put("lang", meta.lang.into());
        put("ver", meta.version.into());
    }
    put("rtt", rtt.into());
    if detail.server {
        put("server", server.name.clone().into());
        if server.routes.enabled() {
            put("cluster", server.routes.cluster_name().0.into());
        }
    }
    if share {
        let jwt = client.creds.lock().as_ref().and_then(|c| c.jwt.clone());
        put("jwt", jwt.unwrap_or_default().into());
        // A leaf node connection asking is a `Leafnode`, and has no
        // client type (nats-server's `clientTypeString` of a non-client).
        if client.leaf.is_some() {
            put("kind", "Leafnode".into());
        } else {
            put("kind", "Client".into());
            let kind = if client.websocket {
                "websocket"
            } else {
                "nats"
            };
            put("client_type", kind.into());
        }
    }
    info
}

/// This server's subscription to the reply paths of `exporter`, made
/// at its first imported request, and told to routes.
fn replies_subscription(server: &Server, exporter: &Arc<Account>) {
    exporter.reply_sub.get_or_init(|| {
        let subject = exporter.responses.wildcard();
        let key = server.next_sub_key();
        let mut sub = Subscription::new(
            key,
            server.system_client.clone(),
            exporter.clone(),
            Bytes::from(subject),
            None,
            Bytes::from(format!("_sys.{key}")),
        );
        sub.via = Some(Via::Replies);
        sub.advertised.store(true, Ordering::Relaxed);
        let sub = Arc::new(sub);
        let inserted = exporter
            .sublist
            .write()
            .insert(&sub.subject, None, key, sub.clone());
        debug_assert!(inserted.is_ok(), "`_R_.xxxxxx.>` is a valid subject");
        server.interest.changed(&sub.subject);
        server.interest_changed(&sub, true);
        sub
    });
}

impl Delivery {
    /// A reply on one of `sub`'s reply paths (see the module): to the
    /// requester's reply subject, in the requester's account.
    pub(crate) fn reply(&mut self, sub: &Subscription, msg: Message<'_>) -> bool {
        debug_assert!(matches!(sub.via, Some(Via::Replies)));
        let now = Instant::now();
        let Some(taken) = sub.account.responses.take(msg.routed, now) else {
            return false;
        };
        let (to, reply) = (taken.to, taken.reply);
        let result = to.sublist.read().matches(&reply);
        // A JetStream delivery answering a pull keeps the stored
        // message's subject and its ack subject (the exporter's own,
        // reached through an import of it), as nats-server passes them.
        let delivery = msg.subject != msg.routed;
        let back = Message {
            subject: if delivery { msg.subject } else { &reply },
            routed: &reply,
            reply: msg.reply.filter(|r| r.starts_with(b"$JS.ACK.")),
            headers: msg.headers,
            payload: msg.payload,
        };
        let delivered = self.route_imported(&result, back, false);
        if let Some(t) = taken.tracking {
            self.answered(&sub.account, msg.routed, *t, now);
        }
        delivered
    }

    /// A timed request's reply reached its reply path (`path`) here: the
    /// measurement, with the responder if it is this server's client. A
    /// reply from another server's client waits for that server's half
    /// when the path asked for it (see `crate::latency`).
    fn answered(
        &mut self,
        exporter: &Arc<Account>,
        path: &[u8],
        t: crate::latency::Tracking,
        now: Instant,
    ) {
        let server = self.server().clone();
        let publisher = match self.publisher {
            0 => None,
            cid => Some(server.clients.lock().get(&cid).cloned()),
        };
        // Internal (none), this server's client, or another server's.
        let (local, remote) = match publisher {
            None => (None, false),
            Some(Some(c)) if !c.is_server() => (Some(c), false),
            Some(_) => (None, true),
        };
        let by = local.as_ref().map(|c| (&**c, exporter.name.as_str()));
        let outcome = crate::latency::Outcome::Answered { responder: by };
        let m1 = crate::latency::measure(&server, &t, outcome, now);
        if remote && crate::latency::is_tracked_reply(path) {
            let half = crate::account::imports::Half::Reply {
                m1: Box::new(m1),
                results: t.results,
            };
            if let Some((report, results)) = exporter.responses.meet(path, half, now) {
                self.publish_latency(exporter, &results, &report);
            }
            return;
        }
        self.publish_latency(exporter, &t.results, &m1);
    }

    /// Publishes a latency measurement on its results subject in
    /// `exporter`, in the middle of routing the message that ended it.
    pub(crate) fn publish_latency(
        &mut self,
        exporter: &Arc<Account>,
        results: &str,
        report: &crate::latency::Report,
    ) {
        let json = report.json();
        let subject = results.as_bytes();
        let result = exporter.sublist.read().matches(subject);
        let msg = Message {
            subject,
            routed: subject,
            reply: None,
            headers: None,
            payload: &json,
        };
        self.route_imported(&result, msg, false);
    }

    /// A message for `sub`, the shadow of a subscription in an account
    /// that imports a stream: to that subscription, under the
    /// importer's subject.
    pub(crate) fn shadow(&mut self, sub: &Arc<Subscription>, msg: Message<'_>) -> bool {
        let Some(Via::Shadow { parent, import }) = &sub.via else {
            unreachable!("only shadows come here");
        };
        let Ok(routed) = std::str::from_utf8(msg.routed) else {
            return false;
        };
        let shown = import.shown.apply(routed);
        // A JetStream delivery keeps the stored message's subject.
        let subject = if msg.subject == msg.routed {
            shown.as_bytes()
        } else {
            msg.subject
        };
        debug_assert!(
            !Arc::ptr_eq(&parent.account, &sub.account),
            "a shadow listens in another account than its subscription"
        );
        // A trace goes into the importer only where the import allows
        // it: otherwise a trace-only message stops here (counted as
        // delivered, as nats-server counts it), and a delivered one goes
        // on untraced.
        let mut untraced = None;
        if let Some(trace) = self.trace.as_mut() {
            trace.stream_export(&parent.account.name, &shown);
            if !import.allow_trace {
                if trace.only {
                    return true;
                }
                untraced = self.trace.take();
            }
        }
        let parent = parent.clone();
        self.shadowing = Some(sub.clone());
        let delivered = self.deliver(
            &parent,
            Message {
                subject,
                routed: shown.as_bytes(),
                ..msg
            },
        );
        if untraced.is_some() {
            self.trace = untraced;
        }
        delivered
    }
}
