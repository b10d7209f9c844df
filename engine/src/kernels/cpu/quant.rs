//! Linear layers over weights kept in their GGUF block-quantized form (Q4_0,
//! Q4_1, Q5_0, Q8_0, and Q4_K and Q6_K repacked into blocks of 32),
//! dequantized inside the kernel. Each weight is rebuilt with exactly the operations the loader
//! uses (`d * (q - 8)` for Q4_0, `d * q + m` for Q4_1 (and Q4_K, with
//! `d = d_K * sc` and `m = -(dmin_K * m_K)`, both exact in f32), `d * (q - 16)`
//! for Q5_0, `d * q` for Q8_0, `(d * sc) * (q - 32)` for Q6_K, in f32,
//! unfused), and the dot products follow
//! exactly the lane structure of `matmul` (eight lanes, k ascending in steps
//! of 8, fixed final sum). So a quantized layer gives bit-for-bit the result of
//! the f32 layer built from the dequantized tensor, while reading 4.5 to 8.5 bits per weight instead of 32.
//!
//! This is the exact path (`--exact-quant-matmul`), kept for parity studies
//! against f32 references; the default for quantized weights is the
//! activation-quantized path in `q8`. Both take the `CpuPath` to run on.

use super::dispatch::{CpuFeatures, CpuPath};
use super::matmul::{COLS_PER_TASK, block_serial, columns_per_task, par_columns};
use super::q8_pack::Packed;
use std::sync::OnceLock;

/// From this many rows on, a column block is dequantized once into f32 and the
/// f32 kernel runs over it; below, weights are dequantized inside the tiles.
const DEQUANT_FIRST_ROWS: usize = 4;
use half::f16;

/// Values per quantization block.
pub const QK: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantKind {
    /// `{f16 d; u8 qs[16]}`: low nibbles are elements 0..16, high 16..32;
    /// `x = d * (q - 8)`.
    Q4_0,
    /// `{f16 d; f16 m; u8 qs[16]}`: low nibbles are elements 0..16, high 16..32;
    /// `x = d * q + m`.
    Q4_1,
    /// `{f16 d; u8 qh[4]; u8 qs[16]}`: element `e`'s low four bits are nibbles
    /// as in Q4_0, its fifth bit is bit `e` of `qh` (a little-endian u32);
    /// `x = d * (q - 16)`.
    Q5_0,
    /// `{f16 d; i8 qs[32]}`: `x = d * q`.
    Q8_0,
    /// GGUF Q4_K, each 256-value super-block repacked at load into eight
    /// blocks of 32 (`gguf::repack_q4_k`): `{f16 d; f16 dmin; u8 sc; u8 m; u8
    /// qs[16]}`, the super-block's two scales repeated, the sub-block's 6-bit
    /// scale and minimum unpacked, nibbles as Q4_1's; `x = (d * sc) * q -
    /// dmin * m`, ggml's `dequantize_row_q4_K` value for value. 5.5 bits a
    /// weight (the file's 4.5, plus the repeated scales).
    Q4K,
    /// GGUF Q6_K, each 256-value super-block repacked at load into eight
    /// blocks of 32 (`gguf::repack_q6_k`): `{f16 d; i8 sc[2]; u32 qh4; u32
    /// qh5; u8 ql[16]}`: the super-block's scale repeated, the two 16-value
    /// sub-block scales, bit 4 and bit 5 of element `e`'s six-bit quant as bit
    /// `e` of `qh4` and `qh5`, its low four bits as nibbles as Q4_0's; `x =
    /// (d * sc[e / 16]) * (q - 32)`, ggml's `dequantize_row_q6_K` value for
    /// value. 7 bits a weight (the file's 6.56).
    Q6K,
}

impl QuantKind {
    /// Every kind, for tests and listings.
    pub const ALL: [QuantKind; 6] =
        [QuantKind::Q4_0, QuantKind::Q4_1, QuantKind::Q5_0, QuantKind::Q8_0, QuantKind::Q4K, QuantKind::Q6K];

