//! What a training run shows and records: a progress bar on a terminal (plain lines
//! otherwise), a final summary, and one JSON object per line in the metrics file.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use serde_json::{Value, json};

use crate::error::SessionError;

/// One evaluation of the central model.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
pub struct EvalLine {
    /// Iterations completed before the evaluation.
    pub iteration: u64,
    /// Epochs completed before the evaluation (fractional).
    pub epoch: f64,
    /// Training time so far (evaluation excluded), seconds.
    pub train_seconds: f64,
    /// Wall time since the start of training, seconds.
    pub wall_seconds: f64,
    /// Learning rate of the last iteration, after the schedule.
    pub lr: f64,
    /// Mean training loss since the previous evaluation.
    pub train_loss: f64,
    /// Training accuracy of the learners since the previous evaluation, 0..1.
    pub train_accuracy: f64,
    /// Mean test loss per sample of the central model.
    pub test_loss: f64,
    /// Test accuracy of the central model, 0..1.
    pub test_accuracy: f64,
    /// Training images per second since the previous evaluation.
    pub images_per_sec: f64,
    /// Learners on each device at the evaluation.
    pub learners: Vec<usize>,
    /// What `--diagnostics` measured (none without it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostics: Option<crate::diagnostics::Diagnostics>,
}

/// The outcome of a run.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// Model name (`resnet32`, ...).
    pub model: String,
    /// Dataset name (`cifar10`, ...).
    pub dataset: String,
    /// The devices trained on (`cpu:0`, `cuda:1`, ...).
    pub devices: Vec<String>,
    /// Learners on each device at the end of the run.
    pub learners: Vec<usize>,
    /// The synchroniser's name.
    pub sync: String,
    /// Test accuracy the run aimed for, 0..1, if any.
    pub target_accuracy: Option<f64>,
    /// Whether an evaluation reached `target_accuracy`.
    pub reached_target: bool,
    /// Training seconds (evaluation excluded) until the first evaluation at or above target.
    pub time_to_target_seconds: Option<f64>,
    /// Epochs completed at the first evaluation at or above target.
    pub epochs_to_target: Option<f64>,
    /// Highest test accuracy of the central model over all evaluations, 0..1.
    pub best_accuracy: f64,
    /// Test accuracy at the last evaluation, 0..1 (0 if there was none).
    pub final_accuracy: f64,
    /// Epochs completed (fractional).
    pub epochs: f64,
    /// Iterations completed.
    pub iterations: u64,
    /// Training time (evaluation excluded), seconds.
    pub train_seconds: f64,
    /// Wall time of the whole run, seconds.
    pub wall_seconds: f64,
    /// Mean training throughput over the run, images per second (over training time).
    pub images_per_sec: f64,
    /// Seconds the training loop waited for the input pipeline's batches (part of
    /// `train_seconds`): a large share means the input pipeline, not the model, bounds the run.
    #[serde(default)]
    pub input_wait_seconds: f64,
    /// Where the wall time went (absent from the summaries of earlier versions).
    #[serde(default)]
    pub phases: Phases,
    /// What the auto-tuner's probing cost: absent when the run used one learner layout
    /// throughout (see [`crate::probing`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probing: Option<crate::probing::ProbeCost>,
    /// Folder data decoded while training (`--decode streaming`): the bad files met, by split
    /// (empty when there were none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub data_notes: Vec<String>,
    /// Every evaluation, in order.
    pub evaluations: Vec<EvalLine>,
}

/// Where a run's wall time went, seconds (a resumed run: its processes together). The
/// auto-tuner's probing is not a phase of its own: it costs as the iterations it runs at the
/// learner counts it tries, inside `steps` ([`Summary::probing`] says how much that cost).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct Phases {
    /// Training iterations (forward, backward, synchronisation), waiting for input excluded.
    pub steps: f64,
    /// Waiting for the input pipeline's training batches.
    pub input_wait: f64,
    /// Batch-norm recalibration of the central model before evaluations.
    pub recalibration: f64,
    /// Evaluating the central model on the test set (and `--diagnostics`).
    pub evaluation: f64,
    /// Checkpoints: the pause while the buffers are copied for the writer thread.
    pub checkpoints: f64,
    /// The rest of the wall time: start-up, data loading, reporting, the end of the run.
    pub other: f64,
}

