//! # crossbow-ako
//!
//! **Ako** (Watcharapichat, Morales, Fernandez, Pietzuch: *Ako: Decentralised Deep Learning
//! with Partial Gradient Exchange*, SoCC 2016) as a crossbow synchroniser, written against the
//! public [`Synchroniser`] API only: this crate uses nothing of crossbow that a researcher's
//! own crate could not (it is registered in the `crossbow` binary as `--sync ako`).
//!
//! Ako has no parameter server and no central model. Every learner keeps its own replica,
//! applies its own gradient at once, and accumulates it; each iteration it sends **one of p
//! partitions** of its accumulated gradient (round-robin) to every other learner, which
//! applies what it receives, and clears that partition. `p` is chosen so that the exchange
//! fits the available bandwidth: each learner sends `1/p` of the model per iteration, and
//! every gradient element reaches every learner within `p` iterations.
//!
//! ```text
//! crossbow train --sync ako --ako-partitions 4 --learners-per-device 4   # the crossbow binary's flag
//! crossbow train --sync ako --sync-opt partitions=4 --learners-per-device 4 # the same, generic
//! crossbow train --sync ako --sync-opt partitions=auto --sync-opt bandwidth=1.25   # GB/s
//! crossbow experiment tta --sync 'ako/sync-options.partitions=4,ssgd,sma' ...
//! ```
//!
//! Options (`--sync-opt KEY=VALUE`, or the `[sync-options]` table of a config file; the
//! `crossbow` binary also maps `--ako-partitions` and `--ako-bandwidth` onto them with
//! `SyncRegistry::option_flag`):
//!
//! | option | values | default |
//! |---|---|---|
//! | `partitions` | a whole number `p >= 1`, or `auto` | `auto` |
//! | `bandwidth` | GB/s per learner, for `auto` only | 10 (a host-memory copy rate) |
//!
//! ## Ako exactly
//!
//! With `k` learners, learning rate `γ_t` (after the schedule), momentum `μ`, weight decay `λ`
//! and `p` partitions, learner `j` (the engine's slot, `0..k`) at iteration `t` sends
//! partition `q_j = (t + j) mod p` (elements `P = [q·len/p, (q+1)·len/p)` of the flat
//! parameter vector; staggered by slot, so that with `k >= p` the whole model is exchanged by
//! someone every iteration):
//!
//! ```text
//! a_j += g_j                              its accumulated, not yet sent gradient
//! d_j −= (γ_t / k) g_j                    its own gradient, applied to its replica at once
//! s_j  = a_j on P_j (0 elsewhere);  a_j[P_j] = 0            what it sends
//! v    = μ v − γ_t (Σ_j s_j / k + λ z);   z += v            every learner applies the same
//! d_j[P_j] = 0;   w_j = z + d_j                             the replica
//! ```
//!
//! `z` is the **running sum of everything exchanged** (passed through the momentum-SGD step),
//! kept by the engine as its central model; `d_j` is the part of learner `j`'s own gradient
//! that it has applied locally but not yet sent. A replica is exactly `z` plus its own unsent
//! local steps: what Ako's learner holds (its own gradients at once, everyone's sent
//! partitions), without a learner ever seeing another's buffers. When a partition is sent,
//! its provisional local step is dropped and replaced by what everyone applies for it, so no
//! gradient is applied twice. `z` is a meaningful model to evaluate: it is what every learner
//! agrees on, and with `p = 1` every learner equals it.
//!
//! **Momentum and weight decay belong to the exchanged model**, as in S-SGD: `z` takes the
//! momentum-SGD step (with weight decay on `z`, Nesterov if configured) on the mean of the
//! exchanged gradients — over every element, every iteration, so momentum keeps moving
//! partitions between their exchanges. A learner's own immediate step is plain SGD at `γ_t/k`
//! (its share of the mean), without momentum or decay, which reach it through `z`; the
//! learners' own momentum buffers stay zero. The `1/k` keeps the learning rate comparable with
//! S-SGD's (Ako's paper sums the gradients instead, which is the same at `k` times the rate).
//! On a learning-rate drop the momentum of `z` is zeroed, as S-SGD does. A gradient sent after
//! a schedule change is applied at the rate of the iteration it is sent in.
//!
//! **With `p = 1` Ako is S-SGD** (every learner sends everything every iteration and equals
//! `z`): the same arithmetic in the same order, bit for bit (a test). **With one learner**
//! there is no one to exchange with: it sends everything every iteration (`p` counts as 1),
//! which is momentum SGD, again bit for bit S-SGD with one learner.
//!
//! ## Learners added and removed
//!
//! The engine adds a learner as a copy of `z` with zero buffers (nothing unsent: `w = z + 0`)
//! and removes the newest one; the others keep their accumulators and unsent local steps, so
//! nothing they sent or will send is lost or applied twice (`w_j = z + d_j` holds across every
//! change; a test checks it against a reference that tracks every gradient). **A removed
//! learner's unsent gradient leaves with it** — at most `p − 1` iterations of its own gradient,
//! on the partitions it had not yet sent — as when an Ako worker leaves: [`Synchroniser::reset`]
//! sees only the learners that remain, so a synchroniser cannot hand it on without a change to
//! the engine. When one learner remains, `z` becomes that learner's replica (its unsent local
//! steps count as applied, once) and training continues as momentum SGD.
//!
//! ## `partitions=auto`
//!
//! Ako picks `p` so that each learner's share of the exchange fits in an iteration
//! ([`auto_partitions`]): `p = ceil((k − 1) · 4·len / (bandwidth · T))`, between 1 and
//! [`AUTO_MAX_PARTITIONS`], where `4·len` is the model in bytes, `k − 1` the learners each
//! partition goes to, `bandwidth` the declared link rate (`bandwidth=GB/s`, default
//! [`DEFAULT_BANDWIDTH_GB_S`]) and `T` the measured iteration time: the median of the times
//! between consecutive central updates over the first [`AUTO_WARMUP_ITERATIONS`] iterations
//! (the synchroniser's own clock; it sees no other). Until then, and again for that long after
//! every change of the learner count, the previous `p` stays (1 at the start). A decision is a
//! [`Synchroniser::proposal`]: the engine applies rank 0's on every rank from the same
//! iteration on (each rank measures its own clock, and they must not differ), and the `p` in
//! force is the setting `p` (`crossbow train` prints and records each change). Any fixed `p`
//! above the parameter count is refused when the engine starts. Changing `p` between
//! iterations loses nothing: unsent gradients stay
//! in the accumulators and go out when their new partition's turn comes. With the default
//! host-memory bandwidth and the small models of a CPU run, the exchange is cheap and `auto`
//! picks `p = 1`, i.e. S-SGD — correctly so: partial exchange only pays where the link is
//! slow. A fixed `p` resumes from a checkpoint bit for bit (its whole state is in the engine's
//! buffers); `auto` measures again after a resume.
//!
//! **Measured** (BENCHMARKS.md §8, LeNet-5, 4 learners): with momentum 0.9 Ako needs more
//! epochs than S-SGD and SMA, the more the larger `p` (p = 16 did not reach the target), since
//! the momentum of `z` amplifies gradients that arrive up to `p − 1` iterations late; without
//! momentum it trains at p = 16 and beats momentum-free S-SGD (only 0 and 0.9 were tried).
//!
//! ## Traffic: the algorithm's, not a wire's
//!
//! Each learner contributes `1/p` of the model per iteration (`4·len/p` bytes; Ako's
//! peer-to-peer exchange sends that to each of the `k − 1` others), against the whole gradient
//! (S-SGD) or the whole correction (SMA). The engine's [`AllReduce`] sums full-length buffers,
//! though — a device's contribution is zero outside the partitions its learners send — so the
//! saving is the algorithm's, reported as such, and not measured on any wire here.
//!
//! [`AllReduce`]: crossbow_replica::sync::AllReduce

