//! Space reserved ahead of appends on a real file system (`Dir::reserve`):
//! files grow in steps and carry a zero tail, which reopening takes for
//! unwritten space, neither lost data nor a torn write.

use std::sync::Arc;

use flotilla_store::{FileStore, FileStoreConfig, FsDir, Journal, MsgStore, RESERVE_MIN};

fn lens(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                e.metadata().unwrap().len(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn file_store_segments_are_reserved_and_reopen_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("s");
    let open = || {
        FileStore::open(
            Arc::new(FsDir::new(&path).unwrap()),
            FileStoreConfig {
                segment_size: 64 * 1024,
            },
        )
        .unwrap()
    };
    {
        let mut s = open();
        for i in 0..2000u64 {
            s.store("a.b", None, &[b'x'; 100], i as i64).unwrap();
            if i % 100 == 0 {
                s.sync_handle().unwrap().sync().unwrap();
            }
        }
        // The tail is written (flushed by the handle) but never synced:
        // a process crash keeps it.
        s.store("a.c", None, b"last", 2000).unwrap();
        let h = s.sync_handle().unwrap();
        drop(h);
    }
    let files = lens(&path);
    assert!(files.len() > 2, "several segments: {files:?}");
    let (sealed, active) = files.split_at(files.len() - 1);
    assert!(
        active[0].1.is_multiple_of(RESERVE_MIN),
        "the active segment grows in reserved steps: {files:?}"
    );
    assert!(
        sealed.iter().all(|(_, l)| !l.is_multiple_of(RESERVE_MIN)),
        "sealed segments are trimmed to what they hold: {files:?}"
    );
    let s = open();
    let st = s.state();
    assert_eq!((st.msgs, st.last_seq), (2001, 2001));
    assert!(
        st.lost.is_empty(),
        "zero tails are not lost data: {:?}",
        st.lost
    );
    assert_eq!(s.get(2001).unwrap().unwrap().payload.as_ref(), b"last");
    // The active segment's zero tail was cut on reopening.
    let last = lens(&path).pop().unwrap();
    assert!(!last.1.is_multiple_of(RESERVE_MIN), "{last:?}");
}

#[test]
fn journal_zero_tail_is_not_torn_but_a_cut_write_is() {
    let tmp = tempfile::tempdir().unwrap();
    let dir: Arc<FsDir> = Arc::new(FsDir::new(tmp.path()).unwrap());
    {
        let (mut j, replay) = Journal::open(dir.clone(), "j").unwrap();
        assert!(replay.entries.is_empty());
        for i in 0..50u8 {
            j.append(&[i; 30]);
        }
        j.sync_handle().unwrap().unwrap().sync().unwrap();
    }
    let reserved = lens(tmp.path())[0].1;
    assert!(
        reserved.is_multiple_of(RESERVE_MIN) && reserved <= 2 * RESERVE_MIN,
        "{reserved}"
    );
    let (start, end) = {
        let (mut j, replay) = Journal::open(dir.clone(), "j").unwrap();
        assert_eq!(replay.entries.len(), 50);
        assert!(!replay.torn && replay.damaged == 0);
        let start = j.len();
        j.append(&[7; 30]);
        j.sync_handle().unwrap().unwrap().sync().unwrap();
        (start, j.len())
    };
    // A write cut off inside the reserved space: the entry's first bytes
    // reached the disk, the rest reads as the zeros that were there.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(tmp.path().join("j"))
        .unwrap();
    let cut = (end - start) as usize - 12;
    std::os::unix::fs::FileExt::write_all_at(&f, &vec![0u8; cut], start + 12).unwrap();
    drop(f);
    let (_, replay) = Journal::open(dir, "j").unwrap();
    assert_eq!(replay.entries.len(), 50);
    assert!(replay.torn, "a partial entry is a torn write");
    assert_eq!(replay.damaged, 0, "and not damage");
}

/// A journal's reservation is written zeros, not a hole: appends inside
/// it allocate nothing, so their `fdatasync` writes no inode.
#[test]
fn a_journals_reservation_is_allocated() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let dir: Arc<FsDir> = Arc::new(FsDir::new(tmp.path()).unwrap());
    let (mut j, _) = Journal::open(dir.clone(), "j").unwrap();
    j.append(&[1; 100]);
    j.sync_handle().unwrap().unwrap().sync().unwrap();
    let m = std::fs::metadata(tmp.path().join("j")).unwrap();
    assert!(m.len() >= RESERVE_MIN, "{}", m.len());
    assert!(
        m.blocks() * 512 >= m.len(),
        "{} bytes allocated for {}",
        m.blocks() * 512,
        m.len()
    );
    // Reopened, the zeros are room, not damage, and appends go on.
    drop(j);
    let (mut j, replay) = Journal::open(dir.clone(), "j").unwrap();
    assert_eq!(replay.entries, vec![vec![1; 100]]);
    assert!(!replay.torn);
    j.append(&[2; 100]);
    j.sync_handle().unwrap().unwrap().sync().unwrap();
    let (_, replay) = Journal::open(dir, "j").unwrap();
    assert_eq!(replay.entries, vec![vec![1; 100], vec![2; 100]]);
}
