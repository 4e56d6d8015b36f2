//! An entry's bytes: the leader's time (`i64`), then its op's code (one
//! byte) and fields (`crate::codec`). Each kind of op has one codec
//! below, a module that writes and reads it, with every code it has had:
//! a field added later came with a new code, so entries written before
//! read as they were. Raft logs and snapshots keep these bytes;
//! `tests/entry_format.rs` pins them.
//!
//! A new kind of op: a module here (its codes, `encode` and `decode`),
//! its arm in [`encode_op`] (the compiler asks for it) and its line in
//! [`CODECS`].

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::op::{not_mine, Entry, Op};
use crate::codec::{
    get_bytes, get_msg_in, get_opt, get_string, put_bytes, put_msg, put_opt, DecodeError,
};

impl Entry {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = BytesMut::with_capacity(64);
        b.put_i64_le(self.ts);
        encode_op(&mut b, &self.op);
        #[cfg(debug_assertions)]
        self.assert_reads_back(&b);
        b.into()
    }

    /// Decodes an entry, copying its messages out of `b`.
    pub fn decode(b: &[u8]) -> Result<Entry, DecodeError> {
        Self::decode_in(b, None)
    }

    /// Decodes an entry whose messages stay in `data`: a message's
    /// headers and payload are slices of it, not copies. A Raft entry's
    /// data is a buffer of its own (`replication::Engine` copies it out
    /// of the frame it came in), so this pins nothing larger.
    pub fn decode_shared(data: &Bytes) -> Result<Entry, DecodeError> {
        Self::decode_in(data, Some(data))
    }

    fn decode_in(mut b: &[u8], owner: Option<&Bytes>) -> Result<Entry, DecodeError> {
        if b.remaining() < 9 {
            return Err(DecodeError::Short);
        }
        let ts = b.get_i64_le();
        let op = decode_op(&mut b, owner)?;
        Ok(Entry { ts, op })
    }

    /// The contract between the two halves of each codec: what `encode`
    /// wrote, `decode` reads to its last byte, as an op that writes the
    /// same bytes again.
    #[cfg(debug_assertions)]
    fn assert_reads_back(&self, written: &[u8]) {
        let mut b = &written[8..];
        let op = decode_op(&mut b, None).expect("an encoded op decodes");
        assert!(b.is_empty(), "decode stops {} bytes short", b.len());
        let mut again = BytesMut::new();
        again.put_i64_le(self.ts);
        encode_op(&mut again, &op);
        assert_eq!(&again[..], written, "{op:?} encodes as it was read");
    }
}

/// The entry of a publish (with the requester to send its PubAck to),
/// written straight from the message as received: the same bytes as
/// `Entry { ts, op: Op::Replied { reply, op: Op::Publish {..} } }`
/// encodes, without copying the message into an `Op` first (it is the
/// publish path).
pub fn encode_publish(
    ts: i64,
    reply: Option<&str>,
    subject: &str,
    headers: Option<&[u8]>,
    payload: &[u8],
) -> Vec<u8> {
    let mut b = BytesMut::with_capacity(
        32 + subject.len()
            + reply.map_or(0, str::len)
            + headers.map_or(0, <[u8]>::len)
            + payload.len(),
    );
    b.put_i64_le(ts);
    if let Some(reply) = reply {
        replied::encode_head(&mut b, reply);
    }
    publish::encode_msg(&mut b, subject, headers, payload);
    // The buffer itself, not a copy of it (this is the publish path).
    b.into()
}

/// Writes `op` with its codec.
fn encode_op(b: &mut BytesMut, op: &Op) {
    match op {
        Op::Publish { .. } => publish::encode(b, op),
        Op::Pull { .. } => pull::encode(b, op),
        Op::Ack { .. } => ack::encode(b, op),
        Op::Tick => tick::encode(b, op),
        Op::Purge { .. } => purge::encode(b, op),
        Op::DeleteMsg { .. } => delete_msg::encode(b, op),
        Op::DeleteConsumer { .. } => delete_consumer::encode(b, op),
        Op::Sourced { .. } => sourced::encode(b, op),
        Op::Copies { .. } => copies::encode(b, op),
        Op::ConsumerCreate { .. } => consumer_create::encode(b, op),
        Op::Replied { .. } => replied::encode(b, op),
        Op::UpdateConfig { .. } => update_config::encode(b, op),
        Op::PushInterest { .. } => push_interest::encode(b, op),
        Op::FlowControl { .. } => flow_control::encode(b, op),
        Op::PauseConsumer { .. } => pause_consumer::encode(b, op),
        Op::Barrier { .. } => barrier::encode(b, op),
        Op::SourceFlowControl { .. } => source_flow_control::encode(b, op),
        Op::ResetSource { .. } => reset_source::encode(b, op),
        Op::DropPulls { .. } => drop_pulls::encode(b, op),
        Op::ResetConsumer { .. } => reset_consumer::encode(b, op),
        Op::UnpinConsumer { .. } => unpin_consumer::encode(b, op),
    }
}

