//! What lives on the GPU: weight matrices and vectors (uploaded once, at
//! load), the paged KV store, and the workspace a forward call runs in (grown
//! when a call needs more, never shrunk).
//!
//! The KV store mirrors `kv::KvCache`: per layer, keys and values for every
//! page, `[page][slot][kv_head][head_dim]`, keys as f16 or bf16, values as
//! f16, bf16 or E4M3 of `v / s_layer`. The host cache keeps the block
//! allocator and every sequence's block table; a forward call uploads the
//! pages it uses (`plan::PageTables`), and the kernels read and write the
//! device pages through them.

use super::plan::{self, PageTables, WorkspaceSizes};
use super::{Arg, Gpu, GpuError, GpuWeights};
use crate::kv::{KvFormat, PAGE_SIZE};
use cudarc::driver::CudaSlice;

/// Rows converted and uploaded at once when a matrix goes to the device.
const UPLOAD_ROWS: usize = 1024;

/// A `[rows, cols]` row-major weight matrix on the device.
pub struct DeviceMatrix {
    pub rows: usize,
    pub cols: usize,
    data: MatrixData,
}

enum MatrixData {
    F16(CudaSlice<u16>),
    F32(CudaSlice<f32>),
}

impl DeviceMatrix {
    /// Uploads a matrix whose row `r` (as f32) `row(r, out)` writes, in the
    /// GPU's weight type (f16: rounded to nearest even).
    pub fn upload(
        gpu: &Gpu,
        what: &str,
        rows: usize,
        cols: usize,
        mut row: impl FnMut(usize, &mut [f32]),
    ) -> Result<Self, GpuError> {
        let n = rows * cols;
        let mut buf = vec![0.0f32; UPLOAD_ROWS.min(rows.max(1)) * cols];
        let data = match gpu.weights() {
            GpuWeights::F16 => {
                let mut dev = gpu.alloc_zeros::<u16>(what, n)?;
                let mut half = vec![0u16; buf.len()];
                for first in (0..rows).step_by(UPLOAD_ROWS) {
                    let count = UPLOAD_ROWS.min(rows - first);
                    for r in 0..count {
                        row(first + r, &mut buf[r * cols..(r + 1) * cols]);
                    }
                    for (h, &v) in half.iter_mut().zip(&buf[..count * cols]) {
                        *h = half::f16::from_f32(v).to_bits();
                    }
                    let mut dst = dev.slice_mut(first * cols..(first + count) * cols);
                    gpu.stream()
                        .memcpy_htod(&half[..count * cols], &mut dst)
                        .map_err(super::cuda_err(format!("uploading {what}")))?;
                }
                MatrixData::F16(dev)
            }
            GpuWeights::F32 => {
                let mut dev = gpu.alloc_zeros::<f32>(what, n)?;
                for first in (0..rows).step_by(UPLOAD_ROWS) {
                    let count = UPLOAD_ROWS.min(rows - first);
                    for r in 0..count {
                        row(first + r, &mut buf[r * cols..(r + 1) * cols]);
                    }
                    let mut dst = dev.slice_mut(first * cols..(first + count) * cols);
                    gpu.stream()
                        .memcpy_htod(&buf[..count * cols], &mut dst)
                        .map_err(super::cuda_err(format!("uploading {what}")))?;
                }
                MatrixData::F32(dev)
            }
        };
        Ok(DeviceMatrix { rows, cols, data })
    }

    pub fn weights(&self) -> GpuWeights {
        match self.data {
            MatrixData::F16(_) => GpuWeights::F16,
            MatrixData::F32(_) => GpuWeights::F32,
        }
    }

    pub fn ptr(&self, gpu: &Gpu) -> u64 {
        match &self.data {
            MatrixData::F16(s) => gpu.ptr(s),
            MatrixData::F32(s) => gpu.ptr(s),
        }
    }

    /// Device bytes a `[rows, cols]` matrix takes in `weights`.
    pub fn bytes(rows: usize, cols: usize, weights: GpuWeights) -> usize {
        rows * cols * if weights == GpuWeights::F16 { 2 } else { 4 }
    }
}

