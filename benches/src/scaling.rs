//! A cost model of data-parallel training on servers of GPUs: an alpha-beta model of ring
//! all-reduce (NVLink inside a server, the network across servers) and a linear model of each
//! GPU's compute time, giving iteration time, images/s, scaling efficiency and the bytes sent per
//! image for S-SGD and for SMA with k learners per GPU, with the learners summed on the GPU before
//! one all-reduce (hierarchical, as crossbow's engine does it) or all-reduced one by one.
//!
//! These are **predictions**. The inputs (bus bandwidths, latencies, GPU throughput) and where
//! each one comes from are in docs/results/scaling-model/NOTES.md (§12.2); `scaling-model` prints the tables, and
//! `scaling-model fit` checks the all-reduce part against MPI_Allreduce measured on this machine.

/// One level of the all-reduce: a ring whose members are joined by links of this kind.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    /// Latency of one ring step, seconds (alpha).
    pub alpha_s: f64,
    /// Bus bandwidth in bytes/s, as nccl-tests reports it (`busbw`): the all-reduce of `S`
    /// bytes over `p` members moves `2(p-1)/p · S` bytes through each member's link.
    pub busbw: f64,
}

/// Time of a ring all-reduce of `bytes` over `p` members:
/// `2(p-1)·alpha + 2(p-1)/p · bytes / busbw` (reduce-scatter, then all-gather; `p-1` steps
/// each). Zero for `p <= 1`: nothing to exchange.
pub fn ring_allreduce_seconds(p: usize, bytes: f64, link: Link) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    let steps = 2.0 * (p as f64 - 1.0);
    steps * link.alpha_s + ring_bytes_sent(p, bytes) / link.busbw
}

/// Bytes each member sends (and receives) in a ring all-reduce of `bytes` over `p` members:
/// `2(p-1)/p · bytes`; zero for `p <= 1`.
pub fn ring_bytes_sent(p: usize, bytes: f64) -> f64 {
    if p <= 1 {
        return 0.0;
    }
    2.0 * (p as f64 - 1.0) / p as f64 * bytes
}

/// Servers of GPUs: NVLink (or another fabric) inside a server, a network across servers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cluster {
    /// Number of servers, N.
    pub servers: usize,
    /// GPUs per server, G.
    pub gpus_per_server: usize,
    /// The ring inside a server (nccl-tests single-server all-reduce busbw).
    pub intra: Link,
    /// The ring across servers; `busbw` is the whole server's (every NIC together).
    pub inter: Link,
    /// Fixed cost of one all-reduce call (launch, synchronisation), seconds; charged once per
    /// call when there is more than one GPU.
    pub call_s: f64,
}

impl Cluster {
    /// GPUs in the cluster.
    pub fn gpus(&self) -> usize {
        self.servers * self.gpus_per_server
    }

    /// Time of one two-level all-reduce of `bytes` from every GPU: a reduce-scatter inside each
    /// server, G rings across servers (one per shard of `bytes/G`, sharing the server's NICs),
    /// then an all-gather inside each server:
    /// `call + ring(G, S, intra) + ring(N, S, inter)`, where the inter-server ring carries the
    /// whole `S` per server through `inter.busbw`. Zero on one GPU.
    pub fn allreduce_seconds(&self, bytes: f64) -> f64 {
        if self.gpus() <= 1 {
            return 0.0;
        }
        self.call_s
            + ring_allreduce_seconds(self.gpus_per_server, bytes, self.intra)
            + ring_allreduce_seconds(self.servers, bytes, self.inter)
    }

    /// Bytes one server sends into the network for one all-reduce of `bytes`: `2(N-1)/N · S`.
    pub fn network_bytes_per_server(&self, bytes: f64) -> f64 {
        ring_bytes_sent(self.servers, bytes)
    }

    /// Bytes one GPU sends over the intra-server fabric for one all-reduce: `2(G-1)/G · S`.
    pub fn intra_bytes_per_gpu(&self, bytes: f64) -> f64 {
        ring_bytes_sent(self.gpus_per_server, bytes)
    }
}

/// A GPU's compute time for one iteration of `images` images: `fixed_s + images / peak`
/// (a fixed cost per iteration — launches, the optimiser step, the framework — plus a
/// per-image cost; throughput `images / time` rises with the batch towards `peak`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Compute {
    /// Fixed cost of one iteration, seconds.
    pub fixed_s: f64,
    /// Images/s of one GPU at a batch large enough to hide the fixed cost.
    pub peak_images_per_s: f64,
}

