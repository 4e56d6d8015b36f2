//! A replica's file store opened at a mark: the state after a Raft log
//! index, exactly, whatever was written after it; and the irreversible
//! steps (unlinks, erasures) held until a release says no older mark is
//! opened again.

use std::sync::Arc;

mod common;

use flotilla_store::{
    Dir, FileStore, FileStoreConfig, Filter, MemDir, MsgStore, Purge, StoreError, StoreState,
    StoredMsg,
};

fn cfg() -> FileStoreConfig {
    FileStoreConfig { segment_size: 600 }
}

fn open_at(dir: &MemDir, mark: u64) -> Result<FileStore, StoreError> {
    FileStore::open_at(Arc::new(dir.clone()), cfg(), mark)
}

fn sync(s: &mut FileStore) {
    if let Some(h) = s.sync_handle() {
        h.sync().expect("sync");
    }
}

fn put(s: &mut FileStore, n: u64, tag: &str) {
    for i in 0..n {
        s.store(
            &format!("sub.{}", i % 3),
            None,
            format!("{tag}-{i:04}").as_bytes(),
            1000 + i as i64,
        )
        .unwrap();
    }
}

fn contents(s: &dyn MsgStore) -> Vec<StoredMsg> {
    let mut out = Vec::new();
    let mut seq = 0;
    while let Some(m) = s.next_matching(seq, &Filter::all()).unwrap() {
        seq = m.seq + 1;
        out.push(m);
    }
    out
}

type View = (StoreState, Vec<StoredMsg>, Vec<u64>);

fn view(s: &FileStore) -> View {
    (s.state(), contents(s), s.deleted())
}

/// Whether any segment file still holds `needle`.
fn on_disk(dir: &MemDir, needle: &str) -> bool {
    dir.names().iter().any(|name| {
        let data = Dir::read_all(dir, name).unwrap();
        data.windows(needle.len()).any(|w| w == needle.as_bytes())
    })
}

/// Stores, removes, erases and purges between marks; opening what is
/// durable at each mark gives back exactly the state there.
#[test]
fn opening_at_a_mark_gives_back_the_state_there() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    let mut views: Vec<(u64, View)> = Vec::new();
    let mut copies: Vec<(u64, MemDir)> = Vec::new();
    for round in 1..=8u64 {
        put(&mut s, 15, &format!("r{round}"));
        let first = s.state().first_seq;
        s.remove(first + 2, false).unwrap();
        s.remove(first + 5, round % 2 == 0).unwrap();
        if round % 3 == 0 {
            s.purge(&Purge {
                filter: Some("sub.1".into()),
                keep: Some(2),
                ..Default::default()
            })
            .unwrap();
        }
        if round == 5 {
            // Everything so far: whole segments go.
            s.purge(&Purge::default()).unwrap();
        }
        let mark = round * 10;
        s.mark(mark).unwrap();
        sync(&mut s);
        views.push((mark, view(&s)));
        copies.push((mark, dir.durable_copy()));
    }
    // Written after the last mark, and synced: dropped too.
    put(&mut s, 20, "late");
    s.remove(s.state().first_seq, true).unwrap();
    sync(&mut s);
    let late = dir.durable_copy();
    for ((mark, want), (_, copy)) in views.iter().zip(&copies) {
        let reopened = open_at(copy, *mark).unwrap();
        assert_eq!(&view(&reopened), want, "at mark {mark}");
        let from_late = open_at(&late.durable_copy(), *mark).unwrap();
        assert_eq!(&view(&from_late), want, "at mark {mark}, from the end");
        assert!(from_late.state().lost.is_empty());
    }
}

/// A segment emptied after a mark stays on disk, and an erased message's
/// bytes with it, until a release past that mark; then both go at the
/// next sync.
#[test]
fn unlinks_and_erasures_wait_for_a_release() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    put(&mut s, 40, "msg");
    s.mark(1).unwrap();
    sync(&mut s);
    assert!(dir.names().len() >= 3, "{:?}", dir.names());
    let first = "00000001.blk".to_string();
    // Empty the first segment, and erase a message in a later one.
    let first_seg_end = s.debug_segments()[0].2;
    for seq in 1..first_seg_end {
        s.remove(seq, false).unwrap();
    }
    s.remove(30, true).unwrap();
    s.mark(2).unwrap();
    sync(&mut s);
    assert!(dir.names().contains(&first), "held: {:?}", dir.names());
    assert!(on_disk(&dir, "msg-0029"), "the erasure is held");
    assert!(s.get(30).unwrap().is_none(), "but the message is gone");
    let before = view(&s);
    // Releasing mark 1 does not cover what came after it.
    s.release(1).unwrap();
    sync(&mut s);
    assert!(dir.names().contains(&first));
    assert!(on_disk(&dir, "msg-0029"));
    s.release(2).unwrap();
    sync(&mut s);
    assert!(!dir.names().contains(&first), "{:?}", dir.names());
    assert!(!on_disk(&dir, "msg-0029"), "erased");
    assert!(!on_disk(&dir, "msg-0000"), "unlinked");
    assert_eq!(view(&s), before);
    drop(s);
    let reopened = open_at(&dir, 2).unwrap();
    assert_eq!(view(&reopened), before);
    assert!(reopened.state().lost.is_empty());
}

