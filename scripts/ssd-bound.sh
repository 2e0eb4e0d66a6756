#!/usr/bin/env bash
# Data larger than memory (docs/BENCHMARKS.md, "Data eight times the memory"): every engine —
# wisckey (`wisckey bench`), LevelDB 1.23, RocksDB and RocksDB BlobDB (their own db_bench) —
# runs inside one memory cgroup (v1 `memory.limit_in_bytes`, which charges the page cache too)
# with a data set whose live bytes after the load are at least DATA_RATIO times the limit.
# The load (fillrandom, then overwrite: one process, so the overwrite draws other keys than the
# load, as in one db_bench run) and then each read benchmark are processes of their own on the
# database the previous one left (`--use_existing_db`), so each gets its own device bytes (the
# kernel's per-task I/O accounting: what it caused to be read from and written to the device;
# the load's two benchmarks are split where the first one's line is printed), peak RSS and the
# cgroup's peak (page cache included). Engines alternate within each round; a line's
# figure is the median of the rounds. An engine whose benchmark ran over 10 minutes in round 1
# runs that value size once (the table marks it).
#
# usage: scripts/ssd-bound.sh [--quick] [--rounds N] [--sizes "4096 16384 100"]
#          [--engines "wisckey leveldb rocksdb blobdb"] [--phases LIST] [--ycsb] [--no-micro]
#   --quick       a 256 MiB cgroup (RocksDB's two 64 MiB memtables need more than 128) and data to
#                 match: minutes per engine, not hours
#   --phases      comma list of fillrandom,overwrite,readrandom,readseq,readreverse,seekrandom
#   --ycsb        also YCSB A, B, C, E through `wisckey ycsb --engine` (needs a `--features peers`
#                 build: YCSB_BIN, default target/peers/release/wisckey)
# env: WISCKEY_BIN (pinned binary; default builds target/release/wisckey), MEM_LIMIT_MB (1024;
#      quick 256), DATA_RATIO (8), CACHE_MB (cache bytes every engine gets: 64; quick 16), READS
#      (lookups and seeks per read line: 200000; quick 100000: each read line opens the database,
#      which reads ~90 MB at this size, 4.5 KB per lookup at 20000), YCSB_OPS (200000; quick 20000),
#      SSD_DIR (where databases go; default a temporary directory), SSD_OUT (raw results kept
#      there), WISCKEY_FLAGS / PEER_FLAGS (extra flags), LONG_SECS (600: the one-round cut-off).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0; rounds=3; sizes="4096 16384 100"; engines="wisckey leveldb rocksdb blobdb"
phases="fillrandom,overwrite,readrandom,readseq,readreverse,seekrandom"; ycsb=0; micro=1
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --rounds) rounds="$2"; shift ;;
    --sizes) sizes="$2"; shift ;;
    --engines) engines="$2"; shift ;;
    --phases) phases="$2"; shift ;;
    --ycsb) ycsb=1 ;;
    --no-micro) micro=0 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
  esac
  shift
done
if [ "$quick" = 1 ]; then
  limit_mb="${MEM_LIMIT_MB:-256}"; cache_mb="${CACHE_MB:-16}"; reads="${READS:-100000}"; ycsb_ops="${YCSB_OPS:-20000}"
else
  limit_mb="${MEM_LIMIT_MB:-1024}"; cache_mb="${CACHE_MB:-64}"; reads="${READS:-200000}"; ycsb_ops="${YCSB_OPS:-200000}"
fi
ratio="${DATA_RATIO:-8}"; long_secs="${LONG_SECS:-600}"
cache=$((cache_mb << 20))
out="${SSD_OUT:-$(mktemp -d -t wisckey-ssd-XXXXXX)}"; mkdir -p "$out/raw"
results="$out/results.jsonl"; : >>"$results"
work="${SSD_DIR:-$(mktemp -d -t wisckey-ssd-db-XXXXXX)}"; mkdir -p "$work"
started=$(date +%s)
log() { echo "[ssd-bound $(( $(date +%s) - started ))s] $*" >&2; }

