//! What a backend is: [`Storage`] (its buffer type), the op traits of every op folder
//! (gathered in [`Ops`]), and [`Backend`] (memory, copies and ordering on top of them), plus
//! the buffer views ops take.

use std::ops::Range;

use crossbow_tensor::Device;

use crate::Ops;
use crate::error::{KernelError, Result};

/// The buffer type of a backend: what [`View`]s and [`ViewMut`]s point into. Every op trait
/// builds on it.
pub trait Storage {
    /// Device memory holding `f32`s.
    type Buffer: Send + Sync + 'static;

    /// Number of `f32`s in a buffer.
    fn buffer_len(buf: &Self::Buffer) -> usize;
}

/// A compute device's implementation of every crossbow operator.
///
/// A backend owns device memory as [`Storage::Buffer`]s (a `Vec<f32>` on the CPU, a
/// `CudaSlice<f32>` on a GPU). Ops never allocate: they read [`View`]s and write
/// [`ViewMut`]s — `(buffer, offset, len)` — so a model can keep all its parameters in one flat
/// buffer and hand each layer its region, and activations in buffers a memory plan reuses.
///
/// The ops come from one trait per op folder ([`crate::gemm::Gemm`],
/// [`crate::conv2d::Conv2d`], ..., all of them gathered in [`Ops`]): generic code bounded by
/// `B: Backend` calls every op as a method; code holding a concrete backend imports the
/// traits with `use crossbow_kernels::prelude::*`. Each op trait's provided methods check
/// the arguments (once, for every backend) and then call the backend's `*_unchecked`
/// kernels.
///
/// Conventions for every op:
/// * Tensors are dense, row-major; images NCHW. Geometry comes in a small `*Geom` struct that
///   is validated (`validate()`) and checked against every view's length; a mismatch is a
///   [`KernelError::Length`] naming the op and the argument, never a panic.
/// * Outputs are overwritten, never accumulated into (except where a doc says otherwise).
///   Where an op has two outputs they live in different buffers (borrowing makes that a
///   compile-time rule). A layer's parameters are one contiguous region, weights first and
///   bias (or beta) after, so the backward pass writes all of a layer's gradients in one view.
/// * Labels are class indices stored as `f32` (exact up to 2^24 classes).
/// * Work is ordered: on a GPU ops are enqueued on the backend's stream and run in call
///   order; [`Backend::download`] and [`Backend::synchronize`] wait for it. On the CPU every op
///   has finished when it returns.
///
/// The CPU backend ([`crate::CpuBackend`]) is the reference every other backend is tested
/// against (see `crossbow_kernels::testing`, feature `testing`).
pub trait Backend: Ops + Send + Sync + 'static {
    /// The device this backend runs on.
    fn device(&self) -> Device;

    /// A human-readable description (device, library versions, threads).
    fn describe(&self) -> String;

    /// A zero-filled buffer of `len` `f32`s.
    fn alloc(&self, len: usize) -> Result<Self::Buffer>;

    /// Copies host memory into a view (`src.len() == dst.len()`).
    fn upload(&self, src: &[f32], dst: ViewMut<'_, Self>) -> Result<()>;

    /// Copies a view to host memory, waiting for pending work (`src.len() == dst.len()`).
    fn download(&self, src: View<'_, Self>, dst: &mut [f32]) -> Result<()>;

    /// A download started by [`Backend::start_download`] and not yet finished.
    type Pending: Send + 'static;

    /// Starts copying a view to host memory at this point of the backend's queue, without
    /// waiting for the work issued before it: [`Backend::finish_download`] then waits for
    /// that copy only, and returns the values the view held at this point (later work may
    /// overwrite the view meanwhile). For small reads whose values are wanted later, e.g. a
    /// loss read one iteration late so the host does not wait for the device every
    /// iteration. On the CPU the copy is made at once.
    fn start_download(&self, src: View<'_, Self>) -> Result<Self::Pending>;

    /// Waits for a started download and returns its values.
    fn finish_download(&self, pending: Self::Pending) -> Result<Vec<f32>>;

    /// Copies between two views of this device (`src.len() == dst.len()`).
    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()>;

    /// Sets every element of a view to `value`.
    fn fill(&self, dst: ViewMut<'_, Self>, value: f32) -> Result<()>;

    /// Waits until all work issued on this backend has finished.
    fn synchronize(&self) -> Result<()>;

    /// A point in this backend's queue of work (a CUDA event; nothing on the CPU).
    type Event: Send + Sync;

    /// Marks the current end of this backend's queue: an event that completes when all work
    /// issued so far has finished.
    fn record(&self) -> Result<Self::Event>;

    /// Makes work issued on this backend from now on wait until `event` (recorded on any
    /// backend of this kind) has completed. This is how work on one learner's stream is
    /// ordered after work on another stream that touched the same buffers. CPU ops finish
    /// before they return, so there it does nothing.
    fn wait(&self, event: &Self::Event) -> Result<()>;

    /// Runs `work` — code that only enqueues ops on this backend (no upload, download,
    /// synchronisation or event) — as one unit that may be replayed: on a GPU with graphs on
    /// it is recorded and, when identical to the last unit, issued as the cached CUDA graph
    /// (`crossbow_kernels::cuda::replay`); it may then run `work` a second time, plainly, so
    /// `work` must be repeatable. Elsewhere it just runs `work`. The results are the same
    /// bits either way.
    fn replayable<T, Er: From<KernelError>>(
        &self,
        mut work: impl FnMut() -> std::result::Result<T, Er>,
    ) -> std::result::Result<T, Er> {
        work()
    }
}

/// A read-only region of a backend buffer: `(buffer, offset, len)`.
pub struct View<'a, B: Storage + ?Sized> {
    buf: &'a B::Buffer,
    offset: usize,
    len: usize,
}

impl<B: Storage + ?Sized> Clone for View<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Storage + ?Sized> Copy for View<'_, B> {}

impl<B: Storage + ?Sized> std::fmt::Debug for View<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "View({}..{})", self.offset, self.offset + self.len)
    }
}

