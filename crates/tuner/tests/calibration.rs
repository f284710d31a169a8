//! Monte-Carlo calibration of the tuner against the simulated devices. Ignored by default; run
//! `cargo test -p crossbow-tuner --test calibration -- --ignored --nocapture` to print, per
//! scenario and curve shape over many seeds: how often the tuner settled outside the tolerance
//! (not within one learner of the best count nor within 5% of its throughput), how often it did
//! not settle in time, mean windows to settle, and how often a stable device re-tuned anyway.
//! The property tests assert on a fixed sample of the same scenarios; this shows the margin.

mod common;

use common::{Curve, Drift, Rng, Shape, SimDevice, run_until_settled, settle_bound};
use crossbow_tuner::{Decision, DeviceTuner, TunerConfig};

const LEN: usize = 16;

#[derive(Clone, Copy)]
struct Scenario {
    name: &'static str,
    config: TunerConfig,
    noise: f64,
    outliers: f64,
    start: usize,
    drift: Option<Drift>,
}

#[allow(clippy::unwrap_used)] // Test helper: an invalid scenario config should fail the test.
fn run(s: &Scenario, shape: Shape, runs: u64) -> String {
    let (mut bad, mut over, mut unsettled, mut windows, mut retunes) = (0, 0, 0, 0usize, 0);
    for seed in 0..runs {
        let mut rng = Rng::new(seed.wrapping_mul(7919) ^ 0xABCD);
        let (curve, fit_max) = Curve::random(shape, &mut rng, LEN);
        let start = s.start.min(fit_max);
        let mut device = SimDevice::new(curve, fit_max, start, seed);
        device.noise = s.noise;
        device.outlier_rate = s.outliers;
        device.drift = s.drift;
        let config = TunerConfig { initial_learners: start, ..s.config };
        let mut tuner = DeviceTuner::new(config).unwrap();
        let bound = settle_bound(&config, LEN, device.missing_rate);
        match run_until_settled(&mut tuner, &mut device, bound) {
            None => unsettled += 1,
            Some(w) => {
                windows += w;
                if device.learners > device.curve.best(device.fit_max) {
                    over += 1;
                }
                if !device.curve.acceptable(device.learners, device.fit_max) {
                    if std::env::var_os("SHOW").is_some() {
                        let c = &device.curve;
                        let top = c.at(c.best(device.fit_max));
                        let rel: Vec<String> = (1..=c.len()).map(|i| format!("{:.3}", c.at(i) / top)).collect();
                        println!(
                            "{} {shape:?} seed {seed}: settled {}, best {}, fit {}: {}\n  {:?}",
                            s.name,
                            device.learners,
                            c.best(device.fit_max),
                            device.fit_max,
                            rel.join(" "),
                            tuner
                                .table()
                                .iter()
                                .map(|e| (e.learners, (e.median / top * 1000.0).round() / 1000.0, e.windows))
                                .collect::<Vec<_>>()
                        );
                    }
                    bad += 1;
                }
                for _ in 0..200 {
                    let r = tuner.observe(&device.sample());
                    device.apply(&r);
                    if r.decision != Decision::Settled {
                        retunes += 1;
                        break;
                    }
                }
            }
        }
    }
    format!(
        "{:>16} {:>12}: outside {bad}/{runs}, above the best {over}, unsettled {unsettled}, \
         mean windows {:.0}, re-tuned while stable {retunes}",
        s.name,
        format!("{shape:?}"),
        windows as f64 / runs as f64
    )
}

#[test]
#[ignore = "calibration: prints statistics over many seeds"]
fn calibration() {
    // SIGNIFICANCE=x calibrates another noise margin than the default.
    let significance = std::env::var("SIGNIFICANCE").ok().and_then(|r| r.parse().ok());
    let d = TunerConfig::default();
    let base = TunerConfig { max_learners: LEN, significance: significance.unwrap_or(d.significance), ..d };
    let scenarios = [
        Scenario { name: "default", config: base, noise: 0.10, outliers: 0.05, start: 1, drift: None },
        Scenario { name: "start at 6", config: base, noise: 0.10, outliers: 0.05, start: 6, drift: None },
        Scenario { name: "noise 20%", config: base, noise: 0.20, outliers: 0.05, start: 1, drift: None },
        Scenario { name: "outliers 10%", config: base, noise: 0.10, outliers: 0.10, start: 1, drift: None },
        Scenario {
            name: "patience 0",
            config: TunerConfig { patience: 0, ..base },
            noise: 0.10,
            outliers: 0.05,
            start: 1,
            drift: None,
        },
        Scenario {
            name: "no extension",
            config: TunerConfig { extra_windows: 0, ..base },
            noise: 0.10,
            outliers: 0.05,
            start: 1,
            drift: None,
        },
    ];
    let mut scenarios = scenarios.to_vec();
    let unconfirmed = TunerConfig { confirm_band: 0.0, ..base };
    for (name, busy, mean) in [("load 0.7/10", 0.7, 10.0), ("load 0.6/30", 0.6, 30.0)] {
        let drift = Some(Drift { busy, mean_windows: mean, busy_now: false });
        scenarios.push(Scenario { name, config: base, noise: 0.05, outliers: 0.02, start: 1, drift });
        let name = if mean < 20.0 { "unconfirmed 0.7/10" } else { "unconfirmed 0.6/30" };
        scenarios.push(Scenario { name, config: unconfirmed, noise: 0.05, outliers: 0.02, start: 1, drift });
    }
    scenarios.push(Scenario {
        name: "unconfirmed",
        config: unconfirmed,
        noise: 0.10,
        outliers: 0.05,
        start: 1,
        drift: None,
    });
    let runs = std::env::var("RUNS").ok().and_then(|r| r.parse().ok()).unwrap_or(5_000);
    for s in &scenarios {
        for shape in [Shape::Concave, Shape::MonotoneFlat, Shape::MemoryCliff] {
            println!("{}", run(s, shape, runs));
        }
    }
}
