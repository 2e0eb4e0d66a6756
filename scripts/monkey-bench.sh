#!/usr/bin/env bash
# Monkey against uniform filter bits at the same budget (docs/BENCHMARKS.md §7): for each merge policy, load
# NUM keys (fillrandom, 100 B values, 4 MiB write buffer, 5 filter bits per key on average) with
# each allocation and count Bloom false positives per zero-result lookup twice:
#   - over the load: 100 absent-key lookups every NUM/100 writes, each once compaction has
#     caught up (`--probe_every`), with the filter bits per entry the tables held at each probe;
#   - at the end: 200 000 absent-key lookups (`readmissing`) on the loaded tree.
# A tiered tree's largest level fills and empties in cycles, so where the load happens to stop
# decides the end-of-load figure; the average over the load samples every phase.
# ROUNDS rounds, the two allocations alternating; prints every run and the medians.
# usage: scripts/monkey-bench.sh [NUM] [ROUNDS]   (env WISCKEY_BIN pins a binary, POLICIES
#        the policies, default "tiering leveling")
set -euo pipefail
cd "$(dirname "$0")/.."
num="${1:-10000000}"; rounds="${2:-3}"
policies="${POLICIES:-tiering leveling}"
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release -p wisckey-cli >&2
out="$(mktemp)"; dir="$(mktemp -d)"
trap 'rm -rf "$dir" "$out"' EXIT
for r in $(seq "$rounds"); do
  for policy in $policies; do
    allocs="uniform monkey"; [ $((r % 2)) -eq 0 ] && allocs="monkey uniform"
    for alloc in $allocs; do
      rm -rf "$dir/db"
      flock /tmp/wisckey-bench.lock "$bin" bench --num="$num" --reads=200000 --value_size=100 \
        --bloom_bits=5 --write_buffer_size=4194304 --probe_every=$((num / 100)) \
        --benchmarks=fillrandom,stats,readmissing,stats --merge_policy="$policy" \
        --filter_allocation="$alloc" --db="$dir/db" --json | grep '^{' | sed "s|^|$r\t$policy\t$alloc\t|" >> "$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
from collections import defaultdict
runs = defaultdict(list)  # (policy, alloc) -> [(during fp, during bits, end fp, end bits)]
rows = defaultdict(list)
for line in open(sys.argv[1]):
    r, policy, alloc, js = line.rstrip("\n").split("\t", 3)
    rows[(r, policy, alloc)].append(json.loads(js))
def bits(s):
    return 8 * sum(s["level_filter_bytes"]) / max(1, sum(s["level_entries"]))
for (r, policy, alloc), js in sorted(rows.items()):
    fill, s1, _, s2 = js
    during = s1["filter_false_positives"] / max(1, s1["point_lookups"])
    during_bits = float(fill["message"].split("probes: ")[1].split(" ")[0])
    end = (s2["filter_false_positives"] - s1["filter_false_positives"]) / max(1, s2["point_lookups"] - s1["point_lookups"])
    runs[(policy, alloc)].append((during, during_bits, end, bits(s2)))
    print(f"round {r} {policy:9} {alloc:8} over the load {during:.3f} FP/lookup at {during_bits:.2f} bits/entry;"
          f" at the end {end:.3f} at {bits(s2):.2f}; runs {s2['level_runs']}")
print()
print("| policy | allocation | FP/lookup over the load | bits/entry | FP/lookup at the end | bits/entry |")
print("|---|---|---:|---:|---:|---:|")
med = lambda xs: statistics.median(xs)
for policy in dict.fromkeys(p for p, _ in runs):
    for alloc in ("uniform", "monkey"):
        v = runs[(policy, alloc)]
        print(f"| {policy} | {alloc} | {med([x[0] for x in v]):.3f} | {med([x[1] for x in v]):.2f} |"
              f" {med([x[2] for x in v]):.3f} | {med([x[3] for x in v]):.2f} |")
    u, m = runs[(policy, "uniform")], runs[(policy, "monkey")]
    print(f"| {policy} | **monkey ÷ uniform** | **{med([x[0] for x in m]) / med([x[0] for x in u]):.2f}×** | |"
          f" **{med([x[2] for x in m]) / med([x[2] for x in u]):.2f}×** | |")
PY
