//! flotilla-chaos: a seeded fault campaign on real server processes
//! (issue 20). It starts a cluster of any binary that takes nats-server's
//! config (flotilla, or nats-server itself), runs a workload of
//! async-nats clients against one replicated stream while a seeded
//! nemesis injects faults, then heals the cluster, reads what every
//! replica holds, and checks the recorded history ([`check`]).
//!
//! Workload: publishers with message ids that retry until acknowledged
//! (or give up), and a pull consumer that double-acks every message.
//! Faults: SIGKILL and restart, SIGSTOP/SIGCONT, and power loss of one
//! server or of all (SIGKILL, then every write not yet fsynced dropped
//! by the server's lossyfs). The fault schedule is a function of the
//! seed; the workload's timing is not, so a seed replays its faults.

pub mod check;
pub mod servers;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;

use check::{Anomaly, Event};
use servers::Node;

/// A class of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL one server, restart it a moment later.
    Kill,
    /// SIGSTOP one server, SIGCONT it a moment later.
    Pause,
    /// Power loss on one server: SIGKILL, drop its unsynced writes,
    /// restart.
    Power,
    /// Power loss on every server at once.
    PowerAll,
}

impl Fault {
    pub const ALL: [Fault; 4] = [Fault::Kill, Fault::Pause, Fault::Power, Fault::PowerAll];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Power => "power",
            Fault::PowerAll => "power-all",
        }
    }

    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    fn needs_lossyfs(self) -> bool {
        matches!(self, Fault::Power | Fault::PowerAll)
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    /// A binary that takes nats-server's flags and config.
    pub target: PathBuf,
    pub servers: usize,
    pub seed: u64,
    pub duration: Duration,
    pub faults: Vec<Fault>,
    /// Keep the servers' directories (logs, stores) even when clean.
    pub keep: bool,
}

/// What a campaign did and found.
#[derive(Debug, Default)]
pub struct Report {
    pub acked: usize,
    pub unacked: usize,
    pub delivered: usize,
    pub confirmed: usize,
    pub faults: BTreeMap<&'static str, usize>,
    pub anomalies: Vec<Anomaly>,
    /// From the end of the faults to the first acknowledged publish.
    pub recovery: Option<Duration>,
    /// Where the servers' logs and stores were kept, if they were.
    pub kept: Option<PathBuf>,
}

impl Report {
    pub fn summary(&self) -> String {
        let mut s = format!(
            "operations: {} publishes acked, {} unacknowledged, {} deliveries, {} acks confirmed\n",
            self.acked, self.unacked, self.delivered, self.confirmed
        );
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        s += &format!("faults: {}\n", faults.join(", "));
        match self.recovery {
            Some(d) => {
                s += &format!(
                    "recovery: serving {:.1} s after the faults stopped\n",
                    d.as_secs_f64()
                )
            }
            None => s += "recovery: none\n",
        }
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for a in &self.anomalies {
            *kinds.entry(a.kind()).or_default() += 1;
        }
        if kinds.is_empty() {
            s += "anomalies: none\n";
        } else {
            let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
            s += &format!("anomalies: {}\n", list.join(", "));
            for a in self.anomalies.iter().take(20) {
                s += &format!("  {a:?}\n");
            }
        }
        if let Some(dir) = &self.kept {
            s += &format!("logs and stores kept in {}\n", dir.display());
        }
        s
    }
}

const STREAM: &str = "CHAOS";

type History = Arc<Mutex<Vec<Event>>>;

fn record(history: &History, event: Event) {
    history.lock().expect("history").push(event);
}

/// Runs one campaign.
pub async fn run(cfg: &Config) -> std::io::Result<Report> {
    let dir = tempfile::Builder::new()
        .prefix("flotilla-chaos-")
        .tempdir()?;
    let power = cfg.faults.iter().any(|f| f.needs_lossyfs());
    let ports = servers::free_ports(cfg.servers);
    let routes = servers::free_ports(cfg.servers);
    let mut nodes = Vec::new();
    for i in 0..cfg.servers {
        nodes.push(Node::start(
            &cfg.target,
            dir.path(),
            i,
            &ports,
            &routes,
            power,
        )?);
    }
    for n in &nodes {
        servers::wait_listening(n.port, Duration::from_secs(20));
    }
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let client = connect(&urls).await?;
    let js = jetstream::new(client.clone());
    setup(&js, cfg.servers.min(3)).await?;

    let history: History = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for p in 0..2 {
        let (js, history, stop) = (js.clone(), history.clone(), stop.clone());
        workers.push(tokio::spawn(publisher(js, p, history, stop)));
    }
    workers.push(tokio::spawn(consumer(
        js.clone(),
        history.clone(),
        stop.clone(),
    )));

    let mut report = Report::default();
    nemesis(cfg, &mut nodes, &mut report).await;
    // Heal: every server running again, none paused.
    for n in nodes.iter_mut() {
        if n.stopped {
            n.signal(libc::SIGCONT);
            n.stopped = false;
        }
        if !n.running() {
            n.restart()?;
        }
    }
    let healed = Instant::now();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.await;
    }
    report.recovery = probe(&js, Duration::from_secs(60))
        .await
        .then(|| healed.elapsed());
    if report.recovery.is_none() {
        report.anomalies.push(Anomaly::NoRecovery);
    }
    drain(&js, &history).await;
    let replicas = read_replicas(&client, &nodes).await;
    for n in nodes.iter_mut() {
        if let Some(status) = n.exited() {
            report.anomalies.push(Anomaly::Crashed {
                server: n.name.clone(),
                how: status.to_string(),
            });
        }
    }
    let history = history.lock().expect("history").clone();
    report.anomalies.extend(check::check(&history, &replicas));
    for e in &history {
        match e {
            Event::Acked { .. } => report.acked += 1,
            Event::Unacked { .. } => report.unacked += 1,
            Event::Delivered { .. } => report.delivered += 1,
            Event::Confirmed { .. } => report.confirmed += 1,
        }
    }
    drop(nodes);
    if cfg.keep || !report.anomalies.is_empty() {
        report.kept = Some(dir.keep());
    }
    Ok(report)
}

