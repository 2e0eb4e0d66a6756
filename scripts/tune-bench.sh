#!/usr/bin/env bash
# The tuner against the presets (docs/BENCHMARKS.md §10): for three mixes — 90 % writes / 10 % reads; 10 % writes / 90 %
# reads, half of them of absent keys; 60 % writes / 40 % short scans (seek + 10 nexts) — the
# configuration `wisckey tune` picks against the presets and RocksDB 7.8 leveled and universal
# (the db_bench flags below). Each run loads NUM unique keys (100 B values) into a fresh
# database and waits for its compactions (so the mix does not pay the load's debt), then times
# MIXOPS operations of the mix on it (mix 2 draws keys from 2·NUM, so half the reads miss;
# RocksDB runs readrandomwriterandom, and mixgraph for the scans). ROUNDS rounds,
# alternating; prints every run's ops/s, then medians and the ratios against the best preset and RocksDB.
# usage: scripts/tune-bench.sh [NUM] [MIXOPS] [ROUNDS]   (env WISCKEY_BIN pins a binary;
#        EXTRA="--max_background_compactions=2" adds wisckey flags)
set -euo pipefail
cd "$(dirname "$0")/.."
# MIXOPS defaults to 2M: the model averages over compaction cycles, and a window of a few
# flushes measured whether one merge fell inside it (docs/bench/history/continuum.md, §10).
num="${1:-4000000}"; mixops="${2:-2000000}"; rounds="${3:-3}"
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release -p wisckey-cli >&2
ours=(--value_size=100 --write_buffer_size=4194304 --bloom_bits=5 ${EXTRA:-})
rocks=(--value_size=100 --key_size=16 --write_buffer_size=4194304 --target_file_size_base=2097152
  --max_bytes_for_level_base=10485760 --compression_type=none --bloom_bits=5)
universal=(--compaction_style=1 --universal_size_ratio=1 --universal_min_merge_width=2
  --universal_max_size_amplification_percent=200)
# mix name | tune's shares | wisckey benchmark and flags | db_bench benchmark and flags | key space
mixes=(
  "w90r10|--writes 0.9 --reads 0.1|--benchmarks=readrandomwriterandom --readwritepercent=10|--benchmarks=readrandomwriterandom --readwritepercent=10|1"
  "w10r90z|--writes 0.1 --reads 0.45 --zero_reads 0.45|--benchmarks=readrandomwriterandom --readwritepercent=90|--benchmarks=readrandomwriterandom --readwritepercent=90|2"
  "w60s40|--writes 0.6 --scans 0.4|--benchmarks=seekrandomwriterandom --readwritepercent=40 --seek_nexts=10|--benchmarks=mixgraph --mix_get_ratio=0 --mix_put_ratio=0.6 --mix_seek_ratio=0.4 --mix_max_scan_len=11 --iter_k=0 --iter_sigma=0 --iter_theta=10 --value_k=0 --value_sigma=0 --value_theta=100 --mix_max_value_size=1024|1"
)
out="$(mktemp)"; dir="$(mktemp -d)"
ops_per_sec() { awk -v b="$1" '$1 == b { print 1e6 / $3; exit }'; }
for r in $(seq "$rounds"); do
  for m in "${mixes[@]}"; do
    IFS='|' read -r name shares wflags rflags space <<<"$m"
    # shellcheck disable=SC2086
    tuned="$("$bin" tune $shares --num="$num" --value_size=100 --bloom_bits=5 --write_buffer_size=4194304 |
      sed -nE 's/^chosen: ([^ ]+) .*/\1/p')"
    mixnum=$((num * space))
    for cfg in leveling tiering lazy-leveling scll bush "tuned=$tuned" rocksdb-leveled rocksdb-universal; do
      rm -rf "$dir/db"
      bench="$(sed -E 's/.*--benchmarks=([a-z]+).*/\1/' <<<"$([[ $cfg == rocksdb-* ]] && echo "$rflags" || echo "$wflags")")"
      case "$cfg" in
        rocksdb-*)
          extra=(); [ "$cfg" = rocksdb-universal ] && extra=("${universal[@]}")
          # db_bench 7.8's waitforcompaction can wait for good on a leveled tree: give it 120 s.
          flock /tmp/wisckey-bench.lock timeout 120 db_bench --db="$dir/db" --num="$num" \
            --benchmarks=filluniquerandom,waitforcompaction "${rocks[@]}" "${extra[@]}" >/dev/null 2>&1 || true
          # shellcheck disable=SC2086
          res="$(flock /tmp/wisckey-bench.lock db_bench --db="$dir/db" --use_existing_db=1 --num="$mixnum" \
            --reads="$mixops" $rflags "${rocks[@]}" "${extra[@]}" 2>&1)" ;;
        *)
          policy="${cfg#tuned=}"
          flock /tmp/wisckey-bench.lock "$bin" bench --db="$dir/db" --num="$num" --benchmarks=fillshuffle,waitforcompaction \
            --merge_policy="$policy" "${ours[@]}" >/dev/null
          # shellcheck disable=SC2086
          res="$(flock /tmp/wisckey-bench.lock "$bin" bench --db="$dir/db" --use_existing_db=1 --num="$mixnum" \
            --reads="$mixops" --merge_policy="$policy" $wflags "${ours[@]}")" ;;
      esac
      echo "$name $cfg $(ops_per_sec "$bench" <<<"$res")" | tee -a "$out"
    done
  done
done
rm -rf "$dir"
python3 - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    mix, cfg, ops = line.split()
    key = "tuned" if cfg.startswith("tuned=") else cfg
    runs.setdefault(mix, {}).setdefault(key, []).append(float(ops))
    if cfg.startswith("tuned="):
        runs[mix]["knobs"] = cfg[len("tuned="):]
print("| mix | configuration | ops/s (median) |")
print("|---|---|---:|")
for mix, cfgs in runs.items():
    knobs = cfgs.pop("knobs")
    med = {c: statistics.median(v) for c, v in cfgs.items()}
    for c, v in med.items():
        print(f"| {mix} | {c + (' (' + knobs + ')' if c == 'tuned' else '')} | {v:,.0f} |")
    presets = {c: v for c, v in med.items() if not c.startswith("rocksdb") and c != "tuned"}
    best = max(presets, key=presets.get)
    rocks = max(med["rocksdb-leveled"], med["rocksdb-universal"])
    print(f"| {mix} | **tuned / best preset ({best})** | **{med['tuned'] / presets[best]:.2f}x** |")
    print(f"| {mix} | **tuned / better RocksDB** | **{med['tuned'] / rocks:.2f}x** |")
PY
