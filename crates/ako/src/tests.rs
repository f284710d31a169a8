//! Ako's properties, on the real engine with CPU devices (as `crossbow-sma`'s tests), and on
//! the synchroniser driven directly where the test must choose the gradients.

use crossbow_kernels::CpuBackend;
use crossbow_kernels::optim::SgdConfig;
use crossbow_kernels::testing::{Tolerance, assert_close_f32, random_vec};
use crossbow_replica::engine::{CpuDevices, Engine, EngineConfig};
use crossbow_replica::sync::HostAllReduce;
use crossbow_replica::{Graph, Schedule};
use crossbow_sma::SSgd;
use crossbow_tensor::Shape;
use proptest::prelude::*;

use super::*;

use crossbow_replica::testing::harness::{EPOCH, SyncDriver, all_params, assert_same, batch, engine, sgd, small_lenet};

fn ako(p: usize) -> Box<dyn Synchroniser<CpuBackend>> {
    Box::new(Ako::new(Partitions::Fixed(p)))
}

fn step(e: &mut Engine<CpuBackend>, g: &Graph, b: usize, seed: u64, t: u64) {
    crossbow_replica::testing::harness::step(e, g, b, seed, t)
}

fn assert_consistent(e: &Engine<CpuBackend>, what: &str) {
    let snap = e.snapshot().unwrap();
    let z = &snap.devices[0].z;
    assert!(z.iter().all(|v| v.is_finite()), "{what}: z is not finite");
    for dev in &snap.devices {
        assert_same(&dev.z, z, &format!("{what}: z copies"));
        for l in &dev.learners {
            let zd: Vec<f32> = z.iter().zip(&l.sync_buffers[1]).map(|(a, b)| a + b).collect();
            assert_same(&l.params, &zd, &format!("{what}: learner slot {} is z + its unsent steps", l.slot));
        }
    }
}

// ---- The partition schedule ---------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// The p partitions are contiguous, disjoint, cover `0..len` and differ in size by at most
    /// one element; in any p consecutive iterations every slot sends each partition once.
    #[test]
    fn partitions_cover_every_element_once_per_p_iterations(len in 0usize..3000, p in 1usize..70, slot in 0usize..40, t0 in 0u64..1_000_000) {
        let ranges: Vec<_> = (0..p).map(|q| partition_range(len, p, q)).collect();
        prop_assert_eq!(ranges[0].start, 0);
        prop_assert_eq!(ranges[p - 1].end, len);
        for w in ranges.windows(2) {
            prop_assert_eq!(w[0].end, w[1].start);
        }
        let sizes: Vec<usize> = ranges.iter().map(|r| r.len()).collect();
        prop_assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{:?}", sizes);
        let mut seen = vec![0usize; p];
        for t in t0..t0 + p as u64 {
            seen[partition_sent(t, slot, p)] += 1;
        }
        prop_assert!(seen.iter().all(|&n| n == 1), "slot {} from {}: {:?}", slot, t0, seen);
    }
}

/// Slots are staggered: with k >= p learners every partition goes out every iteration.
#[test]
fn learners_send_different_partitions() {
    for t in 0..10u64 {
        let mut qs: Vec<usize> = (0..4).map(|j| partition_sent(t, j, 4)).collect();
        qs.sort();
        assert_eq!(qs, [0, 1, 2, 3], "iteration {t}");
    }
    assert_eq!(effective_partitions(8, 1, 100), 1, "one learner sends everything");
    assert_eq!(effective_partitions(8, 3, 5), 5, "no more partitions than elements");
    assert_eq!(effective_partitions(8, 3, 100), 8);
}

