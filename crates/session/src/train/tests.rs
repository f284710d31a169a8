//! The training loop's policies, each on its own: the evaluation schedule, the training
//! window, the divergence guard and the rollback's choice of checkpoint, the advice on a
//! divergence, the ranks' agreement and the resume hint. (The whole run is tested through
//! `crossbow train` in the CLI's tests: resume, rollback, signals, several ranks.)

use crossbow_replica::Solo;
use crossbow_replica::checkpoint::CheckpointFile;
use crossbow_replica::engine::{IterationRecord, LossRecord};
use serde_json::json;

use super::guard::{DivergenceWatch, Guard, likely_cause};
use super::restore::{RankState, saved_tuner};
use super::run::{EvalSchedule, Window};
use super::saving::{agree, resume_hint};
use crate::config::{TrainConfig, TrainFile};
use crate::signals;

fn record(iteration: u64, epoch: f64, loss: f64, loss_images: usize, images: usize) -> IterationRecord {
    IterationRecord {
        iteration,
        epoch,
        lr: 0.1,
        loss,
        accuracy: 0.5,
        loss_iteration: iteration,
        loss_images,
        images,
        seconds: 1.0,
        device_seconds: vec![1.0],
        learners: vec![1],
        rank_allreduce_seconds: 0.0,
    }
}

#[test]
fn evaluations_every_half_epoch_and_at_the_limit() {
    let mut s = EvalSchedule::new(2.0, 0.5, None);
    let epochs = [0.2, 0.45, 0.5, 0.7, 1.05, 1.2, 1.5, 1.9, 2.0];
    let due: Vec<bool> = epochs.iter().enumerate().map(|(i, &e)| s.due(i as u64 + 1, e)).collect();
    assert_eq!(due, [false, false, true, false, true, false, true, false, true]);
    // An iteration that steps over several evaluation points evaluates once, and the next is
    // the first point after it.
    let mut s = EvalSchedule::new(10.0, 0.25, None);
    assert!(s.due(1, 1.1));
    assert!((s.next_eval - 1.25).abs() < 1e-9, "{}", s.next_eval);
    assert!(!s.due(2, 1.2));
}

#[test]
fn evaluations_by_iterations_and_at_the_limit() {
    let mut s = EvalSchedule::new(1.0, 0.25, Some(3));
    let due: Vec<bool> = (1..=7).map(|i| s.due(i, i as f64 * 0.1)).collect();
    assert_eq!(due, [false, false, true, false, false, true, false]);
    // The limit is evaluated even off the period.
    assert!(s.due(10, 1.0));
}

#[test]
fn the_window_means_cover_the_losses_read() {
    let mut w = Window::default();
    // Losses read one iteration late: the first iteration carries none.
    w.add(&record(1, 0.1, 0.0, 0, 32), 1.0);
    w.add(&record(2, 0.2, 2.0, 32, 32), 1.0);
    w.add_losses(&LossRecord { iteration: 2, loss: 1.0, accuracy: 0.75, images: 32 });
    let (loss, acc) = w.means();
    assert!((loss - 1.5).abs() < 1e-12, "{loss}");
    assert!((acc - 0.625).abs() < 1e-12, "{acc}");
    // An empty window reports zeros, not NaN.
    assert_eq!(Window::default().means(), (0.0, 0.0));
}

#[test]
fn a_loss_explodes_past_a_hundred_times_the_first_or_ln_classes() {
    let mut w = DivergenceWatch::default();
    let (first, limit) = w.limit(3.0, 10);
    assert_eq!(first, 3.0);
    assert!((limit - 300.0).abs() < 1e-9);
    // The first loss stays the scale.
    assert_eq!(w.limit(50.0, 10), (3.0, limit));
    // A tiny first loss (a resumed, well-trained model): ln(classes) is the floor.
    let mut w = DivergenceWatch::default();
    let (_, limit) = w.limit(1e-3, 10);
    assert!((limit - 100.0 * 10f64.ln()).abs() < 1e-9);
    assert!(super::guard::exploded(f64::NAN, limit));
    assert!(super::guard::exploded(f64::INFINITY, limit));
    assert!(super::guard::exploded(limit * 1.01, limit));
    assert!(!super::guard::exploded(limit, limit));
}

