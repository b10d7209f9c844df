//! KV storage: per layer, keys and values for every page, laid out
//! `[page][slot][kv_head][head_dim]`. Writes convert f32 rows into the format.
//! Attention reads one KV head's history in place through a `HeadView` (the
//! stored bits, converted to f32 where they are used); `gather` copies it out as
//! f32 for tests and tools. Only positions below a table's `len` are ever read,
//! so unwritten bytes (which in E4M3 may decode as NaN) never reach a computation.

use super::PAGE_SIZE;
use super::format::{KvFormat, ValueScales, e4m3_table, encode_e4m3};
use super::pool::{BlockAllocator, BlockTable};
use crate::error::{EngineError, Result};
use serde::Serialize;

enum ValueStore {
    Half(Vec<u16>),
    E4m3(Vec<u8>),
}

struct LayerKv {
    k: Vec<u16>,
    v: ValueStore,
}

/// What the cache holds, for the startup log line and `/metrics`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KvInventory {
    pub format: KvFormat,
    pub page_size: usize,
    pub blocks: usize,
    pub layers: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Payload bytes per token slot across all layers (keys + values).
    pub bytes_per_token: usize,
    pub key_bytes_per_token: usize,
    pub value_bytes_per_token: usize,
    /// Physical payload bytes of the whole pool.
    pub physical_bytes: usize,
    /// Token slots of the whole pool.
    pub logical_token_slots: usize,
}

pub struct KvCache {
    format: KvFormat,
    layers: Vec<LayerKv>,
    kv_heads: usize,
    head_dim: usize,
    blocks: usize,
    inv_scales: Vec<f32>,
    scales: Vec<f32>,
    e4m3: [f32; 256],
    alloc: BlockAllocator,
    /// The pages' bytes on a device, when the model runs on one (the CUDA
    /// backend's store, in this cache's layout and format; the host stores
    /// above are then never written). This cache still owns the block
    /// allocator and tables the device kernels read the pages through.
    device: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl KvCache {
    /// Payload bytes one token slot takes in `format` (keys + values, all layers).
    pub fn bytes_per_token(format: KvFormat, layers: usize, kv_heads: usize, head_dim: usize) -> usize {
        layers * kv_heads * head_dim * (format.key_bytes() + format.value_bytes())
    }

    /// A cache of as many pages as fit in `budget_bytes`.
    pub fn with_budget(
        format: KvFormat,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        budget_bytes: usize,
        scales: Option<&ValueScales>,
    ) -> Result<Self> {
        let per_block = Self::bytes_per_token(format, layers, kv_heads, head_dim) * PAGE_SIZE;
        let blocks = budget_bytes / per_block.max(1);
        if blocks == 0 {
            return Err(EngineError::Kv(format!(
                "KV budget of {budget_bytes} bytes holds no page ({per_block} bytes per {PAGE_SIZE}-token page in {format})"
            )));
        }
        Self::new(format, layers, kv_heads, head_dim, blocks, scales)
    }

    pub fn new(
        format: KvFormat,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        blocks: usize,
        scales: Option<&ValueScales>,
    ) -> Result<Self> {
        Self::build(format, layers, kv_heads, head_dim, blocks, scales, 0, 0)
    }

    /// As [`KvCache::new`], but every byte starts as a NaN pattern (f16/bf16 0x7FFF,
    /// E4M3 0x7F): tests use it to prove that unwritten slots are never read.
    pub fn new_poisoned(
        format: KvFormat,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        blocks: usize,
        scales: Option<&ValueScales>,
    ) -> Result<Self> {
        Self::build(format, layers, kv_heads, head_dim, blocks, scales, 0x7FFF, 0x7F)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        format: KvFormat,
        layers: usize,
        kv_heads: usize,
        head_dim: usize,
        blocks: usize,
        scales: Option<&ValueScales>,
        fill16: u16,
        fill8: u8,
    ) -> Result<Self> {
        let scales: Vec<f32> = match (format.needs_scales(), scales) {
            (true, Some(s)) => {
                s.validate()?;
                s.check_layers(layers)?;
                s.scales.clone()
            }
            (true, None) => {
                return Err(EngineError::KvScales(
                    "the k16v8 format needs per-layer value scales (--kv-scales FILE, written by `engine calibrate`)"
                        .into(),
                ));
            }
            (false, _) => vec![1.0; layers],
        };
        let n = blocks * PAGE_SIZE * kv_heads * head_dim;
        let layers_kv = (0..layers)
            .map(|_| LayerKv {
                k: vec![fill16; n],
                v: match format {
                    KvFormat::K16v8 => ValueStore::E4m3(vec![fill8; n]),
                    _ => ValueStore::Half(vec![fill16; n]),
                },
            })
            .collect();
        Ok(KvCache {
            format,
            layers: layers_kv,
            kv_heads,
            head_dim,
            blocks,
            inv_scales: scales.iter().map(|s| 1.0 / s).collect(),
            scales,
            e4m3: e4m3_table(),
            alloc: BlockAllocator::new(blocks),
            device: None,
        })
    }

    pub fn format(&self) -> KvFormat {
        self.format
    }

    /// Gives the cache a device store for its pages' bytes (replacing any).
    pub fn attach_device_store(&mut self, store: Box<dyn std::any::Any + Send + Sync>) {
        self.device = Some(store);
    }

    /// The device store, if one of type `T` is attached.
    pub fn device_store<T: 'static>(&self) -> Option<&T> {
        self.device.as_ref().and_then(|d| d.downcast_ref::<T>())
    }