    /// `"q4_0"`, `"q4_1"`, `"q5_0"`, `"q8_0"`, `"q4_k"` or `"q6_k"`.
    pub fn name(self) -> &'static str {
        match self {
            QuantKind::Q4_0 => "q4_0",
            QuantKind::Q4_1 => "q4_1",
            QuantKind::Q5_0 => "q5_0",
            QuantKind::Q8_0 => "q8_0",
            QuantKind::Q4K => "q4_k",
            QuantKind::Q6K => "q6_k",
        }
    }

    pub fn block_bytes(self) -> usize {
        match self {
            QuantKind::Q4_0 => 18,
            QuantKind::Q4_1 => 20,
            QuantKind::Q5_0 | QuantKind::Q4K => 22,
            QuantKind::Q6K => 28,
            QuantKind::Q8_0 => 34,
        }
    }

    /// Where a block's quants (nibbles or bytes) start: after its f16 scale,
    /// Q4_1's minimum, Q5_0's high bits, Q4_K's scales.
    pub fn quants_at(self) -> usize {
        match self {
            QuantKind::Q4_1 => 4,
            QuantKind::Q5_0 | QuantKind::Q4K => 6,
            QuantKind::Q6K => 12,
            QuantKind::Q4_0 | QuantKind::Q8_0 => 2,
        }
    }

    /// Whether a block has a minimum term (`x = d * q + m`): Q4_1, Q4_K.
    pub fn has_mins(self) -> bool {
        matches!(self, QuantKind::Q4_1 | QuantKind::Q4K)
    }

    /// A block's scale `d` and minimum `m` (0 where the kind has none) as
    /// f32, from its bytes: the f16 fields, or Q4_K's exact products.
    #[inline]
    pub fn scales(self, blk: &[u8]) -> (f32, f32) {
        let h = |i: usize| f16::from_le_bytes([blk[i], blk[i + 1]]).to_f32();
        match self {
            QuantKind::Q4_1 => (h(0), h(2)),
            QuantKind::Q4K => (h(0) * f32::from(blk[4]), -(h(2) * f32::from(blk[5]))),
            QuantKind::Q4_0 | QuantKind::Q5_0 | QuantKind::Q8_0 | QuantKind::Q6K => (h(0), 0.0),
        }
    }

    /// Whether the quants are packed nibbles (Q4_0, Q4_1, Q5_0's low bits)
    /// rather than bytes.
    pub fn nibbles(self) -> bool {
        self != QuantKind::Q8_0
    }

    /// What a stored quant (nibble, or Q5_0's five bits) is offset by: `q - 8`
    /// for Q4_0, `q - 16` for Q5_0, 0 otherwise.
    pub fn nibble_offset(self) -> i32 {
        match self {
            QuantKind::Q4_0 => 8,
            QuantKind::Q5_0 => 16,
            QuantKind::Q4_1 | QuantKind::Q8_0 | QuantKind::Q4K => 0,
            QuantKind::Q6K => 32,
        }
    }

    /// The kind as a const-generic parameter of the kernels ([`kind_id`]).
    pub const fn id(self) -> u8 {
        match self {
            QuantKind::Q4_0 => kind_id::Q4_0,
            QuantKind::Q4_1 => kind_id::Q4_1,
            QuantKind::Q5_0 => kind_id::Q5_0,
            QuantKind::Q8_0 => kind_id::Q8_0,
            QuantKind::Q4K => kind_id::Q4K,
            QuantKind::Q6K => kind_id::Q6K,
        }
    }
}

/// [`QuantKind::id`]: the kernels are monomorphized per kind over a `u8`
/// (stable Rust has no enum const generics).
pub mod kind_id {
    pub const Q4_0: u8 = 0;
    pub const Q4_1: u8 = 1;
    pub const Q8_0: u8 = 2;
    pub const Q5_0: u8 = 3;
    pub const Q4K: u8 = 4;
    pub const Q6K: u8 = 5;
}

/// Element `e`'s six-bit quant (0..63) of a repacked Q6_K block (`blk` its 28
/// bytes).
#[inline]
pub fn q6k_quant(blk: &[u8], e: usize) -> u8 {
    let nib = (blk[12 + e % 16] >> (4 * (e / 16))) & 0x0f;
    let bit = |at: usize| (blk[at + e / 8] >> (e % 8)) & 1;
    nib | bit(4) << 4 | bit(8) << 5
}