#[test]
fn auto_rule() {
    // 3 MB to send per learner (k = 4, 1 MB model) at 1 GB/s is 3 ms.
    assert_eq!(auto_partitions(1e6, 4, 1e9, 3e-3), 1);
    assert_eq!(auto_partitions(1e6, 4, 1e9, 2.9e-3), 2);
    assert_eq!(auto_partitions(1e6, 4, 1e9, 1e-3), 3);
    assert_eq!(auto_partitions(1e6, 4, 1e9, 0.1e-3), 30);
    assert_eq!(auto_partitions(1e6, 4, 1e3, 1.0), AUTO_MAX_PARTITIONS);
    assert_eq!(auto_partitions(1e6, 4, 1e9, 0.0), AUTO_MAX_PARTITIONS);
    assert_eq!(auto_partitions(1e6, 1, 1.0, 1e-9), 1);
    // More learners or a bigger model never need fewer partitions.
    for k in 2..10 {
        assert!(auto_partitions(1e6, k + 1, 1e9, 1e-3) >= auto_partitions(1e6, k, 1e9, 1e-3));
        assert!(auto_partitions(2e6, k, 1e9, 1e-3) >= auto_partitions(1e6, k, 1e9, 1e-3));
    }
}

#[test]
fn options() {
    assert_eq!(Partitions::parse(None, None), Ok(Partitions::Auto { bandwidth_gb_s: DEFAULT_BANDWIDTH_GB_S }));
    assert_eq!(Partitions::parse(Some("AUTO"), Some("0.5")), Ok(Partitions::Auto { bandwidth_gb_s: 0.5 }));
    assert_eq!(Partitions::parse(Some(" 7 "), None), Ok(Partitions::Fixed(7)));
    for (p, b, needle) in [
        (Some("0"), None, "partitions must be at least 1, got 0"),
        (Some("-2"), None, "partitions=-2"),
        (Some("x"), None, "partitions=x"),
        (Some("2.5"), None, "partitions=2.5"),
        (None, Some("0"), "bandwidth=0"),
        (None, Some("nan"), "bandwidth=nan"),
        (None, Some("inf"), "bandwidth=inf"),
        (Some("3"), Some("1"), "only with partitions=auto"),
    ] {
        let e = Partitions::parse(p, b).unwrap_err();
        assert!(e.contains(needle), "{p:?} {b:?}: {e}");
    }
    let a = Ako::from_options(Some("4"), None).unwrap();
    assert_eq!(Synchroniser::<CpuBackend>::settings(&a).to_string(), "partitions=4");
    let a = Ako::from_options(None, Some("1.25")).unwrap();
    assert_eq!(Synchroniser::<CpuBackend>::settings(&a).to_string(), "partitions=auto bandwidth_gb_s=1.25 p=1");
    assert_eq!(a.current_partitions(), 1);
}

/// Once the engine has told it the model size, a fixed p reports the bytes each learner
/// sends per iteration: the largest partition, 4 bytes an element.
#[test]
fn settings_report_the_traffic() {
    let g = small_lenet();
    let e = engine(&g, 2, &[2], ako(4), sgd(), Schedule::Constant);
    let (name, s) = e.synchroniser();
    assert_eq!(name, "ako");
    let want = 4 * (0..4).map(|q| partition_range(g.param_len, 4, q).len()).max().unwrap();
    assert_eq!(s.get("sent_bytes_per_learner"), Some(&crossbow_replica::SettingValue::Int(want as i64)), "{s}");
}

