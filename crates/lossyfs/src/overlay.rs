//! What a file holds that is not yet durable: the pages written since its
//! last fsync, and its size, over the backing file (what the disk holds).
//! A sync writes them through and makes them durable; dropping them is
//! the power cut.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

pub const PAGE: u64 = 4096;

/// One file's unsynced state. Every read and write takes the backing file
/// (opened on the file's backing path) to read what is not overlaid.
#[derive(Debug, Clone)]
pub struct Overlay {
    /// The size the file has now.
    size: u64,
    /// Backing bytes at or past this offset are gone (a truncation since
    /// the last sync): they read as zeros.
    floor: u64,
    /// Whole pages as the file reads now, by page number.
    pages: BTreeMap<u64, Box<[u8]>>,
}

impl Overlay {
    /// No change yet over a backing file of `backing_len` bytes.
    pub fn new(backing_len: u64) -> Overlay {
        Overlay {
            size: backing_len,
            floor: backing_len,
            pages: BTreeMap::new(),
        }
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes held in memory.
    pub fn held(&self) -> u64 {
        self.pages.len() as u64 * PAGE
    }

    /// Reads up to `len` bytes at `offset`, as the file is now.
    pub fn read(&self, backing: &File, offset: u64, len: u64) -> io::Result<Vec<u8>> {
        let end = (offset.saturating_add(len)).min(self.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut out = vec![0u8; (end - offset) as usize];
        let mut at = offset;
        while at < end {
            let page = at / PAGE;
            let in_page = (at % PAGE) as usize;
            let take = ((PAGE - at % PAGE).min(end - at)) as usize;
            let dst = &mut out[(at - offset) as usize..][..take];
            match self.pages.get(&page) {
                Some(bytes) => dst.copy_from_slice(&bytes[in_page..in_page + take]),
                None => self.read_backing(backing, at, dst)?,
            }
            at += take as u64;
        }
        Ok(out)
    }

    /// Writes `data` at `offset`.
    pub fn write(&mut self, backing: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        let end = offset + data.len() as u64;
        let mut at = offset;
        while at < end {
            let page = at / PAGE;
            let in_page = (at % PAGE) as usize;
            let take = ((PAGE - at % PAGE).min(end - at)) as usize;
            let bytes = self.page_mut(backing, page)?;
            bytes[in_page..in_page + take].copy_from_slice(&data[(at - offset) as usize..][..take]);
            at += take as u64;
        }
        self.size = self.size.max(end);
        Ok(())
    }

    /// Makes the file `size` bytes long: cut, or grown with zeros.
    pub fn set_size(&mut self, size: u64) {
        if size < self.size {
            self.pages.retain(|&page, _| page * PAGE < size);
            if let Some(bytes) = self.pages.get_mut(&(size / PAGE)) {
                bytes[(size % PAGE) as usize..].fill(0);
            }
            self.floor = self.floor.min(size);
        }
        self.size = size;
    }

    /// Writes the overlay through to `backing` and syncs it: the file's
    /// state now is what the disk holds.
    pub fn sync(self, backing: &File) -> io::Result<()> {
        // Backing bytes past the floor are gone: cut them first, so the
        // gaps between written pages read as zeros.
        let backing_len = backing.metadata()?.len();
        if self.floor < backing_len {
            backing.set_len(self.floor)?;
        }
        for (page, bytes) in &self.pages {
            let at = page * PAGE;
            let len = (self.size - at).min(PAGE) as usize;
            backing.write_all_at(&bytes[..len], at)?;
        }
        backing.set_len(self.size)?;
        backing.sync_all()
    }

    fn page_mut(&mut self, backing: &File, page: u64) -> io::Result<&mut [u8]> {
        if !self.pages.contains_key(&page) {
            let mut bytes = vec![0u8; PAGE as usize].into_boxed_slice();
            let at = page * PAGE;
            // Only what the file holds now: past its size, zeros.
            let visible = (self.size.saturating_sub(at)).min(PAGE) as usize;
            self.read_backing(backing, at, &mut bytes[..visible])?;
            self.pages.insert(page, bytes);
        }
        Ok(self.pages.get_mut(&page).expect("inserted above"))
    }

    /// Backing bytes at `at` into `dst`: zeros past the floor or the end
    /// of the backing file.
    fn read_backing(&self, backing: &File, at: u64, dst: &mut [u8]) -> io::Result<()> {
        dst.fill(0);
        let readable = self.floor.saturating_sub(at).min(dst.len() as u64) as usize;
        let mut done = 0;
        while done < readable {
            match backing.read_at(&mut dst[done..readable], at + done as u64)? {
                0 => break,
                n => done += n,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The overlay against a plain model (durable bytes, current bytes)
    /// under random writes, truncations, syncs and drops: whatever the
    /// sequence, the file reads as the model's current bytes, and after
    /// a drop as its durable bytes.
    #[test]
    fn matches_a_model_of_durable_and_current_bytes() {
        for seed in 0..200 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            let initial: Vec<u8> = (0..rng.usize(..3 * PAGE as usize))
                .map(|_| rng.u8(..))
                .collect();
            std::fs::write(&path, &initial).unwrap();
            let backing = File::options().read(true).write(true).open(&path).unwrap();
            let mut durable = initial.clone();
            let mut current = initial;
            let mut overlay = Overlay::new(durable.len() as u64);
            for _ in 0..40 {
                match rng.u8(..10) {
                    0..=4 => {
                        let at = rng.usize(..4 * PAGE as usize);
                        let data: Vec<u8> = (0..rng.usize(1..2 * PAGE as usize))
                            .map(|_| rng.u8(..))
                            .collect();
                        overlay.write(&backing, at as u64, &data).unwrap();
                        if current.len() < at + data.len() {
                            current.resize(at + data.len(), 0);
                        }
                        current[at..at + data.len()].copy_from_slice(&data);
                    }
                    5 | 6 => {
                        let size = rng.usize(..4 * PAGE as usize);
                        overlay.set_size(size as u64);
                        current.resize(size, 0);
                    }
                    7 => {
                        std::mem::replace(&mut overlay, Overlay::new(0))
                            .sync(&backing)
                            .unwrap();
                        overlay = Overlay::new(backing.metadata().unwrap().len());
                        durable = current.clone();
                        assert_eq!(
                            std::fs::read(&path).unwrap(),
                            durable,
                            "seed {seed}: synced"
                        );
                    }
                    _ => {
                        overlay = Overlay::new(backing.metadata().unwrap().len());
                        current = durable.clone();
                    }
                }
                let read = overlay.read(&backing, 0, 1 << 20).unwrap();
                assert_eq!(read.len(), current.len(), "seed {seed}: size");
                assert!(read == current, "seed {seed}: contents");
                assert_eq!(std::fs::read(&path).unwrap(), durable, "seed {seed}: disk");
            }
        }
    }
}