/// Reads one op's fields, its code read: messages are slices of `owner`
/// when given (`crate::codec::get_bytes_in`).
type Decode = fn(code: u8, b: &mut &[u8], owner: Option<&Bytes>) -> Result<Op, DecodeError>;

/// Every codec's codes and reader. Code 2 was the legacy
/// `CreateConsumer`, which no server wrote; it is retired, reads as an
/// unknown kind, and is never to be given to another codec.
const CODECS: &[(&[u8], Decode)] = &[
    (publish::CODES, publish::decode),
    (pull::CODES, pull::decode),
    (ack::CODES, ack::decode),
    (tick::CODES, tick::decode),
    (purge::CODES, purge::decode),
    (delete_msg::CODES, delete_msg::decode),
    (delete_consumer::CODES, delete_consumer::decode),
    (sourced::CODES, sourced::decode),
    (copies::CODES, copies::decode),
    (consumer_create::CODES, consumer_create::decode),
    (replied::CODES, replied::decode),
    (update_config::CODES, update_config::decode),
    (push_interest::CODES, push_interest::decode),
    (flow_control::CODES, flow_control::decode),
    (pause_consumer::CODES, pause_consumer::decode),
    (barrier::CODES, barrier::decode),
    (source_flow_control::CODES, source_flow_control::decode),
    (reset_source::CODES, reset_source::decode),
    (drop_pulls::CODES, drop_pulls::decode),
    (reset_consumer::CODES, reset_consumer::decode),
    (unpin_consumer::CODES, unpin_consumer::decode),
];

/// One above the highest code.
const CODE_LIMIT: usize = 32;

/// [`CODECS`] by code, checked as it is built: one codec per code.
const BY_CODE: [Option<Decode>; CODE_LIMIT] = by_code(CODECS);

const fn by_code(codecs: &[(&[u8], Decode)]) -> [Option<Decode>; CODE_LIMIT] {
    let mut table: [Option<Decode>; CODE_LIMIT] = [None; CODE_LIMIT];
    let mut i = 0;
    while i < codecs.len() {
        let (codes, decode) = codecs[i];
        let mut j = 0;
        while j < codes.len() {
            let code = codes[j] as usize;
            assert!(code > 0 && code < CODE_LIMIT, "a code fits the table");
            assert!(table[code].is_none(), "one codec per code");
            table[code] = Some(decode);
            j += 1;
        }
        i += 1;
    }
    table
}

/// An op, its code first.
fn decode_op(b: &mut &[u8], owner: Option<&Bytes>) -> Result<Op, DecodeError> {
    let code = get_u8(b)?;
    let decode = BY_CODE
        .get(code as usize)
        .copied()
        .flatten()
        .ok_or(DecodeError::Kind(code))?;
    decode(code, b, owner)
}

/// An op within a reply: any but another reply.
fn decode_plain_op(b: &mut &[u8], owner: Option<&Bytes>) -> Result<Op, DecodeError> {
    match b.first() {
        Some(&code) if replied::CODES.contains(&code) => Err(DecodeError::Kind(code)),
        _ => decode_op(b, owner),
    }
}

/// Fails unless `n` more bytes are there.
fn need(b: &[u8], n: usize) -> Result<(), DecodeError> {
    match b.remaining() < n {
        true => Err(DecodeError::Short),
        false => Ok(()),
    }
}

fn get_u8(b: &mut &[u8]) -> Result<u8, DecodeError> {
    need(b, 1)?;
    Ok(b.get_u8())
}

