//! [`super::attend_one`] in AVX-512 registers for a whole task at once: rows
//! `first_pos..first_pos + rows` of one sequence and all query heads of one
//! KV head, with the scalar path's bits. Also the weighted sums of the AVX2
//! per-row kernel's rows (`weighted_sums_row`).
//!
//! The rows of a task see the same keys (each row one more than the last), so
//! the keys `0..ctx` are converted to f32 once per task and laid out sixteen
//! positions across (`[key block][dim][16]`). A row's scores for sixteen keys
//! are then sixteen lanes of one register: the scalar `dot`'s eight lane
//! partials (dimension d into partial d mod 8, FMAs with d ascending) become
//! eight accumulators whose lanes are keys, and its fixed lane sum
//! `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))` is the same additions done across
//! registers. Each block of sixteen keys stays in L1 while every row of the
//! task that sees it takes its scores. The softmax takes sixteen weights at a
//! time (`exp16`) and adds each register's halves in turn into the eight lane
//! sums of `exp_and_sum` (position j into lane j mod 8, j ascending). The weighted sums keep dimensions in lanes (sixteen per
//! register), every element `fma(p_j, v_j, ·)` with j ascending from zero, and
//! serve two rows at once: a value vector is converted once for both rows and
//! all heads of the pass, the second row's extra position added last.

use super::avx2::{KV_PREFETCH_POSITIONS, prefetch_row};
use super::stored::{BF16, E4M3, E4M3_TO_F32, F16, width};
use crate::kernels::cpu::expf::{self, avx2::exp8, avx512::exp16};
use crate::kernels::cpu::matmul::avx2::hsum;
use crate::kv::{HeadValues, HeadView, KvFormat};
use std::arch::x86_64::*;

/// Keys per score register (f32 lanes of a zmm register).
const LANES: usize = 16;

/// Query heads per scoring pass: eight partial accumulators each, 24 of 32 registers.
const SCORE_HEADS: usize = 3;

/// Whether this kernel serves heads of `head_dim` (whole registers only).
pub(super) fn serves(head_dim: usize) -> bool {
    head_dim > 0 && head_dim.is_multiple_of(LANES)
}

/// Sixteen stored elements at `p` as f32, exactly as `HeadView` decodes them
/// (E4M3 as `table[code] * scale`, computed from the code's bits as in the
/// AVX2 kernel's `load8`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn load16<const F: u8>(p: *const u8, scale: f32) -> __m512 {
    // SAFETY (caller): p points at sixteen readable elements.
    unsafe {
        match F {
            F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
            BF16 => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                p as *const __m256i,
            )))),
            _ => {
                let b = _mm512_cvtepu8_epi32(_mm_loadu_si128(p as *const __m128i));
                let mag = _mm512_slli_epi32::<20>(_mm512_and_si512(b, _mm512_set1_epi32(0x7F)));
                let sign = _mm512_slli_epi32::<24>(_mm512_and_si512(b, _mm512_set1_epi32(0x80)));
                let v = _mm512_mul_ps(_mm512_castsi512_ps(mag), _mm512_set1_ps(E4M3_TO_F32));
                let signed = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
                _mm512_mul_ps(signed, _mm512_set1_ps(scale))
            }
        }
    }
}

