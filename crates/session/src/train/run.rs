//! The state of a run between iterations: its data streams, the evaluation schedule and
//! the evaluations, the clock, the training window.

use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{Cursor, Dataset, Share};
use crossbow_kernels::Backend;
use crossbow_replica::ReplicaError;
use crossbow_replica::engine::{Engine, IterationRecord, LossRecord, TrainSource};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Data;
use super::data::{calibration_pipeline, pipeline_for, train_batch};
use crate::config::{BnEval, LearnersPerDevice, TrainConfig};
use crate::error::SessionError;
use crate::probing::LayoutTimes;
use crate::report::{EvalLine, Phases, Reporter, Summary};
use crate::source::{PipelineSource, TestSet};

/// Why [`Run::step`] failed.
pub(super) enum StepError {
    /// A learner's loss became NaN or infinite (the engine's check).
    Diverged(String),
    /// Anything else.
    Other(String),
}

/// Training images, loss and time since the last evaluation.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Window {
    loss: f64,
    correct: f64,
    images: usize,
    seconds: f64,
    /// Images `loss` and `correct` cover: fewer than `images` while losses are read one
    /// iteration late ([`LossRead::Lagged`]). None in a checkpoint written before losses
    /// could lag (then the same as `images`).
    #[serde(default)]
    loss_images: Option<usize>,
}

impl Window {
    /// Counts iteration `rec`, which took `seconds` (and the losses it carries, which may be
    /// of the iteration before).
    pub fn add(&mut self, rec: &IterationRecord, seconds: f64) {
        *self.loss_images.get_or_insert(self.images) += rec.loss_images;
        self.loss += rec.loss * rec.loss_images as f64;
        self.correct += rec.accuracy * rec.loss_images as f64;
        self.images += rec.images;
        self.seconds += seconds;
    }

    /// Counts losses read late ([`Engine::flush_losses`]).
    pub fn add_losses(&mut self, late: &LossRecord) {
        *self.loss_images.get_or_insert(self.images) += late.images;
        self.loss += late.loss * late.images as f64;
        self.correct += late.accuracy * late.images as f64;
    }

    /// Mean training loss and accuracy over the window's images whose losses were read.
    pub(super) fn means(&self) -> (f64, f64) {
        let n = self.loss_images.unwrap_or(self.images).max(1) as f64;
        (self.loss / n, self.correct / n)
    }
}

/// What one evaluation of the central model needs besides the engine: the test set, the
/// batch-norm recalibration stream (when configured), the training window since the last
/// evaluation, and the training clock (recalibration counts as training time).
pub struct Evaluation<'a> {
    /// The test set.
    pub test: &'a mut TestSet,
    /// Batches per recalibration and their stream, when batch-norm statistics are
    /// recalibrated on the central model before each evaluation.
    pub calibration: Option<&'a mut (usize, PipelineSource)>,
    /// Training seconds so far (recalibration is added).
    pub train_seconds: &'a mut f64,
    /// When this process started the run, and the wall seconds before it (a resumed run):
    /// the line's wall time is taken when the evaluation ends.
    pub wall: (Instant, f64),
}

/// Evaluates the central model after iteration `rec` (recalibrating its batch-norm
/// statistics first when configured) and returns the line a run reports, with the training
/// figures of `window` (the iterations since the last evaluation). What `crossbow train` and
/// every configuration of `crossbow explore` evaluate with.
pub fn evaluate_central<B: Backend>(
    engine: &mut Engine<B>,
    rec: &IterationRecord,
    window: Window,
    ev: Evaluation<'_>,
) -> Result<EvalLine, SessionError> {
    if let Some((n, cal)) = ev.calibration {
        let t0 = Instant::now();
        let batches = (0..*n).map(|_| cal.next_batch()).collect::<Result<Vec<_>, _>>()?;
        engine.recalibrate(batches)?;
        *ev.train_seconds += t0.elapsed().as_secs_f64();
    }
    let result = engine.evaluate(ev.test)?;
    let w = window;
    let (train_loss, train_accuracy) = w.means();
    Ok(EvalLine {
        iteration: rec.iteration,
        epoch: rec.epoch,
        train_seconds: *ev.train_seconds,
        wall_seconds: ev.wall.0.elapsed().as_secs_f64() + ev.wall.1,
        lr: rec.lr,
        train_loss,
        train_accuracy,
        test_loss: result.loss,
        test_accuracy: result.accuracy,
        images_per_sec: w.images as f64 / w.seconds.max(1e-9),
        learners: engine.layout(),
        diagnostics: None,
    })
}

