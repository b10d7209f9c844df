//! Exact binomial arithmetic for Binomial(n, 1/2), used by the sign test and by
//! the order-statistic median interval.
//!
//! Owns a minimal unsigned big integer (only the operations the binomial sums
//! need) and the exact sums `sum C(n, k)` over a range of `k`. Every
//! probability is formed as an exact integer divided by `2^n` and converted to
//! `f64` once, correctly rounded (round to nearest, ties to even) for every
//! result at or above `f64::MIN_POSITIVE` (about 2.2e-308); only results in the
//! subnormal range may carry one extra rounding. It must not use floating point
//! before that final conversion. Cost is O(n^2 / 64) word operations; callers
//! check `n <= MAX_EXACT_N` first, so the worst case stays under a second.

use std::cmp::Ordering;

use super::error::{Result, StatsError};

/// Largest `n` the exact sums accept (about 0.6 s of work at the limit in an
/// optimized build; a study has tens of blocks). Larger `n` is an error, not
/// a long stall.
pub const MAX_EXACT_N: u64 = 100_000;

/// Rejects `n > MAX_EXACT_N`.
pub(crate) fn check_exact_n(n: u64) -> Result<()> {
    if n > MAX_EXACT_N {
        return Err(StatsError::OutOfRange {
            name: "number of trials for exact binomial sums",
            value: n as f64,
            allowed: "[0, MAX_EXACT_N = 100000]",
        });
    }
    Ok(())
}

/// Little-endian base-2^64 unsigned integer, without leading zero limbs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BigUint {
    limbs: Vec<u64>,
}

impl BigUint {
    pub(crate) fn zero() -> Self {
        Self { limbs: Vec::new() }
    }

    pub(crate) fn from_u64(v: u64) -> Self {
        let mut out = Self { limbs: vec![v] };
        out.trim();
        out
    }

    /// `2^e`.
    pub(crate) fn pow2(e: u64) -> Self {
        let words = (e / 64) as usize;
        let mut limbs = vec![0u64; words + 1];
        limbs[words] = 1u64 << (e % 64);
        Self { limbs }
    }

    fn trim(&mut self) {
        while self.limbs.last() == Some(&0) {
            self.limbs.pop();
        }
    }

    /// `self *= m`.
    pub(crate) fn mul_small(&mut self, m: u64) {
        let mut carry: u128 = 0;
        for limb in &mut self.limbs {
            let prod = u128::from(*limb) * u128::from(m) + carry;
            *limb = prod as u64;
            carry = prod >> 64;
        }
        if carry != 0 {
            self.limbs.push(carry as u64);
        }
        self.trim();
    }

    /// `self /= d`, returning the remainder. `d` must be non-zero.
    pub(crate) fn div_small(&mut self, d: u64) -> u64 {
        debug_assert!(d != 0);
        let mut rem: u128 = 0;
        for limb in self.limbs.iter_mut().rev() {
            let cur = (rem << 64) | u128::from(*limb);
            *limb = (cur / u128::from(d)) as u64;
            rem = cur % u128::from(d);
        }
        self.trim();
        rem as u64
    }

    /// `self += other`.
    pub(crate) fn add_assign(&mut self, other: &Self) {
        if self.limbs.len() < other.limbs.len() {
            self.limbs.resize(other.limbs.len(), 0);
        }
        let mut carry = false;
        for (i, limb) in self.limbs.iter_mut().enumerate() {
            let o = other.limbs.get(i).copied().unwrap_or(0);
            if o == 0 && !carry && i >= other.limbs.len() {
                break;
            }
            let (s1, c1) = limb.overflowing_add(o);
            let (s2, c2) = s1.overflowing_add(u64::from(carry));
            *limb = s2;
            carry = c1 || c2;
        }
        if carry {
            self.limbs.push(1);
        }
    }

    /// `self - other`, or `None` when `other > self`.
    pub(crate) fn checked_sub(&self, other: &Self) -> Option<Self> {
        if self.cmp_value(other) == Ordering::Less {
            return None;
        }
        let mut limbs = self.limbs.clone();
        let mut borrow = false;
        for (i, limb) in limbs.iter_mut().enumerate() {
            let o = other.limbs.get(i).copied().unwrap_or(0);
            let (d1, b1) = limb.overflowing_sub(o);
            let (d2, b2) = d1.overflowing_sub(u64::from(borrow));
            *limb = d2;
            borrow = b1 || b2;
        }
        let mut out = Self { limbs };
        out.trim();
        Some(out)
    }

    pub(crate) fn cmp_value(&self, other: &Self) -> Ordering {
        self.limbs.len().cmp(&other.limbs.len()).then_with(|| {
            for (a, b) in self.limbs.iter().rev().zip(other.limbs.iter().rev()) {
                if a != b {
                    return a.cmp(b);
                }
            }
            Ordering::Equal
        })
    }

    fn bit_len(&self) -> u64 {
        match self.limbs.last() {
            None => 0,
            Some(top) => (self.limbs.len() as u64 - 1) * 64 + (64 - u64::from(top.leading_zeros())),
        }
    }

