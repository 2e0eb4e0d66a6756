#!/usr/bin/env bash
# Light-weight compaction side by side (docs/BENCHMARKS.md §13): NUM x VALUE_SIZE fillrandom under wisckey's
# leveled compaction and with light-weight compaction (--lwc=1), LevelDB 1.23 and RocksDB 7.8
# leveled (their own db_bench, at the same shape), ROUNDS times alternating. On wisckey's
# loaded trees also readrandom and seekrandom --seek_nexts=10 (while compaction goes on, as
# db_bench does), and with SETTLED=1 both again once compaction has caught up
# (waitforcompaction). Prints each run, then medians: fillrandom µs/op, compaction bytes
# written during the load per user byte, read µs/op, and space amplification at the end; then each
# configuration's speed against wisckey-leveled as per-round ratios and their median.
# usage: scripts/lwc-bench.sh [NUM] [VALUE_SIZE] [ROUNDS]
#        (env WISCKEY_BIN pins a binary; LWC_FLAGS adds flags to the LWC run, e.g. --lwc_max_segments=4;
#         READS, default NUM/10; CONFIGS picks some of: wisckey-leveled wisckey-lwc leveldb rocksdb-leveled;
#         SETTLED=1 reads again after waitforcompaction; LOGS=<dir> keeps each run's whole output there, e.g. wisckey's `stats` right after the load)
set -euo pipefail
cd "$(dirname "$0")/.."
num="${1:-20000000}"; vsize="${2:-100}"; rounds="${3:-3}"
reads="${READS:-$((num / 10))}"
settled=""; [ "${SETTLED:-0}" = 1 ] && settled=",waitforcompaction,readrandom,seekrandom"
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release --bin wisckey >&2
ldb="$(../shared/peers/build-leveldb-bench.sh)"
if ! command -v db_bench >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rocksdb-tools; } >&2
fi
user_mb="$(awk -v n="$num" -v v="$vsize" 'BEGIN{print n * (16 + v) / 1048576}')"
to_mb() { awk '{print $1 * ($2 == "GB" ? 1024 : ($2 == "KB" ? 1/1024 : ($2 == "B" ? 1/1048576 : 1)))}'; }
# wisckey's defaults already are 2 MiB tables and a 10 MiB level 1.
shape=(--write_buffer_size=4194304)
rocks=(--max_bytes_for_level_base=10485760 --target_file_size_base=2097152 --compression_type=none --key_size=16
  --statistics --bloom_bits=10)
