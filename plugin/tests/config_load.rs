//! Loading `faultline run` configs: defaults, TOML and YAML, environment overrides, and
//! errors that name the wrong key.

use std::path::Path;

use faultline::config::{self, load_from_str, Config, ConfigFormat};

fn no_env() -> Vec<(String, String)> {
    Vec::new()
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn err_of(text: &str, format: ConfigFormat) -> String {
    match load_from_str(Some(text), format, no_env()) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn no_file_gives_loopback_defaults_that_validate() {
    let cfg = load_from_str(None, ConfigFormat::Toml, no_env()).unwrap();
    assert_eq!(cfg, Config::default());
    assert_eq!(cfg.sinks.prometheus.listen, "127.0.0.1:9464");
    assert!(cfg.sinks.prometheus.enabled);
    assert!(cfg.sources.otlp.enabled);
    assert!(!cfg.sources.perf.enabled && !cfg.sources.lttng.enabled && !cfg.sinks.json.enabled);
    assert!(cfg.targets.is_empty());
}

#[test]
fn toml_targets_get_their_own_parameters() {
    let text = r#"
        [analysis]
        alpha_seconds = 0.8
        top_n = 7

        [[targets]]
        name = "db"
        process_names = ["mariadbd"]
        alpha_seconds = 1.5
        beta_seconds = 0.4
        analysis = { window_seconds = 120.0 }

        [[targets]]
        name = "web"
        service_names = ["frontend"]

        [sinks.json]
        enabled = true
        path = "/tmp/reports.jsonl"
    "#;
    let cfg = load_from_str(Some(text), ConfigFormat::Toml, no_env()).unwrap();
    let db = cfg.params_for("db").unwrap();
    assert_eq!(
        (db.alpha_seconds, db.beta_seconds, db.window_seconds),
        (1.5, 0.4, 120.0)
    );
    // Inherited from [analysis].
    assert_eq!(db.top_n, 7);
    let web = cfg.params_for("web").unwrap();
    assert_eq!((web.alpha_seconds, web.window_seconds), (0.8, 90.0));
    assert_eq!(
        cfg.sinks.json.path.as_deref(),
        Some(Path::new("/tmp/reports.jsonl"))
    );
}

#[test]
fn yaml_is_read_like_toml() {
    let yaml = r#"
analysis:
  alpha_seconds: 0.7
targets:
  - name: db
    pids: [42, 43]
    cgroups: ["docker-abc"]
sinks:
  prometheus:
    listen: "0.0.0.0:9500"
"#;
    let toml = r#"
        [analysis]
        alpha_seconds = 0.7
        [[targets]]
        name = "db"
        pids = [42, 43]
        cgroups = ["docker-abc"]
        [sinks.prometheus]
        listen = "0.0.0.0:9500"
    "#;
    let a = load_from_str(Some(yaml), ConfigFormat::Yaml, no_env()).unwrap();
    let b = load_from_str(Some(toml), ConfigFormat::Toml, no_env()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.targets[0].pids, vec![42, 43]);
}

#[test]
fn environment_overrides_file_values() {
    let text = r#"
        [sinks.prometheus]
        listen = "127.0.0.1:9464"
        [analysis]
        alpha_seconds = 0.8
    "#;
    let cfg = load_from_str(
        Some(text),
        ConfigFormat::Toml,
        env(&[
            ("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "127.0.0.1:9999"),
            ("FAULTLINE_ANALYSIS__ALPHA_SECONDS", "0.3"),
            ("FAULTLINE_SINKS__JSON__ENABLED", "true"),
            ("FAULTLINE_PIPELINE__QUEUE_CAPACITY", "32"),
            // Not overrides: no `__`, or another prefix.
            ("FAULTLINE_CONFIG", "/etc/faultline.toml"),
            ("OTHER_SINKS__JSON__ENABLED", "false"),
        ]),
    )
    .unwrap();
    assert_eq!(cfg.sinks.prometheus.listen, "127.0.0.1:9999");
    assert_eq!(cfg.analysis.alpha_seconds, 0.3);
    assert!(cfg.sinks.json.enabled);
    assert_eq!(cfg.pipeline.queue_capacity, 32);
}

#[test]
fn a_misspelt_environment_override_is_an_error_naming_it() {
    let e = load_from_str(
        None,
        ConfigFormat::Toml,
        env(&[("FAULTLINE_SINKS__PROMETHEUS__LISTN", "127.0.0.1:1")]),
    )
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("sinks.prometheus"), "{e}");
    assert!(e.contains("listn"), "{e}");
}

#[test]
fn invalid_values_name_the_key_and_the_reason() {
    let e = err_of(
        r#"
        [[targets]]
        name = "a"
        pids = [1]
        [[targets]]
        name = "b"
        pids = [2]
        alpha_seconds = -1
    "#,
        ConfigFormat::Toml,
    );
    assert_eq!(
        e,
        "targets[1].alpha_seconds: must be a positive number of seconds, got -1"
    );

    let e = err_of(
        "[sinks.prometheus]\nlisten = \"localhost\"\n",
        ConfigFormat::Toml,
    );
    assert!(
        e.starts_with("sinks.prometheus.listen: must be an `ip:port` address, got `localhost`"),
        "{e}"
    );

    let e = err_of(
        "[analysis]\ninternal_threshold = 0.95\n",
        ConfigFormat::Toml,
    );
    assert!(e.starts_with("analysis.internal_threshold: "), "{e}");

    let e = err_of(
        "[[targets]]\nname = \"db\"\npids = [1]\nanalysis = { top_nn = 3 }\n",
        ConfigFormat::Toml,
    );
    assert!(e.starts_with("targets[0].analysis.top_nn"), "{e}");

    let e = err_of(
        "[[targets]]\nname = \"db\"\npids = [1]\nanalysis = { top_n = 0 }\n",
        ConfigFormat::Toml,
    );
    assert!(
        e.starts_with("targets[0].analysis.top_n: must be between 1 and 100"),
        "{e}"
    );

    let e = err_of("[[targets]]\nname = \"db\"\n", ConfigFormat::Toml);
    assert!(e.starts_with("targets[0]: needs at least one of"), "{e}");

    let e = err_of(
        "[[targets]]\nname = \"db\"\npids = [1]\n[[targets]]\nname = \"db\"\npids = [2]\n",
        ConfigFormat::Toml,
    );
    assert!(e.starts_with("targets[1].name: duplicate"), "{e}");

    let e = err_of(
        "[pipeline]\nqueue_capacity = \"many\"\n",
        ConfigFormat::Toml,
    );
    assert!(e.starts_with("pipeline.queue_capacity: "), "{e}");

    let e = err_of("[sinks]\nstatsd = {}\n", ConfigFormat::Toml);
    assert!(e.contains("statsd"), "{e}");

    let e = err_of("[sources.perf]\nenabled = true\n", ConfigFormat::Toml);
    assert!(
        e.starts_with("sources.perf: enabled: set exactly one of"),
        "{e}"
    );
    let e = err_of(
        "[sources.perf]\nenabled = true\npids = [1]\ncgroup = \"a\"\n",
        ConfigFormat::Toml,
    );
    assert!(
        e.starts_with("sources.perf: enabled: set exactly one of"),
        "{e}"
    );

    let e = err_of("pipeline:\n  idle_seconds: 0\n", ConfigFormat::Yaml);
    assert!(e.starts_with("pipeline.idle_seconds: "), "{e}");

    // A wait the HTTP answer could not outlast, and a negative one.
    for bad in ["25", "-1"] {
        let e = err_of(
            &format!("pipeline:\n  trigger_wait_seconds: {bad}\n"),
            ConfigFormat::Yaml,
        );
        assert!(e.starts_with("pipeline.trigger_wait_seconds: "), "{e}");
    }

    // A silence shorter than a live capture's delivery delay would move a clock past
    // records still in flight; 0 is off.
    for bad in ["2", "-1", "100000"] {
        let e = err_of(
            &format!("pipeline:\n  silent_after_seconds: {bad}\n"),
            ConfigFormat::Yaml,
        );
        assert!(e.starts_with("pipeline.silent_after_seconds: "), "{e}");
    }
    let off = load_from_str(
        Some("pipeline:\n  silent_after_seconds: 0\n"),
        ConfigFormat::Yaml,
        no_env(),
    );
    assert_eq!(off.map(|c| c.pipeline.silent_after_seconds).ok(), Some(0.0));
}

#[test]
fn otlp_sections_take_the_receivers_and_exporters_keys() {
    let text = r#"
        [sources.otlp]
        enabled = true
        grpc = "0.0.0.0:14317"
        max_request_bytes = 1024
        [sinks.otlp]
        enabled = true
        protocol = "http"
        interval_seconds = 5
    "#;
    let cfg = load_from_str(Some(text), ConfigFormat::Toml, no_env()).unwrap();
    assert_eq!(
        cfg.sources.otlp.receiver.grpc.as_deref(),
        Some("0.0.0.0:14317")
    );
    assert_eq!(
        cfg.sources.otlp.receiver.http.as_deref(),
        Some("127.0.0.1:4318")
    );
    assert_eq!(cfg.sources.otlp.receiver.max_request_bytes, 1024);
    assert!(cfg.sinks.otlp.enabled);
    assert_eq!(cfg.sinks.otlp.exporter.interval_seconds, 5);

    let e = err_of(
        "[sources.otlp]\ngrpc_listen = \"127.0.0.1:1\"\n",
        ConfigFormat::Toml,
    );
    assert!(e.contains("grpc_listen"), "{e}");
    let e = err_of("[sources.otlp]\ngrpc = \"localhost\"\n", ConfigFormat::Toml);
    assert!(
        e.starts_with("sources.otlp.grpc: must be an `ip:port` address"),
        "{e}"
    );
    let e = err_of("[engine]\nkind = \"jvm\"\n", ConfigFormat::Toml);
    assert!(e.starts_with("engine.kind"), "{e}");
    let e = err_of("[engine]\nmemory_limit_bytes = 1\n", ConfigFormat::Toml);
    assert!(
        e.starts_with("engine.memory_limit_bytes: must be between"),
        "{e}"
    );
}

#[test]
fn syntax_errors_and_missing_files_are_reported() {
    let e = err_of("[analysis\nalpha_seconds = 1", ConfigFormat::Toml);
    assert!(e.starts_with("cannot parse config"), "{e}");
    let e = config::load(Some(Path::new("/nonexistent/faultline.toml")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("/nonexistent/faultline.toml"), "{e}");
}

#[test]
fn the_shipped_example_config_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/faultline.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let cfg = load_from_str(Some(&text), ConfigFormat::Toml, no_env()).unwrap();
    // The example spells out the defaults, plus example targets.
    let defaults = Config::default();
    assert_eq!(cfg.engine, defaults.engine);
    assert_eq!(cfg.analysis, defaults.analysis);
    assert_eq!(cfg.pipeline, defaults.pipeline);
    assert_eq!(cfg.sources, defaults.sources);
    assert_eq!(cfg.sinks, defaults.sinks);
    assert!(!cfg.targets.is_empty());
}

/// The examples under `config/examples` call their targets' α/β "placeholders equal to the
/// defaults": they must stay equal to the engine's defaults when those change.
#[test]
fn example_configs_placeholders_equal_the_defaults() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/examples");
    let defaults = faultline_engine::Params::default();
    let mut checked = 0;
    for name in ["jvm-service", "mariadb", "nginx"] {
        let path = dir.join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("equal to the defaults"), "{path:?}");
        let cfg = load_from_str(Some(&text), ConfigFormat::Toml, no_env()).unwrap();
        for t in &cfg.targets {
            let p = cfg.params_for(&t.name).unwrap();
            assert_eq!(
                (p.alpha_seconds, p.beta_seconds),
                (defaults.alpha_seconds, defaults.beta_seconds),
                "{name}.toml, target {}: α/β placeholders must equal the defaults",
                t.name
            );
            checked += 1;
        }
    }
    assert!(checked >= 4, "{checked} targets checked");
}

