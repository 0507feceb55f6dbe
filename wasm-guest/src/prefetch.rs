//! Early-fetch hints for the ingest loop.
//!
//! With thousands of threads every event touches a thread record that is no longer in
//! cache; the loop looks a few events ahead and asks for those records early so the
//! memory latencies overlap instead of adding up. A hint never changes a result.
//!
//! On x86_64 a hint is `PREFETCHT0`. wasm32 has no prefetch instruction, and its
//! stand-in, a volatile load, holds retirement until the line arrives. So in the guest a
//! hint only queues the line's address, and [`flush`] hands the queue to the host's
//! `fl_prefetch` import, which issues the prefetches on guest memory (see
//! `wasm-guest/ABI.md`). A call inside the per-event loop makes the compiled loop spill
//! its live values around it, so the guest queues a group of events' hints at a time,
//! between groups (`Target::hint_group`). Hints take references, so a queued address
//! always lies inside guest memory.

/// Bytes of a cache line on the targets we run on.
const LINE: usize = 64;

/// Starts fetching the cache line holding the byte at `p`, which must lie inside a live
/// allocation (callers derive it from a reference).
#[inline(always)]
fn fetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint that never dereferences architecturally, and SSE is
    // part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(target_arch = "wasm32")]
    queue::push(p as u32);
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    let _ = p;
}

/// Issues the hints queued since the last flush (the guest's; natively hints are issued
/// at once and this does nothing).
#[inline(always)]
pub fn flush() {
    #[cfg(target_arch = "wasm32")]
    queue::flush();
}

/// The guest's queue of lines to prefetch, handed to the host in one call.
#[cfg(target_arch = "wasm32")]
mod queue {
    /// Lines per host call: a group of events' hints (about ten each) fit.
    const CAP: usize = 128;

    struct Queue {
        len: usize,
        lines: [u32; CAP],
    }

    // A wasm32 module without the atomics feature runs on one thread, and no reference to
    // the queue outlives `push` or `flush`: the accesses below never overlap.
    static mut QUEUE: Queue = Queue {
        len: 0,
        lines: [0; CAP],
    };

    #[link(wasm_import_module = "faultline")]
    unsafe extern "C" {
        /// Prefetches the guest-memory lines at the `len` little-endian `u32` offsets at
        /// `ptr` (a hint: the host may ignore it).
        fn fl_prefetch(ptr: u32, len: u32);
    }

    #[inline(always)]
    pub fn push(addr: u32) {
        // SAFETY: single-threaded, no overlapping access (see `QUEUE`).
        unsafe {
            let q = &raw mut QUEUE;
            if (*q).len == CAP {
                flush();
            }
            if let Some(slot) = (*q).lines.get_mut((*q).len) {
                *slot = addr;
                (*q).len += 1;
            }
        }
    }

    #[inline(never)]
    pub fn flush() {
        // SAFETY: single-threaded, no overlapping access (see `QUEUE`); the import only
        // reads the offsets, through the host's bounds-checked view of guest memory.
        unsafe {
            let q = &raw mut QUEUE;
            let len = (*q).len;
            if len > 0 {
                fl_prefetch((&raw const (*q).lines) as u32, len as u32);
                (*q).len = 0;
            }
        }
    }
}

/// Starts fetching the lines of the first `bytes` bytes of `*r` (at most all of it).
#[inline(always)]
pub fn bytes<T>(r: &T, bytes: usize) {
    span(
        (r as *const T).cast::<u8>(),
        bytes.min(std::mem::size_of::<T>()),
    );
}

/// Starts fetching the line holding `*r`.
#[inline(always)]
pub fn line<T>(r: &T) {
    bytes(r, 1);
}

/// Starts fetching every line of `s`.
#[inline(always)]
pub fn slice<T>(s: &[T]) {
    span(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s));
}

/// Fetches every line of the `n` bytes at `b` (callers pass spans of a live reference).
#[inline(always)]
fn span(b: *const u8, n: usize) {
    if n <= LINE {
        // The common case (a field group, a short ring): one or two lines, no loop.
        if n > 0 {
            fetch(b);
            if (b as usize % LINE) + n > LINE {
                fetch(b.wrapping_add(n - 1));
            }
        }
        return;
    }
    let mut off = 0;
    while off < n {
        fetch(b.wrapping_add(off));
        off += LINE;
    }
    // The last byte's line, when the loop's last hint fell on an earlier one (the span
    // is not line-aligned): an aligned record gets one hint per line.
    let last = b as usize + (n - 1);
    if last / LINE != (b as usize + (off - LINE)) / LINE {
        fetch(b.wrapping_add(n - 1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_accept_any_in_bounds_span() {
        // Hints have no observable effect; this checks they stay in bounds (no panic,
        // and Miri-clean) for empty, partial and oversized spans.
        let v = vec![1u32; 100];
        slice(&v);
        slice(&v[..0]);
        line(&v[99]);
        bytes(&v[0], 10_000);
        bytes(&v[0], 0);
        assert_eq!(v.iter().sum::<u32>(), 100);
    }
}
