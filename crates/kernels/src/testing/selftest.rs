//! The op self-test of `crossbow doctor`: every op of a backend against the CPU on small
//! shapes (each op folder's `*_matches_cpu` test body, the same ones `test_backends!` runs
//! as `<test>::cuda`), one row per op, a failure caught and named instead of aborting the
//! run. Generic over the backend, so CI runs it on the kernel emulator and the doctor on
//! every GPU.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Instant;

use crate::Backend;

/// One self-test case: the op's name and its test body (panics on a mismatch).
pub type Case<B> = (&'static str, fn(&B));

/// Every op's comparison with the CPU, in the crate's op order.
pub fn cases<B: Backend>() -> Vec<Case<B>> {
    vec![
        ("gemm", crate::gemm::tests::gemm_matches_cpu::<B>),
        ("vector", crate::vector::tests::vector_matches_cpu::<B>),
        ("sgd", crate::optim::tests::sgd_matches_cpu::<B>),
        ("relu", crate::activation::tests::relu_matches_cpu::<B>),
        ("leaky_relu", crate::leaky_relu::tests::leaky_relu_matches_cpu::<B>),
        ("sma_step", crate::sma_step::tests::sma_step_matches_cpu::<B>),
        ("conv2d", crate::conv2d::tests::conv2d_matches_cpu::<B>),
        ("conv2d (ResNet/LeNet shapes)", crate::conv2d::tests::conv2d_lenet_and_resnet_layer_shapes::<B>),
        ("linear", crate::linear::tests::linear_matches_cpu::<B>),
        ("batch_norm", crate::batch_norm::tests::batch_norm_matches_cpu::<B>),
        ("max_pool", crate::pool::tests::max_pool_matches_cpu::<B>),
        ("avg_pool", crate::pool::tests::avg_pool_matches_cpu::<B>),
        ("dropout", crate::dropout::tests::dropout_matches_cpu::<B>),
        ("softmax_xent", crate::softmax_xent::tests::softmax_xent_matches_cpu::<B>),
        ("augment", crate::augment::tests::crop_flip_matches_cpu::<B>),
    ]
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseResult {
    /// The device or path it ran on (`cuda:0`, `cuda:0 no cuDNN`, `emulator`).
    pub device: String,
    /// The op.
    pub op: &'static str,
    /// `None` when it passed, else the failure (the panic message).
    pub failure: Option<String>,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Runs every case on `be`, catching each failure (a panic) so the others still run.
pub fn run<B: Backend>(device: &str, be: &B, cases: &[Case<B>]) -> Vec<CaseResult> {
    cases
        .iter()
        .map(|&(op, f)| {
            let t = Instant::now();
            let failure = catch_unwind(AssertUnwindSafe(|| f(be))).err().map(|p| {
                p.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "panicked".into())
            });
            CaseResult { device: device.to_string(), op, failure, seconds: t.elapsed().as_secs_f64() }
        })
        .collect()
}

/// The pass/fail table: one row per case (the first line of a failure's message).
pub fn table(results: &[CaseResult]) -> String {
    let w = results.iter().map(|r| r.device.len()).max().unwrap_or(6).max(6);
    let mut s = format!(
        "| {:w$} | {:28} | result | seconds |\n|{}|{}|--------|---------|\n",
        "device",
        "op",
        "-".repeat(w + 2),
        "-".repeat(30)
    );
    for r in results {
        let (res, why) = match &r.failure {
            None => ("pass", String::new()),
            Some(m) => ("FAIL", format!(" {}", m.lines().next().unwrap_or_default())),
        };
        s.push_str(&format!("| {:w$} | {:28} | {res:6} | {:7.2} |{why}\n", r.device, r.op, r.seconds));
    }
    s
}

/// `Ok` when every case passed, else an error naming each failing op and its device.
pub fn verdict(results: &[CaseResult]) -> Result<(), String> {
    let failed: Vec<String> =
        results.iter().filter(|r| r.failure.is_some()).map(|r| format!("{} on {}", r.op, r.device)).collect();
    if failed.is_empty() { Ok(()) } else { Err(format!("self-test failed: {}", failed.join(", "))) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::emu_backend_or_skip;

    #[test]
    fn self_test_passes_on_the_emulator() {
        let Some(be) = emu_backend_or_skip("self_test_passes_on_the_emulator") else { return };
        let all = cases();
        let results = run("emulator", &be, &all);
        let t = table(&results);
        println!("{t}");
        assert_eq!(results.len(), all.len());
        assert!(verdict(&results).is_ok(), "{t}");
        assert!(t.contains("| emulator | batch_norm") && !t.contains("FAIL"), "{t}");
    }

    fn broken<B: Backend>(_: &B) {
        panic!("injected mismatch\nsecond line");
    }

    #[test]
    fn a_failing_op_is_named_and_the_others_still_run() {
        let be = crate::CpuBackend::new(0);
        let c: Vec<Case<crate::CpuBackend>> = vec![
            ("relu", crate::activation::tests::relu_matches_cpu),
            ("broken_op", broken),
            ("sgd", crate::optim::tests::sgd_matches_cpu),
        ];
        let results = run("cpu", &be, &c);
        assert_eq!(results.iter().map(|r| r.failure.is_some()).collect::<Vec<_>>(), [false, true, false]);
        let t = table(&results);
        assert!(t.contains("| broken_op") && t.contains("FAIL") && t.contains("injected mismatch"), "{t}");
        assert!(!t.contains("second line"), "{t}");
        let e = verdict(&results).unwrap_err();
        assert_eq!(e, "self-test failed: broken_op on cpu");
        assert!(verdict(&results[..1]).is_ok());
    }

    #[test]
    fn every_op_folder_has_a_case() {
        // A new op must add its comparison with the CPU here.
        let ops: std::collections::HashSet<&str> =
            cases::<crate::CpuBackend>().iter().map(|(op, _)| op.split(' ').next().unwrap_or_default()).collect();
        for m in crate::cuda::launch::sources().map(|s| s.module) {
            let covered = match m {
                "activation" => ops.contains("relu"),
                "optim" => ops.contains("sgd"),
                "pool" => ops.contains("max_pool") && ops.contains("avg_pool"),
                other => ops.contains(other),
            };
            assert!(covered, "op folder {m} has no self-test case");
        }
    }
}
