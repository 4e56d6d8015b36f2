//! The driver side of mirrors and sources. For each source, a consumer on
//! the origin stream pushes to an internal subject this stream's actor
//! listens on. The consumer is internal (`direct`, kept in memory) and
//! starts after the last origin sequence this stream has; if it stalls,
//! skips a delivery, or the origin goes away, it is replaced.
//!
//! With an origin whose retention removes acknowledged messages (work
//! queue, interest), the consumer acks explicitly, and the ack is sent
//! only once the copy is durable here: the origin never drops a message
//! this stream could still lose.
//!
//! Positions are journaled (`sources.log`) after the messages they cover
//! are durable, so a restart resumes exactly after the last copy even if
//! the copies themselves were since removed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use jetstream::api::{AckPolicy, ApiError, ConsumerConfig, DeliverPolicy, Retention};
use jetstream::consumer::ack_info;
use jetstream::headers;
use jetstream::output::OutMsg;
use jetstream::stream::{SourceSpec, Sourced, Stream};
use store::{Dir, Journal};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::{sinks, Cmd, Inbound, JetStream, StreamHandle};
use crate::subscription::Subscription;

/// Heartbeat the origin's consumer sends when idle.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Silence after which a consumer is presumed gone and replaced.
const STALL: Duration = Duration::from_secs(4);
const RETRY: Duration = Duration::from_secs(1);
/// Past this size the positions journal is rewritten as one entry.
const COMPACT_AT: u64 = 256 * 1024;
pub(super) const JOURNAL: &str = "sources.log";

struct Live {
    consumer: String,
    origin: Arc<StreamHandle>,
    sub: Arc<Subscription>,
    ack: bool,
    last_dseq: u64,
    heard: Instant,
}

struct Link {
    spec: SourceSpec,
    generation: u64,
    live: Option<Live>,
    retry_at: Option<Instant>,
}

pub(super) struct Sources {
    links: BTreeMap<String, Link>,
    journal: Option<Journal>,
}

/// Positions journaled for a stream, newest entry wins.
pub(super) fn load_positions(dir: &Arc<dyn Dir>) -> (Option<Journal>, BTreeMap<String, u64>) {
    match Journal::open(dir.clone(), JOURNAL) {
        Ok((j, replay)) => {
            let latest = replay
                .entries
                .iter()
                .rev()
                .find_map(|e| serde_json::from_slice::<BTreeMap<String, u64>>(e).ok())
                .unwrap_or_default();
            (Some(j), latest)
        }
        Err(e) => {
            warn!("sources journal could not be read: {e}");
            (None, BTreeMap::new())
        }
    }
}

fn unique_token() -> String {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    (0..12)
        .map(|_| ALPHABET[fastrand::usize(..ALPHABET.len())] as char)
        .collect()
}

