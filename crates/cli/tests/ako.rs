//! Ako through the `crossbow` binary: selectable by name with its options, p = 1 trains
//! exactly as S-SGD, `auto` says what it picked, and bad options are one line naming them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Test helpers: a failure should fail the test.

use std::process::Command;

/// Runs the binary: exit code, stdout + stderr.
fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_crossbow")).args(args).output().expect("run the binary");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

const TINY: &[&str] = &[
    "train",
    "--model",
    "lenet5",
    "--dataset",
    "synthetic-digits",
    "--train-size",
    "512",
    "--test-size",
    "256",
    "--batch-size",
    "16",
    "--epochs",
    "1",
    "--eval-every",
    "0.5",
    "--lr",
    "0.05",
    "--learners-per-device",
    "3",
    "--devices",
    "cpu",
    "--threads",
    "1",
    "--workers",
    "1",
];

/// The evaluation lines without their timings: epoch, iteration, rate, losses, accuracy.
fn evaluations(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.starts_with("epoch"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = |key: &str, n: usize| {
                let i = w.iter().position(|x| *x == key).expect(key);
                w[i + 1..i + 1 + n].join(" ")
            };
            format!("{} {} {} {} {}", at("epoch", 3), at("lr", 1), at("train", 2), at("test", 5), at("acc", 1))
        })
        .collect()
}

#[test]
fn one_partition_trains_exactly_as_ssgd() {
    let (code, ako) = run(&[TINY, &["--sync", "ako", "--sync-opt", "partitions=1"]].concat());
    assert_eq!(code, 0, "{ako}");
    assert!(ako.contains("sync ako (partitions=1 sent_bytes_per_learner=246824)"), "{ako}");
    let (code, ssgd) = run(&[TINY, &["--sync", "ssgd"]].concat());
    assert_eq!(code, 0, "{ssgd}");
    let (a, s) = (evaluations(&ako), evaluations(&ssgd));
    assert_eq!(a.len(), 2, "{ako}");
    assert_eq!(a, s);
    // And partial exchange is a different run (here through Ako's own flag).
    let (code, four) = run(&[TINY, &["--sync", "ako", "--ako-partitions", "4"]].concat());
    assert_eq!(code, 0, "{four}");
    assert!(four.contains("sync ako (partitions=4 sent_bytes_per_learner=61708)"), "{four}");
    assert_ne!(evaluations(&four), s);
}

#[test]
fn auto_says_what_it_picked() {
    let (code, out) = run(&[TINY, &["--sync", "ako", "--sync-opt", "bandwidth=0.000001"]].concat());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("sync ako (partitions=auto bandwidth_gb_s=0.000001 p=1)"), "{out}");
    assert!(
        out.contains("synchroniser ako now: partitions=auto bandwidth_gb_s=0.000001 p=64 (from iteration"),
        "{out}"
    );
}

#[test]
fn bad_options_are_one_line_naming_the_option() {
    for (opt, needle) in [
        ("partitions=0", "partitions must be at least 1"),
        ("partitions=many", "partitions=many"),
        ("bandwidth=-1", "bandwidth=-1"),
        ("partition=2", "unknown option 'partition'"),
    ] {
        let (code, text) = run(&[TINY, &["--sync", "ako", "--sync-opt", opt]].concat());
        assert_eq!(code, 2, "{opt}: {text}");
        assert!(text.contains("--sync ako") && text.contains(needle), "{opt}: {text}");
        assert_eq!(text.lines().filter(|l| !l.trim().is_empty()).count(), 1, "{opt}: {text}");
    }
}

#[test]
fn every_command_knows_the_name() {
    let (code, out) = run(&["train", "--help"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("ako") && out.contains("--ako-partitions [auto]"), "{out}");
    let (code, out) = run(&["experiment", "tta", "--help"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("| ako"), "{out}");
    let (code, out) = run(&["train", "--sync", "hogwild", "--devices", "cpu"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("unknown synchroniser 'hogwild'") && out.contains("ako"), "{out}");
}
