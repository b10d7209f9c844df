//! The activation-quantized linear layer for GGUF Q4_1 and Q8_0 weights, as
//! llama.cpp computes it: each activation row is quantized per 32-element block
//! to 8 bits (`Q8Rows`, llama.cpp's `quantize_row_q8_1_ref`), and each output is
//! a sum over blocks of integer dot products times the two blocks' scales.
//! This is the default for quantized weights; the exact path
//! (`quant::matmul_quant_on`: f32 activations times exactly dequantized weights,
//! bit-identical to the f32 layer) stays available for parity studies.
//!
//! The formula, per output (row r, weight row j), blocks b in ascending order:
//! `i_l = Σ_{e = 4l..4l+3} w[e]·a[e]` (exact integers, eight lanes l over the
//! 32 elements), `d = d_w · d_a` (f32), `lane_l = fma(d, i_l, lane_l)`; for
//! Q4_1 also `mins = mins + m_w · s_a` (unfused). The result is
//! `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))` (+ `mins` for Q4_1). The lanes are
//! those of AVX2's `maddubs`/`madd` pair, so the AVX2 path and the scalar path
//! (which follows this text literally) give the same bits, and a row's result
//! never depends on the other rows of the batch, on tiling or on threads.
//!
//! Must not: quantize activations across rows (a row's scales depend on that
//! row only), or split k depending on the number of rows.

use super::dispatch::{CpuFeatures, CpuPath};
use super::matmul::{columns_per_task, par_columns};
use super::quant::{QK, QuantKind, QuantMatrix};
use half::f16;

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
}