    fn bit(&self, i: u64) -> bool {
        let word = (i / 64) as usize;
        self.limbs.get(word).is_some_and(|w| (w >> (i % 64)) & 1 == 1)
    }

    /// True when any bit below position `i` is set.
    fn any_bit_below(&self, i: u64) -> bool {
        let word = (i / 64) as usize;
        let whole = self.limbs.iter().take(word).any(|&w| w != 0);
        let partial_bits = i % 64;
        let partial = partial_bits != 0 && self.limbs.get(word).is_some_and(|w| w & ((1u64 << partial_bits) - 1) != 0);
        whole || partial
    }

    /// `self / 2^e` as `f64`, correctly rounded (see the module doc for the
    /// subnormal caveat).
    pub(crate) fn ratio_to_pow2(&self, e: u64) -> f64 {
        let bits = self.bit_len();
        if bits == 0 {
            return 0.0;
        }
        // Take the top 64 bits; fold everything below into a sticky bit so that
        // the single u64 -> f64 conversion rounds exactly as the full value would.
        let shift = bits.saturating_sub(64);
        let mut top: u64 = 0;
        for i in (shift..bits).rev() {
            top = (top << 1) | u64::from(self.bit(i));
        }
        if self.any_bit_below(shift) {
            top |= 1;
        }
        let mantissa = top as f64;
        scale_pow2(mantissa, shift as i128 - e as i128)
    }
}

/// `x * 2^exp` for finite positive `x`, in steps that stay in the normal range
/// until the last multiplication.
fn scale_pow2(mut x: f64, mut exp: i128) -> f64 {
    const STEP: i128 = 1000;
    while exp > STEP {
        x *= f64::from_bits(((1023 + STEP) as u64) << 52);
        exp -= STEP;
        if x.is_infinite() {
            return x;
        }
    }
    while exp < -STEP {
        x *= f64::from_bits(((1023 - STEP) as u64) << 52);
        exp += STEP;
        if x == 0.0 {
            return x;
        }
    }
    x * f64::from_bits(((1023 + exp) as u64) << 52)
}

/// Exact `sum_{k=lo}^{hi} C(n, k)` (empty range gives zero). Walks the
/// binomial coefficients from whichever end of `0..=n` is nearer the range.
pub(crate) fn binomial_sum(n: u64, lo: u64, hi: u64) -> BigUint {
    let hi = hi.min(n);
    if lo > hi {
        return BigUint::zero();
    }
    let mut sum = BigUint::zero();
    if lo <= n - hi {
        // Upward from C(n, 0) = 1: C(n, k+1) = C(n, k) * (n - k) / (k + 1).
        let mut c = BigUint::from_u64(1);
        for k in 0..=hi {
            if k >= lo {
                sum.add_assign(&c);
            }
            if k < hi {
                c.mul_small(n - k);
                let rem = c.div_small(k + 1);
                debug_assert_eq!(rem, 0);
            }
        }
    } else {
        // Downward from C(n, n) = 1: C(n, k-1) = C(n, k) * k / (n - k + 1).
        let mut c = BigUint::from_u64(1);
        let mut k = n;
        loop {
            if k <= hi {
                sum.add_assign(&c);
            }
            if k == lo {
                break;
            }
            c.mul_small(k);
            let rem = c.div_small(n - k + 1);
            debug_assert_eq!(rem, 0);
            k -= 1;
        }
    }
    sum
}

/// Exact `P(Binomial(n, 1/2) >= k)`, correctly rounded to `f64`.
pub(crate) fn upper_tail_half(n: u64, k: u64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if k > n {
        return 0.0;
    }
    // Sum whichever side has fewer terms.
    let count = if k > n / 2 {
        binomial_sum(n, k, n)
    } else {
        let below = binomial_sum(n, 0, k - 1);
        match BigUint::pow2(n).checked_sub(&below) {
            Some(v) => v,
            None => return 0.0, // unreachable: the lower sum never exceeds 2^n
        }
    };
    count.ratio_to_pow2(n)
}

/// Walks the ranks `k = 1, 2, ..., ceil(n / 2)` of the order-statistic
/// interval `[x_(k), x_(n-k+1)]` for the median, yielding `(k, coverage)` with
/// coverage `1 - 2 P(Binomial(n, 1/2) <= k - 1)` formed exactly over `2^n` and
/// rounded once (zero for the middle order statistic of odd `n`). Each step
/// costs O(n / 64): the coefficient and the lower sum are carried along.
pub(crate) struct CoverageWalk {
    n: u64,
    /// The rank the next call yields.
    k: u64,
    /// `C(n, k - 1)`.
    coef: BigUint,
    /// `sum_{j <= k - 1} C(n, j)`.
    lower: BigUint,
    total: BigUint,
}

impl CoverageWalk {
    pub(crate) fn new(n: u64) -> Self {
        Self { n, k: 1, coef: BigUint::from_u64(1), lower: BigUint::from_u64(1), total: BigUint::pow2(n) }
    }
}

impl Iterator for CoverageWalk {
    type Item = (u64, f64);

