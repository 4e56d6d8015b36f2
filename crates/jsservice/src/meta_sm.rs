//! The meta group's state machine: which servers are JetStream peers
//! (a stable id and a name each), and where every replicated stream lives
//! (its config, its Raft group id and its replica peers). Every server
//! applies the same committed entries in order, so every server agrees on
//! all of it; an entry that breaks a rule is refused the same way
//! everywhere and changes nothing.
//!
//! Rules that keep the incidents away:
//! - An id names one server forever: re-adding an id under another name,
//!   or a name under another id, is refused (incident 3: mangled ids grew
//!   the peer set).
//! - Streams are assigned only to current peers, and each assignment gets
//!   a group id no other stream has had, so a group id never names two
//!   things (incident 5).
//!
//! A stream is named by its account and its name: each account has its
//! own stream names, as on nats-server. An entry written before streams
//! had accounts names none (the empty account), which no JetStream
//! serves: the driver leaves such a stream alone and says so.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Peer {
    pub id: u64,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamAssignment {
    /// The account the stream is in (empty: written before accounts).
    #[serde(default)]
    pub account: String,
    pub name: String,
    /// The stream's config as the API took it (JSON).
    pub config: String,
    pub group: u64,
    pub peers: Vec<u64>,
    /// When it was created, by the meta leader's clock (Unix ns): every
    /// replica's stream has the same creation time.
    #[serde(default)]
    pub created: i64,
    /// The config it was created with: a replica that replays its log
    /// from the start starts from it (later configs are entries in the
    /// stream's log).
    #[serde(default)]
    pub initial: String,
    /// Its consumers, by name: their configs (JSON). A consumer lives in
    /// its stream's group, on the stream's peers, so its acks and its
    /// stream's removals are ordered in one log.
    #[serde(default)]
    pub consumers: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetaOp {
    AddPeer {
        id: u64,
        name: String,
    },
    RemovePeer {
        id: u64,
    },
    /// A new stream on these peers; the group id is allocated on apply.
    AssignStream {
        #[serde(default)]
        account: String,
        name: String,
        config: String,
        peers: Vec<u64>,
        #[serde(default)]
        created: i64,
        /// Where the stream's first leader answers the create.
        #[serde(default)]
        reply: String,
    },
    /// A stream's new config, and its peers (a scale up or down changes
    /// them; the stream group's own membership follows through conf
    /// changes its leader proposes).
    UpdateStream {
        #[serde(default)]
        account: String,
        name: String,
        config: String,
        peers: Vec<u64>,
        /// Where the stream's leader answers the update once it applies
        /// the config (empty: nobody waits).
        #[serde(default)]
        reply: String,
    },
    RemoveStream {
        #[serde(default)]
        account: String,
        name: String,
    },
    AssignConsumer {
        #[serde(default)]
        account: String,
        stream: String,
        name: String,
        config: String,
    },
    RemoveConsumer {
        #[serde(default)]
        account: String,
        stream: String,
        name: String,
    },
}

/// Where a stream is kept in the meta state: its name within its
/// account. A stream name has no whitespace (nats-server refuses it),
/// so the last space parts the two; an entry without an account is
/// kept under its name alone, as it was.
pub fn stream_key(account: &str, name: &str) -> String {
    debug_assert!(!name.contains(' '), "stream names have no spaces");
    match account.is_empty() {
        true => name.to_string(),
        false => format!("{account} {name}"),
    }
}

impl StreamAssignment {
    /// How logs name the stream, as nats-server's do:
    /// `'<account> > <stream>'`.
    pub fn label(&self) -> String {
        format!("'{} > {}'", self.account, self.name)
    }
}

impl MetaOp {
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("meta ops serialize")
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    #[error("meta entry does not decode")]
    Undecodable,
    #[error("peer id {0} already belongs to server {1:?}")]
    IdTaken(u64, String),
    #[error("server name {0:?} already has peer id {1}")]
    NameTaken(String, u64),
    #[error("peer id {0} was removed and is never reused")]
    IdRetired(u64),
    #[error("unknown peer {0}")]
    UnknownPeer(u64),
    #[error("peer {0} still hosts stream {1:?}")]
    PeerInUse(u64, String),
    #[error("stream {0:?} already exists")]
    StreamExists(String),
    #[error("stream {0:?} not found")]
    NoStream(String),
    #[error("a stream needs at least one peer, each once")]
    BadPeers,
    #[error("consumer {0:?} already exists")]
    ConsumerExists(String),
    #[error("consumer {0:?} not found")]
    NoConsumer(String),
}

/// What an applied entry did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaEvent {
    PeerAdded(Peer),
    PeerRemoved(u64),
    /// A new stream, and where its create is answered.
    StreamAssigned(StreamAssignment, String),
    /// (before, after, where the update is answered)
    StreamUpdated(StreamAssignment, StreamAssignment, String),
    StreamRemoved(StreamAssignment),
    /// (account, stream, consumer, its group, its peers)
    ConsumerAssigned(String, String, String, u64, Vec<u64>),
    /// (account, stream, consumer)
    ConsumerRemoved(String, String, String),
    /// An entry at or below the applied index (a replay).
    AlreadyApplied,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Meta {
    peers: BTreeMap<u64, Peer>,
    retired: Vec<u64>,
    /// By `stream_key`.
    streams: BTreeMap<String, StreamAssignment>,
    /// Stream keys by group id: an index of `streams`, rebuilt on
    /// restore (thousands of replicas look theirs up twice a second).
    #[serde(skip)]
    by_group: BTreeMap<u64, String>,
    /// Group ids are handed out in order and never reused; the meta group
    /// itself is group 1.
    next_group: u64,
    applied: u64,
}

/// The meta group's own Raft group id.
pub const META_GROUP: u64 = 1;

impl Meta {
    pub fn new() -> Meta {
        Meta {
            next_group: META_GROUP + 1,
            ..Default::default()
        }
    }

    pub fn peers(&self) -> impl Iterator<Item = &Peer> {
        self.peers.values()
    }

    /// Every account's streams.
    pub fn streams(&self) -> impl Iterator<Item = &StreamAssignment> {
        self.streams.values()
    }

    /// The stream `name` of `account`.
    pub fn stream(&self, account: &str, name: &str) -> Option<&StreamAssignment> {
        let a = self.streams.get(&stream_key(account, name));
        debug_assert!(a.is_none_or(|a| a.account == account && a.name == name));
        a
    }

    /// The streams of one account, as its checks see them.
    pub fn account<'a>(&'a self, account: &'a str) -> AccountStreams<'a> {
        AccountStreams {
            meta: self,
            account,
        }
    }

    /// The stream whose Raft group is `group`.
    pub fn stream_of_group(&self, group: u64) -> Option<&StreamAssignment> {
        let stream = self.streams.get(self.by_group.get(&group)?);
        debug_assert!(stream.is_none_or(|a| a.group == group), "the index agrees");
        stream
    }

    /// Whether `group` was handed out and its stream is gone since: ids
    /// are never reused, so nothing can want the group again.
    pub fn group_deleted(&self, group: u64) -> bool {
        group != META_GROUP && group < self.next_group && !self.by_group.contains_key(&group)
    }

    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The whole state, for a snapshot of the meta group.
    pub fn snapshot(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("meta state serializes")
    }

    pub fn restore(data: &[u8]) -> Option<Meta> {
        let mut meta: Meta = serde_json::from_slice(data).ok()?;
        meta.by_group = meta
            .streams
            .iter()
            .map(|(key, a)| (a.group, key.clone()))
            .collect();
        Some(meta)
    }

    /// Whether `AddPeer { id, name }` would apply: the id was never
    /// retired, and neither it nor the name belongs to another peer (a
    /// server wiped and back under a new id keeps its name on the old one
    /// until an operator removes it).
    pub fn check_add_peer(&self, id: u64, name: &str) -> Result<(), MetaError> {
        if self.retired.contains(&id) {
            return Err(MetaError::IdRetired(id));
        }
        if let Some(p) = self.peers.get(&id) {
            if p.name != name {
                return Err(MetaError::IdTaken(id, p.name.clone()));
            }
        }
        if let Some(p) = self.peers.values().find(|p| p.name == name && p.id != id) {
            return Err(MetaError::NameTaken(name.to_string(), p.id));
        }
        Ok(())
    }

    /// A stream's peers: at least one, each once, each a current peer.
    fn check_peers(&self, peers: &[u64]) -> Result<(), MetaError> {
        let mut sorted = peers.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        if peers.is_empty() || sorted.len() != peers.len() {
            return Err(MetaError::BadPeers);
        }
        if let Some(&p) = peers.iter().find(|p| !self.peers.contains_key(p)) {
            return Err(MetaError::UnknownPeer(p));
        }
        Ok(())
    }

    /// Applies the committed entry at `index`.
    pub fn apply(&mut self, index: u64, data: &[u8]) -> Result<MetaEvent, MetaError> {
        if index <= self.applied {
            return Ok(MetaEvent::AlreadyApplied);
        }
        self.applied = index;
        let op: MetaOp = serde_json::from_slice(data).map_err(|_| MetaError::Undecodable)?;
        match op {
            MetaOp::AddPeer { id, name } => {
                self.check_add_peer(id, &name)?;
                let p = Peer { id, name };
                self.peers.insert(id, p.clone());
                Ok(MetaEvent::PeerAdded(p))
            }
            MetaOp::RemovePeer { id } => {
                if !self.peers.contains_key(&id) {
                    return Err(MetaError::UnknownPeer(id));
                }
                if let Some(s) = self.streams.values().find(|s| s.peers.contains(&id)) {
                    return Err(MetaError::PeerInUse(id, s.name.clone()));
                }
                self.peers.remove(&id);
                self.retired.push(id);
                Ok(MetaEvent::PeerRemoved(id))
            }
            MetaOp::AssignStream {
                account,
                name,
                config,
                peers,
                created,
                reply,
            } => {
                let key = stream_key(&account, &name);
                if self.streams.contains_key(&key) {
                    return Err(MetaError::StreamExists(name));
                }
                self.check_peers(&peers)?;
                let a = StreamAssignment {
                    account,
                    name,
                    initial: config.clone(),
                    config,
                    group: self.next_group,
                    peers,
                    created,
                    consumers: BTreeMap::new(),
                };
                self.next_group += 1;
                self.by_group.insert(a.group, key.clone());
                self.streams.insert(key, a.clone());
                Ok(MetaEvent::StreamAssigned(a, reply))
            }
            MetaOp::UpdateStream {
                account,
                name,
                config,
                peers,
                reply,
            } => {
                self.check_peers(&peers)?;
                let s = self
                    .streams
                    .get_mut(&stream_key(&account, &name))
                    .ok_or_else(|| MetaError::NoStream(name.clone()))?;
                let before = s.clone();
                s.config = config;
                s.peers = peers;
                Ok(MetaEvent::StreamUpdated(before, s.clone(), reply))
            }
            MetaOp::RemoveStream { account, name } => {
                match self.streams.remove(&stream_key(&account, &name)) {
                    Some(a) => {
                        self.by_group.remove(&a.group);
                        Ok(MetaEvent::StreamRemoved(a))
                    }
                    None => Err(MetaError::NoStream(name)),
                }
            }
            MetaOp::AssignConsumer {
                account,
                stream,
                name,
                config,
            } => {
                let s = self
                    .streams
                    .get_mut(&stream_key(&account, &stream))
                    .ok_or_else(|| MetaError::NoStream(stream.clone()))?;
                if s.consumers.contains_key(&name) {
                    return Err(MetaError::ConsumerExists(name));
                }
                s.consumers.insert(name.clone(), config);
                Ok(MetaEvent::ConsumerAssigned(
                    account,
                    stream,
                    name,
                    s.group,
                    s.peers.clone(),
                ))
            }
            MetaOp::RemoveConsumer {
                account,
                stream,
                name,
            } => {
                let s = self
                    .streams
                    .get_mut(&stream_key(&account, &stream))
                    .ok_or_else(|| MetaError::NoStream(stream.clone()))?;
                if s.consumers.remove(&name).is_none() {
                    return Err(MetaError::NoConsumer(name));
                }
                Ok(MetaEvent::ConsumerRemoved(account, stream, name))
            }
        }
    }
}

/// One account's streams in the meta state.
pub struct AccountStreams<'a> {
    meta: &'a Meta,
    account: &'a str,
}

