//! NCCL: summing one buffer per GPU across the GPUs of one process or of several processes.
//!
//! NCCL is loaded lazily, the first time [`status`] is called (the engine calls it only when
//! `--all-reduce` is `auto` or `nccl`): a machine without `libnccl.so.2` runs everything else
//! exactly as without this module. Loading goes through the same checks as the other CUDA
//! libraries ([`super::libs`]): the versioned name `libnccl.so.2` first, never a stub, and the
//! file cudarc will `dlopen` must be that same file. cudarc (0.19.10) tries only
//! `libnccl.so` and a few other names, never `libnccl.so.2` — the name pip wheels
//! (`nvidia-nccl-cu12`, `nvidia-nccl-cu13`, PyTorch's) and Debian's `libnccl2` install — so
//! the usual install needs a `libnccl.so` link next to it on `LD_LIBRARY_PATH`; the error
//! says so with the exact command.
//!
//! cudarc's bindings are built with the feature `nccl-02022`, the oldest it has: every
//! function called here ([`REQUIRED_SYMBOLS`]) exists in every NCCL 2.x since 2.4 with the
//! same signature, and with dynamic loading cudarc resolves each symbol on its first call and
//! *panics* if it is missing ("Missing symbol ..."), so [`status`] first looks every one of
//! them up itself and refuses a library that lacks one. No function is called before
//! [`status`] succeeded.
//!
//! Every GPU taking part is one NCCL rank: the GPUs of this process are ranks
//! `first_rank .. first_rank + n` of a communicator of `ranks` ranks, created with
//! `ncclCommInitRank` inside one `ncclGroupStart`/`ncclGroupEnd` (one process, several GPUs:
//! `first_rank = 0`, `ranks = n`, the id made locally; several processes: the id made by
//! rank 0 and broadcast). [`Communicators::all_reduce_sum`] enqueues one in-place
//! `ncclAllReduce` (f32, sum) per GPU on the stream of the backend given for it, again
//! grouped, so it is ordered after the work already on those streams and before the work
//! enqueued later, like any op of the backend.
//!
//! Bit-identical totals: NCCL documents that `ncclAllReduce` "leaves identical copies of the
//! result in each recvbuff" (NCCL user guide, API, Collective Communication Functions,
//! <https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/api/colls.html>), and its
//! maintainer explains why for ring and tree: "once the sum is complete, it will be transmitted
//! unchanged to all GPUs ... all ranks should get the same value, always"
//! (<https://github.com/NVIDIA/nccl/issues/855>; likewise #434 and, for the NVLink-SHARP
//! "NVLS" algorithm, "Not deterministic between different calls. All ranks should always get
//! the same results", #1497). The *order* of the additions is NCCL's (ring, tree, NVLS) and
//! differs from the host all-reduce's fixed order, so totals agree with it only within
//! rounding; across GPUs they are the same bits.

use crate::error::{KernelError, Result};

/// Every NCCL function this module calls; [`status`] refuses a library missing one (cudarc
/// would panic on the first call instead).
pub const REQUIRED_SYMBOLS: [&str; 9] = [
    "ncclGetVersion",
    "ncclGetUniqueId",
    "ncclCommInitRank",
    "ncclGroupStart",
    "ncclGroupEnd",
    "ncclAllReduce",
    "ncclCommDestroy",
    "ncclCommGetAsyncError",
    "ncclGetErrorString",
];

/// Size of an NCCL unique id (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// The NCCL library in use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NcclInfo {
    /// The file loaded.
    pub path: std::path::PathBuf,
    /// `ncclGetVersion`: `major * 10000 + minor * 100 + patch` (NCCL ≥ 2.9).
    pub version: i32,
}

impl NcclInfo {
    /// `"2.27.3"`.
    pub fn version_string(&self) -> String {
        version_string(self.version)
    }
}

/// `ncclGetVersion`'s code as `major.minor.patch` (codes below 10000 are the pre-2.9
/// `major * 1000 + minor * 100 + patch`).
pub fn version_string(code: i32) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// An NCCL unique id: made by one rank ([`UniqueId::new`]), shared with every other (its
/// bytes), used by all to create one communicator.
#[derive(Clone, PartialEq, Eq)]
pub struct UniqueId([u8; UNIQUE_ID_BYTES]);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UniqueId(")?;
        for b in &self.0[..16] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "...)")
    }
}

