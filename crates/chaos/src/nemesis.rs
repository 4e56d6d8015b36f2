//! The seeded fault schedule: which fault, to which servers, for how
//! long, is a function of the seed alone. One fault at a time; each is
//! healed before the next; every class comes once per round.

use std::time::{Duration, Instant};

use crate::net::{Net, Shape};
use crate::servers::Node;
use crate::{Config, Report};

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
    /// Power loss on a minority of the servers at once.
    PowerMinority,
    /// Power loss on every server at once.
    PowerAll,
    /// Servers cut off from each other (network namespaces): a minority
    /// from a majority, two sides joined by one bridging server, or one
    /// server that hears nobody.
    Partition,
    /// A stream's, consumer's or the meta group's leader asked to step
    /// down.
    Stepdown,
    /// Every server stopped (SIGTERM) and started again, one after
    /// another.
    Restart,
    /// One server stopped, removed from the cluster (`SERVER.REMOVE`),
    /// its store wiped, started again: it joins as a new peer.
    Membership,
    /// A minority stopped, a few bytes flipped in some of their files,
    /// started again.
    Corrupt,
    /// One server's store filesystem filled, then freed.
    DiskFull,
}

impl Fault {
    pub const ALL: [Fault; 11] = [
        Fault::Kill,
        Fault::Pause,
        Fault::Power,
        Fault::PowerMinority,
        Fault::PowerAll,
        Fault::Partition,
        Fault::Stepdown,
        Fault::Restart,
        Fault::Membership,
        Fault::Corrupt,
        Fault::DiskFull,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::Power => "power",
            Fault::PowerMinority => "power-minority",
            Fault::PowerAll => "power-all",
            Fault::Partition => "partition",
            Fault::Stepdown => "stepdown",
            Fault::Restart => "restart",
            Fault::Membership => "membership",
            Fault::Corrupt => "corrupt",
            Fault::DiskFull => "disk-full",
        }
    }

    pub fn parse(name: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Damage and membership changes leave a replica to be rebuilt.
    pub fn takes_a_replica_out(self) -> bool {
        matches!(self, Fault::Corrupt | Fault::Membership)
    }

    pub fn needs_lossyfs(self) -> bool {
        matches!(self, Fault::Power | Fault::PowerMinority | Fault::PowerAll)
    }

    pub fn needs_netns(self) -> bool {
        self == Fault::Partition
    }

    pub fn needs_small_disk(self) -> bool {
        self == Fault::DiskFull
    }
}

/// Why `fault` cannot run on this machine, if it cannot.
pub fn unsupported(fault: Fault) -> Option<String> {
    if fault.needs_netns() {
        if let Some(why) = crate::net::unavailable() {
            return Some(why);
        }
    }
    if fault.needs_small_disk() {
        let at = tempfile::tempdir().ok()?;
        match std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
            .arg(at.path())
            .output()
        {
            Ok(out) if out.status.success() => {
                let _ = std::process::Command::new("umount").arg(at.path()).output();
            }
            Ok(out) => {
                let why = String::from_utf8_lossy(&out.stderr).trim().to_string();
                return Some(format!("cannot mount a small tmpfs for the store: {why}"));
            }
            Err(e) => return Some(format!("cannot run mount: {e}")),
        }
    }
    if fault.needs_lossyfs() {
        let (backing, mount) = (tempfile::tempdir().ok()?, tempfile::tempdir().ok()?);
        match lossyfs::mount(backing.path(), mount.path()) {
            Ok(fs) => {
                let _ = fs.unmount();
            }
            Err(e) => return Some(format!("cannot mount FUSE here ({e})")),
        }
    }
    None
}

/// What the nemesis acts on.
pub struct Cluster<'a> {
    pub nodes: &'a mut [Node],
    pub net: Option<&'a Net>,
    pub client: &'a async_nats::Client,
    /// A client of the system account, for the operator's calls.
    pub system: &'a async_nats::Client,
}

/// The most replicas of one group the campaign damages at once: a
/// minority of the three every stream has.
const GROUP_MINORITY: usize = 1;

/// How long damage or a membership change waits for every replica to be
/// current before it is put off.
const HEALTH_WAIT: Duration = Duration::from_secs(30);