mod partition;

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use crossbow_kernels::{Backend, View, ViewMut};
use crossbow_replica::Result;
use crossbow_replica::sync::{
    Central, LearnerBuffers, LearnerRef, Settings, StepInfo, Synchroniser, momentum_step, sum_into,
};

pub use partition::{AUTO_MAX_PARTITIONS, auto_partitions, effective_partitions, partition_range, partition_sent};

/// The declared bandwidth `partitions=auto` assumes when none is given, GB/s: a rough rate of
/// copying through host memory, where CPU learners exchange.
pub const DEFAULT_BANDWIDTH_GB_S: f64 = 10.0;

/// Iterations `partitions=auto` times before it decides (again after every change of the
/// learner count).
pub const AUTO_WARMUP_ITERATIONS: usize = 5;

/// The help line of `--sync ako`, for the registry.
pub const HELP: &str =
    "decentralised partial gradient exchange (Ako): each learner sends 1/p of its accumulated gradient per iteration";

/// Ako as a registry entry: `--sync ako`, with its options `partitions` (flag
/// `--ako-partitions`) and `bandwidth` (flag `--ako-bandwidth`).
pub fn entry() -> crossbow_replica::catalog::SyncEntry {
    use crossbow_replica::catalog::{OptionSpec, SyncEntry, SyncOptions};
    SyncEntry::new("ako", HELP, |o: &SyncOptions| Ako::from_options(o.get("partitions"), o.get("bandwidth")))
        .option(
            OptionSpec::new("partitions", "auto", "P >= 1 partitions of the gradient, or auto (from the bandwidth)")
                .with_flag_named("ako-partitions"),
        )
        .option(
            OptionSpec::new("bandwidth", "10", "GB/s between learners, for partitions=auto")
                .with_flag_named("ako-bandwidth"),
        )
}

