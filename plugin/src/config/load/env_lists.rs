//! List-valued keys in environment overrides: `FAULTLINE_SOURCES__PERF__PIDS=1234,5678`.
//!
//! Not the config crate's `Environment::list_separator`: with `try_parsing` on, it reads a
//! lone `1234` as a number before it looks for a separator, so a single pid would still
//! fail with "expected a sequence". The overrides of these keys are split here instead and
//! set as lists; every other key is left to the crate.

use config::Map;

use super::{ENV_PREFIX, ENV_SEPARATOR};
use crate::config::ConfigError;

/// The keys holding a list of plain values, which an environment variable can therefore
/// set (`[[targets]]`, a list of tables, cannot).
pub(super) const LIST_KEYS: &[&str] = &["sources.perf.pids", "sources.perf.command"];

/// Separates the items of a list override.
pub(super) const LIST_SEPARATOR: char = ',';

/// List overrides as (dotted key, items), in no particular order (one variable per key).
pub(super) type ListOverrides = Vec<(String, Vec<String>)>;

/// Takes the overrides of [`LIST_KEYS`] out of `overrides` (variable name → value) and
/// splits their values; the rest is returned for the config crate.
pub(super) fn split_lists(
    overrides: Map<String, String>,
) -> Result<(ListOverrides, Map<String, String>), ConfigError> {
    let mut lists = Vec::new();
    let mut rest = Map::new();
    for (var, value) in overrides {
        match list_key(&var) {
            Some(key) => {
                let items = items(key, &var, &value)?;
                lists.push((key.to_owned(), items));
            }
            None => {
                rest.insert(var, value);
            }
        }
    }
    Ok((lists, rest))
}

/// The list key `var` overrides, matched as the config crate matches names: case-insensitively.
fn list_key(var: &str) -> Option<&'static str> {
    let path = var
        .get(ENV_PREFIX.len() + 1..)?
        .to_lowercase()
        .replace(ENV_SEPARATOR, ".");
    LIST_KEYS.iter().copied().find(|k| *k == path)
}

/// An empty value is an empty list, so the environment can also clear a list of the file
/// (to trace a command instead of pids, say). Spaces around items are dropped; an empty
/// item is refused, as it is a typo (`1234,,5678`) or an argument perf cannot use.
fn items(key: &str, var: &str, value: &str) -> Result<Vec<String>, ConfigError> {
    if value.trim().is_empty() {
        return Ok(Vec::new());
    }
    value
        .split(LIST_SEPARATOR)
        .enumerate()
        .map(|(i, item)| match item.trim() {
            "" => Err(ConfigError::invalid(
                format!("{key}[{i}]"),
                format!(
                    "empty item in {var}={value:?} (items are separated by `{LIST_SEPARATOR}`)"
                ),
            )),
            item => Ok(item.to_owned()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::{split_lists, LIST_KEYS};
    use crate::config::Config;

    /// Dotted paths of the arrays in `v`.
    fn arrays(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Array(_) => out.push(prefix.to_owned()),
            Value::Object(m) => {
                for (k, v) in m {
                    let path = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    arrays(&path, v, out);
                }
            }
            _ => {}
        }
    }

    /// A list key added to the config must be added here too, or its environment override
    /// fails with "expected a sequence" again.
    #[test]
    fn every_list_of_plain_values_is_a_list_key() {
        let defaults = serde_json::to_value(Config::default()).expect("the defaults serialize");
        let mut found = Vec::new();
        arrays("", &defaults, &mut found);
        // A list of tables: only the file can give it.
        found.retain(|k| k != "targets");
        found.sort();
        let mut expected: Vec<String> = LIST_KEYS.iter().map(|k| (*k).to_owned()).collect();
        expected.sort();
        assert_eq!(found, expected);
    }

    #[test]
    fn list_overrides_are_split_and_the_rest_left_alone() {
        let env = [
            ("FAULTLINE_SOURCES__PERF__PIDS", " 1, 2 ,3"),
            ("FAULTLINE_Sources__Perf__Command", "stress,--cpu,2"),
            ("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "127.0.0.1:1,2"),
        ];
        let env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let (mut lists, rest) = split_lists(env).expect("valid overrides");
        lists.sort();
        assert_eq!(
            lists,
            [
                (
                    "sources.perf.command".to_owned(),
                    vec!["stress".to_owned(), "--cpu".into(), "2".into()]
                ),
                (
                    "sources.perf.pids".to_owned(),
                    vec!["1".to_owned(), "2".into(), "3".into()]
                ),
            ]
        );
        assert_eq!(
            rest.get("FAULTLINE_SINKS__PROMETHEUS__LISTEN")
                .map(String::as_str),
            Some("127.0.0.1:1,2")
        );
        assert_eq!(rest.len(), 1);
    }
}
