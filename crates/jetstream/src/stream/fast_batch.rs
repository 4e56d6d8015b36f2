//! Fast batch publish (ADR-50, `allow_batched`): a publisher streams
//! messages without waiting for each ack, naming its batch in the reply
//! subject, `<prefix>.<id>.<flow>.<gap>.<seq>.<op>.$FI`. The stream stores
//! each message as it comes (no staging: a fast batch is not atomic) and
//! answers on the reply subject: a flow ack (`{"type":"ack"}`) every
//! `msgs` messages, a gap report when a sequence is missing, an error
//! report when a message is refused, and a PubAck with the batch's id and
//! size at the end.
//!
//! A batch's progress is stream state: a replica applies the same entries,
//! so whichever replica leads next carries the batch on (gaps allowed) or
//! ends it at the right place. Answers leave only from the leader, after
//! the entry is durable, as every PubAck does. A batch idle for ten
//! seconds (by the entries' clock) is dropped without an answer.
//!
//! Where nats-server's leader keeps count of messages proposed but not yet
//! stored, here every message is checked and stored as its entry is
//! applied, so nothing is ever pending between the two.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{Incoming, PubAck, Stream};
use crate::api::{gojson, ApiError, E};
use crate::headers;

pub const SUFFIX: &str = ".$FI";
const MAX_ID: usize = 64;
/// nats-server's limits: batches open on a stream, the most messages
/// between two flow acks (idle batches go as atomic ones do).
const MAX_OPEN: usize = 1000;
const MAX_ACK_MESSAGES: u16 = 500;
const REQUIRED_API_LEVEL: &str = "Nats-Required-Api-Level";

/// What a reply subject says about its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastReply {
    pub id: String,
    pub seq: u64,
    /// The most messages the publisher lets go between flow acks.
    pub flow: u16,
    pub gap_ok: bool,
    pub op: Op,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Start,
    Append,
    /// Store this message and end the batch.
    Commit,
    /// End the batch; this message is not stored.
    CommitEob,
    /// Report gaps and the flow settings again.
    Ping,
}

/// Whether `reply` names a fast batch at all.
pub fn is_fast(reply: &str) -> bool {
    reply.len() > SUFFIX.len() && reply.ends_with(SUFFIX)
}

/// nats-server's `getFastBatch`: the fields of a fast batch reply subject,
/// or `None` when they do not make one (the pattern is invalid). Read
/// from the end, since the prefix may hold dots.
pub fn parse(reply: &str) -> Option<FastReply> {
    let rest = reply.strip_suffix(SUFFIX)?;
    let (rest, op) = rest.rsplit_once('.')?;
    let op = match go_int(op) {
        0 => Op::Start,
        1 => Op::Append,
        2 => Op::Commit,
        3 => Op::CommitEob,
        4 => Op::Ping,
        _ => return None,
    };
    let (rest, seq) = rest.rsplit_once('.')?;
    let seq = seq
        .parse::<u64>()
        .ok()
        .filter(|&s| s != 0 && s != u64::MAX)?;
    let misplaced = match op {
        Op::CommitEob => seq == 1,
        Op::Start => seq != 1,
        Op::Append => seq <= 1,
        _ => false,
    };
    if misplaced {
        return None;
    }
    let (rest, gap) = rest.rsplit_once('.')?;
    let gap_ok = match gap {
        "ok" => true,
        "fail" => false,
        _ => return None,
    };
    let (rest, flow) = rest.rsplit_once('.')?;
    let flow = match go_int(flow) {
        f if f <= 0 => 10,
        f => u16::try_from(f).unwrap_or(u16::MAX),
    };
    let (_, id) = rest.rsplit_once('.')?;
    Some(FastReply {
        id: id.to_string(),
        seq,
        flow,
        gap_ok,
        op,
    })
}

/// nats-server's `parseInt64`: digits only, else -1.
fn go_int(text: &str) -> i64 {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return -1;
    }
    text.parse().unwrap_or(i64::MAX)
}

/// One open fast batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FastBatch {
    /// The highest batch sequence taken.
    lseq: u64,
    /// The stream sequence of the last message stored.
    sseq: u64,
    /// The batch sequence of the last flow ack.
    fseq: u64,
    /// A flow ack every this many messages.
    ack_messages: u16,
    /// The publisher's limit on `ack_messages`.
    max_ack_messages: u16,
    gap_ok: bool,
    /// When its last message came.
    last: i64,
}

impl FastBatch {
    pub(super) fn last(&self) -> i64 {
        self.last
    }

