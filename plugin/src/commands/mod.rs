//! One module per subcommand; each is the binary edge (anyhow errors).

pub mod analyze;
pub mod calibrate;
pub mod check_config;
pub mod offline;
pub mod run;

use std::io::{self, Write};

/// Writes `text` to stdout. A reader that went away (`faultline analyze … | head -1`)
/// is not an error: it has what it wanted, and `print!` would panic on the closed pipe.
pub fn write_stdout(text: &str) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(e).context("writing to stdout"))
        }
        _ => Ok(()),
    }
}
