//! Which target a batch belongs to: configured `[[targets]]` matchers, or (with none
//! configured) one target per distinct service/process name, capped so label values
//! taken from input can never grow without bound.

use std::collections::HashSet;
use std::sync::Arc;

use super::telemetry::DropReason;
use crate::config::TargetConfig;
use crate::model::ProcessInfo;

/// Longest target name kept from input; longer names are cut (on a char boundary).
pub const MAX_TARGET_NAME_CHARS: usize = 128;

/// Maps [`ProcessInfo`] to a target name.
#[derive(Debug)]
pub struct Router {
    targets: Vec<(Arc<str>, TargetConfig)>,
    /// Names discovered automatically, only used when no target is configured.
    discovered: HashSet<Arc<str>>,
    max_targets: usize,
}

impl Router {
    /// A router over the configured targets; with none, discovery up to `max_targets`.
    pub fn new(targets: &[TargetConfig], max_targets: usize) -> Self {
        Self {
            targets: targets
                .iter()
                .map(|t| (Arc::from(t.name.trim()), t.clone()))
                .collect(),
            discovered: HashSet::new(),
            max_targets: max_targets.max(1),
        }
    }

    /// True when targets come from input rather than configuration.
    pub fn is_automatic(&self) -> bool {
        self.targets.is_empty()
    }

    /// The target of `p`, or why its events are dropped (`no_target` when nothing matches
    /// or the process has no name, `capped` when discovery is full).
    pub fn route(&mut self, p: &ProcessInfo) -> Result<Arc<str>, DropReason> {
        self.route_with(p, true)
    }

    /// Like [`Router::route`], but a name not yet discovered stays undiscovered: for
    /// records that make no target in the engine (TCP segment readings, which come for
    /// every process of a namespace and from OTLP metric senders), so they never take a
    /// discovery slot a service with calls would need.
    pub fn route_without_discovery(&mut self, p: &ProcessInfo) -> Result<Arc<str>, DropReason> {
        self.route_with(p, false)
    }

    fn route_with(&mut self, p: &ProcessInfo, discover: bool) -> Result<Arc<str>, DropReason> {
        if !self.targets.is_empty() {
            return self
                .targets
                .iter()
                .find(|(_, t)| matches(t, p))
                .map(|(n, _)| n.clone())
                .ok_or(DropReason::NoTarget);
        }
        let raw = p
            .service_name
            .as_deref()
            .or(p.comm.as_deref())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or(DropReason::NoTarget)?;
        let name = sanitize(raw);
        if let Some(n) = self.discovered.get(name.as_str()) {
            return Ok(n.clone());
        }
        if !discover {
            // The engine counts these records as untargeted (it has no such target).
            return Ok(Arc::from(name));
        }
        if self.discovered.len() >= self.max_targets {
            return Err(DropReason::Capped);
        }
        let n: Arc<str> = Arc::from(name);
        self.discovered.insert(n.clone());
        Ok(n)
    }
}

fn matches(t: &TargetConfig, p: &ProcessInfo) -> bool {
    p.pid.is_some_and(|pid| t.pids.contains(&pid))
        || p.comm
            .as_deref()
            .is_some_and(|c| t.process_names.iter().any(|n| n == c))
        || p.service_name
            .as_deref()
            .is_some_and(|s| t.service_names.iter().any(|n| n == s))
        || p.cgroup.as_deref().is_some_and(|c| {
            t.cgroups
                .iter()
                .any(|n| !n.is_empty() && c.contains(n.as_str()))
        })
}

/// Keeps names printable and short, since they become metric label values.
fn sanitize(raw: &str) -> String {
    raw.chars()
        .take(MAX_TARGET_NAME_CHARS)
        .map(|c| if c.is_control() { '_' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(comm: &str) -> ProcessInfo {
        ProcessInfo {
            comm: Some(comm.to_owned()),
            ..ProcessInfo::default()
        }
    }

    #[test]
    fn configured_targets_match_in_order_and_others_are_no_target() {
        let t = vec![
            TargetConfig {
                name: "db".into(),
                process_names: vec!["mariadbd".into()],
                ..TargetConfig::default()
            },
            TargetConfig {
                name: "web".into(),
                service_names: vec!["frontend".into()],
                cgroups: vec!["docker-abc".into()],
                ..TargetConfig::default()
            },
        ];
        let mut r = Router::new(&t, 8);
        assert_eq!(r.route(&proc("mariadbd")).as_deref(), Ok("db"));
        let svc = ProcessInfo {
            service_name: Some("frontend".into()),
            ..ProcessInfo::default()
        };
        assert_eq!(r.route(&svc).as_deref(), Ok("web"));
        let cg = ProcessInfo {
            cgroup: Some("/sys/fs/cgroup/docker-abc.scope".into()),
            ..ProcessInfo::default()
        };
        assert_eq!(r.route(&cg).as_deref(), Ok("web"));
        assert_eq!(r.route(&proc("bash")), Err(DropReason::NoTarget));
    }

    #[test]
    fn discovery_prefers_service_name_and_is_capped() {
        let mut r = Router::new(&[], 2);
        let both = ProcessInfo {
            comm: Some("java".into()),
            service_name: Some("checkout".into()),
            ..ProcessInfo::default()
        };
        assert_eq!(r.route(&both).as_deref(), Ok("checkout"));
        assert_eq!(r.route(&proc("nginx")).as_deref(), Ok("nginx"));
        assert_eq!(r.route(&proc("redis")), Err(DropReason::Capped));
        // Known names keep routing after the cap is reached.
        assert_eq!(r.route(&proc("nginx")).as_deref(), Ok("nginx"));
        assert_eq!(r.route(&ProcessInfo::default()), Err(DropReason::NoTarget));
    }

    #[test]
    fn records_that_make_no_target_take_no_discovery_slot() {
        let mut r = Router::new(&[], 1);
        // Segment readings of a process that made no call: routed by name, not discovered.
        assert_eq!(
            r.route_without_discovery(&proc("sshd")).as_deref(),
            Ok("sshd")
        );
        // So the only slot is still free for a service with calls.
        assert_eq!(r.route(&proc("nginx")).as_deref(), Ok("nginx"));
        assert_eq!(
            r.route_without_discovery(&proc("nginx")).as_deref(),
            Ok("nginx")
        );
        assert_eq!(r.route(&proc("sshd")), Err(DropReason::Capped));
    }

    #[test]
    fn discovered_names_are_bounded_and_printable() {
        let mut r = Router::new(&[], 2);
        let long = "x\n".repeat(500);
        let name = r.route(&proc(&long)).unwrap_or_else(|_| Arc::from(""));
        assert_eq!(name.chars().count(), MAX_TARGET_NAME_CHARS);
        assert!(!name.contains('\n'));
    }
}