impl UniqueId {
    /// The id from its bytes (as broadcast by the rank that made it). Errors: not 128 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let arr: [u8; UNIQUE_ID_BYTES] = bytes.try_into().map_err(|_| KernelError::Cuda {
            context: "NCCL unique id".into(),
            msg: format!("got {} bytes, an id has {UNIQUE_ID_BYTES}", bytes.len()),
        })?;
        Ok(UniqueId(arr))
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

#[cfg(feature = "cuda")]
pub use imp::*;

#[cfg(feature = "cuda")]
mod imp {
    use std::ffi::CStr;
    use std::sync::{Arc, Mutex, OnceLock};

    use cudarc::driver::{CudaStream, DevicePtr};
    use cudarc::nccl::sys;

    use super::{NcclInfo, REQUIRED_SYMBOLS, UNIQUE_ID_BYTES, UniqueId};
    use crate::backend::Storage;
    use crate::cuda::CudaBackend;
    use crate::cuda::libs::{self, CudaLib};
    use crate::error::{KernelError, Result};

    fn nccl_err(call: &str, r: sys::ncclResult_t) -> KernelError {
        // SAFETY: only reached after `status` succeeded (the library and this symbol exist);
        // ncclGetErrorString returns a static string.
        let text = unsafe {
            let p = sys::ncclGetErrorString(r);
            if p.is_null() { String::new() } else { CStr::from_ptr(p).to_string_lossy().into_owned() }
        };
        KernelError::Cuda { context: format!("NCCL {call}"), msg: format!("{r:?}: {text}") }
    }

    fn check(call: &str, r: sys::ncclResult_t) -> Result<()> {
        if r == sys::ncclResult_t::ncclSuccess { Ok(()) } else { Err(nccl_err(call, r)) }
    }

    /// Loads NCCL (once per process) and says which file and version, or why not. Never
    /// panics: a missing library, a stub, a file other than the one cudarc would load, or a
    /// missing function is an error naming it.
    pub fn status() -> Result<NcclInfo> {
        static STATUS: OnceLock<std::result::Result<NcclInfo, String>> = OnceLock::new();
        STATUS.get_or_init(load).clone().map_err(|msg| KernelError::Cuda { context: "loading NCCL".into(), msg })
    }

    fn load() -> std::result::Result<NcclInfo, String> {
        // NCCL's names do not depend on the driver's version; without a driver (a machine
        // with no GPU) NCCL still loads, and only creating a communicator fails.
        let driver = libs::driver_version_direct().unwrap_or(0);
        let path = libs::prepare(CudaLib::Nccl, driver)?;
        let missing = libs::missing_symbols(&path, &REQUIRED_SYMBOLS)?;
        if !missing.is_empty() {
            return Err(format!("{} lacks {} (crossbow needs NCCL 2.4 or newer)", path.display(), missing.join(", ")));
        }
        let mut v: std::ffi::c_int = 0;
        // SAFETY: the library cudarc loads is `path` (checked by `prepare`) and exports the
        // symbol (checked above); valid out-pointer.
        let r = unsafe { sys::ncclGetVersion(&mut v) };
        if r != sys::ncclResult_t::ncclSuccess {
            return Err(format!("ncclGetVersion failed ({r:?}) in {}", path.display()));
        }
        Ok(NcclInfo { path, version: v })
    }

    impl UniqueId {
        /// A new id (`ncclGetUniqueId`), made by one rank. Errors: NCCL is not available, or
        /// NCCL's bootstrap finds no network interface.
        pub fn new() -> Result<Self> {
            status()?;
            let mut id = sys::ncclUniqueId { internal: [0; UNIQUE_ID_BYTES] };
            // SAFETY: NCCL loaded and checked by `status`; valid out-pointer.
            check("ncclGetUniqueId", unsafe { sys::ncclGetUniqueId(&mut id) })?;
            let mut out = [0u8; UNIQUE_ID_BYTES];
            for (o, c) in out.iter_mut().zip(id.internal.iter()) {
                *o = *c as u8;
            }
            Ok(UniqueId(out))
        }

        fn raw(&self) -> sys::ncclUniqueId {
            let mut id = sys::ncclUniqueId { internal: [0; UNIQUE_ID_BYTES] };
            for (c, b) in id.internal.iter_mut().zip(self.0.iter()) {
                *c = *b as std::ffi::c_char;
            }
            id
        }
    }

    /// One GPU's communicator and the stream its all-reduces go on.
    struct Member {
        comm: sys::ncclComm_t,
        stream: Arc<CudaStream>,
        ordinal: usize,
    }

