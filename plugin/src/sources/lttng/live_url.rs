//! An LTTng live session's address, `net://RELAYD[:PORT]/host/HOST/SESSION`: checked
//! when the config is, so a typo is an error at start rather than a babeltrace2 failure
//! later; and it names the traced host, whose processes are that host's (a relay daemon
//! collects sessions of many hosts).

/// The schemes babeltrace2's `lttng-live` input takes (`net4`/`net6` pin the IP version).
const SCHEMES: [&str; 3] = ["net://", "net4://", "net6://"];

/// Whether `input` is a live session's address rather than a trace directory.
pub fn is_live(input: &str) -> bool {
    SCHEMES.iter().any(|s| input.starts_with(s))
}

/// The parts of a live session's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveUrl<'a> {
    /// The relay daemon, `HOST[:PORT]`.
    pub relayd: &'a str,
    /// The traced host, as its session daemon names it (its `hostname`).
    pub traced_host: &'a str,
    pub session: &'a str,
}

/// Splits `url`, or says what shape it must have.
pub fn parse(url: &str) -> Result<LiveUrl<'_>, String> {
    let shape = || {
        format!(
            "expected net://RELAYD[:PORT]/host/HOST/SESSION (an LTTng live session), got `{url}`"
        )
    };
    let rest = SCHEMES
        .iter()
        .find_map(|s| url.strip_prefix(s))
        .ok_or_else(shape)?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts[..] {
        [relayd, "host", traced_host, session]
            if [relayd, traced_host, session]
                .iter()
                .all(|p| !p.trim().is_empty() && !p.chars().any(char::is_control)) =>
        {
            Ok(LiveUrl {
                relayd,
                traced_host,
                session,
            })
        }
        _ => Err(shape()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_address_names_its_relay_host_and_session() {
        let url = parse("net://relay.example.com:5344/host/db-2/mysession");
        assert_eq!(
            url,
            Ok(LiveUrl {
                relayd: "relay.example.com:5344",
                traced_host: "db-2",
                session: "mysession",
            })
        );
        assert_eq!(
            parse("net6://[::1]/host/db-1/s").map(|u| u.traced_host),
            Ok("db-1")
        );
        for bad in [
            "net://localhost",
            "net://localhost/host/db-2",
            "net://localhost/hosts/db-2/s",
            "net://localhost/host//s",
            "net:///host/db-2/s",
            "net://localhost/host/db-2/s/extra",
            "http://localhost/host/db-2/s",
            "/var/lib/lttng/trace",
        ] {
            assert!(
                parse(bad).is_err_and(|e| e.contains("expected net://")),
                "{bad}"
            );
        }
        assert!(is_live("net4://r/host/h/s") && !is_live("./net://"));
    }
}