// ---- Against S-SGD ----------------------------------------------------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(10))]

    /// With p = 1 Ako is S-SGD, bit for bit: z on every device and every replica, for random
    /// k, batch, learning rate, momentum (heavy ball or Nesterov), weight decay and device
    /// layout, across a learning-rate drop. Both run the same arithmetic in the same order
    /// (the gradients summed per device, all-reduced, scaled by 1/k, one momentum-SGD step on
    /// z, z copied into the replicas), so no tolerance is needed.
    #[test]
    fn one_partition_is_ssgd_bit_for_bit(
        k in 1usize..6, b in 1usize..5, lr in 0.001f32..0.2, momentum in 0.0f32..0.95,
        nesterov in any::<bool>(), decay in any::<bool>(), split in any::<bool>(), seed in any::<u64>(),
    ) {
        let g = small_lenet();
        let cfg = SgdConfig { lr, momentum, weight_decay: if decay { 1e-3 } else { 0.0 }, nesterov: nesterov && momentum > 0.0 };
        let layout = if split && k >= 2 { vec![k / 2, k - k / 2] } else { vec![k] };
        // k·b samples an iteration; an epoch of 3 iterations: the rate drops at iteration 3.
        let sched = Schedule::MultiStep { milestones: vec![1.0], gamma: 0.1 };
        let mut a = engine(&g, b, &layout, ako(1), cfg, sched.clone());
        let mut s = engine(&g, b, &layout, Box::new(SSgd::default()), cfg, sched);
        for t in 0..5 {
            for e in [&mut a, &mut s] {
                let bs = (0..k).map(|j| batch(&g, b, seed, t, j)).collect();
                e.step(bs, 3 * k * b).unwrap();
            }
            for d in 0..layout.len() {
                assert_same(&a.central_to_host(d).unwrap(), &s.central_to_host(d).unwrap(), &format!("z on device {d}, iteration {t}"));
            }
            for (x, y) in all_params(&a).iter().zip(&all_params(&s)) {
                assert_same(x, y, &format!("replica, iteration {t}"));
            }
        }
    }

    /// One learner has no one to exchange with: whatever p (fixed or auto), Ako is momentum
    /// SGD, bit for bit S-SGD with one learner.
    #[test]
    fn one_learner_is_momentum_sgd_for_any_p(p in 0usize..9, nesterov in any::<bool>(), seed in any::<u64>()) {
        let g = small_lenet();
        let cfg = SgdConfig { nesterov, ..sgd() };
        let rule = if p == 0 { Partitions::Auto { bandwidth_gb_s: 1e-9 } } else { Partitions::Fixed(p) };
        let mut a = engine(&g, 3, &[1], Box::new(Ako::new(rule)), cfg, Schedule::Constant);
        let mut s = engine(&g, 3, &[1], Box::new(SSgd::default()), cfg, Schedule::Constant);
        for t in 0..8 {
            step(&mut a, &g, 3, seed, t);
            step(&mut s, &g, 3, seed, t);
            assert_same(&a.central_to_host(0).unwrap(), &s.central_to_host(0).unwrap(), &format!("z, iteration {t}"));
            assert_same(&a.learner_params(0, 0).unwrap(), &s.learner_params(0, 0).unwrap(), &format!("replica, iteration {t}"));
        }
    }
}

// ---- Every gradient reaches every learner within p iterations -----------------------------

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// Learners start equal; only the first iteration has gradients, afterwards they are
    /// zero; plain SGD (no momentum, no decay). After iteration t, learner i holds its own
    /// gradient everywhere and learner j's gradient exactly on the partitions j has sent
    /// (iterations 0..=t), and z holds every sent partition once: so within p iterations
    /// every element of every gradient has reached every learner, all replicas equal z, and
    /// after that nothing moves (nothing is sent twice). Before iteration p − 1 (p, k >= 2)
    /// the replicas still differ: the exchange really is partial.
    #[test]
    fn every_gradient_reaches_every_learner_within_p_iterations(k in 2usize..6, p in 1usize..8, len in 1usize..120, lr in 0.01f32..1.0, seed in any::<u64>()) {
        let z0 = random_vec(seed, len, 1.0);
        let g0: Vec<Vec<f32>> = (0..k).map(|j| random_vec(seed ^ ((j as u64 + 1) * 0x9e37), len, 1.0)).collect();
        let zero = vec![vec![0.0f32; len]; k];
        let cfg = SgdConfig::plain(lr);
        let mut drv = SyncDriver::new(Box::new(Ako::new(Partitions::Fixed(p))), k, std::slice::from_ref(&z0));
        let pe = effective_partitions(p, k, len);
        let scale = lr as f64 / k as f64;
        let tol = Tolerance::new(1e-5, 1e-6);
        for t in 0..(pe as u64 + 3) {
            drv.step(cfg, if t == 0 { &g0 } else { &zero });
            // sent[j][e]: learner j's element e has gone out by now.
            let sent = |j: usize, e: usize| (0..=t.min(pe as u64 - 1)).any(|s| partition_range(len, pe, partition_sent(s, j, pe)).contains(&e));
            let z = drv.z();
            let want_z: Vec<f32> = (0..len).map(|e| (z0[e] as f64 - scale * (0..k).filter(|&j| sent(j, e)).map(|j| g0[j][e] as f64).sum::<f64>()) as f32).collect();
            assert_close_f32(&z, &want_z, tol, &format!("z after iteration {t}"));
            for i in 0..k {
                let want: Vec<f32> = (0..len).map(|e| {
                    let got: f64 = (0..k).filter(|&j| j == i || sent(j, e)).map(|j| g0[j][e] as f64).sum();
                    (z0[e] as f64 - scale * got) as f32
                }).collect();
                assert_close_f32(&drv.params(i), &want, tol, &format!("learner {i} after iteration {t}"));
            }
            if t + 1 >= pe as u64 {
                for i in 0..k {
                    assert_same(&drv.params(i), &z, &format!("learner {i} equals z after iteration {t} (p = {pe})"));
                }
            } else if pe >= 2 {
                prop_assert!((0..k).any(|i| drv.params(i) != z), "iteration {}: replicas equal z before every partition went out", t);
            }
        }
    }
}

