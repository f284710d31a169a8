//! `crossbow experiment tta`: statistical efficiency of SMA against S-SGD.
//!
//! For every synchroniser, learner count k and per-learner batch b, and several seeds, train
//! on one device with k learners at batch b until the central model reaches the target test
//! accuracy (or the epoch limit), and report epochs and training time to the target — median
//! and range over the seeds — as a markdown table, plus plots of test accuracy against epochs
//! and against time (SVG), and every curve as JSON.

use std::path::{Path, PathBuf};

use clap::Args;
use crossbow_kernels::CpuBackend;
use crossbow_replica::engine::CpuDevices;
use plotters::prelude::*;
use serde::Serialize;

use crate::config::{LearnersPerDevice, TrainConfig, TrainFile};
use crate::error::CliError;
use crate::report::{EvalLine, Reporter};
use crate::train::{build_graph, load_data, train_with};

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
    /// Synchronisers to compare
    #[arg(long, value_delimiter = ',', default_value = "sma,ssgd")]
    pub sync: Vec<String>,
    /// Learner counts k (all on one device)
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub learners: Vec<usize>,
    /// Per-learner batch sizes b
    #[arg(long, value_delimiter = ',', default_value = "16,32,64")]
    pub batch_size: Vec<usize>,
    /// Seeds per configuration (1, 2, ... n)
    #[arg(long, default_value_t = 3)]
    pub seeds: u64,
    /// Target test accuracy of the central model (0.9 or 90)
    #[arg(long, default_value_t = 0.9)]
    pub target: f64,
    /// Epoch limit per run
    #[arg(long, default_value_t = 10.0)]
    pub epochs: f64,
    /// Base learning rate (the same for every configuration)
    #[arg(long, default_value_t = 0.05)]
    pub lr: f64,
    /// Scale S-SGD's learning rate with its effective batch: none, linear (×k) or sqrt (×√k)
    #[arg(long, default_value = "none")]
    pub ssgd_lr_scale: String,
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
    /// Output directory for table.md, results.json, accuracy_vs_epochs.svg, accuracy_vs_time.svg
    #[arg(long, default_value = "tta-results")]
    pub out: PathBuf,
}

/// One run.
#[derive(Clone, Debug, Serialize)]
pub struct Run {
    pub sync: String,
    pub learners: usize,
    pub batch: usize,
    pub seed: u64,
    pub lr: f64,
    pub reached: bool,
    pub epochs_to_target: Option<f64>,
    pub seconds_to_target: Option<f64>,
    pub best_accuracy: f64,
    pub images_per_sec: f64,
    pub curve: Vec<EvalLine>,
}

fn lr_for(args: &TtaArgs, sync: &str, k: usize) -> Result<f64, CliError> {
    let is_ssgd = sync.trim().eq_ignore_ascii_case("ssgd");
    Ok(match (is_ssgd, args.ssgd_lr_scale.as_str()) {
        (false, _) | (true, "none") => args.lr,
        (true, "linear") => args.lr * k as f64,
        (true, "sqrt") => args.lr * (k as f64).sqrt(),
        (_, other) => return Err(CliError::usage(format!("--ssgd-lr-scale '{other}' must be none, linear or sqrt"))),
    })
}

