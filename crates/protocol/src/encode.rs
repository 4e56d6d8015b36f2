//! Encoding of the operations the server sends to a client.
//!
//! Everything appends to a caller-owned `BytesMut` (a connection's outbound
//! buffer), so a delivery is one reserve and a few copies, with no
//! intermediate allocation.

use bytes::{BufMut, BytesMut};

pub const PING: &[u8] = b"PING\r\n";
pub const PONG: &[u8] = b"PONG\r\n";
pub const OK: &[u8] = b"+OK\r\n";

/// Bytes `msg` will append, so a caller can check limits before writing.
pub fn msg_len(subject: &[u8], sid: &[u8], reply: Option<&[u8]>, message: &[u8]) -> usize {
    // verb + spaces + two sizes of at most 10 digits + CRLFs
    6 + subject.len() + 1 + sid.len() + reply.map_or(0, |r| r.len() + 1) + 22 + message.len() + 2
}

/// Appends `MSG subject sid [reply] size` or
/// `HMSG subject sid [reply] hdr_len total_len`, the message and CRLF.
/// `message` is the header block (of `header_len` bytes) then the payload.
pub fn msg(
    out: &mut BytesMut,
    subject: &[u8],
    sid: &[u8],
    reply: Option<&[u8]>,
    header_len: Option<usize>,
    message: &[u8],
) {
    out.reserve(msg_len(subject, sid, reply, message));
    out.put_slice(if header_len.is_some() {
        b"HMSG "
    } else {
        b"MSG "
    });
    out.put_slice(subject);
    out.put_u8(b' ');
    out.put_slice(sid);
    out.put_u8(b' ');
    if let Some(reply) = reply {
        out.put_slice(reply);
        out.put_u8(b' ');
    }
    let mut num = itoa::Buffer::new();
    if let Some(h) = header_len {
        out.put_slice(num.format(h).as_bytes());
        out.put_u8(b' ');
    }
    out.put_slice(num.format(message.len()).as_bytes());
    out.put_slice(b"\r\n");
    out.put_slice(message);
    out.put_slice(b"\r\n");
}

/// Like [`msg`], with the header block and payload in separate slices.
pub fn msg_parts(
    out: &mut BytesMut,
    subject: &[u8],
    sid: &[u8],
    reply: Option<&[u8]>,
    headers: Option<&[u8]>,
    payload: &[u8],
) {
    let hlen = headers.map_or(0, |h| h.len());
    out.reserve(msg_len(subject, sid, reply, payload) + hlen);
    out.put_slice(if headers.is_some() { b"HMSG " } else { b"MSG " });
    out.put_slice(subject);
    out.put_u8(b' ');
    out.put_slice(sid);
    out.put_u8(b' ');
    if let Some(reply) = reply {
        out.put_slice(reply);
        out.put_u8(b' ');
    }
    let mut num = itoa::Buffer::new();
    if headers.is_some() {
        out.put_slice(num.format(hlen).as_bytes());
        out.put_u8(b' ');
    }
    out.put_slice(num.format(hlen + payload.len()).as_bytes());
    out.put_slice(b"\r\n");
    if let Some(h) = headers {
        out.put_slice(h);
    }
    out.put_slice(payload);
    out.put_slice(b"\r\n");
}

/// Appends `-ERR '<text>'`.
pub fn err(out: &mut BytesMut, text: &str) {
    out.reserve(text.len() + 9);
    out.put_slice(b"-ERR '");
    out.put_slice(text.as_bytes());
    out.put_slice(b"'\r\n");
}

/// Appends `INFO <json> ` and CRLF; nats-server puts a space before the
/// CRLF, and some client test suites compare the line byte for byte.
pub fn info(out: &mut BytesMut, json: &[u8]) {
    out.reserve(json.len() + 8);
    out.put_slice(b"INFO ");
    out.put_slice(json);
    out.put_slice(b" \r\n");
}

/// Appends the no-responders status message nats-server sends to a
/// requester: an `HMSG` on the reply subject, to the requester's own
/// subscription `sid`, whose header names the request subject.
pub fn no_responders(out: &mut BytesMut, reply: &[u8], sid: &[u8], subject: &[u8]) {
    let mut hdr = Vec::with_capacity(32 + subject.len());
    hdr.extend_from_slice(b"NATS/1.0 503\r\nNats-Subject: ");
    hdr.extend_from_slice(subject);
    hdr.extend_from_slice(b"\r\n\r\n");
    msg(out, reply, sid, None, Some(hdr.len()), &hdr);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_forms() {
        let mut b = BytesMut::new();
        msg(&mut b, b"foo", b"1", None, None, b"hi");
        msg(&mut b, b"foo", b"22", Some(b"_INBOX.x"), None, b"");
        msg(&mut b, b"foo", b"3", None, Some(12), b"NATS/1.0\r\n\r\nhi");
        assert_eq!(
            &b[..],
            &b"MSG foo 1 2\r\nhi\r\nMSG foo 22 _INBOX.x 0\r\n\r\nHMSG foo 3 12 14\r\nNATS/1.0\r\n\r\nhi\r\n"[..]
        );
    }

    #[test]
    fn parts_match_whole() {
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        msg(
            &mut a,
            b"s",
            b"1",
            Some(b"r"),
            Some(12),
            b"NATS/1.0\r\n\r\nhi",
        );
        msg_parts(
            &mut b,
            b"s",
            b"1",
            Some(b"r"),
            Some(b"NATS/1.0\r\n\r\n"),
            b"hi",
        );
        assert_eq!(a, b);
        let (mut a, mut b) = (BytesMut::new(), BytesMut::new());
        msg(&mut a, b"s", b"1", None, None, b"hi");
        msg_parts(&mut b, b"s", b"1", None, None, b"hi");
        assert_eq!(a, b);
    }

    #[test]
    fn msg_len_is_an_upper_bound() {
        let mut b = BytesMut::new();
        let m = vec![b'x'; 1_000_000];
        msg(&mut b, b"a.b", b"123", Some(b"r"), Some(999_999), &m);
        assert!(b.len() <= msg_len(b"a.b", b"123", Some(b"r"), &m));
    }

    #[test]
    fn no_responders_form() {
        let mut b = BytesMut::new();
        no_responders(&mut b, b"_INBOX.a", b"9", b"svc");
        assert_eq!(
            &b[..],
            &b"HMSG _INBOX.a 9 35 35\r\nNATS/1.0 503\r\nNats-Subject: svc\r\n\r\n\r\n"[..]
        );
    }

    #[test]
    fn err_form() {
        let mut b = BytesMut::new();
        err(&mut b, "Unknown Protocol Operation");
        assert_eq!(&b[..], b"-ERR 'Unknown Protocol Operation'\r\n");
    }
}
