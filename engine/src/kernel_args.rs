//! The kernel flags that `serve`, `generate`, `score` and `bench`
//! share (`KernelArgs`: `--cpu-path`, `--exact-quant-matmul`, `--device`,
//! `--cuda-weights`), and how they turn into the `Kernels` an entry point
//! passes down and the `Device` the model runs on.

use clap::Args;
use engine::error::EngineError;
use engine::kernels::{CpuPath, Device, DeviceSpec, GpuWeights, Kernels, QuantMatmul};

/// Kernel choices of `engine serve` and the in-process commands (over
/// ENGINE_CPU_PATH and ENGINE_QUANT_MATMUL).
#[derive(Args, Clone, Debug)]
pub struct KernelArgs {
    /// CPU code path: scalar, avx2, avx512, amx or auto (default: $ENGINE_CPU_PATH, else
    /// the best this CPU supports).
    #[arg(long)]
    pub cpu_path: Option<String>,
    /// Multiply quantized (Q4_0/Q4_1/Q8_0) weights exactly: f32 activations times
    /// exactly dequantized weights, bit-identical to the f32 model (for parity
    /// studies), instead of the default 8-bit activations (llama.cpp's numerics).
    #[arg(long)]
    pub exact_quant_matmul: bool,
    /// Where the forward pass runs: cpu, cuda (GPU 0) or cuda:N. A build
    /// without the CUDA backend (cargo feature `cuda`), or a machine without a
    /// driver, a GPU, or GPU N, refuses cuda with exit 2 before loading
    /// anything, so that a GPU plan never times the CPU path by mistake.
    #[arg(long, default_value = "cpu", value_parser = clap::value_parser!(DeviceSpec))]
    pub device: DeviceSpec,
    /// With --device cuda: linear-layer weights on the GPU as f16 (default;
    /// f16 GEMM inputs, f32 accumulation) or f32 (the CPU's exact weights,
    /// for parity checks).
    #[arg(long, default_value = "f16", value_parser = clap::value_parser!(GpuWeights))]
    pub cuda_weights: GpuWeights,
}

impl KernelArgs {
    /// `current` with these flags applied.
    pub fn kernels(&self, current: Kernels) -> Result<Kernels, EngineError> {
        let config = |e: engine::kernels::KernelError| EngineError::Config(e.to_string());
        let path = match &self.cpu_path {
            Some(s) => CpuPath::parse_supported(s).map_err(config)?,
            None => current.path(),
        };
        let quant = if self.exact_quant_matmul { QuantMatmul::Exact } else { current.quant_matmul() };
        Kernels::new(path, quant).map_err(config)
    }

    /// Opens `--device` (bad input, exit 2, when it cannot be used here).
    pub fn device(&self) -> Result<Device, EngineError> {
        let device = Device::open(self.device, self.cuda_weights)?;
        if let Some(line) = device_line(&device) {
            tracing::info!("{line}");
        }
        Ok(device)
    }
}

/// The log line that names the GPU, its driver and CUDA version (none on the CPU).
fn device_line(device: &Device) -> Option<String> {
    match device {
        Device::Cpu => None,
        #[cfg(feature = "cuda")]
        Device::Cuda(g) => {
            let i = g.info();
            Some(format!(
                "device {}: {} (compute capability {}), driver {}, CUDA {}, NVRTC {}, kernels built for {}, {} weights",
                i.device,
                i.gpu,
                i.compute_capability,
                i.driver.as_deref().unwrap_or("unknown"),
                i.cuda,
                i.nvrtc,
                i.kernels_target,
                i.weights
            ))
        }
    }
}
