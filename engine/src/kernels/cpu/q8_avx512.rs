//! The AVX-512 VNNI q8 kernel, for every number of rows (decode and prefill),
//! over the 16-row interleaved layout of `q8_pack`. A tile of `R` activation
//! rows by `G` groups of sixteen weight rows walks the blocks in ascending
//! order; per block and 4-element chunk it loads 64 weight bytes per group,
//! broadcasts four activation bytes per row and accumulates with `vpdpbusd`
//! (u8 x i8, four products per i32 lane), so the block's integer sums land one
//! per weight row in a vector. Q4_0 and Q4_1 nibbles (0..15) are the
//! unsigned side directly, and so are Q5_0's five bits (0..31: the nibbles
//! or-ed with the fifth bits, spread to bit 4 of each byte by a 16-entry
//! table lookup, `vpermd`); Q8_0 weights are stored offset by 128, and
//! `128 · Σa` (the activation block's exact integer sum) is subtracted, as
//! `8 · Σa` is for Q4_0 (whose weights are `q - 8`) and `16 · Σa` for Q5_0.
//! Q4_K's block scale and minimum are the products `d · sc` and `-(dmin ·
//! m)` of its repacked fields, formed in f32 as the scalar path forms them.
//! Q6_K (`tile_q6k`, a loop of its own so that the other kinds' code stays as
//! it was) or-s the nibbles with bits 4 and 5 (the same table); each half
//! block's products are summed apart, offset by `32 · Σa` over the half, and
//! multiplied by the half's scale (`vpmulld`). Then the float steps
//! of `q8`'s module doc, sixteen weight rows per vector: one product of the
//! scales, one FMA (and one for the Q4_1 minimums). Same integers, same float
//! operations in the same order: bit-identical to the scalar and AVX2 paths.
//!
//! Decode (one row) uses four groups per tile and two accumulators per group,
//! so eight independent `vpdpbusd` chains hide its latency; more rows use
//! eight rows by one group: each weight load serves eight rows, and each
//! activation broadcast has one use, so it folds into `vpdpbusd`'s memory
//! operand (`{1to16}`) instead of a register. On an AMD Zen 4, 4 rows x 2
//! groups (eight broadcasts held in registers across the two groups) spilled
//! accumulators to the stack every block: 8 x 1 prefills 512 tokens 1.06x
//! faster on Q4_1, 1.11x on Q4_K_M (alternated `engine bench`); 12 x 1
//! 0.97x of 8 x 1.

use super::{Q8Rows, QK, kind_id};
use crate::kernels::cpu::q8_pack::{GROUP_ROWS, Packed};
use crate::kernels::cpu::team::ScatterBlock;
use std::arch::x86_64::*;

/// How a tile prefetches its weights, chosen per call by whether the weights
/// are read once (streamed from memory) or re-read by every tile of rows.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Prefetch {
    /// Into L1, [`Prefetch::NEAR_BLOCKS`] group blocks ahead: a prefill's
    /// tiles of rows re-read a thread's slice of the matrix, which stays in
    /// L2 after the first tile, so only L1 misses are left to hide.
    Near,
    /// Into L2, [`Prefetch::STREAM_BLOCKS`] group blocks ahead: one tile of
    /// rows (decode, batches up to eight) reads the matrix once, from memory,
    /// and a few blocks ahead is too close to cover DRAM latency. On an AMD
    /// Zen 4 with 32 MiB L3 (the weights never stay in it), alternated
    /// `engine bench` decode at batch 1: 4 blocks into L1 164 tok/s median,
    /// 64 into L2 209 (8 of 8 rounds faster); 32 to 128 blocks all within a
    /// few percent of each other, prefetching nothing 6-10% below 4 into L1.
    /// An 8 x 1 tile reads its slice once too: a prefill of 8 tokens (the
    /// shape of a batch-8 decode step's linear layers) with `Near` instead
    /// measured 0.936x (1 of 10 rounds faster), of 6 tokens 0.983x (5 of 10).
    Stream,
}

impl Prefetch {
    const NEAR_BLOCKS: usize = 4;
    const STREAM_BLOCKS: usize = 64;

    /// The one for rows `r0..r1` of `rows` read in tiles of `max_r` rows:
    /// `Stream` when this call reads the matrix once for all the rows (not
    /// for the rows left over after the AMX tiles, which just read it).
    fn for_rows(r0: usize, r1: usize, rows: usize, max_r: usize) -> Self {
        if r0 == 0 && r1 == rows && rows <= max_r { Self::Stream } else { Self::Near }
    }

