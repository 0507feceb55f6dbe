//! `faultline check-config`: validate a config file before deploying it, naming the wrong
//! key and why (the same checks `faultline run` does at startup).

use std::path::Path;

use crate::config::{self, Config};

/// Loads and validates `file` (with `FAULTLINE_…__…` overrides), prints a short summary.
pub fn run(file: &Path) -> anyhow::Result<()> {
    // The checks' warnings (limits that may not fit the WASM guest's memory) are log
    // lines, as in `run`: shown on stderr, the summary stays alone on stdout.
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(tracing::Level::WARN)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .without_time()
        .with_target(false)
        .try_init();
    let cfg = config::load(Some(file)).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    super::write_stdout(&format!("{}: OK\n{}", file.display(), summary(&cfg)))
}

/// What `run` would do with this config, one line per aspect.
pub fn summary(cfg: &Config) -> String {
    let mut out = String::new();
    out.push_str(&format!("engine: {}\n", cfg.engine.kind.as_str()));
    if cfg.targets.is_empty() {
        out.push_str(&format!(
            "targets: automatic (one per process/service name, at most {})\n",
            cfg.analysis.max_targets
        ));
    } else {
        let names: Vec<&str> = cfg.targets.iter().map(|t| t.name.as_str()).collect();
        out.push_str(&format!("targets: {}\n", names.join(", ")));
    }
    let s = &cfg.sources;
    let mut sources = Vec::new();
    if s.otlp.enabled {
        sources.push("otlp");
    }
    if s.perf.enabled {
        sources.push("perf");
    }
    if s.lttng.enabled {
        sources.push("lttng");
    }
    if s.replay.enabled {
        sources.push("replay");
    }
    out.push_str(&format!("sources: {}\n", list_or_none(&sources)));
    let k = &cfg.sinks;
    let mut sinks = Vec::new();
    let prom;
    if k.prometheus.enabled {
        prom = format!("prometheus ({})", k.prometheus.listen);
        sinks.push(prom.as_str());
    }
    if k.json.enabled {
        sinks.push("json");
    }
    if k.otlp.enabled {
        sinks.push("otlp");
    }
    out.push_str(&format!("sinks: {}\n", list_or_none(&sinks)));
    // Which host's records are this one's: in a container the kernel's name may not be it.
    let host = match &cfg.pipeline.host_name {
        Some(name) => format!("{} (pipeline.host_name)", name.trim()),
        None => match crate::host_name::local() {
            Ok(name) => format!("{name} (hostname)"),
            Err(why) => format!("unknown ({why}): every record is this host's"),
        },
    };
    out.push_str(&format!("this host: {host}\n"));
    out
}

fn list_or_none(v: &[&str]) -> String {
    if v.is_empty() {
        "none".to_owned()
    } else {
        v.join(", ")
    }
}