/// How many partitions the gradient is split into.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Partitions {
    /// A fixed `p >= 1`.
    Fixed(usize),
    /// Picked from the measured iteration time and a declared bandwidth (GB/s); see the crate
    /// documentation.
    Auto {
        /// Bandwidth per learner, GB/s (10^9 bytes per second), finite and > 0.
        bandwidth_gb_s: f64,
    },
}

impl Partitions {
    /// Parses `partitions` (`auto` or a whole number >= 1) and `bandwidth` (GB/s, only with
    /// `auto`), as given to `--sync-opt`; `None` means not given (`auto`, 10 GB/s).
    ///
    /// ```
    /// use crossbow_ako::Partitions;
    ///
    /// assert_eq!(Partitions::parse(Some("4"), None), Ok(Partitions::Fixed(4)));
    /// assert_eq!(Partitions::parse(None, Some("1.25")), Ok(Partitions::Auto { bandwidth_gb_s: 1.25 }));
    /// assert!(Partitions::parse(Some("0"), None).unwrap_err().contains("at least 1"));
    /// assert!(Partitions::parse(Some("4"), Some("1")).unwrap_err().contains("only with partitions=auto"));
    /// ```
    pub fn parse(partitions: Option<&str>, bandwidth: Option<&str>) -> std::result::Result<Self, String> {
        let bandwidth_gb_s = match bandwidth.map(str::trim) {
            None => None,
            Some(text) => match text.parse::<f64>() {
                Ok(b) if b.is_finite() && b > 0.0 => Some(b),
                _ => return Err(format!("option bandwidth={text}: must be a number of GB/s > 0")),
            },
        };
        match partitions.map(str::trim) {
            None => Ok(Partitions::Auto { bandwidth_gb_s: bandwidth_gb_s.unwrap_or(DEFAULT_BANDWIDTH_GB_S) }),
            Some(t) if t.eq_ignore_ascii_case("auto") => {
                Ok(Partitions::Auto { bandwidth_gb_s: bandwidth_gb_s.unwrap_or(DEFAULT_BANDWIDTH_GB_S) })
            }
            Some(t) => {
                let p: usize =
                    t.parse().map_err(|_| format!("option partitions={t}: must be a whole number >= 1 or 'auto'"))?;
                if p == 0 {
                    return Err("option partitions must be at least 1, got 0".into());
                }
                if bandwidth_gb_s.is_some() {
                    return Err(format!(
                        "option bandwidth is used only with partitions=auto (partitions={p} is fixed)"
                    ));
                }
                Ok(Partitions::Fixed(p))
            }
        }
    }
}

