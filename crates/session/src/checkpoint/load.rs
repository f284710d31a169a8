//! Finding and reading the checkpoint a run resumes from (or a rollback goes back to),
//! on one process or as rank 0 of several.

use std::path::{Path, PathBuf};

use crossbow_replica::ProcessGroup;
use crossbow_replica::checkpoint::CheckpointFile;

use super::lines::{Entry, LineHead, lines_in, list};
use crate::error::SessionError;

/// Reads the checkpoint `path` names: a file, or the newest good checkpoint in a folder
/// (a damaged newer one is skipped with a warning through `warn`). A folder holding several
/// lines of one run resumes the line written last (the others are named through `warn`); a
/// folder holding several runs is refused, listing them: name a file instead.
pub fn load(path: &Path, warn: &mut dyn FnMut(String)) -> Result<(PathBuf, CheckpointFile), SessionError> {
    let meta = std::fs::metadata(path).map_err(|e| SessionError::usage(format!("--resume {}: {e}", path.display())))?;
    if !meta.is_dir() {
        let f = CheckpointFile::read(path).map_err(|e| SessionError::usage(format!("--resume: {e}")))?;
        return Ok((path.to_path_buf(), f));
    }
    let all = list(path)?;
    if all.is_empty() {
        return Err(SessionError::usage(format!(
            "--resume {}: the folder has no checkpoints (ckpt-*.safetensors)",
            path.display()
        )));
    }
    let mut heads = lines_in(path)?;
    let mut runs: Vec<&str> = heads.iter().filter_map(|h| h.run.as_deref()).collect();
    runs.sort_unstable();
    runs.dedup();
    if runs.len() > 1 {
        let mut by_run: Vec<&LineHead> = vec![];
        for h in &heads {
            if h.run.is_some() && !by_run.iter().any(|b| b.run == h.run) {
                by_run.push(h);
            }
        }
        return Err(SessionError::usage(format!(
            "--resume {}: the folder holds the checkpoints of {} runs ({}); resume one of them by naming its file",
            path.display(),
            runs.len(),
            by_run.iter().map(|h| h.describe()).collect::<Vec<_>>().join("; ")
        )));
    }
    // The line written last (untagged files of an older version: each its own line).
    heads.sort_by(|a, b| b.written.total_cmp(&a.written).then(b.head.iteration.cmp(&a.head.iteration)));
    let chosen = heads[0].tag.clone();
    let others: Vec<String> = heads
        .iter()
        .skip(1)
        .filter(|h| h.tag.is_some() && h.tag != chosen)
        .map(|h| format!("{} (iteration {})", h.head.path.display(), h.head.iteration))
        .collect();
    if chosen.is_some() && !others.is_empty() {
        warn(format!(
            "{} holds {} lines of this run; resuming the one written last (line '{}'); the others' newest: {} (resume one by naming its file)",
            path.display(),
            others.len() + 1,
            chosen.as_deref().unwrap_or(""),
            others.join(", ")
        ));
    }
    let candidates: Vec<&Entry> = match &chosen {
        Some(t) => all.iter().filter(|e| e.tag.as_deref() == Some(t.as_str())).collect(),
        None => all.iter().filter(|e| e.tag.is_none()).collect(),
    };
    for e in &candidates {
        match CheckpointFile::read(&e.path) {
            Ok(f) => return Ok((e.path.clone(), f)),
            Err(err) => warn(format!("skipping a damaged checkpoint: {err}")),
        }
    }
    Err(SessionError::usage(format!(
        "--resume {}: none of the {} checkpoints of the line it would resume is readable",
        path.display(),
        candidates.len()
    )))
}

/// [`load`] in a job of several ranks (a collective): rank 0 reads the checkpoint (the
/// newest good one of a folder) and broadcasts it, so that every rank starts from the same
/// file even when a newer one appears meanwhile, and the other ranks need no access to rank
/// 0's disk (servers without a shared file system). An error on rank 0 is every rank's.
pub fn load_in_world(
    path: &Path,
    world: &dyn ProcessGroup,
    warn: &mut dyn FnMut(String),
) -> Result<(PathBuf, CheckpointFile), SessionError> {
    if world.size() <= 1 {
        return load(path, warn);
    }
    from_rank0(path, world, || load(path, warn))
}

/// The checkpoint rank 0 finds with `find` (called on rank 0 only), on every rank: rank 0
/// broadcasts the file (or its error, which every rank then returns). A collective; `what`
/// names the checkpoint in errors.
pub fn from_rank0(
    what: &Path,
    world: &dyn ProcessGroup,
    find: impl FnOnce() -> Result<(PathBuf, CheckpointFile), SessionError>,
) -> Result<(PathBuf, CheckpointFile), SessionError> {
    if world.size() <= 1 {
        return find();
    }
    // Rank 0 sends: 1, the path's length (8 bytes), the path, the file; or 0 (a usage error)
    // or 2 (any other) and the message.
    let mut buf = Vec::new();
    if world.rank() == 0 {
        match find().and_then(|(p, f)| Ok((p, f.to_bytes().map_err(|e| SessionError::run(e.to_string()))?))) {
            Ok((p, bytes)) => {
                let name = p.to_string_lossy().into_owned().into_bytes();
                buf.push(1);
                buf.extend_from_slice(&(name.len() as u64).to_le_bytes());
                buf.extend_from_slice(&name);
                buf.extend_from_slice(&bytes);
            }
            Err(e) => {
                buf.push(if e.is_usage() { 0 } else { 2 });
                buf.extend_from_slice(e.to_string().as_bytes());
            }
        }
    }
    world.broadcast_bytes(0, &mut buf)?;
    let bad = || SessionError::run(format!("{}: the checkpoint broadcast by rank 0 is garbled", what.display()));
    match buf.split_first() {
        Some((1, rest)) if rest.len() >= 8 => {
            let (len, rest) = rest.split_at(8);
            let len = u64::from_le_bytes(len.try_into().map_err(|_| bad())?) as usize;
            if rest.len() < len {
                return Err(bad());
            }
            let (name, bytes) = rest.split_at(len);
            let p = PathBuf::from(String::from_utf8_lossy(name).into_owned());
            let f = CheckpointFile::from_bytes(&p, bytes).map_err(|e| SessionError::usage(format!("--resume: {e}")))?;
            Ok((p, f))
        }
        Some((0, msg)) => Err(SessionError::usage(format!("{} (rank 0)", String::from_utf8_lossy(msg)))),
        Some((2, msg)) => Err(SessionError::run(format!("{} (rank 0)", String::from_utf8_lossy(msg)))),
        _ => Err(bad()),
    }
}