impl Phases {
    /// One line: each phase's seconds and share of the wall time.
    pub fn line(&self) -> String {
        let total = self.steps + self.input_wait + self.recalibration + self.evaluation + self.checkpoints + self.other;
        let part = |name: &str, x: f64| format!("{name} {x:.1} s ({:.1}%)", 100.0 * x / total.max(1e-9));
        format!(
            "time: {}, {}, {}, {}, {}, {}",
            part("steps", self.steps),
            part("input wait", self.input_wait),
            part("recalibration", self.recalibration),
            part("evaluation", self.evaluation),
            part("checkpoints", self.checkpoints),
            part("other", self.other)
        )
    }
}

/// `n word` or `n words`: "1 iteration", "2 iterations".
pub fn plural(n: impl Into<u64>, word: &str) -> String {
    let n = n.into();
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// The metrics file: opened (created if missing) when the reporter is made, so that a path
/// that cannot be written is an error before training; an existing file is emptied only when
/// the first record is written, and a file created for a run that never started is removed.
struct MetricsFile {
    path: PathBuf,
    writer: BufWriter<File>,
    created: bool,
    started: bool,
    /// Records written (or attempted).
    writes: u64,
}

/// A test hook: `CROSSBOW_FAULT_METRICS_WRITE=N` makes the N-th and later writes to the
/// metrics file fail as a full disk would (for the tests of the error policy).
const METRICS_FAULT_ENV: &str = "CROSSBOW_FAULT_METRICS_WRITE";

fn fault_from() -> Option<u64> {
    std::env::var(METRICS_FAULT_ENV).ok().and_then(|v| v.parse().ok())
}

/// What an existing, non-empty file at the metrics path holds.
#[derive(Debug, PartialEq)]
enum Holds {
    /// A crossbow metrics file: the run that wrote it (none before runs were named) and the
    /// process of its last start.
    Metrics { run: Option<String>, pid: Option<u64> },
    /// Something else, said in words (a checkpoint, an exported model, a config, ...).
    Other(String),
}

/// Reads enough of `path` to tell whether it is a metrics file, and whose.
fn what_it_holds(path: &Path) -> std::io::Result<Holds> {
    use std::io::Read;
    // The first 64 KiB tell a safetensors file or a config; only a metrics file is read whole.
    let mut bytes = vec![];
    File::open(path)?.take(64 * 1024).read_to_end(&mut bytes)?;
    let looks_like_metrics = bytes.first() == Some(&b'{');
    if looks_like_metrics && bytes.len() == 64 * 1024 {
        bytes = std::fs::read(path)?;
    }
    if bytes.len() >= 9 && bytes[8] == b'{' {
        let n = u64::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7]]);
        if n < bytes.len() as u64 {
            let header = String::from_utf8_lossy(&bytes[8..(8 + n as usize).min(bytes.len())]);
            let what = if header.contains(crossbow_replica::checkpoint::FORMAT) {
                "a crossbow checkpoint"
            } else {
                "a safetensors file (an exported model?)"
            };
            return Ok(Holds::Other(what.into()));
        }
    }
    let text = String::from_utf8_lossy(&bytes);
    let mut records = text.lines().filter(|l| !l.trim().is_empty()).map(serde_json::from_str::<Value>);
    match records.next() {
        Some(Ok(first)) if first.get("event").and_then(Value::as_str).is_some() => {
            let (mut run, mut pid) = (None, None);
            for r in std::iter::once(Ok(first)).chain(records).flatten() {
                if matches!(r.get("event").and_then(Value::as_str), Some("start") | Some("resume")) {
                    if let Some(id) = r.get("run").and_then(Value::as_str) {
                        run = Some(id.to_string());
                    }
                    pid = r.get("pid").and_then(Value::as_u64).or(pid);
                }
            }
            Ok(Holds::Metrics { run, pid })
        }
        _ => {
            let first = text.lines().next().unwrap_or("").trim();
            let what =
                if path.extension().is_some_and(|e| e == "toml") || first.starts_with('[') || first.contains(" = ") {
                    "text that looks like a config file".to_string()
                } else {
                    format!("{} bytes that are not crossbow metrics (JSON lines)", bytes.len())
                };
            Ok(Holds::Other(what))
        }
    }
}

