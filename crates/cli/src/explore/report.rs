//! The end of an exploration: the ranking, `best.toml`, the plot.

use std::path::Path;

use plotters::prelude::*;
use serde_json::json;

use super::ExploreArgs;
use super::groups::{Ctx, Group, Outcome, Status};
use crate::error::SessionError;

pub(super) fn print_table(groups: &[Group]) {
    eprintln!("  {:<4} {:<44} {:>7} {:>9}  status", "id", "settings", "epoch", "accuracy");
    for g in groups {
        eprintln!(
            "  #{:<3} {:<44} {:>7.3} {:>8.2}%  {}",
            g.conf.id,
            g.conf.label(),
            g.epoch(),
            100.0 * g.last_accuracy(),
            g.status
        );
    }
}

/// The ranking: the target's winner first; then by the last rung reached and the accuracy
/// there (or, for runs to the end, the final accuracy); ties by id.
pub(super) fn ranking(o: &Outcome) -> Vec<usize> {
    let key = |g: &Group| -> (usize, f64) {
        let depth = match g.status {
            Status::ReachedTarget => usize::MAX,
            Status::Pruned(r) => r + 1,
            Status::Diverged(_) => 0,
            _ => g.rungs.len() + 1,
        };
        let acc = if g.rungs.len() == o.rung_fractions.len() || g.rungs.is_empty() {
            g.last_accuracy()
        } else {
            g.rungs.last().copied().unwrap_or(0.0)
        };
        (depth, acc)
    };
    let mut order: Vec<usize> = (0..o.groups.len()).collect();
    order.sort_by(|&a, &b| {
        let (ka, kb) = (key(&o.groups[a]), key(&o.groups[b]));
        kb.0.cmp(&ka.0).then(kb.1.total_cmp(&ka.1)).then(a.cmp(&b))
    });
    order
}