/// The seconds a run spends outside its iterations, kept across a resume.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub(super) struct SidePhases {
    pub(super) recalibration: f64,
    pub(super) evaluation: f64,
    pub(super) checkpoints: f64,
}

/// The state of a training run between iterations: data streams, the evaluation schedule,
/// the clock and what the evaluations found.
pub(super) struct Run {
    pub(super) source: PipelineSource,
    /// The batches of every iteration this rank's pipeline prepares (none: all of them).
    pub(super) share: Option<Share>,
    /// With a global batch: each pipeline batch is an iteration's, split among the learners.
    pub(super) global: bool,
    /// Images per recalibration batch (the engine's batch size when it started).
    pub(super) calibration_batch: usize,
    pub(super) test: TestSet,
    /// Batch-norm recalibration: batches per evaluation and their own stream (another seed,
    /// so the training batches are the same whichever statistics evaluation uses).
    pub(super) calibration: Option<(usize, PipelineSource)>,
    pub(super) per_epoch: usize,
    pub(super) target: Option<f64>,
    pub(super) schedule: EvalSchedule,
    pub(super) wall: Instant,
    /// Wall seconds before this process (a resumed run).
    pub(super) wall_before: f64,
    /// Training time: iterations, and batch-norm recalibration for evaluation.
    pub(super) train_secs: f64,
    /// Of that, waiting for training batches.
    pub(super) input_wait_secs: f64,
    /// Step time by learner layout (what the auto-tuner's probing cost).
    pub(super) layouts: LayoutTimes,
    /// Recalibration (also in `train_secs`), evaluation and checkpoint seconds.
    pub(super) phases: SidePhases,
    /// The last training loss read (what the progress line shows).
    pub(super) shown_loss: f64,
    pub(super) window: Window,
    pub(super) evals: Vec<EvalLine>,
    pub(super) best: f64,
    /// Training seconds and epochs when the target was first reached.
    pub(super) reached: Option<(f64, f64)>,
    /// Seconds of each iteration's all-reduce between ranks (several processes only).
    pub(super) rank_allreduce: Vec<f64>,
    /// `--diagnostics`: what they keep between evaluations.
    pub(super) diagnostics: Option<crate::diagnostics::Tracker>,
    /// A streamed training set, and how many bad files a warning has reported so far.
    pub(super) streamed: Option<(Arc<Dataset>, usize)>,
}

impl Run {
    pub(super) fn new<B: Backend>(cfg: &TrainConfig, data: &Data, engine: &Engine<B>) -> Result<Self, SessionError> {
        let n_dev = engine.devices().len();
        // Every rank draws the whole iteration's batches (and keeps its own).
        let max_k = match cfg.learners_per_device {
            LearnersPerDevice::Auto => cfg.max_learners,
            LearnersPerDevice::Fixed(m) => m,
        } * n_dev
            * engine.world().size();
        // With several ranks and a fixed number of learners, each rank's pipeline prepares
        // only its learners' batches of every iteration (the tuner may change the counts, so
        // with it every rank draws every batch and keeps its own).
        let global = cfg.global_batch_size.is_some();
        let share = match cfg.learners_per_device {
            // (A global batch is drawn whole by every rank, which keeps its learners' parts.)
            LearnersPerDevice::Fixed(_) if engine.world().size() > 1 && !global => {
                let from = engine.learner_offset() as u64;
                Some(Share { period: engine.world_learners() as u64, from, to: from + engine.learners() as u64 })
            }
            _ => None,
        };
        let prefetch = if global {
            4
        } else if share.is_some() {
            2 * engine.learners()
        } else {
            2 * max_k
        };
        let batch = train_batch(cfg);
        let source =
            PipelineSource { pipeline: pipeline_for(cfg, data, batch, prefetch, cfg.seed, Cursor::default(), share)? };
        let calibration_batch = engine.config().batch_size;
        let test = TestSet { dataset: Arc::clone(&data.test), normalize: source.pipeline.normalize().clone() };
        let calibration = match cfg.bn_eval {
            BnEval::Recalibrate(n) if engine.graph().stats_len > 0 => {
                let pipeline = calibration_pipeline(cfg, data, calibration_batch, n, Cursor::default())?;
                Some((n, PipelineSource { pipeline }))
            }
            _ => None,
        };
        let per_epoch = source.samples_per_epoch();
        Ok(Run {
            source,
            share,
            global,
            calibration_batch,
            test,
            calibration,
            per_epoch,
            target: cfg.target_accuracy,
            schedule: EvalSchedule::new(cfg.epochs, cfg.eval_every, cfg.eval_every_iterations),
            wall: Instant::now(),
            wall_before: 0.0,
            train_secs: 0.0,
            input_wait_secs: 0.0,
            layouts: LayoutTimes::default(),
            phases: SidePhases::default(),
            shown_loss: 0.0,
            window: Window::default(),
            evals: vec![],
            best: 0.0,
            reached: None,
            rank_allreduce: vec![],
            diagnostics: cfg.diagnostics.then(crate::diagnostics::Tracker::default),
            streamed: data.train.is_streamed().then(|| {
                let known = data.train.streaming_report().map_or(0, |r| r.bad_images);
                (Arc::clone(&data.train), known)
            }),
        })
    }

