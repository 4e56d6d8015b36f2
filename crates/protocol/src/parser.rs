//! Incremental, zero-copy parser for the operations a client sends.
//!
//! The parser never owns bytes. The connection driver keeps a read buffer,
//! calls [`Parser::parse`] on its unread part, handles the returned
//! [`ClientOp`] (whose fields borrow from that buffer) and then advances the
//! buffer by the consumed length. Nothing is allocated or copied on the
//! publish path.
//!
//! Behaviour follows nats-server's byte-at-a-time state machine
//! (server/parser.go): verbs are case-insensitive, arguments are separated by
//! spaces or tabs, a control line ends at `\n` with an optional `\r` before
//! it, and `PING`/`PONG`/`+OK` ignore anything up to the end of their line.
//! The result does not depend on how the input was split across reads: an
//! error is reported as soon as the bytes seen so far cannot start a valid
//! operation, and a complete operation is returned only once all of its
//! bytes are present.

use memchr::memchr;

/// Largest size field nats-server accepts: nine decimal digits.
const MAX_SIZE_DIGITS: usize = 9;

/// One operation sent by a client. Every slice borrows from the buffer
/// passed to [`Parser::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientOp<'a> {
    /// `CONNECT <json>`: the raw JSON text.
    Connect(&'a [u8]),
    /// `PUB` or `HPUB`.
    Pub(Publish<'a>),
    /// `SUB <subject> [queue] <sid>`.
    Sub {
        subject: &'a [u8],
        queue: Option<&'a [u8]>,
        sid: &'a [u8],
    },
    /// `UNSUB <sid> [max]`. `max` is `None` when the subscription should go
    /// now: no count given, or a count that is zero or not a number, as
    /// nats-server treats them alike.
    Unsub {
        sid: &'a [u8],
        max: Option<u64>,
    },
    Ping,
    Pong,
    /// `INFO <json>`, which clients may send and the server ignores.
    Info(&'a [u8]),
    /// `+OK`
    Ok,
    /// `-ERR <text>`
    Err(&'a [u8]),
}

/// A `PUB` or `HPUB`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish<'a> {
    pub subject: &'a [u8],
    pub reply: Option<&'a [u8]>,
    /// Length of the header block at the front of `message`; `None` for `PUB`.
    pub header_len: Option<usize>,
    /// Headers (if any) followed by the payload, without the trailing CRLF.
    pub message: &'a [u8],
}

impl<'a> Publish<'a> {
    pub fn headers(&self) -> Option<&'a [u8]> {
        self.header_len.map(|h| &self.message[..h])
    }
    pub fn payload(&self) -> &'a [u8] {
        &self.message[self.header_len.unwrap_or(0)..]
    }
}

/// Why the input cannot be parsed. Every variant ends the connection in
/// nats-server; the driver maps each to the `-ERR` text nats-server sends.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Not a known verb, a verb not followed by a space, or a payload not
    /// followed by CRLF.
    #[error("unknown protocol operation")]
    UnknownOp,
    /// The arguments of a control line are longer than `max_control_line`.
    #[error("maximum control line exceeded: {len} > {max}")]
    ControlLineTooLong { len: usize, max: usize },
    /// A `PUB`/`HPUB` declares more bytes than `max_payload`.
    #[error("maximum payload exceeded: {size} > {max}")]
    PayloadTooLarge { size: usize, max: usize },
    /// `HPUB` from a client that did not announce header support.
    #[error("message headers not supported")]
    HeadersNotSupported,
    /// The arguments of an operation have the wrong shape.
    #[error("{verb} parse error: {reason}: {arg:?}")]
    BadArgs {
        verb: &'static str,
        reason: &'static str,
        arg: String,
    },
}

