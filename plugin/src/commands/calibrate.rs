//! `faultline calibrate`: derive α/β from a known external fault.

/// Arguments of `faultline calibrate`.
#[derive(Debug, clap::Args)]
pub struct CalibrateArgs {}

/// Runs the calibration.
pub fn run(_args: &CalibrateArgs) -> anyhow::Result<()> {
    anyhow::bail!("`faultline calibrate` is not implemented yet")
}
