//! Causal paged attention with grouped-query heads, reading keys and values
//! through each sequence's block table. Each (row, head) output is computed on
//! its own — scores in position order, a max-subtracted softmax, then the
//! weighted sum of values in position order — so it does not depend on the other
//! rows or sequences in the batch, nor on how a prompt was chunked.
//! Keys and values of the current step must already be in the cache: attention
//! always sees the stored (possibly 8-bit) representation, in prefill and decode
//! alike.
//!
//! Keys and values are read in place from the pages (`kv::HeadView`) and
//! converted to f32 where they are used (F16C for f16 keys and values, a shift
//! for bf16, a table gather times the layer scale for E4M3 values): no copy of
//! the history is made, and the f32 values are exactly `KvCache::gather`'s.
//!
//! Dot products (query by key) and weighted sums (probability times value) run
//! on the caller's `CpuPath`: eight lanes over `head_dim` with fused
//! multiply-adds, a fixed lane sum and the tail in order. The softmax takes
//! `expf::exp` (the same bits on every path) and sums the weights in eight
//! lanes (position j into lane j mod 8), the same fixed lane sum, then the
//! tail in order. The scalar path writes the same steps out with `mul_add`, so
//! both paths give the same bits. The AVX2 kernel serves the query heads that
//! share a KV head together (up to four at a time): each key and value row is
//! converted once for all of them, while every head's arithmetic stays its own.

use super::dispatch::{CpuFeatures, CpuPath};
use super::expf;
use super::team::{Scatter, ScatterWriter, for_each_index};
use crate::kv::{BlockTable, HeadView, KvCache};

/// One sequence's slice of the batch: rows `q_row..q_row + rows` of the query
/// matrix are positions `start_pos..start_pos + rows` of this sequence.
pub struct AttnSeq<'a> {
    pub table: &'a BlockTable,
    pub q_row: usize,
    pub rows: usize,
    pub start_pos: usize,
}

/// Attention geometry.
#[derive(Clone, Copy)]
pub struct AttnShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

/// Rows per task: bounds the repeated gather of history per task.
const ROWS_PER_TASK: usize = 64;

/// Query heads of one KV head that the AVX2 kernel serves in one pass.
const MAX_SHARED_HEADS: usize = 4;

/// Fewest rows for which a task takes the AVX-512 kernel, which converts the
/// task's keys once for all its rows (below it, the AVX2 kernel per row).
const MIN_AVX512_ROWS: usize = 4;

