#!/usr/bin/env bash
# Set up a fresh machine and run every check and test of the project.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

# The real shared traces, found as every test finds them
# (wasm-guest/tests/common/traces.rs, integration-tests/prometheus/shared_traces.py):
# $FAULTLINE_TRACES, else <repo>/../shared/traces, else /work/shared/traces. When they are
# here, a test whose trace is missing fails instead of skipping (FAULTLINE_REQUIRE_TRACES).
traces="${FAULTLINE_TRACES:-}"
if [ -z "$traces" ]; then
  if [ -d ../shared/traces ]; then traces=../shared/traces; else traces=/work/shared/traces; fi
fi
no_traces_warning() {
  {
    echo
    echo "######################################################################"
    echo "WARNING: no real traces at '$traces' (set FAULTLINE_TRACES, or put them"
    echo "WARNING: in ../shared/traces beside the repository): every real-trace"
    echo "WARNING: test will be SKIPPED and pass without checking anything real."
    echo "######################################################################"
    echo
  } >&2
}
have_traces=0
if [ -d "$traces" ]; then
  have_traces=1
  FAULTLINE_TRACES="$(cd "$traces" && pwd)"
  export FAULTLINE_TRACES FAULTLINE_REQUIRE_TRACES=1
  echo "== real traces: $FAULTLINE_TRACES (required: a missing trace fails its test)"
else
  no_traces_warning
fi

echo "== cargo fmt"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo doc (broken or private links in public docs fail)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet
echo "== cargo test"
cargo test --workspace
echo "== real-world smoke (PostgreSQL under pgbench: control, CPU cap, table lock, freeze; one case through OTLP)"
# The debug binary `cargo test` just built: analysis of these short traces takes seconds.
cargo build -p faultline
smoke="${TMPDIR:-/tmp}/faultline-rw-smoke"
rm -rf "$smoke"
python3 integration-tests/realworld/run.py --smoke --bin "${CARGO_TARGET_DIR:-target}/debug/faultline" --out "$smoke/cases" --root "$smoke/apps"
# Said again at the end, where a CI log is read.
[ "$have_traces" -eq 1 ] || no_traces_warning
