//! Many replicated streams: create `msgs` streams of `replicas` replicas,
//! `in_flight` creations at a time, and time it. The servers' idle cost
//! afterwards is measured from outside (`scripts/bench-compare`).

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use futures::StreamExt;

use crate::{connect, Error, Params, Report, Result};

/// Attempts per stream: a create can time out while the cluster is busy,
/// and its retry meets the stream it made, which is not an error.
const ATTEMPTS: usize = 5;

pub async fn create_many(p: &Params) -> Result<Report> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    let started = Instant::now();
    let made = futures::stream::iter(0..p.msgs)
        .map(|i| {
            let js = js.clone();
            async move {
                let cfg = stream::Config {
                    name: format!("BENCHM{i}"),
                    subjects: vec![format!("bench.m.{i}")],
                    num_replicas: p.replicas,
                    ..Default::default()
                };
                for _ in 0..ATTEMPTS {
                    if js.get_or_create_stream(cfg.clone()).await.is_ok() {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                false
            }
        })
        .buffer_unordered(p.in_flight.max(1))
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await as u64;
    let elapsed = started.elapsed();
    if made != p.msgs {
        return Err(Error::Wrong {
            scenario: "streams",
            detail: format!("{made} of {} streams created", p.msgs),
        });
    }
    Ok(crate::report("streams", p, &c, made, made, elapsed, None))
}
