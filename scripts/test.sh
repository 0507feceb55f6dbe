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