    /// The run's counters, evaluations and data positions, for a checkpoint.
    pub(super) fn save(&self) -> Value {
        json!({
            "train_cursor": self.source.pipeline.cursor(),
            "calibration_cursor": self.calibration.as_ref().map(|(_, c)| c.pipeline.cursor()),
            "next_eval": self.schedule.next_eval,
            "train_seconds": self.train_secs,
            "input_wait_seconds": self.input_wait_secs,
            "layouts": self.layouts,
            "phases": self.phases,
            "wall_seconds": self.wall.elapsed().as_secs_f64() + self.wall_before,
            "window": self.window,
            "evaluations": self.evals,
            "best": self.best,
            "reached": self.reached,
        })
    }

    /// Continues from what [`Run::save`] wrote: the data streams restart at their saved
    /// positions (the same batches as if they had not stopped).
    pub(super) fn restore(&mut self, cfg: &TrainConfig, data: &Data, v: &Value) -> Result<(), SessionError> {
        #[derive(Deserialize)]
        struct Saved {
            train_cursor: Cursor,
            calibration_cursor: Option<Cursor>,
            next_eval: f64,
            train_seconds: f64,
            // Absent from checkpoints of earlier versions.
            #[serde(default)]
            input_wait_seconds: f64,
            #[serde(default)]
            layouts: LayoutTimes,
            #[serde(default)]
            phases: SidePhases,
            wall_seconds: f64,
            window: Window,
            evaluations: Vec<EvalLine>,
            best: f64,
            reached: Option<(f64, f64)>,
        }
        let s: Saved = serde_json::from_value(v.clone())
            .map_err(|e| SessionError::usage(format!("checkpoint: the run's state is unreadable: {e}")))?;
        let prefetch = self.source.pipeline.batches_per_epoch().min(64) as usize;
        self.source = PipelineSource {
            pipeline: pipeline_for(cfg, data, train_batch(cfg), prefetch.max(4), cfg.seed, s.train_cursor, self.share)?,
        };
        if let Some((n, cal)) = self.calibration.as_mut() {
            let at = s.calibration_cursor.unwrap_or_default();
            *cal = PipelineSource { pipeline: calibration_pipeline(cfg, data, self.calibration_batch, *n, at)? };
        }
        self.schedule.next_eval = s.next_eval;
        self.train_secs = s.train_seconds;
        self.input_wait_secs = s.input_wait_seconds;
        self.layouts = s.layouts;
        self.phases = s.phases;
        self.wall_before = s.wall_seconds;
        self.wall = Instant::now();
        self.window = s.window;
        self.evals = s.evaluations;
        self.best = s.best;
        self.reached = s.reached;
        Ok(())
    }

    pub(super) fn epoch<B: Backend>(&self, engine: &Engine<B>) -> f64 {
        engine.samples() as f64 / self.per_epoch as f64
    }

    /// The epoch limit is reached, or the target.
    pub(super) fn finished<B: Backend>(&self, engine: &Engine<B>) -> bool {
        let next = engine.images_per_iteration() as u64;
        crate::limits::epoch_limit_reached(engine.samples(), next, self.per_epoch, self.schedule.epochs)
            || self.reached.is_some()
    }

