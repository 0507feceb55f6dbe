//! Configuration errors that always name the offending key, because "invalid config"
//! without a key costs an operator a bisection of their file.

use std::path::PathBuf;

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read at all.
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The file is not valid TOML/YAML, or an environment override is malformed.
    #[error("cannot parse config: {0}")]
    Parse(String),
    /// A key has the wrong type, is unknown, or has a value out of range.
    #[error("{key}: {reason}")]
    Invalid { key: String, reason: String },
}

impl ConfigError {
    /// An invalid-value error for `key` (dotted path, e.g. `targets[1].alpha_seconds`).
    pub fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.into(),
            reason: reason.into(),
        }
    }

    /// The dotted key path this error is about, when it is about one key.
    pub fn key(&self) -> Option<&str> {
        match self {
            ConfigError::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}
