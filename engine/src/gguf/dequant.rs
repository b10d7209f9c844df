//! ggml tensor types and their dequantization to f32. Owns the block layouts of
//! every ggml type id (so the parser can bounds-check any tensor) and the
//! decoders of the types we support: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
//! Q5_1 and the k-quants Q4_K, Q5_K, Q6_K. Each quantized decoder is ggml's
//! reference `dequantize_row_*` (ggml-quants.c) with its f32 operations in the
//! same order, so the values equal ggml's (and gguf-py's `quants.dequantize`)
//! bit for bit. Any other type is reported by name, never guessed. Does not
//! rename or permute tensors.

use rayon::prelude::*;
use std::fmt;

/// A ggml tensor type (`enum ggml_type`), by id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    Bf16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
    /// An id this build does not know.
    Unknown(u32),
}

impl GgmlType {
    pub fn from_id(id: u32) -> Self {
        use GgmlType::*;
        match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            16 => Iq2Xxs,
            17 => Iq2Xs,
            18 => Iq3Xxs,
            19 => Iq1S,
            20 => Iq4Nl,
            21 => Iq3S,
            22 => Iq2S,
            23 => Iq4Xs,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => Iq1M,
            30 => Bf16,
            34 => Tq1_0,
            35 => Tq2_0,
            39 => Mxfp4,
            other => Unknown(other),
        }
    }

    /// ggml's name for the type, as `gguf` and llama.cpp print it.
    pub fn name(self) -> String {
        use GgmlType::*;
        let s = match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            Iq2Xxs => "IQ2_XXS",
            Iq2Xs => "IQ2_XS",
            Iq3Xxs => "IQ3_XXS",
            Iq1S => "IQ1_S",
            Iq4Nl => "IQ4_NL",
            Iq3S => "IQ3_S",
            Iq2S => "IQ2_S",
            Iq4Xs => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            Iq1M => "IQ1_M",
            Bf16 => "BF16",
            Tq1_0 => "TQ1_0",
            Tq2_0 => "TQ2_0",
            Mxfp4 => "MXFP4",
            Unknown(id) => return format!("unknown ggml type id {id}"),
        };
        s.to_string()
    }

    /// (elements per block, bytes per block), from ggml's type traits; `None`
    /// for an unknown id.
    pub fn block_layout(self) -> Option<(usize, usize)> {
        use GgmlType::*;
        const QK_K: usize = 256;
        Some(match self {
            F32 => (1, 4),
            F16 => (1, 2),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 36),
            Q2K => (QK_K, 84),
            Q3K => (QK_K, 110),
            Q4K => (QK_K, 144),
            Q5K => (QK_K, 176),
            Q6K => (QK_K, 210),
            Q8K => (QK_K, 292),
            Iq2Xxs => (QK_K, 66),
            Iq2Xs => (QK_K, 74),
            Iq3Xxs => (QK_K, 98),
            Iq1S => (QK_K, 50),
            Iq4Nl => (32, 18),
            Iq3S => (QK_K, 110),
            Iq2S => (QK_K, 82),
            Iq4Xs => (QK_K, 136),
            I8 => (1, 1),
            I16 => (1, 2),
            I32 => (1, 4),
            I64 => (1, 8),
            F64 => (1, 8),
            Iq1M => (QK_K, 56),
            Bf16 => (1, 2),
            Tq1_0 => (QK_K, 54),
            Tq2_0 => (QK_K, 66),
            Mxfp4 => (32, 17),
            Unknown(_) => return None,
        })
    }

    /// Whether `dequantize` decodes this type.
    pub fn is_supported(self) -> bool {
        use GgmlType::*;
        matches!(self, F32 | F16 | Bf16 | Q8_0 | Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q4K | Q5K | Q6K)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

fn f16_at(b: &[u8], i: usize) -> f32 {
    half::f16::from_le_bytes([b[i], b[i + 1]]).to_f32()
}

/// ggml's `get_scale_min_k4`: the 6-bit scale and min of sub-block `j` (0..8)
/// of a Q4_K/Q5_K super-block from its 12 packed bytes. Bytes 0..4 hold the
/// scales of sub-blocks 0..4 in their low 6 bits, bytes 4..8 their mins; bytes
/// 8..12 hold the low 4 bits of sub-blocks 4..8 (scale low nibble, min high
/// nibble), whose top 2 bits are the top bits of bytes 0..4 (scales) and 4..8
/// (mins).
fn scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

/// Q4_K super-blocks (`bytes`, whole 144-byte blocks) repacked into the
/// kernels' blocks of 32 (`QuantKind::Q4K`): per sub-block `j`, `{f16 d; f16
/// dmin; u8 sc; u8 m; u8 qs[16]}` with the super-block's two scales copied,
/// `(sc, m)` from `get_scale_min_k4`, and the sub-block's 32 nibbles laid out
/// as Q4_1's (byte `i`: element `i` low, element `16 + i` high). Every value
/// decodes as `dequantize_row_q4_K` decodes it. `None` unless `bytes` is whole
/// super-blocks.
pub fn repack_q4_k(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.len().is_multiple_of(144) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 144 * 8 * 22);
    for blk in bytes.chunks_exact(144) {
        let (scales, qs) = (&blk[4..16], &blk[16..144]);
        for j in 0..8 {
            let (sc, m) = scale_min_k4(j, scales);
            out.extend_from_slice(&blk[..4]);
            out.extend([sc, m]);
            // Sub-block j: the low (even j) or high (odd j) nibbles of qs[32(j/2)..].
            let (src, shift) = (&qs[32 * (j / 2)..32 * (j / 2) + 32], 4 * (j % 2));
            out.extend((0..16).map(|i| ((src[i] >> shift) & 0x0f) | (((src[16 + i] >> shift) & 0x0f) << 4)));
        }
    }
    Some(out)
}

