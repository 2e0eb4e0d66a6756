#!/usr/bin/env bash
# Model vs machine (docs/BENCHMARKS.md §9): for configurations across the Wacky continuum, load NUM unique
# keys in a scattered order (fillshuffle, 100 B values, 1 MiB write buffer, 5 filter bits per
# key) and compare the measured write amplification ((flush + compaction bytes) / flush bytes)
# and filters probed per zero-result lookup (100 lookups every NUM/100 writes, each time once
# compaction has caught up) with the cost model's averages over the same load
# (`wisckey tune --predict ... --json`: load_write_amp, load_expected_runs). ROUNDS runs each,
# medians. Prints a Markdown table and writes docs/bench/continuum-frontier.svg (measured write
# cost against lookup cost).
# usage: scripts/model-check.sh [NUM] [ROUNDS]   (env WISCKEY_BIN pins a binary)
set -euo pipefail
cd "$(dirname "$0")/.."
num="${1:-2000000}"; rounds="${2:-3}"
bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release -p wisckey-cli >&2
configs=(
  "wacky:T=10,K=0,Z=0" tiering lazy-leveling scll bush
  "wacky:T=4,K=0.5,Z=0.5,C=3" "wacky:T=3,K=1,Z=0,C=1,X=1.5" "wacky:T=5,K=1,Z=1,C=4" "wacky:T=4,K=0,Z=1,C=3"
)
buffer=1048576
out="$(mktemp)"; dir="$(mktemp -d)"
for r in $(seq "$rounds"); do
  for cfg in "${configs[@]}" leveling; do
    rm -rf "$dir/db"
    flock /tmp/wisckey-bench.lock "$bin" bench --num="$num" --value_size=100 --benchmarks=fillshuffle,stats \
      --probe_every=$((num / 100)) --write_buffer_size=$buffer --db="$dir/db" --merge_policy="$cfg" \
      --bloom_bits=5 --json | grep '"benchmark":"stats"' | sed "s|^|$cfg\t|" >> "$out"
  done
done
rm -rf "$dir"
python3 scripts/model-check.py "$out" "$bin" "$buffer" docs/bench/continuum-frontier.svg
