//! The CUDA backend (cargo feature `cuda`): the same ops as the CPU backend —
//! linear layers, RMSNorm, the residual add, SwiGLU, RoPE and paged attention
//! over the engine's page tables — on one NVIDIA GPU, through `cudarc` with
//! the CUDA libraries loaded at run time (nothing CUDA is needed to build, and
//! a machine without a driver gets a clean refusal, exit 2).
//!
//! - `Gpu` (this file) opens a device, compiles the kernels with NVRTC to the
//!   GPU's own machine code (`compile.rs`, `source.rs`: one source string, the
//!   one CI compiles), and runs the ops on one stream.
//! - `memory.rs`: what lives on the device — weight matrices (uploaded once at
//!   load), the paged KV store (the host `KvCache` keeps the block tables and
//!   the allocator; the pages' bytes live here, in its layout and formats) and
//!   the per-call workspace.
//! - `plan.rs`: the host-side decisions (GEMM row tiles, workspace sizes,
//!   launch geometry, kernel choice, page-table upload), unit-tested anywhere.
//!
//! Weights: every linear layer is uploaded as f16 (`GpuWeights::F16`, the
//! default: block-quantized Q4_0/Q4_1/Q8_0/... and f32 weights are
//! dequantized to f32 on the host at load, exactly as the CPU's exact path
//! reads them, then rounded to f16 — a rounding the CPU path does not make)
//! or as those f32 values (`GpuWeights::F32`, `--cuda-weights f32`: the CPU's
//! exact weights, for parity checks). GEMMs run on cuBLAS (`cublasGemmEx`,
//! f32 accumulation; f16 inputs with f32 output, or f32 throughout without
//! TF32), in calls of a fixed number of rows (`plan::ROW_TILE`) so that a
//! row's result never depends on the batch. Sampling stays on the host: the
//! logits rows that were asked for are copied back.
//!
//! Must not: be reached from outside `kernels` but through what `kernels`
//! re-exports; hold global state (a `Gpu` is a value, cloned cheaply).

pub mod compile;
pub mod memory;
pub mod plan;
pub mod source;

pub use super::device::GpuWeights;
use cudarc::cublas::CudaBlas;
use cudarc::cublas::sys as blas_sys;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, DevicePtr, LaunchConfig, PushKernelArg};
use memory::DeviceMatrix;
use plan::Geometry;
use std::collections::HashMap;
use std::sync::Arc;

/// Why the CUDA backend could not start or run. [`GpuError::is_input`] tells
/// the machine's or the user's problems (exit 2) from the engine's (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error(
        "--device cuda:{0}: no CUDA driver: libcuda.so could not be loaded (no NVIDIA driver on this machine, or \
         its folder is not on the loader's path)"
    )]
    NoDriver(usize),
    #[error("--device cuda:{0}: the CUDA driver could not start: {1}")]
    DriverInit(usize, String),
    #[error("--device cuda:{0}: the CUDA driver sees no GPU on this machine")]
    NoDevice(usize),
    #[error("--device cuda:{ordinal}: no such GPU: this machine has {count} (cuda:0 to cuda:{last})", last = count - 1)]
    OrdinalOutOfRange { ordinal: usize, count: usize },
    #[error(
        "--device cuda: NVRTC (libnvrtc.so) could not be loaded: put the folder that holds it on LD_LIBRARY_PATH \
         (the CUDA toolkit's lib64, or the nvidia-cuda-nvrtc-cu12 wheel's nvidia/cuda_nvrtc/lib)"
    )]
    NoNvrtc,
    #[error(
        "--device cuda: cuBLAS (libcublas.so) could not be loaded: put the folder that holds it on LD_LIBRARY_PATH \
         (the CUDA toolkit's lib64, or the nvidia-cublas wheel's lib)"
    )]
    NoCublas,
    #[error("out of GPU memory for {what}: it needs {needed} bytes, the GPU has {free} bytes free of {total}")]
    OutOfMemory { what: String, needed: usize, free: usize, total: usize },
    #[error("NVRTC failed to compile the CUDA kernels for {target} (options: {options}); its log:\n{log}")]
    Compile { target: String, options: String, log: String },
    #[error("the CUDA backend does not serve this model: {0}")]
    Unsupported(String),
    #[error("CUDA: {0}")]
    Cuda(String),
}