    pub fn allocator(&self) -> &BlockAllocator {
        &self.alloc
    }

    pub fn new_table(&self) -> BlockTable {
        self.alloc.new_table()
    }

    pub fn value_scales(&self) -> &[f32] {
        &self.scales
    }

    pub fn inventory(&self) -> KvInventory {
        let elems = self.layers.len() * self.kv_heads * self.head_dim;
        let key = elems * self.format.key_bytes();
        let value = elems * self.format.value_bytes();
        KvInventory {
            format: self.format,
            page_size: PAGE_SIZE,
            blocks: self.blocks,
            layers: self.layers.len(),
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            bytes_per_token: key + value,
            key_bytes_per_token: key,
            value_bytes_per_token: value,
            physical_bytes: (key + value) * self.blocks * PAGE_SIZE,
            logical_token_slots: self.blocks * PAGE_SIZE,
        }
    }

    fn offset(&self, table: &BlockTable, pos: usize) -> usize {
        let (block, slot) = table.slot(pos);
        (block * PAGE_SIZE + slot) * self.kv_heads * self.head_dim
    }

    /// Stores the keys and values of positions `start..start + rows` for one layer.
    /// `k` and `v` are `[rows, kv_heads * head_dim]`. The table must have room.
    pub fn write(&mut self, layer: usize, table: &BlockTable, start: usize, k: &[f32], v: &[f32]) {
        let kv_dim = self.kv_heads * self.head_dim;
        let rows = k.len() / kv_dim;
        assert!(start + rows <= table.capacity(), "KV write past the table's pages");
        let format = self.format;
        let inv_scale = self.inv_scales[layer];
        for r in 0..rows {
            let off = self.offset(table, start + r);
            let lkv = &mut self.layers[layer];
            let kr = &k[r * kv_dim..(r + 1) * kv_dim];
            for (dst, &x) in lkv.k[off..off + kv_dim].iter_mut().zip(kr) {
                *dst = format.encode16(x);
            }
            let vr = &v[r * kv_dim..(r + 1) * kv_dim];
            match &mut lkv.v {
                ValueStore::Half(store) => {
                    for (dst, &x) in store[off..off + kv_dim].iter_mut().zip(vr) {
                        *dst = format.encode16(x);
                    }
                }
                ValueStore::E4m3(store) => {
                    for (dst, &x) in store[off..off + kv_dim].iter_mut().zip(vr) {
                        *dst = encode_e4m3(x, inv_scale);
                    }
                }
            }
        }
    }

