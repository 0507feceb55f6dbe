#!/usr/bin/env bash
# Set up a fresh machine and run every check and test of the project.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== cargo fmt"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
cargo test --workspace
echo "== real-world smoke (PostgreSQL under pgbench: control, CPU cap, table lock; one case through OTLP)"
# The debug binary `cargo test` just built: analysis of these short traces takes seconds.
cargo build -p faultline
smoke="${TMPDIR:-/tmp}/faultline-rw-smoke"
rm -rf "$smoke"
python3 integration-tests/realworld/run.py --smoke --bin target/debug/faultline --out "$smoke/cases" --root "$smoke/apps"
