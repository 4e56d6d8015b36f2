//! What the store's fault tests share.

use flotilla_store::{FileStore, MemDir, MsgStore, Purge};

/// Copies of `dir`, each with one bit flipped: at every byte of every
/// file, as (file, offset, copy).
pub fn flipped_copies(dir: &MemDir) -> Vec<(String, usize, MemDir)> {
    let mut out = Vec::new();
    for name in dir.names() {
        for at in 0..dir.file_len(&name) {
            let damaged = dir.deep_clone();
            damaged.flip_bit(&name, at, (at % 8) as u8);
            out.push((name.clone(), at, damaged));
        }
    }
    out
}

/// A damaged store that opened goes on: it resets as a fetch does,
/// purges and stores.
pub fn goes_on(s: &mut FileStore, what: &str) {
    let mid = s.state().first_seq + 5;
    s.reset_to(mid).unwrap_or_else(|e| panic!("{what}: {e}"));
    s.purge(&Purge::default()).unwrap();
    s.store("new", None, b"n", 1).unwrap();
}

/// Most damaged copies open: a test over them checks something.
pub fn mostly_opened(opened: usize, tried: usize) {
    assert!(
        opened * 10 > tried * 9,
        "{opened} of {tried} damaged stores opened"
    );
}
