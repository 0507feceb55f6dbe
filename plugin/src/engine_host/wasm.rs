//! The engine as a WASM module in wasmtime (`[engine] kind = "wasm"`, the default).
//!
//! The module is built by `build.rs` and embedded in the binary; it is compiled once per
//! host. Each call runs under a memory cap (`StoreLimits`) and, when configured, a
//! wall-clock deadline (a memory fence, see [`super::call_fence`], or epoch interruption)
//! and a fuel budget. A trap of any kind is
//! logged, counted by reason, and answered by re-instantiating the guest with the same
//! default and per-target parameters; the failed call returns [`HostError::Trap`] so the
//! caller counts what it lost, and the next call is served by the fresh guest. A trap
//! costs every target's analysis state (baselines, windows), not only the one whose call
//! trapped. A re-instantiation that fails is counted and retried with a backoff
//! ([`super::restart_backoff`]); meanwhile calls fail at once with
//! [`HostError::Unavailable`] and the telemetry shows the guest down (`/healthz` 503).
//!
//! See `wasm-guest/ABI.md` for the exports this drives.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use faultline_engine::abi::batch::{encode_batch_prefix, max_encoded_len};
use faultline_engine::abi::{Status, TargetParams, ABI_VERSION};
use faultline_engine::report::{Calibration, EngineCounters};
use faultline_engine::{Params, Report, Stillness, SyscallEvent};
use serde::de::DeserializeOwned;
use wasmtime::{
    Config, Engine as WasmEngine, Instance, Linker, Memory, Module, Store, StoreLimitsBuilder,
    TypedFunc, WasmParams, WasmResults,
};

use super::bulk_memory_lowering::lower_bulk_memory;
use super::call_fence::{CallFence, WedgedCall};
use super::guest_imports::{self, GuestData};
use super::huge_pages::{HugePageStats, HugePages};
use super::restart_backoff::RestartBackoff;
use super::{EngineHost, EngineKind, HostConfig, HostError, TimeoutMechanism};
use crate::pipeline::telemetry::{Telemetry, TrapReason};

/// The engine compiled to `wasm32-unknown-unknown` by `build.rs`.
pub static GUEST_WASM: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/faultline_engine.wasm"));

/// Smallest argument buffer allocated in the guest; grown by doubling.
const MIN_ARG_BUFFER: u32 = 64 << 10;

/// Why one guest call failed, before it is turned into a [`HostError`].
enum CallFail {
    /// The guest trapped or wasmtime refused the call: the instance is no longer trusted.
    Wasm(wasmtime::Error),
    /// The guest answered with an error status.
    Status {
        status: &'static str,
        message: String,
    },
    /// The guest's JSON answer did not parse.
    Decode(String),
}

impl From<wasmtime::Error> for CallFail {
    fn from(e: wasmtime::Error) -> Self {
        CallFail::Wasm(e)
    }
}

/// The memory fence stopped a call past its deadline: a type of its own, so the trap is
/// classified as a timeout without reading its message.
#[derive(Debug, thiserror::Error)]
#[error("the call ran past call_timeout_ms and was stopped by the memory fence")]
struct FenceTimeout;

/// Why a call failed with `e`; `memory_refused`: the store refused to grow the guest's
/// memory during the call (with `trap_on_grow_failure`, that refusal is the trap).
fn trap_reason(e: &wasmtime::Error, memory_refused: bool) -> TrapReason {
    if memory_refused {
        return TrapReason::MemoryLimit;
    }
    if e.is::<FenceTimeout>() {
        return TrapReason::Timeout;
    }
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => TrapReason::Timeout,
        Some(wasmtime::Trap::OutOfFuel) => TrapReason::Fuel,
        _ => TrapReason::Other,
    }
}

/// The typed exports of one instance.
struct Exports {
    alloc: TypedFunc<u32, u32>,
    free: TypedFunc<(u32, u32), ()>,
    init: TypedFunc<(u32, u32), i32>,
    set_target_params: TypedFunc<(u32, u32), i32>,
    ingest: TypedFunc<(u32, u32), i32>,
    trigger: TypedFunc<(u32, u32, u64), i32>,
    advance: TypedFunc<(u32, u32, u64, u32), i32>,
    forget: TypedFunc<(u32, u32), i32>,
    take_reports: TypedFunc<(), i32>,
    finish: TypedFunc<(), i32>,
    calibrate: TypedFunc<(u32, u32, u32, u64), i32>,
    counters: TypedFunc<(), i32>,
    state_bytes: TypedFunc<(), u64>,
    result_ptr: TypedFunc<(), u32>,
    result_len: TypedFunc<(), u32>,
}

