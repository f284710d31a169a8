//! The configurations running together: one shared stream of unit batches, a group (an
//! engine) per configuration, and the loop that brings them to each rung.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{Batch, Cursor, Pipeline, PipelineConfig};
use crossbow_kernels::CpuBackend;
use crossbow_replica::engine::{AutoTuner, CpuDevices, Engine, IterationRecord, TrainBatch};
use serde_json::json;

use super::report::print_table;
use super::state::{ExploreState, GroupState};
use super::{Configuration, Select, gcd};
use crate::config::{BnEval, LearnersPerDevice};
use crate::error::SessionError;
use crate::registry::SyncRegistry;
use crate::report::{EvalLine, Reporter};
use crate::source::{PipelineSource, TestSet};
use crate::train::{Data, auto_tuner, build_graph, calibration_pipeline, start_engine};

/// The batches every group draws from: unit batches of `g` images from one pipeline, kept
/// from the slowest live group's position to the fastest's.
pub(super) struct SharedStream {
    pub(super) pipeline: Pipeline,
    /// Unit number of `units[0]`.
    pub(super) first: u64,
    pub(super) units: VecDeque<Batch>,
    /// Units taken from the pipeline (each decoded and augmented once).
    pub(super) decoded: u64,
    /// Seconds the training thread waited for the pipeline.
    pub(super) wait_secs: f64,
    /// Seconds spent assembling learners' batches from units.
    pub(super) copy_secs: f64,
}

impl SharedStream {
    pub(super) fn unit(&mut self, seq: u64) -> Result<&Batch, SessionError> {
        while self.first + self.units.len() as u64 <= seq {
            let t0 = Instant::now();
            let b = self.pipeline.next_batch()?;
            self.wait_secs += t0.elapsed().as_secs_f64();
            self.decoded += 1;
            self.units.push_back(b);
        }
        let i =
            seq.checked_sub(self.first).ok_or_else(|| SessionError::run(format!("unit {seq} was already dropped")))?;
        self.units.get(i as usize).ok_or_else(|| SessionError::run(format!("unit {seq} is missing")))
    }

    /// One learner's batch: units `from..from + n`, concatenated.
    pub(super) fn batch(&mut self, from: u64, n: usize) -> Result<OwnedBatch, SessionError> {
        let mut out = OwnedBatch { images: vec![], labels: vec![] };
        for s in from..from + n as u64 {
            self.unit(s)?;
            let t0 = Instant::now();
            let u = self.unit(s)?;
            out.images.extend_from_slice(u.images());
            out.labels.extend_from_slice(u.labels());
            self.copy_secs += t0.elapsed().as_secs_f64();
        }
        Ok(out)
    }

    /// Drops the units before `seq` (no live group needs them).
    pub(super) fn release(&mut self, seq: u64) {
        while self.first < seq && !self.units.is_empty() {
            self.units.pop_front();
            self.first += 1;
        }
    }
}

pub(super) struct OwnedBatch {
    pub(super) images: Vec<f32>,
    pub(super) labels: Vec<f32>,
}

impl TrainBatch for OwnedBatch {
    fn images(&self) -> &[f32] {
        &self.images
    }
    fn labels(&self) -> &[f32] {
        &self.labels
    }
}

#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) enum Status {
    Running,
    Pruned(usize),
    /// Diverged at this epoch (NaN or exploded loss, or a non-finite central model): stopped
    /// and ranked last; the others go on.
    Diverged(f64),
    ReachedTarget,
    Stopped,
    Finished,
    Winner,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Status::Running => write!(f, "running"),
            Status::Pruned(r) => write!(f, "pruned at rung {}", r + 1),
            Status::Diverged(e) => write!(f, "diverged at epoch {e:.2}"),
            Status::ReachedTarget => write!(f, "reached target"),
            Status::Stopped => write!(f, "stopped (another reached the target)"),
            Status::Finished => write!(f, "finished"),
            Status::Winner => write!(f, "winner"),
        }
    }
}

