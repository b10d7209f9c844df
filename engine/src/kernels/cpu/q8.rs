//! The activation-quantized linear layer for GGUF Q4_0, Q4_1, Q5_0, Q8_0 and
//! Q4_K (repacked per 32: `QuantKind::Q4K`) weights, as
//! llama.cpp computes it: each activation row is quantized per 32-element block
//! to 8 bits (`Q8Rows`, llama.cpp's `quantize_row_q8_1_ref`), and each output is
//! a sum over blocks of integer dot products times the two blocks' scales.
//! This is the default for quantized weights; the exact path
//! (`quant::matmul_quant_on`: f32 activations times exactly dequantized weights,
//! bit-identical to the f32 layer) stays available for parity studies.
//!
//! The formula, per output (row r, weight row j), blocks b in ascending order:
//! `I_b = Σ_{e<32} w[e]·a[e]` (an exact integer, whatever order it is summed
//! in; for Q4_0 `w[e] = q[e] - 8`, summed as `Σ q·a - 8·Σa`, for Q5_0
//! `q[e] - 16` likewise), `acc = fma(d_w·d_a, I_b, acc)` (the product
//! `d_w·d_a` rounded to f32); for Q4_1 and Q4_K also `mins = fma(m_w, s_a,
//! mins)` (Q4_K's `d_w = d·sc` and `m_w = -(dmin·m)`, exact in f32). The
//! result is `acc` (Q4_0, Q5_0, Q8_0) or `acc + mins` (Q4_1, Q4_K). Q4_0,
//! Q5_0 and Q8_0 are llama.cpp's `vec_dot_q4_0_q8_0`, `vec_dot_q5_0_q8_0` and
//! `vec_dot_q8_0_q8_0` up to the order of the float sum over blocks; Q4_K
//! differs from llama.cpp's `vec_dot_q4_K_q8_K`, which quantizes activations
//! per 256 values (one scale) where this path keeps blocks of 32. Q6_K
//! (repacked per 32, two 16-value sub-blocks of scales `sc_0`, `sc_1`) takes
//! `I_b = sc_0·Σ_{e<16} (q-32)·a + sc_1·Σ_{e>=16} (q-32)·a`, still an exact
//! integer (below 2^24 in magnitude, so exact in f32 too), and `d_w = d`. Only the
//! float steps fix the bits, and they are the same for every kernel: the scalar path writes them out, the AVX2 kernels do them
//! for eight weight rows at once (one vector lane per row), so scalar and AVX2
//! give the same bits, and a row's result never depends on the other rows of
//! the batch, on tiling or on threads.
//!
//! Kernels (AVX2): up to `PANEL_ABOVE_ROWS` rows (decode) read the weights in
//! place and reduce each row's integer products to `I_b` with horizontal adds;
//! more rows (prefill) first interleave a column block's weights into a panel
//! (`q8_panel.rs`) and run register-blocked GEMM tiles over it. AVX-512 (VNNI):
//! every row count runs tiles over a 16-row interleaved copy of the weights
//! made once per matrix (`q8_pack.rs`, `q8_avx512.rs`). AMX: each whole tile
//! of sixteen rows runs `tdpbssd` over the same copy (`q8_amx.rs`), the rest
//! of the rows the AVX-512 kernel.
//!
//! The SwiGLU MLP's gate and up products run with SwiGLU and the
//! quantization of `down`'s input fused into their region
//! ([`swiglu_q8_rows_on`]): the same bytes as the three passes.
//!
//! Must not: quantize activations across rows (a row's scales depend on that
//! row only), or split k depending on the number of rows.

use super::dispatch::{CpuFeatures, CpuPath};
use super::matmul::columns_per_task;
use super::q8_pack::{GROUP_ROWS, Packed};
use super::quant::{QK, QuantKind, QuantMatrix, kind_id, q5_high, q6k_quant, q6k_scale};
use super::team::{Scatter, ScatterBlock, ScatterWriter, for_each_index, prefetch_next};
use half::f16;
use std::sync::OnceLock;

/// Activation rows quantized per block of 32 as llama.cpp's Q8_1 (whose `d` and
/// `qs` are also its Q8_0): `d = max|x| / 127` (stored through f16, as llama.cpp
/// stores it), `q = round(x / d)` (half away from zero, with `1/d` in f32 from
/// the unrounded `d`), and `s = d · Σq` (through f16), used with Q4_1 minimums.
#[derive(Debug, Clone, PartialEq)]
pub struct Q8Rows {
    pub rows: usize,
    pub cols: usize,
    /// `[rows, cols]` quants.
    pub qs: Vec<i8>,
    /// `[rows, cols / 32]` block scales (f16 values, held as f32).
    pub d: Vec<f32>,
    /// `[rows, cols / 32]` block sums times scale (f16 values, held as f32).
    pub s: Vec<f32>,
    /// `[rows, cols / 32]` block sums `Σq`, exact (the AVX-512 Q8_0 kernel
    /// removes the weights' +128 offset with them).
    pub sums: Vec<i32>,
    /// `[rows, cols / 16]` sums of each half block, exact (Q6_K's two
    /// sub-block scales per block take its offset off each half): made on
    /// first use ([`Q8Rows::half_sums`]), so only a Q6_K product pays for it.
    half_sums: OnceLock<Vec<i32>>,
}

