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
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use clap::Args;
use crossbeam_channel::{Receiver, Sender};
use crossbow_replica::ProcessGroup;
use crossbow_replica::checkpoint::{CheckpointError, CheckpointFile, write_atomic};
use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The checkpoint, resume and divergence flags of `crossbow train`.
#[derive(Args, Clone, Debug, Default)]
pub struct CheckpointArgs {
    /// Write checkpoints into this folder (created if missing) [default: none; with --resume,
    /// the folder of the checkpoint resumed]
    #[arg(long, value_name = "DIR")]
    pub checkpoint_dir: Option<PathBuf>,
    /// How often: every N iterations (`500`) or every N minutes (`10m`); always at the end
    /// [default: 10m]
    #[arg(long, value_name = "N|Nm")]
    pub checkpoint_every: Option<String>,
    /// How many checkpoints to keep (the oldest are deleted once a newer one is safely
    /// written) [default: 3]
    #[arg(long, value_name = "N")]
    pub keep_checkpoints: Option<usize>,
    /// What a failed checkpoint write (disk full, permissions) does: `warn` (report it and
    /// train on) or `fatal` (stop) [default: warn]
    #[arg(long, value_name = "warn|fatal")]
    pub checkpoint_errors: Option<String>,
    /// What a diverged run does (a NaN or infinite loss or weight, or a loss that exploded):
    /// `stop`, or `rollback` to the last checkpoint with the learning rate halved [default: stop]
    #[arg(long, value_name = "stop|rollback")]
    pub on_divergence: Option<String>,
    /// Most rollbacks before giving up [default: 3]
    #[arg(long, value_name = "N")]
    pub max_rollbacks: Option<u32>,
    /// Continue the run saved in this checkpoint file, or in the newest good checkpoint of
    /// this folder; other flags given override the saved ones where that is possible
    /// (epochs, target, devices, threads, learners, metrics, checkpoints)
    #[arg(long, value_name = "DIR|FILE")]
    pub resume: Option<PathBuf>,
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

impl FromStr for Every {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!(
                "--checkpoint-every '{s}' must be a whole number of iterations >= 1 (e.g. 500) or of minutes with 'm' (e.g. 10m)"
            )
        };
        let t = s.trim();
        if let Some(m) = t.strip_suffix('m') {
            match m.trim().parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(Every::Seconds(v * 60.0)),
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

/// What a diverged run does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnDivergence {
    /// Stop with a message naming the iteration, the learner and the last good checkpoint.
    Stop,
    /// Reload the last good checkpoint with the learning rate halved.
    Rollback,
}

/// Where and how often checkpoints are written.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CheckpointPolicy {
    /// The folder.
    pub dir: PathBuf,
    /// How often.
    pub every: Every,
    /// How many to keep, >= 1.
    pub keep: usize,
    /// What a failed write does.
    pub on_error: OnWriteError,
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
        let dir = self
            .checkpoint_dir
            .clone()
            .or_else(|| saved_ckpt.as_ref().map(|c| c.dir.clone()))
            .or_else(|| resumed_from.and_then(|p| p.parent()).map(Path::to_path_buf));
        let every = match &self.checkpoint_every {
            Some(s) => s.parse().map_err(CliError::usage)?,
            None => saved_ckpt.as_ref().map(|c| c.every).unwrap_or(Every::Seconds(600.0)),
        };
        let keep = self.keep_checkpoints.or(saved_ckpt.as_ref().map(|c| c.keep)).unwrap_or(3);
        if keep == 0 {
            return Err(CliError::usage(
                "--keep-checkpoints must be at least 1 (the last good checkpoint is always kept)",
            ));
        }
        let on_error = match self.checkpoint_errors.as_deref() {
            Some("warn") => OnWriteError::Warn,
            Some("fatal") => OnWriteError::Fatal,
            Some(o) => return Err(CliError::usage(format!("--checkpoint-errors '{o}' must be 'warn' or 'fatal'"))),
            None => saved_ckpt.as_ref().map(|c| c.on_error).unwrap_or(OnWriteError::Warn),
        };
        let saved_div = saved.map(|(_, d)| *d);
        let action = match self.on_divergence.as_deref() {
            Some("stop") => OnDivergence::Stop,
            Some("rollback") => OnDivergence::Rollback,
            Some(o) => return Err(CliError::usage(format!("--on-divergence '{o}' must be 'stop' or 'rollback'"))),
            None => saved_div.map(|d| d.action).unwrap_or(OnDivergence::Stop),
        };
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
        let policy = dir.map(|dir| CheckpointPolicy { dir, every, keep, on_error });
        Ok((policy, DivergencePolicy { action, max_rollbacks }))
    }
}

/// The file name of the checkpoint after `iteration` iterations.
pub fn file_name(iteration: u64) -> String {
    format!("ckpt-{iteration:010}.safetensors")
}

/// The iteration of a checkpoint file name, if it is one.
fn iteration_of(name: &str) -> Option<u64> {
    name.strip_prefix("ckpt-")?.strip_suffix(".safetensors")?.parse().ok()
}

