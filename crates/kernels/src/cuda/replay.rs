//! Replaying a learner's iteration as one CUDA graph.
//!
//! A learner's forward and backward pass is a few hundred small launches; at the small
//! batches crossbow is for, the host's launch calls (a few µs each, one host thread for
//! every learner of a GPU) cost more than the kernels. A CUDA graph issues them all with one
//! call. The catch is that a graph freezes every kernel argument, so it may be replayed only
//! when the work is exactly what it captured.
//!
//! [`GpuBackend::replayable`](super::GpuBackend::replayable) therefore runs the op code in
//! *recording* mode: every launch, GEMM, device copy and cuDNN call is recorded as an [`Op`]
//! (data: kernel name, grid, every argument) instead of being issued. The recorded list is
//! then compared with the list the cached graph was captured from:
//! - equal: the cached graph is launched (a *replay*): identical work, one call;
//! - different (first iteration, a new batch size, a changed scalar): the list is captured
//!   into a new graph (stream capture of exactly these ops), which is launched and cached.
//!
//! Anything the recorded work cannot contain — a download, an upload, a synchronisation, an
//! event — makes the recording fail; so does a capture the driver refuses. Then graphs are
//! turned off for that executor (said once on stderr) and the work runs again, plainly:
//! nothing of it had been issued. After [`MAX_MISSES`] captures in a row without a replay
//! (arguments that change every iteration, e.g. dropout seeds) graphs are turned off too, as
//! they would only add the capture's cost. The host emulator implements the same interface
//! (its "graph" is the frozen op list, replayed op by op), so the comparison logic is tested
//! on every CPU-only machine against the plain path, bit for bit.

use serde::Serialize;

use super::launch::{ColGemm, KernelArg};

/// One piece of GPU work as data: two equal ops issue identical work.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// A kernel launch of `grid` blocks.
    Launch {
        /// The kernel.
        kernel: &'static str,
        /// Blocks.
        grid: u32,
        /// Every argument, in order.
        args: Vec<KernelArg>,
    },
    /// A cuBLAS GEMM.
    Gemm(ColGemm),
    /// A device-to-device copy of `len` `f32`s.
    Copy {
        /// Source address.
        src: u64,
        /// Destination address.
        dst: u64,
        /// Elements.
        len: usize,
    },
    /// A cuDNN call.
    #[cfg(feature = "cuda")]
    Cudnn(super::cudnn::CudnnOp),
}

/// Captures in a row without a replay after which an executor stops using graphs.
pub const MAX_MISSES: u32 = 4;

/// What graphs did on one executor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ReplayStats {
    /// Units of work captured into a new graph (first time, or changed).
    pub captures: u64,
    /// Units of work issued by launching the cached graph.
    pub replays: u64,
    /// Units of work issued plainly (graphs off, or fallen back).
    pub plain: u64,
}

/// An executor's replay state: whether graphs are used, the recording in progress, the
/// cached graph and what it was captured from.
pub struct Replay<G> {
    enabled: bool,
    recording: Option<Vec<Op>>,
    violation: Option<String>,
    cached: Option<(Vec<Op>, G)>,
    misses: u32,
    off: Option<String>,
    stats: ReplayStats,
}

impl<G> Replay<G> {
    /// A state with graphs on or off.
    pub fn new(enabled: bool) -> Self {
        Replay {
            enabled,
            recording: None,
            violation: None,
            cached: None,
            misses: 0,
            off: None,
            stats: ReplayStats::default(),
        }
    }

    /// Turns graphs on or off (on again clears an earlier reason for turning them off).
    pub fn set_enabled(&mut self, on: bool) {
        self.enabled = on;
        self.off = None;
        self.misses = 0;
        if !on {
            self.cached = None;
        }
    }

    /// Whether graphs are used now.
    pub fn active(&self) -> bool {
        self.enabled && self.off.is_none()
    }

    /// Why graphs were turned off on their own, if they were.
    pub fn off_reason(&self) -> Option<&str> {
        self.off.as_deref()
    }

    /// The statistics so far.
    pub fn stats(&self) -> ReplayStats {
        self.stats
    }

    /// True (and `op` recorded) while recording; the caller then issues nothing.
    pub fn record(&mut self, op: impl FnOnce() -> Op) -> bool {
        match self.recording.as_mut() {
            Some(v) => {
                v.push(op());
                true
            }
            None => false,
        }
    }

    /// Whether a recording is in progress.
    pub fn recording(&self) -> bool {
        self.recording.is_some()
    }

    /// Notes that the recorded work did something a graph cannot hold (`what`); the
    /// recording then fails. Returns true while recording.
    pub fn forbid(&mut self, what: &str) -> bool {
        if self.recording.is_none() {
            return false;
        }
        if self.violation.is_none() {
            self.violation = Some(format!("the recorded work calls {what}"));
        }
        true
    }

