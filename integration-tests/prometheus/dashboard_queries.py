#!/usr/bin/env python3
"""Runs every query of dashboards/faultline.json against a live Prometheus.

Why: a dashboard whose panels silently show "No data" after a metric rename is worse than
none. Every panel expression (and the annotation and variable queries) is expanded the way
Grafana would expand it, sent to /api/v1/query, and must parse and return at least one
series. Usable alone:

    python3 dashboard_queries.py --prometheus http://127.0.0.1:9090 \
        --var target=mariadb --var instance=127.0.0.1:9464 --var host=.*
"""

import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "dashboards" / "faultline.json"

# Grafana's built-in interval variables, replaced by what Grafana would compute for a 1 s
# scrape interval (the live test's); `$__rate_interval` must span at least 4 scrapes.
BUILTINS = {
    "__rate_interval": "10s",
    "__interval": "2s",
    "__range": "5m",
}

# Series a faultline exports only with some inputs: the vital signs when its source
# delivers hardware counters (the recorded perf traces this test replays carry none), the
# TCP segment tallies when an OTLP receiver listens (the live test turns OTLP off). A
# query reading only one group's series may come back empty, but only while Prometheus
# holds no series of that group from any faultline: once one exists, an empty panel is a
# real failure again. It must still parse.
OPTIONAL_GROUPS = {
    "hardware counters": ("faultline_vital_sign", "faultline_symptom"),
    "OTLP TCP segment readings": ("faultline_otlp_tcp_segment_",),
}


def optional_group(expr):
    """The group every faultline metric `expr` reads belongs to, if there is one."""
    names = re.findall(r"\bfaultline_\w+", expr)
    for group, prefixes in OPTIONAL_GROUPS.items():
        if names and all(n.startswith(prefixes) for n in names):
            return group
    return None


def expressions(dashboard):
    """Yields (where, expr) for every query of every panel, nested rows included."""

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    yield f'panel "{p.get("title")}" ref {t.get("refId")}', t["expr"]
            yield from walk(p.get("panels", []))

    yield from walk(dashboard.get("panels", []))


def annotation_expressions(dashboard):
    for a in dashboard.get("annotations", {}).get("list", []):
        if a.get("expr"):
            yield f'annotation "{a.get("name")}"', a["expr"]


def variable_queries(dashboard):
    """Yields (name, metric selector, label) of every `label_values(selector, label)` variable."""
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q or "")
        if m:
            yield v["name"], m.group(1), m.group(2)


def substitute(expr, variables):
    """Expands `$name`, `${name}` and `[[name]]` like Grafana, longest names first."""
    values = {**BUILTINS, **variables}
    for name in sorted(values, key=len, reverse=True):
        val = values[name]
        expr = expr.replace("${" + name + "}", val).replace("[[" + name + "]]", val)
        expr = re.sub(r"\$" + re.escape(name) + r"\b", lambda _m: val, expr)
    # `$1` is a label_replace capture group, no variable.
    leftover = re.findall(r"\$\{?[A-Za-z_]\w*", expr)
    if leftover:
        raise ValueError(f"unsubstituted variables {leftover} in: {expr}")
    return expr


def prom_get(base, path, params):
    url = f"{base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        # Prometheus answers a bad expression with 400 and a JSON error body.
        return json.load(e)


def check(base, variables, dashboard_path=DASHBOARD, include_annotations=True):
    """Returns a list of failures (empty when every query parses and returns data)."""
    dashboard = json.loads(Path(dashboard_path).read_text())
    failures = []
    checked = 0
    queries = list(expressions(dashboard))
    absent = set()
    for group, prefixes in OPTIONAL_GROUPS.items():
        match = '{__name__=~"(' + "|".join(prefixes) + ').*"}'
        got = prom_get(base, "/api/v1/series", {"match[]": match})
        if got.get("status") == "success" and not got.get("data"):
            absent.add(group)
    if include_annotations:
        queries += list(annotation_expressions(dashboard))
    for where, raw in queries:
        checked += 1
        try:
            expr = substitute(raw, variables)
        except ValueError as e:
            failures.append(f"{where}: {e}")
            continue
        body = prom_get(base, "/api/v1/query", {"query": expr})
        if body.get("status") != "success":
            failures.append(f"{where}: Prometheus rejected `{expr}`: {body.get('error')}")
        elif not body["data"]["result"] and optional_group(raw) in absent:
            print(f"skip {where}: no data, and no faultline exports {optional_group(raw)}")
        elif not body["data"]["result"]:
            failures.append(f"{where}: no data for `{expr}`")
        else:
            print(f"ok   {where}: {len(body['data']['result'])} series")
    for name, selector, label in variable_queries(dashboard):
        checked += 1
        body = prom_get(base, "/api/v1/series", {"match[]": selector})
        values = {s.get(label) for s in body.get("data", [])} - {None}
        if body.get("status") != "success" or not values:
            failures.append(f"variable ${name}: label_values({selector}, {label}) is empty")
        else:
            print(f"ok   variable ${name}: {sorted(values)}")
    print(f"{checked} dashboard queries checked, {len(failures)} failed")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prometheus", required=True, help="base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--dashboard", default=str(DASHBOARD))
    ap.add_argument("--var", action="append", default=[], help="NAME=VALUE, a dashboard variable")
    args = ap.parse_args()
    variables = dict(v.split("=", 1) for v in args.var)
    failures = check(args.prometheus, variables, args.dashboard)
    for f in failures:
        print("FAIL", f, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
