//! The linear layer `y[M,N] = x[M,K] · W[N,K]ᵀ` (weights in Hugging Face
//! `[out, in]` layout), batch-invariant by construction.
//!
//! Why not a general GEMM library: BLAS-style GEMMs (the `gemm` crate included)
//! choose their k-blocking and micro-kernels from the problem shape, and take a
//! GEMV path when M = 1, so row i's result changes with M. Greedy decoding must
//! not depend on what else is in the batch (nor on prefill chunking or
//! recompute after preemption), so every output element here is computed by one
//! fixed sequence of operations: eight lanes accumulate `x[k..k+8] * w[k..k+8]`
//! for k = 0, 8, 16, ... (fused multiply-add where the CPU has it), the lanes are
//! summed by a fixed pairwise tree, and the tail (K mod 8) is added in order.
//! Tiles of several rows and columns only reuse loads; they never change that
//! sequence. `engine bench` compares this kernel with the `gemm` crate.
//!
//! Parallelism: output columns are split into chunks across the installed rayon
//! pool (coarse for decode batches, fine for prefill); each chunk reads its
//! weight rows once for all M rows.
//!
//! Paths (`CpuPath`, chosen by the caller): `avx2` uses FMA; `scalar` emulates
//! the same eight lanes without FMA, so its bits differ from `avx2` in the last
//! place, but each path is batch-invariant on its own. The `*_on` functions take
//! the path; the plain ones use the best path this CPU supports.
//!
//! Weights are f32 or 16-bit floats (`DenseElem`: f16, bf16) widened exactly to
//! f32 as they are loaded into registers, so a layer over 16-bit weights gives
//! the bits of the f32 layer over the widened values while reading half the
//! bytes.

use super::dispatch::{CpuFeatures, CpuPath};
use rayon::prelude::*;

/// An element of a dense weight matrix: f32, or a 16-bit float that converts
/// to f32 exactly (every f16 and bf16 value is an f32 value).
pub trait DenseElem: Copy + Send + Sync + 'static {
    fn to_f32(self) -> f32;

    /// Eight consecutive elements at `p`, widened to f32.
    ///
    /// # Safety
    /// `p..p + 8` must be readable, and the CPU must have AVX2 and F16C.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl DenseElem for f32 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: the caller guarantees eight readable values.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl DenseElem for half::f16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const half::f16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees eight readable values (16 bytes).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
}

impl DenseElem for half::bf16 {
    #[inline(always)]
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }

    #[cfg(target_arch = "x86_64")]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn load8(p: *const half::bf16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: the caller guarantees eight readable values (16 bytes). A
        // bf16 is the upper half of the f32 with the same value.
        unsafe {
            let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p as *const __m128i));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w))
        }
    }
}

/// Columns per parallel task with many rows (and the least with few): large
/// enough to amortise scheduling, small enough to balance 2..16 threads on the
/// narrow projections of small models.
pub(crate) const COLS_PER_TASK: usize = 32;

/// Up to this many rows (one row group of the tiles), a linear layer streams its
/// weights once.
const STREAM_ROWS: usize = 4;

/// Tasks per thread when streaming: two, enough to rebalance when a core is
/// taken by another process, and few enough that a task is long. An AMD Zen 4
/// (2 vCPUs, AVX-512 q8 tiles), alternated `engine bench` decode of 128 tokens
/// at batch 1, two a thread against four: 1.073x (8 of 8 rounds), 1.082x (12
/// of 16); one a thread within 1% of two; the AVX2 kernel within the noise
/// (0.99x). Prefetching each task's first blocks before it starts changed
/// nothing measurable (1.014x, 9 of 16), so cold task starts are the less
/// likely cause; the likelier one (not separated) is that at four a thread the
/// AVX-512 decode tile runs ragged over the small projections: a full tile of
/// 64 rows plus a one-group tile (576-row tasks of 80 rows) or two-group tiles
/// (the 192-row K and V projections: tasks of 32 rows).
const TASKS_PER_THREAD: usize = 2;

