//! The same behaviour from every store: memory, file over an in-memory
//! directory, and file over a real directory.

use std::sync::Arc;

use flotilla_store::{
    FileStore, FileStoreConfig, Filter, FsDir, MemDir, MemStore, MsgStore, Purge,
};

fn small() -> FileStoreConfig {
    // Small segments, so tests cross segment boundaries.
    FileStoreConfig { segment_size: 512 }
}

fn stores() -> Vec<(&'static str, Box<dyn MsgStore>, Option<tempfile::TempDir>)> {
    let tmp = tempfile::tempdir().unwrap();
    let fs = FsDir::new(tmp.path().join("s")).unwrap();
    vec![
        ("mem", Box::new(MemStore::new()), None),
        (
            "file/memdir",
            Box::new(FileStore::open(Arc::new(MemDir::new()), small()).unwrap()),
            None,
        ),
        (
            "file/fsdir",
            Box::new(FileStore::open(Arc::new(fs), small()).unwrap()),
            Some(tmp),
        ),
    ]
}

fn fill(s: &mut dyn MsgStore) {
    for i in 1..=20u64 {
        let subject = format!("s.{}", i % 3);
        let hdr = (i % 2 == 0).then(|| b"NATS/1.0\r\nK: v\r\n\r\n".to_vec());
        let seq = s
            .store(
                &subject,
                hdr.as_deref(),
                format!("msg-{i}").as_bytes(),
                i as i64 * 100,
            )
            .unwrap();
        assert_eq!(seq, i);
    }
}

#[test]
fn store_get_and_state() {
    for (name, mut s, _t) in stores() {
        fill(s.as_mut());
        let st = s.state();
        assert_eq!(
            (st.msgs, st.first_seq, st.last_seq, st.num_subjects),
            (20, 1, 20, 3),
            "{name}"
        );
        assert_eq!((st.first_ts, st.last_ts), (100, 2000), "{name}");
        let m = s.get(4).unwrap().unwrap();
        assert_eq!(
            (m.subject.as_str(), &m.payload[..]),
            ("s.1", &b"msg-4"[..]),
            "{name}"
        );
        assert_eq!(
            m.headers.as_deref(),
            Some(&b"NATS/1.0\r\nK: v\r\n\r\n"[..]),
            "{name}"
        );
        assert!(s.get(3).unwrap().unwrap().headers.is_none(), "{name}");
        assert!(
            s.get(21).unwrap().is_none() && s.get(0).unwrap().is_none(),
            "{name}"
        );
        // Each store counts as its nats-server counterpart does: memory
        // adds 16 bytes, file 22 + 8 and 4 more for a header block.
        let file = name.starts_with("file");
        let expect_bytes: u64 = (1..=20u64)
            .map(|i| {
                let h = if i % 2 == 0 { 18 } else { 0 };
                let body = 3 + h + format!("msg-{i}").len() as u64;
                match (file, h > 0) {
                    (false, _) => body + 16,
                    (true, false) => body + 30,
                    (true, true) => body + 34,
                }
            })
            .sum();
        assert_eq!(
            st.bytes, expect_bytes,
            "{name}: bytes as nats-server counts"
        );
    }
}

#[test]
fn lookups_by_filter() {
    for (name, mut s, _t) in stores() {
        fill(s.as_mut());
        let one = Filter::one("s.1");
        assert_eq!(s.next_matching(5, &one).unwrap().unwrap().seq, 7, "{name}");
        assert_eq!(s.last_matching(&one).unwrap().unwrap().seq, 19, "{name}");
        assert_eq!(s.next_matching(20, &one).unwrap(), None, "{name}");
        let wild = Filter::new(["s.*"]);
        assert_eq!(
            s.next_matching(20, &wild).unwrap().unwrap().seq,
            20,
            "{name}"
        );
        assert_eq!(s.num_pending(1, &one, false), 7, "{name}");
        assert_eq!(s.num_pending(8, &one, false), 4, "{name}");
        assert_eq!(s.num_pending(1, &Filter::all(), true), 3, "{name}");
        assert_eq!(s.num_pending(19, &Filter::all(), true), 2, "{name}");
        assert_eq!(
            s.multi_last_seqs(&Filter::all()),
            vec![18, 19, 20],
            "{name}"
        );
        let totals = s.subjects_totals(&Filter::all());
        assert_eq!(totals.get("s.0"), Some(&6), "{name}");
        assert_eq!(totals.get("s.2"), Some(&7), "{name}");
        assert_eq!(s.seq_for_time(250), 3, "{name}");
        assert_eq!(s.seq_for_time(5000), 21, "{name}");
        assert_eq!(s.expired(350, 100), vec![1, 2, 3], "{name}");
        let st = s.subject_state("s.2").unwrap();
        assert_eq!((st.first, st.last, st.msgs), (2, 20, 7), "{name}");
    }
}

