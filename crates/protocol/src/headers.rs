//! NATS header blocks: `NATS/1.0[ status desc]\r\nKey: Value\r\n...\r\n\r\n`.
//! Lookups follow nats-server: names are case-sensitive, the first
//! occurrence wins, and leading spaces of values are trimmed.

use bytes::{BufMut, Bytes, BytesMut};

pub const MSG_ID: &str = "Nats-Msg-Id";
pub const EXPECTED_STREAM: &str = "Nats-Expected-Stream";
pub const EXPECTED_LAST_SEQ: &str = "Nats-Expected-Last-Sequence";
pub const EXPECTED_LAST_SUBJ_SEQ: &str = "Nats-Expected-Last-Subject-Sequence";
pub const EXPECTED_LAST_SUBJ_SEQ_SUBJ: &str = "Nats-Expected-Last-Subject-Sequence-Subject";
pub const EXPECTED_LAST_MSG_ID: &str = "Nats-Expected-Last-Msg-Id";
pub const ROLLUP: &str = "Nats-Rollup";
pub const TTL: &str = "Nats-TTL";
pub const REQUEST_INFO: &str = "Nats-Request-Info";
pub const INCR: &str = "Nats-Incr";
pub const STREAM_SOURCE: &str = "Nats-Stream-Source";
pub const MARKER_REASON: &str = "Nats-Marker-Reason";
pub const SCHEDULE_PREFIX: &str = "Nats-Schedule";
pub const COUNTER_SOURCES: &str = "Nats-Counter-Sources";

/// Value of the first `name:` line, trimmed of leading spaces.
pub fn get<'a>(block: &'a [u8], name: &str) -> Option<&'a str> {
    let text = std::str::from_utf8(block).ok()?;
    let mut lines = text.split("\r\n");
    lines.next()?; // status line
    for line in lines {
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k == name {
                return Some(v.trim_start_matches(' ').trim_end());
            }
        }
    }
    None
}

/// Whether any header name starts with `prefix`.
pub fn has_prefix(block: &[u8], prefix: &str) -> bool {
    let Ok(text) = std::str::from_utf8(block) else {
        return false;
    };
    text.split("\r\n")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .any(|l| l.split(':').next().is_some_and(|k| k.starts_with(prefix)))
}

/// The block without any `name:` lines and without a status on the first
/// line. `None` when nothing is left but the version line.
pub fn without(block: &[u8], names: &[&str]) -> Option<Bytes> {
    retain(block, |name| !names.contains(&name))
}

