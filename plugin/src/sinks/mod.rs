//! Sinks: everything that publishes reports and counters.
