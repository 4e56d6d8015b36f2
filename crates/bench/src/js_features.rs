//! JetStream features of API level 2 and later: counter increments,
//! atomic batches, and pulls through a priority group; and mirrors and
//! sources catching up. Each checks what it measured: the counters add
//! up, every batch is stored, every message is acknowledged or copied.

use std::time::Instant;

use async_nats::jetstream::{self, consumer};
use bytes::Bytes;

use crate::js::{
    ack_each, all_acked, cleanup_stream, fresh_stream_with, prefilled, publish_each,
    stored_messages, Outgoing,
};
use crate::progress::Progress;
use crate::{client, connect, report, share, Error, Latency, Params, Report, Result};

/// Counters the increments are spread over.
const COUNTERS: u64 = 8;

/// `Nats-Incr: +1` on one of eight counters, `in_flight` PubAcks
/// outstanding per publisher; at the end the counters must sum to the
/// number of increments.
pub async fn counter(p: &Params) -> Result<Report> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    fresh_stream_with(&js, p, |cfg| cfg.allow_message_counter = true).await?;
    let increment = |k: u64| -> Outgoing {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Incr", "+1");
        (
            format!("bench.js.count.{}", k % COUNTERS).into(),
            headers,
            Bytes::new(),
        )
    };
    let progress = Progress::start("js-counter", p.msgs, p.progress);
    let start = Instant::now();
    let lat = publish_each(p, p.msgs, p.in_flight, &progress, increment).await;
    let elapsed = start.elapsed();
    progress.finish();
    let lat = lat?;
    let total = counters_total(&js).await?;
    cleanup_stream(&js, p).await;
    if total != p.msgs {
        return Err(Error::Wrong {
            scenario: "js-counter",
            detail: format!("the counters add up to {total} after {} increments", p.msgs),
        });
    }
    let latency = Latency::from_samples(lat);
    Ok(report(
        "js-counter",
        p,
        &c,
        p.msgs,
        p.msgs,
        elapsed,
        latency,
    ))
}

/// The sum of the counters' last values.
async fn counters_total(js: &jetstream::Context) -> Result<u64> {
    let stream = js
        .get_stream("BENCH")
        .await
        .map_err(client("stream info"))?;
    let mut total = 0;
    for k in 0..COUNTERS {
        let subject = format!("bench.js.count.{k}");
        let Ok(m) = stream.get_last_raw_message_by_subject(&subject).await else {
            continue;
        };
        let value: serde_json::Value =
            serde_json::from_slice(&m.payload).map_err(client("a counter's value"))?;
        total += value["val"]
            .as_str()
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| Error::Wrong {
                scenario: "js-counter",
                detail: format!("{subject} holds {value}"),
            })?;
    }
    Ok(total)
}

/// Atomic batches of `p.batch` messages from each publisher, one batch at
/// a time: the staged messages go without waiting, the commit waits for
/// its PubAck, which must name the whole batch.
pub async fn batch(p: &Params) -> Result<Report> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    fresh_stream_with(&js, p, |cfg| cfg.allow_atomic_publish = true).await?;
    let progress = Progress::start("js-batch", p.msgs, p.progress);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..p.pubs {
        let client = connect(p).await?;
        let (p, progress) = (p.clone(), progress.clone());
        let n = share(p.msgs, p.pubs, i);
        tasks.push(tokio::spawn(async move {
            publish_batches(&client, &p, i, n, &progress).await
        }));
    }
    for t in tasks {
        t.await.expect("batch task")?;
    }
    let elapsed = start.elapsed();
    progress.finish();
    let stored = stored_messages(&js).await?;
    cleanup_stream(&js, p).await;
    if stored != p.msgs {
        return Err(Error::Wrong {
            scenario: "js-batch",
            detail: format!("{stored} stored after batches of {} messages", p.msgs),
        });
    }
    Ok(report("js-batch", p, &c, p.msgs, p.msgs, elapsed, None))
}