bin="${WISCKEY_BIN:-target/release/wisckey}"
[ -n "${WISCKEY_BIN:-}" ] || cargo build --release --bin wisckey >&2
ldb="$(../shared/peers/build-leveldb-bench.sh)"
if [[ " $engines " == *" rocksdb "* || " $engines " == *" blobdb "* ]] && ! command -v db_bench >/dev/null; then
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rocksdb-tools; } >&2
fi
command -v /usr/bin/time >/dev/null || { apt-get update -qq && apt-get install -y -qq time; } >&2

# One memory cgroup for all engines, one after the other.
cg_mem=/sys/fs/cgroup/memory/wisckey-ssd-$$
if [ ! -d /sys/fs/cgroup/memory ]; then
  echo "needs cgroup v1's memory controller at /sys/fs/cgroup/memory (and root)" >&2; exit 1
fi
mkdir -p "$cg_mem"
echo $((limit_mb << 20)) >"$cg_mem/memory.limit_in_bytes"
cleanup() {
  rm -rf "$work/db"
  [ -n "${SSD_DIR:-}" ] || rm -rf "$work"
  rmdir "$cg_mem" 2>/dev/null || true
}
trap cleanup EXIT

# Entries whose distinct keys after a random load (1 - 1/e of them) hold DATA_RATIO x the limit.
num_for() { python3 -c "import math; print(math.ceil($ratio * ($limit_mb << 20) / ((16 + $1) * (1 - math.exp(-1)))))"; }

io_of() { # PID -> "read_bytes write_bytes" so far (the kernel's per-task I/O accounting)
  # As text: awk prints numbers past 2^31 as 4.04967e+09.
  awk '$1 == "read_bytes:" { r = $2 } $1 == "write_bytes:" { w = $2 }
       END { print (r == "" ? 0 : r), (w == "" ? 0 : w) }' "/proc/$1/io" 2>/dev/null
}

# run_in_cgroup NAME SPLIT CMD...: runs CMD in the cgroup; writes NAME.out (its output) and
# NAME.res ("secs maxrss_kb inblocks outblocks cgroup_peak exit"), and when SPLIT names a
# benchmark, NAME.split: the device bytes read and written until its line was printed.
run_in_cgroup() {
  local name="$1" split="$2"; shift 2
  echo 0 >"$cg_mem/memory.max_usage_in_bytes"
  rm -f "$name.pid" "$name.split"
  /usr/bin/time -f '%e %M %I %O' -o "$name.time" \
    sh -c 'echo $$ >"$1/cgroup.procs"; echo $$ >"$2"; shift 2; exec stdbuf -oL "$@"' \
    sh "$cg_mem" "$name.pid" "$@" >"$name.out" 2>&1 &
  local waiter=$! rc=0
  if [ -n "$split" ]; then
    while kill -0 "$waiter" 2>/dev/null; do
      if [ -s "$name.pid" ] && grep -aqE "$split +: +[0-9.]+ micros/op" "$name.out"; then
        io_of "$(cat "$name.pid")" >"$name.split"; break
      fi
      sleep 0.2
    done
  fi
  wait "$waiter" || rc=$?
  local t; t="$(grep -E '^[0-9.]+ [0-9]+ [0-9]+ [0-9]+$' "$name.time" | tail -1)"
  echo "${t:-0 0 0 0} $(cat "$cg_mem/memory.max_usage_in_bytes") $rc" >"$name.res"
  if [ "$rc" -ne 0 ] && grep -q 'oom_kill [1-9]' "$cg_mem/memory.oom_control" 2>/dev/null; then
    log "$name: killed by the OOM killer"
  fi
}