/// Sub-block `h` (0: elements 0..16, 1: 16..32) scale of a repacked Q6_K block.
#[inline]
pub fn q6k_scale(blk: &[u8], h: usize) -> i32 {
    i32::from(blk[2 + h] as i8)
}

/// Element `e`'s fifth bit of a Q5_0 block (`blk` its 22 bytes), as 0 or 16.
#[inline]
pub fn q5_high(blk: &[u8], e: usize) -> u8 {
    ((blk[2 + e / 8] >> (e % 8)) & 1) << 4
}

/// A `[rows, cols]` matrix of quantized blocks, held in the layout its kernels
/// read: rows of GGUF blocks (`data`, for the scalar, AVX2 and exact paths) or
/// the 16-row interleaved copy (`packed16`, the AVX-512 q8 kernels). Either is
/// built from the other on first use; [`QuantMatrix::keep_layout`] drops the
/// one the kernels do not read, so a model holds its weights once.
#[derive(Debug, Clone)]
pub struct QuantMatrix {
    pub kind: QuantKind,
    pub rows: usize,
    pub cols: usize,
    /// Rows of GGUF blocks (absent while only the packed layout is kept).
    data: OnceLock<Vec<u8>>,
    /// The 16-row interleaved layout (absent until the AVX-512 q8 kernels need it).
    packed: OnceLock<Packed>,
}

impl QuantMatrix {
    /// `None` unless `cols` is a multiple of 32 and `data` has exactly the bytes.
    pub fn new(kind: QuantKind, rows: usize, cols: usize, data: Vec<u8>) -> Option<Self> {
        (cols.is_multiple_of(QK) && data.len() == rows * cols / QK * kind.block_bytes()).then_some(QuantMatrix {
            kind,
            rows,
            cols,
            data: OnceLock::from(data),
            packed: OnceLock::new(),
        })
    }

    /// Rows of GGUF blocks (rebuilt from the packed layout if it was dropped).
    pub fn data(&self) -> &[u8] {
        self.data.get_or_init(|| self.packed.get().expect("a quantized matrix keeps one layout").unpack())
    }

    /// The 16-row interleaved layout (`q8_pack`), built on first call.
    pub fn packed16(&self) -> &Packed {
        self.packed.get_or_init(|| Packed::new(self))
    }

    /// The 16-row interleaved layout if it was built (never builds it).
    pub fn packed16_if_built(&self) -> Option<&Packed> {
        self.packed.get()
    }

    /// Keeps only the packed layout (`packed`: the AVX-512 q8 kernels) or only
    /// the rows of blocks (every other path), building it first if needed.
    pub fn keep_layout(&mut self, packed: bool) {
        if packed {
            self.packed16();
            self.data.take();
        } else {
            self.data();
            self.packed.take();
        }
    }

    /// Which layouts are held now: `(rows of blocks, packed)`.
    pub fn layouts(&self) -> (bool, bool) {
        (self.data.get().is_some(), self.packed.get().is_some())
    }

    fn row_bytes(&self) -> usize {
        self.cols / QK * self.kind.block_bytes()
    }

