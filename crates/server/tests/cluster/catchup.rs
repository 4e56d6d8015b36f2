//! Replicas that come back behind their stream, or with a damaged or
//! unwritable store, on three real servers: their Raft log no longer
//! holds what they missed (the leader compacted it behind a state
//! snapshot), so they fetch the messages from the leader's store, and
//! then hold exactly what the others hold. Also what deleted streams
//! leave behind.

#[path = "../common/mod.rs"]
mod common;

use common::replicated::{
    api_ready, cluster3, cluster_tagged, connect, contents, created, lead_on, leader_of,
};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use serde_json::json;

fn name_of(s: &common::Server) -> String {
    s.json("/varz")["server_name"].as_str().unwrap().to_string()
}

fn index_of(all: &[common::Server], name: &str) -> usize {
    all.iter().position(|s| name_of(s) == name).unwrap()
}

/// Publishes `n` messages of about 200 bytes to `subject`, 256 in
/// flight; returns seq → payload (base64, as `contents` gives it).
async fn publish(
    c: &async_nats::Client,
    subject: &str,
    from: usize,
    n: usize,
) -> BTreeMap<u64, String> {
    publish_sized(c, subject, from, n, 200).await
}

/// [`publish`] with payloads of about `size` bytes.
async fn publish_sized(
    c: &async_nats::Client,
    subject: &str,
    from: usize,
    n: usize,
    size: usize,
) -> BTreeMap<u64, String> {
    let js = jetstream::new(c.clone());
    let acks = futures::stream::iter(from..from + n)
        .map(|i| {
            let js = js.clone();
            let subject = subject.to_string();
            async move {
                let payload = format!("message {i:08} {}", "x".repeat(size - 20));
                let ack = js
                    .publish(subject, payload.clone().into())
                    .await
                    .unwrap()
                    .await
                    .unwrap();
                (ack.sequence, common::b64(payload.as_bytes()))
            }
        })
        .buffer_unordered(256)
        .collect::<Vec<_>>()
        .await;
    acks.into_iter().collect()
}

async fn delete(c: &async_nats::Client, stream: &str, seq: u64) {
    let r = common::api(
        c,
        &format!("$JS.API.STREAM.MSG.DELETE.{stream}"),
        &json!({"seq": seq}).to_string(),
    )
    .await;
    assert_eq!(r["success"], true, "{r}");
}

/// Three servers that keep their ports across restarts, a client on
/// each, and an R3 stream `name` on subjects `<name lowercase>.>`.
async fn cluster_with_stream(name: &str) -> (Vec<common::Server>, Vec<async_nats::Client>) {
    let mut all = cluster3();
    for s in &mut all {
        s.keep_port();
    }
    let clients = connect(&all).await;
    let subjects = format!("{}.>", name.to_lowercase());
    let cfg = json!({"name": name, "subjects": [subjects], "num_replicas": 3});
    created(&clients[0], cfg).await;
    (all, clients)
}

/// The server logs that its replica fetched what it lacked.
fn caught_up(s: &common::Server) {
    assert!(
        s.wait_log("caught up to index", Duration::from_secs(60)),
        "{}",
        s.log_text()
    );
}

/// Once `s` leads the stream, it serves exactly `want` (seq → payload).
async fn serves_exactly(s: &common::Server, stream: &str, want: &BTreeMap<u64, String>) {
    let c = s.client().await;
    api_ready(std::slice::from_ref(&c)).await;
    lead_on(&c, stream, &name_of(s)).await;
    let got = contents(&c, stream).await;
    assert_eq!(got.len(), want.len());
    assert!(&got == want, "{} differs from what was acked", name_of(s));
}

/// The segment files of a server's replica stores.
fn replica_segments(store_dir: &Path) -> Vec<PathBuf> {
    let root = store_dir.join("jetstream").join("$G").join("replicas");
    let mut out = Vec::new();
    for group in std::fs::read_dir(&root).unwrap() {
        for f in std::fs::read_dir(group.unwrap().path()).unwrap() {
            out.push(f.unwrap().path());
        }
    }
    out.sort();
    out
}

