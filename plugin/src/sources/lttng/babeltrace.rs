//! Running babeltrace2 on a CTF trace directory or an LTTng live session, so the LTTng
//! source reads its text without linking libbabeltrace2 (a C library with its own plugins).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use faultline_engine::syscalls::Arch;

use super::discards::{self, DiscardQueue};
use super::reader::LttngTextReader;
use crate::pipeline::telemetry::SourceStats;
use crate::sources::input::{ChildOutput, StderrTap};
use crate::sources::SourceError;

/// The executable; overridable for unusual installs.
pub const BABELTRACE2: &str = "babeltrace2";
const INSTALL_HINT: &str = "install babeltrace2, e.g. `apt install babeltrace2`";

/// The babeltrace2 arguments that print a trace as the text [`LttngTextReader`] parses:
/// absolute seconds (not deltas), one event per line.
pub fn babeltrace_command(input: &str) -> Result<Command, SourceError> {
    let mut cmd = Command::new(BABELTRACE2);
    cmd.args(["--clock-seconds", "--no-delta"]);
    if super::live_url::is_live(input) {
        // Live session: net://RELAYD/host/HOST/SESSION via lttng-relayd.
        cmd.arg("--input-format=lttng-live").arg(input);
    } else {
        let path = Path::new(input);
        if !path.is_dir() {
            return Err(SourceError::Invalid(format!(
                "LTTng input `{input}` is not a directory (expected a CTF trace directory or net://RELAYD/host/HOST/SESSION)"
            )));
        }
        cmd.arg(path);
    }
    Ok(cmd)
}

/// Streams an LTTng trace (directory or live URL) through babeltrace2. The tracer's
/// discarded-event reports, which babeltrace2 prints on stderr, become loss markers and
/// `kernel_lost` counts (see [`super::discards`]).
pub fn open(
    input: &str,
    arch: Arch,
    stats: Arc<SourceStats>,
) -> Result<LttngTextReader<ChildOutput>, SourceError> {
    let queue = Arc::new(DiscardQueue::default());
    let tap = discard_tap(queue.clone());
    let child = ChildOutput::spawn_tapped(babeltrace_command(input)?, INSTALL_HINT, tap)?;
    let reader = LttngTextReader::new(child, arch, stats).with_discards(queue);
    Ok(if super::live_url::is_live(input) {
        reader.live()
    } else {
        reader
    })
}

/// The stderr tap that queues babeltrace2's "Tracer discarded" reports for the reader.
pub(crate) fn discard_tap(queue: Arc<DiscardQueue>) -> StderrTap {
    Box::new(move |line: &[u8]| {
        if let Some(d) = discards::parse(line) {
            queue.push(d);
        }
    })
}