    fn flow_ack(&self, seq: u64) -> Bytes {
        let msgs = self.ack_messages;
        Bytes::from(format!(r#"{{"type":"ack","seq":{seq},"msgs":{msgs}}}"#))
    }

    /// A flow ack when `ack_messages` more have been stored since the last
    /// one (only the newest, when several are due), with the rate moved
    /// towards what the stream can take with `open` batches: doubled up to
    /// it, or halved down to it.
    fn check_flow(&mut self, open: usize, out: &mut Vec<Bytes>) -> bool {
        let every = u64::from(self.ack_messages.max(1));
        if self.lseq < self.fseq + every {
            return false;
        }
        self.fseq += (self.lseq - self.fseq) / every * every;
        let share = (usize::from(MAX_ACK_MESSAGES) / open.max(1)).max(1) as u16;
        let target = share.min(self.max_ack_messages);
        if self.ack_messages < target {
            self.ack_messages = self.ack_messages.saturating_mul(2).min(target);
        } else if self.ack_messages > target {
            self.ack_messages = (self.ack_messages / 2).max(target);
        }
        out.push(self.flow_ack(self.fseq));
        true
    }
}

fn gap(last_seq: u64, seq: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"type":"gap","last_seq":{last_seq},"seq":{seq}}}"#
    ))
}

