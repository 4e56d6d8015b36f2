#[path = "../common/mod.rs"]
mod common;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;

#[tokio::test]
async fn smoke() {
    let s = common::one_js_server();
    let c = s.client().await;
    let js = jetstream::new(c.clone());
    let mut st = js
        .create_stream(stream::Config {
            name: "S".into(),
            subjects: vec!["s.>".into()],
            ..Default::default()
        })
        .await
        .expect("create");
    for i in 0..10 {
        let ack = js
            .publish(format!("s.{i}"), "hi".into())
            .await
            .unwrap()
            .await
            .unwrap();
        assert_eq!(ack.sequence, i + 1);
    }
    let info = st.info().await.unwrap();
    assert_eq!(info.state.messages, 10);
    let cons = st
        .create_consumer(consumer::pull::Config {
            durable_name: Some("d".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = cons.fetch().max_messages(5).messages().await.unwrap();
    let mut n = 0;
    while let Some(m) = msgs.next().await {
        let m = m.unwrap();
        m.double_ack().await.unwrap();
        n += 1;
    }
    assert_eq!(n, 5);
    let kv = js
        .create_key_value(jetstream::kv::Config {
            bucket: "b".into(),
            history: 5,
            ..Default::default()
        })
        .await
        .unwrap();
    kv.put("k", "v1".into()).await.unwrap();
    kv.put("k", "v2".into()).await.unwrap();
    assert_eq!(kv.get("k").await.unwrap().unwrap(), "v2");
    let mut h = kv.history("k").await.unwrap();
    let mut seen = vec![];
    while let Some(e) = h.next().await {
        seen.push(e.unwrap().value);
    }
    assert_eq!(seen.len(), 2);
}
