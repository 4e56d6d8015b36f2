//! What each replica of a stream holds at the end of a campaign: each
//! member of the stream's group is made its leader in turn (a preferred
//! stepdown), then read whole.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer};
use base64::Engine as _;
use futures::StreamExt;

/// One replica's contents: sequence → payload (the publish's id).
pub type Contents = BTreeMap<u64, String>;

/// How a stream is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// Through an ephemeral consumer that takes no acks.
    Consumer,
    /// Message by message (`STREAM.MSG.GET`): a work queue takes no
    /// second unfiltered consumer.
    MsgGet,
}

/// Each member's copy of `stream`, read while it leads. A member that
/// cannot be made leader is left out.
pub async fn read(
    client: &async_nats::Client,
    stream: &str,
    reader: Reader,
) -> (Vec<(String, Contents)>, Vec<String>) {
    let mut out = Vec::new();
    let mut unread = Vec::new();
    let members = members(client, stream).await;
    if members.is_empty() {
        eprintln!("chaos: {stream}: no server answered for it; not read");
        unread.push("no server answered for it".to_string());
    }
    for name in members {
        if !lead_on(client, stream, &name).await {
            eprintln!("chaos: {stream} on {name}: could not make it lead; not read");
            unread.push(format!("{name} could not be made to lead"));
            continue;
        }
        let read = async {
            match reader {
                Reader::Consumer => by_consumer(client, stream).await,
                Reader::MsgGet => by_msg_get(client, stream).await,
            }
        };
        match tokio::time::timeout(Duration::from_secs(300), read).await {
            Ok(contents) => {
                eprintln!("chaos: {stream} on {name}: {} messages", contents.len());
                out.push((name, contents));
            }
            Err(_) => {
                eprintln!("chaos: {stream} on {name}: not read in 300 s");
                unread.push(format!("{name} not read in 300 s"));
            }
        }
    }
    (out, unread)
}

pub async fn info(client: &async_nats::Client, stream: &str) -> Option<serde_json::Value> {
    let subject = format!("$JS.API.STREAM.INFO.{stream}");
    let m = tokio::time::timeout(Duration::from_secs(5), client.request(subject, "".into()))
        .await
        .ok()?
        .ok()?;
    let info: serde_json::Value = serde_json::from_slice(&m.payload).ok()?;
    info.get("error").is_none().then_some(info)
}

/// The servers in the stream's group, asked until one answers.
async fn members(client: &async_nats::Client, stream: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(info) = info(client, stream).await {
            let cluster = &info["cluster"];
            let mut names: Vec<String> = cluster["leader"]
                .as_str()
                .into_iter()
                .map(String::from)
                .collect();
            for replica in cluster["replicas"].as_array().into_iter().flatten() {
                names.extend(replica["name"].as_str().map(String::from));
            }
            names.sort();
            return names;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Vec::new()
}

async fn lead_on(client: &async_nats::Client, stream: &str, name: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Some(info) = info(client, stream).await {
            if info["cluster"]["leader"] == name {
                return true;
            }
        }
        let body = serde_json::json!({"placement": {"preferred": name}}).to_string();
        let subject = format!("$JS.API.STREAM.LEADER.STEPDOWN.{stream}");
        let _ = tokio::time::timeout(Duration::from_secs(5), client.request(subject, body.into()))
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    false
}

/// The stream as its leader serves it, through an ephemeral consumer.
async fn by_consumer(client: &async_nats::Client, stream: &str) -> Contents {
    let mut out = BTreeMap::new();
    let Some(info) = info(client, stream).await else {
        return out;
    };
    let total = info["state"]["messages"].as_u64().unwrap_or(0);
    let js = jetstream::new(client.clone());
    let Ok(Ok(st)) = tokio::time::timeout(Duration::from_secs(10), js.get_stream(stream)).await
    else {
        return out;
    };
    let made = st.create_consumer(consumer::pull::Config {
        ack_policy: consumer::AckPolicy::None,
        inactive_threshold: Duration::from_secs(30),
        ..Default::default()
    });
    let Ok(Ok(reader)) = tokio::time::timeout(Duration::from_secs(10), made).await else {
        return out;
    };
    let mut read = 0u64;
    let mut idle = 0;
    while read < total && idle < 3 {
        let fetch = reader
            .fetch()
            .max_messages(1000)
            .expires(Duration::from_secs(2))
            .messages();
        let Ok(Ok(mut batch)) = tokio::time::timeout(Duration::from_secs(5), fetch).await else {
            idle += 1;
            continue;
        };
        let before = read;
        // A leader that dies mid-fetch never ends the batch: bounded.
        while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(5), batch.next()).await
        {
            read += 1;
            let Ok(meta) = m.info() else { continue };
            let id = String::from_utf8_lossy(&m.payload).into_owned();
            if id != "probe" {
                out.insert(meta.stream_sequence, id);
            }
        }
        idle = if read == before { idle + 1 } else { 0 };
    }
    out
}

/// The stream as its leader serves it, one `MSG.GET` per message
/// (`next_by_subj` skips what was deleted).
async fn by_msg_get(client: &async_nats::Client, stream: &str) -> Contents {
    let mut out = BTreeMap::new();
    let subject = format!("$JS.API.STREAM.MSG.GET.{stream}");
    let mut seq = 1u64;
    let mut failures = 0;
    while failures < 5 {
        let body = serde_json::json!({"seq": seq, "next_by_subj": ">"}).to_string();
        let asked = client.request(subject.clone(), body.into());
        let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(5), asked).await else {
            failures += 1;
            continue;
        };
        let Ok(answer) = serde_json::from_slice::<serde_json::Value>(&m.payload) else {
            failures += 1;
            continue;
        };
        let message = &answer["message"];
        let Some(at) = message["seq"].as_u64() else {
            // 10037: no message at or after `seq`.
            if answer["error"]["err_code"] == 10037 {
                break;
            }
            failures += 1;
            continue;
        };
        let data = message["data"].as_str().unwrap_or("");
        let payload = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap_or_default();
        out.insert(at, String::from_utf8_lossy(&payload).into_owned());
        seq = at + 1;
    }
    out
}
