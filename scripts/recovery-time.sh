#!/usr/bin/env bash
# Measures recovery time after `kill -9` with a full, unflushed memtable (the aim: reopen in at most 1 s).
# usage: scripts/recovery-time.sh [WRITE_BUFFER_BYTES]   (default 64 MiB)
set -euo pipefail
cd "$(dirname "$0")/.."
wb="${1:-67108864}"
bin=target/release/wisckey
[ -x "$bin" ] || cargo build --release --bin wisckey >&2
db="$(mktemp -d)/db"
# Enough 100-byte values to nearly fill the memtable, then a long read phase to kill in.
num=$(( wb / 180 ))
"$bin" bench --benchmarks=fillrandom,readrandom --num="$num" --reads=100000000 \
  --write_buffer_size="$wb" --db="$db" >/dev/null 2>&1 &
pid=$!
# Wait until the fill is done (the log stops growing), then kill -9 during the reads.
prev=-1
while sleep 1; do
  cur=$(du -sb "$db" 2>/dev/null | cut -f1)
  [ "$cur" = "$prev" ] && break
  prev=$cur
done
kill -9 "$pid"; wait "$pid" 2>/dev/null || true
echo "killed with $(du -sh "$db" | cut -f1) on disk: $(ls "$db" | tr '\n' ' ')"
start=$(date +%s.%N)
# Reopen with the same options the writer used (as an application would).
"$bin" bench --benchmarks=stats --use_existing_db=1 --write_buffer_size="$wb" --num="$num" --db="$db" \
  | grep -E "^open|memtable|level_files"
end=$(date +%s.%N)
echo "reopen (recovery) + stats took $(echo "$end - $start" | bc) s"
rm -rf "$(dirname "$db")"
