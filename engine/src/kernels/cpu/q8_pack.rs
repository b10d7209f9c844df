//! The 16-row interleaved weight layout of the AVX-512 q8 kernels, built once
//! per matrix on first use (portable Rust; the kernels live in
//! `q8_avx512.rs`). Sixteen weight rows form a group; a group's blocks follow
//! one another (`[group][block]`), and one block of a group is:
//!
//! - Q4_1 (320 bytes = 16 x 20): `d[16]` f16, `m[16]` f16, then 4 chunks of
//!   `[row 0..16][4 bytes]`: chunk `t` holds each row's packed bytes `4t..4t+4`,
//!   whose low nibbles are elements `4t..4t+4` and high nibbles elements
//!   `16+4t..16+4t+4`.
//! - Q4_0 (288 bytes = 16 x 18): `d[16]` f16, then the same 4 chunks of
//!   nibbles (stored `q`, not `q - 8`).
//! - Q5_0 (352 bytes = 16 x 22): `d[16]` f16, then the fifth bits as 4 chunks
//!   of `[row 0..16][1 byte]` (chunk `t`'s byte holds bits `4t..4t+4` of the
//!   row's `qh` in its low half and bits `16+4t..16+4t+4` in its high half:
//!   the fifth bits of the elements whose low bits chunk `t` of the nibbles
//!   holds), then the 4 chunks of nibbles as Q4_0's.
//! - Q4_K repacked (352 bytes = 16 x 22): `d[16]` f16, `dmin[16]` f16,
//!   `sc[16]` u8, `m[16]` u8, then the 4 chunks of nibbles.
//! - Q6_K repacked (448 bytes = 16 x 28): `d[16]` f16, `sc0[16]` i8, `sc1[16]`
//!   i8, then per chunk `t` the bit-4 bytes `[row 0..16]` and the bit-5 bytes
//!   (each laid out as Q5_0's fifth bits, from `qh4` and `qh5`), then the 4
//!   chunks of nibbles.
//! - Q8_0 (544 bytes = 16 x 34): `d[16]` f16, then 8 chunks of
//!   `[row 0..16][4 bytes]`: chunk `t` holds elements `4t..4t+4` of each row,
//!   offset by 128 (`w ^ 0x80` = `w + 128` as an unsigned byte).
//!
//! So one 64-byte load is four elements of sixteen rows, which `vpdpbusd`
//! multiplies with four broadcast activation bytes into sixteen i32 lanes, one
//! per weight row: a block's integer sums need no horizontal reduction and a
//! block's scales are one 32-byte load, not sixteen gathers. The layout holds
//! the same bytes as the GGUF blocks (rows padded to a multiple of 16 with
//! zero blocks), so it costs one more copy of the quantized weights.

use super::quant::{QK, QuantKind, QuantMatrix};
use rayon::prelude::*;

/// Weight rows per group (lanes of a 512-bit i32 vector).
pub const GROUP_ROWS: usize = 16;

/// A quantized matrix in the 16-row interleaved layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    pub kind: QuantKind,
    pub rows: usize,
    pub cols: usize,
    /// Blocks per row.
    pub nb: usize,
    /// `rows.div_ceil(16)`.
    pub groups: usize,
    /// `[group][block]` of [`Packed::group_block_bytes`] each.
    pub data: Vec<u8>,
}

impl Packed {
    /// Bytes of one block of one group.
    pub fn group_block_bytes(kind: QuantKind) -> usize {
        GROUP_ROWS * kind.block_bytes()
    }

    /// Where a group's quants start inside its block (after the scales).
    pub fn quants_offset(kind: QuantKind) -> usize {
        match kind {
            QuantKind::Q4_1 => 64,
            QuantKind::Q5_0 | QuantKind::Q4K => 96,
            QuantKind::Q6K => 192,
            QuantKind::Q4_0 | QuantKind::Q8_0 => 32,
        }
    }

