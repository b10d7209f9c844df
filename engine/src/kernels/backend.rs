//! The one interface the model calls for its arithmetic: `Kernels`, a small
//! copyable value naming the CPU path (`scalar`, `avx2`, `avx512`, `amx`) and how
//! layers over block-quantized weights are computed (`QuantMatmul`). Every op of a
//! forward pass goes through it: the linear layers, RMSNorm, the residual add,
//! SwiGLU, rotary embeddings and paged attention. The model holds one and passes
//! it down; nothing here is global or mutable. The CUDA backend
//! (`kernels::cuda`, cargo feature `cuda`) implements the same ops over device
//! buffers, and the model's GPU forward pass (`model/gpu.rs`) calls those.
//!
//! Defaults: the best path this CPU supports, and `q8` (activation-quantized,
//! llama.cpp's numerics) for GGUF Q4_0/Q4_1/Q8_0 weights. `exact` (f32 activations
//! times exactly dequantized weights, bit-identical to the f32 layer) is chosen
//! with `--exact-quant-matmul` or `ENGINE_QUANT_MATMUL=exact`; the path with
//! `--cpu-path` or `ENGINE_CPU_PATH`. F32 weights always take the f32 kernel,
//! and F16/BF16 weights the same kernel widening them exactly as it loads them.

use super::cpu::attention::{AttnSeq, AttnShape, paged_attention};
use super::cpu::dispatch::{CpuPath, KernelError};
use super::cpu::half::{HalfMatrix, matmul_half_on};
use super::cpu::matmul::matmul_on;
use super::cpu::ops::{add_in_place, rms_norm, silu_mul_in_place};
use super::cpu::q8::{
    Q8Rows, matmul_q8_many_on, matmul_q8_on, matmul_q8_rows_on, prefetch_next_region, swiglu_q8_rows_on,
};
use super::cpu::quant::{QuantMatrix, matmul_quant_on};
use super::cpu::rope::RopeTable;
use crate::kv::KvCache;
use std::fmt;

/// The environment variable that picks the quantized matmul (`q8`, `exact`).
pub const QUANT_MATMUL_ENV: &str = "ENGINE_QUANT_MATMUL";

/// How a linear layer over block-quantized weights is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QuantMatmul {
    /// Activations quantized per 32-block to 8 bits, integer dot products
    /// (`kernels::cpu::q8`): llama.cpp's numerics, the default.
    #[default]
    Q8,
    /// f32 activations times exactly dequantized weights (`kernels::cpu::quant`):
    /// bit-identical to the f32 layer built from the dequantized tensor.
    Exact,
}

impl QuantMatmul {
    pub fn name(self) -> &'static str {
        match self {
            QuantMatmul::Q8 => "q8",
            QuantMatmul::Exact => "exact",
        }
    }
}

impl std::str::FromStr for QuantMatmul {
    type Err = KernelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "q8" => Ok(QuantMatmul::Q8),
            "exact" => Ok(QuantMatmul::Exact),
            other => Err(KernelError::UnknownQuantMode(other.to_string())),
        }
    }
}

impl fmt::Display for QuantMatmul {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The kernel backend a model runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Kernels {
    path: CpuPath,
    quant: QuantMatmul,
}

impl Default for Kernels {
    /// The best path this CPU supports, activation-quantized matmuls.
    fn default() -> Self {
        Kernels { path: CpuPath::best(), quant: QuantMatmul::default() }
    }
}

impl Kernels {
    /// `path` must be one this CPU can run.
    pub fn new(path: CpuPath, quant: QuantMatmul) -> Result<Self, KernelError> {
        Ok(Kernels { path: path.checked()?, quant })
    }

    /// The defaults, overridden by `ENGINE_CPU_PATH` and `ENGINE_QUANT_MATMUL`
    /// where set (an unknown or unsupported value is an error).
    pub fn from_env() -> Result<Self, KernelError> {
        let mut k = Kernels::default();
        if let Some(path) = CpuPath::from_env()? {
            k.path = path;
        }
        match std::env::var(QUANT_MATMUL_ENV) {
            Ok(v) if !v.trim().is_empty() => {
                k.quant = v.parse().map_err(|e| KernelError::Env { var: QUANT_MATMUL_ENV, source: Box::new(e) })?;
            }
            _ => {}
        }
        Ok(k)
    }