/// The checkpoints in `dir`, newest first.
pub fn list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, CliError> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| CliError::usage(format!("checkpoint folder {}: cannot list it: {e}", dir.display())))?;
    let mut out: Vec<(u64, PathBuf)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| iteration_of(&e.file_name().to_string_lossy()).map(|i| (i, e.path())))
        .collect();
    out.sort_by_key(|e| std::cmp::Reverse(e.0));
    Ok(out)
}

/// Reads the checkpoint `path` names: a file, or the newest good checkpoint in a folder
/// (a damaged newer one is skipped with a warning through `warn`).
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
    for (_, p) in &all {
        match CheckpointFile::read(p) {
            Ok(f) => return Ok((p.clone(), f)),
            Err(e) => warn(format!("skipping a damaged checkpoint: {e}")),
        }
    }
    Err(CliError::usage(format!("--resume {}: none of its {} checkpoints is readable", path.display(), all.len())))
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
}

struct Job {
    iteration: u64,
    file: CheckpointFile,
}

/// Writes checkpoints from a background thread into a policy's folder.
pub struct Checkpointer {
    policy: CheckpointPolicy,
    jobs: Option<Sender<Job>>,
    done: Receiver<Written>,
    thread: Option<JoinHandle<()>>,
    pending: usize,
    /// The iteration of the last checkpoint handed to the writer by this process.
    submitted: Option<u64>,
    last_iteration: u64,
    last_time: Instant,
    last_good: Option<PathBuf>,
}

/// A test hook: `CROSSBOW_FAULT_CHECKPOINT_WRITE=N` makes the N-th and later checkpoint
/// writes of the process fail as a full disk would (for the tests of `--checkpoint-errors`).
const FAULT_ENV: &str = "CROSSBOW_FAULT_CHECKPOINT_WRITE";

