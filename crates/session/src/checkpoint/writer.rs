//! The background writer: atomic writes, rotation, failures counted, stops superseding
//! queued checkpoints.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use crossbow_replica::checkpoint::{CheckpointError, CheckpointFile, write_atomic};

use super::lines::{Line, check_owner, file_name, list};
use super::lock::lock_folder;
use super::policy::{CheckpointPolicy, Every};
use crate::error::SessionError;

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

pub(super) struct Job {
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
pub(super) const FAULT_ENV: &str = "CROSSBOW_FAULT_CHECKPOINT_WRITE";

/// A test hook: `CROSSBOW_TEST_SLOW_CHECKPOINT_MS=N` makes every checkpoint write take N ms
/// longer (large checkpoints on a slow disk, for the test of a stop while writes queue up).
pub(super) const SLOW_ENV: &str = "CROSSBOW_TEST_SLOW_CHECKPOINT_MS";

impl Checkpointer {
    /// Creates the folder if needed, checks that a file can be written in it (before any
    /// training) and that it holds no other run's checkpoints (unless the policy shares it),
    /// removes temporary files a killed writer left, and starts the writer for `line`.
    pub fn start(policy: CheckpointPolicy, resumed_at: u64, line: Line) -> Result<Self, SessionError> {
        let dir = &policy.dir;
        if dir.exists() && !dir.is_dir() {
            return Err(SessionError::usage(format!("--checkpoint-dir {}: exists and is not a folder", dir.display())));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| SessionError::usage(format!("--checkpoint-dir {}: cannot create it: {e}", dir.display())))?;
        let lock = lock_folder(dir)?;
        let probe = dir.join(".crossbow-write-test");
        std::fs::write(&probe, b"ok")
            .and_then(|_| std::fs::remove_file(&probe))
            .map_err(|e| SessionError::usage(format!("--checkpoint-dir {}: cannot write in it: {e}", dir.display())))?;
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
            .map_err(|e| SessionError::run(format!("cannot start the checkpoint writer thread: {e}")))?;
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
    pub fn submit(&mut self, iteration: u64, file: CheckpointFile) -> Result<(), SessionError> {
        self.last_iteration = iteration;
        self.submitted = Some(iteration);
        self.last_time = Instant::now();
        let jobs = self.jobs.as_ref().ok_or_else(|| SessionError::run("the checkpoint writer has stopped"))?;
        let tag = self.line.tag.clone();
        jobs.send(Job { iteration, tag, file })
            .map_err(|_| SessionError::run("the checkpoint writer thread has stopped"))?;
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

/// Deletes the oldest checkpoints of line `tag` in `dir` beyond `keep`, never the one just
/// written, and never a file of another line or run.
pub(super) fn rotate(dir: &Path, keep: usize, tag: &str, just_written: u64) {
    if let Ok(all) = list(dir) {
        let mine = all.into_iter().filter(|e| e.tag.as_deref() == Some(tag));
        for e in mine.skip(keep.max(1)) {
            if e.iteration != just_written {
                let _ = std::fs::remove_file(e.path);
            }
        }
    }
}
