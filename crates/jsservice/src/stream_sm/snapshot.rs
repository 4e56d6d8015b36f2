//! A stream machine's snapshots: [`whole`], with the messages, and
//! [`state`], with a summary of the store in their place (`catchup`
//! fills a store up to it). Both start with a [`Head`] and end with the
//! consumers, source positions, duplicate window, staged batches and
//! schedules; `StreamMachine`'s snapshot and restore calls are these.

use bytes::{Buf, BufMut, BytesMut};
use jetstream::api::{ConsumerConfig, StreamConfig};
use jetstream::consumer::state::ConsumerState;
use jetstream::stream::Stream;
use store::MsgStore;

use crate::codec::{get_bytes, get_msg, put_bytes, put_msg, DecodeError};
use crate::summary::StoreSummary;

/// Version 2 added source positions; 3 each consumer's runtime state and
/// the duplicate window, so a restored replica is exactly one that
/// applied every entry.
const SNAPSHOT_VERSION: u32 = 3;

/// [`state`]: version 3's state with a store
/// summary in place of the messages.
const STATE_SNAPSHOT_VERSION: u32 = 4;

/// What every snapshot starts with.
struct Head {
    version: u32,
    applied: u64,
    now: i64,
    created: i64,
    config: StreamConfig,
}

impl Head {
    fn decode(b: &mut &[u8]) -> Result<Head, DecodeError> {
        if b.remaining() < 4 + 8 + 8 + 8 {
            return Err(DecodeError::Short);
        }
        let version = b.get_u32_le();
        let applied = b.get_u64_le();
        let now = b.get_i64_le();
        let created = b.get_i64_le();
        let config = serde_json::from_slice(&get_bytes(b)?).map_err(|_| DecodeError::Kind(0))?;
        Ok(Head {
            version,
            applied,
            now,
            created,
            config,
        })
    }
}

/// Why a state snapshot could not be restored over a store.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RestoreError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The store does not hold what the snapshot says: catch it up first.
    #[error("{0}")]
    Store(String),
}

/// The machine a snapshot is taken of.
pub(super) struct Of<'a> {
    pub stream: &'a Stream,
    /// The last log index applied.
    pub applied: u64,
    /// The time of the last entry applied.
    pub last_ts: i64,
}

/// A machine read back from a snapshot.
pub(super) struct Restored {
    pub stream: Stream,
    pub applied: u64,
    pub last_ts: i64,
}

/// `StreamMachine::snapshot`: the head, where the sequence stands, the
/// messages with their sequences and times, the tail.
pub(super) fn whole(of: &Of<'_>, now: i64) -> Vec<u8> {
    // Sized for the messages up front: a stream of many megabytes
    // would otherwise be copied again at every doubling.
    let st = of.stream.store().state();
    let mut b = BytesMut::with_capacity(4096 + st.bytes as usize + 32 * st.msgs as usize);
    put_head(of, &mut b, SNAPSHOT_VERSION, now);
    let store = of.stream.store();
    b.put_u64_le(st.last_seq);
    b.put_i64_le(st.last_ts);
    let mut at = 1;
    let mut msgs = Vec::new();
    while let Ok(Some(m)) = store.next_matching(at, &store::Filter::all()) {
        at = m.seq + 1;
        msgs.push(m);
    }
    b.put_u64_le(msgs.len() as u64);
    for m in msgs {
        b.put_u64_le(m.seq);
        b.put_i64_le(m.ts);
        put_msg(&mut b, &m.subject, m.headers.as_deref(), &m.payload);
    }
    put_tail(of, &mut b);
    // The buffer itself: a copy would be the whole stream again.
    b.into()
}

/// `StreamMachine::snapshot_state`: the head, the store's summary, the
/// tail.
pub(super) fn state(of: &Of<'_>, now: i64) -> Vec<u8> {
    let mut b = BytesMut::with_capacity(4096);
    put_head(of, &mut b, STATE_SNAPSHOT_VERSION, now);
    StoreSummary::of(of.stream.store()).encode(&mut b);
    put_tail(of, &mut b);
    b.into()
}

/// Version, applied index, time, created, config.
fn put_head(of: &Of<'_>, b: &mut BytesMut, version: u32, now: i64) {
    b.put_u32_le(version);
    b.put_u64_le(of.applied);
    b.put_i64_le(if of.applied > 0 { of.last_ts } else { now });
    b.put_i64_le(of.stream.created);
    put_bytes(
        b,
        &serde_json::to_vec(&of.stream.config).expect("config serializes"),
    );
}

/// Consumers, source positions, the duplicate window.
fn put_tail(of: &Of<'_>, b: &mut BytesMut) {
    let names = of.stream.all_consumer_names();
    b.put_u32_le(names.len() as u32);
    for name in names {
        let c = of.stream.consumer(&name).expect("listed");
        put_bytes(
            b,
            &serde_json::to_vec(&c.config).expect("config serializes"),
        );
        b.put_i64_le(c.created);
        put_bytes(b, &c.state().encode());
        put_bytes(b, &c.runtime());
    }
    // Positions, because a work-queue origin's messages are gone once
    // acked: they cannot be recovered by looking at the origin again.
    put_bytes(
        b,
        &serde_json::to_vec(&of.stream.source_positions()).expect("positions serialize"),
    );
    put_bytes(
        b,
        &serde_json::to_vec(&of.stream.dedupe_entries()).expect("ids serialize"),
    );
    // Atomic batches being staged, when there are any: a replica
    // restored from this commits them as the others do.
    // Then, where schedules are allowed, the live schedules: the
    // messages alone may not say when each is due (a fired copy that
    // said so may be gone), and every replica must fire alike.
    let batches = of.stream.batches();
    let schedules = of.stream.config.allow_msg_schedules;
    if !batches.is_empty() || schedules {
        put_bytes(b, &serde_json::to_vec(batches).expect("batches serialize"));
    }
    if schedules {
        let index = of.stream.schedules();
        put_bytes(b, &serde_json::to_vec(index).expect("schedules serialize"));
    }
}