/// Returns `[total_rows, heads * head_dim]` attention outputs for `q` (same shape),
/// on `path`.
pub fn paged_attention(
    q: &[f32],
    seqs: &[AttnSeq<'_>],
    cache: &KvCache,
    layer: usize,
    shape: AttnShape,
    path: CpuPath,
) -> Vec<f32> {
    assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
    let AttnShape { heads, kv_heads, head_dim: hd } = shape;
    let q_dim = heads * hd;
    let group = heads / kv_heads;
    let total_rows = q.len() / q_dim;
    let mut tasks = Vec::new();
    for (s, seq) in seqs.iter().enumerate() {
        assert!(
            seq.table.len() >= seq.start_pos + seq.rows,
            "attention: sequence {s} has {} cached positions, needs {}",
            seq.table.len(),
            seq.start_pos + seq.rows
        );
        for kvh in 0..kv_heads {
            let mut r0 = 0;
            while r0 < seq.rows {
                let r1 = (r0 + ROWS_PER_TASK).min(seq.rows);
                tasks.push((s, kvh, r0, r1));
                r0 = r1;
            }
        }
    }
    // Longest first: a task's work grows with its context (causal rows late in
    // a prompt see the most keys), so the costly ones do not straggle at the end.
    tasks.sort_by_key(|&(s, _, r0, r1)| std::cmp::Reverse((r1 - r0) * (2 * seqs[s].start_pos + r0 + r1)));
    // The sequences' rows tile the query's rows exactly (every output row is written once).
    let mut spans: Vec<(usize, usize)> = seqs.iter().map(|s| (s.q_row, s.rows)).collect();
    spans.sort_unstable();
    let end = spans.iter().fold(0, |at, &(row, rows)| {
        assert_eq!(row, at, "attention: sequence rows must tile the query rows without gaps or overlaps");
        row + rows
    });
    assert_eq!(end, total_rows, "attention: the sequences cover {end} of {total_rows} query rows");
    let scale = 1.0 / (hd as f32).sqrt();
    // Each task writes its rows' heads of its KV head straight into the output.
    let mut y = Scatter::new(total_rows * q_dim);
    let writer = y.writer();
    for_each_index(tasks.len(), |t| {
        let (s, kvh, r0, r1) = tasks[t];
        let seq = &seqs[s];
        let ctx = seq.start_pos + r1;
        let view = cache.head_view(layer, seq.table, kvh, ctx);
        let mut out = vec![0.0f32; (r1 - r0) * group * hd];
        #[cfg(target_arch = "x86_64")]
        if path >= CpuPath::Avx512 && r1 - r0 >= MIN_AVX512_ROWS && avx512::serves(hd) {
            let first = (seq.q_row + r0) * q_dim + kvh * group * hd;
            // SAFETY: the assert above checked that this CPU has AVX-512 F/BW/VL.
            unsafe {
                avx512::attend_rows(&q[first..], q_dim, group, &view, seq.start_pos + r0, r1 - r0, scale, &mut out)
            };
            write_rows(&writer, &out, seq.q_row + r0, r1 - r0, q_dim, kvh * group * hd, group * hd);
            return;
        }
        let mut scores = vec![0.0f32; group.min(MAX_SHARED_HEADS) * ctx];
        // The per-row kernel's weighted sums in AVX-512 registers where it can.
        #[cfg(target_arch = "x86_64")]
        let wide_sums = path >= CpuPath::Avx512 && avx512::serves(hd);
        let mut row = vec![0.0f32; hd];
        for r in r0..r1 {
            let pos = seq.start_pos + r;
            let qrow = &q[(seq.q_row + r) * q_dim..(seq.q_row + r + 1) * q_dim];
            let mut g0 = 0;
            while g0 < group {
                let heads = match path {
                    CpuPath::Scalar => 1,
                    _ => (group - g0).min(MAX_SHARED_HEADS),
                };
                let h = kvh * group + g0;
                let qh = &qrow[h * hd..(h + heads) * hd];
                let o = &mut out[((r - r0) * group + g0) * hd..((r - r0) * group + g0 + heads) * hd];
                match path {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the assert above checked that this CPU has AVX2, FMA and
                    // F16C, and AVX-512 F/BW/VL where `wide_sums` (path >= Avx512).
                    CpuPath::Avx2 | CpuPath::Avx512 | CpuPath::Amx => unsafe {
                        avx2::attend_heads(qh, heads, &view, pos + 1, scale, wide_sums, &mut scores, o)
                    },
                    _ => attend_one(qh, &view, pos + 1, scale, &mut scores, &mut row, o),
                }
                g0 += heads;
            }
        }
        write_rows(&writer, &out, seq.q_row + r0, r1 - r0, q_dim, kvh * group * hd, group * hd);
    });
    // SAFETY: the tasks cover every (sequence row, KV head), and the
    // sequences' rows tile the query's rows (asserted).
    unsafe { y.finish() }
}

/// Writes a task's `rows` output rows (`width` each, packed in `out`) to the
/// query rows from `first_row`, columns `col..col + width`.
fn write_rows(
    writer: &ScatterWriter<f32>,
    out: &[f32],
    first_row: usize,
    rows: usize,
    q_dim: usize,
    col: usize,
    width: usize,
) {
    for r in 0..rows {
        // SAFETY: (row, KV head) pairs are disjoint between tasks.
        unsafe { writer.write((first_row + r) * q_dim + col, &out[r * width..(r + 1) * width]) };
    }
}

/// `Σ a[i]·b[i]`: eight lanes of FMAs over steps of 8, the fixed sum
/// `((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7))`, then the tail by FMA in order.
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut l = [0.0f32; 8];
    let full = a.len() / 8 * 8;
    for (ca, cb) in a[..full].chunks_exact(8).zip(b[..full].chunks_exact(8)) {
        for i in 0..8 {
            l[i] = ca[i].mul_add(cb[i], l[i]);
        }
    }
    let mut s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for t in full..a.len() {
        s = a[t].mul_add(b[t], s);
    }
    s
}