impl Exports {
    fn resolve(store: &mut Store<GuestData>, inst: &Instance) -> wasmtime::Result<Self> {
        Ok(Self {
            alloc: inst.get_typed_func(&mut *store, "fl_alloc")?,
            free: inst.get_typed_func(&mut *store, "fl_free")?,
            init: inst.get_typed_func(&mut *store, "fl_init")?,
            set_target_params: inst.get_typed_func(&mut *store, "fl_set_target_params")?,
            ingest: inst.get_typed_func(&mut *store, "fl_ingest")?,
            trigger: inst.get_typed_func(&mut *store, "fl_trigger")?,
            advance: inst.get_typed_func(&mut *store, "fl_advance")?,
            forget: inst.get_typed_func(&mut *store, "fl_forget")?,
            take_reports: inst.get_typed_func(&mut *store, "fl_take_reports")?,
            finish: inst.get_typed_func(&mut *store, "fl_finish")?,
            calibrate: inst.get_typed_func(&mut *store, "fl_calibrate")?,
            counters: inst.get_typed_func(&mut *store, "fl_counters")?,
            state_bytes: inst.get_typed_func(&mut *store, "fl_state_bytes")?,
            result_ptr: inst.get_typed_func(&mut *store, "fl_result_ptr")?,
            result_len: inst.get_typed_func(&mut *store, "fl_result_len")?,
        })
    }
}

/// Limits applied before every call.
#[derive(Clone, Copy)]
struct CallBudget {
    fuel: Option<u64>,
    epoch_ticks: Option<u64>,
}

/// A guest's memory fence and the deadline of the operation in progress.
struct Fenced {
    fence: Arc<CallFence>,
    deadline: Instant,
    /// What the guest's memory may grow to (`memory_limit_bytes`).
    limit: usize,
}

/// Calls one guest export: under the fence, when there is one, so that a call past its
/// deadline fails as a timeout even if it returned.
fn invoke<P: WasmParams, R: WasmResults>(
    store: &mut Store<GuestData>,
    memory: Memory,
    fenced: Option<&Fenced>,
    f: &TypedFunc<P, R>,
    args: P,
) -> Result<R, CallFail> {
    let Some(Fenced {
        fence,
        deadline,
        limit,
    }) = fenced
    else {
        return f.call(store, args).map_err(CallFail::Wasm);
    };
    let call = fence.arm(*deadline, memory.data_ptr(&*store), *limit);
    let outcome = f.call(&mut *store, args);
    if call.finish(memory.data_size(&*store)) {
        return Err(CallFail::Wasm(wasmtime::Error::new(FenceTimeout)));
    }
    outcome.map_err(CallFail::Wasm)
}

/// `invoke` of export `$f` of guest `$g`.
macro_rules! invoke {
    ($g:expr, $f:ident, $args:expr) => {
        invoke(
            &mut $g.store,
            $g.memory,
            $g.fenced.as_ref(),
            &$g.fx.$f,
            $args,
        )
    };
}

/// One live instance of the guest.
struct Guest {
    store: Store<GuestData>,
    memory: Memory,
    fx: Exports,
    /// Reused argument buffer in guest memory (pointer, capacity).
    arg: Option<(u32, u32)>,
    budget: CallBudget,
    /// `Some` when the call timeout is a memory fence.
    fenced: Option<Fenced>,
    /// `None` when `[engine] huge_pages` is off.
    huge_pages: Option<HugePages>,
}

