//! The AMX-INT8 q8 kernel: activation-quantized matmuls of sixteen rows and
//! more (prefill) on AMX tiles, over the 16-row interleaved weights of
//! `q8_pack` that the AVX-512 kernels read, with the same integers and the
//! same float steps (`q8`'s module doc), so bit-identical to every other path.
//!
//! Per task (a column block of whole groups of sixteen weight rows), each
//! group's blocks are first widened into B tiles (`b_tiles`): per block, 8
//! rows of 64 signed bytes, row t holding elements 4t..4t+4 of the group's
//! sixteen weight rows. That is the packed layout's chunks with the Q4_0/Q4_1
//! nibbles split into bytes (low nibbles give rows 0..4, high nibbles rows
//! 4..8; Q4_0's less 8, its weights `q - 8`; Q5_0's with their fifth bits,
//! less 16) and Q8_0's +128 offset taken off again. Then, for each tile of
//! sixteen activation rows and each group, block by block in ascending order:
//! `tdpbssd` of the rows' 32 quants of the block (an A tile read in place from
//! `Q8Rows::qs`, one row of the matrix apart) with the block's B tile gives
//! the exact integer sums `I_b` of 16 x 16 outputs; they are stored to a small
//! buffer, and AVX-512 does the float step for the sixteen rows, one vector of
//! sixteen weight rows each: `acc = fma(d_w·d_a, I_b, acc)`. Two C tiles
//! alternate between blocks, and block b + 1's product is issued before block
//! b's tile is stored, so the tile unit computes one block while the vector
//! units scale the one before. The Q4_1 minimums take a second pass over the blocks
//! (`mins = fma(m_w, s_a, mins)`), and the result is `acc + mins`, as on every
//! path. Activation rows beyond the last whole tile of sixteen take the
//! AVX-512 kernel.
//!
//! Q4_K and Q6_K (repacked) take the AVX-512 kernel for every row.
//!
//! Tiles: 0 and 1 are C (16 rows of 16 i32), 2 and 3 A (16 rows of 32
//! bytes), 4 and 5 B (8 rows of 64 bytes); even blocks use 0/2/4, odd 1/3/5.

use super::avx512;
use super::{Q8Rows, QK, QuantKind};
use crate::kernels::cpu::amx::{TileConfig, Tiles};
use crate::kernels::cpu::q8_pack::{GROUP_ROWS, Packed};
use crate::kernels::cpu::team::ScatterBlock;
use std::arch::x86_64::*;

/// Activation rows per tile.
pub(super) const TILE_ROWS: usize = 16;

/// Bytes of one block's B tile: 8 rows of sixteen weight rows x 4 bytes.
const B_TILE_BYTES: usize = 8 * 64;

/// One C tile stored: sixteen rows of sixteen i32 (or f32).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct TileBuf([[i32; GROUP_ROWS]; TILE_ROWS]);

/// Columns `c0..c1` (`c0` a multiple of 16) of `a · Wᵀ` into `out`
/// (`[a.rows, c1 - c0]`).
///
/// # Safety
/// The CPU must run the `amx` path (AVX-512 F/BW/VL, VNNI, AMX-INT8 usable).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn block(a: &Q8Rows, p: &Packed, c0: usize, c1: usize, out: &mut ScatterBlock<'_, f32>) {
    assert!(c0.is_multiple_of(GROUP_ROWS) && c1 <= p.rows && a.cols == p.cols);
    assert!(out.rows() == a.rows && out.width() == c1 - c0);
    // Q4_K and Q6_K have no tile kernel (Q4_K's scales are products formed
    // per block, Q6_K's two per block): every row takes the AVX-512 kernel.
    if matches!(p.kind, QuantKind::Q4K | QuantKind::Q6K) {
        // SAFETY: the caller guarantees the features.
        return unsafe { avx512::block_rows(a, p, 0, a.rows, c0, c1, out) };
    }
    let whole = a.rows / TILE_ROWS * TILE_ROWS;
    if whole > 0 {
        // SAFETY: the caller guarantees the features and AMX.
        unsafe { tiles(a, p, whole, c0, c1, out) };
    }
    if whole < a.rows {
        // SAFETY: same features.
        unsafe { avx512::block_rows(a, p, whole, a.rows, c0, c1, out) };
    }
}

