//! JetStream: publish with acks in flight, pull and push consumers with
//! explicit acks, KV put and get. Each run starts from a fresh stream
//! (`BENCH`) or bucket (`BENCHKV`) and removes it afterwards unless
//! `keep` is set.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv, stream};
use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::StreamExt;

use crate::progress::Progress;
use crate::{client, connect, report, share, Error, Latency, Params, Report, Result};

pub(crate) const STREAM: &str = "BENCH";
const SUBJECT: &str = "bench.js.msgs";
const BUCKET: &str = "BENCHKV";

fn storage(p: &Params) -> stream::StorageType {
    if p.memory {
        stream::StorageType::Memory
    } else {
        stream::StorageType::File
    }
}

async fn fresh_stream(js: &jetstream::Context, p: &Params) -> Result<stream::Stream> {
    fresh_stream_with(js, p, |_| {}).await
}

/// A fresh benchmark stream, its config changed by `tweak` first.
pub(crate) async fn fresh_stream_with(
    js: &jetstream::Context,
    p: &Params,
    tweak: impl FnOnce(&mut stream::Config),
) -> Result<stream::Stream> {
    let _ = js.delete_stream(STREAM).await;
    let mut config = stream::Config {
        name: STREAM.into(),
        subjects: vec!["bench.js.>".into()],
        storage: storage(p),
        num_replicas: p.replicas,
        max_messages: p.max_msgs.map_or(-1, |m| m as i64),
        ..Default::default()
    };
    tweak(&mut config);
    js.create_stream(config)
        .await
        .map_err(client("creating the stream"))
}

/// How many messages the stream holds (an error if it is missing).
pub(crate) async fn stored_messages(js: &jetstream::Context) -> Result<u64> {
    Ok(js
        .get_stream(STREAM)
        .await
        .map_err(client("stream info"))?
        .info()
        .await
        .map_err(client("stream info"))?
        .state
        .messages)
}

pub(crate) async fn cleanup_stream(js: &jetstream::Context, p: &Params) {
    if !p.keep {
        let _ = js.delete_stream(STREAM).await;
    }
}

/// A message to publish: subject, headers, body.
pub(crate) type Outgoing = (async_nats::Subject, async_nats::HeaderMap, Bytes);

/// `p.size` bytes on the benchmark subject.
fn plain(p: &Params) -> impl Fn(u64) -> Outgoing + Clone + Send + 'static {
    let payload = Bytes::from(vec![b'j'; p.size]);
    move |_| {
        (
            SUBJECT.into(),
            async_nats::HeaderMap::new(),
            payload.clone(),
        )
    }
}

/// Publishes `total` messages from `p.pubs` connections, each keeping
/// `in_flight` PubAcks outstanding; every PubAck must arrive. Returns each
/// publish's send-to-ack latency.
async fn publish_acked(
    p: &Params,
    total: u64,
    in_flight: usize,
    progress: &Progress,
) -> Result<Vec<Duration>> {
    publish_each(p, total, in_flight, progress, plain(p)).await
}

/// As `publish_acked`, the `n`th message of each publisher made by `msg`.
pub(crate) async fn publish_each(
    p: &Params,
    total: u64,
    in_flight: usize,
    progress: &Progress,
    msg: impl Fn(u64) -> Outgoing + Clone + Send + 'static,
) -> Result<Vec<Duration>> {
    let mut tasks = Vec::new();
    for i in 0..p.pubs {
        let js = jetstream::new(connect(p).await?);
        let (msg, progress) = (msg.clone(), progress.clone());
        let n = share(total, p.pubs, i);
        let in_flight = in_flight.max(1);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(n as usize);
            let mut pending = FuturesUnordered::new();
            for k in 0..n {
                if pending.len() >= in_flight {
                    let l: Result<Duration> = pending.next().await.expect("pending is not empty");
                    lat.push(l?);
                    progress.add(1);
                }
                let t = Instant::now();
                let (subject, headers, payload) = msg(k);
                // Plain messages as plain PUBs, not HPUBs with no header.
                let ack = match headers.is_empty() {
                    true => js.publish(subject, payload).await,
                    false => js.publish_with_headers(subject, headers, payload).await,
                }
                .map_err(client("publishing"))?;
                pending.push(async move {
                    ack.await.map_err(client("awaiting a PubAck"))?;
                    Ok(t.elapsed())
                });
            }
            while let Some(l) = pending.next().await {
                lat.push(l?);
                progress.add(1);
            }
            Ok::<_, Error>(lat)
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.expect("publisher task")?);
    }
    Ok(lat)
}

