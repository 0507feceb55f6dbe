//! This host's name, as `hostname` prints it unless configured: the OTLP push names its
//! resource by it, and the router tells this host's processes from other hosts' (OTLP
//! `host.name`) by it.

/// Where the kernel keeps the host name (what `hostname` prints, also under systemd's
/// `ProtectHostname=`).
pub const FILE: &str = "/proc/sys/kernel/hostname";

/// This host's name, or why there is none (for the caller's warning).
pub fn local() -> Result<String, String> {
    from(std::fs::read_to_string(FILE))
}

/// The configured name (`[pipeline].host_name`) when set, else [`local`]: in a container
/// the kernel's name is the container's, not the node's its services report.
pub fn resolve(configured: Option<&str>) -> Result<String, String> {
    match configured.map(str::trim).filter(|n| !n.is_empty()) {
        Some(name) => Ok(name.to_string()),
        None => local(),
    }
}

fn from(read: std::io::Result<String>) -> Result<String, String> {
    match read.as_deref().map(str::trim) {
        Ok(name) if !name.is_empty() => Ok(name.to_string()),
        Ok(_) => Err(format!("{FILE} is empty")),
        Err(e) => Err(format!("cannot read {FILE}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_name_is_trimmed_and_missing_when_empty_or_unreadable() {
        assert_eq!(from(Ok("db1\n".into())), Ok("db1".into()));
        assert!(from(Ok(" \n".into())).is_err_and(|e| e.contains("empty")));
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(from(Err(gone)).is_err_and(|e| e.contains("cannot read")));
    }

    #[test]
    fn a_configured_name_wins_over_the_kernels() {
        assert_eq!(resolve(Some(" node-7 ")), Ok("node-7".into()));
        assert_eq!(resolve(None), local());
        assert_eq!(resolve(Some("")), local());
    }
}