impl Guest {
    fn instantiate(
        compiled: &Compiled,
        memory_limit: usize,
        budget: CallBudget,
        fence: Option<Arc<CallFence>>,
        huge_pages: bool,
    ) -> wasmtime::Result<Self> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(memory_limit)
            .memories(1)
            .instances(1)
            .trap_on_grow_failure(true)
            .build();
        let mut data = GuestData::new(limits);
        data.fence = fence.as_ref().map(|f| f.gate());
        let mut store = Store::new(&compiled.engine, data);
        store.limiter(|d| &mut d.limits);
        // Instantiation runs the guest's start code: under the same budget as a call.
        if let Some(f) = budget.fuel {
            store.set_fuel(f)?;
        }
        if let Some(t) = budget.epoch_ticks {
            store.set_epoch_deadline(t);
        }
        let inst = compiled.linker.instantiate(&mut store, &compiled.module)?;
        let memory = inst
            .get_memory(&mut store, "memory")
            .ok_or_else(|| wasmtime::format_err!("the guest exports no `memory`"))?;
        store.data_mut().memory = Some(memory);
        let fx = Exports::resolve(&mut store, &inst)?;
        let fenced = fence.map(|fence| Fenced {
            deadline: fence.deadline_from_now(),
            fence,
            limit: memory_limit,
        });
        let version: TypedFunc<(), u32> = inst.get_typed_func(&mut store, "fl_abi_version")?;
        let v = match invoke(&mut store, memory, fenced.as_ref(), &version, ()) {
            Ok(v) => v,
            Err(CallFail::Wasm(e)) => return Err(e),
            Err(_) => wasmtime::bail!("the guest's ABI version call failed"),
        };
        if v != ABI_VERSION {
            wasmtime::bail!("the guest speaks ABI version {v}, this host {ABI_VERSION}");
        }
        Ok(Self {
            store,
            memory,
            fx,
            arg: None,
            budget,
            fenced,
            huge_pages: huge_pages.then(HugePages::default),
        })
    }

    /// Lets the memory a call grew be backed by huge pages (see [`super::huge_pages`]).
    fn after_call(&mut self) {
        if let Some(h) = self.huge_pages.as_mut() {
            let base = self.memory.data_ptr(&self.store);
            h.after_growth(base, self.memory.data_size(&self.store));
        }
    }

    /// Bytes of the guest's linear memory (what the memory limit caps).
    fn memory_bytes(&self) -> u64 {
        self.memory.data_size(&self.store) as u64
    }

    /// Resets the per-call CPU budget (fuel) and deadline (fence or epoch), and forgets
    /// a memory growth an earlier call was refused.
    fn arm(&mut self) -> wasmtime::Result<()> {
        self.store.data_mut().limits.clear();
        if let Some(f) = self.budget.fuel {
            self.store.set_fuel(f)?;
        }
        if let Some(t) = self.budget.epoch_ticks {
            self.store.set_epoch_deadline(t);
        }
        if let Some(f) = self.fenced.as_mut() {
            f.deadline = f.fence.deadline_from_now();
        }
        Ok(())
    }

    /// Copies `bytes` into the guest's argument buffer: the one host→guest copy of a call.
    fn write_arg(&mut self, bytes: &[u8]) -> Result<(u32, u32), CallFail> {
        let (ptr, len) = self.arg_buffer(bytes.len())?;
        self.memory
            .write(&mut self.store, ptr as usize, bytes)
            .map_err(|e| CallFail::Wasm(e.into()))?;
        Ok((ptr, len))
    }

    /// The guest's argument buffer as `bytes` bytes of guest memory to fill in place:
    /// an event batch is encoded straight into it rather than into a host buffer first
    /// (that copy was a tenth of the host-side time per event).
    fn arg_slice(&mut self, bytes: usize) -> Result<(u32, &mut [u8]), CallFail> {
        let (ptr, _) = self.arg_buffer(bytes)?;
        let start = ptr as usize;
        let slice = self
            .memory
            .data_mut(&mut self.store)
            .get_mut(start..start.saturating_add(bytes))
            .ok_or_else(|| {
                CallFail::Wasm(wasmtime::format_err!(
                    "guest argument buffer {start}+{bytes} lies outside its memory"
                ))
            })?;
        Ok((ptr, slice))
    }

    /// The guest's argument buffer, grown (by the guest's allocator) to hold `bytes`:
    /// its pointer and `bytes` as the call's length.
    fn arg_buffer(&mut self, bytes: usize) -> Result<(u32, u32), CallFail> {
        let len = u32::try_from(bytes).map_err(|_| CallFail::Status {
            status: "bad_argument",
            message: format!("argument of {bytes} bytes exceeds 4 GiB"),
        })?;
        let ptr = match self.arg {
            Some((ptr, cap)) if cap >= len => ptr,
            old => {
                if let Some((ptr, cap)) = old {
                    self.arg = None;
                    invoke!(self, free, (ptr, cap))?;
                }
                let cap = len
                    .max(MIN_ARG_BUFFER)
                    .checked_next_power_of_two()
                    .unwrap_or(len);
                let ptr = invoke!(self, alloc, cap)?;
                if ptr == 0 {
                    return Err(CallFail::Status {
                        status: Status::OutOfMemory.as_str(),
                        message: format!("guest could not allocate {cap} bytes"),
                    });
                }
                self.arg = Some((ptr, cap));
                ptr
            }
        };
        Ok((ptr, len))
    }

    /// The last call's result bytes, borrowed from guest memory.
    fn result(&mut self) -> Result<&[u8], CallFail> {
        let ptr = invoke!(self, result_ptr, ())? as usize;
        let len = invoke!(self, result_len, ())? as usize;
        self.memory
            .data(&self.store)
            .get(ptr..ptr.saturating_add(len))
            .ok_or_else(|| {
                CallFail::Wasm(wasmtime::format_err!(
                    "guest result {ptr}+{len} lies outside its memory"
                ))
            })
    }

    /// Turns a status code into `Ok` or the guest's error message.
    fn check(&mut self, code: i32) -> Result<(), CallFail> {
        if code == Status::Ok as i32 {
            return Ok(());
        }
        let status = Status::from_code(code).map_or("unknown", Status::as_str);
        let message = String::from_utf8_lossy(self.result()?).into_owned();
        Err(CallFail::Status { status, message })
    }

    fn json<T: DeserializeOwned>(&mut self) -> Result<T, CallFail> {
        serde_json::from_slice(self.result()?).map_err(|e| CallFail::Decode(e.to_string()))
    }

    fn init(&mut self, params_json: &[u8]) -> Result<(), CallFail> {
        let (p, l) = self.write_arg(params_json)?;
        let code = invoke!(self, init, (p, l))?;
        self.check(code)
    }

    fn set_target_params(&mut self, json: &[u8]) -> Result<(), CallFail> {
        let (p, l) = self.write_arg(json)?;
        let code = invoke!(self, set_target_params, (p, l))?;
        self.check(code)
    }
}

