#!/usr/bin/env bash
# Online self-tuning against fixed designs on a workload that shifts (docs/BENCHMARKS.md, auto-tune):
# NUM unique keys of 100 B are loaded, then PHASEOPS operations of each phase run straight
# through on the same database — 90 % writes / 10 % reads; 10 % writes / 90 % reads, half of
# them of absent keys; 60 % writes / 40 % short scans (seek + 10 nexts); the first phase again.
# Configurations: `--auto_tune` (starting from the default design), each of the five presets
# fixed, and RocksDB 7.8 leveled and universal (the db_bench flags of tune-bench.sh; db_bench
# runs the phases as successive invocations on its database, which a fixed design does not
# notice). ROUNDS rounds, alternating configurations. Prints every phase's ops/s, then per
# configuration the medians: each phase's rate, its rate after its first 20 % (ours), and the
# total time of the four phases, with auto-tune's ratios against the best fixed preset and the
# better RocksDB.
# usage: scripts/shift-bench.sh [NUM] [PHASEOPS] [ROUNDS]   (env WISCKEY_BIN pins a binary;
#        CONFIGS="auto leveling" picks configurations)
set -euo pipefail
cd "$(dirname "$0")/.."
num="${1:-4000000}"; phaseops="${2:-2000000}"; rounds="${3:-3}"
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release -p wisckey-cli >&2
configs="${CONFIGS:-auto leveling tiering lazy-leveling scll bush rocksdb-leveled rocksdb-universal}"
ours=(--value_size=100 --write_buffer_size=4194304 --bloom_bits=5 --seek_nexts=10)
rocks=(--value_size=100 --key_size=16 --write_buffer_size=4194304 --target_file_size_base=2097152
  --max_bytes_for_level_base=10485760 --compression_type=none --bloom_bits=5)
universal=(--compaction_style=1 --universal_size_ratio=1 --universal_min_merge_width=2
  --universal_max_size_amplification_percent=200)
# db_bench's phases: benchmark flags and the key space its reads draw from (x NUM).
rphases=(
  "--benchmarks=readrandomwriterandom --readwritepercent=10|1"
  "--benchmarks=readrandomwriterandom --readwritepercent=90|2"
  "--benchmarks=mixgraph --mix_get_ratio=0 --mix_put_ratio=0.6 --mix_seek_ratio=0.4 --mix_max_scan_len=11 --iter_k=0 --iter_sigma=0 --iter_theta=10 --value_k=0 --value_sigma=0 --value_theta=100 --mix_max_value_size=1024|1"
  "--benchmarks=readrandomwriterandom --readwritepercent=10|1"
)
out="${OUT:-$(mktemp)}"; dir="$(mktemp -d)"
echo "raw results: $out" >&2
for r in $(seq "$rounds"); do
  for cfg in $configs; do
    rm -rf "$dir/db"
    case "$cfg" in
      rocksdb-*)
        extra=(); [ "$cfg" = rocksdb-universal ] && extra=("${universal[@]}")
        flock /tmp/wisckey-bench.lock timeout 300 db_bench --db="$dir/db" --num="$num" \
          --benchmarks=filluniquerandom,waitforcompaction "${rocks[@]}" "${extra[@]}" >/dev/null 2>&1 || true
        p=0
        for ph in "${rphases[@]}"; do
          p=$((p + 1)); IFS='|' read -r flags space <<<"$ph"
          # shellcheck disable=SC2086
          res="$(flock /tmp/wisckey-bench.lock db_bench --db="$dir/db" --use_existing_db=1 --num=$((num * space)) \
            --reads="$phaseops" $flags "${rocks[@]}" "${extra[@]}" 2>&1)"
          name="$(sed -E 's/.*--benchmarks=([a-z]+).*/\1/' <<<"$flags")"
          us="$(awk -v b="$name" '$1 == b { print $3; exit }' <<<"$res")"
          echo "$r $cfg $p $(awk -v u="$us" 'BEGIN { print 1e6 / u }') -" | tee -a "$out"
        done ;;
      *)
        flags=(--merge_policy="$cfg"); [ "$cfg" = auto ] && flags=(--auto_tune)
        res="$(flock /tmp/wisckey-bench.lock "$bin" bench --db="$dir/db" --num="$num" --reads="$phaseops" \
          --benchmarks=fillshuffle,waitforcompaction,shiftwrites,shiftreads,shiftscans,shiftwrites,stats \
          "${flags[@]}" "${ours[@]}")"
        awk -v r="$r" -v c="$cfg" '$1 ~ /^shift/ { p++; match($0, /after_20%:[0-9]+/);
          print r, c, p, 1e6 / $3, substr($0, RSTART + 10, RLENGTH - 10) }' <<<"$res" | tee -a "$out"
        grep -E '^(merge_policy|auto_tune|auto_tune_move [0-9]+):' <<<"$res" | sed "s/^/  $cfg round $r: /" >&2 ;;
    esac
  done
done
rm -rf "$dir"
python3 - "$out" "$phaseops" <<'PY'
import statistics, sys
ops = int(sys.argv[2])
rate, after = {}, {}
for line in open(sys.argv[1]):
    r, cfg, p, v, a = line.split()
    rate.setdefault(cfg, {}).setdefault(int(p), []).append(float(v))
    if a != "-":
        after.setdefault(cfg, {}).setdefault(int(p), []).append(float(a))
med = lambda xs: statistics.median(xs)
total = {c: sum(ops / med(v) for v in ph.values()) for c, ph in rate.items()}
print("| configuration | phase 1 | phase 2 | phase 3 | phase 4 | total s |")
print("|---|---:|---:|---:|---:|---:|")
for c, ph in rate.items():
    cells = []
    for p in sorted(ph):
        cell = f"{med(ph[p]):,.0f}"
        if c in after:
            cell += f" ({med(after[c][p]):,.0f})"
        cells.append(cell)
    print(f"| {c} | " + " | ".join(cells) + f" | {total[c]:.1f} |")
print("ops/s medians; in brackets, after the phase's first 20 %")
if "auto" in total:
    presets = [c for c in total if c not in ("auto",) and not c.startswith("rocksdb")]
    rocks = [c for c in total if c.startswith("rocksdb")]
    if presets:
        best = min(presets, key=total.get)
        print(f"auto total / best fixed preset ({best}): {total['auto'] / total[best]:.2f}x (lower is better)")
        for p in sorted(rate["auto"]):
            bp = max(presets, key=lambda c: med(after[c][p]))
            print(f"phase {p}: auto after 20 % / best preset's ({bp}): {med(after['auto'][p]) / med(after[bp][p]):.2f}x")
    if rocks:
        br = min(rocks, key=total.get)
        print(f"auto total / better RocksDB ({br}): {total['auto'] / total[br]:.2f}x (lower is better)")
PY
