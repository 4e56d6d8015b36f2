//! Requests across a change of leader (issue 42): every request a client
//! sends while a stream's leadership moves, by a stepdown or by SIGKILL
//! of its leader, gets an answer within the client's 2 s timeout. The
//! answer may be an error (nats-server's 503 "JetStream system
//! temporarily unavailable", or no responders); silence is the failure.
//! A publish answered "no responders" is never stored (its client sends
//! it again): checked against the stream's contents. Across a kill, the
//! requests judged are those sent once the killed process is gone: one
//! already delivered to it dies with it, as in nats-server.
//!
//! nats-server 2.15.1 leaves some of these requests unanswered (2 of 4
//! consumer creates after a leader kill, in issue 42's measurement), so
//! against it these tests only report what they left unanswered.

#[path = "../common/mod.rs"]
mod common;

use common::replicated::{cluster3, connect, contents, created, lead_on, leader_of};

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

/// The client's timeout: an answer later than this is no answer.
const TIMEOUT: Duration = Duration::from_secs(2);

/// What one prober saw: how many requests were answered, and those that
/// were not.
#[derive(Debug, Default)]
struct Seen {
    answered: usize,
    /// Each request not answered, and when (since the start) it was sent.
    silent: Vec<(String, Duration)>,
    /// The payloads of publishes answered "no responders": not stored.
    refused: Vec<String>,
}

/// Sends, one after another until `stop`, a publish to the stream, a
/// consumer create and a stream info, each with its 2 s timeout.
async fn prober(c: async_nats::Client, id: usize, start: Instant, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let requests = [
            (format!("lc.{id}"), format!("m-{id}-{n}")),
            (
                "$JS.API.CONSUMER.CREATE.LC".to_string(),
                json!({"stream_name": "LC", "config": {
                    "ack_policy": "explicit", "inactive_threshold": 5_000_000_000u64}})
                .to_string(),
            ),
            ("$JS.API.STREAM.INFO.LC".to_string(), String::new()),
        ];
        for (subject, body) in requests {
            let sent = start.elapsed();
            let payload = body.clone();
            match tokio::time::timeout(TIMEOUT, c.request(subject.clone(), body.into())).await {
                Err(_) => seen.silent.push((subject, sent)),
                Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::TimedOut => {
                    seen.silent.push((subject, sent))
                }
                Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                    seen.answered += 1;
                    if !subject.starts_with("$JS.") {
                        seen.refused.push(payload);
                    }
                }
                // An answer: the client knows at once.
                Ok(_) => seen.answered += 1,
            }
        }
    }
    seen
}

/// What the probers saw across a change.
struct Outcome {
    /// Requests not answered (sent once the change was done, or from the
    /// start if asked), with when they were sent.
    silent: Vec<String>,
    /// Publishes answered "no responders".
    refused: Vec<String>,
}

/// Runs probers on `clients` while `change` moves the leadership.
async fn across(
    clients: &[async_nats::Client],
    from_start: bool,
    change: impl std::future::Future,
) -> Outcome {
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, c)| tokio::spawn(prober(c.clone(), i, start, stop.clone())))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    change.await;
    let done = start.elapsed();
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    let mut answered = 0;
    let mut silent = Vec::new();
    let mut refused = Vec::new();
    for t in tasks {
        let seen = t.await.unwrap();
        answered += seen.answered;
        silent.extend(seen.silent);
        refused.extend(seen.refused);
    }
    eprintln!(
        "{answered} answered, {} publishes refused; the change done at {done:?}; silent: {silent:?}",
        refused.len()
    );
    assert!(answered > 10, "only {answered} answered");
    let silent = silent
        .into_iter()
        .filter(|(_, sent)| from_start || *sent >= done)
        .map(|(what, sent)| format!("{what} sent at {sent:?}"))
        .collect();
    Outcome { silent, refused }
}

/// Every request answered (the servers' logs when not), and no publish
/// answered "no responders" stored: a client sends such a publish again.
async fn check(all: &[common::Server], c: &async_nats::Client, outcome: &Outcome) {
    // nats-server only reports: after the kill its reads time out, and
    // after thousands of ephemeral creates it refuses the reader's
    // consumer (10026).
    if common::reference_server() {
        return;
    }
    let stored: BTreeSet<String> = contents(c, "LC").await.into_values().collect();
    let again: Vec<&String> = outcome
        .refused
        .iter()
        .filter(|p| stored.contains(&common::b64(p.as_bytes())))
        .collect();
    assert!(again.is_empty(), "refused, yet stored: {again:?}");
    if outcome.silent.is_empty() {
        return;
    }
    for s in all {
        eprintln!("---- log\n{}", s.log_text());
    }
    panic!("unanswered within {TIMEOUT:?}: {:?}", outcome.silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_answered_across_stepdowns() {
    let all = cluster3();
    let clients = connect(&all).await;
    created(
        &clients[0],
        json!({"name": "LC", "subjects": ["lc.>"], "num_replicas": 3}),
    )
    .await;
    leader_of(&clients[0], "LC").await;
    let admin = clients[0].clone();
    let outcome = across(&clients, true, async move {
        for _ in 0..3 {
            let r = tokio::time::timeout(
                Duration::from_secs(5),
                admin.request("$JS.API.STREAM.LEADER.STEPDOWN.LC", "".into()),
            )
            .await;
            eprintln!("stepdown: {:?}", r.map(|r| r.map(|m| m.payload)));
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
    })
    .await;
    check(&all, &clients[0], &outcome).await;
}

/// Kills the stream's leader, which leads the meta group too if
/// `meta_too`, while the other two servers' clients send requests.
async fn answered_across_a_leader_kill(meta_too: bool) {
    let mut all = cluster3();
    let clients = connect(&all).await;
    created(
        &clients[0],
        json!({"name": "LC", "subjects": ["lc.>"], "num_replicas": 3}),
    )
    .await;
    let meta = all[0].json("/jsz")["meta_cluster"]["leader"]
        .as_str()
        .expect("a meta leader")
        .to_string();
    let names: Vec<String> = all
        .iter()
        .map(|s| s.json("/varz")["server_name"].as_str().unwrap().to_string())
        .collect();
    let victim = match meta_too {
        true => meta.clone(),
        false => names.iter().find(|n| **n != meta).unwrap().clone(),
    };
    lead_on(&clients[0], "LC", &victim).await;
    let li = names.iter().position(|n| *n == victim).unwrap();
    let survivors: Vec<_> = (0..3)
        .filter(|i| *i != li)
        .map(|i| clients[i].clone())
        .collect();
    let victim = &mut all[li];
    let outcome = across(&survivors, false, async move {
        victim.kill9();
    })
    .await;
    check(&all, &survivors[0], &outcome).await;
}

/// The stream's leader dies; the meta leader answers for it until a new
/// one serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_answered_across_a_stream_leader_kill() {
    answered_across_a_leader_kill(false).await;
}

/// The server leading the stream and the meta group dies; each
/// survivor answers its own clients until new leaders serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_answered_across_a_meta_and_stream_leader_kill() {
    answered_across_a_leader_kill(true).await;
}
