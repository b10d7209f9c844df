//! NumPy's statistics as `vllm bench serve` calls them: `np.mean`, `np.std`
//! (population, ddof = 0), `np.median` and `np.percentile` (the default `linear`
//! method: position p / 100 * (n - 1) between the neighbouring order statistics).
//! vLLM passes `values or 0`, so an empty list gives 0.0 for every statistic.
//! Owns these formulas for the exports. Must not be used for the harness's own
//! measures (those are nearest-rank, `stats::percentile`).

pub fn mean(x: &[f64]) -> f64 {
    if x.is_empty() { 0.0 } else { x.iter().sum::<f64>() / x.len() as f64 }
}

pub fn std(x: &[f64]) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    let m = mean(x);
    (x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / x.len() as f64).sqrt()
}

/// `np.percentile(x, p)` with linear interpolation.
pub fn percentile(x: &[f64], p: f64) -> f64 {
    if x.is_empty() {
        return 0.0;
    }
    let mut s = x.to_vec();
    s.sort_by(f64::total_cmp);
    let pos = p / 100.0 * (s.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

pub fn median(x: &[f64]) -> f64 {
    percentile(x, 50.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numpy_values() {
        // np.percentile([1, 2, 3, 4], 99) = 3.97; np.median = 2.5; np.std = 1.118033988749895
        let x = [4.0, 1.0, 3.0, 2.0];
        assert!((percentile(&x, 99.0) - 3.97).abs() < 1e-12);
        assert_eq!(median(&x), 2.5);
        assert!((std(&x) - 1.118_033_988_749_895).abs() < 1e-12);
        assert_eq!(mean(&x), 2.5);
        assert_eq!((mean(&[]), std(&[]), median(&[]), percentile(&[], 99.0)), (0.0, 0.0, 0.0, 0.0));
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
    }
}