/// One configuration while it runs.
pub(super) struct Group {
    pub(super) conf: Configuration,
    pub(super) engine: Option<Engine<CpuBackend>>,
    pub(super) tuner: Option<AutoTuner>,
    /// Units per learner batch (`batch size / g`).
    pub(super) units: usize,
    pub(super) next_unit: u64,
    pub(super) calibration: Option<(usize, PipelineSource)>,
    pub(super) test: TestSet,
    pub(super) next_eval: f64,
    pub(super) window: crate::train::Window,
    pub(super) train_secs: f64,
    pub(super) evals: Vec<EvalLine>,
    /// Accuracy at each rung reached.
    pub(super) rungs: Vec<f64>,
    pub(super) status: Status,
    pub(super) samples: u64,
    pub(super) iterations: u64,
    pub(super) learners: Vec<usize>,
    pub(super) calibration_samples: u64,
    /// Samples of one epoch of the unit stream.
    pub(super) per_epoch: usize,
    /// The divergence watch of `crossbow train`.
    pub(super) watch: crate::train::DivergenceWatch,
}

impl Group {
    pub(super) fn epoch(&self) -> f64 {
        self.samples as f64 / self.per_epoch.max(1) as f64
    }

    pub(super) fn live(&self) -> bool {
        self.status == Status::Running
    }

    pub(super) fn last_accuracy(&self) -> f64 {
        self.evals.last().map(|e| e.test_accuracy).unwrap_or(0.0)
    }
}

/// What a set of groups run together did.
pub(super) struct Outcome {
    pub(super) groups: Vec<Group>,
    pub(super) decoded_samples: u64,
    pub(super) wait_secs: f64,
    pub(super) copy_secs: f64,
    pub(super) unit: usize,
    pub(super) reached: Option<usize>,
    pub(super) rung_fractions: Vec<f64>,
    /// Stopped by a signal: which, after how many group steps, and the saved state.
    pub(super) stopped: Option<(i32, u64, std::path::PathBuf)>,
}

/// Shared context of one exploration.
pub(super) struct Ctx<'a> {
    pub(super) data: &'a Data,
    pub(super) registry: &'a SyncRegistry,
    pub(super) hw: (usize, usize),
    pub(super) reporter: Reporter,
    pub(super) wall: Instant,
    /// Wall seconds before this process (a resumed exploration).
    pub(super) wall_before: f64,
    pub(super) quiet: bool,
    /// Signals asking the exploration to stop (it then saves its state for `--resume`).
    pub(super) interrupt: crate::signals::Interrupt,
    /// The output folder (`state/` goes there).
    pub(super) out: std::path::PathBuf,
    /// The exploration's id (its metrics and saved state are this run's).
    pub(super) run_id: String,
}