    /// Row `r` dequantized exactly as the loader does.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        let rb = self.row_bytes();
        let bb = self.kind.block_bytes();
        for (blk, o) in self.data()[r * rb..(r + 1) * rb].chunks_exact(bb).zip(out.chunks_exact_mut(QK)) {
            let (d, m) = self.kind.scales(blk);
            match self.kind {
                QuantKind::Q4_0 => {
                    for (j, &q) in blk[2..18].iter().enumerate() {
                        o[j] = d * ((q & 0x0f) as i32 - 8) as f32;
                        o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
                    }
                }
                QuantKind::Q5_0 => {
                    for (j, &q) in blk[6..22].iter().enumerate() {
                        o[j] = d * (((q & 0x0f) | q5_high(blk, j)) as i32 - 16) as f32;
                        o[j + 16] = d * (((q >> 4) | q5_high(blk, j + 16)) as i32 - 16) as f32;
                    }
                }
                QuantKind::Q4_1 | QuantKind::Q4K => {
                    let at = self.kind.quants_at();
                    for (j, &q) in blk[at..at + 16].iter().enumerate() {
                        o[j] = d * (q & 0x0f) as f32 + m;
                        o[j + 16] = d * (q >> 4) as f32 + m;
                    }
                }
                QuantKind::Q8_0 => {
                    for (j, &q) in blk[2..34].iter().enumerate() {
                        o[j] = d * (q as i8) as f32;
                    }
                }
                QuantKind::Q6K => {
                    // ggml: d * sc * q, left to right.
                    for (j, y) in o.iter_mut().enumerate() {
                        let scale = d * q6k_scale(blk, j / 16) as f32;
                        *y = scale * (i32::from(q6k_quant(blk, j)) - 32) as f32;
                    }
                }
            }
        }
    }

    /// The whole matrix as f32.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0.0f32; self.rows * self.cols];
        for (r, o) in out.chunks_exact_mut(self.cols).enumerate() {
            self.dequantize_row(r, o);
        }
        out
    }
}

/// `y = x · Wᵀ` with `x` `[m, cols]` and `W` quantized `[rows, cols]`, exact,
/// on the best path this CPU supports.
pub fn matmul_quant(x: &[f32], w: &QuantMatrix, m: usize) -> Vec<f32> {
    matmul_quant_on(CpuPath::best(), x, w, m)
}

