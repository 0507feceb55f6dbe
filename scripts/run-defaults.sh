#!/usr/bin/env bash
# Set up a fresh machine and run the faultline plugin on its built-in defaults:
# OTLP gRPC 127.0.0.1:4317, OTLP HTTP 127.0.0.1:4318, metrics on http://127.0.0.1:9464/metrics.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
cargo build --release -p faultline
exec "${CARGO_TARGET_DIR:-target}/release/faultline" run "$@"
