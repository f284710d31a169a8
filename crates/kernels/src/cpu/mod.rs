//! The CPU backend: plain Rust kernels on `Vec<f32>` buffers, GEMM through
//! `matrixmultiply` (or `gemm`), optional intra-op parallelism over the batch with helper
//! threads of its own (`team`). It is both a real trainer for machines without GPUs and the reference every
//! other backend is tested against.
//!
//! This file holds the backend itself (threads, GEMM choice) and its memory; each op's CPU
//! kernels and `impl <Op> for CpuBackend` live in the op's folder (`src/<op>/cpu.rs`).

pub(crate) mod simd;
mod team;

pub use simd::{CPU_ISA_ENV, CpuIsa, cpu_isa, cpu_isa_with};

use std::ops::Range;
use std::sync::{Arc, Mutex};

use crossbow_tensor::Device;

use crate::backend::{Backend, Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};
use crate::gemm::CpuGemm;

/// The CPU backend for one CPU device.
///
/// With one thread (the default) every op runs on the calling thread: that is what a learner
/// uses when several learners share the cores. With `threads > 1` batch-parallel ops (conv,
/// linear, pooling, batch norm) split the batch over the calling thread and `threads - 1`
/// helper threads of its own.
#[derive(Clone)]
pub struct CpuBackend {
    index: usize,
    threads: usize,
    team: Option<Arc<team::Team>>,
    gemm: CpuGemm,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("index", &self.index)
            .field("threads", &self.threads)
            .field("gemm", &self.gemm)
            .finish()
    }
}

impl Default for CpuBackend {
    fn default() -> Self {
        CpuBackend::new(0)
    }
}

impl CpuBackend {
    /// A single-threaded backend for CPU device `index`.
    pub fn new(index: usize) -> Self {
        CpuBackend { index, threads: 1, team: None, gemm: CpuGemm::default() }
    }

    /// A backend whose ops use `threads` threads (`threads - 1` helper threads when `threads > 1`).
    pub fn with_threads(index: usize, threads: usize) -> Result<Self> {
        if threads == 0 {
            return Err(KernelError::invalid("CpuBackend", "threads must be at least 1"));
        }
        // The calling thread is the first of the `threads`: the team holds the others.
        let team = if threads > 1 {
            let t = team::Team::new(threads - 1, &format!("crossbow-cpu{index}-op"))
                .map_err(|e| KernelError::invalid("CpuBackend", format!("cannot start {threads} threads: {e}")))?;
            Some(Arc::new(t))
        } else {
            None
        };
        Ok(CpuBackend { index, threads, team, gemm: CpuGemm::default() })
    }

    /// The same backend with another GEMM crate.
    pub fn with_gemm(mut self, gemm: CpuGemm) -> Self {
        self.gemm = gemm;
        self
    }

    /// Threads used by each op.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The GEMM crate in use.
    pub fn gemm_kind(&self) -> CpuGemm {
        self.gemm
    }

    pub(crate) fn ctx(&self) -> CpuCtx<'_> {
        CpuCtx { gemm: self.gemm, team: self.team.as_deref(), threads: self.threads }
    }
}

/// What a CPU kernel needs to know about the backend.
#[derive(Clone, Copy)]
pub(crate) struct CpuCtx<'a> {
    pub gemm: CpuGemm,
    pub team: Option<&'a team::Team>,
    pub threads: usize,
}

