//! `crossbow experiment tta`: time to accuracy of synchronisers, measured fairly.
//!
//! A configuration is a variant (a synchroniser with its settings, e.g. `sma`,
//! `sma/central-momentum=0`, `ssgd`), a learner count k and a per-learner batch b; all its
//! learners run on one CPU device. The protocol:
//!
//! 1. **Learning rate, tuned per configuration.** With one tuning seed (`--tune-seed`), every
//!    configuration runs with every learning rate of `--lr` (for S-SGD also each rate times k,
//!    the linear-scaling rule, unless `--no-ssgd-linear-scaling`); the rate reaching the target
//!    in the fewest epochs wins (ties and misses: the best accuracy).
//! 2. **Evaluation on fresh seeds.** Every configuration then runs at its rate with seeds
//!    `1..=--seeds` (the tuning seed is not among them, so the choice does not flatter it).
//! 3. **Interleaved.** Runs go round-robin over the configurations (seed by seed, the order
//!    rotated each round), never all of one synchroniser and then all of another, so drifts
//!    of a shared, noisy machine fall on every configuration alike.
//! 4. **Every run counts.** Medians are over all seeds, a run that misses the target counting
//!    as infinitely slow, so a row whose median is "not reached" missed in most seeds; the
//!    range is over the runs that reached it. Epochs and training seconds (evaluation and
//!    batch-norm recalibration for it included when configured) are both reported.
//!
//! With one learner SMA is momentum SGD, bit for bit the same as S-SGD (a test in
//! `crossbow-sma`), so k = 1 runs once for every variant of those two that differs only in
//! SMA's settings. Results: `table.md`, `results.json`, `runs.jsonl` (appended as runs end;
//! `--resume` skips the runs it already holds), and plots of test accuracy against epochs
//! and against time.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::{TrainConfig, TrainFile};
use crate::error::SessionError;
use crate::registry::SyncRegistry;
use crate::report::EvalLine;
use clap::Args;
use crossbow_session::{Session, load_data};
use serde::{Deserialize, Serialize};

mod report;
#[cfg(test)]
mod tests;

pub use report::median_with_misses;
use report::*;

