//! Reading the config: file (TOML or YAML) first, then `FAULTLINE_…__…` environment
//! variables on top, then strict deserialization that reports the exact key path.

mod env_lists;

use std::collections::HashMap;
use std::path::Path;

use config::{Environment, File, FileFormat};

use super::{Config, ConfigError};

/// Environment variables starting with this (then `_`) override config keys.
pub const ENV_PREFIX: &str = "FAULTLINE";
/// Separates nesting levels in an override: `FAULTLINE_SINKS__PROMETHEUS__LISTEN`.
pub const ENV_SEPARATOR: &str = "__";

/// The syntax of a config text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigFormat {
    Toml,
    Yaml,
}

impl ConfigFormat {
    /// Guesses from the file extension (`.yaml`/`.yml` → YAML, anything else → TOML).
    pub fn from_path(path: &Path) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("yaml") || e.eq_ignore_ascii_case("yml") => {
                ConfigFormat::Yaml
            }
            _ => ConfigFormat::Toml,
        }
    }

    fn file_format(self) -> FileFormat {
        match self {
            ConfigFormat::Toml => FileFormat::Toml,
            ConfigFormat::Yaml => FileFormat::Yaml,
        }
    }
}

/// Loads `path` (or the built-in defaults when `None`) with the process environment's
/// overrides applied, and validates the result.
pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
    let text = match path {
        Some(p) => Some(
            std::fs::read_to_string(p).map_err(|source| ConfigError::Read {
                path: p.to_owned(),
                source,
            })?,
        ),
        None => None,
    };
    let format = path.map_or(ConfigFormat::Toml, ConfigFormat::from_path);
    load_from_str(text.as_deref(), format, std::env::vars())
}

/// Loads a config text with explicit environment variables (tests pass their own so they
/// need not mutate the process environment), and validates the result.
pub fn load_from_str(
    text: Option<&str>,
    format: ConfigFormat,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Config, ConfigError> {
    let mut builder = config::Config::builder();
    if let Some(t) = text {
        builder = builder.add_source(File::from_str(t, format.file_format()));
    }
    let (lists, scalars) = env_lists::split_lists(overrides(env))?;
    builder = builder.add_source(
        Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("_")
            .separator(ENV_SEPARATOR)
            .try_parsing(true)
            .source(Some(scalars)),
    );
    // Overrides are applied after every source, so these win over the file like the rest
    // of the environment does.
    for (key, items) in lists {
        builder = builder
            .set_override(key, items)
            .map_err(|e| ConfigError::Parse(e.to_string()))?;
    }
    let raw = builder
        .build()
        .map_err(|e| ConfigError::Parse(e.to_string()))?;
    let cfg: Config = serde_path_to_error::deserialize(raw).map_err(|e| {
        let key = e.path().to_string();
        ConfigError::invalid(key, strip_key_suffix(&e.into_inner().to_string()))
    })?;
    cfg.validate()?;
    Ok(cfg)
}

/// Only `FAULTLINE_<section>__<key>` variables are overrides: requiring the separator keeps
/// flat variables such as `FAULTLINE_CONFIG` or `FAULTLINE_LOG` free for other uses.
fn overrides(env: impl IntoIterator<Item = (String, String)>) -> config::Map<String, String> {
    let prefix = format!("{ENV_PREFIX}_");
    env.into_iter()
        .filter(|(k, _)| {
            k.strip_prefix(&prefix)
                .is_some_and(|rest| rest.contains(ENV_SEPARATOR))
        })
        .collect::<HashMap<_, _>>()
        .into_iter()
        .collect()
}

/// The config crate appends its own (less precise) location; the path we report is exact.
fn strip_key_suffix(msg: &str) -> String {
    match msg.find(" for key `") {
        Some(i) => msg[..i].to_owned(),
        None => msg.to_owned(),
    }
}
