//! The researcher's binary end to end: `periodic` is selectable by name, trains, and rejects
//! bad options with one line naming the option.

use std::process::Command;

/// Runs the binary: exit code, stdout + stderr.
#[allow(clippy::expect_used)] // Test helper: failing to start the binary should fail the test.
fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_crossbow-sync-periodic")).args(args).output().expect("run the binary");
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
    "0.5",
    "--learners-per-device",
    "2",
    "--devices",
    "cpu",
    "--threads",
    "1",
    "--workers",
    "1",
    "--sync",
    "periodic",
];

#[test]
fn trains_with_the_periodic_synchroniser() {
    let (code, out) = run(&[TINY, &["--sync-opt", "period=2"]].concat());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("sync periodic (period=2)"), "{out}");
    assert!(out.contains("test accuracy"), "{out}");
    assert!(!out.contains("panicked"), "{out}");
}

#[test]
fn the_declared_flag_is_the_option_and_other_synchronisers_refuse_it() {
    let (code, out) = run(&[TINY, &["--period", "2"]].concat());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("sync periodic (period=2)"), "{out}");
    let sma: Vec<&str> = TINY.iter().map(|a| if *a == "periodic" { "sma" } else { a }).collect();
    let (code, out) = run(&[&sma[..], &["--period", "2"]].concat());
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--period is not a setting of --sync sma") && out.contains("periodic uses it"), "{out}");
}

#[test]
fn bad_options_are_one_line_naming_the_option() {
    for (opt, needle) in
        [("period=0", "period must be at least 1"), ("period=x", "period=x"), ("perod=2", "unknown option 'perod'")]
    {
        let (code, out) = run(&[TINY, &["--sync-opt", opt]].concat());
        assert_eq!(code, 2, "{opt}: {out}");
        assert!(out.contains("--sync periodic") && out.contains(needle), "{opt}: {out}");
        assert_eq!(out.lines().filter(|l| !l.trim().is_empty()).count(), 1, "{opt}: {out}");
    }
    let (code, out) = run(&[TINY, &["--sync-opt", "period"]].concat());
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--sync-opt") && out.contains("KEY=VALUE"), "{out}");
}

#[test]
fn options_come_from_a_config_file_too() {
    let dir = std::env::temp_dir().join(format!("crossbow-sync-periodic-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("periodic.toml");
    std::fs::write(&path, "sync = \"periodic\"\n\n[sync-options]\nperiod = 0\n").expect("write config");
    let config = path.to_string_lossy().into_owned();
    let (code, out) = run(&["train", "--config", &config, "--devices", "cpu", "--dry-run"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("--sync periodic: option period must be at least 1, got 0"), "{out}");
    // A flag replaces the file's value.
    let (code, out) = run(&["train", "--config", &config, "--devices", "cpu", "--dry-run", "--sync-opt", "period=3"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("\"period\": \"3\""), "{out}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_command_knows_the_name() {
    let (code, out) = run(&["train", "--help"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("periodic") && out.contains("--period [8]"), "{out}");
    let (code, out) = run(&["train", "--sync", "hogwild", "--devices", "cpu"]);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("unknown synchroniser 'hogwild'") && out.contains("sma") && out.contains("periodic"), "{out}");
    let (code, out) = run(&["experiment", "tta", "--help"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("periodic"), "{out}");
}
