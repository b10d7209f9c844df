//! The kernel flags that `serve`, `generate`, `score` and `bench`
//! share (`KernelArgs`: `--cpu-path`, `--exact-quant-matmul`, `--device`), and
//! how they turn into the `Kernels` an entry point passes down.

use clap::Args;
use engine::error::EngineError;
use engine::kernels::{CpuPath, Kernels, QuantMatmul};
use engine::model::Model;

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
    /// Where the kernels run: `cpu`. `cuda` is refused (exit 2) until the CUDA
    /// backend exists, so that a GPU plan never times the CPU path by mistake.
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "cuda"])]
    pub device: String,
}

impl KernelArgs {
    /// `current` with these flags applied.
    pub fn kernels(&self, current: Kernels) -> Result<Kernels, EngineError> {
        if self.device != "cpu" {
            return Err(EngineError::Config(format!(
                "--device {}: this build has no CUDA backend yet (every kernel sits behind one seam whose only \
                 implementation is the CPU's); use --device cpu",
                self.device
            )));
        }
        let config = |e: engine::kernels::KernelError| EngineError::Config(e.to_string());
        let path = match &self.cpu_path {
            Some(s) => CpuPath::parse_supported(s).map_err(config)?,
            None => current.path(),
        };
        let quant = if self.exact_quant_matmul { QuantMatmul::Exact } else { current.quant_matmul() };
        Kernels::new(path, quant).map_err(config)
    }

    pub fn apply(&self, model: &mut Model) -> Result<(), EngineError> {
        let k = self.kernels(model.kernels())?;
        model.set_kernels(k);
        Ok(())
    }
}
