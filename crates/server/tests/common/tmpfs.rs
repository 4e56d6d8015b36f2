//! Small filesystems for tests of a full disk (root only).

use std::process::Command;

/// A tmpfs of a given size, unmounted when dropped.
pub struct Tmpfs(pub std::path::PathBuf);

impl Tmpfs {
    /// A new tmpfs in a temporary directory; `None` where mounting is
    /// not allowed (not root).
    pub fn mount(size: &str) -> Option<Tmpfs> {
        Tmpfs::mount_at(tempfile::tempdir().unwrap().keep(), size)
    }

    /// A tmpfs mounted on `dir` (made if missing).
    pub fn mount_at(dir: std::path::PathBuf, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }

    pub fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}