impl Ctx<'_> {
    pub(super) fn say(&self, line: &str) {
        if !self.quiet {
            eprintln!("{line}");
        }
    }

    pub(super) fn start_group(
        &self,
        conf: &Configuration,
        g: usize,
        per_epoch: usize,
        stream_norm: &crossbow_data::Normalize,
        saved_layout: Option<&[usize]>,
    ) -> Result<Group, SessionError> {
        let cfg = &conf.cfg;
        let sync = self.registry.build_for(cfg)?.cpu();
        let graph = build_graph(cfg, self.data)?;
        let factory = Box::new(CpuDevices { count: self.hw.0, threads: self.hw.1 });
        let layout = match (saved_layout, cfg.learners_per_device) {
            (Some(l), _) => l.to_vec(),
            (None, LearnersPerDevice::Auto) => vec![1; self.hw.0],
            (None, LearnersPerDevice::Fixed(m)) => vec![m; self.hw.0],
        };
        let engine = start_engine(cfg, graph, factory, sync, &layout)?;
        let tuner = auto_tuner(cfg, &engine, self.data.train.len())?;
        let calibration = match cfg.bn_eval {
            BnEval::Recalibrate(n) if engine.graph().stats_len > 0 => {
                Some((n, PipelineSource { pipeline: calibration_pipeline(cfg, self.data, n, Cursor::default())? }))
            }
            _ => None,
        };
        Ok(Group {
            conf: conf.clone(),
            learners: engine.layout(),
            engine: Some(engine),
            tuner,
            units: cfg.batch_size / g,
            next_unit: 0,
            calibration,
            test: TestSet { dataset: Arc::clone(&self.data.test), normalize: stream_norm.clone() },
            next_eval: cfg.eval_every,
            window: crate::train::Window::default(),
            train_secs: 0.0,
            evals: vec![],
            rungs: vec![],
            status: Status::Running,
            samples: 0,
            iterations: 0,
            calibration_samples: 0,
            per_epoch,
            watch: crate::train::DivergenceWatch::default(),
        })
    }

    /// Configuration `conf` as a stopped exploration saved it: a live one's engine, tuner and
    /// recalibration stream restored exactly, a stopped one's results only.
    pub(super) fn restore_group(
        &self,
        conf: &Configuration,
        g: usize,
        per_epoch: usize,
        stream_norm: &crossbow_data::Normalize,
        saved: &GroupState,
    ) -> Result<Group, SessionError> {
        if saved.id != conf.id {
            return Err(SessionError::usage(format!(
                "--resume: the saved state's configuration #{} is not #{}",
                saved.id, conf.id
            )));
        }
        let mut gr = self.start_group(conf, g, per_epoch, stream_norm, Some(&saved.learners))?;
        gr.status = saved.status;
        gr.learners = saved.learners.clone();
        gr.next_unit = saved.next_unit;
        gr.next_eval = saved.next_eval;
        gr.window = saved.window.clone();
        gr.train_secs = saved.train_secs;
        gr.evals = saved.evals.clone();
        gr.rungs = saved.rungs.clone();
        gr.samples = saved.samples;
        gr.iterations = saved.iterations;
        gr.calibration_samples = saved.calibration_samples;
        gr.watch = saved.watch.clone();
        if !gr.live() {
            gr.engine = None;
            gr.tuner = None;
            gr.calibration = None;
            return Ok(gr);
        }
        let snap = super::state::engine_of(&self.out, conf.id)?;
        if let Some(engine) = gr.engine.as_mut() {
            engine.restore(&snap)?;
        }
        if let (Some(t), Some(v)) = (gr.tuner.as_mut(), &saved.tuner) {
            t.restore(v)?;
        }
        if let (Some((n, cal)), Some(cursor)) = (gr.calibration.as_mut(), saved.calibration_cursor) {
            *cal = PipelineSource { pipeline: calibration_pipeline(&conf.cfg, self.data, *n, cursor)? };
        }
        Ok(gr)
    }

    /// One iteration of group `g`.
    pub(super) fn step(
        &mut self,
        g: &mut Group,
        stream: &mut SharedStream,
        per_epoch: usize,
    ) -> Result<Stepped, SessionError> {
        let Some(engine) = g.engine.as_mut() else { return Err(SessionError::run("stepping a stopped configuration")) };
        let t0 = Instant::now();
        let mut batches = Vec::with_capacity(engine.learners());
        for _ in 0..engine.learners() {
            batches.push(stream.batch(g.next_unit, g.units)?);
            g.next_unit += g.units as u64;
        }
        let rec = match engine.step(batches, per_epoch) {
            Ok(r) => r,
            Err(crossbow_replica::ReplicaError::Diverged(why)) => return Ok(Stepped::Diverged(why)),
            Err(e) => return Err(SessionError::run(format!("configuration #{} ({}): {e}", g.conf.id, g.conf.label()))),
        };
        // The divergence watch of `crossbow train`.
        if let Some(why) = g.watch.check(engine, &rec, self.data.train.num_classes())? {
            return Ok(Stepped::Diverged(why));
        }
        let secs = t0.elapsed().as_secs_f64();
        g.train_secs += secs;
        g.window.add(&rec, secs);
        g.samples = engine.samples();
        g.iterations = engine.iteration();
        if let Some(t) = g.tuner.as_mut() {
            for ev in t.after_step(engine, &rec)? {
                self.say(&format!("#{} {}", g.conf.id, ev.line()));
                self.reporter.record("tuner", json!({ "id": g.conf.id, "event": ev }))?;
            }
        }
        g.learners = engine.layout();
        Ok(Stepped::Ok(rec))
    }

    /// Evaluates group `g`'s central model as `crossbow train` does (recalibrating batch-norm
    /// statistics first when configured).
    pub(super) fn evaluate(&mut self, g: &mut Group, rec: &IterationRecord) -> Result<f64, SessionError> {
        let Some(engine) = g.engine.as_mut() else {
            return Err(SessionError::run("evaluating a stopped configuration"));
        };
        let window = std::mem::take(&mut g.window);
        let line = crate::train::evaluate_central(
            engine,
            rec,
            window,
            crate::train::Evaluation {
                test: &mut g.test,
                calibration: g.calibration.as_mut(),
                train_seconds: &mut g.train_secs,
                wall: (self.wall, 0.0),
            },
        )?;
        if let Some((n, _)) = &g.calibration {
            g.calibration_samples += (*n * g.conf.cfg.batch_size) as u64;
        }
        let ev = (line.test_accuracy, line.test_loss);
        self.say(&format!(
            "#{:<3} {:<40} epoch {:6.2}  test acc {:6.2}%  {}",
            g.conf.id,
            g.conf.label(),
            rec.epoch,
            100.0 * ev.0,
            g.status
        ));
        let mut body = serde_json::to_value(&line).map_err(SessionError::run)?;
        if let Some(o) = body.as_object_mut() {
            o.insert("id".into(), json!(g.conf.id));
        }
        self.reporter.record("eval", body)?;
        g.evals.push(line);
        Ok(ev.0)
    }
}

