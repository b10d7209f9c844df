//! Rotary position embeddings in the split-half (Hugging Face `rotate_half`,
//! GPT-NeoX) layout: dimension i pairs with i + head_dim/2. GGUF llama files,
//! whose Q/K rows are permuted for adjacent-pair rotation, are un-permuted at load
//! so that this one layout serves every checkpoint.

/// Precomputed cos/sin for positions `0..max_pos`, angles computed in f64.
#[derive(Debug, Clone)]
pub struct RopeTable {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    pub fn new(head_dim: usize, theta: f32, max_pos: usize) -> Self {
        let half = head_dim / 2;
        let mut cos = Vec::with_capacity(max_pos * half);
        let mut sin = Vec::with_capacity(max_pos * half);
        for p in 0..max_pos {
            for i in 0..half {
                let inv_freq = (theta as f64).powf(-(2.0 * i as f64) / head_dim as f64);
                let a = p as f64 * inv_freq;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        RopeTable { half, cos, sin }
    }

    /// The cosines and sines, `[position][head_dim / 2]` each (the CUDA
    /// backend uploads them).
    pub fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
    }

    pub fn max_positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }

    /// Rotates every head of one row (`[heads * head_dim]`) in place at `pos`.
    pub fn apply(&self, row: &mut [f32], pos: usize) {
        let half = self.half;
        let c = &self.cos[pos * half..(pos + 1) * half];
        let s = &self.sin[pos * half..(pos + 1) * half];
        for head in row.chunks_exact_mut(2 * half) {
            let (a, b) = head.split_at_mut(half);
            for i in 0..half {
                let (x1, x2) = (a[i], b[i]);
                a[i] = x1 * c[i] - x2 * s[i];
                b[i] = x2 * c[i] + x1 * s[i];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn position_zero_is_identity_and_norm_is_kept() {
        let t = RopeTable::new(8, 10000.0, 16);
        let orig: Vec<f32> = (0..16).map(|i| i as f32 * 0.25 - 1.0).collect();
        let mut r = orig.clone();
        t.apply(&mut r, 0);
        assert_eq!(r, orig);
        t.apply(&mut r, 7);
        let n0: f32 = orig.iter().map(|v| v * v).sum();
        let n1: f32 = r.iter().map(|v| v * v).sum();
        assert!((n0 - n1).abs() < 1e-4);
    }

    #[test]
    fn rotates_first_pair_by_position() {
        let t = RopeTable::new(4, 10000.0, 8);
        let mut r = vec![1.0, 0.0, 0.0, 0.0];
        t.apply(&mut r, 3);
        // pair (0, 2) rotated by angle 3 * theta^0 = 3 rad
        assert!((r[0] - 3.0f32.cos()).abs() < 1e-6);
        assert!((r[2] - 3.0f32.sin()).abs() < 1e-6);
    }
}