    fn next(&mut self) -> Option<(u64, f64)> {
        let k = self.k;
        if k > self.n.div_ceil(2) {
            return None;
        }
        let mut twice = self.lower.clone();
        twice.mul_small(2);
        let coverage = match self.total.checked_sub(&twice) {
            Some(v) => v.ratio_to_pow2(self.n),
            None => 0.0,
        };
        // Advance to k + 1: C(n, k) = C(n, k - 1) * (n - k + 1) / k.
        self.coef.mul_small(self.n - k + 1);
        let rem = self.coef.div_small(k);
        debug_assert_eq!(rem, 0);
        self.lower.add_assign(&self.coef);
        self.k += 1;
        Some((k, coverage))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pascal's triangle in u128 (exact for n <= 127), independent of the
    /// multiplicative recurrence used above.
    fn pascal_row(n: usize) -> Vec<u128> {
        let mut row = vec![1u128];
        for _ in 0..n {
            let mut next = vec![1u128; row.len() + 1];
            for k in 1..row.len() {
                next[k] = row[k - 1] + row[k];
            }
            row = next;
        }
        row
    }

    fn to_u128(b: &BigUint) -> u128 {
        assert!(b.limbs.len() <= 2, "value does not fit u128");
        let lo = u128::from(b.limbs.first().copied().unwrap_or(0));
        let hi = u128::from(b.limbs.get(1).copied().unwrap_or(0));
        (hi << 64) | lo
    }

    #[test]
    fn binomial_sums_match_pascal_up_to_127() {
        for n in 0..=127usize {
            let row = pascal_row(n);
            for lo in 0..=n {
                // Every hi for a few lo values, and full tails for all lo.
                let his: Vec<usize> = if lo % 17 == 0 { (lo..=n).collect() } else { vec![lo, n] };
                for hi in his {
                    let want: u128 = row[lo..=hi].iter().sum();
                    let got = binomial_sum(n as u64, lo as u64, hi as u64);
                    assert_eq!(to_u128(&got), want, "n={n} lo={lo} hi={hi}");
                }
            }
        }
    }

    #[test]
    fn upper_tail_is_bit_exact_against_u128_up_to_127() {
        for n in 0..=127usize {
            let row = pascal_row(n);
            for k in 0..=n + 1 {
                let count: u128 = row.iter().skip(k).sum();
                // u128 -> f64 rounds to nearest-even (Rust reference), and the
                // division by 2^n is an exact power-of-two scaling here.
                let want = count as f64 / 2f64.powi(n as i32);
                assert_eq!(upper_tail_half(n as u64, k as u64), want, "n={n} k={k}");
            }
        }
    }

    #[test]
    fn rounding_uses_sticky_bits() {
        // 2^64 + 2^11 + 1 over 2^64: the tie at bit 11 is broken upward by the
        // low bit, so the result is 1 + 2^-52, not 1.
        let mut v = BigUint::pow2(64);
        v.add_assign(&BigUint::from_u64((1 << 11) + 1));
        assert_eq!(v.ratio_to_pow2(64), 1.0 + f64::EPSILON);
        // Exactly on the tie: ties to even gives 1.
        let mut t = BigUint::pow2(64);
        t.add_assign(&BigUint::from_u64(1 << 11));
        assert_eq!(t.ratio_to_pow2(64), 1.0);
    }

    #[test]
    fn large_n_stays_finite_and_symmetric() {
        // P(X >= 501) + P(X >= 500) = 1 for n = 1000 (symmetry), and
        // P(X >= 0) = 1, P(X >= n) = 2^-n.
        let n = 1000;
        let a = upper_tail_half(n, 501);
        let b = upper_tail_half(n, 500);
        assert!((a + b - 1.0).abs() < 1e-15, "{a} + {b}");
        assert_eq!(upper_tail_half(n, 0), 1.0);
        assert_eq!(upper_tail_half(n, n), 2f64.powi(-1000));
        assert_eq!(upper_tail_half(2000, 2000), 0.0); // 2^-2000 underflows
        assert!(upper_tail_half(2000, 1000) > 0.5);
    }

    #[test]
    fn coverage_walk_matches_pascal_up_to_127() {
        for n in 1..=127usize {
            let row = pascal_row(n);
            let walked: Vec<(u64, f64)> = CoverageWalk::new(n as u64).collect();
            assert_eq!(walked.len(), n.div_ceil(2), "n={n}");
            for (k, coverage) in walked {
                let lower: u128 = row[..k as usize].iter().sum();
                // 2^n - 2 * lower, without overflowing u128 at n = 127.
                let half = 1u128 << (n - 1);
                let want = if lower >= half { 0.0 } else { (half - lower) as f64 / 2f64.powi(n as i32 - 1) };
                assert_eq!(coverage, want, "n={n} k={k}");
            }
        }
    }

    #[test]
    fn coverage_for_ten_blocks() {
        let walked: Vec<(u64, f64)> = CoverageWalk::new(10).collect();
        assert_eq!(walked[0], (1, 1022.0 / 1024.0));
        assert_eq!(walked[1], (2, 1002.0 / 1024.0));
        assert_eq!(walked.len(), 5);
        assert_eq!(CoverageWalk::new(1).collect::<Vec<_>>(), [(1, 0.0)]);
    }
}
