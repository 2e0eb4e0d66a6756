#!/usr/bin/env bash
# Crash campaign (like RocksDB's db_crashtest): N times, run `wisckey stress` with synced
# writes, kill -9 it after a random 0.3-1.5 s, then check with `stress --verify-only` that
# every acknowledged write survived and every value is intact. Stops at the first failure.
#
# Usage: scripts/crash-loop.sh [N=200]   (env: THREADS, KEYS, SEED, KEEP=1 keeps the temp dir,
#        POLICY=<merge policy> e.g. tiering or bush, COMPACTION_THREADS (default 2, the engine's),
#        LWC=1 for light-weight compaction, which works under leveling only, KEYSPACES=N spreads
#        the keys over N keyspaces, RANGE_DELETES=1 adds range deletes, CHECKPOINTS=1 has the
#        workers checkpoint the database now and then and check the copies, AUTO_TUNE=1 lets the
#        engine move the merge policy by itself while the workers' mix shifts every SHIFT_MS
#        (default 2000) ms of wall-clock time between writes, lookups of absent keys and short
#        scans; the moves seen are counted and the policies printed at the end)
set -euo pipefail

cycles=${1:-200}
threads=${THREADS:-4}
keys=${KEYS:-10000}
base_seed=${SEED:-$(date +%s)}

root=$(cd "$(dirname "$0")/.." && pwd)
bin="$root/target/release/wisckey"
if [[ ! -x $bin || -n $(find "$root/src" -newer "$bin" -name '*.rs' -print -quit) ]]; then
    (cd "$root" && cargo build --release --bin wisckey)
fi

work=$(mktemp -d /tmp/wisckey-crash.XXXXXX)
db="$work/db"
exp="$work/expected"
cleanup() { [[ ${KEEP:-0} == 1 ]] || rm -rf "$work"; }
trap cleanup EXIT
echo "crash-loop: $cycles cycles, threads=$threads keys=$keys policy=${POLICY:-leveling} lwc=${LWC:-0}" \
    "keyspaces=${KEYSPACES:-1} range_deletes=${RANGE_DELETES:-0} checkpoints=${CHECKPOINTS:-0}" \
    "auto_tune=${AUTO_TUNE:-0} base seed=$base_seed dir=$work"

common=(--db "$db" --expected "$exp" --threads "$threads" --keys "$keys"
    --merge_policy "${POLICY:-leveling}" --compaction_threads "${COMPACTION_THREADS:-2}" --lwc="${LWC:-0}"
    --keyspaces "${KEYSPACES:-1}" --range_deletes="${RANGE_DELETES:-0}" --checkpoints="${CHECKPOINTS:-0}"
    --auto_tune="${AUTO_TUNE:-0}")
shift_args=()
if [[ ${AUTO_TUNE:-0} == 1 ]]; then shift_args=(--shift_every_ms "${SHIFT_MS:-2000}"); fi
last=""
moves=0
policy_changes=0
prev_policies=""
for ((i = 1; i <= cycles; i++)); do
    seed=$((base_seed + i))
    "$bin" stress "${common[@]}" "${shift_args[@]}" --ops 100000000 --seed "$seed" >"$work/stress.out" 2>&1 &
    pid=$!
    sleep "$(awk -v s="$seed" 'BEGIN { srand(s); printf "%.2f", 0.3 + rand() * 1.2 }')"
    if ! kill -0 "$pid" 2>/dev/null; then
        # The run ended before the kill: its start-up verification failed or it errored.
        set +e; wait "$pid"; rc=$?; set -e
        echo "cycle $i: stress exited early (rc=$rc) with seed $seed:"
        cat "$work/stress.out"
        KEEP=1
        echo "FAILED at cycle $i, seed $seed (db kept in $work)"
        exit 1
    fi
    kill -9 "$pid"
    wait "$pid" 2>/dev/null || true
    if ! last=$("$bin" stress "${common[@]}" --verify-only 2>&1); then
        echo "$last"
        echo "stress output before the kill:"
        tail -5 "$work/stress.out"
        KEEP=1
        echo "FAILED at cycle $i, seed $seed (db kept in $work)"
        exit 1
    fi
    if [[ ${AUTO_TUNE:-0} == 1 ]]; then
        # Moves the run printed before the kill, and whether the recorded policies changed.
        moves=$((moves + $(grep -c '^auto_tune: .* moved from' "$work/stress.out" || true)))
        policies=$(grep '^policies:' <<<"$last" || true)
        if [[ -n $prev_policies && $policies != "$prev_policies" ]]; then policy_changes=$((policy_changes + 1)); fi
        prev_policies=$policies
    fi
    if ((i % 20 == 0)); then echo "cycle $i: $last"; fi
done
if [[ ${AUTO_TUNE:-0} == 1 ]]; then
    echo "auto_tune: $moves moves seen by the runs; the recorded policies changed between $policy_changes" \
        "consecutive verifications; now $prev_policies"
fi
echo "final: $last"
echo "db size: $(du -sh "$db" | cut -f1), files: $(ls "$db" | wc -l)"
echo "$cycles cycles, 0 failures"