/// An erasure still held when the process stopped is taken when the
/// store is next opened at a mark after it.
#[test]
fn an_erasure_held_at_a_stop_is_taken_at_the_next_open() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    put(&mut s, 10, "secret");
    s.remove(4, true).unwrap();
    s.mark(7).unwrap();
    sync(&mut s);
    assert!(on_disk(&dir, "secret-0003"));
    drop(s);
    let mut reopened = open_at(&dir, 7).unwrap();
    sync(&mut reopened);
    assert!(!on_disk(&dir, "secret-0003"));
    assert!(on_disk(&dir, "secret-0004"));
    assert!(reopened.get(4).unwrap().is_none());
    assert_eq!(reopened.state().msgs, 9);
}

#[test]
fn a_mark_the_store_does_not_hold_is_an_error() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    put(&mut s, 5, "a");
    s.mark(3).unwrap();
    sync(&mut s);
    put(&mut s, 5, "b");
    s.mark(5).unwrap();
    // Mark 5 was never synced: a crash takes it back.
    drop(s);
    dir.crash(0);
    assert!(matches!(open_at(&dir, 5), Err(StoreError::NoMark(5))));
    assert!(matches!(open_at(&dir, 4), Err(StoreError::NoMark(4))));
    let s = open_at(&dir, 3).unwrap();
    assert_eq!(s.state().msgs, 5);
}

#[test]
fn mark_zero_is_the_empty_store() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    put(&mut s, 5, "a");
    s.mark(1).unwrap();
    sync(&mut s);
    drop(s);
    let s = open_at(&dir, 0).unwrap();
    assert_eq!(s.state().msgs, 0);
    assert_eq!(s.state().last_seq, 0);
}

/// One server's store (no marks) keeps taking its steps at once.
#[test]
fn a_store_without_marks_unlinks_at_the_next_sync() {
    let dir = MemDir::new();
    let mut s = FileStore::open(Arc::new(dir.clone()), cfg()).unwrap();
    put(&mut s, 40, "msg");
    sync(&mut s);
    let first_seg_end = s.debug_segments()[0].2;
    for seq in 1..first_seg_end {
        s.remove(seq, false).unwrap();
    }
    s.remove(30, true).unwrap();
    s.mark(9).unwrap();
    sync(&mut s);
    assert!(!dir.names().contains(&"00000001.blk".to_string()));
    assert!(!on_disk(&dir, "msg-0029"));
}

/// On a real directory: mark 0 empties the store and leaves the
/// directory in place, and a stream whose first message is sequence 1
/// is caught up from an empty store at sequence 1.
#[test]
fn a_real_directory_opens_at_zero_and_at_its_marks() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: Arc<dyn Dir> = Arc::new(flotilla_store::FsDir::new(tmp.path()).unwrap());
    let mut s = FileStore::open_at(dir.clone(), cfg(), 0).unwrap();
    s.reset_to(1).unwrap();
    put(&mut s, 30, "real");
    assert_eq!(s.state().first_seq, 1, "reset_to(1) keeps sequence 1");
    s.mark(4).unwrap();
    sync(&mut s);
    let at_four = view(&s);
    put(&mut s, 5, "after");
    sync(&mut s);
    drop(s);
    let s = FileStore::open_at(dir.clone(), cfg(), 4).unwrap();
    assert_eq!(view(&s), at_four);
    drop(s);
    let mut s = FileStore::open_at(dir.clone(), cfg(), 0).unwrap();
    assert_eq!(s.state().msgs, 0);
    put(&mut s, 3, "again");
    s.mark(1).unwrap();
    sync(&mut s);
    drop(s);
    assert_eq!(FileStore::open_at(dir, cfg(), 1).unwrap().state().msgs, 3);
}