impl Q8Rows {
    /// `[rows, cols / 16]`: the exact sum of each 16 quants, made on first use.
    pub fn half_sums(&self) -> &[i32] {
        self.half_sums
            .get_or_init(|| self.qs.chunks_exact(QK / 2).map(|h| h.iter().map(|&v| i32::from(v)).sum()).collect())
    }

    /// Quantizes `x` (`[rows, cols]`, `cols` a multiple of 32), row by row, on
    /// the best path this CPU supports (every path gives the same bytes).
    pub fn quantize(x: &[f32], rows: usize, cols: usize) -> Q8Rows {
        Q8Rows::quantize_on(CpuPath::best(), x, rows, cols)
    }

    /// As [`Q8Rows::quantize`], on `path`.
    pub fn quantize_on(path: CpuPath, x: &[f32], rows: usize, cols: usize) -> Q8Rows {
        assert!(cols.is_multiple_of(QK), "Q8Rows: {cols} columns is not a multiple of {QK}");
        assert_eq!(x.len(), rows * cols, "Q8Rows: x has {} values, expected {rows}x{cols}", x.len());
        assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
        let blocks = rows * cols / QK;
        if rows < 2 * QUANTIZE_ROWS_PER_TASK {
            let mut q = Q8Rows {
                rows,
                cols,
                qs: vec![0; rows * cols],
                d: vec![0.0; blocks],
                s: vec![0.0; blocks],
                sums: vec![0; blocks],
                half_sums: OnceLock::new(),
            };
            quantize_blocks(path, x, &mut q.qs, &mut q.d, &mut q.s, &mut q.sums);
            return q;
        }
        // Prefill: row chunks in parallel, each written in place.
        let mut out = Q8Scatter::new(rows, cols);
        let writer = out.writer();
        for_each_index(rows.div_ceil(QUANTIZE_ROWS_PER_TASK), |t| {
            let r0 = t * QUANTIZE_ROWS_PER_TASK;
            let r1 = (r0 + QUANTIZE_ROWS_PER_TASK).min(rows);
            // SAFETY: row chunks are disjoint; each writes its own rows.
            unsafe { writer.quantize(path, &x[r0 * cols..r1 * cols], r0, 0, cols) };
        });
        // SAFETY: the chunks cover rows 0..rows.
        unsafe { out.finish() }
    }
}

/// A `Q8Rows` that the tasks of one region fill in place, each task its own
/// rectangle of whole blocks (rows `r0..`, columns `c0..c0 + width`).
struct Q8Scatter {
    rows: usize,
    cols: usize,
    qs: Scatter<i8>,
    d: Scatter<f32>,
    s: Scatter<f32>,
    sums: Scatter<i32>,
}

/// What the tasks write through (`Q8Scatter::writer`).
#[derive(Clone, Copy)]
struct Q8Writer {
    cols: usize,
    qs: ScatterWriter<i8>,
    d: ScatterWriter<f32>,
    s: ScatterWriter<f32>,
    sums: ScatterWriter<i32>,
}

impl Q8Scatter {
    fn new(rows: usize, cols: usize) -> Self {
        let blocks = rows * cols / QK;
        Q8Scatter {
            rows,
            cols,
            qs: Scatter::new(rows * cols),
            d: Scatter::new(blocks),
            s: Scatter::new(blocks),
            sums: Scatter::new(blocks),
        }
    }

    fn writer(&mut self) -> Q8Writer {
        Q8Writer {
            cols: self.cols,
            qs: self.qs.writer(),
            d: self.d.writer(),
            s: self.s.writer(),
            sums: self.sums.writer(),
        }
    }

    /// # Safety
    /// Every block of every row must have been written through the writer.
    unsafe fn finish(self) -> Q8Rows {
        // SAFETY: every element written (caller).
        unsafe {
            Q8Rows {
                rows: self.rows,
                cols: self.cols,
                qs: self.qs.finish(),
                d: self.d.finish(),
                s: self.s.finish(),
                sums: self.sums.finish(),
                half_sums: OnceLock::new(),
            }
        }
    }
}