    /// One iteration with a batch per learner; its time counts as training time.
    pub(super) fn step<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        reporter: &mut Reporter,
    ) -> Result<IterationRecord, StepError> {
        let t0 = Instant::now();
        // Every rank draws the iteration's batches of all ranks in the global learner order and
        // keeps its own slice, so each learner trains on the batch it would have had in one
        // process with all the learners.
        engine.sync_layout().map_err(|e| StepError::Other(e.to_string()))?;
        let (offset, mine, all) = (engine.learner_offset(), engine.learners(), engine.world_learners());
        let mut batches = Vec::with_capacity(mine);
        let waiting = Instant::now();
        match self.share {
            // One batch per iteration, split among every rank's learners; this rank keeps its
            // learners' parts.
            _ if self.global => {
                let whole = self.source.next_batch().map_err(|e| StepError::Other(e.to_string()))?;
                let parts = whole.split(all).map_err(|e| StepError::Other(e.to_string()))?;
                batches.extend(parts.into_iter().skip(offset).take(mine));
            }
            // The pipeline prepares only this rank's slice.
            Some(s) => {
                if (s.period, s.from, s.to) != (all as u64, offset as u64, (offset + mine) as u64) {
                    return Err(StepError::Other(format!(
                        "the learners changed ({mine} of {all} from {offset}) while the data pipeline prepares batches {}..{} of every {}",
                        s.from, s.to, s.period
                    )));
                }
                for _ in 0..mine {
                    batches.push(self.source.next_batch().map_err(|e| StepError::Other(e.to_string()))?);
                }
            }
            None => {
                for i in 0..all {
                    let b = self.source.next_batch().map_err(|e| StepError::Other(e.to_string()))?;
                    if (offset..offset + mine).contains(&i) {
                        batches.push(b);
                    }
                }
            }
        }
        let waited = waiting.elapsed().as_secs_f64();
        self.input_wait_secs += waited;
        if let Some(d) = self.diagnostics.as_mut() {
            d.before_step(engine).map_err(|e| StepError::Other(e.to_string()))?;
        }
        let rec = match engine.step(batches, self.per_epoch) {
            Ok(r) => r,
            Err(ReplicaError::Diverged(why)) => return Err(StepError::Diverged(why)),
            Err(e) => return Err(StepError::Other(e.to_string())),
        };
        let secs = t0.elapsed().as_secs_f64();
        self.train_secs += secs;
        self.layouts.add(&rec.learners, rec.images, secs - waited);
        self.window.add(&rec, secs);
        if engine.world().size() > 1 {
            self.rank_allreduce.push(rec.rank_allreduce_seconds);
        }
        if rec.loss_images > 0 {
            self.shown_loss = rec.loss;
        }
        self.warn_bad_files(reporter);
        reporter.progress(rec.epoch, rec.images as f64 / secs.max(1e-9), self.shown_loss, &rec.learners);
        Ok(rec)
    }

    /// Streamed data: says when training meets files that no longer decode (as it happens,
    /// not only at the end): at the first, then each time their count has doubled.
    fn warn_bad_files(&mut self, reporter: &mut Reporter) {
        let Some((ds, warned)) = self.streamed.as_mut() else { return };
        let Some(r) = ds.streaming_report() else { return };
        let due = if *warned == 0 { r.bad_images > 0 } else { r.bad_images >= 2 * *warned };
        if due {
            *warned = r.bad_images;
            let first = r.first_bad.first().map_or_else(String::new, |(p, why)| format!(" (first: {p}: {why})"));
            reporter.warn(&format!(
                "warning: {} training image file(s) failed to decode while training{first}; each is replaced by the next file that decodes (the run stops if more than {}% go bad)",
                r.bad_images,
                100.0 * crossbow_data::MAX_BAD_SHARE
            ));
        }
    }

    /// The evaluation schedule's [`EvalSchedule::due`] after iteration `rec`.
    pub(super) fn evaluation_due(&mut self, rec: &IterationRecord) -> bool {
        self.schedule.due(rec.iteration, rec.epoch)
    }

    /// Evaluates the central model (after recalibrating its batch-norm statistics when
    /// configured, counted as training time), reports it and checks the target.
    pub(super) fn evaluate<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        rec: &IterationRecord,
        reporter: &mut Reporter,
    ) -> Result<(), SessionError> {
        let window = std::mem::take(&mut self.window);
        let (t0, before) = (Instant::now(), self.train_secs);
        let mut line = evaluate_central(
            engine,
            rec,
            window,
            Evaluation {
                test: &mut self.test,
                calibration: self.calibration.as_mut(),
                train_seconds: &mut self.train_secs,
                wall: (self.wall, self.wall_before),
            },
        )?;
        if let Some(d) = self.diagnostics.as_mut() {
            line.diagnostics = Some(d.measure(engine, &mut self.test)?);
        }
        let recalibration = self.train_secs - before;
        self.phases.recalibration += recalibration;
        self.phases.evaluation += (t0.elapsed().as_secs_f64() - recalibration).max(0.0);
        let ev = (line.test_accuracy, line.test_loss);
        reporter.eval(&line)?;
        self.best = self.best.max(ev.0);
        if let Some(target) = self.target
            && ev.0 >= target
            && self.reached.is_none()
        {
            self.reached = Some((self.train_secs, rec.epoch));
        }
        self.evals.push(line);
        Ok(())
    }

    /// Where the wall time went so far.
    pub(super) fn phases(&self) -> Phases {
        let SidePhases { recalibration, evaluation, checkpoints } = self.phases;
        let wall = self.wall.elapsed().as_secs_f64() + self.wall_before;
        let steps = (self.train_secs - recalibration - self.input_wait_secs).max(0.0);
        let counted = steps + self.input_wait_secs + recalibration + evaluation + checkpoints;
        Phases {
            steps,
            input_wait: self.input_wait_secs,
            recalibration,
            evaluation,
            checkpoints,
            other: (wall - counted).max(0.0),
        }
    }

    pub(super) fn summary<B: Backend>(&self, cfg: &TrainConfig, engine: &Engine<B>) -> Summary {
        let (sync_name, _) = engine.synchroniser();
        let world = engine.world();
        // With several ranks the job's learners (by rank), not only this rank's.
        let (devices, learners) = if world.size() > 1 {
            let local: Vec<String> = engine.devices().iter().map(|d| d.to_string()).collect();
            (vec![format!("{} ranks (this one: {})", world.size(), local.join(","))], engine.world_layout().to_vec())
        } else {
            (engine.devices().iter().map(|d| d.to_string()).collect(), engine.layout())
        };
        Summary {
            model: cfg.model.to_string(),
            dataset: cfg.dataset.to_string(),
            devices,
            learners,
            sync: sync_name.to_string(),
            target_accuracy: cfg.target_accuracy,
            reached_target: self.reached.is_some(),
            time_to_target_seconds: self.reached.map(|r| r.0),
            epochs_to_target: self.reached.map(|r| r.1),
            best_accuracy: self.best,
            final_accuracy: self.evals.last().map(|e| e.test_accuracy).unwrap_or(0.0),
            epochs: self.epoch(engine),
            iterations: engine.iteration(),
            train_seconds: self.train_secs,
            wall_seconds: self.wall.elapsed().as_secs_f64() + self.wall_before,
            images_per_sec: engine.samples() as f64 / self.train_secs.max(1e-9),
            input_wait_seconds: self.input_wait_secs,
            phases: self.phases(),
            probing: self.layouts.cost(&engine.layout()),
            data_notes: [self.source.pipeline.dataset(), &self.test.dataset]
                .iter()
                .filter_map(|d| d.streaming_report().and_then(|r| r.summary(d.split())))
                .collect(),
            evaluations: self.evals.clone(),
        }
    }
}

