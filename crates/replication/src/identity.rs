//! A server's peer identity: the id every Raft group and the meta peer set
//! know it by. It is made once, when the store is new, written atomically
//! and checksummed, and never made again for the same store. It is kept
//! twice ([`FILE`] and [`COPY`]): a copy that is damaged or missing is
//! rewritten from the other. Both damaged stops the server with an error
//! instead of yielding a new id: a server that quietly became a new peer
//! would grow the cluster with a member that never leaves (incident 3's
//! failure, from the disk side).

use bytes::{Buf, BufMut};
use store::Dir;

/// The file in the server's store directory.
pub const FILE: &str = "peer.id";
/// Its second copy, beside it.
pub const COPY: &str = "peer.id.copy";
const MAGIC: &[u8; 4] = b"FLID";
const VERSION: u8 = 1;
const MAX_NAME: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Never 0 (raft-rs reserves it).
    pub id: u64,
    /// The server name it was made under.
    pub name: String,
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(
        "peer identity is damaged ({0}): neither {FILE} nor {COPY} holds it whole; refusing to \
         start as a new peer. Restore the files, or move the store aside to join as a new, \
         empty server"
    )]
    Damaged(&'static str),
    #[error("peer identity file {FILE}: {0}")]
    Io(#[from] std::io::Error),
    #[error("a new peer id must not be 0")]
    ZeroId,
}

impl Identity {
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(19 + self.name.len() + 4);
        b.put_slice(MAGIC);
        b.put_u8(VERSION);
        b.put_u64_le(self.id);
        b.put_u16_le(self.name.len() as u16);
        b.put_slice(self.name.as_bytes());
        let crc = crc32c::crc32c(&b);
        b.put_u32_le(crc);
        b
    }

    fn decode(data: &[u8]) -> Result<Identity, IdentityError> {
        if data.len() < 4 + 1 + 8 + 2 + 4 {
            return Err(IdentityError::Damaged("too short"));
        }
        let (body, crc) = data.split_at(data.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
            return Err(IdentityError::Damaged("checksum mismatch"));
        }
        let mut b = body;
        if &b[..4] != MAGIC {
            return Err(IdentityError::Damaged("not an identity file"));
        }
        b.advance(4);
        if b.get_u8() != VERSION {
            return Err(IdentityError::Damaged("unknown version"));
        }
        let id = b.get_u64_le();
        let n = b.get_u16_le() as usize;
        if b.remaining() != n || id == 0 {
            return Err(IdentityError::Damaged("bad length or id"));
        }
        let name = String::from_utf8(b.to_vec())
            .map_err(|_| IdentityError::Damaged("name is not UTF-8"))?;
        Ok(Identity { id, name })
    }
}