    pub fn path(&self) -> CpuPath {
        self.path
    }

    pub fn quant_matmul(&self) -> QuantMatmul {
        self.quant
    }

    pub fn with_quant_matmul(self, quant: QuantMatmul) -> Self {
        Kernels { quant, ..self }
    }

    /// Whether quantized layers read the 16-row interleaved weight layout
    /// (the AVX-512 and AMX q8 kernels) rather than rows of GGUF blocks.
    pub fn reads_packed_weights(&self) -> bool {
        self.path.has_avx512() && self.quant == QuantMatmul::Q8
    }

    /// Says that the next linear layers to run are the products of `m` rows
    /// over `ws` (one region), so that idle kernel threads can start reading
    /// their weights while the current region ends (a cache hint: results
    /// never depend on it).
    pub fn prefetch_next(&self, ws: &[&QuantMatrix], m: usize) {
        if self.quant == QuantMatmul::Q8 {
            prefetch_next_region(self.path, ws, m);
        }
    }

    /// `y = x · Wᵀ`, `x` `[m, k]`, dense `w` `[n, k]`.
    pub fn matmul(&self, x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        matmul_on(self.path, x, w, m, k, n)
    }

    /// `y = x · Wᵀ`, `x` `[m, w.cols]`, 16-bit float `w` (exactly the f32
    /// layer over the widened weights).
    pub fn matmul_half(&self, x: &[f32], w: &HalfMatrix, m: usize) -> Vec<f32> {
        matmul_half_on(self.path, x, w, m)
    }

    /// `y = x · Wᵀ`, `x` `[m, w.cols]`, block-quantized `w`.
    pub fn matmul_quant(&self, x: &[f32], w: &QuantMatrix, m: usize) -> Vec<f32> {
        match self.quant {
            QuantMatmul::Q8 => matmul_q8_on(self.path, x, w, m),
            QuantMatmul::Exact => matmul_quant_on(self.path, x, w, m),
        }
    }

    /// `[x · Wᵢᵀ]` for several block-quantized weights over the same `x`, each
    /// exactly [`Kernels::matmul_quant`]'s (the q8 path quantizes `x` once).
    pub fn matmul_quant_many(&self, x: &[f32], ws: &[&QuantMatrix], m: usize) -> Vec<Vec<f32>> {
        match self.quant {
            QuantMatmul::Q8 => matmul_q8_many_on(self.path, x, ws, m),
            QuantMatmul::Exact => ws.iter().map(|w| matmul_quant_on(self.path, x, w, m)).collect(),
        }
    }

    /// The SwiGLU MLP over block-quantized weights: `down(silu(x·gateᵀ) ⊙
    /// x·upᵀ)`, exactly `matmul_quant`, `silu_mul` and `matmul_quant` in turn.
    /// The q8 path runs SwiGLU and quantizes `down`'s input inside the gate/up
    /// region. `then`: the product after `down`, as [`Kernels::prefetch_next`].
    #[allow(clippy::too_many_arguments)]
    pub fn swiglu_mlp_quant(
        &self,
        x: &[f32],
        gate: &QuantMatrix,
        up: &QuantMatrix,
        down: &QuantMatrix,
        m: usize,
        then: &[&QuantMatrix],
    ) -> Vec<f32> {
        self.prefetch_next(&[down], m);
        match self.quant {
            QuantMatmul::Q8 => {
                let h = swiglu_q8_rows_on(self.path, &Q8Rows::quantize_on(self.path, x, m, gate.cols), gate, up);
                self.prefetch_next(then, m);
                matmul_q8_rows_on(self.path, &h, down)
            }
            QuantMatmul::Exact => {
                let (mut g, u) = (matmul_quant_on(self.path, x, gate, m), matmul_quant_on(self.path, x, up, m));
                self.silu_mul(&mut g, &u);
                matmul_quant_on(self.path, &g, down, m)
            }
        }
    }