/// An f32 vector or table on the device (norm weights, RoPE tables, the
/// embedding matrix).
pub struct DeviceVec {
    pub len: usize,
    data: CudaSlice<f32>,
}

impl DeviceVec {
    pub fn upload(gpu: &Gpu, what: &str, host: &[f32]) -> Result<Self, GpuError> {
        Ok(DeviceVec { len: host.len(), data: gpu.upload(what, host)? })
    }

    pub fn ptr(&self, gpu: &Gpu) -> u64 {
        gpu.ptr(&self.data)
    }
}

/// The pages' bytes of a paged KV cache, on the device.
pub struct DeviceKv {
    format: KvFormat,
    layers: usize,
    kv_heads: usize,
    head_dim: usize,
    /// Elements per layer: `blocks * PAGE_SIZE * kv_heads * head_dim`.
    per_layer: usize,
    keys: CudaSlice<u16>,
    values16: Option<CudaSlice<u16>>,
    values8: Option<CudaSlice<u8>>,
    scales: Vec<f32>,
}

impl DeviceKv {
    /// Device bytes of a store of `blocks` pages.
    pub fn bytes(format: KvFormat, layers: usize, kv_heads: usize, head_dim: usize, blocks: usize) -> usize {
        layers * blocks * PAGE_SIZE * kv_heads * head_dim * (format.key_bytes() + format.value_bytes())
    }

    /// A store for `blocks` pages, every byte zero (as the host cache starts);
    /// `scales`: the k16v8 value scales per layer (1 for the 16-bit formats).
    pub fn new(
        gpu: &Gpu,
        format: KvFormat,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        blocks: usize,
        scales: &[f32],
    ) -> Result<Self, GpuError> {
        let needed = Self::bytes(format, layers, kv_heads, head_dim, blocks);
        gpu.check_free("the KV cache", needed)?;
        let per_layer = blocks * PAGE_SIZE * kv_heads * head_dim;
        let keys = gpu.alloc_zeros::<u16>("the KV cache's keys", layers * per_layer)?;
        let (values16, values8) = match format {
            KvFormat::K16v8 => (None, Some(gpu.alloc_zeros::<u8>("the KV cache's values", layers * per_layer)?)),
            _ => (Some(gpu.alloc_zeros::<u16>("the KV cache's values", layers * per_layer)?), None),
        };
        if scales.len() != layers {
            return Err(GpuError::Unsupported(format!("{} value scales for {layers} layers", scales.len())));
        }
        Ok(DeviceKv { format, layers, kv_heads, head_dim, per_layer, keys, values16, values8, scales: scales.to_vec() })
    }

    pub fn format(&self) -> KvFormat {
        self.format
    }

    fn layer_ptrs(&self, gpu: &Gpu, layer: usize) -> (u64, u64) {
        assert!(layer < self.layers, "layer {layer} of {}", self.layers);
        let off = (layer * self.per_layer) as u64;
        let k = gpu.ptr(&self.keys) + off * 2;
        let v = match (&self.values16, &self.values8) {
            (Some(v), _) => gpu.ptr(v) + off * 2,
            (None, Some(v)) => gpu.ptr(v) + off,
            (None, None) => unreachable!("a store holds values"),
        };
        (k, v)
    }

    /// Stores `rows` rows of keys and values (`[rows, kv_dim]` f32 at `k`,
    /// `v`) of `layer` at the token slots `slots` (device `i64`s).
    pub fn write(&self, gpu: &Gpu, layer: usize, k: u64, v: u64, slots: u64, rows: usize) -> Result<(), GpuError> {
        let (kc, vc) = self.layer_ptrs(gpu, layer);
        let kv_dim = self.kv_heads * self.head_dim;
        let args = [
            Arg::Ptr(k),
            Arg::Ptr(v),
            Arg::Ptr(slots),
            Arg::Ptr(kc),
            Arg::Ptr(vc),
            Arg::I32(kv_dim as i32),
            Arg::I32(plan::kv_format_code(self.format)),
            Arg::F32(1.0 / self.scales[layer]),
        ];
        gpu.launch("kv_write", plan::per_row(rows, kv_dim), &args)
    }

