//! The CPU backend: plain Rust kernels on `Vec<f32>` buffers, GEMM through
//! `matrixmultiply` (or `gemm`), optional intra-op parallelism over the batch with a private
//! rayon pool. It is both a real trainer for machines without GPUs and the reference every
//! other backend is tested against.
//!
//! This file holds the backend itself (threads, GEMM choice) and its memory; each op's CPU
//! kernels and `impl <Op> for CpuBackend` live in the op's folder (`src/<op>/cpu.rs`).

pub(crate) mod simd;

pub use simd::{CPU_ISA_ENV, CpuIsa, cpu_isa, cpu_isa_with};

use std::ops::Range;
use std::sync::Arc;

use crossbow_tensor::Device;

use crate::backend::{Backend, Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};
use crate::gemm::CpuGemm;

/// The CPU backend for one CPU device.
///
/// With one thread (the default) every op runs on the calling thread: that is what a learner
/// uses when several learners share the cores. With `threads > 1` batch-parallel ops (conv,
/// linear, pooling, batch norm) split the batch over a private rayon pool, for a single
/// learner that should use every core.
#[derive(Clone)]
pub struct CpuBackend {
    index: usize,
    threads: usize,
    pool: Option<Arc<rayon::ThreadPool>>,
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
        CpuBackend { index, threads: 1, pool: None, gemm: CpuGemm::default() }
    }

    /// A backend whose ops use `threads` threads (a private rayon pool when `threads > 1`).
    pub fn with_threads(index: usize, threads: usize) -> Result<Self> {
        if threads == 0 {
            return Err(KernelError::invalid("CpuBackend", "threads must be at least 1"));
        }
        let pool = if threads > 1 {
            let p = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .thread_name(move |i| format!("crossbow-cpu{index}-op{i}"))
                .build()
                .map_err(|e| KernelError::invalid("CpuBackend", format!("cannot start {threads} threads: {e}")))?;
            Some(Arc::new(p))
        } else {
            None
        };
        Ok(CpuBackend { index, threads, pool, gemm: CpuGemm::default() })
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
        CpuCtx { gemm: self.gemm, pool: self.pool.as_deref(), threads: self.threads }
    }
}

/// What a CPU kernel needs to know about the backend.
#[derive(Clone, Copy)]
pub(crate) struct CpuCtx<'a> {
    pub gemm: CpuGemm,
    pub pool: Option<&'a rayon::ThreadPool>,
    pub threads: usize,
}

impl CpuCtx<'_> {
    /// Runs `f` on every item, in parallel on the pool when there is one.
    pub fn for_each<T: Send>(&self, items: Vec<T>, f: impl Fn(T) + Sync + Send) {
        match self.pool {
            Some(p) if items.len() > 1 => {
                use rayon::prelude::*;
                p.install(|| items.into_par_iter().for_each(f))
            }
            _ => items.into_iter().for_each(f),
        }
    }

    /// Maps every item, in parallel on the pool when there is one; results keep their order.
    pub fn map<T: Send, R: Send>(&self, items: Vec<T>, f: impl Fn(T) -> R + Sync + Send) -> Vec<R> {
        match self.pool {
            Some(p) if items.len() > 1 => {
                use rayon::prelude::*;
                p.install(|| items.into_par_iter().map(f).collect())
            }
            _ => items.into_iter().map(f).collect(),
        }
    }

    /// Number of groups to split `n` independent items into.
    pub fn groups(&self, n: usize) -> usize {
        self.threads.min(n).max(1)
    }
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
        host_slice_mut(dst).copy_from_slice(host_slice(src));
        Ok(())
    }

    fn fill(&self, dst: ViewMut<'_, Self>, value: f32) -> Result<()> {
        host_slice_mut(dst).fill(value);
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
