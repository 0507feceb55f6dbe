//! Builds the engine as a `wasm32-unknown-unknown` module for the wasmtime host, so a plain
//! `cargo build` produces a plugin with its sandboxed engine embedded (no manual step).
//!
//! The guest is built by a nested `cargo build` with its own `--target-dir`: the outer
//! build holds the lock on the main target directory, and the guest needs a different
//! target and profile (small, `panic = "abort"`) than the plugin.
//!
//! `FAULTLINE_GUEST_WASM=/path/to/faultline_engine.wasm` skips the nested build and embeds
//! a prebuilt module instead (offline or packaging builds).

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const WASM_TARGET: &str = "wasm32-unknown-unknown";
const WASM_FILE: &str = "faultline_engine.wasm";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=FAULTLINE_GUEST_WASM");
    if env::var_os("CARGO_FEATURE_WASM").is_none() {
        // Native-only build: nothing to embed.
        return;
    }
    if let Err(msg) = run() {
        eprintln!("error: {msg}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let manifest_dir =
        PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?);
    let workspace = manifest_dir
        .parent()
        .ok_or("the plugin crate has no parent directory")?
        .to_path_buf();
    let dest = out_dir.join(WASM_FILE);

    if let Some(prebuilt) = env::var_os("FAULTLINE_GUEST_WASM") {
        let prebuilt = PathBuf::from(prebuilt);
        println!("cargo:rerun-if-changed={}", prebuilt.display());
        return copy(&prebuilt, &dest);
    }

    let guest = workspace.join("wasm-guest");
    println!("cargo:rerun-if-changed={}", guest.join("src").display());
    println!(
        "cargo:rerun-if-changed={}",
        guest.join("Cargo.toml").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        workspace.join("Cargo.lock").display()
    );

    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    check_target_installed(Path::new(&rustc))?;

    let target_dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("wasm-guest");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&workspace)
        .args(["build", "-p", "faultline-engine", "--lib", "--release"])
        .args(["--target", WASM_TARGET])
        .arg("--manifest-path")
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's flags (coverage, native CPU, clippy's wrapper) are for the host
    // target; they would break or bloat the wasm build.
    for var in [
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET_DIR",
    ] {
        cmd.env_remove(var);
    }
    // wasmtime runs WASM SIMD natively; without it LLVM cannot vectorize the engine's loops.
    cmd.env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+simd128");
    // A small, fast, abort-on-panic guest regardless of the workspace's release profile
    // (which keeps debug info for the native binary's profiling).
    cmd.env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "3")
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_PANIC", "abort")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1")
        .env("CARGO_PROFILE_RELEASE_LTO", "true")
        .env("CARGO_PROFILE_RELEASE_INCREMENTAL", "false")
        .env("CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS", "false")
        .env("CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS", "false");

    let output = cmd
        .output()
        .map_err(|e| format!("cannot run cargo to build the WASM engine: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "building the WASM engine (cargo build -p faultline-engine --target {WASM_TARGET}) failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let built = target_dir.join(WASM_TARGET).join("release").join(WASM_FILE);
    copy(&built, &dest)
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::copy(from, to)
        .map(|_| ())
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

/// Fails early with the fix when the wasm32 standard library is missing, instead of a
/// wall of "can't find crate for `core`" errors from the nested build.
fn check_target_installed(rustc: &Path) -> Result<(), String> {
    let out = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", WASM_TARGET])
        .output()
        .map_err(|e| format!("cannot run {}: {e}", rustc.display()))?;
    let libdir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    let has_std = out.status.success()
        && std::fs::read_dir(&libdir)
            .map(|d| {
                d.flatten()
                    .any(|f| f.file_name().to_string_lossy().starts_with("libstd-"))
            })
            .unwrap_or(false);
    if has_std {
        Ok(())
    } else {
        Err(format!(
            "the Rust target {WASM_TARGET} is not installed (needed to build the WASM engine).\n\
             Install it with:  rustup target add {WASM_TARGET}\n\
             or build without the sandbox:  cargo build --no-default-features  (engine kind \"native\" only)"
        ))
    }
}
