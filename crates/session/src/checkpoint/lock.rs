//! One run per live folder: an OS lock on the folder, and who holds it.

use std::path::Path;

use crate::error::SessionError;

/// Takes the folder's lock: an OS lock (`flock`) on the folder itself, released when the
/// process ends, even by `kill -9`, and leaving no file behind. Two runs never write one
/// folder at once: the second is refused, naming the first's process where the system says
/// (Linux: `/proc/locks`).
pub fn lock_folder(dir: &Path) -> Result<std::fs::File, SessionError> {
    let f = std::fs::File::open(dir).map_err(|e| {
        SessionError::usage(format!("checkpoint folder {}: cannot open it to lock it: {e}", dir.display()))
    })?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            let who = lock_holder(dir).map_or_else(|| "another process".to_string(), |p| format!("process {p}"));
            Err(SessionError::usage(format!(
                "checkpoint folder {}: in use by another crossbow run ({who}); two runs never write one folder at once: wait for it to end, or use another folder",
                dir.display()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(SessionError::usage(format!("checkpoint folder {}: cannot lock it: {e}", dir.display())))
        }
    }
}

/// The process holding an `flock` on `path`, from `/proc/locks` (Linux; `None` elsewhere).
pub fn lock_holder(path: &Path) -> Option<u32> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(path).ok()?.ino();
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF": pid, then major:minor:inode.
        locks.lines().find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (pid, id) = (f.get(4)?, f.get(5)?);
            (f.get(1) == Some(&"FLOCK") && id.rsplit(':').next()?.parse::<u64>().ok()? == ino)
                .then(|| pid.parse().ok())
                .flatten()
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}