#[test]
fn otlp_request_size_limit_is_bounded() {
    for bad in ["0", "1023", "268435457", "9223372036854775807"] {
        let e = err_of(
            &format!("[sources.otlp]\nmax_request_bytes = {bad}\n"),
            ConfigFormat::Toml,
        );
        assert!(
            e.starts_with(
                "sources.otlp.max_request_bytes: must be between 1024 (1 KiB) and 268435456 (256 MiB) bytes"
            ),
            "{bad}: {e}"
        );
    }
    for good in [1024usize, 268_435_456] {
        let cfg = load_from_str(
            Some(&format!("[sources.otlp]\nmax_request_bytes = {good}\n")),
            ConfigFormat::Toml,
            no_env(),
        )
        .unwrap();
        assert_eq!(cfg.sources.otlp.receiver.max_request_bytes, good);
    }
}

/// In a container the kernel's host name is the container's: the node's is set here, by
/// file or (as a DaemonSet would) by environment, whatever it looks like.
#[test]
fn this_hosts_name_may_be_set_and_must_be_a_name() {
    let cfg = load_from_str(None, ConfigFormat::Toml, no_env()).unwrap();
    assert_eq!(cfg.pipeline.host_name, None);
    let cfg = load_from_str(
        Some("[pipeline]\nhost_name = \"node-7\"\n"),
        ConfigFormat::Toml,
        no_env(),
    )
    .unwrap();
    assert_eq!(cfg.pipeline.host_name.as_deref(), Some("node-7"));
    for name in ["node-7.example.com", "1234", "true"] {
        let cfg = load_from_str(
            None,
            ConfigFormat::Toml,
            env(&[("FAULTLINE_PIPELINE__HOST_NAME", name)]),
        );
        let got = cfg.map(|c| c.pipeline.host_name);
        assert_eq!(got.ok().flatten().as_deref(), Some(name));
    }
    for bad in ["\"\"", "\" \"", "\"a\\nb\""] {
        let e = err_of(
            &format!("[pipeline]\nhost_name = {bad}\n"),
            ConfigFormat::Toml,
        );
        assert!(
            e.starts_with("pipeline.host_name: must be a host name"),
            "{bad}: {e}"
        );
    }
}