/// `s := expf::exp(s - max)` for each score, and their sum: eight lane sums
/// (score j into lane j mod 8) over whole groups of eight, the fixed lane sum
/// of `dot`, then the tail in order.
fn exp_and_sum(scores: &mut [f32], max: f32) -> f32 {
    let mut l = [0.0f32; 8];
    let full = scores.len() / 8 * 8;
    for c in scores[..full].chunks_exact_mut(8) {
        for i in 0..8 {
            c[i] = expf::exp(c[i] - max);
            l[i] += c[i];
        }
    }
    let mut sum = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for s in scores[full..].iter_mut() {
        *s = expf::exp(*s - max);
        sum += *s;
    }
    sum
}

/// Attention of one query head over positions `0..n` of `view`, written out
/// element by element (`row`: room for one decoded key or value).
fn attend_one(
    q: &[f32],
    view: &HeadView<'_>,
    n: usize,
    scale: f32,
    scores: &mut [f32],
    row: &mut [f32],
    out: &mut [f32],
) {
    let mut max = f32::NEG_INFINITY;
    for (j, score) in scores[..n].iter_mut().enumerate() {
        view.key_f32(j, row);
        let s = dot(q, row) * scale;
        *score = s;
        max = max.max(s);
    }
    let sum = exp_and_sum(&mut scores[..n], max);
    out.fill(0.0);
    for (j, &p) in scores[..n].iter().enumerate() {
        view.value_f32(j, row);
        for (o, &vv) in out.iter_mut().zip(row.iter()) {
            *o = p.mul_add(vv, *o);
        }
    }
    let inv = 1.0 / sum;
    for o in out.iter_mut() {
        *o *= inv;
    }
}

/// What the SIMD kernels share about stored elements.
#[cfg(target_arch = "x86_64")]
mod stored {
    /// Storage formats of one row, as const parameters.
    pub(super) const F16: u8 = 0;
    pub(super) const BF16: u8 = 1;
    pub(super) const E4M3: u8 = 2;

    /// Bytes per stored element.
    pub(super) const fn width(f: u8) -> usize {
        if f == E4M3 { 1 } else { 2 }
    }

    /// 2^120: the factor from an E4M3 code's bits, shifted into an f32, to its value.
    pub(super) const E4M3_TO_F32: f32 = f32::from_bits((127 + 120) << 23);
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! [`super::attend_one`] in AVX2 + FMA registers, reading the pages in
    //! place: eight elements of a key or value row are loaded and converted to
    //! f32 in one step (`load8`), the format fixed at compile time.
    use super::stored::{BF16, E4M3, E4M3_TO_F32, F16, width};
    use crate::kernels::cpu::expf::avx2::exp8;
    use crate::kernels::cpu::matmul::avx2::hsum;
    use crate::kv::{HeadValues, HeadView, KvFormat};
    use std::arch::x86_64::*;

    /// How many positions ahead of the one being read the key and value rows
    /// are prefetched, into L2. A decode step's rows (one per sequence and KV
    /// head) read the cache once per layer, and between two tokens the weights
    /// streaming through the caches evict it, so it comes from memory; the
    /// rows of one KV head lie a stride apart (all heads of a position share a
    /// row of the page) and pages need not follow each other, which the
    /// hardware prefetchers do not follow far enough. On an AMD Zen 4 (32 MiB
    /// L3), alternated `engine bench` decode after a 1024-token prompt: nothing
    /// 116 tok/s median, 8 positions into L1 131, 16 into L2 128, 32 into L2
    /// 140 (6 of 6 rounds faster than nothing), 64 into L2 137.
    pub(super) const KV_PREFETCH_POSITIONS: usize = 32;

