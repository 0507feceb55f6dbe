//! `faultline calibrate`: derive α/β from a trace recorded under a known external fault
//! (PerfCompass §3.6: an overly low CPU cap), printed as config to paste.

use anyhow::Context;
use faultline_engine::Engine;

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
    let mut engine = Engine::new(params).context("invalid analysis parameters")?;
    let telemetry = Telemetry::default();
    let (targets, _reports, events) = offline::drive(&args.offline, &mut engine, &telemetry)?;
    let mut printed = 0;
    for target in &targets {
        match engine.calibrate(target, args.fault_start_ns) {
            Some(c) => {
                println!("# calibrated from {} ({} affected threads, window {:.3}–{:.3} s)", args.offline.input.path.display(), c.affected_threads, c.window_start_ns as f64 / 1e9, c.window_end_ns as f64 / 1e9);
                println!("[[targets]]\nname = {:?}\nprocess_names = [{:?}]\nalpha_seconds = {:.6}\nbeta_seconds = {:.6}\n", c.target, c.target, c.alpha_seconds, c.beta_seconds);
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
