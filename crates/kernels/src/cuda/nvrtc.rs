//! NVRTC: compiling the embedded `.cu` sources to PTX and CUBIN. Needs only `libnvrtc`
//! (no driver, no GPU), which is looked for before the first NVRTC call, so its absence
//! is an error value, never a panic.

use std::ffi::{CStr, CString, c_char, c_int};

use cudarc::nvrtc::{result, sys};

use super::common::CompiledSource;
use super::launch::{KernelSource, sources};
use crate::error::{KernelError, Result};

/// Options every kernel is compiled with: no FMA contraction (`a * b + c` rounds twice, as
/// on the CPU), IEEE division and square root (NVRTC's defaults, stated explicitly).
pub const NVRTC_OPTIONS: &[&str] = &["--fmad=false", "--prec-div=true", "--prec-sqrt=true", "--std=c++17"];

/// True when `libnvrtc` can be loaded (e.g. the `nvidia-cuda-nvrtc` wheel's `lib` directory
/// is on `LD_LIBRARY_PATH`).
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries to dlopen the library by its candidate names.
    unsafe { sys::is_culib_present() }
}

fn require() -> Result<()> {
    if nvrtc_available() {
        // The file cudarc loads: no stub, no major newer than the driver's, and the one the
        // versioned names for this driver choose (see `libs`). Checked once per process.
        static CHECKED: std::sync::OnceLock<std::result::Result<(), String>> = std::sync::OnceLock::new();
        CHECKED
            .get_or_init(|| {
                super::libs::prepare(super::libs::CudaLib::Nvrtc, super::driver::driver_version_or_zero()).map(|_| ())
            })
            .clone()
            .map_err(|msg| KernelError::Cuda { context: "NVRTC".into(), msg })
    } else {
        Err(KernelError::Cuda {
            context: "NVRTC".into(),
            msg: "libnvrtc.so (12.x or 13.x) not found on the library path; install the \
                  `nvidia-cuda-nvrtc` (or `-cu12`) pip wheel and add its lib directory to \
                  LD_LIBRARY_PATH"
                .into(),
        })
    }
}

fn nvrtc_err(context: impl Into<String>, e: result::NvrtcError) -> KernelError {
    KernelError::Cuda { context: context.into(), msg: format!("{:?}", e.0) }
}

/// The NVRTC version `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32)> {
    require()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: two valid out-pointers.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }.result().map_err(|e| nvrtc_err("nvrtcVersion", e))?;
    Ok((major, minor))
}

/// The real architectures (`sm_XY` as `XY`) this NVRTC can compile for.
pub fn supported_archs() -> Result<Vec<i32>> {
    require()?;
    let mut n: c_int = 0;
    // SAFETY: valid out-pointer.
    unsafe { sys::nvrtcGetNumSupportedArchs(&mut n) }
        .result()
        .map_err(|e| nvrtc_err("nvrtcGetNumSupportedArchs", e))?;
    let mut archs = vec![0 as c_int; n.max(0) as usize];
    if !archs.is_empty() {
        // SAFETY: `archs` has room for the `n` entries NVRTC writes.
        unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) }
            .result()
            .map_err(|e| nvrtc_err("nvrtcGetSupportedArchs", e))?;
    }
    Ok(archs)
}

/// One compiled source: PTX (always), CUBIN (for a real `sm_XY` target), the log.
#[derive(Clone, Debug)]
pub(crate) struct Compiled {
    pub ptx: Vec<u8>,
    pub cubin: Option<Vec<u8>>,
    pub log: String,
}

/// Destroys the program when dropped (errors ignored: nothing useful can be done).
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: created by nvrtcCreateProgram and destroyed only here.
            let _ = unsafe { result::destroy_program(self.0) };
        }
    }
}