/// The block with only the headers whose name `keep` accepts, and without
/// a status. `None` when nothing is left but the version line.
pub fn retain(block: &[u8], keep: impl Fn(&str) -> bool) -> Option<Bytes> {
    let text = std::str::from_utf8(block).ok()?;
    let mut out = String::from("NATS/1.0\r\n");
    let mut kept = 0;
    for line in text.split("\r\n").skip(1) {
        if line.is_empty() {
            break;
        }
        let name = line.split(':').next().unwrap_or("");
        if !keep(name) {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
        kept += 1;
    }
    if kept == 0 {
        return None;
    }
    out.push_str("\r\n");
    Some(Bytes::from(out))
}

/// Builds a header block, optionally with a status line, from pairs.
pub fn build(status: Option<(u16, &str)>, pairs: &[(&str, &str)]) -> Bytes {
    let mut b = BytesMut::with_capacity(64);
    b.put_slice(b"NATS/1.0");
    if let Some((code, desc)) = status {
        b.put_slice(format!(" {code}").as_bytes());
        if !desc.is_empty() {
            b.put_u8(b' ');
            b.put_slice(desc.as_bytes());
        }
    }
    b.put_slice(b"\r\n");
    for (k, v) in pairs {
        b.put_slice(k.as_bytes());
        b.put_slice(b": ");
        b.put_slice(v.as_bytes());
        b.put_slice(b"\r\n");
    }
    b.put_slice(b"\r\n");
    b.freeze()
}

/// `block` (or a fresh one) with `pairs` appended before the final CRLF.
pub fn append(block: Option<&[u8]>, pairs: &[(&str, &str)]) -> Bytes {
    let mut b = BytesMut::new();
    match block {
        Some(h) if h.ends_with(b"\r\n\r\n") => b.put_slice(&h[..h.len() - 2]),
        _ => b.put_slice(b"NATS/1.0\r\n"),
    }
    for (k, v) in pairs {
        b.put_slice(k.as_bytes());
        b.put_slice(b": ");
        b.put_slice(v.as_bytes());
        b.put_slice(b"\r\n");
    }
    b.put_slice(b"\r\n");
    b.freeze()
}

/// `block` (or a fresh one) with the first `name:` line's value replaced
/// by `value` (keeping one space after the colon if there was one), or
/// with `name: value` appended: nats-server's `setHeader`.
pub fn set(block: Option<&[u8]>, name: &str, value: &str) -> Bytes {
    let Some(text) = block.and_then(|b| std::str::from_utf8(b).ok()) else {
        return append(block, &[(name, value)]);
    };
    let mut out = String::with_capacity(text.len() + value.len());
    let mut replaced = false;
    let mut lines = text.split("\r\n");
    out.push_str(lines.next().unwrap_or("NATS/1.0"));
    out.push_str("\r\n");
    for line in lines.by_ref() {
        if line.is_empty() {
            break;
        }
        match line.split_once(':') {
            Some((k, v)) if k == name && !replaced => {
                replaced = true;
                out.push_str(k);
                out.push(':');
                if v.starts_with(' ') {
                    out.push(' ');
                }
                out.push_str(value);
            }
            _ => out.push_str(line),
        }
        out.push_str("\r\n");
    }
    if !replaced {
        out.push_str(name);
        out.push_str(": ");
        out.push_str(value);
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    Bytes::from(out)
}

/// nats-server's numeric header parse: base-10 digits only, else `None`.
pub fn parse_u64(v: &str) -> Option<u64> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups() {
        let h = b"NATS/1.0\r\nNats-Msg-Id:  abc\r\nnats-msg-id: lower\r\nNats-Msg-Id: second\r\nX: y\r\n\r\n";
        assert_eq!(get(h, MSG_ID), Some("abc"));
        assert_eq!(get(h, "X"), Some("y"));
        assert_eq!(get(h, "Missing"), None);
        assert!(has_prefix(
            b"NATS/1.0\r\nNats-Schedule-Target: a\r\n\r\n",
            SCHEDULE_PREFIX
        ));
    }

    #[test]
    fn editing() {
        let h = b"NATS/1.0\r\nNats-Request-Info: x\r\nA: 1\r\n\r\n";
        assert_eq!(
            without(h, &[REQUEST_INFO]).unwrap(),
            &b"NATS/1.0\r\nA: 1\r\n\r\n"[..]
        );
        assert_eq!(
            without(b"NATS/1.0\r\nNats-Request-Info: x\r\n\r\n", &[REQUEST_INFO]),
            None
        );
        assert_eq!(
            append(Some(b"NATS/1.0\r\nA: 1\r\n\r\n"), &[("B", "2")]),
            &b"NATS/1.0\r\nA: 1\r\nB: 2\r\n\r\n"[..]
        );
        assert_eq!(
            append(None, &[("B", "2")]),
            &b"NATS/1.0\r\nB: 2\r\n\r\n"[..]
        );
        assert_eq!(
            set(Some(b"NATS/1.0\r\nNats-Incr: +1\r\nA:1\r\n\r\n"), INCR, "5"),
            &b"NATS/1.0\r\nNats-Incr: 5\r\nA:1\r\n\r\n"[..]
        );
        assert_eq!(
            set(Some(b"NATS/1.0\r\nA:1\r\n\r\n"), "A", "22"),
            &b"NATS/1.0\r\nA:22\r\n\r\n"[..]
        );
        assert_eq!(
            set(Some(b"NATS/1.0\r\nA: 1\r\n\r\n"), INCR, "-3"),
            &b"NATS/1.0\r\nA: 1\r\nNats-Incr: -3\r\n\r\n"[..]
        );
        assert_eq!(
            build(Some((404, "Message Not Found")), &[]),
            &b"NATS/1.0 404 Message Not Found\r\n\r\n"[..]
        );
    }
}
