//! Where SMA is stable: its update linearised on a quadratic.
//!
//! On `f(w) = h/2 · w²` (one eigen-direction of a loss's curvature `h`, weight decay folded
//! into `h`) every synchroniser here is a linear map of its state, and the state shrinks
//! while that map's spectral radius is below 1. The map depends on the learning rate `γ` and
//! `h` only through their product `γ·h`, so the question "is this rate stable?" becomes "is
//! `γ·h` inside the stable set?" for the curvatures the loss has.
//!
//! With `k` learners the state splits into two decoupled parts:
//!
//! - the **mean mode** (every learner equal): the learners' mean `w`, its momentum `v`, `z`
//!   and `z_prev` — the local-momentum form is 4×4, the paper form 3×3:
//!
//!   ```text
//!   v' = μ v − γh w                        (local-momentum form; the paper form has no v)
//!   w' = (1 − γh − α) w + μ v + α z          (paper: w' = (1 − γh − α) w + α z)
//!   z' = k s w + (1 − k s + μ_z) z − μ_z z_prev
//!   z_prev' = z
//!   ```
//!
//!   where `s` is the central model's share of each learner's difference (`α` for the
//!   default central step, `1/k` for `central-step=mean`);
//! - the **difference modes** (learners apart, their sum zero, so `z` does not see them),
//!   `k − 1` copies of a 2×2 map: `δv' = μ δv − γh δ`, `δ' = (1 − γh − α) δ + μ δv`.
//!
//! One learner is momentum SGD (`v' = μ v − γh w`, `w' = w + v'`), stable for
//! `γh < 2 (1 + μ)` (3.8 at μ = 0.9). [`Linearised::stable_intervals`] gives the stable set
//! of `γh`; [`Linearised::spectral_radius`] the growth per iteration at one point (a radius of
//! 1.001 grows 2.7-fold in 1,000 iterations: an instability that shows late). The tests
//! check both against the real [`crate::Sma`] driven on quadratics.

use crate::sma::{AlphaRule, CentralStep, SmaForm};

/// The largest `γh` the stable set is searched up to (beyond momentum SGD's 2(1 + μ) ≤ 4
/// nothing here is stable).
pub const SEARCH_UP_TO: f64 = 4.5;

/// SMA's update linearised on a quadratic, for one setting of its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Linearised {
    /// Learner update form.
    pub form: SmaForm,
    /// Learners `k`, ≥ 1 (1: momentum SGD).
    pub k: usize,
    /// Pull `α` on each learner.
    pub alpha: f64,
    /// The central model's share `s` of each learner's difference: `α` for the default
    /// central step (`z += Σ α (w_j − z)`), `1/k` for `central-step=mean`.
    pub share: f64,
    /// Learner momentum `μ` (ignored by the paper form, whose learners have none).
    pub momentum: f64,
    /// Central momentum `μ_z`.
    pub central_momentum: f64,
}

impl Linearised {
    /// SMA with `k` learners, `α` from `alpha` (at epoch 0 for a ramp) and the given central
    /// step, learner momentum and central momentum.
    pub fn new(
        form: SmaForm,
        k: usize,
        alpha: AlphaRule,
        central_step: CentralStep,
        momentum: f64,
        central_momentum: f64,
    ) -> Self {
        let k = k.max(1);
        let a = alpha.at(k, 0.0) as f64;
        let share = match (central_step, alpha) {
            (CentralStep::Sum, _) | (CentralStep::Mean, AlphaRule::OneOverK) => a,
            (CentralStep::Mean, _) => 1.0 / k as f64,
        };
        Linearised { form, k, alpha: a, share, momentum, central_momentum }
    }

    /// Momentum SGD's stable limit, `γh < 2 (1 + μ)`.
    pub fn momentum_sgd_limit(momentum: f64) -> f64 {
        2.0 * (1.0 + momentum)
    }

