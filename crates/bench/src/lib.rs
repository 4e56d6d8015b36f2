//! A load generator for NATS servers, built on the official `async-nats`
//! client so that flotilla and nats-server are driven by exactly the same
//! client code. Each scenario measures one thing and returns one
//! [`Report`] per measured phase; `main.rs` prints them as a table and as
//! JSON lines, and `scripts/bench-compare` runs them side by side.
//!
//! No scenario retries or skips: a message that is not delivered, or a
//! publish that is not acknowledged, fails the run, so a fast number is
//! never a lossy one.

pub mod core;
pub mod failover;
pub mod idle;
pub mod js;
pub mod js_features;
pub mod progress;
pub mod report;
pub mod streams;

use std::time::Duration;

pub use report::{Latency, Report};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("connecting to {url}: {detail}")]
    Connect { url: String, detail: String },
    #[error("{what}: {detail}")]
    Client { what: &'static str, detail: String },
    #[error("{scenario} stalled: {got} of {want} done, nothing for {stall:?}")]
    Stalled {
        scenario: &'static str,
        got: u64,
        want: u64,
        stall: Duration,
    },
    #[error("{scenario}: {detail}")]
    Wrong {
        scenario: &'static str,
        detail: String,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// Wraps a client error with what was being done.
pub(crate) fn client<E: std::fmt::Display>(what: &'static str) -> impl FnOnce(E) -> Error {
    move |e| Error::Client {
        what,
        detail: e.to_string(),
    }
}

/// What every scenario is parameterised by. Not every scenario uses every
/// field; `main.rs` documents which.
#[derive(Debug, Clone)]
pub struct Params {
    pub url: String,
    /// Messages (or requests, or keys) in the measured phase.
    pub msgs: u64,
    /// Payload bytes per message.
    pub size: usize,
    /// Publishing connections (requesters for `request`, putters for `kv`).
    pub pubs: usize,
    /// Subscribing connections (workers for `queue`, responders for
    /// `request`).
    pub subs: usize,
    /// JetStream publishes awaiting their PubAck per publisher; the pull
    /// batch size and push `max_ack_pending` for the consuming scenarios.
    pub in_flight: usize,
    /// Stream and bucket replicas.
    pub replicas: usize,
    /// Memory storage instead of file storage.
    pub memory: bool,
    /// Leave the stream or bucket in place after the run.
    pub keep: bool,
    /// `js-pub`: publish into the stream already there (made if missing)
    /// instead of a fresh one; implies `keep`.
    pub append: bool,
    /// The stream's `max_msgs` (none: unlimited).
    pub max_msgs: Option<u64>,
    /// A run that makes no progress for this long fails.
    pub stall: Duration,
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// `idle`: connections to open and subscriptions on each, and how
    /// long to hold them.
    pub conns: usize,
    pub subs_per_conn: usize,
    pub hold: Duration,
    /// `failover`: each server's name and process id, so the stream's
    /// leader can be killed.
    pub pids: Vec<(String, u32)>,
    /// Connect over TLS, trusting the CA in this PEM file.
    pub tls_ca: Option<std::path::PathBuf>,
    /// `js-batch`: messages per atomic batch.
    pub batch: usize,
    /// Where subscribers connect, when not to `url` (another server: a
    /// leaf node's hub, say); publishers then wait until the
    /// subscribers' interest has reached their server.
    pub sub_url: Option<String>,
    /// `ping-flood`: where the system account's user connects.
    pub flood_url: Option<String>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            url: "nats://127.0.0.1:4222".into(),
            msgs: 1_000_000,
            size: 128,
            pubs: 1,
            subs: 1,
            in_flight: 256,
            replicas: 1,
            memory: false,
            keep: false,
            append: false,
            max_msgs: None,
            stall: Duration::from_secs(10),
            progress: true,
            conns: 10_000,
            subs_per_conn: 10,
            hold: Duration::from_secs(0),
            pids: Vec::new(),
            tls_ca: None,
            batch: 100,
            sub_url: None,
            flood_url: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    /// Core publish to `subs` subscribers (1:1 with one, fan-out with more).
    Pubsub,
    /// Core publish to a queue group of `subs` workers.
    Queue,
    /// Request/reply round trips from `pubs` requesters to `subs` responders.
    Request,
    /// JetStream publish with `in-flight` PubAcks outstanding per publisher
    /// (1 = synchronous, with latency percentiles).
    JsPub,
    /// Pull consumer with explicit acks over a prefilled stream.
    JsPull,
    /// Push consumer with explicit acks over a prefilled stream.
    JsPush,
    /// KV put, then get of the same keys.
    Kv,
    /// Hold `conns` idle connections with `subs-per-conn` subscriptions.
    Idle,
    /// Core pub/sub 1:1 while `conns` connections open and close, over
    /// and over.
    Churn,
    /// Core pub/sub 1:1 while the system account's user (`flood-url`)
    /// asks `$SYS.REQ.SERVER.PING` over and over, 16 at a time.
    PingFlood,
    /// SIGKILL a replicated stream's leader (found among `pids`) and time
    /// until the next publish is acknowledged.
    Failover,
    /// Create `msgs` streams of `replicas` replicas, `in-flight` at a time.
    Streams,
    /// Counter increments (`Nats-Incr`) with `in-flight` PubAcks outstanding.
    JsCounter,
    /// Atomic batches of `batch` messages, one at a time per publisher.
    JsBatch,
    /// Pull consumer with a pinned-client priority group, explicit acks.
    JsPullGroup,
    /// A mirror made of a prefilled stream, timed until it holds every
    /// message.
    JsMirror,
    /// A stream sourcing a prefilled stream, timed until it holds every
    /// message.
    JsSource,
}

impl Scenario {
    /// Every scenario that one server can run (failover needs a cluster).
    pub const ONE_SERVER: [Scenario; 14] = [
        Scenario::Pubsub,
        Scenario::Queue,
        Scenario::Request,
        Scenario::JsPub,
        Scenario::JsPull,
        Scenario::JsPush,
        Scenario::Kv,
        Scenario::Idle,
        Scenario::Churn,
        Scenario::JsCounter,
        Scenario::JsBatch,
        Scenario::JsPullGroup,
        Scenario::JsMirror,
        Scenario::JsSource,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Pubsub => "pubsub",
            Scenario::Queue => "queue",
            Scenario::Request => "request",
            Scenario::JsPub => "js-pub",
            Scenario::JsPull => "js-pull",
            Scenario::JsPush => "js-push",
            Scenario::Kv => "kv",
            Scenario::Idle => "idle",
            Scenario::Churn => "churn",
            Scenario::PingFlood => "ping-flood",
            Scenario::Failover => "failover",
            Scenario::Streams => "streams",
            Scenario::JsCounter => "js-counter",
            Scenario::JsBatch => "js-batch",
            Scenario::JsPullGroup => "js-pull-group",
            Scenario::JsMirror => "js-mirror",
            Scenario::JsSource => "js-source",
        }
    }
}

pub async fn run(scenario: Scenario, p: &Params) -> Result<Vec<Report>> {
    match scenario {
        Scenario::Pubsub => core::pubsub(p).await.map(|r| vec![r]),
        Scenario::Queue => core::queue(p).await.map(|r| vec![r]),
        Scenario::Request => core::request(p).await.map(|r| vec![r]),
        Scenario::JsPub => js::publish(p).await.map(|r| vec![r]),
        Scenario::JsPull => js::pull(p).await.map(|r| vec![r]),
        Scenario::JsPush => js::push(p).await.map(|r| vec![r]),
        Scenario::Kv => js::kv(p).await,
        Scenario::Idle => idle::hold(p).await.map(|r| vec![r]),
        Scenario::Churn => idle::churn(p).await.map(|r| vec![r]),
        Scenario::PingFlood => idle::ping_flood(p).await.map(|r| vec![r]),
        Scenario::Failover => failover::leader_killed(p).await.map(|r| vec![r]),
        Scenario::Streams => streams::create_many(p).await.map(|r| vec![r]),
        Scenario::JsCounter => js_features::counter(p).await.map(|r| vec![r]),
        Scenario::JsBatch => js_features::batch(p).await.map(|r| vec![r]),
        Scenario::JsPullGroup => js_features::pull_group(p).await.map(|r| vec![r]),
        Scenario::JsMirror => js_features::copy(p, true).await.map(|r| vec![r]),
        Scenario::JsSource => js_features::copy(p, false).await.map(|r| vec![r]),
    }
}

/// A connection whose subscriptions can buffer a whole run, so that the
/// client never drops what the server delivered.
pub async fn connect(p: &Params) -> Result<async_nats::Client> {
    connect_to(p, &p.url).await
}

/// [`connect`] to `url` instead of `p.url`.
pub async fn connect_to(p: &Params, url: &str) -> Result<async_nats::Client> {
    let mut options = async_nats::ConnectOptions::new().subscription_capacity(1 << 20);
    if let Some(ca) = &p.tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    // async-nats reads no credentials from the URL: `user:pass@` (a
    // server with accounts) is passed on as options.
    let urls: Vec<&str> = url.split(',').map(str::trim).collect();
    let addr = urls[0].parse::<async_nats::ServerAddr>().ok();
    if let Some((user, pass)) = addr
        .as_ref()
        .and_then(|a| Some((a.username()?, a.password()?)))
    {
        options = options.user_and_password(user.into(), pass.into());
    }
    options.connect(urls).await.map_err(|e| Error::Connect {
        url: url.to_string(),
        detail: e.to_string(),
    })
}

/// Waits until the server has processed everything `c` sent so far, such
/// as a SUB. async-nats's `flush` only writes the socket, so a subscriber's
/// SUB could still be unread when another connection starts publishing,
/// and the messages before it would be missed. A request nobody answers is
/// a round trip on the same connection: its no-responders reply comes back
/// only after the server handled all that came before it.
pub async fn settled(c: &async_nats::Client) -> Result<()> {
    match c
        .request(unique("_bench.settle"), bytes::Bytes::new())
        .await
    {
        Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => Ok(()),
        Err(e) => Err(client("waiting for the server to settle")(e)),
        Ok(_) => Err(Error::Client {
            what: "waiting for the server to settle",
            detail: "a subject no one subscribes to was answered".into(),
        }),
    }
}

/// The share of `total` for worker `i` of `n`, so the shares add up.
pub(crate) fn share(total: u64, n: usize, i: usize) -> u64 {
    let n = n as u64;
    total / n + u64::from((i as u64) < total % n)
}

/// A subject no other run uses, so concurrent or leftover runs never mix.
pub(crate) fn unique(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}.{}.{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Builds the report for a phase that did `ops` operations in `elapsed`.
pub(crate) fn report(
    scenario: &str,
    p: &Params,
    server: &async_nats::Client,
    ops: u64,
    delivered: u64,
    elapsed: Duration,
    latency: Option<Latency>,
) -> Report {
    let info = server.server_info();
    let secs = elapsed.as_secs_f64().max(1e-9);
    Report {
        scenario: scenario.to_string(),
        url: p.url.clone(),
        server: format!("{} {}", info.server_name, info.version),
        msg_size: p.size,
        msgs: ops,
        pubs: p.pubs,
        subs: p.subs,
        in_flight: p.in_flight,
        replicas: p.replicas,
        elapsed_s: secs,
        msgs_per_sec: ops as f64 / secs,
        delivered_per_sec: delivered as f64 / secs,
        mb_per_sec: (delivered.max(ops) as f64 * p.size as f64) / secs / 1e6,
        latency,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn shares_add_up() {
        for total in [0u64, 1, 7, 1000, 1001] {
            for n in 1..5 {
                let sum: u64 = (0..n).map(|i| super::share(total, n, i)).sum();
                assert_eq!(sum, total);
            }
        }
    }
}