/// What one iteration of a configuration gave.
pub(super) enum Stepped {
    Ok(IterationRecord),
    /// The configuration diverged (why).
    Diverged(String),
}

/// Marks group `g` diverged and frees its engine; the others go on.
pub(super) fn mark_diverged(ctx: &mut Ctx<'_>, g: &mut Group, why: &str) -> Result<(), SessionError> {
    g.status = Status::Diverged(g.epoch());
    g.engine = None;
    g.tuner = None;
    g.calibration = None;
    ctx.say(&format!("#{} {}: diverged ({why}); stopped, the others go on", g.conf.id, g.conf.label()));
    ctx.reporter.record("diverged", json!({ "id": g.conf.id, "epoch": g.epoch(), "why": why }))
}

/// Runs `confs` together from one stream, with rungs at `fractions` of the budget.
pub(super) fn run_groups(
    ctx: &mut Ctx<'_>,
    confs: &[Configuration],
    select: &Select,
    fractions: &[f64],
    resume: Option<ExploreState>,
) -> Result<Outcome, SessionError> {
    let first = &confs[0].cfg;
    let g = confs.iter().map(|c| c.cfg.batch_size).fold(0, gcd);
    let most = confs
        .iter()
        .map(|c| {
            let k = match c.cfg.learners_per_device {
                LearnersPerDevice::Auto => c.cfg.max_learners,
                LearnersPerDevice::Fixed(m) => m,
            };
            k * ctx.hw.0 * c.cfg.batch_size / g
        })
        .max()
        .unwrap_or(1);
    let mut pc = PipelineConfig::new(g, first.seed);
    pc.workers = first.workers;
    pc.prefetch = (2 * most).max(4);
    if let crate::config::AugmentChoice::Set(a) = first.augment {
        pc.augment = Some(a);
    }
    pc.normalize = Some(crate::train::normalize_for(first, &ctx.data.train)?);
    let mut pipeline = Pipeline::new(Arc::clone(&ctx.data.train), pc.clone())?;
    let per_epoch = pipeline.batches_per_epoch() as usize * g;
    let norm = pipeline.normalize().clone();
    let (mut groups, mut last, mut rung, mut steps, mut stream) = match resume {
        None => {
            let groups =
                confs.iter().map(|c| ctx.start_group(c, g, per_epoch, &norm, None)).collect::<Result<Vec<_>, _>>()?;
            let stream =
                SharedStream { pipeline, first: 0, units: VecDeque::new(), decoded: 0, wait_secs: 0.0, copy_secs: 0.0 };
            (groups, vec![None; confs.len()], 0, 0u64, stream)
        }
        Some(state) => {
            // The unit stream continues at the first unit a live configuration still needs.
            let bpe = pipeline.batches_per_epoch().max(1);
            pc.start = Cursor { epoch: state.first_unit / bpe, batch: state.first_unit % bpe };
            pipeline = Pipeline::new(Arc::clone(&ctx.data.train), pc)?;
            let stream = SharedStream {
                pipeline,
                first: state.first_unit,
                units: VecDeque::new(),
                decoded: state.decoded,
                wait_secs: state.wait_secs,
                copy_secs: state.copy_secs,
            };
            let mut groups = Vec::with_capacity(confs.len());
            let mut last = Vec::with_capacity(confs.len());
            for (c, saved) in confs.iter().zip(state.groups) {
                groups.push(ctx.restore_group(c, g, per_epoch, &norm, &saved)?);
                last.push(saved.last);
            }
            (groups, last, state.rung, state.steps, stream)
        }
    };
    let epochs = first.epochs;
    let mut reached = None;
    let mut stopped = None;
    'run: loop {
        let limit = fractions[rung] * epochs;
        let final_rung = rung + 1 == fractions.len();
        // The live group furthest behind that has not reached the rung steps next. The last
        // rung is the epoch limit (the nearest iteration boundary, as `crossbow train` ends);
        // an earlier one is reached at the first iteration at or past it, where `crossbow
        // train` evaluates when an evaluation is due there (the same evaluations).
        let next = groups
            .iter()
            .enumerate()
            .filter(|(_, gr)| gr.live())
            .filter(|(_, gr)| {
                let k = gr.engine.as_ref().map(|e| e.learners()).unwrap_or(1);
                if final_rung {
                    !crate::limits::epoch_limit_reached(
                        gr.samples,
                        (k * gr.conf.cfg.batch_size) as u64,
                        per_epoch,
                        limit,
                    )
                } else {
                    (gr.samples as f64) < limit * per_epoch as f64 - 1e-9 * per_epoch as f64
                }
            })
            .min_by(|a, b| a.1.samples.cmp(&b.1.samples).then(a.0.cmp(&b.0)))
            .map(|(i, _)| i);
        if let Some(i) = next {
            let rec = match ctx.step(&mut groups[i], &mut stream, per_epoch)? {
                Stepped::Ok(rec) => rec,
                Stepped::Diverged(why) => {
                    mark_diverged(ctx, &mut groups[i], &why)?;
                    if let Some(low) = groups.iter().filter(|gr| gr.live()).map(|gr| gr.next_unit).min() {
                        stream.release(low);
                    }
                    continue;
                }
            };
            let due = match groups[i].conf.cfg.eval_every_iterations {
                Some(n) => rec.iteration.is_multiple_of(n),
                None => rec.epoch >= groups[i].next_eval - 1e-9,
            };
            let done = rec.epoch >= epochs - 1e-9;
            if due || done {
                groups[i].next_eval =
                    crate::limits::next_evaluation(groups[i].next_eval, rec.epoch, groups[i].conf.cfg.eval_every);
                let acc = ctx.evaluate(&mut groups[i], &rec)?;
                if select.target.is_some_and(|t| acc >= t) {
                    reached = Some(i);
                    groups[i].status = Status::ReachedTarget;
                    last[i] = Some(rec);
                    break 'run;
                }
            }
            last[i] = Some(rec);
            if let Some(low) = groups.iter().filter(|gr| gr.live()).map(|gr| gr.next_unit).min() {
                stream.release(low);
            }
            steps += 1;
            if let Some(sig) = ctx.interrupt.requested(steps) {
                // Stop here, between steps: save everything a resume needs.
                let wall = ctx.wall.elapsed().as_secs_f64() + ctx.wall_before;
                let path =
                    super::state::save(&ctx.out, &ctx.run_id, &groups, &last, &stream, fractions, rung, steps, wall)?;
                ctx.reporter.record("interrupted", json!({ "signal": sig, "steps": steps, "state": path }))?;
                stopped = Some((sig, steps, path));
                break 'run;
            }
            continue;
        }
        // Every live group is at the rung: evaluate where not just evaluated, rank, prune.
        let live: Vec<usize> = (0..groups.len()).filter(|&i| groups[i].live()).collect();
        for &i in &live {
            let Some(rec) = last[i].clone() else { continue };
            let acc = if groups[i].evals.last().is_some_and(|e| e.iteration == rec.iteration) {
                groups[i].last_accuracy()
            } else {
                let acc = ctx.evaluate(&mut groups[i], &rec)?;
                // The rung stops a group at the iteration nearest to it, which may fall just
                // short of an evaluation that is due there: this evaluation stands for it (not
                // a second one an iteration later at the "same" epoch).
                let k = groups[i].engine.as_ref().map(|e| e.learners()).unwrap_or(1);
                let step_epochs = (k * groups[i].conf.cfg.batch_size) as f64 / per_epoch.max(1) as f64;
                if groups[i].conf.cfg.eval_every_iterations.is_none() && groups[i].next_eval - rec.epoch < step_epochs {
                    let every = groups[i].conf.cfg.eval_every;
                    let next = groups[i].next_eval;
                    groups[i].next_eval = crate::limits::next_evaluation(next, next, every);
                }
                if select.target.is_some_and(|t| acc >= t) {
                    reached = Some(i);
                    groups[i].status = Status::ReachedTarget;
                    break 'run;
                }
                acc
            };
            groups[i].rungs.push(acc);
        }
        let mut ranked = live.clone();
        ranked.sort_by(|&a, &b| groups[b].rungs[rung].total_cmp(&groups[a].rungs[rung]).then(a.cmp(&b)));
        let is_last = final_rung;
        let keep = match select.eta {
            Some(eta) if !is_last => ranked.len().div_ceil(eta).max(select.top_k).min(ranked.len()),
            _ => ranked.len(),
        };
        let mut freed = 0;
        for &i in &ranked[keep..] {
            groups[i].status = Status::Pruned(rung);
            freed += groups[i].learners.iter().sum::<usize>();
            // Dropping the engine frees its memory now.
            groups[i].engine = None;
            groups[i].tuner = None;
            groups[i].calibration = None;
        }
        ctx.reporter.record(
            "rung",
            json!({
                "rung": rung, "fraction": fractions[rung], "epoch": limit,
                "results": ranked.iter().map(|&i| json!({
                    "id": groups[i].conf.id, "accuracy": groups[i].rungs[rung], "kept": groups[i].live(),
                    "epoch": groups[i].epoch(), "learners": groups[i].learners,
                })).collect::<Vec<_>>(),
            }),
        )?;
        if !ctx.quiet {
            eprintln!(
                "rung {} of {} at {:.3} epochs (budget fraction {:.3}):",
                rung + 1,
                fractions.len(),
                limit,
                fractions[rung]
            );
            print_table(&groups);
        }
        if is_last {
            break;
        }
        if select.grow && freed > 0 {
            grow(ctx, &mut groups, &ranked[..keep], freed)?;
        }
        if let Some(low) = groups.iter().filter(|gr| gr.live()).map(|gr| gr.next_unit).min() {
            stream.release(low);
        }
        rung += 1;
    }
    // Every run's final evaluation: at its last iteration (as `crossbow train` ends). A
    // stopped exploration leaves its live configurations as they are (running).
    for (i, gr) in groups.iter_mut().enumerate().filter(|_| stopped.is_none()) {
        if gr.status == Status::Running {
            gr.status = if reached.is_some() { Status::Stopped } else { Status::Finished };
        }
        if reached.is_none()
            && gr.status == Status::Finished
            && let Some(rec) = last[i].clone()
            && gr.evals.last().is_none_or(|e| e.iteration != rec.iteration)
        {
            ctx.evaluate(gr, &rec)?;
        }
        gr.engine = None;
        gr.tuner = None;
    }
    Ok(Outcome {
        groups,
        decoded_samples: stream.decoded * g as u64,
        wait_secs: stream.wait_secs,
        copy_secs: stream.copy_secs,
        unit: g,
        reached,
        rung_fractions: fractions.to_vec(),
        stopped,
    })
}