/// As [`matmul_quant`], on `path`: bit-identical to `matmul_on(path, ..)` over
/// the dequantized weights.
pub fn matmul_quant_on(path: CpuPath, x: &[f32], w: &QuantMatrix, m: usize) -> Vec<f32> {
    assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
    let (k, n) = (w.cols, w.rows);
    assert_eq!(x.len(), m * k, "matmul_quant: x has {} values, expected {m}x{k}", x.len());
    let mut y = vec![0.0f32; m * n];
    if m == 0 || n == 0 {
        return y;
    }
    #[cfg(target_arch = "x86_64")]
    {
        if m < DEQUANT_FIRST_ROWS && path.has_avx2() {
            // SAFETY: the assert above checked that this CPU has AVX2 and FMA.
            par_columns(m, n, &mut y, columns_per_task(m, n), |c0, c1, out| unsafe {
                avx2::block(x, w, m, c0, c1, out)
            });
            return y;
        }
    }
    // Many rows (or the scalar path): dequantize each column block once, then run the
    // f32 kernel over it (same values, same lanes, same results). Small blocks:
    // each is an f32 copy.
    par_columns(m, n, &mut y, COLS_PER_TASK, |c0, c1, out| {
        let mut wf = vec![0.0f32; (c1 - c0) * k];
        for (i, r) in (c0..c1).enumerate() {
            w.dequantize_row(r, &mut wf[i * k..(i + 1) * k]);
        }
        block_serial(path, x, &wf, m, k, 0, c1 - c0, out);
    });
    y
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{QK, QuantKind, QuantMatrix};
    use crate::kernels::cpu::matmul::avx2::hsum;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn block(x: &[f32], w: &QuantMatrix, m: usize, c0: usize, c1: usize, out: &mut [f32]) {
        let width = c1 - c0;
        let mut i = 0;
        while i < m {
            let rows = (m - i).min(4);
            let mut j = c0;
            while j < c1 {
                let cols = (c1 - j).min(3);
                // SAFETY: tile bounds lie inside x, w and out.
                unsafe {
                    match (rows, cols) {
                        (4, 3) => tile::<4, 3>(x, w, i, j, out, width, c0),
                        (4, 2) => tile::<4, 2>(x, w, i, j, out, width, c0),
                        (4, 1) => tile::<4, 1>(x, w, i, j, out, width, c0),
                        (3, 3) => tile::<3, 3>(x, w, i, j, out, width, c0),
                        (3, 2) => tile::<3, 2>(x, w, i, j, out, width, c0),
                        (3, 1) => tile::<3, 1>(x, w, i, j, out, width, c0),
                        (2, 3) => tile::<2, 3>(x, w, i, j, out, width, c0),
                        (2, 2) => tile::<2, 2>(x, w, i, j, out, width, c0),
                        (2, 1) => tile::<2, 1>(x, w, i, j, out, width, c0),
                        (1, 3) => tile::<1, 3>(x, w, i, j, out, width, c0),
                        (1, 2) => tile::<1, 2>(x, w, i, j, out, width, c0),
                        _ => tile::<1, 1>(x, w, i, j, out, width, c0),
                    }
                }
                j += cols;
            }
            i += rows;
        }
    }

    /// Eight weights of sub-block `s` (elements 8s..8s+8) of one block.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn weights8(kind: QuantKind, blk: *const u8, s: usize, d: __m256, mn: __m256) -> __m256 {
        unsafe {
            match kind {
                QuantKind::Q4_0 | QuantKind::Q4_1 | QuantKind::Q5_0 | QuantKind::Q4K | QuantKind::Q6K => {
                    // s = 0, 1: low nibbles of bytes 0..8, 8..16; s = 2, 3: high nibbles.
                    let bytes = _mm_loadl_epi64(blk.add(kind.quants_at() + (s & 1) * 8) as *const __m128i);
                    let q = _mm256_cvtepu8_epi32(bytes);
                    let mut q =
                        if s < 2 { _mm256_and_si256(q, _mm256_set1_epi32(0x0f)) } else { _mm256_srli_epi32::<4>(q) };
                    if kind == QuantKind::Q5_0 {
                        // Elements 8s..8s+8 take their fifth bits from qh byte s.
                        let hb = _mm256_srlv_epi32(
                            _mm256_set1_epi32(i32::from(*blk.add(2 + s))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                        );
                        q = _mm256_or_si256(q, _mm256_slli_epi32::<4>(_mm256_and_si256(hb, _mm256_set1_epi32(1))));
                    }
                    if kind == QuantKind::Q6K {
                        // Bits 4 and 5 of elements 8s..8s+8: byte s of qh4 and of qh5.
                        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
                        let bit = |at: usize| {
                            let v = _mm256_srlv_epi32(_mm256_set1_epi32(i32::from(*blk.add(at + s))), lanes);
                            _mm256_and_si256(v, _mm256_set1_epi32(1))
                        };
                        q = _mm256_or_si256(q, _mm256_slli_epi32::<4>(bit(4)));
                        q = _mm256_or_si256(q, _mm256_slli_epi32::<5>(bit(8)));
                        // (d * sc) * (q - 32), as ggml rounds it.
                        let sc = _mm256_set1_ps(i32::from(*blk.add(2 + s / 2) as i8) as f32);
                        let q = _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(32)));
                        return _mm256_mul_ps(_mm256_mul_ps(d, sc), q);
                    }
                    if kind.has_mins() {
                        _mm256_add_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(q)), mn)
                    } else {
                        // d * (q - 8) or d * (q - 16): the difference is exact in i32 and in f32.
                        let off = _mm256_set1_epi32(kind.nibble_offset());
                        _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(q, off)))
                    }
                }
                QuantKind::Q8_0 => {
                    let bytes = _mm_loadl_epi64(blk.add(2 + s * 8) as *const __m128i);
                    _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)))
                }
            }
        }
    }

    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const R: usize, const C: usize>(
        x: &[f32],
        w: &QuantMatrix,
        i0: usize,
        j0: usize,
        out: &mut [f32],
        width: usize,
        c0: usize,
    ) {
        let k = w.cols;
        let bb = w.kind.block_bytes();
        let rb = k / QK * bb;
        let xp = x.as_ptr();
        let wp = w.data().as_ptr();
        let mut acc = [[_mm256_setzero_ps(); C]; R];
        for b in 0..k / QK {
            let mut dv = [_mm256_setzero_ps(); C];
            let mut mv = [_mm256_setzero_ps(); C];
            let mut blk = [wp; C];
            for c in 0..C {
                // SAFETY: row j0 + c < rows, block b < k / QK.
                unsafe {
                    blk[c] = wp.add((j0 + c) * rb + b * bb);
                    let (d, m) = w.kind.scales(std::slice::from_raw_parts(blk[c], bb));
                    dv[c] = _mm256_set1_ps(d);
                    mv[c] = _mm256_set1_ps(m);
                }
            }
            for s in 0..4 {
                let mut wv = [_mm256_setzero_ps(); C];
                for c in 0..C {
                    // SAFETY: blk[c] points at a whole block.
                    wv[c] = unsafe { weights8(w.kind, blk[c], s, dv[c], mv[c]) };
                }
                let kk = b * QK + s * 8;
                for (r, accr) in acc.iter_mut().enumerate() {
                    // SAFETY: row i0 + r < m and kk + 8 <= k.
                    let xv = unsafe { _mm256_loadu_ps(xp.add((i0 + r) * k + kk)) };
                    for (c, a) in accr.iter_mut().enumerate() {
                        *a = _mm256_fmadd_ps(xv, wv[c], *a);
                    }
                }
            }
        }
        for (r, accr) in acc.iter().enumerate() {
            for (c, a) in accr.iter().enumerate() {
                out[(i0 + r) * width + (j0 + c - c0)] = hsum(*a);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::cpu::matmul::{matmul, matmul_on};

    fn blocks(kind: QuantKind, rows: usize, cols: usize, seed: u32) -> Vec<u8> {
        let mut s = seed;
        let mut next = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 16) as u8
        };
        let mut out = Vec::new();
        for _ in 0..rows * cols / QK {
            let d = f16::from_f32(0.01 + (next() as f32) / 5000.0).to_le_bytes();
            out.extend(d);
            match kind {
                QuantKind::Q4_0 => out.extend((0..16).map(|_| next())),
                QuantKind::Q5_0 => out.extend((0..20).map(|_| next())),
                QuantKind::Q4K => {
                    out.extend(f16::from_f32((next() as f32) / 3000.0).to_le_bytes());
                    out.extend([next() % 64, next() % 64]);
                    out.extend((0..16).map(|_| next()));
                }
                QuantKind::Q6K => out.extend((0..26).map(|_| next())),
                QuantKind::Q4_1 => {
                    out.extend(f16::from_f32(-(next() as f32) / 300.0).to_le_bytes());
                    out.extend((0..16).map(|_| next()));
                }
                QuantKind::Q8_0 => out.extend((0..32).map(|_| next())),
            }
        }
        out
    }

    #[test]
    fn bit_identical_to_the_f32_path_at_every_batch_size() {
        for kind in QuantKind::ALL {
            let (rows, cols) = (70, 96);
            let q = QuantMatrix::new(kind, rows, cols, blocks(kind, rows, cols, 3)).unwrap();
            let wf = q.dequantize();
            for m in [1, 2, 5, 9] {
                let x: Vec<f32> = (0..m * cols).map(|i| ((i * 37 % 101) as f32 - 50.0) / 37.0).collect();
                assert_eq!(matmul_quant(&x, &q, m), matmul(&x, &wf, m, cols, rows), "{kind:?} m = {m}");
            }
        }
    }

    #[test]
    fn bit_identical_to_the_f32_path_on_every_cpu_path() {
        for kind in QuantKind::ALL {
            let (rows, cols) = (45, 64);
            let q = QuantMatrix::new(kind, rows, cols, blocks(kind, rows, cols, 9)).unwrap();
            let wf = q.dequantize();
            for path in CpuPath::supported() {
                for m in [1, 3, 6] {
                    let x: Vec<f32> = (0..m * cols).map(|i| ((i * 53 % 97) as f32 - 48.0) / 29.0).collect();
                    let want = matmul_on(path, &x, &wf, m, cols, rows);
                    assert_eq!(matmul_quant_on(path, &x, &q, m), want, "{kind:?} {path} m = {m}");
                }
            }
        }
    }

    #[test]
    fn rejects_wrong_sizes() {
        assert!(QuantMatrix::new(QuantKind::Q4_1, 2, 33, vec![0; 40]).is_none());
        assert!(QuantMatrix::new(QuantKind::Q4_1, 2, 32, vec![0; 39]).is_none());
        assert!(QuantMatrix::new(QuantKind::Q8_0, 2, 32, vec![0; 68]).is_some());
    }
}
