//! Small robust statistics.

/// The median of `values` (mean of the two middle values for an even count), or `None` when
/// empty. `scratch` is reused so the steady state does not allocate.
pub(crate) fn median(values: &[f64], scratch: &mut Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    scratch.clear();
    scratch.extend_from_slice(values);
    scratch.sort_unstable_by(f64::total_cmp);
    let mid = scratch.len() / 2;
    if scratch.len() % 2 == 1 {
        scratch.get(mid).copied()
    } else {
        match (scratch.get(mid - 1), scratch.get(mid)) {
            (Some(a), Some(b)) => Some(a / 2.0 + b / 2.0),
            _ => None,
        }
    }
}

/// The median of `values` and whether the values agree on it: at most a quarter of them lie
/// further than `band` (a fraction) from it. Three outliers out of five windows can pull a
/// median anywhere; this is how the tuner notices and measures longer.
pub(crate) fn agreed_median(values: &[f64], scratch: &mut Vec<f64>, band: f64) -> Option<(f64, bool)> {
    let m = median(values, scratch)?;
    let far = values.iter().filter(|&&v| (v / m - 1.0).abs() > band).count();
    Some((m, far <= values.len() / 4))
}

/// The relative standard error of `m`, the median of `values`, estimated robustly from their
/// spread: the median absolute deviation scaled to a normal standard deviation (× 1.4826),
/// times the median's efficiency factor (× 1.2533, √(π/2)), over √n and `m`. `0` for fewer
/// than two values or a non-positive median. One outlier moves it little, unlike a standard
/// deviation.
pub(crate) fn median_standard_error(values: &[f64], scratch: &mut Vec<f64>, m: f64) -> f64 {
    if values.len() < 2 || !(m > 0.0 && m.is_finite()) {
        return 0.0;
    }
    scratch.clear();
    scratch.extend(values.iter().map(|v| (v - m).abs()));
    let mad = {
        let deviations = std::mem::take(scratch);
        let mad = median(&deviations, scratch).unwrap_or(0.0);
        *scratch = deviations;
        mad
    };
    let n = values.len() as f64;
    let se = 1.2533 * 1.4826 * mad / (m * n.sqrt());
    if se.is_finite() { se } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::{agreed_median, median, median_standard_error};

    #[test]
    fn standard_error_follows_the_spread_and_ignores_one_outlier() {
        let mut s = Vec::new();
        assert_eq!(median_standard_error(&[100.0; 5], &mut s, 100.0), 0.0);
        assert_eq!(median_standard_error(&[100.0], &mut s, 100.0), 0.0);
        assert_eq!(median_standard_error(&[90.0, 110.0], &mut s, 0.0), 0.0);
        // Deviations 0, 10, 10, 20, 20 from 100: MAD 10.
        let se = median_standard_error(&[100.0, 90.0, 110.0, 80.0, 120.0], &mut s, 100.0);
        assert!((se - 1.2533 * 1.4826 * 10.0 / (100.0 * 5f64.sqrt())).abs() < 1e-12, "{se}");
        // One wild window barely changes it; four times the windows halve it.
        let wild = median_standard_error(&[100.0, 90.0, 110.0, 80.0, 1e6], &mut s, 100.0);
        assert!(wild <= 2.0 * se, "{wild} vs {se}");
        let twenty: Vec<f64> = (0..4).flat_map(|_| [100.0, 90.0, 110.0, 80.0, 120.0]).collect();
        let quarter = median_standard_error(&twenty, &mut s, 100.0);
        assert!((quarter - se / 2.0).abs() < 1e-12, "{quarter} vs {se}");
    }

    #[test]
    fn agreement_flags_a_majority_of_outliers() {
        let mut s = Vec::new();
        // One outlier in five: agreed.
        assert_eq!(agreed_median(&[100.0, 104.0, 96.0, 200.0, 101.0], &mut s, 0.25), Some((101.0, true)));
        // Three of five doubled: the median is an outlier's, and the rest disagree with it.
        let (m, ok) = agreed_median(&[200.0, 205.0, 195.0, 100.0, 101.0], &mut s, 0.25).unwrap();
        assert_eq!(m, 195.0);
        assert!(!ok);
        // Two outliers in five: not agreed either (only a quarter may be far).
        assert!(!agreed_median(&[100.0, 101.0, 99.0, 30.0, 200.0], &mut s, 0.25).unwrap().1);
        assert_eq!(agreed_median(&[], &mut s, 0.25), None);
    }

    #[test]
    fn median_of_odd_even_and_empty() {
        let mut s = Vec::new();
        assert_eq!(median(&[], &mut s), None);
        assert_eq!(median(&[3.0], &mut s), Some(3.0));
        assert_eq!(median(&[5.0, 1.0, 4.0], &mut s), Some(4.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0], &mut s), Some(2.5));
        // One wild outlier does not move the median of five.
        assert_eq!(median(&[100.0, 101.0, 1e9, 99.0, 100.5], &mut s), Some(100.5));
        assert_eq!(median(&[100.0, 101.0, 1.0, 99.0, 100.5], &mut s), Some(100.0));
    }

    #[test]
    fn median_of_huge_values_does_not_overflow() {
        let mut s = Vec::new();
        assert_eq!(median(&[f64::MAX, f64::MAX], &mut s), Some(f64::MAX));
    }
}
