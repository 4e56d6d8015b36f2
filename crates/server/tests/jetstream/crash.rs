//! Crash safety: a real server under concurrent publish-with-ack and
//! double-ack load is SIGKILLed at random moments and restarted, many
//! times. After every restart:
//! - every acknowledged publish is stored exactly once, at the sequence
//!   its PubAck named;
//! - no double-acked message is delivered again, and no double-acked
//!   work-queue message is back in its stream;
//! - sequences continue without gaps or reuse.

#[path = "../common/mod.rs"]
mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream, Context};
use futures::StreamExt;
use parking_lot::Mutex;

const KILLS: usize = 24;
const PUBLISHERS: usize = 3;
const IN_FLIGHT: usize = 16;

#[derive(Default, Clone)]
struct Record {
    /// Acked publishes to the limits stream: seq -> msg id.
    published: BTreeMap<u64, String>,
    /// Acked publishes to the work queue: seq -> msg id.
    queued: BTreeMap<u64, String>,
    /// Sequences whose double-ack was confirmed, per stream.
    consumed: BTreeSet<u64>,
    taken: BTreeSet<u64>,
    /// Work-queue sequences ever delivered: their ack may have been
    /// applied without the confirmation reaching us.
    handed_out: BTreeSet<u64>,
    violations: Vec<String>,
}

