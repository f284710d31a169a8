//! What `crossbow experiment tta` writes: runs ranked, medians with misses, the markdown
//! table, the plots, and `runs.jsonl` read and appended.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use plotters::prelude::*;

use super::{Config, CurvePoint, Run, TtaArgs};
use crate::error::SessionError;

/// (variant, k, b).
pub(super) type ConfigKey = (String, usize, usize);
/// Median epochs and seconds to target (`None`: not reached).
pub(super) type Medians = (Option<f64>, Option<f64>);

/// Sort key of a tuning run: reached first, then fewer epochs, then higher accuracy.
pub(super) fn rank(r: &Run) -> (u8, f64, f64) {
    match r.epochs_to_target {
        Some(e) if r.reached => (0, e, -r.best_accuracy),
        _ => (1, f64::INFINITY, -r.best_accuracy),
    }
}

/// Sort key of a tuning run by final accuracy: a failed run last, then the higher final
/// accuracy, then fewer epochs to target.
pub(super) fn rank_final(r: &Run) -> (u8, f64, f64) {
    (u8::from(r.error.is_some()), -r.final_accuracy, r.epochs_to_target.unwrap_or(f64::INFINITY))
}

/// The first evaluation at or above `target`.
pub(super) fn first_at_or_above(curve: &[CurvePoint], target: f64) -> Option<&CurvePoint> {
    curve.iter().find(|p| p.test_accuracy >= target)
}

/// Mean test accuracy of the evaluations in the last `epochs` epochs of the curve (at least
/// the last evaluation; 0 without any).
pub(super) fn final_accuracy(curve: &[CurvePoint], epochs: f64) -> f64 {
    let Some(last) = curve.last() else { return 0.0 };
    let tail: Vec<f64> =
        curve.iter().filter(|p| p.epoch > last.epoch - epochs + 1e-9).map(|p| p.test_accuracy).collect();
    if tail.is_empty() { last.test_accuracy } else { tail.iter().sum::<f64>() / tail.len() as f64 }
}

pub(super) fn read_runs(p: &Path) -> Result<Vec<Run>, SessionError> {
    if !p.exists() {
        return Ok(vec![]);
    }
    let text = std::fs::read_to_string(p).map_err(|e| SessionError::run(format!("{}: {e}", p.display())))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| SessionError::usage(format!("{} line {}: {e}", p.display(), i + 1)))
        })
        .collect()
}

pub(super) fn append_run(p: &Path, r: &Run) -> Result<(), SessionError> {
    let line = serde_json::to_string(r).map_err(SessionError::run)?;
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map_err(|e| SessionError::run(format!("{}: {e}", p.display())))?;
    writeln!(f, "{line}").map_err(|e| SessionError::run(format!("{}: {e}", p.display())))
}

pub(super) fn write(p: &Path, s: &str) -> Result<(), SessionError> {
    std::fs::write(p, s).map_err(|e| SessionError::run(format!("{}: {e}", p.display())))
}

/// Median over all runs, a miss counting as +inf (`None` when most missed).
pub fn median_with_misses(values: &[Option<f64>]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = values.iter().map(|x| x.unwrap_or(f64::INFINITY)).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    let m = if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) };
    m.is_finite().then_some(m)
}

pub(super) fn range(values: &[Option<f64>]) -> Option<(f64, f64)> {
    let v: Vec<f64> = values.iter().flatten().copied().collect();
    if v.is_empty() {
        return None;
    }
    Some((v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(f64::NEG_INFINITY, f64::max)))
}

pub(super) fn cell(values: &[Option<f64>], p: usize) -> String {
    match (median_with_misses(values), range(values)) {
        (Some(m), Some((lo, hi))) => format!("{m:.p$} [{lo:.p$}–{hi:.p$}]"),
        (None, Some((lo, hi))) => format!("not reached [{lo:.p$}–{hi:.p$}]"),
        _ => "not reached".into(),
    }
}

