//! The clients of a campaign, each recording what it saw into the shared
//! [`Histories`]: publishers with message ids that retry until
//! acknowledged, a pull consumer that double-acks, and key-value
//! compare-and-set writers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, kv};
use futures::StreamExt;

use crate::check::Event;
use crate::linear;

/// Everything the workload saw.
#[derive(Debug, Default, Clone)]
pub struct Histories {
    /// Publishes to, and deliveries from, the main stream.
    pub main: Vec<Event>,
    /// Publishes to the work queue.
    pub work: Vec<Event>,
    /// Compare-and-set writes on the bucket.
    pub kv: Vec<linear::Op>,
    /// When each publish to the main stream was acknowledged, since the
    /// campaign began: the service gaps are between them.
    pub acked_at: Vec<Duration>,
}

/// The histories, and when the campaign began.
#[derive(Clone)]
pub struct Recorder {
    histories: Arc<Mutex<Histories>>,
    began: Instant,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            histories: Arc::default(),
            began: Instant::now(),
        }
    }

    fn record(&self, f: impl FnOnce(&mut Histories)) {
        f(&mut self.histories.lock().expect("histories"));
    }

    /// Since the campaign began.
    pub fn elapsed(&self) -> Duration {
        self.began.elapsed()
    }

    fn now(&self) -> u64 {
        self.began.elapsed().as_nanos() as u64
    }

    pub fn take(&self) -> Histories {
        self.histories.lock().expect("histories").clone()
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

/// Which stream a publisher writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Main,
    Work,
}

/// Pauses the workload takes between operations.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Between two publishes to the work queue (the archive's source
    /// copied one message at a time, issue 42).
    pub work: Duration,
    /// Between two deletes.
    pub delete: Duration,
}

impl Pace {
    pub const DEFAULT: Pace = Pace {
        work: Duration::from_millis(100),
        delete: Duration::from_millis(50),
    };
    /// As fast as the answers come (`--unpaced`).
    pub const NONE: Pace = Pace {
        work: Duration::ZERO,
        delete: Duration::ZERO,
    };
}

/// Publishes ids `<prefix><i>` to `subject` one at a time, each retried
/// (same id, so the duplicate window keeps one) until acknowledged or
/// 30 s pass.
pub async fn publisher(
    js: jetstream::Context,
    subject: String,
    prefix: String,
    target: Target,
    pace: Pace,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let id = format!("{prefix}{i}");
        i += 1;
        let event = publish_until_acked(&js, &subject, &id, &stop).await;
        if target == Target::Work && !pace.work.is_zero() {
            tokio::time::sleep(pace.work).await;
        }
        recorder.record(|h| {
            if let (Event::Acked { .. }, Target::Main) = (&event, target) {
                h.acked_at.push(recorder.began.elapsed());
            }
            match target {
                Target::Main => h.main.push(event),
                Target::Work => h.work.push(event),
            }
        });
    }
}

