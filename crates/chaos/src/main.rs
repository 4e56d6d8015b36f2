//! `flotilla-chaos --target PATH [--servers 3|5] [--seed N] [--duration SECS]
//! [--faults LIST] [--keep] [--sync-always] [--unpaced]`: one campaign (see the
//! library). Prints the faults as they come, then a summary; exits 1 on
//! any anomaly, keeping the servers' logs and stores, and the seed
//! replays the same faults.

use std::path::PathBuf;
use std::time::Duration;

use chaos::{Config, Fault};

fn usage(why: &str) -> ! {
    eprintln!("flotilla-chaos: {why}");
    eprintln!(
        "usage: flotilla-chaos --target PATH [--servers 3|5] [--seed N] [--duration SECS] \
         [--faults LIST] [--keep] [--sync-always] [--unpaced]"
    );
    let names: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
    eprintln!("faults (default: all): {}", names.join(","));
    std::process::exit(2);
}

fn parse() -> Config {
    let mut cfg = Config {
        target: PathBuf::new(),
        servers: 3,
        seed: 1,
        duration: Duration::from_secs(60),
        faults: Fault::ALL.to_vec(),
        keep: false,
        sync_always: false,
        unpaced: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        match flag.as_str() {
            "--target" => cfg.target = PathBuf::from(value()),
            "--servers" => match value().parse() {
                Ok(n @ (3 | 5)) => cfg.servers = n,
                _ => usage("--servers takes 3 or 5"),
            },
            "--seed" => {
                cfg.seed = value()
                    .parse()
                    .unwrap_or_else(|_| usage("--seed takes a number"))
            }
            "--duration" => {
                let secs: u64 = value()
                    .parse()
                    .unwrap_or_else(|_| usage("--duration takes seconds"));
                cfg.duration = Duration::from_secs(secs);
            }
            "--faults" => {
                cfg.faults = value()
                    .split(',')
                    .map(|f| {
                        Fault::parse(f).unwrap_or_else(|| usage(&format!("unknown fault {f:?}")))
                    })
                    .collect();
            }
            "--keep" => cfg.keep = true,
            "--sync-always" => cfg.sync_always = true,
            "--unpaced" => cfg.unpaced = true,
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    if cfg.target.as_os_str().is_empty() {
        usage("--target is required");
    }
    cfg
}

fn main() {
    let cfg = parse();
    let faults: Vec<&str> = cfg.faults.iter().map(|f| f.name()).collect();
    println!(
        "flotilla-chaos: {} x{} seed {} for {} s, faults {}{}",
        cfg.target.display(),
        cfg.servers,
        cfg.seed,
        cfg.duration.as_secs(),
        faults.join(","),
        if cfg.unpaced { ", unpaced" } else { "" }
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let report = match runtime.block_on(chaos::run(&cfg)) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("flotilla-chaos: the campaign could not run: {e}");
            std::process::exit(2);
        }
    };
    print!("{}", report.summary());
    if !report.anomalies.is_empty() {
        std::process::exit(1);
    }
}
