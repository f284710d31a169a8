//! Lose nothing, round two (issue 50): the reproductions a hostile tester found, each through
//! the real binary — metrics files that overwrote checkpoints, two processes in one live
//! folder, a copied folder appending to the original's metrics, a checkpoint taken by its
//! file name, a higher rate on resume.

// Test helpers: a failure to run the binary or read its files should fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_crossbow");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("crossbow-lose-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A short LeNet-5 run on 2,000 built-in digits, with `extra` flags.
fn args(extra: &[&str]) -> Vec<String> {
    sized("2000", "0.5", extra)
}

/// A LeNet-5 run on `train` built-in digits for `epochs`, with `extra` flags.
fn sized(train: &str, epochs: &str, extra: &[&str]) -> Vec<String> {
    ["train", "--devices", "cpu", "--threads", "2", "--learners-per-device", "2", "--train-size", train]
        .iter()
        .chain(["--test-size", "300", "--epochs", epochs, "-q"].iter())
        .chain(extra.iter())
        .map(|s| s.to_string())
        .collect()
}

fn run(a: &[String]) -> Output {
    Command::new(BIN).args(a).output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Runs `a`, expects exit 2 with `needle` in a one-line error, and returns the error.
#[track_caller]
fn refused(a: &[String], needle: &str) -> String {
    let o = run(a);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{a:?}: {t}");
    assert!(t.contains(needle), "{a:?}: {t}");
    let err: Vec<&str> = t.lines().filter(|l| l.contains("error")).collect();
    assert_eq!(err.len(), 1, "{t}");
    t
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

fn checkpoints(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return vec![] };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("ckpt-"))
        .collect();
    v.sort();
    v
}

/// Item 1: `--metrics` never overwrites a checkpoint, an export, a config, a link, or another
/// run's metrics; a resumed run appends to its own.
#[test]
fn metrics_never_overwrite_what_is_not_this_runs_metrics() {
    let d = tmp("metrics");
    let ck = d.join("mv");
    let m = d.join("m.jsonl");
    let o = run(&args(&["--checkpoint-dir", &s(&ck), "--metrics", &s(&m)]));
    assert!(o.status.success(), "{}", text(&o));
    let ckpt = checkpoints(&ck).pop().unwrap();
    let export = d.join("z.safetensors");
    let o = run(&["export".into(), "--checkpoint".into(), s(&ckpt), "--out".into(), s(&export)]);
    assert!(o.status.success(), "{}", text(&o));
    let toml = d.join("run.toml");
    std::fs::write(&toml, "epochs = 2\n").unwrap();
    let link = d.join("link.jsonl");
    std::os::unix::fs::symlink(&m, &link).unwrap();
    let cases: [(&Path, &str); 5] = [
        (&ckpt, "holds a crossbow checkpoint, not metrics; refusing to overwrite it"),
        (&export, "not metrics; refusing to overwrite it"),
        (&toml, "holds text that looks like a config file"),
        (&link, "is a symbolic link"),
        (&m, "holds the metrics of another run (run "),
    ];
    for (path, needle) in cases {
        let before = std::fs::read(path).unwrap();
        refused(&args(&["--metrics", &s(path)]), needle);
        assert!(std::fs::read(path).unwrap() == before, "{} changed", path.display());
    }
    // Through a config file too.
    let cfg = d.join("c.toml");
    std::fs::write(&cfg, format!("metrics = {:?}\n", s(&ckpt))).unwrap();
    refused(&args(&["--config", &s(&cfg)]), "holds a crossbow checkpoint");
    // The run's own metrics: a resume appends (the records before stay).
    let before = std::fs::read_to_string(&m).unwrap();
    let o = run(&["train".into(), "--resume".into(), s(&ck), "--epochs".into(), "0.7".into(), "-q".into()]);
    assert!(o.status.success(), "{}", text(&o));
    let after = std::fs::read_to_string(&m).unwrap();
    assert!(after.starts_with(&before) && after.len() > before.len());
    std::fs::remove_dir_all(&d).ok();
}

