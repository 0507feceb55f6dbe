//! Packet loss from the kernel's TCP account: the segments the target's network namespace
//! sent and retransmitted ([`EventKind::TcpSegments`] records, once a second).
//!
//! A non-blocking server's calls do not slow when packets are lost: its sends return as
//! soon as the data is in the socket buffer, and the kernel retransmits behind them while
//! the client waits (measured: nginx under 10 % loss, client p99 ×110–140, no call slower and
//! no CPU taken, `none` in every mode; see EVALUATION.md, session 41). The retransmitted
//! share of the segments sent is then the only trace of the fault on the server. A healthy
//! path retransmits next to nothing, so a rise of that share is the environment's doing:
//! the service's own bugs do not make the network drop its segments.
//!
//! Memory is one fixed ring of bins per target that has the records (none otherwise).
//!
//! [`EventKind::TcpSegments`]: crate::event::EventKind::TcpSegments

use serde::{Deserialize, Serialize};

/// The segments sent and retransmitted over a span, and how many samples covered it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segments {
    pub sent: u64,
    pub retransmitted: u64,
    /// Samples that fell in the span: a span without one says nothing either way.
    pub samples: u64,
    /// Of those, samples with a retransmission: a lossy path retransmits in most seconds,
    /// a healthy one in the odd burst (measured: 16–19 in one second, a few times a minute).
    pub retransmitting: u64,
}

impl Segments {
    /// Retransmitted segments per segment sent (when nothing new was sent, 1 with a
    /// retransmission and 0 without).
    pub fn retransmitted_share(&self) -> f64 {
        if self.sent == 0 {
            return if self.retransmitted > 0 { 1.0 } else { 0.0 };
        }
        self.retransmitted as f64 / self.sent as f64
    }

