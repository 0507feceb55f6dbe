//! The engine linked into the plugin (`[engine] kind = "native"`).

use faultline_engine::report::{Calibration, EngineCounters};
use faultline_engine::{Engine, Params, Report, SyscallEvent};

use super::{EngineHost, EngineKind, HostError};

/// Direct calls into [`faultline_engine::Engine`]: no copy, no sandbox.
#[derive(Debug)]
pub struct NativeHost {
    engine: Engine,
}

impl NativeHost {
    /// An engine whose targets use `params` unless given their own.
    pub fn new(params: Params) -> Result<Self, HostError> {
        Ok(Self {
            engine: Engine::new(params)?,
        })
    }
}

impl EngineHost for NativeHost {
    fn kind(&self) -> EngineKind {
        EngineKind::Native
    }

    fn set_target_params(&mut self, target: &str, params: Params) -> Result<(), HostError> {
        Ok(self.engine.set_target_params(target, params)?)
    }

    fn ingest(&mut self, target: &str, events: &[SyscallEvent]) -> Result<(), HostError> {
        self.engine.ingest(target, events);
        Ok(())
    }

    fn trigger(&mut self, target: &str, at_ns: u64) -> Result<Option<Report>, HostError> {
        Ok(self.engine.trigger(target, at_ns))
    }

    fn take_reports(&mut self) -> Result<Vec<Report>, HostError> {
        Ok(self.engine.take_reports())
    }

    fn finish(&mut self) -> Result<Vec<Report>, HostError> {
        Ok(self.engine.finish())
    }

    fn calibrate(
        &mut self,
        target: &str,
        fault_start_ns: Option<u64>,
    ) -> Result<Option<Calibration>, HostError> {
        Ok(self.engine.calibrate(target, fault_start_ns))
    }

    fn counters(&mut self) -> Result<EngineCounters, HostError> {
        Ok(self.engine.counters())
    }

    fn state_bytes(&mut self) -> Result<usize, HostError> {
        Ok(self.engine.state_bytes())
    }
}