/// Flags of `crossbow experiment tta`.
#[derive(Args, Debug, Clone)]
pub struct TtaArgs {
    /// Model
    #[arg(long, default_value = "resnet20")]
    pub model: String,
    /// Dataset
    #[arg(long, default_value = "synthetic-shapes")]
    pub dataset: String,
    /// Directory of dataset files (mnist, cifar10, cifar100)
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Variants to compare: a synchroniser name, optionally with settings of `crossbow train`
    /// after slashes, e.g. `sma/central-momentum=0/sma-form=local-momentum`
    #[arg(long, value_delimiter = ',', default_value = "sma,ssgd")]
    pub sync: Vec<String>,
    /// Learner counts k (all on one device)
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub learners: Vec<usize>,
    /// Per-learner batch sizes b
    #[arg(long, value_delimiter = ',', default_value = "8,16,32")]
    pub batch_size: Vec<usize>,
    /// Evaluation seeds per configuration (1, 2, ... n)
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
    /// Seed of the learning-rate tuning runs (not among the evaluation seeds)
    #[arg(long, default_value_t = 0)]
    pub tune_seed: u64,
    /// Target test accuracy of the central model (0.9 or 90)
    #[arg(long, default_value_t = 0.9)]
    pub target: f64,
    /// Epoch limit per run
    #[arg(long, default_value_t = 10.0)]
    pub epochs: f64,
    /// Learning-rate grid; with one value there is no tuning phase
    #[arg(long, value_delimiter = ',', default_value = "0.02,0.05,0.1")]
    pub lr: Vec<f64>,
    /// Do not add S-SGD's linearly scaled rates (each grid rate times k) to its grid
    #[arg(long)]
    pub no_ssgd_linear_scaling: bool,
    /// Momentum
    #[arg(long, default_value_t = 0.9)]
    pub momentum: f64,
    /// Weight decay
    #[arg(long, default_value_t = 5e-4)]
    pub weight_decay: f64,
    /// Evaluate every this many epochs
    #[arg(long, default_value_t = 0.25)]
    pub eval_every: f64,
    /// Training images (synthetic datasets: generated)
    #[arg(long)]
    pub train_size: Option<usize>,
    /// Test images
    #[arg(long)]
    pub test_size: Option<usize>,
    /// Threads of the CPU device
    #[arg(long)]
    pub threads: Option<usize>,
    /// Batch-norm statistics for evaluation (as `crossbow train --bn-eval`; a variant may set
    /// its own with `/bn-eval=...`)
    #[arg(long)]
    pub bn_eval: Option<String>,
    /// Record `crossbow train --diagnostics` at every evaluation (learners' spread around z,
    /// the central model's steps, the learners' own accuracy) in runs.jsonl, and plot the
    /// spread against epochs
    #[arg(long)]
    pub diagnostics: bool,
    /// Train every run to the epoch limit instead of stopping at the target (epochs and
    /// seconds to target are then read from the evaluations), to see late behaviour
    #[arg(long)]
    pub run_to_end: bool,
    /// Final accuracy of a run: the mean test accuracy of its evaluations in this many last
    /// epochs (one evaluation at least)
    #[arg(long, default_value_t = 2.0)]
    pub final_epochs: f64,
    /// How the tuning phase picks a rate: `epochs` (fewest epochs to target, then best
    /// accuracy) or `final` (highest final accuracy; for runs to the end)
    #[arg(long, default_value = "epochs", value_parser = ["epochs", "final"])]
    pub tune_by: String,
    /// Keep the runs already in OUT/runs.jsonl and run only the missing ones
    #[arg(long)]
    pub resume: bool,
    /// Output directory for table.md, results.json, runs.jsonl and the plots
    #[arg(long, default_value = "tta-results")]
    pub out: PathBuf,
}

/// One training run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Run {
    /// `tune` or `eval`.
    pub phase: String,
    /// The variant as given to `--sync` (for merged k = 1 runs: the first of them).
    pub variant: String,
    /// The synchroniser's name (the variant without its settings).
    pub sync: String,
    /// Learner count k, all on one CPU device.
    pub learners: usize,
    /// Batch size per learner.
    pub batch: usize,
    /// Seed of initialisation, data order, augmentation and dropout.
    pub seed: u64,
    /// Base learning rate of the run.
    pub lr: f64,
    /// Whether the central model reached the target test accuracy.
    pub reached: bool,
    /// Epochs completed at the first evaluation at or above target.
    pub epochs_to_target: Option<f64>,
    /// Training seconds (evaluation excluded) until the first evaluation at or above target.
    pub seconds_to_target: Option<f64>,
    /// Highest test accuracy of the central model, 0..1 (0 for a failed run).
    pub best_accuracy: f64,
    /// Mean test accuracy of the evaluations in the run's last `--final-epochs` epochs, 0..1
    /// (0 for a failed run).
    #[serde(default)]
    pub final_accuracy: f64,
    /// Epochs completed (0 for a failed run).
    pub epochs: f64,
    /// Mean training throughput, images per second (0 for a failed run).
    pub images_per_sec: f64,
    /// Why the run stopped early (for example divergence), if it did.
    pub error: Option<String>,
    /// Every evaluation of the run (kept in `runs.jsonl`, so resumed tables and plots have
    /// them too).
    #[serde(default)]
    pub curve: Vec<CurvePoint>,
}

