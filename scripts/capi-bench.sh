#!/usr/bin/env bash
# The cost of LevelDB's C API over wisckey: fillrandom,readrandom through the C API
# (capi/bench/c_bench.c linked with libwisckey_c), through the Rust API (`wisckey bench`) and
# LevelDB 1.23's own db_bench (../shared/peers), ROUNDS times alternating, then medians and
# the ratios. When LevelDB's library is built (../shared/peers/build-leveldb-bench.sh leaves
# it), c_bench linked with LevelDB itself runs too: the same C program on both engines.
# usage: scripts/capi-bench.sh [NUM] [VALUE_SIZE] [ROUNDS]     (default 1000000 100 3)
# WISCKEY_BIN / CAPI_PREFIX: use a pinned wisckey binary / an installed libwisckey_c
# (scripts/install-capi.sh) instead of building them.
set -euo pipefail
cd "$(dirname "$0")/.."
num="${1:-1000000}"; vsz="${2:-100}"; rounds="${3:-3}"
out="$(mktemp -d)"
bin="${WISCKEY_BIN:-}"
if [ -z "$bin" ]; then
  cargo build --release --bin wisckey >&2
  bin="$out/wisckey"; cp target/release/wisckey "$bin"
fi
prefix="${CAPI_PREFIX:-}"
if [ -z "$prefix" ]; then
  prefix="$out/prefix"; scripts/install-capi.sh "$prefix" >&2
fi
cc -O2 -I "$prefix/include" capi/bench/c_bench.c -L "$prefix/lib" -lwisckey_c -Wl,-rpath,"$prefix/lib" \
  -o "$out/c_bench"
peers="$(cd ../shared/peers 2>/dev/null && pwd || true)"
ldb=""; [ -n "$peers" ] && ldb="$("$peers/build-leveldb-bench.sh")"
leveldb_lib="${PEERS_OUT:-$HOME/.cache/kv-peers}/leveldb-src/build/libleveldb.a"
if [ -f "$leveldb_lib" ]; then
  cc -O2 -I "$peers/leveldb-1.23/include" capi/bench/c_bench.c "$leveldb_lib" -lsnappy -lstdc++ -lpthread \
    -o "$out/c_bench_leveldb"
fi
for r in $(seq "$rounds"); do
  echo "round $r of $rounds" >&2
  { echo "== wisckey-rust"
    "$bin" bench --benchmarks=fillrandom,readrandom --num="$num" --value_size="$vsz" 2>/dev/null | grep -E ' : '
    echo "== wisckey-c"
    "$out/c_bench" --num="$num" --value_size="$vsz"
    if [ -n "$ldb" ]; then
      echo "== leveldb-db_bench"
      rm -rf "$out/ldb"
      "$ldb" --num="$num" --value_size="$vsz" --benchmarks=fillrandom,readrandom --compression_ratio=0.5 \
        --db="$out/ldb" 2>&1 | tr '\r' '\n' | grep -E ' : ' || true
    fi
    if [ -x "$out/c_bench_leveldb" ]; then
      echo "== leveldb-c"
      "$out/c_bench_leveldb" --num="$num" --value_size="$vsz"
    fi
  } >>"$out/raw"
done
python3 - "$out/raw" <<'PY'
import re, statistics, sys
runs, engine = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+)", line)
    if m:
        engine = m.group(1); continue
    m = re.match(r"(\S+)\s+:\s+([\d.]+) micros/op", line)
    if m and engine:
        runs.setdefault(m.group(1), {}).setdefault(engine, []).append(float(m.group(2)))
for bench, engines in runs.items():
    med = {e: statistics.median(v) for e, v in engines.items()}
    print(f"{bench}:")
    for e, v in engines.items():
        print(f"  {e:18} median {med[e]:7.3f} us/op   runs {' '.join(f'{x:.3f}' for x in v)}")
    c = med.get("wisckey-c")
    if c:
        if "wisckey-rust" in med:
            print(f"  C API speed / Rust API speed: {med['wisckey-rust'] / c:.2f}x")
        if "leveldb-db_bench" in med:
            print(f"  C API speed / LevelDB db_bench speed: {med['leveldb-db_bench'] / c:.2f}x")
        if "leveldb-c" in med:
            print(f"  C API speed / LevelDB's own C API speed: {med['leveldb-c'] / c:.2f}x")
PY
echo "raw output: $out/raw" >&2
