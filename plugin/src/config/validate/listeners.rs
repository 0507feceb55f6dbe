//! The sockets `faultline run` listens on: each a literal `ip:port`, and no two enabled
//! ones on a port Linux would refuse the second of. Caught here so that `check-config`
//! (systemd's `ExecStartPre=`) fails, not every restart of `run` at bind time.

use std::net::{IpAddr, SocketAddr};

use crate::config::{Config, ConfigError};

/// Checks every listen address, then that the enabled listeners can all bind at once.
pub(super) fn check(cfg: &Config) -> Result<(), ConfigError> {
    let otlp = &cfg.sources.otlp;
    let prometheus = &cfg.sinks.prometheus;
    let listeners = [
        (
            "sources.otlp.grpc",
            otlp.receiver.grpc.as_deref(),
            otlp.enabled,
        ),
        (
            "sources.otlp.http",
            otlp.receiver.http.as_deref(),
            otlp.enabled,
        ),
        (
            "sinks.prometheus.listen",
            Some(prometheus.listen.as_str()),
            prometheus.enabled,
        ),
    ];
    let mut bound: Vec<(&str, SocketAddr)> = Vec::new();
    for (key, value, enabled) in listeners {
        let Some(value) = value else { continue };
        // Checked even when off, so that turning the listener on later cannot fail.
        let addr = address(key, value)?;
        if !enabled {
            continue;
        }
        let taken = bound
            .iter()
            .find_map(|&(other, at)| clash(at, addr).map(|why| (other, at, why)));
        if let Some((other, at, why)) = taken {
            return Err(ConfigError::invalid(
                key,
                format!(
                    "`{addr}` and {other} (`{at}`) cannot both listen on port {}: {why}",
                    addr.port()
                ),
            ));
        }
        bound.push((key, addr));
    }
    Ok(())
}

/// A listen address must be a literal `ip:port` so we never resolve names at startup.
fn address(key: &str, v: &str) -> Result<SocketAddr, ConfigError> {
    v.parse::<SocketAddr>().map_err(|e| {
        ConfigError::invalid(
            key,
            format!("must be an `ip:port` address, got `{v}` ({e})"),
        )
    })
}

/// Why Linux refuses to bind `b` while `a` listens (or the reverse), if it does.
///
/// Port 0 asks for a free port each time, so never clashes. An unspecified address takes
/// the port on every address of its family, and `[::]` on IPv4 too (dual stack, Linux's
/// default `net.ipv6.bindv6only = 0`); an IPv4-mapped IPv6 address is that IPv4 address.
fn clash(a: SocketAddr, b: SocketAddr) -> Option<&'static str> {
    if a.port() != b.port() || a.port() == 0 {
        return None;
    }
    let (a, b) = (canonical(a.ip()), canonical(b.ip()));
    if a == b {
        return Some("the same address");
    }
    [(a, b), (b, a)]
        .into_iter()
        .find_map(|(wide, other)| match wide {
            IpAddr::V4(w) if w.is_unspecified() && other.is_ipv4() => {
                Some("`0.0.0.0` listens on every IPv4 address")
            }
            IpAddr::V6(w) if w.is_unspecified() => {
                Some("`[::]` listens on every IPv6 and IPv4 address")
            }
            _ => None,
        })
}

fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

#[cfg(test)]
mod tests {
    use super::clash;

    fn clashes(a: &str, b: &str) -> bool {
        let (Ok(a), Ok(b)) = (a.parse(), b.parse()) else {
            panic!("test addresses must parse: {a}, {b}");
        };
        clash(a, b).is_some() && clash(b, a).is_some()
    }

    /// The pairs as Linux answers them (checked with two listening sockets, SO_REUSEADDR
    /// set as tokio does, `net.ipv6.bindv6only = 0`).
    #[test]
    fn clashes_follow_linux_bind_rules() {
        for (a, b) in [
            ("127.0.0.1:4317", "127.0.0.1:4317"),
            ("0.0.0.0:4317", "127.0.0.1:4317"),
            ("0.0.0.0:4317", "0.0.0.0:4317"),
            ("[::]:4317", "127.0.0.1:4317"),
            ("[::]:4317", "[::1]:4317"),
            ("[::ffff:127.0.0.1]:4317", "127.0.0.1:4317"),
        ] {
            assert!(clashes(a, b), "{a} vs {b} should clash");
        }
        for (a, b) in [
            ("127.0.0.1:4317", "127.0.0.1:4318"),
            ("127.0.0.1:4317", "127.0.0.2:4317"),
            ("[::1]:4317", "127.0.0.1:4317"),
            ("0.0.0.0:4317", "[::1]:4317"),
            ("127.0.0.1:0", "127.0.0.1:0"),
            ("0.0.0.0:0", "127.0.0.1:0"),
        ] {
            assert!(!clashes(a, b), "{a} vs {b} should not clash");
        }
    }
}
