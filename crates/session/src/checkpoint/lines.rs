//! Whose a checkpoint is: runs and their lines, file names, the folder's checkpoints listed
//! by their headers, and the owner check that keeps one run's folder its own.

use std::path::{Path, PathBuf};

use crossbow_replica::checkpoint::CheckpointFile;
use serde::{Deserialize, Serialize};

use crate::error::SessionError;

/// Which run wrote a checkpoint, and which line of that run's checkpoints it belongs to.
///
/// A run gets an id when it starts and keeps it across resumes. Its checkpoints form lines:
/// the files one process after another writes by continuing the newest checkpoint. Each line
/// has a tag, part of every file name (`ckpt-<iteration>-<tag>.safetensors`), so a run
/// rotates only the files of its own line, and a resume from an older checkpoint (a branch)
/// or a rollback starts a new line instead of overwriting the newer files of the old one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    /// The run's id (16 hex digits).
    pub run: String,
    /// The line's tag (8 hex digits).
    pub tag: String,
}

impl Line {
    /// A new run and its first line.
    pub fn new_run() -> Self {
        Line { run: fresh_id(16), tag: fresh_id(8) }
    }

    /// A new line of the same run.
    pub fn branch(&self) -> Self {
        let mut tag = fresh_id(8);
        while tag == self.tag {
            tag = fresh_id(8);
        }
        Line { run: self.run.clone(), tag }
    }

    /// The line a checkpoint's state names (none for checkpoints written before runs had ids).
    pub fn of_state(state: &serde_json::Value) -> Option<Self> {
        serde_json::from_value(state.get("line")?.clone()).ok()
    }
}

/// `n` hex digits from the clock, the process id and a per-process counter, mixed: distinct
/// across processes and calls without a random-number crate.
pub(super) fn fresh_id(n: usize) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    let hex = format!("{:016x}{:016x}", h.finish(), h.finish().rotate_left(29) ^ 0x9E37_79B9_7F4A_7C15);
    hex[..n.min(32)].to_string()
}

/// The file name of line `tag`'s checkpoint after `iteration` iterations.
pub fn file_name(iteration: u64, tag: &str) -> String {
    format!("ckpt-{iteration:010}-{tag}.safetensors")
}

/// The iteration and line tag of a checkpoint file name, if it is one (files written before
/// checkpoints had tags, `ckpt-<iteration>.safetensors`, have none).
pub(super) fn parse_name(name: &str) -> Option<(u64, Option<String>)> {
    let core = name.strip_prefix("ckpt-")?.strip_suffix(".safetensors")?;
    match core.split_once('-') {
        None => Some((core.parse().ok()?, None)),
        Some((i, tag)) if !tag.is_empty() && tag.chars().all(|c| c.is_ascii_alphanumeric()) => {
            Some((i.parse().ok()?, Some(tag.to_string())))
        }
        Some(_) => None,
    }
}

/// One checkpoint file of a folder, identified by its contents: the iteration and line its
/// header names (a file copied or renamed into the folder under another line's name is its
/// own line's, not the name's), or, for a file whose header cannot be read, what its name says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Iterations it holds.
    pub iteration: u64,
    /// Its line's tag (none for untagged files of older versions).
    pub tag: Option<String>,
    /// The run its header names (none: an older version, or a header that cannot be read).
    pub run: Option<String>,
    /// The file.
    pub path: PathBuf,
}

/// The checkpoints in `dir`, newest (highest iteration) first.
pub fn list(dir: &Path) -> Result<Vec<Entry>, SessionError> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| SessionError::usage(format!("checkpoint folder {}: cannot list it: {e}", dir.display())))?;
    let mut out: Vec<Entry> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let (named_at, named_tag) = parse_name(&e.file_name().to_string_lossy())?;
            let path = e.path();
            let state = CheckpointFile::read_state(&path).ok();
            let line = state.as_ref().and_then(Line::of_state);
            let iteration =
                state.as_ref().and_then(|s| s.get("iteration")).and_then(|v| v.as_u64()).unwrap_or(named_at);
            // The header's line when it has one; a readable header of an older version (no
            // line) is untagged whatever its name; an unreadable one goes by its name.
            let tag = match (&state, &line) {
                (_, Some(l)) => Some(l.tag.clone()),
                (Some(_), None) => None,
                (None, _) => named_tag,
            };
            Some(Entry { iteration, tag, run: line.map(|l| l.run), path })
        })
        .collect();
    out.sort_by(|a, b| b.iteration.cmp(&a.iteration).then_with(|| b.path.cmp(&a.path)));
    Ok(out)
}

/// The newest file of one line of a folder, and what its header says.
#[derive(Clone, Debug)]
pub struct LineHead {
    /// The line's tag (none: one untagged file of an older version).
    pub tag: Option<String>,
    /// The run that wrote it (none: untagged, or a header that cannot be read).
    pub run: Option<String>,
    /// The line's newest file.
    pub head: Entry,
    /// When the head was written (seconds since 1970, from its state or the file's time).
    pub written: f64,
    /// Model, dataset and seed, for messages.
    pub what: String,
}

