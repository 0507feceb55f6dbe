//! perf's end-of-run loss tally, the one count of lost events that is complete.
//!
//! The kernel reports a ring-buffer overrun as a `PERF_RECORD_LOST` record only with its next
//! successful write, so events lost at the very end of a capture (a starved `perf record`
//! whose traced command then exits) are never reported in the stream. `perf record` reads
//! each event's total lost count when it stops and stores it as `PERF_RECORD_LOST_SAMPLES`,
//! which `perf script` does not print; it only sums it into a warning on stderr:
//! `Processed 200485 samples and lost 99.71%!`, where the first number is samples delivered
//! plus samples lost. perf prints it only when over 5 % were lost.

/// The samples perf accounted for in all (delivered plus lost), from its stderr warning.
pub fn processed_samples(stderr: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(stderr);
    let (_, rest) = text.rsplit_once("Processed ")?;
    let mut words = rest.split_whitespace();
    let n = words.next()?.parse().ok()?;
    // "Processed N events and lost M chunks" is another warning (PERF_RECORD_LOST totals
    // of tools that count them), not the sample tally.
    (words.next() == Some("samples")).then_some(n)
}

/// Events lost that no `PERF_RECORD_LOST` record reported: `processed` samples in all, of
/// which `samples` arrived as lines and `reported` were reported lost in the stream.
pub fn unreported_loss(processed: u64, samples: u64, reported: u64) -> u64 {
    processed.saturating_sub(samples).saturating_sub(reported)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_sample_tally_among_other_warnings() {
        let stderr = b"'trace' not valid for hardware events. Ignoring.\nWarning:\nProcessed 200485 samples and lost 99.71%!\n\n";
        assert_eq!(processed_samples(stderr), Some(200_485));
    }

    #[test]
    fn no_tally_or_another_warning_reads_as_none() {
        assert_eq!(processed_samples(b""), None);
        assert_eq!(
            processed_samples(b"Warning:\nProcessed 12 events and lost 3 chunks!\n"),
            None
        );
        assert_eq!(processed_samples(b"Processed many samples"), None);
    }

    #[test]
    fn the_unreported_remainder_never_goes_negative() {
        // 200485 in all, 577 arrived, 9546 reported lost in the stream.
        assert_eq!(unreported_loss(200_485, 577, 9_546), 190_362);
        assert_eq!(unreported_loss(100, 90, 20), 0);
    }
}