/// `y = x · Wᵀ` where `x` is `[m, k]`, `w` is `[n, k]` and `y` is `[m, n]`,
/// on the best path this CPU supports.
pub fn matmul(x: &[f32], w: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    matmul_on(CpuPath::best(), x, w, m, k, n)
}

/// As [`matmul`], on `path`.
pub fn matmul_on<E: DenseElem>(path: CpuPath, x: &[f32], w: &[E], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut y = vec![0.0f32; m * n];
    matmul_into_on(path, x, w, m, k, n, &mut y);
    y
}

/// As [`matmul`], writing into `y` (`[m, n]`, overwritten).
pub fn matmul_into(x: &[f32], w: &[f32], m: usize, k: usize, n: usize, y: &mut [f32]) {
    matmul_into_on(CpuPath::best(), x, w, m, k, n, y)
}

/// As [`matmul_into`], on `path`.
pub fn matmul_into_on<E: DenseElem>(path: CpuPath, x: &[f32], w: &[E], m: usize, k: usize, n: usize, y: &mut [f32]) {
    assert_eq!(x.len(), m * k, "matmul: x has {} values, expected {m}x{k}", x.len());
    assert_eq!(w.len(), n * k, "matmul: w has {} values, expected {n}x{k}", w.len());
    assert_eq!(y.len(), m * n, "matmul: y has {} values, expected {m}x{n}", y.len());
    if m == 0 || n == 0 {
        return;
    }
    let kernel = Kernel::new(path);
    par_columns(m, n, y, columns_per_task(m, n), |c0, c1, out| kernel.block(x, w, m, k, c0, c1, out));
}

/// Runs `block(c0, c1, out)` for column blocks of `width` across the installed
/// rayon pool (`out` is `[m, c1 - c0]`) and assembles `y` (`[m, n]`). Tasks
/// never share memory; each reads its weight rows once for all rows. The
/// partition never changes what an output element is computed from, only which
/// thread does it.
pub(crate) fn par_columns<F>(m: usize, n: usize, y: &mut [f32], width: usize, block: F)
where
    F: Fn(usize, usize, &mut [f32]) + Sync,
{
    if m == 1 {
        // One row: a column block is a contiguous slice of `y`.
        y.par_chunks_mut(width).enumerate().for_each(|(b, out)| {
            let c0 = b * width;
            block(c0, c0 + out.len(), out)
        });
        return;
    }
    let blocks: Vec<(usize, Vec<f32>)> = (0..n.div_ceil(width))
        .into_par_iter()
        .map(|b| {
            let c0 = b * width;
            let c1 = (c0 + width).min(n);
            let mut out = vec![0.0f32; m * (c1 - c0)];
            block(c0, c1, &mut out);
            (c0, out)
        })
        .collect();
    for (c0, out) in blocks {
        let width = out.len() / m;
        for i in 0..m {
            y[i * n + c0..i * n + c0 + width].copy_from_slice(&out[i * width..(i + 1) * width]);
        }
    }
}

/// Columns per task for `m` rows through kernels that read the weights in
/// place. Up to one row group (`STREAM_ROWS`) every weight is read once, so the
/// cost is streaming them, and a fork costs microseconds per task: a few large
/// tasks per thread (still dynamically balanced, since a core may be taken by
/// another process). More rows reuse each weight block across row groups: small
/// blocks that stay in cache.
pub(crate) fn columns_per_task(m: usize, n: usize) -> usize {
    if m <= STREAM_ROWS {
        n.div_ceil(rayon::current_num_threads() * TASKS_PER_THREAD).max(COLS_PER_TASK)
    } else {
        COLS_PER_TASK
    }
}

/// Columns `c0..c1` of `x · wᵀ` for all `m` rows into `out` (`[m, c1 - c0]`),
/// on the calling thread, with exactly the per-element sequence of
/// [`matmul_on`] on `path`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn block_serial(
    path: CpuPath,
    x: &[f32],
    w: &[f32],
    m: usize,
    k: usize,
    c0: usize,
    c1: usize,
    out: &mut [f32],
) {
    Kernel::new(path).block(x, w, m, k, c0, c1, out);
}

