//! Power loss under one server: its store sits on lossyfs, which keeps
//! every write not yet fsynced in memory; each round SIGKILLs the server
//! and drops those writes, as a power cut does. Every acknowledged
//! publish must come back at its sequence, and no message whose ack was
//! confirmed (a double ack) may be delivered again. Needs FUSE (Debian's
//! fuse3); where it cannot mount, the test says so and passes vacuously.

#[path = "../common/mod.rs"]
mod common;

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_lose_no_acknowledged_write_and_resurrect_no_ack() {
    let backing = tempfile::tempdir().unwrap();
    let mount = tempfile::tempdir().unwrap();
    let fs = match lossyfs::mount(backing.path(), mount.path()) {
        Ok(fs) => fs,
        Err(e) => {
            eprintln!("skipped: cannot mount lossyfs here ({e})");
            return;
        }
    };
    let mut s = common::server()
        .config(&format!(
            "jetstream {{ store_dir: \"{}\" }}",
            mount.path().display()
        ))
        .start();
    let mut published: Vec<(u64, String)> = Vec::new();
    let mut confirmed = 0u64;
    let mut dropped = 0;
    for round in 0..3u64 {
        let js = jetstream::new(s.client().await);
        let st = js
            .get_or_create_stream(stream::Config {
                name: "P".into(),
                subjects: vec!["p.>".into()],
                ..Default::default()
            })
            .await
            .unwrap();
        for i in 0..400 {
            let body = format!("r{round}m{i}");
            let ack = js
                .publish(format!("p.{i}"), body.clone().into())
                .await
                .unwrap()
                .await
                .unwrap();
            let last = published.last().map_or(0, |(seq, _)| *seq);
            assert!(ack.sequence > last, "{body} stored at {}", ack.sequence);
            published.push((ack.sequence, body));
        }
        let c = st
            .get_or_create_consumer(
                "C",
                consumer::pull::Config {
                    durable_name: Some("C".into()),
                    ack_policy: consumer::AckPolicy::Explicit,
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        // Confirmed acks of the next 150 messages, in order.
        let mut batch = c.fetch().max_messages(150).messages().await.unwrap();
        while let Some(m) = batch.next().await {
            let m = m.unwrap();
            let seq = m.info().unwrap().stream_sequence;
            assert_eq!(seq, confirmed + 1, "delivered again or skipped");
            m.double_ack().await.unwrap();
            confirmed = seq;
        }

        // The cut comes while publishes are in flight: what was written
        // and not yet synced is lost, and only what was acknowledged
        // counts.
        let (acked, mut acks) = tokio::sync::mpsc::unbounded_channel();
        let load = tokio::spawn(async move {
            for i in 0.. {
                let body = format!("r{round}f{i}");
                let Ok(ack) = js.publish(format!("p.f{i}"), body.clone().into()).await else {
                    return;
                };
                let acked = acked.clone();
                tokio::spawn(async move {
                    if let Ok(ack) = ack.await {
                        let _ = acked.send((ack.sequence, body));
                    }
                });
            }
        });
        let mut most = 0;
        for _ in 0..500 {
            let (seq, body) = acks.recv().await.unwrap();
            published.push((seq, body));
            most = most.max(fs.control.unsynced_bytes());
        }
        eprintln!("round {round}: at most {most} unsynced bytes seen");
        s.kill9();
        dropped += fs.control.drop_unsynced();
        load.abort();
        tokio::time::sleep(Duration::from_millis(100)).await;
        while let Ok((seq, body)) = acks.try_recv() {
            published.push((seq, body));
        }
        published.sort();
        s.restart();

        let js = jetstream::new(s.client().await);
        let mut st = js.get_stream("P").await.unwrap();
        let info = st.info().await.unwrap();
        assert!(
            info.state.messages >= published.len() as u64,
            "round {round}"
        );
        for (seq, body) in &published {
            let m = st.get_raw_message(*seq).await.unwrap();
            assert_eq!(&m.payload[..], body.as_bytes(), "seq {seq}");
        }
        let mut c: consumer::PullConsumer = st.get_consumer("C").await.unwrap();
        let ci = c.info().await.unwrap();
        assert!(
            ci.ack_floor.stream_sequence >= confirmed,
            "round {round}: a confirmed ack was lost: floor {} < {confirmed}",
            ci.ack_floor.stream_sequence
        );
        // The next delivery is the first message never acked.
        let mut next = c
            .fetch()
            .max_messages(1)
            .expires(Duration::from_secs(2))
            .messages()
            .await
            .unwrap();
        let m = next.next().await.expect("a message").unwrap();
        assert_eq!(m.info().unwrap().stream_sequence, confirmed + 1);
        m.double_ack().await.unwrap();
        confirmed += 1;
    }
    eprintln!("{dropped} unsynced bytes dropped over 3 power cuts");
    drop(s);
    fs.unmount().unwrap();
}
