//! `sinks.otlp.endpoint`: a URL this build's exporter can reach. Checked here because the
//! exporter only refuses a bad one when `run` starts it (gRPC), or takes it and then fails
//! every export (HTTP), long after `check-config` said OK.

use tonic::transport::Uri;

use crate::config::ConfigError;
use crate::sinks::otlp::{OtlpProtocol, OtlpSinkConfig};

const KEY: &str = "sinks.otlp.endpoint";

/// Checks the configured endpoint (the default one is always usable).
///
/// Only `http://` is accepted: the workspace builds `opentelemetry-otlp`, tonic and reqwest
/// without a TLS feature, so an `https://` endpoint could never be reached. Parsed as the
/// exporters parse it (`http::Uri`), so what passes here is what they take.
pub(super) fn check(exporter: &OtlpSinkConfig) -> Result<(), ConfigError> {
    let Some(v) = exporter.endpoint.as_deref() else {
        return Ok(());
    };
    let example = match exporter.protocol {
        OtlpProtocol::Grpc => "http://collector:4317",
        OtlpProtocol::Http => "http://collector:4318",
    };
    let refuse = |why: String| Err(ConfigError::invalid(KEY, why));
    // Without a scheme the gRPC exporter assumes `https://` (the OTLP spec's default).
    let Some((scheme, _)) = v.split_once("://") else {
        return refuse(format!(
            "must be a URL with its scheme, like `{example}`, got `{v}`"
        ));
    };
    if scheme.eq_ignore_ascii_case("https") {
        return refuse(format!(
            "`{v}`: this build of faultline has no TLS support, so `https://` endpoints \
             cannot be reached; use `http://`, like `{example}` (a collector on this host \
             or a TLS-terminating proxy)"
        ));
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return refuse(format!(
            "scheme `{scheme}` is not supported in `{v}`: use `http://`, like `{example}`"
        ));
    }
    let uri = match v.parse::<Uri>() {
        Ok(uri) => uri,
        Err(e) => return refuse(format!("must be a URL like `{example}`, got `{v}` ({e})")),
    };
    if uri.host().is_none_or(str::is_empty) {
        return refuse(format!(
            "`{v}` has no host; expected a URL like `{example}`"
        ));
    }
    // `/v1/metrics` and `/v1/logs` are appended to it for HTTP: they would land in the
    // query or fragment.
    if uri.query().is_some() || v.contains('#') {
        return refuse(format!(
            "`{v}` must not have a query (`?…`) or fragment (`#…`), like `{example}`"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::check;
    use crate::sinks::otlp::{OtlpProtocol, OtlpSinkConfig};

    fn reason(endpoint: &str, protocol: OtlpProtocol) -> Option<String> {
        let cfg = OtlpSinkConfig {
            endpoint: Some(endpoint.to_owned()),
            protocol,
            ..OtlpSinkConfig::default()
        };
        check(&cfg).err().map(|e| e.to_string())
    }

    #[test]
    fn only_plain_http_urls_with_a_host_pass() {
        for ok in [
            "http://collector:4317",
            "http://127.0.0.1:4317/",
            "http://[::1]:4318",
            "http://collector.example.com:4318/otlp",
        ] {
            assert_eq!(reason(ok, OtlpProtocol::Grpc), None, "{ok}");
        }
        for (bad, expected) in [
            (
                "collector:4317",
                "must be a URL with its scheme, like `http://collector:4317`",
            ),
            ("", "must be a URL with its scheme"),
            ("https://collector:4317", "no TLS support"),
            ("grpc://collector:4317", "scheme `grpc` is not supported"),
            ("http://:4317", "has no host"),
            ("http://collector:4317?x=1", "must not have a query"),
            ("http://collector:4317#x", "must not have a query"),
            ("http://coll ector:4317", "must be a URL like"),
        ] {
            let e = reason(bad, OtlpProtocol::Grpc).unwrap_or_default();
            let named = e.starts_with("sinks.otlp.endpoint: ");
            assert!(named && e.contains(expected), "{bad:?}: {e}");
        }
        let e = reason("collector:4318", OtlpProtocol::Http).unwrap_or_default();
        assert!(e.contains("`http://collector:4318`"), "{e}");
    }
}
