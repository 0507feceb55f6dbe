//! The memory fence: a guest call's deadline enforced by the MMU instead of by
//! instrumented code (`[engine] timeout_mechanism = "fence"`, the default).
//!
//! wasmtime's epoch interruption compiles a check of the deadline into every loop header
//! and function entry of the guest; in the engine's per-event loop that costs 4–17 % of
//! the guest's throughput (EVALUATION.md, session 26). The fence costs nothing while a call
//! is on time. A watchdog thread looks at the armed call every [`TICK`]; past its deadline
//! it revokes all access to the guest's linear memory (`mprotect(PROT_NONE)`). The guest's
//! next load or store faults, and wasmtime turns a fault inside a linear memory into a
//! trap, exactly as for an out-of-bounds access; the host then restores the memory and
//! restarts the guest, as after any trap.
//!
//! What makes that safe:
//! - Host code never touches guest memory while a call is armed, except a host import
//!   (`fl_prefetch`), which first takes [`FenceGate::enter`]: the watchdog does not fence
//!   while an import reads, and an import does not read once fenced.
//! - wasmtime runs `memory.copy` and `memory.fill` in host code, where a fault is not a
//!   trap; the guest is compiled with them lowered to wasm loops first
//!   ([`super::bulk_memory_lowering`]).
//! - Disarming takes the same lock as fencing, so the host learns whether the call was
//!   fenced before it reads the call's results.
//!
//! A call that runs on without touching memory (a pure register loop) cannot be stopped
//! this way. Once it has used another `timeout` of CPU time after its fence, the fence
//! calls its `on_wedged` action; the host's action ends the process (an engine thread
//! that can never return is otherwise a silent hang). Thread CPU time, not wall time, so
//! a starved or stopped process is not mistaken for a wedged call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// How often the watchdog looks at the armed call: the deadline's resolution, as the
/// epoch tick was.
pub const TICK: Duration = Duration::from_millis(10);

/// A call that the fence could not stop: what `on_wedged` is told.
#[derive(Clone, Copy, Debug)]
pub struct WedgedCall {
    /// The call's budget (`call_timeout_ms`).
    pub timeout: Duration,
    /// CPU time the call used since its memory was fenced.
    pub cpu_since_fence: Duration,
}

type OnWedged = Box<dyn Fn(WedgedCall) + Send + Sync>;

/// Guest memory as the watchdog sees it: an address range, never dereferenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Region {
    base: usize,
    len: usize,
}

#[derive(Debug)]
struct Armed {
    deadline: Instant,
    /// The guest's memory up to its limit: what the call may make accessible by growing.
    reach: Region,
    /// CPU clock of the thread running the call (`None`: no wedged-call detection).
    cpu_clock: Option<libc::clockid_t>,
}

#[derive(Debug)]
struct Fenced {
    /// The calling thread's CPU time when fenced (`None` until it could be read).
    cpu_at: Option<Duration>,
    /// An `mprotect` failure was logged for this fence.
    logged: bool,
}

#[derive(Debug, Default)]
struct State {
    armed: Option<Armed>,
    fenced: Option<Fenced>,
    /// `on_wedged` was called for the current fence.
    reported: bool,
}

struct Shared {
    timeout: Duration,
    state: Mutex<State>,
    gate: Arc<GateFlags>,
    on_wedged: OnWedged,
}

/// The two flags host imports and the watchdog use to keep out of each other's way.
#[derive(Debug, Default)]
struct GateFlags {
    /// Guest memory is fenced (or about to be): imports must not read it.
    fenced: AtomicBool,
    /// A host import is reading guest memory: the watchdog must wait to fence.
    in_host: AtomicBool,
}

/// Enforces the per-call timeout of one guest by fencing its memory.
pub struct CallFence {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for CallFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallFence")
            .field("timeout", &self.shared.timeout)
            .finish_non_exhaustive()
    }
}

/// Why a fence cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    #[error("cannot start the fence's watchdog thread: {0}")]
    Watchdog(std::io::Error),
}

