//! The AVX2 q8 kernel for many rows (prefill) as GEMM tiles: a column block's
//! weights are first interleaved into a panel, eight weight rows per group,
//! in 4-element chunks (`[group][block][chunk 0..8][row 0..8][4 bytes]`, Q4_0
//! and Q4_1 nibbles and Q5_0's five bits widened to bytes), with block scales
//! and minimums as f32. A tile of
//! `R` activation rows by `G` groups then broadcasts four activation bytes per
//! row and multiplies them with one 32-byte load per group (`maddubs`), so one
//! instruction does four multiply-adds for each of eight weight rows and the
//! integer sums of a block land per weight row in one vector, with no
//! horizontal reduction. Nibble products are summed in i16 over a whole block
//! (at most 8 · 2 · 15 · 127 = 30480, no overflow), Q5_0 (up to 31) and Q8_0
//! ones in i32; Q4_0 then takes `8 · Σa` off the block's sum (its weights are
//! `q - 8`), Q5_0 `16 · Σa`.
//!
//! Every output is the module doc's formula of `q8` (same integer `I_b`, same
//! float steps in the same order), so results are bit-identical to the
//! in-place AVX2 kernel and to the scalar path, for any tile shape.

use super::{Q8Rows, QK, QuantKind, QuantMatrix, kind_id, q5_high, q6k_quant, q6k_scale};
use crate::kernels::cpu::team::ScatterBlock;
use std::arch::x86_64::*;

/// Bytes of one group's block in the panel: 8 rows x 32 quants.
const GROUP_BLOCK: usize = 8 * QK;

