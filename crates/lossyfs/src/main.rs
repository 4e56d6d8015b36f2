//! `flotilla-lossyfs ROOT MOUNTPOINT`: mounts ROOT at MOUNTPOINT through
//! lossyfs until SIGTERM or SIGINT. SIGUSR1 is the power cut: every write
//! not yet fsynced is dropped (and the bytes dropped are printed).

use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [root, mountpoint] = args.as_slice() else {
        eprintln!("usage: flotilla-lossyfs ROOT MOUNTPOINT");
        std::process::exit(2);
    };
    // Blocked in every thread (the filesystem's is spawned after), and
    // taken here one at a time.
    // SAFETY: sigset operations on a zeroed set we own.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in [libc::SIGUSR1, libc::SIGTERM, libc::SIGINT] {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    let mounted = match lossyfs::mount(&PathBuf::from(root), &PathBuf::from(mountpoint)) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("flotilla-lossyfs: cannot mount {root} at {mountpoint}: {e}");
            std::process::exit(1);
        }
    };
    println!("mounted {root} at {mountpoint}");
    loop {
        let mut sig = 0;
        // SAFETY: waits on the set blocked above.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        if sig == libc::SIGUSR1 {
            let bytes = mounted.control.drop_unsynced();
            println!("dropped {bytes} unsynced bytes");
            continue;
        }
        break;
    }
    if let Err(e) = mounted.unmount() {
        eprintln!("flotilla-lossyfs: unmount: {e}");
        std::process::exit(1);
    }
}