/// One evaluation of a run, for the plots.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Epochs completed (fractional).
    pub epoch: f64,
    /// Training time so far (evaluation excluded), seconds.
    pub train_seconds: f64,
    /// Test accuracy of the central model, 0..1.
    pub test_accuracy: f64,
    /// With `--diagnostics`: the learners' mean `‖w_j − z‖ / ‖z‖`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<f64>,
    /// With `--diagnostics`: the central model's last step, `‖z_t − z_{t−1}‖ / ‖z_t‖`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub central_step: Option<f64>,
    /// With `--diagnostics`: the learners' mean own test accuracy, 0..1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learner_accuracy: Option<f64>,
}

impl From<&EvalLine> for CurvePoint {
    fn from(e: &EvalLine) -> Self {
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let d = e.diagnostics.as_ref();
        CurvePoint {
            epoch: e.epoch,
            train_seconds: e.train_seconds,
            test_accuracy: e.test_accuracy,
            spread: d.and_then(|d| mean(&d.spread)),
            central_step: d.and_then(|d| d.central_step),
            learner_accuracy: d.and_then(|d| mean(&d.learner_accuracy)),
        }
    }
}

/// A variant: the synchroniser and the settings it overrides.
#[derive(Clone, Debug)]
struct Variant {
    label: String,
    sync: String,
    file: TrainFile,
    /// Settings that only shape SMA (they do not matter with one learner).
    only_sma_settings: bool,
}

/// Session settings that only shape SMA: with one learner SMA is momentum SGD whatever they
/// (and SMA's own options) are.
const SMA_KEYS: &[&str] = &["bn-group"];

/// A variant: `SYNC[/KEY=VALUE...]`, each key a setting, a synchroniser option flag of
/// `registry` (`alpha=0.1`) or `opt.OPTION`.
fn parse_variant(s: &str, registry: &SyncRegistry) -> Result<Variant, SessionError> {
    let mut parts = s.split('/');
    let sync = parts.next().unwrap_or("").trim().to_string();
    if sync.is_empty() {
        return Err(SessionError::usage(format!("--sync '{s}': a variant starts with a synchroniser name")));
    }
    let mut toml_text = format!("sync = {:?}\n", sync);
    let mut options = String::new();
    let mut only_sma = true;
    for p in parts {
        let Some((k, v)) = p.split_once('=') else {
            return Err(SessionError::usage(format!("--sync '{s}': '{p}' is not key=value")));
        };
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() {
            return Err(SessionError::usage(format!("--sync '{s}': '{p}' needs a key and a value")));
        }
        // `opt.KEY=VALUE`: a synchroniser option (`--sync-opt KEY=VALUE`); SMA's options,
        // like its settings, do not matter with one learner.
        if let Some(opt) = k.strip_prefix("opt.").map(String::from).or_else(|| registry.flag_option(k)) {
            if opt.is_empty() {
                return Err(SessionError::usage(format!("--sync '{s}': '{p}' names no option after 'opt.'")));
            }
            if sync != "sma" {
                only_sma = false;
            }
            options.push_str(&format!("{opt:?} = {v:?}\n"));
            continue;
        }
        if !SMA_KEYS.contains(&k) {
            only_sma = false;
        }
        let value =
            if v.parse::<f64>().is_ok() || v == "true" || v == "false" { v.to_string() } else { format!("{v:?}") };
        toml_text.push_str(&format!("{k} = {value}\n"));
    }
    if !options.is_empty() {
        toml_text.push_str("[sync-options]\n");
        toml_text.push_str(&options);
    }
    let file: TrainFile = toml::from_str(&toml_text)
        .map_err(|e| SessionError::usage(format!("--sync '{s}': {}", e.to_string().trim().replace('\n', " "))))?;
    Ok(Variant { label: s.trim().to_string(), sync, file, only_sma_settings: only_sma })
}

/// One configuration: a variant at k learners of batch b, and the rates to try.
#[derive(Clone, Debug)]
struct Config {
    variant: Variant,
    /// Every variant this configuration stands for (several at k = 1).
    labels: Vec<String>,
    k: usize,
    b: usize,
    lrs: Vec<f64>,
}

