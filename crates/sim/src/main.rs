//! `flotilla-sim --seed S` replays one run; `flotilla-sim --seeds N
//! [--from F]` sweeps N seeds and prints runs per second. `--work-queue`
//! replicates a work-queue stream instead of plain values; `--publish-ids`
//! a limits stream published to with message ids and retries;
//! `--sourced` a work-queue stream sourced into a second stream group.
//! `--meta` the meta state machine. `--servers N` sets the cluster size
//! (3 by default).

use std::time::Instant;

fn arg(args: &[String], name: &str) -> Option<u64> {
    let i = args.iter().position(|a| a == name)?;
    let v = args.get(i + 1)?;
    match v.parse() {
        Ok(n) => Some(n),
        Err(_) => {
            eprintln!("flotilla-sim: {name} needs a number, not {v:?}");
            std::process::exit(2);
        }
    }
}

#[derive(Clone, Copy)]
enum Mode {
    Values,
    WorkQueue,
    Sourced,
    PublishIds,
    Counters,
    Schedules,
    Meta,
}

fn run(
    seed: u64,
    mode: Mode,
    servers: usize,
) -> Result<flotilla_sim::Report, flotilla_sim::Violation> {
    let mut cfg = flotilla_sim::Config::new(seed);
    cfg.servers = servers;
    match mode {
        Mode::Values => {}
        Mode::WorkQueue => {
            cfg.work_queue = true;
            cfg.propose_rate = 400;
        }
        Mode::Sourced => {
            cfg.work_queue = true;
            cfg.sourced = true;
            cfg.propose_rate = 150;
        }
        Mode::PublishIds => {
            cfg.publish_ids = true;
            cfg.propose_rate = 400;
        }
        Mode::Counters => {
            cfg.publish_ids = true;
            cfg.counters = true;
            cfg.propose_rate = 300;
        }
        Mode::Schedules => {
            cfg.publish_ids = true;
            cfg.schedules = true;
            cfg.propose_rate = 300;
        }
        Mode::Meta => cfg.meta = true,
    }
    flotilla_sim::Sim::new(cfg).run()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let servers = arg(&args, "--servers").unwrap_or(3) as usize;
    if !(1..=9).contains(&servers) {
        eprintln!("flotilla-sim: --servers takes 1 to 9");
        std::process::exit(2);
    }
    let wq = if args.iter().any(|a| a == "--sourced") {
        Mode::Sourced
    } else if args.iter().any(|a| a == "--work-queue") {
        Mode::WorkQueue
    } else if args.iter().any(|a| a == "--publish-ids") {
        Mode::PublishIds
    } else if args.iter().any(|a| a == "--counters") {
        Mode::Counters
    } else if args.iter().any(|a| a == "--schedules") {
        Mode::Schedules
    } else if args.iter().any(|a| a == "--meta") {
        Mode::Meta
    } else {
        Mode::Values
    };
    if let Some(seed) = arg(&args, "--seed") {
        match run(seed, wq, servers) {
            Ok(r) => println!("seed {seed}: ok {r:?}"),
            Err(v) => {
                eprintln!("{v}");
                std::process::exit(1);
            }
        }
        return;
    }
    let n = arg(&args, "--seeds").unwrap_or(1000);
    let from = arg(&args, "--from").unwrap_or(0);
    let start = Instant::now();
    let mut failed = 0;
    for seed in from..from + n {
        if let Err(v) = run(seed, wq, servers) {
            eprintln!("{v}");
            failed += 1;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{n} seeds from {from}: {failed} failed, {:.1} runs/s",
        n as f64 / secs
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
