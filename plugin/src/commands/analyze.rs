//! `faultline analyze`: offline diagnosis of a recorded trace.

/// Arguments of `faultline analyze`.
#[derive(Debug, clap::Args)]
pub struct AnalyzeArgs {}

/// Runs the analysis.
pub fn run(_args: &AnalyzeArgs) -> anyhow::Result<()> {
    anyhow::bail!("`faultline analyze` is not implemented yet")
}