/// A follower down while the stream took more entries than its leader's
/// log keeps comes back by fetching from the leader's store (deletions
/// on either side of its absence included), while publishing goes on;
/// once it leads, it serves exactly what was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_behind_the_log_catches_up_from_the_store() {
    let (mut all, clients) = cluster_with_stream("CU").await;
    let mut want = publish(&clients[0], "cu.a", 0, 500).await;
    delete(&clients[0], "CU", 5).await;
    want.remove(&5);

    let leader = leader_of(&clients[0], "CU").await;
    let li = index_of(&all, &leader);
    let fi = (li + 1) % 3;
    let other = 3 - li - fi;
    all[fi].kill9();
    // More entries than the leader's log keeps after a snapshot.
    want.extend(publish(&clients[other], "cu.b", 500, 12_000).await);
    for seq in [10, 600, 9_000] {
        delete(&clients[other], "CU", seq).await;
        want.remove(&seq);
    }

    all[fi].restart();
    // Publishing goes on while it catches up.
    let c = clients[other].clone();
    let during = tokio::spawn(async move { publish(&c, "cu.c", 20_000, 2_000).await });
    assert!(
        all[fi].wait_log("fetching its messages", Duration::from_secs(30)),
        "{}",
        all[fi].log_text()
    );
    caught_up(&all[fi]);
    want.extend(during.await.unwrap());

    serves_exactly(&all[fi], "CU", &want).await;
}

/// A replica whose message file was damaged while it was down does not
/// serve the damage: it fetches what it lost from the leader, and then
/// serves every acknowledged message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_replica_store_is_repaired_from_the_leader() {
    let (mut all, clients) = cluster_with_stream("DMG").await;
    // Enough entries that every replica snapshots (and marks its store).
    let want = publish(&clients[0], "dmg.a", 0, 10_000).await;
    let leader = leader_of(&clients[0], "DMG").await;
    let li = index_of(&all, &leader);
    let fi = (li + 1) % 3;
    tokio::time::sleep(Duration::from_secs(1)).await;
    all[fi].kill9();
    let segments = replica_segments(&all[fi].store_dir());
    let first = segments.first().expect("a segment file");
    let mut data = std::fs::read(first).unwrap();
    assert!(
        data.len() > 10_000,
        "{}: {} bytes",
        first.display(),
        data.len()
    );
    for at in [4_000, 4_001, 7_000] {
        data[at] ^= 0x5a;
    }
    std::fs::write(first, &data).unwrap();

    all[fi].restart();
    caught_up(&all[fi]);
    serves_exactly(&all[fi], "DMG", &want).await;
}

/// A replica whose store has a damaged tombstone (one of its two
/// copies, before the replica's last snapshot, so that its Raft log no
/// longer replays the delete) does not serve the deleted message again:
/// once it leads, it serves exactly what was acknowledged and not
/// deleted. (Two guards hold here: the other copy, and the replica's
/// check of its store against its snapshot's summary, which fetches from
/// the leader on any difference; with one copy the second still holds.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_tombstone_in_a_replica_store_brings_nothing_back() {
    let (mut all, clients) = cluster_with_stream("TMB").await;
    let mut want = publish(&clients[0], "tmb.a", 0, 100).await;
    for seq in [5, 50] {
        delete(&clients[0], "TMB", seq).await;
        want.remove(&seq);
    }
    // Enough entries after the deletes that every replica snapshots.
    want.extend(publish(&clients[0], "tmb.b", 100, 10_000).await);
    let leader = leader_of(&clients[0], "TMB").await;
    let fi = (index_of(&all, &leader) + 1) % 3;
    tokio::time::sleep(Duration::from_secs(1)).await;
    all[fi].kill9();
    let mut damaged = 0;
    for seg in replica_segments(&all[fi].store_dir()) {
        let data = std::fs::read(&seg).unwrap();
        let first_copy = tombstones(&data, 50).into_iter().next();
        if let Some(at) = first_copy {
            // Inside its sequence number: the record fails its checksum.
            flip_in_place(&seg, &[at as u64 + 12]);
            damaged += 1;
        }
    }
    assert_eq!(
        damaged, 1,
        "message 50's tombstone is on disk once, twice over"
    );

    all[fi].restart();
    serves_exactly(&all[fi], "TMB", &want).await;
}

/// Where the tombstones (record kind 2) of `seq` are in a store file:
/// the offset of each copy.
fn tombstones(bytes: &[u8], seq: u64) -> Vec<usize> {
    common::store_records(bytes)
        .into_iter()
        .filter(|&(_, kind, s)| kind == 2 && s == seq)
        .map(|(at, _, _)| at)
        .collect()
}