/// Q6_K super-blocks (`bytes`, whole 210-byte blocks) repacked into the
/// kernels' blocks of 32 (`QuantKind::Q6K`): per 32 values, `{f16 d; i8
/// sc[2]; u32 qh4; u32 qh5; u8 ql[16]}`: the super-block's scale copied, the
/// two 16-value sub-block scales, bits 4 and 5 of element `e`'s six-bit
/// quant as bit `e` of `qh4` and `qh5`, its low four bits as Q4_0's nibbles
/// (byte `i`: element `i` low, `16 + i` high). Every value decodes as
/// `dequantize_row_q6_K` decodes it. `None` unless `bytes` is whole
/// super-blocks.
pub fn repack_q6_k(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.len().is_multiple_of(210) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 210 * 8 * 28);
    let mut q = [0u8; 256];
    for blk in bytes.chunks_exact(210) {
        for n in 0..2 {
            let (ql, qh) = (&blk[64 * n..64 * n + 64], &blk[128 + 32 * n..128 + 32 * n + 32]);
            for l in 0..32 {
                q[128 * n + l] = (ql[l] & 0x0f) | (qh[l] & 3) << 4;
                q[128 * n + l + 32] = (ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4;
                q[128 * n + l + 64] = (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4;
                q[128 * n + l + 96] = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
            }
        }
        for (j, q) in q.chunks_exact(32).enumerate() {
            let bit = |b: u32| (0..32).fold(0u32, |acc, e| acc | (u32::from(q[e] >> b) & 1) << e);
            out.extend_from_slice(&blk[208..210]);
            out.extend_from_slice(&blk[192 + 2 * j..194 + 2 * j]);
            out.extend(bit(4).to_le_bytes());
            out.extend(bit(5).to_le_bytes());
            out.extend((0..16).map(|i| (q[i] & 0x0f) | (q[16 + i] & 0x0f) << 4));
        }
    }
    Some(out)
}

/// The 5th bits of Q5_0/Q5_1 element `j` (0..16) and `j + 16` from `qh`, in
/// place (0 or 0x10), as ggml's `xh_0` / `xh_1`.
fn q5_high_bits(qh: u32, j: usize) -> (u8, u8) {
    ((((qh >> j) << 4) & 0x10) as u8, ((qh >> (j + 12)) & 0x10) as u8)
}

/// Q4_K and Q5_K (`dequantize_row_q4_K` / `_q5_K`): per 64 elements, two
/// sub-blocks of 32 with `d1 = d * sc`, `m1 = dmin * m`, `y = d1 * q - m1`;
/// the low nibbles of 32 bytes of `qs` are the first sub-block, their high
/// nibbles the second. Q5_K adds bit `2g` (first) / `2g + 1` (second) of
/// `qh[l]` as 16 for group `g`.
fn decode_k4_k5(blk: &[u8], qh: Option<&[u8]>, qs: &[u8], o: &mut [f32]) {
    let d = f16_at(blk, 0);
    let min = f16_at(blk, 2);
    let scales = &blk[4..16];
    for (g, (q, y)) in qs.chunks_exact(32).zip(o.chunks_exact_mut(64)).enumerate() {
        let (sc, m) = scale_min_k4(2 * g, scales);
        let (d1, m1) = (d * sc as f32, min * m as f32);
        let (sc, m) = scale_min_k4(2 * g + 1, scales);
        let (d2, m2) = (d * sc as f32, min * m as f32);
        let (y1, y2) = y.split_at_mut(32);
        for (l, &b) in q.iter().enumerate() {
            let (h1, h2) = match qh {
                Some(qh) => ((qh[l] >> (2 * g)) & 1, (qh[l] >> (2 * g + 1)) & 1),
                None => (0, 0),
            };
            y1[l] = d1 * ((b & 0x0f) + (h1 << 4)) as f32 - m1;
            y2[l] = d2 * ((b >> 4) + (h2 << 4)) as f32 - m2;
        }
    }
}

fn decode_block(ty: GgmlType, b: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(4)) {
                *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *o = half::f16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        GgmlType::Bf16 => {
            for (o, c) in out.iter_mut().zip(b.chunks_exact(2)) {
                *o = half::bf16::from_le_bytes([c[0], c[1]]).to_f32();
            }
        }
        // block_q8_0 { f16 d; i8 qs[32]; }: x = d * q
        GgmlType::Q8_0 => {
            for (blk, o) in b.chunks_exact(34).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(blk, 0);
                for (x, &q) in o.iter_mut().zip(&blk[2..34]) {
                    *x = d * (q as i8) as f32;
                }
            }
        }
        // block_q4_0 { f16 d; u8 qs[16]; }: low nibbles are elements 0..16,
        // high nibbles 16..32; x = d * (q - 8)
        GgmlType::Q4_0 => {
            for (blk, o) in b.chunks_exact(18).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(blk, 0);
                for (j, &q) in blk[2..18].iter().enumerate() {
                    o[j] = d * ((q & 0x0f) as i32 - 8) as f32;
                    o[j + 16] = d * ((q >> 4) as i32 - 8) as f32;
                }
            }
        }
        // block_q4_1 { f16 d; f16 m; u8 qs[16]; }: x = d * q + m
        GgmlType::Q4_1 => {
            for (blk, o) in b.chunks_exact(20).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(blk, 0);
                let m = f16_at(blk, 2);
                for (j, &q) in blk[4..20].iter().enumerate() {
                    o[j] = d * (q & 0x0f) as f32 + m;
                    o[j + 16] = d * (q >> 4) as f32 + m;
                }
            }
        }
        // block_q5_0 { f16 d; u8 qh[4]; u8 qs[16]; }: q = low nibble (j) or
        // high nibble (j + 16) of qs[j], bit j or j + 16 of qh (little-endian
        // u32) as its 5th bit; x = (q - 16) * d
        GgmlType::Q5_0 => {
            for (blk, o) in b.chunks_exact(22).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(blk, 0);
                let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
                for (j, &q) in blk[6..22].iter().enumerate() {
                    let (h0, h1) = q5_high_bits(qh, j);
                    o[j] = (((q & 0x0f) | h0) as i32 - 16) as f32 * d;
                    o[j + 16] = (((q >> 4) | h1) as i32 - 16) as f32 * d;
                }
            }
        }
        // block_q5_1 { f16 d; f16 m; u8 qh[4]; u8 qs[16]; }: q as Q5_0;
        // x = q * d + m
        GgmlType::Q5_1 => {
            for (blk, o) in b.chunks_exact(24).zip(out.chunks_exact_mut(32)) {
                let d = f16_at(blk, 0);
                let m = f16_at(blk, 2);
                let qh = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
                for (j, &q) in blk[8..24].iter().enumerate() {
                    let (h0, h1) = q5_high_bits(qh, j);
                    o[j] = ((q & 0x0f) | h0) as f32 * d + m;
                    o[j + 16] = ((q >> 4) | h1) as f32 * d + m;
                }
            }
        }
        // block_q4_K { f16 d; f16 dmin; u8 scales[12]; u8 qs[128]; }
        GgmlType::Q4K => {
            for (blk, o) in b.chunks_exact(144).zip(out.chunks_exact_mut(256)) {
                decode_k4_k5(blk, None, &blk[16..144], o);
            }
        }
        // block_q5_K { f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]; }
        GgmlType::Q5K => {
            for (blk, o) in b.chunks_exact(176).zip(out.chunks_exact_mut(256)) {
                decode_k4_k5(blk, Some(&blk[16..48]), &blk[48..176], o);
            }
        }
        // block_q6_K { u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d; }: per half
        // of 128 elements (64 bytes of ql, 32 of qh, 8 scales), element
        // l + 32 k (l < 32, k < 4) takes the low (k = 0, 1) or high (k = 2, 3)
        // nibble of ql[l + 32 (k % 2)] and bits 2k..2k+2 of qh[l] as bits 4..6,
        // q = that - 32, and y = d * scales[(l + 32 k) / 16] * q, left to right.
        GgmlType::Q6K => {
            for (blk, o) in b.chunks_exact(210).zip(out.chunks_exact_mut(256)) {
                let d = f16_at(blk, 208);
                for (n, y) in o.chunks_exact_mut(128).enumerate() {
                    let ql = &blk[64 * n..64 * n + 64];
                    let qh = &blk[128 + 32 * n..128 + 32 * n + 32];
                    let sc = &blk[192 + 8 * n..192 + 8 * n + 8];
                    for (l, &h) in qh.iter().enumerate() {
                        let is = l / 16;
                        let q1 = ((ql[l] & 0x0f) | ((h & 3) << 4)) as i32 - 32;
                        let q2 = ((ql[l + 32] & 0x0f) | (((h >> 2) & 3) << 4)) as i32 - 32;
                        let q3 = ((ql[l] >> 4) | (((h >> 4) & 3) << 4)) as i32 - 32;
                        let q4 = ((ql[l + 32] >> 4) | (((h >> 6) & 3) << 4)) as i32 - 32;
                        let s = |i: usize| sc[is + i] as i8 as f32;
                        y[l] = d * s(0) * q1 as f32;
                        y[l + 32] = d * s(2) * q2 as f32;
                        y[l + 64] = d * s(4) * q3 as f32;
                        y[l + 96] = d * s(6) * q4 as f32;
                    }
                }
            }
        }
        _ => unreachable!("dequantize checks is_supported first"),
    }
}

/// Decodes `numel` elements of type `ty` from `bytes` (exactly the tensor's
/// bytes), in parallel over chunks of whole blocks. `None` if the type is not
/// supported or the byte count does not match.
pub fn dequantize(ty: GgmlType, bytes: &[u8], numel: usize) -> Option<Vec<f32>> {
    if !ty.is_supported() {
        return None;
    }
    let (block, type_size) = ty.block_layout()?;
    if !numel.is_multiple_of(block) || bytes.len() != (numel / block) * type_size {
        return None;
    }
    let mut out = vec![0f32; numel];
    // About 16K elements per task: large enough to amortise scheduling.
    let blocks_per_task = (16_384 / block).max(1);
    out.par_chunks_mut(blocks_per_task * block)
        .zip(bytes.par_chunks(blocks_per_task * type_size))
        .for_each(|(o, b)| decode_block(ty, b, o));
    Some(out)
}
