//! Where the kernels run: `--device cpu | cuda | cuda:N`, parsed in every
//! build, and opened (`Device::open`) only in a build with the CUDA backend
//! (cargo feature `cuda`); a build without it refuses `cuda` as bad input,
//! naming the rebuild. No GPU plan can time the CPU path by mistake.

use crate::error::EngineError;

/// A `--device` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    #[default]
    Cpu,
    /// `cuda` (GPU 0) or `cuda:N`.
    Cuda(usize),
}

impl std::str::FromStr for DeviceSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "cpu" => Ok(DeviceSpec::Cpu),
            "cuda" => Ok(DeviceSpec::Cuda(0)),
            other => match other.strip_prefix("cuda:").map(str::parse::<usize>) {
                Some(Ok(n)) => Ok(DeviceSpec::Cuda(n)),
                _ => Err(format!("{other:?} is not a device; expected cpu, cuda or cuda:N (N a GPU index)")),
            },
        }
    }
}

impl std::fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeviceSpec::Cpu => f.write_str("cpu"),
            DeviceSpec::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// How linear-layer weights are held on a GPU (`--cuda-weights`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuWeights {
    /// f16 values (the host's f32 values rounded to nearest even), f16 GEMM
    /// inputs, f32 accumulation and output.
    #[default]
    F16,
    /// The host's f32 values (the CPU's exact weights); f32 GEMMs without TF32.
    F32,
}

impl std::str::FromStr for GpuWeights {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f16" => Ok(GpuWeights::F16),
            "f32" => Ok(GpuWeights::F32),
            o => Err(format!("unknown CUDA weight type {o:?}; expected f16 or f32")),
        }
    }
}

impl std::fmt::Display for GpuWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GpuWeights::F16 => "f16",
            GpuWeights::F32 => "f32",
        })
    }
}

/// An opened device.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Device {
    #[default]
    Cpu,
    #[cfg(feature = "cuda")]
    Cuda(super::cuda::Gpu),
}

impl Device {
    /// Opens `spec`: the CPU always; a GPU only in a build with the CUDA
    /// backend, and only when the driver, the GPU and the kernels' compiler
    /// are there (each refusal names which).
    pub fn open(spec: DeviceSpec, weights: GpuWeights) -> Result<Device, EngineError> {
        match spec {
            DeviceSpec::Cpu => Ok(Device::Cpu),
            #[cfg(feature = "cuda")]
            DeviceSpec::Cuda(n) => Ok(Device::Cuda(super::cuda::Gpu::open(n, weights)?)),
            #[cfg(not(feature = "cuda"))]
            DeviceSpec::Cuda(n) => {
                let _ = weights;
                Err(EngineError::Device(format!(
                    "--device cuda:{n}: this engine was built without the CUDA backend; rebuild it with \
                     `cargo build --release -p engine --features cuda`, or use --device cpu"
                )))
            }
        }
    }

    pub fn is_cpu(&self) -> bool {
        matches!(self, Device::Cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_flags_parse() {
        assert_eq!("cpu".parse::<DeviceSpec>(), Ok(DeviceSpec::Cpu));
        assert_eq!("cuda".parse::<DeviceSpec>(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:3".parse::<DeviceSpec>(), Ok(DeviceSpec::Cuda(3)));
        for bad in ["gpu", "cuda:", "cuda:-1", "cuda:x", "CUDA"] {
            let e = bad.parse::<DeviceSpec>().unwrap_err();
            assert!(e.contains("cpu, cuda or cuda:N"), "{bad}: {e}");
        }
        assert_eq!(DeviceSpec::Cuda(2).to_string(), "cuda:2");
        assert_eq!("f32".parse::<GpuWeights>(), Ok(GpuWeights::F32));
        assert!("bf16".parse::<GpuWeights>().is_err());
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn a_build_without_the_backend_refuses_cuda_naming_the_rebuild() {
        let e = Device::open(DeviceSpec::Cuda(0), GpuWeights::F16).unwrap_err();
        assert!(e.is_input());
        assert!(e.to_string().contains("--features cuda"), "{e}");
        assert!(Device::open(DeviceSpec::Cpu, GpuWeights::F16).unwrap().is_cpu());
    }

    /// On a machine without libcuda (CI, these machines), a build with the
    /// backend refuses with the no-driver message, exit 2.
    #[cfg(feature = "cuda")]
    #[test]
    fn a_machine_without_a_driver_is_refused_as_bad_input() {
        // SAFETY: only tries to open the library.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            eprintln!("libcuda is present here: the no-driver refusal cannot be seen");
            return;
        }
        let e = Device::open(DeviceSpec::Cuda(0), GpuWeights::F16).unwrap_err();
        assert!(e.is_input(), "{e}");
        assert!(e.to_string().contains("no CUDA driver"), "{e}");
    }
}
