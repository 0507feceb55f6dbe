//! The guest side of the ABI as plain Rust: one [`Guest`] owns the engine and the result
//! buffer, and each export is a thin wrapper over one method here.
//!
//! Keeping the logic out of the `extern "C"` shims lets it be unit-tested natively; the
//! shims only turn (pointer, length) pairs into slices.

use serde::Serialize;

use super::batch::decode_batch;
use super::{Status, TargetParams};
use crate::engine::Engine;
use crate::event::SyscallEvent;
use crate::params::Params;

/// Decode scratch above this many events is released after a batch, so one huge batch
/// does not pin its memory for the life of the guest.
const SCRATCH_KEEP_EVENTS: usize = 1 << 16;

/// Everything one guest instance holds between calls.
#[derive(Default)]
pub struct Guest {
    engine: Option<Engine>,
    /// Output of the last call: JSON on success, a UTF-8 error message on failure.
    result: Vec<u8>,
    /// Reused decode buffer: no allocation per batch in steady state.
    scratch: Vec<SyscallEvent>,
}

impl Guest {
    /// The bytes the host reads after a call (see [`Status`] for which kind).
    pub fn result(&self) -> &[u8] {
        &self.result
    }

    fn fail(&mut self, status: Status, msg: impl std::fmt::Display) -> i32 {
        self.result.clear();
        self.result.extend_from_slice(msg.to_string().as_bytes());
        status as i32
    }

    /// Records a `BadArgument` error (used by the export shims for unusable pointers).
    pub fn bad_argument(&mut self, what: &str) -> i32 {
        self.fail(Status::BadArgument, what)
    }

    fn reply<T: Serialize>(&mut self, value: &T) -> i32 {
        self.result.clear();
        match serde_json::to_writer(&mut self.result, value) {
            Ok(()) => Status::Ok as i32,
            Err(e) => self.fail(Status::Encode, format!("cannot serialize the result: {e}")),
        }
    }

    fn engine(&mut self) -> Result<&mut Engine, i32> {
        match self.engine {
            Some(ref mut e) => Ok(e),
            None => {
                self.result.clear();
                self.result
                    .extend_from_slice(b"engine not initialized: call fl_init first");
                Err(Status::NotInitialized as i32)
            }
        }
    }

    /// `fl_init`: (re)creates the engine from JSON [`Params`]; empty input means defaults.
    pub fn init(&mut self, params_json: &[u8]) -> i32 {
        let params = if params_json.is_empty() {
            Params::default()
        } else {
            match serde_json::from_slice::<Params>(params_json) {
                Ok(p) => p,
                Err(e) => return self.fail(Status::Params, format!("params JSON: {e}")),
            }
        };
        match Engine::new(params) {
            Ok(e) => {
                self.engine = Some(e);
                self.result.clear();
                Status::Ok as i32
            }
            Err(e) => self.fail(Status::Params, e),
        }
    }

    /// `fl_set_target_params`: JSON [`TargetParams`].
    pub fn set_target_params(&mut self, json: &[u8]) -> i32 {
        let tp = match serde_json::from_slice::<TargetParams>(json) {
            Ok(tp) => tp,
            Err(e) => return self.fail(Status::Params, format!("target params JSON: {e}")),
        };
        let engine = match self.engine() {
            Ok(e) => e,
            Err(code) => return code,
        };
        let set = match tp.params {
            Some(params) => engine.set_target_params(&tp.target, params),
            None => {
                engine.clear_target_params(&tp.target);
                Ok(())
            }
        };
        match set {
            Ok(()) => {
                self.result.clear();
                Status::Ok as i32
            }
            Err(e) => self.fail(Status::Params, e),
        }
    }

    /// `fl_ingest`: one binary batch (see [`super::batch`]).
    pub fn ingest(&mut self, batch: &[u8]) -> i32 {
        let mut scratch = std::mem::take(&mut self.scratch);
        let status = match decode_batch(batch, &mut scratch) {
            Ok(target) => match self.engine() {
                Ok(engine) => {
                    engine.ingest(target, &scratch);
                    self.result.clear();
                    Status::Ok as i32
                }
                Err(code) => code,
            },
            Err(e) => self.fail(Status::Decode, e),
        };
        scratch.clear();
        if scratch.capacity() > SCRATCH_KEEP_EVENTS {
            scratch.shrink_to(SCRATCH_KEEP_EVENTS);
        }
        self.scratch = scratch;
        status
    }

