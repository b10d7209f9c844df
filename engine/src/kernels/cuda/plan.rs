//! Host-side decisions of the CUDA backend, pure and unit-tested on any
//! machine: how a forward call's rows tile the GEMMs, how big its workspace
//! is, each kernel's launch geometry, which attention kernel serves a shape,
//! and how the block tables are laid out for upload.
//!
//! Batch invariance of the linear layers rests on [`ROW_TILE`]: cuBLAS picks
//! its algorithm (tiling, split-K) from the problem's shape, so a product over
//! 3 rows and one over 200 may reduce a row's dot products in different
//! orders. Every GEMM here is therefore issued in calls of exactly `ROW_TILE`
//! rows (the last padded with rows of zeros): a row sees the same kernel, with
//! the same reduction order, whatever else is in the batch.

use super::GpuError;
use super::source::{ATT_CHUNK, ATT_MAX_HEAD_DIM, ATT_THREADS};
use crate::kv::{KvFormat, PAGE_SIZE};

/// Rows per cuBLAS call (see the module doc).
pub const ROW_TILE: usize = 64;

/// Threads per block of the element-wise and row-copy kernels.
pub const ELEMENTWISE_THREADS: u32 = 256;

/// Most blocks an element-wise launch uses (grid-stride loops do the rest).
pub const MAX_ELEMENTWISE_BLOCKS: u32 = 4096;

/// `rows` rounded up to a whole number of GEMM tiles.
pub fn padded_rows(rows: usize) -> usize {
    rows.div_ceil(ROW_TILE) * ROW_TILE
}

/// The GEMM calls of a `rows`-row product: `(first row, ROW_TILE)` each.
pub fn gemm_tiles(rows: usize) -> impl Iterator<Item = usize> {
    (0..padded_rows(rows) / ROW_TILE).map(|t| t * ROW_TILE)
}

/// A launch: grid and block dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
}

/// Element-wise kernels over `n` elements (grid-stride loops).
pub fn elementwise(n: usize) -> Geometry {
    let blocks = n.div_ceil(ELEMENTWISE_THREADS as usize).clamp(1, MAX_ELEMENTWISE_BLOCKS as usize) as u32;
    Geometry { grid: (blocks, 1, 1), block: (ELEMENTWISE_THREADS, 1, 1) }
}

/// One block per row, threads striding over `width` (row copies, RoPE, KV writes).
pub fn per_row(rows: usize, width: usize) -> Geometry {
    let threads = width.clamp(32, ELEMENTWISE_THREADS as usize).next_power_of_two().min(256) as u32;
    Geometry { grid: (rows.max(1) as u32, 1, 1), block: (threads, 1, 1) }
}

/// RMSNorm: one block per row, a power of two of threads (its shared-memory
/// tree needs one; at most 256, the size of that tree). The block depends on
/// `dim` only, so a row's reduction order does not depend on the batch.
pub fn rms_norm(rows: usize, dim: usize) -> Geometry {
    let threads = dim.next_power_of_two().clamp(32, 256) as u32;
    Geometry { grid: (rows.max(1) as u32, 1, 1), block: (threads, 1, 1) }
}

/// Attention: one block of `ATT_THREADS` per (query row, head).
pub fn attention(rows: usize, heads: usize) -> Geometry {
    Geometry { grid: (rows as u32, heads as u32, 1), block: (ATT_THREADS, 1, 1) }
}

/// Positions of the attention kernel's softmax chunks for a row at `pos`:
/// `(first, len)` each, from 0 upward (fixed by the row's own length).
pub fn attention_chunks(pos: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = pos + 1;
    let chunk = ATT_CHUNK as usize;
    (0..n.div_ceil(chunk)).map(move |c| (c * chunk, chunk.min(n - c * chunk)))
}

