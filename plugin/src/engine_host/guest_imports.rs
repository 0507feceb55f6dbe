//! The functions the WASM guest imports from its host (module `faultline`; see
//! `wasm-guest/ABI.md`).
//!
//! There is one: `fl_prefetch`, because wasm32 has no prefetch instruction. Without it
//! the guest's only way to start a cache miss early is a load, which holds the CPU until
//! the line arrives; with thousands of threads, every event's state is such a miss.

use wasmtime::{Caller, Linker, Memory, ResourceLimiter, StoreLimits};

use super::call_fence::FenceGate;

/// Offsets one `fl_prefetch` call may pass: a guest queues a few hundred at most, and the
/// bound keeps a host call (which no deadline interrupts) short whatever the guest asks.
pub const MAX_PREFETCH_LINES: u32 = 1024;

/// The store's limits, remembering a refused memory growth: with `trap_on_grow_failure`
/// that refusal is the trap, and only here is it known to be the memory limit's doing
/// (the trap itself is an untyped error of wasmtime's).
pub struct GuestLimits {
    limits: StoreLimits,
    memory_refused: bool,
}

impl GuestLimits {
    pub fn new(limits: StoreLimits) -> Self {
        Self {
            limits,
            memory_refused: false,
        }
    }

    /// Whether a growth of the guest's memory was refused since [`GuestLimits::clear`].
    pub fn memory_refused(&self) -> bool {
        self.memory_refused
    }

    /// Forgets an earlier refusal: before each call, so a trap is classified by its own.
    pub fn clear(&mut self) {
        self.memory_refused = false;
    }
}