    /// The NCCL communicators of this process's GPUs: GPU `i` (in the order given to
    /// [`Communicators::init`]) is rank `first_rank + i` of a communicator of `ranks` ranks.
    pub struct Communicators {
        members: Mutex<Vec<Member>>,
        first_rank: usize,
        ranks: usize,
    }

    // SAFETY: an `ncclComm_t` may be used from any thread, one call at a time: every use goes
    // through the mutex, and the streams are cudarc's `Send + Sync` streams.
    unsafe impl Send for Communicators {}
    // SAFETY: as above; `&self` methods lock the mutex.
    unsafe impl Sync for Communicators {}

    impl std::fmt::Debug for Communicators {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "Communicators(ranks {}.. of {})", self.first_rank, self.ranks)
        }
    }

    impl Communicators {
        /// Creates the communicators of this process's GPUs (`backends[i]`'s GPU is rank
        /// `first_rank + i`; its stream is the one [`Communicators::all_reduce_sum`] uses)
        /// in a communicator of `ranks` ranks identified by `id`. A collective: every process
        /// of the communicator calls it with the same `id` and `ranks`. Errors: NCCL is not
        /// available, the ranks do not fit, two backends are on the same GPU, or NCCL
        /// refuses (e.g. several ranks on one GPU in other processes).
        pub fn init(id: &UniqueId, first_rank: usize, ranks: usize, backends: &[&CudaBackend]) -> Result<Self> {
            status()?;
            if backends.is_empty() || first_rank + backends.len() > ranks {
                return Err(KernelError::Cuda {
                    context: "NCCL communicator".into(),
                    msg: format!(
                        "{} GPU(s) as ranks {first_rank}.. do not fit a communicator of {ranks} ranks",
                        backends.len()
                    ),
                });
            }
            let ordinals: Vec<usize> = backends.iter().map(|b| b.cuda_device().ordinal()).collect();
            for (i, o) in ordinals.iter().enumerate() {
                if ordinals[..i].contains(o) {
                    return Err(KernelError::Cuda {
                        context: "NCCL communicator".into(),
                        msg: format!("cuda:{o} is given twice; NCCL takes each GPU of a process once"),
                    });
                }
            }
            let n = i32::try_from(ranks).map_err(|_| KernelError::Cuda {
                context: "NCCL communicator".into(),
                msg: format!("{ranks} ranks"),
            })?;
            let raw = id.raw();
            let mut comms: Vec<sys::ncclComm_t> = vec![std::ptr::null_mut(); backends.len()];
            // Several GPUs of one thread: the inits must be grouped (each would otherwise wait
            // for the others). ncclCommInitRank takes the GPU of the calling thread's current
            // CUDA context (the runtime uses the context the driver API made current).
            // SAFETY: NCCL loaded and checked by `status`.
            check("ncclGroupStart", unsafe { sys::ncclGroupStart() })?;
            let mut first_err = None;
            for (i, be) in backends.iter().enumerate() {
                if let Err(e) = be.cuda_device().context().bind_to_thread() {
                    first_err.get_or_insert(crate::cuda::device::drv("binding the context for NCCL", e));
                    continue;
                }
                // SAFETY: valid out-pointer; rank < ranks (checked above).
                let r = unsafe { sys::ncclCommInitRank(&mut comms[i], n, raw, (first_rank + i) as i32) };
                if let Err(e) = check("ncclCommInitRank", r) {
                    first_err.get_or_insert(e);
                }
            }
            // SAFETY: closes the group opened above.
            let end = check("ncclGroupEnd (communicator init)", unsafe { sys::ncclGroupEnd() });
            let members: Vec<Member> = comms
                .into_iter()
                .zip(backends)
                .zip(&ordinals)
                .map(|((comm, be), &ordinal)| Member { comm, stream: Arc::clone(be.stream()), ordinal })
                .collect();
            let comms = Communicators { members: Mutex::new(members), first_rank, ranks };
            if let Some(e) = first_err {
                return Err(e);
            }
            end?;
            comms.async_error()?;
            Ok(comms)
        }

        /// Number of ranks of the communicator (GPUs of every process).
        pub fn ranks(&self) -> usize {
            self.ranks
        }

        /// The rank of this process's first GPU.
        pub fn first_rank(&self) -> usize {
            self.first_rank
        }

        fn lock(&self) -> Result<std::sync::MutexGuard<'_, Vec<Member>>> {
            self.members
                .lock()
                .map_err(|_| KernelError::Cuda { context: "NCCL".into(), msg: "communicator state poisoned".into() })
        }

        /// Reports an asynchronous NCCL error of any communicator (a peer that failed).
        pub fn async_error(&self) -> Result<()> {
            let m = self.lock()?;
            for mem in m.iter() {
                if mem.comm.is_null() {
                    continue;
                }
                let mut r = sys::ncclResult_t::ncclSuccess;
                // SAFETY: a live communicator; valid out-pointer.
                check("ncclCommGetAsyncError", unsafe { sys::ncclCommGetAsyncError(mem.comm, &mut r) })?;
                if r != sys::ncclResult_t::ncclSuccess && r != sys::ncclResult_t::ncclInProgress {
                    return Err(nccl_err(&format!("communicator of cuda:{}", mem.ordinal), r));
                }
            }
            Ok(())
        }

        /// In place, `parts[i].1` (on GPU `i`, first `len` floats) becomes the sum over every
        /// rank of the communicator: one `ncclAllReduce` per GPU on its stream, grouped.
        /// Asynchronous like every op: work enqueued later on those streams sees the total.
        /// The totals are the same bits on every GPU (see the module docs).
        pub fn all_reduce_sum(
            &self,
            parts: &mut [(&CudaBackend, &mut <CudaBackend as Storage>::Buffer)],
            len: usize,
        ) -> Result<()> {
            let m = self.lock()?;
            if parts.len() != m.len() {
                return Err(KernelError::Cuda {
                    context: "NCCL all-reduce".into(),
                    msg: format!("{} buffers for {} communicators", parts.len(), m.len()),
                });
            }
            for ((be, buf), mem) in parts.iter().zip(m.iter()) {
                if be.cuda_device().ordinal() != mem.ordinal || buf.len() < len {
                    return Err(KernelError::Cuda {
                        context: "NCCL all-reduce".into(),
                        msg: format!(
                            "a buffer of {} floats on cuda:{} for the communicator of cuda:{} ({len} floats)",
                            buf.len(),
                            be.cuda_device().ordinal(),
                            mem.ordinal
                        ),
                    });
                }
            }
            // SAFETY: NCCL loaded (a communicator exists).
            check("ncclGroupStart", unsafe { sys::ncclGroupStart() })?;
            let mut first_err = None;
            for ((_, buf), mem) in parts.iter_mut().zip(m.iter()) {
                let (ptr, _no_events) = buf.device_ptr(&mem.stream);
                let p = ptr as usize as *mut std::ffi::c_void;
                // SAFETY: `ptr` is a live device buffer of at least `len` floats on the
                // member's GPU; in place (send == recv) is allowed; the stream is the
                // backend's, alive as long as `mem`.
                let r = unsafe {
                    sys::ncclAllReduce(
                        p,
                        p,
                        len,
                        sys::ncclDataType_t::ncclFloat32,
                        sys::ncclRedOp_t::ncclSum,
                        mem.comm,
                        mem.stream.cu_stream() as sys::cudaStream_t,
                    )
                };
                if let Err(e) = check("ncclAllReduce", r) {
                    first_err.get_or_insert(e);
                }
            }
            // SAFETY: closes the group opened above.
            let end = check("ncclGroupEnd (all-reduce)", unsafe { sys::ncclGroupEnd() });
            if let Some(e) = first_err {
                return Err(e);
            }
            end
        }
    }

    impl Drop for Communicators {
        fn drop(&mut self) {
            let members = match self.members.get_mut() {
                Ok(m) => std::mem::take(m),
                Err(p) => std::mem::take(p.into_inner()),
            };
            for mem in members {
                // Pending all-reduces first: the communicator must be idle when destroyed.
                let _ = mem.stream.synchronize();
                if !mem.comm.is_null() {
                    // SAFETY: a communicator created by `init`, destroyed once.
                    let _ = unsafe { sys::ncclCommDestroy(mem.comm) };
                }
            }
        }
    }
}

