//! The `extern "C"` exports of the wasm32 build: thin shims over [`Guest`].
//!
//! Pointers are offsets into this module's linear memory, passed as `u32`; every
//! (pointer, length) pair is checked against the memory size before use, so a host bug
//! yields `Status::BadArgument` instead of reading out of bounds.

use std::alloc::Layout;
use std::cell::RefCell;

use super::guest::Guest;
use super::ABI_VERSION;

thread_local! {
    // wasm32-unknown-unknown is single-threaded: one guest per instance.
    static GUEST: RefCell<Guest> = RefCell::new(Guest::default());
}

fn with<R>(f: impl FnOnce(&mut Guest) -> R) -> R {
    GUEST.with(|g| f(&mut g.borrow_mut()))
}

/// Alignment of buffers from `fl_alloc`: enough for any field the host might place.
const ALIGN: usize = 8;

fn memory_bytes() -> u64 {
    core::arch::wasm32::memory_size(0) as u64 * 65_536
}

/// The bytes at `ptr..ptr + len`, if that range lies inside linear memory.
fn bytes<'a>(ptr: u32, len: u32) -> Option<&'a [u8]> {
    if len == 0 {
        return Some(&[]);
    }
    if ptr == 0 || u64::from(ptr) + u64::from(len) > memory_bytes() {
        return None;
    }
    // SAFETY: the range is non-null and inside linear memory, and the host does not
    // write guest memory while a call runs (the guest is single-threaded).
    Some(unsafe { core::slice::from_raw_parts(ptr as usize as *const u8, len as usize) })
}

fn bad_argument(g: &mut Guest) -> i32 {
    g.bad_argument("pointer/length outside guest memory")
}

/// The ABI version this guest implements ([`ABI_VERSION`]).
#[no_mangle]
pub extern "C" fn fl_abi_version() -> u32 {
    ABI_VERSION
}

/// Allocates `len` bytes for the host to write arguments into; 0 when out of memory.
#[no_mangle]
pub extern "C" fn fl_alloc(len: u32) -> u32 {
    let Ok(layout) = Layout::from_size_align(len.max(1) as usize, ALIGN) else {
        return 0;
    };
    // SAFETY: the layout has a non-zero size.
    unsafe { std::alloc::alloc(layout) as usize as u32 }
}

/// Frees a buffer from [`fl_alloc`]; `len` must be the length it was allocated with.
#[no_mangle]
pub extern "C" fn fl_free(ptr: u32, len: u32) {
    if ptr == 0 {
        return;
    }
    if let Ok(layout) = Layout::from_size_align(len.max(1) as usize, ALIGN) {
        // SAFETY: the host passes back a pointer and length from `fl_alloc`.
        unsafe { std::alloc::dealloc(ptr as usize as *mut u8, layout) }
    }
}

/// Creates the engine from JSON params at `ptr..ptr+len` (empty = defaults).
#[no_mangle]
pub extern "C" fn fl_init(ptr: u32, len: u32) -> i32 {
    with(|g| match bytes(ptr, len) {
        Some(b) => g.init(b),
        None => bad_argument(g),
    })
}

/// Sets one target's params from JSON `{"target": …, "params": {…}}`.
#[no_mangle]
pub extern "C" fn fl_set_target_params(ptr: u32, len: u32) -> i32 {
    with(|g| match bytes(ptr, len) {
        Some(b) => g.set_target_params(b),
        None => bad_argument(g),
    })
}

/// Ingests one binary event batch.
#[no_mangle]
pub extern "C" fn fl_ingest(ptr: u32, len: u32) -> i32 {
    with(|g| match bytes(ptr, len) {
        Some(b) => g.ingest(b),
        None => bad_argument(g),
    })
}

/// On-demand diagnosis of the target named at `ptr..ptr+len`; result: `Report` JSON or `null`.
#[no_mangle]
pub extern "C" fn fl_trigger(ptr: u32, len: u32, at_ns: u64) -> i32 {
    with(|g| match bytes(ptr, len) {
        Some(b) => g.trigger(b, at_ns),
        None => bad_argument(g),
    })
}

/// Moves the clock of the target named at `ptr..ptr+len` to `now_ns` (a target that sent
/// nothing for a while); `still`: what the host saw of its processes
/// ([`crate::Stillness::code`]; unknown codes read as unknown). Due reports wait for
/// `fl_take_reports`.
#[no_mangle]
pub extern "C" fn fl_advance(ptr: u32, len: u32, now_ns: u64, still: u32) -> i32 {
    with(|g| match bytes(ptr, len) {
        Some(b) => g.advance(b, now_ns, crate::Stillness::from_code(still)),
        None => bad_argument(g),
    })
}

/// Drops the state and pending reports of the target named at `ptr..ptr+len` (the host
/// evicted it); its per-target params stay. Unknown targets are no error.
#[no_mangle]
pub extern "C" fn fl_forget(ptr: u32, len: u32) -> i32 {
    with(|g| match bytes(ptr, len) {
        Some(b) => g.forget(b),
        None => bad_argument(g),
    })
}

/// Reports produced since the last call; result: JSON array.
#[no_mangle]
pub extern "C" fn fl_take_reports() -> i32 {
    with(Guest::take_reports)
}

/// End of stream; result: JSON array of the final reports.
#[no_mangle]
pub extern "C" fn fl_finish() -> i32 {
    with(Guest::finish)
}

/// Calibration of the named target; `has_start` 0 means "use the detected onset".
#[no_mangle]
pub extern "C" fn fl_calibrate(ptr: u32, len: u32, has_start: u32, fault_start_ns: u64) -> i32 {
    let start = (has_start != 0).then_some(fault_start_ns);
    with(|g| match bytes(ptr, len) {
        Some(b) => g.calibrate(b, start),
        None => bad_argument(g),
    })
}

/// Engine counters; result: JSON.
#[no_mangle]
pub extern "C" fn fl_counters() -> i32 {
    with(Guest::counters)
}

/// Approximate bytes of state held by the engine and this shim.
#[no_mangle]
pub extern "C" fn fl_state_bytes() -> u64 {
    with(|g| g.state_bytes())
}

/// Where the last call's result (or error message) starts.
#[no_mangle]
pub extern "C" fn fl_result_ptr() -> u32 {
    with(|g| g.result().as_ptr() as usize as u32)
}

/// Length of the last call's result (or error message).
#[no_mangle]
pub extern "C" fn fl_result_len() -> u32 {
    with(|g| g.result().len() as u32)
}
