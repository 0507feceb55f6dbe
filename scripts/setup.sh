#!/usr/bin/env bash
# Installs everything faultline's build, run and tests need on a fresh Debian machine
# (idempotent: skips what is already there). Sourced by run-defaults.sh and test.sh.
set -euo pipefail

need_apt=()
command -v babeltrace2 >/dev/null 2>&1 || need_apt+=(babeltrace2)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
command -v promtool >/dev/null 2>&1 || need_apt+=(prometheus)
command -v zstd >/dev/null 2>&1 || need_apt+=(zstd)
command -v perf >/dev/null 2>&1 || need_apt+=(linux-perf)
# plugin/tests/source_perf.rs checks perf's syscall counts against strace's (weaker check without).
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
command -v lttng-syscallstats >/dev/null 2>&1 || need_apt+=(python3-lttnganalyses)
# plugin/tests/otlp_source.rs checks that the OTLP TCP segment defaults are node_exporter's names.
command -v prometheus-node-exporter >/dev/null 2>&1 || need_apt+=(prometheus-node-exporter)
# plugin/tests/systemd_unit.rs verifies config/systemd/faultline.service.
command -v systemd-analyze >/dev/null 2>&1 || need_apt+=(systemd)
# The real-world harness (integration-tests/realworld): servers, load generators, fault tools.
[ -x /usr/lib/postgresql/15/bin/postgres ] || need_apt+=(postgresql)
command -v mariadbd >/dev/null 2>&1 || need_apt+=(mariadb-server mariadb-client)
command -v sysbench >/dev/null 2>&1 || need_apt+=(sysbench)
command -v apache2 >/dev/null 2>&1 || [ -x /usr/sbin/apache2 ] || need_apt+=(apache2)
[ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need_apt+=(nftables)
command -v stress-ng >/dev/null 2>&1 || need_apt+=(stress-ng)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || need_apt+=(iproute2)
# pip for the Python test dependencies below (stock Debian's python3 comes without it).
python3 -m pip --version >/dev/null 2>&1 || need_apt+=(python3-pip)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need_apt[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  # policy-rc.d 101: packaged servers must not start as services; the harness starts its own.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo_cmd tee /usr/sbin/policy-rc.d >/dev/null
    $sudo_cmd chmod +x /usr/sbin/policy-rc.d
  fi
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# The engine is also built as a WASM module by plugin/build.rs.
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  echo "setup: adding rust target wasm32-unknown-unknown"
  rustup target add wasm32-unknown-unknown
fi

# `pip install` into the python3 the tests run. A stock Debian 12 python3 refuses with
# "externally-managed-environment" (PEP 668); the tests call that python3 directly, so a
# virtualenv would not be seen: retry with --break-system-packages, which on Debian installs
# into /usr/local/lib/python3.*/dist-packages (root) or ~/.local, never over apt's files in
# /usr/lib/python3/dist-packages. pyenv/virtualenv pythons take the first attempt. Quiet:
# pip's output is shown only when the install fails.
pip_install() {
  local log
  log=$(mktemp)
  if python3 -m pip install -q --disable-pip-version-check "$@" >"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  if grep -q "externally-managed-environment" "$log" &&
    python3 -m pip install -q --disable-pip-version-check --break-system-packages "$@" >"$log" 2>&1; then
    rm -f "$log"
    return 0
  fi
  cat "$log" >&2
  rm -f "$log"
  return 1
}

# A real OpenTelemetry SDK for the OTLP end-to-end tests.
if ! python3 -c "import opentelemetry.exporter.otlp.proto.grpc, opentelemetry.exporter.otlp.proto.http" >/dev/null 2>&1; then
  echo "setup: installing the OpenTelemetry Python SDK"
  pip_install opentelemetry-sdk opentelemetry-exporter-otlp-proto-grpc opentelemetry-exporter-otlp-proto-http
fi

# PyYAML for the static checks of the agent configs (Vector, Collector, Grafana provisioning).
python3 -c "import yaml" >/dev/null 2>&1 || pip_install pyyaml