impl Q8Rows {
    /// Quantizes `x` (`[rows, cols]`, `cols` a multiple of 32), row by row.
    pub fn quantize(x: &[f32], rows: usize, cols: usize) -> Q8Rows {
        assert!(cols.is_multiple_of(QK), "Q8Rows: {cols} columns is not a multiple of {QK}");
        assert_eq!(x.len(), rows * cols, "Q8Rows: x has {} values, expected {rows}x{cols}", x.len());
        let blocks = rows * cols / QK;
        let mut q = Q8Rows { rows, cols, qs: vec![0; rows * cols], d: vec![0.0; blocks], s: vec![0.0; blocks] };
        for (b, (xb, qb)) in x.chunks_exact(QK).zip(q.qs.chunks_exact_mut(QK)).enumerate() {
            (q.d[b], q.s[b]) = quantize_block(xb, qb);
        }
        q
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
    (f16::from_f32(d).to_f32(), f16::from_f32(sum as f32 * d).to_f32())
}

/// `y = x · Wᵀ` through quantized activations, on `path` (see the module doc).
pub fn matmul_q8_on(path: CpuPath, x: &[f32], w: &QuantMatrix, m: usize) -> Vec<f32> {
    matmul_q8_rows_on(path, &Q8Rows::quantize(x, m, w.cols), w)
}

/// As [`matmul_q8_on`], for rows already quantized.
pub fn matmul_q8_rows_on(path: CpuPath, a: &Q8Rows, w: &QuantMatrix) -> Vec<f32> {
    assert_eq!(a.cols, w.cols, "matmul_q8: activations have {} columns, weights {}", a.cols, w.cols);
    assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
    let (m, n) = (a.rows, w.rows);
    let mut y = vec![0.0f32; m * n];
    if m == 0 || n == 0 {
        return y;
    }
    par_columns(m, n, &mut y, columns_per_task(m, n), |c0, c1, out| match path {
        CpuPath::Scalar => scalar::block(a, w, c0, c1, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the assert above checked that this CPU has AVX2, FMA and F16C.
        CpuPath::Avx2 => unsafe { avx2::block(a, w, c0, c1, out) },
        #[cfg(not(target_arch = "x86_64"))]
        CpuPath::Avx2 => scalar::block(a, w, c0, c1, out),
    });
    y
}

/// Block `b` of weight row `j`: its bytes.
#[inline]
fn weight_block(w: &QuantMatrix, j: usize, b: usize) -> &[u8] {
    let bb = w.kind.block_bytes();
    let start = (j * (w.cols / QK) + b) * bb;
    &w.data[start..start + bb]
}

mod scalar {
    //! The module doc's formula, written out element by element.
    use super::*;

    pub fn block(a: &Q8Rows, w: &QuantMatrix, c0: usize, c1: usize, out: &mut [f32]) {
        let width = c1 - c0;
        for r in 0..a.rows {
            for j in c0..c1 {
                out[r * width + (j - c0)] = dot(a, r, w, j);
            }
        }
    }

    pub(super) fn dot(a: &Q8Rows, r: usize, w: &QuantMatrix, j: usize) -> f32 {
        let nb = a.cols / QK;
        let mut lanes = [0.0f32; 8];
        let mut mins = 0.0f32;
        let mut wq = [0i32; QK];
        for b in 0..nb {
            let blk = weight_block(w, j, b);
            let dw = f16::from_le_bytes([blk[0], blk[1]]).to_f32();
            match w.kind {
                QuantKind::Q4_1 => {
                    for (e, &byte) in blk[4..20].iter().enumerate() {
                        wq[e] = i32::from(byte & 0x0f);
                        wq[e + 16] = i32::from(byte >> 4);
                    }
                    let mw = f16::from_le_bytes([blk[2], blk[3]]).to_f32();
                    mins += mw * a.s[r * nb + b];
                }
                QuantKind::Q8_0 => {
                    for (e, &byte) in blk[2..34].iter().enumerate() {
                        wq[e] = i32::from(byte as i8);
                    }
                }
            }
            let aq = &a.qs[r * a.cols + b * QK..r * a.cols + (b + 1) * QK];
            let d = dw * a.d[r * nb + b];
            for (l, lane) in lanes.iter_mut().enumerate() {
                let i: i32 = (4 * l..4 * l + 4).map(|e| wq[e] * i32::from(aq[e])).sum();
                *lane = d.mul_add(i as f32, *lane);
            }
        }
        let s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
        match w.kind {
            QuantKind::Q4_1 => s + mins,
            QuantKind::Q8_0 => s,
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! Integer dot products with `maddubs` (u8 x i8 pairs to i16) and `madd`
    //! (i16 pairs to i32), as ggml's AVX2 `vec_dot_q4_1_q8_1` and
    //! `vec_dot_q8_0_q8_0`; Q8_0 takes the sign trick (|w| x sign(a, w)), which
    //! is exact here because activations lie in [-127, 127].
    use super::*;
    use crate::kernels::cpu::matmul::avx2::hsum;
    use std::arch::x86_64::*;

    use super::panel;

    /// With more rows than this, a column block's weights are unpacked once
    /// (`panel`) and reused by every row group; below, they are read in place.
    const UNPACK_ABOVE_ROWS: usize = 4;

    /// f16 bits at `p` (little-endian) to f32, exactly.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn f16_at(p: *const u8) -> f32 {
        // SAFETY: p points at two readable bytes.
        let bits = unsafe { u16::from_le_bytes([*p, *p.add(1)]) };
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(i32::from(bits))))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn block(a: &Q8Rows, w: &QuantMatrix, c0: usize, c1: usize, out: &mut [f32]) {
        if a.rows > UNPACK_ABOVE_ROWS {
            // SAFETY: same features as this function.
            return unsafe { panel::block(a, w, c0, c1, out) };
        }
        let width = c1 - c0;
        let m = a.rows;
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(4);
            let mut j = c0;
            while j < c1 {
                let cols = (c1 - j).min(if rows == 1 { 4 } else { 2 });
                // SAFETY: rows i..i+rows and columns j..j+cols lie inside a, w and out.
                unsafe {
                    match (rows, cols) {
                        (1, 4) => tile::<1, 4>(a, w, i, j, out, width, c0),
                        (1, 3) => tile::<1, 3>(a, w, i, j, out, width, c0),
                        (1, 2) => tile::<1, 2>(a, w, i, j, out, width, c0),
                        (4, 2) => tile::<4, 2>(a, w, i, j, out, width, c0),
                        (4, 1) => tile::<4, 1>(a, w, i, j, out, width, c0),
                        (3, 2) => tile::<3, 2>(a, w, i, j, out, width, c0),
                        (3, 1) => tile::<3, 1>(a, w, i, j, out, width, c0),
                        (2, 2) => tile::<2, 2>(a, w, i, j, out, width, c0),
                        (2, 1) => tile::<2, 1>(a, w, i, j, out, width, c0),
                        _ => tile::<1, 1>(a, w, i, j, out, width, c0),
                    }
                }
                j += cols;
            }
            i += rows;
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<const R: usize, const C: usize>(
        a: &Q8Rows,
        w: &QuantMatrix,
        i0: usize,
        j0: usize,
        out: &mut [f32],
        width: usize,
        c0: usize,
    ) {
        let k = a.cols;
        let nb = k / QK;
        let bb = w.kind.block_bytes();
        let q4 = w.kind == QuantKind::Q4_1;
        let wp = w.data.as_ptr();
        let ap = a.qs.as_ptr();
        let ones = _mm256_set1_epi16(1);
        let low = _mm256_set1_epi8(0x0f);
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        let mut mins = [[0.0f32; C]; R];
        for b in 0..nb {
            let mut wq = [_mm256_setzero_si256(); C];
            let mut dw = [_mm256_setzero_ps(); C];
            let mut mw = [0.0f32; C];
            for c in 0..C {
                // SAFETY: weight row j0 + c < w.rows and block b < nb.
                unsafe {
                    let blk = wp.add(((j0 + c) * nb + b) * bb);
                    dw[c] = _mm256_set1_ps(f16_at(blk));
                    if q4 {
                        mw[c] = f16_at(blk.add(2));
                        let raw = _mm_loadu_si128(blk.add(4) as *const __m128i);
                        let both = _mm256_set_m128i(_mm_srli_epi16::<4>(raw), raw);
                        wq[c] = _mm256_and_si256(both, low);
                    } else {
                        wq[c] = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                    }
                }
            }
            for r in 0..R {
                let row = i0 + r;
                // SAFETY: row < a.rows and block b < nb.
                let aq = unsafe { _mm256_loadu_si256(ap.add(row * k + b * QK) as *const __m256i) };
                let da = _mm256_set1_ps(a.d[row * nb + b]);
                let sa = a.s[row * nb + b];
                for c in 0..C {
                    let p16 = if q4 {
                        _mm256_maddubs_epi16(wq[c], aq)
                    } else {
                        _mm256_maddubs_epi16(_mm256_sign_epi8(wq[c], wq[c]), _mm256_sign_epi8(aq, wq[c]))
                    };
                    let p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                    acc[r][c] = _mm256_fmadd_ps(_mm256_mul_ps(dw[c], da), p, acc[r][c]);
                    if q4 {
                        mins[r][c] += mw[c] * sa;
                    }
                }
            }
        }
        for r in 0..R {
            for c in 0..C {
                let s = hsum(acc[r][c]);
                out[(i0 + r) * width + (j0 + c - c0)] = if q4 { s + mins[r][c] } else { s };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[path = "q8_panel.rs"]
mod panel;

#[cfg(test)]
#[path = "q8_tests.rs"]
mod tests;
