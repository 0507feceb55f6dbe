//! Which target a batch belongs to: configured `[[targets]]` matchers, or (with none
//! configured) one target per distinct service/process name, capped so label values
//! taken from input can never grow without bound. A discovered name (or another host's
//! target of a configured one) idle for [`DISCOVERED_IDLE`] gives its slot to a new name
//! once the cap is reached, so short-lived helpers (a health check's `curl`) and hosts
//! gone from a fleet cannot hold the slots for good.
//!
//! A target is one service on one host: PerfCompass reads a fault that reaches every
//! thread at once as the environment's, and a service's threads on two hosts share no
//! environment (a CPU cap on one host hits a subset of "its" threads, which would read as
//! a bug), nor a thread-id space (tid 100 on one host is not tid 100 on another). So the
//! processes of another host than this one (OTLP's `host.name`, when a Collector gateway
//! forwards several hosts' records) route to `NAME@HOST`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::telemetry::DropReason;
use crate::config::TargetConfig;
use crate::model::ProcessInfo;

/// Longest target name kept from input; longer names are cut (on a char boundary).
pub const MAX_TARGET_NAME_CHARS: usize = 128;

/// Wall-clock time a discovered name must have routed no batch before a new name may take
/// its slot. Well past the analysis window (90 s by default) and the cadence, so a frozen
/// service's "no system call" reports have long been made; shorter would lose a silent
/// target's state while its silence is still the news.
pub const DISCOVERED_IDLE: Duration = Duration::from_secs(600);

/// A routed batch's target, and the discovered (or another host's) target it displaced,
/// if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Routed {
    pub target: Arc<str>,
    /// The caller must drop what it keeps of this target (it is no longer routed to).
    pub evicted: Option<Evicted>,
    /// `target` is new, for another host's processes of the configured target named here:
    /// it takes that target's parameters (a calibrated α and β hold for every host of a
    /// service) before its first batch.
    pub params_of: Option<Arc<str>>,
}

/// A discovered target, or another host's target of a configured one, whose slot went to
/// a new name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evicted {
    pub target: Arc<str>,
    /// How long it had routed no batch.
    pub idle: Duration,
}

/// Maps [`ProcessInfo`] to a target name.
#[derive(Debug)]
pub struct Router {
    targets: Vec<(Arc<str>, TargetConfig)>,
    /// Names discovered automatically (only used when no target is configured), with
    /// when each last routed a batch that discovers.
    discovered: HashMap<Arc<str>, Instant>,
    max_targets: usize,
    /// Whether an idle discovered name gives way to a new one.
    evicts: bool,
    /// This host's name: processes of another host route to `NAME@HOST`.
    local_host: Option<String>,
    /// Targets of configured ones' processes on other hosts, with when each last routed a
    /// batch (capped with the configured ones at `max_targets`; one idle for
    /// [`DISCOVERED_IDLE`] gives its slot to a new host's, as a discovered name does: hosts
    /// come and go, an autoscaled fleet's would take every slot for good).
    remote_configured: HashMap<Arc<str>, Instant>,
}

impl Router {
    /// A router over the configured targets; with none, discovery up to `max_targets`.
    pub fn new(targets: &[TargetConfig], max_targets: usize) -> Self {
        Self {
            targets: targets
                .iter()
                .map(|t| (Arc::from(t.name.trim()), t.clone()))
                .collect(),
            discovered: HashMap::new(),
            max_targets: max_targets.max(1),
            evicts: true,
            local_host: None,
            remote_configured: HashMap::new(),
        }
    }

    /// Names this host, so processes of another host (a record's `host.name`) route to
    /// `NAME@HOST`; without it (recorded traces read elsewhere) every host is this one.
    pub fn with_local_host(mut self, name: Option<String>) -> Self {
        self.local_host = name.filter(|n| !n.trim().is_empty());
        self
    }