# The command of one engine's benchmark PHASE (the database is $work/db).
engine_cmd() { # engine phase num value_size (phase "load": fillrandom,overwrite)
  local e="$1" p="$2" n="$3" v="$4" existing=1
  [ "$p" != load ] || { existing=0; p=fillrandom,overwrite; }
  [ "$p" != fillrandom ] || existing=0 # a load without the overwrite pass
  local r="$reads"
  case "$p" in readseq|readreverse) r="$n" ;; esac
  case "$e" in
    wisckey)
      # Tables are uncompressed and read in place through the page cache: the block cache would
      # hold only the blocks mapped tables keep made (CPU saved, not device reads), so the value
      # cache gets the whole budget.
      # shellcheck disable=SC2086
      echo "$bin" bench --num="$n" --value_size="$v" --benchmarks="$p" --db="$work/db" \
        --use_existing_db="$existing" --reads="$r" --seek_nexts=10 --cache_size=0 \
        --value_cache_size="$cache" --bloom_bits=10 --json ${WISCKEY_FLAGS:-} ;;
    leveldb)
      [ "$p" != seekrandom ] || return 1 # LevelDB's db_bench has no --seek_nexts
      # shellcheck disable=SC2086
      echo "$ldb" --num="$n" --value_size="$v" --benchmarks="$p" --db="$work/db" \
        --use_existing_db="$existing" --reads="$r" --cache_size="$cache" --bloom_bits=10 \
        --open_files=8192 --compression_ratio=0.5 --histogram=1 ${PEER_FLAGS:-} ;;
    rocksdb|blobdb)
      local blob=""
      [ "$e" = rocksdb ] || blob="--enable_blob_files=true --min_blob_size=0 --enable_blob_garbage_collection=true --use_blob_cache=1"
      # `stats` after each write benchmark prints the cumulative write stall.
      [ "$p" != fillrandom,overwrite ] || p=fillrandom,stats,overwrite,stats
      # A fixed seed: db_bench's default (0) seeds from the clock, so its read processes drew
      # keys independently of the ones its load wrote (63 % found, the share of the key range
      # the load wrote; the misses answered by filters), where wisckey's bench and LevelDB's
      # db_bench draw the load's keys again in every process. Fixed, each process's first
      # benchmark draws the same sequence: the same key order for every engine.
      # shellcheck disable=SC2086
      echo db_bench --num="$n" --value_size="$v" --benchmarks="$p" --db="$work/db" \
        --use_existing_db="$existing" --reads="$r" --seek_nexts=10 --cache_size="$cache" \
        --bloom_bits=10 --compression_ratio=0.5 --compression_type=snappy --key_size=16 \
        --histogram=1 --seed=1000 $blob ${PEER_FLAGS:-} ;;
  esac
}