/// A live session's address is checked at start, not left to babeltrace2 to refuse.
#[test]
fn an_lttng_live_address_must_name_a_host_and_session() {
    let live = |url: &str| format!("[sources.lttng]\nenabled = true\nrelayd_url = {url:?}\n");
    for bad in ["net://relay", "net://relay/host/db-2", "relay/host/db-2/s"] {
        let e = err_of(&live(bad), ConfigFormat::Toml);
        assert!(
            e.starts_with(
                "sources.lttng.relayd_url: expected net://RELAYD[:PORT]/host/HOST/SESSION"
            ),
            "{bad}: {e}"
        );
    }
    let cfg = load_from_str(
        Some(&live("net://relay:5344/host/db-2/s")),
        ConfigFormat::Toml,
        no_env(),
    );
    assert!(cfg.is_ok(), "{cfg:?}");
}

#[test]
fn reorder_wait_is_bounded() {
    let cfg = load_from_str(None, ConfigFormat::Toml, no_env()).unwrap();
    assert_eq!(cfg.pipeline.reorder_seconds, 30.0);
    for bad in ["-1.0", "300.5", "nan", "inf"] {
        let e = err_of(
            &format!("[pipeline]\nreorder_seconds = {bad}\n"),
            ConfigFormat::Toml,
        );
        assert!(
            e.starts_with("pipeline.reorder_seconds: must be between 0 (off) and 300 seconds"),
            "{bad}: {e}"
        );
    }
    for good in [0.0, 300.0] {
        let cfg = load_from_str(
            Some(&format!("[pipeline]\nreorder_seconds = {good:?}\n")),
            ConfigFormat::Toml,
            no_env(),
        )
        .unwrap();
        assert_eq!(cfg.pipeline.reorder_seconds, good);
    }
}

