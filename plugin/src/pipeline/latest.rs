//! The latest report of each target, for `GET /report`: shared between the engine thread
//! (writer) and HTTP handlers (readers), bounded in the number of targets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use faultline_engine::Report;

use super::report_sink::{ReportSink, SinkError};

/// Latest report per target (at most `max_targets`; reports of further targets are
/// counted in [`LatestReports::capped`] and not kept).
#[derive(Debug)]
pub struct LatestReports {
    reports: Mutex<BTreeMap<String, Report>>,
    max_targets: usize,
    capped: AtomicU64,
}

impl LatestReports {
    /// An empty store for at most `max_targets` targets.
    pub fn new(max_targets: usize) -> Self {
        Self {
            reports: Mutex::new(BTreeMap::new()),
            max_targets: max_targets.max(1),
            capped: AtomicU64::new(0),
        }
    }

    /// Replaces the target's latest report.
    pub fn insert(&self, report: &Report) {
        let mut m = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        if !m.contains_key(&report.target) && m.len() >= self.max_targets {
            self.capped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        m.insert(report.target.clone(), report.clone());
    }

    /// All latest reports, ordered by target name.
    pub fn all(&self) -> Vec<Report> {
        let m = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        m.values().cloned().collect()
    }

    /// The latest report of one target.
    pub fn get(&self, target: &str) -> Option<Report> {
        let m = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        m.get(target).cloned()
    }

    /// Drops the target's latest report (the router evicted it).
    pub fn remove(&self, target: &str) {
        let mut m = self.reports.lock().unwrap_or_else(|e| e.into_inner());
        m.remove(target);
    }

    /// Reports not kept because the store was full.
    pub fn capped(&self) -> u64 {
        self.capped.load(Ordering::Relaxed)
    }
}

/// The engine task's handle that fills a shared [`LatestReports`].
#[derive(Debug, Clone)]
pub struct LatestReportsSink(pub Arc<LatestReports>);

impl ReportSink for LatestReportsSink {
    fn name(&self) -> &'static str {
        "report_store"
    }
    fn publish(&mut self, report: &Report) -> Result<(), SinkError> {
        self.0.insert(report);
        Ok(())
    }
    fn forget(&mut self, target: &str) {
        self.0.remove(target);
    }
}
