#!/usr/bin/env bash
# Replicated put throughput and device bytes written per put, wisckey against RocksDB: for each
# build (`wisckey serve` of the cli, `wisckey-raft-rocks serve`) and value size, starts a
# 3-node cluster on loopback in fresh directories, runs `raftcheck load` (N clients, one put in
# flight each, following redirects to the leader) for D seconds, and reads each node's
# /proc/PID/io before and after (write_bytes - cancelled_write_bytes: the bytes the process
# sent, or would have sent, to the device; a page rewritten after an fsync counts again, as the
# device sees it). The builds alternate, R rounds; medians at the end.
#
#   scripts/raft-bench.sh [--wisckey BIN] [--rocks BIN] [--raftcheck BIN] [--rounds 3]
#                         [--seconds 20] [--clients 8] [--sizes "4096 100"] [--dir DIR]
#
# The binaries default to copies of target/release/{wisckey,wisckey-raft-rocks} (pinned: the
# tree may be rebuilt meanwhile) and a freshly built tools/raftcheck. DIR must be on a disk
# (not tmpfs: its writes reach no device and are not counted). SERVE_ARGS (environment) is
# added to every node's flags, e.g. SERVE_ARGS="--snapshot-every-logs 1000000" to leave
# snapshots out of the measurement.
set -euo pipefail
cd "$(dirname "$0")/.."

wisckey_bin="" rocks_bin="" raftcheck_bin=""
rounds=3 seconds=20 clients=8 sizes="4096 100" dir="${TMPDIR:-/tmp}/raft-bench" settle=3
while [ $# -gt 0 ]; do
  case "$1" in
    --wisckey) wisckey_bin="$2"; shift 2 ;;
    --rocks) rocks_bin="$2"; shift 2 ;;
    --raftcheck) raftcheck_bin="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --clients) clients="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --dir) dir="$2"; shift 2 ;;
    --settle) settle="$2"; shift 2 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

mkdir -p "$dir/bin"
pin() { # pin NAME DEFAULT_PATH: copy the binary out of the tree
  local src="$2"
  [ -x "$src" ] || { echo "missing $src (cargo build --release ...; see docs/replication.md)" >&2; exit 1; }
  cp "$src" "$dir/bin/$1"
  echo "$dir/bin/$1"
}
wisckey_bin="$(pin wisckey "${wisckey_bin:-target/release/wisckey}")"
rocks_bin="$(pin wisckey-raft-rocks "${rocks_bin:-target/release/wisckey-raft-rocks}")"
if [ -z "$raftcheck_bin" ]; then
  (cd tools/raftcheck && go build -o "$dir/bin/raftcheck" .)
  raftcheck_bin="$dir/bin/raftcheck"
fi

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  pids=()
}
trap cleanup EXIT

# io_bytes PID: write_bytes - cancelled_write_bytes of the process, as an integer: awk's
# `print` turns a difference past 2^31 into 4.2e+09, which bash arithmetic refuses, and mawk's
# `%d` caps it at 2^31 - 1; `%.0f` prints a double's integer exactly up to 2^53.
io_bytes() {
  awk '/^write_bytes/ {w=$2} /^cancelled_write_bytes/ {c=$2} END {printf "%.0f\n", w-c}' "/proc/$1/io"
}

