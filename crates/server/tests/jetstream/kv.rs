//! Key-value buckets (ADR-8) through async-nats: the bucket's stream,
//! put/get/create/update, delete and purge markers, history, keys,
//! watch, and TTLs.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use async_nats::jetstream::kv::{self, Operation};
use async_nats::jetstream::{self, Context};
use futures::StreamExt;

async fn bucket(js: &Context, name: &str, history: i64) -> kv::Store {
    js.create_key_value(kv::Config {
        bucket: name.into(),
        history,
        ..Default::default()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn bucket_stream_is_what_the_client_asked_for() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let kv = bucket(&js, "cfg", 5).await;
    let status = kv.status().await.unwrap();
    assert_eq!(status.history(), 5);
    let mut st = js.get_stream("KV_cfg").await.unwrap();
    let info = st.info().await.unwrap();
    assert_eq!(info.config.subjects, vec!["$KV.cfg.>"]);
    assert_eq!(info.config.max_messages_per_subject, 5);
    assert!(info.config.allow_rollup && info.config.deny_delete && info.config.allow_direct);
    assert_eq!(info.config.discard, jetstream::stream::DiscardPolicy::New);
    // Binding to an existing bucket works; a missing one is an error.
    assert!(js.get_key_value("cfg").await.is_ok());
    assert!(js.get_key_value("nope").await.is_err());
}

#[tokio::test]
async fn put_get_create_update() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let kv = bucket(&js, "b", 10).await;
    let r1 = kv.put("k", "v1".into()).await.unwrap();
    let r2 = kv.put("k", "v2".into()).await.unwrap();
    assert_eq!((r1, r2), (1, 2));
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "v2");
    assert!(kv.get("missing").await.unwrap().is_none());
    let e = kv.entry("k").await.unwrap().unwrap();
    assert_eq!(
        (e.revision, e.operation, e.key.as_str()),
        (2, Operation::Put, "k")
    );

    // create: only when absent.
    assert_eq!(kv.create("new", "a".into()).await.unwrap(), 3);
    let err = kv.create("new", "b".into()).await.unwrap_err();
    assert_eq!(err.kind(), kv::CreateErrorKind::AlreadyExists, "{err:?}");

    // update: compare and set on the revision.
    assert_eq!(kv.update("k", "v3".into(), 2).await.unwrap(), 4);
    let err = kv.update("k", "stale".into(), 2).await.unwrap_err();
    assert_eq!(
        err.kind(),
        kv::UpdateErrorKind::WrongLastRevision,
        "{err:?}"
    );
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "v3");
    let e = kv.entry_for_revision("k", 2).await.unwrap().unwrap();
    assert_eq!(e.value, "v2");
}

#[tokio::test]
async fn delete_purge_and_recreate() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let kv = bucket(&js, "b", 10).await;
    kv.put("k", "1".into()).await.unwrap();
    kv.put("k", "2".into()).await.unwrap();
    kv.delete("k").await.unwrap();
    assert!(kv.get("k").await.unwrap().is_none());
    let e = kv.entry("k").await.unwrap().unwrap();
    assert_eq!((e.operation, e.revision), (Operation::Delete, 3));
    // History keeps the delete marker after the values.
    let ops: Vec<Operation> = kv
        .history("k")
        .await
        .unwrap()
        .map(|e| e.unwrap().operation)
        .collect()
        .await;
    assert_eq!(ops, vec![Operation::Put, Operation::Put, Operation::Delete]);
    // Create succeeds over a delete marker.
    kv.create("k", "again".into()).await.unwrap();
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "again");

    // Purge rolls the subject up to one marker.
    kv.purge("k").await.unwrap();
    let hist: Vec<kv::Entry> = kv
        .history("k")
        .await
        .unwrap()
        .map(|e| e.unwrap())
        .collect()
        .await;
    assert_eq!(hist.len(), 1);
    assert_eq!(hist[0].operation, Operation::Purge);
    let mut st = js.get_stream("KV_b").await.unwrap();
    assert_eq!(st.info().await.unwrap().state.messages, 1);
}

#[tokio::test]
async fn history_is_bounded() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let kv = bucket(&js, "h", 3).await;
    for i in 0..10 {
        kv.put("k", format!("{i}").into()).await.unwrap();
    }
    let vals: Vec<String> = kv
        .history("k")
        .await
        .unwrap()
        .map(|e| String::from_utf8(e.unwrap().value.to_vec()).unwrap())
        .collect()
        .await;
    assert_eq!(vals, vec!["7", "8", "9"]);
}

#[tokio::test]
async fn keys_and_watch() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let kv = bucket(&js, "w", 5).await;
    for k in ["a", "b.x", "c"] {
        kv.put(k, "v".into()).await.unwrap();
    }
    kv.delete("c").await.unwrap();
    let mut keys: Vec<String> = kv.keys().await.unwrap().map(|k| k.unwrap()).collect().await;
    keys.sort();
    assert_eq!(keys, vec!["a", "b.x"]);

    // watch_all with history: current values first, then live updates.
    let mut w = kv.watch_with_history(">").await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let e = tokio::time::timeout(Duration::from_secs(5), w.next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push((e.key.clone(), e.operation));
    }
    assert!(
        seen.contains(&("c".to_string(), Operation::Delete)),
        "{seen:?}"
    );
    kv.put("a", "new".into()).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), w.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((e.key.as_str(), &e.value[..]), ("a", &b"new"[..]));

    // A key watch sees only its key, from now on.
    let mut wk = kv.watch("b.*").await.unwrap();
    kv.put("a", "ignored".into()).await.unwrap();
    kv.put("b.y", "mine".into()).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(5), wk.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(e.key, "b.y");
}

#[tokio::test]
async fn per_key_ttl_and_limit_markers() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let kv = js
        .create_key_value(kv::Config {
            bucket: "ttl".into(),
            history: 1,
            limit_markers: Some(Duration::from_secs(1)),
            ..Default::default()
        })
        .await
        .unwrap();
    kv.create_with_ttl("temp", "soon gone".into(), Duration::from_secs(1))
        .await
        .unwrap();
    kv.put("keep", "here".into()).await.unwrap();
    assert_eq!(kv.get("temp").await.unwrap().unwrap(), "soon gone");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while kv.get("temp").await.unwrap().is_some() {
        assert!(
            std::time::Instant::now() < deadline,
            "the key never expired"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(kv.get("keep").await.unwrap().unwrap(), "here");
    // The expiry left a marker the history shows, and create works again.
    kv.create("temp", "back".into()).await.unwrap();
    assert_eq!(kv.get("temp").await.unwrap().unwrap(), "back");
}

#[tokio::test]
async fn bucket_max_age_expires_values() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let kv = js
        .create_key_value(kv::Config {
            bucket: "age".into(),
            max_age: Duration::from_secs(1),
            ..Default::default()
        })
        .await
        .unwrap();
    kv.put("k", "v".into()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while kv.get("k").await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn values_survive_a_crash() {
    let mut s = common::js_server();
    let js = jetstream::new(s.client().await);
    let kv = bucket(&js, "d", 5).await;
    for i in 0..50 {
        kv.put(format!("k{i}"), format!("{i}").into())
            .await
            .unwrap();
    }
    kv.delete("k7").await.unwrap();
    s.kill9();
    s.restart();
    let js = jetstream::new(s.client().await);
    let kv = js.get_key_value("d").await.unwrap();
    assert_eq!(kv.get("k49").await.unwrap().unwrap(), "49");
    assert!(kv.get("k7").await.unwrap().is_none());
    assert_eq!(kv.put("k0", "x".into()).await.unwrap(), 52);
}