impl CpuCtx<'_> {
    /// Runs `f` on every item: the items are cut into `threads` contiguous runs, the calling
    /// thread runs the first and the backend's `threads - 1` helper threads the others
    /// (see [`team`] for why they are not a rayon pool).
    pub fn for_each<T: Send>(&self, items: Vec<T>, f: impl Fn(T) + Sync + Send) {
        // A `Vec<()>` allocates nothing.
        self.map(items, f);
    }

    /// Maps every item as [`CpuCtx::for_each`] runs them; results keep their order.
    pub fn map<T: Send, R: Send>(&self, items: Vec<T>, f: impl Fn(T) -> R + Sync + Send) -> Vec<R> {
        match self.team {
            Some(team) if items.len() > 1 => {
                let runs: Vec<Mutex<Vec<T>>> = runs(items, self.threads).into_iter().map(Mutex::new).collect();
                let outs: Vec<Mutex<Vec<R>>> = runs.iter().map(|_| Mutex::new(Vec::new())).collect();
                team.run(runs.len(), &|j| {
                    let run = std::mem::take(&mut *team::lock(&runs[j]));
                    *team::lock(&outs[j]) = run.into_iter().map(&f).collect();
                });
                outs.into_iter().flat_map(|o| o.into_inner().unwrap_or_else(|e| e.into_inner())).collect()
            }
            _ => items.into_iter().map(f).collect(),
        }
    }

    /// Number of groups to split `n` independent items into.
    pub fn groups(&self, n: usize) -> usize {
        self.threads.min(n).max(1)
    }

    /// Runs an element-wise op `f(range, chunk of out)` over `out`, split into one contiguous
    /// range per thread where each gets at least [`ELEMENTWISE_MIN_PER_THREAD`] elements (on
    /// the calling thread alone below that). The same bits for any split.
    pub fn elementwise(&self, out: &mut [f32], f: impl Fn(Range<usize>, &mut [f32]) + Sync + Send) {
        let ranges = self.elementwise_ranges(out.len());
        let outs = split_mut_by(out, &ranges, 1);
        self.for_each(ranges.into_iter().zip(outs).collect(), |(r, o)| f(r, o));
    }

    /// The ranges [`CpuCtx::elementwise`] splits `len` elements into, for ops that write
    /// more than one array.
    pub fn elementwise_ranges(&self, len: usize) -> Vec<Range<usize>> {
        split_ranges(len, self.threads.min(len / ELEMENTWISE_MIN_PER_THREAD).max(1))
    }
}

/// Fewest elements per thread [`CpuCtx::elementwise`] splits an op for: below it the
/// fork-join (microseconds) costs about what the second thread saves.
pub(crate) const ELEMENTWISE_MIN_PER_THREAD: usize = 16 * 1024;

/// Cuts `items` into at most `groups` contiguous runs of nearly equal length, in order.
fn runs<T>(items: Vec<T>, groups: usize) -> Vec<Vec<T>> {
    let ranges = split_ranges(items.len(), groups.min(items.len()));
    let mut items = items.into_iter();
    ranges.into_iter().map(|r| items.by_ref().take(r.len()).collect()).collect()
}

/// Splits `0..n` into `groups` contiguous, nearly equal ranges.
pub(crate) fn split_ranges(n: usize, groups: usize) -> Vec<Range<usize>> {
    let g = groups.max(1);
    (0..g).map(|i| (i * n / g)..((i + 1) * n / g)).collect()
}

/// Splits `data` into consecutive chunks of `ranges[i].len() * stride` elements.
pub(crate) fn split_mut_by<'a>(mut data: &'a mut [f32], ranges: &[Range<usize>], stride: usize) -> Vec<&'a mut [f32]> {
    let mut out = Vec::with_capacity(ranges.len());
    for r in ranges {
        let (head, tail) = std::mem::take(&mut data).split_at_mut(r.len() * stride);
        out.push(head);
        data = tail;
    }
    out
}

/// Splits `data` into `count` chunks of `size` elements (the rest is dropped).
pub(crate) fn chunks_mut_n(data: &mut [f32], count: usize, size: usize) -> Vec<&mut [f32]> {
    if size == 0 {
        return (0..count).map(|_| &mut [][..]).collect();
    }
    data.chunks_mut(size).take(count).collect()
}

/// The slice a CPU view reads.
pub(crate) fn host_slice<'a>(v: View<'a, CpuBackend>) -> &'a [f32] {
    &v.buffer()[v.range()]
}

/// The slice a CPU view writes.
pub(crate) fn host_slice_mut<'a>(v: ViewMut<'a, CpuBackend>) -> &'a mut [f32] {
    let (buf, r) = v.into_parts();
    &mut buf[r]
}

impl Storage for CpuBackend {
    type Buffer = Vec<f32>;

    fn buffer_len(buf: &Vec<f32>) -> usize {
        buf.len()
    }
}

impl Backend for CpuBackend {
    fn device(&self) -> Device {
        Device::Cpu(self.index)
    }

    fn describe(&self) -> String {
        format!(
            "cpu:{} ({} thread{}, {:?} GEMM)",
            self.index,
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.gemm
        )
    }

