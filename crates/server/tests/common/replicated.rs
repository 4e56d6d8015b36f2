//! Helpers for tests of replicated streams: reading a stream's leader and
//! contents, moving its leadership, and checking every replica.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::{json, Value};

use super::Server;

/// A client on each server, once the JetStream API answers everywhere.
pub async fn connect(all: &[Server]) -> Vec<async_nats::Client> {
    let mut clients = Vec::new();
    for s in all {
        clients.push(s.client().await);
    }
    api_ready(&clients).await;
    clients
}

/// Creates a stream from its config (JSON) and checks it was created.
pub async fn created(c: &async_nats::Client, cfg: Value) -> Value {
    let name = cfg["name"].as_str().unwrap().to_string();
    let r = super::api(
        c,
        &format!("$JS.API.STREAM.CREATE.{name}"),
        &cfg.to_string(),
    )
    .await;
    assert!(r.get("error").is_none(), "{r}");
    r
}

pub async fn stream_info(c: &async_nats::Client, name: &str) -> Value {
    super::api(c, &format!("$JS.API.STREAM.INFO.{name}"), "").await
}

/// Asks for stream info until a leader answers.
pub async fn leader_of(c: &async_nats::Client, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = c
            .request(format!("$JS.API.STREAM.INFO.{name}"), "".into())
            .await;
        if let Ok(m) = r {
            let v: Value = serde_json::from_slice(&m.payload).unwrap();
            if let Some(l) = v["cluster"]["leader"].as_str() {
                if !l.is_empty() {
                    return l.to_string();
                }
            }
        }
        assert!(Instant::now() < deadline, "no leader for {name}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Empty fetches in a row (2 s each) after which `contents` gives up.
const EMPTY_FETCHES_IS_A_STALL: u32 = 3;

/// Every message of the stream, read through the leader: seq → payload
/// (base64, as the API gives it), by an ephemeral pull consumer.
pub async fn contents(c: &async_nats::Client, name: &str) -> BTreeMap<u64, String> {
    use futures::StreamExt;
    let info = stream_info(c, name).await;
    let total = info["state"]["messages"].as_u64().unwrap();
    let mut out = BTreeMap::new();
    if total == 0 {
        return out;
    }
    let stream = jetstream::new(c.clone()).get_stream(name).await.unwrap();
    let consumer: jetstream::consumer::PullConsumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            ack_policy: jetstream::consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            ..Default::default()
        })
        .await
        .unwrap();
    // A pull that reached a server just as leadership moved can end
    // empty (a client asks again): a few empty ones in a row are a stall.
    let mut empty = 0;
    while (out.len() as u64) < total {
        let mut batch = consumer
            .fetch()
            .max_messages(1000)
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .unwrap();
        let before = out.len();
        while let Some(m) = batch.next().await {
            let m = m.unwrap();
            let seq = m.info().unwrap().stream_sequence;
            out.insert(seq, super::b64(&m.payload));
        }
        empty = if out.len() == before { empty + 1 } else { 0 };
        if empty == EMPTY_FETCHES_IS_A_STALL {
            let now = stream_info(c, name).await;
            let consumer_state = consumer
                .clone()
                .info()
                .await
                .map(|i| (i.num_pending, i.num_waiting, i.delivered.stream_sequence));
            panic!(
                "{name}: reading stalled at {} of {total}, last read seq {:?}; consumer (pending, waiting, delivered) {consumer_state:?}; state then {} now {}; cluster {}",
                out.len(),
                out.keys().next_back(),
                info["state"],
                now["state"],
                now["cluster"]
            );
        }
    }
    out
}

/// Moves the stream's leadership to `to` and waits until it leads.
pub async fn lead_on(c: &async_nats::Client, stream: &str, to: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if leader_of(c, stream).await == to {
            return;
        }
        let _ = c
            .request(
                format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}"),
                json!({"placement": {"preferred": to}}).to_string().into(),
            )
            .await;
        assert!(Instant::now() < deadline, "{to} never led {stream}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every acknowledged publish is on every replica exactly once, at the
/// sequence its ack gave, and nothing else is.
pub async fn check_replicas(
    servers: &[String],
    c: &async_nats::Client,
    stream: &str,
    acks: &[(String, u64)],
) {
    let mut want: BTreeMap<u64, String> = BTreeMap::new();
    for (id, seq) in acks {
        if let Some(other) = want.insert(*seq, super::b64(id.as_bytes())) {
            assert_eq!(other, super::b64(id.as_bytes()), "two ids acked at {seq}");
        }
    }
    let mut ids: Vec<&String> = acks.iter().map(|(id, _)| id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), want.len(), "an id acked at two sequences");
    for name in servers {
        lead_on(c, stream, name).await;
        let got = contents(c, stream).await;
        // Every message stored once: payloads (ids) are unique.
        let mut seen = std::collections::BTreeSet::new();
        for v in got.values() {
            assert!(seen.insert(v.clone()), "{name}: a message stored twice");
        }
        for (seq, id) in &want {
            assert_eq!(
                got.get(seq),
                Some(id),
                "{name}: acked seq {seq} missing or changed"
            );
        }
        let last = *got.keys().last().unwrap();
        assert_eq!(
            got.keys().copied().collect::<Vec<_>>(),
            (1..=last).collect::<Vec<_>>(),
            "{name}: gaps"
        );
    }
}

