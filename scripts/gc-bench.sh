#!/usr/bin/env bash
# Issue 5's GC figures: 200k x 4 KB, fillrandom + three overwrites + stats, under several GC
# configurations, ROUNDS times alternating; prints each run and the medians of the last
# overwrite's micros/op, space_amp (st_blocks) and du.
# usage: scripts/gc-bench.sh [ROUNDS] [NUM]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"; num="${2:-200000}"
cargo build --release --bin wisckey >&2
declare -A cfg=(
  [defaults]=""
  [gc-50pct-no-stall]="--gc_space_amp_target=0 --gc_space_amp_stall=0"
  [stall-1.5]="--gc_space_amp_target=1.4 --gc_space_amp_stall=1.5"
  [gc-off]="--gc_interval_ms=0"
)
order=(defaults gc-50pct-no-stall stall-1.5 gc-off)
out="$(mktemp)"
for r in $(seq "$rounds"); do
  for name in "${order[@]}"; do
    dir="$(mktemp -d)"
    # shellcheck disable=SC2086
    res="$(target/release/wisckey bench --num="$num" --value_size=4096 \
      --benchmarks=fillrandom,overwrite,overwrite,overwrite,stats --db="$dir/db" ${cfg[$name]})"
    ow="$(grep '^overwrite' <<<"$res" | tail -1 | awk '{print $3}')"
    amp="$(grep '^space_amp' <<<"$res" | awk '{print $2}')"
    stall="$(grep '^gc_stall' <<<"$res" | awk '{print $2}')"
    du="$(du -sm "$dir/db" | cut -f1)"
    echo "$name $ow $amp $du $stall" | tee -a "$out"
    rm -rf "$dir"
  done
done
python3 - "$out" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, ow, amp, du, stall = line.split()
    rows.setdefault(name, []).append((float(ow), float(amp), int(du), float(stall)))
print("| config | 3rd overwrite µs/op (median) | space_amp (median) | du MB (median) | writers waited for GC, s |")
print("|---|---:|---:|---:|---:|")
for name, rs in rows.items():
    med = lambda i: statistics.median(r[i] for r in rs)
    runs = " / ".join(f"{r[0]:.2f}" for r in rs)
    print(f"| {name} | {med(0):.2f} ({runs}) | {med(1):.2f} | {med(2):.0f} | {med(3):.1f} |")
PY
rm -f "$out"