/// Runs the experiment grid.
pub fn run_tta(args: &TtaArgs) -> Result<(), CliError> {
    if args.learners.is_empty() || args.batch_size.is_empty() || args.sync.is_empty() || args.seeds == 0 {
        return Err(CliError::usage("--learners, --batch-size, --sync and --seeds must not be empty"));
    }
    std::fs::create_dir_all(&args.out).map_err(|e| CliError::usage(format!("--out {}: {e}", args.out.display())))?;
    let base = TrainFile {
        model: Some(args.model.clone()),
        dataset: Some(args.dataset.clone()),
        data_dir: args.data_dir.clone(),
        epochs: Some(args.epochs),
        target_accuracy: Some(args.target),
        momentum: Some(args.momentum),
        weight_decay: Some(args.weight_decay),
        eval_every: Some(args.eval_every),
        train_size: args.train_size,
        test_size: args.test_size,
        threads: args.threads,
        devices: Some("cpu".into()),
        ..TrainFile::default()
    };
    // Validate every combination before running anything.
    let mut plan = vec![];
    for sync in &args.sync {
        for &k in &args.learners {
            for &b in &args.batch_size {
                for seed in 1..=args.seeds {
                    let lr = lr_for(args, sync, k)?;
                    let f = TrainFile {
                        sync: Some(sync.clone()),
                        learners_per_device: Some(k.to_string()),
                        batch_size: Some(b),
                        seed: Some(seed),
                        lr: Some(lr),
                        ..base.clone()
                    };
                    plan.push(TrainConfig::from_file(f)?);
                }
            }
        }
    }
    // The dataset depends on the seed only through synthetic generation: keep it fixed
    // (seed 1) so every configuration sees the same data; the seed varies init and order.
    let data_cfg = TrainConfig::from_file(TrainFile { seed: Some(1), ..base.clone() })?;
    let data = load_data(&data_cfg)?;
    let threads = args.threads.unwrap_or_else(crate::train::cores);
    let mut runs = vec![];
    let total = plan.len();
    for (i, cfg) in plan.iter().enumerate() {
        let k = match cfg.learners_per_device {
            LearnersPerDevice::Fixed(k) => k,
            LearnersPerDevice::Auto => 1,
        };
        let graph = build_graph(cfg, &data)?;
        let mut rep = Reporter::silent();
        let s = train_with(
            cfg,
            &data,
            graph,
            Box::new(CpuDevices { count: 1, threads }),
            cfg.sync.build::<CpuBackend>(),
            &mut rep,
        )?;
        eprintln!(
            "[{}/{total}] {} k={} b={} seed={} lr={}: {}",
            i + 1,
            cfg.sync_name,
            k,
            cfg.batch_size,
            cfg.seed,
            cfg.lr,
            match (s.epochs_to_target, s.time_to_target_seconds) {
                (Some(e), Some(t)) => format!("target after {e:.2} epochs, {t:.1} s"),
                _ => format!("no target in {:.1} epochs (best {:.2}%)", s.epochs, 100.0 * s.best_accuracy),
            }
        );
        runs.push(Run {
            sync: cfg.sync_name.clone(),
            learners: k,
            batch: cfg.batch_size,
            seed: cfg.seed,
            lr: cfg.lr,
            reached: s.reached_target,
            epochs_to_target: s.epochs_to_target,
            seconds_to_target: s.time_to_target_seconds,
            best_accuracy: s.best_accuracy,
            images_per_sec: s.images_per_sec,
            curve: s.evaluations,
        });
    }
    let table = markdown(args, &runs);
    println!("{table}");
    write(&args.out.join("table.md"), &table)?;
    let json = serde_json::to_string_pretty(&serde_json::json!({ "args": format!("{args:?}"), "runs": runs }))
        .map_err(CliError::run)?;
    write(&args.out.join("results.json"), &json)?;
    plot(&args.out.join("accuracy_vs_epochs.svg"), &runs, args, false)?;
    plot(&args.out.join("accuracy_vs_time.svg"), &runs, args, true)?;
    eprintln!("wrote {}/table.md, results.json, accuracy_vs_epochs.svg, accuracy_vs_time.svg", args.out.display());
    Ok(())
}

fn write(p: &Path, s: &str) -> Result<(), CliError> {
    std::fs::write(p, s).map_err(|e| CliError::run(format!("{}: {e}", p.display())))
}

fn stats(v: &mut [f64]) -> Option<(f64, f64, f64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let med = if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) };
    Some((med, v[0], v[n - 1]))
}

