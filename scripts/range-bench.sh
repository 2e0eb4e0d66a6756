#!/usr/bin/env bash
# The parallel range query figures of docs/BENCHMARKS.md §6, on 200k keys with 4 KB values:
#   1. warm readseq/readreverse side by side with LevelDB and RocksDB (scripts/side-by-side.sh);
#   2. cold readseq/readreverse with read-ahead on and off, on ROUNDS fresh random loads;
#   3. cold multi_get of 32 keys vs single gets on the same loads;
#   4. seekrandom --seek_nexts=100 vs RocksDB and RocksDB BlobDB's own db_bench.
# Prints the raw lines and, at the end, the medians and ratios.
# usage: scripts/range-bench.sh [ROUNDS]   (WISCKEY_BIN pins a binary; default target/release)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release --bin wisckey >&2
peers_dir="$(cd ../shared/peers 2>/dev/null && pwd || true)"
out="$(mktemp -d)"
common=(--num=200000 --value_size=4096)

echo "### warm, side by side"
WISCKEY_BIN="$bin" bash scripts/side-by-side.sh 200000 4096 fillrandom,readseq,readreverse "$rounds" | grep '^|' || true

echo "### cold"
for r in $(seq "$rounds"); do
  db="$(mktemp -d)/db"
  "$bin" bench "${common[@]}" --benchmarks=fillrandom --db="$db" | grep -E '^fillrandom'
  for p in 1 0 1 0; do
    "$bin" bench "${common[@]}" --benchmarks=readseq,readreverse --use_existing_db=1 --cold=1 \
      --prefetch=$p --db="$db" | grep -E '^read' | sed "s/^/prefetch=$p /" | tee -a "$out/cold"
  done
  for b in readrandom multireadrandom readrandom multireadrandom readrandom multireadrandom; do
    "$bin" bench "${common[@]}" --benchmarks=$b --reads=20000 --use_existing_db=1 --cold=1 \
      --db="$db" | grep -E '^(readrandom|multireadrandom)' | tee -a "$out/cold"
  done
  rm -rf "$(dirname "$db")"
done

echo "### seekrandom --seek_nexts=100"
# RocksDB's db_bench (Debian rocksdb-tools), as ../shared/peers/run-peers.sh runs it.
db_bench_rocks="$(command -v db_bench || true)"
for r in $(seq "$rounds"); do
  db="$(mktemp -d)/db"
  "$bin" bench "${common[@]}" --benchmarks=fillrandom,seekrandom --seek_nexts=100 --reads=2000 --db="$db" \
    | grep -E '^seekrandom' | sed 's/^/wisckey /' | tee -a "$out/seek"
  rm -rf "$db"
  if [ -n "$db_bench_rocks" ]; then
    peer=(--benchmarks=fillrandom,seekrandom --compression_ratio=0.5 --seek_nexts=100 --reads=2000
          --compression_type=snappy --key_size=16 "${common[@]}")
    "$db_bench_rocks" "${peer[@]}" --db="$db" 2>&1 | tr '\r' '\n' | grep -E '^seekrandom' \
      | sed 's/^/rocksdb /' | tee -a "$out/seek"
    rm -rf "$db"
    "$db_bench_rocks" "${peer[@]}" --db="$db" --enable_blob_files=true --min_blob_size=0 \
      --enable_blob_garbage_collection=true 2>&1 | tr '\r' '\n' | grep -E '^seekrandom' \
      | sed 's/^/rocksdb-blobdb /' | tee -a "$out/seek"
  else
    echo "(no RocksDB db_bench on PATH: see ${peers_dir:-../shared/peers}/run-peers.sh)"
  fi
  rm -rf "$(dirname "$db")"
done

python3 - "$out" <<'PY'
import os, re, statistics as st, sys
out = sys.argv[1]
def med(xs): return st.median(xs) if xs else float("nan")
cold = open(os.path.join(out, "cold")).read() if os.path.exists(os.path.join(out, "cold")) else ""
for b in ("readseq", "readreverse"):
    on = [float(x) for x in re.findall(rf"prefetch=1 {b}\s+:\s+([\d.]+)", cold)]
    off = [float(x) for x in re.findall(rf"prefetch=0 {b}\s+:\s+([\d.]+)", cold)]
    print(f"cold {b}: prefetch on {med(on):.2f}, off {med(off):.2f} us/op -> {med(off)/med(on):.2f}x")
single = [float(x) for x in re.findall(r"^readrandom\s+:\s+([\d.]+)", cold, re.M)]
multi = [float(x) for x in re.findall(r"^multireadrandom\s+:\s+([\d.]+)", cold, re.M)]
print(f"cold multi_get: {med(multi):.2f} vs single gets {med(single):.2f} us/key -> {med(single)/med(multi):.2f}x")
seek = open(os.path.join(out, "seek")).read() if os.path.exists(os.path.join(out, "seek")) else ""
per = {}
for engine, us in re.findall(r"^(\S+) seekrandom\s+:\s+([\d.]+)", seek, re.M):
    per.setdefault(engine, []).append(float(us))
w = med(per.get("wisckey", []))
for engine, xs in per.items():
    print(f"seekrandom --seek_nexts=100: {engine} {med(xs):.1f} us" + ("" if engine == "wisckey" else f" ({med(xs)/w:.2f}x wisckey's)"))
PY
