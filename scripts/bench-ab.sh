#!/usr/bin/env bash
# A/B of two builds of the engine bench, run at the same time, one per core.
#
# Why: on these shared 2-core machines one build's rate varies by ±30 % from run to
# run (neighbours' memory traffic), so runs one after the other cannot show a 5 %
# change. Two runs side by side see the same neighbours: their ratio varied by 1–4 %
# where sequential pairs varied by 25–100 % (session 28). The two runs share the L3 and
# memory with each other, symmetrically; cores are swapped every round.
#
# Usage: scripts/bench-ab.sh A_BIN B_BIN [ROUNDS] [CASES] [HOSTS]
#   A_BIN, B_BIN  bench binaries (copy target/release/deps/engine-* of each build aside:
#                 `cargo bench -p faultline --bench engine --no-run` prints the path)
#   ROUNDS        default 6
#   CASES         FL_BENCH_CASES (default: every case)
#   HOSTS         FL_BENCH_HOSTS (default: native,wasm)
# Prints, per case and column (native, wasm, wasm/native), B/A paired by round: the
# median, the range and how many rounds B won; then whether the report digests agree.
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,18p' "$0"; exit 2; }
a_bin=$1 b_bin=$2 rounds=${3:-6} cases=${4:-} hosts=${5:-native,wasm}
[ "$(nproc)" -ge 2 ] || { echo "bench-ab: needs 2 cores" >&2; exit 2; }
out=$(mktemp -d)
for r in $(seq 1 "$rounds"); do
  ca=$((r % 2)); cb=$((1 - ca))
  for side in a b; do
    bin=$a_bin core=$ca
    [ "$side" = b ] && bin=$b_bin core=$cb
    env FL_BENCH_HOSTS="$hosts" FL_BENCH_DIGEST=1 FL_BENCH_REPS=3 \
      ${cases:+FL_BENCH_CASES="$cases"} \
      taskset -c "$core" "$bin" --bench >"$out/$side.$r.txt" 2>&1 &
  done
  wait
done
python3 - "$out" "$rounds" <<'EOF'
import statistics as st, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def rows(path):
    got = {}
    for line in open(path):
        c = [x.strip() for x in line.split('|')]
        if len(c) > 10 and c[6] != 'native M ev/s':
            got[f'{c[1]} {c[2]} {c[3]}'] = c[6:9]
    return got

def digests(side):
    return {l.strip() for r in range(1, rounds + 1) for l in open(f'{out}/{side}.{r}.txt')
            if l.strip().endswith(tuple('0123456789abcdef')) and (' native: ' in l or ' wasm: ' in l)}

pairs = {}
for r in range(1, rounds + 1):
    a, b = rows(f'{out}/a.{r}.txt'), rows(f'{out}/b.{r}.txt')
    for case in a.keys() & b.keys():
        pairs.setdefault(case, []).append((a[case], b[case]))
for col, name in enumerate(['native', 'wasm', 'wasm/native']):
    print(f'== {name}: B/A by round')
    for case, ps in sorted(pairs.items()):
        q = []
        for x, y in ps:
            try:
                q.append(float(y[col]) / float(x[col]))
            except (ValueError, ZeroDivisionError):
                pass
        if q:
            print(f'{case:34} median {st.median(q):.3f}  [{min(q):.2f}..{max(q):.2f}]  '
                  f'B won {sum(v > 1 for v in q)}/{len(q)}')
print('report digests:', 'identical' if digests('a') == digests('b') else 'DIFFER')
EOF
rm -rf "$out"
