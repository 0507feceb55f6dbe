//! Command-line interface: `run`, `analyze`, `calibrate`, `check-config`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::commands;

/// faultline: is this slowdown the environment or our own software?
#[derive(Debug, Parser)]
#[command(name = "faultline", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the long-lived plugin (OTLP/LTTng/perf sources → engine → Prometheus/OTLP/JSON sinks).
    Run {
        /// TOML or YAML config; without it, built-in defaults that listen on loopback only.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Log filter (e.g. `debug`, `faultline=debug,info`); overrides RUST_LOG.
        #[arg(long)]
        log_level: Option<String>,
        /// Log line format on stderr: `text`, or `json` (one object per line, for a log
        /// shipper such as Vector or the Collector's filelog receiver).
        #[arg(long, value_enum, default_value_t = commands::run::LogFormat::Text, env = "FAULTLINE_LOG_FORMAT")]
        log_format: commands::run::LogFormat,
    },
    /// Diagnose a recorded trace offline.
    Analyze(commands::analyze::AnalyzeArgs),
    /// Derive α/β from a trace recorded under a known external fault.
    Calibrate(commands::calibrate::CalibrateArgs),
    /// Validate a config file and say which key is wrong and why.
    CheckConfig { file: PathBuf },
}

/// Parses the command line and runs the chosen command.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            config,
            log_level,
            log_format,
        } => commands::run::run_with(config.as_deref(), log_level.as_deref(), log_format),
        Command::Analyze(args) => commands::analyze::run(&args),
        Command::Calibrate(args) => commands::calibrate::run(&args),
        Command::CheckConfig { file } => commands::check_config::run(&file),
    }
}
