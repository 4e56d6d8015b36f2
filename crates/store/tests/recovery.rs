//! File-store recovery under injected faults: lost unsynced writes, torn
//! writes, bit flips, missing segments, a full disk, and reclaimed
//! segments. Each test says what is recovered and what is reported lost.

use std::sync::Arc;

mod common;

use flotilla_store::{
    FileStore, FileStoreConfig, Filter, MemDir, MemStore, MsgStore, Purge, StoredMsg,
};

fn cfg() -> FileStoreConfig {
    FileStoreConfig { segment_size: 600 }
}

fn open(dir: &MemDir) -> FileStore {
    FileStore::open(Arc::new(dir.clone()), cfg()).expect("open")
}

fn sync(s: &mut FileStore) {
    if let Some(h) = s.sync_handle() {
        h.sync().expect("sync");
    }
}

fn put(s: &mut dyn MsgStore, n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| {
            s.store(
                &format!("sub.{}", i % 4),
                None,
                format!("payload-{i:04}").as_bytes(),
                1000 + i as i64,
            )
            .unwrap()
        })
        .collect()
}

fn contents(s: &dyn MsgStore) -> Vec<StoredMsg> {
    let mut out = Vec::new();
    let mut seq = 0;
    while let Some(m) = s.next_matching(seq, &Filter::all()).unwrap() {
        assert!(m.seq >= seq, "next_matching({seq}) went back to {}", m.seq);
        seq = m.seq + 1;
        out.push(m);
    }
    out
}

#[test]
fn reopen_restores_everything_synced() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 100);
    s.remove(3, false).unwrap();
    s.remove(50, true).unwrap();
    s.purge(&Purge {
        filter: Some("sub.1".into()),
        keep: Some(5),
        ..Default::default()
    })
    .unwrap();
    sync(&mut s);
    let before = (s.state(), contents(&s), s.deleted());
    assert!(dir.names().len() > 3, "several segments: {:?}", dir.names());
    drop(s);
    let s = open(&dir);
    assert_eq!((s.state(), contents(&s), s.deleted()), before);
    assert!(s.state().lost.is_empty());
}

#[test]
fn unsynced_writes_are_gone_after_a_crash_and_nothing_is_reported_lost() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 30);
    sync(&mut s);
    let synced = contents(&s);
    put(&mut s, 30);
    s.remove(5, false).unwrap();
    drop(s);
    dir.crash(0);
    let s = open(&dir);
    assert_eq!(contents(&s), synced, "exactly what was synced");
    assert!(s.state().lost.is_empty());
    assert_eq!(s.state().last_seq, 30);
}

#[test]
fn torn_last_write_is_truncated_and_writing_resumes() {
    for torn in [1usize, 7, 8, 25, 40, 41] {
        let dir = MemDir::new();
        let mut s = open(&dir);
        put(&mut s, 10);
        sync(&mut s);
        let synced = contents(&s);
        put(&mut s, 3);
        drop(s);
        dir.crash(torn);
        let mut s = open(&dir);
        let got = contents(&s);
        assert!(
            got.len() >= synced.len() && got[..synced.len()] == synced[..],
            "torn {torn}"
        );
        assert!(
            s.state().lost.is_empty(),
            "torn {torn}: a torn tail is not loss"
        );
        let next = s.store("after", None, b"x", 1).unwrap();
        sync(&mut s);
        drop(s);
        let s = open(&dir);
        assert_eq!(
            s.get(next).unwrap().unwrap().subject,
            "after",
            "torn {torn}"
        );
        assert!(s.state().lost.is_empty());
    }
}

#[test]
fn bit_flip_in_the_middle_is_reported_lost_and_the_rest_served() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 60);
    sync(&mut s);
    let all = contents(&s);
    drop(s);
    // Damage a record inside the first segment, past its start marker.
    let first = &dir.names()[0];
    dir.flip_bit(first, 80, 3);
    let mut s = open(&dir);
    let st = s.state();
    assert_eq!(st.lost.len(), 1, "one message lost: {:?}", st.lost);
    assert!(st.lost_bytes > 0);
    let lost = st.lost[0];
    let got = contents(&s);
    let want: Vec<StoredMsg> = all.into_iter().filter(|m| m.seq != lost).collect();
    assert_eq!(got, want, "everything else is served");
    // The stream keeps going.
    let seq = s.store("new", None, b"n", 1).unwrap();
    assert_eq!(seq, 61);
}