#[cfg(not(feature = "cuda"))]
pub use stub::*;

#[cfg(not(feature = "cuda"))]
mod stub {
    use super::{NcclInfo, UniqueId};
    use crate::backend::Storage;
    use crate::cuda::CudaBackend;
    use crate::error::{KernelError, Result};

    #[derive(Clone, Copy, Debug)]
    enum Never {}

    /// Always [`KernelError::NotCompiledWithCuda`].
    pub fn status() -> Result<NcclInfo> {
        Err(KernelError::NotCompiledWithCuda)
    }

    impl UniqueId {
        /// Always [`KernelError::NotCompiledWithCuda`].
        pub fn new() -> Result<Self> {
            Err(KernelError::NotCompiledWithCuda)
        }
    }

    /// NCCL communicators (uninhabited without the `cuda` feature).
    #[derive(Debug)]
    pub struct Communicators(Never);

    impl Communicators {
        /// Always [`KernelError::NotCompiledWithCuda`].
        pub fn init(_id: &UniqueId, _first: usize, _ranks: usize, _backends: &[&CudaBackend]) -> Result<Self> {
            Err(KernelError::NotCompiledWithCuda)
        }

        /// Number of ranks.
        pub fn ranks(&self) -> usize {
            match self.0 {}
        }

        /// The rank of this process's first GPU.
        pub fn first_rank(&self) -> usize {
            match self.0 {}
        }

