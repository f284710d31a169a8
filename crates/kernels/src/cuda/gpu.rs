//! [`GpuBackend`]: the GPU backend over an executor, and its memory. Each op's GPU code
//! (`src/<op>/cuda.rs`: `impl<E: Launcher> <Op> for GpuBackend<E>`) runs after the op trait's
//! argument checks, on the executor.

use crossbow_tensor::Device;

use super::launch::{DeviceRegion, Launcher, replay_state};
use super::replay::ReplayStats;
use crate::backend::{Backend, Storage, View, ViewMut};
use crate::error::{KernelError, Result, check_len};

/// A backend that runs this crate's GPU kernels (the `.cu` sources next to each op) and
/// GEMMs on an executor: [`super::CudaLauncher`] on a real GPU — [`super::CudaBackend`] is
/// `GpuBackend<CudaLauncher>` — or the host emulator the CPU-only tests use. Without the `cuda`
/// feature `CudaLauncher` is uninhabited, so a `CudaBackend` cannot exist.
#[derive(Clone)]
pub struct GpuBackend<E> {
    pub(crate) launcher: E,
}

impl<E: Launcher> GpuBackend<E> {
    /// The executor.
    pub fn exec(&self) -> &E {
        &self.launcher
    }

    /// The device region of a view (ops' `cuda.rs` launch kernels on these).
    pub(crate) fn region(&self, v: View<'_, Self>) -> Result<DeviceRegion> {
        Ok(DeviceRegion { addr: self.launcher.addr(v.buffer())? + 4 * v.offset() as u64, len: v.len() })
    }

    /// Turns CUDA graphs on or off for this backend ([`super::replay`]); on again forgets why
    /// they were turned off.
    pub fn set_graphs(&self, on: bool) -> Result<()> {
        replay_state(self.launcher.replay())?.set_enabled(on);
        Ok(())
    }

    /// Whether units of work run through graphs now, and if they were turned off on their
    /// own, why.
    pub fn graphs(&self) -> Result<(bool, Option<String>)> {
        let r = replay_state(self.launcher.replay())?;
        Ok((r.active(), r.off_reason().map(str::to_string)))
    }

    /// What graphs did on this backend so far.
    pub fn graph_stats(&self) -> Result<ReplayStats> {
        Ok(replay_state(self.launcher.replay())?.stats())
    }

    /// The device region of a view that is written.
    pub(crate) fn region_mut(&self, v: ViewMut<'_, Self>) -> Result<DeviceRegion> {
        let (buf, r) = v.into_parts();
        Ok(DeviceRegion { addr: self.launcher.addr_mut(buf)? + 4 * r.start as u64, len: r.len() })
    }
}

impl<E> std::fmt::Debug for GpuBackend<E>
where
    E: Launcher,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuBackend({})", self.launcher.describe())
    }
}

impl<E: Launcher> Storage for GpuBackend<E> {
    type Buffer = E::Buffer;

    fn buffer_len(buf: &E::Buffer) -> usize {
        E::buffer_len(buf)
    }
}

impl<E: Launcher> Backend for GpuBackend<E> {
    fn device(&self) -> Device {
        self.launcher.device()
    }

    fn describe(&self) -> String {
        self.launcher.describe()
    }

    fn alloc(&self, len: usize) -> Result<E::Buffer> {
        self.launcher.alloc(len)
    }

    fn upload(&self, src: &[f32], dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("upload", "dst", src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let d = self.region_mut(dst)?;
        self.launcher.upload(src, d.addr)
    }

    fn download(&self, src: View<'_, Self>, dst: &mut [f32]) -> Result<()> {
        check_len("download", "dst", src.len(), dst.len())?;
        let s = self.region(src)?;
        self.launcher.download(s.addr, dst)
    }

    type Pending = E::Pending;

    fn start_download(&self, src: View<'_, Self>) -> Result<E::Pending> {
        let s = self.region(src)?;
        self.launcher.start_download(s.addr, s.len)
    }

    fn finish_download(&self, pending: E::Pending) -> Result<Vec<f32>> {
        self.launcher.finish_download(pending)
    }

    fn copy(&self, src: View<'_, Self>, dst: ViewMut<'_, Self>) -> Result<()> {
        check_len("copy", "dst", src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let s = self.region(src)?;
        let d = self.region_mut(dst)?;
        self.launcher.copy(s.addr, d.addr, s.len)
    }

    fn fill(&self, dst: ViewMut<'_, Self>, value: f32) -> Result<()> {
        let d = self.region_mut(dst)?;
        crate::vector::cuda::fill(&self.launcher, d, value)
    }

    fn synchronize(&self) -> Result<()> {
        self.launcher.synchronize()
    }

    type Event = E::Event;

    fn record(&self) -> Result<E::Event> {
        self.launcher.record()
    }

    fn wait(&self, event: &E::Event) -> Result<()> {
        self.launcher.wait(event)
    }

    fn replayable<T, Er: From<KernelError>>(
        &self,
        mut work: impl FnMut() -> std::result::Result<T, Er>,
    ) -> std::result::Result<T, Er> {
        let e = &self.launcher;
        {
            let mut r = replay_state(e.replay())?;
            if !r.active() {
                r.count_plain();
                drop(r);
                return work();
            }
            r.start();
        }
        // A panic inside `work` must not leave the executor recording (it would then issue
        // nothing, silently): the guard ends the recording on the way out.
        let guard = EndRecording(e.replay());
        let out = work();
        std::mem::forget(guard);
        let recorded = replay_state(e.replay())?.finish();
        let ops = match recorded {
            Ok(ops) => ops,
            // Nothing was issued: turn graphs off and run the work plainly.
            Err(why) => return plain_after(e, why, work),
        };
        // An error of the work itself (nothing was issued either).
        let value = out?;
        if ops.is_empty() {
            return Ok(value);
        }
        let hit = replay_state(e.replay())?.take_hit(&ops);
        if let Some((cached, graph)) = hit {
            let launched = e.launch_graph(&graph);
            replay_state(e.replay())?.restore(cached, graph);
            launched?;
            return Ok(value);
        }
        {
            let mut r = replay_state(e.replay())?;
            if r.miss() {
                drop(r);
                let why = format!(
                    "the recorded work changed {} times in a row (arguments that vary every iteration, e.g. dropout seeds)",
                    super::replay::MAX_MISSES + 1
                );
                return plain_after(e, why, work);
            }
        }
        match e.capture(&ops) {
            Ok(graph) => {
                e.launch_graph(&graph)?;
                replay_state(e.replay())?.cache(ops, graph);
                Ok(value)
            }
            Err(err) => plain_after(e, format!("capturing a graph failed: {err}"), work),
        }
    }
}

/// Ends a recording when dropped (only on a panic: the normal path forgets it).
struct EndRecording<'a, G>(&'a std::sync::Mutex<super::replay::Replay<G>>);

impl<G> Drop for EndRecording<'_, G> {
    fn drop(&mut self) {
        if let Ok(mut r) = self.0.lock() {
            let _ = r.finish();
        }
    }
}

/// Turns graphs off on `e` for `why` (said once on stderr) and runs `work` plainly.
fn plain_after<E: Launcher, T, Er: From<KernelError>>(
    e: &E,
    why: String,
    mut work: impl FnMut() -> std::result::Result<T, Er>,
) -> std::result::Result<T, Er> {
    {
        let mut r = replay_state(e.replay())?;
        if r.turn_off(why.clone()) {
            eprintln!("crossbow: {}: CUDA graphs off, plain launches from now on: {why}", e.describe());
        }
        r.count_plain();
    }
    work()
}
