use serde::{Deserialize, Serialize};

use crate::Rng;

/// Which fan a Kaiming initialiser scales by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FanMode {
    /// Fan-in (preserves the variance of activations in the forward pass).
    FanIn,
    /// Fan-out (preserves the variance of gradients in the backward pass).
    FanOut,
}

/// A parameter initialiser.
///
/// `fan_in` / `fan_out` are the layer's input / output connections per unit: for a conv
/// weight `[c_out, c_in, kh, kw]`, `fan_in = c_in*kh*kw` and `fan_out = c_out*kh*kw`; for a
/// linear weight `[out, in]`, `fan_in = in` and `fan_out = out`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Init {
    /// Every element `value`.
    Constant {
        /// The value written to every element.
        value: f32,
    },
    /// Uniform in `[-bound, bound]`.
    Uniform {
        /// Half-width of the interval; expected to be >= 0.
        bound: f32,
    },
    /// Normal with mean 0 and the given standard deviation.
    Normal {
        /// Standard deviation; expected to be >= 0.
        std: f32,
    },
    /// Normal with mean 0 and the given standard deviation, redrawn outside ±2σ.
    TruncatedNormal {
        /// Standard deviation of the untruncated normal; samples lie in `±2*std`.
        std: f32,
    },
    /// He et al. 2015, normal: `std = sqrt(2 / fan)` (gain for ReLU).
    KaimingNormal {
        /// Whether `fan` is the layer's fan-in or fan-out.
        mode: FanMode,
    },
    /// He et al. 2015, uniform: `bound = sqrt(6 / fan)`.
    KaimingUniform {
        /// Whether `fan` is the layer's fan-in or fan-out.
        mode: FanMode,
    },
    /// Glorot & Bengio 2010, normal: `std = sqrt(2 / (fan_in + fan_out))`.
    XavierNormal,
    /// Glorot & Bengio 2010, uniform: `bound = sqrt(6 / (fan_in + fan_out))`.
    XavierUniform,
    /// PyTorch's default for `nn.Linear`/`nn.Conv2d` weights and biases:
    /// uniform in `±1/sqrt(fan_in)`.
    FanInUniform,
}

impl Init {
    /// Fills `out` from `rng`. Fans of zero are treated as one.
    pub fn fill(&self, rng: &mut Rng, out: &mut [f32], fan_in: usize, fan_out: usize) {
        let fi = fan_in.max(1) as f32;
        let fo = fan_out.max(1) as f32;
        let fan = |m: FanMode| match m {
            FanMode::FanIn => fi,
            FanMode::FanOut => fo,
        };
        match *self {
            Init::Constant { value } => out.fill(value),
            Init::Uniform { bound } => uniform(rng, out, bound),
            Init::Normal { std } => normal(rng, out, std),
            Init::TruncatedNormal { std } => {
                for v in out.iter_mut() {
                    *v = loop {
                        let x = rng.normal();
                        if x.abs() <= 2.0 {
                            break x * std;
                        }
                    };
                }
            }
            Init::KaimingNormal { mode } => normal(rng, out, (2.0 / fan(mode)).sqrt()),
            Init::KaimingUniform { mode } => uniform(rng, out, (6.0 / fan(mode)).sqrt()),
            Init::XavierNormal => normal(rng, out, (2.0 / (fi + fo)).sqrt()),
            Init::XavierUniform => uniform(rng, out, (6.0 / (fi + fo)).sqrt()),
            Init::FanInUniform => uniform(rng, out, 1.0 / fi.sqrt()),
        }
    }
}

fn uniform(rng: &mut Rng, out: &mut [f32], bound: f32) {
    for v in out.iter_mut() {
        *v = rng.uniform_range(-bound, bound);
    }
}

fn normal(rng: &mut Rng, out: &mut [f32], std: f32) {
    for v in out.iter_mut() {
        *v = rng.normal() * std;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(v: &[f32]) -> (f64, f64) {
        let n = v.len() as f64;
        let m = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = v.iter().map(|&x| (x as f64 - m).powi(2)).sum::<f64>() / n;
        (m, var.sqrt())
    }

    #[test]
    fn kaiming_normal_has_the_right_std() {
        let mut r = Rng::new(0);
        let mut v = vec![0.0; 200_000];
        Init::KaimingNormal { mode: FanMode::FanIn }.fill(&mut r, &mut v, 50, 10);
        let (m, s) = stats(&v);
        assert!(m.abs() < 0.005, "mean {m}");
        assert!((s - (2.0f64 / 50.0).sqrt()).abs() < 0.003, "std {s}");
    }

    #[test]
    fn xavier_uniform_is_bounded_and_has_the_right_std() {
        let mut r = Rng::new(1);
        let mut v = vec![0.0; 200_000];
        Init::XavierUniform.fill(&mut r, &mut v, 30, 70);
        let b = (6.0f32 / 100.0).sqrt();
        assert!(v.iter().all(|x| x.abs() <= b));
        let (_, s) = stats(&v);
        assert!((s - (2.0f64 / 100.0).sqrt()).abs() < 0.003, "std {s}");
    }

    #[test]
    fn truncated_normal_is_truncated() {
        let mut r = Rng::new(2);
        let mut v = vec![0.0; 50_000];
        Init::TruncatedNormal { std: 0.1 }.fill(&mut r, &mut v, 1, 1);
        assert!(v.iter().all(|x| x.abs() <= 0.2 + 1e-6));
    }

    #[test]
    fn constant_and_determinism() {
        let mut r = Rng::new(3);
        let mut v = vec![1.0; 10];
        Init::Constant { value: 0.5 }.fill(&mut r, &mut v, 1, 1);
        assert!(v.iter().all(|&x| x == 0.5));
        let mut a = vec![0.0; 64];
        let mut b = vec![0.0; 64];
        Init::FanInUniform.fill(&mut Rng::new(9), &mut a, 16, 4);
        Init::FanInUniform.fill(&mut Rng::new(9), &mut b, 16, 4);
        assert_eq!(a, b);
    }
}
