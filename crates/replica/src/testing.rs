//! Test support (feature `testing`): engines on any backend of
//! [`crossbow_kernels::testing::TestBackend`], so that one engine or synchroniser test body
//! runs on the CPU, the GPU kernel emulator and a real GPU through
//! [`crossbow_kernels::test_backends!`].

use crossbow_kernels::testing::TestBackend;
use crossbow_tensor::Device;

use crate::engine::DeviceFactory;
use crate::error::Result;

/// `count` engine devices that all live on `base`'s device: every learner and every device's
/// own work gets a sibling backend (on a GPU its own stream), as the real device factories do.
pub struct TestDevices<B: TestBackend> {
    base: B,
    count: usize,
}

impl<B: TestBackend> TestDevices<B> {
    /// `count` devices on `base`'s device.
    pub fn new(base: &B, count: usize) -> Result<Self> {
        Ok(TestDevices { base: base.sibling()?, count })
    }
}

impl<B: TestBackend> DeviceFactory<B> for TestDevices<B> {
    fn devices(&self) -> Vec<Device> {
        vec![self.base.device(); self.count]
    }

    fn learner_backend(&self, _d: usize, _learners: usize) -> Result<B> {
        Ok(self.base.sibling()?)
    }

    fn device_backend(&self, _d: usize) -> Result<B> {
        Ok(self.base.sibling()?)
    }

    fn host_threads(&self, _d: usize) -> usize {
        1
    }
}

/// Ranks of one process group as threads of one process: a [`crate::ProcessGroup`] for tests
/// of what several ranks agree on, without MPI. Every collective is an all-gather of bytes
/// (two barriers); the sums add in rank order, as `MpiGroup` does, so every rank gets the
/// same bits.
pub struct ThreadGroup {
    rank: usize,
    size: usize,
    shared: std::sync::Arc<(std::sync::Barrier, std::sync::Mutex<Vec<Vec<u8>>>)>,
}

impl ThreadGroup {
    /// The `size` ranks of a new group, rank `r` at index `r` (hand each to its own thread).
    pub fn group(size: usize) -> Vec<ThreadGroup> {
        let shared = std::sync::Arc::new((std::sync::Barrier::new(size), std::sync::Mutex::new(vec![vec![]; size])));
        (0..size).map(|rank| ThreadGroup { rank, size, shared: std::sync::Arc::clone(&shared) }).collect()
    }

    /// Every rank's `mine`, by rank.
    fn exchange(&self, mine: Vec<u8>) -> Vec<Vec<u8>> {
        let (barrier, slots) = &*self.shared;
        slots.lock().unwrap_or_else(|e| e.into_inner())[self.rank] = mine;
        barrier.wait();
        let all = slots.lock().unwrap_or_else(|e| e.into_inner()).clone();
        barrier.wait();
        all
    }
}

impl crate::ProcessGroup for ThreadGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn all_reduce_sum_f32(&self, buf: &mut [f32]) -> Result<()> {
        let all = self.exchange(buf.iter().flat_map(|v| v.to_le_bytes()).collect());
        buf.fill(0.0);
        for part in &all {
            for (b, c) in buf.iter_mut().zip(part.chunks_exact(4)) {
                *b += f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        Ok(())
    }

    fn all_reduce_sum_f64(&self, buf: &mut [f64]) -> Result<()> {
        let all = self.exchange(buf.iter().flat_map(|v| v.to_le_bytes()).collect());
        buf.fill(0.0);
        for part in &all {
            for (b, c) in buf.iter_mut().zip(part.chunks_exact(8)) {
                *b += f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
            }
        }
        Ok(())
    }

    fn all_gather_u64(&self, value: u64) -> Result<Vec<u64>> {
        let all = self.exchange(value.to_le_bytes().to_vec());
        Ok(all.iter().map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])).collect())
    }

    fn broadcast_bytes(&self, root: usize, buf: &mut Vec<u8>) -> Result<()> {
        let all = self.exchange(buf.clone());
        *buf = all.get(root).cloned().unwrap_or_default();
        Ok(())
    }

    fn gather_bytes(&self, root: usize, part: &[u8]) -> Result<Vec<Vec<u8>>> {
        let all = self.exchange(part.to_vec());
        Ok(if self.rank == root { all } else { vec![] })
    }
}