/// The attention kernel for a KV format and head shape, or why none serves it.
pub fn attention_kernel(
    format: KvFormat,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> Result<&'static str, GpuError> {
    if head_dim == 0 || head_dim > ATT_MAX_HEAD_DIM {
        return Err(GpuError::Unsupported(format!(
            "head_dim {head_dim}: the CUDA attention kernel serves heads of 1 to {ATT_MAX_HEAD_DIM} elements"
        )));
    }
    if !head_dim.is_multiple_of(2) {
        return Err(GpuError::Unsupported(format!("head_dim {head_dim}: rotary embeddings need an even head size")));
    }
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(GpuError::Unsupported(format!("{heads} query heads do not share {kv_heads} KV heads evenly")));
    }
    Ok(match format {
        KvFormat::F16 => "paged_attention_f16",
        KvFormat::Bf16 => "paged_attention_bf16",
        KvFormat::K16v8 => "paged_attention_k16v8",
    })
}

/// The `kv_write` kernel's format code (see `source.rs`).
pub fn kv_format_code(format: KvFormat) -> i32 {
    match format {
        KvFormat::F16 => 0,
        KvFormat::Bf16 => 1,
        KvFormat::K16v8 => 2,
    }
}

/// One sequence of a forward call, as the host sees it: its block table's
/// pages, the position of its first new row, and how many new rows it has.
#[derive(Debug, Clone, Copy)]
pub struct SeqRows<'a> {
    pub blocks: &'a [u32],
    pub start_pos: usize,
    pub rows: usize,
}

/// What the attention and KV-write kernels read, per forward call: every
/// sequence's pages concatenated (`tables`), and per new row (in batch order)
/// the offset of its sequence's pages in `tables`, its position, and the token
/// slot (`page * PAGE_SIZE + slot`) its keys and values go to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageTables {
    pub tables: Vec<i32>,
    pub row_table: Vec<i32>,
    pub row_pos: Vec<i32>,
    pub slots: Vec<i64>,
}

impl PageTables {
    /// Only the pages that hold positions `0..start_pos + rows` are uploaded.
    pub fn build(seqs: &[SeqRows<'_>]) -> Result<Self, GpuError> {
        let mut t = PageTables { tables: Vec::new(), row_table: Vec::new(), row_pos: Vec::new(), slots: Vec::new() };
        for (i, s) in seqs.iter().enumerate() {
            let end = s.start_pos + s.rows;
            let pages = end.div_ceil(PAGE_SIZE);
            if pages > s.blocks.len() {
                return Err(GpuError::Unsupported(format!(
                    "sequence {i}: {end} positions need {pages} pages, its table has {}",
                    s.blocks.len()
                )));
            }
            let offset = i32::try_from(t.tables.len()).map_err(|_| GpuError::Unsupported("too many pages".into()))?;
            for &b in &s.blocks[..pages] {
                t.tables.push(i32::try_from(b).map_err(|_| GpuError::Unsupported(format!("page {b}")))?);
            }
            for pos in s.start_pos..end {
                t.row_table.push(offset);
                t.row_pos.push(pos as i32);
                t.slots.push(s.blocks[pos / PAGE_SIZE] as i64 * PAGE_SIZE as i64 + (pos % PAGE_SIZE) as i64);
            }
        }
        Ok(t)
    }
}

/// The widths a forward pass works with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub hidden: usize,
    pub q_dim: usize,
    pub kv_dim: usize,
    pub intermediate: usize,
    pub vocab: usize,
}

/// Elements of each workspace buffer for a call of `rows` new rows of which
/// `logit_rows` want logits; every row count padded to whole GEMM tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkspaceSizes {
    pub rows: usize,
    pub logit_rows: usize,
    /// The residual stream, a normed copy, and the o_proj / down_proj output: `rows * hidden` each.
    pub hidden: usize,
    /// Queries and attention outputs: `rows * q_dim` each.
    pub q: usize,
    /// Keys and values: `rows * kv_dim` each.
    pub kv: usize,
    /// Gate and up: `rows * intermediate` each.
    pub mlp: usize,
    /// The f16 copy of a GEMM input (f16 weights only): `rows * max(widths)`.
    pub half_input: usize,
    /// Picked rows and their norm: `logit_rows * hidden` each.
    pub picked: usize,
    /// Logits: `logit_rows * vocab`.
    pub logits: usize,
}