/// Item 2: two processes never use one live checkpoint folder or metrics file: the second is
/// refused naming the first's process; the lock goes with the first (even `kill -9`).
#[test]
fn two_runs_never_share_a_live_folder() {
    let d = tmp("dual");
    let ck = d.join("dual");
    let m = d.join("dual.jsonl");
    let long = sized("20000", "50", &["--checkpoint-dir", &s(&ck), "--checkpoint-every", "20", "--metrics", &s(&m)]);
    let mut first = Command::new(BIN).args(&long).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let t0 = Instant::now();
    while checkpoints(&ck).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(120), "no checkpoint");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = format!("process {}", first.id());
    let resume = |extra: &[&str]| -> Vec<String> {
        ["train", "--resume", &s(&ck), "--lr", "0.001", "-q"].iter().chain(extra).map(|s| s.to_string()).collect()
    };
    // Resuming the live folder (with its metrics, or with metrics of its own).
    refused(&resume(&[]), &pid);
    let e = refused(&resume(&["--metrics", &s(&d.join("other.jsonl"))]), "in use by another crossbow run");
    assert!(e.contains(&pid), "{e}");
    // A new run sharing the folder, or writing the same metrics.
    refused(&args(&["--checkpoint-dir", &s(&ck), "--share-checkpoint-dir", "--metrics", &s(&d.join("n.jsonl"))]), &pid);
    refused(&args(&["--metrics", &s(&m)]), "the metrics of another run");
    let _ = first.kill();
    let _ = first.wait();
    // The lock went with the process: the folder resumes now.
    let o = run(&["train".into(), "--resume".into(), s(&ck), "--epochs".into(), "0.2".into(), "-q".into()]);
    assert!(o.status.success() || text(&o).contains("nothing left to do"), "{}", text(&o));
    std::fs::remove_dir_all(&d).ok();
}

/// Item 4: a copy of a checkpoint folder, resumed, writes its own metrics beside itself and
/// leaves the original run's file as it was.
#[test]
fn a_copied_folder_writes_its_own_metrics() {
    let d = tmp("copy");
    let (ck, m) = (d.join("mv"), d.join("mv.jsonl"));
    let o = run(&args(&["--checkpoint-dir", &s(&ck), "--metrics", &s(&m)]));
    assert!(o.status.success(), "{}", text(&o));
    let copy = d.join("mv2");
    std::fs::create_dir_all(&copy).unwrap();
    for f in checkpoints(&ck) {
        std::fs::copy(&f, copy.join(f.file_name().unwrap())).unwrap();
    }
    let before = std::fs::read(&m).unwrap();
    let o = run(&["train".into(), "--resume".into(), s(&copy), "--epochs".into(), "0.8".into(), "-q".into()]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("this copy writes its own"), "{}", text(&o));
    assert!(std::fs::read(&m).unwrap() == before, "the original run's metrics changed");
    let own = std::fs::read_to_string(copy.join("metrics.jsonl")).unwrap();
    assert!(own.contains("\"event\":\"resume\"") && own.contains("\"event\":\"end\""), "{own}");
    std::fs::remove_dir_all(&d).ok();
}

/// Item 5: a checkpoint is identified by its header, not its file name: another model's
/// checkpoint copied in under this run's file name is another run's, and the folder is
/// refused as holding two runs (not resumed as ResNet-20 into the LeNet-5 run's line).
#[test]
fn a_checkpoint_is_known_by_its_contents_not_its_name() {
    let d = tmp("identity");
    let (lenet, resnet) = (d.join("ln"), d.join("rn"));
    let o = run(&args(&["--checkpoint-dir", &s(&lenet)]));
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&[
        "train",
        "--model",
        "resnet20",
        "--dataset",
        "synthetic-shapes",
        "--train-size",
        "256",
        "--test-size",
        "64",
        "--epochs",
        "0.2",
        "--devices",
        "cpu",
        "-q",
        "--checkpoint-dir",
        &s(&resnet),
    ]
    .map(String::from));
    assert!(o.status.success(), "{}", text(&o));
    let ours = checkpoints(&lenet).pop().unwrap();
    let tag = ours.file_name().unwrap().to_string_lossy().rsplit('-').next().unwrap().to_string();
    let disguised = lenet.join(format!("ckpt-0000009999-{tag}"));
    std::fs::copy(checkpoints(&resnet).pop().unwrap(), &disguised).unwrap();
    let e = refused(&["train".into(), "--resume".into(), s(&lenet), "-q".into()], "holds the checkpoints of 2 runs");
    assert!(e.contains("resnet20") && e.contains("lenet5"), "{e}");
    // Naming the LeNet file: it resumes, but writing into a folder holding another run's
    // checkpoint needs --share-checkpoint-dir.
    refused(&["train".into(), "--resume".into(), s(&ours), "-q".into()], "holds the checkpoints of another run");
    std::fs::remove_dir_all(&d).ok();
}