#[test]
fn otlp_tcp_segment_metric_names_are_checked() {
    let cfg = load_from_str(None, ConfigFormat::Toml, no_env()).unwrap();
    let seg = &cfg.sources.otlp.receiver.tcp_segments;
    assert!(seg.enabled);
    assert_eq!(
        (seg.sent.as_str(), seg.retransmitted.as_str()),
        ("node_netstat_Tcp_OutSegs", "node_netstat_Tcp_RetransSegs")
    );
    for (toml, msg) in [
        (
            "sent = \"\"",
            "sources.otlp.tcp_segments.sent: must name a metric",
        ),
        (
            "retransmitted = \" \"",
            "sources.otlp.tcp_segments.retransmitted: must name a metric",
        ),
        (
            "sent = \" node_netstat_Tcp_OutSegs\"",
            "sources.otlp.tcp_segments.sent: \" node_netstat_Tcp_OutSegs\" starts or ends with whitespace",
        ),
        (
            "sent = \"x\"\nretransmitted = \"x\"",
            "sources.otlp.tcp_segments: sent and retransmitted both name \"x\"",
        ),
    ] {
        let e = err_of(
            &format!("[sources.otlp.tcp_segments]\n{toml}\n"),
            ConfigFormat::Toml,
        );
        assert!(e.starts_with(msg), "{toml}: {e}");
    }
    let e = err_of(
        "[sources.otlp.tcp_segments]\nsend = \"x\"\n",
        ConfigFormat::Toml,
    );
    assert!(e.contains("send"), "{e}");
    let cfg = load_from_str(
        Some("[sources.otlp.tcp_segments]\nenabled = false\nsent = \"\"\n"),
        ConfigFormat::Toml,
        no_env(),
    )
    .unwrap();
    assert!(!cfg.sources.otlp.receiver.tcp_segments.enabled);
}