/// Damage under an open store: the read that meets it fails, as
/// corruption, and the store remembers it for its owner; nothing else
/// changes until it is opened again.
#[test]
fn a_read_that_meets_damage_fails_and_is_remembered() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 60);
    sync(&mut s);
    assert_eq!(s.damage(), None);
    let first = &dir.names()[0];
    dir.flip_bit(first, 80, 3);
    let failed: Vec<u64> = (1..=60).filter(|&seq| s.get(seq).is_err()).collect();
    assert_eq!(failed.len(), 1, "one record damaged: {failed:?}");
    assert!(
        matches!(
            s.get(failed[0]),
            Err(flotilla_store::StoreError::Corrupt(_))
        ),
        "reported as corruption"
    );
    let why = s.damage().expect("the damage is remembered");
    assert!(why.contains(&format!("sequence {}", failed[0])), "{why}");
    assert_eq!(s.state().msgs, 60, "counted as before until reopened");
    drop(s);
    assert_eq!(open(&dir).state().lost, failed);
}

#[test]
fn missing_segment_reports_its_messages_lost() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 60);
    sync(&mut s);
    drop(s);
    let names = dir.names();
    assert!(names.len() >= 3);
    dir.lose(&names[1]);
    let s = open(&dir);
    let st = s.state();
    assert!(!st.lost.is_empty());
    let got: Vec<u64> = contents(&s).iter().map(|m| m.seq).collect();
    for seq in &st.lost {
        assert!(!got.contains(seq));
    }
    assert_eq!(
        got.len() as u64 + st.lost.len() as u64,
        60,
        "every sequence is served or reported"
    );
}

#[test]
fn full_disk_fails_the_batch_and_loses_nothing_stored() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 10);
    sync(&mut s);
    let synced = contents(&s);
    dir.set_space(Some(50));
    // Writing fails somewhere: when a buffer is written, or at the sync.
    let mut failed = false;
    for i in 0..20 {
        failed |= s
            .store("full", None, format!("{i:040}").as_bytes(), 5)
            .is_err();
    }
    if let Some(h) = s.sync_handle() {
        failed |= h.sync().is_err();
    }
    assert!(failed, "no space: the batch fails");
    drop(s);
    // What was stored before is intact; the failed batch is not there.
    let s = open(&dir);
    assert_eq!(contents(&s), synced);
    assert!(s.state().lost.is_empty());
    drop(s);
    dir.set_space(None);
    let mut s = open(&dir);
    let seq = s.store("again", None, b"ok", 1).unwrap();
    sync(&mut s);
    drop(s);
    let s = open(&dir);
    assert_eq!(s.get(seq).unwrap().unwrap().payload, &b"ok"[..]);
}

#[test]
fn emptied_segments_are_removed_without_resurrecting_anything() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 80);
    sync(&mut s);
    let segments_before = dir.names().len();
    // Empty the front segments and one in the middle.
    for seq in 1..=30 {
        s.remove(seq, false).unwrap();
    }
    for seq in 45..=55 {
        s.remove(seq, false).unwrap();
    }
    sync(&mut s);
    let names = dir.names();
    assert!(
        !names.contains(&"00000001.blk".to_string()),
        "front segment removed: {names:?}"
    );
    assert!(segments_before > 3);
    let expect = contents(&s);
    drop(s);
    let s = open(&dir);
    assert_eq!(contents(&s), expect, "nothing deleted comes back");
    assert!(
        s.state().lost.is_empty(),
        "removed ranges are not loss: {:?}",
        s.state().lost
    );
}