/// The parts of a replica rebuilt from [`whole`] bytes, over
/// the empty store `store` makes for its config.
pub(super) fn restore(
    data: &[u8],
    store: impl FnOnce(&StreamConfig) -> Box<dyn MsgStore>,
) -> Result<Restored, DecodeError> {
    let mut b = data;
    let head = Head::decode(&mut b)?;
    if !(2..=SNAPSHOT_VERSION).contains(&head.version) {
        return Err(DecodeError::Short);
    }
    let mut store = store(&head.config);
    if b.remaining() < 24 {
        return Err(DecodeError::Short);
    }
    let last_seq = b.get_u64_le();
    let last_ts = b.get_i64_le();
    let n = b.get_u64_le();
    let store_err = |_| DecodeError::Kind(0);
    for i in 0..n {
        if b.remaining() < 16 {
            return Err(DecodeError::Short);
        }
        let seq = b.get_u64_le();
        let ts = b.get_i64_le();
        let (subject, headers, payload) = get_msg(&mut b)?;
        if i == 0 {
            store.reset_to(seq).map_err(store_err)?;
        }
        while store.state().last_seq + 1 < seq {
            store.skip(ts).map_err(store_err)?;
        }
        store
            .store(&subject, headers.as_deref(), &payload, ts)
            .map_err(store_err)?;
    }
    if n == 0 {
        store.reset_to(last_seq + 1).map_err(store_err)?;
    }
    while store.state().last_seq < last_seq {
        store.skip(last_ts).map_err(store_err)?;
    }
    // The pair of `whole`'s count and sequence mark.
    assert_eq!(store.state().msgs, n, "the store holds what was carried");
    assert!(
        store.state().last_seq >= last_seq,
        "the sequence stands there"
    );
    restore_tail(head, store, b)
}

/// The store summary of [`state`] bytes: what
/// a replica's store must hold before [`restore_state`].
pub(super) fn summary(data: &[u8]) -> Result<(StreamConfig, StoreSummary), DecodeError> {
    let mut b = data;
    let head = Head::decode(&mut b)?;
    if head.version != STATE_SNAPSHOT_VERSION {
        return Err(DecodeError::Short);
    }
    Ok((head.config, StoreSummary::decode(&mut b)?))
}

/// The parts of a replica rebuilt from [`state`] bytes over
/// `store`, which must already hold what the snapshot's summary says.
pub(super) fn restore_state(
    data: &[u8],
    store: Box<dyn MsgStore>,
) -> Result<Restored, RestoreError> {
    let mut b = data;
    let head = Head::decode(&mut b)?;
    if head.version != STATE_SNAPSHOT_VERSION {
        return Err(DecodeError::Short.into());
    }
    let summary = StoreSummary::decode(&mut b)?;
    if let Some(why) = summary.mismatch(store.as_ref()) {
        return Err(RestoreError::Store(why));
    }
    Ok(restore_tail(head, store, b)?)
}

/// The stream over its restored store, with consumers, positions and
/// the duplicate window from the rest of the snapshot.
fn restore_tail(
    head: Head,
    store: Box<dyn MsgStore>,
    mut b: &[u8],
) -> Result<Restored, DecodeError> {
    let Head {
        version,
        applied,
        now,
        created,
        config,
    } = head;
    let mut stream = Stream::recover(config, created, store, now);
    if b.remaining() < 4 {
        return Err(DecodeError::Short);
    }
    let consumers = b.get_u32_le();
    for _ in 0..consumers {
        let cfg: ConsumerConfig =
            serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?;
        if b.remaining() < 8 {
            return Err(DecodeError::Short);
        }
        let created = b.get_i64_le();
        let state = ConsumerState::decode(&get_bytes(&mut b)?).ok_or(DecodeError::Kind(0))?;
        let name = cfg.name.clone();
        stream.restore_consumer(cfg, created, &state, now);
        if version >= 3 {
            let runtime = get_bytes(&mut b)?;
            if !stream.restore_consumer_runtime(&name, &runtime) {
                return Err(DecodeError::Kind(0));
            }
        }
    }
    let positions: std::collections::BTreeMap<String, u64> =
        serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?;
    stream.restore_source_positions(&positions);
    if version >= 3 {
        let ids: Vec<(i64, String, u64)> =
            serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?;
        stream.restore_dedupe(ids);
    }
    if b.has_remaining() {
        let batches =
            serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?;
        stream.restore_batches(batches);
    }
    if stream.config.allow_msg_schedules {
        let schedules = match b.has_remaining() {
            true => {
                serde_json::from_slice(&get_bytes(&mut b)?).map_err(|_| DecodeError::Kind(0))?
            }
            false => Default::default(),
        };
        stream.restore_schedules(schedules);
    }
    let _ = stream.take_outputs();
    Ok(Restored {
        stream,
        applied,
        last_ts: now,
    })
}

/// Whether `data` is a state snapshot ([`state`]:
/// messages to be fetched) rather than one that carries its messages.
pub(super) fn is_state(data: &[u8]) -> bool {
    let mut b = data;
    Head::decode(&mut b).is_ok_and(|h| h.version == STATE_SNAPSHOT_VERSION)
}