/// Attention of `rows` consecutive rows (positions `first_pos..`, row k
/// seeing positions `0..=first_pos + k`) for the `group` query heads of one KV
/// head: row k's heads are `q[k * q_stride..][..group * head_dim]`, its output
/// `out[k * group * head_dim..][..group * head_dim]`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn attend_rows(
    q: &[f32],
    q_stride: usize,
    group: usize,
    view: &HeadView<'_>,
    first_pos: usize,
    rows: usize,
    scale: f32,
    out: &mut [f32],
) {
    let hd = view.head_dim;
    let ctx = first_pos + rows;
    assert!(serves(hd) && rows >= 1 && ctx <= view.len);
    assert!((rows - 1) * q_stride + group * hd <= q.len() && out.len() == rows * group * hd);
    let blocks = ctx.div_ceil(LANES);
    let stride = blocks * LANES;
    // SAFETY: this function's features; every offset below is inside the
    // buffers sized here or inside the view (positions < ctx <= len).
    unsafe {
        let kt = match view.format {
            KvFormat::Bf16 => transpose_keys::<BF16>(view, ctx),
            _ => transpose_keys::<F16>(view, ctx),
        };
        // scores[(k * group + g) * stride + j]: row k, head g, position j.
        let mut scores = vec![0.0f32; rows * group * stride];
        for b in 0..blocks {
            let kb = kt.as_ptr().add(b * hd * LANES);
            // Rows that see at least one key of this block.
            for k in (b * LANES).saturating_sub(first_pos)..rows {
                let qk = q.as_ptr().add(k * q_stride);
                let dst = scores.as_mut_ptr().add(k * group * stride + b * LANES);
                let mut g0 = 0;
                while g0 < group {
                    let heads = (group - g0).min(SCORE_HEADS);
                    let (qg, dg) = (qk.add(g0 * hd), dst.add(g0 * stride));
                    match heads {
                        1 => scores16::<1>(qg, hd, kb, scale, dg, stride),
                        2 => scores16::<2>(qg, hd, kb, scale, dg, stride),
                        _ => scores16::<3>(qg, hd, kb, scale, dg, stride),
                    }
                    g0 += heads;
                }
            }
        }
        let mut inv = vec![0.0f32; rows * group];
        for k in 0..rows {
            let n = first_pos + k + 1;
            for g in 0..group {
                let s = &mut scores[(k * group + g) * stride..][..n];
                inv[k * group + g] = 1.0 / softmax_weights(s);
            }
        }
        let (vp, vscale) = match view.values {
            HeadValues::Half(store) => (store.as_ptr() as *const u8, 1.0),
            HeadValues::E4m3 { codes, scale, .. } => (codes.as_ptr(), scale),
        };
        let sums = WeightedSums { view, vp, vscale, scores: &scores, stride, group, inv: &inv };
        match (view.format, view.values) {
            (KvFormat::Bf16, _) => sums.all::<BF16>(first_pos, rows, out),
            (_, HeadValues::E4m3 { .. }) => sums.all::<E4M3>(first_pos, rows, out),
            _ => sums.all::<F16>(first_pos, rows, out),
        }
    }
}

/// The weighted sums of one row that sees positions `0..n` (a row of a task
/// too short for [`attend_rows`]: every decode row, a chunk's last few rows;
/// scored by the AVX2 per-row kernel), for `heads` query heads whose
/// softmax weights are `scores[g * n + j]` and inverse sums `inv[g]`, into
/// `out` (`heads x head_dim`): [`WeightedSums`] with sixteen dimensions a
/// register (the AVX2 kernel's eight-lane accumulators spill at three heads),
/// every element the same `fma(p_j, v_j, ·)` chain with j ascending, then
/// times the inverse sum, as there.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
pub(super) unsafe fn weighted_sums_row<const V: u8>(
    view: &HeadView<'_>,
    scores: &[f32],
    n: usize,
    inv: &[f32],
    out: &mut [f32],
) {
    let heads = inv.len();
    assert!(serves(view.head_dim) && n >= 1 && n <= view.len);
    assert!(scores.len() >= heads * n && out.len() == heads * view.head_dim);
    let (vp, vscale) = match view.values {
        HeadValues::Half(store) => (store.as_ptr() as *const u8, 1.0),
        HeadValues::E4m3 { codes, scale, .. } => (codes.as_ptr(), scale),
    };
    let sums = WeightedSums { view, vp, vscale, scores, stride: n, group: heads, inv };
    // SAFETY: this function's features; one row at position n - 1 sees
    // positions 0..n, its weights at (0 * heads + g) * n + j (asserted above).
    unsafe { sums.all::<V>(n - 1, 1, out) }
}