results="$dir/results.txt"
: >"$results"
run=0
one_run() { # one_run BUILD BIN VALUE_BYTES ROUND
  local build="$1" bin="$2" vbytes="$3" round="$4"
  run=$((run + 1))
  local base=$((24000 + (run % 50) * 10))
  local peers="1=127.0.0.1:$((base + 1)),2=127.0.0.1:$((base + 2)),3=127.0.0.1:$((base + 3))"
  local nodes="127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))"
  local rdir="$dir/run-$build-$vbytes-$round"
  rm -rf "$rdir"; mkdir -p "$rdir"
  for i in 1 2 3; do
    local init=(); [ "$i" = 1 ] && init=(--init)
    "$bin" serve --id "$i" --listen "127.0.0.1:$((base + i))" --dir "$rdir/node$i" --peers "$peers" \
      "${init[@]}" ${SERVE_ARGS:-} >"$rdir/node$i.log" 2>&1 &
    pids+=($!)
  done
  # A few puts first: the cluster is up and every node has its files.
  "$raftcheck_bin" load --nodes "$nodes" --clients 1 --seconds 1 --value-bytes "$vbytes" >/dev/null
  local before=() after=()
  for pid in "${pids[@]}"; do before+=("$(io_bytes "$pid")"); done
  local out
  out="$("$raftcheck_bin" load --nodes "$nodes" --clients "$clients" --seconds "$seconds" --value-bytes "$vbytes")"
  # Flushes and compactions the load set off are part of its cost.
  sleep "$settle"
  for pid in "${pids[@]}"; do after+=("$(io_bytes "$pid")"); done
  cleanup
  local ops ops_s p50 p99
  ops="$(sed -n 's/.*\bops=\([0-9]*\).*/\1/p' <<<"$out")"
  ops_s="$(sed -n 's/.*ops_per_sec=\([0-9.]*\).*/\1/p' <<<"$out")"
  p50="$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$out")"
  p99="$(sed -n 's/.*p99_ms=\([0-9.]*\).*/\1/p' <<<"$out")"
  local per_node=() sum=0
  for i in 0 1 2; do
    local d=$((after[i] - before[i]))
    per_node+=("$((d / ops))")
    sum=$((sum + d))
  done
  local mean=$((sum / 3 / ops))
  echo "$build $vbytes $round ops_s=$ops_s p50_ms=$p50 p99_ms=$p99 bytes_per_put_node=$mean nodes=${per_node[*]} ops=$ops" |
    tee -a "$results"
  rm -rf "$rdir"
}

for round in $(seq "$rounds"); do
  for vbytes in $sizes; do
    if [ $((round % 2)) = 1 ]; then order="wisckey rocksdb"; else order="rocksdb wisckey"; fi
    for build in $order; do
      if [ "$build" = wisckey ]; then bin="$wisckey_bin"; else bin="$rocks_bin"; fi
      one_run "$build" "$bin" "$vbytes" "$round"
    done
  done
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
field() { # field BUILD VBYTES NAME
  awk -v b="$1" -v v="$2" -v f="$3" '$1==b && $2==v { for (i=4;i<=NF;i++) { split($i,kv,"="); if (kv[1]==f) print kv[2] } }' "$results"
}
echo
echo "medians of $rounds rounds, $clients clients, ${seconds}s, 3 nodes on loopback:"
printf '%-7s %-8s %-12s %-10s %-10s %-18s\n' value build ops/s p50_ms p99_ms bytes/put/node
for vbytes in $sizes; do
  for build in wisckey rocksdb; do
    printf '%-7s %-8s %-12s %-10s %-10s %-18s\n' "$vbytes" "$build" \
      "$(field "$build" "$vbytes" ops_s | median)" "$(field "$build" "$vbytes" p50_ms | median)" \
      "$(field "$build" "$vbytes" p99_ms | median)" "$(field "$build" "$vbytes" bytes_per_put_node | median)"
  done
  w_ops="$(field wisckey "$vbytes" ops_s | median)"; r_ops="$(field rocksdb "$vbytes" ops_s | median)"
  w_b="$(field wisckey "$vbytes" bytes_per_put_node | median)"; r_b="$(field rocksdb "$vbytes" bytes_per_put_node | median)"
  awk -v v="$vbytes" -v wo="$w_ops" -v ro="$r_ops" -v wb="$w_b" -v rb="$r_b" \
    'BEGIN { printf "%s B: wisckey/RocksDB throughput %.2fx, device bytes per put per node %.2fx\n", v, wo/ro, wb/rb }'
done