/// Flips bytes of a file in place (the server keeps it open: the file is
/// neither truncated nor replaced).
fn flip_in_place(path: &Path, offsets: &[u64]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    for &at in offsets {
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
    }
    f.sync_all().unwrap();
}

/// A running follower whose message file is damaged under it finds the
/// damage when it next reads a damaged record (here, applying a
/// consumer's pulls), and repairs it from the leader at once, without a
/// restart: it then serves exactly what was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_found_by_a_read_is_repaired_from_the_leader_while_running() {
    repaired_while_running("RUN", 10_000, 200, Repair::Fetched).await;
}

/// The same with a stream whose Raft log was never compacted (fewer
/// entries than a compaction waits for), but whose first segment filled
/// and went to disk: the log starts after the group's bootstrap snapshot
/// (its membership, no data), and the repair applies all of it again over
/// an empty store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damage_in_a_stream_never_compacted_is_repaired_while_running() {
    repaired_while_running("NEW", 40, 256 << 10, Repair::Replayed).await;
}

/// How a replica repairs: by fetching from the leader what its log's
/// snapshot holds, or, with no snapshot yet, by applying its whole log
/// again over an empty store.
#[derive(PartialEq)]
enum Repair {
    Fetched,
    Replayed,
}

/// Publishes `count` messages of `size` bytes to stream `name`, flips
/// three bytes of a follower's first segment under it, reads the stream
/// through the leader, and checks that the follower repaired its store
/// the `how` way and serves exactly what was acknowledged.
async fn repaired_while_running(name: &str, count: usize, size: usize, how: Repair) {
    let (all, clients) = cluster_with_stream(name).await;
    let subject = format!("{}.a", name.to_lowercase());
    let want = publish_sized(&clients[0], &subject, 0, count, size).await;
    let leader = leader_of(&clients[0], name).await;
    let li = index_of(&all, &leader);
    let fi = (li + 1) % 3;
    // The follower applies what the leader acknowledged a little later.
    let first_segment = || replica_segments(&all[fi].store_dir()).into_iter().next();
    let written = |p: &PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    common::wait_for("the follower's records", Duration::from_secs(30), || {
        first_segment().is_some_and(|p| written(&p) > 7_000)
    });
    flip_in_place(
        &first_segment().expect("a segment file"),
        &[4_000, 4_001, 7_000],
    );

    // Read from the leader: the follower applies the same pulls, and
    // reads the damaged records doing so.
    let c = all[li].client().await;
    assert!(
        contents(&c, name).await == want,
        "the leader serves what was acked"
    );
    assert!(
        all[fi].wait_log("a read found its store damaged", Duration::from_secs(30)),
        "{}",
        all[fi].log_text()
    );
    assert!(
        all[fi].wait_log("its damaged store is repaired", Duration::from_secs(60)),
        "{}",
        all[fi].log_text()
    );
    let fetched = all[fi].log_text().contains("caught up to index");
    assert_eq!(fetched, how == Repair::Fetched, "{}", all[fi].log_text());
    let damage = &all[fi].json("/jsz")["store_damage"];
    assert_eq!(*damage, json!({"found": 1, "repaired": 1}));
    let elsewhere = &all[li].json("/jsz")["store_damage"];
    assert_eq!(*elsewhere, json!({"found": 0, "repaired": 0}));
    serves_exactly(&all[fi], name, &want).await;
    assert!(
        !all[fi].log_text().contains("this replica stops"),
        "{}",
        all[fi].log_text()
    );
}

