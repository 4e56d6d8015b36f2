//! The short fault campaign of `cargo test`: three real servers, one
//! seed, forty seconds of faults under a workload of publishes with ids
//! and double-acking pulls, then the checker over the history and every
//! replica (see `crates/chaos`). Every fault class the machine supports:
//! power loss needs FUSE (/dev/fuse and Debian's fuse3), and is left out,
//! saying so, where it cannot mount. The long campaign is
//! `flotilla-chaos --target target/release/flotilla --duration 600`.

use std::time::Duration;

use chaos::{Config, Fault};

/// Whether lossyfs can mount here.
fn fuse_works() -> bool {
    let (backing, mount) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    match lossyfs::mount(backing.path(), mount.path()) {
        Ok(fs) => fs.unmount().is_ok(),
        Err(e) => {
            eprintln!("power loss left out: cannot mount FUSE here ({e})");
            false
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_campaign_finds_no_anomaly() {
    let mut faults = vec![Fault::Kill, Fault::Pause];
    if fuse_works() {
        faults.extend([Fault::Power, Fault::PowerAll]);
    }
    let cfg = Config {
        target: env!("CARGO_BIN_EXE_flotilla").into(),
        servers: 3,
        seed: 20261204,
        duration: Duration::from_secs(40),
        faults,
        keep: false,
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
