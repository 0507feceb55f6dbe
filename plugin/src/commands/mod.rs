//! One module per subcommand; each is the binary edge (anyhow errors).

pub mod analyze;
pub mod calibrate;
pub mod check_config;
pub mod offline;
pub mod run;