impl ResourceLimiter for GuestLimits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let allowed = self.limits.memory_growing(current, desired, maximum);
        if !matches!(allowed, Ok(true)) {
            self.memory_refused = true;
        }
        allowed
    }

    fn memory_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        // Allowed but not done (the reservation or the OS ran out): the guest still
        // cannot have the memory it asked for.
        self.memory_refused = true;
        self.limits.memory_grow_failed(error)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.limits.table_growing(current, desired, maximum)
    }

    fn table_grow_failed(&mut self, error: wasmtime::Error) -> wasmtime::Result<()> {
        self.limits.table_grow_failed(error)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

/// What a guest's store holds besides the guest itself.
pub struct GuestData {
    /// The memory cap applied to every growth of the guest's memory.
    pub limits: GuestLimits,
    /// The guest's exported memory, once instantiated: `fl_prefetch` reads its offsets
    /// and prefetches in it.
    pub memory: Option<Memory>,
    /// Lines `fl_prefetch` has issued: shows whether the guest's hints reach the CPU.
    pub prefetched_lines: u64,
    /// Taken before reading guest memory when the call timeout is a memory fence (which
    /// must not revoke the memory under a host read).
    pub fence: Option<FenceGate>,
}

impl GuestData {
    /// A store's data before instantiation.
    pub fn new(limits: StoreLimits) -> Self {
        Self {
            limits: GuestLimits::new(limits),
            memory: None,
            prefetched_lines: 0,
            fence: None,
        }
    }
}

/// A linker that defines every import of the guest.
pub fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<GuestData>> {
    let mut linker = Linker::new(engine);
    linker.func_wrap("faultline", "fl_prefetch", prefetch)?;
    Ok(linker)
}

/// `fl_prefetch(ptr, len)`: prefetches the guest-memory lines at the `len` little-endian
/// `u32` offsets at `ptr`. A hint: offsets or a list outside memory are skipped, never an
/// error, so a guest cannot make it fail or read past its memory. Skipped whole once the
/// call's memory is fenced.
fn prefetch(mut caller: Caller<'_, GuestData>, ptr: u32, len: u32) {
    let issued = issue(&caller, ptr, len);
    caller.data_mut().prefetched_lines += issued;
}

/// The work of [`prefetch`]: the lines issued.
fn issue(caller: &Caller<'_, GuestData>, ptr: u32, len: u32) -> u64 {
    let host = caller.data();
    let Some(memory) = host.memory else {
        return 0;
    };
    let _reading = match host.fence.as_ref().map(FenceGate::enter) {
        Some(None) => return 0,
        held => held,
    };
    let data = memory.data(caller);
    let start = ptr as usize;
    let end = start.saturating_add(len.min(MAX_PREFETCH_LINES) as usize * 4);
    let Some(offsets) = data.get(start..end) else {
        return 0;
    };
    let mut issued = 0;
    for o in offsets.chunks_exact(4) {
        let Ok(o) = <[u8; 4]>::try_from(o) else {
            continue;
        };
        if let Some(byte) = data.get(u32::from_le_bytes(o) as usize) {
            fetch(byte);
            issued += 1;
        }
    }
    issued
}

#[inline(always)]
fn fetch(byte: &u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 never dereferences architecturally, and SSE is in the x86_64
    // baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
            (byte as *const u8).cast::<i8>(),
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = byte;
}

#[cfg(test)]
mod tests {
    use wasmtime::{Engine, Module, Store, StoreLimitsBuilder, TypedFunc};

    use super::*;

    /// `(module (import "faultline" "fl_prefetch" (func (param i32 i32)))
    ///  (memory (export "memory") 1)
    ///  (func (export "run") (param i32 i32) local.get 0 local.get 1 call 0))`,
    /// assembled by hand (wasmtime is built without its text parser).
    const CALLER: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x06, 0x01, 0x60, 0x02, 0x7f, 0x7f, 0x00, // type 0: (i32, i32) -> ()
        0x02, 0x19, 0x01, 0x09, b'f', b'a', b'u', b'l', b't', b'l', b'i', b'n', b'e', 0x0b, b'f',
        b'l', b'_', b'p', b'r', b'e', b'f', b'e', b't', b'c', b'h', 0x00, 0x00, 0x03, 0x02, 0x01,
        0x00, // function 1: type 0
        0x05, 0x03, 0x01, 0x00, 0x01, // one memory, 1 page
        0x07, 0x10, 0x02, 0x06, b'm', b'e', b'm', b'o', b'r', b'y', 0x02, 0x00, 0x03, b'r', b'u',
        b'n', 0x00, 0x01, // exports
        0x0a, 0x0a, 0x01, 0x08, 0x00, 0x20, 0x00, 0x20, 0x01, 0x10, 0x00, 0x0b, // code
    ];

    #[test]
    fn prefetch_issues_in_bounds_lines_and_ignores_the_rest() {
        let engine = Engine::default();
        let module = Module::new(&engine, CALLER).unwrap();
        let mut store = Store::new(&engine, GuestData::new(StoreLimitsBuilder::new().build()));
        let inst = linker(&engine)
            .unwrap()
            .instantiate(&mut store, &module)
            .unwrap();
        let memory = inst.get_memory(&mut store, "memory").unwrap();
        store.data_mut().memory = Some(memory);
        let run: TypedFunc<(u32, u32), ()> = inst.get_typed_func(&mut store, "run").unwrap();

        // Offsets at 256: two inside the 64 KiB page, one past its end, one at u32::MAX.
        let offsets: Vec<u8> = [0u32, 65_535, 65_536, u32::MAX]
            .iter()
            .flat_map(|o| o.to_le_bytes())
            .collect();
        memory.write(&mut store, 256, &offsets).unwrap();
        run.call(&mut store, (256, 4)).unwrap();
        assert_eq!(store.data().prefetched_lines, 2);

        // Lists reaching past memory are skipped whole; no trap.
        for (ptr, len) in [(65_532, 2), (u32::MAX, 1), (u32::MAX, u32::MAX)] {
            run.call(&mut store, (ptr, len)).unwrap();
        }
        assert_eq!(store.data().prefetched_lines, 2);

        // A long list is cut at MAX_PREFETCH_LINES offsets (all zero here: in bounds).
        run.call(&mut store, (1024, u32::MAX)).unwrap();
        assert_eq!(
            store.data().prefetched_lines,
            2 + u64::from(MAX_PREFETCH_LINES)
        );
    }

    #[test]
    fn a_growth_past_the_limit_is_remembered_until_cleared() {
        let limits = StoreLimitsBuilder::new()
            .memory_size(2 << 16)
            .trap_on_grow_failure(true)
            .build();
        let mut l = GuestLimits::new(limits);
        assert!(matches!(l.memory_growing(1 << 16, 2 << 16, None), Ok(true)));
        assert!(!l.memory_refused());
        assert!(l.memory_growing(2 << 16, 3 << 16, None).is_err());
        assert!(l.memory_refused());
        l.clear();
        assert!(!l.memory_refused());
    }
}
