//! Communication: how learners' contributions meet across devices, processes and servers.
//!
//! * [`AllReduce`]: the sum across one process's devices — [`HostAllReduce`] (through host
//!   memory, any backend) or NCCL ([`nccl::NcclAllReduce`], GPU to GPU, chosen with every rank by
//!   [`nccl`]'s table);
//! * [`world::ProcessGroup`]: the sum (and the few other collectives a run needs) across
//!   processes — [`world::Solo`] for one process; the MPI implementation is the `crossbow-mpi`
//!   crate (it needs an MPI library, so it lives apart).

pub mod nccl;
pub mod world;

use crossbow_kernels::{Backend, View, ViewMut};

use crate::error::Result;

/// Sums buffers across devices so that every device ends with the same total.
pub trait AllReduce<B: Backend>: Send + Sync {
    /// After the call every `parts[d].1` holds `sum_d parts[d].1` (first `len` elements),
    /// bit-identical on every device.
    fn all_reduce_sum(&self, parts: &mut [(&B, &mut B::Buffer)], len: usize) -> Result<()>;

    /// True when the sum already covers every rank of the engine's process group (NCCL's
    /// communicator spans the GPUs of all ranks), so the engine skips its host all-reduce
    /// across ranks.
    fn spans_ranks(&self) -> bool {
        false
    }

    /// Short name for logs (`"host"`).
    fn describe(&self) -> String {
        "host".into()
    }
}

/// All-reduce through host memory: download every part, sum in a fixed order (device 0
/// first), upload the same total to every device. Works for any backend; for CPU devices it
/// is a few memory copies.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostAllReduce;

impl<B: Backend> AllReduce<B> for HostAllReduce {
    fn all_reduce_sum(&self, parts: &mut [(&B, &mut B::Buffer)], len: usize) -> Result<()> {
        if parts.len() <= 1 {
            return Ok(());
        }
        let mut total = vec![0.0f32; len];
        let mut tmp = vec![0.0f32; len];
        for (i, (be, buf)) in parts.iter().enumerate() {
            if i == 0 {
                be.download(View::new(&**buf, 0..len)?, &mut total)?;
            } else {
                be.download(View::new(&**buf, 0..len)?, &mut tmp)?;
                for (t, v) in total.iter_mut().zip(&tmp) {
                    *t += *v;
                }
            }
        }
        for (be, buf) in parts.iter_mut() {
            be.upload(&total, ViewMut::new(&mut **buf, 0..len)?)?;
        }
        Ok(())
    }
}
