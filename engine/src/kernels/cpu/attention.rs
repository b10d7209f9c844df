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
//! multiply-adds, a fixed lane sum and the tail in order. The scalar path
//! writes the same steps out with `mul_add`, so both paths give the same bits.

use super::dispatch::{CpuFeatures, CpuPath};
use super::team::map_indices;
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

/// (sequence, KV head, first row, end row): one unit of parallel work.
type Task = (usize, usize, usize, usize);

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
    let scale = 1.0 / (hd as f32).sqrt();
    let parts: Vec<(Task, Vec<f32>)> = map_indices(tasks.len(), |t| {
        let (s, kvh, r0, r1) = tasks[t];
        let seq = &seqs[s];
        let ctx = seq.start_pos + r1;
        let view = cache.head_view(layer, seq.table, kvh, ctx);
        let mut out = vec![0.0f32; (r1 - r0) * group * hd];
        let mut scores = vec![0.0f32; ctx];
        let mut row = vec![0.0f32; hd];
        for r in r0..r1 {
            let pos = seq.start_pos + r;
            let qrow = &q[(seq.q_row + r) * q_dim..(seq.q_row + r + 1) * q_dim];
            for g in 0..group {
                let h = kvh * group + g;
                let qh = &qrow[h * hd..(h + 1) * hd];
                let o = &mut out[((r - r0) * group + g) * hd..((r - r0) * group + g + 1) * hd];
                match path {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the assert above checked that this CPU has AVX2, FMA and F16C.
                    CpuPath::Avx2 | CpuPath::Avx512 | CpuPath::Amx => unsafe {
                        avx2::attend_one(qh, &view, pos + 1, scale, &mut scores, o)
                    },
                    _ => attend_one(qh, &view, pos + 1, scale, &mut scores, &mut row, o),
                }
            }
        }
        ((s, kvh, r0, r1), out)
    });
    let mut y = vec![0.0f32; total_rows * q_dim];
    for ((s, kvh, r0, r1), out) in parts {
        let seq = &seqs[s];
        for r in r0..r1 {
            for g in 0..group {
                let h = kvh * group + g;
                let dst = (seq.q_row + r) * q_dim + h * hd;
                let src = ((r - r0) * group + g) * hd;
                y[dst..dst + hd].copy_from_slice(&out[src..src + hd]);
            }
        }
    }
    y
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
    let mut sum = 0.0f32;
    for s in scores[..n].iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
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

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! [`super::attend_one`] in AVX2 + FMA registers, reading the pages in
    //! place: eight elements of a key or value row are loaded and converted to
    //! f32 in one step (`load8`), the format fixed at compile time.
    use crate::kernels::cpu::matmul::avx2::hsum;
    use crate::kv::{HeadValues, HeadView, KvFormat};
    use std::arch::x86_64::*;

    /// Storage formats of one row, as const parameters.
    const F16: u8 = 0;
    const BF16: u8 = 1;
    const E4M3: u8 = 2;

    /// Bytes per stored element.
    const fn width(f: u8) -> usize {
        if f == E4M3 { 1 } else { 2 }
    }

    /// 2^120: the factor from an E4M3 code's bits, shifted into an f32, to its value.
    const E4M3_TO_F32: f32 = f32::from_bits((127 + 120) << 23);

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

    /// Keys per dot-product pass and value dimensions per weighted-sum pass:
    /// eight independent FMA chains each, enough to hide the FMA latency.
    const KEYS: usize = 8;
    const DIMS: usize = 64;

    /// `out[c..c + 8V] = Σ_j p_j · v_j[c..c + 8V]`, each element by FMA with j
    /// ascending from zero, `V` vectors in registers over all positions.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weighted_sum<const V: usize, const F: u8>(
        scores: &[f32],
        view: &HeadView<'_>,
        vp: *const u8,
        dec: Decode,
        c: usize,
        out: &mut [f32],
    ) {
        assert!(c + 8 * V <= out.len());
        let mut acc = [_mm256_setzero_ps(); V];
        for (j, &p) in scores.iter().enumerate() {
            let pv = _mm256_set1_ps(p);
            let row = vp.wrapping_add(view.offset(j) * width(F));
            for (t, a) in acc.iter_mut().enumerate() {
                // SAFETY (caller): position j < view.len, c + 8V <= head_dim.
                *a = unsafe { _mm256_fmadd_ps(pv, load8::<F>(row.add((c + 8 * t) * width(F)), dec), *a) };
            }
        }
        for (t, a) in acc.iter().enumerate() {
            // SAFETY: c + 8t + 8 <= out.len() (asserted).
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(c + 8 * t), *a) };
        }
    }

    /// [`super::attend_one`] over `view` with its steps in registers.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn attend_one(
        q: &[f32],
        view: &HeadView<'_>,
        n: usize,
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        // SAFETY: this function's features.
        unsafe {
            match (view.format, view.values) {
                (KvFormat::Bf16, _) => attend::<BF16, BF16>(q, view, n, scale, scores, out),
                (_, HeadValues::E4m3 { .. }) => attend::<F16, E4M3>(q, view, n, scale, scores, out),
                _ => attend::<F16, F16>(q, view, n, scale, scores, out),
            }
        }
    }

    /// Keys stored as `K`, values as `V`: `KEYS` keys' dot products at a time
    /// (each the scalar `dot`'s steps), then the weighted sum of values `DIMS`
    /// dimensions at a time with the accumulators in registers over all
    /// positions (each element still `fma(p_j, v_j, ·)` for j ascending).
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn attend<const K: u8, const V: u8>(
        q: &[f32],
        view: &HeadView<'_>,
        n: usize,
        scale: f32,
        scores: &mut [f32],
        out: &mut [f32],
    ) {
        let hd = view.head_dim;
        assert!(n <= view.len && q.len() == hd && out.len() == hd && scores.len() >= n);
        let full = hd / 8 * 8;
        let qp = q.as_ptr();
        let kp = view.keys.as_ptr() as *const u8;
        let (vp, dec) = match view.values {
            HeadValues::Half(store) => (store.as_ptr() as *const u8, Decode { table: std::ptr::null(), scale: 1.0 }),
            HeadValues::E4m3 { codes, table, scale } => (codes.as_ptr(), Decode { table: table.as_ptr(), scale }),
        };
        let kw = width(K);
        let mut max = f32::NEG_INFINITY;
        let mut j = 0;
        while j < n {
            let keys = (n - j).min(KEYS);
            let rows: [*const u8; KEYS] =
                std::array::from_fn(|t| kp.wrapping_add(view.offset(j + t.min(keys - 1)) * kw));
            let mut acc = [_mm256_setzero_ps(); KEYS];
            let mut i = 0;
            while i < full {
                // SAFETY: i + 8 <= hd and every row is a position < n.
                unsafe {
                    let qv = _mm256_loadu_ps(qp.add(i));
                    for (t, a) in acc.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(qv, load8::<K>(rows[t].add(i * kw), dec), *a);
                    }
                }
                i += 8;
            }
            for (t, a) in acc.iter().enumerate().take(keys) {
                let mut s = hsum(*a);
                for (e, &qe) in q.iter().enumerate().take(hd).skip(full) {
                    // SAFETY: e < hd.
                    s = qe.mul_add(unsafe { load1::<K>(rows[t].add(e * kw), dec) }, s);
                }
                let s = s * scale;
                scores[j + t] = s;
                max = max.max(s);
            }
            j += keys;
        }
        let mut sum = 0.0f32;
        for s in scores[..n].iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        let scores = &scores[..n];
        let mut c = 0;
        while c + DIMS <= full {
            // SAFETY: c + DIMS <= hd; positions < n <= view.len.
            unsafe { weighted_sum::<{ DIMS / 8 }, V>(scores, view, vp, dec, c, out) };
            c += DIMS;
        }
        while c < full {
            // SAFETY: c + 8 <= hd.
            unsafe { weighted_sum::<1, V>(scores, view, vp, dec, c, out) };
            c += 8;
        }
        for (e, oe) in out.iter_mut().enumerate().take(hd).skip(full) {
            let mut o = 0.0f32;
            for (jj, &p) in scores.iter().enumerate() {
                // SAFETY: position jj < view.len, e < hd.
                let x = unsafe { load1::<V>(vp.wrapping_add((view.offset(jj) + e) * width(V)), dec) };
                o = p.mul_add(x, o);
            }
            *oe = o;
        }
        let inv = 1.0 / sum;
        for o in out.iter_mut() {
            *o *= inv;
        }
    }
}

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
        // above one 32-dimension block of the AVX2 weighted sum.
        // Every storage format, read in place by the kernels.
        for format in [KvFormat::F16, KvFormat::Bf16, KvFormat::K16v8] {
            for hd in [8, 20, 72] {
                check_head_dim(format, hd);
            }
        }
    }

    fn check_head_dim(format: KvFormat, hd: usize) {
        let (heads, kv_heads, len) = (4, 2, 37);
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
            assert_eq!(run(path, &q, len, 0), whole, "{format} hd {hd} {path}");
        }
        // Reference on the stored K/V, copied out as f32 (`gather`), which for
        // 16-bit formats are the rounded inputs.
        let r16 = |x: f32| format.decode16(format.encode16(x));
        for pos in [0, 15, 16, 36] {
            for h in 0..heads {
                let kvh = h / 2;
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
        // The last 5 rows computed alone (decode-like) equal the batched result bit for bit.
        for path in CpuPath::supported() {
            let tail = run(path, &q[32 * heads * hd..], 5, 32);
            assert_eq!(tail, whole[32 * heads * hd..], "{format} hd {hd} {path}");
        }
    }
}