# Parse one benchmark's figures out of a process's output into a JSON line of results.jsonl.
record() { # engine size round phase num name reads
  python3 - "$@" <<'PY' >>"$results"
import json, os, re, sys
engine, size, rnd, phase, num, name, reads = sys.argv[1:8]
text = open(name + ".out", errors="replace").read().replace("\r", "\n")
secs, rss_kb, inb, outb, cg_peak, rc = open(name + ".res").read().split()
rec = dict(engine=engine, value_size=int(size), round=int(rnd), phase=phase, num=int(num),
           secs=float(secs), rss_bytes=int(rss_kb) * 1024, read_bytes=int(inb) * 512,
           write_bytes=int(outb) * 512, cgroup_peak=int(cg_peak), rc=int(rc))
if os.path.exists(name + ".split"):  # the load: fillrandom's bytes until its line, then overwrite's
    r, w = map(int, open(name + ".split").read().split())
    if phase == "fillrandom":
        rec["read_bytes"], rec["write_bytes"] = r, w
    else:
        rec["read_bytes"], rec["write_bytes"] = max(rec["read_bytes"] - r, 0), max(rec["write_bytes"] - w, 0)
lines = text.splitlines()
bench_line = re.compile(r"^(\w+)\s+:\s+[\d.]+ micros/op")
start = next((i for i, l in enumerate(lines) if re.match(rf"^{phase}\s+:\s+[\d.]+ micros/op", l)), None)
if start is not None:
    end = next((i for i in range(start + 1, len(lines)) if bench_line.match(lines[i])), len(lines))
    section = lines[start:end]
    line = section[0]
    rec["micros"] = float(re.search(r"([\d.]+) micros/op", line).group(1))
    ops = re.search(r"(\d+) operations;", line)
    if ops:
        rec["ops"] = int(ops.group(1))
    elif phase in ("readrandom", "seekrandom"):
        rec["ops"] = int(reads)
    elif phase in ("fillrandom", "overwrite"):
        rec["ops"] = int(num)
    body = "\n".join(section)
    for l in section:
        if l.startswith("{") and '"benchmark"' in l:  # wisckey's JSON line
            j = json.loads(l)
            rec.update(ops=j["ops"], p99=j.get("p99_micros"), p999=j.get("p999_micros"),
                       gc_wait_s=j.get("gc_wait_secs"), stall_s=j.get("stall_secs"))
    pct = re.search(r"P99: ([\d.]+) P99\.9: ([\d.]+)", body)
    if pct:
        rec.setdefault("p99", float(pct.group(1)))
        rec.setdefault("p999", float(pct.group(2)))
    rows = [tuple(map(float, b)) for b in re.findall(
        r"\[\s*([\d.]+),\s*([\d.]+) \)\s+\d+\s+[\d.]+%\s+([\d.]+)%", body)]
    if rows and "p99" not in rec:  # LevelDB's histogram: buckets with cumulative percentages
        def pctl(p):
            prev = 0.0
            for lo, hi, cum in rows:
                if cum >= p:
                    return lo + (hi - lo) * (p - prev) / max(cum - prev, 1e-9)
                prev = cum
        rec["p99"], rec["p999"] = pctl(99.0), pctl(99.9)
    # RocksDB's `stats` after the benchmark: the cumulative stall so far, minus the one before.
    def stall_upto(i):
        found = [int(h) * 3600 + int(m) * 60 + float(x) for h, m, x in
                 re.findall(r"Cumulative stall: (\d+):(\d+):([\d.]+) H:M:S", "\n".join(lines[:i]))]
        return found[-1] if found else None
    after, before = stall_upto(end + 40 if end < len(lines) else len(lines)), stall_upto(start)
    if engine in ("rocksdb", "blobdb") and after is not None:
        rec["stall_s"] = after - (before or 0.0)
print(json.dumps(rec))
PY
}

run_engine_phases() { # engine size round num
  local e="$1" v="$2" r="$3" n="$4" step cmd
  rm -rf "$work/db"
  # Start from an empty page cache: the previous engine's pages are not this one's.
  echo 0 >"$cg_mem/memory.force_empty" 2>/dev/null || true
  local steps="${phases//,/ }"
  steps="${steps/fillrandom overwrite/load}"
  for step in $steps; do
    cmd="$(engine_cmd "$e" "$step" "$n" "$v")" || continue
    local name="$out/raw/$v-$r-$e-$step" split=""
    [ "$step" != load ] || split=fillrandom
    echo "$cmd" >"$name.cmd"
    log "$e $v B round $r: $step"
    # shellcheck disable=SC2086
    run_in_cgroup "$name" "$split" $cmd
    if [ "$step" = load ]; then
      record "$e" "$v" "$r" fillrandom "$n" "$name" "$reads"
      record "$e" "$v" "$r" overwrite "$n" "$name" "$reads"
      # Allocated bytes, as gc-bench.sh counts them: holes GC punched are free space.
      du -s -B1 "$work/db" | cut -f1 >"$out/raw/$v-$r-$e-overwrite.du"
    else
      record "$e" "$v" "$r" "$step" "$n" "$name" "$reads"
    fi
    local rc; rc="$(cut -d' ' -f6 "$name.res")"
    if [ "$rc" != 0 ]; then
      log "$e $v B round $r: $step failed (exit $rc); see $name.out"
      break
    fi
    # A benchmark over LONG_SECS in round 1: this engine runs this value size once.
    if [ "$r" = 1 ] && python3 -c "
import json, sys
rows = [json.loads(l) for l in open('$results') if l.strip()]
sys.exit(not any(x.get('micros') and x.get('ops') and x['micros'] * x['ops'] / 1e6 > $long_secs
                 for x in rows if x.get('engine') == '$e' and x.get('value_size') == $v and x.get('round') == 1))"; then
      touch "$out/raw/$v-$e.long"
    fi
  done
  rm -rf "$work/db"
}