impl GpuError {
    /// Bad input or a machine that cannot run it (exit 2), as opposed to a
    /// failure of the engine itself (a kernel that does not compile, a CUDA
    /// call that fails: exit 1).
    pub fn is_input(&self) -> bool {
        !matches!(self, GpuError::Compile { .. } | GpuError::Cuda(_))
    }
}

impl From<GpuError> for crate::error::EngineError {
    fn from(e: GpuError) -> Self {
        if e.is_input() {
            crate::error::EngineError::Device(e.to_string())
        } else {
            crate::error::EngineError::DeviceFailure(e.to_string())
        }
    }
}

pub(crate) fn cuda_err(what: impl std::fmt::Display) -> impl FnOnce(cudarc::driver::DriverError) -> GpuError {
    move |e| GpuError::Cuda(format!("{what}: {e}"))
}

/// What the startup line says about the device.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuInfo {
    /// `cuda:N`.
    pub device: String,
    /// The GPU's name as the driver reports it (`NVIDIA H100 80GB HBM3`).
    pub gpu: String,
    /// `major.minor`.
    pub compute_capability: String,
    /// The kernel driver's version (`/proc/driver/nvidia/version`), when readable.
    pub driver: Option<String>,
    /// The CUDA version the driver supports (`cuDriverGetVersion`).
    pub cuda: String,
    /// NVRTC's version (the compiler of the kernels).
    pub nvrtc: String,
    /// The architecture the kernels were compiled for (`sm_90`).
    pub kernels_target: String,
    pub memory_total_bytes: usize,
    pub weights: GpuWeights,
}

/// One open GPU: its context, stream, cuBLAS handle and compiled kernels.
/// Cloning shares them.
#[derive(Clone)]
pub struct Gpu {
    inner: Arc<Inner>,
}

struct Inner {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    _module: Arc<CudaModule>,
    funcs: HashMap<&'static str, CudaFunction>,
    info: GpuInfo,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("info", &self.inner.info).finish()
    }
}