impl Q8Writer {
    /// Quantizes `x` (`[rows, width]`, `width` a multiple of 32) into rows
    /// `r0..r0 + rows`, columns `c0..c0 + width` (`c0` a multiple of 32).
    ///
    /// # Safety
    /// No other write of the region may touch these rows and columns, and the
    /// `Q8Scatter` must outlive the region.
    unsafe fn quantize(&self, path: CpuPath, x: &[f32], r0: usize, c0: usize, width: usize) {
        if width == 0 {
            return;
        }
        let (rows, nb, bpr) = (x.len() / width, width / QK, self.cols / QK);
        let (mut q, mut d, mut s, mut su) =
            (vec![0i8; x.len()], vec![0.0; rows * nb], vec![0.0; rows * nb], vec![0; rows * nb]);
        quantize_blocks(path, x, &mut q, &mut d, &mut s, &mut su);
        for r in 0..rows {
            let (at, b) = ((r0 + r) * self.cols + c0, (r0 + r) * bpr + c0 / QK);
            let blocks = r * nb..(r + 1) * nb;
            // SAFETY: these rows and columns are this task's alone (caller).
            unsafe {
                self.qs.write(at, &q[r * width..(r + 1) * width]);
                self.d.write(b, &d[blocks.clone()]);
                self.s.write(b, &s[blocks.clone()]);
                self.sums.write(b, &su[blocks]);
            }
        }
    }
}

/// Activation rows per quantization task in prefill.
const QUANTIZE_ROWS_PER_TASK: usize = 16;

/// Quantizes the blocks of `x` (whole rows) into `qs`, `d`, `s` and `sums`.
fn quantize_blocks(path: CpuPath, x: &[f32], qs: &mut [i8], d: &mut [f32], s: &mut [f32], sums: &mut [i32]) {
    for (b, (xb, qb)) in x.chunks_exact(QK).zip(qs.chunks_exact_mut(QK)).enumerate() {
        (d[b], s[b]) = match path {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: callers checked that this CPU runs `path` (AVX2, FMA and F16C).
            CpuPath::Avx2 | CpuPath::Avx512 | CpuPath::Amx => unsafe { avx2::quantize_block(xb, qb) },
            _ => quantize_block(xb, qb),
        };
        sums[b] = qb.iter().map(|&v| i32::from(v)).sum();
    }
}

/// One block as `quantize_row_q8_1_ref`: returns `(f16(d), f16(Σq · d))`.
fn quantize_block(x: &[f32], qs: &mut [i8]) -> (f32, f32) {
    let amax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        // |v · id| <= 127 up to rounding; the clamp only guards non-finite input.
        *q = (v * id).round().clamp(-127.0, 127.0) as i8;
        sum += i32::from(*q);
    }
    block_scales(d, sum)
}

/// `(f16(d), f16(Σq · d))` as f32.
#[inline]
fn block_scales(d: f32, sum: i32) -> (f32, f32) {
    (f16::from_f32(d).to_f32(), f16::from_f32(sum as f32 * d).to_f32())
}

/// `y = x · Wᵀ` through quantized activations, on `path` (see the module doc).
pub fn matmul_q8_on(path: CpuPath, x: &[f32], w: &QuantMatrix, m: usize) -> Vec<f32> {
    matmul_q8_rows_on(path, &Q8Rows::quantize_on(path, x, m, w.cols), w)
}

/// As [`matmul_q8_on`], for rows already quantized.
pub fn matmul_q8_rows_on(path: CpuPath, a: &Q8Rows, w: &QuantMatrix) -> Vec<f32> {
    matmul_q8_rows_many_on(path, a, &[w]).remove(0)
}

/// `x · Wᵢᵀ` for several weights over the same input (q, k and v; gate and
/// up): `x` is quantized once and the column blocks of every product share one
/// parallel region. Each output is exactly [`matmul_q8_on`]'s.
pub fn matmul_q8_many_on(path: CpuPath, x: &[f32], ws: &[&QuantMatrix], m: usize) -> Vec<Vec<f32>> {
    let Some(first) = ws.first() else { return Vec::new() };
    matmul_q8_rows_many_on(path, &Q8Rows::quantize_on(path, x, m, first.cols), ws)
}

/// As [`matmul_q8_many_on`], for rows already quantized.
pub fn matmul_q8_rows_many_on(path: CpuPath, a: &Q8Rows, ws: &[&QuantMatrix]) -> Vec<Vec<f32>> {
    assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
    let m = a.rows;
    for w in ws {
        assert_eq!(a.cols, w.cols, "matmul_q8: activations have {} columns, weights {}", a.cols, w.cols);
        // AVX-512: the interleaved layout, made here (before the parallel
        // region) on first use.
        if path.has_avx512() && m > 0 {
            w.packed16();
        }
    }
    let tasks: Vec<_> = column_tasks(path, ws, m).collect();
    if m == 0 {
        return ws.iter().map(|_| Vec::new()).collect();
    }
    // Each task writes its column block of every row straight into the output.
    let mut ys: Vec<Scatter<f32>> = ws.iter().map(|w| Scatter::new(m * w.rows)).collect();
    let writers: Vec<ScatterWriter<f32>> = ys.iter_mut().map(Scatter::writer).collect();
    for_each_index(tasks.len(), |t| {
        let (i, c0, c1) = tasks[t];
        let (n, width) = (ws[i].rows, c1 - c0);
        // SAFETY: tasks cover disjoint column ranges of each product, so rows
        // 0..m of columns c0..c1 of product i are written by this task only.
        let mut out = unsafe { writers[i].block(c0, m, n, width) };
        block_on(path, a, ws[i], c0, c1, &mut out);
    });
    // SAFETY: the tasks of each product cover its columns 0..rows of every row.
    ys.into_iter().map(|y| unsafe { y.finish() }).collect()
}