/// The results table: one row per (sync, k, b).
pub fn markdown(args: &TtaArgs, runs: &[Run]) -> String {
    let mut s = format!(
        "Target {:.1}% test accuracy, {} on {}, epoch limit {}, {} seed(s) per row; median [min–max] over the seeds that reached the target.\n\n",
        100.0 * if args.target > 1.0 { args.target / 100.0 } else { args.target },
        args.model,
        args.dataset,
        args.epochs,
        args.seeds
    );
    s.push_str("| sync | k | batch/learner | effective batch | lr | reached | epochs to target | seconds to target | images/s |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut keys: Vec<(String, usize, usize)> = runs.iter().map(|r| (r.sync.clone(), r.learners, r.batch)).collect();
    keys.dedup();
    for (sync, k, b) in keys {
        let rs: Vec<&Run> = runs.iter().filter(|r| r.sync == sync && r.learners == k && r.batch == b).collect();
        let mut ep: Vec<f64> = rs.iter().filter_map(|r| r.epochs_to_target).collect();
        let mut secs: Vec<f64> = rs.iter().filter_map(|r| r.seconds_to_target).collect();
        let mut ips: Vec<f64> = rs.iter().map(|r| r.images_per_sec).collect();
        let fmt = |x: Option<(f64, f64, f64)>, p: usize| match x {
            Some((m, lo, hi)) => format!("{m:.p$} [{lo:.p$}–{hi:.p$}]"),
            None => "—".into(),
        };
        s.push_str(&format!(
            "| {sync} | {k} | {b} | {} | {} | {}/{} | {} | {} | {} |\n",
            if sync == "ssgd" { k * b } else { b },
            rs.first().map(|r| r.lr).unwrap_or(0.0),
            ep.len(),
            rs.len(),
            fmt(stats(&mut ep), 2),
            fmt(stats(&mut secs), 1),
            fmt(stats(&mut ips), 0),
        ));
    }
    s
}

/// One panel per batch size; a line per (sync, k) through the first seed's evaluations.
fn plot(path: &Path, runs: &[Run], args: &TtaArgs, by_time: bool) -> Result<(), CliError> {
    let err = |e: &dyn std::fmt::Display| CliError::run(format!("{}: {e}", path.display()));
    let panels = args.batch_size.len().max(1);
    let root = SVGBackend::new(path, (480 * panels as u32, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((1, panels));
    let first_seed = runs.iter().map(|r| r.seed).min().unwrap_or(1);
    for (area, &b) in areas.iter().zip(&args.batch_size) {
        let sel: Vec<&Run> = runs.iter().filter(|r| r.batch == b && r.seed == first_seed).collect();
        let xmax = sel
            .iter()
            .flat_map(|r| r.curve.iter().map(|e| if by_time { e.train_seconds } else { e.epoch }))
            .fold(1e-3f64, f64::max);
        let mut chart = ChartBuilder::on(area)
            .caption(format!("batch {b} per learner"), ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..xmax * 1.02, 0f64..1f64)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(if by_time { "training seconds" } else { "epochs" })
            .y_desc("test accuracy (central model)")
            .draw()
            .map_err(|e| err(&e))?;
        for (i, r) in sel.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let style = if r.sync == "ssgd" {
                ShapeStyle::from(&color).stroke_width(1)
            } else {
                ShapeStyle::from(&color).stroke_width(2)
            };
            let pts: Vec<(f64, f64)> =
                r.curve.iter().map(|e| (if by_time { e.train_seconds } else { e.epoch }, e.test_accuracy)).collect();
            chart
                .draw_series(LineSeries::new(pts, style))
                .map_err(|e| err(&e))?
                .label(format!("{} k={}", r.sync, r.learners))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        let target = if args.target > 1.0 { args.target / 100.0 } else { args.target };
        chart
            .draw_series(LineSeries::new(vec![(0.0, target), (xmax * 1.02, target)], BLACK.mix(0.3)))
            .map_err(|e| err(&e))?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