// ---- The engine against a reference that tracks every gradient ---------------------------

/// Ako on the host in f64, fed the gradients the engine computed: per slot the accumulated
/// gradient and the unsent local steps, and z with its momentum.
struct Reference {
    z: Vec<f64>,
    v: Vec<f64>,
    acc: std::collections::BTreeMap<usize, (Vec<f64>, Vec<f64>)>,
}

impl Reference {
    fn new(z: &[f32], slots: &[usize]) -> Self {
        let n = z.len();
        Reference {
            z: z.iter().map(|&x| x as f64).collect(),
            v: vec![0.0; n],
            acc: slots.iter().map(|&s| (s, (vec![0.0; n], vec![0.0; n]))).collect(),
        }
    }

    /// The engine's learners changed to `slots`: new ones start empty, removed ones take
    /// their unsent gradient with them, and one learner left becomes z.
    fn learners_changed(&mut self, slots: &[usize]) {
        let n = self.z.len();
        self.acc.retain(|s, _| slots.contains(s));
        for &s in slots {
            self.acc.entry(s).or_insert_with(|| (vec![0.0; n], vec![0.0; n]));
        }
        if slots.len() == 1 {
            let (a, d) = self.acc.values_mut().next().unwrap();
            for e in 0..n {
                self.z[e] += d[e];
                a[e] = 0.0;
                d[e] = 0.0;
            }
        }
    }

    #[allow(clippy::needless_range_loop)] // The update reads as the equations, element by element.
    fn step(&mut self, t: u64, cfg: &SgdConfig, p: usize, grads: &[(usize, Vec<f32>)]) {
        let n = self.z.len();
        let k = grads.len();
        let pe = effective_partitions(p, k, n);
        let (lr, mu, wd) = (cfg.lr as f64, cfg.momentum as f64, cfg.weight_decay as f64);
        let mut total = vec![0.0; n];
        for (slot, g) in grads {
            let (a, d) = self.acc.get_mut(slot).unwrap();
            let r = partition_range(n, pe, partition_sent(t, *slot, pe));
            for e in 0..n {
                a[e] += g[e] as f64;
                if pe > 1 {
                    d[e] -= lr / k as f64 * g[e] as f64;
                }
            }
            for e in r {
                total[e] += a[e];
                a[e] = 0.0;
                d[e] = 0.0;
            }
        }
        for e in 0..n {
            self.v[e] = mu * self.v[e] - lr * (total[e] / k as f64 + wd * self.z[e]);
            self.z[e] += self.v[e];
        }
    }
}

fn slots(e: &Engine<CpuBackend>) -> Vec<usize> {
    let mut v = vec![];
    for (d, &m) in e.layout().iter().enumerate() {
        for j in 0..m {
            v.push(e.learner(d, j).unwrap().slot());
        }
    }
    v
}