/// Messages with headers, in order, past removed ones and segment ends;
/// an empty header block counts as none. Again after reopening, when the
/// file store knows which have headers from its scan.
#[test]
fn next_with_headers_skips_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("h");
    let with = |s: &dyn MsgStore, from: u64| {
        let mut seqs = Vec::new();
        let mut at = from;
        while let Some(m) = s.next_with_headers(at).unwrap() {
            assert!(m.headers.as_ref().is_some_and(|h| !h.is_empty()));
            seqs.push(m.seq);
            at = m.seq + 1;
        }
        seqs
    };
    let mut all = stores();
    all.push((
        "file/fsdir reopened",
        Box::new(FileStore::open(Arc::new(FsDir::new(&path).unwrap()), small()).unwrap()),
        None,
    ));
    for (name, mut s, _t) in all {
        fill(s.as_mut());
        s.store("s.x", Some(b""), b"empty headers", 2100).unwrap();
        assert!(s.remove(4, false).unwrap());
        assert!(s.remove(12, true).unwrap());
        let mut s = if name.ends_with("reopened") {
            if let Some(h) = s.sync_handle() {
                h.sync().unwrap();
            }
            drop(s);
            Box::new(FileStore::open(Arc::new(FsDir::new(&path).unwrap()), small()).unwrap())
        } else {
            s
        };
        assert_eq!(
            with(s.as_ref(), 1),
            vec![2, 6, 8, 10, 14, 16, 18, 20],
            "{name}"
        );
        assert_eq!(with(s.as_ref(), 15), vec![16, 18, 20], "{name}");
        assert_eq!(with(s.as_ref(), 21), Vec::<u64>::new(), "{name}");
        s.purge(&Purge {
            keep: Some(2),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(with(s.as_ref(), 1), vec![20], "{name}");
    }
}

#[test]
fn removal_keeps_everything_consistent() {
    for (name, mut s, _t) in stores() {
        fill(s.as_mut());
        assert!(s.remove(1, false).unwrap(), "{name}");
        assert!(!s.remove(1, false).unwrap(), "{name}: twice");
        assert!(s.remove(5, true).unwrap(), "{name}");
        assert!(s.remove(20, false).unwrap(), "{name}");
        let st = s.state();
        assert_eq!(
            (st.msgs, st.first_seq, st.last_seq, st.num_deleted),
            (17, 2, 20, 2),
            "{name}"
        );
        assert_eq!(s.deleted(), vec![5, 20], "{name}");
        assert_eq!(s.deleted_ranges(), vec![(5, 5), (20, 20)], "{name}");
        assert!(s.get(5).unwrap().is_none(), "{name}");
        // The subject's bounds follow its removals.
        let st = s.subject_state("s.2").unwrap();
        assert_eq!((st.first, st.last, st.msgs), (2, 17, 5), "{name}");
        let st = s.subject_state("s.1").unwrap();
        assert_eq!((st.first, st.last, st.msgs), (4, 19, 6), "{name}");
        assert_eq!(
            s.last_matching(&Filter::one("s.2")).unwrap().unwrap().seq,
            17,
            "{name}"
        );
        assert_eq!(
            s.next_matching(1, &Filter::one("s.2"))
                .unwrap()
                .unwrap()
                .seq,
            2,
            "{name}"
        );
    }
}

#[test]
fn purges() {
    for (name, mut s, _t) in stores() {
        fill(s.as_mut());
        assert_eq!(
            s.purge(&Purge {
                filter: Some("s.1".into()),
                keep: Some(2),
                ..Default::default()
            })
            .unwrap(),
            5,
            "{name}"
        );
        assert_eq!(s.subject_state("s.1").unwrap().msgs, 2, "{name}");
        // s.1 kept 16 and 19; below 10 remain 2, 3, 5, 6, 8, 9.
        assert_eq!(
            s.purge(&Purge {
                seq: Some(10),
                ..Default::default()
            })
            .unwrap(),
            6,
            "{name}"
        );
        assert_eq!(s.state().first_seq, 11, "{name}");
        // Below 15, matching: 11, 12, 14 (13 went with s.1).
        assert_eq!(
            s.purge(&Purge {
                filter: Some("s.*".into()),
                seq: Some(15),
                ..Default::default()
            })
            .unwrap(),
            3,
            "{name}"
        );
        assert_eq!(s.state().first_seq, 15, "{name}");
        assert_eq!(s.purge(&Purge::default()).unwrap(), 6, "{name}");
        let st = s.state();
        assert_eq!(
            (
                st.msgs,
                st.bytes,
                st.first_seq,
                st.last_seq,
                st.num_subjects
            ),
            (0, 0, 21, 20, 0),
            "{name}"
        );
        assert_eq!(s.store("x", None, b"y", 1).unwrap(), 21, "{name}");
        // Purging past the end moves the next sequence.
        assert_eq!(
            s.purge(&Purge {
                seq: Some(100),
                ..Default::default()
            })
            .unwrap(),
            1,
            "{name}"
        );
        assert_eq!(
            (s.state().first_seq, s.state().last_seq),
            (100, 99),
            "{name}"
        );
        assert_eq!(s.store("x", None, b"y", 1).unwrap(), 100, "{name}");
    }
}

#[test]
fn skip_and_reset() {
    for (name, mut s, _t) in stores() {
        s.reset_to(50).unwrap();
        assert_eq!(
            (s.state().first_seq, s.state().last_seq),
            (50, 49),
            "{name}"
        );
        assert_eq!(s.skip(5).unwrap(), 50, "{name}");
        assert_eq!(s.store("a", None, b"b", 6).unwrap(), 51, "{name}");
        let st = s.state();
        assert_eq!((st.msgs, st.first_seq, st.last_seq), (1, 51, 51), "{name}");
    }
}