impl Sources {
    pub fn new(journal: Option<Journal>) -> Self {
        Sources {
            links: BTreeMap::new(),
            journal,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    /// Follows the stream's current sources: new ones are attached soon,
    /// removed ones let go.
    pub fn refresh(&mut self, js: &JetStream, specs: Vec<SourceSpec>) {
        let keep: Vec<String> = specs.iter().map(|s| s.key.clone()).collect();
        let gone: Vec<String> = self
            .links
            .keys()
            .filter(|k| !keep.contains(k))
            .cloned()
            .collect();
        for k in gone {
            if let Some(mut l) = self.links.remove(&k) {
                detach(js, &mut l);
            }
        }
        for spec in specs {
            match self.links.get_mut(&spec.key) {
                Some(l) => l.spec = spec,
                None => {
                    self.links.insert(
                        spec.key.clone(),
                        Link {
                            spec,
                            generation: 0,
                            live: None,
                            retry_at: Some(Instant::now()),
                        },
                    );
                }
            }
        }
    }

    pub fn next_wake(&self) -> Option<Instant> {
        self.links
            .values()
            .filter_map(|l| match &l.live {
                Some(live) => Some(live.heard + STALL),
                None => l.retry_at,
            })
            .min()
    }

    /// Attaches what is due and replaces what went quiet.
    pub fn on_timer(&mut self, js: &JetStream, me: &Arc<StreamHandle>, stream: &Stream) {
        let now = Instant::now();
        let positions = stream.source_specs();
        for (key, l) in self.links.iter_mut() {
            if let Some(spec) = positions.iter().find(|s| &s.key == key) {
                l.spec = spec.clone();
            }
            let stale = l
                .live
                .as_ref()
                .is_some_and(|live| now >= live.heard + STALL);
            if stale {
                debug!("Stream '{}': source {key} went quiet, reattaching", me.name);
                detach(js, l);
                l.retry_at = Some(now);
            }
            if l.live.is_none() && l.retry_at.is_some_and(|t| t <= now) {
                attach(js, me, key, l);
            }
        }
    }

    /// The origin answered a consumer create.
    pub fn attached(
        &mut self,
        js: &JetStream,
        key: &str,
        generation: u64,
        result: Result<(), ApiError>,
    ) {
        let Some(l) = self.links.get_mut(key) else {
            return;
        };
        if l.generation != generation {
            return;
        }
        match result {
            Ok(()) => {
                if let Some(live) = l.live.as_mut() {
                    live.heard = Instant::now();
                }
            }
            Err(e) => {
                warn!("Source {key}: consumer on the origin could not be created: {e}");
                detach(js, l);
                l.retry_at = Some(Instant::now() + RETRY);
            }
        }
    }

    /// A delivery from a source's consumer. Returns whether the stream
    /// took in a message (so positions need journaling), and the replies
    /// (acks, flow control) to send once that is durable.
    pub fn deliver(
        &mut self,
        js: &JetStream,
        key: &str,
        generation: u64,
        msg: Inbound,
        stream: &mut Stream,
        now: i64,
    ) -> (bool, Vec<OutMsg>) {
        let mut out = Vec::new();
        let advanced = self.take(js, key, generation, msg, stream, now, &mut out);
        (advanced, out)
    }

    #[allow(clippy::too_many_arguments)]
    fn take(
        &mut self,
        js: &JetStream,
        key: &str,
        generation: u64,
        msg: Inbound,
        stream: &mut Stream,
        now: i64,
        out: &mut Vec<OutMsg>,
    ) -> bool {
        let Some(l) = self.links.get_mut(key) else {
            return false;
        };
        if l.generation != generation {
            return false;
        }
        let Some(live) = l.live.as_mut() else {
            return false;
        };
        live.heard = Instant::now();
        if let Some(h) = msg
            .headers
            .as_deref()
            .filter(|h| h.starts_with(b"NATS/1.0 100"))
        {
            if let Some(reply) = msg.reply {
                // Flow control: answered once what came before is durable.
                out.push(reply_msg(reply, Bytes::new()));
            } else {
                let last = headers::get(h, "Nats-Last-Consumer").and_then(headers::parse_u64);
                if last.is_some_and(|d| d != live.last_dseq) {
                    warn!("Source {key}: deliveries were missed, reattaching");
                    detach(js, l);
                    l.retry_at = Some(Instant::now());
                    return false;
                }
            }
            stream.source_alive(key, None, now);
            return false;
        }
        let Some(info) = msg.reply.as_deref().and_then(ack_info) else {
            return false;
        };
        if info.consumer_seq != live.last_dseq + 1 {
            warn!(
                "Source {key}: delivery {} after {}, reattaching",
                info.consumer_seq, live.last_dseq
            );
            detach(js, l);
            l.retry_at = Some(Instant::now());
            return false;
        }
        live.last_dseq = info.consumer_seq;
        let ack = live.ack;
        let r = stream.sourced(
            Sourced {
                key,
                origin_seq: info.stream_seq,
                origin_ts: info.ts,
                pending: info.pending,
                subject: &msg.subject,
                headers: msg.headers.as_deref(),
                payload: &msg.payload,
            },
            now,
        );
        match r {
            Ok(advanced) => {
                if ack {
                    if let Some(reply) = msg.reply {
                        out.push(reply_msg(reply, Bytes::from_static(b"+ACK")));
                    }
                }
                advanced
            }
            Err(e) => {
                warn!(
                    "Source {key}: message {} could not be stored: {e}",
                    info.stream_seq
                );
                detach(js, l);
                l.retry_at = Some(Instant::now() + RETRY);
                false
            }
        }
    }

    /// Lets go of every origin consumer (stream deleted or reloading).
    pub fn detach_all(&mut self, js: &JetStream) {
        for l in self.links.values_mut() {
            detach(js, l);
            l.retry_at = Some(Instant::now());
        }
    }

    /// Journals positions that are now durable, durably.
    pub fn record(&mut self, positions: &BTreeMap<String, u64>) -> store::Result<()> {
        let Some(j) = self.journal.as_mut() else {
            return Ok(());
        };
        let entry = serde_json::to_vec(positions).expect("positions serialize");
        if j.len() > COMPACT_AT {
            return j.rewrite(&[&entry]);
        }
        j.append(&entry);
        if let Some(h) = j.sync_handle()? {
            h.sync()?;
        }
        Ok(())
    }
}

fn reply_msg(to: String, payload: Bytes) -> OutMsg {
    OutMsg {
        subject: to,
        route: None,
        reply: None,
        headers: None,
        payload,
    }
}

fn detach(js: &JetStream, l: &mut Link) {
    if let Some(live) = l.live.take() {
        js.server.unsubscribe(&live.sub);
        live.origin.send(Cmd::DropSourceConsumer {
            name: live.consumer,
        });
    }
}

fn attach(js: &JetStream, me: &Arc<StreamHandle>, key: &str, l: &mut Link) {
    let Some(origin) = js.stream(&l.spec.origin) else {
        l.retry_at = Some(Instant::now() + RETRY);
        return;
    };
    l.generation += 1;
    l.retry_at = None;
    let deliver = format!("$JS.S.{}", unique_token());
    let sub = match sinks::subscribe_source(js, me, key, l.generation, &deliver) {
        Ok(s) => s,
        Err(e) => {
            warn!("Source {key}: {e}");
            l.retry_at = Some(Instant::now() + RETRY);
            return;
        }
    };
    let retention = origin.config.read().retention;
    let ack = retention != Retention::Limits;
    let spec = &l.spec;
    let (deliver_policy, opt_start_seq, opt_start_time) = if spec.start_seq > 0 {
        (DeliverPolicy::ByStartSequence, spec.start_seq, None)
    } else if spec.start_time.is_some() {
        (DeliverPolicy::ByStartTime, 0, spec.start_time)
    } else {
        (DeliverPolicy::All, 0, None)
    };
    let name = format!("JS_SRC_{}", unique_token());
    let config = ConsumerConfig {
        name: name.clone(),
        deliver_subject: deliver,
        deliver_policy,
        opt_start_seq,
        opt_start_time,
        ack_policy: if ack {
            AckPolicy::Explicit
        } else {
            AckPolicy::None
        },
        ack_wait: 22 * 3600 * 1_000_000_000,
        max_deliver: 1,
        idle_heartbeat: HEARTBEAT.as_nanos() as i64,
        flow_control: true,
        direct: true,
        mem_storage: true,
        inactive_threshold: 10_000_000_000,
        filter_subject: spec.filter_subject.clone(),
        filter_subjects: spec.filter_subjects.clone(),
        num_replicas: 1,
        ..Default::default()
    };
    let (done, rx) = oneshot::channel();
    if !origin.send(Cmd::CreateSourceConsumer {
        config: Box::new(config),
        done,
    }) {
        js.server.unsubscribe(&sub);
        l.retry_at = Some(Instant::now() + RETRY);
        return;
    }
    let me2 = me.clone();
    let key2 = key.to_string();
    let generation = l.generation;
    tokio::spawn(async move {
        let result = rx
            .await
            .unwrap_or_else(|_| Err(jetstream::api::E::STREAM_NOT_FOUND.err()));
        me2.send(Cmd::SourceAttached {
            key: key2,
            generation,
            result,
        });
    });
    l.live = Some(Live {
        consumer: name,
        origin,
        sub,
        ack,
        last_dseq: 0,
        heard: Instant::now(),
    });
}
