"""Where the real shared traces are, the same lookup as wasm-guest/tests/common/traces.rs:
$FAULTLINE_TRACES if set, else <repo root>/../shared/traces if it exists, else
/work/shared/traces. Under FAULTLINE_REQUIRE_TRACES=1 (set by scripts/test.sh when it found
the traces) a missing trace must fail a check instead of skipping it."""

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def root():
    env = os.environ.get("FAULTLINE_TRACES")
    if env:
        return Path(env)
    beside = REPO.parent / "shared" / "traces"
    if beside.is_dir():
        return beside
    return Path("/work/shared/traces")


def required():
    return os.environ.get("FAULTLINE_REQUIRE_TRACES", "") not in ("", "0")
