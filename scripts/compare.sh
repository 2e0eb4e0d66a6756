#!/usr/bin/env bash
# Runs wisckey against its peers and writes the generated section of docs/BENCHMARKS.md (between
# <!-- compare:begin --> and <!-- compare:end -->) plus SVG charts in docs/bench/.
#
#   scripts/compare.sh [--quick] [--rounds N] [--no-docs] [--no-peers]
#
# --no-peers skips the in-process fjall/RocksDB engines (and their slow build); --no-docs prints the
# generated section instead of writing docs/. PEERS_TARGET_DIR (default target/peers) is where the
# `--features peers` binary is built; COMPARE_OUT keeps the raw results in a given directory.
#
# Engines:
#   in process, through `wisckey ycsb`'s Engine harness (binary built with --features peers):
#     wisckey, fjall (key-value separation), rocksdb, rocksdb-blob (integrated BlobDB), every one
#     with the same total cache (`--cache_bytes`, COMPARE_CACHE_BYTES, default 32 MiB) and memtable
#     (`--memtable_bytes`, COMPARE_MEMTABLE_BYTES, default 8 MiB: wisckey's write buffer)
#   their own db_bench, via ../shared/peers/run-peers.sh: LevelDB 1.23, RocksDB, RocksDB BlobDB,
#     beside `wisckey bench` (our db_bench port), plus RocksDB BlobDB with its blob cache on
#     (`--use_blob_cache=1`, the same budget)
# Workloads: fillrandom, readrandom, readseq, seekrandom at 100 B, 1 KB, 4 KB, 16 KB and 100 KB
# values with the same data volume per size, and YCSB A–F at 1 KB values. Every tool prints
# JSON lines (the C++ db_bench lines are converted); medians are taken over the rounds.
# --quick scales everything down to fit in about 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0; rounds=""; docs=1; want_peers=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --rounds) rounds="$2"; shift ;;
    --no-docs) docs=0 ;;
    --no-peers) want_peers=0 ;;
    *) echo "usage: scripts/compare.sh [--quick] [--rounds N] [--no-docs] [--no-peers]" >&2; exit 2 ;;
  esac
  shift
done
if [ "$quick" = 1 ]; then
  data_mb=64; max_reads=50000; ycsb_records=50000; ycsb_ops=50000; rounds="${rounds:-1}"
else
  data_mb=256; max_reads=200000; ycsb_records=200000; ycsb_ops=200000; rounds="${rounds:-3}"
fi
sizes=(100 1024 4096 16384 102400)
cache_bytes="${COMPARE_CACHE_BYTES:-33554432}"
memtable_bytes="${COMPARE_MEMTABLE_BYTES:-8388608}"
benches="fillrandom,readrandom,readseq,seekrandom"
harness_engines=(wisckey fjall rocksdb rocksdb-blob)
peers_script="${PEERS:-../shared/peers/run-peers.sh}"
# The peers build compiles RocksDB from source (tens of minutes once): keep it in its own target
# directory so it never disturbs the default build.
peers_target="${PEERS_TARGET_DIR:-target/peers}"
out="${COMPARE_OUT:-$(mktemp -d -t wisckey-compare-XXXXXX)}"
mkdir -p "$out"
results="$out/results.jsonl"; : >"$results"
commands="$out/commands.txt"; : >"$commands"
started=$(date +%s)
log() { echo "[compare $(( $(date +%s) - started ))s] $*" >&2; }