/// Result of one call to [`Parser::parse`].
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// One operation, and how many bytes of the input it used.
    Op(ClientOp<'a>, usize),
    /// More bytes are needed. `need` is the total input length that will
    /// complete the operation when it is known (a declared payload).
    Incomplete { need: Option<usize> },
    /// This many bytes were consumed without completing an operation: the
    /// ignored tail of a `PING`/`PONG`/`+OK` line, dropped as it arrives so
    /// a client cannot make the server buffer an endless line.
    Skipped(usize),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Verb {
    Connect,
    Pub,
    HPub,
    Sub,
    Unsub,
    Ping,
    Pong,
    Info,
    PlusOk,
    MinusErr,
}

impl Verb {
    const ALL: [(&'static [u8], Verb); 10] = [
        (b"CONNECT", Verb::Connect),
        (b"PUB", Verb::Pub),
        (b"HPUB", Verb::HPub),
        (b"SUB", Verb::Sub),
        (b"UNSUB", Verb::Unsub),
        (b"PING", Verb::Ping),
        (b"PONG", Verb::Pong),
        (b"INFO", Verb::Info),
        (b"+OK", Verb::PlusOk),
        (b"-ERR", Verb::MinusErr),
    ];

    /// Verbs whose line is complete once the verb is read; the rest of the
    /// line is ignored, as nats-server's parser does.
    fn ignores_rest_of_line(self) -> bool {
        matches!(self, Verb::Ping | Verb::Pong | Verb::PlusOk)
    }
}

/// Matches `input` against the verbs case-insensitively. `Ok(Some)` is a
/// full verb followed by its expected delimiter, `Ok(None)` a valid prefix
/// that needs more bytes, `Err` anything else.
fn read_verb(input: &[u8]) -> Result<Option<(Verb, usize)>, ParseError> {
    for (name, verb) in Verb::ALL {
        let n = name.len().min(input.len());
        if !input[..n].eq_ignore_ascii_case(&name[..n]) {
            continue;
        }
        if input.len() < name.len() {
            // A prefix of this verb; no verb is a prefix of another except
            // across different first letters, so waiting is right.
            return Ok(None);
        }
        if verb.ignores_rest_of_line() || matches!(verb, Verb::Connect | Verb::Info) {
            // CONNECT and INFO need no space before their JSON.
            return Ok(Some((verb, name.len())));
        }
        return match input.get(name.len()) {
            None => Ok(None),
            Some(b' ' | b'\t') => Ok(Some((verb, name.len() + 1))),
            Some(_) => Err(ParseError::UnknownOp),
        };
    }
    Err(ParseError::UnknownOp)
}

/// Splits on spaces and tabs into at most `N` arguments. Returns `None` if
/// there are more than `N`.
fn split_args<const N: usize>(arg: &[u8], also_crlf: bool) -> Option<([&[u8]; N], usize)> {
    let mut out: [&[u8]; N] = [&[]; N];
    let mut count = 0;
    let mut start: Option<usize> = None;
    for (i, &b) in arg.iter().enumerate() {
        let sep = b == b' ' || b == b'\t' || (also_crlf && (b == b'\r' || b == b'\n'));
        match (sep, start) {
            (true, Some(s)) => {
                if count == N {
                    return None;
                }
                out[count] = &arg[s..i];
                count += 1;
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        if count == N {
            return None;
        }
        out[count] = &arg[s..];
        count += 1;
    }
    Some((out, count))
}

/// nats-server's `parseSize`: one to nine ASCII digits, else `None`.
pub fn parse_size(d: &[u8]) -> Option<usize> {
    if d.is_empty() || d.len() > MAX_SIZE_DIGITS {
        return None;
    }
    let mut n = 0usize;
    for &b in d {
        if !b.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (b - b'0') as usize;
    }
    Some(n)
}

fn bad(verb: &'static str, reason: &'static str, arg: &[u8]) -> ParseError {
    ParseError::BadArgs {
        verb,
        reason,
        arg: String::from_utf8_lossy(arg).into_owned(),
    }
}

/// The parser's settings and the one piece of state it keeps across calls.
#[derive(Debug, Clone)]
pub struct Parser {
    max_control_line: usize,
    max_payload: usize,
    headers: bool,
    /// Total input length that completes the publish being waited for, so
    /// repeated calls while a large payload arrives do not rescan.
    awaiting: Option<usize>,
    /// A `PING`/`PONG`/`+OK` whose line has not ended yet; its bytes so far
    /// have been consumed.
    skipping: Option<Verb>,
}

impl Parser {
    pub fn new(max_control_line: usize, max_payload: usize) -> Self {
        Parser {
            max_control_line,
            max_payload,
            headers: false,
            awaiting: None,
            skipping: None,
        }
    }

    /// Whether `HPUB` is allowed; set from the client's CONNECT.
    pub fn set_headers(&mut self, on: bool) {
        self.headers = on;
    }

    pub fn set_max_payload(&mut self, max: usize) {
        self.max_payload = max;
    }

    pub fn set_max_control_line(&mut self, max: usize) {
        self.max_control_line = max;
    }

    /// Parses one operation from the front of `buf`.
    pub fn parse<'a>(&mut self, buf: &'a [u8]) -> Result<Parsed<'a>, ParseError> {
        if let Some(verb) = self.skipping {
            return Ok(match memchr(b'\n', buf) {
                Some(nl) => {
                    self.skipping = None;
                    Parsed::Op(line_op(verb), nl + 1)
                }
                None if buf.is_empty() => Parsed::Incomplete { need: None },
                None => Parsed::Skipped(buf.len()),
            });
        }
        if let Some(need) = self.awaiting {
            if buf.len() < need {
                return Ok(Parsed::Incomplete { need: Some(need) });
            }
        }
        let Some((verb, after_verb)) = read_verb(buf)? else {
            return Ok(Parsed::Incomplete { need: None });
        };
        let rest = &buf[after_verb..];
        let Some(nl) = memchr(b'\n', rest) else {
            if verb.ignores_rest_of_line() {
                self.skipping = Some(verb);
                return Ok(Parsed::Skipped(buf.len()));
            }
            // Only argument bytes count against the limit, as in nats-server,
            // and not a `\r` that may be the start of the line ending.
            let arg_len = rest.len() - leading_ws(rest) - usize::from(rest.ends_with(b"\r"));
            if arg_len > self.max_control_line {
                return Err(ParseError::ControlLineTooLong {
                    len: arg_len,
                    max: self.max_control_line,
                });
            }
            return Ok(Parsed::Incomplete { need: None });
        };
        let line_end = after_verb + nl + 1;
        if verb.ignores_rest_of_line() {
            return Ok(Parsed::Op(line_op(verb), line_end));
        }
        let mut arg = &rest[leading_ws(rest)..nl];
        if let [head @ .., b'\r'] = arg {
            arg = head;
        }
        if arg.len() > self.max_control_line {
            return Err(ParseError::ControlLineTooLong {
                len: arg.len(),
                max: self.max_control_line,
            });
        }
        let op = match verb {
            Verb::Connect => ClientOp::Connect(arg),
            Verb::Info => ClientOp::Info(arg),
            Verb::MinusErr => ClientOp::Err(arg),
            Verb::Sub => parse_sub(arg)?,
            Verb::Unsub => parse_unsub(arg)?,
            Verb::Pub | Verb::HPub => return self.parse_pub(verb, arg, buf, line_end),
            Verb::Ping | Verb::Pong | Verb::PlusOk => unreachable!("handled above"),
        };
        Ok(Parsed::Op(op, line_end))
    }

    fn parse_pub<'a>(
        &mut self,
        verb: Verb,
        arg: &'a [u8],
        buf: &'a [u8],
        line_end: usize,
    ) -> Result<Parsed<'a>, ParseError> {
        let (subject, reply, header_len, size) = if verb == Verb::HPub {
            if !self.headers {
                return Err(ParseError::HeadersNotSupported);
            }
            let (a, n) = split_args::<4>(arg, false)
                .ok_or_else(|| bad("processHeaderPub", "Parse Error", arg))?;
            let (subject, reply, hdr, total) = match n {
                3 => (a[0], None, a[1], a[2]),
                4 => (a[0], Some(a[1]), a[2], a[3]),
                _ => return Err(bad("processHeaderPub", "Parse Error", arg)),
            };
            let hdr = parse_size(hdr)
                .ok_or_else(|| bad("processHeaderPub", "Bad or Missing Header Size", arg))?;
            let total = parse_size(total)
                .ok_or_else(|| bad("processHeaderPub", "Bad or Missing Total Size", arg))?;
            if hdr > total {
                return Err(bad(
                    "processHeaderPub",
                    "Header Size larger then TotalSize",
                    arg,
                ));
            }
            (subject, reply, Some(hdr), total)
        } else {
            let (a, n) =
                split_args::<3>(arg, false).ok_or_else(|| bad("processPub", "Parse Error", arg))?;
            let (subject, reply, size) = match n {
                2 => (a[0], None, a[1]),
                3 => (a[0], Some(a[1]), a[2]),
                _ => return Err(bad("processPub", "Parse Error", arg)),
            };
            let size =
                parse_size(size).ok_or_else(|| bad("processPub", "Bad or Missing Size", arg))?;
            (subject, reply, None, size)
        };
        if size > self.max_payload {
            return Err(ParseError::PayloadTooLarge {
                size,
                max: self.max_payload,
            });
        }
        let body_end = line_end + size;
        let need = body_end + 2;
        // Check the terminator bytes we already have, so a payload longer
        // than declared fails as soon as it is visible, however it is split.
        for (i, want) in [(body_end, b'\r'), (body_end + 1, b'\n')] {
            match buf.get(i) {
                Some(&b) if b != want => {
                    self.awaiting = None;
                    return Err(ParseError::UnknownOp);
                }
                None => {
                    self.awaiting = Some(need);
                    return Ok(Parsed::Incomplete { need: Some(need) });
                }
                Some(_) => {}
            }
        }
        self.awaiting = None;
        Ok(Parsed::Op(
            ClientOp::Pub(Publish {
                subject,
                reply,
                header_len,
                message: &buf[line_end..body_end],
            }),
            need,
        ))
    }
}