impl Compute {
    /// Seconds to train on `images` images in one iteration.
    pub fn seconds(&self, images: f64) -> f64 {
        self.fixed_s + images / self.peak_images_per_s
    }

    /// The compute model through one published point: `images_per_s` at batch `batch`, with
    /// the given fixed cost. Errors when the point is not reachable with that fixed cost.
    pub fn through(batch: f64, images_per_s: f64, fixed_s: f64) -> Result<Compute, String> {
        let per_batch = batch / images_per_s - fixed_s;
        if !(per_batch.is_finite() && per_batch > 0.0) {
            return Err(format!(
                "{images_per_s} images/s at batch {batch} leaves no time per image after a fixed \
                 cost of {fixed_s} s per iteration"
            ));
        }
        Ok(Compute { fixed_s, peak_images_per_s: batch / per_batch })
    }
}

/// How the synchroniser exchanges its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// S-SGD: each GPU's gradient (the sum over its learners) all-reduced once per iteration.
    SSgd,
    /// SMA as crossbow runs it: the k learners' corrections summed on the GPU, then one
    /// all-reduce per GPU (process) per iteration.
    SmaHierarchical,
    /// SMA without the sum on the GPU: one all-reduce per learner per iteration.
    SmaPerLearner,
}

impl Algorithm {
    /// All-reduces of the model-sized buffer each GPU takes part in per iteration.
    pub fn allreduces_per_gpu(self, learners: usize) -> usize {
        match self {
            Algorithm::SSgd | Algorithm::SmaHierarchical => 1,
            Algorithm::SmaPerLearner => learners,
        }
    }
}

/// Whether communication overlaps computation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// The all-reduce starts after the GPU's learners finish (crossbow's `Engine::step`
    /// today): `t = compute + comm`.
    None,
    /// The all-reduce runs entirely under compute (the best any overlap can do):
    /// `t = max(compute, comm)`.
    Full,
}

/// A model to train and how each learner is fed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    /// Trainable parameters.
    pub params: usize,
    /// Bytes per exchanged value (4: f32, as crossbow exchanges them).
    pub bytes_per_param: usize,
    /// Images per learner per iteration, b.
    pub batch: usize,
    /// One GPU's compute model.
    pub compute: Compute,
}

impl Workload {
    /// Bytes of the exchanged buffer, S.
    pub fn buffer_bytes(&self) -> f64 {
        (self.params * self.bytes_per_param) as f64
    }
}

/// What the model predicts for one configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// Compute time per iteration on one GPU, seconds.
    pub compute_s: f64,
    /// Communication time per iteration, seconds.
    pub comm_s: f64,
    /// Iteration time, seconds.
    pub iteration_s: f64,
    /// Images/s of the whole cluster.
    pub images_per_s: f64,
    /// Bytes sent into the network per image trained (per server per iteration, over the
    /// server's images per iteration).
    pub network_bytes_per_image: f64,
    /// Bytes one GPU sends over the intra-server fabric per image it trains.
    pub intra_bytes_per_image: f64,
}

/// Predicts one iteration of `algorithm` with `learners` learners per GPU (each of batch
/// `workload.batch`) on `cluster`. The k learners of a GPU are assumed to take the compute
/// time of one batch of `k·b` (they run concurrently on their own streams: the fixed cost is
/// paid once). Errors on zero learners, batch or GPUs.
pub fn predict(
    cluster: &Cluster,
    workload: &Workload,
    algorithm: Algorithm,
    learners: usize,
    overlap: Overlap,
) -> Result<Prediction, String> {
    if learners == 0 || workload.batch == 0 || cluster.gpus() == 0 {
        return Err(format!(
            "need at least one learner, one image per batch and one GPU (learners {learners}, \
             batch {}, servers {} x {} GPUs)",
            workload.batch, cluster.servers, cluster.gpus_per_server
        ));
    }
    let images_per_gpu = (learners * workload.batch) as f64;
    let compute_s = workload.compute.seconds(images_per_gpu);
    let calls = algorithm.allreduces_per_gpu(learners) as f64;
    let s = workload.buffer_bytes();
    let comm_s = calls * cluster.allreduce_seconds(s);
    let iteration_s = match overlap {
        Overlap::None => compute_s + comm_s,
        Overlap::Full => compute_s.max(comm_s),
    };
    let gpus = cluster.gpus() as f64;
    Ok(Prediction {
        compute_s,
        comm_s,
        iteration_s,
        images_per_s: gpus * images_per_gpu / iteration_s,
        network_bytes_per_image: calls * cluster.network_bytes_per_server(s)
            / (cluster.gpus_per_server as f64 * images_per_gpu),
        intra_bytes_per_image: calls * cluster.intra_bytes_per_gpu(s) / images_per_gpu,
    })
}

