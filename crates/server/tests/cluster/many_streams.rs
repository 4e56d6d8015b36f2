//! Thousands of replicated streams on three real servers: they can be
//! created, each gets a leader, and when a server dies every stream it
//! led gets a new leader within the usual failover time.
//!
//! On two cores, debug servers create the 2,000 streams in about a minute
//! and have every stream led again about 5 s after the kill (release
//! binaries: 20 s and 2.5 s). The subject and protocol crates are built
//! optimized in the dev profile (Cargo.toml) for this: unoptimized, the
//! match-cache sweeps of the new leaders' subscriptions took the CPU, and
//! elections went on for 30 s and more.

#[path = "../common/mod.rs"]
mod common;

use common::replicated::{api_ready, cluster3};

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;

const STREAMS: usize = 2000;

/// Stream groups a server leads, and how many it holds, from its /raftz.
fn leading(s: &common::Server) -> (usize, usize) {
    let z = s.json("/raftz");
    let groups = z["$G"].as_object().cloned().unwrap_or_default();
    let streams: Vec<_> = groups
        .iter()
        .filter(|(name, _)| name.starts_with("S-R3F-"))
        .collect();
    let led = streams
        .iter()
        .filter(|(_, g)| g["state"] == "LEADER")
        .count();
    (led, streams.len())
}

/// Waits until `servers` lead every stream between them, each holding
/// all of them. Polled twice a second: 2,000 groups' /raftz from every
/// server every 50 ms was load enough to slow the elections it watched.
fn wait_all_led(servers: &[&common::Server], within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let counts: Vec<(usize, usize)> = servers.iter().map(|s| leading(s)).collect();
        if counts.iter().map(|c| c.0).sum::<usize>() == STREAMS
            && counts.iter().all(|c| c.1 == STREAMS)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for every stream led:\n{}",
            unled(servers)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What the servers say of the groups none of them leads: state, term,
/// leader, vote and commit on each, for the first few, and a count.
fn unled(servers: &[&common::Server]) -> String {
    let zs: Vec<serde_json::Value> = servers.iter().map(|s| s.json("/raftz")).collect();
    let Some(groups) = zs[0]["$G"].as_object() else {
        return "no groups".into();
    };
    let mut out = Vec::new();
    for name in groups.keys().filter(|n| n.starts_with("S-R3F-")) {
        let views: Vec<&serde_json::Value> = zs.iter().map(|z| &z["$G"][name]).collect();
        if views.iter().any(|g| g["state"] == "LEADER") {
            continue;
        }
        let line = views
            .iter()
            .map(|g| {
                format!(
                    "{}/t{}/l={}/v={}/c{}",
                    g["state"], g["term"], g["leader"], g["voted_for"], g["committed"]
                )
            })
            .collect::<Vec<_>>()
            .join("  ");
        out.push(format!("{name}: {line}"));
    }
    let n = out.len();
    out.truncate(20);
    format!("{n} groups unled\n{}", out.join("\n"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_streams_fail_over_when_a_server_dies() {
    let mut all = cluster3();
    let mut clients = Vec::new();
    for s in &all {
        clients.push(s.client().await);
    }
    api_ready(&clients).await;
    let started = Instant::now();
    let created = futures::stream::iter(0..STREAMS)
        .map(|i| {
            let c = clients[i % 3].clone();
            async move {
                let cfg = json!({"name": format!("M{i}"), "subjects": [format!("m.{i}")], "num_replicas": 3});
                for _ in 0..5 {
                    let r = c
                        .request(format!("$JS.API.STREAM.CREATE.M{i}"), cfg.to_string().into())
                        .await;
                    if let Ok(m) = r {
                        let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
                        if v.get("error").is_none() {
                            return true;
                        }
                        // A retry of a create that went through meets the
                        // stream: the same config is not an error.
                        eprintln!("M{i}: {v}");
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                false
            }
        })
        .buffer_unordered(32)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    assert_eq!(created, STREAMS);
    eprintln!("{STREAMS} R3 streams created in {:.1?}", started.elapsed());
    let everyone: Vec<&common::Server> = all.iter().collect();
    wait_all_led(&everyone, Duration::from_secs(60));
    let (victim, led) = all
        .iter()
        .enumerate()
        .map(|(i, s)| (i, leading(s).0))
        .max_by_key(|&(_, led)| led)
        .unwrap();
    assert!(led > 0);
    all[victim].kill9();
    let killed = Instant::now();
    let rest: Vec<&common::Server> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != victim)
        .map(|(_, s)| s)
        .collect();
    // The bound is liveness, not a figure: elections take 0.5-1 s, and
    // a storm that kept deposing leaders would never settle.
    wait_all_led(&rest, Duration::from_secs(30));
    eprintln!(
        "{led} streams led by the killed server: all led again in {:.1?}",
        killed.elapsed()
    );
}