    pub(crate) fn start(&mut self) {
        self.recording = Some(Vec::new());
        self.violation = None;
    }

    /// Ends the recording: the ops, or why they cannot be a graph.
    pub(crate) fn finish(&mut self) -> std::result::Result<Vec<Op>, String> {
        let ops = self.recording.take().unwrap_or_default();
        match self.violation.take() {
            Some(why) => Err(why),
            None => Ok(ops),
        }
    }

    /// Takes the cached graph out if it was captured from exactly `ops` (launched without
    /// the lock held, then handed back with [`Replay::restore`]).
    pub(crate) fn take_hit(&mut self, ops: &[Op]) -> Option<(Vec<Op>, G)> {
        match &self.cached {
            Some((c, _)) if c.as_slice() == ops => {
                self.misses = 0;
                self.stats.replays += 1;
                self.cached.take()
            }
            _ => None,
        }
    }

    /// Puts back a graph taken by [`Replay::take_hit`] (unless graphs were turned off since).
    pub(crate) fn restore(&mut self, ops: Vec<Op>, graph: G) {
        if self.active() {
            self.cached = Some((ops, graph));
        }
    }

    /// Counts a miss; true when graphs should be turned off for missing too often.
    pub(crate) fn miss(&mut self) -> bool {
        self.misses += 1;
        self.misses > MAX_MISSES
    }

    pub(crate) fn cache(&mut self, ops: Vec<Op>, graph: G) {
        self.stats.captures += 1;
        self.cached = Some((ops, graph));
    }

    /// Turns graphs off for `why`; returns true the first time (to say so once).
    pub(crate) fn turn_off(&mut self, why: String) -> bool {
        self.cached = None;
        let first = self.off.is_none();
        if first {
            self.off = Some(why);
        }
        first
    }

    pub(crate) fn count_plain(&mut self) {
        self.stats.plain += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(v: f32) -> Op {
        Op::Launch { kernel: "k", grid: 1, args: vec![KernelArg::F32(v)] }
    }

    /// A recording hits only the list it was captured from: one changed argument misses.
    #[test]
    fn a_graph_is_replayed_only_for_identical_work() {
        let mut r: Replay<u32> = Replay::new(true);
        r.start();
        assert!(r.record(|| launch(1.0)));
        let ops = r.finish().unwrap();
        assert!(r.take_hit(&ops).is_none());
        assert!(!r.miss());
        r.cache(ops.clone(), 7);
        let (o, g) = r.take_hit(&ops).unwrap();
        assert_eq!(g, 7);
        r.restore(o, g);
        assert!(r.take_hit(&[launch(2.0)]).is_none(), "a changed scalar argument must not replay");
        assert!(r.take_hit(&[launch(1.0), launch(1.0)]).is_none());
        assert!(r.take_hit(&[]).is_none());
        assert_eq!(r.stats(), ReplayStats { captures: 1, replays: 1, plain: 0 });
        assert!(!r.record(|| launch(3.0)), "nothing is recorded outside a recording");
    }

    /// A panic in the recorded work (a bug in op code) does not leave the executor recording:
    /// later work is issued, not silently swallowed.
    #[cfg(feature = "testing")]
    #[test]
    fn a_panic_while_recording_leaves_the_executor_issuing() {
        use crate::{Backend, View, ViewMut};
        let Some(be) = crate::testing::emu_backend_or_skip("a_panic_while_recording_leaves_the_executor_issuing")
        else {
            return;
        };
        be.set_graphs(true).unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _ = be.replayable(|| -> crate::Result<()> { panic!("a bug in op code") });
        }));
        assert!(r.is_err());
        let mut buf = be.alloc(4).unwrap();
        be.fill(ViewMut::whole(&mut buf), 2.5).unwrap();
        let mut host = [0.0f32; 4];
        be.download(View::whole(&buf), &mut host).unwrap();
        assert_eq!(host, [2.5; 4]);
    }

    /// Downloads and the like fail the recording; too many misses in a row turn graphs off.
    #[test]
    fn violations_and_repeated_misses_turn_graphs_off() {
        let mut r: Replay<u32> = Replay::new(true);
        assert!(!r.forbid("a download"), "outside a recording everything is allowed");
        r.start();
        assert!(r.forbid("a download"));
        assert!(r.finish().unwrap_err().contains("a download"));
        for _ in 0..MAX_MISSES {
            assert!(!r.miss());
        }
        assert!(r.miss());
        assert!(r.turn_off("misses".into()));
        assert!(!r.turn_off("again".into()), "said once");
        assert!(!r.active());
        assert_eq!(r.off_reason(), Some("misses"));
        r.set_enabled(true);
        assert!(r.active());
    }
}
