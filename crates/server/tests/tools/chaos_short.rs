//! The short fault campaign of `cargo test`: three real servers, one
//! seed, a minute of faults, every class once, under the whole workload
//! (publishes with ids, double-acking pulls, a sourced work queue,
//! key-value compare-and-set), then the checker over the history and
//! every replica (see `crates/chaos`). Fault classes the machine cannot
//! make are left out, saying why: power loss needs FUSE (/dev/fuse and
//! Debian's fuse3), partitions root and nftables, a full disk root. The
//! long campaign is `scripts/chaos-campaign`.

use std::time::Duration;

use chaos::{Config, Fault};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_campaign_finds_no_anomaly() {
    let faults = Fault::ALL.to_vec();
    let cfg = Config {
        target: env!("CARGO_BIN_EXE_flotilla").into(),
        servers: 3,
        seed: 20261204,
        duration: Duration::from_secs(60),
        faults,
        keep: false,
        sync_always: false,
        unpaced: false,
    };
    let report = chaos::run(&cfg).await.expect("the campaign runs");
    let summary = report.summary();
    eprintln!("{summary}");
    assert!(report.anomalies.is_empty(), "{summary}");
    assert!(report.recovery.is_some(), "{summary}");
    assert!(report.acked > 100, "the workload ran: {summary}");
    assert!(report.confirmed > 100, "the consumer ran: {summary}");
    assert!(report.faults.values().sum::<usize>() >= 5, "{summary}");
}