    fn target<'a>(&mut self, target: &'a [u8]) -> Result<&'a str, i32> {
        std::str::from_utf8(target)
            .map_err(|_| self.fail(Status::BadArgument, "target name is not UTF-8"))
    }

    /// `fl_trigger`: result is a JSON `Report` or `null`.
    pub fn trigger(&mut self, target: &[u8], at_ns: u64) -> i32 {
        let target = match self.target(target) {
            Ok(t) => t,
            Err(code) => return code,
        };
        let report = match self.engine() {
            Ok(engine) => engine.trigger(target, at_ns),
            Err(code) => return code,
        };
        self.reply(&report)
    }

    /// `fl_advance`: moves a silent target's clock; reports that became due wait for
    /// `fl_take_reports`.
    pub fn advance(&mut self, target: &[u8], now_ns: u64, still: crate::Stillness) -> i32 {
        let target = match self.target(target) {
            Ok(t) => t,
            Err(code) => return code,
        };
        match self.engine() {
            Ok(engine) => {
                engine.advance(target, now_ns, still);
                self.result.clear();
                Status::Ok as i32
            }
            Err(code) => code,
        }
    }

    /// `fl_forget`: drops a target's state and pending reports (see [`Engine::forget`]);
    /// a target the engine does not know is no error.
    pub fn forget(&mut self, target: &[u8]) -> i32 {
        let target = match self.target(target) {
            Ok(t) => t,
            Err(code) => return code,
        };
        match self.engine() {
            Ok(engine) => {
                engine.forget(target);
                self.result.clear();
                Status::Ok as i32
            }
            Err(code) => code,
        }
    }

    /// `fl_take_reports`: result is a JSON array of `Report`.
    pub fn take_reports(&mut self) -> i32 {
        let reports = match self.engine() {
            Ok(engine) => engine.take_reports(),
            Err(code) => return code,
        };
        self.reply(&reports)
    }

    /// `fl_finish`: result is a JSON array of `Report`.
    pub fn finish(&mut self) -> i32 {
        let reports = match self.engine() {
            Ok(engine) => engine.finish(),
            Err(code) => return code,
        };
        self.reply(&reports)
    }

    /// `fl_calibrate`: result is a JSON `Calibration` or `null`.
    pub fn calibrate(&mut self, target: &[u8], fault_start_ns: Option<u64>) -> i32 {
        let target = match self.target(target) {
            Ok(t) => t,
            Err(code) => return code,
        };
        let cal = match self.engine() {
            Ok(engine) => engine.calibrate(target, fault_start_ns),
            Err(code) => return code,
        };
        self.reply(&cal)
    }

    /// `fl_counters`: result is JSON `EngineCounters`.
    pub fn counters(&mut self) -> i32 {
        let c = match self.engine() {
            Ok(engine) => engine.counters(),
            Err(code) => return code,
        };
        self.reply(&c)
    }

    /// `fl_state_bytes`: the engine's state estimate plus this shim's own buffers.
    pub fn state_bytes(&self) -> u64 {
        let own =
            self.result.capacity() + self.scratch.capacity() * std::mem::size_of::<SyscallEvent>();
        let engine = self.engine.as_ref().map_or(0, Engine::state_bytes);
        (engine + own) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::batch::encode_batch;
    use crate::report::EngineCounters;
    use crate::synth::{generate, StreamSpec};

    #[test]
    fn calls_before_init_are_refused_with_a_message() {
        let mut g = Guest::default();
        assert_eq!(g.take_reports(), Status::NotInitialized as i32);
        assert!(std::str::from_utf8(g.result()).unwrap().contains("fl_init"));
        let mut buf = Vec::new();
        encode_batch("t", &[], &mut buf).unwrap();
        assert_eq!(g.ingest(&buf), Status::NotInitialized as i32);
    }

    #[test]
    fn bad_params_and_batches_return_errors() {
        let mut g = Guest::default();
        assert_eq!(g.init(b"{\"alpha_seconds\": -1}"), Status::Params as i32);
        assert!(std::str::from_utf8(g.result())
            .unwrap()
            .contains("alpha_seconds"));
        assert_eq!(g.init(b"not json"), Status::Params as i32);
        assert_eq!(g.init(b""), Status::Ok as i32);
        assert_eq!(g.ingest(b"garbage"), Status::Decode as i32);
        assert_eq!(
            g.set_target_params(b"{\"target\": \"a\"}"),
            Status::Params as i32
        );
        // Spelt out as null, they are dropped (none were set: no error either).
        assert_eq!(
            g.set_target_params(b"{\"target\": \"a\", \"params\": null}"),
            Status::Ok as i32
        );
        assert_eq!(g.trigger(&[0xff, 0xfe], 1), Status::BadArgument as i32);
    }

    #[test]
    fn guest_matches_direct_engine_calls() {
        let events: Vec<_> = generate(&StreamSpec {
            threads: 20,
            seconds: 2.0,
            ..StreamSpec::default()
        })
        .collect();
        let mut direct = Engine::new(Params::default()).unwrap();
        let mut g = Guest::default();
        assert_eq!(g.init(b"{}"), 0);
        let mut buf = Vec::new();
        for chunk in events.chunks(512) {
            direct.ingest("db", chunk);
            encode_batch("db", chunk, &mut buf).unwrap();
            assert_eq!(g.ingest(&buf), 0);
        }
        assert_eq!(g.counters(), 0);
        let c: EngineCounters = serde_json::from_slice(g.result()).unwrap();
        assert_eq!(c, direct.counters());
        assert_eq!(c.events, events.len() as u64);
        assert_eq!(g.finish(), 0);
        let got: serde_json::Value = serde_json::from_slice(g.result()).unwrap();
        let want = serde_json::to_value(direct.finish()).unwrap();
        assert_eq!(got, want);
    }
}
