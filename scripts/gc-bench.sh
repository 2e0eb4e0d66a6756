#!/usr/bin/env bash
# Value-log GC under sustained overwrites (docs/BENCHMARKS.md §5): NUM x 4 KB, fillrandom + three
# overwrites, under several GC configurations and RocksDB BlobDB's own db_bench with its GC on,
# ROUNDS times alternating. Prints each run, then per configuration the medians of the last
# overwrite's micros/op and p99, space amplification (du / live bytes: allocated bytes, as du prints
# them, over NUM keys and values), and the bytes GC moved
# per byte overwritten.
# usage: scripts/gc-bench.sh [ROUNDS] [NUM] [CONFIGS]
#   CONFIGS: space-separated names from the table below (default: all of them)
#   env: WISCKEY_BIN pins a binary (default: builds target/release/wisckey); BLOBDB=0 skips it;
#        RAW=DIR keeps each run's full output there
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"; num="${2:-200000}"
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release --bin wisckey >&2
declare -A cfg=(
  [defaults]=""
  [bound-1.25]="--gc_space_amp_target=1.15 --gc_space_amp_stall=1.25"
  [bound-1.2]="--gc_space_amp_target=1.1 --gc_space_amp_stall=1.2"
  [bound-1.4]="--gc_space_amp_target=1.3 --gc_space_amp_stall=1.4"
  [bound-1.5]="--gc_space_amp_target=1.4 --gc_space_amp_stall=1.5"
  [no-stall]="--gc_space_amp_target=0 --gc_space_amp_stall=0"
  [gc-off]="--gc_interval_ms=0"
  [blobdb]=""
)
order=(${3:-defaults bound-1.25 bound-1.2 no-stall gc-off blobdb})
if [ "${BLOBDB:-1}" = 0 ]; then order=("${order[@]/blobdb}"); fi
if [[ " ${order[*]} " == *" blobdb "* ]] && ! command -v db_bench >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rocksdb-tools; } >&2
fi
benches=fillrandom,overwrite,overwrite,overwrite
live=$((num * (16 + 4096)))
out="$(mktemp)"
run_wisckey() { # name dir -> "ow p99 amp du_mb stall reput"
  # shellcheck disable=SC2086
  res="$("$bin" bench --num="$num" --value_size=4096 --benchmarks="$benches,stats" --db="$2/db" ${cfg[$1]})"
  if [ -n "${RAW:-}" ]; then echo "$res" >"$RAW/$1-$r.txt"; fi
  ow="$(grep '^overwrite' <<<"$res" | tail -1 | awk '{print $3}')"
  p99="$(grep '^overwrite' <<<"$res" | tail -1 | sed -nE 's/.*p99 ([0-9.]+).*/\1/p')"
  stall="$(grep '^gc_stall' <<<"$res" | awk '{print $2}')"
  user="$(grep '^user_written' <<<"$res" | awk '{print $2 * ($3 == "GB" ? 1024 : 1)}')"
  reput="$(grep '^gc:' <<<"$res" | sed -nE 's/.* ([0-9.]+) (MB|GB|KB|B) rewritten.*/\1 \2/p' |
    awk '{print $1 * ($2 == "GB" ? 1024 : ($2 == "KB" ? 1/1024 : ($2 == "B" ? 1/1048576 : 1)))}')"
  du="$(du -s -B1 "$2/db" | cut -f1)"
  echo "$ow ${p99:-nan} $(python3 -c "print(round($du / $live, 3))") $((du >> 20)) $stall \
$(python3 -c "print(round(${reput:-0} / ($user * 3 / 4), 3))")"
}
run_blobdb() { # name dir
  res="$(db_bench --num="$num" --value_size=4096 --key_size=16 --benchmarks="$benches" --db="$2/db" \
    --compression_type=none --enable_blob_files=true --min_blob_size=0 \
    --enable_blob_garbage_collection=true --histogram=1 2>&1)"
  if [ -n "${RAW:-}" ]; then echo "$res" >"$RAW/$1-$r.txt"; fi
  ow="$(grep '^overwrite' <<<"$res" | tail -1 | awk '{print $3}')"
  p99="$(grep -E '^Percentiles:' <<<"$res" | tail -1 | sed -nE 's/.*P99: ([0-9.]+).*/\1/p')"
  du="$(du -s -B1 "$2/db" | cut -f1)"
  echo "$ow ${p99:-nan} $(python3 -c "print(round($du / $live, 3))") $((du >> 20)) 0 nan"
}
for r in $(seq "$rounds"); do
  for name in "${order[@]}"; do
    [ -n "$name" ] || continue
    dir="$(mktemp -d)"
    if [ "$name" = blobdb ]; then row="$(run_blobdb "$name" "$dir")"; else row="$(run_wisckey "$name" "$dir")"; fi
    echo "$name $row" | tee -a "$out"
    rm -rf "$dir"
  done
done
python3 - "$out" <<'PY'
import math, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, *vals = line.split()
    rows.setdefault(name, []).append([float(v) for v in vals])
print("| config | last overwrite µs/op (median; runs) | p99 µs | space amp (du / live) | du MB | writers waited for GC, s | bytes GC moved per byte overwritten |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name, rs in rows.items():
    def med(i):
        xs = [r[i] for r in rs if not math.isnan(r[i])]
        return statistics.median(xs) if xs else float("nan")
    runs = " / ".join(f"{r[0]:.2f}" for r in rs)
    print(f"| {name} | {med(0):.2f} ({runs}) | {med(1):.0f} | {med(2):.2f} | {med(3):.0f} | {med(4):.1f} | {med(5):.2f} |")
PY
rm -f "$out"