impl AccountStreams<'_> {
    /// How many streams the account has.
    pub fn count(&self) -> usize {
        self.meta
            .streams()
            .filter(|a| a.account == self.account)
            .count()
    }
}

impl crate::account::Streams for AccountStreams<'_> {
    fn configs(&self) -> BTreeMap<String, jetstream::api::StreamConfig> {
        self.meta
            .streams()
            .filter(|a| a.account == self.account)
            .filter_map(|a| Some((a.name.clone(), serde_json::from_str(&a.config).ok()?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops() -> Vec<MetaOp> {
        vec![
            MetaOp::AddPeer {
                id: 11,
                name: "a".into(),
            },
            MetaOp::AddPeer {
                id: 12,
                name: "b".into(),
            },
            MetaOp::AddPeer {
                id: 13,
                name: "c".into(),
            },
            // A mangled id for a known name, and a known id renamed.
            MetaOp::AddPeer {
                id: 99,
                name: "a".into(),
            },
            MetaOp::AddPeer {
                id: 12,
                name: "zz".into(),
            },
            MetaOp::AssignStream {
                account: String::new(),
                name: "S".into(),
                config: "{}".into(),
                peers: vec![11, 12, 13],
                created: 0,
                reply: String::new(),
            },
            MetaOp::AssignStream {
                account: String::new(),
                name: "T".into(),
                config: "{}".into(),
                peers: vec![11, 77],
                created: 0,
                reply: String::new(),
            },
            MetaOp::RemovePeer { id: 13 },
            MetaOp::RemoveStream {
                account: String::new(),
                name: "S".into(),
            },
            MetaOp::RemovePeer { id: 13 },
            MetaOp::AddPeer {
                id: 13,
                name: "c".into(),
            },
            MetaOp::AssignStream {
                account: String::new(),
                name: "S".into(),
                config: "{}".into(),
                peers: vec![11, 12],
                created: 0,
                reply: String::new(),
            },
            MetaOp::AssignConsumer {
                account: String::new(),
                stream: "S".into(),
                name: "C".into(),
                config: "{}".into(),
            },
            MetaOp::AssignConsumer {
                account: String::new(),
                stream: "S".into(),
                name: "C".into(),
                config: "{}".into(),
            },
            MetaOp::AssignConsumer {
                account: String::new(),
                stream: "NOPE".into(),
                name: "C".into(),
                config: "{}".into(),
            },
        ]
    }

    fn run() -> (Meta, Vec<Result<MetaEvent, MetaError>>) {
        let mut m = Meta::new();
        let out = ops()
            .iter()
            .enumerate()
            .map(|(i, op)| m.apply(i as u64 + 1, &op.encode()))
            .collect();
        (m, out)
    }

    #[test]
    fn rules_hold_and_every_replica_agrees() {
        let (m, out) = run();
        assert_eq!(out[3], Err(MetaError::NameTaken("a".into(), 11)));
        assert_eq!(out[4], Err(MetaError::IdTaken(12, "b".into())));
        assert_eq!(out[6], Err(MetaError::UnknownPeer(77)));
        assert_eq!(out[7], Err(MetaError::PeerInUse(13, "S".into())));
        assert_eq!(out[10], Err(MetaError::IdRetired(13)));
        // A consumer lives in its stream's group, on its peers.
        assert_eq!(
            out[12],
            Ok(MetaEvent::ConsumerAssigned(
                String::new(),
                "S".into(),
                "C".into(),
                3,
                vec![11, 12]
            ))
        );
        assert_eq!(out[13], Err(MetaError::ConsumerExists("C".into())));
        assert_eq!(out[14], Err(MetaError::NoStream("NOPE".into())));
        // The peer set is exactly the real servers left.
        let ids: Vec<u64> = m.peers().map(|p| p.id).collect();
        assert_eq!(ids, vec![11, 12]);
        // A re-created stream never reuses a group id.
        assert_eq!(m.stream("", "S").unwrap().group, 3);
        // Same entries, same state, on every replica and after a replay.
        let (again, _) = run();
        assert_eq!(m, again);
        let mut restored = Meta::restore(&m.snapshot()).unwrap();
        assert_eq!(restored, m);
        assert_eq!(
            restored.apply(5, &ops()[4].encode()),
            Ok(MetaEvent::AlreadyApplied)
        );
        assert_eq!(restored.apply(100, b"garbage"), Err(MetaError::Undecodable));
    }

    /// Each account has its own stream names: the same name in two
    /// accounts is two streams, each found, changed and removed in its
    /// own account alone, and each account's checks see only its own.
    #[test]
    fn accounts_keep_their_own_stream_names() {
        use crate::account::Streams;
        let mut m = Meta::new();
        let assign = |account: &str, subjects: &str| MetaOp::AssignStream {
            account: account.into(),
            name: "S".into(),
            config: format!(r#"{{"name":"S","subjects":["{subjects}"]}}"#),
            peers: vec![11],
            created: 0,
            reply: String::new(),
        };
        let ops = [
            MetaOp::AddPeer {
                id: 11,
                name: "a".into(),
            },
            assign("A", "a"),
            assign("B", "b"),
            assign("B", "c"),
            MetaOp::AssignConsumer {
                account: "B".into(),
                stream: "S".into(),
                name: "C".into(),
                config: "{}".into(),
            },
            MetaOp::RemoveStream {
                account: "A".into(),
                name: "S".into(),
            },
            MetaOp::RemoveStream {
                account: "C".into(),
                name: "S".into(),
            },
        ];
        let out: Vec<_> = ops
            .iter()
            .enumerate()
            .map(|(i, op)| m.apply(i as u64 + 1, &op.encode()))
            .collect();
        assert!(matches!(out[1], Ok(MetaEvent::StreamAssigned(ref a, _)) if a.account == "A"));
        assert!(matches!(out[2], Ok(MetaEvent::StreamAssigned(ref a, _)) if a.group == 3));
        assert_eq!(out[3], Err(MetaError::StreamExists("S".into())));
        assert!(matches!(out[4], Ok(MetaEvent::ConsumerAssigned(ref acc, ..)) if acc == "B"));
        assert!(matches!(out[5], Ok(MetaEvent::StreamRemoved(ref a)) if a.account == "A"));
        assert_eq!(out[6], Err(MetaError::NoStream("S".into())));
        assert!(m.stream("A", "S").is_none());
        let b = m.stream("B", "S").unwrap();
        assert_eq!((b.group, b.consumers.len()), (3, 1));
        assert_eq!(m.stream_of_group(3).map(|a| a.account.as_str()), Some("B"));
        assert_eq!(m.account("B").configs().len(), 1);
        assert_eq!(m.account("A").count(), 0);
        let restored = Meta::restore(&m.snapshot()).unwrap();
        assert_eq!(restored.stream_of_group(3), m.stream_of_group(3));
    }
}
