//! What makes a subject valid, following nats-server's sublist rules.

use crate::{FWC, PWC, SEP};

/// The tokens of a subject, split on `.`.
pub fn tokens(subject: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    subject.split(|&b| b == SEP)
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0c)
}

/// A subject usable in a subscription: non-empty tokens, no whitespace, and
/// `>` only as the last token. A `*` or `>` inside a longer token is a
/// literal character, as in nats-server.
pub fn is_valid_subject(subject: &[u8]) -> bool {
    if subject.is_empty() {
        return false;
    }
    let mut seen_fwc = false;
    for t in tokens(subject) {
        if t.is_empty() || seen_fwc || t.iter().any(|&b| is_space(b)) {
            return false;
        }
        if t == [FWC] {
            seen_fwc = true;
        }
    }
    true
}

/// True when no token is a lone wildcard. Does not check validity.
pub fn is_literal(subject: &[u8]) -> bool {
    !tokens(subject).any(|t| t == [PWC] || t == [FWC])
}

/// nats-server's `IsValidLiteralSubject`: non-empty tokens, none of them a
/// wildcard. This is the check behind pedantic `Invalid Publish Subject`.
pub fn is_valid_literal_subject(subject: &[u8]) -> bool {
    tokens(subject).all(|t| !t.is_empty() && t != [PWC] && t != [FWC])
}

/// A valid subject with no wildcards.
pub fn is_valid_publish_subject(subject: &[u8]) -> bool {
    is_valid_subject(subject) && is_literal(subject)
}

/// A queue group name: non-empty and without whitespace.
pub fn is_valid_queue(queue: &[u8]) -> bool {
    !queue.is_empty() && !queue.iter().any(|&b| is_space(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects() {
        for ok in [
            "foo",
            "foo.bar",
            "foo.*",
            "foo.>",
            ">",
            "*",
            "*.>",
            "foo*.bar",
            "a.>b",
            "$JS.API.INFO",
        ] {
            assert!(is_valid_subject(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            ".",
            "foo.",
            ".foo",
            "foo..bar",
            "foo.>.bar",
            ">.foo",
            "foo bar",
            "foo\t.bar",
            "a.\r",
        ] {
            assert!(!is_valid_subject(bad.as_bytes()), "{bad:?}");
        }
    }

    #[test]
    fn publish_subjects() {
        assert!(is_valid_publish_subject(b"foo.bar"));
        assert!(is_valid_publish_subject(b"foo*.b>"));
        assert!(!is_valid_publish_subject(b"foo.*"));
        assert!(!is_valid_publish_subject(b"foo.>"));
        assert!(!is_valid_literal_subject(b"foo..bar"));
        assert!(is_valid_literal_subject(b"foo.bar"));
    }
}
