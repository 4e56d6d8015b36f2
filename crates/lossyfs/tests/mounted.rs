//! lossyfs mounted for real (FUSE), driven through the kernel with std's
//! file API: it must keep exactly what was fsynced across a drop, no more
//! (unsynced writes, truncations and growth are gone) and no less (what
//! was synced stays, byte for byte). Where FUSE cannot mount (no
//! /dev/fuse, no fusermount3) each test says so and passes vacuously.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

struct Fixture {
    backing: tempfile::TempDir,
    mount: tempfile::TempDir,
    fs: lossyfs::Mounted,
}

impl Fixture {
    fn new() -> Option<Fixture> {
        if !Path::new("/dev/fuse").exists() {
            eprintln!("skipped: no /dev/fuse here");
            return None;
        }
        let backing = tempfile::tempdir().unwrap();
        let mount = tempfile::tempdir().unwrap();
        match lossyfs::mount(backing.path(), mount.path()) {
            Ok(fs) => Some(Fixture { backing, mount, fs }),
            Err(e) => {
                eprintln!(
                    "skipped: cannot mount FUSE here ({e}); Debian's fuse3 provides fusermount3"
                );
                None
            }
        }
    }

    fn at(&self, name: &str) -> PathBuf {
        self.mount.path().join(name)
    }

    fn disk(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.backing.path().join(name)).unwrap_or_default()
    }
}

fn open(path: &Path) -> File {
    File::options()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap()
}

#[test]
fn unsynced_writes_are_dropped_and_synced_ones_kept() {
    let Some(fx) = Fixture::new() else { return };
    let f = open(&fx.at("a"));
    f.write_all_at(b"durable", 0).unwrap();
    f.sync_all().unwrap();
    f.write_all_at(b"DUR", 0).unwrap();
    f.write_all_at(b" and lost", 7).unwrap();
    assert_eq!(std::fs::read(fx.at("a")).unwrap(), b"DURable and lost");
    assert_eq!(
        fx.disk("a"),
        b"durable",
        "the disk has only what was synced"
    );
    assert!(fx.fs.control.unsynced_bytes() > 0);

    fx.fs.control.drop_unsynced();
    assert_eq!(std::fs::read(fx.at("a")).unwrap(), b"durable");
    assert_eq!(fx.fs.control.unsynced_bytes(), 0);

    // A truncation and a growth are writes too.
    f.set_len(3).unwrap();
    assert_eq!(std::fs::read(fx.at("a")).unwrap(), b"dur");
    fx.fs.control.drop_unsynced();
    assert_eq!(std::fs::read(fx.at("a")).unwrap(), b"durable");
    f.set_len(10).unwrap();
    fx.fs.control.drop_unsynced();
    assert_eq!(std::fs::metadata(fx.at("a")).unwrap().len(), 7);
    // So is an open with O_TRUNC.
    drop(File::create(fx.at("a")).unwrap());
    assert_eq!(std::fs::read(fx.at("a")).unwrap(), b"");
    fx.fs.control.drop_unsynced();
    assert_eq!(std::fs::read(fx.at("a")).unwrap(), b"durable");
}

/// A file written, renamed over another and never synced comes back
/// empty: the rename was durable, its data was not (the nats-server
/// meta file case).
#[test]
fn a_rename_is_durable_and_the_unsynced_data_behind_it_is_not() {
    let Some(fx) = Fixture::new() else { return };
    std::fs::write(fx.at("tmp"), b"config").unwrap();
    std::fs::rename(fx.at("tmp"), fx.at("meta")).unwrap();
    assert_eq!(std::fs::read(fx.at("meta")).unwrap(), b"config");
    fx.fs.control.drop_unsynced();
    assert!(fx.at("meta").exists());
    assert!(!fx.at("tmp").exists());
    assert_eq!(std::fs::read(fx.at("meta")).unwrap(), b"");

    // Synced before the rename: kept.
    let f = open(&fx.at("tmp2"));
    f.write_all_at(b"config", 0).unwrap();
    f.sync_all().unwrap();
    std::fs::rename(fx.at("tmp2"), fx.at("meta")).unwrap();
    fx.fs.control.drop_unsynced();
    assert_eq!(std::fs::read(fx.at("meta")).unwrap(), b"config");
    // A directory renamed takes its files, unsynced data and all.
    std::fs::create_dir(fx.at("old")).unwrap();
    let f = open(&fx.at("old/f"));
    f.write_all_at(b"kept", 0).unwrap();
    f.sync_all().unwrap();
    f.write_all_at(b"lost", 4).unwrap();
    std::fs::rename(fx.at("old"), fx.at("d")).unwrap();
    assert_eq!(std::fs::read(fx.at("d/f")).unwrap(), b"keptlost");
    fx.fs.control.drop_unsynced();
    assert_eq!(std::fs::read(fx.at("d/f")).unwrap(), b"kept");
    std::fs::remove_file(fx.at("d/f")).unwrap();
    std::fs::remove_file(fx.at("meta")).unwrap();
    let names: Vec<String> = std::fs::read_dir(fx.mount.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, vec!["d".to_string()]);
}

/// Random writes, truncations, syncs and drops over a few files, each
/// checked after every step against a model of what is durable and what
/// is current: reads through the mount give the current bytes, the disk
/// the durable ones, and after a drop the mount gives the durable ones.
#[test]
fn random_operations_match_a_model_of_durable_and_current_bytes() {
    let Some(fx) = Fixture::new() else { return };
    let mut rng = fastrand::Rng::with_seed(7);
    let names = ["x", "y", "z"];
    let files: Vec<File> = names.iter().map(|n| open(&fx.at(n))).collect();
    for f in &files {
        f.sync_all().unwrap();
    }
    let mut durable = vec![Vec::<u8>::new(); names.len()];
    let mut current = durable.clone();
    for step in 0..600 {
        let i = rng.usize(..names.len());
        match rng.u8(..10) {
            0..=4 => {
                let at = rng.usize(..20_000);
                let data: Vec<u8> = (0..rng.usize(1..9_000)).map(|_| rng.u8(..)).collect();
                files[i].write_all_at(&data, at as u64).unwrap();
                let end = at + data.len();
                if current[i].len() < end {
                    current[i].resize(end, 0);
                }
                current[i][at..end].copy_from_slice(&data);
            }
            5 | 6 => {
                let size = rng.usize(..20_000);
                files[i].set_len(size as u64).unwrap();
                current[i].resize(size, 0);
            }
            7 | 8 => {
                files[i].sync_all().unwrap();
                durable[i] = current[i].clone();
            }
            _ => {
                fx.fs.control.drop_unsynced();
                current = durable.clone();
            }
        }
        for (j, name) in names.iter().enumerate() {
            let read = std::fs::read(fx.at(name)).unwrap();
            assert!(
                read == current[j],
                "step {step}: {name} does not read as written"
            );
            assert!(
                fx.disk(name) == durable[j],
                "step {step}: {name} on disk is not what was synced"
            );
        }
    }
    assert!(fx.fs.control.dropped().0 > 10, "the run dropped");
}
