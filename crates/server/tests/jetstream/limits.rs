//! Server limits from the jetstream block: `max_file_store` and
//! `max_memory_store` bound reservations and usage, on one server and in
//! a cluster (where each server checks its own).

#[path = "../common/mod.rs"]
mod common;

use async_nats::jetstream::{self, stream};

fn server(settings: &str) -> common::JsServer {
    common::js_server_with(settings)
}

/// A stream config with the test mode's replicas.
fn replicated(cfg: stream::Config) -> stream::Config {
    stream::Config {
        num_replicas: common::replicas() as usize,
        ..cfg
    }
}

#[tokio::test]
async fn reservations_beyond_the_limits_are_refused() {
    let s = server("max_file_store: 1MB, max_memory_store: 1MB");
    let c = s.client().await;
    let js = jetstream::new(c.clone());
    let err = js
        .create_stream(replicated(stream::Config {
            name: "BIG".into(),
            max_bytes: 2 * 1024 * 1024,
            ..Default::default()
        }))
        .await
        .unwrap_err();
    // A cluster's meta leader finds no server with room while placing it.
    let refusal = match common::clustered() {
        true => "no suitable peers for placement, insufficient storage",
        false => "insufficient storage resources available",
    };
    assert!(err.to_string().contains(refusal), "{err}");
    let r = c
        .request(
            "$JS.API.STREAM.CREATE.M",
            common::with_replicas(
                "$JS.API.STREAM.CREATE.M",
                r#"{"name":"M","storage":"memory","max_bytes":2097152}"#,
            )
            .into(),
        )
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
    let memory_refusal = if common::clustered() { 10005 } else { 10028 };
    assert_eq!(v["error"]["err_code"], memory_refusal, "{v}");
    // Two streams that fit alone but not together.
    js.create_stream(replicated(stream::Config {
        name: "A".into(),
        max_bytes: 600 * 1024,
        ..Default::default()
    }))
    .await
    .unwrap();
    let b = js
        .create_stream(replicated(stream::Config {
            name: "B".into(),
            max_bytes: 600 * 1024,
            ..Default::default()
        }))
        .await;
    if common::nats_cluster() {
        // nats-server's cluster places each stream against what a server
        // has free, not what other streams reserved: it takes B.
        assert!(b.is_ok());
        return;
    }
    let err = b.unwrap_err();
    let storage_refusal = if common::clustered() {
        "10005"
    } else {
        "10047"
    };
    assert!(err.to_string().contains(storage_refusal), "{err}");
    let info = js.query_account().await.unwrap();
    assert_eq!(info.streams, 1);
}

#[tokio::test]
async fn usage_beyond_the_limit_is_refused() {
    let s = server("max_file_store: 64KB");
    let js = jetstream::new(s.client().await);
    js.create_stream(replicated(stream::Config {
        name: "S".into(),
        subjects: vec!["s.>".into()],
        ..Default::default()
    }))
    .await
    .unwrap();
    let payload = bytes::Bytes::from(vec![0u8; 1024]);
    let mut stored = 0;
    let err = loop {
        match js.publish("s.x", payload.clone()).await.unwrap().await {
            Ok(_) => stored += 1,
            Err(e) => break e,
        }
        assert!(stored < 1000, "the limit never bit");
    };
    assert!(
        err.to_string().contains("insufficient resources") && err.to_string().contains("10023"),
        "{err}"
    );
    assert!((50..=64).contains(&stored), "{stored}");
    if common::nats_cluster() {
        // nats-server's leader steps down when its limit bites: the next
        // publishes wait for a new one.
        return;
    }
    // Freeing space lets publishing continue.
    let st = js.get_stream("S").await.unwrap();
    st.purge().await.unwrap();
    js.publish("s.x", payload).await.unwrap().await.unwrap();
}
