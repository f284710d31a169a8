//! Starting a run: the engine for the settings, the auto-tuner, the banner and the
//! synchroniser's notes.

use std::sync::Arc;

use crossbow_kernels::Backend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_replica::engine::{AutoTuner, DeviceFactory, Engine, EngineConfig, TrainPlan};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::{Graph, ProcessGroup, Solo, Synchroniser};
use crossbow_tuner::TunerConfig;
use serde_json::json;

use super::Data;
use super::run::Run;
use crate::config::{BnEval, LearnersPerDevice, TrainConfig};
use crate::error::SessionError;
use crate::report::Reporter;

/// The auto-tuner of `cfg` (`--learners-per-device auto`: `--max-learners`,
/// `--tuner-threshold`, `--tuner-significance`, `--tuner-retune`) for `engine`, or `None` with a fixed learner count.
pub fn auto_tuner<B: Backend>(
    cfg: &TrainConfig,
    engine: &Engine<B>,
    train_len: usize,
) -> Result<Option<AutoTuner>, SessionError> {
    match cfg.learners_per_device {
        LearnersPerDevice::Auto => {
            let tc = TunerConfig {
                max_learners: tuner_cap(cfg, engine, train_len),
                threshold: cfg.tuner_threshold,
                significance: cfg.tuner_significance,
                retune_drop: cfg.tuner_retune.drop_under(&cfg.sync, cfg.global_batch_size.is_some()),
                ..TunerConfig::default()
            };
            let t = AutoTuner::new(engine, tc, true).map_err(|e| match cfg.global_batch_size {
                Some(n) => SessionError::usage(format!(
                    "{} {n} with {} auto: {e}",
                    cfg.name_of("global-batch-size"),
                    cfg.name_of("learners-per-device")
                )),
                None => SessionError::usage(e.to_string()),
            })?;
            Ok(Some(t))
        }
        LearnersPerDevice::Fixed(_) => Ok(None),
    }
}

/// The most learners per device the tuner may use: `--max-learners`, and no more than make an
/// iteration (a batch per learner on every device) an epoch.
pub(super) fn tuner_cap<B: Backend>(cfg: &TrainConfig, engine: &Engine<B>, train_len: usize) -> usize {
    if let Some(n) = cfg.global_batch_size {
        // An iteration is the global batch whatever the count; each learner needs an image.
        return cfg.max_learners.min(n);
    }
    let devices = (engine.devices().len() * engine.world().size()).max(1);
    cfg.max_learners.min((train_len / cfg.batch_size.max(1) / devices).max(1))
}

/// `cfg` with the batch each learner starts at: with a global batch
/// (`--global-batch-size`), its share among `learners`, every rank's learners together (an
/// error naming the settings when they do not divide it); else `cfg` as it is.
pub(super) fn learner_config(cfg: &TrainConfig, learners: usize) -> Result<TrainConfig, SessionError> {
    let Some(n) = cfg.global_batch_size else { return Ok(cfg.clone()) };
    if learners == 0 || !n.is_multiple_of(learners) {
        let how = match cfg.learners_per_device {
            LearnersPerDevice::Fixed(m) => format!("{} {m}", cfg.name_of("learners-per-device")),
            LearnersPerDevice::Auto => "the learners the run starts with".to_string(),
        };
        return Err(SessionError::usage(format!(
            "{} {n} does not divide into equal batches for {learners} learner(s) ({how}, on every device and process); give a learner count that divides it",
            cfg.name_of("global-batch-size")
        )));
    }
    let mut c = cfg.clone();
    c.batch_size = n / learners;
    Ok(c)
}

/// The engine for `cfg` with `layout[d]` learners on device `d`.
pub fn start_engine<B: Backend>(
    cfg: &TrainConfig,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    layout: &[usize],
) -> Result<Engine<B>, SessionError> {
    start_engine_in(cfg, graph, factory, sync, layout, Arc::new(Solo))
}

/// [`start_engine`] as one rank of `world` (a collective).
pub fn start_engine_in<B: Backend>(
    cfg: &TrainConfig,
    graph: Graph,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    layout: &[usize],
    world: Arc<dyn ProcessGroup>,
) -> Result<Engine<B>, SessionError> {
    start_engine_planned(cfg, graph, None, factory, sync, layout, world)
}

/// [`start_engine_in`] with the training program already lowered and planned (by the memory
/// check), so that the graph is lowered once.
pub(super) fn start_engine_planned<B: Backend>(
    cfg: &TrainConfig,
    graph: Graph,
    plan: Option<TrainPlan>,
    factory: Box<dyn DeviceFactory<B>>,
    sync: Box<dyn Synchroniser<B>>,
    layout: &[usize],
    world: Arc<dyn ProcessGroup>,
) -> Result<Engine<B>, SessionError> {
    let ecfg = EngineConfig {
        batch_size: cfg.batch_size,
        sgd: SgdConfig {
            lr: cfg.lr as f32,
            momentum: cfg.momentum as f32,
            weight_decay: cfg.weight_decay as f32,
            nesterov: cfg.nesterov,
        },
        schedule: cfg.schedule.clone(),
        seed: cfg.seed,
        eval_batch_size: cfg.eval_batch_size,
    };
    let plan = match plan {
        Some(p) => p,
        None => TrainPlan::new(&graph, cfg.batch_size)?,
    };
    let mut engine =
        Engine::in_world_planned(graph, plan, ecfg, factory, sync, Box::new(HostAllReduce), layout, world)?;
    engine.set_eval_first_learner_stats(cfg.bn_eval == BnEval::FirstLearner);
    engine.set_bn_group(cfg.bn_group);
    engine.set_global_batch(cfg.global_batch_size)?;
    Ok(engine)
}