    fn plus(self, o: Segments) -> Segments {
        Segments {
            sent: self.sent.saturating_add(o.sent),
            retransmitted: self.retransmitted.saturating_add(o.retransmitted),
            samples: self.samples.saturating_add(o.samples),
            retransmitting: self.retransmitting.saturating_add(o.retransmitting),
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Bin {
    /// The bin index plus one (0: empty), so a stale slot of the ring is told apart.
    tag: u64,
    seg: Segments,
    /// The time of the latest sample taken: a second record of the same reading (two
    /// processes of one namespace in one target) is taken once.
    last_ns: u64,
}

/// Per-bin sums of the segment records over the last [`SegmentBins::LEN`] bins, in the
/// target's bin size (the window over `BinSet::BINS`).
#[derive(Clone, Debug)]
pub struct SegmentBins {
    bins: Vec<Bin>,
    bin_ns: u64,
}

impl SegmentBins {
    /// Bins kept: the window's bins and slack for samples ahead of the calls (a live
    /// sampler reads now, the calls' source hands its records over seconds late; 64
    /// bins are 22 s at the default window).
    pub const LEN: u64 = crate::thread::BinSet::BINS + 64;

    pub fn new(bin_ns: u64) -> Self {
        Self {
            bins: vec![Bin::default(); Self::LEN as usize],
            bin_ns: bin_ns.max(1),
        }
    }

    /// Adds a sample ending at `ts_ns`; false when it was left out: older than the ring's
    /// latest by more than the ring (its slot holds newer data), or a second record of
    /// the same reading.
    pub fn add(&mut self, ts_ns: u64, sent: u64, retransmitted: u64) -> bool {
        let b = ts_ns / self.bin_ns;
        let tag = b.saturating_add(1);
        let Some(slot) = self.bins.get_mut((b % Self::LEN) as usize) else {
            return false;
        };
        if slot.tag > tag {
            return false;
        }
        if slot.tag != tag {
            *slot = Bin {
                tag,
                ..Bin::default()
            };
        } else if slot.last_ns == ts_ns {
            return false;
        }
        slot.last_ns = ts_ns;
        slot.seg = slot.seg.plus(Segments {
            sent,
            retransmitted,
            samples: 1,
            retransmitting: u64::from(retransmitted > 0),
        });
        true
    }

    /// The sums over bins `lo..=hi` (bins the ring no longer holds count as unsampled).
    pub fn between(&self, lo: u64, hi: u64) -> Segments {
        let lo = lo.max(hi.saturating_sub(Self::LEN - 1));
        (lo..=hi).fold(Segments::default(), |s, b| {
            match self.bins.get((b % Self::LEN) as usize) {
                Some(bin) if bin.tag == b.saturating_add(1) => s.plus(bin.seg),
                _ => s,
            }
        })
    }

    /// Bytes held (for the memory bound).
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.bins.capacity() * std::mem::size_of::<Bin>()
    }
}

/// What a path did before the onset, per sample (the sampler reads once a second): the
/// medians over the spans of `persistence_seconds` in the window, each robust to a loss
/// in a minority of the spans, where one sum would be diluted.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PathBaseline {
    /// Retransmitted share of the segments sent.
    pub share: f64,
    /// Segments retransmitted a sample.
    pub retransmitted: f64,
    /// Segments sent a sample.
    pub sent: f64,
}

impl PathBaseline {
    /// The medians over the sampled spans among `spans`; `None` without one.
    pub fn of(spans: &[Segments]) -> Option<Self> {
        let sampled: Vec<&Segments> = spans.iter().filter(|s| s.samples > 0).collect();
        let median = |f: &dyn Fn(&Segments) -> f64| {
            let mut v: Vec<f64> = sampled.iter().map(|s| f(s)).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied()
        };
        Some(Self {
            share: median(&Segments::retransmitted_share)?,
            retransmitted: median(&|s| s.retransmitted as f64 / s.samples as f64)?,
            sent: median(&|s| s.sent as f64 / s.samples as f64)?,
        })
    }
}

/// Whether the retransmissions rose: packet loss on the target's path. Constants, not
/// parameters: measured in EVALUATION.md, session 41.
pub struct LossTest;

impl LossTest {
    /// Minimum share of the segments sent after the onset that were retransmitted: a
    /// path that loses a segment in ten thousand hurts nobody. Low, because `OutSegs`
    /// counts every segment sent, bare acknowledgements too (measured: nginx under 10 %
    /// loss retransmitted 0.14 % of them, 0.008 % before).
    pub const SHARE: f64 = 0.0005;
    /// Minimum ratio of that share, and of the retransmissions a sample, to those before:
    /// a share alone rises when the load falls under a steady trickle.
    pub const RISE: f64 = 4.0;
    /// Minimum retransmissions a sample after the onset: a few are no evidence either
    /// way (a client that vanished leaves a retransmission or two).
    pub const MIN_PER_SAMPLE: f64 = 2.0;
    /// Minimum share of the samples after the onset that saw a retransmission: a loss
    /// lasts, a healthy path's burst does not (measured: 16–19 in one second, a few
    /// times a minute, in the controls).
    pub const PERSISTENCE: f64 = 0.7;
    /// Fewest samples after the onset: one second is no span.
    pub const MIN_SAMPLES: u64 = 2;
    /// Least share of the segments a sample sent before that the path must still send
    /// for the loss to overrule the calls: a service that stops accepting makes the
    /// kernel retransmit its handshakes while it sends less, which is its own doing.
    pub const STEADY: f64 = 0.5;

    /// Whether the path's `before` and the segments `after` say it began losing packets.
    pub fn lossy(before: PathBaseline, after: Segments) -> bool {
        let n = after.samples as f64;
        after.samples >= Self::MIN_SAMPLES
            && after.retransmitted as f64 >= Self::MIN_PER_SAMPLE * n
            && after.retransmitting as f64 >= Self::PERSISTENCE * n
            && after.retransmitted_share() >= Self::SHARE
            && after.retransmitted_share() >= Self::RISE * before.share
            && after.retransmitted as f64 >= Self::RISE * before.retransmitted * n
    }

