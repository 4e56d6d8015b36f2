//! Server limits from the jetstream block: `max_file_store` and
//! `max_memory_store` bound reservations and usage.

mod common;

use async_nats::jetstream::{self, stream};

fn server(extra: &str) -> common::Server {
    let dir = tempfile::tempdir().unwrap().keep();
    common::server()
        .config(&format!(
            "jetstream {{ store_dir: \"{}\", {extra} }}",
            dir.display()
        ))
        .start()
}

#[tokio::test]
async fn reservations_beyond_the_limits_are_refused() {
    let s = server("max_file_store: 1MB, max_memory_store: 1MB");
    let c = s.client().await;
    let js = jetstream::new(c.clone());
    let err = js
        .create_stream(stream::Config {
            name: "BIG".into(),
            max_bytes: 2 * 1024 * 1024,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("insufficient storage resources available"),
        "{err}"
    );
    let r = c
        .request(
            "$JS.API.STREAM.CREATE.M",
            r#"{"name":"M","storage":"memory","max_bytes":2097152}"#.into(),
        )
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&r.payload).unwrap();
    assert_eq!(v["error"]["err_code"], 10028, "{v}");
    // Two streams that fit alone but not together.
    js.create_stream(stream::Config {
        name: "A".into(),
        max_bytes: 600 * 1024,
        ..Default::default()
    })
    .await
    .unwrap();
    let err = js
        .create_stream(stream::Config {
            name: "B".into(),
            max_bytes: 600 * 1024,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("10047"), "{err}");
    let info = js.query_account().await.unwrap();
    assert_eq!(info.streams, 1);
}

#[tokio::test]
async fn usage_beyond_the_limit_is_refused() {
    let s = server("max_file_store: 64KB");
    let js = jetstream::new(s.client().await);
    js.create_stream(stream::Config {
        name: "S".into(),
        subjects: vec!["s.>".into()],
        ..Default::default()
    })
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
    // Freeing space lets publishing continue.
    let st = js.get_stream("S").await.unwrap();
    st.purge().await.unwrap();
    js.publish("s.x", payload).await.unwrap().await.unwrap();
}
