//! The Mersenne Twister (MT19937) as vLLM's `burstgpt` and `prefix_repetition`
//! datasets draw from it, through two front ends: NumPy's legacy `RandomState`
//! (`np.random.seed(int)` and `RandomState(int)`: `init_genrand` of the 32-bit
//! seed, not `init_by_array`; `randint` for int64 results: masked rejection on
//! 32-bit draws; `permutation`: `random_interval`, masked rejection, from the last
//! index down) and CPython's `random.Random` (`random.seed(int)`: `init_by_array`
//! of the 32-bit words of abs(seed), least significant first; `shuffle`:
//! `_randbelow` by `getrandbits` rejection). Owns bit-exactness with NumPy 2.x
//! (`numpy/random/_mt19937.pyx`, `src/mt19937`, `src/distributions`) and CPython
//! 3.11 (`Modules/_randommodule.c`, `Lib/random.py`); the token-for-token test
//! against vLLM's own code (tests/integration/vllm_datasets.rs) and the unit
//! tests below (values printed by NumPy and CPython) hold it to that. Must not be
//! used for the harness's own seeds (those are `plan::seed`).

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER: u32 = 0x8000_0000;
const LOWER: u32 = 0x7fff_ffff;

/// One MT19937 state; which front end seeded it decides which draws make sense.
#[derive(Debug, Clone)]
pub struct Mt19937 {
    mt: [u32; N],
    index: usize,
}