impl MetricsFile {
    /// Opens `path` for writing without truncating it; `name` is the setting, for errors. A
    /// regular file or a character device (`/dev/null`) is accepted; a folder, a FIFO, a
    /// socket or a symbolic link is refused here, before training (a FIFO with no reader would
    /// block the run; a link may point at anything). An existing non-empty file is used only
    /// when it is the metrics of run `owner` (a resumed run appends to its own metrics): any
    /// other file — another run's metrics, a checkpoint, an exported model, a config — is
    /// refused, never truncated. The file is locked for the run (an OS lock, gone with the
    /// process even after `kill -9`): a second process writing the same metrics is refused.
    fn open(path: &Path, name: &str, owner: Option<&str>) -> Result<Self, SessionError> {
        let shown = crate::settings::printable(&path.display().to_string());
        let refuse = |why: String| SessionError::usage(format!("{name} {shown}: {why}"));
        if path.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(refuse(
                "is a symbolic link; give the file itself (a link may lead to a file of another run)".into(),
            ));
        }
        let existed = path.symlink_metadata().is_ok();
        let mut device = false;
        if let Ok(m) = std::fs::metadata(path) {
            let ft = m.file_type();
            #[cfg(unix)]
            {
                device = std::os::unix::fs::FileTypeExt::is_char_device(&ft);
            }
            if !(ft.is_file() || device) {
                let what = if ft.is_dir() { "a folder" } else { "not a regular file" };
                return Err(refuse(format!(
                    "cannot write: is {what} (the metrics go to a regular file, or a device such as /dev/null)"
                )));
            }
            if ft.is_file() && m.len() > 0 {
                match what_it_holds(path).map_err(|e| refuse(format!("cannot read it: {e}")))? {
                    Holds::Metrics { run: Some(r), .. } if owner == Some(r.as_str()) => {}
                    Holds::Metrics { run, pid } => {
                        return Err(refuse(format!(
                            "holds the metrics of another run ({}{}); crossbow never truncates another run's metrics: give a new file",
                            run.map_or_else(|| "unnamed".to_string(), |r| format!("run {r}")),
                            pid.map_or_else(String::new, |p| format!(", last started by process {p}")),
                        )));
                    }
                    Holds::Other(what) => {
                        return Err(refuse(format!("holds {what}, not metrics; refusing to overwrite it")));
                    }
                }
            }
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| refuse(format!("cannot write: {e}")))?;
        if !device {
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => {
                    let pid = match (crate::checkpoint::lock_holder(path).map(u64::from), what_it_holds(path)) {
                        (Some(p), _) | (None, Ok(Holds::Metrics { pid: Some(p), .. })) => format!(" (process {p})"),
                        _ => String::new(),
                    };
                    return Err(refuse(format!(
                        "is being written by another crossbow run{pid}; two runs never share a metrics file"
                    )));
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(refuse(format!("cannot lock it: {e}"))),
            }
        }
        Ok(MetricsFile {
            path: path.to_path_buf(),
            writer: BufWriter::new(file),
            created: !existed,
            started: false,
            writes: 0,
        })
    }

    fn write_line(&mut self, line: &str) -> std::io::Result<()> {
        if !self.started {
            // Only a regular file is emptied (a device such as /dev/null cannot be).
            if self.writer.get_ref().metadata().is_ok_and(|m| m.is_file()) {
                self.writer.get_ref().set_len(0)?;
            }
            self.started = true;
        }
        if let Some(n) = fault_from()
            && self.writes + 1 >= n
        {
            self.writes += 1;
            return Err(std::io::Error::other(format!("No space left on device (injected by {METRICS_FAULT_ENV})")));
        }
        self.writes += 1;
        writeln!(self.writer, "{line}")?;
        self.writer.flush()
    }
}

