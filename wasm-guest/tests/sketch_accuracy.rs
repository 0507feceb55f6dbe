//! Measures the Chopstix sketch against exact counts and checks its documented bounds:
//! the count-min error bound, logarithmic sampling, the adaptive threshold and epochs.

use std::collections::HashMap;

use faultline_engine::sketch::{key2, EpochSketch, SamplerConfig, Sketch};

/// xorshift64*: a deterministic stream without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Zipf(s) over `n` ranks by inverse CDF: a skewed popularity like real thread pools.
struct Zipf {
    cdf: Vec<f64>,
}

impl Zipf {
    fn new(n: usize, s: f64) -> Self {
        let mut acc = 0.0;
        let mut cdf: Vec<f64> = (1..=n)
            .map(|k| {
                acc += 1.0 / (k as f64).powf(s);
                acc
            })
            .collect();
        for c in &mut cdf {
            *c /= acc;
        }
        Self { cdf }
    }

    fn sample(&self, rng: &mut Rng) -> usize {
        let u = rng.unit();
        self.cdf.partition_point(|&c| c < u).min(self.cdf.len() - 1)
    }
}

const THREADS: usize = 10_000;
const SYSCALLS: usize = 50;
const EVENTS: usize = 400_000;

/// A (tid, syscall) stream with Zipf-popular threads and syscalls, weighted by a
/// heavy-tailed duration in ns, and its exact per-key totals.
fn skewed_stream() -> (Vec<(u64, u64)>, HashMap<u64, u64>) {
    let mut rng = Rng(0x1234_5678_9ABC_DEF1);
    let threads = Zipf::new(THREADS, 1.1);
    let syscalls = Zipf::new(SYSCALLS, 1.3);
    let mut events = Vec::with_capacity(EVENTS);
    let mut exact = HashMap::new();
    for _ in 0..EVENTS {
        let tid = 1000 + threads.sample(&mut rng) as u64;
        let sc = syscalls.sample(&mut rng) as u64;
        // Mostly microseconds, sometimes a millisecond-scale block.
        let weight = if rng.next().is_multiple_of(100) {
            1_000_000 + rng.next() % 9_000_000
        } else {
            200 + rng.next() % 20_000
        };
        let key = key2(tid, sc);
        events.push((key, weight));
        *exact.entry(key).or_insert(0u64) += weight;
    }
    (events, exact)
}

#[test]
fn count_min_error_stays_within_the_stated_bound() {
    let (events, exact) = skewed_stream();
    println!(
        "{} events, {} distinct (tid, syscall) keys",
        events.len(),
        exact.len()
    );
    println!(
        "{:>7} {:>5} {:>14} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "width", "depth", "N", "bound e*N/w", "max err", "mean err", "P(>bound)", "e^-d"
    );
    for (width, depth) in [(4096, 1), (4096, 2), (4096, 4), (16384, 4), (65536, 4)] {
        let mut sketch = Sketch::new(width, depth).unwrap();
        for &(key, weight) in &events {
            sketch.add(key, weight);
        }
        let bound = sketch.error_bound();
        let n = sketch.total();
        assert_eq!(n, exact.values().sum::<u64>());
        let (mut max_err, mut sum_err, mut over) = (0u64, 0u64, 0usize);
        for (&key, &truth) in &exact {
            let est = sketch.estimate(key);
            assert!(est >= truth, "count-min never underestimates");
            let err = est - truth;
            max_err = max_err.max(err);
            sum_err += err;
            if err > bound {
                over += 1;
            }
        }
        let keys = exact.len() as f64;
        let p_over = over as f64 / keys;
        let delta = (-(depth as f64)).exp();
        println!(
            "{width:>7} {depth:>5} {n:>14} {bound:>12} {max_err:>12} {:>12.0} {p_over:>10.5} {delta:>10.5}",
            sum_err as f64 / keys
        );
        // The bound is a per-key probability; allow three standard errors of sampling noise.
        let slack = 3.0 * (delta * (1.0 - delta) / keys).sqrt();
        assert!(
            p_over <= delta + slack,
            "w={width} d={depth}: {p_over} of keys exceed e*N/w, bound {delta}"
        );
    }
}

#[test]
fn samples_per_key_grow_as_log_t_of_the_count() {
    for t in [2u64, 4, 16] {
        // Watermarks far above what this stream selects, so t stays fixed.
        let config = SamplerConfig {
            initial_t: t,
            high_watermark: 1 << 40,
            low_watermark: 0,
        };
        let mut sketch = EpochSketch::new(1 << 16, 4, config).unwrap();
        let counts = [1u64, 2, 3, 15, 16, 17, 100, 1000, 4096, 5000];
        let mut samples = vec![0u64; counts.len()];
        let max = *counts.iter().max().unwrap();
        for step in 1..=max {
            for (i, &count) in counts.iter().enumerate() {
                if step <= count && sketch.add(key2(i as u64, 7), 1).is_some() {
                    samples[i] += 1;
                }
            }
        }
        for (i, &count) in counts.iter().enumerate() {
            // Selected at counts 1, t, t², …: ⌊log_t(count)⌋ + 1 samples.
            let expected = count.ilog(t) as u64 + 1;
            assert_eq!(samples[i], expected, "t={t} count={count}");
        }
        assert_eq!(sketch.threshold(), t);
    }
}