#[test]
fn otlp_sink_bounds_match_the_prometheus_sink() {
    for (key, bad, msg) in [
        ("max_targets", "0", "must be between 1 and 4096"),
        ("max_targets", "4097", "must be between 1 and 4096"),
        ("max_syscalls", "0", "must be between 1 and 100"),
        ("max_syscalls", "101", "must be between 1 and 100"),
        (
            "interval_seconds",
            "0",
            "must be a positive whole number of seconds",
        ),
        (
            "timeout_seconds",
            "0",
            "must be a positive whole number of seconds",
        ),
        (
            "timeout_seconds",
            "86401",
            "must be a positive whole number of seconds",
        ),
    ] {
        for section in ["sinks.otlp", "sinks.prometheus"] {
            if section == "sinks.prometheus" && key.ends_with("_seconds") {
                continue;
            }
            let e = err_of(&format!("[{section}]\n{key} = {bad}\n"), ConfigFormat::Toml);
            assert!(
                e.starts_with(&format!("{section}.{key}: {msg}")),
                "{section}.{key} = {bad}: {e}"
            );
        }
    }
    let cfg = load_from_str(
        Some("[sinks.otlp]\nmax_targets = 4096\nmax_syscalls = 100\ntimeout_seconds = 1\n"),
        ConfigFormat::Toml,
        no_env(),
    )
    .unwrap();
    assert_eq!(cfg.sinks.otlp.exporter.max_targets, 4096);
}

#[test]
fn target_names_and_matchers_must_be_exactly_what_they_say() {
    for name in [" db", "db ", "\tdb"] {
        let e = err_of(
            &format!("[[targets]]\nname = {name:?}\npids = [1]\n"),
            ConfigFormat::Toml,
        );
        assert!(
            e.starts_with("targets[0].name: must not start or end with whitespace")
                && e.contains("did you mean \"db\""),
            "{name:?}: {e}"
        );
    }
    for (list, at) in [
        ("process_names = [\"\"]", "process_names[0]"),
        ("cgroups = [\"\"]", "cgroups[0]"),
        ("service_names = [\"api\", \" \"]", "service_names[1]"),
        ("service_names = [\"api\"]\nhosts = [\"\"]", "hosts[0]"),
    ] {
        let e = err_of(
            &format!("[[targets]]\nname = \"db\"\n{list}\n"),
            ConfigFormat::Toml,
        );
        assert!(
            e.starts_with(&format!("targets[0].{at}: must be a non-empty name")),
            "{list}: {e}"
        );
    }
}

/// What docs/configuration.md says about turning the OTLP listeners off: omitting a key
/// keeps its default listener; `enabled = false` turns both off; only YAML (which has a
/// null) turns off one.
#[test]
fn how_otlp_listeners_are_turned_off() {
    let cfg = load_from_str(
        Some("[sources.otlp]\nhttp = \"127.0.0.1:14318\"\n"),
        ConfigFormat::Toml,
        no_env(),
    )
    .unwrap();
    assert_eq!(
        cfg.sources.otlp.receiver.grpc.as_deref(),
        Some("127.0.0.1:4317"),
        "an omitted listener keeps its default"
    );
    let cfg = load_from_str(
        Some("[sources.otlp]\nenabled = false\n"),
        ConfigFormat::Toml,
        no_env(),
    )
    .unwrap();
    assert!(!cfg.sources.otlp.enabled);
    let cfg = load_from_str(
        Some("sources:\n  otlp:\n    grpc: null\n"),
        ConfigFormat::Yaml,
        no_env(),
    )
    .unwrap();
    assert_eq!(cfg.sources.otlp.receiver.grpc, None);
    assert_eq!(
        cfg.sources.otlp.receiver.http.as_deref(),
        Some("127.0.0.1:4318")
    );
}

