//! `--diagnostics`: how the learners and the central model move, measured at every
//! evaluation, so that a researcher can see drift and oscillation (issue: SMA on
//! batch-normalised ResNets).
//!
//! - the central model's last step `‖z_t − z_{t−1}‖` and its drift since the previous
//!   evaluation, both relative to `‖z_t‖` (a step much larger than drift / iterations is
//!   oscillation);
//! - each learner's spread `‖w_j − z‖ / ‖z‖`, over the whole model and per layer (the mean over
//!   learners), and each learner's own test accuracy with its own batch-norm statistics,
//!   against the central model's.
//!
//! Costs: a copy of `z` to the host before every iteration, and per evaluation the learners'
//! parameters and one test-set evaluation per learner.

use crossbow_kernels::Backend;
use crossbow_replica::Engine;
use crossbow_replica::engine::EvalSource;
use crossbow_replica::sync::ModelLayout;
use serde::{Deserialize, Serialize};

use crate::error::SessionError;

/// What `--diagnostics` measured at one evaluation (this rank's learners, device order).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Diagnostics {
    /// `‖z_t − z_{t−1}‖ / ‖z_t‖`: the central model's last step (none when the copy before it
    /// is missing, e.g. right after a resume).
    pub central_step: Option<f64>,
    /// `‖z_t − z_e‖ / ‖z_t‖` since the previous evaluation `e` (none at the first).
    pub central_drift: Option<f64>,
    /// Iterations since the previous evaluation (for reading drift per iteration).
    pub iterations_since: Option<u64>,
    /// Each learner's `‖w_j − z‖ / ‖z‖`.
    pub spread: Vec<f64>,
    /// Per layer with parameters, in model order: the mean over learners of
    /// `‖w_j − z‖ / ‖z‖` over that layer's parameters.
    pub spread_layers: Vec<(String, f64)>,
    /// Each learner's own test accuracy, 0..1 (its parameters, its batch-norm statistics).
    pub learner_accuracy: Vec<f64>,
}

impl Diagnostics {
    /// One line for the log.
    pub fn line(&self, central_accuracy: f64) -> String {
        let pct = |x: f64| format!("{:.2}%", 100.0 * x);
        let range = |v: &[f64], f: &dyn Fn(f64) -> String| match (
            v.iter().copied().reduce(f64::min),
            v.iter().copied().reduce(f64::max),
        ) {
            (Some(a), Some(b)) if a == b => f(a),
            (Some(a), Some(b)) => format!("{}–{}", f(a), f(b)),
            _ => "—".into(),
        };
        let widest = self
            .spread_layers
            .iter()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(n, s)| format!(" (widest layer {n}: {})", pct(*s)))
            .unwrap_or_default();
        let rel = |x: Option<f64>| x.map_or("—".into(), |v| format!("{v:.2e}"));
        format!(
            "  learners' own accuracy {} (z {}), spread ‖w−z‖/‖z‖ {}{widest}; z step {} and drift {} over {} iterations, of ‖z‖",
            range(&self.learner_accuracy, &pct),
            pct(central_accuracy),
            range(&self.spread, &pct),
            rel(self.central_step),
            rel(self.central_drift),
            self.iterations_since.map_or("—".into(), |n| n.to_string()),
        )
    }
}

/// `‖a − b‖` in f64.
fn distance(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum::<f64>().sqrt()
}

/// `‖a‖` in f64.
fn norm(a: &[f32]) -> f64 {
    a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt()
}

/// `x / ‖z‖`, 0 for a zero `z`.
fn relative(x: f64, nz: f64) -> f64 {
    if nz > 0.0 { x / nz } else { 0.0 }
}

/// The spread of learners `ws` around `z`: whole model per learner, and per layer (layers in
/// model order, each the mean over learners).
pub fn spread(layout: &ModelLayout, z: &[f32], ws: &[Vec<f32>]) -> (Vec<f64>, Vec<(String, f64)>) {
    let nz = norm(z);
    let whole = ws.iter().map(|w| relative(distance(w, z), nz)).collect();
    // Layers in order of their first span; a layer's spans (weights and bias) together.
    let mut layers: Vec<(String, Vec<std::ops::Range<usize>>)> = vec![];
    for s in &layout.spans {
        match layers.iter_mut().find(|(n, _)| *n == s.layer) {
            Some((_, r)) => r.push(s.range.clone()),
            None => layers.push((s.layer.clone(), vec![s.range.clone()])),
        }
    }
    let per_layer = layers
        .into_iter()
        .map(|(name, ranges)| {
            let zl: f64 = ranges.iter().map(|r| norm(&z[r.clone()]).powi(2)).sum::<f64>().sqrt();
            let mean = ws
                .iter()
                .map(|w| {
                    let d: f64 = ranges.iter().map(|r| distance(&w[r.clone()], &z[r.clone()]).powi(2)).sum();
                    relative(d.sqrt(), zl)
                })
                .sum::<f64>()
                / ws.len().max(1) as f64;
            (name, mean)
        })
        .collect();
    (whole, per_layer)
}

