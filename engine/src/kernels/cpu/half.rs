//! Linear-layer weights stored as 16-bit floats (F16 or BF16, as the checkpoint
//! holds them) and widened exactly to f32 inside the dense kernel (`matmul`'s
//! `DenseElem`). Every f16 and bf16 value is an f32 value, so a layer over a
//! `HalfMatrix` gives bit for bit the result of the f32 layer over the widened
//! weights, on every CPU path, while holding and streaming half the bytes.
//!
//! Must not: round anything. A faster path that rounds activations to bf16
//! (AVX-512 BF16 `vdpbf16ps`) would change results and belongs beside this one,
//! behind its own mode and numerics gate, never in its place.

use super::dispatch::CpuPath;
use super::matmul::matmul_on;
use half::{bf16, f16};

/// The values of a [`HalfMatrix`], row-major.
#[derive(Debug, Clone, PartialEq)]
pub enum HalfData {
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

impl HalfData {
    fn len(&self) -> usize {
        match self {
            HalfData::F16(v) => v.len(),
            HalfData::Bf16(v) => v.len(),
        }
    }
}

/// A `[rows, cols]` weight matrix of 16-bit floats.
#[derive(Debug, Clone, PartialEq)]
pub struct HalfMatrix {
    pub rows: usize,
    pub cols: usize,
    data: HalfData,
}

impl HalfMatrix {
    /// `None` unless `data` holds exactly `rows * cols` values.
    pub fn new(rows: usize, cols: usize, data: HalfData) -> Option<Self> {
        (data.len() == rows * cols).then_some(HalfMatrix { rows, cols, data })
    }

    /// From little-endian bytes of F16 (`bf16: false`) or BF16 values.
    pub fn from_le_bytes(rows: usize, cols: usize, bytes: &[u8], bf16: bool) -> Option<Self> {
        if bytes.len() != 2 * rows * cols {
            return None;
        }
        let bits = bytes.chunks_exact(2).map(|b| u16::from_le_bytes([b[0], b[1]]));
        let data = if bf16 {
            HalfData::Bf16(bits.map(bf16::from_bits).collect())
        } else {
            HalfData::F16(bits.map(f16::from_bits).collect())
        };
        HalfMatrix::new(rows, cols, data)
    }

    /// `"f16"` or `"bf16"`.
    pub fn dtype(&self) -> &'static str {
        match self.data {
            HalfData::F16(_) => "f16",
            HalfData::Bf16(_) => "bf16",
        }
    }

    /// Row `r` widened to f32 (exact).
    pub fn row_f32(&self, r: usize, out: &mut [f32]) {
        let range = r * self.cols..(r + 1) * self.cols;
        match &self.data {
            HalfData::F16(v) => v[range].iter().zip(out).for_each(|(w, o)| *o = w.to_f32()),
            HalfData::Bf16(v) => v[range].iter().zip(out).for_each(|(w, o)| *o = w.to_f32()),
        }
    }

    /// The whole matrix widened to f32.
    pub fn to_f32(&self) -> Vec<f32> {
        let mut out = vec![0.0f32; self.rows * self.cols];
        for (r, o) in out.chunks_exact_mut(self.cols.max(1)).enumerate().take(self.rows) {
            self.row_f32(r, o);
        }
        out
    }
}

/// `y = x · Wᵀ` with `x` `[m, w.cols]`, on `path`: bit-identical to
/// `matmul_on(path, x, &w.to_f32(), ..)`.
pub fn matmul_half_on(path: CpuPath, x: &[f32], w: &HalfMatrix, m: usize) -> Vec<f32> {
    match &w.data {
        HalfData::F16(v) => matmul_on(path, x, v, m, w.cols, w.rows),
        HalfData::Bf16(v) => matmul_on(path, x, v, m, w.cols, w.rows),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values spread over many binades, both signs, with subnormals and zeros.
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|i| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let u = (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
                match i % 17 {
                    0 => 0.0,
                    1 => -1e-7 * u,
                    _ => u * 2f32.powi((i % 9) as i32 - 4),
                }
            })
            .collect()
    }

    #[test]
    fn sixteen_bit_weights_give_the_bits_of_the_f32_layer_on_every_path_and_batch_size() {
        // k = 83: ten 8-lane steps and a tail of 3; n = 37 covers every tile shape's tails.
        let (k, n) = (83, 37);
        let x = values(9 * k, 1);
        let w = values(n * k, 2);
        let bytes = |f: &dyn Fn(f32) -> [u8; 2]| w.iter().flat_map(|&v| f(v)).collect::<Vec<u8>>();
        let f16m = HalfMatrix::from_le_bytes(n, k, &bytes(&|v| f16::from_f32(v).to_le_bytes()), false).unwrap();
        let bf16m = HalfMatrix::from_le_bytes(n, k, &bytes(&|v| bf16::from_f32(v).to_le_bytes()), true).unwrap();
        for hm in [&f16m, &bf16m] {
            let widened = hm.to_f32();
            assert_ne!(widened, w, "{}: rounding must have changed some weights", hm.dtype());
            for path in CpuPath::supported() {
                for m in [1, 2, 3, 4, 5, 9] {
                    let want = matmul_on(path, &x[..m * k], &widened, m, k, n);
                    let got = matmul_half_on(path, &x[..m * k], hm, m);
                    let same = want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{} on {path}, m {m}: differs from the f32 layer", hm.dtype());
                }
            }
        }
    }

    #[test]
    fn rows_widen_exactly_and_sizes_are_checked() {
        let m = HalfMatrix::from_le_bytes(2, 2, &[0x80, 0x3f, 0x00, 0xc0, 0x00, 0x00, 0x01, 0x00], true).unwrap();
        let mut row = [0.0f32; 2];
        m.row_f32(0, &mut row);
        assert_eq!(row, [1.0, -2.0]);
        m.row_f32(1, &mut row);
        assert_eq!(row, [0.0, f32::from_bits(0x0001_0000)]);
        assert!(HalfMatrix::from_le_bytes(2, 2, &[0; 6], false).is_none());
        assert!(HalfMatrix::new(3, 1, HalfData::F16(vec![f16::ONE; 2])).is_none());
    }
}
