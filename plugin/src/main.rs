//! The `faultline` binary: command-line edge of the plugin host (errors become `anyhow`).

fn main() -> anyhow::Result<()> {
    faultline::cli::main()
}
