//! `faultline run`: the long-lived plugin.

use std::path::Path;

/// Runs until SIGTERM/SIGINT.
pub fn run(_config: Option<&Path>) -> anyhow::Result<()> {
    anyhow::bail!("`faultline run` is not implemented yet")
}
