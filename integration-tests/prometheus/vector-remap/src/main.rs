//! Compiles the `perf_to_otlp` remap program of a Vector config with the real VRL compiler
//! and runs it on perf-script lines read from stdin, printing each resulting event as one
//! JSON line. Lines the program aborts on are counted on stderr (`ok=N aborted=M`).
//!
//! Why: Vector cannot be installed here, and VRL rejects programs for reasons a YAML check
//! cannot see (unhandled fallible calls, type errors); this runs the exact program text.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::ExitCode;

use vrl::compiler::{state::RuntimeState, Context, TargetValue, TimeZone};
use vrl::value::{Secrets, Value};

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: faultline-vector-remap-check VECTOR_YAML < perf-script-lines");
        return ExitCode::from(2);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let yaml: serde_yaml::Value = match serde_yaml::from_str(&text) {
        Ok(y) => y,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(src) = yaml["transforms"]["perf_to_otlp"]["source"].as_str() else {
        eprintln!("{path}: no transforms.perf_to_otlp.source");
        return ExitCode::from(2);
    };
    let fns = vrl::stdlib::all();
    let compiled = match vrl::compiler::compile(src, &fns) {
        Ok(c) => c,
        Err(diagnostics) => {
            eprintln!("{}", vrl::diagnostic::Formatter::new(src, diagnostics));
            return ExitCode::from(1);
        }
    };
    if !compiled.warnings.is_empty() {
        eprintln!(
            "{}",
            vrl::diagnostic::Formatter::new(src, compiled.warnings.clone())
        );
    }
    let tz = TimeZone::default();
    let (mut ok, mut aborted) = (0u64, 0u64);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        let mut event = BTreeMap::new();
        event.insert("message".into(), Value::from(line.as_str()));
        let mut target = TargetValue {
            value: Value::Object(event),
            metadata: Value::Object(BTreeMap::new()),
            secrets: Secrets::default(),
        };
        let mut state = RuntimeState::default();
        let mut ctx = Context::new(&mut target, &mut state, &tz);
        match compiled.program.resolve(&mut ctx) {
            Ok(_) => match serde_json::to_string(&target.value) {
                Ok(json) => {
                    ok += 1;
                    if writeln!(out, "{json}").is_err() {
                        return ExitCode::from(1);
                    }
                }
                Err(e) => {
                    eprintln!("cannot encode the event of {line:?}: {e}");
                    return ExitCode::from(1);
                }
            },
            Err(_) => aborted += 1,
        }
    }
    eprintln!("ok={ok} aborted={aborted}");
    ExitCode::SUCCESS
}
