//! The typed API: a [`Trainer`] stepped by hand trains exactly as a whole run does, saves
//! when asked, and a run resumed from that save ends where the uninterrupted one ends.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crossbow_session::{Config, DatasetKind, DeviceSpec, Learners, ModelKind, Schedule, SessionError, Trainer};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("crossbow-session-trainer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn config() -> Config {
    Config::new(ModelKind::LeNet5)
        .dataset(DatasetKind::SyntheticDigits, "data")
        .sizes(1_024, 256)
        .devices(DeviceSpec::Cpu(1))
        .learners(Learners::Fixed(2))
        .sync("sma")
        .batch_size(16)
        .lr(0.05, Schedule::MultiStep { milestones: vec![1.0], gamma: 0.1 })
        .epochs(1.5)
        .seed(3)
        .quiet(true)
}

#[test]
fn stepping_by_hand_is_the_whole_run() {
    let whole = Trainer::new(config()).unwrap().run().unwrap();
    let mut t = Trainer::new(config()).unwrap();
    let mut last = 0;
    while let Some(step) = t.step().unwrap() {
        assert_eq!(step.iteration, last + 1);
        last = step.iteration;
    }
    // A step after the end is still the end.
    assert!(t.step().unwrap().is_none());
    let by_hand = t.finish().unwrap();
    assert_eq!(by_hand.iterations, whole.iterations);
    assert_eq!(by_hand.final_accuracy, whole.final_accuracy);
    let accs = |s: &crossbow_session::Summary| s.evaluations.iter().map(|e| e.test_loss).collect::<Vec<_>>();
    assert_eq!(accs(&by_hand), accs(&whole));
}

#[test]
fn evaluate_and_save_on_demand_and_resume_from_the_save() {
    let dir = tmp("save");
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = Arc::clone(&lines);
    let mut t = Trainer::new(config().checkpoint_dir(&dir).quiet(false).on_progress(move |l| {
        sink.lock().unwrap().push(l.to_string());
    }))
    .unwrap();
    assert!(matches!(t.evaluate(), Err(SessionError::Usage(_))), "evaluate before any step is an error");
    for _ in 0..20 {
        t.step().unwrap().expect("a step");
    }
    let e = t.evaluate().unwrap();
    assert_eq!(e.iteration, 20);
    // Evaluating the same iteration again gives the same line without a second evaluation.
    assert_eq!(t.evaluate().unwrap().test_loss, e.test_loss);
    let saved = t.save().unwrap();
    assert!(saved.is_file(), "{}", saved.display());
    assert!(saved.starts_with(&dir));
    let whole = t.run().unwrap();
    assert!(lines.lock().unwrap().iter().any(|l| l.contains("test acc")), "no evaluation line");
    // A run resumed from the save at iteration 20 ends where the uninterrupted one ended.
    let resumed_dir = tmp("resumed");
    std::fs::create_dir_all(&resumed_dir).unwrap();
    let copy = resumed_dir.join(saved.file_name().unwrap());
    std::fs::copy(&saved, &copy).unwrap();
    let resumed = Trainer::new(config().checkpoint_dir(&resumed_dir).resume(&copy)).unwrap().run().unwrap();
    assert_eq!(resumed.iterations, whole.iterations);
    assert_eq!(resumed.final_accuracy, whole.final_accuracy);
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&resumed_dir);
}

#[test]
fn save_without_a_checkpoint_folder_is_refused() {
    let mut t = Trainer::new(config()).unwrap();
    t.step().unwrap();
    let e = t.save().unwrap_err();
    assert!(matches!(e, SessionError::Usage(_)), "{e}");
    assert!(e.to_string().contains("checkpoint_dir"), "{e}");
    // The run goes on after a refused save.
    assert!(t.step().unwrap().is_some());
}

#[test]
fn bad_typed_settings_are_refused_with_the_setting_named() {
    let Err(e) = Trainer::new(config().batch_size(0)) else { panic!("batch size 0 accepted") };
    assert!(e.to_string().contains("batch-size"), "{e}");
    let Err(e) = Trainer::new(config().sync("nonesuch")) else { panic!("unknown synchroniser accepted") };
    assert!(e.to_string().contains("nonesuch"), "{e}");
}

/// Errors are typed: a program tells bad data from a divergence without reading the message,
/// and the command line's exit code follows the variant.
#[test]
fn errors_say_what_went_wrong_by_their_variant() {
    // A folder of the right layout with no images: the data's own error, the user's input.
    let dir = tmp("empty-data");
    std::fs::create_dir_all(dir.join("train/a")).unwrap();
    std::fs::create_dir_all(dir.join("val/a")).unwrap();
    let empty = config().dataset(DatasetKind::Folder, &dir);
    let e = match Trainer::new(empty) {
        Err(e) => e,
        Ok(t) => t.run().expect_err("a folder without images trained"),
    };
    assert!(matches!(e, SessionError::Data(_)), "{e:?}");
    assert_eq!(e.exit_code(), 2, "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    // A rate that can only diverge, without a rollback: Diverged, exit code 1.
    let e = Trainer::new(config().lr(1e6, Schedule::Constant)).unwrap().run().expect_err("lr 1e6 trained");
    assert!(matches!(e, SessionError::Diverged(_)), "{e:?}");
    assert!(e.to_string().starts_with("training diverged"), "{e}");
    assert_eq!(e.exit_code(), 1);
    assert!(!e.is_usage());
}