impl Drop for MetricsFile {
    fn drop(&mut self) {
        if self.created && !self.started {
            // Nothing was ever written: leave no empty file behind a run that failed to start.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Where progress lines go instead of the terminal (a library's callback).
pub type ProgressSink = Box<dyn FnMut(&str) + Send>;

/// Prints progress and writes the metrics file.
pub struct Reporter {
    bar: ProgressBar,
    tty: bool,
    quiet: bool,
    /// Print the final summary line (false for [`Reporter::silent`]).
    summary: bool,
    metrics: Option<MetricsFile>,
    last_eval: Option<f64>,
    /// The rank written into every record (several processes only).
    rank: Option<usize>,
    /// A failed write to the metrics file stops the run (`true`, `--checkpoint-errors
    /// fatal`) or is reported once and training goes on (`false`, the default).
    fatal_metrics_errors: bool,
    /// The metrics file is failing now (warned once until a write succeeds again).
    metrics_failing: bool,
    /// Where the lines go instead of the terminal (a library's progress callback).
    sink: Option<std::sync::Mutex<ProgressSink>>,
}

impl Reporter {
    /// A reporter; `metrics` is opened now (an error if it cannot be written) and emptied when
    /// the run writes its first record. `quiet` prints only the summary.
    pub fn new(metrics: Option<&Path>, quiet: bool, epochs: f64) -> Result<Self, SessionError> {
        Self::with_metrics_name(metrics, "--metrics", None, quiet, epochs)
    }

    /// As [`Reporter::new`], appending to the metrics of run `owner` (a resumed job) when the
    /// file holds them.
    pub fn new_owned(
        metrics: Option<&Path>,
        quiet: bool,
        epochs: f64,
        owner: Option<&str>,
    ) -> Result<Self, SessionError> {
        let r = Self::with_metrics_name(metrics, "--metrics", owner, quiet, epochs)?;
        Ok(if owner.is_some() { r.append_to_metrics() } else { r })
    }

    /// As [`Reporter::new`] for a training configuration: an unwritable metrics file is named
    /// as the user gave it (the flag, or the config file and its key). `owner` is the run a
    /// resumed run continues: its own metrics file is appended to; any other existing file is
    /// refused.
    pub fn for_config(
        cfg: &crate::config::TrainConfig,
        quiet: bool,
        owner: Option<&str>,
    ) -> Result<Self, SessionError> {
        Self::with_metrics_name(cfg.metrics.as_deref(), &cfg.name_of("metrics"), owner, quiet, cfg.epochs)
    }

    fn with_metrics_name(
        metrics: Option<&Path>,
        name: &str,
        owner: Option<&str>,
        quiet: bool,
        epochs: f64,
    ) -> Result<Self, SessionError> {
        let metrics = metrics.map(|p| MetricsFile::open(p, name, owner)).transpose()?;
        let tty = std::io::stderr().is_terminal() && !quiet;
        let bar = if tty {
            let b = ProgressBar::new((epochs * 1000.0).ceil() as u64);
            b.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30.cyan/blue} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.enable_steady_tick(Duration::from_millis(200));
            b
        } else {
            ProgressBar::hidden()
        };
        Ok(Reporter {
            bar,
            tty,
            quiet,
            summary: true,
            metrics,
            last_eval: None,
            rank: None,
            fatal_metrics_errors: false,
            metrics_failing: false,
            sink: None,
        })
    }

    /// Keeps what the metrics file already holds and appends to it (a resumed run: the
    /// records of the run so far stay).
    pub fn append_to_metrics(mut self) -> Self {
        if let Some(m) = self.metrics.as_mut() {
            m.started = true;
        }
        self
    }

    /// The reporter of rank `rank` of a job of several processes: every record carries the
    /// rank; ranks other than 0 print nothing (their metrics file is written all the same).
    pub fn for_rank(mut self, rank: usize) -> Self {
        self.rank = Some(rank);
        if rank > 0 {
            self.bar.finish_and_clear();
            self.bar = ProgressBar::hidden();
            self.tty = false;
            self.quiet = true;
            self.summary = false;
        }
        self
    }

    /// A reporter that prints nothing and writes no file (for benchmarks and experiments).
    pub fn silent() -> Self {
        Reporter {
            bar: ProgressBar::hidden(),
            tty: false,
            quiet: true,
            summary: false,
            metrics: None,
            last_eval: None,
            rank: None,
            fatal_metrics_errors: false,
            metrics_failing: false,
            sink: None,
        }
    }

    /// Sends every line (progress, warnings, the summary) to `f` instead of the terminal.
    pub fn with_sink(mut self, f: ProgressSink) -> Self {
        self.bar.finish_and_clear();
        self.bar = ProgressBar::hidden();
        self.tty = false;
        self.sink = Some(std::sync::Mutex::new(f));
        self
    }

    /// What a failed write to the metrics file does: stop the run (`fatal`) or warn once and
    /// train on (the default) — the same policy as checkpoints (`--checkpoint-errors`).
    pub fn metrics_errors_fatal(mut self, fatal: bool) -> Self {
        self.fatal_metrics_errors = fatal;
        self
    }

    /// Prints a line (above the progress bar on a terminal).
    pub fn say(&self, line: &str) {
        if self.quiet {
            return;
        }
        self.warn(line);
    }

    /// A line printed even with `--quiet` (warnings, rollbacks), unless the reporter is
    /// [`Reporter::silent`].
    pub fn warn(&self, line: &str) {
        if !self.summary {
            return;
        }
        if let Some(sink) = &self.sink {
            let mut f = sink.lock().unwrap_or_else(|e| e.into_inner());
            f(line);
            return;
        }
        if self.tty {
            self.bar.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    /// Writes one JSON object to the metrics file.
    pub fn record(&mut self, event: &str, body: Value) -> Result<(), SessionError> {
        if let Some(m) = &mut self.metrics {
            let mut obj = match self.rank {
                Some(r) => json!({ "event": event, "rank": r }),
                None => json!({ "event": event }),
            };
            if let (Some(o), Value::Object(b)) = (obj.as_object_mut(), body) {
                o.extend(b);
            }
            match m.write_line(&obj.to_string()) {
                Ok(()) => self.metrics_failing = false,
                Err(e) => {
                    let msg = format!("metrics file {}: cannot write: {e}", m.path.display());
                    if self.fatal_metrics_errors {
                        return Err(SessionError::run(format!("{msg} (--checkpoint-errors fatal)")));
                    }
                    if !self.metrics_failing {
                        self.metrics_failing = true;
                        self.warn(&format!(
                            "warning: {msg}; training continues, and records are written again once the file can take them"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Progress after an iteration.
    pub fn progress(&self, epoch: f64, images_per_sec: f64, loss: f64, learners: &[usize]) {
        if !self.tty {
            return;
        }
        self.bar.set_position((epoch * 1000.0) as u64);
        let acc = self.last_eval.map(|a| format!("{:.2}%", 100.0 * a)).unwrap_or_else(|| "-".into());
        self.bar.set_message(format!(
            "epoch {epoch:.2} | {images_per_sec:.0} img/s | loss {loss:.4} | test acc {acc} | learners {learners:?}"
        ));
    }

    /// An evaluation.
    pub fn eval(&mut self, e: &EvalLine) -> Result<(), SessionError> {
        self.last_eval = Some(e.test_accuracy);
        self.say(&format!(
            "epoch {:6.2}  iter {:6}  {:7.1}s  lr {:.4}  train loss {:.4}  test loss {:.4}  test acc {:6.2}%  {:7.0} img/s  learners {:?}",
            e.epoch,
            e.iteration,
            e.train_seconds,
            e.lr,
            e.train_loss,
            e.test_loss,
            100.0 * e.test_accuracy,
            e.images_per_sec,
            e.learners
        ));
        if let Some(d) = &e.diagnostics {
            self.say(&d.line(e.test_accuracy));
        }
        self.record("eval", serde_json::to_value(e).unwrap_or(Value::Null))
    }

    /// The end of the run (the summary line, and a note when the input pipeline bounded it).
    pub fn finish(&mut self, s: &Summary) -> Result<(), SessionError> {
        self.bar.finish_and_clear();
        let tta = match (s.target_accuracy, s.time_to_target_seconds, s.epochs_to_target) {
            (Some(t), Some(secs), Some(ep)) => format!("reached {:.2}% in {secs:.1} s ({ep:.2} epochs)", 100.0 * t),
            (Some(t), _, _) => format!("did not reach {:.2}%", 100.0 * t),
            _ => "no target set".into(),
        };
        if !self.summary {
            return self.record_end(s);
        }
        if let Some(line) = input_bound_line(s) {
            self.warn(&line);
        }
        self.say(&s.phases.line());
        if let Some(p) = &s.probing {
            self.say(&p.line(s.wall_seconds));
        }
        for note in &s.data_notes {
            self.warn(&format!("warning: {note}"));
        }
        let accuracy = if s.evaluations.is_empty() {
            "no evaluation ran".to_string()
        } else {
            format!("best test accuracy {:.2}% (final {:.2}%)", 100.0 * s.best_accuracy, 100.0 * s.final_accuracy)
        };
        let line = format!(
            "{} on {}: {accuracy}, {tta}; {:.2} epochs, {}, {:.1} s training ({:.1} s wall), {:.0} images/s; learners {:?} on {}, sync {}",
            s.model,
            s.dataset,
            s.epochs,
            plural(s.iterations, "iteration"),
            s.train_seconds,
            s.wall_seconds,
            s.images_per_sec,
            s.learners,
            s.devices.join(","),
            s.sync
        );
        match &self.sink {
            Some(sink) => {
                let mut f = sink.lock().unwrap_or_else(|e| e.into_inner());
                f(&line);
            }
            None => println!("{line}"),
        }
        self.record_end(s)
    }

    fn record_end(&mut self, s: &Summary) -> Result<(), SessionError> {
        let mut body = serde_json::to_value(s).unwrap_or(Value::Null);
        if let Some(o) = body.as_object_mut() {
            o.remove("evaluations");
        }
        self.record("end", body)
    }
}

/// Share of the training time spent waiting for input above which a run is called input-bound.
pub const INPUT_BOUND_SHARE: f64 = 0.2;

/// A line saying that the input pipeline, not the model, bounded the run (its training loop
/// waited for batches for more than [`INPUT_BOUND_SHARE`] of the training time), or `None`.
pub fn input_bound_line(s: &Summary) -> Option<String> {
    let share = s.input_wait_seconds / s.train_seconds.max(1e-9);
    (s.train_seconds > 0.0 && share > INPUT_BOUND_SHARE).then(|| {
        format!(
            "input-bound: the training loop waited {:.1} s of {:.1} s ({:.0}%) for batches; more --workers{} would speed this run up",
            s.input_wait_seconds,
            s.train_seconds,
            100.0 * share,
            // Only folder images are resized to --image-size.
            if s.dataset == "folder" { " (or a smaller --image-size)" } else { "" }
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(train: f64, wait: f64) -> Summary {
        Summary {
            model: "lenet5".into(),
            dataset: "folder".into(),
            devices: vec!["cpu:0".into()],
            learners: vec![1],
            sync: "sma".into(),
            target_accuracy: None,
            reached_target: false,
            time_to_target_seconds: None,
            epochs_to_target: None,
            best_accuracy: 0.5,
            final_accuracy: 0.5,
            epochs: 1.0,
            iterations: 10,
            train_seconds: train,
            wall_seconds: train,
            images_per_sec: 100.0,
            input_wait_seconds: wait,
            phases: Phases::default(),
            probing: None,
            data_notes: vec![],
            evaluations: vec![],
        }
    }

    #[test]
    fn a_run_that_waits_for_input_is_called_input_bound() {
        assert_eq!(input_bound_line(&summary(10.0, 1.0)), None);
        assert_eq!(input_bound_line(&summary(10.0, 2.0)), None);
        let line = input_bound_line(&summary(10.0, 4.0)).unwrap();
        assert!(line.contains("waited 4.0 s of 10.0 s (40%)") && line.contains("--workers"), "{line}");
        assert_eq!(input_bound_line(&summary(0.0, 0.0)), None);
    }
}
