//! Transparent huge pages for the native engine's heap (`[engine] huge_pages` with
//! `kind = "native"`).
//!
//! The native engine keeps its state in the C allocator's heap: thread records in 61 KB
//! chunks and per-thread channel vectors of a few KB, all below glibc's mmap threshold,
//! so they sit in the heap (arena) of the thread that runs the engine. With the kernel's
//! THP mode `madvise` (Debian's default) that heap gets 4 KiB pages only, and at 10,000
//! threads the ~53 MiB of state is read at random, one thread per event: most events then
//! also miss the TLB. glibc can ask for huge pages itself (`glibc.malloc.hugetlb=1`), but
//! only from the environment at process start, which the operator must remember.
//!
//! So every so often, on the engine's thread, the host allocates a small probe (it lands
//! in that thread's arena), finds the mapping that holds it in `/proc/self/maps`, and
//! hands the mapping's new whole 2 MiB ranges to [`HugePages`]: `MADV_HUGEPAGE`, then
//! `MADV_COLLAPSE`. Passes come after 2^15 events, then at every doubling up to 2^22,
//! then every 2^22 events (~0.4 s at 10 M events/s): the state grows fastest while a
//! target's threads first appear. A pass costs one read of `/proc/self/maps`.
//!
//! A collapse copies the range: 5.5 ms per 2 MiB on the bench machine, so about 150 ms
//! once for a 10,000-thread target, spread over the passes; a range that already is a
//! huge page costs next to nothing. Measured gain on the engine bench: +7 to +20 % on the
//! 4,000- and 10,000-thread rows (`wasm-guest/EVALUATION.md`, session 25).
//!
//! Nothing here changes the heap's contents or what the allocator does with it; the
//! allocator may later trim or reuse collapsed ranges (the kernel splits the huge page).
//! A range inside the heap that the allocator has mapped but not used is filled with
//! zeroes by the collapse: at most the allocator's top pad (128 KiB by default) per heap.

use super::huge_pages::{HugePageStats, HugePages};

/// Events before the first pass.
const FIRST_PASS: u64 = 1 << 15;
/// Passes stop doubling their spacing here.
const STEADY_SPACING: u64 = 1 << 22;
/// Heaps followed at once: glibc chains 64 MiB heaps per arena, and the engine's thread
/// uses one arena, so a few cover any state under the engine's bounds. The oldest is
/// forgotten first (its ranges stay collapsed).
const MAX_HEAPS: usize = 8;

/// Follows the heap the engine allocates from and collapses what it grows into.
#[derive(Debug)]
pub struct HeapHugePages {
    events: u64,
    next_pass: u64,
    /// Heaps seen so far, by the start address of their mapping.
    heaps: Vec<(usize, HugePages)>,
    /// What was done in heaps no longer followed (so the totals never go down).
    retired: HugePageStats,
    /// Passes that could not find the probe's heap (no `/proc`, or not Linux).
    unmapped_probes: u64,
}

impl Default for HeapHugePages {
    fn default() -> Self {
        Self {
            events: 0,
            next_pass: FIRST_PASS,
            heaps: Vec::new(),
            retired: HugePageStats::default(),
            unmapped_probes: 0,
        }
    }
}

impl HeapHugePages {
    /// Counts `events` just ingested; runs a pass when one is due. Call it on the thread
    /// that runs the engine, so the probe lands in the engine's arena.
    pub fn after_ingest(&mut self, events: usize) {
        self.events = self.events.saturating_add(events as u64);
        if self.events < self.next_pass {
            return;
        }
        self.next_pass = if self.next_pass < STEADY_SPACING {
            self.next_pass * 2
        } else {
            self.events.saturating_add(STEADY_SPACING)
        };
        self.pass();
    }

    /// What the passes did so far, summed over the heaps followed.
    pub fn stats(&self) -> HugePageStats {
        let mut total = self.retired;
        for (_, h) in &self.heaps {
            total += h.stats();
        }
        total
    }

    /// Passes whose probe lay in no readable anonymous mapping.
    #[cfg(test)]
    fn unmapped_probes(&self) -> u64 {
        self.unmapped_probes
    }

    /// Hands the probe's heap to its tracker now, whatever the event count.
    pub fn pass(&mut self) {
        // A real allocation the optimizer may not remove: its address is the point.
        let probe = std::hint::black_box(Box::new(0u64));
        let at = std::ptr::from_ref::<u64>(&*probe) as usize;
        let Some((start, end)) = mapping_of(at) else {
            if self.unmapped_probes == 0 {
                tracing::debug!("the native engine's heap was not found in /proc/self/maps; its memory keeps the kernel's default pages");
            }
            self.unmapped_probes += 1;
            return;
        };
        drop(probe);
        let tracker = self.tracker_for(start);
        tracker.after_growth(start as *mut u8, end - start);
    }