#[test]
fn a_rollback_halves_the_rate_and_counts() {
    let g = Guard { first_loss: Some(2.3), ..Guard::default() };
    assert_eq!(g.lr_factor, 1.0);
    let once = g.rolled_back(100, 130);
    assert_eq!(
        (once.rollbacks, once.lr_factor, once.prev_target, once.prev_diverged_at),
        (1, 0.5, Some(100), Some(130))
    );
    assert_eq!(once.first_loss, Some(2.3));
    let twice = once.rolled_back(50, 90);
    assert_eq!((twice.rollbacks, twice.lr_factor), (2, 0.25));
}

#[test]
fn a_rollback_goes_back_further_when_the_run_diverges_again_no_later() {
    let newest_first = [150, 100, 50, 0];
    // First divergence: the newest checkpoint first, then the older ones.
    assert_eq!(Guard::default().rollback_order(160, &newest_first), [0, 1, 2, 3]);
    // Went back to 100 from a divergence at 130; diverging again at 125 (no later): the
    // checkpoints before 100 first, then 100 itself; 150 is never tried.
    let g = Guard::default().rolled_back(100, 130);
    assert_eq!(g.rollback_order(125, &newest_first), [2, 3, 1]);
    // Diverging later than last time: the newest again.
    assert_eq!(g.rollback_order(140, &newest_first), [0, 1, 2, 3]);
    // Nothing before the one gone back to: the same one again.
    let g = Guard::default().rolled_back(0, 20);
    assert_eq!(g.rollback_order(20, &newest_first), [3]);
}

#[test]
fn a_guard_of_an_older_checkpoint_still_reads() {
    let g: Guard = serde_json::from_value(json!({ "first_loss": 2.0, "rollbacks": 1, "lr_factor": 0.5 })).unwrap();
    assert_eq!(g.rolled_back(10, 20).lr_factor, 0.25);
    assert_eq!(g.prev_target, None);
}

#[test]
fn divergence_advice_names_the_setting_beyond_its_range() {
    let cfg = |f: TrainFile| TrainConfig::from_file(f).unwrap();
    let plain = cfg(TrainFile::default());
    assert_eq!(likely_cause(&plain, vec![]), "lower the learning rate");
    let decay = cfg(TrainFile { lr: Some(0.5), weight_decay: Some(0.5), ..TrainFile::default() });
    let advice = likely_cause(&decay, vec![]);
    assert!(advice.starts_with("likely cause: --weight-decay 0.5"), "{advice}");
    // The synchroniser names its own: SMA a pull its learner count cannot keep stable.
    let sma = |k: usize| {
        let o = crossbow_replica::catalog::SyncOptions::new().option("alpha", "0.9");
        let mut s = crossbow_sma::catalog::sma_from(&o).unwrap();
        crossbow_replica::Synchroniser::<crossbow_kernels::CpuBackend>::set_learners(&mut s, k);
        crossbow_replica::Synchroniser::<crossbow_kernels::CpuBackend>::divergence_causes(&s)
    };
    let advice = likely_cause(&plain, sma(4));
    assert!(advice.contains("--alpha 0.9 (with 4 learners"), "{advice}");
    // The same pull is within range for 1 learner.
    assert_eq!(likely_cause(&plain, sma(1)), "lower the learning rate");
}

#[test]
fn one_process_agrees_with_itself_and_resumes_without_mpirun() {
    assert_eq!(agree(&Solo, Some(signals::SIGTERM), true).unwrap(), (Some(signals::SIGTERM), true));
    assert_eq!(agree(&Solo, None, false).unwrap(), (None, false));
    assert_eq!(resume_hint(&Solo, std::path::Path::new("ck/x")), "crossbow train --resume ck/x");
}

#[test]
fn the_tuner_state_resumed_is_the_files_for_one_process() {
    let file = CheckpointFile::new(json!({ "tuner": { "probe": 3 } }));
    assert_eq!(saved_tuner(&file, &[], &Solo), json!({ "probe": 3 }));
    // A checkpoint of several ranks resumed by one process: the tuner starts a new search.
    let ranks = vec![RankState::default(), RankState::default()];
    assert!(saved_tuner(&file, &ranks, &Solo).is_null());
}