/// Exit status of the process when a guest call can be neither finished nor stopped.
pub const EXIT_WEDGED: i32 = 70;

/// The fence's last resort: a call past its deadline that kept running without touching
/// its memory would hold the engine thread for good, so the process ends for its
/// supervisor to restart it, with the reason in the log.
fn exit_wedged(w: WedgedCall) {
    tracing::error!(
        timeout_ms = w.timeout.as_millis() as u64,
        cpu_ms_since_fence = w.cpu_since_fence.as_millis() as u64,
        exit_status = EXIT_WEDGED,
        "an engine guest call ran past call_timeout_ms and kept running without touching its memory, so the memory fence cannot stop it; exiting"
    );
    // The capture tools run in their own process groups: without this a quiet target's
    // perf or babeltrace2 outlives faultline (as `commands::run` does before its forced
    // exit). Blocking locks are safe here: this runs on the fence's watchdog thread, not
    // in a signal handler, and the wedged thread is inside guest code, which reaches no
    // host code but `fl_prefetch`, so it holds neither the tool list's lock nor a
    // child's; the other holders keep them only around a `kill` or a reap.
    crate::sources::child::terminate_all();
    // Not exit(): the guest is still running on the engine thread, and atexit handlers
    // and destructors have no business running beside it.
    // SAFETY: _exit ends the process at once; nothing after it runs.
    unsafe { libc::_exit(EXIT_WEDGED) }
}

/// Set (to anything) to write a perf map of the guest's compiled code, for profiling it.
pub const PERFMAP_ENV: &str = "FAULTLINE_WASM_PERFMAP";

/// Resolution of the per-call deadline: the epoch advances this often.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// A wasmtime engine with the guest compiled for it, shared by every host of the process
/// that uses the same metering: compiling the guest takes seconds, instantiating it
/// microseconds.
struct Compiled {
    engine: WasmEngine,
    module: Module,
    /// Defines the guest's imports.
    linker: Linker<GuestData>,
}

/// Which metering a compiled guest has: fuel, and the deadline's mechanism if any.
type Metering = (bool, Option<TimeoutMechanism>);

/// Compiled guests by metering (at most six entries).
static COMPILED: Mutex<Vec<(Metering, Arc<Compiled>)>> = Mutex::new(Vec::new());

fn compiled(fuel: bool, deadline: Option<TimeoutMechanism>) -> Result<Arc<Compiled>, HostError> {
    let mut cache = COMPILED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, c)) = cache.iter().find(|(k, _)| *k == (fuel, deadline)) {
        return Ok(c.clone());
    }
    let epoch = deadline == Some(TimeoutMechanism::Epoch);
    let fence = deadline == Some(TimeoutMechanism::Fence);
    let mut wcfg = Config::new();
    wcfg.consume_fuel(fuel);
    wcfg.epoch_interruption(epoch);
    if fence {
        // The fence turns the guest's faults into traps: they must be signals, and the
        // memory it protects must stay where it was armed for the whole call.
        // The whole reservation (4 GiB, the most `memory_limit_bytes` allows) is what the
        // fence may protect up to the limit.
        wcfg.signals_based_traps(true);
        wcfg.memory_may_move(false);
        wcfg.memory_reservation(4 << 30);
    }
    if std::env::var_os(PERFMAP_ENV).is_some() {
        // Lets `perf report` name the guest's JIT-compiled functions (/tmp/perf-<pid>.map).
        wcfg.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    let engine = WasmEngine::new(&wcfg)
        .map_err(|e| HostError::Unavailable(format!("wasmtime engine: {e}")))?;
    let lowered;
    let wasm = if fence {
        lowered = lower_bulk_memory(GUEST_WASM)
            .map_err(|e| HostError::Unavailable(format!("cannot prepare the guest: {e}")))?
            .0;
        lowered.as_slice()
    } else {
        GUEST_WASM
    };
    let module = Module::new(&engine, wasm)
        .map_err(|e| HostError::Unavailable(format!("cannot compile the guest: {e}")))?;
    if epoch {
        // One timer per engine for the life of the process; it only bumps a counter.
        let ticking = engine.clone();
        std::thread::Builder::new()
            .name("faultline-epoch".into())
            .spawn(move || loop {
                std::thread::sleep(EPOCH_TICK);
                ticking.increment_epoch();
            })
            .map_err(|e| HostError::Unavailable(format!("cannot start the epoch timer: {e}")))?;
    }
    let linker = guest_imports::linker(&engine)
        .map_err(|e| HostError::Unavailable(format!("cannot define the guest's imports: {e}")))?;
    let c = Arc::new(Compiled {
        engine,
        module,
        linker,
    });
    cache.push(((fuel, deadline), c.clone()));
    Ok(c)
}