async fn connect(urls: &[String]) -> std::io::Result<async_nats::Client> {
    let addrs = urls
        .iter()
        .map(|u| u.parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    async_nats::ConnectOptions::new()
        .retry_on_initial_connect()
        .connect(addrs)
        .await
        .map_err(std::io::Error::other)
}

/// The stream and its durable consumer, asked until the cluster answers.
async fn setup(js: &jetstream::Context, replicas: usize) -> std::io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let made = async {
            let st = js
                .get_or_create_stream(stream::Config {
                    name: STREAM.into(),
                    subjects: vec!["chaos.>".into()],
                    num_replicas: replicas,
                    ..Default::default()
                })
                .await?;
            st.get_or_create_consumer(
                "C",
                consumer::pull::Config {
                    durable_name: Some("C".into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ack_wait: Duration::from_secs(5),
                    ..Default::default()
                },
            )
            .await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        };
        match made.await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() > deadline => {
                return Err(std::io::Error::other(format!("no stream: {e}")))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// Publishes ids `p<n>-<i>` one at a time, each retried (same id, so
/// the duplicate window keeps one) until acknowledged or 30 s pass.
async fn publisher(js: jetstream::Context, n: usize, history: History, stop: Arc<AtomicBool>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let id = format!("p{n}-{i}");
        i += 1;
        let deadline = Instant::now() + Duration::from_secs(30);
        let event = loop {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Nats-Msg-Id", id.as_str());
            let sent = js
                .publish_with_headers(format!("chaos.{n}"), headers, id.clone().into())
                .await;
            if let Ok(ack) = sent {
                if let Ok(Ok(ack)) = tokio::time::timeout(Duration::from_secs(5), ack).await {
                    break Event::Acked {
                        id: id.clone(),
                        seq: ack.sequence,
                    };
                }
            }
            if Instant::now() > deadline || stop.load(Ordering::Relaxed) {
                break Event::Unacked { id: id.clone() };
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        record(&history, event);
    }
}

/// Pulls and double-acks until told to stop.
async fn consumer(js: jetstream::Context, history: History, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        if pull_once(&js, &history).await.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// One fetch of up to 20, each double-acked; how many came, if the
/// consumer answered.
async fn pull_once(js: &jetstream::Context, history: &History) -> Option<usize> {
    let get = async {
        let st = js.get_stream(STREAM).await.ok()?;
        let c: consumer::PullConsumer = st.get_consumer("C").await.ok()?;
        c.fetch()
            .max_messages(20)
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .ok()
    };
    let mut batch = tokio::time::timeout(Duration::from_secs(5), get)
        .await
        .ok()??;
    let mut n = 0;
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(3), batch.next()).await {
        let Ok(info) = m.info() else { continue };
        let seq = info.stream_sequence;
        record(history, Event::Delivered { seq });
        n += 1;
        if double_ack(js, &m).await {
            record(history, Event::Confirmed { seq });
        }
    }
    Some(n)
}

/// Acks `m` and waits for the server to confirm it. Not async-nats's
/// `double_ack`: that takes any reply for a confirmation, a 503 "no
/// responders" status too (nobody listened for the ack: it was not
/// taken), which would count an ack that no server holds.
async fn double_ack(js: &jetstream::Context, m: &jetstream::Message) -> bool {
    let Some(reply) = m.reply.clone() else {
        return false;
    };
    let client = js.client();
    let asked = client.request(reply, "+ACK".into());
    match tokio::time::timeout(Duration::from_secs(3), asked).await {
        Ok(Ok(answer)) => answer.status.is_none(),
        _ => false,
    }
}

/// The seeded fault schedule, for `cfg.duration`.
async fn nemesis(cfg: &Config, nodes: &mut [Node], report: &mut Report) {
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let end = Instant::now() + cfg.duration;
    let pause = |rng: &mut fastrand::Rng, lo: u64, hi: u64| Duration::from_millis(rng.u64(lo..hi));
    while Instant::now() < end && !cfg.faults.is_empty() {
        tokio::time::sleep(pause(&mut rng, 1_000, 4_000)).await;
        let fault = cfg.faults[rng.usize(..cfg.faults.len())];
        let i = rng.usize(..nodes.len());
        let hold = pause(&mut rng, 500, 3_000);
        *report.faults.entry(fault.name()).or_default() += 1;
        eprintln!(
            "chaos: {:>5.1}s {} {}",
            cfg.duration
                .saturating_sub(end.saturating_duration_since(Instant::now()))
                .as_secs_f64(),
            fault.name(),
            if fault == Fault::PowerAll {
                "all".into()
            } else {
                nodes[i].name.clone()
            }
        );
        match fault {
            Fault::Kill => {
                nodes[i].kill();
                tokio::time::sleep(hold).await;
                let _ = nodes[i].restart();
            }
            Fault::Pause => {
                nodes[i].signal(libc::SIGSTOP);
                nodes[i].stopped = true;
                tokio::time::sleep(hold).await;
                nodes[i].signal(libc::SIGCONT);
                nodes[i].stopped = false;
            }
            Fault::Power => power_cut(&mut nodes[i..=i], hold).await,
            Fault::PowerAll => power_cut(nodes, hold).await,
        }
    }
}

/// SIGKILL, then drop what each disk did not sync, then restart.
async fn power_cut(nodes: &mut [Node], hold: Duration) {
    for n in nodes.iter_mut() {
        n.kill();
        if let Some(disk) = &n.disk {
            disk.control.drop_unsynced();
        }
    }
    tokio::time::sleep(hold).await;
    for n in nodes.iter_mut() {
        let _ = n.restart();
    }
}

/// Publishes a probe until it is acknowledged.
async fn probe(js: &jetstream::Context, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(ack) = js.publish("chaos.probe", "probe".into()).await {
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(5), ack).await {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Takes what is left, so a confirmed ack delivered again shows.
async fn drain(js: &jetstream::Context, history: &History) {
    let mut empty = 0;
    while empty < 3 {
        match pull_once(js, history).await {
            Some(0) | None => empty += 1,
            Some(_) => empty = 0,
        }
    }
}

/// Each server's copy of the stream: leadership moved to it, then read
/// whole (sequence → payload).
async fn read_replicas(
    client: &async_nats::Client,
    nodes: &[Node],
) -> Vec<(String, BTreeMap<u64, String>)> {
    let mut out = Vec::new();
    for n in nodes.iter().take(3) {
        if lead_on(client, &n.name).await {
            out.push((n.name.clone(), contents(client).await));
        }
    }
    out
}

async fn stream_info(client: &async_nats::Client) -> Option<serde_json::Value> {
    let subject = format!("$JS.API.STREAM.INFO.{STREAM}");
    let m = tokio::time::timeout(Duration::from_secs(5), client.request(subject, "".into()))
        .await
        .ok()?
        .ok()?;
    serde_json::from_slice(&m.payload).ok()
}

async fn lead_on(client: &async_nats::Client, name: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(info) = stream_info(client).await {
            if info["cluster"]["leader"] == name {
                return true;
            }
        }
        let body = serde_json::json!({"placement": {"preferred": name}}).to_string();
        let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{STREAM}");
        let _ = tokio::time::timeout(Duration::from_secs(5), client.request(subject, body.into()))
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// The stream as its leader serves it, read by an ephemeral consumer
/// that takes no acks.
async fn contents(client: &async_nats::Client) -> BTreeMap<u64, String> {
    let mut out = BTreeMap::new();
    let Some(info) = stream_info(client).await else {
        return out;
    };
    let total = info["state"]["messages"].as_u64().unwrap_or(0);
    let js = jetstream::new(client.clone());
    let Ok(st) = js.get_stream(STREAM).await else {
        return out;
    };
    let Ok(reader) = st
        .create_consumer(consumer::pull::Config {
            ack_policy: consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(30),
            ..Default::default()
        })
        .await
    else {
        return out;
    };
    let mut read = 0u64;
    let mut idle = 0;
    while read < total && idle < 3 {
        let Ok(mut batch) = reader
            .fetch()
            .max_messages(1000)
            .expires(Duration::from_secs(2))
            .messages()
            .await
        else {
            idle += 1;
            continue;
        };
        let before = read;
        while let Some(Ok(m)) = batch.next().await {
            read += 1;
            let Ok(meta) = m.info() else { continue };
            let id = String::from_utf8_lossy(&m.payload).into_owned();
            if id != "probe" {
                out.insert(meta.stream_sequence, id);
            }
        }
        idle = if read == before { idle + 1 } else { 0 };
    }
    out
}
