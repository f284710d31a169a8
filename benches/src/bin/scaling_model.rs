//! Predicts iteration time, images/s, scaling efficiency and bytes per image for S-SGD and SMA
//! (1–4 learners per GPU, hierarchical or one all-reduce per learner) on 1–16 servers of 8
//! GPUs, from an alpha-beta model of ring all-reduce (`crossbow_benches::scaling`); and fits
//! that model's alpha and bandwidth to MPI_Allreduce times measured here (`fit`).
//!
//! `cargo run -p crossbow-benches --bin scaling-model -- predict`
//! `cargo run -p crossbow-benches --bin scaling-model -- fit points.csv --check 1089896`
//!
//! Every default below is a published figure or a stated assumption; docs/results/scaling-model/NOTES.md (§12.2)
//! gives the source of each. The output is a prediction, not a measurement.

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use crossbow_benches::scaling::{
    Algorithm, Cluster, Compute, Link, Overlap, Prediction, Workload, fit_ring, median, predict,
    ring_allreduce_seconds, scaling_efficiency,
};
use crossbow_replica::ModelKind;
use crossbow_tensor::Shape;

const GB: f64 = 1e9;
/// Scaling efficiency is against this many servers, whether or not it is in the table.
const BASE_SERVERS: usize = 1;

/// A100 NVLink3, 8 GPUs: nccl-tests all_reduce_perf busbw measured on one 8-GPU A100 server
/// (232.54 GB/s, NVIDIA/nccl#1048; NCCL's own tuning caps A100 at 235 GB/s).
const NVLINK_BUSBW_GBS: f64 = 232.0;
/// NCCL's ring/Simple latency per step over NVLink, µs (src/graph/tuning.cc, `hwLat`).
const NVLINK_ALPHA_US: f64 = 3.4;
/// NCCL's ring/Simple latency per step over the network, µs (same table).
const NET_ALPHA_US: f64 = 9.6;
/// NCCL's base latency of one ring/Simple call, µs (same file, `baseLat`).
const CALL_US: f64 = 8.4;
/// ResNet-50 v1.5 on one A100 80GB, mixed precision, batch 256: 2470 images/s
/// (NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5 README, pytorch-21.03 container).
const R50_A100_IMAGES_PER_S: f64 = 2470.0;
const R50_A100_BATCH: f64 = 256.0;

#[derive(Parser)]
#[command(name = "scaling-model", about = "A cost model of S-SGD and SMA on servers of GPUs (predictions)")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the predicted tables (markdown).
    Predict(PredictArgs),
    /// Fit alpha and bandwidth of an all-reduce to measured `bytes,seconds` lines and check
    /// the fit at sizes left out of it.
    Fit(FitArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
enum ModelName {
    Resnet32,
    Resnet50,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
enum OverlapArg {
    None,
    Full,
}

#[derive(clap::Args)]
struct PredictArgs {
    /// Models to predict.
    #[arg(long, value_delimiter = ',', default_values = ["resnet32", "resnet50"])]
    model: Vec<ModelName>,
    /// Server counts (8 GPUs each unless --gpus-per-server).
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 4, 8, 16])]
    servers: Vec<usize>,
    /// GPUs per server.
    #[arg(long, default_value_t = 8)]
    gpus_per_server: usize,
    /// Learner counts per GPU for SMA.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 2, 3, 4])]
    learners: Vec<usize>,
    /// Images per learner per iteration (S-SGD: per GPU).
    #[arg(long, default_value_t = 64)]
    batch: usize,
    /// Network line rate per NIC, Gb/s (100, 200 or 400: the per-NIC bus bandwidths are the
    /// published ones for those rates).
    #[arg(long, value_delimiter = ',', default_values_t = [100u32, 200, 400])]
    network: Vec<u32>,
    /// NICs per server (the network busbw of a server is NICs x the per-NIC figure).
    #[arg(long, default_value_t = 8)]
    nics: usize,
    /// Overlap of communication with computation.
    #[arg(long, value_delimiter = ',', default_values = ["none", "full"])]
    overlap: Vec<OverlapArg>,
    /// Fixed compute cost per iteration and GPU, ms (assumed).
    #[arg(long, default_value_t = 5.0)]
    fixed_ms: f64,
    /// ResNet-32 images/s of one GPU at large batch (assumed: no published figure).
    #[arg(long, default_value_t = 40_000.0)]
    resnet32_peak: f64,
    /// Print one row per configuration and server count with every figure, instead of the
    /// images/s-and-efficiency summary.
    #[arg(long)]
    detail: bool,
}

