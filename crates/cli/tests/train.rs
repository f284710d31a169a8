//! End-to-end: the trainer learns the built-in digits, is deterministic, and rejects bad
//! input with one line and exit code 2.

use std::process::Command;

use crossbow_cli::SyncRegistry;
use crossbow_cli::config::{TrainConfig, TrainFile};
use crossbow_cli::report::Reporter;
use crossbow_cli::train::train;

#[allow(clippy::expect_used)] // Test helper: an invalid config should fail the test.
fn config(extra: TrainFile) -> TrainConfig {
    let base = TrainFile {
        devices: Some("cpu".into()),
        train_size: Some(6000),
        test_size: Some(1000),
        epochs: Some(2.0),
        eval_every: Some(0.5),
        ..TrainFile::default()
    };
    TrainConfig::from_file(base.overridden_by(extra)).expect("valid config")
}

#[test]
fn lenet_learns_the_synthetic_digits() {
    let cfg = config(TrainFile { learners_per_device: Some("1".into()), ..TrainFile::default() });
    let s = train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).expect("training runs");
    assert!(s.final_accuracy > 0.90, "test accuracy {:.4} after {} epochs", s.final_accuracy, s.epochs);
    assert_eq!(s.evaluations.len(), 4);
    assert!((s.epochs - 2.0).abs() < 0.01);
}