df_free() { df -P --block-size=1G "$work" | awk 'NR == 2 { print $4 }'; }

if [ "$micro" = 1 ]; then
  for v in $sizes; do
    n="$(num_for "$v")"
    log "value size $v: num $n ($(( n * (16 + v) >> 20 )) MiB written per pass), limit $limit_mb MiB, free $(df_free) GB"
    for r in $(seq "$rounds"); do
      for e in $engines; do
        if [ "$r" -gt 1 ] && [ -e "$out/raw/$v-$e.long" ]; then continue; fi
        run_engine_phases "$e" "$v" "$r" "$n"
      done
    done
  done
fi

if [ "$ycsb" = 1 ]; then
  ybin="${YCSB_BIN:-target/peers/release/wisckey}"
  v=4096
  # YCSB loads each record once: records x (key + value) is the live data.
  recs="$(python3 -c "import math; print(math.ceil($ratio * ($limit_mb << 20) / (24 + $v)))")"
  for r in $(seq "$rounds"); do
    for e in wisckey rocksdb rocksdb-blob; do
      rm -rf "$work/db"; echo 0 >"$cg_mem/memory.force_empty" 2>/dev/null || true
      name="$out/raw/ycsb-$r-$e"
      log "ycsb $e round $r: $recs records, $ycsb_ops operations per workload"
      run_in_cgroup "$name" "" "$ybin" ycsb --engine "$e" --workload a,b,c,e --records "$recs" \
        --operations "$ycsb_ops" --value_size "$v" --cache_bytes "$cache" --db "$work/db" --json
      python3 - "$e" "$r" "$name" <<'PY' >>"$results"
import json, sys
e, r, name = sys.argv[1:4]
res = open(name + ".res").read().split()
for line in open(name + ".out", errors="replace"):
    if line.startswith("{"):
        j = json.loads(line)
        j.update(engine=e, round=int(r), ycsb=True, rss_bytes=int(res[1]) * 1024, cgroup_peak=int(res[4]), rc=int(res[5]))
        print(json.dumps(j))
PY
      rm -rf "$work/db"
    done
  done
fi

log "done; raw results in $out"
python3 - "$results" "$out" "$limit_mb" "$cache_mb" "$reads" <<'PY'
import collections, glob, json, os, statistics, sys
results, out, limit_mb, cache_mb, reads = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
rows = [json.loads(l) for l in open(results) if l.strip()]
micro = [r for r in rows if not r.get("ycsb")]
names = {"wisckey": "wisckey", "leveldb": "LevelDB", "rocksdb": "RocksDB", "blobdb": "BlobDB"}
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
def fmt(x, spec):
    return "–" if x is None else format(x, spec)
def size_label(v):
    return f"{v // 1024} KB" if v >= 1024 else f"{v} B"