#[derive(clap::Args)]
struct FitArgs {
    /// CSV of `bytes,seconds` lines (lines starting with `#` and the header are skipped), as
    /// written by scripts/allreduce-alpha-beta.c.
    file: std::path::PathBuf,
    /// Ranks the points were measured with.
    #[arg(long, default_value_t = 2)]
    ranks: usize,
    /// Sizes in bytes left out of the fit and predicted from it (the model check).
    #[arg(long, value_delimiter = ',')]
    check: Vec<u64>,
    /// Fit only sizes from this many bytes (smaller ones are still shown against the fit).
    #[arg(long)]
    min_bytes: Option<u64>,
    /// Fit only sizes up to this many bytes (larger ones are still shown against the fit).
    #[arg(long)]
    max_bytes: Option<u64>,
    /// Statistic of each size's calls: the median, or the minimum (the least disturbed call on
    /// a loaded machine).
    #[arg(long, value_enum, default_value_t = Stat::Median)]
    stat: Stat,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
enum Stat {
    Median,
    Min,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Predict(a) => run_predict(&a),
        Cmd::Fit(a) => run_fit(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scaling-model: {e}");
            ExitCode::from(2)
        }
    }
}

/// Per-NIC all-reduce busbw in GB/s for a line rate: 200 Gb/s HDR 24 GB/s (8 NICs: 192 GB/s,
/// NVIDIA/nccl#812); 400 Gb/s NDR 48 GB/s (NVIDIA/nccl-tests#267: 48–49 GB/s per CX-7);
/// 100 Gb/s assumed at the same 96% of line rate.
fn nic_busbw_gbs(gbps: u32) -> Result<f64, String> {
    match gbps {
        100 => Ok(12.0),
        200 => Ok(24.0),
        400 => Ok(48.0),
        other => Err(format!("--network {other}: the model has published figures for 100, 200 and 400 Gb/s only")),
    }
}

fn params(model: ModelName) -> Result<usize, String> {
    let graph = match model {
        ModelName::Resnet32 => ModelKind::ResNetCifar(32).build(&Shape::new(vec![3, 32, 32]), 10),
        ModelName::Resnet50 => ModelKind::ResNet50.build(&Shape::new(vec![3, 224, 224]), 1000),
    };
    graph.map(|g| g.num_params()).map_err(|e| format!("building {model:?}: {e}"))
}

fn workload(model: ModelName, a: &PredictArgs) -> Result<Workload, String> {
    let fixed_s = a.fixed_ms * 1e-3;
    let compute = match model {
        ModelName::Resnet50 => Compute::through(R50_A100_BATCH, R50_A100_IMAGES_PER_S, fixed_s)?,
        ModelName::Resnet32 => Compute { fixed_s, peak_images_per_s: a.resnet32_peak },
    };
    Ok(Workload { params: params(model)?, bytes_per_param: 4, batch: a.batch, compute })
}

fn check_args(a: &PredictArgs) -> Result<(), String> {
    if a.servers.is_empty() || a.servers.contains(&0) {
        return Err(format!("--servers {:?}: every count must be at least 1", a.servers));
    }
    if a.gpus_per_server == 0 || a.nics == 0 || a.batch == 0 {
        return Err(format!(
            "--gpus-per-server {}, --nics {}, --batch {}: each must be at least 1",
            a.gpus_per_server, a.nics, a.batch
        ));
    }
    if a.learners.is_empty() || a.learners.contains(&0) {
        return Err(format!("--learners {:?}: every count must be at least 1", a.learners));
    }
    if !(a.fixed_ms >= 0.0 && a.fixed_ms.is_finite()) {
        return Err(format!("--fixed-ms {}: must be a finite number >= 0", a.fixed_ms));
    }
    for &g in &a.network {
        nic_busbw_gbs(g)?;
    }
    if a.model.is_empty() || a.network.is_empty() || a.overlap.is_empty() {
        return Err("--model, --network and --overlap each need at least one value".into());
    }
    if !(a.resnet32_peak > 0.0 && a.resnet32_peak.is_finite()) {
        return Err(format!("--resnet32-peak {}: must be a positive number of images/s", a.resnet32_peak));
    }
    Ok(())
}

/// The configurations compared, in table order: S-SGD, SMA k = 1.. (hierarchical), then SMA
/// k >= 2 with one all-reduce per learner.
fn configs(learners: &[usize]) -> Vec<(String, Algorithm, usize)> {
    let mut out = vec![("S-SGD".to_string(), Algorithm::SSgd, 1)];
    for &k in learners {
        out.push((format!("SMA k={k}, hierarchical"), Algorithm::SmaHierarchical, k));
    }
    for &k in learners.iter().filter(|&&k| k > 1) {
        out.push((format!("SMA k={k}, one all-reduce per learner"), Algorithm::SmaPerLearner, k));
    }
    out
}