    /// The one-step maps, mean mode first, then the difference mode (none for `k = 1`).
    fn maps(&self, gh: f64) -> Vec<Matrix> {
        let (mu, a, muz) = (self.momentum, self.alpha, self.central_momentum);
        if self.k == 1 {
            // Momentum SGD on z itself (SMA's k = 1 is exactly that).
            return vec![Matrix::new(2, &[1.0 - gh, mu, -gh, mu])];
        }
        let ks = self.k as f64 * self.share;
        let (mean, diff) = match self.form {
            SmaForm::LocalMomentum => (
                // [w, v, z, z_prev]
                Matrix::new(
                    4,
                    &[1.0 - gh - a, mu, a, 0.0, -gh, mu, 0.0, 0.0, ks, 0.0, 1.0 - ks + muz, -muz, 0.0, 0.0, 1.0, 0.0],
                ),
                // [δ, δv]
                Matrix::new(2, &[1.0 - gh - a, mu, -gh, mu]),
            ),
            SmaForm::Paper => (
                // [w, z, z_prev]
                Matrix::new(3, &[1.0 - gh - a, a, 0.0, ks, 1.0 - ks + muz, -muz, 0.0, 1.0, 0.0]),
                Matrix::new(1, &[1.0 - gh - a]),
            ),
        };
        vec![mean, diff]
    }

    /// The largest eigenvalue modulus of the linearised update at `γh = gh`, over every mode:
    /// the state's growth factor per iteration (stable below 1).
    pub fn spectral_radius(&self, gh: f64) -> f64 {
        self.maps(gh).iter().map(Matrix::spectral_radius).fold(0.0, f64::max)
    }

    /// Whether the linearised update is stable at `γh = gh`.
    pub fn stable_at(&self, gh: f64) -> bool {
        self.spectral_radius(gh) < 1.0
    }

    /// The stable set of `γh` in `(0, SEARCH_UP_TO]`, as maximal intervals `(from, to)`
    /// (boundaries to about 1e-6).
    pub fn stable_intervals(&self) -> Vec<(f64, f64)> {
        const STEP: f64 = 0.002;
        let n = (SEARCH_UP_TO / STEP).round() as usize;
        let mut out: Vec<(f64, f64)> = vec![];
        let mut start: Option<f64> = None;
        let mut prev_x = 0.0;
        let mut prev_stable = false;
        for i in 1..=n {
            let x = i as f64 * STEP;
            let s = self.stable_at(x);
            if i == 1 && s {
                start = Some(0.0);
            } else if s != prev_stable {
                let edge = self.edge(prev_x, x, prev_stable);
                if s {
                    start = Some(edge);
                } else if let Some(a) = start.take() {
                    out.push((a, edge));
                }
            }
            prev_x = x;
            prev_stable = s;
        }
        if let Some(a) = start {
            out.push((a, SEARCH_UP_TO));
        }
        out
    }

