//! `faultline check-config`: validate a config file.

use std::path::Path;

/// Loads and validates `file`, naming the wrong key.
pub fn run(_file: &Path) -> anyhow::Result<()> {
    anyhow::bail!("`faultline check-config` is not implemented yet")
}
