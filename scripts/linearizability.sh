#!/usr/bin/env bash
# The replicated server's linearizability check by a checker nobody here wrote: Go's porcupine
# (github.com/anishathalye/porcupine v1.3.1, from the Go module proxy) reads the history of
# 5 concurrent clients doing put/get/delete on 20 keys against a 3-node cluster of
# `<bin> serve` processes on loopback while the leader is killed with SIGKILL every 10 s (and
# restarted on its directory 2 s later) and a node is partitioned twice (POST /debug/isolate);
# at the end every key is read. Exit status 1 when the history is not linearizable.
# First it runs the checker's own tests (hand-made histories that must be rejected).
#
#   scripts/linearizability.sh [--bin target/debug/wisckey] [--seconds 60] [raftcheck flags...]
#
# LIN_TMPDIR=DIR puts the nodes' directories there (e.g. /dev/shm: a kill -9 loses nothing a
# tmpfs keeps, and the synced writes cost less).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || { echo "linearizability: Go is not installed" >&2; exit 1; }
work="$(mktemp -d "${LIN_TMPDIR:-${TMPDIR:-/tmp}}/linearizability.XXXXXX")"
trap 'rm -rf "$work"' EXIT
bin="target/debug/wisckey"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -x "$bin" ] || { echo "linearizability: $bin is missing (cargo build -p wisckey-cli)" >&2; exit 1; }
cd tools/raftcheck
go test -count=1 ./... >&2
go build -o "$work/raftcheck" .
cd ../..
"$work/raftcheck" linearizability --bin "$bin" --dir "$work/cluster" --history "$work/history.json" \
  --visualize "$work/history.html" "${args[@]}" || {
  status=$?
  keep="${TMPDIR:-/tmp}/linearizability-failed"
  rm -rf "$keep"; cp -r "$work" "$keep"
  echo "linearizability: failed; history, visualization and node logs kept in $keep" >&2
  exit "$status"
}