/// Dot product with exactly the per-element operation sequence of [`matmul`]
/// (used by tests and by single-row callers).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut y = [0.0f32];
    Kernel::new(CpuPath::best()).block(a, b, 1, a.len(), 0, 1, &mut y);
    y[0]
}

#[derive(Clone, Copy)]
enum Kernel {
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx2Fma,
}

impl Kernel {
    /// The micro-kernels of `path`. Panics if this CPU cannot run `path`
    /// (callers check paths once, with `CpuPath::checked`).
    fn new(path: CpuPath) -> Self {
        assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
        match path {
            CpuPath::Scalar => Kernel::Portable,
            #[cfg(target_arch = "x86_64")]
            CpuPath::Avx2 | CpuPath::Avx512 | CpuPath::Amx => Kernel::Avx2Fma,
            #[cfg(not(target_arch = "x86_64"))]
            CpuPath::Avx2 | CpuPath::Avx512 | CpuPath::Amx => Kernel::Portable,
        }
    }

    /// Computes columns `c0..c1` of `y` for all `m` rows into `out` (`[m, c1-c0]`).
    #[allow(clippy::too_many_arguments)]
    fn block<E: DenseElem>(self, x: &[f32], w: &[E], m: usize, k: usize, c0: usize, c1: usize, out: &mut [f32]) {
        match self {
            Kernel::Portable => portable::block(x, w, m, k, c0, c1, out),
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Kernel::new` checked that AVX2, FMA and F16C were detected.
            Kernel::Avx2Fma => unsafe { avx2::block(x, w, m, k, c0, c1, out) },
        }
    }
}

mod portable {
    //! Eight-lane emulation without FMA: the same lane structure as the AVX2 path
    //! (so it is batch-invariant too), used where AVX2/FMA are absent.

    use super::DenseElem;

    pub fn block<E: DenseElem>(x: &[f32], w: &[E], m: usize, k: usize, c0: usize, c1: usize, out: &mut [f32]) {
        let width = c1 - c0;
        for i in 0..m {
            let xr = &x[i * k..(i + 1) * k];
            for j in c0..c1 {
                let wr = &w[j * k..(j + 1) * k];
                out[i * width + (j - c0)] = dot8(xr, wr);
            }
        }
    }

    fn dot8<E: DenseElem>(a: &[f32], b: &[E]) -> f32 {
        let k = a.len();
        let mut lanes = [0.0f32; 8];
        let full = k / 8 * 8;
        for (ca, cb) in a[..full].chunks_exact(8).zip(b[..full].chunks_exact(8)) {
            for l in 0..8 {
                lanes[l] += ca[l] * cb[l].to_f32();
            }
        }
        let mut s = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
        for t in full..k {
            s += a[t] * b[t].to_f32();
        }
        s
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    //! AVX2 + FMA micro-kernels. Every output element: one 8-lane accumulator,
    //! FMA over k in steps of 8, then `hsum`, then the scalar tail with FMA.
    use super::DenseElem;
    use std::arch::x86_64::*;

    /// Rows per tile and columns per tile; 4 x 3 = 12 accumulators + loads fit
    /// the 16 YMM registers.
    const MR: usize = super::STREAM_ROWS;
    const NR: usize = 3;
    /// Columns per tile for a single row (a decode step): 8 independent
    /// accumulator chains hide the FMA latency, and the weight rows stream once.
    const NR_ONE_ROW: usize = 8;

    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn block<E: DenseElem>(x: &[f32], w: &[E], m: usize, k: usize, c0: usize, c1: usize, out: &mut [f32]) {
        let width = c1 - c0;
        // One row group streams the weights from memory once: prefetch ahead.
        // With more, the column block is reused from cache.
        let stream = m <= super::STREAM_ROWS;
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(MR);
            let mut j = c0;
            while j < c1 {
                let cols = (c1 - j).min(if rows == 1 { NR_ONE_ROW } else { NR });
                // SAFETY: tile bounds are inside x, w and out (checked by caller's asserts).
                unsafe {
                    match (rows, cols) {
                        (1, 8) => tile::<E, 1, 8>(x, w, k, i, j, out, width, c0, stream),
                        (1, 7) => tile::<E, 1, 7>(x, w, k, i, j, out, width, c0, stream),
                        (1, 6) => tile::<E, 1, 6>(x, w, k, i, j, out, width, c0, stream),
                        (1, 5) => tile::<E, 1, 5>(x, w, k, i, j, out, width, c0, stream),
                        (1, 4) => tile::<E, 1, 4>(x, w, k, i, j, out, width, c0, stream),
                        (4, 3) => tile::<E, 4, 3>(x, w, k, i, j, out, width, c0, stream),
                        (4, 2) => tile::<E, 4, 2>(x, w, k, i, j, out, width, c0, stream),
                        (4, 1) => tile::<E, 4, 1>(x, w, k, i, j, out, width, c0, stream),
                        (3, 3) => tile::<E, 3, 3>(x, w, k, i, j, out, width, c0, stream),
                        (3, 2) => tile::<E, 3, 2>(x, w, k, i, j, out, width, c0, stream),
                        (3, 1) => tile::<E, 3, 1>(x, w, k, i, j, out, width, c0, stream),
                        (2, 3) => tile::<E, 2, 3>(x, w, k, i, j, out, width, c0, stream),
                        (2, 2) => tile::<E, 2, 2>(x, w, k, i, j, out, width, c0, stream),
                        (2, 1) => tile::<E, 2, 1>(x, w, k, i, j, out, width, c0, stream),
                        (1, 3) => tile::<E, 1, 3>(x, w, k, i, j, out, width, c0, stream),
                        (1, 2) => tile::<E, 1, 2>(x, w, k, i, j, out, width, c0, stream),
                        _ => tile::<E, 1, 1>(x, w, k, i, j, out, width, c0, stream),
                    }
                }
                j += cols;
            }
            i += rows;
        }
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn tile<E: DenseElem, const R: usize, const C: usize>(
        x: &[f32],
        w: &[E],
        k: usize,
        i0: usize,
        j0: usize,
        out: &mut [f32],
        width: usize,
        c0: usize,
        stream: bool,
    ) {
        let full = k / 8 * 8;
        let xp = x.as_ptr();
        let wp = w.as_ptr();
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        // When streaming, the weight rows of the tile after next follow in memory: prefetch them
        // one cache line (64 bytes) per row at a time, so their streams start warm
        // (measured: decode at batch 1 gains a few percent over the next tile).
        // (A prefetch never faults; `wrapping_add` keeps the address arithmetic
        // defined past the end of `w`.)
        let next = wp.wrapping_add((j0 + 2 * C) * k);
        let mut kk = 0;
        while kk < full {
            if stream && kk % (64 / std::mem::size_of::<E>()) == 0 {
                for c in 0..C {
                    _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(c * k + kk) as *const i8);
                }
            }
            let mut wv = [_mm256_setzero_ps(); C];
            for (c, wvc) in wv.iter_mut().enumerate() {
                // SAFETY: (j0 + c) < n and kk + 8 <= k.
                *wvc = unsafe { E::load8(wp.add((j0 + c) * k + kk)) };
            }
            for (r, accr) in acc.iter_mut().enumerate() {
                // SAFETY: (i0 + r) < m and kk + 8 <= k.
                let xv = unsafe { _mm256_loadu_ps(xp.add((i0 + r) * k + kk)) };
                for (c, a) in accr.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(xv, wv[c], *a);
                }
            }
            kk += 8;
        }
        for (r, accr) in acc.iter().enumerate() {
            for (c, a) in accr.iter().enumerate() {
                let mut s = hsum(*a);
                for t in full..k {
                    s = x[(i0 + r) * k + t].mul_add(w[(j0 + c) * k + t].to_f32(), s);
                }
                out[(i0 + r) * width + (j0 + c - c0)] = s;
            }
        }
    }

    /// Fixed pairwise lane sum: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub(crate) fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps::<1>(v);
        let s4 = _mm_add_ps(lo, hi); // [l0+l4, l1+l5, l2+l6, l3+l7]
        let sh = _mm_movehl_ps(s4, s4); // [l2+l6, l3+l7, ..]
        let s2 = _mm_add_ps(s4, sh); // [(l0+l4)+(l2+l6), (l1+l5)+(l3+l7), ..]
        let s1 = _mm_add_ss(s2, _mm_shuffle_ps::<0b01>(s2, s2));
        _mm_cvtss_f32(s1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pseudo(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
            })
            .collect()
    }

    #[test]
    fn matches_f64_reference() {
        let (m, k, n) = (7, 83, 45);
        let x = pseudo(m * k, 1);
        let w = pseudo(n * k, 2);
        let y = matmul(&x, &w, m, k, n);
        for i in 0..m {
            for j in 0..n {
                let r: f64 = (0..k).map(|t| x[i * k + t] as f64 * w[j * k + t] as f64).sum();
                assert!((y[i * n + j] as f64 - r).abs() < 1e-4, "({i},{j}) {} vs {r}", y[i * n + j]);
            }
        }
    }

    #[test]
    fn rows_do_not_depend_on_batch_size() {
        let (k, n) = (576, 200);
        let x = pseudo(13 * k, 3);
        let w = pseudo(n * k, 4);
        let full = matmul(&x, &w, 13, k, n);
        for i in 0..13 {
            let alone = matmul(&x[i * k..(i + 1) * k], &w, 1, k, n);
            assert_eq!(alone, full[i * n..(i + 1) * n], "row {i} differs alone vs in a batch of 13");
        }
        // Sub-batches starting at other offsets use other tile shapes.
        let part = matmul(&x[5 * k..11 * k], &w, 6, k, n);
        assert_eq!(part, full[5 * n..11 * n]);
    }

    #[test]
    fn rows_do_not_depend_on_batch_size_tile_shape_or_thread_count() {
        // Every tile shape (one-row tiles of 1..8 columns, 4x3 and its tails),
        // streamed and cached partitions, with 1, 2 and 3 threads.
        let k = 75;
        for threads in [1, 2, 3] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            for n in [1, 2, 7, 8, 9, 17, 100, 301] {
                let x = pseudo(9 * k, 7 + n as u64);
                let w = pseudo(n * k, 8 + n as u64);
                let full = pool.install(|| matmul(&x, &w, 9, k, n));
                for m in [1, 2, 3, 4, 5] {
                    let part = pool.install(|| matmul(&x[..m * k], &w, m, k, n));
                    assert_eq!(part, full[..m * n], "threads {threads}, n {n}, m {m}");
                }
                for j in 0..n {
                    let r: f64 = (0..k).map(|t| x[t] as f64 * w[j * k + t] as f64).sum();
                    assert!((full[j] as f64 - r).abs() < 1e-4, "threads {threads}, n {n}, column {j}");
                }
            }
        }
    }

    #[test]
    fn every_cpu_path_is_batch_invariant_and_near_the_f64_reference() {
        let (k, n) = (83, 37);
        let x = pseudo(9 * k, 11);
        let w = pseudo(n * k, 12);
        for path in CpuPath::supported() {
            let full = matmul_on(path, &x, &w, 9, k, n);
            for m in [1, 2, 3, 5] {
                assert_eq!(matmul_on(path, &x[..m * k], &w, m, k, n), full[..m * n], "{path} m {m}");
            }
            for (i, j) in (0..9).flat_map(|i| (0..n).map(move |j| (i, j))) {
                let r: f64 = (0..k).map(|t| x[i * k + t] as f64 * w[j * k + t] as f64).sum();
                assert!((full[i * n + j] as f64 - r).abs() < 1e-4, "{path} ({i},{j})");
            }
        }
    }

    #[test]
    fn dot_is_the_same_operation_sequence() {
        let k = 100;
        let a = pseudo(k, 5);
        let b = pseudo(k, 6);
        assert_eq!(dot(&a, &b), matmul(&a, &b, 1, k, 1)[0]);
    }
}
