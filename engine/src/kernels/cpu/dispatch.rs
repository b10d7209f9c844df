//! Which CPU code path the kernels take: the CPU's features, detected once per
//! process (an immutable `OnceLock`, never a mutable flag), and the paths they
//! allow. A path is a plain value (`CpuPath`) that the caller passes to every
//! kernel; forcing a lower one (`ENGINE_CPU_PATH=scalar`, `--cpu-path scalar`)
//! lets tests exercise every path the machine supports.
//!
//! Paths: `scalar` (portable Rust, any CPU), `avx2` (AVX2, FMA, F16C),
//! `avx512` (those plus AVX-512 F/BW/VL and VNNI: the activation-quantized
//! matmul over a 16-row interleaved weight layout with `vpdpbusd`; every other
//! kernel takes its AVX2 form there) and `amx` (those plus AMX-TILE and
//! AMX-INT8, with the kernel's permission to use tile data: the
//! activation-quantized matmul of 16 rows and more runs on AMX tiles, fewer
//! rows on the `avx512` kernels). All paths give the same bits. AVX-512 BF16
//! and AMX-BF16 are detected and reported but have no kernels (they would
//! round activations to bf16: another numerics, not a faster exact kernel).
//! Tests loop over `CpuPath::supported()` and print the paths they ran.
//!
//! AMX tile data is an XSAVE feature that Linux enables per process on request
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); detection makes
//! that request once, as part of finding out whether AMX can be used, and the
//! `amx` path exists only where it was granted.
//!
//! Must not: pick a path on its own in the middle of a computation, or read the
//! environment anywhere but `CpuPath::from_env`.

#[cfg(target_arch = "x86_64")]
use super::amx;
use std::fmt;
use std::sync::OnceLock;

/// The environment variable that forces a CPU path (`scalar`, `avx2`, `avx512`, `amx`, `auto`).
pub const CPU_PATH_ENV: &str = "ENGINE_CPU_PATH";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KernelError {
    #[error("unknown CPU path {0:?}; expected scalar, avx2, avx512, amx or auto")]
    UnknownPath(String),
    #[error("CPU path {path} needs {needs}, which this CPU lacks (it supports: {supported})")]
    Unsupported { path: CpuPath, needs: &'static str, supported: String },
    #[error("unknown quantized matmul mode {0:?}; expected q8 or exact")]
    UnknownQuantMode(String),
    #[error("{var}: {source}")]
    Env { var: &'static str, source: Box<KernelError> },
    #[error("cannot start {threads} kernel threads: {reason}")]
    Threads { threads: usize, reason: String },
}

/// The x86 features the kernels care about (all false elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vl: bool,
    pub avx512vnni: bool,
    pub avx512bf16: bool,
    pub avxvnni: bool,
    /// AMX-TILE and AMX-INT8 in the CPU, tile state enabled by the OS (XCR0)
    /// and tile data permitted for this process (`arch_prctl`).
    pub amx_int8: bool,
    /// AMX-BF16 (reported; no kernel uses it).
    pub amx_bf16: bool,
}

impl CpuFeatures {
    /// This CPU's features, detected on first use and fixed for the process.
    pub fn get() -> &'static CpuFeatures {
        static DETECTED: OnceLock<CpuFeatures> = OnceLock::new();
        DETECTED.get_or_init(CpuFeatures::detect)
    }

    fn detect() -> CpuFeatures {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            CpuFeatures {
                avx2: has!("avx2"),
                fma: has!("fma"),
                f16c: has!("f16c"),
                avx512f: has!("avx512f"),
                avx512bw: has!("avx512bw"),
                avx512vl: has!("avx512vl"),
                avx512vnni: has!("avx512vnni"),
                avx512bf16: has!("avx512bf16"),
                avxvnni: has!("avxvnni"),
                amx_int8: amx::int8_usable(),
                amx_bf16: amx::bf16_in_cpu(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        CpuFeatures::default()
    }
}

/// A kernel code path. Ordered from lowest to highest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CpuPath {
    /// Portable Rust; the reference every other path is tested against.
    Scalar,
    /// AVX2 + FMA intrinsics (F16C for block scales).
    Avx2,
    /// AVX-512 F/BW/VL + VNNI for the activation-quantized matmul (AVX2 for
    /// the rest).
    Avx512,
    /// `Avx512` plus AMX-INT8 tiles for activation-quantized matmuls of 16
    /// rows and more (prefill).
    Amx,
}

impl CpuPath {
    pub const ALL: [CpuPath; 4] = [CpuPath::Scalar, CpuPath::Avx2, CpuPath::Avx512, CpuPath::Amx];

    pub fn name(self) -> &'static str {
        match self {
            CpuPath::Scalar => "scalar",
            CpuPath::Avx2 => "avx2",
            CpuPath::Avx512 => "avx512",
            CpuPath::Amx => "amx",
        }
    }

    /// The features a path needs, in words (for errors).
    fn needs(self) -> &'static str {
        match self {
            CpuPath::Scalar => "nothing",
            CpuPath::Avx2 => "AVX2, FMA and F16C",
            CpuPath::Avx512 => "AVX2, FMA, F16C, AVX-512 F/BW/VL and AVX-512 VNNI",
            CpuPath::Amx => {
                "AVX2, FMA, F16C, AVX-512 F/BW/VL, AVX-512 VNNI, AMX-TILE and AMX-INT8 (with the OS's permission to use tile data)"
            }
        }
    }

    /// Whether `features` allow this path.
    pub fn supported_by(self, f: &CpuFeatures) -> bool {
        match self {
            CpuPath::Scalar => true,
            CpuPath::Avx2 => f.avx2 && f.fma && f.f16c,
            CpuPath::Avx512 => CpuPath::Avx2.supported_by(f) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni,
            CpuPath::Amx => CpuPath::Avx512.supported_by(f) && f.amx_int8,
        }
    }

    /// Every path this CPU can run, lowest first.
    pub fn supported() -> Vec<CpuPath> {
        CpuPath::ALL.into_iter().filter(|p| p.supported_by(CpuFeatures::get())).collect()
    }

    /// The highest path this CPU can run.
    pub fn best() -> CpuPath {
        CpuPath::supported().into_iter().max().unwrap_or(CpuPath::Scalar)
    }

    /// `self` if this CPU can run it, else an error naming what is missing.
    pub fn checked(self) -> Result<CpuPath, KernelError> {
        if self.supported_by(CpuFeatures::get()) {
            Ok(self)
        } else {
            let supported = CpuPath::supported().iter().map(|p| p.name()).collect::<Vec<_>>().join(", ");
            Err(KernelError::Unsupported { path: self, needs: self.needs(), supported })
        }
    }

    /// Whether this path may run the AVX2 kernels (every path above scalar:
    /// kernels without an AVX-512 form take their AVX2 one there).
    pub fn has_avx2(self) -> bool {
        self >= CpuPath::Avx2
    }

    /// Whether this path runs the AVX-512 VNNI q8 kernels (over the 16-row
    /// interleaved weight layout): `avx512`, and `amx` below 16 rows.
    pub fn has_avx512(self) -> bool {
        self >= CpuPath::Avx512
    }

    /// Parses `scalar`, `avx2`, `avx512`, `amx` or `auto` (the best this CPU supports), and
    /// checks that this CPU can run it.
    pub fn parse_supported(s: &str) -> Result<CpuPath, KernelError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "best" => Ok(CpuPath::best()),
            other => other.parse::<CpuPath>()?.checked(),
        }
    }

    /// The path forced by `ENGINE_CPU_PATH`, if set (an unknown or unsupported
    /// value is an error, never silently ignored).
    pub fn from_env() -> Result<Option<CpuPath>, KernelError> {
        match std::env::var(CPU_PATH_ENV) {
            Ok(v) if !v.trim().is_empty() => CpuPath::parse_supported(&v)
                .map(Some)
                .map_err(|e| KernelError::Env { var: CPU_PATH_ENV, source: Box::new(e) }),
            _ => Ok(None),
        }
    }
}

