//! Subjects: what a valid subject is, how wildcards match, the
//! subscription trie ([`Sublist`]) every publish is routed through, and
//! subject transforms (`transform`: stream transforms, account imports).
//!
//! Nothing here does IO or knows about connections: a subscription is an
//! opaque value `T` with a caller-chosen `u64` key.

mod cache;
mod matching;
mod sublist;
pub mod transform;
mod validate;

pub use cache::MatchCache;
pub use matching::{intersection, subject_matches_filter, subjects_collide};
pub use sublist::{SubResult, Sublist, SublistError, SublistStats};
pub use validate::{
    is_literal, is_valid_literal_subject, is_valid_publish_subject, is_valid_queue,
    is_valid_subject, tokens,
};

/// Token separator.
pub const SEP: u8 = b'.';
/// Partial wildcard: matches exactly one token.
pub const PWC: u8 = b'*';
/// Full wildcard: matches one or more tokens at the end.
pub const FWC: u8 = b'>';