    /// Prefetches the `gb` bytes of the group block that lies this many blocks
    /// after `block` (an address that may be past the matrix: prefetches
    /// never fault, and `wrapping_add` keeps the address defined).
    ///
    /// # Safety
    /// The CPU has the features of this module's kernels.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn ahead_of(self, block: *const u8, gb: usize) {
        let (hint_l1, ahead) = match self {
            Self::Near => (true, Self::NEAR_BLOCKS * gb),
            Self::Stream => (false, Self::STREAM_BLOCKS * gb),
        };
        let mut line = 0;
        while line < gb {
            let at = block.wrapping_add(ahead + line) as *const i8;
            if hint_l1 {
                _mm_prefetch::<_MM_HINT_T0>(at);
            } else {
                _mm_prefetch::<_MM_HINT_T1>(at);
            }
            line += 64;
        }
    }
}

/// Columns `c0..c1` (`c0` a multiple of 16) of `a · Wᵀ` into `out`
/// (`[a.rows, c1 - c0]`).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn block(a: &Q8Rows, p: &Packed, c0: usize, c1: usize, out: &mut ScatterBlock<'_, f32>) {
    // SAFETY: same features.
    unsafe { block_rows(a, p, 0, a.rows, c0, c1, out) }
}

/// As [`block`], for activation rows `r0..r1` only (`out` is still
/// `[a.rows, c1 - c0]`; other rows are left alone).
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn block_rows(
    a: &Q8Rows,
    p: &Packed,
    r0: usize,
    r1: usize,
    c0: usize,
    c1: usize,
    out: &mut ScatterBlock<'_, f32>,
) {
    assert!(c0.is_multiple_of(GROUP_ROWS) && c1 <= p.rows && a.cols == p.cols && r1 <= a.rows);
    assert!(out.rows() == a.rows && out.width() == c1 - c0);
    let g_end = c1.div_ceil(GROUP_ROWS);
    let kind = p.kind.id();
    let (max_r, max_g) = if r1 - r0 == 1 { (1, 4) } else { (8, 1) };
    let prefetch = Prefetch::for_rows(r0, r1, a.rows, max_r);
    let mut i = r0;
    while i < r1 {
        let rows = (r1 - i).min(max_r);
        let mut g = c0 / GROUP_ROWS;
        while g < g_end {
            let gs = (g_end - g).min(max_g);
            macro_rules! go {
                ($($r:literal, $g:literal);*) => {
                    match (rows, gs, kind) {
                        $(
                            ($r, $g, kind_id::Q4_0) => tile::<$r, $g, { kind_id::Q4_0 }>(a, p, i, g, c0, prefetch, out),
                            ($r, $g, kind_id::Q4_1) => tile::<$r, $g, { kind_id::Q4_1 }>(a, p, i, g, c0, prefetch, out),
                            ($r, $g, kind_id::Q5_0) => tile::<$r, $g, { kind_id::Q5_0 }>(a, p, i, g, c0, prefetch, out),
                            ($r, $g, kind_id::Q4K) => tile::<$r, $g, { kind_id::Q4K }>(a, p, i, g, c0, prefetch, out),
                            ($r, $g, kind_id::Q6K) => tile_q6k::<$r, $g>(a, p, i, g, c0, prefetch, out),
                            ($r, $g, _) => tile::<$r, $g, { kind_id::Q8_0 }>(a, p, i, g, c0, prefetch, out),
                        )*
                        _ => unreachable!("tile {rows}x{gs}"),
                    }
                };
            }
            // SAFETY: rows i..i+rows and groups g..g+gs exist; same features.
            unsafe { go!(1, 1; 1, 2; 1, 3; 1, 4; 2, 1; 3, 1; 4, 1; 5, 1; 6, 1; 7, 1; 8, 1) };
            g += gs;
        }
        i += rows;
    }
}

/// Stores the first `dst.len()` (1 to 16) lanes of `y` into `dst`, straight
/// from the register: a full group with one store, the last partial group of a
/// matrix with a masked one (lanes past `dst` are neither read nor written).
/// Replaces a copy through a stack array, whose variable length made it a
/// `memcpy` call per sixteen outputs (7% of a 512-token prefill on an AMD Zen 4).
///
/// # Safety
/// The CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn store_lanes(dst: &mut [f32], y: __m512) {
    let n = dst.len();
    assert!((1..=GROUP_ROWS).contains(&n), "store_lanes: {n} lanes");
    if n == GROUP_ROWS {
        // SAFETY: dst holds sixteen floats.
        unsafe { _mm512_storeu_ps(dst.as_mut_ptr(), y) }
    } else {
        // SAFETY: the mask selects the first n lanes, all inside dst; masked-out
        // lanes are not accessed.
        unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr(), ((1u32 << n) - 1) as u16, y) }
    }
}