    fn alloc(&self, len: usize) -> Result<Vec<f32>> {
        let mut v = Vec::new();
        v.try_reserve_exact(len)
            .map_err(|_| KernelError::invalid("alloc", format!("cannot allocate {len} f32s on the CPU")))?;
        v.resize(len, 0.0);
        Ok(v)
    }

    fn upload(&self, src: &[f32], dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("upload", "dst", src.len(), dst.len())?;
        host_slice_mut(dst).copy_from_slice(src);
        Ok(())
    }

    fn download(&self, src: View<'_, Self>, dst: &mut [f32]) -> Result<()> {
        check_len("download", "dst", src.len(), dst.len())?;
        dst.copy_from_slice(host_slice(src));
        Ok(())
    }

    type Pending = Vec<f32>;

    fn start_download(&self, src: View<'_, Self>) -> Result<Vec<f32>> {
        Ok(host_slice(src).to_vec())
    }

    fn finish_download(&self, pending: Vec<f32>) -> Result<Vec<f32>> {
        Ok(pending)
    }

    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("copy", "dst", src.len(), dst.len())?;
        // Split over the threads where large (a model's parameters, a batch's activations):
        // one thread alone does not saturate the memory bandwidth.
        let src = host_slice(src);
        self.ctx().elementwise(host_slice_mut(dst), |r, d| d.copy_from_slice(&src[r]));
        Ok(())
    }

    fn fill(&self, dst: ViewMut<'_, Self>, value: f32) -> Result<()> {
        self.ctx().elementwise(host_slice_mut(dst), |_, d| d.fill(value));
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    type Event = ();

    fn record(&self) -> Result<()> {
        Ok(())
    }

    fn wait(&self, _event: &()) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Split over three threads, a copy and a fill still write every element, each from its
    /// own place.
    #[test]
    fn copy_and_fill_split_over_threads_write_every_element() {
        let n = 3 * ELEMENTWISE_MIN_PER_THREAD + 7;
        let be = CpuBackend::with_threads(0, 3).unwrap();
        assert_eq!(be.ctx().elementwise_ranges(n).len(), 3);
        let src: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let mut dst = vec![f32::NAN; n];
        be.copy(View::whole(&src), ViewMut::whole(&mut dst)).unwrap();
        assert_eq!(dst, src);
        be.fill(ViewMut::whole(&mut dst), 2.5).unwrap();
        assert!(dst.iter().all(|&v| v == 2.5));
        let short = src[1..].to_vec();
        assert!(be.copy(View::whole(&short), ViewMut::whole(&mut dst)).is_err());
    }

    /// `map` keeps the items' order and `for_each` runs every item once, on the calling
    /// thread and `threads - 1` workers, for item counts below, at and above the threads.
    #[test]
    fn for_each_and_map_cover_every_item_once_in_order() {
        for threads in 1..5 {
            let be = CpuBackend::with_threads(0, threads).unwrap();
            let ctx = be.ctx();
            for n in 0..12 {
                let squares = ctx.map((0..n).collect(), |i: usize| i * i);
                assert_eq!(squares, (0..n).map(|i| i * i).collect::<Vec<_>>(), "{threads} threads, {n} items");
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                let callers = std::thread::current().id();
                let on_caller = AtomicUsize::new(0);
                ctx.for_each((0..n).collect(), |i: usize| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                    if std::thread::current().id() == callers {
                        on_caller.fetch_add(1, Ordering::Relaxed);
                    }
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{threads} threads, {n} items");
                // The caller runs the first run of items itself.
                let first = if n == 0 { 0 } else { split_ranges(n, threads.min(n))[0].len() };
                if threads > 1 && n > 1 {
                    assert_eq!(on_caller.load(Ordering::Relaxed), first, "{threads} threads, {n} items");
                }
            }
        }
    }

    #[test]
    fn runs_are_contiguous_and_nearly_equal() {
        let r = runs((0..10).collect::<Vec<_>>(), 3);
        assert_eq!(r, vec![vec![0, 1, 2], vec![3, 4, 5], vec![6, 7, 8, 9]]);
        assert_eq!(runs((0..2).collect::<Vec<_>>(), 4), vec![vec![0], vec![1]]);
        assert_eq!(runs(Vec::<u8>::new(), 2), vec![Vec::<u8>::new()]);
    }
}
