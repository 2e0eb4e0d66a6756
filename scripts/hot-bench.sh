#!/usr/bin/env bash
# Hot data and large values against the in-process peers at an equal cache budget: YCSB at 1 KB
# (50k records: data that fits the caches; 200k: data that does not), and 16 KB / 100 KB values at
# 64 MiB (hot) and 256 MiB of data, read uniformly, zipfian and in order. Every engine gets the
# same total cache (`--cache_bytes`, default 32 MiB: fjall's and RocksDB's default cache, wisckey's
# default value cache; wisckey's uncompressed tables are read in place, its block cache holds
# nothing and is set to 0) and the same memtable (`--memtable_bytes`, default 8 MiB: wisckey's
# default write buffer; fjall's and RocksDB's 64 MiB default memtables held the whole "hot" 64 MiB
# data set and answered from it, which measured memtables, not caches); the harness flushes every
# engine, untimed, between loading and reading (fjall keeps sealed memtables without a bound until
# its flush catches up); engines alternate within each round; medians of the rounds.
#
#   scripts/hot-bench.sh [ROUNDS] [SECTIONS]     SECTIONS: ycsb,large (default both)
#
# Needs the `--features peers` build (RocksDB from source: slow once; librocksdb-sys needs
# libclang, which this script installs with apt when it is missing). HOT_BIN overrides the
# binary; HOT_ENGINES the engines (default: wisckey fjall rocksdb rocksdb-blob);
# HOT_CACHE_BYTES the cache budget; HOT_MEMTABLE_BYTES the memtable budget.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-3}"; sections="${2:-ycsb,large}"
cache="${HOT_CACHE_BYTES:-33554432}"
memtable="${HOT_MEMTABLE_BYTES:-8388608}"
read -r -a engines <<<"${HOT_ENGINES:-wisckey fjall rocksdb rocksdb-blob}"
bin="${HOT_BIN:-target/peers/release/wisckey}"
if [ -z "${HOT_BIN:-}" ]; then
  if ! ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libclang-dev; } >&2
  fi
  CARGO_TARGET_DIR=target/peers cargo build --release -p wisckey-cli --features peers >&2
fi
out="$(mktemp -d -t wisckey-hot-XXXXXX)"; results="$out/results.jsonl"; : >"$results"
uniform="$out/uniform-reads.properties"
printf 'readproportion=1\nupdateproportion=0\nscanproportion=0\ninsertproportion=0\nrequestdistribution=uniform\n' >"$uniform"
zipfian="$out/zipfian-reads.properties"
printf 'readproportion=1\nupdateproportion=0\nscanproportion=0\ninsertproportion=0\nrequestdistribution=zipfian\n' >"$zipfian"
run() { # run TAGS ARGS...: one harness run per engine, JSON lines tagged
  local tags="$1"; shift
  for e in "${engines[@]}"; do
    "$bin" ycsb --engine "$e" --cache_bytes "$cache" --memtable_bytes "$memtable" --json "$@" 2>>"$out/stderr.log" \
      | grep '^{' | sed "s/^{/{$tags,/" >>"$results" || echo "failed: $e $*" >&2
  done
}
for r in $(seq "$rounds"); do
  if [[ "$sections" == *ycsb* ]]; then
    for records in 50000 200000; do
      for w in b c e; do
        echo "round $r: YCSB $w, $records records" >&2
        run "\"round\":$r,\"case\":\"ycsb-$w-$records\"" --workload "$w" --records "$records" \
          --operations "$records" --value_size 1024
      done
    done
  fi
  if [[ "$sections" == *large* ]]; then
    for size in 16384 102400; do
      for mb in 64 256; do
        # 20 000 reads whatever the record count: 655 records of 100 KB read 655 times measured
        # little but the caches filling up.
        num=$(( mb * 1048576 / (16 + size) )); ops=20000
        c="$size-${mb}MiB"
        echo "round $r: $size-byte values, $mb MiB" >&2
        run "\"round\":$r,\"case\":\"micro-$c\"" --micro fillrandom,readrandom,readseq --records "$num" \
          --operations "$ops" --value_size "$size"
        run "\"round\":$r,\"case\":\"zipf-$c\"" --workload-file "$zipfian" --records "$num" --operations "$ops" \
          --value_size "$size"
        run "\"round\":$r,\"case\":\"unif-$c\"" --workload-file "$uniform" --records "$num" --operations "$ops" \
          --value_size "$size"
      done
    done
  fi
done
python3 - "$results" "$cache" "$memtable" "${engines[@]}" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cache, memtable, engines = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def cell(case, engine, pick):
    vals = [v for r in rows if r.get("case") == case and r.get("engine") == engine for v in [pick(r)] if v is not None]
    return (statistics.median(vals), vals) if vals else (None, [])
def ops(r):
    return r.get("ops_per_sec") if r.get("phase") == "run" else None
def p99(r):
    if r.get("phase") != "run":
        return None
    by = r["ops_by_type"]
    return by[max(by, key=lambda k: by[k]["count"])]["p99_micros"]
def bench(name):
    return lambda r: r.get("ops_per_sec") if r.get("benchmark") == name else None
print(f"Equal budgets for every engine: cache {cache >> 20} MiB, memtable {memtable >> 20} MiB. Throughput in ops/s (median of rounds); "
      f"ratio = wisckey / peer (above 1: wisckey faster).\n")
cases = sorted({r["case"] for r in rows}, key=lambda c: (c.split("-")[0] != "ycsb", c))
head = ["case", "metric"] + engines + [f"wisckey/{e}" for e in engines[1:]]
print("| " + " | ".join(head) + " |")
print("|---|---" + "|---:" * (len(head) - 2) + "|")
for case in cases:
    metrics = [("ops/s", ops), ("p99 µs", p99)] if not case.startswith("micro") else \
              [(b, bench(b)) for b in ("readrandom", "readseq")]
    if case.startswith(("zipf", "unif")):
        metrics = [("readrandom ops/s", ops)]
    for name, pick in metrics:
        meds = [cell(case, e, pick)[0] for e in engines]
        ratios = []
        for m in meds[1:]:
            if meds[0] is None or m is None:
                ratios.append("-")
            elif name.startswith("p99"):
                ratios.append(f"{m / meds[0]:.2f}x" if meds[0] else "-")
            else:
                ratios.append(f"{meds[0] / m:.2f}x" if m else "-")
        fmt = lambda v: "-" if v is None else (f"{v:.1f}" if name.startswith("p99") else f"{v:.0f}")
        print("| " + " | ".join([case, name] + [fmt(m) for m in meds] + ratios) + " |")
print(f"\nraw results: {sys.argv[1]}")
PY
