//! A leaf node connection's deny lists, kept with the connection (set
//! once, before it is registered) and checked where deliveries decide
//! what crosses (`crate::leaf`).

use bytes::Bytes;
use subjects::subject_matches_filter;

/// Subjects a leaf connection's deny lists never keep out.
const RESERVED: &[&[u8]] = &[b"_R_.", b"$JS.ACK."];

/// A leaf node connection's deny lists (nats-server's remote
/// `deny_imports`/`deny_exports`, and a leaf's `deny_pub` on its hub).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Deny {
    /// Never taken from the other side, nor interest in them told.
    pub imports: Vec<Bytes>,
    /// Never sent to the other side.
    pub exports: Vec<Bytes>,
}

impl Deny {
    pub fn new(imports: &[String], exports: &[String]) -> Deny {
        let bytes = |list: &[String]| list.iter().map(|s| Bytes::from(s.clone())).collect();
        Deny {
            imports: bytes(imports),
            exports: bytes(exports),
        }
    }

    /// Whether messages on `subject` (or, for a wildcard subscription,
    /// all it covers) may not come in. A service import's reply path
    /// (`_R_.`) and a JetStream ack (`$JS.ACK.`) always may: they are
    /// routing the server made, not a subject the other side chose
    /// (nats-server's `leafMsgAllowed`).
    pub fn denies_import(&self, subject: &[u8]) -> bool {
        if RESERVED.iter().any(|p| subject.starts_with(p)) {
            return false;
        }
        self.imports
            .iter()
            .any(|d| subject_matches_filter(subject, d))
    }

    /// Whether a message on `subject` may not go out.
    pub fn denies_export(&self, subject: &[u8]) -> bool {
        self.exports
            .iter()
            .any(|d| subject_matches_filter(subject, d))
    }
}

#[cfg(test)]
mod tests {
    use super::Deny;

    #[test]
    fn reply_paths_and_acks_come_in_whatever_is_denied() {
        let deny = Deny::new(&[">".to_string()], &[]);
        assert!(deny.denies_import(b"orders.new"));
        assert!(!deny.denies_import(b"_R_.abc123.xyz789"));
        assert!(!deny.denies_import(b"$JS.ACK.S.C.1.2.3.4.5"));
        // Not a prefix match on a token's start only.
        assert!(deny.denies_import(b"_R_X.a"));
    }
}