/// Item 6: a resume may lower the rate, not raise it (which would continue the line with
/// another run and rotate the good checkpoints away).
#[test]
fn a_higher_rate_on_resume_is_refused_and_the_checkpoints_stay() {
    let d = tmp("lr");
    let ck = d.join("ck");
    let o = run(&args(&["--checkpoint-dir", &s(&ck), "--lr", "0.01"]));
    assert!(o.status.success(), "{}", text(&o));
    let before = checkpoints(&ck);
    let resume = |lr: &str| -> Vec<String> {
        ["train", "--resume", &s(&ck), "--lr", lr, "--epochs", "0.6", "-q"].map(String::from).to_vec()
    };
    refused(&resume("0.1"), "--lr 0.1 is higher than the run's 0.01");
    assert_eq!(checkpoints(&ck), before);
    let o = run(&resume("0.005"));
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_dir_all(&d).ok();
}

fn metrics(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn run_env(a: &[String], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(a);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// Item 14: a stop while checkpoints queue up (every iteration, slow writes) writes the
/// checkpoint of the iteration it stops after and skips the older one still waiting, instead
/// of writing every queued one first.
#[test]
fn a_stop_skips_the_checkpoints_still_waiting() {
    let d = tmp("stop-queue");
    let (ck, m) = (d.join("ck"), d.join("m.jsonl"));
    let a = args(&["--checkpoint-dir", &s(&ck), "--checkpoint-every", "1", "--metrics", &s(&m)]);
    let o = run_env(&a, &[("CROSSBOW_TEST_SLOW_CHECKPOINT_MS", "400"), ("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "6")]);
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let recs = metrics(&m);
    let written: Vec<u64> =
        recs.iter().filter(|r| r["event"] == "checkpoint_written").map(|r| r["iteration"].as_u64().unwrap()).collect();
    let skipped: Vec<u64> =
        recs.iter().filter(|r| r["event"] == "checkpoint_skipped").map(|r| r["iteration"].as_u64().unwrap()).collect();
    assert_eq!(written.last(), Some(&6), "{written:?}");
    assert!(!skipped.is_empty() && skipped.iter().all(|i| *i < 6), "skipped {skipped:?}, written {written:?}");
    assert!(text(&o).contains("checkpoint written to"), "{}", text(&o));
    std::fs::remove_dir_all(&d).ok();
}

/// Item 15: a full disk is said once (then counted), and the end says the final checkpoint
/// failed, naming the last good one, instead of "final checkpoint: <the last written>".
#[test]
fn a_full_disk_is_said_once_and_the_end_says_the_final_write_failed() {
    let d = tmp("full-disk");
    let ck = d.join("ck");
    let a = args(&["--checkpoint-dir", &s(&ck), "--checkpoint-every", "2"]);
    let o = run_env(&a, &[("CROSSBOW_FAULT_CHECKPOINT_WRITE", "2")]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches("failed: ").count(), 1, "{t}");
    assert!(t.contains("further failures are counted, not repeated"), "{t}");
    assert!(!t.contains("final checkpoint: "), "{t}");
    assert!(t.contains("the final checkpoint (iteration") && t.contains("could not be written ("), "{t}");
    assert!(t.contains("the last good one is") && t.contains("(iteration 2)"), "{t}");
    std::fs::remove_dir_all(&d).ok();
}

/// Item 23: each Ctrl-C is answered at once: the first says the run stops after this
/// iteration, the second (exiting at once) which checkpoint survives and how to resume it.
#[test]
fn a_second_ctrl_c_says_which_checkpoint_survives() {
    let d = tmp("second-signal");
    let ck = d.join("ck");
    let a = sized("40000", "20", &["--checkpoint-dir", &s(&ck), "--checkpoint-every", "20"]);
    let child = Command::new(BIN)
        .args(&a)
        .env("CROSSBOW_TEST_SLOW_CHECKPOINT_MS", "3000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while checkpoints(&ck).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(120), "no checkpoint");
        std::thread::sleep(Duration::from_millis(50));
    }
    let kill = || Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    assert!(kill().success());
    std::thread::sleep(Duration::from_millis(300));
    assert!(kill().success());
    let o = child.wait_with_output().unwrap();
    let t = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(130), "{t}");
    assert!(t.contains("stopping after this iteration, then writing a checkpoint"), "{t}");
    let survivor = s(&checkpoints(&ck).pop().unwrap());
    assert!(t.contains("exited at once on a second signal; every checkpoint on disk is whole"), "{t}");
    assert!(t.contains(&format!("resume with: crossbow train --resume {survivor}")), "{t}");
    std::fs::remove_dir_all(&d).ok();
}

/// Items 10, 11, 17, 19, 21 and the cosmetic ones: messages a user can act on, one line each.
#[test]
fn messages_a_user_can_act_on() {
    let d = tmp("messages");
    let small = |extra: &[&str]| sized("2000", "0.05", extra);
    // 10: settings a synchroniser does not use are refused, naming who uses them.
    refused(&small(&["--sync", "ssgd", "--alpha", "0.5"]), "--alpha is not a setting of --sync ssgd");
    refused(&small(&["--sync", "ssgd", "--sma-form", "paper"]), "sma uses it");
    refused(&small(&["--sync", "independent", "--central-momentum", "0"]), "--central-momentum is not a setting");
    // 17: cpu:0 is explained.
    refused(&["train".into(), "--devices".into(), "cpu:0".into()], "cpu:N is the number of CPU devices, at least 1");
    // 19: control characters are escaped, the error stays one line.
    let e = refused(&small(&["--sync", "x\u{1b}[31m\nred"]), "unknown synchroniser");
    assert!(e.contains("\\u{1b}") && !e.contains('\u{1b}'), "{e}");
    // 21: bench --json refuses a folder before measuring anything.
    let t0 = Instant::now();
    refused(&["bench".into(), "--json".into(), s(&d), "--model".into(), "resnet20".into()], "is a folder");
    assert!(t0.elapsed() < Duration::from_secs(20));
    // 21: models: a model that cannot take the size is a row, the rest of the table stays;
    // --image-size means colour images.
    let o = run(&["models", "--image-size", "8"].map(String::from));
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("| lenet5 | cannot take [3, 8, 8]") && out.contains("| resnet20 | [3, 8, 8] |"), "{out}");
    let o = run(&["models", "--image-size", "64", "--model", "lenet5"].map(String::from));
    assert!(String::from_utf8_lossy(&o.stdout).contains("| lenet5 | [3, 64, 64] |"), "{}", text(&o));
    // 11: --dry-run builds the model for the folder's classes (3, not 10).
    for c in ["a", "b", "c"] {
        std::fs::create_dir_all(d.join("f/train").join(c)).unwrap();
        std::fs::create_dir_all(d.join("f/val").join(c)).unwrap();
    }
    let o = run(&["train", "--dataset", "folder", "--data-dir", &s(&d.join("f")), "--image-size", "32", "--model"]
        .iter()
        .chain(["resnet20", "--dry-run"].iter())
        .map(|x| x.to_string())
        .collect::<Vec<_>>());
    assert!(String::from_utf8_lossy(&o.stdout).contains("| resnet20 | [3, 32, 32] | 3 | 272019 "), "{}", text(&o));
    // Cosmetic: LeNet-5 has no batch norm to describe, no internal names, no "1 learners".
    let loud: Vec<String> = ["train", "--devices", "cpu", "--learners-per-device", "1", "--train-size", "2000"]
        .iter()
        .chain(["--test-size", "300", "--epochs", "0.1"].iter())
        .map(|x| x.to_string())
        .collect();
    let o = run(&loud);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(!t.contains("batch-norm evaluation") && !t.contains("alpha_default_1_over_k"), "{t}");
    assert!(!t.contains("1 learners") && !t.contains(" 1 iterations"), "{t}");
    // 8, with the tuner: it never adds learners past an iteration of one epoch (100 images at
    // batch 32: 3 learners at most).
    let o =
        run(&["train", "--devices", "cpu", "--train-size", "100", "--test-size", "50", "--epochs", "1"]
            .map(String::from));
    assert!(text(&o).contains("tuner picks up to 3)"), "{}", text(&o));
    // doctor gives no NVRTC install advice where there is no GPU.
    let o = run(&["doctor".to_string()]);
    if text(&o).contains("no CUDA driver found") {
        assert!(!text(&o).contains("pip wheel"), "{}", text(&o));
    }
    std::fs::remove_dir_all(&d).ok();
}