    /// Whether the path went on sending (see [`LossTest::STEADY`]).
    pub fn steady(before: PathBaseline, after: Segments) -> bool {
        after.sent as f64 >= Self::STEADY * before.sent * after.samples as f64
    }
}

/// What the TCP account said of the anomaly's span, in a report. Rates are per sample:
/// the sampler reads once a second.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct TcpRetransmits {
    /// Retransmitted share of the segments sent before the onset: the median over the
    /// spans of `persistence_seconds` in the window, or what an earlier cadence report
    /// measured when the loss outlasted it (as the two rates below).
    pub share_before: f64,
    /// The share in the span after the onset: its `persistence_seconds` (or those before
    /// the alarm); when the loss alone found the anomaly, on demand the
    /// `persistence_seconds` before the alarm, in continuous mode the onset to the latest
    /// data.
    pub share_after: f64,
    /// Segments retransmitted a second before (median) and in the span after.
    pub per_second_before: f64,
    pub per_second_after: f64,
    /// Segments sent a second before (median) and in the span after.
    pub sent_per_second_before: f64,
    pub sent_per_second_after: f64,
    /// Whether the retransmissions passed [`LossTest::lossy`] (packet loss; the verdict's
    /// `decided_by` says whether it decided).
    pub lossy: bool,
    /// Whether the path went on sending ([`LossTest::steady`]): only then does the loss
    /// overrule an internal verdict, or make an anomaly by itself.
    pub steady: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn sums_per_bin_and_forgets_what_the_ring_overwrote() {
        let mut b = SegmentBins::new(S);
        b.add(5 * S, 100, 1);
        b.add(5 * S + 10, 50, 2);
        b.add(7 * S, 10, 0);
        assert_eq!(
            b.between(5, 7),
            Segments {
                sent: 160,
                retransmitted: 3,
                samples: 3,
                retransmitting: 2,
            }
        );
        // The same reading twice (same time) is taken once.
        assert!(!b.add(7 * S, 10, 0), "the same reading");
        assert_eq!(b.between(7, 7).samples, 1);
        assert_eq!(b.between(6, 6), Segments::default());
        // A sample a whole ring later takes bin 5's slot: bin 5 reads unsampled.
        assert!(b.add((5 + SegmentBins::LEN) * S, 1, 1));
        assert_eq!(b.between(5, 5), Segments::default());
        // An old sample does not overwrite the newer one in its slot.
        assert!(!b.add(5 * S, 1000, 1000), "older than the ring");
        assert_eq!(
            b.between(5 + SegmentBins::LEN, 5 + SegmentBins::LEN).sent,
            1
        );
    }

    #[test]
    fn a_rise_needs_the_floor_the_count_and_the_ratio() {
        let after = |sent, retransmitted| Segments {
            sent,
            retransmitted,
            samples: 3,
            retransmitting: 3,
        };
        let quiet = PathBaseline {
            share: 0.0,
            retransmitted: 0.0,
            sent: 300.0,
        };
        let lossy = |before, after| LossTest::lossy(before, after);
        // A burst in one second of three (a healthy path's) is no loss.
        let burst = Segments {
            retransmitting: 1,
            ..after(1000, 50)
        };
        assert!(!lossy(quiet, burst), "a burst");
        assert!(lossy(quiet, after(1000, 50)));
        assert!(!lossy(quiet, after(1000, 5)), "too few");
        assert!(!lossy(quiet, after(200_000, 50)), "under the share floor");
        let share = |share| PathBaseline { share, ..quiet };
        assert!(!lossy(share(0.02), after(1000, 50)), "no fourfold rise");
        assert!(lossy(share(0.01), after(1000, 50)));
        // A steady trickle over a falling load: the share rose, the retransmissions not.
        let trickle = PathBaseline {
            share: 0.002,
            retransmitted: 5.0,
            sent: 2_500.0,
        };
        assert!(!lossy(trickle, after(1_500, 30)), "the load fell");
        assert!(lossy(trickle, after(1_500, 60)));
        // One sample is no span.
        let one = Segments {
            samples: 1,
            retransmitting: 1,
            ..after(1000, 50)
        };
        assert!(!lossy(quiet, one));
        // The path went on sending at least half as much.
        assert!(LossTest::steady(quiet, after(450, 50)));
        assert!(!LossTest::steady(quiet, after(449, 50)));
    }
}