impl PartialEq for Gpu {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// The kernel driver's version from `/proc/driver/nvidia/version` (Linux).
fn kernel_driver_version() -> Option<String> {
    let text = std::fs::read_to_string("/proc/driver/nvidia/version").ok()?;
    let line = text.lines().next()?;
    line.split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .map(str::to_string)
}

/// A kernel argument.
pub enum Arg {
    Ptr(u64),
    I32(i32),
    I64(i64),
    F32(f32),
}

impl Gpu {
    /// Opens GPU `ordinal`: checks the driver, the device count and the index
    /// (each refusal names which), compiles the kernels for the GPU's
    /// architecture and loads them.
    pub fn open(ordinal: usize, weights: GpuWeights) -> Result<Gpu, GpuError> {
        use cudarc::driver::sys as drv;
        // SAFETY: only tries to open the library.
        if !unsafe { drv::is_culib_present() } {
            return Err(GpuError::NoDriver(ordinal));
        }
        match cudarc::driver::result::init() {
            Ok(()) => {}
            Err(e) if e.0 == drv::CUresult::CUDA_ERROR_NO_DEVICE => return Err(GpuError::NoDevice(ordinal)),
            Err(e) => return Err(GpuError::DriverInit(ordinal, e.to_string())),
        }
        let count = CudaContext::device_count().map_err(|e| GpuError::DriverInit(ordinal, e.to_string()))? as usize;
        if count == 0 {
            return Err(GpuError::NoDevice(ordinal));
        }
        if ordinal >= count {
            return Err(GpuError::OrdinalOutOfRange { ordinal, count });
        }
        if !compile::nvrtc_present() {
            return Err(GpuError::NoNvrtc);
        }
        // SAFETY: only tries to open the library.
        if !unsafe { blas_sys::is_culib_present() } {
            return Err(GpuError::NoCublas);
        }
        let ctx = CudaContext::new(ordinal).map_err(cuda_err(format!("opening cuda:{ordinal}")))?;
        // One stream, used in order: no cross-stream events are needed.
        // SAFETY: no CudaSlice of this context exists yet.
        unsafe { ctx.disable_event_tracking() };
        let (major, minor) = ctx.compute_capability().map_err(cuda_err("compute capability"))?;
        let target = format!("sm_{major}{minor}");
        let image = match compile::compile(source::SOURCE, &target)? {
            compile::Image::Cubin(bytes) => cudarc::nvrtc::Ptx::from_binary(bytes),
            compile::Image::Ptx(text) => cudarc::nvrtc::Ptx::from_src(text),
        };
        let module = ctx.load_module(image).map_err(cuda_err(format!("loading the kernels ({target})")))?;
        let mut funcs = HashMap::new();
        for name in source::KERNELS {
            funcs.insert(name, module.load_function(name).map_err(cuda_err(format!("kernel {name}")))?);
        }
        let stream = ctx.default_stream();
        let blas = CudaBlas::new(stream.clone()).map_err(|e| GpuError::Cuda(format!("cuBLAS: {e:?}")))?;
        let mut driver_api = 0i32;
        // SAFETY: an out-parameter.
        unsafe { drv::cuDriverGetVersion(&mut driver_api) }
            .result()
            .map_err(|e| GpuError::DriverInit(ordinal, e.to_string()))?;
        let (nv_major, nv_minor) = compile::nvrtc_version()?;
        let info = GpuInfo {
            device: format!("cuda:{ordinal}"),
            gpu: ctx.name().map_err(cuda_err("device name"))?,
            compute_capability: format!("{major}.{minor}"),
            driver: kernel_driver_version(),
            cuda: format!("{}.{}", driver_api / 1000, (driver_api % 1000) / 10),
            nvrtc: format!("{nv_major}.{nv_minor}"),
            kernels_target: target,
            memory_total_bytes: ctx.total_mem().map_err(cuda_err("total memory"))?,
            weights,
        };
        Ok(Gpu { inner: Arc::new(Inner { ctx, stream, blas, _module: module, funcs, info }) })
    }

    pub fn info(&self) -> &GpuInfo {
        &self.inner.info
    }

    pub fn weights(&self) -> GpuWeights {
        self.inner.info.weights
    }

    pub(crate) fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    /// Makes the context current on this thread (the engine loop runs on
    /// another thread than the one that opened the GPU).
    pub fn bind(&self) -> Result<(), GpuError> {
        self.inner.ctx.bind_to_thread().map_err(cuda_err("binding the context"))
    }

    /// `(free, total)` device bytes.
    pub fn memory(&self) -> Result<(usize, usize), GpuError> {
        self.inner.ctx.mem_get_info().map_err(cuda_err("memory info"))
    }

    /// Fails with [`GpuError::OutOfMemory`] unless `needed` bytes are free.
    pub fn check_free(&self, what: &str, needed: usize) -> Result<(), GpuError> {
        let (free, total) = self.memory()?;
        if needed > free {
            return Err(GpuError::OutOfMemory { what: what.to_string(), needed, free, total });
        }
        Ok(())
    }

    /// Waits for every launched kernel and copy.
    pub fn synchronize(&self) -> Result<(), GpuError> {
        self.inner.stream.synchronize().map_err(cuda_err("synchronize"))
    }

    pub(crate) fn ptr<T>(&self, s: &cudarc::driver::CudaSlice<T>) -> u64 {
        let (p, _sync) = s.device_ptr(&self.inner.stream);
        p
    }