/// The B tiles of groups `g0..g1`, `[group][block][8 rows][64 bytes]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
fn b_tiles(p: &Packed, g0: usize, g1: usize) -> Vec<u8> {
    let (nb, gb, qo) = (p.nb, Packed::group_block_bytes(p.kind), Packed::quants_offset(p.kind));
    assert!(g1 <= p.groups);
    let mut out = vec![0u8; (g1 - g0) * nb * B_TILE_BYTES];
    let low = _mm512_set1_epi8(0x0f);
    let offset = _mm512_set1_epi8(-128);
    for g in g0..g1 {
        for b in 0..nb {
            let src = &p.data[(g * nb + b) * gb + qo..(g * nb + b + 1) * gb];
            let at = ((g - g0) * nb + b) * B_TILE_BYTES;
            let dst = &mut out[at..at + B_TILE_BYTES];
            // SAFETY: `src` holds the block's 4 (Q4_0, Q4_1, Q5_0) or 8 (Q8_0)
            // chunks of 64 bytes (Q5_0's 64 bytes of fifth bits come right
            // before them in the same group block of p.data) and `dst` 8 rows
            // of 64 bytes; every access is in bounds.
            unsafe {
                let load = |t: usize| _mm512_loadu_si512(src.as_ptr().add(64 * t) as *const _);
                let d = dst.as_mut_ptr();
                match p.kind {
                    QuantKind::Q4_0 | QuantKind::Q4_1 | QuantKind::Q5_0 | QuantKind::Q4K => {
                        let off = _mm512_set1_epi8(p.kind.nibble_offset() as i8);
                        for t in 0..4 {
                            let w = load(t);
                            let (mut lo, mut hi) =
                                (_mm512_and_si512(w, low), _mm512_and_si512(_mm512_srli_epi16::<4>(w), low));
                            if p.kind == QuantKind::Q5_0 {
                                // The chunk's fifth bits lie before the nibbles (q8_pack).
                                let (hl, hh) = avx512::q5_fifth_bits(src.as_ptr().sub(64).add(16 * t));
                                (lo, hi) = (_mm512_or_si512(lo, hl), _mm512_or_si512(hi, hh));
                            }
                            _mm512_storeu_si512(d.add(64 * t) as *mut _, _mm512_sub_epi8(lo, off));
                            _mm512_storeu_si512(d.add(64 * (4 + t)) as *mut _, _mm512_sub_epi8(hi, off));
                        }
                    }
                    QuantKind::Q6K => unreachable!("Q6_K takes the AVX-512 kernel"),
                    QuantKind::Q8_0 => {
                        for t in 0..8 {
                            _mm512_storeu_si512(d.add(64 * t) as *mut _, _mm512_xor_si512(load(t), offset));
                        }
                    }
                }
            }
        }
    }
    out
}

