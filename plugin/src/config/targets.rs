//! `[[targets]]`: which processes form one analysed application, and that target's own
//! parameters (typically α/β from `faultline calibrate`).

use faultline_engine::Params;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::ConfigError;

/// One named target. A process belongs to the first target any of whose lists matches it
/// (and, when `hosts` is set, whose hosts name the process's).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetConfig {
    /// The target's name in metrics labels, reports and `/trigger?target=`.
    pub name: String,
    /// Exact process (command) names, e.g. `mariadbd`.
    pub process_names: Vec<String>,
    pub pids: Vec<u32>,
    /// cgroup paths or container ids; a process matches when its cgroup contains one.
    pub cgroups: Vec<String>,
    /// OTLP resource `service.name` values.
    pub service_names: Vec<String>,
    /// Only processes of these hosts (OTLP `host.name`; this host's are those of
    /// `[pipeline].host_name`): one service's target per host, with its own calibrated α/β.
    /// Empty: any host, another host's processes forming `NAME@HOST`.
    pub hosts: Vec<String>,
    /// Calibrated α for this target (overrides `[analysis].alpha_seconds`).
    pub alpha_seconds: Option<f64>,
    /// Calibrated β for this target (overrides `[analysis].beta_seconds`).
    pub beta_seconds: Option<f64>,
    /// Any other `[analysis]` key, overridden for this target only.
    pub analysis: Map<String, Value>,
}

impl TargetConfig {
    /// True when no matcher is set, i.e. the target can never receive events.
    pub fn matches_nothing(&self) -> bool {
        self.process_names.is_empty()
            && self.pids.is_empty()
            && self.cgroups.is_empty()
            && self.service_names.is_empty()
    }

    /// `base` with this target's overrides applied; `index` names the target in errors.
    ///
    /// Overrides are merged as data and deserialized through [`Params`] itself, so a
    /// misspelt key is rejected by the same `deny_unknown_fields` as in `[analysis]`.
    pub fn effective_params(&self, base: &Params, index: usize) -> Result<Params, ConfigError> {
        let prefix = format!("targets[{index}]");
        let mut merged = match serde_json::to_value(base) {
            Ok(Value::Object(m)) => m,
            _ => return Err(ConfigError::invalid("analysis", "not a table")),
        };
        for (k, v) in &self.analysis {
            merged.insert(k.clone(), v.clone());
        }
        if let Some(a) = self.alpha_seconds {
            merged.insert("alpha_seconds".into(), float(a));
        }
        if let Some(b) = self.beta_seconds {
            merged.insert("beta_seconds".into(), float(b));
        }
        let params: Params =
            serde_path_to_error::deserialize(Value::Object(merged)).map_err(|e| {
                let key = e.path().to_string();
                ConfigError::invalid(
                    format!("{prefix}.analysis.{key}"),
                    e.into_inner().to_string(),
                )
            })?;
        params.validate().map_err(|e| {
            // α/β given at the target's top level are reported where the operator wrote them.
            let top_level = (e.key == "alpha_seconds" && self.alpha_seconds.is_some())
                || (e.key == "beta_seconds" && self.beta_seconds.is_some());
            let key = if top_level {
                format!("{prefix}.{}", e.key)
            } else if self.analysis.contains_key(e.key) {
                format!("{prefix}.analysis.{}", e.key)
            } else {
                // Inherited from [analysis] but invalid in combination with an override.
                format!("{prefix} (effective {})", e.key)
            };
            ConfigError::invalid(key, e.reason)
        })?;
        Ok(params)
    }
}

/// A JSON number for `v`; non-finite values become null, which then fails as a type error.
fn float(v: f64) -> Value {
    serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
}
