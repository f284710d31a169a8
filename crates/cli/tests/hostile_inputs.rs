//! The reliability issue, end to end: runs that cannot fit are refused before anything is
//! allocated, with the numbers; bad values are one-line errors (exit code 2) naming the flag
//! or the config file and key; a metrics file is never emptied by a run that fails to start;
//! epoch limits end at the right iteration and the final accuracy is measured; CPU runs say
//! one short line about the missing GPU; the tuner logs one line per decision.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crossbow_cli::SyncRegistry;
use crossbow_cli::config::{TrainConfig, TrainFile};
use crossbow_cli::preflight::{MemoryAsk, memory_needs};
use crossbow_cli::report::Reporter;
use crossbow_cli::train::{build_graph, load_data, train};
use crossbow_kernels::CpuBackend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_replica::engine::{CpuDevices, DeviceFactory, Engine, EngineConfig};
use crossbow_replica::sync::HostAllReduce;

#[allow(clippy::expect_used)] // Test helper: failing to start the binary should fail the test.
fn crossbow(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_crossbow")).args(args).output().expect("run crossbow");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// A small, fast run on the CPU.
const TINY: &[&str] = &["train", "--devices", "cpu", "--train-size", "600", "--test-size", "100", "--epochs", "0.05"];

fn tiny(extra: &[&str]) -> Vec<String> {
    TINY.iter().chain(extra).map(|s| s.to_string()).collect()
}

/// Exit code 2, one line saying `needle`, no panic.
fn refused(args: &[String], needle: &str) -> String {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _out, err) = crossbow(&args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert!(err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    let lines = err.lines().filter(|l| !l.trim().is_empty() && !l.starts_with("For more information")).count();
    assert_eq!(lines, 1, "{args:?}: {err}");
    err
}

#[allow(clippy::unwrap_used)] // Test helper: a temporary directory that cannot be made fails the test.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crossbow-reliability-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn runs_that_cannot_fit_are_refused_before_allocating() {
    let t0 = Instant::now();
    let err = refused(&tiny(&["--learners-per-device", "100000000"]), "--learners-per-device 100000000 needs ");
    assert!(err.contains(" GB on cpu:0 (100000000 learners x ") && err.contains("memory budget of"), "{err}");
    refused(
        &tiny(&["--batch-size", "1000000"]),
        "--batch-size 1000000 is larger than the synthetic-digits train set (600 images)",
    );
    refused(&tiny(&["--batch-size", &usize::MAX.to_string()]), "is larger than the synthetic-digits train set");
    // Learners that fit but whose batches together are more than the training set (issue 50).
    refused(
        &tiny(&["--learners-per-device", "40"]),
        "--learners-per-device 40 x --batch-size 32 = 1280 images per iteration (on 1 device) is more than the synthetic-digits train set (600 images)",
    );
    // Refused before anything was allocated: no time spent growing.
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    let (code, _out, err) = crossbow(&["models", "--model", "lenet5", "--batch-size", &usize::MAX.to_string()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(&format!("--batch-size {}: batch size", usize::MAX)) && err.contains("too large"), "{err}");
    // An evaluation batch larger than the test set is the whole test set.
    let args = tiny(&["--eval-batch-size", "1000000000", "--learners-per-device", "1"]);
    let (code, out, err) = crossbow(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("final "), "{out}");
}

#[test]
fn bad_values_are_refused_before_training() {
    for (flag, value, needle) in [
        ("--lr", "NaN", "--lr must be a positive number, got NaN"),
        ("--lr", "inf", "--lr must be a positive number, got inf"),
        ("--momentum", "NaN", "--momentum must be in [0, 1), got NaN"),
        ("--momentum", "1", "--momentum must be in [0, 1), got 1"),
        ("--weight-decay", "NaN", "--weight-decay must be a number >= 0, got NaN"),
        ("--weight-decay", "inf", "--weight-decay must be a number >= 0, got inf"),
        (
            "--weight-decay",
            "1e10",
            "--weight-decay must be in [0, 1] (typical values are 1e-5 to 1e-3), got 10000000000",
        ),
        ("--normalize", "0.5/1e-40", "std 1e-40 is below 0.001"),
        // Item 12: a target of 0 is no target.
        ("--target-accuracy", "0", "--target-accuracy must be in (0, 1] or a percentage in (1, 100], got 0"),
        ("--batch-size", "0", "--batch-size must be at least 1, got 0"),
        ("--threads", "100000", "--threads 100000: at most 1024 threads per device"),
    ] {
        refused(&tiny(&[flag, value]), needle);
    }
    // SMA's own settings (with --sync sma: the default synchroniser is S-SGD).
    for (flag, value, needle) in [
        ("--central-momentum", "NaN", "--central-momentum must be in [0, 1), got NaN"),
        ("--alpha", "inf", "--alpha must be a finite number in [0, 1], got inf"),
        // Issue 50, item 16: values that can only diverge are refused up front.
        ("--alpha", "5", "--alpha (the pull towards the central model) must be in [0, 1], got 5"),
    ] {
        refused(&tiny(&["--sync", "sma", flag, value]), needle);
    }
    // One CPU device more than this machine has cores.
    let too_many = format!("cpu:{}", crossbow_cli::dispatch::cores() + 1);
    let args: Vec<String> = ["train", "--devices", &too_many].map(String::from).to_vec();
    refused(&args, &format!("--devices {too_many}: this machine has {} core", crossbow_cli::dispatch::cores()));
}

#[test]
fn a_metrics_file_is_checked_first_and_never_emptied_by_a_run_that_fails_to_start() {
    let dir = temp_dir("metrics");
    let existing = dir.join("old.jsonl");
    std::fs::write(&existing, "{\"event\":\"end\"}\n").unwrap();
    let path = existing.to_string_lossy().into_owned();
    // Another run's metrics are refused before anything else, and stay as they are (issue 50:
    // a fresh run used to truncate them).
    refused(&tiny(&["--metrics", &path]), "holds the metrics of another run");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "{\"event\":\"end\"}\n");
    // The run fails in its checks, after the metrics file was opened: an empty file given
    // for it stays.
    let empty = dir.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    refused(&tiny(&["--metrics", &empty.to_string_lossy(), "--batch-size", "1000000"]), "larger than");
    assert!(empty.exists());
    // A new file for a run that fails to start is not left behind.
    let new = dir.join("new.jsonl");
    refused(&tiny(&["--metrics", &new.to_string_lossy(), "--batch-size", "1000000"]), "larger than");
    assert!(!new.exists());
    // Unwritable paths are refused before training, naming the flag and the path.
    let missing = dir.join("no/such/dir/m.jsonl").to_string_lossy().into_owned();
    refused(&tiny(&["--metrics", &missing]), &format!("--metrics {missing}: cannot write"));
    refused(&tiny(&["--metrics", &dir.to_string_lossy()]), "cannot write");
    // A run that starts writes into the empty file.
    let args = tiny(&["--metrics", &empty.to_string_lossy(), "--learners-per-device", "1"]);
    let (code, _out, err) = crossbow(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&empty).unwrap();
    let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(first["event"], "start", "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

#[allow(clippy::expect_used)] // Test helper: an invalid config should fail the test.
fn config(f: TrainFile) -> TrainConfig {
    let base =
        TrainFile { devices: Some("cpu".into()), train_size: Some(2000), test_size: Some(200), ..TrainFile::default() };
    TrainConfig::from_file(base.overridden_by(f)).expect("valid config")
}

#[test]
fn epoch_limits_end_at_the_right_iteration_and_the_final_accuracy_is_measured() {
    let run = |f: TrainFile| train(&config(f), &SyncRegistry::builtin(), &mut Reporter::silent()).unwrap();
    // 2 learners x 1000 images on 2000 images: one iteration is an epoch, so --epochs 0.5
    // runs that one iteration (not none, nor two). More per iteration than the training set
    // is refused (issue 50).
    let s = run(TrainFile {
        batch_size: Some(1000),
        learners_per_device: Some("2".into()),
        epochs: Some(0.5),
        ..TrainFile::default()
    });
    assert_eq!(s.iterations, 1);
    assert!((s.epochs - 1.0).abs() < 1e-9, "{}", s.epochs);
    let e = train(
        &config(TrainFile { batch_size: Some(1000), learners_per_device: Some("4".into()), ..TrainFile::default() }),
        &SyncRegistry::builtin(),
        &mut Reporter::silent(),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("4000 images per iteration") && e.contains("more than the synthetic-digits train set"), "{e}");
    // A limit below one iteration: one iteration, evaluated.
    let s = run(TrainFile { epochs: Some(1e-9), learners_per_device: Some("1".into()), ..TrainFile::default() });
    assert_eq!(s.iterations, 1);
    assert_eq!(s.evaluations.len(), 1);
    assert_eq!(s.evaluations[0].iteration, 1);
    assert!(s.final_accuracy > 0.0 && s.final_accuracy == s.best_accuracy, "{} {}", s.final_accuracy, s.best_accuracy);
    // 1984 images per epoch (62 batches of 32), 3 learners: 0.25 epochs is 5.17
    // iterations, so 5; the end of the run is evaluated although no evaluation was due.
    let s = run(TrainFile { epochs: Some(0.25), learners_per_device: Some("3".into()), ..TrainFile::default() });
    assert_eq!(s.iterations, 5);
    assert_eq!(s.evaluations.iter().map(|e| e.iteration).collect::<Vec<_>>(), [5]);
    assert_eq!(s.final_accuracy, s.evaluations[0].test_accuracy);
    // The command line says what was run.
    let (code, _out, err) =
        crossbow(&["train", "--devices", "cpu", "--train-size", "600", "--test-size", "100", "--epochs", "1e-9"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(
            "--epochs 0.000000001 is less than one iteration (32 images, 0.056 epochs); ran that one iteration"
        ),
        "{err}"
    );
}

#[test]
fn the_memory_check_uses_the_engines_own_figures() {
    let cfg = config(TrainFile { learners_per_device: Some("3".into()), ..TrainFile::default() });
    let data = load_data(&cfg).unwrap();
    let graph = build_graph(&cfg, &data).unwrap();
    let factory = CpuDevices { count: 1, threads: 2 };
    let be = factory.learner_backend(0, 3).unwrap();
    let sync = SyncRegistry::builtin().build_for(&cfg).unwrap().cpu();
    // The plan the check measures is the one the engine then runs (lowered once).
    let plan = crossbow_cli::preflight::train_plan(&graph, cfg.batch_size).unwrap();
    let ask = MemoryAsk {
        batch: cfg.batch_size,
        eval_batch: cfg.eval_batch_size.min(data.test.len()),
        test_len: data.test.len(),
        recalibrate: None,
        learner_buffers: sync.learner_buffers(),
        device_buffers: sync.device_buffers(),
        image_len: data.train.image_shape().iter().product(),
        max_learners: 3,
        workers: cfg.workers,
    };
    let needs = memory_needs(&be, &graph, &plan, &ask).unwrap();
    let ecfg = EngineConfig {
        batch_size: cfg.batch_size,
        sgd: SgdConfig { lr: 0.01, momentum: 0.9, weight_decay: 0.0, nesterov: false },
        schedule: cfg.schedule.clone(),
        seed: 1,
        eval_batch_size: cfg.eval_batch_size,
    };
    let world: std::sync::Arc<dyn crossbow_replica::ProcessGroup> = std::sync::Arc::new(crossbow_replica::Solo);
    let engine: Engine<CpuBackend> =
        Engine::in_world_planned(graph, plan, ecfg, Box::new(factory), sync, Box::new(HostAllReduce), &[3], world)
            .unwrap();
    let fp = engine.footprint();
    assert_eq!(needs.per_learner, fp.bytes_per_learner);
    assert_eq!(needs.fixed_per_device, fp.fixed_bytes_per_device);
    assert!(needs.evaluation > 0 && needs.pipeline > 0);
}

#[allow(clippy::unwrap_used)] // Test helper: a file that cannot be written fails the test.
fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn config_files_take_whole_numbers_and_errors_name_the_file_and_key() {
    let dir = temp_dir("toml");
    let ok = write(&dir, "ok.toml", "learners-per-device = 2\nepochs = 1\nschedule = \"multistep:1,2\"\n");
    let (code, out, err) = crossbow(&["train", "--config", &ok, "--dry-run"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("\"learners-per-device\": 2,") && out.contains("\"schedule\": \"multistep:1,2:0.1\""),
        "{out}"
    );
    assert!(!out.contains("Fixed") && !out.contains("\"kind\""), "{out}");
    let bad = write(&dir, "bad.toml", "learners-per-device = 0\n");
    refused(
        &["train".into(), "--config".into(), bad.clone()],
        &format!("config file {bad}: learners-per-device: must be"),
    );
    let nan = write(&dir, "nan.toml", "lr = nan\n");
    refused(
        &["train".into(), "--config".into(), nan.clone()],
        &format!("config file {nan}: lr must be a positive number, got NaN"),
    );
    let typo = write(&dir, "typo.toml", "epochs = 1\nbatch-size = \"big\"\n");
    refused(
        &["train".into(), "--config".into(), typo.clone()],
        &format!("config file {typo}: line 2, key batch-size: invalid type"),
    );
    let huge = write(&dir, "huge.toml", "learners-per-device = 100000000\ndevices = \"cpu\"\ntrain-size = 600\n");
    refused(
        &["train".into(), "--config".into(), huge.clone()],
        &format!("config file {huge}: learners-per-device 100000000 needs"),
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn cpu_runs_say_one_short_line_about_the_gpu_and_the_tuner_one_line_per_decision() {
    let args = [
        "train",
        "--devices",
        "auto",
        "--train-size",
        "2000",
        "--test-size",
        "100",
        "--epochs",
        "2",
        "--batch-size",
        "16",
    ];
    // 250 iterations: the tuner's search pools its windows to 50 ms, so on a debug build's
    // ~20 ms steps its first decision takes 20-60 iterations.
    let (code, _out, err) = crossbow(&args);
    assert_eq!(code, 0, "{err}");
    let gpu_lines: Vec<&str> = err.lines().filter(|l| l.contains("GPU") || l.contains("CUDA")).collect();
    if crossbow_kernels::cuda::device_count().is_err() {
        assert_eq!(gpu_lines.len(), 1, "{err}");
        assert!(gpu_lines[0].starts_with("--devices auto: no GPU") && gpu_lines[0].len() < 80, "{err}");
    }
    // One line per decision: `tuner device D: k learners[: N img/s [(+x% vs j)]] -> add/remove/keep: why`.
    // The run's last `tuner ` line is its probing cost, once; every other one is a decision.
    let probing: Vec<&str> = err.lines().filter(|l| l.starts_with("tuner probing: ")).collect();
    assert_eq!(probing.len(), 1, "{err}");
    let tuner: Vec<&str> =
        err.lines().filter(|l| l.starts_with("tuner ") && !l.starts_with("tuner probing: ")).collect();
    assert!(!tuner.is_empty(), "{err}");
    for l in &tuner {
        let (head, tail) = l.split_once(" -> ").unwrap_or_else(|| panic!("{l}"));
        assert!(head.starts_with("tuner device 0: ") && head.contains(" learner"), "{l}");
        assert!(["add", "remove", "keep"].iter().any(|a| tail.starts_with(a)), "{l}");
    }
    assert!(tuner[0].starts_with("tuner device 0: 1 learner: ") && tuner[0].contains(" img/s -> add"), "{err}");
    // No two lines for the same decision.
    for w in tuner.windows(2) {
        assert_ne!(w[0], w[1], "{err}");
    }
    let (code, _out, err) =
        crossbow(&tiny(&["--learners-per-device", "1"]).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("GPU") && !err.contains("CUDA"), "--devices cpu says nothing about GPUs: {err}");
}

/// Issue 26, items 6 and 13: settings out of any sane range are refused up front, quickly,
/// naming the flag; nothing hangs or panics.
#[test]
fn out_of_range_settings_are_refused_at_once() {
    let t0 = Instant::now();
    refused(&tiny(&["--eval-every", "1e-300"]), "--eval-every 1e-300 is below 0.000001 epochs");
    refused(&tiny(&["--lr", "1e-50"]), "--lr 1e-50 is too small");
    refused(&["train", "--epochs", "1e300"].map(String::from), "--epochs must be at most 1000000, got 1e300");
    let dir = temp_dir("ranges");
    let ck = dir.join("ck").display().to_string();
    refused(&tiny(&["--checkpoint-dir", &ck, "--checkpoint-every", "1e18m"]), "at most 1000000 minutes");
    refused(&tiny(&["--checkpoint-dir", &ck, "--max-rollbacks", "100000"]), "--max-rollbacks must be at most 100");
    refused(&["train", "--model", "resnet20000", "--dry-run"].map(String::from), "go up to depth 1202");
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    // A 1 MB value is not echoed back whole.
    let long = "x".repeat(1 << 20);
    let cfg = write(&dir, "long.toml", &format!("model = \"{long}\"\n"));
    let err = refused(&["train", "--config", &cfg].map(String::from), "unknown model");
    assert!(err.len() < 2000, "{} bytes of error", err.len());
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 26, item 13: a config file may hold any setting the flags take, the checkpoint and
/// divergence ones included.
#[test]
fn config_files_take_the_checkpoint_settings() {
    let dir = temp_dir("ckpt-toml");
    let ck = dir.join("ck");
    let cfg = write(
        &dir,
        "run.toml",
        &format!(
            "checkpoint-dir = {:?}\ncheckpoint-every = \"3\"\nkeep-checkpoints = 2\non-divergence = \"rollback\"\nmax-rollbacks = 2\ncheckpoint-errors = \"warn\"\n",
            ck.display().to_string()
        ),
    );
    let mut args = tiny(&["--config", &cfg, "--learners-per-device", "1"]);
    args.push("-q".into());
    let (code, _out, err) = crossbow(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    let n = std::fs::read_dir(&ck)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ckpt-"))
        .count();
    assert_eq!(n, 2, "keep-checkpoints = 2 from the file");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 26, item 13: a checkpoint whose iteration was forged to 2^64 - 1 (checksum and all)
/// is refused by name instead of wrapping round.
#[test]
fn a_forged_iteration_count_is_refused() {
    use crossbow_replica::checkpoint::CheckpointFile;
    let dir = temp_dir("forged");
    let ck = dir.join("ck").display().to_string();
    let args = tiny(&["--checkpoint-dir", &ck, "--learners-per-device", "1", "-q"]);
    let (code, _out, err) = crossbow(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    let file = std::fs::read_dir(&ck).unwrap().flatten().map(|e| e.path()).next().unwrap();
    let mut f = CheckpointFile::read(&file).unwrap();
    f.state["engine"]["iteration"] = serde_json::json!(u64::MAX);
    f.write_atomic(&file).unwrap();
    let err = refused(&["train", "--resume", &file.display().to_string()].map(String::from), "out of range");
    assert!(err.contains("18446744073709551615") && err.contains(&file.display().to_string()), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Issue 26, item 6: a signal during start-up (here while a large synthetic set is being
/// generated) stops the run promptly with 130, before or right after the first iteration.
#[test]
fn a_signal_during_start_up_is_honoured() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_crossbow"))
        .args(["train", "--devices", "cpu", "--train-size", "300000", "--test-size", "100", "--epochs", "5"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let out = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the run ignored SIGINT during start-up");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(out.code(), Some(130));
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("stopped by SIGINT"), "{err}");
}

/// Issue 26, item 7: export never replaces a device, a checkpoint or anything else it should
/// not; a bad output path is exit 2; the same checkpoint gives the same bytes.
#[test]
fn export_refuses_destructive_targets_and_is_deterministic() {
    let dir = temp_dir("export-targets");
    let ck = dir.join("ck").display().to_string();
    let mut args = tiny(&[
        "--checkpoint-dir",
        &ck,
        "--learners-per-device",
        "1",
        "-q",
        "--keep-checkpoints",
        "3",
        "--checkpoint-every",
        "2",
    ]);
    let i = args.iter().position(|s| s == "--epochs").unwrap();
    args[i + 1] = "0.3".into();
    let (code, _out, err) = crossbow(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{err}");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&ck).unwrap().flatten().map(|e| e.path()).collect();
    files.sort();
    assert!(files.len() >= 2);
    let export = |out: &str| -> Vec<String> {
        ["export", "--checkpoint", &files[files.len() - 1].display().to_string(), "--out", out]
            .map(String::from)
            .to_vec()
    };
    // Onto another checkpoint of the folder: refused, the checkpoint intact.
    let other = files[0].display().to_string();
    let before = std::fs::read(&files[0]).unwrap();
    refused(&export(&other), "is a crossbow checkpoint");
    assert!(std::fs::read(&files[0]).unwrap() == before);
    if Path::new("/dev/null").exists() {
        refused(&export("/dev/null"), "is not a regular file");
        let m = std::fs::metadata("/dev/null").unwrap();
        assert!(!m.is_file(), "/dev/null was replaced by a file");
    }
    refused(&export(&dir.join("no/such/dir/m.safetensors").display().to_string()), "does not exist");
    refused(&export(&dir.display().to_string()), "is a folder");
    // Twice the same bytes.
    let a = dir.join("a.safetensors").display().to_string();
    let b = dir.join("b.safetensors").display().to_string();
    for out in [&a, &b] {
        let (code, _out, err) = crossbow(&export(out).iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(code, 0, "{err}");
    }
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "two exports of one checkpoint differ");
    std::fs::remove_dir_all(&dir).ok();
}
