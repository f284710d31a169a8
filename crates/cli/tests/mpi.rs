//! Several processes under `mpirun` (feature `mpi`; needs Open MPI's `mpirun` on the PATH):
//! 2 ranks x 2 learners train bit-identically to 1 process with the same 4 learners, every
//! rank ends with the same central model, and a rank that is killed or stopped ends the job
//! within a bound with a message naming it.
//!
//! The single-process reference has 2 CPU devices of 2 learners each: its device sums are
//! the ranks' process totals and its host all-reduce adds the two in the order MPI does for
//! 2 ranks (`a + b == b + a` exactly), so the comparison is exact by construction (1 device
//! with 4 learners would add the 4 corrections in another order).
#![cfg(feature = "mpi")]
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers: a failure should fail the test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_crossbow")
}

/// `mpirun` as root in a container needs these; harmless otherwise.
fn mpirun(np: usize) -> Command {
    let mut c = Command::new("mpirun");
    c.args(["--oversubscribe", "-np", &np.to_string()])
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1");
    c
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("crossbow-mpi-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn event<'a>(recs: &'a [Value], name: &str) -> &'a Value {
    recs.iter().rev().find(|r| r["event"] == name).unwrap_or_else(|| panic!("no {name} record in {recs:?}"))
}

fn train_args(sync: &str, devices: &str, metrics: &Path) -> Vec<String> {
    [
        "train",
        "--model",
        "lenet5",
        "--dataset",
        "synthetic-digits",
        "--train-size",
        "384",
        "--test-size",
        "200",
        "--batch-size",
        "16",
        "--epochs",
        "2",
        "--eval-every",
        "0.5",
        "--lr",
        "0.05",
        "--seed",
        "7",
        "--sync",
        sync,
        "--learners-per-device",
        "2",
        "--devices",
        devices,
        "--threads",
        "1",
        "--workers",
        "1",
        "--quiet",
        "--metrics",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([metrics.display().to_string()])
    .collect()
}

fn check(out: &std::process::Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn two_ranks_of_two_learners_match_one_process_of_four_bit_for_bit() {
    for sync in ["sma", "ssgd", "easgd"] {
        let dir = tmp(&format!("same-{sync}"));
        let one = dir.join("one.jsonl");
        let out = Command::new(bin()).args(train_args(sync, "cpu:2", &one)).output().unwrap();
        check(&out, "one process");
        let two = dir.join("two.jsonl");
        let out = mpirun(2).arg(bin()).args(train_args(sync, "cpu:1", &two)).output().unwrap();
        check(&out, "mpirun -np 2");

        let r_one = records(&one);
        let r0 = records(&two);
        let r1 = records(&dir.join("two.rank1.jsonl"));
        assert_eq!(event(&r0, "start")["ranks"], 2);
        assert_eq!(event(&r0, "start")["world_learners"], serde_json::json!([2, 2]));
        assert_eq!(event(&r1, "start")["rank"], 1);
        // Each rank's pipeline prepares only its learners' batches (2..4 of every 4 on rank 1).
        assert_eq!(event(&r1, "start")["data_share"], serde_json::json!({ "period": 4, "from": 2, "to": 4 }));
        assert_eq!(event(&r_one, "start")["data_share"], Value::Null);
        let z = |r: &[Value]| event(r, "central")["crc32"].clone();
        assert_eq!(z(&r0), z(&r1), "{sync}: the ranks' central models differ");
        assert_eq!(z(&r0), z(&r_one), "{sync}: 2 ranks x 2 learners differ from 1 process x 4 learners");
        let end = |r: &[Value]| (event(r, "end")["iterations"].clone(), event(r, "end")["final_accuracy"].clone());
        assert_eq!(end(&r0), end(&r_one), "{sync}");
        assert_eq!(end(&r1), end(&r_one), "{sync}");
        // The evaluations of the sharded test set count exactly what one process counts.
        let accs = |r: &[Value]| {
            r.iter().filter(|e| e["event"] == "eval").map(|e| e["test_accuracy"].clone()).collect::<Vec<_>>()
        };
        assert_eq!(accs(&r0), accs(&r_one), "{sync}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// With the auto-tuner on every rank (each may change its own learner count at any
/// iteration), the ranks agree on the layout before every iteration: the run ends, and both
/// ranks end with the same central model. (Which changes the tuners make depends on timing;
/// the engine's test `ranks_train_as_devices_of_one_process_and_agree_on_learner_changes`
/// checks a given change exactly.)
#[test]
fn the_ranks_auto_tuners_agree_on_the_learners() {
    let dir = tmp("tuner");
    let m = dir.join("m.jsonl");
    let mut args = train_args("sma", "cpu:1", &m);
    let at = args.iter().position(|a| a == "--learners-per-device").unwrap();
    args[at + 1] = "auto".into();
    let at = args.iter().position(|a| a == "--epochs").unwrap();
    args[at + 1] = "4".into();
    args.extend(["--max-learners".to_string(), "3".to_string()]);
    let out = mpirun(2).arg(bin()).args(&args).output().unwrap();
    check(&out, "mpirun -np 2 with the auto-tuner");
    let r0 = records(&m);
    let r1 = records(&dir.join("m.rank1.jsonl"));
    assert_eq!(event(&r0, "central")["crc32"], event(&r1, "central")["crc32"]);
    assert_eq!(event(&r0, "end")["iterations"], event(&r1, "end")["iterations"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With the auto-tuner, a 2-rank checkpoint resumed by 2 ranks restores every rank's
/// learners and tuner exactly (no change reported), and both ranks end alike.
#[test]
fn the_ranks_tuners_resume_exactly() {
    let dir = tmp("tuner-resume");
    let (m, ck) = (dir.join("m.jsonl"), dir.join("ck"));
    let mut args = ckpt_args("cpu:1", &m, &ck, "100");
    let at = args.iter().position(|a| a == "--learners-per-device").unwrap();
    args[at + 1] = "auto".into();
    args.extend(["--max-learners".to_string(), "3".to_string()]);
    let out = mpirun(2).env("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "6").arg(bin()).args(&args).output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let saved = crossbow_replica::checkpoint::CheckpointFile::read(&ckpt_file(&ck, 6)).unwrap().state;
    assert!(!saved["ranks"][1]["tuner"].is_null(), "rank 1's tuner is not saved: {}", saved["ranks"]);
    let m2 = dir.join("res.jsonl");
    check(&mpirun(2).arg(bin()).args(resume_args(&ckpt_file(&ck, 6), "cpu:1", &m2)).output().unwrap(), "resume");
    let (r0, r1) = (records(&m2), records(&dir.join("res.rank1.jsonl")));
    for r in [&r0, &r1] {
        assert_eq!(event(r, "resume")["changes"], serde_json::json!([]), "{:?}", event(r, "resume"));
    }
    assert_eq!(
        event(&r0, "start")["world_learners"],
        saved["ranks"].as_array().unwrap().iter().map(|r| r["layout"][0].clone()).collect::<Value>()
    );
    assert_eq!(event(&r0, "central")["crc32"], event(&r1, "central")["crc32"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `--on-divergence rollback` with 2 ranks: rank 0 picks the checkpoint and sends it, every
/// rank reloads its slice with the learning rate halved, together, and the run recovers.
#[test]
fn the_ranks_roll_back_together() {
    let dir = tmp("rollback");
    let (m, ck) = (dir.join("m.jsonl"), dir.join("ck"));
    let mut args = ckpt_args("cpu:1", &m, &ck, "2");
    let at = args.iter().position(|a| a == "--lr").unwrap();
    args[at + 1] = "20".into();
    args.extend(["--on-divergence", "rollback", "--max-rollbacks", "10"].map(String::from));
    let out = mpirun(2).arg(bin()).args(&args).output().unwrap();
    check(&out, "mpirun -np 2 with rollback");
    let (r0, r1) = (records(&m), records(&dir.join("m.rank1.jsonl")));
    let rollbacks = |r: &[Value]| {
        r.iter()
            .filter(|e| e["event"] == "rollback")
            .map(|e| (e["iteration"].clone(), e["lr"].clone()))
            .collect::<Vec<_>>()
    };
    assert!(!rollbacks(&r0).is_empty(), "lr 20 did not diverge: {r0:?}");
    assert_eq!(rollbacks(&r0), rollbacks(&r1), "the ranks rolled back differently");
    assert_eq!(event(&r0, "central")["crc32"], event(&r1, "central")["crc32"]);
    assert_eq!(event(&r0, "end")["iterations"], event(&r1, "end")["iterations"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkpoint rank 0 cannot read (missing, damaged) is every rank's error, named, exit 2,
/// never a hang.
#[test]
fn a_bad_checkpoint_read_by_rank_0_stops_every_rank() {
    let dir = tmp("bad-resume");
    let bad = dir.join("ckpt-0000000003.safetensors");
    std::fs::write(&bad, b"not a checkpoint").unwrap();
    for from in [dir.join("missing"), bad] {
        let m = dir.join("m.jsonl");
        let job = mpirun(2)
            .arg(bin())
            .args(resume_args(&from, "cpu:1", &m))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (code, text) = ends_within(job, Duration::from_secs(60));
        assert_eq!(code, Some(2), "{text}");
        assert!(text.contains(&from.display().to_string()) && text.contains("(rank 0)"), "{text}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `mpirun -np 2 crossbow <args>`, its output captured (the caller waits for it).
fn spawn_job(args: &[String]) -> Child {
    mpirun(2).arg(bin()).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

/// Starts a long 2-rank run, waits until rank 1 has written its start record, and returns
/// the job and rank 1's pid.
// The job is handed to the caller, which waits for it (`ends_within`); clippy cannot see that.
#[allow(clippy::zombie_processes)]
fn long_job(dir: &Path, extra: &[&str]) -> (Child, u32) {
    let metrics = dir.join("m.jsonl");
    let mut args = train_args("sma", "cpu:1", &metrics);
    let at = args.iter().position(|a| a == "--epochs").unwrap();
    args[at + 1] = "500".into();
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut job = spawn_job(&args);
    let rank1 = dir.join("m.rank1.jsonl");
    let start = Instant::now();
    loop {
        let recs = records(&rank1);
        if let Some(pid) = recs.iter().find(|r| r["event"] == "start").and_then(|r| r["pid"].as_u64()) {
            // Let it reach the training loop's collectives.
            std::thread::sleep(Duration::from_secs(2));
            return (job, pid as u32);
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = job.kill();
            let _ = job.wait();
            panic!("rank 1 never started");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits for the job to end (at most `bound`), returns its exit status and output.
fn ends_within(mut job: Child, bound: Duration) -> (Option<i32>, String) {
    let start = Instant::now();
    loop {
        if job.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > bound {
            let _ = job.kill();
            let out = job.wait_with_output().unwrap();
            panic!(
                "the job did not end within {bound:?}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = job.wait_with_output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text)
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

#[test]
fn a_killed_rank_ends_the_job_and_is_named() {
    let dir = tmp("kill");
    let (job, pid) = long_job(&dir, &[]);
    signal(pid, "-KILL");
    let (code, text) = ends_within(job, Duration::from_secs(60));
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("rank 1"), "the dead rank is not named: {text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_stopped_rank_ends_the_job_at_the_deadline_and_is_named() {
    let dir = tmp("stop");
    let (job, pid) = long_job(&dir, &["--mpi-timeout", "3"]);
    signal(pid, "-STOP");
    let (code, text) = ends_within(job, Duration::from_secs(60));
    signal(pid, "-KILL");
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("did not complete within 3 s"), "{text}");
    // Stopped before the collective or inside it: named either way.
    assert!(text.contains("not completed by rank 1 ("), "the hung rank is not named: {text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- Checkpoints and resume with several ranks ---------------------------------------------

/// `train_args` with checkpoints every `every` iterations into `ckpt` (all kept).
fn ckpt_args(devices: &str, metrics: &Path, ckpt: &Path, every: &str) -> Vec<String> {
    let mut a = train_args("sma", devices, metrics);
    a.extend(
        ["--checkpoint-dir", &ckpt.display().to_string(), "--checkpoint-every", every, "--keep-checkpoints", "50"]
            .map(String::from),
    );
    a
}

/// `crossbow train --resume from` with `devices` and metrics into `metrics`.
fn resume_args(from: &Path, devices: &str, metrics: &Path) -> Vec<String> {
    ["train", "--resume", &from.display().to_string(), "--devices", devices, "--quiet", "--metrics"]
        .map(String::from)
        .into_iter()
        .chain([metrics.display().to_string()])
        .collect()
}

/// What a comparison of two runs looks at: the final central model's CRC, the iterations,
/// and the iteration, test accuracy and loss of every evaluation after iteration `after` (a
/// resumed run's metrics file has those after its checkpoint).
fn outcome(recs: &[Value], after: u64) -> (Value, Value, Vec<(Value, Value, Value)>) {
    let evals: Vec<_> = recs
        .iter()
        .filter(|e| e["event"] == "eval" && e["iteration"].as_u64().is_some_and(|i| i > after))
        .map(|e| (e["iteration"].clone(), e["test_accuracy"].clone(), e["test_loss"].clone()))
        .collect();
    assert!(!evals.is_empty(), "no evaluation after iteration {after}");
    (event(recs, "central")["crc32"].clone(), event(recs, "end")["iterations"].clone(), evals)
}

/// The engine's tensors of a checkpoint (every device's central model and synchroniser
/// buffers, every learner's parameters, momentum, statistics), as bits.
fn engine_tensors(path: &Path) -> std::collections::BTreeMap<String, Vec<u32>> {
    let f = crossbow_replica::checkpoint::CheckpointFile::read(path).unwrap();
    f.tensors
        .iter()
        .filter(|(k, _)| k.starts_with("engine/"))
        .map(|(k, t)| (k.clone(), t.data.iter().map(|v| v.to_bits()).collect()))
        .collect()
}

/// The checkpoint of `iteration` in `dir` (`ckpt-<iteration>-<line tag>.safetensors`; one line
/// per folder in these tests).
fn ckpt_file(dir: &Path, iteration: u64) -> PathBuf {
    let prefix = format!("ckpt-{iteration:010}-");
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with(&prefix)))
        .unwrap_or_else(|| dir.join(format!("{prefix}(missing).safetensors")))
}

/// A checkpoint of 2 ranks x 1 device is the checkpoint of 1 process with both devices
/// (every tensor bit for bit; only rank 0 writes); a 2-rank run interrupted at iteration 5
/// and resumed by 2 ranks, by 1 process of 2 devices, or a 1-process checkpoint resumed by
/// 2 ranks, ends bit-identical to the uninterrupted run; resumed by 1 process of 1 device
/// (another layout: the learners carry over) or by 3 ranks, it continues and trains.
#[test]
fn checkpoints_of_ranks_resume_with_the_same_or_other_ranks() {
    let dir = tmp("ckpt");
    // The uninterrupted runs: 2 ranks, and 1 process of 2 devices.
    let (m2, c2) = (dir.join("two.jsonl"), dir.join("ck-two"));
    check(&mpirun(2).arg(bin()).args(ckpt_args("cpu:1", &m2, &c2, "3")).output().unwrap(), "2 ranks");
    let (m1, c1) = (dir.join("one.jsonl"), dir.join("ck-one"));
    check(&Command::new(bin()).args(ckpt_args("cpu:2", &m1, &c1, "3")).output().unwrap(), "1 process");
    let want = |after| outcome(&records(&m2), after);
    assert_eq!(outcome(&records(&m1), 0), want(0), "1 process of 2 devices differs from 2 ranks");
    assert!(!records(&dir.join("two.rank1.jsonl")).is_empty());
    for it in [3, 6] {
        let (a, b) = (engine_tensors(&ckpt_file(&c2, it)), engine_tensors(&ckpt_file(&c1, it)));
        assert!(a.len() >= 6, "{:?}", a.keys());
        assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>());
        assert!(a == b, "iteration {it}: the 2-rank checkpoint differs from the 1-process one");
    }
    // One file per checkpoint, written by rank 0 alone (no leftover temporary file).
    let mut names: Vec<String> =
        std::fs::read_dir(&c2).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    let want_names: Vec<String> = [3u64, 6, 9, 12]
        .iter()
        .map(|&i| ckpt_file(&c2, i).file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, want_names);
    assert!(names.iter().all(|n| !n.contains("(missing)")), "{names:?}");
    let state = crossbow_replica::checkpoint::CheckpointFile::read(&ckpt_file(&c2, 3)).unwrap().state;
    assert_eq!(state["layout"], serde_json::json!([2, 2]));
    assert_eq!(state["ranks"].as_array().map(Vec::len), Some(2));
    // Negative control: another iteration's tensors differ.
    assert!(engine_tensors(&ckpt_file(&c2, 3)) != engine_tensors(&ckpt_file(&c2, 6)));

    // Interrupted after iteration 5 (every rank: the flag is agreed), then resumed.
    let (mi, ci) = (dir.join("int.jsonl"), dir.join("ck-int"));
    let out = mpirun(2)
        .env("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "5")
        .arg(bin())
        .args(ckpt_args("cpu:1", &mi, &ci, "100"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let five = ckpt_file(&ci, 5);
    assert!(five.exists(), "no checkpoint at the interruption");
    let resumed = |np: usize, devices: &str, name: &str| -> Vec<Value> {
        let m = dir.join(format!("{name}.jsonl"));
        let cmd = if np == 0 {
            Command::new(bin()).args(resume_args(&five, devices, &m)).output().unwrap()
        } else {
            mpirun(np).arg(bin()).args(resume_args(&five, devices, &m)).output().unwrap()
        };
        check(&cmd, name);
        records(&m)
    };
    let r = resumed(2, "cpu:1", "res-2");
    assert_eq!(outcome(&r, 5), want(5), "2 ranks -> 2 ranks is not bit-identical");
    assert!(event(&r, "resume")["changes"].as_array().is_some_and(|c| c.is_empty()), "{r:?}");
    let r = resumed(0, "cpu:2", "res-1x2");
    assert_eq!(outcome(&r, 5), want(5), "2 ranks -> 1 process of 2 devices is not bit-identical");
    // A checkpoint of one process, resumed by 2 ranks.
    let m = dir.join("res-one-to-two.jsonl");
    check(&mpirun(2).arg(bin()).args(resume_args(&ckpt_file(&c1, 3), "cpu:1", &m)).output().unwrap(), "1 -> 2");
    assert_eq!(outcome(&records(&m), 3), want(3), "1 process -> 2 ranks is not bit-identical");
    // Other layouts: the learners carry over, the run continues from iteration 5 and trains.
    for (np, devices, name) in [(0, "cpu:1", "res-1x1"), (3, "cpu:1", "res-3")] {
        let r = resumed(np, devices, name);
        assert_eq!(event(&r, "resume")["iteration"], 5, "{name}");
        assert!(!event(&r, "resume")["changes"].as_array().unwrap().is_empty(), "{name}: {r:?}");
        let end = event(&r, "end");
        assert!(end["iterations"].as_u64().unwrap() > 5, "{name}: {end}");
        // It trains on: its last test loss is below the reference's before the checkpoint.
        let loss = |r: &[Value]| event(r, "eval")["test_loss"].as_f64().unwrap();
        let before = records(&m2).iter().find(|e| e["event"] == "eval").unwrap()["test_loss"].as_f64().unwrap();
        assert!(loss(&r) < before, "{name} does not train: test loss {} (was {before} at iteration 3)", loss(&r));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// 3 ranks (the gather-add-broadcast path of more than 2 ranks): every rank ends with the same
/// model, equal to 1 process of 3 devices where the machine has 3 cores; a 3-rank checkpoint
/// resumed by 3 ranks is bit-identical to the uninterrupted run, and resumed by 2 it goes on.
#[test]
fn three_ranks_match_one_process_and_resume_exactly() {
    let dir = tmp("three");
    let (m3, c3) = (dir.join("three.jsonl"), dir.join("ck"));
    check(&mpirun(3).arg(bin()).args(ckpt_args("cpu:1", &m3, &c3, "100")).output().unwrap(), "3 ranks");
    let want = |after| outcome(&records(&m3), after);
    for r in 1..3 {
        let rr = records(&dir.join(format!("three.rank{r}.jsonl")));
        assert_eq!(event(&rr, "central")["crc32"], want(0).0, "rank {r}'s central model differs");
    }
    // `--devices cpu:3` needs 3 cores. The order of the 3 ranks' sum (rank order, as one
    // process adds its devices) is checked on any machine by crossbow-mpi's test
    // `sums_add_in_rank_order_and_bytes_travel`.
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cores >= 3 {
        let m1 = dir.join("one.jsonl");
        check(&Command::new(bin()).args(train_args("sma", "cpu:3", &m1)).output().unwrap(), "1 process");
        assert_eq!(outcome(&records(&m1), 0), want(0), "3 ranks differ from 1 process of 3 devices");
    } else {
        eprintln!("skipped: 3 ranks against 1 process of cpu:3 (this machine has {cores} cores)");
    }
    let (mi, ci) = (dir.join("int.jsonl"), dir.join("ck-int"));
    let out = mpirun(3)
        .env("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "2")
        .arg(bin())
        .args(ckpt_args("cpu:1", &mi, &ci, "100"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let m = dir.join("res.jsonl");
    check(&mpirun(3).arg(bin()).args(resume_args(&ckpt_file(&ci, 2), "cpu:1", &m)).output().unwrap(), "resume");
    assert_eq!(outcome(&records(&m), 2), want(2), "3 ranks -> 3 ranks is not bit-identical");
    // Fewer ranks: the learners carry over and the run continues.
    let m = dir.join("res2.jsonl");
    check(&mpirun(2).arg(bin()).args(resume_args(&ckpt_file(&ci, 2), "cpu:1", &m)).output().unwrap(), "3 -> 2");
    let r = records(&m);
    assert_eq!(event(&r, "resume")["iteration"], 2);
    assert!(event(&r, "end")["iterations"].as_u64().unwrap() > 2);
    assert_eq!(event(&r, "central")["crc32"], event(&records(&dir.join("res2.rank1.jsonl")), "central")["crc32"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A SIGTERM to one rank only stops every rank after the same iteration, with a checkpoint
/// written by rank 0 that a resume reads; a failing checkpoint writer on rank 0 under
/// `--checkpoint-errors fatal` stops every rank with its message.
#[test]
fn a_signal_to_one_rank_checkpoints_the_job_and_a_failed_write_stops_it() {
    let dir = tmp("sigterm");
    let ck = dir.join("ck");
    let (job, pid) = long_job(&dir, &["--checkpoint-dir", &ck.display().to_string(), "--checkpoint-every", "10m"]);
    signal(pid, "-TERM");
    let (code, text) = ends_within(job, Duration::from_secs(60));
    assert_eq!(code, Some(143), "{text}");
    assert!(text.contains("rank 0 wrote the checkpoint"), "{text}");
    // Issue 26, item 12: the resume hint says how to relaunch, and each rank's line is whole
    // and names the rank.
    assert!(text.contains("resume with: mpirun -np 2 crossbow train --resume"), "{text}");
    assert!(!text.contains("crossbowcrossbow") && text.contains("crossbow (rank 1)"), "{text}");
    let saved = crossbow_replica::checkpoint::CheckpointFile::read(
        &std::fs::read_dir(&ck)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(saved.state["ranks"].as_array().map(Vec::len), Some(2));
    // Both ranks stopped after the iteration of the checkpoint.
    let at = saved.state["iteration"].as_u64().unwrap();
    assert!(at >= 1);
    for m in ["m.jsonl", "m.rank1.jsonl"] {
        assert_eq!(event(&records(&dir.join(m)), "interrupted")["iteration"], at, "{m}");
    }

    let m = dir.join("fault.jsonl");
    let mut args = ckpt_args("cpu:1", &m, &dir.join("ck-fault"), "2");
    args.extend(["--checkpoint-errors", "fatal"].map(String::from));
    let job = mpirun(2)
        .env("CROSSBOW_FAULT_CHECKPOINT_WRITE", "1")
        .arg(bin())
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, text) = ends_within(job, Duration::from_secs(60));
    assert_ne!(code, Some(0), "{text}");
    assert!(text.contains("No space left on device") && text.contains("--checkpoint-errors fatal"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