    /// The host of `p` when it is another than this one.
    fn remote_host<'a>(&self, p: &'a ProcessInfo) -> Option<&'a str> {
        let local = self.local_host.as_deref()?;
        let host = p.host.as_deref().map(str::trim).filter(|h| !h.is_empty())?;
        (!same_host(host, local.trim())).then_some(host)
    }

    /// The host of `p`: its own when it names one, else this host (sources that read this
    /// host's kernel name none).
    fn host_of<'a>(&'a self, p: &'a ProcessInfo) -> Option<&'a str> {
        p.host
            .as_deref()
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .or(self.local_host.as_deref())
    }

    /// Never evicts a discovered name: a recorded trace is read far faster than it was
    /// made, so the wall clock of the reading says nothing of a service's idleness.
    pub fn without_eviction(mut self) -> Self {
        self.evicts = false;
        self
    }

    /// True when targets come from input rather than configuration.
    pub fn is_automatic(&self) -> bool {
        self.targets.is_empty()
    }

    /// The target of `p` at wall-clock time `now`, or why its events are dropped
    /// (`no_target` when nothing matches or the process has no name, `capped` when
    /// discovery is full and no discovered name was idle for [`DISCOVERED_IDLE`]).
    pub fn route(&mut self, p: &ProcessInfo, now: Instant) -> Result<Routed, DropReason> {
        self.route_with(p, Some(now))
    }

    /// Like [`Router::route`], but a name not yet discovered stays undiscovered: for
    /// records that make no target in the engine (TCP segment readings, which come for
    /// every process of a namespace and from OTLP metric senders), so they never take a
    /// discovery slot a service with calls would need. Nor do they keep a name from
    /// being idle: they come whether the process makes calls or not.
    pub fn route_without_discovery(&mut self, p: &ProcessInfo) -> Result<Arc<str>, DropReason> {
        self.route_with(p, None).map(|r| r.target)
    }

    /// `now`: discover (and stamp) at that time; `None`: no discovery.
    fn route_with(&mut self, p: &ProcessInfo, now: Option<Instant>) -> Result<Routed, DropReason> {
        let routed = |target: Arc<str>| Routed {
            target,
            evicted: None,
            params_of: None,
        };
        let remote = self.remote_host(p);
        if !self.targets.is_empty() {
            let host = self.host_of(p);
            let (base, pinned) = self
                .targets
                .iter()
                .find(|(_, t)| matches(t, p, remote.is_none()) && on_hosts(t, host))
                .map(|(n, t)| (n.clone(), t.hosts.len() == 1))
                .ok_or(DropReason::NoTarget)?;
            // A target of one host is that host's service: no `NAME@HOST` of it. One of
            // several hosts still analyses each apart (their threads share nothing).
            let Some(host) = remote.filter(|_| !pinned) else {
                return Ok(routed(base));
            };
            let name = on_host(&base, host);
            if let Some((n, last)) = self.remote_configured.get_key_value(name.as_str()) {
                let n = n.clone();
                if let Some(now) = now.filter(|now| now > last) {
                    self.remote_configured.insert(n.clone(), now);
                }
                return Ok(routed(n));
            }
            // Configured by that name (`faultline calibrate --host` names a host's block
            // so), wherever it is listed: that target, with its own parameters.
            if let Some((n, _)) = self.targets.iter().find(|(n, _)| **n == *name) {
                return Ok(routed(n.clone()));
            }
            let Some(now) = now else {
                return Ok(routed(Arc::from(name)));
            };
            let mut evicted = None;
            if self.targets.len() + self.remote_configured.len() >= self.max_targets {
                evicted = evict_idle(&mut self.remote_configured, now, self.evicts);
                if evicted.is_none() {
                    return Err(DropReason::Capped);
                }
            }
            let n: Arc<str> = Arc::from(name);
            self.remote_configured.insert(n.clone(), now);
            return Ok(Routed {
                evicted,
                params_of: Some(base),
                ..routed(n)
            });
        }
        let raw = p
            .service_name
            .as_deref()
            .or(p.comm.as_deref())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .ok_or(DropReason::NoTarget)?;
        let name = match remote {
            Some(host) => on_host(&unhosted(raw), host),
            None => unhosted(raw),
        };
        if let Some((n, last)) = self.discovered.get_key_value(name.as_str()) {
            let n = n.clone();
            if let Some(now) = now.filter(|now| now > last) {
                self.discovered.insert(n.clone(), now);
            }
            return Ok(routed(n));
        }
        let Some(now) = now else {
            // The engine counts these records as untargeted (it has no such target).
            return Ok(routed(Arc::from(name)));
        };
        let mut evicted = None;
        if self.discovered.len() >= self.max_targets {
            evicted = evict_idle(&mut self.discovered, now, self.evicts);
            if evicted.is_none() {
                return Err(DropReason::Capped);
            }
        }
        let n: Arc<str> = Arc::from(name);
        self.discovered.insert(n.clone(), now);
        Ok(Routed {
            evicted,
            ..routed(n)
        })
    }

    /// Marks discovered (or another host's) `target` as active at `now` without a batch: the silence watch
    /// moved its clock, so its processes live on and its reports (a frozen service's "no
    /// system call") are still the news; eviction must not take its slot.
    pub fn touch(&mut self, target: &str, now: Instant) {
        for names in [&mut self.discovered, &mut self.remote_configured] {
            if let Some(at) = names.get_mut(target) {
                *at = (*at).max(now);
            }
        }
    }
}