    /// RMSNorm of each row of `x` (`[rows, weight.len()]`):
    /// `x / sqrt(mean(x²) + eps) * weight`, the sum of squares in f64.
    pub fn rms_norm(&self, x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
        rms_norm(x, weight, eps)
    }

    /// The residual add: `acc += delta`, element-wise.
    pub fn residual_add(&self, acc: &mut [f32], delta: &[f32]) {
        add_in_place(acc, delta)
    }

    /// SwiGLU into `gate`: `silu(gate) * up`, element-wise (the same bits on
    /// every path).
    pub fn silu_mul(&self, gate: &mut [f32], up: &[f32]) {
        silu_mul_in_place(gate, up, self.path)
    }

    /// Rotates every head of each row of `x` (`[positions.len(), heads * head_dim]`)
    /// in place, row `r` at position `positions[r]`.
    pub fn rope(&self, table: &RopeTable, x: &mut [f32], positions: &[usize]) {
        if positions.is_empty() {
            return;
        }
        let width = x.len() / positions.len();
        assert_eq!(width * positions.len(), x.len(), "RoPE: rows of unequal width");
        for (row, &pos) in x.chunks_exact_mut(width).zip(positions) {
            table.apply(row, pos);
        }
    }

    /// Causal paged attention of the query rows `q` (`[rows, heads * head_dim]`)
    /// over `layer`'s cached keys and values, each sequence through its block
    /// table. The current rows' keys and values must already be in the cache.
    pub fn paged_attention(
        &self,
        q: &[f32],
        seqs: &[AttnSeq<'_>],
        cache: &KvCache,
        layer: usize,
        shape: AttnShape,
    ) -> Vec<f32> {
        paged_attention(q, seqs, cache, layer, shape, self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::quant::QuantKind;

    #[test]
    fn rope_rotates_each_row_at_its_own_position() {
        let (table, k) = (RopeTable::new(8, 10000.0, 32), Kernels::default());
        let x: Vec<f32> = (0..3 * 16).map(|i| (i as f32 * 0.37).sin()).collect();
        let positions = [5, 0, 17];
        let mut batched = x.clone();
        k.rope(&table, &mut batched, &positions);
        for (r, &pos) in positions.iter().enumerate() {
            let mut row = x[r * 16..(r + 1) * 16].to_vec();
            table.apply(&mut row, pos);
            assert_eq!(&batched[r * 16..(r + 1) * 16], &row[..], "row {r}");
        }
        assert_eq!(&batched[16..32], &x[16..32], "position 0 is the identity");
        let mut none: Vec<f32> = Vec::new();
        k.rope(&table, &mut none, &[]);
    }

    #[test]
    fn modes_parse_and_dispatch_to_their_kernels() {
        assert_eq!("EXACT".parse::<QuantMatmul>(), Ok(QuantMatmul::Exact));
        assert_eq!("q8".parse::<QuantMatmul>(), Ok(QuantMatmul::Q8));
        assert!("int4".parse::<QuantMatmul>().unwrap_err().to_string().contains("q8 or exact"));
        // Q8_0 weights all 1 with d = 1: the exact path returns Σx, the q8 path
        // Σ round(x / d_a) · d_a, which differs for these x.
        let mut data = Vec::new();
        data.extend(half::f16::from_f32(1.0).to_le_bytes());
        data.extend([1u8; 32]);
        let w = QuantMatrix::new(QuantKind::Q8_0, 1, 32, data).unwrap();
        let x: Vec<f32> = (0..32).map(|i| 0.013 * i as f32).collect();
        for path in CpuPath::supported() {
            let exact = Kernels::new(path, QuantMatmul::Exact).unwrap();
            let q8 = exact.with_quant_matmul(QuantMatmul::Q8);
            let (e, q) = (exact.matmul_quant(&x, &w, 1)[0], q8.matmul_quant(&x, &w, 1)[0]);
            assert_eq!(e, matmul_quant_on(path, &x, &w, 1)[0]);
            assert_eq!(q, matmul_q8_on(path, &x, &w, 1)[0]);
            assert!(e != q && (e - q).abs() < 0.01 * e, "{path}: exact {e}, q8 {q}");
        }
    }
}