/// Whether every stream has a leader and every replica is current,
/// within `limit`: what an operator checks before replacing a server.
async fn healthy(client: &async_nats::Client, limit: Duration) -> bool {
    let streams = [
        crate::STREAM.to_string(),
        crate::WORK.to_string(),
        crate::ARCHIVE.to_string(),
        crate::MIRROR.to_string(),
        format!("KV_{}", crate::BUCKET),
    ];
    let deadline = Instant::now() + limit;
    loop {
        let mut all = true;
        for stream in &streams {
            let asked = client.request(format!("$JS.API.STREAM.INFO.{stream}"), "".into());
            let info = match tokio::time::timeout(Duration::from_secs(5), asked).await {
                Ok(Ok(m)) => serde_json::from_slice::<serde_json::Value>(&m.payload).ok(),
                _ => None,
            };
            all &= info.is_some_and(|info| current(&info));
        }
        if all {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A stream info's cluster: a leader, and every other replica it was
/// configured with there and current.
fn current(info: &serde_json::Value) -> bool {
    let cluster = &info["cluster"];
    let replicas = cluster["replicas"]
        .as_array()
        .map_or(&[][..], |r| r.as_slice());
    let wanted = info["config"]["num_replicas"].as_u64().unwrap_or(1) as usize;
    cluster["leader"].as_str().is_some_and(|l| !l.is_empty())
        && replicas.len() + 1 == wanted
        && replicas
            .iter()
            .all(|r| r["current"] == true && r["offline"] != true)
}

/// The seeded fault schedule, for `cfg.duration`.
pub async fn run(cfg: &Config, cluster: &mut Cluster<'_>, report: &mut Report) {
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let began = Instant::now();
    // Rounds of every class once, each round in a seeded order: a short
    // campaign still makes every kind of fault.
    let mut round: Vec<Fault> = Vec::new();
    while began.elapsed() < cfg.duration && !cfg.faults.is_empty() {
        tokio::time::sleep(between(&mut rng, 1_000, 4_000)).await;
        if round.is_empty() {
            round = cfg.faults.clone();
            rng.shuffle(&mut round);
        }
        let fault = round.pop().expect("refilled above");
        if fault.takes_a_replica_out() && !healthy(cluster.client, HEALTH_WAIT).await {
            // Later in the round, once the cluster has caught up.
            report.deferred += 1;
            round.insert(0, fault);
            eprintln!(
                "chaos: {:>6.1}s {} deferred: a replica is not current",
                began.elapsed().as_secs_f64(),
                fault.name(),
            );
            continue;
        }
        let hold = between(&mut rng, 500, 3_000);
        *report.faults.entry(fault.name()).or_default() += 1;
        let what = inject(fault, cluster, &mut rng, hold, report).await;
        eprintln!(
            "chaos: {:>6.1}s {} {what}",
            began.elapsed().as_secs_f64(),
            fault.name(),
        );
    }
}

fn between(rng: &mut fastrand::Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.u64(lo..hi))
}

/// A seeded choice of `k` distinct servers of `n`.
fn pick(rng: &mut fastrand::Rng, n: usize, k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    rng.shuffle(&mut order);
    order.truncate(k);
    order
}

/// Injects `fault`, holds it, heals it; says what it did.
async fn inject(
    fault: Fault,
    cluster: &mut Cluster<'_>,
    rng: &mut fastrand::Rng,
    hold: Duration,
    report: &mut Report,
) -> String {
    let n = cluster.nodes.len();
    let minority = (n - 1) / 2;
    let one = rng.usize(..n);
    let nodes = &mut *cluster.nodes;
    match fault {
        Fault::Kill => {
            nodes[one].kill();
            tokio::time::sleep(hold).await;
            let _ = nodes[one].restart();
            nodes[one].name.clone()
        }
        Fault::Pause => {
            nodes[one].signal(libc::SIGSTOP);
            nodes[one].stopped = true;
            tokio::time::sleep(hold).await;
            nodes[one].signal(libc::SIGCONT);
            nodes[one].stopped = false;
            nodes[one].name.clone()
        }
        Fault::Power => power_cut(nodes, &[one], hold).await,
        Fault::PowerMinority => power_cut(nodes, &pick(rng, n, minority), hold).await,
        Fault::PowerAll => power_cut(nodes, &pick(rng, n, n), hold).await,
        Fault::Partition => {
            let Some(net) = cluster.net else {
                return "skipped: no network namespaces".into();
            };
            let shape = Shape::ALL[rng.usize(..Shape::ALL.len())];
            let cut = shape.cut(&pick(rng, n, n));
            for (i, from) in cut.iter().enumerate() {
                if let Err(e) = net.deafen(i, from) {
                    eprintln!("chaos: partition: {e}");
                }
            }
            // Long enough for leaders to be deposed and elected.
            tokio::time::sleep(hold * 3).await;
            net.heal();
            format!("{}: {}", shape.name(), describe(nodes, &cut))
        }
        Fault::Stepdown => stepdown(cluster.client, cluster.system, rng).await,
        Fault::Restart => {
            for node in nodes.iter_mut() {
                terminate(node, Duration::from_secs(15)).await;
                let _ = node.restart();
                serving(node, Duration::from_secs(20)).await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
            "every server, one after another".into()
        }
        Fault::Membership => membership(cluster, one, hold).await,
        Fault::Corrupt => {
            let mut damaged = Vec::new();
            // A minority of every group, not of the cluster: two of five
            // servers can be two of a stream's three replicas.
            let chosen = pick(rng, n, minority.min(GROUP_MINORITY));
            for &i in &chosen {
                nodes[i].kill();
                match nodes[i].damage(rng) {
                    Ok(files) => damaged.push(format!("{}: {}", nodes[i].name, files.join(" "))),
                    Err(e) => damaged.push(format!("{}: damage failed: {e}", nodes[i].name)),
                }
                tokio::time::sleep(hold).await;
                let _ = nodes[i].restart();
            }
            // A server may refuse to start on damage it cannot repair (both
            // copies of its identity): it is replaced as its error says.
            tokio::time::sleep(Duration::from_secs(3)).await;
            for i in chosen {
                if let Some(status) = cluster.nodes[i].exited() {
                    report.halts += 1;
                    let replaced = membership(cluster, i, hold).await;
                    damaged.push(format!("halted ({status}), replaced: {replaced}"));
                }
            }
            damaged.join("; ")
        }
        Fault::DiskFull => {
            let taken = nodes[one].fill_disk();
            tokio::time::sleep(hold * 3).await;
            nodes[one].free_disk();
            match taken {
                Ok(bytes) => format!("{} ({} MiB filled)", nodes[one].name, bytes >> 20),
                Err(e) => format!("{}: fill failed: {e}", nodes[one].name),
            }
        }
    }
}

/// SIGTERM, as an operator stops a server; SIGKILL if it has not exited
/// within `limit`.
async fn terminate(node: &mut Node, limit: Duration) {
    node.signal(libc::SIGTERM);
    let deadline = Instant::now() + limit;
    while node.exited().is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    node.kill();
}

/// Waits until the server takes connections.
async fn serving(node: &Node, limit: Duration) {
    let deadline = Instant::now() + limit;
    let addr = (node.host.clone(), node.port);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(addr.clone()).await.is_ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// SIGKILL, then drop what each disk did not sync, then restart.
async fn power_cut(nodes: &mut [Node], which: &[usize], hold: Duration) -> String {
    for &i in which {
        nodes[i].kill();
        if let Some(disk) = &nodes[i].disk {
            disk.control.drop_unsynced();
        }
    }
    tokio::time::sleep(hold).await;
    for &i in which {
        let _ = nodes[i].restart();
    }
    let names: Vec<&str> = which.iter().map(|&i| nodes[i].name.as_str()).collect();
    names.join(" ")
}

fn describe(nodes: &[Node], cut: &[Vec<usize>]) -> String {
    let parts: Vec<String> = cut
        .iter()
        .enumerate()
        .filter(|(_, from)| !from.is_empty())
        .map(|(i, from)| {
            let deaf_to: Vec<&str> = from.iter().map(|&j| nodes[j].name.as_str()).collect();
            format!("{} deaf to {}", nodes[i].name, deaf_to.join(","))
        })
        .collect();
    parts.join("; ")
}

/// Asks a leader to step down: a stream's, a consumer's or the meta
/// group's (the system account's call).
async fn stepdown(
    client: &async_nats::Client,
    system: &async_nats::Client,
    rng: &mut fastrand::Rng,
) -> String {
    let subjects = [
        format!("$JS.API.STREAM.LEADER.STEPDOWN.{}", crate::STREAM),
        format!("$JS.API.STREAM.LEADER.STEPDOWN.{}", crate::WORK),
        format!("$JS.API.STREAM.LEADER.STEPDOWN.{}", crate::ARCHIVE),
        format!("$JS.API.STREAM.LEADER.STEPDOWN.{}", crate::MIRROR),
        format!("$JS.API.STREAM.LEADER.STEPDOWN.KV_{}", crate::BUCKET),
        format!("$JS.API.CONSUMER.LEADER.STEPDOWN.{}.C", crate::STREAM),
        "$JS.API.META.LEADER.STEPDOWN".to_string(),
    ];
    let subject = subjects[rng.usize(..subjects.len())].clone();
    let asker = match subject.starts_with("$JS.API.META.") {
        true => system,
        false => client,
    };
    let asked = asker.request(subject.clone(), "".into());
    let answer = match tokio::time::timeout(Duration::from_secs(5), asked).await {
        Ok(Ok(m)) => String::from_utf8_lossy(&m.payload).into_owned(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => "no answer".into(),
    };
    let ok = answer.contains("\"success\":true");
    let short = subject.trim_start_matches("$JS.API.");
    format!("{short}: {}", if ok { "done" } else { answer.trim() })
}

/// Stops one server, removes it from the cluster, wipes its store and
/// starts it again.
async fn membership(cluster: &mut Cluster<'_>, i: usize, hold: Duration) -> String {
    let node = &mut cluster.nodes[i];
    node.kill();
    let body = serde_json::json!({ "peer": node.name }).to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let removed = loop {
        let asked = cluster
            .system
            .request("$JS.API.SERVER.REMOVE", body.clone().into());
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(5), asked).await {
            let answer = String::from_utf8_lossy(&m.payload).into_owned();
            if answer.contains("\"success\":true") || Instant::now() > deadline {
                break answer;
            }
        }
        if Instant::now() > deadline {
            break "no answer".into();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    if !removed.contains("\"success\":true") {
        // Never wiped unless the cluster let it go: started as it was.
        let _ = node.restart();
        return format!(
            "{}: remove refused ({}), restarted unwiped",
            node.name,
            removed.trim()
        );
    }
    let wiped = node.wipe();
    tokio::time::sleep(hold).await;
    let _ = node.restart();
    match wiped {
        Ok(()) => format!("{}: removed, wiped, rejoined", node.name),
        Err(e) => format!("{}: removed, wipe failed: {e}", node.name),
    }
}