fn cluster(servers: usize, a: &PredictArgs, gbps: u32) -> Result<Cluster, String> {
    Ok(Cluster {
        servers,
        gpus_per_server: a.gpus_per_server,
        intra: Link { alpha_s: NVLINK_ALPHA_US * 1e-6, busbw: NVLINK_BUSBW_GBS * GB },
        inter: Link { alpha_s: NET_ALPHA_US * 1e-6, busbw: a.nics as f64 * nic_busbw_gbs(gbps)? * GB },
        call_s: CALL_US * 1e-6,
    })
}

fn run_predict(a: &PredictArgs) -> Result<(), String> {
    check_args(a)?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    println!(
        "Predictions of the cost model (BENCHMARKS.md section 12), not measurements: `scaling-model {}`",
        args.join(" ")
    );
    for &model in &a.model {
        let w = workload(model, a)?;
        println!(
            "\n### {model:?}: {} parameters, {:.2} MB exchanged per all-reduce (f32); batch {} per learner; \
             GPU compute {:.1} ms fixed + {:.1} us per image\n",
            w.params,
            w.buffer_bytes() / 1e6,
            w.batch,
            w.compute.fixed_s * 1e3,
            1e6 / w.compute.peak_images_per_s
        );
        for &gbps in &a.network {
            for &ov in &a.overlap {
                let overlap = match ov {
                    OverlapArg::None => Overlap::None,
                    OverlapArg::Full => Overlap::Full,
                };
                println!(
                    "{model:?}, {} x {gbps} Gb/s per server ({:.0} GB/s busbw), NVLink {NVLINK_BUSBW_GBS} GB/s, \
                     overlap {ov:?}: predicted images/s (scaling efficiency vs 1 server)\n",
                    a.nics,
                    a.nics as f64 * nic_busbw_gbs(gbps)?
                );
                if a.detail {
                    detail_table(a, &w, gbps, overlap)?;
                } else {
                    summary_table(a, &w, gbps, overlap)?;
                }
                println!();
            }
        }
    }
    Ok(())
}

fn summary_table(a: &PredictArgs, w: &Workload, gbps: u32, overlap: Overlap) -> Result<(), String> {
    let base = BASE_SERVERS;
    let head: Vec<String> = a.servers.iter().map(|n| format!("{n} x {}", a.gpus_per_server)).collect();
    println!("| configuration | {} |", head.join(" | "));
    println!("|---|{}", "---:|".repeat(a.servers.len()));
    for (name, alg, k) in configs(&a.learners) {
        let one = predict(&cluster(base, a, gbps)?, w, alg, k, overlap)?;
        let mut cells = Vec::new();
        for &n in &a.servers {
            let p = predict(&cluster(n, a, gbps)?, w, alg, k, overlap)?;
            cells.push(format!("{:.0} ({:.0}%)", p.images_per_s, 100.0 * scaling_efficiency(&one, base, &p, n)));
        }
        println!("| {name} | {} |", cells.join(" | "));
    }
    Ok(())
}

fn detail_table(a: &PredictArgs, w: &Workload, gbps: u32, overlap: Overlap) -> Result<(), String> {
    let base = BASE_SERVERS;
    println!(
        "| servers | configuration | compute ms | all-reduce ms | iteration ms | images/s | efficiency | \
         network kB/image | NVLink kB/image |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for &n in &a.servers {
        for (name, alg, k) in configs(&a.learners) {
            let one = predict(&cluster(base, a, gbps)?, w, alg, k, overlap)?;
            let p: Prediction = predict(&cluster(n, a, gbps)?, w, alg, k, overlap)?;
            println!(
                "| {n} | {name} | {:.2} | {:.3} | {:.2} | {:.0} | {:.1}% | {:.1} | {:.1} |",
                p.compute_s * 1e3,
                p.comm_s * 1e3,
                p.iteration_s * 1e3,
                p.images_per_s,
                100.0 * scaling_efficiency(&one, base, &p, n),
                p.network_bytes_per_image / 1e3,
                p.intra_bytes_per_image / 1e3
            );
        }
    }
    Ok(())
}

