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
