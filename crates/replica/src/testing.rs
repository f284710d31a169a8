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
