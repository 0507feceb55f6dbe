//! # faultline-engine
//!
//! The analysis engine of faultline: it answers "is this slowdown the environment or our
//! own software?" from per-thread system-call streams, following PerfCompass
//! (execution units, k-moving-average outlier detection, fault onset time σ, impact
//! factor τ, onset dispersion Ω, the two-tier external/internal decision with filtering
//! mode, and the affected-syscall ranking).
//!
//! The crate is a pure library: no I/O, no threads, no clock reads — time comes from the
//! events — so the same code runs natively (linked into the plugin) and as a WASM module
//! inside the plugin's wasmtime sandbox (see [`abi`]).
//!
//! Data flow inside the engine:
//! `SyscallEvent` → [`pairing`] (enter/exit → completed calls) → [`engine::Engine`]
//! (per target: execution units, baselines, outlier detection) → [`report::Report`].

pub mod abi;
pub mod advice;
pub mod clock_screen;
pub mod cpu_time;
pub mod detector;
pub mod diagnosis;
pub mod engine;
pub mod event;
pub mod net_loss;
pub mod pairing;
pub mod params;
pub mod prefetch;
pub mod ranking;
pub mod report;
pub mod sketch;
pub mod stats;
pub mod stillness;
pub mod symptoms;
pub mod synth;
pub mod syscalls;
pub mod target;
pub mod thread;
pub mod thread_store;
pub mod tid_index;
pub mod vital_signs;

pub use engine::Engine;
pub use event::{EventKind, PerfCounters, SyscallEvent};
pub use params::{ParamError, Params};
pub use report::{Report, Subsystem, Verdict};
pub use stillness::Stillness;
pub use syscalls::SyscallId;