/// A JetStream server of a cluster, with its `server_tags` and more
/// config.
fn js_node(
    name: &str,
    cluster_port: u16,
    routes: &[String],
    tags: &[&str],
    config: &str,
) -> Result<Server, String> {
    let mut text = config.to_string();
    if !tags.is_empty() {
        text.push_str(&format!("server_tags: {}\n", json!(tags)));
    }
    let b = super::server().config(&text);
    b.js()
        .arg("-n")
        .arg(name)
        .arg("--cluster_name")
        .arg("c1")
        .arg("--cluster")
        .arg(&format!("nats://127.0.0.1:{cluster_port}"))
        .arg("--routes")
        .arg(&routes.join(","))
        .try_start()
}

/// Three servers, each naming all three, with a meta leader.
pub fn cluster3() -> Vec<Server> {
    cluster_tagged(&[&[], &[], &[]])
}

/// `n` servers, each naming all and started with `config`, with a meta
/// leader.
pub fn cluster_configured(n: usize, config: &str) -> Vec<Server> {
    cluster(&vec![&[][..]; n], config)
}

/// As many servers as tag lists, each naming all, with a meta leader.
pub fn cluster_tagged(tags: &[&[&str]]) -> Vec<Server> {
    cluster(tags, "")
}

/// As [`cluster_tagged`], each server started with `config`.
pub fn cluster_tagged_configured(tags: &[&[&str]], config: &str) -> Vec<Server> {
    cluster(tags, config)
}

/// A server per tag list, each naming all and started with `config`, with
/// a meta leader.
fn cluster(tags: &[&[&str]], config: &str) -> Vec<Server> {
    let all = cluster_started(tags, config);
    wait_for_meta_leader(&all);
    all
}

/// A server per tag list, each naming all and started with `config`, as
/// soon as each listens (no meta leader yet).
pub fn cluster_started(tags: &[&[&str]], config: &str) -> Vec<Server> {
    let mut tries = 0;
    loop {
        match try_cluster(tags, config) {
            Ok(all) => return all,
            // A route port found free was taken before the server bound
            // it (by another process: each test process hands a port out
            // once): new ports.
            Err(e) if e.contains("Address already in use") && tries < 5 => tries += 1,
            Err(e) => panic!("{e}"),
        }
    }
}

fn try_cluster(tags: &[&[&str]], config: &str) -> Result<Vec<Server>, String> {
    let ports = super::free_ports(tags.len());
    let routes: Vec<String> = ports
        .iter()
        .map(|p| format!("nats-route://127.0.0.1:{p}"))
        .collect();
    tags.iter()
        .zip(&ports)
        .enumerate()
        .map(|(i, (tags, port))| js_node(&format!("S{i}"), *port, &routes, tags, config))
        .collect()
}

/// Waits until every server sees all of them in the meta group, and its
/// leader.
pub fn wait_for_meta_leader(all: &[Server]) {
    let n = all.len();
    super::wait_for("a meta leader", Duration::from_secs(30), || {
        all.iter().all(|s| {
            let m = s.json("/jsz")["meta_cluster"].clone();
            m["cluster_size"] == n && m["leader"].as_str().is_some_and(|l| !l.is_empty())
        })
    });
}

/// The meta leader's API answers on every server (its subscriptions
/// reach the others over routes a moment after it is elected).
pub async fn api_ready(clients: &[async_nats::Client]) {
    for c in clients {
        let deadline = Instant::now() + Duration::from_secs(10);
        // Every server listens on the API (nothing answers until the
        // meta leader does): each try waits a moment.
        let ask = || {
            tokio::time::timeout(
                Duration::from_millis(500),
                c.request("$JS.API.INFO", "".into()),
            )
        };
        while !matches!(ask().await, Ok(Ok(_))) {
            assert!(Instant::now() < deadline, "no JetStream API");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Every stream has a leader that answers (after a restart, each group
/// elects one): the meta leader's list has every stream's info.
pub async fn stream_leaders_ready(c: &async_nats::Client) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = tokio::time::timeout(
            Duration::from_secs(5),
            c.request("$JS.API.STREAM.LIST", "".into()),
        )
        .await;
        if let Ok(Ok(m)) = r {
            let v: Value = serde_json::from_slice(&m.payload).unwrap_or_default();
            let streams = v["streams"].as_array().cloned().unwrap_or_default();
            if v["total"].as_u64() == Some(streams.len() as u64) {
                for info in &streams {
                    stream_reachable(c, &info["config"], deadline).await;
                }
                return;
            }
        }
        assert!(Instant::now() < deadline, "streams without a leader");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A publish to the stream's first subject reaches its leader from `c`'s
/// server: the leader's interest travels over its own route, so it can
/// arrive after the list that named the leader. The probe names another
/// stream in `Nats-Expected-Stream`, so the stream refuses it unstored.
async fn stream_reachable(c: &async_nats::Client, config: &Value, deadline: Instant) {
    let Some(first) = config["subjects"][0].as_str() else {
        return;
    };
    let literal: Vec<&str> = first
        .split('.')
        .map(|t| if t == "*" || t == ">" { "x" } else { t })
        .collect();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Expected-Stream", "no stream has this name");
    loop {
        let probe = c.request_with_headers(literal.join("."), headers.clone(), "".into());
        if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(2), probe).await {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no route to the leader of {config}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
