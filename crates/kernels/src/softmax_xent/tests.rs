use proptest::prelude::*;

use super::SoftmaxXentGeom;
use crate::testing::{Tolerance, assert_close, finite_difference, random_labels, random_vec, to_f64};
use crate::{Backend, CpuBackend, View, ViewMut};

/// Summed cross-entropy of softmax(logits) in f64.
fn xent_ref(g: &SoftmaxXentGeom, logits: &[f64], labels: &[f32]) -> f64 {
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

proptest! {
    /// Loss bound 1e-5 rel + 1e-5 abs vs f64; gradient vs central differences of the f64
    /// mean loss (h = 1e-3, `Tolerance::GRAD`); accuracy counted exactly.
    #[test]
    fn softmax_xent_matches_reference(batch in 1usize..9, classes in 1usize..12, scale in 0.1f32..20.0, seed in any::<u64>()) {
        let be = CpuBackend::new(0);
        let g = SoftmaxXentGeom::mean(batch, classes);
        let logits = random_vec(seed, batch * classes, scale);
        let labels = random_labels(seed ^ 1, batch, classes);
        let mut d = vec![f32::NAN; batch * classes];
        let mut stats = vec![f32::NAN; 2];
        be.softmax_xent(&g, View::whole(&logits), View::whole(&labels), Some(ViewMut::whole(&mut d)), ViewMut::whole(&mut stats)).unwrap();
        let ld = to_f64(&logits);
        assert_close(&stats[..1], &[xent_ref(&g, &ld, &labels)], Tolerance::new(1e-5, 1e-5), "loss");
        let correct = logits.chunks(classes).zip(&labels).filter(|(row, l)| {
            let mut arg = 0;
            for j in 0..row.len() { if row[j] > row[arg] { arg = j; } }
            arg == **l as usize
        }).count();
        prop_assert_eq!(stats[1], correct as f32);
        let fd = finite_difference(&ld, 1e-3, |v| xent_ref(&g, v, &labels) / batch as f64);
        assert_close(&d, &fd, Tolerance::GRAD, "dlogits");
        // Evaluation mode writes the same statistics and no gradient.
        let mut s2 = vec![0.0; 2];
        be.softmax_xent(&g, View::whole(&logits), View::whole(&labels), None, ViewMut::whole(&mut s2)).unwrap();
        prop_assert_eq!(s2, stats);
    }
}

#[test]
fn huge_logits_do_not_overflow() {
    let be = CpuBackend::new(0);
    let g = SoftmaxXentGeom::mean(1, 3);
    let logits = vec![1000.0, -1000.0, 999.0];
    let mut stats = vec![0.0; 2];
    be.softmax_xent(&g, View::whole(&logits), View::whole(&vec![2.0]), None, ViewMut::whole(&mut stats)).unwrap();
    // loss = logsumexp - logit[2] = 1000 + ln(1 + e^-1 + e^-2000) - 999
    let want = 1.0 + (1.0 + (-1.0f64).exp()).ln();
    assert!((stats[0] as f64 - want).abs() < 1e-4, "{} vs {want}", stats[0]);
    assert_eq!(stats[1], 0.0);
}

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