pub(super) fn finish(ctx: &mut Ctx<'_>, args: &ExploreArgs, mut o: Outcome) -> Result<(), SessionError> {
    let wall = ctx.wall.elapsed().as_secs_f64();
    let order = ranking(&o);
    let budget = o.groups.first().map(|g| g.conf.cfg.epochs).unwrap_or(0.0);
    let winner = order[0];
    let all_diverged = o.groups.iter().all(|g| matches!(g.status, Status::Diverged(_)));
    // Stopped by a signal: a ranking of what was measured so far, the leader as best.toml,
    // and the state to resume (no winner is crowned).
    let stopped = o.stopped.clone();
    if o.reached.is_none() && !all_diverged && stopped.is_none() {
        o.groups[winner].status = Status::Winner;
    }
    let consumed: u64 = o.groups.iter().map(|g| g.samples).sum();
    let calibration: u64 = o.groups.iter().map(|g| g.calibration_samples).sum();
    let mut text = String::new();
    text.push_str(&format!(
        "{:<5} {:<4} {:<44} {:>7} {:>10} {:>9}  status\n",
        "rank", "id", "settings", "epochs", "accuracy", "learners"
    ));
    for (r, &i) in order.iter().enumerate() {
        let g = &o.groups[i];
        let learners = format!("{:?}", g.learners);
        text.push_str(&format!(
            "{:<5} #{:<3} {:<44} {:>7.3} {:>9.2}% {:>9}  {}\n",
            r + 1,
            g.conf.id,
            g.conf.label(),
            g.epoch(),
            100.0 * g.last_accuracy(),
            learners,
            g.status
        ));
    }
    let w = &o.groups[winner];
    let best_path = args.out.join("best.toml");
    if all_diverged {
        // Nothing to recommend: the ranking and the plot say what happened.
        let text = text + "\nevery configuration diverged: no best.toml; lower the learning rates of the search\n";
        print!("{text}");
        let rank_path = args.out.join("ranking.txt");
        std::fs::write(&rank_path, &text)
            .map_err(|e| SessionError::run(format!("{}: cannot write: {e}", rank_path.display())))?;
        plot(&args.out.join("accuracy.svg"), &o.groups)?;
        ctx.reporter.record("end", json!({ "winner": null, "all_diverged": true }))?;
        return Err(SessionError::run(format!(
            "every configuration diverged (ranking in {}); lower the learning rates of the search",
            rank_path.display()
        )));
    }
    let best = toml::to_string(&crate::resume::config_to_file(&w.conf.cfg)).map_err(SessionError::run)?;
    let header = format!(
        "# The {} of {} configurations explored from {} (#{}: {}), test accuracy {:.2}%.\n# crossbow train --config {}\n",
        if stopped.is_some() { "leader so far (the exploration was stopped)" } else { "best" },
        o.groups.len(),
        args.config.display(),
        w.conf.id,
        w.conf.label(),
        100.0 * w.last_accuracy(),
        best_path.display()
    );
    std::fs::write(&best_path, header + &best)
        .map_err(|e| SessionError::run(format!("{}: cannot write: {e}", best_path.display())))?;
    let share = format!(
        "pipeline: {} samples decoded and augmented ({}) for the {} the configurations trained on (what running them one after another decodes): {:.2}x fewer; waited {:.2} s for it, {:.2} s assembling batches; batch-norm recalibration drew {} more samples, per configuration (not shared)",
        o.decoded_samples,
        if o.unit == 0 {
            "each configuration its own pipeline".to_string()
        } else {
            format!("unit batches of {}", o.unit)
        },
        consumed,
        consumed as f64 / o.decoded_samples.max(1) as f64,
        o.wait_secs,
        o.copy_secs,
        calibration
    );
    text.push_str(&format!(
        "\n{share}\nwall time {wall:.1} s for a budget of {budget} epochs\nbest: {}\n",
        best_path.display()
    ));
    if let Some((sig, steps, state)) = &stopped {
        let resume = if state.as_os_str().is_empty() {
            "a --sequential measurement is not resumed: run it again".to_string()
        } else {
            format!(
                "resume with: crossbow explore --config {} --out {} --resume",
                args.config.display(),
                args.out.display()
            )
        };
        text.push_str(&format!(
            "\nstopped by {} after {steps} steps: the ranking so far (running configurations at their last evaluation); {resume}\n",
            crate::signals::name(*sig)
        ));
    }
    print!("{text}");
    let rank_path = args.out.join("ranking.txt");
    std::fs::write(&rank_path, &text)
        .map_err(|e| SessionError::run(format!("{}: cannot write: {e}", rank_path.display())))?;
    plot(&args.out.join("accuracy.svg"), &o.groups)?;
    if let Some((sig, steps, state)) = stopped {
        let resume = if state.as_os_str().is_empty() {
            String::new()
        } else {
            format!(
                "; resume with: crossbow explore --config {} --out {} --resume",
                args.config.display(),
                args.out.display()
            )
        };
        return Err(SessionError::Interrupted {
            code: crate::signals::exit_code(sig),
            msg: format!(
                "stopped by {} after {steps} steps; the ranking so far is in {} and its leader in {}{resume}",
                crate::signals::name(sig),
                rank_path.display(),
                best_path.display()
            ),
        });
    }
    // Finished: nothing left to resume.
    super::state::clear(&args.out);
    ctx.reporter.record(
        "end",
        json!({
            "winner": w.conf.id,
            "winner_settings": w.conf.settings,
            "reached_target": o.reached.map(|i| o.groups[i].conf.id),
            "ranking": order.iter().map(|&i| {
                let g = &o.groups[i];
                json!({ "id": g.conf.id, "status": g.status.to_string(), "accuracy": g.last_accuracy(),
                        "rungs": g.rungs, "samples": g.samples, "iterations": g.iterations, "learners": g.learners })
            }).collect::<Vec<_>>(),
            "decoded_samples": o.decoded_samples,
            "consumed_samples": consumed,
            "calibration_samples": calibration,
            "unit_batch": o.unit,
            "pipeline_wait_seconds": o.wait_secs,
            "batch_copy_seconds": o.copy_secs,
            "wall_seconds": wall,
            "best": best_path,
        }),
    )?;
    Ok(())
}

/// Test accuracy against wall time of the exploration, one line per configuration with a
/// marker at every evaluation (so a configuration evaluated once still shows), and the legend
/// in a panel of its own beside the chart (it never covers a curve).
pub(super) fn plot(path: &Path, groups: &[Group]) -> Result<(), SessionError> {
    let err = |e: &dyn std::fmt::Display| SessionError::run(format!("{}: {e}", path.display()));
    let legend_rows = groups.len().max(1) as u32;
    let height = (480u32).max(40 + 18 * legend_rows);
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (left, right) = root.split_horizontally(640);
    let xmax = groups.iter().flat_map(|g| g.evals.iter().map(|e| e.wall_seconds)).fold(1e-3f64, f64::max);
    let mut chart = ChartBuilder::on(&left)
        .caption("test accuracy of each configuration", ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(44)
        .build_cartesian_2d(0f64..xmax * 1.02, 0f64..1f64)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds since the exploration started")
        .y_desc("test accuracy (central model)")
        .draw()
        .map_err(|e| err(&e))?;
    for (i, g) in groups.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let pts: Vec<(f64, f64)> = g.evals.iter().map(|e| (e.wall_seconds, e.test_accuracy)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), ShapeStyle::from(&color).stroke_width(2)))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, ShapeStyle::from(&color).filled())))
            .map_err(|e| err(&e))?;
    }
    for (i, g) in groups.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let y = 30 + 18 * i as i32;
        right
            .draw(&PathElement::new(vec![(4, y), (24, y)], ShapeStyle::from(&color).stroke_width(3)))
            .map_err(|e| err(&e))?;
        right
            .draw(&Text::new(
                format!("#{} {} ({})", g.conf.id, g.conf.label(), g.status),
                (30, y - 6),
                ("sans-serif", 12),
            ))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