    /// Positions `0..len` of one KV head in `layer`, read in place.
    pub fn head_view<'a>(&'a self, layer: usize, table: &'a BlockTable, kv_head: usize, len: usize) -> HeadView<'a> {
        assert!(len <= table.len(), "KV read of unwritten positions ({len} > {})", table.len());
        assert!(kv_head < self.kv_heads, "KV head {kv_head} of {}", self.kv_heads);
        let lkv = &self.layers[layer];
        let values = match &lkv.v {
            ValueStore::Half(store) => HeadValues::Half(store),
            ValueStore::E4m3(codes) => HeadValues::E4m3 { codes, table: &self.e4m3, scale: self.scales[layer] },
        };
        let pages = len.div_ceil(PAGE_SIZE);
        let blocks = &table.blocks()[..pages];
        // Every page read lies inside the stores: kernels index them unchecked.
        assert!(blocks.iter().all(|&b| (b as usize) < self.blocks), "block table names a page outside the cache");
        HeadView {
            format: self.format,
            keys: &lkv.k,
            values,
            blocks,
            stride: self.kv_heads * self.head_dim,
            head_off: kv_head * self.head_dim,
            head_dim: self.head_dim,
            len,
        }
    }

    /// Reads positions `0..len` of one KV head back to f32, `[len, head_dim]` each.
    pub fn gather(
        &self,
        layer: usize,
        table: &BlockTable,
        kv_head: usize,
        len: usize,
        k_out: &mut Vec<f32>,
        v_out: &mut Vec<f32>,
    ) {
        let view = self.head_view(layer, table, kv_head, len);
        let hd = self.head_dim;
        k_out.clear();
        v_out.clear();
        k_out.resize(len * hd, 0.0);
        v_out.resize(len * hd, 0.0);
        for pos in 0..len {
            view.key_f32(pos, &mut k_out[pos * hd..(pos + 1) * hd]);
            view.value_f32(pos, &mut v_out[pos * hd..(pos + 1) * hd]);
        }
    }

    /// Records that positions `0..len` of `table` now hold data.
    pub fn commit(&self, table: &mut BlockTable, len: usize) {
        table.set_len(len);
    }
}

/// A layer's values as stored.
#[derive(Clone, Copy)]
pub enum HeadValues<'a> {
    /// 16-bit values in the cache's format (f16 or bf16), the whole layer.
    Half(&'a [u16]),
    /// E4M3 codes of the whole layer, read back as `table[code] * scale`.
    E4m3 { codes: &'a [u8], table: &'a [f32; 256], scale: f32 },
}

/// One KV head's stored history (positions `0..len`) in one layer, in place:
/// position `pos` is `head_dim` elements from `offset(pos)` of `keys` and of
/// the value store. Every offset lies inside the stores (checked when the view
/// is made), so kernels may read `head_dim` elements there unchecked.
#[derive(Clone, Copy)]
pub struct HeadView<'a> {
    pub format: KvFormat,
    /// The layer's whole key store (16-bit, in `format`).
    pub keys: &'a [u16],
    pub values: HeadValues<'a>,
    blocks: &'a [u32],
    stride: usize,
    head_off: usize,
    pub head_dim: usize,
    pub len: usize,
}

impl HeadView<'_> {
    /// Element offset of position `pos` (`< len`) in the key and value stores.
    #[inline]
    pub fn offset(&self, pos: usize) -> usize {
        debug_assert!(pos < self.len);
        (self.blocks[pos / PAGE_SIZE] as usize * PAGE_SIZE + pos % PAGE_SIZE) * self.stride + self.head_off
    }

    /// Position `pos`'s key as f32 (exact).
    pub fn key_f32(&self, pos: usize, out: &mut [f32]) {
        let off = self.offset(pos);
        decode16_into(self.format, &self.keys[off..off + self.head_dim], out);
    }

    /// Position `pos`'s value as f32 (exact for 16-bit; `table[code] * scale` for E4M3).
    pub fn value_f32(&self, pos: usize, out: &mut [f32]) {
        let off = self.offset(pos);
        match self.values {
            HeadValues::Half(store) => decode16_into(self.format, &store[off..off + self.head_dim], out),
            HeadValues::E4m3 { codes, table, scale } => {
                for (o, &b) in out.iter_mut().zip(&codes[off..off + self.head_dim]) {
                    *o = table[b as usize] * scale;
                }
            }
        }
    }
}