#[test]
fn tombstones_survive_the_removal_of_the_segment_that_held_them() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    let first = put(&mut s, 20);
    // Roll a few segments, deleting an old message from each newer one.
    let mut doomed_old = Vec::new();
    for round in 0..4 {
        let victim = first[round * 2];
        s.remove(victim, false).unwrap();
        doomed_old.push(victim);
        put(&mut s, 15);
    }
    // Now delete everything in the middle that is newer than the first
    // batch, so segments holding those tombstones become empty.
    let last = s.state().last_seq;
    for seq in 21..=last - 5 {
        s.remove(seq, false).unwrap();
    }
    sync(&mut s);
    drop(s);
    let s = open(&dir);
    for seq in doomed_old {
        assert!(s.get(seq).unwrap().is_none(), "seq {seq} came back");
    }
    assert!(s.state().lost.is_empty(), "{:?}", s.state().lost);
}

/// Random operations against the memory store as a model, with syncs,
/// restarts and crashes (with torn writes). After each restart, nothing
/// synced is missing unless deleted since, nothing deleted by the time of
/// the sync comes back, and nothing is reported lost.
#[test]
fn random_operations_match_the_model_through_crashes() {
    let rounds: u64 = std::env::var("STORE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let only: Option<u64> = std::env::var("STORE_ONLY")
        .ok()
        .and_then(|v| v.parse().ok());
    let trace = only.is_some();
    for round in 0..rounds {
        if only.is_some_and(|o| o != round) {
            continue;
        }
        // Each round has its own seed, so a failure can be rerun alone
        // with STORE_ONLY=<round>, which also prints the operations.
        let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (round + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        if std::env::var("STORE_PROGRESS").is_ok() {
            eprintln!("round {round}");
        }
        let dir = MemDir::new();
        let mut fs = open(&dir);
        let mut model = MemStore::new();
        let mut synced: Vec<StoredMsg> = Vec::new();
        let mut synced_last = 0u64;
        let mut removed_since_sync: Vec<u64> = Vec::new();
        for step in 0..300 {
            match next(100) {
                0..=59 => {
                    let subj = format!("k.{}", next(6));
                    let payload = vec![b'a' + (step % 26) as u8; next(80) as usize];
                    let a = fs.store(&subj, None, &payload, step).unwrap();
                    if trace {
                        eprintln!("{step}: store {a} {subj} -> {:?}", fs.debug_segments());
                    }
                    let b = model.store(&subj, None, &payload, step).unwrap();
                    assert_eq!(a, b);
                }
                60..=74 => {
                    let st = model.state();
                    if st.msgs > 0 {
                        let seq = st.first_seq + next(st.last_seq - st.first_seq + 1);
                        let erase = next(2) == 0;
                        assert_eq!(
                            fs.remove(seq, erase).unwrap(),
                            model.remove(seq, erase).unwrap()
                        );
                        if trace {
                            eprintln!(
                                "{step}: remove {seq} erase {erase} -> {:?}",
                                fs.debug_segments()
                            );
                        }
                        removed_since_sync.push(seq);
                    }
                }
                75..=79 => {
                    let p = Purge {
                        filter: (next(2) == 0).then(|| format!("k.{}", next(6))),
                        keep: (next(3) == 0).then(|| next(3)),
                        seq: None,
                    };
                    let before: Vec<u64> = contents(&model).iter().map(|m| m.seq).collect();
                    assert_eq!(fs.purge(&p).unwrap(), model.purge(&p).unwrap());
                    if trace {
                        eprintln!("{step}: purge {p:?} -> {:?}", fs.debug_segments());
                    }
                    let after: Vec<u64> = contents(&model).iter().map(|m| m.seq).collect();
                    removed_since_sync.extend(before.into_iter().filter(|s| !after.contains(s)));
                }
                80..=89 => {
                    sync(&mut fs);
                    if trace {
                        eprintln!(
                            "{step}: sync at {} -> {:?} files {:?}",
                            model.state().last_seq,
                            fs.debug_segments(),
                            dir.names()
                        );
                    }
                    synced = contents(&model);
                    synced_last = model.state().last_seq;
                    removed_since_sync.clear();
                }
                n => {
                    drop(fs);
                    if n >= 95 {
                        let torn = next(50) as usize;
                        if trace {
                            eprintln!("{step}: crash torn {torn}");
                        }
                        dir.crash(torn);
                    } else if trace {
                        eprintln!("{step}: restart");
                    }
                    fs = open(&dir);
                    let got = contents(&fs);
                    for m in got.iter().filter(|m| m.seq <= synced_last) {
                        assert!(
                            synced.contains(m),
                            "round {round} step {step}: seq {} resurrected",
                            m.seq
                        );
                    }
                    for m in synced
                        .iter()
                        .filter(|m| !removed_since_sync.contains(&m.seq))
                    {
                        assert_eq!(
                            fs.get(m.seq).unwrap().as_ref(),
                            Some(m),
                            "round {round} step {step}: synced seq lost"
                        );
                    }
                    assert!(
                        fs.state().lost.is_empty(),
                        "round {round} step {step}: {:?}",
                        fs.state().lost
                    );
                    model = rebuild(&fs);
                }
            }
            assert_eq!(contents(&fs), contents(&model), "round {round} step {step}");
            assert_eq!(
                fs.state().last_seq,
                model.state().last_seq,
                "round {round} step {step}"
            );
            assert_eq!(
                fs.deleted_ranges(),
                model.deleted_ranges(),
                "round {round} step {step}"
            );
            assert_same_answers(&fs, &model, &format!("round {round} step {step}"));
            // Only a few sealed segments keep their slots in memory.
            assert!(fs.debug_resident() <= 5, "round {round} step {step}");
            for (name, store) in [("file", &fs as &dyn MsgStore), ("memory", &model)] {
                assert_eq!(
                    store.deleted_ranges(),
                    ranges(&store.deleted()),
                    "{name}: round {round} step {step}"
                );
            }
        }
    }
}

/// The lookups that read the index, asked of both stores.
fn assert_same_answers(fs: &FileStore, model: &MemStore, at: &str) {
    let st = model.state();
    let (fst, mst) = (fs.state(), st.clone());
    // An empty store's first sequence is not compared: the two differ.
    let first = |s: &flotilla_store::StoreState| (s.msgs > 0).then_some((s.first_seq, s.first_ts));
    assert_eq!(
        (fst.msgs, first(&fst), fst.num_deleted),
        (mst.msgs, first(&mst), mst.num_deleted),
        "{at}"
    );
    let probes = [
        0,
        st.first_seq,
        (st.first_seq + st.last_seq) / 2,
        st.last_seq,
    ];
    for start in probes {
        let all = Filter::all();
        assert_eq!(
            fs.num_pending(start, &all, false),
            model.num_pending(start, &all, false),
            "{at}: pending from {start}"
        );
        let one = Filter::new(["k.1".to_string()]);
        assert_eq!(
            fs.next_matching(start, &one).unwrap(),
            model.next_matching(start, &one).unwrap(),
            "{at}: next k.1 from {start}"
        );
        assert_eq!(
            fs.num_pending(start, &one, false),
            model.num_pending(start, &one, false),
            "{at}: pending k.1 from {start}"
        );
        let ts = start as i64 / 2;
        assert_eq!(
            fs.seq_for_time(ts),
            model.seq_for_time(ts),
            "{at}: time {ts}"
        );
        assert_eq!(
            fs.expired(ts, 10),
            model.expired(ts, 10),
            "{at}: expired at {ts}"
        );
    }
    for subject in ["k.0", "k.3"] {
        assert_eq!(
            fs.subject_state(subject),
            model.subject_state(subject),
            "{at}: {subject}"
        );
    }
}

/// Consecutive sequences as inclusive ranges.
fn ranges(seqs: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &seq in seqs {
        match out.last_mut() {
            Some((_, last)) if *last + 1 == seq => *last = seq,
            _ => out.push((seq, seq)),
        }
    }
    out
}

/// A memory store holding the same messages as `fs` at the same sequences.
fn rebuild(fs: &FileStore) -> MemStore {
    let mut m = MemStore::new();
    let st = fs.state();
    let mut seq = 1;
    for msg in contents(fs) {
        while seq < msg.seq {
            m.skip(0).unwrap();
            seq += 1;
        }
        m.store(&msg.subject, msg.headers.as_deref(), &msg.payload, msg.ts)
            .unwrap();
        seq += 1;
    }
    while seq <= st.last_seq {
        m.skip(0).unwrap();
        seq += 1;
    }
    m
}

/// A flipped bit anywhere (every byte of every segment, record headers
/// and lengths included) is reported lost or refused when the store
/// reopens, never a panic, and the store goes on: every message it still
/// lists reads back as written, and purging, resetting and storing work.
/// That holds for the last message of the newest segment too: the
/// `Synced` record after it tells its damage from a torn write.
#[test]
fn a_flip_anywhere_is_survived_on_reopen() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 39);
    sync(&mut s);
    let newest = dir.names().last().cloned().expect("a segment");
    s.store("sub.3", None, b"payload-0039", 1039).unwrap();
    sync(&mut s);
    assert_eq!(dir.names().last(), Some(&newest), "in the same segment");
    let all = contents(&s);
    let last_seq = s.state().last_seq;
    drop(s);
    let copies = common::flipped_copies(&dir);
    let mut opened = 0;
    for (name, at, damaged) in &copies {
        let Ok(mut s) = FileStore::open(Arc::new(damaged.clone()), cfg()) else {
            continue;
        };
        opened += 1;
        let got = contents(&s);
        for m in &got {
            assert!(all.contains(m), "{name} at {at}: {} changed", m.seq);
        }
        let state = s.state();
        assert!(
            state.last_seq >= last_seq,
            "{name} at {at}: sequence {} would be used again",
            state.last_seq + 1
        );
        let lost = state.lost;
        for m in &all {
            assert!(
                got.iter().any(|g| g.seq == m.seq) || lost.contains(&m.seq),
                "{name} at {at}: {} neither served nor reported lost",
                m.seq
            );
        }
        common::goes_on(&mut s, &format!("{name} at {at}"));
    }
    common::mostly_opened(opened, copies.len());
}