/// The engine in a wasmtime sandbox, restarted on traps.
pub struct WasmHost {
    compiled: Arc<Compiled>,
    memory_limit: usize,
    budget: CallBudget,
    /// Shared by the guest and its restarts: one watchdog thread per host.
    fence: Option<Arc<CallFence>>,
    huge_pages: bool,
    /// Replayed into every new instance.
    params: Params,
    params_json: Vec<u8>,
    target_params: BTreeMap<String, Params>,
    /// `None` after a trap whose restart failed; a later call retries, once `backoff`
    /// allows.
    guest: Option<Guest>,
    backoff: RestartBackoff,
    telemetry: Arc<Telemetry>,
    /// This host's hold on the guest gauges ([`Telemetry::set_guest_hosted`]).
    gauges: u64,
}

impl Drop for WasmHost {
    fn drop(&mut self) {
        self.telemetry.clear_guest(self.gauges);
    }
}

impl std::fmt::Debug for WasmHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmHost")
            .field("memory_limit", &self.memory_limit)
            .field("running", &self.guest.is_some())
            .finish_non_exhaustive()
    }
}

impl WasmHost {
    /// Compiles the embedded guest and starts one instance with default parameters `params`.
    pub fn new(
        config: &HostConfig,
        params: Params,
        telemetry: Arc<Telemetry>,
    ) -> Result<Self, HostError> {
        config.validate()?;
        params.validate()?;
        let deadline = config
            .call_timeout_ms
            .map(|ms| (Duration::from_millis(ms), config.timeout_mechanism));
        let compiled = compiled(config.fuel_per_call.is_some(), deadline.map(|(_, m)| m))?;
        let epoch_ticks = match deadline {
            Some((t, TimeoutMechanism::Epoch)) => Some(
                (t.as_millis() as u64)
                    .div_ceil(EPOCH_TICK.as_millis() as u64)
                    .max(1),
            ),
            _ => None,
        };
        let fence = match deadline {
            Some((t, TimeoutMechanism::Fence)) => Some(Arc::new(
                CallFence::new(t, exit_wedged)
                    .map_err(|e| HostError::Unavailable(e.to_string()))?,
            )),
            _ => None,
        };
        let params_json = serde_json::to_vec(&params).map_err(|e| HostError::Decode {
            call: "init",
            message: e.to_string(),
        })?;
        let mut host = Self {
            compiled,
            // Validated to be at most 4 GiB.
            memory_limit: usize::try_from(config.memory_limit_bytes).unwrap_or(usize::MAX),
            budget: CallBudget {
                fuel: config.fuel_per_call,
                epoch_ticks,
            },
            fence,
            huge_pages: config.huge_pages,
            params,
            params_json,
            target_params: BTreeMap::new(),
            guest: None,
            backoff: RestartBackoff::default(),
            telemetry,
            gauges: 0,
        };
        let guest = host.start_guest()?;
        host.gauges = host.telemetry.set_guest_hosted(config.memory_limit_bytes);
        host.telemetry.set_guest_state(true, guest.memory_bytes());
        host.guest = Some(guest);
        Ok(host)
    }

    /// A fresh instance with the default and per-target parameters applied.
    fn start_guest(&self) -> Result<Guest, HostError> {
        let mut g = Guest::instantiate(
            &self.compiled,
            self.memory_limit,
            self.budget,
            self.fence.clone(),
            self.huge_pages,
        )
        .map_err(|e| HostError::Unavailable(format!("cannot instantiate the guest: {e}")))?;
        self.configure(&mut g)?;
        Ok(g)
    }

    /// (Re)creates `g`'s engine with the default and per-target parameters.
    fn configure(&self, g: &mut Guest) -> Result<(), HostError> {
        let unavailable = |what: &str, e: String| HostError::Unavailable(format!("{what}: {e}"));
        let describe = |f: CallFail| match f {
            CallFail::Wasm(e) => e.to_string(),
            CallFail::Status { status, message } => format!("{status}: {message}"),
            CallFail::Decode(m) => m,
        };
        g.arm()
            .map_err(|e| unavailable("cannot arm the guest", e.to_string()))?;
        g.init(&self.params_json)
            .map_err(|f| unavailable("guest init failed", describe(f)))?;
        for (target, params) in &self.target_params {
            let json = serde_json::to_vec(&TargetParams {
                target: target.clone(),
                params: Some(params.clone()),
            })
            .map_err(|e| unavailable("cannot encode target params", e.to_string()))?;
            g.arm()
                .map_err(|e| unavailable("cannot arm the guest", e.to_string()))?;
            g.set_target_params(&json)
                .map_err(|f| unavailable("replaying target params failed", describe(f)))?;
        }
        Ok(())
    }

