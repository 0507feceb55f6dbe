//! `faultline calibrate`: derive α/β from a trace recorded under a known external fault
//! (PerfCompass §3.6: an overly low CPU cap), printed as config to paste.

use anyhow::Context;
use std::sync::Arc;

use super::offline::{self, OfflineArgs};
use crate::pipeline::telemetry::Telemetry;

/// Arguments of `faultline calibrate`.
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    pub offline: OfflineArgs,
    /// When the known external fault started (trace clock, ns); default: the onset the engine detects.
    #[arg(long)]
    pub fault_start_ns: Option<u64>,
}

/// Runs the calibration and prints a `[[targets]]` block per target.
pub fn run(args: &CalibrateArgs) -> anyhow::Result<()> {
    let params = offline::load_params(&args.offline)?;
    let max_targets = params.max_targets;
    let telemetry = Arc::new(Telemetry::default());
    let mut engine = offline::build_engine(&args.offline, params, &telemetry)?;
    let (targets, _reports, events) =
        offline::drive(&args.offline, engine.as_mut(), &telemetry, max_targets)?;
    let mut printed = 0;
    for target in &targets {
        match engine.calibrate(target, args.fault_start_ns).context("calibration")? {
            Some(c) => {
                let block = format!(
                    "# calibrated from {} ({} affected threads, window {:.3}–{:.3} s; largest onset of the busy threads {:.3} s, {} far-out straggler(s) left out)\n",
                    args.offline.input.path.display(),
                    c.affected_threads,
                    c.window_start_ns as f64 / 1e9,
                    c.window_end_ns as f64 / 1e9,
                    c.measured_alpha_seconds,
                    c.stragglers
                ) + &format!(
                    "[[targets]]\nname = {:?}\nprocess_names = [{:?}]\nalpha_seconds = {:.6}\nbeta_seconds = {:.6}\n[targets.analysis]\nmin_active_calls = {}\ndirect_within_calls = {}\n\n",
                    c.target,
                    c.target,
                    c.alpha_seconds,
                    c.beta_seconds,
                    c.min_active_calls,
                    c.direct_within_calls
                );
                // Written per target, as before, so earlier blocks are out even if a
                // later calibration fails.
                super::write_stdout(&block)?;
                printed += 1;
            }
            None => eprintln!("target {target}: no affected threads found — is there a known external fault in this trace (see --fault-start-ns)?"),
        }
    }
    if printed == 0 {
        anyhow::bail!("calibration failed: no target showed the fault ({events} events routed)");
    }
    Ok(())
}