/// Activation rows `0..rows` (a multiple of [`TILE_ROWS`]) of columns `c0..c1`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tiles(a: &Q8Rows, p: &Packed, rows: usize, c0: usize, c1: usize, out: &mut ScatterBlock<'_, f32>) {
    let (k, nb) = (a.cols, p.nb);
    assert!(rows.is_multiple_of(TILE_ROWS) && rows <= a.rows && k == nb * QK);
    let gb = Packed::group_block_bytes(p.kind);
    let (g0, g1, width) = (c0 / GROUP_ROWS, c1.div_ceil(GROUP_ROWS), c1 - c0);
    let has_mins = p.kind == QuantKind::Q4_1;
    let bt = b_tiles(p, g0, g1);
    let config = TileConfig::default()
        .with_tile(0, 16, 64)
        .with_tile(1, 16, 64)
        .with_tile(2, 16, QK as u16)
        .with_tile(3, 16, QK as u16)
        .with_tile(4, 8, 64)
        .with_tile(5, 8, 64);
    let mut c = [TileBuf([[0; GROUP_ROWS]; TILE_ROWS]); 2];
    let cp: [*mut i32; 2] = {
        let [x, y] = &mut c;
        [x.0.as_mut_ptr() as *mut i32, y.0.as_mut_ptr() as *mut i32]
    };
    let mut res = TileBuf([[0; GROUP_ROWS]; TILE_ROWS]);
    let rp = res.0.as_mut_ptr() as *mut f32;
    let (dp, sp) = (a.d.as_ptr(), a.s.as_ptr());
    // SAFETY: the caller guarantees AMX; the tiles are released when `t` drops.
    let t = unsafe { Tiles::load(&config) };
    for i0 in (0..rows).step_by(TILE_ROWS) {
        let ap = a.qs[i0 * k..].as_ptr() as *const u8;
        for g in g0..g1 {
            let scales = p.data[g * nb * gb..].as_ptr();
            let bg = bt[(g - g0) * nb * B_TILE_BYTES..].as_ptr();
            let mut acc = [_mm512_setzero_ps(); TILE_ROWS];
            // SAFETY (this loop): A tile rows i0..i0+16 < a.rows, bytes b*32..
            // b*32+32 < k of each; B tile b of group g lies in `bt`; C tiles are
            // stored to the 1 KiB buffers `cp`; scale reads are block b < nb of
            // group g < p.groups, and activation scales rows < a.rows.
            unsafe {
                // Block b + 1's product is issued before block b's tile is
                // stored, so the tile unit computes it while the vector units
                // scale block b (a store right behind its own product waits out
                // the product's whole latency).
                let issue = |b: usize| {
                    if b.is_multiple_of(2) {
                        t.zero::<0>();
                        t.load_tile::<2>(ap.add(b * QK), k);
                        t.load_tile::<4>(bg.add(b * B_TILE_BYTES), 64);
                        t.dpbssd::<0, 2, 4>();
                    } else {
                        t.zero::<1>();
                        t.load_tile::<3>(ap.add(b * QK), k);
                        t.load_tile::<5>(bg.add(b * B_TILE_BYTES), 64);
                        t.dpbssd::<1, 3, 5>();
                    }
                };
                issue(0);
                for b in 0..nb {
                    if b + 1 < nb {
                        issue(b + 1);
                    }
                    let cb = cp[b % 2];
                    if b % 2 == 0 {
                        t.store_tile::<0>(cb as *mut u8, 64);
                    } else {
                        t.store_tile::<1>(cb as *mut u8, 64);
                    }
                    let dw = _mm512_cvtph_ps(_mm256_loadu_si256(scales.add(b * gb) as *const __m256i));
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let da = _mm512_set1_ps(*dp.add((i0 + r) * nb + b));
                        let i = _mm512_cvtepi32_ps(_mm512_load_si512(cb.add(r * GROUP_ROWS) as *const _));
                        *acc = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), i, *acc);
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    _mm512_store_ps(rp.add(r * GROUP_ROWS), *acc);
                }
                if has_mins {
                    let mut mins = [_mm512_setzero_ps(); TILE_ROWS];
                    for b in 0..nb {
                        let mw = _mm512_cvtph_ps(_mm256_loadu_si256(scales.add(b * gb + 32) as *const __m256i));
                        for (r, mins) in mins.iter_mut().enumerate() {
                            *mins = _mm512_fmadd_ps(mw, _mm512_set1_ps(*sp.add((i0 + r) * nb + b)), *mins);
                        }
                    }
                    for (r, mins) in mins.iter().enumerate() {
                        let y = _mm512_add_ps(_mm512_load_ps(rp.add(r * GROUP_ROWS)), *mins);
                        _mm512_store_ps(rp.add(r * GROUP_ROWS), y);
                    }
                }
            }
            let col = g * GROUP_ROWS - c0;
            let n = (width - col).min(GROUP_ROWS);
            for r in 0..TILE_ROWS {
                // SAFETY: `res` holds sixteen rows of sixteen f32 (stored above).
                let row = unsafe { std::slice::from_raw_parts(rp.add(r * GROUP_ROWS), n) };
                out.row(i0 + r)[col..col + n].copy_from_slice(row);
            }
        }
    }
    drop(t);
}
