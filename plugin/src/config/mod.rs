//! `faultline run` configuration: a TOML or YAML file plus `FAULTLINE_...` environment
//! overrides, deserialized into strict serde structs (unknown keys are errors, every key
//! has a default) and validated so an operator learns *which* key is wrong and why.
//!
//! With no file at all, [`Config::default`] is a working setup that needs no other
//! service and listens on loopback only.

mod error;
mod load;
mod sections;
mod targets;
mod validate;

pub use error::ConfigError;
pub use load::{load, load_from_str, ConfigFormat, ENV_PREFIX, ENV_SEPARATOR};
pub use sections::{
    JsonSinkConfig, LttngSourceConfig, OtlpSinkSection, OtlpSourceSection, PerfSourceConfig,
    PipelineConfig, PrometheusSinkConfig, ReplayFormat, ReplaySourceConfig, SinksConfig,
    SourcesConfig,
};
pub use targets::TargetConfig;

use faultline_engine::Params;

use crate::engine_host::HostConfig;
use serde::{Deserialize, Serialize};

/// The whole configuration of `faultline run`; each field is one top-level section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// How the analysis engine is hosted (`[engine]`).
    pub engine: HostConfig,
    /// Analysis parameters every target starts from (`[analysis]`).
    pub analysis: Params,
    /// Named targets and how processes are matched to them (`[[targets]]`); empty means
    /// "one target per distinct process / service name".
    pub targets: Vec<TargetConfig>,
    /// Queueing between sources and the engine (`[pipeline]`).
    pub pipeline: PipelineConfig,
    /// Where events come from (`[sources.*]`).
    pub sources: SourcesConfig,
    /// Where reports and counters go (`[sinks.*]`).
    pub sinks: SinksConfig,
}

impl Config {
    /// The parameters in force for target `name`: `[analysis]` with that target's overrides
    /// applied, or plain `[analysis]` for targets not listed (auto-discovered ones).
    pub fn params_for(&self, name: &str) -> Result<Params, ConfigError> {
        match self.targets.iter().position(|t| t.name == name) {
            Some(i) => self.targets[i].effective_params(&self.analysis, i),
            None => Ok(self.analysis.clone()),
        }
    }

    /// Checks everything that deserialization cannot: parameter ranges per target,
    /// addresses, duplicate names, and relations between sections.
    pub fn validate(&self) -> Result<(), ConfigError> {
        validate::validate(self)
    }
}