log "building (results in $out)"
cargo build --release --bin wisckey >&2
ours=target/release/wisckey
harness="$peers_target/release/wisckey"
# librocksdb-sys runs bindgen, which needs libclang (and a C++ compiler).
has_libclang() { ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so' || [ -n "${LIBCLANG_PATH:-}" ]; }
if [ "$want_peers" = 1 ] && ! has_libclang; then
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  { $sudo_ apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq libclang-dev g++; } >&2 || true
  has_libclang || log "libclang is missing and could not be installed: install it first (Debian/Ubuntu: \
apt-get install libclang-dev g++; elsewhere set LIBCLANG_PATH to the directory holding libclang.so), or run \
with --no-peers"
fi
if [ "$want_peers" = 1 ] && CARGO_TARGET_DIR="$peers_target" cargo build --release -p wisckey-cli --features peers \
    2>"$out/peers-build.log"; then
  peers_ok=1
else
  [ "$want_peers" = 0 ] || log "the peers build failed (see $out/peers-build.log); in-process peers are skipped"
  peers_ok=$([ "$want_peers" = 0 ] && echo skipped || echo 0)
  harness_engines=(wisckey)
  CARGO_TARGET_DIR="$peers_target" cargo build --release -p wisckey-cli --features plot >&2
fi

# Append each JSON line of a command's stdout to results.jsonl with extra fields merged in.
tag() { # tag '"round":1,...' < lines
  local extra="$1"
  grep '^{' | sed "s/^{/{$extra,/" >>"$results" || true
}
run() { # run TAGS CMD...: log the command, run it, keep its JSON lines (a failure is logged, not fatal)
  local extra="$1"; shift
  echo "$*" >>"$commands"
  if ! "$@" 2>>"$out/stderr.log" | tag "$extra"; then
    log "failed: $* (see $out/stderr.log)"
  fi
}
# run-peers.sh prints "== ENGINE num=N value_size=V" and db_bench's "name : x micros/op;" lines.
peer_json() { # peer_json TAGS < run-peers output
  awk -v extra="$1" '
    /^== / { engine = $2; sub(/-1\.23$/, "", engine); next }
    / : / && /micros\/op/ {
      name = $1; for (i = 1; i <= NF; i++) if ($i == ":") { v = $(i + 1); break }
      printf "{%s,\"engine\":\"%s\",\"benchmark\":\"%s\",\"micros_per_op\":%s}\n", extra, engine, name, v
    }' >>"$results"
}

for r in $(seq "$rounds"); do
  for v in "${sizes[@]}"; do
    num=$(( data_mb * 1048576 / (16 + v) ))
    reads=$(( num < max_reads ? num : max_reads ))
    t="\"section\":\"micro\",\"round\":$r,\"size\":$v,\"num\":$num"
    log "round $r/$rounds: value_size=$v num=$num reads=$reads"
    for e in "${harness_engines[@]}"; do
      run "$t,\"tool\":\"harness\"" "$harness" ycsb --engine "$e" --micro "$benches" --records "$num" \
        --operations "$reads" --value_size "$v" --cache_bytes "$cache_bytes" --memtable_bytes "$memtable_bytes" --json
    done
    rm -rf "$out/bench-db"
    run "$t,\"tool\":\"db_bench\",\"engine\":\"wisckey-bench\"" "$ours" bench --benchmarks="$benches" \
      --num="$num" --reads="$reads" --value_size="$v" --db="$out/bench-db" --json
    rm -rf "$out/bench-db"
    echo "PEER_FLAGS=--reads=$reads $peers_script $num $v $benches" >>"$commands"
    if ! PEER_FLAGS="--reads=$reads" bash "$peers_script" "$num" "$v" "$benches" 2>>"$out/stderr.log" \
        | peer_json "$t,\"tool\":\"db_bench\""; then
      log "run-peers.sh failed (see $out/stderr.log)"
    fi
    # RocksDB BlobDB again, with its blob cache on (the same budget as the harness engines').
    blob_cache=(--num="$num" --value_size="$v" --benchmarks="$benches" --reads="$reads" --compression_ratio=0.5
      --compression_type=snappy --key_size=16 --enable_blob_files=true --min_blob_size=0
      --enable_blob_garbage_collection=true --use_blob_cache=1 --blob_cache_size="$cache_bytes")
    echo "db_bench ${blob_cache[*]}" >>"$commands"
    if command -v db_bench >/dev/null; then
      rm -rf "$out/blob-db"
      { echo "== rocksdb-blobdb-cache"; db_bench "${blob_cache[@]}" --db="$out/blob-db" 2>>"$out/stderr.log" \
          | tr '\r' '\n' | grep -E ' : ' || true; } | peer_json "$t,\"tool\":\"db_bench\""
      rm -rf "$out/blob-db"
    fi
  done
  for w in a b c d e f; do
    t="\"section\":\"ycsb\",\"round\":$r,\"size\":1024"
    log "round $r/$rounds: YCSB workload $w"
    for e in "${harness_engines[@]}"; do
      run "$t,\"tool\":\"harness\"" "$harness" ycsb --engine "$e" --workload "$w" --records "$ycsb_records" \
        --operations "$ycsb_ops" --value_size 1024 --cache_bytes "$cache_bytes" --memtable_bytes "$memtable_bytes" --json
    done
  done
done
elapsed=$(( $(date +%s) - started ))
log "runs done in ${elapsed}s; summarising"

{
  echo "date=$(date -u +%Y-%m-%d)"
  echo "nproc=$(nproc)"
  echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "memory=$(free -h | awk '/^Mem:/ {print $2}')"
  echo "disk=$(df -hT . | awk 'NR == 2 {print $1 " " $2 ", " $3 " total"}'); lsblk: $(lsblk -dno NAME,SIZE,ROTA,MODEL 2>/dev/null | awk '$2 != "0B" {printf "%s%s %s rotational=%s %s", sep, $1, $2, $3, $4; sep = "; "}')"
  echo "kernel=$(uname -r)"
  echo "rustc=$(rustc --version)"
  echo "quick=$quick"
  echo "rounds=$rounds"
  echo "data_mb=$data_mb"
  echo "max_reads=$max_reads"
  echo "ycsb=records $ycsb_records, operations $ycsb_ops, 1024-byte values"
  echo "peers_build=$peers_ok"
  echo "cache_bytes=$cache_bytes"
  echo "memtable_bytes=$memtable_bytes"
  echo "seconds=$elapsed"
} >"$out/machine.txt"

python3 - "$out" "$docs" <<'PY'
import json, os, re, statistics, sys
out, write_docs = sys.argv[1], sys.argv[2] == "1"
rows = [json.loads(l) for l in open(os.path.join(out, "results.jsonl")) if l.strip()]
machine = dict(l.rstrip("\n").split("=", 1) for l in open(os.path.join(out, "machine.txt")))
commands = list(dict.fromkeys(l.strip() for l in open(os.path.join(out, "commands.txt"))))

def med(vals):
    return statistics.median(vals) if vals else None

def size_label(v):
    return f"{v // 1024} KB" if v >= 1024 else f"{v} B"

def fmt(v, d=3):
    return "-" if v is None else f"{v:.{d}f}"

def ratio(peer, ours):
    return None if peer is None or not ours else peer / ours

sizes = sorted({r["size"] for r in rows if r.get("section") == "micro"})
benches = ["fillrandom", "readrandom", "readseq", "seekrandom"]
harness = ["fjall", "rocksdb", "rocksdb-blob"]
dbbench = ["leveldb", "rocksdb", "rocksdb-blobdb", "rocksdb-blobdb-cache"]
names = {"fjall": "fjall", "rocksdb": "RocksDB", "rocksdb-blob": "RocksDB blob", "leveldb": "LevelDB 1.23",
         "rocksdb-blobdb": "RocksDB BlobDB", "rocksdb-blobdb-cache": "RocksDB BlobDB + blob cache"}

def micro(tool, engine, size, bench):
    return med([r["micros_per_op"] for r in rows if r.get("section") == "micro" and r.get("tool") == tool
                and r.get("engine") == engine and r.get("size") == size and r.get("benchmark") == bench])

md, charts = [], []
md.append("<!-- compare:begin -->")
md.append("## Generated by `scripts/compare.sh`" + (" --quick" if machine["quick"] == "1" else ""))
md.append("")
md.append(f"Do not edit by hand: `scripts/compare.sh` rewrites everything between the `compare:begin` and "
          f"`compare:end` markers. Run on {machine['date']}, {machine['rounds']} round(s), median per cell, "
          f"{machine['seconds']} s in all. Figures are **µs per operation (lower is better)**; a ratio is "
          f"peer ÷ wisckey, so **above 1 means wisckey is faster**. In-process engines (wisckey, fjall, RocksDB, "
          f"RocksDB blob) run the very same loop (`wisckey ycsb --engine E --micro ...`), which flushes memtables "
          f"(untimed) after each write benchmark and between a YCSB load and run so reads measure the engines' "
          f"files; with --quick a large-value read pass is as many reads as records, the caches' first pass "
          f"(scripts/hot-bench.sh reads 20 000 times); the db_bench columns set "
          f"`wisckey bench` (our db_bench port) beside LevelDB's and RocksDB's own `db_bench`, and their ratios "
          f"are against `wisckey bench` (db_bench does not flush: RocksDB's 64 MiB default memtable can hold much "
          f"of a quick run's data).")
md.append("")
md.append("| machine | |")
md.append("|---|---|")
for k in ["nproc", "cpu", "memory", "disk", "kernel", "rustc"]:
    md.append(f"| {k} | {machine.get(k, '')} |")
md.append(f"| data per value size | {machine['data_mb']} MiB of key+value (so `num` = data / (16 + value size)); "
          f"reads = min(num, {machine['max_reads']}) |")
md.append(f"| YCSB | {machine['ycsb']}; each workload loads a fresh database |")
cache_mib = int(machine.get("cache_bytes", "33554432")) // (1 << 20)
md.append(f"| cache budget | **{cache_mib} MiB for every in-process engine** (`--cache_bytes`): fjall's one cache, "
          f"RocksDB's block cache (shared with BlobDB's blob cache), wisckey's value cache (its uncompressed tables "
          f"are read in place through the page cache, so its block cache holds nothing and is set to 0); the "
          f"\"RocksDB BlobDB + blob cache\" db_bench column: `--use_blob_cache=1 --blob_cache_size` of the same size |")
memtable_mib = int(machine.get("memtable_bytes", "8388608")) // (1 << 20)
md.append(f"| memtable budget | **{memtable_mib} MiB for every in-process engine** (`--memtable_bytes`): fjall's "
          f"`max_memtable_size`, RocksDB's `write_buffer_size`, wisckey's `write_buffer_bytes` and `memtable_log_bytes` "
          f"(the peers' 64 MiB defaults held a whole 64 MiB data set in memory and answered from it) |")
md.append("| engine settings | every engine's defaults with block compression off; RocksDB with 10-bit Bloom "
          "filters; fjall with key-value separation (1 KiB threshold, no blob compression); RocksDB blob: "
          "`enable_blob_files`, `min_blob_size=1024`, blob GC on; wisckey: defaults (`min_separated_value_bytes` 1 KiB). "
          "C++ db_bench peers: their defaults with snappy and `--compression_ratio=0.5` (run-peers.sh) |")
if machine.get("peers_build") == "0":
    md.append("| note | the `--features peers` build failed on this machine: in-process fjall/RocksDB columns are empty |")
elif machine.get("peers_build") == "skipped":
    md.append("| note | run with `--no-peers`: in-process fjall/RocksDB columns are empty |")
md.append("")
for b in benches:
    md.append(f"### {b} (µs/op)")
    md.append("")
    head = ["value", "wisckey"] + [names[e] for e in harness] + ["wisckey bench"] + \
           [names[e] + " db_bench" for e in dbbench] + \
           [f"{names[e]}/wisckey" for e in harness] + [f"{names[e]}/wisckey bench" for e in dbbench]
    md.append("| " + " | ".join(head) + " |")
    md.append("|---" + "|---:" * (len(head) - 1) + "|")
    series = {f"{names[e]}": [] for e in harness}
    series.update({f"{names[e]} db_bench": [] for e in dbbench})
    for s in sizes:
        ours = micro("harness", "wisckey", s, b)
        ours_b = micro("db_bench", "wisckey-bench", s, b)
        h = [micro("harness", e, s, b) for e in harness]
        d = [micro("db_bench", e, s, b) for e in dbbench]
        hr = [ratio(x, ours) for x in h]
        dr = [ratio(x, ours_b) for x in d]
        for e, x in zip(harness, hr):
            series[names[e]].append(x)
        for e, x in zip(dbbench, dr):
            series[names[e] + " db_bench"].append(x)
        cells = [size_label(s), fmt(ours)] + [fmt(x) for x in h] + [fmt(ours_b)] + [fmt(x) for x in d] + \
                [fmt(x, 2) + ("x" if x else "") for x in hr + dr]
        md.append("| " + " | ".join(cells) + " |")
    md.append("")
    md.append(f"![{b}: peer ÷ wisckey](bench/compare-{b}.svg)")
    md.append("")
    charts.append({"title": f"{b}: peer time / wisckey time (above 1: wisckey faster)",
                   "file": f"compare-{b}.svg", "groups": [size_label(s) for s in sizes],
                   "series": [{"name": k, "values": v} for k, v in series.items()]})

def ycsb(engine, w, key="ops_per_sec"):
    return med([r[key] for r in rows if r.get("section") == "ycsb" and r.get("engine") == engine
                and r.get("workload") == w and r.get("phase") == "run"])

def amp(engine, w, key):
    return med([r[key] for r in rows if r.get("section") == "ycsb" and r.get("engine") == engine
                and r.get("workload") == w and r.get("phase") == "amplification" and r.get(key) is not None])

def p99(engine, w):
    vals = []
    for r in rows:
        if r.get("section") == "ycsb" and r.get("engine") == engine and r.get("workload") == w and r.get("phase") == "run":
            ops = r["ops_by_type"]
            main = max(ops, key=lambda k: ops[k]["count"])
            vals.append(ops[main]["p99_micros"])
    return med(vals)

workloads = [w for w in "abcdef" if any(r.get("workload") == w for r in rows)]
engines = ["wisckey"] + harness
if workloads:
    md.append("### YCSB A–F, 1 KB values (operations per second, higher is better)")
    md.append("")
    md.append("A 50/50 read/update, B 95/5 read/update, C read only, D 95/5 read/insert (latest), "
              "E 95/5 scan/insert (scans of 1–100), F 50/50 read/read-modify-write; zipfian except D. "
              "Ratio: wisckey ops/s ÷ peer ops/s (above 1: wisckey faster). p99 is of the workload's most "
              "frequent operation, in µs.")
    md.append("")
    head = ["workload"] + [names.get(e, e) + " ops/s" for e in engines] + \
           [f"wisckey/{names[e]}" for e in harness] + [names.get(e, e) + " p99" for e in engines]
    md.append("| " + " | ".join(head) + " |")
    md.append("|---" + "|---:" * (len(head) - 1) + "|")
    yseries = {names[e]: [] for e in harness}
    for w in workloads:
        ops = [ycsb(e, w) for e in engines]
        rs = [ratio(ops[0], x) for x in ops[1:]]
        for e, x in zip(harness, rs):
            yseries[names[e]].append(x)
        cells = [w.upper()] + [fmt(x, 0) for x in ops] + [fmt(x, 2) + ("x" if x else "") for x in rs] + \
                [fmt(p99(e, w), 1) for e in engines]
        md.append("| " + " | ".join(cells) + " |")
    md.append("")
    md.append("![YCSB: wisckey ÷ peer throughput](bench/compare-ycsb.svg)")
    md.append("")
    charts.append({"title": "YCSB 1 KB: wisckey ops/s / peer ops/s (above 1: wisckey faster)",
                   "file": "compare-ycsb.svg", "groups": [w.upper() for w in workloads],
                   "series": [{"name": k, "values": v} for k, v in yseries.items()]})
    md.append("Amplification after each YCSB run (load + run phase; write amp = bytes written to the device "
              "from `/proc/self/io` ÷ user bytes, and the engine's own counters where it has them; space amp = "
              "`du` (st_blocks) of the database ÷ live key+value bytes):")
    md.append("")
    head = ["workload"] + [f"{names.get(e, e)} write amp (io / engine)" for e in engines] + \
           [f"{names.get(e, e)} space amp" for e in engines]
    md.append("| " + " | ".join(head) + " |")
    md.append("|---" + "|---:" * (len(head) - 1) + "|")
    for w in workloads:
        cells = [w.upper()] + [f"{fmt(amp(e, w, 'write_amp_io'), 2)} / {fmt(amp(e, w, 'write_amp_engine'), 2)}"
                               for e in engines] + [fmt(amp(e, w, "space_amp"), 2) for e in engines]
        md.append("| " + " | ".join(cells) + " |")
    md.append("")
md.append("<details><summary>Exact commands (in run order, one round)</summary>")
md.append("")
md.append("```sh")
md.extend(commands)
md.append("```")
md.append("")
md.append("</details>")
md.append("")
md.append("<!-- compare:end -->")
section = "\n".join(md) + "\n"
open(os.path.join(out, "section.md"), "w").write(section)
json.dump({"charts": charts}, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(section)
if write_docs:
    path = "docs/BENCHMARKS.md"
    text = open(path).read()
    begin, end = "<!-- compare:begin -->", "<!-- compare:end -->"
    if begin in text and end in text:
        text = text[: text.index(begin)] + section.rstrip("\n") + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section
    open(path, "w").write(text)
PY

if [ "$docs" = 1 ]; then
  "$harness" plot --input "$out/summary.json" --out-dir docs/bench >&2
  log "wrote docs/BENCHMARKS.md (generated section) and docs/bench/*.svg"
fi
log "done in $(( $(date +%s) - started ))s; raw results: $results"