impl CallFence {
    /// A fence for calls of at most `timeout`; its watchdog thread lives as long as it.
    pub fn new(
        timeout: Duration,
        on_wedged: impl Fn(WedgedCall) + Send + Sync + 'static,
    ) -> Result<Self, FenceError> {
        let shared = Arc::new(Shared {
            timeout,
            state: Mutex::new(State::default()),
            gate: Arc::new(GateFlags::default()),
            on_wedged: Box::new(on_wedged),
        });
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("faultline-fence".into())
            .spawn(move || loop {
                std::thread::sleep(TICK);
                match weak.upgrade() {
                    Some(s) => s.watch(Instant::now()),
                    None => break,
                }
            })
            .map_err(FenceError::Watchdog)?;
        Ok(Self { shared })
    }

    /// The deadline of a call (or group of calls) starting now.
    pub fn deadline_from_now(&self) -> Instant {
        Instant::now() + self.shared.timeout
    }

    /// What host imports take before they read guest memory.
    pub fn gate(&self) -> FenceGate {
        FenceGate(self.shared.gate.clone())
    }

    /// Arms the fence for a call about to run on this thread on the memory at `base`
    /// (page-aligned, as wasmtime maps it), which may grow to `limit` bytes during the
    /// call. The host must not touch guest memory until the returned call is finished.
    pub fn arm(&self, deadline: Instant, base: *mut u8, limit: usize) -> ArmedCall<'_> {
        let mut clock: libc::clockid_t = 0;
        // SAFETY: pthread_self() is this live thread; the out-pointer is valid.
        let found = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut clock) };
        let base = base as usize;
        self.shared.lock().armed = Some(Armed {
            deadline,
            reach: Region { base, len: limit },
            cpu_clock: (found == 0).then_some(clock),
        });
        ArmedCall {
            fence: self,
            base,
            finished: false,
        }
    }
}

/// A guest call in progress under the fence.
#[must_use = "finish() tells whether the call timed out"]
pub struct ArmedCall<'a> {
    fence: &'a CallFence,
    base: usize,
    finished: bool,
}

impl ArmedCall<'_> {
    /// Ends the call, whose memory now has `len` bytes. `true` when the memory was fenced:
    /// the call ran past its deadline and its outcome must be treated as a timeout (the
    /// memory is accessible again when this returns).
    pub fn finish(mut self, len: usize) -> bool {
        self.finished = true;
        self.fence.shared.disarm(Some(Region {
            base: self.base,
            len,
        }))
    }
}

impl Drop for ArmedCall<'_> {
    fn drop(&mut self) {
        if !self.finished {
            // Unwinding out of the call: the memory's size is unknown here.
            self.fence.shared.disarm(None);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Disarms; restores `accessible` if the call was fenced (whether it was is returned).
    fn disarm(&self, accessible: Option<Region>) -> bool {
        let mut st = self.lock();
        st.armed = None;
        st.reported = false;
        if st.fenced.take().is_none() {
            return false;
        }
        let Some(region) = accessible else {
            // Pages past the size must stay inaccessible (wasm's bounds rest on them),
            // and the size is unknown: no correct restore exists.
            tracing::error!("a fenced guest call unwound; aborting");
            std::process::abort();
        };
        // SAFETY: `region` is the guest memory's accessible size now that the call,
        // which could grow it, has returned; it was readable and writable before.
        let restored = unsafe { protect(region, libc::PROT_READ | libc::PROT_WRITE) };
        if let Err(e) = restored {
            // wasmtime would fault on the guest's memory next: nothing safe remains.
            tracing::error!(error = %e, "cannot restore the fenced guest memory; aborting");
            std::process::abort();
        }
        self.gate.fenced.store(false, Ordering::SeqCst);
        true
    }

    /// One look of the watchdog at `now`.
    fn watch(&self, now: Instant) {
        let mut st = self.lock();
        let Some(armed) = st.armed.as_ref() else {
            return;
        };
        if now < armed.deadline {
            return;
        }
        let (reach, cpu_clock) = (armed.reach, armed.cpu_clock);
        if st.fenced.is_none() {
            self.gate.fenced.store(true, Ordering::SeqCst);
            // An import that got in before the flag reads briefly (a bounded list).
            while self.gate.in_host.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            // Recorded before the attempt: a failed mprotect may have changed part of
            // the range, and disarm() must restore it either way.
            st.fenced = Some(Fenced {
                cpu_at: cpu_clock.and_then(thread_cpu),
                logged: false,
            });
        }
        // Every tick while fenced, up to the limit: memory the call grows after the
        // fence is made accessible by wasmtime, and must be fenced too.
        // SAFETY: the range is the armed call's guest memory and its reservation, which
        // no host code touches until disarm() restores the accessible part.
        let applied = unsafe { protect(reach, libc::PROT_NONE) };
        let reported = st.reported;
        let Some(f) = st.fenced.as_mut() else {
            return;
        };
        if let Err(e) = applied {
            if !f.logged {
                f.logged = true;
                tracing::error!(error = %e, "cannot fence a guest call past its deadline");
            }
        }
        let (Some(clock), false) = (cpu_clock, reported) else {
            return;
        };
        let Some(at) = f.cpu_at else {
            f.cpu_at = thread_cpu(clock);
            return;
        };
        let Some(cpu) = thread_cpu(clock) else {
            return;
        };
        let cpu_since_fence = cpu.saturating_sub(at);
        if cpu_since_fence >= self.timeout {
            st.reported = true;
            (self.on_wedged)(WedgedCall {
                timeout: self.timeout,
                cpu_since_fence,
            });
        }
    }
}

/// Held by a host import while it reads guest memory.
#[derive(Clone, Debug)]
pub struct FenceGate(Arc<GateFlags>);

/// Proof that the fence will not be applied until it is dropped.
pub struct GateGuard<'a>(&'a GateFlags);

