//! The WASM ABI: how the plugin host drives this engine inside a wasmtime sandbox.
//!
//! The sandbox keeps a bug in the analysis from taking down the agent it runs in, and
//! bounds its memory and CPU. The boundary is small, versioned and batched so crossing
//! it costs little: events travel as flat binary records ([`batch`]), everything else
//! (parameters, reports, counters) as JSON. The full contract, byte by byte, is in
//! `wasm-guest/ABI.md`.
//!
//! The codec and the dispatch ([`guest::Guest`]) are plain Rust, compiled and tested
//! natively; only the `extern "C"` shims are wasm32-only.

use serde::{Deserialize, Serialize};

use crate::params::Params;

pub mod batch;
pub mod guest;

#[cfg(target_arch = "wasm32")]
mod exports;

/// Version of the export and import lists and their semantics; the host refuses a guest with another.
/// Bump on any incompatible change to an export's signature or meaning.
/// 2: record kind 3 (on-CPU time) in event batches.
/// 3: record kind 4 (a switch off the CPU) in event batches.
/// 4: record kind 5 (a report of lost records) in event batches.
/// 5: the guest imports `faultline.fl_prefetch` (see `wasm-guest/ABI.md`).
/// 6: record kind 6 (a thread's counters over an interval) in event batches.
/// 7: the guest exports `fl_advance` (a silent target's clock), which the host requires.
/// 8: `fl_advance` takes a fourth argument, what the host saw of the silent target's
///    processes ([`crate::Stillness::code`]).
/// 9: an off-CPU record's `ret` 2 means blocked uninterruptibly (8 read it as preempted).
/// 10: record kind 7 (a network namespace's TCP segments sent and retransmitted).
/// 11: the guest exports `fl_forget` (an evicted target's state), which the host requires.
pub const ABI_VERSION: u32 = 12;

/// What every `fl_*` call that can fail returns.
///
/// On `Ok` the result buffer holds the call's JSON payload (empty for calls without one);
/// on any error it holds a UTF-8 message for the host's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Status {
    Ok = 0,
    /// `fl_init` has not succeeded yet.
    NotInitialized = -1,
    /// A pointer/length pair or a string argument is unusable.
    BadArgument = -2,
    /// The event batch is malformed (see [`batch::DecodeError`]).
    Decode = -3,
    /// Parameters are malformed JSON or fail validation.
    Params = -4,
    /// The result could not be serialized.
    Encode = -5,
    /// The guest could not allocate.
    OutOfMemory = -6,
}

impl Status {
    /// The status a code stands for; `None` for codes this ABI version does not define.
    pub fn from_code(code: i32) -> Option<Status> {
        [
            Status::Ok,
            Status::NotInitialized,
            Status::BadArgument,
            Status::Decode,
            Status::Params,
            Status::Encode,
            Status::OutOfMemory,
        ]
        .into_iter()
        .find(|s| *s as i32 == code)
    }

    /// A short lower-case name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NotInitialized => "not_initialized",
            Status::BadArgument => "bad_argument",
            Status::Decode => "decode",
            Status::Params => "params",
            Status::Encode => "encode",
            Status::OutOfMemory => "out_of_memory",
        }
    }
}

/// Argument of `fl_set_target_params`: one target's own parameters (e.g. calibrated α/β),
/// or `null` to drop them (the target runs on the engine's again).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetParams {
    pub target: String,
    /// Required, even as `null`: a host that forgot it must not clear a calibration.
    #[serde(deserialize_with = "present")]
    pub params: Option<Params>,
}

/// An `Option` the input must spell out (serde reads a missing `Option` field as `None`,
/// except through `deserialize_with`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Params>, D::Error> {
    Option::<Params>::deserialize(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_round_trip_and_unknown_codes_are_none() {
        for code in -6..=0 {
            let s = Status::from_code(code).unwrap();
            assert_eq!(s as i32, code);
        }
        assert_eq!(Status::from_code(1), None);
        assert_eq!(Status::from_code(-7), None);
    }
}