/// What `partitions=auto` has measured and decided.
#[derive(Debug, Default)]
struct AutoState {
    /// The iteration whose `p` is fixed (`p` changes only when a new iteration starts).
    iteration: Option<u64>,
    /// The `p` in force.
    p: usize,
    /// Agreed by every rank ([`Synchroniser::agree`]), in force from the next iteration.
    pending: Option<usize>,
    /// Decided from this process's measurements, not yet agreed: with several ranks, rank
    /// 0's decision is every rank's.
    proposal: Option<usize>,
    /// Iteration and time of the last first central update of an iteration.
    last_update: Option<(u64, Instant)>,
    /// Iteration periods measured since the start or the last change of the learner count.
    periods: Vec<f64>,
    /// Whether the current learner count has been decided for.
    decided: bool,
}

/// The Ako synchroniser. See the crate documentation for the update.
///
/// Per-learner buffers: 0 the accumulated unsent gradient `a_j`, 1 the unsent local steps
/// `d_j`. Per-device buffer 0: the momentum `v` of `z` (as S-SGD's, so a checkpoint of either
/// keeps `z`'s momentum in the same place).
#[derive(Debug)]
pub struct Ako {
    partitions: Partitions,
    k: usize,
    len: AtomicUsize,
    auto: Mutex<AutoState>,
}

impl Ako {
    /// Ako with `partitions` (`Fixed(0)` is taken as 1).
    pub fn new(partitions: Partitions) -> Self {
        let partitions = match partitions {
            Partitions::Fixed(p) => Partitions::Fixed(p.max(1)),
            auto => auto,
        };
        Ako { partitions, k: 1, len: AtomicUsize::new(0), auto: Mutex::new(AutoState { p: 1, ..AutoState::default() }) }
    }

    /// Ako from the texts of `--sync-opt partitions=...` and `bandwidth=...` (see
    /// [`Partitions::parse`]); the error names the option.
    pub fn from_options(partitions: Option<&str>, bandwidth: Option<&str>) -> std::result::Result<Self, String> {
        Partitions::parse(partitions, bandwidth).map(Ako::new)
    }

    /// The partition rule.
    pub fn partitions(&self) -> Partitions {
        self.partitions
    }

