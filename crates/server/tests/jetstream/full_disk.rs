//! A full disk: the publisher gets an error, nothing acknowledged is
//! damaged, and publishing resumes once space is freed. Runs on a small
//! tmpfs, so it needs root (it says so and passes vacuously without).

#[path = "../common/mod.rs"]
mod common;

use common::tmpfs::Tmpfs;

use async_nats::jetstream::{self, stream};

#[tokio::test]
async fn full_disk_refuses_then_recovers() {
    let Some(fs) = Tmpfs::mount("1M") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let store = fs.0.display().to_string();
    let mut s = common::server()
        .config(&format!(
            "jetstream {{ store_dir: \"{store}\", max_file_store: 1GB }}\n{}",
            common::WITH_SYSTEM_USER
        ))
        .start();
    // The system account hears of it, once.
    let sys = common::connect_as(&s.url(), "sys", "p").await;
    let mut told = sys
        .subscribe("$JS.EVENT.ADVISORY.SERVER.OUT_OF_STORAGE")
        .await
        .unwrap();
    sys.flush().await.unwrap();
    let js = jetstream::new(s.client().await);
    js.create_stream(stream::Config {
        name: "F".into(),
        subjects: vec!["f.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let payload = bytes::Bytes::from(vec![b'x'; 4096]);
    let mut acked = Vec::new();
    let mut refused = None;
    for i in 0..2000u64 {
        match js
            .publish(format!("f.{i}"), payload.clone())
            .await
            .unwrap()
            .await
        {
            Ok(ack) => acked.push(ack.sequence),
            Err(e) => {
                refused = Some(e.to_string());
                break;
            }
        }
    }
    let refused = refused.expect("a 1 MiB disk fills up");
    eprintln!("{} acked, then: {refused}", acked.len());
    assert!(
        refused.contains("storage") || refused.contains("10077"),
        "{refused}"
    );
    assert!(acked.len() > 50, "some fit: {}", acked.len());
    {
        let v = common::out_of_storage(&mut told, std::time::Duration::from_secs(5)).await;
        assert_eq!(v["stream"], "F", "{v}");
        let varz = s.json("/varz");
        assert_eq!(v["server_id"], varz["server_id"], "{v}");
        assert_eq!(v["server"], varz["server_name"], "{v}");
        assert_eq!(v["cluster"], "", "{v}");
    }
    // Still refused while full, and nothing acknowledged is harmed.
    assert!(js
        .publish("f.more", payload.clone())
        .await
        .unwrap()
        .await
        .is_err());
    let st = js.get_stream("F").await.unwrap();
    for &seq in acked.iter().step_by(17).chain(acked.last()) {
        let m = st.get_raw_message(seq).await.unwrap();
        assert_eq!(m.payload.len(), 4096, "seq {seq}");
    }
    // Space comes back: so does publishing, at the next sequence.
    fs.resize("64M");
    let ack = js
        .publish("f.after", payload.clone())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(ack.sequence, acked.last().unwrap() + 1);
    // And it all survives a crash.
    s.kill9();
    s.restart();
    let js = jetstream::new(s.client().await);
    let mut st = js.get_stream("F").await.unwrap();
    let info = st.info().await.unwrap();
    assert_eq!(info.state.last_sequence, ack.sequence);
    assert_eq!(info.state.messages, acked.len() as u64 + 1);
    for &seq in &acked {
        assert_eq!(st.get_raw_message(seq).await.unwrap().payload.len(), 4096);
    }
}
