#!/usr/bin/env bash
# Merge policies side by side (docs/BENCHMARKS.md §8): NUM x 100 B fillrandom under wisckey leveling,
# tiering and LSM-bush, RocksDB leveled and universal (its own db_bench, the flags below), and LevelDB 1.23,
# ROUNDS times alternating. Prints each run's micros/op and compaction bytes written, then the
# medians.
# usage: scripts/policy-bench.sh [NUM] [ROUNDS]   (env WISCKEY_BIN pins a binary; TIERING=tiering:N)
set -euo pipefail
cd "$(dirname "$0")/.."
num="${1:-10000000}"; rounds="${2:-3}"
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release --bin wisckey >&2
ldb="$(../shared/peers/build-leveldb-bench.sh)"
if ! command -v db_bench >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rocksdb-tools; } >&2
fi
# wisckey's defaults already are 2 MiB tables and a 10 MiB level 1.
shape=(--write_buffer_size=4194304 --bloom_bits=5)
rocks=(--max_bytes_for_level_base=10485760 --target_file_size_base=2097152 --compression_type=none --key_size=16 --statistics)
universal=(--compaction_style=1 --universal_size_ratio=1 --universal_min_merge_width=2
  --universal_max_size_amplification_percent=200)
out="$(mktemp)"
dir="$(mktemp -d)"
for r in $(seq "$rounds"); do
  for cfg in wisckey-leveling wisckey-tiering wisckey-bush rocksdb-leveled rocksdb-universal leveldb; do
    rm -rf "$dir/db"
    case "$cfg" in
      wisckey-*)
        res="$(flock /tmp/wisckey-bench.lock "$bin" bench --num="$num" --value_size=100 --benchmarks=fillrandom,stats --db="$dir/db" \
          "${shape[@]}" --merge_policy="${cfg#wisckey-}")"
        us="$(grep '^fillrandom' <<<"$res" | awk '{print $3}')"
        # "compaction:       X MB read, Y MB written in N compactions"
        mb="$(grep '^compaction:' <<<"$res" | sed -nE 's/.*read, ([0-9.]+) (B|KB|MB|GB) written.*/\1 \2/p' |
          awk '{print $1 * ($2 == "GB" ? 1024 : ($2 == "KB" ? 1/1024 : 1))}')" ;;
      rocksdb-leveled|rocksdb-universal)
        extra=(); [ "$cfg" = rocksdb-universal ] && extra=("${universal[@]}")
        res="$(flock /tmp/wisckey-bench.lock db_bench --num="$num" --value_size=100 --benchmarks=fillrandom --db="$dir/db" \
          "${shape[@]}" "${rocks[@]}" "${extra[@]}" 2>&1)"
        us="$(grep -E '^fillrandom' <<<"$res" | awk '{print $3}')"
        mb="$(grep -E 'rocksdb.compact.write.bytes ' <<<"$res" | awk '{print $4 / 1048576}')" ;;
      leveldb)
        res="$(flock /tmp/wisckey-bench.lock "$ldb" --num="$num" --value_size=100 --benchmarks=fillrandom,stats --db="$dir/db" \
          --write_buffer_size=4194304 --bloom_bits=5 2>&1)"
        us="$(grep -E '^fillrandom' <<<"$res" | awk '{print $3}')"
        # leveldb.stats: Level Files Size(MB) Time(sec) Read(MB) Write(MB); level 0's writes are flushes
        mb="$(awk '/^ *[1-9] +[0-9]+ /{s += $6} END{print s + 0}' <<<"$res")" ;;
    esac
    echo "$cfg $us $mb" | tee -a "$out"
  done
done
rm -rf "$dir"
python3 - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    cfg, us, mb = line.split()
    runs.setdefault(cfg, []).append((float(us), float(mb)))
print("| configuration | fillrandom µs/op (median) | compaction MB written (median) |")
print("|---|---:|---:|")
for cfg, rs in runs.items():
    print(f"| {cfg} | {statistics.median(r[0] for r in rs):.3f} | {statistics.median(r[1] for r in rs):.0f} |")
PY