/// Gives `freed` learners of pruned configurations to the survivors with a fixed learner
/// count, one at a time in rank order, while each stays within max-learners and its device's
/// memory budget.
pub(super) fn grow(
    ctx: &mut Ctx<'_>,
    groups: &mut [Group],
    survivors: &[usize],
    mut freed: usize,
) -> Result<(), SessionError> {
    let mut progress = true;
    while freed > 0 && progress {
        progress = false;
        for &i in survivors {
            if freed == 0 {
                break;
            }
            let gr = &mut groups[i];
            if gr.tuner.is_some() {
                continue; // the auto-tuner decides its learners
            }
            let Some(engine) = gr.engine.as_mut() else { continue };
            let layout = engine.layout();
            let Some((d, &k)) = layout.iter().enumerate().min_by_key(|(_, k)| **k) else { continue };
            let fp = engine.footprint();
            let fits = engine
                .memory_budget(d)
                .is_none_or(|b| fp.fixed_bytes_per_device + fp.bytes_per_learner * (k as u64 + 1) <= b);
            if k >= gr.conf.cfg.max_learners || !fits {
                continue;
            }
            engine.add_learner(d)?;
            gr.learners = engine.layout();
            freed -= 1;
            progress = true;
            let line = format!("#{} {}: takes a freed learner, now {:?}", gr.conf.id, gr.conf.label(), gr.learners);
            ctx.say(&line);
            ctx.reporter.record("grow", json!({ "id": gr.conf.id, "learners": gr.learners }))?;
        }
    }
    Ok(())
}
