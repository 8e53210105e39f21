//! Geometric sampling of allocations, as Memprof does it: every word (or byte) is a
//! sample point with probability λ, so the gap between points is geometric.

/// Small, fast PRNG (xoshiro256**) so sampling needs no dependency and no locking.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// Seeds the generator (SplitMix64 expansion, so any seed is fine).
    pub fn new(seed: u64) -> Rng {
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9e3779b97f4a7c15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
            x ^ (x >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let r = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        r
    }

    /// Uniform in (0, 1], never 0 so its logarithm is finite.
    pub fn next_f64_open0(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Draws gaps between sample points for a per-unit probability `lambda`.
#[derive(Clone, Debug)]
pub struct GeometricSampler {
    rng: Rng,
    /// `1 / ln(1 - λ)`, precomputed; `None` when every unit is sampled (λ ≥ 1).
    inv_log: Option<f64>,
}

impl GeometricSampler {
    /// A sampler with probability `lambda` per unit (clamped to (0, 1]).
    pub fn new(lambda: f64, seed: u64) -> GeometricSampler {
        let inv_log = if lambda >= 1.0 || lambda.is_nan() {
            None
        } else {
            let l = lambda.max(1e-300);
            Some(1.0 / (-l).ln_1p())
        };
        GeometricSampler {
            rng: Rng::new(seed),
            inv_log,
        }
    }

    /// Units until the next sample point, at least 1 (mean 1/λ).
    pub fn draw(&mut self) -> u64 {
        match self.inv_log {
            None => 1,
            Some(inv) => {
                let u = self.rng.next_f64_open0();
                let gap = 1.0 + (u.ln() * inv).floor();
                if gap >= u64::MAX as f64 {
                    u64::MAX
                } else {
                    gap as u64
                }
            }
        }
    }

    /// The underlying generator.
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometric_mean_matches_rate() {
        let mut s = GeometricSampler::new(0.01, 7);
        let n = 200_000;
        let total: u64 = (0..n).map(|_| s.draw()).sum();
        let mean = total as f64 / n as f64;
        // Mean 100, sd of the mean ≈ 100/sqrt(n) ≈ 0.22: allow 5 sd.
        assert!((mean - 100.0).abs() < 1.2, "mean {mean}");
        assert!((0..1000).all(|_| s.draw() >= 1));
    }

    #[test]
    fn rate_one_samples_every_unit() {
        let mut s = GeometricSampler::new(1.0, 1);
        assert!((0..100).all(|_| s.draw() == 1));
    }
}