impl Mt19937 {
    /// MT19937's `init_genrand`.
    fn init_genrand(seed: u32) -> Mt19937 {
        let mut mt = [0u32; N];
        mt[0] = seed;
        for i in 1..N {
            mt[i] = 1_812_433_253u32.wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30)).wrapping_add(i as u32);
        }
        Mt19937 { mt, index: N }
    }

    /// NumPy's legacy `np.random.seed(seed)` / `RandomState(seed)` for an integer
    /// seed (NumPy refuses one above 2^32 - 1).
    pub fn numpy_seed(seed: u32) -> Mt19937 {
        Mt19937::init_genrand(seed)
    }

    /// CPython's `random.seed(seed)` for a non-negative integer.
    pub fn python_seed(seed: u64) -> Mt19937 {
        let mut key = vec![seed as u32];
        if seed >> 32 != 0 {
            key.push((seed >> 32) as u32);
        }
        let mut g = Mt19937::init_genrand(19_650_218);
        let mt = &mut g.mt;
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_664_525)).wrapping_add(key[j]).wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = mt[i - 1] ^ (mt[i - 1] >> 30);
            mt[i] = (mt[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                mt[0] = mt[N - 1];
                i = 1;
            }
        }
        mt[0] = 0x8000_0000;
        g
    }

    fn twist(&mut self) {
        for k in 0..N {
            let y = (self.mt[k] & UPPER) | (self.mt[(k + 1) % N] & LOWER);
            let mag = if y & 1 == 1 { MATRIX_A } else { 0 };
            self.mt[k] = self.mt[(k + M) % N] ^ (y >> 1) ^ mag;
        }
        self.index = 0;
    }

    /// `genrand_int32`.
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.mt[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// A value in 0..=max by masked rejection on 32-bit draws (NumPy's legacy
    /// `random_interval` and `buffered_bounded_masked_uint32`, which agree for a
    /// range that fits 32 bits).
    fn masked(&mut self, max: u32) -> u32 {
        if max == 0 {
            return 0;
        }
        let mask = u32::MAX >> max.leading_zeros();
        loop {
            let v = self.next_u32() & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// NumPy's legacy `randint(low, high, size=n)` (int64, high exclusive);
    /// `None` when the range is empty or wider than 32 bits (never for token IDs
    /// and row counts).
    pub fn numpy_randint(&mut self, low: i64, high: i64, n: usize) -> Option<Vec<i64>> {
        let max = u32::try_from(high.checked_sub(1)?.checked_sub(low)?).ok()?;
        Some((0..n).map(|_| low + i64::from(self.masked(max))).collect())
    }

    /// NumPy's legacy `permutation(n)` (`shuffle` of `arange(n)`); `None` for more
    /// than 2^32 items.
    pub fn numpy_permutation(&mut self, n: usize) -> Option<Vec<usize>> {
        u32::try_from(n).ok()?;
        let mut a: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = self.masked(i as u32) as usize;
            a.swap(i, j);
        }
        Some(a)
    }

    /// CPython's `getrandbits(k)` for k in 1..=64: 32-bit words least significant
    /// first, the last one shifted down to what is left of k.
    fn python_getrandbits(&mut self, k: u32) -> u64 {
        if k <= 32 {
            return u64::from(self.next_u32() >> (32 - k));
        }
        let low = u64::from(self.next_u32());
        let high = u64::from(self.next_u32() >> (64 - k));
        low | (high << 32)
    }

    /// CPython's `_randbelow(n)` (`_randbelow_with_getrandbits`), n >= 1.
    fn python_randbelow(&mut self, n: u64) -> u64 {
        let k = 64 - n.leading_zeros();
        loop {
            let r = self.python_getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// CPython's `random.shuffle(x)`.
    pub fn python_shuffle<T>(&mut self, x: &mut [T]) {
        for i in (1..x.len()).rev() {
            let j = self.python_randbelow(i as u64 + 1) as usize;
            x.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_legacy_seeding_and_randint_match_numpy() {
        // python3 -c 'import numpy as np; np.random.seed(0); print(np.random.randint(0,1000,5).tolist())'
        assert_eq!(Mt19937::numpy_seed(0).numpy_randint(0, 1000, 5).unwrap(), [684, 559, 629, 192, 835]);
        // python3 -c 'import numpy as np; np.random.seed(42); print(np.random.randint(0,151643,5).tolist())'
        let mut g = Mt19937::numpy_seed(42);
        assert_eq!(g.numpy_randint(0, 151_643, 5).unwrap(), [121_958, 146_867, 131_932, 103_694, 119_879]);
        // python3 -c 'import numpy as np; np.random.seed(1); print(np.random.randint(0,7,8).tolist())'
        assert_eq!(Mt19937::numpy_seed(1).numpy_randint(0, 7, 8).unwrap(), [5, 3, 4, 0, 1, 3, 5, 0]);
        // python3 -c 'import numpy as np; np.random.seed(0); print(np.random.randint(0,2**32,3,dtype=np.uint64).tolist())'
        let full = Mt19937::numpy_seed(0).numpy_randint(0, 1 << 32, 3).unwrap();
        assert_eq!(full, [2_357_136_044, 2_546_248_239, 3_071_714_933]);
        // A one-value range draws nothing (NumPy's rng == 0): the stream is unchanged.
        let (mut a, mut b) = (Mt19937::numpy_seed(9), Mt19937::numpy_seed(9));
        assert_eq!(a.numpy_randint(5, 6, 3).unwrap(), [5, 5, 5]);
        assert_eq!(a.numpy_randint(0, 1000, 4), b.numpy_randint(0, 1000, 4));
        assert!(a.numpy_randint(0, 0, 1).is_none());
    }

    #[test]
    fn numpy_legacy_permutation_and_choice_match_numpy() {
        // python3 -c 'import numpy as np; print(np.random.RandomState(0).permutation(10).tolist())'
        assert_eq!(Mt19937::numpy_seed(0).numpy_permutation(10).unwrap(), [2, 8, 4, 9, 1, 6, 7, 3, 0, 5]);
        // choice(30, size=5, replace=True) is randint(0, 30, size=5):
        // python3 -c 'import numpy as np; print(np.random.RandomState(7).choice(30, size=5, replace=True).tolist())'
        assert_eq!(Mt19937::numpy_seed(7).numpy_randint(0, 30, 5).unwrap(), [15, 4, 25, 22, 3]);
    }

    #[test]
    fn python_seeding_getrandbits_and_shuffle_match_cpython() {
        // python3 -c 'import random; random.seed(0); print([random.getrandbits(32) for _ in range(3)])'
        let mut g = Mt19937::python_seed(0);
        let words: Vec<u64> = (0..3).map(|_| g.python_getrandbits(32)).collect();
        assert_eq!(words, [3_626_764_237, 1_654_615_998, 3_255_389_356]);
        // Wider than 32 bits:
        // python3 -c 'import random; random.seed(3); print(random.getrandbits(40), random.getrandbits(64))'
        let mut g = Mt19937::python_seed(3);
        assert_eq!((g.python_getrandbits(40), g.python_getrandbits(64)), (649_562_111_997, 2_405_875_930_906_139_466));
        // python3 -c 'import random; random.seed(0); x=list(range(10)); random.shuffle(x); print(x)'
        let mut x: Vec<u32> = (0..10).collect();
        Mt19937::python_seed(0).python_shuffle(&mut x);
        assert_eq!(x, [7, 8, 1, 5, 3, 4, 2, 0, 9, 6]);
        // A seed of two 32-bit words:
        // python3 -c 'import random; random.seed(2**40+5); x=list(range(10)); random.shuffle(x); print(x)'
        let mut x: Vec<u32> = (0..10).collect();
        Mt19937::python_seed((1 << 40) + 5).python_shuffle(&mut x);
        assert_eq!(x, [1, 2, 3, 6, 7, 0, 5, 4, 9, 8]);
    }
}
