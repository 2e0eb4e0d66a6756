#!/usr/bin/env python3
"""How many bytes must any log-structured GC move to hold a space bound? (docs/BENCHMARKS.md §5)

Simulates an ideal value-log collector on the update stream of YCSB A+F (`wisckey ycsb
--workload=a,f --records=200000 --operations=1000000`: 1M updates in all, YCSB's scrambled
zipfian over the records): exact liveness, no lag in the statistics, survivors moved to
separate cold segments (hot/cold separation), and the victim chosen greedily (most garbage)
or by LFS cost-benefit. Segments are SEGMENT values (16 MiB of 1 KiB values by default,
wisckey's `gc_chunk_bytes`; smaller segments only help a little). Whenever the total exceeds
BOUND x live, the best victim is collected. Prints bytes moved per byte written by the user.

usage: scripts/gc-lower-bound.py [--bound 1.3] [--segment 16384] [--policy greedy|cost-benefit]
                                 [--records 200000] [--updates 1000000] [--uniform]
"""
import argparse
import random

ITEMS = 10_000_000_000  # YCSB's ScrambledZipfianGenerator draws from 10^10 items ...
ZETAN = 26.46902820178302  # ... whose zeta(10^10, 0.99) it hard-codes
THETA = 0.99
FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 1099511628211, (1 << 64) - 1


def fnv64(v):
    h = FNV_OFFSET
    for _ in range(8):
        h = ((h ^ (v & 0xFF)) * FNV_PRIME) & MASK
        v >>= 8
    return h


def scrambled_zipfian(rng, records):
    zeta2 = 1 + 0.5 ** THETA
    alpha = 1 / (1 - THETA)
    eta = (1 - (2 / ITEMS) ** (1 - THETA)) / (1 - zeta2 / ZETAN)
    while True:
        u = rng.random()
        uz = u * ZETAN
        if uz < 1:
            rank = 0
        elif uz < zeta2:
            rank = 1
        else:
            rank = int(ITEMS * (eta * u - eta + 1) ** alpha)
        yield fnv64(rank) % records


def simulate(a):
    rng = random.Random(1)
    keys = (rng.randrange(a.records) for _ in iter(int, 1)) if a.uniform else scrambled_zipfian(rng, a.records)
    where = [-1] * a.records  # segment holding each key's live copy
    segs, live, born = [], [], []
    total = 0
    moved = 0
    clock = 0

    def new_segment():
        segs.append([])
        live.append(0)
        born.append(clock)
        return len(segs) - 1

    heads = {"hot": new_segment(), "cold": new_segment()}

    def append(k, stream):
        nonlocal total
        s = heads[stream]
        if len(segs[s]) >= a.segment:
            s = heads[stream] = new_segment()
        if where[k] >= 0:
            live[where[k]] -= 1
        segs[s].append(k)
        live[s] += 1
        where[k] = s
        total += 1

    def score(s):
        u = live[s] / len(segs[s])
        if a.policy == "greedy":
            return 1 - u
        return (1 - u) * (clock - born[s] + 1) / (1 + u)

    for k in range(a.records):
        append(k, "hot")
    for clock in range(a.updates):
        append(next(keys), "hot")
        while total > a.bound * a.records:
            sealed = [s for s in range(len(segs)) if segs[s] is not None and s not in heads.values()]
            victim = max(sealed, key=score)
            survivors = [k for k in segs[victim] if where[k] == victim]
            total -= len(segs[victim])
            segs[victim] = None
            for k in survivors:
                where[k] = -1
                append(k, "cold")
                moved += 1
    return moved / a.updates


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bound", type=float, default=1.3)
    p.add_argument("--segment", type=int, default=16384)
    p.add_argument("--policy", choices=["greedy", "cost-benefit"], default="greedy")
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--updates", type=int, default=1_000_000)
    p.add_argument("--uniform", action="store_true")
    a = p.parse_args()
    dist = "uniform" if a.uniform else "scrambled zipfian"
    print(f"{dist}, bound {a.bound}, segment {a.segment} values, {a.policy}: "
          f"{simulate(a):.3f} bytes moved per byte updated")


if __name__ == "__main__":
    main()