/// JetStream publish; with `in_flight` 1 this is the synchronous publish
/// whose latency percentiles matter.
pub async fn publish(p: &Params) -> Result<Report> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    let before = match p.append {
        true => stored_messages(&js).await.unwrap_or(0),
        false => 0,
    };
    if before == 0 {
        fresh_stream(&js, p).await?;
    }
    let progress = Progress::start("js-pub", p.msgs, p.progress);
    let start = Instant::now();
    let lat = publish_acked(p, p.msgs, p.in_flight, &progress).await;
    let elapsed = start.elapsed();
    progress.finish();
    let lat = lat?;
    let stored = stored_messages(&js).await?;
    cleanup_stream(&js, p).await;
    let expected = before + p.msgs;
    if stored != p.max_msgs.map_or(expected, |m| m.min(expected)) {
        return Err(Error::Wrong {
            scenario: "js-pub",
            detail: format!("{stored} stored after {} PubAcks ({before} before)", p.msgs),
        });
    }
    Ok(report(
        "js-pub",
        p,
        &c,
        p.msgs,
        p.msgs,
        elapsed,
        Latency::from_samples(lat),
    ))
}

/// A fresh stream holding `p.msgs` messages (not timed).
pub(crate) async fn prefilled(p: &Params, js: &jetstream::Context) -> Result<stream::Stream> {
    let s = fresh_stream(js, p).await?;
    let fill = Progress::start("prefill", p.msgs, p.progress);
    let done = publish_acked(p, p.msgs, 256, &fill).await;
    fill.finish();
    done?;
    Ok(s)
}