impl WorkspaceSizes {
    pub fn new(d: Dims, rows: usize, logit_rows: usize, half_weights: bool) -> Self {
        let (rows, logit_rows) = (padded_rows(rows.max(1)), padded_rows(logit_rows.max(1)));
        let widest = d.hidden.max(d.q_dim).max(d.intermediate);
        WorkspaceSizes {
            rows,
            logit_rows,
            hidden: rows * d.hidden,
            q: rows * d.q_dim,
            kv: rows * d.kv_dim,
            mlp: rows * d.intermediate,
            half_input: if half_weights { rows.max(logit_rows) * widest } else { 0 },
            picked: logit_rows * d.hidden,
            logits: logit_rows * d.vocab,
        }
    }

    /// Device bytes of the whole workspace.
    pub fn bytes(&self) -> usize {
        4 * (3 * self.hidden + 2 * self.q + 2 * self.kv + 2 * self.mlp + 2 * self.picked + self.logits)
            + 2 * self.half_input
    }

    /// Whether a workspace of these sizes serves a call needing `other`.
    pub fn holds(&self, other: &WorkspaceSizes) -> bool {
        self.rows >= other.rows && self.logit_rows >= other.logit_rows && self.half_input >= other.half_input
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_tiles_cover_odd_row_counts_with_whole_tiles() {
        assert_eq!(padded_rows(1), ROW_TILE);
        assert_eq!(padded_rows(ROW_TILE), ROW_TILE);
        assert_eq!(padded_rows(ROW_TILE + 1), 2 * ROW_TILE);
        assert_eq!(gemm_tiles(1).collect::<Vec<_>>(), vec![0]);
        assert_eq!(gemm_tiles(130).collect::<Vec<_>>(), vec![0, 64, 128]);
        // Every row sits in exactly one tile, whatever the batch size.
        for rows in [1, 3, 63, 64, 65, 200, 511] {
            let tiles: Vec<usize> = gemm_tiles(rows).collect();
            for r in 0..rows {
                assert_eq!(tiles.iter().filter(|&&t| (t..t + ROW_TILE).contains(&r)).count(), 1, "{rows}: {r}");
            }
        }
    }

    #[test]
    fn launch_geometry_for_odd_shapes() {
        assert_eq!(elementwise(1), Geometry { grid: (1, 1, 1), block: (256, 1, 1) });
        assert_eq!(elementwise(257).grid.0, 2);
        assert_eq!(elementwise(usize::MAX / 2).grid.0, MAX_ELEMENTWISE_BLOCKS);
        // RMSNorm: power-of-two blocks from 32 to 256, by width only.
        assert_eq!(rms_norm(7, 576).block.0, 256);
        assert_eq!(rms_norm(7, 64).block.0, 64);
        assert_eq!(rms_norm(7, 3).block.0, 32);
        assert_eq!(rms_norm(7, 100).block.0, 128);
        assert_eq!(rms_norm(1, 100), rms_norm(500, 100).with_grid(1), "the block does not depend on the rows");
        assert_eq!(per_row(5, 3).block.0, 32);
        assert_eq!(per_row(5, 192).block.0, 256);
        assert_eq!(per_row(0, 192).grid.0, 1);
        assert_eq!(attention(3, 9), Geometry { grid: (3, 9, 1), block: (ATT_THREADS, 1, 1) });
    }

    impl Geometry {
        fn with_grid(self, rows: u32) -> Self {
            Geometry { grid: (rows, 1, 1), ..self }
        }
    }

    #[test]
    fn attention_chunks_depend_on_the_rows_own_position_only() {
        assert_eq!(attention_chunks(0).collect::<Vec<_>>(), vec![(0, 1)]);
        assert_eq!(attention_chunks(63).collect::<Vec<_>>(), vec![(0, 64)]);
        assert_eq!(attention_chunks(64).collect::<Vec<_>>(), vec![(0, 64), (64, 1)]);
        let total: usize = attention_chunks(1000).map(|(_, n)| n).sum();
        assert_eq!(total, 1001);
    }

    #[test]
    fn kernel_choice_per_format_and_shape() {
        assert_eq!(attention_kernel(KvFormat::F16, 9, 3, 64).unwrap(), "paged_attention_f16");
        assert_eq!(attention_kernel(KvFormat::Bf16, 16, 8, 128).unwrap(), "paged_attention_bf16");
        assert_eq!(attention_kernel(KvFormat::K16v8, 32, 8, 256).unwrap(), "paged_attention_k16v8");
        for (heads, kv, hd, want) in
            [(8, 8, 512, "1 to 256"), (8, 8, 0, "1 to 256"), (8, 8, 63, "even"), (9, 2, 64, "evenly")]
        {
            let e = attention_kernel(KvFormat::F16, heads, kv, hd).unwrap_err().to_string();
            assert!(e.contains(want), "{heads}/{kv}/{hd}: {e}");
        }
        assert_eq!([KvFormat::F16, KvFormat::Bf16, KvFormat::K16v8].map(kv_format_code), [0, 1, 2]);
        assert!(super::super::source::KERNELS.contains(&"paged_attention_k16v8"));
    }

    #[test]
    fn page_tables_upload_only_the_pages_in_use_and_slot_every_new_row() {
        let a = [7u32, 2, 9];
        let b = [4u32, 5];
        let t = PageTables::build(&[
            SeqRows { blocks: &a, start_pos: 30, rows: 3 }, // positions 30..33: pages 1 and 2
            SeqRows { blocks: &b, start_pos: 0, rows: 2 },
        ])
        .unwrap();
        assert_eq!(t.tables, vec![7, 2, 9, 4]);
        assert_eq!(t.row_table, vec![0, 0, 0, 3, 3]);
        assert_eq!(t.row_pos, vec![30, 31, 32, 0, 1]);
        assert_eq!(t.slots, vec![2 * 16 + 14, 2 * 16 + 15, 9 * 16, 4 * 16, 4 * 16 + 1]);
        let e = PageTables::build(&[SeqRows { blocks: &b, start_pos: 30, rows: 3 }]).unwrap_err().to_string();
        assert!(e.contains("need 3 pages"), "{e}");
    }

    #[test]
    fn workspace_sizing() {
        let d = Dims { hidden: 576, q_dim: 576, kv_dim: 192, intermediate: 1536, vocab: 49152 };
        let w = WorkspaceSizes::new(d, 3, 1, true);
        assert_eq!((w.rows, w.logit_rows), (64, 64));
        assert_eq!(w.hidden, 64 * 576);
        assert_eq!(w.kv, 64 * 192);
        assert_eq!(w.mlp, 64 * 1536);
        assert_eq!(w.half_input, 64 * 1536);
        assert_eq!(w.logits, 64 * 49152);
        let f32_only = WorkspaceSizes::new(d, 3, 1, false);
        assert_eq!(f32_only.half_input, 0);
        assert_eq!(w.bytes() - f32_only.bytes(), 2 * 64 * 1536);
        let big = WorkspaceSizes::new(d, 200, 130, true);
        assert_eq!((big.rows, big.logit_rows), (256, 192));
        assert!(big.holds(&w) && !w.holds(&big));
        assert_eq!(WorkspaceSizes::new(d, 0, 0, false).rows, ROW_TILE, "an empty call still gets one tile");
    }
}