    /// Causal paged attention of `rows` query rows (`[rows, heads * head_dim]`
    /// at `q`) into `out`, each row over its sequence's positions up to its
    /// own, through the uploaded page tables.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        gpu: &Gpu,
        layer: usize,
        q: u64,
        out: u64,
        tables: &UploadedTables,
        rows: usize,
        heads: usize,
    ) -> Result<(), GpuError> {
        let kernel = plan::attention_kernel(self.format, heads, self.kv_heads, self.head_dim)?;
        let (kc, vc) = self.layer_ptrs(gpu, layer);
        let scale = 1.0 / (self.head_dim as f32).sqrt();
        let args = [
            Arg::Ptr(q),
            Arg::Ptr(out),
            Arg::Ptr(kc),
            Arg::Ptr(vc),
            Arg::Ptr(gpu.ptr(&tables.tables)),
            Arg::Ptr(gpu.ptr(&tables.row_table)),
            Arg::Ptr(gpu.ptr(&tables.row_pos)),
            Arg::I32(heads as i32),
            Arg::I32(self.kv_heads as i32),
            Arg::I32(self.head_dim as i32),
            Arg::F32(scale),
            Arg::F32(self.scales[layer]),
        ];
        gpu.launch(kernel, plan::attention(rows, heads), &args)
    }
}

/// A forward call's page tables on the device.
pub struct UploadedTables {
    tables: CudaSlice<i32>,
    row_table: CudaSlice<i32>,
    pub row_pos: CudaSlice<i32>,
    pub slots: CudaSlice<i64>,
}

impl UploadedTables {
    pub fn upload(gpu: &Gpu, t: &PageTables) -> Result<Self, GpuError> {
        Ok(UploadedTables {
            tables: gpu.upload("page tables", &t.tables)?,
            row_table: gpu.upload("page tables", &t.row_table)?,
            row_pos: gpu.upload("positions", &t.row_pos)?,
            slots: gpu.upload("KV slots", &t.slots)?,
        })
    }
}

/// The buffers a forward call computes in (see `plan::WorkspaceSizes`).
pub struct Workspace {
    pub sizes: WorkspaceSizes,
    pub x: CudaSlice<f32>,
    pub xn: CudaSlice<f32>,
    pub out: CudaSlice<f32>,
    pub q: CudaSlice<f32>,
    pub attn: CudaSlice<f32>,
    pub k: CudaSlice<f32>,
    pub v: CudaSlice<f32>,
    pub gate: CudaSlice<f32>,
    pub up: CudaSlice<f32>,
    pub half_input: CudaSlice<u16>,
    pub picked: CudaSlice<f32>,
    pub picked_norm: CudaSlice<f32>,
    pub logits: CudaSlice<f32>,
}

impl Workspace {
    /// Every buffer zeroed: rows past a call's own (the GEMM tiles' padding)
    /// hold finite values.
    pub fn new(gpu: &Gpu, sizes: WorkspaceSizes) -> Result<Self, GpuError> {
        gpu.check_free("the forward pass's workspace", sizes.bytes())?;
        let f = |n: usize| gpu.alloc_zeros::<f32>("the forward pass's workspace", n);
        Ok(Workspace {
            sizes,
            x: f(sizes.hidden)?,
            xn: f(sizes.hidden)?,
            out: f(sizes.hidden)?,
            q: f(sizes.q)?,
            attn: f(sizes.q)?,
            k: f(sizes.kv)?,
            v: f(sizes.kv)?,
            gate: f(sizes.mlp)?,
            up: f(sizes.mlp)?,
            half_input: gpu.alloc_zeros::<u16>("the forward pass's workspace", sizes.half_input)?,
            picked: f(sizes.picked)?,
            picked_norm: f(sizes.picked)?,
            logits: f(sizes.logits)?,
        })
    }
}
