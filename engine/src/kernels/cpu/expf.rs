//! `e^x` in f32 written out as basic IEEE operations and fused multiply-adds
//! (Cephes' `expf`: range reduction by `n = round(x·log2 e)`, a degree-5
//! polynomial, scaling by `2^n` through the exponent bits), so that the
//! portable form ([`exp`]), the eight-lane AVX2 form ([`avx2::exp8`]) and the
//! sixteen-lane AVX-512 form ([`avx512::exp16`]) give the same bits for every input, which libm's `expf` cannot promise against
//! any vector form. The softmax of attention uses it on every path.
//!
//! Inputs are clamped to `[LO, HI]` first: below `LO` (about -87.3) the result
//! is the smallest normal power of two's neighbourhood rather than a subnormal
//! or zero (a softmax weight under 1e-38 next to the row's maximum, weight 1),
//! above `HI` it is finite. Relative error below 2.5e-7 over the clamped range
//! (tested against f64 `exp`). NaN inputs are not handled (scores never are).

/// Smallest input: `2^n` stays a normal f32 for every `n` it reduces to.
pub const LO: f32 = -87.3;
/// Largest input: `2^n` stays finite.
pub const HI: f32 = 88.0;

const LOG2E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split in two: C1 exactly representable with few bits, C2 the rest
/// (Cephes' constants, written as published).
#[allow(clippy::excessive_precision)]
const C1: f32 = 0.693_359_375;
const C2: f32 = -2.121_944_4e-4;
/// Cephes' polynomial for `(e^r - 1 - r) / r²`, highest degree first.
#[allow(clippy::excessive_precision)]
const P: [f32; 6] = [1.987_569_1e-4, 1.398_2e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1];

/// `e^x` (see the module doc), one value.
#[inline]
pub fn exp(x: f32) -> f32 {
    let x = x.clamp(LO, HI);
    let n = (x * LOG2E).round_ties_even();
    let r = (-n).mul_add(C1, x);
    let r = (-n).mul_add(C2, r);
    let mut p = P[0];
    for &c in &P[1..] {
        p = p.mul_add(r, c);
    }
    let y = p.mul_add(r * r, r) + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}

#[cfg(target_arch = "x86_64")]
pub mod avx2 {
    //! [`super::exp`] on eight lanes, the same operations in the same order.
    use super::{C1, C2, HI, LO, LOG2E, P};
    use std::arch::x86_64::*;

    /// `e^x` of each lane, bit for bit [`super::exp`].
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    pub fn exp8(x: __m256) -> __m256 {
        let x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(HI)), _mm256_set1_ps(LO));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            x,
            _mm256_set1_ps(LOG2E),
        ));
        let neg = _mm256_xor_ps(n, _mm256_set1_ps(-0.0));
        let r = _mm256_fmadd_ps(neg, _mm256_set1_ps(C1), x);
        let r = _mm256_fmadd_ps(neg, _mm256_set1_ps(C2), r);
        let mut p = _mm256_set1_ps(P[0]);
        for &c in &P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0));
        let e = _mm256_slli_epi32::<23>(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)));
        _mm256_mul_ps(y, _mm256_castsi256_ps(e))
    }
}

#[cfg(target_arch = "x86_64")]
pub mod avx512 {
    //! [`super::exp`] on sixteen lanes, the same operations in the same order.
    use super::{C1, C2, HI, LO, LOG2E, P};
    use std::arch::x86_64::*;

    /// `e^x` of each lane, bit for bit [`super::exp`].
    ///
    /// # Safety
    /// The CPU must have AVX-512 F.
    #[inline]
    #[target_feature(enable = "avx2,fma,avx512f")]
    pub fn exp16(x: __m512) -> __m512 {
        let x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(HI)), _mm512_set1_ps(LO));
        let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_mul_ps(
            x,
            _mm512_set1_ps(LOG2E),
        ));
        let neg = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(n), _mm512_set1_epi32(i32::MIN)));
        let r = _mm512_fmadd_ps(neg, _mm512_set1_ps(C1), x);
        let r = _mm512_fmadd_ps(neg, _mm512_set1_ps(C2), r);
        let mut p = _mm512_set1_ps(P[0]);
        for &c in &P[1..] {
            p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
        }
        let y = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0));
        let e = _mm512_slli_epi32::<23>(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)));
        _mm512_mul_ps(y, _mm512_castsi512_ps(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every f32 in [-90, 90] at a stride of 997 bit patterns, plus the edges.
    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = [0.0f32, -0.0, LO, HI, -1e-30, 1e-30, -0.5, 0.5, -103.0, 100.0].to_vec();
        for bits in (0u32..=u32::MAX).step_by(997) {
            let x = f32::from_bits(bits);
            if x.is_finite() && x.abs() <= 90.0 {
                v.push(x);
            }
        }
        v
    }

    #[test]
    fn within_2_5e_7_of_f64_exp_over_the_clamped_range() {
        let mut worst = 0.0f64;
        for x in inputs() {
            let c = x.clamp(LO, HI);
            let want = f64::from(c).exp();
            let rel = (f64::from(exp(x)) - want).abs() / want;
            worst = worst.max(rel);
            assert!(rel < 2.5e-7, "exp({x}) = {} vs {want} (rel {rel:e})", exp(x));
        }
        eprintln!("worst relative error {worst:e}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(-200.0) > 0.0 && exp(200.0).is_finite());
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn eight_lanes_give_the_portable_bits() {
        use std::arch::x86_64::*;
        if !crate::kernels::cpu::dispatch::CpuPath::Avx2.supported_by(crate::kernels::cpu::dispatch::CpuFeatures::get())
        {
            eprintln!("no AVX2 here: nothing to compare");
            return;
        }
        let xs = inputs();
        for chunk in xs.chunks_exact(8) {
            let mut got = [0.0f32; 8];
            // SAFETY: AVX2 and FMA checked above; both pointers hold eight floats.
            unsafe { _mm256_storeu_ps(got.as_mut_ptr(), avx2::exp8(_mm256_loadu_ps(chunk.as_ptr()))) };
            for (x, g) in chunk.iter().zip(got) {
                assert_eq!(g.to_bits(), exp(*x).to_bits(), "exp({x})");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn sixteen_lanes_give_the_portable_bits() {
        use std::arch::x86_64::*;
        if !crate::kernels::cpu::dispatch::CpuPath::Avx512
            .supported_by(crate::kernels::cpu::dispatch::CpuFeatures::get())
        {
            eprintln!("no AVX-512 here: nothing to compare");
            return;
        }
        let xs = inputs();
        for chunk in xs.chunks_exact(16) {
            let mut got = [0.0f32; 16];
            // SAFETY: AVX-512 F checked above; both pointers hold sixteen floats.
            unsafe { _mm512_storeu_ps(got.as_mut_ptr(), avx512::exp16(_mm512_loadu_ps(chunk.as_ptr()))) };
            for (x, g) in chunk.iter().zip(got) {
                assert_eq!(g.to_bits(), exp(*x).to_bits(), "exp({x})");
            }
        }
    }
}
