//! Software prefetch hints for the ingest loop.
//!
//! With thousands of threads every event touches a thread record that is no longer in
//! cache; the loop looks a few events ahead and asks for those records early so the
//! memory latencies overlap instead of adding up. A hint never changes a result: it is
//! not a load, it cannot fault, and on targets without one (wasm32) it does nothing.

/// Asks the CPU to bring the cache line holding `p` into L1; `p` may be dangling.
#[inline(always)]
pub fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint that never dereferences architecturally, so any
    // address (even dangling or unmapped) is fine, and SSE is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Prefetches every cache line of `[p, p + bytes)`.
#[inline(always)]
pub fn range<T>(p: *const T, bytes: usize) {
    let b = p as *const u8;
    let mut off = 0;
    while off < bytes {
        line(b.wrapping_add(off));
        off += 64;
    }
    if bytes > 0 {
        line(b.wrapping_add(bytes - 1));
    }
}