/// Writes a codec's code, which must be one of its `codes`: the pair of
/// the table's one codec per code.
fn put_code(b: &mut BytesMut, codes: &[u8], code: u8) {
    assert!(codes.contains(&code), "code {code} is not among {codes:?}");
    b.put_u8(code);
}

/// `Publish`: the message (subject, headers if any, payload).
mod publish {
    use super::*;

    pub const CODES: &[u8] = &[1];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Publish {
            subject,
            headers,
            payload,
        } = op
        else {
            not_mine(op)
        };
        encode_msg(b, subject, headers.as_deref(), payload);
    }

    /// The same bytes, from the message as received.
    pub fn encode_msg(b: &mut BytesMut, subject: &str, headers: Option<&[u8]>, payload: &[u8]) {
        put_code(b, CODES, 1);
        put_msg(b, subject, headers, payload);
    }

    pub fn decode(_: u8, b: &mut &[u8], owner: Option<&Bytes>) -> Result<Op, DecodeError> {
        let (subject, headers, payload) = get_msg_in(b, owner)?;
        Ok(Op::Publish {
            subject,
            headers,
            payload,
        })
    }
}

/// `Pull`: the consumer, the request, the inbox.
mod pull {
    use super::*;

    pub const CODES: &[u8] = &[3];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Pull {
            consumer,
            request,
            reply,
        } = op
        else {
            not_mine(op)
        };
        put_code(b, CODES, 3);
        put_bytes(b, consumer.as_bytes());
        put_bytes(b, request);
        put_bytes(b, reply.as_bytes());
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::Pull {
            consumer: get_string(b)?,
            request: get_bytes(b)?,
            reply: get_string(b)?,
        })
    }
}

/// `Ack`: the consumer, the subject acked on, the body.
mod ack {
    use super::*;

    pub const CODES: &[u8] = &[4];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Ack {
            consumer,
            subject,
            body,
        } = op
        else {
            not_mine(op)
        };
        put_code(b, CODES, 4);
        put_bytes(b, consumer.as_bytes());
        put_bytes(b, subject.as_bytes());
        put_bytes(b, body);
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::Ack {
            consumer: get_string(b)?,
            subject: get_string(b)?,
            body: get_bytes(b)?,
        })
    }
}

/// `Tick`: the code alone.
mod tick {
    use super::*;

    pub const CODES: &[u8] = &[5];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Tick = op else { not_mine(op) };
        put_code(b, CODES, 5);
    }

    pub fn decode(_: u8, _: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::Tick)
    }
}

/// `Purge`: the request.
mod purge {
    use super::*;

    pub const CODES: &[u8] = &[6];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Purge { request } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 6);
        put_bytes(b, request);
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::Purge {
            request: get_bytes(b)?,
        })
    }
}

/// `DeleteMsg`: the sequence (`u64`), whether to erase (a byte).
mod delete_msg {
    use super::*;

    pub const CODES: &[u8] = &[7];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::DeleteMsg { seq, erase } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 7);
        b.put_u64_le(*seq);
        b.put_u8(u8::from(*erase));
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        need(b, 9)?;
        Ok(Op::DeleteMsg {
            seq: b.get_u64_le(),
            erase: b.get_u8() != 0,
        })
    }
}

/// `DeleteConsumer`: the name.
mod delete_consumer {
    use super::*;

    pub const CODES: &[u8] = &[8];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::DeleteConsumer { name } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 8);
        put_bytes(b, name.as_bytes());
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::DeleteConsumer {
            name: get_string(b)?,
        })
    }
}

/// `Sourced`: the source's key, the origin's sequence, time and pending
/// count, the position the copy must follow (code 21 only), the message.
mod sourced {
    use super::*;

    /// Without `after`, with it.
    pub const CODES: &[u8] = &[9, 21];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Sourced {
            key,
            origin_seq,
            origin_ts,
            pending,
            after,
            subject,
            headers,
            payload,
        } = op
        else {
            not_mine(op)
        };
        put_code(b, CODES, if after.is_some() { 21 } else { 9 });
        put_bytes(b, key.as_bytes());
        b.put_u64_le(*origin_seq);
        b.put_i64_le(*origin_ts);
        b.put_u64_le(*pending);
        if let Some(after) = after {
            b.put_u64_le(*after);
        }
        put_msg(b, subject, headers.as_deref(), payload);
    }

    pub fn decode(code: u8, b: &mut &[u8], owner: Option<&Bytes>) -> Result<Op, DecodeError> {
        let key = get_string(b)?;
        need(b, if code == 21 { 32 } else { 24 })?;
        let origin_seq = b.get_u64_le();
        let origin_ts = b.get_i64_le();
        let pending = b.get_u64_le();
        let after = (code == 21).then(|| b.get_u64_le());
        let (subject, headers, payload) = get_msg_in(b, owner)?;
        Ok(Op::Sourced {
            key,
            origin_seq,
            origin_ts,
            pending,
            after,
            subject,
            headers,
            payload,
        })
    }
}

