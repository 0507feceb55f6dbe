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
    /// The host the trace was recorded on, when another than the one faultline runs on:
    /// the block is that host's target, `NAME@HOST` with `hosts = [HOST]`, so the
    /// calibration holds there only and the target keeps the name it had.
    #[arg(long, value_parser = parse_host)]
    pub host: Option<String>,
}

fn parse_host(s: &str) -> Result<String, String> {
    let name = s.trim();
    if name.is_empty() || name.len() > 253 || name.chars().any(|c| c.is_control() || c == '"') {
        return Err("expected a host name, e.g. db-2".into());
    }
    Ok(name.to_owned())
}

/// The `[[targets]]` lines that name `target`'s processes (on `host` only, when given).
fn matchers(target: &str, host: Option<&str>) -> String {
    match host {
        Some(h) => format!(
            "name = {:?}\nprocess_names = [{target:?}]\nhosts = [{h:?}]\n",
            format!("{target}@{h}")
        ),
        None => format!("name = {target:?}\nprocess_names = [{target:?}]\n"),
    }
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
                    "[[targets]]\n{}alpha_seconds = {:.6}\nbeta_seconds = {:.6}\n[targets.analysis]\nmin_active_calls = {}\ndirect_within_calls = {}\n\n",
                    matchers(&c.target, args.host.as_deref()),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hosts_block_keeps_the_name_its_target_had_there() {
        assert_eq!(
            matchers("mariadbd", Some("db-2")),
            "name = \"mariadbd@db-2\"\nprocess_names = [\"mariadbd\"]\nhosts = [\"db-2\"]\n"
        );
        assert_eq!(
            matchers("mariadbd", None),
            "name = \"mariadbd\"\nprocess_names = [\"mariadbd\"]\n"
        );
        assert!(parse_host(" db-2 ").is_ok_and(|h| h == "db-2"));
        assert!(parse_host("").is_err() && parse_host("a\"b").is_err());
    }
}
