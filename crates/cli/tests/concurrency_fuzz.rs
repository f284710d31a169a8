//! Fuzzing what a hostile user can do to files (issue 50): random kinds of file at the
//! metrics path, and two processes started at random moments on one checkpoint folder and
//! metrics file. The invariants: a file that is not this run's metrics is never changed; a
//! metrics file holds one run's records; every checkpoint in a folder is whole; of two runs
//! at once on one folder, one is refused.

// Test helpers: a failure to run the binary or read its files should fail the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crossbow_replica::checkpoint::CheckpointFile;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};

const BIN: &str = env!("CARGO_BIN_EXE_crossbow");

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("crossbow-cfuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn train(train_size: &str, epochs: &str, extra: &[String]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["train", "--devices", "cpu", "--threads", "1", "--learners-per-device", "1", "--train-size", train_size]);
    c.args(["--test-size", "200", "--epochs", epochs, "-q"]);
    c.args(extra);
    c
}

/// A checkpoint written once, for the metrics cases that put one at the metrics path.
fn a_checkpoint(d: &Path) -> Vec<u8> {
    let ck = d.join("seed-ck");
    let o = train("600", "0.2", &["--checkpoint-dir".into(), ck.display().to_string()]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = std::fs::read_dir(&ck).unwrap().flatten().find(|e| e.file_name().to_string_lossy().starts_with("ckpt-"));
    std::fs::read(f.unwrap().path()).unwrap()
}

/// What sits at the metrics path before the run.
#[derive(Clone, Debug)]
enum Existing {
    Nothing,
    Empty,
    Checkpoint,
    Toml(String),
    Bytes(Vec<u8>),
    OtherRunsMetrics,
    Link,
    Folder,
}

fn existing() -> impl Strategy<Value = Existing> {
    prop_oneof![
        Just(Existing::Nothing),
        Just(Existing::Empty),
        Just(Existing::Checkpoint),
        "[a-z-]{1,12} = [0-9]{1,3}".prop_map(Existing::Toml),
        prop::collection::vec(any::<u8>(), 1..200).prop_map(Existing::Bytes),
        Just(Existing::OtherRunsMetrics),
        Just(Existing::Link),
        Just(Existing::Folder),
    ]
}

proptest! {
    #![proptest_config(Config { cases: 24, failure_persistence: Some(Box::new(FileFailurePersistence::Off)), ..Config::default() })]

    /// Whatever is at `--metrics`: the run writes its own records into a new or empty file,
    /// or is refused in one line with the file left exactly as it was.
    #[test]
    fn the_metrics_path_never_loses_a_file(kind in existing(), case in 0u32..1_000_000) {
        let d = tmp(&format!("metrics-{case}"));
        let path = d.join("m.jsonl");
        match &kind {
            Existing::Nothing => {}
            Existing::Empty => std::fs::write(&path, b"").unwrap(),
            Existing::Checkpoint => std::fs::write(&path, a_checkpoint(&d)).unwrap(),
            Existing::Toml(t) => std::fs::write(&path, t).unwrap(),
            Existing::Bytes(b) => std::fs::write(&path, b).unwrap(),
            Existing::OtherRunsMetrics => {
                let o = train("600", "0.1", &["--metrics".into(), path.display().to_string()]).output().unwrap();
                prop_assert!(o.status.success());
            }
            Existing::Link => {
                std::fs::write(d.join("target.jsonl"), b"").unwrap();
                std::os::unix::fs::symlink(d.join("target.jsonl"), &path).unwrap();
            }
            Existing::Folder => std::fs::create_dir(&path).unwrap(),
        }
        let before = std::fs::read(&path).ok();
        let o = train("600", "0.1", &["--metrics".into(), path.display().to_string()]).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        match o.status.code() {
            Some(0) => {
                // Only a path with nothing of value may be written: its records are this run's.
                let empty_before = matches!(kind, Existing::Nothing | Existing::Empty)
                    || matches!(&kind, Existing::Bytes(b) if b.is_empty());
                prop_assert!(empty_before, "{kind:?} was written over: {err}");
                let text = std::fs::read_to_string(&path).unwrap();
                let runs: std::collections::BTreeSet<String> = text
                    .lines()
                    .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                    .filter_map(|r| r.get("run").and_then(|v| v.as_str()).map(String::from))
                    .collect();
                prop_assert_eq!(runs.len(), 1, "{}", text);
            }
            Some(2) => {
                prop_assert_eq!(err.lines().filter(|l| !l.trim().is_empty()).count(), 1, "{}", err);
                prop_assert!(err.contains("--metrics"), "{}", err);
                prop_assert_eq!(std::fs::read(&path).ok(), before, "{:?} changed by a refused run", kind);
            }
            other => prop_assert!(false, "{kind:?}: exit {other:?}: {err}"),
        }
        std::fs::remove_dir_all(&d).ok();
    }
}

proptest! {
    // Each case runs two training processes for several seconds.
    #![proptest_config(Config { cases: 10, failure_persistence: Some(Box::new(FileFailurePersistence::Off)), ..Config::default() })]

    /// Two processes on one checkpoint folder and metrics file, the second started at a
    /// random moment: a run, and a resume of it, another run sharing the folder, or another
    /// run writing the same metrics. While both live, one of them is refused; after both,
    /// every checkpoint is whole and each metrics file holds one run's records.
    #[test]
    fn two_processes_never_share_a_live_folder(delay_ms in 0u64..1500, second in 0usize..3, case in 0u32..1_000_000) {
        let d = tmp(&format!("dual-{case}"));
        let (ck, m) = (d.join("ck"), d.join("m.jsonl"));
        let (cks, ms) = (ck.display().to_string(), m.display().to_string());
        let first_args = ["--checkpoint-dir".into(), cks.clone(), "--checkpoint-every".into(), "5".into(), "--metrics".into(), ms.clone()];
        // Long enough (several seconds) that it is still running when the second starts.
        let mut first = train("10000", "4", &first_args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let mut c = match second {
            0 => {
                let mut c = Command::new(BIN);
                c.args(["train", "--resume", &cks, "--epochs", "4.2", "-q"]);
                c
            }
            1 => train("2000", "0.3", &["--checkpoint-dir".into(), cks.clone(), "--share-checkpoint-dir".into(), "--metrics".into(), d.join("n.jsonl").display().to_string()]),
            _ => train("2000", "0.3", &["--metrics".into(), ms.clone()]),
        };
        let was_running = first.try_wait().unwrap().is_none();
        let o = c.output().unwrap();
        let f = first.wait_with_output().unwrap();
        // Each ends well or is refused in one line (which one wins the race for the folder
        // or the metrics file depends on the moment: the other is refused).
        for (who, out) in [("first", &f), ("second", &o)] {
            let err = String::from_utf8_lossy(&out.stderr).to_string();
            match out.status.code() {
                Some(0) => {}
                Some(2) => prop_assert_eq!(err.lines().filter(|l| l.contains("error")).count(), 1, "{}: {}", who, err),
                other => prop_assert!(false, "{who}: exit {other:?}: {err}"),
            }
        }
        // Started while the first lived: never both done.
        if was_running {
            prop_assert!(
                !(f.status.success() && o.status.success()),
                "both ran: {} / {}",
                String::from_utf8_lossy(&f.stderr),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        for e in std::fs::read_dir(&ck).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if name.starts_with("ckpt-") {
                prop_assert!(CheckpointFile::read(&e.path()).is_ok(), "{} is damaged", name);
            }
        }
        for metrics in [&m, &d.join("n.jsonl")] {
            let Ok(text) = std::fs::read_to_string(metrics) else { continue };
            let runs: std::collections::BTreeSet<String> = text
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
                .filter_map(|r| r.get("run").and_then(|v| v.as_str()).map(String::from))
                .collect();
            prop_assert!(runs.len() <= 1, "{} holds records of {:?}", metrics.display(), runs);
        }
        std::fs::remove_dir_all(&d).ok();
    }
}
