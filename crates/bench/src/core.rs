//! Core NATS: publish/subscribe, queue groups, request/reply.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;

use crate::progress::Progress;
use crate::{
    client, connect, connect_to, report, settled, share, unique, Latency, Params, Report, Result,
};

/// Publishes `total` messages from `p.pubs` connections, each settled at
/// the end: the server has read every PUB before the connection closes.
/// A flush is not enough. It only hands the bytes to the kernel, and a
/// socket closed with input still unread (the server's first PING, two
/// seconds in) is reset, which discards what the server had not read
/// yet, as it may not while its subscribers are behind.
async fn publish_all(p: &Params, subject: &str, total: u64) -> Result<()> {
    let payload = Bytes::from(vec![b'x'; p.size]);
    let mut tasks = Vec::new();
    for i in 0..p.pubs {
        let c = connect(p).await?;
        let (subject, payload) = (async_nats::Subject::from(subject), payload.clone());
        let n = share(total, p.pubs, i);
        tasks.push(tokio::spawn(async move {
            for _ in 0..n {
                c.publish(subject.clone(), payload.clone())
                    .await
                    .map_err(client("publishing"))?;
            }
            settled(&c).await
        }));
    }
    for t in tasks {
        t.await.expect("publisher task")?;
    }
    Ok(())
}

/// `p.subs` connections subscribed to `subject` (in a queue group if
/// given), each counting at most `limit` messages into `progress`; the
/// connections are returned to keep the subscriptions alive.
async fn subscribers(
    p: &Params,
    subject: &str,
    queue: Option<&str>,
    limit: u64,
    progress: &Progress,
) -> Result<Vec<async_nats::Client>> {
    let mut conns = Vec::new();
    for _ in 0..p.subs {
        let c = connect_to(p, p.sub_url.as_deref().unwrap_or(&p.url)).await?;
        let subscribed = match queue {
            Some(q) => c.queue_subscribe(subject.to_string(), q.to_string()).await,
            None => c.subscribe(subject.to_string()).await,
        };
        let mut s = subscribed.map_err(client("subscribing"))?;
        settled(&c).await?;
        let progress = progress.clone();
        tokio::spawn(async move {
            let mut n = 0;
            while n < limit && s.next().await.is_some() {
                progress.add(1);
                n += 1;
            }
        });
        conns.push(c);
    }
    Ok(conns)
}

/// With subscribers on another server (`p.sub_url`): waits until every
/// subscriber connection's interest has reached the publishers' server.
/// Each subscribes a probe subject after its measured one, over the same
/// connection, so once a probe published at `p.url` arrives, the
/// interest sent before it has arrived too.
async fn interest_crossed(p: &Params, subscribers: &[async_nats::Client]) -> Result<()> {
    if p.sub_url.is_none() {
        return Ok(());
    }
    let publisher = connect(p).await?;
    for c in subscribers {
        let probe = unique("bench.probe");
        let mut s = c
            .subscribe(probe.clone())
            .await
            .map_err(client("subscribing"))?;
        settled(c).await?;
        let deadline = Instant::now() + p.stall;
        loop {
            publisher
                .publish(probe.clone(), Bytes::new())
                .await
                .map_err(client("publishing"))?;
            if let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(50), s.next()).await {
                break;
            }
            if Instant::now() > deadline {
                return Err(crate::Error::Wrong {
                    scenario: "pubsub",
                    detail: format!("the subscribers' interest never reached {}", p.url),
                });
            }
        }
    }
    Ok(())
}

/// 1:1 with one subscriber, fan-out 1:N with more: every subscriber must
/// receive every message.
pub async fn pubsub(p: &Params) -> Result<Report> {
    let subject = unique("bench.core");
    let want = p.msgs * p.subs as u64;
    let progress = Progress::start("pubsub", want, p.progress);
    let conns = subscribers(p, &subject, None, p.msgs, &progress).await?;
    interest_crossed(p, &conns).await?;
    let start = Instant::now();
    publish_all(p, &subject, p.msgs).await?;
    let end = progress.wait("pubsub", p.stall).await;
    progress.finish();
    let elapsed = end? - start;
    Ok(report("pubsub", p, &conns[0], p.msgs, want, elapsed, None))
}

/// A queue group of `p.subs` workers: every message reaches exactly one.
pub async fn queue(p: &Params) -> Result<Report> {
    let subject = unique("bench.queue");
    let progress = Progress::start("queue", p.msgs, p.progress);
    let conns = subscribers(p, &subject, Some("workers"), u64::MAX, &progress).await?;
    interest_crossed(p, &conns).await?;
    let start = Instant::now();
    publish_all(p, &subject, p.msgs).await?;
    let end = progress.wait("queue", p.stall).await;
    progress.finish();
    let elapsed = end? - start;
    // A message delivered to two workers would push the count past the
    // target; give strays a moment to show up.
    tokio::time::sleep(Duration::from_millis(100)).await;
    if progress.get() != p.msgs {
        return Err(crate::Error::Wrong {
            scenario: "queue",
            detail: format!("{} deliveries for {} messages", progress.get(), p.msgs),
        });
    }
    Ok(report("queue", p, &conns[0], p.msgs, p.msgs, elapsed, None))
}

/// Sequential round trips from each of `p.pubs` requesters to `p.subs`
/// responders (a queue group, at `p.sub_url` when given), each answer
/// checked.
pub async fn request(p: &Params) -> Result<Report> {
    let subject = unique("bench.req");
    let mut responders = Vec::new();
    for _ in 0..p.subs {
        let c = connect_to(p, p.sub_url.as_deref().unwrap_or(&p.url)).await?;
        let mut s = c
            .queue_subscribe(subject.clone(), "responders".into())
            .await
            .map_err(client("subscribing"))?;
        settled(&c).await?;
        let answer = c.clone();
        tokio::spawn(async move {
            while let Some(m) = s.next().await {
                if let Some(reply) = m.reply {
                    if answer.publish(reply, m.payload).await.is_err() {
                        return;
                    }
                }
            }
        });
        responders.push(c);
    }
    let progress = Progress::start("request", p.msgs, p.progress);
    let payload = Bytes::from(vec![b'r'; p.size]);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..p.pubs {
        let c = connect(p).await?;
        let (subject, payload, progress) = (subject.clone(), payload.clone(), progress.clone());
        let n = share(p.msgs, p.pubs, i);
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let t = Instant::now();
                let m = c
                    .request(subject.clone(), payload.clone())
                    .await
                    .map_err(client("requesting"))?;
                lat.push(t.elapsed());
                if m.payload != payload {
                    return Err(crate::Error::Wrong {
                        scenario: "request",
                        detail: "an answer differs from its request".into(),
                    });
                }
                progress.add(1);
            }
            Ok(lat)
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.expect("requester task")?);
    }
    let elapsed = start.elapsed();
    progress.finish();
    Ok(report(
        "request",
        p,
        &responders[0],
        p.msgs,
        p.msgs,
        elapsed,
        Latency::from_samples(lat),
    ))
}