/// Weights of columns `c0..c1`, interleaved.
struct Panel {
    groups: usize,
    nb: usize,
    /// `[group][block][chunk][row][4]` quants: Q4_0/Q4_1 nibbles (0..15), Q5_0
    /// five-bit values (0..31) or Q8_0 bytes.
    qs: Vec<u8>,
    /// `[group][block][row]` block scales (0 for padding rows).
    d: Vec<f32>,
    /// `[group][block][row]` Q4_1 block minimums (empty for Q8_0).
    m: Vec<f32>,
    /// `[group][block][half][row]` Q6_K sub-block scales (empty otherwise).
    sc: Vec<i32>,
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn interleave(w: &QuantMatrix, c0: usize, c1: usize) -> Panel {
    let (k, width) = (w.cols, c1 - c0);
    let nb = k / QK;
    let bb = w.kind.block_bytes();
    let (q4, has_mins, qat) = (w.kind.nibbles(), w.kind.has_mins(), w.kind.quants_at());
    let groups = width.div_ceil(8);
    let mut p = Panel {
        groups,
        nb,
        qs: vec![0; groups * nb * GROUP_BLOCK],
        d: vec![0.0; groups * nb * 8],
        m: if has_mins { vec![0.0; groups * nb * 8] } else { Vec::new() },
        sc: if w.kind == QuantKind::Q6K { vec![0; groups * nb * 16] } else { Vec::new() },
    };
    let mut elems = [0u8; QK];
    for c in 0..width {
        let (g, lane) = (c / 8, c % 8);
        let row = &w.data()[(c0 + c) * nb * bb..(c0 + c + 1) * nb * bb];
        for (b, blk) in row.chunks_exact(bb).enumerate() {
            let at = (g * nb + b) * 8 + lane;
            let (d, m) = w.kind.scales(blk);
            p.d[at] = d;
            if has_mins {
                p.m[at] = m;
            }
            if w.kind == QuantKind::Q6K {
                for (e, v) in elems.iter_mut().enumerate() {
                    *v = q6k_quant(blk, e);
                }
                for h in 0..2 {
                    p.sc[((g * nb + b) * 2 + h) * 8 + lane] = q6k_scale(blk, h);
                }
            } else if q4 {
                let q5 = w.kind == QuantKind::Q5_0;
                let high = |e: usize| if q5 { q5_high(blk, e) } else { 0 };
                for (e, &byte) in blk[qat..qat + 16].iter().enumerate() {
                    (elems[e], elems[e + 16]) = ((byte & 0x0f) | high(e), (byte >> 4) | high(e + 16));
                }
            } else {
                elems.copy_from_slice(&blk[2..34]);
            }
            let base = (g * nb + b) * GROUP_BLOCK + lane * 4;
            for t in 0..8 {
                p.qs[base + t * 32..base + t * 32 + 4].copy_from_slice(&elems[4 * t..4 * t + 4]);
            }
        }
    }
    p
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn block(a: &Q8Rows, w: &QuantMatrix, c0: usize, c1: usize, out: &mut ScatterBlock<'_, f32>) {
    // SAFETY: same features as this function.
    let p = unsafe { interleave(w, c0, c1) };
    let kind = w.kind.id();
    assert!(out.rows() == a.rows && out.width() == c1 - c0);
    let mut sums = vec![_mm256_setzero_si256(); ROWS * GROUPS * p.nb];
    let mut i = 0;
    while i < a.rows {
        let rows = (a.rows - i).min(ROWS);
        let mut g = 0;
        while g < p.groups {
            let gs = (p.groups - g).min(GROUPS);
            let s = &mut sums;
            // SAFETY: rows i..i+rows and groups g..g+gs exist.
            unsafe {
                macro_rules! go {
                    ($($r:literal, $g:literal);*) => {
                        match (rows, gs, kind) {
                            $(
                                ($r, $g, kind_id::Q4_0) => tile::<$r, $g, { kind_id::Q4_0 }>(a, &p, i, g, out, s),
                                ($r, $g, kind_id::Q4_1) => tile::<$r, $g, { kind_id::Q4_1 }>(a, &p, i, g, out, s),
                                ($r, $g, kind_id::Q5_0) => tile::<$r, $g, { kind_id::Q5_0 }>(a, &p, i, g, out, s),
                                ($r, $g, kind_id::Q4K) => tile::<$r, $g, { kind_id::Q4K }>(a, &p, i, g, out, s),
                                ($r, $g, kind_id::Q6K) => tile::<$r, $g, { kind_id::Q6K }>(a, &p, i, g, out, s),
                                ($r, $g, _) => tile::<$r, $g, { kind_id::Q8_0 }>(a, &p, i, g, out, s),
                            )*
                            _ => unreachable!("tile {rows}x{gs}"),
                        }
                    };
                }
                go!(4, 2; 4, 1; 3, 2; 3, 1; 2, 2; 2, 1; 1, 2; 1, 1)
            }
            g += gs;
        }
        i += rows;
    }
}

/// Rows and groups of eight weight rows per tile: 4 x 2 keeps the eight
/// integer sums, two weight vectors and a broadcast in registers.
const ROWS: usize = 4;
const GROUPS: usize = 2;

/// Phase 1 sums every block's integers into `sums` (`[block][row][group]`,
/// i32 lanes) with nothing but integer work in the loop; phase 2 does the
/// float steps per row, blocks ascending, and stores.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile<const R: usize, const G: usize, const KIND: u8>(
    a: &Q8Rows,
    p: &Panel,
    i0: usize,
    g0: usize,
    out: &mut ScatterBlock<'_, f32>,
    sums: &mut [__m256i],
) {
    // Nibbles sum in i16 over the block; Q5_0 (up to 31) and Q8_0 in i32.
    let i16_sums = KIND == kind_id::Q4_0 || KIND == kind_id::Q4_1 || KIND == kind_id::Q4K;
    let has_mins = KIND == kind_id::Q4_1 || KIND == kind_id::Q4K;
    let offset = match KIND {
        kind_id::Q4_0 => 8,
        kind_id::Q5_0 => 16,
        _ => 0,
    };
    let (k, nb) = (a.cols, p.nb);
    let (wp, ap) = (p.qs.as_ptr(), a.qs.as_ptr());
    let ones = _mm256_set1_epi16(1);
    assert!(sums.len() >= nb * R * G);
    let q6 = KIND == kind_id::Q6K;
    let half_sums = if q6 { a.half_sums() } else { &[] };
    for b in 0..nb {
        let mut s = [[_mm256_setzero_si256(); G]; R];
        // Q6_K: the first half block's sums, kept apart from the second's.
        let mut s_lo = [[_mm256_setzero_si256(); G]; R];
        for t in 0..8 {
            if q6 && t == 4 {
                (s_lo, s) = (s, [[_mm256_setzero_si256(); G]; R]);
            }
            let mut wq = [_mm256_setzero_si256(); G];
            for (g, v) in wq.iter_mut().enumerate() {
                // SAFETY: group g0 + g < groups, block b < nb, chunk t < 8.
                *v =
                    unsafe { _mm256_loadu_si256(wp.add(((g0 + g) * nb + b) * GROUP_BLOCK + t * 32) as *const __m256i) };
            }
            for (r, sr) in s.iter_mut().enumerate() {
                // SAFETY: row i0 + r < a.rows, block b < nb, chunk t < 8.
                let four = unsafe { (ap.add((i0 + r) * k + b * QK + 4 * t) as *const i32).read_unaligned() };
                let av = _mm256_set1_epi32(four);
                for (g, sv) in sr.iter_mut().enumerate() {
                    *sv = if i16_sums {
                        _mm256_add_epi16(*sv, _mm256_maddubs_epi16(wq[g], av))
                    } else if KIND == kind_id::Q5_0 || q6 {
                        _mm256_add_epi32(*sv, _mm256_madd_epi16(_mm256_maddubs_epi16(wq[g], av), ones))
                    } else {
                        let pr = _mm256_maddubs_epi16(_mm256_sign_epi8(wq[g], wq[g]), _mm256_sign_epi8(av, wq[g]));
                        _mm256_add_epi32(*sv, _mm256_madd_epi16(pr, ones))
                    };
                }
            }
        }
        if q6 {
            // I = sc_0·(Σ q·a - 32·Σa) over the first half + sc_1·(...) over the second.
            for r in 0..R {
                let at = ((i0 + r) * nb + b) * 2;
                let (a0, a1) = (32 * half_sums[at], 32 * half_sums[at + 1]);
                for g in 0..G {
                    let sc = ((g0 + g) * nb + b) * 16;
                    // SAFETY: (group, block) lies inside p.sc.
                    let (sc0, sc1) = unsafe {
                        (
                            _mm256_loadu_si256(p.sc.as_ptr().add(sc) as *const __m256i),
                            _mm256_loadu_si256(p.sc.as_ptr().add(sc + 8) as *const __m256i),
                        )
                    };
                    let lo = _mm256_mullo_epi32(_mm256_sub_epi32(s_lo[r][g], _mm256_set1_epi32(a0)), sc0);
                    let hi = _mm256_mullo_epi32(_mm256_sub_epi32(s[r][g], _mm256_set1_epi32(a1)), sc1);
                    sums[(b * R + r) * G + g] = _mm256_add_epi32(lo, hi);
                }
            }
            continue;
        }
        for (r, sr) in s.iter().enumerate() {
            // Q4_0: Σ (q - 8)·a = Σ q·a - 8·Σa; Q5_0 likewise with 16.
            let off = _mm256_set1_epi32(offset * a.sums[(i0 + r) * nb + b]);
            for (g, sv) in sr.iter().enumerate() {
                let i = if i16_sums { _mm256_madd_epi16(*sv, ones) } else { *sv };
                sums[(b * R + r) * G + g] = _mm256_sub_epi32(i, off);
            }
        }
    }
    for r in 0..R {
        let row = i0 + r;
        let mut acc = [_mm256_setzero_ps(); G];
        let mut mins = [_mm256_setzero_ps(); G];
        for b in 0..nb {
            let da = _mm256_set1_ps(a.d[row * nb + b]);
            let sa = _mm256_set1_ps(a.s[row * nb + b]);
            for g in 0..G {
                let at = ((g0 + g) * nb + b) * 8;
                // SAFETY: (group, block) lies inside p.d (and p.m for Q4_1).
                unsafe {
                    let dw = _mm256_loadu_ps(p.d.as_ptr().add(at));
                    let i = _mm256_cvtepi32_ps(sums[(b * R + r) * G + g]);
                    acc[g] = _mm256_fmadd_ps(_mm256_mul_ps(dw, da), i, acc[g]);
                    if has_mins {
                        mins[g] = _mm256_fmadd_ps(_mm256_loadu_ps(p.m.as_ptr().add(at)), sa, mins[g]);
                    }
                }
            }
        }
        for g in 0..G {
            let y = if has_mins { _mm256_add_ps(acc[g], mins[g]) } else { acc[g] };
            let mut lanes = [0.0f32; 8];
            // SAFETY: lanes holds eight floats.
            unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), y) };
            let c = (g0 + g) * 8;
            let n = (out.width() - c).min(8);
            out.row(row)[c..c + n].copy_from_slice(&lanes[..n]);
        }
    }
}