/// The fifth bits of one Q5_0 chunk of a packed group (`p`: the chunk's
/// sixteen bytes, one per weight row), as bit 4 of each byte: for the
/// elements whose low bits are the chunk's low nibbles, then for those of
/// its high nibbles. Or-ed into the nibbles, they give the quants 0..31.
///
/// # Safety
/// `p` points at 16 readable bytes; the CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub(super) unsafe fn q5_fifth_bits(p: *const u8) -> (__m512i, __m512i) {
    // Entry x: bit e of x moved to bit 4 of byte e.
    let table = _mm512_setr_epi32(
        0x0000_0000,
        0x0000_0010,
        0x0000_1000,
        0x0000_1010,
        0x0010_0000,
        0x0010_0010,
        0x0010_1000,
        0x0010_1010,
        0x1000_0000,
        0x1000_0010,
        0x1000_1000,
        0x1000_1010,
        0x1010_0000,
        0x1010_0010,
        0x1010_1000,
        0x1010_1010,
    );
    // SAFETY: p holds 16 bytes.
    let h = _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(p as *const __m128i) });
    // vpermd reads the low four bits of each index lane.
    (_mm512_permutexvar_epi32(h, table), _mm512_permutexvar_epi32(_mm512_srli_epi32::<4>(h), table))
}

/// Sixteen unsigned bytes at `p` (one per weight row: Q4_K's sub-block
/// scales or minimums) as f32.
///
/// # Safety
/// `p` points at 16 readable bytes; the CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn q4k_byte_scales(p: *const u8) -> __m512 {
    // SAFETY: p holds 16 bytes.
    _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(p as *const __m128i) }))
}

/// [`tile`] for Q6_K (repacked): per block and half block, the six-bit
/// quants' products with the activations summed apart (`s0`: elements 0..16,
/// `s1`: 16..32), then `I = sc_0·(s0 - 32·Σa_0) + sc_1·(s1 - 32·Σa_1)` and
/// the float step `acc = fma(d·d_a, I, acc)`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_q6k<const R: usize, const G: usize>(
    a: &Q8Rows,
    p: &Packed,
    i0: usize,
    g0: usize,
    c0: usize,
    prefetch: Prefetch,
    out: &mut ScatterBlock<'_, f32>,
) {
    let (k, nb) = (a.cols, p.nb);
    let gb = Packed::group_block_bytes(p.kind);
    let qo = Packed::quants_offset(p.kind);
    let low = _mm512_set1_epi8(0x0f);
    let mut acc = [[_mm512_setzero_ps(); G]; R];
    let half_sums = a.half_sums();
    for b in 0..nb {
        // SAFETY (this block): as in `tile`; the bit planes lie at 64..192 of
        // each group block, the scales at 32..64, half sums at row·2nb + 2b.
        unsafe {
            let blk: [*const u8; G] = std::array::from_fn(|g| p.data.as_ptr().add(((g0 + g) * nb + b) * gb));
            let arow: [*const u8; R] = std::array::from_fn(|r| a.qs.as_ptr().add((i0 + r) * k + b * QK) as *const u8);
            for bp in blk {
                prefetch.ahead_of(bp, gb);
            }
            let bcast = |r: usize, e: usize| _mm512_set1_epi32((arow[r].add(e) as *const i32).read_unaligned());
            let mut s0 = [[_mm512_setzero_si512(); G]; R];
            let mut s1 = [[_mm512_setzero_si512(); G]; R];
            for t in 0..4 {
                for g in 0..G {
                    let w = _mm512_loadu_si512(blk[g].add(qo + 64 * t) as *const _);
                    // Bit 4 from the fifth-bit table, bit 5 from it shifted once.
                    let (l4, h4) = q5_fifth_bits(blk[g].add(64 + 32 * t));
                    let (l5, h5) = q5_fifth_bits(blk[g].add(80 + 32 * t));
                    let lo = _mm512_or_si512(_mm512_or_si512(_mm512_and_si512(w, low), l4), _mm512_slli_epi32::<1>(l5));
                    let hi = _mm512_or_si512(
                        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16::<4>(w), low), h4),
                        _mm512_slli_epi32::<1>(h5),
                    );
                    for r in 0..R {
                        s0[r][g] = _mm512_dpbusd_epi32(s0[r][g], lo, bcast(r, 4 * t));
                        s1[r][g] = _mm512_dpbusd_epi32(s1[r][g], hi, bcast(r, 16 + 4 * t));
                    }
                }
            }
            for r in 0..R {
                let at = (i0 + r) * nb + b;
                let da = _mm512_set1_ps(a.d[at]);
                let a0 = _mm512_set1_epi32(32 * half_sums[2 * at]);
                let a1 = _mm512_set1_epi32(32 * half_sums[2 * at + 1]);
                for g in 0..G {
                    let sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk[g].add(32) as *const __m128i));
                    let sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(blk[g].add(48) as *const __m128i));
                    let i = _mm512_add_epi32(
                        _mm512_mullo_epi32(_mm512_sub_epi32(s0[r][g], a0), sc0),
                        _mm512_mullo_epi32(_mm512_sub_epi32(s1[r][g], a1), sc1),
                    );
                    let dw = _mm512_cvtph_ps(_mm256_loadu_si256(blk[g] as *const __m256i));
                    acc[r][g] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(i), acc[r][g]);
                }
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (g, y) in row.iter().enumerate() {
            let c = (g0 + g) * GROUP_ROWS - c0;
            let n = (out.width() - c).min(GROUP_ROWS);
            // SAFETY: same features.
            unsafe { store_lanes(&mut out.row(i0 + r)[c..c + n], *y) };
        }
    }
}