    /// Launches kernel `name` (one of `source::KERNELS`).
    pub fn launch(&self, name: &str, g: Geometry, args: &[Arg]) -> Result<(), GpuError> {
        let f = self.inner.funcs.get(name).ok_or_else(|| GpuError::Cuda(format!("no kernel {name}")))?;
        let mut b = self.inner.stream.launch_builder(f);
        for a in args {
            match a {
                Arg::Ptr(p) => b.arg(p),
                Arg::I32(v) => b.arg(v),
                Arg::I64(v) => b.arg(v),
                Arg::F32(v) => b.arg(v),
            };
        }
        let cfg = LaunchConfig { grid_dim: g.grid, block_dim: g.block, shared_mem_bytes: 0 };
        // SAFETY: every kernel's arguments are built by the typed wrappers below
        // from live device buffers of the sizes the kernels index.
        unsafe { b.launch(cfg) }.map_err(cuda_err(format!("launching {name}")))?;
        Ok(())
    }

    /// `y[rows, w.rows] = x[rows, w.cols] · wᵀ` (row-major, f32 in and out), in
    /// GEMM calls of `plan::ROW_TILE` rows each; `x` and `y` must hold
    /// `plan::padded_rows(rows)` rows. `half_x`: room for the f16 copy of `x`
    /// (f16 weights only).
    pub fn linear(&self, x: u64, w: &DeviceMatrix, y: u64, rows: usize, half_x: u64) -> Result<(), GpuError> {
        let (n, k) = (w.rows, w.cols);
        let padded = plan::padded_rows(rows);
        let (a_type, b_ptr, b_type, elem, compute) = match w.weights() {
            GpuWeights::F16 => {
                let count = (padded * k) as i64;
                self.launch(
                    "cast_f16",
                    plan::elementwise(padded * k),
                    &[Arg::Ptr(x), Arg::Ptr(half_x), Arg::I64(count)],
                )?;
                (
                    blas_sys::cudaDataType_t::CUDA_R_16F,
                    half_x,
                    blas_sys::cudaDataType_t::CUDA_R_16F,
                    2u64,
                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                )
            }
            GpuWeights::F32 => (
                blas_sys::cudaDataType_t::CUDA_R_32F,
                x,
                blas_sys::cudaDataType_t::CUDA_R_32F,
                4u64,
                blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_PEDANTIC,
            ),
        };
        let w_ptr = w.ptr(self);
        let (alpha, beta) = (1.0f32, 0.0f32);
        for first in plan::gemm_tiles(rows) {
            // Column-major view: Yᵀ[n, tile] = W[k, n]ᵀ · Xᵀ[k, tile].
            // SAFETY: w holds n * k elements; x (or its f16 copy) and y hold
            // `padded` rows of k and n elements.
            unsafe {
                cudarc::cublas::result::gemm_ex(
                    *self.inner.blas.handle(),
                    blas_sys::cublasOperation_t::CUBLAS_OP_T,
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    n as i32,
                    plan::ROW_TILE as i32,
                    k as i32,
                    (&alpha) as *const f32 as *const _,
                    w_ptr as *const _,
                    a_type,
                    k as i32,
                    (b_ptr + (first * k) as u64 * elem) as *const _,
                    b_type,
                    k as i32,
                    (&beta) as *const f32 as *const _,
                    (y + (first * n) as u64 * 4) as *mut _,
                    blas_sys::cudaDataType_t::CUDA_R_32F,
                    n as i32,
                    compute,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(|e| GpuError::Cuda(format!("cublasGemmEx ({n} x {k}): {e:?}")))?;
        }
        Ok(())
    }

    /// RMSNorm of `rows` rows of `dim` (in place when `x == y`).
    pub fn rms_norm(&self, x: u64, w: u64, y: u64, rows: usize, dim: usize, eps: f32) -> Result<(), GpuError> {
        let args = [Arg::Ptr(x), Arg::Ptr(w), Arg::Ptr(y), Arg::I32(dim as i32), Arg::F32(eps)];
        self.launch("rms_norm", plan::rms_norm(rows, dim), &args)
    }

    /// RoPE over `rows` rows of `heads * 2 * half`, row r at position `pos[r]`.
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &self,
        x: u64,
        cos: u64,
        sin: u64,
        pos: u64,
        rows: usize,
        heads: usize,
        half: usize,
    ) -> Result<(), GpuError> {
        let args =
            [Arg::Ptr(x), Arg::Ptr(cos), Arg::Ptr(sin), Arg::Ptr(pos), Arg::I32(heads as i32), Arg::I32(half as i32)];
        self.launch("rope", plan::per_row(rows, heads * half), &args)
    }

    pub fn silu_mul(&self, g: u64, u: u64, n: usize) -> Result<(), GpuError> {
        self.launch("silu_mul", plan::elementwise(n), &[Arg::Ptr(g), Arg::Ptr(u), Arg::I64(n as i64)])
    }

    pub fn residual_add(&self, acc: u64, d: u64, n: usize) -> Result<(), GpuError> {
        self.launch("add_in_place", plan::elementwise(n), &[Arg::Ptr(acc), Arg::Ptr(d), Arg::I64(n as i64)])
    }

    pub fn fill_zero(&self, x: u64, n: usize) -> Result<(), GpuError> {
        self.launch("fill_zero", plan::elementwise(n), &[Arg::Ptr(x), Arg::I64(n as i64)])
    }

    pub fn embed_rows(&self, table: u64, ids: u64, out: u64, rows: usize, width: usize) -> Result<(), GpuError> {
        let args = [Arg::Ptr(table), Arg::Ptr(ids), Arg::Ptr(out), Arg::I32(width as i32)];
        self.launch("embed_rows", plan::per_row(rows, width), &args)
    }

    pub fn gather_rows(&self, x: u64, rows_idx: u64, out: u64, rows: usize, width: usize) -> Result<(), GpuError> {
        let args = [Arg::Ptr(x), Arg::Ptr(rows_idx), Arg::Ptr(out), Arg::I32(width as i32)];
        self.launch("gather_rows", plan::per_row(rows, width), &args)
    }

    pub(crate) fn upload<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        what: &str,
        host: &[T],
    ) -> Result<cudarc::driver::CudaSlice<T>, GpuError> {
        if host.is_empty() {
            return self.alloc_zeros(what, 1);
        }
        let mut s = self.alloc_uninit::<T>(what, host.len())?;
        self.inner.stream.memcpy_htod(host, &mut s).map_err(cuda_err(format!("uploading {what}")))?;
        Ok(s)
    }