/// The stored identity, or a new one with the id `fresh` gives (the
/// driver draws it from the OS; the simulator from its seed), stored
/// durably before it is returned. The flag says whether it is new.
///
/// The name is the one it was made under; a server renamed later keeps
/// its id.
pub fn load_or_create(
    dir: &dyn Dir,
    name: &str,
    fresh: impl FnOnce() -> u64,
) -> Result<(Identity, bool), IdentityError> {
    if let Some(me) = load(dir)? {
        return Ok((me, false));
    }
    let id = fresh();
    if id == 0 {
        return Err(IdentityError::ZeroId);
    }
    let mut name = name.to_string();
    if name.len() > MAX_NAME {
        let mut cut = MAX_NAME;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    let me = Identity { id, name };
    // Atomic: the file is either absent (no id was ever used) or whole.
    // A crash before the copy is written leaves one, which the next load
    // copies.
    dir.write_atomic(FILE, &me.encode())?;
    dir.write_atomic(COPY, &me.encode())?;
    Ok((me, true))
}

/// One copy: `None` if it was never written.
fn read(
    dir: &dyn Dir,
    file: &str,
) -> Result<Option<Result<Identity, IdentityError>>, IdentityError> {
    match dir.read_all(file) {
        Ok(data) => Ok(Some(Identity::decode(&data))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The stored identity, if one was ever made; a bad or missing copy is
/// rewritten from the good one.
fn load(dir: &dyn Dir) -> Result<Option<Identity>, IdentityError> {
    let (first, second) = (read(dir, FILE)?, read(dir, COPY)?);
    let (me, repair) = match (first, second) {
        (None, None) => return Ok(None),
        (Some(Ok(a)), Some(Ok(b))) if a == b => return Ok(Some(a)),
        (Some(Ok(_)), Some(Ok(_))) => return Err(IdentityError::Damaged("the copies differ")),
        (Some(Ok(a)), _) => (a, COPY),
        (_, Some(Ok(b))) => (b, FILE),
        (Some(Err(e)), _) | (None, Some(Err(e))) => return Err(e),
    };
    debug_assert_ne!(me.id, 0, "decode refuses id 0");
    dir.write_atomic(repair, &me.encode())?;
    Ok(Some(me))
}

#[cfg(test)]
mod tests {
    use super::*;
    use store::MemDir;

    #[test]
    fn made_once_and_kept_across_crashes() {
        let dir = MemDir::new();
        let (a, new) = load_or_create(&dir, "n1", || 77).unwrap();
        assert!(new);
        assert_eq!(
            a,
            Identity {
                id: 77,
                name: "n1".into()
            }
        );
        dir.crash(3);
        let (b, new) = load_or_create(&dir, "renamed", || panic!("must not make another")).unwrap();
        assert!(!new);
        assert_eq!(b, a);
    }

    #[test]
    fn one_damaged_copy_is_repaired_from_the_other() {
        let dir = MemDir::new();
        let (me, _) = load_or_create(&dir, "n1", || 9).unwrap();
        let len = dir.file_len(FILE);
        for (bad, good) in [(FILE, COPY), (COPY, FILE)] {
            for at in 0..len {
                for bit in 0..8 {
                    let d = MemDir::new();
                    load_or_create(&d, "n1", || 9).unwrap();
                    d.flip_bit(bad, at, bit);
                    let (loaded, new) =
                        load_or_create(&d, "n1", || panic!("must not make another")).unwrap();
                    assert_eq!((&loaded, new), (&me, false));
                    assert_eq!(d.read_all(bad).unwrap(), d.read_all(good).unwrap());
                }
            }
        }
        // A store from before the copy: the copy is made.
        let d = MemDir::new();
        load_or_create(&d, "n1", || 9).unwrap();
        d.remove(COPY).unwrap();
        assert_eq!(load_or_create(&d, "n1", || 1).unwrap().0, me);
        assert_eq!(d.read_all(COPY).unwrap(), d.read_all(FILE).unwrap());
    }

    #[test]
    fn both_damaged_is_an_error_never_a_new_identity() {
        let dir = MemDir::new();
        load_or_create(&dir, "n1", || 9).unwrap();
        let len = dir.file_len(FILE);
        for at in 0..len {
            for bit in 0..8 {
                let d = MemDir::new();
                load_or_create(&d, "n1", || 9).unwrap();
                d.flip_bit(FILE, at, bit);
                d.flip_bit(COPY, (at + 3) % len, bit);
                let e = load_or_create(&d, "n1", || panic!("must not make another")).unwrap_err();
                assert!(matches!(e, IdentityError::Damaged(_)), "{e}");
            }
        }
        let d = MemDir::new();
        load_or_create(&d, "n1", || 9).unwrap();
        d.cut(FILE, len - 1);
        d.remove(COPY).unwrap();
        let e = load_or_create(&d, "n1", || 1).unwrap_err();
        assert!(
            e.to_string().contains("refusing to start as a new peer"),
            "{e}"
        );
    }

    #[test]
    fn copies_that_differ_are_an_error() {
        let d = MemDir::new();
        load_or_create(&d, "n1", || 9).unwrap();
        let other = Identity {
            id: 10,
            name: "n1".into(),
        };
        d.write_atomic(COPY, &other.encode()).unwrap();
        let e = load_or_create(&d, "n1", || 1).unwrap_err();
        assert!(matches!(e, IdentityError::Damaged(_)), "{e}");
    }

    #[test]
    fn zero_is_not_an_id() {
        let dir = MemDir::new();
        assert!(matches!(
            load_or_create(&dir, "n1", || 0),
            Err(IdentityError::ZeroId)
        ));
    }
}
