//! What the auto-tuner's probing cost a run: its step time at each learner layout it ran,
//! and how much longer the iterations at the layouts it left took than the same images at
//! the layout it ended with would have.
//!
//! The cost is measured, not modelled: for every layout other than the final one, its step
//! seconds (waiting for input excluded) minus its images at the final layout's throughput.
//! It is negative when a probed layout was faster than the one kept. The first iterations of
//! a run are slower whatever the layout (memory is allocated, caches fill), so when the
//! tuner starts at another count than it keeps, that warm-up counts as probing: an upper
//! bound, which is what a budget ("under 5% of a run") should be checked against.

use serde::{Deserialize, Serialize};

/// Step time at one learner layout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LayoutTime {
    /// Learners per device.
    pub learners: Vec<usize>,
    /// Iterations run at it.
    pub iterations: u64,
    /// Training images they processed (every learner's batch).
    pub images: u64,
    /// Their step seconds, waiting for input excluded.
    pub seconds: f64,
}

impl LayoutTime {
    /// Images per second, if any time was measured.
    pub fn images_per_sec(&self) -> Option<f64> {
        (self.seconds > 0.0 && self.images > 0).then(|| self.images as f64 / self.seconds)
    }
}

/// Step time by layout, in the order the layouts were first run (kept across a resume).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LayoutTimes(pub Vec<LayoutTime>);

impl LayoutTimes {
    /// Counts one iteration.
    pub fn add(&mut self, learners: &[usize], images: usize, seconds: f64) {
        let i = match self.0.iter().position(|l| l.learners == learners) {
            Some(i) => i,
            None => {
                self.0.push(LayoutTime { learners: learners.to_vec(), ..LayoutTime::default() });
                self.0.len() - 1
            }
        };
        let l = &mut self.0[i];
        l.iterations += 1;
        l.images += images as u64;
        l.seconds += seconds.max(0.0);
    }

    /// The probing's cost against `final_learners`, the layout the run ended with: `None`
    /// when no other layout ran (nothing was probed) or the final one has no time measured.
    pub fn cost(&self, final_learners: &[usize]) -> Option<ProbeCost> {
        let kept = self.0.iter().find(|l| l.learners == final_learners)?;
        let rate = kept.images_per_sec()?;
        let others: Vec<&LayoutTime> = self.0.iter().filter(|l| l.learners != final_learners).collect();
        if others.is_empty() {
            return None;
        }
        let seconds: f64 = others.iter().map(|l| l.seconds).sum();
        let images: u64 = others.iter().map(|l| l.images).sum();
        Some(ProbeCost {
            final_learners: final_learners.to_vec(),
            final_images_per_sec: rate,
            probe_iterations: others.iter().map(|l| l.iterations).sum(),
            probe_seconds: seconds,
            extra_seconds: seconds - images as f64 / rate,
            layouts: self.0.clone(),
        })
    }
}

/// What the auto-tuner's probing cost (in a run's summary when it ran more than one layout).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeCost {
    /// Learners per device at the end of the run.
    pub final_learners: Vec<usize>,
    /// Step throughput at that layout over the run, images/s.
    pub final_images_per_sec: f64,
    /// Iterations at other layouts.
    pub probe_iterations: u64,
    /// Their step seconds.
    pub probe_seconds: f64,
    /// How much longer they took than their images at the final layout's throughput
    /// (negative: the probes were faster than the layout kept).
    pub extra_seconds: f64,
    /// Every layout's step time.
    pub layouts: Vec<LayoutTime>,
}

impl ProbeCost {
    /// One line, with the extra seconds as a share of `wall_seconds`.
    pub fn line(&self, wall_seconds: f64) -> String {
        let layouts: Vec<String> = self
            .layouts
            .iter()
            .map(|l| {
                let ips = l.images_per_sec().map_or("-".to_string(), |r| format!("{r:.0}"));
                format!("{:?}: {} it, {:.1} s, {ips} img/s", l.learners, l.iterations, l.seconds)
            })
            .collect();
        format!(
            "tuner probing: {:.1} s at other learner counts than the final {:?} ({:.0} img/s), {:+.1} s ({:+.1}% of the wall time) against that count's speed [{}]",
            self.probe_seconds,
            self.final_learners,
            self.final_images_per_sec,
            self.extra_seconds,
            100.0 * self.extra_seconds / wall_seconds.max(1e-9),
            layouts.join("; ")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_layout_costs_nothing() {
        let mut t = LayoutTimes::default();
        for _ in 0..5 {
            t.add(&[2], 64, 0.1);
        }
        assert_eq!(t.cost(&[2]), None);
        assert_eq!(t.0.len(), 1);
        assert_eq!((t.0[0].iterations, t.0[0].images), (5, 320));
    }

    #[test]
    fn slower_probes_cost_their_lost_time() {
        let mut t = LayoutTimes::default();
        // 10 iterations at 1 learner: 320 images in 1 s (320 img/s).
        for _ in 0..10 {
            t.add(&[1], 32, 0.1);
        }
        // 20 at 3 learners: 1920 images in 4 s (480 img/s).
        for _ in 0..20 {
            t.add(&[3], 96, 0.2);
        }
        // The final layout, 2 learners: 6400 images in 10 s (640 img/s).
        for _ in 0..100 {
            t.add(&[2], 64, 0.1);
        }
        let c = t.cost(&[2]).expect("probes ran");
        assert_eq!(c.probe_iterations, 30);
        assert!((c.probe_seconds - 5.0).abs() < 1e-9);
        assert!((c.final_images_per_sec - 640.0).abs() < 1e-9);
        // 2240 images at 640 img/s would have taken 3.5 s: 1.5 s lost.
        assert!((c.extra_seconds - 1.5).abs() < 1e-9, "{}", c.extra_seconds);
        let line = c.line(100.0);
        assert!(line.contains("+1.5 s (+1.5% of the wall time)"), "{line}");
        assert_eq!(c.layouts.iter().map(|l| l.learners[0]).collect::<Vec<_>>(), vec![1, 3, 2]);
    }

    #[test]
    fn faster_probes_cost_negative() {
        let mut t = LayoutTimes::default();
        t.add(&[4], 100, 0.1); // 1000 img/s
        t.add(&[1], 100, 0.2); // 500 img/s, kept
        let c = t.cost(&[1]).expect("probes ran");
        assert!((c.extra_seconds + 0.1).abs() < 1e-9, "{}", c.extra_seconds);
    }

    #[test]
    fn no_time_at_the_final_layout_is_no_cost() {
        let mut t = LayoutTimes::default();
        t.add(&[1], 32, 0.1);
        assert_eq!(t.cost(&[2]), None);
    }

    #[test]
    fn survives_a_checkpoint_round_trip() {
        let mut t = LayoutTimes::default();
        t.add(&[1, 2], 96, 0.3);
        t.add(&[2, 2], 128, 0.3);
        let back: LayoutTimes = serde_json::from_value(serde_json::to_value(&t).unwrap()).unwrap();
        assert_eq!(back, t);
    }
}
