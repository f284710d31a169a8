//! Never lose a run: checkpoints, exact resume, Ctrl-C and kill, divergence, full disks and
//! damaged checkpoints, each through the real binary.

// Test helpers: a failure to run the binary or read its files should fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crossbow_replica::checkpoint::CheckpointFile;

mod common;
use common::evaluations;

const BIN: &str = env!("CARGO_BIN_EXE_crossbow");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("crossbow-rel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A short LeNet-5 run: 2 learners, 2000 training images, evaluation every 0.1 epoch.
fn base(dir: &Path) -> Vec<String> {
    [
        "train",
        "--devices",
        "cpu",
        "--threads",
        "2",
        "--learners-per-device",
        "2",
        "--train-size",
        "2000",
        "--test-size",
        "300",
        "--batch-size",
        "16",
        "--epochs",
        "0.5",
        "--eval-every",
        "0.1",
        "-q",
        "--checkpoint-dir",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([dir.join("ckpt").display().to_string(), "--metrics".into(), dir.join("m.jsonl").display().to_string()])
    .collect()
}

fn run(args: &[String], env: &[(&str, String)]) -> Output {
    let mut c = Command::new(BIN);
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The newest checkpoint of a folder, read.
fn newest(dir: &Path) -> (PathBuf, CheckpointFile) {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("ckpt-"))
        .collect();
    names.sort();
    let p = names.pop().expect("a checkpoint");
    let f = CheckpointFile::read(&p).unwrap();
    (p, f)
}

fn engine_tensors(f: &CheckpointFile) -> BTreeMap<String, Vec<u32>> {
    f.tensors
        .iter()
        .filter(|(k, _)| k.starts_with("engine/"))
        .map(|(k, t)| (k.clone(), t.data.iter().map(|v| v.to_bits()).collect()))
        .collect()
}

#[test]
fn a_run_interrupted_anywhere_and_resumed_is_bit_identical() {
    let full = tmp("exact-full");
    let o = run(&base(&full), &[]);
    assert!(o.status.success(), "{}", text(&o));
    let (_, want) = newest(&full.join("ckpt"));
    let want_evals = evaluations(&full.join("m.jsonl"));
    let iterations = want.state["iteration"].as_u64().unwrap();
    assert!(iterations >= 31, "0.5 epochs of 2000 images at 2 x 16: {iterations}");
    assert!(want_evals.len() >= 5, "{want_evals:?}");
    // The first iteration, mid-epoch between evaluations, right at an evaluation (7 x 32 >=
    // 0.1 x 2000 images), and the last iteration but one.
    for stop in [1u64, 5, 7, iterations - 1] {
        let d = tmp(&format!("exact-{stop}"));
        let o = run(&base(&d), &[("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", stop.to_string())]);
        assert_eq!(o.status.code(), Some(130), "{}", text(&o));
        let msg = text(&o);
        assert!(
            msg.contains(&format!("after iteration {stop}")) && msg.contains("resume with: crossbow train --resume"),
            "{msg}"
        );
        let o = run(&["train".into(), "--resume".into(), d.join("ckpt").display().to_string(), "-q".into()], &[]);
        assert!(o.status.success(), "{}", text(&o));
        let (_, got) = newest(&d.join("ckpt"));
        assert_eq!(got.state["iteration"], want.state["iteration"]);
        assert!(engine_tensors(&got) == engine_tensors(&want), "final weights differ after resuming at {stop}");
        assert_eq!(evaluations(&d.join("m.jsonl")), want_evals, "metrics differ after resuming at {stop}");
        std::fs::remove_dir_all(&d).unwrap();
    }
    std::fs::remove_dir_all(&full).unwrap();
}

#[test]
fn resuming_onto_other_hardware_says_what_changed() {
    let d = tmp("layout");
    let o = run(&base(&d), &[("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "5".into())]);
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let ck = d.join("ckpt").display().to_string();
    let o = run(&["train".into(), "--resume".into(), ck.clone(), "--learners-per-device".into(), "3".into()], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("resumed from") && t.contains("had 2 learners") && t.contains("this run has 3"), "{t}");
    // What defines the run cannot change.
    let o = run(&["train".into(), "--resume".into(), ck.clone(), "--batch-size".into(), "8".into()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--batch-size cannot change when resuming"), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
}

fn wait_for(mut cond: impl FnMut() -> bool, what: &str) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(120), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn(args: &[String]) -> Child {
    Command::new(BIN).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill").args([sig, &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
}

fn long_run(d: &Path, every: &str) -> Vec<String> {
    let mut a = base(d);
    let i = a.iter().position(|s| s == "--epochs").unwrap();
    a[i + 1] = "50".into();
    a.extend(["--checkpoint-every".into(), every.into()]);
    a
}

fn iterations_in_metrics(d: &Path) -> bool {
    std::fs::read_to_string(d.join("m.jsonl")).is_ok_and(|t| t.contains("\"event\":\"eval\""))
}

#[test]
fn ctrl_c_and_sigterm_write_a_checkpoint_and_exit_130_and_143() {
    for (sig, code) in [("-INT", 130), ("-TERM", 143)] {
        let d = tmp(&format!("sig{code}"));
        let child = spawn(&long_run(&d, "100000"));
        wait_for(|| iterations_in_metrics(&d), "training to start");
        signal(&child, sig);
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(code), "{}", text(&o));
        let t = text(&o);
        assert!(t.contains("checkpoint written to") && t.contains("resume with: crossbow train --resume"), "{t}");
        let (_, f) = newest(&d.join("ckpt"));
        assert!(f.state["iteration"].as_u64().unwrap() >= 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}

#[test]
fn a_second_ctrl_c_exits_at_once_and_keeps_the_last_good_checkpoint() {
    let d = tmp("twice");
    let child = spawn(&long_run(&d, "1"));
    let ck = d.join("ckpt");
    wait_for(
        || {
            std::fs::read_dir(&ck)
                .is_ok_and(|r| r.flatten().any(|e| e.file_name().to_string_lossy().starts_with("ckpt-")))
        },
        "a checkpoint",
    );
    signal(&child, "-INT");
    signal(&child, "-INT");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    // Whatever was being written, the newest checkpoint is whole and resumable.
    newest(&ck);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn kill_9_during_writes_never_loses_the_last_good_checkpoint() {
    let d = tmp("kill9");
    let ck = d.join("ckpt");
    // A checkpoint every iteration: the writer is busy all the time, so the kills land
    // during writes, renames and deletions.
    let mut args = long_run(&d, "1");
    args.extend(["--keep-checkpoints".into(), "2".into()]);
    let mut last = 0u64;
    for round in 0..6u64 {
        let mut a = args.clone();
        if round > 0 {
            a = vec!["train".into(), "--resume".into(), ck.display().to_string(), "-q".into()];
        }
        let mut child = spawn(&a);
        // Let it run a pseudo-random while (60-400 ms after the first checkpoint appears).
        wait_for(|| std::fs::read_dir(&ck).is_ok_and(|r| r.flatten().count() > 0), "a checkpoint");
        std::thread::sleep(Duration::from_millis(60 + (round * 137 + 41) % 340));
        child.kill().unwrap();
        child.wait().unwrap();
        // Every checkpoint file present is whole; the newest one never goes backwards.
        for e in std::fs::read_dir(&ck).unwrap().flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("ckpt-") {
                CheckpointFile::read(&e.path()).unwrap_or_else(|err| panic!("round {round}: {err}"));
            }
        }
        let (_, f) = newest(&ck);
        let it = f.state["iteration"].as_u64().unwrap();
        assert!(it >= last, "round {round}: newest checkpoint went from {last} back to {it}");
        last = it;
    }
    // And the run finishes from there (with a short limit).
    let o = run(&["train".into(), "--resume".into(), ck.display().to_string(), "--epochs".into(), "0.1".into()], &[]);
    assert!(o.status.success(), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_diverging_run_stops_naming_the_iteration_the_learner_and_the_checkpoint() {
    let d = tmp("diverge");
    let mut a = base(&d);
    a.extend(["--lr".into(), "20".into(), "--checkpoint-every".into(), "1".into()]);
    let o = run(&a, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("training diverged") && t.contains("iteration") && t.contains("learner"), "{t}");
    assert!(t.contains("last good checkpoint is") || t.contains("no checkpoint"), "{t}");
    let m = std::fs::read_to_string(d.join("m.jsonl")).unwrap();
    assert!(m.contains("\"event\":\"diverged\""), "{m}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn rollback_halves_the_learning_rate_until_the_run_recovers() {
    let d = tmp("rollback");
    let mut a = base(&d);
    // Under SMA lr 20 and then 10 both diverge on these 2 learners (under S-SGD, the default,
    // 10 already runs without a loss blow-up), so the run needs several halvings.
    a.extend(
        [
            "--sync",
            "sma",
            "--lr",
            "20",
            "--checkpoint-every",
            "5",
            "--on-divergence",
            "rollback",
            "--max-rollbacks",
            "10",
        ]
        .map(String::from),
    );
    let o = run(&a, &[]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("rollback 1/10") && t.contains("base learning rate now 10"), "{t}");
    let m = std::fs::read_to_string(d.join("m.jsonl")).unwrap();
    let n = m.lines().filter(|l| l.contains("\"event\":\"rollback\"")).count();
    assert!(n >= 2, "lr 20 needs more than one halving: {t}");
    // Bounded: with one rollback allowed it gives up and says so.
    let d2 = tmp("rollback-bounded");
    let mut a = base(&d2);
    a.extend(["--sync", "sma", "--lr", "20", "--on-divergence", "rollback", "--max-rollbacks", "1"].map(String::from));
    let o = run(&a, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("after 1 rollbacks"), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&d2).unwrap();
}

#[test]
fn a_failed_checkpoint_write_warns_or_stops_and_keeps_the_previous_one() {
    // The second write fails as a full disk would (an injected error).
    let d = tmp("diskfull");
    let mut a = base(&d);
    a.extend(["--checkpoint-every".into(), "10".into()]);
    let o = run(&a, &[("CROSSBOW_FAULT_CHECKPOINT_WRITE", "2".into())]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("warning: checkpoint at iteration 20 failed") && t.contains("No space left"), "{t}");
    assert!(t.contains("the last good checkpoint is still") && t.contains("ckpt-0000000010"), "{t}");
    let (p, _) = newest(&d.join("ckpt"));
    assert!(p.file_name().unwrap().to_string_lossy().starts_with("ckpt-0000000010-"), "{p:?}");

    let d2 = tmp("diskfull-fatal");
    let mut a = base(&d2);
    a.extend(["--checkpoint-every", "10", "--checkpoint-errors", "fatal"].map(String::from));
    let o = run(&a, &[("CROSSBOW_FAULT_CHECKPOINT_WRITE", "2".into())]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("--checkpoint-errors fatal"), "{}", text(&o));
    let (p, _) = newest(&d2.join("ckpt"));
    assert!(p.file_name().unwrap().to_string_lossy().starts_with("ckpt-0000000010-"), "{p:?}");
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&d2).unwrap();
}

#[test]
fn a_real_full_disk_is_survived_where_a_tmpfs_can_be_mounted() {
    let d = tmp("tmpfs");
    let ck = d.join("ckpt");
    std::fs::create_dir_all(&ck).unwrap();
    // LeNet-5 checkpoints of this run are about 1.5 MB: 4 MB holds two, not three.
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs", &ck.display().to_string()])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!(
            "skipped: cannot mount a size-limited tmpfs here (needs root); the injected-error test covers the logic"
        );
        return;
    }
    let mut a = base(&d);
    a.extend(["--checkpoint-every", "5", "--keep-checkpoints", "10"].map(String::from));
    let o = run(&a, &[]);
    let t = text(&o);
    let _ = Command::new("cp").args(["-r", &ck.display().to_string(), &d.join("saved").display().to_string()]).status();
    let _ = Command::new("umount").arg(&ck).status();
    assert!(o.status.success(), "{t}");
    assert!(t.contains("No space left on device"), "{t}");
    newest(&d.join("saved"));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn damaged_and_foreign_checkpoints_are_refused_and_nothing_is_overwritten() {
    let d = tmp("hostile");
    let o = run(&base(&d), &[("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "3".into())]);
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let (good, _) = newest(&d.join("ckpt"));
    let bytes = std::fs::read(&good).unwrap();
    let resume = |p: &Path| run(&["train".into(), "--resume".into(), p.display().to_string()], &[]);

    let truncated = d.join("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let flipped = d.join("flipped.safetensors");
    let mut b = bytes.clone();
    let n = b.len() - 100;
    b[n] ^= 0x04;
    std::fs::write(&flipped, &b).unwrap();
    // An exported model is a safetensors file but not a checkpoint.
    let exported = d.join("exported.safetensors");
    let o = run(
        &[
            "export".into(),
            "--checkpoint".into(),
            good.display().to_string(),
            "--out".into(),
            exported.display().to_string(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    for (p, why) in [
        (&truncated, "truncated or damaged"),
        (&flipped, "checksum mismatch"),
        (&exported, "not a crossbow checkpoint"),
        (&d, "no checkpoints"),
    ] {
        let before = std::fs::read(&good).unwrap();
        let o = resume(p);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        let t = text(&o);
        assert!(t.contains(&p.display().to_string()) && t.contains(why), "{t}");
        assert_eq!(std::fs::read(&good).unwrap(), before, "the good checkpoint is untouched");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn unwritable_checkpoint_folders_are_refused_before_training() {
    let d = tmp("unwritable");
    let blocker = d.join("file");
    std::fs::write(&blocker, b"x").unwrap();
    let mut a = base(&d);
    let i = a.iter().position(|s| s == "--checkpoint-dir").unwrap();
    a[i + 1] = blocker.join("sub").display().to_string();
    let o = run(&a, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("--checkpoint-dir") && t.contains("cannot create"), "{t}");
    assert!(!t.contains("best test accuracy"), "nothing trained: {t}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// Every checkpoint file of `dir` with its bytes (a folder's contents, to see that nothing
/// was deleted, added or rewritten).
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("ckpt-"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect()
}

fn run_in(cwd: &Path, args: &[&str]) -> Output {
    Command::new(BIN).current_dir(cwd).args(args).output().unwrap()
}

/// A short run of LeNet-5 on built-in digits writing a checkpoint every 4 iterations.
fn short(ck: &str, seed: &str, epochs: &str) -> Vec<String> {
    [
        "train",
        "--devices",
        "cpu",
        "--threads",
        "1",
        "--learners-per-device",
        "2",
        "--train-size",
        "640",
        "--test-size",
        "100",
        "--batch-size",
        "16",
        "--epochs",
        epochs,
        "--eval-every",
        "0.5",
        "-q",
        "--seed",
        seed,
        "--checkpoint-every",
        "4",
        "--keep-checkpoints",
        "2",
        "--checkpoint-dir",
        ck,
    ]
    .map(String::from)
    .to_vec()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", text(o));
}

/// Issue 26, item 1: a resume writes into the folder it resumed from, whatever the folder
/// saved in the checkpoint; a run rotates only its own files; a folder holding another
/// run's checkpoints is refused unless shared.
#[test]
fn a_resume_writes_where_it_resumed_from_and_never_touches_another_runs_files() {
    let d = tmp("owner");
    let sh = |args: Vec<String>| {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        run_in(&d, &a)
    };
    // Run A in ./ck, interrupted; the folder moves to exp1/ck; run B (seed 2) in a new ./ck.
    let o = Command::new(BIN)
        .current_dir(&d)
        .args(short("ck", "1", "1"))
        .env("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "9")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    std::fs::create_dir_all(d.join("exp1")).unwrap();
    std::fs::rename(d.join("ck"), d.join("exp1/ck")).unwrap();
    ok(&sh(short("ck", "2", "0.5")));
    let b_files = files(&d.join("ck"));
    assert!(!b_files.is_empty());
    // Resuming A writes into exp1/ck, and leaves B's ./ck as it was.
    let o = run_in(&d, &["train", "--resume", "exp1/ck", "--epochs", "1.5"]);
    ok(&o);
    assert!(files(&d.join("ck")) == b_files, "run B's checkpoints were touched");
    let a_files = files(&d.join("exp1/ck"));
    let (_, f) = newest(&d.join("exp1/ck"));
    assert!(f.state["epoch"].as_f64().unwrap() > 1.4, "{:?}", a_files.keys());
    // A copy resumed writes into the copy; the original stays.
    ok(&Command::new("cp").current_dir(&d).args(["-a", "exp1/ck", "copy"]).output().unwrap());
    let o = run_in(&d, &["train", "--resume", "copy", "--epochs", "2"]);
    ok(&o);
    assert!(files(&d.join("exp1/ck")) == a_files, "the original folder was touched by the copy's resume");
    let (_, f) = newest(&d.join("copy"));
    assert!(f.state["epoch"].as_f64().unwrap() > 1.9);
    // A new run into B's folder is refused, naming the other run; nothing is written.
    let o = sh(short("ck", "3", "0.5"));
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("--checkpoint-dir ck") && t.contains("another run") && t.contains("seed 2"), "{t}");
    assert!(!t.contains("best test accuracy"), "nothing trained: {t}");
    assert!(files(&d.join("ck")) == b_files, "a refused run changed the folder");
    // Told to share, it trains and rotates only its own files.
    let mut a = short("ck", "3", "0.5");
    a.push("--share-checkpoint-dir".into());
    ok(&sh(a));
    let now = files(&d.join("ck"));
    for (k, v) in &b_files {
        assert!(now.get(k) == Some(v), "run B's {k} was deleted or changed by a sharing run");
    }
    assert_eq!(now.len(), b_files.len() + 2, "the sharing run keeps its own 2: {:?}", now.keys());
    // With two runs in it, --resume of the folder asks for a file, naming both.
    let o = run_in(&d, &["train", "--resume", "ck"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("2 runs") && text(&o).contains("naming its file"), "{}", text(&o));
    // The metrics path of a resumed run is the checkpoint folder's, not the working
    // directory's: a resume from elsewhere finds it.
    std::fs::remove_dir_all(&d).unwrap();
}

/// Issue 26, item 2: a resume from an older checkpoint of a line is a branch: it never
/// overwrites the line's newer checkpoints; `--resume DIR` then continues the line written
/// last, naming the other.
#[test]
fn a_branch_from_an_older_checkpoint_overwrites_nothing() {
    let d = tmp("branch");
    let ck = d.join("ck").display().to_string();
    let mut a = short(&ck, "1", "1");
    let i = a.iter().position(|s| s == "--keep-checkpoints").unwrap();
    a[i + 1] = "20".into();
    ok(&run(&a, &[]));
    let before = files(&d.join("ck"));
    let older = d.join("ck").join(before.keys().find(|k| k.starts_with("ckpt-0000000008-")).unwrap());
    let o = run(
        &["train", "--resume", &older.display().to_string(), "--learners-per-device", "3", "--epochs", "0.9", "-q"]
            .map(String::from),
        &[],
    );
    ok(&o);
    assert!(text(&o).contains("new line"), "{}", text(&o));
    let after = files(&d.join("ck"));
    for (k, v) in &before {
        assert!(after.get(k) == Some(v), "{k} was overwritten or deleted by the branch");
    }
    let tag = |k: &str| k.trim_end_matches(".safetensors").rsplit('-').next().unwrap().to_string();
    let old_tag = tag(before.keys().next().unwrap());
    let new: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    assert!(!new.is_empty() && new.iter().all(|k| tag(k) != old_tag), "{new:?}");
    // The folder resumes the branch (written last) and names the other line.
    let o = run(&["train", "--resume", &ck, "--epochs", "1.2", "-q"].map(String::from), &[]);
    ok(&o);
    let t = text(&o);
    assert!(t.contains("2 lines of this run") && t.contains(&format!("ckpt-0000000020-{old_tag}")), "{t}");
    std::fs::remove_dir_all(&d).unwrap();
}

fn cifar4k() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/cifar10-4k"))
}

/// Issue 26, item 3: the data cannot change under a resume; a moved copy of the same data is
/// accepted.
#[test]
fn a_resume_refuses_other_data_and_accepts_the_same_data_moved() {
    let d = tmp("data");
    let moved = d.join("moved");
    let other = d.join("other");
    for dst in [&moved, &other] {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(cifar4k()).unwrap().flatten() {
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
    // The other data: one training image changed (the first record's first pixel byte).
    let f = other.join("data_batch_1.bin");
    let mut b = std::fs::read(&f).unwrap();
    b[1] ^= 0x55;
    std::fs::write(&f, &b).unwrap();
    let ck = d.join("ck").display().to_string();
    let args = |data: &Path| {
        [
            "train",
            "--model",
            "lenet5",
            "--dataset",
            "cifar10",
            "--data-dir",
            &data.display().to_string(),
            "--devices",
            "cpu",
            "--threads",
            "1",
            "--learners-per-device",
            "1",
            "--train-size",
            "320",
            "--test-size",
            "100",
            "--batch-size",
            "16",
            "--epochs",
            "0.5",
            "-q",
            "--checkpoint-dir",
            &ck,
        ]
        .map(String::from)
        .to_vec()
    };
    ok(&run(&args(&cifar4k()), &[]));
    let before = files(&d.join("ck"));
    let resume = |data: &Path| {
        run(
            &["train", "--resume", &ck, "--epochs", "1", "--data-dir", &data.display().to_string(), "-q"]
                .map(String::from),
            &[],
        )
    };
    let o = resume(&other);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("data differ from the run's") && t.contains("contents hash") && t.contains("--data-dir"), "{t}");
    assert!(files(&d.join("ck")) == before, "nothing written by the refused resume");
    ok(&resume(&moved));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Issue 26, item 8: with only the first checkpoint, rollback keeps halving from it up to
/// --max-rollbacks; its advice (a lower --lr on resume) is accepted and said.
#[test]
fn rollback_keeps_halving_from_the_only_checkpoint_and_a_lower_lr_resumes() {
    let d = tmp("rollback-first");
    let mut a = base(&d);
    a.extend(
        ["--lr", "4000", "--checkpoint-every", "100000", "--on-divergence", "rollback", "--max-rollbacks", "4"]
            .map(String::from),
    );
    let o = run(&a, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("after 4 rollbacks"), "{t}");
    let m = std::fs::read_to_string(d.join("m.jsonl")).unwrap();
    let n = m.lines().filter(|l| l.contains("\"event\":\"rollback\"")).count();
    assert_eq!(n, 4, "{t}");
    assert!(t.contains("--lr <lower>"), "{t}");
    let o = run(&["train", "--resume", &d.join("ckpt").display().to_string(), "--lr", "0.005"].map(String::from), &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("base learning rate is now 0.005"), "{}", text(&o));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Issue 26, items 9 and 10: resuming a finished batch-norm run writes nothing; the changes
/// a resume makes are said; an interrupt after a failed write names the last good
/// checkpoint, not one it did not write.
#[test]
fn a_finished_run_resumed_writes_nothing_and_messages_tell_the_truth() {
    let d = tmp("finished");
    let ck = d.join("ck").display().to_string();
    let args = [
        "train",
        "--model",
        "resnet8",
        "--dataset",
        "synthetic-shapes",
        "--train-size",
        "192",
        "--test-size",
        "64",
        "--devices",
        "cpu",
        "--threads",
        "2",
        "--learners-per-device",
        "2",
        "--batch-size",
        "16",
        "--epochs",
        "0.5",
        "-q",
        "--checkpoint-dir",
        &ck,
    ]
    .map(String::from);
    ok(&run(&args, &[]));
    let before = files(&d.join("ck"));
    let o = run(&["train", "--resume", &ck, "--threads", "1"].map(String::from), &[]);
    ok(&o);
    let t = text(&o);
    assert!(t.contains("nothing left to do") && t.contains("--threads 1 (the run had 2)"), "{t}");
    assert!(files(&d.join("ck")) == before, "a resume with nothing to do rewrote the folder");

    let d2 = tmp("failed-then-stopped");
    let mut a = base(&d2);
    a.extend(["--checkpoint-every".into(), "10".into()]);
    let o = run(
        &a,
        &[("CROSSBOW_FAULT_CHECKPOINT_WRITE", "2".into()), ("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "15".into())],
    );
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("the checkpoint of iteration 15 could not be written")
            && t.contains("ckpt-0000000010")
            && t.contains("(iteration 10)")
            && !t.contains("checkpoint written to"),
        "{t}"
    );
    std::fs::remove_dir_all(&d).unwrap();
    std::fs::remove_dir_all(&d2).unwrap();
}

/// Issue 26, item 4: a metrics file that cannot be written (a full disk: /dev/full) does not
/// stop a run under the default policy (it warns once, and the checkpoints are written);
/// under `--checkpoint-errors fatal` it stops it; /dev/null works; a FIFO is refused before
/// training.
#[test]
fn a_failing_metrics_file_follows_the_checkpoint_error_policy() {
    let d = tmp("metrics-full");
    let with_metrics = |m: &str, extra: &[&str]| {
        let mut a = base(&d);
        let i = a.iter().position(|s| s == "--metrics").unwrap();
        a[i + 1] = m.into();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    if Path::new("/dev/full").exists() {
        let o = run(&with_metrics("/dev/full", &[]), &[]);
        let t = text(&o);
        assert!(o.status.success(), "{t}");
        assert_eq!(t.matches("warning: metrics file /dev/full: cannot write").count(), 1, "{t}");
        newest(&d.join("ckpt"));
        let _ = std::fs::remove_dir_all(d.join("ckpt"));
        let o = run(&with_metrics("/dev/full", &["--checkpoint-errors", "fatal"]), &[]);
        assert_eq!(o.status.code(), Some(1), "{}", text(&o));
        assert!(text(&o).contains("/dev/full") && text(&o).contains("--checkpoint-errors fatal"), "{}", text(&o));
    }
    // The same with an injected failure from the 5th record on, on a regular file.
    let _ = std::fs::remove_dir_all(d.join("ckpt"));
    let o = run(&base(&d), &[("CROSSBOW_FAULT_METRICS_WRITE", "5".into())]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("injected by CROSSBOW_FAULT_METRICS_WRITE"), "{}", text(&o));
    let m = std::fs::read_to_string(d.join("m.jsonl")).unwrap();
    assert_eq!(m.lines().count(), 4, "{m}");
    let _ = std::fs::remove_dir_all(d.join("ckpt"));
    // (A new run never writes over another run's metrics: a new file for it.)
    let _ = std::fs::remove_file(d.join("m.jsonl"));
    let mut a = base(&d);
    a.extend(["--checkpoint-errors".into(), "fatal".into()]);
    let o = run(&a, &[("CROSSBOW_FAULT_METRICS_WRITE", "5".into())]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("--checkpoint-errors fatal"), "{}", text(&o));
    // /dev/null takes the records.
    let _ = std::fs::remove_dir_all(d.join("ckpt"));
    ok(&run(&with_metrics("/dev/null", &[]), &[]));
    // A FIFO is refused before training.
    let fifo = d.join("fifo");
    if Command::new("mkfifo").arg(&fifo).status().is_ok_and(|s| s.success()) {
        let o = run(&with_metrics(&fifo.display().to_string(), &[]), &[]);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("not a regular file") && !text(&o).contains("best test accuracy"), "{}", text(&o));
    }
    std::fs::remove_dir_all(&d).unwrap();
}
