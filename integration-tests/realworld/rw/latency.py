"""Client-side latency per request and per-phase summaries: a case only counts when the fault
visibly hurts the service (p99 up 2x, throughput down 20 %, or hung requests)."""
import json
import threading

HUNG_SECONDS = 5.0


class LatencyLog:
    """Thread-safe log of requests: start (CLOCK_MONOTONIC ns), end or None, ok, class."""

    def __init__(self):
        self._lock = threading.Lock()
        self._done = []
        self._open = {}
        self._next = 0

    def begin(self, start_ns, klass="all"):
        with self._lock:
            token = self._next
            self._next += 1
            self._open[token] = (start_ns, klass)
        return token

    def end(self, token, end_ns, ok=True):
        with self._lock:
            start_ns, klass = self._open.pop(token, (None, None))
            if start_ns is not None:
                self._done.append((start_ns, end_ns, ok, klass))

    def add(self, start_ns, end_ns, ok=True, klass="all"):
        """A request measured elsewhere (e.g. parsed from pgbench's log)."""
        with self._lock:
            self._done.append((start_ns, end_ns, ok, klass))

    def records(self):
        """Completed requests, plus still-open ones with end None."""
        with self._lock:
            return list(self._done) + [(s, None, True, k) for s, k in self._open.values()]

    def dump(self, path):
        with open(path, "w") as f:
            for s, e, ok, k in self.records():
                f.write(json.dumps({"start_ns": s, "end_ns": e, "ok": ok, "class": k}) + "\n")


def _pct(sorted_ms, q):
    if not sorted_ms:
        return None
    i = min(len(sorted_ms) - 1, int(round(q * (len(sorted_ms) - 1))))
    return round(sorted_ms[i], 3)


def summarize(records, start_ns, end_ns, now_ns, klass=None):
    """Requests started in [start_ns, end_ns): latency percentiles of the completed ones,
    throughput, and requests that took over 5 s or never finished by `now_ns`."""
    lat, started, hung, errors = [], 0, 0, 0
    for s, e, ok, k in records:
        if not (start_ns <= s < end_ns) or (klass is not None and k != klass):
            continue
        started += 1
        if e is None:
            if now_ns - s > HUNG_SECONDS * 1e9:
                hung += 1
            continue
        if (e - s) > HUNG_SECONDS * 1e9:
            hung += 1
        if not ok:
            errors += 1
            continue
        lat.append((e - s) / 1e6)
    lat.sort()
    seconds = max(1e-9, (end_ns - start_ns) / 1e9)
    return {
        "p50_ms": _pct(lat, 0.50),
        "p99_ms": _pct(lat, 0.99),
        "max_ms": round(lat[-1], 3) if lat else None,
        "throughput_rps": round(len(lat) / seconds, 3),
        "started": started,
        "hung_or_gt5s": hung,
        "errors": errors,
    }


def anomaly(records, baseline, fault, now_ns):
    """Baseline vs fault phase, overall and per request class, and whether the fault hurt."""
    b = summarize(records, baseline[0], baseline[1], now_ns)
    f = summarize(records, fault[0], fault[1], now_ns)
    classes = sorted({k for _, _, _, k in records})
    per_class = {
        k: {
            "baseline": summarize(records, baseline[0], baseline[1], now_ns, k),
            "fault": summarize(records, fault[0], fault[1], now_ns, k),
        }
        for k in classes
    }
    ratios = []
    for side in [{"baseline": b, "fault": f}] + list(per_class.values()):
        bp, fp = side["baseline"]["p99_ms"], side["fault"]["p99_ms"]
        if bp and fp:
            ratios.append(fp / bp)
    p99_ratio = round(max(ratios), 3) if ratios else None
    drop = 0.0
    if b["throughput_rps"] > 0:
        drop = round(1.0 - f["throughput_rps"] / b["throughput_rps"], 3)
    hung = f["hung_or_gt5s"]
    hurt = (p99_ratio is not None and p99_ratio >= 2.0) or drop >= 0.2 or hung > 0 or f["errors"] > b["errors"] + 5
    return {
        "baseline_p50_ms": b["p50_ms"],
        "baseline_p99_ms": b["p99_ms"],
        "fault_p50_ms": f["p50_ms"],
        "fault_p99_ms": f["p99_ms"],
        "baseline_throughput": b["throughput_rps"],
        "fault_throughput": f["throughput_rps"],
        "baseline_detail": b,
        "fault_detail": f,
        "per_class": per_class,
        "p99_ratio": p99_ratio,
        "throughput_drop": drop,
        "hung_requests": hung,
        "hurt": hurt,
    }


def unhealthy_normal_phases(truths, factor=5.0):
    """Cases whose *normal* phase was already slow: p99 over `factor` × the median normal-phase
    p99 of the same application in the same run. Such a phase (a control included) was not
    fault-free — on a shared host, measured: MariaDB's `fdatasync` 85× slower in one normal
    phase — so the engine had no healthy baseline to learn. Reported, not excluded: the rule
    came after the failures it explains. Returns {case_id: ratio}."""
    by_app = {}
    for t in truths:
        p = t["anomaly"]["baseline_p99_ms"]
        if p:
            by_app.setdefault(t.get("app"), []).append(p)
    flagged = {}
    for t in truths:
        p99s = sorted(by_app.get(t.get("app"), []))
        p = t["anomaly"]["baseline_p99_ms"]
        if len(p99s) < 3 or not p:
            continue
        median = p99s[len(p99s) // 2]
        if median > 0 and p / median > factor:
            flagged[t["case_id"]] = round(p / median, 1)
    return flagged