/// Waits until the consumer has every message acknowledged.
pub(crate) async fn all_acked<T: consumer::IntoConsumerConfig + consumer::FromConsumer>(
    scenario: &'static str,
    c: &mut consumer::Consumer<T>,
    p: &Params,
) -> Result<()> {
    let deadline = Instant::now() + p.stall;
    loop {
        let info = c.info().await.map_err(client("consumer info"))?;
        if info.ack_floor.stream_sequence >= p.msgs && info.num_ack_pending == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::Wrong {
                scenario,
                detail: format!(
                    "ack floor {} of {}, {} pending",
                    info.ack_floor.stream_sequence, p.msgs, info.num_ack_pending
                ),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Takes `p.msgs` messages from a consumer and acks each; fails once
/// nothing arrives for `p.stall`.
pub(crate) async fn ack_each<S, E>(
    scenario: &'static str,
    msgs: &mut S,
    p: &Params,
    progress: &Progress,
) -> Result<()>
where
    S: futures::Stream<Item = std::result::Result<jetstream::Message, E>> + Unpin,
    E: std::fmt::Display,
{
    for got in 0..p.msgs {
        let m = match tokio::time::timeout(p.stall, msgs.next()).await {
            Ok(Some(m)) => m.map_err(client("receiving"))?,
            _ => {
                return Err(Error::Stalled {
                    scenario,
                    got,
                    want: p.msgs,
                    stall: p.stall,
                })
            }
        };
        m.ack().await.map_err(client("acking"))?;
        progress.add(1);
    }
    Ok(())
}

/// Pull consumer, batches of `in_flight`, each message acked.
pub async fn pull(p: &Params) -> Result<Report> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    let s = prefilled(p, &js).await?;
    let mut cons = s
        .create_consumer(consumer::pull::Config {
            durable_name: Some("BENCHPULL".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            ..Default::default()
        })
        .await
        .map_err(client("creating the consumer"))?;
    let progress = Progress::start("js-pull", p.msgs, p.progress);
    let start = Instant::now();
    let mut msgs = cons
        .stream()
        .max_messages_per_batch(p.in_flight.max(1))
        .messages()
        .await
        .map_err(client("pulling"))?;
    let consumed = ack_each("js-pull", &mut msgs, p, &progress).await;
    let elapsed = start.elapsed();
    progress.finish();
    consumed?;
    drop(msgs);
    all_acked("js-pull", &mut cons, p).await?;
    cleanup_stream(&js, p).await;
    Ok(report("js-pull", p, &c, p.msgs, p.msgs, elapsed, None))
}

/// Push consumer with `max_ack_pending` of `in_flight`, each message acked.
pub async fn push(p: &Params) -> Result<Report> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    let s = prefilled(p, &js).await?;
    let mut cons = s
        .create_consumer(consumer::push::Config {
            durable_name: Some("BENCHPUSH".into()),
            deliver_subject: c.new_inbox(),
            ack_policy: consumer::AckPolicy::Explicit,
            max_ack_pending: p.in_flight.max(1) as i64,
            ..Default::default()
        })
        .await
        .map_err(client("creating the consumer"))?;
    let progress = Progress::start("js-push", p.msgs, p.progress);
    let start = Instant::now();
    let mut msgs = cons.messages().await.map_err(client("subscribing"))?;
    let consumed = ack_each("js-push", &mut msgs, p, &progress).await;
    let elapsed = start.elapsed();
    progress.finish();
    consumed?;
    drop(msgs);
    all_acked("js-push", &mut cons, p).await?;
    cleanup_stream(&js, p).await;
    Ok(report("js-push", p, &c, p.msgs, p.msgs, elapsed, None))
}

/// `p.pubs` writers put `p.msgs` distinct keys one at a time, then read
/// every one back and check it: two reports, `kv-put` and `kv-get`.
pub async fn kv(p: &Params) -> Result<Vec<Report>> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    let _ = js.delete_key_value(BUCKET).await;
    let store = js
        .create_key_value(kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            storage: storage(p),
            num_replicas: p.replicas,
            ..Default::default()
        })
        .await
        .map_err(client("creating the bucket"))?;
    let value = Bytes::from(vec![b'v'; p.size]);
    let mut reports = Vec::new();
    for phase in ["kv-put", "kv-get"] {
        let progress = Progress::start(phase, p.msgs, p.progress);
        let start = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..p.pubs {
            let (store, value, progress) = (store.clone(), value.clone(), progress.clone());
            let n = share(p.msgs, p.pubs, i);
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(n as usize);
                for k in 0..n {
                    let key = format!("k.{i}.{k}");
                    let t = Instant::now();
                    if phase == "kv-put" {
                        store
                            .put(key, value.clone())
                            .await
                            .map_err(client("putting"))?;
                    } else {
                        let got = store.get(key).await.map_err(client("getting"))?;
                        if got.as_ref() != Some(&value) {
                            return Err(Error::Wrong {
                                scenario: "kv",
                                detail: "a key read back differs from what was put".into(),
                            });
                        }
                    }
                    lat.push(t.elapsed());
                    progress.add(1);
                }
                Ok(lat)
            }));
        }
        let mut lat = Vec::new();
        let mut failed = None;
        for t in tasks {
            match t.await.expect("kv task") {
                Ok(l) => lat.extend(l),
                Err(e) => failed = Some(e),
            }
        }
        let elapsed = start.elapsed();
        progress.finish();
        if let Some(e) = failed {
            return Err(e);
        }
        reports.push(report(
            phase,
            p,
            &c,
            p.msgs,
            p.msgs,
            elapsed,
            Latency::from_samples(lat),
        ));
    }
    if !p.keep {
        let _ = js.delete_key_value(BUCKET).await;
    }
    Ok(reports)
}