/// When the central model is evaluated: every `eval_every` epochs (or every
/// `every_iterations` iterations), and at the epoch limit.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct EvalSchedule {
    /// The epoch limit.
    pub(super) epochs: f64,
    eval_every: f64,
    every_iterations: Option<u64>,
    /// The epoch of the next evaluation by epochs (kept in checkpoints).
    pub(super) next_eval: f64,
}

impl EvalSchedule {
    pub(super) fn new(epochs: f64, eval_every: f64, every_iterations: Option<u64>) -> Self {
        EvalSchedule { epochs, eval_every, every_iterations, next_eval: eval_every }
    }

    /// Whether to evaluate after `iteration`, which ended at `epoch`; when it is, the next
    /// evaluation by epochs moves past `epoch` (a long iteration skips the evaluations it
    /// stepped over rather than doing them one after another).
    pub(super) fn due(&mut self, iteration: u64, epoch: f64) -> bool {
        let done = epoch >= self.epochs - 1e-9;
        let due = match self.every_iterations {
            Some(n) => iteration.is_multiple_of(n),
            None => epoch >= self.next_eval - 1e-9,
        };
        if due || done {
            self.next_eval = crate::limits::next_evaluation(self.next_eval, epoch, self.eval_every);
        }
        due || done
    }
}
