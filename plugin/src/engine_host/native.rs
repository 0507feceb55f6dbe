//! The engine linked into the plugin (`[engine] kind = "native"`).

use faultline_engine::report::{Calibration, EngineCounters};
use faultline_engine::{Engine, Params, Report, Stillness, SyscallEvent};

use super::heap_huge_pages::HeapHugePages;
use super::{EngineHost, EngineKind, HostError, HugePageStats};

/// Direct calls into [`faultline_engine::Engine`]: no copy, no sandbox.
#[derive(Debug)]
pub struct NativeHost {
    engine: Engine,
    /// `None` when `[engine] huge_pages` is off.
    huge_pages: Option<HeapHugePages>,
}

impl NativeHost {
    /// An engine whose targets use `params` unless given their own; with `huge_pages`,
    /// the heap it allocates from is collapsed into huge pages as it grows (see
    /// `engine_host::heap_huge_pages`: the passes run inside `ingest`, on the caller's thread,
    /// whose arena holds what the engine allocated there).
    pub fn new(params: Params, huge_pages: bool) -> Result<Self, HostError> {
        Ok(Self {
            engine: Engine::new(params)?,
            huge_pages: huge_pages.then(HeapHugePages::default),
        })
    }

    /// What the huge-page handling of the engine's heap did (zero when off).
    pub fn huge_page_stats(&self) -> HugePageStats {
        self.huge_pages
            .as_ref()
            .map(HeapHugePages::stats)
            .unwrap_or_default()
    }
}

impl EngineHost for NativeHost {
    fn kind(&self) -> EngineKind {
        EngineKind::Native
    }

    fn set_target_params(&mut self, target: &str, params: Params) -> Result<(), HostError> {
        Ok(self.engine.set_target_params(target, params)?)
    }

    fn clear_target_params(&mut self, target: &str) -> Result<(), HostError> {
        self.engine.clear_target_params(target);
        Ok(())
    }

    fn ingest(&mut self, target: &str, events: &[SyscallEvent]) -> Result<(), HostError> {
        self.engine.ingest(target, events);
        if let Some(h) = self.huge_pages.as_mut() {
            h.after_ingest(events.len());
        }
        Ok(())
    }

    fn trigger(&mut self, target: &str, at_ns: u64) -> Result<Option<Report>, HostError> {
        Ok(self.engine.trigger(target, at_ns))
    }

    fn advance(&mut self, target: &str, now_ns: u64, still: Stillness) -> Result<(), HostError> {
        self.engine.advance(target, now_ns, still);
        Ok(())
    }

    fn forget(&mut self, target: &str) -> Result<(), HostError> {
        self.engine.forget(target);
        Ok(())
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