    /// Drops the analysis state for a fresh engine in the running guest, with the same
    /// parameters. Unlike a restart this reuses the guest's memory, as a native engine
    /// reuses the process heap: a fresh instance first faults in every page its state
    /// touches, which on a short stream with thousands of threads is a third of the time
    /// (the engine bench compares the two hostings this way).
    pub fn reset_engine(&mut self) -> Result<(), HostError> {
        let Some(mut g) = self.guest.take() else {
            // No live guest: the next call starts a fresh one anyway.
            return Ok(());
        };
        // On failure the guest is dropped (it may have trapped): the next call restarts it.
        if let Err(e) = self.configure(&mut g) {
            self.telemetry.set_guest_state(false, 0);
            return Err(e);
        }
        self.telemetry.set_guest_state(true, g.memory_bytes());
        self.guest = Some(g);
        Ok(())
    }

    /// Starts a fresh guest, unless a failed restart is still backing off; a failure is
    /// counted and logged, and makes the next attempt wait longer.
    fn restart(&mut self) -> Result<(), HostError> {
        let now = Instant::now();
        if let Err(left) = self.backoff.ready(now) {
            return Err(HostError::Unavailable(format!(
                "no guest instance: {} restart(s) failed, the next attempt in {:.1} s",
                self.backoff.failures(),
                left.as_secs_f64()
            )));
        }
        match self.start_guest() {
            Ok(g) => {
                self.telemetry.set_guest_state(true, g.memory_bytes());
                self.guest = Some(g);
                self.backoff.succeeded();
                self.telemetry.add_guest_restart();
                Ok(())
            }
            Err(e) => {
                let wait = self.backoff.failed(now);
                self.telemetry.add_guest_restart_failure();
                tracing::error!(
                    error = %e,
                    failures = self.backoff.failures(),
                    retry_in_seconds = wait.as_secs(),
                    "engine guest restart failed: nothing is analysed until one succeeds \
                     (batches dropped meanwhile: faultline_events_dropped_total{{reason=\"engine_unavailable\"}})"
                );
                Err(e)
            }
        }
    }

    /// Runs one guest operation under the call budget; a trap restarts the guest.
    fn call<R>(
        &mut self,
        call: &'static str,
        op: impl FnOnce(&mut Guest) -> Result<R, CallFail>,
    ) -> Result<R, HostError> {
        if self.guest.is_none() {
            self.restart()?;
        }
        let Some(guest) = self.guest.as_mut() else {
            return Err(HostError::Unavailable("no guest instance".into()));
        };
        let outcome = match guest.arm() {
            Ok(()) => op(guest),
            Err(e) => Err(CallFail::Wasm(e)),
        };
        if !matches!(outcome, Err(CallFail::Wasm(_))) {
            self.telemetry.set_guest_state(true, guest.memory_bytes());
        }
        match outcome {
            Ok(r) => {
                guest.after_call();
                Ok(r)
            }
            Err(CallFail::Status { status, message }) => Err(HostError::Guest {
                call,
                status,
                message,
            }),
            Err(CallFail::Decode(message)) => Err(HostError::Decode { call, message }),
            Err(CallFail::Wasm(e)) => {
                let reason = trap_reason(&e, guest.store.data().limits.memory_refused());
                let message = format!("{e:#}");
                tracing::error!(
                    call,
                    reason = reason.as_str(),
                    memory_bytes = guest.memory_bytes(),
                    error = %message,
                    "engine guest trapped; restarting it (every target's analysis state is lost)"
                );
                self.telemetry.add_guest_trap(reason);
                self.guest = None;
                self.telemetry.set_guest_state(false, 0);
                // A failed restart is counted and logged there; this call reports the trap.
                let _ = self.restart();
                Err(HostError::Trap { call, message })
            }
        }
    }

    /// What the huge-page handling of the live guest's memory did (zero when off).
    pub fn huge_page_stats(&self) -> HugePageStats {
        self.guest
            .as_ref()
            .and_then(|g| g.huge_pages.as_ref())
            .map(HugePages::stats)
            .unwrap_or_default()
    }

    /// Bytes of the guest's linear memory (what the memory limit caps).
    pub fn guest_memory_bytes(&self) -> usize {
        self.guest
            .as_ref()
            .map_or(0, |g| g.memory.data_size(&g.store))
    }

    /// Cache lines the current guest has had the host prefetch (`fl_prefetch`): zero
    /// unless a target has thousands of threads whose events interleave.
    pub fn prefetched_lines(&self) -> u64 {
        self.guest
            .as_ref()
            .map_or(0, |g| g.store.data().prefetched_lines)
    }
}