/// The sixteen weight rows' minimums of one group block of a Q4_1 or
/// Q4_K matrix (`blk`: the block's first byte), as f32: Q4_1's stored f16
/// minimums; Q4_K's `-(dmin · m)`, the sign flipped exactly, as scalar
/// negation does.
///
/// # Safety
/// `blk` points at a whole group block of a Q4_1 or Q4_K packed matrix; the
/// CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn min_weights<const KIND: u8>(blk: *const u8) -> __m512 {
    // SAFETY: the minimums lie at 32..64 (Q4_K's byte minimums at 80..96).
    unsafe {
        let mw = _mm512_cvtph_ps(_mm256_loadu_si256(blk.add(32) as *const __m256i));
        if KIND == kind_id::Q4K {
            let prod = _mm512_mul_ps(mw, q4k_byte_scales(blk.add(80)));
            _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(prod), _mm512_set1_epi32(i32::MIN)))
        } else {
            mw
        }
    }
}

/// Activation rows `i0..i0+R` times groups `g0..g0+G`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile<const R: usize, const G: usize, const KIND: u8>(
    a: &Q8Rows,
    p: &Packed,
    i0: usize,
    g0: usize,
    c0: usize,
    prefetch: Prefetch,
    out: &mut ScatterBlock<'_, f32>,
) {
    let q4 = KIND != kind_id::Q8_0;
    let has_mins = KIND == kind_id::Q4_1 || KIND == kind_id::Q4K;
    let q4k = KIND == kind_id::Q4K;
    // What the stored quants are offset by, times Σa, comes off each block's sum.
    let offset = match KIND {
        kind_id::Q8_0 => 128,
        kind_id::Q4_0 => 8,
        kind_id::Q5_0 => 16,
        _ => 0,
    };
    let q5 = KIND == kind_id::Q5_0;
    let (k, nb) = (a.cols, p.nb);
    let gb = Packed::group_block_bytes(p.kind);
    let qo = Packed::quants_offset(p.kind);
    // Two accumulators per (row, group) where registers allow: independent
    // dependency chains for the one-row tiles (even chunks into `s0`, odd
    // into `s1`; a constant after monomorphization).
    let split = R * G <= 4;
    // The many-row tiles sum the minimums in a pass of their own after the
    // main loop (same FMAs in the same block order, so the same bits): in the
    // main loop they are one more accumulator per row and group beside the
    // integer sums and the float ones. On an AMD Zen 4 the 4 x 2 tiles of the
    // time spilled to the stack every block, and the pass apart made a
    // 512-token prefill 1.11x faster (8 of 8 rounds); with today's 8 x 1 tiles,
    // minimums back in the main loop measured 0.975x on Q4_1 (3 of 14 rounds
    // faster; an earlier 10-round run 1.065x, 7 of 10, SD 0.150) and 1.005x on
    // Q4_K_M (8 of 14): within the noise, so the pass stays.
    let mins_apart = has_mins && R * G > 4;
    let low = _mm512_set1_epi8(0x0f);
    let mut acc = [[_mm512_setzero_ps(); G]; R];
    let mut mins = [[_mm512_setzero_ps(); G]; R];
    for b in 0..nb {
        // SAFETY (this block): group g0 + g < p.groups and block b < nb, so
        // every weight read lies in p.data; rows i0 + r < a.rows, so every
        // activation read lies in a.qs / a.d / a.s / a.sums. Prefetches never
        // fault (`wrapping_add` keeps their addresses defined).
        unsafe {
            let blk: [*const u8; G] = std::array::from_fn(|g| p.data.as_ptr().add(((g0 + g) * nb + b) * gb));
            let arow: [*const u8; R] = std::array::from_fn(|r| a.qs.as_ptr().add((i0 + r) * k + b * QK) as *const u8);
            for bp in blk {
                prefetch.ahead_of(bp, gb);
            }
            // Four activation bytes of row r from element e, in every lane.
            macro_rules! bcast {
                ($r:expr, $e:expr) => {
                    _mm512_set1_epi32((arow[$r].add($e) as *const i32).read_unaligned())
                };
            }
            let mut s0 = [[_mm512_setzero_si512(); G]; R];
            let mut s1 = [[_mm512_setzero_si512(); G]; R];
            // Chunk t of every group into `s` (`s0` or `s1`).
            macro_rules! chunk {
                ($s:ident, $t:expr) => {
                    for g in 0..G {
                        let w = _mm512_loadu_si512(blk[g].add(qo + 64 * $t) as *const _);
                        if q4 {
                            let mut lo = _mm512_and_si512(w, low);
                            let mut hi = _mm512_and_si512(_mm512_srli_epi16::<4>(w), low);
                            if q5 {
                                let (hl, hh) = q5_fifth_bits(blk[g].add(32 + 16 * $t));
                                (lo, hi) = (_mm512_or_si512(lo, hl), _mm512_or_si512(hi, hh));
                            }
                            for r in 0..R {
                                $s[r][g] = _mm512_dpbusd_epi32($s[r][g], lo, bcast!(r, 4 * $t));
                                $s[r][g] = _mm512_dpbusd_epi32($s[r][g], hi, bcast!(r, 16 + 4 * $t));
                            }
                        } else {
                            for r in 0..R {
                                $s[r][g] = _mm512_dpbusd_epi32($s[r][g], w, bcast!(r, 4 * $t));
                            }
                        }
                    }
                };
            }
            let chunks = if q4 { 4 } else { 8 };
            let mut t = 0;
            while t < chunks {
                chunk!(s0, t);
                if split {
                    chunk!(s1, t + 1);
                } else {
                    chunk!(s0, t + 1);
                }
                t += 2;
            }
            let mut s = s0;
            if split {
                for r in 0..R {
                    for g in 0..G {
                        s[r][g] = _mm512_add_epi32(s0[r][g], s1[r][g]);
                    }
                }
            }
            for r in 0..R {
                let at = (i0 + r) * nb + b;
                let da = _mm512_set1_ps(a.d[at]);
                let off = _mm512_set1_epi32(offset * a.sums[at]);
                for g in 0..G {
                    let mut i = s[r][g];
                    if offset != 0 {
                        i = _mm512_sub_epi32(i, off);
                    }
                    let mut dw = _mm512_cvtph_ps(_mm256_loadu_si256(blk[g] as *const __m256i));
                    if q4k {
                        dw = _mm512_mul_ps(dw, q4k_byte_scales(blk[g].add(64)));
                    }
                    acc[r][g] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(i), acc[r][g]);
                    if has_mins && !mins_apart {
                        mins[r][g] = _mm512_fmadd_ps(min_weights::<KIND>(blk[g]), _mm512_set1_ps(a.s[at]), mins[r][g]);
                    }
                }
            }
        }
    }
    if mins_apart {
        for b in 0..nb {
            // SAFETY: the blocks and rows of the main loop.
            unsafe {
                let mws: [__m512; G] =
                    std::array::from_fn(|g| min_weights::<KIND>(p.data.as_ptr().add(((g0 + g) * nb + b) * gb)));
                for (r, row) in mins.iter_mut().enumerate() {
                    let s = _mm512_set1_ps(a.s[(i0 + r) * nb + b]);
                    for (m, &mw) in row.iter_mut().zip(&mws) {
                        *m = _mm512_fmadd_ps(mw, s, *m);
                    }
                }
            }
        }
    }
    for r in 0..R {
        for g in 0..G {
            let y = if has_mins { _mm512_add_ps(acc[r][g], mins[r][g]) } else { acc[r][g] };
            let c = (g0 + g) * GROUP_ROWS - c0;
            let n = (out.width() - c).min(GROUP_ROWS);
            // SAFETY: same features.
            unsafe { store_lanes(&mut out.row(i0 + r)[c..c + n], y) };
        }
    }
}
