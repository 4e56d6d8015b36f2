//! Mirrors and sources.

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream, Context};
use futures::StreamExt;

/// Waits for `name` to hold `want` messages. Up to 30 s: after a restart
/// nats-server's sources start again only at their next health check.
async fn wait_messages(js: &Context, name: &str, want: u64) -> stream::Info {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut s = js.get_stream(name).await.unwrap();
        let info = s.info().await.unwrap().clone();
        if info.state.messages == want || Instant::now() > deadline {
            assert_eq!(info.state.messages, want, "{name}: {info:?}");
            return info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn mirror_keeps_sequences() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    let origin = js
        .create_stream(stream::Config {
            name: "O".into(),
            subjects: vec!["o.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 1..=10 {
        js.publish(format!("o.{i}"), format!("m{i}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    origin.delete_message(4).await.unwrap();
    js.create_stream(stream::Config {
        name: "M".into(),
        mirror: Some(stream::Source {
            name: "O".into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    eprintln!("LOG: {}", s.log_text());
    let info = wait_messages(&js, "M", 9).await;
    assert_eq!(info.state.last_sequence, 10);
    let mirror = info.mirror.expect("mirror info");
    assert_eq!(mirror.name, "O");
    assert_eq!(mirror.lag, 0);
    let m = js.get_stream("M").await.unwrap();
    let msg = m.get_raw_message(7).await.unwrap();
    assert_eq!(msg.subject.as_str(), "o.7");
    assert_eq!(&msg.payload[..], b"m7");
    assert!(
        m.get_raw_message(4).await.is_err(),
        "the origin's gap is a gap here"
    );
    // New messages follow.
    js.publish("o.x", "later".into())
        .await
        .unwrap()
        .await
        .unwrap();
    wait_messages(&js, "M", 10).await;
    // A mirror takes no publishes of its own: it has no subjects.
    assert!(js.publish("M", "x".into()).await.unwrap().await.is_err());
}

#[tokio::test]
async fn sources_merge_with_tags_and_transforms() {
    let s = common::js_server();
    let js = jetstream::new(s.client().await);
    for (name, subj) in [("A", "a.>"), ("B", "b.>")] {
        js.create_stream(stream::Config {
            name: name.into(),
            subjects: vec![subj.into()],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    for i in 0..5 {
        js.publish(format!("a.{i}"), "A".into())
            .await
            .unwrap()
            .await
            .unwrap();
        js.publish(format!("b.{i}"), "B".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    js.create_stream(stream::Config {
        name: "ALL".into(),
        sources: Some(vec![
            stream::Source {
                name: "A".into(),
                ..Default::default()
            },
            stream::Source {
                name: "B".into(),
                filter_subject: Some("b.1".into()),
                ..Default::default()
            },
        ]),
        ..Default::default()
    })
    .await
    .unwrap();
    let info = wait_messages(&js, "ALL", 6).await;
    assert_eq!(info.sources.len(), 2);
    let all = js.get_stream("ALL").await.unwrap();
    let m = all.get_last_raw_message_by_subject("b.1").await.unwrap();
    let tag = m
        .headers
        .get("Nats-Stream-Source")
        .unwrap()
        .as_str()
        .to_string();
    assert!(tag.starts_with("B 2 b.1 > b.1"), "{tag}");

    // Subject transforms on a source.
    js.create_stream(stream::Config {
        name: "T".into(),
        sources: Some(vec![stream::Source {
            name: "A".into(),
            subject_transforms: vec![stream::SubjectTransform {
                source: "a.*".into(),
                destination: "copied.{{wildcard(1)}}".into(),
            }],
            ..Default::default()
        }]),
        ..Default::default()
    })
    .await
    .unwrap();
    wait_messages(&js, "T", 5).await;
    let t = js.get_stream("T").await.unwrap();
    let m = t.get_last_raw_message_by_subject("copied.3").await.unwrap();
    assert_eq!(&m.payload[..], b"A");
    // Source info shows the transforms as configured; one without any
    // shows none.
    let c = s.client().await;
    let info = c.request("$JS.API.STREAM.INFO.T", "".into()).await.unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
    assert_eq!(
        info["sources"][0]["subject_transforms"],
        serde_json::json!([{"src": "a.*", "dest": "copied.{{wildcard(1)}}"}]),
        "{info}"
    );
    let info = c
        .request("$JS.API.STREAM.INFO.ALL", "".into())
        .await
        .unwrap();
    let info: serde_json::Value = serde_json::from_slice(&info.payload).unwrap();
    let sources = info["sources"].as_array().unwrap();
    assert!(
        sources
            .iter()
            .all(|s| s.get("subject_transforms").is_none()),
        "{info}"
    );
}

#[tokio::test]
async fn sourcing_from_a_work_queue_consumes_it() {
    let mut s = common::js_server();
    let js = jetstream::new(s.client().await);
    js.create_stream(stream::Config {
        name: "WQ".into(),
        subjects: vec!["jobs.>".into()],
        retention: stream::RetentionPolicy::WorkQueue,
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 0..20 {
        js.publish(format!("jobs.{i}"), "job".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    js.create_stream(stream::Config {
        name: "ARCHIVE".into(),
        sources: Some(vec![stream::Source {
            name: "WQ".into(),
            ..Default::default()
        }]),
        ..Default::default()
    })
    .await
    .unwrap();
    wait_messages(&js, "ARCHIVE", 20).await;
    wait_messages(&js, "WQ", 0).await;
    // The internal consumer is not listed on flotilla, where it is
    // direct. nats-server 2.15.1 counts and lists it (one server and
    // cluster alike): a known difference.
    let mut wq = js.get_stream("WQ").await.unwrap();
    let listed = if common::reference_server() { 1 } else { 0 };
    assert_eq!(wq.info().await.unwrap().state.consumer_count, listed);
    let mut names = wq.consumer_names();
    let mut named = 0;
    while let Some(n) = names.next().await {
        n.unwrap();
        named += 1;
    }
    assert_eq!(named, listed);

    // After a restart nothing is copied twice and new work still flows.
    s.restart();
    let js = jetstream::new(s.client().await);
    for i in 20..25 {
        js.publish(format!("jobs.{i}"), "job".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    wait_messages(&js, "ARCHIVE", 25).await;
    wait_messages(&js, "WQ", 0).await;
    let archive = js.get_stream("ARCHIVE").await.unwrap();
    let c = archive
        .create_consumer(consumer::pull::Config {
            durable_name: Some("r".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let mut batch = c.fetch().max_messages(100).messages().await.unwrap();
    while let Some(m) = batch.next().await {
        let m = m.unwrap();
        assert!(
            seen.insert(m.subject.to_string()),
            "{} copied twice",
            m.subject
        );
    }
    assert_eq!(seen.len(), 25);
}

/// A work queue of 20,000 jobs copied with many deliveries in flight,
/// the server killed while copying: after the restart every job is in
/// the archive exactly once, and the queue is empty.
#[tokio::test]
async fn a_busy_source_killed_mid_copy_copies_each_job_once() {
    busy_source_killed_mid_copy(stream::RetentionPolicy::WorkQueue).await;
}

/// The same with a limits origin, whose copies go many to an entry and
/// are acked together: each once after the restart, the origin kept.
#[tokio::test]
async fn a_busy_limits_source_killed_mid_copy_copies_each_once() {
    busy_source_killed_mid_copy(stream::RetentionPolicy::Limits).await;
}

async fn busy_source_killed_mid_copy(retention: stream::RetentionPolicy) {
    const JOBS: u64 = 20_000;
    let mut s = common::js_server();
    let js = jetstream::new(s.client().await);
    js.create_stream(stream::Config {
        name: "WQ".into(),
        subjects: vec!["jobs.>".into()],
        retention,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut acks = Vec::new();
    for i in 0..JOBS {
        acks.push(js.publish(format!("jobs.{i}"), "job".into()).await.unwrap());
        if acks.len() == 256 || i + 1 == JOBS {
            for a in acks.drain(..) {
                a.await.unwrap();
            }
        }
    }
    js.create_stream(stream::Config {
        name: "ARCHIVE".into(),
        sources: Some(vec![stream::Source {
            name: "WQ".into(),
            ..Default::default()
        }]),
        ..Default::default()
    })
    .await
    .unwrap();
    // Killed once the copy is under way.
    let mut a = js.get_stream("ARCHIVE").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.info().await.unwrap().state.messages == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    s.kill9();
    s.restart();
    let js = jetstream::new(s.client().await);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut a = js.get_stream("ARCHIVE").await.unwrap();
        if a.info().await.unwrap().state.messages >= JOBS || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_messages(&js, "ARCHIVE", JOBS).await;
    let left = match retention {
        stream::RetentionPolicy::WorkQueue => 0,
        _ => JOBS,
    };
    wait_messages(&js, "WQ", left).await;
    let archive = js.get_stream("ARCHIVE").await.unwrap();
    let c = archive
        .create_consumer(consumer::pull::Config {
            durable_name: Some("r".into()),
            ack_policy: consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    while (seen.len() as u64) < JOBS {
        let mut batch = c.fetch().max_messages(1000).messages().await.unwrap();
        let mut got = 0;
        while let Some(m) = batch.next().await {
            let subject = m.unwrap().subject.to_string();
            assert!(seen.insert(subject.clone()), "{subject} copied twice");
            got += 1;
        }
        assert!(got > 0, "{} of {JOBS} read", seen.len());
    }
}

/// An interest stream sourced with more messages than a source keeps
/// unacknowledged (16,384 on flotilla): the copy's acks reach the origin,
/// which empties, and a restart copies nothing twice.
#[tokio::test]
async fn sourcing_an_interest_stream_acks_past_the_window() {
    const N: u64 = 20_000;
    let mut s = common::js_server();
    let js = jetstream::new(s.client().await);
    js.create_stream(stream::Config {
        name: "EVENTS".into(),
        subjects: vec!["ev.>".into()],
        retention: stream::RetentionPolicy::Interest,
        ..Default::default()
    })
    .await
    .unwrap();
    js.create_stream(stream::Config {
        name: "ARCHIVE".into(),
        sources: Some(vec![stream::Source {
            name: "EVENTS".into(),
            ..Default::default()
        }]),
        ..Default::default()
    })
    .await
    .unwrap();
    // An interest stream keeps nothing before the source's consumer
    // exists: probes until one is copied.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut archive = js.get_stream("ARCHIVE").await.unwrap();
    while archive.info().await.unwrap().state.messages == 0 {
        assert!(Instant::now() < deadline, "no probe was copied");
        js.publish("ev.probe", "p".into())
            .await
            .unwrap()
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let publish = |from: u64, to: u64| {
        let js = js.clone();
        async move {
            let mut acks = Vec::new();
            for i in from..to {
                acks.push(
                    js.publish(format!("ev.data.{i}"), "e".into())
                        .await
                        .unwrap(),
                );
                if acks.len() == 256 || i + 1 == to {
                    for a in acks.drain(..) {
                        a.await.unwrap();
                    }
                }
            }
        }
    };
    publish(0, N).await;
    wait_data(&js, N).await;
    wait_messages(&js, "EVENTS", 0).await;

    s.restart();
    let js = jetstream::new(s.client().await);
    let publish = |from: u64, to: u64| {
        let js = js.clone();
        async move {
            for i in from..to {
                js.publish(format!("ev.data.{i}"), "e".into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        }
    };
    publish(N, N + 100).await;
    wait_data(&js, N + 100).await;
    wait_messages(&js, "EVENTS", 0).await;
}

/// Waits for ARCHIVE to hold `want` messages on `ev.data.>`, each once.
async fn wait_data(js: &Context, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let archive = js.get_stream("ARCHIVE").await.unwrap();
    let c = archive
        .create_consumer(consumer::pull::Config {
            ack_policy: consumer::AckPolicy::None,
            filter_subject: "ev.data.>".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    while (seen.len() as u64) < want {
        assert!(Instant::now() < deadline, "{} of {want} copied", seen.len());
        let mut batch = c
            .fetch()
            .max_messages(1000)
            .expires(Duration::from_millis(500))
            .messages()
            .await
            .unwrap();
        while let Some(m) = batch.next().await {
            let subject = m.unwrap().subject.to_string();
            assert!(seen.insert(subject.clone()), "{subject} copied twice");
        }
    }
    // Nothing past them: no copy twice.
    let mut rest = c
        .fetch()
        .max_messages(1000)
        .expires(Duration::from_millis(300))
        .messages()
        .await
        .unwrap();
    if let Some(m) = rest.next().await {
        panic!("{} copied twice", m.unwrap().subject);
    }
}

/// Transforms of one source or mirror whose source subjects overlap are
/// refused before anything else about the stream, a taken name included
/// (nats-server checks the config first; nats.py's
/// test_subject_transforms relies on it).
#[tokio::test]
async fn overlapping_source_transforms_are_refused_first() {
    let s = common::js_server();
    let c = s.client().await;
    let created = common::api(
        &c,
        "$JS.API.STREAM.CREATE.SOURCING",
        r#"{"name":"SOURCING","sources":[{"name":"T1"}]}"#,
    )
    .await;
    assert!(created.get("error").is_none(), "{created}");
    let overlapping = r#"[{"src":">","dest":"a.>"},{"src":">","dest":"b.>"}]"#;
    for (subject, body, code) in [
        (
            "$JS.API.STREAM.CREATE.SOURCING",
            format!(
                r#"{{"name":"SOURCING","sources":[{{"name":"T2","subject_transforms":{overlapping}}}]}}"#
            ),
            10147,
        ),
        (
            "$JS.API.STREAM.CREATE.M",
            format!(
                r#"{{"name":"M","mirror":{{"name":"T2","subject_transforms":{overlapping}}}}}"#
            ),
            10152,
        ),
    ] {
        let v = common::api(&c, subject, &body).await;
        assert_eq!(common::api_err(&v).1, code, "{v}");
    }
    // Disjoint transforms are fine.
    let disjoint = common::api(
        &c,
        "$JS.API.STREAM.CREATE.OK",
        r#"{"name":"OK","sources":[{"name":"T2","subject_transforms":[{"src":"a.>","dest":"x.>"},{"src":"b.>","dest":"y.>"}]}]}"#,
    )
    .await;
    assert!(disjoint.get("error").is_none(), "{disjoint}");
}