out="$(mktemp)"
dir="$(mktemp -d)"
for r in $(seq "$rounds"); do
  for cfg in ${CONFIGS:-wisckey-leveled wisckey-lwc leveldb rocksdb-leveled}; do
    rm -rf "$dir/db"
    read_us=-; seek_us=-; amp=-; settled_read=-; settled_seek=-
    case "$cfg" in
      wisckey-*)
        flags=(--lwc=0); [ "$cfg" = wisckey-lwc ] && read -r -a flags <<<"--lwc=1 ${LWC_FLAGS:-}"
        res="$(flock /tmp/wisckey-bench.lock "$bin" bench --num="$num" --reads="$reads" --value_size="$vsize" \
          --benchmarks="fillrandom,stats,readrandom,seekrandom,stats$settled" --seek_nexts=10 --db="$dir/db" "${shape[@]}" "${flags[@]}")"
        us="$(grep '^fillrandom' <<<"$res" | awk '{print $3}')"
        read_us="$(grep -m1 '^readrandom' <<<"$res" | awk '{print $3}')"
        seek_us="$(grep -m1 '^seekrandom' <<<"$res" | awk '{print $3}')"
        if [ -n "$settled" ]; then
          settled_read="$(grep '^readrandom' <<<"$res" | tail -1 | awk '{print $3}')"
          settled_seek="$(grep '^seekrandom' <<<"$res" | tail -1 | awk '{print $3}')"
        fi
        # the first stats block (right after the load): "compaction: X MB read, Y MB written in N compactions"
        mb="$(grep -m1 '^compaction:' <<<"$res" | sed -nE 's/.*read, ([0-9.]+) (B|KB|MB|GB) written.*/\1 \2/p' | to_mb)"
        amp="$(grep '^space_amp:' <<<"$res" | tail -1 | awk '{print $2}')" ;;
      rocksdb-leveled)
        res="$(flock /tmp/wisckey-bench.lock db_bench --num="$num" --value_size="$vsize" --benchmarks=fillrandom --db="$dir/db" \
          "${shape[@]}" "${rocks[@]}" 2>&1)"
        us="$(grep -E '^fillrandom' <<<"$res" | awk '{print $3}')"
        mb="$(grep -E 'rocksdb.compact.write.bytes ' <<<"$res" | awk '{print $4 / 1048576}')" ;;
      leveldb)
        res="$(flock /tmp/wisckey-bench.lock "$ldb" --num="$num" --value_size="$vsize" --benchmarks=fillrandom,stats --db="$dir/db" \
          --write_buffer_size=4194304 --bloom_bits=10 2>&1)"
        us="$(grep -E '^fillrandom' <<<"$res" | awk '{print $3}')"
        # leveldb.stats: Level Files Size(MB) Time(sec) Read(MB) Write(MB); level 0's writes are flushes
        mb="$(awk '/^ *[1-9] +[0-9]+ /{s += $6} END{print s + 0}' <<<"$res")" ;;
    esac
    [ -z "${LOGS:-}" ] || { mkdir -p "$LOGS" && printf '%s\n' "$res" >"$LOGS/$cfg-$r.txt"; }
    echo "$cfg $us $mb $read_us $seek_us $amp $settled_read $settled_seek" | tee -a "$out"
  done
done
rm -rf "$dir"
python3 - "$out" "$user_mb" <<'PY'
import statistics, sys
runs = {}
user_mb = float(sys.argv[2])
for line in open(sys.argv[1]):
    cfg, *vals = line.split()
    runs.setdefault(cfg, []).append(vals)
def med(rs, i):
    xs = [float(r[i]) for r in rs if r[i] != "-"]
    return statistics.median(xs) if xs else None
fmt = lambda x, f: "-" if x is None else format(x, f)
print(f"user data: {user_mb:.0f} MB")
print("| configuration | fillrandom µs/op | compaction MB written | per user byte | readrandom µs/op | seekrandom µs/op | space amp | settled readrandom | settled seekrandom |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for cfg, rs in runs.items():
    mb = med(rs, 1)
    print(f"| {cfg} | {fmt(med(rs, 0), '.3f')} | {fmt(mb, '.0f')} | {fmt(mb / user_mb, '.2f')} | "
          f"{fmt(med(rs, 2), '.3f')} | {fmt(med(rs, 3), '.3f')} | {fmt(med(rs, 4), '.2f')} | "
          f"{fmt(med(rs, 5), '.3f')} | {fmt(med(rs, 6), '.3f')} |")
# Speed ratios against wisckey-leveled, paired by round: the rounds run minutes apart on a shared
# machine, and pairing cancels the drift both configurations of one round saw.
base = runs.get("wisckey-leveled")
cols = [(0, "fillrandom"), (2, "readrandom"), (3, "seekrandom"), (5, "settled readrandom"), (6, "settled seekrandom")]
if base:
    print()
    print("| speed vs wisckey-leveled, by round (median) | " + " | ".join(n for _, n in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for cfg, rs in runs.items():
        if cfg == "wisckey-leveled":
            continue
        cells = []
        for i, _ in cols:
            rat = [float(b[i]) / float(r[i]) for b, r in zip(base, rs) if "-" not in (b[i], r[i])]
            by_round = " / ".join(format(x, ".2f") for x in rat)
            cells.append(f"{statistics.median(rat):.2f}× ({by_round})" if rat else "-")
        print(f"| {cfg} | " + " | ".join(cells) + " |")
PY
