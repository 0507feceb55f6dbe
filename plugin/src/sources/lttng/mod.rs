//! The LTTng source: kernel traces (CTF directories or live sessions) decoded by babeltrace2,
//! with threads recovered from scheduler events when the trace has no thread contexts.

pub mod babeltrace;
pub mod discards;
pub mod live_url;
pub mod reader;
pub mod text;
pub mod threads;

pub use babeltrace::open;
pub use reader::{LttngCounters, LttngTextReader};