/// `Copies`: how many (`u32`), then each as `Sourced` writes it, its code
/// first.
mod copies {
    use super::*;

    pub const CODES: &[u8] = &[27];

    /// The fewest bytes a `Sourced` takes: its code, an empty key, the
    /// three numbers, an empty subject, no headers, an empty payload.
    const SOURCED_MIN: usize = 1 + 4 + 24 + 4 + 1 + 4;

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Copies { copies } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 27);
        let n = u32::try_from(copies.len()).expect("a run's length fits a u32");
        b.put_u32_le(n);
        for copy in copies {
            // A run holds copies only (what `decode` reads back).
            assert!(matches!(copy, Op::Sourced { .. }), "{copy:?} in a run");
            sourced::encode(b, copy);
        }
    }

    pub fn decode(_: u8, b: &mut &[u8], owner: Option<&Bytes>) -> Result<Op, DecodeError> {
        need(b, 4)?;
        let n = b.get_u32_le() as usize;
        // A count no run of that many bytes could hold is refused before
        // anything is set aside for it.
        if n > b.remaining() / SOURCED_MIN {
            return Err(DecodeError::Short);
        }
        let mut copies = Vec::with_capacity(n);
        for _ in 0..n {
            let code = get_u8(b)?;
            if !sourced::CODES.contains(&code) {
                return Err(DecodeError::Kind(code));
            }
            copies.push(sourced::decode(code, b, owner)?);
        }
        Ok(Op::Copies { copies })
    }
}

/// `ConsumerCreate`: the request, the subject's name and filter (each
/// optional), whether by the durable endpoint (a byte), the generated
/// name; then code 23: the identity expected; code 26: the identity if
/// any and the account's limits (`max_consumers`, `max_ack_pending`).
/// Limits that are none (each 0 or less) are not written, and read as
/// the default.
mod consumer_create {
    use super::*;
    use jetstream::consumer::AccountConsumerLimits;

    /// Plain, with an identity, with limits.
    pub const CODES: &[u8] = &[10, 23, 26];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::ConsumerCreate {
            request,
            subject_name,
            filter,
            durable_api,
            generated,
            identity,
            limits,
        } = op
        else {
            not_mine(op)
        };
        let code = match (limits.is_none(), identity.is_some()) {
            (false, _) => 26,
            (true, true) => 23,
            (true, false) => 10,
        };
        put_code(b, CODES, code);
        put_bytes(b, request);
        put_opt(b, subject_name);
        put_opt(b, filter);
        b.put_u8(u8::from(*durable_api));
        put_bytes(b, generated.as_bytes());
        match code {
            23 => put_bytes(b, identity.as_deref().unwrap_or_default().as_bytes()),
            26 => {
                put_opt(b, identity);
                b.put_i64_le(limits.max_consumers);
                b.put_i64_le(limits.max_ack_pending);
            }
            _ => {}
        }
    }

    pub fn decode(code: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        let request = get_bytes(b)?;
        let subject_name = get_opt(b)?;
        let filter = get_opt(b)?;
        let durable_api = get_u8(b)? != 0;
        let generated = get_string(b)?;
        let mut limits = AccountConsumerLimits::default();
        let identity = match code {
            23 => Some(get_string(b)?),
            26 => {
                let identity = get_opt(b)?;
                need(b, 16)?;
                limits.max_consumers = b.get_i64_le();
                limits.max_ack_pending = b.get_i64_le();
                identity
            }
            _ => None,
        };
        Ok(Op::ConsumerCreate {
            request,
            subject_name,
            filter,
            durable_api,
            generated,
            identity,
            limits,
        })
    }
}

/// `Replied`: the reply subject, then the op replied to (any but
/// another reply).
mod replied {
    use super::*;