    /// Bisection for the stability edge between `lo` (stable iff `lo_stable`) and `hi`.
    fn edge(&self, mut lo: f64, mut hi: f64, lo_stable: bool) -> f64 {
        for _ in 0..40 {
            let mid = 0.5 * (lo + hi);
            if self.stable_at(mid) == lo_stable {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        0.5 * (lo + hi)
    }

    /// The largest `γh` below which every smaller `γh > 0` is stable (0 when the update is
    /// unstable from the start).
    pub fn limit(&self) -> f64 {
        match self.stable_intervals().first() {
            Some(&(0.0, to)) => to,
            _ => 0.0,
        }
    }

    /// One line: the stable set, against momentum SGD's.
    pub fn describe(&self) -> String {
        let iv = self.stable_intervals();
        let sgd = Self::momentum_sgd_limit(self.momentum);
        let set = match iv.as_slice() {
            [] => "unstable at every rate".to_string(),
            [(a, b)] if *a == 0.0 => format!("stable for lr·h < {b:.2}"),
            _ => format!(
                "stable for lr·h in {}",
                iv.iter().map(|(a, b)| format!("({a:.2}, {b:.2})")).collect::<Vec<_>>().join(" and ")
            ),
        };
        format!("{set} (momentum SGD: lr·h < {sgd:.2})")
    }
}

/// A small dense real matrix, row-major.
#[derive(Clone, Debug)]
struct Matrix {
    n: usize,
    a: Vec<f64>,
}

impl Matrix {
    fn new(n: usize, a: &[f64]) -> Self {
        debug_assert_eq!(a.len(), n * n);
        Matrix { n, a: a.to_vec() }
    }

    fn mul(&self, o: &Matrix) -> Matrix {
        let n = self.n;
        let mut c = vec![0.0; n * n];
        for i in 0..n {
            for k in 0..n {
                let x = self.a[i * n + k];
                for j in 0..n {
                    c[i * n + j] += x * o.a[k * n + j];
                }
            }
        }
        Matrix { n, a: c }
    }

    /// Coefficients of the characteristic polynomial `λ^n + c[1] λ^(n−1) + … + c[n]`
    /// (`c[0] = 1`), by Faddeev–LeVerrier.
    fn char_poly(&self) -> Vec<f64> {
        let n = self.n;
        let mut c = vec![0.0; n + 1];
        c[0] = 1.0;
        let mut m = Matrix { n, a: vec![0.0; n * n] }; // M_0 = 0
        for k in 1..=n {
            // M_k = A M_{k−1} + c_{k−1} I;  c_k = −tr(A M_k) / k
            let mut mk = self.mul(&m);
            for i in 0..n {
                mk.a[i * n + i] += c[k - 1];
            }
            let am = self.mul(&mk);
            let tr: f64 = (0..n).map(|i| am.a[i * n + i]).sum();
            c[k] = -tr / k as f64;
            m = mk;
        }
        c
    }

    /// The largest modulus of the eigenvalues (roots of the characteristic polynomial by
    /// Durand–Kerner iteration).
    fn spectral_radius(&self) -> f64 {
        roots(&self.char_poly()).iter().map(|z| z.abs()).fold(0.0, f64::max)
    }
}

/// A complex number, for the roots.
#[derive(Clone, Copy, Debug, PartialEq)]
struct C(f64, f64);

impl C {
    fn add(self, o: C) -> C {
        C(self.0 + o.0, self.1 + o.1)
    }
    fn sub(self, o: C) -> C {
        C(self.0 - o.0, self.1 - o.1)
    }
    fn mul(self, o: C) -> C {
        C(self.0 * o.0 - self.1 * o.1, self.0 * o.1 + self.1 * o.0)
    }
    fn div(self, o: C) -> C {
        let d = o.0 * o.0 + o.1 * o.1;
        C((self.0 * o.0 + self.1 * o.1) / d, (self.1 * o.0 - self.0 * o.1) / d)
    }
    fn abs(self) -> f64 {
        self.0.hypot(self.1)
    }
}

/// Every root of the monic polynomial `c[0] = 1, c[1], …, c[n]` (Durand–Kerner, with a
/// Newton polish of each root).
fn roots(c: &[f64]) -> Vec<C> {
    let n = c.len() - 1;
    if n == 0 {
        return vec![];
    }
    let eval = |z: C| c.iter().fold(C(0.0, 0.0), |acc, &k| acc.mul(z).add(C(k, 0.0)));
    let deriv =
        |z: C| c[..n].iter().enumerate().fold(C(0.0, 0.0), |acc, (i, &k)| acc.mul(z).add(C(k * (n - i) as f64, 0.0)));
    // Start on a circle bigger than every root (Cauchy's bound), off the real axis.
    let bound = 1.0 + c[1..].iter().fold(0.0f64, |m, x| m.max(x.abs()));
    let mut z: Vec<C> = (0..n)
        .map(|i| {
            let t = 0.4 + 2.0 * std::f64::consts::PI * i as f64 / n as f64;
            C(bound * t.cos(), bound * t.sin())
        })
        .collect();
    for _ in 0..500 {
        let mut moved = 0.0f64;
        for i in 0..n {
            let mut den = C(1.0, 0.0);
            for j in 0..n {
                if i != j {
                    den = den.mul(z[i].sub(z[j]));
                }
            }
            if den.abs() == 0.0 {
                den = C(1e-12, 1e-12);
            }
            let step = eval(z[i]).div(den);
            z[i] = z[i].sub(step);
            moved = moved.max(step.abs());
        }
        if moved < 1e-15 {
            break;
        }
    }
    for r in &mut z {
        for _ in 0..3 {
            let d = deriv(*r);
            if d.abs() > 1e-300 {
                *r = r.sub(eval(*r).div(d));
            }
        }
    }
    z
}

#[cfg(test)]
mod tests {
    use super::*;

    fn default_sma(k: usize, muz: f64) -> Linearised {
        Linearised::new(SmaForm::LocalMomentum, k, AlphaRule::OneOverK, CentralStep::Sum, 0.9, muz)
    }

    #[test]
    fn one_learner_is_momentum_sgd() {
        let l = default_sma(1, 0.9);
        assert!((l.limit() - 3.8).abs() < 1e-6, "{}", l.limit());
        assert_eq!(l.stable_intervals().len(), 1);
        assert!(
            (Linearised::new(SmaForm::Paper, 1, AlphaRule::OneOverK, CentralStep::Sum, 0.0, 0.9).limit() - 2.0).abs()
                < 1e-6
        );
    }

    #[test]
    fn eigenvalues_of_known_matrices() {
        // Rotation by 90 degrees scaled by 0.5: eigenvalues ±0.5i.
        let m = Matrix::new(2, &[0.0, -0.5, 0.5, 0.0]);
        assert!((m.spectral_radius() - 0.5).abs() < 1e-12);
        // Upper triangular: the diagonal.
        let t = Matrix::new(4, &[0.3, 1.0, 2.0, 3.0, 0.0, -1.2, 1.0, 1.0, 0.0, 0.0, 0.7, 5.0, 0.0, 0.0, 0.0, 0.1]);
        assert!((t.spectral_radius() - 1.2).abs() < 1e-9);
        // A repeated root (Jordan block): 0.9 twice.
        let j = Matrix::new(2, &[0.9, 1.0, 0.0, 0.9]);
        assert!((j.spectral_radius() - 0.9).abs() < 1e-6);
    }

    /// The figures a numpy script (`numpy.linalg.eigvals` of the same matrices, first
    /// unstable point on a grid 0.001 apart; removed in favour of this module) printed: the local-momentum form with α = 1/k and μ_z = 0.9 is
    /// stable up to 0.25, 0.40, 0.59 for k = 2, 4, 8; the paper form up to 1.32, 1.66, 1.83.
    #[test]
    fn limits_match_numpy() {
        for (k, want) in [(2, 0.25), (4, 0.395), (8, 0.59)] {
            let got = default_sma(k, 0.9).limit();
            assert!((got - want).abs() < 0.006, "k={k}: {got}");
        }
        let paper = |k| Linearised::new(SmaForm::Paper, k, AlphaRule::OneOverK, CentralStep::Sum, 0.9, 0.9).limit();
        for (k, want) in [(2, 1.32), (4, 1.66), (8, 1.83)] {
            assert!((paper(k) - want).abs() < 0.006, "paper k={k}: {}", paper(k));
        }
    }

    /// The band where momentum SGD is stable and SMA is not: with α = 1/k and μ_z = 0.9 it
    /// spans most of momentum SGD's range (k = 4: 0.39 to 2.78, then stable again to 3.16);
    /// α = 0.1 narrows it (k = 4: 0.35 to 0.52; k = 8: 0.55 to 1.23 against 0.59 to 1.79), α ≤ 0.05 or μ_z = 0 with α ≤ 0.1 removes it.
    #[test]
    fn a_weak_pull_or_no_central_momentum_narrows_the_unstable_band() {
        let lm = |k, a, muz| Linearised::new(SmaForm::LocalMomentum, k, a, CentralStep::Sum, 0.9, muz);
        let iv = lm(4, AlphaRule::OneOverK, 0.9).stable_intervals();
        assert_eq!(iv.len(), 2, "{iv:?}");
        assert!((iv[0].1 - 0.394).abs() < 0.005 && (iv[1].0 - 2.78).abs() < 0.01 && (iv[1].1 - 3.16).abs() < 0.01);
        let band = |l: Linearised| {
            let iv = l.stable_intervals();
            iv.windows(2).map(|w| w[1].0 - w[0].1).sum::<f64>()
        };
        for k in [4, 8] {
            let wide = band(lm(k, AlphaRule::OneOverK, 0.9));
            let narrow = band(lm(k, AlphaRule::Fixed(0.1), 0.9));
            assert!(narrow > 0.0 && narrow < 0.6 * wide, "k={k}: band {narrow} vs {wide}");
            for l in
                [lm(k, AlphaRule::Fixed(0.05), 0.9), lm(k, AlphaRule::Fixed(0.1), 0.0), lm(k, AlphaRule::OneOverK, 0.0)]
            {
                assert_eq!(l.stable_intervals().len(), 1, "{l:?}");
                assert!(l.limit() > 1.8, "{l:?}: {}", l.limit());
            }
        }
    }

    /// The strong pulls of the k = 8 screens (z moved by the mean of the corrections), against
    /// `numpy.linalg.eigvals` of the same matrices on a grid 0.001 apart: α = 0.5 with μ_z =
    /// 0.9 (SMA's best form in the screens) is stable up to 0.247, α = 0.5 with μ_z = 0 up to
    /// 1.899, α = 1 with μ_z = 0.9 up to 0.154, and α = 1 with μ_z = 0 at no rate (radius
    /// 1.0026 at γh = 0.01, 1.027 at 0.1): its mean mode is `z' = mean(w)`, `w' = z − γ∇`, a
    /// leapfrog whose characteristic roots multiply to −1 without momentum — the setting that
    /// did not learn in the screens (26–30% at every rate).
    #[test]
    fn strong_pulls_with_the_mean_step() {
        let mean = |a: f64, muz| {
            Linearised::new(SmaForm::LocalMomentum, 8, AlphaRule::Fixed(a as f32), CentralStep::Mean, 0.9, muz)
        };
        for (a, muz, want) in [(0.5, 0.9, 0.247), (0.5, 0.0, 1.899), (1.0, 0.9, 0.154)] {
            let got = mean(a, muz).limit();
            assert!((got - want).abs() < 0.003, "α={a} μ_z={muz}: {got}");
        }
        let corner = mean(1.0, 0.0);
        assert!(corner.stable_intervals().is_empty(), "{:?}", corner.stable_intervals());
        assert!((corner.spectral_radius(0.01) - 1.00264).abs() < 1e-4, "{}", corner.spectral_radius(0.01));
        assert!((corner.spectral_radius(0.1) - 1.027).abs() < 1e-3, "{}", corner.spectral_radius(0.1));
    }

    #[test]
    fn describe_names_the_set_and_the_reference() {
        let d = default_sma(2, 0.9).describe();
        assert_eq!(d, "stable for lr·h < 0.25 (momentum SGD: lr·h < 3.80)");
        let d = default_sma(4, 0.9).describe();
        assert_eq!(d, "stable for lr·h in (0.00, 0.39) and (2.78, 3.16) (momentum SGD: lr·h < 3.80)");
        // An over-relaxed pull (α > 2/(k+1) with the sum step) is unstable from the start.
        let over = Linearised::new(SmaForm::Paper, 4, AlphaRule::Fixed(0.9), CentralStep::Sum, 0.0, 0.0);
        assert_eq!(over.limit(), 0.0);
    }
}