fn check_range(range: &Range<usize>, len: usize) -> Result<()> {
    if range.start <= range.end && range.end <= len {
        Ok(())
    } else {
        Err(KernelError::Range { start: range.start, end: range.end, len })
    }
}

impl<'a, B: Storage + ?Sized> View<'a, B> {
    /// The whole buffer.
    pub fn whole(buf: &'a B::Buffer) -> Self {
        View { buf, offset: 0, len: B::buffer_len(buf) }
    }

    /// A region of a buffer; an error if it does not lie inside.
    pub fn new(buf: &'a B::Buffer, range: Range<usize>) -> Result<Self> {
        check_range(&range, B::buffer_len(buf))?;
        Ok(View { buf, offset: range.start, len: range.end - range.start })
    }

    /// A sub-region, relative to this view.
    pub fn slice(self, range: Range<usize>) -> Result<Self> {
        check_range(&range, self.len)?;
        Ok(View { buf: self.buf, offset: self.offset + range.start, len: range.end - range.start })
    }

    /// Splits into `[0, mid)` and `[mid, len)`.
    pub fn split_at(self, mid: usize) -> Result<(Self, Self)> {
        Ok((self.slice(0..mid)?, self.slice(mid..self.len)?))
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Offset of the view in its buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The range of the view in its buffer.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }

    /// The underlying buffer (backends use this with [`View::range`]).
    pub fn buffer(&self) -> &'a B::Buffer {
        self.buf
    }
}

/// A writable region of a backend buffer: `(buffer, offset, len)`.
pub struct ViewMut<'a, B: Storage + ?Sized> {
    buf: &'a mut B::Buffer,
    offset: usize,
    len: usize,
}

impl<B: Storage + ?Sized> std::fmt::Debug for ViewMut<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ViewMut({}..{})", self.offset, self.offset + self.len)
    }
}

impl<'a, B: Storage + ?Sized> ViewMut<'a, B> {
    /// The whole buffer.
    pub fn whole(buf: &'a mut B::Buffer) -> Self {
        let len = B::buffer_len(buf);
        ViewMut { buf, offset: 0, len }
    }

    /// A region of a buffer; an error if it does not lie inside.
    pub fn new(buf: &'a mut B::Buffer, range: Range<usize>) -> Result<Self> {
        check_range(&range, B::buffer_len(buf))?;
        Ok(ViewMut { buf, offset: range.start, len: range.end - range.start })
    }

    /// A sub-region, relative to this view.
    pub fn slice(self, range: Range<usize>) -> Result<Self> {
        check_range(&range, self.len)?;
        Ok(ViewMut { buf: self.buf, offset: self.offset + range.start, len: range.end - range.start })
    }

    /// A shorter-lived copy of this view, so it can be passed to an op and used again after.
    pub fn reborrow(&mut self) -> ViewMut<'_, B> {
        ViewMut { buf: self.buf, offset: self.offset, len: self.len }
    }

    /// A read-only view of the same region.
    pub fn as_view(&self) -> View<'_, B> {
        View { buf: self.buf, offset: self.offset, len: self.len }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the view is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The range of the view in its buffer.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }

    /// The underlying buffer and the view's range in it (backends use this).
    pub fn into_parts(self) -> (&'a mut B::Buffer, Range<usize>) {
        let r = self.offset..self.offset + self.len;
        (self.buf, r)
    }
}