/// Scaling efficiency of `many` against `one`, predicted for `one_servers` and `many_servers`
/// servers: `(images/s of many) / (servers ratio · images/s of one)`.
pub fn scaling_efficiency(one: &Prediction, one_servers: usize, many: &Prediction, many_servers: usize) -> f64 {
    many.images_per_s / (one.images_per_s * many_servers as f64 / one_servers as f64)
}

/// The median of `xs` (mean of the middle two for an even count); `None` when empty or when a
/// value is NaN.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() || xs.iter().any(|x| x.is_nan()) {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) })
}

/// Fits `alpha` and `busbw` of a ring all-reduce over `p` members to measured
/// `(bytes, seconds)` points: a least-squares line `t = c0 + c1·S` weighted by `1/t²` (so small
/// and large messages count alike, in relative error), then `alpha = c0 / (2(p-1))` and
/// `busbw = 2(p-1)/p / c1`. Errors with fewer than two distinct sizes, with `p < 2`, or when the
/// fitted latency or slope is not positive.
pub fn fit_ring(p: usize, points: &[(f64, f64)]) -> Result<Link, String> {
    if p < 2 {
        return Err(format!("a ring needs at least 2 members to fit, got {p}"));
    }
    if let Some(&(b, t)) = points.iter().find(|(b, t)| !(b.is_finite() && *b >= 0.0 && t.is_finite() && *t > 0.0)) {
        return Err(format!("bad point ({b} bytes, {t} s): need bytes >= 0 and seconds > 0"));
    }
    let first = points.first().map(|p| p.0);
    if points.len() < 2 || points.iter().all(|q| Some(q.0) == first) {
        return Err(format!("need at least two distinct message sizes to fit, got {} point(s)", points.len()));
    }
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x, y) in points {
        let w = 1.0 / (y * y);
        sw += w;
        sx += w * x;
        sy += w * y;
        sxx += w * x * x;
        sxy += w * x * y;
    }
    let det = sw * sxx - sx * sx;
    let c1 = (sw * sxy - sx * sy) / det;
    let c0 = (sy - c1 * sx) / sw;
    if !(c0 > 0.0 && c1 > 0.0) {
        return Err(format!(
            "the fit t = {c0:.3e} s + S * {c1:.3e} s/B has a latency or slope that is not positive; \
             measure more sizes or repeat on a quieter machine"
        ));
    }
    let steps = 2.0 * (p as f64 - 1.0);
    Ok(Link { alpha_s: c0 / steps, busbw: steps / p as f64 / c1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: f64 = 1e9;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1e-300)
    }

    fn cluster(servers: usize, net_busbw: f64) -> Cluster {
        Cluster {
            servers,
            gpus_per_server: 8,
            intra: Link { alpha_s: 3.4e-6, busbw: 232.0 * GB },
            inter: Link { alpha_s: 9.6e-6, busbw: net_busbw },
            call_s: 8.4e-6,
        }
    }

    fn resnet50() -> Workload {
        Workload {
            params: 25_557_032,
            bytes_per_param: 4,
            batch: 64,
            compute: Compute { fixed_s: 5e-3, peak_images_per_s: 2600.0 },
        }
    }

    #[test]
    fn ring_formula_matches_hand_computed_values() {
        let link = Link { alpha_s: 5e-6, busbw: 10.0 * GB };
        // p = 2, 1 MB: 2·1·5 µs + 2·1/2 · 1e6 / 1e10 s = 10 µs + 100 µs.
        assert!(close(ring_allreduce_seconds(2, 1e6, link), 110e-6));
        // p = 8, 100 MB: 14·5 µs + 14/8 · 1e8 / 1e10 = 70 µs + 17.5 ms.
        assert!(close(ring_allreduce_seconds(8, 1e8, link), 70e-6 + 17.5e-3));
        // p = 4, 0 bytes: latency only, 6 steps.
        assert!(close(ring_allreduce_seconds(4, 0.0, link), 30e-6));
        assert!(close(ring_bytes_sent(4, 1e6), 1.5e6));
        // Two-level: 2 servers of 8, 1e8 B, 8.4 µs call + ring(8) over NVLink + ring(2) network.
        let c = cluster(2, 192.0 * GB);
        let want = 8.4e-6 + (14.0 * 3.4e-6 + 1.75e8 / 232e9) + (2.0 * 9.6e-6 + 1e8 / 192e9);
        assert!(close(c.allreduce_seconds(1e8), want), "{} vs {want}", c.allreduce_seconds(1e8));
        assert!(close(c.network_bytes_per_server(1e8), 1e8));
        assert!(close(c.intra_bytes_per_gpu(1e8), 1.75e8));
    }

    #[test]
    fn one_member_or_one_gpu_communicates_nothing() {
        let link = Link { alpha_s: 5e-6, busbw: GB };
        assert_eq!(ring_allreduce_seconds(1, 1e9, link), 0.0);
        assert_eq!(ring_allreduce_seconds(0, 1e9, link), 0.0);
        assert_eq!(ring_bytes_sent(1, 1e9), 0.0);
        let one = Cluster { servers: 1, gpus_per_server: 1, ..cluster(1, GB) };
        assert_eq!(one.allreduce_seconds(1e9), 0.0);
        let p = predict(&one, &resnet50(), Algorithm::SmaPerLearner, 4, Overlap::None).unwrap();
        assert_eq!(p.comm_s, 0.0);
        assert_eq!(p.network_bytes_per_image, 0.0);
        assert_eq!(p.intra_bytes_per_image, 0.0);
        assert!(close(p.iteration_s, p.compute_s));
        // One server: no network traffic, but NVLink traffic.
        let p = predict(&cluster(1, GB), &resnet50(), Algorithm::SSgd, 1, Overlap::None).unwrap();
        assert_eq!(p.network_bytes_per_image, 0.0);
        assert!(p.intra_bytes_per_image > 0.0 && p.comm_s > 0.0);
    }

    #[test]
    fn hierarchical_sma_traffic_per_image_falls_as_one_over_k() {
        let c = cluster(4, 96.0 * GB);
        let w = resnet50();
        let one = predict(&c, &w, Algorithm::SmaHierarchical, 1, Overlap::None).unwrap();
        for k in 1..=4 {
            let h = predict(&c, &w, Algorithm::SmaHierarchical, k, Overlap::None).unwrap();
            assert!(close(h.network_bytes_per_image * k as f64, one.network_bytes_per_image), "k={k}");
            assert!(close(h.intra_bytes_per_image * k as f64, one.intra_bytes_per_image), "k={k}");
            // Per learner: k all-reduces for k·b images, the same bytes per image as k = 1.
            let f = predict(&c, &w, Algorithm::SmaPerLearner, k, Overlap::None).unwrap();
            assert!(close(f.network_bytes_per_image, one.network_bytes_per_image), "k={k}");
            assert!(close(f.comm_s, k as f64 * h.comm_s), "k={k}");
            // S-SGD with k learners per GPU exchanges exactly what hierarchical SMA does.
            let s = predict(&c, &w, Algorithm::SSgd, k, Overlap::None).unwrap();
            assert_eq!(s, h);
        }
        // ResNet-50 on 4 servers: (2·3/4 · 102.2 MB) / (8·64) ≈ 150 kB per image at k = 1.
        assert!((one.network_bytes_per_image - 0.75 * 2.0 * 102_228_128.0 / 512.0).abs() < 1.0);
    }

    #[test]
    fn efficiency_is_at_most_one_and_monotonic_in_bandwidth() {
        let w = resnet50();
        for overlap in [Overlap::None, Overlap::Full] {
            for alg in [Algorithm::SSgd, Algorithm::SmaHierarchical, Algorithm::SmaPerLearner] {
                for k in 1..=4 {
                    let mut last_eff = 0.0;
                    for bw in [1.0, 12.0, 24.0, 96.0, 192.0, 384.0, 1e6] {
                        let one = predict(&cluster(1, bw * GB), &w, alg, k, overlap).unwrap();
                        let mut last_time = one.iteration_s;
                        let mut eff16 = 0.0;
                        for n in [2, 4, 8, 16] {
                            let many = predict(&cluster(n, bw * GB), &w, alg, k, overlap).unwrap();
                            let eff = scaling_efficiency(&one, 1, &many, n);
                            assert!(eff <= 1.0 + 1e-12 && eff > 0.0, "{alg:?} k={k} n={n} bw={bw}: {eff}");
                            // More servers never make an iteration shorter.
                            assert!(many.iteration_s >= last_time, "{alg:?} k={k} n={n} bw={bw}");
                            last_time = many.iteration_s;
                            eff16 = eff;
                        }
                        // More network bandwidth never lowers the efficiency on 16 servers.
                        assert!(eff16 >= last_eff - 1e-12, "{alg:?} k={k} bw={bw}: {eff16} < {last_eff}");
                        last_eff = eff16;
                    }
                }
            }
        }
        // More bandwidth never makes an iteration slower, at every size and both levels.
        let mut last = f64::INFINITY;
        for bw in [1.0, 2.0, 10.0, 100.0, 1000.0] {
            let link = Link { alpha_s: 1e-6, busbw: bw * GB };
            let t = ring_allreduce_seconds(16, 1e7, link);
            assert!(t < last);
            last = t;
        }
    }

    #[test]
    fn overlap_hides_communication_up_to_the_compute_time() {
        let c = cluster(16, 12.0 * GB);
        let w = resnet50();
        let none = predict(&c, &w, Algorithm::SSgd, 1, Overlap::None).unwrap();
        let full = predict(&c, &w, Algorithm::SSgd, 1, Overlap::Full).unwrap();
        assert!(close(none.iteration_s, none.compute_s + none.comm_s));
        assert!(close(full.iteration_s, full.compute_s.max(full.comm_s)));
        assert!(full.iteration_s <= none.iteration_s);
        assert!(predict(&c, &w, Algorithm::SSgd, 0, Overlap::None).is_err());
        assert!(predict(&c, &Workload { batch: 0, ..w }, Algorithm::SSgd, 1, Overlap::None).is_err());
    }

    #[test]
    fn compute_through_a_published_point() {
        // 2470 images/s at batch 256 with 5 ms fixed: 103.64 ms per iteration, 98.64 ms of it per image.
        let c = Compute::through(256.0, 2470.0, 5e-3).unwrap();
        assert!((c.seconds(256.0) - 256.0 / 2470.0).abs() < 1e-15);
        assert!((c.peak_images_per_s - 256.0 / (256.0 / 2470.0 - 5e-3)).abs() < 1e-9);
        assert!(Compute::through(256.0, 2470.0, 0.2).is_err());
    }

    #[test]
    fn the_fit_recovers_alpha_and_bandwidth() {
        let truth = Link { alpha_s: 0.7e-6, busbw: 6.5 * GB };
        let pts: Vec<(f64, f64)> =
            [4.0, 4096.0, 65536.0, 1e6, 1.6e7].iter().map(|&s| (s, ring_allreduce_seconds(2, s, truth))).collect();
        let fit = fit_ring(2, &pts).unwrap();
        assert!((fit.alpha_s / truth.alpha_s - 1.0).abs() < 1e-9, "{fit:?}");
        assert!((fit.busbw / truth.busbw - 1.0).abs() < 1e-9, "{fit:?}");
        let fit4 = fit_ring(4, &pts.iter().map(|&(s, _)| (s, ring_allreduce_seconds(4, s, truth))).collect::<Vec<_>>());
        assert!((fit4.unwrap().busbw / truth.busbw - 1.0).abs() < 1e-9);
        assert!(fit_ring(2, &pts[..1]).unwrap_err().contains("two distinct"));
        assert!(fit_ring(1, &pts).is_err());
        assert!(fit_ring(2, &[(4.0, 1e-6), (8.0, -1.0)]).unwrap_err().contains("bad point"));
        // Time falling with size: negative slope, refused.
        assert!(fit_ring(2, &[(4.0, 2e-6), (4e6, 1e-6)]).unwrap_err().contains("not positive"));
    }

    #[test]
    fn median_of_odd_even_and_bad_inputs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN]), None);
    }
}