async fn setup(js: &Context) {
    js.create_stream(stream::Config {
        name: "LOG".into(),
        subjects: vec!["log.>".into()],
        ..Default::default()
    })
    .await
    .expect("create LOG");
    js.create_stream(stream::Config {
        name: "WQ".into(),
        subjects: vec!["wq.>".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        ..Default::default()
    })
    .await
    .expect("create WQ");
    for (s, d) in [("LOG", "reader"), ("WQ", "worker")] {
        js.get_stream(s)
            .await
            .unwrap()
            .create_consumer(consumer::pull::Config {
                durable_name: Some(d.into()),
                ack_wait: Duration::from_secs(2),
                ..Default::default()
            })
            .await
            .expect("create consumer");
    }
}

/// Publishes with unique ids, `IN_FLIGHT` at a time, recording what was
/// acknowledged.
async fn publisher(js: Context, id: usize, round: usize, rec: Arc<Mutex<Record>>) {
    let mut n = 0u64;
    loop {
        let mut acks = Vec::new();
        for _ in 0..IN_FLIGHT {
            n += 1;
            let wq = n.is_multiple_of(4);
            let msg_id = format!("r{round}-p{id}-{n}");
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", msg_id.as_str());
            let subject = if wq {
                format!("wq.{id}")
            } else {
                format!("log.{id}")
            };
            match js
                .publish_with_headers(subject, h, msg_id.clone().into())
                .await
            {
                Ok(f) => acks.push((wq, msg_id, f)),
                Err(_) => return,
            }
        }
        for (wq, msg_id, f) in acks {
            let Ok(Ok(ack)) = tokio::time::timeout(
                Duration::from_secs(5),
                std::future::IntoFuture::into_future(f),
            )
            .await
            else {
                return;
            };
            let mut r = rec.lock();
            let map = if wq { &mut r.queued } else { &mut r.published };
            if let Some(old) = map.insert(ack.sequence, msg_id.clone()) {
                let v = format!("sequence {} acked twice: {old} and {msg_id}", ack.sequence);
                r.violations.push(v);
            }
        }
    }
}

/// Pulls and double-acks, flagging any redelivery of a confirmed ack.
async fn reader(js: Context, stream: &'static str, durable: &'static str, rec: Arc<Mutex<Record>>) {
    let Ok(s) = js.get_stream(stream).await else {
        return;
    };
    let Ok(c) = s.get_consumer::<consumer::pull::Config>(durable).await else {
        return;
    };
    loop {
        let Ok(mut batch) = c
            .fetch()
            .max_messages(20)
            .expires(Duration::from_millis(500))
            .messages()
            .await
        else {
            return;
        };
        while let Some(m) = batch.next().await {
            let Ok(m) = m else { return };
            let Ok(info) = m.info() else { return };
            let seq = info.stream_sequence;
            {
                let mut r = rec.lock();
                let done = if stream == "LOG" {
                    &r.consumed
                } else {
                    &r.taken
                };
                if done.contains(&seq) {
                    let v = format!(
                        "{stream}: sequence {seq} delivered again after its ack was confirmed"
                    );
                    r.violations.push(v);
                }
                if stream == "WQ" {
                    r.handed_out.insert(seq);
                }
            }
            if m.double_ack().await.is_err() {
                return;
            }
            let mut r = rec.lock();
            if stream == "LOG" {
                r.consumed.insert(seq);
            } else {
                r.taken.insert(seq);
            }
        }
    }
}

/// Checks the stores against everything acknowledged so far.
async fn verify(js: &Context, rec: &Record, full: bool) {
    assert!(rec.violations.is_empty(), "{:#?}", rec.violations);
    let mut log = js.get_stream("LOG").await.expect("LOG after restart");
    let st = log.info().await.unwrap().state.clone();
    let max_acked = rec.published.keys().next_back().copied().unwrap_or(0);
    assert!(
        st.last_sequence >= max_acked,
        "LOG lost acked tail: last {} < {max_acked}",
        st.last_sequence
    );
    assert_eq!(st.messages, st.last_sequence, "LOG has gaps: {st:?}");
    // Acked publishes at their sequence: the newest ones each round, all
    // of them at the end.
    let check: Vec<(&u64, &String)> = if full {
        rec.published.iter().collect()
    } else {
        rec.published.iter().rev().take(200).collect()
    };
    for (seq, id) in check {
        let m = log
            .get_raw_message(*seq)
            .await
            .unwrap_or_else(|e| panic!("LOG seq {seq} ({id}) missing: {e}"));
        assert_eq!(
            std::str::from_utf8(&m.payload).unwrap(),
            id,
            "LOG seq {seq}"
        );
    }
    let wq = js.get_stream("WQ").await.expect("WQ after restart");
    let taken: Vec<&u64> = if full {
        rec.taken.iter().collect()
    } else {
        rec.taken.iter().rev().take(200).collect()
    };
    for seq in taken {
        assert!(
            wq.get_raw_message(*seq).await.is_err(),
            "WQ seq {seq} was consumed but is back"
        );
    }
    for (seq, id) in rec
        .queued
        .iter()
        .rev()
        .take(if full { usize::MAX } else { 200 })
    {
        if rec.handed_out.contains(seq) {
            continue;
        }
        let m = wq
            .get_raw_message(*seq)
            .await
            .unwrap_or_else(|e| panic!("WQ seq {seq} ({id}) missing: {e}"));
        assert_eq!(std::str::from_utf8(&m.payload).unwrap(), id);
    }
    if full {
        // Exactly once: no message id stored twice.
        let mut seen = BTreeSet::new();
        for seq in 1..=st.last_sequence {
            let m = log.get_raw_message(seq).await.unwrap();
            let id = String::from_utf8(m.payload.to_vec()).unwrap();
            assert!(seen.insert(id.clone()), "LOG: {id} stored twice");
        }
    }
    let _ = log.info().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acked_writes_survive_sigkill() {
    let mut s = common::one_js_server();
    {
        let c = s.client().await;
        setup(&jetstream::new(c)).await;
    }
    let rec = Arc::new(Mutex::new(Record::default()));
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut last_seq_before = 0u64;
    for round in 0..KILLS {
        let c = s.client().await;
        let js = jetstream::new(c.clone());
        let snapshot = rec.lock().clone();
        verify(&js, &snapshot, false).await;
        // Sequences continue: nothing acked is reused.
        let last = js
            .get_stream("LOG")
            .await
            .unwrap()
            .info()
            .await
            .unwrap()
            .state
            .last_sequence;
        assert!(
            last >= last_seq_before,
            "round {round}: last seq went back from {last_seq_before} to {last}"
        );
        let mut tasks = Vec::new();
        for p in 0..PUBLISHERS {
            tasks.push(tokio::spawn(publisher(js.clone(), p, round, rec.clone())));
        }
        tasks.push(tokio::spawn(reader(
            js.clone(),
            "LOG",
            "reader",
            rec.clone(),
        )));
        tasks.push(tokio::spawn(reader(
            js.clone(),
            "WQ",
            "worker",
            rec.clone(),
        )));
        tokio::time::sleep(Duration::from_millis(rng.u64(150..600))).await;
        s.kill9();
        for t in &tasks {
            t.abort();
        }
        for t in tasks {
            let _ = t.await;
        }
        drop(c);
        last_seq_before = rec
            .lock()
            .published
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0);
        s.restart();
    }
    let c = s.client().await;
    let js = jetstream::new(c);
    let r = rec.lock().clone();
    eprintln!(
        "{KILLS} kills: {} acked publishes, {} work-queue publishes, {} + {} confirmed acks",
        r.published.len(),
        r.queued.len(),
        r.consumed.len(),
        r.taken.len()
    );
    assert!(
        r.published.len() > 1000,
        "too little load to mean anything: {}",
        r.published.len()
    );
    assert!(!r.consumed.is_empty() && !r.taken.is_empty());
    verify(&js, &r, true).await;
}