/// Publisher `who`'s `n` messages in batches of `p.batch`.
async fn publish_batches(
    c: &async_nats::Client,
    p: &Params,
    who: usize,
    n: u64,
    progress: &Progress,
) -> Result<()> {
    let payload = Bytes::from(vec![b'b'; p.size]);
    let size = p.batch.max(1) as u64;
    let mut sent = 0;
    let mut batch = 0;
    while sent < n {
        let count = size.min(n - sent);
        let id = format!("p{who}b{batch}");
        for seq in 1..=count {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Batch-Id", id.as_str());
            headers.insert("Nats-Batch-Sequence", seq.to_string().as_str());
            if seq < count {
                c.publish_with_headers("bench.js.batch", headers, payload.clone())
                    .await
                    .map_err(client("staging"))?;
                continue;
            }
            headers.insert("Nats-Batch-Commit", "1");
            let ack = c
                .request_with_headers("bench.js.batch", headers, payload.clone())
                .await
                .map_err(client("committing"))?;
            let ack: serde_json::Value =
                serde_json::from_slice(&ack.payload).map_err(client("a batch's PubAck"))?;
            if ack["batch"] != id.as_str() || ack["count"] != count {
                return Err(Error::Wrong {
                    scenario: "js-batch",
                    detail: format!("batch {id} of {count} answered {ack}"),
                });
            }
        }
        progress.add(count);
        sent += count;
        batch += 1;
    }
    Ok(())
}

/// A pull consumer with a `pinned_client` priority group over a
/// prefilled stream, batches of `in_flight`, each message acked.
pub async fn pull_group(p: &Params) -> Result<Report> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    let s = prefilled(p, &js).await?;
    let mut cons = s
        .create_consumer(consumer::pull::Config {
            durable_name: Some("BENCHGROUP".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            priority_policy: consumer::PriorityPolicy::PinnedClient,
            priority_groups: vec!["bench".into()],
            ..Default::default()
        })
        .await
        .map_err(client("creating the consumer"))?;
    let progress = Progress::start("js-pull-group", p.msgs, p.progress);
    let start = Instant::now();
    let mut msgs = cons
        .stream()
        .group("bench")
        .max_messages_per_batch(p.in_flight.max(1))
        .messages()
        .await
        .map_err(client("pulling"))?;
    let consumed = ack_each("js-pull-group", &mut msgs, p, &progress).await;
    let elapsed = start.elapsed();
    progress.finish();
    consumed?;
    drop(msgs);
    all_acked("js-pull-group", &mut cons, p).await?;
    cleanup_stream(&js, p).await;
    Ok(report(
        "js-pull-group",
        p,
        &c,
        p.msgs,
        p.msgs,
        elapsed,
        None,
    ))
}

/// The stream that copies `BENCH` in `js-mirror` and `js-source`.
const COPY: &str = "BENCH_COPY";

/// A mirror (`mirror`) or a source of a stream prefilled with `p.msgs`
/// messages, made once the prefill is acknowledged and timed until it
/// holds them all (stalling for `p.stall` fails the run). The copy has
/// the origin's replicas and storage.
pub async fn copy(p: &Params, mirror: bool) -> Result<Report> {
    let scenario = if mirror { "js-mirror" } else { "js-source" };
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    let _ = js.delete_stream(COPY).await;
    prefilled(p, &js).await?;
    let origin = async_nats::jetstream::stream::Source {
        name: crate::js::STREAM.into(),
        ..Default::default()
    };
    let mut config = async_nats::jetstream::stream::Config {
        name: COPY.into(),
        storage: if p.memory {
            async_nats::jetstream::stream::StorageType::Memory
        } else {
            async_nats::jetstream::stream::StorageType::File
        },
        num_replicas: p.replicas,
        ..Default::default()
    };
    match mirror {
        true => config.mirror = Some(origin),
        false => config.sources = Some(vec![origin]),
    }
    let progress = Progress::start(scenario, p.msgs, p.progress);
    let start = Instant::now();
    let mut copy = js
        .create_stream(config)
        .await
        .map_err(client("creating the copy"))?;
    let (mut seen, mut moved) = (0, Instant::now());
    let elapsed = loop {
        let held = copy
            .info()
            .await
            .map_err(client("the copy's info"))?
            .state
            .messages;
        progress.add(held.saturating_sub(progress.get()));
        if held >= p.msgs {
            break start.elapsed();
        }
        if held > seen {
            (seen, moved) = (held, Instant::now());
        } else if moved.elapsed() > p.stall {
            progress.finish();
            let _ = js.delete_stream(COPY).await;
            return Err(Error::Wrong {
                scenario,
                detail: format!("the copy stalled at {held} of {} messages", p.msgs),
            });
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    progress.finish();
    if !p.keep {
        let _ = js.delete_stream(COPY).await;
    }
    cleanup_stream(&js, p).await;
    Ok(report(scenario, p, &c, p.msgs, p.msgs, elapsed, None))
}