/// The max-subtracted softmax weights of one head's scores in place, and
/// their sum: `super::exp_and_sum` after the maximum, sixteen at a time.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
fn softmax_weights(s: &mut [f32]) -> f32 {
    let n = s.len();
    let (full16, full8) = (n / 16 * 16, n / 8 * 8);
    let p = s.as_mut_ptr();
    // The maximum is exact in any order.
    let mut mv = _mm512_set1_ps(f32::NEG_INFINITY);
    let mut j = 0;
    while j < full16 {
        // SAFETY: j + 16 <= n.
        mv = _mm512_max_ps(mv, unsafe { _mm512_loadu_ps(p.add(j)) });
        j += 16;
    }
    let max = s[full16..].iter().fold(_mm512_reduce_max_ps(mv), |m, &x| m.max(x));
    let mut sum = _mm256_setzero_ps();
    let mut j = 0;
    while j < full16 {
        // SAFETY: j + 16 <= n.
        unsafe {
            let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(p.add(j)), _mm512_set1_ps(max)));
            _mm512_storeu_ps(p.add(j), e);
            sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
            sum = _mm256_add_ps(sum, _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(e))));
        }
        j += 16;
    }
    if j < full8 {
        // SAFETY: j + 8 <= n.
        unsafe {
            let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(j)), _mm256_set1_ps(max)));
            _mm256_storeu_ps(p.add(j), e);
            sum = _mm256_add_ps(sum, e);
        }
    }
    let mut total = hsum(sum);
    for x in s[full8..].iter_mut() {
        *x = expf::exp(*x - max);
        total += *x;
    }
    total
}

/// Keys `0..ctx` as f32, `[ctx / 16 rounded up][head_dim][16]`, positions past
/// `ctx` zero.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn transpose_keys<const K: u8>(view: &HeadView<'_>, ctx: usize) -> Vec<f32> {
    let hd = view.head_dim;
    let mut kt = vec![0.0f32; ctx.div_ceil(LANES) * hd * LANES];
    let kp = view.keys.as_ptr() as *const u8;
    let mut row = [0.0f32; LANES];
    for j in 0..ctx {
        let base = (j / LANES) * hd * LANES + j % LANES;
        let src = kp.wrapping_add(view.offset(j) * width(K));
        for c in (0..hd).step_by(LANES) {
            // SAFETY: position j < ctx <= len, c + 16 <= head_dim; `row` holds sixteen floats.
            unsafe { _mm512_storeu_ps(row.as_mut_ptr(), load16::<K>(src.add(c * width(K)), 1.0)) };
            for (i, &x) in row.iter().enumerate() {
                kt[base + (c + i) * LANES] = x;
            }
        }
    }
    kt
}

/// Scores of sixteen keys (block `kb`, `[head_dim][16]`) for `GH` heads at
/// `q` (head g at `q + g * head_dim`), times `scale`, to `dst + g * stride`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn scores16<const GH: usize>(
    q: *const f32,
    hd: usize,
    kb: *const f32,
    scale: f32,
    dst: *mut f32,
    stride: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); 8]; GH];
    let mut c = 0;
    while c < hd {
        for i in 0..8 {
            // SAFETY (caller): c + i < head_dim; q holds GH heads.
            unsafe {
                let k = _mm512_loadu_ps(kb.add((c + i) * LANES));
                for (g, a) in acc.iter_mut().enumerate() {
                    a[i] = _mm512_fmadd_ps(_mm512_set1_ps(*q.add(g * hd + c + i)), k, a[i]);
                }
            }
        }
        c += 8;
    }
    for (g, l) in acc.iter().enumerate() {
        let s = _mm512_add_ps(
            _mm512_add_ps(_mm512_add_ps(l[0], l[4]), _mm512_add_ps(l[2], l[6])),
            _mm512_add_ps(_mm512_add_ps(l[1], l[5]), _mm512_add_ps(l[3], l[7])),
        );
        // SAFETY (caller): sixteen floats at dst + g * stride.
        unsafe { _mm512_storeu_ps(dst.add(g * stride), _mm512_mul_ps(s, _mm512_set1_ps(scale))) };
    }
}

/// The weighted sums of a task: softmax weights `scores` (layout of
/// `attend_rows`), their inverse sums `inv[k * group + g]`, the value store.
struct WeightedSums<'a> {
    view: &'a HeadView<'a>,
    vp: *const u8,
    vscale: f32,
    scores: &'a [f32],
    stride: usize,
    group: usize,
    inv: &'a [f32],
}

