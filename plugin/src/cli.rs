//! Command-line interface: `run`, `analyze`, `calibrate`, `check-config`.

pub fn main() -> anyhow::Result<()> {
    anyhow::bail!("not yet implemented")
}