impl Checkpointer {
    /// Creates the folder if needed, checks that a file can be written in it (before any
    /// training), removes temporary files a killed writer left, and starts the writer.
    pub fn start(policy: CheckpointPolicy, resumed_at: u64) -> Result<Self, CliError> {
        let dir = &policy.dir;
        if dir.exists() && !dir.is_dir() {
            return Err(CliError::usage(format!("--checkpoint-dir {}: exists and is not a folder", dir.display())));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| CliError::usage(format!("--checkpoint-dir {}: cannot create it: {e}", dir.display())))?;
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
        let last_good = list(dir)?.into_iter().next().map(|(_, p)| p);
        let (jobs, rx) = crossbeam_channel::bounded::<Job>(1);
        let (tx, done) = crossbeam_channel::unbounded::<Written>();
        let fault_from: Option<u64> = std::env::var(FAULT_ENV).ok().and_then(|v| v.parse().ok());
        let (dir2, keep) = (dir.clone(), policy.keep);
        let thread = std::thread::Builder::new()
            .name("crossbow-checkpoint".into())
            .spawn(move || {
                for (n, job) in rx.into_iter().enumerate() {
                    let count = n as u64 + 1;
                    let t0 = Instant::now();
                    let path = dir2.join(file_name(job.iteration));
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
                            rotate(&dir2, keep, job.iteration);
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
            jobs: Some(jobs),
            done,
            thread: Some(thread),
            pending: 0,
            submitted: None,
            last_iteration: resumed_at,
            last_time: Instant::now(),
            last_good,
        })
    }

    /// The policy.
    pub fn policy(&self) -> &CheckpointPolicy {
        &self.policy
    }

    /// The newest checkpoint known to be whole (written by this run, or found at the start).
    pub fn last_good(&self) -> Option<&Path> {
        self.last_good.as_deref()
    }

    /// The iteration of the last checkpoint this process handed to the writer.
    pub fn submitted(&self) -> Option<u64> {
        self.submitted
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
        jobs.send(Job { iteration, file }).map_err(|_| CliError::run("the checkpoint writer thread has stopped"))?;
        self.pending += 1;
        Ok(())
    }

    fn note(&mut self, w: &Written) {
        self.pending = self.pending.saturating_sub(1);
        if let Written::Ok { path, .. } = w {
            self.last_good = Some(path.clone());
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

/// Deletes the oldest checkpoints of `dir` beyond `keep`, never the one just written.
fn rotate(dir: &Path, keep: usize, just_written: u64) {
    if let Ok(all) = list(dir) {
        for (i, p) in all.into_iter().skip(keep.max(1)) {
            if i != just_written {
                let _ = std::fs::remove_file(p);
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

    fn file(i: u64) -> CheckpointFile {
        let mut f = CheckpointFile::new(serde_json::json!({ "iteration": i }));
        f.tensors.insert("w".into(), crossbow_replica::checkpoint::Tensor::vector(vec![i as f32; 10]));
        f
    }

    #[test]
    fn every_parses_iterations_and_minutes() {
        assert_eq!("500".parse::<Every>().unwrap(), Every::Iterations(500));
        assert_eq!("10m".parse::<Every>().unwrap(), Every::Seconds(600.0));
        assert_eq!("0.5m".parse::<Every>().unwrap(), Every::Seconds(30.0));
        for bad in ["0", "-3", "m", "1e400m", "10s", "", "0m"] {
            let e = bad.parse::<Every>().unwrap_err();
            assert!(e.contains("--checkpoint-every"), "{e}");
        }
    }

    #[test]
    fn keeps_the_newest_and_never_the_only_good_one() {
        let dir = tmp("keep");
        let policy =
            CheckpointPolicy { dir: dir.clone(), every: Every::Iterations(1), keep: 2, on_error: OnWriteError::Warn };
        let mut c = Checkpointer::start(policy, 0).unwrap();
        for i in 1..=5 {
            c.submit(i, file(i)).unwrap();
        }
        let done = c.flush();
        assert_eq!(done.len(), 5);
        let left: Vec<u64> = list(&dir).unwrap().into_iter().map(|(i, _)| i).collect();
        assert_eq!(left, vec![5, 4]);
        assert_eq!(c.last_good(), Some(dir.join(file_name(5)).as_path()));
        let (p, f) = load(&dir, &mut |_| {}).unwrap();
        assert_eq!(p, dir.join(file_name(5)));
        assert_eq!(f.state["iteration"], 5);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_damaged_newest_checkpoint_falls_back_to_the_previous() {
        let dir = tmp("damaged");
        let policy =
            CheckpointPolicy { dir: dir.clone(), every: Every::Iterations(1), keep: 3, on_error: OnWriteError::Warn };
        let mut c = Checkpointer::start(policy, 0).unwrap();
        c.submit(1, file(1)).unwrap();
        c.submit(2, file(2)).unwrap();
        c.flush();
        let newest = dir.join(file_name(2));
        let bytes = std::fs::read(&newest).unwrap();
        std::fs::write(&newest, &bytes[..bytes.len() - 5]).unwrap();
        let mut warnings = vec![];
        let (p, f) = load(&dir, &mut |w| warnings.push(w)).unwrap();
        assert_eq!(p, dir.join(file_name(1)));
        assert_eq!(f.state["iteration"], 1);
        assert!(warnings[0].contains(&file_name(2)), "{warnings:?}");
        // Naming the damaged file itself is an error that names it.
        let e = load(&newest, &mut |_| {}).unwrap_err().to_string();
        assert!(e.contains(&file_name(2)), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_that_cannot_be_made_is_refused_before_training() {
        let dir = tmp("notdir");
        std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
        std::fs::write(&dir, b"a file").unwrap();
        let policy =
            CheckpointPolicy { dir: dir.clone(), every: Every::Iterations(1), keep: 1, on_error: OnWriteError::Warn };
        let e = Checkpointer::start(policy.clone(), 0).err().unwrap().to_string();
        assert!(e.contains("--checkpoint-dir") && e.contains("not a folder"), "{e}");
        let policy = CheckpointPolicy { dir: dir.join("sub"), ..policy };
        let e = Checkpointer::start(policy, 0).err().unwrap().to_string();
        assert!(e.contains("cannot create"), "{e}");
        std::fs::remove_file(&dir).unwrap();
    }

    #[test]
    fn leftover_temporary_files_are_removed_at_start() {
        let dir = tmp("leftover");
        std::fs::create_dir_all(&dir).unwrap();
        let t = dir.join(format!(".{}.tmp", file_name(7)));
        std::fs::write(&t, b"half a checkpoint").unwrap();
        let policy =
            CheckpointPolicy { dir: dir.clone(), every: Every::Iterations(1), keep: 1, on_error: OnWriteError::Warn };
        let _c = Checkpointer::start(policy, 0).unwrap();
        assert!(!t.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn flags_resolve_with_their_dependencies() {
        let a = CheckpointArgs { on_divergence: Some("rollback".into()), ..Default::default() };
        assert!(a.resolve(None, None).unwrap_err().to_string().contains("needs --checkpoint-dir"));
        let a = CheckpointArgs { checkpoint_every: Some("5".into()), ..Default::default() };
        assert!(a.resolve(None, None).unwrap_err().to_string().contains("--checkpoint-every needs --checkpoint-dir"));
        let a = CheckpointArgs { checkpoint_dir: Some("d".into()), keep_checkpoints: Some(0), ..Default::default() };
        assert!(a.resolve(None, None).unwrap_err().to_string().contains("--keep-checkpoints"));
        let a = CheckpointArgs {
            checkpoint_dir: Some("d".into()),
            checkpoint_errors: Some("ignore".into()),
            ..Default::default()
        };
        assert!(a.resolve(None, None).unwrap_err().to_string().contains("'ignore'"));
        // Resuming: the saved policy and the checkpoint's folder are the defaults.
        let (p, d) =
            CheckpointArgs::default().resolve(None, Some(Path::new("/runs/a/ckpt-0000000010.safetensors"))).unwrap();
        assert_eq!(p.unwrap().dir, PathBuf::from("/runs/a"));
        assert_eq!(d.action, OnDivergence::Stop);
    }
}
