//! The configurations running together: one shared stream of unit batches, a group (an
//! engine) per configuration, and the loop that brings them to each rung.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use crossbow_data::{Batch, Cursor, Pipeline, PipelineConfig};
use crossbow_replica::engine::{CpuDevices, IterationRecord};
use crossbow_session::branch::OwnedBatch;
use crossbow_session::{Branch, BranchStep, Data};
use serde_json::json;

use super::report::print_table;
use super::state::{ExploreState, GroupState};
use super::{Configuration, Select, gcd};
use crate::config::LearnersPerDevice;
use crate::error::SessionError;
use crate::registry::SyncRegistry;
use crate::report::{EvalLine, Reporter};

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
    /// Its learners, engine, tuner and evaluation while it is live.
    pub(super) branch: Option<Branch>,
    /// Units per learner batch (`batch size / g`).
    pub(super) units: usize,
    pub(super) next_unit: u64,
    pub(super) next_eval: f64,
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
    /// The CPU core groups every configuration runs on.
    pub(super) cores: CpuDevices,
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
    ) -> Result<Group, SessionError> {
        let branch = Branch::start(&conf.cfg, self.data, self.registry, &self.cores, stream_norm, None)?;
        Ok(Group {
            conf: conf.clone(),
            learners: branch.layout(),
            branch: Some(branch),
            units: conf.cfg.batch_size / g,
            next_unit: 0,
            next_eval: conf.cfg.eval_every,
            evals: vec![],
            rungs: vec![],
            status: Status::Running,
            samples: 0,
            iterations: 0,
            calibration_samples: 0,
            per_epoch,
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
        let branch = match (&saved.branch, saved.status) {
            (Some(b), Status::Running) => Some(Branch::resume(
                &conf.cfg,
                self.data,
                self.registry,
                &self.cores,
                stream_norm,
                (b, &super::state::group_file(&self.out, conf.id)),
            )?),
            _ => None,
        };
        Ok(Group {
            conf: conf.clone(),
            branch,
            units: conf.cfg.batch_size / g,
            next_unit: saved.next_unit,
            next_eval: saved.next_eval,
            evals: saved.evals.clone(),
            rungs: saved.rungs.clone(),
            status: saved.status,
            samples: saved.samples,
            iterations: saved.iterations,
            learners: saved.learners.clone(),
            calibration_samples: saved.calibration_samples,
            per_epoch,
        })
    }

    /// One iteration of group `g`.
    pub(super) fn step(
        &mut self,
        g: &mut Group,
        stream: &mut SharedStream,
        per_epoch: usize,
    ) -> Result<Stepped, SessionError> {
        let Some(branch) = g.branch.as_mut() else { return Err(SessionError::run("stepping a stopped configuration")) };
        let mut batches = Vec::with_capacity(branch.learners());
        for _ in 0..branch.learners() {
            batches.push(stream.batch(g.next_unit, g.units)?);
            g.next_unit += g.units as u64;
        }
        let (rec, tuning) = match branch.step(batches, per_epoch) {
            Ok(BranchStep::Trained { record, tuning }) => (record, tuning),
            Ok(BranchStep::Diverged(why)) => return Ok(Stepped::Diverged(why)),
            Err(e) => return Err(SessionError::run(format!("configuration #{} ({}): {e}", g.conf.id, g.conf.label()))),
        };
        g.samples = branch.samples();
        g.iterations = branch.iteration();
        for ev in tuning {
            self.say(&format!("#{} {}", g.conf.id, ev.line()));
            self.reporter.record("tuner", json!({ "id": g.conf.id, "event": ev }))?;
        }
        g.learners = branch.layout();
        Ok(Stepped::Ok(rec))
    }

    /// Evaluates group `g`'s central model as `crossbow train` does (recalibrating batch-norm
    /// statistics first when configured).
    pub(super) fn evaluate(&mut self, g: &mut Group, rec: &IterationRecord) -> Result<f64, SessionError> {
        let Some(branch) = g.branch.as_mut() else {
            return Err(SessionError::run("evaluating a stopped configuration"));
        };
        let line = branch.evaluate(rec, (self.wall, 0.0))?;
        g.calibration_samples = branch.calibration_samples();
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
    g.branch = None;
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
            k * ctx.cores.count * c.cfg.batch_size / g
        })
        .max()
        .unwrap_or(1);
    let mut pc = PipelineConfig::new(g, first.seed);
    pc.workers = first.workers;
    pc.prefetch = (2 * most).max(4);
    if let crate::config::AugmentChoice::Set(a) = first.augment {
        pc.augment = Some(a);
    }
    pc.normalize = Some(Branch::normalize(first, ctx.data)?);
    let mut pipeline = Pipeline::new(Arc::clone(&ctx.data.train), pc.clone())?;
    let per_epoch = pipeline.batches_per_epoch() as usize * g;
    let norm = pipeline.normalize().clone();
    let (mut groups, mut last, mut rung, mut steps, mut stream) = match resume {
        None => {
            let groups =
                confs.iter().map(|c| ctx.start_group(c, g, per_epoch, &norm)).collect::<Result<Vec<_>, _>>()?;
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
                let k = gr.branch.as_ref().map(|b| b.learners()).unwrap_or(1);
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
                let at = super::state::Position { fractions, rung, steps, wall_secs: wall };
                let path = super::state::save(&ctx.out, &ctx.run_id, &groups, &last, &stream, &at)?;
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
                let k = groups[i].branch.as_ref().map(|b| b.learners()).unwrap_or(1);
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
            // Dropping the branch frees its memory now.
            groups[i].branch = None;
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
        gr.branch = None;
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
            let Some(branch) = gr.branch.as_mut() else { continue };
            if !branch.try_add_learner()? {
                continue;
            }
            gr.learners = branch.layout();
            freed -= 1;
            progress = true;
            let line = format!("#{} {}: takes a freed learner, now {:?}", gr.conf.id, gr.conf.label(), gr.learners);
            ctx.say(&line);
            ctx.reporter.record("grow", json!({ "id": gr.conf.id, "learners": gr.learners }))?;
        }
    }
    Ok(())
}