/// What the diagnostics keep between evaluations.
#[derive(Default)]
pub struct Tracker {
    /// `z` before the iteration that is running or just ran.
    before: Option<Vec<f32>>,
    /// `z` and the iteration at the previous evaluation.
    at_eval: Option<(u64, Vec<f32>)>,
}

impl Tracker {
    /// Before an iteration: keeps `z` (device 0's copy).
    pub fn before_step<B: Backend>(&mut self, engine: &Engine<B>) -> Result<(), SessionError> {
        self.before = Some(engine.central_to_host(0)?);
        Ok(())
    }

    /// Forgets the copy of `z` before the last iteration (a rollback or a resume replaced `z`).
    pub fn forget(&mut self) {
        self.before = None;
        self.at_eval = None;
    }

    /// At an evaluation: measures everything (the learners' own evaluations on `test`).
    pub fn measure<B: Backend>(
        &mut self,
        engine: &mut Engine<B>,
        test: &mut dyn EvalSource,
    ) -> Result<Diagnostics, SessionError> {
        let z = engine.central_to_host(0)?;
        let nz = norm(&z);
        let it = engine.iteration();
        let central_step = self.before.as_ref().map(|p| relative(distance(&z, p), nz));
        let (central_drift, iterations_since) = match &self.at_eval {
            Some((i, p)) => (Some(relative(distance(&z, p), nz)), Some(it.saturating_sub(*i))),
            None => (None, None),
        };
        let mut ws = vec![];
        let mut learner_accuracy = vec![];
        for (d, &m) in engine.layout().iter().enumerate() {
            for j in 0..m {
                ws.push(engine.learner_params(d, j)?);
                learner_accuracy.push(engine.evaluate_learner(d, j, test)?.accuracy);
            }
        }
        let (spread, spread_layers) = spread(&ModelLayout::of(engine.graph()), &z, &ws);
        self.at_eval = Some((it, z));
        Ok(Diagnostics { central_step, central_drift, iterations_since, spread, spread_layers, learner_accuracy })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbow_replica::sync::{ParamKind, ParamSpan};

    #[test]
    fn spread_is_relative_per_model_and_per_layer() {
        let span = |layer: &str, kind, range| ParamSpan { layer: layer.into(), kind, range };
        let layout = ModelLayout {
            len: 6,
            spans: vec![
                span("conv", ParamKind::Weight, 0..3),
                span("conv", ParamKind::Bias, 3..4),
                span("fc", ParamKind::Weight, 4..6),
            ],
        };
        let z = vec![3.0, 0.0, 0.0, 4.0, 1.0, 0.0];
        // Learner 0 equals z; learner 1 differs by 0.5 in conv's bias and by 1 in fc.
        let w0 = z.clone();
        let w1 = vec![3.0, 0.0, 0.0, 4.5, 2.0, 0.0];
        let (whole, layers) = spread(&layout, &z, &[w0, w1]);
        let nz = (9.0f64 + 16.0 + 1.0).sqrt();
        assert_eq!(whole[0], 0.0);
        assert!((whole[1] - (0.25f64 + 1.0).sqrt() / nz).abs() < 1e-12);
        assert_eq!(layers.len(), 2);
        assert_eq!(layers[0].0, "conv");
        // conv: ‖z‖ = 5; learner 1's distance 0.5; mean over the two learners 0.05.
        assert!((layers[0].1 - 0.05).abs() < 1e-12, "{layers:?}");
        // fc: ‖z‖ = 1, distance 1: mean 0.5.
        assert!((layers[1].1 - 0.5).abs() < 1e-12, "{layers:?}");
        // A zero central model gives zeros, not NaN.
        let (w, l) = spread(&layout, &[0.0; 6], &[vec![1.0; 6]]);
        assert!(w[0] == 0.0 && l.iter().all(|(_, x)| *x == 0.0));
    }

    #[test]
    fn the_line_says_ranges_and_the_widest_layer() {
        let d = Diagnostics {
            central_step: Some(1.5e-4),
            central_drift: None,
            iterations_since: None,
            spread: vec![0.02, 0.03],
            spread_layers: vec![("a".into(), 0.01), ("b".into(), 0.2)],
            learner_accuracy: vec![0.4, 0.45],
        };
        let l = d.line(0.5);
        assert!(l.contains("accuracy 40.00%–45.00% (z 50.00%)"), "{l}");
        assert!(l.contains("spread ‖w−z‖/‖z‖ 2.00%–3.00% (widest layer b: 20.00%)"), "{l}");
        assert!(l.contains("z step 1.50e-4 and drift — over — iterations"), "{l}");
    }
}