    pub const CODES: &[u8] = &[11];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Replied { reply, op: inner } = op else {
            not_mine(op)
        };
        assert!(
            !matches!(**inner, Op::Replied { .. }),
            "a reply holds one plain op"
        );
        encode_head(b, reply);
        encode_op(b, inner);
    }

    /// The code and the reply subject: what comes before the op.
    pub fn encode_head(b: &mut BytesMut, reply: &str) {
        put_code(b, CODES, 11);
        put_bytes(b, reply.as_bytes());
    }

    pub fn decode(_: u8, b: &mut &[u8], owner: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::Replied {
            reply: get_string(b)?,
            op: Box::new(decode_plain_op(b, owner)?),
        })
    }
}

/// `UpdateConfig`: the config's JSON.
mod update_config {
    use super::*;

    pub const CODES: &[u8] = &[12];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::UpdateConfig { config } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 12);
        put_bytes(b, config);
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::UpdateConfig {
            config: get_bytes(b)?,
        })
    }
}

/// `PushInterest`: the consumer, whether active (a byte).
mod push_interest {
    use super::*;

    pub const CODES: &[u8] = &[13];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::PushInterest { consumer, active } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 13);
        put_bytes(b, consumer.as_bytes());
        b.put_u8(u8::from(*active));
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        let consumer = get_string(b)?;
        let active = get_u8(b)? != 0;
        Ok(Op::PushInterest { consumer, active })
    }
}

/// `FlowControl`: the consumer, the subject; code 20 then what the reply
/// said was received (stream and consumer sequences).
mod flow_control {
    use super::*;

    /// Without `last`, with it.
    pub const CODES: &[u8] = &[14, 20];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::FlowControl {
            consumer,
            subject,
            last,
        } = op
        else {
            not_mine(op)
        };
        put_code(b, CODES, if last.is_some() { 20 } else { 14 });
        put_bytes(b, consumer.as_bytes());
        put_bytes(b, subject.as_bytes());
        if let Some((stream_seq, consumer_seq)) = last {
            b.put_u64_le(*stream_seq);
            b.put_u64_le(*consumer_seq);
        }
    }

    pub fn decode(code: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        let consumer = get_string(b)?;
        let subject = get_string(b)?;
        let last = match code {
            20 => {
                need(b, 16)?;
                Some((b.get_u64_le(), b.get_u64_le()))
            }
            _ => None,
        };
        Ok(Op::FlowControl {
            consumer,
            subject,
            last,
        })
    }
}

/// `PauseConsumer`: the name, whether paused (a byte), until when (an
/// `i64`, 0 when not paused).
mod pause_consumer {
    use super::*;

    pub const CODES: &[u8] = &[15];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::PauseConsumer { name, until } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 15);
        put_bytes(b, name.as_bytes());
        b.put_u8(u8::from(until.is_some()));
        b.put_i64_le(until.unwrap_or(0));
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        let name = get_string(b)?;
        need(b, 9)?;
        let some = b.get_u8() != 0;
        let until = b.get_i64_le();
        Ok(Op::PauseConsumer {
            name,
            until: some.then_some(until),
        })
    }
}

/// `Barrier`: the peer, the token.
mod barrier {
    use super::*;

    pub const CODES: &[u8] = &[16];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::Barrier { peer, token } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 16);
        b.put_u64_le(*peer);
        b.put_u64_le(*token);
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        need(b, 16)?;
        Ok(Op::Barrier {
            peer: b.get_u64_le(),
            token: b.get_u64_le(),
        })
    }
}

/// `SourceFlowControl`: the source's key, the stream and consumer
/// sequences of the last copy proposed.
mod source_flow_control {
    use super::*;

    pub const CODES: &[u8] = &[22];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::SourceFlowControl {
            key,
            stream_seq,
            consumer_seq,
        } = op
        else {
            not_mine(op)
        };
        put_code(b, CODES, 22);
        put_bytes(b, key.as_bytes());
        b.put_u64_le(*stream_seq);
        b.put_u64_le(*consumer_seq);
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        let key = get_string(b)?;
        need(b, 16)?;
        Ok(Op::SourceFlowControl {
            key,
            stream_seq: b.get_u64_le(),
            consumer_seq: b.get_u64_le(),
        })
    }
}

/// `ResetSource`: the source's key.
mod reset_source {
    use super::*;