fn flow_err(seq: u64, e: &ApiError) -> Bytes {
    let error = String::from_utf8(gojson::to_vec(e)).expect("JSON is UTF-8");
    Bytes::from(format!(r#"{{"type":"err","seq":{seq},"error":{error}}}"#))
}

impl Stream {
    /// A message published with a fast batch reply subject, as
    /// nats-server's `processJetStreamFastBatchMsg` takes it: what to send
    /// to the reply subject, in order (maybe nothing).
    pub fn fast_publish(&mut self, msg: Incoming<'_>, reply: &str, now: i64) -> Vec<Bytes> {
        let name = self.config.name.clone();
        match self.try_fast_publish(msg, reply, now) {
            Ok(out) => out,
            Err(e) => vec![PubAck::Error(e).encode(&name)],
        }
    }

    /// Refusals before the batch is found are `Err`: one error PubAck.
    fn try_fast_publish(
        &mut self,
        msg: Incoming<'_>,
        reply: &str,
        now: i64,
    ) -> Result<Vec<Bytes>, ApiError> {
        let h = msg.headers.unwrap_or_default();
        self.check_batch_message(msg)?;
        if !self.config.allow_batched {
            return Err(E::BATCH_PUBLISH_DISABLED.err());
        }
        let fast = parse(reply).ok_or_else(|| E::BATCH_PUBLISH_INVALID_PATTERN.err())?;
        if fast.id.len() > MAX_ID {
            return Err(E::BATCH_PUBLISH_INVALID_BATCH_ID.err());
        }
        self.batches.expire(now);
        if !self.batches.fast.contains_key(&fast.id) {
            if fast.seq != 1 {
                return Err(E::BATCH_PUBLISH_UNKNOWN_BATCH_ID.err());
            }
            if self.batches.fast.len() >= MAX_OPEN {
                return Err(E::BATCH_PUBLISH_TOO_MANY_INFLIGHT.err());
            }
            let ack_messages = match self.batches.fast.is_empty() {
                true => MAX_ACK_MESSAGES.min(fast.flow),
                false => 1,
            };
            let batch = FastBatch {
                lseq: 0,
                sseq: 0,
                fseq: 0,
                ack_messages,
                max_ack_messages: fast.flow,
                gap_ok: fast.gap_ok,
                last: now,
            };
            self.batches.fast.insert(fast.id.clone(), batch);
        }
        let mut kept = msg.headers.map(Bytes::copy_from_slice);
        if let Some(level) = headers::get(h, REQUIRED_API_LEVEL) {
            if level
                .parse::<i64>()
                .map_or(true, |l| l > crate::api::API_LEVEL)
            {
                self.batches.fast.remove(&fast.id);
                return Err(E::REQUIRED_API_LEVEL.err());
            }
            kept = headers::without(h, &[REQUIRED_API_LEVEL]);
        }
        let msg = Incoming {
            headers: kept.as_deref(),
            ..msg
        };
        let mut out = Vec::new();
        self.fast_step(&fast, msg, now, &mut out);
        Ok(out)
    }

    /// The batch takes one message (or a ping); ends it where it ends.
    fn fast_step(&mut self, fast: &FastReply, msg: Incoming<'_>, now: i64, out: &mut Vec<Bytes>) {
        let open = self.batches.fast.len();
        let batch = self.batches.fast.get_mut(&fast.id).expect("opened");
        batch.last = now;
        if fast.op == Op::Ping {
            let mut flow_due = true;
            if fast.seq > batch.lseq {
                out.push(gap(batch.lseq + 1, fast.seq + 1));
                if !batch.gap_ok {
                    return self.fast_commit(&fast.id, out);
                }
                batch.lseq = fast.seq;
                flow_due = !batch.check_flow(open, out);
            }
            if flow_due {
                out.push(batch.flow_ack(batch.fseq));
            }
            return;
        }
        if fast.seq != batch.lseq + 1 {
            let forward = fast.seq > batch.lseq + 1;
            if forward {
                out.push(gap(batch.lseq + 1, fast.seq));
            }
            if !(forward && batch.gap_ok) {
                return self.fast_commit(&fast.id, out);
            }
        }
        batch.lseq = fast.seq;
        if fast.op == Op::CommitEob {
            batch.lseq -= 1;
            return self.fast_commit(&fast.id, out);
        }
        let commit = fast.op == Op::Commit;
        if fast.seq == 1 && !commit {
            out.push(batch.flow_ack(0));
        }
        let (gap_ok, first) = (batch.gap_ok, batch.lseq == 1);
        let stored = match self.check(msg, false, None, now) {
            Ok(Ok(checked)) => self.store_checked(checked, now).map(|ack| match ack {
                PubAck::Stored(seq) | PubAck::Counted(seq, _) => Ok(seq),
                _ => Ok(0),
            }),
            Ok(Err(duplicate)) => Ok(Err(duplicate)),
            Err(e) => Err(e),
        };
        let batch = self.batches.fast.get_mut(&fast.id).expect("opened");
        match stored {
            Ok(Ok(seq)) => {
                batch.sseq = seq;
                if commit {
                    return self.fast_commit(&fast.id, out);
                }
                batch.check_flow(open, out);
            }
            Ok(Err(duplicate)) => {
                if !commit {
                    batch.check_flow(open, out);
                    return;
                }
                if !gap_ok && first {
                    self.batches.fast.remove(&fast.id);
                    let name = gojson::to_vec(&self.config.name);
                    let id = gojson::to_vec(&fast.id);
                    out.push(Bytes::from(format!(
                        r#"{{"stream":{},"seq":{duplicate},"duplicate": true,"batch":{},"count":{}}}"#,
                        String::from_utf8_lossy(&name),
                        String::from_utf8_lossy(&id),
                        fast.seq
                    )));
                    return;
                }
                self.fast_commit(&fast.id, out);
            }
            Err(e) => {
                if !gap_ok && first {
                    self.batches.fast.remove(&fast.id);
                    out.push(PubAck::Error(e).encode(&self.config.name));
                    return;
                }
                out.push(flow_err(fast.seq, &e));
                if gap_ok && !commit {
                    return;
                }
                batch.lseq -= 1;
                self.fast_commit(&fast.id, out);
            }
        }
    }

    /// Ends the batch: the PubAck names the last message stored and how
    /// many of the batch's sequences were taken.
    fn fast_commit(&mut self, id: &str, out: &mut Vec<Bytes>) {
        let batch = self.batches.fast.remove(id).expect("open");
        let ack = PubAck::Batched {
            seq: batch.sseq,
            batch: id.to_string(),
            count: batch.lseq,
        };
        out.push(ack.encode(&self.config.name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_subjects_read_as_nats_server_reads_them() {
        let ok = |id: &str, seq, flow, gap_ok, op| {
            Some(FastReply {
                id: id.to_string(),
                seq,
                flow,
                gap_ok,
                op,
            })
        };
        let cases = [
            (
                "_INBOX.x.b1.10.ok.1.0.$FI",
                ok("b1", 1, 10, true, Op::Start),
            ),
            (
                "_INBOX.x.b1.100.fail.2.1.$FI",
                ok("b1", 2, 100, false, Op::Append),
            ),
            ("p.b.0.ok.5.2.$FI", ok("b", 5, 10, true, Op::Commit)),
            (
                "p.b.99999.ok.5.3.$FI",
                ok("b", 5, u16::MAX, true, Op::CommitEob),
            ),
            ("p.b.x.ok.7.4.$FI", ok("b", 7, 10, true, Op::Ping)),
            ("p.b.10.ok.1.5.$FI", None),
            ("p.b.10.ok.2.0.$FI", None),
            ("p.b.10.ok.1.1.$FI", None),
            ("p.b.10.ok.1.3.$FI", None),
            ("p.b.10.ok.0.2.$FI", None),
            ("p.b.10.maybe.2.1.$FI", None),
            ("b.10.ok.1.0.$FI", None),
            ("p.b.10.ok.18446744073709551615.1.$FI", None),
        ];
        for (reply, want) in cases {
            assert!(is_fast(reply), "{reply}");
            assert_eq!(parse(reply), want, "{reply}");
        }
        assert!(!is_fast("_INBOX.x.y") && !is_fast(".$FI"));
    }

    #[test]
    fn flow_acks_skip_ahead_and_move_the_rate() {
        let mut batch = FastBatch {
            lseq: 25,
            sseq: 0,
            fseq: 0,
            ack_messages: 10,
            max_ack_messages: 40,
            gap_ok: true,
            last: 0,
        };
        let mut out = Vec::new();
        assert!(batch.check_flow(1, &mut out));
        assert_eq!(
            out,
            vec![Bytes::from_static(br#"{"type":"ack","seq":20,"msgs":20}"#)]
        );
        out.clear();
        batch.lseq = 39;
        assert!(!batch.check_flow(1, &mut out));
        batch.lseq = 40;
        // Fifty open batches share 500: ten each.
        assert!(batch.check_flow(50, &mut out));
        assert_eq!(
            out,
            vec![Bytes::from_static(br#"{"type":"ack","seq":40,"msgs":10}"#)]
        );
    }
}