impl FenceGate {
    /// `None` when the memory is fenced (or about to be): the import must skip its reads.
    pub fn enter(&self) -> Option<GateGuard<'_>> {
        // Dekker's handshake with `Shared::watch`: with sequentially consistent order,
        // either this sees `fenced`, or the watchdog sees `in_host` and waits.
        self.0.in_host.store(true, Ordering::SeqCst);
        if self.0.fenced.load(Ordering::SeqCst) {
            self.0.in_host.store(false, Ordering::SeqCst);
            return None;
        }
        Some(GateGuard(&self.0))
    }
}

impl Drop for GateGuard<'_> {
    fn drop(&mut self) {
        self.0.in_host.store(false, Ordering::Release);
    }
}

/// `mprotect` of a whole region.
///
/// # Safety
/// `region` must be memory this process mapped, which no code relies on accessing with
/// other rights while the change lasts.
unsafe fn protect(region: Region, prot: libc::c_int) -> std::io::Result<()> {
    if region.len == 0 {
        return Ok(());
    }
    let rc = libc::mprotect(region.base as *mut libc::c_void, region.len, prot);
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// CPU time consumed so far on `clock`, if it can be read.
fn thread_cpu(clock: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the out-pointer is valid; a dead thread's clock makes the call fail.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use wasm_encoder::{
        BlockType, CodeSection, EntityType, ExportKind, ExportSection, Function, FunctionSection,
        ImportSection, Instruction as I, MemArg, Module, TypeSection, ValType,
    };
    use wasmtime::{Config, Engine, Linker, Store, StoreLimitsBuilder, TypedFunc};

    use super::*;
    use crate::engine_host::bulk_memory_lowering::one_memory;
    use crate::engine_host::guest_imports::{self, GuestData};

    /// A module exporting `memory` and `run()`, whose body is `body` in an endless loop;
    /// it imports `fl_prefetch` as function 0.
    fn looping(body: &[I<'_>]) -> Vec<u8> {
        looping_after(&[], body)
    }

    /// [`looping`] with `prelude` run once before the loop.
    fn looping_after(prelude: &[I<'_>], body: &[I<'_>]) -> Vec<u8> {
        let mut m = Module::new();
        let mut types = TypeSection::new();
        types.ty().function([ValType::I32, ValType::I32], []);
        types.ty().function([], []);
        m.section(&types);
        let mut imports = ImportSection::new();
        imports.import("faultline", "fl_prefetch", EntityType::Function(0));
        m.section(&imports);
        let mut funcs = FunctionSection::new();
        funcs.function(1);
        m.section(&funcs);
        m.section(&one_memory(2));
        let mut exports = ExportSection::new();
        exports.export("run", ExportKind::Func, 1);
        exports.export("memory", ExportKind::Memory, 0);
        m.section(&exports);
        let mut code = CodeSection::new();
        let mut f = Function::new([(1, ValType::I32)]);
        for i in prelude {
            f.instruction(i);
        }
        f.instruction(&I::Loop(BlockType::Empty));
        for i in body {
            f.instruction(i);
        }
        f.instruction(&I::Br(0));
        f.instruction(&I::End);
        f.instruction(&I::End);
        code.function(&f);
        m.section(&code);
        m.finish()
    }

    fn at0() -> MemArg {
        MemArg {
            offset: 0,
            align: 2,
            memory_index: 0,
        }
    }

    /// `mem[0] += 1`.
    fn count_in_memory() -> Vec<I<'static>> {
        vec![
            I::I32Const(0),
            I::I32Const(0),
            I::I32Load(at0()),
            I::I32Const(1),
            I::I32Add,
            I::I32Store(at0()),
        ]
    }

    struct Guest {
        store: Store<GuestData>,
        run: TypedFunc<(), ()>,
        memory: wasmtime::Memory,
    }

    fn guest(engine: &Engine, wasm: &[u8], gate: Option<FenceGate>) -> Guest {
        let module = wasmtime::Module::new(engine, wasm).unwrap();
        let mut data = GuestData::new(StoreLimitsBuilder::new().build());
        data.fence = gate;
        let mut store = Store::new(engine, data);
        let linker: Linker<GuestData> = guest_imports::linker(engine).unwrap();
        let inst = linker.instantiate(&mut store, &module).unwrap();
        let memory = inst.get_memory(&mut store, "memory").unwrap();
        store.data_mut().memory = Some(memory);
        let run = inst.get_typed_func(&mut store, "run").unwrap();
        Guest { store, run, memory }
    }

    /// The memory limit the test modules are armed with.
    const LIMIT: usize = 16 << 20;

    /// Runs `g` under `fence` with a deadline `after` from now: (trapped, fenced, time).
    fn fenced_call(fence: &CallFence, g: &mut Guest, after: Duration) -> (bool, bool, Duration) {
        let t0 = Instant::now();
        let base = g.memory.data_ptr(&g.store);
        let call = fence.arm(t0 + after, base, LIMIT);
        let trapped = g.run.call(&mut g.store, ()).is_err();
        let fenced = call.finish(g.memory.data_size(&g.store));
        (trapped, fenced, t0.elapsed())
    }

    #[test]
    fn a_runaway_call_traps_at_its_next_memory_access_past_the_deadline() {
        let engine = Engine::default();
        let fence = CallFence::new(Duration::from_millis(40), |_| {}).unwrap();
        let mut g = guest(&engine, &looping(&count_in_memory()), None);
        let (trapped, fenced, took) = fenced_call(&fence, &mut g, Duration::from_millis(40));
        assert!(trapped && fenced, "trapped {trapped}, fenced {fenced}");
        assert!(took >= Duration::from_millis(40), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
        // The memory is readable and writable again, and the loop really ran.
        let counted = u32::from_le_bytes(g.memory.data(&g.store)[..4].try_into().unwrap());
        assert!(counted > 1000, "{counted}");
        g.memory.data_mut(&mut g.store)[..4].copy_from_slice(&[0; 4]);
        // The fence re-arms cleanly for the next call.
        let (trapped, fenced, _) = fenced_call(&fence, &mut g, Duration::from_millis(20));
        assert!(trapped && fenced);
    }

    #[test]
    fn memory_the_call_grew_is_fenced_too() {
        // One page grown at the start (pages 0-1 exist before), then a loop that counts
        // in that new page only: fencing the size at arming would never stop it.
        let grow = [I::I32Const(1), I::MemoryGrow(0), I::Drop];
        let at_new_page = |i| match i {
            I::I32Const(0) => I::I32Const(2 << 16),
            other => other,
        };
        let body: Vec<I<'_>> = count_in_memory().into_iter().map(at_new_page).collect();
        let engine = Engine::default();
        let fence = CallFence::new(Duration::from_millis(30), |_| {}).unwrap();
        let mut g = guest(&engine, &looping_after(&grow, &body), None);
        let (trapped, fenced, took) = fenced_call(&fence, &mut g, Duration::from_millis(30));
        assert!(trapped && fenced, "{took:?}");
        assert_eq!(g.memory.data_size(&g.store), 3 << 16);
        // All three pages are accessible again; the count is in the third.
        let data = g.memory.data(&g.store);
        let counted = u32::from_le_bytes(data[2 << 16..(2 << 16) + 4].try_into().unwrap());
        assert!(counted > 1000, "{counted}");
        assert_eq!(&data[..4], &[0; 4]);
    }

    #[test]
    fn a_call_on_time_is_left_alone() {
        let engine = Engine::default();
        let fence = CallFence::new(Duration::from_millis(20), |_| {}).unwrap();
        // `mem[0] += 1` until it reaches 1,000, then return.
        let mut body = count_in_memory();
        body.extend([
            I::I32Const(0),
            I::I32Load(at0()),
            I::I32Const(1000),
            I::I32GeU,
            I::If(BlockType::Empty),
            I::Return,
            I::End,
        ]);
        let mut g = guest(&engine, &looping(&body), None);
        for _ in 0..50 {
            g.memory.data_mut(&mut g.store)[..4].copy_from_slice(&[0; 4]);
            let (trapped, fenced, _) = fenced_call(&fence, &mut g, Duration::from_secs(30));
            assert!(!trapped && !fenced);
        }
        // Disarmed, a deadline long past changes nothing.
        std::thread::sleep(3 * TICK);
        assert_eq!(&g.memory.data(&g.store)[..4], &1000u32.to_le_bytes());
    }

    #[test]
    fn a_host_import_reading_guest_memory_is_never_fenced_under_it() {
        // The loop asks the host to prefetch 1,024 offsets read from guest memory, then
        // counts: each import call reads 4 KiB of guest memory in host code, where a
        // fault would kill the process.
        let mut body = vec![I::I32Const(64), I::I32Const(1024), I::Call(0)];
        body.extend(count_in_memory());
        let engine = Engine::default();
        let fence = CallFence::new(Duration::from_millis(10), |_| {}).unwrap();
        let mut g = guest(&engine, &looping(&body), Some(fence.gate()));
        for round in 0..20 {
            let (trapped, fenced, _) = fenced_call(&fence, &mut g, Duration::from_millis(5));
            assert!(trapped && fenced, "round {round}");
        }
        assert!(g.store.data().prefetched_lines > 0);
    }

    #[test]
    fn a_call_that_never_touches_memory_is_reported_wedged() {
        // A register-only loop, bounded by fuel so that the test ends.
        let body = [I::LocalGet(0), I::I32Const(1), I::I32Add, I::LocalSet(0)];
        let mut cfg = Config::new();
        cfg.consume_fuel(true);
        let engine = Engine::new(&cfg).unwrap();
        let wedged = Arc::new(AtomicU32::new(0));
        let seen = wedged.clone();
        let timeout = Duration::from_millis(30);
        let fence = CallFence::new(timeout, move |w| {
            assert!(w.cpu_since_fence >= w.timeout);
            seen.fetch_add(1, Ordering::SeqCst);
        })
        .unwrap();
        let fence = Arc::new(fence);
        let mut g = guest(&engine, &looping(&body), None);
        // Fuel for a second or so of looping: the call ends by itself after the report.
        g.store.set_fuel(4_000_000_000).unwrap();
        let on_thread = fence.clone();
        let call = std::thread::spawn(move || fenced_call(&on_thread, &mut g, timeout));
        let t0 = Instant::now();
        while wedged.load(Ordering::SeqCst) == 0 && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(TICK);
        }
        let (trapped, fenced, took) = call.join().unwrap();
        assert_eq!(
            wedged.load(Ordering::SeqCst),
            1,
            "reported once; the call took {took:?}"
        );
        assert!(trapped && fenced, "out of fuel after its fence");
    }
}