    pub const CODES: &[u8] = &[25];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::ResetSource { key } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 25);
        put_bytes(b, key.as_bytes());
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::ResetSource {
            key: get_string(b)?,
        })
    }
}

/// `DropPulls`: the consumer, how many replies (`u32`), the replies.
mod drop_pulls {
    use super::*;

    pub const CODES: &[u8] = &[19];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::DropPulls { consumer, replies } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 19);
        put_bytes(b, consumer.as_bytes());
        b.put_u32_le(replies.len() as u32);
        for reply in replies {
            put_bytes(b, reply.as_bytes());
        }
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        let consumer = get_string(b)?;
        need(b, 4)?;
        let n = b.get_u32_le();
        // Each reply takes at least its length prefix.
        if n as usize > b.remaining() / 4 {
            return Err(DecodeError::Short);
        }
        let replies = (0..n).map(|_| get_string(b)).collect::<Result<_, _>>()?;
        Ok(Op::DropPulls { consumer, replies })
    }
}

/// `ResetConsumer`: the name, the sequence; code 24 when the answer
/// carries the stream's identity.
mod reset_consumer {
    use super::*;

    /// Without the identity, with it.
    pub const CODES: &[u8] = &[18, 24];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::ResetConsumer {
            name,
            seq,
            identity,
        } = op
        else {
            not_mine(op)
        };
        put_code(b, CODES, if *identity { 24 } else { 18 });
        put_bytes(b, name.as_bytes());
        b.put_u64_le(*seq);
    }

    pub fn decode(code: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        let name = get_string(b)?;
        need(b, 8)?;
        Ok(Op::ResetConsumer {
            name,
            seq: b.get_u64_le(),
            identity: code == 24,
        })
    }
}

/// `UnpinConsumer`: the name, the priority group.
mod unpin_consumer {
    use super::*;

    pub const CODES: &[u8] = &[17];

    pub fn encode(b: &mut BytesMut, op: &Op) {
        let Op::UnpinConsumer { name, group } = op else {
            not_mine(op)
        };
        put_code(b, CODES, 17);
        put_bytes(b, name.as_bytes());
        put_bytes(b, group.as_bytes());
    }

