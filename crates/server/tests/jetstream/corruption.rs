//! Damaged storage found at start, or by a read while running: the
//! damaged message is reported lost (stream info `lost`, a log line),
//! everything else is served, and the server neither panics nor refuses
//! to start.

#[path = "../common/mod.rs"]
mod common;

use async_nats::jetstream::{self, consumer, stream};

fn segment_files(store: &std::path::Path, stream: &str) -> Vec<std::path::PathBuf> {
    let dir = store
        .join("jetstream")
        .join("$G")
        .join("streams")
        .join(stream)
        .join("msgs");
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

async fn info(c: &async_nats::Client, stream: &str) -> serde_json::Value {
    let r = c
        .request(format!("$JS.API.STREAM.INFO.{stream}"), "".into())
        .await
        .unwrap();
    serde_json::from_slice(&r.payload).unwrap()
}

/// Stream `name` on `<name lowercase>.>` holding 100 messages,
/// `payload-0001` to `payload-0100`.
async fn stream_of_100(js: &jetstream::Context, name: &str) {
    let prefix = name.to_lowercase();
    js.create_stream(stream::Config {
        name: name.into(),
        subjects: vec![format!("{prefix}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    for i in 1..=100 {
        js.publish(format!("{prefix}.{i}"), format!("payload-{i:04}").into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
}

/// Where message `i`'s payload (`payload-000i`) is in a segment's bytes.
fn payload_offset(bytes: &[u8], i: u64) -> usize {
    let needle = format!("payload-{i:04}");
    bytes
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .expect("the message on disk")
}

#[tokio::test]
async fn a_flipped_bit_loses_one_message() {
    let mut s = common::one_js_server();
    let js = jetstream::new(s.client().await);
    stream_of_100(&js, "C").await;
    s.kill9();
    // Damage message 50's payload in place.
    let seg = &segment_files(&s.store_dir(), "C")[0];
    let mut bytes = std::fs::read(seg).unwrap();
    let at = payload_offset(&bytes, 50);
    bytes[at + 3] ^= 0x10;
    std::fs::write(seg, &bytes).unwrap();

    s.restart();
    let c = s.client().await;
    let i = info(&c, "C").await;
    assert_eq!(i["state"]["lost"]["msgs"], serde_json::json!([50]), "{i}");
    assert_eq!(i["state"]["messages"], 99);
    assert_eq!(i["state"]["last_seq"], 100);
    assert!(
        s.log_text().contains("lost to damaged storage"),
        "{}",
        s.log_text()
    );
    let js = jetstream::new(c);
    let st = js.get_stream("C").await.unwrap();
    assert!(st.get_raw_message(50).await.is_err());
    assert_eq!(
        &st.get_raw_message(51).await.unwrap().payload[..],
        b"payload-0051"
    );
    // Publishing continues after the last sequence.
    let ack = js
        .publish("c.next", "x".into())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ack.sequence, 101);
}

/// A record damaged under a running server: the read that finds it
/// fails, the stream reloads from disk and counts the message lost, and
/// a consumer reads every other message rather than stopping there.
#[tokio::test]
async fn a_record_damaged_while_running_is_counted_lost_on_its_first_read() {
    use futures::StreamExt;
    use std::os::unix::fs::FileExt;
    let s = common::one_js_server();
    let js = jetstream::new(s.client().await);
    stream_of_100(&js, "R").await;
    // Damage message 50's payload in place: the server keeps the file open.
    let seg = &segment_files(&s.store_dir(), "R")[0];
    let bytes = std::fs::read(seg).unwrap();
    let at = payload_offset(&bytes, 50);
    let file = std::fs::OpenOptions::new().write(true).open(seg).unwrap();
    file.write_all_at(&[bytes[at + 3] ^ 0x10], (at + 3) as u64)
        .unwrap();

    let st = js.get_stream("R").await.unwrap();
    assert!(st.get_raw_message(50).await.is_err());
    let c = s.client().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let i = info(&c, "R").await;
        if i["state"]["lost"]["msgs"] == serde_json::json!([50]) {
            assert_eq!(i["state"]["messages"], 99, "{i}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "50 never counted lost: {i}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        s.log_text().contains("a read found damage"),
        "{}",
        s.log_text()
    );
    let damage = &s.json("/varz")["jetstream"]["stats"]["store_damage"];
    assert_eq!(*damage, serde_json::json!({"found": 1, "repaired": 1}));
    let consumer = st
        .create_consumer(jetstream::consumer::pull::Config {
            ack_policy: jetstream::consumer::AckPolicy::None,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut batch = consumer.fetch().max_messages(200).messages().await.unwrap();
    while let Some(m) = batch.next().await {
        got.push(m.unwrap().info().unwrap().stream_sequence);
    }
    let want: Vec<u64> = (1..=100).filter(|&seq| seq != 50).collect();
    assert_eq!(got, want);
}

#[tokio::test]
async fn a_torn_tail_is_truncated_and_garbage_meta_is_reported() {
    let mut s = common::one_js_server();
    let js = jetstream::new(s.client().await);
    for name in ["T", "BAD"] {
        js.create_stream(stream::Config {
            name: name.into(),
            subjects: vec![format!("{}.>", name.to_lowercase())],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    for i in 1..=10 {
        js.publish(format!("t.{i}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    s.kill9();
    // A half-written record at the end, as a crash mid-write leaves it.
    let seg = &segment_files(&s.store_dir(), "T")[0];
    let mut bytes = std::fs::read(seg).unwrap();
    bytes.extend_from_slice(&[0x55, 0x12, 0x00, 0x07, 0x01]);
    std::fs::write(seg, &bytes).unwrap();
    // And an unreadable config for another stream.
    let meta = s.store_dir().join("jetstream/$G/streams/BAD/meta.json");
    std::fs::write(&meta, b"{not json").unwrap();

    s.restart();
    let c = s.client().await;
    let i = info(&c, "T").await;
    assert_eq!(i["state"]["messages"], 10, "{i}");
    assert!(
        i["state"].get("lost").is_none(),
        "a torn tail is not a loss: {i}"
    );
    let i = info(&c, "BAD").await;
    assert_eq!(i["error"]["err_code"], 10059);
    assert!(
        s.log_text().contains("could not be recovered"),
        "{}",
        s.log_text()
    );
    let js = jetstream::new(c);
    assert_eq!(
        js.publish("t.x", "y".into())
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence,
        11
    );
    // Its data is not thrown away by reusing the name.
    let err = js
        .create_stream(stream::Config {
            name: "BAD".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("could not be recovered"), "{err}");
    assert!(meta.exists());
}

/// The consumer journals are the only index-like files: stream indexes are
/// rebuilt from the checksummed segments at start. A journal cut short
/// keeps what came before the cut; one cut inside its snapshot loses the
/// consumer, which the log reports. The stream serves on either way.
#[tokio::test]
async fn truncated_consumer_journals_are_reported() {
    use async_nats::jetstream::consumer::pull;
    use futures::StreamExt;

    let mut s = common::one_js_server();
    let js = jetstream::new(s.client().await);
    let st = js
        .create_stream(stream::Config {
            name: "J".into(),
            subjects: vec!["j.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 1..=10 {
        js.publish(format!("j.{i}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    for name in ["CUT", "GONE"] {
        let c = st
            .create_consumer(pull::Config {
                durable_name: Some(name.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut msgs = c.fetch().max_messages(4).messages().await.unwrap();
        while let Some(m) = msgs.next().await {
            m.unwrap().double_ack().await.unwrap();
        }
    }
    s.kill9();
    let obs = s.store_dir().join("jetstream/$G/streams/J/obs");
    let cut = obs.join("CUT.log");
    // Journals grow in reserved steps: the entries end at the last
    // non-zero byte, and the zeros after it are unwritten space.
    let data = std::fs::read(&cut).unwrap();
    let len = data.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    let f = std::fs::OpenOptions::new().write(true).open(&cut).unwrap();
    f.set_len(len - 3).unwrap();
    let gone = std::fs::OpenOptions::new()
        .write(true)
        .open(obs.join("GONE.log"))
        .unwrap();
    gone.set_len(10).unwrap();

    s.restart();
    let js = jetstream::new(s.client().await);
    let mut st = js.get_stream("J").await.unwrap();
    assert_eq!(st.info().await.unwrap().state.messages, 10);
    let cut = st.consumer_info("CUT").await.unwrap();
    // The last entry (the fourth ack) was cut off; the three before it stay.
    assert!(
        (3..=4).contains(&cut.ack_floor.stream_sequence),
        "{:?}",
        cut.ack_floor
    );
    assert!(st.consumer_info("GONE").await.is_err());
    let log = s.log_text();
    assert!(
        log.contains("consumer 'CUT': a cut-off last entry was dropped"),
        "{log}"
    );
    assert!(
        log.contains("consumer journal GONE.log: no readable snapshot; consumer not restored"),
        "{log}"
    );
}

/// A tombstone's record kind (`store::record::Kind::Delete`).
const DELETE: u8 = 2;

/// A work-queue message that a consumer acknowledged is deleted by a
/// tombstone. Damage to either of its two copies brings the message back
/// neither in the stream nor to the consumer after a restart.
#[tokio::test]
async fn a_damaged_tombstone_never_brings_an_acked_message_back() {
    use async_nats::jetstream::consumer::pull;
    use futures::StreamExt;

    for copy in 0..2 {
        let mut s = common::one_js_server();
        let js = jetstream::new(s.client().await);
        let st = js
            .create_stream(stream::Config {
                name: "WQ".into(),
                subjects: vec!["wq.>".into()],
                retention: stream::RetentionPolicy::WorkQueue,
                ..Default::default()
            })
            .await
            .unwrap();
        for i in 1..=10 {
            js.publish(format!("wq.{i}"), format!("payload-{i:04}").into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
        let c = st
            .create_consumer(pull::Config {
                durable_name: Some("W".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut msgs = c.fetch().max_messages(4).messages().await.unwrap();
        while let Some(m) = msgs.next().await {
            m.unwrap().double_ack().await.unwrap();
        }
        s.kill9();
        let seg = &segment_files(&s.store_dir(), "WQ")[0];
        let mut bytes = std::fs::read(seg).unwrap();
        let tombstones: Vec<usize> = common::store_records(&bytes)
            .into_iter()
            .filter(|&(_, kind, seq)| kind == DELETE && seq == 3)
            .map(|(at, _, _)| at)
            .collect();
        assert_eq!(tombstones.len(), 2, "message 3's tombstone, twice");
        // Inside its sequence number: the record fails its checksum.
        bytes[tombstones[copy] + 12] ^= 0x01;
        std::fs::write(seg, &bytes).unwrap();

        s.restart();
        let c = s.client().await;
        let i = info(&c, "WQ").await;
        assert_eq!(i["state"]["messages"], 6, "copy {copy}: {i}");
        assert_eq!(i["state"]["first_seq"], 5, "copy {copy}: {i}");
        let js = jetstream::new(c);
        let st = js.get_stream("WQ").await.unwrap();
        assert!(st.get_raw_message(3).await.is_err(), "copy {copy}");
        let c: consumer::PullConsumer = st.get_consumer("W").await.unwrap();
        let mut msgs = c.fetch().max_messages(1).messages().await.unwrap();
        let m = msgs.next().await.expect("a message").unwrap();
        assert_eq!(m.info().unwrap().stream_sequence, 5, "copy {copy}");
    }
}

/// A consumer's acks are journal entries, each written twice. Damage to
/// the first copy of the last one (the third ack) takes no ack: after a
/// restart the consumer's ack floor is where the acks left it.
#[tokio::test]
async fn a_damaged_consumer_journal_entry_takes_no_ack() {
    use async_nats::jetstream::consumer::pull;
    use futures::StreamExt;

    let mut s = common::one_js_server();
    let js = jetstream::new(s.client().await);
    let st = js
        .create_stream(stream::Config {
            name: "A".into(),
            subjects: vec!["a.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    for i in 1..=10 {
        js.publish(format!("a.{i}"), "x".into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let c = st
        .create_consumer(pull::Config {
            durable_name: Some("D".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut msgs = c.fetch().max_messages(3).messages().await.unwrap();
    while let Some(m) = msgs.next().await {
        m.unwrap().double_ack().await.unwrap();
    }
    s.kill9();
    let journal = s.store_dir().join("jetstream/$G/streams/A/obs/D.log");
    let mut bytes = std::fs::read(&journal).unwrap();
    let entries = common::store_records(&bytes);
    let (last_first_copy, _, _) = entries
        .iter()
        .rev()
        .filter(|&&(_, kind, _)| kind == 1)
        .nth(1)
        .copied()
        .expect("the last entry, twice");
    bytes[last_first_copy + 35] ^= 0x01;
    std::fs::write(&journal, &bytes).unwrap();

    s.restart();
    let js = jetstream::new(s.client().await);
    let st = js.get_stream("A").await.unwrap();
    let info = st.consumer_info("D").await.unwrap();
    assert_eq!(info.ack_floor.stream_sequence, 3, "{:?}", info.ack_floor);
    assert_eq!(info.num_ack_pending, 0);
    let log = s.log_text();
    assert!(log.contains("damaged entries skipped"), "{log}");
}
