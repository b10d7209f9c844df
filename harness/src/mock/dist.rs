//! Drawing the spec's numbers: each request gets its own generator (xoshiro256++
//! seeded from the spec's seed and the request's number), so that a rerun draws the
//! same times for the same request whatever the interleaving. Owns the samplers and
//! the linear terms of a time. Must not read clocks or serve.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, LogNormal, Normal};

use super::MockError;
use super::spec::{DistSpec, TimeSpec, read_empirical};

/// A validated distribution, ready to draw.
#[derive(Debug, Clone)]
pub enum Sampler {
    Fixed(f64),
    Normal(Normal<f64>),
    LogNormal(LogNormal<f64>),
    Empirical(Vec<f64>),
}

impl Sampler {
    pub fn new(spec: &DistSpec, field: &str) -> Result<Sampler, MockError> {
        spec.validate(field)?;
        let bad = |e: String| MockError::Spec { field: field.to_string(), problem: e };
        Ok(match spec {
            DistSpec::Fixed { value } => Sampler::Fixed(*value),
            DistSpec::Normal { mean, sd } => Sampler::Normal(Normal::new(*mean, *sd).map_err(|e| bad(e.to_string()))?),
            DistSpec::Lognormal { median, sigma } => {
                Sampler::LogNormal(LogNormal::new(median.ln(), *sigma).map_err(|e| bad(e.to_string()))?)
            }
            DistSpec::Empirical { file } => Sampler::Empirical(read_empirical(&format!("{field}.file"), file)?),
        })
    }

    /// One draw, never below zero.
    pub fn draw(&self, rng: &mut RequestRng) -> f64 {
        let v = match self {
            Sampler::Fixed(v) => *v,
            Sampler::Normal(d) => d.sample(&mut rng.0),
            Sampler::LogNormal(d) => d.sample(&mut rng.0),
            Sampler::Empirical(values) => values[(rng.0.next_u64() % values.len() as u64) as usize],
        };
        v.max(0.0)
    }
}

/// A time's sampler and its linear terms.
#[derive(Debug, Clone)]
pub struct TimeSampler {
    pub base: Sampler,
    pub per_prompt_token_ms: f64,
    pub per_in_flight_ms: f64,
}

impl TimeSampler {
    pub fn new(spec: &TimeSpec, field: &str) -> Result<TimeSampler, MockError> {
        Ok(TimeSampler {
            base: Sampler::new(&spec.dist, field)?,
            per_prompt_token_ms: spec.per_prompt_token_ms,
            per_in_flight_ms: spec.per_in_flight_ms,
        })
    }

    /// Nanoseconds: a draw plus the prompt and in-flight terms.
    pub fn draw_ns(&self, rng: &mut RequestRng, prompt_tokens: u64, in_flight: u64) -> u64 {
        let ms = self.base.draw(rng)
            + self.per_prompt_token_ms * prompt_tokens as f64
            + self.per_in_flight_ms * in_flight as f64;
        (ms * 1e6).round().max(0.0) as u64
    }
}

/// One request's generator.
pub struct RequestRng(Xoshiro256PlusPlus);

impl RequestRng {
    /// The generator of request number `n` (from 0, in order of arrival).
    pub fn new(seed: u64, n: u64) -> RequestRng {
        // splitmix64 of the pair, so neighbouring requests get unrelated streams.
        let mut z = seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        RequestRng(Xoshiro256PlusPlus::seed_from_u64(z ^ (z >> 31)))
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_seeded_per_request_and_never_negative() {
        let normal = Sampler::new(&DistSpec::Normal { mean: 1.0, sd: 5.0 }, "itl").unwrap();
        let a: Vec<f64> = (0..50).map(|_| normal.draw(&mut RequestRng::new(3, 9))).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]), "same request, same draw");
        let mut rng = RequestRng::new(3, 9);
        let many: Vec<f64> = (0..2000).map(|_| normal.draw(&mut rng)).collect();
        assert!(many.iter().all(|v| *v >= 0.0) && many.contains(&0.0));
        let lognormal = Sampler::new(&DistSpec::Lognormal { median: 20.0, sigma: 0.5 }, "ttft").unwrap();
        let mut draws: Vec<f64> = (0..4001).map(|_| lognormal.draw(&mut rng)).collect();
        draws.sort_by(f64::total_cmp);
        let median = draws[2000];
        assert!((median / 20.0 - 1.0).abs() < 0.1, "median {median}");
        let t = TimeSampler { base: Sampler::Fixed(2.0), per_prompt_token_ms: 0.5, per_in_flight_ms: 1.0 };
        assert_eq!(t.draw_ns(&mut rng, 4, 3), 7_000_000);
        assert_ne!(RequestRng::new(0, 1).unit(), RequestRng::new(0, 2).unit());
    }
}