/// Columns `c0..c1` of `a · wᵀ` for every row of `a`, on `path` (which the
/// caller checked this CPU supports; the AVX-512 layouts already made).
fn block_on(path: CpuPath, a: &Q8Rows, w: &QuantMatrix, c0: usize, c1: usize, out: &mut ScatterBlock<'_, f32>) {
    match path {
        CpuPath::Scalar => scalar::block(a, w, c0, c1, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: callers checked that this CPU has AVX2, FMA and F16C.
        CpuPath::Avx2 => unsafe { avx2::block(a, w, c0, c1, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: callers checked that this CPU has AVX-512 F/BW/VL and VNNI.
        CpuPath::Avx512 => unsafe { avx512::block(a, w.packed16(), c0, c1, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: callers checked that this CPU has AVX-512 F/BW/VL, VNNI and
        // usable AMX-INT8.
        CpuPath::Amx => unsafe { amx::block(a, w.packed16(), c0, c1, out) },
        #[cfg(not(target_arch = "x86_64"))]
        CpuPath::Avx2 | CpuPath::Avx512 | CpuPath::Amx => scalar::block(a, w, c0, c1, out),
    }
}

/// SwiGLU over two products of the same rows, quantized as the next layer's
/// input: `Q8Rows::quantize_on(path, silu(a·Gᵀ) ⊙ (a·Uᵀ))`, bit for bit. Each
/// task computes whole 32-column blocks of both products, applies SwiGLU
/// (element-wise, the same bits on every path) and quantizes its blocks (a
/// block's scale depends on its 32 values only), so no serial pass over the
/// products is left to the caller.
pub fn swiglu_q8_rows_on(path: CpuPath, a: &Q8Rows, gate: &QuantMatrix, up: &QuantMatrix) -> Q8Rows {
    assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
    let (m, n) = (a.rows, gate.rows);
    assert_eq!((up.rows, up.cols), (n, gate.cols), "SwiGLU: gate and up differ in shape");
    assert_eq!(a.cols, gate.cols, "matmul_q8: activations have {} columns, weights {}", a.cols, gate.cols);
    assert!(n.is_multiple_of(QK), "SwiGLU: {n} columns is not a multiple of {QK}");
    if path.has_avx512() && m > 0 {
        gate.packed16();
        up.packed16();
    }
    let mut out = Q8Scatter::new(m, n);
    let writer = out.writer();
    let width = columns_per_task(m, n).next_multiple_of(QK);
    let starts: Vec<usize> = (0..n).step_by(width).collect();
    for_each_index(if m == 0 { 0 } else { starts.len() }, |t| {
        let (c0, c1) = (starts[t], (starts[t] + width).min(n));
        let w = c1 - c0;
        let (mut g, mut u) = (vec![0.0f32; m * w], vec![0.0f32; m * w]);
        block_on(path, a, gate, c0, c1, &mut ScatterBlock::contiguous(&mut g, w));
        block_on(path, a, up, c0, c1, &mut ScatterBlock::contiguous(&mut u, w));
        super::ops::silu_mul_slice(&mut g, &u, path);
        // SAFETY: tasks own disjoint column blocks of every row.
        unsafe { writer.quantize(path, &g, 0, c0, w) };
    });
    // SAFETY: the tasks cover columns 0..n of every row (none when m == 0).
    unsafe { out.finish() }
}

/// The tasks of a product of `m` rows over `ws` on `path`, in the order
/// they are claimed: (matrix, first column, end column), whole groups of
/// weight rows (16 over the AVX-512 interleaved layout, else 8) where the
/// shape allows.
fn column_tasks<'a>(
    path: CpuPath,
    ws: &'a [&QuantMatrix],
    m: usize,
) -> impl Iterator<Item = (usize, usize, usize)> + 'a {
    let group = if path.has_avx512() { GROUP_ROWS } else { 8 };
    ws.iter().enumerate().flat_map(move |(i, w)| {
        let width = columns_per_task(m, w.rows).next_multiple_of(group);
        (0..w.rows).step_by(width).map(move |c0| (i, c0, (c0 + width).min(w.rows)))
    })
}

/// Most bytes a hint asks an idle worker to prefetch (about what one core
/// streams in the few microseconds between two decode regions).
const HINT_BYTES: usize = 96 << 10;

/// Hints the installed team that the next region is a product of `m` rows
/// (decode: at most `PANEL_ABOVE_ROWS`, which stream the weights) over `ws`
/// on `path`: an idle worker then prefetches the head of that region's second
/// task, the one it will most likely claim (the caller claims the first as it
/// publishes the region). Only the AVX-512 packed layout, once built, is
/// hinted; results never depend on it.
pub fn prefetch_next_region(path: CpuPath, ws: &[&QuantMatrix], m: usize) {
    if !path.has_avx512() || m == 0 || m > PANEL_ABOVE_ROWS {
        return;
    }
    let Some((i, c0, c1)) = column_tasks(path, ws, m).nth(1) else { return };
    // A hint never builds the layout (a second copy of the weights).
    let Some(p) = ws[i].packed16_if_built() else { return };
    let group_bytes = p.nb * Packed::group_block_bytes(p.kind);
    let start = c0 / GROUP_ROWS * group_bytes;
    let end = (c1.div_ceil(GROUP_ROWS) * group_bytes).min(start + HINT_BYTES).min(p.data.len());
    prefetch_next(&[&p.data[start..end]]);
}

/// With more rows than this, a column block's weights are interleaved into a
/// panel once and reused by every row tile; up to it, they are read in place.
pub(crate) const PANEL_ABOVE_ROWS: usize = 4;

/// Block `b` of weight row `j`: its bytes.
#[inline]
fn weight_block(w: &QuantMatrix, j: usize, b: usize) -> &[u8] {
    let bb = w.kind.block_bytes();
    let start = (j * (w.cols / QK) + b) * bb;
    &w.data()[start..start + bb]
}

mod scalar {
    //! The module doc's formula, written out element by element.
    use super::*;

    pub fn block(a: &Q8Rows, w: &QuantMatrix, c0: usize, c1: usize, out: &mut ScatterBlock<'_, f32>) {
        for r in 0..a.rows {
            let row = out.row(r);
            for j in c0..c1 {
                row[j - c0] = dot(a, r, w, j);
            }
        }
    }

    pub(super) fn dot(a: &Q8Rows, r: usize, w: &QuantMatrix, j: usize) -> f32 {
        let nb = a.cols / QK;
        let mut acc = 0.0f32;
        let mut mins = 0.0f32;
        let mut wq = [0i32; QK];
        for b in 0..nb {
            let blk = weight_block(w, j, b);
            let (dw, mw) = w.kind.scales(blk);
            match w.kind {
                QuantKind::Q4_0 | QuantKind::Q4_1 | QuantKind::Q5_0 | QuantKind::Q4K => {
                    let (at, off) = (w.kind.quants_at(), w.kind.nibble_offset());
                    let q5 = w.kind == QuantKind::Q5_0;
                    let high = |e: usize| if q5 { q5_high(blk, e) } else { 0 };
                    for (e, &byte) in blk[at..at + 16].iter().enumerate() {
                        wq[e] = i32::from((byte & 0x0f) | high(e)) - off;
                        wq[e + 16] = i32::from((byte >> 4) | high(e + 16)) - off;
                    }
                    if w.kind.has_mins() {
                        mins = mw.mul_add(a.s[r * nb + b], mins);
                    }
                }
                QuantKind::Q8_0 => {
                    for (e, &byte) in blk[2..34].iter().enumerate() {
                        wq[e] = i32::from(byte as i8);
                    }
                }
                QuantKind::Q6K => {
                    for (e, v) in wq.iter_mut().enumerate() {
                        *v = q6k_scale(blk, e / 16) * (i32::from(q6k_quant(blk, e)) - 32);
                    }
                }
            }
            let aq = &a.qs[r * a.cols + b * QK..r * a.cols + (b + 1) * QK];
            let i: i32 = wq.iter().zip(aq).map(|(&wv, &av)| wv * i32::from(av)).sum();
            acc = (dw * a.d[r * nb + b]).mul_add(i as f32, acc);
        }
        match w.kind {
            QuantKind::Q4_1 | QuantKind::Q4K => acc + mins,
            QuantKind::Q4_0 | QuantKind::Q5_0 | QuantKind::Q8_0 | QuantKind::Q6K => acc,
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! Integer dot products with `maddubs` (u8 x i8 pairs to i16) and `madd`
    //! (i16 pairs to i32), as ggml's AVX2 `vec_dot_q4_1_q8_1` and
    //! `vec_dot_q8_0_q8_0` (Q4_0: the Q4_1 products of the raw nibbles, less
    //! `8 · Σa`; Q5_0: the fifth bits spread to bytes and or-ed in, less
    //! `16 · Σa`); Q8_0 takes the sign trick (|w| x sign(a, w)), which
    //! is exact here because activations lie in [-127, 127]. Eight weight rows
    //! at a time: their eight-lane integer products are reduced to one vector
    //! of eight `I_b` (horizontal adds), then one multiply and one FMA do the
    //! float steps of the module doc for all eight.
    use super::*;
    use std::arch::x86_64::*;

    use super::panel;

    /// How far ahead of the current block the in-place kernel prefetches each
    /// weight row, into L2. The eight rows of a group lie one after another and
    /// the groups follow each other, so this reaches into the groups to come
    /// (a 576-wide Q4_1 row is 360 bytes). On an AMD Zen 4 (32 MiB L3, the
    /// weights come from memory every token), alternated `engine bench --cpu-path
    /// avx2` decode at batch 1: 384 bytes into L1 (the old distance, which lands
    /// inside the group being read) 89 tok/s median, 4096 into L1 121, 4096
    /// into L2 149, 8192 into L2 168, 16384 into L2 157 (6 rounds each).
    const PREFETCH_BYTES: usize = 8192;

    /// [`super::quantize_block`] on eight lanes: the same maximum, scale,
    /// product and clamp, and `round` (half away from zero) done exactly as
    /// `t = trunc(p)`, plus `±1` where `|p - t| >= 0.5` (`p - t` is exact).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn quantize_block(x: &[f32], qs: &mut [i8]) -> (f32, f32) {
        assert!(x.len() == QK && qs.len() == QK);
        let sign = _mm256_set1_ps(-0.0);
        // SAFETY: x holds 32 floats.
        let v: [__m256; 4] = std::array::from_fn(|i| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * i)) });
        let abs = v.map(|vi| _mm256_andnot_ps(sign, vi));
        let m8 = _mm256_max_ps(_mm256_max_ps(abs[0], abs[1]), _mm256_max_ps(abs[2], abs[3]));
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps::<1>(m8));
        let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let amax = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps::<0b01>(m2, m2)));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let (idv, half, one, lim) =
            (_mm256_set1_ps(id), _mm256_set1_ps(0.5), _mm256_set1_ps(1.0), _mm256_set1_ps(127.0));
        let q = v.map(|vi| {
            let p = _mm256_mul_ps(vi, idv);
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(p);
            let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, t));
            let away = _mm256_or_ps(_mm256_and_ps(p, sign), one);
            let r = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), away));
            let c = _mm256_min_ps(_mm256_max_ps(r, _mm256_sub_ps(_mm256_setzero_ps(), lim)), lim);
            _mm256_cvttps_epi32(c)
        });
        let sum4 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s4 = _mm_add_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256::<1>(sum4));
        let s2 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
        let sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32::<0b01>(s2)));
        let packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        let ordered = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: qs holds 32 bytes.
        unsafe { _mm256_storeu_si256(qs.as_mut_ptr() as *mut __m256i, ordered) };
        block_scales(d, sum)
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn block(a: &Q8Rows, w: &QuantMatrix, c0: usize, c1: usize, out: &mut ScatterBlock<'_, f32>) {
        if a.rows > PANEL_ABOVE_ROWS {
            // SAFETY: same features as this function.
            return unsafe { panel::block(a, w, c0, c1, out) };
        }
        let kind = w.kind.id();
        let mut i = 0;
        while i < a.rows {
            let rows = (a.rows - i).min(2);
            let mut j = c0;
            while j < c1 {
                // SAFETY: rows i..i+rows exist; `group` clamps columns to c1.
                unsafe {
                    match (rows, kind) {
                        (2, kind_id::Q4_0) => group::<2, { kind_id::Q4_0 }>(a, w, i, j, c0, c1, out),
                        (2, kind_id::Q4_1) => group::<2, { kind_id::Q4_1 }>(a, w, i, j, c0, c1, out),
                        (2, kind_id::Q5_0) => group::<2, { kind_id::Q5_0 }>(a, w, i, j, c0, c1, out),
                        (2, kind_id::Q4K) => group::<2, { kind_id::Q4K }>(a, w, i, j, c0, c1, out),
                        (2, kind_id::Q6K) => group::<2, { kind_id::Q6K }>(a, w, i, j, c0, c1, out),
                        (2, _) => group::<2, { kind_id::Q8_0 }>(a, w, i, j, c0, c1, out),
                        (_, kind_id::Q4_0) => group::<1, { kind_id::Q4_0 }>(a, w, i, j, c0, c1, out),
                        (_, kind_id::Q4_1) => group::<1, { kind_id::Q4_1 }>(a, w, i, j, c0, c1, out),
                        (_, kind_id::Q5_0) => group::<1, { kind_id::Q5_0 }>(a, w, i, j, c0, c1, out),
                        (_, kind_id::Q4K) => group::<1, { kind_id::Q4K }>(a, w, i, j, c0, c1, out),
                        (_, kind_id::Q6K) => group::<1, { kind_id::Q6K }>(a, w, i, j, c0, c1, out),
                        (_, _) => group::<1, { kind_id::Q8_0 }>(a, w, i, j, c0, c1, out),
                    }
                }
                j += 8;
            }
            i += rows;
        }
    }

    /// Byte `e` of the result is 0xff if bit `e` of `bits` is set, else 0
    /// (ggml's `bytes_from_bits_32`): byte `e` is a copy of byte `e / 8` with
    /// every bit but `e % 8` set, compared with all ones.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn bytes_from_bits(bits: i32) -> __m256i {
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits),
            _mm256_set_epi64x(0x0303_0303_0303_0303, 0x0202_0202_0202_0202, 0x0101_0101_0101_0101, 0),
        );
        let others = _mm256_set1_epi64x(0x7fbf_dfef_f7fb_fdfe);
        _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1))
    }

    /// Weight rows `j0..j0+8` (those below `c1`; the others repeat row
    /// `c1 - 1` and are not stored) for activation rows `i0..i0+R`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn group<const R: usize, const KIND: u8>(
        a: &Q8Rows,
        w: &QuantMatrix,
        i0: usize,
        j0: usize,
        c0: usize,
        c1: usize,
        out: &mut ScatterBlock<'_, f32>,
    ) {
        // Nibbles (Q4_0, Q4_1, Q5_0) or bytes (Q8_0); Q4_1's minimums; Q5_0's
        // fifth bits; Q4_0's and Q5_0's offsets (times Σa, off each block's sum).
        let q4 = KIND != kind_id::Q8_0;
        let has_mins = KIND == kind_id::Q4_1 || KIND == kind_id::Q4K;
        let q5 = KIND == kind_id::Q5_0;
        let q6 = KIND == kind_id::Q6K;
        let offset = match KIND {
            kind_id::Q4_0 => 8,
            kind_id::Q5_0 => 16,
            _ => 0,
        };
        let qat = match KIND {
            kind_id::Q4_1 => 4,
            kind_id::Q5_0 | kind_id::Q4K => 6,
            kind_id::Q6K => 12,
            _ => 2,
        };
        let k = a.cols;
        let nb = k / QK;
        let bb = w.kind.block_bytes();
        let wp = w.data().as_ptr();
        let ap = a.qs.as_ptr();
        let ones = _mm256_set1_epi16(1);
        let low = _mm256_set1_epi8(0x0f);
        let cols = (c1 - j0).min(8);
        let rowp: [*const u8; 8] = std::array::from_fn(|c| wp.wrapping_add((j0 + c.min(cols - 1)) * nb * bb));
        // Per 128-bit lane, [d0 m0 d1 m1 d2 m2 d3 m3] (u16) to [d0..d3 m0..m3].
        let split = _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
        );
        let mut acc = [_mm256_setzero_ps(); R];
        let mut mins = [_mm256_setzero_ps(); R];
        for b in 0..nb {
            let off = b * bb;
            // SAFETY (this block): every row pointer is a weight row < w.rows and
            // block b < nb; activation rows i0 + r < a.rows.
            unsafe {
                // The eight rows stream from memory: fetch far ahead into L2.
                // (A prefetch never faults; `wrapping_add` keeps the address
                // arithmetic defined past the end of the data.)
                for rp in rowp {
                    _mm_prefetch::<_MM_HINT_T1>(rp.wrapping_add(off + PREFETCH_BYTES) as *const i8);
                }
                // Scales (and Q4_1 minimums) of the eight rows' block b (for
                // Q4_0 and Q8_0 the upper half holds quants, and is not used).
                let head = _mm256_setr_epi32(
                    (rowp[0].add(off) as *const i32).read_unaligned(),
                    (rowp[1].add(off) as *const i32).read_unaligned(),
                    (rowp[2].add(off) as *const i32).read_unaligned(),
                    (rowp[3].add(off) as *const i32).read_unaligned(),
                    (rowp[4].add(off) as *const i32).read_unaligned(),
                    (rowp[5].add(off) as *const i32).read_unaligned(),
                    (rowp[6].add(off) as *const i32).read_unaligned(),
                    (rowp[7].add(off) as *const i32).read_unaligned(),
                );
                let dm = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_shuffle_epi8(head, split));
                let (mut dw, mut mw) =
                    (_mm256_cvtph_ps(_mm256_castsi256_si128(dm)), _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(dm)));
                if KIND == kind_id::Q4K {
                    // d · sc and -(dmin · m), the sub-block's 6-bit scale and
                    // minimum at bytes 4 and 5 (exact products).
                    let byte = |c: usize, i: usize| f32::from(*rowp[c].add(off + i));
                    let sc = _mm256_setr_ps(
                        byte(0, 4),
                        byte(1, 4),
                        byte(2, 4),
                        byte(3, 4),
                        byte(4, 4),
                        byte(5, 4),
                        byte(6, 4),
                        byte(7, 4),
                    );
                    let mn = _mm256_setr_ps(
                        byte(0, 5),
                        byte(1, 5),
                        byte(2, 5),
                        byte(3, 5),
                        byte(4, 5),
                        byte(5, 5),
                        byte(6, 5),
                        byte(7, 5),
                    );
                    dw = _mm256_mul_ps(dw, sc);
                    mw = _mm256_xor_ps(_mm256_mul_ps(mw, mn), _mm256_set1_ps(-0.0));
                }
                let mut aq = [_mm256_setzero_si256(); R];
                for (r, v) in aq.iter_mut().enumerate() {
                    *v = _mm256_loadu_si256(ap.add((i0 + r) * k + b * QK) as *const __m256i);
                }
                // Q6_K: 32·Σa over each four elements (lane l: elements 4l..4l+4),
                // taken off the products before the sub-block scales multiply.
                let mut a32 = [_mm256_setzero_si256(); R];
                if q6 {
                    for r in 0..R {
                        let four = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), aq[r]), ones);
                        a32[r] = _mm256_slli_epi32::<5>(four);
                    }
                }
                // Eight lanes of products per weight row, reduced by horizontal
                // adds: `x` holds rows 0..3's partial sums, `y` rows 4..7's.
                let mut t = [_mm256_setzero_si256(); R];
                let mut x = [_mm256_setzero_si256(); R];
                for q in 0..4 {
                    let mut p = [[_mm256_setzero_si256(); 2]; R];
                    for s in 0..2 {
                        let blk = rowp[2 * q + s].add(off);
                        let wq = if q4 {
                            let raw = _mm_loadu_si128(blk.add(qat) as *const __m128i);
                            let nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(raw), raw), low);
                            if q5 {
                                let qh = (blk.add(2) as *const i32).read_unaligned();
                                _mm256_or_si256(nib, _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10)))
                            } else if q6 {
                                let qh4 = (blk.add(4) as *const i32).read_unaligned();
                                let qh5 = (blk.add(8) as *const i32).read_unaligned();
                                let b4 = _mm256_and_si256(bytes_from_bits(qh4), _mm256_set1_epi8(0x10));
                                let b5 = _mm256_and_si256(bytes_from_bits(qh5), _mm256_set1_epi8(0x20));
                                _mm256_or_si256(nib, _mm256_or_si256(b4, b5))
                            } else {
                                nib
                            }
                        } else {
                            _mm256_loadu_si256(blk.add(2) as *const __m256i)
                        };
                        let wabs = if q4 { wq } else { _mm256_sign_epi8(wq, wq) };
                        for r in 0..R {
                            let av = if q4 { aq[r] } else { _mm256_sign_epi8(aq[r], wq) };
                            p[r][s] = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, av), ones);
                        }
                        if q6 {
                            // Lanes 0..4 hold elements 0..16 (scale sc_0), 4..8 the rest (sc_1).
                            let (s0, s1) = (i32::from(*blk.add(2) as i8), i32::from(*blk.add(3) as i8));
                            let scv = _mm256_setr_epi32(s0, s0, s0, s0, s1, s1, s1, s1);
                            for r in 0..R {
                                p[r][s] = _mm256_mullo_epi32(_mm256_sub_epi32(p[r][s], a32[r]), scv);
                            }
                        }
                    }
                    for r in 0..R {
                        let h = _mm256_hadd_epi32(p[r][0], p[r][1]);
                        match q {
                            0 | 2 => t[r] = h,
                            1 => x[r] = _mm256_hadd_epi32(t[r], h),
                            _ => {
                                let y = _mm256_hadd_epi32(t[r], h);
                                let mut i = _mm256_add_epi32(
                                    _mm256_permute2x128_si256::<0x20>(x[r], y),
                                    _mm256_permute2x128_si256::<0x31>(x[r], y),
                                );
                                if offset != 0 {
                                    i = _mm256_sub_epi32(i, _mm256_set1_epi32(offset * a.sums[(i0 + r) * nb + b]));
                                }
                                let da = _mm256_set1_ps(a.d[(i0 + r) * nb + b]);
                                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), _mm256_cvtepi32_ps(i), acc[r]);
                                if has_mins {
                                    mins[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(a.s[(i0 + r) * nb + b]), mins[r]);
                                }
                            }
                        }
                    }
                }
            }
        }
        for r in 0..R {
            let y = if has_mins { _mm256_add_ps(acc[r], mins[r]) } else { acc[r] };
            let mut lanes = [0.0f32; 8];
            // SAFETY: lanes holds eight floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), y) };
            out.row(i0 + r)[j0 - c0..j0 - c0 + cols].copy_from_slice(&lanes[..cols]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[path = "q8_panel.rs"]
mod panel;

#[cfg(target_arch = "x86_64")]
#[path = "q8_avx512.rs"]
mod avx512;

#[cfg(target_arch = "x86_64")]
#[path = "q8_amx.rs"]
mod amx;

#[cfg(test)]
#[path = "q8_tests.rs"]
mod tests;