    pub fn decode(_: u8, b: &mut &[u8], _: Option<&Bytes>) -> Result<Op, DecodeError> {
        Ok(Op::UnpinConsumer {
            name: get_string(b)?,
            group: get_string(b)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetstream::consumer::AccountConsumerLimits;

    fn sourced(seq: u64) -> Op {
        Op::Sourced {
            key: "WQ > >".into(),
            origin_seq: seq,
            origin_ts: seq as i64,
            pending: 0,
            after: seq.is_multiple_of(2).then(|| seq - 1),
            subject: format!("wq.{seq}"),
            headers: None,
            payload: Bytes::from(format!("m{seq}")),
        }
    }

    #[test]
    fn publishes_encode_straight_as_entries_do() {
        for reply in [None, Some("_INBOX.x")] {
            for headers in [None, Some(&b"NATS/1.0\r\nA: b\r\n\r\n"[..])] {
                let op = Op::Publish {
                    subject: "s.1".into(),
                    headers: headers.map(Bytes::copy_from_slice),
                    payload: Bytes::from_static(b"data"),
                };
                let op = match reply {
                    Some(r) => Op::Replied {
                        reply: r.into(),
                        op: Box::new(op),
                    },
                    None => op,
                };
                let want = Entry { ts: 7, op }.encode();
                assert_eq!(encode_publish(7, reply, "s.1", headers, b"data"), want);
            }
        }
    }

    #[test]
    fn entries_round_trip_and_refuse_garbage() {
        let entries = [
            Entry {
                ts: 5,
                op: Op::Publish {
                    subject: "wq.a".into(),
                    headers: Some(Bytes::from_static(b"NATS/1.0\r\nA: b\r\n\r\n")),
                    payload: Bytes::from_static(b"x"),
                },
            },
            Entry {
                ts: 6,
                op: Op::Ack {
                    consumer: "C".into(),
                    subject: "$JS.ACK.S.C.1.1.1.5.0".into(),
                    body: Bytes::from_static(b"+ACK"),
                },
            },
            Entry {
                ts: 7,
                op: Op::Tick,
            },
            Entry {
                ts: 8,
                op: Op::Purge {
                    request: Bytes::from_static(br#"{"filter":"wq.a"}"#),
                },
            },
            Entry {
                ts: 9,
                op: Op::DeleteMsg {
                    seq: 12,
                    erase: true,
                },
            },
            Entry {
                ts: 10,
                op: Op::DeleteConsumer { name: "C".into() },
            },
            Entry {
                ts: 10,
                op: Op::Barrier {
                    peer: 0xfeed,
                    token: 7,
                },
            },
            Entry {
                ts: 11,
                op: sourced(7),
            },
            Entry {
                ts: 12,
                op: Op::UnpinConsumer {
                    name: "C".into(),
                    group: "A".into(),
                },
            },
            Entry {
                ts: 12,
                op: Op::FlowControl {
                    consumer: "C".into(),
                    subject: "$JS.FC.S.C.x".into(),
                    last: None,
                },
            },
            Entry {
                ts: 12,
                op: Op::FlowControl {
                    consumer: "C".into(),
                    subject: "$JS.FC.S.C.y".into(),
                    last: Some((9, 4)),
                },
            },
            Entry {
                ts: 13,
                op: Op::ResetConsumer {
                    name: "C".into(),
                    seq: 9,
                    identity: false,
                },
            },
            Entry {
                ts: 13,
                op: Op::ResetConsumer {
                    name: "C".into(),
                    seq: 0,
                    identity: true,
                },
            },
            Entry {
                ts: 13,
                op: Op::ResetSource {
                    key: "O > >".into(),
                },
            },
            Entry {
                ts: 13,
                op: Op::ConsumerCreate {
                    request: Bytes::from_static(b"{}"),
                    subject_name: Some("C".into()),
                    filter: None,
                    durable_api: false,
                    generated: "G".into(),
                    identity: Some("abcdefgh".into()),
                    limits: AccountConsumerLimits::default(),
                },
            },
            Entry {
                ts: 13,
                op: Op::ConsumerCreate {
                    request: Bytes::from_static(b"{}"),
                    subject_name: None,
                    filter: Some("f".into()),
                    durable_api: true,
                    generated: "G".into(),
                    identity: None,
                    limits: AccountConsumerLimits {
                        max_consumers: 3,
                        max_ack_pending: 100,
                    },
                },
            },
            Entry {
                ts: 14,
                op: Op::DropPulls {
                    consumer: "C".into(),
                    replies: vec!["_INBOX.a".into(), "_INBOX.b".into()],
                },
            },
        ];
        for e in &entries {
            let b = e.encode();
            assert_eq!(&Entry::decode(&b).unwrap(), e);
            let shared = Bytes::from(b.clone());
            assert_eq!(&Entry::decode_shared(&shared).unwrap(), e);
            for cut in 0..b.len() {
                assert!(Entry::decode(&b[..cut]).is_err() || cut == b.len());
                let short = shared.slice(..cut);
                assert!(Entry::decode_shared(&short).is_err() || cut == b.len());
            }
        }
        assert_eq!(Entry::decode(&[0; 8]), Err(DecodeError::Short));
    }

    /// A shared decode leaves a message's headers and payload in the
    /// entry's buffer; a plain one copies them.
    #[test]
    fn a_shared_decode_slices_messages_out_of_the_entry() {
        let entry = Entry {
            ts: 1,
            op: Op::Publish {
                subject: "s".into(),
                headers: Some(Bytes::from_static(b"NATS/1.0\r\n\r\n")),
                payload: Bytes::from_static(b"payload"),
            }
            .replied(Some("r")),
        };
        let data = Bytes::from(entry.encode());
        let within = |field: &Bytes| data.as_ptr_range().contains(&field.as_ptr());
        let decoded = |e: Entry| match e.op {
            Op::Replied { op, .. } => match *op {
                Op::Publish {
                    headers, payload, ..
                } => (headers.unwrap(), payload),
                other => panic!("not a publish: {other:?}"),
            },
            other => panic!("not replied: {other:?}"),
        };
        let (headers, payload) = decoded(Entry::decode_shared(&data).unwrap());
        assert!(within(&headers) && within(&payload));
        assert_eq!(&payload[..], b"payload");
        let (headers, payload) = decoded(Entry::decode(&data).unwrap());
        assert!(!within(&headers) && !within(&payload));
    }
}