fn grads(e: &Engine<CpuBackend>) -> Vec<(usize, Vec<f32>)> {
    let len = e.graph().param_len;
    let mut out = vec![];
    for (d, &m) in e.layout().iter().enumerate() {
        for j in 0..m {
            let l = e.learner(d, j).unwrap();
            let mut g = vec![0.0; len];
            l.backend().download(View::new(&l.replica().grads, 0..len).unwrap(), &mut g).unwrap();
            out.push((l.slot(), g));
        }
    }
    out
}

#[track_caller]
fn assert_matches_reference(e: &Engine<CpuBackend>, r: &Reference, what: &str) {
    let tol = Tolerance::new(2e-4, 2e-6);
    let f = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    assert_close_f32(&e.central_to_host(0).unwrap(), &f(&r.z), tol, &format!("{what}: z"));
    let snap = e.snapshot().unwrap();
    for l in snap.devices.iter().flat_map(|d| &d.learners) {
        let (a, d) = &r.acc[&l.slot];
        assert_close_f32(&l.sync_buffers[0], &f(a), tol, &format!("{what}: unsent gradient of slot {}", l.slot));
        assert_close_f32(&l.sync_buffers[1], &f(d), tol, &format!("{what}: unsent steps of slot {}", l.slot));
    }
}

/// Learners added and removed by the engine (the tuner's moves), on two devices, with
/// momentum and weight decay: at every iteration z, every accumulator and every replica match
/// a reference that follows each gradient from the learner that computed it to z — so no
/// partition is lost or applied twice by a change — and the learners stay consistent
/// (`w_j = z + d_j` bit for bit, z copies equal, all finite).
#[test]
fn learners_added_and_removed_lose_nothing_sent() {
    let g = small_lenet();
    let cfg = sgd();
    let p = 3;
    let mut e = engine(&g, 3, &[2, 1], ako(p), cfg, Schedule::Constant);
    let mut r = Reference::new(&e.central_to_host(0).unwrap(), &slots(&e));
    for t in 0..16u64 {
        match t {
            4 | 6 => e.add_learner(if t == 4 { 1 } else { 0 }).unwrap(),
            9 => e.remove_learner(1).unwrap(),
            12 => e.remove_learner(0).unwrap(),
            _ => {}
        }
        if matches!(t, 4 | 6 | 9 | 12) {
            r.learners_changed(&slots(&e));
            assert_consistent(&e, &format!("after the change before iteration {t}"));
        }
        step(&mut e, &g, 3, 11, t);
        r.step(t, &cfg, p, &grads(&e));
        let what = format!("iteration {t}, layout {:?}", e.layout());
        assert_matches_reference(&e, &r, &what);
        assert_consistent(&e, &what);
    }
    // Removed learners took only what they had not sent: the others still hold unsent work.
    let snap = e.snapshot().unwrap();
    assert!(snap.devices.iter().flat_map(|d| &d.learners).any(|l| l.sync_buffers[0].iter().any(|&x| x != 0.0)));
}

/// Down to one learner: z becomes its replica, its buffers are emptied, and from there it is
/// momentum SGD — bit for bit S-SGD with one learner started from the same state.
#[test]
fn one_learner_left_is_momentum_sgd() {
    let g = small_lenet();
    let mut e = engine(&g, 3, &[3], ako(3), sgd(), Schedule::Constant);
    for t in 0..5 {
        step(&mut e, &g, 3, 2, t);
    }
    let before = e.learner_params(0, 0).unwrap();
    e.remove_learner(0).unwrap();
    e.remove_learner(0).unwrap();
    assert_eq!(e.learners(), 1);
    let w = e.learner_params(0, 0).unwrap();
    assert_same(&w, &before, "the remaining learner is untouched");
    assert_same(&e.central_to_host(0).unwrap(), &w, "z becomes the remaining learner");
    let snap = e.snapshot().unwrap();
    for b in &snap.devices[0].learners[0].sync_buffers {
        assert!(b.iter().all(|&x| x == 0.0), "buffers emptied");
    }
    let mut s = engine(&g, 3, &[1], Box::new(SSgd::default()), sgd(), Schedule::Constant);
    let notes = s.restore(&snap).unwrap();
    assert!(notes.is_empty() || notes.iter().all(|n| !n.contains("dropped")), "{notes:?}");
    for t in 5..10 {
        step(&mut e, &g, 3, 2, t);
        step(&mut s, &g, 3, 2, t);
        assert_same(&e.central_to_host(0).unwrap(), &s.central_to_host(0).unwrap(), &format!("z, iteration {t}"));
        assert_same(&e.learner_params(0, 0).unwrap(), &s.learner_params(0, 0).unwrap(), &format!("w, iteration {t}"));
    }
}

