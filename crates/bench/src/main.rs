//! `flotilla-bench`: runs one scenario against any NATS URL, prints a table
//! for people on stderr and one JSON line per measured phase on stdout.

use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use flotilla_bench::{run, Params, Report, Scenario};

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Load generator for NATS servers (flotilla and nats-server alike)"
)]
struct Args {
    /// What to measure.
    #[arg(value_enum)]
    scenario: Scenario,
    /// Server URL.
    #[arg(short = 's', long, default_value = "nats://127.0.0.1:4222")]
    url: String,
    /// Messages (requests, keys) to measure.
    #[arg(short = 'n', long, default_value_t = 1_000_000)]
    msgs: u64,
    /// Payload size in bytes.
    #[arg(long, default_value_t = 128)]
    size: usize,
    /// Publishing connections (requesters, KV writers).
    #[arg(long, default_value_t = 1)]
    pubs: usize,
    /// Subscribing connections (queue workers, responders).
    #[arg(long, default_value_t = 1)]
    subs: usize,
    /// PubAcks outstanding per publisher; pull batch; push max_ack_pending.
    #[arg(long, default_value_t = 256)]
    in_flight: usize,
    /// Stream and bucket replicas.
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// Memory storage instead of file storage.
    #[arg(long)]
    memory: bool,
    /// Keep the stream or bucket after the run.
    #[arg(long)]
    keep: bool,
    /// `js-pub`: publish into the stream already there instead of a fresh
    /// one (it is kept), as a long-lived stream grows.
    #[arg(long)]
    append: bool,
    /// Cap the stream at this many messages (the oldest go), so a long
    /// run works at a steady size.
    #[arg(long)]
    max_msgs: Option<u64>,
    /// Fail a run that makes no progress for this many seconds.
    #[arg(long, default_value_t = 10.0)]
    stall: f64,
    /// Repeat the run this many times.
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// No progress bar.
    #[arg(long)]
    quiet: bool,
    /// `idle`: connections to open.
    #[arg(long, default_value_t = 10_000)]
    conns: usize,
    /// `idle`: subscriptions per connection.
    #[arg(long, default_value_t = 10)]
    subs_per_conn: usize,
    /// `idle`: seconds to hold the connections open.
    #[arg(long, default_value_t = 0.0)]
    hold: f64,
    /// `failover`: a server's name and process id, as NAME=PID; once per
    /// server.
    #[arg(long = "pid", value_parser = name_pid)]
    pids: Vec<(String, u32)>,
    /// Connect over TLS, trusting the CA in this PEM file.
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// `js-batch`: messages per atomic batch.
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// `pubsub`, `queue`: subscribers connect here instead (another
    /// server, such as a leaf node's hub), and publishing starts once
    /// their interest has reached the publishers' server.
    #[arg(long)]
    sub_url: Option<String>,
    /// `ping-flood`: the system account's user, as a URL
    /// (`nats://user:pass@host:port`), that floods `$SYS.REQ.SERVER.PING`.
    #[arg(long)]
    flood_url: Option<String>,
}

fn name_pid(s: &str) -> Result<(String, u32), String> {
    let (name, pid) = s.split_once('=').ok_or("expected NAME=PID")?;
    let pid = pid.parse().map_err(|e| format!("pid {pid:?}: {e}"))?;
    Ok((name.to_string(), pid))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.pubs == 0 || a.subs == 0 {
        bail!("--pubs and --subs must be at least 1");
    }
    let p = Params {
        url: a.url,
        msgs: a.msgs,
        size: a.size,
        pubs: a.pubs,
        subs: a.subs,
        in_flight: a.in_flight,
        replicas: a.replicas,
        memory: a.memory,
        keep: a.keep || a.append,
        append: a.append,
        max_msgs: a.max_msgs,
        stall: Duration::from_secs_f64(a.stall),
        progress: !a.quiet,
        conns: a.conns,
        subs_per_conn: a.subs_per_conn,
        hold: Duration::from_secs_f64(a.hold),
        pids: a.pids,
        tls_ca: a.tls_ca,
        batch: a.batch,
        sub_url: a.sub_url,
        flood_url: a.flood_url,
    };
    eprintln!("{}", Report::TABLE_HEADER);
    for i in 0..a.runs {
        let reports = run(a.scenario, &p)
            .await
            .with_context(|| format!("{} run {} of {}", a.scenario.name(), i + 1, a.runs))?;
        for r in reports {
            eprintln!("{}", r.table_row());
            println!("{}", r.json());
        }
    }
    Ok(())
}
