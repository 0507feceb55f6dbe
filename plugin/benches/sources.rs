//! Source throughput, printed as a table (run: `cargo bench -p faultline --bench sources`).
//!
//! 1. `PerfScriptReader` on a real MariaDB perf-script trace decompressed to memory
//!    (target ≥ 150 MB/s of text on one core).
//! 2. The LTTng source vs babeltrace2's own decode of the same trace (faultline pipes
//!    babeltrace2's text, so the ratio shows what our parsing adds).
//! 3. Per-syscall statistics of an LTTng trace: faultline vs `lttng-syscallstats`
//!    (time ratio and whether the counts agree).

#[path = "../../wasm-guest/tests/common/traces.rs"]
mod traces;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use faultline::pipeline::telemetry::SourceStats;
use faultline::sources::perf::PerfScriptReader;
use faultline::sources::BatchReader;
use faultline_engine::syscalls::Arch;

/// The shared traces directory is found as the tests find it (`wasm-guest/tests/common/traces.rs`).
fn perf_trace() -> std::path::PathBuf {
    traces::root().join("perf-faults/mariadb_control/trace.txt.zst")
}

fn main() {
    // `cargo bench --bench sources -- perf` runs only the perf part (cargo adds `--bench`).
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
    println!("| measurement | value |");
    println!("|---|---|");
    if wanted("perf") {
        bench_perf_script();
    }
    if wanted("lttng") {
        lttng::bench_all();
    }
}

fn bench_perf_script() {
    let Ok(file) = std::fs::File::open(perf_trace()) else {
        println!(
            "| perf-script | SKIPPED: {} missing |",
            perf_trace().display()
        );
        return;
    };
    let mut text = Vec::new();
    if let Err(e) =
        zstd::stream::read::Decoder::new(file).and_then(|mut d| d.read_to_end(&mut text))
    {
        println!("| perf-script | SKIPPED: cannot decompress: {e} |");
        return;
    }
    let mut best = f64::MAX;
    let mut events = 0u64;
    for _ in 0..3 {
        let stats = Arc::new(SourceStats::new("perf"));
        let mut reader = PerfScriptReader::new(&text[..], Arch::X86_64, stats.clone());
        let start = Instant::now();
        let mut n = 0u64;
        while let Ok(Some(batch)) = reader.next_batch() {
            n += batch.events.len() as u64;
        }
        best = best.min(start.elapsed().as_secs_f64());
        events = n;
        assert_eq!(stats.decode_errors(), 0, "real trace must decode cleanly");
    }
    let mb = text.len() as f64 / 1e6;
    println!("| perf-script input | {mb:.1} MB text, {events} events |");
    println!("| perf-script MB/s (best of 3) | {:.1} |", mb / best);
    println!(
        "| perf-script events/s | {:.2} M |",
        events as f64 / best / 1e6
    );
}

mod lttng {
    use super::*;
    use faultline::model::EventBatch;
    use faultline::sources::lttng::{self as source, LttngTextReader};
    use faultline_engine::{EventKind, SyscallId};
    use std::collections::HashMap;

    fn trace() -> String {
        super::traces::root()
            .join("lttng/many-threads")
            .to_string_lossy()
            .into_owned()
    }

    pub fn bench_all() {
        if !Path::new(&trace()).is_dir() {
            println!("| lttng | SKIPPED: {} missing |", trace());
            return;
        }
        let Some(bt_secs) = time_babeltrace() else {
            println!("| lttng | SKIPPED: babeltrace2 not runnable |");
            return;
        };
        let Some(text) = babeltrace_text() else {
            return;
        };
        let lines = text.iter().filter(|b| **b == b'\n').count() as f64;
        println!(
            "| babeltrace2 decode alone ({lines} events) | {bt_secs:.3} s = {:.0} k events/s |",
            lines / bt_secs / 1e3
        );

        // Our parsing alone, on babeltrace2's text in memory.
        let stats = Arc::new(SourceStats::new("lttng"));
        let mut r = LttngTextReader::new(&text[..], Arch::X86_64, stats);
        let start = Instant::now();
        while let Ok(Some(_)) = r.next_batch() {}
        let parse = start.elapsed().as_secs_f64();
        println!(
            "| faultline text parsing alone | {parse:.3} s = {:.0} k events/s ({:.0} MB/s) |",
            lines / parse / 1e3,
            text.len() as f64 / parse / 1e6
        );

        // The whole source as deployed: babeltrace2 child + parsing, concurrently.
        let stats = Arc::new(SourceStats::new("lttng"));
        let start = Instant::now();
        let Ok(mut r) = source::open(&trace(), Arch::X86_64, stats.clone()) else {
            println!("| lttng source | SKIPPED: cannot start babeltrace2 |");
            return;
        };
        let mut batches = Vec::new();
        while let Ok(Some(b)) = r.next_batch() {
            batches.push(b);
        }
        let whole = start.elapsed().as_secs_f64();
        println!(
            "| faultline LTTng source (babeltrace2 + parse) | {whole:.3} s = {:.0} k events/s; {} syscall events; ratio to babeltrace2 alone {:.2}x |",
            lines / whole / 1e3,
            stats.received(),
            whole / bt_secs
        );
        compare_syscallstats(&batches, whole);
    }

