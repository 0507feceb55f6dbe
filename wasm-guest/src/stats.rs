//! Small streaming statistics used by the baselines: bounded, allocation-free, `Copy`.
//!
//! Values are kept in `f32` because every baseline sample is a log2-domain quantity
//! (a few tens at most), and the per-(thread, syscall) state must stay small enough
//! for 10,000 threads to fit the memory budget.

/// Streaming mean and variance (Welford), mergeable so epochs can be folded together.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Welford {
    /// Number of samples (after any down-weighting by [`Welford::cap`]).
    pub n: f32,
    pub mean: f32,
    /// Sum of squared deviations from the mean.
    pub m2: f32,
}

impl Welford {
    /// Adds one sample.
    pub fn push(&mut self, x: f32) {
        if !x.is_finite() {
            return;
        }
        self.n += 1.0;
        let d = x - self.mean;
        self.mean += d / self.n;
        self.m2 += d * (x - self.mean);
    }

    /// [`Welford::push`] of a value the caller knows is finite (skips the check).
    #[inline(always)]
    pub fn push_finite(&mut self, x: f32) {
        self.n += 1.0;
        let d = x - self.mean;
        self.mean += d / self.n;
        self.m2 += d * (x - self.mean);
    }

    /// Folds another set of samples in (Chan et al.'s parallel formula).
    pub fn merge(&mut self, other: &Welford) {
        if other.n <= 0.0 {
            return;
        }
        if self.n <= 0.0 {
            *self = *other;
            return;
        }
        let n = self.n + other.n;
        let d = other.mean - self.mean;
        self.mean += d * other.n / n;
        self.m2 += other.m2 + d * d * self.n * other.n / n;
        self.n = n;
    }

    /// Down-weights old samples so that at most `max_n` samples' worth of history is
    /// kept: the baseline keeps adapting to slow drifts of a healthy workload.
    pub fn cap(&mut self, max_n: f32) {
        if self.n > max_n && self.n > 0.0 {
            let f = max_n / self.n;
            self.n = max_n;
            self.m2 *= f;
        }
    }

    /// Sample standard deviation (0 with fewer than two samples).
    pub fn std_dev(&self) -> f32 {
        if self.n < 2.0 {
            return 0.0;
        }
        let var = self.m2 / (self.n - 1.0);
        // Same as `var.max(0.0).sqrt()` (NaN and negatives give 0) without `f32::max`,
        // which is a libm call on wasm32 and this runs twice per moving average.
        if var > 0.0 {
            var.sqrt()
        } else {
            0.0
        }
    }
}

/// log2(1 + ns): the domain in which durations and inter-arrival times are compared.
///
/// Syscall times are heavy-tailed (a `futex` ranges from 1 µs to seconds); in the log
/// domain a k-moving average is a geometric mean, so one extreme sample cannot dominate
/// and "mean + Θσ" becomes a multiplicative band that suits every syscall type.
pub fn log_ns(ns: u64) -> f32 {
    ((ns as f64) + 1.0).log2() as f32
}

/// Mean and population standard deviation of a slice (0, 0 when empty).
pub fn mean_std(xs: &[f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.max(0.0).sqrt())
}

/// Nearest-rank quantile of an ascending-sorted slice (0 when empty).
pub fn quantile_sorted(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let idx = ((q.clamp(0.0, 1.0) * (xs.len() - 1) as f64).round()) as usize;
    xs.get(idx.min(xs.len() - 1)).copied().unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn welford_matches_two_pass_and_merges() {
        let xs = [1.0f32, 2.0, 4.0, 8.0, 3.0, 5.0];
        let mut a = Welford::default();
        xs.iter().for_each(|&x| a.push(x));
        let mean: f32 = xs.iter().sum::<f32>() / 6.0;
        let var: f32 = xs.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / 5.0;
        assert!((a.mean - mean).abs() < 1e-5);
        assert!((a.std_dev() - var.sqrt()).abs() < 1e-4);
        let (mut l, mut r) = (Welford::default(), Welford::default());
        xs[..2].iter().for_each(|&x| l.push(x));
        xs[2..].iter().for_each(|&x| r.push(x));
        l.merge(&r);
        assert!((l.mean - a.mean).abs() < 1e-5 && (l.m2 - a.m2).abs() < 1e-3);
    }

    #[test]
    fn cap_keeps_mean_and_variance() {
        let mut a = Welford::default();
        (0..1000).for_each(|i| a.push((i % 7) as f32));
        let (m, s) = (a.mean, a.std_dev());
        a.cap(100.0);
        assert_eq!(a.n, 100.0);
        assert!((a.mean - m).abs() < 1e-6 && (a.std_dev() - s).abs() < 0.05);
    }

    #[test]
    fn quantiles() {
        let xs = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile_sorted(&xs, 0.5), 3.0);
        assert_eq!(quantile_sorted(&xs, 1.0), 5.0);
        assert_eq!(quantile_sorted(&[], 0.5), 0.0);
    }
}
