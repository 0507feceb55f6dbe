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
  # No install gives them, so their tests skip rather than fail; each skip is listed at
  # the end (FAULTLINE_SKIP_LOG below), where a CI log is read.
  no_traces_warning
fi

# setup.sh above installed every tool the tests use, so a missing one is a failure, not a
# skip (plugin/tests/prereq/mod.rs). What no install can give (no PMU counters in a VM,
# perf_event_paranoid, not root, a machine too loaded for a rate) still skips; each skip
# is appended to FAULTLINE_SKIP_LOG and listed at the end, where a CI log is read (cargo
# shows nothing a passing test prints).
export FAULTLINE_REQUIRE_TOOLS=1
FAULTLINE_SKIP_LOG="$(mktemp "${TMPDIR:-/tmp}/faultline-skips.XXXXXX")"
export FAULTLINE_SKIP_LOG
report_skips() {
  local n
  n=$(grep -c . "$FAULTLINE_SKIP_LOG" 2>/dev/null || true)
  echo
  echo "== skipped checks: ${n:-0} (what this machine cannot check; see plugin/tests/prereq/mod.rs)"
  [ "${n:-0}" -eq 0 ] || sed 's/^/SKIPPED: /' "$FAULTLINE_SKIP_LOG"
  rm -f "$FAULTLINE_SKIP_LOG"
}
# On every exit, a failed step's too: the skips explain what the run did not check.
trap report_skips EXIT

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