    /// Best of two runs of babeltrace2 alone (the first may pay for a cold page cache).
    fn time_babeltrace() -> Option<f64> {
        let mut best = f64::MAX;
        for _ in 0..2 {
            let start = Instant::now();
            let ok = Command::new("babeltrace2")
                .args(["--clock-seconds", "--no-delta", &trace()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .ok()?
                .success();
            if !ok {
                return None;
            }
            best = best.min(start.elapsed().as_secs_f64());
        }
        Some(best)
    }

    fn babeltrace_text() -> Option<Vec<u8>> {
        let out = Command::new("babeltrace2")
            .args(["--clock-seconds", "--no-delta", &trace()])
            .output()
            .ok()?;
        out.status.success().then_some(out.stdout)
    }

    /// Completed calls per syscall name: each exit closes its thread's pending entry.
    fn completed_per_name(batches: &[EventBatch]) -> BTreeMap<String, u64> {
        let mut pending: HashMap<u32, SyscallId> = HashMap::new();
        let mut out = BTreeMap::new();
        for e in batches.iter().flat_map(|b| &b.events) {
            match e.kind {
                EventKind::Enter => {
                    pending.insert(e.tid, e.syscall);
                }
                EventKind::Exit => {
                    if let Some(id) = pending.remove(&e.tid) {
                        *out.entry(id.name().to_string()).or_insert(0) += 1;
                    }
                }
                EventKind::Complete
                | EventKind::OnCpu
                | EventKind::OffCpu
                | EventKind::Lost
                | EventKind::Counters
                | EventKind::TcpSegments => {}
            }
        }
        out
    }

    /// lttng-syscallstats (lttnganalyses) on the same trace. It only reads the tracer
    /// version, which it needs, from a trace directory named `kernel`, so run it on a copy.
    fn compare_syscallstats(batches: &[EventBatch], ours_secs: f64) {
        let Ok(dir) = tempfile::tempdir() else { return };
        let kernel = dir.path().join("kernel");
        if copy_dir(Path::new(&trace()), &kernel).is_err() {
            println!("| lttng-syscallstats | SKIPPED: cannot copy trace |");
            return;
        }
        let start = Instant::now();
        let out = Command::new("lttng-syscallstats")
            .args(["--no-progress", "--skip-validation"])
            .arg(dir.path())
            .output();
        let secs = start.elapsed().as_secs_f64();
        let Some(out) = out.ok().filter(|o| o.status.success()) else {
            println!("| lttng-syscallstats | SKIPPED: not installed or failed |");
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        // Both sides named through the engine's table, so kernel aliases (`newfstat` and
        // `fstat`) compare as one call.
        let canonical = |name: &str| match SyscallId::from_name(name) {
            SyscallId::UNKNOWN => name.to_string(),
            id => id.name().to_string(),
        };
        let mut theirs: BTreeMap<String, u64> = BTreeMap::new();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(" - ") else {
                continue;
            };
            let mut w = rest.split_whitespace();
            if let (Some(name), Some(Ok(n))) = (w.next(), w.next().map(str::parse::<u64>)) {
                *theirs.entry(canonical(name)).or_insert(0) += n;
            }
        }
        let ours = completed_per_name(batches);
        let (t_ours, t_theirs): (u64, u64) = (ours.values().sum(), theirs.values().sum());
        let names: BTreeSet<&String> = ours.keys().chain(theirs.keys()).collect();
        let differing: Vec<String> = names
            .iter()
            .filter(|n| ours.get(**n) != theirs.get(**n))
            .map(|n| format!("{n}: {:?} vs {:?}", ours.get(*n), theirs.get(*n)))
            .collect();
        println!(
            "| lttng-syscallstats time | {secs:.2} s (faultline source {ours_secs:.2} s, {:.1}x faster) |",
            secs / ours_secs
        );
        println!(
            "| completed calls: faultline vs lttng-syscallstats | {t_ours} vs {t_theirs}; {} of {} syscall names equal |",
            names.len() - differing.len(),
            names.len()
        );
        for d in differing.iter().take(10) {
            println!("| differs (faultline vs lttng-syscallstats) | {d} |");
        }
    }

    fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let p = entry?.path();
            let Some(name) = p.file_name() else { continue };
            if p.is_dir() {
                copy_dir(&p, &to.join(name))?;
            } else {
                std::fs::copy(&p, to.join(name))?;
            }
        }
        Ok(())
    }
}
