//! Transparent huge pages for the guest's linear memory (`[engine] huge_pages`), and the
//! range bookkeeping [`super::heap_huge_pages`] shares for the native engine's heap.
//!
//! At thousands of threads the engine's state (~53 MiB at 10,000) is read at random, one
//! thread per event, so with 4 KiB pages most events also miss the TLB. The kernel backs
//! a range with a huge page on first touch only when the whole aligned 2 MiB range is
//! already mapped; wasmtime grows the guest's memory 64 KiB at a time, so that never
//! holds, and `MADV_HUGEPAGE` alone changed nothing (measured, session 19). So after a
//! call that grew the memory, the host marks the new part `MADV_HUGEPAGE` (khugepaged
//! may then merge what is left later) and collapses each whole 2 MiB range of it at once
//! with `MADV_COLLAPSE` (Linux 6.1 and later). Neither changes the memory's contents.
//!
//! Measured on the engine bench (`wasm-guest/EVALUATION.md`, session 24): +5 to +8 % on
//! the 4,000- and 10,000-thread uniform rows, within noise elsewhere. Each range is
//! collapsed once, so the cost, a copy of at most the memory's size, is paid once per
//! instance.

/// Huge pages are 2 MiB on x86_64 and on aarch64 with 4 KiB base pages.
const HUGE: usize = 2 << 20;

/// The kernel's `MADV_COLLAPSE` (the same number on every architecture). The `libc` crate
/// defines it for glibc targets only; the kernel, not the C library, interprets it.
#[cfg(target_os = "linux")]
const MADV_COLLAPSE: libc::c_int = 25;

/// What `HugePages` did so far, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HugePageStats {
    /// Bytes now backed by huge pages that the host collapsed.
    pub collapsed_bytes: u64,
    /// 2 MiB ranges the kernel refused to collapse (older kernel, `never` mode, the start
    /// of a guest's memory, which maps the module's data image from a file, or a heap
    /// range unmapped meanwhile).
    pub refused_ranges: u64,
}

impl std::ops::AddAssign for HugePageStats {
    fn add_assign(&mut self, other: Self) {
        self.collapsed_bytes += other.collapsed_bytes;
        self.refused_ranges += other.refused_ranges;
    }
}

/// Follows one memory's growth (a guest's linear memory, or an allocator's heap) and hands
/// each new whole 2 MiB range to the kernel.
#[derive(Debug, Default)]
pub struct HugePages {
    /// End (an address) of the part already handled.
    done_to: usize,
    stats: HugePageStats,
}

impl HugePages {
    pub fn stats(&self) -> HugePageStats {
        self.stats
    }

    /// Handles the memory `[base, base + size)` after a call; cheap when it has not grown
    /// by a whole range since the last time. `base` must not change between calls.
    pub fn after_growth(&mut self, base: *mut u8, size: usize) {
        let end = align_down((base as usize).saturating_add(size));
        // A heap can shrink (its allocator trims it) and grow back: what lies past its
        // end now must be handled again when it returns.
        self.done_to = self.done_to.min(end);
        let start = align_up(base as usize).max(self.done_to);
        if end <= start {
            return;
        }
        self.done_to = end;
        #[cfg(target_os = "linux")]
        self.advise(start, end);
    }

    #[cfg(target_os = "linux")]
    fn advise(&mut self, start: usize, end: usize) {
        // SAFETY: neither advice changes the contents of memory, only how the kernel
        // backs it, and on a range that is not (or no longer) mapped the kernel returns
        // ENOMEM. The callers pass the guest's accessible linear memory (no guest code runs
        // meanwhile) or a heap mapping just read from `/proc/self/maps`.
        let hinted = unsafe { libc::madvise(start as *mut _, end - start, libc::MADV_HUGEPAGE) };
        if hinted != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "MADV_HUGEPAGE on the engine's memory failed");
        }
        let mut at = start;
        while at < end {
            // SAFETY: as above, for one 2 MiB range of it.
            let r = unsafe { libc::madvise(at as *mut _, HUGE, MADV_COLLAPSE) };
            if r == 0 {
                self.stats.collapsed_bytes += HUGE as u64;
            } else {
                if self.stats.refused_ranges == 0 {
                    tracing::debug!(error = %std::io::Error::last_os_error(), "the kernel did not collapse a range of the engine's memory into a huge page");
                }
                self.stats.refused_ranges += 1;
            }
            at += HUGE;
        }
    }
}

fn align_up(x: usize) -> usize {
    x.saturating_add(HUGE - 1) & !(HUGE - 1)
}

fn align_down(x: usize) -> usize {
    x & !(HUGE - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_ranges_past_the_last_one_are_handled() {
        let mut h = HugePages::default();
        // A fake base: nothing below 3 × 2 MiB past it is a whole range yet.
        let base = (HUGE * 1000 + 4096) as *mut u8;
        h.after_growth(base, HUGE);
        assert_eq!(h.done_to, 0, "no whole aligned range inside");
        // (Off Linux, or with this unmapped fake base, madvise just fails: counted.)
        let before = h.stats();
        h.after_growth(base, 3 * HUGE);
        assert_eq!(h.done_to, HUGE * 1003);
        let after = h.stats();
        #[cfg(target_os = "linux")]
        assert_eq!(
            after.refused_ranges + after.collapsed_bytes / HUGE as u64,
            before.refused_ranges + before.collapsed_bytes / HUGE as u64 + 2,
            "two new ranges: [1001, 1003) × 2 MiB"
        );
        // Nothing new: nothing done.
        h.after_growth(base, 3 * HUGE);
        assert_eq!(h.stats(), after);
    }
}