    /// Prefetches the `bytes` bytes at `p` into L2, every cache line they
    /// touch (`p` need not be aligned, and may lie anywhere: prefetches never
    /// fault).
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) fn prefetch_row(p: *const u8, bytes: usize) {
        let end = bytes + (p as usize & 63);
        let p = p.wrapping_sub(p as usize & 63);
        let mut line = 0;
        while line < end {
            _mm_prefetch::<_MM_HINT_T1>(p.wrapping_add(line) as *const i8);
            line += 64;
        }
    }

    /// How E4M3 codes become f32: `table[code] * scale` (unused otherwise).
    #[derive(Clone, Copy)]
    struct Decode {
        table: *const f32,
        scale: f32,
    }

    /// Eight stored elements at `p` as f32, exactly as `HeadView` decodes them.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8<const F: u8>(p: *const u8, dec: Decode) -> __m256 {
        // SAFETY (caller): p points at eight readable elements; table at 256 floats.
        unsafe {
            match F {
                F16 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
                BF16 => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                    p as *const __m128i,
                )))),
                _ => {
                    // E4M3 -> f32 by bits, no table gather: the 7 magnitude bits
                    // placed at f32's exponent/mantissa boundary read as
                    // 2^-120 x the value (normals and subnormals alike, exactly),
                    // so one multiply by 2^120 gives it; then the sign bit.
                    // Equal to the table for every code but the NaNs (0x7F,
                    // 0xFF), which are never written.
                    let b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(p as *const __m128i));
                    let mag = _mm256_slli_epi32::<20>(_mm256_and_si256(b, _mm256_set1_epi32(0x7F)));
                    let sign = _mm256_slli_epi32::<24>(_mm256_and_si256(b, _mm256_set1_epi32(0x80)));
                    let v = _mm256_mul_ps(_mm256_castsi256_ps(mag), _mm256_set1_ps(E4M3_TO_F32));
                    _mm256_mul_ps(_mm256_or_ps(v, _mm256_castsi256_ps(sign)), _mm256_set1_ps(dec.scale))
                }
            }
        }
    }

    /// One stored element at `p` as f32.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load1<const F: u8>(p: *const u8, dec: Decode) -> f32 {
        // SAFETY (caller): p points at one readable element.
        unsafe {
            match F {
                F16 => half::f16::from_bits((p as *const u16).read_unaligned()).to_f32(),
                BF16 => half::bf16::from_bits((p as *const u16).read_unaligned()).to_f32(),
                _ => *dec.table.add(*p as usize) * dec.scale,
            }
        }
    }

    #[cfg(test)]
    #[test]
    fn e4m3_codes_decode_in_registers_as_the_table_does() {
        use crate::kernels::cpu::dispatch::CpuPath;
        if !CpuPath::Avx2.supported_by(crate::kernels::cpu::dispatch::CpuFeatures::get()) {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let table = crate::kv::format::e4m3_table();
        for scale in [1.0f32, 0.75 / 448.0, 3.5] {
            let dec = Decode { table: table.as_ptr(), scale };
            for first in (0..256).step_by(8) {
                let codes: [u8; 8] = std::array::from_fn(|i| (first + i) as u8);
                let mut got = [0.0f32; 8];
                // SAFETY: AVX2/FMA/F16C checked above; codes holds eight bytes.
                unsafe { _mm256_storeu_ps(got.as_mut_ptr(), load8::<E4M3>(codes.as_ptr(), dec)) };
                for (i, &c) in codes.iter().enumerate() {
                    if c & 0x7F == 0x7F {
                        continue; // NaN codes are never written
                    }
                    let want = table[c as usize] * scale;
                    assert_eq!(got[i].to_bits(), want.to_bits(), "code {c:#04x} scale {scale}: {} vs {want}", got[i]);
                }
            }
        }
    }

    /// `[out_g[c..c + 8W]]_g = Σ_j p_gj · v_j[c..c + 8W]` for the `G` heads
    /// (scores of head g at `scores[g * n..]`), each element by FMA with j
    /// ascending from zero, `G x W` vectors in registers over all positions;
    /// each value vector is converted once for the `G` heads.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
    unsafe fn weighted_sum<const F: u8, const G: usize, const W: usize>(
        scores: &[f32],
        n: usize,
        view: &HeadView<'_>,
        vp: *const u8,
        dec: Decode,
        c: usize,
        out: &mut [f32],
    ) {
        let hd = view.head_dim;
        assert!(c + 8 * W <= hd && out.len() == G * hd && scores.len() >= G * n);
        let mut acc = [[_mm256_setzero_ps(); W]; G];
        for j in 0..n {
            let ahead = (j + KV_PREFETCH_POSITIONS).min(n - 1);
            prefetch_row(vp.wrapping_add((view.offset(ahead) + c) * width(F)), 8 * W * width(F));
            let p: [__m256; G] = std::array::from_fn(|g| _mm256_set1_ps(scores[g * n + j]));
            let row = vp.wrapping_add(view.offset(j) * width(F));
            for t in 0..W {
                // SAFETY (caller): position j < view.len, c + 8W <= head_dim.
                let x = unsafe { load8::<F>(row.add((c + 8 * t) * width(F)), dec) };
                for g in 0..G {
                    acc[g][t] = _mm256_fmadd_ps(p[g], x, acc[g][t]);
                }
            }
        }
        for (g, accs) in acc.iter().enumerate() {
            for (t, a) in accs.iter().enumerate() {
                // SAFETY: g * hd + c + 8t + 8 <= out.len() (asserted).
                unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(g * hd + c + 8 * t), *a) };
            }
        }
    }

    /// [`super::attend_one`] for `heads` (1..=4) query heads of one KV head
    /// over `view` with its steps in registers: `q` and `out` hold the heads'
    /// rows one after the other, `scores` room for `heads x n`. `wide_sums`:
    /// the CPU has AVX-512 F/BW/VL and the head dimension is a multiple of 16,
    /// and the weighted sums take the AVX-512 kernel's (same bits).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C, and AVX-512 F/BW/VL if `wide_sums`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn attend_heads(
        q: &[f32],
        heads: usize,
        view: &HeadView<'_>,
        n: usize,
        scale: f32,
        wide_sums: bool,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        macro_rules! by_heads {
            ($k:ident, $v:ident) => {
                match heads {
                    1 => attend::<$k, $v, 1, 8, 8>(q, view, n, scale, wide_sums, scores, out),
                    2 => attend::<$k, $v, 2, 4, 4>(q, view, n, scale, wide_sums, scores, out),
                    3 => attend::<$k, $v, 3, 4, 4>(q, view, n, scale, wide_sums, scores, out),
                    4 => attend::<$k, $v, 4, 2, 2>(q, view, n, scale, wide_sums, scores, out),
                    _ => panic!("attention: {heads} heads in one pass (1..=4)"),
                }
            };
        }
        // SAFETY: this function's features.
        unsafe {
            match (view.format, view.values) {
                (KvFormat::Bf16, _) => by_heads!(BF16, BF16),
                (_, HeadValues::E4m3 { .. }) => by_heads!(F16, E4M3),
                _ => by_heads!(F16, F16),
            }
        }
    }

    /// Keys stored as `K`, values as `V`, `G` query heads: `KEYS` keys' dot
    /// products at a time for all `G` heads (each the scalar `dot`'s steps,
    /// each key vector converted once), the softmax of each head (`exp8` and
    /// the lane sums of `exp_and_sum`), then the weighted sums of values
    /// `8 x W` dimensions at a time, or sixteen a register in the AVX-512
    /// kernel's code when `wide_sums` (each element still `fma(p_j, v_j, ·)`
    /// for j ascending, then times the inverse sum).
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C, and AVX-512 F/BW/VL if `wide_sums`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn attend<const K: u8, const V: u8, const G: usize, const KEYS: usize, const W: usize>(
        q: &[f32],
        view: &HeadView<'_>,
        n: usize,
        scale: f32,
        wide_sums: bool,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        let hd = view.head_dim;
        assert!(n >= 1 && n <= view.len && q.len() == G * hd && out.len() == G * hd && scores.len() >= G * n);
        let full = hd / 8 * 8;
        let qp = q.as_ptr();
        let kp = view.keys.as_ptr() as *const u8;
        let (vp, dec) = match view.values {
            HeadValues::Half(store) => (store.as_ptr() as *const u8, Decode { table: std::ptr::null(), scale: 1.0 }),
            HeadValues::E4m3 { codes, table, scale } => (codes.as_ptr(), Decode { table: table.as_ptr(), scale }),
        };
        let kw = width(K);
        let mut j = 0;
        while j < n {
            let keys = (n - j).min(KEYS);
            for t in 0..KEYS {
                let ahead = (j + KV_PREFETCH_POSITIONS + t).min(n - 1);
                prefetch_row(kp.wrapping_add(view.offset(ahead) * kw), hd * kw);
            }
            let rows: [*const u8; KEYS] =
                std::array::from_fn(|t| kp.wrapping_add(view.offset(j + t.min(keys - 1)) * kw));
            let mut acc = [[_mm256_setzero_ps(); KEYS]; G];
            let mut i = 0;
            while i < full {
                for t in 0..KEYS {
                    // SAFETY: i + 8 <= hd, every row is a position < n and
                    // g * hd + i + 8 <= q.len().
                    unsafe {
                        let k = load8::<K>(rows[t].add(i * kw), dec);
                        for (g, a) in acc.iter_mut().enumerate() {
                            a[t] = _mm256_fmadd_ps(_mm256_loadu_ps(qp.add(g * hd + i)), k, a[t]);
                        }
                    }
                }
                i += 8;
            }
            if full == hd {
                // Eight lane sums at a time (padded with zeros), scaled in one step.
                let flat: [[__m256; KEYS]; G] = acc;
                let flat = flat.as_flattened();
                for (c, chunk) in flat.chunks(8).enumerate() {
                    let v: [__m256; 8] = std::array::from_fn(|x| chunk.get(x).copied().unwrap_or(_mm256_setzero_ps()));
                    let mut sums = [0.0f32; 8];
                    // SAFETY: `sums` holds eight floats.
                    unsafe { _mm256_storeu_ps(sums.as_mut_ptr(), _mm256_mul_ps(hsum8(v), _mm256_set1_ps(scale))) };
                    for (x, &sum) in sums.iter().enumerate().take(chunk.len()) {
                        let (g, t) = ((c * 8 + x) / KEYS, (c * 8 + x) % KEYS);
                        if t < keys {
                            scores[g * n + j + t] = sum;
                        }
                    }
                }
                j += keys;
                continue;
            }
            for (g, a) in acc.iter().enumerate() {
                for (t, a) in a.iter().enumerate().take(keys) {
                    let mut s = hsum(*a);
                    for e in full..hd {
                        // SAFETY: e < hd.
                        s = q[g * hd + e].mul_add(unsafe { load1::<K>(rows[t].add(e * kw), dec) }, s);
                    }
                    scores[g * n + j + t] = s * scale;
                }
            }
            j += keys;
        }
        let mut inv = [0.0f32; G];
        for (g, inv) in inv.iter_mut().enumerate() {
            *inv = 1.0 / softmax_weights(&mut scores[g * n..(g + 1) * n]);
        }
        let scores = &scores[..G * n];
        if wide_sums {
            // SAFETY: the caller checked AVX-512 F/BW/VL and the head dimension.
            return unsafe { super::avx512::weighted_sums_row::<V>(view, scores, n, &inv, out) };
        }
        let mut c = 0;
        while c + 8 * W <= full {
            // SAFETY: c + 8W <= hd; positions < n <= view.len.
            unsafe { weighted_sum::<V, G, W>(scores, n, view, vp, dec, c, out) };
            c += 8 * W;
        }
        while c < full {
            // SAFETY: c + 8 <= hd.
            unsafe { weighted_sum::<V, G, 1>(scores, n, view, vp, dec, c, out) };
            c += 8;
        }
        for g in 0..G {
            for e in full..hd {
                let mut o = 0.0f32;
                for jj in 0..n {
                    // SAFETY: position jj < view.len, e < hd.
                    let x = unsafe { load1::<V>(vp.wrapping_add((view.offset(jj) + e) * width(V)), dec) };
                    o = scores[g * n + jj].mul_add(x, o);
                }
                out[g * hd + e] = o;
            }
        }
        for (o, inv) in out.chunks_exact_mut(hd).zip(inv) {
            for o in o.iter_mut() {
                *o *= inv;
            }
        }
    }

    /// `[hsum(v[0]), .., hsum(v[7])]`: the fixed lane sum of eight vectors at
    /// once, each lane by the same additions in the same order as `hsum`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum8(v: [__m256; 8]) -> __m256 {
        // [lo(v_a) + hi(v_a) | lo(v_b) + hi(v_b)]: lanes l_i + l_{i+4}.
        let pair = |a: __m256, b: __m256| {
            _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(a, b), _mm256_permute2f128_ps::<0x31>(a, b))
        };
        let (s01, s23, s45, s67) = (pair(v[0], v[1]), pair(v[2], v[3]), pair(v[4], v[5]), pair(v[6], v[7]));
        // Per half: [p_a, q_a, p_b, q_b] with p = s[0] + s[2], q = s[1] + s[3].
        let pq = |x: __m256, y: __m256| {
            _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(x, y), _mm256_shuffle_ps::<0b11_10_11_10>(x, y))
        };
        let (w0, w1) = (pq(s01, s23), pq(s45, s67));
        // p + q: lanes [t0, t2, t4, t6 | t1, t3, t5, t7].
        let t = _mm256_add_ps(_mm256_shuffle_ps::<0b10_00_10_00>(w0, w1), _mm256_shuffle_ps::<0b11_01_11_01>(w0, w1));
        _mm256_permutevar8x32_ps(t, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    #[cfg(test)]
    #[test]
    fn eight_lane_sums_at_once_equal_hsum_bit_for_bit() {
        if !crate::kernels::cpu::dispatch::CpuPath::Avx2.supported_by(crate::kernels::cpu::dispatch::CpuFeatures::get())
        {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let lanes: [[f32; 8]; 8] = std::array::from_fn(|_| {
                std::array::from_fn(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mixed magnitudes, so that the order of additions shows.
                    ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * [1e-4f32, 1.0, 1e4][(x % 3) as usize]
                })
            });
            // SAFETY: AVX2 checked above; every pointer holds eight floats.
            unsafe {
                let v: [__m256; 8] = std::array::from_fn(|i| _mm256_loadu_ps(lanes[i].as_ptr()));
                let mut got = [0.0f32; 8];
                _mm256_storeu_ps(got.as_mut_ptr(), hsum8(v));
                for i in 0..8 {
                    assert_eq!(got[i].to_bits(), hsum(v[i]).to_bits(), "vector {i}: {:?}", lanes[i]);
                }
            }
        }
    }

    /// The max-subtracted softmax weights of one head's scores in place, and
    /// their sum: [`super::exp_and_sum`] after the maximum, in registers.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn softmax_weights(s: &mut [f32]) -> f32 {
        let n = s.len();
        let full = n / 8 * 8;
        let p = s.as_mut_ptr();
        // The maximum is exact in any order.
        let mut mv = _mm256_set1_ps(f32::NEG_INFINITY);
        let mut j = 0;
        while j < full {
            // SAFETY: j + 8 <= n.
            mv = _mm256_max_ps(mv, unsafe { _mm256_loadu_ps(p.add(j)) });
            j += 8;
        }
        let mut lanes = [0.0f32; 8];
        // SAFETY: `lanes` holds eight floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), mv) };
        let max = s[full..].iter().chain(&lanes).fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        let m = _mm256_set1_ps(max);
        let mut sum = _mm256_setzero_ps();
        let mut j = 0;
        while j < full {
            // SAFETY: j + 8 <= n.
            unsafe {
                let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(p.add(j)), m));
                _mm256_storeu_ps(p.add(j), e);
                sum = _mm256_add_ps(sum, e);
            }
            j += 8;
        }
        let mut total = hsum(sum);
        for x in s[full..].iter_mut() {
            *x = crate::kernels::cpu::expf::exp(*x - max);
            total += *x;
        }
        total
    }
}

