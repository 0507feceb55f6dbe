//! Test doubles for the pipeline's tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use faultline_engine::{Report, SyscallEvent};

use crate::engine_host::{EngineHost, HostError};

/// The [`EngineHost`] methods a test double answers with nothing (a native engine
/// without targets), so each double writes only the calls it is about.
macro_rules! idle_engine_methods {
    () => {
        fn kind(&self) -> $crate::engine_host::EngineKind {
            $crate::engine_host::EngineKind::Native
        }
        fn set_target_params(
            &mut self,
            _: &str,
            _: faultline_engine::Params,
        ) -> Result<(), $crate::engine_host::HostError> {
            Ok(())
        }
        fn clear_target_params(&mut self, _: &str) -> Result<(), $crate::engine_host::HostError> {
            Ok(())
        }
        fn advance(
            &mut self,
            _: &str,
            _: u64,
            _: faultline_engine::Stillness,
        ) -> Result<(), $crate::engine_host::HostError> {
            Ok(())
        }
        fn forget(&mut self, _: &str) -> Result<(), $crate::engine_host::HostError> {
            Ok(())
        }
        fn take_reports(
            &mut self,
        ) -> Result<Vec<faultline_engine::Report>, $crate::engine_host::HostError> {
            Ok(Vec::new())
        }
        fn finish(
            &mut self,
        ) -> Result<Vec<faultline_engine::Report>, $crate::engine_host::HostError> {
            Ok(Vec::new())
        }
        fn calibrate(
            &mut self,
            _: &str,
            _: Option<u64>,
        ) -> Result<Option<faultline_engine::report::Calibration>, $crate::engine_host::HostError> {
            Ok(None)
        }
        fn counters(
            &mut self,
        ) -> Result<faultline_engine::report::EngineCounters, $crate::engine_host::HostError> {
            Ok(Default::default())
        }
        fn state_bytes(&mut self) -> Result<usize, $crate::engine_host::HostError> {
            Ok(0)
        }
    };
}
pub(crate) use idle_engine_methods;

/// An engine that fails every `ingest` (as a guest that traps on each batch) and
/// answers every other call with nothing.
pub(crate) struct FailingIngest;

impl EngineHost for FailingIngest {
    fn ingest(&mut self, _: &str, _: &[SyscallEvent]) -> Result<(), HostError> {
        Err(HostError::Encode("refused by the test double".into()))
    }
    fn trigger(&mut self, _: &str, _: u64) -> Result<Option<Report>, HostError> {
        Ok(None)
    }
    idle_engine_methods!();
}

/// An engine that records the times of the records it is fed, in order, and how many it
/// had been fed when a trigger reached it.
#[derive(Default)]
pub(crate) struct Recording {
    pub fed: Arc<Mutex<Vec<u64>>>,
    pub at_trigger: Arc<AtomicU64>,
}

impl EngineHost for Recording {
    fn ingest(&mut self, _: &str, events: &[SyscallEvent]) -> Result<(), HostError> {
        let mut fed = self.fed.lock().unwrap_or_else(|p| p.into_inner());
        fed.extend(events.iter().map(|e| e.ts_ns));
        Ok(())
    }
    fn trigger(&mut self, _: &str, _: u64) -> Result<Option<Report>, HostError> {
        let n = self.fed.lock().unwrap_or_else(|p| p.into_inner()).len() as u64;
        self.at_trigger.store(n, Ordering::Relaxed);
        Ok(None)
    }
    idle_engine_methods!();
}