/// A catch-up cut short: the store reopens at the greatest mark it holds
/// at or below the snapshot's index.
#[test]
fn open_at_or_before_takes_the_greatest_mark_not_past_the_index() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    let mut views = Vec::new();
    for mark in [3u64, 7, 12] {
        put(&mut s, 10, &format!("m{mark}"));
        s.remove(s.state().first_seq, false).unwrap();
        s.mark(mark).unwrap();
        sync(&mut s);
        views.push((mark, view(&s)));
    }
    drop(s);
    for (index, want) in [(10u64, 7u64), (12, 12), (100, 12), (3, 3), (2, 0)] {
        let copy = dir.durable_copy();
        let (store, mark) = FileStore::open_at_or_before(Arc::new(copy), cfg(), index).unwrap();
        assert_eq!(mark, want, "at or before {index}");
        match views.iter().find(|(m, _)| *m == want) {
            Some((_, v)) => assert_eq!(&view(&store), v),
            None => assert_eq!(store.state().msgs, 0),
        }
    }
}

/// A full disk fails the batch that carries a mark: that mark is never
/// opened (NoMark), and the one before it opens with its state intact.
#[test]
fn a_mark_on_a_full_disk_is_not_believed() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    put(&mut s, 10, "before");
    s.mark(1).unwrap();
    sync(&mut s);
    let at_one = view(&s);
    dir.set_space(Some(50));
    let mut failed = false;
    for i in 0..20 {
        failed |= s
            .store("full", None, format!("{i:040}").as_bytes(), 5)
            .is_err();
    }
    failed |= s.mark(2).is_err();
    if let Some(h) = s.sync_handle() {
        failed |= h.sync().is_err();
    }
    assert!(failed, "no space: the batch fails");
    drop(s);
    dir.crash(0);
    dir.set_space(None);
    assert!(matches!(open_at(&dir, 2), Err(StoreError::NoMark(2))));
    let reopened = open_at(&dir, 1).unwrap();
    assert_eq!(view(&reopened), at_one);
    assert!(reopened.state().lost.is_empty());
}

/// A flipped bit anywhere in a replica's store (every byte of every
/// segment: record headers, lengths and marks included) opens at its
/// marks without a panic; every message it lists reads back as it was
/// written, and resetting it (as a fetch does), purging and storing work.
/// A damaged tombstone can bring its message back here: a replica finds
/// that by comparing the store with its snapshot (`fetch::reopen`).
#[test]
fn a_flip_anywhere_is_survived_when_opened_at_a_mark() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    put(&mut s, 30, "msg");
    let mut written = contents(&s);
    s.mark(1).unwrap();
    for seq in 1..12 {
        s.remove(seq, false).unwrap();
    }
    put(&mut s, 10, "more");
    written.extend(contents(&s).into_iter().filter(|m| m.seq > 30));
    s.mark(2).unwrap();
    sync(&mut s);
    s.release(1).unwrap();
    s.remove(20, false).unwrap();
    s.mark(3).unwrap();
    sync(&mut s);
    drop(s);
    let copies = common::flipped_copies(&dir);
    let mut opened = 0;
    for (name, at, damaged) in &copies {
        for mark in [3, 2] {
            let Ok(mut s) = open_at(damaged, mark) else {
                continue;
            };
            opened += 1;
            for m in contents(&s) {
                assert!(written.contains(&m), "{name} at {at}: {} changed", m.seq);
            }
            common::goes_on(&mut s, &format!("{name} at {at}, mark {mark}"));
        }
    }
    common::mostly_opened(opened, 2 * copies.len());
}

/// A segment whose Start record (the stream's last sequence when it
/// opened) is damaged, and whose next record is a marker naming an
/// earlier sequence (here a compaction, as purges and a work queue's
/// acks write), and no message yet: it must not be taken to start at that
/// sequence, which the segment before it holds. Before, both claimed it, and the message
/// there could not be removed (a work-queue ack left it in place) nor
/// purged (a panic).
#[test]
fn a_segment_whose_start_is_damaged_does_not_overlap_the_one_before() {
    let dir = MemDir::new();
    let mut s = open_at(&dir, 0).unwrap();
    put(&mut s, 5, "msg");
    // Compactions up to the last message, until one opens a segment.
    let last = s.state().last_seq;
    while s.debug_segments().len() < 2 {
        s.purge(&Purge {
            seq: Some(last),
            ..Purge::default()
        })
        .unwrap();
    }
    s.mark(1).unwrap();
    sync(&mut s);
    let before = view(&s);
    drop(s);
    let second = dir.names()[1].clone();
    assert_eq!(
        dir.read_all(&second).unwrap()[8],
        6,
        "it opens with a Start"
    );
    // A bit of the Start record's sequence.
    dir.flip_bit(&second, 10, 7);
    let mut s = open_at(&dir, 1).unwrap();
    assert_eq!(view(&s).1, before.1, "the message is still there");
    assert!(s.get(last).unwrap().is_some(), "and reads back");
    assert!(s.remove(last, false).unwrap(), "and can be removed");
    s.reset_to(last + 2).unwrap();
    s.purge(&Purge::default()).unwrap();
    assert_eq!(s.state().msgs, 0);
}