#[cfg(target_arch = "x86_64")]
#[path = "attention_avx512.rs"]
mod avx512;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{KvFormat, ValueScales};

    /// Naive f64 attention over unpaged K/V for one head.
    fn reference(q: &[f32], k: &[f32], v: &[f32], n: usize, hd: usize) -> Vec<f64> {
        let s: Vec<f64> = (0..n)
            .map(|j| (0..hd).map(|d| q[d] as f64 * k[j * hd + d] as f64).sum::<f64>() / (hd as f64).sqrt())
            .collect();
        let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..hd).map(|d| (0..n).map(|j| e[j] * v[j * hd + d] as f64).sum::<f64>() / z).collect()
    }

    #[test]
    fn matches_reference_across_pages_and_is_chunk_invariant() {
        // Head sizes with and without a tail past whole vectors, below and
        // above one 32-dimension block of the AVX2 weighted sum; 80 and 128
        // take the AVX-512 kernel's 64- and 16-dimension blocks.
        // Every storage format, read in place by the kernels. Query heads per
        // KV head 1 to 5: the AVX2 kernel's passes of 1, 2, 3 and 4 heads,
        // and 4 + 1.
        for format in [KvFormat::F16, KvFormat::Bf16, KvFormat::K16v8] {
            for hd in [8, 20, 72, 80, 128] {
                check_head_dim(format, hd, 4, 2);
            }
            for group in [1, 3, 4, 5] {
                check_head_dim(format, 64, 2 * group, 2);
            }
        }
    }

    fn check_head_dim(format: KvFormat, hd: usize, heads: usize, kv_heads: usize) {
        let len = 37;
        let shape = AttnShape { heads, kv_heads, head_dim: hd };
        let kv_dim = kv_heads * hd;
        let val = |i: usize, s: f32| ((i * 7919 % 113) as f32 / 113.0 - 0.5) * s;
        let k: Vec<f32> = (0..len * kv_dim).map(|i| val(i, 2.0)).collect();
        let v: Vec<f32> = (0..len * kv_dim).map(|i| val(i + 5, 1.0)).collect();
        let q: Vec<f32> = (0..len * heads * hd).map(|i| val(i + 11, 3.0)).collect();
        let scales = ValueScales { rule: "test".into(), scales: vec![0.75 / 448.0] };
        let mut cache = KvCache::new_poisoned(format, 1, kv_heads, hd, 8, Some(&scales)).unwrap();
        let mut t = cache.new_table();
        assert!(t.reserve(len));
        cache.write(0, &t, 0, &k, &v);
        cache.commit(&mut t, len);
        let run = |path, q: &[f32], rows, start_pos| {
            paged_attention(q, &[AttnSeq { table: &t, q_row: 0, rows, start_pos }], &cache, 0, shape, path)
        };
        let whole = run(CpuPath::Scalar, &q, len, 0);
        // Every path gives the scalar path's bits.
        for path in CpuPath::supported() {
            assert_eq!(run(path, &q, len, 0), whole, "{format} hd {hd} heads {heads} {path}");
        }
        // Reference on the stored K/V, copied out as f32 (`gather`), which for
        // 16-bit formats are the rounded inputs.
        let r16 = |x: f32| format.decode16(format.encode16(x));
        for pos in [0, 15, 16, 36] {
            for h in 0..heads {
                let kvh = h / (heads / kv_heads);
                let (mut kh, mut vh) = (Vec::new(), Vec::new());
                cache.gather(0, &t, kvh, pos + 1, &mut kh, &mut vh);
                assert_eq!(kh[pos * hd + 1], r16(k[pos * kv_dim + kvh * hd + 1]));
                if format != KvFormat::K16v8 {
                    assert_eq!(vh[pos * hd + 1], r16(v[pos * kv_dim + kvh * hd + 1]));
                }
                let want = reference(&q[pos * heads * hd + h * hd..][..hd], &kh, &vh, pos + 1, hd);
                for d in 0..hd {
                    let got = whole[pos * heads * hd + h * hd + d] as f64;
                    assert!(
                        (got - want[d]).abs() < 1e-5,
                        "{format} hd {hd} pos {pos} head {h} dim {d}: {got} vs {}",
                        want[d]
                    );
                }
            }
        }
        // The last 5 rows computed alone (a chunk), the last 4 (the fewest the
        // AVX-512 kernel takes) and the last one alone (decode) equal the
        // batched result bit for bit.
        for path in CpuPath::supported() {
            for from in [32, 33, 36] {
                let tail = run(path, &q[from * heads * hd..], len - from, from);
                assert_eq!(tail, whole[from * heads * hd..], "{format} hd {hd} rows {from}.. {path}");
            }
            // A decode row at a short context (fewer positions than the
            // kernels prefetch ahead, down to one).
            for pos in [0, 1, 2, 20] {
                let row = pos * heads * hd..(pos + 1) * heads * hd;
                let one = run(path, &q[row.clone()], 1, pos);
                assert_eq!(one, whole[row], "{format} hd {hd} row {pos} alone {path}");
            }
        }
    }
}