/// The operation of a verb whose whole line is the verb.
fn line_op(verb: Verb) -> ClientOp<'static> {
    match verb {
        Verb::Ping => ClientOp::Ping,
        Verb::Pong => ClientOp::Pong,
        _ => ClientOp::Ok,
    }
}

fn leading_ws(s: &[u8]) -> usize {
    s.iter().take_while(|&&b| b == b' ' || b == b'\t').count()
}

fn parse_sub(arg: &[u8]) -> Result<ClientOp<'_>, ParseError> {
    let (a, n) = split_args::<3>(arg, true).ok_or_else(|| bad("processSub", "Parse Error", arg))?;
    match n {
        2 => Ok(ClientOp::Sub {
            subject: a[0],
            queue: None,
            sid: a[1],
        }),
        3 => Ok(ClientOp::Sub {
            subject: a[0],
            queue: Some(a[1]),
            sid: a[2],
        }),
        _ => Err(bad("processSub", "Parse Error", arg)),
    }
}

fn parse_unsub(arg: &[u8]) -> Result<ClientOp<'_>, ParseError> {
    let (a, n) =
        split_args::<2>(arg, true).ok_or_else(|| bad("processUnsub", "Parse Error", arg))?;
    match n {
        1 => Ok(ClientOp::Unsub {
            sid: a[0],
            max: None,
        }),
        2 => Ok(ClientOp::Unsub {
            sid: a[0],
            max: parse_size(a[1]).filter(|&m| m > 0).map(|m| m as u64),
        }),
        _ => Err(bad("processUnsub", "Parse Error", arg)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parser() -> Parser {
        let mut p = Parser::new(4096, 1024 * 1024);
        p.set_headers(true);
        p
    }

    fn one(input: &[u8]) -> Result<Parsed<'_>, ParseError> {
        parser().parse(input)
    }

    #[test]
    fn pub_with_and_without_reply() {
        let r = one(b"PUB foo 5\r\nhello\r\n").unwrap();
        assert_eq!(
            r,
            Parsed::Op(
                ClientOp::Pub(Publish {
                    subject: b"foo",
                    reply: None,
                    header_len: None,
                    message: b"hello"
                }),
                18
            )
        );
        let r = one(b"pub foo  bar\t3\nabc\r\nPING\r\n").unwrap();
        let Parsed::Op(ClientOp::Pub(p), n) = r else {
            panic!("{r:?}")
        };
        assert_eq!(
            (p.subject, p.reply, p.message, n),
            (&b"foo"[..], Some(&b"bar"[..]), &b"abc"[..], 20)
        );
    }

    #[test]
    fn hpub_splits_headers() {
        let msg = b"HPUB a r 12 14\r\nNATS/1.0\r\n\r\nhi\r\n";
        let Parsed::Op(ClientOp::Pub(p), n) = one(msg).unwrap() else {
            panic!()
        };
        assert_eq!(n, msg.len());
        assert_eq!(p.headers(), Some(&b"NATS/1.0\r\n\r\n"[..]));
        assert_eq!(p.payload(), b"hi");
    }

    #[test]
    fn hpub_refused_without_headers() {
        let mut p = Parser::new(4096, 1024);
        assert_eq!(
            p.parse(b"HPUB a 12 14\r\n"),
            Err(ParseError::HeadersNotSupported)
        );
    }

    #[test]
    fn incomplete_then_complete() {
        let mut p = parser();
        assert_eq!(
            p.parse(b"PUB foo 5\r\nhel"),
            Ok(Parsed::Incomplete { need: Some(18) })
        );
        assert!(matches!(
            p.parse(b"PUB foo 5\r\nhello\r\n"),
            Ok(Parsed::Op(ClientOp::Pub(_), 18))
        ));
    }

    #[test]
    fn payload_longer_than_declared_is_an_error() {
        assert_eq!(one(b"PUB foo 2\r\nhello\r\n"), Err(ParseError::UnknownOp));
        assert_eq!(one(b"PUB foo 2\r\nhe\rX"), Err(ParseError::UnknownOp));
    }

    #[test]
    fn unknown_verbs() {
        for input in [
            &b"FOO\r\n"[..],
            b"PUBX a 1\r\n",
            b"X",
            b"SUBSCRIBE a 1\r\n",
            b"PUB\r\n",
            b"MSG a 1 1\r\n",
        ] {
            assert_eq!(one(input), Err(ParseError::UnknownOp), "{input:?}");
        }
        assert_eq!(one(b"PU"), Ok(Parsed::Incomplete { need: None }));
        assert_eq!(one(b"c"), Ok(Parsed::Incomplete { need: None }));
    }

    #[test]
    fn ping_ignores_rest_of_line() {
        assert_eq!(one(b"PINGxyz\r\n"), Ok(Parsed::Op(ClientOp::Ping, 9)));
        assert_eq!(one(b"pong\n"), Ok(Parsed::Op(ClientOp::Pong, 5)));
        // An unfinished line is consumed as it comes, never buffered.
        let mut p = parser();
        assert_eq!(p.parse(b"PINGxxxx"), Ok(Parsed::Skipped(8)));
        assert_eq!(p.parse(b"yyyy"), Ok(Parsed::Skipped(4)));
        assert_eq!(p.parse(b""), Ok(Parsed::Incomplete { need: None }));
        assert_eq!(p.parse(b"zz\nPONG\r\n"), Ok(Parsed::Op(ClientOp::Ping, 3)));
        assert_eq!(p.parse(b"PONG\r\n"), Ok(Parsed::Op(ClientOp::Pong, 6)));
    }

    #[test]
    fn sub_and_unsub() {
        assert_eq!(
            one(b"SUB foo.* q 7\r\n"),
            Ok(Parsed::Op(
                ClientOp::Sub {
                    subject: b"foo.*",
                    queue: Some(b"q"),
                    sid: b"7"
                },
                15
            ))
        );
        assert_eq!(
            one(b"UNSUB 7 10\r\n"),
            Ok(Parsed::Op(
                ClientOp::Unsub {
                    sid: b"7",
                    max: Some(10)
                },
                12
            ))
        );
        assert_eq!(
            one(b"UNSUB 7 x\r\n"),
            Ok(Parsed::Op(
                ClientOp::Unsub {
                    sid: b"7",
                    max: None
                },
                11
            ))
        );
        assert!(matches!(
            one(b"SUB foo\r\n"),
            Err(ParseError::BadArgs { .. })
        ));
        assert!(matches!(
            one(b"SUB a b c d\r\n"),
            Err(ParseError::BadArgs { .. })
        ));
        assert!(matches!(
            one(b"UNSUB\t\r\n"),
            Err(ParseError::BadArgs { .. })
        ));
    }

    #[test]
    fn bad_sizes() {
        assert!(matches!(
            one(b"PUB foo x\r\n"),
            Err(ParseError::BadArgs { .. })
        ));
        assert!(matches!(
            one(b"PUB foo 1234567890\r\n"),
            Err(ParseError::BadArgs { .. })
        ));
        assert!(matches!(
            one(b"HPUB foo 5 2\r\n"),
            Err(ParseError::BadArgs { .. })
        ));
        assert_eq!(
            one(b"PUB foo 2000000\r\n"),
            Err(ParseError::PayloadTooLarge {
                size: 2_000_000,
                max: 1024 * 1024
            })
        );
    }

    #[test]
    fn control_line_limit() {
        let mut p = Parser::new(10, 100);
        assert!(matches!(
            p.parse(b"SUB aaaaaaaaaaaaaaaaaa"),
            Err(ParseError::ControlLineTooLong { .. })
        ));
        assert!(matches!(
            p.parse(b"SUB aaaaaaaaa 1\r\n"),
            Err(ParseError::ControlLineTooLong { .. })
        ));
        assert!(matches!(p.parse(b"SUB aaaaa 1\r\n"), Ok(Parsed::Op(..))));
    }
}