    /// `w` interleaved (groups in parallel on the installed rayon pool).
    pub fn new(w: &QuantMatrix) -> Packed {
        let (nb, bb) = (w.cols / QK, w.kind.block_bytes());
        let groups = w.rows.div_ceil(GROUP_ROWS);
        let gb = Packed::group_block_bytes(w.kind);
        let mut data = vec![0u8; groups * nb * gb];
        let src = w.data();
        data.par_chunks_mut(nb * gb).enumerate().for_each(|(g, dst)| {
            for lane in 0..GROUP_ROWS.min(w.rows - g * GROUP_ROWS) {
                let j = g * GROUP_ROWS + lane;
                let row = &src[j * nb * bb..(j + 1) * nb * bb];
                for (b, blk) in row.chunks_exact(bb).enumerate() {
                    let out = &mut dst[b * gb..(b + 1) * gb];
                    out[2 * lane..2 * lane + 2].copy_from_slice(&blk[..2]);
                    match w.kind {
                        QuantKind::Q4_0 => {
                            for t in 0..4 {
                                let at = 32 + 64 * t + 4 * lane;
                                out[at..at + 4].copy_from_slice(&blk[2 + 4 * t..6 + 4 * t]);
                            }
                        }
                        QuantKind::Q6K => {
                            (out[32 + lane], out[48 + lane]) = (blk[2], blk[3]);
                            let qh4 = u32::from_le_bytes([blk[4], blk[5], blk[6], blk[7]]);
                            let qh5 = u32::from_le_bytes([blk[8], blk[9], blk[10], blk[11]]);
                            let chunk =
                                |qh: u32, t: usize| (((qh >> (4 * t)) & 0xf) | ((qh >> (16 + 4 * t)) & 0xf) << 4) as u8;
                            for t in 0..4 {
                                out[64 + 32 * t + lane] = chunk(qh4, t);
                                out[80 + 32 * t + lane] = chunk(qh5, t);
                                let at = 192 + 64 * t + 4 * lane;
                                out[at..at + 4].copy_from_slice(&blk[12 + 4 * t..16 + 4 * t]);
                            }
                        }
                        QuantKind::Q4K => {
                            out[32 + 2 * lane..34 + 2 * lane].copy_from_slice(&blk[2..4]);
                            (out[64 + lane], out[80 + lane]) = (blk[4], blk[5]);
                            for t in 0..4 {
                                let at = 96 + 64 * t + 4 * lane;
                                out[at..at + 4].copy_from_slice(&blk[6 + 4 * t..10 + 4 * t]);
                            }
                        }
                        QuantKind::Q5_0 => {
                            let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
                            for t in 0..4 {
                                let (lo, hi) = ((qh >> (4 * t)) & 0xf, (qh >> (16 + 4 * t)) & 0xf);
                                out[32 + 16 * t + lane] = (lo | hi << 4) as u8;
                                let at = 96 + 64 * t + 4 * lane;
                                out[at..at + 4].copy_from_slice(&blk[6 + 4 * t..10 + 4 * t]);
                            }
                        }
                        QuantKind::Q4_1 => {
                            out[32 + 2 * lane..34 + 2 * lane].copy_from_slice(&blk[2..4]);
                            for t in 0..4 {
                                let at = 64 + 64 * t + 4 * lane;
                                out[at..at + 4].copy_from_slice(&blk[4 + 4 * t..8 + 4 * t]);
                            }
                        }
                        QuantKind::Q8_0 => {
                            for t in 0..8 {
                                let at = 32 + 64 * t + 4 * lane;
                                for e in 0..4 {
                                    out[at + e] = blk[2 + 4 * t + e] ^ 0x80;
                                }
                            }
                        }
                    }
                }
            }
        });
        Packed { kind: w.kind, rows: w.rows, cols: w.cols, nb, groups, data }
    }

    /// The GGUF bytes back (the layout is a permutation of them): for tests.
    pub fn unpack(&self) -> Vec<u8> {
        let (bb, gb) = (self.kind.block_bytes(), Packed::group_block_bytes(self.kind));
        let mut data = vec![0u8; self.rows * self.nb * bb];
        for j in 0..self.rows {
            let (g, lane) = (j / GROUP_ROWS, j % GROUP_ROWS);
            for b in 0..self.nb {
                let src = &self.data[(g * self.nb + b) * gb..(g * self.nb + b + 1) * gb];
                let blk = &mut data[(j * self.nb + b) * bb..(j * self.nb + b + 1) * bb];
                blk[..2].copy_from_slice(&src[2 * lane..2 * lane + 2]);
                match self.kind {
                    QuantKind::Q4_0 => {
                        for t in 0..4 {
                            let at = 32 + 64 * t + 4 * lane;
                            blk[2 + 4 * t..6 + 4 * t].copy_from_slice(&src[at..at + 4]);
                        }
                    }
                    QuantKind::Q6K => {
                        (blk[2], blk[3]) = (src[32 + lane], src[48 + lane]);
                        let (mut qh4, mut qh5) = (0u32, 0u32);
                        for t in 0..4 {
                            let unchunk = |h: u32| (h & 0xf) << (4 * t) | (h >> 4) << (16 + 4 * t);
                            qh4 |= unchunk(u32::from(src[64 + 32 * t + lane]));
                            qh5 |= unchunk(u32::from(src[80 + 32 * t + lane]));
                            let at = 192 + 64 * t + 4 * lane;
                            blk[12 + 4 * t..16 + 4 * t].copy_from_slice(&src[at..at + 4]);
                        }
                        blk[4..8].copy_from_slice(&qh4.to_le_bytes());
                        blk[8..12].copy_from_slice(&qh5.to_le_bytes());
                    }
                    QuantKind::Q4K => {
                        blk[2..4].copy_from_slice(&src[32 + 2 * lane..34 + 2 * lane]);
                        (blk[4], blk[5]) = (src[64 + lane], src[80 + lane]);
                        for t in 0..4 {
                            let at = 96 + 64 * t + 4 * lane;
                            blk[6 + 4 * t..10 + 4 * t].copy_from_slice(&src[at..at + 4]);
                        }
                    }
                    QuantKind::Q5_0 => {
                        let mut qh = 0u32;
                        for t in 0..4 {
                            let h = u32::from(src[32 + 16 * t + lane]);
                            qh |= (h & 0xf) << (4 * t) | (h >> 4) << (16 + 4 * t);
                            let at = 96 + 64 * t + 4 * lane;
                            blk[6 + 4 * t..10 + 4 * t].copy_from_slice(&src[at..at + 4]);
                        }
                        blk[2..6].copy_from_slice(&qh.to_le_bytes());
                    }
                    QuantKind::Q4_1 => {
                        blk[2..4].copy_from_slice(&src[32 + 2 * lane..34 + 2 * lane]);
                        for t in 0..4 {
                            let at = 64 + 64 * t + 4 * lane;
                            blk[4 + 4 * t..8 + 4 * t].copy_from_slice(&src[at..at + 4]);
                        }
                    }
                    QuantKind::Q8_0 => {
                        for t in 0..8 {
                            let at = 32 + 64 * t + 4 * lane;
                            for e in 0..4 {
                                blk[2 + 4 * t + e] = src[at + e] ^ 0x80;
                            }
                        }
                    }
                }
            }
        }
        data
    }
}
