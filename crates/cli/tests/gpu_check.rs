//! `scripts/gpu-check.sh`'s own test, `scripts/test-gpu-check.sh`, under `cargo test`: a fake
//! bundle whose GPU tests skip and a fake `nvidia-smi` make the correctness call fail naming
//! the skipping steps (and a missing binary, a failing listing, the im2col fallback, NCCL's
//! refusal of two ranks on one GPU); without a GPU both calls exit 0 saying "no GPU". It needs
//! bash and coreutils only (no GPU, no Python packages, no network) and takes seconds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn gpu_check_fails_on_skips_with_a_gpu_and_dry_runs_without() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let o = Command::new("bash")
        .arg("scripts/test-gpu-check.sh")
        .current_dir(&root)
        .output()
        .expect("running bash scripts/test-gpu-check.sh");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "scripts/test-gpu-check.sh: {}\n{out}{err}", o.status);
    assert!(out.contains("test-gpu-check: all checks passed"), "{out}{err}");
}
