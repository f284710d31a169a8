//! Never lose a run: checkpoints, exact resume, Ctrl-C and kill, divergence, full disks and
//! damaged checkpoints, each through the real binary.

// Test helpers: a failure to run the binary or read its files should fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crossbow_replica::checkpoint::CheckpointFile;
use serde_json::Value;

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

/// The evaluations of a metrics file, with the records a resumed run superseded removed
/// (those after the iteration it resumed from), without their times.
fn evaluations(metrics: &Path) -> Vec<Value> {
    let mut out: Vec<Value> = vec![];
    for line in std::fs::read_to_string(metrics).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        match v["event"].as_str() {
            Some("resume") => {
                let at = v["iteration"].as_u64().unwrap();
                out.retain(|e| e["iteration"].as_u64().unwrap() <= at);
            }
            Some("eval") => {
                let mut e = v.clone();
                let o = e.as_object_mut().unwrap();
                for k in ["event", "train_seconds", "wall_seconds", "images_per_sec"] {
                    o.remove(k);
                }
                out.push(e);
            }
            _ => {}
        }
    }
    out
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
    let o = run(&["train".into(), "--resume".into(), ck.clone(), "--lr".into(), "0.5".into()], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("--lr cannot change when resuming"), "{}", text(&o));
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
    a.extend(
        ["--lr", "20", "--checkpoint-every", "5", "--on-divergence", "rollback", "--max-rollbacks", "10"]
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
    a.extend(["--lr", "20", "--on-divergence", "rollback", "--max-rollbacks", "1"].map(String::from));
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
    assert!(p.ends_with("ckpt-0000000010.safetensors"), "{p:?}");

    let d2 = tmp("diskfull-fatal");
    let mut a = base(&d2);
    a.extend(["--checkpoint-every", "10", "--checkpoint-errors", "fatal"].map(String::from));
    let o = run(&a, &[("CROSSBOW_FAULT_CHECKPOINT_WRITE", "2".into())]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("--checkpoint-errors fatal"), "{}", text(&o));
    let (p, _) = newest(&d2.join("ckpt"));
    assert!(p.ends_with("ckpt-0000000010.safetensors"), "{p:?}");
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

#[test]
fn export_writes_pytorch_names_and_shapes() {
    let d = tmp("export");
    let o = run(&base(&d), &[("CROSSBOW_TEST_INTERRUPT_AT_ITERATION", "2".into())]);
    assert_eq!(o.status.code(), Some(130), "{}", text(&o));
    let out = d.join("lenet5.safetensors");
    let o = run(
        &[
            "export".into(),
            "--checkpoint".into(),
            d.join("ckpt").display().to_string(),
            "--out".into(),
            out.display().to_string(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", text(&o));
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../replica/tests/data/pytorch_lenet5_keys.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let want = golden["state_dict"].as_array().expect("a key list");
    assert_eq!(st.len(), want.len());
    for k in want {
        let (name, shape) = match k {
            Value::Array(a) => (a[0].as_str().unwrap().to_string(), a[1].clone()),
            o => (o["name"].as_str().unwrap().to_string(), o["shape"].clone()),
        };
        let t = st.tensor(&name).unwrap_or_else(|_| panic!("no tensor {name}"));
        let shape: Vec<usize> = serde_json::from_value(shape).unwrap();
        assert_eq!(t.shape(), shape.as_slice(), "{name}");
    }
    // Refuses to overwrite the checkpoint it reads.
    let (p, _) = newest(&d.join("ckpt"));
    let o = run(
        &["export".into(), "--checkpoint".into(), p.display().to_string(), "--out".into(), p.display().to_string()],
        &[],
    );
    assert_eq!(o.status.code(), Some(2));
    CheckpointFile::read(&p).unwrap();
    std::fs::remove_dir_all(&d).unwrap();
}
