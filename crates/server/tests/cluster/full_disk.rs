//! A full disk under one replica of a three-server cluster: the server
//! does not panic, the group does not stall (a leader that cannot write
//! its log hands leadership on), and once there is space again the
//! replica catches up and holds every acknowledged message. The store
//! goes on a small tmpfs, so this needs root (it says so and passes
//! vacuously without).

#[path = "../common/mod.rs"]
mod common;

use common::replicated::{
    check_replicas, cluster_configured, created, lead_on, wait_for_meta_leader,
};
use common::tmpfs::Tmpfs;

use std::path::Path;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use serde_json::json;

fn name_of(s: &common::Server) -> String {
    s.json("/varz")["server_name"].as_str().unwrap().to_string()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Publishes `id` until it is acknowledged (the duplicate window makes a
/// retry of a stored one answer with its sequence).
async fn publish(js: &jetstream::Context, id: &str, payload: bytes::Bytes) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        let sent = js
            .publish_with_headers("d.x", headers, payload.clone())
            .await;
        if let Ok(ack) = sent {
            if let Ok(Ok(ack)) = tokio::time::timeout(Duration::from_secs(3), ack).await {
                return ack.sequence;
            }
        }
        assert!(Instant::now() < deadline, "{id} never acknowledged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_on_a_full_disk_neither_panics_nor_stalls_and_recovers() {
    let mut all = cluster_configured(3, common::WITH_SYSTEM_USER);
    let f = 2;
    // Server f's store moves onto a 3 MiB tmpfs.
    all[f].kill9();
    let store = all[f].store_dir();
    let old = store.with_extension("old");
    std::fs::rename(&store, &old).unwrap();
    let Some(fs) = Tmpfs::mount_at(store.clone(), "3M") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    copy_tree(&old, &store);
    all[f].restart();
    wait_for_meta_leader(&all);
    let names: Vec<String> = all.iter().map(name_of).collect();
    let c = all[0].client().await;
    common::replicated::api_ready(std::slice::from_ref(&c)).await;
    created(
        &c,
        json!({"name": "D", "subjects": ["d.>"], "num_replicas": 3}),
    )
    .await;
    // The worst case: the full replica leads when its disk fills.
    lead_on(&c, "D", &names[f]).await;
    // The full server tells the system account, once.
    let sys = common::connect_as(&all[0].url(), "sys", "p").await;
    let mut told = sys
        .subscribe("$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE")
        .await
        .unwrap();
    sys.flush().await.unwrap();
    let js = jetstream::new(c.clone());
    // Each message's payload is its id (what check_replicas compares),
    // made 4 KiB long to fill the disk.
    let pad = "x".repeat(4090);
    let mut acks = Vec::new();
    for i in 0..1500 {
        let id = format!("{i:05}{pad}");
        let seq = publish(&js, &id, id.clone().into()).await;
        acks.push((id, seq));
    }
    let damage = all[f].json("/jsz")["store_damage"].clone();
    assert!(
        damage["found"].as_u64() >= Some(1),
        "the disk filled: {damage}"
    );
    let v = common::out_of_storage(&mut told, Duration::from_secs(10)).await;
    assert_eq!(v["server"], names[f].as_str(), "{v}");
    assert_eq!(v["cluster"], "c1", "{v}");
    fs.resize("64M");
    check_replicas(&names, &c, "D", &acks).await;
    let damage = all[f].json("/jsz")["store_damage"].clone();
    assert!(damage["repaired"].as_u64() >= Some(1), "{damage}");
}
