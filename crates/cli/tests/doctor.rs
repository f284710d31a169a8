//! `crossbow doctor`: without a GPU it says so and exits 0, and with `--require-gpu` exits 1
//! saying why; its self-test table and exit status, through the hidden `--emulator` and
//! `--inject-failure` flags (the real GPU run is part of scripts/gpu-check.sh).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output};

fn doctor(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crossbow"));
    c.arg("doctor").args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("running crossbow doctor")
}

fn text(o: &Output) -> (String, String) {
    (String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn without_a_gpu_it_says_so_and_exits_0() {
    let o = doctor(&[], &[("CROSSBOW_FORCE_NO_CUDA", "1")]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    assert!(out.contains("driver:  no CUDA driver found") || out.contains("built without CUDA"), "{out}");
    assert!(out.contains("no GPU on this machine"), "{out}");
    assert!(out.contains("libraries loaded by this process:") && out.contains("  cuda "), "{out}");
}

#[test]
fn require_gpu_without_a_gpu_exits_1_saying_why() {
    let o = doctor(&["--require-gpu"], &[("CROSSBOW_FORCE_NO_CUDA", "1")]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(!out.contains("nothing to test (exit 0)"), "{out}");
    // One line on stderr naming the flag and the reason.
    let line = err.lines().find(|l| l.contains("--require-gpu")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("no usable GPU: "), "{err}");
    assert!(line.contains("no CUDA driver found") || line.contains("built without CUDA support"), "{err}");
    // The report before it is the same as without the flag.
    assert!(out.contains("driver:  ") && out.contains("libraries loaded by this process:"), "{out}");
    // Without the flag: exit 0, as before.
    assert_eq!(doctor(&[], &[("CROSSBOW_FORCE_NO_CUDA", "1")]).status.code(), Some(0));
}

#[test]
fn a_failing_op_is_named_in_the_table_and_the_exit_status() {
    let o = doctor(&["--emulator", "--inject-failure", "relu"], &[]);
    let (out, err) = text(&o);
    if out.is_empty() && err.contains("no C++ compiler") {
        println!("skipped: no C++ compiler for the emulator");
        return;
    }
    assert_eq!(o.status.code(), Some(1), "{out}{err}");
    assert!(out.contains("| emulator | relu") && out.contains("FAIL"), "{out}");
    // Every other op ran and passed.
    assert_eq!(
        out.matches("| pass ").count(),
        crossbow_kernels::testing::selftest::cases::<crossbow_kernels::CpuBackend>().len() - 1,
        "{out}"
    );
    assert!(err.contains("self-test failed: relu on emulator"), "{err}");
}

#[test]
fn an_unknown_op_to_inject_is_a_usage_error() {
    let o = doctor(&["--emulator", "--inject-failure", "nope"], &[]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--inject-failure: no op 'nope'"), "{err}");
}

#[test]
fn cpu_isa_cap_is_reported_and_a_bad_one_refused() {
    let detected = crossbow_kernels::cpu_isa_with(None).unwrap();
    for cap in [crossbow_kernels::CpuIsa::Portable, crossbow_kernels::CpuIsa::Avx2] {
        let o = doctor(&[], &[("CROSSBOW_FORCE_NO_CUDA", "1"), ("CROSSBOW_CPU_ISA", cap.name())]);
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(0), "{out}{err}");
        let want = format!("CPU:     kernels use {} (CROSSBOW_CPU_ISA={})", detected.min(cap).name(), cap.name());
        assert!(out.contains(&want), "{out}");
    }
    let o = doctor(&[], &[("CROSSBOW_FORCE_NO_CUDA", "1"), ("CROSSBOW_CPU_ISA", "avx1024")]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{out}{err}");
    assert!(err.contains("CROSSBOW_CPU_ISA=\"avx1024\" is not an instruction set"), "{err}");
    // Training under the AVX2 cap runs (the direct kernels' AVX2 path on an AVX-512 host).
    let o = Command::new(env!("CARGO_BIN_EXE_crossbow"))
        .args(["train", "--model", "resnet20", "--dataset", "synthetic-shapes", "--train-size", "64"])
        .args(["--test-size", "32", "--batch-size", "16", "--epochs", "0.5", "--devices", "cpu", "-q"])
        .env("CROSSBOW_CPU_ISA", "avx2")
        .output()
        .unwrap();
    assert!(o.status.success(), "{:?}", text(&o));
}

/// `crossbow doctor | head` and `crossbow models | head`: when the reader has gone before the
/// command writes, it ends quietly (SIGPIPE, as Unix tools do), not with a panic message.
#[cfg(unix)]
#[test]
fn reporting_commands_end_quietly_when_the_reader_goes_away() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    for args in [&["doctor"][..], &["models", "--model", "resnet20"][..]] {
        // A pipe whose read end is closed before the child starts: every write fails.
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let o = Command::new(env!("CARGO_BIN_EXE_crossbow"))
            .args(args)
            .env("CROSSBOW_FORCE_NO_CUDA", "1")
            .stdout(Stdio::from(writer))
            .stderr(Stdio::piped())
            .output()
            .expect("running crossbow");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        // Killed by SIGPIPE (13 on Linux and the BSDs).
        assert_eq!(o.status.signal(), Some(13), "{args:?}: {:?} {err}", o.status);
    }
}