/// A flipped bit anywhere never brings a removed message back: not in a
/// tombstone (a delete, a secure delete, a subject purge's), not in a
/// compaction (a purge up to a sequence), not in a removed segment's
/// range. Each removal is recorded twice, so the damage of one copy is
/// outvoted by the other; a damaged record never makes anything live.
#[test]
fn a_flip_anywhere_never_resurrects_a_removal() {
    let dir = MemDir::new();
    let mut s = open(&dir);
    put(&mut s, 40);
    sync(&mut s);
    let mut removed: Vec<u64> = Vec::new();
    // Tombstones for messages in older segments and in the active one.
    for seq in [9, 12, 33, 38] {
        assert!(s.remove(seq, false).unwrap());
        removed.push(seq);
    }
    assert!(s.remove(21, true).unwrap(), "a secure delete");
    removed.push(21);
    // A compaction: everything below 6 goes.
    let purge = Purge {
        seq: Some(6),
        ..Purge::default()
    };
    assert_eq!(s.purge(&purge).unwrap(), 5);
    removed.extend(1..6);
    // A subject purge: its tombstones.
    let by_subject = Purge {
        filter: Some("sub.1".to_string()),
        keep: Some(3),
        ..Purge::default()
    };
    assert!(s.purge(&by_subject).unwrap() > 0);
    sync(&mut s);
    let all = contents(&s);
    let live: Vec<u64> = all.iter().map(|m| m.seq).collect();
    let by_purge: Vec<u64> = (1..=40)
        .filter(|seq| !live.contains(seq) && !removed.contains(seq))
        .collect();
    removed.extend(by_purge);
    assert!(removed.len() > 12, "removed {removed:?}");
    drop(s);
    let copies = common::flipped_copies(&dir);
    let mut opened = 0;
    for (name, at, damaged) in &copies {
        let Ok(s) = FileStore::open(Arc::new(damaged.clone()), cfg()) else {
            continue;
        };
        opened += 1;
        for m in contents(&s) {
            assert!(
                !removed.contains(&m.seq),
                "{name} at {at}: removed message {} is served again",
                m.seq
            );
            assert!(all.contains(&m), "{name} at {at}: {} changed", m.seq);
        }
        for seq in &removed {
            assert!(
                s.get(*seq).map_or(true, |m| m.is_none()),
                "{name} at {at}: removed {seq} reads back"
            );
        }
    }
    common::mostly_opened(opened, copies.len());
}
