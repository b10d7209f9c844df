//! Row-wise element operations: RMSNorm, SwiGLU, residual add, log-softmax and
//! argmax. Each row is processed on its own in a fixed order, so results never
//! depend on the other rows of a batch.

use super::dispatch::{CpuFeatures, CpuPath};
use super::expf;
use rayon::prelude::*;

/// RMSNorm over each row of `x` (`[rows, dim]`): `x / sqrt(mean(x²) + eps) * weight`.
/// The sum of squares is accumulated in f64 in index order.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32) -> Vec<f32> {
    let dim = weight.len();
    let mut out = vec![0.0f32; x.len()];
    out.par_chunks_mut(dim).zip(x.par_chunks(dim)).for_each(|(o, r)| rms_norm_row(r, weight, eps, o));
    out
}

/// RMSNorm of one row into `out`.
pub fn rms_norm_row(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
    let inv = (1.0 / ((ss / x.len() as f64) + eps as f64).sqrt()) as f32;
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(weight) {
        *o = v * inv * g;
    }
}

/// SwiGLU: `silu(gate) * up`, element-wise, into `gate`, on `path`:
/// `g / (1 + e^-g) * u` with `expf::exp`, the same bits on every path (the
/// AVX2 and wider paths take eight elements at a time with `exp8`).
pub fn silu_mul_in_place(gate: &mut [f32], up: &[f32], path: CpuPath) {
    assert_eq!(gate.len(), up.len(), "SwiGLU: gate and up differ in length");
    assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
    gate.par_chunks_mut(4096).zip(up.par_chunks(4096)).for_each(|(g, u)| silu_mul_slice(g, u, path));
}

/// [`silu_mul_in_place`] on the calling thread (`path` supported by this CPU).
pub fn silu_mul_slice(g: &mut [f32], u: &[f32], path: CpuPath) {
    assert!(path.supported_by(CpuFeatures::get()), "CPU path {path} is not supported by this CPU");
    let done = match path {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the assert above checked that this CPU has AVX2 and FMA.
        CpuPath::Avx2 | CpuPath::Avx512 | CpuPath::Amx => unsafe { silu_mul_avx2(g, u) },
        _ => 0,
    };
    for (gv, &uv) in g[done..].iter_mut().zip(&u[done..]) {
        *gv = *gv / (1.0 + expf::exp(-*gv)) * uv;
    }
}

/// The whole groups of eight of [`silu_mul_in_place`]; returns how many
/// elements it did.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn silu_mul_avx2(g: &mut [f32], u: &[f32]) -> usize {
    use std::arch::x86_64::*;
    let full = g.len().min(u.len()) / 8 * 8;
    let one = _mm256_set1_ps(1.0);
    let mut i = 0;
    while i < full {
        // SAFETY: i + 8 <= full <= both lengths.
        unsafe {
            let x = _mm256_loadu_ps(g.as_ptr().add(i));
            let neg = _mm256_xor_ps(x, _mm256_set1_ps(-0.0));
            let s = _mm256_div_ps(x, _mm256_add_ps(one, expf::avx2::exp8(neg)));
            _mm256_storeu_ps(g.as_mut_ptr().add(i), _mm256_mul_ps(s, _mm256_loadu_ps(u.as_ptr().add(i))));
        }
        i += 8;
    }
    full
}

/// `acc += delta`, element-wise.
pub fn add_in_place(acc: &mut [f32], delta: &[f32]) {
    for (a, &d) in acc.iter_mut().zip(delta) {
        *a += d;
    }
}

/// Index of the largest value; ties go to the lowest index; NaN never wins.
pub fn argmax(row: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in row.iter().enumerate() {
        if v > best_v {
            best_v = v;
            best = i;
        }
    }
    best as u32
}

/// Natural-log softmax of one row, computed in f64 for scoring.
pub fn log_softmax(row: &[f32]) -> Vec<f64> {
    let max = row.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b)) as f64;
    let sum: f64 = row.iter().map(|&v| (v as f64 - max).exp()).sum();
    let lse = max + sum.ln();
    row.iter().map(|&v| v as f64 - lse).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_unit_rows() {
        let x = [3.0f32, 4.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0];
        let w = [1.0f32, 1.0, 1.0, 2.0];
        let y = rms_norm(&x, &w, 0.0);
        // row 0: rms = sqrt(25/4) = 2.5
        assert!((y[0] - 1.2).abs() < 1e-6 && (y[1] - 1.6).abs() < 1e-6);
        assert_eq!(&y[4..], &[1.0, 1.0, 1.0, 2.0]);
    }

    #[test]
    fn log_softmax_normalises() {
        let l = log_softmax(&[1.0, 2.0, 3.0]);
        let total: f64 = l.iter().map(|v| v.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12);
        assert!((l[2] - l[1] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn argmax_ties_and_nan() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(argmax(&[f32::NAN, 0.5, 0.1]), 1);
    }

    #[test]
    fn swiglu() {
        let mut g = vec![0.0f32, 1.0];
        silu_mul_in_place(&mut g, &[5.0, 2.0], CpuPath::Scalar);
        assert_eq!(g[0], 0.0);
        assert!((g[1] - 2.0 / (1.0 + (-1.0f32).exp())).abs() < 1e-6);
    }

    #[test]
    fn swiglu_gives_the_same_bits_on_every_path_and_is_close_to_f64() {
        // 8203 elements: several parallel chunks and a tail past whole vectors.
        let gate: Vec<f32> = (0..8203).map(|i| ((i * 7919 % 2003) as f32 / 2003.0 - 0.5) * 40.0).collect();
        let up: Vec<f32> = (0..8203).map(|i| ((i * 104_729 % 997) as f32 / 997.0 - 0.5) * 3.0).collect();
        let run = |path| {
            let mut g = gate.clone();
            silu_mul_in_place(&mut g, &up, path);
            g
        };
        let scalar = run(CpuPath::Scalar);
        for path in CpuPath::supported() {
            let got = run(path);
            assert!(got.iter().zip(&scalar).all(|(a, b)| a.to_bits() == b.to_bits()), "{path}");
        }
        for ((&x, &u), &y) in gate.iter().zip(&up).zip(&scalar) {
            let want = f64::from(x) / (1.0 + (-f64::from(x)).exp()) * f64::from(u);
            assert!((f64::from(y) - want).abs() <= 1e-6 * want.abs().max(1.0), "silu({x}) * {u} = {y} vs {want}");
        }
    }
}