print(f"\nMemory limit {limit_mb} MiB (page cache included), cache {cache_mb} MiB per engine, {reads} lookups/seeks per read line.")
for v in sorted({r["value_size"] for r in micro}, reverse=True):
    rs = [r for r in micro if r["value_size"] == v]
    num = rs[0]["num"]
    engines = [e for e in names if any(r["engine"] == e for r in rs)]
    long_ = {e for e in engines if os.path.exists(f"{out}/raw/{v}-{e}.long")}
    print(f"\n### {size_label(v)} values: {num} random puts per pass ({num * (16 + v) / 2**30:.1f} GiB)\n")
    hdr = ["benchmark"] + [f"{names[e]} µs/op" for e in engines] + \
          [f"{names[e]}/wisckey" for e in engines if e != "wisckey"] + \
          [f"{names[e]} read/write B per op" for e in engines] + [f"{names[e]} peak RSS / cgroup MB" for e in engines]
    print("| " + " | ".join(hdr) + " |")
    print("|---" + "|---:" * (len(hdr) - 1) + "|")
    by = collections.defaultdict(list)
    for r in rs:
        by[(r["phase"], r["engine"])].append(r)
    for phase in dict.fromkeys(r["phase"] for r in rs):
        cells = [phase]
        m = {}
        for e in engines:
            runs = [r for r in by[(phase, e)] if r.get("micros") is not None and r["rc"] == 0]
            m[e] = med([r["micros"] for r in runs])
            mark = "†" if e in long_ and runs else ""
            cells.append(fmt(m[e], ".3f") + mark)
        for e in engines:
            if e != "wisckey":
                cells.append(f"{m[e] / m['wisckey']:.2f}×" if m.get(e) and m.get("wisckey") else "–")
        # LevelDB does not print how many entries a scan read: the same keys as wisckey's.
        scanned = {r["round"]: r.get("ops") for r in by[(phase, "wisckey")]}
        for e in engines:
            runs = [r for r in by[(phase, e)] if r["rc"] == 0]
            ops = [r.get("ops") or (r["num"] if phase in ("fillrandom", "overwrite") else scanned.get(r["round"])) for r in runs]
            rb = med([r["read_bytes"] / o for r, o in zip(runs, ops) if o])
            wb = med([r["write_bytes"] / o for r, o in zip(runs, ops) if o])
            cells.append(f"{fmt(rb, '.0f')} / {fmt(wb, '.0f')}")
        for e in engines:
            runs = by[(phase, e)]
            cells.append(f"{fmt(med([r['rss_bytes'] / 2**20 for r in runs]), '.0f')} / "
                         f"{fmt(med([r['cgroup_peak'] / 2**20 for r in runs]), '.0f')}")
        print("| " + " | ".join(cells) + " |")
    # Write tails and space after the overwrite pass.
    print()
    print("| after `overwrite` | " + " | ".join(names[e] for e in engines) + " |")
    print("|---" + "|---:" * len(engines) + "|")
    def row(label, f):
        print(f"| {label} | " + " | ".join(f(e) for e in engines) + " |")
    ow = {e: by[("overwrite", e)] for e in engines}
    row("p99 / p99.9 µs", lambda e: f"{fmt(med([r.get('p99') for r in ow[e]]), '.0f')} / {fmt(med([r.get('p999') for r in ow[e]]), '.0f')}")
    row("writers waited (stall; wisckey: for GC + flush/compaction), s", lambda e: fmt(med([
        (r.get("gc_wait_s") or 0) + (r.get("stall_s") or 0) if (r.get("gc_wait_s") is not None or r.get("stall_s") is not None) else None
        for r in ow[e]]), ".1f"))
    seq = {e: [r.get("ops") for r in by[("readseq", e)] if r.get("ops")] for e in engines}
    live_n = med(seq.get("wisckey") or [n for e in engines for n in seq[e]])
    def space(e):
        dus = []
        for r in ow[e]:
            p = f"{out}/raw/{v}-{r['round']}-{e}-overwrite.du"
            if os.path.exists(p) and live_n:
                dus.append(int(open(p).read()) / (live_n * (16 + v)))
        return fmt(med(dus), ".2f")
    row("space (du ÷ live key+value bytes)", space)
    if long_:
        print(f"\n† one round: a benchmark of this engine ran over 10 minutes ({', '.join(names[e] for e in sorted(long_))}).")
ycsb = [r for r in rows if r.get("ycsb")]
if ycsb:
    print("\n### YCSB, 4 KB values (ops/s)\n")
    phases = [p for p in dict.fromkeys(r.get("phase") or r.get("workload") for r in ycsb) if p]
    engines = list(dict.fromkeys(r["engine"] for r in ycsb))
    print("| workload | " + " | ".join(engines) + " |")
    print("|---" + "|---:" * len(engines) + "|")
    for p in phases:
        cells = []
        for e in engines:
            xs = [r.get("ops_per_sec") for r in ycsb if r["engine"] == e and (r.get("phase") or r.get("workload")) == p]
            cells.append(fmt(med(xs), ".0f"))
        print(f"| {p} | " + " | ".join(cells) + " |")
PY
