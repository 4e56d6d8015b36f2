//! A leaf node connection's deny lists, kept with the connection (set
//! once, before it is registered) and checked where deliveries decide
//! what crosses (`crate::leaf`).

use bytes::Bytes;
use subjects::subject_matches_filter;

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
    /// all it covers) may not come in.
    pub fn denies_import(&self, subject: &[u8]) -> bool {
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
