//! Many streams on one server: a thousand file streams, each with a
//! consumer and messages, keep descriptors and memory bounded.

#[path = "../common/mod.rs"]
mod common;

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;

const STREAMS: usize = 1000;

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn rss_kb(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_streams() {
    let mut s = common::one_js_server();
    let js = jetstream::new(s.client().await);
    for i in 0..STREAMS {
        let st = js
            .create_stream(stream::Config {
                name: format!("S{i}"),
                subjects: vec![format!("s.{i}.>")],
                ..Default::default()
            })
            .await
            .unwrap();
        st.create_consumer(consumer::pull::Config {
            durable_name: Some("c".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    // Every stream gets messages, round robin, many acks in flight.
    let mut acks = Vec::new();
    for round in 0..5 {
        for i in 0..STREAMS {
            acks.push(
                js.publish(format!("s.{i}.{round}"), "payload".into())
                    .await
                    .unwrap(),
            );
        }
    }
    for a in acks {
        a.await.unwrap();
    }
    // And every consumer acks some.
    for i in (0..STREAMS).step_by(7) {
        let c: consumer::PullConsumer = js
            .get_consumer_from_stream("c", &format!("S{i}"))
            .await
            .unwrap();
        let mut b = c.fetch().max_messages(3).messages().await.unwrap();
        while let Some(m) = b.next().await {
            m.unwrap().double_ack().await.unwrap();
        }
    }
    let pid = s.pid();
    let fds = open_fds(pid);
    let rss = rss_kb(pid);
    eprintln!(
        "{STREAMS} streams: {fds} open descriptors, {} MiB resident",
        rss / 1024
    );
    assert!(fds < 700, "descriptors not bounded: {fds}");
    assert!(rss < 512 * 1024, "memory: {rss} kB");

    let info = js.query_account().await.unwrap();
    assert_eq!(info.streams, STREAMS);
    assert_eq!(info.consumers, STREAMS);

    // All of it comes back after a restart.
    s.restart();
    let js = jetstream::new(s.client().await);
    let mut names = js.stream_names();
    let mut n = 0;
    while let Some(name) = names.next().await {
        name.unwrap();
        n += 1;
    }
    assert_eq!(n, STREAMS);
    let mut st = js.get_stream("S7").await.unwrap();
    assert_eq!(st.info().await.unwrap().state.messages, 5);
    let c: consumer::PullConsumer = js.get_consumer_from_stream("c", "S7").await.unwrap();
    let ci = c.cached_info();
    assert_eq!(ci.ack_floor.stream_sequence, 3);
    assert!(open_fds(s.pid()) < 700);
}
