//! How much memory the engine's state may take under given analysis limits, so that a
//! setup whose WASM guest could outgrow `[engine] memory_limit_bytes` is told at startup
//! rather than by a trap that restarts the guest and loses every target's baselines.
//!
//! The bound is the engine's own (`wasm-guest/src/target.rs`, "Memory bound per target",
//! and what `Thread::bytes` and `Target::bytes` count), with the record sizes as this host
//! compiles them: the guest's (wasm32, 4-byte pointers) are no larger, so it stays an
//! upper bound. Measured state is below it (5.3 KiB a thread at 10,000 threads,
//! `wasm-guest/EVALUATION.md`): most threads use fewer syscalls than the channel cap.

use std::mem::size_of;

use faultline_engine::cpu_time::CpuBins;
use faultline_engine::thread::{
    Chan, ChanCold, Episode, LostBins, Thread, EPISODES_PER_THREAD, INLINE_RING,
};
use faultline_engine::thread_store::CHUNK;
use faultline_engine::Params;

use super::config::MIN_MEMORY_LIMIT_BYTES;

/// What the guest holds besides its targets (code, data, stack, the argument and result
/// buffers, the engine's own records): the smallest memory limit allowed, which is sized
/// to fit them and a small engine.
pub const GUEST_BASE_BYTES: u64 = MIN_MEMORY_LIMIT_BYTES;

/// Entries of the tid index per thread at most: it doubles at half load, so right after
/// a doubling it has four entries per thread (`wasm-guest/src/tid_index.rs`).
const TID_INDEX_ENTRIES_PER_THREAD: u64 = 4;

/// Upper bound of one thread's state under `p`: its record, `max_syscalls_per_thread`
/// channels (hot and cold parts, key, and the slab rings of a `moving_average_k` above
/// the record's inline ring), the episode ring, the lost-time bins, the CPU account
/// (with scheduler records), and its tid index entries.
pub fn thread_bound_bytes(p: &Params) -> u64 {
    let k = p.moving_average_k;
    let slab_ring = if k > INLINE_RING {
        2 * k * size_of::<f32>()
    } else {
        0
    };
    let chan = size_of::<Chan>() + size_of::<ChanCold>() + size_of::<u16>() + slab_ring;
    let bytes = size_of::<Thread>()
        + p.max_syscalls_per_thread.saturating_mul(chan)
        + EPISODES_PER_THREAD * size_of::<Episode>()
        + size_of::<LostBins>()
        + size_of::<CpuBins>()
        + TID_INDEX_ENTRIES_PER_THREAD as usize * size_of::<(u32, u32)>();
    bytes as u64
}

/// Bytes of one target's overflow sketch: both epochs, 8 bytes a cell, allocated whole at
/// the target's first untracked call.
pub fn sketch_bytes(p: &Params) -> u64 {
    2 * (p.sketch_width as u64)
        .saturating_mul(p.sketch_depth as u64)
        .saturating_mul(8)
}

/// Threads whose records a target may hold: `max_threads` in whole chunks of records.
fn thread_slots(p: &Params) -> u64 {
    (p.max_threads as u64).div_ceil(CHUNK as u64) * CHUNK as u64
}

/// Upper bound of one target's state under `p`: `max_threads` threads and its sketch.
pub fn target_bound_bytes(p: &Params) -> u64 {
    thread_slots(p)
        .saturating_mul(thread_bound_bytes(p))
        .saturating_add(sketch_bytes(p))
}

/// Upper bound of the guest's memory with one target under each of `targets`.
pub fn guest_bound_bytes<'a>(targets: impl IntoIterator<Item = &'a Params>) -> u64 {
    targets
        .into_iter()
        .map(target_bound_bytes)
        .fold(GUEST_BASE_BYTES, u64::saturating_add)
}

/// The largest `max_threads`, in whole chunks, that every one of `targets` could have
/// with their bound still within `limit_bytes` (their other limits as they are); 0 when
/// not even their sketches fit.
pub fn max_threads_within<'a>(
    limit_bytes: u64,
    targets: impl IntoIterator<Item = &'a Params> + Clone,
) -> u64 {
    let sketches: u64 = targets.clone().into_iter().map(sketch_bytes).sum();
    let per_thread: u64 = targets.into_iter().map(thread_bound_bytes).sum();
    let room = limit_bytes.saturating_sub(GUEST_BASE_BYTES.saturating_add(sketches));
    match room.checked_div(per_thread) {
        Some(threads) => threads / CHUNK as u64 * CHUNK as u64,
        None => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_covers_the_engines_documented_one() {
        let p = Params::default();
        // target.rs: Thread (960 B on wasm32) + 16 × (128 + 152 B) + episodes (8 × 96 B)
        // + lost-time bins (520 B); this host's records are at least as large.
        let documented = 960 + 16 * (128 + 152) + 8 * 96 + 520;
        let bound = thread_bound_bytes(&p);
        assert!(bound >= documented, "{bound} < {documented}");
        // …and not wildly above it: the CPU account and the tid index are the rest.
        assert!(bound <= documented + 4096, "{bound}");
        assert_eq!(sketch_bytes(&p), 1 << 20, "2 · 16,384 · 4 · 8 bytes");
        assert_eq!(
            target_bound_bytes(&p),
            16_384 * bound + (1 << 20),
            "16,384 threads are whole chunks"
        );
    }

    #[test]
    fn a_longer_moving_average_costs_its_slab_rings() {
        let p = Params::default();
        let k9 = Params {
            moving_average_k: 9,
            ..p.clone()
        };
        let per_chan = 2 * 9 * 4;
        assert_eq!(
            thread_bound_bytes(&k9),
            thread_bound_bytes(&p) + 16 * per_chan
        );
    }

    #[test]
    fn the_threads_that_fit_are_within_the_limit() {
        let p = Params::default();
        let limit = 256u64 << 20;
        for n in 1..=4 {
            let targets = vec![p.clone(); n];
            let fit = max_threads_within(limit, &targets);
            assert_eq!(fit % CHUNK as u64, 0);
            let at = |threads: u64| {
                let q = Params {
                    max_threads: threads as usize,
                    ..p.clone()
                };
                guest_bound_bytes(&vec![q; n])
            };
            assert!(at(fit) <= limit, "{n} targets, {fit} threads");
            assert!(at(fit + CHUNK as u64) > limit, "{n} targets, {fit} threads");
        }
        assert_eq!(max_threads_within(GUEST_BASE_BYTES, [&p]), 0);
    }
}
