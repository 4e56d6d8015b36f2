//! flotilla-chaos: a seeded fault campaign on real server processes
//! (issue 20). It starts a cluster of any binary that takes nats-server's
//! config (flotilla, or nats-server itself), runs a workload of
//! async-nats clients while a seeded nemesis injects faults, then heals
//! the cluster, reads what every replica holds, and checks the recorded
//! history ([`check`], [`linear`]).
//!
//! Workload ([`workload`]): publishers with message ids that retry until
//! acknowledged, a pull consumer that double-acks every message, a
//! deleter that deletes acknowledged messages and reads deleted ones
//! back (none may be found), a work
//! queue that a second stream sources (and so consumes), and
//! compare-and-set writers on a key-value bucket. Faults ([`nemesis`]):
//! kills, pauses, power loss of one, a minority or all (lossyfs), network
//! partitions (namespaces and nftables), leader stepdowns, rolling
//! restarts, a server removed and re-added with a wiped store, bytes
//! flipped in a stopped minority's files, a full disk. The fault schedule
//! is a function of the seed; the workload's timing is not, so a seed
//! replays its faults.

pub mod check;
pub mod linear;
pub mod nemesis;
pub mod net;
pub mod replicas;
pub mod servers;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv, stream};

use check::{Anomaly, Event};
pub use nemesis::Fault;
use replicas::Reader;
use servers::{Disks, Node};
use workload::{Recorder, Target};

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
    /// `sync_interval: always` in each server's `jetstream` block (for
    /// nats-server, which otherwise syncs every two minutes).
    pub sync_always: bool,
    /// The work-queue publisher and the deleter run as fast as their
    /// answers come, with no pause between operations
    /// ([`workload::Pace::NONE`]).
    pub unpaced: bool,
}