/// The results table (one row per configuration), the comparison of every variant with the
/// first S-SGD variant at equal k and b, and the tuning grid.
pub(super) fn markdown(args: &TtaArgs, configs: &[Config], chosen: &[f64], runs: &[Run], tune: &[Run]) -> String {
    let target = if args.target > 1.0 { args.target / 100.0 } else { args.target };
    let mut s = format!(
        "Target {:.1}% test accuracy, {} on {}, epoch limit {}{}, {} evaluation seed(s) per row (learning rate tuned on seed {}, by {}). Cells: median over all seeds, a miss counting as slower than any hit, [min–max] over the runs that reached the target; final accuracy: the mean over the evaluations of a run's last {} epochs.\n\n",
        100.0 * target,
        args.model,
        args.dataset,
        args.epochs,
        if args.run_to_end { " (every run to the limit)" } else { "" },
        args.seeds,
        args.tune_seed,
        if args.tune_by == "final" { "final accuracy" } else { "epochs to target" },
        args.final_epochs
    );
    s.push_str("| variant | k | batch/learner | effective batch | lr | reached | epochs to target | seconds to target | final accuracy % | images/s |\n");
    s.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let mut medians: BTreeMap<ConfigKey, Medians> = BTreeMap::new();
    for (c, lr) in configs.iter().zip(chosen) {
        let rs: Vec<&Run> =
            runs.iter().filter(|r| r.variant == c.variant.label && r.learners == c.k && r.batch == c.b).collect();
        let ep: Vec<Option<f64>> = rs.iter().map(|r| r.epochs_to_target).collect();
        let secs: Vec<Option<f64>> = rs.iter().map(|r| r.seconds_to_target).collect();
        let finals: Vec<Option<f64>> = rs.iter().map(|r| Some(100.0 * r.final_accuracy)).collect();
        let mut ips: Vec<f64> = rs.iter().map(|r| r.images_per_sec).filter(|x| *x > 0.0).collect();
        ips.sort_by(|a, b| a.total_cmp(b));
        let ips_med = ips.get(ips.len() / 2).copied().unwrap_or(0.0);
        for l in &c.labels {
            medians.insert((l.clone(), c.k, c.b), (median_with_misses(&ep), median_with_misses(&secs)));
        }
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {}/{} | {} | {} | {} | {:.0} |\n",
            c.labels.join(" = "),
            c.k,
            c.b,
            if c.variant.sync == "ssgd" { c.k * c.b } else { c.b },
            lr,
            rs.iter().filter(|r| r.reached).count(),
            rs.len(),
            cell(&ep, 2),
            cell(&secs, 1),
            cell(&finals, 1),
            ips_med,
        ));
    }
    if let Some(base) = configs.iter().find(|c| c.variant.sync == "ssgd").map(|c| c.variant.label.clone()) {
        s.push_str(&format!("\nAgainst `{base}` at the same k and b (k >= 2; medians as above):\n\n"));
        s.push_str("| variant | no more epochs | fewer epochs | less time | pairs |\n|---|---:|---:|---:|---:|\n");
        for v in &args.sync {
            if *v == base {
                continue;
            }
            let (mut le, mut lt, mut faster, mut pairs) = (0, 0, 0, 0);
            for (&(ref l, k, b), &(e, t)) in &medians {
                if l != v || k < 2 {
                    continue;
                }
                let Some(&(be, bt)) = medians.get(&(base.clone(), k, b)) else { continue };
                pairs += 1;
                let inf = f64::INFINITY;
                let (e, be, t, bt) = (e.unwrap_or(inf), be.unwrap_or(inf), t.unwrap_or(inf), bt.unwrap_or(inf));
                if e <= be && e.is_finite() {
                    le += 1;
                }
                if e < be {
                    lt += 1;
                }
                if t < bt {
                    faster += 1;
                }
            }
            s.push_str(&format!("| {v} | {le} | {lt} | {faster} | {pairs} |\n"));
        }
    }
    if !tune.is_empty() {
        s.push_str(&format!(
            "\nLearning-rate tuning (seed {}): epochs to target per rate, `—` = not reached (best accuracy).\n\n",
            args.tune_seed
        ));
        s.push_str("| configuration | rates tried: epochs (best accuracy) |\n|---|---|\n");
        for (c, lr) in configs.iter().zip(chosen) {
            let mine: Vec<String> = tune
                .iter()
                .filter(|r| r.variant == c.variant.label && r.learners == c.k && r.batch == c.b)
                .map(|r| {
                    let mark = if (r.lr - lr).abs() <= 1e-12 * lr.max(1.0) { "**" } else { "" };
                    match (r.epochs_to_target, &r.error) {
                        (_, Some(_)) => format!("{mark}{}{mark}: diverged", r.lr),
                        (Some(e), _) => {
                            format!("{mark}{}{mark}: {e:.2} (final {:.1}%)", r.lr, 100.0 * r.final_accuracy)
                        }
                        (None, _) => format!(
                            "{mark}{}{mark}: — (best {:.1}%, final {:.1}%)",
                            r.lr,
                            100.0 * r.best_accuracy,
                            100.0 * r.final_accuracy
                        ),
                    }
                })
                .collect();
            if !mine.is_empty() {
                s.push_str(&format!("| {} | {} |\n", c.key(), mine.join(", ")));
            }
        }
    }
    s
}

/// What a plot shows.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Plot {
    AccuracyByEpoch,
    AccuracyByTime,
    /// The learners' spread around z (`--diagnostics`), by epoch.
    SpreadByEpoch,
}

/// One panel per batch size; a line per configuration through seed 1's evaluations.
pub(super) fn plot(path: &Path, runs: &[Run], args: &TtaArgs, what: Plot) -> Result<(), SessionError> {
    let by_time = what == Plot::AccuracyByTime;
    let y_of = |p: &CurvePoint| match what {
        Plot::SpreadByEpoch => p.spread,
        _ => Some(p.test_accuracy),
    };
    let err = |e: &dyn std::fmt::Display| SessionError::run(format!("{}: {e}", path.display()));
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
        let ymax = match what {
            Plot::SpreadByEpoch => {
                sel.iter().flat_map(|r| r.curve.iter().filter_map(y_of)).fold(1e-6f64, f64::max) * 1.05
            }
            _ => 1.0,
        };
        let mut chart = ChartBuilder::on(area)
            .caption(format!("batch {b} per learner"), ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..xmax * 1.02, 0f64..ymax)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(if by_time { "training seconds" } else { "epochs" })
            .y_desc(if what == Plot::SpreadByEpoch {
                "learners' spread ‖w−z‖/‖z‖"
            } else {
                "test accuracy (central model)"
            })
            .draw()
            .map_err(|e| err(&e))?;
        for (i, r) in sel.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            let width = if r.sync == "ssgd" { 1 } else { 2 };
            let style = ShapeStyle::from(&color).stroke_width(width);
            let pts: Vec<(f64, f64)> = r
                .curve
                .iter()
                .filter_map(|e| y_of(e).map(|y| (if by_time { e.train_seconds } else { e.epoch }, y)))
                .collect();
            chart
                .draw_series(LineSeries::new(pts, style))
                .map_err(|e| err(&e))?
                .label(format!("{} k={}", r.variant, r.learners))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
        }
        let target = if args.target > 1.0 { args.target / 100.0 } else { args.target };
        if what != Plot::SpreadByEpoch {
            chart
                .draw_series(LineSeries::new(vec![(0.0, target), (xmax * 1.02, target)], BLACK.mix(0.3)))
                .map_err(|e| err(&e))?;
        }
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