/// The two banner lines and the metrics file's `start` record.
pub(super) fn announce<B: Backend>(
    cfg: &TrainConfig,
    data: &Data,
    engine: &Engine<B>,
    run: &Run,
    run_id: &str,
    reporter: &mut Reporter,
) -> Result<(), SessionError> {
    let (per_epoch, share) = (run.per_epoch, run.share);
    let (sync_name, sync_settings) = engine.synchroniser();
    let sync_line =
        if sync_settings.is_empty() { sync_name.to_string() } else { format!("{sync_name} ({sync_settings})") };
    let dev_names: Vec<String> = engine.devices().iter().map(|d| d.to_string()).collect();
    reporter.say(&format!(
        "{} ({} parameters, {:.1} MFLOP/image) on {} ({} train / {} test images, {} classes)",
        cfg.model,
        engine.graph().num_params(),
        engine.graph().forward_flops() / 1e6,
        cfg.dataset,
        data.train.len(),
        data.test.len(),
        data.train.num_classes()
    ));
    let learners = match cfg.learners_per_device {
        LearnersPerDevice::Auto if cfg.global_batch_size.is_some() => {
            let cap = tuner_cap(cfg, engine, data.train.len());
            let n = cfg.global_batch_size.unwrap_or(1);
            let counts: Vec<String> = (1..=cap).filter(|k| n.is_multiple_of(*k)).map(|k| k.to_string()).collect();
            format!("auto (starting at {}, tuner picks among {})", engine.learners(), counts.join(", "))
        }
        LearnersPerDevice::Auto => {
            format!("auto (starting at 1, tuner picks up to {})", tuner_cap(cfg, engine, data.train.len()))
        }
        LearnersPerDevice::Fixed(m) => {
            format!("{m} ({} in all)", crate::report::plural(engine.world_learners() as u64, "learner"))
        }
    };
    // Batch-norm settings only for a model that has batch norm.
    let bn = if engine.graph().stats_len == 0 {
        String::new()
    } else {
        format!(
            ", batch-norm evaluation {}{}",
            cfg.bn_eval,
            if cfg.bn_group == crossbow_replica::engine::BnGroup::Device {
                ", batch norm over each device's learners"
            } else {
                ""
            }
        )
    };
    let batch = match engine.global_batch() {
        Some(n) => format!("global batch {n} ({} per learner now)", engine.batch_size()),
        None => format!("batch {} per learner", engine.batch_size()),
    };
    reporter.say(&format!(
        "devices {} x learners {learners}, {batch}, sync {sync_line}, lr {} {}, momentum {}, weight decay {}{bn}",
        dev_names.join(","),
        cfg.lr,
        cfg.schedule,
        cfg.momentum,
        cfg.weight_decay,
    ));
    let world = engine.world();
    if world.size() > 1 {
        reporter.say(&format!(
            "processes: {}; learners per rank {:?} ({} in all, alpha and the data order count them all); rank 0 prints, every rank writes its own metrics file",
            world.describe(),
            engine.world_layout(),
            engine.world_learners()
        ));
    }
    reporter.record(
        "start",
        json!({
            "run": run_id,
            "ranks": world.size(),
            "pid": std::process::id(),
            "world_learners": engine.world_layout(),
            "config": cfg,
            "devices": dev_names,
            "learners": engine.layout(),
            "sync": { "name": sync_name, "settings": sync_settings.to_json() },
            "parameters": engine.graph().num_params(),
            "memory": engine.footprint(),
            "loss_read": engine.loss_read(),
            "samples_per_epoch": per_epoch,
            // The training batches this rank's pipeline prepares: of every `period`, `from..to`.
            "data_share": share.map(|s| json!({ "period": s.period, "from": s.from, "to": s.to })),
            // What loading left out (folder data: bad images skipped, files ignored, ...).
            "data_notes": data.train.notes().iter().chain(data.test.notes()).collect::<Vec<_>>(),
        }),
    )
}

/// The synchroniser's notes on its settings ([`Synchroniser::notes`]: SMA's stable range of
/// rates), said when the learner count differs from the one they were last said for (with
/// the tuner: once it has settled).
pub(super) fn sync_notes<B: Backend>(
    engine: &Engine<B>,
    noted: &mut usize,
    reporter: &mut Reporter,
) -> Result<(), SessionError> {
    let k = engine.world_learners();
    if k == *noted {
        return Ok(());
    }
    *noted = k;
    for n in engine.synchroniser_notes() {
        if n.warning {
            reporter.warn(&format!("warning: {}", n.text));
        } else {
            reporter.say(&n.text);
        }
        reporter.record(
            "sync_note",
            json!({ "iteration": engine.iteration(), "learners": k, "warning": n.warning, "text": n.text }),
        )?;
    }
    Ok(())
}