    /// The `p` in force now, before the one-learner and model-size limits
    /// ([`effective_partitions`]); with `auto`, 1 until the first decision.
    pub fn current_partitions(&self) -> usize {
        match self.partitions {
            Partitions::Fixed(p) => p,
            Partitions::Auto { .. } => self.lock().p.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, AutoState> {
        // A panic elsewhere cannot leave the state half-written (every update is one field).
        self.auto.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The `p` of `iteration` before the limits: every call in one iteration gets the same.
    fn p_at(&self, iteration: u64) -> usize {
        match self.partitions {
            Partitions::Fixed(p) => p,
            Partitions::Auto { .. } => {
                let mut s = self.lock();
                if s.iteration != Some(iteration) {
                    s.iteration = Some(iteration);
                    if let Some(p) = s.pending.take() {
                        s.p = p;
                    }
                }
                s.p.max(1)
            }
        }
    }

    /// The `p` in force at this iteration.
    fn p_now(&self, info: &StepInfo, len: usize) -> usize {
        effective_partitions(self.p_at(info.iteration), info.learners, len)
    }

    /// Whether anything can ever be left unsent. Not with a fixed `p = 1`, which then runs
    /// S-SGD's own arithmetic (the accumulators stay unused).
    fn may_pend(&self) -> bool {
        self.partitions != Partitions::Fixed(1)
    }

    /// `partitions=auto`: the first central update of an iteration times the iteration before,
    /// and after [`AUTO_WARMUP_ITERATIONS`] of them `p` is decided for the next iteration on.
    fn observe(&self, info: &StepInfo, len: usize) {
        let Partitions::Auto { bandwidth_gb_s } = self.partitions else { return };
        let mut s = self.lock();
        if s.last_update.is_some_and(|(it, _)| it == info.iteration) {
            return;
        }
        let now = Instant::now();
        if let Some((it, then)) = s.last_update
            && it + 1 == info.iteration
        {
            s.periods.push(now.duration_since(then).as_secs_f64());
        }
        s.last_update = Some((info.iteration, now));
        if s.decided || s.periods.len() < AUTO_WARMUP_ITERATIONS {
            return;
        }
        let mut periods = s.periods.clone();
        periods.sort_by(f64::total_cmp);
        let t = periods[periods.len() / 2];
        let bytes = 4.0 * len as f64;
        let p = auto_partitions(bytes, info.learners, bandwidth_gb_s * 1e9, t);
        // Proposed to the engine, which has every rank apply rank 0's decision from the same
        // iteration on; the `p` in force shows in the settings (the trainer reports it).
        s.proposal = Some(p);
        s.decided = true;
    }
}

impl<B: Backend> Synchroniser<B> for Ako {
    fn name(&self) -> &str {
        "ako"
    }

    /// `partitions` (a number, or `auto` with `bandwidth_gb_s`) and, once the model size is
    /// known and `p` is fixed, the bytes each learner contributes per iteration.
    fn settings(&self) -> Settings {
        match self.partitions {
            Partitions::Fixed(p) => {
                let s = Settings::new().int("partitions", p as i64);
                match self.len.load(Ordering::Relaxed) {
                    0 => s,
                    len => {
                        // The largest partition (they differ by at most one element).
                        let p = effective_partitions(p, 2, len);
                        s.int("sent_bytes_per_learner", (4 * len.div_ceil(p)) as i64)
                    }
                }
            }
            Partitions::Auto { bandwidth_gb_s } => Settings::new()
                .str("partitions", "auto")
                .num("bandwidth_gb_s", bandwidth_gb_s)
                .int("p", self.current_partitions() as i64),
        }
    }

    fn learner_buffers(&self) -> usize {
        2
    }

    fn device_buffers(&self) -> usize {
        1
    }

    /// A fixed `p` above the parameter count is refused (it would leave partitions empty);
    /// `auto` never picks more than [`AUTO_MAX_PARTITIONS`] nor more than the parameters.
    fn set_model(&mut self, layout: &crossbow_replica::sync::ModelLayout) -> Result<()> {
        if let Partitions::Fixed(p) = self.partitions
            && p > layout.len.max(1)
        {
            return Err(crossbow_replica::ReplicaError::Config(format!(
                "option partitions={p}: the model has only {} parameters, so at most {} partitions",
                layout.len, layout.len
            )));
        }
        Ok(())
    }

    fn proposal(&self) -> Option<u64> {
        self.auto.lock().unwrap_or_else(|e| e.into_inner()).proposal.map(|p| p as u64)
    }

    fn agree(&mut self, value: u64) {
        let s = self.auto.get_mut().unwrap_or_else(|e| e.into_inner());
        s.proposal = None;
        s.pending = Some(usize::try_from(value).unwrap_or(AUTO_MAX_PARTITIONS).clamp(1, AUTO_MAX_PARTITIONS));
    }

    fn set_learners(&mut self, k: usize) {
        self.k = k;
        let s = self.auto.get_mut().unwrap_or_else(|e| e.into_inner());
        s.periods.clear();
        s.last_update = None;
        s.decided = false;
        s.proposal = None;
    }

    /// With one learner left, `z` becomes its replica and its accumulators are emptied (its
    /// unsent local steps count as applied, once); with more, nothing changes (a new learner
    /// is `z` with empty buffers, the others keep theirs).
    fn reset(
        &self,
        be: &B,
        central: &mut Central<B>,
        learners: &mut [LearnerBuffers<'_, B>],
        len: usize,
    ) -> Result<()> {
        self.len.store(len, Ordering::Relaxed);
        if self.k == 1 {
            for l in learners {
                be.copy(View::new(&*l.params, 0..len)?, ViewMut::new(&mut central.z, 0..len)?)?;
                for b in l.sync_state.iter_mut() {
                    // −0: x + (−0) is x for every x, so a later accumulation starts exactly.
                    be.fill(ViewMut::new(b, 0..len)?, -0.0)?;
                }
            }
        }
        Ok(())
    }

    /// `a_j += g_j` and, when something stays unsent (`p > 1`), `d_j −= (γ/k) g_j`.
    fn learner_step(
        &self,
        be: &B,
        info: &StepInfo,
        l: LearnerBuffers<'_, B>,
        _z: &B::Buffer,
        len: usize,
    ) -> Result<()> {
        if !self.may_pend() {
            return Ok(());
        }
        let p = self.p_now(info, len);
        let [acc, local, ..] = l.sync_state else {
            return Err(crossbow_replica::ReplicaError::Config("ako needs two buffers per learner".into()));
        };
        be.axpy(1.0, View::new(l.grads, 0..len)?, ViewMut::new(acc, 0..len)?)?;
        if p > 1 {
            let step = -info.sgd.lr / info.learners.max(1) as f32;
            be.axpy(step, View::new(l.grads, 0..len)?, ViewMut::new(local, 0..len)?)?;
        }
        Ok(())
    }

    /// The sum of what this device's learners send: each learner's accumulated gradient on its
    /// partition (with `p = 1` fixed: the gradients, as S-SGD).
    fn reduce_device(
        &self,
        be: &B,
        info: &StepInfo,
        learners: &[LearnerRef<'_, B>],
        _c: &Central<B>,
        out: &mut B::Buffer,
        len: usize,
    ) -> Result<()> {
        if !self.may_pend() {
            return sum_into(be, learners.iter().map(|l| l.grads), out, len);
        }
        let p = self.p_now(info, len);
        // −0, so that one learner's partition is copied exactly (x + (−0) = x).
        be.fill(ViewMut::new(out, 0..len)?, -0.0)?;
        for l in learners {
            let r = partition_range(len, p, partition_sent(info.iteration, l.index, p));
            if !r.is_empty() {
                be.axpy(1.0, View::new(&l.sync_state[0], r.clone())?, ViewMut::new(out, r)?)?;
            }
        }
        Ok(())
    }

    /// S-SGD's central step on the mean exchanged gradient: `v = μ v − γ (total/k + λ z)`,
    /// `z += v`; `v = 0` after a learning-rate drop.
    fn apply_device(
        &self,
        be: &B,
        info: &StepInfo,
        total: &mut B::Buffer,
        central: &mut Central<B>,
        len: usize,
    ) -> Result<()> {
        self.observe(info, len);
        be.scale(1.0 / info.learners.max(1) as f32, ViewMut::new(total, 0..len)?)?;
        let (z, v) = (&mut central.z, &mut central.sync_state[0]);
        momentum_step(be, info, z, total, v, len)
    }

    /// The sent partition is emptied (`a_j[P] = d_j[P] = 0`) and the replica becomes `z` plus
    /// its unsent local steps.
    fn after_apply(&self, be: &B, info: &StepInfo, l: LearnerBuffers<'_, B>, z: &B::Buffer, len: usize) -> Result<()> {
        be.copy(View::new(z, 0..len)?, ViewMut::new(l.params, 0..len)?)?;
        if !self.may_pend() {
            return Ok(());
        }
        let p = self.p_now(info, len);
        let r = partition_range(len, p, partition_sent(info.iteration, l.index, p));
        let [acc, local, ..] = l.sync_state else {
            return Err(crossbow_replica::ReplicaError::Config("ako needs two buffers per learner".into()));
        };
        if !r.is_empty() {
            be.fill(ViewMut::new(acc, r.clone())?, -0.0)?;
            be.fill(ViewMut::new(local, r.clone())?, -0.0)?;
        }
        if p > 1 {
            // w = z + d outside the sent partition; inside it w is z exactly.
            for part in [0..r.start, r.end..len] {
                if !part.is_empty() {
                    be.axpy(1.0, View::new(&*local, part.clone())?, ViewMut::new(l.params, part)?)?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