impl EngineHost for WasmHost {
    fn kind(&self) -> EngineKind {
        EngineKind::Wasm
    }

    fn set_target_params(&mut self, target: &str, params: Params) -> Result<(), HostError> {
        params.validate()?;
        if !self.target_params.contains_key(target)
            && self.target_params.len() >= self.params.max_targets
        {
            return Err(HostError::Guest {
                call: "set_target_params",
                status: Status::BadArgument.as_str(),
                message: format!(
                    "per-target parameters are capped at max_targets = {}",
                    self.params.max_targets
                ),
            });
        }
        let json = serde_json::to_vec(&TargetParams {
            target: target.to_owned(),
            params: Some(params.clone()),
        })
        .map_err(|e| HostError::Encode(e.to_string()))?;
        self.call("set_target_params", |g| g.set_target_params(&json))?;
        // Remembered only once accepted, so a restart replays what the guest had.
        self.target_params.insert(target.to_owned(), params);
        Ok(())
    }

    fn clear_target_params(&mut self, target: &str) -> Result<(), HostError> {
        let json = serde_json::to_vec(&TargetParams {
            target: target.to_owned(),
            params: None,
        })
        .map_err(|e| HostError::Encode(e.to_string()))?;
        // Forgotten first: a restart must not replay them, whether or not the call ends.
        self.target_params.remove(target);
        self.call("set_target_params", |g| g.set_target_params(&json))
    }

    fn ingest(&mut self, target: &str, events: &[SyscallEvent]) -> Result<(), HostError> {
        // Room for the largest encoding, so the batch is encoded in one pass.
        let room = max_encoded_len(target, events).map_err(|e| HostError::Encode(e.to_string()))?;
        self.call("ingest", |g| {
            let (p, buf) = g.arg_slice(room)?;
            let bad = |message: String| CallFail::Status {
                status: "bad_argument",
                message,
            };
            let len = encode_batch_prefix(target, events, buf).map_err(|e| bad(e.to_string()))?;
            // At most `room`, which `arg_slice` checked fits a u32.
            let len = u32::try_from(len).map_err(|e| bad(e.to_string()))?;
            let code = invoke!(g, ingest, (p, len))?;
            g.check(code)
        })
    }

    fn trigger(&mut self, target: &str, at_ns: u64) -> Result<Option<Report>, HostError> {
        self.call("trigger", |g| {
            let (p, l) = g.write_arg(target.as_bytes())?;
            let code = invoke!(g, trigger, (p, l, at_ns))?;
            g.check(code)?;
            g.json()
        })
    }

    fn advance(&mut self, target: &str, now_ns: u64, still: Stillness) -> Result<(), HostError> {
        self.call("advance", |g| {
            let (p, l) = g.write_arg(target.as_bytes())?;
            let code = invoke!(g, advance, (p, l, now_ns, still.code()))?;
            g.check(code)
        })
    }

    fn forget(&mut self, target: &str) -> Result<(), HostError> {
        self.call("forget", |g| {
            let (p, l) = g.write_arg(target.as_bytes())?;
            let code = invoke!(g, forget, (p, l))?;
            g.check(code)
        })
    }

    fn take_reports(&mut self) -> Result<Vec<Report>, HostError> {
        self.call("take_reports", |g| {
            let code = invoke!(g, take_reports, ())?;
            g.check(code)?;
            g.json()
        })
    }

    fn finish(&mut self) -> Result<Vec<Report>, HostError> {
        self.call("finish", |g| {
            let code = invoke!(g, finish, ())?;
            g.check(code)?;
            g.json()
        })
    }

    fn calibrate(
        &mut self,
        target: &str,
        fault_start_ns: Option<u64>,
    ) -> Result<Option<Calibration>, HostError> {
        self.call("calibrate", |g| {
            let (p, l) = g.write_arg(target.as_bytes())?;
            let has = u32::from(fault_start_ns.is_some());
            let code = invoke!(g, calibrate, (p, l, has, fault_start_ns.unwrap_or(0)))?;
            g.check(code)?;
            g.json()
        })
    }

    fn counters(&mut self) -> Result<EngineCounters, HostError> {
        self.call("counters", |g| {
            let code = invoke!(g, counters, ())?;
            g.check(code)?;
            g.json()
        })
    }

    fn state_bytes(&mut self) -> Result<usize, HostError> {
        self.call("state_bytes", |g| {
            let n = invoke!(g, state_bytes, ())?;
            Ok(usize::try_from(n).unwrap_or(usize::MAX))
        })
    }
}

#[cfg(test)]
mod tests {
    use faultline_engine::synth::{generate, StreamSpec};

    use super::super::restart_backoff::FIRST_DELAY;
    use super::*;