impl Config {
    fn key(&self) -> String {
        format!("{} k={} b={}", self.variant.label, self.k, self.b)
    }
}

fn configs(args: &TtaArgs, variants: &[Variant]) -> Vec<Config> {
    let mut out: Vec<Config> = vec![];
    for &k in &args.learners {
        for &b in &args.batch_size {
            for v in variants {
                let merges = k == 1 && v.only_sma_settings && (v.sync == "sma" || v.sync == "ssgd");
                if merges
                    && let Some(c) = out.iter_mut().find(|c| {
                        c.k == 1
                            && c.b == b
                            && c.variant.only_sma_settings
                            && (c.variant.sync == "sma" || c.variant.sync == "ssgd")
                    })
                {
                    c.labels.push(v.label.clone());
                    continue;
                }
                let mut lrs = args.lr.clone();
                if v.sync == "ssgd" && !args.no_ssgd_linear_scaling && k > 1 {
                    lrs.extend(args.lr.iter().map(|l| l * k as f64));
                }
                lrs.sort_by(|a, b| a.total_cmp(b));
                lrs.dedup_by(|a, b| (*a - *b).abs() <= 1e-12 * a.abs().max(1.0));
                out.push(Config { variant: v.clone(), labels: vec![v.label.clone()], k, b, lrs });
            }
        }
    }
    out
}