#[test]
fn weighted_events_count_once_per_power_crossed() {
    let config = SamplerConfig {
        initial_t: 2,
        high_watermark: 1 << 40,
        low_watermark: 0,
    };
    let mut sketch = EpochSketch::new(1024, 2, config).unwrap();
    // A 1 ms call after a 1 µs one: the second jumps many powers of two but is one sample
    // whose estimate is the weighted total.
    assert_eq!(sketch.add(42, 1_000), Some(1_000));
    assert_eq!(sketch.add(42, 1_000_000), Some(1_001_000));
    assert_eq!(sketch.add(42, 1), None);
}

#[test]
fn adaptive_threshold_bounds_samples_per_epoch() {
    let high = 200;
    let config = SamplerConfig {
        initial_t: 2,
        high_watermark: high,
        low_watermark: 20,
    };
    let mut adaptive = EpochSketch::new(1 << 14, 4, config).unwrap();
    let fixed_config = SamplerConfig {
        high_watermark: 1 << 40,
        ..config
    };
    let mut fixed = EpochSketch::new(1 << 14, 4, fixed_config).unwrap();
    let (events, _) = skewed_stream();
    let mut selected = 0u64;
    let mut fixed_selected = 0u64;
    // Count-based (weight 1) so selections depend on repetition, not durations.
    for &(key, _) in events.iter().take(100_000) {
        if adaptive.add(key, 1).is_some() {
            selected += 1;
        }
        if fixed.add(key, 1).is_some() {
            fixed_selected += 1;
        }
    }
    println!(
        "epoch of 100,000 events: fixed t=2 took {fixed_selected} samples; adaptive took \
         {selected} (t now {}, {} suppressed), high watermark {high}",
        adaptive.threshold(),
        adaptive.suppressed_this_epoch()
    );
    assert!(
        fixed_selected > 2 * high,
        "the stream must stress the sampler"
    );
    assert_eq!(adaptive.samples_this_epoch(), selected);
    assert!(
        selected <= 2 * high,
        "hard budget is twice the high watermark"
    );
    assert!(adaptive.threshold() > 2, "t doubled under load");
    // Every selection either became a sample or was counted as suppressed.
    assert!(adaptive.suppressed_this_epoch() > 0);

    // Quiet epochs halve t back to 2, one step per epoch.
    let loaded_t = adaptive.threshold();
    let suppressed = adaptive.suppressed_this_epoch();
    adaptive.rotate();
    assert_eq!(
        adaptive.suppressed_total(),
        suppressed,
        "kept across epochs"
    );
    assert_eq!(adaptive.samples_this_epoch(), 0);
    assert_eq!(adaptive.suppressed_this_epoch(), 0);
    // The loaded epoch ended above the low watermark, so t was kept.
    assert_eq!(adaptive.threshold(), loaded_t);
    let mut epochs = 0;
    while adaptive.threshold() > 2 {
        adaptive.add(key2(1, epochs), 1);
        adaptive.rotate();
        epochs += 1;
        assert!(epochs < 64);
    }
    assert_eq!(epochs, u64::from(loaded_t.ilog2()) - 1);
}

#[test]
fn rotate_keeps_the_previous_epoch_readable() {
    let mut sketch = EpochSketch::new(4096, 4, SamplerConfig::default()).unwrap();
    let a = key2(100, 1);
    let b = key2(100, 2);
    sketch.add(a, 500);
    sketch.add(a, 250);
    sketch.add(b, 40);
    assert_eq!(sketch.estimate_current(a), 750);
    assert_eq!(sketch.estimate_previous(a), 0);

    sketch.rotate();
    assert_eq!(sketch.estimate_previous(a), 750);
    assert_eq!(sketch.estimate_previous(b), 40);
    assert_eq!(sketch.previous().total(), 790);
    assert_eq!(sketch.estimate_current(a), 0);
    assert_eq!(sketch.current().total(), 0);

    sketch.add(b, 7);
    sketch.rotate();
    assert_eq!(sketch.estimate_previous(a), 0);
    assert_eq!(sketch.estimate_previous(b), 7);
    // A key's first event in a fresh epoch is a sample again.
    assert_eq!(sketch.add(a, 3), Some(3));
}