/// Removes from `names` the one that routed least recently, if `evicts` and it has been
/// idle for [`DISCOVERED_IDLE`] at `now` (ties go to the first name, so runs are
/// reproducible).
fn evict_idle(
    names: &mut HashMap<Arc<str>, Instant>,
    now: Instant,
    evicts: bool,
) -> Option<Evicted> {
    if !evicts {
        return None;
    }
    let (name, last) = names
        .iter()
        .min_by(|(a, ta), (b, tb)| ta.cmp(tb).then_with(|| a.cmp(b)))?;
    let idle = now.saturating_duration_since(*last);
    if idle < DISCOVERED_IDLE {
        return None;
    }
    let target = name.clone();
    names.remove(&target);
    Some(Evicted { target, idle })
}

/// Whether `p` belongs to `t`. Pids and cgroups name processes of this host only
/// (`local`): pid 1234 of another host is another process.
fn matches(t: &TargetConfig, p: &ProcessInfo, local: bool) -> bool {
    local && p.pid.is_some_and(|pid| t.pids.contains(&pid))
        || p.comm
            .as_deref()
            .is_some_and(|c| t.process_names.iter().any(|n| n == c))
        || p.service_name
            .as_deref()
            .is_some_and(|s| t.service_names.iter().any(|n| n == s))
        || local
            && p.cgroup.as_deref().is_some_and(|c| {
                t.cgroups
                    .iter()
                    .any(|n| !n.is_empty() && c.contains(n.as_str()))
            })
}

/// Whether a process of `host` may belong to `t`: any host's when `t` names none.
fn on_hosts(t: &TargetConfig, host: Option<&str>) -> bool {
    t.hosts.is_empty() || host.is_some_and(|h| t.hosts.iter().any(|n| same_host(h, n.trim())))
}

/// Whether host names `a` and `b` name one host: without case, as DNS compares, and a
/// short name the same as a fully qualified one it begins (an SDK's or the Collector's
/// host detector may say `db-1.example.com` where `hostname` says `db-1`).
fn same_host(a: &str, b: &str) -> bool {
    // Per batch: compared in place, nothing allocated.
    fn short(n: &str) -> &str {
        n.split('.').next().unwrap_or(n)
    }
    if a.contains('.') && b.contains('.') {
        a.eq_ignore_ascii_case(b)
    } else {
        short(a).eq_ignore_ascii_case(short(b))
    }
}

/// The target of service `name`'s processes on another host, `host`: `NAME@HOST`, cut to
/// [`MAX_TARGET_NAME_CHARS`] from the service's end so the host stays readable.
fn on_host(name: &str, host: &str) -> String {
    let host = unhosted(host);
    let room = MAX_TARGET_NAME_CHARS.saturating_sub(host.chars().count() + 1);
    let mut out: String = name.chars().take(room).map(printable).collect();
    out.push('@');
    out.push_str(&host);
    // A host as long as the cap leaves the service no room: cut at the cap.
    if let Some((end, _)) = out.char_indices().nth(MAX_TARGET_NAME_CHARS) {
        out.truncate(end);
    }
    out
}