/// Decodes 16-bit keys or values with the slice conversions of `half`
/// (vectorised where the CPU has F16C), bit-identical to element-wise decoding.
fn decode16_into(format: KvFormat, src: &[u16], out: &mut [f32]) {
    use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
    match format {
        KvFormat::Bf16 => src.reinterpret_cast::<half::bf16>().convert_to_f32_slice(out),
        KvFormat::F16 | KvFormat::K16v8 => src.reinterpret_cast::<half::f16>().convert_to_f32_slice(out),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k16v8_stores_25_percent_fewer_bytes_than_f16() {
        let f16 = KvCache::bytes_per_token(KvFormat::F16, 30, 3, 64);
        let k16v8 = KvCache::bytes_per_token(KvFormat::K16v8, 30, 3, 64);
        assert_eq!(f16, 30 * 3 * 64 * 4);
        assert_eq!(k16v8 * 4, f16 * 3, "k16v8 must be exactly 75% of f16");
        let scales = ValueScales { rule: String::new(), scales: vec![1.0; 2] };
        let a = KvCache::with_budget(KvFormat::F16, 2, 2, 8, 1 << 20, None).unwrap().inventory();
        let b = KvCache::with_budget(KvFormat::K16v8, 2, 2, 8, 1 << 20, Some(&scales)).unwrap().inventory();
        assert_eq!(b.bytes_per_token * 4, a.bytes_per_token * 3);
        assert!(b.logical_token_slots > a.logical_token_slots);
    }

    #[test]
    fn round_trips_through_pages() {
        let scales = ValueScales { rule: String::new(), scales: vec![0.5] };
        for format in [KvFormat::F16, KvFormat::Bf16, KvFormat::K16v8] {
            let mut c = KvCache::new_poisoned(format, 1, 2, 4, 4, Some(&scales)).unwrap();
            let mut t = c.new_table();
            assert!(t.reserve(20));
            let k: Vec<f32> = (0..20 * 8).map(|i| (i as f32) * 0.25).collect();
            let v: Vec<f32> = (0..20 * 8).map(|i| -(i as f32) * 0.125).collect();
            c.write(0, &t, 0, &k[..12 * 8], &v[..12 * 8]);
            c.write(0, &t, 12, &k[12 * 8..], &v[12 * 8..]);
            c.commit(&mut t, 20);
            let (mut ko, mut vo) = (Vec::new(), Vec::new());
            c.gather(0, &t, 1, 20, &mut ko, &mut vo);
            for pos in 0..20 {
                for d in 0..4 {
                    let want_k = k[pos * 8 + 4 + d];
                    let want_v = v[pos * 8 + 4 + d];
                    let tol = match format {
                        KvFormat::F16 => 1e-3 * want_k.abs().max(1.0),
                        _ => 0.07 * want_k.abs().max(1.0),
                    };
                    assert!((ko[pos * 4 + d] - want_k).abs() <= tol, "{format} k {pos} {d}");
                    assert!((vo[pos * 4 + d] - want_v).abs() <= 0.07 * want_v.abs().max(1.0), "{format} v");
                    assert!(ko[pos * 4 + d].is_finite() && vo[pos * 4 + d].is_finite());
                }
            }
        }
    }

    #[test]
    fn k16v8_without_scales_is_refused() {
        let e = KvCache::new(KvFormat::K16v8, 2, 1, 4, 2, None).err().unwrap().to_string();
        assert!(e.contains("--kv-scales"), "{e}");
        let wrong = ValueScales { rule: String::new(), scales: vec![1.0; 3] };
        let e = KvCache::new(KvFormat::K16v8, 2, 1, 4, 2, Some(&wrong)).err().unwrap().to_string();
        assert!(e.contains("2 layers"), "{e}");
    }

    #[test]
    #[should_panic(expected = "unwritten")]
    fn reading_unwritten_positions_panics() {
        let c = KvCache::new(KvFormat::F16, 1, 1, 4, 2, None).unwrap();
        let mut t = c.new_table();
        assert!(t.reserve(4));
        let (mut a, mut b) = (Vec::new(), Vec::new());
        c.gather(0, &t, 0, 3, &mut a, &mut b);
    }
}
