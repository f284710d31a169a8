//! Where a run stops for its epoch limit. Iterations are whole (every learner takes one
//! batch), so a fractional limit falls between two iteration boundaries: the run ends at the
//! nearer one, and after at least one iteration. When one iteration is already more than the
//! limit (large batches times many learners on a small training set), the run says so.

use crate::config::TrainConfig;

/// Whether a run that has trained on `samples` images should stop before its next iteration
/// of `next` images, for a limit of `epochs` epochs of `per_epoch` images: it stops at the
/// iteration boundary nearest to the limit (the earlier one on a tie), never before the
/// first iteration.
pub fn epoch_limit_reached(samples: u64, next: u64, per_epoch: usize, epochs: f64) -> bool {
    if samples == 0 {
        return false;
    }
    let limit = epochs * per_epoch as f64;
    // Running the next iteration ends |samples + next - limit| away from the limit, stopping
    // now |samples - limit|: run it only if that is nearer.
    samples as f64 + next as f64 / 2.0 >= limit
}

/// A line for a run of `iterations` iterations on `samples` images whose epoch limit was less
/// than one iteration (then the run is exactly one iteration): what the limit was and what
/// was run instead. `None` for every other run.
pub fn short_limit_note(cfg: &TrainConfig, iterations: u64, samples: u64, per_epoch: usize) -> Option<String> {
    let per_epoch = per_epoch.max(1) as f64;
    if iterations != 1 || cfg.epochs * per_epoch >= samples as f64 {
        return None;
    }
    Some(format!(
        "{} {} is less than one iteration ({samples} images, {:.3} epochs); ran that one iteration",
        cfg.name_of("epochs"),
        cfg.epochs,
        samples as f64 / per_epoch
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrainFile;

    /// Iterations run for a limit, with `per_iteration` images each.
    fn iterations(per_iteration: u64, per_epoch: usize, epochs: f64) -> u64 {
        let mut samples = 0;
        let mut n = 0;
        while !epoch_limit_reached(samples, per_iteration, per_epoch, epochs) {
            samples += per_iteration;
            n += 1;
            assert!(n < 1_000_000);
        }
        n
    }

    #[test]
    fn fractional_limits_end_at_the_nearest_iteration() {
        // 187 batches of 32 per epoch, one learner: two epochs are exactly 374 iterations.
        assert_eq!(iterations(32, 5984, 2.0), 374);
        // Three learners: one epoch is 62.33 iterations.
        assert_eq!(iterations(96, 5984, 1.0), 62);
        // 0.5 epochs of 20000 images with 8 learners of 2500: one iteration is a whole
        // epoch, so one iteration (not two epochs).
        assert_eq!(iterations(20_000, 20_000, 0.5), 1);
        assert_eq!(iterations(20_000, 20_000, 1.4), 1);
        assert_eq!(iterations(20_000, 20_000, 1.6), 2);
        // Never zero iterations.
        assert_eq!(iterations(32, 5984, 1e-9), 1);
    }

    #[test]
    fn a_limit_below_one_iteration_is_reported() {
        let cfg =
            |epochs: f64| TrainConfig::from_file(TrainFile { epochs: Some(epochs), ..TrainFile::default() }).unwrap();
        let note = short_limit_note(&cfg(1e-9), 1, 32, 19968).unwrap();
        assert_eq!(
            note,
            "--epochs 0.000000001 is less than one iteration (32 images, 0.002 epochs); ran that one iteration"
        );
        assert!(short_limit_note(&cfg(0.5), 1, 20_000, 20_000).is_some());
        assert!(short_limit_note(&cfg(1.0), 1, 20_000, 20_000).is_none());
        assert!(short_limit_note(&cfg(0.5), 0, 0, 20_000).is_none());
        assert!(short_limit_note(&cfg(2.0), 374, 11968, 5984).is_none());
    }
}

/// The epoch of the next evaluation after one at `epoch`, when evaluations are due every
/// `every` epochs and the next was `next`: the first multiple of `every` after `epoch`,
/// found in one step (a tiny `every` must not loop for ages).
pub fn next_evaluation(next: f64, epoch: f64, every: f64) -> f64 {
    if next > epoch + 1e-9 {
        return next;
    }
    let k = ((epoch + 1e-9) / every).floor() + 1.0;
    (k * every).max(next + every)
}

#[cfg(test)]
mod next_evaluation_tests {
    use super::next_evaluation;

    #[test]
    fn the_next_evaluation_is_the_next_multiple_in_one_step() {
        assert_eq!(next_evaluation(0.5, 0.5, 0.5), 1.0);
        assert_eq!(next_evaluation(0.5, 0.3, 0.5), 0.5);
        assert!((next_evaluation(0.1, 0.55, 0.1) - 0.6).abs() < 1e-12);
        // 1e-300 epochs: one step, no loop (the next evaluation is due at once).
        let n = next_evaluation(1e-300, 0.01, 1e-300);
        assert!(n.is_finite() && n >= 0.01, "{n}");
        assert!(next_evaluation(1e-6, 0.01, 1e-6) > 0.01);
    }
}
