//! The protocol between servers on a route connection (nats-server's
//! route.go), without IO: a parser for what a peer sends, encoders for
//! what we send, and the route INFO and CONNECT JSON.
//!
//! Flotilla speaks the subset a nats-server treats as a pre-pooling
//! server: one connection per pair, no compression, no leafnode-origin
//! verbs. Accounts are always named (`$G`, the global account).
//!
//! ```text
//! RS+ <account> <subject> [<queue> <weight>]
//! RS- <account> <subject> [<queue>]
//! RMSG <account> <subject> [reply | + reply q1 q2.. | | q1 q2..] <size>
//! HMSG <account> <subject> [same] <header size> <total size>
//! ```
//!
//! A leaf node connection (nats-server's leafnode.go) speaks the same
//! protocol without the account, which the connection is bound to
//! ([`Dialect::Leaf`]):
//!
//! ```text
//! LS+ <subject> [<queue> <weight>]
//! LS- <subject> [<queue>]
//! LMSG <subject> [reply | + reply q1 q2.. | | q1 q2..] <size>
//! HMSG <subject> [same] <header size> <total size>
//! ```

use bytes::{BufMut, BytesMut};
use memchr::memchr;
use serde::{Deserialize, Serialize};

use crate::parser::parse_size;

/// The one account flotilla has.
pub const GLOBAL_ACCOUNT: &[u8] = b"$G";

/// Routes carry whatever a client could publish on any server, so the
/// payload limit is generous; it only bounds what one bad peer can make
/// us buffer.
pub const MAX_ROUTED_MESSAGE: usize = 64 << 20;

