//! NVRTC: compiles [`super::source::SOURCE`] for one GPU architecture, to PTX
//! (`compute_XY`, what the CI test hands to ptxas) or straight to the GPU's
//! machine code (`sm_XY`, what the engine loads at startup: no PTX JIT in the
//! driver, so an NVRTC newer than the driver still works). A failed compile
//! returns NVRTC's log whole.

use super::GpuError;
use cudarc::nvrtc::{result, sys};
use std::ffi::{CStr, CString};

/// The options every compile passes: no fused multiply-add but where the
/// source writes `fmaf` (see `source.rs`), C++17, and the target.
pub fn options(target: &str) -> Vec<String> {
    vec![format!("--gpu-architecture={target}"), "--fmad=false".into(), "--std=c++17".into()]
}

/// What NVRTC produced.
pub enum Image {
    /// PTX text (for `compute_XY` targets).
    Ptx(String),
    /// A cubin (for `sm_XY` targets).
    Cubin(Vec<u8>),
}

/// Whether NVRTC's library (libnvrtc.so) can be loaded.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to open the library.
    unsafe { sys::is_culib_present() }
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32), GpuError> {
    if !nvrtc_present() {
        return Err(GpuError::NoNvrtc);
    }
    let (mut major, mut minor) = (0, 0);
    // SAFETY: two out-parameters.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| GpuError::Cuda(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// Compiles `src` for `target` (`compute_90` gives PTX, `sm_90` a cubin).
pub fn compile(src: &str, target: &str) -> Result<Image, GpuError> {
    if !nvrtc_present() {
        return Err(GpuError::NoNvrtc);
    }
    let fail = |what: &str, e: result::NvrtcError| GpuError::Cuda(format!("NVRTC {what}: {e:?}"));
    let c_src = CString::new(src).map_err(|_| GpuError::Cuda("kernel source holds a NUL byte".into()))?;
    let name = CString::new("engine_kernels.cu").expect("no NUL");
    let prog = result::create_program(&c_src, Some(name.as_c_str())).map_err(|e| fail("create_program", e))?;
    let opts = options(target);
    // SAFETY: prog is a live program; it is destroyed below on every path.
    let compiled = unsafe { result::compile_program(prog, &opts) };
    let out = match compiled {
        Err(_) => {
            // SAFETY: prog is live; the log is a NUL-terminated C string.
            let log = unsafe { result::get_program_log(prog) }
                .map(|raw| unsafe { CStr::from_ptr(raw.as_ptr()) }.to_string_lossy().into_owned())
                .unwrap_or_else(|e| format!("(no log: {e:?})"));
            Err(GpuError::Compile { target: target.to_string(), options: opts.join(" "), log })
        }
        Ok(()) if target.starts_with("sm_") => cubin(prog).map(Image::Cubin),
        // SAFETY: prog compiled; get_ptx returns its NUL-terminated PTX.
        Ok(()) => unsafe { result::get_ptx(prog) }
            .map(|raw| Image::Ptx(unsafe { CStr::from_ptr(raw.as_ptr()) }.to_string_lossy().into_owned()))
            .map_err(|e| fail("get_ptx", e)),
    };
    // SAFETY: prog is live and not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    out
}

fn cubin(prog: sys::nvrtcProgram) -> Result<Vec<u8>, GpuError> {
    let mut size = 0usize;
    // SAFETY: prog compiled for a real architecture; size is an out-parameter.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }
        .result()
        .map_err(|e| GpuError::Cuda(format!("nvrtcGetCUBINSize: {e:?}")))?;
    let mut buf = vec![0u8; size];
    // SAFETY: buf holds size bytes.
    unsafe { sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char) }
        .result()
        .map_err(|e| GpuError::Cuda(format!("nvrtcGetCUBIN: {e:?}")))?;
    Ok(buf)
}