/// A name from input, printable, short, and without `@` (as `_`): there `@` would read as
/// the host part of `NAME@HOST` (the alerts and the dashboard count a service's hosts by
/// it). Names become metric label values.
fn unhosted(raw: &str) -> String {
    // Per batch: one pass, one allocation.
    raw.chars()
        .take(MAX_TARGET_NAME_CHARS)
        .map(|c| if c == '@' { '_' } else { printable(c) })
        .collect()
}

fn printable(c: char) -> char {
    if c.is_control() {
        '_'
    } else {
        c
    }
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

    /// Routes at one fixed time (these tests are not about idleness).
    fn route(r: &mut Router, p: &ProcessInfo) -> Result<Arc<str>, DropReason> {
        let routed = r.route(p, Instant::now())?;
        assert_eq!(routed.evicted, None);
        Ok(routed.target)
    }

    /// Routes at `at_s` seconds after `t0`, answering the target and the evicted name.
    fn route_at(
        r: &mut Router,
        t0: Instant,
        at_s: u64,
        name: &str,
    ) -> Result<(String, Option<String>), DropReason> {
        let routed = r.route(&proc(name), t0 + Duration::from_secs(at_s))?;
        let evicted = routed.evicted.map(|e| e.target.to_string());
        Ok((routed.target.to_string(), evicted))
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
        assert_eq!(route(&mut r, &proc("mariadbd")).as_deref(), Ok("db"));
        let svc = ProcessInfo {
            service_name: Some("frontend".into()),
            ..ProcessInfo::default()
        };
        assert_eq!(route(&mut r, &svc).as_deref(), Ok("web"));
        let cg = ProcessInfo {
            cgroup: Some("/sys/fs/cgroup/docker-abc.scope".into()),
            ..ProcessInfo::default()
        };
        assert_eq!(route(&mut r, &cg).as_deref(), Ok("web"));
        assert_eq!(route(&mut r, &proc("bash")), Err(DropReason::NoTarget));
    }

    #[test]
    fn discovery_prefers_service_name_and_is_capped() {
        let mut r = Router::new(&[], 2);
        let both = ProcessInfo {
            comm: Some("java".into()),
            service_name: Some("checkout".into()),
            ..ProcessInfo::default()
        };
        assert_eq!(route(&mut r, &both).as_deref(), Ok("checkout"));
        assert_eq!(route(&mut r, &proc("nginx")).as_deref(), Ok("nginx"));
        assert_eq!(route(&mut r, &proc("redis")), Err(DropReason::Capped));
        // Known names keep routing after the cap is reached.
        assert_eq!(route(&mut r, &proc("nginx")).as_deref(), Ok("nginx"));
        assert_eq!(
            route(&mut r, &ProcessInfo::default()),
            Err(DropReason::NoTarget)
        );
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
        assert_eq!(route(&mut r, &proc("nginx")).as_deref(), Ok("nginx"));
        assert_eq!(
            r.route_without_discovery(&proc("nginx")).as_deref(),
            Ok("nginx")
        );
        assert_eq!(route(&mut r, &proc("sshd")), Err(DropReason::Capped));
    }

    #[test]
    fn discovered_names_are_bounded_and_printable() {
        let mut r = Router::new(&[], 2);
        let long = "x\n".repeat(500);
        let name = route(&mut r, &proc(&long)).unwrap_or_else(|_| Arc::from(""));
        assert_eq!(name.chars().count(), MAX_TARGET_NAME_CHARS);
        assert!(!name.contains('\n'));
    }

    const IDLE_S: u64 = DISCOVERED_IDLE.as_secs();

    #[test]
    fn a_new_name_takes_the_slot_of_the_least_recent_name_idle_long_enough() {
        let t0 = Instant::now();
        let mut r = Router::new(&[], 2);
        let ok = |t: &str, e: Option<&str>| Ok((t.to_owned(), e.map(str::to_owned)));
        assert_eq!(route_at(&mut r, t0, 0, "curl"), ok("curl", None));
        assert_eq!(route_at(&mut r, t0, 5, "web"), ok("web", None));
        // Both routed within DISCOVERED_IDLE: the new name is capped, as before.
        assert_eq!(
            route_at(&mut r, t0, IDLE_S - 1, "sh"),
            Err(DropReason::Capped)
        );
        // A batch keeps a name active: `web` routes again, `curl` does not.
        assert_eq!(route_at(&mut r, t0, IDLE_S - 1, "web"), ok("web", None));
        // `curl` has been idle DISCOVERED_IDLE: `sh` takes its slot, the caller is told.
        assert_eq!(route_at(&mut r, t0, IDLE_S, "sh"), ok("sh", Some("curl")));
        let idle = r.route(&proc("sh2"), t0 + DISCOVERED_IDLE);
        assert_eq!(
            idle,
            Err(DropReason::Capped),
            "`web` is not idle long enough yet"
        );
        // The least recent goes first: `web` (last at IDLE_S - 1) before `sh` (IDLE_S).
        let later = t0 + Duration::from_secs(3 * IDLE_S);
        let routed = r.route(&proc("cron"), later).expect("a slot");
        let evicted = routed.evicted.expect("an eviction");
        assert_eq!(&*evicted.target, "web");
        assert_eq!(evicted.idle, Duration::from_secs(2 * IDLE_S + 1));
        // An evicted name is new again: it takes a slot as any new name (`sh`'s).
        let web = route_at(&mut r, t0, 3 * IDLE_S, "web");
        assert_eq!(web, ok("web", Some("sh")));
        assert_eq!(route_at(&mut r, t0, 3 * IDLE_S, "cron"), ok("cron", None));
        let both_active = route_at(&mut r, t0, 3 * IDLE_S + 1, "sh");
        assert_eq!(both_active, Err(DropReason::Capped));
    }

    #[test]
    fn a_silent_target_whose_clock_moves_on_is_not_evicted() {
        let t0 = Instant::now();
        let mut r = Router::new(&[], 1);
        assert!(route_at(&mut r, t0, 0, "frozen").is_ok());
        r.touch("frozen", t0 + Duration::from_secs(IDLE_S - 1));
        r.touch("unknown", t0 + Duration::from_secs(IDLE_S - 1));
        assert_eq!(route_at(&mut r, t0, IDLE_S, "sh"), Err(DropReason::Capped));
        let later = route_at(&mut r, t0, 2 * IDLE_S, "sh");
        assert_eq!(later, Ok(("sh".to_owned(), Some("frozen".to_owned()))));
    }

    #[test]
    fn segment_readings_do_not_keep_a_name_active() {
        let t0 = Instant::now();
        let mut r = Router::new(&[], 1);
        assert!(route_at(&mut r, t0, 0, "curl").is_ok());
        // Readings of its namespace keep coming, calls do not.
        let seg = r.route_without_discovery(&proc("curl"));
        assert_eq!(seg.as_deref(), Ok("curl"));
        let routed = route_at(&mut r, t0, IDLE_S, "web");
        assert_eq!(routed, Ok(("web".into(), Some("curl".into()))));
    }

    fn on(host: Option<&str>, service: &str) -> ProcessInfo {
        ProcessInfo {
            service_name: Some(service.into()),
            host: host.map(str::to_owned),
            ..ProcessInfo::default()
        }
    }

    #[test]
    fn another_hosts_processes_are_another_target() {
        let mut r = Router::new(&[], 3).with_local_host(Some("db-1".into()));
        // This host's, whatever the case of its name or however qualified, or no host at
        // all: the plain name.
        for host in [
            None,
            Some("db-1"),
            Some("DB-1"),
            Some("db-1.example.com"),
            Some(" "),
        ] {
            assert_eq!(route(&mut r, &on(host, "mysql")).as_deref(), Ok("mysql"));
        }
        assert_eq!(
            route(&mut r, &on(Some("db-2"), "mysql")).as_deref(),
            Ok("mysql@db-2")
        );
        assert_eq!(
            route(&mut r, &on(Some("db-3"), "mysql")).as_deref(),
            Ok("mysql@db-3")
        );
        // Each host's target takes a discovery slot of its own.
        assert_eq!(
            route(&mut r, &on(Some("db-4"), "mysql")),
            Err(DropReason::Capped)
        );
        // Without a name for this host (unreadable), every host is this one.
        let mut blind = Router::new(&[], 3);
        assert_eq!(
            route(&mut blind, &on(Some("db-2"), "mysql")).as_deref(),
            Ok("mysql")
        );
    }

    #[test]
    fn another_hosts_processes_of_a_configured_target_take_its_parameters_and_give_way_when_idle() {
        let cfg = vec![TargetConfig {
            name: "db".into(),
            service_names: vec!["mysql".into()],
            ..TargetConfig::default()
        }];
        let mut r = Router::new(&cfg, 2).with_local_host(Some("db-1".into()));
        let t0 = Instant::now();
        let routed = r.route(&on(Some("db-1"), "mysql"), t0);
        assert_eq!(
            routed.map(|r| (r.target, r.params_of)),
            Ok(("db".into(), None))
        );
        // The first batch of another host's makes its target, told to take db's parameters.
        let routed = r.route(&on(Some("db-2"), "mysql"), t0).expect("routed");
        assert_eq!(&*routed.target, "db@db-2");
        assert_eq!(routed.params_of.as_deref(), Some("db"));
        // Once only.
        let later = t0 + DISCOVERED_IDLE / 2;
        let again = r.route(&on(Some("db-2"), "mysql"), later).expect("routed");
        assert_eq!((&*again.target, again.params_of), ("db@db-2", None));
        // Capped with the configured targets at max_targets while it routes.
        let third = r.route(&on(Some("db-3"), "mysql"), later);
        assert_eq!(third, Err(DropReason::Capped));
        // Records that make no target do not make one either.
        let seg = r.route_without_discovery(&on(Some("db-5"), "mysql"));
        assert_eq!(seg.as_deref(), Ok("db@db-5"));
        assert_eq!(
            r.route(&on(Some("db-5"), "mysql"), later),
            Err(DropReason::Capped)
        );
        // Idle for DISCOVERED_IDLE (its host gone: a fleet scaled in), it gives its slot
        // to a new host's target, which takes db's parameters; db itself stays.
        let much_later = later + DISCOVERED_IDLE;
        let third = r
            .route(&on(Some("db-3"), "mysql"), much_later)
            .expect("routed");
        assert_eq!(&*third.target, "db@db-3");
        assert_eq!(third.params_of.as_deref(), Some("db"));
        let evicted = third.evicted.map(|e| (e.target, e.idle));
        assert_eq!(evicted, Some(("db@db-2".into(), DISCOVERED_IDLE)));
        let here = r.route(&on(None, "mysql"), much_later).map(|r| r.target);
        assert_eq!(here.as_deref(), Ok("db"));
        // Without eviction (a recorded trace), never.
        let mut offline = Router::new(&cfg, 2)
            .with_local_host(Some("db-1".into()))
            .without_eviction();
        assert!(offline.route(&on(Some("db-2"), "mysql"), t0).is_ok());
        let next = offline.route(&on(Some("db-3"), "mysql"), t0 + 100 * DISCOVERED_IDLE);
        assert_eq!(next, Err(DropReason::Capped));
    }

    #[test]
    fn a_target_naming_its_host_takes_its_processes_alone_under_its_own_name() {
        let service = |name: &str, hosts: &[&str]| TargetConfig {
            name: name.into(),
            service_names: vec!["mysql".into()],
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..TargetConfig::default()
        };
        let cfg = vec![
            service("mysql-db-2", &["db-2"]),
            service("mysql-here", &["DB-1"]),
            service("mysql-new", &["db-5", "db-6"]),
            service("mysql", &[]),
        ];
        let mut r = Router::new(&cfg, 6).with_local_host(Some("db-1".into()));
        let t0 = Instant::now();
        let to = |r: &mut Router, host: Option<&str>| {
            r.route(&on(host, "mysql"), t0)
                .map(|r| (r.target.to_string(), r.params_of.map(|p| p.to_string())))
        };
        // Its hosts' processes: its own name and parameters, no `NAME@HOST`.
        assert_eq!(to(&mut r, Some("db-2")), Ok(("mysql-db-2".into(), None)));
        assert_eq!(
            to(&mut r, Some("db-2.example.com")),
            Ok(("mysql-db-2".into(), None))
        );
        // A target of several hosts gives their processes its parameters, each host apart.
        let db5 = to(&mut r, Some("db-5"));
        assert_eq!(db5, Ok(("mysql-new@db-5".into(), Some("mysql-new".into()))));
        // This host's, by name or by naming none: the target listing this host.
        assert_eq!(to(&mut r, Some("db-1")), Ok(("mysql-here".into(), None)));
        assert_eq!(to(&mut r, None), Ok(("mysql-here".into(), None)));
        // Any other host: the next matching target, per host as before.
        let other = to(&mut r, Some("db-3"));
        assert_eq!(other, Ok(("mysql@db-3".into(), Some("mysql".into()))));
        // Without a name for this host, a process naming none is on no listed host.
        let mut blind = Router::new(&cfg, 6);
        assert_eq!(to(&mut blind, None), Ok(("mysql".into(), None)));
        assert_eq!(
            to(&mut blind, Some("db-2")),
            Ok(("mysql-db-2".into(), None))
        );
    }

    #[test]
    fn a_configured_target_named_like_another_hosts_target_takes_it_wherever_listed() {
        let cfg = vec![
            TargetConfig {
                name: "mariadbd".into(),
                process_names: vec!["mariadbd".into()],
                ..TargetConfig::default()
            },
            // Pasted from `calibrate --host db-2`, after the general target.
            TargetConfig {
                name: "mariadbd@db-2".into(),
                process_names: vec!["mariadbd".into()],
                hosts: vec!["db-2".into()],
                ..TargetConfig::default()
            },
        ];
        let mut r = Router::new(&cfg, 2).with_local_host(Some("db-1".into()));
        let p = ProcessInfo {
            host: Some("db-2".into()),
            ..proc("mariadbd")
        };
        let routed = r.route(&p, Instant::now()).expect("routed");
        assert_eq!((&*routed.target, routed.params_of), ("mariadbd@db-2", None));
    }

    #[test]
    fn pids_and_cgroups_match_this_hosts_processes_only() {
        let cfg = vec![TargetConfig {
            name: "db".into(),
            pids: vec![1234],
            cgroups: vec!["docker-abc".into()],
            ..TargetConfig::default()
        }];
        let mut r = Router::new(&cfg, 4).with_local_host(Some("db-1".into()));
        let process = |host: &str, pid: Option<u32>, cgroup: Option<&str>| ProcessInfo {
            pid,
            cgroup: cgroup.map(str::to_owned),
            host: Some(host.into()),
            ..ProcessInfo::default()
        };
        let here_pid = process("db-1", Some(1234), None);
        let here_cgroup = process("db-1", None, Some("/docker-abc.scope"));
        assert_eq!(route(&mut r, &here_pid).as_deref(), Ok("db"));
        assert_eq!(route(&mut r, &here_cgroup).as_deref(), Ok("db"));
        // The same numbers on another host are other processes.
        let there_pid = process("db-2", Some(1234), None);
        let there_cgroup = process("db-2", None, Some("/docker-abc.scope"));
        assert_eq!(route(&mut r, &there_pid), Err(DropReason::NoTarget));
        assert_eq!(route(&mut r, &there_cgroup), Err(DropReason::NoTarget));
    }

    #[test]
    fn host_names_compare_without_case_and_short_to_qualified() {
        assert!(same_host("db-1", "DB-1"));
        assert!(same_host("db-1.example.com", "db-1"));
        assert!(same_host("db-1", "db-1.example.com"));
        assert!(same_host("db-1.example.com", "DB-1.EXAMPLE.COM"));
        assert!(!same_host("db-1.example.com", "db-1.other.org"));
        assert!(!same_host("db-1", "db-10"));
        assert!(!same_host("db-1", "db-2.example.com"));
    }

    #[test]
    fn an_at_sign_from_input_never_reads_as_a_host() {
        let mut r = Router::new(&[], 4).with_local_host(Some("db-1".into()));
        let here = route(&mut r, &on(None, "api@v2"));
        assert_eq!(here.as_deref(), Ok("api_v2"));
        let there = route(&mut r, &on(Some("db@2"), "api@v2"));
        assert_eq!(there.as_deref(), Ok("api_v2@db_2"));
        // An operator's own name keeps its `@` (a host's target, `NAME@HOST`).
        let cfg = vec![TargetConfig {
            name: "mysql@db-2".into(),
            service_names: vec!["mysql".into()],
            hosts: vec!["db-2".into()],
            ..TargetConfig::default()
        }];
        let mut r = Router::new(&cfg, 4).with_local_host(Some("db-1".into()));
        let pinned = route(&mut r, &on(Some("db-2"), "mysql"));
        assert_eq!(pinned.as_deref(), Ok("mysql@db-2"));
    }

    #[test]
    fn a_long_service_name_is_cut_so_its_host_stays_readable() {
        let mut r = Router::new(&[], 2).with_local_host(Some("here".into()));
        let long = "s".repeat(500);
        let name = route(&mut r, &on(Some("db-2"), &long)).unwrap_or_else(|_| Arc::from(""));
        assert_eq!(name.chars().count(), MAX_TARGET_NAME_CHARS);
        assert!(name.ends_with("s@db-2"), "{name}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// Names and hosts come from input and become label values: whatever they hold,
        /// routing answers, and every target name is printable and at most
        /// MAX_TARGET_NAME_CHARS long.
        #[test]
        fn any_process_routes_to_a_bounded_printable_name_or_a_reason(
            service in proptest::option::of(".{0,300}"),
            comm in proptest::option::of(".{0,40}"),
            host in proptest::option::of("(db-1|DB-1\\.x|.{0,300})"),
            configured in proptest::prelude::any::<bool>(),
        ) {
            let cfg = vec![
                TargetConfig {
                    name: "db-2's".into(),
                    service_names: vec!["mysql".into()],
                    hosts: vec!["db-2".into()],
                    ..TargetConfig::default()
                },
                TargetConfig {
                    name: "any".into(),
                    service_names: service.iter().cloned().collect(),
                    process_names: comm.iter().cloned().collect(),
                    ..TargetConfig::default()
                },
            ];
            let targets: &[TargetConfig] = if configured { &cfg } else { &[] };
            let mut r = Router::new(targets, 4).with_local_host(Some("db-1".into()));
            let p = ProcessInfo { service_name: service, comm, host, ..ProcessInfo::default() };
            for _ in 0..2 {
                if let Ok(routed) = r.route(&p, Instant::now()) {
                    let name = routed.target;
                    proptest::prop_assert!(name.chars().count() <= MAX_TARGET_NAME_CHARS, "{name:?}");
                    proptest::prop_assert!(!name.chars().any(char::is_control), "{name:?}");
                }
            }
        }
    }

    #[test]
    fn configured_targets_and_recorded_traces_never_evict() {
        let t0 = Instant::now();
        let cfg = vec![TargetConfig {
            name: "db".into(),
            process_names: vec!["mariadbd".into()],
            ..TargetConfig::default()
        }];
        let mut r = Router::new(&cfg, 1);
        assert_eq!(route_at(&mut r, t0, 0, "mariadbd"), Ok(("db".into(), None)));
        let much_later = 100 * IDLE_S;
        assert_eq!(
            route_at(&mut r, t0, much_later, "bash"),
            Err(DropReason::NoTarget)
        );
        assert_eq!(
            route_at(&mut r, t0, much_later, "mariadbd"),
            Ok(("db".into(), None))
        );

        let mut offline = Router::new(&[], 1).without_eviction();
        assert!(route_at(&mut offline, t0, 0, "curl").is_ok());
        assert_eq!(
            route_at(&mut offline, t0, much_later, "web"),
            Err(DropReason::Capped)
        );
    }
}
