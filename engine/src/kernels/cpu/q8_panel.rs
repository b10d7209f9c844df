//! The AVX2 q8 kernel for many rows (prefill): a column block's weights are
//! unpacked once into a panel (quants as bytes, block scales and minimums as
//! f32), then every group of four rows reads the panel from cache. The Q4_1
//! minimum terms are summed apart, eight columns at a time, each lane in block
//! order with unfused multiply and add. Every output is the same operation
//! sequence as in the module doc of `q8` (same lanes, same order), so results
//! are bit-identical to the in-place AVX2 tiles and to the scalar path.

use super::avx2::f16_at;
use super::{Q8Rows, QK, QuantKind, QuantMatrix};
use crate::kernels::cpu::matmul::avx2::hsum;
use std::arch::x86_64::*;

/// Weights of columns `c0..c1`, unpacked.
struct Panel {
    width: usize,
    nb: usize,
    /// `[width][k]` quants: Q4_1 nibbles (0..15) or Q8_0 bytes (i8 bits).
    qs: Vec<u8>,
    /// `[width][nb]` block scales.
    d: Vec<f32>,
    /// `[nb][width]` Q4_1 block minimums (empty for Q8_0).
    m: Vec<f32>,
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn unpack(w: &QuantMatrix, c0: usize, c1: usize) -> Panel {
    let (k, width) = (w.cols, c1 - c0);
    let nb = k / QK;
    let bb = w.kind.block_bytes();
    let q4 = w.kind == QuantKind::Q4_1;
    let mut p = Panel {
        width,
        nb,
        qs: vec![0; width * k],
        d: vec![0.0; width * nb],
        m: if q4 { vec![0.0; nb * width] } else { Vec::new() },
    };
    for c in 0..width {
        let row = &w.data[(c0 + c) * nb * bb..(c0 + c + 1) * nb * bb];
        for (b, blk) in row.chunks_exact(bb).enumerate() {
            // SAFETY: blk holds a whole block.
            p.d[c * nb + b] = unsafe { f16_at(blk.as_ptr()) };
            let q = &mut p.qs[c * k + b * QK..c * k + (b + 1) * QK];
            if q4 {
                // SAFETY: as above.
                p.m[b * width + c] = unsafe { f16_at(blk.as_ptr().add(2)) };
                for (e, &byte) in blk[4..20].iter().enumerate() {
                    (q[e], q[e + 16]) = (byte & 0x0f, byte >> 4);
                }
            } else {
                q.copy_from_slice(&blk[2..34]);
            }
        }
    }
    p
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn block(a: &Q8Rows, w: &QuantMatrix, c0: usize, c1: usize, out: &mut [f32]) {
    // SAFETY: same features as this function.
    let p = unsafe { unpack(w, c0, c1) };
    let q4 = w.kind == QuantKind::Q4_1;
    let (m, width) = (a.rows, p.width);
    let mut i = 0;
    while i < m {
        let rows = (m - i).min(4);
        let mut j = 0;
        while j < width {
            let cols = (width - j).min(2);
            // SAFETY: rows i..i+rows and panel columns j..j+cols exist.
            unsafe {
                match (rows, cols) {
                    (4, 2) => tile::<4, 2>(a, &p, q4, i, j, out),
                    (4, 1) => tile::<4, 1>(a, &p, q4, i, j, out),
                    (3, 2) => tile::<3, 2>(a, &p, q4, i, j, out),
                    (3, 1) => tile::<3, 1>(a, &p, q4, i, j, out),
                    (2, 2) => tile::<2, 2>(a, &p, q4, i, j, out),
                    (2, 1) => tile::<2, 1>(a, &p, q4, i, j, out),
                    (1, 2) => tile::<1, 2>(a, &p, q4, i, j, out),
                    _ => tile::<1, 1>(a, &p, q4, i, j, out),
                }
            }
            j += cols;
        }
        i += rows;
    }
    if q4 {
        // SAFETY: same features as this function.
        unsafe { add_minimums(a, &p, out) };
    }
}

/// `out[r][c] += Σ_b m[c][b] · s[r][b]`, the sum in block order with unfused
/// multiply and add (the scalar path's `mins`), eight columns per vector.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn add_minimums(a: &Q8Rows, p: &Panel, out: &mut [f32]) {
    let (nb, width) = (p.nb, p.width);
    for r in 0..a.rows {
        let s = &a.s[r * nb..(r + 1) * nb];
        let o = &mut out[r * width..(r + 1) * width];
        let mut c = 0;
        while c + 8 <= width {
            let mut acc = _mm256_setzero_ps();
            for (b, &sb) in s.iter().enumerate() {
                // SAFETY: b * width + c + 8 <= nb * width.
                let mv = unsafe { _mm256_loadu_ps(p.m.as_ptr().add(b * width + c)) };
                acc = _mm256_add_ps(acc, _mm256_mul_ps(mv, _mm256_set1_ps(sb)));
            }
            let mut lanes = [0.0f32; 8];
            // SAFETY: lanes holds eight floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), acc) };
            for (ov, l) in o[c..c + 8].iter_mut().zip(lanes) {
                *ov += l;
            }
            c += 8;
        }
        for (cc, ov) in o.iter_mut().enumerate().skip(c) {
            let mut mins = 0.0f32;
            for (b, &sb) in s.iter().enumerate() {
                mins += p.m[b * width + cc] * sb;
            }
            *ov += mins;
        }
    }
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const R: usize, const C: usize>(a: &Q8Rows, p: &Panel, q4: bool, i0: usize, j0: usize, out: &mut [f32]) {
    let (k, nb, width) = (a.cols, p.nb, p.width);
    let (wp, ap) = (p.qs.as_ptr(), a.qs.as_ptr());
    let ones = _mm256_set1_epi16(1);
    let mut acc = [[_mm256_setzero_ps(); C]; R];
    for b in 0..nb {
        let mut wq = [_mm256_setzero_si256(); C];
        let mut wabs = [_mm256_setzero_si256(); C];
        let mut dw = [_mm256_setzero_ps(); C];
        for c in 0..C {
            // SAFETY: panel column j0 + c < width, block b < nb.
            wq[c] = unsafe { _mm256_loadu_si256(wp.add((j0 + c) * k + b * QK) as *const __m256i) };
            if !q4 {
                wabs[c] = _mm256_sign_epi8(wq[c], wq[c]);
            }
            dw[c] = _mm256_set1_ps(p.d[(j0 + c) * nb + b]);
        }
        for (r, accr) in acc.iter_mut().enumerate() {
            let row = i0 + r;
            // SAFETY: row < a.rows, block b < nb.
            let aq = unsafe { _mm256_loadu_si256(ap.add(row * k + b * QK) as *const __m256i) };
            let da = _mm256_set1_ps(a.d[row * nb + b]);
            for (c, accv) in accr.iter_mut().enumerate() {
                let p16 = if q4 {
                    _mm256_maddubs_epi16(wq[c], aq)
                } else {
                    _mm256_maddubs_epi16(wabs[c], _mm256_sign_epi8(aq, wq[c]))
                };
                let pf = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
                *accv = _mm256_fmadd_ps(_mm256_mul_ps(dw[c], da), pf, *accv);
            }
        }
    }
    for (r, accr) in acc.iter().enumerate() {
        for (c, accv) in accr.iter().enumerate() {
            out[(i0 + r) * width + j0 + c] = hsum(*accv);
        }
    }
}
