//! Checkpoints of a training run: the flags, the background writer that keeps the last few
//! files in a folder, and finding the newest good one to resume from.
//!
//! A checkpoint is written in two steps: the training thread downloads every buffer (the only
//! pause training sees), then a writer thread serialises the file, writes it next to its final
//! name, syncs it, renames it into place and syncs the folder
//! ([`crossbow_replica::checkpoint::write_atomic`]), and only then deletes checkpoints beyond
//! `--keep-checkpoints`. A crash, a `kill -9` or a full disk at any moment therefore leaves
//! every earlier checkpoint whole; what it loses is the work since the last one.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use crossbow_replica::ProcessGroup;
use crossbow_replica::checkpoint::{CheckpointError, CheckpointFile, write_atomic};
use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The checkpoint and divergence settings of a run, as given (flags or config-file keys, see
/// [`crate::settings`]); [`CheckpointArgs::resolve`] turns them, with a resumed run's saved
/// policies, into the policies the run uses.
#[derive(Clone, Debug, Default)]
pub struct CheckpointArgs {
    /// `--checkpoint-dir`.
    pub checkpoint_dir: Option<PathBuf>,
    /// `--checkpoint-every`.
    pub checkpoint_every: Option<Every>,
    /// `--keep-checkpoints`.
    pub keep_checkpoints: Option<usize>,
    /// `--checkpoint-errors`.
    pub checkpoint_errors: Option<OnWriteError>,
    /// `--on-divergence`.
    pub on_divergence: Option<OnDivergence>,
    /// `--max-rollbacks`.
    pub max_rollbacks: Option<u32>,
    /// `--share-checkpoint-dir`.
    pub share_checkpoint_dir: bool,
}

impl CheckpointArgs {
    /// The checkpoint settings of `cfg`.
    pub fn of(cfg: &crate::config::TrainConfig) -> Self {
        CheckpointArgs {
            checkpoint_dir: cfg.checkpoint_dir.clone(),
            checkpoint_every: cfg.checkpoint_every,
            keep_checkpoints: cfg.keep_checkpoints,
            checkpoint_errors: cfg.checkpoint_errors,
            on_divergence: cfg.on_divergence,
            max_rollbacks: cfg.max_rollbacks,
            share_checkpoint_dir: cfg.share_checkpoint_dir,
        }
    }
}

/// How often checkpoints are written.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Every {
    /// Every this many iterations.
    Iterations(u64),
    /// Every this many seconds of wall time.
    Seconds(f64),
}

/// The longest checkpoint interval in minutes (about two years).
const MAX_MINUTES: f64 = 1e6;

impl FromStr for Every {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad =
            || format!("'{s}' must be a whole number of iterations >= 1 (e.g. 500) or of minutes with 'm' (e.g. 10m)");
        let t = s.trim();
        if let Some(m) = t.strip_suffix('m') {
            match m.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 && v <= MAX_MINUTES => Ok(Every::Seconds(v * 60.0)),
                Ok(v) if v > MAX_MINUTES => Err(format!("'{s}': at most {MAX_MINUTES} minutes (about two years)")),
                _ => Err(bad()),
            }
        } else {
            match t.parse::<u64>() {
                Ok(n) if n >= 1 => Ok(Every::Iterations(n)),
                _ => Err(bad()),
            }
        }
    }
}

impl std::fmt::Display for Every {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Every::Iterations(n) => write!(f, "{n}"),
            Every::Seconds(s) => write!(f, "{}m", s / 60.0),
        }
    }
}

/// What a failed checkpoint write does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnWriteError {
    /// Report it (terminal and metrics file) and keep training.
    Warn,
    /// Stop the run with the error.
    Fatal,
}

impl FromStr for OnWriteError {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "warn" => Ok(OnWriteError::Warn),
            "fatal" => Ok(OnWriteError::Fatal),
            o => Err(format!("'{o}' must be 'warn' or 'fatal'")),
        }
    }
}

impl std::fmt::Display for OnWriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OnWriteError::Warn => "warn",
            OnWriteError::Fatal => "fatal",
        })
    }
}

/// What a diverged run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnDivergence {
    /// Stop with a message naming the iteration, the learner and the last good checkpoint.
    Stop,
    /// Reload the last good checkpoint with the learning rate halved.
    Rollback,
}