/// A run stopped and restored from a snapshot continues bit for bit (fixed p: the whole
/// state is in the engine's buffers).
#[test]
fn a_restored_run_continues_exactly() {
    let g = small_lenet();
    let mut a = engine(&g, 3, &[2, 1], ako(4), sgd(), Schedule::Constant);
    let mut b = engine(&g, 3, &[2, 1], ako(4), sgd(), Schedule::Constant);
    for t in 0..3 {
        step(&mut a, &g, 3, 8, t);
        step(&mut b, &g, 3, 8, t);
    }
    let snap = b.snapshot().unwrap();
    let mut c = engine(&g, 3, &[2, 1], ako(4), sgd(), Schedule::Constant);
    assert!(c.restore(&snap).unwrap().is_empty());
    for t in 3..7 {
        step(&mut a, &g, 3, 8, t);
        step(&mut c, &g, 3, 8, t);
    }
    assert_same(&a.central_to_host(1).unwrap(), &c.central_to_host(1).unwrap(), "z");
    for (x, y) in all_params(&a).iter().zip(&all_params(&c)) {
        assert_same(x, y, "replicas");
    }
}

/// `partitions=auto` measures, then decides: a tiny declared bandwidth makes it exchange
/// partially (unsent gradients remain after an iteration), a huge one keeps p = 1 (nothing
/// remains); the learners stay consistent across the switch.
#[test]
fn auto_decides_from_the_bandwidth() {
    let g = small_lenet();
    let unsent = |e: &Engine<CpuBackend>| -> usize {
        let snap = e.snapshot().unwrap();
        snap.devices
            .iter()
            .flat_map(|d| &d.learners)
            .map(|l| l.sync_buffers[0].iter().filter(|&&x| x != 0.0).count())
            .sum()
    };
    for (bandwidth, partial) in [(1e-9, true), (1e9, false)] {
        let sync = Box::new(Ako::new(Partitions::Auto { bandwidth_gb_s: bandwidth }));
        let mut e = engine(&g, 3, &[3], sync, sgd(), Schedule::Constant);
        for t in 0..=AUTO_WARMUP_ITERATIONS as u64 {
            step(&mut e, &g, 3, 4, t);
            assert_eq!(unsent(&e), 0, "bandwidth {bandwidth}: p = 1 while measuring (iteration {t})");
        }
        for t in AUTO_WARMUP_ITERATIONS as u64 + 1..AUTO_WARMUP_ITERATIONS as u64 + 4 {
            step(&mut e, &g, 3, 4, t);
            assert_consistent(&e, &format!("bandwidth {bandwidth}, iteration {t}"));
        }
        assert_eq!(unsent(&e) > 0, partial, "bandwidth {bandwidth}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3))]

    /// With learning rate 0 and weight decay 0 nothing moves: z and every replica stay bit for
    /// bit at the initial model for 40 iterations, for k in 1..=5, fixed and automatic p (the
    /// automatic one switching to partial exchange on the way), one or two devices, a learner
    /// added and one removed, and a schedule "drop" (0 x 0.1).
    #[test]
    fn nothing_moves_at_learning_rate_zero(momentum in 0.0f32..0.99, split in any::<bool>(), seed in any::<u64>()) {
        let g = small_lenet();
        let cfg = SgdConfig { lr: 0.0, momentum, weight_decay: 0.0, nesterov: false };
        for k in 1usize..=5 {
            for rule in [Partitions::Fixed(1), Partitions::Fixed(2), Partitions::Fixed(3), Partitions::Auto { bandwidth_gb_s: 1e-9 }] {
                let layout = if k >= 2 && split { vec![k / 2, k - k / 2] } else { vec![k] };
                let sched = Schedule::MultiStep { milestones: vec![0.5], gamma: 0.1 };
                let mut e = engine(&g, 2, &layout, Box::new(Ako::new(rule)), cfg, sched);
                let init = e.central_to_host(0).unwrap();
                for t in 0..40u64 {
                    if t == 15 {
                        e.add_learner(0).unwrap();
                    }
                    if t == 28 {
                        e.remove_learner(0).unwrap();
                    }
                    let bs = (0..e.learners()).map(|j| batch(&g, 2, seed, t, j)).collect();
                    e.step(bs, 200).unwrap();
                }
                let what = format!("{rule:?}, k = {k}, layout {layout:?}");
                for d in 0..layout.len() {
                    assert_same(&e.central_to_host(d).unwrap(), &init, &format!("z, {what}"));
                }
                for w in all_params(&e) {
                    assert_same(&w, &init, &format!("replica, {what}"));
                }
            }
        }
    }
}

// ---- On every backend (CPU, the GPU kernel emulator, a real GPU) ---------------------------

crossbow_kernels::test_backends! {
    ako_on_every_backend,
}

/// A small convolutional net the GPU kernel emulator runs quickly.
fn tiny_conv_net() -> Graph {
    let mut b = crossbow_replica::GraphBuilder::new("tiny", Shape::new(vec![1, 6, 6])).unwrap();
    let x = b.input();
    let c = b.conv2d("c", x, 3, 3, 1, 1, true).unwrap();
    let r = b.relu("r", c).unwrap();
    let p = b.max_pool("p", r, 2, 2, 0, false).unwrap();
    let out = b.linear("fc", p, 4, true).unwrap();
    b.finish(out).unwrap()
}

fn engine_on<B: crossbow_kernels::testing::TestBackend>(
    be: &B,
    g: &Graph,
    layout: &[usize],
    sync: Box<dyn Synchroniser<B>>,
    sgd: SgdConfig,
) -> Engine<B> {
    let cfg = EngineConfig { batch_size: 2, sgd, schedule: Schedule::Constant, seed: 5, eval_batch_size: 8 };
    let devices = crossbow_replica::testing::TestDevices::new(be, layout.len()).unwrap();
    Engine::new(g.clone(), cfg, Box::new(devices), sync, Box::new(HostAllReduce), layout).unwrap()
}

/// On each backend: with learning rate 0 nothing moves (k = 1..3, p = 1 and 2), p = 1 is
/// S-SGD bit for bit, and with p = 3 every replica is z plus its unsent steps.
fn ako_on_every_backend<B: crossbow_kernels::testing::TestBackend>(be: &B) {
    let g = tiny_conv_net();
    let len = g.param_len;
    let frozen = SgdConfig { lr: 0.0, momentum: 0.9, weight_decay: 0.0, nesterov: false };
    for k in 1usize..=3 {
        for p in [1, 2] {
            let mut e = engine_on(be, &g, &[k], Box::new(Ako::new(Partitions::Fixed(p))), frozen);
            let init = e.central_to_host(0).unwrap();
            for t in 0..6 {
                let bs = (0..k).map(|j| batch(&g, 2, 3, t, j)).collect();
                e.step(bs, 1000).unwrap();
            }
            assert_same(&e.central_to_host(0).unwrap(), &init, &format!("k = {k}, p = {p}: z"));
            for j in 0..k {
                assert_same(&e.learner_params(0, j).unwrap(), &init, &format!("k = {k}, p = {p}: replica {j}"));
            }
        }
    }
    let mut a = engine_on(be, &g, &[2], Box::new(Ako::new(Partitions::Fixed(1))), sgd());
    let mut s = engine_on(be, &g, &[2], Box::new(SSgd::default()), sgd());
    let mut c = engine_on(be, &g, &[3], Box::new(Ako::new(Partitions::Fixed(3))), sgd());
    for t in 0..5 {
        a.step((0..2).map(|j| batch(&g, 2, 4, t, j)).collect(), 1000).unwrap();
        s.step((0..2).map(|j| batch(&g, 2, 4, t, j)).collect(), 1000).unwrap();
        c.step((0..3).map(|j| batch(&g, 2, 4, t, j)).collect(), 1000).unwrap();
        assert_same(&a.central_to_host(0).unwrap(), &s.central_to_host(0).unwrap(), "p = 1: Ako vs S-SGD");
        let snap = c.snapshot().unwrap();
        let z = &snap.devices[0].z;
        for l in &snap.devices[0].learners {
            let zd: Vec<f32> = (0..len).map(|i| z[i] + l.sync_buffers[1][i]).collect();
            assert_same(&l.params, &zd, "p = 3: w = z + d");
        }
    }
}

/// Issue 26, item 12: with several ranks, `partitions=auto` is decided by rank 0 and applied
/// by every rank from the same iteration: here rank 0's declared bandwidth makes it pick a
/// large `p` and rank 1's a `p` of 1, yet both run rank 0's, and their central models stay
/// bit-identical. A fixed `p` above the parameter count is refused when the engine starts.
#[test]
fn ranks_apply_rank_0s_automatic_partitions() {
    use crossbow_replica::testing::ThreadGroup;
    let g = small_lenet();
    let groups = ThreadGroup::group(2);
    let handles: Vec<_> = groups
        .into_iter()
        .map(|world| {
            let g = g.clone();
            std::thread::spawn(move || {
                let bandwidth = if crossbow_replica::ProcessGroup::rank(&world) == 0 { 1e-9 } else { 1e9 };
                let cfg = EngineConfig {
                    batch_size: 3,
                    sgd: sgd(),
                    schedule: Schedule::Constant,
                    seed: 5,
                    eval_batch_size: 8,
                };
                let mut e = Engine::in_world(
                    g.clone(),
                    cfg,
                    Box::new(CpuDevices { count: 1, threads: 1 }),
                    Box::new(Ako::new(Partitions::Auto { bandwidth_gb_s: bandwidth })),
                    Box::new(HostAllReduce),
                    &[2],
                    std::sync::Arc::new(world),
                )
                .unwrap();
                let mut ps = vec![];
                for t in 0..AUTO_WARMUP_ITERATIONS as u64 + 4 {
                    let offset = e.learner_offset();
                    let bs = (0..e.learners()).map(|j| batch(&g, 3, 4, t, offset + j)).collect();
                    e.step(bs, EPOCH).unwrap();
                    ps.push(e.synchroniser().1.get("p").map(|v| v.to_string()).unwrap_or_default());
                }
                (ps, e.central_to_host(0).unwrap())
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results[0].0, results[1].0, "the ranks ran different p");
    assert_ne!(results[0].0.last().map(String::as_str), Some("1"), "rank 0's tiny bandwidth picks p > 1");
    assert_same(&results[0].1, &results[1].1, "z of rank 0 vs rank 1");
    // Refused, not clamped.
    let cfg = EngineConfig { batch_size: 3, sgd: sgd(), schedule: Schedule::Constant, seed: 5, eval_batch_size: 8 };
    let e = Engine::new(
        g.clone(),
        cfg,
        Box::new(CpuDevices { count: 1, threads: 1 }),
        ako(g.param_len + 1),
        Box::new(HostAllReduce),
        &[2],
    );
    let msg = e.err().unwrap().to_string();
    assert!(msg.contains(&format!("partitions={}", g.param_len + 1)) && msg.contains("parameters"), "{msg}");
}