async fn publish_until_acked(
    js: &jetstream::Context,
    subject: &str,
    id: &str,
    stop: &AtomicBool,
) -> Event {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        let sent = js.publish_with_headers(subject.to_string(), headers, id.to_string().into());
        if let Ok(Ok(ack)) = tokio::time::timeout(Duration::from_secs(5), sent).await {
            if let Ok(Ok(ack)) = tokio::time::timeout(Duration::from_secs(5), ack).await {
                return Event::Acked {
                    id: id.to_string(),
                    seq: ack.sequence,
                };
            }
        }
        if Instant::now() > deadline || stop.load(Ordering::Relaxed) {
            return Event::Unacked { id: id.to_string() };
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Pulls from the main stream's consumer `C` and double-acks until told
/// to stop.
pub async fn consumer(js: jetstream::Context, recorder: Recorder, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        if pull_once(&js, &recorder).await.is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// One fetch of up to 20, each double-acked; how many came, if the
/// consumer answered.
pub async fn pull_once(js: &jetstream::Context, recorder: &Recorder) -> Option<usize> {
    let get = async {
        let st = js.get_stream(crate::STREAM).await.ok()?;
        let c: consumer::PullConsumer = st.get_consumer("C").await.ok()?;
        c.fetch()
            .max_messages(20)
            .expires(Duration::from_secs(1))
            .messages()
            .await
            .ok()
    };
    let mut batch = tokio::time::timeout(Duration::from_secs(5), get)
        .await
        .ok()??;
    let mut n = 0;
    while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(3), batch.next()).await {
        let Ok(info) = m.info() else { continue };
        let seq = info.stream_sequence;
        recorder.record(|h| h.main.push(Event::Delivered { seq }));
        n += 1;
        if double_ack(js, &m).await {
            recorder.record(|h| h.main.push(Event::Confirmed { seq }));
        }
    }
    Some(n)
}

/// Acks `m` and waits for the server to confirm it. Not async-nats's
/// `double_ack`: that takes any reply for a confirmation, a 503 "no
/// responders" status too (nobody listened for the ack: it was not
/// taken), which would count an ack that no server holds.
async fn double_ack(js: &jetstream::Context, m: &jetstream::Message) -> bool {
    let Some(reply) = m.reply.clone() else {
        return false;
    };
    let client = js.client();
    let asked = client.request(reply, "+ACK".into());
    match tokio::time::timeout(Duration::from_secs(3), asked).await {
        Ok(Ok(answer)) => answer.status.is_none(),
        _ => false,
    }
}

/// Deletes acknowledged messages of the main stream, one at a time, at
/// random (seeded), and after each confirmed delete reads back one
/// message deleted earlier: a read begun after the delete's confirmation
/// must not find it (`Event::ReadAfterDelete` if it does). A delete
/// whose answer was lost is asked again; "no message found" then
/// confirms it.
pub async fn deleter(
    js: jetstream::Context,
    seed: u64,
    pace: Pace,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0xde1e7e);
    let client = js.client();
    let mut deleted: Vec<u64> = Vec::new();
    let mut gone: std::collections::HashSet<u64> = std::collections::HashSet::new();
    // Unpaced, it still waits a moment while too few are acknowledged.
    let idle = pace.delete.max(Duration::from_millis(5));
    while !stop.load(Ordering::Relaxed) {
        if !pace.delete.is_zero() {
            tokio::time::sleep(pace.delete).await;
        }
        let candidates: Vec<u64> = recorder
            .histories
            .lock()
            .expect("histories")
            .main
            .iter()
            .filter_map(|e| match e {
                Event::Acked { seq, .. } => Some(*seq),
                _ => None,
            })
            .filter(|seq| !gone.contains(seq))
            .collect();
        // About one acknowledged message in four is deleted.
        if candidates.len() < 4 * (deleted.len() + 1) {
            if pace.delete.is_zero() {
                tokio::time::sleep(idle).await;
            }
            continue;
        }
        let seq = candidates[rng.usize(..candidates.len())];
        match delete(&client, seq).await {
            Some(true) => {
                deleted.push(seq);
                gone.insert(seq);
                recorder.record(|h| h.main.push(Event::Deleted { seq }));
            }
            // No answer: the delete may have been applied.
            None => recorder.record(|h| h.main.push(Event::MaybeDeleted { seq })),
            Some(false) => {}
        }
        let earlier = deleted[rng.usize(..deleted.len().max(1))];
        if found(&client, earlier).await == Some(true) {
            recorder.record(|h| h.main.push(Event::ReadAfterDelete { seq: earlier }));
        }
    }
}

/// Deletes the main stream's message at `seq`: whether it is gone now
/// (deleted by this call or an earlier one whose answer was lost), or
/// `None` when no answer came (it may be gone).
async fn delete(client: &async_nats::Client, seq: u64) -> Option<bool> {
    let subject = format!("$JS.API.STREAM.MSG.DELETE.{}", crate::STREAM);
    let body = format!("{{\"seq\":{seq}}}");
    let asked = client.request(subject, body.into());
    let Ok(Ok(answer)) = tokio::time::timeout(Duration::from_secs(5), asked).await else {
        return None;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&answer.payload) else {
        return None;
    };
    // 10057 with "no message found": nothing at that sequence.
    let gone = v["error"]["err_code"] == 10057
        && v["error"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("no message found"));
    // A 503 (no responders, JetStream not available) says nothing.
    if v.get("success").is_none() && v["error"]["code"] == 503 {
        return None;
    }
    Some(v["success"] == true || gone)
}

/// Whether a read of the main stream's `seq` (a direct get, answered by
/// any replica) finds a message; `None` when nothing answered.
async fn found(client: &async_nats::Client, seq: u64) -> Option<bool> {
    let subject = format!("$JS.API.STREAM.MSG.GET.{}", crate::STREAM);
    let body = format!("{{\"seq\":{seq}}}");
    let asked = client.request(subject, body.into());
    let answer = tokio::time::timeout(Duration::from_secs(5), asked)
        .await
        .ok()?
        .ok()?;
    let v: serde_json::Value = serde_json::from_slice(&answer.payload).ok()?;
    match (v.get("message"), v["error"]["err_code"].as_u64()) {
        (Some(_), _) => Some(true),
        (None, Some(10037)) => Some(false),
        _ => None,
    }
}

/// The keys the compare-and-set writers share.
pub const KEYS: [&str; 3] = ["k0", "k1", "k2"];

/// Reads a key, then writes a new value over what it read (or creates
/// it), again and again: writer `n` writes values `w<n>-<i>`, never the
/// same twice. The read may be stale (a direct get a follower answers);
/// the write is judged by the server, and its outcome recorded.
pub async fn kv_writer(
    bucket: kv::Store,
    n: usize,
    seed: u64,
    recorder: Recorder,
    stop: Arc<AtomicBool>,
) {
    let mut rng = fastrand::Rng::with_seed(seed ^ n as u64);
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = KEYS[rng.usize(..KEYS.len())];
        let read = tokio::time::timeout(Duration::from_secs(3), bucket.entry(key)).await;
        let (from, revision) = match read {
            Ok(Ok(Some(entry))) => (
                Some(String::from_utf8_lossy(&entry.value).into_owned()),
                entry.revision,
            ),
            Ok(Ok(None)) => (None, 0),
            _ => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let to = format!("w{n}-{i}");
        i += 1;
        let call = recorder.now();
        // Revision 0: the key must not exist (a create that never reads
        // back, unlike `Store::create`).
        let written = bucket.update(key, to.clone().into(), revision);
        let outcome = match tokio::time::timeout(Duration::from_secs(5), written).await {
            Ok(Ok(_)) => linear::Outcome::Written,
            Ok(Err(e)) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => {
                linear::Outcome::Refused
            }
            _ => linear::Outcome::Unknown,
        };
        let ret = (outcome != linear::Outcome::Unknown).then(|| recorder.now());
        recorder.record(|h| {
            h.kv.push(linear::Op {
                key: key.to_string(),
                from,
                to,
                call,
                ret,
                outcome,
            })
        });
        if outcome == linear::Outcome::Unknown {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