/// What a deleted stream left behind on a server (its replica store
/// directory, its Raft log: a crash between the steps of a removal
/// leaves them) is cleaned up once the server is back, as nats-server
/// cleans up orphaned streams; a directory of a group the meta state has
/// never handed out, and a live stream's, are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_deleted_stream_left_behind_is_cleaned_up_at_restart() {
    let mut all = cluster_tagged(&[&["a"], &["b"], &["c"]]);
    all[2].keep_port();
    let clients = connect(&all).await;
    created(
        &clients[0],
        json!({"name": "KEEP", "subjects": ["keep.>"], "num_replicas": 3}),
    )
    .await;
    let keep = publish(&clients[0], "keep.a", 0, 100).await;
    // One replica, on the first server: the third never runs it.
    created(
        &clients[0],
        json!({"name": "GONE", "subjects": ["gone.>"], "num_replicas": 1,
               "placement": {"tags": ["a"]}}),
    )
    .await;
    let line = all[0]
        .log_text()
        .lines()
        .find_map(|l| {
            l.split_once("'$G > GONE' on raft group ")
                .map(|(_, g)| g.to_string())
        })
        .expect("GONE's group logged");
    let group: u64 = line.split_whitespace().next().unwrap().parse().unwrap();
    let r = common::api(&clients[0], "$JS.API.STREAM.DELETE.GONE", "").await;
    assert_eq!(r["success"], true, "{r}");

    // As if the third server had hosted it and crashed halfway through
    // removing it.
    all[2].kill9();
    let root = all[2]
        .store_dir()
        .join("jetstream")
        .join("$G")
        .join("replicas");
    let dir = root.join(format!("{group:016x}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("00000001.seg"), b"a segment left behind").unwrap();
    let log = all[2]
        .store_dir()
        .join("raft")
        .join(format!("raft-{group:016x}.log"));
    std::fs::write(&log, b"a log left behind").unwrap();
    let never = root.join(format!("{:016x}", u64::MAX - 7));
    std::fs::create_dir_all(&never).unwrap();
    all[2].restart();

    assert!(
        all[2].wait_log("found an orphaned replica store", Duration::from_secs(30)),
        "{}",
        all[2].log_text()
    );
    assert!(all[2]
        .log_text()
        .contains("found the raft log of deleted raft group"));
    assert!(!dir.exists());
    assert!(!log.exists());
    assert!(never.exists(), "a group never handed out stays");
    serves_exactly(&all[2], "KEEP", &keep).await;
}

/// A stream deleted while one of its servers is down: once that server
/// is back and its meta state has caught up with the delete, its replica
/// store and Raft log of the stream are removed, and logged. While it
/// has no meta leader (back alone, the others down), it cannot know
/// whether the stream is still assigned to it, and removes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_while_a_server_was_down_is_swept_once_it_knows() {
    let (mut all, clients) = cluster_with_stream("DOWN").await;
    let keep = json!({"name": "KEPT", "subjects": ["kept.>"], "num_replicas": 3});
    created(&clients[0], keep).await;
    publish(&clients[0], "down.a", 0, 50).await;
    let kept = publish(&clients[0], "kept.a", 0, 50).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    all[2].kill9();
    let root = all[2]
        .store_dir()
        .join("jetstream")
        .join("$G")
        .join("replicas");
    let dirs = |root: &Path| -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        v.sort();
        v
    };
    let before = dirs(&root);
    assert_eq!(before.len(), 2, "{before:?}");
    // Asked again while a new meta leader is elected (the server just
    // killed may have led the meta group).
    let mut deleted = false;
    for _ in 0..20 {
        let asked = clients[0].request("$JS.API.STREAM.DELETE.DOWN", "".into());
        if let Ok(Ok(m)) = tokio::time::timeout(Duration::from_secs(3), asked).await {
            let r: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
            // 10059, stream not found: an earlier ask whose answer was
            // lost deleted it.
            if r["success"] == true || r["error"]["err_code"] == 10059 {
                deleted = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(deleted, "DOWN deleted");

    // Back alone: no meta leader, nothing removed.
    all[0].kill9();
    all[1].kill9();
    all[2].restart();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(dirs(&root), before);
    assert!(!all[2].log_text().contains("orphaned replica store"));

    all[0].restart();
    all[1].restart();
    common::wait_for("DOWN's store removed", Duration::from_secs(30), || {
        dirs(&root).len() == 1
    });
    let after = dirs(&root);
    let gone = before.iter().find(|d| !after.contains(d)).unwrap();
    let group = gone.file_name().unwrap().to_str().unwrap();
    let log = all[2]
        .store_dir()
        .join("raft")
        .join(format!("raft-{group}.log"));
    common::wait_for("DOWN's Raft log removed", Duration::from_secs(30), || {
        !log.exists()
    });
    serves_exactly(&all[2], "KEPT", &kept).await;
}

/// A replica whose store cannot write (its disk is full) answers nobody
/// rather than go on with memory ahead of its store; the stream goes on
/// with the other two. Once there is room again it repairs itself while
/// running (its store opened again over its log), and then it serves
/// exactly what was acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_whose_store_cannot_write_is_repaired_once_there_is_room() {
    let all = cluster3();
    let root = all[2]
        .store_dir()
        .join("jetstream")
        .join("$G")
        .join("replicas");
    let Some(disk) = common::tmpfs::Tmpfs::mount_at(root, "256K") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let clients = connect(&all).await;
    created(
        &clients[0],
        json!({"name": "FULL", "subjects": ["full.>"], "num_replicas": 3}),
    )
    .await;
    // Led elsewhere: the full replica is a follower.
    lead_on(&clients[0], "FULL", &name_of(&all[0])).await;
    let mut want = BTreeMap::new();
    let mut batch = 0;
    while !all[2].log_text().contains("a write failed") {
        assert!(
            batch < 40,
            "a 256 KiB store never filled:\n{}",
            all[2].log_text()
        );
        want.extend(publish(&clients[0], "full.a", batch * 100, 100).await);
        batch += 1;
    }
    // The stream goes on with two replicas.
    want.extend(publish(&clients[1], "full.b", 10_000, 500).await);
    assert!(!all[2].log_text().contains("this replica stops"));

    disk.resize("256M");
    // The repair is tried again after the replica's next command.
    want.extend(publish(&clients[0], "full.c", 20_000, 10).await);
    assert!(
        all[2].wait_log("its damaged store is repaired", Duration::from_secs(60)),
        "{}",
        all[2].log_text()
    );
    serves_exactly(&all[2], "FULL", &want).await;
}

/// The log index in the first line of `s`'s log that has `before` in
/// it (the last, with `last`), read just after `before`.
fn logged_index(s: &common::Server, before: &str, last: bool) -> u64 {
    let text = s.log_text();
    let mut lines = text.lines().filter(|l| l.contains(before));
    let line = match last {
        true => lines.next_back(),
        false => lines.next(),
    };
    let (_, rest) = line.expect(before).split_once(before).unwrap();
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().unwrap()
}

/// A replica that must fetch as of an index its leader no longer keeps
/// (it was down while the leader snapshotted twice and let go of older
/// marks, and its own store is damaged) moves to a later state: the
/// leader retargets the fetch to its own, or (usually, here) the Raft
/// log sends a newer snapshot first and what was fetched stays. Either
/// way it catches up to the later index and serves exactly what was
/// acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_the_leader_no_longer_serves_moves_to_a_later_state() {
    let (mut all, clients) = cluster_with_stream("RT").await;
    let mut want = publish(&clients[0], "rt.a", 0, 10_000).await;
    let leader = leader_of(&clients[0], "RT").await;
    let li = index_of(&all, &leader);
    let fi = (li + 1) % 3;
    tokio::time::sleep(Duration::from_secs(1)).await;
    all[fi].kill9();
    let first = replica_segments(&all[fi].store_dir())[0].clone();
    flip_in_place(&first, &[4_000, 4_001]);
    // Two more snapshots' worth: the leader keeps nothing as of the
    // follower's snapshot.
    want.extend(publish(&clients[li], "rt.b", 10_000, 25_000).await);

    all[fi].restart();
    caught_up(&all[fi]);
    let asked = logged_index(&all[fi], "fetching its messages up to index ", false);
    let got = logged_index(&all[fi], "caught up to index ", true);
    assert!(got > asked, "from {asked} to {got}");
    serves_exactly(&all[fi], "RT", &want).await;

    // Its log's snapshot moved to the state it fetched, durably: a
    // restart opens there and fetches nothing (campaign seed 4902: a
    // snapshot compacted only in memory sent every restart back to the
    // old one, which the store no longer held, and when all three did
    // at once none could serve).
    let c = all[fi].client().await;
    want.extend(publish(&c, "rt.c", 25_000, 25_100).await);
    let fetches = |s: &common::Server| s.log_text().matches("fetching its messages").count();
    let before = fetches(&all[fi]);
    all[fi].kill9();
    all[fi].restart();
    serves_exactly(&all[fi], "RT", &want).await;
    assert_eq!(fetches(&all[fi]), before, "{}", all[fi].log_text());
}