    /// The tracker of the heap whose mapping starts at `start`; a new one past the
    /// oldest when [`MAX_HEAPS`] are followed already.
    fn tracker_for(&mut self, start: usize) -> &mut HugePages {
        let i = match self.heaps.iter().position(|(s, _)| *s == start) {
            Some(i) => i,
            None => {
                if self.heaps.len() == MAX_HEAPS {
                    let (_, oldest) = self.heaps.remove(0);
                    self.retired += oldest.stats();
                }
                self.heaps.push((start, HugePages::default()));
                self.heaps.len() - 1
            }
        };
        &mut self.heaps[i].1
    }
}

/// The private, writable, anonymous mapping holding `addr`, from `/proc/self/maps`.
#[cfg(target_os = "linux")]
fn mapping_of(addr: usize) -> Option<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines().find_map(|line| {
        let m = parse_maps_line(line)?;
        (m.start <= addr && addr < m.end && m.anonymous_rw).then_some((m.start, m.end))
    })
}

#[cfg(not(target_os = "linux"))]
fn mapping_of(_addr: usize) -> Option<(usize, usize)> {
    None
}

/// One line of `/proc/<pid>/maps`, as far as the heap search needs it.
#[derive(Debug, PartialEq, Eq)]
struct MapsLine {
    start: usize,
    end: usize,
    /// `rw-p`, inode 0, and no file path (`[heap]` or nothing).
    anonymous_rw: bool,
}

/// Parses `start-end perms offset dev inode [path]`; `None` on anything else.
fn parse_maps_line(line: &str) -> Option<MapsLine> {
    let mut fields = line.split_ascii_whitespace();
    let (start, end) = fields.next()?.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    let perms = fields.next()?;
    let _offset = fields.next()?;
    let _dev = fields.next()?;
    let inode = fields.next()?;
    let path = fields.next();
    let anonymous_rw = perms.starts_with("rw")
        && perms.ends_with('p')
        && inode == "0"
        && matches!(path, None | Some("[heap]"));
    (start < end).then_some(MapsLine {
        start,
        end,
        anonymous_rw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_are_read_and_only_anonymous_private_rw_ones_qualify() {
        let heap = parse_maps_line(
            "55d0c8a2b000-55d0c8a4c000 rw-p 00000000 00:00 0                          [heap]",
        );
        assert_eq!(
            heap,
            Some(MapsLine {
                start: 0x55d0_c8a2_b000,
                end: 0x55d0_c8a4_c000,
                anonymous_rw: true
            })
        );
        let arena = parse_maps_line("7f3e5c000000-7f3e5c021000 rw-p 00000000 00:00 0").unwrap();
        assert!(arena.anonymous_rw);
        for not_heap in [
            "7f3e5c021000-7f3e60000000 ---p 00000000 00:00 0",
            "7f3e64000000-7f3e64002000 r--p 00000000 fd:01 1234 /usr/lib/libc.so.6",
            "7f3e64000000-7f3e64002000 rw-p 00002000 fd:01 1234 /usr/lib/libc.so.6",
            "7ffd1a2b3000-7ffd1a2d4000 rw-p 00000000 00:00 0 [stack]",
            "7f3e64000000-7f3e64002000 rw-s 00000000 00:05 99 /memfd:guest (deleted)",
        ] {
            let m = parse_maps_line(not_heap).unwrap();
            assert!(!m.anonymous_rw, "{not_heap}");
        }
        for garbage in [
            "",
            "zz-1 rw-p 0 0 0",
            "1000-0800 rw-p 0 00:00 0",
            "1000 rw-p",
        ] {
            assert_eq!(parse_maps_line(garbage), None, "{garbage:?}");
        }
    }

    #[test]
    fn passes_come_at_doublings_then_at_a_steady_spacing() {
        let mut h = HeapHugePages::default();
        let mut passes = Vec::new();
        let mut seen = 0u64;
        for _ in 0..3000 {
            let before = h.next_pass;
            h.after_ingest(4096);
            seen += 4096;
            if h.next_pass != before {
                passes.push(seen);
            }
        }
        // 2^15 … 2^22 by doublings (8 passes), then every 2^22 events.
        assert_eq!(passes.len(), 8 + (seen - (1 << 22)) as usize / (1 << 22));
        assert_eq!(passes[0], 1 << 15);
        assert_eq!(passes[7], 1 << 22);
        assert!(passes.windows(2).skip(7).all(|w| w[1] - w[0] == 1 << 22));
    }

    #[test]
    fn totals_keep_what_was_done_in_heaps_no_longer_followed() {
        let mut h = HeapHugePages::default();
        // Fake, unmapped heaps 1 GiB apart: each whole range is refused and counted.
        for n in 1..=(MAX_HEAPS + 2) {
            let start = n << 30;
            h.tracker_for(start).after_growth(start as *mut u8, 4 << 20);
        }
        assert_eq!(h.heaps.len(), MAX_HEAPS);
        let s = h.stats();
        assert_eq!(
            s.refused_ranges + s.collapsed_bytes / (2 << 20),
            2 * (MAX_HEAPS as u64 + 2),
            "{s:?}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_probe_is_found_in_a_heap_of_this_process() {
        let mut h = HeapHugePages::default();
        h.pass();
        assert_eq!(h.unmapped_probes(), 0, "the probe's mapping was not found");
        assert_eq!(h.heaps.len(), 1);
    }
}