/// What a campaign did and found.
#[derive(Debug, Default)]
pub struct Report {
    pub acked: usize,
    pub unacked: usize,
    pub delivered: usize,
    pub confirmed: usize,
    /// Deletes confirmed (each followed by a read of one deleted
    /// earlier), and those reads that found their message.
    pub deleted: usize,
    pub deleted_reads: usize,
    /// Work-queue publishes acknowledged, and messages the archive holds.
    pub work_acked: usize,
    pub archived: usize,
    /// Messages the mirror of the main stream holds.
    pub mirrored: usize,
    /// Compare-and-set writes: written, refused, unknown.
    pub kv: (usize, usize, usize),
    pub faults: BTreeMap<&'static str, usize>,
    /// Servers that refused to start on damage they could not repair,
    /// and were replaced (removed, wiped, re-added) as their error says.
    pub halts: usize,
    /// Damage and membership changes put off because some replica was
    /// not yet current: each takes a replica out, and with another still
    /// catching up a group would be left without a healthy majority,
    /// more than any Raft group can survive.
    pub deferred: usize,
    /// Fault classes asked for that this machine cannot make, and why.
    pub left_out: Vec<(&'static str, String)>,
    /// Stretches of more than a second without an acknowledged publish
    /// to the main stream while the faults ran: how many, the longest.
    pub gaps: (usize, Duration),
    pub anomalies: Vec<Anomaly>,
    /// From the end of the faults to the first acknowledged publish.
    pub recovery: Option<Duration>,
    /// Where the servers' logs and stores were kept, if they were.
    pub kept: Option<PathBuf>,
}

impl Report {
    pub fn summary(&self) -> String {
        let mut s = format!(
            "operations: {} publishes acked, {} unacknowledged, {} deliveries, {} acks confirmed, \
             {} deleted and read back after ({} found); \
             work queue {} acked, {} archived; {} mirrored; \
             compare-and-set {} written, {} refused, {} unknown\n",
            self.acked,
            self.unacked,
            self.delivered,
            self.confirmed,
            self.deleted,
            self.deleted_reads,
            self.work_acked,
            self.archived,
            self.mirrored,
            self.kv.0,
            self.kv.1,
            self.kv.2
        );
        for (fault, why) in &self.left_out {
            s += &format!("left out: {fault}: {why}\n");
        }
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
        if self.halts > 0 {
            s += &format!(
                "halted on damage and replaced: {} (an operator's step)\n",
                self.halts
            );
        }
        if self.deferred > 0 {
            s += &format!(
                "deferred until every replica was current: {}\n",
                self.deferred
            );
        }
        s += &format!(
            "service gaps over 1 s: {}, longest {:.1} s\n",
            self.gaps.0,
            self.gaps.1.as_secs_f64()
        );
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

/// The main stream: publishes with ids, and a double-acking consumer.
pub const STREAM: &str = "CHAOS";
/// The work queue, and the stream that sources it (and so consumes it).
pub const WORK: &str = "WORK";
pub const ARCHIVE: &str = "ARCHIVE";
/// A mirror of the main stream: its copies go many to a Raft entry and
/// are acked together, the path a limits origin takes.
pub const MIRROR: &str = "COPY";
/// The key-value bucket of the compare-and-set writers.
pub const BUCKET: &str = "chaos";

/// Runs one campaign.
pub async fn run(cfg: &Config) -> std::io::Result<Report> {
    let mut report = Report::default();
    let mut cfg = cfg.clone();
    cfg.faults
        .retain(|&fault| match nemesis::unsupported(fault) {
            None => true,
            Some(why) => {
                eprintln!("chaos: {} left out: {why}", fault.name());
                report.left_out.push((fault.name(), why));
                false
            }
        });
    let dir = tempfile::Builder::new()
        .prefix("flotilla-chaos-")
        .tempdir()?;
    let net = match cfg.faults.iter().any(|f| f.needs_netns()) {
        true => Some(net::Net::create(cfg.servers)?),
        false => None,
    };
    let places = match &net {
        Some(net) => (0..cfg.servers)
            .map(|i| servers::Place {
                host: net.host(i),
                port: 4222,
                route_port: 6222,
                http_port: 8222,
                netns: Some(net.namespace(i)),
            })
            .collect(),
        None => servers::loopback(cfg.servers),
    };
    let disks = Disks {
        lossy: cfg.faults.iter().any(|f| f.needs_lossyfs()),
        small: cfg.faults.iter().any(|f| f.needs_small_disk()),
        sync_always: cfg.sync_always,
    };
    let mut nodes = Vec::new();
    for i in 0..cfg.servers {
        nodes.push(Node::start(&cfg.target, dir.path(), i, &places, disks)?);
    }
    for n in &nodes {
        servers::wait_listening(&n.host, n.port, Duration::from_secs(20));
    }
    let urls: Vec<String> = nodes.iter().map(Node::url).collect();
    let client = connect(&urls, None).await?;
    // The operator's calls go through the system account.
    let system = connect(&urls, Some(("sys", "sys"))).await?;
    let js = jetstream::new(client.clone());
    let bucket = setup(&js, cfg.servers.min(3)).await?;

    let recorder = Recorder::new();
    let stop = Arc::new(AtomicBool::new(false));
    let workers = start_workload(&cfg, &js, &bucket, &recorder, &stop);
    {
        let mut cluster = nemesis::Cluster {
            nodes: &mut nodes,
            net: net.as_ref(),
            client: &client,
            system: &system,
        };
        nemesis::run(&cfg, &mut cluster, &mut report).await;
    }
    let faults_ended = recorder.elapsed();
    eprintln!("chaos: faults over; healing, then stopping the workload");
    heal(&mut nodes, net.as_ref())?;
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
    eprintln!("chaos: draining the consumer and the work queue");
    drain(&js, &recorder).await;
    settle_work(&client).await;
    settle_mirror(&client).await;
    eprintln!("chaos: reading every replica");
    let (main, unread) = replicas::read(&client, STREAM, Reader::Consumer).await;
    report
        .anomalies
        .extend(unread.into_iter().map(|what| Anomaly::Unread {
            stream: STREAM.into(),
            what,
        }));
    let (queue, archive) = read_work(&client, &recorder, &mut report).await;
    let (mirror, unread) = replicas::read(&client, MIRROR, Reader::Consumer).await;
    report
        .anomalies
        .extend(unread.into_iter().map(|what| Anomaly::Unread {
            stream: MIRROR.into(),
            what,
        }));
    report.mirrored = mirror.first().map_or(0, |(_, c)| c.len());
    for n in nodes.iter_mut() {
        if let Some(status) = n.exited() {
            report.anomalies.push(Anomaly::Crashed {
                server: n.name.clone(),
                how: status.to_string(),
            });
        }
    }
    let histories = recorder.take();
    report
        .anomalies
        .extend(check::check(&histories.main, &main));
    report
        .anomalies
        .extend(check::check_work(&histories.work, &queue, &archive));
    report.anomalies.extend(check::check_mirror(&main, &mirror));
    report.anomalies.extend(check::check_kv(&histories.kv));
    count(&mut report, &histories, &archive, faults_ended);
    if !report.anomalies.is_empty() {
        for n in &nodes {
            n.save_monitoring();
        }
    }
    // Every server gone before any filesystem goes: a server in a network
    // namespace holds a copy of every mount, and a FUSE filesystem ends
    // only when the last copy does.
    for n in nodes.iter_mut() {
        n.kill();
    }
    drop(nodes);
    drop(net);
    if cfg.keep || !report.anomalies.is_empty() {
        let kept = dir.keep();
        let history = format!("{histories:#?}");
        let _ = std::fs::write(kept.join("history.txt"), history);
        report.kept = Some(kept);
    }
    Ok(report)
}

fn start_workload(
    cfg: &Config,
    js: &jetstream::Context,
    bucket: &kv::Store,
    recorder: &Recorder,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut workers = Vec::new();
    let pace = match cfg.unpaced {
        true => workload::Pace::NONE,
        false => workload::Pace::DEFAULT,
    };
    let publishers = [
        ("chaos.0", "p0-", Target::Main),
        ("chaos.1", "p1-", Target::Main),
        ("work.0", "w-", Target::Work),
    ];
    for (subject, prefix, target) in publishers {
        workers.push(tokio::spawn(workload::publisher(
            js.clone(),
            subject.into(),
            prefix.into(),
            target,
            pace,
            recorder.clone(),
            stop.clone(),
        )));
    }
    workers.push(tokio::spawn(workload::consumer(
        js.clone(),
        recorder.clone(),
        stop.clone(),
    )));
    workers.push(tokio::spawn(workload::deleter(
        js.clone(),
        cfg.seed,
        pace,
        recorder.clone(),
        stop.clone(),
    )));
    for n in 0..3 {
        workers.push(tokio::spawn(workload::kv_writer(
            bucket.clone(),
            n,
            cfg.seed,
            recorder.clone(),
            stop.clone(),
        )));
    }
    workers
}

/// Every server running again, none paused, deaf or short of disk.
fn heal(nodes: &mut [Node], net: Option<&net::Net>) -> std::io::Result<()> {
    if let Some(net) = net {
        net.heal();
    }
    for n in nodes.iter_mut() {
        n.free_disk();
        if n.stopped {
            n.signal(libc::SIGCONT);
            n.stopped = false;
        }
        if !n.running() {
            n.restart()?;
        }
    }
    Ok(())
}

fn count(
    report: &mut Report,
    histories: &workload::Histories,
    archive: &[(String, replicas::Contents)],
    faults_ended: Duration,
) {
    for e in &histories.main {
        match e {
            Event::Acked { .. } => report.acked += 1,
            Event::Unacked { .. } => report.unacked += 1,
            Event::Delivered { .. } => report.delivered += 1,
            Event::Confirmed { .. } => report.confirmed += 1,
            Event::Deleted { .. } => report.deleted += 1,
            Event::ReadAfterDelete { .. } => report.deleted_reads += 1,
            Event::MaybeDeleted { .. } => {}
        }
    }
    report.work_acked = histories
        .work
        .iter()
        .filter(|e| matches!(e, Event::Acked { .. }))
        .count();
    report.archived = archive.first().map_or(0, |(_, c)| c.len());
    for op in &histories.kv {
        match op.outcome {
            linear::Outcome::Written => report.kv.0 += 1,
            linear::Outcome::Refused => report.kv.1 += 1,
            linear::Outcome::Unknown => report.kv.2 += 1,
        }
    }
    let mut acked_at = histories.acked_at.clone();
    acked_at.sort();
    let mut previous = Duration::ZERO;
    for at in acked_at.into_iter().chain([faults_ended]) {
        let gap = at.saturating_sub(previous);
        if gap > Duration::from_secs(1) && previous <= faults_ended {
            report.gaps.0 += 1;
            report.gaps.1 = report.gaps.1.max(gap);
        }
        previous = at;
    }
}

async fn connect(
    urls: &[String],
    user: Option<(&str, &str)>,
) -> std::io::Result<async_nats::Client> {
    let addrs = urls
        .iter()
        .map(|u| u.parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(std::io::Error::other)?;
    let options = match user {
        Some((u, p)) => async_nats::ConnectOptions::with_user_and_password(u.into(), p.into()),
        None => async_nats::ConnectOptions::new(),
    };
    options
        .retry_on_initial_connect()
        .connect(addrs)
        .await
        .map_err(std::io::Error::other)
}

type SetupError = Box<dyn std::error::Error + Send + Sync>;

/// The streams, consumers and bucket, asked until the cluster answers.
async fn setup(js: &jetstream::Context, replicas: usize) -> std::io::Result<kv::Store> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match try_setup(js, replicas).await {
            Ok(bucket) => return Ok(bucket),
            Err(e) if Instant::now() > deadline => {
                return Err(std::io::Error::other(format!("setup: {e}")))
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

async fn try_setup(js: &jetstream::Context, replicas: usize) -> Result<kv::Store, SetupError> {
    let main = js
        .get_or_create_stream(stream::Config {
            name: STREAM.into(),
            subjects: vec!["chaos.>".into()],
            num_replicas: replicas,
            ..Default::default()
        })
        .await?;
    main.get_or_create_consumer(
        "C",
        consumer::pull::Config {
            durable_name: Some("C".into()),
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(5),
            ..Default::default()
        },
    )
    .await?;
    js.get_or_create_stream(stream::Config {
        name: WORK.into(),
        subjects: vec!["work.>".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        num_replicas: replicas,
        ..Default::default()
    })
    .await?;
    // Sourcing a work queue consumes it: what the archive stored, the
    // work queue deletes.
    let body = serde_json::json!({
        "name": ARCHIVE,
        "num_replicas": replicas,
        "sources": [{"name": WORK}],
    });
    api(js, &format!("$JS.API.STREAM.CREATE.{ARCHIVE}"), body).await?;
    let body = serde_json::json!({
        "name": MIRROR,
        "num_replicas": replicas,
        "mirror": {"name": STREAM},
    });
    api(js, &format!("$JS.API.STREAM.CREATE.{MIRROR}"), body).await?;
    let bucket = js
        .create_key_value(kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            num_replicas: replicas,
            ..Default::default()
        })
        .await?;
    Ok(bucket)
}

/// A JetStream API request whose answer must not be an error (or say
/// that what it makes is there already).
async fn api(
    js: &jetstream::Context,
    subject: &str,
    body: serde_json::Value,
) -> Result<(), SetupError> {
    let client = js.client();
    let asked = client.request(subject.to_string(), body.to_string().into());
    let m = tokio::time::timeout(Duration::from_secs(5), asked).await??;
    let answer: serde_json::Value = serde_json::from_slice(&m.payload)?;
    match answer["error"]["err_code"].as_u64() {
        None => Ok(()),
        // Already there, as asked (a retried setup).
        Some(10058 | 10148) => Ok(()),
        Some(_) => Err(answer.to_string().into()),
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
/// Gives up after two minutes (acks never confirmed come back forever).
async fn drain(js: &jetstream::Context, recorder: &Recorder) {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut empty = 0;
    while empty < 3 && Instant::now() < deadline {
        match workload::pull_once(js, recorder).await {
            Some(0) | None => empty += 1,
            Some(_) => empty = 0,
        }
    }
}

/// The archive's replicas, then the work queue's. Read in that order, a
/// message the archive holds must be gone from the queue; one that is
/// not may still be on its way (its ack in flight, or lost and about to
/// be redelivered and acked again): the queue is read again after a
/// while before it counts.
async fn read_work(
    client: &async_nats::Client,
    recorder: &Recorder,
    report: &mut Report,
) -> (
    Vec<(String, replicas::Contents)>,
    Vec<(String, replicas::Contents)>,
) {
    let (archive, unread_archive) = replicas::read(client, ARCHIVE, Reader::Consumer).await;
    let (mut queue, mut unread_queue) = replicas::read(client, WORK, Reader::MsgGet).await;
    let work = recorder.take().work;
    if !check::check_work(&work, &queue, &archive).is_empty() {
        tokio::time::sleep(Duration::from_secs(15)).await;
        (queue, unread_queue) = replicas::read(client, WORK, Reader::MsgGet).await;
    }
    for (stream, unread) in [(ARCHIVE, unread_archive), (WORK, unread_queue)] {
        report
            .anomalies
            .extend(unread.into_iter().map(|what| Anomaly::Unread {
                stream: stream.into(),
                what,
            }));
    }
    (queue, archive)
}

/// Waits (up to a minute) for the mirror to reach the main stream's last
/// sequence.
async fn settle_mirror(client: &async_nats::Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let last = |info: Option<serde_json::Value>| info.and_then(|i| i["state"]["last_seq"].as_u64());
    while Instant::now() < deadline {
        let origin = last(replicas::info(client, STREAM).await);
        let copy = last(replicas::info(client, MIRROR).await);
        if origin.is_some() && copy >= origin {
            return;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits (up to a minute) for the archive to take everything queued.
async fn settle_work(client: &async_nats::Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(info) = replicas::info(client, WORK).await {
            if info["state"]["messages"] == 0 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
