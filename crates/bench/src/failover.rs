//! Failover time of a replicated stream: from SIGKILL of its leader to the
//! first publish acknowledged afterwards, as a client sees it; and how
//! long the consumer creates sent one after another from the kill wait
//! for their answers, success or error (the latencies; one never answered
//! counts as [`ANSWER_WAIT`], when a client gives up and asks again).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use bytes::Bytes;

use crate::{client, connect, Error, Params, Report, Result};

const STREAM: &str = "BENCHFO";
/// How long a consumer create waits for its answer.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// Consumer creates, one after another until `stop`: how long each
/// waited for an answer.
async fn creates(c: async_nats::Client, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let subject = format!("$JS.API.CONSUMER.CREATE.{STREAM}");
    let body = format!(
        r#"{{"stream_name":"{STREAM}","config":{{"ack_policy":"explicit","inactive_threshold":5000000000}}}}"#
    );
    let mut waits = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let sent = Instant::now();
        let asked = c.request(subject.clone(), Bytes::from(body.clone()));
        match tokio::time::timeout(ANSWER_WAIT, asked).await {
            Ok(Ok(_)) => waits.push(sent.elapsed()),
            // No responders: answered at once, a client asks again.
            Ok(Err(_)) => {
                waits.push(sent.elapsed());
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(_) => waits.push(ANSWER_WAIT),
        }
    }
    waits
}

async fn leader(js: &jetstream::Context) -> Result<Option<String>> {
    let mut s = js.get_stream(STREAM).await.map_err(client("stream info"))?;
    let info = s.info().await.map_err(client("stream info"))?;
    Ok(info.cluster.as_ref().and_then(|c| c.leader.clone()))
}

/// Publishes until one is acknowledged; each attempt waits at most
/// `wait`, so the measurement's resolution is about `wait`'s.
async fn first_ack(js: &jetstream::Context, wait: Duration, give_up: Instant) -> Result<Instant> {
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        let id = format!("failover-{attempt}");
        let sent = async {
            let mut h = async_nats::HeaderMap::new();
            h.insert("Nats-Msg-Id", id.as_str());
            let ack = js
                .publish_with_headers("bench.fo.msgs", h, Bytes::from_static(b"after"))
                .await
                .map_err(|e| e.to_string())?;
            ack.await.map(|_| ()).map_err(|e| e.to_string())
        };
        if let Ok(Ok(())) = tokio::time::timeout(wait, sent).await {
            return Ok(Instant::now());
        }
        if Instant::now() > give_up {
            return Err(Error::Wrong {
                scenario: "failover",
                detail: format!("no publish acknowledged in {attempt} attempts"),
            });
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A client of one of the servers in `p.url` that is not `leader`.
async fn survivor(p: &Params, leader: &str) -> Result<async_nats::Client> {
    for url in p.url.split(',').map(str::trim) {
        let c = crate::connect_to(p, url).await?;
        if c.server_info().server_name != leader {
            return Ok(c);
        }
    }
    Err(Error::Wrong {
        scenario: "failover",
        detail: format!("no server but the leader {leader} in {}", p.url),
    })
}

pub async fn leader_killed(p: &Params) -> Result<Report> {
    let c = connect(p).await?;
    let js = jetstream::new(c.clone());
    let _ = js.delete_stream(STREAM).await;
    js.create_stream(stream::Config {
        name: STREAM.into(),
        subjects: vec!["bench.fo.>".into()],
        num_replicas: p.replicas.max(3),
        ..Default::default()
    })
    .await
    .map_err(client("creating the stream"))?;
    // Committed traffic before the kill, so followers are current.
    for _ in 0..100 {
        js.publish("bench.fo.msgs", Bytes::from_static(b"before"))
            .await
            .map_err(client("publishing"))?
            .await
            .map_err(client("awaiting a PubAck"))?;
    }
    let old = leader(&js).await?.ok_or_else(|| Error::Wrong {
        scenario: "failover",
        detail: "the stream has no leader".into(),
    })?;
    let pid = p
        .pids
        .iter()
        .find(|(name, _)| *name == old)
        .map(|(_, pid)| *pid)
        .ok_or_else(|| Error::Wrong {
            scenario: "failover",
            detail: format!("no --pid given for the leader {old}"),
        })?;
    // The creates go through a server that lives on, so what they wait
    // for is the cluster, not the client's own reconnect.
    let survivor = survivor(p, &old).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let killed = Instant::now();
    let prober = tokio::spawn(creates(survivor, stop.clone()));
    let status = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .map_err(|e| Error::Wrong {
            scenario: "failover",
            detail: format!("kill {pid}: {e}"),
        })?;
    if !status.success() {
        return Err(Error::Wrong {
            scenario: "failover",
            detail: format!("kill {pid} failed: {status}"),
        });
    }
    let acked = first_ack(&js, Duration::from_millis(250), killed + p.stall * 3).await?;
    let elapsed = acked - killed;
    // The creates go on a second past the first PubAck.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let waits = prober.await.unwrap_or_default();
    let new = leader(&js).await?.unwrap_or_default();
    eprintln!("failover: {old} (pid {pid}) killed, {new} leads after {elapsed:?}");
    if new == old {
        return Err(Error::Wrong {
            scenario: "failover",
            detail: format!("{old} still leads after being killed"),
        });
    }
    let _ = js.delete_stream(STREAM).await;
    let latency = crate::report::Latency::from_samples(waits);
    let mut r = crate::report("failover", p, &c, 1, 1, elapsed, latency);
    r.replicas = p.replicas.max(3);
    Ok(r)
}