impl LineHead {
    /// `run 3f2a… (resnet20 on cifar10, seed 2), newest ckpt-… at iteration 481`.
    pub fn describe(&self) -> String {
        let run = match &self.run {
            Some(r) => format!("run {r}"),
            None => "a run of an older version".into(),
        };
        format!("{run} ({}), newest {} at iteration {}", self.what, self.head.path.display(), self.head.iteration)
    }
}

/// Every line of `dir`: its newest file, and what the newest readable header of the line says
/// (a damaged newest file does not hide whose line it is). Untagged files: each its own line.
pub fn lines_in(dir: &Path) -> Result<Vec<LineHead>, SessionError> {
    let all = list(dir)?;
    let mut heads: Vec<LineHead> = vec![];
    for e in &all {
        if e.tag.is_some() && heads.iter().any(|h| h.tag == e.tag) {
            continue;
        }
        // This line's files, newest first: the first whose header reads tells the run.
        let line_files: Vec<&Entry> = match &e.tag {
            Some(t) => all.iter().filter(|x| x.tag.as_deref() == Some(t.as_str())).collect(),
            None => vec![e],
        };
        let read = line_files.iter().find_map(|x| CheckpointFile::read_state(&x.path).ok());
        let mtime = std::fs::metadata(&e.path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0.0, |d| d.as_secs_f64());
        let written = read.as_ref().and_then(|s| s.get("written_at")).and_then(|v| v.as_f64()).unwrap_or(mtime);
        let line = read.as_ref().and_then(Line::of_state);
        let what = read.as_ref().map_or_else(
            || "no readable header".to_string(),
            |s| {
                let c = s.get("config");
                let get = |k: &str| c.and_then(|c| c.get(k)).map(|v| v.to_string().trim_matches('"').to_string());
                format!(
                    "{} on {}, seed {}",
                    get("model").unwrap_or_else(|| "?".into()),
                    get("dataset").unwrap_or_else(|| "?".into()),
                    get("seed").unwrap_or_else(|| "?".into())
                )
            },
        );
        heads.push(LineHead { tag: e.tag.clone(), run: line.map(|l| l.run), head: e.clone(), written, what });
    }
    Ok(heads)
}

/// Refuses to write `line`'s checkpoints into `dir` when `dir` holds checkpoints of another
/// run, unless `share` (each run rotates only its own files, so sharing is safe when asked
/// for). Untagged files of older versions, and files whose header cannot be read, name no
/// run and are never counted (nor rotated, unless they carry this line's tag).
pub fn check_owner(dir: &Path, line: &Line, share: bool, flag: &str) -> Result<(), SessionError> {
    if share || !dir.is_dir() {
        return Ok(());
    }
    // (A file whose header cannot be read names no run: it is not counted either.)
    let others: Vec<LineHead> = lines_in(dir)?
        .into_iter()
        .filter(|h| h.tag.is_some() && h.run.as_ref().is_some_and(|r| *r != line.run))
        .collect();
    if let Some(o) = others.first() {
        return Err(SessionError::usage(format!(
            "{flag} {}: holds the checkpoints of another run ({}{}); this run is {}: use another folder, or --share-checkpoint-dir to keep both runs' checkpoints there (each run rotates only its own files)",
            dir.display(),
            o.describe(),
            if others.len() > 1 { format!(", and {} more", others.len() - 1) } else { String::new() },
            line.run
        )));
    }
    Ok(())
}

/// The line a run resumed from `file` (read from `resumed`) continues in `dir`: the file's
/// own line when no newer checkpoint of that line is in `dir`, else a new line of the same
/// run (a branch: the newer checkpoints stay as they are). A checkpoint of an older version
/// (no run id) starts a new run id. The note says what was decided, when it is not simply
/// "continue".
pub fn line_for_resume(state: &serde_json::Value, resumed: &Path, dir: &Path) -> (Line, Option<String>) {
    let Some(line) = Line::of_state(state) else {
        return (Line::new_run(), Some("the checkpoint names no run (an older version): its checkpoints are written as a new run; the older files are never rotated".into()));
    };
    let at = state.get("iteration").and_then(|v| v.as_u64()).unwrap_or(0);
    let newer = list(dir)
        .unwrap_or_default()
        .into_iter()
        .find(|e| e.tag.as_deref() == Some(line.tag.as_str()) && e.iteration > at);
    match newer {
        None => (line, None),
        Some(e) => {
            let b = line.branch();
            let note = format!(
                "{} (iteration {at}) is older than its line's newest checkpoint {} (iteration {}): this run continues as a new line '{}' of run {}, and the newer checkpoints stay",
                resumed.display(),
                e.path.display(),
                e.iteration,
                b.tag,
                b.run
            );
            (b, Some(note))
        }
    }
}
