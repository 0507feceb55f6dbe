//! Helpers shared by the `run_*` tests: start the real binary, wait for the addresses it
//! logs, talk HTTP/1.1 to it over loopback, and signal it.

#![allow(dead_code)] // each test file uses a different subset

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const STARTUP: Duration = Duration::from_secs(30);

/// The running binary and the address its HTTP endpoint reported.
pub struct Running {
    pub child: Child,
    pub addr: SocketAddr,
    /// Every `<key>_address=` logged before startup finished (e.g. `grpc`, `http`).
    pub addresses: HashMap<String, SocketAddr>,
    /// Further stderr lines (kept draining so the child never blocks on a full pipe).
    pub log: mpsc::Receiver<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        // A failed assertion must not leave the server running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn start(args: &[&str], env: &[(&str, &str)]) -> Running {
    start_waiting(args, env, &["metrics"])
}

/// Starts `faultline` and waits until it has logged `<key>_address=` for every key.
pub fn start_waiting(args: &[&str], env: &[(&str, &str)], keys: &[&str]) -> Running {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_faultline"));
    // Its own process group, as a shell job has: a test can signal the group (a
    // terminal's Ctrl-C) without signalling the test runner.
    cmd.args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn faultline");
    let stderr = child.stderr.take().expect("stderr piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + STARTUP;
    let mut seen = Vec::new();
    let mut addresses = HashMap::new();
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                for key in keys {
                    // `key_address=ADDR` in text logs, `"key_address":"ADDR"` in JSON ones.
                    let text = format!("{key}_address=");
                    let json = format!("\"{key}_address\":\"");
                    let found = match (line.split(&text).nth(1), line.split(&json).nth(1)) {
                        (Some(a), _) => a.split_whitespace().next(),
                        (None, Some(a)) => a.split('"').next(),
                        (None, None) => None,
                    };
                    if let Some(a) = found {
                        let addr: SocketAddr = a.parse().expect("address");
                        addresses.insert((*key).to_owned(), addr);
                    }
                }
                seen.push(line);
                if keys.iter().all(|k| addresses.contains_key(*k)) {
                    let addr = addresses.get("metrics").copied().expect("metrics address");
                    return Running {
                        child,
                        addr,
                        addresses,
                        log: rx,
                    };
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("faultline exited early ({status}): {}", seen.join("\n"));
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!(
        "faultline did not report its addresses: {}",
        seen.join("\n")
    );
}

/// Minimal HTTP/1.1 request over loopback: (status, body).
pub fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    http_with_body(addr, method, path, "")
}

/// Like [`http`], sending `body` as JSON.
pub fn http_with_body(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("HTTP response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    (status, body)
}

pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Sends `sig` to the child's whole process group, as a terminal's Ctrl-C does.
pub fn signal_group(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, "--", &format!("-{}", child.id())])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} to the group failed");
}

pub fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill {sig} failed");
}

pub fn wait_exit(child: &mut Child, within: Duration) -> ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().expect("wait") {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "faultline did not exit within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stops `run` with SIGTERM (it must exit cleanly) and answers the final
/// (`end_of_stream`) reports its JSON sink wrote to `jsonl`.
pub fn final_reports(mut run: Running, jsonl: &std::path::Path) -> Vec<faultline_engine::Report> {
    signal(&run.child, "-TERM");
    let status = wait_exit(&mut run.child, Duration::from_secs(30));
    assert!(status.success(), "exit status {status}");
    std::fs::read_to_string(jsonl)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<faultline_engine::Report>(l).expect("report line"))
        .filter(|r| serde_json::to_value(r.trigger).unwrap() == "end_of_stream")
        .collect()
}