fn c_text(bytes: Vec<c_char>) -> String {
    let bytes: Vec<u8> = bytes.into_iter().map(|c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Compiles `source` for `target` (`sm_90` → PTX + CUBIN; `compute_90` → PTX only). A
/// compile error carries NVRTC's log.
pub(crate) fn compile(source: &KernelSource, target: &str) -> Result<Compiled> {
    require()?;
    let ctx = || format!("NVRTC compiling {}.cu for {target}", source.module);
    let text = CString::new(source.full_text())
        .map_err(|_| KernelError::Cuda { context: ctx(), msg: "source contains a NUL byte".into() })?;
    let name = CString::new(format!("{}.cu", source.module))
        .map_err(|_| KernelError::Cuda { context: ctx(), msg: "name contains a NUL byte".into() })?;
    let prog = Program(result::create_program(&text, Some(&name)).map_err(|e| nvrtc_err(ctx(), e))?);
    let mut options: Vec<String> = NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
    options.push(format!("--gpu-architecture={target}"));
    // SAFETY: `prog` is a live program; the options are NUL-free strings.
    let compiled = unsafe { result::compile_program(prog.0, &options) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(prog.0) }.map(c_text).unwrap_or_default();
    if let Err(e) = compiled {
        return Err(KernelError::Cuda {
            context: ctx(),
            msg: format!("{:?} with options {options:?}:\n{}", e.0, log.trim_end()),
        });
    }
    // SAFETY: compiled successfully.
    let ptx = unsafe { result::get_ptx(prog.0) }.map_err(|e| nvrtc_err(ctx(), e))?;
    let ptx: Vec<u8> = ptx.into_iter().map(|c| c as u8).take_while(|&b| b != 0).collect();
    let cubin = if target.starts_with("sm_") {
        let mut size = 0usize;
        // SAFETY: valid out-pointer; program compiled for a real architecture.
        unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) }.result().map_err(|e| nvrtc_err(ctx(), e))?;
        let mut bin = vec![0 as c_char; size];
        // SAFETY: `bin` has the size NVRTC reported.
        unsafe { sys::nvrtcGetCUBIN(prog.0, bin.as_mut_ptr()) }.result().map_err(|e| nvrtc_err(ctx(), e))?;
        Some(bin.into_iter().map(|c| c as u8).collect())
    } else {
        None
    };
    Ok(Compiled { ptx, cubin, log: log.trim().to_string() })
}

/// Compiles every embedded `.cu` source for `arch` with NVRTC — `sm_XY` produces PTX and a
/// CUBIN (so ptxas-stage errors are caught too), `compute_XY` PTX only. Needs only
/// `libnvrtc`, no driver and no GPU: this is CI's check that every kernel compiles.
pub fn compile_all_for_arch(arch: &str) -> Result<Vec<CompiledSource>> {
    let ok = arch
        .strip_prefix("sm_")
        .or_else(|| arch.strip_prefix("compute_"))
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit() || b == b'a' || b == b'f'));
    if !ok {
        return Err(KernelError::invalid("compile_all_for_arch", format!("'{arch}' is not sm_XY or compute_XY")));
    }
    sources()
        .map(|s| {
            let c = compile(s, arch)?;
            Ok(CompiledSource {
                module: s.module,
                ptx_len: c.ptx.len(),
                cubin_len: c.cubin.as_ref().map_or(0, Vec::len),
                log: c.log,
            })
        })
        .collect()
}

/// The PTX text of a compiled image, for `Ptx::from_src` (which rejects NUL bytes).
pub(crate) fn ptx_text(ptx: &[u8]) -> Result<String> {
    let end = ptx.iter().position(|&b| b == 0).unwrap_or(ptx.len());
    let cs = CStr::from_bytes_until_nul(ptx).map(|c| c.to_bytes()).unwrap_or(&ptx[..end]);
    String::from_utf8(cs.to_vec())
        .map_err(|_| KernelError::Cuda { context: "loading PTX".into(), msg: "PTX is not UTF-8".into() })
}