/// Listeners `run` would bind together must not take the same port: `check-config` is what
/// systemd runs before `run`, so it has to fail where the bind would.
#[test]
fn enabled_listeners_cannot_share_a_port() {
    for (text, msg) in [
        (
            "[sinks.prometheus]\nlisten = \"127.0.0.1:4317\"\n",
            "sinks.prometheus.listen: `127.0.0.1:4317` and sources.otlp.grpc (`127.0.0.1:4317`) cannot both listen on port 4317: the same address",
        ),
        (
            "[sources.otlp]\ngrpc = \"0.0.0.0:4318\"\n",
            "sources.otlp.http: `127.0.0.1:4318` and sources.otlp.grpc (`0.0.0.0:4318`) cannot both listen on port 4318: `0.0.0.0` listens on every IPv4 address",
        ),
        (
            "[sources.otlp]\nhttp = \"[::]:9464\"\n",
            "sinks.prometheus.listen: `127.0.0.1:9464` and sources.otlp.http (`[::]:9464`) cannot both listen on port 9464: `[::]` listens on every IPv6 and IPv4 address",
        ),
    ] {
        assert_eq!(err_of(text, ConfigFormat::Toml), msg, "{text}");
    }
    let e = load_from_str(
        None,
        ConfigFormat::Toml,
        env(&[("FAULTLINE_SINKS__PROMETHEUS__LISTEN", "0.0.0.0:4318")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("sinks.prometheus.listen: `0.0.0.0:4318` and sources.otlp.http"),
        "{e}"
    );

    // A listener that is off binds nothing; port 0 picks a free port each time; other
    // addresses or another family of the same port are separate sockets.
    for text in [
        "[sources.otlp]\nenabled = false\n[sinks.prometheus]\nlisten = \"127.0.0.1:4317\"\n",
        "[sinks.prometheus]\nenabled = false\nlisten = \"127.0.0.1:4317\"\n",
        "[sources.otlp]\ngrpc = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\n[sinks.prometheus]\nlisten = \"0.0.0.0:0\"\n",
        "[sources.otlp]\ngrpc = \"127.0.0.2:4317\"\n[sinks.prometheus]\nlisten = \"127.0.0.1:4317\"\n",
        "[sources.otlp]\ngrpc = \"[::1]:9464\"\n",
    ] {
        if let Err(e) = load_from_str(Some(text), ConfigFormat::Toml, no_env()) {
            panic!("{text}: {e}");
        }
    }
    let cfg = load_from_str(
        Some("sources:\n  otlp:\n    grpc: null\nsinks:\n  prometheus:\n    listen: \"127.0.0.1:4317\"\n"),
        ConfigFormat::Yaml,
        no_env(),
    )
    .unwrap();
    assert_eq!(cfg.sinks.prometheus.listen, "127.0.0.1:4317");
}

/// This build's OTLP exporters speak plain `http://` only (no TLS feature), and the gRPC
/// one takes a URL without a scheme for `https://`.
#[test]
fn otlp_sink_endpoint_must_be_a_plain_http_url() {
    for (endpoint, msg) in [
        (
            "collector:4317",
            "sinks.otlp.endpoint: must be a URL with its scheme, like `http://collector:4317`, got `collector:4317`",
        ),
        (
            "https://collector:4317",
            "sinks.otlp.endpoint: `https://collector:4317`: this build of faultline has no TLS support",
        ),
        (
            "unix:///run/otel.sock",
            "sinks.otlp.endpoint: scheme `unix` is not supported",
        ),
    ] {
        let e = err_of(
            &format!("[sinks.otlp]\nenabled = true\nendpoint = \"{endpoint}\"\n"),
            ConfigFormat::Toml,
        );
        assert!(e.starts_with(msg), "{endpoint}: {e}");
    }
    let e = err_of(
        "[sinks.otlp]\nenabled = true\nprotocol = \"http\"\nendpoint = \"collector:4318\"\n",
        ConfigFormat::Toml,
    );
    assert!(e.contains("like `http://collector:4318`"), "{e}");

    for (text, env_pairs) in [
        (
            "[sinks.otlp]\nenabled = true\nendpoint = \"http://collector:4317\"\n",
            &[][..],
        ),
        (
            "[sinks.otlp]\nenabled = true\nprotocol = \"http\"\nendpoint = \"http://10.0.0.5:4318/\"\n",
            &[][..],
        ),
        // The default endpoint, and a disabled sink's endpoint (never used).
        ("[sinks.otlp]\nenabled = true\n", &[][..]),
        ("[sinks.otlp]\nendpoint = \"https://collector:4317\"\n", &[][..]),
        (
            "",
            &[
                ("FAULTLINE_SINKS__OTLP__ENABLED", "true"),
                ("FAULTLINE_SINKS__OTLP__ENDPOINT", "http://collector:4317"),
            ][..],
        ),
    ] {
        if let Err(e) = load_from_str(Some(text), ConfigFormat::Toml, env(env_pairs)) {
            panic!("{text} {env_pairs:?}: {e}");
        }
    }
}

/// `perf record -G ""` fails only when `run` starts perf.
#[test]
fn an_empty_perf_cgroup_is_refused() {
    let e = err_of(
        "[sources.perf]\nenabled = true\ncgroup = \"\"\n",
        ConfigFormat::Toml,
    );
    assert!(
        e.starts_with("sources.perf.cgroup: must name a cgroup"),
        "{e}"
    );
    let e = load_from_str(
        Some("[sources.perf]\nenabled = true\ncgroup = \"system.slice/db.service\"\n"),
        ConfigFormat::Toml,
        env(&[("FAULTLINE_SOURCES__PERF__CGROUP", " ")]),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("sources.perf.cgroup: must name a cgroup"),
        "{e}"
    );
    for text in [
        "[sources.perf]\nenabled = true\ncgroup = \"system.slice/db.service\"\n",
        // Off: nothing is traced, nothing to refuse.
        "[sources.perf]\ncgroup = \"\"\n",
    ] {
        if let Err(e) = load_from_str(Some(text), ConfigFormat::Toml, no_env()) {
            panic!("{text}: {e}");
        }
    }
}

/// List keys take comma-separated items from the environment, one item included.
#[test]
fn environment_overrides_set_list_keys() {
    let perf = |pairs: &[(&str, &str)]| {
        load_from_str(
            Some("[sources.perf]\nenabled = true\npids = [1]\n"),
            ConfigFormat::Toml,
            env(pairs),
        )
        .map(|c| c.sources.perf)
        .map_err(|e| e.to_string())
    };
    let p = perf(&[("FAULTLINE_SOURCES__PERF__PIDS", "1234")]).unwrap();
    assert_eq!(p.pids, vec![1234]);
    let p = perf(&[("FAULTLINE_SOURCES__PERF__PIDS", "1234,5678, 42")]).unwrap();
    assert_eq!(p.pids, vec![1234, 5678, 42]);
    // An empty value clears the file's list, so the environment can switch to a command.
    let p = perf(&[
        ("FAULTLINE_SOURCES__PERF__PIDS", ""),
        (
            "FAULTLINE_SOURCES__PERF__COMMAND",
            "/usr/bin/stress-ng,--cpu,2,--timeout,10s",
        ),
    ])
    .unwrap();
    assert!(p.pids.is_empty());
    assert_eq!(
        p.command,
        ["/usr/bin/stress-ng", "--cpu", "2", "--timeout", "10s"]
    );
    let p = perf(&[
        ("FAULTLINE_SOURCES__PERF__PIDS", ""),
        ("FAULTLINE_SOURCES__PERF__COMMAND", "true"),
    ])
    .unwrap();
    assert_eq!(p.command, ["true"], "one word that looks like a boolean");

    let e = perf(&[("FAULTLINE_SOURCES__PERF__PIDS", "1234,,5678")]).unwrap_err();
    assert!(
        e.starts_with("sources.perf.pids[1]: empty item in FAULTLINE_SOURCES__PERF__PIDS"),
        "{e}"
    );
    let e = perf(&[("FAULTLINE_SOURCES__PERF__PIDS", "1234,db")]).unwrap_err();
    assert!(e.starts_with("sources.perf.pids[1]"), "{e}");

    // Other keys keep their commas.
    let cfg = load_from_str(
        None,
        ConfigFormat::Toml,
        env(&[("FAULTLINE_SINKS__OTLP__SERVICE_NAME", "faultline,eu-1")]),
    )
    .unwrap();
    assert_eq!(cfg.sinks.otlp.exporter.service_name, "faultline,eu-1");
}