impl WeightedSums<'_> {
    /// Every row's outputs: rows in pairs, heads in passes of up to three,
    /// dimensions 64 (then 16) at a time.
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    unsafe fn all<const V: u8>(&self, first_pos: usize, rows: usize, out: &mut [f32]) {
        let hd = self.view.head_dim;
        let mut k = 0;
        while k < rows {
            let pair = rows - k >= 2;
            let mut g0 = 0;
            while g0 < self.group {
                let heads = (self.group - g0).min(3);
                let mut c = 0;
                while c < hd {
                    let wide = hd - c >= 64;
                    macro_rules! go {
                        ($r:literal, $w:literal) => {
                            match heads {
                                1 => self.block::<V, $r, 1, $w>(first_pos, k, g0, c, out),
                                2 => self.block::<V, $r, 2, $w>(first_pos, k, g0, c, out),
                                _ => self.block::<V, $r, 3, $w>(first_pos, k, g0, c, out),
                            }
                        };
                    }
                    // SAFETY: rows k..k + R exist, heads g0..g0 + GH, columns c..c + 16W.
                    unsafe {
                        match (pair, wide) {
                            (true, true) => go!(2, 4),
                            (true, false) => go!(2, 1),
                            (false, true) => go!(1, 4),
                            (false, false) => go!(1, 1),
                        }
                    }
                    c += if wide { 64 } else { 16 };
                }
                g0 += heads;
            }
            k += if pair { 2 } else { 1 };
        }
    }

    /// Rows `k..k + R`, heads `g0..g0 + GH`, dimensions `c..c + 16W`: `R x GH x W`
    /// accumulators over the positions all `R` rows see, then each later
    /// row's extra positions, then times the inverse sums.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl")]
    #[allow(clippy::needless_range_loop)]
    unsafe fn block<const V: u8, const R: usize, const GH: usize, const W: usize>(
        &self,
        first_pos: usize,
        k: usize,
        g0: usize,
        c: usize,
        out: &mut [f32],
    ) {
        let (hd, group, stride) = (self.view.head_dim, self.group, self.stride);
        let n0 = first_pos + k + 1;
        let sp = self.scores.as_ptr();
        let weight = |r: usize, g: usize, j: usize| {
            // SAFETY (caller): row k + r and head g0 + g exist; j < that row's positions.
            _mm512_set1_ps(unsafe { *sp.add(((k + r) * group + g0 + g) * stride + j) })
        };
        let mut acc = [[[_mm512_setzero_ps(); W]; GH]; R];
        let values = |j: usize| -> [__m512; W] {
            let row = self.vp.wrapping_add((self.view.offset(j) + c) * width(V));
            // SAFETY (caller): position j < len, c + 16W <= head_dim.
            std::array::from_fn(|w| unsafe { load16::<V>(row.add(16 * w * width(V)), self.vscale) })
        };
        for j in 0..n0 {
            // The rows ahead, as the AVX2 kernel does (see KV_PREFETCH_POSITIONS).
            let ahead = (j + KV_PREFETCH_POSITIONS).min(n0 - 1);
            prefetch_row(self.vp.wrapping_add((self.view.offset(ahead) + c) * width(V)), 16 * W * width(V));
            let x = values(j);
            for r in 0..R {
                for g in 0..GH {
                    let p = weight(r, g, j);
                    for w in 0..W {
                        acc[r][g][w] = _mm512_fmadd_ps(p, x[w], acc[r][g][w]);
                    }
                }
            }
        }
        // Row k + r sees r positions more than row k.
        for j in n0..n0 + R - 1 {
            let x = values(j);
            for r in (j - n0 + 1)..R {
                for g in 0..GH {
                    let p = weight(r, g, j);
                    for w in 0..W {
                        acc[r][g][w] = _mm512_fmadd_ps(p, x[w], acc[r][g][w]);
                    }
                }
            }
        }
        for r in 0..R {
            for g in 0..GH {
                let inv = _mm512_set1_ps(self.inv[(k + r) * group + g0 + g]);
                let o = ((k + r) * group + g0 + g) * hd + c;
                assert!(o + 16 * W <= out.len());
                for w in 0..W {
                    // SAFETY: asserted above.
                    unsafe { _mm512_storeu_ps(out.as_mut_ptr().add(o + 16 * w), _mm512_mul_ps(acc[r][g][w], inv)) };
                }
            }
        }
    }
}