        /// Never called (uninhabited).
        pub fn async_error(&self) -> Result<()> {
            match self.0 {}
        }

        /// Never called (uninhabited).
        pub fn all_reduce_sum(
            &self,
            _parts: &mut [(&CudaBackend, &mut <CudaBackend as Storage>::Buffer)],
            _len: usize,
        ) -> Result<()> {
            match self.0 {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_both_encodings() {
        assert_eq!(version_string(22703), "2.27.3");
        assert_eq!(version_string(21903), "2.19.3");
        assert_eq!(version_string(2406), "2.4.6");
    }

    /// With NCCL on the library path (the `nvidia-nccl-cu13` wheel and a `libnccl.so` link,
    /// see the README): it loads through the project's checks, reports its version, and makes
    /// ids (`ncclGetUniqueId` needs no GPU). `CROSSBOW_REQUIRE_NCCL=1` turns the skip into a
    /// failure.
    #[cfg(feature = "cuda")]
    #[test]
    fn nccl_loads_and_makes_distinct_ids() {
        let info = match status() {
            Ok(i) => i,
            Err(e) => {
                assert!(std::env::var("CROSSBOW_REQUIRE_NCCL").as_deref() != Ok("1"), "NCCL required: {e}");
                eprintln!("skipped: no NCCL library ({e})");
                return;
            }
        };
        eprintln!("NCCL {} from {}", info.version_string(), info.path.display());
        assert!(info.version >= 20400, "{}", info.version);
        let name = info.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        assert!(name.starts_with("libnccl.so.2"), "{}", info.path.display());
        let a = UniqueId::new().unwrap();
        let b = UniqueId::new().unwrap();
        assert!(a.as_bytes().iter().any(|&x| x != 0));
        assert_ne!(a, b, "two ids must differ");
        assert_eq!(UniqueId::from_bytes(a.as_bytes()).unwrap(), a);
    }

    /// Where NCCL loads but no GPU exists (CI with the wheel), creating a communicator fails
    /// with an NCCL error code, not a crash or a hang. (Through the crate's API it cannot be
    /// reached without a GPU: opening a device fails first.)
    #[cfg(feature = "cuda")]
    #[test]
    fn a_communicator_without_a_gpu_is_an_error() {
        if status().is_err() || crate::cuda::device_count().is_ok_and(|n| n > 0) {
            eprintln!("skipped: needs NCCL and no GPU");
            return;
        }
        let id = UniqueId::new().unwrap();
        let mut raw = cudarc::nccl::sys::ncclUniqueId { internal: [0; UNIQUE_ID_BYTES] };
        for (c, b) in raw.internal.iter_mut().zip(id.as_bytes()) {
            *c = *b as std::ffi::c_char;
        }
        let mut comm = std::ptr::null_mut();
        // SAFETY: NCCL loaded and checked; valid out-pointer; one rank of one.
        let r = unsafe { cudarc::nccl::sys::ncclCommInitRank(&mut comm, 1, raw, 0) };
        eprintln!("ncclCommInitRank without a GPU: {r:?}");
        assert_ne!(r, cudarc::nccl::sys::ncclResult_t::ncclSuccess);
    }

    #[test]
    fn ids_round_trip_and_refuse_wrong_lengths() {
        let bytes: Vec<u8> = (0..128u32).map(|i| (i * 7) as u8).collect();
        let id = UniqueId::from_bytes(&bytes).unwrap();
        assert_eq!(id.as_bytes(), &bytes[..]);
        let e = UniqueId::from_bytes(&bytes[..127]).unwrap_err().to_string();
        assert!(e.contains("got 127 bytes, an id has 128"), "{e}");
    }
}