/// Which of the two server-to-server protocols a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Routes: every interest line and message names its account.
    Route,
    /// Leaf nodes: the connection is bound to one account, never named;
    /// [`RouteOp::Sub`], [`RouteOp::Unsub`] and [`RoutedMsg`] carry an
    /// empty account.
    Leaf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteOp<'a> {
    Connect(&'a [u8]),
    Info(&'a [u8]),
    Ping,
    Pong,
    Ok,
    Err(&'a [u8]),
    Sub {
        account: &'a [u8],
        subject: &'a [u8],
        queue: Option<&'a [u8]>,
        weight: u32,
    },
    Unsub {
        account: &'a [u8],
        subject: &'a [u8],
        queue: Option<&'a [u8]>,
    },
    Msg(RoutedMsg<'a>),
    /// `RAFT <json>`: the first line of a flotilla Raft transport
    /// connection, which shares the route port.
    Raft(&'a [u8]),
    /// Leafnode-origin and gateway interest verbs (`LS+`, `LS-`, `A+`,
    /// `A-`): flotilla never asks for them, and drops them if sent.
    Ignored,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutedMsg<'a> {
    pub account: &'a [u8],
    pub subject: &'a [u8],
    pub reply: Option<&'a [u8]>,
    /// Queue groups the origin chose this server for. Empty: deliver to
    /// plain subscribers only.
    pub queues: Vec<&'a [u8]>,
    /// Length of the header block at the front of `message` (`HMSG`).
    pub header_len: Option<usize>,
    pub message: &'a [u8],
}

impl<'a> RoutedMsg<'a> {
    pub fn headers(&self) -> Option<&'a [u8]> {
        self.header_len.map(|h| &self.message[..h])
    }
    pub fn payload(&self) -> &'a [u8] {
        &self.message[self.header_len.unwrap_or(0)..]
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteParseError {
    #[error("unknown route protocol operation")]
    UnknownOp,
    #[error("malformed {0} arguments")]
    BadArgs(&'static str),
    #[error("control line too long")]
    ControlLine,
    #[error("routed message too large")]
    TooLarge,
    #[error("routed message not followed by CRLF")]
    BadTrailer,
}

/// Parses one operation from the front of `buf`. `Ok(None)`: more bytes
/// are needed. On success, also returns how many bytes it used.
pub fn parse(
    buf: &[u8],
    max_control_line: usize,
) -> Result<Option<(RouteOp<'_>, usize)>, RouteParseError> {
    parse_as(Dialect::Route, buf, max_control_line)
}

/// [`parse`] for a connection speaking `dialect`.
pub fn parse_as(
    dialect: Dialect,
    buf: &[u8],
    max_control_line: usize,
) -> Result<Option<(RouteOp<'_>, usize)>, RouteParseError> {
    let Some(nl) = memchr(b'\n', buf) else {
        return if buf.len() > max_control_line {
            Err(RouteParseError::ControlLine)
        } else {
            Ok(None)
        };
    };
    if nl > max_control_line {
        return Err(RouteParseError::ControlLine);
    }
    let line = &buf[..nl];
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let (verb, rest) = match line.iter().position(|b| *b == b' ' || *b == b'\t') {
        Some(i) => (&line[..i], trim(&line[i + 1..])),
        None => (line, &line[line.len()..]),
    };
    let used = nl + 1;
    let upper: Vec<u8> = verb.to_ascii_uppercase();
    let op = match upper.as_slice() {
        b"PING" => RouteOp::Ping,
        b"PONG" => RouteOp::Pong,
        b"+OK" => RouteOp::Ok,
        b"-ERR" => RouteOp::Err(rest),
        b"INFO" => RouteOp::Info(rest),
        b"CONNECT" => RouteOp::Connect(rest),
        b"RAFT" => RouteOp::Raft(rest),
        b"RS+" | b"RS-" | b"RMSG" if dialect == Dialect::Leaf => {
            return Err(RouteParseError::UnknownOp)
        }
        b"LS+" | b"LS-" | b"LMSG" if dialect == Dialect::Leaf => {
            return interest_or_msg(dialect, &upper, rest, buf, used)
        }
        b"LS+" | b"LS-" | b"A+" | b"A-" => RouteOp::Ignored,
        b"RS+" | b"RS-" | b"RMSG" | b"HMSG" => {
            return interest_or_msg(dialect, &upper, rest, buf, used)
        }
        _ => return Err(RouteParseError::UnknownOp),
    };
    Ok(Some((op, used)))
}

/// An interest line or a message, in either dialect: a leaf's lines are
/// a route's without the account, so the leaf's get an empty one.
fn interest_or_msg<'a>(
    dialect: Dialect,
    verb: &[u8],
    rest: &'a [u8],
    buf: &'a [u8],
    used: usize,
) -> Result<Option<(RouteOp<'a>, usize)>, RouteParseError> {
    let mut a = args(rest);
    if dialect == Dialect::Leaf {
        a.insert(0, b"");
    }
    let op = match verb {
        b"RS+" | b"LS+" => {
            let what = if verb[0] == b'R' { "RS+" } else { "LS+" };
            match a.as_slice() {
                [acc, subj] => RouteOp::Sub {
                    account: acc,
                    subject: subj,
                    queue: None,
                    weight: 0,
                },
                [acc, subj, q, w] => RouteOp::Sub {
                    account: acc,
                    subject: subj,
                    queue: Some(q),
                    weight: parse_size(w)
                        .and_then(|w| u32::try_from(w).ok())
                        .ok_or(RouteParseError::BadArgs(what))?,
                },
                // nats-server accepts a queue without a weight as weight 1.
                [acc, subj, q] => RouteOp::Sub {
                    account: acc,
                    subject: subj,
                    queue: Some(q),
                    weight: 1,
                },
                _ => return Err(RouteParseError::BadArgs(what)),
            }
        }
        b"RS-" | b"LS-" => match a.as_slice() {
            [acc, subj] => RouteOp::Unsub {
                account: acc,
                subject: subj,
                queue: None,
            },
            [acc, subj, q] => RouteOp::Unsub {
                account: acc,
                subject: subj,
                queue: Some(q),
            },
            _ if verb[0] == b'R' => return Err(RouteParseError::BadArgs("RS-")),
            _ => return Err(RouteParseError::BadArgs("LS-")),
        },
        _ => return routed_msg(verb, &a, buf, used),
    };
    Ok(Some((op, used)))
}

/// `RMSG`, `LMSG` or `HMSG`, its arguments (account first) in `a`.
fn routed_msg<'a>(
    verb: &[u8],
    a: &[&'a [u8]],
    buf: &'a [u8],
    used: usize,
) -> Result<Option<(RouteOp<'a>, usize)>, RouteParseError> {
    let headers = verb[0] == b'H';
    let what = match verb[0] {
        b'H' => "HMSG",
        b'L' => "LMSG",
        _ => "RMSG",
    };
    let sizes = if headers { 2 } else { 1 };
    if a.len() < 2 + sizes {
        return Err(RouteParseError::BadArgs(what));
    }
    let (head, tail) = a.split_at(a.len() - sizes);
    let total = parse_size(tail[sizes - 1]).ok_or(RouteParseError::BadArgs(what))?;
    let header_len = if headers {
        let h = parse_size(tail[0]).ok_or(RouteParseError::BadArgs(what))?;
        if h > total {
            return Err(RouteParseError::BadArgs(what));
        }
        Some(h)
    } else {
        None
    };
    if total > MAX_ROUTED_MESSAGE {
        return Err(RouteParseError::TooLarge);
    }
    let (reply, queues) = match &head[2..] {
        [] => (None, Vec::new()),
        [r] => (Some(*r), Vec::new()),
        [m, r, qs @ ..] if *m == b"+" => (Some(*r), qs.to_vec()),
        [m, qs @ ..] if *m == b"|" => (None, qs.to_vec()),
        _ => return Err(RouteParseError::BadArgs(what)),
    };
    let need = used + total + 2;
    if buf.len() < need {
        return Ok(None);
    }
    if &buf[used + total..need] != b"\r\n" {
        return Err(RouteParseError::BadTrailer);
    }
    let msg = RoutedMsg {
        account: head[0],
        subject: head[1],
        reply,
        queues,
        header_len,
        message: &buf[used..used + total],
    };
    Ok(Some((RouteOp::Msg(msg), need)))
}

fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| *c != b' ' && *c != b'\t')
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| *c != b' ' && *c != b'\t')
        .map_or(start, |e| e + 1);
    &b[start..end.max(start)]
}

fn args(b: &[u8]) -> Vec<&[u8]> {
    b.split(|c| *c == b' ' || *c == b'\t')
        .filter(|a| !a.is_empty())
        .collect()
}

/// `RS+ account subject [queue weight]`, or with no account (a leaf
/// connection's) `LS+ subject [queue weight]`.
pub fn sub(
    out: &mut BytesMut,
    account: Option<&[u8]>,
    subject: &[u8],
    queue: Option<(&[u8], u32)>,
) {
    interest_verb(out, b"RS+ ", b"LS+ ", account);
    out.put_slice(subject);
    if let Some((q, w)) = queue {
        out.put_u8(b' ');
        out.put_slice(q);
        out.put_u8(b' ');
        out.put_slice(itoa::Buffer::new().format(w).as_bytes());
    }
    out.put_slice(b"\r\n");
}

/// `RS- account subject [queue]` (or a leaf's `LS- subject [queue]`),
/// with single spaces: nats-server finds the subscription by these exact
/// bytes.
pub fn unsub(out: &mut BytesMut, account: Option<&[u8]>, subject: &[u8], queue: Option<&[u8]>) {
    interest_verb(out, b"RS- ", b"LS- ", account);
    out.put_slice(subject);
    if let Some(q) = queue {
        out.put_u8(b' ');
        out.put_slice(q);
    }
    out.put_slice(b"\r\n");
}

/// The verb of an interest line and, on a route, its account.
fn interest_verb(out: &mut BytesMut, route: &[u8], leaf: &[u8], account: Option<&[u8]>) {
    match account {
        Some(account) => {
            out.put_slice(route);
            out.put_slice(account);
            out.put_u8(b' ');
        }
        None => out.put_slice(leaf),
    }
}

/// `RMSG`/`HMSG` for one peer, naming the queue groups it was chosen for;
/// with no account (a leaf connection's), `LMSG`/`HMSG` without one.
pub fn msg(
    out: &mut BytesMut,
    account: Option<&[u8]>,
    subject: &[u8],
    reply: Option<&[u8]>,
    queues: &[&[u8]],
    headers: Option<&[u8]>,
    payload: &[u8],
) {
    let hl = headers.map_or(0, |h| h.len());
    out.reserve(
        48 + account.map_or(0, <[u8]>::len)
            + subject.len()
            + reply.map_or(0, |r| r.len())
            + queues.iter().map(|q| q.len() + 1).sum::<usize>()
            + hl
            + payload.len(),
    );
    let verb: &[u8] = match (headers.is_some(), account.is_some()) {
        (true, _) => b"HMSG ",
        (false, true) => b"RMSG ",
        (false, false) => b"LMSG ",
    };
    out.put_slice(verb);
    if let Some(account) = account {
        out.put_slice(account);
        out.put_u8(b' ');
    }
    out.put_slice(subject);
    out.put_u8(b' ');
    match (reply, queues.is_empty()) {
        (Some(r), true) => {
            out.put_slice(r);
            out.put_u8(b' ');
        }
        (Some(r), false) => {
            out.put_slice(b"+ ");
            out.put_slice(r);
            out.put_u8(b' ');
        }
        (None, false) => out.put_slice(b"| "),
        (None, true) => {}
    }
    for q in queues {
        out.put_slice(q);
        out.put_u8(b' ');
    }
    let mut num = itoa::Buffer::new();
    if headers.is_some() {
        out.put_slice(num.format(hl).as_bytes());
        out.put_u8(b' ');
    }
    out.put_slice(num.format(hl + payload.len()).as_bytes());
    out.put_slice(b"\r\n");
    if let Some(h) = headers {
        out.put_slice(h);
    }
    out.put_slice(payload);
    out.put_slice(b"\r\n");
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The INFO a server sends on a route connection; field names and order
/// follow nats-server's `Info`. Flotilla sends no `route_pool_size`, no
/// `compression` and no `lnoc`, so a nats-server peer keeps to the subset
/// above.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct RouteInfo {
    pub server_id: String,
    #[serde(default)]
    pub server_name: String,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub proto: i32,
    #[serde(default)]
    pub go: String,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub port: u16,
    #[serde(default)]
    pub headers: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub auth_required: bool,
    /// The route port speaks TLS only (`cluster { tls {} }`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub tls_required: bool,
    #[serde(default, skip_serializing_if = "is_false")]
    pub tls_verify: bool,
    #[serde(default)]
    pub max_payload: i64,
    #[serde(default, skip_serializing_if = "is_false")]
    pub jetstream: bool,
    /// `nats-route://host:port/` where others reach this server; set by
    /// whoever forwards the INFO as gossip.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ip: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nonce: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cluster: String,
    /// The cluster name was generated, not configured.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cluster_dynamic: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connect_urls: Vec<String>,
    /// The URLs WebSocket clients reach this server on (nats-server's
    /// `ws_connect_urls`), given to WebSocket clients as their
    /// `connect_urls`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ws_connect_urls: Vec<String>,
    #[serde(default, skip_serializing_if = "is_false")]
    pub ldm: bool,
    /// Set by a pooled nats-server on a connection pinned to one account;
    /// flotilla never registers such a connection.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub route_account: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gossip_mode: Option<u8>,
    /// Flotilla's JetStream cluster state; other servers ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flotilla: Option<FlotillaHello>,
}

/// What a flotilla JetStream server tells its peers on routes: its peer
/// id, and where it stands on founding the meta group.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq, Eq)]
pub struct FlotillaHello {
    pub peer: u64,
    /// It holds a meta group (founded, joined, or restarted from its log).
    #[serde(default)]
    pub founded: bool,
    /// The voters it proposes to found the meta group with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub proposal: Vec<u64>,
    /// Its `server_tags`, for placing streams.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// The CONNECT a dialing server sends first.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct RouteConnect {
    #[serde(default)]
    pub echo: bool,
    #[serde(default)]
    pub verbose: bool,
    #[serde(default)]
    pub pedantic: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pass: Option<String>,
    #[serde(default)]
    pub tls_required: bool,
    #[serde(default)]
    pub headers: bool,
    /// The dialer's server id.
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub cluster: String,
    /// The cluster name was generated, not configured.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cluster_dynamic: bool,
    /// Present only when a client, not a server, reached the route port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lang: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(b: &[u8]) -> RouteOp<'_> {
        let (op, n) = parse(b, 4096).unwrap().unwrap();
        assert_eq!(n, b.len());
        op
    }

    #[test]
    fn interest_verbs() {
        assert_eq!(
            one(b"RS+ $G foo.>\r\n"),
            RouteOp::Sub {
                account: b"$G",
                subject: b"foo.>",
                queue: None,
                weight: 0
            }
        );
        assert_eq!(
            one(b"rs+ $G foo q 3\r\n"),
            RouteOp::Sub {
                account: b"$G",
                subject: b"foo",
                queue: Some(b"q"),
                weight: 3
            }
        );
        assert_eq!(
            one(b"RS- $G foo q\r\n"),
            RouteOp::Unsub {
                account: b"$G",
                subject: b"foo",
                queue: Some(b"q")
            }
        );
        assert!(parse(b"RS+ $G\r\n", 100).is_err());
        assert!(parse(b"RS+ $G a q x\r\n", 100).is_err());
        assert_eq!(one(b"LS+ o $G a\r\n"), RouteOp::Ignored);
    }

    #[test]
    fn messages_round_trip_through_the_encoder() {
        type Case<'a> = (Option<&'a [u8]>, Vec<&'a [u8]>, Option<&'a [u8]>);
        let cases: Vec<Case> = vec![
            (None, vec![], None),
            (Some(b"_INBOX.x"), vec![], None),
            (Some(b"_INBOX.x"), vec![b"q1", b"q2"], None),
            (None, vec![b"q1"], Some(b"NATS/1.0\r\nA: b\r\n\r\n")),
        ];
        for (reply, queues, headers) in cases {
            let mut b = BytesMut::new();
            msg(
                &mut b,
                Some(GLOBAL_ACCOUNT),
                b"foo.bar",
                reply,
                &queues,
                headers,
                b"hello",
            );
            let RouteOp::Msg(m) = one(&b) else {
                panic!("not a message: {b:?}")
            };
            assert_eq!(m.subject, b"foo.bar");
            assert_eq!(m.reply, reply);
            assert_eq!(m.queues, queues);
            assert_eq!(m.headers(), headers);
            assert_eq!(m.payload(), b"hello");
            // Any cut is incomplete, never an error.
            for cut in 0..b.len() {
                assert_eq!(parse(&b[..cut], 4096), Ok(None), "cut at {cut}");
            }
        }
    }

    #[test]
    fn bad_messages_are_errors() {
        assert_eq!(
            parse(b"RMSG $G foo x y 5\r\nhello\r\n", 100),
            Err(RouteParseError::BadArgs("RMSG"))
        );
        assert_eq!(
            parse(b"RMSG $G foo 5\r\nhelloXX", 100),
            Err(RouteParseError::BadTrailer)
        );
        assert_eq!(
            parse(b"HMSG $G foo 9 5\r\nhello\r\n", 100),
            Err(RouteParseError::BadArgs("HMSG"))
        );
        assert_eq!(
            parse(b"RMSG $G foo 999999999\r\n", 100),
            Err(RouteParseError::TooLarge)
        );
        assert_eq!(parse(b"FOO\r\n", 100), Err(RouteParseError::UnknownOp));
        assert_eq!(parse(&[b'x'; 200], 100), Err(RouteParseError::ControlLine));
    }

    #[test]
    fn interest_encoders() {
        let mut b = BytesMut::new();
        sub(&mut b, Some(GLOBAL_ACCOUNT), b"foo", Some((b"q", 2)));
        unsub(&mut b, Some(GLOBAL_ACCOUNT), b"foo", Some(b"q"));
        sub(&mut b, Some(b"B"), b"bar", None);
        assert_eq!(&b[..], b"RS+ $G foo q 2\r\nRS- $G foo q\r\nRS+ B bar\r\n");
        b.clear();
        sub(&mut b, None, b"foo", Some((b"q", 2)));
        unsub(&mut b, None, b"foo", None);
        assert_eq!(&b[..], b"LS+ foo q 2\r\nLS- foo\r\n");
    }

    /// A leaf connection's lines are a route's without the account; what
    /// one dialect sends is an error in the other.
    #[test]
    fn the_leaf_dialect_names_no_account() {
        let leaf = |b: &'static [u8]| parse_as(Dialect::Leaf, b, 1024).map(|r| r.map(|(op, _)| op));
        assert_eq!(
            leaf(b"LS+ foo.* q 3\r\n"),
            Ok(Some(RouteOp::Sub {
                account: b"",
                subject: b"foo.*",
                queue: Some(b"q"),
                weight: 3
            }))
        );
        assert_eq!(
            leaf(b"LS- foo\r\n"),
            Ok(Some(RouteOp::Unsub {
                account: b"",
                subject: b"foo",
                queue: None
            }))
        );
        let Ok(Some(RouteOp::Msg(m))) = leaf(b"LMSG foo + r q1 q2 2\r\nhi\r\n") else {
            panic!("an LMSG");
        };
        assert_eq!(
            (m.subject, m.reply, m.payload()),
            (&b"foo"[..], Some(&b"r"[..]), &b"hi"[..])
        );
        assert_eq!(m.queues, vec![&b"q1"[..], &b"q2"[..]]);
        let Ok(Some(RouteOp::Msg(m))) = leaf(b"HMSG foo 4 6\r\nabcdhi\r\n") else {
            panic!("an HMSG");
        };
        assert_eq!(
            (m.account, m.headers(), m.payload()),
            (&b""[..], Some(&b"abcd"[..]), &b"hi"[..])
        );
        assert_eq!(leaf(b"RS+ $G foo\r\n"), Err(RouteParseError::UnknownOp));
        assert_eq!(leaf(b"LS+\r\n"), Err(RouteParseError::BadArgs("LS+")));
        assert_eq!(
            parse(b"LMSG foo 2\r\nhi\r\n", 100),
            Err(RouteParseError::UnknownOp)
        );
        let mut b = BytesMut::new();
        msg(&mut b, None, b"foo", Some(b"r"), &[b"q"], None, b"hi");
        assert_eq!(&b[..], b"LMSG foo + r q 2\r\nhi\r\n");
    }
}