#[test]
fn same_seed_same_metrics() {
    // Two learners with SMA: the multi-learner path is deterministic too.
    let cfg = config(TrainFile {
        learners_per_device: Some("2".into()),
        epochs: Some(1.0),
        seed: Some(7),
        ..TrainFile::default()
    });
    let a = train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap();
    let b = train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap();
    let key = |s: &crossbow_cli::report::Summary| {
        s.evaluations
            .iter()
            .map(|e| {
                (
                    e.iteration,
                    e.epoch.to_bits(),
                    e.train_loss.to_bits(),
                    e.test_loss.to_bits(),
                    e.test_accuracy.to_bits(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(key(&a), key(&b));
    let c = train(
        &config(TrainFile {
            learners_per_device: Some("2".into()),
            epochs: Some(1.0),
            seed: Some(8),
            ..TrainFile::default()
        }),
        &SyncRegistry::builtin(),
        &mut Reporter::silent(),
    )
    .unwrap();
    assert_ne!(key(&a), key(&c), "a different seed should change the run");
}

#[test]
fn lagged_loss_reads_give_the_same_evaluations() {
    // Losses read one iteration late (the GPU default) are all counted by each evaluation:
    // the evaluations are the same bits as with losses read every iteration.
    let run = |read: &str| {
        let cfg = config(TrainFile {
            learners_per_device: Some("2".into()),
            epochs: Some(1.0),
            eval_every: Some(0.3),
            loss_read: Some(read.into()),
            ..TrainFile::default()
        });
        let s = train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap();
        s.evaluations
            .iter()
            .map(|e| (e.iteration, e.train_loss.to_bits(), e.train_accuracy.to_bits(), e.test_accuracy.to_bits()))
            .collect::<Vec<_>>()
    };
    let now = run("now");
    assert_eq!(now.len(), 4, "{now:?}");
    assert_eq!(run("lagged"), now);
}

#[test]
fn target_accuracy_stops_early_and_reports_time_to_accuracy() {
    let cfg = config(TrainFile {
        learners_per_device: Some("1".into()),
        target_accuracy: Some(0.8),
        epochs: Some(5.0),
        ..TrainFile::default()
    });
    let s = train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap();
    assert!(s.reached_target);
    assert!(s.epochs < 5.0 && s.epochs_to_target.is_some() && s.time_to_target_seconds.is_some());
    assert!(s.evaluations.last().unwrap().test_accuracy >= 0.8);
}

#[test]
fn metrics_file_has_one_json_line_per_evaluation() {
    let dir = std::env::temp_dir().join(format!("crossbow-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("m.jsonl");
    let cfg = config(TrainFile {
        learners_per_device: Some("1".into()),
        epochs: Some(1.0),
        metrics: Some(path.clone()),
        sync: Some("sma".into()),
        ..TrainFile::default()
    });
    let mut rep = Reporter::new(cfg.metrics.as_deref(), true, cfg.epochs).unwrap();
    train(&cfg, &SyncRegistry::builtin(), &mut rep).unwrap();
    drop(rep);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = lines.iter().map(|v| v["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["start", "eval", "eval", "central", "end"]);
    // The final central model's fingerprint (what runs over several processes compare).
    assert_eq!(lines[3]["crc32"].as_str().unwrap().len(), 8);
    assert_eq!(lines[0]["learners"], serde_json::json!([1]));
    assert_eq!(lines[0]["sync"]["name"], "sma");
    let settings = &lines[0]["sync"]["settings"];
    assert_eq!(settings["form"], "local-momentum");
    assert_eq!(settings["alpha"], 1.0);
    assert_eq!(settings["alpha_rule"], "1/k");
    assert_eq!(settings["central_momentum"], 0.9);
    assert!(lines[1]["test_accuracy"].as_f64().unwrap() > 0.0);
    // Where the time went: the phases add up to the wall time, and the training time is
    // iterations, input wait and recalibration (none here: LeNet-5 has no batch norm).
    let end = &lines[4];
    let phase = |k: &str| end["phases"][k].as_f64().unwrap();
    let names = ["steps", "input_wait", "recalibration", "evaluation", "checkpoints", "other"];
    let sum: f64 = names.iter().map(|k| phase(k)).sum();
    let wall = end["wall_seconds"].as_f64().unwrap();
    assert!((sum - wall).abs() <= 1e-3 * wall + 1e-3, "phases {} add to {sum}, wall {wall}", end["phases"]);
    let train_secs = end["train_seconds"].as_f64().unwrap();
    let trained = phase("steps") + phase("input_wait") + phase("recalibration");
    assert!((trained - train_secs).abs() < 1e-6, "{trained} vs {train_secs}");
    assert!(phase("evaluation") > 0.0 && phase("steps") > 0.0);
    assert_eq!(phase("recalibration"), 0.0);
    std::fs::remove_dir_all(&dir).ok();
}

#[allow(clippy::expect_used)] // Test helper: failing to start the binary should fail the test.
fn crossbow(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_crossbow")).args(args).output().expect("run crossbow");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn bad_input_is_one_line_and_exit_code_2() {
    let tta_out = std::env::temp_dir().join(format!("crossbow-tta-bad-{}", std::process::id()));
    let tta_out = tta_out.to_string_lossy().into_owned();
    for (args, needle) in [
        (vec!["train", "--model", "alexnet"], "unknown model 'alexnet'"),
        (vec!["train", "--dataset", "imagenet"], "imagenet"),
        (vec!["train", "--dataset", "mnist", "--data-dir", "/nonexistent/mnist"], "/nonexistent/mnist"),
        (vec!["train", "--batch-size", "0"], "--batch-size"),
        (vec!["train", "--lr", "abc"], "--lr"),
        (vec!["train", "--schedule", "multistep:9,3"], "--schedule"),
        (vec!["train", "--config", "/nonexistent/c.toml"], "/nonexistent/c.toml"),
        (vec!["train", "--devices", "cpu:0"], "--devices"),
        (vec!["train", "--sync", "hogwild"], "registered: sma, ssgd, easgd, independent"),
        (vec!["train", "--sync-opt", "period"], "--sync-opt"),
        (vec!["train", "--sync-opt", "=4"], "empty KEY"),
        (vec!["train", "--sync-opt", "period=4"], "--sync ssgd: unknown option 'period'"),
        (vec!["train", "--sma-form", "fancy"], "--sma-form"),
        (
            vec!["train", "--model", "resnet20", "--dataset", "synthetic-shapes", "--alpha", "0.5"],
            "--alpha set sma or easgd, but resnet20 trains with ssgd by default and no synchroniser is given; add --sync sma",
        ),
        (vec!["bench", "--sync", "hogwild"], "unknown synchroniser 'hogwild'"),
        (vec!["bench", "--loss-read", "later"], "--loss-read"),
        (vec!["train", "--loss-read", "later"], "--loss-read"),
        (vec!["train", "--normalize", "fancy"], "--normalize: `fancy` is not a normalisation (valid: auto, imagenet"),
        (vec!["train", "--normalize", "0.5/0"], "--normalize: `0.5/0`: std 0 must be positive"),
        (
            vec!["train", "--dataset", "synthetic-digits", "--train-size", "64", "--normalize", "imagenet"],
            "--normalize imagenet: imagenet normalisation is for colour (3-channel) images, and synthetic-digits images have 1 channel",
        ),
        (
            vec!["train", "--dataset", "synthetic-digits", "--train-size", "64", "--normalize", "0.1,0.2/0.3"],
            "--normalize 0.1,0.2/0.3: 0.1,0.2/0.3: 2 mean values for synthetic-digits images of 1 channel",
        ),
        (vec!["experiment", "tta", "--sync", "sma,hogwild", "--out", &tta_out], "unknown synchroniser 'hogwild'"),
    ] {
        let (code, _out, err) = crossbow(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // One line (clap adds a "For more information, try '--help'" hint to its own errors).
        let lines = err.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("For more information")).count();
        assert_eq!(lines, 1, "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&tta_out).ok();
}

#[test]
fn cuda_without_a_driver_is_a_clear_error() {
    if crossbow_kernels::cuda::device_count().is_ok() {
        eprintln!("skipped: this machine has a CUDA driver");
        return;
    }
    for devices in ["cuda", "cuda:0"] {
        let (code, _out, err) = crossbow(&["train", "--devices", devices, "--epochs", "0.01"]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("--devices") && (err.contains("no CUDA driver") || err.contains("without CUDA")), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // auto falls back to the CPU and says so.
    let (code, _out, err) = crossbow(&[
        "train",
        "--devices",
        "auto",
        "--epochs",
        "0.02",
        "--train-size",
        "500",
        "--test-size",
        "100",
        "--learners-per-device",
        "1",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("--devices auto") && err.contains("using the CPU"), "{err}");
}

#[test]
fn corrupt_dataset_files_are_reported_with_their_name() {
    let dir = std::env::temp_dir().join(format!("crossbow-bad-mnist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    {
        std::fs::write(dir.join(f), [0u8, 0, 8, 3, 0, 0]).unwrap();
    }
    let (code, _out, err) =
        crossbow(&["train", "--dataset", "mnist", "--data-dir", dir.to_str().unwrap(), "--devices", "cpu"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("train-images-idx3-ubyte") || err.contains("idx"), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn models_command_prints_resnet32_parameters() {
    let (code, out, err) = crossbow(&["models", "--model", "resnet32"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("466906 (0.467 M)"), "{out}");
}

/// Started by a launcher as one of several ranks, a crossbow built without MPI refuses to
/// train alone on all the data, and says how to build it.
#[cfg(not(feature = "mpi"))]
#[test]
fn ranks_of_a_build_without_mpi_are_refused() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_crossbow"))
        .args(["train", "--epochs", "0.01"])
        .env("OMPI_COMM_WORLD_RANK", "1")
        .env("OMPI_COMM_WORLD_SIZE", "2")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("rank 1 of 2 started by Open MPI") && err.contains("--features mpi"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Issue 22, item 4: `crossbow train --help` says which synchroniser each kind of model gets.
#[test]
fn train_help_says_which_synchroniser_is_the_default() {
    let (code, out, err) = crossbow(&["train", "--help"]);
    assert_eq!(code, 0, "{err}");
    let flat = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("[default: ssgd, for every model]"), "{out}");
}

/// `--diagnostics`: every evaluation carries the learners' spread (whole model and per
/// layer), their own accuracies and the central model's step and drift; the run's
/// parameters are the same bits as without it (it only reads).
#[test]
fn diagnostics_measure_every_learner_and_change_nothing() {
    let base = TrainFile {
        learners_per_device: Some("3".into()),
        epochs: Some(1.0),
        sync: Some("sma".into()),
        ..TrainFile::default()
    };
    let with = config(base.clone().overridden_by(TrainFile { diagnostics: Some(true), ..TrainFile::default() }));
    let s = train(&with, &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap();
    let plain = train(&config(base), &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap();
    assert_eq!(s.evaluations.len(), plain.evaluations.len());
    for (i, (a, b)) in s.evaluations.iter().zip(&plain.evaluations).enumerate() {
        assert_eq!(a.test_loss.to_bits(), b.test_loss.to_bits(), "evaluation {i}");
        assert!(b.diagnostics.is_none());
        let d = a.diagnostics.as_ref().unwrap();
        assert_eq!((d.spread.len(), d.learner_accuracy.len()), (3, 3));
        assert!(d.spread.iter().all(|x| *x > 0.0 && *x < 1.0), "{d:?}");
        // LeNet-5: conv1, conv2, fc1, fc2, fc3.
        assert_eq!(d.spread_layers.len(), 5, "{d:?}");
        assert!(d.learner_accuracy.iter().all(|a| (0.0..=1.0).contains(a)));
        assert!(d.central_step.is_some_and(|x| x > 0.0));
        assert_eq!(d.central_drift.is_some(), i > 0, "{d:?}");
    }
}

#[test]
fn the_tuners_probing_cost_is_measured_from_its_layouts() {
    // The tuner starts at one learner and tries more: the summary keeps each layout's step
    // time, and the probing cost is the layouts left against the one kept.
    let cfg = config(TrainFile { learners_per_device: Some("auto".into()), epochs: Some(1.0), ..TrainFile::default() });
    let s = train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).expect("training runs");
    let p = s.probing.as_ref().expect("the tuner tried more than one learner count");
    assert!(p.layouts.len() >= 2, "{p:?}");
    assert_eq!(p.layouts[0].learners, vec![1], "the tuner starts at one learner: {p:?}");
    assert_eq!(p.final_learners, s.learners);
    assert_eq!(p.layouts.iter().map(|l| l.iterations).sum::<u64>(), s.iterations);
    let kept = p.layouts.iter().find(|l| l.learners == s.learners).expect("the final layout ran");
    let others: Vec<_> = p.layouts.iter().filter(|l| l.learners != s.learners).collect();
    assert_eq!(p.probe_iterations, others.iter().map(|l| l.iterations).sum::<u64>());
    let rate = kept.images as f64 / kept.seconds;
    let extra: f64 = others.iter().map(|l| l.seconds - l.images as f64 / rate).sum();
    assert!((p.extra_seconds - extra).abs() < 1e-9, "{} vs {extra}", p.extra_seconds);
    // Step time excludes waiting for input, so the layouts add up to the steps phase.
    let steps: f64 = p.layouts.iter().map(|l| l.seconds).sum();
    assert!((steps - s.phases.steps).abs() <= 1e-6 + 1e-6 * steps, "{steps} vs {}", s.phases.steps);

    // With a fixed learner count nothing is probed.
    let cfg = config(TrainFile { learners_per_device: Some("2".into()), epochs: Some(0.5), ..TrainFile::default() });
    let s = train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).expect("training runs");
    assert!(s.probing.is_none(), "{:?}", s.probing);
}

/// `--global-batch-size` under S-SGD: the learners split each iteration's images, so one,
/// two and four learners train the same model (LeNet-5 has no batch norm: to rounding), each
/// iteration takes the global batch, and the tuner, choosing among the counts that divide
/// it, changes the speed and not the curve. (Half an epoch: later, while the loss falls
/// fastest, rounding differences grow as they do between one learner on one thread and on
/// two, measured at 1.7% of the test loss one epoch in.)
#[test]
fn a_global_batch_trains_the_same_model_at_any_learner_count() {
    let run = |learners: &str, global: Option<usize>| {
        let cfg = config(TrainFile {
            global_batch_size: global,
            batch_size: global.is_none().then_some(64),
            learners_per_device: Some(learners.into()),
            epochs: Some(0.5),
            eval_every: Some(0.25),
            lr: Some(0.05),
            threads: Some(2),
            ..TrainFile::default()
        });
        train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap()
    };
    let one = run("1", Some(64));
    assert!(one.evaluations[1].test_loss < 2.2, "it learns: {:?}", one.evaluations);
    let close = |s: &crossbow_cli::report::Summary| {
        one.evaluations.iter().zip(&s.evaluations).all(|(a, b)| (a.test_loss - b.test_loss).abs() / a.test_loss < 2e-3)
    };
    for k in ["2", "4", "auto"] {
        let s = run(k, Some(64));
        assert_eq!(s.iterations, one.iterations, "{k}: an iteration is the global batch");
        assert!(close(&s), "{k} learners: {:?} against one learner's {:?}", s.evaluations, one.evaluations);
        assert!(s.learners.iter().all(|&m| 64usize.is_multiple_of(m)), "{k}: {:?}", s.learners);
    }
    // The control: two learners of 64 each (an aggregate of 128) train another model.
    let other = run("2", None);
    assert!(!close(&other), "{:?} against {:?}", other.evaluations, one.evaluations);
    // A count that does not divide it is refused before anything runs.
    let cfg = config(TrainFile {
        global_batch_size: Some(64),
        learners_per_device: Some("3".into()),
        ..TrainFile::default()
    });
    let e = train(&cfg, &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap_err().to_string();
    assert!(e.contains("--global-batch-size 64 does not divide into equal batches for 3 learner(s)"), "{e}");
}
