//! Softmax + cross-entropy on every backend: loss, accuracy and gradient against f64
//! references and finite differences, against the CPU, huge logits; bad labels on the CPU.

// Test bodies run by `test_backends!` (not `cfg(test)`): a failed call must panic the test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

use super::SoftmaxXentGeom;
use crate::prelude::*;
use crate::testing::{
    GPU_TOLERANCE, Tolerance, assert_close, assert_close_f32, download, finite_difference, nan_buffer, proptest_config,
    random_labels, random_vec, to_f64, upload,
};

/// Summed cross-entropy of softmax(logits) in f64.
pub fn xent_ref(g: &SoftmaxXentGeom, logits: &[f64], labels: &[f32]) -> f64 {
    logits
        .chunks(g.classes)
        .zip(labels)
        .map(|(row, &l)| {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            lse - row[l as usize]
        })
        .sum()
}

/// Loss bound 1e-5 rel + 1e-5 abs vs f64; gradient vs central differences of the f64
/// mean loss (h = 1e-3, `Tolerance::GRAD`); accuracy counted exactly.
pub fn softmax_xent_matches_reference<B: Backend>(be: &B) {
    proptest!(proptest_config::<B>(256), |(batch in 1usize..9, classes in 1usize..12, scale in 0.1f32..20.0, seed in any::<u64>())| {
        let g = SoftmaxXentGeom::mean(batch, classes);
        let logits = random_vec(seed, batch * classes, scale);
        let labels = random_labels(seed ^ 1, batch, classes);
        let (lb, yb) = (upload(be, &logits), upload(be, &labels));
        let (mut db, mut sb) = (nan_buffer(be, batch * classes), nan_buffer(be, 2));
        be.softmax_xent(&g, View::whole(&lb), View::whole(&yb), Some(ViewMut::whole(&mut db)), ViewMut::whole(&mut sb)).unwrap();
        let (d, stats) = (download(be, &db), download(be, &sb));
        let ld = to_f64(&logits);
        assert_close(&stats[..1], &[xent_ref(&g, &ld, &labels)], Tolerance::new(1e-5, 1e-5).for_backend::<B>(), "loss");
        let correct = logits.chunks(classes).zip(&labels).filter(|(row, l)| {
            let mut arg = 0;
            for j in 0..row.len() { if row[j] > row[arg] { arg = j; } }
            arg == **l as usize
        }).count();
        prop_assert_eq!(stats[1], correct as f32);
        let fd = finite_difference(&ld, 1e-3, |v| xent_ref(&g, v, &labels) / batch as f64);
        assert_close(&d, &fd, Tolerance::GRAD.for_backend::<B>(), "dlogits");
        // Evaluation mode writes the same statistics and no gradient.
        let mut s2 = nan_buffer(be, 2);
        be.softmax_xent(&g, View::whole(&lb), View::whole(&yb), None, ViewMut::whole(&mut s2)).unwrap();
        prop_assert_eq!(download(be, &s2), stats);
    });
}

/// Loss and accuracy within [`GPU_TOLERANCE`] of the CPU, the gradient within 1e-4 rel +
/// 1e-6 abs, up to 64 samples of 119 classes.
pub fn softmax_xent_matches_cpu<B: Backend>(be: &B) {
    let cpu = CpuBackend::new(0);
    proptest!(ProptestConfig::with_cases(12), |(n in 1usize..65, c in 1usize..120, scale in 0.1f32..30.0, seed in any::<u64>())| {
        let g = SoftmaxXentGeom::mean(n, c);
        let logits = random_vec(seed, g.batch * g.classes, scale);
        let labels = random_labels(seed ^ 1, g.batch, g.classes);
        let (lb, yb) = (upload(be, &logits), upload(be, &labels));
        let (mut db, mut sb) = (nan_buffer(be, logits.len()), nan_buffer(be, 2));
        let (mut dc, mut sc) = (vec![0.0; logits.len()], vec![0.0; 2]);
        be.softmax_xent(&g, View::whole(&lb), View::whole(&yb), Some(ViewMut::whole(&mut db)), ViewMut::whole(&mut sb)).unwrap();
        cpu.softmax_xent(&g, View::whole(&logits), View::whole(&labels), Some(ViewMut::whole(&mut dc)), ViewMut::whole(&mut sc)).unwrap();
        assert_close_f32(&download(be, &sb), &sc, GPU_TOLERANCE, &format!("softmax_xent stats {g:?}"));
        assert_close_f32(&download(be, &db), &dc, Tolerance::new(1e-4, 1e-6), &format!("softmax_xent dlogits {g:?}"));
    });
}

/// Logits of ±1000 give a finite loss within 1e-4 of the exact log-sum-exp value.
pub fn huge_logits_do_not_overflow<B: Backend>(be: &B) {
    let g = SoftmaxXentGeom::mean(1, 3);
    let logits = upload(be, &[1000.0, -1000.0, 999.0]);
    let mut stats = nan_buffer(be, 2);
    be.softmax_xent(&g, View::whole(&logits), View::whole(&upload(be, &[2.0])), None, ViewMut::whole(&mut stats))
        .unwrap();
    let stats = download(be, &stats);
    // loss = logsumexp - logit[2] = 1000 + ln(1 + e^-1 + e^-2000) - 999
    let want = 1.0 + (1.0 + (-1.0f64).exp()).ln();
    assert!((stats[0] as f64 - want).abs() < 1e-4, "{} vs {want}", stats[0]);
    assert_eq!(stats[1], 0.0);
}

crate::test_backends! {
    softmax_xent_matches_reference,
    softmax_xent_matches_cpu: [cpu_threads, emu, cuda],
    huge_logits_do_not_overflow,
}

/// The CPU validates labels (a GPU yields a NaN loss instead).
#[test]
fn bad_labels_are_errors_and_write_nothing() {
    let be = CpuBackend::new(0);
    let g = SoftmaxXentGeom::mean(2, 3);
    let logits = vec![0.0; 6];
    for bad in [3.0, -1.0, 0.5, f32::NAN] {
        let mut stats = vec![7.0; 2];
        let e = be
            .softmax_xent(&g, View::whole(&logits), View::whole(&vec![0.0, bad]), None, ViewMut::whole(&mut stats))
            .unwrap_err()
            .to_string();
        assert!(e.contains("sample 1"), "{e}");
        assert_eq!(stats, vec![7.0, 7.0]);
    }
}
