#!/usr/bin/env bash
# Runs wisckey's db_bench and the peers' own db_bench (../shared/peers/run-peers.sh) on the same
# workload ROUNDS times, alternating, and prints the median micros/op per engine and benchmark.
# usage: scripts/side-by-side.sh NUM VALUE_SIZE BENCHMARKS [ROUNDS] [extra wisckey flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
num="$1"; vsz="$2"; benches="$3"; rounds="${4:-3}"; shift $(( $# >= 4 ? 4 : 3 ))
peers="${PEERS:-../shared/peers/run-peers.sh}"
out="$(mktemp -d)"
# WISCKEY_BIN pins a copy of the binary, so a rebuild during a long run cannot swap it.
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release --bin wisckey >&2
for r in $(seq "$rounds"); do
  db="$(mktemp -d)/db"
  echo "== wisckey num=$num value_size=$vsz" >>"$out/raw"
  "$bin" bench --num="$num" --value_size="$vsz" --benchmarks="$benches" --db="$db" "$@" \
    | grep -E ' : ' >>"$out/raw"
  rm -rf "$(dirname "$db")"
  bash "$peers" "$num" "$vsz" "$benches" >>"$out/raw" 2>/dev/null
done
python3 - "$out/raw" <<'PY'
import re, statistics, sys
runs = {}
engine = None
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+)", line)
    if m:
        engine = m.group(1); continue
    m = re.match(r"(\S+)\s+:\s+([\d.]+) micros/op", line.replace("\r", ""))
    if m and engine:
        runs.setdefault((engine, m.group(1)), []).append(float(m.group(2)))
engines = sorted({e for e, _ in runs}, key=lambda e: (e != "wisckey", e))
benches = list(dict.fromkeys(b for _, b in runs))
print("| benchmark | " + " | ".join(f"{e} µs/op" for e in engines) + " | " +
      " | ".join(f"{e}/wisckey" for e in engines if e != "wisckey") + " |")
print("|---" * (1 + 2 * len(engines) - 1) + "|")
for b in benches:
    med = {e: statistics.median(runs[(e, b)]) for e in engines if (e, b) in runs}
    w = med.get("wisckey")
    cells = [f"{med[e]:.3f}" if e in med else "-" for e in engines]
    ratios = [f"{med[e] / w:.2f}x" if e in med and w else "-" for e in engines if e != "wisckey"]
    print(f"| {b} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
print(f"\n(median of {len(next(iter(runs.values())))} runs; ratio > 1 means wisckey is faster)")
PY
echo "raw output: $out/raw" >&2