    fn alloc_uninit<T: cudarc::driver::DeviceRepr>(
        &self,
        what: &str,
        n: usize,
    ) -> Result<cudarc::driver::CudaSlice<T>, GpuError> {
        // SAFETY: every caller writes the whole buffer before any kernel reads it.
        unsafe { self.inner.stream.alloc::<T>(n.max(1)) }.map_err(|e| self.alloc_error(what, n * size_of::<T>(), e))
    }

    pub(crate) fn alloc_zeros<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
        &self,
        what: &str,
        n: usize,
    ) -> Result<cudarc::driver::CudaSlice<T>, GpuError> {
        self.inner.stream.alloc_zeros::<T>(n.max(1)).map_err(|e| self.alloc_error(what, n * size_of::<T>(), e))
    }

    fn alloc_error(&self, what: &str, needed: usize, e: cudarc::driver::DriverError) -> GpuError {
        if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
            let (free, total) = self.memory().unwrap_or((0, 0));
            GpuError::OutOfMemory { what: what.to_string(), needed, free, total }
        } else {
            GpuError::Cuda(format!("allocating {needed} bytes for {what}: {e}"))
        }
    }

    pub(crate) fn download(&self, s: &cudarc::driver::CudaSlice<f32>, n: usize) -> Result<Vec<f32>, GpuError> {
        let mut out = vec![0.0f32; n];
        if n > 0 {
            self.inner.stream.memcpy_dtoh(&s.slice(0..n), &mut out).map_err(cuda_err("copying back"))?;
            // The copy into pageable memory is queued on the stream: wait for it
            // (and for every kernel before it) before the host reads `out`.
            self.synchronize()?;
        }
        Ok(out)
    }
}