/// Runs the experiment; `--sync` names synchronisers of `registry`.
pub fn run_tta(args: &TtaArgs, registry: &SyncRegistry) -> Result<(), SessionError> {
    crate::processes::one_process_only("experiment tta")?;
    if args.learners.is_empty() || args.batch_size.is_empty() || args.sync.is_empty() || args.seeds == 0 {
        return Err(SessionError::usage("--learners, --batch-size, --sync and --seeds must not be empty"));
    }
    if args.lr.is_empty() || args.lr.iter().any(|l| !(l.is_finite() && *l > 0.0)) {
        return Err(SessionError::usage(format!("--lr {:?}: every rate must be a finite number > 0", args.lr)));
    }
    if (1..=args.seeds).contains(&args.tune_seed) && args.lr.len() > 1 {
        return Err(SessionError::usage(format!(
            "--tune-seed {} is one of the evaluation seeds 1..={}: pick another so the tuning does not flatter",
            args.tune_seed, args.seeds
        )));
    }
    std::fs::create_dir_all(&args.out)
        .map_err(|e| SessionError::usage(format!("--out {}: {e}", args.out.display())))?;
    let base = TrainFile {
        model: Some(args.model.clone()),
        dataset: Some(args.dataset.clone()),
        data_dir: args.data_dir.clone(),
        epochs: Some(args.epochs),
        diagnostics: Some(args.diagnostics),
        // Runs to the end read the target off their evaluations instead of stopping at it.
        target_accuracy: (!args.run_to_end).then_some(args.target),
        momentum: Some(args.momentum),
        weight_decay: Some(args.weight_decay),
        eval_every: Some(args.eval_every),
        train_size: args.train_size,
        test_size: args.test_size,
        threads: args.threads,
        bn_eval: args.bn_eval.clone(),
        devices: Some("cpu".into()),
        ..TrainFile::default()
    };
    let variants = args.sync.iter().map(|s| parse_variant(s, registry)).collect::<Result<Vec<_>, _>>()?;
    let configs = configs(args, &variants);
    // The settings of one run (checked before anything runs).
    let file = |c: &Config, seed: u64, lr: f64| -> TrainFile {
        base.clone().overridden_by(c.variant.file.clone()).overridden_by(TrainFile {
            learners_per_device: Some(crate::settings::Word(c.k.to_string())),
            batch_size: Some(c.b),
            seed: Some(seed),
            lr: Some(lr),
            ..TrainFile::default()
        })
    };
    let make = |c: &Config, seed: u64, lr: f64| -> Result<TrainConfig, SessionError> {
        TrainConfig::from_file_with(file(c, seed, lr), registry)
            .map_err(|e| SessionError::usage(format!("{} (lr {lr}): {e}", c.key())))
    };
    // Validate every run before running anything.
    for c in &configs {
        for &lr in &c.lrs {
            make(c, args.tune_seed, lr)?;
        }
    }
    // The dataset depends on the seed only through synthetic generation: keep it fixed
    // (seed 1) so every configuration sees the same data; the seed varies init and order.
    let data_cfg = TrainConfig::from_file_with(TrainFile { seed: Some(1), ..base.clone() }, registry)?;
    let data = load_data(&data_cfg)?;

    let target = if args.target > 1.0 { args.target / 100.0 } else { args.target };
    if !(args.final_epochs.is_finite() && args.final_epochs > 0.0) {
        return Err(SessionError::usage(format!("--final-epochs {}: must be a number > 0", args.final_epochs)));
    }
    let log_path = args.out.join("runs.jsonl");
    let mut done: Vec<Run> = if args.resume { read_runs(&log_path)? } else { vec![] };
    if !args.resume && log_path.exists() {
        std::fs::remove_file(&log_path).map_err(|e| SessionError::run(format!("{}: {e}", log_path.display())))?;
    }
    let find = |done: &[Run], phase: &str, c: &Config, seed: u64, lr: f64| -> Option<usize> {
        done.iter().position(|r| {
            r.phase == phase
                && r.variant == c.variant.label
                && r.learners == c.k
                && r.batch == c.b
                && r.seed == seed
                && (r.lr - lr).abs() <= 1e-12 * lr.max(1.0)
        })
    };
    let one_run = |phase: &str, c: &Config, seed: u64, lr: f64, n: usize, total: usize| -> Result<Run, SessionError> {
        // A run through the public session, on the data loaded once for all runs.
        let res = Session::new(file(c, seed, lr))?.registry(registry.clone()).quiet(true).data(data.clone()).run();
        let run = match res {
            Ok(s) => {
                let curve: Vec<CurvePoint> = s.evaluations.iter().map(CurvePoint::from).collect();
                let hit = first_at_or_above(&curve, target);
                Run {
                    phase: phase.into(),
                    variant: c.variant.label.clone(),
                    sync: c.variant.sync.clone(),
                    learners: c.k,
                    batch: c.b,
                    seed,
                    lr,
                    reached: hit.is_some(),
                    epochs_to_target: hit.map(|p| p.epoch),
                    seconds_to_target: hit.map(|p| p.train_seconds),
                    best_accuracy: s.best_accuracy,
                    final_accuracy: final_accuracy(&curve, args.final_epochs),
                    epochs: s.epochs,
                    images_per_sec: s.images_per_sec,
                    error: None,
                    curve,
                }
            }
            // A run that diverges has not reached the target: it counts, with its reason.
            Err(e) => Run {
                phase: phase.into(),
                variant: c.variant.label.clone(),
                sync: c.variant.sync.clone(),
                learners: c.k,
                batch: c.b,
                seed,
                lr,
                reached: false,
                epochs_to_target: None,
                seconds_to_target: None,
                best_accuracy: 0.0,
                final_accuracy: 0.0,
                epochs: 0.0,
                images_per_sec: 0.0,
                error: Some(e.to_string()),
                curve: vec![],
            },
        };
        eprintln!(
            "[{phase} {n}/{total}] {} lr={lr} seed={seed}: {}",
            c.key(),
            match (&run.error, run.epochs_to_target, run.seconds_to_target) {
                (Some(e), _, _) => format!("failed: {e}"),
                (None, Some(e), Some(t)) => format!("target after {e:.2} epochs, {t:.1} s"),
                _ => format!("no target in {:.2} epochs (best {:.2}%)", run.epochs, 100.0 * run.best_accuracy),
            }
        );
        append_run(&log_path, &run)?;
        Ok(run)
    };

    // Phase 1: the learning rate of every configuration, on the tuning seed, interleaved.
    let mut chosen: Vec<f64> = configs.iter().map(|c| c.lrs[0]).collect();
    let mut tune_runs: Vec<Run> = vec![];
    if args.lr.len() > 1 || configs.iter().any(|c| c.lrs.len() > 1) {
        let max_lrs = configs.iter().map(|c| c.lrs.len()).max().unwrap_or(0);
        let total: usize = configs.iter().filter(|c| c.lrs.len() > 1).map(|c| c.lrs.len()).sum();
        let mut n = 0;
        for i in 0..max_lrs {
            for c in configs.iter().filter(|c| c.lrs.len() > 1) {
                let Some(&lr) = c.lrs.get(i) else { continue };
                n += 1;
                let run = match find(&done, "tune", c, args.tune_seed, lr) {
                    Some(p) => done.swap_remove(p),
                    None => one_run("tune", c, args.tune_seed, lr, n, total)?,
                };
                tune_runs.push(run);
            }
        }
        for (ci, c) in configs.iter().enumerate() {
            let mine: Vec<&Run> = tune_runs
                .iter()
                .filter(|r| r.variant == c.variant.label && r.learners == c.k && r.batch == c.b)
                .collect();
            let by_final = args.tune_by == "final";
            if let Some(best) = mine.iter().min_by(|a, b| {
                let (ka, kb) = if by_final { (rank_final(a), rank_final(b)) } else { (rank(a), rank(b)) };
                ka.partial_cmp(&kb).unwrap_or(std::cmp::Ordering::Equal)
            }) {
                chosen[ci] = best.lr;
            }
        }
    }

    // Phase 2: every configuration at its rate, seeds 1..=n, interleaved and rotated.
    let mut eval_runs: Vec<Run> = vec![];
    let total = configs.len() * args.seeds as usize;
    let mut n = 0;
    for (round, seed) in (1..=args.seeds).enumerate() {
        let m = configs.len();
        for j in 0..m {
            let ci = (j + round * m.div_ceil(args.seeds as usize).max(1)) % m;
            let c = &configs[ci];
            n += 1;
            let run = match find(&done, "eval", c, seed, chosen[ci]) {
                Some(p) => done.swap_remove(p),
                None => one_run("eval", c, seed, chosen[ci], n, total)?,
            };
            eval_runs.push(run);
        }
    }

    let table = markdown(args, &configs, &chosen, &eval_runs, &tune_runs);
    println!("{table}");
    write(&args.out.join("table.md"), &table)?;
    let json = serde_json::to_string_pretty(&serde_json::json!({
        "args": format!("{args:?}"),
        "chosen_lr": configs.iter().zip(&chosen).map(|(c, lr)| (c.key(), *lr)).collect::<BTreeMap<_, _>>(),
        "tune": tune_runs,
        "eval": eval_runs,
    }))
    .map_err(SessionError::run)?;
    write(&args.out.join("results.json"), &json)?;
    plot(&args.out.join("accuracy_vs_epochs.svg"), &eval_runs, args, Plot::AccuracyByEpoch)?;
    plot(&args.out.join("accuracy_vs_time.svg"), &eval_runs, args, Plot::AccuracyByTime)?;
    let spread = eval_runs.iter().any(|r| r.curve.iter().any(|p| p.spread.is_some()));
    if spread {
        plot(&args.out.join("spread_vs_epochs.svg"), &eval_runs, args, Plot::SpreadByEpoch)?;
    }
    eprintln!(
        "wrote {}/table.md, results.json, runs.jsonl, accuracy_vs_epochs.svg, accuracy_vs_time.svg{}",
        args.out.display(),
        if spread { ", spread_vs_epochs.svg" } else { "" }
    );
    Ok(())
}
