//! Object store buckets (ADR-20) through async-nats: chunked objects far
//! larger than max_payload, info, list, watch, delete, links, sealing.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use async_nats::jetstream::{self, object_store};
use futures::StreamExt;
use tokio::io::AsyncReadExt;

fn blob(len: usize) -> Vec<u8> {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..len).map(|_| rng.u8(..)).collect()
}

#[tokio::test]
async fn large_objects_round_trip() {
    // Three times the default max_payload (1 MiB), in the client's 128 KiB
    // chunks.
    let mut s = common::js_server();
    let js = jetstream::new(s.client().await);
    let store = js
        .create_object_store(object_store::Config {
            bucket: "files".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let data = blob(3 * 1024 * 1024 + 123);
    let info = store.put("big.bin", &mut data.as_slice()).await.unwrap();
    assert_eq!(info.size, data.len());
    assert!(info.chunks >= 24, "chunked: {}", info.chunks);
    let mut obj = store.get("big.bin").await.unwrap();
    let mut back = Vec::new();
    obj.read_to_end(&mut back).await.unwrap();
    assert!(back == data, "object content differs");

    let meta = store.info("big.bin").await.unwrap();
    assert_eq!(meta.size, data.len());
    assert!(!meta.deleted);

    // It is all still there after a crash.
    s.kill9();
    s.restart();
    let js = jetstream::new(s.client().await);
    let store = js.get_object_store("files").await.unwrap();
    let mut obj = store.get("big.bin").await.unwrap();
    let mut back = Vec::new();
    obj.read_to_end(&mut back).await.unwrap();
    assert!(back == data, "object content differs after restart");
}

#[tokio::test]
async fn list_watch_delete_replace() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let store = js
        .create_object_store(object_store::Config {
            bucket: "b".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut watch = store.watch().await.unwrap();
    for name in ["a.txt", "b.txt", "c.txt"] {
        store.put(name, &mut name.as_bytes()).await.unwrap();
    }
    let first = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.name, "a.txt");

    // Replacing an object purges the old chunks.
    let big = blob(300_000);
    store.put("a.txt", &mut big.as_slice()).await.unwrap();
    let mut o = store.get("a.txt").await.unwrap();
    let mut back = Vec::new();
    o.read_to_end(&mut back).await.unwrap();
    assert_eq!(back.len(), big.len());

    store.delete("b.txt").await.unwrap();
    assert!(store.get("b.txt").await.is_err());
    let mut names: Vec<String> = store
        .list()
        .await
        .unwrap()
        .map(|i| i.unwrap().name)
        .collect()
        .await;
    names.sort();
    assert_eq!(names, vec!["a.txt", "c.txt"]);

    // The stream holds just the live chunks and meta records.
    let mut st = js.get_stream("OBJ_b").await.unwrap();
    let state = st.info().await.unwrap().state.clone();
    assert!(state.messages < 20, "old chunks purged: {state:?}");

    // Links resolve to their target.
    let target = store.info("c.txt").await.unwrap();
    store.add_link("link.txt", &target).await.unwrap();
    let mut o = store.get("link.txt").await.unwrap();
    let mut back = Vec::new();
    o.read_to_end(&mut back).await.unwrap();
    assert_eq!(back, b"c.txt");
}

#[tokio::test]
async fn sealed_bucket_refuses_writes() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let mut store = js
        .create_object_store(object_store::Config {
            bucket: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    store.put("x", &mut "x".as_bytes()).await.unwrap();
    store.seal().await.unwrap();
    assert!(store.put("y", &mut "y".as_bytes()).await.is_err());
    let mut st = js.get_stream("OBJ_s").await.unwrap();
    assert!(st.info().await.unwrap().config.sealed);
}