/// Reads `bytes,seconds` lines: every timed call is one line.
fn read_points(path: &std::path::Path) -> Result<BTreeMap<u64, Vec<f64>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let mut by_size: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with("bytes") {
            continue;
        }
        let bad = || format!("{}:{}: expected `bytes,seconds`, got '{line}'", path.display(), i + 1);
        let (b, t) = line.split_once(',').ok_or_else(bad)?;
        let b: u64 = b.trim().parse().map_err(|_| bad())?;
        let t: f64 = t.trim().parse().map_err(|_| bad())?;
        if !(t > 0.0 && t.is_finite()) {
            return Err(format!("{}:{}: time {t} is not a positive number of seconds", path.display(), i + 1));
        }
        by_size.entry(b).or_default().push(t);
    }
    if by_size.is_empty() {
        return Err(format!("{}: no `bytes,seconds` lines", path.display()));
    }
    Ok(by_size)
}

fn run_fit(a: &FitArgs) -> Result<(), String> {
    let by_size = read_points(&a.file)?;
    for c in &a.check {
        if !by_size.contains_key(c) {
            return Err(format!("--check {c}: no measurement of that size in {}", a.file.display()));
        }
    }
    let mut medians = Vec::new();
    for (&b, ts) in &by_size {
        let m = match a.stat {
            Stat::Median => median(ts),
            Stat::Min => ts.iter().copied().reduce(f64::min),
        }
        .ok_or_else(|| format!("size {b}: no usable times"))?;
        medians.push((b, ts.len(), m));
    }
    let in_fit = |b: u64| {
        !a.check.contains(&b) && a.min_bytes.is_none_or(|min| b >= min) && a.max_bytes.is_none_or(|max| b <= max)
    };
    let fit_points: Vec<(f64, f64)> =
        medians.iter().filter(|(b, _, _)| in_fit(*b)).map(|&(b, _, m)| (b as f64, m)).collect();
    let link = fit_ring(a.ranks, &fit_points)?;
    println!(
        "fit of the {:?} over {} sizes ({} ranks): alpha = {:.3} us per step, busbw = {:.2} GB/s \
         (t = {:.3} us + S / {:.2} GB/s)\n",
        a.stat,
        fit_points.len(),
        a.ranks,
        link.alpha_s * 1e6,
        link.busbw / GB,
        2.0 * (a.ranks as f64 - 1.0) * link.alpha_s * 1e6,
        link.busbw / (2.0 * (a.ranks as f64 - 1.0) / a.ranks as f64) / GB
    );
    println!("| bytes | calls | measured {:?} us | model us | model / measured | used in fit |", a.stat);
    println!("|---:|---:|---:|---:|---:|---|");
    for (b, n, m) in medians {
        let model = ring_allreduce_seconds(a.ranks, b as f64, link);
        let used = if a.check.contains(&b) {
            "no (check)"
        } else if in_fit(b) {
            "yes"
        } else {
            "no (outside --min-bytes/--max-bytes)"
        };
        println!("| {b} | {n} | {:.2} | {:.2} | {:.2} | {used} |", m * 1e6, model * 1e6, model / m);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("scaling-model-{}-{name}.csv", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn points_are_grouped_by_size_and_bad_lines_name_the_line() {
        let p = write("ok", "# ranks=2\nbytes,seconds\n4,0.000001\n4,0.000003\n1024,0.00001\n\n");
        let by = read_points(&p).unwrap();
        assert_eq!(by.get(&4), Some(&vec![1e-6, 3e-6]));
        assert_eq!(by.get(&1024), Some(&vec![1e-5]));
        let bad = write("bad", "bytes,seconds\n4,0.1\n8;0.2\n");
        let e = read_points(&bad).unwrap_err();
        assert!(e.contains(":3:") && e.contains("8;0.2"), "{e}");
        let neg = write("neg", "4,-1\n");
        assert!(read_points(&neg).unwrap_err().contains("not a positive"));
        let empty = write("empty", "# nothing\n");
        assert!(read_points(&empty).unwrap_err().contains("no `bytes,seconds`"));
        for f in [p, bad, neg, empty] {
            let _ = std::fs::remove_file(f);
        }
    }

    #[test]
    fn parameter_counts_come_from_the_model_definitions() {
        assert_eq!(params(ModelName::Resnet32).unwrap(), 466_906);
        assert_eq!(params(ModelName::Resnet50).unwrap(), 25_557_032);
    }

    #[test]
    fn every_network_has_a_figure_and_others_are_refused() {
        for g in [100, 200, 400] {
            assert!(nic_busbw_gbs(g).unwrap() > 0.9 * f64::from(g) / 8.0);
        }
        assert!(nic_busbw_gbs(300).unwrap_err().contains("--network 300"));
        let names: Vec<String> = configs(&[1, 2]).into_iter().map(|c| c.0).collect();
        assert_eq!(
            names,
            ["S-SGD", "SMA k=1, hierarchical", "SMA k=2, hierarchical", "SMA k=2, one all-reduce per learner"]
        );
    }
}