impl FromStr for OnDivergence {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "stop" => Ok(OnDivergence::Stop),
            "rollback" => Ok(OnDivergence::Rollback),
            o => Err(format!("'{o}' must be 'stop' or 'rollback'")),
        }
    }
}

impl std::fmt::Display for OnDivergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OnDivergence::Stop => "stop",
            OnDivergence::Rollback => "rollback",
        })
    }
}

/// Where and how often checkpoints are written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointPolicy {
    /// The folder (on resume: the folder resumed from, unless `--checkpoint-dir` names
    /// another; the folder saved in a checkpoint is never used again).
    pub dir: PathBuf,
    /// How often.
    pub every: Every,
    /// How many to keep, >= 1.
    pub keep: usize,
    /// What a failed write does.
    pub on_error: OnWriteError,
    /// The folder may hold other runs' checkpoints (`--share-checkpoint-dir`).
    #[serde(default)]
    pub share: bool,
}

/// Divergence handling.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DivergencePolicy {
    /// Stop or roll back.
    pub action: OnDivergence,
    /// Most rollbacks in a run.
    pub max_rollbacks: u32,
}

impl CheckpointArgs {
    /// The policies these flags ask for. `saved` are a resumed run's (used where a flag is
    /// not given), `resumed_from` the checkpoint file resumed (its folder is the default).
    pub fn resolve(
        &self,
        saved: Option<(&Option<CheckpointPolicy>, &DivergencePolicy)>,
        resumed_from: Option<&Path>,
    ) -> Result<(Option<CheckpointPolicy>, DivergencePolicy), CliError> {
        let saved_ckpt = saved.and_then(|(c, _)| c.clone());
        // A resumed run writes where it was resumed from (or where it is told): the folder
        // saved in the checkpoint may have been moved, copied, or reused by another run.
        let dir = self.checkpoint_dir.clone().or_else(|| {
            resumed_from.map(|p| match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            })
        });
        let every =
            self.checkpoint_every.or_else(|| saved_ckpt.as_ref().map(|c| c.every)).unwrap_or(Every::Seconds(600.0));
        let keep = self.keep_checkpoints.or(saved_ckpt.as_ref().map(|c| c.keep)).unwrap_or(3).max(1);
        let on_error =
            self.checkpoint_errors.or_else(|| saved_ckpt.as_ref().map(|c| c.on_error)).unwrap_or(OnWriteError::Warn);
        let saved_div = saved.map(|(_, d)| *d);
        let action = self.on_divergence.or_else(|| saved_div.map(|d| d.action)).unwrap_or(OnDivergence::Stop);
        let max_rollbacks = self.max_rollbacks.or(saved_div.map(|d| d.max_rollbacks)).unwrap_or(3);
        if dir.is_none() {
            for (given, flag) in [
                (self.checkpoint_every.is_some(), "--checkpoint-every"),
                (self.keep_checkpoints.is_some(), "--keep-checkpoints"),
                (self.checkpoint_errors.is_some(), "--checkpoint-errors"),
            ] {
                if given {
                    return Err(CliError::usage(format!("{flag} needs --checkpoint-dir")));
                }
            }
            if action == OnDivergence::Rollback {
                return Err(CliError::usage(
                    "--on-divergence rollback needs --checkpoint-dir (it reloads the last checkpoint)",
                ));
            }
        }
        let share = self.share_checkpoint_dir || saved_ckpt.as_ref().is_some_and(|c| c.share);
        if dir.is_none() && self.share_checkpoint_dir {
            return Err(CliError::usage("--share-checkpoint-dir needs --checkpoint-dir"));
        }
        let policy = dir.map(|dir| CheckpointPolicy { dir, every, keep, on_error, share });
        Ok((policy, DivergencePolicy { action, max_rollbacks }))
    }
}

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
fn fresh_id(n: usize) -> String {
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
fn parse_name(name: &str) -> Option<(u64, Option<String>)> {
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
pub fn list(dir: &Path) -> Result<Vec<Entry>, CliError> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| CliError::usage(format!("checkpoint folder {}: cannot list it: {e}", dir.display())))?;
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
pub fn lines_in(dir: &Path) -> Result<Vec<LineHead>, CliError> {
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
pub fn check_owner(dir: &Path, line: &Line, share: bool, flag: &str) -> Result<(), CliError> {
    if share || !dir.is_dir() {
        return Ok(());
    }
    // (A file whose header cannot be read names no run: it is not counted either.)
    let others: Vec<LineHead> = lines_in(dir)?
        .into_iter()
        .filter(|h| h.tag.is_some() && h.run.as_ref().is_some_and(|r| *r != line.run))
        .collect();
    if let Some(o) = others.first() {
        return Err(CliError::usage(format!(
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

/// Reads the checkpoint `path` names: a file, or the newest good checkpoint in a folder
/// (a damaged newer one is skipped with a warning through `warn`). A folder holding several
/// lines of one run resumes the line written last (the others are named through `warn`); a
/// folder holding several runs is refused, listing them: name a file instead.
pub fn load(path: &Path, warn: &mut dyn FnMut(String)) -> Result<(PathBuf, CheckpointFile), CliError> {
    let meta = std::fs::metadata(path).map_err(|e| CliError::usage(format!("--resume {}: {e}", path.display())))?;
    if !meta.is_dir() {
        let f = CheckpointFile::read(path).map_err(|e| CliError::usage(format!("--resume: {e}")))?;
        return Ok((path.to_path_buf(), f));
    }
    let all = list(path)?;
    if all.is_empty() {
        return Err(CliError::usage(format!(
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
        return Err(CliError::usage(format!(
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
    Err(CliError::usage(format!(
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
) -> Result<(PathBuf, CheckpointFile), CliError> {
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
    find: impl FnOnce() -> Result<(PathBuf, CheckpointFile), CliError>,
) -> Result<(PathBuf, CheckpointFile), CliError> {
    if world.size() <= 1 {
        return find();
    }
    // Rank 0 sends: 1, the path's length (8 bytes), the path, the file; or 0 (a usage error)
    // or 2 (any other) and the message.
    let mut buf = Vec::new();
    if world.rank() == 0 {
        match find().and_then(|(p, f)| Ok((p, f.to_bytes().map_err(|e| CliError::run(e.to_string()))?))) {
            Ok((p, bytes)) => {
                let name = p.to_string_lossy().into_owned().into_bytes();
                buf.push(1);
                buf.extend_from_slice(&(name.len() as u64).to_le_bytes());
                buf.extend_from_slice(&name);
                buf.extend_from_slice(&bytes);
            }
            Err(e) => {
                buf.push(if matches!(e, CliError::Usage(_)) { 0 } else { 2 });
                buf.extend_from_slice(e.to_string().as_bytes());
            }
        }
    }
    world.broadcast_bytes(0, &mut buf)?;
    let bad = || CliError::run(format!("{}: the checkpoint broadcast by rank 0 is garbled", what.display()));
    match buf.split_first() {
        Some((1, rest)) if rest.len() >= 8 => {
            let (len, rest) = rest.split_at(8);
            let len = u64::from_le_bytes(len.try_into().map_err(|_| bad())?) as usize;
            if rest.len() < len {
                return Err(bad());
            }
            let (name, bytes) = rest.split_at(len);
            let p = PathBuf::from(String::from_utf8_lossy(name).into_owned());
            let f = CheckpointFile::from_bytes(&p, bytes).map_err(|e| CliError::usage(format!("--resume: {e}")))?;
            Ok((p, f))
        }
        Some((0, msg)) => Err(CliError::usage(format!("{} (rank 0)", String::from_utf8_lossy(msg)))),
        Some((2, msg)) => Err(CliError::run(format!("{} (rank 0)", String::from_utf8_lossy(msg)))),
        _ => Err(bad()),
    }
}

/// What the writer thread reports.
#[derive(Debug)]
pub enum Written {
    /// The checkpoint of `iteration` is safely at `path`, after `seconds` of writing.
    Ok {
        /// Iterations it holds.
        iteration: u64,
        /// Where it is.
        path: PathBuf,
        /// Seconds the writer thread took.
        seconds: f64,
        /// Bytes written.
        bytes: u64,
    },
    /// Writing the checkpoint of `iteration` failed; earlier checkpoints are untouched.
    Failed {
        /// Iterations it would have held.
        iteration: u64,
        /// Why.
        error: String,
    },
    /// The checkpoint of `iteration` was not written: a newer one superseded it while it
    /// waited (the run was stopping, see [`Checkpointer::supersede`]).
    Skipped {
        /// Iterations it would have held.
        iteration: u64,
    },
}

struct Job {
    iteration: u64,
    tag: String,
    file: CheckpointFile,
}

/// Writes checkpoints from a background thread into a policy's folder.
pub struct Checkpointer {
    policy: CheckpointPolicy,
    line: Line,
    /// The folder's lock, held while the run lives (see [`lock_folder`]).
    _lock: std::fs::File,
    jobs: Option<Sender<Job>>,
    done: Receiver<Written>,
    thread: Option<JoinHandle<()>>,
    pending: usize,
    /// The iteration of the last checkpoint handed to the writer by this process.
    submitted: Option<u64>,
    last_iteration: u64,
    last_time: Instant,
    last_good: Option<(u64, PathBuf)>,
    /// Waiting checkpoints of iterations before this are skipped (the run is stopping).
    skip_before: Arc<AtomicU64>,
    /// Failed writes since the last good one, and in all.
    failing: u64,
    failed: u64,
}

/// A test hook: `CROSSBOW_FAULT_CHECKPOINT_WRITE=N` makes the N-th and later checkpoint
/// writes of the process fail as a full disk would (for the tests of `--checkpoint-errors`).
const FAULT_ENV: &str = "CROSSBOW_FAULT_CHECKPOINT_WRITE";

/// A test hook: `CROSSBOW_TEST_SLOW_CHECKPOINT_MS=N` makes every checkpoint write take N ms
/// longer (large checkpoints on a slow disk, for the test of a stop while writes queue up).
const SLOW_ENV: &str = "CROSSBOW_TEST_SLOW_CHECKPOINT_MS";

impl Checkpointer {
    /// Creates the folder if needed, checks that a file can be written in it (before any
    /// training) and that it holds no other run's checkpoints (unless the policy shares it),
    /// removes temporary files a killed writer left, and starts the writer for `line`.
    pub fn start(policy: CheckpointPolicy, resumed_at: u64, line: Line) -> Result<Self, CliError> {
        let dir = &policy.dir;
        if dir.exists() && !dir.is_dir() {
            return Err(CliError::usage(format!("--checkpoint-dir {}: exists and is not a folder", dir.display())));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::usage(format!("--checkpoint-dir {}: cannot create it: {e}", dir.display())))?;
        let lock = lock_folder(dir)?;
        let probe = dir.join(".crossbow-write-test");
        std::fs::write(&probe, b"ok")
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(|e| CliError::usage(format!("--checkpoint-dir {}: cannot write in it: {e}", dir.display())))?;
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.starts_with(".ckpt-") && n.ends_with(".safetensors.tmp") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        check_owner(dir, &line, policy.share, "--checkpoint-dir")?;
        // The newest whole checkpoint of this run found at the start (rollback's fallback).
        let last_good = list(dir)?
            .into_iter()
            .find(|e| {
                e.tag.as_deref() == Some(line.tag.as_str())
                    || CheckpointFile::read_state(&e.path)
                        .ok()
                        .and_then(|s| Line::of_state(&s))
                        .is_some_and(|l| l.run == line.run)
            })
            .map(|e| (e.iteration, e.path));
        let (jobs, rx) = crossbeam_channel::bounded::<Job>(1);
        let (tx, done) = crossbeam_channel::unbounded::<Written>();
        let fault_from: Option<u64> = std::env::var(FAULT_ENV).ok().and_then(|v| v.parse().ok());
        let slow: Option<u64> = std::env::var(SLOW_ENV).ok().and_then(|v| v.parse().ok());
        let (dir2, keep) = (dir.clone(), policy.keep);
        let skip_before = Arc::new(AtomicU64::new(0));
        let skip = Arc::clone(&skip_before);
        let thread = std::thread::Builder::new()
            .name("crossbow-checkpoint".into())
            .spawn(move || {
                for (n, job) in rx.into_iter().enumerate() {
                    if job.iteration < skip.load(Ordering::SeqCst) {
                        if tx.send(Written::Skipped { iteration: job.iteration }).is_err() {
                            break;
                        }
                        continue;
                    }
                    let count = n as u64 + 1;
                    let t0 = Instant::now();
                    if let Some(ms) = slow {
                        std::thread::sleep(Duration::from_millis(ms));
                    }
                    let path = dir2.join(file_name(job.iteration, &job.tag));
                    let result = if fault_from.is_some_and(|n| count >= n) {
                        Err(format!(
                            "checkpoint {}: cannot write: No space left on device (injected by {FAULT_ENV})",
                            path.display()
                        ))
                    } else {
                        job.file
                            .to_bytes()
                            .and_then(|b| write_atomic(&path, &b).map(|_| b.len() as u64))
                            .map_err(|e: CheckpointError| e.to_string())
                    };
                    let msg = match result {
                        Ok(bytes) => {
                            rotate(&dir2, keep, &job.tag, job.iteration);
                            Written::Ok { iteration: job.iteration, path, seconds: t0.elapsed().as_secs_f64(), bytes }
                        }
                        Err(error) => Written::Failed { iteration: job.iteration, error },
                    };
                    if tx.send(msg).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| CliError::run(format!("cannot start the checkpoint writer thread: {e}")))?;
        Ok(Checkpointer {
            policy,
            line,
            _lock: lock,
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            pending: 0,
            submitted: None,
            last_iteration: resumed_at,
            last_time: Instant::now(),
            last_good,
            skip_before,
            failing: 0,
            failed: 0,
        })
    }

    /// The policy.
    pub fn policy(&self) -> &CheckpointPolicy {
        &self.policy
    }

    /// The run and line the checkpoints are written as.
    pub fn line(&self) -> &Line {
        &self.line
    }

    /// Continues as `line` from the next checkpoint on (a rollback starts a new line, so the
    /// checkpoints after the one it went back to stay as they are).
    pub fn set_line(&mut self, line: Line) {
        self.line = line;
    }

    /// The newest checkpoint known to be whole (written by this run, or found at the start).
    pub fn last_good(&self) -> Option<&Path> {
        self.last_good.as_ref().map(|(_, p)| p.as_path())
    }

    /// The iteration of [`Checkpointer::last_good`].
    pub fn last_good_iteration(&self) -> Option<u64> {
        self.last_good.as_ref().map(|(i, _)| *i)
    }

    /// The iteration of the last checkpoint this process handed to the writer.
    pub fn submitted(&self) -> Option<u64> {
        self.submitted
    }

    /// The run is stopping after `iteration`: checkpoints of earlier iterations still waiting
    /// for the writer are skipped (the one being written finishes), so that a stop is one
    /// checkpoint write away, not several.
    pub fn supersede(&self, iteration: u64) {
        self.skip_before.store(iteration, Ordering::SeqCst);
    }

    /// Counts a failed write; returns whether it is the first since the last good one (the
    /// one to say: the others are counted, not repeated).
    pub fn count_failure(&mut self) -> bool {
        self.failing += 1;
        self.failed += 1;
        self.failing == 1
    }

    /// Counts a good write; returns how many failed before it since the last good one.
    pub fn count_success(&mut self) -> u64 {
        std::mem::take(&mut self.failing)
    }

    /// Failed writes in all.
    pub fn failed(&self) -> u64 {
        self.failed
    }

    /// Whether a checkpoint is due after `iteration` iterations.
    pub fn due(&self, iteration: u64) -> bool {
        match self.policy.every {
            Every::Iterations(n) => iteration >= self.last_iteration + n,
            Every::Seconds(s) => self.last_time.elapsed() >= Duration::from_secs_f64(s),
        }
    }

    /// Hands `file` (the state after `iteration` iterations) to the writer. Waits only if
    /// the previous checkpoint is still being written.
    pub fn submit(&mut self, iteration: u64, file: CheckpointFile) -> Result<(), CliError> {
        self.last_iteration = iteration;
        self.submitted = Some(iteration);
        self.last_time = Instant::now();
        let jobs = self.jobs.as_ref().ok_or_else(|| CliError::run("the checkpoint writer has stopped"))?;
        let tag = self.line.tag.clone();
        jobs.send(Job { iteration, tag, file })
            .map_err(|_| CliError::run("the checkpoint writer thread has stopped"))?;
        self.pending += 1;
        Ok(())
    }

    fn note(&mut self, w: &Written) {
        self.pending = self.pending.saturating_sub(1);
        if let Written::Ok { path, iteration, .. } = w {
            self.last_good = Some((*iteration, path.clone()));
        }
    }

    /// What the writer finished since the last call, without waiting.
    pub fn poll(&mut self) -> Vec<Written> {
        let got: Vec<Written> = self.done.try_iter().collect();
        for w in &got {
            self.note(w);
        }
        got
    }

    /// Waits for every checkpoint handed over so far.
    pub fn flush(&mut self) -> Vec<Written> {
        let mut got = vec![];
        while self.pending > 0 {
            match self.done.recv() {
                Ok(w) => {
                    self.note(&w);
                    got.push(w);
                }
                Err(_) => break,
            }
        }
        got
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Takes the folder's lock: an OS lock (`flock`) on the folder itself, released when the
/// process ends, even by `kill -9`, and leaving no file behind. Two runs never write one
/// folder at once: the second is refused, naming the first's process where the system says
/// (Linux: `/proc/locks`).
pub fn lock_folder(dir: &Path) -> Result<std::fs::File, CliError> {
    let f = std::fs::File::open(dir)
        .map_err(|e| CliError::usage(format!("checkpoint folder {}: cannot open it to lock it: {e}", dir.display())))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => {
            let who = lock_holder(dir).map_or_else(|| "another process".to_string(), |p| format!("process {p}"));
            Err(CliError::usage(format!(
                "checkpoint folder {}: in use by another crossbow run ({who}); two runs never write one folder at once: wait for it to end, or use another folder",
                dir.display()
            )))
        }
        Err(std::fs::TryLockError::Error(e)) => {
            Err(CliError::usage(format!("checkpoint folder {}: cannot lock it: {e}", dir.display())))
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

/// Deletes the oldest checkpoints of line `tag` in `dir` beyond `keep`, never the one just
/// written, and never a file of another line or run.
fn rotate(dir: &Path, keep: usize, tag: &str, just_written: u64) {
    if let Ok(all) = list(dir) {
        let mine = all.into_iter().filter(|e| e.tag.as_deref() == Some(tag));
        for e in mine.skip(keep.max(1)) {
            if e.iteration != just_written {
                let _ = std::fs::remove_file(e.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("crossbow-cli-ckpt-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn line() -> Line {
        Line { run: "00000000000000aa".into(), tag: "0000000a".into() }
    }

    fn file(i: u64) -> CheckpointFile {
        let mut f = CheckpointFile::new(serde_json::json!({ "iteration": i, "line": line() }));
        f.tensors.insert("w".into(), crossbow_replica::checkpoint::Tensor::vector(vec![i as f32; 10]));
        f
    }

    #[test]
    fn every_parses_iterations_and_minutes() {
        assert_eq!("500".parse::<Every>().unwrap(), Every::Iterations(500));
        assert_eq!("10m".parse::<Every>().unwrap(), Every::Seconds(600.0));
        assert_eq!("0.5m".parse::<Every>().unwrap(), Every::Seconds(30.0));
        for bad in ["0", "-3", "m", "1e400m", "10s", "", "0m", "1e18m"] {
            let e = bad.parse::<Every>().unwrap_err();
            assert!(e.contains(&format!("'{bad}'")), "{e}");
        }
    }

    #[test]
    fn keeps_the_newest_and_never_the_only_good_one() {
        let dir = tmp("keep");
        let policy = CheckpointPolicy {
            dir: dir.clone(),
            every: Every::Iterations(1),
            keep: 2,
            on_error: OnWriteError::Warn,
            share: false,
        };
        let mut c = Checkpointer::start(policy, 0, line()).unwrap();
        for i in 1..=5 {
            c.submit(i, file(i)).unwrap();
        }
        let done = c.flush();
        assert_eq!(done.len(), 5);
        let left: Vec<u64> = list(&dir).unwrap().into_iter().map(|e| e.iteration).collect();
        assert_eq!(left, vec![5, 4]);
        assert_eq!(c.last_good(), Some(dir.join(file_name(5, &line().tag)).as_path()));
        let (p, f) = load(&dir, &mut |_| {}).unwrap();
        assert_eq!(p, dir.join(file_name(5, &line().tag)));
        assert_eq!(f.state["iteration"], 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_newest_checkpoint_falls_back_to_the_previous() {
        let dir = tmp("damaged");
        let policy = CheckpointPolicy {
            dir: dir.clone(),
            every: Every::Iterations(1),
            keep: 3,
            on_error: OnWriteError::Warn,
            share: false,
        };
        let mut c = Checkpointer::start(policy, 0, line()).unwrap();
        c.submit(1, file(1)).unwrap();
        c.submit(2, file(2)).unwrap();
        c.flush();
        let newest = dir.join(file_name(2, &line().tag));
        let bytes = std::fs::read(&newest).unwrap();
        std::fs::write(&newest, &bytes[..bytes.len() - 5]).unwrap();
        let mut warnings = vec![];
        let (p, f) = load(&dir, &mut |w| warnings.push(w)).unwrap();
        assert_eq!(p, dir.join(file_name(1, &line().tag)));
        assert_eq!(f.state["iteration"], 1);
        assert!(warnings[0].contains(&file_name(2, &line().tag)), "{warnings:?}");
        // Naming the damaged file itself is an error that names it.
        let e = load(&newest, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains(&file_name(2, &line().tag)), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_that_cannot_be_made_is_refused_before_training() {
        let dir = tmp("notdir");
        std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
        std::fs::write(&dir, b"a file").unwrap();
        let policy = CheckpointPolicy {
            dir: dir.clone(),
            every: Every::Iterations(1),
            keep: 1,
            on_error: OnWriteError::Warn,
            share: false,
        };
        let e = Checkpointer::start(policy.clone(), 0, line()).err().unwrap().to_string();
        assert!(e.contains("--checkpoint-dir") && e.contains("not a folder"), "{e}");
        let policy = CheckpointPolicy { dir: dir.join("sub"), ..policy };
        let e = Checkpointer::start(policy, 0, line()).err().unwrap().to_string();
        assert!(e.contains("cannot create"), "{e}");
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn leftover_temporary_files_are_removed_at_start() {
        let dir = tmp("leftover");
        std::fs::create_dir_all(&dir).unwrap();
        let t = dir.join(format!(".{}.tmp", file_name(7, &line().tag)));
        std::fs::write(&t, b"half a checkpoint").unwrap();
        let policy = CheckpointPolicy {
            dir: dir.clone(),
            every: Every::Iterations(1),
            keep: 1,
            on_error: OnWriteError::Warn,
            share: false,
        };
        let _c = Checkpointer::start(policy, 0, line()).unwrap();
        assert!(!t.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn flags_resolve_with_their_dependencies() {
        let a = CheckpointArgs { on_divergence: Some(OnDivergence::Rollback), ..Default::default() };
        assert!(a.resolve(None, None).unwrap_err().to_string().contains("needs --checkpoint-dir"));
        let a = CheckpointArgs { checkpoint_every: Some(Every::Iterations(5)), ..Default::default() };
        assert!(a.resolve(None, None).unwrap_err().to_string().contains("--checkpoint-every needs --checkpoint-dir"));
        assert!("ignore".parse::<OnWriteError>().unwrap_err().contains("'ignore'"));
        // Resuming: the saved policy and the checkpoint's folder are the defaults.
        let (p, d) =
            CheckpointArgs::default().resolve(None, Some(Path::new("/runs/a/ckpt-0000000010.safetensors"))).unwrap();
        assert_eq!(p.unwrap().dir, PathBuf::from("/runs/a"));
        assert_eq!(d.action, OnDivergence::Stop);
    }
}

/// Fuzzing the resume paths (issue 26): random folder contents — this run's checkpoints on
/// several lines, another run's, files of an older version, junk named like checkpoints,
/// folders named like checkpoints — never make listing, loading, the ownership check or
/// rotation panic, and rotation never deletes a file of another line.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug)]
    enum Item {
        /// A checkpoint of run `run` (0 or 1), line `tag` (0..3), at `iteration`.
        Ckpt { run: u8, tag: u8, iteration: u64 },
        /// An untagged checkpoint of an older version.
        Legacy { iteration: u64 },
        /// Junk bytes under a checkpoint's name.
        Junk { tag: u8, iteration: u64, bytes: Vec<u8> },
        /// A folder under a checkpoint's name.
        Folder { iteration: u64 },
    }

    fn line_of(run: u8, tag: u8) -> Line {
        Line { run: format!("{:016x}", run as u64 + 1), tag: format!("{:08x}", 16 * run as u64 + tag as u64 + 0xa0) }
    }

    fn item() -> impl Strategy<Value = Item> {
        prop_oneof![
            4 => (0u8..2, 0u8..3, 0u64..50).prop_map(|(run, tag, iteration)| Item::Ckpt { run, tag, iteration }),
            1 => (0u64..50).prop_map(|iteration| Item::Legacy { iteration }),
            1 => (0u8..3, 0u64..50, prop::collection::vec(any::<u8>(), 0..40))
                .prop_map(|(tag, iteration, bytes)| Item::Junk { tag, iteration, bytes }),
            1 => (0u64..50).prop_map(|iteration| Item::Folder { iteration }),
        ]
    }

    fn make(dir: &Path, items: &[Item]) {
        for it in items {
            match it {
                Item::Ckpt { run, tag, iteration } => {
                    let l = line_of(*run, *tag);
                    let mut f = CheckpointFile::new(serde_json::json!({
                        "iteration": iteration, "line": l, "written_at": *iteration as f64,
                        "config": { "model": "lenet5", "dataset": "synthetic-digits", "seed": run },
                    }));
                    f.tensors.insert("w".into(), crossbow_replica::checkpoint::Tensor::vector(vec![1.0; 3]));
                    f.write_atomic(&dir.join(file_name(*iteration, &l.tag))).unwrap();
                }
                Item::Legacy { iteration } => {
                    let f = CheckpointFile::new(serde_json::json!({ "iteration": iteration }));
                    f.write_atomic(&dir.join(format!("ckpt-{iteration:010}.safetensors"))).unwrap();
                }
                Item::Junk { tag, iteration, bytes } => {
                    std::fs::write(dir.join(file_name(*iteration, &line_of(0, *tag).tag)), bytes).unwrap();
                }
                Item::Folder { iteration } => {
                    let _ = std::fs::create_dir_all(dir.join(file_name(*iteration, "ffffffff")));
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn resume_paths_survive_any_folder(items in prop::collection::vec(item(), 0..12), case in any::<u32>()) {
            let dir = std::env::temp_dir().join(format!("crossbow-ckpt-fuzz-{}-{case}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            make(&dir, &items);
            let before: Vec<Entry> = list(&dir).unwrap();
            // The runs whose checkpoints the folder holds at the end: a later item may overwrite
            // an earlier one of the same name (junk over run 0's checkpoint, or the reverse).
            let mut owner: std::collections::BTreeMap<String, Option<u8>> = Default::default();
            for it in &items {
                match it {
                    Item::Ckpt { run, tag, iteration } => {
                        owner.insert(file_name(*iteration, &line_of(*run, *tag).tag), Some(*run));
                    }
                    Item::Junk { tag, iteration, .. } => {
                        owner.insert(file_name(*iteration, &line_of(0, *tag).tag), None);
                    }
                    Item::Legacy { .. } | Item::Folder { .. } => {}
                }
            }
            let runs: std::collections::BTreeSet<u8> = owner.values().flatten().copied().collect();
            // Loading: never a panic; a folder of two runs is refused by name.
            match load(&dir, &mut |_| {}) {
                Ok((p, f)) => {
                    prop_assert!(runs.len() <= 1, "resumed {} from a folder of {} runs", p.display(), runs.len());
                    prop_assert!(f.state.get("iteration").is_some());
                }
                Err(e) => prop_assert!(e.to_string().contains(&dir.display().to_string()), "{e}"),
            }
            // The ownership check refuses a new run exactly when another run's file is there.
            let mine = line_of(0, 0);
            let refused = check_owner(&dir, &mine, false, "--checkpoint-dir").is_err();
            prop_assert_eq!(refused, runs.contains(&1));
            prop_assert!(check_owner(&dir, &mine, true, "--checkpoint-dir").is_ok());
            // Line decisions never panic, whatever the state says.
            for e in &before {
                if let Ok(state) = CheckpointFile::read_state(&e.path) {
                    let _ = line_for_resume(&state, &e.path, &dir);
                }
            }
            // Rotation by line (run 0, tag 0) removes only that line's files.
            rotate(&dir, 1, &mine.tag, u64::MAX);
            let after: Vec<Entry> = list(&dir).unwrap();
            for e in &before {
                if e.tag.as_deref() != Some(mine.tag.as_str()) {
                    prop_assert!(after.contains(e), "rotation of line {} deleted {}", mine.tag, e.path.display());
                }
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