    /// A guest whose restart fails stays down, visibly: the failure is counted, calls are
    /// refused at once until the backoff allows another attempt, a failed attempt makes the
    /// next wait twice as long (1 s, then 2 s), and the attempt that succeeds brings it back.
    #[test]
    fn failed_restarts_back_off_longer_each_time_and_a_later_one_recovers() {
        let telemetry = Arc::new(Telemetry::default());
        let config = HostConfig {
            memory_limit_bytes: 16 << 20,
            ..HostConfig::default()
        };
        let mut host = WasmHost::new(&config, Params::default(), telemetry.clone()).unwrap();
        let small: Vec<SyscallEvent> = generate(&StreamSpec {
            threads: 8,
            seconds: 1.0,
            ..StreamSpec::default()
        })
        .collect();
        host.ingest("db", &small).unwrap();
        let restarts = |t: &Telemetry| (t.guest_restarts(), t.guest_restart_failures());
        // The backoff's wait after a restart attempt made between `before` and `after`
        // is `wait`: the next attempt is allowed then, and not a moment before.
        let waits = |host: &WasmHost, before: Instant, after: Instant, wait: Duration| {
            assert!(
                host.backoff
                    .ready(before + wait - Duration::from_millis(1))
                    .is_err(),
                "an attempt allowed before {wait:?}"
            );
            assert_eq!(host.backoff.ready(after + wait), Ok(()), "{wait:?}");
        };

        // Parameters the guest refuses make every restart fail.
        let good = std::mem::replace(&mut host.params_json, b"{".to_vec());
        let huge: Vec<SyscallEvent> = small.iter().copied().cycle().take(500_000).collect();
        let before = Instant::now();
        let err = host.ingest("db", &huge).unwrap_err();
        let after = Instant::now();
        assert!(matches!(err, HostError::Trap { .. }), "{err}");
        assert_eq!(telemetry.guest_traps_by(TrapReason::MemoryLimit), 1);
        assert_eq!(restarts(&telemetry), (0, 1));
        assert!(telemetry.guest_unavailable());
        waits(&host, before, after, FIRST_DELAY);

        // Refused without an attempt while the backoff runs.
        let err = host.ingest("db", &small).unwrap_err();
        assert!(
            matches!(&err, HostError::Unavailable(m) if m.contains("1 restart(s) failed, the next attempt in")),
            "{err}"
        );
        assert_eq!(
            crate::pipeline::telemetry::DropReason::from(&err).as_str(),
            "engine_unavailable"
        );
        assert_eq!(restarts(&telemetry), (0, 1), "no attempt was made");

        // Once it allows one, the next call makes an attempt, which fails again: the wait
        // doubles.
        std::thread::sleep(FIRST_DELAY);
        let before = Instant::now();
        let err = host.ingest("db", &small).unwrap_err();
        let after = Instant::now();
        assert!(
            matches!(&err, HostError::Unavailable(m) if m.contains("guest init failed")),
            "{err}"
        );
        assert_eq!(restarts(&telemetry), (0, 2));
        assert!(telemetry.guest_unavailable());
        waits(&host, before, after, 2 * FIRST_DELAY);
        let err = host.ingest("db", &small).unwrap_err();
        assert!(
            matches!(&err, HostError::Unavailable(m) if m.contains("2 restart(s) failed, the next attempt in")),
            "{err}"
        );
        assert_eq!(restarts(&telemetry), (0, 2), "no attempt was made");

        // The attempt after the second wait succeeds.
        host.params_json = good;
        if let Err(left) = host.backoff.ready(Instant::now()) {
            std::thread::sleep(left);
        }
        host.ingest("db", &small).unwrap();
        assert_eq!(restarts(&telemetry), (1, 2));
        assert!(!telemetry.guest_unavailable());
        assert_eq!(
            host.backoff.failures(),
            0,
            "the next failure waits 1 s again"
        );
        assert_eq!(host.counters().unwrap().events, small.len() as u64);
    }

    #[test]
    fn traps_are_told_apart_by_their_cause() {
        let fence = wasmtime::Error::new(FenceTimeout);
        assert_eq!(trap_reason(&fence, false), TrapReason::Timeout);
        assert_eq!(
            trap_reason(&wasmtime::Error::new(wasmtime::Trap::Interrupt), false),
            TrapReason::Timeout
        );
        assert_eq!(
            trap_reason(&wasmtime::Error::new(wasmtime::Trap::OutOfFuel), false),
            TrapReason::Fuel
        );
        let bug = wasmtime::Error::new(wasmtime::Trap::UnreachableCodeReached);
        assert_eq!(trap_reason(&bug, false), TrapReason::Other);
        // A refused growth is the cause, whatever the error it surfaced as.
        assert_eq!(trap_reason(&bug, true), TrapReason::MemoryLimit);
    }
}
