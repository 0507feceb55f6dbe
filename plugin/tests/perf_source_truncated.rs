//! A recorded trace cut short (a copy interrupted, a disk filled while compressing): the
//! events before the cut still reach the engine, and the cut is still reported.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;

use faultline::pipeline::telemetry::SourceStats;
use faultline::sources::input::{open, open_trace};
use faultline::sources::perf::PerfTraceReader;
use faultline::sources::BatchReader;
use faultline_engine::syscalls::Arch;

/// Lines in each trace: few enough that the batcher holds them all until the input ends
/// (8 processes, fewer than a batch each, within a second of trace time), so none would
/// reach the engine if a read error dropped the held events.
const LINES: usize = 20_000;

fn perf_script_text() -> Vec<u8> {
    let mut text = Vec::new();
    for i in 0..LINES {
        let pid = 100 + i % 8;
        let half = if i % 2 == 0 {
            "sys_enter: NR 0 (3, 0, 0)".to_string()
        } else {
            format!("sys_exit: NR 0 = {}", i % 97)
        };
        writeln!(
            text,
            "proc{} {pid}/{pid} [001] 1.{:09}: raw_syscalls:{half}",
            i % 8,
            i * 10
        )
        .unwrap();
    }
    text
}

fn perf_trace_text() -> Vec<u8> {
    let mut text = Vec::new();
    for i in 0..LINES {
        writeln!(
            text,
            "  1000.{:03}{:03} ( 0.005 ms): proc{}/{} read(fd: 3, count: {}) = 1",
            i / 1000,
            i % 1000,
            i % 8,
            100 + i % 8,
            i % 4096
        )
        .unwrap();
    }
    text
}

fn gzip(text: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(text).unwrap();
    enc.finish().unwrap()
}

fn zstd(text: &[u8]) -> Vec<u8> {
    zstd::encode_all(text, 3).unwrap()
}

/// Events read before the error, and the error.
fn read_until_error(mut reader: Box<dyn BatchReader>) -> (usize, String) {
    let mut events = 0;
    loop {
        match reader.next_batch() {
            Ok(Some(batch)) => events += batch.events.len(),
            Ok(None) => panic!("a truncated file ended cleanly after {events} events"),
            Err(e) => {
                // Reported once; the reader is done after it.
                assert!(matches!(reader.next_batch(), Ok(None)));
                return (events, e.to_string());
            }
        }
    }
}

/// The whole lines the decompressor hands out before failing: what a reader can decode.
fn whole_lines_before_the_cut(path: &Path) -> usize {
    let mut prefix = Vec::new();
    let err = open(path)
        .unwrap()
        .read_to_end(&mut prefix)
        .expect_err("the decompressor notices the cut");
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
    prefix.iter().filter(|&&b| b == b'\n').count()
}

#[test]
fn events_before_the_cut_of_a_truncated_gz_or_zst_file_are_delivered() {
    let dir = tempfile::tempdir().unwrap();
    type Compress = fn(&[u8]) -> Vec<u8>;
    let compressions: [(&str, Compress); 2] = [("gz", gzip), ("zst", zstd)];
    for (format, text) in [("script", perf_script_text()), ("trace", perf_trace_text())] {
        for (ext, compress) in compressions {
            let packed = compress(&text);
            let path = dir.path().join(format!("{format}.txt.{ext}"));
            std::fs::write(&path, &packed[..packed.len() * 6 / 10]).unwrap();
            let expected = whole_lines_before_the_cut(&path);
            assert!(
                expected > 0 && expected < LINES,
                "{format}.{ext}: {expected} lines before the cut"
            );

            let stats = Arc::new(SourceStats::new("perf"));
            let reader: Box<dyn BatchReader> = match format {
                // The way `auto:` and `[sources.replay]` open it.
                "script" => open_trace(&path, Arch::X86_64, stats.clone()).unwrap(),
                _ => Box::new(PerfTraceReader::open(&path, stats.clone()).unwrap()),
            };
            let (events, err) = read_until_error(reader);
            assert_eq!(events, expected, "{format}.{ext}: {err}");
            assert_eq!(stats.received(), expected as u64, "{format}.{ext}");
            assert_eq!(stats.decode_errors(), 0, "{format}.{ext}");
            assert!(err.contains("I/O error reading"), "{format}.{ext}: {err}");
        }
    }
}