impl std::str::FromStr for CpuPath {
    type Err = KernelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" => Ok(CpuPath::Scalar),
            "avx2" => Ok(CpuPath::Avx2),
            "avx512" => Ok(CpuPath::Avx512),
            "amx" => Ok(CpuPath::Amx),
            other => Err(KernelError::UnknownPath(other.to_string())),
        }
    }
}

impl fmt::Display for CpuPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_is_always_supported_and_best_is_supported() {
        let supported = CpuPath::supported();
        assert_eq!(supported.first(), Some(&CpuPath::Scalar));
        assert!(supported.contains(&CpuPath::best()));
        assert_eq!(CpuPath::Scalar.checked(), Ok(CpuPath::Scalar));
    }

    #[test]
    fn avx2_path_follows_the_detected_features() {
        let f = CpuFeatures::get();
        assert_eq!(CpuPath::Avx2.checked().is_ok(), f.avx2 && f.fma && f.f16c);
        let none = CpuFeatures::default();
        assert!(!CpuPath::Avx2.supported_by(&none));
        assert!(CpuPath::Scalar.supported_by(&none));
    }

    #[test]
    fn avx512_path_needs_vnni_and_avx2_as_well() {
        let f = CpuFeatures::get();
        let want = f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
        assert_eq!(CpuPath::Avx512.checked().is_ok(), want);
        let all = CpuFeatures {
            avx2: true,
            fma: true,
            f16c: true,
            avx512f: true,
            avx512bw: true,
            avx512vl: true,
            avx512vnni: true,
            avx512bf16: false,
            avxvnni: false,
            amx_int8: true,
            amx_bf16: false,
        };
        assert!(CpuPath::Avx512.supported_by(&all));
        assert!(CpuPath::Amx.supported_by(&all));
        assert!(!CpuPath::Amx.supported_by(&CpuFeatures { amx_int8: false, ..all }));
        assert!(!CpuPath::Amx.supported_by(&CpuFeatures { avx512vnni: false, ..all }));
        assert!(CpuPath::Avx512.supported_by(&CpuFeatures { amx_int8: false, ..all }));
        assert!(!CpuPath::Avx512.supported_by(&CpuFeatures { avx512vnni: false, ..all }));
        assert!(!CpuPath::Avx512.supported_by(&CpuFeatures { avx2: false, ..all }));
        if !want {
            let e = CpuPath::Avx512.checked().unwrap_err().to_string();
            assert!(e.contains("VNNI"), "{e}");
        }
        eprintln!("CPU paths supported here: {:?}", CpuPath::supported());
    }

    #[test]
    fn parsing_names_and_errors() {
        assert_eq!(" Scalar ".parse::<CpuPath>(), Ok(CpuPath::Scalar));
        assert_eq!("avx2".parse::<CpuPath>(), Ok(CpuPath::Avx2));
        assert_eq!(CpuPath::parse_supported("auto"), Ok(CpuPath::best()));
        assert_eq!("AVX512".parse::<CpuPath>(), Ok(CpuPath::Avx512));
        assert_eq!("amx".parse::<CpuPath>(), Ok(CpuPath::Amx));
        let e = "avx1024".parse::<CpuPath>().unwrap_err();
        assert!(e.to_string().contains("avx1024") && e.to_string().contains("scalar, avx2, avx512, amx"), "{e}");
    }
}
