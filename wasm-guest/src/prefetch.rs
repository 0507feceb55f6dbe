//! Early-fetch hints for the ingest loop.
//!
//! With thousands of threads every event touches a thread record that is no longer in
//! cache; the loop looks a few events ahead and asks for those records early so the
//! memory latencies overlap instead of adding up. A hint never changes a result.
//!
//! On x86_64 a hint is `PREFETCHT0`. wasm32 has no prefetch instruction, so there a
//! hint is a volatile one-byte read of the line: the value is discarded, but it is a
//! real load, and a miss holds retirement until the line arrives. Spread among the
//! analysis of each event (the native loop's staged hints) such loads stalled the guest;
//! issued back to back for a group of events, their misses overlap like prefetches (see
//! `Target::touch_group`). That is why hints take references (always in bounds, so the
//! read cannot trap) rather than raw addresses, and read bytes as `MaybeUninit`
//! (padding bytes may be uninitialised).

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
    // SAFETY: `p` points inside a live allocation (see the callers), and a
    // `MaybeUninit<u8>` may be read from any byte, initialised or not.
    unsafe {
        let _ = std::ptr::read_volatile(p as *const std::mem::MaybeUninit<u8>);
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "wasm32")))]
    let _ = p;
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

/// Starts fetching the lines of `*r`'s first and last bytes: all of it when it spans at
/// most two lines (a record of at most 64 bytes, or of at most 128 aligned to its size's
/// share of a line), in two hints instead of a loop.
#[inline(always)]
pub fn two_lines<T>(r: &T) {
    let n = std::mem::size_of::<T>();
    if n == 0 {
        // A zero-sized value occupies no byte to fetch.
        return;
    }
    let b = (r as *const T).cast::<u8>();
    fetch(b);
    fetch(b.wrapping_add(n - 1));
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
    if n > 0 {
        // The last byte's line, when the span is not line-aligned.
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
        two_lines(&v[1]);
        two_lines(&[0u8; 0]);
        bytes(&v[0], 10_000);
        bytes(&v[0], 0);
        assert_eq!(v.iter().sum::<u32>(), 100);
    }
}
